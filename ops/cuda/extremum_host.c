/* The CUDA host glue of argmax, argmin, reduce_max, reduce_min and their
 * gradient (ops/cpu/extremum.c; kernels in index.cu): for each op, the
 * function its definition names (cuda_ops.h), which calls the launchers of
 * kernels.h with the tensors' device pointers and the op's params on the
 * op's stream (launch.c: how a call runs). Compiled only when CUDA is found
 * (have_cuda). */
#include "cuda_internal.h"
#include "../shape_shared.h" /* vq__lines_of */

_Static_assert((int)VQ__EXTREMUM_MAX == (int)VQ__CUDA_EXTREMUM_MAX &&
                   (int)VQ__EXTREMUM_MIN == (int)VQ__CUDA_EXTREMUM_MIN,
               "params.h's extrema are kernels.h's");

int vq__arg_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__arg_params *p = k->params;
    vq_tensor *x = k->in[0];
    int64_t outer, len, inner;
    vq__lines_of(x->ndim, x->shape, p->axis, &outer, &len, &inner);
    return vq__cuda_launched(k, vq__cuda_arg_extremum(p->op, p->last, x->dtype, x->data,
                                                      k->out[0]->data, outer, len, inner, l->s));
}

int vq__extremum_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__extremum_params *p = k->params;
    vq_tensor *x = k->in[0];
    return vq__cuda_launched(k, vq__cuda_reduce_extremum(p->op, x->dtype, x->data, k->out[0]->data,
                                                         x->ndim, x->shape, p->mask, l->s));
}

/* (X, Out, dOut) -> dX. */
int vq__extremum_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__extremum_params *p = k->params;
    vq_tensor *x = k->in[0];
    return vq__cuda_launched(k, vq__cuda_reduce_extremum_grad(x->dtype, x->data, k->in[1]->data,
                                                              k->in[2]->data, k->out[0]->data,
                                                              x->ndim, x->shape, p->mask, l->s));
}
