/* GPU execution on the stream backend (docs/design/gpu.md, engine/surface/stream.h).
 *
 * The engine's GPU state is created by the first GPU push (vq__gpu_check),
 * so that an engine that only runs CPU ops never touches a GPU runtime. It
 * picks the backend (VARQ_GPU_BACKEND, else CUDA when present) and, per
 * device, creates gpu_streams compute streams and two copy streams (to and
 * from the device), each owned by one worker of the ordinary pool machinery
 * (threaded.c): the compute pool has gpu_streams workers, each copy pool
 * one. The naive engine creates one stream per device and no workers.
 *
 * An op on a GPU gets its worker's stream in vq_exec_ctx.stream, enqueues
 * its work there and returns. The engine then records an event on the
 * stream and completes the op at once ("at launch"): every var of the op
 * carries that event (struct vq__gpu_event, refcounted, one per var that
 * holds it, recycled through a per-device free list). What follows:
 *   - a GPU op on another stream makes its stream wait for the event
 *     (stream_wait_event) before it launches: no host blocking; on the same
 *     stream, stream order suffices;
 *   - a CPU op synchronizes the events of its vars on its worker before its
 *     fn runs (never in the pusher); a failed event fails the op, which
 *     poisons its writes like any failure; a CPU writer then drops the
 *     event (the work is done);
 *   - vq_wait_var settles the var's event (its error is the var's error
 *     when the var has none); vq_wait_all synchronizes every stream.
 *
 * The invariant that keeps this free of races: a var's event pointer is
 * changed only by an op with exclusive access to the var. A GPU op queues
 * its reads as writes (desc.nexcl) for that reason; a CPU reader only
 * synchronizes. Hence an event's refcount cannot reach zero while an op
 * that reached it through a var is using it, and an event is re-recorded
 * only after its last holder dropped it, as stream.h requires.
 *
 * Errors: a GPU op's fn error fails it (the event is still recorded, since
 * part of its work may be queued); a failed stream_wait_event or
 * event_record fails the op; a failure inside stream work is the stream's
 * sticky error, which surfaces through the events recorded after it: at the
 * next CPU op, vq_wait_var or vq_wait_all. The naive engine synchronizes
 * the stream after each GPU op instead of storing events, so there a stream
 * failure fails the GPU op itself (it stays the serial oracle). */
#include "engine_internal.h"
#include "stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The backend of the GPU op running on this thread, and the one of the
 * last engine that set up its GPUs: what vq_gpu_launch_host uses. */
static VQ__TLS const struct vq__stream_backend *op_backend;
/* The backend stream of the GPU op whose fn runs on this thread. */
static VQ__TLS void *op_stream;
static const struct vq__stream_backend *_Atomic last_backend;

/* Frees what gpu_init created; pools must be stopped (npools == 0). */
static void gpu_destroy(struct vq__gpu *g)
{
    int per = g->per_device;
    for (int d = 0; d < g->ndev; d++) {
        struct vq__gpu_dev *dev = &g->dev[d];
        if (dev->streams)
            for (int k = 0; k < per; k++)
                if (dev->streams[k])
                    g->be->stream_free(dev->streams[k]); /* drains its work */
        free(dev->streams);
        for (struct vq__gpu_event *ev = dev->free_events; ev;) {
            struct vq__gpu_event *next = ev->next;
            g->be->event_free(ev->ev);
            free(ev);
            ev = next;
        }
        pthread_mutex_destroy(&dev->ev_lock);
    }
    free(g->dev);
    free(g);
}

static void gpu_stop_pools(struct vq__gpu *g)
{
    for (int d = 0; d < g->ndev; d++) {
        struct vq__gpu_dev *dev = &g->dev[d];
        struct vq__wpool *pools[3] = {&dev->compute, &dev->h2d, &dev->d2h};
        for (int i = 0; i < dev->npools; i++)
            vq__pool_stop(pools[i]);
        dev->npools = 0;
    }
}

/* Under e->gpu_lock. Sets e->gpu and gpu_on, or returns an error. */
static int gpu_init(vq_engine *e)
{
    const struct vq__stream_backend *be;
    int rc = vq__stream_backend_get(NULL, &be);
    if (rc < 0)
        return rc;
    int ndev = be->device_count();
    if (ndev < 1)
        return vq__fail(VQ_ENOSYS, "the %s GPU backend has no device", be->name);
    struct vq__gpu *g = vq__calloc(1, sizeof *g);
    /* The pools hold cache-aligned members: the array must be aligned. */
    size_t devsize = ((size_t)ndev * sizeof *g->dev + VQ__CACHELINE - 1) &
                     ~(size_t)(VQ__CACHELINE - 1);
    struct vq__gpu_dev *dev = vq__aligned_alloc(VQ__CACHELINE, devsize);
    if (!g || !dev) {
        free(g);
        free(dev);
        return vq__fail(VQ_ENOMEM, "out of memory setting up %d GPUs", ndev);
    }
    memset(dev, 0, devsize);
    g->be = be;
    g->ndev = ndev;
    g->dev = dev;
    g->nstreams = e->gpu_streams;
    g->first_worker = e->cpu_workers + (e->has_prio ? e->cpu_prio_workers : 0);
    /* Streams per device: compute, then to-device, then from-device, each
     * with its worker (threaded); one compute stream (naive). */
    g->workers = !vq__engine_runs_inline(e);
    g->per_device = g->workers ? g->nstreams + 2 : 1;
    int per = g->per_device;
    for (int d = 0; d < ndev; d++)
        pthread_mutex_init(&dev[d].ev_lock, NULL);
    for (int d = 0; d < ndev && rc == 0; d++) {
        dev[d].streams = vq__calloc((size_t)per, sizeof *dev[d].streams);
        if (!dev[d].streams)
            rc = vq__fail(VQ_ENOMEM, "out of memory setting up GPU %d", d);
        for (int k = 0; k < per && rc == 0; k++)
            rc = be->stream_new(d, &dev[d].streams[k]);
    }
    if (rc == 0 && g->workers) {
        for (int d = 0; d < ndev && rc == 0; d++) {
            vq_ctx ctx = {VQ_DEV_GPU, d};
            int id = g->first_worker + d * per, n = g->nstreams;
            void **s = dev[d].streams;
            if ((rc = vq__pool_start(e, &dev[d].compute, n, id, ctx, s)) < 0)
                break;
            dev[d].npools = 1;
            if ((rc = vq__pool_start(e, &dev[d].h2d, 1, id + n, ctx, s + n)) < 0)
                break;
            dev[d].npools = 2;
            if ((rc = vq__pool_start(e, &dev[d].d2h, 1, id + n + 1, ctx, s + n + 1)) < 0)
                break;
            dev[d].npools = 3;
        }
    }
    if (rc < 0) {
        gpu_stop_pools(g);
        gpu_destroy(g);
        return rc;
    }
    e->gpu = g;
    atomic_store_explicit(&last_backend, be, memory_order_release);
    /* release: whoever sees gpu_on sees the complete state */
    atomic_store_explicit(&e->gpu_on, true, memory_order_release);
    return 0;
}

int vq__gpu_check(vq_engine *e, vq_ctx ctx, const char *fn, const char *task)
{
    if (!atomic_load_explicit(&e->gpu_on, memory_order_acquire)) {
        pthread_mutex_lock(&e->gpu_lock);
        int rc = e->gpu ? 0 : gpu_init(e);
        pthread_mutex_unlock(&e->gpu_lock);
        if (rc < 0)
            return vq__fail_prefixed(rc, "%s: task \"%s\" asks for GPU %d", fn, task, ctx.id);
    }
    const struct vq__gpu *g = e->gpu;
    if (ctx.id < 0 || ctx.id >= g->ndev)
        return vq__fail(VQ_EINVAL, "%s: task \"%s\" asks for GPU %d; the %s backend has %d (0 .. %d)",
                        fn, task, ctx.id, g->be->name, g->ndev, g->ndev - 1);
    return 0;
}

void vq__gpu_stop(vq_engine *e)
{
    if (e->gpu)
        gpu_stop_pools(e->gpu);
}

void vq__gpu_free(vq_engine *e)
{
    if (!e->gpu)
        return;
    gpu_destroy(e->gpu);
    e->gpu = NULL;
    atomic_store_explicit(&e->gpu_on, false, memory_order_relaxed);
}

struct vq__wpool *vq__gpu_pool_of(vq_engine *e, const vq__op *op)
{
    struct vq__gpu_dev *d = &e->gpu->dev[op->desc->ctx.id];
    unsigned p = op->desc->props;
    return p & VQ_PROP_COPY_TO_DEV ? &d->h2d : p & VQ_PROP_COPY_FROM_DEV ? &d->d2h : &d->compute;
}

bool vq__gpu_idle(vq_engine *e)
{
    /* acquire: pairs with gpu_init's release of gpu_on (e->gpu is complete) */
    if (!atomic_load_explicit(&e->gpu_on, memory_order_acquire))
        return true;
    for (int d = 0; d < e->gpu->ndev; d++) {
        struct vq__gpu_dev *dev = &e->gpu->dev[d];
        struct vq__wpool *pools[3] = {&dev->compute, &dev->h2d, &dev->d2h};
        for (int i = 0; i < dev->npools; i++)
            if (!vq__pool_idle(pools[i]))
                return false;
    }
    return true;
}

void *vq__gpu_naive_stream(vq_engine *e, int id)
{
    return e->gpu->dev[id].streams[0];
}

/* ---- events ---- */

static struct vq__gpu_event *event_get(struct vq__gpu *g, int device)
{
    struct vq__gpu_dev *d = &g->dev[device];
    pthread_mutex_lock(&d->ev_lock);
    struct vq__gpu_event *ev = d->free_events;
    if (ev)
        d->free_events = ev->next;
    pthread_mutex_unlock(&d->ev_lock);
    if (ev)
        return ev;
    ev = vq__malloc(sizeof *ev);
    if (!ev) {
        vq__fail(VQ_ENOMEM, "GPU %d: out of memory for an event", device);
        return NULL;
    }
    if (g->be->event_new(device, &ev->ev) < 0) {
        free(ev);
        return NULL;
    }
    ev->device = device;
    ev->stream = NULL;
    return ev;
}

static void event_put(struct vq__gpu *g, struct vq__gpu_event *ev)
{
    struct vq__gpu_dev *d = &g->dev[ev->device];
    pthread_mutex_lock(&d->ev_lock);
    ev->next = d->free_events;
    d->free_events = ev;
    pthread_mutex_unlock(&d->ev_lock);
}

static void event_unref(struct vq__gpu *g, struct vq__gpu_event *ev)
{
    /* acq_rel: the last holder's recycling comes after every holder's use */
    int refs = atomic_fetch_sub_explicit(&ev->refs, 1, memory_order_acq_rel);
    VQ__ASSERT(refs >= 1); /* one reference per var carrying it */
    if (refs == 1)
        event_put(g, ev);
}

void vq__gpu_var_release(vq_var *v)
{
    event_unref(v->engine->gpu, v->gpu_ev);
    v->gpu_ev = NULL;
}

int vq__gpu_var_settle(vq_var *v)
{
    struct vq__gpu *g = v->engine->gpu;
    int rc = g->be->event_synchronize(v->gpu_ev->ev);
    vq__gpu_var_release(v);
    return rc;
}

/* ---- around an op ---- */

int vq__gpu_prepare(vq__op *op, const vq_exec_ctx *x)
{
    const struct vq__desc *o = op->desc;
    const struct vq__gpu *g = o->engine->gpu;
    int n = o->nwrites + o->nreads;
    if (o->flags & VQ__OPR_GPU) {
        op_backend = g->be;
        const struct vq__gpu_event *last = NULL;
        for (int i = 0; i < n; i++) {
            const struct vq__gpu_event *ev = o->vars[i]->gpu_ev;
            if (!ev || ev == last || ev->stream == x->stream)
                continue; /* same stream: stream order is enough */
            int rc = g->be->stream_wait_event(x->stream, ev->ev);
            if (rc < 0)
                return rc;
            last = ev;
        }
        return 0;
    }
    for (int i = 0; i < n; i++) {
        const struct vq__gpu_event *ev = o->vars[i]->gpu_ev;
        if (!ev)
            continue;
        int rc = g->be->event_synchronize(ev->ev);
        if (rc < 0)
            return rc;
    }
    /* The GPU work on the written vars is done: drop their events. */
    for (int i = 0; i < o->nwrites; i++)
        if (o->vars[i]->gpu_ev)
            vq__gpu_var_release(o->vars[i]);
    return 0;
}

int vq__gpu_launched(vq__op *op, const vq_exec_ctx *x, int err)
{
    const struct vq__desc *o = op->desc;
    vq_engine *e = o->engine;
    struct vq__gpu *g = e->gpu;
    if (!g->workers) {
        /* The naive engine, the serial oracle: the op's work is done when
         * the op is. */
        int rc = g->be->stream_synchronize(x->stream);
        return err ? err : rc;
    }
    int n = o->nwrites + o->nreads;
    if (n == 0)
        return err; /* nothing to order; vq_wait_all syncs the stream */
    /* Recorded even after a failure: part of the work may be queued, and
     * the next users of the vars must wait for it. Without an event (no
     * memory for one, or its record failed), the op waits for its stream
     * here instead: the vars' next users could not wait for work still
     * queued, which would then write into buffers they have freed. */
    struct vq__gpu_event *ev = event_get(g, x->ctx.id);
    int rc = ev ? g->be->event_record(ev->ev, x->stream) : VQ_ENOMEM;
    if (rc < 0) {
        if (ev)
            event_put(g, ev);
        int sync = g->be->stream_synchronize(x->stream);
        return err ? err : sync < 0 ? sync : 0;
    }
    ev->stream = x->stream;
    atomic_store_explicit(&ev->refs, n, memory_order_relaxed);
    /* The op has exclusive access to every var (nexcl == n). */
    VQ__ASSERT(o->nexcl == n);
    for (int i = 0; i < n; i++) {
        vq_var *v = o->vars[i];
        struct vq__gpu_event *old = v->gpu_ev;
        v->gpu_ev = ev;
        if (old)
            event_unref(g, old);
    }
    return err;
}

void *vq__gpu_op_stream(void)
{
    return op_stream;
}

int vq__gpu_call(const struct vq__desc *o, const vq_exec_ctx *x)
{
    const struct vq__gpu *g = o->engine->gpu;
    vq_exec_ctx native = *x;
    native.stream = g->be->stream_native(x->stream);
    void *outer = op_stream;
    op_stream = x->stream;
    int err = o->fn(o->arg, &native);
    op_stream = outer;
    return err;
}

int vq__gpu_sync_all(vq_engine *e)
{
    struct vq__gpu *g = e->gpu;
    int per = g->per_device, first = 0;
    for (int d = 0; d < g->ndev; d++)
        for (int k = 0; k < per; k++) {
            int rc = g->be->stream_synchronize(g->dev[d].streams[k]);
            if (rc < 0 && !first)
                first = rc;
        }
    return first;
}

VQ_API int vq_gpu_launch_host(const vq_exec_ctx *x, int (*fn)(void *arg), void *arg)
{
    if (!x || !fn)
        return vq__fail(VQ_EINVAL, "vq_gpu_launch_host: %s is NULL", x ? "fn" : "x");
    if (x->ctx.kind != VQ_DEV_GPU || !x->stream || !op_stream)
        return vq__fail(VQ_EINVAL, "vq_gpu_launch_host: not called from the fn of the GPU op "
                                   "whose context x is");
    const struct vq__stream_backend *be = op_backend;
    if (!be)
        be = atomic_load_explicit(&last_backend, memory_order_acquire);
    if (!be)
        return vq__fail(VQ_EINVAL, "vq_gpu_launch_host: no engine has set up a GPU");
    return be->launch_host(op_stream, fn, arg);
}
