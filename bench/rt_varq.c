/* varq's side of the engine benchmarks, three ways: the threaded engine with
 * vq_push (what most callers do), the same with prebuilt ops pushed by
 * vq_push_opr (what the graph layer does: the op and its merged vars are
 * made once, outside the timing), and the naive engine, which runs each op
 * inside vq_push and so measures the cost of the call and the body alone.
 *
 * Task bodies receive their index through the op's argument; the arrays they
 * work on are this file's globals for the duration of one workload. */
#include "bench.h"

#include <varq/varq.h>

#include <stdio.h>
#include <stdlib.h>

static vq_engine *engine;
static char description[128];

static unsigned char *g_done;
static uint64_t *g_x, *g_sums, *g_vars;
static const struct bench_triple *g_t;
static double *g_grid;
static int g_width;
static long g_grain;

static int start(int workers, int engine_kind)
{
    vq_engine_opts o = {.kind = engine_kind, .cpu_workers = workers};
    if (vq_engine_new(&engine, &o) < 0) {
        fprintf(stderr, "varq: vq_engine_new: %s\n", vq_errmsg());
        return -1;
    }
    snprintf(description, sizeof description, "varq %s engine, %d workers",
             engine_kind == VQ_ENGINE_NAIVE ? "naive" : "threaded", workers);
    return 0;
}

static int init_threaded(int workers)
{
    return start(workers, VQ_ENGINE_THREADED);
}

static int init_naive(int workers)
{
    return start(workers, VQ_ENGINE_NAIVE);
}

static void fini(void)
{
    vq_engine_free(engine);
    engine = NULL;
}

static const char *describe(void)
{
    return description;
}

/* Pushes t; returns 0 or -1 with a message. */
static int push(const vq_task *t)
{
    int rc = vq_push(engine, t);
    if (rc < 0)
        fprintf(stderr, "varq: vq_push: %s\n", vq_errmsg());
    return rc;
}

static double finish(double t0)
{
    int rc = vq_wait_all(engine);
    double t = bench_now() - t0;
    if (rc < 0) {
        fprintf(stderr, "varq: vq_wait_all: %s\n", vq_strerror(rc));
        return -1;
    }
    return t;
}

/* ---- bodies ---- */

static int independent_fn(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    bench_independent(g_done, (long)(intptr_t)arg);
    return 0;
}

static int chain_fn(void *arg, const vq_exec_ctx *x)
{
    (void)arg, (void)x;
    bench_chain(g_x);
    return 0;
}

static int fan_write_fn(void *arg, const vq_exec_ctx *x)
{
    (void)arg, (void)x;
    bench_fan_write(g_x);
    return 0;
}

static int fan_read_fn(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    bench_fan_read(g_x, g_sums, (int)(intptr_t)arg);
    return 0;
}

static int random_fn(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    bench_random(g_vars, g_t, (long)(intptr_t)arg);
    return 0;
}

static int stencil_fn(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    long k = (long)(intptr_t)arg;
    bench_stencil(g_grid, g_width, (int)(k / g_width), (int)(k % g_width), g_grain);
    return 0;
}

/* ---- workloads with vq_push ---- */

static double independent(long n, unsigned char *done)
{
    g_done = done;
    double t0 = bench_now();
    for (long i = 0; i < n; i++) {
        vq_task t = {.fn = independent_fn, .arg = (void *)(intptr_t)i};
        if (push(&t) < 0)
            return -1;
    }
    return finish(t0);
}

static double chain(long n, uint64_t *x)
{
    g_x = x;
    vq_var *v = vq_var_new(engine, "x");
    vq_task t = {.fn = chain_fn, .writes = &v, .nwrites = 1};
    double t0 = bench_now();
    for (long i = 0; i < n; i++)
        if (push(&t) < 0)
            return -1;
    double s = finish(t0);
    vq_var_free(engine, v);
    return s;
}

static double fanout(long rounds, int readers, uint64_t *x, uint64_t *sums)
{
    g_x = x;
    g_sums = sums;
    vq_var *v = vq_var_new(engine, "x");
    vq_task w = {.fn = fan_write_fn, .writes = &v, .nwrites = 1};
    double t0 = bench_now();
    for (long r = 0; r < rounds; r++) {
        if (push(&w) < 0)
            return -1;
        for (int j = 0; j < readers; j++) {
            vq_task t = {.fn = fan_read_fn, .arg = (void *)(intptr_t)j, .reads = &v, .nreads = 1};
            if (push(&t) < 0)
                return -1;
        }
    }
    double s = finish(t0);
    vq_var_free(engine, v);
    return s;
}

static vq_var **vars_new(int n)
{
    vq_var **v = malloc((size_t)n * sizeof *v);
    for (int i = 0; i < n && v; i++)
        v[i] = vq_var_new(engine, "v");
    return v;
}

static void vars_free(vq_var **v, int n)
{
    for (int i = 0; i < n; i++)
        vq_var_free(engine, v[i]);
    vq_wait_all(engine);
    free(v);
}

static double random_sets(long n, int nvars, const struct bench_triple *tr, uint64_t *vars)
{
    g_vars = vars;
    g_t = tr;
    vq_var **v = vars_new(nvars);
    double t0 = bench_now();
    for (long i = 0; i < n; i++) {
        vq_var *r[2] = {v[tr[i].a], v[tr[i].b]};
        vq_task t = {.fn = random_fn, .arg = (void *)(intptr_t)i, .reads = r, .nreads = 2,
                     .writes = &v[tr[i].c], .nwrites = 1};
        if (push(&t) < 0)
            return -1;
    }
    double s = finish(t0);
    vars_free(v, nvars);
    return s;
}

/* Task (s, i)'s reads (points i-1 .. i+1 of row s-1) and write. */
static int stencil_deps(vq_var **pts, int width, int s, int i, vq_var **r, vq_var **w)
{
    int n = 0;
    vq_var **in = pts + ((s - 1) % 2) * width;
    for (int k = i - 1; k <= i + 1; k++)
        if (k >= 0 && k < width)
            r[n++] = in[k];
    *w = pts[(s % 2) * width + i];
    return n;
}

static double stencil(int width, int steps, long grain, double *grid)
{
    g_grid = grid;
    g_width = width;
    g_grain = grain;
    vq_var **pts = vars_new(2 * width);
    double t0 = bench_now();
    for (int s = 1; s <= steps; s++)
        for (int i = 0; i < width; i++) {
            vq_var *r[3], *w;
            int nr = stencil_deps(pts, width, s, i, r, &w);
            vq_task t = {.fn = stencil_fn, .arg = (void *)(intptr_t)((long)s * width + i),
                         .reads = r, .nreads = nr, .writes = &w, .nwrites = 1};
            if (push(&t) < 0)
                return -1;
        }
    double sec = finish(t0);
    vars_free(pts, 2 * width);
    return sec;
}

/* ---- workloads with prebuilt ops (vq_opr_new outside the timing) ---- */

static int push_opr(vq_opr *op)
{
    int rc = vq_push_opr(engine, op);
    if (rc < 0)
        fprintf(stderr, "varq: vq_push_opr: %s\n", vq_errmsg());
    return rc;
}

static double opr_independent(long n, unsigned char *done)
{
    g_done = done;
    vq_opr **ops = malloc((size_t)n * sizeof *ops);
    for (long i = 0; i < n; i++) {
        vq_task t = {.fn = independent_fn, .arg = (void *)(intptr_t)i};
        ops[i] = vq_opr_new(engine, &t);
    }
    double t0 = bench_now();
    for (long i = 0; i < n; i++)
        if (push_opr(ops[i]) < 0)
            return -1;
    double s = finish(t0);
    for (long i = 0; i < n; i++)
        vq_opr_free(engine, ops[i]);
    free(ops);
    return s;
}

static double opr_chain(long n, uint64_t *x)
{
    g_x = x;
    vq_var *v = vq_var_new(engine, "x");
    vq_task t = {.fn = chain_fn, .writes = &v, .nwrites = 1};
    vq_opr *op = vq_opr_new(engine, &t);
    double t0 = bench_now();
    for (long i = 0; i < n; i++)
        if (push_opr(op) < 0)
            return -1;
    double s = finish(t0);
    vq_opr_free(engine, op);
    vq_var_free(engine, v);
    return s;
}

static double opr_fanout(long rounds, int readers, uint64_t *x, uint64_t *sums)
{
    g_x = x;
    g_sums = sums;
    vq_var *v = vq_var_new(engine, "x");
    vq_task w = {.fn = fan_write_fn, .writes = &v, .nwrites = 1};
    vq_opr *wop = vq_opr_new(engine, &w), *rops[64];
    for (int j = 0; j < readers; j++) {
        vq_task t = {.fn = fan_read_fn, .arg = (void *)(intptr_t)j, .reads = &v, .nreads = 1};
        rops[j] = vq_opr_new(engine, &t);
    }
    double t0 = bench_now();
    for (long r = 0; r < rounds; r++) {
        if (push_opr(wop) < 0)
            return -1;
        for (int j = 0; j < readers; j++)
            if (push_opr(rops[j]) < 0)
                return -1;
    }
    double s = finish(t0);
    vq_opr_free(engine, wop);
    for (int j = 0; j < readers; j++)
        vq_opr_free(engine, rops[j]);
    vq_var_free(engine, v);
    return s;
}

static double opr_random(long n, int nvars, const struct bench_triple *tr, uint64_t *vars)
{
    g_vars = vars;
    g_t = tr;
    vq_var **v = vars_new(nvars);
    vq_opr **ops = malloc((size_t)n * sizeof *ops);
    for (long i = 0; i < n; i++) {
        vq_var *r[2] = {v[tr[i].a], v[tr[i].b]};
        vq_task t = {.fn = random_fn, .arg = (void *)(intptr_t)i, .reads = r, .nreads = 2,
                     .writes = &v[tr[i].c], .nwrites = 1};
        ops[i] = vq_opr_new(engine, &t);
    }
    double t0 = bench_now();
    for (long i = 0; i < n; i++)
        if (push_opr(ops[i]) < 0)
            return -1;
    double s = finish(t0);
    for (long i = 0; i < n; i++)
        vq_opr_free(engine, ops[i]);
    free(ops);
    vars_free(v, nvars);
    return s;
}

static double opr_stencil(int width, int steps, long grain, double *grid)
{
    g_grid = grid;
    g_width = width;
    g_grain = grain;
    vq_var **pts = vars_new(2 * width);
    /* Task (s, i) depends on s only through its parity: one op per
     * (parity, i), built with s = 2 + parity. */
    vq_opr **ops = malloc(2 * (size_t)width * sizeof *ops);
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < width; i++) {
            vq_var *r[3], *w;
            int s = 2 + p;
            int nr = stencil_deps(pts, width, s, i, r, &w);
            vq_task t = {.fn = stencil_fn, .arg = (void *)(intptr_t)((long)s * width + i),
                         .reads = r, .nreads = nr, .writes = &w, .nwrites = 1};
            ops[p * width + i] = vq_opr_new(engine, &t);
        }
    double t0 = bench_now();
    for (int s = 1; s <= steps; s++)
        for (int i = 0; i < width; i++)
            if (push_opr(ops[(s % 2) * width + i]) < 0)
                return -1;
    double sec = finish(t0);
    for (int k = 0; k < 2 * width; k++)
        vq_opr_free(engine, ops[k]);
    free(ops);
    vars_free(pts, 2 * width);
    return sec;
}

const struct bench_rt bench_rt_varq = {
    "varq", init_threaded, fini, describe, independent, chain, fanout, random_sets, stencil,
};

const struct bench_rt bench_rt_varq_opr = {
    "varq-opr", init_threaded, fini, describe, opr_independent, opr_chain, opr_fanout,
    opr_random, opr_stencil,
};

const struct bench_rt bench_rt_varq_naive = {
    "varq-naive", init_naive, fini, describe, independent, chain, fanout, random_sets, stencil,
};

int main(int argc, char **argv)
{
    const struct bench_rt *rts[] = {&bench_rt_varq, &bench_rt_varq_opr, &bench_rt_varq_naive};
    return bench_main(argc, argv, rts, 3);
}
