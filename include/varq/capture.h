/* varq capture: imperative code at graph speed (the C form of PaddleSOT).
 *
 * Between vq_capture_begin(e) and vq_capture_end(e), this thread's
 * vq_op_run calls on engine e are recorded instead of pushed: each call is
 * checked at once, exactly as vq_op_run checks it (a bad call fails at the
 * call with the same error and message, and records nothing), and returns
 * its outputs at once, with their dtype and shape known and their values
 * pending. The recorded calls form a segment; a cut pushes the whole
 * segment as one engine op that runs the calls' kernels, reading the
 * tensors that came from outside the segment and writing those it changes
 * or creates that the caller still holds (the others are temporaries: they
 * get no engine var and are freed when the segment's op ends; on the CPU a
 * temporary is instead kept, one per call output, for the same output of
 * the next call that matches the same node, until the cache is dropped:
 * it counts as live in vq_mem_stats meanwhile). The kernels run in call
 * order, on one worker.
 *
 * The segment's structure (op types, attributes, dtypes, shapes, and which
 * tensor feeds which slot) is its guard, built incrementally as a path in
 * a tree of the calls seen so far (each node is one call after the calls
 * of its parent, and carries the hash of the path). A call that matches a
 * node reuses that node's checked result (inferred outputs and parsed
 * attributes) instead of checking again, which is exact: the check depends
 * on nothing else. A cut finds the segment's prepared plan (which tensors
 * are read, written, temporary) in an LRU cache at the path's end, or
 * builds it once.
 *
 * Cuts: reading a pending tensor on the host (vq_tensor_wait,
 * vq_tensor_data, vq_npy_save), taking its var (vq_tensor_var, and so
 * vq_tensor_copy_to and executor runs that bind it), another thread's
 * vq_op_run (eager or recording) on a tensor of the segment, a call that
 * cannot be recorded (an op with an async kernel; tensors on another
 * device than the segment's; a random op with neither a seed attribute
 * nor a State input, which draws from the process's default generator
 * call by call, see vq_op_run), a size limit (VQ_CAPTURE_MAX_OPS calls; the
 * gradient ops of one vq_capture_backward are not split, the cut comes
 * after the last), and vq_capture_end. The code after a cut records into the next segment.
 * Releasing tensors never cuts: the segment holds its own references.
 * Calls made from inside ops (a kernel calling vq_op_run) are never
 * recorded and cut nothing: they may run inside a push that capture makes
 * under its lock; they are ordered with the segments by the engine, at
 * the segments' cuts.
 *
 * Semantics are those of the same calls run eagerly: the same values (bit
 * for bit: the same kernels run in the same order on the same tensors), the
 * same errors (a kernel that fails marks its outputs as an eager push
 * would, calls that depend on them are skipped and inherit the error,
 * vq_tensor_wait returns it with the same message), and the same order
 * with respect to other threads' work on the same tensors (their calls cut
 * the segment first). What differs: recorded calls reach the engine at the
 * cut, so vq_wait_all does not wait for calls still recorded, and the
 * segment's kernels run one after another on one worker.
 *
 * An engine freed with captures open on it: vq_engine_free(e) ends every
 * capture on e, whichever thread's, as vq_capture_end would (what is
 * recorded is pushed; the recorded calls run, and their errors reach their
 * tensors, before the engine drains), except that an error pushing (out of
 * memory) is returned to nobody. The capture is over: the thread may not
 * call vq_capture_end(e) (e is gone); it may begin again on another
 * engine, and its exit does not touch the freed engine. As for any call
 * on e, the capturing thread may not record on e while e is being freed;
 * its tensors must be released first (vq_engine_free).
 *
 * A thread that exits with a capture open pushes what it recorded then.
 *
 * Thread-safety: capture state is per thread and per engine; functions
 * here act on the calling thread's state for e. Cuts caused by other
 * threads lock it. */
#ifndef VARQ_CAPTURE_H
#define VARQ_CAPTURE_H

#include <varq/engine.h>
#include <varq/error.h>
#include <varq/tensor.h>

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VQ_CAPTURE_MAX_OPS 4096 /* calls per segment before a size cut */

/* Why segments were cut (vq_capture_stats.cuts). */
enum {
    VQ_CAPTURE_CUT_END = 0,       /* vq_capture_end (and vq_capture_backward's refusal) */
    VQ_CAPTURE_CUT_HOST_READ = 1, /* vq_tensor_wait, vq_tensor_data, vq_npy_save */
    VQ_CAPTURE_CUT_VAR = 2,       /* vq_tensor_var (vq_tensor_copy_to, executor runs) */
    VQ_CAPTURE_CUT_THREAD = 3,    /* another thread's call on a segment tensor */
    VQ_CAPTURE_CUT_FALLBACK = 4,  /* a call that cannot be recorded, run eagerly */
    VQ_CAPTURE_CUT_DEVICE = 5,    /* a call on another device than the segment's */
    VQ_CAPTURE_CUT_SIZE = 6,      /* VQ_CAPTURE_MAX_OPS calls */
    VQ_CAPTURE_CUT_KINDS = 7
};

/* A thread's capture counters for one engine (vq_capture_get_stats). */
typedef struct vq_capture_stats {
    uint64_t ops_recorded;  /* calls recorded */
    uint64_t op_hits;       /* of which matched a known node (no check made) */
    uint64_t segments_run;  /* segments pushed */
    uint64_t cache_hits;    /* of which found their plan cached */
    uint64_t plans_built;   /* plans prepared */
    uint64_t cuts[VQ_CAPTURE_CUT_KINDS]; /* segments cut, by cause (VQ_CAPTURE_CUT_*) */
    uint64_t guard;         /* the guard of the last segment pushed */
} vq_capture_stats;

/* From now on, this thread's vq_op_run calls on e are recorded (see
 * above). VQ_EINVAL for e NULL or when this thread already captures on e;
 * VQ_ENOMEM. The tree of calls and the plans of earlier captures on e by
 * this thread are kept and reused. */
VQ_API int vq_capture_begin(vq_engine *e);

/* Pushes what was recorded and leaves capture mode. Returns 0, the first
 * error met pushing the segments this capture cut (VQ_ENOMEM), or
 * VQ_EINVAL when this thread does not capture on e. Kernel errors are not
 * returned here: as with eager calls, they reach the tensors
 * (vq_tensor_wait). */
VQ_API int vq_capture_end(vq_engine *e);

/* Imperative autodiff: appends to the current segment the gradient ops of
 * the calls recorded in it (the ops' gradient makers, as
 * vq_append_backward uses them on a program of those calls in which the
 * params are the parameters), and sets grads[i] to a new tensor holding
 * d loss / d params[i] (the caller owns one reference), or NULL when loss
 * does not depend on params[i] through the segment. loss is a float
 * tensor of one element written by the segment; params are tensors the
 * segment reads. Tensors made before the segment started (by an earlier
 * segment, before a host read) are constants here. The gradient ops are
 * recorded like any call (and so replay from the plan cache), and the
 * recipe is cached at the segment's node: a second step with the same
 * structure does not differentiate again. VQ_EINVAL for bad arguments,
 * when this thread does not capture on e, for a loss not written by the
 * segment, or a param the segment writes; the errors of
 * vq_append_backward (an op without a gradient maker). On failure grads
 * are NULL, and nothing is recorded when the differentiation itself failed
 * (a failure while recording the gradient ops, out of memory, leaves those
 * recorded so far). On a GPU the gradients are on the segment's device. */
VQ_API int vq_capture_backward(vq_engine *e, vq_tensor *loss, vq_tensor *const *params,
                               int nparams, vq_tensor **grads);

/* This thread's counters for e (since its first vq_capture_begin on e).
 * VQ_EINVAL for NULL arguments; zeros when this thread never captured on
 * e. */
VQ_API int vq_capture_get_stats(vq_engine *e, vq_capture_stats *out);

#ifdef __cplusplus
}
#endif
#endif
