/* The CUDA host glue of transpose, reshape, concat, slice and cast with
 * their gradients (ops/cpu/shape.c; shape.cu): for each op, the function its
 * definition names (cuda_ops.h), which calls the launchers of kernels.h with
 * the tensors' device pointers and the op's params on the op's stream
 * (launch.c: how a call runs). Each is a box of vq__cuda_strided_copy; the
 * box helpers (vq__cuda_contiguous_strides, vq__cuda_element) serve
 * index_host.c and layout_host.c too. Compiled only when CUDA is found
 * (have_cuda). */
#include "cuda_internal.h"

void vq__cuda_contiguous_strides(const vq_tensor *t, int64_t *stride)
{
    int64_t s = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= t->shape[d];
    }
}

/* Element e of t, as a pointer. */
char *vq__cuda_element(const vq_tensor *t, int64_t e)
{
    return (char *)t->data + e * (int64_t)vq_dtype_size(t->dtype);
}

int vq__transpose_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__transpose_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    int64_t xs[VQ_MAX_DIMS], src[VQ_MAX_DIMS], dst[VQ_MAX_DIMS];
    vq__cuda_contiguous_strides(x, xs);
    vq__cuda_contiguous_strides(o, dst);
    for (int i = 0; i < o->ndim; i++)
        src[i] = xs[p->perm[i]];
    return vq__cuda_launched(k, vq__cuda_strided_copy((int)vq_dtype_size(x->dtype), o->data,
                                                      x->data, o->ndim, o->shape, dst, src, l->s));
}

/* reshape and reshape_grad: the same bytes under another shape. */
int vq__copy_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[k->def->code], *o = k->out[0];
    if (!o->nbytes)
        return 0;
    return vq__cuda_op_called(k,
                              cudaMemcpyAsync(o->data, x->data, o->nbytes, cudaMemcpyDeviceToDevice,
                                              l->s),
                              "cudaMemcpyAsync");
}

/* Each input is a box of the output, at its offset along the axis. */
int vq__concat_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__concat_params *p = k->params;
    vq_tensor *o = k->out[0];
    int rc = 0;
    int64_t ostride[VQ_MAX_DIMS], pstride[VQ_MAX_DIMS], at = 0;
    vq__cuda_contiguous_strides(o, ostride);
    for (int i = 0; i < k->nin && rc == 0; i++) {
        vq_tensor *x = k->in[i];
        if (x->numel == 0)
            continue;
        vq__cuda_contiguous_strides(x, pstride);
        rc = vq__cuda_launched(k, vq__cuda_strided_copy((int)vq_dtype_size(x->dtype),
                                                        vq__cuda_element(o, at * ostride[p->axis]),
                                                        x->data, x->ndim, x->shape, ostride,
                                                        pstride, l->s));
        at += x->shape[p->axis];
    }
    return rc;
}

/* dX is the box of dOut where input index was. */
int vq__concat_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__concat_params *p = k->params;
    vq_tensor *g = k->in[0], *dx = k->out[0];
    if (dx->numel == 0)
        return 0;
    int64_t gstride[VQ_MAX_DIMS], dstride[VQ_MAX_DIMS], at = 0;
    for (int i = 0; i < p->index; i++)
        at += k->in[1 + i]->shape[p->axis];
    vq__cuda_contiguous_strides(g, gstride);
    vq__cuda_contiguous_strides(dx, dstride);
    return vq__cuda_launched(k, vq__cuda_strided_copy((int)vq_dtype_size(dx->dtype), dx->data,
                                                      vq__cuda_element(g, at * gstride[p->axis]),
                                                      dx->ndim, dx->shape, dstride, gstride, l->s));
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

int vq__slice_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__slice_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    if (o->numel == 0)
        return 0;
    int64_t xs[VQ_MAX_DIMS], os[VQ_MAX_DIMS];
    vq__cuda_contiguous_strides(x, xs);
    vq__cuda_contiguous_strides(o, os);
    return vq__cuda_launched(k, vq__cuda_strided_copy((int)vq_dtype_size(x->dtype), o->data,
                                                      vq__cuda_element(x, slice_offset(p, x, xs)),
                                                      o->ndim, o->shape, os, xs, l->s));
}

/* Zeros, then dOut at the slice. */
int vq__slice_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
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
    vq__cuda_contiguous_strides(dx, ds);
    vq__cuda_contiguous_strides(g, gs);
    return vq__cuda_launched(k, vq__cuda_strided_copy((int)vq_dtype_size(dx->dtype),
                                                      vq__cuda_element(dx, slice_offset(p, dx, ds)),
                                                      g->data, g->ndim, g->shape, ds, gs, l->s));
}

int vq__cast_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[0], *o = k->out[0];
    return vq__cuda_launched(k,
                             vq__cuda_cast(x->dtype, o->dtype, x->data, o->data, x->numel, l->s));
}

/* dOut converted back to X's dtype: the same conversions. */
int vq__cast_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *g = k->in[1], *dx = k->out[0];
    return vq__cuda_launched(k,
                             vq__cuda_cast(g->dtype, dx->dtype, g->data, dx->data, g->numel, l->s));
}
