/* Binary elementwise ops with numpy broadcasting (add, sub, mul, div, pow,
 * mod), scale, and the gradient op of the binary ones (floats).
 *
 * Kernels walk the output in rows (broadcast.c) and run one tight loop per
 * row whose inputs each step by 0 or 1. Integer arithmetic wraps (it is done
 * in unsigned types: signed overflow would be undefined); integer division
 * by zero is an error of the op, not a crash. Integer pow multiplies by
 * squaring (wrapping too); a negative exponent gives the truncated
 * quotient 1 / x^-y (1 or -1 for x = 1 or -1, else 0), and 0 to a
 * negative power is an error like division by zero.
 *
 * mod(X, Y; fmod) is ONNX's Mod: with fmod false the remainder takes the
 * divisor's sign (Python's %, numpy's remainder, torch.remainder), with
 * fmod true the dividend's (C's fmod and %, torch.fmod); in every dtype,
 * an integer mod by zero an error like division by zero (x mod -1 is 0,
 * INT_MIN's too). Its gradients are 1 for X and -floor(X / Y) (fmod:
 * -trunc(X / Y)) for Y, as torch's. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"

#include <math.h>
#include <string.h>

/* elementwise_grad's op attribute, by VQ__BINARY_* code. */
static const char *const op_names[] = {"add", "sub", "mul", "div", "pow", "mod", "fmod"};
#define NOPS ((int)(sizeof op_names / sizeof op_names[0]))

static const char *const xy_in[] = {"X", "Y"};
static const char *const out_slot[] = {"Out"};

static int binary_infer(vq__infer *c)
{
    int rc;
    /* u64 on the CPU only: the CUDA dispatcher refuses the added dtypes */
    if ((rc = vq__check_dtype(c, 0, VQ__NUMERIC | (1u << VQ_U64))) < 0 ||
        (rc = vq__check_same_dtype(c, 0, 1)) < 0)
        return rc;
    c->out[0].dtype = c->in[0].dtype;
    ((vq__binary_params *)c->params)->op = c->def->code;
    return vq__broadcast_shapes(c, 0, 1, &c->out[0]);
}

/* Float remainders: C's fmod (exact), moved to the divisor's sign for
 * Python's % (a zero remainder takes the divisor's sign, as numpy's);
 * elementwise.cu's python_mod does the same. */
static inline float mod_float(bool python, float a, float b)
{
    float r = fmodf(a, b);
    if (!python)
        return r;
    if (r != 0)
        return (b < 0) != (r < 0) ? r + b : r;
    return copysignf(r, b);
}

static inline double mod_double(bool python, double a, double b)
{
    double r = fmod(a, b);
    if (!python)
        return r;
    if (r != 0)
        return (b < 0) != (r < 0) ? r + b : r;
    return copysign(r, b);
}

struct rows {
    const void *x, *y;
    void *out;
    int op;
    int err;
    int64_t bad; /* output offset of the first integer division by zero */
};

/* The loops of one row, with the strides as constants where the common
 * cases allow (1: contiguous, 0: a broadcast scalar) so that they
 * vectorize, and as variables otherwise. */
#define FLOAT_ROW_LOOP(T, XS, YS)                                          \
    switch (r->op) {                                                       \
    case VQ__BINARY_ADD:                                                   \
        for (int64_t i = 0; i < n; i++)                                    \
            o[i] = x[i * XS] + y[i * YS];                                  \
        break;                                                             \
    case VQ__BINARY_SUB:                                                   \
        for (int64_t i = 0; i < n; i++)                                    \
            o[i] = x[i * XS] - y[i * YS];                                  \
        break;                                                             \
    case VQ__BINARY_MUL:                                                   \
        for (int64_t i = 0; i < n; i++)                                    \
            o[i] = x[i * XS] * y[i * YS];                                  \
        break;                                                             \
    case VQ__BINARY_DIV:                                                   \
        for (int64_t i = 0; i < n; i++)                                    \
            o[i] = x[i * XS] / y[i * YS];                                  \
        break;                                                             \
    case VQ__BINARY_MOD:                                                   \
    case VQ__BINARY_FMOD:                                                  \
        for (int64_t i = 0; i < n; i++)                                    \
            o[i] = mod_##T(r->op == VQ__BINARY_MOD, x[i * XS], y[i * YS]); \
        break;                                                             \
    default:                                                               \
        for (int64_t i = 0; i < n; i++)                                    \
            o[i] = (T)pow(x[i * XS], y[i * YS]);                           \
        break;                                                             \
    }

#define FLOAT_ROW(T)                                                                       \
    static void row_##T(void *user, int64_t xo, int64_t yo, int64_t oo, int64_t n,        \
                        int64_t xs, int64_t ys)                                           \
    {                                                                                     \
        struct rows *r = user;                                                            \
        const T *x = (const T *)r->x + xo, *y = (const T *)r->y + yo;                     \
        T *o = (T *)r->out + oo;                                                          \
        if (xs == 1 && ys == 1) {                                                         \
            FLOAT_ROW_LOOP(T, 1, 1)                                                       \
        } else if (xs == 1 && ys == 0) {                                                  \
            FLOAT_ROW_LOOP(T, 1, 0)                                                       \
        } else if (xs == 0 && ys == 1) {                                                  \
            FLOAT_ROW_LOOP(T, 0, 1)                                                       \
        } else {                                                                          \
            FLOAT_ROW_LOOP(T, xs, ys)                                                     \
        }                                                                                 \
    }

#define INT_ROW(T, U, MIN)                                                                        \
    static void row_##T(void *user, int64_t xo, int64_t yo, int64_t oo, int64_t n, int64_t xs,    \
                        int64_t ys)                                                               \
    {                                                                                             \
        struct rows *r = user;                                                                    \
        const T *x = (const T *)r->x + xo, *y = (const T *)r->y + yo;                             \
        T *o = (T *)r->out + oo;                                                                  \
        switch (r->op) {                                                                          \
        case VQ__BINARY_ADD:                                                                      \
            for (int64_t i = 0; i < n; i++)                                                       \
                o[i] = (T)((U)x[i * xs] + (U)y[i * ys]);                                          \
            break;                                                                                \
        case VQ__BINARY_SUB:                                                                      \
            for (int64_t i = 0; i < n; i++)                                                       \
                o[i] = (T)((U)x[i * xs] - (U)y[i * ys]);                                          \
            break;                                                                                \
        case VQ__BINARY_MUL:                                                                      \
            for (int64_t i = 0; i < n; i++)                                                       \
                o[i] = (T)((U)x[i * xs] * (U)y[i * ys]);                                          \
            break;                                                                                \
        case VQ__BINARY_POW:                                                                      \
            for (int64_t i = 0; i < n; i++) {                                                     \
                T a = x[i * xs], b = y[i * ys];                                                   \
                if (b < 0) {                                                                      \
                    if (a == 0 && !r->err) {                                                      \
                        r->err = 1;                                                               \
                        r->bad = oo + i;                                                          \
                    }                                                                             \
                    o[i] = a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;                         \
                    continue;                                                                     \
                }                                                                                 \
                U base = (U)a, p = 1;                                                             \
                for (U e = (U)b; e; e >>= 1) {                                                    \
                    if (e & 1)                                                                    \
                        p *= base;                                                                \
                    base *= base;                                                                 \
                }                                                                                 \
                o[i] = (T)p;                                                                      \
            }                                                                                     \
            break;                                                                                \
        case VQ__BINARY_MOD:                                                                      \
        case VQ__BINARY_FMOD:                                                                     \
            for (int64_t i = 0; i < n; i++) {                                                     \
                T a = x[i * xs], b = y[i * ys];                                                   \
                if (b == 0) {                                                                     \
                    if (!r->err) {                                                                \
                        r->err = 1;                                                               \
                        r->bad = oo + i;                                                          \
                    }                                                                             \
                    o[i] = 0;                                                                     \
                } else if (b == -1) { /* INT_MIN % -1 would trap */                               \
                    o[i] = 0;                                                                     \
                } else {                                                                          \
                    T m = a % b;                                                                  \
                    o[i] = r->op == VQ__BINARY_MOD && m != 0 && ((m < 0) != (b < 0)) ? m + b : m; \
                }                                                                                 \
            }                                                                                     \
            break;                                                                                \
        default:                                                                                  \
            for (int64_t i = 0; i < n; i++) {                                                     \
                T a = x[i * xs], b = y[i * ys];                                                   \
                if (b == 0 || (a == MIN && b == -1)) {                                            \
                    if (!r->err) {                                                                \
                        r->err = 1;                                                               \
                        r->bad = oo + i;                                                          \
                    }                                                                             \
                    o[i] = 0;                                                                     \
                } else {                                                                          \
                    o[i] = a / b;                                                                 \
                }                                                                                 \
            }                                                                                     \
        }                                                                                         \
    }

FLOAT_ROW(float)
FLOAT_ROW(double)
INT_ROW(int32_t, uint32_t, INT32_MIN)
INT_ROW(int64_t, uint64_t, INT64_MIN)

/* u64, which no wider integer holds (ops/widen.c passes it through to
 * these ops): arithmetic wraps; division, mod and fmod (the same for
 * unsigned values) by zero are errors; pow multiplies by squaring. */
static void row_uint64_t(void *user, int64_t xo, int64_t yo, int64_t oo, int64_t n, int64_t xs,
                         int64_t ys)
{
    struct rows *r = user;
    const uint64_t *x = (const uint64_t *)r->x + xo, *y = (const uint64_t *)r->y + yo;
    uint64_t *o = (uint64_t *)r->out + oo;
    for (int64_t i = 0; i < n; i++) {
        uint64_t a = x[i * xs], b = y[i * ys];
        switch (r->op) {
        case VQ__BINARY_ADD: o[i] = a + b; break;
        case VQ__BINARY_SUB: o[i] = a - b; break;
        case VQ__BINARY_MUL: o[i] = a * b; break;
        case VQ__BINARY_POW: {
            uint64_t p = 1;
            for (; b; b >>= 1) {
                if (b & 1)
                    p *= a;
                a *= a;
            }
            o[i] = p;
            break;
        }
        default: /* div, mod, fmod */
            if (b == 0) {
                if (!r->err) {
                    r->err = 1;
                    r->bad = oo + i;
                }
                o[i] = 0;
            } else {
                o[i] = r->op == VQ__BINARY_DIV ? a / b : a % b;
            }
        }
    }
}

/* Elements [lo, hi) of a call with nothing broadcast. */
struct flat {
    struct rows *r;
    void (*row)(void *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
};

static int flat_part(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    struct flat *f = arg;
    f->row(f->r, lo, lo, lo, hi - lo, 1, 1);
    return 0;
}

static int binary_kernel(const vq__kcall *k)
{
    const vq__binary_params *p = k->params;
    vq_tensor *x = k->in[0], *y = k->in[1], *out = k->out[0];
    struct rows r = {.x = x->data, .y = y->data, .out = out->data, .op = p->op};
    void (*row)(void *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);
    switch (out->dtype) {
    case VQ_F32: row = row_float; break;
    case VQ_F64: row = row_double; break;
    case VQ_I32: row = row_int32_t; break;
    case VQ_U64: row = row_uint64_t; break;
    default: row = row_int64_t; break;
    }
    if (x->numel == out->numel && y->numel == out->numel && out->numel >= 2 * VQ__PAR_ELEMS &&
        (out->dtype == VQ_F32 || out->dtype == VQ_F64)) {
        /* one long row, shared with the idle workers (floats: no error) */
        struct flat f = {&r, row};
        vq__parallel_for(out->numel, VQ__PAR_ELEMS, flat_part, &f);
    } else if (x->numel == out->numel && y->numel == out->numel) {
        /* nothing broadcast (only leading 1s may differ): one row */
        row(&r, 0, 0, 0, out->numel, 1, 1);
    } else if ((x->numel == 1 || y->numel == 1) &&
               (x->numel == out->numel || y->numel == out->numel)) {
        /* one operand a single element (a bias, a scale): one row */
        row(&r, 0, 0, 0, out->numel, x->numel != 1, y->numel != 1);
    } else {
        vq__bcast b;
        vq__bcast_init(&b, out, x, y);
        vq__bcast_rows(&b, &r, row);
    }
    if (r.err)
        return vq__op_fail(k->def,
                           p->op == VQ__BINARY_POW
                               ? "integer 0 to a negative power at output element %lld"
                               : "integer division by zero (or overflow) at output element %lld",
                           (long long)r.bad);
    return 0;
}

/* ---- the gradient op ---- */

/* elementwise_grad(dOut, X, Y) -> dX or dY (attr wrt): the derivative of
 * op(X, Y) times dOut, summed over the dims along which the operand was
 * broadcast. */
static const char *const grad_in[] = {"dOut", "X", "Y"};
static const char *const grad_out[] = {"dZ"};

static int grad_infer(vq__infer *c)
{
    vq__binary_grad_params *p = c->params;
    const vq_attr *op = vq__attr_find(c, "op");
    p->op = -1;
    for (int i = 0; i < NOPS; i++)
        if (!strcmp(op->s, op_names[i]))
            p->op = i;
    if (p->op < 0)
        return vq__attr_fail(c, "op", "\"%s\" is not add, sub, mul, div, pow, mod or fmod", op->s);
    int64_t wrt = vq__attr_int(c, "wrt", 0);
    if (wrt != 0 && wrt != 1)
        return vq__attr_fail(c, "wrt", "is %lld, not 0 (X) or 1 (Y)", (long long)wrt);
    p->wrt = (int)wrt;
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0 ||
        (rc = vq__check_same_dtype(c, 0, 2)) < 0)
        return rc;
    if ((rc = vq__check_broadcast_is(c, 0, 1, 2, "the broadcast shape of X and Y")) < 0)
        return rc;
    c->out[0] = c->in[1 + p->wrt];
    return 0;
}

struct grad_rows {
    const void *g, *x, *y;
    void *dz;
    int op, wrt;
};

/* One row: dz[i * (wrt ? ys : xs)] += g[i] * d op / d operand. The sum
 * and difference (the common case: a bias) get loops of their own that
 * vectorize. */
#define GRAD_ROW(T)                                                                              \
    static void grad_row_##T(void *user, int64_t xo, int64_t yo, int64_t oo, int64_t n,          \
                             int64_t xs, int64_t ys)                                             \
    {                                                                                            \
        struct grad_rows *r = user;                                                              \
        const T *g = (const T *)r->g + oo, *x = (const T *)r->x + xo, *y = (const T *)r->y + yo; \
        T *dz = (T *)r->dz + (r->wrt ? yo : xo);                                                 \
        int64_t zs = r->wrt ? ys : xs;                                                           \
        if (r->op == VQ__BINARY_ADD || r->op == VQ__BINARY_SUB) {                                \
            T sign = r->op == VQ__BINARY_SUB && r->wrt ? (T)-1 : (T)1;                           \
            if (zs == 1) {                                                                       \
                for (int64_t i = 0; i < n; i++)                                                  \
                    dz[i] += sign * g[i];                                                        \
            } else {                                                                             \
                for (int64_t i = 0; i < n; i++)                                                  \
                    dz[i * zs] += sign * g[i];                                                   \
            }                                                                                    \
            return;                                                                              \
        }                                                                                        \
        for (int64_t i = 0; i < n; i++) {                                                        \
            T a = x[i * xs], b = y[i * ys], d;                                                   \
            switch (r->op) {                                                                     \
            case VQ__BINARY_MUL: d = g[i] * (r->wrt ? a : b); break;                             \
            case VQ__BINARY_DIV: d = r->wrt ? -g[i] * a / (b * b) : g[i] / b; break;             \
            case VQ__BINARY_MOD: d = r->wrt ? -g[i] * (T)floor(a / b) : g[i]; break;             \
            case VQ__BINARY_FMOD: d = r->wrt ? -g[i] * (T)trunc(a / b) : g[i]; break;            \
            default: /* pow: b a^(b-1) for X, a^b ln a for Y */                                  \
                d = r->wrt ? g[i] * (T)pow(a, b) * (T)log(a)                                     \
                           : g[i] * b * (T)pow(a, (double)(b - 1));                              \
                break;                                                                           \
            }                                                                                    \
            dz[i * zs] += d;                                                                     \
        }                                                                                        \
    }

GRAD_ROW(float)
GRAD_ROW(double)

static int grad_kernel(const vq__kcall *k)
{
    const vq__binary_grad_params *p = k->params;
    vq_tensor *g = k->in[0], *x = k->in[1], *y = k->in[2], *dz = k->out[0];
    if (dz->numel == g->numel && (p->op == VQ__BINARY_ADD || p->op == VQ__BINARY_SUB)) {
        /* Not broadcast: the gradient of a sum is dOut itself (negated for
         * the subtrahend). */
        if (p->op == VQ__BINARY_ADD || p->wrt == 0) {
            memcpy(dz->data, g->data, dz->nbytes);
        } else if (g->dtype == VQ_F32) {
            const float *a = g->data;
            float *d = dz->data;
            for (int64_t i = 0; i < g->numel; i++)
                d[i] = -a[i];
        } else {
            const double *a = g->data;
            double *d = dz->data;
            for (int64_t i = 0; i < g->numel; i++)
                d[i] = -a[i];
        }
        return 0;
    }
    memset(dz->data, 0, dz->nbytes);
    if (dz->numel == 1 && (p->op == VQ__BINARY_ADD || p->op == VQ__BINARY_SUB)) {
        /* A single element broadcast to all of dOut: dOut's sum, in the
         * order the rows below would add it. */
        struct grad_rows r =
            {.g = g->data, .x = x->data, .y = y->data, .dz = dz->data, .op = p->op, .wrt = p->wrt};
        (g->dtype == VQ_F32 ? grad_row_float : grad_row_double)(&r, 0, 0, 0, g->numel, 0, 0);
        return 0;
    }
    vq__bcast b;
    vq__bcast_init(&b, g, x, y);
    struct grad_rows r = {.g = g->data, .x = x->data, .y = y->data, .dz = dz->data,
                          .op = p->op, .wrt = p->wrt};
    vq__bcast_rows(&b, &r, g->dtype == VQ_F32 ? grad_row_float : grad_row_double);
    return 0;
}

static int binary_grad(const vq__grad *g)
{
    return vq__emit_xy_grads(g, "elementwise_grad");
}

/* ---- mod ---- */

static const vq__attr_spec mod_attrs[] = {
    {"fmod", VQ_ATTR_BOOL, false, "false"},
};

static int mod_infer(vq__infer *c)
{
    int rc = binary_infer(c);
    ((vq__binary_params *)c->params)->op =
        vq__attr_bool(c, "fmod", false) ? VQ__BINARY_FMOD : VQ__BINARY_MOD;
    return rc;
}

/* elementwise_grad with op "mod" or "fmod" (the kind is an attribute of
 * mod, but elementwise_grad's op names it). */
static int mod_grad(const vq__grad *g)
{
    bool fmod_kind = false;
    for (int i = 0; i < g->nattrs; i++)
        if (!strcmp(g->attrs[i].name, "fmod"))
            fmod_kind = g->attrs[i].i != 0;
    for (int i = 0; i < 2; i++) {
        if (!g->din[i])
            continue;
        const char *in[3] = {g->dout[0], g->in[0], g->in[1]};
        vq_attr at[2] = {VQ_ATTR_S("op", fmod_kind ? "fmod" : "mod"), VQ_ATTR_I("wrt", i)};
        int rc = vq__emit(g, "elementwise_grad", in, 3, &g->din[i], 1, at, 2);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- scale: Out = scale * X + bias ---- */

static const vq__attr_spec scale_attrs[] = {
    {"scale", VQ_ATTR_FLOAT, false, "1"},
    {"bias", VQ_ATTR_FLOAT, false, "0"},
};

static int scale_infer(vq__infer *c)
{
    int rc = vq__check_dtype(c, 0, VQ__FLOATS);
    if (rc < 0)
        return rc;
    vq__scale_params *p = c->params;
    p->scale = vq__attr_float(c, "scale", 1.0);
    p->bias = vq__attr_float(c, "bias", 0.0);
    c->out[0] = c->in[0];
    return 0;
}

static int scale_kernel(const vq__kcall *k)
{
    const vq__scale_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    if (x->dtype == VQ_F32) {
        const float *a = x->data;
        float *b = o->data, s = (float)p->scale, c = (float)p->bias;
        for (int64_t i = 0; i < x->numel; i++)
            b[i] = s * a[i] + c;
    } else {
        const double *a = x->data;
        double *b = o->data;
        for (int64_t i = 0; i < x->numel; i++)
            b[i] = p->scale * a[i] + p->bias;
    }
    return 0;
}

static int scale_grad(const vq__grad *g)
{
    const vq_attr *s = NULL;
    for (int i = 0; i < g->nattrs; i++)
        if (!strcmp(g->attrs[i].name, "scale"))
            s = &g->attrs[i];
    vq_attr a = s ? *s : VQ_ATTR_F("scale", 1.0);
    return vq__emit(g, "scale", &g->dout[0], 1, &g->din[0], 1, &a, 1);
}

static const vq__attr_spec grad_attrs[] = {
    {"op", VQ_ATTR_STRING, true, NULL},
    {"wrt", VQ_ATTR_INT, true, NULL},
};

#define BINARY(name, c)                                                                          \
    {                                                                                            \
        .type = name, .in_slots = xy_in, .nin_slots = 2, .out_slots = out_slot, .nout_slots = 1, \
        .flags = VQ__INPLACE_OK, .code = c, .params_size = sizeof(vq__binary_params),            \
        .infer = binary_infer, .kernel = {binary_kernel}, .cuda = VQ__CUDA_OP(vq__binary_gpu),   \
        .grad = binary_grad                                                                      \
    }

const vq__op_def vq__ops_elementwise[] = {
    BINARY("add", VQ__BINARY_ADD),
    BINARY("sub", VQ__BINARY_SUB),
    BINARY("mul", VQ__BINARY_MUL),
    BINARY("div", VQ__BINARY_DIV),
    BINARY("pow", VQ__BINARY_POW),
    {.type = "mod",
     .in_slots = xy_in,
     .nin_slots = 2,
     .out_slots = out_slot,
     .nout_slots = 1,
     .flags = VQ__INPLACE_OK,
     .attrs = mod_attrs,
     .nattrs = 1,
     .code = VQ__BINARY_MOD,
     .params_size = sizeof(vq__binary_params),
     .infer = mod_infer,
     .kernel = {binary_kernel},
     .cuda = VQ__CUDA_OP(vq__binary_gpu),
     .grad = mod_grad},
    {.type = "elementwise_grad",
     .in_slots = grad_in,
     .nin_slots = 3,
     .out_slots = grad_out,
     .nout_slots = 1,
     .attrs = grad_attrs,
     .nattrs = 2,
     .params_size = sizeof(vq__binary_grad_params),
     .infer = grad_infer,
     .kernel = {grad_kernel},
     .cuda = VQ__CUDA_OP(vq__binary_grad_gpu)},
    {.type = "scale",
     .in_slots = xy_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .flags = VQ__INPLACE_OK,
     .attrs = scale_attrs,
     .nattrs = 2,
     .params_size = sizeof(vq__scale_params),
     .infer = scale_infer,
     .kernel = {scale_kernel},
     .cuda = VQ__CUDA_OP(vq__scale_gpu),
     .grad = scale_grad},
    {0},
};
