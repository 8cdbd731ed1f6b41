/* Ops on GPUs (docs/design/gpu.md): which kernel an op on a GPU runs (on
 * the emulated backend its CPU kernel, run as stream work; on CUDA its
 * CUDA kernel, the launches its definition names (ops/cuda/cuda_ops.h)
 * behind the dispatcher, set once per op when the registry is built:
 * vq__gpu_kernel_pick), and the executor's NaN check of a GPU op's
 * outputs. GPU memory and copies are the tensor runtime's (tensor/gpu.c). */
#include "ops_internal.h"

#ifdef VARQ_HAVE_CUDA
#include "cuda/kernels.h"
#endif

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- ops on GPUs ---- */

void vq__gpu_kernel_pick(vq__op_def *def)
{
#ifdef VARQ_HAVE_CUDA
    if (!def->kernel[VQ_DEV_GPU] && def->cuda) /* named by the definition: cuda/cuda_ops.h */
        def->kernel[VQ_DEV_GPU] = vq__cuda_run;
#else
    (void)def;
#endif
}

/* hot path: no malloc, no global lock */
int vq__gpu_kernel_of(const vq__op_def *def, int (**fn)(const vq__kcall *k))
{
    *fn = NULL;
    const struct vq__stream_backend *be;
    int rc = vq__gpu_backend(&be);
    if (rc < 0)
        return rc;
    /* The emulated backend's device memory is host memory: there every op
     * runs its CPU kernel, as stream work. */
    if (be->host_memory)
        *fn = def->kernel[VQ_DEV_CPU] ? vq__gpu_host_kernel : NULL;
    else
        *fn = def->kernel[VQ_DEV_GPU];
    if (!*fn)
        return vq__fail(VQ_ENOSYS, "%s: no GPU kernel for the %s backend in this build", def->type,
                        be->name);
    return 0;
}

int vq__gpu_kernel_check(const vq__op_def *def)
{
    int (*fn)(const vq__kcall *);
    return vq__gpu_kernel_of(def, &fn);
}

/* What the stream work needs: the call, with copies of the tensor headers
 * (the caller's may be recycled once the op completed at launch; the
 * storage stays until the free ops, which follow this work on the device). */
struct host_kernel {
    const vq__op_def *def;
    int nin, nout;
    void (*defer)(void *user, void *tag, int err, const char *msg);
    void *defer_user, *defer_tag;
    uint64_t rng;
    _Alignas(16) unsigned char params[VQ__MAX_PARAMS];
    vq_tensor *ptr[2 * VQ__MAX_SLOTS];
    vq_tensor hdr[];
};

static int host_kernel_run(void *arg)
{
    struct host_kernel *h = arg;
    vq__kcall k = {.def = h->def,
                   .params = h->params,
                   .in = h->ptr,
                   .nin = h->nin,
                   .out = h->ptr + h->nin,
                   .nout = h->nout,
                   .x = NULL,
                   .rng = h->rng};
    int rc = h->def->kernel[VQ_DEV_CPU](&k);
    int id = h->nin + h->nout ? h->hdr[0].dev.id : 0;
    if (rc < 0)
        rc = vq__gpu_work_failed(id, rc, h->defer, h->defer_user, h->defer_tag);
    free(h);
    return rc;
}

int vq__gpu_host_kernel(const vq__kcall *k)
{
    const struct vq__stream_backend *be;
    int rc = vq__gpu_backend(&be);
    if (rc < 0)
        return rc;
    if (!be->host_memory || !k->def->kernel[VQ_DEV_CPU])
        return vq__fail(VQ_ENOSYS, "%s: no GPU kernel for the %s backend in this build",
                        k->def->type, be->name);
    if (!k->x)
        return vq__op_fail(k->def, "a GPU kernel needs an engine (the op's stream)");
    int n = k->nin + k->nout;
    struct host_kernel *h = vq__malloc(sizeof *h + (size_t)n * sizeof h->hdr[0]);
    if (!h)
        return vq__fail(VQ_ENOMEM, "%s: out of memory", k->def->type);
    h->def = k->def;
    h->nin = k->nin;
    h->nout = k->nout;
    h->defer = k->defer;
    h->defer_user = k->defer_user;
    h->defer_tag = k->defer_tag;
    h->rng = k->rng;
    if (k->def->params_size)
        memcpy(h->params, k->params, k->def->params_size);
    /* The immutable fields only: refs, var and fail_msg may change under
     * other threads meanwhile, and kernels never look at them. */
    for (int i = 0; i < n; i++) {
        const vq_tensor *t = i < k->nin ? k->in[i] : k->out[i - k->nin];
        vq_tensor *c = &h->hdr[i];
        memset(c, 0, sizeof *c);
        atomic_init(&c->refs, 1);
        c->dtype = t->dtype;
        c->ndim = t->ndim;
        memcpy(c->shape, t->shape, sizeof c->shape);
        c->numel = t->numel;
        c->nbytes = t->nbytes;
        c->data = t->data;
        c->dev = t->dev;
        c->alloc = t->alloc;
        atomic_init(&c->var, NULL);
        atomic_init(&c->engine, NULL);
        atomic_init(&c->fail_msg, NULL);
        h->ptr[i] = c;
    }
    if ((rc = vq_gpu_launch_host(k->x, host_kernel_run, h)) < 0)
        free(h);
    return rc;
}

/* ---- the executor's NaN check ---- */

int64_t vq__first_nonfinite(const vq_tensor *t, double *v)
{
    for (int64_t i = 0; (t->dtype == VQ_F32 || t->dtype == VQ_F64) && i < t->numel; i++) {
        *v = t->dtype == VQ_F32 ? ((const float *)t->data)[i] : ((const double *)t->data)[i];
        if (!isfinite(*v))
            return i;
    }
    return -1;
}

int vq__nonfinite_fail(const char *slot, const char *var, double v, int64_t i)
{
    return vq__fail(VQ_EIO, "output %s var %s holds %s at element %lld (VQ_EXEC_CHECK_NAN)", slot,
                    var, isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf", (long long)i);
}

/* The emulated backend's check: stream work after the kernel's. */
struct finite_check {
    vq_tensor t; /* the output's immutable fields, as host_kernel copies them */
    const char *slot, *var;
    void (*defer)(void *user, void *tag, int err, const char *msg);
    void *defer_user, *defer_tag;
};

static int finite_check_run(void *arg)
{
    struct finite_check *c = arg;
    double v;
    int64_t i = vq__first_nonfinite(&c->t, &v);
    int rc = 0;
    if (i >= 0)
        rc = vq__gpu_work_failed(c->t.dev.id, vq__nonfinite_fail(c->slot, c->var, v, i), c->defer,
                                 c->defer_user, c->defer_tag);
    free(c);
    return rc;
}

int vq__gpu_check_finite(const vq__kcall *k, int j, const char *var)
{
    const struct vq__stream_backend *be;
    int rc = vq__gpu_backend(&be);
    if (rc < 0)
        return rc;
    if (!k->defer || !k->x)
        return vq__op_fail(k->def, "the NaN check needs the executor's stream and defer hook");
#ifdef VARQ_HAVE_CUDA
    if (!be->host_memory)
        return vq__cuda_check_finite(k, j, var);
#endif
    const vq_tensor *t = k->out[j];
    struct finite_check *c = vq__malloc(sizeof *c);
    if (!c)
        return vq__fail(VQ_ENOMEM, "%s: out of memory", k->def->type);
    *c = (struct finite_check){.slot = vq__op_out_slot(k->def, j), .var = var,
                               .defer = k->defer, .defer_user = k->defer_user,
                               .defer_tag = k->defer_tag};
    c->t.dtype = t->dtype;
    c->t.numel = t->numel;
    c->t.data = t->data;
    c->t.dev = t->dev;
    if ((rc = vq_gpu_launch_host(k->x, finite_check_run, c)) < 0)
        free(c);
    return rc;
}
