/* Autodiff and optimizers: vq_append_backward on random programs built from
 * the registered ops, checked against central finite differences of the
 * loss (f64) computed by running the forward program; gradient sums for vars
 * read twice; no_grad; errors; optimizer state and startup programs. */
#include "../graph/graph_internal.h" /* vq__program_find_var */
#include "leakcheck.h"
#include "opcheck.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(train, .fini = leak_check);

#define NAMES(...) ((const char *const[]){__VA_ARGS__})

static vq_program *prog;
static int nextvar;

static const char *fresh(vq_dtype dt, int ndim, const int64_t *shape)
{
    static char names[64][16];
    char *n = names[nextvar % 64];
    snprintf(n, 16, "v%d", nextvar++);
    cr_assert_eq(vq_program_add_var(prog, 0, n, dt, ndim, shape, false), 0, "%s", vq_errmsg());
    return n;
}

static const char *op1(const char *type, const char *const *in, int nin, int ndim,
                       const int64_t *shape, const vq_attr *attrs, int nattrs)
{
    const char *out = fresh(VQ_F64, ndim, shape);
    cr_assert_geq(vq_program_add_op(prog, 0, type, in, nin, &out, 1, attrs, nattrs), 0, "%s: %s",
                  type, vq_errmsg());
    return out;
}

/* A random differentiable program: x [5,4] (fed), params W1 [4,3], b1 [3],
 * W2 [3,2], label [5,2]; a chain of randomly chosen ops; a scalar loss. */
static void build_random(uint64_t *rng, const char **loss)
{
    nextvar = 0;
    cr_assert_eq(vq_program_new(&prog), 0);
    int64_t xs[2] = {5, 4}, w1[2] = {4, 3}, b1[1] = {3}, w2[2] = {3, 2}, h[2] = {5, 3},
            z[2] = {5, 2}, hs[2] = {3, 5}, flat[1] = {15}, cat[2] = {5, 6};
    cr_assert_eq(vq_program_add_var(prog, 0, "x", VQ_F64, 2, xs, false), 0);
    cr_assert_eq(vq_program_add_var(prog, 0, "label", VQ_F64, 2, z, false), 0);
    cr_assert_eq(vq_program_add_var(prog, 0, "W1", VQ_F64, 2, w1, true), 0);
    cr_assert_eq(vq_program_add_var(prog, 0, "b1", VQ_F64, 1, b1, true), 0);
    cr_assert_eq(vq_program_add_var(prog, 0, "W2", VQ_F64, 2, w2, true), 0);
    const char *t = op1("matmul", NAMES("x", "W1"), 2, 2, h, NULL, 0);
    t = op1("add", (const char *[]){t, "b1"}, 2, 2, h, NULL, 0); /* broadcast */
    const char *acts[] = {"sigmoid", "tanh"};
    t = op1(acts[oc_next(rng) % 2], &t, 1, 2, h, NULL, 0);
    for (int step = 0; step < 3; step++) {
        switch (oc_next(rng) % 7) {
        case 0: /* read twice: the gradients of t must be summed */
            t = op1("mul", (const char *[]){t, t}, 2, 2, h, NULL, 0);
            break;
        case 1: {
            vq_attr a[2] = {VQ_ATTR_F("scale", 0.7), VQ_ATTR_F("bias", 0.2)};
            const char *u = op1("scale", &t, 1, 2, h, a, 2);
            t = op1("sub", (const char *[]){u, t}, 2, 2, h, NULL, 0);
            break;
        }
        case 2: {
            const int64_t perm[2] = {1, 0};
            vq_attr a = VQ_ATTR_IS("perm", perm, 2);
            const char *u = op1("transpose", &t, 1, 2, hs, &a, 1);
            vq_attr back = VQ_ATTR_IS("perm", perm, 2);
            t = op1("transpose", &u, 1, 2, h, &back, 1);
            break;
        }
        case 3: {
            vq_attr a = VQ_ATTR_IS("shape", flat, 1);
            const char *u = op1("reshape", &t, 1, 1, flat, &a, 1);
            vq_attr b = VQ_ATTR_IS("shape", h, 2);
            t = op1("reshape", &u, 1, 2, h, &b, 1);
            break;
        }
        case 4: {
            vq_attr ax = VQ_ATTR_I("axis", 1);
            const char *u = op1("concat", (const char *[]){t, t}, 2, 2, cat, &ax, 1);
            const int64_t axes[1] = {1}, st[1] = {2}, en[1] = {5};
            vq_attr sl[3] = {VQ_ATTR_IS("axes", axes, 1), VQ_ATTR_IS("starts", st, 1),
                             VQ_ATTR_IS("ends", en, 1)};
            t = op1("slice", &u, 1, 2, h, sl, 3);
            break;
        }
        case 5: {
            vq_attr a = VQ_ATTR_F("bias", 2.0);
            const char *d = op1("scale", &t, 1, 2, h, &a, 1); /* away from 0 */
            t = op1("div", (const char *[]){t, d}, 2, 2, h, NULL, 0);
            break;
        }
        default:
            t = op1("softmax", &t, 1, 2, h, NULL, 0);
            break;
        }
    }
    const char *zz = op1("matmul", (const char *[]){t, "W2"}, 2, 2, z, NULL, 0);
    switch (oc_next(rng) % 3) {
    case 0:
        *loss = op1("mse", (const char *[]){zz, "label"}, 2, 0, NULL, NULL, 0);
        break;
    case 1: {
        const char *se = op1("square_error", (const char *[]){zz, "label"}, 2, 2, z, NULL, 0);
        *loss = op1("mean", &se, 1, 0, NULL, NULL, 0);
        break;
    }
    default: {
        const char *sm = op1("tanh", &zz, 1, 2, z, NULL, 0);
        *loss = op1("sum", &sm, 1, 0, NULL, NULL, 0);
        break;
    }
    }
}

static double run_loss(vq_exec *ex, vq_program *p, vq_scope *s, vq_tensor *x, vq_tensor *label,
                       const char *loss)
{
    vq_feed feeds[2] = {{"x", x}, {"label", label}};
    vq_fetch f = {loss, NULL};
    cr_assert_eq(vq_exec_run(ex, p, s, feeds, 2, &f, 1), 0, "%s", vq_errmsg());
    double v = oc_get(f.tensor, 0);
    vq_tensor_release(f.tensor);
    return v;
}

Test(train, gradients_of_random_programs_match_finite_differences)
{
    uint64_t rng = oc_seed("train");
    double worst = 0;
    vq_engine *e;
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    cr_assert_eq(vq_engine_new(&e, &o), 0);
    for (int trial = 0; trial < 12; trial++) {
        const char *loss;
        build_random(&rng, &loss);
        char loss_name[16];
        snprintf(loss_name, sizeof loss_name, "%s", loss);
        vq_program *fwd;
        cr_assert_eq(vq_program_clone(prog, &fwd), 0);
        int np = vq_append_backward(prog, loss_name, NULL, 0);
        cr_assert_eq(np, 3, "parameters with gradients: %d (%s)", np, vq_errmsg());
        vq_exec *ex;
        vq_scope *s;
        cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
        cr_assert_eq(vq_scope_new(&s), 0);
        int64_t xs[2] = {5, 4}, w1[2] = {4, 3}, b1[1] = {3}, w2[2] = {3, 2}, z[2] = {5, 2};
        const char *pn[3] = {"W1", "b1", "W2"};
        vq_tensor *pt[3] = {oc_rand(&rng, VQ_F64, 2, w1, -1, 1), oc_rand(&rng, VQ_F64, 1, b1, -1, 1),
                            oc_rand(&rng, VQ_F64, 2, w2, -1, 1)};
        for (int i = 0; i < 3; i++)
            cr_assert_eq(vq_scope_set(s, pn[i], pt[i]), 0);
        vq_tensor *x = oc_rand(&rng, VQ_F64, 2, xs, -1, 1), *label = oc_rand(&rng, VQ_F64, 2, z, -1, 1);
        vq_feed feeds[2] = {{"x", x}, {"label", label}};
        vq_fetch g[3] = {{"W1@GRAD", NULL}, {"b1@GRAD", NULL}, {"W2@GRAD", NULL}};
        cr_assert_eq(vq_exec_run(ex, prog, s, feeds, 2, g, 3), 0, "%s", vq_errmsg());
        const double h = 1e-6;
        for (int i = 0; i < 3; i++) {
            for (int64_t k = 0; k < vq_tensor_numel(pt[i]); k++) {
                double x0 = oc_get(pt[i], k);
                oc_set(pt[i], k, x0 + h);
                double up = run_loss(ex, fwd, s, x, label, loss_name);
                oc_set(pt[i], k, x0 - h);
                double down = run_loss(ex, fwd, s, x, label, loss_name);
                oc_set(pt[i], k, x0);
                double num = (up - down) / (2 * h), ana = oc_get(g[i].tensor, k);
                double err = fabs(ana - num) / fmax(fmax(fabs(ana), fabs(num)), 1e-3);
                cr_assert(err <= 1e-6, "trial %d: d loss / d %s[%lld]: autodiff %.12g, numeric %.12g",
                          trial, pn[i], (long long)k, ana, num);
                worst = fmax(worst, err);
            }
            vq_tensor_release(g[i].tensor);
            vq_tensor_release(pt[i]);
        }
        vq_tensor_release(x);
        vq_tensor_release(label);
        vq_exec_free(ex);
        vq_scope_free(s);
        vq_program_free(fwd);
        vq_program_free(prog);
    }
    vq_engine_free(e);
    cr_log_info("largest autodiff error over 12 random programs: %.3g", worst);
}

Test(train, gradients_are_named_predictably_and_summed_for_vars_read_twice)
{
    nextvar = 0;
    cr_assert_eq(vq_program_new(&prog), 0);
    int64_t s[1] = {3};
    cr_assert_eq(vq_program_add_var(prog, 0, "w", VQ_F64, 1, s, true), 0);
    const char *sq = op1("mul", NAMES("w", "w"), 2, 1, s, NULL, 0);
    const char *l = op1("sum", &sq, 1, 0, NULL, NULL, 0);
    cr_assert_eq(vq_append_backward(prog, l, NULL, 0), 1, "%s", vq_errmsg());
    vq_engine *e;
    vq_exec *ex;
    vq_scope *sc;
    cr_assert_eq(vq_engine_new(&e, NULL), 0);
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    cr_assert_eq(vq_scope_new(&sc), 0);
    vq_tensor *w = oc_from(VQ_F64, 1, s, (double[]){1, -2, 3});
    cr_assert_eq(vq_scope_set(sc, "w", w), 0);
    vq_fetch f = {"w@GRAD", NULL};
    cr_assert_eq(vq_exec_run(ex, prog, sc, NULL, 0, &f, 1), 0, "%s", vq_errmsg());
    oc_assert_close(f.tensor, 1, s, (double[]){2, -4, 6}, 0, 0); /* d sum(w*w) = 2w */
    vq_tensor_release(f.tensor);
    vq_tensor_release(w);
    vq_exec_free(ex);
    vq_scope_free(sc);
    vq_engine_free(e);
    vq_program_free(prog);
}

/* x (fed) -> matmul W -> tanh -> add b -> mul by itself -> mean: with
 * `names` the four results are written to h (the in-place way, as
 * `h = tanh(h)` writes) or each to a var of its own. */
static void build_versions(const char *const names[4], bool with_grad)
{
    cr_assert_eq(vq_program_new(&prog), 0);
    int64_t xs[2] = {4, 3}, ws[2] = {3, 3}, bs[1] = {3};
    cr_assert_eq(vq_program_add_var(prog, 0, "x", VQ_F64, 2, xs, false), 0);
    cr_assert_eq(vq_program_add_var(prog, 0, "W", VQ_F64, 2, ws, true), 0);
    cr_assert_eq(vq_program_add_var(prog, 0, "b", VQ_F64, 1, bs, true), 0);
    cr_assert_eq(vq_program_add_var(prog, 0, "loss", VQ_F64, 0, NULL, false), 0);
    for (int i = 0; i < 4; i++)
        if (vq__program_find_var(prog, names[i]) < 0)
            cr_assert_eq(vq_program_add_var(prog, 0, names[i], VQ_F64, 2, xs, false), 0);
    cr_assert_geq(vq_program_add_op(prog, 0, "matmul", NAMES("x", "W"), 2, &names[0], 1, NULL,
                                    0), 0);
    cr_assert_geq(vq_program_add_op(prog, 0, "tanh", &names[0], 1, &names[1], 1, NULL, 0), 0);
    cr_assert_geq(vq_program_add_op(prog, 0, "add", NAMES(names[1], "b"), 2, &names[2], 1,
                                    NULL, 0), 0);
    cr_assert_geq(vq_program_add_op(prog, 0, "mul", NAMES(names[2], names[2]), 2, &names[3], 1,
                                    NULL, 0), 0);
    cr_assert_geq(vq_program_add_op(prog, 0, "mean", &names[3], 1, NAMES("loss"), 1, NULL, 0),
                  0);
    if (with_grad)
        cr_assert_eq(vq_append_backward(prog, "loss", NULL, 0), 2, "%s", vq_errmsg());
}

/* Runs prog once, with W[k] moved by delta (k < 0: none): fetches
 * (released by the caller). */
static void run_versions_at(const char *const *names, int n, vq_tensor **out, int k,
                            double delta)
{
    vq_engine *e;
    vq_exec *ex;
    vq_scope *sc;
    cr_assert_eq(vq_engine_new(&e, NULL), 0);
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    cr_assert_eq(vq_scope_new(&sc), 0);
    uint64_t rng = 77;
    vq_tensor *w = oc_rand(&rng, VQ_F64, 2, (int64_t[]){3, 3}, -1, 1);
    vq_tensor *b = oc_rand(&rng, VQ_F64, 1, (int64_t[]){3}, -1, 1);
    vq_tensor *x = oc_rand(&rng, VQ_F64, 2, (int64_t[]){4, 3}, -1, 1);
    if (k >= 0)
        ((double *)vq_tensor_data(w))[k] += delta;
    cr_assert_eq(vq_scope_set(sc, "W", w), 0);
    cr_assert_eq(vq_scope_set(sc, "b", b), 0);
    vq_feed feed = {"x", x};
    vq_fetch f[8];
    for (int i = 0; i < n; i++)
        f[i] = (vq_fetch){names[i], NULL};
    cr_assert_eq(vq_exec_run(ex, prog, sc, &feed, 1, f, n), 0, "%s", vq_errmsg());
    for (int i = 0; i < n; i++)
        out[i] = f[i].tensor;
    vq_tensor_release(w);
    vq_tensor_release(b);
    vq_tensor_release(x);
    vq_scope_free(sc);
    vq_exec_free(ex);
    vq_engine_free(e);
}

static void run_versions(const char *const *names, int n, vq_tensor **out)
{
    run_versions_at(names, n, out, -1, 0);
}

Test(train, vars_written_more_than_once_get_a_name_per_version_and_the_same_gradients)
{
    const char *const in_place[4] = {"h", "h", "h", "h"};
    const char *const distinct[4] = {"h1", "h2", "h3", "h4"};
    vq_tensor *a[4], *d[4];
    build_versions(distinct, true);
    run_versions(NAMES("W@GRAD", "b@GRAD", "loss", "h4"), 4, d);
    vq_program_free(prog);
    build_versions(in_place, true);
    /* the versions but the last got names of their own */
    for (int v = 1; v <= 3; v++) {
        char name[16];
        snprintf(name, sizeof name, "h@V%d", v);
        cr_assert_geq(vq__program_find_var(prog, name), 0, "%s missing", name);
    }
    cr_assert_lt(vq__program_find_var(prog, "h@V4"), 0);
    run_versions(NAMES("W@GRAD", "b@GRAD", "loss", "h"), 4, a);
    for (int i = 0; i < 4; i++) { /* the same ops on the same values: the same bits */
        cr_assert_eq(vq_tensor_numel(a[i]), vq_tensor_numel(d[i]));
        for (int64_t j = 0; j < vq_tensor_numel(a[i]); j++)
            cr_assert_eq(oc_get(a[i], j), oc_get(d[i], j), "fetch %d element %lld: %.17g vs %.17g",
                         i, (long long)j, oc_get(a[i], j), oc_get(d[i], j));
        vq_tensor_release(a[i]);
        vq_tensor_release(d[i]);
    }
    vq_program_free(prog);
    /* and against finite differences, through the in-place program */
    build_versions(in_place, false);
    vq_program *fwd = prog;
    build_versions(in_place, true);
    vq_tensor *g[1];
    run_versions(NAMES("W@GRAD"), 1, g);
    vq_program *with_grad = prog;
    prog = fwd;
    double h = 1e-6, worst = 0;
    for (int k = 0; k < 9; k++) {
        vq_tensor *lo, *hi;
        run_versions_at(NAMES("loss"), 1, &lo, k, -h);
        run_versions_at(NAMES("loss"), 1, &hi, k, h);
        double num = (oc_get(hi, 0) - oc_get(lo, 0)) / (2 * h), an = oc_get(g[0], k);
        worst = fmax(worst, fabs(an - num) / fmax(fmax(fabs(an), fabs(num)), 1e-3));
        vq_tensor_release(lo);
        vq_tensor_release(hi);
    }
    cr_assert_lt(worst, 1e-6, "gradient through the versions off by %g", worst);
    vq_tensor_release(g[0]);
    vq_program_free(fwd);
    vq_program_free(with_grad);
    prog = NULL;
}

Test(train, a_parameter_updated_from_parameters_is_refused)
{
    const char *const in_place[4] = {"h", "h", "h", "h"};
    build_versions(in_place, false);
    /* W = W * 2 (from a parameter): an update, not a forward computation */
    cr_assert_geq(vq_program_add_op(prog, 0, "scale", NAMES("W"), 1, NAMES("W"), 1,
                                    (vq_attr[]){VQ_ATTR_F("scale", 2)}, 1), 0);
    cr_assert_eq(vq_append_backward(prog, "loss", NULL, 0), VQ_ENOSYS);
    cr_assert(strstr(vq_errmsg(), "persistable var W is updated"), "%s", vq_errmsg());
    vq_program_free(prog);
    prog = NULL;
}

Test(train, no_grad_vars_and_feeds_get_no_gradient)
{
    nextvar = 0;
    cr_assert_eq(vq_program_new(&prog), 0);
    int64_t s[1] = {2};
    cr_assert_eq(vq_program_add_var(prog, 0, "w", VQ_F64, 1, s, true), 0);
    cr_assert_eq(vq_program_add_var(prog, 0, "frozen", VQ_F64, 1, s, true), 0);
    cr_assert_eq(vq_program_add_var(prog, 0, "x", VQ_F64, 1, s, false), 0);
    const char *a = op1("mul", NAMES("w", "x"), 2, 1, s, NULL, 0);
    const char *b = op1("add", (const char *[]){a, "frozen"}, 2, 1, s, NULL, 0);
    const char *l = op1("mean", &b, 1, 0, NULL, NULL, 0);
    cr_assert_eq(vq_append_backward(prog, l, NAMES("frozen"), 1), 1, "%s", vq_errmsg());
    cr_assert_eq(vq_program_nvars(prog, 0) > 0, 1);
    vq_program *check;
    cr_assert_eq(vq_program_clone(prog, &check), 0);
    /* Declaring w@GRAD again fails: it exists. frozen@GRAD and x@GRAD do not. */
    cr_assert_lt(vq_program_add_var(check, 0, "w@GRAD", VQ_F64, 1, s, false), 0);
    cr_assert_eq(vq_program_add_var(check, 0, "frozen@GRAD", VQ_F64, 1, s, false), 0);
    cr_assert_eq(vq_program_add_var(check, 0, "x@GRAD", VQ_F64, 1, s, false), 0);
    vq_program_free(check);
    vq_program_free(prog);
}

Test(train, bad_losses_are_errors)
{
    nextvar = 0;
    cr_assert_eq(vq_program_new(&prog), 0);
    int64_t s[1] = {2};
    cr_assert_eq(vq_program_add_var(prog, 0, "w", VQ_F64, 1, s, true), 0);
    const char *a = op1("relu", NAMES("w"), 1, 1, s, NULL, 0);
    cr_assert_eq(vq_append_backward(prog, a, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "one element"), "%s", vq_errmsg());
    cr_assert_eq(vq_append_backward(prog, "nope", NULL, 0), VQ_EINVAL);
    vq_program_free(prog);
}

Test(train, adam_state_is_declared_and_zeroed_by_the_startup_program)
{
    vq_program *startup, *main_p;
    cr_assert_eq(vq_program_new(&startup), 0);
    cr_assert_eq(vq_program_new(&main_p), 0);
    int64_t xs[2] = {4, 3}, ys[2] = {4, 1};
    cr_assert_eq(vq_program_add_var(main_p, 0, "x", VQ_F32, 2, xs, false), 0);
    cr_assert_eq(vq_program_add_var(main_p, 0, "y", VQ_F32, 2, ys, false), 0);
    cr_assert_eq(vq_layer_linear(main_p, startup, "x", "out", 1, 5), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_layer_mse_loss(main_p, "out", "y", "loss"), 0);
    vq_optimizer adam = {.kind = VQ_OPT_ADAM, .learning_rate = 0.1};
    cr_assert_eq(vq_optimizer_minimize(main_p, startup, "loss", &adam), 2, "%s", vq_errmsg());
    vq_engine *e;
    vq_exec *ex;
    vq_scope *s;
    cr_assert_eq(vq_engine_new(&e, NULL), 0);
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    cr_assert_eq(vq_scope_new(&s), 0);
    cr_assert_eq(vq_exec_run(ex, startup, s, NULL, 0, NULL, 0), 0, "%s", vq_errmsg());
    const char *state[] = {"out.w", "out.b", "out.w@MOMENT1", "out.w@MOMENT2", "out.w@STEP",
                           "out.b@MOMENT1", "out.b@MOMENT2", "out.b@STEP"};
    for (int i = 0; i < 8; i++)
        cr_assert_not_null(vq_scope_get(s, state[i]), "%s missing", state[i]);
    uint64_t rng = 5;
    vq_tensor *x = oc_rand(&rng, VQ_F32, 2, xs, -1, 1), *y = oc_rand(&rng, VQ_F32, 2, ys, -1, 1);
    vq_feed feeds[2] = {{"x", x}, {"y", y}};
    double first = 0, last = 0;
    for (int i = 0; i < 50; i++) {
        vq_fetch f = {"loss", NULL};
        cr_assert_eq(vq_exec_run(ex, main_p, s, feeds, 2, &f, 1), 0, "%s", vq_errmsg());
        last = oc_get(f.tensor, 0);
        if (i == 0)
            first = last;
        vq_tensor_release(f.tensor);
    }
    cr_assert_lt(last, first / 4, "loss %g -> %g", first, last);
    vq_tensor *step = vq_scope_get(s, "out.w@STEP");
    cr_assert_eq(vq_tensor_wait(step), 0);
    cr_assert_eq(((int64_t *)vq_tensor_data(step))[0], 50);
    vq_tensor_release(x);
    vq_tensor_release(y);
    vq_exec_free(ex);
    vq_scope_free(s);
    vq_engine_free(e);
    vq_program_free(startup);
    vq_program_free(main_p);
}

/* A parameter list trains those and freezes the rest; bad controls are
 * errors (their values against PyTorch: tests/reference). */
Test(train, a_parameter_list_trains_a_subset_and_bad_controls_are_errors)
{
    int64_t xs[2] = {4, 3}, ys[2] = {4, 1};
    for (int mode = 0; mode < 5; mode++) {
        vq_program *startup, *main_p;
        cr_assert_eq(vq_program_new(&startup), 0);
        cr_assert_eq(vq_program_new(&main_p), 0);
        cr_assert_eq(vq_program_add_var(main_p, 0, "x", VQ_F32, 2, xs, false), 0);
        cr_assert_eq(vq_program_add_var(main_p, 0, "y", VQ_F32, 2, ys, false), 0);
        cr_assert_eq(vq_layer_linear(main_p, startup, "x", "out", 1, 5), 0);
        cr_assert_eq(vq_layer_mse_loss(main_p, "out", "y", "loss"), 0);
        const char *only[] = {"out.w"}, *bogus[] = {"x"};
        vq_optimizer o = {.kind = VQ_OPT_SGD, .learning_rate = 0.1, .parameters = only,
                          .nparameters = 1, .clip_norm = 1, .weight_decay = 0.01};
        if (mode == 1) {
            o.parameters = bogus;
            cr_assert_eq(vq_optimizer_minimize(main_p, startup, "loss", &o), VQ_EINVAL);
            cr_assert(strstr(vq_errmsg(), "parameter x is not a float persistable var"), "%s",
                      vq_errmsg());
        } else if (mode == 2) {
            o.decoupled = true;
            cr_assert_eq(vq_optimizer_minimize(main_p, startup, "loss", &o), VQ_EINVAL);
            cr_assert(strstr(vq_errmsg(), "AdamW"), "%s", vq_errmsg());
        } else if (mode == 3) {
            o.clip_value = -1;
            cr_assert_eq(vq_optimizer_minimize(main_p, startup, "loss", &o), VQ_EINVAL);
        } else if (mode == 4) {
            o.nparameters = 2;
            o.parameters = NULL;
            cr_assert_eq(vq_optimizer_minimize(main_p, startup, "loss", &o), VQ_EINVAL);
        } else {
            cr_assert_eq(vq_optimizer_minimize(main_p, startup, "loss", &o), 1, "%s",
                         vq_errmsg());
            vq_engine *e;
            vq_exec *ex;
            vq_scope *s;
            cr_assert_eq(vq_engine_new(&e, NULL), 0);
            cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
            cr_assert_eq(vq_scope_new(&s), 0);
            cr_assert_eq(vq_exec_run(ex, startup, s, NULL, 0, NULL, 0), 0, "%s", vq_errmsg());
            vq_tensor *w0, *b0;
            cr_assert_eq(vq_tensor_from(&w0, VQ_F32, 2, (int64_t[]){3, 1},
                                        vq_tensor_data(vq_scope_get(s, "out.w"))), 0);
            cr_assert_eq(vq_tensor_from(&b0, VQ_F32, 1, (int64_t[]){1},
                                        vq_tensor_data(vq_scope_get(s, "out.b"))), 0);
            uint64_t rng = 9;
            vq_tensor *x = oc_rand(&rng, VQ_F32, 2, xs, -1, 1),
                      *y = oc_rand(&rng, VQ_F32, 2, ys, 2, 3);
            vq_feed feeds[2] = {{"x", x}, {"y", y}};
            for (int i = 0; i < 5; i++)
                cr_assert_eq(vq_exec_run(ex, main_p, s, feeds, 2, NULL, 0), 0, "%s",
                             vq_errmsg());
            vq_tensor *w = vq_scope_get(s, "out.w"), *b = vq_scope_get(s, "out.b");
            cr_assert_eq(vq_tensor_wait(w), 0);
            cr_assert_neq(oc_get(w, 0), oc_get(w0, 0), "out.w trains");
            cr_assert_eq(oc_get(b, 0), oc_get(b0, 0), "out.b is frozen");
            cr_assert_null(vq_scope_get(s, "out.b@GRAD"));
            vq_tensor *all[] = {w0, b0, x, y};
            for (int i = 0; i < 4; i++)
                vq_tensor_release(all[i]);
            vq_exec_free(ex);
            vq_scope_free(s);
            vq_engine_free(e);
        }
        vq_program_free(startup);
        vq_program_free(main_p);
    }
}

/* stop_gradient: a computed var is a constant for autodiff (no gradient
 * reaches what it was computed from), a parameter is frozen; the flag is
 * saved and dumped. */
Test(train, stop_gradient_vars_get_no_gradient_and_pass_none_on)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t s[1] = {3};
    const char *params[] = {"w1", "w2", "w3"};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(vq_program_add_var(p, 0, params[i], VQ_F64, 1, s, true), 0);
    const char *vars[] = {"x", "h", "g", "hg"};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(vq_program_add_var(p, 0, vars[i], VQ_F64, 1, s, false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "loss", VQ_F64, 0, NULL, false), 0);
    /* h = x * w1 (detached), g = h * w2 + w3 ... loss = sum(g) */
    cr_assert_geq(vq_program_add_op(p, 0, "mul", (const char *[]){"x", "w1"}, 2,
                                    (const char *[]){"h"}, 1, NULL, 0), 0);
    cr_assert_geq(vq_program_add_op(p, 0, "mul", (const char *[]){"h", "w2"}, 2,
                                    (const char *[]){"g"}, 1, NULL, 0), 0);
    cr_assert_geq(vq_program_add_op(p, 0, "add", (const char *[]){"g", "w3"}, 2,
                                    (const char *[]){"hg"}, 1, NULL, 0), 0);
    cr_assert_geq(vq_program_add_op(p, 0, "sum", (const char *[]){"hg"}, 1,
                                    (const char *[]){"loss"}, 1, NULL, 0), 0);
    cr_assert_eq(vq_program_set_stop_gradient(p, "h", true), 0);
    cr_assert_eq(vq_program_set_stop_gradient(p, "w3", true), 0);
    cr_assert_eq(vq_program_set_stop_gradient(p, "nope", true), VQ_EINVAL);
    /* saved and loaded with the flags */
    char path[] = "/tmp/varq_stopgrad_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(vq_program_save(p, path), 0);
    vq_program *q;
    cr_assert_eq(vq_program_load(&q, path), 0, "%s", vq_errmsg());
    unlink(path);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_eq(vq_program_dump(q, f), 0);
    fclose(f);
    cr_assert(strstr(text, "var h : f64[3] stop_gradient"), "%s", text);
    cr_assert(strstr(text, "var w3 : f64[3] persistable stop_gradient"), "%s", text);
    free(text);
    cr_assert_eq(vq_append_backward(q, "loss", NULL, 0), 1, "only w2: %s", vq_errmsg());
    f = open_memstream(&text, &len);
    cr_assert_eq(vq_program_dump(q, f), 0);
    fclose(f);
    cr_assert(strstr(text, "var w2@GRAD "), "%s", text);
    cr_assert(!strstr(text, "var w1@GRAD ") && !strstr(text, "var w3@GRAD ") &&
                  !strstr(text, "var x@GRAD "),
              "%s", text);
    free(text);
    vq_program_free(q);
    vq_program_free(p);
}

/* ---- random ops in programs: the generator state (vq_layer_rng_state)
 * and dropout ---- */

/* main: y = dropout(x, p 0.5) and u = uniform_random [10], both on the
 * state "rng" (seed 1234) that startup sets. */
static void rng_programs(vq_program **main_p, vq_program **startup)
{
    cr_assert_eq(vq_program_new(startup), 0);
    cr_assert_eq(vq_program_new(main_p), 0);
    int64_t xs[2] = {4, 50}, us[1] = {10};
    cr_assert_eq(vq_program_add_var(*main_p, 0, "x", VQ_F64, 2, xs, false), 0);
    cr_assert_eq(vq_layer_rng_state(*main_p, *startup, "rng", 1234), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_layer_dropout(*main_p, "x", "y", 0.5, "rng"), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_program_add_var(*main_p, 0, "u", VQ_F64, 1, us, false), 0);
    vq_attr a[2] = {VQ_ATTR_IS("shape", us, 1), VQ_ATTR_S("dtype", "f64")};
    cr_assert_geq(vq_program_add_op(*main_p, 0, "uniform_random", NAMES("rng"), 1,
                                    NAMES("u", "rng"), 2, a, 2),
                  0, "%s", vq_errmsg());
}

/* One run of main: y, u and the state after it (new tensors). */
static void rng_run(vq_exec *ex, vq_program *p, vq_scope *s, vq_tensor *x, vq_tensor *got[3])
{
    vq_feed feed = {"x", x};
    vq_fetch f[3] = {{"y", NULL}, {"u", NULL}, {"rng", NULL}};
    cr_assert_eq(vq_exec_run(ex, p, s, &feed, 1, f, 3), 0, "%s", vq_errmsg());
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(vq_tensor_wait(f[i].tensor), 0, "%s", vq_errmsg());
        got[i] = f[i].tensor;
    }
}

static bool same_tensor(vq_tensor *a, vq_tensor *b)
{
    return vq_tensor_nbytes(a) == vq_tensor_nbytes(b) &&
           !memcmp(vq_tensor_data(a), vq_tensor_data(b), vq_tensor_nbytes(a));
}

static void release3(vq_tensor *t[3])
{
    for (int i = 0; i < 3; i++)
        vq_tensor_release(t[i]);
}

/* Each run draws new numbers; running startup again replays the first run
 * bit for bit; and all of it is the same with 1, 2 or 8 workers or the
 * naive engine (the ops on "rng" are ordered by that var). */
Test(train, random_ops_on_a_state_draw_anew_each_run_and_replay_from_startup, .timeout = 120)
{
    vq_program *main_p, *startup;
    rng_programs(&main_p, &startup);
    int64_t xs[2] = {4, 50};
    uint64_t rng = 17;
    vq_tensor *x = oc_rand(&rng, VQ_F64, 2, xs, 0.5, 1.5); /* no zeros: a drop shows */
    struct {
        int kind, workers;
    } engines[] = {
        {VQ_ENGINE_THREADED, 1},
        {VQ_ENGINE_THREADED, 2},
        {VQ_ENGINE_THREADED, 8},
        {VQ_ENGINE_NAIVE, 1},
    };
    vq_tensor *ref[2][3] = {{NULL}};
    for (size_t k = 0; k < sizeof engines / sizeof engines[0]; k++) {
        vq_engine *e;
        vq_engine_opts o = {.kind = engines[k].kind, .cpu_workers = engines[k].workers};
        cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
        vq_exec *ex;
        vq_scope *s;
        cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
        cr_assert_eq(vq_scope_new(&s), 0);
        cr_assert_eq(vq_exec_run(ex, startup, s, NULL, 0, NULL, 0), 0, "%s", vq_errmsg());
        vq_tensor *r1[3], *r2[3], *again[3];
        rng_run(ex, main_p, s, x, r1);
        rng_run(ex, main_p, s, x, r2);
        /* the state after each run: 200 counters for y, 10 for u */
        const int64_t *st1 = vq_tensor_data(r1[2]), *st2 = vq_tensor_data(r2[2]);
        cr_assert(st1[0] == 1234 && st1[1] == 210, "engine %zu: state (%lld, %lld)", k,
                  (long long)st1[0], (long long)st1[1]);
        cr_assert(st2[0] == 1234 && st2[1] == 420, "engine %zu: state (%lld, %lld)", k,
                  (long long)st2[0], (long long)st2[1]);
        /* the second run drops other elements and draws other numbers */
        int same_y = 0, same_u = 0;
        for (int64_t i = 0; i < 200; i++)
            same_y += (oc_get(r1[0], i) == 0) == (oc_get(r2[0], i) == 0);
        for (int64_t i = 0; i < 10; i++)
            same_u += oc_get(r1[1], i) == oc_get(r2[1], i);
        cr_assert_lt(same_y, 150, "engine %zu: %d of 200 drops agree", k, same_y);
        cr_assert_eq(same_u, 0, "engine %zu: %d of 10 uniforms repeat", k, same_u);
        /* startup again: the first run exactly */
        cr_assert_eq(vq_exec_run(ex, startup, s, NULL, 0, NULL, 0), 0, "%s", vq_errmsg());
        rng_run(ex, main_p, s, x, again);
        for (int i = 0; i < 3; i++)
            cr_assert(same_tensor(again[i], r1[i]), "engine %zu: replay differs in fetch %d", k,
                      i);
        release3(again);
        if (k == 0) {
            memcpy(ref[0], r1, sizeof r1);
            memcpy(ref[1], r2, sizeof r2);
        } else {
            for (int i = 0; i < 3; i++) {
                cr_assert(same_tensor(r1[i], ref[0][i]), "engine %zu: run 1 fetch %d differs", k,
                          i);
                cr_assert(same_tensor(r2[i], ref[1][i]), "engine %zu: run 2 fetch %d differs", k,
                          i);
            }
            release3(r1);
            release3(r2);
        }
        vq_exec_free(ex);
        vq_scope_free(s);
        vq_engine_free(e);
    }
    /* the first run's y is dropout from state (1234, 0), as an op call */
    vq_tensor *st = NULL, *out[3] = {NULL, NULL, NULL};
    int64_t two = 2;
    cr_assert_eq(vq_tensor_from(&st, VQ_I64, 1, &two, (const int64_t[]){1234, 0}), 0);
    out[2] = st;
    vq_attr p = VQ_ATTR_F("p", 0.5);
    cr_assert_eq(vq_op_run(NULL, "dropout", (vq_tensor *[]){x, st}, 2, out, 3, &p, 1), 0, "%s",
                 vq_errmsg());
    cr_assert(same_tensor(out[0], ref[0][0]), "the program's dropout is not the op's");
    vq_tensor_release(out[0]);
    vq_tensor_release(out[1]);
    vq_tensor_release(st);
    release3(ref[0]);
    release3(ref[1]);
    vq_tensor_release(x);
    vq_program_free(main_p);
    vq_program_free(startup);
}

static char *dump_text(const vq_program *p)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_eq(vq_program_dump(p, f), 0, "%s", vq_errmsg());
    fclose(f);
    return text;
}

/* The optional State / StateOut slots survive encode and decode, and the
 * dump names them where given (and not where left out). */
Test(train, random_programs_round_trip_with_their_optional_slots)
{
    vq_program *main_p, *startup;
    rng_programs(&main_p, &startup);
    cr_assert_eq(vq_layer_dropout(main_p, "y", "z", 0.25, NULL), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_layer_dropout(main_p, "z", "w", 1.0, NULL), VQ_EINVAL);
    cr_assert_eq(vq_layer_dropout(main_p, "z", "w", 0.1, "nope"), VQ_EINVAL);
    cr_assert_eq(vq_layer_rng_state(main_p, startup, "rng", 1), VQ_EINVAL);
    for (int k = 0; k < 2; k++) {
        vq_program *p = k ? startup : main_p, *q;
        void *buf;
        size_t len;
        cr_assert_eq(vq_program_encode(p, &buf, &len), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_program_decode(&q, buf, len), 0, "%s", vq_errmsg());
        free(buf);
        char *a = dump_text(p), *b = dump_text(q);
        cr_assert_str_eq(a, b);
        cr_assert_eq(vq_program_hash(p), vq_program_hash(q));
        if (!k) {
            cr_assert(strstr(a, "dropout(X=x, State=rng) -> (Out=y, Mask=y.mask, StateOut=rng) "
                                "{p=0.5}"),
                      "%s", a);
            cr_assert(strstr(a, "uniform_random(State=rng) -> (Out=u, StateOut=rng)"), "%s", a);
            cr_assert(strstr(a, "dropout(X=y) -> (Out=z, Mask=z.mask) {p=0.25}"), "%s", a);
        } else {
            cr_assert(strstr(a, "var rng : i64[2] persistable"), "%s", a);
            cr_assert(strstr(a, "fill_constant() -> (Out=rng.seed) {shape=[1], dtype=\"i64\", "
                                "value=1234}"),
                      "%s", a);
            cr_assert(strstr(a, "concat(X=[rng.seed, rng.counter]) -> (Out=rng) {axis=0}"), "%s",
                      a);
        }
        free(a);
        free(b);
        vq_program_free(q);
    }
    vq_program_free(main_p);
    vq_program_free(startup);
}

/* x [64, 8] -> linear 32 -> relu -> dropout 0.2 -> linear 1, mse against
 * a smooth target, Adam, 300 steps: the loss falls to a third, and the
 * dropout gradient (dy * mask) is what trains the first layer. With state
 * "rng", every step drops other units and the state advances by 64 * 32
 * a step; without, the executor's default generator drops other units
 * every step too, and the state stays as startup set it. */
static void train_with_dropout(bool with_state)
{
    vq_program *startup, *main_p;
    cr_assert_eq(vq_program_new(&startup), 0);
    cr_assert_eq(vq_program_new(&main_p), 0);
    int64_t xs[2] = {64, 8}, ys[2] = {64, 1};
    cr_assert_eq(vq_program_add_var(main_p, 0, "x", VQ_F32, 2, xs, false), 0);
    cr_assert_eq(vq_program_add_var(main_p, 0, "t", VQ_F32, 2, ys, false), 0);
    cr_assert_eq(vq_layer_rng_state(main_p, startup, "rng", 99), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_layer_linear(main_p, startup, "x", "h", 32, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_layer_activation(main_p, "relu", "h", "r"), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_layer_dropout(main_p, "r", "d", 0.2, with_state ? "rng" : NULL), 0, "%s",
                 vq_errmsg());
    cr_assert_eq(vq_layer_linear(main_p, startup, "d", "o", 1, 3), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_layer_mse_loss(main_p, "o", "t", "loss"), 0, "%s", vq_errmsg());
    vq_optimizer adam = {.kind = VQ_OPT_ADAM, .learning_rate = 0.01};
    int np = vq_optimizer_minimize(main_p, startup, "loss", &adam);
    cr_assert_eq(np, 4, "%s", vq_errmsg());
    vq_engine *e;
    vq_exec *ex;
    vq_scope *s;
    cr_assert_eq(vq_engine_new(&e, NULL), 0);
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    cr_assert_eq(vq_scope_new(&s), 0);
    cr_assert_eq(vq_exec_run(ex, startup, s, NULL, 0, NULL, 0), 0, "%s", vq_errmsg());
    uint64_t rng = 23;
    vq_tensor *x = oc_rand(&rng, VQ_F32, 2, xs, -1, 1), *t = NULL;
    cr_assert_eq(vq_tensor_new(&t, VQ_F32, 2, ys), 0);
    for (int64_t i = 0; i < 64; i++) {
        double v = 0;
        for (int64_t j = 0; j < 8; j++)
            v += sin((double)(j + 1) * oc_get(x, i * 8 + j));
        oc_set(t, i, v / 4);
    }
    vq_feed feeds[2] = {{"x", x}, {"t", t}};
    double first = 0, tail = 0;
    for (int step = 0; step < 300; step++) {
        vq_fetch f = {"loss", NULL};
        cr_assert_eq(vq_exec_run(ex, main_p, s, feeds, 2, &f, 1), 0, "%s", vq_errmsg());
        double l = oc_get(f.tensor, 0);
        vq_tensor_release(f.tensor);
        if (step == 0)
            first = l;
        if (step >= 280)
            tail += l / 20;
    }
    cr_assert_lt(tail, first / 3, "loss %g -> %g (mean of the last 20 steps)", first, tail);
    vq_tensor *st = vq_scope_get(s, "rng");
    cr_assert_eq(vq_tensor_wait(st), 0);
    cr_assert_eq(((int64_t *)vq_tensor_data(st))[1], with_state ? 300 * 64 * 32 : 0);
    vq_tensor_release(x);
    vq_tensor_release(t);
    vq_exec_free(ex);
    vq_scope_free(s);
    vq_engine_free(e);
    vq_program_free(startup);
    vq_program_free(main_p);
}

/* ---- learning rates as vars, and schedules ---- */

/* x [4,3] -> Linear "out" -> MSE against y, f64, trained by kind; the
 * rate is the attribute (lr_dt < 0) or the var "lr" of dtype lr_dt (f64:
 * shape [], f32: [1]). */
static void lr_programs(vq_optimizer o, int lr_dt, vq_program **main_p, vq_program **startup)
{
    int64_t xs[2] = {4, 3}, ys[2] = {4, 1};
    cr_assert_eq(vq_program_new(startup), 0);
    cr_assert_eq(vq_program_new(main_p), 0);
    cr_assert_eq(vq_program_add_var(*main_p, 0, "x", VQ_F64, 2, xs, false), 0);
    cr_assert_eq(vq_program_add_var(*main_p, 0, "y", VQ_F64, 2, ys, false), 0);
    cr_assert_eq(vq_layer_linear(*main_p, *startup, "x", "out", 1, 5), 0);
    cr_assert_eq(vq_layer_mse_loss(*main_p, "out", "y", "loss"), 0);
    if (lr_dt >= 0) {
        cr_assert_eq(vq_program_add_var(*main_p, 0, "lr", (vq_dtype)lr_dt, lr_dt == VQ_F32,
                                        (int64_t[]){1}, false),
                     0);
        o.learning_rate = -1; /* ignored */
        o.learning_rate_var = "lr";
    }
    cr_assert_eq(vq_optimizer_minimize(*main_p, *startup, "loss", &o), 2, "%s", vq_errmsg());
}

static void same_bits(vq_tensor *a, vq_tensor *b, const char *what)
{
    cr_assert_eq(vq_tensor_wait(a), 0);
    cr_assert_eq(vq_tensor_wait(b), 0);
    cr_assert_eq(vq_tensor_nbytes(a), vq_tensor_nbytes(b));
    cr_assert(!memcmp(vq_tensor_data(a), vq_tensor_data(b), vq_tensor_nbytes(a)), "%s", what);
}

/* Fed 0.125 (exact in f32 and f64) each run, the var trains bit for bit
 * as the attribute 0.125 does, for every kind and AdamW (whose decay then
 * comes from the var too), with an f32 [1] var for f64 parameters (a cast)
 * for SGD and AdamW;
 * fed 0 the weights stay, fed 0.05 they move: the rate is read per run. */
Test(train, a_fed_learning_rate_var_trains_as_the_attribute_and_is_read_each_run)
{
    vq_optimizer opts[] = {
        {.kind = VQ_OPT_SGD, .learning_rate = 0.125},
        {.kind = VQ_OPT_MOMENTUM, .learning_rate = 0.125, .nesterov = true},
        {.kind = VQ_OPT_ADAM, .learning_rate = 0.125},
        {.kind = VQ_OPT_ADAM, .learning_rate = 0.125, .weight_decay = 0.25, .decoupled = true},
    };
    int64_t xs[2] = {4, 3}, ys[2] = {4, 1};
    uint64_t rng = 21;
    vq_tensor *x = oc_rand(&rng, VQ_F64, 2, xs, -1, 1), *y = oc_rand(&rng, VQ_F64, 2, ys, -1, 1);
    for (int k = 0; k < 4; k++) {
        vq_program *pm[2], *ps[2];
        lr_programs(opts[k], -1, &pm[0], &ps[0]);
        bool f32 = k == 0 || k == 3; /* the rate as an f32 [1] var: a cast */
        lr_programs(opts[k], f32 ? VQ_F32 : VQ_F64, &pm[1], &ps[1]);
        vq_engine *e;
        vq_exec *ex;
        vq_scope *s[2];
        cr_assert_eq(vq_engine_new(&e, NULL), 0);
        cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
        for (int i = 0; i < 2; i++) {
            cr_assert_eq(vq_scope_new(&s[i]), 0);
            cr_assert_eq(vq_exec_run(ex, ps[i], s[i], NULL, 0, NULL, 0), 0, "%s", vq_errmsg());
        }
        double rates[] = {0.125, 0.125, 0.125, 0, 0.05};
        for (int r = 0; r < 5; r++) {
            vq_tensor *lr = oc_from(f32 ? VQ_F32 : VQ_F64, f32, (int64_t[]){1}, &rates[r]);
            vq_feed f[3] = {{"x", x}, {"y", y}, {"lr", lr}};
            vq_tensor *before = NULL;
            cr_assert_eq(vq_tensor_wait(vq_scope_get(s[1], "out.w")), 0);
            cr_assert_eq(vq_tensor_from(&before, VQ_F64, 2, (int64_t[]){3, 1},
                                        vq_tensor_data(vq_scope_get(s[1], "out.w"))),
                         0);
            if (r < 3)
                cr_assert_eq(vq_exec_run(ex, pm[0], s[0], f, 2, NULL, 0), 0, "%s", vq_errmsg());
            cr_assert_eq(vq_exec_run(ex, pm[1], s[1], f, 3, NULL, 0), 0, "kind %d: %s", k,
                         vq_errmsg());
            vq_tensor *w = vq_scope_get(s[1], "out.w");
            if (r < 3) {
                same_bits(vq_scope_get(s[0], "out.w"), w, "out.w");
                same_bits(vq_scope_get(s[0], "out.b"), vq_scope_get(s[1], "out.b"), "out.b");
            } else {
                cr_assert_eq(vq_tensor_wait(w), 0);
                bool same = !memcmp(vq_tensor_data(before), vq_tensor_data(w), 3 * 8);
                cr_assert(r == 3 ? same : !same, "kind %d, rate %g: out.w %s", k, rates[r],
                          same ? "stayed" : "moved");
            }
            vq_tensor_release(before);
            vq_tensor_release(lr);
        }
        for (int i = 0; i < 2; i++) {
            vq_scope_free(s[i]);
            vq_program_free(pm[i]);
            vq_program_free(ps[i]);
        }
        vq_exec_free(ex);
        vq_engine_free(e);
    }
    vq_tensor_release(x);
    vq_tensor_release(y);
}

/* PyTorch's closed forms (lr_scheduler.py's _get_closed_form_lr) for the
 * schedules of schedule_of, at step t. */
static double closed_form(vq_lr_schedule_kind kind, int64_t t)
{
    const double pi = 3.141592653589793, base = 0.2;
    double lin = base * (0.1 + (1.0 - 0.1) * (double)(t < 6 ? t : 6) / 6);
    switch (kind) {
    case VQ_LR_STEP: return base * pow(0.3, (double)(t / 4));
    case VQ_LR_COSINE: return 0.005 + (base - 0.005) * (1 + cos(pi * (double)t / 20)) / 2;
    case VQ_LR_LINEAR: return lin;
    default: return t < 6 ? lin : 0.005 + (base - 0.005) * (1 + cos(pi * (double)(t - 6) / 20)) / 2;
    }
}

static vq_lr_schedule schedule_of(vq_lr_schedule_kind kind, vq_dtype dt)
{
    return (vq_lr_schedule){.kind = kind, .base_lr = 0.2, .dtype = dt, .step_size = 4,
                            .gamma = 0.3, .t_max = 20, .eta_min = 0.005, .start_factor = 0.1,
                            .end_factor = 1.0, .total_iters = 6};
}

/* 30 runs of a program holding only the schedule, on the CPU and on GPU 0
 * (the emulated backend unless VARQ_GPU_BACKEND says otherwise): the rate
 * fetched at run t is the closed form's at t (past t_max for the cosine);
 * the counter is saved in the scope, and the startup program resets it. */
Test(train, schedules_give_pytorchs_closed_forms_run_after_run)
{
    setenv("VARQ_GPU_BACKEND", "emulated", 0);
    for (int dev = 0; dev < 2; dev++)
        for (int kind = VQ_LR_STEP; kind <= VQ_LR_WARMUP_COSINE; kind++)
            for (int d = 0; d < 2; d++) {
                vq_dtype dt = d ? VQ_F64 : VQ_F32;
                vq_program *main_p, *startup;
                cr_assert_eq(vq_program_new(&main_p), 0);
                cr_assert_eq(vq_program_new(&startup), 0);
                vq_lr_schedule sc = schedule_of((vq_lr_schedule_kind)kind, dt);
                cr_assert_eq(vq_lr_schedule_build(main_p, startup, "lr", &sc), 0, "%s",
                             vq_errmsg());
                vq_engine *e;
                vq_exec *ex;
                vq_scope *s;
                vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2,
                                     .gpu_streams = 2};
                vq_exec_opts xo = {.device = {dev ? VQ_DEV_GPU : VQ_DEV_CPU, 0},
                                   .flags = VQ_EXEC_FETCH_HOST};
                cr_assert_eq(vq_engine_new(&e, &eo), 0, "%s", vq_errmsg());
                cr_assert_eq(vq_exec_new(&ex, e, &xo), 0, "%s", vq_errmsg());
                cr_assert_eq(vq_scope_new(&s), 0);
                for (int round = 0; round < 2; round++) {
                    cr_assert_eq(vq_exec_run(ex, startup, s, NULL, 0, NULL, 0), 0, "%s",
                                 vq_errmsg());
                    for (int64_t t = 0; t < (round ? 3 : 30); t++) {
                        vq_fetch f = {"lr", NULL};
                        cr_assert_eq(vq_exec_run(ex, main_p, s, NULL, 0, &f, 1), 0, "%s",
                                     vq_errmsg());
                        cr_assert_eq(vq_tensor_wait(f.tensor), 0, "%s", vq_errmsg());
                        cr_assert_eq(vq_tensor_dtype(f.tensor), dt);
                        double got = oc_get(f.tensor, 0),
                               want = closed_form((vq_lr_schedule_kind)kind, t);
                        cr_assert(dt == VQ_F32 ? (float)got == (float)want
                                               : fabs(got - want) <= 1e-15 * want,
                                  "device %d kind %d %s t=%lld: %.17g, want %.17g", dev, kind,
                                  vq_dtype_name(dt), (long long)t, got, want);
                        vq_tensor_release(f.tensor);
                    }
                }
                vq_fetch c = {"lr@STEP", NULL};
                cr_assert_eq(vq_exec_run(ex, startup, s, NULL, 0, NULL, 0), 0);
                cr_assert_eq(vq_exec_run(ex, main_p, s, NULL, 0, &c, 1), 0, "%s", vq_errmsg());
                cr_assert_eq(vq_tensor_wait(c.tensor), 0);
                cr_assert_eq(*(int64_t *)vq_tensor_data(c.tensor), 1);
                vq_tensor_release(c.tensor);
                vq_scope_free(s);
                vq_exec_free(ex);
                vq_engine_free(e);
                vq_program_free(main_p);
                vq_program_free(startup);
            }
}

Test(train, bad_schedules_and_learning_rate_vars_are_refused)
{
    vq_program *main_p, *startup;
    cr_assert_eq(vq_program_new(&main_p), 0);
    cr_assert_eq(vq_program_new(&startup), 0);
    struct {
        vq_lr_schedule s;
        const char *msg;
    } bad[] = {
        {{.kind = VQ_LR_COSINE, .base_lr = 0.1, .t_max = 0}, "lr_schedule: attribute t_max: is 0"},
        {{.kind = VQ_LR_STEP, .base_lr = 0.1, .step_size = 2, .gamma = -1},
         "lr_schedule: attribute gamma: is -1"},
        {{.kind = VQ_LR_LINEAR, .base_lr = 0.1, .total_iters = 5},
         "lr_schedule: attribute start_factor: is 0"},
        {{.kind = VQ_LR_WARMUP_COSINE, .base_lr = 0.1, .start_factor = 0.5, .end_factor = 2,
          .total_iters = 5, .t_max = 3},
         "lr_schedule: attribute end_factor: is 2"},
        {{.kind = VQ_LR_STEP, .base_lr = -0.1, .step_size = 1}, "attribute base_lr: is -0.1"},
        {{.kind = 7, .base_lr = 0.1}, "vq_lr_schedule_build: kind 7"},
        {{.kind = VQ_LR_COSINE, .base_lr = 0.1, .t_max = 5, .dtype = VQ_I32},
         "vq_lr_schedule_build: dtype"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(vq_lr_schedule_build(main_p, startup, "lr", &bad[i].s), VQ_EINVAL);
        cr_assert(strstr(vq_errmsg(), bad[i].msg), "%s", vq_errmsg());
        /* refused before anything is declared */
        cr_assert_eq(vq_program_nvars(main_p, 0), 0);
        cr_assert_eq(vq_program_nops(startup, 0), 0);
    }
    vq_lr_schedule ok = {.kind = VQ_LR_COSINE, .base_lr = 0.1, .t_max = 5};
    cr_assert_eq(vq_lr_schedule_build(NULL, startup, "lr", &ok), VQ_EINVAL);
    cr_assert_eq(vq_lr_schedule_build(main_p, startup, "lr", &ok), 0, "%s", vq_errmsg());
    /* the op encodes, decodes and dumps like any other */
    void *buf;
    size_t len;
    vq_program *q;
    cr_assert_eq(vq_program_encode(main_p, &buf, &len), 0);
    cr_assert_eq(vq_program_decode(&q, buf, len), 0, "%s", vq_errmsg());
    free(buf);
    cr_assert_eq(vq_program_hash(q), vq_program_hash(main_p));
    char *text = NULL;
    size_t tlen = 0;
    FILE *f = open_memstream(&text, &tlen);
    cr_assert_eq(vq_program_dump(q, f), 0);
    fclose(f);
    cr_assert(strstr(text, "lr_schedule(Step=lr@STEP) -> (LearningRate=lr, StepOut=lr@STEP) "
                           "{kind=\"cosine\", base_lr=0.1, dtype=\"f32\", t_max=5, eta_min=0}"),
              "%s", text);
    free(text);
    vq_program_free(q);
    cr_assert_eq(vq_lr_schedule_build(main_p, startup, "lr", &ok), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "main declares lr already"), "%s", vq_errmsg());
    vq_program_free(main_p);
    vq_program_free(startup);

    /* learning_rate_var: declared, float, one element */
    const char *names[] = {"nope", "step", "pair"};
    for (int i = 0; i < 3; i++) {
        int64_t xs[2] = {4, 3}, ys[2] = {4, 1}, two[1] = {2};
        cr_assert_eq(vq_program_new(&main_p), 0);
        cr_assert_eq(vq_program_new(&startup), 0);
        cr_assert_eq(vq_program_add_var(main_p, 0, "x", VQ_F32, 2, xs, false), 0);
        cr_assert_eq(vq_program_add_var(main_p, 0, "y", VQ_F32, 2, ys, false), 0);
        cr_assert_eq(vq_program_add_var(main_p, 0, "step", VQ_I64, 0, NULL, false), 0);
        cr_assert_eq(vq_program_add_var(main_p, 0, "pair", VQ_F32, 1, two, false), 0);
        cr_assert_eq(vq_layer_linear(main_p, startup, "x", "out", 1, 5), 0);
        cr_assert_eq(vq_layer_mse_loss(main_p, "out", "y", "loss"), 0);
        vq_optimizer o = {.kind = VQ_OPT_SGD, .learning_rate_var = names[i]};
        cr_assert_eq(vq_optimizer_minimize(main_p, startup, "loss", &o), VQ_EINVAL);
        cr_assert(strstr(vq_errmsg(), "learning_rate_var"), "%s", vq_errmsg());
        vq_program_free(main_p);
        vq_program_free(startup);
    }
}

Test(train, a_network_with_dropout_trains, .timeout = 120)
{
    train_with_dropout(false);
}

Test(train, a_network_with_dropout_on_a_generator_state_trains, .timeout = 120)
{
    train_with_dropout(true);
}

/* A while whose body names two carried values but whose op has one X:
 * what vq_exec_prepare refuses, and what autodiff must refuse too rather
 * than read a second X past the op's inputs (found by fuzz_program). */
Test(train, a_malformed_while_is_refused_not_read_past_its_inputs)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t s3[1] = {3};
    cr_assert_eq(vq_program_add_block(p, 0), 1); /* the body */
    const char *vars[] = {"x", "w", "xo", "bx", "bt", "bx2"};
    for (int i = 0; i < 6; i++)
        cr_assert_eq(vq_program_add_var(p, i < 3 ? 0 : 1, vars[i], VQ_F64, 1, s3, i == 1), 0, "%s",
                     vq_errmsg());
    const char *scalars[] = {"n", "io", "loss"};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(vq_program_add_var(p, 0, scalars[i], VQ_F64, 0, NULL, false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "c0", VQ_BOOL, 0, NULL, false), 0);
    cr_assert_eq(vq_program_add_var(p, 1, "bi", VQ_F64, 0, NULL, false), 0);
    cr_assert_eq(vq_program_add_var(p, 1, "bi2", VQ_F64, 0, NULL, false), 0);
    cr_assert_eq(vq_program_add_var(p, 1, "bc", VQ_BOOL, 0, NULL, false), 0);
    cr_assert_geq(vq_program_add_op(p, 1, "mul", NAMES("bx", "w"), 2, NAMES("bt"), 1, NULL, 0), 0,
                  "%s", vq_errmsg());
    cr_assert_geq(vq_program_add_op(p, 1, "add", NAMES("bt", "bi"), 2, NAMES("bx2"), 1, NULL, 0), 0,
                  "%s", vq_errmsg());
    cr_assert_geq(vq_program_add_op(p, 1, "add", NAMES("bi", "bi"), 2, NAMES("bi2"), 1, NULL, 0), 0,
                  "%s", vq_errmsg());
    cr_assert_geq(vq_program_add_op(p, 1, "less", NAMES("bi2", "n"), 2, NAMES("bc"), 1, NULL, 0), 0,
                  "%s", vq_errmsg());
    cr_assert_geq(vq_program_add_op(p, 0, "less", NAMES("n", "n"), 2, NAMES("c0"), 1, NULL, 0), 0,
                  "%s", vq_errmsg());
    vq_attr a[4] = {VQ_ATTR_I("body_block", 1), VQ_ATTR_SS("body_inputs", NAMES("bx", "bi"), 2),
                    VQ_ATTR_SS("body_outputs", NAMES("bx2", "bi2"), 2),
                    VQ_ATTR_S("body_cond", "bc")};
    /* two outputs and two carried names, one X */
    cr_assert_geq(vq_program_add_op(p, 0, "while", NAMES("c0", "x"), 2, NAMES("xo", "io"), 2, a, 4),
                  0, "%s", vq_errmsg());
    cr_assert_geq(vq_program_add_op(p, 0, "sum", NAMES("xo"), 1, NAMES("loss"), 1, NULL, 0), 0,
                  "%s", vq_errmsg());
    cr_assert_eq(vq_append_backward(p, "loss", NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "(while) is malformed"), "%s", vq_errmsg());
    vq_program_free(p);
}
