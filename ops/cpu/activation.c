/* Activations: relu, sigmoid and tanh elementwise, softmax and log_softmax
 * along one axis, and their gradient ops.
 *
 * The gradient ops take the forward op's output, not its input (relu_grad,
 * sigmoid_grad, tanh_grad, softmax_grad all have a closed form in Out), so
 * autodiff keeps one tensor alive per activation instead of two.
 *
 * Softmax subtracts the max along the axis before exponentiating, so no exp
 * overflows, and sums in double also for f32. The softmax kernels walk each
 * line along the axis with stride `inner` (the product of the dims after
 * it); every pass reads a line's element before it writes the same element,
 * which is what makes running in place safe. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"
#include "../shape_shared.h" /* vq__lines_of */
#include "../math/isa.h"

#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};
static const char *const grad_in[] = {"Out", "dOut"};
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

/* ---- relu, sigmoid, tanh ---- */

static int unary_infer(vq__infer *c)
{
    int rc = vq__check_dtype(c, 0, VQ__FLOATS);
    if (rc < 0)
        return rc;
    ((vq__unary_params *)c->params)->op = c->def->code;
    c->out[0] = c->in[0];
    return 0;
}

/* relu keeps NaN (x < 0 is false for it); sigmoid never exponentiates a
 * positive number, so it cannot overflow for large |x|. */
#define UNARY(T, EXP, TANH)                                                        \
    static void unary_##T(int op, const T *x, T *o, int64_t n)                    \
    {                                                                             \
        switch (op) {                                                             \
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
        default:                                                                  \
            for (int64_t i = 0; i < n; i++)                                       \
                o[i] = TANH(x[i]);                                                \
            break;                                                                \
        }                                                                         \
    }

UNARY(float, expf, tanhf)
UNARY(double, exp, tanh)

/* tanh of n floats without a libm call, so that the loop vectorizes
 * (gcc and clang, SSE2): libm's tanhf costs about 8 ns an element here (a
 * call to expm1f each), this 1.4 to 3. Each element is computed in double
 * and rounded once, so the result is within 1 ulp of tanh
 * (tests/test_ops_activation.c compares every float of [-10, 10] at a
 * stride, and the edge cases, with the double tanh). With y = 2|x|,
 * tanh|x| = m / (m + 2) for m = expm1(y) = 2^k (p(r) + 1) - 1, where
 * y = k ln2 + r, |r| <= ln2/2, and p(r) = expm1(r) by its Taylor series to
 * r^9/9! (truncation below 1e-10, relative). k comes from rounding with
 * the 1.5 * 2^52 shifter, 2^k from the exponent bits. |x| stops at 10
 * (tanh is 1.0f from 9.1 on), the sign is copied back and NaN kept. The
 * selects are on integer bits: gcc does not if-convert float compares
 * under its default -ftrapping-math, and the loop would stay scalar. */
/* The body is inlined into two functions: one for the build's baseline
 * and, where the compiler targets x86-64, one for AVX2, which vq__isa()
 * picks at run time: 1.4 ns an element instead of 3.1 with SSE2 (the
 * divisions). The same operations in the same order (ISO C mode contracts
 * nothing into FMAs, and target("avx2") does not enable them): the same
 * bits either way. */
__attribute__((always_inline)) static inline void tanh_f32_body(const float *x, float *o, int64_t n)
{
    const double shifter = 0x1.8p52, ln2_hi = 0x1.62e42fee00000p-1,
                 ln2_lo = 0x1.a39ef35793c76p-33;
    const uint32_t ten = 0x41200000u, inf = 0x7f800000u; /* 10.0f, +inf */
    uint64_t shifter_bits;
    memcpy(&shifter_bits, &shifter, sizeof shifter);
    for (int64_t i = 0; i < n; i++) {
        uint32_t xb, ab, cb, tb32;
        memcpy(&xb, &x[i], sizeof xb);
        ab = xb & 0x7fffffffu;
        cb = ab < ten ? ab : ten;
        float af;
        memcpy(&af, &cb, sizeof af);
        double y = 2.0 * af;
        double t = y * 0x1.71547652b82fep0 + shifter; /* y / ln2, rounded, + shifter */
        double k = t - shifter;
        double r = (y - k * ln2_hi) - k * ln2_lo;
        double p = r * (1 + r * (1. / 2 + r * (1. / 6 + r * (1. / 24 + r * (1. / 120 +
                   r * (1. / 720 + r * (1. / 5040 + r * (1. / 40320 + r / 362880))))))));
        uint64_t tb, sb;
        memcpy(&tb, &t, sizeof t);
        sb = (tb - shifter_bits + 1023) << 52; /* 2^k */
        double s;
        memcpy(&s, &sb, sizeof s);
        double m = s * p + (s - 1);
        float th = (float)(m / (m + 2));
        memcpy(&tb32, &th, sizeof th);
        tb32 |= xb & 0x80000000u;
        uint32_t nan = 0u - (uint32_t)(ab > inf); /* all ones for NaN */
        uint32_t ob = (xb & nan) | (tb32 & ~nan);
        memcpy(&o[i], &ob, sizeof ob);
    }
}

static void tanh_f32_portable(const float *x, float *o, int64_t n)
{
    tanh_f32_body(x, o, n);
}

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define TANH_AVX2 1
__attribute__((target("avx2"))) static void tanh_f32_avx2(const float *x, float *o, int64_t n)
{
    tanh_f32_body(x, o, n);
}
#endif

static void tanh_f32(const float *x, float *o, int64_t n)
{
#ifdef TANH_AVX2
    if (vq__isa() >= VQ__ISA_AVX2) {
        tanh_f32_avx2(x, o, n);
        return;
    }
#endif
    tanh_f32_portable(x, o, n);
}

/* Elements [lo, hi) of a unary op's call (k). */
static int unary_part(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const vq__kcall *k = arg;
    const vq__unary_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    if (x->dtype == VQ_F32 && p->op == VQ__ACT_TANH)
        tanh_f32((const float *)x->data + lo, (float *)o->data + lo, hi - lo);
    else if (x->dtype == VQ_F32)
        unary_float(p->op, (const float *)x->data + lo, (float *)o->data + lo, hi - lo);
    else
        unary_double(p->op, (const double *)x->data + lo, (double *)o->data + lo, hi - lo);
    return 0;
}

static int unary_kernel(const vq__kcall *k)
{
    int64_t n = k->in[0]->numel;
    if (n >= 2 * VQ__PAR_ELEMS)
        return vq__parallel_for(n, VQ__PAR_ELEMS, unary_part, (void *)k);
    return unary_part((void *)k, 0, n, 0);
}

/* relu_grad / sigmoid_grad / tanh_grad (Out, dOut) -> dX. */
static int unary_grad_infer(vq__infer *c)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0 ||
        (rc = vq__check_same_shape(c, 0, 1)) < 0)
        return rc;
    ((vq__unary_params *)c->params)->op = c->def->code;
    merge_known_dims(&c->in[0], &c->in[1], &c->out[0]);
    return 0;
}

#define UNARY_GRAD(T)                                                           \
    static void unary_grad_##T(int op, const T *y, const T *g, T *d, int64_t n) \
    {                                                                           \
        switch (op) {                                                           \
        case VQ__ACT_RELU: /* g[i] read either way: a select, vectorized */     \
            for (int64_t i = 0; i < n; i++) {                                   \
                T gi = g[i];                                                    \
                d[i] = y[i] > 0 ? gi : (T)0;                                    \
            }                                                                   \
            break;                                                              \
        case VQ__ACT_SIGMOID:                                                   \
            for (int64_t i = 0; i < n; i++)                                     \
                d[i] = g[i] * y[i] * ((T)1 - y[i]);                             \
            break;                                                              \
        default:                                                                \
            for (int64_t i = 0; i < n; i++)                                     \
                d[i] = g[i] * ((T)1 - y[i] * y[i]);                             \
            break;                                                              \
        }                                                                       \
    }

UNARY_GRAD(float)
UNARY_GRAD(double)

static int unary_grad_kernel(const vq__kcall *k)
{
    const vq__unary_params *p = k->params;
    vq_tensor *y = k->in[0], *g = k->in[1], *d = k->out[0];
    if (y->dtype == VQ_F32)
        unary_grad_float(p->op, y->data, g->data, d->data, y->numel);
    else
        unary_grad_double(p->op, y->data, g->data, d->data, y->numel);
    return 0;
}

static const char *const unary_grad_names[] = {"relu_grad", "sigmoid_grad", "tanh_grad"};

static int unary_grad(const vq__grad *g)
{
    int wanted = vq__grad_wanted(g);
    if (wanted <= 0)
        return wanted;
    const char *in[2] = {g->out[0], g->dout[0]};
    return vq__emit(g, unary_grad_names[g->def->code], in, 2, &g->din[0], 1, NULL, 0);
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

static int softmax_kernel(const vq__kcall *k)
{
    const vq__softmax_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    struct lines l;
    vq__lines_of(x->ndim, x->shape, p->axis, &l.outer, &l.len, &l.inner);
    if (x->dtype == VQ_F32)
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
    if (x->dtype == VQ_F32)
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

#define UNARY_OP(name, c)                                                                       \
    {                                                                                           \
        .type = name, .in_slots = x_in, .nin_slots = 1, .out_slots = out_slot, .nout_slots = 1, \
        .flags = VQ__INPLACE_OK, .code = c, .params_size = sizeof(vq__unary_params),            \
        .infer = unary_infer, .kernel = {unary_kernel}, .cuda = VQ__CUDA_OP(vq__unary_gpu),     \
        .grad = unary_grad                                                                      \
    }

#define UNARY_GRAD_OP(name, c)                                                                     \
    {                                                                                              \
        .type = name, .in_slots = grad_in, .nin_slots = 2, .out_slots = grad_out, .nout_slots = 1, \
        .flags = VQ__INPLACE_OK, .code = c, .params_size = sizeof(vq__unary_params),               \
        .infer = unary_grad_infer, .kernel = {unary_grad_kernel},                                  \
        .cuda = VQ__CUDA_OP(vq__unary_grad_gpu)                                                    \
    }

const vq__op_def vq__ops_activation[] = {
    UNARY_OP("relu", VQ__ACT_RELU),
    UNARY_OP("sigmoid", VQ__ACT_SIGMOID),
    UNARY_OP("tanh", VQ__ACT_TANH),
    UNARY_GRAD_OP("relu_grad", VQ__ACT_RELU),
    UNARY_GRAD_OP("sigmoid_grad", VQ__ACT_SIGMOID),
    UNARY_GRAD_OP("tanh_grad", VQ__ACT_TANH),
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
