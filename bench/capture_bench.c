/* capture_bench: what capture (include/varq/capture.h) costs and gains.
 *
 * The two models of train_bench (the seed: Linear 16 -> 1, MSE, Adam, x
 * f32[16,16]; the digits MLP: 64 -> 128 -> 10, ReLU, softmax
 * cross-entropy, Adam, batches of 64 synthetic rows) are built once as
 * programs with vq_optimizer_minimize, and one training step is then run
 * three ways on the same engine, each from the same initial weights:
 *
 *   executor  vq_exec_run of the program (its cached plan);
 *   eager     the program's ops, forward, gradient and Adam ops alike,
 *             issued one by one with vq_op_run (an interpreter over the
 *             program: the calls a user would write by hand);
 *   captured  the forward ops with vq_op_run between vq_capture_begin and
 *             vq_capture_end, vq_capture_backward for the gradients, and
 *             the Adam ops with vq_op_run: the imperative training step.
 *
 * Every step reads the loss on the host, as a training loop does. The
 * eager and captured losses must be equal to the bit (the same kernels on
 * the same tensors); the executor's agrees with them (the same ops).
 * Reported: steps per second (median of the repetitions), and for the
 * captured step the cost per recorded op in the calling thread (from
 * vq_capture_begin to vq_capture_end, the segment's push included: record
 * + guard) and per op of the whole step.
 *
 * --model seed|mlp runs one model, --way executor|eager|captured one way
 * (for profiles: `valgrind --tool=callgrind capture_bench --model seed
 * --way captured --workers 1`; the loss checks need all three ways).
 *
 * usage: capture_bench [--tiny] [--steps K] [--reps R] [--workers N]
 *                      [--model seed|mlp] [--way executor|eager|captured] */
#include <varq/varq.h>

#include "../graph/graph_internal.h" /* walks the programs' ops (linked statically) */
#include "measure.h"                 /* bench_now, bench_median, bench_stats */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static vq_engine *engine;

#define CHECK(call)                                                                        \
    do {                                                                                   \
        if ((call) < 0) {                                                                  \
            fprintf(stderr, "capture_bench: %s: %s\n", #call, vq_errmsg());                \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

struct model {
    const char *name;
    vq_program *startup, *fwd, *main;
    const char *x, *y;
    vq_tensor *bx, *by;
    int nparams;
    const char *params[4];
};

static void build_seed(struct model *m)
{
    m->name = "seed";
    m->x = "x";
    m->y = "label";
    CHECK(vq_program_new(&m->startup));
    CHECK(vq_program_new(&m->main));
    int64_t xs[2] = {16, 16}, ls[2] = {16, 1};
    CHECK(vq_program_add_var(m->main, 0, "x", VQ_F32, 2, xs, false));
    CHECK(vq_program_add_var(m->main, 0, "label", VQ_F32, 2, ls, false));
    CHECK(vq_layer_linear(m->main, m->startup, "x", "out", 1, 2026));
    CHECK(vq_layer_mse_loss(m->main, "out", "label", "loss"));
    CHECK(vq_program_clone(m->main, &m->fwd));
    vq_optimizer adam = {.kind = VQ_OPT_ADAM, .learning_rate = 0.001};
    CHECK(vq_optimizer_minimize(m->main, m->startup, "loss", &adam));
    float ones[256];
    for (int i = 0; i < 256; i++)
        ones[i] = 1;
    CHECK(vq_tensor_from(&m->bx, VQ_F32, 2, xs, ones));
    CHECK(vq_tensor_from(&m->by, VQ_F32, 2, ls, ones));
    m->nparams = 2;
    m->params[0] = "out.w";
    m->params[1] = "out.b";
}

static void build_mlp(struct model *m)
{
    m->name = "mlp";
    m->x = "x";
    m->y = "y";
    CHECK(vq_program_new(&m->startup));
    CHECK(vq_program_new(&m->main));
    int64_t xs[2] = {64, 64}, ys[1] = {64};
    CHECK(vq_program_add_var(m->main, 0, "x", VQ_F32, 2, xs, false));
    CHECK(vq_program_add_var(m->main, 0, "y", VQ_I64, 1, ys, false));
    CHECK(vq_layer_linear(m->main, m->startup, "x", "h1", 128, 1));
    CHECK(vq_layer_activation(m->main, "relu", "h1", "a1"));
    CHECK(vq_layer_linear(m->main, m->startup, "a1", "logits", 10, 3));
    CHECK(vq_layer_softmax_cross_entropy(m->main, "logits", "y", "probs", "loss"));
    CHECK(vq_program_clone(m->main, &m->fwd));
    vq_optimizer adam = {.kind = VQ_OPT_ADAM, .learning_rate = 0.005};
    CHECK(vq_optimizer_minimize(m->main, m->startup, "loss", &adam));
    float xv[64 * 64];
    int64_t yv[64];
    uint64_t s = 12345;
    for (int i = 0; i < 64 * 64; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        xv[i] = (float)(s >> 40) / (float)(1 << 24);
    }
    for (int i = 0; i < 64; i++)
        yv[i] = i % 10;
    CHECK(vq_tensor_from(&m->bx, VQ_F32, 2, xs, xv));
    CHECK(vq_tensor_from(&m->by, VQ_I64, 1, ys, yv));
    m->nparams = 4;
    m->params[0] = "h1.w";
    m->params[1] = "h1.b";
    m->params[2] = "logits.w";
    m->params[3] = "logits.b";
}

/* A fresh scope with the startup program's values (the same every time). */
static vq_scope *fresh_scope(struct model *m)
{
    vq_exec *ex;
    vq_scope *s;
    CHECK(vq_exec_new(&ex, engine, NULL));
    CHECK(vq_scope_new(&s));
    CHECK(vq_exec_run(ex, m->startup, s, NULL, 0, NULL, 0));
    vq_exec_free(ex);
    return s;
}

/* ---- the interpreter: a program's ops as vq_op_run calls ---- */

struct interp {
    const vq_program *p;
    vq_tensor **val; /* by var */
    bool *temp;      /* by var: a step's intermediate value (interp_drop) */
};

static void interp_init(struct interp *it, const vq_program *p, vq_scope *s, struct model *m)
{
    it->p = p;
    it->val = calloc((size_t)p->nvars, sizeof *it->val);
    for (int v = 0; v < p->nvars; v++)
        if (p->vars[v].persistable)
            it->val[v] = vq_tensor_retain(vq_scope_get(s, p->vars[v].name));
    it->temp = calloc((size_t)p->nvars, sizeof *it->temp);
    for (int v = 0; v < p->nvars; v++)
        it->temp[v] = !p->vars[v].persistable && strcmp(p->vars[v].name, m->x) &&
                      strcmp(p->vars[v].name, m->y);
    it->val[vq__program_find_var(p, m->x)] = vq_tensor_retain(m->bx);
    it->val[vq__program_find_var(p, m->y)] = vq_tensor_retain(m->by);
}

static void interp_free(struct interp *it)
{
    for (int v = 0; v < it->p->nvars; v++)
        vq_tensor_release(it->val[v]);
    free(it->val);
    free(it->temp);
}

/* Ops [from, to) of block 0; persistable outputs are written in place,
 * the others made anew (the previous value released). */
static void interp_run(struct interp *it, int from, int to)
{
    const vq_program *p = it->p;
    for (int k = from; k < to; k++) {
        const vq__pop *op = &p->ops[p->blocks[0].ops[k]];
        vq_tensor *in[16], *out[16];
        for (int i = 0; i < op->nin; i++)
            in[i] = it->val[op->in[i]];
        for (int j = 0; j < op->nout; j++)
            out[j] = p->vars[op->out[j]].persistable ? it->val[op->out[j]] : NULL;
        CHECK(vq_op_run(engine, op->type, in, op->nin, out, op->nout, op->attrs, op->nattrs));
        for (int j = 0; j < op->nout; j++)
            if (!p->vars[op->out[j]].persistable) {
                vq_tensor_release(it->val[op->out[j]]);
                it->val[op->out[j]] = out[j];
            }
    }
}

/* What user code does: the step's intermediate values are let go of once
 * its calls are made (all but the loss, the batch and the persistables;
 * which vars those are is found once, in interp_init). */
static void interp_drop(struct interp *it, int keep)
{
    for (int v = 0; v < it->p->nvars; v++)
        if (v != keep && it->temp[v] && it->val[v]) {
            vq_tensor_release(it->val[v]);
            it->val[v] = NULL;
        }
}

static float read_loss(vq_tensor *loss)
{
    CHECK(vq_tensor_wait(loss));
    return *(const float *)vq_tensor_data(loss);
}

/* ---- the three ways ---- */

struct way {
    vq_exec *ex;
    vq_scope *s;
    struct interp it;   /* eager: main; captured: fwd */
    struct interp upd;  /* captured: main, for its adam ops */
    int loss;           /* var of it.p */
    int first_adam;     /* captured: the first adam op of main */
    int param_var[4];   /* captured: the params' vars in fwd, */
    int grad_var[4];    /* and their gradients' in main (looked up once) */
    int mode;           /* 0 executor, 1 eager, 2 captured */
    struct model *m;
    double record_s;    /* captured: time inside begin..end */
    int ops_per_step;
};

static float step(struct way *w)
{
    struct model *m = w->m;
    if (w->mode == 0) {
        vq_feed f[2] = {{m->x, m->bx}, {m->y, m->by}};
        vq_fetch l = {"loss", NULL};
        CHECK(vq_exec_run(w->ex, m->main, w->s, f, 2, &l, 1));
        float v = read_loss(l.tensor);
        vq_tensor_release(l.tensor);
        return v;
    }
    if (w->mode == 1) {
        interp_run(&w->it, 0, w->it.p->blocks[0].nops);
        interp_drop(&w->it, w->loss);
        return read_loss(w->it.val[w->loss]);
    }
    double t0 = bench_now();
    CHECK(vq_capture_begin(engine));
    interp_run(&w->it, 0, w->it.p->blocks[0].nops);
    vq_tensor *params[4], *grads[4];
    for (int i = 0; i < m->nparams; i++)
        params[i] = w->it.val[w->param_var[i]];
    CHECK(vq_capture_backward(engine, w->it.val[w->loss], params, m->nparams, grads));
    const vq_program *mp = w->upd.p;
    for (int i = 0; i < m->nparams; i++) { /* the gradients under main's names */
        vq_tensor_release(w->upd.val[w->grad_var[i]]);
        w->upd.val[w->grad_var[i]] = grads[i];
    }
    interp_run(&w->upd, w->first_adam, mp->blocks[0].nops);
    interp_drop(&w->it, w->loss);
    interp_drop(&w->upd, -1);
    CHECK(vq_capture_end(engine));
    w->record_s += bench_now() - t0;
    return read_loss(w->it.val[w->loss]);
}

static void way_init(struct way *w, struct model *m, int mode)
{
    memset(w, 0, sizeof *w);
    w->m = m;
    w->mode = mode;
    w->s = fresh_scope(m);
    if (mode == 0)
        CHECK(vq_exec_new(&w->ex, engine, NULL));
    const vq_program *p = mode == 2 ? m->fwd : m->main;
    interp_init(&w->it, p, w->s, m);
    w->loss = vq__program_find_var(p, "loss");
    if (mode == 2) {
        interp_init(&w->upd, m->main, w->s, m);
        const vq_program *mp = m->main;
        w->first_adam = mp->blocks[0].nops;
        for (int k = 0; k < mp->blocks[0].nops; k++)
            if (!strcmp(mp->ops[mp->blocks[0].ops[k]].type, "adam")) {
                w->first_adam = k;
                break;
            }
        for (int i = 0; i < m->nparams; i++) {
            char name[64];
            snprintf(name, sizeof name, "%s@GRAD", m->params[i]);
            w->param_var[i] = vq__program_find_var(p, m->params[i]);
            w->grad_var[i] = vq__program_find_var(mp, name);
        }
    }
}

static void way_free(struct way *w)
{
    interp_free(&w->it);
    if (w->mode == 2)
        interp_free(&w->upd);
    if (w->ex)
        vq_exec_free(w->ex);
    vq_scope_free(w->s);
}

static int only_way = -1; /* --way: one way only (no loss checks) */

static int bench_model(struct model *m, int steps, int reps)
{
    static const char *names[3] = {"executor", "eager", "captured"};
    double rate[3][64] = {{0}};
    float last[3] = {0};
    double rec_ns = 0, step_ns = 0;
    vq_capture_stats before, after;
    CHECK(vq_capture_get_stats(engine, &before));
    int ops = 0;
    for (int r = 0; r < reps; r++)
        for (int mode = 0; mode < 3; mode++) {
            if (only_way >= 0 && mode != only_way)
                continue;
            struct way w;
            way_init(&w, m, mode);
            step(&w); /* warm: plans and guards built */
            vq_capture_stats s0, s1;
            CHECK(vq_capture_get_stats(engine, &s0));
            w.record_s = 0;
            double t0 = bench_now();
            for (int i = 0; i < steps; i++)
                last[mode] = step(&w);
            double t = bench_now() - t0;
            CHECK(vq_capture_get_stats(engine, &s1));
            rate[mode][r] = steps / t;
            if (mode == 2 && r == reps - 1) {
                ops = (int)((s1.ops_recorded - s0.ops_recorded) / (uint64_t)steps);
                rec_ns = 1e9 * w.record_s / ((double)steps * ops);
                step_ns = 1e9 * t / ((double)steps * ops);
            }
            way_free(&w);
        }
    CHECK(vq_capture_get_stats(engine, &after));
    double med[3];
    for (int mode = 0; mode < 3; mode++)
        med[mode] = bench_median(rate[mode], reps);
    printf("%s: steps/s (median of %d x %d steps):", m->name, reps, steps);
    for (int mode = 0; mode < 3; mode++)
        printf(" %s %.0f", names[mode], med[mode]);
    printf("\n");
    if (only_way < 0)
        printf("  captured / executor %.2fx, captured / eager %.2fx\n", med[2] / med[0],
               med[2] / med[1]);
    printf("  captured step: %d recorded calls; ns per call in the caller (record + guard + "
           "push) %.0f; ns per call of the whole step %.0f\n",
           ops, rec_ns, step_ns);
    printf("  capture counters: %llu segments, %llu plan cache hits, %llu plans built, %llu of "
           "%llu calls matched a node\n",
           (unsigned long long)(after.segments_run - before.segments_run),
           (unsigned long long)(after.cache_hits - before.cache_hits),
           (unsigned long long)(after.plans_built - before.plans_built),
           (unsigned long long)(after.op_hits - before.op_hits),
           (unsigned long long)(after.ops_recorded - before.ops_recorded));
    printf("  last losses: executor %.9g eager %.9g captured %.9g\n", last[0], last[1], last[2]);
    if (only_way >= 0)
        return 0;
    if (memcmp(&last[1], &last[2], sizeof last[1])) {
        fprintf(stderr, "capture_bench: %s: the captured loss differs from the eager one\n",
                m->name);
        return 1;
    }
    if (fabsf(last[0] - last[1]) > 1e-4f * (1 + fabsf(last[1]))) {
        fprintf(stderr, "capture_bench: %s: the executor's loss differs\n", m->name);
        return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int steps = 2000, reps = 5, workers = 2, only_model = -1;
    static const char *model_names[2] = {"seed", "mlp"},
                      *way_names[3] = {"executor", "eager", "captured"};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tiny")) {
            steps = 20;
            reps = 1;
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            steps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--workers") && i + 1 < argc) {
            workers = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--model") && i + 1 < argc) {
            i++;
            for (int k = 0; k < 2; k++)
                if (!strcmp(argv[i], model_names[k]))
                    only_model = k;
            if (only_model < 0)
                return 2;
        } else if (!strcmp(argv[i], "--way") && i + 1 < argc) {
            i++;
            for (int k = 0; k < 3; k++)
                if (!strcmp(argv[i], way_names[k]))
                    only_way = k;
            if (only_way < 0)
                return 2;
        } else {
            fprintf(stderr, "usage: capture_bench [--tiny] [--steps K] [--reps R] [--workers N] "
                            "[--model seed|mlp] [--way executor|eager|captured]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 64 || steps < 1)
        return 2;
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = workers};
    CHECK(vq_engine_new(&engine, &o));
    printf("capture_bench: threaded engine, %d workers\n", workers);
    struct model models[2];
    memset(models, 0, sizeof models);
    build_seed(&models[0]);
    build_mlp(&models[1]);
    int rc = 0;
    for (int k = 0; k < 2; k++) {
        if (only_model < 0 || only_model == k)
            rc |= bench_model(&models[k], k ? steps / 4 : steps, reps);
        vq_program_free(models[k].startup);
        vq_program_free(models[k].fwd);
        vq_program_free(models[k].main);
        vq_tensor_release(models[k].bx);
        vq_tensor_release(models[k].by);
    }
    vq_engine_free(engine);
    return rc;
}
