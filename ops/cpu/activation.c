/* Activations: relu, sigmoid, tanh, silu, hard_sigmoid and hard_swish
 * elementwise, softmax and log_softmax along one axis, and their gradient
 * ops. The f32 sigmoid, tanh and silu are ops/math/vmath.c's vectorized
 * functions (AVX-512, AVX2 or portable by vq__isa()).
 *
 * Most gradient ops take the forward op's output, not its input (relu_grad,
 * sigmoid_grad, tanh_grad, softmax_grad all have a closed form in Out), so
 * autodiff keeps one tensor alive per activation instead of two; silu's,
 * hard_sigmoid's and hard_swish's take the input.
 *
 * Softmax subtracts the max along the axis before exponentiating, so no exp
 * overflows, and sums in double also for f32 (whose contiguous lines take
 * vmath's exp_sub). The softmax kernels walk each
 * line along the axis with stride `inner` (the product of the dims after
 * it); every pass reads a line's element before it writes the same element,
 * which is what makes running in place safe. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"
#include "../shape_shared.h" /* vq__lines_of */
#include "../math/vmath.h"

#include <math.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};
static const char *const grad_in[] = {"Out", "dOut"};
static const char *const x_grad_in[] = {"X", "dOut"};
static const char *const grad_out[] = {"dX"};

/* Shape of a and b, which infer checked to match: each dim from whichever
 * of the two knows it (-1 if neither does). */
static void merge_known_dims(const vq__meta *a, const vq__meta *b, vq__meta *out)
{
    *out = *a;
    for (int i = 0; i < a->ndim; i++)
        if (out->shape[i] < 0)
            out->shape[i] = b->shape[i];
}

/* ---- relu, sigmoid, tanh, silu, hard_sigmoid, hard_swish ---- */

static const vq__attr_spec hard_sigmoid_attrs[] = {
    {"alpha", VQ_ATTR_FLOAT, false, "0.2"},
    {"beta", VQ_ATTR_FLOAT, false, "0.5"},
};

/* The op's code, and hard_sigmoid's alpha and beta (hard_swish's fixed
 * 1/6 and 1/2, ONNX's HardSwish). */
static void unary_params_of(vq__infer *c)
{
    vq__unary_params *p = c->params;
    p->op = c->def->code;
    p->alpha = 1.0 / 6;
    p->beta = 0.5;
    if (p->op == VQ__ACT_HARD_SIGMOID) {
        p->alpha = vq__attr_float(c, "alpha", 0.2);
        p->beta = vq__attr_float(c, "beta", 0.5);
    }
}

static int unary_infer(vq__infer *c)
{
    int rc = vq__check_dtype(c, 0, VQ__FLOATS);
    if (rc < 0)
        return rc;
    unary_params_of(c);
    c->out[0] = c->in[0];
    return 0;
}

/* clamp(a x + b, 0, 1), NaN kept (both compares are false for it); the
 * product and sum in T, as ONNX's reference computes them. */
#define HARD_SIGMOID(T, x, a, b) \
    ((T)(a) * (x) + (T)(b) < 0 ? (T)0 : (T)(a) * (x) + (T)(b) > 1 ? (T)1 : (T)(a) * (x) + (T)(b))

/* The plain loops: f64 all of them, f32 relu and the hard ones (the f32
 * transcendentals are ops/math/vmath.c's). relu keeps NaN (x < 0 is false
 * for it); sigmoid never exponentiates a positive number, so it cannot
 * overflow for large |x|; silu's exp(-x) overflows to inf for x below
 * -709, giving x / inf = -0. */
#define UNARY(T, EXP, TANH)                                                       \
    static void unary_##T(const vq__unary_params *p, const T *x, T *o, int64_t n) \
    {                                                                             \
        switch (p->op) {                                                          \
        case VQ__ACT_RELU:                                                        \
            for (int64_t i = 0; i < n; i++)                                       \
                o[i] = x[i] < 0 ? (T)0 : x[i];                                    \
            break;                                                                \
        case VQ__ACT_SIGMOID:                                                     \
            for (int64_t i = 0; i < n; i++) {                                     \
                T v = x[i];                                                       \
                if (v >= 0) {                                                     \
                    o[i] = (T)1 / ((T)1 + EXP(-v));                               \
                } else {                                                          \
                    T e = EXP(v);                                                 \
                    o[i] = e / ((T)1 + e);                                        \
                }                                                                 \
            }                                                                     \
            break;                                                                \
        case VQ__ACT_SILU:                                                        \
            for (int64_t i = 0; i < n; i++)                                       \
                o[i] = x[i] / ((T)1 + EXP(-x[i]));                                \
            break;                                                                \
        case VQ__ACT_HARD_SIGMOID:                                                \
            for (int64_t i = 0; i < n; i++)                                       \
                o[i] = HARD_SIGMOID(T, x[i], p->alpha, p->beta);                  \
            break;                                                                \
        case VQ__ACT_HARD_SWISH:                                                  \
            for (int64_t i = 0; i < n; i++)                                       \
                o[i] = x[i] * HARD_SIGMOID(T, x[i], p->alpha, p->beta);           \
            break;                                                                \
        default:                                                                  \
            for (int64_t i = 0; i < n; i++)                                       \
                o[i] = TANH(x[i]);                                                \
            break;                                                                \
        }                                                                         \
    }

UNARY(float, expf, tanhf)
UNARY(double, exp, tanh)

/* The f32 relu and hard ones again, vectorized: gcc keeps a loop whose
 * select depends on a float compare scalar while floating-point compares
 * may trap (its default), so these variants say they do not
 * (no-trapping-math changes no result: a compare with NaN is still false),
 * at the build's baseline, AVX2 and AVX-512, picked by vq__isa(). Without
 * contraction (ISO C mode; clang is told below) all give the same bits as
 * the plain loops. */
#if defined(__GNUC__) && !defined(__clang__)
#define ACT_VEC __attribute__((optimize("no-trapping-math", "vect-cost-model=dynamic")))
#else
#define ACT_VEC
#endif
#ifdef __clang__
#pragma clang fp contract(off)
#endif

#define SIMPLE_F32(NAME, ATTR)                                                                   \
    ACT_VEC ATTR static void NAME(int op, float a, float b, const float *x, float *o, int64_t n) \
    {                                                                                            \
        if (op == VQ__ACT_RELU) {                                                                \
            for (int64_t i = 0; i < n; i++)                                                      \
                o[i] = x[i] < 0 ? 0.f : x[i];                                                    \
        } else if (op == VQ__ACT_HARD_SIGMOID) {                                                 \
            for (int64_t i = 0; i < n; i++)                                                      \
                o[i] = HARD_SIGMOID(float, x[i], a, b);                                          \
        } else {                                                                                 \
            for (int64_t i = 0; i < n; i++)                                                      \
                o[i] = x[i] * HARD_SIGMOID(float, x[i], a, b);                                   \
        }                                                                                        \
    }

SIMPLE_F32(simple_f32, )
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define ACT_X86 1
SIMPLE_F32(simple_f32_avx2, __attribute__((target("avx2"))))
SIMPLE_F32(simple_f32_avx512, __attribute__((target("avx512f"))))
#endif

/* relu, hard_sigmoid or hard_swish (op) on n floats; x == o is allowed
 * (the dynamic cost model lets gcc check for overlap at run time and keep
 * the vector loop for an exact alias, which has none across lanes) */
static void simple_f32_best(const vq__unary_params *p, const float *x, float *o, int64_t n)
{
    float a = (float)p->alpha, b = (float)p->beta;
#ifdef ACT_X86
    if (vq__isa() >= VQ__ISA_AVX512) {
        simple_f32_avx512(p->op, a, b, x, o, n);
        return;
    }
    if (vq__isa() >= VQ__ISA_AVX2) {
        simple_f32_avx2(p->op, a, b, x, o, n);
        return;
    }
#endif
    simple_f32(p->op, a, b, x, o, n);
}

void vq__act_apply(const vq__unary_params *p, vq_dtype dt, const void *x, void *o, int64_t n)
{
    if (dt == VQ_F64) {
        unary_double(p, x, o, n);
        return;
    }
    const float *xf = x;
    float *of = o;
    const struct vq__vmath *vm = vq__vmath();
    switch (p->op) {
    case VQ__ACT_SIGMOID: vm->sigmoid(xf, of, n); break;
    case VQ__ACT_TANH: vm->tanh(xf, of, n); break;
    case VQ__ACT_SILU: vm->silu(xf, of, n); break;
    case VQ__ACT_RELU:
    case VQ__ACT_HARD_SIGMOID:
    case VQ__ACT_HARD_SWISH: simple_f32_best(p, xf, of, n); break;
    default: unary_float(p, xf, of, n); break;
    }
}

/* Elements [lo, hi) of a unary op's call (k). */
static int unary_part(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const vq__kcall *k = arg;
    vq_tensor *x = k->in[0], *o = k->out[0];
    size_t es = vq_dtype_size(x->dtype);
    vq__act_apply(k->params, x->dtype, (const char *)x->data + lo * es, (char *)o->data + lo * es,
                  hi - lo);
    return 0;
}

static int unary_kernel(const vq__kcall *k)
{
    int64_t n = k->in[0]->numel;
    if (n >= 2 * VQ__PAR_ELEMS)
        return vq__parallel_for(n, VQ__PAR_ELEMS, unary_part, (void *)k);
    return unary_part((void *)k, 0, n, 0);
}

/* relu_grad / sigmoid_grad / tanh_grad (Out, dOut) -> dX, and silu_grad /
 * hard_sigmoid_grad / hard_swish_grad (X, dOut) -> dX: the first three
 * have a closed form in Out, the last three do not (silu and hard_swish
 * are not one to one, and hard_sigmoid's is as cheap from X). */
static int unary_grad_infer(vq__infer *c)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0 ||
        (rc = vq__check_same_shape(c, 0, 1)) < 0)
        return rc;
    unary_params_of(c);
    merge_known_dims(&c->in[0], &c->in[1], &c->out[0]);
    return 0;
}

/* y is Out for relu, sigmoid and tanh, X for the others. The slope of
 * hard_sigmoid is alpha where 0 < alpha x + beta < 1, else 0; hard_swish's
 * is hard_sigmoid(x) plus x times that. */
#define UNARY_GRAD(T, EXP)                                                                         \
    static void unary_grad_##T(const vq__unary_params *p, const T *y, const T *g, T *d, int64_t n) \
    {                                                                                              \
        T a = (T)p->alpha, b = (T)p->beta;                                                         \
        switch (p->op) {                                                                           \
        case VQ__ACT_RELU: /* g[i] read either way: a select, vectorized */                        \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T gi = g[i];                                                                       \
                d[i] = y[i] > 0 ? gi : (T)0;                                                       \
            }                                                                                      \
            break;                                                                                 \
        case VQ__ACT_SIGMOID:                                                                      \
            for (int64_t i = 0; i < n; i++)                                                        \
                d[i] = g[i] * y[i] * ((T)1 - y[i]);                                                \
            break;                                                                                 \
        case VQ__ACT_SILU:                                                                         \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T s = (T)1 / ((T)1 + EXP(-y[i]));                                                  \
                d[i] = g[i] * s * ((T)1 + y[i] * ((T)1 - s));                                      \
            }                                                                                      \
            break;                                                                                 \
        case VQ__ACT_HARD_SIGMOID:                                                                 \
        case VQ__ACT_HARD_SWISH:                                                                   \
            for (int64_t i = 0; i < n; i++) {                                                      \
                T l = a * y[i] + b, in = l > 0 && l < 1 ? a : (T)0;                                \
                d[i] = p->op == VQ__ACT_HARD_SIGMOID                                               \
                           ? g[i] * in                                                             \
                           : g[i] * (HARD_SIGMOID(T, y[i], a, b) + y[i] * in);                     \
            }                                                                                      \
            break;                                                                                 \
        default:                                                                                   \
            for (int64_t i = 0; i < n; i++)                                                        \
                d[i] = g[i] * ((T)1 - y[i] * y[i]);                                                \
            break;                                                                                 \
        }                                                                                          \
    }

UNARY_GRAD(float, expf)
UNARY_GRAD(double, exp)

static int unary_grad_kernel(const vq__kcall *k)
{
    const vq__unary_params *p = k->params;
    vq_tensor *y = k->in[0], *g = k->in[1], *d = k->out[0];
    if (y->dtype == VQ_F32)
        unary_grad_float(p, y->data, g->data, d->data, y->numel);
    else
        unary_grad_double(p, y->data, g->data, d->data, y->numel);
    return 0;
}

static const char *const unary_grad_names[] = {"relu_grad", "sigmoid_grad",      "tanh_grad",
                                               "silu_grad", "hard_sigmoid_grad", "hard_swish_grad"};

static int unary_grad(const vq__grad *g)
{
    int wanted = vq__grad_wanted(g);
    if (wanted <= 0)
        return wanted;
    int op = g->def->code;
    bool from_x = op >= VQ__ACT_SILU;
    const char *in[2] = {from_x ? g->in[0] : g->out[0], g->dout[0]};
    return vq__emit(g, unary_grad_names[op], in, 2, &g->din[0], 1, g->attrs, g->nattrs);
}

/* ---- softmax ---- */

static const vq__attr_spec axis_attrs[] = {
    {"axis", VQ_ATTR_INT, false, "-1"},
};

/* The rank and axis checks that softmax and softmax_grad share. */
static int softmax_axis(vq__infer *c)
{
    if (c->in[0].ndim < 1)
        return vq__in_fail(c, 0, "has 0 dims, %s needs at least 1", c->def->type);
    vq__softmax_params *p = c->params;
    return vq__axis(c, "axis", vq__attr_int(c, "axis", -1), c->in[0].ndim, &p->axis);
}

static int softmax_infer(vq__infer *c)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = softmax_axis(c)) < 0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

/* The tensor as [outer, len, inner] around axis (vq__lines_of). */
struct lines {
    int64_t outer, len, inner;
};

#define SOFTMAX(T)                                                                 \
    static void softmax_##T(const T *x, T *o, struct lines l)                     \
    {                                                                             \
        for (int64_t a = 0; a < l.outer; a++)                                     \
            for (int64_t b = 0; b < l.inner; b++) {                               \
                const T *xl = x + a * l.len * l.inner + b;                        \
                T *ol = o + a * l.len * l.inner + b;                              \
                double max = -INFINITY, sum = 0;                                  \
                for (int64_t j = 0; j < l.len; j++)                               \
                    if (xl[j * l.inner] > max)                                    \
                        max = xl[j * l.inner];                                    \
                for (int64_t j = 0; j < l.len; j++) {                             \
                    double e = exp((double)xl[j * l.inner] - max);                \
                    ol[j * l.inner] = (T)e;                                       \
                    sum += e;                                                     \
                }                                                                 \
                double inv = 1 / sum;                                             \
                for (int64_t j = 0; j < l.len; j++)                               \
                    ol[j * l.inner] = (T)(ol[j * l.inner] * inv);                 \
            }                                                                     \
    }

SOFTMAX(float)
SOFTMAX(double)

/* softmax (or log_softmax, log) of the f32 lines of l when each is
 * contiguous (inner 1): the exponentials by vmath's exp_sub, summed in
 * double (each exp rounded to float first: the sums differ from the
 * double ones by a relative 2^-24 at most, the results by under 1 ulp).
 * log_softmax sums through a buffer, so that X is read after. */
static void softmax_lines_f32(const float *x, float *o, struct lines l, bool log_of)
{
    vq__vmath_sub_fn exp_sub = vq__vmath()->exp_sub;
    float buf[256];
    for (int64_t a = 0; a < l.outer; a++) {
        const float *xl = x + a * l.len;
        float *ol = o + a * l.len, max = -INFINITY;
        double sum = 0;
        for (int64_t j = 0; j < l.len; j++)
            if (xl[j] > max)
                max = xl[j];
        if (!log_of) {
            exp_sub(xl, max, ol, l.len);
            for (int64_t j = 0; j < l.len; j++)
                sum += ol[j];
            double inv = 1 / sum;
            for (int64_t j = 0; j < l.len; j++)
                ol[j] = (float)(ol[j] * inv);
            continue;
        }
        for (int64_t j = 0; j < l.len; j += 256) {
            int64_t n = l.len - j < 256 ? l.len - j : 256;
            exp_sub(xl + j, max, buf, n);
            for (int64_t i = 0; i < n; i++)
                sum += buf[i];
        }
        double shift = (double)max + log(sum);
        for (int64_t j = 0; j < l.len; j++)
            ol[j] = (float)((double)xl[j] - shift);
    }
}

static int softmax_kernel(const vq__kcall *k)
{
    const vq__softmax_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    struct lines l;
    vq__lines_of(x->ndim, x->shape, p->axis, &l.outer, &l.len, &l.inner);
    if (x->dtype == VQ_F32 && l.inner == 1)
        softmax_lines_f32(x->data, o->data, l, false);
    else if (x->dtype == VQ_F32)
        softmax_float(x->data, o->data, l);
    else
        softmax_double(x->data, o->data, l);
    return 0;
}

/* softmax_grad(Out, dOut; axis) -> dX = Out * (dOut - sum(dOut * Out, axis)). */
static int softmax_grad_infer(vq__infer *c)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0 ||
        (rc = vq__check_same_shape(c, 0, 1)) < 0 || (rc = softmax_axis(c)) < 0)
        return rc;
    merge_known_dims(&c->in[0], &c->in[1], &c->out[0]);
    return 0;
}

#define SOFTMAX_GRAD(T)                                                            \
    static void softmax_grad_##T(const T *y, const T *g, T *d, struct lines l)    \
    {                                                                             \
        for (int64_t a = 0; a < l.outer; a++)                                     \
            for (int64_t b = 0; b < l.inner; b++) {                               \
                int64_t at = a * l.len * l.inner + b;                             \
                double dot = 0;                                                   \
                for (int64_t j = 0; j < l.len; j++)                               \
                    dot += (double)y[at + j * l.inner] * g[at + j * l.inner];     \
                for (int64_t j = 0; j < l.len; j++) {                             \
                    int64_t i = at + j * l.inner;                                 \
                    d[i] = (T)(y[i] * (g[i] - dot));                              \
                }                                                                 \
            }                                                                     \
    }

SOFTMAX_GRAD(float)
SOFTMAX_GRAD(double)

static int softmax_grad_kernel(const vq__kcall *k)
{
    const vq__softmax_params *p = k->params;
    vq_tensor *y = k->in[0], *g = k->in[1], *d = k->out[0];
    struct lines l;
    vq__lines_of(y->ndim, y->shape, p->axis, &l.outer, &l.len, &l.inner);
    if (y->dtype == VQ_F32)
        softmax_grad_float(y->data, g->data, d->data, l);
    else
        softmax_grad_double(y->data, g->data, d->data, l);
    return 0;
}

/* softmax's and log_softmax's: "<op>_grad"(Out, dOut), both computed from
 * the output. The forward op's only attribute is axis, which its gradient
 * op shares. */
static int softmax_grad(const vq__grad *g)
{
    int wanted = vq__grad_wanted(g);
    if (wanted <= 0)
        return wanted;
    const char *in[2] = {g->out[0], g->dout[0]};
    char type[32];
    snprintf(type, sizeof type, "%s_grad", g->def->type);
    return vq__emit(g, type, in, 2, &g->din[0], 1, g->attrs, g->nattrs);
}

/* ---- log_softmax ---- */

/* Like softmax, in double per line: Out = X - max - log(sum exp(X - max));
 * its gradient from Out: dX = dOut - exp(Out) * sum(dOut). Same checks
 * and lines as softmax (softmax_infer, softmax_grad_infer, vq__lines_of). */
#define LOG_SOFTMAX(T)                                                                     \
    static void log_softmax_##T(const T *x, T *o, struct lines l)                          \
    {                                                                                      \
        for (int64_t a = 0; a < l.outer; a++)                                              \
            for (int64_t b = 0; b < l.inner; b++) {                                        \
                const T *xl = x + a * l.len * l.inner + b;                                 \
                T *ol = o + a * l.len * l.inner + b;                                       \
                double max = -INFINITY, sum = 0;                                           \
                for (int64_t j = 0; j < l.len; j++)                                        \
                    if (xl[j * l.inner] > max)                                             \
                        max = xl[j * l.inner];                                             \
                for (int64_t j = 0; j < l.len; j++)                                        \
                    sum += exp((double)xl[j * l.inner] - max);                             \
                double shift = max + log(sum);                                             \
                for (int64_t j = 0; j < l.len; j++)                                        \
                    ol[j * l.inner] = (T)((double)xl[j * l.inner] - shift);                \
            }                                                                              \
    }                                                                                      \
    static void log_softmax_grad_##T(const T *y, const T *g, T *d, struct lines l)         \
    {                                                                                      \
        for (int64_t a = 0; a < l.outer; a++)                                              \
            for (int64_t b = 0; b < l.inner; b++) {                                        \
                int64_t at = a * l.len * l.inner + b;                                      \
                double sum = 0;                                                            \
                for (int64_t j = 0; j < l.len; j++)                                        \
                    sum += (double)g[at + j * l.inner];                                    \
                for (int64_t j = 0; j < l.len; j++) {                                      \
                    int64_t i = at + j * l.inner;                                          \
                    d[i] = (T)((double)g[i] - exp((double)y[i]) * sum);                    \
                }                                                                          \
            }                                                                              \
    }

LOG_SOFTMAX(float)
LOG_SOFTMAX(double)

static int log_softmax_kernel(const vq__kcall *k)
{
    const vq__softmax_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    struct lines l;
    vq__lines_of(x->ndim, x->shape, p->axis, &l.outer, &l.len, &l.inner);
    if (x->dtype == VQ_F32 && l.inner == 1)
        softmax_lines_f32(x->data, o->data, l, true);
    else if (x->dtype == VQ_F32)
        log_softmax_float(x->data, o->data, l);
    else
        log_softmax_double(x->data, o->data, l);
    return 0;
}

static int log_softmax_grad_kernel(const vq__kcall *k)
{
    const vq__softmax_params *p = k->params;
    vq_tensor *y = k->in[0], *g = k->in[1], *d = k->out[0];
    struct lines l;
    vq__lines_of(y->ndim, y->shape, p->axis, &l.outer, &l.len, &l.inner);
    if (y->dtype == VQ_F32)
        log_softmax_grad_float(y->data, g->data, d->data, l);
    else
        log_softmax_grad_double(y->data, g->data, d->data, l);
    return 0;
}

#define UNARY_OP(name, c, at, nat)                                                               \
    {                                                                                            \
        .type = name, .in_slots = x_in, .nin_slots = 1, .out_slots = out_slot, .nout_slots = 1,  \
        .flags = VQ__INPLACE_OK, .code = c, .attrs = at, .nattrs = nat,                          \
        .params_size = sizeof(vq__unary_params), .infer = unary_infer, .kernel = {unary_kernel}, \
        .cuda = VQ__CUDA_OP(vq__unary_gpu), .grad = unary_grad                                   \
    }

/* slots: grad_in (Out, dOut) or x_grad_in (X, dOut) */
#define UNARY_GRAD_OP(name, c, slots, at, nat)                                                   \
    {                                                                                            \
        .type = name, .in_slots = slots, .nin_slots = 2, .out_slots = grad_out, .nout_slots = 1, \
        .flags = VQ__INPLACE_OK, .code = c, .attrs = at, .nattrs = nat,                          \
        .params_size = sizeof(vq__unary_params), .infer = unary_grad_infer,                      \
        .kernel = {unary_grad_kernel}, .cuda = VQ__CUDA_OP(vq__unary_grad_gpu)                   \
    }

const vq__op_def vq__ops_activation[] = {
    UNARY_OP("relu", VQ__ACT_RELU, NULL, 0),
    UNARY_OP("sigmoid", VQ__ACT_SIGMOID, NULL, 0),
    UNARY_OP("tanh", VQ__ACT_TANH, NULL, 0),
    /* x sigmoid(x) (SiLU, swish), one rounding in f32 */
    UNARY_OP("silu", VQ__ACT_SILU, NULL, 0),
    /* clamp(alpha x + beta, 0, 1), ONNX's HardSigmoid */
    UNARY_OP("hard_sigmoid", VQ__ACT_HARD_SIGMOID, hard_sigmoid_attrs, 2),
    /* x clamp(x / 6 + 1/2, 0, 1), ONNX's HardSwish */
    UNARY_OP("hard_swish", VQ__ACT_HARD_SWISH, NULL, 0),
    UNARY_GRAD_OP("relu_grad", VQ__ACT_RELU, grad_in, NULL, 0),
    UNARY_GRAD_OP("sigmoid_grad", VQ__ACT_SIGMOID, grad_in, NULL, 0),
    UNARY_GRAD_OP("tanh_grad", VQ__ACT_TANH, grad_in, NULL, 0),
    UNARY_GRAD_OP("silu_grad", VQ__ACT_SILU, x_grad_in, NULL, 0),
    UNARY_GRAD_OP("hard_sigmoid_grad", VQ__ACT_HARD_SIGMOID, x_grad_in, hard_sigmoid_attrs, 2),
    UNARY_GRAD_OP("hard_swish_grad", VQ__ACT_HARD_SWISH, x_grad_in, NULL, 0),
    {.type = "softmax",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .flags = VQ__INPLACE_OK,
     .attrs = axis_attrs,
     .nattrs = 1,
     .params_size = sizeof(vq__softmax_params),
     .infer = softmax_infer,
     .kernel = {softmax_kernel},
     .cuda = VQ__CUDA_OP(vq__softmax_gpu),
     .grad = softmax_grad},
    {.type = "softmax_grad",
     .in_slots = grad_in,
     .nin_slots = 2,
     .out_slots = grad_out,
     .nout_slots = 1,
     .flags = VQ__INPLACE_OK,
     .attrs = axis_attrs,
     .nattrs = 1,
     .params_size = sizeof(vq__softmax_params),
     .infer = softmax_grad_infer,
     .kernel = {softmax_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__softmax_grad_gpu)},
    {.type = "log_softmax",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .attrs = axis_attrs,
     .nattrs = 1,
     .params_size = sizeof(vq__softmax_params),
     .infer = softmax_infer,
     .kernel = {log_softmax_kernel},
     .cuda = VQ__CUDA_OP(vq__log_softmax_gpu),
     .grad = softmax_grad},
    {.type = "log_softmax_grad",
     .in_slots = grad_in,
     .nin_slots = 2,
     .out_slots = grad_out,
     .nout_slots = 1,
     .attrs = axis_attrs,
     .nattrs = 1,
     .params_size = sizeof(vq__softmax_params),
     .infer = softmax_grad_infer,
     .kernel = {log_softmax_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__log_softmax_grad_gpu)},
    {0},
};
