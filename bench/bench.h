/* The engine benchmarks' contract: the workloads, their task bodies, and the
 * table of functions each runtime (varq, StarPU, OpenMP tasks) implements.
 *
 * Every runtime runs the same work: the task bodies below are shared, tiny
 * (a few instructions: enough to prove the order was right, nothing more),
 * and the harness (harness.c) checks each result against a serial run. Each
 * runtime is built into its own executable (bench_<runtime>) around
 * harness.c's bench_main, so no two runtimes ever share a process, and
 * engine_bench runs them one after another and prints the comparison.
 *
 * Timing is done by the runtime's function itself: from the first task
 * submitted to the completion of the last, excluding the registration of
 * data (vars, handles) and anything done once per process. */
#ifndef VARQ_BENCH_H
#define VARQ_BENCH_H

#include <stdint.h>

#include "measure.h" /* bench_now, bench_stats */

/* The harness is C; a runtime written in C++ (rt_taskflow.cpp) includes
 * this too. */
#ifdef __cplusplus
extern "C" {
#endif

/* (d) random sets: task i reads vars a and b and writes var c (three
 * distinct vars). */
struct bench_triple {
    int a, b, c;
};

struct bench_rt {
    const char *name; /* column in the tables: "varq", "starpu", "libgomp", ... */

    /* Starts the runtime with `workers` worker threads (called once per
     * worker count, paired with fini). Returns 0 or -1 (message on stderr). */
    int (*init)(int workers);
    void (*fini)(void);
    /* One line about the configuration (scheduler, engine kind); static. */
    const char *(*describe)(void);

    /* Each function runs one whole workload and returns the elapsed seconds,
     * or a negative number on failure (message on stderr). A NULL function
     * means the runtime does not run that workload. */

    /* (a) n independent tasks; task i runs bench_independent(done, i). */
    double (*independent)(long n, unsigned char *done);
    /* (b) n tasks that read-write one var; each runs bench_chain(x). */
    double (*chain)(long n, uint64_t *x);
    /* (c) `rounds` rounds of: one task that read-writes x (bench_fan_write),
     * then `readers` tasks that read x, reader j running
     * bench_fan_read(x, sums, j) (sums[j] is private to reader j). */
    double (*fanout)(long rounds, int readers, uint64_t *x, uint64_t *sums);
    /* (d) n tasks over nvars vars: task i reads t[i].a and t[i].b, writes
     * t[i].c, and runs bench_random(vars, t, i). */
    double (*random)(long n, int nvars, const struct bench_triple *t, uint64_t *vars);
    /* (e) Task Bench stencil_1d: `steps` rows of `width` tasks, that is
     * tasks (s, i) for s = 1 .. steps and i = 0 .. width-1 (steps * width
     * tasks). Row 0 of grid (grid[0 .. width)) is given; task (s, i) reads
     * points i-1, i, i+1 (those that exist) of row s-1 and writes point i of
     * row s by running bench_stencil(grid, width, s, i, grain). grid holds
     * two rows used alternately: row s lives at grid[(s % 2) * width]. */
    double (*stencil)(int width, int steps, long grain, double *grid);
};

/* ---- the task bodies, identical for every runtime ---- */

static inline uint64_t bench_mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    return x ^ (x >> 27);
}

static inline void bench_independent(unsigned char *done, long i)
{
    done[i] = 1;
}

static inline void bench_chain(uint64_t *x)
{
    *x = *x * 31 + 7;
}

static inline void bench_fan_write(uint64_t *x)
{
    *x += 1;
}

static inline void bench_fan_read(const uint64_t *x, uint64_t *sums, int j)
{
    sums[j] += *x;
}

static inline void bench_random(uint64_t *vars, const struct bench_triple *t, long i)
{
    vars[t[i].c] = bench_mix(vars[t[i].c] ^ vars[t[i].a] ^ (vars[t[i].b] << 1) ^ (uint64_t)i);
}

/* Task Bench's compute-bound kernel: `grain` dependent multiply-adds. */
static inline double bench_kernel(double v, long grain)
{
    double a = v;
    for (long k = 0; k < grain; k++)
        a = a * 0.999999 + 0.000001;
    return a;
}

static inline void bench_stencil(double *grid, int width, int s, int i, long grain)
{
    const double *in = grid + ((s - 1) % 2) * width;
    double sum = in[i], n = 1;
    if (i > 0)
        sum += in[i - 1], n++;
    if (i < width - 1)
        sum += in[i + 1], n++;
    grid[(s % 2) * width + i] = bench_kernel(sum / n, grain);
}

/* The main of every bench_<runtime> executable: runs the workloads for the
 * given runtimes, checks every result against a serial run, and prints one
 * tab-separated line per measurement (see harness.c for the options). */
int bench_main(int argc, char **argv, const struct bench_rt *const *rts, int nrts);

#ifdef __cplusplus
}
#endif

#endif
