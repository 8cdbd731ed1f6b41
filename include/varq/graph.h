/* varq graph layer: programs (a serializable list of ops over named vars),
 * scopes (named persistent tensors), and the executor that prepares a
 * program once into a plan and runs it as pushes onto an engine.
 *
 * A program has blocks; block 0 is the main block, and the others are the
 * branches and loop bodies of control-flow ops. A block declares vars (name,
 * dtype, shape with -1 for unknown dims, persistable) and lists ops in
 * order; each op has a type from the op registry (ops.h), named input and
 * output slots that list var names, and typed attributes. Programs are
 * saved as protobuf (proto/program.proto) and can be dumped as text.
 *
 * Control flow (these op, slot and attribute names are a contract):
 *
 *   cond(Cond, X...) -> Out...  {then_block:int, else_block:int,
 *                                then_outputs:strings, else_outputs:strings}
 *     Cond is a bool scalar (shape [] or [1]). Only the taken branch's ops
 *     run; Out[k] is its then_outputs[k] or else_outputs[k] (a var the
 *     branch writes, or one it sees from outside). Both branches give the
 *     same count, dtypes and shapes.
 *   while(Cond, X...) -> Out...  {body_block:int, body_inputs:strings,
 *                                 body_outputs:strings, body_cond:string,
 *                                 max_iters:int = -1,
 *                                 stack_outputs:strings = []}
 *     X are the initial values of the loop-carried vars. While Cond (then
 *     body_cond, a bool scalar the body writes) is true and fewer than
 *     max_iters iterations ran (-1: no limit), the body runs with
 *     body_inputs[k] bound to the carried value k and leaves body_outputs[k]
 *     (vars it writes, each of body_inputs[k]'s dtype and shape) as the
 *     next one. Out = the last carried values; Cond false at entry gives
 *     Out = X with no iteration.
 *     stack_outputs names vars the body writes (not body inputs, each
 *     once) whose value in every iteration is kept: the op has one more
 *     output per name, after the carried ones, holding those values
 *     stacked along a new axis 0, [iterations, the var's dims] (ONNX
 *     Loop's scan outputs, TensorFlow's TensorArray). Each iteration's
 *     value is kept as it is computed and all are joined once when the
 *     loop ends: time and memory in the total size, whatever the count.
 *     Declare its dim 0 -1 (known when the loop ends) or the number of
 *     iterations the loop always makes (a run that makes another number
 *     fails with VQ_EINVAL naming the var). With no iteration it is
 *     [0, the var's dims], a dim that preparation cannot infer being 0
 *     there. Every iteration's value must have one dtype and shape (else
 *     VQ_EINVAL naming the var and the iteration). vq_append_backward
 *     refuses (VQ_ENOSYS, naming the op and the output) a loss that
 *     depends on a stacked output; the carried outputs differentiate as
 *     without it.
 *
 * X and Out have at least one var each. The blocks are children of the
 * control op's block, each used by one op. Their ops read vars of
 * enclosing blocks by name (X lists some; the executor finds the others
 * and holds them all until the op is done) and write only their own
 * block's vars, which are not persistable. Only block 0's vars are fed and
 * fetched. vq_exec_prepare checks all of this and reports a violation as
 * VQ_EINVAL naming the op, the block and the var.
 *
 * Autodiff's extensions of while (varq's, not part of the contract): with
 * save_carries:bool=false set, the loop keeps every iteration's carried
 * inputs; a while with replay_of:int=-1 set to that loop's index in their
 * (common) block runs once per iteration the saving loop ran, last first
 * (its Cond, body_cond and max_iters are not read), with its body vars
 * replay_inputs:strings bound to the saved inputs of that iteration, each
 * freed once the iteration using it is done. vq_append_backward
 * (train.h) writes these; it differentiates through cond and while,
 * nested in each other to any depth.
 *
 * Thread-safety: a vq_program is a plain value: build it from one thread;
 * once built, any number of threads may read, save or run it as long as
 * nobody modifies it. A vq_scope and a vq_exec may be used from several
 * threads: their functions lock. */
#ifndef VARQ_GRAPH_H
#define VARQ_GRAPH_H

#include <varq/engine.h>
#include <varq/error.h>
#include <varq/ops.h>
#include <varq/tensor.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- programs ---- */

/* A program: blocks of var declarations and ops (see the head of this
 * file). */
typedef struct vq_program vq_program;

/* A new empty program with its main block (index 0). The caller owns it. */
VQ_API int vq_program_new(vq_program **out);
/* Frees p and everything it owns. NULL is ignored. */
VQ_API void vq_program_free(vq_program *p);
/* A copy of p (for example the forward program, kept for evaluation before
 * vq_optimizer_minimize adds training ops). */
VQ_API int vq_program_clone(const vq_program *p, vq_program **out);

/* How deep blocks may nest: block 0 is at depth 0, any other block one
 * deeper than its parent. The executor prepares and runs the blocks of
 * control ops recursively, some stack per level, so the depth is bounded
 * for any thread's stack; real models nest a few levels. The builder, the
 * decoder and vq_exec_prepare refuse deeper blocks with VQ_EINVAL. */
#define VQ_MAX_BLOCK_DEPTH 64

/* Adds a block whose parent is block `parent` (an existing index); returns
 * the new block's index, or a negative error: VQ_EINVAL for a parent that
 * does not exist or is at depth VQ_MAX_BLOCK_DEPTH already. */
VQ_API int vq_program_add_block(vq_program *p, int parent);

/* Declares var `name` in block: dtype, ndim (0..VQ_MAX_DIMS) dims each >= 0
 * or -1 (unknown), persistable (lives in the scope across runs: parameters
 * and optimizer state). Names are unique within a program. The strings are
 * copied. VQ_EINVAL for a duplicate name or a bad dtype or shape. */
VQ_API int vq_program_add_var(vq_program *p, int block, const char *name, vq_dtype dt,
                              int ndim, const int64_t *shape, bool persistable);

/* Marks var name (any block) as stop_gradient (or clears it): autodiff
 * (train.h) gives it no gradient and lets none flow through it, as if it
 * were listed in vq_append_backward's no_grad: a frozen parameter, or a
 * computed value used as a constant (PyTorch's detach). Saved with the
 * program and shown by the text dump. VQ_EINVAL for an unknown name. */
VQ_API int vq_program_set_stop_gradient(vq_program *p, const char *name, bool stop);

/* Sets the engine priority of op index of block (0 by default): the
 * executor pushes its executions with it, so among ops whose inputs are
 * ready the higher-priority one starts first (engine.h's convention:
 * higher runs first; say, the communication or the loss an optimizer is
 * waiting for). Saved with the program and shown by the text dump.
 * VQ_EINVAL for an op that does not exist. */
VQ_API int vq_program_set_op_priority(vq_program *p, int block, int index, int priority);

/* Appends op `type` to block, with its inputs and outputs given by var name
 * in the order of the op's slots (vq_op_signature(type): a variadic last
 * slot takes the remaining names) and its attributes (copied). Checks only
 * what needs no shapes: the op type exists, the counts fit its slots, the
 * attributes fit its schema, every var named is declared. Shapes and dtypes
 * are checked when the program is prepared. Returns the op's index in the
 * block, or a negative error naming the op. */
VQ_API int vq_program_add_op(vq_program *p, int block, const char *type,
                             const char *const *inputs, int nin, const char *const *outputs,
                             int nout, const vq_attr *attrs, int nattrs);

/* The declaration of var name (in any block): its dtype, its ndim and its
 * dims (-1 for a dim unknown until the program is prepared with a feed;
 * shape must have room for VQ_MAX_DIMS entries), and whether it is
 * persistable. Any of dt, ndim, shape and persistable may be NULL. What a
 * binding reports as a model's input and output types (an imported ONNX
 * model's feeds and fetches are block 0's vars of their names). VQ_EINVAL
 * for NULL p or name, or a name the program does not declare. Thread-safe
 * as reading a program is (see the head of this file). */
VQ_API int vq_program_var_info(const vq_program *p, const char *name, vq_dtype *dt, int *ndim,
                               int64_t *shape, bool *persistable);

/* Counts, for callers that walk a program. */
VQ_API int vq_program_nblocks(const vq_program *p);
VQ_API int vq_program_nops(const vq_program *p, int block);
VQ_API int vq_program_nvars(const vq_program *p, int block);

/* Serializes to protobuf: *buf is malloc'd (the caller frees it). */
VQ_API int vq_program_encode(const vq_program *p, void **buf, size_t *len);
/* Parses protobuf bytes into a new program and checks its structure (names
 * unique and declared, dtypes and shapes valid, parent blocks earlier and
 * nested at most VQ_MAX_BLOCK_DEPTH deep, attribute values well formed).
 * Malformed input is VQ_EINVAL, never a crash. */
VQ_API int vq_program_decode(vq_program **out, const void *buf, size_t len);
/* The same through a file; VQ_EIO if it cannot be read or written. */
VQ_API int vq_program_save(const vq_program *p, const char *path);
VQ_API int vq_program_load(vq_program **out, const char *path);

/* Writes a readable text form to f, one line per var and op, e.g.
 *   var x : f32[16,16]
 *   var w : f32[16,1] persistable
 *   op 0 matmul(X=x, Y=w) -> (Out=y) {transpose_x=false}
 * A cond or while op is followed by its blocks, indented under it and
 * named for their role ("block 2 (then):", "block 3 (else):",
 * "block 1 (body):"), each with its vars and ops, nested ones nested again.
 * Before them, when there are any, a line "# reads also: one, n" lists
 * the vars of enclosing blocks that the op's blocks read (their nested
 * blocks and a cond's branch outputs included) and that its inputs do not
 * list, in first-read order: the executor makes them inputs of the op too.
 * A block is nested under the first control op of its parent block that
 * names it; a block no such op names is written after block 0 as
 * "block N (parent P):" with its contents indented, so every block shows.
 * Returns 0, VQ_EIO, or VQ_ENOMEM. */
VQ_API int vq_program_dump(const vq_program *p, FILE *f);

/* XXH3-64 of the protobuf encoding: equal programs hash equal. Cached in p
 * until p changes. */
VQ_API uint64_t vq_program_hash(const vq_program *p);

/* ---- scopes ---- */

/* A scope: named tensors that live across runs (parameters, optimizer
 * state), held by reference. */
typedef struct vq_scope vq_scope;

/* A new empty scope; the caller frees it with vq_scope_free. */
VQ_API int vq_scope_new(vq_scope **out);
/* Releases every tensor the scope holds. */
VQ_API void vq_scope_free(vq_scope *s);

/* Binds name to t (retained; a previous binding is released). Do not call
 * while a run that uses the scope is in flight. */
VQ_API int vq_scope_set(vq_scope *s, const char *name, vq_tensor *t);
/* The tensor bound to name, or NULL. The reference is borrowed: retain it
 * to keep it past the next vq_scope_set or vq_scope_free. */
VQ_API vq_tensor *vq_scope_get(vq_scope *s, const char *name);
/* Number of names bound, and the i-th name in sorted order (borrowed). */
VQ_API int vq_scope_count(vq_scope *s);
VQ_API const char *vq_scope_name(vq_scope *s, int i);

/* Saves every tensor as dir/<name>.npy (see below for '/' in names) after
 * waiting for the ops writing them, as one checkpoint: the files go to a
 * new directory beside dir, synced to the disk, which then replaces dir in
 * one step (renameat2 RENAME_EXCHANGE; where the file system cannot, dir
 * is moved aside first and a reader may briefly find no dir). A reader sees
 * the old checkpoint or the new one, never a mix of two; a failed save (a
 * full disk) leaves dir as it was, names dir and the cause, and removes
 * what it wrote. dir holds exactly the saved tensors afterwards, so an
 * existing dir must hold nothing but .npy files (VQ_EINVAL otherwise,
 * naming one) and none of them read-only (VQ_EIO). Not concurrently with
 * another save to the same dir. A tensor's file is its name with ".npy",
 * '/' and '%' written %2F and %25 (ONNX exporters put '/' in names);
 * vq_scope_load binds every *.npy file of dir under its name without
 * ".npy", %2F and %25 read back.
 *
 * dir may be a symbolic link to a directory, or have links on its path:
 * the checkpoint replaced is the directory the path names (the link's
 * target, resolved first; the new directory is made beside the target and
 * messages name it), and the link stays as it was. A link to nothing is
 * VQ_EINVAL. A save deletes only regular .npy files: those of the
 * checkpoint it replaced and those of its own failed attempt; anything
 * else found in the old directory after the swap (put there while the save
 * ran) is left, in that directory, under its temporary name. */
VQ_API int vq_scope_save(vq_scope *s, const char *dir);
VQ_API int vq_scope_load(vq_scope *s, const char *dir);

/* ---- executor ---- */

/* An executor: prepares programs into plans (cached) and runs them on an
 * engine. */
typedef struct vq_exec vq_exec;

/* Executor options (vq_exec_new); zero in a field means the default. */
typedef struct vq_exec_opts {
    int cache_size; /* prepared plans kept (LRU); 0 = 16 */
    vq_ctx device;  /* where the ops run: zero = CPU 0, or {VQ_DEV_GPU, n} */
    unsigned flags; /* VQ_EXEC_CHECK_NAN, VQ_EXEC_FETCH_HOST, VQ_EXEC_NO_SEGMENTS,
                     * VQ_EXEC_NO_MEMPLAN */
    /* Each run's deadline, in milliseconds from its vq_exec_run(_async)
     * call; 0: none. A run past it ends as vq_exec_cancel ends one, with
     * VQ_ETIMEDOUT (see there). */
    int timeout_ms;
    /* The seed of the executor's default generator, which random ops
     * (uniform_random, gaussian_random, dropout) with neither a seed
     * attribute nor a State input draw from. 0: VARQ_SEED from the
     * environment when set (decimal digits below 2^64; anything else, even
     * with a seed given here, makes vq_exec_new fail with VQ_EINVAL naming
     * it), else VQ_DEFAULT_SEED (include/varq/ops.h). Each execution of
     * such an op draws new numbers: its key is the seed folded with the
     * number of the plan (plans are numbered as the executor prepares
     * them, cache misses included), the op's place in the plan and the
     * number of its executions so far. So every run draws anew, and two
     * executors with the same seed and options that make the same calls
     * in the same order draw the same numbers, on any engine, worker count
     * or device (the CPU and the GPU kernels draw the same bits). Ops with
     * a seed attribute draw the same numbers every run, as before; ops with
     * State draw from it. */
    uint64_t seed;
} vq_exec_opts;

/* Every op's float outputs are checked for NaN and infinities after it
 * runs; the first one found fails the run (VQ_EIO) naming the op, the
 * output and its var, and the element ("op 4 (log): output Out var y
 * holds NaN at element 2"), like Paddle's check_nan_inf. Also set by the
 * environment: VARQ_CHECK_NAN=1 (0 or unset: off; anything else is
 * VQ_EINVAL from vq_exec_new). A scan of every output: for finding where
 * a NaN starts, not for production runs. On a GPU executor the scan runs
 * on the op's stream after its kernel and fails the run the same way. */
#define VQ_EXEC_CHECK_NAN 1u
/* A GPU executor returns its fetches on the host (CPU tensors copied at the
 * end of the run) instead of on the device; no effect on a CPU executor. */
#define VQ_EXEC_FETCH_HOST 2u
/* Every op is its own engine op. By default consecutive kernel ops that
 * form a chain (each reading an output of the one before, same priority,
 * no new dependency that would hold the chain back) run as one engine op,
 * up to 16, their kernels back to back: MXNet's bulk execution. Results,
 * errors and the profiler's per-op records are the same either way (a
 * segment also has a record of its own, named "segment"); this flag, or
 * VARQ_EXEC_SEGMENTS=0 in the environment, is for comparing. */
#define VQ_EXEC_NO_SEGMENTS 4u
/* No memory plan. By default a CPU plan whose block 0 has no control op
 * places the intermediates whose shapes preparation knows (not fed, not
 * fetched, not persistable) in one arena by lifetime, values that are
 * never live together sharing bytes, and each run takes one arena instead
 * of allocating a tensor per op output (vq_exec_stats.last_arena_bytes).
 * Results are the same either way; this flag, or VARQ_MEMPLAN=0 in the
 * environment, allocates every output as it is made. */
#define VQ_EXEC_NO_MEMPLAN 8u

/* An executor running programs on engine e (which must outlive it). opts
 * may be NULL. Thread-safe to use from several threads once made.
 *
 * On a GPU (opts->device = {VQ_DEV_GPU, n}; VQ_ENOSYS with the reason when
 * there is no GPU backend, VQ_EINVAL when there is no GPU n), every op of
 * a run is a GPU op on n's compute streams; temporaries are allocated and
 * freed in stream order. Host feeds are copied to the device by the run
 * (on the to-device copy stream; the host tensor is held until the run
 * ends); feeds already on GPU n are used as they are; feeds on another GPU
 * are VQ_EINVAL. Fetches are tensors on GPU n (vq_tensor_copy_to brings
 * them to the host). Scope tensors live where the executor that uses them
 * runs: a plan that finds one elsewhere (CPU <-> GPU n) copies it over when
 * it is prepared and rebinds it in the scope, so a scope can be trained on a
 * GPU, saved (vq_scope_save copies to the host), and evaluated on the CPU.
 * A kernel error found on the device (an integer division by zero, a label
 * out of range) fails the run like on the CPU, and the plan and the streams
 * stay usable; a fault of a stream (CUDA's sticky errors) fails every later
 * run that uses that stream. */
VQ_API int vq_exec_new(vq_exec **out, vq_engine *e, const vq_exec_opts *opts);
/* Waits for the runs in flight (their done callbacks included: none runs
 * after this returns; so not from inside one), then frees the plans. Runs
 * that never end (an endless while) keep it waiting: vq_exec_cancel or
 * vq_exec_opts.timeout_ms end them. */
VQ_API void vq_exec_free(vq_exec *x);

/* One input of a run: a var's value. */
typedef struct vq_feed {
    const char *name;  /* a var of the program */
    vq_tensor *tensor; /* its value for this run; must match the var's dtype and known dims */
} vq_feed;

/* One output of a run: a var whose value the run hands back. */
typedef struct vq_fetch {
    const char *name;  /* a var of the program */
    vq_tensor *tensor; /* out: the value at the end of the run (the caller owns a reference) */
} vq_fetch;

/* Prepares (or finds in the cache) the plan for p with these feed and fetch
 * names and scope s: checks the program (an unknown op, an undefined var, a
 * var read before anything writes it that is neither fed nor in the scope,
 * a dtype or shape mismatch: VQ_EINVAL naming the op's index, type and
 * var), infers shapes, makes one engine var per program var and one
 * prebuilt engine op per op. vq_exec_run does this itself; calling it first
 * moves the cost and the errors ahead. */
VQ_API int vq_exec_prepare(vq_exec *x, const vq_program *p, vq_scope *s,
                           const char *const *feeds, int nfeeds, const char *const *fetches,
                           int nfetches);

/* Runs block 0 of p once: binds the feeds, pushes every op in program order,
 * and waits until the fetched vars are ready. A cond or while op pushes the
 * ops of its blocks when its predicate is known, from an engine op that
 * reads it (no worker waits for one): only a predicate's value is read on
 * the host. Iterations of a while overlap where their data allows (up to 4
 * in flight, each with its own engine vars), and each iteration's
 * temporaries are released by reference count, so memory stays flat over
 * any number of iterations. On success fetches[i].tensor
 * holds a new reference. A failing op makes the run return its error, with
 * vq_errmsg() naming the op ("op 3 (div): integer division by zero"); the
 * plan stays usable. Feed tensors must not be written until the run is
 * done; the run never writes them: an op of the program that writes a fed
 * var in place (relu(x) -> x) writes a new tensor for it, copy on write,
 * and so does one writing a loop's carried value that came from a feed or
 * the scope. A feed that imperative ops (vq_op_run) wrote is waited for before
 * the run is pushed, and their failure fails the call. A scope tensor whose
 * last imperative op failed keeps that failure for vq_tensor_wait; the
 * run's ops still run, on whatever the failed op left. Not from inside an
 * op (VQ_EDEADLK). */
VQ_API int vq_exec_run(vq_exec *x, const vq_program *p, vq_scope *s, const vq_feed *feeds,
                       int nfeeds, vq_fetch *fetches, int nfetches);

/* Like vq_exec_run but returns once the run is pushed; done(user, err) is
 * called exactly once, on an engine worker, when the fetches are ready (or
 * the run failed): fetches[] (which must stay valid until then) is filled
 * in before. Several runs of one plan may be in flight; the engine keeps
 * each run's ops in order and lets consecutive runs overlap. Past 64 runs
 * of one plan in flight the call waits for the oldest to end (from inside
 * an op it returns VQ_EBUSY instead). Inside done, vq_errmsg() describes a
 * failure. If the call itself fails, done is not called. */
VQ_API int vq_exec_run_async(vq_exec *x, const vq_program *p, vq_scope *s,
                             const vq_feed *feeds, int nfeeds, vq_fetch *fetches, int nfetches,
                             void (*done)(void *user, int err), void *user);

/* An executor's counters (vq_exec_get_stats). */
typedef struct vq_exec_stats {
    uint64_t prepares;    /* plans built */
    uint64_t cache_hits;  /* runs or prepares that found their plan cached */
    uint64_t runs;        /* runs completed */
    size_t last_peak_bytes;  /* most tensor bytes the last completed run held at once
                             * outside its memory plan's arena (its temporaries
                             * and fetches; not the scope) */
    size_t last_arena_bytes; /* the memory plan's arena the last completed run used
                              * (0: none; see VQ_EXEC_NO_MEMPLAN) */
} vq_exec_stats;

/* Copies x's counters into *out. VQ_EINVAL for NULL arguments.
 * Thread-safe. */
VQ_API int vq_exec_get_stats(vq_exec *x, vq_exec_stats *out);

/* Cancels every run of x in flight when it is called (runs started after
 * it are not affected): ops of those runs that have not started are
 * skipped, a while loop stops at its next predicate, and each run ends
 * with VQ_ECANCELED, vq_errmsg() naming where it stopped ("op 2 (while):
 * the run was cancelled (vq_exec_cancel), at iteration 4711"). An op
 * already running is not interrupted: the run ends when it returns. The
 * runs' temporaries are released as on any failure, the plans and the
 * scope stay usable, and vq_exec_free / vq_engine_free then return once
 * the ops already running have. A run that had pushed all its work and
 * was only finishing may still succeed. Returns the number of runs it
 * reached (0 when none was in flight) or VQ_EINVAL for a NULL x.
 * Thread-safe; from any thread, inside an op too (it only sets flags).
 * ONNX Runtime's RunOptions.terminate and TensorFlow's
 * RunOptions.timeout_in_ms (vq_exec_opts.timeout_ms here) do the same. */
VQ_API int vq_exec_cancel(vq_exec *x);

#ifdef __cplusplus
}
#endif
#endif
