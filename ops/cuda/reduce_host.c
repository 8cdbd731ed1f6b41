/* The CUDA host glue of sum and mean over any axes with their gradients
 * (ops/cpu/reduce.c; kernels in rows.cu): for each op, the function its
 * definition names (cuda_ops.h), which calls the launchers of kernels.h with
 * the tensors' device pointers and the op's params on the op's stream
 * (launch.c: how a call runs). Compiled only when CUDA is found (have_cuda). */
#include "cuda_internal.h"

int vq__reduce_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__reduce_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    return vq__cuda_launched(k, vq__cuda_reduce_axes(k->def->code == VQ__REDUCE_MEAN, x->dtype,
                                                     x->data, o->data, x->ndim, x->shape, p->mask,
                                                     l->s));
}

int vq__reduce_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__reduce_params *p = k->params;
    vq_tensor *g = k->in[1], *dx = k->out[0];
    return vq__cuda_launched(k, vq__cuda_reduce_axes_grad(k->def->code == VQ__REDUCE_MEAN,
                                                          dx->dtype, g->data, dx->data, dx->ndim,
                                                          dx->shape, p->mask, l->s));
}
