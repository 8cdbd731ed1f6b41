/* quickstart: a first varq program.
 *
 * It computes dot(x, a*x + y) over vectors of 2^20 doubles cut into 8
 * blocks. Every block is a var; each step is an op that names the blocks it
 * reads and writes, and the engine runs them in parallel wherever that keeps
 * the result of running them in order:
 *
 *   fill x[b], fill y[b]   ->  y[b] += a*x[b]  ->  part[b] = dot(x[b], y[b])
 *                                                  -> total = sum(part)  (async)
 *
 * The final sum is an async op: it hands its work to a thread of its own,
 * which calls vq_done_finish. Then one op fails on purpose (normalising by a
 * zero norm), the op that reads its output is skipped, and the failure
 * arrives at vq_wait_var. The program checks every number against a plain
 * serial computation and exits 0 only if all match.
 *
 * Run it with VARQ_PROFILE=trace.json to get a Chrome trace of the ops. */
#include <varq/varq.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define N (1 << 20)
#define BLOCKS 8
#define BS (N / BLOCKS)
#define A 0.5

static double x[N], y[N], part[BLOCKS], total;

static int fill_x(void *arg, const vq_exec_ctx *ctx)
{
    (void)ctx;
    int b = (int)(intptr_t)arg;
    for (int i = b * BS; i < (b + 1) * BS; i++)
        x[i] = 1.0 / (1 + i % 1000);
    return 0;
}

static int fill_y(void *arg, const vq_exec_ctx *ctx)
{
    (void)ctx;
    int b = (int)(intptr_t)arg;
    for (int i = b * BS; i < (b + 1) * BS; i++)
        y[i] = (double)(i % 7);
    return 0;
}

static int axpy(void *arg, const vq_exec_ctx *ctx)
{
    (void)ctx;
    int b = (int)(intptr_t)arg;
    for (int i = b * BS; i < (b + 1) * BS; i++)
        y[i] += A * x[i];
    return 0;
}

static int dot(void *arg, const vq_exec_ctx *ctx)
{
    (void)ctx;
    int b = (int)(intptr_t)arg;
    double s = 0;
    for (int i = b * BS; i < (b + 1) * BS; i++)
        s += x[i] * y[i];
    part[b] = s;
    return 0;
}

/* The async op: its work runs on another thread, which finishes the op. */
static void *sum_thread(void *done)
{
    double s = 0;
    for (int b = 0; b < BLOCKS; b++)
        s += part[b];
    total = s;
    vq_done_finish(done, 0);
    return NULL;
}

static void sum_async(void *arg, const vq_exec_ctx *ctx, vq_done *done)
{
    (void)ctx;
    pthread_t *t = arg;
    pthread_create(t, NULL, sum_thread, done);
}

/* Fails on purpose: the norm it divides by is zero. */
static double norm = 0.0, normalized;

static int normalize(void *arg, const vq_exec_ctx *ctx)
{
    (void)arg, (void)ctx;
    if (norm == 0.0)
        return VQ_EINVAL;
    normalized = total / norm;
    return 0;
}

static int report(void *arg, const vq_exec_ctx *ctx)
{
    (void)arg, (void)ctx;
    printf("normalized total: %g\n", normalized); /* never runs */
    return 0;
}

static int push(vq_engine *e, vq_sync_fn fn, int b, const char *name, vq_var **r, int nr,
                vq_var **w, int nw)
{
    vq_task t = {.fn = fn, .arg = (void *)(intptr_t)b, .reads = r, .nreads = nr, .writes = w,
                 .nwrites = nw, .name = name};
    int rc = vq_push(e, &t);
    if (rc < 0)
        fprintf(stderr, "vq_push(%s): %s\n", name, vq_errmsg());
    return rc;
}

int main(void)
{
    vq_engine *e;
    int rc = vq_engine_new(&e, NULL); /* threaded; VARQ_ENGINE / VARQ_CPU_WORKERS override */
    if (rc < 0) {
        fprintf(stderr, "vq_engine_new: %s (%s)\n", vq_errmsg(), vq_strerror(rc));
        return 1;
    }
    vq_var *xb[BLOCKS], *yb[BLOCKS], *pb[BLOCKS];
    for (int b = 0; b < BLOCKS; b++) {
        xb[b] = vq_var_new(e, "x");
        yb[b] = vq_var_new(e, "y");
        pb[b] = vq_var_new(e, "part");
    }
    vq_var *tv = vq_var_new(e, "total"), *nv = vq_var_new(e, "normalized");

    for (int b = 0; b < BLOCKS && rc == 0; b++) {
        vq_var *xy[2] = {xb[b], yb[b]};
        rc |= push(e, fill_x, b, "fill_x", NULL, 0, &xb[b], 1);
        rc |= push(e, fill_y, b, "fill_y", NULL, 0, &yb[b], 1);
        rc |= push(e, axpy, b, "axpy", &xb[b], 1, &yb[b], 1);
        rc |= push(e, dot, b, "dot", xy, 2, &pb[b], 1);
    }
    pthread_t summer;
    vq_task sum = {.async_fn = sum_async, .arg = &summer, .reads = pb, .nreads = BLOCKS,
                   .writes = &tv, .nwrites = 1, .name = "sum"};
    rc |= vq_push(e, &sum);
    rc |= push(e, normalize, 0, "normalize", &tv, 1, &nv, 1);
    rc |= push(e, report, 0, "report", &nv, 1, NULL, 0);
    if (rc < 0) {
        vq_engine_free(e);
        return 1;
    }

    /* Pushing returned at once; now wait for what we need. */
    int total_err = vq_wait_var(e, tv);
    int norm_err = vq_wait_var(e, nv);
    pthread_join(summer, NULL);
    int first_err = vq_wait_all(e);
    vq_engine_free(e);

    /* The same computation, serially. */
    double expect = 0;
    for (int b = 0; b < BLOCKS; b++) {
        double s = 0;
        for (int i = b * BS; i < (b + 1) * BS; i++) {
            double xi = 1.0 / (1 + i % 1000), yi = (double)(i % 7) + A * xi;
            s += xi * yi;
        }
        expect += s;
    }

    int ok = 1;
    printf("dot(x, a*x + y) = %.6f (serial: %.6f)%s\n", total, expect,
           total == expect ? "" : "  MISMATCH");
    ok &= total == expect && total_err == 0;
    printf("normalize failed as planned: vq_wait_var -> %s\n", vq_strerror(norm_err));
    ok &= norm_err == VQ_EINVAL;
    printf("vq_wait_all -> %s\n", vq_strerror(first_err));
    ok &= first_err == VQ_EINVAL;
    printf("%s\n", ok ? "quickstart: all checks passed" : "quickstart: FAILED");
    return ok ? 0 : 1;
}
