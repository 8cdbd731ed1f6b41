/* What ops/cuda's C files share: launch.c (the launch prologue and the
 * dispatcher), the op families' host glue (<family>_host.c) and checks.c
 * (the pool of device-side checks). One call's launch state as the
 * dispatcher's prologue found it, the wording of a failed launch or CUDA
 * runtime call as the op's error, the few helpers more than one family
 * uses, and the checks a call takes when its errors are found only on the
 * device (see checks.c). Plain C against cudart; the .cu files do not
 * include it. */
#ifndef VARQ_OPS_CUDA_INTERNAL_H
#define VARQ_OPS_CUDA_INTERNAL_H

#include "../ops_internal.h"
#include "../params.h"
#include "kernels.h"

#include <cuda_runtime_api.h>

/* ---- one call's launches (launch.c) ---- */

/* What the launch prologue (launch.c's launch_begin, run once per call by
 * the dispatcher vq__cuda_run) found: the call, its native stream, and its
 * device, which is then the current one. */
typedef struct vq__cuda_launch {
    const vq__kcall *k;
    cudaStream_t s; /* where the kernels launch (the exec context's native stream) */
    /* The backend's stream object the op runs on (vq__gpu_op_stream): what
     * stream-ordered allocation and release take, never s. */
    void *bs;
    int dev;
} vq__cuda_launch;

/* A CUDA runtime call of ours (a memset, a copy) as the op's result: 0, or
 * VQ_EIO naming the op, what was called and CUDA's error (cleared). */
int vq__cuda_op_called(const vq__kcall *k, cudaError_t e, const char *what);

/* A launcher's result as the op's: 0, or its code with a message naming
 * the op (VQ_EIO: CUDA's error; VQ_ENOSYS: why; else: dims past the
 * kernels' limits). */
int vq__cuda_launched(const vq__kcall *k, int rc);

/* ---- helpers of more than one family ---- */

/* shape_host.c: t's strides when contiguous, in elements; and element e of
 * t, as a pointer (for the boxes of vq__cuda_strided_copy). */
void vq__cuda_contiguous_strides(const vq_tensor *t, int64_t *stride);
char *vq__cuda_element(const vq_tensor *t, int64_t e);

/* conv_host.c: conv2d's im2col buffer for one image in the op's stream
 * order (*out NULL for a direct product), and image n of t when each
 * holds per_image elements. */
int vq__cuda_columns(const vq__kcall *k, const vq__cuda_launch *l, const vq__conv *d, vq_dtype dt,
                     vq_tensor **out);
const char *vq__cuda_image(const vq_tensor *t, int64_t n, int64_t per_image);

struct vq__cuda_check;

/* index_host.c: begins the device-side check (VQ__CUDA_CHECK_INDEX) of
 * the indices idx of gather, gather_elements or scatter_elements against
 * X's dim along axis: the first bad element and the index there, for the
 * CPU op's message (vq__cuda_check_finish reports it). *c is NULL when the
 * check could not begin; otherwise the caller finishes it. */
int vq__cuda_index_check_launch(const vq__kcall *k, const vq__cuda_launch *l, const vq_tensor *idx,
                                int64_t dim, int axis, struct vq__cuda_check **c);

/* ---- checks: what the kernels found on the device, read on the host
 * (checks.c) ---- */

/* Same layout in device memory (written by the kernels) and in pinned host
 * memory (the copy the host functions read, and adam's constants). */
struct vq__cuda_found {
    unsigned long long bad;      /* smallest bad element or row; ULLONG_MAX: none */
    long long label;             /* the label at row bad; gather: the index at element bad */
    long long step;              /* adam, lr_schedule: the Step input, brought to the host */
    long long step_out;          /* adam, lr_schedule: StepOut, from the host */
    vq__cuda_adam_consts consts; /* adam: from the host */
    /* adam: its LearningRate input, to the host; lr_schedule: LearningRate,
     * to the host (its old bytes) and back (the new rate) */
    union {
        float f;
        double d;
    } lr;
    double value; /* the NaN check: the element at bad */
};

/* What a check looks for (its host function's message). */
enum {
    VQ__CUDA_CHECK_NONE,
    VQ__CUDA_CHECK_DIV,
    VQ__CUDA_CHECK_LABEL,
    VQ__CUDA_CHECK_ADAM,
    VQ__CUDA_CHECK_INDEX,
    VQ__CUDA_CHECK_LR_SCHEDULE,
    VQ__CUDA_CHECK_FINITE,
    VQ__CUDA_CHECK_POW,
    VQ__CUDA_CHECK_INDEX_ND,
    VQ__CUDA_CHECK_RANGE,
    VQ__CUDA_CHECK_BATCH
};

/* One checked call's check, from its device's pool (checks.c). */
struct vq__cuda_check {
    struct vq__cuda_check *next; /* in its device's free list */
    int dev;
    struct vq__cuda_found *d; /* device memory */
    struct vq__cuda_found *h; /* pinned host memory */
    /* What the host functions need; the call is gone by the time they run. */
    const vq__op_def *def;
    int kind;
    long long classes;      /* roi_align: X's batch size */
    long long dim;          /* gather: X's dim along the axis */
    int axis;               /* gather: the axis; scatter_nd, gather_nd: batch_dims */
    /* scatter_nd, gather_nd: the index tuples' length and X's dim that
     * each entry indexes */
    int k;
    long long dims[VQ_MAX_DIMS];
    /* the range check: what the values are and their input slot (static
     * strings), and the range [lo, hi) */
    const char *what, *in_slot;
    long long lo, hi;
    const char *slot, *var; /* the NaN check: the output's slot and var */
    double lr, beta1, beta2;
    int lr_input; /* adam: LearningRate's dtype when that input gives the rate; -1: lr */
    vq__lr_schedule_params sched; /* lr_schedule */
    void (*defer)(void *user, void *tag, int err, const char *msg);
    void *defer_user, *defer_tag;
};

/* A check of kind for the call, from its device's pool, its device side
 * reset (bad = none) on the call's stream. 0, or the error naming the op
 * (nothing enqueued then). */
int vq__cuda_check_begin(const vq__cuda_launch *l, int kind, struct vq__cuda_check **out);

/* Ends a checked call whose launches returned rc: when they all launched,
 * the copy of what they found to the host; in any case the host function
 * that reads it (reading nothing after a failed launch) and puts the check
 * back. Returns rc, or the error of enqueueing. */
int vq__cuda_check_finish(const vq__cuda_launch *l, struct vq__cuda_check *c, int rc);

/* (index_host.c) Begins the device-side check that every element of idx
 * lies in [lo, hi), what and slot naming them in the message as
 * vq__range_check (ops_internal.h) does. *c is NULL when the check could
 * not begin; otherwise the caller finishes it after its kernels. */
int vq__cuda_range_check_launch(const vq__kcall *k, const vq__cuda_launch *l, const vq_tensor *idx,
                                int64_t lo, int64_t hi, const char *what, const char *slot,
                                struct vq__cuda_check **c);

#endif
