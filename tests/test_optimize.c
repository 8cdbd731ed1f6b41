/* The optimization stage of preparation (graph/optimize.c): each pass on
 * programs built op by op gives the unoptimized program's results (the
 * same bits where the arithmetic is the same, within the stated bound
 * where a pattern becomes another op), fires (the prepared plan has fewer
 * ops), VARQ_OPT switches passes, training programs stay as they are, and
 * an imported ONNX model runs the same either way. meson.build runs the
 * suite again at VARQ_ISA=avx2 and portable for the activations' paths. */
#include <varq/varq.h>

#include "../graph/graph_internal.h"
#include "../graph/optimize.h"
#include "onnx_models.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One engine for the suite's runs: a scope's tensors stay with the engine
 * that first ran on them. */
static vq_engine *engine;

static void engine_up(void)
{
    vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    cr_assert_eq(vq_engine_new(&engine, &eo), 0);
}

static void engine_down(void)
{
    vq_engine_free(engine);
    engine = NULL;
}

TestSuite(optimize, .init = engine_up, .fini = engine_down);

#define NM(...) ((const char *const[]){__VA_ARGS__})
#define CNT(...) ((int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *)))

static void var(vq_program *p, const char *name, int ndim, const int64_t *shape, bool persist)
{
    cr_assert_geq(vq_program_add_var(p, 0, name, VQ_F32, ndim, shape, persist), 0, "%s",
                  vq_errmsg());
}

static void op(vq_program *p, const char *type, const char *const *in, int nin,
               const char *const *out, int nout, const vq_attr *a, int na)
{
    cr_assert_geq(vq_program_add_op(p, 0, type, in, nin, out, nout, a, na), 0, "%s", vq_errmsg());
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static float frand(float lo, float hi)
{
    rng_state = rng_state * 6364136223846793005u + 1442695040888963407u;
    return lo + (hi - lo) * (float)((rng_state >> 40) / 16777216.0);
}

static vq_tensor *rand_tensor(int ndim, const int64_t *shape, float lo, float hi)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= shape[i];
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++)
        v[i] = frand(lo, hi);
    vq_tensor *t;
    cr_assert_eq(vq_tensor_from(&t, VQ_F32, ndim, shape, v), 0);
    free(v);
    return t;
}

static void scope_put(vq_scope *s, const char *name, vq_tensor *t)
{
    cr_assert_eq(vq_scope_set(s, name, t), 0);
    vq_tensor_release(t);
}

static void scope_scalar(vq_scope *s, const char *name, float v)
{
    vq_tensor *t;
    cr_assert_eq(vq_tensor_from(&t, VQ_F32, 0, NULL, &v), 0);
    scope_put(s, name, t);
}

/* One run of p with VARQ_OPT = spec (NULL: unset) on a new executor: the
 * fetched tensor (the caller releases it), and the ops of the plan. */
static vq_tensor *run(vq_program *p, vq_scope *s, const vq_feed *feeds, int nfeeds,
                      const char *fetch, const char *spec, int *nops)
{
    vq_engine *e = engine;
    if (spec)
        setenv("VARQ_OPT", spec, 1);
    else
        unsetenv("VARQ_OPT");
    vq_exec *ex;
    int rc = vq_exec_new(&ex, e, NULL);
    unsetenv("VARQ_OPT");
    cr_assert_eq(rc, 0, "%s", vq_errmsg());
    vq_fetch f = {fetch, NULL};
    cr_assert_eq(vq_exec_run(ex, p, s, feeds, nfeeds, &f, 1), 0, "%s", vq_errmsg());
    if (nops)
        *nops = vq__exec_plan_nops(ex);
    vq_exec_free(ex);
    return f.tensor;
}

static void assert_same_bits(vq_tensor *a, vq_tensor *b)
{
    cr_assert_eq(vq_tensor_numel(a), vq_tensor_numel(b));
    const float *x = vq_tensor_data(a), *y = vq_tensor_data(b);
    for (int64_t i = 0; i < vq_tensor_numel(a); i++)
        cr_assert(memcmp(&x[i], &y[i], sizeof(float)) == 0, "[%lld]: %.9g against %.9g",
                  (long long)i, x[i], y[i]);
}

/* |a - b| <= ulps units in the last place of max(|b|, tiny). */
static void assert_close_ulps(vq_tensor *a, vq_tensor *b, double ulps, double tiny)
{
    cr_assert_eq(vq_tensor_numel(a), vq_tensor_numel(b));
    const float *x = vq_tensor_data(a), *y = vq_tensor_data(b);
    for (int64_t i = 0; i < vq_tensor_numel(a); i++) {
        double m = fmax(fabs(y[i]), tiny), ulp = ldexp(1.0, ilogb(m) - 23);
        cr_assert_leq(fabs((double)x[i] - y[i]), ulps * ulp, "[%lld]: %.9g against %.9g",
                      (long long)i, x[i], y[i]);
    }
}

/* The optimized and unoptimized runs of p on x (fed as "x"), fetching
 * "y": exact or within ulps (ulps < 0: exact); the plans' op counts. */
static void compare(vq_program *p, vq_scope *s, vq_tensor *x, double ulps, int *nopt, int *nplain)
{
    vq_feed feed = {"x", x};
    vq_tensor *a = run(p, s, &feed, 1, "y", NULL, nopt);
    vq_tensor *b = run(p, s, &feed, 1, "y", "0", nplain);
    if (ulps < 0)
        assert_same_bits(a, b);
    else
        assert_close_ulps(a, b, ulps, 1e-3);
    vq_tensor_release(a);
    vq_tensor_release(b);
}

/* ---- the switch ---- */

Test(optimize, varq_opt_names_the_passes)
{
    unsigned m;
    cr_assert_eq(vq__opt_parse(NULL, &m), 0);
    cr_assert_eq(m, VQ__OPT_ALL);
    cr_assert_eq(vq__opt_parse("1", &m), 0);
    cr_assert_eq(m, VQ__OPT_ALL);
    cr_assert_eq(vq__opt_parse("0", &m), 0);
    cr_assert_eq(m, 0);
    cr_assert_eq(vq__opt_parse("none", &m), 0);
    cr_assert_eq(m, 0);
    cr_assert_eq(vq__opt_parse("conv-act", &m), 0);
    cr_assert_eq(m, VQ__OPT_CONV_ACT);
    cr_assert_eq(vq__opt_parse("noop,elementwise", &m), 0);
    cr_assert_eq(m, VQ__OPT_NOOP | VQ__OPT_ELEMENTWISE);
    cr_assert_eq(vq__opt_parse("-conv-act", &m), 0);
    cr_assert_eq(m, VQ__OPT_ALL & ~VQ__OPT_CONV_ACT);
    cr_assert_eq(vq__opt_parse("-noop,-elementwise,+noop", &m), 0);
    cr_assert_eq(m, VQ__OPT_ALL & ~VQ__OPT_ELEMENTWISE);
    cr_assert_eq(vq__opt_parse("fusion", &m), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "fusion"), "%s", vq_errmsg());
    cr_assert_eq(vq__opt_parse("noop,-elementwise", &m), VQ_EINVAL);
    /* the executor refuses a bad setting */
    setenv("VARQ_OPT", "conv_act", 1);
    vq_exec *ex = NULL;
    int rc = vq_exec_new(&ex, engine, NULL);
    unsetenv("VARQ_OPT");
    cr_assert_eq(rc, VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "VARQ_OPT"), "%s", vq_errmsg());
}

/* ---- conv-act ---- */

/* x [n, c, h, w] -> conv2d (w, b, pads 1, groups) -> act -> y. */
static vq_program *conv_act_program(const int64_t *xs, int64_t m, int64_t groups, const char *act,
                                    const vq_attr *aa, int naa)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t ws[4] = {m, xs[1] / groups, 3, 3}, bs[1] = {m}, cs[4] = {xs[0], m, xs[2], xs[3]};
    var(p, "x", 4, xs, false);
    var(p, "w", 4, ws, true);
    var(p, "b", 1, bs, true);
    var(p, "c", 4, cs, false);
    var(p, "y", 4, cs, false);
    static const int64_t pads[4] = {1, 1, 1, 1};
    vq_attr ca[2] = {VQ_ATTR_IS("pads", pads, 4), VQ_ATTR_I("groups", groups)};
    op(p, "conv2d", NM("x", "w", "b"), 3, NM("c"), 1, ca, 2);
    op(p, act, NM("c"), 1, NM("y"), 1, aa, naa);
    return p;
}

static void conv_act_case(const int64_t *xs, int64_t m, int64_t groups)
{
    static const char *const acts[] = {"relu", "sigmoid",      "tanh",
                                       "silu", "hard_sigmoid", "hard_swish"};
    for (int k = 0; k < 6; k++) {
        vq_attr hs[2] = {VQ_ATTR_F("alpha", 0.3), VQ_ATTR_F("beta", 0.4)};
        bool hsig = !strcmp(acts[k], "hard_sigmoid");
        vq_program *p = conv_act_program(xs, m, groups, acts[k], hs, hsig ? 2 : 0);
        vq_scope *s;
        cr_assert_eq(vq_scope_new(&s), 0);
        scope_put(s, "w", rand_tensor(4, (int64_t[]){m, xs[1] / groups, 3, 3}, -0.5f, 0.5f));
        scope_put(s, "b", rand_tensor(1, (int64_t[]){m}, -1, 1));
        vq_tensor *x = rand_tensor(4, xs, -3, 3);
        int nopt, nplain;
        compare(p, s, x, -1, &nopt, &nplain);
        cr_assert_eq(nplain, 2, "%s", acts[k]);
        cr_assert_eq(nopt, 1, "%s: the activation went into the conv2d", acts[k]);
        vq_tensor_release(x);
        vq_scope_free(s);
        vq_program_free(p);
    }
}

/* Every activation, on each of conv2d's paths (im2col and the product,
 * the depthwise stencil, one image's product by panels, Winograd), with
 * the bits of conv2d then the activation op. */
Test(optimize, conv_act_moves_each_activation_into_conv2d_with_the_same_bits)
{
    conv_act_case((int64_t[]){2, 3, 9, 9}, 4, 1);     /* small: items */
    conv_act_case((int64_t[]){1, 8, 12, 12}, 8, 8);   /* depthwise */
    conv_act_case((int64_t[]){1, 32, 7, 7}, 64, 1);   /* more channels than columns */
    conv_act_case((int64_t[]){1, 64, 40, 40}, 64, 1); /* Winograd's size */
    conv_act_case((int64_t[]){1, 16, 56, 56}, 24, 1); /* columns shared */
}

/* A conv2d whose output is fetched, or read twice, keeps its activation
 * apart; a conv2d with act has no gradient. */
Test(optimize, conv_act_leaves_values_something_else_sees)
{
    int64_t xs[4] = {1, 3, 6, 6};
    vq_program *p = conv_act_program(xs, 4, 1, "relu", NULL, 0);
    vq_program *o = NULL;
    vq__opt_stats st;
    cr_assert_eq(vq__program_optimize(p, VQ__OPT_ALL, NM("x", "c"), 2, NULL, NULL, &o, &st), 0);
    cr_assert_null(o, "c is fetched");
    cr_assert_eq(vq__program_optimize(p, VQ__OPT_ALL, NM("x", "y"), 2, NULL, NULL, &o, &st), 0);
    cr_assert_not_null(o);
    cr_assert_eq(st.conv_act, 1);
    cr_assert_eq(vq_program_nops(o, 0), 1);
    vq_program_free(o);
    /* read twice */
    int64_t cs[4] = {1, 4, 6, 6};
    var(p, "z", 4, cs, false);
    op(p, "sigmoid", NM("c"), 1, NM("z"), 1, NULL, 0);
    cr_assert_eq(vq__program_optimize(p, VQ__OPT_ALL, NM("x", "y", "z"), 3, NULL, NULL, &o, &st),
                 0);
    cr_assert_null(o);
    vq_program_free(p);
    /* the fused form refuses a gradient */
    p = conv_act_program(xs, 4, 1, "relu", NULL, 0);
    cr_assert_eq(vq__program_optimize(p, VQ__OPT_ALL, NM("x", "y"), 2, NULL, NULL, &o, &st), 0);
    var(o, "loss", 0, NULL, false);
    op(o, "sum", NM("y"), 1, NM("loss"), 1, NULL, 0);
    cr_assert_lt(vq_append_backward(o, "loss", NULL, 0), 0);
    cr_assert(strstr(vq_errmsg(), "act"), "%s", vq_errmsg());
    vq_program_free(o);
    vq_program_free(p);
}

/* x * clip(x + 3, 0, 6) / 6 as exporters without HardSwish write it, and
 * x * sigmoid(x): one hard_swish and one silu, within 4 ulp of max(|y|, 1)
 * of the unfused ops (hard_swish scales by 1/6 before the clamp where the
 * pattern divides after the product; silu divides by 1 + exp(-x) where
 * the pattern multiplies by the sigmoid); after a conv2d both then go
 * into it. */
Test(optimize, hard_swish_and_silu_patterns_become_one_op)
{
    int64_t xs[4] = {1, 4, 8, 8}, ws[4] = {4, 4, 3, 3}, bs[1] = {4};
    for (int form = 0; form < 3; form++) {
        vq_program *p;
        cr_assert_eq(vq_program_new(&p), 0);
        var(p, "x", 4, xs, false);
        var(p, "w", 4, ws, true);
        var(p, "b", 1, bs, true);
        const char *names[] = {"c", "t0", "t1", "t2", "t3", "y"};
        for (int i = 0; i < 6; i++)
            var(p, names[i], 4, xs, false);
        var(p, "three", 0, NULL, true);
        var(p, "zero", 0, NULL, true);
        var(p, "six", 0, NULL, true);
        static const int64_t pads[4] = {1, 1, 1, 1};
        vq_attr pa = VQ_ATTR_IS("pads", pads, 4);
        op(p, "conv2d", NM("x", "w", "b"), 3, NM("c"), 1, &pa, 1);
        if (form < 2) {
            op(p, "add", NM("c", "three"), 2, NM("t0"), 1, NULL, 0);
            op(p, form ? "minimum" : "maximum", NM("t0", form ? "six" : "zero"), 2, NM("t1"), 1,
               NULL, 0);
            op(p, form ? "maximum" : "minimum", NM("t1", form ? "zero" : "six"), 2, NM("t2"), 1,
               NULL, 0);
            if (form == 0) {
                op(p, "mul", NM("c", "t2"), 2, NM("t3"), 1, NULL, 0);
                op(p, "div", NM("t3", "six"), 2, NM("y"), 1, NULL, 0);
            } else {
                vq_attr sc = VQ_ATTR_F("scale", 1.0 / 6);
                op(p, "scale", NM("t2"), 1, NM("t3"), 1, &sc, 1);
                op(p, "mul", NM("t3", "c"), 2, NM("y"), 1, NULL, 0);
            }
        } else {
            op(p, "sigmoid", NM("c"), 1, NM("t0"), 1, NULL, 0);
            op(p, "mul", NM("t0", "c"), 2, NM("y"), 1, NULL, 0);
        }
        vq_scope *s;
        cr_assert_eq(vq_scope_new(&s), 0);
        scope_put(s, "w", rand_tensor(4, ws, -0.5f, 0.5f));
        scope_put(s, "b", rand_tensor(1, bs, -1, 1));
        scope_scalar(s, "three", 3);
        scope_scalar(s, "zero", 0);
        scope_scalar(s, "six", 6);
        vq_tensor *x = rand_tensor(4, xs, -4, 4);
        vq_feed feed = {"x", x};
        int nopt, nplain, nchain;
        vq_tensor *a = run(p, s, &feed, 1, "y", NULL, &nopt);
        vq_tensor *b = run(p, s, &feed, 1, "y", "0", &nplain);
        /* conv-act off: the elementwise pass fuses the pattern as it is,
         * reading the conv2d's output twice (as X and as an operand) */
        vq_tensor *c = run(p, s, &feed, 1, "y", "noop,elementwise", &nchain);
        assert_close_ulps(a, b, 4, 1);
        assert_same_bits(c, b);
        cr_assert_eq(nplain, form < 2 ? 6 : 3);
        cr_assert_eq(nopt, 1, "form %d: all in the conv2d", form);
        cr_assert_eq(nchain, 2, "form %d: conv2d and one fused_elementwise", form);
        vq_tensor_release(a);
        vq_tensor_release(b);
        vq_tensor_release(c);
        vq_tensor_release(x);
        vq_scope_free(s);
        vq_program_free(p);
    }
}

/* ---- elementwise ---- */

/* x [shape] through add(bias [C,1,1]), mul(by x), sigmoid, scale,
 * sub(per-item [N,C,1,1] minus the value), maximum(a scalar), exp,
 * div(by a whole-shape z), tanh, hard_sigmoid, mul(by a trailing [W]) into
 * y: one fused_elementwise with the unfused bits, serial and shared with
 * the workers. */
static void chain_case(const int64_t *xs)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t cb[3] = {xs[1], 1, 1}, nc[4] = {xs[0], xs[1], 1, 1}, tw[1] = {xs[3]};
    var(p, "x", 4, xs, false);
    var(p, "z", 4, xs, false);
    var(p, "bias", 3, cb, true);
    var(p, "per", 4, nc, true);
    var(p, "lo", 0, NULL, true);
    var(p, "row", 1, tw, true);
    char name[16];
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "t%d", i);
        var(p, name, 4, xs, false);
    }
    var(p, "y", 4, xs, false);
    vq_attr sc[2] = {VQ_ATTR_F("scale", 2.5), VQ_ATTR_F("bias", -1)};
    vq_attr hs[2] = {VQ_ATTR_F("alpha", 0.25), VQ_ATTR_F("beta", 0.45)};
    op(p, "add", NM("x", "bias"), 2, NM("t0"), 1, NULL, 0);
    op(p, "mul", NM("t0", "x"), 2, NM("t1"), 1, NULL, 0);
    op(p, "sigmoid", NM("t1"), 1, NM("t2"), 1, NULL, 0);
    op(p, "scale", NM("t2"), 1, NM("t3"), 1, sc, 2);
    op(p, "sub", NM("per", "t3"), 2, NM("t4"), 1, NULL, 0);
    op(p, "maximum", NM("t4", "lo"), 2, NM("t5"), 1, NULL, 0);
    op(p, "exp", NM("t5"), 1, NM("t6"), 1, NULL, 0);
    op(p, "div", NM("t6", "z"), 2, NM("t7"), 1, NULL, 0);
    op(p, "tanh", NM("t7"), 1, NM("t8"), 1, NULL, 0);
    op(p, "hard_sigmoid", NM("t8"), 1, NM("t9"), 1, hs, 2);
    op(p, "mul", NM("t9", "row"), 2, NM("y"), 1, NULL, 0);
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    scope_put(s, "bias", rand_tensor(3, cb, -1, 1));
    scope_put(s, "per", rand_tensor(4, nc, -1, 1));
    scope_scalar(s, "lo", -0.5f);
    scope_put(s, "row", rand_tensor(1, tw, -2, 2));
    vq_tensor *x = rand_tensor(4, xs, -3, 3), *z = rand_tensor(4, xs, 0.5f, 2);
    vq_feed feeds[2] = {{"x", x}, {"z", z}};
    int nopt, nplain;
    vq_tensor *a = run(p, s, feeds, 2, "y", NULL, &nopt);
    vq_tensor *b = run(p, s, feeds, 2, "y", "0", &nplain);
    assert_same_bits(a, b);
    cr_assert_eq(nplain, 11);
    cr_assert_eq(nopt, 1, "one fused_elementwise");
    /* an intermediate fetched stays: two ops around it */
    vq_fetch f[2] = {{"y", NULL}, {"t4", NULL}};
    vq_exec *ex;
    cr_assert_eq(vq_exec_new(&ex, engine, NULL), 0);
    cr_assert_eq(vq_exec_run(ex, p, s, feeds, 2, f, 2), 0, "%s", vq_errmsg());
    cr_assert_eq(vq__exec_plan_nops(ex), 2);
    assert_same_bits(f[0].tensor, b);
    vq_tensor_release(f[0].tensor);
    vq_tensor_release(f[1].tensor);
    vq_exec_free(ex);
    vq_tensor_release(a);
    vq_tensor_release(b);
    vq_tensor_release(x);
    vq_tensor_release(z);
    vq_scope_free(s);
    vq_program_free(p);
}

Test(optimize, elementwise_chains_fuse_with_the_same_bits)
{
    chain_case((int64_t[]){2, 3, 5, 7});    /* less than one block */
    chain_case((int64_t[]){2, 8, 33, 31});  /* blocks and a remainder */
    chain_case((int64_t[]){2, 16, 64, 64}); /* shared with the workers */
}

/* GELU as exporters write it, x * (1 + erf(x / sqrt 2)) * 0.5: the chain
 * reads x again in its fourth op; one fused_elementwise, the same bits. */
Test(optimize, gelus_erf_form_fuses_reading_its_input_twice)
{
    int64_t xs[3] = {2, 9, 40};
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    var(p, "x", 3, xs, false);
    const char *t[] = {"t0", "t1", "t2", "t3", "y"};
    for (int i = 0; i < 5; i++)
        var(p, t[i], 3, xs, false);
    var(p, "sqrt2", 0, NULL, true);
    var(p, "one", 0, NULL, true);
    var(p, "half", 0, NULL, true);
    op(p, "div", NM("x", "sqrt2"), 2, NM("t0"), 1, NULL, 0);
    op(p, "erf", NM("t0"), 1, NM("t1"), 1, NULL, 0);
    op(p, "add", NM("t1", "one"), 2, NM("t2"), 1, NULL, 0);
    op(p, "mul", NM("x", "t2"), 2, NM("t3"), 1, NULL, 0);
    op(p, "mul", NM("t3", "half"), 2, NM("y"), 1, NULL, 0);
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    scope_scalar(s, "sqrt2", 1.41421356f);
    scope_scalar(s, "one", 1);
    scope_scalar(s, "half", 0.5f);
    vq_tensor *x = rand_tensor(3, xs, -4, 4);
    int nopt, nplain;
    compare(p, s, x, -1, &nopt, &nplain);
    cr_assert_eq(nplain, 5);
    cr_assert_eq(nopt, 1);
    vq_tensor_release(x);
    vq_scope_free(s);
    vq_program_free(p);
}

/* An f64 chain, or one whose operand broadcasts in a way fused_elementwise
 * does not take ([C, 1] into [N, C, H, W] with H kept between), stays. */
Test(optimize, elementwise_leaves_what_it_does_not_take)
{
    int64_t xs[3] = {4, 6, 5}, ys[3] = {4, 1, 5};
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    var(p, "x", 3, xs, false);
    var(p, "b", 3, ys, true);
    var(p, "t", 3, xs, false);
    var(p, "y", 3, xs, false);
    op(p, "add", NM("x", "b"), 2, NM("t"), 1, NULL, 0);
    op(p, "relu", NM("t"), 1, NM("y"), 1, NULL, 0);
    vq_program *o;
    vq__opt_stats st;
    cr_assert_eq(vq__program_optimize(p, VQ__OPT_ALL, NM("x", "y"), 2, NULL, NULL, &o, &st), 0);
    cr_assert_null(o, "[4, 1, 5] keeps 4 and 5 apart");
    vq_program_free(p);
    cr_assert_eq(vq_program_new(&p), 0);
    cr_assert_geq(vq_program_add_var(p, 0, "x", VQ_F64, 3, xs, false), 0);
    cr_assert_geq(vq_program_add_var(p, 0, "t", VQ_F64, 3, xs, false), 0);
    cr_assert_geq(vq_program_add_var(p, 0, "y", VQ_F64, 3, xs, false), 0);
    op(p, "sigmoid", NM("x"), 1, NM("t"), 1, NULL, 0);
    op(p, "relu", NM("t"), 1, NM("y"), 1, NULL, 0);
    cr_assert_eq(vq__program_optimize(p, VQ__OPT_ALL, NM("x", "y"), 2, NULL, NULL, &o, &st), 0);
    cr_assert_null(o, "f64 stays unfused");
    vq_program_free(p);
}

/* ---- noop ---- */

Test(optimize, noop_removes_reshapes_casts_and_transposes_that_change_nothing)
{
    int64_t xs[2] = {6, 10};
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    const char *names[] = {"x", "a", "b", "c", "d", "y"};
    for (int i = 0; i < 6; i++)
        var(p, names[i], 2, xs, false);
    static const int64_t shape[2] = {6, 10}, perm[2] = {0, 1};
    vq_attr sh = VQ_ATTR_IS("shape", shape, 2), pe = VQ_ATTR_IS("perm", perm, 2),
            dt = VQ_ATTR_S("dtype", "f32");
    op(p, "relu", NM("x"), 1, NM("a"), 1, NULL, 0);
    op(p, "reshape", NM("a"), 1, NM("b"), 1, &sh, 1);
    op(p, "cast", NM("b"), 1, NM("c"), 1, &dt, 1);
    op(p, "transpose", NM("c"), 1, NM("d"), 1, &pe, 1);
    op(p, "mul", NM("d", "a"), 2, NM("y"), 1, NULL, 0);
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    vq_tensor *x = rand_tensor(2, xs, -2, 2);
    vq_feed feed = {"x", x};
    int nopt, nplain, nnoop;
    vq_tensor *a = run(p, s, &feed, 1, "y", NULL, &nopt);
    vq_tensor *b = run(p, s, &feed, 1, "y", "0", &nplain);
    vq_tensor *c = run(p, s, &feed, 1, "y", "noop", &nnoop);
    assert_same_bits(a, b);
    assert_same_bits(c, b);
    cr_assert_eq(nplain, 5);
    cr_assert_eq(nnoop, 2, "relu and mul");
    cr_assert_eq(nopt, 2, "mul reads a twice: no chain");
    vq_tensor_release(a);
    vq_tensor_release(b);
    vq_tensor_release(c);
    vq_tensor_release(x);
    vq_scope_free(s);
    vq_program_free(p);
}

/* ---- training programs ---- */

/* With gradient ops (or an optimizer writing parameters) nothing is
 * rewritten: what the backward ops read must stay as it is. */
Test(optimize, training_programs_are_left_alone)
{
    int64_t xs[4] = {1, 3, 6, 6};
    vq_program *p = conv_act_program(xs, 4, 1, "relu", NULL, 0);
    var(p, "loss", 0, NULL, false);
    op(p, "sum", NM("y"), 1, NM("loss"), 1, NULL, 0);
    vq_program *fwd;
    cr_assert_eq(vq_program_clone(p, &fwd), 0);
    cr_assert_eq(vq_append_backward(p, "loss", NULL, 0), 2, "%s", vq_errmsg());
    vq_program *o;
    vq__opt_stats st;
    cr_assert_eq(vq__program_optimize(p, VQ__OPT_ALL, NM("x", "loss"), 2, NULL, NULL, &o, &st), 0);
    cr_assert_null(o);
    cr_assert_eq(st.conv_act, 0);
    /* the forward program alone is an inference one */
    cr_assert_eq(vq__program_optimize(fwd, VQ__OPT_ALL, NM("x", "loss"), 2, NULL, NULL, &o, &st),
                 0);
    cr_assert_not_null(o);
    cr_assert_eq(st.conv_act, 1);
    vq_program_free(o);
    /* and the executor runs the training program's ops as they are */
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    scope_put(s, "w", rand_tensor(4, (int64_t[]){4, 3, 3, 3}, -0.5f, 0.5f));
    scope_put(s, "b", rand_tensor(1, (int64_t[]){4}, -1, 1));
    vq_tensor *x = rand_tensor(4, xs, -1, 1);
    vq_feed feed = {"x", x};
    int n;
    vq_tensor *l = run(p, s, &feed, 1, "loss", NULL, &n);
    cr_assert_eq(n, vq_program_nops(p, 0));
    vq_tensor_release(l);
    vq_tensor_release(x);
    vq_scope_free(s);
    vq_program_free(fwd);
    vq_program_free(p);
}

/* ---- an imported model ---- */

/* Conv, Sigmoid and Mul (the importer's silu), Conv, HardSigmoid, a
 * squeeze-excite style Mul by a per-channel scale, Add, Relu: the
 * optimized plan has fewer ops and the same bits. */
Test(optimize, an_imported_onnx_model_runs_the_same_optimized)
{
    Onnx__ModelProto *m = model_new(13);
    add_input(m, "x", 4, (int64_t[]){1, 4, 10, 10});
    float w[8 * 4 * 9], b[8], w2[8 * 8], se[8];
    for (int i = 0; i < 8 * 4 * 9; i++)
        w[i] = (float)sin(0.37 * i) * 0.4f;
    for (int i = 0; i < 64; i++)
        w2[i] = (float)cos(0.5 * i) * 0.3f;
    for (int i = 0; i < 8; i++)
        b[i] = 0.1f * (float)i - 0.3f, se[i] = 0.2f + 0.1f * (float)i;
    add_init(m, "w", 4, (int64_t[]){8, 4, 3, 3}, w);
    add_init(m, "b", 1, (int64_t[]){8}, b);
    add_init(m, "w2", 4, (int64_t[]){8, 8, 1, 1}, w2);
    add_init(m, "se", 4, (int64_t[]){1, 8, 1, 1}, se);
    attr_ints(add_node(m, "Conv", "c1", NAMES("x", "w", "b"), NAMES("c1")), "pads", 4,
              (int64_t[]){1, 1, 1, 1});
    add_node(m, "Sigmoid", "s1", NAMES("c1"), NAMES("s1"));
    add_node(m, "Mul", "m1", NAMES("c1", "s1"), NAMES("a1"));
    add_node(m, "Conv", "c2", NAMES("a1", "w2"), NAMES("c2"));
    add_node(m, "HardSigmoid", "h2", NAMES("c2"), NAMES("h2"));
    add_node(m, "Mul", "m2", NAMES("h2", "se"), NAMES("e2"));
    add_node(m, "Add", "r2", NAMES("e2", "a1"), NAMES("r2"));
    add_node(m, "Relu", "y", NAMES("r2"), NAMES("y"));
    add_outputs(m, NAMES("y"));
    struct imported im = import_ok(m);
    vq_tensor *x = rand_tensor(4, (int64_t[]){1, 4, 10, 10}, -2, 2);
    vq_feed feed = {"x", x};
    int nopt, nplain;
    vq_tensor *a = run(im.p, im.s, &feed, 1, "y", NULL, &nopt);
    vq_tensor *c = run(im.p, im.s, &feed, 1, "y", "0", &nplain);
    assert_same_bits(a, c);
    cr_assert_lt(nopt, nplain, "%d ops optimized, %d not", nopt, nplain);
    vq_tensor_release(a);
    vq_tensor_release(c);
    vq_tensor_release(x);
    imported_free(&im);
}
