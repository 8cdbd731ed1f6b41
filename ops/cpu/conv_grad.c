/* conv2d's gradients on the CPU: conv2d_grad's kernel and gradient
 * maker, and conv_transpose2d, the op whose Out is conv2d_grad's dX (the
 * same products and col2im), with its shape checks, kernel and gradient
 * maker (that one shared with conv_transpose3d, cpu/conv3d.c). Apart from
 * conv.c, which keeps the forward kernel, conv2d_grad's shape checks (the
 * forward op's) and the table of all three ops; im2col and the checks
 * conv2d and conv_transpose2d share come from there (conv.h).
 *
 * conv2d_grad(X, W, dOut[, Out]) -> dZ with wrt (and the forward op's
 * attributes): wrt 0 is dX = col2im(W_g^T dOut_g) per image and group,
 * col2im adding each column entry back into the input element its tap
 * read; wrt 1 is dW_g = sum over images of dOut_g im2col(X)^T, one gemm per
 * image adding into dW (beta 1 after the first); wrt 2 is dB, the sum of
 * dOut over N, Ho and Wo (in double), which needs only dOut: X and W are
 * read for their shapes. With clip, it also takes the forward op's Out and
 * first passes dOut through the clip: dOut where lo < Out < hi, else 0
 * (relu_grad's rule; maximum's and minimum's gradients would also pass it
 * where the pre-activation equals lo or hi exactly). The gradient maker
 * emits one conv2d_grad per wanted input. */
#include "conv.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The reverse of im2col (conv.c): adds each entry of col back into the
 * element of x its tap read (entries in the padding are dropped). An
 * element of x gets its terms in the order of the taps (i, j), as
 * conv.cu's col2im adds them. */
#define COL2IM(T)                                                                     \
    static void col2im_##T(const T *col, T *x, const vq__window *w, int64_t channels) \
    {                                                                                 \
        int64_t plane = w->oh * w->ow;                                                \
        for (int64_t c = 0; c < channels; c++)                                        \
            for (int64_t i = 0; i < w->kh; i++)                                       \
                for (int64_t j = 0; j < w->kw; j++) {                                 \
                    const T *row = col + ((c * w->kh + i) * w->kw + j) * plane;       \
                    int64_t off = j * w->dw - w->pl, lo, hi;                          \
                    vq__window_taps(off, w->sw, w->w, w->ow, &lo, &hi);               \
                    for (int64_t oh = 0; oh < w->oh; oh++) {                          \
                        int64_t ih = oh * w->sh - w->pt + i * w->dh;                  \
                        if (ih < 0 || ih >= w->h)                                     \
                            continue;                                                 \
                        const T *r = row + oh * w->ow;                                \
                        T *xr = x + (c * w->h + ih) * w->w;                           \
                        for (int64_t o = lo; o < hi; o++)                             \
                            xr[o * w->sw + off] += r[o];                              \
                    }                                                                 \
                }                                                                     \
    }

COL2IM(float)
COL2IM(double)

static void col2im(vq_dtype dt, const void *col, void *x, const vq__window *w, int64_t channels)
{
    if (dt == VQ_F32)
        col2im_float(col, x, w, channels);
    else
        col2im_double(col, x, w, channels);
}

/* dX: per image and group, W_g^T dOut_g is the gradient of the group's
 * columns, which col2im adds back into dX's planes (zeroed first); a
 * direct product's columns are dX's planes themselves. */
static int conv_dx(const vq__kcall *k, const vq__conv *cv, const vq_tensor *w, const vq_tensor *gr,
                   vq_tensor *dx)
{
    vq_dtype dt = dx->dtype;
    size_t es = vq_dtype_size(dt);
    vq_tensor *col = NULL;
    int rc =
        cv->direct ? 0 : vq__kernel_scratch(k, dt, cv->rows * cv->plane, "im2col buffer", &col);
    if (rc < 0)
        return rc;
    if (col)
        memset(dx->data, 0, dx->nbytes);
    for (int64_t n = 0; n < cv->w.n; n++)
        for (int64_t g = 0; g < cv->groups; g++) {
            char *dxg = vq__elem_at(dx->data, (n * cv->w.c + g * cv->cg) * cv->w.h * cv->w.w, es);
            vq__gemm(dt, true, false, cv->rows, cv->plane, cv->mg, 1,
                     vq__elem_at(w->data, g * cv->mg * cv->rows, es), cv->rows,
                     vq__elem_at(gr->data, (n * cv->m + g * cv->mg) * cv->plane, es), cv->plane, 0,
                     col ? col->data : dxg);
            if (col)
                col2im(dt, col->data, dxg, &cv->w, cv->cg);
        }
    vq_tensor_release(col);
    return 0;
}

/* dW_g = sum over images of dOut_g [mg, plane] times the group's columns
 * transposed [plane, rows]: the first image's product is written, the
 * others add (beta 1). No images: zeros. */
static int conv_dw(const vq__kcall *k, const vq__conv *cv, const vq_tensor *gr)
{
    vq_tensor *x = k->in[0], *dw = k->out[0];
    vq_dtype dt = dw->dtype;
    size_t es = vq_dtype_size(dt);
    if (cv->w.n == 0) {
        memset(dw->data, 0, dw->nbytes);
        return 0;
    }
    vq_tensor *col = NULL;
    int rc =
        cv->direct ? 0 : vq__kernel_scratch(k, dt, cv->rows * cv->plane, "im2col buffer", &col);
    if (rc < 0)
        return rc;
    for (int64_t n = 0; n < cv->w.n; n++)
        for (int64_t g = 0; g < cv->groups; g++) {
            const char *xg =
                vq__elem_at(x->data, (n * cv->w.c + g * cv->cg) * cv->w.h * cv->w.w, es);
            const void *src = xg;
            if (col) {
                vq__conv_im2col(dt, xg, col->data, &cv->w, cv->cg);
                src = col->data;
            }
            vq__gemm(dt, false, true, cv->mg, cv->rows, cv->plane, 1,
                     vq__elem_at(gr->data, (n * cv->m + g * cv->mg) * cv->plane, es), cv->plane,
                     src, cv->plane, n ? 1 : 0, vq__elem_at(dw->data, g * cv->mg * cv->rows, es));
        }
    vq_tensor_release(col);
    return 0;
}

/* dB[m] = the sum of dOut[:, m, :, :], in double, images in order. */
#define CONV_DB(T)                                                                  \
    static void conv_db_##T(const T *g, T *db, int64_t n, int64_t m, int64_t plane) \
    {                                                                               \
        for (int64_t c = 0; c < m; c++) {                                           \
            double s = 0;                                                           \
            for (int64_t i = 0; i < n; i++) {                                       \
                const T *r = g + (i * m + c) * plane;                               \
                for (int64_t j = 0; j < plane; j++)                                 \
                    s += r[j];                                                      \
            }                                                                       \
            db[c] = (T)s;                                                           \
        }                                                                           \
    }

CONV_DB(float)
CONV_DB(double)

/* A clipped conv2d's dOut through the clip: g where lo < out < hi, else
 * 0 (relu_grad's rule at lo = 0, hi = inf). */
#define CLIP_MASK(T)                                                                 \
    static void clip_mask_##T(const T *g, const T *out, T *m, int64_t n, T lo, T hi) \
    {                                                                                \
        for (int64_t i = 0; i < n; i++)                                              \
            m[i] = out[i] > lo && out[i] < hi ? g[i] : 0;                            \
    }

CLIP_MASK(float)
CLIP_MASK(double)

int vq__conv2d_grad_kernel(const vq__kcall *k)
{
    const vq__window_params *p = k->params;
    vq_tensor *x = k->in[0], *w = k->in[1], *gr = k->in[2], *dz = k->out[0], *masked = NULL;
    if (dz->numel == 0)
        return 0;
    vq__conv cv =
        vq__conv_of(x->shape, w->shape, p->groups, gr->shape, p->stride, p->pad, p->dilation);
    if (p->clip && gr->numel > 0) {
        int rc = vq__tensor_empty(&masked, gr->dtype, gr->ndim, gr->shape);
        if (rc < 0)
            return vq__fail_prefixed(rc, "conv2d_grad: dOut through the clip");
        if (gr->dtype == VQ_F32)
            clip_mask_float(gr->data, k->in[3]->data, masked->data, gr->numel, (float)p->clip_lo,
                            (float)p->clip_hi);
        else
            clip_mask_double(gr->data, k->in[3]->data, masked->data, gr->numel, p->clip_lo,
                             p->clip_hi);
        gr = masked;
    }
    int rc = 0;
    switch (p->wrt) {
    case 0: rc = conv_dx(k, &cv, w, gr, dz); break;
    case 1: rc = conv_dw(k, &cv, gr); break;
    default:
        if (dz->dtype == VQ_F32)
            conv_db_float(gr->data, dz->data, cv.w.n, cv.m, cv.plane);
        else
            conv_db_double(gr->data, dz->data, cv.w.n, cv.m, cv.plane);
    }
    vq_tensor_release(masked);
    return rc;
}

/* One conv2d_grad per wanted input (X, W, the bias), each reading X, W and
 * dOut, with the forward op's attributes and wrt. */
int vq__conv2d_grad(const vq__grad *g)
{
    int wanted = vq__grad_wanted(g);
    if (wanted <= 0)
        return wanted;
    /* conv2d's schema has eight attributes, each given at most once. */
    if (g->nattrs < 0 || g->nattrs > 8)
        return vq__op_fail(g->def, "%d attributes; conv2d has 8", g->nattrs);
    vq_attr attrs[9];
    int n = 0;
    bool clip = false;
    for (int i = 0; i < g->nattrs; i++) {
        if (!strcmp(g->attrs[i].name, "act"))
            return vq__op_fail(g->def, "has no gradient with a fused act (an inference form: "
                                       "see graph/optimize.c's conv-act)");
        if (!strncmp(g->attrs[i].name, "act_", 4))
            continue; /* act's parameters, without act: nothing to undo */
        clip |= !strcmp(g->attrs[i].name, "clip");
        attrs[n++] = g->attrs[i];
    }
    for (int i = 0; i < g->nin && i < 3; i++) {
        if (!g->din[i])
            continue;
        attrs[n] = VQ_ATTR_I("wrt", i);
        /* a clipped conv2d's gradient ops also read its Out */
        const char *in[4] = {g->in[0], g->in[1], g->dout[0], g->out[0]};
        int rc = vq__emit(g, "conv2d_grad", in, clip ? 4 : 3, &g->din[i], 1, attrs, n + 1);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- conv_transpose2d: conv2d's gradient with respect to X, as an op ----
 *
 * ONNX's ConvTranspose: X [N, C, H, W], W [C, M/groups, kh, kw] (a
 * conv2d's weights from M to C channels, read the other way), an optional
 * bias B [M]; Out [N, M, OH, OW] with OH = stride (H - 1) + output_padding
 * + dilation (kh - 1) + 1 - pad_top - pad_bottom (the same for the width).
 * Out is exactly what conv2d_grad's dX would be for a conv2d over Out's
 * shape whose dOut is X: the same columns (W_g^T X_g) and col2im. Rows
 * that output_padding adds past the last window stay zero (plus the
 * bias). Its gradients are conv2d ops: dX = conv2d(dOut, W), dW =
 * conv2d_grad(dOut, W, X) with respect to W, dB = the sum of dOut over
 * all dims but the channels. */

int vq__conv_transpose2d_infer(vq__infer *c)
{
    vq__window_params *p = c->params;
    if (c->nin > 3)
        return vq__op_fail(c->def, "takes X, W and an optional bias B, got %d inputs", c->nin);
    int rc = vq__conv_common(c, p);
    if (rc < 0)
        return rc;
    int64_t groups = p->groups;
    int64_t op[2] = {0, 0};
    const vq_attr *a = vq__attr_find(c, "output_padding");
    if (a && a->n != 2)
        return vq__attr_fail(c, "output_padding", "has %d values, not 2", a->n);
    for (int i = 0; a && i < 2; i++) {
        op[i] = a->ints[i];
        if (op[i] < 0 || op[i] >= p->stride[i])
            return vq__attr_fail(c, "output_padding", "%lld is outside [0, stride %lld)",
                                 (long long)op[i], (long long)p->stride[i]);
    }
    const vq__meta *x = &c->in[0], *w = &c->in[1];
    char sx[100], sw[100];
    vq__shape_str(sx, sizeof sx, x->ndim, x->shape);
    vq__shape_str(sw, sizeof sw, w->ndim, w->shape);
    int64_t C = x->shape[1], mg = w->shape[1], k[2] = {w->shape[2], w->shape[3]};
    if (C >= 0 && C % groups != 0)
        return vq__in_fail(c, 0,
                           "has %lld channels (dim 1), which groups %lld does not divide: "
                           "X is %s",
                           (long long)C, (long long)groups, sx);
    if (!vq__dim_match(w->shape[0], C))
        return vq__in_fail(c, 1, "has %lld input channels (dim 0), X has %lld: X is %s, W is %s",
                           (long long)w->shape[0], (long long)C, sx, sw);
    for (int i = 0; i < 2; i++)
        if ((k[i] >= 0 && k[i] < 1) || k[i] > INT32_MAX)
            return vq__in_fail(c, 1,
                               "kernel %lldx%lld (dims 2 and 3): each must be in [1, "
                               "2^31): W is %s",
                               (long long)k[0], (long long)k[1], sw);
    c->out[0].dtype = x->dtype;
    c->out[0].ndim = 4;
    c->out[0].shape[0] = x->shape[0];
    c->out[0].shape[1] = mg >= 0 ? mg * groups : -1;
    for (int i = 0; i < 2; i++) {
        int64_t in = x->shape[2 + i];
        if (in < 0 || k[i] < 0) {
            c->out[0].shape[2 + i] = -1;
            continue;
        }
        /* bounded: dims, strides, dilations and pads are all below 2^31 */
        int64_t o = p->stride[i] * (in - 1) + op[i] + p->dilation[i] * (k[i] - 1) + 1 - p->pad[i] -
                    p->pad[2 + i];
        if (in < 1 || o < 1)
            return vq__op_fail(c->def,
                               "X %s and W %s with these strides, pads and dilations "
                               "make an output %s of %lld",
                               sx, sw, i ? "width" : "height", (long long)o);
        c->out[0].shape[2 + i] = o;
    }
    int64_t rows = mg >= 0 && k[0] >= 0 && k[1] >= 0 ? mg * k[0] * k[1] : -1;
    int64_t plane = x->shape[2] >= 0 && x->shape[3] >= 0 ? x->shape[2] * x->shape[3] : -1;
    if (rows > INT_MAX || plane > INT_MAX || (C >= 0 && C / groups > INT_MAX))
        return vq__op_fail(c->def, "X %s and W %s make a product past BLAS's int sizes", sx, sw);
    if (c->nin == 3) {
        const vq__meta *b = &c->in[2];
        int64_t M = c->out[0].shape[1];
        if (b->dtype != x->dtype)
            return vq__conv_bias_fail(c, "dtype %s differs from X's %s", vq_dtype_name(b->dtype),
                                      vq_dtype_name(x->dtype));
        if (b->ndim != 1 || !vq__dim_match(b->shape[0], M)) {
            char sb[100];
            return vq__conv_bias_fail(c, "shape %s is not [M] for the M = %lld output channels",
                                      vq__shape_str(sb, sizeof sb, b->ndim, b->shape),
                                      (long long)M);
        }
        if (M < 0)
            c->out[0].shape[1] = b->shape[0];
    }
    return 0;
}

/* o [n, m, plane] += b[m]: conv_transpose2d's bias. */
#define ADD_BIAS(T)                                                                 \
    static void add_bias_##T(T *o, const T *b, int64_t n, int64_t m, int64_t plane) \
    {                                                                               \
        for (int64_t i = 0; i < n * m; i++) {                                       \
            T v = b[i % m], *r = o + i * plane;                                     \
            for (int64_t j = 0; j < plane; j++)                                     \
                r[j] += v;                                                          \
        }                                                                           \
    }

ADD_BIAS(float)
ADD_BIAS(double)

int vq__conv_transpose2d_kernel(const vq__kcall *k)
{
    const vq__window_params *p = k->params;
    vq_tensor *x = k->in[0], *w = k->in[1], *b = k->nin > 2 ? k->in[2] : NULL, *o = k->out[0];
    if (o->numel == 0)
        return 0;
    /* the conv2d whose dX this is: over Out's shape, with X as its dOut */
    vq__conv cv =
        vq__conv_of(o->shape, w->shape, p->groups, x->shape, p->stride, p->pad, p->dilation);
    int rc = 0;
    if (x->numel == 0)
        memset(o->data, 0, o->nbytes);
    else
        rc = conv_dx(k, &cv, w, x, o);
    if (rc == 0 && b && o->dtype == VQ_F32)
        add_bias_float(o->data, b->data, cv.w.n, o->shape[1], o->shape[2] * o->shape[3]);
    else if (rc == 0 && b)
        add_bias_double(o->data, b->data, cv.w.n, o->shape[1], o->shape[2] * o->shape[3]);
    return rc;
}

int vq__conv_transpose_grad(const vq__grad *g, const char *conv, int rank)
{
    int wanted = vq__grad_wanted(g);
    if (wanted <= 0)
        return wanted;
    vq_attr attrs[8];
    int n = 0;
    for (int i = 0; i < g->nattrs && n < 7; i++)
        if (strcmp(g->attrs[i].name, "output_padding")) /* conv2d and conv3d have none */
            attrs[n++] = g->attrs[i];
    char grad[16];
    snprintf(grad, sizeof grad, "%s_grad", conv);
    int rc = 0;
    if (g->din[0])
        rc = vq__emit(g, conv, (const char *const[]){g->dout[0], g->in[1]}, 2, &g->din[0], 1, attrs,
                      n);
    if (rc == 0 && g->din[1]) {
        attrs[n] = VQ_ATTR_I("wrt", 1);
        rc = vq__emit(g, grad, (const char *const[]){g->dout[0], g->in[1], g->in[0]}, 3, &g->din[1],
                      1, attrs, n + 1);
    }
    if (rc == 0 && g->nin > 2 && g->din[2]) {
        static const int64_t axes[] = {0, 2, 3, 4};
        vq_attr sum = VQ_ATTR_IS("axes", axes, rank - 1);
        rc = vq__emit(g, "sum", &g->dout[0], 1, &g->din[2], 1, &sum, 1);
    }
    return rc;
}

int vq__conv_transpose2d_grad(const vq__grad *g)
{
    return vq__conv_transpose_grad(g, "conv2d", 4);
}
