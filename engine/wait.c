/* Deleting vars and waiting: vq_var_free, vq_wait_var (and the failure it
 * reports), vq_wait_all, and the help a waiting thread gives the workers.
 *
 * A deletion and a var wait are write ops on the var, pushed as any op is
 * (vq__push_task, engine.c), so the var's queue orders them after every
 * earlier op on it; when nothing is queued on the var they are done at
 * once under its lock instead, numbered and counted as that op would be.
 * vq_wait_all waits until every op pushed has completed (vq__op_completed
 * wakes it) and takes the engine's first error. */
#include "engine_internal.h"

#include <limits.h>

/* ---- waiting for every pending op (vq_wait_all, vq_engine_free) ---- */

/* True when no op is pending. completed is read first: pushed only grows
 * and never trails completed (an op is counted pushed before it can run), so
 * equal readings mean nothing was pending when completed was read. */
static bool quiescent(vq_engine *e)
{
    unsigned long done = atomic_load(&e->completed);
    return atomic_load(&e->pushed) == done;
}

void vq__wait_pending(vq_engine *e)
{
    if (quiescent(e))
        return;
    pthread_mutex_lock(&e->wait_lock);
    /* seq_cst pair with vq__op_completed: either it sees a waiter, or we see
     * its count. */
    atomic_fetch_add(&e->waiters, 1);
    while (!quiescent(e))
        pthread_cond_wait(&e->wait_cond, &e->wait_lock);
    atomic_fetch_sub(&e->waiters, 1);
    pthread_mutex_unlock(&e->wait_lock);
}

/* ---- deleting vars and waiting ---- */

/* Nothing queued on v (no write pending, no granted read unfinished) and
 * no GPU work after its last op. Under v's lock. */
static inline bool var_idle(const vq_var *v)
{
    return !v->pending_write && v->num_pending_reads == 0 && !v->gpu_ev;
}

/* Deletes v, which its caller marked VQ__VAR_DELETING, now when nothing
 * is queued on it: its deletion op would run at its push, so the var goes
 * here, numbered and counted like that op (as vq_wait_var's answer on an
 * idle var). False, and v untouched, otherwise. */
static bool delete_if_idle(vq_engine *e, vq_var *v)
{
    if (e->kind != VQ_ENGINE_THREADED)
        return false;
    vq__spin_lock(&v->lock);
    bool idle = var_idle(v);
    if (idle)
        vq__last_ticket = atomic_fetch_add_explicit(&e->pushed, 1, memory_order_relaxed);
    vq__spin_unlock(&v->lock);
    if (!idle)
        return false;
    vq__var_destroy(e, v);
    vq__op_completed(e, 1);
    return true;
}

VQ_API int vq_var_free(vq_engine *e, vq_var *v)
{
    if (!e)
        return vq__fail(VQ_EINVAL, "vq_var_free: engine is NULL");
    int rc = vq__check_var(e, v, "vq_var_free", "var", 0);
    if (rc < 0)
        return rc;
    int live = VQ__VAR_LIVE;
    if (!atomic_compare_exchange_strong(&v->state, &live, VQ__VAR_DELETING))
        return vq__fail(VQ_EINVAL, "vq_var_free: var \"%s\" has been freed", v->name);
    /* A plan's thousands of idle vars go with the plan instead of as that
     * many ops for the workers. */
    if (delete_if_idle(e, v))
        return 0;
    vq_var *w[1] = {v};
    vq_task t = {.writes = w, .nwrites = 1, .name = "vq_var_free"};
    rc = vq__push_task(e, &t, VQ__OPR_NOSKIP | VQ__OPR_DELETE, "vq_var_free", NULL);
    if (rc < 0)
        atomic_store(&v->state, VQ__VAR_LIVE);
    return rc;
}

bool vq__var_free_idle(vq_engine *e, vq_var *v)
{
    int live = VQ__VAR_LIVE;
    if (!atomic_compare_exchange_strong(&v->state, &live, VQ__VAR_DELETING))
        return false;
    if (delete_if_idle(e, v))
        return true;
    atomic_store(&v->state, VQ__VAR_LIVE);
    return false;
}

static int wait_forbidden(const char *fn)
{
    if (vq__in_op || vq__self())
        return vq__fail(VQ_EDEADLK, "%s: called from inside an op, where it would never return",
                        fn);
    return 0;
}

struct var_waiter {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    vq_var *v;
    atomic_bool answered; /* set under lock, also read without it by the waiter's spin */
    int err;
    struct vq__fail_note *note; /* taken with err */
};

/* The body of the write op vq_wait_var pushes: every earlier op on the var
 * has completed, and none after it has started. */
static int take_var_error(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct var_waiter *w = arg;
    /* GPU work on the var is part of what is waited for. */
    int gpu_err = w->v->gpu_ev ? vq__gpu_var_settle(w->v) : 0;
    int err = w->v->err ? w->v->err : gpu_err;
    struct vq__fail_note *note = w->v->fail_note;
    w->v->err = 0;
    w->v->fail_note = NULL;
    pthread_mutex_lock(&w->lock);
    w->err = err;
    w->note = note;
    /* release: the waiter that sees it without the lock sees err too */
    atomic_store_explicit(&w->answered, true, memory_order_release);
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
    return 0;
}

int vq__wait_var_note(vq_engine *e, vq_var *v, struct vq__fail_note **note)
{
    *note = NULL;
    if (!e)
        return vq__fail(VQ_EINVAL, "vq_wait_var: engine is NULL");
    int rc = vq__check_var(e, v, "vq_wait_var", "var", 0);
    if (rc < 0)
        return rc;
    if ((rc = wait_forbidden("vq_wait_var")) < 0)
        return rc;
    if (e->kind == VQ_ENGINE_NAIVE)
        return vq__naive_wait_var(e, v, note);
    /* Nothing queued on v and no GPU work after its last op: the wait op
     * would be granted at its push and answered at once, so it is done
     * here under v's lock instead, at the same instant in the engine's
     * order: numbered like a push (the ticket, taken with every var of the
     * "op" locked, as vq__var_append_op takes it) and counted complete
     * right after, so that vq_wait_all and the throttle see a pushed op
     * that completed. The lock orders the check after the completions of
     * v's earlier ops; an op pushed meanwhile comes after the wait. */
    vq__spin_lock(&v->lock);
    if (var_idle(v)) {
        vq__last_ticket = atomic_fetch_add_explicit(&e->pushed, 1, memory_order_relaxed);
        int err = v->err;
        if (__builtin_expect(err != 0, 0)) {
            *note = v->fail_note;
            v->fail_note = NULL;
            v->err = 0;
        }
        vq__spin_unlock(&v->lock);
        vq__op_completed(e, 1);
        return err;
    }
    vq__spin_unlock(&v->lock);
    struct var_waiter w = {.v = v, .err = 0, .note = NULL};
    atomic_init(&w.answered, false);
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    vq_var *wv[1] = {v};
    /* Highest priority: once the var allows it, the waiter is answered
     * before any other ready op runs. */
    vq_task t = {.fn = take_var_error,
                 .arg = &w,
                 .writes = wv,
                 .nwrites = 1,
                 .priority = INT_MAX,
                 .name = "vq_wait_var"};
    vq__op *op = NULL;
    rc = vq__push_task(e, &t, VQ__OPR_NOSKIP | VQ__OPR_HELD, "vq_wait_var", &op);
    if (rc == 0) {
        /* Held: when the var is settled already, the answer is taken
         * here and now, not by a worker woken for it. */
        vq__push_release_until(e, op, &w.answered);
        /* The waiter helps before it sleeps: it runs queued ready CPU ops
         * itself, as the throttle does, and spins a little as a worker
         * does (yielding now and then to a thread on its core) before it
         * sleeps. A host read after a push (a captured segment, a chain's
         * last ops) then often runs in this thread or is answered while
         * it spins, without the wake-ups of a handoff to a sleeping worker
         * and back. */
        for (int i = 0;
             i < e->spin_looks && !atomic_load_explicit(&w.answered, memory_order_acquire); i++) {
            if (vq__run_here(&e->cpu, &w.answered))
                i = 0;
            else
                vq__spin_pause(i);
        }
        pthread_mutex_lock(&w.lock);
        while (!atomic_load_explicit(&w.answered, memory_order_relaxed)) /* under w.lock */
            pthread_cond_wait(&w.cond, &w.lock);
        pthread_mutex_unlock(&w.lock);
        rc = w.err;
        *note = w.note;
    }
    pthread_mutex_destroy(&w.lock);
    pthread_cond_destroy(&w.cond);
    return rc;
}

VQ_API int vq_wait_var(vq_engine *e, vq_var *v)
{
    struct vq__fail_note *note;
    int err = vq__wait_var_note(e, v, &note);
    if (note) /* (only with an error of the var: the calls' own carry none) */
        vq__fail(err, "var \"%s\": an op it depends on failed: %s", v->name,
                 vq__fail_note_text(note));
    vq__fail_note_unref(note);
    return err;
}

bool vq__engine_help(vq_engine *e, const atomic_bool *until)
{
    return e && e->kind == VQ_ENGINE_THREADED && !vq__in_op && vq__run_here(&e->cpu, until);
}

VQ_API int vq_wait_all(vq_engine *e)
{
    if (!e)
        return vq__fail(VQ_EINVAL, "vq_wait_all: engine is NULL");
    int rc = wait_forbidden("vq_wait_all");
    if (rc < 0)
        return rc;
    vq__wait_pending(e);
    int err = atomic_exchange(&e->first_err, 0);
    /* Every op has completed, GPU ops at launch: wait for their streams. */
    if (atomic_load_explicit(&e->gpu_on, memory_order_acquire)) {
        int gpu_err = vq__gpu_sync_all(e);
        if (!err)
            err = gpu_err;
    }
    return err;
}
