/* The CUDA host glue of matmul and its gradient (ops/cpu/matmul.c;
 * matmul.cu): for each op, the function its definition names (cuda_ops.h),
 * which calls the launchers of kernels.h with the tensors' device pointers
 * and the op's params on the op's stream (launch.c: how a call runs). The
 * products are vq__cuda_matmul's (cuBLAS). Compiled only when CUDA is found
 * (have_cuda). */
#include "cuda_internal.h"
#include "../shape_shared.h" /* vq__matmul_dims_of */

int vq__matmul_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__matmul_params *p = k->params;
    vq_tensor *x = k->in[0], *y = k->in[1], *o = k->out[0];
    vq__matmul_dims d = vq__matmul_dims_of(x->ndim, x->shape, y->ndim, y->shape, p->tx, p->ty);
    return vq__cuda_launched(k, vq__cuda_matmul(x->dtype, p->tx, p->ty, d.batch, d.m, d.n, d.k,
                                                p->alpha, x->data, 0, y->data, d.shared, 0, o->data,
                                                l->s));
}

/* matmul.c's grad_kernel, with Out_b = alpha A B, A = op(X_b), B = op(Y_b),
 * G = dOut_b, as vq__cuda_matmul products:
 *   dX_b = alpha G op(Y_b)^T, or (X transposed) alpha op(Y_b) G^T;
 *   dY_b = alpha op(X_b)^T G, or (Y transposed) alpha G^T op(X_b).
 * A shared Y is one operand for every batch; its gradient is the sum over
 * the batches: with X's batches stacked (vq__matmul_dims_of) one product sums them in
 * its inner dimension; otherwise (X transposed) one product per batch adds
 * into dY (beta 1 after the first), in the CPU's order of batches. */
int vq__matmul_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__matmul_params *p = k->params;
    vq_tensor *x = k->in[0], *y = k->in[1], *g = k->in[2], *dz = k->out[0];
    int rc = 0;
    vq__matmul_dims d = vq__matmul_dims_of(x->ndim, x->shape, y->ndim, y->shape, p->tx, p->ty);
    int dt = x->dtype, tx = p->tx, ty = p->ty, sh = d.shared;
    double a = p->alpha;
    if (p->wrt == 0) {
        if (!tx)
            rc = vq__cuda_matmul(dt, 0, !ty, d.batch, d.m, d.k, d.n, a, g->data, 0, y->data, sh, 0,
                                 dz->data, l->s);
        else
            rc = vq__cuda_matmul(dt, ty, 1, d.batch, d.k, d.m, d.n, a, y->data, sh, g->data, 0, 0,
                                 dz->data, l->s);
        return vq__cuda_launched(k, rc);
    }
    if (sh && d.batch == 0) /* the sum of no products */
        return vq__cuda_op_called(k, cudaMemsetAsync(dz->data, 0, dz->nbytes, l->s),
                                  "cudaMemsetAsync");
    if (!sh || d.batch == 1) {
        if (!ty)
            rc = vq__cuda_matmul(dt, !tx, 0, d.batch, d.k, d.n, d.m, a, x->data, 0, g->data, 0, 0,
                                 dz->data, l->s);
        else
            rc = vq__cuda_matmul(dt, 1, tx, d.batch, d.n, d.k, d.m, a, g->data, 0, x->data, 0, 0,
                                 dz->data, l->s);
        return vq__cuda_launched(k, rc);
    }
    size_t es = vq_dtype_size(x->dtype);
    for (int64_t b = 0; b < d.batch && rc == 0; b++) {
        const char *xb = (const char *)x->data + (size_t)(b * d.m * d.k) * es;
        const char *gb = (const char *)g->data + (size_t)(b * d.m * d.n) * es;
        double beta = b ? 1 : 0;
        if (!ty)
            rc = vq__cuda_matmul(dt, !tx, 0, 1, d.k, d.n, d.m, a, xb, 0, gb, 0, beta, dz->data,
                                 l->s);
        else
            rc =
                vq__cuda_matmul(dt, 1, tx, 1, d.n, d.k, d.m, a, gb, 0, xb, 0, beta, dz->data, l->s);
    }
    return vq__cuda_launched(k, rc);
}
