/* gpu_bench: what a GPU op costs through varq, against the same launches
 * made raw on the stream backend (docs/design/gpu.md).
 *
 * varq side: vq_push of n ops on GPU 0 (threaded engine), each op's fn
 * launching one empty kernel on x->stream and returning, then vq_wait_all.
 * On the emulated backend the "kernel" is a host function enqueued with
 * vq_gpu_launch_host, as the emulated backend's kernels are.
 * Raw side: the same launches with no engine, on streams of our own:
 *   one stream   n launches on one stream, then one stream synchronize;
 *   device sync  n launches alternating two streams, a synchronize after
 *                each (cudaDeviceSynchronize; emulated: the stream just
 *                launched on, the other one being idle by then);
 *   events       n launches alternating two streams, each stream waiting
 *                on the device for the other's last launch through an
 *                event: what the engine does for a chain that changes
 *                streams, minus the engine.
 * The CUDA raw loops are in gpu_kernels.cu (built when have_cuda); the
 * emulated ones call the backend table of engine/surface/stream.h, which is why
 * this program links the static library (its internals are hidden in the
 * shared one).
 *
 * Patterns (rows of the table):
 *   chain        every op writes one var; on 1 compute stream, and on 2
 *                (the engine's default), where the engine picks the stream
 *                (the worker that takes the op) and may switch;
 *   independent  op i writes var i; on 1 and 2 compute streams;
 *   alternate    a chain whose odd ops carry VQ_PROP_COPY_TO_DEV, so that
 *                they run on the device's to-device copy stream and the even
 *                ones on the compute stream: every op changes streams and
 *                waits for an event of the other (the kernel stays empty).
 * Against "one stream" (chain, independent; goal varq / raw <= 1.2) and
 * against "device sync" and "events" (alternate).
 *
 * Checks, every run: every op ran (counted in the op fns), the chain's op
 * fns ran in push order, vq_wait_all and the raw synchronizes returned 0;
 * emulated: every "kernel" ran, a chain's in push order across streams;
 * CUDA: no launch failed (cudaGetLastError after the run). A failure prints
 * what and exits 1. Stream switches are counted in the chain's op fns
 * (x->stream differs from the last op's): each is one cross-stream event
 * wait by the engine.
 *
 * The backend is --backend, else VARQ_GPU_BACKEND, else CUDA when a GPU is
 * present, as the engine picks it; the choice is written back to
 * VARQ_GPU_BACKEND so that the engine picks the same. Without that backend
 * (no GPU, no driver, varq built without CUDA) the program says why and
 * exits 77 (a skip for meson test).
 *
 * usage: gpu_bench [--ops N] [--reps R] [--tiny] [--backend cuda|emulated]
 *   --ops N    ops per run (default 100000)
 *   --reps R   timed repetitions after one warm-up; the median is reported
 *              (default 5)
 *   --tiny     1000 ops, 1 repetition: checks that everything runs (the
 *              meson test gpu_bench_tiny, on the emulated backend)
 * Output: one tab-separated line per measurement, then the table:
 *   describe gpu_bench <backend> <devices> <ops> <reps>
 *   gpu      <backend> <pattern> <streams> <side> <ops> <median ns/op> <min ns/op> <switches>
 *   ratio    <backend> <pattern> <streams> <raw side> <varq / raw of the medians>
 * side is varq, raw-stream, raw-devsync or raw-events; switches is the
 * median count of stream switches per run for varq, "-" for raw. */
#include <varq/engine.h>

#include "stream.h"
#include "measure.h" /* bench_now, bench_median, bench_stats */

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SKIP 77

#ifdef VARQ_HAVE_CUDA
/* gpu_kernels.cu */
const char *gb_cuda_error_string(int err);
int gb_cuda_launch(void *stream);
int gb_cuda_launch_error(void);
int gb_cuda_raw_open(void);
void gb_cuda_raw_close(void);
int gb_cuda_raw_one_stream(long n);
int gb_cuda_raw_alternate_sync(long n);
int gb_cuda_raw_alternate_events(long n);
#endif

enum pattern { P_CHAIN, P_INDEPENDENT, P_ALTERNATE };
enum raw_kind { RAW_STREAM, RAW_DEVSYNC, RAW_EVENTS, RAW_KINDS };

static const char *const raw_side[RAW_KINDS] = {"raw-stream", "raw-devsync", "raw-events"};
static const char *const raw_title[RAW_KINDS] = {"one stream", "device sync", "events"};

/* One row of the table: a varq configuration and the raw loops it is
 * compared with. */
struct row {
    const char *pattern;
    enum pattern p;
    int gpu_streams;     /* the engine's compute streams */
    const char *streams; /* column text, without spaces (machine lines) */
    int nraw;
    enum raw_kind raw[2];
};

static const struct row rows[] = {
    {"chain", P_CHAIN, 1, "1-compute", 1, {RAW_STREAM}},
    {"independent", P_INDEPENDENT, 1, "1-compute", 1, {RAW_STREAM}},
    {"chain", P_CHAIN, 2, "2-compute", 1, {RAW_STREAM}},
    {"independent", P_INDEPENDENT, 2, "2-compute", 1, {RAW_STREAM}},
    {"alternate", P_ALTERNATE, 1, "compute+h2d", 2, {RAW_DEVSYNC, RAW_EVENTS}},
};
#define NROWS ((int)(sizeof rows / sizeof rows[0]))

struct result {
    double varq_ns, varq_min_ns, switches;
    double raw_ns[2], raw_min_ns[2];
};

/* The backend, and the emulated raw side's streams and events. */
static struct {
    const struct vq__stream_backend *be;
    bool cuda;
    void *stream[2];
    void *event[2];
} dev;

/* What the ops and "kernels" of a run record, reset before each run. A
 * chain's op fns run one after another (each op waits for the completion of
 * the one before), and its emulated kernels too (stream order, or an event
 * wait across streams): their fields need no atomics. */
static struct {
    long op_next, dev_next; /* chain: the index expected next */
    bool op_order_bad, dev_order_bad;
    const void *last_stream;
    long switches;
    atomic_long ops_run; /* independent: op fns run */
    atomic_long dev_run; /* independent, emulated: kernels run */
} chk;

static void reset_checks(void)
{
    chk.op_next = chk.dev_next = 0;
    chk.op_order_bad = chk.dev_order_bad = false;
    chk.last_stream = NULL;
    chk.switches = 0;
    atomic_store(&chk.ops_run, 0);
    atomic_store(&chk.dev_run, 0);
}

/* ---- the emulated kernels (host functions on a stream) ---- */

static int kernel_chain(void *arg)
{
    long i = (long)(intptr_t)arg;
    if (i != chk.dev_next)
        chk.dev_order_bad = true;
    chk.dev_next = i + 1;
    return 0;
}

static int kernel_count(void *arg)
{
    (void)arg;
    atomic_fetch_add_explicit(&chk.dev_run, 1, memory_order_relaxed);
    return 0;
}

/* ---- the varq side ---- */

static int launch(const vq_exec_ctx *x, int (*kernel)(void *), void *arg)
{
#ifdef VARQ_HAVE_CUDA
    if (dev.cuda)
        return gb_cuda_launch(x->stream);
#endif
    return vq_gpu_launch_host(x, kernel, arg);
}

static int op_chain(void *arg, const vq_exec_ctx *x)
{
    long i = (long)(intptr_t)arg;
    if (i != chk.op_next)
        chk.op_order_bad = true;
    chk.op_next = i + 1;
    if (i > 0 && x->stream != chk.last_stream)
        chk.switches++;
    chk.last_stream = x->stream;
    return launch(x, kernel_chain, arg);
}

static int op_independent(void *arg, const vq_exec_ctx *x)
{
    atomic_fetch_add_explicit(&chk.ops_run, 1, memory_order_relaxed);
    return launch(x, kernel_count, arg);
}

/* After a run of n ops of pattern p (varq or raw): 0, or -1 with a message. */
static int check_run(const char *side, const struct row *r, long n, bool varq)
{
    const char *what = NULL;
    if (varq && r->p != P_INDEPENDENT && (chk.op_next != n || chk.op_order_bad))
        what = "the chain's op fns did not run once each in push order";
    if (varq && r->p == P_INDEPENDENT && atomic_load(&chk.ops_run) != n)
        what = "not every op fn ran exactly once";
    if (!dev.cuda && r->p != P_INDEPENDENT && (chk.dev_next != n || chk.dev_order_bad))
        what = "the chain's kernels did not run once each in push order";
    if (!dev.cuda && r->p == P_INDEPENDENT && atomic_load(&chk.dev_run) != n)
        what = "not every kernel ran exactly once";
#ifdef VARQ_HAVE_CUDA
    int err = dev.cuda ? gb_cuda_launch_error() : 0;
    if (err) {
        fprintf(stderr, "gpu_bench: %s, %s (%s): a kernel launch failed: %s\n", r->pattern,
                r->streams, side, gb_cuda_error_string(err));
        return -1;
    }
#endif
    if (what) {
        fprintf(stderr, "gpu_bench: %s, %s (%s): %s\n", r->pattern, r->streams, side, what);
        return -1;
    }
    return 0;
}

/* One run of n ops; *sec is from the first push to vq_wait_all's return. */
static int varq_run(vq_engine *e, const struct row *r, long n, vq_var **vars, double *sec)
{
    reset_checks();
    vq_task t = {.fn = r->p == P_INDEPENDENT ? op_independent : op_chain,
                 .ctx = {VQ_DEV_GPU, 0}, .nwrites = 1, .name = "gpu_bench"};
    double t0 = bench_now();
    for (long i = 0; i < n; i++) {
        t.arg = (void *)(intptr_t)i;
        t.writes = r->p == P_INDEPENDENT ? &vars[i] : &vars[0];
        t.props = r->p == P_ALTERNATE && (i & 1) ? VQ_PROP_COPY_TO_DEV : 0;
        int rc = vq_push(e, &t);
        if (rc < 0) {
            fprintf(stderr, "gpu_bench: vq_push: %s (%s)\n", vq_errmsg(), vq_strerror(rc));
            vq_wait_all(e);
            return -1;
        }
    }
    int rc = vq_wait_all(e);
    *sec = bench_now() - t0;
    if (rc < 0) {
        fprintf(stderr, "gpu_bench: vq_wait_all: %s (%s)\n", vq_errmsg(), vq_strerror(rc));
        return -1;
    }
    return check_run("varq", r, n, true);
}

/* ---- the raw side ---- */

static int raw_emulated(enum raw_kind k, const struct row *r, long n)
{
    const struct vq__stream_backend *be = dev.be;
    int (*kernel)(void *) = r->p == P_INDEPENDENT ? kernel_count : kernel_chain;
    int rc = 0;
    switch (k) {
    case RAW_STREAM:
        for (long i = 0; i < n && rc == 0; i++)
            rc = be->launch_host(dev.stream[0], kernel, (void *)(intptr_t)i);
        if (rc == 0)
            rc = be->stream_synchronize(dev.stream[0]);
        break;
    case RAW_DEVSYNC:
        for (long i = 0; i < n && rc == 0; i++) {
            rc = be->launch_host(dev.stream[i & 1], kernel, (void *)(intptr_t)i);
            if (rc == 0)
                rc = be->stream_synchronize(dev.stream[i & 1]);
        }
        break;
    case RAW_EVENTS:
        for (long i = 0; i < n && rc == 0; i++) {
            void *s = dev.stream[i & 1];
            if (i > 0)
                rc = be->stream_wait_event(s, dev.event[(i - 1) & 1]);
            if (rc == 0)
                rc = be->launch_host(s, kernel, (void *)(intptr_t)i);
            if (rc == 0)
                rc = be->event_record(dev.event[i & 1], s);
        }
        for (int s = 0; s < 2; s++) {
            int sync = be->stream_synchronize(dev.stream[s]);
            if (rc == 0)
                rc = sync;
        }
        break;
    default:
        break;
    }
    if (rc < 0)
        fprintf(stderr, "gpu_bench: %s, %s (%s): %s (%s)\n", r->pattern, r->streams, raw_side[k],
                vq_errmsg(), vq_strerror(rc));
    return rc < 0 ? -1 : 0;
}

static int raw_run(enum raw_kind k, const struct row *r, long n, double *sec)
{
    reset_checks();
    double t0 = bench_now();
    int rc;
#ifdef VARQ_HAVE_CUDA
    if (dev.cuda) {
        int err = k == RAW_STREAM    ? gb_cuda_raw_one_stream(n)
                  : k == RAW_DEVSYNC ? gb_cuda_raw_alternate_sync(n)
                                     : gb_cuda_raw_alternate_events(n);
        *sec = bench_now() - t0;
        if (err) {
            fprintf(stderr, "gpu_bench: %s, %s (%s): %s\n", r->pattern, r->streams, raw_side[k],
                    gb_cuda_error_string(err));
            return -1;
        }
        return check_run(raw_side[k], r, n, false);
    }
#endif
    rc = raw_emulated(k, r, n);
    *sec = bench_now() - t0;
    return rc < 0 ? -1 : check_run(raw_side[k], r, n, false);
}

/* Streams and events of our own for the raw side (the CUDA ones live in
 * gpu_kernels.cu). Returns 0, -1 on failure, or SKIP. */
static int raw_open(void)
{
#ifdef VARQ_HAVE_CUDA
    if (dev.cuda) {
        int err = gb_cuda_raw_open();
        if (err) {
            fprintf(stderr, "gpu_bench: skipped: CUDA device 0 is not usable: %s\n",
                    gb_cuda_error_string(err));
            return SKIP;
        }
        return 0;
    }
#endif
    for (int i = 0; i < 2; i++) {
        int rc = dev.be->stream_new(0, &dev.stream[i]);
        if (rc == 0)
            rc = dev.be->event_new(0, &dev.event[i]);
        if (rc < 0) {
            fprintf(stderr, "gpu_bench: the raw side's streams: %s (%s)\n", vq_errmsg(),
                    vq_strerror(rc));
            return -1;
        }
    }
    return 0;
}

static void raw_close(void)
{
#ifdef VARQ_HAVE_CUDA
    if (dev.cuda) {
        gb_cuda_raw_close();
        return;
    }
#endif
    for (int i = 0; i < 2; i++) {
        if (dev.stream[i])
            dev.be->stream_free(dev.stream[i]);
        if (dev.event[i])
            dev.be->event_free(dev.event[i]);
        dev.stream[i] = dev.event[i] = NULL;
    }
}

/* ---- one row ---- */

static void print_line(const char *backend, const struct row *r, const char *side, long n,
                       double median, double min, double switches)
{
    char sw[32] = "-";
    if (switches >= 0)
        snprintf(sw, sizeof sw, "%.0f", switches);
    printf("gpu\t%s\t%s\t%s\t%s\t%ld\t%.1f\t%.1f\t%s\n", backend, r->pattern, r->streams, side, n,
           median, min, sw);
}

/* Runs the row: one warm-up, then reps repetitions, each timing varq then
 * its raw loops (side by side, so that both see the same machine). */
static int run_row(const struct row *r, long n, int reps, struct result *res)
{
    int rc = -1, nvars = r->p == P_INDEPENDENT ? (int)n : 1;
    double *tv = malloc((size_t)reps * sizeof *tv), *sw = malloc((size_t)reps * sizeof *sw);
    double *tr[2] = {malloc((size_t)reps * sizeof(double)), malloc((size_t)reps * sizeof(double))};
    vq_var **vars = calloc((size_t)nvars, sizeof *vars);
    vq_engine *e = NULL;
    if (!tv || !sw || !tr[0] || !tr[1] || !vars) {
        fprintf(stderr, "gpu_bench: out of memory\n");
        goto out;
    }
    vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .gpu_streams = r->gpu_streams};
    int erc = vq_engine_new(&e, &eo);
    if (erc < 0) {
        fprintf(stderr, "gpu_bench: vq_engine_new: %s (%s)\n", vq_errmsg(), vq_strerror(erc));
        goto out;
    }
    for (int v = 0; v < nvars; v++)
        if (!(vars[v] = vq_var_new(e, NULL))) {
            fprintf(stderr, "gpu_bench: vq_var_new: %s\n", vq_errmsg());
            goto out;
        }
    /* Repetition -1 is the warm-up: the first GPU push sets up the engine's
     * streams, and the first runs grow the pools and queues. */
    for (int rep = -1; rep < reps; rep++) {
        double sec;
        if (varq_run(e, r, n, vars, &sec) < 0)
            goto out;
        if (rep >= 0) {
            tv[rep] = sec / (double)n * 1e9;
            sw[rep] = (double)chk.switches;
        }
        for (int k = 0; k < r->nraw; k++) {
            if (raw_run(r->raw[k], r, n, &sec) < 0)
                goto out;
            if (rep >= 0)
                tr[k][rep] = sec / (double)n * 1e9;
        }
    }
    const char *backend = dev.be->name;
    double dummy;
    bench_stats(tv, reps, &res->varq_ns, &res->varq_min_ns);
    bench_stats(sw, reps, &res->switches, &dummy);
    print_line(backend, r, "varq", n, res->varq_ns, res->varq_min_ns,
               r->p == P_INDEPENDENT ? -1 : res->switches);
    for (int k = 0; k < r->nraw; k++) {
        bench_stats(tr[k], reps, &res->raw_ns[k], &res->raw_min_ns[k]);
        print_line(backend, r, raw_side[r->raw[k]], n, res->raw_ns[k], res->raw_min_ns[k], -1);
    }
    for (int k = 0; k < r->nraw; k++)
        printf("ratio\t%s\t%s\t%s\t%s\t%.3f\n", backend, r->pattern, r->streams,
               raw_side[r->raw[k]], res->varq_ns / res->raw_ns[k]);
    fflush(stdout);
    rc = 0;
out:
    vq_engine_free(e); /* frees the vars with it */
    free(vars);
    free(tv);
    free(sw);
    free(tr[0]);
    free(tr[1]);
    return rc;
}

/* ---- main ---- */

static bool parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static int usage(const char *argv0)
{
    fprintf(stderr, "usage: %s [--ops N] [--reps R] [--tiny] [--backend cuda|emulated]\n", argv0);
    return 2;
}

int main(int argc, char **argv)
{
    long n = 100000, reps = 5;
    bool tiny = false, ops_set = false, reps_set = false;
    const char *backend = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tiny") == 0) {
            tiny = true;
        } else if (strcmp(argv[i], "--ops") == 0 && i + 1 < argc) {
            if (!parse_long(argv[++i], 1, 100000000, &n))
                return fprintf(stderr, "gpu_bench: --ops: 1 to 100000000\n"), 2;
            ops_set = true;
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            if (!parse_long(argv[++i], 1, 1000, &reps))
                return fprintf(stderr, "gpu_bench: --reps: 1 to 1000\n"), 2;
            reps_set = true;
        } else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
            backend = argv[++i];
            if (strcmp(backend, "cuda") != 0 && strcmp(backend, "emulated") != 0)
                return usage(argv[0]);
        } else {
            return usage(argv[0]);
        }
    }
    if (tiny) {
        n = ops_set ? n : 1000;
        reps = reps_set ? reps : 1;
    }

    /* The backend as the engine picks it; then make the engine pick it too. */
    int rc = vq__stream_backend_get(backend, &dev.be);
    if (rc == VQ_ENOSYS || (rc == 0 && dev.be->device_count() < 1)) {
        fprintf(stderr, "gpu_bench: skipped: %s\n",
                rc ? vq_errmsg() : "the GPU backend has no device");
        return SKIP;
    }
    if (rc < 0) {
        fprintf(stderr, "gpu_bench: %s (%s)\n", vq_errmsg(), vq_strerror(rc));
        return 2;
    }
    dev.cuda = strcmp(dev.be->name, "cuda") == 0;
    if (setenv("VARQ_GPU_BACKEND", dev.be->name, 1) != 0) {
        fprintf(stderr, "gpu_bench: cannot set VARQ_GPU_BACKEND\n");
        return 1;
    }
    if ((rc = raw_open()) != 0) {
        raw_close();
        return rc == SKIP ? SKIP : 1;
    }
    int ndev = dev.be->device_count();
    printf("describe\tgpu_bench\t%s\t%d\t%ld\t%ld\n", dev.be->name, ndev, n, reps);
    fflush(stdout);

    struct result res[NROWS];
    for (int i = 0; i < NROWS; i++)
        if (run_row(&rows[i], n, (int)reps, &res[i]) < 0) {
            raw_close();
            return 1;
        }
    raw_close();

    printf("\nGPU ops through varq against raw launches: %s backend, GPU 0 of %d;\n"
           "%ld ops per run, ns per op, median (min) of %ld repetitions after a warm-up.\n"
           "varq: vq_push of ops on GPU 0 (threaded engine), each launching one empty\n"
           "kernel on x->stream, then vq_wait_all.%s\n"
           "raw: the same launches without varq:\n"
           "  one stream   all on one stream, then one stream synchronize\n"
           "  device sync  alternating two streams, a synchronize after each launch\n"
           "  events       alternating two streams, each waiting for the other's last\n"
           "               launch through an event (varq's cross-stream wait, bare)\n"
           "switches: times a chain's op ran on another stream than the op before it\n"
           "(each is one cross-stream event wait in the engine)\n\n",
           dev.be->name, ndev, n, reps,
           dev.cuda ? ""
                    : "\n(emulated: the kernel is an empty host function, enqueued by\n"
                      "vq_gpu_launch_host for varq and by the backend's launch_host raw)");
    printf("%-12s %-12s %18s  %-12s %18s %9s %9s\n", "pattern", "varq streams", "varq ns/op",
           "raw", "raw ns/op", "varq/raw", "switches");
    for (int i = 0; i < NROWS; i++) {
        const struct row *r = &rows[i];
        char varq[40], sw[24] = "-";
        snprintf(varq, sizeof varq, "%.0f (%.0f)", res[i].varq_ns, res[i].varq_min_ns);
        if (r->p != P_INDEPENDENT)
            snprintf(sw, sizeof sw, "%.0f", res[i].switches);
        for (int k = 0; k < r->nraw; k++) {
            char raw[40];
            snprintf(raw, sizeof raw, "%.0f (%.0f)", res[i].raw_ns[k], res[i].raw_min_ns[k]);
            printf("%-12s %-12s %18s  %-12s %18s %8.2fx %9s\n", k ? "" : r->pattern,
                   k ? "" : r->streams, k ? "" : varq, raw_title[r->raw[k]], raw,
                   res[i].varq_ns / res[i].raw_ns[k], k ? "" : sw);
        }
    }
    printf("goal: varq/raw <= 1.2 for chain and independent against one stream\n");
    return 0;
}
