/* Every registered op on a GPU against the same op on the CPU: random
 * inputs (f32 and f64 wherever the op takes floats, the other dtypes where
 * it takes them), run with vq_op_run on CPU tensors without an engine and
 * on their copies on GPU 0 of a threaded engine, outputs copied back and
 * compared. Elementwise, optimizer, shape, fill, uniform and dropout ops
 * (and the generator state the random ops advance) must match
 * bit for bit (NaN payloads aside); those that sum, or use exp, log, tanh
 * or cos, within 1e-5 (f32) or 1e-12 (f64) of the larger magnitude, or
 * absolutely below 1. Every op type needs a case here: a new op fails
 * every_registered_op_has_a_case until it gets one. Errors found only on
 * the device (an integer division by zero, a label out of range, a bad
 * adam or lr_schedule step) must fail the GPU op with the CPU op's message.
 *
 * The GPU backend is the engine's: meson runs this suite with
 * VARQ_GPU_BACKEND=emulated, where GPU ops run their CPU kernels as stream
 * work (so it checks the dispatch and the plumbing); run it with
 * VARQ_GPU_BACKEND=cuda, or without the variable on a machine with a GPU,
 * to check the CUDA kernels. Without a GPU backend the GPU tests skip,
 * saying why. VARQ_TEST_SEED replays a seed (failures print it);
 * VARQ_TEST_OPS=a,b runs only the cases of ops a and b. */
#include <varq/varq.h>

#ifdef VARQ_HAVE_CUDA
#include "cuda/kernels.h"
#include "ops_internal.h" /* vq__op_find: the kernel the registry picked */
#endif
#include "opcheck.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "leakcheck.h"

TestSuite(ops_gpu_kernels, .fini = leak_check);

static const vq_ctx cpu = {VQ_DEV_CPU, 0}, gpu0 = {VQ_DEV_GPU, 0};

enum match { EXACT, CLOSE };

/* The state of one run through the ops, and what the messages name. */
struct run {
    vq_engine *e;
    uint64_t rng, seed;
    const char *op;
    char what[200]; /* the case */
};

/* A shape as the two arguments ndim, shape. */
#define DIMS(...)                                                                           \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__}
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const vq_dtype floats[] = {VQ_F32, VQ_F64};
static const vq_dtype numerics[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64};
static const vq_dtype all_dtypes[] = {VQ_F32, VQ_F64, VQ_I32, VQ_I64, VQ_BOOL};

static void describe(struct run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void describe(struct run *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->what, sizeof r->what, fmt, ap);
    va_end(ap);
}

/* Skips the test, with the backend's reason, when there is no GPU. */
static void need_gpu(void)
{
    vq_tensor *t = NULL;
    int rc = vq_tensor_new_on(&t, gpu0, VQ_F32, 0, NULL);
    if (rc == VQ_ENOSYS)
        cr_skip_test("no GPU backend: %s", vq_errmsg());
    cr_assert_eq(rc, 0, "GPU 0: %s", vq_errmsg());
    vq_tensor_release(t);
}

static vq_engine *engine(void)
{
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2, .gpu_streams = 2};
    vq_engine *e = NULL;
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    return e;
}

static vq_tensor *to(vq_engine *e, vq_tensor *t, vq_ctx dev)
{
    vq_tensor *o = NULL;
    cr_assert_eq(vq_tensor_copy_to(e, t, dev, &o), 0, "%s", vq_errmsg());
    return o;
}

static vq_tensor *rnd(struct run *r, vq_dtype dt, double lo, double hi, int ndim,
                      const int64_t *shape)
{
    return oc_rand(&r->rng, dt, ndim, shape, lo, hi);
}

static void release(vq_tensor **t, int n)
{
    for (int i = 0; i < n; i++) {
        vq_tensor_release(t[i]);
        t[i] = NULL;
    }
}

/* ---- comparing ---- */

static bool close_to(double a, double b, double rtol)
{
    if (a == b)
        return true;
    if (!isfinite(a) || !isfinite(b))
        return false;
    return fabs(a - b) <= rtol * fmax(1.0, fmax(fabs(a), fabs(b)));
}

static void compare(const struct run *r, int slot, vq_tensor *got, vq_tensor *want, enum match m)
{
    vq_dtype dt = vq_tensor_dtype(want);
    cr_assert_eq(vq_tensor_dtype(got), dt, "%s (%s): output %d dtype", r->op, r->what, slot);
    cr_assert_eq(vq_tensor_ndim(got), vq_tensor_ndim(want), "%s (%s): output %d rank", r->op,
                 r->what, slot);
    for (int d = 0; d < vq_tensor_ndim(want); d++)
        cr_assert_eq(vq_tensor_shape(got)[d], vq_tensor_shape(want)[d],
                     "%s (%s): output %d dim %d", r->op, r->what, slot, d);
    const unsigned char *a = vq_tensor_data(got), *b = vq_tensor_data(want);
    size_t es = vq_dtype_size(dt);
    double rtol = dt == VQ_F32 ? 1e-5 : 1e-12;
    for (int64_t i = 0; i < vq_tensor_numel(want); i++) {
        bool same = !memcmp(a + (size_t)i * es, b + (size_t)i * es, es);
        double x = oc_get(got, i), y = oc_get(want, i);
        if (!same && (dt == VQ_F32 || dt == VQ_F64))
            same = (isnan(x) && isnan(y)) || (m == CLOSE && close_to(x, y, rtol));
        cr_assert(same,
                  "%s (%s): output %d element %lld: GPU %.17g, CPU %.17g (%s; seed %llu, "
                  "VARQ_TEST_SEED replays)",
                  r->op, r->what, slot, (long long)i, x, y,
                  m == EXACT ? "must be equal bit for bit" : "too far apart",
                  (unsigned long long)r->seed);
    }
}

/* Runs r->op on in (CPU tensors) on the CPU and on GPU 0, and compares
 * its nout outputs. Ops without inputs get their GPU outputs made on GPU 0
 * (shaped as the CPU's), which puts the call there. Releases in. */
static void check(struct run *r, vq_tensor **in, int nin, int nout, const vq_attr *at, int nat,
                  enum match m)
{
    vq_tensor *cout[4] = {NULL}, *gin[8] = {NULL}, *gout[4] = {NULL};
    cr_assert_leq(nout, 4);
    cr_assert_leq(nin, 8);
    int rc = vq_op_run(NULL, r->op, in, nin, cout, nout, at, nat);
    cr_assert_eq(rc, 0, "%s (%s) on the CPU: %s", r->op, r->what, vq_errmsg());
    for (int i = 0; i < nin; i++)
        gin[i] = to(r->e, in[i], gpu0);
    for (int j = 0; nin == 0 && j < nout; j++)
        cr_assert_eq(vq_tensor_new_on(&gout[j], gpu0, vq_tensor_dtype(cout[j]),
                                      vq_tensor_ndim(cout[j]), vq_tensor_shape(cout[j])),
                     0, "%s", vq_errmsg());
    rc = vq_op_run(r->e, r->op, gin, nin, gout, nout, at, nat);
    cr_assert_eq(rc, 0, "%s (%s) on GPU 0: %s", r->op, r->what, vq_errmsg());
    for (int j = 0; j < nout; j++) {
        vq_tensor *h = to(r->e, gout[j], cpu);
        cr_assert_eq(vq_tensor_wait(h), 0, "%s (%s) on GPU 0: %s", r->op, r->what, vq_errmsg());
        compare(r, j, h, cout[j], m);
        vq_tensor_release(h);
    }
    release(cout, nout);
    release(gin, nin);
    release(gout, nout);
    release(in, nin);
}

/* ---- elementwise ---- */

/* Pairs of shapes for the broadcasting ops, with their broadcast shape. */
static const struct pair {
    int nx, ny, nz;
    int64_t x[4], y[4], z[4];
} pairs[] = {
    {2, 2, 2, {3, 4}, {3, 4}, {3, 4}},
    {3, 1, 3, {2, 3, 4}, {4}, {2, 3, 4}},
    {3, 2, 3, {2, 1, 4}, {3, 1}, {2, 3, 4}},
    {1, 3, 3, {4}, {2, 3, 4}, {2, 3, 4}},
    {0, 1, 1, {0}, {5}, {5}},
    {2, 1, 2, {0, 3}, {3}, {0, 3}},
    {2, 2, 2, {1, 3}, {0, 3}, {0, 3}},
};

static void case_binary(struct run *r)
{
    bool div = !strcmp(r->op, "div");
    for (int d = 0; d < N_OF(numerics); d++)
        for (int s = 0; s < N_OF(pairs); s++) {
            vq_dtype dt = numerics[d];
            bool ints = dt == VQ_I32 || dt == VQ_I64;
            const struct pair *p = &pairs[s];
            describe(r, "%s, shape pair %d", vq_dtype_name(dt), s);
            vq_tensor *in[2] = {rnd(r, dt, ints ? -50 : -2, ints ? 50 : 2, p->nx, p->x),
                                div ? rnd(r, dt, ints ? 1 : 0.25, ints ? 10 : 2, p->ny, p->y)
                                    : rnd(r, dt, ints ? -50 : -2, ints ? 50 : 2, p->ny, p->y)};
            check(r, in, 2, 1, NULL, 0, EXACT);
        }
}

/* A gradient op (dOut, X, Y) -> dZ with attributes op (each of ops) and
 * wrt, over the shape pairs; Y from [ylo, 2). */
static void case_xy_grad(struct run *r, const char *const *ops, int nops, double ylo)
{
    for (int o = 0; o < nops; o++)
        for (int wrt = 0; wrt < 2; wrt++)
            for (int d = 0; d < N_OF(floats); d++)
                for (int s = 0; s < N_OF(pairs); s++) {
                    const struct pair *p = &pairs[s];
                    vq_dtype dt = floats[d];
                    describe(r, "op %s, wrt %d, %s, shape pair %d", ops[o], wrt,
                             vq_dtype_name(dt), s);
                    vq_tensor *in[3] = {rnd(r, dt, -2, 2, p->nz, p->z),
                                        rnd(r, dt, -2, 2, p->nx, p->x),
                                        rnd(r, dt, ylo, 2, p->ny, p->y)};
                    vq_attr at[2] = {VQ_ATTR_S("op", ops[o]), VQ_ATTR_I("wrt", wrt)};
                    check(r, in, 3, 1, at, 2, EXACT);
                }
}

static void case_elementwise_grad(struct run *r)
{
    static const char *const ops[] = {"add", "sub", "mul", "div", "mod", "fmod"};
    case_xy_grad(r, ops, 6, 0.5); /* div, mod: Y away from 0 */
}

/* mod, both kinds, in every numeric dtype: mixed signs, integer divisors
 * other than 0 (-1 among them). */
static void case_mod(struct run *r)
{
    for (int f = 0; f < 2; f++)
        for (int d = 0; d < N_OF(numerics); d++)
            for (int s = 0; s < N_OF(pairs); s++) {
                vq_dtype dt = numerics[d];
                bool ints = dt == VQ_I32 || dt == VQ_I64;
                const struct pair *p = &pairs[s];
                describe(r, "%s, fmod %d, shape pair %d", vq_dtype_name(dt), f, s);
                vq_tensor *in[2] = {rnd(r, dt, ints ? -50 : -5, ints ? 50 : 5, p->nx, p->x),
                                    rnd(r, dt, ints ? -9 : -2, ints ? 9 : 2, p->ny, p->y)};
                for (int64_t i = 0; i < vq_tensor_numel(in[1]); i++)
                    if (oc_get(in[1], i) == 0)
                        oc_set(in[1], i, -1);
                vq_attr at = VQ_ATTR_B("fmod", f);
                check(r, in, 2, 1, &at, 1, EXACT);
            }
}

/* pow of a positive base (a negative one with a fractional exponent is
 * NaN on both sides), computed in double on both: CLOSE, as the device's
 * pow and log need not round as glibc's do. Its gradients alike. Integer
 * pow (wrapping: exponents up to 40) bit for bit. */
static void case_pow(struct run *r)
{
    for (int d = 0; d < N_OF(floats); d++)
        for (int s = 0; s < N_OF(pairs); s++) {
            const struct pair *p = &pairs[s];
            vq_dtype dt = floats[d];
            describe(r, "%s, shape pair %d", vq_dtype_name(dt), s);
            vq_tensor *in[2] = {rnd(r, dt, 0.25, 2, p->nx, p->x), rnd(r, dt, -2, 2, p->ny, p->y)};
            check(r, in, 2, 1, NULL, 0, CLOSE);
            for (int i = 0; i < 2; i++) { /* integers (exponents >= 0): EXACT */
                vq_dtype it = i ? VQ_I64 : VQ_I32;
                describe(r, "%s, shape pair %d", vq_dtype_name(it), s);
                vq_tensor *n[2] = {rnd(r, it, -20, 20, p->nx, p->x),
                                   rnd(r, it, 0, 40, p->ny, p->y)};
                check(r, n, 2, 1, NULL, 0, EXACT);
            }
            for (int wrt = 0; wrt < 2; wrt++) {
                describe(r, "pow's gradient wrt %d, %s, shape pair %d", wrt, vq_dtype_name(dt), s);
                vq_tensor *g[3] = {rnd(r, dt, -2, 2, p->nz, p->z), rnd(r, dt, 0.25, 2, p->nx, p->x),
                                   rnd(r, dt, -2, 2, p->ny, p->y)};
                vq_attr at[2] = {VQ_ATTR_S("op", "pow"), VQ_ATTR_I("wrt", wrt)};
                const char *op = r->op;
                r->op = "elementwise_grad";
                check(r, g, 3, 1, at, 2, CLOSE);
                r->op = op;
            }
        }
}

static void case_scale(struct run *r)
{
    for (int d = 0; d < N_OF(floats); d++) {
        describe(r, "%s", vq_dtype_name(floats[d]));
        vq_tensor *in[1] = {rnd(r, floats[d], -3, 3, DIMS(4, 5))};
        vq_attr at[2] = {VQ_ATTR_F("scale", 1.7), VQ_ATTR_F("bias", -0.3)};
        check(r, in, 1, 1, at, 2, EXACT);
    }
}

/* fused_elementwise: made by graph/optimize.c for CPU executors only, it
 * has no CUDA kernel. The emulated backend runs its CPU kernel (which
 * must match); the CUDA backend refuses it. */
static void case_fused(struct run *r)
{
    describe(r, "add a trailing row, sigmoid, scale, times X");
    static const int64_t steps[16] = {2, 0, 1, 0, 0, 1, 0, 0, 3, 0, 0, 0, 2, 2, 0, 1};
    static const double consts[8] = {0, 0, 0.2, 0.5, 1.7, -0.3, 0, 0};
    vq_attr at[2] = {VQ_ATTR_IS("steps", steps, 16), VQ_ATTR_FS("consts", consts, 8)};
    const char *backend = getenv("VARQ_GPU_BACKEND");
    if (backend && !strcmp(backend, "emulated")) {
        vq_tensor *in[2] = {rnd(r, VQ_F32, -3, 3, DIMS(3, 4, 5)), rnd(r, VQ_F32, -1, 1, DIMS(5))};
        check(r, in, 2, 1, at, 2, EXACT);
        return;
    }
    vq_tensor *in[2] = {rnd(r, VQ_F32, -3, 3, DIMS(3, 4, 5)), rnd(r, VQ_F32, -1, 1, DIMS(5))};
    vq_tensor *gin[2] = {to(r->e, in[0], gpu0), to(r->e, in[1], gpu0)}, *gout = NULL;
    int rc = vq_op_run(r->e, r->op, gin, 2, &gout, 1, at, 2);
    cr_assert_eq(rc, VQ_ENOSYS, "%s on a CUDA GPU: %d (%s)", r->op, rc, vq_errmsg());
    release(in, 2);
    release(gin, 2);
}

/* ---- predicates and selects ---- */

/* Comparisons, logic, maximum and minimum over the shape pairs; values
 * from a few integers so that ties and equal elements occur. */
static void case_compare(struct run *r)
{
    bool logic = !strncmp(r->op, "logical_", 8);
    bool eq = strstr(r->op, "equal") && strncmp(r->op, "less", 4) && strncmp(r->op, "greater", 7);
    for (int d = 0; d < N_OF(all_dtypes); d++) {
        vq_dtype dt = all_dtypes[d];
        if ((logic && dt != VQ_BOOL) || (!logic && !eq && dt == VQ_BOOL))
            continue;
        for (int s = 0; s < N_OF(pairs); s++) {
            const struct pair *p = &pairs[s];
            describe(r, "%s, shape pair %d", vq_dtype_name(dt), s);
            double hi = dt == VQ_BOOL ? 2 : 3, lo = dt == VQ_BOOL ? 0 : -3;
            vq_tensor *in[2] = {rnd(r, dt, lo, hi, p->nx, p->x), rnd(r, dt, lo, hi, p->ny, p->y)};
            for (int k = 0; k < 2 && (dt == VQ_F32 || dt == VQ_F64); k++)
                for (int64_t i = 0; i < vq_tensor_numel(in[k]); i++)
                    oc_set(in[k], i, floor(oc_get(in[k], i)));
            check(r, in, 2, 1, NULL, 0, EXACT);
        }
    }
}

static void case_logical_not(struct run *r)
{
    describe(r, "bool");
    vq_tensor *in[1] = {rnd(r, VQ_BOOL, 0, 2, DIMS(5, 7))};
    check(r, in, 1, 1, NULL, 0, EXACT);
}

static void case_minmax_grad(struct run *r)
{
    static const char *const ops[] = {"maximum", "minimum"};
    case_xy_grad(r, ops, 2, -2);
}

/* Cond, X and Y of where, each broadcast; where_grad's Z is X or Y. */
static const struct triple {
    int nc, nx, ny, no;
    int64_t c[3], x[3], y[3], o[3];
} triples[] = {
    {2, 2, 2, 2, {3, 4}, {3, 4}, {3, 4}, {3, 4}},
    {2, 1, 2, 2, {3, 1}, {4}, {1, 4}, {3, 4}},
    {1, 3, 2, 3, {2}, {2, 1, 1}, {3, 1}, {2, 3, 2}},
    {0, 2, 1, 2, {0}, {2, 3}, {1}, {2, 3}},
    {2, 2, 2, 2, {0, 1}, {1, 3}, {1, 1}, {0, 3}},
};

static void case_where(struct run *r)
{
    for (int d = 0; d < N_OF(all_dtypes); d++)
        for (int s = 0; s < N_OF(triples); s++) {
            const struct triple *t = &triples[s];
            vq_dtype dt = all_dtypes[d];
            describe(r, "%s, shape triple %d", vq_dtype_name(dt), s);
            vq_tensor *in[3] = {rnd(r, VQ_BOOL, 0, 2, t->nc, t->c), rnd(r, dt, 0, 50, t->nx, t->x),
                                rnd(r, dt, 0, 50, t->ny, t->y)};
            check(r, in, 3, 1, NULL, 0, EXACT);
        }
}

static void case_where_grad(struct run *r)
{
    for (int wrt = 0; wrt < 2; wrt++)
        for (int d = 0; d < N_OF(floats); d++)
            for (int s = 0; s < N_OF(triples); s++) {
                const struct triple *t = &triples[s];
                vq_dtype dt = floats[d];
                describe(r, "wrt %d, %s, shape triple %d", wrt, vq_dtype_name(dt), s);
                vq_tensor *in[3] = {rnd(r, dt, -2, 2, t->no, t->o),
                                    rnd(r, VQ_BOOL, 0, 2, t->nc, t->c),
                                    wrt ? rnd(r, dt, -2, 2, t->ny, t->y)
                                        : rnd(r, dt, -2, 2, t->nx, t->x)};
                vq_attr at = VQ_ATTR_I("wrt", wrt);
                check(r, in, 3, 1, &at, 1, EXACT);
            }
}

static void case_abs(struct run *r)
{
    for (int d = 0; d < N_OF(numerics); d++) {
        describe(r, "%s", vq_dtype_name(numerics[d]));
        vq_tensor *in[1] = {rnd(r, numerics[d], -50, 50, DIMS(5, 7))};
        oc_set(in[0], 0, 0);
        check(r, in, 1, 1, NULL, 0, EXACT);
    }
}

static void case_abs_grad(struct run *r)
{
    for (int d = 0; d < N_OF(floats); d++) {
        describe(r, "%s", vq_dtype_name(floats[d]));
        vq_tensor *in[2] = {rnd(r, floats[d], -2, 2, DIMS(5, 7)),
                            rnd(r, floats[d], -2, 2, DIMS(5, 7))};
        oc_set(in[1], 3, 0);
        check(r, in, 2, 1, NULL, 0, EXACT);
    }
}

/* ---- activations ---- */

static void case_unary(struct run *r)
{
    /* expf, tanh: the device's; the hard ones' products and sums round as
     * the CPU's (--fmad=false) */
    enum match m = !strcmp(r->op, "relu") || !strncmp(r->op, "hard_", 5) ? EXACT : CLOSE;
    for (int d = 0; d < N_OF(floats); d++) {
        describe(r, "%s", vq_dtype_name(floats[d]));
        vq_tensor *in[1] = {rnd(r, floats[d], -4, 4, DIMS(5, 7))};
        check(r, in, 1, 1, NULL, 0, m);
    }
}

static void case_unary_grad(struct run *r)
{
    for (int d = 0; d < N_OF(floats); d++) {
        describe(r, "%s", vq_dtype_name(floats[d]));
        vq_tensor *in[2] = {rnd(r, floats[d], -1, 1, DIMS(5, 7)),
                            rnd(r, floats[d], -2, 2, DIMS(5, 7))};
        check(r, in, 2, 1, NULL, 0, EXACT);
    }
}

/* silu_grad, hard_sigmoid_grad, hard_swish_grad (X, dOut): X across the
 * hard ones' kinks (+-2.5, +-3); hard_sigmoid_grad also with its own
 * alpha and beta. silu's exp is the device's. */
static void case_x_grad(struct run *r)
{
    enum match m = !strcmp(r->op, "silu_grad") ? CLOSE : EXACT;
    vq_attr at[2] = {VQ_ATTR_F("alpha", 0.3), VQ_ATTR_F("beta", 0.4)};
    int nat = !strcmp(r->op, "hard_sigmoid_grad") ? 2 : 0;
    for (int d = 0; d < N_OF(floats); d++) {
        describe(r, "%s", vq_dtype_name(floats[d]));
        vq_tensor *in[2] = {rnd(r, floats[d], -5, 5, DIMS(5, 7)),
                            rnd(r, floats[d], -2, 2, DIMS(5, 7))};
        check(r, in, 2, 1, at, nat, m);
    }
}

static void case_softmax(struct run *r)
{
    bool grad = !strcmp(r->op, "softmax_grad");
    static const int64_t axes[] = {-1, 0, 1};
    for (int d = 0; d < N_OF(floats); d++)
        for (int a = 0; a < N_OF(axes); a++) {
            describe(r, "%s, axis %lld", vq_dtype_name(floats[d]), (long long)axes[a]);
            vq_attr at = VQ_ATTR_I("axis", axes[a]);
            vq_tensor *in[2] = {rnd(r, floats[d], grad ? 0 : -5, grad ? 1 : 5, DIMS(3, 4, 5)),
                                grad ? rnd(r, floats[d], -1, 1, DIMS(3, 4, 5)) : NULL};
            check(r, in, grad ? 2 : 1, 1, &at, 1, CLOSE);
        }
}

/* ---- math ---- */

/* exp, log, sqrt, reciprocal, erf, power (x^2.5) on positive inputs, and
 * math_grad for each: the device's libm, so close, not exact. */
static void case_math(struct run *r)
{
    static const char *const names[] = {"exp",   "log",   "sqrt",  "reciprocal", "erf",
                                        "power", "sin",   "cos",   "tan",        "asin",
                                        "acos",  "atan",  "sinh",  "cosh",       "asinh",
                                        "acosh", "atanh", "floor", "ceil",       "round"};
    bool grad = !strcmp(r->op, "math_grad");
    for (int d = 0; d < N_OF(floats); d++)
        for (int k = 0; k < (grad ? N_OF(names) : 1); k++) {
            const char *op = grad ? names[k] : r->op;
            /* inside each function's domain: (-1, 1) for asin, acos, atanh; > 1 for acosh */
            bool unit = !strcmp(op, "asin") || !strcmp(op, "acos") || !strcmp(op, "atanh");
            double lo = !strcmp(op, "acosh") ? 1.1 : 0.2, hi = unit ? 0.95 : 3;
            describe(r, "%s %s", vq_dtype_name(floats[d]), op);
            vq_attr at[2] = {VQ_ATTR_S("op", op), VQ_ATTR_F("exponent", 2.5)};
            vq_tensor *in[3] = {rnd(r, floats[d], lo, hi, DIMS(5, 7)),
                                grad ? rnd(r, floats[d], 0.2, 3, DIMS(5, 7)) : NULL,
                                grad ? rnd(r, floats[d], -1, 1, DIMS(5, 7)) : NULL};
            if (grad)
                check(r, in, 3, 1, at, 2, CLOSE);
            else
                check(r, in, 1, 1, at + 1, !strcmp(op, "power"), CLOSE);
        }
}

static void case_log_softmax(struct run *r)
{
    bool grad = !strcmp(r->op, "log_softmax_grad");
    static const int64_t axes[] = {-1, 0, 1};
    for (int d = 0; d < N_OF(floats); d++)
        for (int a = 0; a < N_OF(axes); a++) {
            describe(r, "%s, axis %lld", vq_dtype_name(floats[d]), (long long)axes[a]);
            vq_attr at = VQ_ATTR_I("axis", axes[a]);
            vq_tensor *in[2] = {rnd(r, floats[d], grad ? -3 : -5, grad ? 0 : 5, DIMS(3, 4, 5)),
                                grad ? rnd(r, floats[d], -1, 1, DIMS(3, 4, 5)) : NULL};
            check(r, in, grad ? 2 : 1, 1, &at, 1, CLOSE);
        }
}

/* ---- losses ---- */

/* X [.., classes] and its labels, one per row, i32 or i64, shaped like X
 * without its last dim (or with a trailing 1). */
static const struct class_shape {
    int nx, nl, nrow;
    int64_t x[3], l[3], row[3];
} class_shapes[] = {
    {2, 1, 2, {4, 5}, {4}, {4, 1}},
    {2, 2, 2, {4, 5}, {4, 1}, {4, 1}},
    {3, 2, 3, {2, 3, 6}, {2, 3}, {2, 3, 1}},
    {2, 1, 2, {0, 3}, {0}, {0, 1}},
};

static void case_class_loss(struct run *r)
{
    bool ce = !strncmp(r->op, "cross_entropy", 13), grad = strstr(r->op, "_grad") != NULL;
    for (int d = 0; d < N_OF(floats); d++)
        for (int s = 0; s < N_OF(class_shapes); s++)
            for (int li = 0; li < 2; li++) {
                const struct class_shape *c = &class_shapes[s];
                vq_dtype dt = floats[d], lt = li ? VQ_I64 : VQ_I32;
                int64_t classes = c->x[c->nx - 1];
                describe(r, "%s, labels %s, shapes %d", vq_dtype_name(dt), vq_dtype_name(lt), s);
                /* probabilities for cross_entropy and the softmax the
                 * gradient reads; logits for softmax_cross_entropy */
                bool probs = ce || grad;
                vq_tensor *in[3] = {rnd(r, dt, probs ? 0.05 : -3, probs ? 1 : 3, c->nx, c->x),
                                    rnd(r, lt, 0, (double)classes, c->nl, c->l),
                                    grad ? rnd(r, dt, -1, 1, c->nrow, c->row) : NULL};
                /* the gradients are plain arithmetic; the losses use log */
                check(r, in, grad ? 3 : 2, ce || grad ? 1 : 2, NULL, 0, grad ? EXACT : CLOSE);
            }
}

static void case_regression_loss(struct run *r)
{
    bool mse = !strncmp(r->op, "mse", 3), grad = strstr(r->op, "_grad") != NULL;
    for (int d = 0; d < N_OF(floats); d++)
        for (int wrt = 0; wrt < (grad ? 2 : 1); wrt++)
            for (int s = 0; s < 2; s++) {
                vq_dtype dt = floats[d];
                int64_t shape[2] = {s ? 0 : 3, 4};
                describe(r, "%s, wrt %d, shape [%lld, 4]", vq_dtype_name(dt), wrt,
                         (long long)shape[0]);
                vq_tensor *in[3] = {rnd(r, dt, -2, 2, 2, shape), rnd(r, dt, -2, 2, 2, shape), NULL};
                if (grad)
                    in[2] = mse ? rnd(r, dt, -1, 1, 0, NULL) : rnd(r, dt, -1, 1, 2, shape);
                vq_attr at = VQ_ATTR_I("wrt", wrt);
                /* mse sums; square_error and the gradients do arithmetic */
                check(r, in, grad ? 3 : 2, 1, &at, grad ? 1 : 0, mse && !grad ? CLOSE : EXACT);
            }
}

/* ---- reductions ---- */

static const struct axes_case {
    int ndim;
    int64_t shape[4];
    int naxes;
    int64_t axes[4];
    bool keepdim;
} axes_cases[] = {
    {4, {2, 3, 4, 5}, 0, {0}, false},
    {4, {2, 3, 4, 5}, 1, {1}, false},
    {4, {2, 3, 4, 5}, 1, {-1}, true},
    {4, {2, 3, 4, 5}, 2, {0, 2}, false},
    {4, {2, 3, 4, 5}, 2, {1, 3}, true},
    {4, {2, 3, 4, 5}, 3, {0, 1, 3}, false},
    {4, {2, 1, 4, 5}, 2, {1, 3}, false},
    {2, {3, 0}, 1, {1}, false},
    {2, {0, 3}, 1, {1}, false},
    {0, {0}, 0, {0}, false},
};

/* The shape sum leaves of X for case a. */
static int reduced_shape(const struct axes_case *a, int64_t *out)
{
    unsigned mask = a->naxes ? 0 : (1u << a->ndim) - 1;
    for (int i = 0; i < a->naxes; i++)
        mask |= 1u << (a->axes[i] < 0 ? a->axes[i] + a->ndim : a->axes[i]);
    int n = 0;
    for (int d = 0; d < a->ndim; d++)
        if (!(mask & (1u << d)))
            out[n++] = a->shape[d];
        else if (a->keepdim)
            out[n++] = 1;
    return n;
}

static void case_reduce(struct run *r)
{
    bool mean = !strncmp(r->op, "mean", 4), grad = strstr(r->op, "_grad") != NULL;
    const vq_dtype *dts = mean || grad ? floats : numerics;
    int ndts = mean || grad ? N_OF(floats) : N_OF(numerics);
    for (int d = 0; d < ndts; d++)
        for (int c = 0; c < N_OF(axes_cases); c++) {
            const struct axes_case *a = &axes_cases[c];
            vq_dtype dt = dts[d];
            bool ints = dt == VQ_I32 || dt == VQ_I64;
            describe(r, "%s, axes case %d", vq_dtype_name(dt), c);
            vq_attr at[2] = {VQ_ATTR_IS("axes", a->axes, a->naxes),
                             VQ_ATTR_B("keepdim", a->keepdim)};
            vq_tensor *in[2] = {rnd(r, dt, ints ? -1000 : -2, ints ? 1000 : 2, a->ndim, a->shape),
                                NULL};
            if (grad) {
                int64_t rs[4];
                int nr = reduced_shape(a, rs);
                in[1] = rnd(r, dt, -2, 2, nr, rs);
            }
            /* float sums add in another order; integer sums wrap alike,
             * and the gradients only scale */
            check(r, in, grad ? 2 : 1, 1, at, 2, grad || ints ? EXACT : CLOSE);
        }
}

/* ---- shape ops ---- */

static void case_transpose(struct run *r)
{
    static const struct {
        int ndim;
        int64_t shape[4], perm[4];
    } cases[] = {
        {3, {2, 3, 4}, {2, 0, 1}},
        {3, {2, 3, 4}, {0, 2, 1}},
        {4, {2, 3, 1, 4}, {3, 1, 0, 2}},
        {1, {5}, {0}},
        {2, {0, 3}, {1, 0}},
    };
    for (int d = 0; d < N_OF(all_dtypes); d++)
        for (int c = 0; c < N_OF(cases); c++) {
            describe(r, "%s, case %d", vq_dtype_name(all_dtypes[d]), c);
            vq_attr at = VQ_ATTR_IS("perm", cases[c].perm, cases[c].ndim);
            vq_tensor *in[1] = {rnd(r, all_dtypes[d], -100, 100, cases[c].ndim, cases[c].shape)};
            check(r, in, 1, 1, &at, 1, EXACT);
        }
}

static void case_reshape(struct run *r)
{
    bool grad = !strcmp(r->op, "reshape_grad");
    for (int d = 0; d < (grad ? N_OF(floats) : N_OF(all_dtypes)); d++) {
        vq_dtype dt = grad ? floats[d] : all_dtypes[d];
        describe(r, "%s", vq_dtype_name(dt));
        vq_attr at = VQ_ATTR_IS("shape", ((int64_t[]){4, -1}), 2);
        vq_tensor *in[2] = {rnd(r, dt, -100, 100, DIMS(2, 3, 4)),
                            grad ? rnd(r, dt, -1, 1, DIMS(4, 6)) : NULL};
        check(r, in, grad ? 2 : 1, 1, &at, grad ? 0 : 1, EXACT);
        if (grad)
            continue;
        in[0] = rnd(r, dt, -100, 100, DIMS(2, 3, 4)); /* the shape as an input */
        cr_assert_eq(vq_tensor_from(&in[1], VQ_I64, 1, (const int64_t[]){2},
                                    (const int64_t[]){4, -1}),
                     0);
        check(r, in, 2, 1, NULL, 0, EXACT);
    }
}

static void case_concat(struct run *r)
{
    static const vq_dtype dts[] = {VQ_F32, VQ_F64, VQ_I64, VQ_BOOL};
    for (int d = 0; d < N_OF(dts); d++) {
        describe(r, "%s, axis 1", vq_dtype_name(dts[d]));
        vq_attr at = VQ_ATTR_I("axis", 1);
        vq_tensor *in[4] = {rnd(r, dts[d], -9, 9, DIMS(2, 1, 4)),
                            rnd(r, dts[d], -9, 9, DIMS(2, 3, 4)),
                            rnd(r, dts[d], -9, 9, DIMS(2, 0, 4)),
                            rnd(r, dts[d], -9, 9, DIMS(2, 2, 4))};
        check(r, in, 4, 1, &at, 1, EXACT);
        describe(r, "%s, axis 0 (the default)", vq_dtype_name(dts[d]));
        vq_tensor *in2[2] = {rnd(r, dts[d], -9, 9, DIMS(1, 3)), rnd(r, dts[d], -9, 9, DIMS(2, 3))};
        check(r, in2, 2, 1, NULL, 0, EXACT);
    }
}

static void case_concat_grad(struct run *r)
{
    for (int d = 0; d < N_OF(floats); d++)
        for (int index = 0; index < 3; index++) {
            vq_dtype dt = floats[d];
            describe(r, "%s, index %d", vq_dtype_name(dt), index);
            vq_attr at[2] = {VQ_ATTR_I("axis", 1), VQ_ATTR_I("index", index)};
            vq_tensor *in[4] = {rnd(r, dt, -1, 1, DIMS(2, 6, 4)), rnd(r, dt, -1, 1, DIMS(2, 1, 4)),
                                rnd(r, dt, -1, 1, DIMS(2, 3, 4)), rnd(r, dt, -1, 1, DIMS(2, 2, 4))};
            check(r, in, 4, 1, at, 2, EXACT);
        }
}

static const struct slice_case {
    int n;
    int64_t axes[2], starts[2], ends[2];
    int64_t out[3]; /* of X [4, 5, 6] */
} slice_cases[] = {
    {2, {0, 2}, {1, -4}, {3, 100}, {2, 5, 4}},
    {1, {1}, {2}, {2}, {4, 0, 6}},
    {1, {-1}, {-2}, {-1}, {4, 5, 1}},
    {1, {0}, {0}, {4}, {4, 5, 6}},
};

static void case_slice(struct run *r)
{
    bool grad = !strcmp(r->op, "slice_grad");
    for (int d = 0; d < (grad ? N_OF(floats) : N_OF(all_dtypes)); d++)
        for (int c = 0; c < N_OF(slice_cases); c++) {
            const struct slice_case *s = &slice_cases[c];
            vq_dtype dt = grad ? floats[d] : all_dtypes[d];
            describe(r, "%s, case %d", vq_dtype_name(dt), c);
            vq_attr at[3] = {VQ_ATTR_IS("axes", s->axes, s->n),
                             VQ_ATTR_IS("starts", s->starts, s->n),
                             VQ_ATTR_IS("ends", s->ends, s->n)};
            vq_tensor *in[2] = {rnd(r, dt, -100, 100, DIMS(4, 5, 6)),
                                grad ? rnd(r, dt, -1, 1, 3, s->out) : NULL};
            check(r, in, grad ? 2 : 1, 1, at, 3, EXACT);
        }
}

/* X of dtype dt holding the values casts find hard: NaN, infinities,
 * values past every integer range, halves, -0, a float subnormal; integer
 * extremes; both bools. */
static vq_tensor *cast_input(vq_dtype dt)
{
    static const double fv[] = {NAN, INFINITY, -INFINITY, 3e9, -3e9, 1e19, -1e19, 2147483647.5,
                                -2147483648.7, -2147483649.5, 0.5, -0.5, -0.0, 0.0, 1.5e-45,
                                1e300, -1e300, 255.9, 42.0, 9007199254740993.0};
    static const int32_t iv[] = {INT32_MIN, INT32_MAX, -1, 0, 1, 12345, -77, 16777217};
    static const int64_t lv[] = {INT64_MIN, INT64_MAX, (1ll << 40) + 5, -(1ll << 35) - 3,
                                 4294967295ll, 2147483648ll, -1, 0, 7, (1ll << 53) + 1};
    static const uint8_t bv[] = {0, 1, 1, 0};
    vq_tensor *t = NULL;
    int rc;
    switch (dt) {
    case VQ_F32: {
        float f[N_OF(fv)];
        for (int i = 0; i < N_OF(fv); i++)
            f[i] = (float)fv[i];
        rc = vq_tensor_from(&t, dt, DIMS(N_OF(fv)), f);
        break;
    }
    case VQ_F64: rc = vq_tensor_from(&t, dt, DIMS(N_OF(fv)), fv); break;
    case VQ_I32: rc = vq_tensor_from(&t, dt, DIMS(N_OF(iv)), iv); break;
    case VQ_I64: rc = vq_tensor_from(&t, dt, DIMS(N_OF(lv)), lv); break;
    case VQ_BOOL: rc = vq_tensor_from(&t, dt, DIMS(N_OF(bv)), bv); break;
    default: {
        /* the added dtypes: fv cast on the CPU (NaN, infinities,
         * saturation), then every byte pattern of a few elements (every
         * pattern is a value: NaNs and subnormals for f16 and bf16) */
        vq_tensor *f64, *c = NULL;
        vq_attr at = VQ_ATTR_S("dtype", vq_dtype_name(dt));
        cr_assert_eq(vq_tensor_from(&f64, VQ_F64, DIMS(N_OF(fv)), fv), 0);
        cr_assert_eq(vq_op_run(NULL, "cast", &f64, 1, &c, 1, &at, 1), 0, "%s", vq_errmsg());
        size_t es = vq_dtype_size(dt), nb = N_OF(fv) * es;
        unsigned char raw[N_OF(fv) * 8 + 256];
        memcpy(raw, vq_tensor_data(c), nb);
        for (size_t i = 0; i < 256; i++)
            raw[nb + i] = (unsigned char)(i * 167 + 13);
        rc = vq_tensor_from(&t, dt, DIMS((int64_t)((nb + 256) / es)), raw);
        vq_tensor_release(f64);
        vq_tensor_release(c);
        break;
    }
    }
    cr_assert_eq(rc, 0, "%s", vq_errmsg());
    return t;
}

static void case_cast(struct run *r)
{
    for (int f = 0; f < VQ_DTYPE_COUNT; f++)
        for (int t = 0; t < VQ_DTYPE_COUNT; t++) {
            describe(r, "%s to %s", vq_dtype_name((vq_dtype)f), vq_dtype_name((vq_dtype)t));
            vq_attr at = VQ_ATTR_S("dtype", vq_dtype_name((vq_dtype)t));
            vq_tensor *in[1] = {cast_input((vq_dtype)f)};
            check(r, in, 1, 1, &at, 1, EXACT);
        }
}

static void case_cast_grad(struct run *r)
{
    static const vq_dtype all_floats[] = {VQ_F32, VQ_F64, VQ_F16, VQ_BF16};
    for (int a = 0; a < N_OF(all_floats); a++)
        for (int b = 0; b < N_OF(all_floats); b++) {
            describe(r, "X %s, dOut %s", vq_dtype_name(all_floats[a]),
                     vq_dtype_name(all_floats[b]));
            vq_tensor *g = cast_input(all_floats[b]);
            int64_t n = vq_tensor_numel(g);
            vq_tensor *in[2] = {rnd(r, all_floats[a], -1, 1, 1, &n), g};
            check(r, in, 2, 1, NULL, 0, EXACT);
        }
}

/* ---- matmul ---- */

static const struct mm_case {
    int nx, ny, no;
    int64_t x[3], y[3], out[3];
    bool tx, ty;
} mm_cases[] = {
    {2, 2, 2, {3, 4}, {4, 5}, {3, 5}, false, false},
    {3, 3, 3, {2, 3, 4}, {2, 4, 5}, {2, 3, 5}, false, false},
    {3, 2, 3, {2, 3, 4}, {4, 5}, {2, 3, 5}, false, false},   /* shared Y, X stacked */
    {3, 2, 3, {2, 4, 3}, {4, 5}, {2, 3, 5}, true, false},    /* shared Y, X transposed */
    {3, 2, 3, {2, 4, 3}, {5, 4}, {2, 3, 5}, true, true},
    {3, 3, 3, {2, 3, 4}, {2, 5, 4}, {2, 3, 5}, false, true},
    {3, 3, 3, {3, 4, 2}, {3, 5, 4}, {3, 2, 5}, true, true},
    {2, 2, 2, {3, 0}, {0, 5}, {3, 5}, false, false},          /* k == 0: zeros */
    {3, 2, 3, {0, 3, 4}, {4, 5}, {0, 3, 5}, false, false},    /* no batches */
    {3, 2, 3, {0, 4, 3}, {4, 5}, {0, 3, 5}, true, false},
};

static void case_matmul(struct run *r)
{
    bool grad = !strcmp(r->op, "matmul_grad");
    for (int d = 0; d < N_OF(floats); d++)
        for (int c = 0; c < N_OF(mm_cases); c++)
            for (int wrt = 0; wrt < (grad ? 2 : 1); wrt++) {
                const struct mm_case *m = &mm_cases[c];
                vq_dtype dt = floats[d];
                describe(r, "%s, case %d, wrt %d", vq_dtype_name(dt), c, wrt);
                vq_attr at[4] = {VQ_ATTR_B("transpose_x", m->tx), VQ_ATTR_B("transpose_y", m->ty),
                                 VQ_ATTR_F("alpha", 0.5), VQ_ATTR_I("wrt", wrt)};
                vq_tensor *in[3] = {rnd(r, dt, -1, 1, m->nx, m->x), rnd(r, dt, -1, 1, m->ny, m->y),
                                    grad ? rnd(r, dt, -1, 1, m->no, m->out) : NULL};
                /* cuBLAS sums in its own order */
                check(r, in, grad ? 3 : 2, 1, at, grad ? 4 : 3, CLOSE);
            }
}

/* ---- init ---- */

static void case_zeros_like(struct run *r)
{
    for (int d = 0; d < N_OF(floats); d++) {
        describe(r, "%s", vq_dtype_name(floats[d]));
        vq_tensor *in[1] = {rnd(r, floats[d], -4, 4, DIMS(5, 7))};
        check(r, in, 1, 1, NULL, 0, EXACT);
    }
}

static void case_fill(struct run *r)
{
    for (int d = 0; d < N_OF(all_dtypes); d++) {
        vq_dtype dt = all_dtypes[d];
        describe(r, "%s", vq_dtype_name(dt));
        vq_attr at[3] = {VQ_ATTR_IS("shape", ((int64_t[]){3, 4}), 2),
                         VQ_ATTR_S("dtype", vq_dtype_name(dt)),
                         dt == VQ_F32 || dt == VQ_F64 ? VQ_ATTR_F("value", -2.7)
                         : dt == VQ_I64               ? VQ_ATTR_I("value", (1ll << 40) + 3)
                         : dt == VQ_I32               ? VQ_ATTR_I("value", -7)
                                                      : VQ_ATTR_I("value", 1)};
        check(r, NULL, 0, 1, at, 3, EXACT);
        /* the shape as an input, read when the op runs */
        vq_tensor *shape = NULL;
        cr_assert_eq(vq_tensor_from(&shape, VQ_I64, 1, (const int64_t[]){3},
                                    (const int64_t[]){2, 0 + 3, 4}),
                     0);
        check(r, &shape, 1, 1, at + 1, 2, EXACT);
    }
}

/* shape: X's dims, in part, for several ranks. */
static void case_shape(struct run *r)
{
    static const int64_t s[4][2] = {{0, 99}, {1, 3}, {-2, 99}, {2, 1}};
    for (int c = 0; c < 4; c++) {
        describe(r, "start %lld, end %lld", (long long)s[c][0], (long long)s[c][1]);
        vq_attr at[2] = {VQ_ATTR_I("start", s[c][0]), VQ_ATTR_I("end", s[c][1])};
        vq_tensor *in[1] = {rnd(r, VQ_F32, -1, 1, DIMS(2, 3, 4))};
        check(r, in, 1, 1, at, s[c][1] == 99 ? 1 : 2, EXACT);
    }
}

/* range in every numeric dtype, rising and falling, empty. */
static void case_range(struct run *r)
{
    static const double b[4][3] = {{0, 7, 1}, {10, -3, -2.5}, {1, 2, 0.125}, {4, 4, 1}};
    for (int c = 0; c < 4; c++)
        for (int d = 0; d < N_OF(numerics); d++) {
            vq_dtype dt = numerics[d];
            if (dt != VQ_F32 && dt != VQ_F64 && (b[c][2] != (int)b[c][2]))
                continue;
            describe(r, "%s, case %d", vq_dtype_name(dt), c);
            vq_tensor *in[3];
            for (int i = 0; i < 3; i++) {
                double v = b[c][i];
                in[i] = oc_from(dt, 0, NULL, &v);
            }
            check(r, in, 3, 1, NULL, 0, EXACT);
        }
}

static vq_tensor *state_tensor(int64_t seed, int64_t counter)
{
    vq_tensor *t = NULL;
    cr_assert_eq(vq_tensor_from(&t, VQ_I64, 1, (const int64_t[]){2},
                                (const int64_t[]){seed, counter}),
                 0, "%s", vq_errmsg());
    return t;
}

static void case_random(struct run *r)
{
    bool uniform = !strcmp(r->op, "uniform_random");
    for (int d = 0; d < N_OF(floats); d++) {
        describe(r, "%s", vq_dtype_name(floats[d]));
        vq_attr at[5] = {VQ_ATTR_IS("shape", ((int64_t[]){10, 100}), 2),
                         VQ_ATTR_S("dtype", vq_dtype_name(floats[d])),
                         uniform ? VQ_ATTR_F("min", -2) : VQ_ATTR_F("mean", 1),
                         uniform ? VQ_ATTR_F("max", 3) : VQ_ATTR_F("std", 2), VQ_ATTR_I("seed", 7)};
        /* uniform is exact arithmetic; gaussian uses log and cos */
        check(r, NULL, 0, 1, at, 5, uniform ? EXACT : CLOSE);
        /* From a generator state in device memory (seed, counter): the
         * kernel reads it there; StateOut is it advanced by 1000. */
        describe(r, "%s, State (7, 2^40 + 3)", vq_dtype_name(floats[d]));
        vq_tensor *st[1] = {state_tensor(7, (1ll << 40) + 3)};
        check(r, st, 1, 2, at, 4, uniform ? EXACT : CLOSE);
    }
}

/* dropout with its seed or a state, training and inference, p 0 and
 * not; Out and Mask exact (one comparison and one product each). */
static void case_dropout(struct run *r)
{
    for (int d = 0; d < N_OF(floats); d++)
        for (int c = 0; c < 6; c++) {
            bool with_state = c & 1, is_test = c == 4 || c == 5;
            double p = c < 2 ? 0 : 0.35;
            describe(r, "%s, p %g, is_test %d, state %d", vq_dtype_name(floats[d]), p, is_test,
                     with_state);
            vq_attr at[3] = {VQ_ATTR_F("p", p), VQ_ATTR_B("is_test", is_test),
                             VQ_ATTR_I("seed", 21)};
            vq_tensor *in[2] = {rnd(r, floats[d], -3, 3, DIMS(9, 70)),
                                with_state ? state_tensor(21, 5000) : NULL};
            check(r, in, with_state ? 2 : 1, with_state ? 3 : 2, at, with_state ? 2 : 3, EXACT);
        }
}

/* ---- optimizers ---- */

/* The optimizers take their rate from the attribute learning_rate (li 0)
 * or from the input LearningRate (li 1: a random rate, shape [] or [1]),
 * which the kernels read from device memory. */
static vq_tensor *lr_input(struct run *r, vq_dtype dt, int ndim)
{
    return rnd(r, dt, 0.01, 0.2, ndim, (const int64_t[]){1});
}

static void case_sgd(struct run *r)
{
    for (int d = 0; d < N_OF(floats); d++)
        for (int li = 0; li < 3; li++) {
            describe(r, "%s, %s", vq_dtype_name(floats[d]),
                     li ? "LearningRate input" : "learning_rate attribute");
            vq_attr at = VQ_ATTR_F("learning_rate", 0.1);
            vq_tensor *in[3] = {rnd(r, floats[d], -1, 1, DIMS(5, 6)),
                                rnd(r, floats[d], -1, 1, DIMS(5, 6)),
                                li ? lr_input(r, floats[d], li - 1) : NULL};
            check(r, in, li ? 3 : 2, 1, &at, li ? 0 : 1, EXACT);
        }
}

static void case_momentum(struct run *r)
{
    for (int d = 0; d < N_OF(floats); d++)
        for (int nesterov = 0; nesterov < 2; nesterov++)
            for (int li = 0; li < 2; li++) {
                describe(r, "%s, nesterov %d, %s", vq_dtype_name(floats[d]), nesterov,
                         li ? "LearningRate input" : "learning_rate attribute");
                vq_attr at[3] = {VQ_ATTR_F("learning_rate", 0.1), VQ_ATTR_F("mu", 0.8),
                                 VQ_ATTR_B("use_nesterov", nesterov)};
                vq_tensor *in[4] = {rnd(r, floats[d], -1, 1, DIMS(5, 6)),
                                    rnd(r, floats[d], -1, 1, DIMS(5, 6)),
                                    rnd(r, floats[d], -1, 1, DIMS(5, 6)),
                                    li ? lr_input(r, floats[d], nesterov) : NULL};
                check(r, in, 3 + li, 2, at + li, 3 - li, EXACT);
            }
}

static vq_tensor *step_tensor(int64_t step)
{
    vq_tensor *t = NULL;
    cr_assert_eq(vq_tensor_from(&t, VQ_I64, 0, NULL, &step), 0, "%s", vq_errmsg());
    return t;
}

static void case_adam(struct run *r)
{
    for (int d = 0; d < N_OF(floats); d++)
        for (int li = 0; li < 2; li++) {
            vq_dtype dt = floats[d];
            describe(r, "%s, %s", vq_dtype_name(dt),
                     li ? "LearningRate input" : "learning_rate attribute");
            vq_attr at[2] = {VQ_ATTR_F("learning_rate", 0.01), VQ_ATTR_F("beta1", 0.8)};
            vq_tensor *in[6] = {rnd(r, dt, -1, 1, DIMS(5, 6)), rnd(r, dt, -1, 1, DIMS(5, 6)),
                                rnd(r, dt, -0.1, 0.1, DIMS(5, 6)), rnd(r, dt, 0, 0.1, DIMS(5, 6)),
                                step_tensor(3), li ? lr_input(r, dt, d) : NULL};
            check(r, in, 5 + li, 4, at + li, 2 - li, EXACT);
        }
}

/* Each kind at a few steps (inside the warmup, at and past its end and
 * t_max), f32 and f64: the CUDA kernel computes the rate with the CPU's
 * own code, so bit for bit. */
static void case_lr_schedule(struct run *r)
{
    static const char *const kinds[] = {"step", "cosine", "linear", "warmup_cosine"};
    static const int64_t steps[] = {0, 3, 5, 11, 40};
    for (int k = 0; k < N_OF(kinds); k++)
        for (int d = 0; d < N_OF(floats); d++)
            for (int s = 0; s < N_OF(steps); s++) {
                describe(r, "%s, %s, step %lld", kinds[k], vq_dtype_name(floats[d]),
                         (long long)steps[s]);
                vq_attr at[10] = {VQ_ATTR_S("kind", kinds[k]), VQ_ATTR_F("base_lr", 0.3),
                                  VQ_ATTR_S("dtype", vq_dtype_name(floats[d]))};
                int n = 3;
                if (k == 0) {
                    at[n++] = VQ_ATTR_I("step_size", 4);
                    at[n++] = VQ_ATTR_F("gamma", 0.7);
                }
                if (k == 1 || k == 3) {
                    at[n++] = VQ_ATTR_I("t_max", 9);
                    at[n++] = VQ_ATTR_F("eta_min", 0.02);
                }
                if (k >= 2) {
                    at[n++] = VQ_ATTR_F("start_factor", 0.1);
                    at[n++] = VQ_ATTR_I("total_iters", 5);
                }
                vq_tensor *in[1] = {step_tensor(steps[s])};
                check(r, in, 1, 2, at, n, EXACT);
            }
}

/* ---- convolutions, pools, batch_norm ---- */

/* X [n, c, h, w], W [m, c / groups, kh, kw] and the attributes; Out's
 * height and width (oh, ow) for the gradient's dOut. */
static const struct conv_gpu_case {
    int64_t x[4], w[4], groups, stride[2], pad[4], dil[2], oh, ow;
    bool bias;
} conv_gpu_cases[] = {
    {{2, 4, 7, 6}, {6, 2, 3, 3}, 2, {2, 2}, {1, 1, 1, 1}, {1, 1}, 4, 3, true},
    {{1, 3, 8, 7}, {5, 3, 3, 2}, 1, {1, 2}, {0, 2, 1, 0}, {1, 1}, 7, 4, false},
    {{1, 2, 9, 9}, {3, 2, 3, 3}, 1, {1, 1}, {2, 2, 2, 2}, {2, 2}, 9, 9, true},
    {{2, 6, 6, 5}, {6, 1, 3, 3}, 6, {1, 1}, {1, 1, 1, 1}, {1, 1}, 6, 5, true}, /* depthwise */
    {{3, 4, 5, 5}, {4, 4, 1, 1}, 1, {1, 1}, {0, 0, 0, 0}, {1, 1}, 5, 5, true}, /* 1x1 */
};

static void case_conv2d(struct run *r)
{
    bool grad = !strcmp(r->op, "conv2d_grad");
    for (int d = 0; d < N_OF(floats); d++)
        for (int c = 0; c < N_OF(conv_gpu_cases); c++)
            for (int wrt = 0; wrt < (grad ? 3 : 1); wrt++) {
                const struct conv_gpu_case *k = &conv_gpu_cases[c];
                vq_dtype dt = floats[d];
                describe(r, "%s, case %d, wrt %d", vq_dtype_name(dt), c, wrt);
                vq_attr at[5] = {VQ_ATTR_IS("strides", k->stride, 2),
                                 VQ_ATTR_IS("pads", k->pad, 4),
                                 VQ_ATTR_IS("dilations", k->dil, 2),
                                 VQ_ATTR_I("groups", k->groups), VQ_ATTR_I("wrt", wrt)};
                vq_tensor *in[3] = {rnd(r, dt, -1, 1, 4, k->x), rnd(r, dt, -1, 1, 4, k->w), NULL};
                int nin = 2;
                if (grad)
                    in[nin++] = rnd(r, dt, -1, 1, DIMS(k->x[0], k->w[0], k->oh, k->ow));
                else if (k->bias)
                    in[nin++] = rnd(r, dt, -1, 1, 1, &k->w[0]);
                /* cuBLAS sums in its own order */
                check(r, in, nin, 1, at, grad ? 5 : 4, CLOSE);
            }
}

/* conv_transpose2d: X [n, c, h, w] and W [c, m / groups, kh, kw] (the
 * cases above read the other way: their dOut shapes are these X), with an
 * output_padding where the stride allows one. */
static void case_conv_transpose2d(struct run *r)
{
    for (int d = 0; d < N_OF(floats); d++)
        for (int c = 0; c < N_OF(conv_gpu_cases); c++) {
            const struct conv_gpu_case *k = &conv_gpu_cases[c];
            vq_dtype dt = floats[d];
            describe(r, "%s, case %d", vq_dtype_name(dt), c);
            int64_t op[2] = {k->stride[0] > 1, 0};
            vq_attr at[5] = {VQ_ATTR_IS("strides", k->stride, 2), VQ_ATTR_IS("pads", k->pad, 4),
                             VQ_ATTR_IS("dilations", k->dil, 2), VQ_ATTR_I("groups", k->groups),
                             VQ_ATTR_IS("output_padding", op, 2)};
            int64_t m = k->w[1] * k->groups;
            vq_tensor *in[3] = {rnd(r, dt, -1, 1, DIMS(k->x[0], k->w[0], k->oh, k->ow)),
                                rnd(r, dt, -1, 1, 4, k->w), NULL};
            int nin = 2;
            if (k->bias)
                in[nin++] = rnd(r, dt, -1, 1, 1, &m);
            check(r, in, nin, 1, at, 5, CLOSE);
        }
}

/* X [n, c, d, h, w], W [m, c / groups, kd, kh, kw] and the attributes
 * (conv3d.c's ops). */
static const struct conv3d_gpu_case {
    int64_t x[5], w[5], groups, stride[3], pad[6], dil[3];
    bool bias;
} conv3d_gpu_cases[] = {
    {{2, 4, 5, 4, 6}, {6, 2, 3, 2, 3}, 2, {2, 1, 2}, {1, 0, 1, 1, 1, 0}, {1, 1, 1}, true},
    {{1, 3, 4, 5, 5}, {4, 3, 2, 3, 3}, 1, {1, 1, 1}, {0, 1, 2, 1, 1, 0}, {2, 1, 2}, false},
    {{2, 3, 3, 4, 4}, {3, 1, 3, 3, 3}, 3, {1, 1, 1}, {1, 1, 1, 1, 1, 1}, {1, 1, 1}, true},
};

/* conv3d's Out shape for case k. */
static void conv3d_out(const struct conv3d_gpu_case *k, int64_t *o)
{
    o[0] = k->x[0];
    o[1] = k->w[0];
    for (int i = 0; i < 3; i++)
        o[2 + i] = (k->x[2 + i] + k->pad[i] + k->pad[3 + i] - k->dil[i] * (k->w[2 + i] - 1) - 1) /
                       k->stride[i] +
                   1;
}

/* conv3d and conv3d_grad (each wrt); conv_transpose3d over the cases read
 * the other way (X of conv3d's Out shape, W as given: [c_out_of_conv3d,
 * c / groups, ...]), with an output_padding where a stride allows one. */
static void case_conv3d(struct run *r)
{
    bool grad = !strcmp(r->op, "conv3d_grad"), tr = !strcmp(r->op, "conv_transpose3d");
    for (int d = 0; d < N_OF(floats); d++)
        for (int c = 0; c < N_OF(conv3d_gpu_cases); c++)
            for (int wrt = 0; wrt < (grad ? 3 : 1); wrt++) {
                const struct conv3d_gpu_case *k = &conv3d_gpu_cases[c];
                vq_dtype dt = floats[d];
                describe(r, "%s, case %d, wrt %d", vq_dtype_name(dt), c, wrt);
                int64_t o[5], op[3];
                conv3d_out(k, o);
                for (int i = 0; i < 3; i++)
                    op[i] = k->stride[i] > 1;
                vq_attr at[5] = {VQ_ATTR_IS("strides", k->stride, 3), VQ_ATTR_IS("pads", k->pad, 6),
                                 VQ_ATTR_IS("dilations", k->dil, 3), VQ_ATTR_I("groups", k->groups),
                                 tr ? VQ_ATTR_IS("output_padding", op, 3) : VQ_ATTR_I("wrt", wrt)};
                vq_tensor *in[3] = {rnd(r, dt, -1, 1, 5, tr ? o : k->x), rnd(r, dt, -1, 1, 5, k->w),
                                    NULL};
                int nin = 2;
                int64_t m = tr ? k->w[1] * k->groups : k->w[0];
                if (grad)
                    in[nin++] = rnd(r, dt, -1, 1, 5, o);
                else if (k->bias)
                    in[nin++] = rnd(r, dt, -1, 1, 1, &m);
                /* cuBLAS sums in its own order */
                check(r, in, nin, 1, at, grad || tr ? 5 : 4, CLOSE);
            }
}

/* X [n, c, h, w], the attributes, and Out's height and width. */
static const struct pool_gpu_case {
    int64_t x[4], kernel[2], stride[2], pad[4], dil[2], oh, ow;
    bool ceil_mode, include_pad;
} pool_gpu_cases[] = {
    {{2, 3, 7, 7}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 4, 4, false, false},
    {{1, 2, 6, 7}, {3, 2}, {2, 2}, {0, 1, 2, 0}, {1, 1}, 3, 4, true, true},
    {{2, 1, 8, 8}, {3, 3}, {3, 3}, {1, 1, 0, 0}, {1, 1}, 3, 3, true, false},
    {{1, 2, 9, 9}, {3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}, 9, 9, false, true}, /* max: dilated */
};

static void case_pool(struct run *r)
{
    bool max = !strncmp(r->op, "max", 3), grad = strstr(r->op, "_grad") != NULL;
    for (int d = 0; d < N_OF(floats); d++)
        for (int c = 0; c < N_OF(pool_gpu_cases); c++) {
            const struct pool_gpu_case *k = &pool_gpu_cases[c];
            vq_dtype dt = floats[d];
            bool dilated = k->dil[0] != 1 || k->dil[1] != 1;
            if (dilated && !max)
                continue;
            describe(r, "%s, case %d", vq_dtype_name(dt), c);
            vq_attr at[5] = {VQ_ATTR_IS("kernel", k->kernel, 2),
                             VQ_ATTR_IS("strides", k->stride, 2), VQ_ATTR_IS("pads", k->pad, 4),
                             VQ_ATTR_B("ceil_mode", k->ceil_mode),
                             max ? VQ_ATTR_IS("dilations", k->dil, 2)
                                 : VQ_ATTR_B("count_include_pad", k->include_pad)};
            vq_tensor *in[2] = {rnd(r, dt, -1, 1, 4, k->x),
                                grad ? rnd(r, dt, -1, 1, DIMS(k->x[0], k->x[1], k->oh, k->ow))
                                     : NULL};
            /* the same comparisons and the same sums in the same order */
            check(r, in, grad ? 2 : 1, 1, at, 5, max ? EXACT : CLOSE);
        }
}

static void case_global_avg_pool(struct run *r)
{
    bool grad = !strcmp(r->op, "global_avg_pool_grad");
    for (int d = 0; d < N_OF(floats); d++) {
        describe(r, "%s", vq_dtype_name(floats[d]));
        vq_tensor *in[2] = {rnd(r, floats[d], -1, 1, DIMS(2, 3, 5, 4)),
                            grad ? rnd(r, floats[d], -1, 1, DIMS(2, 3, 1, 1)) : NULL};
        check(r, in, grad ? 2 : 1, 1, NULL, 0, CLOSE); /* a tree of sums on the device */
    }
}

static void case_batch_norm(struct run *r)
{
    bool grad = !strcmp(r->op, "batch_norm_grad");
    for (int d = 0; d < N_OF(floats); d++)
        for (int wrt = 0; wrt < (grad ? 5 : 1); wrt++) {
            vq_dtype dt = floats[d];
            describe(r, "%s, wrt %d", vq_dtype_name(dt), wrt);
            vq_attr at[2] = {VQ_ATTR_F("epsilon", 1e-3), VQ_ATTR_I("wrt", wrt)};
            /* forward: X, Scale, Bias, Mean, Var; grad: X, Scale, Mean, Var, dOut */
            vq_tensor *in[5] = {rnd(r, dt, -2, 2, DIMS(2, 3, 4, 5)), rnd(r, dt, 0.5, 1.5, DIMS(3)),
                                rnd(r, dt, -1, 1, DIMS(3)),
                                grad ? rnd(r, dt, 0.5, 2, DIMS(3)) : rnd(r, dt, -1, 1, DIMS(3)),
                                grad ? rnd(r, dt, -1, 1, DIMS(2, 3, 4, 5))
                                     : rnd(r, dt, 0.5, 2, DIMS(3))};
            check(r, in, 5, 1, at, grad ? 2 : 1, CLOSE);
        }
}

/* batch_norm_train (X, Scale, Bias, Mean, Var) -> Out, NewMean, NewVar;
 * its gradient with every mask of the gradients that flow, one channel of
 * more elements than a block has threads. */
static void case_batch_norm_train(struct run *r)
{
    bool grad = !strcmp(r->op, "batch_norm_train_grad");
    static const int64_t shapes[2][4] = {{2, 3, 4, 5}, {3, 2, 300, 1}};
    for (int d = 0; d < N_OF(floats); d++)
        for (int sh = 0; sh < 2; sh++)
            for (int wrt = 0; wrt < (grad ? 3 : 1); wrt++)
                for (int grads = grad ? 1 : 0; grads < (grad ? 8 : 1); grads++) {
                    vq_dtype dt = floats[d];
                    const int64_t *xs = shapes[sh];
                    describe(r, "%s, shape %d, wrt %d, grads %d", vq_dtype_name(dt), sh, wrt,
                             grads);
                    vq_attr at[4] = {VQ_ATTR_F("epsilon", 1e-3), VQ_ATTR_F("momentum", 0.8),
                                     VQ_ATTR_I("wrt", wrt), VQ_ATTR_I("grads", grads)};
                    vq_tensor *in[5] = {rnd(r, dt, -2, 2, 4, xs), rnd(r, dt, 0.5, 1.5, 1, &xs[1])};
                    int nin = 2;
                    if (!grad) {
                        in[nin++] = rnd(r, dt, -1, 1, 1, &xs[1]);
                        in[nin++] = rnd(r, dt, -1, 1, 1, &xs[1]);
                        in[nin++] = rnd(r, dt, 0.5, 2, 1, &xs[1]);
                    }
                    if (grads & 1)
                        in[nin++] = rnd(r, dt, -1, 1, 4, xs);
                    for (int bit = 2; bit <= 4; bit <<= 1)
                        if (grads & bit)
                            in[nin++] = rnd(r, dt, -1, 1, 1, &xs[1]);
                    /* a tree of sums on the device */
                    check(r, in, nin, grad ? 1 : 3, at, grad ? 4 : 2, CLOSE);
                }
}

/* ---- indexing, extrema, layout ---- */

/* X's shape, Indices' shape and the axis. */
static const struct gather_gpu_case {
    int nx, ni;
    int64_t x[3], idx[2], axis;
} gather_gpu_cases[] = {
    {2, 1, {5, 3}, {7}, 0},   {2, 2, {4, 6}, {2, 3}, -1}, {3, 0, {2, 5, 3}, {0}, 1},
    {3, 1, {2, 3, 0}, {4}, 1}, {1, 1, {3}, {0}, 0},
};

/* gather over every dtype and both index dtypes; gather_grad (floats) with
 * indices from a short range, so that rows repeat. */
static void case_gather(struct run *r)
{
    bool grad = !strcmp(r->op, "gather_grad");
    for (int c = 0; c < N_OF(gather_gpu_cases); c++)
        for (int d = 0; d < (grad ? N_OF(floats) : N_OF(all_dtypes)); d++)
            for (int t = 0; t < 2; t++) {
                const struct gather_gpu_case *k = &gather_gpu_cases[c];
                vq_dtype dt = grad ? floats[d] : all_dtypes[d], it = t ? VQ_I64 : VQ_I32;
                int axis = (int)(k->axis < 0 ? k->axis + k->nx : k->axis), no = 0;
                int64_t dim = k->x[axis], os[4];
                for (int i = 0; i < axis; i++)
                    os[no++] = k->x[i];
                for (int i = 0; i < k->ni; i++)
                    os[no++] = k->idx[i];
                for (int i = axis + 1; i < k->nx; i++)
                    os[no++] = k->x[i];
                describe(r, "%s, indices %s, case %d", vq_dtype_name(dt), vq_dtype_name(it), c);
                vq_attr at = VQ_ATTR_I("axis", k->axis);
                vq_tensor *in[3] = {rnd(r, dt, -5, 5, k->nx, k->x),
                                    rnd(r, it, (double)-dim, (double)dim, k->ni, k->idx),
                                    grad ? rnd(r, dt, -1, 1, no, os) : NULL};
                /* gather_grad adds with atomics on the device */
                check(r, in, grad ? 3 : 2, 1, &at, 1, grad ? CLOSE : EXACT);
            }
}

/* X's shape, Indices' shape and the axis. */
static const struct elements_gpu_case {
    int n;
    int64_t x[3], idx[3], axis;
} elements_gpu_cases[] = {
    {2, {5, 3}, {7, 3}, 0},
    {3, {2, 4, 3}, {2, 5, 2}, -2},
    {1, {6}, {4}, 0},
    {2, {3, 2}, {0, 2}, 0},
};

/* gather_elements over every dtype and both index dtypes; its gradient
 * (floats) with indices from a short range, so that elements repeat. */
static void case_gather_elements(struct run *r)
{
    bool grad = !strcmp(r->op, "gather_elements_grad");
    for (int c = 0; c < N_OF(elements_gpu_cases); c++)
        for (int d = 0; d < (grad ? N_OF(floats) : N_OF(all_dtypes)); d++)
            for (int t = 0; t < 2; t++) {
                const struct elements_gpu_case *k = &elements_gpu_cases[c];
                vq_dtype dt = grad ? floats[d] : all_dtypes[d], it = t ? VQ_I64 : VQ_I32;
                int axis = (int)(k->axis < 0 ? k->axis + k->n : k->axis);
                int64_t dim = k->x[axis];
                describe(r, "%s, indices %s, case %d", vq_dtype_name(dt), vq_dtype_name(it), c);
                vq_attr at = VQ_ATTR_I("axis", k->axis);
                vq_tensor *in[3] = {rnd(r, dt, -5, 5, k->n, k->x),
                                    rnd(r, it, (double)-dim, (double)dim, k->n, k->idx),
                                    grad ? rnd(r, dt, -1, 1, k->n, k->idx) : NULL};
                /* the gradient adds with atomics on the device */
                check(r, in, grad ? 3 : 2, 1, &at, 1, grad ? CLOSE : EXACT);
            }
}

/* scatter_elements with every reduction (none in every dtype, the others
 * in the numeric ones) and both index dtypes, indices from [-dim, dim)
 * repeating along the axis: one thread per lane on the device, in the
 * CPU's order, so duplicates resolve and sums round alike: EXACT. */
static void case_scatter_elements(struct run *r)
{
    static const char *const reds[] = {"none", "add", "mul", "max", "min"};
    for (int c = 0; c < N_OF(elements_gpu_cases); c++)
        for (int m = 0; m < N_OF(reds); m++)
            for (int d = 0; d < (m ? N_OF(numerics) : N_OF(all_dtypes)); d++)
                for (int t = 0; t < 2; t++) {
                    const struct elements_gpu_case *k = &elements_gpu_cases[c];
                    vq_dtype dt = m ? numerics[d] : all_dtypes[d], it = t ? VQ_I64 : VQ_I32;
                    int axis = (int)(k->axis < 0 ? k->axis + k->n : k->axis);
                    double dim = (double)k->x[axis];
                    describe(r, "%s, reduction %s, indices %s, case %d", vq_dtype_name(dt), reds[m],
                             vq_dtype_name(it), c);
                    vq_attr at[2] = {VQ_ATTR_I("axis", k->axis), VQ_ATTR_S("reduction", reds[m])};
                    vq_tensor *in[3] = {rnd(r, dt, -5, 5, k->n, k->x),
                                        rnd(r, it, -dim, dim, k->n, k->idx),
                                        rnd(r, dt, -5, 5, k->n, k->idx)};
                    check(r, in, 3, 1, at, 2, EXACT);
                }
}

/* X's shape, Indices' shape and batch_dims of scatter_nd and gather_nd. */
static const struct nd_gpu_case {
    int nx, ni;
    int64_t x[3], idx[3];
    int batch;
} nd_gpu_cases[] = {
    {2, 2, {4, 3}, {6, 1}, 0},    {3, 2, {2, 3, 4}, {5, 2}, 0}, {3, 3, {2, 3, 4}, {2, 4, 1}, 1},
    {2, 2, {3, 4}, {7, 2}, 0},    {2, 2, {3, 4}, {0, 1}, 0},    {3, 3, {2, 3, 2}, {2, 3, 2}, 1},
    {2, 3, {3, 2}, {2, 3, 1}, 0},
};

/* Random tuples of case k: entry j from [-dim, dim) of the dim it
 * indexes, so that tuples repeat. */
static vq_tensor *nd_gpu_indices(struct run *r, const struct nd_gpu_case *k, vq_dtype it)
{
    vq_tensor *t = rnd(r, it, 0, 1, k->ni, k->idx);
    int e = (int)k->idx[k->ni - 1];
    for (int64_t i = 0; i < vq_tensor_numel(t); i++) {
        double dim = (double)k->x[k->batch + i % e];
        oc_set(t, i, floor(oc_uniform(&r->rng, -dim, dim)));
    }
    return t;
}

/* scatter_nd with every reduction (as scatter_elements) and gather_nd in
 * every dtype, both index dtypes: EXACT (one thread per batch and slice
 * position, the tuples in order). */
static void case_nd(struct run *r)
{
    static const char *const reds[] = {"none", "add", "mul", "max", "min"};
    bool gather = !strcmp(r->op, "gather_nd");
    for (int c = 0; c < N_OF(nd_gpu_cases); c++)
        for (int m = 0; m < (gather ? 1 : N_OF(reds)); m++)
            for (int d = 0; d < (m ? N_OF(numerics) : N_OF(all_dtypes)); d++)
                for (int t = 0; t < 2; t++) {
                    const struct nd_gpu_case *k = &nd_gpu_cases[c];
                    vq_dtype dt = m ? numerics[d] : all_dtypes[d], it = t ? VQ_I64 : VQ_I32;
                    int64_t us[VQ_MAX_DIMS], kk = k->idx[k->ni - 1];
                    int nu = 0;
                    for (int i = 0; i < k->ni - 1; i++)
                        us[nu++] = k->idx[i];
                    for (int i = k->batch + (int)kk; i < k->nx; i++)
                        us[nu++] = k->x[i];
                    describe(r, "%s, reduction %s, indices %s, case %d", vq_dtype_name(dt),
                             gather ? "-" : reds[m], vq_dtype_name(it), c);
                    vq_attr at[2] = {VQ_ATTR_I("batch_dims", k->batch),
                                     VQ_ATTR_S("reduction", reds[m])};
                    vq_tensor *in[3] = {rnd(r, dt, -5, 5, k->nx, k->x), nd_gpu_indices(r, k, it),
                                        gather ? NULL : rnd(r, dt, -5, 5, nu, us)};
                    check(r, in, gather ? 2 : 3, 1, at, gather ? 1 : 2, EXACT);
                }
}

/* resize in every mode (nearest in every dtype) and transformation, by
 * scales and by sizes, up and down; its gradient (floats, with atomics on
 * the device). */
static void case_resize(struct run *r)
{
    static const struct {
        int n;
        int64_t x[4], sizes[4];
        double scales[4];
    } rs[] = {{4, {2, 3, 4, 5}, {0}, {1, 1, 2, 1.5}},
              {4, {1, 2, 5, 4}, {1, 2, 3, 7}, {0}},
              {2, {6, 3}, {0}, {0.6, 2.5}},
              {1, {4}, {1}, {0}}};
    static const char *const modes[] = {"nearest", "linear", "cubic"};
    static const char *const ctms[] = {"half_pixel", "pytorch_half_pixel",   "align_corners",
                                       "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};
    static const double roi[8] = {0, 0.1, -0.2, 0.3, 1, 0.8, 1.1, 0.9};
    bool grad = !strcmp(r->op, "resize_grad");
    for (int c = 0; c < N_OF(rs); c++)
        for (int m = 0; m < N_OF(modes); m++)
            for (int t = 0; t < N_OF(ctms); t++)
                for (int d = 0; d < (grad || m ? N_OF(floats) : N_OF(all_dtypes)); d++) {
                    vq_dtype dt = grad || m ? floats[d] : all_dtypes[d];
                    int n = rs[c].n;
                    double lohi[8];
                    for (int i = 0; i < n; i++) {
                        lohi[i] = roi[4 - n + i];
                        lohi[n + i] = roi[8 - n + i];
                    }
                    bool by_scales = rs[c].scales[0] > 0;
                    vq_attr at[6] = {by_scales ? VQ_ATTR_FS("scales", rs[c].scales, n)
                                               : VQ_ATTR_IS("sizes", rs[c].sizes, n),
                                     VQ_ATTR_S("mode", modes[m]),
                                     VQ_ATTR_S("coordinate_transformation_mode", ctms[t]),
                                     VQ_ATTR_FS("roi", lohi, 2 * n),
                                     VQ_ATTR_F("extrapolation_value", 1),
                                     VQ_ATTR_B("exclude_outside", t == 1)};
                    describe(r, "%s, case %d, %s, %s", vq_dtype_name(dt), c, modes[m], ctms[t]);
                    vq_tensor *x = rnd(r, dt, -5, 5, n, rs[c].x), *out = NULL;
                    cr_assert_eq(vq_op_run(NULL, "resize", &x, 1, &out, 1, at, 6), 0, "%s",
                                 vq_errmsg());
                    vq_tensor *in[2] = {x, NULL};
                    if (grad)
                        in[1] = rnd(r, dt, -1, 1, vq_tensor_ndim(out), vq_tensor_shape(out));
                    vq_tensor_release(out);
                    check(r, in, grad ? 2 : 1, 1, at, 6, grad ? CLOSE : EXACT);
                }
}

/* lstm, gru, rnn (tanh and relu): one layer, both directions and one,
 * with and without biases, states and Reserve, within check()'s 8 inputs;
 * their gradient ops one-directional without biases (gru and rnn with and
 * without H0; lstm without, for check()'s 4 outputs), Reserve from the CPU
 * forward call. */
static void case_rnn(struct run *r)
{
    char cell[8];
    bool grad = strstr(r->op, "_grad") != NULL;
    snprintf(cell, sizeof cell, "%.*s", (int)strcspn(r->op, "_"), r->op);
    int g = !strcmp(cell, "lstm") ? 4 : !strcmp(cell, "gru") ? 3 : 1;
    int ns = g == 4 ? 2 : 1;
    const int64_t T = 5, B = 3, I = 4, H = 6;
    for (int d = 0; d < N_OF(floats); d++)
        for (int v = 0; v < (grad ? 2 : 6); v++) {
            int bias = !grad && v >= 2 && v < 4, dirs = grad || bias ? 1 : 1 + (v & 1),
                states = grad ? v && ns == 1 : v >= 4, relu = v & 1;
            describe(r, "%s, %d direction(s), bias %d, states %d", vq_dtype_name(floats[d]), dirs,
                     bias, states);
            vq_attr at[5] = {VQ_ATTR_I("hidden_size", H), VQ_ATTR_B("bidirectional", dirs == 2),
                             VQ_ATTR_B("bias", bias)};
            int na = 3;
            if (g == 1)
                at[na++] = VQ_ATTR_S("nonlinearity", relu ? "relu" : "tanh");
            vq_tensor *in[8];
            int n = 0;
            in[n++] = rnd(r, floats[d], -1, 1, DIMS(T, B, I));
            for (int k = 0; k < dirs; k++) {
                in[n++] = rnd(r, floats[d], -0.5, 0.5, DIMS(g * H, I));
                in[n++] = rnd(r, floats[d], -0.5, 0.5, DIMS(g * H, H));
                for (int b = 0; bias && b < 2; b++)
                    in[n++] = rnd(r, floats[d], -0.5, 0.5, DIMS(g * H));
            }
            for (int s = 0; states && s < ns; s++)
                in[n++] = rnd(r, floats[d], -0.5, 0.5, DIMS(dirs, B, H));
            if (!grad) {
                check(r, in, n, 1 + ns + (v & 1), at, na, CLOSE);
                continue;
            }
            /* Reserve from the CPU forward call, then dY */
            vq_tensor *out[4] = {NULL};
            cr_assert_eq(vq_op_run(NULL, cell, in, n, out, 2 + ns, at, na), 0, "%s", vq_errmsg());
            int nfwd = n;
            in[n++] = vq_tensor_retain(out[1 + ns]);
            in[n++] = rnd(r, floats[d], -1, 1, DIMS(T, B, H));
            release(out, 2 + ns);
            at[na++] = VQ_ATTR_I("grads", 1);
            check(r, in, n, nfwd, at, na, CLOSE);
        }
}

/* cumsum on every axis, exclusive and reverse, in every numeric dtype. */
static void case_cumsum(struct run *r)
{
    static const struct {
        int n;
        int64_t x[3];
        int axis;
    } cs[] = {{1, {9}, 0}, {2, {3, 5}, 0}, {3, {2, 4, 3}, 1}, {3, {2, 4, 3}, -1}, {2, {0, 4}, 1}};
    for (int c = 0; c < N_OF(cs); c++)
        for (int f = 0; f < 4; f++)
            for (int d = 0; d < N_OF(numerics); d++) {
                describe(r, "%s, case %d, exclusive %d, reverse %d", vq_dtype_name(numerics[d]), c,
                         f & 1, f >> 1);
                vq_attr at[3] = {VQ_ATTR_I("axis", cs[c].axis), VQ_ATTR_B("exclusive", f & 1),
                                 VQ_ATTR_B("reverse", f & 2)};
                vq_tensor *in[1] = {rnd(r, numerics[d], -5, 5, cs[c].n, cs[c].x)};
                check(r, in, 1, 1, at, 3, EXACT);
            }
}

/* lrn and lrn_grad: odd and even sizes, one channel, a window wider than
 * the channels (pow is each side's own: close, not bit for bit). */
static void case_lrn(struct run *r)
{
    static const struct {
        int n;
        int64_t x[4], size;
    } ls[] = {{4, {2, 5, 3, 3}, 3}, {3, {2, 6, 4}, 4}, {2, {3, 1}, 5}, {4, {1, 3, 2, 2}, 9}};
    bool grad = !strcmp(r->op, "lrn_grad");
    for (int c = 0; c < N_OF(ls); c++)
        for (int d = 0; d < N_OF(floats); d++) {
            describe(r, "%s, case %d", vq_dtype_name(floats[d]), c);
            vq_attr at[4] = {VQ_ATTR_I("size", ls[c].size), VQ_ATTR_F("alpha", 0.3),
                             VQ_ATTR_F("beta", 0.75), VQ_ATTR_F("bias", 1.5)};
            vq_tensor *in[2] = {rnd(r, floats[d], -3, 3, ls[c].n, ls[c].x), NULL};
            if (grad)
                in[1] = rnd(r, floats[d], -1, 1, ls[c].n, ls[c].x);
            check(r, in, grad ? 2 : 1, 1, at, 4, CLOSE);
        }
}

/* reverse_sequence time- and batch-major in every dtype, lengths 0 to T
 * in i32 and i64. */
static void case_reverse_sequence(struct run *r)
{
    static const struct {
        int n;
        int64_t x[3];
        int batch_axis;
    } rs[] = {{2, {5, 4}, 1}, {3, {3, 6, 2}, 0}, {3, {7, 2, 3}, 1}};
    for (int c = 0; c < N_OF(rs); c++)
        for (int d = 0; d < N_OF(all_dtypes); d++)
            for (int li = 0; li < 2; li++) {
                describe(r, "%s, case %d, lengths %s", vq_dtype_name(all_dtypes[d]), c,
                         li ? "i64" : "i32");
                int64_t nb = rs[c].x[rs[c].batch_axis], nt = rs[c].x[1 - rs[c].batch_axis];
                vq_attr at[2] = {VQ_ATTR_I("batch_axis", rs[c].batch_axis),
                                 VQ_ATTR_I("time_axis", 1 - rs[c].batch_axis)};
                vq_tensor *in[2] = {rnd(r, all_dtypes[d], -5, 5, rs[c].n, rs[c].x),
                                    rnd(r, li ? VQ_I64 : VQ_I32, 0, (double)nt + 1, 1, &nb)};
                check(r, in, 2, 1, at, 2, EXACT);
            }
}

/* grid_sample in every mode, padding and align_corners, the grid past
 * X's edges; its gradient wrt X (atomics on the device: CLOSE) and wrt
 * Grid (a thread per point, the CPU's order: EXACT). */
static void case_grid_sample(struct run *r)
{
    static const char *const modes[] = {"bilinear", "nearest", "bicubic"};
    static const char *const pads[] = {"zeros", "border", "reflection"};
    bool grad = !strcmp(r->op, "grid_sample_grad");
    for (int m = 0; m < 3; m++)
        for (int p = 0; p < 3; p++)
            for (int a = 0; a < 2; a++)
                for (int d = 0; d < N_OF(floats); d++)
                    for (int wrt = 0; wrt < (grad ? 2 : 1); wrt++) {
                        vq_dtype dt = floats[d];
                        describe(r, "%s, %s, %s, align_corners %d, wrt %d", vq_dtype_name(dt),
                                 modes[m], pads[p], a, wrt);
                        vq_attr at[4] = {VQ_ATTR_S("mode", modes[m]),
                                         VQ_ATTR_S("padding_mode", pads[p]),
                                         VQ_ATTR_B("align_corners", a), VQ_ATTR_I("wrt", wrt)};
                        vq_tensor *in[3] = {rnd(r, dt, -2, 2, DIMS(2, 3, 5, 6)),
                                            rnd(r, dt, -1.4, 1.4, DIMS(2, 4, 7, 2)),
                                            grad ? rnd(r, dt, -1, 1, DIMS(2, 3, 4, 7)) : NULL};
                        check(r, in, grad ? 3 : 2, 1, at, grad ? 4 : 3,
                              grad && wrt == 0 ? CLOSE : EXACT);
                    }
}

/* roi_align in both modes and transformations, fixed and adaptive
 * sampling, RoIs inside, across and outside X; its gradient (avg, atomics
 * on the device). */
static void case_roi_align(struct run *r)
{
    static const double rois[20] = {0,   0, 5,   4, 1.2, 0.7, 3.3, 4.9, -2, -1.5,
                                    2.5, 3, 3.5, 4, 9,   12,  4,   1,   1,  3};
    static const double batch[5] = {0, 1, 1, 0, 1};
    bool grad = !strcmp(r->op, "roi_align_grad");
    for (int m = 0; m < (grad ? 1 : 2); m++)
        for (int h = 0; h < 2; h++)
            for (int ratio = 0; ratio < 3; ratio += 2)
                for (int d = 0; d < N_OF(floats); d++)
                    for (int bt = 0; bt < 2; bt++) {
                        vq_dtype dt = floats[d];
                        describe(r, "%s, %s, %s, sampling_ratio %d, batch indices %s",
                                 vq_dtype_name(dt), m ? "max" : "avg",
                                 h ? "half_pixel" : "output_half_pixel", ratio, bt ? "i64" : "i32");
                        vq_attr at[6] = {VQ_ATTR_S("mode", m ? "max" : "avg"),
                                         VQ_ATTR_I("output_height", 3),
                                         VQ_ATTR_I("output_width", 2),
                                         VQ_ATTR_I("sampling_ratio", ratio),
                                         VQ_ATTR_F("spatial_scale", ratio ? 0.5 : 1),
                                         VQ_ATTR_S("coordinate_transformation_mode",
                                                   h ? "half_pixel" : "output_half_pixel")};
                        vq_tensor *in[4] = {rnd(r, dt, -2, 2, DIMS(2, 3, 6, 5)),
                                            oc_from(dt, DIMS(5, 4), rois),
                                            oc_from(bt ? VQ_I64 : VQ_I32, DIMS(5), batch),
                                            grad ? rnd(r, dt, -1, 1, DIMS(5, 3, 3, 2)) : NULL};
                        check(r, in, grad ? 4 : 3, 1, at, 6, grad ? CLOSE : EXACT);
                    }
}

/* einsum: products on GEMM (floats: cuBLAS's rounding, CLOSE) and on the
 * loop, diagonals, sums, ellipses, three operands, a shape donor; the
 * integers (the loop alone) bit for bit. */
static void case_einsum(struct run *r)
{
    static const struct {
        const char *eq;
        int nin, so;
        int n[3];
        int64_t s[3][4];
    } cs[] = {
        {"ij,jk->ik", 2, -1, {2, 2}, {{3, 4}, {4, 5}}},
        {"bhqd,bhkd->bhqk", 2, -1, {4, 4}, {{2, 3, 16, 8}, {2, 3, 12, 8}}},
        {"bqhd,bkhd->bhqk", 2, -1, {4, 4}, {{2, 16, 3, 8}, {2, 12, 3, 8}}},
        {"ij,jk->ki", 2, -1, {2, 2}, {{24, 17}, {17, 30}}},
        {"...ii->...i", 1, -1, {3}, {{3, 4, 4}}},
        {"ij->", 1, -1, {2}, {{3, 4}}},
        {"...ij,...jk", 2, -1, {4, 3}, {{2, 1, 3, 4}, {5, 4, 2}}},
        {"iij,jk->ik", 2, -1, {3, 2}, {{4, 4, 30}, {30, 40}}},
        {"ij,jk,kl->il", 3, -1, {2, 2, 2}, {{3, 4}, {4, 5}, {5, 2}}},
        {"i,ii->ii", 2, 1, {1, 2}, {{5}, {5, 5}}},
        {"ij,jk->ik", 2, -1, {2, 2}, {{0, 40}, {40, 50}}},
    };
    for (int c = 0; c < N_OF(cs); c++)
        for (int d = 0; d < N_OF(numerics); d++) {
            vq_dtype dt = numerics[d];
            describe(r, "%s, %s", vq_dtype_name(dt), cs[c].eq);
            vq_tensor *in[3];
            for (int i = 0; i < cs[c].nin; i++)
                in[i] = rnd(r, dt, -3, 3, cs[c].n[i], cs[c].s[i]);
            vq_attr at[2] = {VQ_ATTR_S("equation", cs[c].eq), VQ_ATTR_I("shape_of", cs[c].so)};
            check(r, in, cs[c].nin, 1, at, 2, dt == VQ_F32 || dt == VQ_F64 ? CLOSE : EXACT);
        }
}

/* det and det_grad over batches of sizes 0 to 5, a singular matrix among
 * them (two equal rows): the same LU in double, bit for bit. */
static void case_det(struct run *r)
{
    bool grad = !strcmp(r->op, "det_grad");
    for (int n = 0; n <= 5; n++)
        for (int d = 0; d < N_OF(floats); d++) {
            describe(r, "%s, %d x %d", vq_dtype_name(floats[d]), n, n);
            vq_tensor *in[2] = {rnd(r, floats[d], -2, 2, DIMS(2, 3, n, n)),
                                rnd(r, floats[d], -2, 2, DIMS(2, 3))};
            for (int j = 0; n >= 2 && j < n; j++)
                oc_set(in[0], n * n + n + j, oc_get(in[0], n * n + j));
            if (!grad)
                vq_tensor_release(in[1]);
            check(r, in, grad ? 2 : 1, 1, NULL, 0, EXACT);
        }
}

/* tfidf_vectorizer, i32 and i64 tokens in rows of 9 drawn from 4 values
 * (many hits), 1- and 2-grams at skips up to 2, each mode, with and
 * without weights: counts are exact in f32, so the bits agree. */
static void case_tfidf(struct run *r)
{
    static const vq_dtype tok[2] = {VQ_I32, VQ_I64};
    static const char *const modes[3] = {"TF", "IDF", "TFIDF"};
    const int64_t pool[7] = {0, 3, 1, 2, 2, 3, 0}, counts[2] = {0, 3}, idx[5] = {4, 0, 2, 1, 3};
    for (int d = 0; d < 2; d++)
        for (int m = 0; m < 3; m++)
            for (int w = 0; w < 2; w++) {
                describe(r, "%s tokens, %s, %s weights", vq_dtype_name(tok[d]), modes[m],
                         w ? "with" : "without");
                vq_tensor *in[5] = {rnd(r, tok[d], 0, 4, DIMS(3, 9)), NULL, NULL, NULL,
                                    rnd(r, VQ_F32, 0.5, 2, DIMS(5))};
                const int64_t *tables[3] = {pool, counts, idx};
                const int64_t lens[3] = {7, 2, 5};
                for (int k = 0; k < 3; k++) {
                    cr_assert_eq(vq_tensor_new(&in[1 + k], VQ_I64, 1, &lens[k]), 0);
                    memcpy(vq_tensor_data(in[1 + k]), tables[k], (size_t)lens[k] * 8);
                }
                if (!w)
                    vq_tensor_release(in[4]);
                vq_attr at[5] = {VQ_ATTR_I("min_gram", 1), VQ_ATTR_I("max_gram", 2),
                                 VQ_ATTR_I("max_skip", 2), VQ_ATTR_S("mode", modes[m]),
                                 VQ_ATTR_I("size", 5)};
                check(r, in, w ? 5 : 4, 1, at, 5, EXACT);
            }
}

/* max_unpool2d and its gradient, i32 and i64 indices drawn at random over
 * Out (repeats among them: the last writer wins on both sides), with and
 * without output_size, and one index per place (a max pool's). */
static void case_max_unpool(struct run *r)
{
    bool grad = !strcmp(r->op, "max_unpool2d_grad");
    static const vq_dtype idt[2] = {VQ_I32, VQ_I64};
    for (int d = 0; d < N_OF(floats); d++)
        for (int i = 0; i < 2; i++)
            for (int sized = 0; sized < 2; sized++) {
                describe(r, "%s, %s indices%s", vq_dtype_name(floats[d]), vq_dtype_name(idt[i]),
                         sized ? ", output_size 7 x 5" : "");
                int64_t oh = sized ? 7 : 6, ow = sized ? 5 : 4, nout = 2 * 3 * oh * ow;
                vq_tensor *x = rnd(r, floats[d], -2, 2, DIMS(2, 3, 3, 2));
                vq_tensor *idx = rnd(r, idt[i], 0, (double)nout, DIMS(2, 3, 3, 2));
                if (sized) /* distinct places: plane p's element q at 2 q + p */
                    for (int64_t e = 0; e < 36; e++)
                        oc_set(idx, e, (double)(e / 6 * oh * ow + e % 6 * 2 + e / 6 % 2));
                int64_t two[2] = {2, 2}, size[2] = {oh, ow};
                vq_attr at[3] = {VQ_ATTR_IS("kernel", two, 2), VQ_ATTR_IS("strides", two, 2),
                                 VQ_ATTR_IS("output_size", size, 2)};
                vq_tensor *in[3] = {x, idx, rnd(r, floats[d], -2, 2, DIMS(2, 3, oh, ow))};
                if (!grad)
                    vq_tensor_release(in[2]);
                check(r, in, grad ? 3 : 2, 1, at, sized ? 3 : 2, EXACT);
            }
}

/* dft of real and complex signals, lengths that are powers of two (the
 * CPU's FFT) and not (its sums), padded and cut, an inner dim, onesided,
 * inverse: the GPU sums each bin directly, equal to rounding. */
static void case_dft(struct run *r)
{
    static const struct {
        int n;
        int64_t x[4];
        int axis, inverse, onesided;
        int64_t length;
    } cs[] = {{3, {2, 8, 1}, 1, 0, 0, 0}, {3, {3, 6, 2}, 1, 1, 0, 0}, {4, {2, 5, 3, 1}, 1, 0, 1, 8},
              {3, {1, 7, 2}, 1, 0, 0, 4}, {3, {6, 2, 2}, 0, 0, 1, 0}, {3, {2, 0, 1}, 1, 0, 0, 5}};
    for (int c = 0; c < N_OF(cs); c++)
        for (int d = 0; d < N_OF(floats); d++) {
            describe(r, "%s, case %d", vq_dtype_name(floats[d]), c);
            vq_attr at[4] = {VQ_ATTR_I("axis", cs[c].axis), VQ_ATTR_B("inverse", cs[c].inverse),
                             VQ_ATTR_B("onesided", cs[c].onesided),
                             VQ_ATTR_I("length", cs[c].length)};
            vq_tensor *in[1] = {rnd(r, floats[d], -2, 2, cs[c].n, cs[c].x)};
            check(r, in, 1, 1, at, 4, CLOSE);
        }
}

/* reduce_prod over sets of axes in every numeric dtype, its gradient with
 * zeros in some groups. */
static void case_reduce_prod(struct run *r)
{
    static const struct {
        int n, naxes;
        int64_t x[3], axes[2];
    } ps[] = {{2, 1, {3, 4}, {1}},
              {3, 2, {2, 3, 4}, {0, 2}},
              {3, 0, {2, 2, 3}, {0}},
              {3, 1, {2, 0, 3}, {1}},
              {1, 1, {6}, {0}}};
    bool grad = !strcmp(r->op, "reduce_prod_grad");
    for (int c = 0; c < N_OF(ps); c++)
        for (int d = 0; d < (grad ? N_OF(floats) : N_OF(numerics)); d++) {
            vq_dtype dt = grad ? floats[d] : numerics[d];
            describe(r, "%s, case %d", vq_dtype_name(dt), c);
            vq_attr at = VQ_ATTR_IS("axes", ps[c].axes, ps[c].naxes);
            vq_tensor *x = rnd(r, dt, -3, 3, ps[c].n, ps[c].x), *out = NULL;
            for (int64_t e = 0; e < vq_tensor_numel(x); e += 5)
                oc_set(x, e, 0);
            cr_assert_eq(vq_op_run(NULL, "reduce_prod", &x, 1, &out, 1, &at, 1), 0, "%s",
                         vq_errmsg());
            vq_tensor *in[2] = {x, NULL};
            if (grad)
                in[1] = rnd(r, dt, -1, 1, vq_tensor_ndim(out), vq_tensor_shape(out));
            vq_tensor_release(out);
            check(r, in, grad ? 2 : 1, 1, &at, 1, EXACT);
        }
}

/* X's shape, the axis and the sizes of the pieces. */
static const struct split_gpu_case {
    int nx, n;
    int64_t x[3], axis, sizes[4];
} split_gpu_cases[] = {
    {2, 3, {4, 6}, 1, {1, 2, 3}},
    {3, 4, {2, 5, 3}, 1, {2, 0, 1, 2}},
    {2, 2, {5, 3}, -2, {4, 1}},
    {2, 2, {0, 3}, 1, {3, 0}},
};

static void case_split(struct run *r)
{
    bool grad = !strcmp(r->op, "split_grad");
    for (int c = 0; c < N_OF(split_gpu_cases); c++)
        for (int d = 0; d < (grad ? N_OF(floats) : N_OF(all_dtypes)); d++)
            for (int absent = 0; absent < (grad ? 2 : 1); absent++) {
                const struct split_gpu_case *k = &split_gpu_cases[c];
                vq_dtype dt = grad ? floats[d] : all_dtypes[d];
                int axis = (int)(k->axis < 0 ? k->axis + k->nx : k->axis);
                describe(r, "%s, case %d, absent %d", vq_dtype_name(dt), c, absent);
                vq_tensor *in[5] = {rnd(r, dt, -5, 5, k->nx, k->x)};
                for (int j = 0; grad && j < k->n; j++) {
                    int64_t ps[3];
                    memcpy(ps, k->x, sizeof ps);
                    ps[axis] = k->sizes[j];
                    in[1 + j] = rnd(r, dt, -1, 1, k->nx, ps);
                }
                int64_t gone[1] = {k->n - 1}; /* the last output got no gradient */
                vq_attr at[2] = {VQ_ATTR_I("axis", k->axis),
                                 grad ? VQ_ATTR_IS("absent", gone, absent)
                                      : VQ_ATTR_IS("sizes", k->sizes, k->n)};
                check(r, in, grad ? 1 + k->n : 1, grad ? 1 : k->n, at, 2, EXACT);
            }
}

/* argmax and argmin: values from a few integers (ties), NaN in floats. */
static void case_arg(struct run *r)
{
    static const struct {
        int nx;
        int64_t x[3], axis;
    } shapes[] = {{2, {4, 5}, 1}, {3, {3, 4, 2}, 1}, {3, {2, 3, 4}, 0}, {1, {6}, -1},
                  {2, {0, 3}, 1}};
    for (int c = 0; c < N_OF(shapes); c++)
        for (int d = 0; d < N_OF(numerics); d++)
            for (int flags = 0; flags < 4; flags++) {
                vq_dtype dt = numerics[d];
                describe(r, "%s, shape %d, flags %d", vq_dtype_name(dt), c, flags);
                vq_tensor *in[1] = {rnd(r, dt, -2, 3, shapes[c].nx, shapes[c].x)};
                for (int64_t e = 0; (dt == VQ_F32 || dt == VQ_F64) && e < vq_tensor_numel(in[0]);
                     e++)
                    if (oc_next(&r->rng) % 9 == 0)
                        oc_set(in[0], e, NAN);
                vq_attr at[3] = {VQ_ATTR_I("axis", shapes[c].axis), VQ_ATTR_B("keepdim", flags & 1),
                                 VQ_ATTR_B("select_last_index", flags & 2)};
                check(r, in, 1, 1, at, 3, EXACT);
            }
}

/* reduce_max, reduce_min over reduce's axis cases (reduce_axes below);
 * their gradient with ties (values from a few integers) and NaN. */
static void case_extremum(struct run *r)
{
    static const struct {
        int nx, naxes;
        int64_t x[4], axes[3];
    } red[] = {{2, 0, {3, 4}, {0}},          {2, 1, {3, 4}, {1}},       {3, 2, {2, 3, 4}, {0, 2}},
               {3, 1, {2, 0, 3}, {1}},       {4, 2, {2, 1, 3, 5}, {1, 3}}, {1, 1, {300}, {0}},
               {3, 1, {2, 300, 2}, {-2}}};
    bool grad = !strcmp(r->op, "reduce_minmax_grad");
    for (int c = 0; c < N_OF(red); c++)
        for (int d = 0; d < (grad ? N_OF(floats) : N_OF(numerics)); d++)
            for (int flags = 0; flags < (grad ? 4 : 2); flags++) {
                vq_dtype dt = grad ? floats[d] : numerics[d];
                bool keep = flags & 1;
                const char *op = flags & 2 ? "reduce_min" : "reduce_max";
                describe(r, "%s, case %d, keepdim %d, %s", vq_dtype_name(dt), c, keep, op);
                vq_attr at[3] = {VQ_ATTR_IS("axes", red[c].axes, red[c].naxes),
                                 VQ_ATTR_B("keepdim", keep), VQ_ATTR_S("op", op)};
                vq_tensor *x = grad ? rnd(r, dt, -3, 3, red[c].nx, red[c].x)
                                    : rnd(r, dt, -100, 100, red[c].nx, red[c].x);
                if (grad)
                    for (int64_t e = 0; e < vq_tensor_numel(x); e++)
                        oc_set(x, e, oc_next(&r->rng) % 17 == 0 ? NAN : floor(oc_get(x, e)));
                if (!grad) {
                    vq_tensor *in[1] = {x};
                    check(r, in, 1, 1, at, 2, EXACT);
                    continue;
                }
                vq_tensor *m = NULL;
                cr_assert_eq(vq_op_run(NULL, op, &x, 1, &m, 1, at, 2), 0, "%s", vq_errmsg());
                vq_tensor *in[3] = {x, m,
                                    rnd(r, dt, -1, 1, vq_tensor_ndim(m), vq_tensor_shape(m))};
                check(r, in, 3, 1, at, 3, EXACT);
            }
}

static void case_expand(struct run *r)
{
    static const struct {
        int nx, ns;
        int64_t x[3], shape[3];
    } ex[] = {{2, 2, {3, 1}, {3, 4}}, {1, 3, {4}, {2, 3, 4}}, {3, 2, {2, 1, 3}, {5, 1}},
              {0, 2, {0}, {2, 3}},    {2, 2, {0, 1}, {1, 4}}, {2, 1, {2, 3}, {1}}};
    for (int c = 0; c < N_OF(ex); c++)
        for (int d = 0; d < N_OF(all_dtypes); d++) {
            describe(r, "%s, case %d", vq_dtype_name(all_dtypes[d]), c);
            vq_attr at = VQ_ATTR_IS("shape", ex[c].shape, ex[c].ns);
            vq_tensor *in[2] = {rnd(r, all_dtypes[d], -5, 5, ex[c].nx, ex[c].x)};
            check(r, in, 1, 1, &at, 1, EXACT);
            in[0] = rnd(r, all_dtypes[d], -5, 5, ex[c].nx, ex[c].x); /* the shape as an input */
            int64_t ns = ex[c].ns;
            cr_assert_eq(vq_tensor_from(&in[1], VQ_I64, 1, &ns, ex[c].shape), 0);
            check(r, in, 2, 1, NULL, 0, EXACT);
        }
}

static void case_tile(struct run *r)
{
    static const struct {
        int nx;
        int64_t x[3], reps[3];
    } tl[] = {{2, {2, 3}, {2, 2}}, {3, {2, 1, 3}, {1, 4, 2}}, {1, {5}, {3}}, {2, {2, 3}, {0, 2}},
              {0, {0}, {0}}};
    bool grad = !strcmp(r->op, "tile_grad");
    for (int c = 0; c < N_OF(tl); c++)
        for (int d = 0; d < (grad ? N_OF(floats) : N_OF(all_dtypes)); d++) {
            vq_dtype dt = grad ? floats[d] : all_dtypes[d];
            int64_t os[3];
            for (int i = 0; i < tl[c].nx; i++)
                os[i] = tl[c].x[i] * tl[c].reps[i];
            describe(r, "%s, case %d", vq_dtype_name(dt), c);
            vq_attr at = VQ_ATTR_IS("repeats", tl[c].reps, tl[c].nx);
            vq_tensor *in[2] = {rnd(r, dt, -5, 5, tl[c].nx, tl[c].x),
                                grad ? rnd(r, dt, -1, 1, tl[c].nx, os) : NULL};
            check(r, in, grad ? 2 : 1, 1, &at, 1, EXACT);
            /* the repeats as an input's value (tile), or from the shapes
             * (tile_grad without the attribute) */
            describe(r, "%s, case %d, repeats from %s", vq_dtype_name(dt), c,
                     grad ? "the shapes" : "input Repeats");
            vq_tensor *v[2] = {rnd(r, dt, -5, 5, tl[c].nx, tl[c].x),
                               grad ? rnd(r, dt, -1, 1, tl[c].nx, os) : NULL};
            if (!grad) {
                double reps[3];
                for (int i = 0; i < tl[c].nx; i++)
                    reps[i] = (double)tl[c].reps[i];
                v[1] = oc_from(VQ_I64, 1, (const int64_t[]){tl[c].nx}, reps);
            }
            if (tl[c].nx > 0)
                check(r, v, 2, 1, NULL, 0, EXACT);
            else
                release(v, 2);
        }
}

/* ---- data-dependent output shapes (ops/cpu/dynamic.c) ---- */

/* nonzero in every dtype: about half zeros (floor of [-1, 1)), a NaN,
 * several ranks, a scalar, an empty tensor. */
static void case_nonzero(struct run *r)
{
    static const struct {
        int n;
        int64_t x[4];
    } cs[] = {{1, {300}}, {2, {7, 9}}, {3, {2, 3, 4}}, {4, {2, 2, 3, 2}}, {0, {0}}, {2, {0, 3}}};
    for (int c = 0; c < N_OF(cs); c++)
        for (int d = 0; d < N_OF(all_dtypes); d++) {
            vq_dtype dt = all_dtypes[d];
            describe(r, "%s, case %d", vq_dtype_name(dt), c);
            vq_tensor *in[1] = {
                rnd(r, dt, dt == VQ_BOOL ? 0 : -1, dt == VQ_BOOL ? 2 : 1, cs[c].n, cs[c].x)};
            for (int64_t i = 0; i < vq_tensor_numel(in[0]) && dt != VQ_BOOL; i++)
                oc_set(in[0], i, floor(oc_get(in[0], i)));
            if ((dt == VQ_F32 || dt == VQ_F64) && vq_tensor_numel(in[0]) > 3)
                oc_set(in[0], 3, NAN);
            check(r, in, 1, 1, NULL, 0, EXACT);
        }
}

/* top_k along each axis, largest and smallest, values from few integers
 * (ties), K from 0 to the dim; a NaN among floats. */
static void case_top_k(struct run *r)
{
    static const struct {
        int n;
        int64_t x[3], k;
    } cs[] = {{1, {50}, 7}, {2, {6, 9}, 3}, {3, {3, 5, 4}, 3}, {2, {4, 3}, 0}, {2, {0, 5}, 0}};
    for (int c = 0; c < N_OF(cs); c++)
        for (int d = 0; d < N_OF(numerics); d++)
            for (int axis = 0; axis < cs[c].n; axis++)
                for (int largest = 0; largest < 2; largest++) {
                    vq_dtype dt = numerics[d];
                    int64_t k = cs[c].k < cs[c].x[axis] ? cs[c].k : cs[c].x[axis];
                    describe(r, "%s, case %d, axis %d, largest %d", vq_dtype_name(dt), c, axis,
                             largest);
                    double kv = (double)k;
                    vq_tensor *in[2] = {rnd(r, dt, -4, 4, cs[c].n, cs[c].x),
                                        oc_from(VQ_I64, 1, (const int64_t[]){1}, &kv)};
                    for (int64_t i = 0; i < vq_tensor_numel(in[0]); i++)
                        oc_set(in[0], i, floor(oc_get(in[0], i)));
                    if ((dt == VQ_F32 || dt == VQ_F64) && vq_tensor_numel(in[0]) > 3)
                        oc_set(in[0], 2, NAN);
                    vq_attr at[2] = {VQ_ATTR_I("axis", axis), VQ_ATTR_B("largest", largest)};
                    check(r, in, 2, 2, at, 2, EXACT);
                }
}

/* unique of few distinct values, flattened and along each axis, sorted
 * and not, every dtype. */
static void case_unique(struct run *r)
{
    static const int64_t xs[3] = {3, 6, 2};
    for (int d = 0; d < N_OF(all_dtypes); d++)
        for (int axis = -1; axis < 3; axis++)
            for (int sorted = 0; sorted < 2; sorted++) {
                vq_dtype dt = all_dtypes[d];
                describe(r, "%s, axis %d, sorted %d", vq_dtype_name(dt), axis, sorted);
                vq_tensor *in[1] = {rnd(r, dt, 0, dt == VQ_BOOL ? 2 : 3, 3, xs)};
                for (int64_t i = 0; i < 36; i++)
                    oc_set(in[0], i, floor(oc_get(in[0], i)));
                vq_attr at[2] = {VQ_ATTR_B("sorted", sorted), VQ_ATTR_I("axis", axis)};
                check(r, in, 1, 4, at, axis < 0 ? 1 : 2, EXACT);
            }
}

/* compress along each axis and flattened, conditions shorter than, as
 * long as and longer than the dim (false past it); compress_grad with
 * dOut of compress's output shape. */
static void case_compress(struct run *r)
{
    static const int64_t xs[3] = {3, 5, 4};
    bool grad = !strcmp(r->op, "compress_grad");
    for (int d = 0; d < (grad ? N_OF(floats) : N_OF(all_dtypes)); d++)
        for (int axis = -1; axis < 3; axis++)
            for (int lc = 0; lc < 3; lc++) {
                vq_dtype dt = grad ? floats[d] : all_dtypes[d];
                int64_t dim = axis < 0 ? 60 : xs[axis], len = lc == 0 ? dim - 1 : dim + lc - 1;
                double cond[64];
                int64_t kept = 0;
                for (int64_t i = 0; i < len; i++) {
                    cond[i] = i < dim && oc_uniform(&r->rng, 0, 1) < 0.6;
                    kept += cond[i] != 0;
                }
                describe(r, "%s, axis %d, condition of %lld", vq_dtype_name(dt), axis,
                         (long long)len);
                vq_attr at = VQ_ATTR_I("axis", axis);
                int64_t os[3] = {xs[0], xs[1], xs[2]};
                if (axis >= 0)
                    os[axis] = kept;
                vq_tensor *in[3] = {rnd(r, dt, -5, 5, 3, xs),
                                    oc_from(VQ_BOOL, 1, (const int64_t[]){len}, cond),
                                    grad ? axis < 0 ? rnd(r, dt, -1, 1, 1, &kept)
                                                    : rnd(r, dt, -1, 1, 3, os)
                                         : NULL};
                check(r, in, grad ? 3 : 2, 1, &at, axis < 0 ? 0 : 1, EXACT);
            }
}

/* non_max_suppression on random boxes in both formats, scores from a few
 * values (ties), with and without a score threshold. */
static void case_nms(struct run *r)
{
    static const struct {
        int64_t b, c, s, max_out;
    } cs[] = {{1, 1, 6, 3}, {2, 3, 40, 5}, {1, 2, 100, 100}, {2, 1, 10, 0}};
    for (int c = 0; c < N_OF(cs); c++)
        for (int center = 0; center < 2; center++)
            for (int thr = 0; thr < 2; thr++) {
                describe(r, "case %d, center %d, threshold %d", c, center, thr);
                vq_tensor *b = rnd(r, VQ_F32, 0, 10, 3, (const int64_t[]){cs[c].b, cs[c].s, 4});
                for (int64_t i = 0; i < vq_tensor_numel(b); i += 4) /* sizes in [0.5, 4) */
                    for (int j = 2; j < 4; j++)
                        oc_set(b, i + j,
                               (center ? 0 : oc_get(b, i + j - 2)) + oc_uniform(&r->rng, 0.5, 4));
                vq_tensor *sc =
                    rnd(r, VQ_F32, 0, 8, 3, (const int64_t[]){cs[c].b, cs[c].c, cs[c].s});
                for (int64_t i = 0; i < vq_tensor_numel(sc); i++)
                    oc_set(sc, i, floor(oc_get(sc, i)) / 8);
                double mo = (double)cs[c].max_out, iou = 0.4, st = 0.3;
                vq_tensor *in[5] = {b, sc, oc_from(VQ_I64, 1, (const int64_t[]){1}, &mo),
                                    oc_from(VQ_F32, 0, NULL, &iou),
                                    thr ? oc_from(VQ_F32, 1, (const int64_t[]){1}, &st) : NULL};
                vq_attr at = VQ_ATTR_I("center_point_box", center);
                check(r, in, thr ? 5 : 4, 1, &at, 1, EXACT);
            }
}

static void case_pad(struct run *r)
{
    static const struct {
        int nx;
        int64_t x[3], pads[6];
        unsigned modes; /* bit m: constant, reflect, edge */
    } pd[] = {{2, {3, 4}, {1, 2, 2, 3}, 7},          {3, {2, 3, 4}, {0, -1, 2, 1, 1, -1}, 7},
              {1, {5}, {4, 4}, 7},                   {2, {0, 3}, {1, 1, 1, 1}, 1},
              {2, {4, 3}, {-2, 0, -2, 0}, 7},        {2, {1, 4}, {2, 3, 0, 2}, 5}};
    static const char *const modes[3] = {"constant", "reflect", "edge"};
    bool grad = !strcmp(r->op, "pad_grad");
    for (int c = 0; c < N_OF(pd); c++)
        for (int m = 0; m < 3; m++)
            for (int d = 0; d < (grad ? N_OF(floats) : N_OF(all_dtypes)); d++) {
                if (!(pd[c].modes & (1u << m)))
                    continue;
                vq_dtype dt = grad ? floats[d] : all_dtypes[d];
                int64_t os[3];
                for (int i = 0; i < pd[c].nx; i++)
                    os[i] = pd[c].x[i] + pd[c].pads[i] + pd[c].pads[pd[c].nx + i];
                describe(r, "%s, case %d, %s", vq_dtype_name(dt), c, modes[m]);
                vq_attr at[3] = {VQ_ATTR_IS("pads", pd[c].pads, 2 * pd[c].nx),
                                 VQ_ATTR_S("mode", modes[m]),
                                 VQ_ATTR_F("value", dt == VQ_F32 || dt == VQ_F64 ? -0.75 : 1)};
                vq_tensor *in[2] = {rnd(r, dt, -5, 5, pd[c].nx, pd[c].x),
                                    grad ? rnd(r, dt, -1, 1, pd[c].nx, os) : NULL};
                check(r, in, grad ? 2 : 1, 1, at, 3, EXACT);
            }
}

/* ---- every op ---- */

static const struct op_case {
    const char *type;
    void (*run)(struct run *r);
} op_cases[] = {
    {"add", case_binary},
    {"sub", case_binary},
    {"mul", case_binary},
    {"div", case_binary},
    {"pow", case_pow},
    {"elementwise_grad", case_elementwise_grad},
    {"scale", case_scale},
    {"relu", case_unary},
    {"sigmoid", case_unary},
    {"tanh", case_unary},
    {"relu_grad", case_unary_grad},
    {"sigmoid_grad", case_unary_grad},
    {"tanh_grad", case_unary_grad},
    {"silu", case_unary},
    {"hard_sigmoid", case_unary},
    {"hard_swish", case_unary},
    {"silu_grad", case_x_grad},
    {"hard_sigmoid_grad", case_x_grad},
    {"hard_swish_grad", case_x_grad},
    {"softmax", case_softmax},
    {"softmax_grad", case_softmax},
    {"exp", case_math},
    {"log", case_math},
    {"sqrt", case_math},
    {"reciprocal", case_math},
    {"erf", case_math},
    {"power", case_math},
    {"sin", case_math},
    {"cos", case_math},
    {"tan", case_math},
    {"asin", case_math},
    {"acos", case_math},
    {"atan", case_math},
    {"sinh", case_math},
    {"cosh", case_math},
    {"asinh", case_math},
    {"acosh", case_math},
    {"atanh", case_math},
    {"floor", case_math},
    {"ceil", case_math},
    {"round", case_math},
    {"math_grad", case_math},
    {"log_softmax", case_log_softmax},
    {"log_softmax_grad", case_log_softmax},
    {"cross_entropy", case_class_loss},
    {"cross_entropy_grad", case_class_loss},
    {"softmax_cross_entropy", case_class_loss},
    {"softmax_cross_entropy_grad", case_class_loss},
    {"square_error", case_regression_loss},
    {"square_error_grad", case_regression_loss},
    {"mse", case_regression_loss},
    {"mse_grad", case_regression_loss},
    {"sum", case_reduce},
    {"mean", case_reduce},
    {"sum_grad", case_reduce},
    {"mean_grad", case_reduce},
    {"transpose", case_transpose},
    {"reshape", case_reshape},
    {"reshape_grad", case_reshape},
    {"concat", case_concat},
    {"concat_grad", case_concat_grad},
    {"slice", case_slice},
    {"slice_grad", case_slice},
    {"cast", case_cast},
    {"cast_grad", case_cast_grad},
    {"matmul", case_matmul},
    {"matmul_grad", case_matmul},
    {"fill_constant", case_fill},
    {"shape", case_shape},
    {"range", case_range},
    {"zeros_like", case_zeros_like},
    {"uniform_random", case_random},
    {"gaussian_random", case_random},
    {"dropout", case_dropout},
    {"sgd", case_sgd},
    {"momentum", case_momentum},
    {"adam", case_adam},
    {"lr_schedule", case_lr_schedule},
    {"fused_elementwise", case_fused},
    {"less", case_compare},
    {"less_equal", case_compare},
    {"greater", case_compare},
    {"greater_equal", case_compare},
    {"equal", case_compare},
    {"not_equal", case_compare},
    {"logical_and", case_compare},
    {"logical_or", case_compare},
    {"logical_not", case_logical_not},
    {"maximum", case_compare},
    {"minimum", case_compare},
    {"minmax_grad", case_minmax_grad},
    {"where", case_where},
    {"where_grad", case_where_grad},
    {"abs", case_abs},
    {"abs_grad", case_abs_grad},
    {"conv2d", case_conv2d},
    {"conv2d_grad", case_conv2d},
    {"conv_transpose2d", case_conv_transpose2d},
    {"conv3d", case_conv3d},
    {"conv3d_grad", case_conv3d},
    {"conv_transpose3d", case_conv3d},
    {"max_pool2d", case_pool},
    {"max_pool2d_grad", case_pool},
    {"max_pool2d_argmax", case_pool},
    {"avg_pool2d", case_pool},
    {"avg_pool2d_grad", case_pool},
    {"global_avg_pool", case_global_avg_pool},
    {"global_avg_pool_grad", case_global_avg_pool},
    {"batch_norm", case_batch_norm},
    {"batch_norm_grad", case_batch_norm},
    {"batch_norm_train", case_batch_norm_train},
    {"batch_norm_train_grad", case_batch_norm_train},
    {"gather", case_gather},
    {"gather_grad", case_gather},
    {"gather_elements", case_gather_elements},
    {"gather_elements_grad", case_gather_elements},
    {"scatter_elements", case_scatter_elements},
    {"scatter_nd", case_nd},
    {"gather_nd", case_nd},
    {"resize", case_resize},
    {"resize_grad", case_resize},
    {"cumsum", case_cumsum},
    {"lstm", case_rnn},
    {"gru", case_rnn},
    {"rnn", case_rnn},
    {"lstm_grad", case_rnn},
    {"gru_grad", case_rnn},
    {"rnn_grad", case_rnn},
    {"lrn", case_lrn},
    {"lrn_grad", case_lrn},
    {"reverse_sequence", case_reverse_sequence},
    {"grid_sample", case_grid_sample},
    {"grid_sample_grad", case_grid_sample},
    {"roi_align", case_roi_align},
    {"roi_align_grad", case_roi_align},
    {"mod", case_mod},
    {"einsum", case_einsum},
    {"det", case_det},
    {"tfidf_vectorizer", case_tfidf},
    {"max_unpool2d", case_max_unpool},
    {"dft", case_dft},
    {"max_unpool2d_grad", case_max_unpool},
    {"det_grad", case_det},
    {"reduce_prod", case_reduce_prod},
    {"reduce_prod_grad", case_reduce_prod},
    {"split", case_split},
    {"split_grad", case_split},
    {"argmax", case_arg},
    {"argmin", case_arg},
    {"reduce_max", case_extremum},
    {"reduce_min", case_extremum},
    {"reduce_minmax_grad", case_extremum},
    {"expand", case_expand},
    {"tile", case_tile},
    {"tile_grad", case_tile},
    {"pad", case_pad},
    {"pad_grad", case_pad},
    {"nonzero", case_nonzero},
    {"top_k", case_top_k},
    {"unique", case_unique},
    {"compress", case_compress},
    {"compress_grad", case_compress},
    {"non_max_suppression", case_nms},
};

/* Control-flow ops have no kernel: the executor runs their blocks
 * (tests/test_control.c covers them on the GPU executor). */
static bool is_control_op(const char *type)
{
    return !strcmp(type, "cond") || !strcmp(type, "while");
}

#define N_CONTROL_OPS 2

/* Ops without CUDA kernels: fused_elementwise, which graph/optimize.c
 * makes for CPU plans only, and the quantized ops (ops/cpu/quant.c,
 * qproduct.c), CPU only so far: a GPU executor refuses them by name. */
static bool is_cpu_only_op(const char *type)
{
    static const char *const cpu_only[] = {"fused_elementwise", "quantize_linear",
                                           "dequantize_linear", "dynamic_quantize_linear",
                                           "matmul_integer",    "conv_integer",
                                           "qlinear_matmul",    "qlinear_conv"};
    for (int i = 0; i < N_OF(cpu_only); i++)
        if (!strcmp(type, cpu_only[i]))
            return true;
    return false;
}

static const struct op_case *case_of(const char *type)
{
    for (int i = 0; i < N_OF(op_cases); i++)
        if (!strcmp(op_cases[i].type, type))
            return &op_cases[i];
    return NULL;
}

Test(ops_gpu_kernels, every_registered_op_has_a_case)
{
    int missing = 0;
    for (int i = 0; i < vq_op_count(); i++)
        if (!is_control_op(vq_op_name(i)) && !case_of(vq_op_name(i)) &&
            (!is_cpu_only_op(vq_op_name(i)) || !strcmp(vq_op_name(i), "fused_elementwise"))) {
            cr_log_error("op %s has no case in test_ops_gpu_kernels.c", vq_op_name(i));
            missing++;
        }
    cr_assert_eq(missing, 0, "%d registered op(s) have no case here (their names are logged)",
                 missing);
    for (int i = 0; i < N_OF(op_cases); i++)
        cr_assert_not_null(vq_op_signature(op_cases[i].type), "case %s: no such op",
                           op_cases[i].type);
}

/* Each op's definition names its CUDA launches (.cuda, ops/cuda/cuda_ops.h):
 * the registry's table is the one kernel table, so no second table can
 * drift from it; what is left to check is that no op lacks them. */
Test(ops_gpu_kernels, every_registered_op_has_a_cuda_kernel)
{
#ifdef VARQ_HAVE_CUDA
    for (int i = 0; i < vq_op_count(); i++) {
        const vq__op_def *d = vq__op_find(vq_op_name(i));
        cr_assert_not_null(d, "%s", vq_op_name(i));
        if (is_control_op(vq_op_name(i)))
            cr_expect_null(d->cuda, "control op %s has CUDA launches", vq_op_name(i));
        else if (is_cpu_only_op(vq_op_name(i)))
            cr_expect_null(d->cuda, "op %s has CUDA launches", vq_op_name(i));
        else
            cr_expect_not_null(d->cuda, "op %s has no CUDA kernel", vq_op_name(i));
    }
#else
    cr_skip_test("built without CUDA");
#endif
}

#ifdef VARQ_HAVE_CUDA
/* True if a library whose path contains name is mapped in this process. */
static bool mapped(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    cr_assert_not_null(f);
    char line[4096];
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, name) != NULL;
    fclose(f);
    return found;
}
#endif

/* cuBLAS is not linked but opened at the first GPU product
 * (ops/cuda/matmul.cu): a process that loads varq does not map it, and
 * the load finds the library the build found and every function matmul
 * calls. Needs no GPU. */
Test(ops_gpu_kernels, cublas_is_opened_at_first_use)
{
#ifdef VARQ_HAVE_CUDA
    cr_assert_not(mapped("libcublas"), "cuBLAS is mapped before any GPU product");
    int rc = vq__cuda_blas_load();
    if (rc == VQ_ENOSYS && strstr(vq__cuda_last_error(), "have no cuBLAS"))
        cr_skip_test("%s", vq__cuda_last_error());
    cr_assert_eq(rc, 0, "%s", vq__cuda_last_error());
    cr_assert(mapped("libcublas"));
    cr_assert_eq(vq__cuda_blas_load(), 0, "the second call");
#else
    cr_skip_test("built without CUDA");
#endif
}

/* Each op's CUDA kernel is set once, when the registry is built: its
 * definition holds its launches and the dispatcher; no lookup per call. */
Test(ops_gpu_kernels, the_registry_picks_each_cuda_kernel_once)
{
#ifdef VARQ_HAVE_CUDA
    for (int i = 0; i < vq_op_count(); i++) {
        const char *name = vq_op_name(i);
        const vq__op_def *d = vq__op_find(name);
        cr_assert_not_null(d, "%s", name);
        if (is_control_op(name) || is_cpu_only_op(name))
            cr_expect_null(d->kernel[VQ_DEV_GPU], "op %s has a GPU kernel", name);
        else
            cr_expect_eq(d->kernel[VQ_DEV_GPU], vq__cuda_run, "op %s: not the dispatcher", name);
    }
#else
    cr_skip_test("built without CUDA");
#endif
}

/* Whether name is an entry of the comma-separated list. */
static bool listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == 0))
            return true;
    return false;
}

Test(ops_gpu_kernels, every_op_on_gpu_matches_the_cpu)
{
    need_gpu();
    struct run r = {.e = engine(), .seed = oc_seed("ops_gpu_kernels")};
    r.rng = r.seed;
    /* VARQ_TEST_OPS=a,b,c: only those ops (a quick check of a few) */
    const char *only = getenv("VARQ_TEST_OPS");
    for (int i = 0; i < vq_op_count(); i++) {
        if (is_control_op(vq_op_name(i)) || (only && !listed(only, vq_op_name(i))) ||
            (is_cpu_only_op(vq_op_name(i)) && !case_of(vq_op_name(i))))
            continue;
        const struct op_case *c = case_of(vq_op_name(i));
        cr_assert_not_null(c, "op %s has no case", vq_op_name(i));
        r.op = c->type;
        c->run(&r);
    }
    cr_assert_eq(vq_wait_all(r.e), 0, "%s", vq_errmsg());
    vq_engine_free(r.e);
}

/* ---- errors found on the device ---- */

/* Runs type on in on the CPU, where it must fail, and on GPU 0 of a fresh
 * engine (the failure poisons its stream), where waiting for its first
 * output must fail with the same code and the CPU's message. Releases in. */
static void same_failure(const char *type, vq_tensor **in, int nin, int nout, const vq_attr *at,
                         int nat)
{
    vq_tensor *out[4] = {NULL}, *gin[8] = {NULL};
    int rc = vq_op_run(NULL, type, in, nin, out, nout, at, nat);
    cr_assert_lt(rc, 0, "%s succeeded on the CPU", type);
    char want[256];
    snprintf(want, sizeof want, "%s", vq_errmsg());
    vq_engine *e = engine();
    for (int i = 0; i < nin; i++)
        gin[i] = to(e, in[i], gpu0);
    cr_assert_eq(vq_op_run(e, type, gin, nin, out, nout, at, nat), 0, "%s: %s", type,
                 vq_errmsg());
    int grc = vq_tensor_wait(out[0]);
    cr_assert_eq(grc, rc, "%s on GPU 0: %d (%s), the CPU's error is %d (%s)", type, grc,
                 vq_errmsg(), rc, want);
    cr_assert(strstr(vq_errmsg(), want), "%s on GPU 0 says\n  %s\nthe CPU says\n  %s", type,
              vq_errmsg(), want);
    release(out, nout);
    release(gin, nin);
    release(in, nin);
    (void)vq_wait_all(e); /* the stream's sticky error, on CUDA too */
    vq_engine_free(e);
}

Test(ops_gpu_kernels, integer_division_by_zero_fails_with_the_cpu_message)
{
    need_gpu();
    /* the first bad element is the one named: 3, then 2 */
    int32_t x[10] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, y[10] = {1, 2, 3, 0, 5, 6, 7, 0, 9, 1};
    vq_tensor *in[2] = {NULL, NULL};
    cr_assert_eq(vq_tensor_from(&in[0], VQ_I32, DIMS(2, 5), x), 0);
    cr_assert_eq(vq_tensor_from(&in[1], VQ_I32, DIMS(2, 5), y), 0);
    same_failure("div", in, 2, 1, NULL, 0);
    int64_t lx[15], ly[5] = {4, 3, 0, 2, 0};
    for (int i = 0; i < 15; i++)
        lx[i] = i + 1;
    cr_assert_eq(vq_tensor_from(&in[0], VQ_I64, DIMS(3, 5), lx), 0);
    cr_assert_eq(vq_tensor_from(&in[1], VQ_I64, DIMS(5), ly), 0);
    same_failure("div", in, 2, 1, NULL, 0);
    /* INT64_MIN / -1 overflows */
    int64_t mx[2] = {4, INT64_MIN}, my[2] = {2, -1};
    cr_assert_eq(vq_tensor_from(&in[0], VQ_I64, DIMS(2), mx), 0);
    cr_assert_eq(vq_tensor_from(&in[1], VQ_I64, DIMS(2), my), 0);
    same_failure("div", in, 2, 1, NULL, 0);
    /* integer pow: 0 to a negative power, at element 2 */
    int32_t px[4] = {2, -1, 0, 0}, py[4] = {3, -3, -1, -2};
    cr_assert_eq(vq_tensor_from(&in[0], VQ_I32, DIMS(4), px), 0);
    cr_assert_eq(vq_tensor_from(&in[1], VQ_I32, DIMS(4), py), 0);
    same_failure("pow", in, 2, 1, NULL, 0);
    /* integer mod by zero, both kinds, at element 1 */
    for (int f = 0; f < 2; f++) {
        int64_t ax[3] = {7, -7, 9}, ay[3] = {-1, 0, 0};
        cr_assert_eq(vq_tensor_from(&in[0], VQ_I64, DIMS(3), ax), 0);
        cr_assert_eq(vq_tensor_from(&in[1], VQ_I64, DIMS(3), ay), 0);
        vq_attr at = VQ_ATTR_B("fmod", f);
        same_failure("mod", in, 2, 1, &at, 1);
    }
}

Test(ops_gpu_kernels, labels_out_of_range_fail_with_the_cpu_message)
{
    need_gpu();
    uint64_t rng = 7;
    static const char *const ops[] = {"cross_entropy", "cross_entropy_grad",
                                      "softmax_cross_entropy", "softmax_cross_entropy_grad"};
    for (int o = 0; o < 4; o++)
        for (int li = 0; li < 2; li++) {
            bool grad = strstr(ops[o], "_grad") != NULL;
            vq_dtype dt = li ? VQ_F64 : VQ_F32;
            /* rows 2 and 4 are bad: the message names row 2 and its label */
            double labels[5] = {0, 2, 7, 1, -1};
            vq_tensor *in[3] = {oc_rand(&rng, dt, DIMS(5, 3), 0.1, 1),
                                oc_from(li ? VQ_I64 : VQ_I32, DIMS(5), labels),
                                grad ? oc_rand(&rng, dt, DIMS(5, 1), -1, 1) : NULL};
            same_failure(ops[o], in, grad ? 3 : 2, ops[o][0] == 's' && !grad ? 2 : 1, NULL, 0);
        }
}

Test(ops_gpu_kernels, a_bad_adam_step_fails_with_the_cpu_message)
{
    need_gpu();
    uint64_t rng = 11;
    vq_attr at = VQ_ATTR_F("learning_rate", 0.01);
    for (int d = 0; d < N_OF(floats); d++) {
        vq_tensor *in[5] = {oc_rand(&rng, floats[d], DIMS(4), -1, 1),
                            oc_rand(&rng, floats[d], DIMS(4), -1, 1),
                            oc_rand(&rng, floats[d], DIMS(4), -1, 1),
                            oc_rand(&rng, floats[d], DIMS(4), 0, 1), step_tensor(-1)};
        same_failure("adam", in, 5, 4, &at, 1);
    }
}

Test(ops_gpu_kernels, a_bad_schedule_step_fails_with_the_cpu_message)
{
    need_gpu();
    vq_attr at[4] = {VQ_ATTR_S("kind", "cosine"), VQ_ATTR_F("base_lr", 0.1),
                     VQ_ATTR_I("t_max", 10), VQ_ATTR_S("dtype", "f64")};
    vq_tensor *in[1] = {step_tensor(-4)};
    same_failure("lr_schedule", in, 1, 2, at, 4);
}

Test(ops_gpu_kernels, sequence_lengths_out_of_range_fail_with_the_cpu_message)
{
    need_gpu();
    for (int li = 0; li < 2; li++) {
        /* elements 1 and 2 are bad: the message names 1 and its length */
        vq_tensor *in[2] = {oc_from(VQ_F32, DIMS(3, 3), (double[]){1, 2, 3, 4, 5, 6, 7, 8, 9}),
                            oc_from(li ? VQ_I64 : VQ_I32, DIMS(3), (double[]){2, 4, -1})};
        same_failure("reverse_sequence", in, 2, 1, NULL, 0);
    }
}

Test(ops_gpu_kernels, gather_indices_out_of_range_fail_with_the_cpu_message)
{
    need_gpu();
    uint64_t rng = 13;
    for (int grad = 0; grad < 2; grad++)
        for (int t = 0; t < 2; t++) {
            /* elements 2 and 4 are bad: the message names element 2 and its index */
            double idx[5] = {0, 3, -6, 1, 9};
            vq_tensor *in[3] = {oc_rand(&rng, VQ_F32, DIMS(2, 4, 3), -1, 1),
                                oc_from(t ? VQ_I64 : VQ_I32, DIMS(5), idx),
                                grad ? oc_rand(&rng, VQ_F32, DIMS(2, 5, 3), -1, 1) : NULL};
            vq_attr at = VQ_ATTR_I("axis", 1);
            same_failure(grad ? "gather_grad" : "gather", in, grad ? 3 : 2, 1, &at, 1);
        }
}

Test(ops_gpu_kernels, scatter_indices_out_of_range_fail_with_the_cpu_message)
{
    need_gpu();
    uint64_t rng = 17;
    for (int t = 0; t < 2; t++) {
        vq_dtype it = t ? VQ_I64 : VQ_I32;
        /* scatter_elements along axis 1 (dim 4): elements 3 and 5 are bad */
        double ie[6] = {0, -4, 3, 4, 1, -5};
        vq_tensor *in[3] = {oc_rand(&rng, VQ_F32, DIMS(2, 4), -1, 1), oc_from(it, DIMS(2, 3), ie),
                            oc_rand(&rng, VQ_F32, DIMS(2, 3), -1, 1)};
        vq_attr at = VQ_ATTR_I("axis", 1);
        same_failure("scatter_elements", in, 3, 1, &at, 1);
        /* tuples of 2 into X [3, 4]: element 3 (4 in dim 1) is the first
         * bad one, element 4 (-4 in dim 0) the next */
        double in2[6] = {0, 1, -3, 4, -4, 0};
        vq_tensor *nd[3] = {oc_rand(&rng, VQ_F64, DIMS(3, 4), -1, 1), oc_from(it, DIMS(3, 2), in2),
                            oc_rand(&rng, VQ_F64, DIMS(3), -1, 1)};
        same_failure("scatter_nd", nd, 3, 1, NULL, 0);
        vq_tensor *g[2] = {oc_rand(&rng, VQ_F64, DIMS(3, 4), -1, 1), oc_from(it, DIMS(3, 2), in2)};
        same_failure("gather_nd", g, 2, 1, NULL, 0);
    }
}

Test(ops_gpu_kernels, roi_batch_indices_out_of_range_fail_with_the_cpu_message)
{
    need_gpu();
    uint64_t rng = 17;
    for (int grad = 0; grad < 2; grad++)
        for (int t = 0; t < 2; t++) {
            /* RoIs 1 and 3 are bad: the message names RoI 1 and its index */
            double idx[4] = {0, 2, 1, -1};
            vq_tensor *in[4] = {oc_rand(&rng, VQ_F32, DIMS(2, 3, 4, 4), -1, 1),
                                oc_rand(&rng, VQ_F32, DIMS(4, 4), 0, 3),
                                oc_from(t ? VQ_I64 : VQ_I32, DIMS(4), idx),
                                grad ? oc_rand(&rng, VQ_F32, DIMS(4, 3, 1, 1), -1, 1) : NULL};
            same_failure(grad ? "roi_align_grad" : "roi_align", in, grad ? 4 : 3, 1, NULL, 0);
        }
}
