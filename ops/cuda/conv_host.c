/* The CUDA host glue of conv2d, its gradient and conv_transpose2d
 * (ops/cpu/conv.c; conv.cu): for each op, the function its definition names
 * (cuda_ops.h), which calls the launchers of kernels.h with the tensors'
 * device pointers and the op's params on the op's stream (launch.c: how a
 * call runs). im2col, col2im and the bias are conv.cu's kernels, the
 * products vq__cuda_matmul's; the buffer helpers (vq__cuda_columns,
 * vq__cuda_image) serve conv3d_host.c too. Compiled only when CUDA is found
 * (have_cuda). */
#include "cuda_internal.h"

/* One image's columns for every group ([c * kh * kw, plane]) on the op's
 * device, allocated in the op's stream order; the caller frees it with
 * vq__tensor_release_on on the same stream, after its last use is
 * enqueued. NULL for a direct product. */
int vq__cuda_columns(const vq__kcall *k, const vq__cuda_launch *l, const vq__conv *d, vq_dtype dt,
                     vq_tensor **out)
{
    *out = NULL;
    int64_t n = d->w.c * d->w.kh * d->w.kw * d->plane;
    if (d->direct || n == 0)
        return 0;
    int rc = vq__tensor_empty_at(out, k->x->ctx, dt, 1, &n, l->bs);
    if (rc < 0) {
        return vq__fail_prefixed(rc, "%s: the im2col buffer of %lld elements", k->def->type,
                                 (long long)n);
    }
    return 0;
}

const char *vq__cuda_image(const vq_tensor *t, int64_t n, int64_t per_image)
{
    return (const char *)t->data + (size_t)(n * per_image) * vq_dtype_size(t->dtype);
}

/* Per image: im2col, then one strided-batched product over the groups;
 * then the bias. */
int vq__conv2d_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__window_params *p = k->params;
    vq_tensor *x = k->in[0], *w = k->in[1], *b = k->nin > 2 ? k->in[2] : NULL, *o = k->out[0];
    if (p->has_act) /* the CPU kernel's fused form only (ops/cpu/conv.c) */
        return vq__fail(VQ_ENOSYS, "conv2d: a fused act runs on the CPU only");
    if (o->numel == 0)
        return 0;
    vq__conv d =
        vq__conv_of(x->shape, w->shape, p->groups, o->shape, p->stride, p->pad, p->dilation);
    vq_tensor *col;
    int rc = vq__cuda_columns(k, l, &d, x->dtype, &col);
    if (rc < 0)
        return rc;
    int64_t xsize = d.w.c * d.w.h * d.w.w, osize = d.m * d.plane;
    for (int64_t n = 0; n < d.w.n && rc == 0; n++) {
        const void *src = vq__cuda_image(x, n, xsize);
        if (col) {
            rc = vq__cuda_launched(k, vq__cuda_im2col(x->dtype, src, col->data, &d.w, l->s));
            src = col->data;
        }
        if (rc == 0)
            rc = vq__cuda_launched(k, vq__cuda_matmul(x->dtype, 0, 0, d.groups, d.mg, d.plane,
                                                      d.rows, 1, w->data, 0, src, 0, 0,
                                                      (void *)vq__cuda_image(o, n, osize), l->s));
    }
    if (rc == 0 && b)
        rc = vq__cuda_launched(k, vq__cuda_bias_add(x->dtype, o->data, b->data, d.w.n, d.m, d.plane,
                                                    l->s));
    if (rc == 0 && p->clip)
        rc = vq__cuda_launched(k, vq__cuda_clip(x->dtype, o->data, o->numel, p->clip_lo, p->clip_hi,
                                                l->s));
    vq__tensor_release_on(col, l->bs);
    return rc;
}

static int conv2d_grad_products(const vq__kcall *k, const vq__cuda_launch *l, vq_tensor *g);

/* conv_grad.c's gradients: wrt 0, per image, W_g^T dOut_g into the columns,
 * then col2im into dX (direct: into dX itself); wrt 1, per image, im2col
 * and dOut_g times the columns transposed, added into dW after the first
 * image; wrt 2, the sum of dOut over every dim but the channels. */
int vq__conv2d_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__window_params *p = k->params;
    vq_tensor *g = k->in[2], *dz = k->out[0];
    if (dz->numel == 0)
        return 0;
    vq_dtype dt = dz->dtype;
    vq_tensor *masked = NULL;
    if (p->clip && g->numel > 0) {
        /* dOut through the clip first (conv_grad.c): where lo < Out < hi */
        int rc = vq__tensor_empty_at(&masked, k->x->ctx, dt, g->ndim, g->shape, l->bs);
        if (rc < 0)
            return vq__fail_prefixed(rc, "conv2d_grad: dOut through the clip");
        rc = vq__cuda_launched(k, vq__cuda_clip_mask(dt, g->data, k->in[3]->data, masked->data,
                                                     g->numel, p->clip_lo, p->clip_hi, l->s));
        if (rc < 0) {
            vq__tensor_release_on(masked, l->bs);
            return rc;
        }
        g = masked;
    }
    int rc = conv2d_grad_products(k, l, g);
    vq__tensor_release_on(masked, l->bs);
    return rc;
}

/* vq__conv2d_grad_gpu's products, from dOut g (masked by the clip when there
 * is one). */
static int conv2d_grad_products(const vq__kcall *k, const vq__cuda_launch *l, vq_tensor *g)
{
    const vq__window_params *p = k->params;
    vq_tensor *x = k->in[0], *w = k->in[1], *dz = k->out[0];
    vq_dtype dt = dz->dtype;
    if (p->wrt == 2)
        return vq__cuda_launched(k, vq__cuda_reduce_axes(0, dt, g->data, dz->data, 4, g->shape,
                                                         1u | 4u | 8u, l->s));
    vq__conv d =
        vq__conv_of(x->shape, w->shape, p->groups, g->shape, p->stride, p->pad, p->dilation);
    if (p->wrt == 1 && d.w.n == 0) /* the sum of no products */
        return vq__cuda_op_called(k, cudaMemsetAsync(dz->data, 0, dz->nbytes, l->s),
                                  "cudaMemsetAsync");
    vq_tensor *col;
    int rc = vq__cuda_columns(k, l, &d, dt, &col);
    if (rc < 0)
        return rc;
    int64_t xsize = d.w.c * d.w.h * d.w.w, gsize = d.m * d.plane;
    for (int64_t n = 0; n < d.w.n && rc == 0; n++) {
        const void *gn = vq__cuda_image(g, n, gsize);
        if (p->wrt == 0) {
            void *dxn = (void *)vq__cuda_image(dz, n, xsize);
            rc = vq__cuda_launched(k, vq__cuda_matmul(dt, 1, 0, d.groups, d.rows, d.plane, d.mg, 1,
                                                      w->data, 0, gn, 0, 0, col ? col->data : dxn,
                                                      l->s));
            if (rc == 0 && col)
                rc = vq__cuda_launched(k, vq__cuda_col2im(dt, col->data, dxn, &d.w, l->s));
            continue;
        }
        const void *src = vq__cuda_image(x, n, xsize);
        if (col) {
            rc = vq__cuda_launched(k, vq__cuda_im2col(dt, src, col->data, &d.w, l->s));
            src = col->data;
        }
        if (rc == 0)
            rc = vq__cuda_launched(k, vq__cuda_matmul(dt, 0, 1, d.groups, d.mg, d.rows, d.plane, 1,
                                                      gn, 0, src, 0, n ? 1 : 0, dz->data, l->s));
    }
    vq__tensor_release_on(col, l->bs);
    return rc;
}

/* conv_grad.c's conv_transpose2d: conv2d_grad's dX for a conv2d over Out's
 * shape whose dOut is X, then the bias. */
int vq__conv_transpose2d_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__window_params *p = k->params;
    vq_tensor *x = k->in[0], *w = k->in[1], *b = k->nin > 2 ? k->in[2] : NULL, *o = k->out[0];
    if (o->numel == 0)
        return 0;
    int rc = 0;
    vq_dtype dt = o->dtype;
    vq__conv d =
        vq__conv_of(o->shape, w->shape, p->groups, x->shape, p->stride, p->pad, p->dilation);
    if (x->numel == 0) {
        rc = vq__cuda_op_called(k, cudaMemsetAsync(o->data, 0, o->nbytes, l->s), "cudaMemsetAsync");
    } else {
        vq_tensor *col;
        if ((rc = vq__cuda_columns(k, l, &d, dt, &col)) < 0)
            return rc;
        int64_t osize = d.w.c * d.w.h * d.w.w, xsize = d.m * d.plane;
        for (int64_t n = 0; n < d.w.n && rc == 0; n++) {
            void *on = (void *)vq__cuda_image(o, n, osize);
            rc = vq__cuda_launched(k, vq__cuda_matmul(dt, 1, 0, d.groups, d.rows, d.plane, d.mg, 1,
                                                      w->data, 0, vq__cuda_image(x, n, xsize), 0, 0,
                                                      col ? col->data : on, l->s));
            if (rc == 0 && col)
                rc = vq__cuda_launched(k, vq__cuda_col2im(dt, col->data, on, &d.w, l->s));
        }
        vq__tensor_release_on(col, l->bs);
    }
    if (rc == 0 && b)
        rc = vq__cuda_launched(k, vq__cuda_bias_add(dt, o->data, b->data, o->shape[0], o->shape[1],
                                                    o->shape[2] * o->shape[3], l->s));
    return rc;
}
