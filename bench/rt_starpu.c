/* StarPU 1.3 runtime for the engine benchmarks (bench.h): the same five
 * workloads as varq's, written the way a StarPU user would write them, so
 * that the per-task overhead of the two engines can be compared in one run.
 *
 * Every task is a real StarPU task submitted with starpu_task_insert, and
 * every ordering comes from StarPU's implicit (sequentially consistent) data
 * dependencies on registered variable handles: nothing is ordered by hand.
 * Handles are registered before the clock starts and unregistered after it
 * stops, as bench.h asks. Only CPU workers run, in main RAM, so a handle's
 * data never moves and a task body may use the caller's arrays directly. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* setenv; and starpu.h needs pthread_rwlock_t, hidden by -std=c11 */
#endif

#include "bench.h"

#include <starpu.h>
#include <stdio.h>
#include <stdlib.h>

extern const struct bench_rt bench_rt_starpu;

/* lws (per-worker queues, a task released by a worker stays on it, idle
 * workers steal) had the lowest per-task cost on a 2-core machine with 1 and
 * 2 workers: ahead of ws and eager (one central queue) by a few percent,
 * which is within that machine's noise, and of dmda by about 1.5x: dmda
 * estimates each task's cost on every worker, work these tiny tasks cannot
 * repay (and they have no performance model to estimate from). Can be
 * overridden at compile time to compare. */
#ifndef BENCH_STARPU_SCHED
#define BENCH_STARPU_SCHED "lws"
#endif

static char describe_buf[128];

static int sp_init(int workers)
{
    /* STARPU_MAXCPUS is fixed when StarPU is built (4 in Debian's). */
    if (workers < 1 || workers > STARPU_MAXCPUS) {
        fprintf(stderr, "starpu: %d workers requested, this StarPU build supports 1..%d\n",
                workers, STARPU_MAXCPUS);
        return -1;
    }
    char n[16];
    snprintf(n, sizeof n, "%d", workers);
    /* STARPU_NCPU mirrors conf.ncpus for anything that reads the
     * environment rather than the conf; STARPU_SILENT has no conf field and
     * silences StarPU's banner and warnings (e.g. about oversubscribed
     * cores), which would otherwise interleave with the result lines. */
    if (setenv("STARPU_NCPU", n, 1) != 0 || setenv("STARPU_SILENT", "1", 1) != 0) {
        perror("starpu: setenv");
        return -1;
    }

    struct starpu_conf conf;
    if (starpu_conf_init(&conf) != 0) {
        fprintf(stderr, "starpu: starpu_conf_init failed\n");
        return -1;
    }
    conf.ncpus = workers;
    conf.reserve_ncpus = 0;
    conf.ncuda = 0;
    conf.nopencl = 0; /* Debian's build has OpenCL: do not probe it */
    conf.nmic = 0;
    conf.nmpi_ms = 0;
    conf.sched_policy_name = BENCH_STARPU_SCHED;
    /* No bus recalibration, no model calibration: work unrelated to the
     * tasks being timed. (StarPU still measures the bus once, on its first
     * run on a machine, and keeps the result under ~/.starpu.) */
    conf.bus_calibrate = 0;
    conf.calibrate = 0;
    /* The harness (and ASan builds) keep their own signal handlers. */
    conf.catch_signals = 0;
    /* What describe() prints must be what ran, whatever STARPU_SCHED etc.
     * the caller's environment holds. */
    conf.precedence_over_environment_variables = 1;

    int ret = starpu_init(&conf);
    if (ret != 0) {
        fprintf(stderr, "starpu: starpu_init failed (%d)\n", ret);
        return -1;
    }
    if ((int)starpu_cpu_worker_get_count() != workers) {
        fprintf(stderr, "starpu: asked for %d CPU workers, got %u\n", workers,
                starpu_cpu_worker_get_count());
        starpu_shutdown();
        return -1;
    }
    int major, minor, release;
    starpu_get_version(&major, &minor, &release);
    snprintf(describe_buf, sizeof describe_buf, "StarPU %d.%d.%d, scheduler %s, STARPU_NCPU=%d",
             major, minor, release, BENCH_STARPU_SCHED, workers);
    return 0;
}

static void sp_fini(void)
{
    starpu_shutdown();
}

static const char *sp_describe(void)
{
    return describe_buf;
}

/* ---- codelets: each CPU function only unpacks and calls the shared body ---- */

#define VAR_PTR(d) ((uint64_t *)STARPU_VARIABLE_GET_PTR(d))

static void independent_cpu(void *descr[], void *arg)
{
    (void)descr;
    unsigned char *done;
    long i;
    starpu_codelet_unpack_args(arg, &done, &i);
    bench_independent(done, i);
}

static void chain_cpu(void *descr[], void *arg)
{
    (void)arg;
    bench_chain(VAR_PTR(descr[0]));
}

static void fan_write_cpu(void *descr[], void *arg)
{
    (void)arg;
    bench_fan_write(VAR_PTR(descr[0]));
}

static void fan_read_cpu(void *descr[], void *arg)
{
    uint64_t *sums;
    int j;
    starpu_codelet_unpack_args(arg, &sums, &j);
    bench_fan_read(VAR_PTR(descr[0]), sums, j);
}

static void random_cpu(void *descr[], void *arg)
{
    (void)descr; /* the three handles are elements of vars, in main RAM */
    uint64_t *vars;
    const struct bench_triple *t;
    long i;
    starpu_codelet_unpack_args(arg, &vars, &t, &i);
    bench_random(vars, t, i);
}

static void stencil_cpu(void *descr[], void *arg)
{
    (void)descr; /* the handles are points of grid, in main RAM */
    double *grid;
    int width, s, i;
    long grain;
    starpu_codelet_unpack_args(arg, &grid, &width, &s, &i, &grain);
    bench_stencil(grid, width, s, i, grain);
}

/* No performance models: none of the chosen schedulers needs one, and a
 * model would add bookkeeping to every task. */
static struct starpu_codelet independent_cl = {
    .where = STARPU_CPU, .cpu_funcs = {independent_cpu}, .nbuffers = 0, .name = "independent"};
static struct starpu_codelet chain_cl = {
    .where = STARPU_CPU, .cpu_funcs = {chain_cpu}, .nbuffers = 1, .modes = {STARPU_RW},
    .name = "chain"};
static struct starpu_codelet fan_write_cl = {
    .where = STARPU_CPU, .cpu_funcs = {fan_write_cpu}, .nbuffers = 1, .modes = {STARPU_RW},
    .name = "fan_write"};
static struct starpu_codelet fan_read_cl = {
    .where = STARPU_CPU, .cpu_funcs = {fan_read_cpu}, .nbuffers = 1, .modes = {STARPU_R},
    .name = "fan_read"};
static struct starpu_codelet random_cl = {
    .where = STARPU_CPU, .cpu_funcs = {random_cpu}, .nbuffers = 3,
    .modes = {STARPU_R, STARPU_R, STARPU_RW}, .name = "random"};
/* 2 to 4 buffers depending on the column (edges have one neighbour). */
static struct starpu_codelet stencil_cl = {
    .where = STARPU_CPU, .cpu_funcs = {stencil_cpu}, .nbuffers = STARPU_VARIABLE_NBUFFERS,
    .name = "stencil"};

/* ---- workloads ---- */

static void register_vars(starpu_data_handle_t *h, uint64_t *v, long n)
{
    for (long k = 0; k < n; k++)
        starpu_variable_data_register(&h[k], STARPU_MAIN_RAM, (uintptr_t)&v[k], sizeof v[k]);
}

/* Waits even after a failed submission: the tasks already submitted use the
 * handles, and unregistering them first would block or corrupt. */
static double finish(double t0, int err, starpu_data_handle_t *h, long nh)
{
    starpu_task_wait_for_all();
    double dt = bench_now() - t0;
    for (long k = 0; k < nh; k++)
        starpu_data_unregister(h[k]);
    if (err) {
        fprintf(stderr, "starpu: starpu_task_insert failed (%d)\n", err);
        return -1;
    }
    return dt;
}

static double sp_independent(long n, unsigned char *done)
{
    int err = 0;
    double t0 = bench_now();
    for (long i = 0; i < n && !err; i++)
        err = starpu_task_insert(&independent_cl, STARPU_VALUE, &done, sizeof done,
                                 STARPU_VALUE, &i, sizeof i, 0);
    return finish(t0, err, NULL, 0);
}

static double sp_chain(long n, uint64_t *x)
{
    starpu_data_handle_t h;
    register_vars(&h, x, 1);
    int err = 0;
    double t0 = bench_now();
    for (long i = 0; i < n && !err; i++)
        err = starpu_task_insert(&chain_cl, STARPU_RW, h, 0);
    return finish(t0, err, &h, 1);
}

static double sp_fanout(long rounds, int readers, uint64_t *x, uint64_t *sums)
{
    starpu_data_handle_t h;
    register_vars(&h, x, 1);
    int err = 0;
    double t0 = bench_now();
    for (long r = 0; r < rounds && !err; r++) {
        err = starpu_task_insert(&fan_write_cl, STARPU_RW, h, 0);
        for (int j = 0; j < readers && !err; j++)
            err = starpu_task_insert(&fan_read_cl, STARPU_R, h, STARPU_VALUE, &sums,
                                     sizeof sums, STARPU_VALUE, &j, sizeof j, 0);
    }
    return finish(t0, err, &h, 1);
}

static double sp_random(long n, int nvars, const struct bench_triple *t, uint64_t *vars)
{
    starpu_data_handle_t *h = malloc((size_t)nvars * sizeof *h);
    if (!h) {
        fprintf(stderr, "starpu: out of memory\n");
        return -1;
    }
    register_vars(h, vars, nvars);
    int err = 0;
    double t0 = bench_now();
    for (long i = 0; i < n && !err; i++)
        err = starpu_task_insert(&random_cl, STARPU_R, h[t[i].a], STARPU_R, h[t[i].b],
                                 STARPU_RW, h[t[i].c], STARPU_VALUE, &vars, sizeof vars,
                                 STARPU_VALUE, &t, sizeof t, STARPU_VALUE, &i, sizeof i, 0);
    double dt = finish(t0, err, h, nvars);
    free(h);
    return dt;
}

static double sp_stencil(int width, int steps, long grain, double *grid)
{
    long npoints = 2L * width;
    starpu_data_handle_t *h = malloc((size_t)npoints * sizeof *h);
    if (!h) {
        fprintf(stderr, "starpu: out of memory\n");
        return -1;
    }
    for (long k = 0; k < npoints; k++)
        starpu_variable_data_register(&h[k], STARPU_MAIN_RAM, (uintptr_t)&grid[k],
                                      sizeof grid[k]);
    int err = 0;
    double t0 = bench_now();
    for (int s = 1; s <= steps && !err; s++) {
        starpu_data_handle_t *in = h + ((s - 1) % 2) * width, *out = h + (s % 2) * width;
        for (int i = 0; i < width && !err; i++) {
            struct starpu_data_descr d[4];
            int nd = 0;
            for (int k = i - 1; k <= i + 1; k++)
                if (k >= 0 && k < width)
                    d[nd++] = (struct starpu_data_descr){in[k], STARPU_R};
            /* W, not RW: the old value is dead, and StarPU still orders
             * this write after the readers of the previous step. */
            d[nd++] = (struct starpu_data_descr){out[i], STARPU_W};
            err = starpu_task_insert(&stencil_cl, STARPU_DATA_MODE_ARRAY, d, nd,
                                     STARPU_VALUE, &grid, sizeof grid, STARPU_VALUE, &width,
                                     sizeof width, STARPU_VALUE, &s, sizeof s, STARPU_VALUE,
                                     &i, sizeof i, STARPU_VALUE, &grain, sizeof grain, 0);
        }
    }
    double dt = finish(t0, err, h, npoints);
    free(h);
    return dt;
}

const struct bench_rt bench_rt_starpu = {
    .name = "starpu",
    .init = sp_init,
    .fini = sp_fini,
    .describe = sp_describe,
    .independent = sp_independent,
    .chain = sp_chain,
    .fanout = sp_fanout,
    .random = sp_random,
    .stencil = sp_stencil,
};

int main(int argc, char **argv)
{
    const struct bench_rt *rts[] = {&bench_rt_starpu};
    return bench_main(argc, argv, rts, 1);
}
