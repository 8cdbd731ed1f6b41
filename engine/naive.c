/* The naive engine: the serial oracle (MXNet's naive_engine.cc).
 *
 * Every op runs in the thread that pushes it, at once, and one at a time
 * across all pushing threads (naive_lock), so a program's result on it is
 * the serial order by construction: the threaded engine is tested against
 * it. Its ops are never queued on their vars and no worker exists; the
 * engine's other files meet it at three calls (engine_internal.h):
 * vq__naive_push from op_enqueue, vq__naive_done from vq_done_finish, and
 * vq__naive_wait_var from vq_wait_var. Validation, the op's run and
 * completion (vq__op_run, vq__op_finish with no ready batch), errors and
 * GPU streams are shared with the threaded engine.
 *
 * Two cases bend "at once". An op pushed from inside an op runs after the
 * outer one, from a per-thread list of deferred ops, which keeps push order
 * exactly. And the pusher of an async op waits for its vq_done_finish with
 * naive_lock released, so that pushes the op's own work makes from other
 * threads can run meanwhile (see naive_execute). */
#include "engine_internal.h"

#include <pthread.h>

/* This thread's ops pushed from inside an op, in push order (linked
 * through op->next). */
static VQ__TLS vq__op *deferred_head, *deferred_tail;

/* The pusher of an async op waits on this. */
struct vq__naive_wait {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool done;
    int err;
};

/* Runs op; the caller holds e->naive_lock. */
static void naive_execute(vq__op *op)
{
    const struct vq__desc *o = op->desc;
    vq_exec_ctx x = {.ctx = o->ctx, .stream = NULL, .worker = -1};
    if (o->flags & VQ__OPR_GPU)
        x.stream = vq__gpu_naive_stream(o->engine, o->ctx.id);
    if (!o->async_fn || vq__op_skip_error(o)) {
        vq__op_run(op, &x, NULL);
        return;
    }
    struct vq__naive_wait w = {.done = false, .err = 0};
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    op->naive = &w;
    vq__op_run(op, &x, NULL);
    /* The op's work may push from the thread that will finish it: let such
     * pushes run meanwhile rather than deadlock (they then run before this
     * op completes: the one place where the naive engine is not serial). */
    vq_engine *e = o->engine;
    pthread_mutex_unlock(&e->naive_lock);
    pthread_mutex_lock(&w.lock);
    while (!w.done)
        pthread_cond_wait(&w.cond, &w.lock);
    pthread_mutex_unlock(&w.lock);
    pthread_mutex_lock(&e->naive_lock);
    pthread_mutex_destroy(&w.lock);
    pthread_cond_destroy(&w.cond);
    op->naive = NULL;
    vq__in_op++;
    vq__op_finish(op, w.err, NULL);
    vq__in_op--;
}

void vq__naive_push(vq__op *op)
{
    op->next = NULL;
    if (vq__in_op || deferred_head) {
        if (deferred_tail)
            deferred_tail->next = op;
        else
            deferred_head = op;
        deferred_tail = op;
        if (vq__in_op)
            return;
        op = NULL;
    }
    vq_engine *e = op ? op->desc->engine : deferred_head->desc->engine;
    /* One op at a time across all pushing threads: the naive engine is the
     * serial order itself. */
    pthread_mutex_lock(&e->naive_lock);
    if (op)
        naive_execute(op);
    while (deferred_head) {
        vq__op *d = deferred_head;
        deferred_head = d->next;
        if (!deferred_head)
            deferred_tail = NULL;
        naive_execute(d);
    }
    pthread_mutex_unlock(&e->naive_lock);
}

void vq__naive_done(vq__op *op, int err)
{
    struct vq__naive_wait *w = op->naive;
    pthread_mutex_lock(&w->lock);
    w->err = err;
    w->done = true;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

int vq__naive_wait_var(vq_engine *e, vq_var *v, struct vq__fail_note **note)
{
    pthread_mutex_lock(&e->naive_lock);
    int err = v->err;
    *note = v->fail_note;
    v->err = 0;
    v->fail_note = NULL;
    pthread_mutex_unlock(&e->naive_lock);
    return err;
}
