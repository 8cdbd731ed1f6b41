/* The threaded engine's worker pools: ready queues, workers, sleeping and
 * waking, and the direct run of a successor.
 *
 * Each pool (the CPU pool, and the pool of prioritized workers when there is
 * one) has one ready queue in two parts: a lock-free bounded ring for the
 * common priority-0 op, and a small binary heap under a spinlock for ops
 * with another priority (and for priority-0 ops when the ring is full).
 * Workers take from the heap while its top is above 0, then from the ring,
 * then from the heap again: "higher first among ready ops".
 *
 * A worker that finds nothing spins briefly, then sleeps on the pool's
 * condition variable. The pusher looks at the count of sleepers after
 * queueing and signals only when someone sleeps, so a busy pool costs no
 * system call per push; a wake-up cannot be lost (see "sleeping and
 * waking" below for the fence that ensures it, which the sleeper pays).
 *
 * When an op completes on a worker and successors become ready, the worker
 * keeps one of them for itself and runs it next without a queue round trip
 * (direct run); the others are queued and wake sleepers.
 *
 * GPU pools (gpu.c) are the same pools; each of their workers owns one
 * stream and passes it, with its device, to the ops it runs. Only their own
 * workers run their ops (a helping pusher has no stream). */
#include "engine_internal.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define RING_CELLS (1u << 13)

static VQ__TLS struct vq__worker *self;
VQ__TLS vq_engine *vq__helping;

struct vq__worker *vq__self(void)
{
    return self;
}

/* ---- the ring (bounded MPMC, cell sequence numbers) ---- */

int vq__ring_init(struct vq__ring *q, size_t ncells)
{
    q->cells = vq__aligned_alloc(VQ__CACHELINE, ncells * sizeof *q->cells);
    if (!q->cells)
        return VQ_ENOMEM;
    for (size_t i = 0; i < ncells; i++) {
        atomic_init(&q->cells[i].seq, i);
        q->cells[i].op = NULL;
    }
    q->mask = ncells - 1;
    atomic_init(&q->enq, 0);
    atomic_init(&q->deq, 0);
    return 0;
}

/* Claims the cell at enq and fills it with op, or with *l when op is NULL
 * (then numbered from *pushed, see vq__ring_push_light).
 * hot path: no lock (lock-free). Returns false when full. */
static inline bool ring_push(struct vq__ring *q, vq__op *op, const struct vq__light *l,
                             atomic_ulong *pushed, unsigned long *ticket)
{
    size_t pos = atomic_load_explicit(&q->enq, memory_order_relaxed);
    for (;;) {
        struct vq__ring_cell *c = &q->cells[pos & q->mask];
        /* acquire: the consumer that freed this cell is done reading it */
        size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
        intptr_t dif = (intptr_t)seq - (intptr_t)pos;
        if (dif == 0) {
            if (atomic_compare_exchange_weak_explicit(&q->enq, &pos, pos + 1,
                                                      memory_order_relaxed, memory_order_relaxed)) {
                c->op = op;
                if (!op) {
                    c->light = *l;
                    /* relaxed: the ticket only numbers the push; the
                     * release below orders the count before the run */
                    *ticket = atomic_fetch_add_explicit(pushed, 1, memory_order_relaxed);
                }
                /* release: publishes the cell (and everything before the push) */
                atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
                return true;
            }
        } else if (dif < 0) {
            return false;
        } else {
            pos = atomic_load_explicit(&q->enq, memory_order_relaxed);
        }
    }
}

bool vq__ring_push(struct vq__ring *q, vq__op *op)
{
    return ring_push(q, op, NULL, NULL, NULL);
}

bool vq__ring_push_light(struct vq__ring *q, const struct vq__light *l, atomic_ulong *pushed,
                         unsigned long *ticket)
{
    return ring_push(q, NULL, l, pushed, ticket);
}

/* hot path: no lock (lock-free). Returns false when empty. */
bool vq__ring_pop(struct vq__ring *q, struct vq__item *it)
{
    size_t pos = atomic_load_explicit(&q->deq, memory_order_relaxed);
    for (;;) {
        struct vq__ring_cell *c = &q->cells[pos & q->mask];
        /* acquire: pairs with the producer's release of this cell */
        size_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
        intptr_t dif = (intptr_t)seq - (intptr_t)(pos + 1);
        if (dif == 0) {
            if (atomic_compare_exchange_weak_explicit(&q->deq, &pos, pos + 1,
                                                      memory_order_relaxed, memory_order_relaxed)) {
                it->op = c->op;
                if (!it->op)
                    it->light = c->light;
                VQ__ASSERT(it->op || it->light.fn); /* a full cell holds an op */
                /* release: the cell may be written again by a producer */
                atomic_store_explicit(&c->seq, pos + q->mask + 1, memory_order_release);
                return true;
            }
        } else if (dif < 0) {
            return false;
        } else {
            pos = atomic_load_explicit(&q->deq, memory_order_relaxed);
        }
    }
}

/* ---- the heap (priorities other than 0, ring overflow) ---- */

static bool heap_before(const struct vq__heap_item *a, const struct vq__heap_item *b)
{
    return a->priority > b->priority || (a->priority == b->priority && a->seq < b->seq);
}

static void heap_swap(struct vq__heap_item *a, struct vq__heap_item *b)
{
    struct vq__heap_item t = *a;
    *a = *b;
    *b = t;
}

/* Never fails: when the array cannot grow, the op is spilled. */
void vq__heap_push(struct vq__heap *h, vq__op *op)
{
    vq__spin_lock(&h->lock);
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 256;
        struct vq__heap_item *items = vq__realloc(h->items, cap * sizeof *items);
        if (!items) {
            op->next = NULL;
            if (h->spill_tail)
                h->spill_tail->next = op;
            else
                h->spill_head = op;
            h->spill_tail = op;
            atomic_fetch_add_explicit(&h->count, 1, memory_order_release);
            vq__spin_unlock(&h->lock);
            return;
        }
        h->items = items;
        h->cap = cap;
    }
    size_t i = h->n++;
    h->items[i] = (struct vq__heap_item){op->desc->priority, h->seq++, op};
    while (i > 0 && heap_before(&h->items[i], &h->items[(i - 1) / 2])) {
        heap_swap(&h->items[i], &h->items[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    atomic_store_explicit(&h->top_priority, h->items[0].priority, memory_order_relaxed);
    /* release: publishes the item to a worker that reads count */
    atomic_fetch_add_explicit(&h->count, 1, memory_order_release);
    vq__spin_unlock(&h->lock);
}

/* Pops the top if its priority is at least min_priority; spilled ops come
 * last, only for min_priority INT_MIN. */
vq__op *vq__heap_pop(struct vq__heap *h, int min_priority)
{
    vq__spin_lock(&h->lock);
    if (h->n == 0 || h->items[0].priority < min_priority) {
        vq__op *op = NULL;
        if (h->n == 0 && min_priority == INT_MIN && (op = h->spill_head)) {
            /* count is the array's items plus the spilled ops */
            VQ__ASSERT(atomic_load_explicit(&h->count, memory_order_relaxed) > 0);
            h->spill_head = op->next;
            if (!h->spill_head)
                h->spill_tail = NULL;
            atomic_fetch_sub_explicit(&h->count, 1, memory_order_release);
        }
        vq__spin_unlock(&h->lock);
        return op;
    }
    VQ__ASSERT(atomic_load_explicit(&h->count, memory_order_relaxed) >= (int)h->n);
    vq__op *op = h->items[0].op;
    h->items[0] = h->items[--h->n];
    for (size_t i = 0;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && heap_before(&h->items[l], &h->items[m]))
            m = l;
        if (r < h->n && heap_before(&h->items[r], &h->items[m]))
            m = r;
        if (m == i)
            break;
        heap_swap(&h->items[i], &h->items[m]);
        i = m;
    }
    atomic_store_explicit(&h->top_priority, h->n ? h->items[0].priority : INT_MIN,
                          memory_order_relaxed);
    atomic_fetch_sub_explicit(&h->count, 1, memory_order_release);
    vq__spin_unlock(&h->lock);
    return op;
}

static bool heap_has_above(struct vq__heap *h, int priority)
{
    return atomic_load_explicit(&h->count, memory_order_acquire) > 0 &&
           atomic_load_explicit(&h->top_priority, memory_order_relaxed) > priority;
}

/* ---- pools ---- */

/* hot path: no malloc; no lock while the heap is empty, else its spinlock */
bool vq__pool_pop(struct vq__wpool *p, struct vq__item *it)
{
    if (heap_has_above(&p->heap, 0) && (it->op = vq__heap_pop(&p->heap, 1)))
        return true;
    if (vq__ring_pop(&p->ring, it))
        return true;
    if (atomic_load_explicit(&p->heap.count, memory_order_acquire) > 0)
        return (it->op = vq__heap_pop(&p->heap, INT_MIN)) != NULL;
    return false;
}

/* ---- sleeping and waking ----
 *
 * A submit queues its ops, then looks whether a worker sleeps; a worker
 * going to sleep counts itself in sleepers, then looks at the queue once
 * more. One of the two must see the other (a Dekker pair), which needs a
 * full fence between each side's write and its read. A fence (or the
 * read-modify-write that stood for one) costs ~20 cycles per submit, a
 * quarter of a light op's push, while workers go to sleep rarely. So, as
 * userspace RCU and folly's asymmetric barriers do, the submit's side is
 * only a compiler barrier, and the sleeper pays for both with
 * membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED): when it returns, every
 * running thread of the process has passed a full memory barrier since it
 * was called. So either a submit's look at sleepers comes after that
 * barrier on its CPU, and sees the sleeper counted (its increment came
 * before the call), or the submit's ops, written before the look in
 * program order, were visible by the end of the call, and the sleeper's
 * last look finds them. Measured: independent empty ops, 2 workers,
 * 53-54 -> 19-22 ns per op (bench_varq, 3 alternated pairs, loaded
 * machine; a cheaper push also lets the pusher run more of them itself,
 * past the throttle's mark), a chain on one var 123-133 -> 95-105. Where
 * membarrier is missing (not Linux, an old kernel, a seccomp filter that
 * refuses it) the submit keeps the read-modify-write. */

#if defined(__linux__) && defined(SYS_membarrier)
static bool heavy_fence_register(void)
{
    return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

static bool heavy_fence(void)
{
    return syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
}
#else
static bool heavy_fence_register(void)
{
    return false;
}

static bool heavy_fence(void)
{
    return false;
}
#endif

/* Wakes up to n sleeping workers after ops were queued. */
static void wake(struct vq__wpool *p, int n)
{
    int sleepers;
    if (atomic_load_explicit(&p->light_fence, memory_order_relaxed)) {
        /* the ops' stores stay before the load (the sleeper's membarrier
         * orders them for the CPU) */
        atomic_signal_fence(memory_order_seq_cst);
        sleepers = atomic_load_explicit(&p->sleepers, memory_order_relaxed);
    } else {
        /* through read-modify-writes of one variable (their order is
         * total): if ours comes first, the worker's increment reads from
         * it and its last look sees our ops; otherwise we see it counted */
        sleepers = atomic_fetch_add(&p->sleepers, 0);
    }
    if (sleepers > 0) {
        pthread_mutex_lock(&p->sleep_lock);
        if (n >= sleepers)
            pthread_cond_broadcast(&p->sleep_cond);
        else
            for (int i = 0; i < n; i++)
                pthread_cond_signal(&p->sleep_cond);
        pthread_mutex_unlock(&p->sleep_lock);
    }
}

/* hot path: no lock for priority-0 ops that find room in the ring; the
 * heap's spinlock (and a rare realloc) for the others, and sleep_lock when
 * a worker sleeps and must be woken. */
void vq__pool_submit(struct vq__wpool *p, vq__op *const *ops, int n, bool may_wait)
{
    for (int i = 0; i < n; i++) {
        vq__op *op = ops[i];
        bool plain = op->desc->priority == 0;
        if (plain && vq__ring_push(&p->ring, op))
            continue;
        if (plain && may_wait) {
            /* The ring is full: the pusher makes room by running the oldest
             * ready ops itself, as a worker would. */
            wake(p, n);
            while (!vq__ring_push(&p->ring, op))
                if (!vq__run_here(p, NULL))
                    sched_yield();
            continue;
        }
        vq__heap_push(&p->heap, op);
    }
    wake(p, n);
}

/* hot path: no lock */
bool vq__pool_submit_light(struct vq__wpool *p, const struct vq__light *l, atomic_ulong *pushed,
                           unsigned long *ticket)
{
    if (!vq__ring_push_light(&p->ring, l, pushed, ticket))
        return false;
    wake(p, 1);
    return true;
}

bool vq__pool_idle(struct vq__wpool *p)
{
    /* A worker counts itself a sleeper before its last look at the queue
     * (worker_sleep), so all of them counted and an empty queue mean that
     * none has an op in hand. The answer may be stale at once: the
     * throttle uses it only to stop waiting. */
    return atomic_load(&p->sleepers) == p->nworkers &&
           atomic_load(&p->ring.enq) == atomic_load(&p->ring.deq) &&
           atomic_load(&p->heap.count) == 0;
}

/* Runs one queued op of p on the calling thread (a pusher that helps),
 * and with until, the successors it makes ready as vq__run_op_here does.
 * Returns false when none was queued. */
bool vq__run_here(struct vq__wpool *p, const atomic_bool *until)
{
    if (p->device)
        return false; /* its ops need a worker's stream */
    struct vq__item it;
    if (!vq__pool_pop(p, &it))
        return false;
    if (!it.op) {
        vq_exec_ctx x = {.ctx = {VQ_DEV_CPU, 0}, .stream = NULL, .worker = -1};
        vq_engine *outer = vq__helping;
        vq__helping = it.light.engine; /* its loops may borrow the workers (parallel.c) */
        vq__light_run(&it.light, &x);
        vq__helping = outer;
        return true;
    }
    vq__run_op_here(it.op, until);
    return true;
}

/* The op of r that a waiting thread runs next, taken out of r: the
 * highest-priority one of the engine's CPU pool, unless that pool has a
 * queued op above it; else NULL. */
static vq__op *take_successor(vq__ready *r)
{
    vq_engine *e = r->engine;
    int best = -1;
    for (int i = 0; i < r->n; i++)
        if (vq__pool_of(e, r->ops[i]) == &e->cpu &&
            (best < 0 || r->ops[i]->desc->priority > r->ops[best]->desc->priority))
            best = i;
    if (best < 0 || heap_has_above(&e->cpu.heap, r->ops[best]->desc->priority))
        return NULL;
    vq__op *op = r->ops[best];
    r->ops[best] = r->ops[--r->n];
    return op;
}

void vq__run_op_here(vq__op *op, const atomic_bool *until)
{
    vq_exec_ctx x = {.ctx = {VQ_DEV_CPU, 0}, .stream = NULL, .worker = -1};
    vq_engine *outer = vq__helping;
    vq__helping = op->desc->engine; /* its loops may borrow the workers (parallel.c) */
    while (op) {
        vq__ready r = {.engine = op->desc->engine};
        vq__op_run(op, &x, &r);
        op = NULL;
        /* A waiter goes on as a worker would, with one op its op made
         * ready (a chain's next), until its wait is answered. */
        if (r.n && until && !atomic_load_explicit(until, memory_order_acquire))
            op = take_successor(&r);
        vq__ready_flush(&r);
    }
    vq__helping = outer;
}

/* Waits for an op: spins a little, then sleeps. False when the pool stops. */
static bool worker_sleep(struct vq__wpool *p, int looks, struct vq__item *it)
{
    for (int i = 0; i < looks; i++) {
        if (vq__pool_pop(p, it))
            return true;
        if (atomic_load_explicit(&p->stop, memory_order_relaxed))
            return false;
        vq__spin_pause(i);
    }
    bool got;
    pthread_mutex_lock(&p->sleep_lock);
    atomic_fetch_add(&p->sleepers, 1);
    if (atomic_load_explicit(&p->light_fence, memory_order_relaxed) && !heavy_fence()) {
        /* Refused after it was registered (it should not be): submits go
         * back to the read-modify-write, and since one that had already
         * chosen the compiler barrier may have missed this worker, sleeps
         * are timed from now on. */
        atomic_store(&p->light_fence, false);
        p->fence_failed = true;
    }
    while (!(got = vq__pool_pop(p, it)) && !atomic_load(&p->stop)) {
        if (!p->fence_failed) {
            pthread_cond_wait(&p->sleep_cond, &p->sleep_lock);
            continue;
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 1000000; /* 1 ms */
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&p->sleep_cond, &p->sleep_lock, &until);
    }
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->sleep_lock);
    return got;
}

/* Keeps one op of r that this worker's pool runs, for a direct run, unless a
 * queued op has a higher priority. */
static void keep_successor(struct vq__worker *w, vq__ready *r)
{
    vq_engine *e = w->engine;
    int best = -1;
    for (int i = 0; i < r->n; i++) {
        bool ours = vq__pool_of(e, r->ops[i]) == w->pool;
        if (ours && (best < 0 || r->ops[i]->desc->priority > r->ops[best]->desc->priority))
            best = i;
    }
    if (best < 0 || heap_has_above(&w->pool->heap, r->ops[best]->desc->priority))
        return;
    w->next = r->ops[best];
    r->ops[best] = r->ops[--r->n];
}

static void *worker_main(void *arg)
{
    struct vq__worker *w = arg;
    struct vq__wpool *p = w->pool;
    self = w;
    vq_exec_ctx x = {.ctx = w->ctx, .stream = w->stream, .worker = w->id};
    for (;;) {
        struct vq__item it = {.op = w->next};
        w->next = NULL;
        if (!it.op && !vq__pool_pop(p, &it) && !worker_sleep(p, w->engine->spin_looks, &it))
            break;
        if (!it.op) {
            vq__light_run(&it.light, &x);
            continue;
        }
        vq__ready r = {.engine = w->engine};
        vq__op_run(it.op, &x, &r);
        if (r.n) {
            keep_successor(w, &r);
            vq__ready_flush(&r);
        }
    }
    self = NULL;
    return NULL;
}

/* Binds CPU worker i of n (engine-wide numbering) to one CPU of the
 * process's mask, as e->cpu_bind says (engine.h). Best effort: a failure
 * leaves the worker where the scheduler puts it. */
static void worker_bind(const vq_engine *e, pthread_t t, int i, int n)
{
    cpu_set_t allowed, one;
    if (e->cpu_bind == VQ_CPU_BIND_NONE || sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return;
    int m = CPU_COUNT(&allowed);
    if (m < 1 || n < 1)
        return;
    int pos = e->cpu_bind == VQ_CPU_BIND_SPREAD && n <= m ? (int)((long)i * m / n) : i % m;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed) || pos-- > 0)
            continue;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        (void)pthread_setaffinity_np(t, sizeof one, &one);
        return;
    }
}

int vq__pool_start(vq_engine *e, struct vq__wpool *p, int nworkers, int first_id, vq_ctx ctx,
                   void *const *streams)
{
    memset(p, 0, sizeof *p);
    if (vq__ring_init(&p->ring, RING_CELLS) < 0)
        return vq__fail(VQ_ENOMEM, "out of memory for a ready queue");
    p->workers = vq__aligned_alloc(VQ__CACHELINE, (size_t)nworkers * sizeof *p->workers);
    if (!p->workers) {
        free(p->ring.cells);
        return vq__fail(VQ_ENOMEM, "out of memory for %d workers", nworkers);
    }
    atomic_flag_clear(&p->heap.lock.flag);
    atomic_init(&p->light_fence, heavy_fence_register());
    p->device = streams != NULL;
    pthread_mutex_init(&p->sleep_lock, NULL);
    pthread_cond_init(&p->sleep_cond, NULL);
    for (int i = 0; i < nworkers; i++) {
        struct vq__worker *w = &p->workers[i];
        memset(w, 0, sizeof *w);
        w->pool = p;
        w->engine = e;
        w->id = first_id + i;
        w->ctx = ctx;
        w->stream = streams ? streams[i] : NULL;
        vq__prof_buf_init(&w->prof);
        if (pthread_create(&w->thread, NULL, worker_main, w) != 0) {
            vq__prof_buf_destroy(&w->prof);
            p->nworkers = i;
            vq__pool_stop(p);
            return vq__fail(VQ_ENOMEM, "cannot start worker %d", first_id + i);
        }
        if (!streams) /* CPU workers (GPU workers wait on their streams) */
            worker_bind(e, w->thread, first_id + i, e->cpu_workers + e->cpu_prio_workers);
    }
    p->nworkers = nworkers;
    return 0;
}

/* The pool's queue must be empty (no op pending). */
void vq__pool_stop(struct vq__wpool *p)
{
    pthread_mutex_lock(&p->sleep_lock);
    atomic_store(&p->stop, true);
    pthread_cond_broadcast(&p->sleep_cond);
    pthread_mutex_unlock(&p->sleep_lock);
    for (int i = 0; i < p->nworkers; i++) {
        pthread_join(p->workers[i].thread, NULL);
        vq__prof_buf_destroy(&p->workers[i].prof);
    }
    pthread_mutex_destroy(&p->sleep_lock);
    pthread_cond_destroy(&p->sleep_cond);
    free(p->heap.items);
    free(p->ring.cells);
    free(p->workers);
}
