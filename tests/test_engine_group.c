/* Groups (bulk execution, engine/var.c): a push that finds an op with the
 * same vars queued last and not yet granted joins that op's group instead
 * of queueing, and runs right after it on the same runner. Checked here:
 * who joins and who does not (white-box, through the var's queue), that a
 * group runs in push order, that errors travel inside a group as between
 * separate ops, and that a push queued in between on a shared var keeps
 * its place. One worker, held by an op on another var while the test
 * pushes, so that nothing starts meanwhile. */
#include "../engine/engine_internal.h"

#include <criterion/criterion.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include "leakcheck.h"

TestSuite(engine_group, .fini = leak_check);

#define MY_ERR (-4343)

static atomic_int released, started, log_len;
static int run_log[256];

static int hold(void *arg, const vq_exec_ctx *x)
{
    (void)arg, (void)x;
    atomic_store(&started, 1);
    while (!atomic_load(&released))
        sched_yield();
    return 0;
}

static int log_run(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    run_log[atomic_fetch_add(&log_len, 1)] = (int)(intptr_t)arg;
    return 0;
}

static int log_fail(void *arg, const vq_exec_ctx *x)
{
    log_run(arg, x);
    return MY_ERR;
}

static void push(vq_engine *e, vq_sync_fn fn, int id, vq_var **r, int nr, vq_var **w, int nw)
{
    vq_task t = {.fn = fn,
                 .arg = (void *)(intptr_t)id,
                 .reads = r,
                 .nreads = nr,
                 .writes = w,
                 .nwrites = nw,
                 .name = "op"};
    cr_assert_eq(vq_push(e, &t), 0, "%s", vq_errmsg());
}

/* A one-worker engine whose worker runs hold() on v until release(): ops
 * pushed on v meanwhile queue behind it. */
static vq_engine *held_engine(vq_var **v)
{
    atomic_store(&released, 0);
    atomic_store(&started, 0);
    atomic_store(&log_len, 0);
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 1};
    vq_engine *e = NULL;
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    *v = vq_var_new(e, "v");
    push(e, hold, -1, NULL, 0, v, 1);
    while (!atomic_load(&started))
        sched_yield();
    return e;
}

static void release_and_free(vq_engine *e)
{
    atomic_store(&released, 1);
    vq_wait_all(e);
    vq_engine_free(e);
}

/* The op queued last on v (the head of the group a push would join). */
static vq__op *last_queued(vq_var *v)
{
    cr_assert_not_null(v->pending_write, "nothing is queued on %s", v->name);
    return v->tail->trigger;
}

Test(engine_group, ops_behind_a_write_join_the_first_and_run_in_push_order)
{
    vq_var *v;
    vq_engine *e = held_engine(&v);
    /* 1 + VQ__GROUP_MAX ops fill the first group; the rest start a second */
    int n = VQ__GROUP_MAX + 8;
    push(e, log_run, 0, NULL, 0, &v, 1);
    vq__op *first = last_queued(v);
    for (int i = 1; i < n; i++)
        push(e, log_run, i, NULL, 0, &v, 1);
    cr_assert_eq(first->group_n, VQ__GROUP_MAX);
    cr_assert_neq(last_queued(v), first);
    cr_assert_eq(last_queued(v)->group_n, n - VQ__GROUP_MAX - 2);
    release_and_free(e);
    cr_assert_eq(atomic_load(&log_len), n);
    for (int i = 0; i < n; i++)
        cr_assert_eq(run_log[i], i, "run %d was op %d", i, run_log[i]);
}

Test(engine_group, prebuilt_ops_on_the_same_vars_join_too)
{
    vq_var *v, *u;
    vq_engine *e = held_engine(&v);
    u = vq_var_new(e, "u");
    vq_task t = {.fn = log_run,
                 .arg = (void *)(intptr_t)7,
                 .reads = &u,
                 .nreads = 1,
                 .writes = &v,
                 .nwrites = 1};
    vq_opr *o = vq_opr_new(e, &t);
    cr_assert_not_null(o, "%s", vq_errmsg());
    for (int i = 0; i < 4; i++)
        cr_assert_eq(vq_push_opr(e, o), 0, "%s", vq_errmsg());
    push(e, log_run, 8, &u, 1, &v, 1); /* same vars, pushed by vq_push */
    cr_assert_eq(last_queued(v)->group_n, 4);
    vq_opr_free(e, o);
    release_and_free(e);
    cr_assert_eq(atomic_load(&log_len), 5);
    cr_assert_eq(run_log[4], 8);
}

Test(engine_group, other_vars_or_modes_do_not_join)
{
    vq_var *v, *u;
    vq_engine *e = held_engine(&v);
    u = vq_var_new(e, "u");
    push(e, log_run, 0, NULL, 0, &v, 1);
    vq__op *a = last_queued(v);
    push(e, log_run, 1, &u, 1, &v, 1); /* one more var */
    cr_assert_eq(a->group_n, 0);
    vq__op *b = last_queued(v);
    cr_assert_neq(b, a);
    push(e, log_run, 2, &v, 1, NULL, 0); /* a read: readers run side by side */
    cr_assert_eq(b->group_n, 0);
    push(e, log_run, 3, NULL, 0, &v, 1); /* after a read: a new queue block */
    cr_assert_eq(last_queued(v)->group_n, 0);
    release_and_free(e);
    cr_assert_eq(atomic_load(&log_len), 4);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(run_log[i], i);
}

/* A's group must not take B: C, pushed between them, writes u, which B
 * writes too, and must run first (serially: A, C, B). */
Test(engine_group, a_push_in_between_on_a_shared_var_keeps_its_place)
{
    vq_var *v, *u;
    vq_engine *e = held_engine(&v);
    u = vq_var_new(e, "u");
    vq_var *vu[2] = {v, u};
    push(e, log_run, 0, NULL, 0, vu, 2);
    vq__op *a = last_queued(v);
    push(e, log_run, 1, NULL, 0, &u, 1);
    push(e, log_run, 2, NULL, 0, vu, 2);
    cr_assert_eq(a->group_n, 0);
    release_and_free(e);
    cr_assert_eq(atomic_load(&log_len), 3);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(run_log[i], i, "run %d was op %d", i, run_log[i]);
}

/* Inside a group as between ops: a failure poisons what it writes, later
 * members are skipped with its error, the var reports it once. */
Test(engine_group, a_failure_in_a_group_skips_the_members_after_it)
{
    vq_var *v;
    vq_engine *e = held_engine(&v);
    push(e, log_run, 0, NULL, 0, &v, 1);
    vq__op *a = last_queued(v);
    push(e, log_run, 1, NULL, 0, &v, 1);
    push(e, log_fail, 2, NULL, 0, &v, 1);
    push(e, log_run, 3, NULL, 0, &v, 1);
    cr_assert_eq(a->group_n, 3);
    atomic_store(&released, 1);
    cr_assert_eq(vq_wait_var(e, v), MY_ERR);
    cr_assert_eq(atomic_load(&log_len), 3, "the op after the failure ran");
    cr_assert_eq(run_log[2], 2);
    /* the head failing skips every member */
    atomic_store(&log_len, 0);
    atomic_store(&released, 0);
    atomic_store(&started, 0);
    vq_var *w = vq_var_new(e, "w");
    push(e, hold, -1, NULL, 0, &w, 1);
    while (!atomic_load(&started))
        sched_yield();
    push(e, log_fail, 0, NULL, 0, &w, 1);
    push(e, log_run, 1, NULL, 0, &w, 1);
    push(e, log_run, 2, NULL, 0, &w, 1);
    cr_assert_eq(last_queued(w)->group_n, 2);
    atomic_store(&released, 1);
    cr_assert_eq(vq_wait_var(e, w), MY_ERR);
    cr_assert_eq(atomic_load(&log_len), 1);
    cr_assert_eq(vq_wait_all(e), MY_ERR);
    vq_engine_free(e);
}
