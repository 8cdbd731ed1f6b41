/* GPU ops on the engine (docs/design/gpu.md), on the host-emulated stream backend
 * with two devices (or on CUDA with VARQ_GPU_BACKEND=cuda, where "device
 * 1" is GPU 0 again when there is one GPU): ordering across streams and devices, CPU ops after GPU
 * ops, copy streams overlapping compute, errors from an op's fn and from
 * its stream work, waits that include stream work, the naive engine,
 * prebuilt GPU ops, the refusals (no backend, async fn, bad device), and the
 * random serial-equivalence workload with GPU ops.
 *
 * Each op's "device work" is a host function it enqueues on its stream with
 * vq_gpu_launch_host; some sleep, so that a missing wait would show as a
 * wrong order or a stale value. On CUDA, the overlap test spins kernels
 * instead (tests/gpu_spin.cu): CUDA may run the host functions of all
 * streams one after another (it did on an H200), so sleeps prove nothing
 * there. */
#include "sanitizer.h"
#include "workload.h"

#include <varq/varq.h>

#include "../engine/engine_internal.h"
#include "stream.h"
#include "fault.h"

#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "leakcheck.h"

static int ngpus = 2; /* the backend's devices; ids below are taken modulo */

static void gpu_env(void)
{
    setenv("VARQ_GPU_BACKEND", "emulated", 0);
    setenv("VARQ_GPU_EMUL_DEVICES", "2", 0);
    const struct vq__stream_backend *be;
    if (vq__stream_backend_get(NULL, &be) < 0)
        cr_skip_test("no GPU backend: %s", vq_errmsg());
    if (be->device_count() < 1)
        cr_skip_test("the %s backend has no device", be->name);
    ngpus = be->device_count() < 2 ? be->device_count() : 2;
    workload_gpus = ngpus;
}

TestSuite(engine_gpu, .init = gpu_env, .fini = leak_check);

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
    nanosleep(&ts, NULL);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static vq_engine *engine(int kind, int streams, unsigned flags)
{
    vq_engine_opts o = {.kind = kind, .cpu_workers = 2, .gpu_streams = streams, .flags = flags};
    vq_engine *e = NULL;
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    return e;
}

/* ---- a GPU op whose stream work appends to logs and reads counts ---- */

#define MAXV 4
#define LOG_MAX 2048

struct vlog {
    int n;
    int id[LOG_MAX];
};

struct gop {
    int id;
    struct vlog *w[MAXV], *r[MAXV];
    int nw, nr;
    int seen_r[MAXV];   /* stream work: log lengths of the read vars */
    long sleep_us;      /* stream work sleeps first */
    int fn_err;         /* what the fn returns */
    int work_err;       /* what the stream work returns */
    void *stream;       /* what the fn got */
    vq_ctx ctx;
    int worker;
    double t0, t1;      /* stream work start and end (ms) */
    atomic_int *counter;
    unsigned long long *spin; /* CUDA: a kernel spins sleep_us instead, times here (ns) */
};

#ifdef VARQ_HAVE_CUDA
int tg_times_new(unsigned long long **out, int nspins);
void tg_times_free(unsigned long long *t);
int tg_spin(void *stream, long us, unsigned long long *times);
#endif

static int gop_work(void *arg)
{
    struct gop *g = arg;
    g->t0 = now_ms();
    if (g->sleep_us)
        sleep_us(g->sleep_us);
    for (int k = 0; k < g->nr; k++)
        g->seen_r[k] = g->r[k]->n;
    for (int k = 0; k < g->nw; k++)
        g->w[k]->id[g->w[k]->n++] = g->id;
    if (g->counter)
        atomic_fetch_add(g->counter, 1);
    g->t1 = now_ms();
    return g->work_err;
}

static int gop_fn(void *arg, const vq_exec_ctx *x)
{
    struct gop *g = arg;
    g->stream = x->stream;
    g->ctx = x->ctx;
    g->worker = x->worker;
#ifdef VARQ_HAVE_CUDA
    if (g->spin)
        return tg_spin(x->stream, g->sleep_us, g->spin) ? VQ_EIO : g->fn_err;
#endif
    int rc = vq_gpu_launch_host(x, gop_work, g);
    return rc < 0 ? rc : g->fn_err;
}

static int push_gop(vq_engine *e, struct gop *g, vq_var **w, vq_var **r, vq_ctx ctx,
                    unsigned props, const char *name)
{
    vq_task t = {.fn = gop_fn, .arg = g, .ctx = ctx, .writes = w, .nwrites = g->nw, .reads = r,
                 .nreads = g->nr, .props = props, .name = name};
    return vq_push(e, &t);
}

/* ---- ordering ---- */

static uint64_t rng = 88172645463325252ull;
static unsigned rnd(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

/* Random GPU ops over 6 vars, on ndev devices, compute and copy streams:
 * every var's log is the push order of its writers, and every reader saw
 * exactly the writes pushed before it. */
static void ordering(int streams, int ndev)
{
    enum { NV = 6, NOPS = 400 };
    vq_engine *e = engine(VQ_ENGINE_THREADED, streams, 0);
    static struct vlog logs[NV];
    memset(logs, 0, sizeof logs);
    vq_var *v[NV];
    for (int i = 0; i < NV; i++)
        v[i] = vq_var_new(e, "v");
    struct gop *ops = calloc(NOPS, sizeof *ops);
    int expect_n[NV] = {0};
    int expect_seen[NOPS][MAXV];
    int expect_log[NV][NOPS];
    for (int i = 0; i < NOPS; i++) {
        struct gop *g = &ops[i];
        g->id = i;
        g->sleep_us = rnd(4) == 0 ? (long)rnd(300) : 0;
        bool used[NV] = {false};
        vq_var *w[MAXV], *r[MAXV];
        int nw = 1 + (int)rnd(2), nr = (int)rnd(3);
        for (int k = 0; k < nw + nr; k++) {
            int x = (int)rnd(NV);
            if (used[x])
                continue;
            used[x] = true;
            if (k < nw) {
                w[g->nw] = v[x];
                g->w[g->nw++] = &logs[x];
                expect_log[x][expect_n[x]++] = i;
            } else {
                expect_seen[i][g->nr] = expect_n[x];
                r[g->nr] = v[x];
                g->r[g->nr++] = &logs[x];
            }
        }
        unsigned c = rnd(4);
        unsigned props = c == 2 ? VQ_PROP_COPY_TO_DEV : c == 3 ? VQ_PROP_COPY_FROM_DEV : 0;
        vq_ctx ctx = {VQ_DEV_GPU, (int)rnd((unsigned)ndev) % ngpus};
        cr_assert_eq(push_gop(e, g, w, r, ctx, props, "gop"), 0, "%s", vq_errmsg());
    }
    cr_assert_eq(vq_wait_all(e), 0, "%s", vq_errmsg());
    for (int x = 0; x < NV; x++) {
        cr_assert_eq(logs[x].n, expect_n[x], "var %d: %d writes, expected %d", x, logs[x].n,
                     expect_n[x]);
        for (int k = 0; k < expect_n[x]; k++)
            cr_assert_eq(logs[x].id[k], expect_log[x][k], "var %d write %d: op %d, expected %d", x,
                         k, logs[x].id[k], expect_log[x][k]);
    }
    for (int i = 0; i < NOPS; i++)
        for (int k = 0; k < ops[i].nr; k++)
            cr_assert_eq(ops[i].seen_r[k], expect_seen[i][k],
                         "op %d read %d saw %d writes, expected %d", i, k, ops[i].seen_r[k],
                         expect_seen[i][k]);
    vq_engine_free(e);
    free(ops);
}

Test(engine_gpu, ordering_1_stream_1_device)
{
    ordering(1, 1);
}

Test(engine_gpu, ordering_2_streams_2_devices)
{
    ordering(2, 2);
}

Test(engine_gpu, ordering_3_streams_2_devices)
{
    ordering(3, 2);
}

Test(engine_gpu, ordering_4_streams_2_devices)
{
    ordering(4, 2);
}

/* A chain on one var that hops across devices and stream kinds: every op
 * runs on another stream than the one before it, so each launch waits for
 * an event; the log is the push order. */
Test(engine_gpu, chain_alternating_streams_is_serial)
{
    enum { N = 200 };
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2, 0);
    static struct vlog log;
    log.n = 0;
    vq_var *v = vq_var_new(e, "chain");
    static struct gop ops[N];
    memset(ops, 0, sizeof ops);
    const unsigned kinds[3] = {0, VQ_PROP_COPY_TO_DEV, VQ_PROP_COPY_FROM_DEV};
    for (int i = 0; i < N; i++) {
        ops[i] = (struct gop){.id = i, .w = {&log}, .nw = 1, .sleep_us = i % 5 == 0 ? 500 : 0};
        vq_ctx ctx = {VQ_DEV_GPU, i % 2 % ngpus};
        /* One GPU: the stream kind alone changes at every op. */
        unsigned kind = kinds[ngpus > 1 ? (i / 2) % 3 : i % 3];
        cr_assert_eq(push_gop(e, &ops[i], &v, NULL, ctx, kind, "chain"), 0);
    }
    cr_assert_eq(vq_wait_var(e, v), 0);
    cr_assert_eq(log.n, N);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(log.id[i], i, "position %d holds op %d", i, log.id[i]);
        if (i > 0)
            cr_assert_neq(ops[i].stream, ops[i - 1].stream, "ops %d and %d shared a stream", i - 1,
                          i);
        cr_assert_eq(ops[i].ctx.kind, VQ_DEV_GPU);
        cr_assert_eq(ops[i].ctx.id, i % 2 % ngpus);
    }
    vq_engine_free(e);
}

/* ---- CPU ops around GPU ops ---- */

struct cell {
    int value;
    int seen;
    long sleep_us;
    int set_to;
    atomic_bool *gate; /* when set, the set waits until it opens (10 s at most) */
    bool gate_timed_out;
};

static int cell_set_work(void *arg)
{
    struct cell *c = arg;
    sleep_us(c->sleep_us);
    for (int i = 0; c->gate && !atomic_load(c->gate); i++) {
        if (i == 10000) {
            c->gate_timed_out = true;
            break;
        }
        sleep_us(1000);
    }
    c->value = c->set_to;
    return 0;
}

static int cell_read_work(void *arg)
{
    struct cell *c = arg;
    sleep_us(c->sleep_us);
    c->seen = c->value;
    return 0;
}

static int gpu_set(void *arg, const vq_exec_ctx *x)
{
    return vq_gpu_launch_host(x, cell_set_work, arg);
}

static int gpu_read(void *arg, const vq_exec_ctx *x)
{
    return vq_gpu_launch_host(x, cell_read_work, arg);
}

static int cpu_read(void *arg, const vq_exec_ctx *x)
{
    cr_assert_eq(x->ctx.kind, VQ_DEV_CPU);
    cr_assert_null(x->stream);
    struct cell *c = arg;
    c->seen = c->value;
    return 0;
}

static int cpu_write(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct cell *c = arg;
    c->value = c->set_to;
    return 0;
}

static void cpu_after_gpu(int kind)
{
    vq_engine *e = engine(kind, 2, 0);
    vq_var *v = vq_var_new(e, "v");
    for (int round = 0; round < 5; round++) {
        /* The GPU op's stream work waits for a gate that the test opens
         * only after the CPU op's push returned: a push that waited for
         * that work would find it unfinished for 10 s (no wall-clock
         * bound to miss on a loaded machine). The naive engine runs
         * pushes at once, so its gate is open from the start. */
        atomic_bool gate = kind != VQ_ENGINE_THREADED;
        struct cell c = {.value = 0, .sleep_us = 30000, .set_to = 42 + round, .gate = &gate};
        vq_task g = {.fn = gpu_set, .arg = &c, .ctx = {VQ_DEV_GPU, round % 2 % ngpus}, .writes = &v,
                     .nwrites = 1, .name = "gpu_set"};
        vq_task r = {.fn = cpu_read, .arg = &c, .reads = &v, .nreads = 1, .name = "cpu_read"};
        cr_assert_eq(vq_push(e, &g), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_push(e, &r), 0, "%s", vq_errmsg());
        atomic_store(&gate, true);
        cr_assert_eq(vq_wait_var(e, v), 0);
        cr_assert(!c.gate_timed_out, "the pusher waited for the GPU work");
        cr_assert_eq(c.seen, 42 + round, "the CPU op saw %d before the GPU op's work", c.seen);

        /* A CPU write after a GPU read waits for the read's stream work. */
        struct cell d = {.value = 7, .sleep_us = 30000, .set_to = 8};
        vq_task gr = {.fn = gpu_read, .arg = &d, .ctx = {VQ_DEV_GPU, (1 - round % 2) % ngpus},
                      .reads = &v,
                      .nreads = 1, .name = "gpu_read"};
        vq_task cw = {.fn = cpu_write, .arg = &d, .writes = &v, .nwrites = 1, .name = "cpu_write"};
        cr_assert_eq(vq_push(e, &gr), 0);
        cr_assert_eq(vq_push(e, &cw), 0);
        cr_assert_eq(vq_wait_var(e, v), 0);
        cr_assert_eq(d.seen, 7, "the GPU read saw the later CPU write");
        cr_assert_eq(d.value, 8);
    }
    vq_engine_free(e);
}

Test(engine_gpu, cpu_op_sees_gpu_op_effect)
{
    cpu_after_gpu(VQ_ENGINE_THREADED);
}

Test(engine_gpu, naive_engine_runs_gpu_ops_serially)
{
    cpu_after_gpu(VQ_ENGINE_NAIVE);
}

Test(engine_gpu, naive_engine_gpu_op_gets_stream)
{
    vq_engine *e = engine(VQ_ENGINE_NAIVE, 2, 0);
    vq_var *v = vq_var_new(e, "v");
    static struct vlog log;
    log.n = 0;
    struct gop g = {.id = 5, .w = {&log}, .nw = 1, .sleep_us = 10000};
    cr_assert_eq(push_gop(e, &g, &v, NULL, (vq_ctx){VQ_DEV_GPU, 1 % ngpus}, 0, "naive"), 0);
    /* The naive engine returns from the push when the work is done. */
    cr_assert_eq(log.n, 1);
    cr_assert_not_null(g.stream);
    cr_assert_eq(g.ctx.id, 1 % ngpus);
    cr_assert_eq(g.worker, -1);
    vq_engine_free(e);
}

/* ---- copy streams overlap compute ---- */

Test(engine_gpu, copy_ops_overlap_compute)
{
    char path[] = "/tmp/varq_gpu_traceXXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    vq_engine *e = engine(VQ_ENGINE_THREADED, 1, VQ_ENGINE_PROFILE);
    vq_var *a = vq_var_new(e, "a"), *b = vq_var_new(e, "b"), *c = vq_var_new(e, "c");
    static struct vlog la, lb, lc;
    struct gop comp = {.w = {&la}, .nw = 1, .sleep_us = 150000};
    struct gop h2d = {.w = {&lb}, .nw = 1, .sleep_us = 150000};
    struct gop d2h = {.w = {&lc}, .nw = 1, .sleep_us = 150000};
    struct gop *gops[3] = {&comp, &h2d, &d2h};
    unsigned long long *ns = NULL; /* CUDA: the kernels' [start, end], two words per op */
#ifdef VARQ_HAVE_CUDA
    const struct vq__stream_backend *be;
    cr_assert_eq(vq__stream_backend_get(NULL, &be), 0);
    if (!strcmp(be->name, "cuda")) {
        cr_assert_eq(tg_times_new(&ns, 3), 0);
        for (int i = 0; i < 3; i++)
            gops[i]->spin = ns + 2 * i;
    }
#endif
    cr_assert_eq(push_gop(e, &comp, &a, NULL, (vq_ctx){VQ_DEV_GPU, 0}, 0, "compute"), 0);
    cr_assert_eq(push_gop(e, &h2d, &b, NULL, (vq_ctx){VQ_DEV_GPU, 0}, VQ_PROP_COPY_TO_DEV,
                          "copy_in"), 0);
    cr_assert_eq(push_gop(e, &d2h, &c, NULL, (vq_ctx){VQ_DEV_GPU, 0}, VQ_PROP_COPY_FROM_DEV,
                          "copy_out"), 0);
    cr_assert_eq(vq_wait_all(e), 0);
    /* Overlap is shown by the works' own intervals, not by the wall time
     * (a timed assertion failed once on a loaded machine). */
    cr_assert(comp.stream != h2d.stream && comp.stream != d2h.stream && h2d.stream != d2h.stream,
              "copies ran on the compute stream");
    if (ns) {
        for (int i = 0; i < 3; i++) {
            cr_assert(ns[2 * i + 1] > ns[2 * i], "spin %d did not run", i);
            gops[i]->t0 = ns[2 * i] / 1e6; /* ms, as the host functions' times */
            gops[i]->t1 = ns[2 * i + 1] / 1e6;
        }
#ifdef VARQ_HAVE_CUDA
        tg_times_free(ns);
#endif
    }
    cr_assert(h2d.t0 < comp.t1 && comp.t0 < h2d.t1, "the copy to the device did not overlap");
    cr_assert(d2h.t0 < comp.t1 && comp.t0 < d2h.t1, "the copy from the device did not overlap");
    cr_assert_eq(vq_profiler_dump(e, path), 0, "%s", vq_errmsg());
    vq_engine_free(e);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
    unlink(path);
    cr_assert_not_null(strstr(text, "gpu0 copy to device"), "%s", text);
    cr_assert_not_null(strstr(text, ngpus > 1 ? "gpu1 copy from device" : "gpu0 copy from device"),
                       "%s", text);
    cr_assert_not_null(strstr(text, "gpu0 stream 0"), "%s", text);
    /* Each op is on its worker's row: the rows are those of the workers. */
    char row[64];
    snprintf(row, sizeof row, "\"name\":\"copy_in\",\"cat\":\"op\",\"ph\":\"X\",\"pid\":0,\"tid\":%d",
             h2d.worker);
    cr_assert_not_null(strstr(text, row), "no %s in %s", row, text);
    cr_assert_neq(h2d.worker, comp.worker);
}

/* ---- errors ---- */

static atomic_int cpu_runs;

static int count_run(void *arg, const vq_exec_ctx *x)
{
    (void)arg;
    (void)x;
    atomic_fetch_add(&cpu_runs, 1);
    return 0;
}

Test(engine_gpu, gpu_fn_error_poisons_writes)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2, 0);
    vq_var *w = vq_var_new(e, "w"), *r = vq_var_new(e, "r"), *u = vq_var_new(e, "u");
    static struct vlog lw, lr, lu;
    struct gop bad = {.w = {&lw}, .nw = 1, .r = {&lr}, .nr = 1, .fn_err = VQ_EIO};
    cr_assert_eq(push_gop(e, &bad, &w, &r, (vq_ctx){VQ_DEV_GPU, 0}, 0, "bad"), 0);
    atomic_store(&cpu_runs, 0);
    vq_task t = {.fn = count_run, .reads = &w, .nreads = 1, .writes = &u, .nwrites = 1};
    cr_assert_eq(vq_push(e, &t), 0);
    struct gop after = {.w = {&lu}, .nw = 1};
    cr_assert_eq(push_gop(e, &after, &u, NULL, (vq_ctx){VQ_DEV_GPU, 1 % ngpus}, 0, "after"), 0);
    cr_assert_eq(vq_wait_var(e, w), VQ_EIO);
    cr_assert_eq(vq_wait_var(e, u), VQ_EIO, "the skip passed the failure on");
    cr_assert_eq(vq_wait_var(e, r), 0, "a read var is not poisoned");
    cr_assert_eq(atomic_load(&cpu_runs), 0, "the CPU op on the failed var ran");
    cr_assert_eq(vq_wait_all(e), VQ_EIO);
    cr_assert_eq(lu.n, 0, "the GPU op on the failed var ran");
    /* Cleared: the vars work again. */
    cr_assert_eq(vq_push(e, &t), 0);
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert_eq(atomic_load(&cpu_runs), 1);
    vq_engine_free(e);
}

Test(engine_gpu, stream_work_error_surfaces_at_next_cpu_sync)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2, 0);
    vq_var *v = vq_var_new(e, "v"), *u = vq_var_new(e, "u");
    static struct vlog lv;
    struct gop bad = {.w = {&lv}, .nw = 1, .work_err = VQ_EIO, .sleep_us = 20000};
    cr_assert_eq(push_gop(e, &bad, &v, NULL, (vq_ctx){VQ_DEV_GPU, 1 % ngpus}, 0, "fault"), 0);
    atomic_store(&cpu_runs, 0);
    vq_task t = {.fn = count_run, .reads = &v, .nreads = 1, .writes = &u, .nwrites = 1};
    cr_assert_eq(vq_push(e, &t), 0);
    cr_assert_eq(vq_wait_var(e, u), VQ_EIO, "the CPU op did not fail on the event");
    cr_assert_eq(atomic_load(&cpu_runs), 0);
    cr_assert_eq(vq_wait_var(e, v), VQ_EIO, "vq_wait_var did not report the stream error");
    cr_assert_eq(vq_wait_all(e), VQ_EIO);
    vq_engine_free(e);
}

Test(engine_gpu, naive_engine_stream_error_fails_the_op)
{
    vq_engine *e = engine(VQ_ENGINE_NAIVE, 2, 0);
    vq_var *v = vq_var_new(e, "v");
    static struct vlog lv;
    struct gop bad = {.w = {&lv}, .nw = 1, .work_err = VQ_EIO};
    cr_assert_eq(push_gop(e, &bad, &v, NULL, (vq_ctx){VQ_DEV_GPU, 0}, 0, "fault"), 0);
    cr_assert_eq(vq_wait_var(e, v), VQ_EIO);
    vq_engine_free(e);
}

/* ---- waits include stream work ---- */

Test(engine_gpu, waits_include_stream_work)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2, 0);
    atomic_int done = 0;
    static struct vlog lv;
    vq_var *v = vq_var_new(e, "v");
    struct gop novars = {.sleep_us = 50000, .counter = &done};
    cr_assert_eq(push_gop(e, &novars, NULL, NULL, (vq_ctx){VQ_DEV_GPU, 1 % ngpus}, 0, "novars"), 0);
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert_eq(atomic_load(&done), 1, "vq_wait_all returned before the stream work");
    struct gop onvar = {.w = {&lv}, .nw = 1, .sleep_us = 50000, .counter = &done};
    cr_assert_eq(push_gop(e, &onvar, &v, NULL, (vq_ctx){VQ_DEV_GPU, 0}, VQ_PROP_COPY_TO_DEV,
                          "onvar"), 0);
    cr_assert_eq(vq_wait_var(e, v), 0);
    cr_assert_eq(atomic_load(&done), 2, "vq_wait_var returned before the stream work");
    vq_engine_free(e);
}

/* Pending stream work, vars freed behind it, and the engine freed at once:
 * every work runs, nothing leaks. */
Test(engine_gpu, free_with_pending_stream_work)
{
    enum { N = 40 };
    atomic_int done = 0;
    static struct gop ops[N];
    static struct vlog logs[N];
    vq_engine *e = engine(VQ_ENGINE_THREADED, 3, 0);
    for (int i = 0; i < N; i++) {
        vq_var *v = vq_var_new(e, "v");
        logs[i].n = 0;
        ops[i] = (struct gop){.w = {&logs[i]}, .nw = 1, .sleep_us = 2000, .counter = &done};
        cr_assert_eq(push_gop(e, &ops[i], &v, NULL, (vq_ctx){VQ_DEV_GPU, i % 2 % ngpus}, 0, "p"),
                     0);
        if (i % 2)
            cr_assert_eq(vq_var_free(e, v), 0);
    }
    vq_engine_free(e);
    cr_assert_eq(atomic_load(&done), N);
}

/* ---- prebuilt GPU ops ---- */

static int bump_work(void *arg)
{
    (*(int *)arg)++;
    return 0;
}

static int gpu_bump(void *arg, const vq_exec_ctx *x)
{
    return vq_gpu_launch_host(x, bump_work, arg);
}

Test(engine_gpu, prebuilt_gpu_op_pushed_many_times)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 4, 0);
    vq_var *v = vq_var_new(e, "v");
    int count = 0;
    vq_task t = {.fn = gpu_bump, .arg = &count, .ctx = {VQ_DEV_GPU, 1 % ngpus}, .writes = &v,
                 .nwrites = 1, .name = "bump"};
    vq_opr *op = vq_opr_new(e, &t);
    cr_assert_not_null(op, "%s", vq_errmsg());
    for (int i = 0; i < 500; i++)
        cr_assert_eq(vq_push_opr(e, op), 0);
    vq_opr_free(e, op);
    cr_assert_eq(vq_wait_var(e, v), 0);
    cr_assert_eq(count, 500);
    vq_engine_free(e);
}

/* ---- refusals ---- */

static void async_noop(void *arg, const vq_exec_ctx *x, vq_done *d)
{
    (void)arg;
    (void)x;
    vq_done_finish(d, 0);
}

Test(engine_gpu, async_gpu_op_is_einval)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2, 0);
    vq_task t = {.async_fn = async_noop, .ctx = {VQ_DEV_GPU, 0}, .name = "async"};
    cr_assert_eq(vq_push(e, &t), VQ_EINVAL);
    cr_assert_not_null(strstr(vq_errmsg(), "sync"), "%s", vq_errmsg());
    cr_assert_null(vq_opr_new(e, &t));
    vq_engine_free(e);
}

Test(engine_gpu, bad_gpu_tasks_are_einval)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2, 0);
    vq_task t = {.fn = gpu_bump, .ctx = {VQ_DEV_GPU, 2}, .name = "dev2"};
    cr_assert_eq(vq_push(e, &t), VQ_EINVAL);
    cr_assert_not_null(strstr(vq_errmsg(), "GPU 2"), "%s", vq_errmsg());
    t.ctx.id = -1;
    cr_assert_eq(vq_push(e, &t), VQ_EINVAL);
    t.ctx.id = 0;
    t.props = VQ_PROP_COPY_TO_DEV | VQ_PROP_COPY_FROM_DEV;
    cr_assert_eq(vq_push(e, &t), VQ_EINVAL);
    t.props = VQ_PROP_CPU_PRIORITIZED;
    cr_assert_eq(vq_push(e, &t), VQ_EINVAL);
    vq_exec_ctx cpu = {.ctx = {VQ_DEV_CPU, 0}};
    cr_assert_eq(vq_gpu_launch_host(&cpu, bump_work, NULL), VQ_EINVAL);
    vq_engine_free(e);
}

/* Criterion runs each test in its own process: the environment change
 * stays here. */
Test(engine_gpu, no_backend_is_enosys_and_cpu_ops_run)
{
    unsetenv("VARQ_GPU_BACKEND");
    if (vq__stream_cuda())
        cr_skip_test("a CUDA GPU is present: there is a backend");
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2, 0);
    vq_var *v = vq_var_new(e, "v");
    atomic_store(&cpu_runs, 0);
    vq_task c = {.fn = count_run, .writes = &v, .nwrites = 1};
    cr_assert_eq(vq_push(e, &c), 0);
    vq_task g = {.fn = gpu_bump, .ctx = {VQ_DEV_GPU, 0}, .writes = &v, .nwrites = 1,
                 .name = "kernel"};
    cr_assert_eq(vq_push(e, &g), VQ_ENOSYS);
    const char *msg = vq_errmsg();
    cr_assert_not_null(strstr(msg, "kernel"), "%s", msg);
    cr_assert_not_null(strstr(msg, "VARQ_GPU_BACKEND=emulated"), "%s", msg);
    cr_assert_null(vq_opr_new(e, &g));
    cr_assert_eq(vq_push(e, &c), 0);
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert_eq(vq_wait_var(e, v), 0);
    cr_assert_eq(atomic_load(&cpu_runs), 2);
    vq_engine_free(e);
}

/* The GPU state starts with the first GPU push, in whatever call made it:
 * a failure there (here every allocation of the start in turn) names that
 * call, never vq_engine_new, which had succeeded long before. */
static void lazy_start_failures_name(bool prebuilt)
{
    const char *call = prebuilt ? "vq_opr_new:" : "vq_push:";
    bool pool_failed = false;
    int rc = VQ_ENOMEM;
    for (long n = 1; rc == VQ_ENOMEM && n < 200; n++) {
        vq_engine *e = engine(VQ_ENGINE_THREADED, 2, 0);
        vq_var *v = vq_var_new(e, "v");
        int count = 0;
        vq_task g = {.fn = gpu_bump, .arg = &count, .ctx = {VQ_DEV_GPU, 0}, .writes = &v,
                     .nwrites = 1, .name = "kernel"};
        vq_opr *o = NULL;
        vq__fault_arm(n);
        if (prebuilt)
            rc = (o = vq_opr_new(e, &g)) ? 0 : VQ_ENOMEM;
        else
            rc = vq_push(e, &g);
        vq__fault_arm(0);
        if (rc == VQ_ENOMEM && vq__fault_fired()) {
            const char *msg = vq_errmsg();
            cr_assert_eq(strncmp(msg, call, strlen(call)), 0, "failure %ld: %s", n, msg);
            cr_assert_null(strstr(msg, "vq_engine_new"), "failure %ld: %s", n, msg);
            pool_failed |= strstr(msg, "worker") || strstr(msg, "ready queue");
        } else {
            cr_assert_eq(rc, 0, "%s", vq_errmsg());
            rc = 0;
        }
        if (o)
            vq_opr_free(e, o);
        cr_assert_eq(vq_wait_all(e), 0);
        vq_engine_free(e);
    }
    cr_assert_eq(rc, 0, "the GPU start failed at 200 allocations in a row");
    cr_assert(pool_failed, "no injected failure reached the GPU workers' start");
}

Test(engine_gpu, a_failed_lazy_start_names_the_push_not_engine_new)
{
    lazy_start_failures_name(false);
    lazy_start_failures_name(true);
}

/* ---- random workloads with GPU ops ---- */

#ifdef VQ_TEST_ASAN
#define DEFAULT_OPS 10000
#else
#define DEFAULT_OPS 40000
#endif

static void random_gpu(int kind, int workers)
{
    uint64_t seed = workload_seed();
    int nops = workload_ops(DEFAULT_OPS);
    char msg[256];
    long ran = 0;
    /* As test_engine_random.c: a seed that poisons most of its workload is
     * checked, then followed by the next ones until one runs most ops. */
    for (int k = 0; k < 8 && ran <= nops / 2; k++, seed++) {
        int rc = workload_check(kind, workers, WORKLOAD_GPU, seed, nops, &ran, msg, sizeof msg);
        cr_assert_eq(rc, 0, "%s", msg);
    }
    cr_assert_gt(ran, nops / 2, "8 seeds from %llu: at most %ld of %d ops ran",
                 (unsigned long long)(seed - 8), ran, nops);
}

Test(engine_gpu, random_threaded_1_worker_matches_serial, .timeout = 300)
{
    random_gpu(VQ_ENGINE_THREADED, 1);
}

Test(engine_gpu, random_threaded_4_workers_match_serial, .timeout = 300)
{
    random_gpu(VQ_ENGINE_THREADED, 4);
}

Test(engine_gpu, random_naive_matches_serial, .timeout = 300)
{
    random_gpu(VQ_ENGINE_NAIVE, 1);
}
