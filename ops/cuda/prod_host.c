/* The CUDA host glue of reduce_prod and its gradient (ops/cpu/prod.c;
 * prod.cu): for each op, the function its definition names (cuda_ops.h),
 * which calls the launchers of kernels.h with the tensors' device pointers
 * and the op's params on the op's stream (launch.c: how a call runs).
 * Compiled only when CUDA is found (have_cuda). */
#include "cuda_internal.h"

/* reduce_prod and its gradient (X, dOut) -> dX, whose pairs of each
 * group's nonzero product and zero count live in a buffer of the op's
 * stream. */
int vq__reduce_prod_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__reduce_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    if (k->nin == 1)
        return vq__cuda_launched(k, vq__cuda_reduce_prod(x->dtype, x->data, o->data, x->ndim,
                                                         x->shape, p->mask, l->s));
    vq_tensor *g = k->in[1], *pz;
    if (o->numel == 0)
        return 0;
    int64_t n = 2 * g->numel;
    int rc = vq__tensor_empty_at(&pz, k->x->ctx, VQ_F64, 1, &n, l->bs);
    if (rc < 0)
        return vq__fail_prefixed(rc, "reduce_prod_grad: the products and zero counts");
    rc =
        vq__cuda_launched(k, vq__cuda_reduce_prod_grad(x->dtype, x->data, g->data, o->data,
                                                       pz->data, x->ndim, x->shape, p->mask, l->s));
    vq__tensor_release_on(pz, l->bs);
    return rc;
}
