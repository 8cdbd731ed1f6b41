/* Autodiff and optimizers: vq_append_backward on random programs built from
 * the registered ops, checked against central finite differences of the
 * loss (f64) computed by running the forward program; gradient sums for vars
 * read twice; no_grad; errors; optimizer state and startup programs. */
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
