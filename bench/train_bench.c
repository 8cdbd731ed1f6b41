/* train_bench: training steps per second through the graph layer, for the
 * two models of the examples, to compare with PyTorch eager
 * (bench/train_torch.py runs the same models on the same batches; the
 * comparison is scripts/train_bench.sh).
 *
 *   seed  examples/linear_regression.c: x f32[16,16] = ones, label
 *         f32[16,1] = ones, Linear(16 -> 1) "out", MSE "loss", Adam lr 0.001
 *   mlp   examples/mlp_digits.c: x f32[64,64], y i64[64], Linear(64 -> 128)
 *         "h1", ReLU, Linear(128 -> 10) "logits", softmax cross-entropy,
 *         Adam lr 0.005. Batches: rows [64 b, 64 b + 64) of DIR/train_x.npy
 *         and DIR/train_y.npy for b = 0 .. n/64 - 1 (the rows are already
 *         shuffled by scripts/digits_to_npy.py), step s training on batch
 *         s mod (n/64); without DIR, 22 batches of synthetic data of the same
 *         shapes (x uniform in [0, 1), y in 0..9, from a fixed splitmix64
 *         stream that train_torch.py reproduces).
 *
 * Each model: startup once, W warm-up steps, then R repetitions of K timed
 * steps; the step counter runs on across warm-up and repetitions (batch of
 * step s = s mod nbatches). Reported: the median (min, max) over the
 * repetitions of K / seconds.
 *   sync   one vq_exec_run per step, fetching the loss and reading it, as a
 *          training loop does.
 *   async  vq_exec_run_async with up to D steps in flight (default 4): step
 *          s + D is pushed once the loss of step s is fetched and read. The
 *          engine orders the steps through the parameters they share, so
 *          the result is that of the sync loop; it only overlaps one step's
 *          tail with the next one's start. The losses of the first steps are
 *          checked against the sync run's (same initialization, same
 *          batches).
 *
 * usage: train_bench [--tiny] [--json FILE] [--digits DIR] [--workers N]
 *                    [--steps-seed K] [--steps-mlp K] [--reps R]
 *                    [--warmup W] [--inflight D] [--init-dir DIR]
 *                    [--engine threaded|naive] [--gpu ID]
 *                    [--kernel-share TRACE]
 *   --gpu       runs the programs on GPU ID (the backend VARQ_GPU_BACKEND
 *               picks); the loss is copied to the host each step.
 *   --tiny      a few steps of each model and mode (well under 2 s); exits 1
 *               unless the loss decreases. No timing is asserted.
 *   In every mode the exit status is 1 when the loss does not decrease or
 *   when an async step's loss differs from the sync step's.
 *   --init-dir  saves each model's parameters right after startup as
 *               DIR/<model>/<name>.npy, for train_torch.py --init-dir, so
 *               that both sides start from the same weights (their losses
 *               then agree)
 *   --engine    threaded (the default) or naive (every op in the thread that
 *               pushes it: no handoff between threads; for comparison)
 *   --kernel-share  after the benchmark, runs the MLP's sync loop once more
 *               (W warm-up steps, K timed steps) on the CPU, on an engine
 *               that profiles,
 *               and prints the share of the step spent inside the ops'
 *               kernels (the time during which an op runs, from the
 *               profiler's trace, written to TRACE, over the step's wall
 *               time) and the op time by op: the distance to the compute
 *               floor. In the JSON as "mlp_kernels".
 *   The JSON also carries each model's sync losses of the first steps
 *   ("first_losses"), to compare with a peer started from the same weights. */
#include <varq/varq.h>
#include "measure.h" /* bench_now, bench_median, bench_stats */

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define SYNTH_BATCHES 22 /* as many full batches as the digits training set has */
#define MAX_INFLIGHT 64
#define CHECK_STEPS 64 /* losses of the first steps compared between sync and async */

struct cfg {
    int tiny, workers, steps_seed, steps_mlp, reps, warmup, inflight, engine;
    int gpu; /* the executor's GPU, or -1: the CPU */
    const char *json, *digits, *init_dir, *kernel_trace;
};

static double median(const double *v, int n)
{
    double *t = malloc((size_t)n * sizeof *t);
    memcpy(t, v, (size_t)n * sizeof *t);
    double m = bench_median(t, n);
    free(t);
    return m;
}

static int fail(const char *what)
{
    fprintf(stderr, "train_bench: %s: %s\n", what, vq_errmsg());
    return -1;
}

#define TRY(call)                                                                          \
    do {                                                                                   \
        if ((call) < 0)                                                                    \
            return fail(#call);                                                            \
    } while (0)

/* ---- models and batches ---- */

struct model {
    const char *name;
    const char *x, *y; /* feed names */
    vq_program *startup, *main;
    int nbatches;
    vq_tensor **bx, **by; /* nbatches each */
    const char *data;     /* where the batches come from */
};

static int build_seed(struct model *m)
{
    m->name = "seed";
    m->x = "x";
    m->y = "label";
    m->data = "ones";
    TRY(vq_program_new(&m->startup));
    TRY(vq_program_new(&m->main));
    int64_t xs[2] = {16, 16}, ls[2] = {16, 1};
    TRY(vq_program_add_var(m->main, 0, "x", VQ_F32, 2, xs, false));
    TRY(vq_program_add_var(m->main, 0, "label", VQ_F32, 2, ls, false));
    TRY(vq_layer_linear(m->main, m->startup, "x", "out", 1, 2026));
    TRY(vq_layer_mse_loss(m->main, "out", "label", "loss"));
    vq_optimizer adam = {.kind = VQ_OPT_ADAM, .learning_rate = 0.001};
    TRY(vq_optimizer_minimize(m->main, m->startup, "loss", &adam));
    m->nbatches = 1;
    m->bx = calloc(1, sizeof *m->bx);
    m->by = calloc(1, sizeof *m->by);
    TRY(vq_tensor_new(&m->bx[0], VQ_F32, 2, xs));
    TRY(vq_tensor_new(&m->by[0], VQ_F32, 2, ls));
    float *d = vq_tensor_data(m->bx[0]);
    for (int i = 0; i < 16 * 16; i++)
        d[i] = 1;
    d = vq_tensor_data(m->by[0]);
    for (int i = 0; i < 16; i++)
        d[i] = 1;
    return 0;
}

/* splitmix64, reproduced by train_torch.py for the synthetic batches */
static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int load_npy(const char *dir, const char *name, vq_tensor **t)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    if (access(path, R_OK) != 0)
        return 1; /* missing: synthetic data */
    return vq_npy_load(path, t) < 0 ? fail(path) : 0;
}

static int build_mlp(struct model *m, const char *dir)
{
    m->name = "mlp";
    m->x = "x";
    m->y = "y";
    TRY(vq_program_new(&m->startup));
    TRY(vq_program_new(&m->main));
    int64_t xs[2] = {-1, 64}, ys[1] = {-1};
    TRY(vq_program_add_var(m->main, 0, "x", VQ_F32, 2, xs, false));
    TRY(vq_program_add_var(m->main, 0, "y", VQ_I64, 1, ys, false));
    TRY(vq_layer_linear(m->main, m->startup, "x", "h1", 128, 1));
    TRY(vq_layer_activation(m->main, "relu", "h1", "a1"));
    TRY(vq_layer_linear(m->main, m->startup, "a1", "logits", 10, 3));
    TRY(vq_layer_softmax_cross_entropy(m->main, "logits", "y", "probs", "loss"));
    vq_optimizer adam = {.kind = VQ_OPT_ADAM, .learning_rate = 0.005};
    TRY(vq_optimizer_minimize(m->main, m->startup, "loss", &adam));

    vq_tensor *tx = NULL, *ty = NULL;
    int rx = load_npy(dir, "train_x", &tx), ry = rx ? 1 : load_npy(dir, "train_y", &ty);
    if (rx < 0 || ry < 0)
        return -1;
    int64_t bxs[2] = {BATCH, 64}, bys[1] = {BATCH};
    if (rx == 0 && ry == 0) {
        if (vq_tensor_dtype(tx) != VQ_F32 || vq_tensor_ndim(tx) != 2 ||
            vq_tensor_shape(tx)[1] != 64 || vq_tensor_dtype(ty) != VQ_I64 ||
            vq_tensor_numel(ty) != vq_tensor_shape(tx)[0] || vq_tensor_shape(tx)[0] < BATCH) {
            fprintf(stderr, "train_bench: %s: train_x must be f32[n,64] and train_y i64[n]\n",
                    dir);
            return -1;
        }
        m->nbatches = (int)(vq_tensor_shape(tx)[0] / BATCH);
        m->data = "digits";
    } else {
        m->nbatches = SYNTH_BATCHES;
        m->data = "synthetic";
    }
    m->bx = calloc((size_t)m->nbatches, sizeof *m->bx);
    m->by = calloc((size_t)m->nbatches, sizeof *m->by);
    uint64_t rng = 20260101;
    for (int b = 0; b < m->nbatches; b++) {
        if (m->data[0] == 'd') {
            TRY(vq_tensor_from(&m->bx[b], VQ_F32, 2, bxs,
                               (float *)vq_tensor_data(tx) + (size_t)b * BATCH * 64));
            TRY(vq_tensor_from(&m->by[b], VQ_I64, 1, bys,
                               (int64_t *)vq_tensor_data(ty) + (size_t)b * BATCH));
        } else {
            TRY(vq_tensor_new(&m->bx[b], VQ_F32, 2, bxs));
            TRY(vq_tensor_new(&m->by[b], VQ_I64, 1, bys));
            float *x = vq_tensor_data(m->bx[b]);
            int64_t *y = vq_tensor_data(m->by[b]);
            for (int i = 0; i < BATCH * 64; i++)
                x[i] = (float)(splitmix64(&rng) >> 40) * (1.0f / 16777216.0f);
            for (int i = 0; i < BATCH; i++)
                y[i] = (int64_t)(splitmix64(&rng) % 10);
        }
    }
    vq_tensor_release(tx);
    vq_tensor_release(ty);
    return 0;
}

static void model_free(struct model *m)
{
    for (int b = 0; b < m->nbatches; b++) {
        if (m->bx)
            vq_tensor_release(m->bx[b]);
        if (m->by)
            vq_tensor_release(m->by[b]);
    }
    free(m->bx);
    free(m->by);
    vq_program_free(m->startup);
    vq_program_free(m->main);
}

/* ---- training loops ---- */

struct trainer {
    struct model *m;
    vq_engine *e;
    vq_exec *ex;
    vq_scope *s;
    long step;     /* steps run so far (selects the batch) */
    float *losses; /* of steps 0 .. nlosses-1, when recorded */
    long nlosses;
    float first_loss, last_loss;
};

static void note_loss(struct trainer *t, float loss)
{
    if (t->step == 0)
        t->first_loss = loss;
    t->last_loss = loss;
    if (t->step < t->nlosses)
        t->losses[t->step] = loss;
    t->step++;
}

/* The loss a run fetched, read on the host: a GPU executor's fetches are
 * on the device and come back through a copy (what .item() does in
 * PyTorch). */
static float loss_of(struct trainer *t, vq_tensor *fetched)
{
    if (vq_tensor_device(fetched).kind == VQ_DEV_CPU)
        return *(const float *)vq_tensor_data(fetched);
    vq_tensor *h;
    if (vq_tensor_copy_to(t->e, fetched, (vq_ctx){VQ_DEV_CPU, 0}, &h) < 0 ||
        vq_tensor_wait(h) < 0) {
        fail("copying the loss to the host");
        return NAN;
    }
    float loss = *(const float *)vq_tensor_data(h);
    vq_tensor_release(h);
    return loss;
}

static int sync_steps(struct trainer *t, int k)
{
    struct model *m = t->m;
    for (int i = 0; i < k; i++) {
        int b = (int)(t->step % m->nbatches);
        vq_feed feeds[2] = {{m->x, m->bx[b]}, {m->y, m->by[b]}};
        vq_fetch fetch = {"loss", NULL};
        if (vq_exec_run(t->ex, m->main, t->s, feeds, 2, &fetch, 1) < 0)
            return fail("vq_exec_run");
        note_loss(t, loss_of(t, fetch.tensor));
        vq_tensor_release(fetch.tensor);
    }
    return 0;
}

struct slot {
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
    vq_fetch fetch;
    int done, err;
    char msg[256];
};

static void slot_done(void *user, int err)
{
    struct slot *sl = user;
    pthread_mutex_lock(sl->mu);
    sl->err = err;
    if (err)
        snprintf(sl->msg, sizeof sl->msg, "%s", vq_errmsg());
    sl->done = 1;
    pthread_cond_broadcast(sl->cv);
    pthread_mutex_unlock(sl->mu);
}

/* Waits for the step in sl, reads its loss. */
static int slot_retire(struct trainer *t, struct slot *sl)
{
    pthread_mutex_lock(sl->mu);
    while (!sl->done)
        pthread_cond_wait(sl->cv, sl->mu);
    pthread_mutex_unlock(sl->mu);
    if (sl->err) {
        fprintf(stderr, "train_bench: async step: %s\n", sl->msg);
        return -1;
    }
    note_loss(t, loss_of(t, sl->fetch.tensor));
    vq_tensor_release(sl->fetch.tensor);
    sl->fetch.tensor = NULL;
    return 0;
}

static int async_steps(struct trainer *t, int k, int depth)
{
    struct model *m = t->m;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    struct slot slots[MAX_INFLIGHT];
    long base = t->step; /* steps retired; the next to push is base + pushed */
    int rc = 0, pushed = 0, retired = 0;
    for (; pushed < k; pushed++) {
        struct slot *sl = &slots[pushed % depth];
        if (pushed >= depth) {
            if ((rc = slot_retire(t, sl)) < 0)
                break;
            retired++;
        }
        *sl = (struct slot){.mu = &mu, .cv = &cv, .fetch = {"loss", NULL}};
        int b = (int)((base + pushed) % m->nbatches);
        vq_feed feeds[2] = {{m->x, m->bx[b]}, {m->y, m->by[b]}};
        if (vq_exec_run_async(t->ex, m->main, t->s, feeds, 2, &sl->fetch, 1, slot_done, sl) <
            0) {
            rc = fail("vq_exec_run_async");
            break;
        }
    }
    /* retire the rest, in order (also after an error: slots must not die
     * while runs still write to them) */
    for (; retired < pushed; retired++) {
        struct slot *sl = &slots[retired % depth];
        if (rc == 0)
            rc = slot_retire(t, sl);
        else {
            pthread_mutex_lock(&mu);
            while (!sl->done)
                pthread_cond_wait(&cv, &mu);
            pthread_mutex_unlock(&mu);
            vq_tensor_release(sl->fetch.tensor);
        }
    }
    return rc;
}

/* ---- one model, one mode ---- */

struct result {
    const char *mode; /* "sync" or "async" */
    int steps, reps;
    double median, min, max; /* steps/s */
    double *per_rep;
    float first_loss, last_loss;
    long total_steps;
};

static int save_init(const struct cfg *c, struct model *m, vq_scope *s)
{
    char dir[1024];
    if (mkdir(c->init_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "train_bench: cannot create %s: %s\n", c->init_dir, strerror(errno));
        return -1;
    }
    snprintf(dir, sizeof dir, "%s/%s", c->init_dir, m->name);
    TRY(vq_scope_save(s, dir));
    return 0;
}

/* Trains m from a fresh scope on a fresh executor: warm-up, then the timed
 * repetitions. (A fresh executor, not only a fresh scope: the executor
 * knows scopes by address, and a new scope allocated where a freed one was
 * would find that one's cached plans, bound to its tensors.) */
static int run_mode(const struct cfg *c, vq_engine *e, struct model *m, int k, int async,
                    float *losses, long nlosses, struct result *res)
{
    vq_exec *ex;
    vq_exec_opts xo = {.device = {VQ_DEV_CPU, 0}};
    if (c->gpu >= 0)
        xo.device = (vq_ctx){VQ_DEV_GPU, c->gpu};
    TRY(vq_exec_new(&ex, e, &xo));
    struct trainer t = {.m = m, .e = e, .ex = ex, .losses = losses, .nlosses = nlosses};
    int rc = 0;
    if (vq_scope_new(&t.s) < 0) {
        rc = fail("vq_scope_new");
        goto out;
    }
    if (vq_exec_run(ex, m->startup, t.s, NULL, 0, NULL, 0) < 0) {
        rc = fail("startup");
        goto out;
    }
    if (!async && c->init_dir && (rc = save_init(c, m, t.s)) < 0)
        goto out;
    res->mode = async ? "async" : "sync";
    res->steps = k;
    res->reps = c->reps;
    res->per_rep = calloc((size_t)c->reps, sizeof *res->per_rep);
    if (!res->per_rep) {
        rc = -1;
        goto out;
    }
    for (int r = -1; r < c->reps && rc == 0; r++) { /* r = -1: the warm-up */
        int n = r < 0 ? c->warmup : k;
        double t0 = bench_now();
        rc = async ? async_steps(&t, n, c->inflight) : sync_steps(&t, n);
        double dt = bench_now() - t0;
        if (r >= 0)
            res->per_rep[r] = n / dt;
    }
    if (rc == 0) {
        res->median = median(res->per_rep, c->reps);
        res->min = res->max = res->per_rep[0];
        for (int r = 1; r < c->reps; r++) {
            res->min = fmin(res->min, res->per_rep[r]);
            res->max = fmax(res->max, res->per_rep[r]);
        }
        res->first_loss = t.first_loss;
        res->last_loss = t.last_loss;
        res->total_steps = t.step;
    }
out:
    vq_exec_free(ex);
    vq_scope_free(t.s);
    return rc;
}

struct model_result {
    struct model *m;
    struct result sync, async;
    int decreased;
    float first[CHECK_STEPS]; /* the sync losses of the first steps */
    long nfirst;
};

/* The loss went down: the last steps' mean below the first steps' mean. */
static int loss_decreased(const float *l, long n)
{
    long w = n / 4 < 5 ? (n / 4 ? n / 4 : 1) : 5;
    double a = 0, b = 0;
    for (long i = 0; i < w; i++) {
        a += l[i];
        b += l[n - 1 - i];
    }
    return b < a;
}

static int bench_model(const struct cfg *c, vq_engine *e, struct model *m, int k,
                       struct model_result *mr)
{
    long total = (long)c->warmup + (long)k * c->reps;
    long nl = total; /* every loss of the sync run (to check the trend) */
    float *ls = calloc((size_t)nl, sizeof *ls), *la = calloc((size_t)nl, sizeof *la);
    int rc = -1;
    mr->m = m;
    if (!ls || !la)
        goto out;
    if (run_mode(c, e, m, k, 0, ls, nl, &mr->sync) < 0)
        goto out;
    if (run_mode(c, e, m, k, 1, la, nl, &mr->async) < 0)
        goto out;
    /* Same initialization and batches: the two loops compute the same steps. */
    long ncheck = nl < CHECK_STEPS ? nl : CHECK_STEPS;
    memcpy(mr->first, ls, (size_t)ncheck * sizeof *ls);
    mr->nfirst = ncheck;
    for (long i = 0; i < ncheck; i++)
        if (!(fabsf(ls[i] - la[i]) <= 1e-5f * (1 + fabsf(ls[i])))) {
            fprintf(stderr, "train_bench: %s: step %ld: sync loss %.9g, async loss %.9g\n",
                    m->name, i, ls[i], la[i]);
            goto out;
        }
    mr->decreased = loss_decreased(ls, nl);
    rc = 0;
out:
    free(ls);
    free(la);
    return rc;
}

/* ---- the MLP's kernel share (--kernel-share) ---- */

#define MAX_OP_NAMES 64

struct op_time {
    char name[48];
    double us; /* summed durations */
};

struct kernel_share {
    int steps;
    /* per step: wall time; time during which at least one op ran (the
     * union of the ops' intervals); summed op durations (more than the
     * busy time where ops ran at once on two workers) */
    double step_us, busy_us, op_us;
    int nops;
    struct op_time by_op[MAX_OP_NAMES];
    double warm_end;     /* the last op end in the trace dumped after the warm-up */
    double (*iv)[2];     /* [start, end] of the ops that started after warm_end */
    size_t niv, cap_iv;
};

static int cmp_interval(const void *a, const void *b)
{
    double x = ((const double *)a)[0], y = ((const double *)b)[0];
    return x < y ? -1 : x > y;
}

/* Adds sign times the durations of the op events ("ph":"X", one a line) of
 * the Chrome trace vq_profiler_dump wrote at path to ks->by_op, by name.
 * Kernel time is the ops' records: a segment's record, which spans those of
 * the ops it ran, is left out. The pass after the warm-up (sign -1) notes
 * its last op end; the one after the timed steps (sign 1) keeps the
 * intervals of the ops that started later. */
static int trace_add(const char *path, struct kernel_share *ks, double sign)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "train_bench: cannot read %s\n", path);
        return -1;
    }
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        const char *n = strstr(line, "{\"name\":\""), *d = strstr(line, "\"dur\":");
        if (!n || !d || !strstr(line, "\"ph\":\"X\""))
            continue;
        n += strlen("{\"name\":\"");
        int len = (int)strcspn(n, "\""), i = 0;
        if (len == 7 && !strncmp(n, "segment", 7))
            continue; /* the executor's bulk segment: its ops have records of their own */
        if (len >= (int)sizeof ks->by_op[0].name)
            len = (int)sizeof ks->by_op[0].name - 1;
        while (i < ks->nops && (strncmp(ks->by_op[i].name, n, (size_t)len) ||
                                ks->by_op[i].name[len] != '\0'))
            i++;
        if (i == ks->nops) {
            if (ks->nops == MAX_OP_NAMES)
                continue; /* more op kinds than a training step has: not counted */
            snprintf(ks->by_op[ks->nops++].name, sizeof ks->by_op[i].name, "%.*s", len, n);
        }
        const char *ts = strstr(line, "\"ts\":");
        double dur = strtod(d + strlen("\"dur\":"), NULL);
        double t0 = ts ? strtod(ts + strlen("\"ts\":"), NULL) : 0;
        ks->by_op[i].us += sign * dur;
        if (sign < 0 && t0 + dur > ks->warm_end)
            ks->warm_end = t0 + dur;
        if (sign > 0 && t0 >= ks->warm_end) {
            if (ks->niv == ks->cap_iv) {
                size_t cap = ks->cap_iv ? 2 * ks->cap_iv : 4096;
                double(*iv)[2] = realloc(ks->iv, cap * sizeof *iv);
                if (!iv) {
                    fclose(f);
                    return -1;
                }
                ks->iv = iv;
                ks->cap_iv = cap;
            }
            ks->iv[ks->niv][0] = t0;
            ks->iv[ks->niv++][1] = t0 + dur;
        }
    }
    fclose(f);
    return 0;
}

static int cmp_op_time(const void *a, const void *b)
{
    double x = ((const struct op_time *)a)->us, y = ((const struct op_time *)b)->us;
    return x > y ? -1 : x < y;
}

/* The MLP's sync loop on its own engine, created with VQ_ENGINE_PROFILE
 * (its own batches too: a tensor belongs to the first engine it is used
 * with). The trace is dumped after the warm-up and again after K timed
 * steps; the difference of the summed op durations is the kernel time of
 * the K steps. Ops of one step that run at once on two workers both count,
 * and the profiler's record per op is in the step's wall time. */
static int kernel_share(const struct cfg *c, struct kernel_share *ks)
{
    struct model m = {0};
    vq_engine *e = NULL;
    vq_exec *ex = NULL;
    vq_scope *s = NULL;
    vq_engine_opts eo = {.kind = c->engine, .cpu_workers = c->workers,
                         .flags = VQ_ENGINE_PROFILE};
    vq_exec_opts xo = {.device = {VQ_DEV_CPU, 0}};
    int rc = -1;
    if (build_mlp(&m, c->digits) < 0)
        goto out;
    if (vq_engine_new(&e, &eo) < 0 || vq_exec_new(&ex, e, &xo) < 0 || vq_scope_new(&s) < 0 ||
        vq_exec_run(ex, m.startup, s, NULL, 0, NULL, 0) < 0) {
        fail("kernel share: setting up");
        goto out;
    }
    struct trainer t = {.m = &m, .e = e, .ex = ex, .s = s};
    if (sync_steps(&t, c->warmup) < 0)
        goto out;
    if (vq_profiler_dump(e, c->kernel_trace) < 0) {
        fail("kernel share: vq_profiler_dump");
        goto out;
    }
    if (trace_add(c->kernel_trace, ks, -1) < 0)
        goto out;
    double t0 = bench_now();
    if (sync_steps(&t, c->steps_mlp) < 0)
        goto out;
    double dt = bench_now() - t0;
    if (vq_profiler_dump(e, c->kernel_trace) < 0) {
        fail("kernel share: vq_profiler_dump");
        goto out;
    }
    if (trace_add(c->kernel_trace, ks, 1) < 0)
        goto out;
    ks->steps = c->steps_mlp;
    ks->step_us = dt * 1e6 / c->steps_mlp;
    qsort(ks->iv, ks->niv, sizeof *ks->iv, cmp_interval);
    double busy = 0, end = -1;
    for (size_t i = 0; i < ks->niv; i++) { /* the union of the intervals */
        double a = fmax(ks->iv[i][0], end), b = ks->iv[i][1];
        if (b > a)
            busy += b - a;
        end = fmax(end, b);
    }
    ks->busy_us = busy / c->steps_mlp;
    for (int i = 0; i < ks->nops; i++) {
        ks->by_op[i].us /= c->steps_mlp;
        ks->op_us += ks->by_op[i].us;
    }
    qsort(ks->by_op, (size_t)ks->nops, sizeof *ks->by_op, cmp_op_time);
    rc = 0;
out:
    free(ks->iv);
    ks->iv = NULL;
    vq_exec_free(ex);
    vq_scope_free(s);
    model_free(&m); /* the batches first: they hold vars of e */
    vq_engine_free(e);
    return rc;
}

/* ---- output ---- */

static void json_result(FILE *f, const struct result *r)
{
    fprintf(f, "{\"steps\":%d,\"reps\":%d,\"median_steps_per_s\":%.1f,\"min_steps_per_s\":%.1f,"
               "\"max_steps_per_s\":%.1f,\"per_rep\":[",
            r->steps, r->reps, r->median, r->min, r->max);
    for (int i = 0; i < r->reps; i++)
        fprintf(f, "%s%.1f", i ? "," : "", r->per_rep[i]);
    fprintf(f, "],\"first_loss\":%.9g,\"last_loss\":%.9g,\"total_steps\":%ld}", r->first_loss,
            r->last_loss, r->total_steps);
}

static int write_json(const struct cfg *c, const struct model_result *mr, int n,
                      const struct kernel_share *ks)
{
    FILE *f = fopen(c->json, "w");
    if (!f) {
        fprintf(stderr, "train_bench: cannot write %s\n", c->json);
        return -1;
    }
    char date[32];
    time_t t = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    fprintf(f, "{\"runtime\":\"varq\",\"date\":\"%s\",\"cores\":%ld,\"engine\":\"%s\","
               "\"workers\":%d,\"warmup\":%d,\"inflight\":%d,\n\"models\":[",
            date, sysconf(_SC_NPROCESSORS_ONLN),
            c->engine == VQ_ENGINE_NAIVE ? "naive" : "threaded", c->workers, c->warmup,
            c->inflight);
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s\n{\"model\":\"%s\",\"data\":\"%s\",\"batches\":%d,\"sync\":",
                i ? "," : "", mr[i].m->name, mr[i].m->data, mr[i].m->nbatches);
        json_result(f, &mr[i].sync);
        fprintf(f, ",\"async\":");
        json_result(f, &mr[i].async);
        fprintf(f, ",\"first_losses\":[");
        for (long j = 0; j < mr[i].nfirst; j++)
            fprintf(f, "%s%.9g", j ? "," : "", mr[i].first[j]);
        fprintf(f, "]}");
    }
    fprintf(f, "\n]");
    if (ks && ks->steps) {
        fprintf(f, ",\n\"mlp_kernels\":{\"steps\":%d,\"step_us\":%.3f,\"busy_us\":%.3f,"
                   "\"share\":%.4f,\"op_us\":%.3f,\"by_op_us\":{",
                ks->steps, ks->step_us, ks->busy_us, ks->busy_us / ks->step_us, ks->op_us);
        for (int i = 0; i < ks->nops; i++)
            fprintf(f, "%s\"%s\":%.3f", i ? "," : "", ks->by_op[i].name, ks->by_op[i].us);
        fprintf(f, "}}");
    }
    fprintf(f, "}\n");
    return fclose(f) == 0 ? 0 : -1;
}

static void usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--tiny] [--json FILE] [--digits DIR] [--workers N] [--steps-seed K]\n"
            "       [--steps-mlp K] [--reps R] [--warmup W] [--inflight D] [--init-dir DIR]\n"
            "       [--engine threaded|naive] [--gpu ID] [--kernel-share TRACE]\n",
            argv0);
}

int main(int argc, char **argv)
{
    struct cfg c = {.engine = VQ_ENGINE_THREADED, .workers = 2, .steps_seed = 5000,
                    .steps_mlp = 1000, .reps = 5, .warmup = 200, .inflight = 4,
                    .digits = "build/digits", .gpu = -1};
    int steps_seed = 0, steps_mlp = 0, reps = 0, warmup = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "--tiny"))
            c.tiny = 1;
        else if (!strcmp(a, "--json") && has)
            c.json = argv[++i];
        else if (!strcmp(a, "--digits") && has)
            c.digits = argv[++i];
        else if (!strcmp(a, "--init-dir") && has)
            c.init_dir = argv[++i];
        else if (!strcmp(a, "--workers") && has)
            c.workers = atoi(argv[++i]);
        else if (!strcmp(a, "--steps-seed") && has)
            steps_seed = atoi(argv[++i]);
        else if (!strcmp(a, "--steps-mlp") && has)
            steps_mlp = atoi(argv[++i]);
        else if (!strcmp(a, "--reps") && has)
            reps = atoi(argv[++i]);
        else if (!strcmp(a, "--warmup") && has)
            warmup = atoi(argv[++i]);
        else if (!strcmp(a, "--inflight") && has)
            c.inflight = atoi(argv[++i]);
        else if (!strcmp(a, "--engine") && has && !strcmp(argv[i + 1], "threaded"))
            c.engine = VQ_ENGINE_THREADED, i++;
        else if (!strcmp(a, "--engine") && has && !strcmp(argv[i + 1], "naive"))
            c.engine = VQ_ENGINE_NAIVE, i++;
        else if (!strcmp(a, "--gpu") && has)
            c.gpu = atoi(argv[++i]);
        else if (!strcmp(a, "--kernel-share") && has)
            c.kernel_trace = argv[++i];
        else {
            usage(argv[0]);
            return 2;
        }
    }
    if (c.tiny) {
        c.steps_seed = 100;
        c.steps_mlp = 30;
        c.reps = 2;
        c.warmup = 10;
    }
    if (steps_seed > 0)
        c.steps_seed = steps_seed;
    if (steps_mlp > 0)
        c.steps_mlp = steps_mlp;
    if (reps > 0)
        c.reps = reps;
    if (warmup >= 0)
        c.warmup = warmup;
    if (c.workers < 1 || c.inflight < 1 || c.inflight > MAX_INFLIGHT) {
        usage(argv[0]);
        return 2;
    }

    struct model models[2] = {{0}, {0}};
    if (build_seed(&models[0]) < 0 || build_mlp(&models[1], c.digits) < 0)
        return 1;
    vq_engine *e;
    vq_engine_opts eo = {.kind = c.engine, .cpu_workers = c.workers};
    if (vq_engine_new(&e, &eo) < 0)
        return fail("vq_engine_new"), 1;

    char eng[96] = "naive engine";
    if (c.engine == VQ_ENGINE_THREADED)
        snprintf(eng, sizeof eng, "threaded engine, %d workers", c.workers);
    if (c.gpu >= 0)
        snprintf(eng + strlen(eng), sizeof eng - strlen(eng), ", programs on GPU %d", c.gpu);
    printf("varq training steps/s: %s; %d warm-up steps, then %d\n"
           "repetitions; median (min..max) of steps / second\n"
           "  sync  = vq_exec_run per step, loss fetched and read each step\n"
           "  async = vq_exec_run_async, up to %d steps in flight, loss of each fetched\n",
           eng, c.warmup, c.reps, c.inflight);
    printf("seed: Linear(16->1), MSE, Adam lr 0.001; x = ones[16,16], label = ones[16,1]\n");
    printf("mlp:  64->128 ReLU ->10, softmax cross-entropy, Adam lr 0.005; batch 64, %d "
           "batches of %s data%s%s%s\n",
           models[1].nbatches, models[1].data, models[1].data[0] == 'd' ? " (" : "",
           models[1].data[0] == 'd' ? c.digits : "",
           models[1].data[0] == 'd' ? "/train_*.npy)" : " (no digits .npy found)");
    printf("\n%-5s %-6s %6s %26s %12s %12s\n", "model", "mode", "steps", "steps/s",
           "first loss", "last loss");
    struct model_result mr[2];
    memset(mr, 0, sizeof mr);
    int status = 0;
    for (int i = 0; i < 2 && status == 0; i++) {
        int k = i == 0 ? c.steps_seed : c.steps_mlp;
        if (bench_model(&c, e, &models[i], k, &mr[i]) < 0) {
            status = 1;
            break;
        }
        const struct result *rs[2] = {&mr[i].sync, &mr[i].async};
        for (int j = 0; j < 2; j++) {
            char cell[64];
            snprintf(cell, sizeof cell, "%.0f (%.0f..%.0f)", rs[j]->median, rs[j]->min,
                     rs[j]->max);
            printf("%-5s %-6s %6d %26s %12.6g %12.6g\n", models[i].name, rs[j]->mode, k, cell,
                   rs[j]->first_loss, rs[j]->last_loss);
        }
        if (!mr[i].decreased) {
            fprintf(stderr, "train_bench: %s: the loss did not decrease\n", models[i].name);
            status = 1;
        }
        fflush(stdout);
    }
    if (status == 0)
        printf("async/sync: seed %.2fx, mlp %.2fx; the loss decreased in both models\n",
               mr[0].async.median / mr[0].sync.median, mr[1].async.median / mr[1].sync.median);
    struct kernel_share ks = {0};
    if (status == 0 && c.kernel_trace) {
        if (kernel_share(&c, &ks) < 0)
            status = 1;
        else {
            printf("mlp kernel share (profiled sync loop, %d steps): an op runs %.1f us of a "
                   "%.1f us step = %.0f%%; op time %.1f us:",
                   ks.steps, ks.busy_us, ks.step_us, 100 * ks.busy_us / ks.step_us, ks.op_us);
            for (int i = 0; i < ks.nops && i < 6; i++)
                printf("%s %s %.1f us", i ? "," : "", ks.by_op[i].name, ks.by_op[i].us);
            printf("%s (trace: %s)\n", ks.nops > 6 ? ", ..." : "", c.kernel_trace);
        }
    }
    if (status == 0 && c.json && write_json(&c, mr, 2, &ks) < 0)
        status = 1;
    for (int i = 0; i < 2; i++) {
        free(mr[i].sync.per_rep);
        free(mr[i].async.per_rep);
    }
    for (int i = 0; i < 2; i++)
        model_free(&models[i]); /* the batches first: they hold vars of e */
    vq_engine_free(e);
    return status;
}
