/* Serial equivalence on random workloads (DESIGN.md 2.1): many vars, ops
 * with random read and write sets (duplicates, read+write of one var), sync
 * and async ops (some finished from another thread after a delay), random
 * priorities, failing ops, var deletions, waits in the middle, prebuilt ops.
 * Each workload runs on an engine and, as the oracle, through a plain serial
 * model of DESIGN.md 2.5 in this file; every op's inputs, every value and
 * every error are compared.
 *
 * VARQ_TEST_SEED=N replays a seed (printed on failure); VARQ_TEST_OPS=N sets
 * the ops per run (default 350000, 20000 under sanitizers). */
#include <varq/varq.h>

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DEFAULT_OPS 20000
#else
#define DEFAULT_OPS 350000
#endif

#define NSLOTS 48
#define MAXR 4
#define MAXW 3
#define SWEEP NSLOTS /* a wait step waits on every slot */

enum { STEP_OP, STEP_DELETE, STEP_WAIT };

struct step {
    int kind;
    int nr, nw;
    int rslot[MAXR], wslot[MAXW];
    int rcell[MAXR], wcell[SWEEP];  /* resolved at generation: var incarnations */
    int fail;                      /* error the op returns, or 0 */
    int async;                     /* 0 sync, 1 async finished inline, 2 finished later */
    int priority;
    int prebuilt;
    int slot;                      /* STEP_DELETE; STEP_WAIT: first of SWEEP slots */
    int expect_err[SWEEP];         /* STEP_WAIT: the model's answers */
};

struct run {
    struct step *steps;
    int nsteps, ncells;
    uint64_t *val;       /* one value per var incarnation */
    uint64_t *seen;      /* per op: the hash of its inputs; 0 = did not run */
    int *cell_err;       /* model only */
    vq_done **dones;     /* async ops waiting for the finisher */
};

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* The body of op i: hash its inputs, then (unless it fails) write. */
static int body(struct run *r, int i)
{
    const struct step *s = &r->steps[i];
    uint64_t h = mix((uint64_t)i + 1);
    for (int k = 0; k < s->nr; k++)
        h = mix(h ^ r->val[s->rcell[k]]);
    for (int k = 0; k < s->nw; k++)
        h = mix(h ^ r->val[s->wcell[k]] ^ (uint64_t)k);
    r->seen[i] = h | 1;
    if (s->fail)
        return s->fail;
    for (int k = 0; k < s->nw; k++)
        r->val[s->wcell[k]] = mix(h + (uint64_t)k);
    return 0;
}

/* ---- the oracle: DESIGN.md 2.5 run one op at a time ---- */

static bool in_list(const int *a, int n, int x)
{
    for (int i = 0; i < n; i++)
        if (a[i] == x)
            return true;
    return false;
}

static void model_run(struct run *r)
{
    for (int i = 0; i < r->nsteps; i++) {
        struct step *s = &r->steps[i];
        if (s->kind == STEP_WAIT) {
            for (int k = 0; k < SWEEP; k++) {
                s->expect_err[k] = r->cell_err[s->wcell[k]];
                r->cell_err[s->wcell[k]] = 0;
            }
            continue;
        }
        if (s->kind == STEP_DELETE)
            continue;
        /* The failed var that skips the op: first among its writes, then
         * its reads, each var once. */
        int cells[MAXR + MAXW], n = 0;
        for (int k = 0; k < s->nw; k++)
            if (!in_list(cells, n, s->wcell[k]))
                cells[n++] = s->wcell[k];
        for (int k = 0; k < s->nr; k++)
            if (!in_list(cells, n, s->rcell[k]))
                cells[n++] = s->rcell[k];
        int err = 0;
        for (int k = 0; k < n && !err; k++)
            err = r->cell_err[cells[k]];
        if (!err)
            err = body(r, i);
        if (err)
            for (int k = 0; k < s->nw; k++)
                if (!r->cell_err[s->wcell[k]])
                    r->cell_err[s->wcell[k]] = err;
    }
}

/* ---- the workload ---- */

static uint64_t rng_state;

static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

static void generate(struct run *r, int nsteps, uint64_t seed)
{
    rng_state = seed * 2654435761u + 1;
    r->steps = calloc((size_t)nsteps, sizeof *r->steps);
    cr_assert_not_null(r->steps);
    int cell_of[NSLOTS];
    int ncells = 0;
    for (int i = 0; i < NSLOTS; i++)
        cell_of[i] = ncells++;
    for (int i = 0; i < nsteps; i++) {
        struct step *s = &r->steps[i];
        uint32_t dice = rnd(1000);
        if (dice < 8) {
            s->kind = STEP_DELETE;
            s->slot = (int)rnd(NSLOTS);
            cell_of[s->slot] = ncells++;
            continue;
        }
        if (dice < 9) {
            s->kind = STEP_WAIT;
            s->slot = (int)rnd(NSLOTS);
            for (int k = 0; k < SWEEP; k++)
                s->wcell[k] = cell_of[(s->slot + k) % NSLOTS];
            continue;
        }
        s->kind = STEP_OP;
        s->nr = (int)rnd(MAXR + 1);
        s->nw = (int)rnd(MAXW + 1);
        /* Slots cluster so that ops collide often; some repeat in one op. */
        int base = (int)rnd(NSLOTS);
        for (int k = 0; k < s->nr; k++)
            s->rslot[k] = (base + (int)rnd(8)) % NSLOTS;
        for (int k = 0; k < s->nw; k++)
            s->wslot[k] = rnd(4) == 0 && s->nr ? s->rslot[rnd((uint32_t)s->nr)]
                                                : (base + (int)rnd(8)) % NSLOTS;
        for (int k = 0; k < s->nr; k++)
            s->rcell[k] = cell_of[s->rslot[k]];
        for (int k = 0; k < s->nw; k++)
            s->wcell[k] = cell_of[s->wslot[k]];
        s->fail = rnd(3000) == 0 ? -1000 - (int)rnd(5) : 0;
        uint32_t a = rnd(10);
        s->async = a == 0 ? 1 : a == 1 ? 2 : 0;
        s->priority = (int)rnd(5) - 2;
        s->prebuilt = rnd(20) == 0;
    }
    r->nsteps = nsteps;
    r->ncells = ncells;
}

static void run_alloc(struct run *r, const struct run *from)
{
    *r = *from;
    r->val = calloc((size_t)r->ncells, sizeof *r->val);
    r->seen = calloc((size_t)r->nsteps, sizeof *r->seen);
    r->cell_err = calloc((size_t)r->ncells, sizeof *r->cell_err);
    cr_assert(r->val && r->seen && r->cell_err);
}

static void run_free(struct run *r)
{
    free(r->val);
    free(r->seen);
    free(r->cell_err);
}

/* ---- async ops finished later by another thread ---- */

struct finisher {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct job {
        struct run *r;
        int i;
        vq_done *done;
    } *jobs;
    int head, tail, cap;
    bool stop;
    pthread_t thread;
};

static struct finisher fin;

static void *finisher_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&fin.lock);
    for (;;) {
        while (fin.head == fin.tail && !fin.stop)
            pthread_cond_wait(&fin.cond, &fin.lock);
        if (fin.head == fin.tail)
            break;
        struct job j = fin.jobs[fin.head++ % fin.cap];
        pthread_mutex_unlock(&fin.lock);
        for (volatile int spin = 0; spin < (j.i % 7) * 50; spin++)
            ; /* a little delay, different per op */
        vq_done_finish(j.done, body(j.r, j.i));
        pthread_mutex_lock(&fin.lock);
    }
    pthread_mutex_unlock(&fin.lock);
    return NULL;
}

static void finisher_start(int cap)
{
    pthread_mutex_init(&fin.lock, NULL);
    pthread_cond_init(&fin.cond, NULL);
    fin.jobs = malloc((size_t)cap * sizeof *fin.jobs);
    fin.cap = cap;
    fin.head = fin.tail = 0;
    fin.stop = false;
    pthread_create(&fin.thread, NULL, finisher_main, NULL);
}

static void finisher_stop(void)
{
    pthread_mutex_lock(&fin.lock);
    fin.stop = true;
    pthread_cond_signal(&fin.cond);
    pthread_mutex_unlock(&fin.lock);
    pthread_join(fin.thread, NULL);
    free(fin.jobs);
}

/* ---- running a workload on an engine ---- */

struct op_arg {
    struct run *r;
    int i;
};

static atomic_long args_freed;

static int sync_body(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct op_arg *a = arg;
    return body(a->r, a->i);
}

static void async_body(void *arg, const vq_exec_ctx *x, vq_done *done)
{
    (void)x;
    struct op_arg *a = arg;
    if (a->r->steps[a->i].async == 1) {
        vq_done_finish(done, body(a->r, a->i));
        return;
    }
    pthread_mutex_lock(&fin.lock);
    fin.jobs[fin.tail++ % fin.cap] = (struct job){a->r, a->i, done};
    pthread_cond_signal(&fin.cond);
    pthread_mutex_unlock(&fin.lock);
}

static void count_arg_free(void *arg)
{
    (void)arg;
    atomic_fetch_add(&args_freed, 1);
}

static uint64_t seed_of_run(void)
{
    const char *s = getenv("VARQ_TEST_SEED");
    return s ? strtoull(s, NULL, 10) : (uint64_t)time(NULL);
}

static int ops_of_run(void)
{
    const char *s = getenv("VARQ_TEST_OPS");
    return s ? atoi(s) : DEFAULT_OPS;
}

static void run_on_engine(struct run *r, int kind, int workers, uint64_t seed)
{
    vq_engine_opts o = {.kind = kind, .cpu_workers = workers};
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    finisher_start(r->nsteps + 1);
    struct op_arg *args = malloc((size_t)r->nsteps * sizeof *args);
    vq_var *slot[NSLOTS];
    for (int i = 0; i < NSLOTS; i++)
        slot[i] = vq_var_new(e, "slot");
    long pushed = 0;
    atomic_store(&args_freed, 0);
    for (int i = 0; i < r->nsteps; i++) {
        struct step *s = &r->steps[i];
        if (s->kind == STEP_DELETE) {
            cr_assert_eq(vq_var_free(e, slot[s->slot]), 0, "seed %llu", (unsigned long long)seed);
            slot[s->slot] = vq_var_new(e, "slot");
            continue;
        }
        if (s->kind == STEP_WAIT) {
            for (int k = 0; k < SWEEP; k++) {
                int err = vq_wait_var(e, slot[(s->slot + k) % NSLOTS]);
                cr_assert_eq(err, s->expect_err[k],
                             "seed %llu: step %d: vq_wait_var gave %d, serially %d",
                             (unsigned long long)seed, i, err, s->expect_err[k]);
            }
            continue;
        }
        vq_var *reads[MAXR], *writes[MAXW];
        for (int k = 0; k < s->nr; k++)
            reads[k] = slot[s->rslot[k]];
        for (int k = 0; k < s->nw; k++)
            writes[k] = slot[s->wslot[k]];
        args[i] = (struct op_arg){r, i};
        vq_task t = {.arg = &args[i], .arg_free = count_arg_free, .reads = reads,
                     .nreads = s->nr, .writes = writes, .nwrites = s->nw,
                     .priority = s->priority, .name = "random"};
        if (s->async)
            t.async_fn = async_body;
        else
            t.fn = sync_body;
        if (s->prebuilt) {
            vq_opr *op = vq_opr_new(e, &t);
            cr_assert_not_null(op, "%s", vq_errmsg());
            cr_assert_eq(vq_push_opr(e, op), 0);
            vq_opr_free(e, op);
        } else {
            cr_assert_eq(vq_push(e, &t), 0, "%s", vq_errmsg());
        }
        pushed++;
    }
    int first = vq_wait_all(e);
    for (int i = 0; i < NSLOTS; i++)
        r->cell_err[i] = vq_wait_var(e, slot[i]); /* indexed by slot here */
    cr_assert_eq(atomic_load(&args_freed), pushed, "seed %llu: arg_free ran %ld times for %ld ops",
                 (unsigned long long)seed, atomic_load(&args_freed), pushed);
    bool any_failure = false;
    for (int i = 0; i < r->nsteps; i++)
        any_failure |= r->steps[i].kind == STEP_OP && r->steps[i].fail && r->seen[i];
    if (any_failure)
        cr_assert(first <= -1000 && first >= -1004, "seed %llu: vq_wait_all gave %d",
                  (unsigned long long)seed, first);
    else
        cr_assert_eq(first, 0, "seed %llu: vq_wait_all gave %d without a failure",
                     (unsigned long long)seed, first);
    vq_engine_free(e);
    finisher_stop();
    free(args);
}

static void check(int kind, int workers)
{
    uint64_t seed = seed_of_run();
    int nops = ops_of_run();
    struct run plan, model, got;
    generate(&plan, nops, seed);
    run_alloc(&model, &plan);
    model_run(&model); /* also fills the steps' expect_err for the waits */
    run_alloc(&got, &plan);
    run_on_engine(&got, kind, workers, seed);

    long ran = 0;
    for (int i = 0; i < plan.nsteps; i++) {
        if (plan.steps[i].kind != STEP_OP)
            continue;
        ran += model.seen[i] != 0;
        cr_assert_eq(got.seen[i] != 0, model.seen[i] != 0,
                     "seed %llu: op %d %s on the engine but %s serially",
                     (unsigned long long)seed, i, got.seen[i] ? "ran" : "was skipped",
                     model.seen[i] ? "ran" : "was skipped");
        cr_assert_eq(got.seen[i], model.seen[i], "seed %llu: op %d saw other inputs than serially",
                     (unsigned long long)seed, i);
    }
    for (int c = 0; c < plan.ncells; c++)
        cr_assert_eq(got.val[c], model.val[c], "seed %llu: var incarnation %d differs",
                     (unsigned long long)seed, c);
    /* The slots' final errors: the model's for the slots' last cells. */
    int last_cell[NSLOTS];
    for (int i = 0; i < NSLOTS; i++)
        last_cell[i] = i;
    int next = NSLOTS;
    for (int i = 0; i < plan.nsteps; i++)
        if (plan.steps[i].kind == STEP_DELETE)
            last_cell[plan.steps[i].slot] = next++;
    for (int i = 0; i < NSLOTS; i++)
        cr_assert_eq(got.cell_err[i], model.cell_err[last_cell[i]],
                     "seed %llu: slot %d ends with error %d, serially %d",
                     (unsigned long long)seed, i, got.cell_err[i], model.cell_err[last_cell[i]]);
    cr_log_info("seed %llu: %ld of %d steps ran", (unsigned long long)seed, ran, nops);
    cr_assert_gt(ran, nops / 4, "seed %llu: too few ops ran for a meaningful check",
                 (unsigned long long)seed);
    run_free(&model);
    run_free(&got);
    free(plan.steps);
}

Test(varq_random, threaded_1_worker_matches_serial, .timeout = 300)
{
    check(VQ_ENGINE_THREADED, 1);
}

Test(varq_random, threaded_2_workers_match_serial, .timeout = 300)
{
    check(VQ_ENGINE_THREADED, 2);
}

Test(varq_random, threaded_8_workers_match_serial, .timeout = 300)
{
    check(VQ_ENGINE_THREADED, 8);
}

Test(varq_random, naive_matches_serial, .timeout = 300)
{
    check(VQ_ENGINE_NAIVE, 1);
}
