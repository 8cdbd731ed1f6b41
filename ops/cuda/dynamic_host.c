/* The CUDA host glue of nonzero, top_k, unique, compress, compress_grad
 * and non_max_suppression (ops/cpu/dynamic.c; kernels in dynamic.cu): for
 * each op, the function its definition names (cuda_ops.h), which calls
 * the launchers of kernels.h with the tensors' device pointers, the
 * shapes the host inference gave the outputs, and scratch integers
 * allocated in the op's stream order (released there after the
 * launches). Compiled only when CUDA is found (have_cuda). */
#include "cuda_internal.h"

/* n integers of scratch on the op's stream (*out NULL for none). */
static int scratch(const vq__kcall *k, const vq__cuda_launch *l, int64_t n, vq_tensor **out)
{
    *out = NULL;
    if (n <= 0)
        return 0;
    int rc = vq__tensor_empty_at(out, k->x->ctx, VQ_I64, 1, &n, l->bs);
    return rc < 0
               ? vq__fail_prefixed(rc, "%s: its %lld scratch integers", k->def->type, (long long)n)
               : 0;
}

static int launched(const vq__kcall *k, const vq__cuda_launch *l, vq_tensor *w, int rc)
{
    rc = vq__cuda_launched(k, rc);
    if (w)
        vq__tensor_release_on(w, l->bs);
    return rc;
}

int vq__nonzero_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[0], *o = k->out[0];
    return vq__cuda_launched(k, vq__cuda_nonzero(x->dtype, x->data, x->numel, x->ndim, x->shape,
                                                 o->data, o->shape[1], l->s));
}

int vq__top_k_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__top_k_params *p = k->params;
    vq_tensor *x = k->in[0], *vals = k->out[0], *w;
    int64_t outer, n, inner, kk = vals->shape[p->axis];
    vq__lines_of(x->ndim, x->shape, p->axis, &outer, &n, &inner);
    int rc = scratch(k, l, outer * inner * kk, &w);
    if (rc < 0 || !w)
        return rc;
    return launched(k, l, w,
                    vq__cuda_top_k(x->dtype, x->data, vals->data, k->out[1]->data, w->data, outer,
                                   n, inner, kk, p->largest, l->s));
}

int vq__unique_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__select_params *p = k->params;
    vq_tensor *x = k->in[0], *w;
    vq__unique_geom g = {.dt = x->dtype, .outer = 1, .inner = 1, .sorted = p->sorted};
    if (p->axis < 0)
        g.m = x->numel;
    else
        vq__lines_of(x->ndim, x->shape, p->axis, &g.outer, &g.m, &g.inner);
    int rc = scratch(k, l, 4 * g.m, &w);
    if (rc < 0 || !w)
        return rc;
    return launched(k, l, w,
                    vq__cuda_unique(x->data, g, w->data, k->out[0]->data,
                                    (int)vq_dtype_size(x->dtype), k->out[1]->data, k->out[2]->data,
                                    k->out[3]->data, l->s));
}

/* X as [outer, dim, inner] around compress's axis (flattened: [1, n, 1]),
 * and Condition's entries that fall on it. */
static void compress_lines(const vq__select_params *p, const vq_tensor *x, const vq_tensor *cond,
                           int64_t *outer, int64_t *dim, int64_t *inner, int64_t *len)
{
    if (p->axis < 0)
        *outer = *inner = 1, *dim = x->numel;
    else
        vq__lines_of(x->ndim, x->shape, p->axis, outer, dim, inner);
    *len = cond->numel < *dim ? cond->numel : *dim;
}

int vq__compress_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__select_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0], *w;
    int64_t outer, dim, inner, len;
    compress_lines(p, x, k->in[1], &outer, &dim, &inner, &len);
    if (o->numel == 0)
        return 0;
    int rc = scratch(k, l, len, &w);
    if (rc < 0 || !w)
        return rc;
    int64_t n = p->axis < 0 ? o->numel : o->shape[p->axis];
    return launched(k, l, w,
                    vq__cuda_compress(k->in[1]->data, len, w->data, x->data, o->data,
                                      (int)vq_dtype_size(x->dtype), outer, dim, inner, n, l->s));
}

int vq__compress_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__select_params *p = k->params;
    vq_tensor *g = k->in[2], *dx = k->out[0], *w;
    int64_t outer, dim, inner, len;
    compress_lines(p, dx, k->in[1], &outer, &dim, &inner, &len);
    int rc = scratch(k, l, len, &w);
    if (rc < 0)
        return rc;
    int64_t n = p->axis < 0 ? g->numel : g->shape[p->axis];
    return launched(k, l, w,
                    vq__cuda_compress_grad(dx->dtype, k->in[1]->data, len, w ? w->data : NULL,
                                           g->data, dx->data, outer, dim, inner, n, l->s));
}

int vq__nms_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__nms_params *p = k->params;
    vq_tensor *b = k->in[0], *w;
    vq__nms_problem q = {.batches = b->shape[0],
                         .spatial = b->shape[1],
                         .classes = k->in[1]->shape[1],
                         .center = p->center};
    if (k->out[0]->numel == 0)
        return 0;
    int rc = scratch(k, l, 2 * q.spatial, &w);
    if (rc < 0 || !w)
        return rc;
    return launched(k, l, w,
                    vq__cuda_nms(b->data, k->in[1]->data, k->in[2]->data, k->in[2]->dtype,
                                 k->in[3]->data, k->nin > 4 ? k->in[4]->data : NULL, q, w->data,
                                 k->out[0]->data, l->s));
}
