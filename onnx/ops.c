/* ONNX ops as varq ops: one translation per ONNX op type, each reading the
 * node's inputs and attributes (with the ONNX spec's defaults, by opset
 * where the spec changed them) and emitting varq ops through ox_emit. A
 * value that must be known at import (a shape, axes, pads) is read with
 * ox_const_ints; anything varq cannot express is VQ_ENOSYS naming the
 * attribute or input and its value. */
#include "onnx_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXI (VQ_MAX_DIMS * 2)

/* ---- small helpers ---- */

/* Output 0, which the op requires. */
static const char *out0(struct ox *x)
{
    return ox_out(x, 0);
}

/* A scalar constant of dtype dt. */
static int scalar(struct ox *x, vq_dtype dt, double value, struct ox_val **out)
{
    vq_tensor *t;
    int rc = vq_tensor_new(&t, dt, 0, NULL);
    if (rc < 0)
        return rc;
    switch (dt) {
    case VQ_F32: *(float *)vq_tensor_data(t) = (float)value; break;
    case VQ_F64: *(double *)vq_tensor_data(t) = value; break;
    case VQ_I32: *(int32_t *)vq_tensor_data(t) = (int32_t)value; break;
    case VQ_I64: *(int64_t *)vq_tensor_data(t) = (int64_t)value; break;
    case VQ_BOOL: *(unsigned char *)vq_tensor_data(t) = value != 0; break;
    }
    return ox_const(x, NULL, t, out);
}

static bool is_float(vq_dtype dt)
{
    return dt == VQ_F32 || dt == VQ_F64;
}

/* The first element of a known tensor, as a double. */
static double first_value(const vq_tensor *t)
{
    switch (t->dtype) {
    case VQ_F32: return *(const float *)t->data;
    case VQ_F64: return *(const double *)t->data;
    case VQ_I32: return *(const int32_t *)t->data;
    case VQ_I64: return (double)*(const int64_t *)t->data;
    default: return *(const unsigned char *)t->data;
    }
}

/* An axis in [-rank, rank) as an index. */
static int axis_of(struct ox *x, const char *what, int64_t a, int rank, int *out)
{
    if (a < -rank || a >= rank)
        return ox_fail(x, VQ_EINVAL, "%s %lld is out of range for rank %d", what, (long long)a,
                       rank);
    *out = (int)(a < 0 ? a + rank : a);
    return 0;
}

/* The entries of the node's declared ints attribute name into out (*n =
 * -1 when absent; the row's spec bounds *n by out's size). */
static void ints_of(const struct ox *x, const char *name, int64_t *out, int *n)
{
    const int64_t *v = ox_ints(x, name, n);
    if (*n > 0)
        memcpy(out, v, (size_t)*n * sizeof *out);
}

/* out0 = type(in0), type the row's varq op */
static int t_unary(struct ox *x)
{
    struct ox_val *a = ox_input(x, 0);
    const char *o = out0(x);
    return ox_emit(x, ox_type(x), &a, 1, &o, 1, NULL, 0, NULL);
}

/* One known integer element, into *out. */
static bool known_int1(const struct ox_val *v, int64_t *out)
{
    const vq_tensor *t = v->konst;
    if (!t || t->numel != 1 || (t->dtype != VQ_I64 && t->dtype != VQ_I32))
        return false;
    *out = t->dtype == VQ_I64 ? *(const int64_t *)t->data : *(const int32_t *)t->data;
    return true;
}

/* r = a + sign * b (add, sub): r follows a's sym (ox_val.sym) when b is one
 * known integer, or b's when a is and sign is 1. */
static void sym_sum(struct ox_val *r, const struct ox_val *a, const struct ox_val *b, int sign)
{
    int64_t k;
    if (r->meta.ndim > 1 || (r->meta.ndim == 1 && r->meta.shape[0] != 1))
        return;
    /* offsets add up along a chain of nodes: one that would overflow is
     * not followed */
    if (a->sym && !b->sym && known_int1(b, &k) && k > -(1LL << 40) && k < (1LL << 40)) {
        if (!__builtin_add_overflow(a->sym_off, sign * k, &r->sym_off))
            r->sym = a->sym;
    } else if (sign > 0 && b->sym && known_int1(a, &k) && k > -(1LL << 40) && k < (1LL << 40)) {
        if (!__builtin_add_overflow(b->sym_off, k, &r->sym_off))
            r->sym = b->sym;
    }
}

/* out0 = type(in0, in1), type the row's varq op */
static int t_binary(struct ox *x)
{
    const char *type = ox_type(x), *o = out0(x);
    struct ox_val *in[2] = {ox_input(x, 0), ox_input(x, 1)}, *r;
    int64_t legacy = ox_int(x, "axis");
    if (legacy >= 0)
        return ox_fail(x, VQ_ENOSYS,
                       "broadcasting along axis %lld (opsets before 7) is not "
                       "supported",
                       (long long)legacy);
    int rc = ox_emit(x, type, in, 2, &o, 1, NULL, 0, &r);
    if (rc == 0 && !r->konst && (!strcmp(type, "add") || !strcmp(type, "sub")))
        sym_sum(r, in[0], in[1], strcmp(type, "add") ? -1 : 1);
    return rc;
}

/* A reshape of v to shape (entries: a dim, 0 = v's dim there, -1 = the
 * rest), into name (NULL: a temporary). */
static int reshape_to(struct ox *x, struct ox_val *v, const int64_t *shape, int n,
                      const char *name, struct ox_val **out)
{
    vq_attr a = VQ_ATTR_IS("shape", shape, n);
    return ox_emit(x, "reshape", &v, 1, &name, 1, &a, 1, out);
}

/* A reshape of v to rank n with the known dims of want[] (-1: unknown):
 * each unknown dim is copied from v when v has it at the same place (0),
 * one other may be left to the count (-1); more is VQ_ENOSYS. */
static int reshape_known(struct ox *x, struct ox_val *v, const int64_t *want, const int *from,
                         int n, const char *name, struct ox_val **out)
{
    int64_t shape[VQ_MAX_DIMS];
    int free_at = -1;
    for (int i = 0; i < n; i++) {
        if (want[i] >= 0)
            shape[i] = want[i];
        else if (from[i] == i)
            shape[i] = 0;
        else if (free_at < 0)
            shape[i] = -1, free_at = i;
        else
            return ox_fail(x, VQ_ENOSYS, "the result's dims %d and %d are known only at run "
                                         "time; varq can reshape to one such dim",
                           free_at, i);
    }
    return reshape_to(x, v, shape, n, name, out);
}

/* ---- elementwise and activations ---- */

static int t_where(struct ox *x)
{
    struct ox_val *in[3] = {ox_input(x, 0), ox_input(x, 1), ox_input(x, 2)};
    const char *o = out0(x);
    return ox_emit(x, "where", in, 3, &o, 1, NULL, 0, NULL);
}

/* Neg: 0 - X (every dtype). */
static int t_neg(struct ox *x)
{
    struct ox_val *in[2] = {NULL, ox_input(x, 0)};
    const char *o = out0(x);
    int rc = scalar(x, in[1]->meta.dtype, 0, &in[0]);
    return rc ? rc : ox_emit(x, "sub", in, 2, &o, 1, NULL, 0, NULL);
}

/* Max, Min, Sum, Mean: a chain of the row's varq op over the inputs (one
 * input: a copy); Mean (the row's type "mean") adds, then scales. */
static int t_variadic(struct ox *x)
{
    bool mean = !strcmp(ox_type(x), "mean");
    const char *type = mean ? "add" : ox_type(x);
    struct ox_val *acc = ox_input(x, 0);
    int count = (int)x->node->n_input, rc = 0;
    for (int i = 1; i < count && rc == 0; i++) {
        struct ox_val *in[2] = {acc, ox_input(x, i)};
        if (!in[1])
            return ox_fail(x, VQ_EINVAL, "input %d is missing", i);
        const char *name = i == count - 1 && !mean ? out0(x) : NULL;
        rc = ox_emit(x, type, in, 2, &name, 1, NULL, 0, &acc);
    }
    if (rc)
        return rc;
    if (mean) {
        if (!is_float(acc->meta.dtype))
            return ox_fail(x, VQ_ENOSYS, "Mean of %s", vq_dtype_name(acc->meta.dtype));
        vq_attr a = VQ_ATTR_F("scale", 1.0 / count);
        const char *o = out0(x);
        return ox_emit(x, "scale", &acc, 1, &o, 1, &a, 1, NULL);
    }
    return count == 1 ? ox_alias(x, out0(x), acc) : 0;
}

/* Clip(X, min, max): attributes before opset 11, optional inputs since. */
static int t_clip(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *lo = NULL, *hi = NULL;
    double a = ox_float(x, "min"), b = ox_float(x, "max");
    int rc = 0;
    if (x->opset < 11) {
        if (isfinite(a))
            rc = scalar(x, v->meta.dtype, a, &lo);
        if (rc == 0 && isfinite(b))
            rc = scalar(x, v->meta.dtype, b, &hi);
    } else {
        lo = ox_input(x, 1);
        hi = ox_input(x, 2);
    }
    struct ox_val *cur = v;
    if (rc == 0 && lo) {
        struct ox_val *in[2] = {cur, lo};
        const char *name = hi ? NULL : out0(x);
        rc = ox_emit(x, "maximum", in, 2, &name, 1, NULL, 0, &cur);
    }
    if (rc == 0 && hi) {
        struct ox_val *in[2] = {cur, hi};
        const char *name = out0(x);
        rc = ox_emit(x, "minimum", in, 2, &name, 1, NULL, 0, &cur);
    }
    if (rc == 0 && !lo && !hi)
        rc = ox_alias(x, out0(x), v);
    return rc;
}

/* LeakyRelu: where(X < 0, alpha X, X). */
static int t_leaky_relu(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *zero, *neg, *scaled;
    vq_attr a = VQ_ATTR_F("scale", ox_float(x, "alpha"));
    const char *o = out0(x);
    int rc;
    if ((rc = scalar(x, v->meta.dtype, 0, &zero)) < 0 ||
        (rc = ox_emit(x, "less", (struct ox_val *[]){v, zero}, 2, NULL, 1, NULL, 0, &neg)) < 0 ||
        (rc = ox_emit(x, "scale", &v, 1, NULL, 1, &a, 1, &scaled)) < 0)
        return rc;
    return ox_emit(x, "where", (struct ox_val *[]){neg, scaled, v}, 3, &o, 1, NULL, 0, NULL);
}

/* clamp(alpha X + beta, 0, 1) into name. */
static int hard_sigmoid(struct ox *x, struct ox_val *v, double alpha, double beta,
                        const char *name, struct ox_val **out)
{
    struct ox_val *lin, *zero, *one, *top;
    vq_attr a[2] = {VQ_ATTR_F("scale", alpha), VQ_ATTR_F("bias", beta)};
    int rc = ox_emit(x, "scale", &v, 1, NULL, 1, a, 2, &lin);
    if (rc == 0)
        rc = scalar(x, v->meta.dtype, 0, &zero);
    if (rc == 0)
        rc = scalar(x, v->meta.dtype, 1, &one);
    if (rc == 0)
        rc = ox_emit(x, "minimum", (struct ox_val *[]){lin, one}, 2, NULL, 1, NULL, 0, &top);
    return rc ? rc
              : ox_emit(x, "maximum", (struct ox_val *[]){top, zero}, 2, &name, 1, NULL, 0, out);
}

static int t_hard_sigmoid(struct ox *x)
{
    return hard_sigmoid(x, ox_input(x, 0), ox_float(x, "alpha"), ox_float(x, "beta"), out0(x),
                        NULL);
}

/* HardSwish: X * hard_sigmoid(X; 1/6, 1/2). */
static int t_hard_swish(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *hs;
    const char *o = out0(x);
    int rc = hard_sigmoid(x, v, 1.0 / 6, 0.5, NULL, &hs);
    return rc ? rc : ox_emit(x, "mul", (struct ox_val *[]){v, hs}, 2, &o, 1, NULL, 0, NULL);
}

/* ---- math ---- */

/* *v cast to dtype (a new value), unless it has that type. */
static int cast_to(struct ox *x, struct ox_val **v, vq_dtype dtype)
{
    if ((*v)->meta.dtype == dtype)
        return 0;
    vq_attr c = VQ_ATTR_S("dtype", vq_dtype_name(dtype));
    const char *temp = NULL;
    return ox_emit(x, "cast", v, 1, &temp, 1, &c, 1, v);
}

/* Pow(X, Y), the output of X's type. Float X: with Y a known scalar,
 * power; else the broadcasting pow of X and Y, Y cast to X's type first.
 * Integer X (opset 12's mixed types): with an integer Y, the integer pow
 * of the two (both cast to int64 when their types differ, the result cast
 * back: the same wrapped value); with a float Y, pow in double (numpy's
 * promotion of the reference), cast back to X's type (truncating, as
 * numpy's astype). */
static int t_pow(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *e = ox_input(x, 1);
    const char *o = out0(x);
    int rc;
    if (!is_float(v->meta.dtype)) {
        vq_dtype xt = v->meta.dtype, wide = is_float(e->meta.dtype)          ? VQ_F64
                                            : e->meta.dtype != v->meta.dtype ? VQ_I64
                                                                             : xt;
        if (wide == xt)
            return ox_emit(x, "pow", (struct ox_val *[]){v, e}, 2, &o, 1, NULL, 0, NULL);
        struct ox_val *p;
        const char *temp = NULL;
        vq_attr c = VQ_ATTR_S("dtype", vq_dtype_name(xt));
        if ((rc = cast_to(x, &v, wide)) < 0 || (rc = cast_to(x, &e, wide)) < 0 ||
            (rc = ox_emit(x, "pow", (struct ox_val *[]){v, e}, 2, &temp, 1, NULL, 0, &p)) < 0)
            return rc;
        return ox_emit(x, "cast", &p, 1, &o, 1, &c, 1, NULL);
    }
    if (!e->konst || e->konst->numel != 1) {
        if ((rc = cast_to(x, &e, v->meta.dtype)) < 0)
            return rc;
        return ox_emit(x, "pow", (struct ox_val *[]){v, e}, 2, &o, 1, NULL, 0, NULL);
    }
    vq_attr a = VQ_ATTR_F("exponent", first_value(e->konst));
    return ox_emit(x, "power", &v, 1, &o, 1, &a, 1, NULL);
}

/* y = where(c, a, b) into name. */
static int select3(struct ox *x, struct ox_val *c, struct ox_val *a, struct ox_val *b,
                   const char *name, struct ox_val **out)
{
    return ox_emit(x, "where", (struct ox_val *[]){c, a, b}, 3, &name, 1, NULL, 0, out);
}

/* scale * X + bias into a temporary. */
static int affine(struct ox *x, struct ox_val *v, double scale, double bias, struct ox_val **out)
{
    vq_attr a[2] = {VQ_ATTR_F("scale", scale), VQ_ATTR_F("bias", bias)};
    return ox_emit(x, "scale", &v, 1, NULL, 1, a, 2, out);
}

/* X > 0 (or X > threshold) as a bool temporary. */
static int positive(struct ox *x, struct ox_val *v, double threshold, struct ox_val **out)
{
    struct ox_val *t;
    int rc = scalar(x, v->meta.dtype, threshold, &t);
    return rc ? rc : ox_emit(x, "greater", (struct ox_val *[]){v, t}, 2, NULL, 1, NULL, 0, out);
}

/* Elu: X > 0 ? X : alpha (exp(X) - 1); Selu: gamma times that with its
 * alpha. */
static int elu_like(struct ox *x, double alpha, double gamma)
{
    struct ox_val *v = ox_input(x, 0), *pos, *e, *neg, *yes = v;
    int rc;
    if ((rc = positive(x, v, 0, &pos)) < 0 ||
        (rc = ox_emit(x, "exp", &v, 1, NULL, 1, NULL, 0, &e)) < 0 ||
        (rc = affine(x, e, alpha * gamma, -alpha * gamma, &neg)) < 0 ||
        (gamma != 1 && (rc = affine(x, v, gamma, 0, &yes)) < 0))
        return rc;
    return select3(x, pos, yes, neg, out0(x), NULL);
}

static int t_elu(struct ox *x)
{
    return elu_like(x, ox_float(x, "alpha"), 1);
}

static int t_selu(struct ox *x)
{
    return elu_like(x, ox_float(x, "alpha"), ox_float(x, "gamma"));
}

/* Celu: max(0, X) + min(0, alpha (exp(X / alpha) - 1)). */
static int t_celu(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *zero, *lo, *hi, *e, *s, *en;
    double alpha = ox_float(x, "alpha");
    const char *o = out0(x);
    int rc;
    if ((rc = scalar(x, v->meta.dtype, 0, &zero)) < 0 ||
        (rc = ox_emit(x, "maximum", (struct ox_val *[]){v, zero}, 2, NULL, 1, NULL, 0, &hi)) < 0 ||
        (rc = affine(x, v, 1 / alpha, 0, &s)) < 0 ||
        (rc = ox_emit(x, "exp", &s, 1, NULL, 1, NULL, 0, &e)) < 0 ||
        (rc = affine(x, e, alpha, -alpha, &en)) < 0 ||
        (rc = ox_emit(x, "minimum", (struct ox_val *[]){en, zero}, 2, NULL, 1, NULL, 0, &lo)) < 0)
        return rc;
    return ox_emit(x, "add", (struct ox_val *[]){hi, lo}, 2, &o, 1, NULL, 0, NULL);
}

/* PRelu: X > 0 ? X : slope X (slope broadcast). */
static int t_prelu(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *slope = ox_input(x, 1), *pos, *m;
    int rc;
    if ((rc = positive(x, v, 0, &pos)) < 0 ||
        (rc = ox_emit(x, "mul", (struct ox_val *[]){v, slope}, 2, NULL, 1, NULL, 0, &m)) < 0)
        return rc;
    return select3(x, pos, v, m, out0(x), NULL);
}

/* ThresholdedRelu: X > alpha ? X : 0. */
static int t_thresholded_relu(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *pos, *zero;
    int rc;
    if ((rc = positive(x, v, ox_float(x, "alpha"), &pos)) < 0 ||
        (rc = scalar(x, v->meta.dtype, 0, &zero)) < 0)
        return rc;
    return select3(x, pos, v, zero, out0(x), NULL);
}

/* Softplus: log(exp(X) + 1); Softsign: X / (1 + |X|). */
static int t_softplus(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *e, *e1;
    const char *o = out0(x);
    int rc;
    if ((rc = ox_emit(x, "exp", &v, 1, NULL, 1, NULL, 0, &e)) < 0 ||
        (rc = affine(x, e, 1, 1, &e1)) < 0)
        return rc;
    return ox_emit(x, "log", &e1, 1, &o, 1, NULL, 0, NULL);
}

static int t_softsign(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *a, *a1;
    const char *o = out0(x);
    int rc;
    if ((rc = ox_emit(x, "abs", &v, 1, NULL, 1, NULL, 0, &a)) < 0 ||
        (rc = affine(x, a, 1, 1, &a1)) < 0)
        return rc;
    return ox_emit(x, "div", (struct ox_val *[]){v, a1}, 2, &o, 1, NULL, 0, NULL);
}

/* IsNaN: X != X. */
static int t_isnan(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    const char *o = out0(x);
    return ox_emit(x, "not_equal", (struct ox_val *[]){v, v}, 2, &o, 1, NULL, 0, NULL);
}

/* ---- convolution nets (NCHW) ---- */

/* Window ops work on 2-D images; a 1-D one ([N, C, L]) runs as a 2-D one
 * of height 1 ([N, C, 1, L]), its attributes lifted (stride, dilation and
 * kernel 1 along the added dim, no padding). sd: the input's spatial
 * rank, 1 or 2. */
static int spatial_rank(struct ox *x, const struct ox_val *v, int *sd)
{
    *sd = v->meta.ndim - 2;
    if (*sd >= 1 && *sd <= 3)
        return 0;
    return ox_fail(x, VQ_ENOSYS,
                   "input of rank %d: varq has 1-D, 2-D and 3-D windows (NCL, NCHW, NCDHW)",
                   v->meta.ndim);
}

/* An ints attribute of sd entries lifted to 2 when sd is 1 (absent: d
 * each); 3-D windows keep their 3. */
static int lifted(struct ox *x, const char *name, int sd, int64_t d, int64_t *out)
{
    int n;
    const int64_t *v = ox_ints(x, name, &n);
    if (n >= 0 && n != sd)
        return ox_fail(x, VQ_EINVAL, "%s has %d entries for %d spatial dims", name, n, sd);
    if (sd == 3) {
        for (int i = 0; i < 3; i++)
            out[i] = n < 0 ? d : v[i];
        return 0;
    }
    out[0] = sd == 1 ? 1 : n < 0 ? d : v[0];
    out[1] = n < 0 ? d : v[sd - 1];
    return 0;
}

/* The pads attribute of a window op over sd spatial dims, as the lifted
 * window's (ONNX's begins then ends: top, left, bottom, right; 3-D:
 * front, top, left, back, bottom, right; a 1-D window's added dim gets
 * none) into pads (zeros when absent). */
static int lifted_pads(struct ox *x, int sd, int64_t *pads)
{
    int n, nd = sd == 3 ? 3 : 2; /* the dims of the lifted window */
    const int64_t *p = ox_ints(x, "pads", &n);
    memset(pads, 0, (size_t)(2 * nd) * sizeof *pads);
    if (n >= 0 && n != 2 * sd)
        return ox_fail(x, VQ_EINVAL, "pads has %d entries for %d spatial dims", n, sd);
    if (n > 0 && sd != 1)
        memcpy(pads, p, (size_t)n * sizeof *p);
    else if (n > 0) {
        pads[1] = p[0];
        pads[3] = p[1];
    }
    return 0;
}

/* v as [N, C, 1, L] when it is [N, C, L]; *out = v otherwise. */
static int lift(struct ox *x, struct ox_val *v, int sd, struct ox_val **out)
{
    *out = v;
    if (sd != 1)
        return 0;
    return reshape_to(x, v, (int64_t[]){0, 0, 1, -1}, 4, NULL, out);
}

/* Emits a window op on the lifted input into out0, dropping the added
 * dim of a 1-D result. */
static int window_emit(struct ox *x, const char *type, struct ox_val *const *in, int nin,
                       int sd, const vq_attr *attrs, int nattrs)
{
    const char *o = out0(x), *name = sd != 1 ? o : NULL;
    struct ox_val *r;
    int rc = ox_emit(x, type, in, nin, &name, 1, attrs, nattrs, &r);
    if (rc || sd != 1)
        return rc;
    return reshape_to(x, r, (int64_t[]){0, 0, -1}, 3, o, NULL);
}

/* The pads of a window op on the lifted input v: the pads attribute, or
 * auto_pad (SAME_UPPER / SAME_LOWER need the spatial dims known at
 * import). */
static int window_pads(struct ox *x, const struct ox_val *v, int sd, const int64_t *kernel,
                       const int64_t *strides, const int64_t *dil, int64_t *pads)
{
    const char *mode = ox_str(x, "auto_pad");
    int nd = sd == 3 ? 3 : 2; /* the dims of the lifted window */
    int rc = lifted_pads(x, sd, pads);
    if (rc)
        return rc;
    if (!strcmp(mode, "NOTSET") || !strcmp(mode, "VALID")) {
        if (!strcmp(mode, "VALID"))
            memset(pads, 0, (size_t)(2 * nd) * sizeof *pads);
        return 0;
    }
    bool upper = !strcmp(mode, "SAME_UPPER");
    if (!upper && strcmp(mode, "SAME_LOWER"))
        return ox_fail(x, VQ_EINVAL, "auto_pad \"%s\" is not NOTSET, VALID, SAME_UPPER or "
                                     "SAME_LOWER",
                       mode);
    for (int i = 0; i < nd; i++) {
        int64_t in = v->meta.shape[2 + i];
        if (in < 0)
            return ox_fail(x, VQ_ENOSYS, "auto_pad %s needs the spatial dims known when the "
                                         "model is imported",
                           mode);
        /* strides, dilations and kernel are the model's: checked here, where
         * they divide and multiply before the op's own checks */
        int64_t st = strides[i], span, total;
        if (st < 1 || dil[i] < 1 || kernel[i] < 0)
            return ox_fail(x, VQ_EINVAL,
                           "strides %lld, dilations %lld, kernel %lld: a window "
                           "needs them positive",
                           (long long)st, (long long)dil[i], (long long)kernel[i]);
        int64_t out = in / st + (in % st != 0); /* ceil(in / st) <= in */
        if (__builtin_mul_overflow(kernel[i] > 0 ? kernel[i] - 1 : 0, dil[i], &span) ||
            __builtin_add_overflow((out - 1) * st + 1 - in, span, &total))
            return ox_fail(x, VQ_EINVAL, "kernel %lld dilated by %lld overflows",
                           (long long)kernel[i], (long long)dil[i]);
        if (total < 0)
            total = 0;
        pads[upper ? i : nd + i] = total / 2;
        pads[upper ? nd + i : i] = total - total / 2;
    }
    return 0;
}

/* What Conv and ConvTranspose share: X, W and an optional B (in), the
 * output, the spatial rank, strides, dilations and group, with X and W
 * lifted to 2-D windows (3-D ones stay 3-D: conv3d, conv_transpose3d). */
static int conv_common(struct ox *x, struct ox_val **in, int *sd, int64_t *strides, int64_t *dil)
{
    in[0] = ox_input(x, 0);
    in[1] = ox_input(x, 1);
    in[2] = ox_input(x, 2);
    int rc = spatial_rank(x, in[0], sd);
    if (rc == 0 && in[1]->meta.ndim != *sd + 2)
        rc = ox_fail(x, VQ_EINVAL, "W has rank %d, X %d", in[1]->meta.ndim, in[0]->meta.ndim);
    if (rc == 0)
        rc = lifted(x, "strides", *sd, 1, strides);
    if (rc == 0)
        rc = lifted(x, "dilations", *sd, 1, dil);
    if (rc == 0)
        rc = lift(x, in[0], *sd, &in[0]);
    if (rc == 0)
        rc = lift(x, in[1], *sd, &in[1]);
    return rc;
}

static int t_conv(struct ox *x)
{
    struct ox_val *in[3];
    int64_t strides[3], dil[3], kernel[3], pads[6];
    int sd = 0;
    int rc = conv_common(x, in, &sd, strides, dil);
    if (rc)
        return rc;
    int nd = sd == 3 ? 3 : 2;
    for (int i = 0; i < nd; i++)
        kernel[i] = in[1]->meta.shape[2 + i];
    if ((rc = window_pads(x, in[0], sd, kernel, strides, dil, pads)) < 0)
        return rc;
    /* An activation that translate_at (import.c) fused into this Conv, one
     * over images: conv2d's clip. */
    double clip[2] = {x->fuse_lo, x->fuse_hi};
    vq_attr a[5] = {VQ_ATTR_IS("strides", strides, nd), VQ_ATTR_IS("pads", pads, 2 * nd),
                    VQ_ATTR_IS("dilations", dil, nd), VQ_ATTR_I("groups", ox_int(x, "group")),
                    VQ_ATTR_FS("clip", clip, 2)};
    return window_emit(x, sd == 3 ? "conv3d" : "conv2d", in, in[2] ? 3 : 2, sd, a,
                       x->fuse && sd == 2 ? 5 : 4);
}

/* The total padding of a ConvTranspose along lifted dim i (len the input's
 * size there, k the kernel's) that gives the output size want (may raise
 * *outpad, for rows past the last window): the model's strides,
 * dilations, paddings and sizes, each step checked for overflow. */
static int transpose_pad(struct ox *x, int64_t len, int64_t k, int64_t st, int64_t dil,
                         int64_t want, bool given, int64_t *outpad, int64_t *out)
{
    int64_t total, t1, t2;
    bool bad = st < 1 || dil < 1 || *outpad < 0;
    if (!bad && !given)
        bad = __builtin_mul_overflow(len, st, &want);
    bad = bad || want < 0 || __builtin_mul_overflow(st, len - 1, &t1) ||
          __builtin_mul_overflow(k - 1, dil, &t2) || __builtin_add_overflow(t1, t2, &total) ||
          __builtin_add_overflow(total, *outpad, &total) ||
          __builtin_sub_overflow(total, want, &total) || __builtin_add_overflow(total, 1, &total) ||
          (total < 0 && __builtin_sub_overflow(*outpad, total, &t1));
    if (bad)
        return ox_fail(x, VQ_EINVAL,
                       "strides %lld, dilations %lld, output_padding "
                       "%lld and the output size overflow or are not "
                       "positive",
                       (long long)st, (long long)dil, (long long)*outpad);
    if (total < 0 && *outpad - total < st) {
        /* rows past the last window: what output_padding adds */
        *outpad -= total;
        total = 0;
    }
    if (total < 0)
        return ox_fail(x, VQ_ENOSYS,
                       "output size %lld is past what the strides and "
                       "output_padding give (%lld)",
                       (long long)want, (long long)(want + total));
    *out = total;
    return 0;
}

/* ConvTranspose: X [N, C, spatial], W [C, M / group, kernel]. Its pads
 * come from pads, or from output_shape or auto_pad SAME_* (which need the
 * spatial dims known at import): the total padding that gives the wanted
 * size, split as the ONNX spec says (SAME_UPPER puts the odd one at the
 * end). */
static int t_conv_transpose(struct ox *x)
{
    struct ox_val *in[3];
    int64_t strides[3], dil[3], outpad[3], pads[6] = {0};
    int sd = 0, nshape;
    const char *mode = ox_str(x, "auto_pad");
    const int64_t *shape = ox_ints(x, "output_shape", &nshape);
    int rc = conv_common(x, in, &sd, strides, dil);
    if (rc == 0)
        rc = lifted(x, "output_padding", sd, 0, outpad);
    if (sd == 1)
        outpad[0] = 0; /* the added dim of a 1-D window gets no padding */
    if (rc == 0)
        rc = lifted_pads(x, sd, pads);
    if (rc == 0 && nshape >= 0 && nshape != sd && nshape != sd + 2)
        rc = ox_fail(x, VQ_EINVAL, "output_shape has %d entries for %d spatial dims", nshape,
                     sd);
    if (rc)
        return rc;
    bool same = !strcmp(mode, "SAME_UPPER") || !strcmp(mode, "SAME_LOWER");
    if (!same && strcmp(mode, "NOTSET") && strcmp(mode, "VALID"))
        return ox_fail(x, VQ_EINVAL, "auto_pad \"%s\" is not NOTSET, VALID, SAME_UPPER or "
                                     "SAME_LOWER",
                       mode);
    int nd = sd == 3 ? 3 : 2; /* the dims of the lifted window */
    for (int i = nd - sd; (nshape > 0 || same) && i < nd; i++) {
        int64_t len = in[0]->meta.shape[2 + i], k = in[1]->meta.shape[2 + i], total = 0;
        if (len < 0 || k < 0)
            return ox_fail(x, VQ_ENOSYS,
                           "%s needs the spatial dims known when the model is "
                           "imported",
                           nshape > 0 ? "output_shape" : "auto_pad SAME");
        int64_t want = nshape > 0 ? shape[nshape - nd + i] : 0;
        if ((rc = transpose_pad(x, len, k, strides[i], dil[i], want, nshape > 0, &outpad[i],
                                &total)) < 0)
            return rc;
        bool upper = !strcmp(mode, "SAME_UPPER");
        pads[i] = upper ? total / 2 : total - total / 2;
        pads[nd + i] = total - pads[i];
    }
    vq_attr a[5] = {VQ_ATTR_IS("strides", strides, nd), VQ_ATTR_IS("pads", pads, 2 * nd),
                    VQ_ATTR_IS("dilations", dil, nd), VQ_ATTR_I("groups", ox_int(x, "group")),
                    VQ_ATTR_IS("output_padding", outpad, nd)};
    return window_emit(x, sd == 3 ? "conv_transpose3d" : "conv_transpose2d", in, in[2] ? 3 : 2, sd,
                       a, 5);
}

/* A 3-D pool as two 2-D ones (type, attributes a of which the window's
 * are a[0..2] and the pads a[2]): X [N, C, D, H, W] seen as [N, C * D, H,
 * W] pooled over (H, W), then [N, C, D, OH * OW] pooled over D alone. Max
 * and average pools are separable: the maximum of a box is the maximum
 * over its depth of the planes' maxima (and the first maximum in (d, h, w)
 * order stays the first, for the gradient), and the taps of a box on the
 * input (or the pads) are the product of those along each dim, so the
 * average's divisor is too. C, D, H and W must be known at import. */
static int pool3d(struct ox *x, const char *type, struct ox_val *v, const int64_t *kernel,
                  const int64_t *strides, const int64_t *dil, const int64_t *pads, vq_attr *a,
                  int na)
{
    const int64_t *d = v->meta.shape;
    for (int i = 1; i < 5; i++)
        if (d[i] < 0)
            return ox_fail(x, VQ_ENOSYS,
                           "a 3-D pool's channels and spatial dims must be known "
                           "when the model is imported");
    struct ox_val *r;
    int64_t k2[2] = {kernel[1], kernel[2]}, s2[2] = {strides[1], strides[2]};
    int64_t d2[2] = {dil[1], dil[2]}, p2[4] = {pads[1], pads[2], pads[4], pads[5]};
    int64_t kd[2] = {kernel[0], 1}, sd[2] = {strides[0], 1}, dd[2] = {dil[0], 1};
    int64_t pd[4] = {pads[0], 0, pads[3], 0};
    a[0] = VQ_ATTR_IS("kernel", k2, 2);
    a[1] = VQ_ATTR_IS("strides", s2, 2);
    a[2] = VQ_ATTR_IS("pads", p2, 4);
    if (!strcmp(a[4].name, "dilations"))
        a[4] = VQ_ATTR_IS("dilations", d2, 2);
    const char *tmp = NULL;
    struct ox_val *q;
    int64_t cd;
    if (__builtin_mul_overflow(d[1], d[2], &cd))
        return ox_fail(x, VQ_EINVAL, "channels %lld times depth %lld overflow", (long long)d[1],
                       (long long)d[2]);
    int rc = reshape_to(x, v, (int64_t[]){0, cd, d[3], d[4]}, 4, NULL, &q);
    if (rc == 0)
        rc = ox_emit(x, type, &q, 1, &tmp, 1, a, na, &r);
    if (rc)
        return rc;
    int64_t oh = r->meta.shape[2], ow = r->meta.shape[3], plane;
    if (oh < 0 || ow < 0 || __builtin_mul_overflow(oh, ow, &plane))
        return ox_fail(x, VQ_EINVAL, "a 3-D pool's output plane %lldx%lld is not a size",
                       (long long)oh, (long long)ow);
    a[0] = VQ_ATTR_IS("kernel", kd, 2);
    a[1] = VQ_ATTR_IS("strides", sd, 2);
    a[2] = VQ_ATTR_IS("pads", pd, 4);
    if (!strcmp(a[4].name, "dilations"))
        a[4] = VQ_ATTR_IS("dilations", dd, 2);
    rc = reshape_to(x, r, (int64_t[]){0, d[1], d[2], plane}, 4, NULL, &q);
    if (rc == 0)
        rc = ox_emit(x, type, &q, 1, &tmp, 1, a, na, &r);
    return rc ? rc : reshape_to(x, r, (int64_t[]){0, 0, 0, oh, ow}, 5, out0(x), NULL);
}

/* MaxPool (Indices too) and AveragePool: the row's varq op, max_pool2d or
 * avg_pool2d. */
static int t_pool(struct ox *x)
{
    bool max = !strcmp(ox_type(x), "max_pool2d");
    struct ox_val *v = ox_input(x, 0);
    int64_t kernel[3], strides[3], dil[3] = {1, 1, 1}, pads[6];
    int sd = 0;
    int rc = spatial_rank(x, v, &sd);
    if (rc == 0 && !ox_given(x, "kernel_shape"))
        rc = ox_fail(x, VQ_EINVAL, "no kernel_shape");
    if (rc == 0)
        rc = lifted(x, "kernel_shape", sd, 1, kernel);
    if (rc == 0)
        rc = lifted(x, "strides", sd, 1, strides);
    if (rc == 0 && max)
        rc = lifted(x, "dilations", sd, 1, dil);
    if (rc == 0 && ox_out(x, 1) && (!max || sd == 3))
        rc = ox_fail(x, VQ_ENOSYS, "its Indices output is not supported (a 3-D window)");
    if (rc == 0)
        rc = lift(x, v, sd, &v);
    if (rc == 0)
        rc = window_pads(x, v, sd, kernel, strides, dil, pads);
    if (rc)
        return rc;
    vq_attr a[5] = {VQ_ATTR_IS("kernel", kernel, 2), VQ_ATTR_IS("strides", strides, 2),
                    VQ_ATTR_IS("pads", pads, 4),
                    VQ_ATTR_B("ceil_mode", ox_int(x, "ceil_mode") != 0),
                    max ? VQ_ATTR_IS("dilations", dil, 2)
                        : VQ_ATTR_B("count_include_pad", ox_int(x, "count_include_pad") != 0)};
    if (sd == 3)
        return pool3d(x, ox_type(x), v, kernel, strides, dil, pads, a, 5);
    if ((rc = window_emit(x, ox_type(x), &v, 1, sd, a, 5)) || !ox_out(x, 1))
        return rc;
    /* Indices: where each maximum is, flattened over the whole input (a
     * 1-D pool's lifted [N, C, 1, W] flattens the same) */
    const char *idx = ox_out(x, 1), *name = sd != 1 ? idx : NULL;
    struct ox_val *r;
    vq_attr ai[6] = {a[0], a[1], a[2],
                     a[3], a[4], VQ_ATTR_I("storage_order", ox_int(x, "storage_order"))};
    if ((rc = ox_emit(x, "max_pool2d_argmax", &v, 1, &name, 1, ai, 6, &r)) || sd != 1)
        return rc;
    return reshape_to(x, r, (int64_t[]){0, 0, -1}, 3, idx, NULL);
}

static int t_global_average_pool(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    const char *o = out0(x);
    if (v->meta.ndim < 3)
        return ox_fail(x, VQ_EINVAL, "input of rank %d (needs N, C and spatial dims)",
                       v->meta.ndim);
    return ox_emit(x, "global_avg_pool", &v, 1, &o, 1, NULL, 0, NULL);
}

/* BatchNormalization: at inference (the running statistics) a batch_norm;
 * in training mode a batch_norm_train, whose outputs NewMean and NewVar
 * are the node's running_mean and running_var. Training mode is the
 * attribute training_mode from opset 14, and before it the outputs mean
 * and var being asked for (opsets 9 to 13: their saved_mean and saved_var
 * are not produced). */
static int t_batch_norm(struct ox *x)
{
    struct ox_val *in[5];
    for (int i = 0; i < 5; i++)
        in[i] = ox_input(x, i);
    double eps = ox_float(x, "epsilon"), momentum = ox_float(x, "momentum");
    bool training = x->opset >= 14 ? ox_int(x, "training_mode") != 0 : ox_out(x, 1) || ox_out(x, 2);
    if (!ox_int(x, "spatial"))
        return ox_fail(x, VQ_ENOSYS, "spatial 0 is not supported");
    if (ox_out(x, 3) || ox_out(x, 4))
        return ox_fail(x, VQ_ENOSYS, "its outputs saved_mean and saved_var are not supported");
    if (!training && (ox_out(x, 1) || ox_out(x, 2)))
        return ox_fail(x, VQ_EINVAL, "outputs running_mean and running_var need training_mode 1");
    if (training) {
        vq_attr a[2] = {VQ_ATTR_F("epsilon", eps), VQ_ATTR_F("momentum", momentum)};
        const char *o[3] = {out0(x), ox_out(x, 1), ox_out(x, 2)};
        return ox_emit(x, "batch_norm_train", in, 5, o, 3, a, 2, NULL);
    }
    vq_attr a = VQ_ATTR_F("epsilon", eps);
    const char *o = out0(x);
    return ox_emit(x, "batch_norm", in, 5, &o, 1, &a, 1, NULL);
}

/* LayerNormalization (opset 17): over the axes from axis to the last,
 * mean = mean(X), d = X - mean, inv = 1 / sqrt(mean(d * d) + epsilon),
 * Y = d * inv * Scale (+ B), in the stash type (float unless stash_type
 * says double; X is cast to it and Y back), with the optional outputs Mean
 * and InvStdDev of X's rank (1 on the normalized axes). Composed of varq
 * ops, so each has its gradient and its GPU kernel; the same ops as
 * ONNX's own function body for it. */
static int t_layer_norm(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *scale = ox_input(x, 1), *bias = ox_input(x, 2);
    struct ox_val *mean, *d, *sq, *var, *ve, *sd, *inv, *n, *y;
    int64_t stash = ox_int(x, "stash_type");
    double eps = ox_float(x, "epsilon");
    int rc;
    vq_dtype xt = v->meta.dtype, st;
    if (!is_float(xt))
        return ox_fail(x, VQ_EINVAL, "X is %s, not a floating-point tensor", vq_dtype_name(xt));
    if (!vq__onnx_dtype((int32_t)stash, &st) || !is_float(st))
        return ox_fail(x, VQ_ENOSYS, "stash_type %lld is not float or double", (long long)stash);
    int rank = v->meta.ndim, a0 = 0;
    if ((rc = axis_of(x, "axis", ox_int(x, "axis"), rank, &a0)) < 0)
        return rc;
    int64_t axes[VQ_MAX_DIMS];
    for (int i = a0; i < rank; i++)
        axes[i - a0] = i;
    vq_attr ra[2] = {VQ_ATTR_IS("axes", axes, rank - a0), VQ_ATTR_B("keepdim", true)};
    vq_attr ea[2] = {VQ_ATTR_F("scale", 1), VQ_ATTR_F("bias", eps)};
    const char *mean_name = ox_out(x, 1), *inv_name = ox_out(x, 2);
    const char *y_name = st == xt && !bias ? out0(x) : NULL;
    if ((rc = cast_to(x, &v, st)) < 0 || (rc = cast_to(x, &scale, st)) < 0 ||
        (bias && (rc = cast_to(x, &bias, st)) < 0))
        return rc;
    if ((rc = ox_emit(x, "mean", &v, 1, &mean_name, 1, ra, 2, &mean)) < 0 ||
        (rc = ox_emit(x, "sub", (struct ox_val *[]){v, mean}, 2, NULL, 1, NULL, 0, &d)) < 0 ||
        (rc = ox_emit(x, "mul", (struct ox_val *[]){d, d}, 2, NULL, 1, NULL, 0, &sq)) < 0 ||
        (rc = ox_emit(x, "mean", &sq, 1, NULL, 1, ra, 2, &var)) < 0 ||
        (rc = ox_emit(x, "scale", &var, 1, NULL, 1, ea, 2, &ve)) < 0 ||
        (rc = ox_emit(x, "sqrt", &ve, 1, NULL, 1, NULL, 0, &sd)) < 0 ||
        (rc = ox_emit(x, "reciprocal", &sd, 1, &inv_name, 1, NULL, 0, &inv)) < 0 ||
        (rc = ox_emit(x, "mul", (struct ox_val *[]){d, inv}, 2, NULL, 1, NULL, 0, &n)) < 0 ||
        (rc = ox_emit(x, "mul", (struct ox_val *[]){n, scale}, 2, &y_name, 1, NULL, 0, &y)) < 0)
        return rc;
    if (bias) {
        const char *name = st == xt ? out0(x) : NULL;
        if ((rc = ox_emit(x, "add", (struct ox_val *[]){y, bias}, 2, &name, 1, NULL, 0, &y)) < 0)
            return rc;
    }
    if (st == xt)
        return 0;
    vq_attr c = VQ_ATTR_S("dtype", vq_dtype_name(xt));
    const char *o = out0(x);
    return ox_emit(x, "cast", &y, 1, &o, 1, &c, 1, NULL);
}

/* ---- control flow: If onto cond, Loop onto while ---- */

/* The block of program var name, or -1. */
static int var_block(struct ox *x, const char *name)
{
    int v = vq__program_find_var(x->p, name);
    return v < 0 ? -1 : x->p->vars[v].block;
}

/* A var of the current block holding v under a new name: v's own var when
 * it is one of this block's and not one of avoid[] (navoid names), else a
 * copy (a reshape keeping every dim). */
static int own_var(struct ox *x, struct ox_val *v, const char *const *avoid, int navoid,
                   struct ox_val **out)
{
    int rc = ox_var_of(x, v);
    if (rc)
        return rc;
    bool ok = var_block(x, v->var) == x->block;
    for (int i = 0; ok && i < navoid; i++)
        ok = strcmp(v->var, avoid[i]) != 0;
    if (ok) {
        *out = v;
        return 0;
    }
    /* a copy into a new var of this block (added directly: ox_emit would
     * fold a known value instead of giving it a var) */
    int64_t keep[VQ_MAX_DIMS] = {0};
    vq_attr a = VQ_ATTR_IS("shape", keep, v->meta.ndim);
    const char *in = v->var;
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s@onnx%d", v->name, x->ntemps++);
    struct ox_val *c;
    if ((rc = ox_block_var(x, tmp, &v->meta, &c)) < 0)
        return rc;
    const char *o = c->var;
    rc = vq_program_add_op(x->p, x->block, "reshape", &in, 1, &o, 1, &a, 1);
    if (rc < 0)
        return ox_fail(x, rc, "%s", vq_errmsg());
    *out = c;
    return 0;
}

/* A meta that holds both a and b (dims that differ become -1). */
static int meta_join(struct ox *x, const vq__meta *a, const vq__meta *b, vq__meta *out, int j)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim)
        return ox_fail(x, VQ_EINVAL, "output %d: the branches give %s of rank %d and %s of rank "
                                     "%d",
                       j, vq_dtype_name(a->dtype), a->ndim, vq_dtype_name(b->dtype), b->ndim);
    *out = *a;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            out->shape[i] = -1;
    return 0;
}

static int t_if(struct ox *x)
{
    struct ox_val *c = ox_input(x, 0);
    const Onnx__NodeProto *n = x->node;
    const Onnx__GraphProto *g[2] = {ox_graph(x, "then_branch"), ox_graph(x, "else_branch")};
    int rc;
    if (!g[0] || !g[1])
        return ox_fail(x, VQ_EINVAL, "then_branch and else_branch must be graphs");
    int nout = (int)n->n_output;
    if (nout < 1 || nout > VQ__MAX_SLOTS || g[0]->n_output != n->n_output ||
        g[1]->n_output != n->n_output)
        return ox_fail(x, VQ_EINVAL, "%d outputs, branches with %zu and %zu (varq takes 1 to %d, "
                                     "the same in both)",
                       nout, g[0]->n_output, g[1]->n_output, VQ__MAX_SLOTS);
    if (c->meta.dtype != VQ_BOOL || vq__numel(c->meta.ndim, c->meta.shape) > 1)
        return ox_fail(x, VQ_EINVAL, "cond must be one bool");
    if (c->konst) {
        /* known now: the taken branch's nodes, in this block */
        int taken = *(unsigned char *)c->konst->data ? 0 : 1;
        if ((rc = ox_subgraph(x, g[taken], x->block)) < 0)
            return rc;
        for (int j = 0; j < nout && rc == 0; j++) {
            struct ox_val *v = ox_find(x, g[taken]->output[j]->name);
            rc = v ? (ox_out(x, j) ? ox_alias(x, ox_out(x, j), v) : 0)
                   : ox_fail(x, VQ_EINVAL, "branch output \"%s\" is produced by no node",
                             g[taken]->output[j]->name);
        }
        return rc;
    }
    if ((rc = ox_var_of(x, c)) < 0)
        return rc;
    int outer = x->block, blk[2];
    char **names[2] = {vq__calloc((size_t)nout, sizeof(char *)),
                       vq__calloc((size_t)nout, sizeof(char *))};
    vq__meta metas[2][VQ__MAX_SLOTS];
    if (!names[0] || !names[1])
        rc = vq__fail(VQ_ENOMEM, "onnx: out of memory");
    for (int b = 0; b < 2 && rc == 0; b++) {
        if ((rc = blk[b] = vq_program_add_block(x->p, outer)) < 0)
            break;
        rc = ox_subgraph(x, g[b], blk[b]);
        x->block = blk[b];
        for (int j = 0; j < nout && rc == 0; j++) {
            struct ox_val *v = ox_find(x, g[b]->output[j]->name), *own;
            if (!v) {
                rc = ox_fail(x, VQ_EINVAL, "branch output \"%s\" is produced by no node",
                             g[b]->output[j]->name);
                break;
            }
            if ((rc = own_var(x, v, NULL, 0, &own)) < 0)
                break;
            metas[b][j] = own->meta;
            if (!(names[b][j] = vq__strdup(own->var)))
                rc = vq__fail(VQ_ENOMEM, "onnx: out of memory");
        }
        x->block = outer;
    }
    const char *outs[VQ__MAX_SLOTS];
    char tmp[VQ__MAX_SLOTS][300];
    for (int j = 0; j < nout && rc == 0; j++) {
        vq__meta m;
        struct ox_val *o;
        if ((rc = meta_join(x, &metas[0][j], &metas[1][j], &m, j)) < 0)
            break;
        const char *name = ox_out(x, j);
        if (!name) {
            snprintf(tmp[j], sizeof tmp[j], "%s@onnx%d", n->name ? n->name : "if", x->ntemps++);
            name = tmp[j];
        }
        if ((rc = ox_block_var(x, name, &m, &o)) == 0)
            outs[j] = o->var;
    }
    if (rc == 0) {
        vq_attr a[4] = {VQ_ATTR_I("then_block", blk[0]), VQ_ATTR_I("else_block", blk[1]),
                        VQ_ATTR_SS("then_outputs", (const char *const *)names[0], nout),
                        VQ_ATTR_SS("else_outputs", (const char *const *)names[1], nout)};
        const char *in[2] = {c->var, c->var};
        rc = vq_program_add_op(x->p, outer, "cond", in, 2, outs, nout, a, 4);
        rc = rc < 0 ? ox_fail(x, rc, "%s", vq_errmsg()) : 0;
    }
    for (int b = 0; b < 2; b++) {
        for (int j = 0; names[b] && j < nout; j++)
            free(names[b][j]);
        free(names[b]);
    }
    return rc;
}

/* Whether body output 0 (cond_out) is body input 1 (cond_in), directly or
 * through Identity nodes. */
static bool cond_passes_through(const Onnx__GraphProto *g)
{
    const char *name = g->output[0]->name, *in = g->input[1]->name;
    for (size_t hops = 0; name && hops <= g->n_node; hops++) {
        if (in && !strcmp(name, in))
            return true;
        const char *from = NULL;
        for (size_t i = 0; i < g->n_node && !from; i++) {
            const Onnx__NodeProto *nd = g->node[i];
            if (nd->n_output >= 1 && nd->output[0] && !strcmp(nd->output[0], name))
                from = nd->op_type && !strcmp(nd->op_type, "Identity") && nd->n_input == 1
                           ? nd->input[0]
                           : "";
        }
        if (!from || !*from)
            return false;
        name = from;
    }
    return false;
}

/* The scan outputs: for each scan value v (body output 1 + nv + s), a var
 * of the body that holds it, none of the body inputs bin[0 .. nc) nor an
 * earlier scan output's (into stk[s]); the while stacks them
 * (stack_outputs). Each iteration's value with a new dim 0 in front, the
 * iterations (known when the loop runs exactly iters times, else -1), into
 * sm[s]. */
static int scan_vars(struct ox *x, const Onnx__GraphProto *g, int nv, int nscan, int64_t iters,
                     const char **bin, int nc, const char **stk, vq__meta *sm)
{
    const char *avoid[2 * VQ__MAX_SLOTS];
    memcpy(avoid, bin, (size_t)nc * sizeof *avoid);
    for (int s = 0; s < nscan; s++) {
        const char *nm = g->output[1 + nv + s]->name;
        struct ox_val *v = nm ? ox_find(x, nm) : NULL, *own;
        if (!v)
            return ox_fail(x, VQ_EINVAL, "body output \"%s\" is produced by no node", nm ? nm : "");
        if (v->meta.ndim + 1 > VQ_MAX_DIMS)
            return ox_fail(x, VQ_ENOSYS, "scan output %d has %d dims, more than %d", s,
                           v->meta.ndim + 1, VQ_MAX_DIMS);
        int rc = own_var(x, v, avoid, nc + s, &own);
        if (rc)
            return rc;
        stk[s] = avoid[nc + s] = own->var;
        sm[s] = v->meta;
        sm[s].ndim = v->meta.ndim + 1;
        sm[s].shape[0] = iters;
        memcpy(sm[s].shape + 1, v->meta.shape, (size_t)v->meta.ndim * sizeof(int64_t));
    }
    return 0;
}

/* What t_loop's steps fill in. */
struct loop {
    const Onnx__GraphProto *g; /* the body */
    struct ox_val *m, *cond;   /* the node's inputs M and cond, or NULL */
    int nv, nscan, nc;         /* carried values v..., scan outputs, nv + 2 */
    bool exact;                /* the loop runs exactly M times */
    int64_t max_iters;         /* M when known at import, else -1 */
    vq__meta im;               /* iter's meta (as the body declares it) */
    /* the carried values' initial values (iter, cond, v...) and the entry
     * predicate */
    struct ox_val *init[VQ__MAX_SLOTS], *entry;
    int body; /* the body's block */
    /* the body's vars: inputs, outputs, stacked scan values (of meta bm,
     * the iterations in front) and its predicate */
    const char *bin[VQ__MAX_SLOTS], *bout[VQ__MAX_SLOTS], *stk[VQ__MAX_SLOTS];
    vq__meta bm[VQ__MAX_SLOTS];
    struct ox_val *pred;
};

/* The counts the body and the node must agree on, and the trip count. */
static int loop_plan(struct ox *x, struct loop *l)
{
    const Onnx__NodeProto *n = x->node;
    const Onnx__GraphProto *g = l->g;
    if (!g)
        return ox_fail(x, VQ_EINVAL, "body must be a graph");
    int nv = l->nv = n->n_input >= 2 ? (int)n->n_input - 2 : 0;
    if (g->n_input != (size_t)nv + 2 || g->n_output < (size_t)nv + 1)
        return ox_fail(x, VQ_EINVAL, "the body has %zu inputs and %zu outputs for %d carried "
                                     "values",
                       g->n_input, g->n_output, nv);
    int nscan = l->nscan = (int)g->n_output - nv - 1;
    l->nc = nv + 2;
    if (n->n_output > (size_t)(nv + nscan))
        return ox_fail(x, VQ_EINVAL, "%zu outputs for %d carried values and %d scan outputs",
                       n->n_output, nv, nscan);
    if (nv + nscan + 2 > VQ__MAX_SLOTS - 1)
        return ox_fail(x, VQ_ENOSYS, "%d carried values and %d scan outputs, more than %d", nv,
                       nscan, VQ__MAX_SLOTS - 3);
    struct ox_val *m = l->m, *cond = l->cond;
    if (!m && !cond)
        return ox_fail(x, VQ_EINVAL, "neither M nor cond: the loop would never end");
    /* scan outputs with a static dim 0: a loop that runs exactly M times
     * (an offered M is used for that) */
    bool exact = nscan > 0 && m && cond_passes_through(g);
    if (exact && cond)
        exact = ox_known(x, cond) && cond->konst->numel == 1 && cond->konst->dtype == VQ_BOOL &&
                *(const uint8_t *)cond->konst->data;
    l->exact = exact && ox_known(x, m);
    l->max_iters = -1;
    if (m && m->konst) {
        if (m->konst->numel != 1 || m->konst->dtype != VQ_I64)
            return ox_fail(x, VQ_EINVAL, "M must be one int64");
        l->max_iters = *(int64_t *)m->konst->data;
        if (l->max_iters < 0)
            l->max_iters = 0;
    }
    return 0;
}

/* The carried values' initial values: iter (int64, as the body declares
 * it), cond, v...; and the entry predicate: cond, and 0 < M when M is
 * known only at run time. */
static int loop_inits(struct ox *x, struct loop *l)
{
    struct ox_val **init = l->init, *m = l->m;
    vq__meta cm = {.dtype = VQ_BOOL, .ndim = 0};
    l->im = (vq__meta){.dtype = VQ_I64, .ndim = 0};
    const Onnx__TypeProto *it = l->g->input[0]->type;
    if (it && it->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && it->tensor_type->shape &&
        it->tensor_type->shape->n_dim == 1) {
        l->im.ndim = cm.ndim = 1;
        l->im.shape[0] = cm.shape[0] = 1;
    }
    vq_tensor *t0, *t1;
    int64_t zero = 0;
    unsigned char yes = 1;
    int rc;
    if ((rc = vq_tensor_from(&t0, VQ_I64, l->im.ndim, l->im.shape, &zero)) < 0 ||
        (rc = ox_const(x, NULL, t0, &init[0])) < 0)
        return rc;
    if (l->cond) {
        init[1] = l->cond;
    } else if ((rc = vq_tensor_from(&t1, VQ_BOOL, cm.ndim, cm.shape, &yes)) < 0 ||
               (rc = ox_const(x, NULL, t1, &init[1])) < 0) {
        return rc;
    }
    if (init[1]->meta.dtype != VQ_BOOL)
        return ox_fail(x, VQ_EINVAL, "cond must be a bool");
    for (int k = 0; k < l->nv; k++)
        if (!(init[2 + k] = ox_input(x, 2 + k)))
            return ox_fail(x, VQ_EINVAL, "input %d is missing", 2 + k);
    l->entry = init[1];
    if (m && !m->konst) {
        struct ox_val *lt;
        if ((rc = ox_emit(x, "less", (struct ox_val *[]){init[0], m}, 2, NULL, 1, NULL, 0, &lt)) <
                0 ||
            (rc = ox_emit(x, "logical_and", (struct ox_val *[]){l->entry, lt}, 2, NULL, 1, NULL, 0,
                          &l->entry)) < 0)
            return rc;
    }
    for (int k = 0; k < l->nc; k++)
        if ((rc = ox_var_of(x, init[k])) < 0)
            return rc;
    return ox_var_of(x, l->entry);
}

/* The body's outputs, in its block: iter + 1, cond_out, v_out..., the
 * scan values, and the predicate (cond_out, and iter + 1 < M when M is
 * known only at run time), each in a var none of the body's inputs hold. */
static int loop_outputs(struct ox *x, struct loop *l)
{
    const Onnx__GraphProto *g = l->g;
    struct ox_val *iter_in = ox_find(x, l->bin[0]), *iter_out, *onev, *next, *own;
    vq_tensor *t;
    int64_t one = 1;
    int rc = vq_tensor_from(&t, VQ_I64, l->im.ndim, l->im.shape, &one);
    if (rc == 0)
        rc = ox_const(x, NULL, t, &onev);
    if (rc == 0)
        rc = ox_emit(x, "add", (struct ox_val *[]){iter_in, onev}, 2, NULL, 1, NULL, 0,
                     &iter_out);
    if (rc)
        return rc;
    l->bout[0] = iter_out->var;
    struct ox_val *cond_out = ox_find(x, g->output[0]->name);
    if (!cond_out)
        return ox_fail(x, VQ_EINVAL, "body output \"%s\" is produced by no node",
                       g->output[0]->name);
    next = cond_out;
    if (l->m && !l->m->konst) {
        struct ox_val *lt;
        if ((rc = ox_emit(x, "less", (struct ox_val *[]){iter_out, l->m}, 2, NULL, 1, NULL, 0,
                          &lt)) == 0)
            rc = ox_emit(x, "logical_and", (struct ox_val *[]){cond_out, lt}, 2, NULL, 1, NULL, 0,
                         &next);
    }
    if (rc == 0 && (rc = own_var(x, cond_out, l->bin, l->nc, &own)) == 0)
        l->bout[1] = own->var;
    for (int k = 0; k < l->nv && rc == 0; k++) {
        struct ox_val *v = ox_find(x, g->output[1 + k]->name);
        if (!v)
            rc = ox_fail(x, VQ_EINVAL, "body output \"%s\" is produced by no node",
                         g->output[1 + k]->name);
        else if ((rc = own_var(x, v, l->bin, l->nc, &own)) == 0)
            l->bout[2 + k] = own->var;
    }
    if (rc == 0)
        rc = scan_vars(x, g, l->nv, l->nscan, l->exact ? l->max_iters : -1, l->bin, l->nc, l->stk,
                       l->bm);
    return rc ? rc : own_var(x, next, l->bin, l->nc, &l->pred);
}

/* The body: a block of its own, with vars for its inputs, its nodes, its
 * outputs. */
static int loop_body(struct ox *x, struct loop *l)
{
    int outer = x->block, rc = 0;
    if ((l->body = vq_program_add_block(x->p, outer)) < 0)
        return l->body;
    x->block = l->body;
    for (int k = 0; k < l->nc && rc == 0; k++) {
        struct ox_val *v;
        const char *nm = l->g->input[k]->name;
        vq__meta meta = k == 0 ? l->im : l->init[k]->meta;
        if (!nm || !*nm)
            rc = ox_fail(x, VQ_EINVAL, "body input %d has no name", k);
        else if ((rc = ox_block_var(x, nm, &meta, &v)) == 0)
            l->bin[k] = v->var;
        if (rc == 0 && k == 0)
            v->sym = v; /* the iteration number: never negative */
    }
    x->block = outer;
    if (rc == 0)
        rc = ox_subgraph(x, l->g, l->body);
    if (rc)
        return rc;
    x->block = l->body;
    rc = loop_outputs(x, l);
    x->block = outer;
    return rc;
}

/* The while, its outputs: the final iter and cond (temporaries), v...,
 * the scan outputs. */
static int loop_emit(struct ox *x, struct loop *l)
{
    const Onnx__NodeProto *n = x->node;
    int nc = l->nc, nscan = l->nscan, rc = 0;
    const char *xin[VQ__MAX_SLOTS], *outs[VQ__MAX_SLOTS];
    xin[0] = l->entry->var;
    for (int k = 0; k < nc; k++)
        xin[1 + k] = l->init[k]->var;
    char tmp[VQ__MAX_SLOTS][300];
    for (int k = 0; k < nc + nscan && rc == 0; k++) {
        const char *name = k >= 2 ? ox_out(x, k - 2) : NULL;
        if (!name) {
            snprintf(tmp[k], sizeof tmp[k], "%s@onnx%d", n->name ? n->name : "loop",
                     x->ntemps++);
            name = tmp[k];
        }
        struct ox_val *o;
        vq__meta meta = k == 0 ? l->im : k >= nc ? l->bm[k - nc] : l->init[k]->meta;
        if ((rc = ox_block_var(x, name, &meta, &o)) == 0)
            outs[k] = o->var;
    }
    if (rc)
        return rc;
    vq_attr a[6] = {VQ_ATTR_I("body_block", l->body),
                    VQ_ATTR_SS("body_inputs", l->bin, nc),
                    VQ_ATTR_SS("body_outputs", l->bout, nc),
                    VQ_ATTR_S("body_cond", l->pred->var),
                    VQ_ATTR_I("max_iters", l->max_iters),
                    VQ_ATTR_SS("stack_outputs", l->stk, nscan)};
    rc =
        vq_program_add_op(x->p, x->block, "while", xin, nc + 1, outs, nc + nscan, a, nscan ? 6 : 5);
    return rc < 0 ? ox_fail(x, rc, "%s", vq_errmsg()) : 0;
}

/* Loop(M, cond, v...) with body (iter, cond_in, v_in...) -> (cond_out,
 * v_out..., scan...): a while carrying (iter, cond, v...), whose predicate
 * is the body's cond_out (and iter < M when M is known only at run time; a
 * known M is max_iters), and stacking the scan values of every iteration
 * (stack_outputs, joined once when the loop ends). A scan output's dim 0,
 * the iterations, is M when the loop runs exactly M iterations (M known at
 * import, cond absent or known true, and cond_out the body's cond_in
 * through Identity nodes), else known only at run time (-1). The steps
 * below fill a struct loop in turn: its plan, the carried values'
 * initial values, the body, the while. */
static int t_loop(struct ox *x)
{
    struct loop l = {.g = ox_graph(x, "body"), .m = ox_input(x, 0), .cond = ox_input(x, 1)};
    int rc;
    if ((rc = loop_plan(x, &l)) < 0 || (rc = loop_inits(x, &l)) < 0 || (rc = loop_body(x, &l)) < 0)
        return rc;
    return loop_emit(x, &l);
}

/* ---- products ---- */

/* MatMul, numpy's: a 1-D operand is a row (A) or a column (B) whose dim is
 * dropped from the result. */
static int t_matmul(struct ox *x)
{
    struct ox_val *a = ox_input(x, 0), *b = ox_input(x, 1), *prod;
    int rc;
    bool a1 = a->meta.ndim == 1, b1 = b->meta.ndim == 1;
    if (a1 && (rc = reshape_to(x, a, (int64_t[]){1, -1}, 2, NULL, &a)) < 0)
        return rc;
    if (b1 && (rc = reshape_to(x, b, (int64_t[]){-1, 1}, 2, NULL, &b)) < 0)
        return rc;
    if (a->meta.ndim == 2 && b->meta.ndim > 2)
        return ox_fail(x, VQ_ENOSYS, "a 2-D A with a batched B (rank %d) is not supported",
                       b->meta.ndim);
    const char *name = a1 || b1 ? NULL : out0(x);
    if ((rc = ox_emit(x, "matmul", (struct ox_val *[]){a, b}, 2, &name, 1, NULL, 0, &prod)) < 0)
        return rc;
    if (!a1 && !b1)
        return 0;
    /* drop the dims that were added: the result's rank minus one or two */
    int r = prod->meta.ndim, n = 0;
    int64_t want[VQ_MAX_DIMS];
    int from[VQ_MAX_DIMS];
    for (int i = 0; i < r; i++) {
        if ((a1 && i == r - 2) || (b1 && i == r - 1))
            continue;
        want[n] = prod->meta.shape[i];
        from[n++] = i;
    }
    return reshape_known(x, prod, want, from, n, out0(x), NULL);
}

/* Gemm: alpha op(A) op(B) + beta C. */
static int t_gemm(struct ox *x)
{
    struct ox_val *a = ox_input(x, 0), *b = ox_input(x, 1), *c = ox_input(x, 2), *prod;
    double beta = ox_float(x, "beta");
    int rc;
    if (a->meta.ndim != 2 || b->meta.ndim != 2)
        return ox_fail(x, VQ_EINVAL, "A and B must be matrices (ranks %d and %d)", a->meta.ndim,
                       b->meta.ndim);
    vq_attr at[3] = {VQ_ATTR_B("transpose_x", ox_int(x, "transA") != 0),
                     VQ_ATTR_B("transpose_y", ox_int(x, "transB") != 0),
                     VQ_ATTR_F("alpha", ox_float(x, "alpha"))};
    const char *name = c && beta != 0 ? NULL : out0(x);
    if ((rc = ox_emit(x, "matmul", (struct ox_val *[]){a, b}, 2, &name, 1, at, 3, &prod)) < 0)
        return rc;
    if (!c || beta == 0)
        return 0;
    if (beta != 1) {
        vq_attr s = VQ_ATTR_F("scale", beta);
        if ((rc = ox_emit(x, "scale", &c, 1, NULL, 1, &s, 1, &c)) < 0)
            return rc;
    }
    const char *o = out0(x);
    return ox_emit(x, "add", (struct ox_val *[]){prod, c}, 2, &o, 1, NULL, 0, NULL);
}

/* ---- softmax ---- */

/* Softmax and LogSoftmax (the row's varq op): since opset 13 along one
 * axis (default -1); before, over the dims from axis on (default 1),
 * which is the same when that is the last axis and otherwise goes through
 * a 2-D reshape. */
static int t_softmax(struct ox *x)
{
    const char *type = ox_type(x), *o = out0(x);
    struct ox_val *v = ox_input(x, 0);
    int r = v->meta.ndim, ax = 0;
    int rc = axis_of(x, "axis", ox_int(x, "axis"), r ? r : 1, &ax);
    if (rc)
        return rc;
    if (x->opset >= 13 || ax == r - 1 || r == 0) {
        vq_attr a = VQ_ATTR_I("axis", x->opset >= 13 ? ax : -1);
        return ox_emit(x, type, &v, 1, &o, 1, &a, 1, NULL);
    }
    int64_t lead = 1;
    for (int i = 0; i < ax; i++)
        lead = v->meta.shape[i] < 0 || lead < 0 ? -1 : lead * v->meta.shape[i];
    int64_t shape[2] = {lead, -1};
    if (lead < 0) {
        int64_t rest = 1;
        for (int i = ax; i < r; i++)
            rest = v->meta.shape[i] < 0 || rest < 0 ? -1 : rest * v->meta.shape[i];
        if (rest < 0)
            return ox_fail(x, VQ_ENOSYS, "opset-%lld Softmax over axis %d needs the dims "
                                         "before or from the axis known at import",
                           (long long)x->opset, ax);
        shape[0] = -1;
        shape[1] = rest;
    }
    struct ox_val *flat, *soft;
    vq_attr a = VQ_ATTR_I("axis", 1);
    if ((rc = reshape_to(x, v, shape, 2, NULL, &flat)) < 0 ||
        (rc = ox_emit(x, type, &flat, 1, NULL, 1, &a, 1, &soft)) < 0)
        return rc;
    /* back to X's shape */
    return ox_emit(x, "reshape_grad", (struct ox_val *[]){v, soft}, 2, &o, 1, NULL, 0, NULL);
}

/* ---- shapes ---- */

/* Trilu: X where a known mask of its last two dims holds, else 0; the
 * mask keeps column j of row i when j - i >= k (upper) or j - i <= k
 * (lower). Those two dims and k (an input, 0 when absent) must be known
 * at import. */
static int t_trilu(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *mask, *zero;
    int64_t upper = ox_int(x, "upper"), k = 0;
    int nk;
    int rc = ox_const_ints(x, 1, "k", &k, 1, &nk);
    if (rc)
        return rc;
    if (nk == 0)
        return ox_fail(x, VQ_EINVAL, "k has no element");
    if (nk < 0)
        k = 0;
    int r = v->meta.ndim;
    if (r < 2)
        return ox_fail(x, VQ_EINVAL, "the input has rank %d; Trilu needs at least 2", r);
    int64_t n = v->meta.shape[r - 2], m = v->meta.shape[r - 1];
    if (n < 0 || m < 0)
        return ox_fail(x, VQ_ENOSYS, "the last two dims are not known at import");
    vq_tensor *t;
    if ((rc = ox_tensor_new(x, &t, VQ_BOOL, 2, (int64_t[]){n, m})) < 0)
        return rc;
    unsigned char *b = vq_tensor_data(t);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) /* j - i is small; k may be any int64 */
            b[i * m + j] = upper ? j - i >= k : j - i <= k;
    if ((rc = ox_const(x, NULL, t, &mask)) < 0 || (rc = scalar(x, v->meta.dtype, 0, &zero)) < 0)
        return rc;
    return select3(x, mask, v, zero, out0(x), NULL);
}

/* Hardmax (opset 13): 1 where X has the first largest value along the
 * axis, 0 elsewhere: argmax (keeping the axis) against the positions
 * 0 .. dim-1 along it. Before opset 13 the axis coerced X to 2-D; that is
 * the same only for the last axis, the one varq takes there. */
static int t_hardmax(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *am, *pos, *hot;
    int r = v->meta.ndim, a = 0;
    int rc = axis_of(x, "axis", ox_int(x, "axis"), r, &a);
    if (rc)
        return rc;
    if (x->opset < 13 && a != r - 1)
        return ox_fail(x, VQ_ENOSYS, "opset-%lld Hardmax over axis %d, not the last",
                       (long long)x->opset, a);
    int64_t dim = v->meta.shape[a], shape[VQ_MAX_DIMS];
    if (dim < 0)
        return ox_fail(x, VQ_ENOSYS, "the dim of axis %d is not known at import", a);
    for (int i = 0; i < r; i++)
        shape[i] = i == a ? dim : 1;
    vq_tensor *t;
    if ((rc = ox_tensor_new(x, &t, VQ_I64, r, shape)) < 0)
        return rc;
    for (int64_t i = 0; i < dim; i++)
        ((int64_t *)vq_tensor_data(t))[i] = i;
    vq_attr aa[3] = {VQ_ATTR_I("axis", a), VQ_ATTR_B("keepdim", true),
                     VQ_ATTR_B("select_last_index", false)};
    vq_attr c = VQ_ATTR_S("dtype", vq_dtype_name(v->meta.dtype));
    const char *o = out0(x);
    if ((rc = ox_const(x, NULL, t, &pos)) < 0 ||
        (rc = ox_emit(x, "argmax", &v, 1, NULL, 1, aa, 3, &am)) < 0 ||
        (rc = ox_emit(x, "equal", (struct ox_val *[]){am, pos}, 2, NULL, 1, NULL, 0, &hot)) < 0)
        return rc;
    return ox_emit(x, "cast", &hot, 1, &o, 1, &c, 1, NULL);
}

/* GlobalMaxPool: the largest value over the spatial dims, kept as 1s. */
static int t_global_max_pool(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    if (v->meta.ndim < 3)
        return ox_fail(x, VQ_EINVAL, "input of rank %d (needs N, C and spatial dims)",
                       v->meta.ndim);
    int64_t axes[VQ_MAX_DIMS];
    for (int i = 2; i < v->meta.ndim; i++)
        axes[i - 2] = i;
    vq_attr a[2] = {VQ_ATTR_IS("axes", axes, v->meta.ndim - 2), VQ_ATTR_B("keepdim", true)};
    const char *o = out0(x);
    return ox_emit(x, "reduce_max", &v, 1, &o, 1, a, 2, NULL);
}

/* InstanceNormalization: per sample and channel over the spatial dims,
 * (X - mean) / sqrt(var + epsilon) * scale + B, scale and B per channel
 * (reshaped to [C, 1, ...] to broadcast). */
static int t_instance_norm(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *scale = ox_input(x, 1), *bias = ox_input(x, 2);
    struct ox_val *mean, *d, *sq, *var, *ve, *sd, *n, *y;
    double eps = ox_float(x, "epsilon");
    int rc, r = v->meta.ndim;
    if (r < 3)
        return ox_fail(x, VQ_EINVAL, "input of rank %d (needs N, C and spatial dims)", r);
    if (!is_float(v->meta.dtype))
        return ox_fail(x, VQ_EINVAL, "the input is %s, not a floating-point tensor",
                       vq_dtype_name(v->meta.dtype));
    int64_t axes[VQ_MAX_DIMS], cshape[VQ_MAX_DIMS];
    for (int i = 2; i < r; i++)
        axes[i - 2] = i;
    cshape[0] = -1;
    for (int i = 1; i < r - 1; i++)
        cshape[i] = 1;
    vq_attr ra[2] = {VQ_ATTR_IS("axes", axes, r - 2), VQ_ATTR_B("keepdim", true)};
    vq_attr ea[2] = {VQ_ATTR_F("scale", 1), VQ_ATTR_F("bias", eps)};
    const char *o = out0(x);
    if ((rc = reshape_to(x, scale, cshape, r - 1, NULL, &scale)) < 0 ||
        (rc = reshape_to(x, bias, cshape, r - 1, NULL, &bias)) < 0 ||
        (rc = ox_emit(x, "mean", &v, 1, NULL, 1, ra, 2, &mean)) < 0 ||
        (rc = ox_emit(x, "sub", (struct ox_val *[]){v, mean}, 2, NULL, 1, NULL, 0, &d)) < 0 ||
        (rc = ox_emit(x, "mul", (struct ox_val *[]){d, d}, 2, NULL, 1, NULL, 0, &sq)) < 0 ||
        (rc = ox_emit(x, "mean", &sq, 1, NULL, 1, ra, 2, &var)) < 0 ||
        (rc = ox_emit(x, "scale", &var, 1, NULL, 1, ea, 2, &ve)) < 0 ||
        (rc = ox_emit(x, "sqrt", &ve, 1, NULL, 1, NULL, 0, &sd)) < 0 ||
        (rc = ox_emit(x, "div", (struct ox_val *[]){d, sd}, 2, NULL, 1, NULL, 0, &n)) < 0 ||
        (rc = ox_emit(x, "mul", (struct ox_val *[]){n, scale}, 2, NULL, 1, NULL, 0, &y)) < 0)
        return rc;
    return ox_emit(x, "add", (struct ox_val *[]){y, bias}, 2, &o, 1, NULL, 0, NULL);
}

/* IsInf: X equal to +inf (detect_positive) or to -inf (detect_negative). */
static int t_isinf(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *pinf, *ninf, *p = NULL, *m = NULL;
    int64_t pos = ox_int(x, "detect_positive"), neg = ox_int(x, "detect_negative");
    int rc;
    if (!is_float(v->meta.dtype))
        return ox_fail(x, VQ_EINVAL, "the input is %s, not a floating-point tensor",
                       vq_dtype_name(v->meta.dtype));
    const char *o = out0(x);
    const char *po = pos && !neg ? o : NULL, *mo = neg && !pos ? o : NULL;
    if (!pos && !neg) /* nothing detected: all false (X < X is, NaN too) */
        return ox_emit(x, "less", (struct ox_val *[]){v, v}, 2, &o, 1, NULL, 0, NULL);
    if (pos &&
        ((rc = scalar(x, v->meta.dtype, INFINITY, &pinf)) < 0 ||
         (rc = ox_emit(x, "equal", (struct ox_val *[]){v, pinf}, 2, &po, 1, NULL, 0, &p)) < 0))
        return rc;
    if (neg &&
        ((rc = scalar(x, v->meta.dtype, -INFINITY, &ninf)) < 0 ||
         (rc = ox_emit(x, "equal", (struct ox_val *[]){v, ninf}, 2, &mo, 1, NULL, 0, &m)) < 0))
        return rc;
    if (pos && neg)
        return ox_emit(x, "logical_or", (struct ox_val *[]){p, m}, 2, &o, 1, NULL, 0, NULL);
    return 0;
}

/* Shrink: X < -lambd ? X + bias : X > lambd ? X - bias : 0. */
static int t_shrink(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *lo, *hi, *zero, *lov, *hiv, *up, *down, *mid;
    double lambd = ox_float(x, "lambd"), bias = ox_float(x, "bias");
    int rc;
    vq_dtype dt = v->meta.dtype;
    struct ox_val *vf = v;
    if ((rc = cast_to(x, &vf, is_float(dt) ? dt : VQ_F64)) < 0 ||
        (rc = scalar(x, vf->meta.dtype, -lambd, &lov)) < 0 ||
        (rc = scalar(x, vf->meta.dtype, lambd, &hiv)) < 0 ||
        (rc = scalar(x, vf->meta.dtype, 0, &zero)) < 0 ||
        (rc = ox_emit(x, "less", (struct ox_val *[]){vf, lov}, 2, NULL, 1, NULL, 0, &lo)) < 0 ||
        (rc = ox_emit(x, "greater", (struct ox_val *[]){vf, hiv}, 2, NULL, 1, NULL, 0, &hi)) < 0 ||
        (rc = affine(x, vf, 1, bias, &up)) < 0 || (rc = affine(x, vf, 1, -bias, &down)) < 0 ||
        (rc = select3(x, hi, down, zero, NULL, &mid)) < 0)
        return rc;
    if (is_float(dt))
        return select3(x, lo, up, mid, out0(x), NULL);
    struct ox_val *r;
    vq_attr c = VQ_ATTR_S("dtype", vq_dtype_name(dt));
    const char *o = out0(x);
    if ((rc = select3(x, lo, up, mid, NULL, &r)) < 0)
        return rc;
    return ox_emit(x, "cast", &r, 1, &o, 1, &c, 1, NULL);
}

/* EyeLike: a known matrix of the input's 2-D shape, ones on diagonal k,
 * of dtype (the input's by default). */
static int t_eye_like(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t k = ox_int(x, "k"), dtype = ox_given(x, "dtype") ? ox_int(x, "dtype") : -1;
    int rc;
    vq_dtype dt = v->meta.dtype;
    if (dtype >= 0 && !vq__onnx_dtype((int32_t)dtype, &dt))
        return ox_fail(x, VQ_ENOSYS, "dtype %lld is not one of varq's", (long long)dtype);
    if (v->meta.ndim != 2)
        return ox_fail(x, VQ_EINVAL, "the input has rank %d, not 2", v->meta.ndim);
    int64_t n = v->meta.shape[0], m = v->meta.shape[1];
    if (n < 0 || m < 0)
        return ox_fail(x, VQ_ENOSYS, "the input's shape is not known at import");
    vq_tensor *t;
    if ((rc = ox_tensor_new(x, &t, dt, 2, (int64_t[]){n, m})) < 0)
        return rc;
    memset(vq_tensor_data(t), 0, (size_t)(n * m) * vq_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) {
        int64_t j; /* k is the model's: any int64 */
        if (__builtin_add_overflow(i, k, &j) || j < 0 || j >= m)
            continue;
        char *at = (char *)vq_tensor_data(t) + (size_t)(i * m + j) * vq_dtype_size(dt);
        switch (dt) {
        case VQ_F32: *(float *)at = 1; break;
        case VQ_F64: *(double *)at = 1; break;
        case VQ_I32: *(int32_t *)at = 1; break;
        case VQ_I64: *(int64_t *)at = 1; break;
        case VQ_BOOL: *(unsigned char *)at = 1; break;
        }
    }
    return ox_const(x, out0(x), t, NULL);
}

/* OneHot: values[1] where the position along the new axis equals the
 * index (negative ones count from depth), values[0] elsewhere; depth must
 * be known at import. */
static int t_one_hot(struct ox *x)
{
    struct ox_val *idx, *vals, *pos, *i64, *neg, *wrapped, *iu, *hot, *on, *off, *dv;
    int64_t depth;
    int rc;
    struct ox_val *dval = ox_input(x, 1);
    idx = ox_input(x, 0);
    vals = ox_input(x, 2);
    if (!dval || !ox_known(x, dval) || dval->konst->numel != 1)
        return ox_fail(x, VQ_ENOSYS, "depth is not one value known at import");
    /* the positions 0 .. depth-1 are made here: a bounded count, and a
     * double checked before it becomes an integer (NaN or 1e30 would not
     * convert) */
    double dd = first_value(dval->konst);
    if (!(dd >= 1 && dd <= (double)(1 << 30)))
        return ox_fail(x, VQ_EINVAL, "depth %g is not in [1, 2^30]", dd);
    depth = (int64_t)dd;
    if (vals->meta.ndim != 1 || vals->meta.shape[0] != 2)
        return ox_fail(x, VQ_EINVAL, "values is not a 2-element vector");
    int r = idx->meta.ndim + 1, a = 0;
    if ((rc = axis_of(x, "axis", ox_int(x, "axis"), r, &a)) < 0)
        return rc;
    int64_t pshape[VQ_MAX_DIMS], want[VQ_MAX_DIMS];
    int from[VQ_MAX_DIMS];
    for (int i = 0, j = 0; i < r; i++) {
        pshape[i] = i == a ? depth : 1;
        want[i] = i == a ? 1 : idx->meta.shape[j];
        from[i] = i == a ? -1 : j++;
    }
    vq_tensor *t;
    if ((rc = ox_tensor_new(x, &t, VQ_I64, r, pshape)) < 0)
        return rc;
    for (int64_t i = 0; i < depth; i++)
        ((int64_t *)vq_tensor_data(t))[i] = i;
    struct ox_val *zero;
    vq_attr g = VQ_ATTR_I("axis", 0);
    const char *o = out0(x);
    i64 = idx;
    if ((rc = ox_const(x, NULL, t, &pos)) < 0 || (rc = cast_to(x, &i64, VQ_I64)) < 0 ||
        (rc = scalar(x, VQ_I64, 0, &zero)) < 0 ||
        (rc = scalar(x, VQ_I64, (double)depth, &dv)) < 0 ||
        (rc = ox_emit(x, "less", (struct ox_val *[]){i64, zero}, 2, NULL, 1, NULL, 0, &neg)) < 0 ||
        (rc = ox_emit(x, "add", (struct ox_val *[]){i64, dv}, 2, NULL, 1, NULL, 0, &wrapped)) < 0 ||
        (rc = select3(x, neg, wrapped, i64, NULL, &i64)) < 0 ||
        (rc = reshape_known(x, i64, want, from, r, NULL, &iu)) < 0 ||
        (rc = ox_emit(x, "equal", (struct ox_val *[]){iu, pos}, 2, NULL, 1, NULL, 0, &hot)) < 0)
        return rc;
    struct ox_val *k0, *k1;
    if ((rc = scalar(x, VQ_I64, 0, &k0)) < 0 || (rc = scalar(x, VQ_I64, 1, &k1)) < 0 ||
        (rc = ox_emit(x, "gather", (struct ox_val *[]){vals, k0}, 2, NULL, 1, &g, 1, &off)) < 0 ||
        (rc = ox_emit(x, "gather", (struct ox_val *[]){vals, k1}, 2, NULL, 1, &g, 1, &on)) < 0)
        return rc;
    return select3(x, hot, on, off, o, NULL);
}

/* DepthToSpace and SpaceToDepth: a reshape, a transpose and a reshape,
 * with N, C, H, W known at import (blocksize b; DCR or CRD mode, which
 * SpaceToDepth does not have: DCR). The row's type says which: "to_space"
 * or "to_depth". */
static int t_space_depth(struct ox *x)
{
    bool to_space = !strcmp(ox_type(x), "to_space");
    struct ox_val *v = ox_input(x, 0), *a, *t;
    int64_t b = ox_int(x, "blocksize");
    const char *mode = to_space ? ox_str(x, "mode") : "DCR";
    int rc;
    if (v->meta.ndim != 4)
        return ox_fail(x, VQ_EINVAL, "the input has rank %d, not 4", v->meta.ndim);
    int64_t n = v->meta.shape[0], c = v->meta.shape[1], h = v->meta.shape[2], w = v->meta.shape[3];
    if (n < 0 || c < 0 || h < 0 || w < 0)
        return ox_fail(x, VQ_ENOSYS, "the input's shape is not known at import");
    /* a bound that keeps b * b and the dims times b within int64 */
    if (b <= 0 || b > (1 << 20))
        return ox_fail(x, VQ_EINVAL, "blocksize %lld is not in [1, 2^20]", (long long)b);
    int64_t hb, wb, cbb;
    if (__builtin_mul_overflow(h, b, &hb) || __builtin_mul_overflow(w, b, &wb) ||
        __builtin_mul_overflow(c, b * b, &cbb))
        return ox_fail(x, VQ_EINVAL, "blocksize %lld times the input's dims overflows",
                       (long long)b);
    bool crd = !strcmp(mode, "CRD");
    if (!crd && strcmp(mode, "DCR"))
        return ox_fail(x, VQ_EINVAL, "mode \"%s\" is not DCR or CRD", mode);
    int64_t s6[6], perm[6], out[4];
    if (to_space) {
        if (c % (b * b))
            return ox_fail(x, VQ_EINVAL, "%lld channels are not a multiple of %lld", (long long)c,
                           (long long)(b * b));
        int64_t cc = c / (b * b);
        if (crd) {
            memcpy(s6, (int64_t[]){n, cc, b, b, h, w}, sizeof s6);
            memcpy(perm, (int64_t[]){0, 1, 4, 2, 5, 3}, sizeof perm);
        } else {
            memcpy(s6, (int64_t[]){n, b, b, cc, h, w}, sizeof s6);
            memcpy(perm, (int64_t[]){0, 3, 4, 1, 5, 2}, sizeof perm);
        }
        memcpy(out, (int64_t[]){n, cc, hb, wb}, sizeof out);
    } else {
        if (h % b || w % b)
            return ox_fail(x, VQ_EINVAL, "%lld x %lld is not a multiple of the blocksize %lld",
                           (long long)h, (long long)w, (long long)b);
        memcpy(s6, (int64_t[]){n, c, h / b, b, w / b, b}, sizeof s6);
        memcpy(perm, (int64_t[]){0, 3, 5, 1, 2, 4}, sizeof perm);
        memcpy(out, (int64_t[]){n, cbb, h / b, w / b}, sizeof out);
    }
    vq_attr pa = VQ_ATTR_IS("perm", perm, 6);
    if ((rc = reshape_to(x, v, s6, 6, NULL, &a)) < 0 ||
        (rc = ox_emit(x, "transpose", &a, 1, NULL, 1, &pa, 1, &t)) < 0)
        return rc;
    return reshape_to(x, t, out, 4, out0(x), NULL);
}

/* ---- losses: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss ----
 *
 * Composed of varq ops, so each part has its gradient and GPU kernel:
 * the class picked by each target is a one-hot mask, equal(target with a
 * class axis of 1, the classes 0 .. C-1 along axis 1), multiplied into
 * the input and summed over the class axis (the other classes add zeros;
 * a target equal to an ignore_index outside [0, C) picks nothing). The
 * weight of each element is the class weight at its target (a gather of
 * the weights at the target, ignored targets replaced by class 0 first)
 * times 0 where the target is ignore_index; the loss is minus the picked
 * value times that weight, then reduced: none, sum, or mean (the sum over
 * the sum of the weights, as ONNX defines it; over the count of elements
 * when no weight or ignore_index is given). */
static int nll_loss(struct ox *x, struct ox_val *in, struct ox_val *target, struct ox_val *weight,
                    const char *out_name)
{
    const char *reduction = ox_str(x, "reduction");
    int64_t ii = ox_int(x, "ignore_index");
    bool has_ii = ox_given(x, "ignore_index");
    int rc;
    bool none = !strcmp(reduction, "none"), sum = !strcmp(reduction, "sum");
    if (!none && !sum && strcmp(reduction, "mean"))
        return ox_fail(x, VQ_EINVAL, "reduction \"%s\" is not none, sum or mean", reduction);
    vq_dtype dt = in->meta.dtype;
    int r = in->meta.ndim;
    if (!is_float(dt))
        return ox_fail(x, VQ_EINVAL, "the input is %s, not a floating-point tensor",
                       vq_dtype_name(dt));
    if (target->meta.dtype != VQ_I32 && target->meta.dtype != VQ_I64)
        return ox_fail(x, VQ_EINVAL, "the target is %s, not int32 or int64",
                       vq_dtype_name(target->meta.dtype));
    if (r < 2 || target->meta.ndim != r - 1)
        return ox_fail(x, VQ_EINVAL,
                       "the input has rank %d and the target %d: want [N, C, ...] "
                       "and [N, ...]",
                       r, target->meta.ndim);
    int64_t c = in->meta.shape[1];
    if (c <= 0)
        return ox_fail(x, VQ_ENOSYS,
                       "the number of classes (the input's dim 1) is not known "
                       "at import");
    /* the classes along axis 1 of a tensor of the input's rank */
    int64_t cshape[VQ_MAX_DIMS];
    for (int i = 0; i < r; i++)
        cshape[i] = i == 1 ? c : 1;
    vq_tensor *ct;
    if ((rc = ox_tensor_new(x, &ct, VQ_I64, r, cshape)) < 0)
        return rc;
    for (int64_t k = 0; k < c; k++)
        ((int64_t *)vq_tensor_data(ct))[k] = k;
    struct ox_val *cls, *t64 = target, *tu, *hot, *hotf, *prod, *picked, *w = NULL, *mask = NULL;
    int64_t want[VQ_MAX_DIMS];
    int from[VQ_MAX_DIMS];
    for (int i = 0, j = 0; i < r; i++) {
        want[i] = i == 1 ? 1 : target->meta.shape[j];
        from[i] = i == 1 ? -1 : j++;
    }
    int64_t axis1 = 1;
    vq_attr sum1[2] = {VQ_ATTR_IS("axes", &axis1, 1), VQ_ATTR_B("keepdim", false)};
    vq_attr to_dt = VQ_ATTR_S("dtype", vq_dtype_name(dt));
    if ((rc = ox_const(x, NULL, ct, &cls)) < 0 || (rc = cast_to(x, &t64, VQ_I64)) < 0 ||
        (rc = reshape_known(x, t64, want, from, r, NULL, &tu)) < 0 ||
        (rc = ox_emit(x, "equal", (struct ox_val *[]){tu, cls}, 2, NULL, 1, NULL, 0, &hot)) < 0 ||
        (rc = ox_emit(x, "cast", &hot, 1, NULL, 1, &to_dt, 1, &hotf)) < 0 ||
        (rc = ox_emit(x, "mul", (struct ox_val *[]){in, hotf}, 2, NULL, 1, NULL, 0, &prod)) < 0 ||
        (rc = ox_emit(x, "sum", &prod, 1, NULL, 1, sum1, 2, &picked)) < 0)
        return rc;
    if (has_ii) {
        struct ox_val *iiv, *keep;
        if ((rc = scalar(x, VQ_I64, (double)ii, &iiv)) < 0 ||
            (rc = ox_emit(x, "not_equal", (struct ox_val *[]){t64, iiv}, 2, NULL, 1, NULL, 0,
                          &keep)) < 0 ||
            (rc = ox_emit(x, "cast", &keep, 1, NULL, 1, &to_dt, 1, &mask)) < 0)
            return rc;
        if (weight) {
            struct ox_val *zero;
            if ((rc = scalar(x, VQ_I64, 0, &zero)) < 0 ||
                (rc = select3(x, keep, t64, zero, NULL, &t64)) < 0)
                return rc;
        }
    }
    if (weight) {
        vq_attr g = VQ_ATTR_I("axis", 0);
        if ((rc = cast_to(x, &weight, dt)) < 0 ||
            (rc = ox_emit(x, "gather", (struct ox_val *[]){weight, t64}, 2, NULL, 1, &g, 1, &w)) <
                0)
            return rc;
        if (mask &&
            (rc = ox_emit(x, "mul", (struct ox_val *[]){w, mask}, 2, NULL, 1, NULL, 0, &w)) < 0)
            return rc;
    } else {
        w = mask;
    }
    struct ox_val *loss, *wl = picked;
    if (w && (rc = ox_emit(x, "mul", (struct ox_val *[]){picked, w}, 2, NULL, 1, NULL, 0, &wl)) < 0)
        return rc;
    vq_attr neg[2] = {VQ_ATTR_F("scale", -1), VQ_ATTR_F("bias", 0)};
    vq_attr all[2] = {VQ_ATTR_IS("axes", NULL, 0), VQ_ATTR_B("keepdim", false)};
    if (none)
        return ox_emit(x, "scale", &wl, 1, &out_name, 1, neg, 2, NULL);
    if ((rc = ox_emit(x, "scale", &wl, 1, NULL, 1, neg, 2, &loss)) < 0)
        return rc;
    if (sum || !w)
        return ox_emit(x, sum ? "sum" : "mean", &loss, 1, &out_name, 1, all, 2, NULL);
    struct ox_val *num, *den;
    if ((rc = ox_emit(x, "sum", &loss, 1, NULL, 1, all, 2, &num)) < 0 ||
        (rc = ox_emit(x, "sum", &w, 1, NULL, 1, all, 2, &den)) < 0)
        return rc;
    return ox_emit(x, "div", (struct ox_val *[]){num, den}, 2, &out_name, 1, NULL, 0, NULL);
}

static int t_nll_loss(struct ox *x)
{
    return nll_loss(x, ox_input(x, 0), ox_input(x, 1), ox_input(x, 2), out0(x));
}

/* SoftmaxCrossEntropyLoss: the loss above of log_softmax over axis 1,
 * which is the optional second output log_prob. */
static int t_sce_loss(struct ox *x)
{
    struct ox_val *scores = ox_input(x, 0), *lp;
    if (scores->meta.ndim < 2)
        return ox_fail(x, VQ_EINVAL, "the scores have rank %d: want [N, C, ...]",
                       scores->meta.ndim);
    vq_attr a = VQ_ATTR_I("axis", 1);
    const char *lp_name = ox_out(x, 1);
    int rc = ox_emit(x, "log_softmax", &scores, 1, &lp_name, 1, &a, 1, &lp);
    return rc ? rc : nll_loss(x, lp, ox_input(x, 1), ox_input(x, 2), out0(x));
}

static int t_identity(struct ox *x)
{
    return ox_alias(x, out0(x), ox_input(x, 0));
}

/* Dropout at inference: the identity, and a mask of all true. */
static int t_dropout(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *training = x->opset >= 12 ? ox_input(x, 2) : NULL;
    int rc = 0;
    if (training) {
        if (!ox_known(x, training) || training->konst->dtype != VQ_BOOL)
            return ox_fail(x, VQ_ENOSYS, "training_mode must be known when the model is "
                                         "imported (a bool constant)");
        if (*(unsigned char *)training->konst->data)
            return ox_fail(x, VQ_ENOSYS, "training_mode is true: varq imports Dropout for "
                                         "inference only");
    }
    if (ox_out(x, 1)) {
        /* not(bool(zeros_like(X))) */
        struct ox_val *z, *b;
        vq_attr a = VQ_ATTR_S("dtype", "bool");
        const char *mask = ox_out(x, 1);
        if ((rc = ox_emit(x, "zeros_like", &v, 1, NULL, 1, NULL, 0, &z)) == 0 &&
            (rc = ox_emit(x, "cast", &z, 1, NULL, 1, &a, 1, &b)) == 0)
            rc = ox_emit(x, "logical_not", &b, 1, &mask, 1, NULL, 0, NULL);
    }
    return rc ? rc : ox_alias(x, out0(x), v);
}

static int t_reshape(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t shape[MAXI], allowzero = ox_int(x, "allowzero");
    int n, rc = 0;
    if (x->opset < 5)
        ints_of(x, "shape", shape, &n);
    else
        rc = ox_const_ints(x, 1, "shape", shape, MAXI, &n);
    if (rc)
        return rc;
    if (n < 0)
        return ox_fail(x, VQ_EINVAL, "no shape");
    if (n > VQ_MAX_DIMS)
        return ox_fail(x, VQ_ENOSYS, "rank %d is more than varq's %d", n, VQ_MAX_DIMS);
    bool zero = false;
    for (int i = 0; allowzero && i < n; i++)
        zero |= shape[i] == 0;
    if (!zero)
        return reshape_to(x, v, shape, n, out0(x), NULL);
    /* allowzero with a 0 in the shape: an empty dim, not a copied one */
    const char *name = out0(x);
    vq_attr a[2] = {VQ_ATTR_IS("shape", shape, n), VQ_ATTR_I("allowzero", 1)};
    return ox_emit(x, "reshape", &v, 1, &name, 1, a, 2, NULL);
}

static int t_flatten(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t axis = ox_int(x, "axis");
    int r = v->meta.ndim, ax = 0;
    if (axis < -r || axis > r)
        return ox_fail(x, VQ_EINVAL, "axis %lld is out of range for rank %d", (long long)axis, r);
    ax = (int)(axis < 0 ? axis + r : axis);
    int64_t lead = 1, rest = 1;
    for (int i = 0; i < r; i++) {
        int64_t *p = i < ax ? &lead : &rest;
        *p = v->meta.shape[i] < 0 || *p < 0 ? -1 : *p * v->meta.shape[i];
    }
    int64_t shape[2] = {lead, -1};
    if (lead < 0 && rest >= 0) {
        shape[0] = -1;
        shape[1] = rest;
    } else if (lead < 0 && ax == 1) {
        shape[0] = 0; /* the batch dim, copied */
    } else if (lead < 0) {
        return ox_fail(x, VQ_ENOSYS, "dims known only at run time on both sides of axis %d",
                       ax);
    }
    return reshape_to(x, v, shape, 2, out0(x), NULL);
}

static int t_transpose(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t perm[MAXI];
    int n;
    ints_of(x, "perm", perm, &n);
    if (n < 0) {
        n = v->meta.ndim;
        for (int i = 0; i < n; i++)
            perm[i] = n - 1 - i;
    }
    vq_attr a = VQ_ATTR_IS("perm", perm, n);
    const char *o = out0(x);
    return ox_emit(x, "transpose", &v, 1, &o, 1, &a, 1, NULL);
}

static int t_concat(struct ox *x)
{
    const Onnx__NodeProto *n = x->node;
    struct ox_val *in[VQ__MAX_SLOTS];
    if (n->n_input > VQ__MAX_SLOTS)
        return ox_fail(x, VQ_ENOSYS, "%zu inputs (varq takes 1 to %d)", n->n_input, VQ__MAX_SLOTS);
    for (size_t i = 0; i < n->n_input; i++)
        if (!(in[i] = ox_input(x, (int)i)))
            return ox_fail(x, VQ_EINVAL, "input %zu is missing", i);
    int ax = 0;
    int rc = axis_of(x, "axis", ox_int(x, "axis"), in[0]->meta.ndim, &ax);
    if (rc)
        return rc;
    vq_attr a = VQ_ATTR_I("axis", ax);
    const char *o = out0(x);
    return ox_emit(x, "concat", in, (int)n->n_input, &o, 1, &a, 1, NULL);
}

/* The axes of Squeeze / Unsqueeze / reductions: an attribute before
 * opset since (13, or 18 for the reductions but ReduceSum), input 1
 * since. */
static int axes_of(struct ox *x, int since, int64_t *axes, int *n)
{
    if (x->opset < since) {
        ints_of(x, "axes", axes, n);
        return 0;
    }
    return ox_const_ints(x, 1, "axes", axes, MAXI, n);
}

static int t_squeeze(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t axes[MAXI];
    int n;
    int rc = axes_of(x, 13, axes, &n);
    if (rc)
        return rc;
    int r = v->meta.ndim;
    bool drop[VQ_MAX_DIMS] = {0};
    if (n < 0) {
        for (int i = 0; i < r; i++) {
            if (v->meta.shape[i] < 0)
                return ox_fail(x, VQ_ENOSYS, "no axes, and dim %d is known only at run time", i);
            drop[i] = v->meta.shape[i] == 1;
        }
    }
    for (int k = 0; k < n; k++) {
        int a = 0;
        if ((rc = axis_of(x, "axis", axes[k], r, &a)) < 0)
            return rc;
        if (v->meta.shape[a] > 1)
            return ox_fail(x, VQ_EINVAL, "axis %d has size %lld, not 1", a,
                           (long long)v->meta.shape[a]);
        drop[a] = true;
    }
    int64_t want[VQ_MAX_DIMS];
    int from[VQ_MAX_DIMS], m = 0;
    for (int i = 0; i < r; i++)
        if (!drop[i]) {
            want[m] = v->meta.shape[i];
            from[m++] = i;
        }
    return reshape_known(x, v, want, from, m, out0(x), NULL);
}

static int t_unsqueeze(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t axes[MAXI];
    int n;
    int rc = axes_of(x, 13, axes, &n);
    if (rc)
        return rc;
    if (n < 0)
        return ox_fail(x, VQ_EINVAL, "no axes");
    int r = v->meta.ndim + n;
    if (r > VQ_MAX_DIMS)
        return ox_fail(x, VQ_ENOSYS, "rank %d is more than varq's %d", r, VQ_MAX_DIMS);
    bool add[VQ_MAX_DIMS] = {0};
    for (int k = 0; k < n; k++) {
        int a = 0;
        if ((rc = axis_of(x, "axis", axes[k], r, &a)) < 0)
            return rc;
        if (add[a])
            return ox_fail(x, VQ_EINVAL, "axis %d is given twice", a);
        add[a] = true;
    }
    int64_t want[VQ_MAX_DIMS];
    int from[VQ_MAX_DIMS];
    for (int i = 0, j = 0; i < r; i++) {
        if (add[i]) {
            want[i] = 1;
            from[i] = -1;
        } else {
            want[i] = v->meta.shape[j];
            from[i] = j++;
        }
    }
    struct ox_val *res;
    if ((rc = reshape_known(x, v, want, from, r, out0(x), &res)) == 0 && !res->konst) {
        res->sym = v->sym; /* one element stays one element */
        res->sym_off = v->sym_off;
    }
    return rc;
}

/* Slice(X, starts, ends[, axes[, steps]]) of one axis whose starts and
 * ends are known only at run time but move together (ox_val.sym): ends =
 * starts + len with len known, and starts never negative (a Loop's
 * iteration number plus a known offset of at least 0), step 1. Then the
 * result has len elements along the axis at any iteration: a gather of
 * indices starts + [0, len). (Where ONNX would clamp a window that runs
 * past the dim, giving fewer, the gather fails at run time naming the
 * index: varq's shapes are static.) *done is false when this is not such
 * a Slice. */
static int slice_moving(struct ox *x, struct ox_val *v, bool *done)
{
    struct ox_val *s = ox_input(x, 1), *e = ox_input(x, 2), *a = ox_input(x, 3);
    struct ox_val *st = ox_input(x, 4);
    *done = false;
    if (!s || !e || !s->sym || s->sym != e->sym || ox_known(x, s) || ox_known(x, e))
        return 0;
    int rc;
    int64_t axis = 0, step = 1, len = e->sym_off - s->sym_off;
    if ((a && !known_int1(a, &axis)) || (st && !known_int1(st, &step)) || step != 1 ||
        s->sym_off < 0 || len < 0)
        return 0;
    if (axis < 0)
        axis += v->meta.ndim;
    if (axis < 0 || axis >= v->meta.ndim)
        return ox_fail(x, VQ_EINVAL, "axis %lld of a rank-%d input", (long long)axis, v->meta.ndim);
    vq_tensor *t;
    if ((rc = ox_tensor_new(x, &t, s->meta.dtype, 1, &len)) < 0)
        return rc;
    for (int64_t j = 0; j < len; j++) {
        if (t->dtype == VQ_I64)
            ((int64_t *)t->data)[j] = j;
        else
            ((int32_t *)t->data)[j] = (int32_t)j;
    }
    struct ox_val *ar, *idx;
    const char *o = out0(x);
    vq_attr at = VQ_ATTR_I("axis", axis);
    if ((rc = ox_const(x, NULL, t, &ar)) < 0 ||
        (rc = ox_emit(x, "add", (struct ox_val *[]){s, ar}, 2, NULL, 1, NULL, 0, &idx)) < 0 ||
        (rc = ox_emit(x, "gather", (struct ox_val *[]){v, idx}, 2, &o, 1, &at, 1, NULL)) < 0)
        return rc;
    *done = true;
    return 0;
}

static int t_slice(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t starts[MAXI], ends[MAXI], axes[MAXI], steps[MAXI];
    int ns, ne, na, nst = -1, rc = 0;
    if (x->opset < 10) {
        ints_of(x, "starts", starts, &ns);
        ints_of(x, "ends", ends, &ne);
        ints_of(x, "axes", axes, &na);
    } else {
        bool done;
        if ((rc = slice_moving(x, v, &done)) < 0 || done)
            return rc;
        if ((rc = ox_const_ints(x, 1, "starts", starts, MAXI, &ns)) == 0 &&
            (rc = ox_const_ints(x, 2, "ends", ends, MAXI, &ne)) == 0 &&
            (rc = ox_const_ints(x, 3, "axes", axes, MAXI, &na)) == 0)
            rc = ox_const_ints(x, 4, "steps", steps, MAXI, &nst);
    }
    if (rc)
        return rc;
    if (ns < 0 || ne != ns || (na >= 0 && na != ns) || (nst >= 0 && nst != ns))
        return ox_fail(x, VQ_EINVAL, "starts, ends, axes and steps differ in length");
    if (na < 0)
        for (int i = 0; i < ns; i++)
            axes[i] = i;
    /* varq's slice takes step 1; the axes with another step (known dims
     * only) become gathers of the indices the step picks, computed here */
    int64_t s1[3][MAXI];
    int n1 = 0, stepped[MAXI], nstep = 0;
    for (int i = 0; i < ns; i++) {
        if (nst < 0 || steps[i] == 1) {
            s1[0][n1] = axes[i], s1[1][n1] = starts[i], s1[2][n1++] = ends[i];
            continue;
        }
        int64_t ax = axes[i] < 0 ? axes[i] + v->meta.ndim : axes[i];
        if (steps[i] == 0)
            return ox_fail(x, VQ_EINVAL, "step 0 on axis %lld", (long long)axes[i]);
        if (ax < 0 || ax >= v->meta.ndim)
            return ox_fail(x, VQ_EINVAL, "axis %lld of a rank-%d input", (long long)axes[i],
                           v->meta.ndim);
        if (v->meta.shape[ax] < 0)
            return ox_fail(x, VQ_ENOSYS,
                           "step %lld on axis %lld, whose size is known only at "
                           "run time (varq slices with step 1, and other steps "
                           "of known dims)",
                           (long long)steps[i], (long long)ax);
        stepped[nstep++] = i;
    }
    struct ox_val *cur = v;
    const char *o = out0(x), *temp = NULL;
    if (n1 > 0 || nstep == 0) {
        vq_attr a[3] = {VQ_ATTR_IS("axes", s1[0], n1), VQ_ATTR_IS("starts", s1[1], n1),
                        VQ_ATTR_IS("ends", s1[2], n1)};
        if ((rc = ox_emit(x, "slice", &cur, 1, nstep ? &temp : &o, 1, a, 3, &cur)) < 0)
            return rc;
    }
    for (int k = 0; k < nstep; k++) {
        int i = stepped[k];
        int64_t ax = axes[i] < 0 ? axes[i] + v->meta.ndim : axes[i], dim = v->meta.shape[ax];
        int64_t st = steps[i], lo = starts[i] < 0 ? starts[i] + dim : starts[i];
        int64_t hi = ends[i] < 0 ? ends[i] + dim : ends[i];
        /* ONNX's clamps: [0, dim] going up, [-1, dim - 1] going down */
        int64_t top = st > 0 ? dim : dim - 1, bottom = st > 0 ? 0 : -1;
        lo = lo < bottom ? bottom : lo > top ? top : lo;
        hi = hi < bottom ? bottom : hi > top ? top : hi;
        /* the span is at most dim + 1, but the step is the model's: any
         * int64, INT64_MIN too, whose negation overflows; its magnitude
         * as unsigned, and ceil(span / |step|) without adding them */
        uint64_t span =
            st > 0 ? (hi > lo ? (uint64_t)(hi - lo) : 0) : (lo > hi ? (uint64_t)(lo - hi) : 0);
        uint64_t mag = st > 0 ? (uint64_t)st : 0 - (uint64_t)st;
        int64_t count = span ? (int64_t)((span - 1) / mag + 1) : 0;
        vq_tensor *idx;
        if ((rc = ox_tensor_new(x, &idx, VQ_I64, 1, &count)) < 0)
            return rc;
        for (int64_t j = 0; j < count; j++) /* count > 1 only when |st| < dim */
            ((int64_t *)idx->data)[j] = lo + j * st;
        struct ox_val *in[2] = {cur, NULL};
        if ((rc = ox_const(x, NULL, idx, &in[1])) < 0)
            return rc;
        vq_attr a = VQ_ATTR_I("axis", ax);
        if ((rc = ox_emit(x, "gather", in, 2, k + 1 == nstep ? &o : &temp, 1, &a, 1, &cur)) < 0)
            return rc;
    }
    return 0;
}

static int t_cast(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t to = ox_int(x, "to");
    vq_dtype dt;
    if (!vq__onnx_dtype((int32_t)to, &dt))
        return ox_fail(x, VQ_ENOSYS, "cast to %s", vq__onnx_type_name((int32_t)to));
    vq_attr a = VQ_ATTR_S("dtype", vq_dtype_name(dt));
    const char *o = out0(x);
    return ox_emit(x, "cast", &v, 1, &o, 1, &a, 1, NULL);
}

/* ---- indexing and layout ---- */

/* Gather and GatherElements: gather and gather_elements (the row's varq
 * op), the same inputs and axis. */
static int t_take_along(struct ox *x)
{
    struct ox_val *in[2] = {ox_input(x, 0), ox_input(x, 1)};
    vq_attr a = VQ_ATTR_I("axis", ox_int(x, "axis"));
    const char *o = out0(x);
    return ox_emit(x, ox_type(x), in, 2, &o, 1, &a, 1, NULL);
}

/* CumSum(X, axis; exclusive, reverse): cumsum, the axis known at import. */
static int t_cumsum(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t axis;
    int n;
    int rc = ox_const_ints(x, 1, "axis", &axis, 1, &n);
    if (rc == 0 && n != 1)
        rc = ox_fail(x, VQ_EINVAL, "input 1 (axis) is %s; CumSum needs one axis",
                     n < 0 ? "missing" : "empty");
    if (rc)
        return rc;
    vq_attr at[3] = {VQ_ATTR_I("axis", axis), VQ_ATTR_B("exclusive", ox_int(x, "exclusive") != 0),
                     VQ_ATTR_B("reverse", ox_int(x, "reverse") != 0)};
    const char *o = out0(x);
    return ox_emit(x, "cumsum", &v, 1, &o, 1, at, 3, NULL);
}

/* Sign: where(X > 0, 1, where(X < 0, -1, X * 0)): NaN stays NaN, zeros
 * stay zero, and the gradient is 0 everywhere (X * 0's). */
static int t_sign(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *zero, *one, *minus, *pos, *neg, *nil, *inner;
    vq_dtype dt = v->meta.dtype;
    const char *o = out0(x);
    int rc;
    if (dt == VQ_BOOL)
        return ox_fail(x, VQ_EINVAL, "X is bool; Sign takes numbers");
    if ((rc = scalar(x, dt, 0, &zero)) < 0 || (rc = scalar(x, dt, 1, &one)) < 0 ||
        (rc = scalar(x, dt, -1, &minus)) < 0 ||
        (rc = ox_emit(x, "greater", (struct ox_val *[]){v, zero}, 2, NULL, 1, NULL, 0, &pos)) < 0 ||
        (rc = ox_emit(x, "less", (struct ox_val *[]){v, zero}, 2, NULL, 1, NULL, 0, &neg)) < 0 ||
        (rc = ox_emit(x, "mul", (struct ox_val *[]){v, zero}, 2, NULL, 1, NULL, 0, &nil)) < 0 ||
        (rc = select3(x, neg, minus, nil, NULL, &inner)) < 0)
        return rc;
    return select3(x, pos, one, inner, o, NULL);
}

/* Range(start, limit, delta): the three scalars must be known at import,
 * and so is the result, numpy's arange: max(ceil((limit - start) / delta),
 * 0) elements start + i * delta (computed in double for floats, exactly
 * for integers). */
static int t_range(struct ox *x)
{
    static const char *const names[3] = {"start", "limit", "delta"};
    const vq_tensor *t[3];
    int rc = 0;
    for (int i = 0; i < 3 && rc == 0; i++) {
        struct ox_val *v = ox_input(x, i);
        if (!ox_known(x, v))
            rc = ox_fail(x, VQ_ENOSYS,
                         "input %d (%s) \"%s\" must be known when the model is imported "
                         "(Range's length is its output's shape)",
                         i, names[i], v->name);
        else if (v->konst->numel != 1)
            rc = ox_fail(x, VQ_EINVAL, "input %d (%s) has %lld elements, not 1", i, names[i],
                         (long long)v->konst->numel);
        else if (i > 0 && v->konst->dtype != t[0]->dtype)
            rc = ox_fail(x, VQ_EINVAL, "input %d (%s) is %s, start is %s", i, names[i],
                         vq_dtype_name(v->konst->dtype), vq_dtype_name(t[0]->dtype));
        else
            t[i] = v->konst;
    }
    if (rc)
        return rc;
    vq_dtype dt = t[0]->dtype;
    if (dt == VQ_BOOL)
        return ox_fail(x, VQ_EINVAL, "the inputs are bool; Range takes numbers");
    double start = first_value(t[0]), limit = first_value(t[1]), delta = first_value(t[2]);
    int64_t s64 = 0, d64 = 0;
    if (!is_float(dt)) {
        s64 = dt == VQ_I64 ? *(const int64_t *)t[0]->data : *(const int32_t *)t[0]->data;
        d64 = dt == VQ_I64 ? *(const int64_t *)t[2]->data : *(const int32_t *)t[2]->data;
    }
    if (delta == 0 || !isfinite(delta) || !isfinite(start) || !isfinite(limit))
        return ox_fail(x, VQ_EINVAL, "Range(%g, %g, %g): delta must be nonzero and all finite",
                       start, limit, delta);
    double len = ceil((limit - start) / delta);
    if (!is_float(dt)) {
        /* exactly, in unsigned arithmetic: a double rounds int64 bounds,
         * and limit - start may not fit an int64 */
        int64_t l64 = dt == VQ_I64 ? *(const int64_t *)t[1]->data : *(const int32_t *)t[1]->data;
        bool up = d64 > 0;
        uint64_t span = up ? (l64 > s64 ? (uint64_t)l64 - (uint64_t)s64 : 0)
                           : (s64 > l64 ? (uint64_t)s64 - (uint64_t)l64 : 0);
        uint64_t mag = up ? (uint64_t)d64 : 0 - (uint64_t)d64;
        len = span ? (double)((span - 1) / mag + 1) : 0;
    }
    if (len > (double)VQ_ONNX_MADE_MAX_ELEMS)
        return ox_fail(x, VQ_ENOSYS,
                       "Range(%g, %g, %g) has %g elements, more than VQ_ONNX_MADE_MAX_ELEMS "
                       "(Range is computed when the model is imported)",
                       start, limit, delta, len);
    int64_t n = len > 0 ? (int64_t)len : 0;
    vq_tensor *out;
    if ((rc = ox_tensor_new(x, &out, dt, 1, &n)) < 0)
        return rc;
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case VQ_F32: ((float *)out->data)[i] = (float)(start + (double)i * delta); break;
        case VQ_F64: ((double *)out->data)[i] = start + (double)i * delta; break;
        /* every value lies between start and limit, but i * delta may
         * not fit: modulo 2^64, which lands on the value */
        case VQ_I32: ((int32_t *)out->data)[i] = (int32_t)(s64 + i * d64); break;
        default:
            ((int64_t *)out->data)[i] = (int64_t)((uint64_t)s64 + (uint64_t)i * (uint64_t)d64);
            break;
        }
    }
    return ox_const(x, out0(x), out, NULL);
}

/* ---- Resize and Upsample ---- */

/* The values of input i as doubles, which must be a known f32 or f64
 * tensor, or a float initializer (its imported value), of at most max
 * elements (*n = -1 when the input is absent). */
static int const_floats(struct ox *x, int i, const char *what, double *out, int max, int *n)
{
    struct ox_val *v;
    int rc = ox_in(x, i, &v);
    *n = -1;
    if (rc || !v)
        return rc;
    const vq_tensor *t = ox_known(x, v) ? v->konst : ox_param_value(x, v);
    if (!t)
        return ox_fail(x, VQ_ENOSYS,
                       "input %d (%s) \"%s\" must be known when the model is "
                       "imported (an initializer, a Constant, or computed from "
                       "known shapes)",
                       i, what, v->name);
    if (!is_float(t->dtype))
        return ox_fail(x, VQ_EINVAL, "input %d (%s) is %s, not a float tensor", i, what,
                       vq_dtype_name(t->dtype));
    if (t->ndim > 1)
        return ox_fail(x, VQ_EINVAL, "input %d (%s) has %d dims, not 1", i, what, t->ndim);
    if (t->numel > max)
        return ox_fail(x, VQ_ENOSYS, "input %d (%s) has %lld entries, more than %d", i, what,
                       (long long)t->numel, max);
    for (int64_t k = 0; k < t->numel; k++)
        out[k] = t->dtype == VQ_F64 ? ((const double *)t->data)[k] : ((const float *)t->data)[k];
    *n = (int)t->numel;
    return 0;
}

/* How a resize interpolates: its modes and the attributes of cubic and
 * tf_crop_and_resize. */
struct resize_how {
    const char *mode, *ctm, *nearest;
    double cubic_a, extra;
    bool exclude;
};

/* resize of input 0 into output 0 with the given scales (ns entries) or
 * sizes (nz), the modes and the other attributes (how). */
static int emit_resize(struct ox *x, const struct resize_how *how, const double *scales, int ns,
                       const int64_t *sizes, int nz, const double *roi, int nroi)
{
    struct ox_val *v = ox_input(x, 0);
    int r = v->meta.ndim, n = ns > 0 ? ns : nz;
    if (ns > 0 && nz > 0)
        return ox_fail(x, VQ_EINVAL, "both scales and sizes are given; Resize takes one");
    if (n <= 0)
        return ox_fail(x, VQ_EINVAL, "neither scales nor sizes is given");
    if (n != r)
        return ox_fail(x, VQ_EINVAL, "%s has %d entries; X has rank %d",
                       ns > 0 ? "scales" : "sizes", n, r);
    vq_attr at[9];
    int na = 0;
    at[na++] = ns > 0 ? VQ_ATTR_FS("scales", scales, ns) : VQ_ATTR_IS("sizes", sizes, nz);
    at[na++] = VQ_ATTR_S("mode", how->mode);
    at[na++] = VQ_ATTR_S("coordinate_transformation_mode", how->ctm);
    at[na++] = VQ_ATTR_S("nearest_mode", how->nearest);
    at[na++] = VQ_ATTR_F("cubic_coeff_a", how->cubic_a);
    at[na++] = VQ_ATTR_B("exclude_outside", how->exclude);
    at[na++] = VQ_ATTR_F("extrapolation_value", how->extra);
    if (nroi > 0)
        at[na++] = VQ_ATTR_FS("roi", roi, nroi);
    const char *o = out0(x);
    return ox_emit(x, "resize", &v, 1, &o, 1, at, na, NULL);
}

/* Resize: opset 10 (X, scales; mode) resizes as Upsample does; 11 and 13
 * (X, roi, scales, sizes) with the coordinate transformation, nearest and
 * cubic attributes. scales or sizes (and roi in tf_crop_and_resize) must
 * be known at import; an empty scales counts as absent. */
static int t_resize(struct ox *x)
{
    struct resize_how how = {ox_str(x, "mode"),
                             ox_str(x, "coordinate_transformation_mode"),
                             ox_str(x, "nearest_mode"),
                             ox_float(x, "cubic_coeff_a"),
                             ox_float(x, "extrapolation_value"),
                             ox_int(x, "exclude_outside") != 0};
    double scales[VQ_MAX_DIMS], roi[2 * VQ_MAX_DIMS];
    int64_t sizes[VQ_MAX_DIMS];
    int ns = -1, nz = -1, nroi = -1;
    bool v10 = x->opset < 11;
    int rc = const_floats(x, v10 ? 1 : 2, "scales", scales, VQ_MAX_DIMS, &ns);
    if (rc == 0 && !v10)
        rc = ox_const_ints(x, 3, "sizes", sizes, VQ_MAX_DIMS, &nz);
    if (rc == 0 && !v10 && !strcmp(how.ctm, "tf_crop_and_resize")) {
        rc = const_floats(x, 1, "roi", roi, 2 * VQ_MAX_DIMS, &nroi);
        if (rc == 0 && nroi <= 0)
            rc = ox_fail(x, VQ_EINVAL,
                         "coordinate_transformation_mode tf_crop_and_resize needs "
                         "the roi (input 1)");
    }
    if (rc)
        return rc;
    if (v10 && strcmp(how.mode, "nearest") && strcmp(how.mode, "linear"))
        return ox_fail(x, VQ_EINVAL, "mode \"%s\" is not nearest or linear (opset 10)", how.mode);
    return emit_resize(x, &how, scales, ns, sizes, nz, roi, nroi);
}

/* Upsample (opsets 7 and 9): X resized by scales (the attribute in 7, input
 * 1 in 9), nearest or linear, the asymmetric transformation (a nearest
 * output element reads X at floor(o / scale)). */
static int t_upsample(struct ox *x)
{
    struct resize_how how = {ox_str(x, "mode"), "asymmetric", "floor", -0.75, 0, false};
    double scales[VQ_MAX_DIMS];
    int ns = -1;
    if (x->opset >= 9) {
        int rc = const_floats(x, 1, "scales", scales, VQ_MAX_DIMS, &ns);
        if (rc)
            return rc;
    } else {
        const float *f = ox_floats(x, "scales", &ns);
        if (ns <= 0)
            return ox_fail(x, VQ_EINVAL, "attribute scales is missing");
        for (int i = 0; i < ns; i++)
            scales[i] = f[i];
    }
    if (strcmp(how.mode, "nearest") && strcmp(how.mode, "linear"))
        return ox_fail(x, VQ_ENOSYS, "mode \"%s\" is not nearest or linear", how.mode);
    return emit_resize(x, &how, scales, ns, NULL, -1, NULL, -1);
}

/* Expand(X, shape) and Tile(X, repeats): the row's varq op (expand or
 * tile), the second input known; its name the op's attribute's. */
static int t_shaped(struct ox *x)
{
    const char *type = ox_type(x), *what = strcmp(type, "tile") ? "shape" : "repeats";
    struct ox_val *v = ox_input(x, 0);
    int64_t vals[MAXI];
    int n;
    int rc = ox_const_ints(x, 1, what, vals, MAXI, &n);
    if (rc == 0 && n < 0)
        rc = ox_fail(x, VQ_EINVAL, "no %s", what);
    if (rc)
        return rc;
    vq_attr a = VQ_ATTR_IS(what, vals, n);
    const char *o = out0(x);
    return ox_emit(x, type, &v, 1, &o, 1, &a, 1, NULL);
}

/* Pad: attributes before opset 11; pads, constant_value and (18) axes as
 * inputs since. */
static int t_pad(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *cv = x->opset >= 11 ? ox_input(x, 2) : NULL;
    int64_t pads[MAXI], axes[MAXI];
    int n, na = -1, rc = 0;
    const char *mode = ox_str(x, "mode");
    double value = ox_float(x, "value");
    if (x->opset < 11) {
        ints_of(x, x->opset < 2 ? "paddings" : "pads", pads, &n);
    } else {
        if ((rc = ox_const_ints(x, 1, "pads", pads, MAXI, &n)) == 0)
            rc = ox_const_ints(x, 3, "axes", axes, MAXI, &na);
        if (rc == 0 && cv) {
            if (!ox_known(x, cv) || cv->konst->numel != 1)
                rc = ox_fail(x, VQ_ENOSYS, "constant_value must be known when the model is "
                                           "imported (one value)");
            else
                value = first_value(cv->konst);
        }
    }
    if (rc)
        return rc;
    int r = v->meta.ndim;
    if (na >= 0) { /* pads for the listed axes only: spread to every dim */
        int64_t full[MAXI] = {0};
        if (n != 2 * na)
            return ox_fail(x, VQ_EINVAL, "pads has %d entries for %d axes", n, na);
        for (int k = 0; k < na; k++) {
            int a = 0;
            if ((rc = axis_of(x, "axis", axes[k], r, &a)) < 0)
                return rc;
            full[a] = pads[k];
            full[r + a] = pads[na + k];
        }
        memcpy(pads, full, (size_t)(2 * r) * sizeof *pads);
        n = 2 * r;
    }
    vq_attr a[3] = {VQ_ATTR_IS("pads", pads, n < 0 ? 0 : n), VQ_ATTR_S("mode", mode),
                    VQ_ATTR_F("value", value)};
    const char *o = out0(x);
    return ox_emit(x, "pad", &v, 1, &o, 1, a, 3, NULL);
}

/* Split: sizes as the split attribute (before 13), an input (since), or
 * equal parts (num_outputs in 18, else the number of outputs). */
static int t_split(struct ox *x)
{
    const Onnx__NodeProto *n = x->node;
    struct ox_val *v = ox_input(x, 0);
    int64_t axis = ox_int(x, "axis"), sizes[MAXI];
    int ns = -1, rc = 0;
    if (x->opset < 13)
        ints_of(x, "split", sizes, &ns);
    else
        rc = ox_const_ints(x, 1, "split", sizes, MAXI, &ns);
    if (rc)
        return rc;
    int nout = (int)n->n_output, ax = 0;
    if (nout < 1 || nout > VQ__MAX_SLOTS)
        return ox_fail(x, VQ_ENOSYS, "%d outputs (varq takes 1 to %d)", nout, VQ__MAX_SLOTS);
    if ((rc = axis_of(x, "axis", axis, v->meta.ndim, &ax)) < 0)
        return rc;
    if (ns < 0) {
        int64_t dim = v->meta.shape[ax];
        if (dim < 0)
            return ox_fail(x, VQ_ENOSYS, "equal parts of a dim known only at run time");
        for (int j = 0; j < nout; j++) /* the last part takes the rest (opset 18) */
            sizes[j] = j < nout - 1 ? (dim + nout - 1) / nout
                                    : dim - (int64_t)(nout - 1) * ((dim + nout - 1) / nout);
        ns = nout;
    }
    if (ns != nout)
        return ox_fail(x, VQ_EINVAL, "%d sizes for %d outputs", ns, nout);
    const char *names[VQ__MAX_SLOTS];
    for (int j = 0; j < nout; j++)
        names[j] = ox_out(x, j);
    vq_attr a[2] = {VQ_ATTR_I("axis", ax), VQ_ATTR_IS("sizes", sizes, ns)};
    return ox_emit(x, "split", &v, 1, names, nout, a, 2, NULL);
}

/* ArgMax, ArgMin: the row's varq op. */
static int t_arg_extreme(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    vq_attr a[3] = {VQ_ATTR_I("axis", ox_int(x, "axis")),
                    VQ_ATTR_B("keepdim", ox_int(x, "keepdims") != 0),
                    VQ_ATTR_B("select_last_index", ox_int(x, "select_last_index") != 0)};
    const char *o = out0(x);
    return ox_emit(x, ox_type(x), &v, 1, &o, 1, a, 3, NULL);
}

/* ---- constants and shapes known at import ---- */

static int t_constant(struct ox *x)
{
    int rc;
    const Onnx__NodeProto *n = x->node;
    if (n->n_attribute != 1)
        return ox_fail(x, VQ_EINVAL, "Constant takes exactly one attribute, not %zu",
                       n->n_attribute);
    const Onnx__AttributeProto *a = n->attribute[0];
    const char *an = a->name ? a->name : "";
    vq_tensor *t = NULL;
    if (!strcmp(an, "value") && a->t) {
        char what[300];
        snprintf(what, sizeof what, "the value of Constant \"%s\"", out0(x));
        rc = vq__onnx_tensor(a->t, x->dir, what, &t);
    } else if (!strcmp(an, "value_float")) {
        rc = vq_tensor_from(&t, VQ_F32, 0, NULL, &a->f);
    } else if (!strcmp(an, "value_int")) {
        rc = vq_tensor_from(&t, VQ_I64, 0, NULL, &a->i);
    } else if (!strcmp(an, "value_floats")) {
        int64_t len = (int64_t)a->n_floats;
        rc = vq_tensor_from(&t, VQ_F32, 1, &len, a->floats);
    } else if (!strcmp(an, "value_ints")) {
        int64_t len = (int64_t)a->n_ints;
        rc = vq_tensor_from(&t, VQ_I64, 1, &len, a->ints);
    } else {
        return ox_fail(x, VQ_ENOSYS, "a constant given as %s is not supported", an);
    }
    return rc < 0 ? ox_fail(x, rc, "%s", vq_errmsg()) : ox_const(x, out0(x), t, NULL);
}

static int t_shape(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int r = v->meta.ndim, rc;
    int64_t start = ox_int(x, "start"), end = ox_given(x, "end") ? ox_int(x, "end") : r;
    start = start < 0 ? (start + r < 0 ? 0 : start + r) : (start > r ? r : start);
    end = end < 0 ? (end + r < 0 ? 0 : end + r) : (end > r ? r : end);
    int64_t len = end > start ? end - start : 0;
    for (int64_t i = start; i < start + len; i++)
        if (v->meta.shape[i] < 0)
            return ox_fail(x, VQ_ENOSYS, "dim %lld of \"%s\" is known only at run time; varq "
                                         "computes Shape when the model is imported",
                           (long long)i, v->name);
    vq_tensor *t;
    if ((rc = vq_tensor_from(&t, VQ_I64, 1, &len, v->meta.shape + start)) < 0)
        return rc;
    return ox_const(x, out0(x), t, NULL);
}

static int t_size(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t n = vq__numel(v->meta.ndim, v->meta.shape);
    if (n < 0)
        return ox_fail(x, VQ_ENOSYS, "the size of \"%s\" is known only at run time", v->name);
    vq_tensor *t;
    int rc = vq_tensor_from(&t, VQ_I64, 0, NULL, &n);
    return rc < 0 ? rc : ox_const(x, out0(x), t, NULL);
}

static int t_constant_of_shape(struct ox *x)
{
    int64_t shape[MAXI];
    int n;
    int rc = ox_const_ints(x, 0, "shape", shape, MAXI, &n);
    if (rc)
        return rc;
    if (n < 0)
        return ox_fail(x, VQ_EINVAL, "no shape");
    if (n > VQ_MAX_DIMS)
        return ox_fail(x, VQ_ENOSYS, "rank %d is more than varq's %d", n, VQ_MAX_DIMS);
    vq_dtype dt = VQ_F32;
    double value = 0;
    const Onnx__TensorProto *vt = ox_tensor(x, "value");
    if (vt) {
        vq_tensor *t;
        if ((rc = vq__onnx_tensor(vt, x->dir, "the value of ConstantOfShape", &t)) < 0)
            return rc;
        dt = t->dtype;
        if (t->numel != 1)
            rc = ox_fail(x, VQ_EINVAL, "value has %lld elements, not 1", (long long)t->numel);
        else
            value = first_value(t);
        vq_tensor_release(t);
        if (rc)
            return rc;
    }
    vq_attr at[3] = {VQ_ATTR_IS("shape", shape, n), VQ_ATTR_S("dtype", vq_dtype_name(dt)),
                     VQ_ATTR_F("value", value)};
    const char *o = out0(x);
    return ox_emit(x, "fill_constant", NULL, 0, &o, 1, at, 3, NULL);
}

/* ---- reductions ---- */

/* ReduceSum (axes an input since opset 13), ReduceMean, ReduceMax,
 * ReduceMin, ReduceProd (since 18): the row's varq op. */
static int t_reduce(struct ox *x)
{
    const char *type = ox_type(x), *o = out0(x);
    struct ox_val *v = ox_input(x, 0);
    int64_t axes[MAXI];
    int n;
    int rc = axes_of(x, strcmp(type, "sum") ? 18 : 13, axes, &n);
    if (rc)
        return rc;
    if (n <= 0 && ox_int(x, "noop_with_empty_axes"))
        return ox_alias(x, o, v);
    vq_attr a[2] = {VQ_ATTR_IS("axes", axes, n < 0 ? 0 : n),
                    VQ_ATTR_B("keepdim", ox_int(x, "keepdims") != 0)};
    return ox_emit(x, type, &v, 1, &o, 1, a, 2, NULL);
}

/* ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp: an
 * elementwise op (pre), a sum over the axes (attributes before opset 18),
 * an elementwise op after (post); NULL for none. */
static int reduce_wrapped(struct ox *x, const char *pre, const char *post)
{
    struct ox_val *v = ox_input(x, 0), *p = v, *s;
    int64_t axes[MAXI];
    int n;
    int rc = axes_of(x, 18, axes, &n);
    if (rc == 0 && pre && !strcmp(pre, "square"))
        rc = ox_emit(x, "mul", (struct ox_val *[]){v, v}, 2, NULL, 1, NULL, 0, &p);
    else if (rc == 0 && pre)
        rc = ox_emit(x, pre, &v, 1, NULL, 1, NULL, 0, &p);
    vq_attr a[2] = {VQ_ATTR_IS("axes", axes, n < 0 ? 0 : n),
                    VQ_ATTR_B("keepdim", ox_int(x, "keepdims") != 0)};
    const char *o = out0(x), *name = post ? NULL : o;
    if (rc == 0)
        rc = ox_emit(x, "sum", &p, 1, &name, 1, a, 2, &s);
    return rc || !post ? rc : ox_emit(x, post, &s, 1, &o, 1, NULL, 0, NULL);
}

static int t_reduce_sum_square(struct ox *x) { return reduce_wrapped(x, "square", NULL); }
static int t_reduce_l1(struct ox *x) { return reduce_wrapped(x, "abs", NULL); }
static int t_reduce_l2(struct ox *x) { return reduce_wrapped(x, "square", "sqrt"); }
static int t_reduce_log_sum(struct ox *x) { return reduce_wrapped(x, NULL, "log"); }
static int t_reduce_log_sum_exp(struct ox *x)
{
    return reduce_wrapped(x, "exp", "log");
}

/* ---- the rows: what each op declares ---- */

/* Fields: translation, varq op (shared translations), inputs min and max,
 * output 0 required, attributes. */
#define UNARY(name, type) const struct ox_op ox_op_##name = {t_unary, type, 1, 1, true, NULL};
#define BINARY(name, type) \
    const struct ox_op ox_op_##name = {t_binary, type, 2, 2, true, OX_ATTRS(OX_INT("axis", -1))};
#define VARIADIC(name, type) \
    const struct ox_op ox_op_##name = {t_variadic, type, 1, OX_ANY, true, NULL};

UNARY(Abs, "abs")
UNARY(Acos, "acos")
UNARY(Acosh, "acosh")
UNARY(Asin, "asin")
UNARY(Asinh, "asinh")
UNARY(Atan, "atan")
UNARY(Atanh, "atanh")
UNARY(Ceil, "ceil")
UNARY(Cos, "cos")
UNARY(Cosh, "cosh")
UNARY(Erf, "erf")
UNARY(Exp, "exp")
UNARY(Floor, "floor")
UNARY(Log, "log")
UNARY(Not, "logical_not")
UNARY(Reciprocal, "reciprocal")
UNARY(Relu, "relu")
UNARY(Round, "round")
UNARY(Sigmoid, "sigmoid")
UNARY(Sin, "sin")
UNARY(Sinh, "sinh")
UNARY(Sqrt, "sqrt")
UNARY(Tan, "tan")
UNARY(Tanh, "tanh")
BINARY(Add, "add")
BINARY(And, "logical_and")
BINARY(Div, "div")
BINARY(Equal, "equal")
BINARY(Greater, "greater")
BINARY(GreaterOrEqual, "greater_equal")
BINARY(Less, "less")
BINARY(LessOrEqual, "less_equal")
BINARY(Mul, "mul")
BINARY(Or, "logical_or")
BINARY(Sub, "sub")
BINARY(Xor, "not_equal")
VARIADIC(Max, "maximum")
VARIADIC(Min, "minimum")
VARIADIC(Sum, "add")
VARIADIC(Mean, "mean")
const struct ox_op ox_op_Where = {t_where, NULL, 3, 3, true, NULL};
const struct ox_op ox_op_Neg = {t_neg, NULL, 1, 1, true, NULL};
const struct ox_op ox_op_Clip =
    {t_clip,
     NULL,
     1,
     3,
     true,
     OX_ATTRS(OX_FLOAT("min", -INFINITY, .until = 11), OX_FLOAT("max", INFINITY, .until = 11))};
const struct ox_op ox_op_LeakyRelu =
    {t_leaky_relu, NULL, 1, 1, true, OX_ATTRS(OX_FLOAT("alpha", 0.01))};
const struct ox_op ox_op_HardSigmoid =
    {t_hard_sigmoid, NULL, 1, 1, true, OX_ATTRS(OX_FLOAT("alpha", 0.2), OX_FLOAT("beta", 0.5))};
const struct ox_op ox_op_HardSwish = {t_hard_swish, NULL, 1, 1, true, NULL};
const struct ox_op ox_op_Pow = {t_pow, NULL, 2, 2, true, NULL};
const struct ox_op ox_op_Elu = {t_elu, NULL, 1, 1, true, OX_ATTRS(OX_FLOAT("alpha", 1))};
const struct ox_op ox_op_Selu = {t_selu,
                                 NULL,
                                 1,
                                 1,
                                 true,
                                 OX_ATTRS(OX_FLOAT("alpha", 1.67326319217681884765625),
                                          OX_FLOAT("gamma", 1.05070102214813232421875))};
const struct ox_op ox_op_Celu = {t_celu, NULL, 1, 1, true, OX_ATTRS(OX_FLOAT("alpha", 1))};
const struct ox_op ox_op_PRelu = {t_prelu, NULL, 2, 2, true, NULL};
const struct ox_op ox_op_ThresholdedRelu =
    {t_thresholded_relu, NULL, 1, 1, true, OX_ATTRS(OX_FLOAT("alpha", 1))};
const struct ox_op ox_op_Softplus = {t_softplus, NULL, 1, 1, true, NULL};
const struct ox_op ox_op_Softsign = {t_softsign, NULL, 1, 1, true, NULL};
const struct ox_op ox_op_IsNaN = {t_isnan, NULL, 1, 1, true, NULL};
const struct ox_op ox_op_IsInf =
    {t_isinf, NULL, 1,
     1,       true, OX_ATTRS(OX_INT("detect_positive", 1), OX_INT("detect_negative", 1))};
const struct ox_op ox_op_Shrink = {t_shrink, NULL,
                                   1,        1,
                                   true,     OX_ATTRS(OX_FLOAT("lambd", 0.5), OX_FLOAT("bias", 0))};
const struct ox_op ox_op_Sign = {t_sign, NULL, 1, 1, true, NULL};
const struct ox_op ox_op_Cast = {t_cast, NULL, 1, 1, true, OX_ATTRS(OX_INT("to", -1))};
const struct ox_op ox_op_Identity = {t_identity, NULL, 1, 1, true, NULL};

/* windows (the lifted dims: at most 3, pads 6) */
#define WINDOW_ATTRS OX_INTS("strides", 3), OX_STR("auto_pad", "NOTSET", 32), OX_INTS("pads", 6)
const struct ox_op ox_op_Conv =
    {t_conv, NULL, 2, 3, true, OX_ATTRS(WINDOW_ATTRS, OX_INTS("dilations", 3), OX_INT("group", 1))};
const struct ox_op ox_op_ConvTranspose = {t_conv_transpose,
                                          NULL,
                                          2,
                                          3,
                                          true,
                                          OX_ATTRS(WINDOW_ATTRS, OX_INTS("dilations", 3),
                                                   OX_INT("group", 1), OX_INTS("output_padding", 3),
                                                   OX_INTS("output_shape", 5))};
const struct ox_op ox_op_MaxPool = {t_pool,
                                    "max_pool2d",
                                    1,
                                    1,
                                    true,
                                    OX_ATTRS(WINDOW_ATTRS, OX_INTS("kernel_shape", 3),
                                             OX_INTS("dilations", 3), OX_INT("ceil_mode", 0),
                                             OX_INT("storage_order", 0))};
const struct ox_op ox_op_AveragePool = {t_pool,
                                        "avg_pool2d",
                                        1,
                                        1,
                                        true,
                                        OX_ATTRS(WINDOW_ATTRS, OX_INTS("kernel_shape", 3),
                                                 OX_INT("ceil_mode", 0),
                                                 OX_INT("count_include_pad", 0))};
const struct ox_op ox_op_GlobalAveragePool = {t_global_average_pool, NULL, 1, 1, true, NULL};
const struct ox_op ox_op_GlobalMaxPool = {t_global_max_pool, NULL, 1, 1, true, NULL};
const struct ox_op ox_op_BatchNormalization = {t_batch_norm,
                                               NULL,
                                               5,
                                               5,
                                               true,
                                               OX_ATTRS(OX_FLOAT("epsilon", 1e-5),
                                                        OX_FLOAT("momentum", 0.9),
                                                        OX_INT("training_mode", 0, .since = 14),
                                                        OX_INT("spatial", 1))};
const struct ox_op ox_op_LayerNormalization =
    {t_layer_norm,
     NULL,
     2,
     3,
     true,
     OX_ATTRS(OX_INT("axis", -1), OX_FLOAT("epsilon", 1e-5),
              OX_INT("stash_type", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT))};
const struct ox_op ox_op_InstanceNormalization =
    {t_instance_norm, NULL, 3, 3, true, OX_ATTRS(OX_FLOAT("epsilon", 1e-5))};
const struct ox_op ox_op_MatMul = {t_matmul, NULL, 2, 2, true, NULL};
const struct ox_op ox_op_Gemm = {t_gemm,
                                 NULL,
                                 2,
                                 3,
                                 true,
                                 OX_ATTRS(OX_INT("transA", 0), OX_INT("transB", 0),
                                          OX_FLOAT("alpha", 1), OX_FLOAT("beta", 1))};
/* the axis: 1 before opset 13 (the dims from it on), -1 since (one axis) */
#define SOFTMAX_AXIS OX_INT("axis", 1, .changed = 13, .i2 = -1)
const struct ox_op ox_op_Softmax = {t_softmax, "softmax", 1, 1, true, OX_ATTRS(SOFTMAX_AXIS)};
const struct ox_op ox_op_LogSoftmax = {t_softmax, "log_softmax", 1,
                                       1,         true,          OX_ATTRS(SOFTMAX_AXIS)};
const struct ox_op ox_op_Hardmax = {t_hardmax, NULL, 1, 1, true, OX_ATTRS(SOFTMAX_AXIS)};
const struct ox_op ox_op_Dropout = {t_dropout, NULL, 1, 3, true, NULL};
/* opset 10's Resize transforms as Upsample does: asymmetric, floor */
const struct ox_op ox_op_Resize = {t_resize,
                                   NULL,
                                   1,
                                   4,
                                   true,
                                   OX_ATTRS(OX_STR("mode", "nearest", 32),
                                            OX_STR("coordinate_transformation_mode", "asymmetric",
                                                   32, .changed = 11, .s2 = "half_pixel"),
                                            OX_STR("nearest_mode", "floor", 32, .changed = 11,
                                                   .s2 = "round_prefer_floor"),
                                            OX_FLOAT("cubic_coeff_a", -0.75),
                                            OX_INT("exclude_outside", 0),
                                            OX_FLOAT("extrapolation_value", 0))};
const struct ox_op ox_op_Upsample =
    {t_upsample,
     NULL,
     1,
     2,
     true,
     OX_ATTRS(OX_STR("mode", "nearest", 32), OX_FLOATS("scales", VQ_MAX_DIMS, .until = 9))};
const struct ox_op ox_op_DepthToSpace =
    {t_space_depth,
     "to_space",
     1,
     1,
     true,
     OX_ATTRS(OX_INT("blocksize", 0), OX_STR("mode", "DCR", 8))};
const struct ox_op ox_op_SpaceToDepth =
    {t_space_depth, "to_depth", 1, 1, true, OX_ATTRS(OX_INT("blocksize", 0))};

const struct ox_op ox_op_Reshape =
    {t_reshape, NULL, 1,
     2,         true, OX_ATTRS(OX_INTS("shape", MAXI, .until = 5), OX_INT("allowzero", 0))};
const struct ox_op ox_op_Flatten = {t_flatten, NULL, 1, 1, true, OX_ATTRS(OX_INT("axis", 1))};
const struct ox_op ox_op_Transpose = {t_transpose, NULL, 1,
                                      1,           true, OX_ATTRS(OX_INTS("perm", MAXI))};
/* the axis: required since opset 4; 1 before */
const struct ox_op ox_op_Concat = {t_concat, NULL,
                                   1,        OX_ANY,
                                   true,     OX_ATTRS(OX_INT("axis", 1, .changed = 4, .i2 = 0))};
const struct ox_op ox_op_Squeeze = {t_squeeze, NULL, 1,
                                    2,         true, OX_ATTRS(OX_INTS("axes", MAXI, .until = 13))};
const struct ox_op ox_op_Unsqueeze = {t_unsqueeze, NULL,
                                      1,           2,
                                      true,        OX_ATTRS(OX_INTS("axes", MAXI, .until = 13))};
const struct ox_op ox_op_Split =
    {t_split, NULL, 1, 2, false, OX_ATTRS(OX_INT("axis", 0), OX_INTS("split", MAXI, .until = 13))};
/* shape or repeats absent: the translation says so */
const struct ox_op ox_op_Expand = {t_shaped, "expand", 1, 2, true, NULL};
const struct ox_op ox_op_Tile = {t_shaped, "tile", 1, 2, true, NULL};
const struct ox_op ox_op_Pad = {t_pad,
                                NULL,
                                1,
                                4,
                                true,
                                OX_ATTRS(OX_STR("mode", "constant", 16),
                                         OX_INTS("paddings", MAXI, .until = 2),
                                         OX_INTS("pads", MAXI, .since = 2, .until = 11),
                                         OX_FLOAT("value", 0, .until = 11))};
const struct ox_op ox_op_Shape = {t_shape, NULL, 1,
                                  1,       true, OX_ATTRS(OX_INT("start", 0), OX_INT("end", 0))};
const struct ox_op ox_op_Size = {t_size, NULL, 1, 1, true, NULL};
/* Constant reads its one attribute itself: which one it is, is the
 * value's type */
const struct ox_op ox_op_Constant = {t_constant, NULL, 0, 0, true, NULL};
const struct ox_op ox_op_ConstantOfShape = {t_constant_of_shape,         NULL, 0, 1, true,
                                            OX_ATTRS(OX_TENSOR("value"))};
const struct ox_op ox_op_EyeLike = {t_eye_like, NULL, 1,
                                    1,          true, OX_ATTRS(OX_INT("k", 0), OX_INT("dtype", 0))};
const struct ox_op ox_op_Range = {t_range, NULL, 3, 3, true, NULL};
const struct ox_op ox_op_Trilu = {t_trilu, NULL, 1, 2, true, OX_ATTRS(OX_INT("upper", 1))};

const struct ox_op ox_op_Slice = {t_slice,
                                  NULL,
                                  1,
                                  5,
                                  true,
                                  OX_ATTRS(OX_INTS("starts", MAXI, .until = 10),
                                           OX_INTS("ends", MAXI, .until = 10),
                                           OX_INTS("axes", MAXI, .until = 10))};
const struct ox_op ox_op_Gather = {t_take_along, "gather", 2, 2, true, OX_ATTRS(OX_INT("axis", 0))};
const struct ox_op ox_op_GatherElements = {t_take_along, "gather_elements",          2, 2,
                                           true,         OX_ATTRS(OX_INT("axis", 0))};
const struct ox_op ox_op_OneHot = {t_one_hot, NULL, 3, 3, true, OX_ATTRS(OX_INT("axis", -1))};
/* the axis absent: the translation says so */
const struct ox_op ox_op_CumSum =
    {t_cumsum, NULL, 1, 2, true, OX_ATTRS(OX_INT("exclusive", 0), OX_INT("reverse", 0))};
#define ARG_ATTRS OX_INT("axis", 0), OX_INT("keepdims", 1), OX_INT("select_last_index", 0)
const struct ox_op ox_op_ArgMax = {t_arg_extreme, "argmax", 1, 1, true, OX_ATTRS(ARG_ATTRS)};
const struct ox_op ox_op_ArgMin = {t_arg_extreme, "argmin", 1, 1, true, OX_ATTRS(ARG_ATTRS)};

/* axes: an attribute before opset 18 (13 for ReduceSum), an input since */
#define REDUCE(name, type, last)                                                      \
    const struct ox_op ox_op_##name = {t_reduce,                                      \
                                       type,                                          \
                                       1,                                             \
                                       2,                                             \
                                       true,                                          \
                                       OX_ATTRS(OX_INTS("axes", MAXI, .until = last), \
                                                OX_INT("keepdims", 1),                \
                                                OX_INT("noop_with_empty_axes", 0))};
#define REDUCE_WRAPPED(name, fn) \
    const struct ox_op           \
        ox_op_##name =           \
            {fn, NULL, 1,        \
             2,  true, OX_ATTRS(OX_INTS("axes", MAXI, .until = 18), OX_INT("keepdims", 1))};
REDUCE(ReduceSum, "sum", 13)
REDUCE(ReduceMean, "mean", 18)
REDUCE(ReduceMax, "reduce_max", 18)
REDUCE(ReduceMin, "reduce_min", 18)
REDUCE(ReduceProd, "reduce_prod", 18)
REDUCE_WRAPPED(ReduceSumSquare, t_reduce_sum_square)
REDUCE_WRAPPED(ReduceL1, t_reduce_l1)
REDUCE_WRAPPED(ReduceL2, t_reduce_l2)
REDUCE_WRAPPED(ReduceLogSum, t_reduce_log_sum)
REDUCE_WRAPPED(ReduceLogSumExp, t_reduce_log_sum_exp)

#define LOSS_ATTRS OX_STR("reduction", "mean", 16), OX_INT("ignore_index", 0)
const struct ox_op ox_op_NegativeLogLikelihoodLoss = {t_nll_loss, NULL, 2,
                                                      3,          true, OX_ATTRS(LOSS_ATTRS)};
const struct ox_op ox_op_SoftmaxCrossEntropyLoss = {t_sce_loss, NULL, 2,
                                                    3,          true, OX_ATTRS(LOSS_ATTRS)};

const struct ox_op ox_op_If = {t_if,  NULL,
                               1,     1,
                               false, OX_ATTRS(OX_GRAPH("then_branch"), OX_GRAPH("else_branch"))};
/* M and cond may be absent (""), the carried values any number */
const struct ox_op ox_op_Loop = {t_loop, NULL, 0, OX_ANY, false, OX_ATTRS(OX_GRAPH("body"))};

/* ---- the table ---- */

static const struct {
    const char *name;
    const struct ox_op *op;
} table[] = {
#define OX_TABLE_ROW(name) {#name, &ox_op_##name},
    OX_OPS(OX_TABLE_ROW)
#undef OX_TABLE_ROW
};

#define NTABLE ((int)(sizeof table / sizeof table[0]))

VQ_API const char *vq_onnx_op_name(int i)
{
    return i >= 0 && i < NTABLE ? table[i].name : NULL;
}

int vq__onnx_translate(struct ox *x)
{
    const char *op = x->node->op_type;
    int lo = 0, hi = NTABLE - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(op, table[mid].name);
        if (c < 0) {
            hi = mid - 1;
        } else if (c > 0) {
            lo = mid + 1;
        } else {
            /* the node's declared attributes live here while it is
             * translated; an If or Loop translates its subgraphs' nodes in
             * between, each with its own */
            const struct ox_args *outer = x->args;
            struct ox_args args;
            int rc = ox_args_read(x, table[mid].op, &args);
            if (rc == 0)
                rc = table[mid].op->fn(x);
            x->args = outer;
            return rc;
        }
    }
    return ox_fail(x, VQ_ENOSYS, "op %s (domain ai.onnx, opset %lld) is not supported", op,
                   (long long)x->opset);
}
