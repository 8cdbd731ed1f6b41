/* Ops that make a tensor from attributes alone: fill_constant, and the
 * counter-based random fills uniform_random and gaussian_random; and
 * dropout, the one random op with an input to transform.
 *
 * Element i of a random tensor is a pure function of (key, counter), through
 * Philox4x32-10 (ops/rng_shared.h): the same key and counter give the same bits
 * whatever engine, worker count or device fills it. The formulas below are
 * the contract a GPU kernel reproduces; change them only together.
 *
 * Where key and counter come from. With a seed attribute (and no State),
 * key = the seed and element i draws counter i: every call gives the same
 * numbers. With neither a seed nor a State, key = the kernel call's rng
 * (vq__kcall.rng), which the caller's default generator sets for each
 * execution (the graph executor's: graph/run.c; vq__rng_next for
 * imperative calls), and element i draws counter i: each execution draws
 * new numbers, reproducible from that generator's seed. With State (an
 * i64 [2] tensor, the generator state (seed, counter), usually a
 * persistable var of a program that its StateOut overwrites in place),
 * key = State[0] and element i draws counter State[1] + i; StateOut =
 * (State[0], State[1] + n) for an op that drew n counters, so the next op
 * or run on that state draws fresh numbers, and
 * state (s, 0) gives exactly what seed = s gives. Because the op reads and
 * writes the state var, the engine orders every op on one state in push
 * order: the numbers do not depend on the worker count either. Both
 * values are used as their 64 bits (uint64_t); the counter wraps modulo
 * 2^64, after 2^64 draws, so no value of a state is an error (a GPU kernel
 * could not report one without a round trip to the host). */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"

#include <float.h>
#include <math.h>

static const char *const out_slot[] = {"Out"};
static const char *const x_in[] = {"X"};

/* Checks the shape attribute and fills out's shape from it. */
/* Out's shape: attribute shape, or the value of input slot (a fill
 * whose shape a model computes: ONNX's ConstantOfShape); slot -1: the
 * attribute only. An unknown value (preparation) gives unknown dims. */
static int shape_attr(vq__infer *c, int slot, vq__meta *out)
{
    int64_t dims[VQ_MAX_DIMS];
    int n;
    int rc = vq__ints_arg(c, slot < 0 ? c->nin : slot, "shape", dims, VQ_MAX_DIMS, &n);
    if (rc < 0)
        return rc;
    if (rc == 1) {
        if (n < 0)
            return vq__in_fail(c, slot, "has an unknown length: Out's rank would be unknown");
        out->ndim = n;
        for (int i = 0; i < n; i++)
            out->shape[i] = -1;
        return 0;
    }
    const char *what = slot < 0 || slot >= c->nin ? "attribute shape" : "input Shape";
    for (int i = 0; i < n; i++)
        if (dims[i] < 0)
            return vq__op_fail(c->def, "%s: dim %d is %lld", what, i, (long long)dims[i]);
    out->ndim = n;
    for (int i = 0; i < n; i++)
        out->shape[i] = dims[i];
    if (vq__numel(n, dims) == INT64_MAX)
        return vq__op_fail(c->def, "%s: has too many elements", what);
    return 0;
}

static int finite_attr(const vq__infer *c, const char *name, double v)
{
    return isfinite(v) ? 0 : vq__attr_fail(c, name, "is %g, not a finite number", v);
}

/* ---- fill_constant ---- */

static int fill_infer(vq__infer *c)
{
    vq__fill_params *p = c->params;
    int rc;
    if ((rc = shape_attr(c, 0, &c->out[0])) < 0 ||
        (rc = vq__attr_dtype(c, "dtype", VQ_F32, &c->out[0].dtype)) < 0)
        return rc;
    double v = vq__attr_float(c, "value", 0.0);
    p->value = v;
    switch (c->out[0].dtype) {
    case VQ_F32:
        if (isfinite(v) && fabs(v) > FLT_MAX)
            return vq__attr_fail(c, "value", "%g is out of f32's range", v);
        return 0;
    case VQ_F64: return 0;
    default: break;
    }
    /* Integers: exact values only. An INT attribute is checked as an
     * integer (an i64 past 2^53 has no exact double); a FLOAT one must be
     * integral, and below 2^63 so that the conversion is defined. The
     * bounds are powers of two, exact in double. */
    int64_t ilo, ihi;
    double lo, hi;
    switch (c->out[0].dtype) {
    case VQ_I32: ilo = INT32_MIN, ihi = INT32_MAX, lo = -2147483648.0, hi = 2147483648.0; break;
    case VQ_I64:
        ilo = INT64_MIN, ihi = INT64_MAX, lo = -9223372036854775808.0, hi = 9223372036854775808.0;
        break;
    default: ilo = 0, ihi = 1, lo = 0, hi = 2; break;
    }
    const vq_attr *a = vq__attr_find(c, "value");
    if (a && a->type == VQ_ATTR_INT) {
        if (a->i < ilo || a->i > ihi)
            return vq__attr_fail(c, "value", "%lld does not fit %s", (long long)a->i,
                                 vq_dtype_name(c->out[0].dtype));
        p->ivalue = a->i;
    } else {
        if (!(v == floor(v) && v >= lo && v < hi))
            return vq__attr_fail(c, "value", "%.17g does not fit %s", v,
                                 vq_dtype_name(c->out[0].dtype));
        p->ivalue = (int64_t)v;
    }
    return 0;
}

static int fill_kernel(const vq__kcall *k)
{
    const vq__fill_params *p = k->params;
    vq_tensor *o = k->out[0];
    switch (o->dtype) {
    case VQ_F32:
        for (int64_t i = 0; i < o->numel; i++)
            ((float *)o->data)[i] = (float)p->value;
        break;
    case VQ_F64:
        for (int64_t i = 0; i < o->numel; i++)
            ((double *)o->data)[i] = p->value;
        break;
    case VQ_I32:
        for (int64_t i = 0; i < o->numel; i++)
            ((int32_t *)o->data)[i] = (int32_t)p->ivalue;
        break;
    case VQ_I64:
        for (int64_t i = 0; i < o->numel; i++)
            ((int64_t *)o->data)[i] = p->ivalue;
        break;
    default:
        for (int64_t i = 0; i < o->numel; i++)
            ((uint8_t *)o->data)[i] = (uint8_t)p->ivalue;
        break;
    }
    return 0;
}

/* zeros_like(X) -> Out: zeros of X's dtype and shape (X's values are not
 * read, so an inf or a NaN there gives 0 too, unlike X * 0). Autodiff's
 * gradient of a var that a branch does not use. Runs fill_constant's
 * kernel. */
static int zeros_like_infer(vq__infer *c)
{
    vq__fill_params *p = c->params;
    c->out[0] = c->in[0];
    p->value = 0;
    p->ivalue = 0;
    return 0;
}

/* ---- the generator state ---- */

/* The optional State input (slot in) and StateOut output (slot out) of a
 * random op whose other slots number in and out: both or neither; State
 * i64 [2]; StateOut is State's meta. With State, the seed attribute is
 * refused rather than ignored: a seed that silently changes nothing is
 * the bug this state exists to fix. The seed attribute itself (>= 0) is
 * read into r->seed either way; r->fixed says whether a seed or a State
 * fixes the numbers. */
static int state_infer(vq__infer *c, int in, int out, vq__rng_params *r)
{
    bool has_in = c->nin > in, has_out = c->nout > out;
    int64_t s = vq__attr_int(c, "seed", 0);
    if (s < 0)
        return vq__attr_fail(c, "seed", "is %lld; seeds are >= 0", (long long)s);
    r->seed = (uint64_t)s;
    r->fixed = has_in || vq__attr_find(c, "seed");
    if (has_in && !has_out)
        return vq__in_fail(c, in, "is given but output %s (slot %d) is not; give both or "
                                  "neither",
                           c->def->out_slots[out], out);
    if (has_out && !has_in)
        return vq__op_fail(c->def, "output %s (slot %d) is given but input %s (slot %d) is not; "
                                   "give both or neither",
                           c->def->out_slots[out], out, c->def->in_slots[in], in);
    if (!has_in)
        return 0;
    int rc = vq__check_dtype(c, in, 1u << VQ_I64);
    if (rc < 0)
        return rc;
    if (c->in[in].ndim != 1 || !vq__dim_match(c->in[in].shape[0], 2)) {
        char sh[100];
        return vq__in_fail(c, in, "shape %s is not [2] (seed, counter)",
                           vq__shape_str(sh, sizeof sh, c->in[in].ndim, c->in[in].shape));
    }
    if (vq__attr_find(c, "seed"))
        return vq__attr_fail(c, "seed", "is given, but input %s (slot %d) supplies the seed; "
                                        "give one or the other",
                             c->def->in_slots[in], in);
    c->out[out] = c->in[in];
    c->out[out].shape[0] = 2;
    return 0;
}

/* The Philox key and first counter of a random op: (State[0], State[1])
 * when the op has its State input (slot in), else (seed, 0) with a seed
 * attribute, else (k->rng, 0). Read before anything is written: StateOut
 * may be State itself. */
static void state_read(const vq__kcall *k, int in, const vq__rng_params *r, uint64_t *key,
                       uint64_t *base)
{
    *key = r->fixed ? r->seed : k->rng;
    *base = 0;
    if (k->nin > in) {
        const int64_t *st = k->in[in]->data;
        *key = (uint64_t)st[0];
        *base = (uint64_t)st[1];
    }
}

/* StateOut (slot out, when given) = (key, base + n): the op drew counters
 * base .. base + n - 1 (modulo 2^64). */
static void state_write(const vq__kcall *k, int out, uint64_t key, uint64_t base, uint64_t n)
{
    if (k->nout > out) {
        int64_t *st = k->out[out]->data;
        st[0] = (int64_t)key;
        st[1] = (int64_t)(base + n);
    }
}

/* ---- random fills ---- */

static int random_common(vq__infer *c)
{
    vq__random_params *p = c->params;
    int rc;
    if ((rc = shape_attr(c, -1, &c->out[0])) < 0 ||
        (rc = vq__attr_dtype(c, "dtype", VQ_F32, &c->out[0].dtype)) < 0)
        return rc;
    if (c->out[0].dtype != VQ_F32 && c->out[0].dtype != VQ_F64)
        return vq__attr_fail(c, "dtype", "%s is not f32 or f64", vq_dtype_name(c->out[0].dtype));
    return state_infer(c, 0, 1, &p->rng);
}

static int uniform_infer(vq__infer *c)
{
    vq__random_params *p = c->params;
    int rc = random_common(c);
    double lo = vq__attr_float(c, "min", -1.0), hi = vq__attr_float(c, "max", 1.0);
    if (rc < 0 || (rc = finite_attr(c, "min", lo)) < 0 || (rc = finite_attr(c, "max", hi)) < 0)
        return rc;
    if (!(lo < hi))
        return vq__attr_fail(c, "max", "%g is not above min %g", hi, lo);
    if (!isfinite(hi - lo))
        return vq__attr_fail(c, "max", "max - min overflows");
    p->a = lo;
    p->b = hi - lo;
    return 0;
}

static int gaussian_infer(vq__infer *c)
{
    vq__random_params *p = c->params;
    int rc = random_common(c);
    double mean = vq__attr_float(c, "mean", 0.0), std = vq__attr_float(c, "std", 1.0);
    if (rc < 0 || (rc = finite_attr(c, "mean", mean)) < 0 || (rc = finite_attr(c, "std", std)) < 0)
        return rc;
    if (std < 0)
        return vq__attr_fail(c, "std", "is %g; a standard deviation is >= 0", std);
    p->a = mean;
    p->b = std;
    return 0;
}

/* uniform_random, element i, with w = vq__philox(counter = base + i, key)
 * (key and base: the file head; (seed or rng, 0) without State):
 *   f32: u = (w[0] >> 8) * 2^-24                      u in [0, 1)
 *   f64: u = ((w[0] << 32 | w[1]) >> 11) * 2^-53      u in [0, 1)
 *   value = min + (max - min) * u, in double: the product rounded to
 *   double, then the sum (no fused multiply-add), then, for f32, rounded
 *   to nearest float (which may reach max itself).
 * Each step is one separately rounded IEEE operation, so any device gets
 * the same bits. */
static int uniform_kernel(const vq__kcall *k)
{
    const vq__random_params *p = k->params;
    vq_tensor *o = k->out[0];
    uint64_t key, base;
    state_read(k, 0, &p->rng, &key, &base);
    uint32_t w[4];
    if (o->dtype == VQ_F32) {
        float *d = o->data;
        for (int64_t i = 0; i < o->numel; i++) {
            vq__philox(base + (uint64_t)i, key, w);
            double u = (double)(w[0] >> 8) * 0x1p-24;
            double scaled = p->b * u; /* its own statement: no contraction */
            d[i] = (float)(p->a + scaled);
        }
    } else {
        double *d = o->data;
        for (int64_t i = 0; i < o->numel; i++) {
            vq__philox(base + (uint64_t)i, key, w);
            double u = (double)vq__bits53(w[0], w[1]) * 0x1p-53;
            double scaled = p->b * u;
            d[i] = p->a + scaled;
        }
    }
    state_write(k, 1, key, base, (uint64_t)o->numel);
    return 0;
}

#define TWO_PI 6.283185307179586 /* 2 pi rounded to double */

/* gaussian_random, element i, with w = vq__philox(counter = base + i, key),
 * Box-Muller in double for both dtypes:
 *   u1 = (((w[0] << 32 | w[1]) >> 11) + 1) * 2^-53     in (0, 1], never 0
 *   u2 = ((w[2] << 32 | w[3]) >> 11) * 2^-53           in [0, 1)
 *   z = sqrt(-2 * log(u1)) * cos(TWO_PI * u2)
 *   value = mean + std * z, then rounded to float for f32.
 * Each product and sum is a separately rounded double operation (no fused
 * multiply-add); log and cos are the C library's, so another device matches
 * bit for bit where its log and cos round as glibc's do (both are within an
 * ulp; a GPU port should compare, not assume). */
static int gaussian_kernel(const vq__kcall *k)
{
    const vq__random_params *p = k->params;
    vq_tensor *o = k->out[0];
    uint64_t key, base;
    state_read(k, 0, &p->rng, &key, &base);
    uint32_t w[4];
    for (int64_t i = 0; i < o->numel; i++) {
        vq__philox(base + (uint64_t)i, key, w);
        double u1 = (double)(vq__bits53(w[0], w[1]) + 1) * 0x1p-53;
        double u2 = (double)vq__bits53(w[2], w[3]) * 0x1p-53;
        double r2 = -2.0 * log(u1);
        double angle = TWO_PI * u2;
        double z = sqrt(r2) * cos(angle);
        double scaled = p->b * z;
        double v = p->a + scaled;
        if (o->dtype == VQ_F32)
            ((float *)o->data)[i] = (float)v;
        else
            ((double *)o->data)[i] = v;
    }
    state_write(k, 1, key, base, (uint64_t)o->numel);
    return 0;
}

/* ---- dropout(X, State?) -> Out, Mask, StateOut? ---- */

static int dropout_infer(vq__infer *c)
{
    vq__dropout_params *p = c->params;
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = state_infer(c, 1, 2, &p->rng)) < 0)
        return rc;
    double prob = vq__attr_float(c, "p", 0.5);
    if (!(prob >= 0 && prob < 1))
        return vq__attr_fail(c, "p", "is %g, not in [0, 1)", prob);
    p->p = prob;
    p->scale = 1.0 / (1.0 - prob);
    p->is_test = vq__attr_bool(c, "is_test", false);
    c->out[0] = c->in[0];
    c->out[1] = c->in[0];
    return 0;
}

/* dropout, element i. Training: w = vq__philox(counter = base + i, key) as
 * for the random fills, and u = ((w[0] << 32 | w[1]) >> 11) * 2^-53, the
 * value uniform_random (f64, min 0, max 1) gives element i from the same
 * state; kept iff u >= p, compared in double. Mask = scale (1 / (1 - p),
 * rounded to X's dtype) if kept, else 0; Out = X * Mask, one product in
 * X's dtype: mul(X, Mask)'s bits (so -0 for a dropped negative, NaN for a
 * dropped inf, as PyTorch's). The state advances by X's element count.
 * Inference (is_test): Out = X, Mask = 1, StateOut = State. Each element
 * is read before its outputs are written, so Out or Mask may be X. */
#define DROPOUT(T)                                                              \
    do {                                                                        \
        const T *x = k->in[0]->data;                                            \
        T *out = k->out[0]->data, *mask = k->out[1]->data, scale = (T)p->scale; \
        for (int64_t i = 0; i < n; i++) {                                       \
            T v = x[i], m = 1;                                                  \
            if (!p->is_test) {                                                  \
                vq__philox(base + (uint64_t)i, key, w);                         \
                double u = (double)vq__bits53(w[0], w[1]) * 0x1p-53;            \
                m = u >= p->p ? scale : 0;                                      \
                v = v * m;                                                      \
            }                                                                   \
            out[i] = v;                                                         \
            mask[i] = m;                                                        \
        }                                                                       \
    } while (0)

static int dropout_kernel(const vq__kcall *k)
{
    const vq__dropout_params *p = k->params;
    int64_t n = k->in[0]->numel;
    uint64_t key, base;
    state_read(k, 1, &p->rng, &key, &base);
    uint32_t w[4];
    if (k->in[0]->dtype == VQ_F32)
        DROPOUT(float);
    else
        DROPOUT(double);
    state_write(k, 2, key, base, p->is_test ? 0 : (uint64_t)n);
    return 0;
}

/* dX = dOut * Mask, by mul: Mask is the whole derivative (kept elements
 * scaled, dropped ones 0). State and Mask carry no gradient; a gradient
 * flowing into Mask is dropped (Mask does not depend on X). */
static int dropout_grad(const vq__grad *g)
{
    if (g->nin > 1 && g->din[1])
        return vq__op_fail(g->def, "input State (slot 1) has no gradient");
    if (!g->din[0])
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output Out");
    const char *in[2] = {g->dout[0], g->out[1]};
    return vq__emit(g, "mul", in, 2, &g->din[0], 1, NULL, 0);
}

/* seed: no default; without it (and without State) the op draws from the
 * caller's default generator (the file head). */
static const char *const shape_in[] = {"Shape"};

static const vq__attr_spec fill_attrs[] = {
    {"shape", VQ_ATTR_INTS, false, "none"},
    {"dtype", VQ_ATTR_STRING, false, "f32"},
    {"value", VQ_ATTR_FLOAT, false, "0"},
};

static const vq__attr_spec uniform_attrs[] = {
    {"shape", VQ_ATTR_INTS, true, NULL}, {"dtype", VQ_ATTR_STRING, false, "f32"},
    {"min", VQ_ATTR_FLOAT, false, "-1"}, {"max", VQ_ATTR_FLOAT, false, "1"},
    {"seed", VQ_ATTR_INT, false, NULL},
};

static const vq__attr_spec dropout_attrs[] = {
    {"p", VQ_ATTR_FLOAT, false, "0.5"},
    {"is_test", VQ_ATTR_BOOL, false, "false"},
    {"seed", VQ_ATTR_INT, false, NULL},
};

static const char *const state_in[] = {"State"};
static const char *const random_out[] = {"Out", "StateOut"};
static const char *const dropout_in[] = {"X", "State"};
static const char *const dropout_out[] = {"Out", "Mask", "StateOut"};

/* The optional last slots State and StateOut of the random ops. */
#define RANDOM_FLAGS (VQ__OPTIONAL_IN | VQ__OPTIONAL_OUT | VQ__INPLACE_OK | VQ__RANDOM)

static const vq__attr_spec gaussian_attrs[] = {
    {"shape", VQ_ATTR_INTS, true, NULL}, {"dtype", VQ_ATTR_STRING, false, "f32"},
    {"mean", VQ_ATTR_FLOAT, false, "0"}, {"std", VQ_ATTR_FLOAT, false, "1"},
    {"seed", VQ_ATTR_INT, false, NULL},
};

const vq__op_def vq__ops_init[] = {
    {.type = "fill_constant",
     .in_slots = shape_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .flags = VQ__OPTIONAL_IN,
     .value_in = 1u << 0,
     .attrs = fill_attrs,
     .nattrs = 3,
     .params_size = sizeof(vq__fill_params),
     .infer = fill_infer,
     .kernel = {fill_kernel},
     .cuda = VQ__CUDA_OP(vq__fill_gpu)},
    {.type = "gaussian_random",
     .in_slots = state_in,
     .nin_slots = 1,
     .out_slots = random_out,
     .nout_slots = 2,
     .flags = RANDOM_FLAGS,
     .attrs = gaussian_attrs,
     .nattrs = 5,
     .params_size = sizeof(vq__random_params),
     .infer = gaussian_infer,
     .kernel = {gaussian_kernel},
     .cuda = VQ__CUDA_OP(vq__gaussian_gpu)},
    {.type = "dropout",
     .in_slots = dropout_in,
     .nin_slots = 2,
     .out_slots = dropout_out,
     .nout_slots = 3,
     .flags = RANDOM_FLAGS,
     .attrs = dropout_attrs,
     .nattrs = 3,
     .params_size = sizeof(vq__dropout_params),
     .infer = dropout_infer,
     .kernel = {dropout_kernel},
     .cuda = VQ__CUDA_OP(vq__dropout_gpu),
     .grad = dropout_grad},
    {.type = "zeros_like",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .params_size = sizeof(vq__fill_params),
     .infer = zeros_like_infer,
     .kernel = {fill_kernel},
     .cuda = VQ__CUDA_OP(vq__fill_gpu)},
    {.type = "uniform_random",
     .in_slots = state_in,
     .nin_slots = 1,
     .out_slots = random_out,
     .nout_slots = 2,
     .flags = RANDOM_FLAGS,
     .attrs = uniform_attrs,
     .nattrs = 5,
     .params_size = sizeof(vq__random_params),
     .infer = uniform_infer,
     .kernel = {uniform_kernel},
     .cuda = VQ__CUDA_OP(vq__uniform_gpu)},
    {0},
};
