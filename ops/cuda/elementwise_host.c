/* The CUDA host glue of the binary arithmetic ops and scale
 * (ops/cpu/elementwise.c; kernels in elementwise.cu): for each op, the
 * function its definition names (cuda_ops.h), which calls the launchers of
 * kernels.h with the tensors' device pointers and the op's params on the
 * op's stream (launch.c: how a call runs). Compiled only when CUDA is found
 * (have_cuda). */
#include "cuda_internal.h"

/* The op codes of params.h are handed to the launchers as they are. */
_Static_assert((int)VQ__BINARY_ADD == (int)VQ__CUDA_ADD &&
                   (int)VQ__BINARY_SUB == (int)VQ__CUDA_SUB &&
                   (int)VQ__BINARY_MUL == (int)VQ__CUDA_MUL &&
                   (int)VQ__BINARY_DIV == (int)VQ__CUDA_DIV &&
                   (int)VQ__BINARY_POW == (int)VQ__CUDA_POW &&
                   (int)VQ__BINARY_MOD == (int)VQ__CUDA_MOD &&
                   (int)VQ__BINARY_FMOD == (int)VQ__CUDA_FMOD,
               "params.h's binary ops are kernels.h's");

int vq__binary_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__binary_params *p = k->params;
    vq_tensor *x = k->in[0], *y = k->in[1], *out = k->out[0];
    vq__bcast b;
    vq__bcast_init(&b, out, x, y);
    if (p->op == VQ__BINARY_ADD || p->op == VQ__BINARY_SUB || p->op == VQ__BINARY_MUL ||
        (out->dtype != VQ_I32 && out->dtype != VQ_I64))
        return vq__cuda_launched(k, vq__cuda_binary(p->op, out->dtype, x->data, y->data, out->data,
                                                    b.ndim, b.shape, b.stride[0], b.stride[1], NULL,
                                                    l->s));
    /* Integer division, mod or pow: a zero divisor (0 to a negative
     * power) is found on the device. */
    struct vq__cuda_check *c;
    int rc =
        vq__cuda_check_begin(l, p->op == VQ__BINARY_POW ? VQ__CUDA_CHECK_POW : VQ__CUDA_CHECK_DIV,
                             &c);
    if (rc < 0)
        return rc;
    rc =
        vq__cuda_launched(k, vq__cuda_binary(p->op, out->dtype, x->data, y->data, out->data, b.ndim,
                                             b.shape, b.stride[0], b.stride[1], &c->d->bad, l->s));
    return vq__cuda_check_finish(l, c, rc);
}

int vq__binary_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__binary_grad_params *p = k->params;
    vq_tensor *g = k->in[0], *x = k->in[1], *y = k->in[2], *dz = k->out[0];
    vq__bcast b;
    vq__bcast_init(&b, g, x, y);
    return vq__cuda_launched(k, vq__cuda_binary_grad(p->op, p->wrt, g->dtype, g->data, x->data,
                                                     y->data, dz->data, dz->numel, b.ndim, b.shape,
                                                     b.stride[0], b.stride[1], l->s));
}

int vq__scale_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__scale_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    return vq__cuda_launched(k, vq__cuda_scale(x->dtype, x->data, o->data, x->numel, p->scale,
                                               p->bias, l->s));
}
