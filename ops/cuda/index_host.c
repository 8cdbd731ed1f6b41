/* The CUDA host glue of gather, gather_elements and split with their
 * gradients (ops/cpu/index.c; kernels in index.cu and shape.cu): for each
 * op, the function its definition names (cuda_ops.h), which calls the
 * launchers of kernels.h with the tensors' device pointers and the op's
 * params on the op's stream (launch.c: how a call runs). gather's indices
 * are checked on the device (checks.c), as scatter_elements' are
 * (scatter_host.c). Compiled only when CUDA is found
 * (have_cuda). */
#include "cuda_internal.h"
#include "../shape_shared.h" /* vq__lines_of */

/* (cuda_internal.h) */
int vq__cuda_index_check_launch(const vq__kcall *k, const vq__cuda_launch *l, const vq_tensor *idx,
                                int64_t dim, int axis, struct vq__cuda_check **c)
{
    int rc = vq__cuda_check_begin(l, VQ__CUDA_CHECK_INDEX, c);
    if (rc < 0) {
        *c = NULL;
        return rc;
    }
    (*c)->dim = dim;
    (*c)->axis = axis;
    rc = vq__cuda_launched(k, vq__cuda_index_check(idx->dtype, idx->data, idx->numel, dim,
                                                   &(*c)->d->bad, l->s));
    if (rc == 0)
        rc = vq__cuda_launched(k, vq__cuda_label_fetch(idx->dtype, idx->data, &(*c)->d->bad,
                                                       &(*c)->d->label, l->s));
    return rc;
}

int vq__cuda_range_check_launch(const vq__kcall *k, const vq__cuda_launch *l, const vq_tensor *idx,
                                int64_t lo, int64_t hi, const char *what, const char *slot,
                                struct vq__cuda_check **c)
{
    int rc = vq__cuda_check_begin(l, VQ__CUDA_CHECK_RANGE, c);
    if (rc < 0) {
        *c = NULL;
        return rc;
    }
    (*c)->what = what;
    (*c)->in_slot = slot;
    (*c)->lo = lo;
    (*c)->hi = hi;
    rc = vq__cuda_launched(k, vq__cuda_range_check(idx->dtype, idx->data, idx->numel, lo, hi,
                                                   &(*c)->d->bad, l->s));
    if (rc == 0)
        rc = vq__cuda_launched(k, vq__cuda_label_fetch(idx->dtype, idx->data, &(*c)->d->bad,
                                                       &(*c)->d->label, l->s));
    return rc;
}

/* gather and gather_grad: the indices are checked on the device; the
 * kernels skip a bad index's rows. */
int vq__gather_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__gather_params *p = k->params;
    bool grad = k->nin == 3;
    vq_tensor *idx = k->in[1], *o = k->out[0];
    vq_tensor *x = grad ? o : k->in[0]; /* X's shape: dX's for the gradient */
    int64_t outer, dim, inner;
    vq__lines_of(x->ndim, x->shape, p->axis, &outer, &dim, &inner);
    struct vq__cuda_check *c;
    int rc = vq__cuda_index_check_launch(k, l, idx, dim, p->axis, &c);
    if (!c)
        return rc;
    if (rc == 0 && grad)
        rc = vq__cuda_launched(k,
                               vq__cuda_gather_grad(o->dtype, idx->dtype, idx->data, k->in[2]->data,
                                                    o->data, outer, dim, inner, idx->numel, l->s));
    else if (rc == 0)
        rc = vq__cuda_launched(k, vq__cuda_gather((int)vq_dtype_size(x->dtype), idx->dtype, x->data,
                                                  idx->data, o->data, outer, dim, inner, idx->numel,
                                                  l->s));
    return vq__cuda_check_finish(l, c, rc);
}

/* gather_elements and its gradient: the indices checked on the device as
 * gather's (vq__cuda_index_check_launch), against X's dim along the axis. */
int vq__gather_elements_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__gather_params *p = k->params;
    bool grad = k->nin == 3;
    vq_tensor *idx = k->in[1], *o = k->out[0];
    vq_tensor *x = grad ? o : k->in[0]; /* X's shape: dX's for the gradient */
    struct vq__cuda_check *c;
    int rc = vq__cuda_index_check_launch(k, l, idx, x->shape[p->axis], p->axis, &c);
    if (!c)
        return rc;
    if (rc == 0 && grad)
        rc = vq__cuda_launched(k,
                               vq__cuda_gather_elements_grad(o->dtype, idx->dtype, idx->data,
                                                             k->in[2]->data, o->data, x->ndim,
                                                             x->shape, idx->shape, p->axis, l->s));
    else if (rc == 0)
        rc = vq__cuda_launched(k, vq__cuda_gather_elements((int)vq_dtype_size(x->dtype), idx->dtype,
                                                           x->data, idx->data, o->data, x->ndim,
                                                           x->shape, idx->shape, p->axis, l->s));
    return vq__cuda_check_finish(l, c, rc);
}

/* Each output is the box of X at its offset along the axis. */
int vq__split_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__split_params *p = k->params;
    vq_tensor *x = k->in[0];
    int rc = 0;
    int64_t xstride[VQ_MAX_DIMS], pstride[VQ_MAX_DIMS], at = 0;
    vq__cuda_contiguous_strides(x, xstride);
    for (int j = 0; j < k->nout && rc == 0; j++) {
        vq_tensor *o = k->out[j];
        vq__cuda_contiguous_strides(o, pstride);
        rc = vq__cuda_launched(k, vq__cuda_strided_copy((int)vq_dtype_size(x->dtype), o->data,
                                                        vq__cuda_element(x, at * xstride[p->axis]),
                                                        o->ndim, o->shape, pstride, xstride, l->s));
        at += o->shape[p->axis];
    }
    return rc;
}

/* Zeros where an output got no gradient, each dOut's box elsewhere. */
int vq__split_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
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
    vq__cuda_contiguous_strides(dx, dstride);
    for (int j = 1; j < k->nin && rc == 0; j++) {
        vq_tensor *g = k->in[j];
        if (!(p->absent & (1ull << (j - 1)))) {
            vq__cuda_contiguous_strides(g, pstride);
            rc =
                vq__cuda_launched(k,
                                  vq__cuda_strided_copy((int)vq_dtype_size(dx->dtype),
                                                        vq__cuda_element(dx, at * dstride[p->axis]),
                                                        g->data, g->ndim, g->shape, dstride,
                                                        pstride, l->s));
        }
        at += g->shape[p->axis];
    }
    return rc;
}
