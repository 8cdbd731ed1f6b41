/* Layout ops that make a larger (or cropped) tensor from X's elements:
 * expand (numpy broadcasting to a shape, ONNX's Expand), tile (X repeated
 * along each dim) and pad (constant, reflect or edge, negative pads crop,
 * ONNX's Pad), with their gradients. They only move elements, so they take
 * every dtype; their gradients take f32 and f64.
 *
 * expand(X; shape) -> Out: Out's shape is X's shape and `shape` broadcast
 * together, numpy's way, so a 1 in `shape` keeps X's dim and `shape` may
 * have fewer dims than X. Its gradient sums dOut over the broadcast dims,
 * which is what elementwise_grad does for the first operand of an add: the
 * maker emits elementwise_grad(dOut, X, Out; op add, wrt 0), Out standing
 * for the shape X was broadcast to.
 *
 * tile(X[, Repeats]; repeats) -> Out: Out's dim d is X's times repeats[d]
 * (one entry per dim, each >= 0), the repeats given as the attribute or
 * as the value of input Repeats (i64 or i32, 1-D: vq__op_def.value_in, as
 * reshape's Shape); Out's coordinate c reads X's c mod X's dim.
 * tile_grad(X, dOut; repeats) -> dX sums dOut over the tiles, adding in the
 * order of dOut's elements (the CUDA kernel adds in the same order); without
 * the attribute it takes the repeats from dOut's dims over X's.
 *
 * pad(X; pads, mode, value) -> Out: pads holds every dim's begin, then
 * every dim's end (2 * rank entries, ONNX's order); a negative pad crops.
 * Crops happen first, then the pads mirror (reflect: the edge element is
 * not repeated, each pad smaller than the kept dim) or repeat (edge: the
 * kept dim not empty) the kept elements, or fill with value (constant,
 * converted to X's dtype: an integer dtype needs an integral value in its
 * range, bool 0 or 1); ops/layout_shared.h holds that geometry.
 * pad_grad(X, dOut; pads, mode, value) -> dX: each element of X gets the
 * sum of dOut over the outputs that read it (one for constant, several at
 * the edges for reflect and edge), added in the order of dOut's elements;
 * cropped elements get 0. */
#include "../ops_internal.h"
#include "../layout_shared.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"

#include <math.h>
#include <string.h>

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};
static const char *const x_dout_in[] = {"X", "dOut"};
static const char *const dx_out[] = {"dX"};

static void contiguous_strides(int ndim, const int64_t *shape, int64_t *stride)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= shape[d];
    }
}

/* One element of size es (1, 4 or 8) from src to dst, as a typed move. */
static inline void move_element(void *dst, const void *src, size_t es)
{
    if (es == 8)
        *(uint64_t *)dst = *(const uint64_t *)src;
    else if (es == 4)
        *(uint32_t *)dst = *(const uint32_t *)src;
    else
        *(uint8_t *)dst = *(const uint8_t *)src;
}

/* ---- expand ---- */

static const char *const expand_in[] = {"X", "Shape"};

static const vq__attr_spec expand_attrs[] = {
    {"shape", VQ_ATTR_INTS, false, "none"},
};

/* Out = X broadcast with the shape of attribute shape, or of input Shape's
 * value (ONNX's Expand, whose shape a model computes): numpy's rules both
 * ways, so a 1 in the shape keeps X's dim. */
static int expand_infer(vq__infer *c)
{
    const vq__meta *x = &c->in[0];
    int64_t ints[VQ_MAX_DIMS];
    int ns;
    int rc = vq__check_dtype(c, 0, VQ__ANY);
    if (rc < 0 || (rc = vq__ints_arg(c, 1, "shape", ints, VQ_MAX_DIMS, &ns)) < 0)
        return rc;
    const char *what = c->nin > 1 ? "input Shape" : "attribute shape";
    vq__meta *out = &c->out[0];
    if (rc == 1) { /* the value is known when the op runs */
        if (ns < 0)
            return vq__in_fail(c, 1, "has an unknown length: Out's rank would be unknown");
        int n = x->ndim > ns ? x->ndim : ns;
        out->dtype = x->dtype;
        out->ndim = n;
        for (int i = 0; i < n; i++) {
            int ix = x->ndim - n + i;
            int64_t dx = ix >= 0 ? x->shape[ix] : 1;
            out->shape[i] = dx > 1 ? dx : -1; /* only a 1 (or unknown) takes the shape's */
        }
        return 0;
    }
    for (int i = 0; i < ns; i++)
        if (ints[i] < 0)
            return vq__op_fail(c->def, "%s: entry %d is %lld", what, i, (long long)ints[i]);
    int n = x->ndim > ns ? x->ndim : ns;
    out->dtype = x->dtype;
    out->ndim = n;
    for (int i = 0; i < n; i++) {
        int ix = x->ndim - n + i, is = ns - n + i;
        int64_t dx = ix >= 0 ? x->shape[ix] : 1, ds = is >= 0 ? ints[is] : 1;
        if (dx == ds || ds == 1)
            out->shape[i] = dx;
        else if (dx == 1 || dx < 0) /* an unknown dim must be 1 or ds */
            out->shape[i] = ds;
        else {
            char sx[100], ss[100];
            return vq__op_fail(c->def,
                               "%s: %s does not broadcast with X's %s (dim %d: %lld "
                               "vs %lld)",
                               what, vq__shape_str(ss, sizeof ss, ns, ints),
                               vq__shape_str(sx, sizeof sx, x->ndim, x->shape), i, (long long)dx,
                               (long long)ds);
        }
    }
    return 0;
}

/* Copies the box b (src strides 0 along broadcast dims) from src to dst. */
static void box_copy(vq__box b, void *dst, const void *src, size_t es)
{
    vq__box_simplify(&b);
    if (b.ndim == 0) {
        move_element(dst, src, es);
        return;
    }
    int last = b.ndim - 1;
    int64_t n = b.shape[last], ss = b.src[last], ds = b.dst[last];
    int64_t idx[VQ_MAX_DIMS] = {0}, so = 0, dof = 0;
    for (;;) {
        const char *s = (const char *)src + so * (int64_t)es;
        char *d = (char *)dst + dof * (int64_t)es;
        if (ss == 1 && ds == 1)
            memcpy(d, s, (size_t)n * es);
        else
            for (int64_t i = 0; i < n; i++)
                move_element(d + i * ds * (int64_t)es, s + i * ss * (int64_t)es, es);
        int k = last - 1;
        for (; k >= 0; k--) {
            so += b.src[k];
            dof += b.dst[k];
            if (++idx[k] < b.shape[k])
                break;
            so -= b.src[k] * b.shape[k];
            dof -= b.dst[k] * b.shape[k];
            idx[k] = 0;
        }
        if (k < 0)
            return;
    }
}

static int expand_kernel(const vq__kcall *k)
{
    vq_tensor *x = k->in[0], *out = k->out[0];
    if (out->numel == 0)
        return 0;
    int64_t xs[VQ_MAX_DIMS];
    contiguous_strides(x->ndim, x->shape, xs);
    vq__box b = {.ndim = out->ndim};
    contiguous_strides(out->ndim, out->shape, b.dst);
    for (int i = 0; i < out->ndim; i++) {
        int ix = i - (out->ndim - x->ndim);
        b.shape[i] = out->shape[i];
        b.src[i] = ix < 0 || x->shape[ix] == 1 ? 0 : xs[ix];
    }
    box_copy(b, out->data, x->data, vq_dtype_size(x->dtype));
    return 0;
}

static int expand_grad(const vq__grad *g)
{
    int wanted = vq__grad_wanted(g);
    if (wanted <= 0)
        return wanted;
    const char *in[3] = {g->dout[0], g->in[0], g->out[0]};
    vq_attr at[2] = {VQ_ATTR_S("op", "add"), VQ_ATTR_I("wrt", 0)};
    return vq__emit(g, "elementwise_grad", in, 3, &g->din[0], 1, at, 2);
}

/* ---- tile ---- */

static const char *const tile_in[] = {"X", "Repeats"};

static const vq__attr_spec tile_attrs[] = {
    {"repeats", VQ_ATTR_INTS, false, "none"},
};

/* Out's meta from X (slot 0) and the n repeats rep (what names where they
 * come from); unknown (NULL) repeats leave every dim but X's empty ones
 * unknown. */
static int tile_meta(const vq__infer *c, const int64_t *rep, int n, const char *what, vq__meta *out)
{
    const vq__meta *x = &c->in[0];
    if (n >= 0 && n != x->ndim)
        return vq__op_fail(c->def, "%s: has %d entries for X's %d dims", what, n, x->ndim);
    *out = *x;
    for (int d = 0; d < x->ndim; d++) {
        int64_t r = rep ? rep[d] : -1, xd = x->shape[d];
        if (!rep) {
            out->shape[d] = xd == 0 ? 0 : -1;
            continue;
        }
        if (r < 0)
            return vq__op_fail(c->def, "%s: entry %d is %lld, below 0", what, d, (long long)r);
        if (xd > 0 && r > ((int64_t)1 << 62) / xd)
            return vq__op_fail(c->def, "%s: entry %d (%lld) times X's dim %lld is past 2^62", what,
                               d, (long long)r, (long long)xd);
        out->shape[d] = r == 0 ? 0 : xd < 0 ? -1 : xd * r;
    }
    return 0;
}

/* The repeats from attribute repeats or from input Repeats' value (ONNX's
 * Tile, whose repeats a model may compute). */
static int tile_infer(vq__infer *c)
{
    int64_t rep[VQ_MAX_DIMS];
    int n;
    int rc = vq__check_dtype(c, 0, VQ__ANY);
    if (rc < 0 || (rc = vq__ints_arg(c, 1, "repeats", rep, VQ_MAX_DIMS, &n)) < 0)
        return rc;
    return tile_meta(c, rc == 1 ? NULL : rep, n, c->nin > 1 ? "input Repeats" : "attribute repeats",
                     &c->out[0]);
}

/* For each row of Out (every dim but the last), the offset of the X row it
 * reads: row(user, X offset, Out row index). Out is not empty. */
static void tile_rows(const vq_tensor *x, const vq_tensor *out, void *user,
                      void (*row)(void *user, int64_t xo, int64_t r))
{
    int last = out->ndim - 1;
    int64_t xs[VQ_MAX_DIMS], idx[VQ_MAX_DIMS] = {0};
    contiguous_strides(x->ndim, x->shape, xs);
    for (int64_t r = 0;; r++) {
        int64_t xo = 0;
        for (int d = 0; d < last; d++)
            xo += (idx[d] % x->shape[d]) * xs[d];
        row(user, xo, r);
        int d = last - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < out->shape[d])
                break;
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}

struct tile_copy {
    const char *x;
    char *out;
    size_t es;
    int64_t xlast, reps; /* X's last dim, its repeats */
};

static void tile_copy_row(void *user, int64_t xo, int64_t r)
{
    struct tile_copy *t = user;
    size_t xrow = (size_t)t->xlast * t->es;
    char *dst = t->out + (size_t)r * (size_t)t->reps * xrow;
    for (int64_t i = 0; i < t->reps; i++)
        memcpy(dst + (size_t)i * xrow, t->x + (size_t)xo * t->es, xrow);
}

static int tile_kernel(const vq__kcall *k)
{
    vq_tensor *x = k->in[0], *out = k->out[0];
    size_t es = vq_dtype_size(x->dtype);
    if (out->numel == 0)
        return 0;
    if (out->ndim == 0) {
        move_element(out->data, x->data, es);
        return 0;
    }
    int last = out->ndim - 1;
    struct tile_copy t = {.x = x->data, .out = out->data, .es = es, .xlast = x->shape[last],
                          .reps = out->shape[last] / x->shape[last]};
    tile_rows(x, out, &t, tile_copy_row);
    return 0;
}

static int tile_grad(const vq__grad *g)
{
    if (!g->din[0]) /* Repeats have no gradient */
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output Out");
    const char *in[2] = {g->in[0], g->dout[0]};
    /* tile_grad has exactly tile's attributes; with a Repeats input it
     * reads them from the shapes of X and dOut */
    return vq__emit(g, "tile_grad", in, 2, &g->din[0], 1, g->attrs, g->nattrs);
}

/* tile_grad(X, dOut; repeats) -> dX: the repeats from the attribute, or
 * (absent) dOut's dims over X's. */
static int tile_grad_infer(vq__infer *c)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0)
        return rc;
    const vq_attr *rep = vq__attr_find(c, "repeats");
    const vq__meta *x = &c->in[0], *g = &c->in[1];
    if (rep) {
        vq__meta want;
        if ((rc = tile_meta(c, rep->ints, rep->n, "attribute repeats", &want)) < 0 ||
            (rc = vq__check_shape_is(c, 1, &want, "tile's output shape")) < 0)
            return rc;
    } else {
        if (g->ndim != x->ndim)
            return vq__in_fail(c, 1, "has %d dims, X %d: not a tile of X", g->ndim, x->ndim);
        for (int d = 0; d < x->ndim; d++) {
            int64_t xd = x->shape[d], gd = g->shape[d];
            if (xd >= 0 && gd >= 0 && (xd == 0 ? gd != 0 : gd % xd != 0))
                return vq__in_fail(c, 1, "dim %d is %lld, not a multiple of X's %lld", d,
                                   (long long)gd, (long long)xd);
        }
    }
    c->out[0] = c->in[0];
    return 0;
}

struct tile_sum {
    const void *g;
    void *dx;
    int64_t xlast, reps; /* X's last dim, its repeats */
    bool f32;
};

static void tile_sum_row(void *user, int64_t xo, int64_t r)
{
    struct tile_sum *t = user;
    int64_t n = t->xlast, go = r * n * t->reps;
    if (t->f32) {
        const float *g = (const float *)t->g + go;
        float *d = (float *)t->dx + xo;
        for (int64_t k = 0; k < t->reps; k++)
            for (int64_t i = 0; i < n; i++)
                d[i] += g[k * n + i];
    } else {
        const double *g = (const double *)t->g + go;
        double *d = (double *)t->dx + xo;
        for (int64_t k = 0; k < t->reps; k++)
            for (int64_t i = 0; i < n; i++)
                d[i] += g[k * n + i];
    }
}

static int tile_grad_kernel(const vq__kcall *k)
{
    vq_tensor *g = k->in[1], *dx = k->out[0];
    memset(dx->data, 0, dx->nbytes);
    if (g->numel == 0)
        return 0;
    if (g->ndim == 0) {
        move_element(dx->data, g->data, vq_dtype_size(g->dtype));
        return 0;
    }
    int last = g->ndim - 1;
    struct tile_sum t = {.g = g->data, .dx = dx->data, .xlast = dx->shape[last],
                         .reps = g->shape[last] / dx->shape[last], .f32 = g->dtype == VQ_F32};
    tile_rows(dx, g, &t, tile_sum_row);
    return 0;
}

/* ---- pad ---- */

static const vq__attr_spec pad_attrs[] = {
    {"pads", VQ_ATTR_INTS, true, NULL},
    {"mode", VQ_ATTR_STRING, false, "constant"},
    {"value", VQ_ATTR_FLOAT, false, "0"},
};

static const char *const mode_names[] = {"constant", "reflect", "edge"};

#define PAD_LIMIT ((int64_t)1 << 62)

/* X (slot 0) against the attributes: fills p and Out's meta. */
static int pad_meta(const vq__infer *c, vq__pad_params *p, vq__meta *out)
{
    const vq__meta *x = &c->in[0];
    const vq_attr *pads = vq__attr_find(c, "pads"), *mode = vq__attr_find(c, "mode");
    int nd = x->ndim;
    if (pads->n != 2 * nd)
        return vq__attr_fail(c, "pads", "has %d entries; X has %d dims, so it needs %d (every "
                                        "dim's begin, then every dim's end)",
                             pads->n, nd, 2 * nd);
    p->mode = -1;
    for (int i = 0; i < 3; i++)
        if (!strcmp(mode ? mode->s : "constant", mode_names[i]))
            p->mode = i;
    if (p->mode < 0)
        return vq__attr_fail(c, "mode", "\"%s\" is not constant, reflect or edge", mode->s);
    *out = *x;
    for (int d = 0; d < nd; d++) {
        int64_t b = pads->ints[d], e = pads->ints[nd + d], xd = x->shape[d];
        if (b <= -PAD_LIMIT || b >= PAD_LIMIT || e <= -PAD_LIMIT || e >= PAD_LIMIT)
            return vq__attr_fail(c, "pads", "dim %d's pads %lld and %lld: past 2^62", d,
                                 (long long)b, (long long)e);
        p->begin[d] = b;
        if (xd < 0) {
            out->shape[d] = -1;
            continue;
        }
        int64_t kept = xd + (b < 0 ? b : 0) + (e < 0 ? e : 0);
        if (kept < 0)
            return vq__attr_fail(c, "pads", "begin %lld and end %lld crop %lld elements from "
                                            "dim %d, which has %lld",
                                 (long long)b, (long long)e,
                                 (long long)(-(b < 0 ? b : 0) - (e < 0 ? e : 0)), d,
                                 (long long)xd);
        int64_t most = b > e ? b : e;
        if (p->mode == VQ__PADMODE_REFLECT && most > 0 && most > kept - 1)
            return vq__attr_fail(c, "pads", "reflect pads dim %d by %lld and %lld, but needs "
                                            "pads smaller than the dim (%lld after crops)",
                                 d, (long long)b, (long long)e, (long long)kept);
        if (p->mode == VQ__PADMODE_EDGE && most > 0 && kept == 0)
            return vq__attr_fail(c, "pads", "edge pads dim %d by %lld and %lld, but the dim is "
                                            "empty (after crops): no edge to repeat",
                                 d, (long long)b, (long long)e);
        out->shape[d] = xd + b + e;
    }
    double v = vq__attr_float(c, "value", 0);
    p->value = v;
    if (x->dtype == VQ_F32 || x->dtype == VQ_F64)
        return 0;
    double lo = x->dtype == VQ_I32 ? -2147483648.0 : x->dtype == VQ_I64 ? -0x1p63 : 0;
    double hi = x->dtype == VQ_I32 ? 2147483647.0 : x->dtype == VQ_I64 ? 0x1p63 : 1;
    /* 2^63 itself is past i64's range, so that bound is exclusive */
    bool fits = v == floor(v) && v >= lo && (x->dtype == VQ_I64 ? v < hi : v <= hi);
    if (!fits)
        return vq__attr_fail(c, "value", "%.17g is not a value of X's dtype %s", v,
                             vq_dtype_name(x->dtype));
    p->ivalue = (int64_t)v;
    return 0;
}

static int pad_infer(vq__infer *c)
{
    int rc = vq__check_dtype(c, 0, VQ__ANY);
    return rc < 0 ? rc : pad_meta(c, c->params, &c->out[0]);
}

/* For each row of Out (every dim but the last): the offset in X of the
 * row's other coordinates, or -1 when one of them reads the constant. */
static void pad_rows(const vq__pad_geom *geo, void *user,
                     void (*row)(void *user, int64_t xo, int64_t r))
{
    int last = geo->ndim - 1;
    int64_t xs[VQ_MAX_DIMS], idx[VQ_MAX_DIMS] = {0};
    contiguous_strides(geo->ndim, geo->xshape, xs);
    for (int64_t r = 0;; r++) {
        int64_t xo = 0;
        for (int d = 0; d < last && xo >= 0; d++) {
            int64_t j = vq__pad_source(geo, d, idx[d]);
            xo = j < 0 ? -1 : xo + j * xs[d];
        }
        row(user, xo, r);
        int d = last - 1;
        for (; d >= 0; d--) {
            if (++idx[d] < geo->oshape[d])
                break;
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}

struct pad_fill {
    const vq__pad_geom *geo;
    const char *x;
    char *out;
    size_t es;
    unsigned char value[8]; /* the constant in X's dtype */
};

static void pad_fill_row(void *user, int64_t xo, int64_t r)
{
    struct pad_fill *f = user;
    int last = f->geo->ndim - 1;
    int64_t n = f->geo->oshape[last];
    char *o = f->out + (size_t)(r * n) * f->es;
    for (int64_t c = 0; c < n; c++) {
        int64_t j = xo < 0 ? -1 : vq__pad_source(f->geo, last, c);
        move_element(o + (size_t)c * f->es,
                     j < 0 ? (const void *)f->value : f->x + (size_t)(xo + j) * f->es, f->es);
    }
}

static int pad_kernel(const vq__kcall *k)
{
    const vq__pad_params *p = k->params;
    vq_tensor *x = k->in[0], *out = k->out[0];
    if (out->numel == 0)
        return 0;
    vq__pad_geom geo;
    vq__pad_geom_make(&geo, x->ndim, x->shape, out->shape, p->begin, p->mode);
    struct pad_fill f = {.geo = &geo, .x = x->data, .out = out->data,
                         .es = vq_dtype_size(x->dtype)};
    switch (x->dtype) {
    case VQ_F32: {
        float v = (float)p->value;
        memcpy(f.value, &v, sizeof v);
        break;
    }
    case VQ_F64: memcpy(f.value, &p->value, sizeof p->value); break;
    case VQ_I32: {
        int32_t v = (int32_t)p->ivalue;
        memcpy(f.value, &v, sizeof v);
        break;
    }
    case VQ_I64: memcpy(f.value, &p->ivalue, sizeof p->ivalue); break;
    default: f.value[0] = (unsigned char)(p->ivalue != 0); break;
    }
    if (out->ndim == 0) {
        move_element(out->data, x->data, f.es);
        return 0;
    }
    pad_rows(&geo, &f, pad_fill_row);
    return 0;
}

static int pad_grad(const vq__grad *g)
{
    int wanted = vq__grad_wanted(g);
    if (wanted <= 0)
        return wanted;
    const char *in[2] = {g->in[0], g->dout[0]};
    /* pad_grad has exactly pad's attributes. */
    return vq__emit(g, "pad_grad", in, 2, &g->din[0], 1, g->attrs, g->nattrs);
}

/* pad_grad(X, dOut; pads, mode, value) -> dX. */
static int pad_grad_infer(vq__infer *c)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0)
        return rc;
    vq__meta want;
    if ((rc = pad_meta(c, c->params, &want)) < 0 ||
        (rc = vq__check_shape_is(c, 1, &want, "pad's output shape")) < 0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

struct pad_sum {
    const vq__pad_geom *geo;
    const void *g;
    void *dx;
    bool f32;
};

#define PAD_SUM_ROW(T)                                                                      \
    do {                                                                                    \
        const T *g = (const T *)s->g + r * n;                                               \
        T *dx = (T *)s->dx + xo;                                                            \
        for (int64_t c = 0; c < n; c++) {                                                   \
            int64_t j = vq__pad_source(s->geo, last, c);                                    \
            if (j >= 0)                                                                     \
                dx[j] += g[c];                                                              \
        }                                                                                   \
    } while (0)

static void pad_sum_row(void *user, int64_t xo, int64_t r)
{
    struct pad_sum *s = user;
    if (xo < 0)
        return;
    int last = s->geo->ndim - 1;
    int64_t n = s->geo->oshape[last];
    if (s->f32)
        PAD_SUM_ROW(float);
    else
        PAD_SUM_ROW(double);
}

static int pad_grad_kernel(const vq__kcall *k)
{
    const vq__pad_params *p = k->params;
    vq_tensor *g = k->in[1], *dx = k->out[0];
    memset(dx->data, 0, dx->nbytes);
    if (g->numel == 0 || dx->numel == 0)
        return 0;
    if (g->ndim == 0) {
        move_element(dx->data, g->data, vq_dtype_size(g->dtype));
        return 0;
    }
    vq__pad_geom geo;
    vq__pad_geom_make(&geo, dx->ndim, dx->shape, g->shape, p->begin, p->mode);
    struct pad_sum s = {.geo = &geo, .g = g->data, .dx = dx->data, .f32 = g->dtype == VQ_F32};
    pad_rows(&geo, &s, pad_sum_row);
    return 0;
}

#define UNARY_DEF(name, at, nat, ps, inf, kern, gr, cuda_)                                      \
    {                                                                                           \
        .type = name, .in_slots = x_in, .nin_slots = 1, .out_slots = out_slot, .nout_slots = 1, \
        .attrs = at, .nattrs = nat, .params_size = ps, .infer = inf, .kernel = {kern},          \
        .cuda = VQ__CUDA_OP(cuda_), .grad = gr                                                  \
    }

#define GRAD_DEF(name, at, nat, ps, inf, kern, cuda_)                                              \
    {                                                                                              \
        .type = name, .in_slots = x_dout_in, .nin_slots = 2, .out_slots = dx_out, .nout_slots = 1, \
        .attrs = at, .nattrs = nat, .params_size = ps, .infer = inf, .kernel = {kern},             \
        .cuda = VQ__CUDA_OP(cuda_)                                                                 \
    }

const vq__op_def vq__ops_layout[] = {
    {.type = "expand",
     .in_slots = expand_in,
     .nin_slots = 2,
     .out_slots = out_slot,
     .nout_slots = 1,
     .flags = VQ__OPTIONAL_IN,
     .value_in = 1u << 1,
     .attrs = expand_attrs,
     .nattrs = 1,
     .infer = expand_infer,
     .kernel = {expand_kernel},
     .cuda = VQ__CUDA_OP(vq__expand_gpu),
     .grad = expand_grad},
    {.type = "tile",
     .in_slots = tile_in,
     .nin_slots = 2,
     .out_slots = out_slot,
     .nout_slots = 1,
     .flags = VQ__OPTIONAL_IN,
     .value_in = 1u << 1,
     .attrs = tile_attrs,
     .nattrs = 1,
     .infer = tile_infer,
     .kernel = {tile_kernel},
     .cuda = VQ__CUDA_OP(vq__tile_gpu),
     .grad = tile_grad},
    GRAD_DEF("tile_grad", tile_attrs, 1, 0, tile_grad_infer, tile_grad_kernel,
             VQ__CUDA_OP(vq__tile_grad_gpu)),
    UNARY_DEF("pad", pad_attrs, 3, sizeof(vq__pad_params), pad_infer, pad_kernel, pad_grad,
              VQ__CUDA_OP(vq__pad_gpu)),
    GRAD_DEF("pad_grad", pad_attrs, 3, sizeof(vq__pad_params), pad_grad_infer, pad_grad_kernel,
             VQ__CUDA_OP(vq__pad_grad_gpu)),
    {0},
};
