/* The CUDA host glue of batch_norm and batch_norm_train with their gradients
 * (ops/cpu/norm.c; kernels in conv.cu): for each op, the function its
 * definition names (cuda_ops.h), which calls the launchers of kernels.h with
 * the tensors' device pointers and the op's params on the op's stream
 * (launch.c: how a call runs). Compiled only when CUDA is found (have_cuda). */
#include "cuda_internal.h"

/* X as [outer, C, inner]. */
static void channel_layout(const vq_tensor *x, int64_t *outer, int64_t *c, int64_t *inner)
{
    *outer = x->shape[0];
    *c = x->shape[1];
    *inner = 1;
    for (int d = 2; d < x->ndim; d++)
        *inner *= x->shape[d];
}

int vq__batch_norm_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__batch_norm_params *p = k->params;
    vq_tensor *const *in = k->in;
    int64_t outer, c, inner;
    channel_layout(in[0], &outer, &c, &inner);
    return vq__cuda_launched(k, vq__cuda_batch_norm(in[0]->dtype, in[0]->data, in[1]->data,
                                                    in[2]->data, in[3]->data, in[4]->data,
                                                    k->out[0]->data, outer, c, inner, p->epsilon,
                                                    l->s));
}

/* (X, Scale, Mean, Var, dOut) -> dZ. */
int vq__batch_norm_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__batch_norm_params *p = k->params;
    vq_tensor *const *in = k->in;
    int64_t outer, c, inner;
    channel_layout(in[0], &outer, &c, &inner);
    return vq__cuda_launched(k, vq__cuda_batch_norm_grad(p->wrt, in[0]->dtype, in[0]->data,
                                                         in[1]->data, in[2]->data, in[3]->data,
                                                         in[4]->data, k->out[0]->data, outer, c,
                                                         inner, p->epsilon, l->s));
}

int vq__batch_norm_train_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__batch_norm_params *p = k->params;
    vq_tensor *const *in = k->in, *const *out = k->out;
    int64_t outer, c, inner;
    channel_layout(in[0], &outer, &c, &inner);
    return vq__cuda_launched(k, vq__cuda_batch_norm_train(in[0]->dtype, in[0]->data, in[1]->data,
                                                          in[2]->data, in[3]->data, in[4]->data,
                                                          out[0]->data, out[1]->data, out[2]->data,
                                                          outer, c, inner, p->epsilon, p->momentum,
                                                          l->s));
}

/* (X, Scale, then dOut, dNewMean, dNewVar as grads says) -> dZ. */
int vq__batch_norm_train_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__batch_norm_params *p = k->params;
    vq_tensor *const *in = k->in;
    const void *g[3];
    for (int bit = 1, s = 2, j = 0; bit <= 4; bit <<= 1, j++)
        g[j] = p->grads & bit ? in[s++]->data : NULL;
    int64_t outer, c, inner;
    channel_layout(in[0], &outer, &c, &inner);
    return vq__cuda_launched(k, vq__cuda_batch_norm_train_grad(p->wrt, in[0]->dtype, in[0]->data,
                                                               in[1]->data, g[0], g[1], g[2],
                                                               k->out[0]->data, outer, c, inner,
                                                               p->epsilon, p->momentum, l->s));
}
