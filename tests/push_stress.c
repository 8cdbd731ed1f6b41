/* Concurrent pushers: the engine must order ops that several threads push
 * at once as if each push happened at one instant (engine.h).
 *
 * Three parts, each under a watchdog that fails the program (instead of
 * hanging the suite) when a part does not finish in time:
 *   - two threads push ops that write the same two vars {x, y}, in the same
 *     order; with appends made one var at a time they used to queue A
 *     before B on x but B before A on y, and deadlock;
 *   - the imperative form: one thread runs add(a, b) -> a, another
 *     add(a, b) -> b, with vq_op_run, then both wait for their tensor;
 *   - async ops, more than the throttle's bound, that the pushing thread
 *     itself finishes after pushing them all (an event loop): vq_push must
 *     not wait for them;
 *   - the random serial-equivalence workload from 2, 4 and 8 pushing
 *     threads, replayed serially in the engine's push order (the tickets of
 *     vq__push_ticket), on CPU ops and with GPU ops on the emulated backend.
 *
 * No test framework, so that it runs under ThreadSanitizer too (see
 * engine_stress.c). usage: push_stress [scale, 1 = full]   (VARQ_TEST_SEED
 * replays a seed of the random part) */
#include "../engine/engine_internal.h"
#include "workload.h"

#include <varq/varq.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- the watchdog ---- */

static pthread_mutex_t dog_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t dog_cond = PTHREAD_COND_INITIALIZER;
static const char *dog_part; /* the part running, NULL between parts */
static time_t dog_deadline;
static unsigned dog_generation;

static void *watchdog(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&dog_lock);
    for (;;) {
        if (!dog_part) {
            pthread_cond_wait(&dog_cond, &dog_lock);
            continue;
        }
        unsigned gen = dog_generation;
        struct timespec until = {dog_deadline, 0};
        while (dog_part && gen == dog_generation &&
               pthread_cond_timedwait(&dog_cond, &dog_lock, &until) == 0)
            ;
        if (dog_part && gen == dog_generation && time(NULL) >= dog_deadline) {
            fprintf(stderr, "push_stress: %s did not finish in time: deadlock or hang\n",
                    dog_part);
            _exit(2); /* a test program: stop the hung threads with it */
        }
    }
    return NULL;
}

static void part_begin(const char *name, int seconds)
{
    pthread_mutex_lock(&dog_lock);
    dog_part = name;
    dog_deadline = time(NULL) + seconds;
    dog_generation++;
    pthread_cond_signal(&dog_cond);
    pthread_mutex_unlock(&dog_lock);
}

static void part_end(void)
{
    pthread_mutex_lock(&dog_lock);
    dog_part = NULL;
    dog_generation++;
    pthread_cond_signal(&dog_cond);
    pthread_mutex_unlock(&dog_lock);
}

/* ---- two pushers writing the same two vars ---- */

struct same_vars {
    vq_engine *e;
    vq_var *x, *y;
    long nops;
    long count; /* ordered by the engine: every op writes x and y */
    int rc;
};

static int bump(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    ((struct same_vars *)arg)->count++;
    return 0;
}

static void *push_xy(void *arg)
{
    struct same_vars *s = arg;
    vq_var *w[2] = {s->x, s->y};
    vq_task t = {.fn = bump, .arg = s, .writes = w, .nwrites = 2, .name = "xy"};
    for (long i = 0; i < s->nops; i++)
        if (vq_push(s->e, &t) < 0) {
            s->rc = -1;
            break;
        }
    return NULL;
}

static int same_vars(int pushers, long nops)
{
    struct same_vars s = {.nops = nops};
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    if (vq_engine_new(&s.e, &o) < 0)
        return -1;
    s.x = vq_var_new(s.e, "x");
    s.y = vq_var_new(s.e, "y");
    pthread_t th[8];
    for (int i = 0; i < pushers; i++)
        pthread_create(&th[i], NULL, push_xy, &s);
    for (int i = 0; i < pushers; i++)
        pthread_join(th[i], NULL);
    int err = vq_wait_all(s.e);
    vq_engine_free(s.e);
    if (s.rc < 0 || err != 0 || s.count != pushers * nops) {
        fprintf(stderr, "push_stress: same vars: %ld of %ld ops ran (error %d)\n", s.count,
                pushers * nops, err ? err : s.rc);
        return -1;
    }
    printf("%d pushers, %ld ops each writing {x, y}: all ran\n", pushers, nops);
    return 0;
}

/* ---- the imperative form: add(a, b) -> a against add(a, b) -> b ---- */

struct crossed {
    vq_engine *e;
    vq_tensor *a, *b;
    long n;
    bool into_a;
    int rc;
};

static void *run_adds(void *arg)
{
    struct crossed *c = arg;
    vq_tensor *in[2] = {c->a, c->b};
    vq_tensor *out[1] = {c->into_a ? c->a : c->b};
    for (long i = 0; i < c->n && c->rc == 0; i++)
        c->rc = vq_op_run(c->e, "add", in, 2, out, 1, NULL, 0);
    if (c->rc == 0)
        c->rc = vq_tensor_wait(out[0]);
    return NULL;
}

static int crossed_adds(long n)
{
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    vq_engine *e;
    if (vq_engine_new(&e, &o) < 0)
        return -1;
    /* Zeros stay zeros: the values only show that every add ran whole
     * (ThreadSanitizer sees any two adds that overlap on a tensor). */
    const int64_t shape[1] = {4};
    vq_tensor *a, *b;
    if (vq_tensor_new(&a, VQ_I64, 1, shape) < 0 || vq_tensor_new(&b, VQ_I64, 1, shape) < 0)
        return -1;
    struct crossed c[2] = {{e, a, b, n, true, 0}, {e, a, b, n, false, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, run_adds, &c[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    int rc = c[0].rc ? c[0].rc : c[1].rc;
    if (rc == 0)
        rc = vq_wait_all(e);
    const int64_t *av = vq_tensor_data(a), *bv = vq_tensor_data(b);
    bool ok = rc == 0 && av[0] == 0 && av[3] == 0 && bv[0] == 0 && bv[3] == 0;
    if (!ok)
        fprintf(stderr, "push_stress: crossed adds: error %d (%s), a = %lld, b = %lld\n", rc,
                rc ? vq_errmsg() : "", (long long)av[0], (long long)bv[0]);
    vq_tensor_release(a);
    vq_tensor_release(b);
    vq_engine_free(e);
    if (ok)
        printf("add(a, b) -> a and add(a, b) -> b from two threads, %ld each: done\n", n);
    return ok ? 0 : -1;
}

/* ---- async ops that their own pusher finishes after pushing them ---- */

struct held {
    vq_done *_Atomic *done; /* set by each op's async_fn */
    long n;
};

struct held_arg {
    struct held *h;
    long i;
};

static void hold_done(void *arg, const vq_exec_ctx *x, vq_done *done)
{
    (void)x;
    struct held_arg *a = arg;
    atomic_store(&a->h->done[a->i], done);
}

/* Pushes n async ops (with no var, each on a var of its own, or all on one
 * var: a chain where each starts only once the one before is finished),
 * then finishes each from this thread, as an event loop would: more than
 * the throttle's 4096 in flight must not block vq_push. */
static int finished_by_pusher(long n, int vars, int workers)
{
    static const char *const how[] = {"no var", "a var each", "one var"};
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = workers};
    vq_engine *e;
    if (vq_engine_new(&e, &o) < 0)
        return -1;
    struct held h = {calloc((size_t)n, sizeof *h.done), n};
    struct held_arg *args = calloc((size_t)n, sizeof *args);
    vq_var *one = vq_var_new(e, "one");
    int rc = h.done && args && one ? 0 : -1;
    for (long i = 0; i < n && rc == 0; i++) {
        args[i] = (struct held_arg){&h, i};
        vq_var *v = vars == 2 ? one : vars == 1 ? vq_var_new(e, "own") : NULL;
        vq_task t = {.async_fn = hold_done, .arg = &args[i], .writes = &v, .nwrites = v != NULL};
        rc = vq_push(e, &t);
    }
    for (long i = 0; i < n && rc == 0; i++) {
        vq_done *d;
        while (!(d = atomic_load(&h.done[i])))
            sched_yield(); /* a chain: op i starts once op i - 1 is finished */
        vq_done_finish(d, 0);
    }
    if (rc == 0)
        rc = vq_wait_all(e);
    vq_engine_free(e);
    free(h.done);
    free(args);
    if (rc != 0) {
        fprintf(stderr, "push_stress: %ld async ops on %s finished by their pusher: %s\n", n,
                how[vars], vq_errmsg());
        return -1;
    }
    printf("%ld async ops on %s, %d workers, finished by their pusher afterwards: done\n", n,
           how[vars], workers);
    return 0;
}

int main(int argc, char **argv)
{
    int scale = argc > 1 ? atoi(argv[1]) : 1;
    if (scale < 1)
        scale = 1;
    setenv("VARQ_GPU_BACKEND", "emulated", 1);
    setenv("VARQ_GPU_EMUL_DEVICES", "2", 1);
    pthread_t dog;
    pthread_create(&dog, NULL, watchdog, NULL);
    pthread_detach(dog);
    int failed = 0;

    part_begin("two pushers on {x, y}", 300);
    for (int rep = 0; rep < 4 && !failed; rep++)
        failed |= same_vars(2, 200000 / scale) < 0;
    failed |= same_vars(8, 20000 / scale) < 0;
    part_end();

    part_begin("crossed vq_op_run adds", 300);
    failed |= crossed_adds(100000 / scale) < 0;
    part_end();

    part_begin("async ops finished by their pusher", 300);
    for (int vars = 0; vars < 3; vars++)
        for (int workers = 1; workers <= 2; workers++)
            failed |= finished_by_pusher(vars == 2 ? 6000 / scale : 20000 / scale, vars,
                                         workers) < 0;
    part_end();

    uint64_t seed = workload_seed();
    int nops = workload_ops(40000) / scale;
    const struct {
        int workers, pushers;
        unsigned flags;
    } runs[] = {{2, 2, 0}, {2, 4, 0}, {4, 8, 0}, {1, 4, 0}, {3, 4, VQ_ENGINE_PROFILE},
                {2, 4, WORKLOAD_GPU}, {2, 8, WORKLOAD_GPU}};
    part_begin("random workloads from several pushers", 500);
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        char msg[256];
        long ran = 0;
        bool gpu = runs[i].flags & WORKLOAD_GPU;
        int n = gpu ? nops / 4 : nops;
        if (workload_check_pushers(runs[i].workers, runs[i].pushers, runs[i].flags,
                                   vq__push_ticket, seed + i, n, &ran, msg, sizeof msg) < 0) {
            fprintf(stderr, "push_stress: %d pushers, %d workers: %s\n", runs[i].pushers,
                    runs[i].workers, msg);
            failed = 1;
        } else {
            printf("%d pushers, %d workers%s%s: %d steps, %ld ops ran, same as serially in "
                   "ticket order (seed %llu)\n",
                   runs[i].pushers, runs[i].workers,
                   runs[i].flags & VQ_ENGINE_PROFILE ? ", profiling" : "",
                   gpu ? ", GPU ops on 2 emulated devices" : "", n, ran,
                   (unsigned long long)(seed + i));
        }
    }
    part_end();
    return failed;
}
