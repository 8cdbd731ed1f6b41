/* varq's side of the PyTorch reference test (compare_torch.py).
 *
 * Usage: train_ref MODEL OPT DTYPE DIR
 *   MODEL  seed  x [16,16], label [16,1], Linear(16 -> 1) "out", MSE "loss"
 *          mlp   x [-1,64], y int64 [-1], Linear(64 -> 128) "h1", relu "a1",
 *                Linear(128 -> 10) "logits", softmax cross-entropy "probs", "loss"
 *   OPT    sgd (lr 0.05) | momentum (lr 0.05, mu 0.9) | adam (lr 0.01, PyTorch's
 *          defaults otherwise) | sgd_wd (sgd, weight decay 0.01) | adamw (adam,
 *          decoupled decay 0.05) | adam_clipnorm (adam, global norm clipped to
 *          0.5) | momentum_clipvalue (momentum, gradients clamped to 0.05);
 *          the learning rate as a var "lr" (vq_optimizer.learning_rate_var):
 *          sgd_lrfeed, adam_lrfeed (sgd, adam, "lr" fed each step from
 *          DIR/lrs.npy, float64 [100]) | sgd_steplr (sgd, StepLR step_size 30,
 *          gamma 0.5) | momentum_cosine (momentum, CosineAnnealingLR t_max 60,
 *          eta_min 0.005) | adam_linear (adam, LinearLR 0.1 -> 1 over 25
 *          steps) | adamw_warmcos (adamw, LinearLR 0.05 -> 1 over 10 steps,
 *          then CosineAnnealingLR t_max 90, eta_min 1e-4), the schedules made
 *          by vq_lr_schedule_build; compare_torch.py uses the same numbers
 *   DTYPE  f32 | f64 (the floating-point vars and parameters; the mlp's label
 *          stays int64)
 *   DIR    holds batches/x_<i>.npy and batches/y_<i>.npy for i in 0..99, in the
 *          right dtype (written by compare_torch.py)
 *
 * Runs the startup program on a threaded engine with 2 workers, saves the
 * initial scope to DIR/init, runs the main program once per batch fetching
 * "loss", then writes DIR/losses.npy (float64 [100]) and saves the final
 * scope to DIR/final. Exit status 0, or 1 with a one-line error. */
#include <varq/varq.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS 100

static const char *prog = "train_ref";

#define CHECK(call)                                                                        \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ < 0) {                                                                     \
            fprintf(stderr, "%s: %s: %s\n", prog, #call, vq_errmsg());                     \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

static _Noreturn void usage(void)
{
    fprintf(stderr, "usage: train_ref seed|mlp sgd|momentum|adam|sgd_wd|adamw|adam_clipnorm|"
                    "momentum_clipvalue|sgd_lrfeed|adam_lrfeed|sgd_steplr|momentum_cosine|"
                    "adam_linear|adamw_warmcos f32|f64 DIR\n");
    exit(1);
}

/* The rate var "lr" of main, for an optimizer that reads one: fed
 * (sched NULL) or computed by the schedule sched. */
struct lr_source {
    bool var;
    const vq_lr_schedule *sched;
};

static void build(const char *model, vq_dtype dt, const vq_optimizer *opt, struct lr_source lr,
                  vq_program **startup, vq_program **main)
{
    CHECK(vq_program_new(startup));
    CHECK(vq_program_new(main));
    if (!strcmp(model, "seed")) {
        int64_t xs[2] = {16, 16}, ls[2] = {16, 1};
        CHECK(vq_program_add_var(*main, 0, "x", dt, 2, xs, false));
        CHECK(vq_program_add_var(*main, 0, "label", dt, 2, ls, false));
        CHECK(vq_layer_linear(*main, *startup, "x", "out", 1, 2026));
        CHECK(vq_layer_mse_loss(*main, "out", "label", "loss"));
    } else {
        int64_t xs[2] = {-1, 64}, ys[1] = {-1};
        CHECK(vq_program_add_var(*main, 0, "x", dt, 2, xs, false));
        CHECK(vq_program_add_var(*main, 0, "y", VQ_I64, 1, ys, false));
        CHECK(vq_layer_linear(*main, *startup, "x", "h1", 128, 1));
        CHECK(vq_layer_activation(*main, "relu", "h1", "a1"));
        CHECK(vq_layer_linear(*main, *startup, "a1", "logits", 10, 3));
        CHECK(vq_layer_softmax_cross_entropy(*main, "logits", "y", "probs", "loss"));
    }
    if (lr.var && lr.sched) {
        vq_lr_schedule s = *lr.sched;
        s.dtype = dt;
        CHECK(vq_lr_schedule_build(*main, *startup, "lr", &s));
    } else if (lr.var) {
        CHECK(vq_program_add_var(*main, 0, "lr", dt, 0, NULL, false));
    }
    CHECK(vq_optimizer_minimize(*main, *startup, "loss", opt));
}

static vq_tensor *load_npy(const char *dir, const char *name, int i, vq_dtype want)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/batches/%s_%d.npy", dir, name, i);
    vq_tensor *t;
    if (vq_npy_load(path, &t) < 0) {
        fprintf(stderr, "%s: %s\n", prog, vq_errmsg());
        exit(1);
    }
    if (vq_tensor_dtype(t) != want) {
        fprintf(stderr, "%s: %s has dtype %s, expected %s\n", prog, path,
                vq_dtype_name(vq_tensor_dtype(t)), vq_dtype_name(want));
        exit(1);
    }
    return t;
}

int main(int argc, char **argv)
{
    if (argc != 5)
        usage();
    const char *model = argv[1], *optname = argv[2], *dtname = argv[3], *dir = argv[4];
    if (strcmp(model, "seed") && strcmp(model, "mlp"))
        usage();
    vq_dtype dt;
    if (!strcmp(dtname, "f32"))
        dt = VQ_F32;
    else if (!strcmp(dtname, "f64"))
        dt = VQ_F64;
    else
        usage();
    vq_optimizer opt;
    if (!strcmp(optname, "sgd"))
        opt = (vq_optimizer){.kind = VQ_OPT_SGD, .learning_rate = 0.05};
    else if (!strcmp(optname, "momentum"))
        opt = (vq_optimizer){.kind = VQ_OPT_MOMENTUM, .learning_rate = 0.05, .mu = 0.9};
    else if (!strcmp(optname, "adam"))
        opt = (vq_optimizer){.kind = VQ_OPT_ADAM, .learning_rate = 0.01, .beta1 = 0.9,
                             .beta2 = 0.999, .epsilon = 1e-8};
    else if (!strcmp(optname, "sgd_wd"))
        opt = (vq_optimizer){.kind = VQ_OPT_SGD, .learning_rate = 0.05, .weight_decay = 0.01};
    else if (!strcmp(optname, "adamw"))
        opt = (vq_optimizer){.kind = VQ_OPT_ADAM, .learning_rate = 0.01, .weight_decay = 0.05,
                             .decoupled = true};
    else if (!strcmp(optname, "adam_clipnorm"))
        opt = (vq_optimizer){.kind = VQ_OPT_ADAM, .learning_rate = 0.01, .clip_norm = 0.5};
    else if (!strcmp(optname, "momentum_clipvalue"))
        opt = (vq_optimizer){.kind = VQ_OPT_MOMENTUM, .learning_rate = 0.05, .mu = 0.9,
                             .clip_value = 0.05};
    else if (!strcmp(optname, "sgd_lrfeed") || !strcmp(optname, "sgd_steplr"))
        opt = (vq_optimizer){.kind = VQ_OPT_SGD, .learning_rate_var = "lr"};
    else if (!strcmp(optname, "adam_lrfeed") || !strcmp(optname, "adam_linear"))
        opt = (vq_optimizer){.kind = VQ_OPT_ADAM, .learning_rate_var = "lr"};
    else if (!strcmp(optname, "momentum_cosine"))
        opt = (vq_optimizer){.kind = VQ_OPT_MOMENTUM, .mu = 0.9, .learning_rate_var = "lr"};
    else if (!strcmp(optname, "adamw_warmcos"))
        opt = (vq_optimizer){.kind = VQ_OPT_ADAM, .weight_decay = 0.05, .decoupled = true,
                             .learning_rate_var = "lr"};
    else
        usage();
    static const struct {
        const char *opt;
        vq_lr_schedule s;
    } schedules[] = {
        {"sgd_steplr", {.kind = VQ_LR_STEP, .base_lr = 0.05, .step_size = 30, .gamma = 0.5}},
        {"momentum_cosine", {.kind = VQ_LR_COSINE, .base_lr = 0.05, .t_max = 60,
                             .eta_min = 0.005}},
        {"adam_linear", {.kind = VQ_LR_LINEAR, .base_lr = 0.01, .start_factor = 0.1,
                         .end_factor = 1.0, .total_iters = 25}},
        {"adamw_warmcos", {.kind = VQ_LR_WARMUP_COSINE, .base_lr = 0.01, .start_factor = 0.05,
                           .end_factor = 1.0, .total_iters = 10, .t_max = 90,
                           .eta_min = 1e-4}},
    };
    struct lr_source lr = {.var = opt.learning_rate_var != NULL};
    for (size_t i = 0; i < sizeof schedules / sizeof schedules[0]; i++)
        if (!strcmp(optname, schedules[i].opt))
            lr.sched = &schedules[i].s;
    /* a fed rate: one per step */
    double fed[STEPS];
    if (lr.var && !lr.sched) {
        char path[4096];
        snprintf(path, sizeof path, "%s/lrs.npy", dir);
        vq_tensor *t;
        CHECK(vq_npy_load(path, &t));
        if (vq_tensor_dtype(t) != VQ_F64 || vq_tensor_numel(t) != STEPS) {
            fprintf(stderr, "%s: %s is not float64 [%d]\n", prog, path, STEPS);
            return 1;
        }
        memcpy(fed, vq_tensor_data(t), sizeof fed);
        vq_tensor_release(t);
    }

    vq_program *startup, *main_p;
    build(model, dt, &opt, lr, &startup, &main_p);

    vq_engine *e;
    vq_exec *ex;
    vq_scope *s;
    vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    CHECK(vq_engine_new(&e, &eo));
    CHECK(vq_exec_new(&ex, e, NULL));
    CHECK(vq_scope_new(&s));
    CHECK(vq_exec_run(ex, startup, s, NULL, 0, NULL, 0));

    char path[4096];
    snprintf(path, sizeof path, "%s/init", dir);
    CHECK(vq_scope_save(s, path));

    const char *label = !strcmp(model, "seed") ? "label" : "y";
    vq_dtype label_dt = !strcmp(model, "seed") ? dt : VQ_I64;
    double losses[STEPS];
    for (int i = 0; i < STEPS; i++) {
        vq_tensor *x = load_npy(dir, "x", i, dt), *y = load_npy(dir, "y", i, label_dt);
        vq_tensor *rate = NULL;
        if (lr.var && !lr.sched) {
            float f32 = (float)fed[i];
            CHECK(vq_tensor_from(&rate, dt, 0, NULL, dt == VQ_F32 ? (void *)&f32 : &fed[i]));
        }
        vq_feed feeds[3] = {{"x", x}, {label, y}, {"lr", rate}};
        vq_fetch fetch = {"loss", NULL};
        CHECK(vq_exec_run(ex, main_p, s, feeds, rate ? 3 : 2, &fetch, 1));
        vq_tensor_release(rate);
        if (vq_tensor_numel(fetch.tensor) != 1 || vq_tensor_dtype(fetch.tensor) != dt) {
            fprintf(stderr, "%s: step %d: loss is not one %s element\n", prog, i, dtname);
            return 1;
        }
        losses[i] = dt == VQ_F32 ? (double)*(float *)vq_tensor_data(fetch.tensor)
                                 : *(double *)vq_tensor_data(fetch.tensor);
        vq_tensor_release(fetch.tensor);
        vq_tensor_release(x);
        vq_tensor_release(y);
    }

    int64_t n = STEPS;
    vq_tensor *lt;
    CHECK(vq_tensor_from(&lt, VQ_F64, 1, &n, losses));
    snprintf(path, sizeof path, "%s/losses.npy", dir);
    CHECK(vq_npy_save(path, lt));
    vq_tensor_release(lt);
    snprintf(path, sizeof path, "%s/final", dir);
    CHECK(vq_scope_save(s, path));

    vq_exec_free(ex);
    vq_scope_free(s);
    vq_engine_free(e);
    vq_program_free(startup);
    vq_program_free(main_p);
    return 0;
}
