/* The CUDA host glue of the unary math ops (exp, log, the trigonometric ops,
 * ...) and math_grad (ops/cpu/math.c; kernels in math.cu): for each op, the
 * function its definition names (cuda_ops.h), which calls the launchers of
 * kernels.h with the tensors' device pointers and the op's params on the
 * op's stream (launch.c: how a call runs). Compiled only when CUDA is found
 * (have_cuda). */
#include "cuda_internal.h"

/* params.h's math codes are the kernels' */
_Static_assert((int)VQ__MATH_POWER == (int)VQ__CUDA_POWER &&
                   (int)VQ__MATH_ROUND == (int)VQ__CUDA_ROUND &&
                   (int)VQ__MATH_COUNT == (int)VQ__CUDA_MATH_COUNT,
               "VQ__MATH_* and VQ__CUDA_* differ");

int vq__math_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__math_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    return vq__cuda_launched(k, vq__cuda_math(p->op, x->dtype, p->exponent, x->data, o->data,
                                              x->numel, l->s));
}

int vq__math_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__math_params *p = k->params;
    vq_tensor *x = k->in[0], *y = k->in[1], *g = k->in[2], *d = k->out[0];
    return vq__cuda_launched(k, vq__cuda_math_grad(p->op, x->dtype, p->exponent, x->data, y->data,
                                                   g->data, d->data, x->numel, l->s));
}
