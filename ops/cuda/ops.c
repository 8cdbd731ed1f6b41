/* The GPU kernel functions of the CUDA backend: for every op type, one
 * function that calls the launchers of kernels.h with its tensors' device
 * pointers and its params (params.h) on the op's stream, and returns while
 * the work is still queued (GPU ops complete at launch; engine.h). The
 * registry picks each op's function once, when it is built (gpu.c's
 * vq__gpu_kernel_pick reads the table at the end of this file into the
 * op's definition), and runs the dispatcher vq__cuda_run for ops on GPU
 * tensors while CUDA is the GPU backend: the launch prologue (the op's
 * stream and device) once, then the op's function. On the emulated backend
 * every op runs its CPU kernel as stream work instead. Calls whose errors
 * only the device sees take a check from checks.c's pool. Compiled only
 * when CUDA is found (have_cuda). */
#include "cuda_internal.h"
#include "../shape_shared.h" /* vq__lines_of, vq__matmul_dims_of */

#include <limits.h>
#include <math.h>
#include <string.h>

/* The op codes of params.h are handed to the launchers as they are. */
_Static_assert((int)VQ__BINARY_ADD == (int)VQ__CUDA_ADD &&
                   (int)VQ__BINARY_SUB == (int)VQ__CUDA_SUB &&
                   (int)VQ__BINARY_MUL == (int)VQ__CUDA_MUL &&
                   (int)VQ__BINARY_DIV == (int)VQ__CUDA_DIV &&
                   (int)VQ__BINARY_POW == (int)VQ__CUDA_POW,
               "params.h's binary ops are kernels.h's");
_Static_assert((int)VQ__ACT_RELU == (int)VQ__CUDA_RELU &&
                   (int)VQ__ACT_SIGMOID == (int)VQ__CUDA_SIGMOID &&
                   (int)VQ__ACT_TANH == (int)VQ__CUDA_TANH,
               "params.h's activations are kernels.h's");

_Static_assert((int)VQ__CMP_LESS == (int)VQ__CUDA_LESS &&
                   (int)VQ__CMP_LESS_EQUAL == (int)VQ__CUDA_LESS_EQUAL &&
                   (int)VQ__CMP_GREATER == (int)VQ__CUDA_GREATER &&
                   (int)VQ__CMP_GREATER_EQUAL == (int)VQ__CUDA_GREATER_EQUAL &&
                   (int)VQ__CMP_EQUAL == (int)VQ__CUDA_EQUAL &&
                   (int)VQ__CMP_NOT_EQUAL == (int)VQ__CUDA_NOT_EQUAL &&
                   (int)VQ__CMP_AND == (int)VQ__CUDA_AND && (int)VQ__CMP_OR == (int)VQ__CUDA_OR &&
                   (int)VQ__CMP_MAXIMUM == (int)VQ__CUDA_MAXIMUM &&
                   (int)VQ__CMP_MINIMUM == (int)VQ__CUDA_MINIMUM,
               "params.h's comparisons are kernels.h's");
_Static_assert((int)VQ__EXTREMUM_MAX == (int)VQ__CUDA_EXTREMUM_MAX &&
                   (int)VQ__EXTREMUM_MIN == (int)VQ__CUDA_EXTREMUM_MIN,
               "params.h's extrema are kernels.h's");

/* ---- one call's launches ---- */

/* The launch prologue of every call: the op's stream and device, made
 * current. hot path: no malloc, no global lock */
static int launch_begin(const vq__kcall *k, vq__cuda_launch *l)
{
    *l = (vq__cuda_launch){.k = k, .s = NULL, .bs = NULL, .dev = -1};
    if (!k->x || k->x->ctx.kind != VQ_DEV_GPU || !k->x->stream)
        return vq__op_fail(k->def, "a GPU kernel needs an engine (the op's stream)");
    /* Kernels launch on the current device, which must be the stream's;
     * the engine's GPU workers never set it. */
    cudaError_t e = cudaSetDevice(k->x->ctx.id);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return vq__fail(VQ_EIO, "%s: cudaSetDevice(%d): %s", k->def->type, k->x->ctx.id,
                        cudaGetErrorString(e));
    }
    l->k = k;
    l->s = (cudaStream_t)k->x->stream; /* a GPU op's fn gets the native stream */
    l->bs = vq__gpu_op_stream();
    if (!l->bs)
        return vq__op_fail(k->def, "a GPU kernel runs inside the engine's GPU op call");
    l->dev = k->x->ctx.id;
    return 0;
}

/* A launcher's result as the op's: its code, with a message naming the op. */
static int launched(const vq__kcall *k, int rc)
{
    switch (rc) {
    case 0: return 0;
    case VQ_EIO:
        return vq__fail(VQ_EIO, "%s: CUDA launch failed: %s", k->def->type, vq__cuda_last_error());
    case VQ_ENOSYS: return vq__fail(VQ_ENOSYS, "%s: %s", k->def->type, vq__cuda_last_error());
    default:
        return vq__fail(rc, "%s: the CUDA kernels do not take these tensors (a dim past their "
                            "limits?)",
                        k->def->type);
    }
}

/* The same for a CUDA runtime call of ours (a memset or a copy). */
int vq__cuda_op_called(const vq__kcall *k, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    return vq__fail(VQ_EIO, "%s: %s: %s", k->def->type, what, cudaGetErrorString(e));
}

/* ---- the executor's NaN check ---- */

/* The executor's NaN check of output j (gpu.c's vq__gpu_check_finite). */
int vq__cuda_check_finite(const vq__kcall *k, int j, const char *var)
{
    vq__cuda_launch l;
    struct vq__cuda_check *c;
    int rc = launch_begin(k, &l);
    if (rc < 0 || (rc = vq__cuda_check_begin(&l, VQ__CUDA_CHECK_FINITE, &c)) < 0)
        return rc;
    c->slot = vq__op_out_slot(k->def, j);
    c->var = var;
    const vq_tensor *t = k->out[j];
    rc = launched(k, vq__cuda_find_nonfinite(t->dtype, t->data, t->numel, &c->d->bad,
                                             &c->d->value, l.s));
    return vq__cuda_check_finish(&l, c, rc);
}

/* ---- elementwise (ops/cpu/elementwise.c) ---- */

static int binary_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__binary_params *p = k->params;
    vq_tensor *x = k->in[0], *y = k->in[1], *out = k->out[0];
    vq__bcast b;
    vq__bcast_init(&b, out, x, y);
    if ((p->op != VQ__BINARY_DIV && p->op != VQ__BINARY_POW) ||
        (out->dtype != VQ_I32 && out->dtype != VQ_I64))
        return launched(k, vq__cuda_binary(p->op, out->dtype, x->data, y->data, out->data, b.ndim,
                                           b.shape, b.stride[0], b.stride[1], NULL, l->s));
    /* Integer division or pow: a zero divisor (0 to a negative power) is
     * found on the device. */
    struct vq__cuda_check *c;
    int rc =
        vq__cuda_check_begin(l, p->op == VQ__BINARY_DIV ? VQ__CUDA_CHECK_DIV : VQ__CUDA_CHECK_POW,
                             &c);
    if (rc < 0)
        return rc;
    rc = launched(k, vq__cuda_binary(p->op, out->dtype, x->data, y->data, out->data, b.ndim,
                                     b.shape, b.stride[0], b.stride[1], &c->d->bad, l->s));
    return vq__cuda_check_finish(l, c, rc);
}

static int binary_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__binary_grad_params *p = k->params;
    vq_tensor *g = k->in[0], *x = k->in[1], *y = k->in[2], *dz = k->out[0];
    vq__bcast b;
    vq__bcast_init(&b, g, x, y);
    return launched(k, vq__cuda_binary_grad(p->op, p->wrt, g->dtype, g->data, x->data, y->data,
                                            dz->data, dz->numel, b.ndim, b.shape, b.stride[0],
                                            b.stride[1], l->s));
}

static int scale_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__scale_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    return launched(k,
                    vq__cuda_scale(x->dtype, x->data, o->data, x->numel, p->scale, p->bias, l->s));
}

/* ---- predicates and selects (ops/cpu/compare.c) ---- */

/* Operands a, b, c (NULL: none) broadcast to out's shape, dim by dim. */
static void walk_of(vq__cuda_walk *w, const vq_tensor *out, const vq_tensor *a,
                    const vq_tensor *b, const vq_tensor *c)
{
    const vq_tensor *in[3] = {a, b, c};
    w->ndim = out->ndim;
    for (int i = 0; i < out->ndim; i++)
        w->shape[i] = out->shape[i];
    for (int k = 0; k < 3; k++) {
        int64_t s = 1;
        for (int i = out->ndim - 1; i >= 0; i--) {
            int j = in[k] ? i - (out->ndim - in[k]->ndim) : -1;
            int64_t d = j >= 0 ? in[k]->shape[j] : 1;
            w->stride[k][i] = d == 1 ? 0 : s;
            s *= d;
        }
    }
}

static int compare_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[0], *y = k->in[1], *out = k->out[0];
    vq__cuda_walk w;
    walk_of(&w, out, x, y, NULL);
    return launched(k, vq__cuda_compare(k->def->code, x->dtype, x->data, y->data, out->data, &w,
                                        l->s));
}

static int not_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return launched(k,
                    vq__cuda_logical_not(k->in[0]->data, k->out[0]->data, k->in[0]->numel, l->s));
}

static int abs_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[0];
    return launched(k, vq__cuda_abs(x->dtype, x->data, k->out[0]->data, x->numel, l->s));
}

static int abs_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *g = k->in[0];
    return launched(k, vq__cuda_abs_grad(g->dtype, g->data, k->in[1]->data, k->out[0]->data,
                                         g->numel, l->s));
}

static int where_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *c = k->in[0], *x = k->in[1], *y = k->in[2], *out = k->out[0];
    vq__cuda_walk w;
    walk_of(&w, out, c, x, y);
    return launched(k, vq__cuda_where(vq_dtype_size(out->dtype), c->data, x->data, y->data,
                                      out->data, &w, l->s));
}

/* minmax_grad(dOut, X, Y) and where_grad(dOut, Cond, Z). */
static int select_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l, bool where)
{
    const vq__select_grad_params *p = k->params;
    vq_tensor *g = k->in[0], *a = k->in[1], *b = k->in[2], *dz = k->out[0];
    vq__cuda_walk w;
    walk_of(&w, g, g, a, b);
    return launched(k, vq__cuda_sum_grad(where ? -1 : p->op, p->wrt, g->dtype, g->data, a->data,
                                         where ? NULL : b->data, dz->data, dz->numel, &w,
                                         where ? 2 : 1 + p->wrt, l->s));
}

static int minmax_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return select_grad_gpu(k, l, false);
}

static int where_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return select_grad_gpu(k, l, true);
}

/* ---- activations (ops/cpu/activation.c) ---- */

static int unary_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__unary_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    return launched(k, vq__cuda_unary(p->op, x->dtype, x->data, o->data, x->numel, l->s));
}

static int unary_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__unary_params *p = k->params;
    vq_tensor *y = k->in[0], *g = k->in[1], *d = k->out[0];
    return launched(k, vq__cuda_unary_grad(p->op, y->dtype, y->data, g->data, d->data, y->numel,
                                           l->s));
}

/* params.h's math codes are the kernels' */
_Static_assert((int)VQ__MATH_POWER == (int)VQ__CUDA_POWER &&
                   (int)VQ__MATH_ROUND == (int)VQ__CUDA_ROUND &&
                   (int)VQ__MATH_COUNT == (int)VQ__CUDA_MATH_COUNT,
               "VQ__MATH_* and VQ__CUDA_* differ");

static int math_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__math_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    return launched(k,
                    vq__cuda_math(p->op, x->dtype, p->exponent, x->data, o->data, x->numel, l->s));
}

static int math_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__math_params *p = k->params;
    vq_tensor *x = k->in[0], *y = k->in[1], *g = k->in[2], *d = k->out[0];
    return launched(k, vq__cuda_math_grad(p->op, x->dtype, p->exponent, x->data, y->data, g->data,
                                          d->data, x->numel, l->s));
}

static int log_softmax_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__softmax_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    int64_t outer, len, inner;
    vq__lines_of(x->ndim, x->shape, p->axis, &outer, &len, &inner);
    return launched(k, vq__cuda_log_softmax(x->dtype, x->data, o->data, outer, len, inner, l->s));
}

static int log_softmax_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__softmax_params *p = k->params;
    vq_tensor *y = k->in[0], *g = k->in[1], *d = k->out[0];
    int64_t outer, len, inner;
    vq__lines_of(y->ndim, y->shape, p->axis, &outer, &len, &inner);
    return launched(k, vq__cuda_log_softmax_grad(y->dtype, y->data, g->data, d->data, outer, len,
                                                 inner, l->s));
}

static int softmax_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__softmax_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    int64_t outer, len, inner;
    vq__lines_of(x->ndim, x->shape, p->axis, &outer, &len, &inner);
    return launched(k, vq__cuda_softmax(x->dtype, x->data, o->data, outer, len, inner, l->s));
}

static int softmax_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__softmax_params *p = k->params;
    vq_tensor *y = k->in[0], *g = k->in[1], *d = k->out[0];
    int64_t outer, len, inner;
    vq__lines_of(y->ndim, y->shape, p->axis, &outer, &len, &inner);
    return launched(k, vq__cuda_softmax_grad(y->dtype, y->data, g->data, d->data, outer, len, inner,
                                             l->s));
}

/* ---- losses (ops/cpu/loss.c) ---- */

/* The class losses: X (slot 0) is [..., classes], Label (slot 1) holds one
 * label per row. launch runs the op's kernel with the check's bad row;
 * then the label there is fetched, for the CPU's message. */
static int class_loss_gpu(const vq__kcall *k, const vq__cuda_launch *l,
                          int (*launch)(const vq__kcall *k, unsigned long long *bad, void *s))
{
    vq_tensor *x = k->in[0], *label = k->in[1];
    struct vq__cuda_check *c;
    int rc = vq__cuda_check_begin(l, VQ__CUDA_CHECK_LABEL, &c);
    if (rc < 0)
        return rc;
    c->classes = x->shape[x->ndim - 1];
    rc = launched(k, launch(k, &c->d->bad, l->s));
    if (rc == 0)
        rc = launched(k, vq__cuda_label_fetch(label->dtype, label->data, &c->d->bad, &c->d->label,
                                              l->s));
    return vq__cuda_check_finish(l, c, rc);
}

static int ce_launch(const vq__kcall *k, unsigned long long *bad, void *s)
{
    vq_tensor *x = k->in[0], *l = k->in[1], *o = k->out[0];
    return vq__cuda_cross_entropy(x->dtype, l->dtype, x->data, l->data, o->data, l->numel,
                                  x->shape[x->ndim - 1], bad, s);
}

static int ce_grad_launch(const vq__kcall *k, unsigned long long *bad, void *s)
{
    vq_tensor *x = k->in[0], *l = k->in[1], *g = k->in[2], *d = k->out[0];
    return vq__cuda_cross_entropy_grad(x->dtype, l->dtype, x->data, l->data, g->data, d->data,
                                       l->numel, x->shape[x->ndim - 1], bad, s);
}

static int sce_launch(const vq__kcall *k, unsigned long long *bad, void *s)
{
    vq_tensor *x = k->in[0], *l = k->in[1], *sm = k->out[0], *loss = k->out[1];
    return vq__cuda_softmax_cross_entropy(x->dtype, l->dtype, x->data, l->data, sm->data,
                                          loss->data, l->numel, x->shape[x->ndim - 1], bad, s);
}

static int sce_grad_launch(const vq__kcall *k, unsigned long long *bad, void *s)
{
    vq_tensor *sm = k->in[0], *l = k->in[1], *g = k->in[2], *d = k->out[0];
    return vq__cuda_softmax_cross_entropy_grad(sm->dtype, l->dtype, sm->data, l->data, g->data,
                                               d->data, l->numel, sm->shape[sm->ndim - 1], bad, s);
}

static int ce_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return class_loss_gpu(k, l, ce_launch);
}

static int ce_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return class_loss_gpu(k, l, ce_grad_launch);
}

static int sce_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return class_loss_gpu(k, l, sce_launch);
}

static int sce_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return class_loss_gpu(k, l, sce_grad_launch);
}

/* square_error and mse (and their grads) share their launchers' shapes:
 * the kernel function takes the launcher. */
typedef int (*pair_launcher)(int dtype, const void *x, const void *y, void *out, int64_t n,
                             void *stream);
typedef int (*pair_grad_launcher)(int wrt, int dtype, const void *x, const void *y,
                                  const void *g, void *dz, int64_t n, void *stream);

static int pair_loss_gpu(const vq__kcall *k, const vq__cuda_launch *l, pair_launcher launch)
{
    vq_tensor *x = k->in[0], *y = k->in[1], *o = k->out[0];
    return launched(k, launch(x->dtype, x->data, y->data, o->data, x->numel, l->s));
}

static int pair_loss_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l,
                              pair_grad_launcher launch)
{
    const vq__wrt_params *p = k->params;
    vq_tensor *x = k->in[0], *y = k->in[1], *g = k->in[2], *d = k->out[0];
    return launched(k,
                    launch(p->wrt, x->dtype, x->data, y->data, g->data, d->data, x->numel, l->s));
}

static int se_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return pair_loss_gpu(k, l, vq__cuda_square_error);
}

static int se_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return pair_loss_grad_gpu(k, l, vq__cuda_square_error_grad);
}

static int mse_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return pair_loss_gpu(k, l, vq__cuda_mse);
}

static int mse_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return pair_loss_grad_gpu(k, l, vq__cuda_mse_grad);
}

/* ---- reductions (ops/cpu/reduce.c) ---- */

static int reduce_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__reduce_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    return launched(k, vq__cuda_reduce_axes(k->def->code == VQ__REDUCE_MEAN, x->dtype, x->data,
                                            o->data, x->ndim, x->shape, p->mask, l->s));
}

static int reduce_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__reduce_params *p = k->params;
    vq_tensor *g = k->in[1], *dx = k->out[0];
    return launched(k,
                    vq__cuda_reduce_axes_grad(k->def->code == VQ__REDUCE_MEAN, dx->dtype, g->data,
                                              dx->data, dx->ndim, dx->shape, p->mask, l->s));
}

/* ---- shape ops (ops/cpu/shape.c): boxes of vq__cuda_strided_copy ---- */

static void contiguous_strides(const vq_tensor *t, int64_t *stride)
{
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= t->shape[d];
    }
}

/* Element e of t, as a pointer. */
static char *element(const vq_tensor *t, int64_t e)
{
    return (char *)t->data + e * (int64_t)vq_dtype_size(t->dtype);
}

static int transpose_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__transpose_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    int64_t xs[VQ_MAX_DIMS], src[VQ_MAX_DIMS], dst[VQ_MAX_DIMS];
    contiguous_strides(x, xs);
    contiguous_strides(o, dst);
    for (int i = 0; i < o->ndim; i++)
        src[i] = xs[p->perm[i]];
    return launched(k, vq__cuda_strided_copy((int)vq_dtype_size(x->dtype), o->data, x->data,
                                             o->ndim, o->shape, dst, src, l->s));
}

/* reshape and reshape_grad: the same bytes under another shape. */
static int copy_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[k->nin - 1], *o = k->out[0];
    if (!o->nbytes)
        return 0;
    return vq__cuda_op_called(k,
                              cudaMemcpyAsync(o->data, x->data, o->nbytes, cudaMemcpyDeviceToDevice,
                                              l->s),
                              "cudaMemcpyAsync");
}

/* Each input is a box of the output, at its offset along the axis. */
static int concat_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__concat_params *p = k->params;
    vq_tensor *o = k->out[0];
    int rc = 0;
    int64_t ostride[VQ_MAX_DIMS], pstride[VQ_MAX_DIMS], at = 0;
    contiguous_strides(o, ostride);
    for (int i = 0; i < k->nin && rc == 0; i++) {
        vq_tensor *x = k->in[i];
        if (x->numel == 0)
            continue;
        contiguous_strides(x, pstride);
        rc = launched(k, vq__cuda_strided_copy((int)vq_dtype_size(x->dtype),
                                               element(o, at * ostride[p->axis]), x->data, x->ndim,
                                               x->shape, ostride, pstride, l->s));
        at += x->shape[p->axis];
    }
    return rc;
}

/* dX is the box of dOut where input index was. */
static int concat_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__concat_params *p = k->params;
    vq_tensor *g = k->in[0], *dx = k->out[0];
    if (dx->numel == 0)
        return 0;
    int64_t gstride[VQ_MAX_DIMS], dstride[VQ_MAX_DIMS], at = 0;
    for (int i = 0; i < p->index; i++)
        at += k->in[1 + i]->shape[p->axis];
    contiguous_strides(g, gstride);
    contiguous_strides(dx, dstride);
    return launched(k, vq__cuda_strided_copy((int)vq_dtype_size(dx->dtype), dx->data,
                                             element(g, at * gstride[p->axis]), dx->ndim, dx->shape,
                                             dstride, gstride, l->s));
}

/* The slice's offset in whole (its first element), from the starts. */
static int64_t slice_offset(const vq__slice_params *p, const vq_tensor *whole,
                            const int64_t *stride)
{
    int64_t off = 0;
    for (int d = 0; d < whole->ndim; d++)
        off += p->start[d] * stride[d];
    return off;
}

static int slice_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__slice_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    if (o->numel == 0)
        return 0;
    int64_t xs[VQ_MAX_DIMS], os[VQ_MAX_DIMS];
    contiguous_strides(x, xs);
    contiguous_strides(o, os);
    return launched(k, vq__cuda_strided_copy((int)vq_dtype_size(x->dtype), o->data,
                                             element(x, slice_offset(p, x, xs)), o->ndim, o->shape,
                                             os, xs, l->s));
}

/* Zeros, then dOut at the slice. */
static int slice_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__slice_params *p = k->params;
    vq_tensor *g = k->in[1], *dx = k->out[0];
    if (dx->numel == 0)
        return 0;
    int rc =
        vq__cuda_op_called(k, cudaMemsetAsync(dx->data, 0, dx->nbytes, l->s), "cudaMemsetAsync");
    if (rc < 0 || g->numel == 0)
        return rc;
    int64_t ds[VQ_MAX_DIMS], gs[VQ_MAX_DIMS];
    contiguous_strides(dx, ds);
    contiguous_strides(g, gs);
    return launched(k, vq__cuda_strided_copy((int)vq_dtype_size(dx->dtype),
                                             element(dx, slice_offset(p, dx, ds)), g->data, g->ndim,
                                             g->shape, ds, gs, l->s));
}

static int cast_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[0], *o = k->out[0];
    return launched(k, vq__cuda_cast(x->dtype, o->dtype, x->data, o->data, x->numel, l->s));
}

/* dOut converted back to X's dtype: the same conversions. */
static int cast_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *g = k->in[1], *dx = k->out[0];
    return launched(k, vq__cuda_cast(g->dtype, dx->dtype, g->data, dx->data, g->numel, l->s));
}

/* ---- matmul (ops/cpu/matmul.c) ---- */

static int matmul_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__matmul_params *p = k->params;
    vq_tensor *x = k->in[0], *y = k->in[1], *o = k->out[0];
    vq__matmul_dims d = vq__matmul_dims_of(x->ndim, x->shape, y->ndim, y->shape, p->tx, p->ty);
    return launched(k, vq__cuda_matmul(x->dtype, p->tx, p->ty, d.batch, d.m, d.n, d.k, p->alpha,
                                       x->data, 0, y->data, d.shared, 0, o->data, l->s));
}

/* matmul.c's grad_kernel, with Out_b = alpha A B, A = op(X_b), B = op(Y_b),
 * G = dOut_b, as vq__cuda_matmul products:
 *   dX_b = alpha G op(Y_b)^T, or (X transposed) alpha op(Y_b) G^T;
 *   dY_b = alpha op(X_b)^T G, or (Y transposed) alpha G^T op(X_b).
 * A shared Y is one operand for every batch; its gradient is the sum over
 * the batches: with X's batches stacked (vq__matmul_dims_of) one product sums them in
 * its inner dimension; otherwise (X transposed) one product per batch adds
 * into dY (beta 1 after the first), in the CPU's order of batches. */
static int matmul_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__matmul_params *p = k->params;
    vq_tensor *x = k->in[0], *y = k->in[1], *g = k->in[2], *dz = k->out[0];
    int rc = 0;
    vq__matmul_dims d = vq__matmul_dims_of(x->ndim, x->shape, y->ndim, y->shape, p->tx, p->ty);
    int dt = x->dtype, tx = p->tx, ty = p->ty, sh = d.shared;
    double a = p->alpha;
    if (p->wrt == 0) {
        if (!tx)
            rc = vq__cuda_matmul(dt, 0, !ty, d.batch, d.m, d.k, d.n, a, g->data, 0, y->data, sh, 0,
                                 dz->data, l->s);
        else
            rc = vq__cuda_matmul(dt, ty, 1, d.batch, d.k, d.m, d.n, a, y->data, sh, g->data, 0, 0,
                                 dz->data, l->s);
        return launched(k, rc);
    }
    if (sh && d.batch == 0) /* the sum of no products */
        return vq__cuda_op_called(k, cudaMemsetAsync(dz->data, 0, dz->nbytes, l->s),
                                  "cudaMemsetAsync");
    if (!sh || d.batch == 1) {
        if (!ty)
            rc = vq__cuda_matmul(dt, !tx, 0, d.batch, d.k, d.n, d.m, a, x->data, 0, g->data, 0, 0,
                                 dz->data, l->s);
        else
            rc = vq__cuda_matmul(dt, 1, tx, d.batch, d.n, d.k, d.m, a, g->data, 0, x->data, 0, 0,
                                 dz->data, l->s);
        return launched(k, rc);
    }
    size_t es = vq_dtype_size(x->dtype);
    for (int64_t b = 0; b < d.batch && rc == 0; b++) {
        const char *xb = (const char *)x->data + (size_t)(b * d.m * d.k) * es;
        const char *gb = (const char *)g->data + (size_t)(b * d.m * d.n) * es;
        double beta = b ? 1 : 0;
        if (!ty)
            rc = vq__cuda_matmul(dt, !tx, 0, 1, d.k, d.n, d.m, a, xb, 0, gb, 0, beta, dz->data,
                                 l->s);
        else
            rc =
                vq__cuda_matmul(dt, 1, tx, 1, d.n, d.k, d.m, a, gb, 0, xb, 0, beta, dz->data, l->s);
    }
    return launched(k, rc);
}

/* ---- init (ops/cpu/init.c) ---- */

static int fill_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__fill_params *p = k->params;
    vq_tensor *o = k->out[0];
    return launched(k, vq__cuda_fill(o->dtype, o->data, o->numel, p->value, p->ivalue, l->s));
}

/* The generator state of a random op (init.c's file head) stays in device
 * memory: the kernels read State there when they run, and StateOut is
 * written after them on the same stream by a one-thread kernel (never by
 * the host, which would need the kernels' reads done first). `in` is the
 * op's State slot, `out` its StateOut slot; a call without them has none. */
static const void *state_of(const vq__kcall *k, int in)
{
    return k->nin > in ? k->in[in]->data : NULL;
}

/* The key without State: the seed attribute, or the default generator's
 * (init.c's state_read). */
static uint64_t key_of(const vq__kcall *k, const vq__rng_params *r)
{
    return r->fixed ? r->seed : k->rng;
}

/* After the op's kernels on l's stream: StateOut = State advanced by n. */
static int state_advance(const vq__kcall *k, const vq__cuda_launch *l, int in, int out, uint64_t n)
{
    if (k->nin <= in)
        return 0;
    return vq__cuda_rng_advance(k->in[in]->data, k->out[out]->data, n, l->s);
}

static int uniform_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__random_params *p = k->params;
    vq_tensor *o = k->out[0];
    int rc = vq__cuda_uniform(o->dtype, o->data, o->numel, p->a, p->b, key_of(k, &p->rng),
                              state_of(k, 0), l->s);
    if (rc == 0)
        rc = state_advance(k, l, 0, 1, (uint64_t)o->numel);
    return launched(k, rc);
}

static int gaussian_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__random_params *p = k->params;
    vq_tensor *o = k->out[0];
    int rc = vq__cuda_gaussian(o->dtype, o->data, o->numel, p->a, p->b, key_of(k, &p->rng),
                               state_of(k, 0), l->s);
    if (rc == 0)
        rc = state_advance(k, l, 0, 1, (uint64_t)o->numel);
    return launched(k, rc);
}

static int dropout_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__dropout_params *p = k->params;
    vq_tensor *x = k->in[0];
    int rc = vq__cuda_dropout(x->dtype, x->data, k->out[0]->data, k->out[1]->data, x->numel, p->p,
                              p->scale, p->is_test, key_of(k, &p->rng), state_of(k, 1), l->s);
    if (rc == 0)
        rc = state_advance(k, l, 1, 2, p->is_test ? 0 : (uint64_t)x->numel);
    return launched(k, rc);
}

/* ---- optimizers (ops/cpu/optim.c) ---- */

static int sgd_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__optim_params *p = k->params;
    vq_tensor *pa = k->in[0], *g = k->in[1], *po = k->out[0];
    const void *lr = p->lr_in >= 0 ? k->in[p->lr_in]->data : NULL; /* read by the kernel */
    return launched(k, vq__cuda_sgd(pa->dtype, pa->data, g->data, po->data, pa->numel, p->lr, lr,
                                    l->s));
}

static int momentum_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__optim_params *p = k->params;
    vq_tensor *pa = k->in[0], *g = k->in[1], *v = k->in[2], *po = k->out[0], *vo = k->out[1];
    const void *lr = p->lr_in >= 0 ? k->in[p->lr_in]->data : NULL; /* read by the kernel */
    return launched(k, vq__cuda_momentum(pa->dtype, pa->data, g->data, v->data, po->data, vo->data,
                                         pa->numel, p->lr, lr, p->mu, p->nesterov, l->s));
}

/* Host function between the copy of Step to the host and the copies of
 * the constants and of StepOut to the device: optim.c's step check and
 * bias corrections, computed by the same libm as the CPU op's. */
static int adam_step_run(void *arg)
{
    struct vq__cuda_check *c = arg;
    struct vq__cuda_found *f = c->h;
    long long step = f->step;
    if (step < 0 || step == LLONG_MAX) {
        f->consts.ok = 0;
        f->step_out = step; /* StepOut keeps the count */
        int rc = vq__op_fail(c->def, "input Step (slot 4) is %lld, not a count of updates", step);
        return vq__gpu_work_failed(c->dev, rc, c->defer, c->defer_user, c->defer_tag);
    }
    long long t = step + 1;
    double c1 = 1 - pow(c->beta1, (double)t), c2 = 1 - pow(c->beta2, (double)t);
    double lr = c->lr_input < 0 ? c->lr : c->lr_input == VQ_F32 ? (double)f->lr.f : f->lr.d;
    f->consts.step_size = lr / c1;
    f->consts.inv_sqrt_c2 = 1 / sqrt(c2);
    f->consts.ok = 1;
    f->step_out = t;
    return 0;
}

/* The CPU op reads the i64 step on the host, checks it, derives c1 and c2
 * from it with pow and writes step + 1. Here the step stays on the device
 * (it is a tensor there, updated in place step after step) and is brought
 * to the host in stream order instead: a copy to the check's pinned memory,
 * a host function that does the CPU's check and arithmetic there (the same
 * pow, so the same bits: the device's pow may round differently), then
 * copies of the constants and of StepOut back, then the kernel, which reads
 * the constants when it runs. Nothing blocks the host; copying the step
 * back synchronously would stall the worker once per parameter per step,
 * and a host mirror of the step could not see a step written by another
 * op. A bad step fails the stream work with the CPU's message and makes
 * the kernel write nothing, as the CPU op writes nothing. A LearningRate
 * input comes to the host with the step, as it enters only step_size. */
static int adam_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__optim_params *p = k->params;
    vq_tensor *pa = k->in[0], *g = k->in[1], *m1 = k->in[2], *m2 = k->in[3], *step = k->in[4];
    vq_tensor *po = k->out[0], *m1o = k->out[1], *m2o = k->out[2], *so = k->out[3];
    struct vq__cuda_check *c;
    int rc = vq__cuda_check_begin(l, VQ__CUDA_CHECK_ADAM, &c);
    if (rc < 0)
        return rc;
    c->lr = p->lr;
    c->lr_input = p->lr_in >= 0 ? (int)k->in[p->lr_in]->dtype : -1;
    c->beta1 = p->beta1;
    c->beta2 = p->beta2;
    rc = vq__cuda_op_called(k,
                            cudaMemcpyAsync(&c->h->step, step->data, sizeof c->h->step,
                                            cudaMemcpyDeviceToHost, l->s),
                            "cudaMemcpyAsync");
    if (rc == 0 && p->lr_in >= 0)
        rc = vq__cuda_op_called(k,
                                cudaMemcpyAsync(&c->h->lr, k->in[p->lr_in]->data,
                                                k->in[p->lr_in]->nbytes, cudaMemcpyDeviceToHost,
                                                l->s),
                                "cudaMemcpyAsync");
    if (rc == 0)
        rc = vq_gpu_launch_host(k->x, adam_step_run, c);
    if (rc == 0)
        rc = vq__cuda_op_called(k,
                                cudaMemcpyAsync(&c->d->consts, &c->h->consts, sizeof c->h->consts,
                                                cudaMemcpyHostToDevice, l->s),
                                "cudaMemcpyAsync");
    if (rc == 0)
        rc = vq__cuda_op_called(k,
                                cudaMemcpyAsync(so->data, &c->h->step_out, sizeof c->h->step_out,
                                                cudaMemcpyHostToDevice, l->s),
                                "cudaMemcpyAsync");
    if (rc == 0)
        rc = launched(k, vq__cuda_adam(pa->dtype, pa->data, g->data, m1->data, m2->data, po->data,
                                       m1o->data, m2o->data, pa->numel, p->beta1, p->beta2, p->eps,
                                       &c->d->consts, l->s));
    return vq__cuda_check_finish(l, c, rc);
}

/* Host function between the copies of Step and of LearningRate's old
 * bytes to the host and the copies of LearningRate and StepOut back:
 * optim.c's step check and rate, computed by the CPU op's own code
 * (vq__lr_schedule_value, glibc's cos and pow: the same bits). A bad step
 * fails the stream work with the CPU's message and copies the old bytes
 * back, so the op writes nothing, as the CPU op. */
static int lr_schedule_run(void *arg)
{
    struct vq__cuda_check *c = arg;
    struct vq__cuda_found *f = c->h;
    long long step = f->step;
    f->step_out = step;
    if (step < 0 || step == LLONG_MAX) {
        int rc = vq__op_fail(c->def, "input Step (slot 0) is %lld, not a count of steps", step);
        return vq__gpu_work_failed(c->dev, rc, c->defer, c->defer_user, c->defer_tag);
    }
    double lr = vq__lr_schedule_value(&c->sched, step);
    if (c->sched.dtype == VQ_F32)
        f->lr.f = (float)lr;
    else
        f->lr.d = lr;
    f->step_out = step + 1;
    return 0;
}

/* One element computed from one counter: on the host in stream order, as
 * adam's constants (see adam_gpu), so nothing blocks the host and the rate
 * is the CPU's to the bit; a device kernel would use CUDA's cos and pow. */
static int lr_schedule_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *step = k->in[0], *lr = k->out[0], *so = k->out[1];
    struct vq__cuda_check *c;
    int rc = vq__cuda_check_begin(l, VQ__CUDA_CHECK_LR_SCHEDULE, &c);
    if (rc < 0)
        return rc;
    c->sched = *(const vq__lr_schedule_params *)k->params;
    rc = vq__cuda_op_called(k,
                            cudaMemcpyAsync(&c->h->step, step->data, sizeof c->h->step,
                                            cudaMemcpyDeviceToHost, l->s),
                            "cudaMemcpyAsync");
    if (rc == 0)
        rc = vq__cuda_op_called(k,
                                cudaMemcpyAsync(&c->h->lr, lr->data, lr->nbytes,
                                                cudaMemcpyDeviceToHost, l->s),
                                "cudaMemcpyAsync");
    if (rc == 0)
        rc = vq_gpu_launch_host(k->x, lr_schedule_run, c);
    if (rc == 0)
        rc = vq__cuda_op_called(k,
                                cudaMemcpyAsync(lr->data, &c->h->lr, lr->nbytes,
                                                cudaMemcpyHostToDevice, l->s),
                                "cudaMemcpyAsync");
    if (rc == 0)
        rc = vq__cuda_op_called(k,
                                cudaMemcpyAsync(so->data, &c->h->step_out, sizeof c->h->step_out,
                                                cudaMemcpyHostToDevice, l->s),
                                "cudaMemcpyAsync");
    return vq__cuda_check_finish(l, c, rc);
}

/* ---- convolutions, pools, batch_norm (ops/cpu/conv.c, pool.c, norm.c) ---- */

/* One image's columns for every group ([c * kh * kw, plane]) on the op's
 * device, allocated in the op's stream order; the caller frees it with
 * vq__tensor_release_on on the same stream, after its last use is
 * enqueued. NULL for a direct product. */
static int columns(const vq__kcall *k, const vq__cuda_launch *l, const vq__conv *d, vq_dtype dt,
                   vq_tensor **out)
{
    *out = NULL;
    int64_t n = d->w.c * d->w.kh * d->w.kw * d->plane;
    if (d->direct || n == 0)
        return 0;
    int rc = vq__tensor_empty_at(out, k->x->ctx, dt, 1, &n, l->bs);
    if (rc < 0) {
        return vq__fail_prefixed(rc, "%s: the im2col buffer of %lld elements", k->def->type,
                                 (long long)n);
    }
    return 0;
}

static const char *image(const vq_tensor *t, int64_t n, int64_t per_image)
{
    return (const char *)t->data + (size_t)(n * per_image) * vq_dtype_size(t->dtype);
}

/* Per image: im2col, then one strided-batched product over the groups;
 * then the bias. */
static int conv2d_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__window_params *p = k->params;
    vq_tensor *x = k->in[0], *w = k->in[1], *b = k->nin > 2 ? k->in[2] : NULL, *o = k->out[0];
    if (o->numel == 0)
        return 0;
    vq__conv d =
        vq__conv_of(x->shape, w->shape, p->groups, o->shape, p->stride, p->pad, p->dilation);
    vq_tensor *col;
    int rc = columns(k, l, &d, x->dtype, &col);
    if (rc < 0)
        return rc;
    int64_t xsize = d.w.c * d.w.h * d.w.w, osize = d.m * d.plane;
    for (int64_t n = 0; n < d.w.n && rc == 0; n++) {
        const void *src = image(x, n, xsize);
        if (col) {
            rc = launched(k, vq__cuda_im2col(x->dtype, src, col->data, &d.w, l->s));
            src = col->data;
        }
        if (rc == 0)
            rc = launched(k,
                          vq__cuda_matmul(x->dtype, 0, 0, d.groups, d.mg, d.plane, d.rows, 1,
                                          w->data, 0, src, 0, 0, (void *)image(o, n, osize), l->s));
    }
    if (rc == 0 && b)
        rc = launched(k, vq__cuda_bias_add(x->dtype, o->data, b->data, d.w.n, d.m, d.plane, l->s));
    if (rc == 0 && p->clip)
        rc = launched(k, vq__cuda_clip(x->dtype, o->data, o->numel, p->clip_lo, p->clip_hi, l->s));
    vq__tensor_release_on(col, l->bs);
    return rc;
}

static int conv2d_grad_products(const vq__kcall *k, const vq__cuda_launch *l, vq_tensor *g);

/* conv.c's gradients: wrt 0, per image, W_g^T dOut_g into the columns,
 * then col2im into dX (direct: into dX itself); wrt 1, per image, im2col
 * and dOut_g times the columns transposed, added into dW after the first
 * image; wrt 2, the sum of dOut over every dim but the channels. */
static int conv2d_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__window_params *p = k->params;
    vq_tensor *g = k->in[2], *dz = k->out[0];
    if (dz->numel == 0)
        return 0;
    vq_dtype dt = dz->dtype;
    vq_tensor *masked = NULL;
    if (p->clip && g->numel > 0) {
        /* dOut through the clip first (conv.c): where lo < Out < hi */
        int rc = vq__tensor_empty_at(&masked, k->x->ctx, dt, g->ndim, g->shape, l->bs);
        if (rc < 0)
            return vq__fail_prefixed(rc, "conv2d_grad: dOut through the clip");
        rc = launched(k, vq__cuda_clip_mask(dt, g->data, k->in[3]->data, masked->data, g->numel,
                                            p->clip_lo, p->clip_hi, l->s));
        if (rc < 0) {
            vq__tensor_release_on(masked, l->bs);
            return rc;
        }
        g = masked;
    }
    int rc = conv2d_grad_products(k, l, g);
    vq__tensor_release_on(masked, l->bs);
    return rc;
}

/* conv2d_grad_gpu's products, from dOut g (masked by the clip when there
 * is one). */
static int conv2d_grad_products(const vq__kcall *k, const vq__cuda_launch *l, vq_tensor *g)
{
    const vq__window_params *p = k->params;
    vq_tensor *x = k->in[0], *w = k->in[1], *dz = k->out[0];
    vq_dtype dt = dz->dtype;
    if (p->wrt == 2)
        return launched(k, vq__cuda_reduce_axes(0, dt, g->data, dz->data, 4, g->shape, 1u | 4u | 8u,
                                                l->s));
    vq__conv d =
        vq__conv_of(x->shape, w->shape, p->groups, g->shape, p->stride, p->pad, p->dilation);
    if (p->wrt == 1 && d.w.n == 0) /* the sum of no products */
        return vq__cuda_op_called(k, cudaMemsetAsync(dz->data, 0, dz->nbytes, l->s),
                                  "cudaMemsetAsync");
    vq_tensor *col;
    int rc = columns(k, l, &d, dt, &col);
    if (rc < 0)
        return rc;
    int64_t xsize = d.w.c * d.w.h * d.w.w, gsize = d.m * d.plane;
    for (int64_t n = 0; n < d.w.n && rc == 0; n++) {
        const void *gn = image(g, n, gsize);
        if (p->wrt == 0) {
            void *dxn = (void *)image(dz, n, xsize);
            rc = launched(k, vq__cuda_matmul(dt, 1, 0, d.groups, d.rows, d.plane, d.mg, 1, w->data,
                                             0, gn, 0, 0, col ? col->data : dxn, l->s));
            if (rc == 0 && col)
                rc = launched(k, vq__cuda_col2im(dt, col->data, dxn, &d.w, l->s));
            continue;
        }
        const void *src = image(x, n, xsize);
        if (col) {
            rc = launched(k, vq__cuda_im2col(dt, src, col->data, &d.w, l->s));
            src = col->data;
        }
        if (rc == 0)
            rc = launched(k, vq__cuda_matmul(dt, 0, 1, d.groups, d.mg, d.rows, d.plane, 1, gn, 0,
                                             src, 0, n ? 1 : 0, dz->data, l->s));
    }
    vq__tensor_release_on(col, l->bs);
    return rc;
}

/* conv.c's conv_transpose2d: conv2d_grad's dX for a conv2d over Out's
 * shape whose dOut is X, then the bias. */
static int conv_transpose2d_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__window_params *p = k->params;
    vq_tensor *x = k->in[0], *w = k->in[1], *b = k->nin > 2 ? k->in[2] : NULL, *o = k->out[0];
    if (o->numel == 0)
        return 0;
    int rc = 0;
    vq_dtype dt = o->dtype;
    vq__conv d =
        vq__conv_of(o->shape, w->shape, p->groups, x->shape, p->stride, p->pad, p->dilation);
    if (x->numel == 0) {
        rc = vq__cuda_op_called(k, cudaMemsetAsync(o->data, 0, o->nbytes, l->s), "cudaMemsetAsync");
    } else {
        vq_tensor *col;
        if ((rc = columns(k, l, &d, dt, &col)) < 0)
            return rc;
        int64_t osize = d.w.c * d.w.h * d.w.w, xsize = d.m * d.plane;
        for (int64_t n = 0; n < d.w.n && rc == 0; n++) {
            void *on = (void *)image(o, n, osize);
            rc = launched(k,
                          vq__cuda_matmul(dt, 1, 0, d.groups, d.rows, d.plane, d.mg, 1, w->data, 0,
                                          image(x, n, xsize), 0, 0, col ? col->data : on, l->s));
            if (rc == 0 && col)
                rc = launched(k, vq__cuda_col2im(dt, col->data, on, &d.w, l->s));
        }
        vq__tensor_release_on(col, l->bs);
    }
    if (rc == 0 && b)
        rc = launched(k, vq__cuda_bias_add(dt, o->data, b->data, o->shape[0], o->shape[1],
                                           o->shape[2] * o->shape[3], l->s));
    return rc;
}

/* ---- 3-D convolutions (ops/cpu/conv3d.c; conv3d.cu) ---- */

/* One image's columns for every group ([c * kd * kh * kw, plane]) on the
 * op's device, in the op's stream order (columns' rule). */
static int vol_columns(const vq__kcall *k, const vq__cuda_launch *l, const vq__vol *v, vq_dtype dt,
                       vq_tensor **out)
{
    *out = NULL;
    int64_t n = v->groups * v->rows * v->plane;
    if (n == 0)
        return 0;
    int rc = vq__tensor_empty_at(out, k->x->ctx, dt, 1, &n, l->bs);
    if (rc < 0) {
        return vq__fail_prefixed(rc, "%s: the vol2col buffer of %lld elements", k->def->type,
                                 (long long)n);
    }
    return 0;
}

/* dX of the conv3d v over dX's shape from its dOut g, per image: W_g^T
 * dOut_g for every group (one batched product) into the columns, then
 * col2vol (conv3d.c's conv3d_dx; conv_transpose3d's Out). */
static int vol_dx(const vq__kcall *k, const vq__cuda_launch *l, const vq__vol *v,
                  const vq_tensor *w, const vq_tensor *g, vq_tensor *dx)
{
    vq_dtype dt = dx->dtype;
    vq_tensor *col;
    int rc = vol_columns(k, l, v, dt, &col);
    if (rc < 0)
        return rc;
    if (!col)
        return vq__cuda_op_called(k, cudaMemsetAsync(dx->data, 0, dx->nbytes, l->s),
                                  "cudaMemsetAsync");
    int64_t xsize = v->c * v->vol, gsize = v->m * v->plane;
    for (int64_t n = 0; n < v->n && rc == 0; n++) {
        rc = launched(k, vq__cuda_matmul(dt, 1, 0, v->groups, v->rows, v->plane, v->mg, 1, w->data,
                                         0, image(g, n, gsize), 0, 0, col->data, l->s));
        if (rc == 0)
            rc = launched(k, vq__cuda_col2vol(dt, col->data, (void *)image(dx, n, xsize), v, v->c,
                                              l->s));
    }
    vq__tensor_release_on(col, l->bs);
    return rc;
}

/* Per image: vol2col, then one batched product over the groups; then the
 * bias. */
static int conv3d_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__conv3d_params *p = k->params;
    vq_tensor *x = k->in[0], *w = k->in[1], *b = k->nin > 2 ? k->in[2] : NULL, *o = k->out[0];
    if (o->numel == 0)
        return 0;
    vq__vol v = vq__vol_of(x->shape, w->shape, p->groups, o->shape, p->stride, p->pad, p->dilation);
    vq_tensor *col;
    int rc = vol_columns(k, l, &v, x->dtype, &col);
    if (rc < 0)
        return rc;
    int64_t xsize = v.c * v.vol, osize = v.m * v.plane;
    for (int64_t n = 0; n < v.n && rc == 0 && col; n++) {
        rc = launched(k, vq__cuda_vol2col(x->dtype, image(x, n, xsize), col->data, &v, v.c, l->s));
        if (rc == 0)
            rc = launched(k, vq__cuda_matmul(x->dtype, 0, 0, v.groups, v.mg, v.plane, v.rows, 1,
                                             w->data, 0, col->data, 0, 0,
                                             (void *)image(o, n, osize), l->s));
    }
    if (rc == 0 && !col) /* no input channels: the sums of nothing */
        rc = vq__cuda_op_called(k, cudaMemsetAsync(o->data, 0, o->nbytes, l->s), "cudaMemsetAsync");
    if (rc == 0 && b)
        rc = launched(k, vq__cuda_bias_add(x->dtype, o->data, b->data, v.n, v.m, v.plane, l->s));
    vq__tensor_release_on(col, l->bs);
    return rc;
}

/* conv3d.c's gradients: wrt 0 vol_dx; wrt 1, per image, vol2col and
 * dOut_g times the columns transposed, added into dW after the first
 * image; wrt 2, the sum of dOut over every dim but the channels. */
static int conv3d_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__conv3d_params *p = k->params;
    vq_tensor *x = k->in[0], *w = k->in[1], *g = k->in[2], *dz = k->out[0];
    if (dz->numel == 0)
        return 0;
    vq_dtype dt = dz->dtype;
    if (p->wrt == 2)
        return launched(k, vq__cuda_reduce_axes(0, dt, g->data, dz->data, 5, g->shape,
                                                1u | 4u | 8u | 16u, l->s));
    vq__vol v = vq__vol_of(x->shape, w->shape, p->groups, g->shape, p->stride, p->pad, p->dilation);
    if (p->wrt == 0)
        return vol_dx(k, l, &v, w, g, dz);
    vq_tensor *col = NULL;
    int rc = v.n == 0 ? 0 : vol_columns(k, l, &v, dt, &col);
    if (rc < 0)
        return rc;
    if (!col) /* the sum of no products */
        return vq__cuda_op_called(k, cudaMemsetAsync(dz->data, 0, dz->nbytes, l->s),
                                  "cudaMemsetAsync");
    int64_t xsize = v.c * v.vol, gsize = v.m * v.plane;
    for (int64_t n = 0; n < v.n && rc == 0; n++) {
        rc = launched(k, vq__cuda_vol2col(dt, image(x, n, xsize), col->data, &v, v.c, l->s));
        if (rc == 0)
            rc = launched(k, vq__cuda_matmul(dt, 0, 1, v.groups, v.mg, v.rows, v.plane, 1,
                                             image(g, n, gsize), 0, col->data, 0, n ? 1 : 0,
                                             dz->data, l->s));
    }
    vq__tensor_release_on(col, l->bs);
    return rc;
}

/* conv3d.c's conv_transpose3d: conv3d_grad's dX for a conv3d over Out's
 * shape whose dOut is X, then the bias. */
static int conv_transpose3d_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__conv3d_params *p = k->params;
    vq_tensor *x = k->in[0], *w = k->in[1], *b = k->nin > 2 ? k->in[2] : NULL, *o = k->out[0];
    if (o->numel == 0)
        return 0;
    vq__vol v = vq__vol_of(o->shape, w->shape, p->groups, x->shape, p->stride, p->pad, p->dilation);
    int rc = x->numel == 0 ? vq__cuda_op_called(k, cudaMemsetAsync(o->data, 0, o->nbytes, l->s),
                                                "cudaMemsetAsync")
                           : vol_dx(k, l, &v, w, x, o);
    if (rc == 0 && b)
        rc = launched(k,
                      vq__cuda_bias_add(o->dtype, o->data, b->data, v.n, o->shape[1], v.vol, l->s));
    return rc;
}

static vq__window pool_window(const vq__window_params *p, const vq_tensor *x,
                              const int64_t *out)
{
    return vq__window_make(x->shape, p->kernel[0], p->kernel[1], out, p->stride, p->pad,
                           p->dilation);
}

/* max_pool2d (max) and avg_pool2d. */
static int pool_gpu(const vq__kcall *k, const vq__cuda_launch *l, bool max)
{
    const vq__window_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    if (o->numel == 0)
        return 0;
    vq__window w = pool_window(p, x, o->shape);
    if (max)
        return launched(k, vq__cuda_max_pool(x->dtype, x->data, o->data, &w, l->s));
    return launched(k,
                    vq__cuda_avg_pool(x->dtype, x->data, o->data, &w, p->count_include_pad, l->s));
}

static int pool_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l, bool max)
{
    const vq__window_params *p = k->params;
    vq_tensor *x = k->in[0], *g = k->in[1], *dx = k->out[0];
    if (dx->numel == 0)
        return 0;
    vq__window w = pool_window(p, x, g->shape);
    if (max)
        return launched(k, vq__cuda_max_pool_grad(x->dtype, x->data, g->data, dx->data, &w, l->s));
    return launched(k, vq__cuda_avg_pool_grad(x->dtype, g->data, dx->data, &w, p->count_include_pad,
                                              l->s));
}

static int max_pool_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return pool_gpu(k, l, true);
}

static int max_pool_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return pool_grad_gpu(k, l, true);
}

static int max_pool_argmax_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[0], *o = k->out[0];
    if (o->numel == 0)
        return 0;
    vq__window w = pool_window(k->params, x, o->shape);
    const vq__window_params *p = k->params;
    return launched(k, vq__cuda_max_pool_argmax(x->dtype, x->data, o->data, &w, p->column_major,
                                                l->s));
}

static int avg_pool_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return pool_gpu(k, l, false);
}

static int avg_pool_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return pool_grad_gpu(k, l, false);
}

/* global_avg_pool: reduce.c's mean over X seen as [N * C, the rest]. */
static int global_pool_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[0], *o = k->out[0];
    if (o->numel == 0)
        return 0;
    int64_t len = 1;
    for (int d = 2; d < x->ndim; d++)
        len *= x->shape[d];
    return launched(k, vq__cuda_reduce(1, x->dtype, x->data, o->data, o->numel, len, 1, l->s));
}

/* dOut * (1 / count) spread over the dims after the channels: mean_grad. */
static int global_pool_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *g = k->in[1], *dx = k->out[0];
    if (dx->numel == 0)
        return 0;
    unsigned mask = 0;
    for (int d = 2; d < dx->ndim; d++)
        mask |= 1u << d;
    return launched(k, vq__cuda_reduce_axes_grad(1, dx->dtype, g->data, dx->data, dx->ndim,
                                                 dx->shape, mask, l->s));
}

/* X as [outer, C, inner]. */
static void channel_layout(const vq_tensor *x, int64_t *outer, int64_t *c, int64_t *inner)
{
    *outer = x->shape[0];
    *c = x->shape[1];
    *inner = 1;
    for (int d = 2; d < x->ndim; d++)
        *inner *= x->shape[d];
}

static int batch_norm_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__batch_norm_params *p = k->params;
    vq_tensor *const *in = k->in;
    int64_t outer, c, inner;
    channel_layout(in[0], &outer, &c, &inner);
    return launched(k, vq__cuda_batch_norm(in[0]->dtype, in[0]->data, in[1]->data, in[2]->data,
                                           in[3]->data, in[4]->data, k->out[0]->data, outer, c,
                                           inner, p->epsilon, l->s));
}

/* (X, Scale, Mean, Var, dOut) -> dZ. */
static int batch_norm_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__batch_norm_params *p = k->params;
    vq_tensor *const *in = k->in;
    int64_t outer, c, inner;
    channel_layout(in[0], &outer, &c, &inner);
    return launched(k,
                    vq__cuda_batch_norm_grad(p->wrt, in[0]->dtype, in[0]->data, in[1]->data,
                                             in[2]->data, in[3]->data, in[4]->data, k->out[0]->data,
                                             outer, c, inner, p->epsilon, l->s));
}

static int batch_norm_train_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__batch_norm_params *p = k->params;
    vq_tensor *const *in = k->in, *const *out = k->out;
    int64_t outer, c, inner;
    channel_layout(in[0], &outer, &c, &inner);
    return launched(k, vq__cuda_batch_norm_train(in[0]->dtype, in[0]->data, in[1]->data,
                                                 in[2]->data, in[3]->data, in[4]->data,
                                                 out[0]->data, out[1]->data, out[2]->data, outer, c,
                                                 inner, p->epsilon, p->momentum, l->s));
}

/* (X, Scale, then dOut, dNewMean, dNewVar as grads says) -> dZ. */
static int batch_norm_train_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__batch_norm_params *p = k->params;
    vq_tensor *const *in = k->in;
    const void *g[3];
    for (int bit = 1, s = 2, j = 0; bit <= 4; bit <<= 1, j++)
        g[j] = p->grads & bit ? in[s++]->data : NULL;
    int64_t outer, c, inner;
    channel_layout(in[0], &outer, &c, &inner);
    return launched(k,
                    vq__cuda_batch_norm_train_grad(p->wrt, in[0]->dtype, in[0]->data, in[1]->data,
                                                   g[0], g[1], g[2], k->out[0]->data, outer, c,
                                                   inner, p->epsilon, p->momentum, l->s));
}

/* ---- indexing, extrema, layout (ops/cpu/index.c, extremum.c, layout.c) ---- */

/* Begins the device-side check of gather's and gather_elements' indices
 * idx against X's dim along axis: the first bad element and the index
 * there, for index.c's message (vq__cuda_check_finish reports it). *c is
 * NULL when the check could not begin; otherwise the caller finishes it. */
static int index_check_launch(const vq__kcall *k, const vq__cuda_launch *l, const vq_tensor *idx,
                              int64_t dim, int axis, struct vq__cuda_check **c)
{
    int rc = vq__cuda_check_begin(l, VQ__CUDA_CHECK_INDEX, c);
    if (rc < 0) {
        *c = NULL;
        return rc;
    }
    (*c)->dim = dim;
    (*c)->axis = axis;
    rc = launched(k, vq__cuda_index_check(idx->dtype, idx->data, idx->numel, dim, &(*c)->d->bad,
                                          l->s));
    if (rc == 0)
        rc = launched(k, vq__cuda_label_fetch(idx->dtype, idx->data, &(*c)->d->bad, &(*c)->d->label,
                                              l->s));
    return rc;
}

/* gather and gather_grad: the indices are checked on the device; the
 * kernels skip a bad index's rows. */
static int gather_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__gather_params *p = k->params;
    bool grad = k->nin == 3;
    vq_tensor *idx = k->in[1], *o = k->out[0];
    vq_tensor *x = grad ? o : k->in[0]; /* X's shape: dX's for the gradient */
    int64_t outer, dim, inner;
    vq__lines_of(x->ndim, x->shape, p->axis, &outer, &dim, &inner);
    struct vq__cuda_check *c;
    int rc = index_check_launch(k, l, idx, dim, p->axis, &c);
    if (!c)
        return rc;
    if (rc == 0 && grad)
        rc = launched(k, vq__cuda_gather_grad(o->dtype, idx->dtype, idx->data, k->in[2]->data,
                                              o->data, outer, dim, inner, idx->numel, l->s));
    else if (rc == 0)
        rc = launched(k, vq__cuda_gather((int)vq_dtype_size(x->dtype), idx->dtype, x->data,
                                         idx->data, o->data, outer, dim, inner, idx->numel, l->s));
    return vq__cuda_check_finish(l, c, rc);
}

/* gather_elements and its gradient: the indices checked on the device as
 * gather's (index_check_launch), against X's dim along the axis. */
static int gather_elements_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__gather_params *p = k->params;
    bool grad = k->nin == 3;
    vq_tensor *idx = k->in[1], *o = k->out[0];
    vq_tensor *x = grad ? o : k->in[0]; /* X's shape: dX's for the gradient */
    struct vq__cuda_check *c;
    int rc = index_check_launch(k, l, idx, x->shape[p->axis], p->axis, &c);
    if (!c)
        return rc;
    if (rc == 0 && grad)
        rc = launched(k, vq__cuda_gather_elements_grad(o->dtype, idx->dtype, idx->data,
                                                       k->in[2]->data, o->data, x->ndim, x->shape,
                                                       idx->shape, p->axis, l->s));
    else if (rc == 0)
        rc = launched(k, vq__cuda_gather_elements((int)vq_dtype_size(x->dtype), idx->dtype, x->data,
                                                  idx->data, o->data, x->ndim, x->shape, idx->shape,
                                                  p->axis, l->s));
    return vq__cuda_check_finish(l, c, rc);
}

/* Each output is the box of X at its offset along the axis. */
static int split_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__split_params *p = k->params;
    vq_tensor *x = k->in[0];
    int rc = 0;
    int64_t xstride[VQ_MAX_DIMS], pstride[VQ_MAX_DIMS], at = 0;
    contiguous_strides(x, xstride);
    for (int j = 0; j < k->nout && rc == 0; j++) {
        vq_tensor *o = k->out[j];
        contiguous_strides(o, pstride);
        rc = launched(k, vq__cuda_strided_copy((int)vq_dtype_size(x->dtype), o->data,
                                               element(x, at * xstride[p->axis]), o->ndim, o->shape,
                                               pstride, xstride, l->s));
        at += o->shape[p->axis];
    }
    return rc;
}

/* Zeros where an output got no gradient, each dOut's box elsewhere. */
static int split_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__split_params *p = k->params;
    vq_tensor *dx = k->out[0];
    if (dx->numel == 0)
        return 0;
    int rc = 0;
    if (p->absent)
        rc = vq__cuda_op_called(k, cudaMemsetAsync(dx->data, 0, dx->nbytes, l->s),
                                "cudaMemsetAsync");
    int64_t dstride[VQ_MAX_DIMS], pstride[VQ_MAX_DIMS], at = 0;
    contiguous_strides(dx, dstride);
    for (int j = 1; j < k->nin && rc == 0; j++) {
        vq_tensor *g = k->in[j];
        if (!(p->absent & (1ull << (j - 1)))) {
            contiguous_strides(g, pstride);
            rc = launched(k, vq__cuda_strided_copy((int)vq_dtype_size(dx->dtype),
                                                   element(dx, at * dstride[p->axis]), g->data,
                                                   g->ndim, g->shape, dstride, pstride, l->s));
        }
        at += g->shape[p->axis];
    }
    return rc;
}

static int arg_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__arg_params *p = k->params;
    vq_tensor *x = k->in[0];
    int64_t outer, len, inner;
    vq__lines_of(x->ndim, x->shape, p->axis, &outer, &len, &inner);
    return launched(k, vq__cuda_arg_extremum(p->op, p->last, x->dtype, x->data, k->out[0]->data,
                                             outer, len, inner, l->s));
}

static int extremum_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__extremum_params *p = k->params;
    vq_tensor *x = k->in[0];
    return launched(k, vq__cuda_reduce_extremum(p->op, x->dtype, x->data, k->out[0]->data, x->ndim,
                                                x->shape, p->mask, l->s));
}

/* (X, Out, dOut) -> dX. */
static int extremum_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__extremum_params *p = k->params;
    vq_tensor *x = k->in[0];
    return launched(k, vq__cuda_reduce_extremum_grad(x->dtype, x->data, k->in[1]->data,
                                                     k->in[2]->data, k->out[0]->data, x->ndim,
                                                     x->shape, p->mask, l->s));
}

/* A box of Out read from X with stride 0 along the dims X is broadcast
 * along (a missing leading dim or a 1). */
static int expand_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[0], *o = k->out[0];
    int64_t xs[VQ_MAX_DIMS], src[VQ_MAX_DIMS], dst[VQ_MAX_DIMS];
    contiguous_strides(x, xs);
    contiguous_strides(o, dst);
    for (int i = 0; i < o->ndim; i++) {
        int ix = i - (o->ndim - x->ndim);
        src[i] = ix < 0 || x->shape[ix] == 1 ? 0 : xs[ix];
    }
    return launched(k, vq__cuda_strided_copy((int)vq_dtype_size(x->dtype), o->data, x->data,
                                             o->ndim, o->shape, dst, src, l->s));
}

static int tile_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[0], *o = k->out[0];
    return launched(k, vq__cuda_tile((int)vq_dtype_size(x->dtype), x->data, o->data, o->ndim,
                                     x->shape, o->shape, l->s));
}

/* (X, dOut) -> dX. */
static int tile_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *g = k->in[1], *dx = k->out[0];
    return launched(k, vq__cuda_tile_grad(dx->dtype, g->data, dx->data, dx->ndim, dx->shape,
                                          g->shape, l->s));
}

static int pad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__pad_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    vq__pad_geom geo;
    vq__pad_geom_make(&geo, x->ndim, x->shape, o->shape, p->begin, p->mode);
    return launched(k, vq__cuda_pad(x->dtype, x->data, o->data, &geo, p->value, p->ivalue, l->s));
}

/* (X, dOut) -> dX. */
static int pad_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__pad_params *p = k->params;
    vq_tensor *g = k->in[1], *dx = k->out[0];
    vq__pad_geom geo;
    vq__pad_geom_make(&geo, dx->ndim, dx->shape, g->shape, p->begin, p->mode);
    return launched(k, vq__cuda_pad_grad(dx->dtype, g->data, dx->data, &geo, l->s));
}

/* resize and its gradient: the geometry from the params and the shapes. */
static int resize_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__resize_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    vq__resize_geom geo;
    vq__resize_geom_make(&geo, p, x->ndim, x->shape, o->shape);
    return launched(k,
                    vq__cuda_resize(x->dtype, x->data, o->data, &geo, p->value, p->ivalue, l->s));
}

/* (X, dOut) -> dX. */
static int resize_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__resize_params *p = k->params;
    vq_tensor *g = k->in[1], *dx = k->out[0];
    vq__resize_geom geo;
    vq__resize_geom_make(&geo, p, dx->ndim, dx->shape, g->shape);
    return launched(k, vq__cuda_resize_grad(dx->dtype, g->data, dx->data, &geo, l->s));
}

/* cumsum: X's lines around the axis. */
static int cumsum_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__cumsum_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    int64_t outer, len, inner;
    vq__lines_of(x->ndim, x->shape, p->axis, &outer, &len, &inner);
    return launched(k, vq__cuda_cumsum(x->dtype, x->data, o->data, outer, len, inner, p->exclusive,
                                       p->reverse, l->s));
}

/* reduce_prod and its gradient (X, dOut) -> dX, whose pairs of each
 * group's nonzero product and zero count live in a buffer of the op's
 * stream. */
static int reduce_prod_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__reduce_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    if (k->nin == 1)
        return launched(k, vq__cuda_reduce_prod(x->dtype, x->data, o->data, x->ndim, x->shape,
                                                p->mask, l->s));
    vq_tensor *g = k->in[1], *pz;
    if (o->numel == 0)
        return 0;
    int64_t n = 2 * g->numel;
    int rc = vq__tensor_empty_at(&pz, k->x->ctx, VQ_F64, 1, &n, l->bs);
    if (rc < 0)
        return vq__fail_prefixed(rc, "reduce_prod_grad: the products and zero counts");
    rc = launched(k, vq__cuda_reduce_prod_grad(x->dtype, x->data, g->data, o->data, pz->data,
                                               x->ndim, x->shape, p->mask, l->s));
    vq__tensor_release_on(pz, l->bs);
    return rc;
}

/* ---- the table, and the dispatcher ---- */

struct entry {
    const char *type;
    vq__cuda_op_fn fn;
};

/* Read once per op type, when the registry is built (vq__gpu_kernel_pick);
 * test_ops_gpu_kernels checks that it covers exactly the registry's ops. */
static const struct entry table[] = {
    {"add", binary_gpu},
    {"sub", binary_gpu},
    {"mul", binary_gpu},
    {"div", binary_gpu},
    {"pow", binary_gpu},
    {"elementwise_grad", binary_grad_gpu},
    {"scale", scale_gpu},
    {"relu", unary_gpu},
    {"sigmoid", unary_gpu},
    {"tanh", unary_gpu},
    {"relu_grad", unary_grad_gpu},
    {"sigmoid_grad", unary_grad_gpu},
    {"tanh_grad", unary_grad_gpu},
    {"softmax", softmax_gpu},
    {"exp", math_gpu},
    {"log", math_gpu},
    {"sqrt", math_gpu},
    {"reciprocal", math_gpu},
    {"erf", math_gpu},
    {"power", math_gpu},
    {"sin", math_gpu},
    {"cos", math_gpu},
    {"tan", math_gpu},
    {"asin", math_gpu},
    {"acos", math_gpu},
    {"atan", math_gpu},
    {"sinh", math_gpu},
    {"cosh", math_gpu},
    {"asinh", math_gpu},
    {"acosh", math_gpu},
    {"atanh", math_gpu},
    {"floor", math_gpu},
    {"ceil", math_gpu},
    {"round", math_gpu},
    {"math_grad", math_grad_gpu},
    {"log_softmax", log_softmax_gpu},
    {"log_softmax_grad", log_softmax_grad_gpu},
    {"softmax_grad", softmax_grad_gpu},
    {"cross_entropy", ce_gpu},
    {"cross_entropy_grad", ce_grad_gpu},
    {"softmax_cross_entropy", sce_gpu},
    {"softmax_cross_entropy_grad", sce_grad_gpu},
    {"square_error", se_gpu},
    {"square_error_grad", se_grad_gpu},
    {"mse", mse_gpu},
    {"mse_grad", mse_grad_gpu},
    {"sum", reduce_gpu},
    {"mean", reduce_gpu},
    {"sum_grad", reduce_grad_gpu},
    {"mean_grad", reduce_grad_gpu},
    {"transpose", transpose_gpu},
    {"reshape", copy_gpu},
    {"reshape_grad", copy_gpu},
    {"concat", concat_gpu},
    {"concat_grad", concat_grad_gpu},
    {"slice", slice_gpu},
    {"slice_grad", slice_grad_gpu},
    {"cast", cast_gpu},
    {"cast_grad", cast_grad_gpu},
    {"matmul", matmul_gpu},
    {"matmul_grad", matmul_grad_gpu},
    {"fill_constant", fill_gpu},
    {"zeros_like", fill_gpu},
    {"uniform_random", uniform_gpu},
    {"gaussian_random", gaussian_gpu},
    {"dropout", dropout_gpu},
    {"sgd", sgd_gpu},
    {"momentum", momentum_gpu},
    {"adam", adam_gpu},
    {"lr_schedule", lr_schedule_gpu},
    {"less", compare_gpu},
    {"less_equal", compare_gpu},
    {"greater", compare_gpu},
    {"greater_equal", compare_gpu},
    {"equal", compare_gpu},
    {"not_equal", compare_gpu},
    {"logical_and", compare_gpu},
    {"logical_or", compare_gpu},
    {"logical_not", not_gpu},
    {"maximum", compare_gpu},
    {"minimum", compare_gpu},
    {"minmax_grad", minmax_grad_gpu},
    {"where", where_gpu},
    {"where_grad", where_grad_gpu},
    {"abs", abs_gpu},
    {"abs_grad", abs_grad_gpu},
    {"conv2d", conv2d_gpu},
    {"conv2d_grad", conv2d_grad_gpu},
    {"conv_transpose2d", conv_transpose2d_gpu},
    {"conv3d", conv3d_gpu},
    {"conv3d_grad", conv3d_grad_gpu},
    {"conv_transpose3d", conv_transpose3d_gpu},
    {"max_pool2d", max_pool_gpu},
    {"max_pool2d_grad", max_pool_grad_gpu},
    {"max_pool2d_argmax", max_pool_argmax_gpu},
    {"avg_pool2d", avg_pool_gpu},
    {"avg_pool2d_grad", avg_pool_grad_gpu},
    {"global_avg_pool", global_pool_gpu},
    {"global_avg_pool_grad", global_pool_grad_gpu},
    {"batch_norm", batch_norm_gpu},
    {"batch_norm_grad", batch_norm_grad_gpu},
    {"batch_norm_train", batch_norm_train_gpu},
    {"batch_norm_train_grad", batch_norm_train_grad_gpu},
    {"gather", gather_gpu},
    {"gather_grad", gather_gpu},
    {"gather_elements", gather_elements_gpu},
    {"gather_elements_grad", gather_elements_gpu},
    {"resize", resize_gpu},
    {"resize_grad", resize_grad_gpu},
    {"cumsum", cumsum_gpu},
    {"reduce_prod", reduce_prod_gpu},
    {"reduce_prod_grad", reduce_prod_gpu},
    {"split", split_gpu},
    {"split_grad", split_grad_gpu},
    {"argmax", arg_gpu},
    {"argmin", arg_gpu},
    {"reduce_max", extremum_gpu},
    {"reduce_min", extremum_gpu},
    {"reduce_minmax_grad", extremum_grad_gpu},
    {"expand", expand_gpu},
    {"tile", tile_gpu},
    {"tile_grad", tile_grad_gpu},
    {"pad", pad_gpu},
    {"pad_grad", pad_grad_gpu},
};

#define NENTRIES ((int)(sizeof table / sizeof table[0]))

vq__cuda_op_fn vq__cuda_op_kernel(const char *type)
{
    for (int i = 0; type && i < NENTRIES; i++)
        if (!strcmp(table[i].type, type))
            return table[i].fn;
    return NULL;
}

int vq__cuda_op_kernel_count(void)
{
    return NENTRIES;
}

/* The GPU slot of every op in the table (vq__gpu_kernel_pick): the launch
 * prologue, written once here for all of them, then the op's launches.
 * hot path: no malloc, no global lock */
int vq__cuda_run(const vq__kcall *k)
{
    vq__cuda_launch l;
    int rc = launch_begin(k, &l);
    if (rc < 0)
        return rc;
    return k->def->cuda(k, &l);
}
