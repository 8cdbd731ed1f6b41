/* Regression for parallel loops inside an op (vq__parallel_for,
 * engine/parallel.c). Checked, each in ops pushed on a 2-worker engine:
 *   - every index is covered exactly once, over many rounds and sizes
 *     (counts per index; under ThreadSanitizer the chunks' plain writes
 *     must be ordered before the caller's reads);
 *   - with the other worker idle, a second participant joins (a chunk
 *     waits up to 10 s for one: a loop that never shares fails);
 *   - with the other worker held by a long op, the loop completes on the
 *     caller alone (no wait for a helper op that cannot start);
 *   - a chunk's error is returned, and every chunk still runs;
 *   - serial (the same chunks in order, slot 0) outside a worker, inside a
 *     chunk, and on the naive engine;
 *   - chunk bounds that depend only on n and the chunk size.
 * A plain C program, so that it runs under ThreadSanitizer too.
 *
 * Usage: prim_parallel [rounds]; returns nonzero on failure. */
#include "engine_internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int failures;

#define CHECK(cond, ...)                                    \
    do {                                                    \
        if (!(cond)) {                                      \
            fprintf(stderr, "prim_parallel: " __VA_ARGS__); \
            fputc('\n', stderr);                            \
            failures++;                                     \
        }                                                   \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- coverage ---- */

struct cover {
    int64_t n, chunk;
    int *hits;
    int bad_bounds; /* plain: each index written by the one chunk that owns it */
    atomic_int max_slot;
    int rc;
    atomic_int finished;
};

static int cover_chunk(void *arg, int64_t lo, int64_t hi, int slot)
{
    struct cover *c = arg;
    if (lo % c->chunk || (hi != c->n && hi - lo != c->chunk))
        c->bad_bounds = 1;
    for (int64_t i = lo; i < hi; i++)
        c->hits[i]++;
    int seen = atomic_load(&c->max_slot);
    while (slot > seen && !atomic_compare_exchange_weak(&c->max_slot, &seen, slot))
        ;
    return 0;
}

static int cover_op(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct cover *c = arg;
    c->rc = vq__parallel_for(c->n, c->chunk, cover_chunk, c);
    atomic_store(&c->finished, 1);
    return 0;
}

static void check_cover(vq_engine *e, long rounds)
{
    int width = 0;
    for (long r = 0; r < rounds; r++) {
        struct cover c = {.n = 1 + (r * 7919) % 5000, .chunk = 1 + r % 97};
        c.hits = calloc((size_t)c.n, sizeof *c.hits);
        atomic_init(&c.max_slot, 0);
        vq_task t = {.fn = cover_op, .arg = &c};
        CHECK(vq_push(e, &t) == 0, "push: %s", vq_errmsg());
        CHECK(vq_wait_all(e) == 0, "wait: %s", vq_errmsg());
        CHECK(c.rc == 0 && !c.bad_bounds, "round %ld: returned %d, chunk bounds %s", r, c.rc,
              c.bad_bounds ? "wrong" : "right");
        for (int64_t i = 0; i < c.n; i++)
            CHECK(c.hits[i] == 1, "round %ld: index %lld of %lld ran %d times", r, (long long)i,
                  (long long)c.n, c.hits[i]);
        int s = atomic_load(&c.max_slot);
        CHECK(s < VQ__PAR_MAX_SLOTS, "round %ld: slot %d", r, s);
        width = s + 1 > width ? s + 1 : width;
        free(c.hits);
    }
    printf("prim_parallel: %ld rounds covered every index once (up to %d participants)\n", rounds,
           width);
}

/* ---- a second participant joins ---- */

struct join {
    atomic_int slots_seen; /* bit per slot */
    int rc;
};

/* Two chunks: each marks its slot and waits (10 s at most) until two slots
 * have been seen. Shared, the pair passes at once; a loop that never
 * shares takes 20 s and fails. */
static int join_chunk(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)lo, (void)hi;
    struct join *j = arg;
    atomic_fetch_or(&j->slots_seen, 1 << slot);
    for (double t0 = now_s();
         __builtin_popcount((unsigned)atomic_load(&j->slots_seen)) < 2 && now_s() - t0 < 10;)
        sched_yield();
    return 0;
}

static int join_op(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct join *j = arg;
    CHECK(vq__parallel_slots() == 2, "a worker of 2 sees %d slots", vq__parallel_slots());
    j->rc = vq__parallel_for(2, 1, join_chunk, j);
    return 0;
}

static void check_join(vq_engine *e)
{
    struct join j = {.rc = -1};
    atomic_init(&j.slots_seen, 0);
    vq_task t = {.fn = join_op, .arg = &j};
    vq_push(e, &t);
    vq_wait_all(e);
    int seen = __builtin_popcount((unsigned)atomic_load(&j.slots_seen));
    CHECK(j.rc == 0 && seen == 2, "idle worker: %d participants (rc %d), want 2", seen, j.rc);
    printf("prim_parallel: an idle worker joined the loop (%d participants)\n", seen);
}

/* ---- the other worker busy ---- */

static atomic_int release_blocker, blocker_running;

static int blocker(void *arg, const vq_exec_ctx *x)
{
    (void)arg, (void)x;
    atomic_store(&blocker_running, 1);
    while (!atomic_load(&release_blocker))
        sched_yield();
    return 0;
}

static void check_busy(vq_engine *e)
{
    vq_var *v = vq_var_new(e, "held");
    vq_task b = {.fn = blocker, .writes = &v, .nwrites = 1};
    vq_push(e, &b);
    while (!atomic_load(&blocker_running))
        sched_yield();
    struct cover c = {.n = 1000, .chunk = 10};
    c.hits = calloc((size_t)c.n, sizeof *c.hits);
    atomic_init(&c.max_slot, 0);
    atomic_init(&c.finished, 0);
    vq_task t = {.fn = cover_op, .arg = &c};
    vq_push(e, &t);
    /* Not vq_wait_*: a waiting thread may run the queued helper op itself
     * (engine.h), and this checks the loop without any helper. */
    for (double t0 = now_s(); !atomic_load(&c.finished) && now_s() - t0 < 30;)
        sched_yield();
    int done = 1;
    for (int64_t i = 0; i < c.n; i++)
        done &= c.hits[i] == 1;
    CHECK(done && c.rc == 0, "with the other worker held, the loop did not cover its indices");
    CHECK(atomic_load(&c.max_slot) == 0, "a held worker ran slot %d", atomic_load(&c.max_slot));
    atomic_store(&release_blocker, 1);
    vq_wait_all(e);
    vq_var_free(e, v);
    free(c.hits);
    printf("prim_parallel: with the other worker held, the caller ran the loop alone\n");
}

/* ---- errors and serial runs ---- */

struct fail {
    atomic_llong ran;
    int rc;
    int serial_slot, serial_calls;
};

static int fail_chunk(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    struct fail *f = arg;
    atomic_fetch_add(&f->ran, hi - lo);
    return lo == 0 ? VQ_EINVAL : 0;
}

static int fail_op(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct fail *f = arg;
    f->rc = vq__parallel_for(4096, 1, fail_chunk, f);
    return 0;
}

static int nested_inner(void *arg, int64_t lo, int64_t hi, int slot)
{
    struct fail *f = arg;
    int in_order = lo == f->serial_calls * 10 && hi == lo + 10;
    f->serial_calls++;
    f->serial_slot = slot;
    return in_order ? 0 : VQ_EINVAL;
}

static int nested_outer(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)arg, (void)lo, (void)hi, (void)slot;
    struct fail f = {.serial_slot = -1};
    CHECK(vq__parallel_slots() == 1, "inside a chunk: %d slots", vq__parallel_slots());
    int rc = vq__parallel_for(100, 10, nested_inner, &f);
    CHECK(rc == 0 && f.serial_calls == 10 && f.serial_slot == 0,
          "a nested loop did not run its chunks in order here (rc %d, %d calls)", rc,
          f.serial_calls);
    return 0;
}

static int nested_op(void *arg, const vq_exec_ctx *x)
{
    (void)arg, (void)x;
    return vq__parallel_for(8, 1, nested_outer, NULL);
}

static void check_errors_and_serial(vq_engine *e)
{
    struct fail f = {.rc = 0};
    atomic_init(&f.ran, 0);
    vq_task t = {.fn = fail_op, .arg = &f};
    vq_push(e, &t);
    vq_wait_all(e);
    CHECK(f.rc == VQ_EINVAL && atomic_load(&f.ran) == 4096,
          "a failing chunk: rc %d, %lld of 4096 indices ran", f.rc, (long long)atomic_load(&f.ran));

    vq_task n = {.fn = nested_op};
    vq_push(e, &n);
    CHECK(vq_wait_all(e) == 0, "nested loops: %s", vq_errmsg());

    struct fail s = {.serial_slot = -1};
    CHECK(vq__parallel_slots() == 1, "outside a worker: %d slots", vq__parallel_slots());
    CHECK(vq__parallel_for(100, 10, nested_inner, &s) == 0 && s.serial_calls == 10,
          "outside a worker the loop did not run its chunks in order");
    printf("prim_parallel: errors returned, serial outside workers and inside chunks\n");
}

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? atol(argv[1]) : 2000;
    if (rounds < 1)
        return 2;
    vq_engine *e;
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    if (vq_engine_new(&e, &o) < 0) {
        fprintf(stderr, "prim_parallel: %s\n", vq_errmsg());
        return 1;
    }
    check_cover(e, rounds);
    check_join(e);
    check_busy(e);
    check_errors_and_serial(e);
    vq_engine_free(e);

    vq_engine_opts naive = {.kind = VQ_ENGINE_NAIVE};
    if (vq_engine_new(&e, &naive) == 0) {
        struct cover c = {.n = 777, .chunk = 5};
        c.hits = calloc((size_t)c.n, sizeof *c.hits);
        atomic_init(&c.max_slot, 0);
        vq_task t = {.fn = cover_op, .arg = &c};
        vq_push(e, &t);
        vq_wait_all(e);
        int ok = c.rc == 0 && atomic_load(&c.max_slot) == 0 && !c.bad_bounds;
        for (int64_t i = 0; i < c.n; i++)
            ok &= c.hits[i] == 1;
        CHECK(ok, "the naive engine's loop");
        free(c.hits);
        vq_engine_free(e);
    }
    printf("prim_parallel: %s\n", failures ? "FAILED" : "ok");
    return failures != 0;
}
