/* 3-D convolutions: conv3d (NCDHW, strides, asymmetric pads, dilations,
 * groups, an optional bias), its gradient op conv3d_grad, and
 * conv_transpose3d (ONNX's ConvTranspose over volumes), on the CPU through
 * vol2col and OpenBLAS's gemm (vq__gemm, cpu/matmul.c): conv.c's conv2d
 * design with one more spatial dim. The geometry and the gather of col2vol
 * are ops/vol_shared.h's, which the CUDA kernels (ops/cuda/conv3d.cu)
 * share.
 *
 * conv3d(X, W[, B]) -> Out: X [N, C, D, H, W], W [M, C/groups, kd, kh,
 * kw], B [M] (W is a variadic slot taking W and then, if given, B, as
 * conv2d's). For each image and group, vol2col copies the group's input
 * channels into a [C/groups * kd * kh * kw, od * oh * ow] matrix, zeros
 * where a tap lies in the padding, and Out's group is one gemm: W_g times
 * that matrix. Images (and groups) are shared with the engine's idle
 * workers when the call is large, each participant with its own columns.
 *
 * conv3d_grad(X, W, dOut) -> dZ with wrt: 0 dX = col2vol(W_g^T dOut_g)
 * per image and group (col2vol gathers, into each input element, the
 * column entries that read it, in tap order); 1 dW_g = sum over images of
 * dOut_g vol2col(X)^T (beta 1 after the first image); 2 dB, the sum of
 * dOut over N and the output volume (in double).
 *
 * conv_transpose3d(X, W[, B]) -> Out: X [N, C, D, H, W], W [C, M/groups,
 * kd, kh, kw]; Out's dims are stride (in - 1) + output_padding +
 * dilation (k - 1) + 1 - pads (each spatial dim), and Out is the dX of a
 * conv3d over Out's shape whose dOut is X, plus the bias. Its gradients
 * are conv3d ops: dX = conv3d(dOut, W), dW = conv3d_grad(dOut, W, X) wrt
 * 1, dB = the sum of dOut over all dims but the channels. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"
#include "../vol_shared.h"
#include "../window_shared.h" /* vq__window_out */

#include <limits.h>
#include <string.h>

static const char *const conv_in[] = {"X", "W"};
static const char *const conv_out[] = {"Out"};
static const char *const grad_in[] = {"X", "W", "dOut"};
static const char *const grad_out[] = {"dZ"};

/* ---- attributes and shapes ---- */

/* A list attribute of n ints, each in [lo, 2^31), into out; dflt (each)
 * when it is absent. */
static int ints_attr(const vq__infer *c, const char *name, int n, int64_t lo, int64_t dflt,
                     int64_t *out)
{
    const vq_attr *a = vq__attr_find(c, name);
    if (a && a->n != n)
        return vq__attr_fail(c, name, "has %d values, not %d", a->n, n);
    for (int i = 0; i < n; i++) {
        out[i] = a ? a->ints[i] : dflt;
        if (out[i] < lo || out[i] > INT32_MAX)
            return vq__attr_fail(c, name, "value %d is %lld, outside [%lld, 2^31)", i,
                                 (long long)out[i], (long long)lo);
    }
    return 0;
}

/* X and W float 5-D tensors of one dtype, the attributes into p. */
static int conv3d_common(const vq__infer *c, vq__conv3d_params *p)
{
    int rc;
    if (c->nin > 3)
        return vq__op_fail(c->def, "takes X, W and an optional bias B, got %d inputs", c->nin);
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0 ||
        (rc = vq__check_rank(c, 0, 5)) < 0 || (rc = vq__check_rank(c, 1, 5)) < 0 ||
        (rc = ints_attr(c, "strides", 3, 1, 1, p->stride)) < 0 ||
        (rc = ints_attr(c, "pads", 6, 0, 0, p->pad)) < 0 ||
        (rc = ints_attr(c, "dilations", 3, 1, 1, p->dilation)) < 0)
        return rc;
    int64_t groups = vq__attr_int(c, "groups", 1);
    if (groups < 1 || groups > INT32_MAX)
        return vq__attr_fail(c, "groups", "is %lld, outside [1, 2^31)", (long long)groups);
    p->groups = groups;
    const vq__meta *w = &c->in[1];
    char sw[100];
    for (int i = 2; i < 5; i++)
        if ((w->shape[i] >= 0 && w->shape[i] < 1) || w->shape[i] > INT32_MAX)
            return vq__in_fail(c, 1, "kernel dim %d is %lld, outside [1, 2^31): W is %s", i,
                               (long long)w->shape[i],
                               vq__shape_str(sw, sizeof sw, w->ndim, w->shape));
    return 0;
}

/* The bias in slot 2 (when there are 3 inputs): X's dtype, [M]. */
static int bias_check(const vq__infer *c, int64_t m)
{
    if (c->nin < 3)
        return 0;
    const vq__meta *b = &c->in[2];
    char sb[100];
    if (b->dtype != c->in[0].dtype)
        return vq__op_fail(c->def, "input B (slot 2): dtype %s differs from X's %s",
                           vq_dtype_name(b->dtype), vq_dtype_name(c->in[0].dtype));
    if (b->ndim != 1 || !vq__dim_match(b->shape[0], m))
        return vq__op_fail(c->def,
                           "input B (slot 2): shape %s is not [M] for the M = %lld "
                           "output channels",
                           vq__shape_str(sb, sizeof sb, b->ndim, b->shape), (long long)m);
    return 0;
}

/* gemm's sizes are ints: a group's rows, its columns. */
static int blas_check(const vq__infer *c, int64_t rows, int64_t plane, int64_t mg)
{
    if (rows > INT_MAX || plane > INT_MAX || mg > INT_MAX) {
        char sx[100], sw[100];
        return vq__op_fail(c->def, "X %s and W %s make a product past BLAS's int sizes",
                           vq__shape_str(sx, sizeof sx, c->in[0].ndim, c->in[0].shape),
                           vq__shape_str(sw, sizeof sw, c->in[1].ndim, c->in[1].shape));
    }
    return 0;
}

static int64_t known_prod(int64_t a, int64_t b)
{
    return a < 0 || b < 0 ? -1 : a * b;
}

/* conv3d's Out (out), from X (slot 0) and W (slot 1) and p. */
static int conv3d_meta(const vq__infer *c, vq__conv3d_params *p, vq__meta *out)
{
    int rc = conv3d_common(c, p);
    if (rc < 0)
        return rc;
    const vq__meta *x = &c->in[0], *w = &c->in[1];
    char sx[100], sw[100];
    vq__shape_str(sx, sizeof sx, x->ndim, x->shape);
    vq__shape_str(sw, sizeof sw, w->ndim, w->shape);
    int64_t C = x->shape[1], M = w->shape[0], cg = w->shape[1], groups = p->groups;
    if (C >= 0 && C % groups != 0)
        return vq__in_fail(c, 0,
                           "has %lld channels (dim 1), which groups %lld does not divide: "
                           "X is %s",
                           (long long)C, (long long)groups, sx);
    if (M >= 0 && M % groups != 0)
        return vq__in_fail(c, 1,
                           "has %lld output channels (dim 0), which groups %lld does not "
                           "divide: W is %s",
                           (long long)M, (long long)groups, sw);
    if (C >= 0 && cg >= 0 && cg * groups != C)
        return vq__in_fail(c, 1,
                           "has %lld input channels per group (dim 1), but X's %lld "
                           "channels in %lld group(s) make %lld: X is %s, W is %s",
                           (long long)cg, (long long)C, (long long)groups, (long long)(C / groups),
                           sx, sw);
    out->dtype = x->dtype;
    out->ndim = 5;
    out->shape[0] = x->shape[0];
    out->shape[1] = M;
    for (int i = 0; i < 3; i++) {
        int64_t n = x->shape[2 + i], k = w->shape[2 + i];
        int64_t o =
            vq__window_out(n, p->pad[i], p->pad[3 + i], k, p->stride[i], p->dilation[i], false);
        if (n >= 0 && k >= 0 && o < 1)
            return vq__op_fail(c->def,
                               "X %s and W %s: the dilated window is larger than the "
                               "padded input along spatial dim %d",
                               sx, sw, i);
        out->shape[2 + i] = o;
    }
    int64_t rows = known_prod(known_prod(cg, w->shape[2]), known_prod(w->shape[3], w->shape[4]));
    int64_t plane = known_prod(known_prod(out->shape[2], out->shape[3]), out->shape[4]);
    if ((rc = blas_check(c, rows, plane, M >= 0 ? M / groups : -1)) < 0 ||
        (rc = bias_check(c, M)) < 0)
        return rc;
    if (M < 0 && c->nin == 3)
        out->shape[1] = c->in[2].shape[0];
    return 0;
}

static int conv3d_infer(vq__infer *c)
{
    return conv3d_meta(c, c->params, &c->out[0]);
}

static int conv3d_grad_infer(vq__infer *c)
{
    vq__conv3d_params *p = c->params;
    int64_t wrt = vq__attr_int(c, "wrt", 0);
    if (wrt < 0 || wrt > 2)
        return vq__attr_fail(c, "wrt", "is %lld, not 0 (X), 1 (W) or 2 (the bias)", (long long)wrt);
    p->wrt = (int)wrt;
    vq__meta full;
    vq__infer two = *c;
    two.nin = 2; /* X and W: the forward op without its bias */
    int rc = conv3d_meta(&two, p, &full);
    if (rc < 0 || (rc = vq__check_same_dtype(c, 0, 2)) < 0 ||
        (rc = vq__check_shape_is(c, 2, &full, "conv3d's output shape")) < 0)
        return rc;
    if (p->wrt < 2) {
        c->out[0] = c->in[p->wrt];
    } else {
        c->out[0].dtype = c->in[0].dtype;
        c->out[0].ndim = 1;
        c->out[0].shape[0] = c->in[1].shape[0] >= 0 ? c->in[1].shape[0] : c->in[2].shape[1];
    }
    return 0;
}

static int conv_transpose3d_infer(vq__infer *c)
{
    vq__conv3d_params *p = c->params;
    int rc = conv3d_common(c, p);
    if (rc < 0 || (rc = ints_attr(c, "output_padding", 3, 0, 0, p->output_padding)) < 0)
        return rc;
    for (int i = 0; i < 3; i++)
        if (p->output_padding[i] >= p->stride[i] && p->output_padding[i] >= p->dilation[i])
            return vq__attr_fail(c, "output_padding",
                                 "%lld is not below stride %lld or dilation %lld",
                                 (long long)p->output_padding[i], (long long)p->stride[i],
                                 (long long)p->dilation[i]);
    const vq__meta *x = &c->in[0], *w = &c->in[1];
    char sx[100], sw[100];
    vq__shape_str(sx, sizeof sx, x->ndim, x->shape);
    vq__shape_str(sw, sizeof sw, w->ndim, w->shape);
    int64_t C = x->shape[1], mg = w->shape[1], groups = p->groups;
    if (C >= 0 && C % groups != 0)
        return vq__in_fail(c, 0,
                           "has %lld channels (dim 1), which groups %lld does not divide: "
                           "X is %s",
                           (long long)C, (long long)groups, sx);
    if (!vq__dim_match(w->shape[0], C))
        return vq__in_fail(c, 1, "has %lld input channels (dim 0), X has %lld: X is %s, W is %s",
                           (long long)w->shape[0], (long long)C, sx, sw);
    vq__meta *o = &c->out[0];
    o->dtype = x->dtype;
    o->ndim = 5;
    o->shape[0] = x->shape[0];
    o->shape[1] = mg >= 0 ? mg * groups : -1;
    for (int i = 0; i < 3; i++) {
        int64_t in = x->shape[2 + i], k = w->shape[2 + i];
        if (in < 0 || k < 0) {
            o->shape[2 + i] = -1;
            continue;
        }
        /* bounded: dims, strides, dilations and pads are all below 2^31 */
        int64_t len = p->stride[i] * (in - 1) + p->output_padding[i] + p->dilation[i] * (k - 1) +
                      1 - p->pad[i] - p->pad[3 + i];
        if (in < 1 || len < 1)
            return vq__op_fail(c->def,
                               "X %s and W %s with these strides, pads and dilations "
                               "make an output of %lld along spatial dim %d",
                               sx, sw, (long long)len, i);
        o->shape[2 + i] = len;
    }
    int64_t rows = known_prod(known_prod(mg, w->shape[2]), known_prod(w->shape[3], w->shape[4]));
    int64_t plane = known_prod(known_prod(x->shape[2], x->shape[3]), x->shape[4]);
    if ((rc = blas_check(c, rows, plane, C >= 0 ? C / groups : -1)) < 0 ||
        (rc = bias_check(c, o->shape[1])) < 0)
        return rc;
    if (o->shape[1] < 0 && c->nin == 3)
        o->shape[1] = c->in[2].shape[0];
    return 0;
}

/* ---- vol2col and col2vol ---- */

/* col [channels * kd * kh * kw, od * oh * ow] from x [channels, d, h, w]:
 * row (c, a, b, e) holds tap (a, b, e) of every window, 0 in the padding
 * (vq__vol_tap's rule, a row of outputs at a time). */
#define VOL2COL(T)                                                                  \
    static void vol2col_##T(const T *x, T *col, const vq__vol *v, int64_t channels) \
    {                                                                               \
        int64_t taps = v->kd * v->kh * v->kw;                                       \
        for (int64_t row = 0; row < channels * taps; row++) {                       \
            int64_t e = row % v->kw, b = (row / v->kw) % v->kh,                     \
                    a = (row / (v->kw * v->kh)) % v->kd;                            \
            const T *xc = x + row / taps * v->vol;                                  \
            T *r = col + row * v->plane;                                            \
            for (int64_t z = 0; z < v->od; z++) {                                   \
                int64_t iz = z * v->sd - v->pd + a * v->dd;                         \
                for (int64_t y = 0; y < v->oh; y++, r += v->ow) {                   \
                    int64_t iy = y * v->sh - v->ph + b * v->dh;                     \
                    if (iz < 0 || iz >= v->d || iy < 0 || iy >= v->h) {             \
                        memset(r, 0, (size_t)v->ow * sizeof(T));                    \
                        continue;                                                   \
                    }                                                               \
                    const T *xr = xc + (iz * v->h + iy) * v->w;                     \
                    for (int64_t o = 0; o < v->ow; o++) {                           \
                        int64_t ix = o * v->sw - v->pw + e * v->dw;                 \
                        r[o] = ix >= 0 && ix < v->w ? xr[ix] : 0;                   \
                    }                                                               \
                }                                                                   \
            }                                                                       \
        }                                                                           \
    }

VOL2COL(float)
VOL2COL(double)

static void vol2col(vq_dtype dt, const void *x, void *col, const vq__vol *v, int64_t channels)
{
    if (dt == VQ_F32)
        vol2col_float(x, col, v, channels);
    else
        vol2col_double(x, col, v, channels);
}

/* x [cg, d, h, w] = vq__vol_gather of every element (overwrites x). */
static void col2vol(vq_dtype dt, const void *col, void *x, const vq__vol *v)
{
    int64_t n = v->cg * v->vol;
    if (dt == VQ_F32)
        for (int64_t i = 0; i < n; i++)
            ((float *)x)[i] = vq__vol_gather_f32(col, v, i);
    else
        for (int64_t i = 0; i < n; i++)
            ((double *)x)[i] = vq__vol_gather_f64(col, v, i);
}

/* ---- kernels ---- */

/* o [n, m, plane] += b[m]. */
static void add_bias(vq_dtype dt, void *o, const void *b, int64_t n, int64_t m, int64_t plane)
{
    for (int64_t i = 0; i < n * m; i++) {
        if (dt == VQ_F32) {
            float v = ((const float *)b)[i % m], *r = (float *)o + i * plane;
            for (int64_t j = 0; j < plane; j++)
                r[j] += v;
        } else {
            double v = ((const double *)b)[i % m], *r = (double *)o + i * plane;
            for (int64_t j = 0; j < plane; j++)
                r[j] += v;
        }
    }
}

/* One conv3d call, shared by the participants of its parallel loop. */
struct job {
    const vq__vol *v;
    vq_dtype dt;
    size_t es;
    const char *x, *w;
    char *o;
    vq_tensor *cols[VQ__PAR_MAX_SLOTS]; /* per participant */
};

/* (image, group) items [lo, hi): vol2col, then W_g times the columns. */
static int conv3d_items(void *arg, int64_t lo, int64_t hi, int slot)
{
    struct job *j = arg;
    const vq__vol *v = j->v;
    for (int64_t item = lo; item < hi; item++) {
        int64_t n = item / v->groups, g = item % v->groups;
        if (!j->cols[slot]) {
            int64_t len = v->rows * v->plane;
            if (vq__tensor_empty(&j->cols[slot], j->dt, 1, &len) < 0)
                return VQ_ENOMEM;
        }
        vol2col(j->dt, vq__elem_at(j->x, (n * v->c + g * v->cg) * v->vol, j->es),
                j->cols[slot]->data, v, v->cg);
        vq__gemm(j->dt, false, false, v->mg, v->plane, v->rows, 1,
                 vq__elem_at(j->w, g * v->mg * v->rows, j->es), v->rows, j->cols[slot]->data,
                 v->plane, 0, vq__elem_at(j->o, (n * v->m + g * v->mg) * v->plane, j->es));
    }
    return 0;
}

/* Calls of fewer multiply-adds than this run on one worker (conv.c's
 * threshold). */
#define CONV3D_PARALLEL_MACS (1 << 20)

static int conv3d_kernel(const vq__kcall *k)
{
    const vq__conv3d_params *p = k->params;
    vq_tensor *x = k->in[0], *w = k->in[1], *b = k->nin > 2 ? k->in[2] : NULL, *o = k->out[0];
    if (o->numel == 0)
        return 0;
    vq__vol v = vq__vol_of(x->shape, w->shape, p->groups, o->shape, p->stride, p->pad, p->dilation);
    struct job j = {.v = &v,
                    .dt = x->dtype,
                    .es = vq_dtype_size(x->dtype),
                    .x = x->data,
                    .w = w->data,
                    .o = o->data};
    int64_t items = v.n * v.groups;
    bool share =
        (double)v.m * (double)v.plane * (double)v.rows * (double)v.n >= CONV3D_PARALLEL_MACS;
    int rc = share && items > 1 ? vq__parallel_for(items, 1, conv3d_items, &j)
                                : conv3d_items(&j, 0, items, 0);
    for (int i = 0; i < VQ__PAR_MAX_SLOTS; i++)
        vq_tensor_release(j.cols[i]);
    if (rc == VQ_ENOMEM)
        return vq__fail(rc, "%s: the vol2col buffer of %lld elements", k->def->type,
                        (long long)(v.rows * v.plane));
    if (rc == 0 && b)
        add_bias(x->dtype, o->data, b->data, v.n, v.m, v.plane);
    return rc;
}

/* dX (also conv_transpose3d's Out): per image and group, W_g^T dOut_g
 * into the columns, col2vol into dX's channels. */
static int conv3d_dx(const vq__kcall *k, const vq__vol *v, const vq_tensor *w, const vq_tensor *gr,
                     vq_tensor *dx)
{
    vq_dtype dt = dx->dtype;
    size_t es = vq_dtype_size(dt);
    vq_tensor *col;
    int rc = vq__kernel_scratch(k, dt, v->rows * v->plane, "vol2col buffer", &col);
    if (rc < 0)
        return rc;
    if (!col) { /* no columns: nothing reads dX */
        memset(dx->data, 0, dx->nbytes);
        return 0;
    }
    for (int64_t n = 0; n < v->n; n++)
        for (int64_t g = 0; g < v->groups; g++) {
            vq__gemm(dt, true, false, v->rows, v->plane, v->mg, 1,
                     vq__elem_at(w->data, g * v->mg * v->rows, es), v->rows,
                     vq__elem_at(gr->data, (n * v->m + g * v->mg) * v->plane, es), v->plane, 0,
                     col->data);
            col2vol(dt, col->data, vq__elem_at(dx->data, (n * v->c + g * v->cg) * v->vol, es), v);
        }
    vq_tensor_release(col);
    return 0;
}

/* dW_g = sum over images of dOut_g times the group's columns transposed;
 * no images: zeros. */
static int conv3d_dw(const vq__kcall *k, const vq__vol *v)
{
    vq_tensor *x = k->in[0], *gr = k->in[2], *dw = k->out[0];
    vq_dtype dt = dw->dtype;
    size_t es = vq_dtype_size(dt);
    vq_tensor *col;
    int rc = v->n == 0 ? 0 : vq__kernel_scratch(k, dt, v->rows * v->plane, "vol2col buffer", &col);
    if (rc < 0)
        return rc;
    if (v->n == 0 || !col) {
        memset(dw->data, 0, dw->nbytes);
        return 0;
    }
    for (int64_t n = 0; n < v->n; n++)
        for (int64_t g = 0; g < v->groups; g++) {
            vol2col(dt, vq__elem_at(x->data, (n * v->c + g * v->cg) * v->vol, es), col->data, v,
                    v->cg);
            vq__gemm(dt, false, true, v->mg, v->rows, v->plane, 1,
                     vq__elem_at(gr->data, (n * v->m + g * v->mg) * v->plane, es), v->plane,
                     col->data, v->plane, n ? 1 : 0,
                     vq__elem_at(dw->data, g * v->mg * v->rows, es));
        }
    vq_tensor_release(col);
    return 0;
}

/* dB[m] = the sum of dOut[:, m], in double, images in order. */
static void conv3d_db(vq_dtype dt, const void *g, void *db, int64_t n, int64_t m, int64_t plane)
{
    for (int64_t c = 0; c < m; c++) {
        double s = 0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < plane; j++)
                s += dt == VQ_F32 ? ((const float *)g)[(i * m + c) * plane + j]
                                  : ((const double *)g)[(i * m + c) * plane + j];
        if (dt == VQ_F32)
            ((float *)db)[c] = (float)s;
        else
            ((double *)db)[c] = s;
    }
}

static int conv3d_grad_kernel(const vq__kcall *k)
{
    const vq__conv3d_params *p = k->params;
    vq_tensor *x = k->in[0], *w = k->in[1], *gr = k->in[2], *dz = k->out[0];
    if (dz->numel == 0)
        return 0;
    vq__vol v =
        vq__vol_of(x->shape, w->shape, p->groups, gr->shape, p->stride, p->pad, p->dilation);
    switch (p->wrt) {
    case 0: return conv3d_dx(k, &v, w, gr, dz);
    case 1: return conv3d_dw(k, &v);
    default: conv3d_db(dz->dtype, gr->data, dz->data, v.n, v.m, v.plane); return 0;
    }
}

static int conv_transpose3d_kernel(const vq__kcall *k)
{
    const vq__conv3d_params *p = k->params;
    vq_tensor *x = k->in[0], *w = k->in[1], *b = k->nin > 2 ? k->in[2] : NULL, *o = k->out[0];
    if (o->numel == 0)
        return 0;
    /* the conv3d whose dX this is: over Out's shape, with X as its dOut */
    vq__vol v = vq__vol_of(o->shape, w->shape, p->groups, x->shape, p->stride, p->pad, p->dilation);
    int rc = 0;
    if (x->numel == 0)
        memset(o->data, 0, o->nbytes);
    else
        rc = conv3d_dx(k, &v, w, x, o);
    if (rc == 0 && b)
        add_bias(o->dtype, o->data, b->data, v.n, o->shape[1], v.vol);
    return rc;
}

/* ---- gradient makers ---- */

/* The forward op's attributes (at most 5) into attrs (room for 6). */
static int copy_attrs(const vq__grad *g, vq_attr *attrs)
{
    int n = 0;
    for (int i = 0; i < g->nattrs && n < 5; i++)
        attrs[n++] = g->attrs[i];
    return n;
}

/* One conv3d_grad per wanted input (X, W, the bias). */
static int conv3d_grad(const vq__grad *g)
{
    int wanted = vq__grad_wanted(g);
    if (wanted <= 0)
        return wanted;
    vq_attr attrs[6];
    int n = copy_attrs(g, attrs);
    for (int i = 0; i < g->nin && i < 3; i++) {
        if (!g->din[i])
            continue;
        attrs[n] = VQ_ATTR_I("wrt", i);
        const char *in[3] = {g->in[0], g->in[1], g->dout[0]};
        int rc = vq__emit(g, "conv3d_grad", in, 3, &g->din[i], 1, attrs, n + 1);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int conv_transpose3d_grad(const vq__grad *g)
{
    return vq__conv_transpose_grad(g, "conv3d", 5);
}

static const vq__attr_spec conv3d_attrs[] = {
    {"strides", VQ_ATTR_INTS, false, "[1,1,1]"},
    {"pads", VQ_ATTR_INTS, false, "[0,0,0,0,0,0]"},
    {"dilations", VQ_ATTR_INTS, false, "[1,1,1]"},
    {"groups", VQ_ATTR_INT, false, "1"},
    {"wrt", VQ_ATTR_INT, true, NULL}, /* conv3d_grad only */
};

static const vq__attr_spec conv_transpose3d_attrs[] = {
    {"strides", VQ_ATTR_INTS, false, "[1,1,1]"},
    {"pads", VQ_ATTR_INTS, false, "[0,0,0,0,0,0]"},
    {"dilations", VQ_ATTR_INTS, false, "[1,1,1]"},
    {"groups", VQ_ATTR_INT, false, "1"},
    {"output_padding", VQ_ATTR_INTS, false, "[0,0,0]"},
};

const vq__op_def vq__ops_conv3d[] = {
    {.type = "conv3d",
     .in_slots = conv_in,
     .nin_slots = 2,
     .out_slots = conv_out,
     .nout_slots = 1,
     .flags = VQ__VARIADIC_IN,
     .attrs = conv3d_attrs,
     .nattrs = 4,
     .params_size = sizeof(vq__conv3d_params),
     .infer = conv3d_infer,
     .kernel = {conv3d_kernel},
     .cuda = VQ__CUDA_OP(vq__conv3d_gpu),
     .grad = conv3d_grad},
    {.type = "conv3d_grad",
     .in_slots = grad_in,
     .nin_slots = 3,
     .out_slots = grad_out,
     .nout_slots = 1,
     .attrs = conv3d_attrs,
     .nattrs = 5,
     .params_size = sizeof(vq__conv3d_params),
     .infer = conv3d_grad_infer,
     .kernel = {conv3d_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__conv3d_grad_gpu)},
    {.type = "conv_transpose3d",
     .in_slots = conv_in,
     .nin_slots = 2,
     .out_slots = conv_out,
     .nout_slots = 1,
     .flags = VQ__VARIADIC_IN,
     .attrs = conv_transpose3d_attrs,
     .nattrs = 5,
     .params_size = sizeof(vq__conv3d_params),
     .infer = conv_transpose3d_infer,
     .kernel = {conv_transpose3d_kernel},
     .cuda = VQ__CUDA_OP(vq__conv_transpose3d_gpu),
     .grad = conv_transpose3d_grad},
    {0},
};
