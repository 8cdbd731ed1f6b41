/* The engine through its public API: ordering between ops, async ops,
 * priorities, prioritized workers, prebuilt ops, var deletion, engine
 * options and environment, and the profiler's trace. */
#include <varq/varq.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include "leakcheck.h"

TestSuite(engine_api, .fini = leak_check);

/* A behaviour of both engines: one test, run once per kind (the naive
 * engine is the serial oracle; as test_engine_errors.c does). */
#define BOTH_KINDS(name)                                                                    \
    ParameterizedTestParameters(engine_api, name)                                          \
    {                                                                                       \
        static int kinds[] = {VQ_ENGINE_THREADED, VQ_ENGINE_NAIVE};                         \
        return cr_make_param_array(int, kinds, 2);                                          \
    }                                                                                       \
    ParameterizedTest(int *kind, engine_api, name)


static vq_engine *engine_with(int kind, int workers)
{
    vq_engine_opts o = {.kind = kind, .cpu_workers = workers};
    vq_engine *e = NULL;
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    return e;
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* Polls until *flag is set or 5 s pass; false on timeout. */
static bool await_flag(atomic_int *flag)
{
    time_t end = time(NULL) + 5;
    while (time(NULL) <= end) {
        if (atomic_load(flag))
            return true;
        sleep_us(50);
    }
    return false;
}

/* ---- sleeping workers are woken ---- */

static int set_flag(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    atomic_store((atomic_int *)arg, 1);
    return 0;
}

/* Each op is pushed after the workers have gone to sleep, and the pusher
 * then only polls a flag, never calling the engine (a waiter would run the
 * op itself and hide a lost wake-up): the op must run on a woken worker.
 * Var-less ops (the ring's light cells) and ops with a var (queued ops)
 * alternate, on 1 and 2 workers. The submit's side of the sleep/wake pair
 * is a compiler barrier where membarrier(2) works (threaded.c). */
Test(engine_api, ops_pushed_to_sleeping_workers_run_without_a_waiter)
{
    for (int workers = 1; workers <= 2; workers++) {
        vq_engine *e = engine_with(VQ_ENGINE_THREADED, workers);
        vq_var *v = vq_var_new(e, "flagged");
        cr_assert_not_null(v, "%s", vq_errmsg());
        for (int i = 0; i < 200; i++) {
            sleep_us(600); /* past the workers' spin (~100 us): they sleep */
            atomic_int ran = 0;
            vq_task t = {.fn = set_flag, .arg = &ran, .name = "set_flag"};
            if (i % 2) {
                t.writes = &v;
                t.nwrites = 1;
            }
            cr_assert_eq(vq_push(e, &t), 0, "%s", vq_errmsg());
            cr_assert(await_flag(&ran),
                      "op %d (%s, %d workers) did not run within 5 s: a lost "
                      "wake-up",
                      i, i % 2 ? "with a var" : "var-less", workers);
        }
        cr_assert_eq(vq_var_free(e, v), 0, "%s", vq_errmsg());
        vq_engine_free(e);
    }
}

/* ---- a log of events in the order they happened ---- */

static atomic_int log_len;
static int log_ev[4096];

static void log_event(int ev)
{
    log_ev[atomic_fetch_add(&log_len, 1)] = ev;
}

static int log_index(int ev)
{
    for (int i = 0; i < atomic_load(&log_len); i++)
        if (log_ev[i] == ev)
            return i;
    return -1;
}

struct step {
    int id;          /* logged as +id at start, -id at end */
    long sleep_us;   /* work to overlap */
    atomic_int *gate; /* if set, waits for it before finishing */
};

static int step_fn(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct step *s = arg;
    log_event(s->id);
    if (s->sleep_us)
        sleep_us(s->sleep_us);
    if (s->gate)
        await_flag(s->gate);
    log_event(-s->id);
    return 0;
}

static void push_step(vq_engine *e, struct step *s, vq_var **r, int nr, vq_var **w, int nw)
{
    vq_task t = {.fn = step_fn, .arg = s, .reads = r, .nreads = nr, .writes = w, .nwrites = nw,
                 .name = "step"};
    cr_assert_eq(vq_push(e, &t), 0, "%s", vq_errmsg());
}

/* ---- a waiter helps ---- */

struct blocker {
    atomic_int release; /* set by the test: the blocking op may end */
    atomic_int started;
};

static int block_until_released(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct blocker *b = arg;
    atomic_store(&b->started, 1);
    for (int i = 0; i < 10000 && !atomic_load(&b->release); i++)
        sleep_us(1000); /* at most 10 s: a waiter that does not help still ends */
    return 0;
}

static int note_worker(void *arg, const vq_exec_ctx *x)
{
    *(int *)arg = x->worker;
    return 0;
}

/* The one worker is held by an op; a ready op pushed behind it is run by
 * the thread that waits for it (vq_exec_ctx.worker -1), so the wait
 * returns while the worker is still held. */
Test(engine_api, a_waiter_runs_the_ready_op_it_waits_for_while_the_workers_are_busy)
{
    vq_engine *e = engine_with(VQ_ENGINE_THREADED, 1);
    vq_var *held = vq_var_new(e, "held"), *v = vq_var_new(e, "v");
    struct blocker b;
    atomic_init(&b.release, 0);
    atomic_init(&b.started, 0);
    vq_task block = {.fn = block_until_released, .arg = &b, .writes = &held, .nwrites = 1};
    cr_assert_eq(vq_push(e, &block), 0);
    while (!atomic_load(&b.started))
        sched_yield();
    int worker = 123;
    vq_task t = {.fn = note_worker, .arg = &worker, .writes = &v, .nwrites = 1};
    cr_assert_eq(vq_push(e, &t), 0);
    cr_assert_eq(vq_wait_var(e, v), 0);
    int still_held = !atomic_load(&b.release);
    atomic_store(&b.release, 1);
    cr_assert(still_held);
    cr_assert_eq(worker, -1, "the op ran on worker %d, not in the waiting thread", worker);
    cr_assert_eq(vq_wait_all(e), 0);
    vq_var_free(e, held);
    vq_var_free(e, v);
    vq_engine_free(e);
}

Test(engine_api, reads_of_one_var_run_concurrently)
{
    vq_engine *e = engine_with(VQ_ENGINE_THREADED, 2);
    vq_var *v = vq_var_new(e, "v");
    /* Each reader holds its worker until the test opens its gate, which it
     * does only once both have started. */
    atomic_int g1 = 0, g2 = 0;
    struct step a = {1, 0, &g1}, b = {2, 0, &g2};
    atomic_store(&log_len, 0);
    push_step(e, &a, &v, 1, NULL, 0);
    push_step(e, &b, &v, 1, NULL, 0);
    /* Both must start while neither may finish yet. */
    bool both = false;
    for (time_t end = time(NULL) + 5; time(NULL) <= end && !both; sleep_us(50))
        both = log_index(1) >= 0 && log_index(2) >= 0;
    atomic_store(&g1, 1);
    atomic_store(&g2, 1);
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert(both, "two readers of one var did not run at the same time");
    vq_engine_free(e);
}

Test(engine_api, write_waits_for_earlier_reads_and_later_reads_wait_for_it)
{
    vq_engine *e = engine_with(VQ_ENGINE_THREADED, 4);
    vq_var *v = vq_var_new(e, "v");
    struct step r1 = {1, 2000, NULL}, r2 = {2, 2000, NULL}, w = {3, 2000, NULL},
                r3 = {4, 0, NULL}, w2 = {5, 0, NULL};
    atomic_store(&log_len, 0);
    push_step(e, &r1, &v, 1, NULL, 0);
    push_step(e, &r2, &v, 1, NULL, 0);
    push_step(e, &w, NULL, 0, &v, 1);
    push_step(e, &r3, &v, 1, NULL, 0);
    push_step(e, &w2, NULL, 0, &v, 1);
    cr_assert_eq(vq_wait_var(e, v), 0);
    cr_assert_gt(log_index(3), log_index(-1), "write started before read 1 ended");
    cr_assert_gt(log_index(3), log_index(-2), "write started before read 2 ended");
    cr_assert_gt(log_index(4), log_index(-3), "read started before the write ended");
    cr_assert_gt(log_index(5), log_index(-4), "second write started before the read ended");
    vq_engine_free(e);
}

Test(engine_api, duplicate_and_read_write_vars_are_one_write)
{
    vq_engine *e = engine_with(VQ_ENGINE_THREADED, 4);
    vq_var *v = vq_var_new(e, "v");
    struct step rw = {1, 3000, NULL}, r = {2, 0, NULL};
    vq_var *reads[] = {v, v, v}, *writes[] = {v, v};
    atomic_store(&log_len, 0);
    push_step(e, &rw, reads, 3, writes, 2);
    push_step(e, &r, &v, 1, NULL, 0);
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert_eq(atomic_load(&log_len), 4, "the merged op ran more than once");
    cr_assert_gt(log_index(2), log_index(-1), "a read overtook a read+write op");
    vq_engine_free(e);
}

Test(engine_api, chain_of_writes_keeps_push_order)
{
    vq_engine *e = engine_with(VQ_ENGINE_THREADED, 4);
    vq_var *v = vq_var_new(e, "v");
    static struct step s[1000];
    atomic_store(&log_len, 0);
    for (int i = 0; i < 1000; i++) {
        s[i] = (struct step){i + 1, 0, NULL};
        push_step(e, &s[i], NULL, 0, &v, 1);
    }
    cr_assert_eq(vq_wait_all(e), 0);
    for (int i = 0; i < 1000; i++) {
        cr_assert_eq(log_ev[2 * i], i + 1);
        cr_assert_eq(log_ev[2 * i + 1], -(i + 1));
    }
    vq_engine_free(e);
}

/* ---- async ops ---- */

struct async_job {
    vq_done *done;
    int *value;
    int err;
};

static void *finish_later(void *arg)
{
    struct async_job *j = arg;
    sleep_us(20000);
    *j->value += 1;
    vq_done_finish(j->done, j->err);
    return NULL;
}

static pthread_t finisher;

static void async_inc(void *arg, const vq_exec_ctx *x, vq_done *done)
{
    (void)x;
    struct async_job *j = arg;
    j->done = done;
    cr_assert_eq(pthread_create(&finisher, NULL, finish_later, j), 0);
}

static int double_it(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    *(int *)arg *= 2;
    return 0;
}

static void async_finished_elsewhere(int kind)
{
    vq_engine *e = engine_with(kind, 2);
    vq_var *v = vq_var_new(e, "v");
    int value = 1;
    struct async_job j = {.value = &value, .err = 0};
    vq_task a = {.async_fn = async_inc, .arg = &j, .writes = &v, .nwrites = 1, .name = "async"};
    vq_task d = {.fn = double_it, .arg = &value, .writes = &v, .nwrites = 1, .name = "double"};
    cr_assert_eq(vq_push(e, &a), 0);
    cr_assert_eq(vq_push(e, &d), 0);
    cr_assert_eq(vq_wait_var(e, v), 0);
    cr_assert_eq(value, 4, "the write after an async op did not wait for vq_done_finish");
    pthread_join(finisher, NULL);
    vq_engine_free(e);
}

BOTH_KINDS(async_op_finished_from_another_thread)
{
    async_finished_elsewhere(*kind);
}

/* ---- priorities ---- */

static atomic_int gate;

static int hold_worker(void *arg, const vq_exec_ctx *x)
{
    (void)arg, (void)x;
    await_flag(&gate);
    return 0;
}

static int log_priority(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    log_event((int)(intptr_t)arg);
    return 0;
}

Test(engine_api, ready_ops_run_highest_priority_first)
{
    vq_engine *e = engine_with(VQ_ENGINE_THREADED, 1);
    atomic_store(&gate, 0);
    atomic_store(&log_len, 0);
    vq_task hold = {.fn = hold_worker, .name = "hold"};
    cr_assert_eq(vq_push(e, &hold), 0);
    int prios[] = {0, 3, -2, 7, 0, 1, -5, 7, 2, 0};
    for (int i = 0; i < 10; i++) {
        vq_task t = {.fn = log_priority, .arg = (void *)(intptr_t)(prios[i] * 100 + i),
                     .priority = prios[i], .name = "prio"};
        cr_assert_eq(vq_push(e, &t), 0);
    }
    sleep_us(20000);
    atomic_store(&gate, 1);
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert_eq(atomic_load(&log_len), 10);
    for (int i = 1; i < 10; i++) {
        int a = log_ev[i - 1], b = log_ev[i];
        int pa = (a - (((a % 100) + 100) % 100)) / 100, pb = (b - (((b % 100) + 100) % 100)) / 100;
        cr_assert_geq(pa, pb, "priority %d ran before %d", pa, pb);
        if (pa == pb)
            cr_assert_lt(((a % 100) + 100) % 100, ((b % 100) + 100) % 100, "equal priorities out of push order");
    }
    vq_engine_free(e);
}

static int record_worker(void *arg, const vq_exec_ctx *x)
{
    *(int *)arg = x->worker;
    return 0;
}

struct where {
    int worker;
    atomic_int ran;
};

static int record_worker_flag(void *arg, const vq_exec_ctx *x)
{
    struct where *w = arg;
    w->worker = x->worker;
    atomic_store(&w->ran, 1);
    return 0;
}

Test(engine_api, prioritized_ops_run_on_the_reserved_workers)
{
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2, .cpu_prio_workers = 1};
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &o), 0);
    atomic_store(&gate, 0);
    /* Both normal workers are held: a prioritized op still runs. */
    vq_task hold = {.fn = hold_worker, .name = "hold"};
    cr_assert_eq(vq_push(e, &hold), 0);
    cr_assert_eq(vq_push(e, &hold), 0);
    struct where w = {.worker = -100};
    vq_task t = {.fn = record_worker_flag, .arg = &w, .props = VQ_PROP_CPU_PRIORITIZED,
                 .name = "prio"};
    cr_assert_eq(vq_push(e, &t), 0);
    bool ran = await_flag(&w.ran);
    atomic_store(&gate, 1);
    cr_assert(ran, "a prioritized op waited for the normal workers");
    cr_assert_eq(w.worker, 2, "prioritized op ran on worker %d", w.worker);
    cr_assert_eq(vq_wait_all(e), 0);
    vq_engine_free(e);
}

/* ---- prebuilt ops ---- */

static atomic_int arg_frees;

static void count_free(void *arg)
{
    (void)arg;
    atomic_fetch_add(&arg_frees, 1);
}

static int add_one(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    (*(long *)arg)++;
    return 0;
}

static void prebuilt_ops(int kind)
{
    vq_engine *e = engine_with(kind, 2);
    vq_var *v = vq_var_new(e, "v");
    long counter = 0;
    atomic_store(&arg_frees, 0);
    vq_task t = {.fn = add_one, .arg = &counter, .arg_free = count_free, .writes = &v,
                 .nwrites = 1, .name = "inc"};
    vq_opr *op = vq_opr_new(e, &t);
    cr_assert_not_null(op, "%s", vq_errmsg());
    for (int i = 0; i < 10000; i++)
        cr_assert_eq(vq_push_opr(e, op), 0);
    vq_opr_free(e, op); /* pushes in flight keep it alive */
    cr_assert_eq(vq_wait_var(e, v), 0);
    cr_assert_eq(counter, 10000);
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert_eq(atomic_load(&arg_frees), 1, "arg_free of an opr ran %d times",
                 atomic_load(&arg_frees));
    vq_engine_free(e);
}

BOTH_KINDS(prebuilt_op_pushed_many_times)
{
    prebuilt_ops(*kind);
}

Test(engine_api, arg_free_runs_once_per_pushed_op)
{
    vq_engine *e = engine_with(VQ_ENGINE_THREADED, 2);
    vq_var *v = vq_var_new(e, "v");
    long counter = 0;
    atomic_store(&arg_frees, 0);
    for (int i = 0; i < 500; i++) {
        vq_task t = {.fn = add_one, .arg = &counter, .arg_free = count_free, .writes = &v,
                     .nwrites = 1};
        cr_assert_eq(vq_push(e, &t), 0);
    }
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert_eq(atomic_load(&arg_frees), 500);
    vq_engine_free(e);
}

struct pusher {
    vq_engine *e;
    vq_var *v;
    long *counter;
};

static void *push_many(void *arg)
{
    struct pusher *p = arg;
    for (int i = 0; i < 20000; i++) {
        vq_task t = {.fn = add_one, .arg = p->counter, .writes = &p->v, .nwrites = 1};
        cr_assert_eq(vq_push(p->e, &t), 0);
    }
    return NULL;
}

static void pushers_in_parallel(int kind)
{
    vq_engine *e = engine_with(kind, 2);
    long counter = 0; /* plain: only the engine's ordering protects it */
    struct pusher p = {e, vq_var_new(e, "v"), &counter};
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, push_many, &p), 0);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert_eq(counter, 60000, "writes from several pushing threads overlapped");
    vq_engine_free(e);
}

BOTH_KINDS(several_threads_push_onto_one_var)
{
    pushers_in_parallel(*kind);
}

/* ---- var deletion ---- */

static void var_free_waits(int kind)
{
    vq_engine *e = engine_with(kind, 2);
    vq_var *v = vq_var_new(e, "v");
    long counter = 0;
    for (int i = 0; i < 100; i++) {
        vq_task t = {.fn = add_one, .arg = &counter, .writes = &v, .nwrites = 1};
        cr_assert_eq(vq_push(e, &t), 0);
    }
    cr_assert_eq(vq_var_free(e, v), 0);
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert_eq(counter, 100, "deleting the var lost ops pushed before");
    vq_engine_free(e);
}

BOTH_KINDS(var_free_runs_after_every_earlier_access)
{
    var_free_waits(*kind);
}

/* ---- engine life ---- */

static int slow_add(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    atomic_fetch_add((atomic_long *)arg, 1);
    return 0;
}

Test(engine_api, many_vars_created_and_freed_reuse_memory)
{
    vq_engine *e = engine_with(VQ_ENGINE_THREADED, 2);
    static atomic_long counter;
    atomic_store(&counter, 0);
    for (int i = 0; i < 20000; i++) {
        vq_var *v = vq_var_new(e, "tmp");
        cr_assert_not_null(v);
        vq_task t = {.fn = slow_add, .arg = &counter, .writes = &v, .nwrites = 1};
        cr_assert_eq(vq_push(e, &t), 0);
        cr_assert_eq(vq_var_free(e, v), 0);
        if (i % 1000 == 999)
            cr_assert_eq(vq_wait_all(e), 0);
    }
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert_eq(atomic_load(&counter), 20000);
    vq_engine_free(e);
}

Test(engine_api, engine_free_completes_pending_ops)
{
    static atomic_long done;
    atomic_store(&done, 0);
    vq_engine *e = engine_with(VQ_ENGINE_THREADED, 2);
    vq_var *vars[8];
    for (int i = 0; i < 8; i++)
        vars[i] = vq_var_new(e, "v");
    for (int i = 0; i < 20000; i++) {
        vq_task t = {.fn = slow_add, .arg = &done, .writes = &vars[i % 8], .nwrites = 1,
                     .reads = &vars[(i + 3) % 8], .nreads = 1};
        cr_assert_eq(vq_push(e, &t), 0);
    }
    vq_engine_free(e); /* vars are freed with it */
    cr_assert_eq(atomic_load(&done), 20000);
}

struct nested {
    vq_engine *e;
    vq_var *v;
    int *value;
};

static int set_to_ten(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    *(int *)arg = 10;
    return 0;
}

static int push_inner(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct nested *n = arg;
    vq_task t = {.fn = set_to_ten, .arg = n->value, .writes = &n->v, .nwrites = 1};
    int rc = vq_push(n->e, &t);
    *n->value = 5; /* the inner op writes v after this op */
    return rc;
}

static void nested_push(int kind)
{
    vq_engine *e = engine_with(kind, 2);
    vq_var *v = vq_var_new(e, "v");
    int value = 0;
    struct nested n = {e, v, &value};
    vq_task t = {.fn = push_inner, .arg = &n, .writes = &v, .nwrites = 1};
    cr_assert_eq(vq_push(e, &t), 0);
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert_eq(value, 10, "an op pushed from inside an op ran before it");
    vq_engine_free(e);
}

BOTH_KINDS(op_pushed_from_an_op_runs_after_it)
{
    nested_push(*kind);
}

/* ---- options and environment ---- */

Test(engine_api, bad_options_are_rejected)
{
    vq_engine *e = (vq_engine *)1;
    vq_engine_opts o = {.kind = 7};
    cr_assert_eq(vq_engine_new(&e, &o), VQ_EINVAL);
    cr_assert_null(e);
    cr_assert(strstr(vq_errmsg(), "kind"));
    o = (vq_engine_opts){.cpu_workers = -1};
    cr_assert_eq(vq_engine_new(&e, &o), VQ_EINVAL);
    o = (vq_engine_opts){.flags = 1u << 9};
    cr_assert_eq(vq_engine_new(&e, &o), VQ_EINVAL);
    cr_assert_eq(vq_engine_new(NULL, NULL), VQ_EINVAL);
}

Test(engine_api, bad_environment_is_an_error_not_a_default)
{
    vq_engine *e;
    setenv("VARQ_ENGINE", "fast", 1);
    cr_assert_eq(vq_engine_new(&e, NULL), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "VARQ_ENGINE"), "message: %s", vq_errmsg());
    unsetenv("VARQ_ENGINE");
    const char *bad[] = {"0", "-3", "two", "4x", "", "100000", " 2", "+3", "2 ", "0x4",
                         "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        setenv("VARQ_CPU_WORKERS", bad[i], 1);
        cr_assert_eq(vq_engine_new(&e, NULL), VQ_EINVAL, "VARQ_CPU_WORKERS=\"%s\" accepted",
                     bad[i]);
        cr_assert(strstr(vq_errmsg(), "VARQ_CPU_WORKERS"));
    }
    unsetenv("VARQ_CPU_WORKERS");
    const char *bad_bind[] = {"", "Spread", "compact", "1", "none "};
    for (size_t i = 0; i < sizeof bad_bind / sizeof *bad_bind; i++) {
        setenv("VARQ_CPU_BIND", bad_bind[i], 1);
        cr_assert_eq(vq_engine_new(&e, NULL), VQ_EINVAL, "VARQ_CPU_BIND=\"%s\" accepted",
                     bad_bind[i]);
        cr_assert(strstr(vq_errmsg(), "VARQ_CPU_BIND"), "message: %s", vq_errmsg());
    }
    unsetenv("VARQ_CPU_BIND");
    const char *bad_spin[] = {"", "-1", "1000001", "lots", "2k"};
    for (size_t i = 0; i < sizeof bad_spin / sizeof *bad_spin; i++) {
        setenv("VARQ_CPU_SPIN", bad_spin[i], 1);
        cr_assert_eq(vq_engine_new(&e, NULL), VQ_EINVAL, "VARQ_CPU_SPIN=\"%s\" accepted",
                     bad_spin[i]);
        cr_assert(strstr(vq_errmsg(), "VARQ_CPU_SPIN"), "message: %s", vq_errmsg());
    }
    unsetenv("VARQ_CPU_SPIN");
    cr_assert_eq(vq_engine_new(&e, &(vq_engine_opts){.cpu_bind = 4}), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "cpu_bind"), "message: %s", vq_errmsg());
    setenv("VARQ_PROFILE", "", 1);
    cr_assert_eq(vq_engine_new(&e, NULL), VQ_EINVAL);
    unsetenv("VARQ_PROFILE");
}

/* VARQ_CPU_SPIN=0: idle workers and waiters sleep at once, without a look;
 * every op still runs, woken each time (a missed wake-up hangs here). */
Test(engine_api, workers_that_never_spin_still_run_every_op, .timeout = 60)
{
    for (int looks = 0; looks <= 1; looks++) {
        setenv("VARQ_CPU_SPIN", looks ? "1" : "0", 1);
        vq_engine *e;
        vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
        cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
        unsetenv("VARQ_CPU_SPIN");
        vq_var *v = vq_var_new(e, "v");
        long count = 0;
        for (int k = 0; k < 20000; k++) {
            vq_task t = {.fn = add_one, .arg = &count, .writes = &v, .nwrites = 1};
            cr_assert_eq(vq_push(e, &t), 0);
            if (k % 97 == 0) /* the workers go idle, and sleep */
                cr_assert_eq(vq_wait_var(e, v), 0);
        }
        cr_assert_eq(vq_wait_all(e), 0);
        cr_assert_eq(count, 20000);
        vq_engine_free(e);
    }
}

static int record_cpu(void *arg, const vq_exec_ctx *x)
{
    ((int *)arg)[x->worker] = sched_getcpu();
    return 0;
}

/* Bound workers run on the CPUs of the process's mask, one each (spread
 * and close), and a mask of one CPU puts every worker there. */
Test(engine_api, bound_workers_run_on_the_cpus_of_the_process_mask)
{
    cpu_set_t mask, one;
    cr_assert_eq(sched_getaffinity(0, sizeof mask, &mask), 0);
    int first = -1;
    for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
        if (CPU_ISSET(c, &mask))
            first = c;
    const int binds[] = {VQ_CPU_BIND_SPREAD, VQ_CPU_BIND_CLOSE};
    for (int round = 0; round < 3; round++) {
        if (round == 2) { /* as taskset -c <first> would */
            CPU_ZERO(&one);
            CPU_SET(first, &one);
            cr_assert_eq(sched_setaffinity(0, sizeof one, &one), 0);
        }
        vq_engine *e;
        vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2,
                            .cpu_bind = binds[round % 2]};
        cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
        int cpu[2] = {-1, -1};
        vq_var *v[2] = {vq_var_new(e, "a"), vq_var_new(e, "b")};
        /* each worker records its CPU: push until both have run one */
        for (int k = 0; k < 2000 && (cpu[0] < 0 || cpu[1] < 0); k++) {
            vq_task t = {.fn = record_cpu, .arg = cpu, .writes = &v[k % 2], .nwrites = 1};
            cr_assert_eq(vq_push(e, &t), 0);
            if (k % 64 == 63)
                vq_wait_all(e);
        }
        vq_wait_all(e);
        for (int w = 0; w < 2; w++)
            if (cpu[w] >= 0)
                cr_assert(round == 2 ? cpu[w] == first : CPU_ISSET(cpu[w], &mask),
                          "round %d: worker %d ran on CPU %d", round, w, cpu[w]);
        if (CPU_COUNT(&mask) >= 2 && round < 2 && cpu[0] >= 0 && cpu[1] >= 0)
            cr_assert_neq(cpu[0], cpu[1], "round %d: two bound workers share CPU %d", round,
                          cpu[0]);
        vq_engine_free(e);
    }
    cr_assert_eq(sched_setaffinity(0, sizeof mask, &mask), 0);
}

Test(engine_api, environment_selects_engine_and_workers)
{
    setenv("VARQ_ENGINE", "naive", 1);
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, NULL), 0);
    vq_var *v = vq_var_new(e, "v");
    int worker = 0;
    vq_task t = {.fn = record_worker, .arg = &worker, .writes = &v, .nwrites = 1};
    cr_assert_eq(vq_push(e, &t), 0);
    cr_assert_eq(worker, -1, "naive engine did not run the op inside vq_push");
    vq_engine_free(e);

    setenv("VARQ_ENGINE", "threaded", 1);
    setenv("VARQ_CPU_WORKERS", "3", 1);
    cr_assert_eq(vq_engine_new(&e, NULL), 0);
    atomic_store(&gate, 0);
    vq_task hold = {.fn = hold_worker};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(vq_push(e, &hold), 0);
    /* With 3 workers all held, a 4th op cannot start. */
    v = vq_var_new(e, "v");
    worker = -100;
    cr_assert_eq(vq_push(e, &t), 0);
    sleep_us(30000);
    cr_assert_eq(worker, -100, "a 4th worker exists");
    atomic_store(&gate, 1);
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert(worker >= 0 && worker < 3);
    vq_engine_free(e);
}

/* ---- profiler ---- */

static int nop(void *arg, const vq_exec_ctx *x)
{
    (void)arg, (void)x;
    return 0;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "no trace at %s", path);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

Test(engine_api, profiler_writes_every_op_to_a_chrome_trace)
{
    char path[] = "/tmp/varq_trace_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2, .flags = VQ_ENGINE_PROFILE};
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &o), 0);
    vq_var *v = vq_var_new(e, "v");
    for (int i = 0; i < 50; i++) {
        vq_task t = {.fn = nop, .reads = &v, .nreads = i % 2, .name = i % 2 ? "reader" : "free\"op"};
        cr_assert_eq(vq_push(e, &t), 0);
    }
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert_eq(vq_profiler_dump(e, path), 0, "%s", vq_errmsg());
    const char *s = slurp(path);
    cr_assert_eq(count(s, "\"name\":\"reader\""), 25);
    cr_assert_eq(count(s, "\"name\":\"free\\\"op\""), 25, "names are not JSON-escaped");
    cr_assert_eq(count(s, "\"ph\":\"X\""), 50);
    cr_assert(strstr(s, "\"traceEvents\":["));
    vq_engine_free(e);
    unlink(path);

    vq_engine *plain = engine_with(VQ_ENGINE_THREADED, 1);
    cr_assert_eq(vq_profiler_dump(plain, path), VQ_EINVAL);
    vq_engine_free(plain);
}

Test(engine_api, varq_profile_writes_the_trace_when_the_engine_is_freed)
{
    char path[] = "/tmp/varq_trace_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    setenv("VARQ_PROFILE", path, 1);
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, NULL), 0);
    for (int i = 0; i < 10; i++) {
        vq_task t = {.fn = nop, .name = "ten"};
        cr_assert_eq(vq_push(e, &t), 0);
    }
    vq_engine_free(e);
    unsetenv("VARQ_PROFILE");
    cr_assert_eq(count(slurp(path), "\"name\":\"ten\""), 10);
    unlink(path);
}

Test(engine_api, a_varq_profile_that_cannot_be_written_is_an_error_or_a_line_on_stderr)
{
    vq_engine *e;
    setenv("VARQ_PROFILE", "/nonexistent-varq-dir/trace.json", 1);
    cr_assert_eq(vq_engine_new(&e, NULL), VQ_EIO);
    cr_assert(strstr(vq_errmsg(), "cannot create it in /nonexistent-varq-dir"), "%s",
              vq_errmsg());
    setenv("VARQ_PROFILE", "/tmp", 1);
    cr_assert_eq(vq_engine_new(&e, NULL), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "VARQ_PROFILE=/tmp is a directory"), "%s", vq_errmsg());
    /* Writable when the engine is made, failing when it is freed: the
     * lost trace is said on stderr. */
    setenv("VARQ_PROFILE", "/dev/full", 1);
    cr_assert_eq(vq_engine_new(&e, NULL), 0, "%s", vq_errmsg());
    vq_task t = {.fn = nop, .name = "one"};
    cr_assert_eq(vq_push(e, &t), 0);
    char errpath[] = "/tmp/varq_stderr_XXXXXX";
    int efd = mkstemp(errpath);
    cr_assert_geq(efd, 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(efd, 2);
    vq_engine_free(e);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(efd);
    unsetenv("VARQ_PROFILE");
    const char *text = slurp(errpath); /* a static buffer */
    unlink(errpath);
    cr_assert(strstr(text, "varq: the VARQ_PROFILE trace was not written: "), "stderr: %s", text);
    cr_assert(strstr(text, "/dev/full"), "stderr: %s", text);
}

static vq_engine *profiled_engine_with_ops(int nops)
{
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2, .flags = VQ_ENGINE_PROFILE};
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    for (int i = 0; i < nops; i++) {
        vq_task t = {.fn = nop, .name = "an op with a name of some length"};
        cr_assert_eq(vq_push(e, &t), 0);
    }
    cr_assert_eq(vq_wait_all(e), 0);
    return e;
}

/* Every write to /dev/full fails with ENOSPC: VQ_EIO naming the path and
 * the cause. */
Test(engine_api, profiler_dump_to_a_full_device_is_eio_naming_path_and_cause)
{
    vq_engine *e = profiled_engine_with_ops(200);
    cr_assert_eq(vq_profiler_dump(e, "/dev/full"), VQ_EIO);
    cr_assert(strstr(vq_errmsg(), "\"/dev/full\""), "%s", vq_errmsg());
    cr_assert(strstr(vq_errmsg(), strerror(ENOSPC)), "%s", vq_errmsg());
    vq_engine_free(e);
}

/* A disk that fills while the trace is written (the file size limit makes
 * writes past it fail with EFBIG): VQ_EIO, and the file at the path is the
 * one that was there, not a trace cut short; nothing else is left in its
 * directory. */
Test(engine_api, a_trace_cut_short_leaves_the_previous_file_as_it_was)
{
    char dir[] = "/tmp/varq_trace_dir_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/trace.json", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("previous\n", f);
    cr_assert_eq(fclose(f), 0);
    vq_engine *e = profiled_engine_with_ops(200);

    struct rlimit old, small;
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    small = (struct rlimit){4096, old.rlim_max};
    signal(SIGXFSZ, SIG_IGN);
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &small), 0, "%s", strerror(errno));
    int rc = vq_profiler_dump(e, path);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_DFL);
    cr_assert_eq(rc, VQ_EIO, "%d: %s", rc, vq_errmsg());
    cr_assert(strstr(vq_errmsg(), path), "%s", vq_errmsg());
    cr_assert(strstr(vq_errmsg(), strerror(EFBIG)), "%s", vq_errmsg());
    cr_assert_str_eq(slurp(path), "previous\n", "the old file was cut");

    /* and with room enough, the same call replaces it whole */
    cr_assert_eq(vq_profiler_dump(e, path), 0, "%s", vq_errmsg());
    cr_assert_eq(count(slurp(path), "\"ph\":\"X\""), 200);
    vq_engine_free(e);
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    int n = 0;
    for (struct dirent *de; (de = readdir(d)) != NULL;)
        n += de->d_name[0] != '.';
    closedir(d);
    cr_assert_eq(n, 1, "a temporary file was left beside the trace");
    unlink(path);
    rmdir(dir);
}
