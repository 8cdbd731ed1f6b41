/* The CUDA host glue of resize and its gradient (ops/cpu/resize.c;
 * resize.cu): for each op, the function its definition names (cuda_ops.h),
 * which calls the launchers of kernels.h with the tensors' device pointers
 * and the op's params on the op's stream (launch.c: how a call runs).
 * Compiled only when CUDA is found (have_cuda). */
#include "cuda_internal.h"

/* resize and its gradient: the geometry from the params and the shapes. */
int vq__resize_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__resize_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    vq__resize_geom geo;
    vq__resize_geom_make(&geo, p, x->ndim, x->shape, o->shape);
    return vq__cuda_launched(k, vq__cuda_resize(x->dtype, x->data, o->data, &geo, p->value,
                                                p->ivalue, l->s));
}

/* (X, dOut) -> dX. */
int vq__resize_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__resize_params *p = k->params;
    vq_tensor *g = k->in[1], *dx = k->out[0];
    vq__resize_geom geo;
    vq__resize_geom_make(&geo, p, dx->ndim, dx->shape, g->shape);
    return vq__cuda_launched(k, vq__cuda_resize_grad(dx->dtype, g->data, dx->data, &geo, l->s));
}
