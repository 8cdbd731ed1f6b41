/* Elementwise math (exp, log, sqrt, reciprocal, erf, power; sin, cos, tan,
 * asin, acos, atan, sinh, cosh, asinh, acosh, atanh; floor, ceil, round)
 * with one gradient op for all of them. round rounds halves to even (the
 * current rounding mode's nearbyint, as ONNX's Round); the gradient of
 * floor, ceil and round is zero.
 *
 * math_grad(X, Out, dOut; op, exponent) -> dX takes both the input and
 * the output, so that each derivative is computed from whichever is
 * exact: exp's from Out, log's from X, sqrt's and reciprocal's from Out,
 * erf's, power's and the others' from X, except tan's (1 + Out^2).
 * (log_softmax is with softmax, activation.c.) The f32 exp, log and erf
 * are ops/math/vmath.c's vectorized functions (within 1 ulp); the rest,
 * and f64, call libm per element. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"
#include "../math/vmath.h"

#include <math.h>
#include <string.h>

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};
static const char *const grad_in[] = {"X", "Out", "dOut"};
static const char *const dx_out[] = {"dX"};

static const char *const math_names[] = {"exp",   "log",   "sqrt",  "reciprocal", "erf",
                                         "power", "sin",   "cos",   "tan",        "asin",
                                         "acos",  "atan",  "sinh",  "cosh",       "asinh",
                                         "acosh", "atanh", "floor", "ceil",       "round"};

/* ---- the forward ops ---- */

static const vq__attr_spec power_attrs[] = {
    {"exponent", VQ_ATTR_FLOAT, true, NULL},
};

static int math_infer(vq__infer *c)
{
    int rc = vq__check_dtype(c, 0, VQ__FLOATS);
    if (rc < 0)
        return rc;
    vq__math_params *p = c->params;
    p->op = c->def->code;
    p->exponent = p->op == VQ__MATH_POWER ? vq__attr_float(c, "exponent", 1) : 1;
    c->out[0] = c->in[0];
    return 0;
}

/* A case of math_T: function F of math.h (the f-suffixed one for float). */
#define LIBM_F(N, F)                    \
    case VQ__MATH_##N:                  \
        for (int64_t i = 0; i < n; i++) \
            o[i] = F(x[i]);             \
        break;

#define MATH(T, EXP, LOG, SQRT, ERF, POW, SFX)                     \
    static void math_##T(int op, T e, const T *x, T *o, int64_t n) \
    {                                                              \
        switch (op) {                                              \
        case VQ__MATH_EXP:                                         \
            for (int64_t i = 0; i < n; i++)                        \
                o[i] = EXP(x[i]);                                  \
            break;                                                 \
        case VQ__MATH_LOG:                                         \
            for (int64_t i = 0; i < n; i++)                        \
                o[i] = LOG(x[i]);                                  \
            break;                                                 \
        case VQ__MATH_SQRT:                                        \
            for (int64_t i = 0; i < n; i++)                        \
                o[i] = SQRT(x[i]);                                 \
            break;                                                 \
        case VQ__MATH_RECIPROCAL:                                  \
            for (int64_t i = 0; i < n; i++)                        \
                o[i] = (T)1 / x[i];                                \
            break;                                                 \
        case VQ__MATH_ERF:                                         \
            for (int64_t i = 0; i < n; i++)                        \
                o[i] = ERF(x[i]);                                  \
            break;                                                 \
        case VQ__MATH_POWER:                                       \
            for (int64_t i = 0; i < n; i++)                        \
                o[i] = POW(x[i], e);                               \
            break;                                                 \
            LIBM_F(SIN, sin##SFX)                                  \
            LIBM_F(COS, cos##SFX)                                  \
            LIBM_F(TAN, tan##SFX)                                  \
            LIBM_F(ASIN, asin##SFX)                                \
            LIBM_F(ACOS, acos##SFX)                                \
            LIBM_F(ATAN, atan##SFX)                                \
            LIBM_F(SINH, sinh##SFX)                                \
            LIBM_F(COSH, cosh##SFX)                                \
            LIBM_F(ASINH, asinh##SFX)                              \
            LIBM_F(ACOSH, acosh##SFX)                              \
            LIBM_F(ATANH, atanh##SFX)                              \
            LIBM_F(FLOOR, floor##SFX)                              \
            LIBM_F(CEIL, ceil##SFX)                                \
            LIBM_F(ROUND, nearbyint##SFX)                          \
        }                                                          \
    }

MATH(float, expf, logf, sqrtf, erff, powf, f)
MATH(double, exp, log, sqrt, erf, pow, )

void vq__math_apply(int op, double exponent, vq_dtype dt, const void *x, void *o, int64_t n)
{
    const struct vq__vmath *vm = vq__vmath();
    vq__vmath_fn f32 = op == VQ__MATH_EXP   ? vm->exp
                       : op == VQ__MATH_LOG ? vm->log
                       : op == VQ__MATH_ERF ? vm->erf
                                            : NULL;
    if (dt == VQ_F32 && f32)
        f32(x, o, n);
    else if (dt == VQ_F32)
        math_float(op, (float)exponent, x, o, n);
    else
        math_double(op, exponent, x, o, n);
}

static int math_kernel(const vq__kcall *k)
{
    const vq__math_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    vq__math_apply(p->op, p->exponent, x->dtype, x->data, o->data, x->numel);
    return 0;
}

static int math_grad(const vq__grad *g)
{
    if (!g->din[0])
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output Out");
    const char *in[3] = {g->in[0], g->out[0], g->dout[0]};
    double e = 1;
    for (int a = 0; a < g->nattrs; a++)
        if (!strcmp(g->attrs[a].name, "exponent"))
            e = g->attrs[a].f;
    vq_attr at[2] = {VQ_ATTR_S("op", math_names[g->def->code]), VQ_ATTR_F("exponent", e)};
    return vq__emit(g, "math_grad", in, 3, &g->din[0], 1, at, 2);
}

/* ---- math_grad ---- */

static const vq__attr_spec grad_attrs[] = {
    {"op", VQ_ATTR_STRING, true, NULL},
    {"exponent", VQ_ATTR_FLOAT, false, "1"},
};

static int grad_infer(vq__infer *c)
{
    vq__math_params *p = c->params;
    const vq_attr *op = vq__attr_find(c, "op");
    p->op = -1;
    for (int i = 0; i < (int)(sizeof math_names / sizeof math_names[0]); i++)
        if (!strcmp(op->s, math_names[i]))
            p->op = i;
    if (p->op < 0)
        return vq__attr_fail(c, "op",
                             "\"%s\" is not one of the math ops (exp, log, sqrt, "
                             "reciprocal, erf, power, sin ... atanh, floor, ceil, round)",
                             op->s);
    p->exponent = vq__attr_float(c, "exponent", 1);
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0 ||
        (rc = vq__check_same_dtype(c, 0, 2)) < 0 || (rc = vq__check_same_shape(c, 0, 1)) < 0 ||
        (rc = vq__check_same_shape(c, 0, 2)) < 0)
        return rc;
    c->out[0] = c->in[0];
    for (int i = 0; i < c->out[0].ndim; i++)
        if (c->out[0].shape[i] < 0)
            c->out[0].shape[i] = c->in[2].shape[i];
    return 0;
}

/* 2 / sqrt(pi) */
#define TWO_OVER_SQRT_PI 1.1283791670955126

/* d = g * the derivative at x (tan's from y), by code, in T. */
#define DERIV(T, N, F)                    \
    case VQ__MATH_##N:                    \
        for (int64_t i = 0; i < n; i++) { \
            T v = x[i];                   \
            (void)v;                      \
            d[i] = g[i] * (F);            \
        }                                 \
        break;

#define MATH_GRAD(T, EXP, POW, SFX)                                                             \
    static void math_grad_##T(int op, T e, const T *x, const T *y, const T *g, T *d, int64_t n) \
    {                                                                                           \
        switch (op) {                                                                           \
        case VQ__MATH_EXP:                                                                      \
            for (int64_t i = 0; i < n; i++)                                                     \
                d[i] = g[i] * y[i];                                                             \
            break;                                                                              \
        case VQ__MATH_LOG:                                                                      \
            for (int64_t i = 0; i < n; i++)                                                     \
                d[i] = g[i] / x[i];                                                             \
            break;                                                                              \
        case VQ__MATH_SQRT:                                                                     \
            for (int64_t i = 0; i < n; i++)                                                     \
                d[i] = g[i] / ((T)2 * y[i]);                                                    \
            break;                                                                              \
        case VQ__MATH_RECIPROCAL:                                                               \
            for (int64_t i = 0; i < n; i++)                                                     \
                d[i] = -g[i] * y[i] * y[i];                                                     \
            break;                                                                              \
        case VQ__MATH_ERF:                                                                      \
            for (int64_t i = 0; i < n; i++)                                                     \
                d[i] = g[i] * (T)TWO_OVER_SQRT_PI * EXP(-x[i] * x[i]);                          \
            break;                                                                              \
        case VQ__MATH_POWER:                                                                    \
            for (int64_t i = 0; i < n; i++)                                                     \
                d[i] = g[i] * e * POW(x[i], e - (T)1);                                          \
            break;                                                                              \
        case VQ__MATH_TAN:                                                                      \
            for (int64_t i = 0; i < n; i++)                                                     \
                d[i] = g[i] * ((T)1 + y[i] * y[i]);                                             \
            break;                                                                              \
            DERIV(T, SIN, cos##SFX(v))                                                          \
            DERIV(T, COS, -sin##SFX(v))                                                         \
            DERIV(T, ASIN, (T)1 / sqrt##SFX((T)1 - v * v))                                      \
            DERIV(T, ACOS, (T)-1 / sqrt##SFX((T)1 - v * v))                                     \
            DERIV(T, ATAN, (T)1 / ((T)1 + v * v))                                               \
            DERIV(T, SINH, cosh##SFX(v))                                                        \
            DERIV(T, COSH, sinh##SFX(v))                                                        \
            DERIV(T, ASINH, (T)1 / sqrt##SFX(v * v + (T)1))                                     \
            DERIV(T, ACOSH, (T)1 / (sqrt##SFX(v - (T)1) * sqrt##SFX(v + (T)1)))                 \
            DERIV(T, ATANH, (T)1 / ((T)1 - v * v))                                              \
        default: /* floor, ceil, round: flat between the steps */                               \
            for (int64_t i = 0; i < n; i++)                                                     \
                d[i] = (T)0;                                                                    \
            break;                                                                              \
        }                                                                                       \
    }

MATH_GRAD(float, expf, powf, f)
MATH_GRAD(double, exp, pow, )

static int grad_kernel(const vq__kcall *k)
{
    const vq__math_params *p = k->params;
    vq_tensor *x = k->in[0], *y = k->in[1], *g = k->in[2], *d = k->out[0];
    if (x->dtype == VQ_F32)
        math_grad_float(p->op, (float)p->exponent, x->data, y->data, g->data, d->data,
                        x->numel);
    else
        math_grad_double(p->op, p->exponent, x->data, y->data, g->data, d->data, x->numel);
    return 0;
}

/* ---- the table ---- */

#define MATH_OP(name, c, at, nat)                                                               \
    {                                                                                           \
        .type = name, .in_slots = x_in, .nin_slots = 1, .out_slots = out_slot, .nout_slots = 1, \
        .flags = VQ__INPLACE_OK, .code = c, .attrs = at, .nattrs = nat,                         \
        .params_size = sizeof(vq__math_params), .infer = math_infer, .kernel = {math_kernel},   \
        .cuda = VQ__CUDA_OP(vq__math_gpu), .grad = math_grad                                    \
    }

const vq__op_def vq__ops_math[] = {
    MATH_OP("exp", VQ__MATH_EXP, NULL, 0),
    MATH_OP("log", VQ__MATH_LOG, NULL, 0),
    MATH_OP("sqrt", VQ__MATH_SQRT, NULL, 0),
    MATH_OP("reciprocal", VQ__MATH_RECIPROCAL, NULL, 0),
    MATH_OP("erf", VQ__MATH_ERF, NULL, 0),
    MATH_OP("power", VQ__MATH_POWER, power_attrs, 1),
    MATH_OP("sin", VQ__MATH_SIN, NULL, 0),
    MATH_OP("cos", VQ__MATH_COS, NULL, 0),
    MATH_OP("tan", VQ__MATH_TAN, NULL, 0),
    MATH_OP("asin", VQ__MATH_ASIN, NULL, 0),
    MATH_OP("acos", VQ__MATH_ACOS, NULL, 0),
    MATH_OP("atan", VQ__MATH_ATAN, NULL, 0),
    MATH_OP("sinh", VQ__MATH_SINH, NULL, 0),
    MATH_OP("cosh", VQ__MATH_COSH, NULL, 0),
    MATH_OP("asinh", VQ__MATH_ASINH, NULL, 0),
    MATH_OP("acosh", VQ__MATH_ACOSH, NULL, 0),
    MATH_OP("atanh", VQ__MATH_ATANH, NULL, 0),
    MATH_OP("floor", VQ__MATH_FLOOR, NULL, 0),
    MATH_OP("ceil", VQ__MATH_CEIL, NULL, 0),
    MATH_OP("round", VQ__MATH_ROUND, NULL, 0),
    {.type = "math_grad",
     .in_slots = grad_in,
     .nin_slots = 3,
     .out_slots = dx_out,
     .nout_slots = 1,
     .flags = VQ__INPLACE_OK,
     .attrs = grad_attrs,
     .nattrs = 2,
     .params_size = sizeof(vq__math_params),
     .infer = grad_infer,
     .kernel = {grad_kernel},
     .cuda = VQ__CUDA_OP(vq__math_grad_gpu)},
    {0},
};
