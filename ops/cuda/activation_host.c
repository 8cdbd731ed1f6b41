/* The CUDA host glue of relu, sigmoid, tanh, silu, hard_sigmoid, hard_swish, softmax and log_softmax with
 * their gradients (ops/cpu/activation.c; kernels in elementwise.cu and
 * rows.cu): for each op, the function its definition names (cuda_ops.h),
 * which calls the launchers of kernels.h with the tensors' device pointers
 * and the op's params on the op's stream (launch.c: how a call runs).
 * Compiled only when CUDA is found (have_cuda). */
#include "cuda_internal.h"
#include "../shape_shared.h" /* vq__lines_of */

/* params.h's activations are kernels.h's */
_Static_assert((int)VQ__ACT_RELU == (int)VQ__CUDA_RELU &&
                   (int)VQ__ACT_SIGMOID == (int)VQ__CUDA_SIGMOID &&
                   (int)VQ__ACT_TANH == (int)VQ__CUDA_TANH &&
                   (int)VQ__ACT_SILU == (int)VQ__CUDA_SILU &&
                   (int)VQ__ACT_HARD_SIGMOID == (int)VQ__CUDA_HARD_SIGMOID &&
                   (int)VQ__ACT_HARD_SWISH == (int)VQ__CUDA_HARD_SWISH,
               "params.h's activations are kernels.h's");

int vq__unary_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__unary_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    return vq__cuda_launched(k, vq__cuda_unary(p->op, x->dtype, x->data, o->data, x->numel,
                                               p->alpha, p->beta, l->s));
}

int vq__unary_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__unary_params *p = k->params;
    vq_tensor *y = k->in[0], *g = k->in[1], *d = k->out[0];
    return vq__cuda_launched(k, vq__cuda_unary_grad(p->op, y->dtype, y->data, g->data, d->data,
                                                    y->numel, p->alpha, p->beta, l->s));
}

int vq__log_softmax_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__softmax_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    int64_t outer, len, inner;
    vq__lines_of(x->ndim, x->shape, p->axis, &outer, &len, &inner);
    return vq__cuda_launched(k, vq__cuda_log_softmax(x->dtype, x->data, o->data, outer, len, inner,
                                                     l->s));
}

int vq__log_softmax_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__softmax_params *p = k->params;
    vq_tensor *y = k->in[0], *g = k->in[1], *d = k->out[0];
    int64_t outer, len, inner;
    vq__lines_of(y->ndim, y->shape, p->axis, &outer, &len, &inner);
    return vq__cuda_launched(k, vq__cuda_log_softmax_grad(y->dtype, y->data, g->data, d->data,
                                                          outer, len, inner, l->s));
}

int vq__softmax_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__softmax_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    int64_t outer, len, inner;
    vq__lines_of(x->ndim, x->shape, p->axis, &outer, &len, &inner);
    return vq__cuda_launched(k,
                             vq__cuda_softmax(x->dtype, x->data, o->data, outer, len, inner, l->s));
}

int vq__softmax_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__softmax_params *p = k->params;
    vq_tensor *y = k->in[0], *g = k->in[1], *d = k->out[0];
    int64_t outer, len, inner;
    vq__lines_of(y->ndim, y->shape, p->axis, &outer, &len, &inner);
    return vq__cuda_launched(k, vq__cuda_softmax_grad(y->dtype, y->data, g->data, d->data, outer,
                                                      len, inner, l->s));
}
