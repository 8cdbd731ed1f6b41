/* Failure notes under concurrency, without a test framework, so that it
 * runs under ThreadSanitizer too (Criterion cannot): the note that names
 * the op that failed first (engine/surface/engine_services.h) is made on the
 * worker that runs the failed op, passed on by skipped ops running at once
 * on other workers, taken by waiters on the pushing threads and dropped
 * with vars that nobody waits for, by whichever thread frees them.
 *
 *   - engine: pushers each push rounds of a failing op, a fan-out of
 *     readers that it skips, their readers, and one op joining them all;
 *     the waits must name that round's failed op, whatever thread waits;
 *   - ops: threads run div -> add -> mul chains on one engine, eagerly or
 *     captured, each with a zero of its own in the divisor; the wait on the
 *     chain's end must name div and its own message (the failing element),
 *     the same for eager and captured runs; on the threaded engine and the
 *     naive one.
 *
 * Usage: fail_note_stress [rounds per thread]. */
#include <varq/varq.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PUSHERS 3
#define FAN 6
#define MY_ERR (-4300)

static atomic_int failures;
static int rounds = 200;

static void check(int ok, const char *what, int who, const char *msg)
{
    if (!ok) {
        fprintf(stderr, "fail_note_stress: thread %d: %s (%s)\n", who, what, msg);
        atomic_fetch_add(&failures, 1);
    }
}

/* ---- engine ---- */

static vq_engine *engine;
static char (*names)[32]; /* op names: they outlive the engine (vq_task.name) */

static int fail_op(void *arg, const vq_exec_ctx *x)
{
    (void)arg;
    (void)x;
    return MY_ERR;
}

static void fail_async(void *arg, const vq_exec_ctx *x, vq_done *done)
{
    (void)arg;
    (void)x;
    vq_done_finish(done, MY_ERR);
}

static int ok_op(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    atomic_fetch_add((atomic_int *)arg, 1);
    return 0;
}

static void push(vq_task *t, int who)
{
    int rc = vq_push(engine, t);
    check(rc == 0, "push", who, vq_errmsg());
}

static void expect_named(vq_var *v, const char *var, const char *op, int who)
{
    char want[256];
    snprintf(want, sizeof want, "var \"%s\": an op it depends on failed: op '%s' (%s)", var, op,
             vq_strerror(MY_ERR));
    int rc = vq_wait_var(engine, v);
    check(rc == MY_ERR, "the wait returns the failed op's error", who, vq_errmsg());
    if (rc == MY_ERR)
        check(!strcmp(vq_errmsg(), want), "the wait names the op that failed", who, vq_errmsg());
}

static void *pusher(void *arg)
{
    int me = (int)(intptr_t)arg;
    atomic_int ran = 0;
    for (int k = 0; k < rounds; k++) {
        const char *name = names[me * rounds + k];
        vq_var *x = vq_var_new(engine, "x"), *w = vq_var_new(engine, "w"), *y[FAN], *z[FAN];
        char zn[FAN][8];
        for (int i = 0; i < FAN; i++) {
            snprintf(zn[i], sizeof zn[i], "z%d", i);
            y[i] = vq_var_new(engine, "y");
            z[i] = vq_var_new(engine, zn[i]);
        }
        vq_task f = {.writes = &x, .nwrites = 1, .name = name};
        if (k % 2)
            f.async_fn = fail_async;
        else
            f.fn = fail_op;
        push(&f, me);
        for (int i = 0; i < FAN; i++) { /* skipped at once on several workers */
            vq_task r = {.fn = ok_op,
                         .arg = &ran,
                         .reads = &x,
                         .nreads = 1,
                         .writes = &y[i],
                         .nwrites = 1,
                         .name = "reader"};
            push(&r, me);
            vq_task s = {.fn = ok_op,
                         .arg = &ran,
                         .reads = &y[i],
                         .nreads = 1,
                         .writes = &z[i],
                         .nwrites = 1,
                         .name = "reader2"};
            push(&s, me);
        }
        vq_task j = {.fn = ok_op,
                     .arg = &ran,
                     .reads = z,
                     .nreads = FAN,
                     .writes = &w,
                     .nwrites = 1,
                     .name = "join"};
        push(&j, me);
        expect_named(w, "w", name, me);
        for (int i = 0; i < FAN; i += 2)
            expect_named(z[i], zn[i], name, me);
        /* the rest go with their notes (each freed by a deletion op, or
         * here when idle) */
        vq_var_free(engine, x);
        vq_var_free(engine, w);
        for (int i = 0; i < FAN; i++) {
            vq_var_free(engine, y[i]);
            vq_var_free(engine, z[i]);
        }
    }
    check(atomic_load(&ran) == 0, "no skipped op ran", me, "");
    return NULL;
}

static void engine_part(void)
{
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 4};
    names = malloc((size_t)PUSHERS * (size_t)rounds * sizeof *names);
    if (!names || vq_engine_new(&engine, &o) != 0) {
        check(0, "set-up", -1, vq_errmsg());
        free(names);
        return;
    }
    for (int i = 0; i < PUSHERS * rounds; i++)
        snprintf(names[i], sizeof names[i], "f%d.%d", i / rounds, i % rounds);
    pthread_t th[PUSHERS];
    for (int p = 0; p < PUSHERS; p++)
        pthread_create(&th[p], NULL, pusher, (void *)(intptr_t)p);
    for (int p = 0; p < PUSHERS; p++)
        pthread_join(th[p], NULL);
    check(vq_wait_all(engine) == MY_ERR, "wait_all", -1, vq_errmsg());
    vq_engine_free(engine);
    free(names);
}

/* ---- ops ---- */

#define CHAINS 4

static vq_tensor *shared_a; /* i32 [3], read by every chain */

static void *chain(void *arg)
{
    int me = (int)(intptr_t)arg, zero = me % 3;
    int64_t sh[1] = {3};
    int32_t bv[3] = {1, 2, 3};
    bv[zero] = 0;
    char want[256];
    snprintf(want, sizeof want,
             "an op this tensor depends on failed: op 'div' (integer division by zero (or "
             "overflow) at output element %d)",
             zero);
    for (int k = 0; k < rounds; k++) {
        bool captured = k % 2 == 1;
        vq_tensor *b = NULL, *q = NULL, *r = NULL, *m = NULL;
        check(vq_tensor_from(&b, VQ_I32, 1, sh, bv) == 0, "tensor", me, vq_errmsg());
        if (captured)
            check(vq_capture_begin(engine) == 0, "begin", me, vq_errmsg());
        int rc = vq_op_run(engine, "div", (vq_tensor *[]){shared_a, b}, 2, &q, 1, NULL, 0);
        rc = rc ? rc : vq_op_run(engine, "add", (vq_tensor *[]){q, shared_a}, 2, &r, 1, NULL, 0);
        rc = rc ? rc : vq_op_run(engine, "mul", (vq_tensor *[]){r, r}, 2, &m, 1, NULL, 0);
        check(rc == 0, "vq_op_run", me, vq_errmsg());
        if (captured)
            check(vq_capture_end(engine) == 0, "end", me, vq_errmsg());
        bool keep_q = k % 4 >= 2;
        if (!keep_q) {
            vq_tensor_release(q); /* its var goes; the note lives on in r's and m's */
            q = NULL;
        }
        if (m) {
            check(vq_tensor_wait(m) == VQ_EINVAL, "the chain's end fails", me, vq_errmsg());
            check(!strcmp(vq_errmsg(), want), captured ? "captured: names div" : "eager: names div",
                  me, vq_errmsg());
        }
        if (q) {
            check(vq_tensor_wait(q) == VQ_EINVAL, "div's output fails", me, vq_errmsg());
            check(!strncmp(vq_errmsg(), "div: integer division", 21), "div's own message", me,
                  vq_errmsg());
        }
        vq_tensor_release(m);
        vq_tensor_release(r); /* never waited for: its note goes with its var */
        vq_tensor_release(q);
        vq_tensor_release(b);
    }
    return NULL;
}

static void ops_part(int kind)
{
    vq_engine_opts o = {.kind = kind, .cpu_workers = 4};
    int64_t sh[1] = {3};
    int32_t av[3] = {4, 5, 6};
    if (vq_engine_new(&engine, &o) != 0 || vq_tensor_from(&shared_a, VQ_I32, 1, sh, av) != 0) {
        check(0, "set-up", -1, vq_errmsg());
        return;
    }
    pthread_t th[CHAINS];
    for (int p = 0; p < CHAINS; p++)
        pthread_create(&th[p], NULL, chain, (void *)(intptr_t)p);
    for (int p = 0; p < CHAINS; p++)
        pthread_join(th[p], NULL);
    check(vq_tensor_wait(shared_a) == 0, "the shared input never failed", -1, vq_errmsg());
    vq_tensor_release(shared_a);
    vq_engine_free(engine);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        rounds = atoi(argv[1]);
    if (rounds < 1)
        rounds = 1;
    engine_part();
    ops_part(VQ_ENGINE_THREADED);
    ops_part(VQ_ENGINE_NAIVE);
    int n = atomic_load(&failures);
    if (n) {
        fprintf(stderr, "fail_note_stress: %d failures\n", n);
        return 1;
    }
    printf("fail_note_stress: %d rounds per thread, ok\n", rounds);
    return 0;
}
