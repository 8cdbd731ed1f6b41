/* The CUDA host glue of conv3d, its gradient and conv_transpose3d
 * (ops/cpu/conv3d.c; conv3d.cu): for each op, the function its definition
 * names (cuda_ops.h), which calls the launchers of kernels.h with the
 * tensors' device pointers and the op's params on the op's stream (launch.c:
 * how a call runs). vol2col and col2vol are conv3d.cu's kernels, the
 * products vq__cuda_matmul's. Compiled only when CUDA is found (have_cuda). */
#include "cuda_internal.h"

/* One image's columns for every group ([c * kd * kh * kw, plane]) on the
 * op's device, in the op's stream order (columns' rule). */
static int vol_columns(const vq__kcall *k, const vq__cuda_launch *l, const vq__vol *v, vq_dtype dt,
                       vq_tensor **out)
{
    *out = NULL;
    int64_t n = v->groups * v->rows * v->plane;
    if (n == 0)
        return 0;
    int rc = vq__tensor_empty_at(out, k->x->ctx, dt, 1, &n, l->bs);
    if (rc < 0) {
        return vq__fail_prefixed(rc, "%s: the vol2col buffer of %lld elements", k->def->type,
                                 (long long)n);
    }
    return 0;
}

/* dX of the conv3d v over dX's shape from its dOut g, per image: W_g^T
 * dOut_g for every group (one batched product) into the columns, then
 * col2vol (conv3d.c's conv3d_dx; conv_transpose3d's Out). */
static int vol_dx(const vq__kcall *k, const vq__cuda_launch *l, const vq__vol *v,
                  const vq_tensor *w, const vq_tensor *g, vq_tensor *dx)
{
    vq_dtype dt = dx->dtype;
    vq_tensor *col;
    int rc = vol_columns(k, l, v, dt, &col);
    if (rc < 0)
        return rc;
    if (!col)
        return vq__cuda_op_called(k, cudaMemsetAsync(dx->data, 0, dx->nbytes, l->s),
                                  "cudaMemsetAsync");
    int64_t xsize = v->c * v->vol, gsize = v->m * v->plane;
    for (int64_t n = 0; n < v->n && rc == 0; n++) {
        rc = vq__cuda_launched(k, vq__cuda_matmul(dt, 1, 0, v->groups, v->rows, v->plane, v->mg, 1,
                                                  w->data, 0, vq__cuda_image(g, n, gsize), 0, 0,
                                                  col->data, l->s));
        if (rc == 0)
            rc = vq__cuda_launched(k, vq__cuda_col2vol(dt, col->data,
                                                       (void *)vq__cuda_image(dx, n, xsize), v,
                                                       v->c, l->s));
    }
    vq__tensor_release_on(col, l->bs);
    return rc;
}

/* Per image: vol2col, then one batched product over the groups; then the
 * bias. */
int vq__conv3d_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__conv3d_params *p = k->params;
    vq_tensor *x = k->in[0], *w = k->in[1], *b = k->nin > 2 ? k->in[2] : NULL, *o = k->out[0];
    if (o->numel == 0)
        return 0;
    vq__vol v = vq__vol_of(x->shape, w->shape, p->groups, o->shape, p->stride, p->pad, p->dilation);
    vq_tensor *col;
    int rc = vol_columns(k, l, &v, x->dtype, &col);
    if (rc < 0)
        return rc;
    int64_t xsize = v.c * v.vol, osize = v.m * v.plane;
    for (int64_t n = 0; n < v.n && rc == 0 && col; n++) {
        rc = vq__cuda_launched(k, vq__cuda_vol2col(x->dtype, vq__cuda_image(x, n, xsize), col->data,
                                                   &v, v.c, l->s));
        if (rc == 0)
            rc = vq__cuda_launched(k, vq__cuda_matmul(x->dtype, 0, 0, v.groups, v.mg, v.plane,
                                                      v.rows, 1, w->data, 0, col->data, 0, 0,
                                                      (void *)vq__cuda_image(o, n, osize), l->s));
    }
    if (rc == 0 && !col) /* no input channels: the sums of nothing */
        rc = vq__cuda_op_called(k, cudaMemsetAsync(o->data, 0, o->nbytes, l->s), "cudaMemsetAsync");
    if (rc == 0 && b)
        rc = vq__cuda_launched(k, vq__cuda_bias_add(x->dtype, o->data, b->data, v.n, v.m, v.plane,
                                                    l->s));
    vq__tensor_release_on(col, l->bs);
    return rc;
}

/* conv3d.c's gradients: wrt 0 vol_dx; wrt 1, per image, vol2col and
 * dOut_g times the columns transposed, added into dW after the first
 * image; wrt 2, the sum of dOut over every dim but the channels. */
int vq__conv3d_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__conv3d_params *p = k->params;
    vq_tensor *x = k->in[0], *w = k->in[1], *g = k->in[2], *dz = k->out[0];
    if (dz->numel == 0)
        return 0;
    vq_dtype dt = dz->dtype;
    if (p->wrt == 2)
        return vq__cuda_launched(k, vq__cuda_reduce_axes(0, dt, g->data, dz->data, 5, g->shape,
                                                         1u | 4u | 8u | 16u, l->s));
    vq__vol v = vq__vol_of(x->shape, w->shape, p->groups, g->shape, p->stride, p->pad, p->dilation);
    if (p->wrt == 0)
        return vol_dx(k, l, &v, w, g, dz);
    vq_tensor *col = NULL;
    int rc = v.n == 0 ? 0 : vol_columns(k, l, &v, dt, &col);
    if (rc < 0)
        return rc;
    if (!col) /* the sum of no products */
        return vq__cuda_op_called(k, cudaMemsetAsync(dz->data, 0, dz->nbytes, l->s),
                                  "cudaMemsetAsync");
    int64_t xsize = v.c * v.vol, gsize = v.m * v.plane;
    for (int64_t n = 0; n < v.n && rc == 0; n++) {
        rc = vq__cuda_launched(k, vq__cuda_vol2col(dt, vq__cuda_image(x, n, xsize), col->data, &v,
                                                   v.c, l->s));
        if (rc == 0)
            rc = vq__cuda_launched(k, vq__cuda_matmul(dt, 0, 1, v.groups, v.mg, v.rows, v.plane, 1,
                                                      vq__cuda_image(g, n, gsize), 0, col->data, 0,
                                                      n ? 1 : 0, dz->data, l->s));
    }
    vq__tensor_release_on(col, l->bs);
    return rc;
}

/* conv3d.c's conv_transpose3d: conv3d_grad's dX for a conv3d over Out's
 * shape whose dOut is X, then the bias. */
int vq__conv_transpose3d_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__conv3d_params *p = k->params;
    vq_tensor *x = k->in[0], *w = k->in[1], *b = k->nin > 2 ? k->in[2] : NULL, *o = k->out[0];
    if (o->numel == 0)
        return 0;
    vq__vol v = vq__vol_of(o->shape, w->shape, p->groups, x->shape, p->stride, p->pad, p->dilation);
    int rc = x->numel == 0 ? vq__cuda_op_called(k, cudaMemsetAsync(o->data, 0, o->nbytes, l->s),
                                                "cudaMemsetAsync")
                           : vol_dx(k, l, &v, w, x, o);
    if (rc == 0 && b)
        rc = vq__cuda_launched(k, vq__cuda_bias_add(o->dtype, o->data, b->data, v.n, o->shape[1],
                                                    v.vol, l->s));
    return rc;
}
