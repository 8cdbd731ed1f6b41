/* Errors (docs/design/engine.md): a failed op poisons what it writes, dependents are
 * skipped and pass the error on, waits report once and clear, waiting inside
 * an op is VQ_EDEADLK, and bad arguments are VQ_EINVAL with a message. Each
 * behaviour is checked on the threaded and the naive engine. And running
 * out of memory where no caller could hear of it (the dispatch path) is
 * survived, not waited out. */
#include <varq/varq.h>

#include <criterion/criterion.h>
#include <stdlib.h>
#include <criterion/parameterized.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include "leakcheck.h"
#include "stream.h"
#include "engine_internal.h"
#include "fault.h"
#include <sched.h>

TestSuite(engine_errors, .fini = leak_check);


#define MY_ERR (-4242)

static vq_engine *engine_of(int kind)
{
    vq_engine_opts o = {.kind = kind, .cpu_workers = 2};
    vq_engine *e = NULL;
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    return e;
}

static atomic_int ran[16];

static int fail_op(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    atomic_fetch_add(&ran[(intptr_t)arg], 1);
    return MY_ERR;
}

static int ok_op(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    atomic_fetch_add(&ran[(intptr_t)arg], 1);
    return 0;
}

static void push(vq_engine *e, vq_sync_fn fn, int id, vq_var **r, int nr, vq_var **w, int nw)
{
    vq_task t = {.fn = fn, .arg = (void *)(intptr_t)id, .reads = r, .nreads = nr, .writes = w,
                 .nwrites = nw, .name = "op"};
    cr_assert_eq(vq_push(e, &t), 0, "%s", vq_errmsg());
}

static void reset_ran(void)
{
    for (int i = 0; i < 16; i++)
        atomic_store(&ran[i], 0);
}

ParameterizedTestParameters(engine_errors, poison_travels_along_a_chain)
{
    static int kinds[] = {VQ_ENGINE_THREADED, VQ_ENGINE_NAIVE};
    return cr_make_param_array(int, kinds, 2);
}

ParameterizedTest(int *kind, engine_errors, poison_travels_along_a_chain)
{
    reset_ran();
    vq_engine *e = engine_of(*kind);
    vq_var *a = vq_var_new(e, "a"), *b = vq_var_new(e, "b"), *c = vq_var_new(e, "c"),
           *other = vq_var_new(e, "other");
    push(e, fail_op, 0, NULL, 0, &a, 1);
    push(e, ok_op, 1, &a, 1, &b, 1);
    push(e, ok_op, 2, &b, 1, &c, 1);
    push(e, ok_op, 3, NULL, 0, &other, 1); /* unrelated: runs */
    cr_assert_eq(vq_wait_var(e, c), MY_ERR);
    cr_assert_eq(vq_wait_var(e, c), 0, "vq_wait_var did not clear the error");
    cr_assert_eq(vq_wait_var(e, other), 0);
    cr_assert_eq(atomic_load(&ran[0]), 1);
    cr_assert_eq(atomic_load(&ran[1]), 0, "an op reading a failed var ran");
    cr_assert_eq(atomic_load(&ran[2]), 0, "an op two steps after a failure ran");
    cr_assert_eq(atomic_load(&ran[3]), 1);
    cr_assert_eq(vq_wait_all(e), MY_ERR);
    cr_assert_eq(vq_wait_all(e), 0, "vq_wait_all did not clear its record");
    /* a and b are still failed: a write of b is skipped again */
    push(e, ok_op, 4, NULL, 0, &b, 1);
    cr_assert_eq(vq_wait_var(e, b), MY_ERR);
    cr_assert_eq(atomic_load(&ran[4]), 0);
    /* cleared now: the next op on b runs */
    push(e, ok_op, 5, NULL, 0, &b, 1);
    cr_assert_eq(vq_wait_var(e, b), 0);
    cr_assert_eq(atomic_load(&ran[5]), 1);
    cr_assert_eq(vq_wait_var(e, a), MY_ERR);
    vq_engine_free(e);
}

ParameterizedTestParameters(engine_errors, a_wait_names_the_op_that_failed_first)
{
    static int kinds[] = {VQ_ENGINE_THREADED, VQ_ENGINE_NAIVE};
    return cr_make_param_array(int, kinds, 2);
}

/* Pushes fn (ran[id]) named name, reading r (if not NULL) and writing w. */
static void push_named(vq_engine *e, vq_sync_fn fn, int id, vq_var *r, vq_var *w, const char *name)
{
    vq_task t = {.fn = fn, .arg = (void *)(intptr_t)id, .writes = &w, .nwrites = 1, .name = name};
    t.reads = &r;
    t.nreads = r != NULL;
    cr_assert_eq(vq_push(e, &t), 0, "%s", vq_errmsg());
}

/* vq_wait_var(v) fails with MY_ERR, naming var and the op that failed. */
static void assert_wait_names(vq_engine *e, vq_var *v, const char *var, const char *op)
{
    char want[256];
    snprintf(want, sizeof want, "var \"%s\": an op it depends on failed: op '%s' (%s)", var, op,
             vq_strerror(MY_ERR));
    cr_assert_eq(vq_wait_var(e, v), MY_ERR);
    cr_assert_str_eq(vq_errmsg(), want);
}

/* A fails; B and C, which read its output and write vars of their own,
 * are skipped: the wait on C's var names A (its task name) however many
 * skipped ops lie between, and so do the waits on the var of D, an op
 * skipped for A's failure after the first wait, and on A's own. */
ParameterizedTest(int *kind, engine_errors, a_wait_names_the_op_that_failed_first)
{
    reset_ran();
    vq_engine *e = engine_of(*kind);
    vq_var *a = vq_var_new(e, "a"), *b = vq_var_new(e, "b"), *c = vq_var_new(e, "c"),
           *d = vq_var_new(e, "d");
    push_named(e, fail_op, 0, NULL, a, "A");
    push_named(e, ok_op, 1, a, b, "B");
    push_named(e, ok_op, 2, b, c, "C");
    assert_wait_names(e, c, "c", "A");
    push_named(e, ok_op, 3, b, d, "D"); /* b still carries A's failure */
    assert_wait_names(e, d, "d", "A");
    assert_wait_names(e, a, "a", "A");
    cr_assert_eq(atomic_load(&ran[0]), 1);
    for (int i = 1; i <= 3; i++)
        cr_assert_eq(atomic_load(&ran[i]), 0, "skipped op %d ran", i);
    /* b's failure is never waited for: its note goes with the engine's
     * vars (the suite's leak check) */
    vq_engine_free(e);
}

ParameterizedTestParameters(engine_errors, run_on_failed_ops_run_and_leave_the_failure)
{
    static int kinds[] = {VQ_ENGINE_THREADED, VQ_ENGINE_NAIVE};
    return cr_make_param_array(int, kinds, 2);
}

ParameterizedTest(int *kind, engine_errors, run_on_failed_ops_run_and_leave_the_failure)
{
    reset_ran();
    vq_engine *e = engine_of(*kind);
    vq_var *a = vq_var_new(e, "a"), *b = vq_var_new(e, "b");
    push(e, fail_op, 0, NULL, 0, &a, 1);
    vq_task t = {.fn = ok_op, .arg = (void *)(intptr_t)1, .reads = &a, .nreads = 1,
                 .writes = &b, .nwrites = 1, .props = VQ_PROP_RUN_ON_FAILED};
    cr_assert_eq(vq_push(e, &t), 0, "%s", vq_errmsg());
    push(e, ok_op, 2, &a, 1, NULL, 0); /* without the prop: skipped */
    cr_assert_eq(vq_wait_var(e, b), 0, "the op ran and did not fail b");
    cr_assert_eq(atomic_load(&ran[1]), 1);
    cr_assert_eq(vq_wait_var(e, a), MY_ERR, "a keeps its failure");
    cr_assert_eq(atomic_load(&ran[2]), 0);
    vq_wait_all(e);
    vq_engine_free(e);
}

ParameterizedTestParameters(engine_errors, poison_crosses_a_diamond)
{
    static int kinds[] = {VQ_ENGINE_THREADED, VQ_ENGINE_NAIVE};
    return cr_make_param_array(int, kinds, 2);
}

ParameterizedTest(int *kind, engine_errors, poison_crosses_a_diamond)
{
    reset_ran();
    vq_engine *e = engine_of(*kind);
    vq_var *top = vq_var_new(e, "top"), *l = vq_var_new(e, "left"), *r = vq_var_new(e, "right"),
           *bottom = vq_var_new(e, "bottom");
    push(e, fail_op, 0, NULL, 0, &top, 1);
    push(e, ok_op, 1, &top, 1, &l, 1);
    push(e, ok_op, 2, &top, 1, &r, 1);
    vq_var *both[] = {l, r};
    push(e, ok_op, 3, both, 2, &bottom, 1);
    cr_assert_eq(vq_wait_var(e, bottom), MY_ERR);
    cr_assert_eq(vq_wait_var(e, l), MY_ERR);
    cr_assert_eq(vq_wait_var(e, r), MY_ERR);
    for (int i = 1; i <= 3; i++)
        cr_assert_eq(atomic_load(&ran[i]), 0, "op %d ran after a failure upstream", i);
    cr_assert_eq(vq_wait_all(e), MY_ERR);
    vq_engine_free(e);
}

static void fail_async(void *arg, const vq_exec_ctx *x, vq_done *d)
{
    (void)x;
    atomic_fetch_add(&ran[(intptr_t)arg], 1);
    vq_done_finish(d, VQ_EIO);
}

ParameterizedTestParameters(engine_errors, async_failure_poisons_like_a_sync_one)
{
    static int kinds[] = {VQ_ENGINE_THREADED, VQ_ENGINE_NAIVE};
    return cr_make_param_array(int, kinds, 2);
}

ParameterizedTest(int *kind, engine_errors, async_failure_poisons_like_a_sync_one)
{
    reset_ran();
    vq_engine *e = engine_of(*kind);
    vq_var *a = vq_var_new(e, "a"), *b = vq_var_new(e, "b");
    vq_task t = {.async_fn = fail_async, .arg = (void *)0, .writes = &a, .nwrites = 1};
    cr_assert_eq(vq_push(e, &t), 0);
    push(e, ok_op, 1, &a, 1, &b, 1);
    cr_assert_eq(vq_wait_var(e, b), VQ_EIO);
    cr_assert_eq(atomic_load(&ran[1]), 0);
    cr_assert_eq(vq_wait_all(e), VQ_EIO);
    vq_engine_free(e);
}

/* ---- waiting inside an op ---- */

struct inside {
    vq_engine *e;
    vq_var *v;
    int wait_var_rc, wait_all_rc;
};

static int wait_inside(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct inside *in = arg;
    in->wait_var_rc = vq_wait_var(in->e, in->v);
    in->wait_all_rc = vq_wait_all(in->e);
    return 0;
}

ParameterizedTestParameters(engine_errors, waiting_inside_an_op_is_edeadlk)
{
    static int kinds[] = {VQ_ENGINE_THREADED, VQ_ENGINE_NAIVE};
    return cr_make_param_array(int, kinds, 2);
}

ParameterizedTest(int *kind, engine_errors, waiting_inside_an_op_is_edeadlk)
{
    vq_engine *e = engine_of(*kind);
    vq_var *v = vq_var_new(e, "v"), *w = vq_var_new(e, "w");
    struct inside in = {e, v, 1, 1};
    vq_task t = {.fn = wait_inside, .arg = &in, .writes = &w, .nwrites = 1};
    cr_assert_eq(vq_push(e, &t), 0);
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert_eq(in.wait_var_rc, VQ_EDEADLK);
    cr_assert_eq(in.wait_all_rc, VQ_EDEADLK);
    vq_engine_free(e);
}

/* ---- bad arguments ---- */

static void nop_async(void *arg, const vq_exec_ctx *x, vq_done *d)
{
    (void)arg, (void)x;
    vq_done_finish(d, 0);
}

static void expect_einval(vq_engine *e, const vq_task *t, const char *what)
{
    cr_assert_eq(vq_push(e, t), VQ_EINVAL, "push with %s accepted", what);
    cr_assert_gt(strlen(vq_errmsg()), 0, "no message for %s", what);
    cr_assert_null(vq_opr_new(e, t), "opr with %s accepted", what);
}

ParameterizedTestParameters(engine_errors, bad_pushes_are_einval_with_a_message)
{
    static int kinds[] = {VQ_ENGINE_THREADED, VQ_ENGINE_NAIVE};
    return cr_make_param_array(int, kinds, 2);
}

ParameterizedTest(int *kind, engine_errors, bad_pushes_are_einval_with_a_message)
{
    reset_ran();
    vq_engine *e = engine_of(*kind), *e2 = engine_of(*kind);
    vq_var *v = vq_var_new(e, "v"), *gone = vq_var_new(e, "gone"), *foreign = vq_var_new(e2, "f");
    vq_var *null_var = NULL;
    cr_assert_eq(vq_var_free(e, gone), 0);
    cr_assert_eq(vq_wait_all(e), 0);

    vq_task ok = {.fn = ok_op, .arg = (void *)0, .writes = &v, .nwrites = 1};
    cr_assert_eq(vq_push(NULL, &ok), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "engine"));
    cr_assert_eq(vq_push(e, NULL), VQ_EINVAL);

    vq_task t = ok;
    t.nreads = -1;
    expect_einval(e, &t, "a negative nreads");
    t = ok;
    t.nwrites = -2;
    expect_einval(e, &t, "a negative nwrites");
    t = ok;
    t.async_fn = nop_async;
    expect_einval(e, &t, "both fn and async_fn");
    cr_assert(strstr(vq_errmsg(), "exactly one"));
    t = ok;
    t.fn = NULL;
    expect_einval(e, &t, "neither fn nor async_fn");
    t = ok;
    t.writes = &gone;
    expect_einval(e, &t, "a freed var");
    cr_assert(strstr(vq_errmsg(), "freed"), "message: %s", vq_errmsg());
    t = ok;
    t.reads = &foreign;
    t.nreads = 1;
    expect_einval(e, &t, "a var of another engine");
    t = ok;
    t.writes = &null_var;
    expect_einval(e, &t, "a NULL var");
    t = ok;
    t.writes = NULL;
    expect_einval(e, &t, "a NULL array with a count");
    t = ok;
    t.props = 1u << 20;
    expect_einval(e, &t, "unknown props");
    t = ok;
    t.ctx = (vq_ctx){VQ_DEV_GPU, 0};
    if (!getenv("VARQ_GPU_BACKEND") && !vq__stream_cuda()) /* no GPU here */
        cr_assert_eq(vq_push(e, &t), VQ_ENOSYS, "GPU op without a GPU");

    cr_assert_eq(vq_var_free(e, gone), VQ_EINVAL, "double free accepted");
    cr_assert_eq(vq_wait_var(e, gone), VQ_EINVAL);
    cr_assert_eq(vq_wait_var(e, foreign), VQ_EINVAL);
    cr_assert_eq(vq_push_opr(e, NULL), VQ_EINVAL);
    cr_assert_null(vq_var_new(NULL, "x"));
    cr_assert_eq(vq_wait_all(NULL), VQ_EINVAL);

    cr_assert_eq(atomic_load(&ran[0]), 0, "a rejected op ran");
    cr_assert_eq(vq_wait_all(e), 0, "a rejected push left an error behind");
    vq_engine_free(e);
    vq_engine_free(e2);
}

Test(engine_errors, opr_on_a_freed_var_is_einval)
{
    vq_engine *e = engine_of(VQ_ENGINE_THREADED);
    vq_var *v = vq_var_new(e, "v");
    vq_task t = {.fn = ok_op, .arg = (void *)0, .writes = &v, .nwrites = 1};
    vq_opr *op = vq_opr_new(e, &t);
    cr_assert_not_null(op);
    cr_assert_eq(vq_var_free(e, v), 0);
    cr_assert_eq(vq_push_opr(e, op), VQ_EINVAL);
    vq_opr_free(e, op);
    vq_engine_free(e);
}

Test(engine_errors, strerror_names_every_code)
{
    int codes[] = {VQ_EINVAL, VQ_ENOMEM, VQ_EDEADLK, VQ_ECANCELED, VQ_EIO, VQ_EBUSY, VQ_ENOSYS};
    for (size_t i = 0; i < sizeof codes / sizeof *codes; i++)
        cr_assert(strncmp(vq_strerror(codes[i]), "VQ_E", 4) == 0);
    cr_assert_str_eq(vq_strerror(-99999), "unknown error");
    cr_assert_str_eq(vq_strerror(0), "VQ_OK: success");
}

/* ---- out of memory on the dispatch path ---- */

static atomic_int held, started, run_log_len;
static int run_log[512];

static int hold_until_released(void *arg, const vq_exec_ctx *x)
{
    (void)arg, (void)x;
    atomic_store(&started, 1);
    while (!atomic_load(&held))
        sched_yield();
    return 0;
}

static int log_run(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    run_log[atomic_fetch_add(&run_log_len, 1)] = (int)(intptr_t)arg;
    return 0;
}

/* A ready op with a priority goes to the pool's heap; when the heap's array
 * cannot grow, the dispatcher has no caller to give VQ_ENOMEM to, and it
 * used to wait for memory. The op is spilled instead: it runs, after the
 * ops of the array (engine/threaded.c, tests/prim_heap.c). */
Test(engine_errors, a_ready_op_that_finds_no_memory_for_the_heap_still_runs)
{
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 1};
    vq_engine *e = NULL;
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    vq_var *v = vq_var_new(e, "v");
    /* This thread's pool lists hold what the pushes below take, so that
     * the one allocation they make is the heap's growth. */
    void *warm[2][600];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 600; i++)
            cr_assert_not_null(warm[k][i] = vq__pool_alloc(k == 0 ? VQ__POOL_OP : VQ__POOL_VBLOCK));
        for (int i = 0; i < 600; i++)
            vq__pool_free(k == 0 ? VQ__POOL_OP : VQ__POOL_VBLOCK, warm[k][i]);
    }
    atomic_store(&held, 0);
    atomic_store(&started, 0);
    atomic_store(&run_log_len, 0);
    vq_task hold = {.fn = hold_until_released, .name = "hold"};
    cr_assert_eq(vq_push(e, &hold), 0);
    while (!atomic_load(&started)) /* the one worker is busy: what follows queues */
        sched_yield();
    enum { ARRAY = 256, N = 300 }; /* the heap's array starts with 256 items */
    for (int i = 0; i < N; i++) {
        /* a read of v: an op with a var is never run at once by the pusher */
        vq_task t = {.fn = log_run, .arg = (void *)(intptr_t)i, .reads = &v, .nreads = 1,
                     .priority = 1, .name = "ready"};
        if (i == ARRAY)
            vq__fault_arm(1);
        cr_assert_eq(vq_push(e, &t), 0, "push %d: %s", i, vq_errmsg());
        if (i == ARRAY) {
            vq__fault_arm(0);
            cr_assert(vq__fault_fired(), "the push of op %d made no allocation", i);
            cr_assert_not_null(e->cpu.heap.spill_head, "op %d was not spilled", i);
        }
    }
    atomic_store(&held, 1);
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert_eq(atomic_load(&run_log_len), N, "%d of %d ops ran", atomic_load(&run_log_len), N);
    /* the array's ops in push order, then the spilled one */
    for (int i = 0, want = 0; i < N - 1; i++, want++) {
        if (want == ARRAY)
            want++;
        cr_assert_eq(run_log[i], want, "position %d: op %d ran, not op %d", i, run_log[i], want);
    }
    cr_assert_eq(run_log[N - 1], ARRAY, "the spilled op did not run last");
    vq_engine_free(e);
}

/* The spare op of a prebuilt op covers the op, not its var blocks: a push
 * whose blocks cannot be had for want of memory fails, and says so (the
 * executor's pushes depend on this being an error, not a wait). */
Test(engine_errors, a_prebuilt_push_without_memory_for_its_var_blocks_is_enomem)
{
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 1};
    vq_engine *e = NULL;
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    vq_var *v = vq_var_new(e, "v");
    vq_task t = {.fn = ok_op, .arg = (void *)(intptr_t)1, .writes = &v, .nwrites = 1,
                 .name = "prebuilt"};
    vq_opr *op = vq_opr_new(e, &t);
    cr_assert_not_null(op, "%s", vq_errmsg());
    /* Empty this thread's list of var blocks and the depot: take blocks
     * until a new slab is carved, then that slab's. */
    enum { MAX_HELD = 1 << 16 };
    void **held = malloc(MAX_HELD * sizeof *held);
    int n = 0;
    size_t slabs = vq__pool_slabs();
    while (n < MAX_HELD - VQ__MAG && vq__pool_slabs() == slabs)
        cr_assert_not_null(held[n++] = vq__pool_alloc(VQ__POOL_VBLOCK));
    cr_assert_lt(n, MAX_HELD - VQ__MAG, "no slab carved after %d blocks", n);
    for (int i = 1; i < VQ__MAG; i++)
        held[n++] = vq__pool_alloc(VQ__POOL_VBLOCK);
    /* an op in this thread's list: the push's one allocation is the slab */
    vq__pool_free(VQ__POOL_OP, vq__pool_alloc(VQ__POOL_OP));
    vq__fault_arm(1); /* the next slab */
    int rc = vq_push_opr(e, op);
    vq__fault_arm(0);
    cr_assert_eq(rc, VQ_ENOMEM, "push: %d (%s)", rc, vq_errmsg());
    cr_assert(vq__fault_fired());
    cr_assert_not_null(strstr(vq_errmsg(), "vq_push_opr"), "%s", vq_errmsg());
    while (n > 0)
        vq__pool_free(VQ__POOL_VBLOCK, held[--n]);
    free(held);
    cr_assert_eq(vq_push_opr(e, op), 0, "%s", vq_errmsg()); /* memory is back */
    vq_opr_free(e, op);
    cr_assert_eq(vq_wait_all(e), 0);
    vq_engine_free(e);
}
