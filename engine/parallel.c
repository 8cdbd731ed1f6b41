/* Parallel loops inside one op: the idle CPU workers help a kernel that
 * has more work than one core should do alone (a convolution of one
 * image, a large product), the way OpenMP's `parallel for` nested in a
 * task or TBB's parallel_for borrow the pool's threads.
 *
 * The op that calls vq__parallel_for splits [0, n) into chunks and pushes
 * a few var-less helper ops on its own pool; then it takes chunks itself.
 * The caller sets the chunk size, so the chunks are the same whoever runs
 * them and however many participants there are: a kernel whose result
 * depends on how its work is cut (a product cut into blocks of columns
 * rounds differently) gives the same bits on every engine and thread.
 * Every participant (the caller and each helper op that starts in time)
 * claims the next chunk with one fetch-add until none is left, so a busy
 * worker that reaches its helper op late simply finds nothing to do, and
 * the caller never waits for an op that has not started: it waits only for
 * chunks already claimed, which are running on a worker right now. That is
 * why no deadlock is possible even when every other worker is busy for
 * long (the caller then does all the chunks itself), and why the caller
 * needs no helping wait.
 *
 * The loop's state lives on the heap with a reference per participant that
 * may still touch it: a helper op that starts after the caller returned
 * only drops its reference. Chunks never nest: a chunk that calls
 * vq__parallel_for runs its loop serially.
 *
 * A thread that is not a worker but runs a queued op of the pool (a
 * pusher past the throttle, a waiter in vq_wait_var: vq__run_here) shares
 * the loop with the pool's workers. Elsewhere (the naive engine, a GPU
 * worker, a plain thread) the loop runs serially on the calling thread, as
 * it does with one participant or one chunk: the same chunks, in order. */
#include "engine_internal.h"

#include <stdlib.h>

struct par_loop {
    VQ__ALIGNED atomic_llong next; /* the first unclaimed index */
    VQ__ALIGNED atomic_llong done; /* indices whose chunk returned */
    atomic_int slots;              /* participants so far; the caller is 0 */
    atomic_int refs;               /* the caller and each helper op not yet run */
    atomic_int err;                /* the first chunk's error, 0 if none */
    int64_t n, chunk;
    int max_slots;
    vq__range_fn fn;
    void *arg;
};

/* Set while this thread runs a chunk: a nested loop runs serially. */
static VQ__TLS bool in_chunk;

static void loop_unref(struct par_loop *l)
{
    /* acq_rel: the last owner sees every other's writes before it frees */
    if (atomic_fetch_sub_explicit(&l->refs, 1, memory_order_acq_rel) == 1)
        free(l);
}

/* Claims and runs chunks until none is left. */
static void take_chunks(struct par_loop *l, int slot)
{
    in_chunk = true;
    for (;;) {
        int64_t lo = atomic_fetch_add_explicit(&l->next, l->chunk, memory_order_relaxed);
        if (lo >= l->n)
            break;
        int64_t hi = lo + l->chunk < l->n ? lo + l->chunk : l->n;
        int err = l->fn(l->arg, lo, hi, slot);
        if (err) {
            int none = 0;
            atomic_compare_exchange_strong(&l->err, &none, err);
        }
        /* release: the chunk's writes are visible to the caller that
         * sees done reach n */
        atomic_fetch_add_explicit(&l->done, hi - lo, memory_order_release);
    }
    in_chunk = false;
}

static int helper_run(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct par_loop *l = arg;
    if (atomic_load_explicit(&l->next, memory_order_relaxed) < l->n) {
        int slot = atomic_fetch_add_explicit(&l->slots, 1, memory_order_relaxed);
        if (slot < l->max_slots)
            take_chunks(l, slot);
    }
    loop_unref(l);
    return 0;
}

/* The pool a loop on this thread would share, its engine, and how many
 * participants it would have; 1 when it runs serially. */
static int loop_width(vq_engine **engine)
{
    struct vq__worker *w = vq__self();
    vq_engine *e = w ? w->engine : vq__helping;
    struct vq__wpool *p = w ? w->pool : e ? &e->cpu : NULL;
    if (!p || p->device || in_chunk)
        return 1;
    /* a helping thread joins the pool's workers */
    int width = p->nworkers + (w ? 0 : 1);
    *engine = e;
    return width < VQ__PAR_MAX_SLOTS ? width : VQ__PAR_MAX_SLOTS;
}

int vq__parallel_slots(void)
{
    vq_engine *e;
    return loop_width(&e);
}

int vq__parallel_for(int64_t n, int64_t chunk, vq__range_fn fn, void *arg)
{
    if (n <= 0)
        return 0;
    if (chunk < 1)
        chunk = 1;
    vq_engine *e = NULL;
    int width = loop_width(&e);
    int64_t nchunks = (n + chunk - 1) / chunk;
    int helpers = width - 1 < nchunks - 1 ? width - 1 : (int)(nchunks - 1);
    struct par_loop *l = helpers > 0 ? vq__aligned_alloc(VQ__CACHELINE, sizeof *l) : NULL;
    if (!l) { /* one participant, or no memory for the loop: the same chunks here */
        int first = 0;
        for (int64_t lo = 0; lo < n; lo += chunk) {
            int err = fn(arg, lo, lo + chunk < n ? lo + chunk : n, 0);
            first = first ? first : err;
        }
        return first;
    }
    atomic_init(&l->next, 0);
    atomic_init(&l->done, 0);
    atomic_init(&l->slots, 1);
    atomic_init(&l->refs, 1 + helpers);
    atomic_init(&l->err, 0);
    l->n = n;
    l->chunk = chunk;
    l->max_slots = width;
    l->fn = fn;
    l->arg = arg;

    vq_task t = {.fn = helper_run, .arg = l, .name = "parallel_for"};
    for (int i = 0; i < helpers; i++)
        if (vq_push(e, &t) < 0)
            loop_unref(l); /* no helper: its share stays with the others */

    take_chunks(l, 0);
    /* The chunks still out run on workers now (each was claimed by a
     * running participant): wait for them without sleeping. */
    for (int i = 0; atomic_load_explicit(&l->done, memory_order_acquire) < n; i++)
        vq__spin_pause(i);
    int err = atomic_load_explicit(&l->err, memory_order_relaxed);
    loop_unref(l);
    return err;
}
