/* sgd, momentum and adam: several steps, in place (outputs are the state
 * inputs) and out of place, f32 and f64, against the update rules written
 * out in double here; the learning rate as an input instead of the
 * attribute; shape, dtype and attribute errors. lr_schedule: 30 steps of
 * each kind against PyTorch's closed forms written out here, and its
 * errors. */
#include "opcheck.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

static uint64_t rng;

static void setup(void)
{
    rng = oc_seed("ops_optim");
}

TestSuite(ops_optim, .init = setup);

#define N 7
static const int64_t shape[2] = {N, 1};

static double tol(vq_dtype dt)
{
    return dt == VQ_F32 ? 1e-5 : 1e-13;
}

/* Runs one update. In place, the outputs are in[state[j]]; otherwise they
 * are created, and replace those inputs (the old ones are released). */
static void step(const char *type, vq_tensor **in, int nin, const int *state, int nout,
                 bool in_place, const vq_attr *at, int nat)
{
    vq_tensor *out[4];
    for (int j = 0; j < nout; j++)
        out[j] = in_place ? in[state[j]] : NULL;
    int rc = vq_op_run(NULL, type, in, nin, out, nout, at, nat);
    cr_assert_eq(rc, 0, "%s: %s", type, vq_errmsg());
    if (!in_place)
        for (int j = 0; j < nout; j++) {
            cr_assert_neq(out[j], in[state[j]]);
            vq_tensor_release(in[state[j]]);
            in[state[j]] = out[j];
        }
}

static void values(vq_tensor *t, double *v)
{
    for (int i = 0; i < N; i++)
        v[i] = oc_get(t, i);
}

Test(ops_optim, sgd_steps_subtract_the_scaled_gradient)
{
    for (int d = 0; d < 2; d++)
        for (int ip = 0; ip < 2; ip++) {
            vq_dtype dt = d ? VQ_F64 : VQ_F32;
            vq_tensor *in[2] = {oc_rand(&rng, dt, 2, shape, -1, 1), NULL};
            double p[N];
            values(in[0], p);
            vq_attr lr = VQ_ATTR_F("learning_rate", 0.1);
            for (int s = 0; s < 3; s++) {
                in[1] = oc_rand(&rng, dt, 2, shape, -1, 1);
                for (int i = 0; i < N; i++)
                    p[i] -= 0.1 * oc_get(in[1], i);
                step("sgd", in, 2, (int[]){0}, 1, ip, &lr, 1);
                vq_tensor_release(in[1]);
            }
            oc_assert_close(in[0], 2, shape, p, tol(dt), tol(dt));
            vq_tensor_release(in[0]);
        }
    int64_t one[1] = {1};
    vq_tensor *in[2] = {oc_from(VQ_F64, 1, one, (double[]){1}), oc_from(VQ_F64, 1, one, (double[]){2})};
    vq_attr lr = VQ_ATTR_F("learning_rate", 0.25);
    step("sgd", in, 2, (int[]){0}, 1, true, &lr, 1);
    cr_assert_eq(oc_get(in[0], 0), 0.5);
    vq_tensor_release(in[0]);
    vq_tensor_release(in[1]);
}

/* PyTorch's SGD with momentum (dampening 0): v = mu v + g, then
 * p -= lr v, or p -= lr (g + mu v) with Nesterov. */
Test(ops_optim, momentum_steps_follow_pytorch_with_and_without_nesterov)
{
    for (int d = 0; d < 2; d++)
        for (int ip = 0; ip < 2; ip++)
            for (int nes = 0; nes < 2; nes++) {
                vq_dtype dt = d ? VQ_F64 : VQ_F32;
                vq_tensor *in[3] = {oc_rand(&rng, dt, 2, shape, -1, 1), NULL, NULL};
                cr_assert_eq(vq_tensor_new(&in[2], dt, 2, shape), 0);
                double p[N], v[N] = {0};
                values(in[0], p);
                vq_attr at[3] = {VQ_ATTR_F("learning_rate", 0.05), VQ_ATTR_F("mu", 0.8),
                                 VQ_ATTR_B("use_nesterov", nes)};
                for (int s = 0; s < 4; s++) {
                    in[1] = oc_rand(&rng, dt, 2, shape, -1, 1);
                    for (int i = 0; i < N; i++) {
                        double g = oc_get(in[1], i);
                        v[i] = 0.8 * v[i] + g;
                        p[i] -= 0.05 * (nes ? g + 0.8 * v[i] : v[i]);
                    }
                    step("momentum", in, 3, (int[]){0, 2}, 2, ip, at, 3);
                    vq_tensor_release(in[1]);
                }
                oc_assert_close(in[0], 2, shape, p, tol(dt), tol(dt));
                oc_assert_close(in[2], 2, shape, v, tol(dt), tol(dt));
                vq_tensor_release(in[0]);
                vq_tensor_release(in[2]);
            }
}

Test(ops_optim, momentum_defaults_to_mu_0_9)
{
    int64_t one[1] = {1};
    vq_tensor *in[3] = {oc_from(VQ_F64, 1, one, (double[]){1}), oc_from(VQ_F64, 1, one, (double[]){1}),
                        oc_from(VQ_F64, 1, one, (double[]){1})};
    vq_attr lr = VQ_ATTR_F("learning_rate", 0.5);
    step("momentum", in, 3, (int[]){0, 2}, 2, true, &lr, 1);
    int64_t one_dim[1] = {1};
    oc_assert_close(in[2], 1, one_dim, (double[]){1.9}, 1e-15, 0);
    oc_assert_close(in[0], 1, one_dim, (double[]){1 - 0.5 * 1.9}, 1e-15, 0);
    for (int i = 0; i < 3; i++)
        vq_tensor_release(in[i]);
}

/* Adam (Kingma & Ba, as PyTorch): t = step + 1; m = b1 m + (1 - b1) g;
 * v = b2 v + (1 - b2) g^2; p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps). */
Test(ops_optim, adam_steps_follow_the_paper_and_count_steps)
{
    const double lr = 0.01, b1 = 0.8, b2 = 0.95, eps = 1e-6;
    for (int d = 0; d < 2; d++)
        for (int ip = 0; ip < 2; ip++) {
            vq_dtype dt = d ? VQ_F64 : VQ_F32;
            vq_tensor *in[5] = {oc_rand(&rng, dt, 2, shape, -1, 1), NULL,
                                oc_rand(&rng, dt, 2, shape, -0.1, 0.1),
                                oc_rand(&rng, dt, 2, shape, 0, 0.1), NULL};
            int64_t start = ip ? 0 : 5;
            /* rank 0 one time, [1] the other */
            cr_assert_eq(vq_tensor_from(&in[4], VQ_I64, ip, (int64_t[]){1}, &start), 0);
            double p[N], m[N], v[N];
            values(in[0], p);
            values(in[2], m);
            values(in[3], v);
            vq_attr at[4] = {VQ_ATTR_F("learning_rate", lr), VQ_ATTR_F("beta1", b1),
                             VQ_ATTR_F("beta2", b2), VQ_ATTR_F("epsilon", eps)};
            for (int s = 0; s < 4; s++) {
                in[1] = oc_rand(&rng, dt, 2, shape, -1, 1);
                double t = (double)(start + s + 1);
                for (int i = 0; i < N; i++) {
                    double g = oc_get(in[1], i);
                    m[i] = b1 * m[i] + (1 - b1) * g;
                    v[i] = b2 * v[i] + (1 - b2) * g * g;
                    p[i] -= lr * (m[i] / (1 - pow(b1, t))) / (sqrt(v[i] / (1 - pow(b2, t))) + eps);
                }
                step("adam", in, 5, (int[]){0, 2, 3, 4}, 4, ip, at, 4);
                vq_tensor_release(in[1]);
                in[1] = NULL;
                cr_assert_eq(vq_tensor_ndim(in[4]), ip);
                cr_assert_eq(*(int64_t *)vq_tensor_data(in[4]), start + s + 1);
            }
            oc_assert_close(in[0], 2, shape, p, tol(dt), tol(dt));
            oc_assert_close(in[2], 2, shape, m, tol(dt), tol(dt));
            oc_assert_close(in[3], 2, shape, v, tol(dt), tol(dt));
            for (int i = 0; i < 5; i++)
                vq_tensor_release(in[i]);
        }
}

/* From zero moments the first step moves each parameter by about lr
 * against its gradient's sign, whatever the gradient's size. */
Test(ops_optim, adam_first_step_moves_by_the_learning_rate)
{
    int64_t s[1] = {3};
    vq_tensor *in[5] = {oc_from(VQ_F64, 1, s, (double[]){0, 0, 0}),
                        oc_from(VQ_F64, 1, s, (double[]){100, -0.01, 3}), NULL, NULL, NULL};
    cr_assert_eq(vq_tensor_new(&in[2], VQ_F64, 1, s), 0);
    cr_assert_eq(vq_tensor_new(&in[3], VQ_F64, 1, s), 0);
    cr_assert_eq(vq_tensor_new(&in[4], VQ_I64, 0, NULL), 0);
    vq_attr lr = VQ_ATTR_F("learning_rate", 0.1);
    step("adam", in, 5, (int[]){0, 2, 3, 4}, 4, true, &lr, 1);
    oc_assert_close(in[0], 1, s, (double[]){-0.1, 0.1, -0.1}, 1e-5, 0);
    for (int i = 0; i < 5; i++)
        vq_tensor_release(in[i]);
}

static void expect_error(const char *type, vq_tensor *const *in, int nin, int nout,
                         const vq_attr *at, int nat, const char *msg)
{
    cr_assert_eq(oc_try(type, in, nin, nout, at, nat), VQ_EINVAL, "%s: expected \"%s\"", type, msg);
    cr_assert(strstr(vq_errmsg(), msg), "got \"%s\", expected \"%s\"", vq_errmsg(), msg);
}

Test(ops_optim, bad_calls_name_the_op_and_the_slot_or_attribute)
{
    int64_t s4[1] = {4}, s3[1] = {3}, s2[1] = {2};
    vq_tensor *p, *g, *short_g, *gd, *ip, *m, *v, *st, *stf, *st2;
    cr_assert_eq(vq_tensor_new(&p, VQ_F32, 1, s4), 0);
    cr_assert_eq(vq_tensor_new(&g, VQ_F32, 1, s4), 0);
    cr_assert_eq(vq_tensor_new(&short_g, VQ_F32, 1, s3), 0);
    cr_assert_eq(vq_tensor_new(&gd, VQ_F64, 1, s4), 0);
    cr_assert_eq(vq_tensor_new(&ip, VQ_I32, 1, s4), 0);
    cr_assert_eq(vq_tensor_new(&m, VQ_F32, 1, s4), 0);
    cr_assert_eq(vq_tensor_new(&v, VQ_F32, 1, s4), 0);
    cr_assert_eq(vq_tensor_new(&st, VQ_I64, 0, NULL), 0);
    cr_assert_eq(vq_tensor_new(&stf, VQ_F32, 0, NULL), 0);
    cr_assert_eq(vq_tensor_new(&st2, VQ_I64, 1, s2), 0);
    vq_attr lr = VQ_ATTR_F("learning_rate", 0.1);

    expect_error("sgd", (vq_tensor *[]){p, g}, 2, 1, NULL, 0,
                 "sgd: no learning rate: give attribute learning_rate or input LearningRate");
    vq_attr neg = VQ_ATTR_F("learning_rate", -1);
    expect_error("sgd", (vq_tensor *[]){p, g}, 2, 1, &neg, 1, "sgd: attribute learning_rate: is -1");
    expect_error("sgd", (vq_tensor *[]){p, short_g}, 2, 1, &lr, 1,
                 "sgd: input Grad (slot 1): shape [3] differs from Param's [4]");
    expect_error("sgd", (vq_tensor *[]){p, gd}, 2, 1, &lr, 1,
                 "sgd: input Grad (slot 1): dtype f64 differs from Param's f32");
    expect_error("sgd", (vq_tensor *[]){ip, ip}, 2, 1, &lr, 1,
                 "sgd: input Param (slot 0): dtype i32 not supported");
    expect_error("momentum", (vq_tensor *[]){p, g, short_g}, 3, 2, &lr, 1,
                 "momentum: input Velocity (slot 2): shape [3] differs");
    vq_attr mu = VQ_ATTR_F("mu", NAN);
    expect_error("momentum", (vq_tensor *[]){p, g, v}, 3, 2, (vq_attr[]){lr, mu}, 2,
                 "momentum: attribute mu: is nan");
    expect_error("adam", (vq_tensor *[]){p, g, m, short_g, st}, 5, 4, &lr, 1,
                 "adam: input Moment2 (slot 3): shape [3] differs");
    expect_error("adam", (vq_tensor *[]){p, g, m, v, stf}, 5, 4, &lr, 1,
                 "adam: input Step (slot 4): dtype f32");
    expect_error("adam", (vq_tensor *[]){p, g, m, v, st2}, 5, 4, &lr, 1,
                 "adam: input Step (slot 4): shape [2]");
    vq_attr b1 = VQ_ATTR_F("beta1", 1.0);
    expect_error("adam", (vq_tensor *[]){p, g, m, v, st}, 5, 4, (vq_attr[]){lr, b1}, 2,
                 "adam: attribute beta1: is 1");
    vq_attr eps = VQ_ATTR_F("epsilon", -1e-8);
    expect_error("adam", (vq_tensor *[]){p, g, m, v, st}, 5, 4, (vq_attr[]){lr, eps}, 2,
                 "adam: attribute epsilon: is -1e-08");
    expect_error("adam", (vq_tensor *[]){p, g, m, v}, 4, 4, &lr, 1,
                 "adam: takes 5 or 6 inputs, got 4");

    /* A negative step count is found when the kernel runs. */
    *(int64_t *)vq_tensor_data(st) = -3;
    expect_error("adam", (vq_tensor *[]){p, g, m, v, st}, 5, 4, &lr, 1,
                 "adam: input Step (slot 4) is -3");

    vq_tensor *all[] = {p, g, short_g, gd, ip, m, v, st, stf, st2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        vq_tensor_release(all[i]);
}

Test(ops_optim, updates_run_in_place_on_an_engine)
{
    vq_engine *e;
    vq_engine_opts opts = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    cr_assert_eq(vq_engine_new(&e, &opts), 0, "%s", vq_errmsg());
    vq_tensor *p = oc_rand(&rng, VQ_F64, 2, shape, -1, 1), *g = oc_rand(&rng, VQ_F64, 2, shape, -1, 1);
    double want[N];
    for (int i = 0; i < N; i++)
        want[i] = oc_get(p, i) - 10 * 0.01 * oc_get(g, i);
    vq_attr lr = VQ_ATTR_F("learning_rate", 0.01);
    for (int s = 0; s < 10; s++) {
        vq_tensor *in[2] = {p, g}, *out[1] = {p};
        cr_assert_eq(vq_op_run(e, "sgd", in, 2, out, 1, &lr, 1), 0, "%s", vq_errmsg());
    }
    cr_assert_eq(vq_tensor_wait(p), 0, "%s", vq_errmsg());
    oc_assert_close(p, 2, shape, want, 1e-13, 1e-13);
    vq_tensor_release(p);
    vq_tensor_release(g);
    vq_engine_free(e);
}

/* A one-element tensor of value lr, dtype dt, shape [] or [1]. */
static vq_tensor *lr_tensor(vq_dtype dt, int ndim, double lr)
{
    return oc_from(dt, ndim, (int64_t[]){1}, (double[]){lr});
}

static vq_tensor *copy_of(vq_tensor *t)
{
    vq_tensor *c;
    cr_assert_eq(vq_tensor_from(&c, vq_tensor_dtype(t), vq_tensor_ndim(t), vq_tensor_shape(t),
                                vq_tensor_data(t)),
                 0);
    return c;
}

/* Each update, in place, twice from the same state: once with the
 * attribute learning_rate, once with the input LearningRate of the same
 * value (f64 0.1, or the f32 nearest it and its attribute); the states
 * must come out equal bit for bit. */
Test(ops_optim, a_learning_rate_input_updates_exactly_as_the_attribute)
{
    static const char *const types[] = {"sgd", "momentum", "adam"};
    static const int nins[] = {2, 3, 5}, nouts[] = {1, 2, 4};
    static const int states[3][4] = {{0}, {0, 2}, {0, 2, 3, 4}};
    for (int o = 0; o < 3; o++)
        for (int d = 0; d < 2; d++) {
            vq_dtype dt = d ? VQ_F64 : VQ_F32;
            double rate = dt == VQ_F32 ? (double)0.1f : 0.1;
            vq_tensor *a[6] = {NULL}, *b[6] = {NULL};
            a[0] = oc_rand(&rng, dt, 2, shape, -1, 1);
            a[1] = oc_rand(&rng, dt, 2, shape, -1, 1);
            if (o > 0)
                a[2] = oc_rand(&rng, dt, 2, shape, -0.1, 0.1);
            if (o == 2) {
                a[3] = oc_rand(&rng, dt, 2, shape, 0, 0.1);
                int64_t st = 2;
                cr_assert_eq(vq_tensor_from(&a[4], VQ_I64, 0, NULL, &st), 0);
            }
            int nin = nins[o];
            for (int i = 0; i < nin; i++)
                b[i] = copy_of(a[i]);
            b[nin] = lr_tensor(dt, d, rate); /* [] for f32, [1] for f64 */
            vq_attr at = VQ_ATTR_F("learning_rate", rate);
            for (int s = 0; s < 3; s++) {
                step(types[o], a, nin, states[o], nouts[o], true, &at, 1);
                step(types[o], b, nin + 1, states[o], nouts[o], true, NULL, 0);
            }
            for (int i = 0; i < nin; i++) {
                cr_assert_eq(vq_tensor_nbytes(a[i]), vq_tensor_nbytes(b[i]));
                cr_assert(!memcmp(vq_tensor_data(a[i]), vq_tensor_data(b[i]),
                                  vq_tensor_nbytes(a[i])),
                          "%s %s: input %d differs", types[o], vq_dtype_name(dt), i);
            }
            for (int i = 0; i <= nin; i++) {
                vq_tensor_release(a[i]);
                vq_tensor_release(b[i]);
            }
        }
}

/* The rate is read when the update runs: changing the tensor between two
 * calls changes the step. */
Test(ops_optim, a_learning_rate_input_is_read_at_each_run)
{
    int64_t one[1] = {1};
    vq_tensor *in[3] = {oc_from(VQ_F64, 1, one, (double[]){1}),
                        oc_from(VQ_F64, 1, one, (double[]){2}), lr_tensor(VQ_F64, 0, 0.25)};
    step("sgd", in, 3, (int[]){0}, 1, true, NULL, 0);
    cr_assert_eq(oc_get(in[0], 0), 0.5);
    oc_set(in[2], 0, 0.125);
    step("sgd", in, 3, (int[]){0}, 1, true, NULL, 0);
    cr_assert_eq(oc_get(in[0], 0), 0.25);
    for (int i = 0; i < 3; i++)
        vq_tensor_release(in[i]);
}

Test(ops_optim, bad_learning_rate_inputs_name_the_op)
{
    int64_t s4[1] = {4};
    vq_tensor *p, *g, *v, *m, *st, *lr = lr_tensor(VQ_F32, 0, 0.1),
                                   *lr64 = lr_tensor(VQ_F64, 1, 0.1), *lr2;
    cr_assert_eq(vq_tensor_new(&p, VQ_F32, 1, s4), 0);
    cr_assert_eq(vq_tensor_new(&g, VQ_F32, 1, s4), 0);
    cr_assert_eq(vq_tensor_new(&v, VQ_F32, 1, s4), 0);
    cr_assert_eq(vq_tensor_new(&m, VQ_F32, 1, s4), 0);
    cr_assert_eq(vq_tensor_new(&st, VQ_I64, 0, NULL), 0);
    cr_assert_eq(vq_tensor_new(&lr2, VQ_F32, 1, (int64_t[]){2}), 0);
    vq_attr at = VQ_ATTR_F("learning_rate", 0.1);
    expect_error("sgd", (vq_tensor *[]){p, g, lr2}, 3, 1, NULL, 0,
                 "sgd: input LearningRate (slot 2): shape [2]; the learning rate is one element");
    expect_error("momentum", (vq_tensor *[]){p, g, v, lr64}, 4, 2, NULL, 0,
                 "momentum: input LearningRate (slot 3): dtype f64 differs from Param's f32");
    expect_error("adam", (vq_tensor *[]){p, g, m, v, st, lr}, 6, 4, &at, 1,
                 "adam: the learning rate is given twice");
    expect_error("adam", (vq_tensor *[]){p, g, m, v, st}, 5, 4, NULL, 0,
                 "adam: no learning rate");
    expect_error("sgd", (vq_tensor *[]){p, g, lr, lr}, 4, 1, NULL, 0,
                 "sgd: takes 2 or 3 inputs, got 4");
    vq_tensor *all[] = {p, g, v, m, st, lr, lr64, lr2};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        vq_tensor_release(all[i]);
}

/* ---- lr_schedule ---- */

/* PyTorch's closed forms (torch/optim/lr_scheduler.py, _get_closed_form_lr),
 * for kind k at step t. */
static double torch_rate(const char *k, int64_t t)
{
    const double pi = 3.141592653589793, base = 0.1;
    if (!strcmp(k, "step")) /* StepLR(step_size 7, gamma 0.5) */
        return base * pow(0.5, (double)(t / 7));
    if (!strcmp(k, "cosine")) /* CosineAnnealingLR(T_max 12, eta_min 0.01): past 12 too */
        return 0.01 + (base - 0.01) * (1 + cos(pi * (double)t / 12)) / 2;
    /* LinearLR(start_factor 0.25, end_factor 0.75, total_iters 8) */
    double lin = base * (0.25 + (0.75 - 0.25) * (double)(t < 8 ? t : 8) / 8);
    if (!strcmp(k, "linear"))
        return lin;
    /* SequentialLR([that, CosineAnnealingLR(T_max 12, eta_min 0.01)], [8]) */
    return t < 8 ? lin : 0.01 + (base - 0.01) * (1 + cos(pi * (double)(t - 8) / 12)) / 2;
}

static int schedule_attrs(const char *kind, vq_dtype dt, vq_attr *a)
{
    int n = 0;
    a[n++] = VQ_ATTR_S("kind", kind);
    a[n++] = VQ_ATTR_F("base_lr", 0.1);
    a[n++] = VQ_ATTR_S("dtype", vq_dtype_name(dt));
    if (!strcmp(kind, "step")) {
        a[n++] = VQ_ATTR_I("step_size", 7);
        a[n++] = VQ_ATTR_F("gamma", 0.5);
    }
    if (!strcmp(kind, "cosine") || !strcmp(kind, "warmup_cosine")) {
        a[n++] = VQ_ATTR_I("t_max", 12);
        a[n++] = VQ_ATTR_F("eta_min", 0.01);
    }
    if (!strcmp(kind, "linear") || !strcmp(kind, "warmup_cosine")) {
        a[n++] = VQ_ATTR_F("start_factor", 0.25);
        a[n++] = VQ_ATTR_F("end_factor", 0.75);
        a[n++] = VQ_ATTR_I("total_iters", 8);
    }
    return n;
}

/* 30 steps with the counter updated in place: each step's rate is the
 * closed form's at the counter's value before it, rounded once to the
 * dtype; the counter counts the steps. */
Test(ops_optim, lr_schedule_follows_pytorchs_closed_forms_for_30_steps)
{
    static const char *const kinds[] = {"step", "cosine", "linear", "warmup_cosine"};
    for (int k = 0; k < 4; k++)
        for (int d = 0; d < 2; d++) {
            vq_dtype dt = d ? VQ_F64 : VQ_F32;
            vq_attr a[10];
            int na = schedule_attrs(kinds[k], dt, a);
            int64_t zero = 0;
            vq_tensor *st, *lr = NULL;
            cr_assert_eq(vq_tensor_from(&st, VQ_I64, 1, (int64_t[]){1}, &zero), 0);
            for (int64_t t = 0; t < 30; t++) {
                vq_tensor *out[2] = {NULL, st};
                cr_assert_eq(vq_op_run(NULL, "lr_schedule", &st, 1, out, 2, a, na), 0, "%s",
                             vq_errmsg());
                lr = out[0];
                cr_assert_eq(vq_tensor_ndim(lr), 0);
                cr_assert_eq(vq_tensor_dtype(lr), dt);
                double want = torch_rate(kinds[k], t), got = oc_get(lr, 0);
                if (dt == VQ_F32)
                    cr_assert_eq((float)got, (float)want, "%s f32 t=%lld: %.9g, want %.9g",
                                 kinds[k], (long long)t, got, want);
                else
                    cr_assert(fabs(got - want) <= 1e-15 * want, "%s f64 t=%lld: %.17g, want %.17g",
                              kinds[k], (long long)t, got, want);
                cr_assert_eq(*(int64_t *)vq_tensor_data(st), t + 1);
                vq_tensor_release(lr);
            }
            vq_tensor_release(st);
        }
}

Test(ops_optim, bad_schedules_name_the_op_and_the_attribute)
{
    int64_t zero = 0, neg = -2;
    vq_tensor *st, *stn, *stf, *st2;
    cr_assert_eq(vq_tensor_from(&st, VQ_I64, 0, NULL, &zero), 0);
    cr_assert_eq(vq_tensor_from(&stn, VQ_I64, 0, NULL, &neg), 0);
    cr_assert_eq(vq_tensor_new(&stf, VQ_F32, 0, NULL), 0);
    cr_assert_eq(vq_tensor_new(&st2, VQ_I64, 1, (int64_t[]){2}), 0);
    vq_attr a[12];
    static const struct bad {
        const char *kind, *attr;
        vq_attr_type type;
        double value;
        const char *msg;
    } bad[] = {
        {"exponential", NULL, 0, 0, "lr_schedule: attribute kind: is \"exponential\""},
        {"step", "step_size", VQ_ATTR_INT, 0, "lr_schedule: attribute step_size: is 0"},
        {"step", "gamma", VQ_ATTR_FLOAT, -0.5, "lr_schedule: attribute gamma: is -0.5"},
        {"step", "base_lr", VQ_ATTR_FLOAT, NAN, "lr_schedule: attribute base_lr: is nan"},
        {"cosine", "t_max", VQ_ATTR_INT, -1, "lr_schedule: attribute t_max: is -1"},
        {"cosine", "eta_min", VQ_ATTR_FLOAT, INFINITY, "lr_schedule: attribute eta_min: is inf"},
        {"linear", "start_factor", VQ_ATTR_FLOAT, 0, "lr_schedule: attribute start_factor: is 0"},
        {"linear", "end_factor", VQ_ATTR_FLOAT, 1.5, "lr_schedule: attribute end_factor: is 1.5"},
        {"warmup_cosine", "total_iters", VQ_ATTR_INT, 0,
         "lr_schedule: attribute total_iters: is 0"},
        {"cosine", "gamma", VQ_ATTR_FLOAT, 0.5,
         "lr_schedule: attribute gamma: does not apply to kind cosine"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const struct bad *b = &bad[i];
        int na = schedule_attrs(b->kind, VQ_F32, a);
        bool set = false;
        for (int j = 0; j < na && b->attr; j++)
            if (!strcmp(a[j].name, b->attr)) {
                a[j] = b->type == VQ_ATTR_INT ? VQ_ATTR_I(b->attr, (int64_t)b->value)
                                              : VQ_ATTR_F(b->attr, b->value);
                set = true;
            }
        if (b->attr && !set)
            a[na++] = b->type == VQ_ATTR_INT ? VQ_ATTR_I(b->attr, (int64_t)b->value)
                                             : VQ_ATTR_F(b->attr, b->value);
        expect_error("lr_schedule", &st, 1, 2, a, na, b->msg);
    }
    int na = schedule_attrs("step", VQ_F32, a);
    expect_error("lr_schedule", &st, 1, 2, a, na - 2, "lr_schedule: attribute step_size: is "
                                                      "required");
    na = schedule_attrs("cosine", VQ_I32, a);
    expect_error("lr_schedule", &st, 1, 2, a, na, "lr_schedule: attribute dtype: is i32");
    na = schedule_attrs("cosine", VQ_F64, a);
    expect_error("lr_schedule", &stf, 1, 2, a, na, "lr_schedule: input Step (slot 0): dtype f32");
    expect_error("lr_schedule", &st2, 1, 2, a, na, "lr_schedule: input Step (slot 0): shape [2]");
    /* a negative counter is found when the kernel runs */
    expect_error("lr_schedule", &stn, 1, 2, a, na,
                 "lr_schedule: input Step (slot 0) is -2, not a count of steps");
    vq_tensor_release(st);
    vq_tensor_release(stn);
    vq_tensor_release(stf);
    vq_tensor_release(st2);
}
