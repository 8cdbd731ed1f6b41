/* GPU memory (docs/design/gpu.md): the per-device GPU allocator on the
 * stream backend's stream-ordered memory, copies between host and devices
 * (as GPU ops on the copy streams, or synchronous ones outside any op),
 * their pinned staging buffers, and the last failure of stream work per
 * device. Which kernel an op runs on a GPU is the op runtime's
 * (ops/gpu.c).
 *
 * The backend is the one the engine picks (vq__stream_backend_get(NULL):
 * VARQ_GPU_BACKEND, else CUDA when present), looked up on first use and kept
 * once found; while there is none, every GPU request fails with VQ_ENOSYS
 * and the backend's message.
 *
 * Allocation: tensors are created outside any engine, so each device's
 * allocator owns one private stream. A block comes from malloc_async on it,
 * and that stream is synchronized, so the block is usable on every stream.
 * A block is freed with free_async on the stream of its last user (the free
 * op of a released tensor runs on a stream of the device, after the events
 * of the ops on the tensor's var); with no stream known, on the private
 * stream. A shared reference let go of on a stream leaves an event there
 * that the freeing stream waits for (vq__gpu_use_note). The backend's
 * pool does the caching (cudaMallocAsync), so cached_bytes stays 0 and
 * system_bytes equals live_bytes. */
#include "tensor_services.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GPUS 64

static int copy_async(const struct vq__stream_backend *be, void *dst, const void *src, size_t n,
                      int kind, void *stream);

struct gpu_alloc {
    vq__allocator base;
    int id;
    const struct vq__stream_backend *be;
    void *stream; /* private: allocations, and frees with no stream */
    atomic_size_t live, peak;
    atomic_uint_least64_t allocs;
    /* Spent use records (vq__gpu_uses_settle), their events kept for the
     * next vq__gpu_use_note: a shared temporary is let go of on a stream
     * every run of a loop. */
    pthread_mutex_t use_lock;
    struct vq__tensor_use *spare;
};

/* A use of a GPU tensor's storage by a stream's work (vq__gpu_use_note). */
struct vq__tensor_use {
    void *ev;
    struct vq__tensor_use *next;
};

static pthread_mutex_t gpu_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct vq__stream_backend *_Atomic backend;
static struct gpu_alloc *_Atomic gpus[MAX_GPUS];

int vq__gpu_backend(const struct vq__stream_backend **out)
{
    const struct vq__stream_backend *be = atomic_load_explicit(&backend, memory_order_acquire);
    if (be) {
        *out = be;
        return 0;
    }
    pthread_mutex_lock(&gpu_lock);
    int rc = 0;
    be = atomic_load_explicit(&backend, memory_order_relaxed);
    if (!be && (rc = vq__stream_backend_get(NULL, &be)) == 0)
        atomic_store_explicit(&backend, be, memory_order_release);
    pthread_mutex_unlock(&gpu_lock);
    *out = be;
    return rc;
}

static void note_peak(struct gpu_alloc *a, size_t live)
{
    size_t p = atomic_load_explicit(&a->peak, memory_order_relaxed);
    while (live > p &&
           !atomic_compare_exchange_weak_explicit(&a->peak, &p, live, memory_order_relaxed,
                                                  memory_order_relaxed))
        ;
}

static void *gpu_alloc_block(vq__allocator *base, size_t bytes, void *stream)
{
    struct gpu_alloc *a = (struct gpu_alloc *)base;
    void *p = a->be->malloc_async(bytes ? bytes : 1, stream ? stream : a->stream);
    if (!p)
        return NULL;
    /* Without a stream: usable by work on any stream from now on. */
    if (!stream && a->be->stream_synchronize(a->stream) < 0) {
        a->be->free_async(p, a->stream);
        return NULL;
    }
    atomic_fetch_add_explicit(&a->allocs, 1, memory_order_relaxed);
    note_peak(a, atomic_fetch_add_explicit(&a->live, bytes, memory_order_relaxed) + bytes);
    return p;
}

static void gpu_free_block(vq__allocator *base, void *p, size_t bytes, void *stream)
{
    struct gpu_alloc *a = (struct gpu_alloc *)base;
    if (!p)
        return;
    a->be->free_async(p, stream ? stream : a->stream);
    atomic_fetch_sub_explicit(&a->live, bytes, memory_order_relaxed);
}

static int gpu_stats(vq__allocator *base, vq_mem_stats *out)
{
    struct gpu_alloc *a = (struct gpu_alloc *)base;
    out->live_bytes = atomic_load(&a->live);
    out->peak_bytes = atomic_load(&a->peak);
    out->cached_bytes = 0;
    out->system_bytes = out->live_bytes;
    out->allocs = atomic_load(&a->allocs);
    out->reuses = 0;
    return 0;
}

static void gpu_reset_peak(vq__allocator *base)
{
    struct gpu_alloc *a = (struct gpu_alloc *)base;
    atomic_store(&a->peak, atomic_load(&a->live));
}

static void gpu_trim(vq__allocator *base)
{
    (void)base; /* the backend's pool owns the cache */
}

int vq__gpu_allocator(int id, vq__allocator **out)
{
    *out = NULL;
    if (id >= 0 && id < MAX_GPUS) {
        struct gpu_alloc *a = atomic_load_explicit(&gpus[id], memory_order_acquire);
        if (a) {
            *out = &a->base;
            return 0;
        }
    }
    const struct vq__stream_backend *be;
    int rc = vq__gpu_backend(&be);
    if (rc < 0)
        return rc;
    int n = be->device_count();
    if (id < 0 || id >= n)
        return vq__fail(VQ_EINVAL, "no GPU %d: the %s backend has %d device%s", id, be->name, n,
                        n == 1 ? "" : "s");
    if (id >= MAX_GPUS)
        return vq__fail(VQ_ENOSYS, "GPU %d: varq supports GPUs 0 .. %d", id, MAX_GPUS - 1);
    pthread_mutex_lock(&gpu_lock);
    struct gpu_alloc *a = atomic_load_explicit(&gpus[id], memory_order_relaxed);
    if (!a) {
        a = vq__calloc(1, sizeof *a);
        if (!a) {
            rc = vq__fail(VQ_ENOMEM, "GPU %d: out of memory for its allocator", id);
        } else if ((rc = be->stream_new(id, &a->stream)) < 0) {
            free(a);
            a = NULL;
        } else {
            a->base = (vq__allocator){gpu_alloc_block, gpu_free_block, gpu_stats, gpu_reset_peak,
                                      gpu_trim};
            a->id = id;
            a->be = be;
            pthread_mutex_init(&a->use_lock, NULL);
            atomic_store_explicit(&gpus[id], a, memory_order_release);
        }
    }
    pthread_mutex_unlock(&gpu_lock);
    if (a)
        *out = &a->base;
    return rc;
}

int vq__gpu_copy_sync(int id, void *dst, const void *src, size_t n, int kind)
{
    vq__allocator *base;
    int rc = vq__gpu_allocator(id, &base);
    if (rc < 0 || n == 0)
        return rc;
    struct gpu_alloc *a = (struct gpu_alloc *)base;
    /* The private stream is shared: one copy at a time keeps its sticky
     * error, if any, with the copy that raised it. */
    pthread_mutex_lock(&gpu_lock);
    rc = a->be->memcpy_async(dst, src, n, kind, a->stream);
    int rc2 = a->be->stream_synchronize(a->stream);
    pthread_mutex_unlock(&gpu_lock);
    return rc < 0 ? rc : rc2;
}

int vq__tensor_stack_sync(vq_tensor *dst, vq_tensor *const *parts, int stride, int64_t n)
{
    size_t each = n > 0 ? dst->nbytes / (size_t)n : 0;
    bool dg = dst->dev.kind == VQ_DEV_GPU;
    for (int64_t i = 0; i < n; i++) {
        const vq_tensor *p = parts[i * stride];
        if (p->nbytes != each || p->dev.kind != dst->dev.kind || (dg && p->dev.id != dst->dev.id))
            return vq__fail(VQ_EINVAL,
                            "stack: part %lld is %zu bytes on another device or of "
                            "another size than %zu",
                            (long long)i, p->nbytes, each);
    }
    if (!dg || each == 0) {
        for (int64_t i = 0; i < n && each; i++)
            memcpy((char *)dst->data + (size_t)i * each, parts[i * stride]->data, each);
        return 0;
    }
    vq__allocator *base;
    int rc = vq__gpu_allocator(dst->dev.id, &base);
    if (rc < 0)
        return rc;
    struct gpu_alloc *a = (struct gpu_alloc *)base;
    /* every copy queued, one wait: as vq__gpu_copy_sync, under the lock
     * that keeps the private stream's sticky error with its copies */
    pthread_mutex_lock(&gpu_lock);
    for (int64_t i = 0; i < n && rc == 0; i++)
        rc = a->be->memcpy_async((char *)dst->data + (size_t)i * each, parts[i * stride]->data,
                                 each, VQ__MEMCPY_D2D, a->stream);
    int rc2 = a->be->stream_synchronize(a->stream);
    pthread_mutex_unlock(&gpu_lock);
    return rc < 0 ? rc : rc2;
}

int vq__tensor_copy_sync(vq_tensor *dst, const vq_tensor *src)
{
    if (dst->nbytes != src->nbytes)
        return vq__fail(VQ_EINVAL, "copy: %zu bytes into %zu", src->nbytes, dst->nbytes);
    bool sg = src->dev.kind == VQ_DEV_GPU, dg = dst->dev.kind == VQ_DEV_GPU;
    if (!sg && !dg) {
        if (src->nbytes)
            memcpy(dst->data, src->data, src->nbytes);
        return 0;
    }
    if (sg && dg && src->dev.id != dst->dev.id)
        return vq__fail(VQ_EINVAL, "copy: GPU %d to GPU %d: not a synchronous copy varq makes",
                        src->dev.id, dst->dev.id);
    int kind = sg && dg ? VQ__MEMCPY_D2D : sg ? VQ__MEMCPY_D2H : VQ__MEMCPY_H2D;
    return vq__gpu_copy_sync(dg ? dst->dev.id : src->dev.id, dst->data, src->data, src->nbytes,
                             kind);
}

int vq__tensor_copy_async(vq_tensor *dst, const vq_tensor *src, void *stream)
{
    if (dst->nbytes != src->nbytes)
        return vq__fail(VQ_EINVAL, "copy: %zu bytes into %zu", src->nbytes, dst->nbytes);
    if (!src->nbytes)
        return 0;
    const struct vq__stream_backend *be;
    int rc = vq__gpu_backend(&be);
    if (rc < 0)
        return rc;
    bool sg = src->dev.kind == VQ_DEV_GPU, dg = dst->dev.kind == VQ_DEV_GPU;
    int kind = sg && dg ? (src->dev.id == dst->dev.id ? VQ__MEMCPY_D2D : VQ__MEMCPY_DEFAULT)
               : sg     ? VQ__MEMCPY_D2H
               : dg     ? VQ__MEMCPY_H2D
                        : VQ__MEMCPY_H2H;
    return copy_async(be, dst->data, src->data, src->nbytes, kind, stream);
}

void vq__gpu_use_note(vq_tensor *t, void *stream)
{
    struct gpu_alloc *a = (struct gpu_alloc *)t->alloc;
    pthread_mutex_lock(&a->use_lock);
    struct vq__tensor_use *u = a->spare;
    if (u)
        a->spare = u->next;
    pthread_mutex_unlock(&a->use_lock);
    if (!u && (u = malloc(sizeof *u)) != NULL && a->be->event_new(a->id, &u->ev) < 0) {
        free(u);
        u = NULL;
    }
    if (!u || a->be->event_record(u->ev, stream) < 0) {
        if (u) {
            a->be->event_free(u->ev);
            free(u);
        }
        /* No event: the host waits for the work instead (a GPU op's fn,
         * never the stream's own host work). Its error, if any, is the
         * stream's and surfaces through the ops' events. */
        (void)a->be->stream_synchronize(stream);
        return;
    }
    /* release: the last reference's acquire sees the record */
    u->next = atomic_load_explicit(&t->uses, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(&t->uses, &u->next, u, memory_order_release,
                                                  memory_order_relaxed))
        ;
}

void vq__gpu_uses_settle(vq_tensor *t, void *stream)
{
    struct gpu_alloc *a = (struct gpu_alloc *)t->alloc;
    void *s = stream ? stream : a->stream;
    struct vq__tensor_use *u = atomic_exchange_explicit(&t->uses, NULL, memory_order_acquire);
    struct vq__tensor_use *last = u;
    for (struct vq__tensor_use *i = u; i; i = i->next) {
        /* A failed wait: the host waits for the work itself. */
        if (a->be->stream_wait_event(s, i->ev) < 0)
            (void)a->be->event_synchronize(i->ev);
        last = i;
    }
    if (!u)
        return;
    /* Re-recorded later: a wait already enqueued keeps the record it saw. */
    pthread_mutex_lock(&a->use_lock);
    last->next = a->spare;
    a->spare = u;
    pthread_mutex_unlock(&a->use_lock);
}

int vq__tensor_read_on(vq_tensor *dst, const vq_tensor *src, void *stream)
{
    int rc = vq__tensor_copy_async(dst, src, stream);
    if (rc < 0)
        return rc;
    const struct vq__stream_backend *be;
    if ((rc = vq__gpu_backend(&be)) < 0)
        return rc;
    return be->stream_synchronize(stream);
}

/* The message of the last kernel that failed in stream work, per device. */
static pthread_mutex_t failure_lock = PTHREAD_MUTEX_INITIALIZER;
static char failures[MAX_GPUS][256];

bool vq__gpu_last_failure(int id, char *buf, size_t size)
{
    if (id < 0 || id >= MAX_GPUS || size == 0)
        return false;
    pthread_mutex_lock(&failure_lock);
    bool any = failures[id][0] != '\0';
    snprintf(buf, size, "%s", failures[id]);
    pthread_mutex_unlock(&failure_lock);
    return any;
}

int vq__gpu_work_failed(int id, int err,
                        void (*defer)(void *user, void *tag, int err, const char *msg),
                        void *defer_user, void *defer_tag)
{
    if (defer) {
        /* Reported to the caller's layer; the stream stays usable. */
        defer(defer_user, defer_tag, err, vq_errmsg());
        return 0;
    }
    if (id >= 0 && id < MAX_GPUS) {
        pthread_mutex_lock(&failure_lock);
        snprintf(failures[id], sizeof failures[id], "%s", vq_errmsg());
        pthread_mutex_unlock(&failure_lock);
    }
    return err;
}

/* ---- pinned staging of copies between host and device ----
 *
 * A copy from or to pageable host memory is not asynchronous in CUDA (the
 * driver stages it, and a device-to-host copy blocks the calling thread
 * until the stream reaches it), which would hold a copy worker and keep it
 * from launching the next copy. So copies up to STAGE_MAX go through a
 * page-locked buffer: host to device, the host bytes are copied into the
 * buffer by the worker, the device copy is enqueued, and a host function
 * after it gives the buffer back; device to host, the device copy into the
 * buffer is enqueued and a host function after it copies the bytes out and
 * gives the buffer back (the op's event comes after both, so the
 * destination's readers see the bytes). Buffers are powers of two from 4
 * KiB, kept per size in free lists shared by all devices (pinned memory is
 * the host's); host functions only push to a list (no backend calls there:
 * stream.h), and the worker that takes a buffer trims the cache to
 * STAGE_CACHE. Bigger copies, or when pinned memory cannot be had, go
 * direct. */

#define STAGE_MIN_LOG2 12
#define STAGE_MAX ((size_t)64 << 20)
#define STAGE_CACHE ((size_t)256 << 20)
#define STAGE_CLASSES 15 /* 4 KiB .. 64 MiB */

struct stage {
    struct stage *next;
    int cls;
    void *p;
    void *host; /* device to host: where the bytes go */
    size_t n;
};

static pthread_mutex_t stage_lock = PTHREAD_MUTEX_INITIALIZER;
static struct stage *stage_free[STAGE_CLASSES];
static size_t stage_cached; /* bytes in the free lists; under stage_lock */
static atomic_uint_least64_t stage_uses, stage_allocs;

static void stage_put(struct stage *st)
{
    pthread_mutex_lock(&stage_lock);
    st->next = stage_free[st->cls];
    stage_free[st->cls] = st;
    stage_cached += (size_t)1 << (st->cls + STAGE_MIN_LOG2);
    pthread_mutex_unlock(&stage_lock);
}

/* A buffer of at least n bytes, or NULL (copy direct). Not from a host
 * function: it may allocate and free pinned memory. */
static struct stage *stage_get(const struct vq__stream_backend *be, size_t n)
{
    if (n > STAGE_MAX)
        return NULL;
    int cls = 0;
    while (((size_t)1 << (cls + STAGE_MIN_LOG2)) < n)
        cls++;
    size_t size = (size_t)1 << (cls + STAGE_MIN_LOG2);
    struct stage *trim = NULL;
    pthread_mutex_lock(&stage_lock);
    struct stage *st = stage_free[cls];
    if (st) {
        stage_free[cls] = st->next;
        stage_cached -= size;
    }
    /* Over the cache's size: hand the largest buffers back to the system. */
    for (int c = STAGE_CLASSES - 1; c >= 0 && stage_cached > STAGE_CACHE; c--)
        while (stage_free[c] && stage_cached > STAGE_CACHE) {
            struct stage *t = stage_free[c];
            stage_free[c] = t->next;
            stage_cached -= (size_t)1 << (c + STAGE_MIN_LOG2);
            t->next = trim;
            trim = t;
        }
    pthread_mutex_unlock(&stage_lock);
    while (trim) {
        struct stage *t = trim;
        trim = t->next;
        be->host_free_pinned(t->p);
        free(t);
    }
    if (!st) {
        if (!(st = vq__malloc(sizeof *st)))
            return NULL;
        if (!(st->p = be->host_alloc_pinned(size))) {
            free(st);
            return NULL;
        }
        st->cls = cls;
        atomic_fetch_add_explicit(&stage_allocs, 1, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&stage_uses, 1, memory_order_relaxed);
    return st;
}

/* Host functions at the end of a staged copy. */
static int stage_release(void *arg)
{
    stage_put(arg);
    return 0;
}

static int stage_unload(void *arg)
{
    struct stage *st = arg;
    memcpy(st->host, st->p, st->n);
    stage_put(st);
    return 0;
}

void vq__gpu_stage_stats(uint64_t *uses, uint64_t *allocs)
{
    *uses = atomic_load(&stage_uses);
    *allocs = atomic_load(&stage_allocs);
}

/* memcpy_async on stream (a backend stream), staged through pinned memory
 * when one side is the host. */
static int copy_async(const struct vq__stream_backend *be, void *dst, const void *src, size_t n,
                      int kind, void *stream)
{
    struct stage *st = NULL;
    if (n && (kind == VQ__MEMCPY_H2D || kind == VQ__MEMCPY_D2H))
        st = stage_get(be, n);
    if (!st)
        return be->memcpy_async(dst, src, n, kind, stream);
    int rc;
    if (kind == VQ__MEMCPY_H2D) {
        memcpy(st->p, src, n);
        rc = be->memcpy_async(dst, st->p, n, kind, stream);
        if (rc == 0)
            rc = be->launch_host(stream, stage_release, st);
    } else {
        st->host = dst;
        st->n = n;
        rc = be->memcpy_async(st->p, src, n, kind, stream);
        if (rc == 0)
            rc = be->launch_host(stream, stage_unload, st);
    }
    if (rc < 0) {
        /* Nothing after the copy will give it back: wait, then do it here. */
        (void)be->stream_synchronize(stream);
        stage_put(st);
    }
    return rc;
}

/* ---- copies ---- */

static const char *dev_str(char *buf, size_t size, vq_ctx d)
{
    if (d.kind == VQ_DEV_GPU)
        snprintf(buf, size, "GPU %d", d.id);
    else
        snprintf(buf, size, "CPU");
    return buf;
}

struct copy {
    vq_tensor *src, *dst;
    int kind; /* VQ__MEMCPY_* */
};

static int copy_run(void *arg, const vq_exec_ctx *x)
{
    struct copy *c = arg;
    if (x->ctx.kind != VQ_DEV_GPU) {
        if (c->src->nbytes)
            memcpy(c->dst->data, c->src->data, c->src->nbytes);
        return 0;
    }
    const struct vq__stream_backend *be;
    int rc = vq__gpu_backend(&be);
    if (rc < 0)
        return rc;
    return copy_async(be, c->dst->data, c->src->data, c->src->nbytes, c->kind, vq__gpu_op_stream());
}

static void copy_free(void *arg)
{
    struct copy *c = arg;
    vq_tensor_release(c->src);
    vq_tensor_release(c->dst);
    free(c);
}

VQ_API int vq_tensor_copy_to(vq_engine *e, vq_tensor *src, vq_ctx dev, vq_tensor **out)
{
    if (!src || !out)
        return vq__fail(VQ_EINVAL, "vq_tensor_copy_to: %s is NULL", src ? "out" : "src");
    *out = NULL;
    vq_ctx from = src->dev;
    bool gpu = from.kind == VQ_DEV_GPU || dev.kind == VQ_DEV_GPU;
    if (gpu && !e)
        return vq__fail(VQ_EINVAL, "vq_tensor_copy_to: a copy to or from a GPU needs an engine");
    vq_tensor *dst;
    int rc = vq__tensor_empty_on(&dst, dev, src->dtype, src->ndim, src->shape, "vq_tensor_copy_to");
    if (rc < 0)
        return rc;
    if (!e) {
        if (src->nbytes)
            memcpy(dst->data, src->data, src->nbytes);
        *out = dst;
        return 0;
    }
    struct copy *c = vq__malloc(sizeof *c);
    if (!c) {
        vq_tensor_release(dst);
        return vq__fail(VQ_ENOMEM, "vq_tensor_copy_to: out of memory");
    }
    vq_task t = {.fn = copy_run, .arg = c, .arg_free = copy_free, .name = "copy"};
    if (from.kind == VQ_DEV_GPU && dev.kind == VQ_DEV_GPU) {
        c->kind = from.id == dev.id ? VQ__MEMCPY_D2D : VQ__MEMCPY_DEFAULT;
        t.ctx = dev;
    } else if (dev.kind == VQ_DEV_GPU) {
        c->kind = VQ__MEMCPY_H2D;
        t.ctx = dev;
        t.props = VQ_PROP_COPY_TO_DEV;
        t.name = "copy_to_dev";
    } else if (from.kind == VQ_DEV_GPU) {
        c->kind = VQ__MEMCPY_D2H;
        t.ctx = from;
        t.props = VQ_PROP_COPY_FROM_DEV;
        t.name = "copy_from_dev";
    } else {
        c->kind = VQ__MEMCPY_H2H;
    }
    vq_var *r[1], *w[1];
    const char *which = "src";
    if ((rc = vq__tensor_var_cut(src, e, &r[0])) == 0) {
        which = "dst";
        rc = vq__tensor_var_cut(dst, e, &w[0]);
    }
    if (rc < 0) {
        free(c);
        vq_tensor_release(dst);
        return vq__fail_prefixed(rc, "vq_tensor_copy_to: %s", which);
    }
    c->src = vq_tensor_retain(src);
    c->dst = vq_tensor_retain(dst);
    t.reads = r;
    t.nreads = 1;
    t.writes = w;
    t.nwrites = 1;
    if ((rc = vq_push(e, &t)) < 0) {
        char a[16], b[16];
        copy_free(c);
        vq_tensor_release(dst);
        return vq__fail_prefixed(rc, "vq_tensor_copy_to: %s to %s", dev_str(a, sizeof a, from),
                                 dev_str(b, sizeof b, dev));
    }
    *out = dst;
    return 0;
}
