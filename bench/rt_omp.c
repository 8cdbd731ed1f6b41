/* The OpenMP-tasks runtime of the engine benchmarks (bench.h): every workload
 * is written as explicit `#pragma omp task`s whose ordering comes only from
 * `depend` clauses on the data's addresses, all created by one thread of one
 * parallel region, the way an OpenMP user expresses a dependency graph. The
 * same source is built by gcc (libgomp) and by clang (LLVM libomp), so the
 * two OpenMP runtimes appear as two columns next to varq and StarPU.
 *
 * Each workload's clock spans the whole parallel region, fork and join
 * included: forking the (already created, idle) team is how OpenMP gets its
 * workers going, as pushing the first op is how varq wakes its own. */
#include <omp.h>
#include <stdio.h>

#include "bench.h"

#ifdef __clang__
#define OMP_RT_NAME "libomp"
#else
#define OMP_RT_NAME "libgomp"
#endif

static char omp_desc[128];

static int omp_init(int workers)
{
    uint64_t x = 0;
    int team = 0;

    if (workers < 1) {
        fprintf(stderr, "%s: bad worker count %d\n", OMP_RT_NAME, workers);
        return -1;
    }
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
    if (team != workers) {
        fprintf(stderr, "%s: asked for %d threads, got a team of %d "
                "(OMP_THREAD_LIMIT?)\n", OMP_RT_NAME, workers, team);
        return -1;
    }
    if (x != 4096ull * 4097 / 2) {
        fprintf(stderr, "%s: warm-up chain gave a wrong result\n", OMP_RT_NAME);
        return -1;
    }

#ifdef __clang__
    snprintf(omp_desc, sizeof omp_desc, "clang %d.%d libomp, OMP_NUM_THREADS=%d",
             __clang_major__, __clang_minor__, workers);
#else
    snprintf(omp_desc, sizeof omp_desc, "GCC %d.%d libgomp, OMP_NUM_THREADS=%d",
             __GNUC__, __GNUC_MINOR__, workers);
#endif
    return 0;
}

static void omp_fini(void)
{
    /* An OpenMP team cannot be torn down before exit; the next init just
     * resizes it. */
}

static const char *omp_describe(void)
{
    return omp_desc;
}

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
    double t0 = bench_now();
#pragma omp parallel
#pragma omp single
    for (long i = 0; i < n; i++) {
#pragma omp task firstprivate(x) depend(inout: x[0])
        bench_chain(x);
    }
    return bench_now() - t0;
}

static double omp_fanout(long rounds, int readers, uint64_t *x, uint64_t *sums)
{
    double t0 = bench_now();
#pragma omp parallel
#pragma omp single
    for (long r = 0; r < rounds; r++) {
#pragma omp task firstprivate(x) depend(inout: x[0])
        bench_fan_write(x);
        for (int j = 0; j < readers; j++) {
#pragma omp task firstprivate(x, sums, j) depend(in: x[0])
            bench_fan_read(x, sums, j);
        }
    }
    return bench_now() - t0;
}

static double omp_random(long n, int nvars, const struct bench_triple *t, uint64_t *vars)
{
    (void)nvars; /* the vars' addresses are all the runtime needs */
    double t0 = bench_now();
#pragma omp parallel
#pragma omp single
    for (long i = 0; i < n; i++) {
#pragma omp task firstprivate(vars, t, i) \
    depend(in: vars[t[i].a], vars[t[i].b]) depend(inout: vars[t[i].c])
        bench_random(vars, t, i);
    }
    return bench_now() - t0;
}

/* Rows s = 1 .. steps, as bench.h defines them. Row s overwrites row s-2 in
 * place; depend(out) orders that write after row s-1's reads of the old
 * values (write-after-read), not only after the earlier write. */
static double omp_stencil(int width, int steps, long grain, double *grid)
{
    double t0 = bench_now();
#pragma omp parallel
#pragma omp single
    for (int s = 1; s <= steps; s++) {
        double *prev = grid + ((s - 1) % 2) * width;
        double *cur = grid + (s % 2) * width;
        /* GCC 12 does not count a use in a depend clause as a use. */
        (void)prev, (void)cur;
        for (int i = 0; i < width; i++) {
            if (i > 0 && i < width - 1) {
#pragma omp task firstprivate(grid, width, s, i, grain) \
    depend(in: prev[i - 1], prev[i], prev[i + 1]) depend(out: cur[i])
                bench_stencil(grid, width, s, i, grain);
            } else {
                /* An edge point has a single neighbour; with width 1, lo and
                 * hi name the same location, which OpenMP allows. */
                int lo = i > 0 ? i - 1 : i, hi = i < width - 1 ? i + 1 : i;
#pragma omp task firstprivate(grid, width, s, i, grain) \
    depend(in: prev[lo], prev[hi]) depend(out: cur[i])
                bench_stencil(grid, width, s, i, grain);
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
