/* The engine's hot path: pushing ops (vq_push, prebuilt ops, held pushes),
 * dispatching them, and the life of one op from push to completion. Its
 * neighbours: creating and freeing engines and vars (engine_new.c), and
 * deleting vars and waiting (wait.c), which pushes its ops through here.
 *
 * A push validates the task, builds an op (struct vq__op) from the pools,
 * merges duplicate vars, appends one access per var to the var queues
 * (var.c) and drops the pusher's own count; whoever brings the op's wait
 * counter to zero dispatches it. The threaded engine hands it to a worker
 * pool (threaded.c); the naive engine (naive.c) runs it in the pushing
 * thread instead of queueing it. A throttle (its own section below) keeps
 * a pusher from running too far ahead of the workers.
 *
 * Completion (vq__op_finish) is where errors travel: a failed op poisons the
 * vars it writes, an op that finds a poisoned var is skipped and passes the
 * error on, and the engine keeps the first error for vq_wait_all.
 *
 * GPU ops (ctx VQ_DEV_GPU) take the same path with three differences, each
 * behind one test that CPU ops pass at no cost: the push goes through the
 * slow path (validate_task creates the engine's GPU state, gpu.c), the op
 * queues all its vars as writes (desc.nexcl), and vq__op_run brackets its
 * function with the stream waits and the event record of gpu.c. A CPU op
 * synchronizes the events on its vars only when the engine has GPU state
 * (one relaxed load of gpu_on, beside the profile flag it reads anyway). */
#include "engine_internal.h"
#include "var_append.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>

VQ__TLS int vq__in_op;
/* vq_op_wait_error() of the op whose fn runs on this thread. */
static VQ__TLS int cur_wait_err;

/* The push path's steps, inlined into each push call (one function body
 * instead of a chain of calls, each saving and restoring registers). */
#define HOT inline __attribute__((always_inline))

/* ---- building and pushing ops ---- */

int vq__check_var(vq_engine *e, const vq_var *v, const char *fn, const char *what, int i)
{
    if (!v)
        return vq__fail(VQ_EINVAL, "%s: %s[%d] is NULL", fn, what, i);
    if (v->engine != e)
        return vq__fail(VQ_EINVAL, "%s: %s[%d] (\"%s\") belongs to another engine", fn, what, i,
                        v->name);
    if (atomic_load_explicit(&v->state, memory_order_relaxed) != VQ__VAR_LIVE)
        return vq__fail(VQ_EINVAL, "%s: %s[%d] (\"%s\") has been freed", fn, what, i, v->name);
    return 0;
}

static int validate_task(vq_engine *e, const vq_task *t, const char *fn)
{
    if (!e)
        return vq__fail(VQ_EINVAL, "%s: engine is NULL", fn);
    if (!t)
        return vq__fail(VQ_EINVAL, "%s: task is NULL", fn);
    if (!t->fn == !t->async_fn)
        return vq__fail(VQ_EINVAL, "%s: task \"%s\" must set exactly one of fn and async_fn", fn,
                        t->name ? t->name : "");
    if (t->nreads < 0 || t->nwrites < 0)
        return vq__fail(VQ_EINVAL, "%s: task \"%s\" has nreads %d, nwrites %d", fn,
                        t->name ? t->name : "", t->nreads, t->nwrites);
    if ((t->nreads && !t->reads) || (t->nwrites && !t->writes))
        return vq__fail(VQ_EINVAL, "%s: task \"%s\" has a NULL var array with a positive count",
                        fn, t->name ? t->name : "");
    if (t->props & ~(unsigned)(VQ_PROP_CPU_PRIORITIZED | VQ_PROP_COPY_TO_DEV |
                               VQ_PROP_COPY_FROM_DEV | VQ_PROP_RUN_ON_FAILED))
        return vq__fail(VQ_EINVAL, "%s: task \"%s\" has unknown props 0x%x", fn,
                        t->name ? t->name : "", t->props);
    if (t->ctx.kind == VQ_DEV_GPU) {
        /* A GPU op completes at launch (its event carries the rest), so
         * an async completion has no meaning for it. */
        if (t->async_fn)
            return vq__fail(VQ_EINVAL,
                            "%s: task \"%s\" on GPU %d is async: GPU ops must be sync fns "
                            "(they enqueue work on x->stream and complete at launch)",
                            fn, t->name ? t->name : "", t->ctx.id);
        if (t->props & VQ_PROP_CPU_PRIORITIZED)
            return vq__fail(VQ_EINVAL, "%s: task \"%s\" on GPU %d is CPU-prioritized", fn,
                            t->name ? t->name : "", t->ctx.id);
        if ((t->props & VQ_PROP_COPY_TO_DEV) && (t->props & VQ_PROP_COPY_FROM_DEV))
            return vq__fail(VQ_EINVAL, "%s: task \"%s\" is a copy both to and from the device",
                            fn, t->name ? t->name : "");
        int rc = vq__gpu_check(e, t->ctx, fn, t->name ? t->name : "");
        if (rc < 0)
            return rc;
    } else {
        if (t->ctx.kind != VQ_DEV_CPU || t->ctx.id != 0)
            return vq__fail(VQ_EINVAL, "%s: task \"%s\" has an unknown ctx {%d, %d}", fn,
                            t->name ? t->name : "", t->ctx.kind, t->ctx.id);
        if (t->props & (VQ_PROP_COPY_TO_DEV | VQ_PROP_COPY_FROM_DEV))
            return vq__fail(VQ_EINVAL, "%s: task \"%s\" is a device copy on a CPU ctx", fn,
                            t->name ? t->name : "");
    }
    for (int i = 0; i < t->nreads; i++) {
        int rc = vq__check_var(e, t->reads[i], fn, "reads", i);
        if (rc < 0)
            return rc;
    }
    for (int i = 0; i < t->nwrites; i++) {
        int rc = vq__check_var(e, t->writes[i], fn, "writes", i);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The cheap part of validate_task, for the push path: true when the task's
 * fields (not its vars) are acceptable for a CPU op. */
static inline bool task_shape_ok(const vq_engine *e, const vq_task *t)
{
    return e && t && !t->fn != !t->async_fn && (t->nreads | t->nwrites) >= 0 &&
           (!t->nreads || t->reads) && (!t->nwrites || t->writes) &&
           !(t->props & ~(unsigned)(VQ_PROP_CPU_PRIORITIZED | VQ_PROP_RUN_ON_FAILED)) &&
           t->ctx.kind == VQ_DEV_CPU &&
           t->ctx.id == 0;
}

static inline bool var_ok(const vq_engine *e, const vq_var *v)
{
    return v && v->engine == e &&
           atomic_load_explicit(&v->state, memory_order_relaxed) == VQ__VAR_LIVE;
}

static inline bool contains(vq_var *const *vars, int n, const vq_var *v)
{
    for (int i = 0; i < n; i++)
        if (vars[i] == v)
            return true;
    return false;
}

struct tagged {
    vq_var *v;
    int index; /* position in writes, then reads */
};

static int cmp_tagged(const void *a, const void *b)
{
    const struct tagged *x = a, *y = b;
    if (x->v != y->v)
        return (uintptr_t)x->v < (uintptr_t)y->v ? -1 : 1;
    return x->index - y->index;
}

/* merge_vars for more than 32 vars: sort (var, position) pairs; the first
 * occurrence of each var in writes-then-reads order is kept, which also
 * makes a var that is both read and written a write. */
static int merge_many_vars(const vq_task *t, vq_var **vars, int *nw, int *nr)
{
    int n = t->nwrites + t->nreads, w = 0, r = 0;
    struct tagged *tg = vq__malloc((size_t)n * sizeof *tg);
    bool *keep = vq__calloc((size_t)n, sizeof *keep);
    if (!tg || !keep) {
        free(tg);
        free(keep);
        return VQ_ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        tg[i].v = i < t->nwrites ? t->writes[i] : t->reads[i - t->nwrites];
        tg[i].index = i;
    }
    /* stable: a var's entries stay in writes-then-reads order */
    if (!vq__sort_by_addr(tg, n, sizeof *tg))
        qsort(tg, (size_t)n, sizeof *tg, cmp_tagged);
    for (int i = 0; i < n; i++)
        if (i == 0 || tg[i].v != tg[i - 1].v)
            keep[tg[i].index] = true;
    for (int i = 0; i < n; i++) {
        if (!keep[i])
            continue;
        if (i < t->nwrites)
            vars[w++] = t->writes[i];
        else
            vars[w + r++] = t->reads[i - t->nwrites];
    }
    free(tg);
    free(keep);
    *nw = w;
    *nr = r;
    return 0;
}

/* Fills vars with the task's writes, then its reads, each var once, in the
 * order given; a var both read and written is a write. Returns the number of
 * distinct writes through *nw, of reads through *nr. With check, returns
 * VQ_EINVAL (and no message: validate_task finds it) for a NULL, foreign or
 * freed var. Or VQ_ENOMEM. */
static HOT int merge_vars(vq_engine *e, const vq_task *restrict t, vq_var **restrict vars, int *nw,
                          int *nr, bool check)
{
    int n = t->nwrites + t->nreads, w = 0, r = 0;
    if (n == 1) { /* the most common op, a chain's: nothing to merge */
        vars[0] = t->nwrites ? t->writes[0] : t->reads[0];
        *nw = t->nwrites;
        *nr = t->nreads;
        return !check || var_ok(e, vars[0]) ? 0 : VQ_EINVAL;
    }
    for (int i = 0; i < n && check; i++)
        if (!var_ok(e, i < t->nwrites ? t->writes[i] : t->reads[i - t->nwrites]))
            return VQ_EINVAL;
    if (n > 32)
        return merge_many_vars(t, vars, nw, nr);
    for (int i = 0; i < t->nwrites; i++)
        if (!contains(vars, w, t->writes[i]))
            vars[w++] = t->writes[i];
    for (int i = 0; i < t->nreads; i++)
        if (!contains(vars, w + r, t->reads[i]))
            vars[w + r++] = t->reads[i];
    *nw = w;
    *nr = r;
    return 0;
}

/* Fills o from t. vars must hold nreads + nwrites entries. */
static HOT int opr_fill(struct vq__desc *restrict o, vq_engine *e, const vq_task *restrict t,
                        vq_var **restrict vars, unsigned flags)
{
    o->fn = t->fn;
    o->async_fn = t->async_fn;
    o->arg = t->arg;
    o->arg_free = t->arg_free;
    o->engine = e;
    o->name = t->name;
    o->vars = vars;
    o->priority = t->priority;
    o->props = t->props;
    o->ctx = t->ctx;
    if (t->ctx.kind == VQ_DEV_GPU)
        flags |= VQ__OPR_GPU;
    /* Internal ops (waits, deletions) act on vars the caller has checked. */
    int nw = 0, nr = 0;
    int rc = merge_vars(e, t, vars, &nw, &nr, !(flags & VQ__OPR_NOSKIP));
    o->nwrites = nw;
    o->nreads = nr;
    /* A GPU op's reads queue as writes: concurrent GPU readers would race
     * on the var's event, and a launch takes microseconds, so serializing
     * launches costs little (the stream work itself still overlaps). */
    o->nexcl = flags & VQ__OPR_GPU ? nw + nr : nw;
    /* Only plain ops group (var.c): sync CPU functions that an error may
     * skip (fn set: validation leaves async_fn NULL then; internal ops are
     * NOSKIP or have no fn), writing a var, on an engine that does not
     * profile (each op keeps its own record). */
    if (nw > 0 && t->fn &&
        !(flags & (VQ__OPR_NOSKIP | VQ__OPR_DELETE | VQ__OPR_GPU | VQ__OPR_HELD)) &&
        !(t->props & VQ_PROP_RUN_ON_FAILED) && !e->profile)
        flags |= VQ__OPR_GROUPABLE;
    o->flags = flags;
    if (rc == 0 && (flags & VQ__OPR_SORTED)) {
        /* vars has room for 2n (see vq__push_task and vq_opr_new) */
        int n = nw + nr;
        memcpy(vars + n, vars, (size_t)n * sizeof *vars);
        vq__var_sort(vars + n, n);
    }
    return rc;
}

/* ---- queueing ops on their vars ---- */

static void dispatch(vq_engine *e, vq__op *op)
{
    vq__pool_submit(vq__pool_of(e, op), &op, 1, vq__self() == NULL);
}

void vq__ready_flush(vq__ready *r)
{
    vq_engine *e = r->engine;
    vq__op *cpu[VQ__READY_BATCH], *prio[VQ__READY_BATCH];
    int nc = 0, np = 0;
    for (int i = 0; i < r->n; i++) {
        struct vq__wpool *p = vq__pool_of(e, r->ops[i]);
        if (p == &e->cpu)
            cpu[nc++] = r->ops[i];
        else if (p == &e->prio)
            prio[np++] = r->ops[i];
        else
            vq__pool_submit(p, &r->ops[i], 1, false); /* a GPU pool */
    }
    r->n = 0;
    if (nc)
        vq__pool_submit(&e->cpu, cpu, nc, false);
    if (np)
        vq__pool_submit(&e->prio, prio, np, false);
}

static void vblocks_free(struct vq__vblock *b)
{
    while (b) {
        struct vq__vblock *next = b->next;
        vq__pool_free(VQ__POOL_VBLOCK, b);
        b = next;
    }
}

/* Takes n var blocks from the pool into *list; false (and none taken)
 * when out of memory. */
static HOT bool vblocks_take(int n, struct vq__vblock **list)
{
    for (int i = 0; i < n; i++) {
        struct vq__vblock *b = vq__pool_alloc(VQ__POOL_VBLOCK);
        if (!b) {
            vblocks_free(*list);
            *list = NULL;
            return false;
        }
        b->next = *list;
        *list = b;
    }
    return true;
}

/* The calling thread's last push joined a group (see op_enqueue). */
static VQ__TLS bool joined_last;

/* The calling thread's last push: its place in the engine's push order
 * (also set by wait.c for the ops it does at once). */
VQ__TLS unsigned long vq__last_ticket;

unsigned long vq__push_ticket(void)
{
    return vq__last_ticket;
}

/* A synchronous caller's first ready op (vq__defer_begin): kept from the
 * workers, for the caller to run when it has pushed the rest and waits. */
static VQ__TLS struct {
    vq_engine *engine; /* deferring on it; NULL: not deferring */
    vq__op *kept;
    int after; /* ops pushed since it was kept */
} defer;

/* Pushes after which a kept op goes to the workers after all: the caller
 * is pushing a long program, and the op should not wait for its end. */
#define DEFER_PUSHES 64

/* op became ready at its push: to its pool, unless the pusher keeps it. */
static HOT void dispatch_pushed(vq_engine *e, vq__op *op)
{
    if (__builtin_expect(defer.engine == e, 0) && !defer.kept && vq__pool_of(e, op) == &e->cpu) {
        defer.kept = op;
        defer.after = 0;
        return;
    }
    dispatch(e, op);
}

void vq__defer_begin(vq_engine *e)
{
    if (e && e->kind == VQ_ENGINE_THREADED && !vq__in_op && !vq__self() && !defer.engine)
        defer.engine = e;
}

void vq__defer_end(vq_engine *e, const atomic_bool *until)
{
    if (!e || defer.engine != e)
        return;
    vq__op *op = defer.kept;
    defer.engine = NULL;
    defer.kept = NULL;
    if (op)
        vq__run_op_here(op, until);
}

/* hot path: no malloc after warm-up; the op's var spinlocks, then, to
 * dispatch, its pool's heap spinlock or sleep_lock (threaded.c). The naive
 * engine's push is not hot: it runs the op under naive_lock.
 * Appends op's accesses to its vars and dispatches it if nothing holds it
 * back. fn: the API call, for the message. */
static HOT int op_enqueue(vq_engine *e, vq__op *op, const char *fn, struct vq__vblock **given)
{
    const struct vq__desc *o = op->desc;
    int n = o->nwrites + o->nreads;
    op->naive = NULL;
    op->group_n = 0;
    if (e->kind == VQ_ENGINE_NAIVE) {
        vq__naive_push(op);
        return 0;
    }

    /* One block per var, taken before touching any queue so that running
     * out of memory leaves nothing half pushed; none when this thread's
     * last push joined a group (a chain): this one likely joins too, and
     * takes them only if it does not. */
    struct vq__vblock *spare = NULL;
    bool try_join = joined_last && (o->flags & VQ__OPR_GROUPABLE);
    if (__builtin_expect(given != NULL, 0)) /* n of them, from a reserve */
        spare = *given;
    else if (!try_join && !vblocks_take(n, &spare))
        return vq__fail(VQ_ENOMEM, "%s: out of memory", fn);

    /* The lock order: kept by the op, or one var (already in order), or
     * sorted here (n <= VQ__INLINE_VARS). */
    vq_var *sorted[VQ__INLINE_VARS];
    vq_var *const *order = o->flags & VQ__OPR_SORTED ? o->vars + n : o->vars;
    if (n > 1 && !(o->flags & VQ__OPR_SORTED)) {
        memcpy(sorted, o->vars, (size_t)n * sizeof *sorted);
        vq__var_sort(sorted, n);
        order = sorted;
    }
    atomic_store_explicit(&op->wait, n + 1, memory_order_relaxed);
    int granted = vq__var_append_op(op, order, &spare, &vq__last_ticket);
    if (__builtin_expect(granted == VQ__APPEND_NO_BLOCKS, 0)) {
        if (!vblocks_take(n, &spare))
            return vq__fail(VQ_ENOMEM, "%s: out of memory", fn);
        granted = vq__var_append_op(op, order, &spare, &vq__last_ticket);
    }
    if (__builtin_expect(given != NULL, 0))
        *given = spare; /* what the accesses did not use, back to the reserve */
    else
        vblocks_free(spare);
    joined_last = granted == VQ__APPEND_JOINED;
    if (__builtin_expect(defer.kept != NULL, 0) && ++defer.after > DEFER_PUSHES) {
        dispatch(defer.engine, defer.kept); /* (the kept op's engine, maybe not e) */
        defer.kept = NULL;
    }
    if (joined_last)
        return 0; /* joined the group of the op queued last on its vars */
    /* The pusher's own count goes with the accesses granted above; a held
     * op's stays until vq__push_release_until (it joins no group: not groupable). */
    int own = o->flags & VQ__OPR_HELD ? 0 : 1;
    int wait = atomic_fetch_sub_explicit(&op->wait, granted + own, memory_order_acq_rel);
    VQ__ASSERT(wait >= granted + 1); /* a grant counted here is not granted again */
    if (wait == granted + own)
        dispatch_pushed(e, op);
    return 0;
}

/* Drops the count a held op's pusher kept (VQ__OPR_HELD): when that was
 * the last one, the op is ready, and this thread, which is about to wait
 * for it, runs it at once, without a worker's wake-up and the handoff
 * back; an op that needs a worker's stream (a GPU op) goes to its pool.
 * Otherwise the access granted last dispatches it, as for any op. */
void vq__push_release_until(vq_engine *e, vq__op *op, const atomic_bool *until)
{
    if (atomic_fetch_sub_explicit(&op->wait, 1, memory_order_acq_rel) != 1)
        return;
    struct vq__wpool *p = vq__pool_of(e, op);
    if (p->device || vq__in_op || vq__self())
        dispatch(e, op);
    else
        vq__run_op_here(op, until);
}

static vq__op *op_alloc(const char *fn)
{
    vq__op *op = vq__pool_alloc(VQ__POOL_OP);
    if (!op)
        vq__fail(VQ_ENOMEM, "%s: out of memory", fn);
    else
        op->spare_of = NULL;
    return op;
}

/* Pushes a task that has been validated. flags: VQ__OPR_* for internal ops;
 * fn: the API call, for messages. With VQ__OPR_HELD (a threaded engine
 * only), *held gets the op, which stays unready until vq__push_release_until. */
HOT int vq__push_task(vq_engine *e, const vq_task *t, unsigned flags, const char *fn, vq__op **held)
{
    vq__op *op = op_alloc(fn);
    if (!op)
        return VQ_ENOMEM;
    int n = t->nreads + t->nwrites;
    vq_var **vars = op->inline_vars;
    flags |= VQ__OPR_EMBEDDED;
    if (n > VQ__INLINE_VARS) {
        /* room for the lock order after the vars, sorted once here */
        vars = vq__malloc(2 * (size_t)n * sizeof *vars);
        if (!vars) {
            vq__pool_free(VQ__POOL_OP, op);
            return vq__fail(VQ_ENOMEM, "%s: out of memory", fn);
        }
        flags |= VQ__OPR_HEAPVARS | VQ__OPR_SORTED;
    }
    int rc = opr_fill(&op->embedded, e, t, vars, flags);
    if (rc < 0) {
        if (flags & VQ__OPR_HEAPVARS)
            free(vars);
        vq__pool_free(VQ__POOL_OP, op);
        return rc == VQ_EINVAL ? validate_task(e, t, fn)
                               : vq__fail(VQ_ENOMEM, "%s: out of memory", fn);
    }
    op->desc = &op->embedded;
    rc = op_enqueue(e, op, fn, NULL);
    if (rc < 0) {
        if (flags & VQ__OPR_HEAPVARS)
            free(vars);
        vq__pool_free(VQ__POOL_OP, op);
    } else if (held) {
        *held = op;
    }
    return rc;
}

/* ---- the throttle: how far a pusher may run ahead ----
 *
 * A pusher that runs far ahead of the workers fills memory
 * with waiting ops whose blocks have gone cold by the time they run. So
 * every 64 pushes a pusher that is not a worker compares the ops in flight
 * with max_pending; past it, the pusher helps: it runs queued ready ops
 * itself (or backs off when none is ready) until half of them are done.
 * While over 64 ops per worker are in flight, the workers have plenty to do:
 * a sync op with no vars, which nothing orders, then runs at once in the
 * pusher's thread, as libgomp runs an undeferred task past its throttle.
 *
 * The throttle waits only for work the engine can do. When no worker runs
 * or has queued an op, what is in flight is async ops that were started and
 * wait for their vq_done_finish, and ops queued behind them: their
 * completion is external, and may well be due from this very thread after
 * its pushes (an event loop). The pusher then stops waiting and pushes on:
 * vq_push never blocks on a completion only its caller could make. */
static VQ__TLS unsigned push_tick;
/* The engine this thread last found saturated, or NULL: a thread pushing
 * on several engines runs an op at once only on the busy one. */
static VQ__TLS const vq_engine *saturated;

static unsigned long in_flight(vq_engine *e)
{
    unsigned long done = atomic_load_explicit(&e->completed, memory_order_relaxed);
    return atomic_load_explicit(&e->pushed, memory_order_relaxed) - done;
}

static void throttle(vq_engine *e)
{
    unsigned long n = in_flight(e);
    saturated = n > 64ul * (unsigned long)e->cpu_workers ? e : NULL;
    if (n <= e->max_pending)
        return;
    /* Nothing ready to help with (a chain waits on its var, not in the
     * queue): back off to sleeps, so that polling the workers' completion
     * count does not pull its cache line away from them at every op. */
    for (unsigned idle = 0; in_flight(e) > e->max_pending / 2;) {
        if (vq__run_here(&e->cpu, NULL)) {
            idle = 0;
        } else if (vq__pool_idle(&e->cpu) && (!e->has_prio || vq__pool_idle(&e->prio)) &&
                   vq__gpu_idle(e)) {
            return; /* only external completions are left */
        } else if (idle++ < 4) {
            sched_yield();
        } else {
            struct timespec ts = {0, 20000L << (idle < 8 ? idle - 4 : 4)};
            nanosleep(&ts, NULL);
        }
    }
}

/* hot path: no lock. Runs fn(arg) now when the op has no vars, is sync,
 * and the engine is saturated. Returns true if it did. */
static inline bool run_undeferred(vq_engine *e, vq_sync_fn fn, void *arg, int nvars,
                                  unsigned flags)
{
    if (nvars || saturated != e || !fn || e->profile || vq__in_op || (flags & VQ__OPR_GPU))
        return false;
    vq_exec_ctx x = {.ctx = {VQ_DEV_CPU, 0}, .stream = NULL, .worker = -1};
    vq__in_op++;
    int err = fn(arg, &x);
    vq__in_op--;
    if (err)
        vq__engine_note_fail(e, err);
    return true;
}

/* hot path: no lock; one load per push, the engine's counters every 64
 * pushes, and past max_pending the throttle, which is not hot (it runs ops
 * and sleeps). The naive engine never counts an op in flight, so it never
 * waits here. */
static inline void pace(vq_engine *e)
{
    if (__builtin_expect((++push_tick & 63) == 0, 0) && !vq__in_op && !vq__self())
        throttle(e);
}

/* ---- the push calls ---- */

/* hot path: no lock. Hands a task with no vars to a worker as a light op
 * (engine_internal.h) when it qualifies: a sync function at priority 0 on
 * a threaded engine that does not profile (the profiler records ops).
 * False when it does not, or the ring is full: nothing was pushed. */
static inline bool push_light(vq_engine *e, const vq_task *t)
{
    if (t->nreads + t->nwrites || !t->fn || t->priority || e->kind != VQ_ENGINE_THREADED ||
        e->profile)
        return false;
    struct vq__light l = {.fn = t->fn, .arg = t->arg, .arg_free = t->arg_free, .engine = e};
    struct vq__wpool *p = (t->props & VQ_PROP_CPU_PRIORITIZED) && e->has_prio ? &e->prio : &e->cpu;
    if (!vq__pool_submit_light(p, &l, &e->pushed, &vq__last_ticket))
        return false;
    joined_last = false;
    return true;
}

/* Runs a light op as vq__op_run runs its op: no vars to skip it, wait for
 * or release, no group (it joins none), so the function, the engine's
 * first error, arg_free inside the op, and its count. */
void vq__light_run(const struct vq__light *l, const vq_exec_ctx *x)
{
    vq_engine *e = l->engine;
    vq__in_op++;
    int err = l->fn(l->arg, x);
    if (err)
        vq__engine_note_fail(e, err);
    if (l->arg_free)
        l->arg_free(l->arg);
    vq__op_completed(e, 1);
    vq__in_op--;
}

/* hot path: no malloc (up to VQ__INLINE_VARS vars); the locks of
 * op_enqueue */
VQ_API int vq_push(vq_engine *e, const vq_task *t)
{
    if (__builtin_expect(!task_shape_ok(e, t), 0)) {
        /* Refused by the quick test: an error, or a GPU op (which
         * validate_task accepts after setting up the GPU state). */
        int rc = validate_task(e, t, "vq_push");
        if (rc < 0)
            return rc;
        pace(e);
    } else {
        pace(e);
        if (run_undeferred(e, t->fn, t->arg, t->nreads + t->nwrites, 0)) {
            if (t->arg_free)
                t->arg_free(t->arg);
            return 0;
        }
        if (push_light(e, t))
            return 0;
    }
    return vq__push_task(e, t, 0, "vq_push", NULL); /* checks the vars while merging them */
}

int vq__push_held(vq_engine *e, const vq_task *t, void **held)
{
    *held = NULL;
    if (!e || e->kind != VQ_ENGINE_THREADED || vq__in_op || vq__self() || !t ||
        t->nreads + t->nwrites == 0 || !task_shape_ok(e, t))
        return vq_push(e, t); /* no var to hold it back, or checked and pushed as usual */
    pace(e);
    vq__op *op = NULL;
    int rc = vq__push_task(e, t, VQ__OPR_HELD, "vq_push", &op);
    if (rc == 0)
        *held = op;
    return rc;
}

void vq__push_release(vq_engine *e, void *held)
{
    if (held)
        vq__push_release_until(e, held, NULL);
}

VQ_API vq_opr *vq_opr_new(vq_engine *e, const vq_task *t)
{
    if (validate_task(e, t, "vq_opr_new") < 0)
        return NULL;
    vq_opr *o = vq__aligned_alloc(VQ__CACHELINE, sizeof *o);
    /* the vars, then the same in lock order: sorted once for every push */
    vq_var **vars = vq__malloc((2 * ((size_t)t->nreads + (size_t)t->nwrites) + 1) * sizeof *vars);
    vq__op *spare = o && vars ? vq__pool_alloc(VQ__POOL_OP) : NULL;
    if (!spare || opr_fill(&o->desc, e, t, vars, VQ__OPR_SORTED) < 0) {
        if (spare)
            vq__pool_free(VQ__POOL_OP, spare);
        free(o);
        free(vars);
        vq__fail(VQ_ENOMEM, "vq_opr_new: out of memory"); /* vars were validated */
        return NULL;
    }
    spare->spare_of = o;
    spare->reserved = false;
    atomic_init(&o->spare, spare);
    o->reserve_lock = (vq__spinlock){ATOMIC_FLAG_INIT};
    o->reserve_nblocks = o->reserve_want = 0;
    o->reserve_ops = NULL;
    o->reserve_blocks = NULL;
    atomic_init(&o->pushes, 0);
    atomic_init(&o->remaining, 0);
    vq__list_add(e, &e->oprs, &o->link);
    return o;
}

/* Destroys o; called by the one party that brings remaining to zero. */
static void opr_last_reference(vq_opr *o)
{
    vq_engine *e = o->desc.engine;
    vq__list_del(e, &e->oprs, &o->link);
    vq__opr_destroy(o);
}

/* One push of o has completed. remaining starts at 0, each completion
 * subtracts 1 and vq_opr_free adds the number of pushes: before the free it
 * stays below zero after the first completion, after the free it counts the
 * pushes still in flight, so exactly one decrement (or the free itself)
 * brings it to zero. Nothing touches o after its own decrement unless that
 * decrement was the last. */
static void opr_complete(vq_opr *o)
{
    if (atomic_fetch_sub_explicit(&o->remaining, 1, memory_order_acq_rel) == 1)
        opr_last_reference(o);
}

/* hot path: no malloc; the locks of op_enqueue */
VQ_API int vq_push_opr(vq_engine *e, vq_opr *o)
{
    if (!e || !o)
        return vq__fail(VQ_EINVAL, "vq_push_opr: %s is NULL", e ? "opr" : "engine");
    const struct vq__desc *d = &o->desc;
    if (d->engine != e)
        return vq__fail(VQ_EINVAL, "vq_push_opr: opr \"%s\" belongs to another engine",
                        d->name ? d->name : "");
    for (int i = 0; i < d->nwrites + d->nreads; i++)
        if (__builtin_expect(!var_ok(e, d->vars[i]), 0))
            return vq__check_var(e, d->vars[i], "vq_push_opr", "vars", i);
    pace(e);
    if (run_undeferred(e, d->fn, d->arg, d->nreads + d->nwrites, d->flags))
        return 0;
    vq__op *op = vq__pool_alloc(VQ__POOL_OP);
    if (__builtin_expect(op != NULL, 1)) {
        op->spare_of = NULL;
    } else {
        /* acquire: the spare's last push finished with it (release below) */
        op = atomic_exchange_explicit(&o->spare, NULL, memory_order_acquire);
        if (!op)
            return vq__fail(VQ_ENOMEM, "vq_push_opr: out of memory (and the op's spare is in "
                                       "use by another push of it)");
    }
    /* relaxed: the op's queue hand-off orders it before the completion */
    atomic_fetch_add_explicit(&o->pushes, 1, memory_order_relaxed);
    op->desc = d;
    int rc = op_enqueue(e, op, "vq_push_opr", NULL);
    if (rc < 0) {
        if (op->spare_of)
            atomic_store_explicit(&o->spare, op, memory_order_release);
        else
            vq__pool_free(VQ__POOL_OP, op);
        atomic_fetch_sub_explicit(&o->pushes, 1, memory_order_relaxed);
    }
    return rc;
}

static void reserve_put(vq_opr *o, vq__op *op, struct vq__vblock *blocks);

int vq__opr_reserve(vq_opr *o, int k)
{
    int n = o->desc.nwrites + o->desc.nreads;
    if (k <= 0 || (long)k * n > INT_MAX / 2)
        return vq__fail(VQ_EINVAL, "vq__opr_reserve: %d pushes of %d vars", k, n);
    vq__op *ops = NULL;
    struct vq__vblock *blocks = NULL;
    bool ok = vblocks_take(k * n, &blocks);
    for (int i = 0; ok && i < k; i++) {
        vq__op *op = vq__pool_alloc(VQ__POOL_OP);
        if (!(ok = op != NULL))
            break;
        op->spare_of = o;
        op->reserved = true;
        op->next = ops;
        ops = op;
    }
    if (!ok) {
        vblocks_free(blocks);
        while (ops) {
            vq__op *next = ops->next;
            vq__pool_free(VQ__POOL_OP, ops);
            ops = next;
        }
        return vq__fail(VQ_ENOMEM, "out of memory (setting aside %d pushes of an op)", k);
    }
    vq__spin_lock(&o->reserve_lock);
    o->reserve_want += k * n;
    vq__spin_unlock(&o->reserve_lock);
    reserve_put(o, NULL, blocks); /* the blocks first: none taken from the pool again */
    while (ops) {                 /* one at a time: reserve_put links them */
        vq__op *next = ops->next;
        reserve_put(o, ops, NULL);
        ops = next;
    }
    return 0;
}

int vq__push_opr_reserved(vq_engine *e, vq_opr *o)
{
    int rc = vq_push_opr(e, o);
    if (rc != VQ_ENOMEM)
        return rc;
    const struct vq__desc *d = &o->desc;
    int n = d->nwrites + d->nreads;
    struct vq__vblock *blocks = NULL;
    vq__spin_lock(&o->reserve_lock);
    vq__op *op = o->reserve_ops;
    if (op && o->reserve_nblocks >= n) {
        o->reserve_ops = op->next;
        for (int i = 0; i < n; i++) {
            struct vq__vblock *b = o->reserve_blocks;
            o->reserve_blocks = b->next;
            b->next = blocks;
            blocks = b;
        }
        o->reserve_nblocks -= n;
    } else {
        op = NULL;
    }
    vq__spin_unlock(&o->reserve_lock);
    if (!op)
        return vq__fail(VQ_ENOMEM, "vq_push_opr: out of memory, and the op's reserve is out "
                                   "with its earlier pushes");
    atomic_fetch_add_explicit(&o->pushes, 1, memory_order_relaxed);
    op->desc = d;
    rc = op_enqueue(e, op, "vq_push_opr", &blocks);
    if (rc < 0) /* (not for memory: the blocks were there) */
        atomic_fetch_sub_explicit(&o->pushes, 1, memory_order_relaxed);
    reserve_put(o, rc < 0 ? op : NULL, blocks);
    return rc;
}

VQ_API void vq_opr_free(vq_engine *e, vq_opr *o)
{
    if (!e || !o || o->desc.engine != e)
        return;
    /* Every push happened before this call (the caller's contract), so the
     * count is final. */
    long pushes = atomic_load_explicit(&o->pushes, memory_order_relaxed);
    if (atomic_fetch_add_explicit(&o->remaining, pushes, memory_order_acq_rel) == -pushes)
        opr_last_reference(o);
}

/* ---- running and completing ops ---- */

int vq__op_skip_error(const struct vq__desc *o)
{
    if ((o->flags & VQ__OPR_NOSKIP) || (o->props & VQ_PROP_RUN_ON_FAILED))
        return 0;
    for (int i = 0; i < o->nwrites + o->nreads; i++)
        if (o->vars[i]->err)
            return o->vars[i]->err;
    return 0;
}

/* A failed op poisons the vars it writes; the engine keeps the first
 * error. Each var it poisons also gets the note of what failed first
 * (engine_services.h): the note of the first of the op's vars that carries
 * a failure, which for a skipped op is the var vq__op_skip_error found,
 * and for an op that failed itself one of its writes that its function
 * noted (ops/ notes the kernel's message there). When none carries a
 * failure, the op failed itself without a note: a new one names it, with
 * why (a message known to be about this failure) or else err's name. The
 * op holds access to every var it reads here, and a var's note changes
 * only with its error, under write access: the queue orders these reads
 * as it orders vq__op_skip_error's. */
static void op_poison(const struct vq__desc *o, int err, const char *why)
{
    if (o->flags & VQ__OPR_NOSKIP)
        return;
    struct vq__fail_note *note = NULL, *made = NULL;
    int n = o->nwrites + o->nreads, at = 0;
    while (at < n && !o->vars[at]->err)
        at++;
    if (at < n)
        note = o->vars[at]->fail_note;
    else if (o->nwrites)
        note = made = vq__fail_note_new("op '%s' (%s)", o->name ? o->name : "(unnamed)",
                                        why ? why : vq_strerror(err));
    for (int i = 0; i < o->nwrites; i++)
        if (!o->vars[i]->err) {
            o->vars[i]->err = err;
            vq__fail_note_ref(note);
            o->vars[i]->fail_note = note;
        }
    vq__fail_note_unref(made); /* the vars hold theirs */
    vq__engine_note_fail(o->engine, err);
}

/* Puts op (NULL: none) and the blocks list back into o's reserve, then
 * tops the blocks up from the pool to reserve_want: the pushes it served
 * took some, and their accesses, once done, gave as many back to a pool. */
static void reserve_put(vq_opr *o, vq__op *op, struct vq__vblock *blocks)
{
    vq__spin_lock(&o->reserve_lock);
    if (op) {
        op->next = o->reserve_ops;
        o->reserve_ops = op;
    }
    while (blocks) {
        struct vq__vblock *next = blocks->next;
        blocks->next = o->reserve_blocks;
        o->reserve_blocks = blocks;
        o->reserve_nblocks++;
        blocks = next;
    }
    while (o->reserve_nblocks < o->reserve_want) {
        struct vq__vblock *b = vq__pool_alloc(VQ__POOL_VBLOCK);
        if (!b)
            break; /* short for now: the next completion tries again */
        b->next = o->reserve_blocks;
        o->reserve_blocks = b;
        o->reserve_nblocks++;
    }
    vq__spin_unlock(&o->reserve_lock);
}

/* Gives back what op holds beside its accesses: its argument, its vars
 * array, and the op itself (or, for a prebuilt op, its count of pushes in
 * flight). */
static HOT void op_release(vq__op *op)
{
    const struct vq__desc *o = op->desc;
    vq_opr *home = op->spare_of;
    if (o->flags & VQ__OPR_EMBEDDED) {
        if (o->arg_free)
            o->arg_free(o->arg);
        if (o->flags & VQ__OPR_HEAPVARS)
            free(o->vars);
    } else {
        /* A spare goes home before the completion that may free its home
         * (release: our use of it before the next push's acquire). */
        if (home && __builtin_expect(op->reserved, 0))
            reserve_put(home, op, NULL);
        else if (home)
            atomic_store_explicit(&home->spare, op, memory_order_release);
        opr_complete((vq_opr *)o); /* desc is a vq_opr's first member */
    }
    if (!home)
        vq__pool_free(VQ__POOL_OP, op);
}

/* Runs the members of head's group (var.c) after the head finished with
 * err, each as its own op would run: the head's failure is on the vars
 * first, so that a member it skips sees it. Members are plain sync CPU ops
 * on the head's vars, so they need neither GPU preparation nor wait
 * errors; each is released here, and completes with the head. While the
 * group runs, only its own failures change its vars' errors (it holds
 * their write or read access, and only a writer's failure or a wait
 * changes an error), and the head found none before it ran: so a member
 * looks for one only after a failure in the group. */
static void group_run(vq__op *head, int err, const vq_exec_ctx *x)
{
    bool failed = err != 0;
    if (failed)
        op_poison(head->desc, err, NULL);
    vq__op *m = head->group_next;
    for (int i = 0; i < head->group_n; i++) {
        vq__op *next = m->group_next;
        const struct vq__desc *d = m->desc;
        int merr = failed ? vq__op_skip_error(d) : 0;
        if (!merr)
            merr = d->fn(d->arg, x);
        if (merr) {
            failed = true;
            op_poison(d, merr, NULL);
        }
        op_release(m);
        m = next;
    }
}

void vq__op_run(vq__op *op, const vq_exec_ctx *x, vq__ready *r)
{
    const struct vq__desc *o = op->desc;
    if (o->engine->profile) {
        op->start_ns = vq__now_ns();
        op->worker = x->worker;
    }
    /* arg_free runs inside vq__op_finish: it counts as part of the op, so
     * what it pushes is a nested push (deferred by the naive engine). */
    vq__in_op++;
    int err = vq__op_skip_error(o);
    int wait_err = 0;
    /* Internal ops (NOSKIP: waits, deletions) deal with events themselves. */
    if (__builtin_expect(atomic_load_explicit(&o->engine->gpu_on, memory_order_relaxed), 0) &&
        !err && !(o->flags & VQ__OPR_NOSKIP)) {
        err = vq__gpu_prepare(op, x);
        /* RUN_ON_FAILED: the op runs anyway and learns the failure from
         * vq_op_wait_error(); it is then the op's own. */
        if (err && (o->props & VQ_PROP_RUN_ON_FAILED)) {
            wait_err = err;
            err = 0;
        } else if (err) {
            /* The failed wait left the stream's message: the note says
             * what failed before this op, not err's bare name. */
            char why[300];
            snprintf(why, sizeof why, "the GPU work it waits for failed: %s", vq_errmsg());
            op_poison(o, err, why);
        }
    }
    op->wait_err = wait_err;
    if (err || !(o->fn || o->async_fn)) {
        if (op->group_n)
            group_run(op, err, x);
        vq__op_finish(op, err ? err : wait_err, r);
    } else if (o->fn) {
        cur_wait_err = wait_err;
        if (__builtin_expect(o->flags & VQ__OPR_GPU, 0)) {
            err = vq__gpu_call(o, x);
            err = vq__gpu_launched(op, x, err);
        } else {
            err = o->fn(o->arg, x);
        }
        cur_wait_err = 0;
        if (op->group_n)
            group_run(op, err, x);
        vq__op_finish(op, err ? err : wait_err, r);
    } else {
        cur_wait_err = wait_err;
        o->async_fn(o->arg, x, (vq_done *)op);
        cur_wait_err = 0;
    }
    vq__in_op--;
}

/* hot path: no malloc; the var spinlocks of the op's accesses, one at a
 * time. Beyond an ordinary op: a deletion takes list_lock, the profiler
 * its buffer's lock, and the completion that leaves a waiter nothing
 * pending takes wait_lock to wake it. */
void vq__op_finish(vq__op *op, int err, vq__ready *r)
{
    const struct vq__desc *o = op->desc;
    vq_engine *e = o->engine;
    unsigned long n = 1 + (unsigned long)op->group_n;
    if (err)
        op_poison(o, err, NULL);
    if (e->profile)
        vq__prof_record(e, op, vq__now_ns());
    if (r) { /* queued on its vars (not the naive engine's) */
        for (int i = o->nexcl; i < o->nwrites + o->nreads; i++)
            vq__var_complete_read(o->vars[i], r);
        for (int i = 0; i < o->nexcl; i++)
            vq__var_complete_write(o->vars[i], r);
    }
    if (o->flags & VQ__OPR_DELETE) {
        /* vq_var_free marked it; nothing else makes a deletion op */
        VQ__ASSERT(atomic_load_explicit(&o->vars[0]->state, memory_order_relaxed) ==
                   VQ__VAR_DELETING);
        vq__var_destroy(e, o->vars[0]);
    }
    op_release(op);
    if (r)
        vq__op_completed(e, n);
}

VQ_API void vq_done_finish(vq_done *d, int err)
{
    vq__op *op = (vq__op *)d;
    if (!op)
        return;
    if (!err)
        err = op->wait_err; /* a RUN_ON_FAILED op's failed wait is its own */
    if (op->naive) {
        vq__naive_done(op, err);
        return;
    }
    vq_engine *e = op->desc->engine;
    atomic_fetch_add(&e->finishers, 1);
    vq__ready r = {.engine = e};
    vq__op_finish(op, err, &r);
    vq__ready_flush(&r);
    /* last touch of e: vq_engine_free waits for finishers to reach zero */
    atomic_fetch_sub(&e->finishers, 1);
}

bool vq__engine_runs_inline(const vq_engine *e)
{
    return e->kind == VQ_ENGINE_NAIVE;
}

VQ_API int vq_thread_in_op(void)
{
    return vq__in_op > 0;
}

VQ_API int vq_op_wait_error(void)
{
    return cur_wait_err;
}
