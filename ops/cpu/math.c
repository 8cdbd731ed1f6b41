/* Elementwise math (exp, log, sqrt, reciprocal, erf, power) with one
 * gradient op for all of them, and log_softmax along an axis.
 *
 * math_grad(X, Out, dOut; op, exponent) -> dX takes both the input and
 * the output, so that each derivative is computed from whichever is
 * exact: exp's from Out, log's from X, sqrt's and reciprocal's from Out,
 * erf's and power's from X. log_softmax works like softmax (activation.c)
 * in double per line: Out = X - max - log(sum exp(X - max)); its gradient
 * is dX = dOut - exp(Out) * sum(dOut). */
#include "../internal.h"
#include "../params.h"

#include <math.h>
#include <string.h>

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};
static const char *const grad_in[] = {"X", "Out", "dOut"};
static const char *const dx_out[] = {"dX"};
static const char *const lsm_grad_in[] = {"Out", "dOut"};

static const char *const math_names[] = {"exp", "log", "sqrt", "reciprocal", "erf", "power"};

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

#define MATH(T, EXP, LOG, SQRT, ERF, POW)                                               \
    static void math_##T(int op, T e, const T *x, T *o, int64_t n)                      \
    {                                                                                   \
        switch (op) {                                                                   \
        case VQ__MATH_EXP: for (int64_t i = 0; i < n; i++) o[i] = EXP(x[i]); break;     \
        case VQ__MATH_LOG: for (int64_t i = 0; i < n; i++) o[i] = LOG(x[i]); break;     \
        case VQ__MATH_SQRT: for (int64_t i = 0; i < n; i++) o[i] = SQRT(x[i]); break;   \
        case VQ__MATH_RECIPROCAL:                                                       \
            for (int64_t i = 0; i < n; i++)                                             \
                o[i] = (T)1 / x[i];                                                     \
            break;                                                                      \
        case VQ__MATH_ERF: for (int64_t i = 0; i < n; i++) o[i] = ERF(x[i]); break;     \
        default: for (int64_t i = 0; i < n; i++) o[i] = POW(x[i], e); break;            \
        }                                                                               \
    }

MATH(float, expf, logf, sqrtf, erff, powf)
MATH(double, exp, log, sqrt, erf, pow)

static int math_kernel(const vq__kcall *k)
{
    const vq__math_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    if (x->dtype == VQ_F32)
        math_float(p->op, (float)p->exponent, x->data, o->data, x->numel);
    else
        math_double(p->op, p->exponent, x->data, o->data, x->numel);
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
        return vq__attr_fail(c, "op", "\"%s\" is not exp, log, sqrt, reciprocal, erf or power",
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

#define MATH_GRAD(T, EXP, POW)                                                             \
    static void math_grad_##T(int op, T e, const T *x, const T *y, const T *g, T *d,       \
                              int64_t n)                                                   \
    {                                                                                      \
        switch (op) {                                                                      \
        case VQ__MATH_EXP: for (int64_t i = 0; i < n; i++) d[i] = g[i] * y[i]; break;      \
        case VQ__MATH_LOG: for (int64_t i = 0; i < n; i++) d[i] = g[i] / x[i]; break;      \
        case VQ__MATH_SQRT:                                                                \
            for (int64_t i = 0; i < n; i++)                                                \
                d[i] = g[i] / ((T)2 * y[i]);                                               \
            break;                                                                         \
        case VQ__MATH_RECIPROCAL:                                                          \
            for (int64_t i = 0; i < n; i++)                                                \
                d[i] = -g[i] * y[i] * y[i];                                                \
            break;                                                                         \
        case VQ__MATH_ERF:                                                                 \
            for (int64_t i = 0; i < n; i++)                                                \
                d[i] = g[i] * (T)TWO_OVER_SQRT_PI * EXP(-x[i] * x[i]);                     \
            break;                                                                         \
        default:                                                                           \
            for (int64_t i = 0; i < n; i++)                                                \
                d[i] = g[i] * e * POW(x[i], e - (T)1);                                     \
            break;                                                                         \
        }                                                                                  \
    }

MATH_GRAD(float, expf, powf)
MATH_GRAD(double, exp, pow)

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

/* ---- log_softmax ---- */

static const vq__attr_spec axis_attrs[] = {
    {"axis", VQ_ATTR_INT, false, "-1"},
};

static int lsm_axis(vq__infer *c)
{
    if (c->in[0].ndim < 1)
        return vq__in_fail(c, 0, "has 0 dims, log_softmax needs at least 1");
    vq__softmax_params *p = c->params;
    return vq__axis(c, "axis", vq__attr_int(c, "axis", -1), c->in[0].ndim, &p->axis);
}

static int lsm_infer(vq__infer *c)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = lsm_axis(c)) < 0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

static int lsm_grad_infer(vq__infer *c)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0 ||
        (rc = vq__check_same_shape(c, 0, 1)) < 0 || (rc = lsm_axis(c)) < 0)
        return rc;
    c->out[0] = c->in[0];
    for (int i = 0; i < c->out[0].ndim; i++)
        if (c->out[0].shape[i] < 0)
            c->out[0].shape[i] = c->in[1].shape[i];
    return 0;
}

/* The tensor as [outer, len, inner] around axis. */
static void lines_of(const vq_tensor *t, int axis, int64_t *outer, int64_t *len, int64_t *inner)
{
    *outer = 1;
    *len = t->shape[axis];
    *inner = 1;
    for (int i = 0; i < axis; i++)
        *outer *= t->shape[i];
    for (int i = axis + 1; i < t->ndim; i++)
        *inner *= t->shape[i];
}

#define LOG_SOFTMAX(T)                                                                     \
    static void lsm_##T(const T *x, T *o, int64_t outer, int64_t len, int64_t inner)       \
    {                                                                                      \
        for (int64_t a = 0; a < outer; a++)                                                \
            for (int64_t b = 0; b < inner; b++) {                                          \
                const T *xl = x + a * len * inner + b;                                     \
                T *ol = o + a * len * inner + b;                                           \
                double max = -INFINITY, sum = 0;                                           \
                for (int64_t j = 0; j < len; j++)                                          \
                    if (xl[j * inner] > max)                                               \
                        max = xl[j * inner];                                               \
                for (int64_t j = 0; j < len; j++)                                          \
                    sum += exp((double)xl[j * inner] - max);                               \
                double shift = max + log(sum);                                             \
                for (int64_t j = 0; j < len; j++)                                          \
                    ol[j * inner] = (T)((double)xl[j * inner] - shift);                    \
            }                                                                              \
    }                                                                                      \
    static void lsm_grad_##T(const T *y, const T *g, T *d, int64_t outer, int64_t len,     \
                             int64_t inner)                                                \
    {                                                                                      \
        for (int64_t a = 0; a < outer; a++)                                                \
            for (int64_t b = 0; b < inner; b++) {                                          \
                int64_t at = a * len * inner + b;                                          \
                double sum = 0;                                                            \
                for (int64_t j = 0; j < len; j++)                                          \
                    sum += (double)g[at + j * inner];                                      \
                for (int64_t j = 0; j < len; j++) {                                        \
                    int64_t i = at + j * inner;                                            \
                    d[i] = (T)((double)g[i] - exp((double)y[i]) * sum);                    \
                }                                                                          \
            }                                                                              \
    }

LOG_SOFTMAX(float)
LOG_SOFTMAX(double)

static int lsm_kernel(const vq__kcall *k)
{
    const vq__softmax_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    int64_t outer, len, inner;
    lines_of(x, p->axis, &outer, &len, &inner);
    if (x->dtype == VQ_F32)
        lsm_float(x->data, o->data, outer, len, inner);
    else
        lsm_double(x->data, o->data, outer, len, inner);
    return 0;
}

static int lsm_grad_kernel(const vq__kcall *k)
{
    const vq__softmax_params *p = k->params;
    vq_tensor *y = k->in[0], *g = k->in[1], *d = k->out[0];
    int64_t outer, len, inner;
    lines_of(y, p->axis, &outer, &len, &inner);
    if (y->dtype == VQ_F32)
        lsm_grad_float(y->data, g->data, d->data, outer, len, inner);
    else
        lsm_grad_double(y->data, g->data, d->data, outer, len, inner);
    return 0;
}

static int lsm_grad(const vq__grad *g)
{
    if (!g->din[0])
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output Out");
    const char *in[2] = {g->out[0], g->dout[0]};
    return vq__emit(g, "log_softmax_grad", in, 2, &g->din[0], 1, g->attrs, g->nattrs);
}

/* ---- the table ---- */

#define MATH_OP(name, c, at, nat)                                                           \
    {.type = name, .in_slots = x_in, .nin_slots = 1, .out_slots = out_slot, .nout_slots = 1, \
     .flags = VQ__INPLACE_OK, .code = c, .attrs = at, .nattrs = nat,                        \
     .params_size = sizeof(vq__math_params), .infer = math_infer, .kernel = {math_kernel},  \
     .grad = math_grad}

const vq__op_def vq__ops_math[] = {
    MATH_OP("exp", VQ__MATH_EXP, NULL, 0),
    MATH_OP("log", VQ__MATH_LOG, NULL, 0),
    MATH_OP("sqrt", VQ__MATH_SQRT, NULL, 0),
    MATH_OP("reciprocal", VQ__MATH_RECIPROCAL, NULL, 0),
    MATH_OP("erf", VQ__MATH_ERF, NULL, 0),
    MATH_OP("power", VQ__MATH_POWER, power_attrs, 1),
    {.type = "math_grad", .in_slots = grad_in, .nin_slots = 3, .out_slots = dx_out,
     .nout_slots = 1, .flags = VQ__INPLACE_OK, .attrs = grad_attrs, .nattrs = 2,
     .params_size = sizeof(vq__math_params), .infer = grad_infer, .kernel = {grad_kernel}},
    {.type = "log_softmax", .in_slots = x_in, .nin_slots = 1, .out_slots = out_slot,
     .nout_slots = 1, .attrs = axis_attrs, .nattrs = 1,
     .params_size = sizeof(vq__softmax_params), .infer = lsm_infer, .kernel = {lsm_kernel},
     .grad = lsm_grad},
    {.type = "log_softmax_grad", .in_slots = lsm_grad_in, .nin_slots = 2, .out_slots = dx_out,
     .nout_slots = 1, .attrs = axis_attrs, .nattrs = 1,
     .params_size = sizeof(vq__softmax_params), .infer = lsm_grad_infer,
     .kernel = {lsm_grad_kernel}},
    {0},
};
