/* The CUDA stream backend (stream.h): plain C over the CUDA runtime API.
 * Built only when the CUDA toolkit is found (meson option cuda).
 *
 * The mapping is direct: non-blocking streams, events without timing,
 * cudaStreamWaitEvent, cudaLaunchHostFunc, stream-ordered allocation
 * (cudaMallocAsync, or cudaMalloc where the device has no memory pools),
 * portable pinned host memory. CUDA errors become VQ_EIO (VQ_ENOMEM for
 * allocations) with cudaGetErrorString in the message.
 *
 * The wrappers add what cudart lacks: a stream's sticky error raised by a
 * host function (a cudart host function cannot fail), kept in the stream
 * wrapper and checked after an event of that stream completes; an event
 * therefore remembers the stream of its last record, and holds a reference
 * to it, so a stream freed before its events stays readable. */
#include "engine_internal.h"
#include "stream.h"

#include <cuda_runtime_api.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(VQ__MEMCPY_H2H == (int)cudaMemcpyHostToHost && VQ__MEMCPY_H2D == (int)cudaMemcpyHostToDevice &&
                   VQ__MEMCPY_D2H == (int)cudaMemcpyDeviceToHost &&
                   VQ__MEMCPY_D2D == (int)cudaMemcpyDeviceToDevice && VQ__MEMCPY_DEFAULT == (int)cudaMemcpyDefault,
    "VQ__MEMCPY_* are the values of cudaMemcpyKind");

#define ERRMSG_LEN 256

/* A launch_host in flight: the argument of the trampoline. */
struct cu_host {
    struct cu_host *next; /* in the stream's free list */
    int (*fn)(void *);
    void *arg;
    struct cu_stream *s;
};

struct cu_stream {
    cudaStream_t stream;
    int device;
    bool pools;      /* the device supports cudaMallocAsync */
    atomic_int refs; /* the owner's, plus one per event last recorded on it */
    atomic_int err;  /* sticky error of a host function; set under mu */
    pthread_mutex_t mu;
    struct cu_host *free_hosts; /* under mu */
    char errmsg[ERRMSG_LEN];    /* under mu */
};

struct cu_event {
    cudaEvent_t event;
    int device;
    struct cu_stream *last; /* the stream of the last record (a reference) */
};

static int cuda_fail(cudaError_t e, const char *what)
{
    (void)cudaGetLastError(); /* clear a non-sticky error */
    return vq__fail(e == cudaErrorMemoryAllocation ? VQ_ENOMEM : VQ_EIO, "CUDA: %s: %s (%s)", what,
        cudaGetErrorString(e), cudaGetErrorName(e));
}

static int set_device(int device, const char *what)
{
    cudaError_t e = cudaSetDevice(device);
    return e == cudaSuccess ? 0 : cuda_fail(e, what);
}

/* ---- streams ---- */

static void stream_unref(struct cu_stream *s)
{
    if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
        return;
    while (s->free_hosts) {
        struct cu_host *h = s->free_hosts;
        s->free_hosts = h->next;
        free(h);
    }
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* 0, or the stream's sticky error with its message. */
static int stream_error(struct cu_stream *s)
{
    int err = atomic_load_explicit(&s->err, memory_order_acquire);
    if (!err)
        return 0;
    char msg[ERRMSG_LEN];
    pthread_mutex_lock(&s->mu);
    snprintf(msg, ERRMSG_LEN, "%s", s->errmsg);
    pthread_mutex_unlock(&s->mu);
    return vq__fail(err, "%s", msg);
}

static int cu_device_count(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cuda_fail(e, "cudaGetDeviceCount");
        return 0;
    }
    return n;
}

static int cu_stream_new(int device, void **out)
{
    *out = NULL;
    int err = set_device(device, "stream_new: cudaSetDevice");
    if (err)
        return err;
    struct cu_stream *s = vq__calloc(1, sizeof *s);
    if (!s)
        return vq__fail(VQ_ENOMEM, "stream_new: out of memory");
    if (pthread_mutex_init(&s->mu, NULL)) {
        free(s);
        return vq__fail(VQ_ENOMEM, "stream_new: pthread_mutex_init failed");
    }
    int pools = 0;
    if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess) {
        (void)cudaGetLastError();
        pools = 0;
    }
    cudaError_t e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        pthread_mutex_destroy(&s->mu);
        free(s);
        return cuda_fail(e, "stream_new: cudaStreamCreateWithFlags");
    }
    s->device = device;
    s->pools = pools != 0;
    atomic_init(&s->refs, 1);
    atomic_init(&s->err, 0);
    *out = s;
    return 0;
}

static void cu_stream_free(void *sp)
{
    struct cu_stream *s = sp;
    if (!s)
        return;
    /* the host functions' trampolines use s: let them all run */
    (void)cudaStreamSynchronize(s->stream);
    (void)cudaStreamDestroy(s->stream);
    (void)cudaGetLastError();
    stream_unref(s);
}

static int cu_stream_synchronize(void *sp)
{
    struct cu_stream *s = sp;
    if (!s)
        return vq__fail(VQ_EINVAL, "stream_synchronize: NULL stream");
    cudaError_t e = cudaStreamSynchronize(s->stream);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaStreamSynchronize");
    return stream_error(s);
}

static void CUDART_CB host_trampoline(void *p)
{
    struct cu_host *h = p;
    struct cu_stream *s = h->s;
    int err = h->fn(h->arg);
    pthread_mutex_lock(&s->mu);
    if (err && !atomic_load_explicit(&s->err, memory_order_relaxed)) {
        snprintf(s->errmsg, ERRMSG_LEN, "%s", vq_errmsg());
        atomic_store_explicit(&s->err, err, memory_order_release);
    }
    h->next = s->free_hosts;
    s->free_hosts = h;
    pthread_mutex_unlock(&s->mu);
}

static int cu_launch_host(void *sp, int (*fn)(void *), void *arg)
{
    struct cu_stream *s = sp;
    if (!s || !fn)
        return vq__fail(VQ_EINVAL, "launch_host: NULL stream or function");
    pthread_mutex_lock(&s->mu);
    struct cu_host *h = s->free_hosts;
    if (h)
        s->free_hosts = h->next;
    pthread_mutex_unlock(&s->mu);
    if (!h && !(h = vq__malloc(sizeof *h)))
        return vq__fail(VQ_ENOMEM, "launch_host: out of memory");
    h->fn = fn;
    h->arg = arg;
    h->s = s;
    cudaError_t e = cudaLaunchHostFunc(s->stream, host_trampoline, h);
    if (e != cudaSuccess) {
        pthread_mutex_lock(&s->mu);
        h->next = s->free_hosts;
        s->free_hosts = h;
        pthread_mutex_unlock(&s->mu);
        return cuda_fail(e, "cudaLaunchHostFunc");
    }
    return 0;
}

/* ---- events ---- */

static int cu_event_new(int device, void **out)
{
    *out = NULL;
    int err = set_device(device, "event_new: cudaSetDevice");
    if (err)
        return err;
    struct cu_event *ev = vq__calloc(1, sizeof *ev);
    if (!ev)
        return vq__fail(VQ_ENOMEM, "event_new: out of memory");
    cudaError_t e = cudaEventCreateWithFlags(&ev->event, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        free(ev);
        return cuda_fail(e, "event_new: cudaEventCreateWithFlags");
    }
    ev->device = device;
    *out = ev;
    return 0;
}

static void cu_event_free(void *evp)
{
    struct cu_event *ev = evp;
    if (!ev)
        return;
    (void)cudaEventDestroy(ev->event); /* a pending record completes first */
    (void)cudaGetLastError();
    if (ev->last)
        stream_unref(ev->last);
    free(ev);
}

static int cu_event_record(void *evp, void *sp)
{
    struct cu_event *ev = evp;
    struct cu_stream *s = sp;
    if (!ev || !s)
        return vq__fail(VQ_EINVAL, "event_record: NULL event or stream");
    if (ev->device != s->device)
        return vq__fail(VQ_EINVAL, "event_record: event of device %d recorded on a stream of device %d",
            ev->device, s->device);
    cudaError_t e = cudaEventRecord(ev->event, s->stream);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaEventRecord");
    if (ev->last != s) {
        atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
        if (ev->last)
            stream_unref(ev->last);
        ev->last = s;
    }
    return 0;
}

static int cu_stream_wait_event(void *sp, void *evp)
{
    struct cu_stream *s = sp;
    struct cu_event *ev = evp;
    if (!ev || !s)
        return vq__fail(VQ_EINVAL, "stream_wait_event: NULL event or stream");
    cudaError_t e = cudaStreamWaitEvent(s->stream, ev->event, 0);
    return e == cudaSuccess ? 0 : cuda_fail(e, "cudaStreamWaitEvent");
}

static int cu_event_query(void *evp)
{
    struct cu_event *ev = evp;
    if (!ev)
        return vq__fail(VQ_EINVAL, "event_query: NULL event");
    cudaError_t e = cudaEventQuery(ev->event);
    if (e == cudaErrorNotReady)
        return VQ_EBUSY;
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaEventQuery");
    return ev->last ? stream_error(ev->last) : 0;
}

static int cu_event_synchronize(void *evp)
{
    struct cu_event *ev = evp;
    if (!ev)
        return vq__fail(VQ_EINVAL, "event_synchronize: NULL event");
    cudaError_t e = cudaEventSynchronize(ev->event);
    if (e != cudaSuccess)
        return cuda_fail(e, "cudaEventSynchronize");
    return ev->last ? stream_error(ev->last) : 0;
}

/* ---- memory ---- */

static void *cu_malloc_async(size_t n, void *sp)
{
    struct cu_stream *s = sp;
    if (!s) {
        vq__fail(VQ_EINVAL, "malloc_async: NULL stream");
        return NULL;
    }
    if (set_device(s->device, "malloc_async: cudaSetDevice"))
        return NULL;
    void *p = NULL;
    cudaError_t e = s->pools ? cudaMallocAsync(&p, n ? n : 1, s->stream) : cudaMalloc(&p, n ? n : 1);
    if (e != cudaSuccess) {
        cuda_fail(e, s->pools ? "cudaMallocAsync" : "cudaMalloc");
        return NULL;
    }
    return p;
}

static void cu_free_async(void *p, void *sp)
{
    struct cu_stream *s = sp;
    if (!p || !s)
        return;
    if (s->pools) {
        if (cudaFreeAsync(p, s->stream) != cudaSuccess)
            (void)cudaGetLastError();
        return;
    }
    /* no memory pools: free after the work queued so far */
    (void)cudaStreamSynchronize(s->stream);
    (void)cudaFree(p);
    (void)cudaGetLastError();
}

static void *cu_host_alloc_pinned(size_t n)
{
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, n ? n : 1, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        cuda_fail(e, "cudaHostAlloc");
        return NULL;
    }
    return p;
}

static void cu_host_free_pinned(void *p)
{
    if (p && cudaFreeHost(p) != cudaSuccess)
        (void)cudaGetLastError();
}

static int cu_memcpy_async(void *dst, const void *src, size_t n, int kind, void *sp)
{
    struct cu_stream *s = sp;
    if (!s || kind < VQ__MEMCPY_H2H || kind > VQ__MEMCPY_DEFAULT || (n && (!dst || !src)))
        return vq__fail(VQ_EINVAL, "memcpy_async: bad argument (kind %d, %zu bytes)", kind, n);
    if (!n)
        return 0;
    int err = set_device(s->device, "memcpy_async: cudaSetDevice");
    if (err)
        return err;
    cudaError_t e = cudaMemcpyAsync(dst, src, n, (enum cudaMemcpyKind)kind, s->stream);
    return e == cudaSuccess ? 0 : cuda_fail(e, "cudaMemcpyAsync");
}

static void *cu_stream_native(void *sp)
{
    return ((struct cu_stream *)sp)->stream;
}

static const struct vq__stream_backend cuda_backend = {
    .name = "cuda",
    .device_count = cu_device_count,
    .stream_new = cu_stream_new,
    .stream_free = cu_stream_free,
    .stream_native = cu_stream_native,
    .event_new = cu_event_new,
    .event_free = cu_event_free,
    .event_record = cu_event_record,
    .stream_wait_event = cu_stream_wait_event,
    .event_query = cu_event_query,
    .event_synchronize = cu_event_synchronize,
    .launch_host = cu_launch_host,
    .stream_synchronize = cu_stream_synchronize,
    .malloc_async = cu_malloc_async,
    .free_async = cu_free_async,
    .host_alloc_pinned = cu_host_alloc_pinned,
    .host_free_pinned = cu_host_free_pinned,
    .memcpy_async = cu_memcpy_async,
};

/* ---- availability, decided once ---- */

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static bool usable;
static char unusable_why[ERRMSG_LEN];

static void probe(void)
{
    int n = 0, driver = 0, runtime = 0;
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    cudaError_t e = cudaGetDeviceCount(&n);
    (void)cudaGetLastError();
    char drv[32];
    if (driver)
        snprintf(drv, sizeof drv, "%d.%d", driver / 1000, driver % 1000 / 10);
    else
        snprintf(drv, sizeof drv, "none installed");
    if (e == cudaSuccess && n > 0) {
        usable = true;
        return;
    }
    snprintf(unusable_why, sizeof unusable_why,
        "CUDA backend: no usable GPU device (%s; CUDA driver %s, runtime %d.%d)",
        e == cudaSuccess ? "cudaGetDeviceCount found 0 devices" : cudaGetErrorString(e), drv,
        runtime / 1000, runtime % 1000 / 10);
}

const struct vq__stream_backend *vq__stream_cuda(void)
{
    pthread_once(&probe_once, probe);
    if (usable)
        return &cuda_backend;
    vq__fail(VQ_ENOSYS, "%s", unusable_why);
    return NULL;
}
