/* The var queue: the one state machine that orders ops (DESIGN.md 2.2).
 *
 * A var holds a FIFO of blocks, one per access that could not be granted
 * when it was appended, ending in an empty sentinel (head) where the next
 * access is written. State:
 *   num_pending_reads  reads granted and not yet complete;
 *   pending_write      the oldest write not yet complete (the first block of
 *                      the queue), or NULL when the queue is empty;
 *   write_triggered    pending_write has been granted to its op.
 * Invariants: with pending_write NULL, the queue holds only the sentinel, and
 * any number of reads may be running. With pending_write set, reads that
 * arrive queue behind it; the write is granted when num_pending_reads drops
 * to zero. Completing the write grants the run of reads that follows it, or,
 * when no read follows, the next write.
 *
 * Completions take one var's spinlock for its state changes only and grant
 * ops (decrement their wait counters) after releasing it. A push appends all
 * of an op's accesses at once (vq__var_append_op): it locks every var of the
 * op in ascending address order, appends, takes the op's ticket and unlocks.
 * Appending one var at a time would let two pushers interleave (A on x, B on
 * x, B on y, A on y) and queue A before B on x but B before A on y: a cycle
 * that no completion ever breaks. Holding all the locks makes each push
 * happen at one instant (two-phase locking), and the one global lock order
 * means that pushers never wait for each other in a cycle; a completer holds
 * one lock and waits for none, so it closes no cycle either. */
#include "engine_internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

void vq__spin_wait(vq__spinlock *l)
{
    for (unsigned spins = 0;; spins++) {
        if (spins < 64)
            vq__cpu_relax();
        else
            sched_yield(); /* the holder may have been preempted */
        if (!atomic_flag_test_and_set_explicit(&l->flag, memory_order_acquire))
            return;
    }
}

int vq__var_init(vq_var *v, vq_engine *e, const char *name)
{
    v->head = vq__pool_alloc(VQ__POOL_VBLOCK);
    if (!v->head)
        return VQ_ENOMEM;
    v->head->next = NULL;
    v->head->trigger = NULL;
    v->head->write = false;
    atomic_flag_clear(&v->lock.flag);
    v->num_pending_reads = 0;
    v->write_triggered = false;
    v->pending_write = NULL;
    v->err = 0;
    v->engine = e;
    v->gpu_ev = NULL;
    if (name) {
        strncpy(v->name, name, sizeof v->name - 1);
        v->name[sizeof v->name - 1] = '\0';
    } else {
        v->name[0] = '\0';
    }
    atomic_store_explicit(&v->state, VQ__VAR_LIVE, memory_order_release);
    return 0;
}

/* Queues op's access in the sentinel and makes nb the new sentinel. */
static void enqueue(vq_var *v, vq__op *op, bool write, struct vq__vblock *nb)
{
    struct vq__vblock *b = v->head;
    b->trigger = op;
    b->write = write;
    b->next = nb;
    nb->next = NULL;
    v->head = nb;
    v->tail = b;
}

/* The caller holds v's lock. */
bool vq__var_append_read(vq_var *v, vq__op *op, struct vq__vblock **spare)
{
    if (!v->pending_write) {
        v->num_pending_reads++;
        return true;
    }
    enqueue(v, op, false, *spare);
    *spare = NULL;
    return false;
}

/* The caller holds v's lock. */
bool vq__var_append_write(vq_var *v, vq__op *op, struct vq__vblock *nb)
{
    struct vq__vblock *b = v->head;
    enqueue(v, op, true, nb);
    if (v->pending_write)
        return false;
    VQ__ASSERT(!v->write_triggered); /* no write pending: none granted either */
    v->pending_write = b;
    v->write_triggered = v->num_pending_reads == 0;
    return v->write_triggered;
}

static int var_addr_cmp(const void *a, const void *b)
{
    vq_var *const *x = a, *const *y = b;
    return (uintptr_t)*x < (uintptr_t)*y ? -1 : (uintptr_t)*x > (uintptr_t)*y;
}

/* Sorts vars[0 .. n) by address: the one order in which pushers lock.
 * Insertion sort for the few vars of a push; qsort beyond, where the
 * insertion sort's n^2 / 4 moves would dominate (a plan's final op reads
 * every var of a 100k-op program, vq_opr_new sorts them once). */
void vq__var_sort(vq_var **vars, int n)
{
    if (n > 64) {
        qsort(vars, (size_t)n, sizeof *vars, var_addr_cmp);
        return;
    }
    for (int i = 1; i < n; i++) {
        vq_var *v = vars[i];
        int j = i;
        for (; j > 0 && (uintptr_t)vars[j - 1] > (uintptr_t)v; j--)
            vars[j] = vars[j - 1];
        vars[j] = v;
    }
}

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
static vq__op *group_head(const vq__op *op)
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

static void group_join(vq__op *h, vq__op *op)
{
    op->group_next = NULL;
    if (h->group_n)
        h->group_tail->group_next = op;
    else
        h->group_next = op;
    h->group_tail = op;
    h->group_n++;
}

/* hot path: no malloc; the op's var spinlocks, all at once */
int vq__var_append_op(vq__op *op, vq_var *const *order, struct vq__vblock **spare,
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

/* hot path: no malloc; v's spinlock, alone */
void vq__var_complete_read(vq_var *v, vq__ready *r)
{
    vq__op *grant = NULL;
    vq__spin_lock(&v->lock);
    VQ__ASSERT(v->num_pending_reads > 0); /* this read was granted and counted */
    if (--v->num_pending_reads == 0 && v->pending_write && !v->write_triggered) {
        v->write_triggered = true;
        grant = v->pending_write->trigger;
    }
    vq__spin_unlock(&v->lock);
    if (grant)
        vq__op_dep_granted(grant, r);
}

/* hot path: no malloc; v's spinlock, alone (the blocks go back to this
 * thread's pool list: the depot mutex once per VQ__MAG) */
void vq__var_complete_write(vq_var *v, vq__ready *r)
{
    vq__spin_lock(&v->lock);
    /* The completing write is the oldest one, granted, and ran alone. */
    VQ__ASSERT(v->pending_write && v->write_triggered);
    VQ__ASSERT(v->num_pending_reads == 0);
    VQ__ASSERT(v->pending_write->write);
    struct vq__vblock *done = v->pending_write;
    struct vq__vblock *first_read = done->next, *end = first_read;
    int nreads = 0;
    while (end != v->head && !end->write) {
        end = end->next;
        nreads++;
    }
    v->num_pending_reads += nreads;
    vq__op *grant_write = NULL;
    if (end == v->head) {
        v->pending_write = NULL;
        v->write_triggered = false;
    } else {
        v->pending_write = end;
        v->write_triggered = nreads == 0;
        if (v->write_triggered)
            grant_write = end->trigger;
    }
    vq__spin_unlock(&v->lock);

    /* The blocks from first_read up to end are off the queue now: nobody
     * else reaches them, so they are read and freed without the lock. */
    vq__pool_free(VQ__POOL_VBLOCK, done);
    for (struct vq__vblock *b = first_read; b != end;) {
        struct vq__vblock *next = b->next;
        vq__op_dep_granted(b->trigger, r);
        vq__pool_free(VQ__POOL_VBLOCK, b);
        b = next;
    }
    if (grant_write)
        vq__op_dep_granted(grant_write, r);
}

/* ---- engine_services.h ---- */

int vq__var_error(const vq_var *v)
{
    return v->err;
}

void vq__var_fail(vq_var *v, int err)
{
    if (!v->err)
        v->err = err;
}

void vq__engine_note_fail(vq_engine *e, int err)
{
    int none = 0;
    atomic_compare_exchange_strong(&e->first_err, &none, err);
}
