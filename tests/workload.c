/* Random engine workloads against a serial model: many vars, ops with random
 * read and write sets (duplicates, read+write of one var), sync and async ops
 * (some finished from another thread after a delay), random priorities,
 * failing ops, var deletions, waits in the middle, prebuilt ops, and with
 * WORKLOAD_GPU ops on two GPUs whose effect runs later on their stream. Each
 * workload runs on an engine and through the plain serial model of
 * docs/design/engine.md ("Errors") below; every op's inputs, every value
 * and every error are compared.
 *
 * With several pushers, each thread pushes steps of its own on shared vars
 * (and deletes only vars of its own), and the model replays all the steps in
 * the order the engine chose: the tickets of the pushes (vq__push_ticket,
 * which the caller passes in, since a program built against varq.pc cannot
 * reach it). */
#include "workload.h"

#include <varq/varq.h>

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NSLOTS 48  /* shared by every pusher */
#define NPRIV 8    /* more pushers: each also has slots of its own, which it deletes */
#define MAXPUSHERS 16
#define MAXSLOTS (NSLOTS + MAXPUSHERS * NPRIV)
#define MAXR 4
#define MAXW 3

enum { STEP_OP, STEP_DELETE, STEP_WAIT };

struct step {
    int kind;
    int nr, nw;
    int rslot[MAXR], wslot[MAXW];
    int rcell[MAXR], wcell[MAXW];  /* resolved at generation: var incarnations */
    int fail;                      /* error the op returns, or 0 */
    int async;                     /* 0 sync, 1 async finished inline, 2 finished later */
    int priority;
    int prebuilt;
    int gpu;                       /* WORKLOAD_GPU: 1 + device, or 0 for a CPU op */
    unsigned props;                /* a GPU op's copy props */
    int slot, cell;                /* STEP_DELETE: the slot; STEP_WAIT: slot and cell */
    int expect_err, got_err;       /* STEP_WAIT: the model's answer and the engine's */
    unsigned long ticket;          /* more pushers: the push's place in the engine's order */
};

struct run {
    struct step *steps;
    int nsteps, ncells;
    int nslots;                 /* NSLOTS, plus NPRIV per pusher when there are several */
    int last_cell[MAXSLOTS];    /* each slot's incarnation at the end */
    uint64_t *val;  /* one value per var incarnation */
    uint64_t *seen; /* per op: the hash of its inputs; 0 = did not run */
    int *err;       /* model: per cell; engine: per slot at the end */
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

/* ---- the oracle: docs/design/engine.md ("Errors"), one op at a time ---- */

static bool in_list(const int *a, int n, int x)
{
    for (int i = 0; i < n; i++)
        if (a[i] == x)
            return true;
    return false;
}

static void model_step(struct run *r, int i)
{
    struct step *s = &r->steps[i];
    if (s->kind == STEP_WAIT) {
        s->expect_err = r->err[s->cell];
        r->err[s->cell] = 0;
        return;
    }
    if (s->kind == STEP_DELETE)
        return;
    /* The failed var that skips the op: first among its writes, then its
     * reads, each var once. */
    int cells[MAXR + MAXW], n = 0;
    for (int k = 0; k < s->nw; k++)
        if (!in_list(cells, n, s->wcell[k]))
            cells[n++] = s->wcell[k];
    for (int k = 0; k < s->nr; k++)
        if (!in_list(cells, n, s->rcell[k]))
            cells[n++] = s->rcell[k];
    int err = 0;
    for (int k = 0; k < n && !err; k++)
        err = r->err[cells[k]];
    if (!err)
        err = body(r, i);
    if (err)
        for (int k = 0; k < s->nw; k++)
            if (!r->err[s->wcell[k]])
                r->err[s->wcell[k]] = err;
}

/* Runs the steps one at a time in the order given (step indices). */
static void model_run(struct run *r, const int *order)
{
    for (int i = 0; i < r->nsteps; i++)
        model_step(r, order[i]);
}

/* ---- generating a workload ---- */

static uint64_t rng_state;

static uint32_t rnd(uint32_t n)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33) % n;
}

int workload_gpus = 2;

/* The slots one pusher uses, as view indices 0 .. nview: the NSLOTS shared
 * slots, then (with several pushers) its NPRIV own, from global slot
 * first_own on. It deletes only view slots from deletable on. */
struct view {
    int nview, deletable, first_own;
};

static int view_slot(const struct view *v, int j)
{
    return j < NSLOTS ? j : v->first_own + (j - NSLOTS);
}

/* Generates steps[0 .. nsteps) of one pusher. cell_of maps every global
 * slot to its current incarnation; *ncells counts incarnations. A wait
 * waits on nwait slots in a row, one step each. */
static void generate_steps(struct step *steps, int nsteps, const struct view *v, int nwait,
                           int *cell_of, int *ncells, bool gpu)
{
    for (int i = 0; i < nsteps; i++) {
        struct step *s = &steps[i];
        uint32_t dice = rnd(1000);
        if (dice < 8) {
            s->kind = STEP_DELETE;
            s->slot = view_slot(v, v->deletable + (int)rnd((uint32_t)(v->nview - v->deletable)));
            cell_of[s->slot] = (*ncells)++;
            continue;
        }
        if (dice < 9) {
            int j = (int)rnd((uint32_t)v->nview);
            for (int k = 0; k < nwait && i < nsteps; k++, i++) {
                s = &steps[i];
                s->kind = STEP_WAIT;
                s->slot = view_slot(v, (j + k) % v->nview);
                s->cell = cell_of[s->slot];
            }
            i--;
            continue;
        }
        s->kind = STEP_OP;
        s->nr = (int)rnd(MAXR + 1);
        s->nw = (int)rnd(MAXW + 1);
        /* Slots cluster so that ops collide often; some repeat in one op. */
        int base = (int)rnd((uint32_t)v->nview);
        for (int k = 0; k < s->nr; k++)
            s->rslot[k] = view_slot(v, (base + (int)rnd(8)) % v->nview);
        for (int k = 0; k < s->nw; k++)
            s->wslot[k] = rnd(4) == 0 && s->nr ? s->rslot[rnd((uint32_t)s->nr)]
                                                : view_slot(v, (base + (int)rnd(8)) % v->nview);
        for (int k = 0; k < s->nr; k++)
            s->rcell[k] = cell_of[s->rslot[k]];
        for (int k = 0; k < s->nw; k++)
            s->wcell[k] = cell_of[s->wslot[k]];
        s->fail = rnd(3000) == 0 ? -1000 - (int)rnd(5) : 0;
        uint32_t a = rnd(10);
        s->async = a == 0 ? 1 : a == 1 ? 2 : 0;
        s->priority = (int)rnd(5) - 2;
        s->prebuilt = rnd(20) == 0;
        /* Drawn only in GPU mode, so that CPU seeds replay as before. */
        if (gpu && rnd(10) < 4) {
            s->gpu = 1 + (int)(rnd(2) % (uint64_t)workload_gpus);
            uint32_t c = rnd(4);
            s->props = c == 2 ? VQ_PROP_COPY_TO_DEV : c == 3 ? VQ_PROP_COPY_FROM_DEV : 0;
            s->async = 0; /* GPU ops are sync: they complete at launch */
        }
        /* Runs of CPU ops on the same vars, as a chain pushes them, which
         * the engine may run as one group (engine/var.c). Decided by the
         * dice already drawn, so that the stream of draws stays the same. */
        const struct step *prev = i > 0 ? &steps[i - 1] : NULL;
        if (dice >= 700 && prev && prev->kind == STEP_OP && !prev->gpu && !s->gpu) {
            s->nr = prev->nr;
            s->nw = prev->nw;
            memcpy(s->rslot, prev->rslot, sizeof s->rslot);
            memcpy(s->wslot, prev->wslot, sizeof s->wslot);
            memcpy(s->rcell, prev->rcell, sizeof s->rcell);
            memcpy(s->wcell, prev->wcell, sizeof s->wcell);
            s->priority = prev->priority;
        }
    }
}

/* The steps of npushers pushers, pusher p's at [p * per, (p + 1) * per).
 * A wait step waits on every slot the pusher uses, one push each. One
 * pusher may delete any slot; several share NSLOTS slots and delete only
 * their own. */
static int generate(struct run *r, int npushers, int per, uint64_t seed, bool gpu)
{
    rng_state = seed * 2654435761u + 1;
    r->nsteps = npushers * per;
    r->steps = calloc((size_t)r->nsteps, sizeof *r->steps);
    if (!r->steps)
        return -1;
    r->nslots = npushers > 1 ? NSLOTS + npushers * NPRIV : NSLOTS;
    int ncells = 0;
    for (int i = 0; i < r->nslots; i++)
        r->last_cell[i] = ncells++;
    for (int p = 0; p < npushers; p++) {
        struct view v = {NSLOTS, 0, 0};
        if (npushers > 1)
            v = (struct view){NSLOTS + NPRIV, NSLOTS, NSLOTS + p * NPRIV};
        generate_steps(r->steps + (size_t)p * (size_t)per, per, &v, v.nview, r->last_cell,
                       &ncells, gpu);
    }
    r->ncells = ncells;
    return 0;
}

static int run_alloc(struct run *r, const struct run *plan)
{
    *r = *plan;
    r->val = calloc((size_t)r->ncells, sizeof *r->val);
    r->seen = calloc((size_t)r->nsteps, sizeof *r->seen);
    r->err = calloc((size_t)r->ncells, sizeof *r->err);
    return r->val && r->seen && r->err ? 0 : -1;
}

static void run_free(struct run *r)
{
    free(r->val);
    free(r->seen);
    free(r->err);
}

/* ---- async ops finished later by another thread ---- */

struct job {
    struct run *r;
    int i;
    vq_done *done;
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct job *jobs;
    int head, tail, cap;
    pthread_t thread;
} fin;

static void finisher_init(void)
{
    pthread_mutex_init(&fin.lock, NULL);
    pthread_cond_init(&fin.cond, NULL);
}

static void *finisher_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&fin.lock);
    for (;;) {
        while (fin.head == fin.tail)
            pthread_cond_wait(&fin.cond, &fin.lock);
        struct job j = fin.jobs[fin.head++ % fin.cap];
        pthread_mutex_unlock(&fin.lock);
        for (volatile int spin = 0; spin < (j.i % 7) * 50; spin++)
            ; /* a little delay, different per op */
        vq_done_finish(j.done, body(j.r, j.i));
        pthread_mutex_lock(&fin.lock);
    }
    return NULL; /* not reached: the thread lives as long as the process */
}

/* The finisher thread lives as long as the process: started by the first
 * workload, given a job array of the run's size by each (the previous run's
 * jobs are all taken by then: its vq_wait_all returned), never joined. A
 * caller that runs workloads for hours (tests/soak.c) so creates no thread
 * per run. */
static int finisher_start(int cap)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    static bool running;
    pthread_once(&once, finisher_init);
    pthread_mutex_lock(&fin.lock);
    struct job *jobs = fin.cap >= cap ? fin.jobs : realloc(fin.jobs, (size_t)cap * sizeof *jobs);
    if (jobs) {
        fin.jobs = jobs;
        fin.cap = cap > fin.cap ? cap : fin.cap;
        fin.head = fin.tail = 0;
    }
    pthread_mutex_unlock(&fin.lock);
    if (!jobs)
        return -1;
    if (!running && pthread_create(&fin.thread, NULL, finisher_main, NULL) != 0)
        return -1;
    running = true;
    return 0;
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

/* A GPU op's stream work: the body, whose writes run in stream order. A
 * failing op fails at launch (gpu_body's return), so the stream work of
 * such an op only records what it saw. */
static int stream_body(void *arg)
{
    struct op_arg *a = arg;
    body(a->r, a->i);
    return 0;
}

static int gpu_body(void *arg, const vq_exec_ctx *x)
{
    struct op_arg *a = arg;
    const struct step *s = &a->r->steps[a->i];
    if (x->ctx.kind != VQ_DEV_GPU || x->ctx.id != s->gpu - 1 || !x->stream)
        return -999; /* the wrong context: a mismatch the check reports */
    int rc = vq_gpu_launch_host(x, stream_body, a);
    return rc < 0 ? rc : s->fail;
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

static int failf(char *msg, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, len, fmt, ap);
    va_end(ap);
    return -1;
}

/* One pusher's share of a run. */
struct pusher {
    struct run *r;
    vq_engine *e;
    vq_var **slot;          /* every global slot; this pusher replaces only its own */
    struct op_arg *args;
    int first, n;           /* its steps */
    unsigned long (*ticket)(void);
    uint64_t seed;
    long pushed;
    int rc;
    char msg[200];
};

static int push_failed(struct pusher *p, int i, const char *fn)
{
    return failf(p->msg, sizeof p->msg, "seed %llu: step %d: %s: %s",
                 (unsigned long long)p->seed, i, fn, vq_errmsg());
}

/* Pushes one op step; the ticket of the push goes into the step. */
static int push_op(struct pusher *p, int i)
{
    struct step *s = &p->r->steps[i];
    vq_var *reads[MAXR], *writes[MAXW];
    for (int k = 0; k < s->nr; k++)
        reads[k] = p->slot[s->rslot[k]];
    for (int k = 0; k < s->nw; k++)
        writes[k] = p->slot[s->wslot[k]];
    p->args[i] = (struct op_arg){p->r, i};
    vq_task t = {.arg = &p->args[i], .arg_free = count_arg_free, .reads = reads,
                 .nreads = s->nr, .writes = writes, .nwrites = s->nw,
                 .priority = s->priority, .name = "random"};
    if (s->gpu) {
        t.fn = gpu_body;
        t.ctx = (vq_ctx){VQ_DEV_GPU, s->gpu - 1};
        t.props = s->props;
    } else if (s->async) {
        t.async_fn = async_body;
    } else {
        t.fn = sync_body;
    }
    int rc;
    if (s->prebuilt) {
        vq_opr *op = vq_opr_new(p->e, &t);
        rc = op ? vq_push_opr(p->e, op) : VQ_ENOMEM;
        if (op)
            vq_opr_free(p->e, op);
    } else {
        rc = vq_push(p->e, &t);
    }
    if (rc < 0)
        return push_failed(p, i, "push");
    p->pushed++;
    return 0;
}

static void *pusher_main(void *arg)
{
    struct pusher *p = arg;
    for (int i = p->first; i < p->first + p->n && p->rc == 0; i++) {
        struct step *s = &p->r->steps[i];
        if (s->kind == STEP_DELETE) {
            if (vq_var_free(p->e, p->slot[s->slot]) < 0)
                p->rc = push_failed(p, i, "vq_var_free");
            p->slot[s->slot] = vq_var_new(p->e, "slot");
        } else if (s->kind == STEP_WAIT) {
            s->got_err = vq_wait_var(p->e, p->slot[s->slot]);
        } else {
            p->rc = push_op(p, i);
        }
        if (p->ticket)
            s->ticket = p->ticket();
    }
    return NULL;
}

/* Runs the steps from npushers threads (the calling thread when 1) on the
 * given engine, or on a new one of the kind when given is NULL; r->err gets
 * each slot's final error. */
static int run_on_engine(struct run *r, vq_engine *given, int kind, int workers, unsigned flags,
                         int npushers, unsigned long (*ticket)(void), uint64_t seed, char *msg,
                         size_t len)
{
    vq_engine_opts o = {.kind = kind, .cpu_workers = workers, .flags = flags & ~WORKLOAD_GPU};
    vq_engine *e = given;
    if (!e && vq_engine_new(&e, &o) < 0)
        return failf(msg, len, "vq_engine_new: %s", vq_errmsg());
    struct op_arg *args = malloc((size_t)r->nsteps * sizeof *args);
    struct pusher *ps = calloc((size_t)npushers, sizeof *ps);
    if (!args || !ps || finisher_start(r->nsteps + 1) < 0) {
        free(args);
        free(ps);
        if (!given)
            vq_engine_free(e);
        return failf(msg, len, "out of memory");
    }
    vq_var *slot[MAXSLOTS];
    for (int i = 0; i < r->nslots; i++)
        slot[i] = vq_var_new(e, "slot");
    atomic_store(&args_freed, 0);
    int per = r->nsteps / npushers;
    pthread_t th[MAXPUSHERS];
    for (int p = 0; p < npushers; p++) {
        ps[p] = (struct pusher){.r = r, .e = e, .slot = slot, .args = args, .first = p * per,
                                .n = per, .ticket = ticket, .seed = seed};
        if (npushers > 1 && pthread_create(&th[p], NULL, pusher_main, &ps[p]) != 0) {
            ps[p].rc = failf(ps[p].msg, sizeof ps[p].msg, "cannot start pusher %d", p);
            npushers = p; /* the ones started are joined below */
        }
    }
    if (npushers == 1)
        pusher_main(&ps[0]);
    long pushed = 0;
    int rc = 0;
    for (int p = 0; p < npushers; p++) {
        if (npushers > 1)
            pthread_join(th[p], NULL);
        pushed += ps[p].pushed;
        if (ps[p].rc < 0 && rc == 0)
            rc = failf(msg, len, "%s", ps[p].msg);
    }
    int first = vq_wait_all(e);
    for (int i = 0; i < r->nslots; i++)
        r->err[i] = vq_wait_var(e, slot[i]);
    if (given) /* the vars go, the engine stays: empty, idle, no error on record */
        for (int i = 0; i < r->nslots; i++)
            if (vq_var_free(e, slot[i]) < 0 && rc == 0)
                rc = failf(msg, len, "vq_var_free: %s", vq_errmsg());
    if (given && vq_wait_all(e) != 0 && rc == 0)
        rc = failf(msg, len, "the engine is not idle and clean after the frees");
    if (!given)
        vq_engine_free(e);
    free(args);
    free(ps);
    if (rc < 0)
        return rc;

    if (atomic_load(&args_freed) != pushed)
        return failf(msg, len, "seed %llu: arg_free ran %ld times for %ld ops",
                     (unsigned long long)seed, atomic_load(&args_freed), pushed);
    bool any_failure = false;
    for (int i = 0; i < r->nsteps; i++)
        any_failure |= r->steps[i].kind == STEP_OP && r->steps[i].fail && r->seen[i];
    if (any_failure ? !(first <= -1000 && first >= -1004) : first != 0)
        return failf(msg, len, "seed %llu: vq_wait_all gave %d (a failure %s)",
                     (unsigned long long)seed, first, any_failure ? "happened" : "never happened");
    return 0;
}

/* Step order by ticket; the steps of one pusher keep their order. */
static const struct step *sort_steps;

static int cmp_ticket(const void *a, const void *b)
{
    const struct step *x = &sort_steps[*(const int *)a], *y = &sort_steps[*(const int *)b];
    if (x->ticket != y->ticket)
        return x->ticket < y->ticket ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

/* Compares the engine's run (got) with the model's, which replays the
 * steps in order. */
static int compare(const struct run *plan, const struct run *model, const struct run *got,
                   uint64_t seed, long *ran, char *msg, size_t len)
{
    *ran = 0;
    for (int i = 0; i < plan->nsteps; i++) {
        const struct step *s = &plan->steps[i];
        if (s->kind == STEP_WAIT && s->got_err != s->expect_err)
            return failf(msg, len, "seed %llu: step %d: vq_wait_var gave %d, serially %d",
                         (unsigned long long)seed, i, s->got_err, s->expect_err);
        if (s->kind != STEP_OP)
            continue;
        *ran += model->seen[i] != 0;
        if ((got->seen[i] != 0) != (model->seen[i] != 0))
            return failf(msg, len, "seed %llu: op %d %s on the engine but %s serially",
                         (unsigned long long)seed, i, got->seen[i] ? "ran" : "was skipped",
                         model->seen[i] ? "ran" : "was skipped");
        if (got->seen[i] != model->seen[i])
            return failf(msg, len, "seed %llu: op %d saw other inputs than serially",
                         (unsigned long long)seed, i);
    }
    for (int c = 0; c < plan->ncells; c++)
        if (got->val[c] != model->val[c])
            return failf(msg, len, "seed %llu: var incarnation %d differs",
                         (unsigned long long)seed, c);
    /* The slots' final errors against the model's for their last cells. */
    for (int i = 0; i < plan->nslots; i++)
        if (got->err[i] != model->err[plan->last_cell[i]])
            return failf(msg, len, "seed %llu: slot %d ends with error %d, serially %d",
                         (unsigned long long)seed, i, got->err[i],
                         model->err[plan->last_cell[i]]);
    return 0;
}

static int check(vq_engine *given, int kind, int workers, unsigned flags, int npushers,
                 unsigned long (*ticket)(void), uint64_t seed, int nops, long *ran, char *msg,
                 size_t len)
{
    struct run plan, model = {.nsteps = 0}, got = {.nsteps = 0};
    if (npushers < 1 || npushers > MAXPUSHERS || nops < npushers)
        return failf(msg, len, "%d pushers for %d ops: not in 1..%d", npushers, nops,
                     MAXPUSHERS);
    if (generate(&plan, npushers, nops / npushers, seed, (flags & WORKLOAD_GPU) != 0) < 0)
        return failf(msg, len, "out of memory");
    int rc = -1;
    int *order = malloc((size_t)plan.nsteps * sizeof *order);
    if (!order || run_alloc(&model, &plan) < 0 || run_alloc(&got, &plan) < 0) {
        rc = failf(msg, len, "out of memory");
        goto out;
    }
    if ((rc = run_on_engine(&got, given, kind, workers, flags, npushers, ticket, seed, msg,
                            len)) < 0)
        goto out;
    for (int i = 0; i < plan.nsteps; i++)
        order[i] = i;
    if (npushers > 1) {
        sort_steps = plan.steps;
        qsort(order, (size_t)plan.nsteps, sizeof *order, cmp_ticket);
    }
    model_run(&model, order); /* also fills the steps' expect_err for the waits */
    rc = compare(&plan, &model, &got, seed, ran, msg, len);
out:
    run_free(&model);
    run_free(&got);
    free(plan.steps);
    free(order);
    return rc;
}

int workload_check(int kind, int workers, unsigned flags, uint64_t seed, int nops, long *ran,
                   char *msg, size_t len)
{
    return check(NULL, kind, workers, flags, 1, NULL, seed, nops, ran, msg, len);
}

int workload_check_on(vq_engine *e, unsigned flags, uint64_t seed, int nops, long *ran,
                      char *msg, size_t len)
{
    if (!e)
        return failf(msg, len, "workload_check_on: no engine");
    return check(e, 0, 0, flags, 1, NULL, seed, nops, ran, msg, len);
}

int workload_check_pushers(int workers, int npushers, unsigned flags,
                           unsigned long (*ticket)(void), uint64_t seed, int nops, long *ran,
                           char *msg, size_t len)
{
    if (!ticket)
        return failf(msg, len, "workload_check_pushers: no ticket function");
    return check(NULL, VQ_ENGINE_THREADED, workers, flags, npushers, ticket, seed, nops, ran,
                 msg, len);
}

uint64_t workload_seed(void)
{
    const char *s = getenv("VARQ_TEST_SEED");
    return s ? strtoull(s, NULL, 10) : (uint64_t)time(NULL);
}

int workload_ops(int dflt)
{
    const char *s = getenv("VARQ_TEST_OPS");
    return s && atoi(s) > 0 ? atoi(s) : dflt;
}
