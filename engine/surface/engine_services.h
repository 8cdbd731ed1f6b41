/* The engine's one surface for the layers above it (ops/, graph/,
 * capture/, dist/): errors, the GPU op's stream and the stream backends,
 * the profiler's spans for ops run inside one engine op, and a var's
 * carried failure. Nothing above engine/ includes engine_internal.h or
 * stream.h; what it needs of them is declared or included here (the model:
 * libuv's uv-common.h, shared by unix/ and win/). */
#ifndef VARQ_ENGINE_SERVICES_H
#define VARQ_ENGINE_SERVICES_H

#include <varq/engine.h>

#include "fault.h"  /* every allocation goes through vq__malloc & co. */
#include "stream.h" /* the backend vtable (ops/gpu.c allocates and copies through it) */

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* Asks for the cache line at p (a hint: no fault, no effect on results).
 * Written out on x86, where gcc 12's dead code elimination drops
 * __builtin_prefetch from some inlined helpers (graph/plan.c's). */
#if defined(__x86_64__) || defined(__i386__)
#define VQ__PREFETCH(p) __asm__ __volatile__("prefetcht0 %0" : : "m"(*(const char *)(p)))
#else
#define VQ__PREFETCH(p) __builtin_prefetch(p)
#endif

/* ---- errors (error.c) ---- */

/* The size of the thread-local message (vq_errmsg), its terminator
 * included: longer ones are cut. Room for a list, such as the ONNX op
 * types a model uses that varq does not translate (onnx/census.c). */
#define VQ__ERRMSG_MAX 2048

/* Sets the thread-local message (vq_errmsg) and returns err. Not for the
 * hot path. */
int vq__fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Fails with err and "<fmt formatted>: <the current message>": the context
 * of a call put before what the failed call below it said. */
int vq__fail_prefixed(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* How many messages this thread has set so far (vq__fail, vq_error_set):
 * whether a callback set one shows as a change. */
unsigned vq__errmsg_gen(void);

/* ---- GPU ops, the naive engine, the profiler ---- */

/* Inside a GPU op's fn: the backend stream of the op (the one behind its
 * vq_exec_ctx.stream), for the library's own backend calls on it (copies,
 * stream-ordered frees). NULL on any other thread or op. (engine/gpu.c) */
void *vq__gpu_op_stream(void);

/* True for the naive engine, which runs an op pushed from inside an op
 * after it, in the same thread, and blocks that thread on an async op until
 * it is finished: a layer that pushes an async op whose completion waits
 * for ops it pushes from inside an op must push those first there (the
 * graph executor's control ops, graph/control.c). (engine/engine.c) */
bool vq__engine_runs_inline(const vq_engine *e);

/* The profiler, for a layer that runs several of its own ops inside one
 * engine op (the executor's segments, graph/run.c): vq__engine_profiling
 * says whether e records ops; vq__prof_span adds a record named name from
 * start_ns to end_ns (vq__now_ns clock) on the row of worker (an
 * vq_exec_ctx.worker; -1: the row of other threads). The name must live
 * as long as the engine. (engine/profiler.c) */
bool vq__engine_profiling(const vq_engine *e);
uint64_t vq__now_ns(void);
void vq__prof_span(vq_engine *e, const char *name, uint64_t start_ns, uint64_t end_ns, int worker);

/* For a thread outside the engine's ops that waits for the engine's work
 * (the executor's vq_exec_run): runs one queued ready CPU op of e on the
 * calling thread, as vq_wait_var's waiter does, so that a small run can
 * finish on the waiting thread instead of waking a sleeping worker and
 * being woken by it; then, as a worker does, one op that it made ready,
 * and so on, until *until (the waiter's flag; NULL: none) is set. True
 * when it ran one; false when none was queued, e is not threaded, or the
 * caller is inside an op. */
bool vq__engine_help(vq_engine *e, const atomic_bool *until);

/* For a thread outside the engine's ops that pushes an op and then waits
 * for it (capture's segment cut by a host read), or that should start it
 * at once when its inputs are ready (dist's communication ops, which a
 * worker would only start too): vq_push, except that on a
 * threaded engine an op with vars is not dispatched when its accesses are
 * granted; *held gets it (else NULL), and vq__push_release(e, *held), due
 * right after whatever the caller must do first (unlocking), lets it go:
 * the calling thread then runs it at once if it is ready, as vq_wait_var's
 * waiter would, with no worker's wake-up and no handoff back. Until then
 * the op and everything queued after it on its vars wait, so nothing may
 * come between the two calls that waits for the engine. */
int vq__push_held(vq_engine *e, const vq_task *t, void **held);
void vq__push_release(vq_engine *e, void *held);

/* For a layer whose run cannot end without some prebuilt op's push (the
 * executor's tails: a run's final op, a loop's step and exit, a control
 * op's end), so that a run fails for want of memory instead of waiting
 * for memory that may never come back: vq__opr_reserve(o, k) sets aside
 * now, while memory is there, an op and a block per var of o for each of
 * k pushes (0, or VQ_ENOMEM and nothing set aside). vq__push_opr_reserved
 * is vq_push_opr, except that when the pools are empty and memory is out
 * it takes what the push needs from that reserve; each such push's op
 * comes back to it on completion and its blocks are taken again from the
 * pool then. So with at most k of o's pushes in flight at once, the push
 * does not fail for memory; the k+1-th may (VQ_ENOMEM, as vq_push_opr).
 * Both on the thread that owns o's pushes; the reserve goes with
 * vq_opr_free's last push. (engine.c) */
int vq__opr_reserve(vq_opr *o, int k);
int vq__push_opr_reserved(vq_engine *e, vq_opr *o);

/* For a thread outside the engine's ops that pushes work and then waits
 * for all of it (vq_exec_run): between vq__defer_begin(e) and
 * vq__defer_end(e, until), the first of this thread's ops on e that is
 * ready when pushed (a CPU op) is kept from the workers, and
 * vq__defer_end runs it on the calling thread, then, as a worker does, an
 * op that each op it ran made ready (a chain of segments, the run's final
 * op) until *until is set: a run whose ops form a chain then runs without
 * a handoff to a worker and back, while the other ready ops go to the
 * workers as usual. A kept op goes to the workers after all once this
 * thread has pushed 64 more ops. Between the two calls the thread must
 * not wait for the engine's work (the kept op would never run); the end
 * must follow the begin on every path. No-op on an engine other than a
 * threaded one, inside an op, and when already deferring. */
void vq__defer_begin(vq_engine *e);
void vq__defer_end(vq_engine *e, const atomic_bool *until);

/* For a layer that keeps state for an engine outside it, in places the
 * engine cannot reach (capture's per-thread states): fn(e) is called at
 * the start of every vq_engine_free(e), on the freeing thread, before the
 * engine drains, so fn may still push on e and must forget e for good.
 * One fn per process, set once (a later call replaces it); any thread.
 * (engine_new.c) */
typedef void (*vq__engine_free_fn)(vq_engine *e);
void vq__engine_on_free(vq__engine_free_fn fn);

/* ---- parallel loops inside an op (parallel.c) ----
 *
 * For a CPU kernel with more work than one core should do alone: runs
 * fn(arg, lo, hi, slot) once for each chunk [lo, hi) of chunk indices
 * (the last one shorter) covering [0, n), on the calling worker and on
 * whichever other workers of its pool are idle (helper ops pushed on the
 * pool; a busy worker's share falls back to the others). Chunks run
 * concurrently and in no set order, so fn must write disjoint data per
 * chunk; their bounds depend only on n and chunk, so a result that depends
 * on how the work is cut is the same on every run. slot (0 to
 * vq__parallel_slots() - 1) is the participant running the chunk, the same
 * for every chunk one participant runs: an index for per-participant
 * scratch. Returns when every chunk has returned: 0, or the first nonzero
 * value fn returned (every chunk still runs). Serial on the calling thread
 * (the same chunks in order, slot 0) outside the threaded engine's CPU
 * pool (a worker of it, or a thread running one of its ops in
 * vq__run_here), with one participant, and inside a chunk. Never sleeps;
 * it allocates (the loop's state) only when it runs in parallel. */
#define VQ__PAR_MAX_SLOTS 64
typedef int (*vq__range_fn)(void *arg, int64_t lo, int64_t hi, int slot);
int vq__parallel_for(int64_t n, int64_t chunk, vq__range_fn fn, void *arg);
/* How many slots vq__parallel_for would use from this thread now (1 when
 * it would run serially): size per-participant scratch with it. */
int vq__parallel_slots(void);

/* ---- small objects (pool.c) ----
 *
 * Objects of up to VQ__OBJ_SIZE bytes (64-byte aligned, contents
 * undefined) from the engine's pools: a per-thread free list refilled and
 * drained in batches through a process-wide depot, so an object made by
 * one thread and freed by another (a tensor made by the caller, released
 * by the worker that ran its last op) costs no malloc and no lock on
 * either side. Memory is kept for the life of the process, at the peak
 * number of objects in flight. Any thread; vq__obj_alloc returns NULL only
 * when out of memory. Under AddressSanitizer each object is its own
 * allocation, so LeakSanitizer reports one never freed. */
#define VQ__OBJ_SIZE 192
void *vq__obj_alloc(void);
void vq__obj_free(void *p);

/* ---- a var's carried failure (var.c) ----
 *
 * For a layer that runs several ops inside one engine op (capture's
 * segments) or finishes an op for an outside party (dist's collectives):
 * what vq__op_finish does for a failed op's writes, for one var. The
 * calling op must hold access to v (read for vq__var_error, write for
 * vq__var_fail), so the queue orders these with every other access. */
int vq__var_error(const vq_var *v);
/* Sets v's failure unless it carries one already. */
void vq__var_fail(vq_var *v, int err);

/* ---- what a failure names (var.c) ----
 *
 * A failure note is the text that says which op failed first and why
 * ("op 'div' (integer division by zero)"). Each var a failure reaches
 * carries it beside its error (vq__var_fail_noted, and the engine's own
 * poisoning of a skipped op's writes), so that the wait that takes the
 * error (vq__wait_var_note) can name the op however many skipped ops lie
 * between. A note is immutable once made and counted: any thread may
 * hold, pass on and drop references. Made and passed on only when an op
 * fails: the success path never touches one. */
struct vq__fail_note;
/* A note of the formatted text with one reference, or NULL when out of
 * memory (the failure then names no op). */
struct vq__fail_note *vq__fail_note_new(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void vq__fail_note_ref(struct vq__fail_note *n);   /* n may be NULL */
void vq__fail_note_unref(struct vq__fail_note *n); /* n may be NULL; frees the last */
const char *vq__fail_note_text(const struct vq__fail_note *n);
/* vq__var_fail, and when v carried no failure, it now carries note too
 * (a reference of its own; note may be NULL). Write access, as for
 * vq__var_fail. */
void vq__var_fail_noted(vq_var *v, int err, struct vq__fail_note *note);
/* The note of v's failure (borrowed: valid while the caller holds access
 * to v), or NULL: none, or v carries no failure. */
struct vq__fail_note *vq__var_fail_note(const vq_var *v);
/* vq_wait_var (the same waits, errors and messages of its own), also
 * handing over the note of the failure it takes: *note gets the
 * reference the var held (the caller drops it), or NULL when the var
 * carried no note or no failure. */
int vq__wait_var_note(vq_engine *e, vq_var *v, struct vq__fail_note **note);
/* Makes err e's first error (what vq_wait_all returns) unless it has one,
 * as a failed op does. Any thread. */
void vq__engine_note_fail(vq_engine *e, int err);

/* ---- freeing an idle var at once (wait.c) ----
 *
 * For the last release of a tensor (tensor/tensor.c): when nothing is queued
 * on v (no write pending, no read granted and unfinished) and no GPU work
 * follows its last op, frees v now and returns true, so that the tensor's
 * storage can go at once instead of after two pushed ops (a free op and
 * vq_var_free's deletion; as vq_var_free does for an idle var, the
 * deletion is numbered and counted like the op it saves). Else does
 * nothing and returns false. Only for a
 * var nobody may push on any more (the tensor's last reference is gone):
 * an empty queue then stays empty. The var's lock orders the check after
 * the completion of its last op, so that op's writes are seen. */
bool vq__var_free_idle(vq_engine *e, vq_var *v);

#endif
