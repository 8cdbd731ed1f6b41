/* The var queue, as a Promela model for spin (issue #22 item 4).
 *
 * What it is: engine/var.c's state machine (append read, append write,
 * complete read, complete write, the grant of the next run of blocks), the
 * op's wait counter of engine.c and engine_internal.h, the push that appends an op
 * on all its vars at once (vq__var_append_op), the worker loop of threaded.c
 * and var deletion (vq_var_free's deletion op and vq__var_destroy), written with
 * the C code's own field and state names so that the two read side by side.
 * scripts/spin_check.sh checks it exhaustively, for every interleaving of
 * two pushers and two workers over the configurations at the end of this
 * file, and engine/model/check_names.py checks, before that, that every C
 * name and statement this model cites (the "@C", "@F" and "@E" lines) is
 * still there in the C code: a rename or a changed condition in var.c fails
 * the suite instead of leaving the model to drift.
 *
 * What is checked:
 *   - serial equivalence: every op records the "value" of each of its vars
 *     as it starts (val[v]: the push number + 1 of the last op that wrote v,
 *     0 before any), a writer stores its own as it ends, and at the end init
 *     replays the ops one at a time in push-number (ticket) order and asserts
 *     that each op saw what the replay gives it, and that the vars end with
 *     the replay's values. Conflicting ops never overlap either: a writer
 *     starts only with no reader or writer of the var running, a reader only
 *     with no writer (active_r / active_w);
 *   - no double grant: the counter that brings an op's wait to zero
 *     dispatches it, and an op is dispatched, started and run once; no wait
 *     counter goes below zero;
 *   - no lost grant: init waits for every op to complete; a state where no
 *     process can move before that is an invalid end state for spin (the
 *     workers' idle loop, end_idle, is the only valid place to stop), so a
 *     deadlock of pushers (lock order) or an op that is never granted fails;
 *   - deletion after all earlier accesses: when the deletion op runs, every
 *     op with a smaller ticket on its var has completed its access of it;
 *     var_destroy finds the queue empty; nothing touches a DEAD var
 *     afterwards (every lock and every op start asserts it);
 *   - the blocks: a block is never read after it was freed, the pusher never
 *     writes a block that a completer took off the queue (var.c's "nobody
 *     else reaches them"), and at the end every block is freed except the
 *     sentinels of the live vars.
 *
 * Steps. Each C atomic (the fetch_sub of wait, the fetch_add of pushed,
 * the compare-and-swap of state) and each lock a pusher takes is a step of
 * its own, so the lock order and two-phase locking are modelled as they are.
 * A critical section under one var's lock is one step (body and unlock):
 * nothing else may touch those fields while the lock is held. Beyond that,
 * the default model joins a few actions that nobody else can observe in
 * between to the step next to them (a reduction in the style of Lipton:
 * a completer's lock, which it holds alone and never waits while holding,
 * goes with its critical section; the pusher's unlocks with its appends;
 * taking an op with the start of its function; the end of the function
 * with its first completion; reading an off-queue block with its grant).
 * Each place says so, and FINE=1 splits them all again (and adds
 * keep_successor's direct run): spin_check.sh checks configuration 1 both
 * ways.
 *
 * What it abstracts:
 *   - the ready queue (the ring and the priority heap of threaded.c) is a
 *     set: a worker takes any ready op. That includes every order the ring
 *     and the heap can produce (priorities, FIFO), and more;
 *   - memory ordering is sequentially consistent here: the acquire/release
 *     pairs of the C code are TSan's to check, not spin's;
 *   - blocks are never reused (the pools of pool.c are left out); freeing
 *     is a ghost flag that later accesses assert against;
 *   - no errors (a var's err travels with the queue's order), no GPU ops
 *     (their reads count as writes: the same protocol), no vq_wait_var op
 *     (a write op like the deletion), no prebuilt ops (the same push), no
 *     throttle and no helping pushers, no ops pushed from inside ops, no
 *     async ops finished on foreign threads (the finish is the same code on
 *     any thread), one op per push at most 3 vars, and small configurations
 *     only (2 pushers, 2 workers, 5 ops): what holds for them is not proven
 *     for more.
 *
 * MUTANT (for spin_check.sh's "the check can fail" runs): 1 appends one var
 * at a time (the first version: lock, append, unlock per var), 2 grants a
 * read that arrives behind a write not yet granted, 3 locks the op's vars
 * in the op's own order instead of one global order, 4 grants the next
 * write on completing a write even when reads come before it, 5 pushes the
 * deletion as a read of its var instead of a write. Each must fail. */

#ifndef CONFIG
#define CONFIG 1
#endif
#ifndef MUTANT
#define MUTANT 0
#endif

#define MAXV    3       /* vars per op */
#define MAXOPS  8       /* ops in a configuration, deletions included */
#define NONE    255     /* NULL: no op, no block */

/* @E engine/engine_internal.h VQ__VAR_LIVE
 * @E engine/engine_internal.h VQ__VAR_DELETING
 * @E engine/engine_internal.h VQ__VAR_DEAD */
#define VQ__VAR_LIVE     1
#define VQ__VAR_DELETING 2
#define VQ__VAR_DEAD     3

#if CONFIG == 1
#define NVARS   2
#define NOPS    5
#define NBLOCKS 10      /* a sentinel per var + one block per access */
#elif CONFIG == 2
#define NVARS   3
#define NOPS    5
#define NBLOCKS 13
#else
#error "CONFIG is 1 or 2"
#endif

/* A block in a var's queue.
 * @F engine/engine_internal.h struct vq__vblock next
 * @F engine/engine_internal.h struct vq__vblock trigger
 * @F engine/engine_internal.h struct vq__vblock write */
typedef vq__vblock {
    byte next;          /* a block index, NONE = NULL */
    byte trigger;       /* an op index */
    bool write
};

/* A var: its lock and its queue's state.
 * @F engine/engine_internal.h struct vq_var lock
 * @F engine/engine_internal.h struct vq_var num_pending_reads
 * @F engine/engine_internal.h struct vq_var write_triggered
 * @F engine/engine_internal.h struct vq_var pending_write
 * @F engine/engine_internal.h struct vq_var head
 * @F engine/engine_internal.h struct vq_var state */
typedef vq_var {
    bit lock;           /* the spinlock's flag */
    byte num_pending_reads;
    bool write_triggered;
    byte pending_write; /* a block index, NONE = NULL */
    byte head;          /* the sentinel */
    byte state          /* VQ__VAR_* */
};

/* An op: its wait counter, and its description (immutable once pushed).
 * @F engine/engine_internal.h struct vq__op wait
 * @F engine/engine_internal.h struct vq__desc vars
 * @F engine/engine_internal.h struct vq__desc nexcl
 * @F engine/engine_internal.h struct vq_engine pushed
 * @F engine/engine_internal.h struct vq_engine completed */
typedef vq__op {
    byte wait
};
typedef vq__desc {
    byte n;             /* nwrites + nreads: distinct vars
                           @C engine/var_append.h:88 vq__var_append_op `int n = o->nwrites + o->nreads, granted = 0;` */
    byte nexcl;         /* vars[0 .. nexcl) are written, the rest read */
    byte vars[MAXV];    /* writes first, then reads, as opr_fill stores them */
    byte order[MAXV];   /* the lock order: vars by address (vq__var_sort) */
    byte base;          /* its n spare blocks: base .. base + n - 1 */
    bool del;           /* flags & VQ__OPR_DELETE */
    bool del_waits      /* the deleting pusher first waits for the other one
                           to return from its pushes on the var: nobody may
                           push on a var after vq_var_free started */
};

vq_var var[NVARS];
vq__vblock blk[NBLOCKS];
vq__op op[MAXOPS];
vq__desc desc[MAXOPS];
byte pushed;            /* engine->pushed: the next push's ticket */
byte completed;         /* engine->completed */

/* The pushers' programs: pusher p pushes prog[p * MAXOPS + k], k < nprog[p]. */
byte prog[2 * MAXOPS];
byte nprog[2];
byte pushes_done[2];

/* Ghosts: what the checks read; the C code has none of them. */
byte ticket[MAXOPS];            /* the push number; NONE before the push */
bool dispatched[MAXOPS];        /* handed to the ready queue or a worker */
bool started[MAXOPS];
bool ended[MAXOPS];             /* its function has returned */
byte seen[MAXOPS * MAXV];       /* val[] of each of its vars when it started */
bool released[MAXOPS * MAXV];   /* its completion of that access is done */
byte val[NVARS];                /* the var's contents: last writer's ticket + 1 */
byte active_r[NVARS];           /* ops reading the var right now */
bool active_w[NVARS];           /* an op writing it right now */
bool inq[MAXOPS];               /* the pool's ready queue, as a set */
byte nready;
bool freed[NBLOCKS];            /* given back to the pool */
bool offq[NBLOCKS];             /* taken off the queue by a completer, not yet freed */

/* ---- the spinlock (spinlock.h vq__spin_lock / vq__spin_unlock) ----
 * @C engine/surface/spinlock.h:20 vq__spin_lock `atomic_flag_test_and_set_explicit(&l->flag, memory_order_acquire)`
 * Taking it is one test-and-set that waits while the flag is set. Nothing
 * locks a var after it was destroyed. */
inline spin_lock(v)
{
    atomic { var[v].lock == 0 -> assert(var[v].state != VQ__VAR_DEAD); var[v].lock = 1 }
}

/* A completer's critical section. A completer holds one lock and waits for
 * nothing while it does, so taking the lock, the body and the unlock are one
 * step (the lock is free at that instant): with FINE=1 the lock is taken in
 * a step of its own, and spin_check.sh checks that both give the same
 * verdict. Used as: LOCKED_BEGIN(v) body; spin_unlock(v) LOCKED_END */
#if FINE
#define LOCKED_BEGIN(v) spin_lock(v); d_step {
#else
#define LOCKED_BEGIN(v) d_step { var[v].lock == 0 -> assert(var[v].state != VQ__VAR_DEAD); var[v].lock = 1;
#endif
#define LOCKED_END }

inline spin_unlock(v)
{
    var[v].lock = 0
}

/* vq__pool_free(VQ__POOL_VBLOCK, b): a ghost flag, and the block's fields
 * reset so that what a freed block held does not tell states apart. */
inline vblock_free(x)
{
    assert(!freed[x]);
    freed[x] = 1;
    offq[x] = 0;
    blk[x].next = 0;
    blk[x].trigger = 0;
    blk[x].write = 0
}

/* ---- appending (var.c), inside the d_step of push(): the caller holds
 * every lock of the op ----
 * @C engine/var.c:76 enqueue `struct vq__vblock *b = v->head;`
 * @C engine/var.c:77 enqueue `b->trigger = op; b->write = write; b->next = nb; nb->next = NULL; v->head = nb;`
 * The access goes into the sentinel; nb becomes the new sentinel. Sets b
 * (the pusher's local) to the block the access went into. */
inline enqueue(v, o, w, nb)
{
    b = var[v].head;
    assert(!freed[b] && !offq[b] && !freed[nb] && !offq[nb]);
    blk[b].trigger = o;
    blk[b].write = w;
    blk[b].next = nb;
    blk[nb].next = NONE;
    var[v].head = nb
}

/* @C engine/var.c:88 vq__var_append_read `if (!v->pending_write) { v->num_pending_reads++; return true; }`
 * @C engine/var.c:92 vq__var_append_read `enqueue(v, op, false, *spare); *spare = NULL; return false;`
 * Granted at once unless a write is pending; else it queues in the spare
 * block (sp, the next of the op's blocks). */
inline append_read(v, o)
{
    if
#if MUTANT == 2
    /* MUTANT 2: a read passes a write that has not been granted yet */
    :: var[v].pending_write == NONE || !var[v].write_triggered ->
#else
    :: var[v].pending_write == NONE ->
#endif
        var[v].num_pending_reads++;
        granted++
    :: else ->
        enqueue(v, o, 0, sp);
        sp++
    fi
}

/* @C engine/var.c:100 vq__var_append_write `struct vq__vblock *b = v->head; enqueue(v, op, true, nb); if (v->pending_write) return false;`
 * @C engine/var.c:105 vq__var_append_write `v->pending_write = b; v->write_triggered = v->num_pending_reads == 0; return v->write_triggered;`
 * A write always queues (in the sentinel; its spare block sp becomes the
 * new sentinel); it is granted at once when it is the oldest write and no
 * read runs. */
inline append_write(v, o)
{
    enqueue(v, o, 1, sp);
    sp++;
    if
    :: var[v].pending_write != NONE -> skip
    :: else ->
        var[v].pending_write = b;
        var[v].write_triggered = (var[v].num_pending_reads == 0);
        if
        :: var[v].write_triggered -> granted++
        :: else
        fi
    fi
}

/* ---- granting (engine_internal.h vq__op_dep_granted) ----
 * @C engine/engine_internal.h:757 vq__op_dep_granted `int wait = atomic_fetch_sub_explicit(&op->wait, 1, memory_order_acq_rel); VQ__ASSERT(wait >= 1); if (wait == 1) vq__ready_add(r, op);`
 * One atomic fetch_sub; whoever brings the counter to zero adds the op to
 * its batch (rmask, local to the worker: vq__ready). The ghost checks: the
 * counter never goes below zero, and an op is dispatched once. */
inline dep_granted_body(t)
{
    old = op[t].wait;
    assert(old >= 1);
    op[t].wait = old - 1;
    if
    :: old == 1 ->
        assert(!dispatched[t]);
        dispatched[t] = 1;
        rmask = rmask | (1 << t)
    :: else
    fi;
    old = 0
}

inline dep_granted(t)
{
    d_step { dep_granted_body(t) }
}

/* ---- completing (var.c) ----
 * @C engine/var.c:197 vq__var_complete_read `vq__spin_lock(&v->lock); VQ__ASSERT(v->num_pending_reads > 0); if (--v->num_pending_reads == 0 && v->pending_write && !v->write_triggered) { v->write_triggered = true; grant = v->pending_write->trigger; } vq__spin_unlock(&v->lock); if (grant) vq__op_dep_granted(grant, r);`
 * The last read to complete grants the pending write; the grant happens
 * after the unlock. slot: the access, for the ghost released[]. */
inline complete_read(v, slot)
{
    LOCKED_BEGIN(v)
        op_end(o);
        assert(var[v].num_pending_reads > 0);
        var[v].num_pending_reads--;
        grant = NONE;
        if
        :: var[v].num_pending_reads == 0 && var[v].pending_write != NONE &&
           !var[v].write_triggered ->
            var[v].write_triggered = 1;
            grant = blk[var[v].pending_write].trigger
        :: else
        fi;
        released[slot] = 1;
        spin_unlock(v)
    LOCKED_END
    if
    :: grant != NONE -> dep_granted(grant); grant = NONE
    :: else
    fi
}

/* @C engine/var.c:217 vq__var_complete_write `struct vq__vblock *done = v->pending_write; struct vq__vblock *first_read = done->next, *end = first_read;`
 * @C engine/var.c:220 vq__var_complete_write `while (end != v->head && !end->write) { end = end->next; nreads++; } v->num_pending_reads += nreads;`
 * @C engine/var.c:226 vq__var_complete_write `if (end == v->head) { v->pending_write = NULL; v->write_triggered = false; }`
 * @C engine/var.c:230 vq__var_complete_write `v->pending_write = end; v->write_triggered = nreads == 0; if (v->write_triggered) grant_write = end->trigger;`
 * @C engine/var.c:239 vq__var_complete_write `vq__pool_free(VQ__POOL_VBLOCK, done);`
 * @C engine/var.c:240 vq__var_complete_write `for (struct vq__vblock *b = first_read; b != end;) { struct vq__vblock *next = b->next; vq__op_dep_granted(b->trigger, r); vq__pool_free(VQ__POOL_VBLOCK, b); b = next; } if (grant_write) vq__op_dep_granted(grant_write, r);`
 * Under the lock: the run of reads after the completed write is counted as
 * running, and the next write becomes pending (granted at once when no
 * read precedes it). After the unlock: the reads' blocks, off the queue
 * now, are walked without the lock, each read granted and its block freed;
 * then the next write is granted. */
inline complete_write(v, slot)
{
    LOCKED_BEGIN(v)
        op_end(o);
        done = var[v].pending_write;
        assert(done != NONE && var[v].write_triggered && blk[done].trigger == o);
        first_read = blk[done].next;
        end = first_read;
        nreads = 0;
        do
        :: end != var[v].head && !blk[end].write ->
            assert(!freed[end]);
            end = blk[end].next;
            nreads++
        :: else -> break
        od;
        var[v].num_pending_reads = var[v].num_pending_reads + nreads;
        grant = NONE;
        if
        :: end == var[v].head ->
            var[v].pending_write = NONE;
            var[v].write_triggered = 0
        :: else ->
            var[v].pending_write = end;
            var[v].write_triggered = (nreads == 0);
#if MUTANT == 4
            /* MUTANT 4: the next write is granted even when reads come
             * before it (the last of them grants it again) */
            grant = blk[end].trigger
#else
            if
            :: var[v].write_triggered -> grant = blk[end].trigger
            :: else
            fi
#endif
        fi;
        /* ghost: first_read .. end are off the queue; the pusher must
         * never write them (enqueue asserts it) */
        b = first_read;
        do
        :: b != end -> offq[b] = 1; b = blk[b].next
        :: else -> break
        od;
        released[slot] = 1;
        spin_unlock(v)
    LOCKED_END
    d_step { vblock_free(done); b = first_read }
    /* Each block: reading it and freeing it touch only this completer's
     * block (off the queue: nobody else reaches it), so they go with the
     * one atomic of the grant (FINE=1: three steps). */
    do
    :: b != end ->
#if FINE
        d_step {
            assert(offq[b] && !freed[b]);
            nb = blk[b].next;
            t = blk[b].trigger
        }
        dep_granted(t);
        d_step { vblock_free(b); b = nb; nb = 0; t = 0 }
#else
        d_step {
            assert(offq[b] && !freed[b]);
            nb = blk[b].next;
            t = blk[b].trigger;
            dep_granted_body(t);
            vblock_free(b);
            b = nb;
            nb = 0;
            t = 0
        }
#endif
    :: else -> break
    od;
    if
    :: grant != NONE -> dep_granted(grant); grant = NONE
    :: else
    fi;
    d_step { done = 0; first_read = 0; end = 0; nreads = 0; b = 0 }
}

/* ---- pushing (engine.c op_enqueue, var_append.h vq__var_append_op) ----
 * @C engine/engine.c:402 op_enqueue `atomic_store_explicit(&op->wait, n + 1, memory_order_relaxed);`
 * @C engine/engine.c:403 op_enqueue `int granted = vq__var_append_op(op, order, &spare, &vq__last_ticket);`
 * @C engine/engine.c:420 op_enqueue `int wait = atomic_fetch_sub_explicit(&op->wait, granted + own, memory_order_acq_rel); VQ__ASSERT(wait >= granted + 1); if (wait == granted + own) dispatch_pushed(e, op);`
 * (own is 1 here; a held push, VQ__OPR_HELD, takes own = 0 and drops the
 * pusher's 1 later in vq__push_release_until, dispatching or running the op when that
 * brings the count to zero: the same decrement split in two, with grants
 * from other threads free to come between, as they already may come
 * between the append's unlocks and this decrement; whoever brings the
 * count to zero owns the op, once. The model checks the unsplit form.
 * dispatch_pushed is dispatch, except that a pusher between
 * vq__defer_begin and vq__defer_end keeps its first ready op and runs it
 * itself: the op is still run once, by one thread, after its grants.)
 * @C engine/var_append.h:92 vq__var_append_op `for (int i = 0; i < n; i++) vq__spin_lock(&order[i]->lock);`
 * @C engine/var_append.h:102 vq__var_append_op `*ticket = atomic_fetch_add_explicit(&o->engine->pushed, 1, memory_order_relaxed);`
 * @C engine/var_append.h:107 vq__var_append_op `for (int i = 0; i < o->nexcl; i++) {`
 * @C engine/var_append.h:111 vq__var_append_op `granted += vq__var_append_write(o->vars[i], op, b);`
 * @C engine/var_append.h:113 vq__var_append_op `for (int i = o->nexcl; i < n; i++) {`
 * @C engine/var_append.h:116 vq__var_append_op `if (vq__var_append_read(o->vars[i], op, spare)) granted++;`
 * @C engine/var_append.h:126 vq__var_append_op `for (int i = n - 1; i >= 0; i--) vq__spin_unlock(&order[i]->lock);`
 * @C engine/var.c:187 vq__var_sort `for (; j > 0 && (uintptr_t)vars[j - 1] > (uintptr_t)v; j--)`
 * The pieces, then the push itself (push, below). */
/* The unlocks of vq__var_append_op, in reverse lock order (i = n). */
inline unlock_all(o)
{
    do
    :: i > 0 ->
        i--;
#if MUTANT == 3
        v = desc[o].vars[i];
#else
        v = desc[o].order[i];
#endif
        spin_unlock(v)
    :: else -> break
    od
}

/* What comes before the op's first lock: vq_var_free's compare-and-swap
 * LIVE -> DELETING for a deletion, the contract (vq__check_var: no push on a
 * var being freed) for the others; and the op's wait counter, n + 1 (the
 * op is on no queue yet: nobody else sees it). One step with the first
 * lock (FINE=1: a step of its own): nothing else reads what it writes
 * before the pusher's next step. */
inline push_prepare(o)
{
    if
    :: desc[o].del ->
        assert(var[desc[o].vars[0]].state == VQ__VAR_LIVE);
        var[desc[o].vars[0]].state = VQ__VAR_DELETING
    :: else ->
        i2 = 0;
        do
        :: i2 < desc[o].n -> assert(var[desc[o].vars[i2]].state == VQ__VAR_LIVE); i2++
        :: else -> break
        od;
        i2 = 0
    fi;
    op[o].wait = desc[o].n + 1;
    sp = desc[o].base
}

/* Takes v's lock for the op's i-th lock; the first also does push_prepare. */
inline push_lock(v)
{
#if FINE
    spin_lock(v)
#else
    d_step {
        var[v].lock == 0 ->
        assert(var[v].state != VQ__VAR_DEAD);
        var[v].lock = 1;
        if
        :: i == 0 -> push_prepare(o)
        :: else
        fi
    }
#endif
}

/* The wait counter starts at n + 1 (set with the contract check, before the
 * op is on any queue: nobody else sees it yet); every var of the op is
 * locked in the one global order (ascending address: here the var's index),
 * each lock a step of its own, since a pusher waits for a lock while it
 * holds others; the ticket is taken and the accesses appended while all are
 * held, and the locks released: one step, since only the locked vars, the
 * pusher's own blocks and (one atomic fetch_add) pushed are touched, and
 * releases move left (FINE=1: each unlock a step); then one atomic
 * fetch_sub drops the pusher's count with the accesses granted, and the
 * pusher dispatches the op if that brought it to zero (the submit goes with
 * the fetch_sub: nobody else can reach an op whose counter is zero before
 * it is queued). */
inline push(o)
{
#if MUTANT == 1
    /* MUTANT 1: the first version, one var at a time (lock, append,
     * unlock), the push numbered before */
    d_step { ticket[o] = pushed; pushed++ }
    i = 0;
    do
    :: i < desc[o].n ->
        v = desc[o].vars[i];
        push_lock(v);
        d_step {
            if
            :: i < desc[o].nexcl -> append_write(v, o)
            :: else -> append_read(v, o)
            fi;
            spin_unlock(v)
        }
        i++
    :: else -> break
    od;
#else
    i = 0;
    do
    :: i < desc[o].n ->
#if MUTANT == 3
        /* MUTANT 3: the op's own order (writes, then reads), not one
         * global order */
        v = desc[o].vars[i];
#else
        v = desc[o].order[i];
#endif
        push_lock(v);
        i++
    :: else -> break
    od;
    granted = 0;
    d_step {
        ticket[o] = pushed;
        pushed++;
        i = 0;
        do
        :: i < desc[o].nexcl -> v = desc[o].vars[i]; append_write(v, o); i++
        :: else -> break
        od;
        do
        :: i < desc[o].n -> v = desc[o].vars[i]; append_read(v, o); i++
        :: else -> break
        od;
#if !FINE
        unlock_all(o)
#endif
    }
#if FINE
    unlock_all(o);
#endif
#endif
    i = 0;
    d_step {
        /* vblocks_free(spare): the blocks no read queued in */
        do
        :: sp < desc[o].base + desc[o].n -> freed[sp] = 1; sp++
        :: else -> break
        od;
        old = op[o].wait;
        assert(old >= granted + 1);
        op[o].wait = old - (granted + 1);
        if
        :: old == granted + 1 ->
            /* @C engine/engine.c:266 dispatch `vq__pool_submit(vq__pool_of(e, op), &op, 1, vq__self() == NULL);` */
            assert(!dispatched[o]);
            dispatched[o] = 1;
            inq[o] = 1;
            nready++
        :: else
        fi;
        pushes_done[p]++;
        old = 0; granted = 0; sp = 0; b = 0; v = 0
    }
}

/* @C engine/wait.c:76 vq_var_free `if (!atomic_compare_exchange_strong(&v->state, &live, VQ__VAR_DELETING))`
 * @C engine/wait.c:84 vq_var_free `rc = vq__push_task(e, &t, VQ__OPR_NOSKIP | VQ__OPR_DELETE, "vq_var_free", NULL);`
 * @C engine/wait.c:83 vq_var_free `vq_task t = {.writes = w, .nwrites = 1, .name = "vq_var_free"};`
 * A pusher: its program of pushes, in order. A deletion marks the var
 * DELETING (one compare-and-swap), then pushes a write op on it that
 * destroys it when it completes. */
proctype pusher(byte p)
{
    byte k, o, i, i2, v, sp, granted, old, b;
    k = 0;
    do
    :: k < nprog[p] ->
        o = prog[p * MAXOPS + k];
        if
        :: desc[o].del ->
            (!desc[o].del_waits || pushes_done[1 - p] == nprog[1 - p])
        :: else
        fi;
#if FINE
        d_step { push_prepare(o) }
#endif
        push(o);
        k++
    :: else -> break
    od
}

/* The op's function starts: it sees its vars' values, and it may run only
 * alone among the ops that conflict with it. A deletion checks that every
 * earlier access of its var is complete. (Inside the worker: its locals.) */
inline op_start(o)
{
    assert(dispatched[o] && !started[o] && op[o].wait == 0);
    started[o] = 1;
    i = 0;
    do
    :: i < desc[o].n ->
        v = desc[o].vars[i];
        assert(var[v].state != VQ__VAR_DEAD);
        if
        :: i < desc[o].nexcl -> assert(!active_w[v] && active_r[v] == 0); active_w[v] = 1
        :: else -> assert(!active_w[v]); active_r[v]++
        fi;
        seen[o * MAXV + i] = val[v];
        i++
    :: else -> break
    od;
    if
    :: desc[o].del ->
        v = desc[o].vars[0];
        o2 = 0;
        do
        :: o2 < NOPS ->
            if
            :: o2 != o && ticket[o2] != NONE && ticket[o2] < ticket[o] ->
                j = 0;
                do
                :: j < desc[o2].n ->
                    assert(desc[o2].vars[j] != v || released[o2 * MAXV + j]);
                    j++
                :: else -> break
                od
            :: else
            fi;
            o2++
        :: else -> break
        od
    :: else
    fi;
    i = 0; v = 0; j = 0; o2 = 0
}

/* var_destroy, for a deletion op: its var's queue is empty, its sentinel
 * freed, the var DEAD. */
inline var_destroy(o)
{
    if
    :: desc[o].del ->
        v = desc[o].vars[0];
        assert(var[v].state == VQ__VAR_DELETING && var[v].lock == 0);
        assert(var[v].pending_write == NONE && var[v].num_pending_reads == 0);
        vblock_free(var[v].head);
        var[v].head = NONE;
        var[v].state = VQ__VAR_DEAD;
        v = 0
    :: else
    fi
}

/* The op's function ends: a writer stores its push number + 1. It is done
 * in the step of the op's first completion (FINE=1: a step of its own):
 * only a start of a conflicting op could see the difference, and that comes
 * after a completion. */
inline op_end(o)
{
    if
    :: !ended[o] ->
        i2 = 0;
        do
        :: i2 < desc[o].n ->
            v = desc[o].vars[i2];
            if
            :: i2 < desc[o].nexcl -> val[v] = ticket[o] + 1; active_w[v] = 0
            :: else -> active_r[v]--
            fi;
            i2++
        :: else -> break
        od;
        ended[o] = 1;
        v = 0;
        i2 = 0
    :: else
    fi
}

/* ---- running (threaded.c worker_main, engine.c vq__op_run / vq__op_finish) ----
 * @C engine/threaded.c:481 worker_main `struct vq__item it = {.op = w->next}; w->next = NULL; if (!it.op && !vq__pool_pop(p, &it) && !worker_sleep(p, w->engine->spin_looks, &it)) break;`
 * @C engine/threaded.c:490 worker_main `vq__op_run(it.op, &x, &r); if (r.n) { keep_successor(w, &r); vq__ready_flush(&r); }`
 * @C engine/threaded.c:468 keep_successor `if (best < 0 || heap_has_above(&w->pool->heap, r->ops[best]->desc->priority)) return; w->next = r->ops[best]; r->ops[best] = r->ops[--r->n];`
 * @C engine/engine.c:911 vq__op_finish `for (int i = o->nexcl; i < o->nwrites + o->nreads; i++) vq__var_complete_read(o->vars[i], r); for (int i = 0; i < o->nexcl; i++) vq__var_complete_write(o->vars[i], r);`
 * @C engine/engine.c:916 vq__op_finish `if (o->flags & VQ__OPR_DELETE) { VQ__ASSERT(atomic_load_explicit(&o->vars[0]->state, memory_order_relaxed) == VQ__VAR_DELETING); vq__var_destroy(e, o->vars[0]); }`
 * @C engine/engine_internal.h:679 vq__op_completed `unsigned long done = atomic_fetch_add(&e->completed, n) + n;`
 * @C engine/engine_new.c:199 vq__var_destroy `vq__pool_free(VQ__POOL_VBLOCK, v->head); v->head = NULL; atomic_store_explicit(&v->state, VQ__VAR_DEAD, memory_order_release);`
 * (Light ops, engine_internal.h, have no vars: nothing here concerns them.)
 * A worker runs its kept successor (nxt: w->next) or any ready op; the op's
 * function observes its vars as it starts and stores its writes as it
 * ends; the op then completes its reads, then its writes, destroys its var
 * if it is a deletion, and counts itself completed. The batch of ops it
 * made ready: one may be kept for a direct run (or none: a queued op has a
 * higher priority), the rest go to the ready queue.
 * Not modelled: groups (var.c, bulk execution). A push that joins a group
 * queues no access; its op runs inside the head's run, and the head counts
 * it completed with itself (vq__op_completed's n), which is the model's op
 * with a longer function. */
proctype worker(byte w)
{
    byte o, nxt = NONE, rmask, i, j, v, old, grant, done, first_read, end, nreads, b, nb, t, o2, cv, i2;
end_idle:
    /* Taking an op (its own w->next, or any op of the ready queue) and the
     * start of its function are one step (FINE=1: two): taking moves right,
     * nobody else can reach the op in between. */
    atomic {
        if
        :: nxt != NONE -> o = nxt; nxt = NONE
        :: nxt == NONE && nready > 0 ->
            if
            :: inq[0] -> o = 0
            :: inq[1] -> o = 1
            :: inq[2] -> o = 2
            :: inq[3] -> o = 3
            :: inq[4] -> o = 4
            :: inq[5] -> o = 5
            :: inq[6] -> o = 6
            :: inq[7] -> o = 7
            fi;
            inq[o] = 0;
            nready--
        fi;
#if FINE
    }
#endif
        d_step { op_start(o) }
#if !FINE
    }
#endif
#if FINE
    d_step { op_end(o) }
#endif
    /* vq__op_finish: reads, then writes */
    i = desc[o].nexcl;
    do
    :: i < desc[o].n -> cv = desc[o].vars[i]; complete_read(cv, o * MAXV + i); i++
    :: else -> break
    od;
    i = 0;
    do
    :: i < desc[o].nexcl -> cv = desc[o].vars[i]; complete_write(cv, o * MAXV + i); i++
    :: else -> break
    od;
    i = 0;
#if FINE
    d_step { var_destroy(o) }
#endif
    /* var_destroy, op_completed, then keep_successor and vq__ready_flush:
     * one step (FINE=1: three); the flush publishes the ops (a move to the left).
     * keep_successor (the direct run) is modelled with FINE=1 only: the
     * ready queue is a set from which either worker takes any op, so this
     * worker taking the op it would have kept is already one of the
     * choices, and keeping it only removes the other worker's. */
#if FINE
    atomic {
        completed++
    }
    atomic {
#else
    d_step {
        var_destroy(o);
        completed++;
#endif
        if
        :: rmask != 0 ->
#if FINE
            if
            :: i = 0;
               do
               :: (rmask >> i) & 1 -> break
               :: else -> i++
               od;
               nxt = i;
               rmask = rmask & ~(1 << i)
            :: skip     /* heap_has_above: a queued op has a higher priority */
            fi;
#endif
            i = 0;
            do
            :: i < MAXOPS ->
                if
                :: (rmask >> i) & 1 -> inq[i] = 1; nready++
                :: else
                fi;
                i++
            :: else -> break
            od;
            rmask = 0
        :: else
        fi;
        i = 0;
        o = 0
    }
    goto end_idle
}

/* ---- the configurations ----
 * defop(o, p, nw, nr, a, b, c, del, waits): op o, pushed by pusher p, writes
 * its first nw vars of a, b, c and reads the next nr. */
inline defop(o_, p_, nw_, nr_, a_, b_, c_, del_, waits_)
{
    desc[o_].n = nw_ + nr_;
    desc[o_].nexcl = nw_;
    desc[o_].vars[0] = a_;
    desc[o_].vars[1] = b_;
    desc[o_].vars[2] = c_;
    desc[o_].del = del_;
    desc[o_].del_waits = waits_;
    desc[o_].base = nblk;
    nblk = nblk + nw_ + nr_;
    prog[p_ * MAXOPS + nprog[p_]] = o_;
    nprog[p_]++
}

#define X 0
#define Y 1
#define Z 2
#define NV NONE

init {
    byte i, j, k, t, o, v, nblk;
    byte sval[NVARS];
    d_step {
        nblk = NVARS;   /* blocks 0 .. NVARS - 1: the vars' first sentinels */
#if CONFIG == 1
        /* 2 vars, 4 ops + a deletion, 2 pushers. op0 and op2 cross (the
         * deadlock reproducer of push_stress: add(a, b) -> a against
         * add(a, b) -> b); op3 reads both; the deletion of x comes after
         * both pushers' accesses of x. */
        defop(0, 0, 1, 1, Y, X, NV, 0, 0);  /* P0: write y, read x */
        defop(1, 0, 1, 0, X, NV, NV, 0, 0); /* P0: write x */
        defop(2, 1, 1, 1, X, Y, NV, 0, 0);  /* P1: write x, read y */
        defop(3, 1, 0, 2, X, Y, NV, 0, 0);  /* P1: read x, read y */
        defop(4, 0, 1, 0, X, NV, NV, 1, 1); /* P0: vq_var_free(x), once P1 is done */
#elif CONFIG == 2
        /* 3 vars, 4 ops + a deletion, 2 pushers; an op on three vars and
         * one writing two; z is P0's own var, deleted while P1 may still
         * push. */
        defop(0, 0, 1, 2, X, Y, Z, 0, 0);   /* P0: write x, read y, z */
        defop(1, 0, 1, 1, Z, X, NV, 0, 0);  /* P0: write z, read x */
        defop(2, 1, 1, 1, Y, X, NV, 0, 0);  /* P1: write y, read x */
        defop(3, 1, 2, 0, X, Y, NV, 0, 0);  /* P1: write x and y */
        defop(4, 0, 1, 0, Z, NV, NV, 1, 0); /* P0: vq_var_free(z) */
#endif
        assert(nblk == NBLOCKS);
#if MUTANT == 5
        /* MUTANT 5: vq_var_free pushes its op as a read of the var */
        o = 0;
        do
        :: o < NOPS -> if :: desc[o].del -> desc[o].nexcl = 0 :: else fi; o++
        :: else -> break
        od;
#endif
        /* the lock order: each op's vars sorted by address (insertion
         * sort, as vq__var_sort) */
        o = 0;
        do
        :: o < NOPS ->
            i = 0;
            do
            :: i < desc[o].n -> desc[o].order[i] = desc[o].vars[i]; i++
            :: else -> break
            od;
            i = 1;
            do
            :: i < desc[o].n ->
                v = desc[o].order[i];
                j = i;
                do
                :: j > 0 && desc[o].order[j - 1] > v ->
                    desc[o].order[j] = desc[o].order[j - 1];
                    j--
                :: else -> break
                od;
                desc[o].order[j] = v;
                i++
            :: else -> break
            od;
            ticket[o] = NONE;
            o++
        :: else -> break
        od;
        /* vq__var_init: an empty queue (only the sentinel), LIVE */
        v = 0;
        do
        :: v < NVARS ->
            var[v].head = v;
            blk[v].next = NONE;
            blk[v].trigger = NONE;
            var[v].pending_write = NONE;
            var[v].state = VQ__VAR_LIVE;
            v++
        :: else -> break
        od;
        i = 0; j = 0; o = 0; v = 0
    }
    atomic {
        run pusher(0);
        run pusher(1);
        run worker(0);
        run worker(1)
    }
    /* no lost grant: every op completes (spin reports an invalid end state
     * when everything stops before) */
    (completed == NOPS);
    /* serial equivalence: replay the ops one at a time in ticket order */
    d_step {
        assert(pushed == NOPS && nready == 0);
        v = 0;
        do
        :: v < NVARS -> sval[v] = 0; v++
        :: else -> break
        od;
        t = 0;
        do
        :: t < NOPS ->
            o = 0;
            do
            :: ticket[o] == t -> break
            :: else -> o++; assert(o < NOPS)
            od;
            assert(dispatched[o] && started[o] && ended[o] && op[o].wait == 0);
            j = 0;
            do
            :: j < desc[o].n ->
                v = desc[o].vars[j];
                assert(seen[o * MAXV + j] == sval[v]);
                if
                :: j < desc[o].nexcl -> sval[v] = t + 1
                :: else
                fi;
                j++
            :: else -> break
            od;
            t++
        :: else -> break
        od;
        /* the vars end as the replay does; the live ones with an empty
         * queue; every block freed but their sentinels */
        v = 0;
        do
        :: v < NVARS ->
            assert(val[v] == sval[v] && var[v].lock == 0);
            if
            :: var[v].state == VQ__VAR_LIVE ->
                assert(var[v].pending_write == NONE && var[v].num_pending_reads == 0);
                assert(!freed[var[v].head])
            :: else -> assert(var[v].state == VQ__VAR_DEAD)
            fi;
            v++
        :: else -> break
        od;
        k = 0;
        do
        :: k < NBLOCKS ->
            assert(!offq[k]);
            v = 0;
            do
            :: v < NVARS && !(var[v].state == VQ__VAR_LIVE && var[v].head == k) -> v++
            :: else -> break
            od;
            assert(freed[k] == (v == NVARS));
            k++
        :: else -> break
        od
    }
}
