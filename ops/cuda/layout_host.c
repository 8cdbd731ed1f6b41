/* The CUDA host glue of expand, tile and pad with their gradients
 * (ops/cpu/layout.c; kernels in index.cu and shape.cu): for each op, the
 * function its definition names (cuda_ops.h), which calls the launchers of
 * kernels.h with the tensors' device pointers and the op's params on the
 * op's stream (launch.c: how a call runs). Compiled only when CUDA is found
 * (have_cuda). */
#include "cuda_internal.h"

/* A box of Out read from X with stride 0 along the dims X is broadcast
 * along (a missing leading dim or a 1). */
int vq__expand_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[0], *o = k->out[0];
    int64_t xs[VQ_MAX_DIMS], src[VQ_MAX_DIMS], dst[VQ_MAX_DIMS];
    vq__cuda_contiguous_strides(x, xs);
    vq__cuda_contiguous_strides(o, dst);
    for (int i = 0; i < o->ndim; i++) {
        int ix = i - (o->ndim - x->ndim);
        src[i] = ix < 0 || x->shape[ix] == 1 ? 0 : xs[ix];
    }
    return vq__cuda_launched(k, vq__cuda_strided_copy((int)vq_dtype_size(x->dtype), o->data,
                                                      x->data, o->ndim, o->shape, dst, src, l->s));
}

int vq__tile_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[0], *o = k->out[0];
    return vq__cuda_launched(k, vq__cuda_tile((int)vq_dtype_size(x->dtype), x->data, o->data,
                                              o->ndim, x->shape, o->shape, l->s));
}

/* (X, dOut) -> dX. */
int vq__tile_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *g = k->in[1], *dx = k->out[0];
    return vq__cuda_launched(k, vq__cuda_tile_grad(dx->dtype, g->data, dx->data, dx->ndim,
                                                   dx->shape, g->shape, l->s));
}

int vq__pad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__pad_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    vq__pad_geom geo;
    vq__pad_geom_make(&geo, x->ndim, x->shape, o->shape, p->begin, p->mode);
    return vq__cuda_launched(k, vq__cuda_pad(x->dtype, x->data, o->data, &geo, p->value, p->ivalue,
                                             l->s));
}

/* (X, dOut) -> dX. */
int vq__pad_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__pad_params *p = k->params;
    vq_tensor *g = k->in[1], *dx = k->out[0];
    vq__pad_geom geo;
    vq__pad_geom_make(&geo, dx->ndim, dx->shape, g->shape, p->begin, p->mode);
    return vq__cuda_launched(k, vq__cuda_pad_grad(dx->dtype, g->data, dx->data, &geo, l->s));
}
