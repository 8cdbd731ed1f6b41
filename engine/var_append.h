/* The push's half of the var queue: appending all of an op's accesses at
 * once, and the groups (bulk execution) a push may join instead. It belongs
 * with var.c's state machine, whose append and completion calls it uses,
 * but it is inline, and engine.c's op_enqueue, its one caller, includes it:
 * the push path is the hottest code of the engine, and the call, with the
 * registers it saves and restores, was 22 of the 362 instructions callgrind
 * counts per op of a chain on one var (scripts/callgrind_tasks.sh, one
 * worker, 2026-11-28; 340 with it inline; link-time optimisation did not
 * inline it). */
#ifndef VQ_ENGINE_VAR_APPEND_H
#define VQ_ENGINE_VAR_APPEND_H

#include "engine_internal.h"

/* ---- groups: bulk execution of consecutive ops on the same vars ----
 *
 * A push that finds, queued last on its vars and not yet granted, an op
 * with the same vars in the same modes (writing at least one) joins that
 * op's group instead of queueing its own blocks: the head's runner runs it
 * right after the head (and the members before it), and their completion
 * is the head's. MXNet's bulk execution, without its delay: the op is in
 * the queues the moment it is pushed.
 *
 * Serial equivalence: the head is last on every one of these vars, so no
 * push with a ticket between the head's and this one shares a var with
 * them; running this op right after the head is what the queues would do.
 * Nothing is lost to parallelism either: both write a var they share, so
 * they would run one after the other anyway.
 *
 * Safety: the head's write on vars[0] is queued and not granted, and only
 * a completion under that var's lock, which the pusher holds, can grant
 * it. So the head cannot start (nor be freed) while the pusher links the
 * member, and its runner, granted later through that lock, sees the link.
 * Only plain ops group (VQ__OPR_GROUPABLE, set by opr_fill in engine.c):
 * sync CPU functions that any error may skip (not NOSKIP, DELETE, GPU,
 * RUN_ON_FAILED), of equal priority and props, on an engine that does not
 * profile (each op keeps its own record). */

/* The op whose group op may join, or NULL. The caller holds the locks of
 * all of op's vars. */
static inline vq__op *group_head(const vq__op *op)
{
    const struct vq__desc *o = op->desc;
    vq_var *v = o->vars[0]; /* written (VQ__OPR_GROUPABLE) */
    if (!v->pending_write || !v->tail->write || (v->tail == v->pending_write && v->write_triggered))
        return NULL; /* nothing queued last, a read, or a granted write */
    vq__op *h = v->tail->trigger;
    const struct vq__desc *d = h->desc;
    if (h->group_n >= VQ__GROUP_MAX)
        return NULL;
    int n = o->nwrites + o->nreads;
    if (d != o) {
        if (d->nwrites != o->nwrites || d->nreads != o->nreads || !(d->flags & VQ__OPR_GROUPABLE) ||
            d->priority != o->priority || d->props != o->props)
            return NULL;
        for (int i = 1; i < n; i++)
            if (d->vars[i] != o->vars[i])
                return NULL;
    }
    /* h is last on the other vars too. A var with nothing queued has only
     * granted reads (h's writes, not granted, would be queued): h and op
     * both read it. */
    for (int i = 1; i < n; i++) {
        vq_var *w = o->vars[i];
        if (w->pending_write && w->tail->trigger != h)
            return NULL;
    }
    return h;
}

static inline void group_join(vq__op *h, vq__op *op)
{
    op->group_next = NULL;
    if (h->group_n)
        h->group_tail->group_next = op;
    else
        h->group_next = op;
    h->group_tail = op;
    h->group_n++;
}

/* hot path: no malloc; the op's var spinlocks, all at once. What it does:
 * engine_internal.h, above its enum VQ__APPEND_*. */
static inline int vq__var_append_op(vq__op *op, vq_var *const *order, struct vq__vblock **spare,
                                    unsigned long *ticket)
{
    const struct vq__desc *o = op->desc;
    int n = o->nwrites + o->nreads, granted = 0;
    if (n == 1)
        vq__spin_lock(&order[0]->lock); /* a chain's op: without the loop */
    else
        for (int i = 0; i < n; i++)
            vq__spin_lock(&order[i]->lock);
    vq__op *h = o->flags & VQ__OPR_GROUPABLE ? group_head(op) : NULL;
    if (!h && !*spare && n > 0) {
        granted = VQ__APPEND_NO_BLOCKS;
        goto unlock;
    }
    /* relaxed: the ticket only numbers the push. Taken while every var of
     * the op is locked, tickets order any two pushes that share a var as
     * their blocks are queued on it. */
    *ticket = atomic_fetch_add_explicit(&o->engine->pushed, 1, memory_order_relaxed);
    if (h) {
        group_join(h, op);
        granted = VQ__APPEND_JOINED;
    } else {
        for (int i = 0; i < o->nexcl; i++) {
            struct vq__vblock *b = *spare;
            VQ__ASSERT(b); /* the caller gave one block per var */
            *spare = b->next;
            granted += vq__var_append_write(o->vars[i], op, b);
        }
        for (int i = o->nexcl; i < n; i++) {
            VQ__ASSERT(*spare);
            struct vq__vblock *next = (*spare)->next;
            if (vq__var_append_read(o->vars[i], op, spare))
                granted++;
            if (!*spare)
                *spare = next; /* the read queued in the block */
        }
    }
unlock:
    if (n == 1)
        vq__spin_unlock(&order[0]->lock);
    else
        for (int i = n - 1; i >= 0; i--)
            vq__spin_unlock(&order[i]->lock);
    return granted;
}

#endif
