/* The OpenMP-tasks runtime of the engine benchmarks (bench.h): every workload
 * is written as explicit `#pragma omp task`s whose ordering comes only from
 * `depend` clauses on the data's addresses, all created by one thread of one
 * parallel region, the way an OpenMP user expresses a dependency graph. The
 * same source is built by gcc (libgomp) and by clang (LLVM libomp), so the
 * two OpenMP runtimes appear as two columns next to varq and StarPU.
 *
 * Each workload's clock spans the whole parallel region, fork and join
 * included: forking the (already created, idle) team is how OpenMP gets its
 * workers going, as pushing the first op is how varq wakes its own.
 *
 * Neither runtime bounds the tasks that wait on dependences (libgomp's
 * throttle counts only ready tasks, libomp's only its deques): a million
 * dependent tasks would all be allocated before the first ran, and libgomp
 * walks lists that grow with them at each creation. So at most `window`
 * tasks are outstanding, each runtime's own throttle (libgomp: 64 queued
 * tasks per thread; libomp: a 256-slot deque per thread) extended to
 * dependent tasks the way that runtime allows. libgomp: past the window the
 * next task is undeferred (if(0)), so the creator waits for that task's
 * dependences, running tasks meanwhile, then runs it, as libgomp itself does
 * past its throttle. libomp: the creator runs tasks (taskyield) until there
 * is room; its 14.x if(0) wait leaves a stack node that a releasing thread
 * may still touch (fixed in later LLVM), and libgomp's taskyield is a no-op,
 * hence two ways. */
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench.h"

#ifdef __clang__
#define OMP_RT_NAME "libomp"
#define OMP_WINDOW_PER_THREAD 256
#else
#define OMP_RT_NAME "libgomp"
#define OMP_WINDOW_PER_THREAD 64
#endif

/* Tasks finished, counted per thread on a line of its own so that counting
 * costs a task a plain store rather than a contended atomic add. */
struct omp_count {
    _Alignas(64) _Atomic long n;
};

static struct omp_count *omp_done;
static int omp_nthreads;
static long omp_window;
static char omp_desc[160];

static inline void omp_task_done(void)
{
    _Atomic long *n = &omp_done[omp_get_thread_num()].n;
    atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* The creating thread's view of the window: `finished` is refreshed only
 * when the stale view says the window is full. */
struct omp_window {
    long created, finished;
};

static void omp_window_start(struct omp_window *w)
{
    for (int k = 0; k < omp_nthreads; k++)
        atomic_store_explicit(&omp_done[k].n, 0, memory_order_relaxed);
    w->created = w->finished = 0;
}

static long omp_finished(void)
{
    long f = 0;
    for (int k = 0; k < omp_nthreads; k++)
        f += atomic_load_explicit(&omp_done[k].n, memory_order_relaxed);
    return f;
}

/* Whether the next task may be deferred. */
static inline int omp_window_open(struct omp_window *w)
{
    if (w->created - w->finished >= omp_window) {
        w->finished = omp_finished();
#ifdef __clang__
        while (w->created - w->finished >= omp_window) {
#pragma omp taskyield
            w->finished = omp_finished();
        }
#endif
    }
    return w->created++ - w->finished < omp_window;
}

static int omp_init(int workers)
{
    uint64_t x = 0;
    int team = 0;

    if (workers < 1) {
        fprintf(stderr, "%s: bad worker count %d\n", OMP_RT_NAME, workers);
        return -1;
    }
    omp_done = aligned_alloc(_Alignof(struct omp_count), workers * sizeof *omp_done);
    if (!omp_done) {
        fprintf(stderr, "%s: out of memory\n", OMP_RT_NAME);
        return -1;
    }
    omp_nthreads = workers;
    omp_window = (long)OMP_WINDOW_PER_THREAD * workers;
    /* Without this the runtime may legally hand us a smaller team. */
    omp_set_dynamic(0);
    omp_set_num_threads(workers);

    /* Creating the threads and the first task and dependence allocations of
     * each thread are once-per-process costs: pay them here, untimed. */
#pragma omp parallel
#pragma omp single
    {
        team = omp_get_num_threads();
        for (int k = 1; k <= 4096; k++) {
#pragma omp task firstprivate(k) shared(x) depend(inout: x)
            x += (uint64_t)k;
        }
    }
    if (team != workers || x != 4096ull * 4097 / 2) {
        fprintf(stderr, "%s: asked for %d threads, got a team of %d%s\n", OMP_RT_NAME,
                workers, team, team == workers ? " and a wrong warm-up result" : "");
        free(omp_done);
        omp_done = NULL;
        return -1;
    }

    /* How idle threads wait changes these timings several-fold where
     * syscalls are dear (libomp yields the CPU in its spin loops by
     * default), so a wait policy set by hand is part of the configuration. */
    const char *policy = getenv("OMP_WAIT_POLICY");
#ifdef __clang__
    int len = snprintf(omp_desc, sizeof omp_desc, "clang %d.%d libomp, OMP_NUM_THREADS=%d",
                       __clang_major__, __clang_minor__, workers);
#else
    int len = snprintf(omp_desc, sizeof omp_desc, "GCC %d.%d libgomp, OMP_NUM_THREADS=%d",
                       __GNUC__, __GNUC_MINOR__, workers);
#endif
    if (policy && len > 0 && (size_t)len < sizeof omp_desc)
        snprintf(omp_desc + len, sizeof omp_desc - len, ", OMP_WAIT_POLICY=%s", policy);
    return 0;
}

static void omp_fini(void)
{
    /* The team itself lives until exit; the next init resizes it. */
    free(omp_done);
    omp_done = NULL;
}

static const char *omp_describe(void)
{
    return omp_desc;
}

/* Ready tasks are throttled by both runtimes themselves: no window here. */
static double omp_independent(long n, unsigned char *done)
{
    double t0 = bench_now();
#pragma omp parallel
#pragma omp single
    for (long i = 0; i < n; i++) {
#pragma omp task firstprivate(done, i)
        bench_independent(done, i);
    }
    return bench_now() - t0;
}

static double omp_chain(long n, uint64_t *x)
{
    struct omp_window w;
    omp_window_start(&w);
    double t0 = bench_now();
#pragma omp parallel
#pragma omp single
    for (long i = 0; i < n; i++) {
        int defer = omp_window_open(&w);
#pragma omp task if(defer) firstprivate(x) depend(inout: x[0])
        {
            bench_chain(x);
            omp_task_done();
        }
    }
    return bench_now() - t0;
}

static double omp_fanout(long rounds, int readers, uint64_t *x, uint64_t *sums)
{
    struct omp_window w;
    omp_window_start(&w);
    double t0 = bench_now();
#pragma omp parallel
#pragma omp single
    for (long r = 0; r < rounds; r++) {
        int defer = omp_window_open(&w);
#pragma omp task if(defer) firstprivate(x) depend(inout: x[0])
        {
            bench_fan_write(x);
            omp_task_done();
        }
        for (int j = 0; j < readers; j++) {
            defer = omp_window_open(&w);
#pragma omp task if(defer) firstprivate(x, sums, j) depend(in: x[0])
            {
                bench_fan_read(x, sums, j);
                omp_task_done();
            }
        }
    }
    return bench_now() - t0;
}

static double omp_random(long n, int nvars, const struct bench_triple *t, uint64_t *vars)
{
    (void)nvars; /* the vars' addresses are all the runtime needs */
    struct omp_window w;
    omp_window_start(&w);
    double t0 = bench_now();
#pragma omp parallel
#pragma omp single
    for (long i = 0; i < n; i++) {
        int defer = omp_window_open(&w);
#pragma omp task if(defer) firstprivate(vars, t, i) \
    depend(in: vars[t[i].a], vars[t[i].b]) depend(inout: vars[t[i].c])
        {
            bench_random(vars, t, i);
            omp_task_done();
        }
    }
    return bench_now() - t0;
}

/* Rows s = 1 .. steps, as bench.h defines them. Row s overwrites row s-2 in
 * place; depend(out) orders that write after row s-1's reads of the old
 * values (write-after-read), not only after the earlier write. */
static double omp_stencil(int width, int steps, long grain, double *grid)
{
    struct omp_window w;
    omp_window_start(&w);
    double t0 = bench_now();
#pragma omp parallel
#pragma omp single
    for (int s = 1; s <= steps; s++) {
        double *prev = grid + ((s - 1) % 2) * width;
        double *cur = grid + (s % 2) * width;
        (void)prev, (void)cur; /* GCC 12 does not see their use in depend() */
        for (int i = 0; i < width; i++) {
            int defer = omp_window_open(&w);
            /* At an edge, lo or hi is i itself: naming one location twice
             * in a task's depend clauses is allowed. */
            int lo = i > 0 ? i - 1 : i, hi = i < width - 1 ? i + 1 : i;
#pragma omp task if(defer) firstprivate(grid, width, s, i, grain) \
    depend(in: prev[lo], prev[i], prev[hi]) depend(out: cur[i])
            {
                bench_stencil(grid, width, s, i, grain);
                omp_task_done();
            }
        }
    }
    return bench_now() - t0;
}

const struct bench_rt bench_rt_omp = {
    .name = OMP_RT_NAME,
    .init = omp_init,
    .fini = omp_fini,
    .describe = omp_describe,
    .independent = omp_independent,
    .chain = omp_chain,
    .fanout = omp_fanout,
    .random = omp_random,
    .stencil = omp_stencil,
};

int main(int argc, char **argv)
{
    const struct bench_rt *rts[] = {&bench_rt_omp};
    return bench_main(argc, argv, rts, 1);
}
