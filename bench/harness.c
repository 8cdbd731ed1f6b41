/* The benchmark harness shared by every bench_<runtime> executable: sizes,
 * repetitions, the serial reference results, verification, the METG sweep of
 * the stencil, and the tab-separated result lines that engine_bench reads.
 *
 * usage: bench_<runtime> [--workers 1,2] [--reps N] [--only abcde] [--tiny]
 *                        [--tasks N] [--rt NAME]
 *   --tiny   small sizes and one repetition: checks every result in seconds
 *            (what scripts/test.sh runs)
 *   --tasks  N tasks in each of (a)-(d) (fan-out: N / (readers + 1) rounds),
 *            one repetition: for instruction counts (scripts/bench.sh
 *            --callgrind runs two sizes and takes the difference)
 *   --rt     only the runtime of that name (bench_varq has three)
 * Output lines (tab-separated):
 *   describe <runtime> <workers> <text>
 *   result   <runtime> <workload> <workers> <tasks> <median ns/task> <min ns/task>
 *   metg     <runtime> <workers> <METG(50%) in us> <efficiency at the largest grain>
 *   point    <runtime> <workers> <grain> <task us> <granularity us> <efficiency>
 * METG(50%), as Task Bench defines it: the smallest task granularity (wall
 * time x workers / tasks) among the runs whose efficiency is at least 50%,
 * where efficiency is the run's kernel time (tasks x one task's time when
 * `workers` bare threads run kernels together) over workers x wall time.
 * A result that differs from the serial run is an error: the program prints
 * what differs on stderr and exits 1. */
#include "bench.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sizes {
    long independent, chain, fan_rounds, random;
    int fan_readers, nvars;
    long stencil_tasks;  /* per point of the METG sweep, at most */
    int reps;
    int metg_points;     /* grains tried, from 2^(points-1) down to 1 */
};

static const struct sizes full = {1000000, 1000000, 100000, 1000000, 8, 64, 200000, 5, 17};
static const struct sizes tiny = {20000, 20000, 2000, 20000, 8, 64, 2000, 1, 3};

static int fail(const char *rt, const char *what, int workers)
{
    fprintf(stderr, "%s, %d workers: %s differs from the serial run\n", rt, workers, what);
    return -1;
}

static void result(const char *rt, const char *w, int workers, long tasks, double *t, int n)
{
    double med, min;
    bench_stats(t, n, &med, &min);
    printf("result\t%s\t%s\t%d\t%ld\t%.1f\t%.1f\n", rt, w, workers, tasks, med / tasks * 1e9,
           min / tasks * 1e9);
    fflush(stdout);
}

/* ---- (a)-(d) ---- */

static int run_independent(const struct bench_rt *rt, int workers, const struct sizes *z)
{
    long n = z->independent;
    unsigned char *done = malloc((size_t)n);
    double t[64];
    for (int r = 0; r < z->reps; r++) {
        memset(done, 0, (size_t)n);
        if ((t[r] = rt->independent(n, done)) < 0)
            return free(done), -1;
        for (long i = 0; i < n; i++)
            if (!done[i])
                return free(done), fail(rt->name, "independent", workers);
    }
    free(done);
    result(rt->name, "independent", workers, n, t, z->reps);
    return 0;
}

static int run_chain(const struct bench_rt *rt, int workers, const struct sizes *z)
{
    long n = z->chain;
    uint64_t expect = 1;
    for (long i = 0; i < n; i++)
        bench_chain(&expect);
    double t[64];
    for (int r = 0; r < z->reps; r++) {
        uint64_t x = 1;
        if ((t[r] = rt->chain(n, &x)) < 0)
            return -1;
        if (x != expect)
            return fail(rt->name, "chain", workers);
    }
    result(rt->name, "chain", workers, n, t, z->reps);
    return 0;
}

static int run_fanout(const struct bench_rt *rt, int workers, const struct sizes *z)
{
    long rounds = z->fan_rounds;
    int k = z->fan_readers;
    uint64_t ex = 0, esums[64] = {0};
    for (long r = 0; r < rounds; r++) {
        bench_fan_write(&ex);
        for (int j = 0; j < k; j++)
            bench_fan_read(&ex, esums, j);
    }
    double t[64];
    for (int r = 0; r < z->reps; r++) {
        uint64_t x = 0, sums[64] = {0};
        if ((t[r] = rt->fanout(rounds, k, &x, sums)) < 0)
            return -1;
        if (x != ex || memcmp(sums, esums, sizeof sums) != 0)
            return fail(rt->name, "fanout", workers);
    }
    result(rt->name, "fanout", workers, rounds * (k + 1), t, z->reps);
    return 0;
}

static uint64_t rng;

static int rnd(int n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((rng >> 33) % (uint64_t)n);
}

static int run_random(const struct bench_rt *rt, int workers, const struct sizes *z)
{
    long n = z->random;
    int nv = z->nvars;
    struct bench_triple *tr = malloc((size_t)n * sizeof *tr);
    uint64_t *vars = malloc((size_t)nv * sizeof *vars), *expect = malloc((size_t)nv * sizeof *expect);
    rng = 42;
    for (long i = 0; i < n; i++) {
        tr[i].a = rnd(nv);
        do
            tr[i].b = rnd(nv);
        while (tr[i].b == tr[i].a);
        do
            tr[i].c = rnd(nv);
        while (tr[i].c == tr[i].a || tr[i].c == tr[i].b);
    }
    for (int v = 0; v < nv; v++)
        expect[v] = (uint64_t)v;
    for (long i = 0; i < n; i++)
        bench_random(expect, tr, i);
    double t[64];
    int rc = 0;
    for (int r = 0; r < z->reps && rc == 0; r++) {
        for (int v = 0; v < nv; v++)
            vars[v] = (uint64_t)v;
        if ((t[r] = rt->random(n, nv, tr, vars)) < 0)
            rc = -1;
        else if (memcmp(vars, expect, (size_t)nv * sizeof *vars) != 0)
            rc = fail(rt->name, "random", workers);
    }
    if (rc == 0)
        result(rt->name, "random", workers, n, t, z->reps);
    free(tr);
    free(vars);
    free(expect);
    return rc;
}

/* ---- (e) stencil_1d and its METG(50%) ---- */

static void stencil_init(double *grid, int width)
{
    for (int i = 0; i < width; i++)
        grid[i] = 1.0 + i;
}

static void stencil_serial(double *grid, int width, int steps, long grain)
{
    stencil_init(grid, width);
    for (int s = 1; s <= steps; s++)
        for (int i = 0; i < width; i++)
            bench_stencil(grid, width, s, i, grain);
}

struct kernel_job {
    long grain;
    int n;
    double sink;
};

static void *kernel_thread(void *arg)
{
    struct kernel_job *j = arg;
    double s = 0;
    for (int i = 0; i < j->n; i++)
        s += bench_kernel(0.5 + i * 1e-9, j->grain);
    j->sink = s;
    return NULL;
}

/* Seconds one task's kernel takes when `workers` threads run kernels at the
 * same time with no runtime at all: the machine's own limit, which already
 * counts what two threads on these cores cost each other (hyperthreads of one
 * core run a compute loop at well under twice the speed of one). Efficiency
 * is measured against this, so 100% means "as fast as bare threads". */
static double kernel_seconds(long grain, int workers)
{
    int n = grain >= 4096 ? 200 : grain >= 64 ? 2000 : 20000;
    double best = 1e9;
    for (int rep = 0; rep < 3; rep++) {
        pthread_t th[64];
        struct kernel_job jobs[64];
        int w = workers < 64 ? workers : 64;
        double t0 = bench_now();
        for (int k = 0; k < w; k++) {
            jobs[k] = (struct kernel_job){grain, n, 0};
            pthread_create(&th[k], NULL, kernel_thread, &jobs[k]);
        }
        for (int k = 0; k < w; k++)
            pthread_join(th[k], NULL);
        double t = (bench_now() - t0) / n;
        best = t < best ? t : best;
    }
    return best;
}

static int run_stencil(const struct bench_rt *rt, int workers, const struct sizes *z)
{
    int width = workers;
    double *grid = malloc(2 * (size_t)width * sizeof *grid);
    double *expect = malloc(2 * (size_t)width * sizeof *expect);
    double metg = -1, eff_top = 0;
    int rc = 0;
    for (int p = z->metg_points - 1; p >= 0 && rc == 0; p--) {
        long grain = 1L << p;
        double task_s = kernel_seconds(grain, workers);
        /* About 50 ms of ideal work per run, within the task budget. */
        long steps = (long)(0.05 * workers / (width * task_s));
        if (steps * width > z->stencil_tasks)
            steps = z->stencil_tasks / width;
        if (steps < 10)
            steps = 10;
        stencil_serial(expect, width, (int)steps, grain);
        double t[64];
        int reps = z->reps < 3 ? z->reps : 3;
        for (int r = 0; r < reps && rc == 0; r++) {
            stencil_init(grid, width);
            if ((t[r] = rt->stencil(width, (int)steps, grain, grid)) < 0)
                rc = -1;
            else if (memcmp(grid, expect, 2 * (size_t)width * sizeof *grid) != 0)
                rc = fail(rt->name, "stencil", workers);
        }
        if (rc)
            break;
        double med, min;
        bench_stats(t, reps, &med, &min);
        long tasks = steps * width;
        double eff = tasks * task_s / (workers * med);
        double gran = med * workers / tasks;
        printf("point\t%s\t%d\t%ld\t%.3f\t%.3f\t%.3f\n", rt->name, workers, grain, task_s * 1e6,
               gran * 1e6, eff);
        if (p == z->metg_points - 1)
            eff_top = eff;
        if (eff >= 0.5 && (metg < 0 || gran < metg))
            metg = gran;
    }
    if (rc == 0) {
        printf("metg\t%s\t%d\t%.3f\t%.3f\n", rt->name, workers, metg * 1e6, eff_top);
        fflush(stdout);
    }
    free(grid);
    free(expect);
    return rc;
}

int bench_main(int argc, char **argv, const struct bench_rt *const *rts, int nrts)
{
    const struct sizes *z = &full;
    struct sizes custom;
    const char *only = "abcde", *rt_name = NULL;
    long tasks = 0;
    int workers[8] = {1, 2}, nworkers = 2, reps = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tiny") == 0) {
            z = &tiny;
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--tasks") == 0 && i + 1 < argc) {
            tasks = atol(argv[++i]);
        } else if (strcmp(argv[i], "--rt") == 0 && i + 1 < argc) {
            rt_name = argv[++i];
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc) {
            nworkers = 0;
            for (char *s = argv[++i]; *s && nworkers < 8; s++) {
                workers[nworkers++] = (int)strtol(s, &s, 10);
                if (!*s)
                    break;
            }
        } else {
            fprintf(stderr,
                    "usage: %s [--workers 1,2] [--reps N] [--only abcde] [--tiny] [--tasks N] "
                    "[--rt NAME]\n", argv[0]);
            return 2;
        }
    }
    if (tasks > 0) {
        custom = *z;
        custom.independent = custom.chain = custom.random = tasks;
        custom.fan_rounds = tasks / (custom.fan_readers + 1);
        custom.reps = 1;
        z = &custom;
    }
    if (reps > 0) {
        custom = *z;
        custom.reps = reps > 64 ? 64 : reps;
        z = &custom;
    }
    for (int w = 0; w < nworkers; w++) {
        if (workers[w] < 1) {
            fprintf(stderr, "%s: worker counts must be positive\n", argv[0]);
            return 2;
        }
        for (int k = 0; k < nrts; k++) {
            const struct bench_rt *rt = rts[k];
            if (rt_name && strcmp(rt->name, rt_name) != 0)
                continue;
            if (rt->init(workers[w]) < 0)
                return 1;
            printf("describe\t%s\t%d\t%s\n", rt->name, workers[w], rt->describe());
            int rc = 0;
            if (strchr(only, 'a') && rt->independent)
                rc |= run_independent(rt, workers[w], z);
            if (strchr(only, 'b') && rt->chain && !rc)
                rc |= run_chain(rt, workers[w], z);
            if (strchr(only, 'c') && rt->fanout && !rc)
                rc |= run_fanout(rt, workers[w], z);
            if (strchr(only, 'd') && rt->random && !rc)
                rc |= run_random(rt, workers[w], z);
            if (strchr(only, 'e') && rt->stencil && !rc)
                rc |= run_stencil(rt, workers[w], z);
            rt->fini();
            if (rc)
                return 1;
        }
    }
    return 0;
}
