/* The pool of device-side checks of the CUDA backend's GPU kernel
 * functions (launch.c, <family>_host.c), and the host functions that read them.
 *
 * Errors found only on the device. An integer division by zero, a label
 * out of range, a gather or scatter index out of range and the executor's NaN check
 * (VQ_EXEC_CHECK_NAN) are seen by the kernels,
 * and the adam step counter lives in device memory, yet the op must fail
 * with the CPU op's message. Each such call takes a check from a
 * per-device pool: a small struct found in device memory, which the
 * kernels write (the smallest bad element or row, by atomicMin; the label
 * or index there, by vq__cuda_label_fetch), and its twin in pinned host
 * memory. After the kernels, a copy on the op's stream brings
 * it to the host, and a host function (vq_gpu_launch_host) reads it in
 * stream order, words the CPU's message and fails the stream work: through
 * the call's defer hook when it has one (the graph executor), else as the
 * stream's sticky error, which reaches the op's vars, with the message kept
 * as the device's last failure for vq_tensor_wait (vq__gpu_work_failed).
 * The host function then puts the check back in its pool: CUDA calls are
 * not allowed there, so nothing is ever freed; the pool only grows to the
 * number of checked calls in flight at once. Compiled only when CUDA is
 * found (have_cuda). */
#include "cuda_internal.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>

#define MAX_DEVICES 64 /* gpu.c's MAX_GPUS */
#define CHECKS_PER_CHUNK 32

/* Held for a push or a pop only (and while a chunk is allocated). */
static pthread_mutex_t checks_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vq__cuda_check *free_checks[MAX_DEVICES];

/* Adds a chunk of checks to dev's free list (dev is the current device).
 * Never freed: see the file comment. */
static int checks_grow(const vq__kcall *k, int dev)
{
    struct vq__cuda_check *c = vq__calloc(CHECKS_PER_CHUNK, sizeof *c);
    void *d = NULL, *h = NULL;
    cudaError_t e = cudaSuccess;
    if (c && (e = cudaMalloc(&d, CHECKS_PER_CHUNK * sizeof(struct vq__cuda_found))) == cudaSuccess)
        e = cudaHostAlloc(&h, CHECKS_PER_CHUNK * sizeof(struct vq__cuda_found),
                          cudaHostAllocPortable);
    if (!c || e != cudaSuccess) {
        (void)cudaGetLastError();
        if (d)
            (void)cudaFree(d);
        free(c);
        return vq__fail(VQ_ENOMEM, "%s: GPU %d: no memory for the device-side checks%s%s",
                        k->def->type, dev, c ? ": " : "", c ? cudaGetErrorString(e) : "");
    }
    for (int i = 0; i < CHECKS_PER_CHUNK; i++) {
        c[i].dev = dev;
        c[i].d = (struct vq__cuda_found *)d + i;
        c[i].h = (struct vq__cuda_found *)h + i;
        c[i].next = i + 1 < CHECKS_PER_CHUNK ? &c[i + 1] : free_checks[dev];
    }
    free_checks[dev] = c;
    return 0;
}

static void check_put(struct vq__cuda_check *c)
{
    pthread_mutex_lock(&checks_lock);
    c->next = free_checks[c->dev];
    free_checks[c->dev] = c;
    pthread_mutex_unlock(&checks_lock);
}

/* A check of kind for the call, its device side reset (bad = none) on the
 * call's stream. */
int vq__cuda_check_begin(const vq__cuda_launch *l, int kind, struct vq__cuda_check **out)
{
    const vq__kcall *k = l->k;
    if (l->dev < 0 || l->dev >= MAX_DEVICES)
        return vq__fail(VQ_ENOSYS, "%s: GPU %d: varq supports GPUs 0 .. %d", k->def->type, l->dev,
                        MAX_DEVICES - 1);
    pthread_mutex_lock(&checks_lock);
    int rc = free_checks[l->dev] ? 0 : checks_grow(k, l->dev);
    struct vq__cuda_check *c = free_checks[l->dev];
    if (rc == 0)
        free_checks[l->dev] = c->next;
    pthread_mutex_unlock(&checks_lock);
    if (rc < 0)
        return rc;
    c->def = k->def;
    c->kind = kind;
    c->defer = k->defer;
    c->defer_user = k->defer_user;
    c->defer_tag = k->defer_tag;
    if (kind == VQ__CUDA_CHECK_DIV || kind == VQ__CUDA_CHECK_POW || kind == VQ__CUDA_CHECK_LABEL ||
        kind == VQ__CUDA_CHECK_INDEX || kind == VQ__CUDA_CHECK_INDEX_ND ||
        kind == VQ__CUDA_CHECK_FINITE || kind == VQ__CUDA_CHECK_RANGE ||
        kind == VQ__CUDA_CHECK_BATCH) {
        /* bad and label to all ones: ULLONG_MAX, "nothing found" */
        rc = vq__cuda_op_called(k, cudaMemsetAsync(c->d, 0xff, 2 * sizeof(long long), l->s),
                                "cudaMemsetAsync");
        if (rc < 0) {
            check_put(c); /* nothing was enqueued */
            return rc;
        }
    }
    *out = c;
    return 0;
}

/* Host function, after the call's kernels and the copy of what they found:
 * the CPU op's error, if they found one; then the check goes back to its
 * pool. No CUDA calls (see stream.h). */
static int check_run(void *arg)
{
    struct vq__cuda_check *c = arg;
    const struct vq__cuda_found *f = c->h;
    int rc = 0;
    if (c->kind == VQ__CUDA_CHECK_DIV && f->bad != ULLONG_MAX)
        rc = vq__op_fail(c->def, "integer division by zero (or overflow) at output element %lld",
                         (long long)f->bad);
    else if (c->kind == VQ__CUDA_CHECK_POW && f->bad != ULLONG_MAX)
        rc = vq__op_fail(c->def, "integer 0 to a negative power at output element %lld",
                         (long long)f->bad);
    else if (c->kind == VQ__CUDA_CHECK_LABEL && f->bad != ULLONG_MAX)
        rc = vq__op_fail(c->def, "label %lld at row %lld is outside [0, %lld)", f->label,
                         (long long)f->bad, c->classes);
    else if (c->kind == VQ__CUDA_CHECK_INDEX && f->bad != ULLONG_MAX)
        /* index.c's indices_check, word for word */
        rc = vq__op_fail(c->def,
                         "index %lld at Indices element %lld is outside [-%lld, %lld) (X's dim "
                         "%d)",
                         f->label, (long long)f->bad, c->dim, c->dim, c->axis);
    else if (c->kind == VQ__CUDA_CHECK_INDEX_ND && f->bad != ULLONG_MAX)
        /* scatter.c's nd_indices_check, word for word: the entry's dim */
        rc =
            vq__op_fail(c->def,
                        "index %lld at Indices element %lld is outside [-%lld, %lld) (X's dim "
                        "%d)",
                        f->label, (long long)f->bad, c->dims[f->bad % (unsigned)c->k],
                        c->dims[f->bad % (unsigned)c->k], c->axis + (int)(f->bad % (unsigned)c->k));
    else if (c->kind == VQ__CUDA_CHECK_RANGE && f->bad != ULLONG_MAX)
        /* vq__range_fail's words (ops/cpu/sequence.c) */
        rc = vq__op_fail(c->def, "%s %lld at %s element %lld is outside [%lld, %lld)", c->what,
                         f->label, c->in_slot, (long long)f->bad, c->lo, c->hi);
    else if (c->kind == VQ__CUDA_CHECK_BATCH && f->bad != ULLONG_MAX)
        /* sample.c's batch_check, word for word */
        rc = vq__op_fail(c->def,
                         "batch index %lld of RoI %lld is outside [0, %lld) (X's batch size)",
                         f->label, (long long)f->bad, c->classes);
    else if (c->kind == VQ__CUDA_CHECK_FINITE && f->bad != ULLONG_MAX)
        rc = vq__nonfinite_fail(c->slot, c->var, f->value, (int64_t)f->bad);
    if (rc < 0)
        rc = vq__gpu_work_failed(c->dev, rc, c->defer, c->defer_user, c->defer_tag);
    check_put(c);
    return rc;
}

/* Ends a checked call whose launches returned rc: when they all launched,
 * the copy of what they found; in any case the host function that reads it
 * (reading nothing after a failed launch) and puts the check back. */
int vq__cuda_check_finish(const vq__cuda_launch *l, struct vq__cuda_check *c, int rc)
{
    if (rc == 0 && c->kind != VQ__CUDA_CHECK_ADAM && c->kind != VQ__CUDA_CHECK_LR_SCHEDULE)
        rc = vq__cuda_op_called(l->k,
                                cudaMemcpyAsync(c->h, c->d, sizeof *c->h, cudaMemcpyDeviceToHost,
                                                l->s),
                                "cudaMemcpyAsync");
    if (rc < 0)
        c->kind = VQ__CUDA_CHECK_NONE;
    int hrc = vq_gpu_launch_host(l->k->x, check_run, c);
    if (hrc < 0) {
        /* It cannot go back in stream order: after the stream's work. */
        (void)cudaStreamSynchronize(l->s);
        (void)cudaGetLastError();
        check_put(c);
    }
    return rc < 0 ? rc : hrc;
}
