/* The var queue: the one state machine that orders ops (docs/design/engine.md).
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
 * of an op's accesses at once (vq__var_append_op, var_append.h): it locks every var of the
 * op in ascending address order, appends, takes the op's ticket and unlocks.
 * Appending one var at a time would let two pushers interleave (A on x, B on
 * x, B on y, A on y) and queue A before B on x but B before A on y: a cycle
 * that no completion ever breaks. Holding all the locks makes each push
 * happen at one instant (two-phase locking), and the one global lock order
 * means that pushers never wait for each other in a cycle; a completer holds
 * one lock and waits for none, so it closes no cycle either. */
#include "engine_internal.h"

#include <assert.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
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
    v->fail_note = NULL;
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

/* vq__sort_by_addr's body, inlined for each item size (fixed-size copies) */
static inline __attribute__((always_inline)) bool sort_by_addr(void *items, int n, size_t size)
{
    unsigned char *a = items, *tmp = vq__malloc((size_t)n * size);
    if (!tmp)
        return false;
    /* every byte's histogram in one pass; a byte all items share (the
     * high bytes of pool addresses, the low bits of aligned ones) is no pass */
    static_assert(sizeof(uintptr_t) <= 8, "addresses of at most 8 bytes");
    uint32_t count[sizeof(uintptr_t)][256];
    memset(count, 0, sizeof count);
    for (int i = 0; i < n; i++) {
        uintptr_t k;
        memcpy(&k, a + (size_t)i * size, sizeof k);
        for (size_t b = 0; b < sizeof k; b++)
            count[b][(k >> (8 * b)) & 255]++;
    }
    unsigned char *src = a, *dst = tmp;
    for (size_t b = 0; b < sizeof(uintptr_t); b++) {
        uintptr_t k0;
        memcpy(&k0, src, sizeof k0);
        if (count[b][(k0 >> (8 * b)) & 255] == (uint32_t)n)
            continue;
        uint32_t at = 0;
        for (int d = 0; d < 256; d++) {
            uint32_t c = count[b][d];
            count[b][d] = at;
            at += c;
        }
        for (int i = 0; i < n; i++) {
            uintptr_t k;
            memcpy(&k, src + (size_t)i * size, sizeof k);
            memcpy(dst + (size_t)count[b][(k >> (8 * b)) & 255]++ * size, src + (size_t)i * size,
                   size);
        }
        unsigned char *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, (size_t)n * size);
    free(tmp);
    return true;
}

bool vq__sort_by_addr(void *items, int n, size_t size)
{
    if (n < 2)
        return true;
    if (size == sizeof(void *))
        return sort_by_addr(items, n, sizeof(void *));
    if (size == 2 * sizeof(void *))
        return sort_by_addr(items, n, 2 * sizeof(void *));
    return sort_by_addr(items, n, size);
}

/* Sorts vars[0 .. n) by address: the one order in which pushers lock.
 * Insertion sort for the few vars of a push; a radix sort beyond (qsort
 * without the memory for its buffer), where the insertion sort's n^2 / 4
 * moves would dominate (a plan's final op reads every var of a 100k-op
 * program, vq_opr_new sorts them once). */
void vq__var_sort(vq_var **vars, int n)
{
    if (n > 64) {
        if (!vq__sort_by_addr(vars, n, sizeof *vars))
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

void vq__var_fail_noted(vq_var *v, int err, struct vq__fail_note *note)
{
    if (v->err)
        return;
    v->err = err;
    vq__fail_note_ref(note);
    v->fail_note = note;
}

struct vq__fail_note *vq__var_fail_note(const vq_var *v)
{
    return v->err ? v->fail_note : NULL;
}

/* ---- failure notes (engine_services.h) ---- */

struct vq__fail_note {
    atomic_int refs;
    char text[]; /* immutable once made */
};

struct vq__fail_note *vq__fail_note_new(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (len < 0)
        return NULL;
    struct vq__fail_note *n = vq__malloc(sizeof *n + (size_t)len + 1);
    if (!n)
        return NULL;
    atomic_init(&n->refs, 1);
    va_start(ap, fmt);
    vsnprintf(n->text, (size_t)len + 1, fmt, ap);
    va_end(ap);
    return n;
}

void vq__fail_note_ref(struct vq__fail_note *n)
{
    /* relaxed: the caller holds a reference, which keeps n alive; the
     * var (or array) it stores n in is handed to others by the queue's
     * own release and acquire, which also publishes the text */
    if (n)
        atomic_fetch_add_explicit(&n->refs, 1, memory_order_relaxed);
}

void vq__fail_note_unref(struct vq__fail_note *n)
{
    /* acq_rel: the thread that frees n sees every holder done with it */
    if (n && atomic_fetch_sub_explicit(&n->refs, 1, memory_order_acq_rel) == 1)
        free(n);
}

const char *vq__fail_note_text(const struct vq__fail_note *n)
{
    return n->text;
}

void vq__engine_note_fail(vq_engine *e, int err)
{
    int none = 0;
    atomic_compare_exchange_strong(&e->first_err, &none, err);
}
