/* The CUDA host glue of max_pool2d, avg_pool2d, max_pool2d_argmax and
 * global_avg_pool with their gradients (ops/cpu/pool.c; kernels in conv.cu
 * and rows.cu): for each op, the function its definition names (cuda_ops.h),
 * which calls the launchers of kernels.h with the tensors' device pointers
 * and the op's params on the op's stream (launch.c: how a call runs).
 * Compiled only when CUDA is found (have_cuda). */
#include "cuda_internal.h"

static vq__window pool_window(const vq__window_params *p, const vq_tensor *x, const int64_t *out)
{
    return vq__window_make(x->shape, p->kernel[0], p->kernel[1], out, p->stride, p->pad,
                           p->dilation);
}

/* max_pool2d and avg_pool2d (the definition's code says which). */
int vq__pool_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    bool max = k->def->code == VQ__POOL_MAX;
    const vq__window_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    if (o->numel == 0)
        return 0;
    vq__window w = pool_window(p, x, o->shape);
    if (max)
        return vq__cuda_launched(k, vq__cuda_max_pool(x->dtype, x->data, o->data, &w, l->s));
    return vq__cuda_launched(k, vq__cuda_avg_pool(x->dtype, x->data, o->data, &w,
                                                  p->count_include_pad, l->s));
}

/* Their gradients. */
int vq__pool_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    bool max = k->def->code == VQ__POOL_MAX;
    const vq__window_params *p = k->params;
    vq_tensor *x = k->in[0], *g = k->in[1], *dx = k->out[0];
    if (dx->numel == 0)
        return 0;
    vq__window w = pool_window(p, x, g->shape);
    if (max)
        return vq__cuda_launched(k, vq__cuda_max_pool_grad(x->dtype, x->data, g->data, dx->data, &w,
                                                           l->s));
    return vq__cuda_launched(k, vq__cuda_avg_pool_grad(x->dtype, g->data, dx->data, &w,
                                                       p->count_include_pad, l->s));
}

int vq__max_pool_argmax_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[0], *o = k->out[0];
    if (o->numel == 0)
        return 0;
    vq__window w = pool_window(k->params, x, o->shape);
    const vq__window_params *p = k->params;
    return vq__cuda_launched(k, vq__cuda_max_pool_argmax(x->dtype, x->data, o->data, &w,
                                                         p->column_major, l->s));
}

/* global_avg_pool: reduce.c's mean over X seen as [N * C, the rest]. */
int vq__global_pool_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[0], *o = k->out[0];
    if (o->numel == 0)
        return 0;
    int64_t len = 1;
    for (int d = 2; d < x->ndim; d++)
        len *= x->shape[d];
    return vq__cuda_launched(k, vq__cuda_reduce(1, x->dtype, x->data, o->data, o->numel, len, 1,
                                                l->s));
}

/* dOut * (1 / count) spread over the dims after the channels: mean_grad. */
int vq__global_pool_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *g = k->in[1], *dx = k->out[0];
    if (dx->numel == 0)
        return 0;
    unsigned mask = 0;
    for (int d = 2; d < dx->ndim; d++)
        mask |= 1u << d;
    return vq__cuda_launched(k, vq__cuda_reduce_axes_grad(1, dx->dtype, g->data, dx->data, dx->ndim,
                                                          dx->shape, mask, l->s));
}
