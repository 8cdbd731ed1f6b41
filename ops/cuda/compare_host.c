/* The CUDA host glue of comparisons, logic, where, abs and their gradients
 * (ops/cpu/compare.c; kernels in compare.cu): for each op, the function its
 * definition names (cuda_ops.h), which calls the launchers of kernels.h with
 * the tensors' device pointers and the op's params on the op's stream
 * (launch.c: how a call runs). Compiled only when CUDA is found (have_cuda). */
#include "cuda_internal.h"

_Static_assert((int)VQ__CMP_LESS == (int)VQ__CUDA_LESS &&
                   (int)VQ__CMP_LESS_EQUAL == (int)VQ__CUDA_LESS_EQUAL &&
                   (int)VQ__CMP_GREATER == (int)VQ__CUDA_GREATER &&
                   (int)VQ__CMP_GREATER_EQUAL == (int)VQ__CUDA_GREATER_EQUAL &&
                   (int)VQ__CMP_EQUAL == (int)VQ__CUDA_EQUAL &&
                   (int)VQ__CMP_NOT_EQUAL == (int)VQ__CUDA_NOT_EQUAL &&
                   (int)VQ__CMP_AND == (int)VQ__CUDA_AND && (int)VQ__CMP_OR == (int)VQ__CUDA_OR &&
                   (int)VQ__CMP_MAXIMUM == (int)VQ__CUDA_MAXIMUM &&
                   (int)VQ__CMP_MINIMUM == (int)VQ__CUDA_MINIMUM,
               "params.h's comparisons are kernels.h's");

/* Operands a, b, c (NULL: none) broadcast to out's shape, dim by dim. */
static void walk_of(vq__cuda_walk *w, const vq_tensor *out, const vq_tensor *a, const vq_tensor *b,
                    const vq_tensor *c)
{
    const vq_tensor *in[3] = {a, b, c};
    w->ndim = out->ndim;
    for (int i = 0; i < out->ndim; i++)
        w->shape[i] = out->shape[i];
    for (int k = 0; k < 3; k++) {
        int64_t s = 1;
        for (int i = out->ndim - 1; i >= 0; i--) {
            int j = in[k] ? i - (out->ndim - in[k]->ndim) : -1;
            int64_t d = j >= 0 ? in[k]->shape[j] : 1;
            w->stride[k][i] = d == 1 ? 0 : s;
            s *= d;
        }
    }
}

int vq__compare_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[0], *y = k->in[1], *out = k->out[0];
    vq__cuda_walk w;
    walk_of(&w, out, x, y, NULL);
    return vq__cuda_launched(k, vq__cuda_compare(k->def->code, x->dtype, x->data, y->data,
                                                 out->data, &w, l->s));
}

int vq__not_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return vq__cuda_launched(k, vq__cuda_logical_not(k->in[0]->data, k->out[0]->data,
                                                     k->in[0]->numel, l->s));
}

int vq__abs_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[0];
    return vq__cuda_launched(k, vq__cuda_abs(x->dtype, x->data, k->out[0]->data, x->numel, l->s));
}

int vq__abs_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *g = k->in[0];
    return vq__cuda_launched(k, vq__cuda_abs_grad(g->dtype, g->data, k->in[1]->data,
                                                  k->out[0]->data, g->numel, l->s));
}

int vq__where_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *c = k->in[0], *x = k->in[1], *y = k->in[2], *out = k->out[0];
    vq__cuda_walk w;
    walk_of(&w, out, c, x, y);
    return vq__cuda_launched(k, vq__cuda_where(vq_dtype_size(out->dtype), c->data, x->data, y->data,
                                               out->data, &w, l->s));
}

/* minmax_grad(dOut, X, Y) and where_grad(dOut, Cond, Z). */
static int select_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l, bool where)
{
    const vq__select_grad_params *p = k->params;
    vq_tensor *g = k->in[0], *a = k->in[1], *b = k->in[2], *dz = k->out[0];
    vq__cuda_walk w;
    walk_of(&w, g, g, a, b);
    return vq__cuda_launched(k, vq__cuda_sum_grad(where ? -1 : p->op, p->wrt, g->dtype, g->data,
                                                  a->data, where ? NULL : b->data, dz->data,
                                                  dz->numel, &w, where ? 2 : 1 + p->wrt, l->s));
}

int vq__minmax_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return select_grad_gpu(k, l, false);
}

int vq__where_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return select_grad_gpu(k, l, true);
}
