/* The CPU allocator behind tensors (vq_mem_get_stats and friends):
 * released storage comes back, steady state reuses blocks, the size
 * classes' waste, the peak's reset; and its per-thread caches: blocks
 * freed by another thread than the one that allocated them, a thread's
 * cache going back at its exit, exact counters after a multi-threaded
 * storm, trim reaching other threads' caches, the VARQ_CPU_CACHE_MB bound
 * over all of them. */
#include <varq/varq.h>

#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include "tensor_services.h" /* vq__mem_trim_hook_add */
#include "cpu_stats.h"
#include "leakcheck.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

TestSuite(alloc, .fini = leak_check);

Test(alloc, released_storage_returns_to_the_allocator)
{
    vq_mem_stats before = stats();
    int64_t shape[1] = {1000};
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, VQ_F32, 1, shape), 0);
    vq_tensor_retain(t);
    cr_assert_eq(stats().live_bytes, before.live_bytes + 4000);
    vq_tensor_release(t);
    cr_assert_eq(stats().live_bytes, before.live_bytes + 4000, "one reference is left");
    vq_tensor_release(t);
    vq_mem_stats after = stats();
    cr_assert_eq(after.live_bytes, before.live_bytes);
    cr_assert_geq(after.cached_bytes, 4000, "freed block is cached for reuse");
    cr_assert_eq(vq_mem_trim(cpu0), 0);
    cr_assert_eq(stats().cached_bytes, 0);
}

Test(alloc, steady_state_reuses_blocks_and_peak_stays_flat)
{
    int64_t shapes[4][2] = {{64, 64}, {64, 10}, {1, 64}, {300, 7}};
    size_t peak_after_first = 0, system_after_first = 0;
    uint64_t allocs_before = 0, reuses_before = 0;
    for (int it = 0; it < 100; it++) {
        vq_tensor *t[4];
        for (int i = 0; i < 4; i++)
            cr_assert_eq(vq_tensor_new(&t[i], VQ_F32, 2, shapes[i]), 0);
        for (int i = 0; i < 4; i++)
            vq_tensor_release(t[i]);
        vq_mem_stats s = stats();
        if (it == 0) {
            peak_after_first = s.peak_bytes;
            system_after_first = s.system_bytes;
            allocs_before = s.allocs;
            reuses_before = s.reuses;
        } else {
            cr_assert_eq(s.peak_bytes, peak_after_first, "peak grew at iteration %d", it);
            cr_assert_eq(s.system_bytes, system_after_first, "new memory at iteration %d", it);
        }
    }
    vq_mem_stats s = stats();
    cr_assert_eq(s.allocs - allocs_before, 99 * 4);
    cr_assert_eq(s.reuses - reuses_before, 99 * 4, "every later allocation is a reuse");
}

Test(alloc, size_classes_waste_at_most_a_quarter)
{
    cr_assert_eq(vq_mem_trim(cpu0), 0);
    for (int64_t n = 1; n < 100000; n = n * 3 + 1) {
        vq_mem_stats b = stats();
        vq_tensor *t;
        cr_assert_eq(vq_tensor_new(&t, VQ_BOOL, 1, &n), 0);
        vq_mem_stats a = stats();
        size_t got = a.system_bytes - b.system_bytes;
        cr_assert_geq(got, (size_t)n);
        cr_assert_leq(got, n <= 64 ? 64 : (size_t)n * 5 / 4 + 1, "%lld bytes took %zu",
                      (long long)n, got);
        vq_tensor_release(t);
        cr_assert_eq(vq_mem_trim(cpu0), 0);
    }
}

Test(alloc, peak_can_be_reset)
{
    int64_t n = 4096;
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, VQ_F64, 1, &n), 0);
    vq_tensor_release(t);
    cr_assert_geq(stats().peak_bytes, 4096 * 8);
    cr_assert_eq(vq_mem_reset_peak(cpu0), 0);
    cr_assert_eq(stats().peak_bytes, stats().live_bytes);
    cr_assert_eq(vq_mem_get_stats((vq_ctx){VQ_DEV_GPU, 0}, &(vq_mem_stats){0}), VQ_ENOSYS);
}

/* ---- per-thread caches ---- */

static void *run_thread(void *(*fn)(void *), void *arg)
{
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, fn, arg), 0);
    void *ret;
    cr_assert_eq(pthread_join(th, &ret), 0);
    return ret;
}

#define HANDED 200

struct handover {
    vq_tensor *t[HANDED];
};

/* Tensors of several classes (up to 64 KiB), none released here. */
static void *make_tensors(void *arg)
{
    struct handover *h = arg;
    for (int i = 0; i < HANDED; i++) {
        int64_t n = 1 + (i % 7) * 1000 + i;
        if (vq_tensor_new(&h->t[i], VQ_F64, 1, &n) != 0)
            return "vq_tensor_new failed";
    }
    return NULL;
}

static void *release_tensors(void *arg)
{
    struct handover *h = arg;
    for (int i = 0; i < HANDED; i++)
        vq_tensor_release(h->t[i]);
    return NULL;
}

Test(alloc, blocks_freed_by_another_thread_come_back_and_are_reused)
{
    cr_assert_eq(vq_mem_trim(cpu0), 0);
    vq_mem_stats before = stats();
    static struct handover h;
    cr_assert_null(run_thread(make_tensors, &h));
    size_t bytes = 0;
    for (int i = 0; i < HANDED; i++)
        bytes += vq_tensor_nbytes(h.t[i]);
    vq_mem_stats made = stats();
    cr_assert_eq(made.live_bytes, before.live_bytes + bytes);
    cr_assert_eq(made.peak_bytes, made.live_bytes);
    cr_assert_eq(made.allocs, before.allocs + HANDED);
    /* released by a second thread, which then exits */
    cr_assert_null(run_thread(release_tensors, &h));
    vq_mem_stats freed = stats();
    cr_assert_eq(freed.live_bytes, before.live_bytes);
    cr_assert_eq(freed.system_bytes, made.system_bytes, "every block was kept for reuse");
    cr_assert_eq(freed.cached_bytes, made.system_bytes - before.system_bytes);
    /* a third thread gets the same blocks back: no new memory */
    cr_assert_null(run_thread(make_tensors, &h));
    vq_mem_stats again = stats();
    cr_assert_eq(again.system_bytes, made.system_bytes);
    cr_assert_eq(again.reuses, freed.reuses + HANDED);
    cr_assert_eq(again.allocs, freed.allocs + HANDED);
    release_tensors(&h);
    cr_assert_eq(vq_mem_trim(cpu0), 0);
    cr_assert_eq(stats().cached_bytes, 0);
    cr_assert_eq(stats().system_bytes, before.system_bytes);
}

/* Allocates and frees n tensors of 1000 floats: its cache keeps them. */
static void *churn(void *arg)
{
    int n = *(int *)arg;
    vq_tensor *t[64];
    int64_t len = 1000;
    for (int i = 0; i < n; i++)
        if (vq_tensor_new(&t[i], VQ_F32, 1, &len) != 0)
            return "vq_tensor_new failed";
    for (int i = 0; i < n; i++)
        vq_tensor_release(t[i]);
    return NULL;
}

Test(alloc, an_exiting_thread_gives_its_cache_back)
{
    cr_assert_eq(vq_mem_trim(cpu0), 0);
    vq_mem_stats before = stats();
    int n = 8;
    cr_assert_null(run_thread(churn, &n));
    vq_mem_stats after = stats();
    cr_assert_eq(after.live_bytes, before.live_bytes);
    cr_assert_eq(after.cached_bytes, before.cached_bytes + 8 * 4096, "the 8 blocks are cached");
    cr_assert_eq(after.system_bytes, before.system_bytes + 8 * 4096);
    /* they are in the shared cache now: this thread reuses them */
    cr_assert_null(churn(&n));
    vq_mem_stats reused = stats();
    cr_assert_eq(reused.system_bytes, after.system_bytes);
    cr_assert_eq(reused.reuses, after.reuses + 8);
    /* and a trim frees them */
    cr_assert_eq(vq_mem_trim(cpu0), 0);
    cr_assert_eq(stats().cached_bytes, 0);
    cr_assert_eq(stats().system_bytes, before.system_bytes);
}

#define STORM_THREADS 4
#define STORM_ROUNDS 3000
#define STORM_HELD 16

struct storm {
    int id;
    size_t held_max; /* the most bytes this thread held at once */
    uint64_t allocs;
    vq_tensor **inbox; /* tensors the next thread releases */
    pthread_mutex_t *lock;
};

/* Holds up to STORM_HELD tensors of random sizes (64 B to 300 KiB, so
 * classes with and without a thread cache), releasing some itself and
 * handing some to the next thread's inbox. */
static void *storm_thread(void *arg)
{
    struct storm *s = arg;
    unsigned seed = 12345u + (unsigned)s->id;
    vq_tensor *held[STORM_HELD] = {0};
    size_t bytes = 0;
    for (int r = 0; r < STORM_ROUNDS; r++) {
        int slot = rand_r(&seed) % STORM_HELD;
        if (held[slot]) {
            bytes -= vq_tensor_nbytes(held[slot]);
            if (rand_r(&seed) % 3 == 0) {
                pthread_mutex_lock(s->lock);
                vq_tensor *old = s->inbox[slot];
                s->inbox[slot] = held[slot];
                pthread_mutex_unlock(s->lock);
                vq_tensor_release(old);
            } else {
                vq_tensor_release(held[slot]);
            }
            held[slot] = NULL;
        }
        int64_t n = rand_r(&seed) % 8 == 0 ? 1 + rand_r(&seed) % 300000 : 1 + rand_r(&seed) % 4096;
        if (vq_tensor_new(&held[slot], VQ_BOOL, 1, &n) != 0)
            return "vq_tensor_new failed";
        s->allocs++;
        bytes += (size_t)n;
        if (bytes > s->held_max)
            s->held_max = bytes;
    }
    for (int i = 0; i < STORM_HELD; i++)
        vq_tensor_release(held[i]);
    return NULL;
}

Test(alloc, counters_are_exact_after_a_multithreaded_storm)
{
    vq_mem_stats before = stats();
    cr_assert_eq(vq_mem_reset_peak(cpu0), 0);
    static vq_tensor *inbox[STORM_THREADS][STORM_HELD];
    static pthread_mutex_t locks[STORM_THREADS];
    struct storm s[STORM_THREADS];
    pthread_t th[STORM_THREADS];
    for (int i = 0; i < STORM_THREADS; i++) {
        pthread_mutex_init(&locks[i], NULL);
        /* thread i puts into the inbox of thread i + 1, which drains it */
        int next = (i + 1) % STORM_THREADS;
        s[i] = (struct storm){.id = i, .inbox = inbox[next], .lock = &locks[next]};
    }
    for (int i = 0; i < STORM_THREADS; i++)
        cr_assert_eq(pthread_create(&th[i], NULL, storm_thread, &s[i]), 0);
    uint64_t allocs = 0;
    size_t held_max = 0, held_sum = 0;
    for (int i = 0; i < STORM_THREADS; i++) {
        void *ret;
        cr_assert_eq(pthread_join(th[i], &ret), 0);
        cr_assert_null(ret);
        allocs += s[i].allocs;
        held_sum += s[i].held_max;
        if (s[i].held_max > held_max)
            held_max = s[i].held_max;
    }
    /* the inboxes hold what their owners handed over last */
    size_t inboxed = 0;
    for (int i = 0; i < STORM_THREADS; i++)
        for (int j = 0; j < STORM_HELD; j++)
            if (inbox[i][j])
                inboxed += vq_tensor_nbytes(inbox[i][j]);
    vq_mem_stats mid = stats();
    cr_assert_eq(mid.live_bytes, before.live_bytes + inboxed);
    cr_assert_eq(mid.allocs - before.allocs, allocs);
    cr_assert_leq(mid.reuses - before.reuses, allocs);
    /* system = cached + the live tensors' blocks (sizes rounded up to a
     * class, at most a quarter more, 64 bytes at least) */
    size_t inbox_blocks = 0;
    for (int i = 0; i < STORM_THREADS; i++)
        for (int j = 0; j < STORM_HELD; j++)
            if (inbox[i][j]) {
                size_t b = vq_tensor_nbytes(inbox[i][j]);
                inbox_blocks += b <= 64 ? 64 : b + b / 4;
            }
    cr_assert_geq(mid.system_bytes - mid.cached_bytes, mid.live_bytes);
    cr_assert_leq(mid.system_bytes - mid.cached_bytes,
                  before.system_bytes - before.cached_bytes + inbox_blocks);
    /* the peak: at least one thread's own most, at most all of them plus
     * every inbox full */
    cr_assert_geq(mid.peak_bytes, before.live_bytes + held_max);
    cr_assert_leq(mid.peak_bytes,
                  before.live_bytes + held_sum + (size_t)STORM_THREADS * STORM_HELD * 300000);
    for (int i = 0; i < STORM_THREADS; i++)
        for (int j = 0; j < STORM_HELD; j++)
            vq_tensor_release(inbox[i][j]);
    vq_mem_stats end = stats();
    cr_assert_eq(end.live_bytes, before.live_bytes);
    cr_assert_eq(end.system_bytes - end.cached_bytes, before.system_bytes - before.cached_bytes);
    cr_assert_eq(vq_mem_trim(cpu0), 0);
    cr_assert_eq(stats().cached_bytes, 0, "every storm thread has exited: all is shared");
}

Test(alloc, the_peak_is_exact)
{
    vq_mem_stats before = stats();
    cr_assert_eq(vq_mem_reset_peak(cpu0), 0);
    int64_t n[5] = {100, 5000, 64, 70000, 3};
    vq_tensor *t[5];
    size_t live = 0, peak = 0;
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(vq_tensor_new(&t[i], VQ_F32, 1, &n[i]), 0);
        live += (size_t)n[i] * 4;
        peak = live > peak ? live : peak;
        cr_assert_eq(stats().peak_bytes, before.live_bytes + peak, "after tensor %d", i);
        if (i == 2) { /* down, then up again past the old peak */
            vq_tensor_release(t[1]);
            live -= 5000 * 4;
            cr_assert_eq(stats().peak_bytes, before.live_bytes + peak);
        }
    }
    for (int i = 0; i < 5; i++)
        if (i != 1)
            vq_tensor_release(t[i]);
    cr_assert_eq(stats().peak_bytes, before.live_bytes + peak);
}

enum { PARKED_FILLED = 1, PARKED_GO, PARKED_DONE };

struct parked {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int state;
    vq_tensor *kept;
};

static void parked_set(struct parked *p, int state)
{
    pthread_mutex_lock(&p->lock);
    p->state = state;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

static void parked_wait(struct parked *p, int state)
{
    pthread_mutex_lock(&p->lock);
    while (p->state != state)
        pthread_cond_wait(&p->cond, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

/* Fills its cache, waits (alive) while the test trims, then allocates one
 * tensor, which it keeps for the test. */
static void *parked_thread(void *arg)
{
    struct parked *p = arg;
    int n = 8;
    churn(&n);
    parked_set(p, PARKED_FILLED);
    parked_wait(p, PARKED_GO);
    int64_t len = 10;
    if (vq_tensor_new(&p->kept, VQ_F32, 1, &len) != 0)
        return "vq_tensor_new failed";
    parked_set(p, PARKED_DONE);
    parked_wait(p, 0);
    return NULL;
}

Test(alloc, trim_reaches_a_live_threads_cache_at_its_next_call)
{
    cr_assert_eq(vq_mem_trim(cpu0), 0);
    vq_mem_stats before = stats();
    static struct parked p = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, NULL};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, parked_thread, &p), 0);
    parked_wait(&p, PARKED_FILLED);
    vq_mem_stats filled = stats();
    cr_assert_eq(filled.cached_bytes, before.cached_bytes + 8 * 4096, "its cache holds 8 blocks");
    cr_assert_eq(vq_mem_trim(cpu0), 0);
    /* the parked thread's cache is its own until it calls the allocator */
    cr_assert_leq(stats().cached_bytes, (size_t)4 << 20, "bounded by a thread's share");
    parked_set(&p, PARKED_GO);
    parked_wait(&p, PARKED_DONE);
    vq_mem_stats after = stats();
    cr_assert_eq(after.cached_bytes, 0, "its next allocation freed its cache");
    cr_assert_eq(after.system_bytes, before.system_bytes + 64);
    cr_assert_eq(after.live_bytes, before.live_bytes + 40);
    parked_set(&p, 0);
    void *ret;
    cr_assert_eq(pthread_join(th, &ret), 0);
    cr_assert_null(ret);
    vq_tensor_release(p.kept);
    cr_assert_eq(vq_mem_trim(cpu0), 0);
    cr_assert_eq(stats().cached_bytes, 0);
}

/* Criterion runs each test in its own process, so the variable is read
 * here, at the allocator's first use. */
static void *churn_big(void *arg)
{
    (void)arg;
    vq_tensor *t[48];
    int64_t len = 64 << 10; /* 64 KiB */
    for (int i = 0; i < 48; i++)
        if (vq_tensor_new(&t[i], VQ_BOOL, 1, &len) != 0)
            return "vq_tensor_new failed";
    for (int i = 0; i < 48; i++)
        vq_tensor_release(t[i]);
    return NULL;
}

Test(alloc, the_cache_bound_holds_over_thread_caches)
{
    cr_assert_eq(setenv("VARQ_CPU_CACHE_MB", "1", 1), 0);
    vq_mem_stats before = stats();
    cr_assert_eq(before.system_bytes, 0, "the allocator is fresh in this process");
    /* 3 MiB freed by this thread and by two others that exit */
    cr_assert_null(churn_big(NULL));
    cr_assert_leq(stats().cached_bytes, (size_t)1 << 20);
    cr_assert_null(run_thread(churn_big, NULL));
    cr_assert_leq(stats().cached_bytes, (size_t)1 << 20);
    cr_assert_null(run_thread(churn_big, NULL));
    vq_mem_stats s = stats();
    cr_assert_leq(s.cached_bytes, (size_t)1 << 20);
    cr_assert_gt(s.cached_bytes, 0, "some blocks are kept");
    cr_assert_eq(s.live_bytes, 0);
    cr_assert_eq(s.system_bytes, s.cached_bytes);
}

/* VARQ_CPU_CACHE_MB is read once, at the allocator's first use (here the
 * first vq_mem_get_stats): a value that is not a whole number of MiB that
 * fits in size_t once shifted by 20 is said on stderr and the default
 * (1024) kept, never taken as unbounded (-1) or wrapped to 0 bytes. */
static void capture_stderr(void)
{
    cr_redirect_stderr();
}

static void bad_cache_mb(const char *value)
{
    cr_assert_eq(setenv("VARQ_CPU_CACHE_MB", value, 1), 0);
    cr_assert_eq(stats().system_bytes, 0, "the allocator is fresh in this process");
    /* 3 MiB freed, well within the default bound: all of it can be kept */
    cr_assert_null(churn_big(NULL));
    cr_assert_null(run_thread(churn_big, NULL));
    vq_mem_stats s = stats();
    cr_assert_gt(s.cached_bytes, 0, "VARQ_CPU_CACHE_MB=%s: nothing kept", value);
    cr_assert_eq(s.live_bytes, 0);
    char want[200];
    snprintf(want, sizeof want,
             "varq: VARQ_CPU_CACHE_MB=\"%s\" is not a number of MiB from 0 to %zu: ignored "
             "(using 1024)\n",
             value, SIZE_MAX >> 20);
    fflush(stderr);
    cr_assert_stderr_eq_str(want);
}

Test(alloc, a_negative_cache_bound_is_refused_and_said, .init = capture_stderr)
{
    bad_cache_mb("-1");
}

Test(alloc, a_cache_bound_past_size_t_is_refused_and_said, .init = capture_stderr)
{
    char v[32];
    snprintf(v, sizeof v, "%zu", (SIZE_MAX >> 20) + 1); /* << 20 wraps to 0 */
    bad_cache_mb(v);
}

Test(alloc, a_cache_bound_that_is_not_a_number_is_refused_and_said, .init = capture_stderr)
{
    bad_cache_mb("12MB");
}

Test(alloc, the_largest_cache_bound_is_taken_silently, .init = capture_stderr)
{
    char v[32];
    snprintf(v, sizeof v, "%zu", SIZE_MAX >> 20);
    cr_assert_eq(setenv("VARQ_CPU_CACHE_MB", v, 1), 0);
    cr_assert_null(churn_big(NULL));
    cr_assert_gt(stats().cached_bytes, 0);
    fflush(stderr);
    cr_assert_stderr_eq_str("");
}

/* A cache outside the allocators (the Winograd path's kept transforms)
 * registers a trim hook; vq_mem_trim runs the hooks of the device's kind,
 * each once however often it was registered. */
static atomic_int cpu_hook_calls, gpu_hook_calls;
static void cpu_hook(void)
{
    atomic_fetch_add(&cpu_hook_calls, 1);
}
static void gpu_hook(void)
{
    atomic_fetch_add(&gpu_hook_calls, 1);
}

Test(alloc, trim_runs_the_registered_hooks_of_the_device_kind)
{
    cr_assert_eq(vq__mem_trim_hook_add(VQ_DEV_CPU, cpu_hook), 0);
    cr_assert_eq(vq__mem_trim_hook_add(VQ_DEV_CPU, cpu_hook), 0);
    cr_assert_eq(vq__mem_trim_hook_add(VQ_DEV_GPU, gpu_hook), 0);
    cr_assert_eq(vq_mem_trim((vq_ctx){VQ_DEV_CPU, 0}), 0);
    cr_assert_eq(atomic_load(&cpu_hook_calls), 1);
    cr_assert_eq(atomic_load(&gpu_hook_calls), 0);
    cr_assert_eq(vq_mem_trim((vq_ctx){VQ_DEV_CPU, 0}), 0);
    cr_assert_eq(atomic_load(&cpu_hook_calls), 2);
}
