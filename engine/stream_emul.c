/* The host-emulated stream backend (stream.h); stream.c picks it when
 * VARQ_GPU_BACKEND=emulated.
 *
 * Each stream is a thread that runs a FIFO of tasks in order: host
 * functions, event records, waits for events, copies and frees. An event is
 * a set of counters under a mutex: `recorded` numbers the records issued by
 * the host (generations 1, 2, ...), and the generations completed are all
 * those up to `done_base` plus the bits of `done_mask` (records of one event
 * on different streams may complete out of order). Waiting for record g
 * means sleeping on the event's condition variable until g is done; so, as
 * with cudaStreamWaitEvent, re-recording the event elsewhere does not
 * release a wait for an earlier record.
 * "Device" memory is host memory. Nothing spins: idle stream threads and
 * synchronizing callers sleep on condition variables.
 *
 * The queue is a growable power-of-two ring of tasks stored by value, so
 * enqueueing allocates only when the ring grows. */
#include "engine_internal.h"
#include "stream.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERRMSG_LEN 256
#define RING_INIT 64
#define ALIGN 64

struct emul_event {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu: */
    uint64_t recorded;  /* records issued */
    uint64_t done_base; /* records 1 .. done_base have completed */
    uint64_t done_mask; /* bit i: record done_base + 1 + i has completed */
    uint64_t max_done;  /* the highest record completed */
    int err;            /* the recording stream's sticky error at record max_done */
    int device;
    atomic_int refs; /* the owner's, plus one per queued record or wait */
    char errmsg[ERRMSG_LEN];
};

enum { T_HOST, T_RECORD, T_WAIT, T_COPY, T_FREE };

struct emul_task {
    int kind;
    union {
        struct {
            int (*fn)(void *);
            void *arg;
        } host;
        struct {
            struct emul_event *ev;
            uint64_t gen;
        } ev;
        struct {
            void *dst;
            const void *src;
            size_t n;
        } copy;
        void *ptr;
    } u;
};

struct emul_stream {
    /* STREAM_MAGIC while the stream lives, first: every entry point checks
     * it, so a caller that passes stream_native's handle where the
     * backend's stream is wanted fails here as it would (worse) on CUDA. */
    uint32_t magic;
    pthread_mutex_t mu;
    pthread_cond_t work; /* the stream thread sleeps here: no task, no stop */
    pthread_cond_t idle; /* synchronizers sleep here: done advanced */
    struct emul_task *ring;
    size_t cap, head, count; /* under mu */
    uint64_t enqueued, done; /* tasks ever queued / run (under mu) */
    int sync_waiters;        /* under mu */
    bool stop;               /* under mu */
    /* Sticky error: written by the stream thread under mu, so the thread
     * reads it without the lock. */
    int err;
    char errmsg[ERRMSG_LEN];
    int device;
    pthread_t thread;
    /* What stream_native hands out: a distinct address, as a cudaStream_t
     * is distinct from the CUDA backend's stream object. It holds
     * NATIVE_TAG, so that reading a magic through it (the first field of
     * a stream) stays inside the object and finds no STREAM_MAGIC. */
    uint32_t native;
};

#define STREAM_MAGIC 0x5eaf10e5u
#define NATIVE_TAG 0x4e41u

/* sp as the emulated stream it must be; NULL (with the error) when it is
 * NULL or not one of this backend's streams (a native handle). */
static struct emul_stream *stream_of(void *sp, const char *what)
{
    struct emul_stream *s = sp;
    if (!s)
        vq__fail(VQ_EINVAL, "%s: NULL stream", what);
    else if (s->magic != STREAM_MAGIC)
        vq__fail(VQ_EINVAL, "%s: not a stream of the emulated backend (a native stream handle?)",
                 what);
    else
        return s;
    return NULL;
}

/* The stream whose thread this is (NULL outside stream threads). */
static _Thread_local struct emul_stream *self;

/* ---- events ---- */

static void event_unref(struct emul_event *ev)
{
    /* acq_rel: the last holder sees every other holder's writes */
    if (atomic_fetch_sub_explicit(&ev->refs, 1, memory_order_acq_rel) != 1)
        return;
    pthread_cond_destroy(&ev->cv);
    pthread_mutex_destroy(&ev->mu);
    free(ev);
}

/* Whether record gen of ev has completed (0: never recorded, done). Under
 * ev->mu. */
static bool event_done(const struct emul_event *ev, uint64_t gen)
{
    if (gen <= ev->done_base)
        return true;
    uint64_t i = gen - ev->done_base - 1;
    return i < 64 && (ev->done_mask >> i & 1);
}

/* Record gen of ev reached its stream, whose sticky error is err. */
static void event_complete(struct emul_event *ev, uint64_t gen, int err, const char *msg)
{
    pthread_mutex_lock(&ev->mu);
    /* More than 64 records of one event pending out of order: wait for the
     * earliest ones (never seen in practice; no spinning either way). */
    while (gen - ev->done_base > 64)
        pthread_cond_wait(&ev->cv, &ev->mu);
    ev->done_mask |= UINT64_C(1) << (gen - ev->done_base - 1);
    while (ev->done_mask & 1) {
        ev->done_mask >>= 1;
        ev->done_base++;
    }
    if (gen > ev->max_done) {
        ev->max_done = gen;
        ev->err = err;
        if (err)
            snprintf(ev->errmsg, ERRMSG_LEN, "%s", msg);
    }
    pthread_cond_broadcast(&ev->cv);
    pthread_mutex_unlock(&ev->mu);
}

/* The event's result once complete: 0 or its error, with its message set in
 * the calling thread. Called with ev->mu held; releases it. */
static int event_result_unlock(struct emul_event *ev)
{
    int err = ev->err;
    if (!err) {
        pthread_mutex_unlock(&ev->mu);
        return 0;
    }
    char msg[ERRMSG_LEN];
    snprintf(msg, ERRMSG_LEN, "%s", ev->errmsg);
    pthread_mutex_unlock(&ev->mu);
    return vq__fail(err, "%s", msg);
}

static int emul_event_new(int ndev, int device, void **out)
{
    *out = NULL;
    if (device < 0 || device >= ndev)
        return vq__fail(VQ_EINVAL, "event_new: no emulated device %d (%d devices)", device, ndev);
    struct emul_event *ev = vq__calloc(1, sizeof *ev);
    if (!ev)
        return vq__fail(VQ_ENOMEM, "event_new: out of memory");
    if (pthread_mutex_init(&ev->mu, NULL)) {
        free(ev);
        return vq__fail(VQ_ENOMEM, "event_new: pthread_mutex_init failed");
    }
    if (pthread_cond_init(&ev->cv, NULL)) {
        pthread_mutex_destroy(&ev->mu);
        free(ev);
        return vq__fail(VQ_ENOMEM, "event_new: pthread_cond_init failed");
    }
    ev->device = device;
    atomic_init(&ev->refs, 1);
    *out = ev;
    return 0;
}

static void emul_event_free(void *evp)
{
    if (evp)
        event_unref(evp);
}

static int emul_event_query(void *evp)
{
    struct emul_event *ev = evp;
    if (!ev)
        return vq__fail(VQ_EINVAL, "event_query: NULL event");
    pthread_mutex_lock(&ev->mu);
    if (!event_done(ev, ev->recorded)) {
        pthread_mutex_unlock(&ev->mu);
        return VQ_EBUSY;
    }
    return event_result_unlock(ev);
}

static int emul_event_synchronize(void *evp)
{
    struct emul_event *ev = evp;
    if (!ev)
        return vq__fail(VQ_EINVAL, "event_synchronize: NULL event");
    if (self)
        return vq__fail(VQ_EDEADLK, "event_synchronize: called from a host function of an emulated stream");
    pthread_mutex_lock(&ev->mu);
    uint64_t gen = ev->recorded;
    while (!event_done(ev, gen))
        pthread_cond_wait(&ev->cv, &ev->mu);
    return event_result_unlock(ev);
}

/* ---- streams ---- */

/* Runs one task on the stream thread; returns 0 or the error it raises,
 * with its message in msg. */
static int run_task(struct emul_stream *s, struct emul_task *t, char *msg)
{
    switch (t->kind) {
    case T_HOST: {
        int err = t->u.host.fn(t->u.host.arg);
        if (err)
            snprintf(msg, ERRMSG_LEN, "%s", vq_errmsg());
        return err;
    }
    case T_RECORD:
        /* s->err: only this thread writes it */
        event_complete(t->u.ev.ev, t->u.ev.gen, s->err, s->errmsg);
        event_unref(t->u.ev.ev);
        return 0;
    case T_WAIT: {
        struct emul_event *ev = t->u.ev.ev;
        pthread_mutex_lock(&ev->mu);
        while (!event_done(ev, t->u.ev.gen))
            pthread_cond_wait(&ev->cv, &ev->mu);
        int err = ev->err;
        if (err)
            snprintf(msg, ERRMSG_LEN, "%s", ev->errmsg);
        pthread_mutex_unlock(&ev->mu);
        event_unref(ev);
        return err; /* the error follows the dependency */
    }
    case T_COPY:
        memmove(t->u.copy.dst, t->u.copy.src, t->u.copy.n);
        return 0;
    case T_FREE:
        free(t->u.ptr);
        return 0;
    }
    return 0;
}

static void *stream_main(void *arg)
{
    struct emul_stream *s = arg;
    self = s;
    char msg[ERRMSG_LEN];
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->count == 0 && !s->stop)
            pthread_cond_wait(&s->work, &s->mu);
        if (s->count == 0)
            break; /* stopped and drained */
        struct emul_task t = s->ring[s->head];
        s->head = (s->head + 1) & (s->cap - 1);
        s->count--;
        pthread_mutex_unlock(&s->mu);

        int err = run_task(s, &t, msg);

        pthread_mutex_lock(&s->mu);
        if (err && !s->err) {
            snprintf(s->errmsg, ERRMSG_LEN, "%s", msg);
            s->err = err;
        }
        s->done++;
        if (s->sync_waiters)
            pthread_cond_broadcast(&s->idle);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static int enqueue(struct emul_stream *s, const struct emul_task *t, const char *what)
{
    pthread_mutex_lock(&s->mu);
    if (s->count == s->cap) {
        size_t cap = s->cap * 2;
        struct emul_task *ring = vq__malloc(cap * sizeof *ring);
        if (!ring) {
            pthread_mutex_unlock(&s->mu);
            return vq__fail(VQ_ENOMEM, "%s: out of memory growing the emulated stream's queue", what);
        }
        for (size_t i = 0; i < s->count; i++)
            ring[i] = s->ring[(s->head + i) & (s->cap - 1)];
        free(s->ring);
        s->ring = ring;
        s->cap = cap;
        s->head = 0;
    }
    s->ring[(s->head + s->count) & (s->cap - 1)] = *t;
    if (s->count++ == 0)
        pthread_cond_signal(&s->work); /* the thread sleeps only on an empty queue */
    s->enqueued++;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int emul_stream_new(int ndev, int device, void **out)
{
    *out = NULL;
    if (device < 0 || device >= ndev)
        return vq__fail(VQ_EINVAL, "stream_new: no emulated device %d (%d devices)", device, ndev);
    struct emul_stream *s = vq__calloc(1, sizeof *s);
    if (!s)
        return vq__fail(VQ_ENOMEM, "stream_new: out of memory");
    s->ring = vq__malloc(RING_INIT * sizeof *s->ring);
    s->cap = RING_INIT;
    s->device = device;
    s->magic = STREAM_MAGIC;
    s->native = NATIVE_TAG;
    int stage = 0;
    if (!s->ring)
        goto fail;
    if (pthread_mutex_init(&s->mu, NULL))
        goto fail;
    stage = 1;
    if (pthread_cond_init(&s->work, NULL))
        goto fail;
    stage = 2;
    if (pthread_cond_init(&s->idle, NULL))
        goto fail;
    stage = 3;
    if (pthread_create(&s->thread, NULL, stream_main, s))
        goto fail;
    *out = s;
    return 0;
fail:
    if (stage >= 3)
        pthread_cond_destroy(&s->idle);
    if (stage >= 2)
        pthread_cond_destroy(&s->work);
    if (stage >= 1)
        pthread_mutex_destroy(&s->mu);
    free(s->ring);
    free(s);
    return vq__fail(VQ_ENOMEM, "stream_new: cannot create the emulated stream's thread or queue");
}

static void emul_stream_free(void *sp)
{
    struct emul_stream *s = sp;
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL); /* the thread drains the queue first */
    s->magic = 0;                  /* its tasks may still have named it */
    pthread_cond_destroy(&s->idle);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->mu);
    free(s->ring);
    free(s);
}

static int emul_stream_synchronize(void *sp)
{
    struct emul_stream *s = stream_of(sp, "stream_synchronize");
    if (!s)
        return VQ_EINVAL;
    if (self)
        return vq__fail(VQ_EDEADLK, "stream_synchronize: called from a host function of an emulated stream");
    pthread_mutex_lock(&s->mu);
    uint64_t target = s->enqueued;
    s->sync_waiters++;
    while (s->done < target)
        pthread_cond_wait(&s->idle, &s->mu);
    s->sync_waiters--;
    int err = s->err;
    char msg[ERRMSG_LEN];
    if (err)
        snprintf(msg, ERRMSG_LEN, "%s", s->errmsg);
    pthread_mutex_unlock(&s->mu);
    return err ? vq__fail(err, "%s", msg) : 0;
}

static int emul_event_record(void *evp, void *sp)
{
    struct emul_event *ev = evp;
    if (!ev)
        return vq__fail(VQ_EINVAL, "event_record: NULL event");
    struct emul_stream *s = stream_of(sp, "event_record");
    if (!s)
        return VQ_EINVAL;
    if (ev->device != s->device)
        return vq__fail(VQ_EINVAL, "event_record: event of device %d recorded on a stream of device %d",
            ev->device, s->device);
    pthread_mutex_lock(&ev->mu);
    uint64_t gen = ++ev->recorded;
    pthread_mutex_unlock(&ev->mu);
    atomic_fetch_add_explicit(&ev->refs, 1, memory_order_relaxed);
    struct emul_task t = {.kind = T_RECORD, .u.ev = {ev, gen}};
    int err = enqueue(s, &t, "event_record");
    if (err) {
        /* the record cannot be pending forever: it completes, failed */
        event_complete(ev, gen, err, vq_errmsg());
        event_unref(ev);
    }
    return err;
}

static int emul_stream_wait_event(void *sp, void *evp)
{
    struct emul_event *ev = evp;
    if (!ev)
        return vq__fail(VQ_EINVAL, "stream_wait_event: NULL event");
    struct emul_stream *s = stream_of(sp, "stream_wait_event");
    if (!s)
        return VQ_EINVAL;
    pthread_mutex_lock(&ev->mu);
    uint64_t gen = ev->recorded;
    bool clean = event_done(ev, gen) && ev->err == 0;
    pthread_mutex_unlock(&ev->mu);
    if (gen == 0 || clean)
        return 0; /* nothing to wait for, no error to pass on */
    atomic_fetch_add_explicit(&ev->refs, 1, memory_order_relaxed);
    struct emul_task t = {.kind = T_WAIT, .u.ev = {ev, gen}};
    int err = enqueue(s, &t, "stream_wait_event");
    if (err)
        event_unref(ev);
    return err;
}

static int emul_launch_host(void *sp, int (*fn)(void *), void *arg)
{
    if (!fn)
        return vq__fail(VQ_EINVAL, "launch_host: NULL function");
    struct emul_stream *s = stream_of(sp, "launch_host");
    if (!s)
        return VQ_EINVAL;
    struct emul_task t = {.kind = T_HOST, .u.host = {fn, arg}};
    return enqueue(s, &t, "launch_host");
}

/* ---- memory ---- */

static void *alloc64(size_t n, const char *what)
{
    size_t size = n ? (n + ALIGN - 1) / ALIGN * ALIGN : ALIGN;
    if (size < n) {
        vq__fail(VQ_ENOMEM, "%s: %zu bytes is too large", what, n);
        return NULL;
    }
    void *p = vq__aligned_alloc(ALIGN, size);
    if (!p)
        vq__fail(VQ_ENOMEM, "%s: out of memory (%zu bytes)", what, n);
    return p;
}

static void *emul_malloc_async(size_t n, void *sp)
{
    if (!stream_of(sp, "malloc_async"))
        return NULL;
    /* host memory exists at once: later work on the stream may use it */
    return alloc64(n, "malloc_async");
}

static void emul_free_async(void *p, void *sp)
{
    if (!p)
        return;
    struct emul_task t = {.kind = T_FREE, .u.ptr = p};
    if (!sp)
        free(p);
    else if (!stream_of(sp, "free_async"))
        return; /* when the block's users are done is unknown: kept (a leak the sanitizers report) */
    else if (enqueue(sp, &t, "free_async") && emul_stream_synchronize(sp) != VQ_EDEADLK)
        free(p); /* no room in the queue: free it after the stream's work */
}

static void *emul_host_alloc_pinned(size_t n)
{
    return alloc64(n, "host_alloc_pinned");
}

static void emul_host_free_pinned(void *p)
{
    free(p);
}

static int emul_memcpy_async(void *dst, const void *src, size_t n, int kind, void *sp)
{
    if (!stream_of(sp, "memcpy_async"))
        return VQ_EINVAL;
    if (kind < VQ__MEMCPY_H2H || kind > VQ__MEMCPY_DEFAULT || (n && (!dst || !src)))
        return vq__fail(VQ_EINVAL, "memcpy_async: bad argument (kind %d, %zu bytes)", kind, n);
    if (!n)
        return 0;
    struct emul_task t = {.kind = T_COPY, .u.copy = {dst, src, n}};
    return enqueue(sp, &t, "memcpy_async");
}

/* ---- the tables, one per device count ---- */

#define EMUL_DEVICES(N)                                                                   \
    static int emul_count_##N(void) { return N; }                                         \
    static int emul_stream_new_##N(int device, void **out)                                \
    {                                                                                     \
        return emul_stream_new(N, device, out);                                           \
    }                                                                                     \
    static int emul_event_new_##N(int device, void **out) { return emul_event_new(N, device, out); }

EMUL_DEVICES(1)
EMUL_DEVICES(2)
EMUL_DEVICES(3)
EMUL_DEVICES(4)
EMUL_DEVICES(5)
EMUL_DEVICES(6)
EMUL_DEVICES(7)
EMUL_DEVICES(8)

static void *emul_stream_native(void *sp)
{
    return &((struct emul_stream *)sp)->native;
}

#define EMUL_TABLE(N)                                                                      \
    {                                                                                      \
        .name = "emulated", .host_memory = true, .device_count = emul_count_##N, .stream_new = emul_stream_new_##N, \
        .stream_free = emul_stream_free, .event_new = emul_event_new_##N,                 \
        .event_free = emul_event_free, .event_record = emul_event_record,                  \
        .stream_wait_event = emul_stream_wait_event, .event_query = emul_event_query,      \
        .event_synchronize = emul_event_synchronize, .launch_host = emul_launch_host,      \
        .stream_synchronize = emul_stream_synchronize, .malloc_async = emul_malloc_async,  \
        .free_async = emul_free_async, .host_alloc_pinned = emul_host_alloc_pinned,        \
        .host_free_pinned = emul_host_free_pinned, .memcpy_async = emul_memcpy_async,      \
        .stream_native = emul_stream_native,                                               \
    }

static const struct vq__stream_backend emul_tables[VQ__STREAM_EMUL_MAX_DEVICES] = {
    EMUL_TABLE(1), EMUL_TABLE(2), EMUL_TABLE(3), EMUL_TABLE(4),
    EMUL_TABLE(5), EMUL_TABLE(6), EMUL_TABLE(7), EMUL_TABLE(8),
};

const struct vq__stream_backend *vq__stream_emul(int ndevices)
{
    if (ndevices < 1 || ndevices > VQ__STREAM_EMUL_MAX_DEVICES) {
        vq__fail(VQ_EINVAL, "emulated GPU backend: %d devices (1 to %d)", ndevices,
            VQ__STREAM_EMUL_MAX_DEVICES);
        return NULL;
    }
    return &emul_tables[ndevices - 1];
}
