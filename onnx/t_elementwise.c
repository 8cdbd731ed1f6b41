/* ONNX's elementwise ops and activations as varq ops: the unary and
 * binary ones map one to one (the row names the varq op), Max / Min / Sum
 * / Mean chain a binary op over their inputs, and the activations varq
 * has no op for (LeakyRelu, Elu, Selu, Celu, PRelu, Shrink,
 * Sign, ...) are composed of varq's, so each part has its gradient and
 * its GPU kernel. */
#include "onnx_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* out0 = type(in0), type the row's varq op */
static int t_unary(struct ox *x)
{
    struct ox_val *a = ox_input(x, 0);
    const char *o = ox_out0(x);
    return ox_emit(x, ox_type(x), &a, 1, &o, 1, NULL, 0, NULL);
}

/* Sigmoid: sigmoid, or silu where import.c pairs it with the Mul of its
 * input by it (x->silu; the node then writes the Mul's output). */
static int t_sigmoid(struct ox *x)
{
    struct ox_val *a = ox_input(x, 0);
    const char *o = ox_out0(x);
    return ox_emit(x, x->silu ? "silu" : "sigmoid", &a, 1, &o, 1, NULL, 0, NULL);
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
    if (a->sym && !b->sym && ox_known_int1(b, &k) && k > -(1LL << 40) && k < (1LL << 40)) {
        if (!__builtin_add_overflow(a->sym_off, sign * k, &r->sym_off))
            r->sym = a->sym;
    } else if (sign > 0 && b->sym && ox_known_int1(a, &k) && k > -(1LL << 40) && k < (1LL << 40)) {
        if (!__builtin_add_overflow(b->sym_off, k, &r->sym_off))
            r->sym = b->sym;
    }
}

/* out0 = type(in0, in1), type the row's varq op */
static int t_binary(struct ox *x)
{
    const char *type = ox_type(x), *o = ox_out0(x);
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

static int t_where(struct ox *x)
{
    struct ox_val *in[3] = {ox_input(x, 0), ox_input(x, 1), ox_input(x, 2)};
    const char *o = ox_out0(x);
    return ox_emit(x, "where", in, 3, &o, 1, NULL, 0, NULL);
}

/* Neg: 0 - X (every dtype). */
static int t_neg(struct ox *x)
{
    struct ox_val *in[2] = {NULL, ox_input(x, 0)};
    const char *o = ox_out0(x);
    int rc = ox_scalar(x, in[1]->meta.dtype, 0, &in[0]);
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
        const char *name = i == count - 1 && !mean ? ox_out0(x) : NULL;
        rc = ox_emit(x, type, in, 2, &name, 1, NULL, 0, &acc);
    }
    if (rc)
        return rc;
    if (mean) {
        if (!ox_is_float(acc->meta.dtype))
            return ox_fail(x, VQ_ENOSYS, "Mean of %s", vq_dtype_name(acc->meta.dtype));
        vq_attr a = VQ_ATTR_F("scale", 1.0 / count);
        const char *o = ox_out0(x);
        return ox_emit(x, "scale", &acc, 1, &o, 1, &a, 1, NULL);
    }
    return count == 1 ? ox_alias(x, ox_out0(x), acc) : 0;
}

/* Clip(X, min, max): attributes before opset 11, optional inputs since. */
static int t_clip(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *lo = NULL, *hi = NULL;
    double a = ox_float(x, "min"), b = ox_float(x, "max");
    int rc = 0;
    if (x->opset < 11) {
        if (isfinite(a))
            rc = ox_scalar(x, v->meta.dtype, a, &lo);
        if (rc == 0 && isfinite(b))
            rc = ox_scalar(x, v->meta.dtype, b, &hi);
    } else {
        lo = ox_input(x, 1);
        hi = ox_input(x, 2);
    }
    struct ox_val *cur = v;
    if (rc == 0 && lo) {
        struct ox_val *in[2] = {cur, lo};
        const char *name = hi ? NULL : ox_out0(x);
        rc = ox_emit(x, "maximum", in, 2, &name, 1, NULL, 0, &cur);
    }
    if (rc == 0 && hi) {
        struct ox_val *in[2] = {cur, hi};
        const char *name = ox_out0(x);
        rc = ox_emit(x, "minimum", in, 2, &name, 1, NULL, 0, &cur);
    }
    if (rc == 0 && !lo && !hi)
        rc = ox_alias(x, ox_out0(x), v);
    return rc;
}

/* LeakyRelu: where(X < 0, alpha X, X). */
static int t_leaky_relu(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *zero, *neg, *scaled;
    vq_attr a = VQ_ATTR_F("scale", ox_float(x, "alpha"));
    const char *o = ox_out0(x);
    int rc;
    if ((rc = ox_scalar(x, v->meta.dtype, 0, &zero)) < 0 ||
        (rc = ox_emit(x, "less", (struct ox_val *[]){v, zero}, 2, NULL, 1, NULL, 0, &neg)) < 0 ||
        (rc = ox_emit(x, "scale", &v, 1, NULL, 1, &a, 1, &scaled)) < 0)
        return rc;
    return ox_emit(x, "where", (struct ox_val *[]){neg, scaled, v}, 3, &o, 1, NULL, 0, NULL);
}

/* HardSigmoid: varq's hard_sigmoid, clamp(alpha X + beta, 0, 1). */
static int t_hard_sigmoid(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    const char *o = ox_out0(x);
    vq_attr a[2] = {VQ_ATTR_F("alpha", ox_float(x, "alpha")),
                    VQ_ATTR_F("beta", ox_float(x, "beta"))};
    return ox_emit(x, "hard_sigmoid", &v, 1, &o, 1, a, 2, NULL);
}

/* HardSwish: varq's hard_swish, X hard_sigmoid(X; 1/6, 1/2). */
static int t_hard_swish(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    const char *o = ox_out0(x);
    return ox_emit(x, "hard_swish", &v, 1, &o, 1, NULL, 0, NULL);
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
    const char *o = ox_out0(x);
    int rc;
    if (!ox_is_float(v->meta.dtype)) {
        vq_dtype xt = v->meta.dtype, wide = ox_is_float(e->meta.dtype)       ? VQ_F64
                                            : e->meta.dtype != v->meta.dtype ? VQ_I64
                                                                             : xt;
        if (wide == xt)
            return ox_emit(x, "pow", (struct ox_val *[]){v, e}, 2, &o, 1, NULL, 0, NULL);
        struct ox_val *p;
        const char *temp = NULL;
        vq_attr c = VQ_ATTR_S("dtype", vq_dtype_name(xt));
        if ((rc = ox_cast(x, &v, wide)) < 0 || (rc = ox_cast(x, &e, wide)) < 0 ||
            (rc = ox_emit(x, "pow", (struct ox_val *[]){v, e}, 2, &temp, 1, NULL, 0, &p)) < 0)
            return rc;
        return ox_emit(x, "cast", &p, 1, &o, 1, &c, 1, NULL);
    }
    if (!e->konst || e->konst->numel != 1) {
        if ((rc = ox_cast(x, &e, v->meta.dtype)) < 0)
            return rc;
        return ox_emit(x, "pow", (struct ox_val *[]){v, e}, 2, &o, 1, NULL, 0, NULL);
    }
    vq_attr a = VQ_ATTR_F("exponent", ox_first_value(e->konst));
    return ox_emit(x, "power", &v, 1, &o, 1, &a, 1, NULL);
}

/* X > 0 (or X > threshold) as a bool temporary. */
static int positive(struct ox *x, struct ox_val *v, double threshold, struct ox_val **out)
{
    struct ox_val *t;
    int rc = ox_scalar(x, v->meta.dtype, threshold, &t);
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
        (rc = ox_affine(x, e, alpha * gamma, -alpha * gamma, &neg)) < 0 ||
        (gamma != 1 && (rc = ox_affine(x, v, gamma, 0, &yes)) < 0))
        return rc;
    return ox_select(x, pos, yes, neg, ox_out0(x), NULL);
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
    const char *o = ox_out0(x);
    int rc;
    if ((rc = ox_scalar(x, v->meta.dtype, 0, &zero)) < 0 ||
        (rc = ox_emit(x, "maximum", (struct ox_val *[]){v, zero}, 2, NULL, 1, NULL, 0, &hi)) < 0 ||
        (rc = ox_affine(x, v, 1 / alpha, 0, &s)) < 0 ||
        (rc = ox_emit(x, "exp", &s, 1, NULL, 1, NULL, 0, &e)) < 0 ||
        (rc = ox_affine(x, e, alpha, -alpha, &en)) < 0 ||
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
    return ox_select(x, pos, v, m, ox_out0(x), NULL);
}

/* ThresholdedRelu: X > alpha ? X : 0. */
static int t_thresholded_relu(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *pos, *zero;
    int rc;
    if ((rc = positive(x, v, ox_float(x, "alpha"), &pos)) < 0 ||
        (rc = ox_scalar(x, v->meta.dtype, 0, &zero)) < 0)
        return rc;
    return ox_select(x, pos, v, zero, ox_out0(x), NULL);
}

/* Softplus: log(exp(X) + 1); Softsign: X / (1 + |X|). */
static int t_softplus(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *e, *e1;
    const char *o = ox_out0(x);
    int rc;
    if ((rc = ox_emit(x, "exp", &v, 1, NULL, 1, NULL, 0, &e)) < 0 ||
        (rc = ox_affine(x, e, 1, 1, &e1)) < 0)
        return rc;
    return ox_emit(x, "log", &e1, 1, &o, 1, NULL, 0, NULL);
}

static int t_softsign(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *a, *a1;
    const char *o = ox_out0(x);
    int rc;
    if ((rc = ox_emit(x, "abs", &v, 1, NULL, 1, NULL, 0, &a)) < 0 ||
        (rc = ox_affine(x, a, 1, 1, &a1)) < 0)
        return rc;
    return ox_emit(x, "div", (struct ox_val *[]){v, a1}, 2, &o, 1, NULL, 0, NULL);
}

/* IsNaN: X != X. */
static int t_isnan(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    const char *o = ox_out0(x);
    return ox_emit(x, "not_equal", (struct ox_val *[]){v, v}, 2, &o, 1, NULL, 0, NULL);
}

/* IsInf: X equal to +inf (detect_positive) or to -inf (detect_negative). */
static int t_isinf(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *pinf, *ninf, *p = NULL, *m = NULL;
    int64_t pos = ox_int(x, "detect_positive"), neg = ox_int(x, "detect_negative");
    int rc;
    if (!ox_is_float(v->meta.dtype))
        return ox_fail(x, VQ_EINVAL, "the input is %s, not a floating-point tensor",
                       vq_dtype_name(v->meta.dtype));
    const char *o = ox_out0(x);
    const char *po = pos && !neg ? o : NULL, *mo = neg && !pos ? o : NULL;
    if (!pos && !neg) /* nothing detected: all false (X < X is, NaN too) */
        return ox_emit(x, "less", (struct ox_val *[]){v, v}, 2, &o, 1, NULL, 0, NULL);
    if (pos &&
        ((rc = ox_scalar(x, v->meta.dtype, INFINITY, &pinf)) < 0 ||
         (rc = ox_emit(x, "equal", (struct ox_val *[]){v, pinf}, 2, &po, 1, NULL, 0, &p)) < 0))
        return rc;
    if (neg &&
        ((rc = ox_scalar(x, v->meta.dtype, -INFINITY, &ninf)) < 0 ||
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
    if ((rc = ox_cast(x, &vf, ox_is_float(dt) ? dt : VQ_F64)) < 0 ||
        (rc = ox_scalar(x, vf->meta.dtype, -lambd, &lov)) < 0 ||
        (rc = ox_scalar(x, vf->meta.dtype, lambd, &hiv)) < 0 ||
        (rc = ox_scalar(x, vf->meta.dtype, 0, &zero)) < 0 ||
        (rc = ox_emit(x, "less", (struct ox_val *[]){vf, lov}, 2, NULL, 1, NULL, 0, &lo)) < 0 ||
        (rc = ox_emit(x, "greater", (struct ox_val *[]){vf, hiv}, 2, NULL, 1, NULL, 0, &hi)) < 0 ||
        (rc = ox_affine(x, vf, 1, bias, &up)) < 0 || (rc = ox_affine(x, vf, 1, -bias, &down)) < 0 ||
        (rc = ox_select(x, hi, down, zero, NULL, &mid)) < 0)
        return rc;
    if (ox_is_float(dt))
        return ox_select(x, lo, up, mid, ox_out0(x), NULL);
    struct ox_val *r;
    vq_attr c = VQ_ATTR_S("dtype", vq_dtype_name(dt));
    const char *o = ox_out0(x);
    if ((rc = ox_select(x, lo, up, mid, NULL, &r)) < 0)
        return rc;
    return ox_emit(x, "cast", &r, 1, &o, 1, &c, 1, NULL);
}

/* Sign: where(X > 0, 1, where(X < 0, -1, X * 0)): NaN stays NaN, zeros
 * stay zero, and the gradient is 0 everywhere (X * 0's). */
static int t_sign(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *zero, *one, *minus, *pos, *neg, *nil, *inner;
    vq_dtype dt = v->meta.dtype;
    const char *o = ox_out0(x);
    int rc;
    if (dt == VQ_BOOL)
        return ox_fail(x, VQ_EINVAL, "X is bool; Sign takes numbers");
    if ((rc = ox_scalar(x, dt, 0, &zero)) < 0 || (rc = ox_scalar(x, dt, 1, &one)) < 0 ||
        (rc = ox_scalar(x, dt, -1, &minus)) < 0 ||
        (rc = ox_emit(x, "greater", (struct ox_val *[]){v, zero}, 2, NULL, 1, NULL, 0, &pos)) < 0 ||
        (rc = ox_emit(x, "less", (struct ox_val *[]){v, zero}, 2, NULL, 1, NULL, 0, &neg)) < 0 ||
        (rc = ox_emit(x, "mul", (struct ox_val *[]){v, zero}, 2, NULL, 1, NULL, 0, &nil)) < 0 ||
        (rc = ox_select(x, neg, minus, nil, NULL, &inner)) < 0)
        return rc;
    return ox_select(x, pos, one, inner, o, NULL);
}

static int t_cast(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t to = ox_int(x, "to");
    vq_dtype dt;
    if (!vq__onnx_dtype((int32_t)to, &dt))
        return ox_fail(x, VQ_ENOSYS, "cast to %s", vq__onnx_type_name((int32_t)to));
    vq_attr a = VQ_ATTR_S("dtype", vq_dtype_name(dt));
    const char *o = ox_out0(x);
    return ox_emit(x, "cast", &v, 1, &o, 1, &a, 1, NULL);
}

/* Mod(A, B; fmod): mod, whose fmod false is Python's % and true C's fmod,
 * as ONNX's. */
static int t_mod(struct ox *x)
{
    struct ox_val *in[2] = {ox_input(x, 0), ox_input(x, 1)};
    vq_attr a = VQ_ATTR_B("fmod", ox_int(x, "fmod") != 0);
    const char *o = ox_out0(x);
    return ox_emit(x, "mod", in, 2, &o, 1, &a, 1, NULL);
}

/* CastLike(input, target_type): cast to the dtype of target_type, whose
 * values are not read. */
static int t_cast_like(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    vq_attr a = VQ_ATTR_S("dtype", vq_dtype_name(ox_input(x, 1)->meta.dtype));
    const char *o = ox_out0(x);
    return ox_emit(x, "cast", &v, 1, &o, 1, &a, 1, NULL);
}

static int t_identity(struct ox *x)
{
    return ox_alias(x, ox_out0(x), ox_input(x, 0));
}

/* ---- the rows ---- */

#define UNARY(name, type) const struct ox_op ox_op_##name = OX_ROW(t_unary, type, 1, 1, true, NULL);
/* axis: the broadcast of opsets before 7, refused */
#define BINARY(name, type)            \
    const struct ox_op ox_op_##name = \
        OX_ROW(t_binary, type, 2, 2, true, OX_ATTRS(OX_INT("axis", -1)));
#define VARIADIC(name, type) \
    const struct ox_op ox_op_##name = OX_ROW(t_variadic, type, 1, OX_ANY, true, NULL);

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
const struct ox_op ox_op_Sigmoid = OX_ROW(t_sigmoid, NULL, 1, 1, true, NULL);
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
const struct ox_op ox_op_Where = OX_ROW(t_where, NULL, 3, 3, true, NULL);
const struct ox_op ox_op_Neg = OX_ROW(t_neg, NULL, 1, 1, true, NULL);
/* min and max: attributes before opset 11, inputs since */
const struct ox_op ox_op_Clip = OX_ROW(t_clip, NULL, 1, 3, true,
                                       OX_ATTRS(OX_FLOAT("min", -INFINITY, .until = 11),
                                                OX_FLOAT("max", INFINITY, .until = 11)));
const struct ox_op ox_op_LeakyRelu =
    OX_ROW(t_leaky_relu, NULL, 1, 1, true, OX_ATTRS(OX_FLOAT("alpha", 0.01)));
const struct ox_op ox_op_HardSigmoid =
    OX_ROW(t_hard_sigmoid, NULL, 1, 1, true,
           OX_ATTRS(OX_FLOAT("alpha", 0.2), OX_FLOAT("beta", 0.5)));
const struct ox_op ox_op_HardSwish = OX_ROW(t_hard_swish, NULL, 1, 1, true, NULL);
const struct ox_op ox_op_Pow = OX_ROW(t_pow, NULL, 2, 2, true, NULL);
const struct ox_op ox_op_Elu = OX_ROW(t_elu, NULL, 1, 1, true, OX_ATTRS(OX_FLOAT("alpha", 1)));
const struct ox_op ox_op_Selu = OX_ROW(t_selu, NULL, 1, 1, true,
                                       OX_ATTRS(OX_FLOAT("alpha", 1.67326319217681884765625),
                                                OX_FLOAT("gamma", 1.05070102214813232421875)));
const struct ox_op ox_op_Celu = OX_ROW(t_celu, NULL, 1, 1, true, OX_ATTRS(OX_FLOAT("alpha", 1)));
const struct ox_op ox_op_PRelu = OX_ROW(t_prelu, NULL, 2, 2, true, NULL);
const struct ox_op ox_op_ThresholdedRelu =
    OX_ROW(t_thresholded_relu, NULL, 1, 1, true, OX_ATTRS(OX_FLOAT("alpha", 1)));
const struct ox_op ox_op_Softplus = OX_ROW(t_softplus, NULL, 1, 1, true, NULL);
const struct ox_op ox_op_Softsign = OX_ROW(t_softsign, NULL, 1, 1, true, NULL);
const struct ox_op ox_op_IsNaN = OX_ROW(t_isnan, NULL, 1, 1, true, NULL);
const struct ox_op ox_op_IsInf =
    OX_ROW(t_isinf, NULL, 1, 1, true,
           OX_ATTRS(OX_INT("detect_positive", 1), OX_INT("detect_negative", 1)));
const struct ox_op ox_op_Shrink =
    OX_ROW(t_shrink, NULL, 1, 1, true, OX_ATTRS(OX_FLOAT("lambd", 0.5), OX_FLOAT("bias", 0)));
const struct ox_op ox_op_Sign = OX_ROW(t_sign, NULL, 1, 1, true, NULL);
const struct ox_op ox_op_Cast = OX_ROW(t_cast, NULL, 1, 1, true, OX_ATTRS(OX_INT("to", -1)));
const struct ox_op ox_op_Mod = OX_ROW(t_mod, NULL, 2, 2, true, OX_ATTRS(OX_INT("fmod", 0)));
const struct ox_op ox_op_CastLike = OX_ROW(t_cast_like, NULL, 2, 2, true, NULL);
/* a sequence or an optional too: its alias */
const struct ox_op ox_op_Identity = {.fn = t_identity,
                                     .min_in = 1,
                                     .max_in = 1,
                                     .out0 = true,
                                     .containers = true};
