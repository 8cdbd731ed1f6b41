/* resize (ONNX Resize and Upsample: nearest, n-linear and cubic
 * interpolation of X to new dims) and its gradient op.
 *
 * resize(X; sizes | scales, mode, coordinate_transformation_mode,
 * nearest_mode, cubic_coeff_a, exclude_outside, extrapolation_value, roi)
 * -> Out. Out's dims are `sizes` (one per dim of X), or floor(X's dim *
 * scale) with `scales` (one positive scale per dim; in tf_crop_and_resize
 * floor(X's dim * (roi end - start) * scale), ONNX's rule); exactly one of
 * the two is given. mode is nearest (every dtype), linear or cubic (f32 and
 * f64); the other attributes have ONNX's names, values and defaults
 * (half_pixel, round_prefer_floor, -0.75, false, 0; roi every dim's start,
 * then every dim's end, default 0 and 1, read in tf_crop_and_resize only).
 * Every dim is interpolated, as ONNX's reference does: ops/resize_shared.h
 * holds the rules (the coordinate each output coordinate reads, the taps
 * and their weights, the nested sum) that the CPU and CUDA kernels share.
 * nearest copies elements (bit for bit, every dtype); linear and cubic sum
 * in double and round once. The extrapolation value must be a value of X's
 * dtype for integer and bool X.
 *
 * resize_grad(X, dOut; the same attributes) -> dX (f32, f64) is the
 * adjoint: zeros of X's shape, then each element of dOut times each of its
 * taps' weight products added at that tap's X element (the CPU in dOut's
 * order, CUDA with atomics, so the two agree to rounding); extrapolated
 * elements add nothing. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"
#include "../resize_shared.h"

#include <math.h>
#include <string.h>

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};
static const char *const x_dout_in[] = {"X", "dOut"};
static const char *const dx_out[] = {"dX"};

static const vq__attr_spec resize_attrs[] = {
    {"sizes", VQ_ATTR_INTS, false, NULL},
    {"scales", VQ_ATTR_FLOATS, false, NULL},
    {"mode", VQ_ATTR_STRING, false, "nearest"},
    {"coordinate_transformation_mode", VQ_ATTR_STRING, false, "half_pixel"},
    {"nearest_mode", VQ_ATTR_STRING, false, "round_prefer_floor"},
    {"cubic_coeff_a", VQ_ATTR_FLOAT, false, "-0.75"},
    {"exclude_outside", VQ_ATTR_BOOL, false, "false"},
    {"extrapolation_value", VQ_ATTR_FLOAT, false, "0"},
    {"roi", VQ_ATTR_FLOATS, false, NULL},
};

/* In the order of params.h's VQ__RESIZE_* values. */
static const char *const mode_names[] = {"nearest", "linear", "cubic", NULL};
static const char *const ctm_names[] = {"half_pixel", "pytorch_half_pixel",   "align_corners",
                                        "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize",
                                        NULL};
static const char *const nearest_names[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                            "ceil", NULL};

#define RESIZE_LIMIT ((int64_t)1 << 62)

/* The string attribute name as its index in names (dflt when absent). */
static int pick(const vq__infer *c, const char *name, const char *const *names, int dflt,
                const char *list, int *out)
{
    const vq_attr *a = vq__attr_find(c, name);
    *out = dflt;
    if (!a)
        return 0;
    for (int i = 0; names[i]; i++)
        if (!strcmp(a->s, names[i])) {
            *out = i;
            return 0;
        }
    return vq__attr_fail(c, name, "\"%s\" is not %s", a->s, list);
}

/* The extrapolation value as X's dtype: any for floats, else an integral
 * value in the dtype's range (checked only where it can be used). */
static int extrapolation(const vq__infer *c, vq_dtype dt, vq__resize_params *p)
{
    double v = vq__attr_float(c, "extrapolation_value", 0);
    p->value = v;
    if (dt == VQ_F32 || dt == VQ_F64 || p->ctm != VQ__RESIZE_TF_CROP_AND_RESIZE)
        return 0;
    double lo = dt == VQ_I32 ? -2147483648.0 : dt == VQ_I64 ? -0x1p63 : 0;
    double hi = dt == VQ_I32 ? 2147483647.0 : dt == VQ_I64 ? 0x1p63 : 1;
    if (!(v == floor(v) && v >= lo && (dt == VQ_I64 ? v < hi : v <= hi)))
        return vq__attr_fail(c, "extrapolation_value", "%.17g is not a value of X's dtype %s", v,
                             vq_dtype_name(dt));
    p->ivalue = (int64_t)v;
    return 0;
}

/* X (slot 0) against the attributes: fills p and Out's meta. */
static int resize_meta(const vq__infer *c, vq__resize_params *p, vq__meta *out)
{
    const vq__meta *x = &c->in[0];
    int nd = x->ndim, rc;
    if ((rc = pick(c, "mode", mode_names, VQ__RESIZE_NEAREST, "nearest, linear or cubic",
                   &p->mode)) < 0 ||
        (rc = pick(c, "coordinate_transformation_mode", ctm_names, VQ__RESIZE_HALF_PIXEL,
                   "half_pixel, pytorch_half_pixel, align_corners, asymmetric, "
                   "tf_half_pixel_for_nn or tf_crop_and_resize",
                   &p->ctm)) < 0 ||
        (rc = pick(c, "nearest_mode", nearest_names, VQ__RESIZE_ROUND_PREFER_FLOOR,
                   "round_prefer_floor, round_prefer_ceil, floor or ceil", &p->nearest)) < 0)
        return rc;
    if (p->mode != VQ__RESIZE_NEAREST && (rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0)
        return rc;
    if (nd == 0)
        return vq__in_fail(c, 0, "is a scalar (rank 0); resize needs at least one dim");
    p->a = vq__attr_float(c, "cubic_coeff_a", -0.75);
    if (!isfinite(p->a))
        return vq__attr_fail(c, "cubic_coeff_a", "%g is not finite", p->a);
    p->exclude = vq__attr_bool(c, "exclude_outside", false);
    if ((rc = extrapolation(c, x->dtype, p)) < 0)
        return rc;
    const vq_attr *roi = vq__attr_find(c, "roi");
    if (roi && roi->n != 2 * nd)
        return vq__attr_fail(c, "roi",
                             "has %d entries; X has %d dims, so it needs %d (every "
                             "dim's start, then every dim's end)",
                             roi->n, nd, 2 * nd);
    for (int d = 0; d < 2 * nd; d++) {
        p->roi[d] = roi ? roi->floats[d] : d < nd ? 0 : 1;
        if (!isfinite(p->roi[d]))
            return vq__attr_fail(c, "roi", "entry %d is %g, not finite", d, p->roi[d]);
    }
    const vq_attr *sizes = vq__attr_find(c, "sizes"), *scales = vq__attr_find(c, "scales");
    if (!sizes == !scales)
        return vq__op_fail(c->def,
                           "needs exactly one of the attributes sizes and scales, "
                           "got %s",
                           sizes ? "both" : "neither");
    const vq_attr *given = sizes ? sizes : scales;
    if (given->n != nd)
        return vq__attr_fail(c, sizes ? "sizes" : "scales", "has %d entries; X has %d dims",
                             given->n, nd);
    *out = *x;
    for (int d = 0; d < nd; d++) {
        int64_t xd = x->shape[d], od;
        if (sizes) {
            od = sizes->ints[d];
            p->scale[d] = 0;
            if (od < 0 || od >= RESIZE_LIMIT)
                return vq__attr_fail(c, "sizes", "entry %d is %lld, not in [0, 2^62)", d,
                                     (long long)od);
        } else {
            double s = scales->floats[d];
            p->scale[d] = s;
            if (!(s > 0) || !isfinite(s))
                return vq__attr_fail(c, "scales", "entry %d is %g, not a positive number", d, s);
            double span = p->ctm == VQ__RESIZE_TF_CROP_AND_RESIZE ? p->roi[nd + d] - p->roi[d] : 1;
            double o = floor((double)xd * span * s);
            if (xd >= 0 && !(o >= 0 && o < 0x1p62))
                return vq__attr_fail(c, "scales",
                                     "entry %d (%g) makes dim %d of %lld into %g, "
                                     "not in [0, 2^62)",
                                     d, s, d, (long long)xd, o);
            od = xd < 0 ? -1 : (int64_t)o;
        }
        if (xd == 0 && od > 0)
            return vq__in_fail(c, 0, "has dim %d empty: nothing to resize to %lld elements", d,
                               (long long)od);
        out->shape[d] = od;
    }
    return 0;
}

static int resize_infer(vq__infer *c)
{
    int rc = vq__check_dtype(c, 0, VQ__ANY);
    return rc < 0 ? rc : resize_meta(c, c->params, &c->out[0]);
}

/* resize_grad(X, dOut; resize's attributes) -> dX. */
static int resize_grad_infer(vq__infer *c)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0)
        return rc;
    vq__meta want;
    if ((rc = resize_meta(c, c->params, &want)) < 0 ||
        (rc = vq__check_shape_is(c, 1, &want, "resize's output shape")) < 0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

static int resize_grad(const vq__grad *g)
{
    int wanted = vq__grad_wanted(g);
    if (wanted <= 0)
        return wanted;
    const char *in[2] = {g->in[0], g->dout[0]};
    /* resize_grad has exactly resize's attributes */
    return vq__emit(g, "resize_grad", in, 2, &g->din[0], 1, g->attrs, g->nattrs);
}

/* ---- the kernels: every dim's taps tabulated once per call ---- */

/* The taps of one output coordinate along one dim: X offsets (coordinate
 * times stride) and weights; n 0 for an extrapolated coordinate. Nine
 * 8-byte words, so that a table is an f64 scratch tensor. */
struct tap_row {
    int64_t n;
    int64_t off[VQ__RESIZE_TAPS];
    double w[VQ__RESIZE_TAPS];
};

struct resize_job {
    vq__resize_geom geo;
    const struct tap_row *rows[VQ_MAX_DIMS]; /* per dim, by output coordinate */
    const void *x;
    void *out;
    vq_dtype dt;
    size_t es;
    unsigned char value[8]; /* the extrapolation value in X's dtype */
    double fill;            /* the same for f32 and f64 */
};

/* Fills the tables (one scratch tensor, *held) of job j for X and Out. */
static int tabulate(const vq__kcall *k, struct resize_job *j, const vq_tensor *x,
                    const vq_tensor *out, vq_tensor **held)
{
    const vq__resize_params *p = k->params;
    int nd = x->ndim;
    vq__resize_geom_make(&j->geo, p, nd, x->shape, out->shape);
    int64_t total = 0;
    for (int d = 0; d < nd; d++)
        total += out->shape[d];
    int rc = vq__kernel_scratch(k, VQ_F64, total * (int64_t)(sizeof(struct tap_row) / 8),
                                "table of taps", held);
    if (rc < 0)
        return rc;
    struct tap_row *r = vq_tensor_data(*held);
    int64_t stride = 1;
    for (int d = nd - 1; d >= 0; d--) {
        j->rows[d] = r;
        for (int64_t o = 0; o < out->shape[d]; o++, r++) {
            int64_t idx[VQ__RESIZE_TAPS];
            r->n = vq__resize_taps(&j->geo, d, o, idx, r->w);
            for (int t = 0; t < r->n; t++)
                r->off[t] = idx[t] * stride;
        }
        stride *= x->shape[d];
    }
    return 0;
}

/* Out's coordinates of element e. */
static void unravel(const vq__resize_geom *g, int64_t e, int64_t *c)
{
    for (int d = g->ndim - 1; d >= 0; d--) {
        c[d] = e % g->oshape[d];
        e /= g->oshape[d];
    }
}

static inline void next_coord(const vq__resize_geom *g, int64_t *c)
{
    for (int d = g->ndim - 1; d >= 0 && ++c[d] == g->oshape[d]; d--)
        c[d] = 0;
}

/* Adds dim d's taps of Out's coordinate cd to pt; false when the
 * coordinate is extrapolated. */
static inline bool point_add(const struct resize_job *j, int d, int64_t cd, vq__resize_point *pt)
{
    const struct tap_row *r = &j->rows[d][cd];
    if (r->n == 0)
        return false;
    if (r->n == 1 && r->w[0] == 1) {
        pt->base += r->off[0];
        return true;
    }
    int m = pt->m++;
    pt->n[m] = (int)r->n;
    for (int t = 0; t < r->n; t++) {
        pt->off[m][t] = r->off[t];
        pt->w[m][t] = r->w[t];
    }
    return true;
}

/* Walks Out's elements lo..hi-1 in order, each as its point: the taps of
 * every dim but the last are gathered once per row of Out. */
struct point_walk {
    const struct resize_job *j;
    int64_t c[VQ_MAX_DIMS];
    vq__resize_point pt;
    int row_m;
    int64_t row_base;
    bool row_in, first;
};

static void walk_start(struct point_walk *w, const struct resize_job *j, int64_t lo)
{
    w->j = j;
    w->first = true;
    unravel(&j->geo, lo, w->c);
}

/* The point of the walk's element (false: extrapolated); then moves on. */
static inline bool walk_point(struct point_walk *w)
{
    const struct resize_job *j = w->j;
    int last = j->geo.ndim - 1;
    if (w->first || w->c[last] == 0) {
        w->first = false;
        w->pt.m = 0;
        w->pt.base = 0;
        w->row_in = true;
        for (int d = 0; d < last && w->row_in; d++)
            w->row_in = point_add(j, d, w->c[d], &w->pt);
        w->row_m = w->pt.m;
        w->row_base = w->pt.base;
    }
    w->pt.m = w->row_m;
    w->pt.base = w->row_base;
    bool in = w->row_in && point_add(j, last, w->c[last], &w->pt);
    next_coord(&j->geo, w->c);
    return in;
}

/* Nearest: one tap of weight 1 in every dim, so each element is a copy;
 * a row at a time, the last dim's offsets from its table. */
#define NEAREST_RUN(T)                                       \
    do {                                                     \
        const T *src = (const T *)j->x + base;               \
        T *dst = (T *)j->out + e, fill;                      \
        memcpy(&fill, j->value, sizeof fill);                \
        for (int64_t k = 0; k < run; k++) {                  \
            const struct tap_row *r = &last[c0 + k];         \
            dst[k] = row_in && r->n ? src[r->off[0]] : fill; \
        }                                                    \
    } while (0)

static void nearest_range(const struct resize_job *j, int64_t lo, int64_t hi)
{
    int nd = j->geo.ndim;
    int64_t c[VQ_MAX_DIMS], width = j->geo.oshape[nd - 1];
    const struct tap_row *last = j->rows[nd - 1];
    unravel(&j->geo, lo, c);
    for (int64_t e = lo; e < hi;) {
        int64_t c0 = c[nd - 1], run = width - c0 < hi - e ? width - c0 : hi - e, base = 0;
        bool row_in = true;
        for (int d = 0; d < nd - 1 && row_in; d++) {
            const struct tap_row *r = &j->rows[d][c[d]];
            row_in = r->n > 0;
            base += row_in ? r->off[0] : 0;
        }
        switch (j->es) {
        case 8: NEAREST_RUN(uint64_t); break;
        case 4: NEAREST_RUN(uint32_t); break;
        default: NEAREST_RUN(uint8_t); break;
        }
        e += run;
        c[nd - 1] = width - 1; /* the row's last column: next_coord moves to the next row */
        next_coord(&j->geo, c);
    }
}

/* Linear and cubic, a run of one row of Out whose other dims have at
 * most one multi-tap dim (pn taps at offsets po, weights pw; pn 0: none):
 * vq__resize_point_sum's one- and two-dim sums written out, the same
 * operations in the same order. */
#define INTERP_RUN(T)                                                   \
    do {                                                                \
        const T *src = (const T *)j->x + base;                          \
        T *dst = (T *)j->out + e;                                       \
        for (int64_t k = 0; k < run; k++) {                             \
            const struct tap_row *r = &last[c0 + k];                    \
            bool one = r->n == 1 && r->w[0] == 1;                       \
            double v = 0;                                               \
            if (r->n == 0) {                                            \
                v = j->fill;                                            \
            } else if (pn == 0 && one) {                                \
                v = (double)src[r->off[0]];                             \
            } else if (pn == 0) {                                       \
                for (int t = 0; t < r->n; t++)                          \
                    v += r->w[t] * (double)src[r->off[t]];              \
            } else if (one) {                                           \
                for (int t = 0; t < pn; t++)                            \
                    v += pw[t] * (double)src[po[t] + r->off[0]];        \
            } else {                                                    \
                for (int t0 = 0; t0 < pn; t0++) {                       \
                    double a = 0;                                       \
                    for (int t = 0; t < r->n; t++)                      \
                        a += r->w[t] * (double)src[po[t0] + r->off[t]]; \
                    v += pw[t0] * a;                                    \
                }                                                       \
            }                                                           \
            dst[k] = (T)v;                                              \
        }                                                               \
    } while (0)

static int resize_range(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const struct resize_job *j = arg;
    if (j->geo.mode == VQ__RESIZE_NEAREST) {
        nearest_range(j, lo, hi);
        return 0;
    }
    int nd = j->geo.ndim;
    int64_t c[VQ_MAX_DIMS], width = j->geo.oshape[nd - 1];
    const struct tap_row *last = j->rows[nd - 1];
    bool f64 = j->dt == VQ_F64;
    unravel(&j->geo, lo, c);
    for (int64_t e = lo; e < hi;) {
        int64_t c0 = c[nd - 1], run = width - c0 < hi - e ? width - c0 : hi - e, base = 0;
        int pn = 0, multi = 0;
        const int64_t *po = NULL;
        const double *pw = NULL;
        bool row_in = true;
        for (int d = 0; d < nd - 1 && row_in; d++) {
            const struct tap_row *r = &j->rows[d][c[d]];
            row_in = r->n > 0;
            if (r->n == 1 && r->w[0] == 1) {
                base += r->off[0];
            } else if (r->n > 0) {
                multi++;
                pn = (int)r->n;
                po = r->off;
                pw = r->w;
            }
        }
        if (!row_in) {
            for (int64_t k = 0; k < run; k++)
                if (f64)
                    ((double *)j->out)[e + k] = j->fill;
                else
                    ((float *)j->out)[e + k] = (float)j->fill;
        } else if (multi <= 1 && f64) {
            INTERP_RUN(double);
        } else if (multi <= 1) {
            INTERP_RUN(float);
        } else { /* more dims interpolated: the general point and sum */
            struct point_walk w;
            walk_start(&w, j, e);
            for (int64_t k = 0; k < run; k++) {
                bool in = walk_point(&w);
                double v = in ? vq__resize_point_sum(&w.pt, j->x, f64) : j->fill;
                if (f64)
                    ((double *)j->out)[e + k] = v;
                else
                    ((float *)j->out)[e + k] = (float)v;
            }
        }
        e += run;
        c[nd - 1] = width - 1; /* the row's last column: next_coord moves to the next row */
        next_coord(&j->geo, c);
    }
    return 0;
}

static int resize_kernel(const vq__kcall *k)
{
    const vq__resize_params *p = k->params;
    vq_tensor *x = k->in[0], *out = k->out[0];
    if (out->numel == 0)
        return 0;
    struct resize_job j = {.x = x->data,
                           .out = out->data,
                           .dt = x->dtype,
                           .es = vq_dtype_size(x->dtype),
                           .fill = p->value};
    switch (x->dtype) {
    case VQ_F32: {
        float v = (float)p->value;
        memcpy(j.value, &v, sizeof v);
        break;
    }
    case VQ_F64: memcpy(j.value, &p->value, sizeof p->value); break;
    case VQ_I32: {
        int32_t v = (int32_t)p->ivalue;
        memcpy(j.value, &v, sizeof v);
        break;
    }
    case VQ_I64: memcpy(j.value, &p->ivalue, sizeof p->ivalue); break;
    default: j.value[0] = (unsigned char)(p->ivalue != 0); break;
    }
    vq_tensor *held;
    int rc = tabulate(k, &j, x, out, &held);
    if (rc < 0)
        return rc;
    /* about 4 to 64 multiply-adds an element: chunks of 4096 elements */
    rc = vq__parallel_for(out->numel, (int64_t)1 << 12, resize_range, &j);
    vq_tensor_release(held);
    return rc;
}

#define SCATTER_TO(T)                                           \
    do {                                                        \
        T *dx = dxt->data;                                      \
        const T *g = gt->data;                                  \
        for (int64_t e = 0; e < gt->numel; e++) {               \
            if (!walk_point(&w))                                \
                continue;                                       \
            VQ__RESIZE_POINT_SCATTER(&w.pt, (double)g[e], ADD); \
        }                                                       \
    } while (0)

static int resize_grad_kernel(const vq__kcall *k)
{
    vq_tensor *gt = k->in[1], *dxt = k->out[0];
    memset(dxt->data, 0, dxt->nbytes);
    if (gt->numel == 0)
        return 0;
    struct resize_job j = {.dt = dxt->dtype};
    vq_tensor *held;
    int rc = tabulate(k, &j, dxt, gt, &held);
    if (rc < 0)
        return rc;
    struct point_walk w;
    walk_start(&w, &j, 0);
    if (dxt->dtype == VQ_F32) {
#define ADD(e, v) dx[e] += (float)(v)
        SCATTER_TO(float);
#undef ADD
    } else {
#define ADD(e, v) dx[e] += (v)
        SCATTER_TO(double);
#undef ADD
    }
    vq_tensor_release(held);
    return 0;
}

const vq__op_def vq__ops_resize[] = {
    {.type = "resize",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .attrs = resize_attrs,
     .nattrs = 9,
     .params_size = sizeof(vq__resize_params),
     .infer = resize_infer,
     .kernel = {resize_kernel},
     .cuda = VQ__CUDA_OP(vq__resize_gpu),
     .grad = resize_grad},
    {.type = "resize_grad",
     .in_slots = x_dout_in,
     .nin_slots = 2,
     .out_slots = dx_out,
     .nout_slots = 1,
     .attrs = resize_attrs,
     .nattrs = 9,
     .params_size = sizeof(vq__resize_params),
     .infer = resize_grad_infer,
     .kernel = {resize_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__resize_grad_gpu)},
    {0},
};
