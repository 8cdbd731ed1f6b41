/* The stream backends (engine/surface/stream.h): stream order, events across
 * streams and devices, query and synchronize, sticky errors, stream-ordered
 * memory and clean shutdown, on the host-emulated backend; the same
 * backend-neutral checks on CUDA where a GPU is present (skipped, with a
 * message, where not); the CUDA backend's clean refusal without a GPU; and
 * the backend selector. */
#include <varq/varq.h>

#include "../engine/engine_internal.h"
#include "stream.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "leakcheck.h"

TestSuite(stream, .fini = leak_check);

typedef const struct vq__stream_backend backend;

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static backend *emul(int ndev)
{
    backend *b = vq__stream_emul(ndev);
    cr_assert(b, "%s", vq_errmsg());
    cr_assert_eq(b->device_count(), ndev);
    return b;
}

/* The CUDA backend, or a skipped test where there is none. */
static backend *cuda_or_skip(int min_devices)
{
    backend *b = vq__stream_cuda();
    if (!b) {
        cr_log_info("CUDA stream test skipped: %s", vq_errmsg());
        cr_skip_test("no CUDA GPU: %s", vq_errmsg());
    }
    if (b->device_count() < min_devices) {
        cr_log_info("CUDA stream test skipped: needs %d GPUs", min_devices);
        cr_skip_test("needs %d GPUs", min_devices);
    }
    return b;
}

static void *new_stream(backend *b, int dev)
{
    void *s = NULL;
    cr_assert_eq(b->stream_new(dev, &s), 0, "%s", vq_errmsg());
    return s;
}

static void *new_event(backend *b, int dev)
{
    void *ev = NULL;
    cr_assert_eq(b->event_new(dev, &ev), 0, "%s", vq_errmsg());
    return ev;
}

/* ---- host functions used below ---- */

/* An append-only log of integers (appenders are ordered by the streams). */
#define LOG_MAX 4096
struct log {
    atomic_int n;
    int v[LOG_MAX];
};

struct entry {
    struct log *log;
    int value;
};

static int append(void *arg)
{
    struct entry *e = arg;
    int i = atomic_fetch_add(&e->log->n, 1);
    if (i < LOG_MAX)
        e->log->v[i] = e->value;
    return 0;
}

/* A gate a host function waits behind, opened by the test. */
struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open;
};

static void gate_init(struct gate *g)
{
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->open = 0;
}

static void gate_open(struct gate *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static void gate_destroy(struct gate *g)
{
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}

static int wait_gate(void *arg)
{
    struct gate *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->open)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    return 0;
}

static int slow_set(void *arg)
{
    sleep_ms(50);
    atomic_store((atomic_int *)arg, 1);
    return 0;
}

struct observe {
    atomic_int *flag;
    atomic_int seen;
};

static int observe(void *arg)
{
    struct observe *o = arg;
    atomic_store(&o->seen, atomic_load(o->flag) + 1); /* 1: not set, 2: set */
    return 0;
}

static int count(void *arg)
{
    atomic_fetch_add((atomic_int *)arg, 1);
    return 0;
}

static int sleep_count(void *arg)
{
    sleep_ms(1);
    atomic_fetch_add((atomic_int *)arg, 1);
    return 0;
}

static int fail_boom(void *arg)
{
    (void)arg;
    return vq__fail(VQ_EIO, "kernel boom %d", 7);
}

/* ---- backend-neutral checks ---- */

static void check_in_order(backend *b)
{
    enum { N = 1000 };
    void *s = new_stream(b, 0);
    static struct log log;
    static struct entry e[N];
    atomic_store(&log.n, 0);
    for (int i = 0; i < N; i++) {
        e[i] = (struct entry){&log, i};
        cr_assert_eq(b->launch_host(s, append, &e[i]), 0, "%s", vq_errmsg());
    }
    cr_assert_eq(b->stream_synchronize(s), 0, "%s", vq_errmsg());
    cr_assert_eq(atomic_load(&log.n), N);
    for (int i = 0; i < N; i++)
        cr_assert_eq(log.v[i], i, "host fn %d ran at position %d", log.v[i], i);
    b->stream_free(s);
}

static void check_cross_stream(backend *b)
{
    void *sa = new_stream(b, 0), *sb = new_stream(b, 0);
    void *ev = new_event(b, 0);
    atomic_int flag = 0;
    struct observe o = {&flag, 0};
    cr_assert_eq(b->launch_host(sa, slow_set, &flag), 0);
    cr_assert_eq(b->event_record(ev, sa), 0);
    cr_assert_eq(b->stream_wait_event(sb, ev), 0);
    cr_assert_eq(b->launch_host(sb, observe, &o), 0);
    cr_assert_eq(b->stream_synchronize(sb), 0, "%s", vq_errmsg());
    cr_assert_eq(atomic_load(&o.seen), 2, "stream B ran before A's event");
    cr_assert_eq(b->event_query(ev), 0);
    b->event_free(ev);
    b->stream_free(sa);
    b->stream_free(sb);
}

static void check_query(backend *b)
{
    void *s = new_stream(b, 0);
    void *ev = new_event(b, 0);
    struct gate g;
    gate_init(&g);
    cr_assert_eq(b->launch_host(s, wait_gate, &g), 0);
    cr_assert_eq(b->event_record(ev, s), 0);
    cr_assert_eq(b->event_query(ev), VQ_EBUSY);
    sleep_ms(20);
    cr_assert_eq(b->event_query(ev), VQ_EBUSY);
    gate_open(&g);
    cr_assert_eq(b->event_synchronize(ev), 0, "%s", vq_errmsg());
    cr_assert_eq(b->event_query(ev), 0);
    /* recorded again behind nothing: done at once, or very soon */
    cr_assert_eq(b->event_record(ev, s), 0);
    cr_assert_eq(b->event_synchronize(ev), 0);
    b->event_free(ev);
    b->stream_free(s);
    gate_destroy(&g);
}

static void check_event_synchronize_blocks(backend *b)
{
    void *s = new_stream(b, 0);
    void *ev = new_event(b, 0);
    atomic_int flag = 0;
    double t0 = now_ms();
    cr_assert_eq(b->launch_host(s, slow_set, &flag), 0);
    cr_assert_eq(b->event_record(ev, s), 0);
    cr_assert_eq(b->event_synchronize(ev), 0, "%s", vq_errmsg());
    cr_assert_eq(atomic_load(&flag), 1, "event_synchronize returned before the work");
    cr_assert_geq(now_ms() - t0, 45.0);
    b->event_free(ev);
    b->stream_free(s);
}

static void check_never_recorded(backend *b)
{
    void *s = new_stream(b, 0);
    void *ev = new_event(b, 0);
    atomic_int n = 0;
    cr_assert_eq(b->event_query(ev), 0);
    cr_assert_eq(b->event_synchronize(ev), 0);
    cr_assert_eq(b->stream_wait_event(s, ev), 0);
    cr_assert_eq(b->launch_host(s, count, &n), 0);
    cr_assert_eq(b->stream_synchronize(s), 0);
    cr_assert_eq(atomic_load(&n), 1);
    b->event_free(ev);
    b->stream_free(s);
}

/* A wait captures the record current at the call: re-recording the event on
 * another stream, which completes at once, does not release it. */
static void check_wait_captures_record(backend *b)
{
    void *sa = new_stream(b, 0), *sb = new_stream(b, 0), *sc = new_stream(b, 0);
    void *ev = new_event(b, 0);
    struct gate g;
    gate_init(&g);
    atomic_int n = 0;
    cr_assert_eq(b->launch_host(sa, wait_gate, &g), 0);
    cr_assert_eq(b->event_record(ev, sa), 0);
    cr_assert_eq(b->stream_wait_event(sb, ev), 0);
    cr_assert_eq(b->launch_host(sb, count, &n), 0);
    cr_assert_eq(b->event_record(ev, sc), 0);
    cr_assert_eq(b->event_synchronize(ev), 0); /* the record on C */
    sleep_ms(30);
    cr_assert_eq(atomic_load(&n), 0, "B's wait was released by a later record");
    gate_open(&g);
    cr_assert_eq(b->stream_synchronize(sb), 0);
    cr_assert_eq(atomic_load(&n), 1);
    b->event_free(ev);
    b->stream_free(sa);
    b->stream_free(sb);
    b->stream_free(sc);
    gate_destroy(&g);
}

/* 4 streams on each of ndev devices: one chain of steps hopping across all
 * of them through events (events of each device reused round-robin), and an
 * independent sequence on every stream. */
static void check_chains(backend *b, int ndev)
{
    enum { PER_DEV = 4, STEPS = 600, EV_PER_DEV = 3, PER_STREAM = 100, MAXS = 4 * 8 };
    int ns = PER_DEV * ndev;
    void *s[MAXS], *evs[8][EV_PER_DEV];
    for (int i = 0; i < ns; i++)
        s[i] = new_stream(b, i / PER_DEV);
    for (int d = 0; d < ndev; d++)
        for (int j = 0; j < EV_PER_DEV; j++)
            evs[d][j] = new_event(b, d);
    static struct log chain, own[MAXS];
    static struct entry ce[STEPS], oe[MAXS][PER_STREAM];
    atomic_store(&chain.n, 0);
    void *prev = NULL;
    for (int i = 0; i < STEPS; i++) {
        int si = (i * 7 + i / 5) % ns, dev = si / PER_DEV;
        if (prev)
            cr_assert_eq(b->stream_wait_event(s[si], prev), 0, "%s", vq_errmsg());
        ce[i] = (struct entry){&chain, i};
        cr_assert_eq(b->launch_host(s[si], append, &ce[i]), 0);
        prev = evs[dev][i % EV_PER_DEV];
        cr_assert_eq(b->event_record(prev, s[si]), 0, "%s", vq_errmsg());
    }
    for (int si = 0; si < ns; si++) {
        atomic_store(&own[si].n, 0);
        for (int k = 0; k < PER_STREAM; k++) {
            oe[si][k] = (struct entry){&own[si], k};
            cr_assert_eq(b->launch_host(s[si], append, &oe[si][k]), 0);
        }
    }
    for (int i = 0; i < ns; i++)
        cr_assert_eq(b->stream_synchronize(s[i]), 0, "%s", vq_errmsg());
    cr_assert_eq(atomic_load(&chain.n), STEPS);
    for (int i = 0; i < STEPS; i++)
        cr_assert_eq(chain.v[i], i, "chain step %d ran at position %d", chain.v[i], i);
    for (int si = 0; si < ns; si++) {
        cr_assert_eq(atomic_load(&own[si].n), PER_STREAM);
        for (int k = 0; k < PER_STREAM; k++)
            cr_assert_eq(own[si].v[k], k);
    }
    for (int d = 0; d < ndev; d++)
        for (int j = 0; j < EV_PER_DEV; j++)
            b->event_free(evs[d][j]);
    for (int i = 0; i < ns; i++)
        b->stream_free(s[i]);
}

/* A failing host fn: the error and its message surface on query and
 * synchronize of later records, and on the stream; work after it still runs;
 * another stream is unaffected. */
static void check_sticky_error(backend *b)
{
    void *s = new_stream(b, 0), *other = new_stream(b, 0);
    void *ev1 = new_event(b, 0), *ev2 = new_event(b, 0);
    atomic_int n = 0;
    cr_assert_eq(b->launch_host(s, fail_boom, NULL), 0);
    cr_assert_eq(b->event_record(ev1, s), 0);
    cr_assert_eq(b->launch_host(s, count, &n), 0);
    cr_assert_eq(b->event_record(ev2, s), 0);
    cr_assert_eq(b->event_synchronize(ev1), VQ_EIO);
    cr_assert(strstr(vq_errmsg(), "kernel boom 7"), "message: %s", vq_errmsg());
    cr_assert_eq(b->event_query(ev1), VQ_EIO);
    cr_assert_eq(b->event_synchronize(ev2), VQ_EIO);
    cr_assert_eq(b->stream_synchronize(s), VQ_EIO);
    cr_assert(strstr(vq_errmsg(), "kernel boom 7"), "message: %s", vq_errmsg());
    cr_assert_eq(b->stream_synchronize(s), VQ_EIO, "the error is sticky");
    cr_assert_eq(atomic_load(&n), 1, "work after the failure still runs");
    cr_assert_eq(b->launch_host(other, count, &n), 0);
    cr_assert_eq(b->stream_synchronize(other), 0);
    b->event_free(ev1);
    b->event_free(ev2);
    b->stream_free(s);
    b->stream_free(other);
}

struct check_dst {
    const unsigned char *dst;
    size_t n;
    atomic_int ok;
};

static int check_pattern(void *arg)
{
    struct check_dst *c = arg;
    int ok = 1;
    for (size_t i = 0; i < c->n; i++)
        ok &= c->dst[i] == (unsigned char)(i * 31 + 7);
    atomic_store(&c->ok, ok ? 1 : -1);
    return 0;
}

/* Pinned -> device -> device -> pinned, frees in between, all in stream
 * order; a host fn in stream order sees the result. */
static void check_memory(backend *b)
{
    enum { N = 1 << 16 };
    void *s = new_stream(b, 0);
    unsigned char *src = b->host_alloc_pinned(N), *dst = b->host_alloc_pinned(N);
    cr_assert(src && dst, "%s", vq_errmsg());
    cr_assert_eq((uintptr_t)src % 64, 0);
    for (size_t i = 0; i < N; i++)
        src[i] = (unsigned char)(i * 31 + 7);
    memset(dst, 0, N);
    void *a = b->malloc_async(N, s), *c = b->malloc_async(N, s);
    cr_assert(a && c, "%s", vq_errmsg());
    cr_assert_eq((uintptr_t)a % 64, 0);
    cr_assert_eq((uintptr_t)c % 64, 0);
    cr_assert_eq(b->memcpy_async(a, src, N, VQ__MEMCPY_H2D, s), 0, "%s", vq_errmsg());
    cr_assert_eq(b->memcpy_async(c, a, N, VQ__MEMCPY_D2D, s), 0, "%s", vq_errmsg());
    b->free_async(a, s);
    cr_assert_eq(b->memcpy_async(dst, c, N, VQ__MEMCPY_D2H, s), 0, "%s", vq_errmsg());
    b->free_async(c, s);
    struct check_dst chk = {dst, N, 0};
    cr_assert_eq(b->launch_host(s, check_pattern, &chk), 0);
    cr_assert_eq(b->stream_synchronize(s), 0, "%s", vq_errmsg());
    cr_assert_eq(atomic_load(&chk.ok), 1, "the copies did not arrive in order");
    cr_assert_eq(b->memcpy_async(dst, src, N, 99, s), VQ_EINVAL);
    b->host_free_pinned(src);
    b->host_free_pinned(dst);
    b->stream_free(s);
}

/* stream_free with queued work runs it all first; events recorded on the
 * stream outlive it; an event freed with a record pending is released
 * after the record. */
static void check_free_pending(backend *b)
{
    void *s = new_stream(b, 0), *s2 = new_stream(b, 0);
    void *ev = new_event(b, 0), *ev2 = new_event(b, 0);
    atomic_int n = 0;
    for (int i = 0; i < 50; i++)
        cr_assert_eq(b->launch_host(s, sleep_count, &n), 0);
    void *p = b->malloc_async(1000, s);
    cr_assert(p);
    b->free_async(p, s);
    cr_assert_eq(b->event_record(ev, s), 0);
    b->stream_free(s);
    cr_assert_eq(atomic_load(&n), 50);
    cr_assert_eq(b->event_query(ev), 0);
    b->event_free(ev);

    struct gate g;
    gate_init(&g);
    cr_assert_eq(b->launch_host(s2, wait_gate, &g), 0);
    cr_assert_eq(b->event_record(ev2, s2), 0);
    b->event_free(ev2);
    gate_open(&g);
    cr_assert_eq(b->stream_synchronize(s2), 0);
    b->stream_free(s2);
    gate_destroy(&g);
}

/* ---- the emulated backend ---- */

Test(stream, emul_in_order) { check_in_order(emul(1)); }
Test(stream, emul_cross_stream_event) { check_cross_stream(emul(1)); }
Test(stream, emul_query_pending_then_done) { check_query(emul(1)); }
Test(stream, emul_event_synchronize_blocks) { check_event_synchronize_blocks(emul(1)); }
Test(stream, emul_never_recorded_is_complete) { check_never_recorded(emul(1)); }
Test(stream, emul_wait_captures_record) { check_wait_captures_record(emul(1)); }
Test(stream, emul_chains_4_streams_1_device) { check_chains(emul(1), 1); }
Test(stream, emul_chains_4_streams_2_devices) { check_chains(emul(2), 2); }
Test(stream, emul_sticky_error) { check_sticky_error(emul(1)); }
Test(stream, emul_memory_in_order) { check_memory(emul(1)); }
Test(stream, emul_free_with_pending_work) { check_free_pending(emul(1)); }

/* Emulated only: the error is exact in stream order (a record before the
 * failure is clean) and follows a wait to another stream. */
Test(stream, emul_error_position_and_propagation)
{
    backend *b = emul(2);
    void *a = new_stream(b, 0), *bs = new_stream(b, 1);
    void *ev0 = new_event(b, 0), *ev1 = new_event(b, 0), *ev3 = new_event(b, 1);
    atomic_int n = 0;
    cr_assert_eq(b->launch_host(a, count, &n), 0);
    cr_assert_eq(b->event_record(ev0, a), 0);
    cr_assert_eq(b->launch_host(a, fail_boom, NULL), 0);
    cr_assert_eq(b->event_record(ev1, a), 0);
    cr_assert_eq(b->stream_wait_event(bs, ev1), 0);
    cr_assert_eq(b->launch_host(bs, count, &n), 0);
    cr_assert_eq(b->event_record(ev3, bs), 0);
    cr_assert_eq(b->event_synchronize(ev3), VQ_EIO);
    cr_assert(strstr(vq_errmsg(), "kernel boom 7"), "message: %s", vq_errmsg());
    cr_assert_eq(b->event_synchronize(ev0), 0, "a record before the failure is clean");
    cr_assert_eq(b->stream_synchronize(bs), VQ_EIO);
    cr_assert_eq(atomic_load(&n), 2);
    /* waiting on a completed failed event still passes the error on */
    void *c = new_stream(b, 0);
    cr_assert_eq(b->stream_wait_event(c, ev1), 0);
    cr_assert_eq(b->stream_synchronize(c), VQ_EIO);
    b->event_free(ev0);
    b->event_free(ev1);
    b->event_free(ev3);
    b->stream_free(a);
    b->stream_free(bs);
    b->stream_free(c);
}

/* Emulated only: host memory stands for device memory, so a host fn may
 * read it; free_async must wait for the slow reader queued before it. */
static int slow_read(void *arg)
{
    sleep_ms(30);
    volatile unsigned char *p = arg;
    return p[0] == 0xAB && p[4095] == 0xAB ? 0 : vq__fail(VQ_EIO, "bad data");
}

Test(stream, emul_free_async_after_readers)
{
    backend *b = emul(1);
    void *s = new_stream(b, 0);
    unsigned char *p = b->malloc_async(4096, s);
    cr_assert(p);
    memset(p, 0xAB, 4096);
    cr_assert_eq(b->launch_host(s, slow_read, p), 0);
    b->free_async(p, s);
    cr_assert_eq(b->stream_synchronize(s), 0, "%s", vq_errmsg());
    b->stream_free(s);
}

Test(stream, emul_pinned_host_alloc)
{
    backend *b = emul(1);
    unsigned char *p = b->host_alloc_pinned(1000);
    cr_assert(p);
    cr_assert_eq((uintptr_t)p % 64, 0);
    memset(p, 1, 1000);
    b->host_free_pinned(p);
    b->host_free_pinned(NULL);
}

struct reenter {
    backend *b;
    void *s;
    atomic_int got;
};

static int sync_inside(void *arg)
{
    struct reenter *r = arg;
    atomic_store(&r->got, r->b->stream_synchronize(r->s));
    return 0;
}

Test(stream, emul_bad_arguments)
{
    backend *b = emul(2);
    void *x = (void *)1;
    cr_assert_eq(b->stream_new(2, &x), VQ_EINVAL);
    cr_assert_null(x);
    cr_assert(strstr(vq_errmsg(), "device 2"), "%s", vq_errmsg());
    cr_assert_eq(b->event_new(-1, &x), VQ_EINVAL);
    cr_assert_null(vq__stream_emul(0));
    cr_assert_null(vq__stream_emul(VQ__STREAM_EMUL_MAX_DEVICES + 1));
    void *s1 = new_stream(b, 1), *ev0 = new_event(b, 0);
    cr_assert_eq(b->event_record(ev0, s1), VQ_EINVAL, "an event records only on its device");
    cr_assert_eq(b->launch_host(s1, NULL, NULL), VQ_EINVAL);
    /* a host fn that synchronizes would wait for itself */
    struct reenter r = {b, s1, 0};
    cr_assert_eq(b->launch_host(s1, sync_inside, &r), 0);
    cr_assert_eq(b->stream_synchronize(s1), 0);
    cr_assert_eq(atomic_load(&r.got), VQ_EDEADLK);
    b->event_free(ev0);
    b->stream_free(s1);
}

/* The native handle of a stream (what a GPU op gets in x->stream) is not
 * the backend's stream object: every entry point refuses it, as CUDA's
 * backend would misread a cudaStream_t (the fault the first run on an H200
 * found: kernels' scratch buffers allocated on the native handle). */
static int nothing(void *arg)
{
    (void)arg;
    return 0;
}

Test(stream, emul_native_handle_is_not_a_stream)
{
    backend *b = emul(1);
    void *s = new_stream(b, 0), *ev = new_event(b, 0);
    void *native = b->stream_native(s);
    cr_assert_neq(native, s);
    cr_assert_null(b->malloc_async(64, native));
    cr_assert(strstr(vq_errmsg(), "native stream handle"), "%s", vq_errmsg());
    cr_assert_eq(b->launch_host(native, nothing, NULL), VQ_EINVAL);
    cr_assert_eq(b->event_record(ev, native), VQ_EINVAL);
    cr_assert_eq(b->stream_wait_event(native, ev), VQ_EINVAL);
    cr_assert_eq(b->stream_synchronize(native), VQ_EINVAL);
    char byte = 0, dst;
    cr_assert_eq(b->memcpy_async(&dst, &byte, 1, VQ__MEMCPY_H2H, native), VQ_EINVAL);
    /* the stream itself works */
    void *p = b->malloc_async(64, s);
    cr_assert_not_null(p, "%s", vq_errmsg());
    b->free_async(p, s);
    cr_assert_eq(b->stream_synchronize(s), 0);
    b->event_free(ev);
    b->stream_free(s);
}

/* Many tasks queued at once (the queue grows) on streams freed right away. */
Test(stream, emul_queue_growth)
{
    backend *b = emul(1);
    void *s = new_stream(b, 0);
    struct gate g;
    gate_init(&g);
    atomic_int n = 0;
    cr_assert_eq(b->launch_host(s, wait_gate, &g), 0);
    for (int i = 0; i < 10000; i++)
        cr_assert_eq(b->launch_host(s, count, &n), 0);
    gate_open(&g);
    b->stream_free(s);
    cr_assert_eq(atomic_load(&n), 10000);
    gate_destroy(&g);
}

/* ---- CUDA ---- */

Test(stream, cuda_availability)
{
    backend *b = vq__stream_cuda();
#ifdef VARQ_HAVE_CUDA
    if (!b) {
        cr_log_info("CUDA backend built; no GPU here: %s", vq_errmsg());
        cr_assert(strstr(vq_errmsg(), "no usable GPU device"), "%s", vq_errmsg());
        return;
    }
    cr_assert_str_eq(b->name, "cuda");
    cr_assert_gt(b->device_count(), 0);
#else
    cr_assert_null(b);
    cr_assert(strstr(vq_errmsg(), "built without CUDA"), "%s", vq_errmsg());
    cr_log_info("CUDA backend not built: %s", vq_errmsg());
#endif
}

Test(stream, cuda_in_order) { check_in_order(cuda_or_skip(1)); }
Test(stream, cuda_cross_stream_event) { check_cross_stream(cuda_or_skip(1)); }
Test(stream, cuda_query_pending_then_done) { check_query(cuda_or_skip(1)); }
Test(stream, cuda_event_synchronize_blocks) { check_event_synchronize_blocks(cuda_or_skip(1)); }
Test(stream, cuda_never_recorded_is_complete) { check_never_recorded(cuda_or_skip(1)); }
Test(stream, cuda_wait_captures_record) { check_wait_captures_record(cuda_or_skip(1)); }
Test(stream, cuda_chains_4_streams_1_device) { check_chains(cuda_or_skip(1), 1); }
Test(stream, cuda_chains_4_streams_2_devices) { check_chains(cuda_or_skip(2), 2); }
Test(stream, cuda_sticky_error) { check_sticky_error(cuda_or_skip(1)); }
Test(stream, cuda_memory_in_order) { check_memory(cuda_or_skip(1)); }
Test(stream, cuda_free_with_pending_work) { check_free_pending(cuda_or_skip(1)); }

/* ---- the selector ---- */

Test(stream, selector_env)
{
    backend *b = NULL;
    setenv("VARQ_GPU_BACKEND", "emulated", 1);
    unsetenv("VARQ_GPU_EMUL_DEVICES");
    cr_assert_eq(vq__stream_backend_get(NULL, &b), 0, "%s", vq_errmsg());
    cr_assert_str_eq(b->name, "emulated");
    cr_assert_eq(b->device_count(), 1);
    setenv("VARQ_GPU_EMUL_DEVICES", "2", 1);
    cr_assert_eq(vq__stream_backend_get(NULL, &b), 0);
    cr_assert_eq(b->device_count(), 2);
    setenv("VARQ_GPU_EMUL_DEVICES", "99", 1);
    cr_assert_eq(vq__stream_backend_get(NULL, &b), VQ_EINVAL);
    cr_assert_null(b);
    setenv("VARQ_GPU_BACKEND", "opencl", 1);
    cr_assert_eq(vq__stream_backend_get(NULL, &b), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "opencl"), "%s", vq_errmsg());
    unsetenv("VARQ_GPU_EMUL_DEVICES");
    cr_assert_eq(vq__stream_backend_get("emulated", &b), 0, "an explicit name wins over the env");
    cr_assert_eq(b->device_count(), 1, "%d", b->device_count());
}

Test(stream, selector_default)
{
    backend *b = NULL;
    unsetenv("VARQ_GPU_BACKEND");
    bool gpu = vq__stream_cuda() != NULL;
    int err = vq__stream_backend_get(NULL, &b);
    if (gpu) {
        cr_assert_eq(err, 0);
        cr_assert_str_eq(b->name, "cuda");
    } else {
        /* without a GPU, a GPU request fails clearly; never emulated silently */
        cr_assert_eq(err, VQ_ENOSYS);
        cr_assert_null(b);
        cr_assert(strstr(vq_errmsg(), "VARQ_GPU_BACKEND=emulated"), "%s", vq_errmsg());
        cr_assert(strstr(vq_errmsg(), "device"), "%s", vq_errmsg());
        cr_assert_eq(vq__stream_backend_get("cuda", &b), VQ_ENOSYS);
        cr_assert_null(b);
    }
}
