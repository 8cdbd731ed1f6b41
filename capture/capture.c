/* Capture of imperative calls (include/varq/capture.h): vq_op_run calls
 * recorded into segments, guarded by their structure, and pushed as one
 * engine op each that replays the calls' kernels from a cached plan.
 *
 * How it fits: ops/ (below) calls the two hooks it exports (ops/ops_internal.h:
 * vq__capture) from vq_op_run and from the tensor functions that read
 * bytes or take a var; this file installs them on the first
 * vq_capture_begin. It sits beside graph/, which it uses for imperative
 * autodiff (a program of the segment's calls, vq_append_backward).
 *
 * The pieces:
 *   state  - one per thread and engine: the segment being recorded (its
 *            tensors, "slots", in order of first use, each with one
 *            reference held by the segment) and the cache.
 *   node   - one recorded call's structure after the calls of its parent:
 *            op, attributes (deep copies), input and output metas, wiring
 *            (slot numbers), and the checked result (output metas,
 *            params). The path from the root to the current node is the
 *            segment's guard; node->hash is its hash.
 *   plan   - at a path's end, per set of slot kinds (which new tensors the
 *            caller still holds): the ops in order and which slots the
 *            segment's engine op reads and writes. Kept in an LRU.
 *   run    - one push of a plan: the slots' tensors, their vars, and the
 *            per-slot errors while the kernels run.
 *
 * Locking: a state's lock is held by its thread while it records a call or
 * cuts, and by any thread that cuts it because it touches one of its
 * tensors (t->capture). Lock order: a thread never holds two states'
 * locks (it lets go of its own before cutting another's); states_lock is
 * innermost and guards t->capture -> state lookups against a state's free
 * at thread exit, and the registry of every thread's states.
 *
 * An engine freed while states are open on it (vq_engine_free's hook,
 * engine_freed): every state of the engine, whichever thread's, is ended
 * as vq_capture_end would (its segment pushed) and marked dead, under its
 * lock, before the engine drains. A dead state is never pushed from
 * again; its thread skips it (state_find), forgets it at its next
 * vq_capture_begin or its exit, and never touches the freed engine. */
#include "capture_internal.h"

#include "engine_services.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t states_lock = PTHREAD_MUTEX_INITIALIZER;
static struct state *registry; /* under states_lock: every live state */
static _Thread_local struct state *my_states;
static pthread_key_t states_key;
static pthread_once_t states_once = PTHREAD_ONCE_INIT;

static void state_unref(struct state *S)
{
    pthread_mutex_lock(&states_lock);
    bool last = --S->refs == 0;
    pthread_mutex_unlock(&states_lock);
    if (!last)
        return;
    if (S->cache) /* a dead state's went with its engine */
        vq__capture_cache_unref(S->cache);
    free(S->slot);
    free(S->kind);
    free(S);
}

/* The thread lets go of S: out of the registry (no engine's free finds
 * it any more), then its reference. */
static void state_forget(struct state *S)
{
    pthread_mutex_lock(&states_lock);
    if (S->reg_prev)
        S->reg_prev->reg_next = S->reg_next;
    else
        registry = S->reg_next;
    if (S->reg_next)
        S->reg_next->reg_prev = S->reg_prev;
    pthread_mutex_unlock(&states_lock);
    state_unref(S);
}

/* Thread exit: what is still recorded is pushed (unless the engine went
 * first: vq_engine_free pushed it then), then the states go. */
static void states_free(void *arg)
{
    struct state *S = arg;
    while (S) {
        struct state *next = S->next;
        state_lock(S);
        if (!atomic_load_explicit(&S->dead, memory_order_relaxed))
            vq__capture_seg_cut(S, VQ_CAPTURE_CUT_END);
        S->active = false;
        state_unlock(S);
        state_forget(S);
        S = next;
    }
}

/* vq_engine_free's hook: ends every state open on e, whichever thread's,
 * before the engine drains (see the file head). One state per round: the
 * registry is scanned under states_lock, the state cut under its own lock
 * with states_lock let go (the lock order), and marked dead under both, so
 * the next round skips it. A state whose thread exits meanwhile is cut by
 * whichever of the two takes its lock first; the other finds nothing to
 * push. */
static void engine_freed(vq_engine *e)
{
    for (;;) {
        pthread_mutex_lock(&states_lock);
        struct state *S = registry;
        while (S && (S->e != e || atomic_load_explicit(&S->dead, memory_order_relaxed)))
            S = S->reg_next;
        if (S)
            S->refs++;
        pthread_mutex_unlock(&states_lock);
        if (!S)
            return;
        state_lock(S);
        if (!atomic_load_explicit(&S->dead, memory_order_relaxed)) {
            vq__capture_seg_cut(S, VQ_CAPTURE_CUT_END);
            S->active = false;
            pthread_mutex_lock(&states_lock);
            atomic_store_explicit(&S->dead, true, memory_order_relaxed);
            pthread_mutex_unlock(&states_lock);
            /* The tree's kept temporaries go now rather than at the thread's
             * exit; a run still in flight keeps the cache it holds. */
            vq__capture_cache_unref(S->cache);
            S->cache = NULL;
        }
        state_unlock(S);
        state_unref(S);
    }
}

static void states_key_make(void)
{
    pthread_key_create(&states_key, states_free);
    vq__engine_on_free(engine_freed);
}

/* hot path: the calling thread's live state for e (a dead one's engine
 * may have been freed and another made at its address) */
struct state *vq__capture_state_find(vq_engine *e)
{
    for (struct state *S = my_states; S; S = S->next)
        if (S->e == e && !atomic_load_explicit(&S->dead, memory_order_relaxed))
            return S;
    return NULL;
}

/* The calling thread forgets its dead states (their engines are gone). */
static void states_prune(void)
{
    bool changed = false;
    for (struct state **p = &my_states; *p;) {
        struct state *S = *p;
        if (atomic_load_explicit(&S->dead, memory_order_relaxed)) {
            *p = S->next;
            state_forget(S);
            changed = true;
        } else {
            p = &S->next;
        }
    }
    if (changed)
        pthread_setspecific(states_key, my_states);
}

/* Cuts the segment that uses t, whoever's it is (a cut from outside it). */
static void cut_tensor(vq_tensor *t, int cause)
{
    pthread_mutex_lock(&states_lock);
    /* acquire: S was made by its thread before it claimed t (slot_add's
     * exchange); nothing else need order that with this thread. */
    struct state *S = atomic_load_explicit(&t->capture, memory_order_acquire);
    if (S)
        S->refs++;
    pthread_mutex_unlock(&states_lock);
    if (!S)
        return;
    /* A host read waits for the segment next: it runs it itself. */
    void *held = NULL;
    void **hold = cause == VQ_CAPTURE_CUT_HOST_READ ? &held : NULL;
    if (vq__capture_state_find(S->e) != S)
        cause = VQ_CAPTURE_CUT_THREAD;
    state_lock(S);
    if (atomic_load_explicit(&t->capture, memory_order_relaxed) == S)
        vq__capture_seg_cut_held(S, cause, hold);
    state_unlock(S);
    vq__push_release(S->e, held);
    state_unref(S);
}

static void hook_cut(vq_tensor *t, int cause)
{
    /* Not from inside an op: it may be running inside a push made under a
     * state's lock (the throttle runs ready ops in the pusher). */
    if (vq_thread_in_op())
        return;
    cut_tensor(t, cause == VQ__CUT_VAR ? VQ_CAPTURE_CUT_VAR : VQ_CAPTURE_CUT_HOST_READ);
}

static int hook_op_run(vq_engine *e, const char *type, vq_tensor *const *in, int nin,
                       vq_tensor **out, int nout, const vq_attr *attrs, int nattrs)
{
    /* Calls from inside ops run eagerly and cut nothing (see hook_cut). */
    if (vq_thread_in_op())
        return VQ__CAPTURE_EAGER;
    struct state *S = vq__capture_state_find(e);
    if (S && S->active) {
        /* Recorded work of others on these tensors is pushed first (their
         * calls came earlier): record finds it when it claims the tensor
         * (FOREIGN), then the call is recorded again. */
        for (;;) {
            state_lock(S);
            int rc = vq__capture_record(S, type, in, nin, out, nout, attrs, nattrs, NULL);
            vq_tensor *foreign = S->foreign;
            S->foreign = NULL;
            state_unlock(S);
            if (rc != FOREIGN)
                return rc;
            cut_tensor(foreign, VQ_CAPTURE_CUT_THREAD); /* claimed by another segment */
        }
    }
    /* Not capturing: recorded work of others on these tensors is pushed
     * before the call runs eagerly. */
    for (int i = 0; i < nin + nout; i++) {
        vq_tensor *t = i < nin ? (in ? in[i] : NULL) : (out ? out[i - nin] : NULL);
        if (t && atomic_load_explicit(&t->capture, memory_order_relaxed))
            cut_tensor(t, VQ_CAPTURE_CUT_THREAD);
    }
    return VQ__CAPTURE_EAGER;
}

static const vq__capture_hooks hooks = {.op_run = hook_op_run, .cut = hook_cut};

/* ---- public ---- */

VQ_API int vq_capture_begin(vq_engine *e)
{
    if (!e)
        return vq__fail(VQ_EINVAL, "vq_capture_begin: engine is NULL");
    struct state *S = vq__capture_state_find(e);
    if (S && S->active)
        return vq__fail(VQ_EINVAL, "vq_capture_begin: this thread already captures on the engine");
    if (!S) {
        states_prune();
        pthread_once(&states_once, states_key_make);
        S = vq__calloc(1, sizeof *S);
        if (!S || !(S->cache = vq__capture_cache_new())) {
            free(S);
            return vq__fail(VQ_ENOMEM, "vq_capture_begin: out of memory");
        }
        atomic_flag_clear(&S->lock.flag);
        atomic_init(&S->dead, false);
        S->e = e;
        S->refs = 1;
        state_reset_segment(S);
        S->next = my_states;
        my_states = S;
        pthread_setspecific(states_key, my_states);
        pthread_mutex_lock(&states_lock);
        S->reg_next = registry;
        if (registry)
            registry->reg_prev = S;
        registry = S;
        pthread_mutex_unlock(&states_lock);
        atomic_store_explicit(&vq__capture, &hooks, memory_order_release);
    }
    state_lock(S);
    S->active = true;
    S->first_err = 0;
    state_unlock(S);
    return 0;
}

VQ_API int vq_capture_end(vq_engine *e)
{
    struct state *S = e ? vq__capture_state_find(e) : NULL;
    if (!S || !S->active)
        return vq__fail(VQ_EINVAL, "vq_capture_end: this thread does not capture on the engine");
    state_lock(S);
    void *held = NULL;
    vq__capture_seg_cut_held(S, VQ_CAPTURE_CUT_END, &held);
    S->active = false;
    int rc = S->first_err;
    state_unlock(S);
    vq__push_release(e, held);
    return rc;
}

VQ_API int vq_capture_get_stats(vq_engine *e, vq_capture_stats *out)
{
    if (!e || !out)
        return vq__fail(VQ_EINVAL, "vq_capture_get_stats: NULL argument");
    struct state *S = vq__capture_state_find(e);
    if (!S) {
        memset(out, 0, sizeof *out);
        return 0;
    }
    state_lock(S);
    *out = S->stats;
    state_unlock(S);
    return 0;
}
