/* varq engine: vars, ops and the dependency engine that orders them.
 *
 * Every piece of state the caller wants ordered is a var (vq_var); every piece
 * of work is an op that names the vars it reads and writes. vq_push returns at
 * once; the engine runs the op as soon as every earlier op that shares one of
 * its vars with a write has completed. The result is always that of running
 * the ops one at a time in push order (serial equivalence;
 * docs/engine.md).
 *
 * Thread-safety, unless a function says otherwise: every function may be
 * called from any thread, concurrently with any other, on the same engine.
 * A var or prebuilt op must not be used after the call that frees it has
 * started (as with free()).
 *
 * Concurrent pushers: "push order" is one total order of all pushes, by all
 * threads. Each push (vq_push, vq_push_opr, and the pushes inside
 * vq_var_free and vq_wait_var) takes effect at one instant between its call
 * and its return, and the order of those instants is the push order: so a
 * thread's own pushes are in the order of its calls, a push that returned
 * before another thread's push started comes first, and two pushes that
 * overlap in time are ordered one way or the other, the same way on every
 * var they share. Serial equivalence then holds for that order: the result
 * is that of running all ops one at a time in push order, whatever the
 * threads that pushed them. No two pushers can deadlock each other: an op's
 * accesses are queued on all its vars at once, under the vars' locks taken
 * in one global order.
 *
 * GPU ops (ctx {VQ_DEV_GPU, id}; docs/gpu.md) are sync fns that receive
 * their stream in vq_exec_ctx.stream (a cudaStream_t with CUDA), enqueue
 * their work there and return; the op completes at launch and its vars
 * carry an event recorded after it. Later GPU ops on other streams wait for
 * it on the device; CPU ops wait for it on a worker; vq_wait_var and
 * vq_wait_all include it. Ops with VQ_PROP_COPY_TO_DEV / _FROM_DEV run on
 * the device's two copy streams, so they overlap compute. A GPU op's reads
 * are ordered like writes among GPU ops (its launch waits for earlier GPU
 * ops that read the var too); its failures still poison only its writes.
 * The GPU backend is set up by the first GPU push: VARQ_GPU_BACKEND=cuda|
 * emulated (default: CUDA when a device is present; emulated: host threads
 * as streams, VARQ_GPU_EMUL_DEVICES devices). An engine that runs only CPU
 * ops never initializes a GPU runtime. */
#ifndef VARQ_ENGINE_H
#define VARQ_ENGINE_H

#include <varq/error.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vq_engine vq_engine; /* an engine: workers and the ops in flight */
typedef struct vq_var vq_var;       /* a var: one piece of state ops are ordered on */
typedef struct vq_opr vq_opr;   /* a prebuilt op, pushed many times */
typedef struct vq_done vq_done; /* completion handle of an async op */

/* Where an op runs. The zero value is CPU 0. */
typedef struct {
    int kind; /* VQ_DEV_CPU or VQ_DEV_GPU */
    int id;   /* device number; 0 for the CPU */
} vq_ctx;

enum { VQ_DEV_CPU = 0, VQ_DEV_GPU = 1 };

/* What an op's function receives besides its argument: the context it runs
 * in, the stream of a GPU op (NULL on CPU), and the index of the worker
 * running it (-1 for the caller's thread in the naive engine). */
typedef struct vq_exec_ctx {
    vq_ctx ctx;   /* the device the op runs on */
    void *stream; /* a GPU op's stream (a cudaStream_t with CUDA); NULL on the CPU */
    int worker;   /* the running worker's index; -1 for the caller's thread */
} vq_exec_ctx;

/* A sync op returns 0, or a negative error that poisons the vars it writes. */
typedef int (*vq_sync_fn)(void *arg, const vq_exec_ctx *x);
/* An async op must call vq_done_finish(done, err) exactly once, from any
 * thread, possibly after it returned. */
typedef void (*vq_async_fn)(void *arg, const vq_exec_ctx *x, vq_done *done);

/* Op properties (vq_task.props). */
enum {
    VQ_PROP_CPU_PRIORITIZED = 1u << 0, /* runs on the prioritized CPU workers */
    VQ_PROP_COPY_TO_DEV = 1u << 1,     /* a host-to-device copy (GPU) */
    VQ_PROP_COPY_FROM_DEV = 1u << 2,   /* a device-to-host copy (GPU) */
    /* Runs even when a var it touches carries a failure: the op is not
     * skipped and the failure stays on the var for the others (2.5 holds
     * for every op without this prop). Also runs when waiting for GPU work
     * on its vars failed (a stream error): vq_op_wait_error() then says so
     * inside its fn, and that error becomes the op's own (it fails the op
     * unless the op fails otherwise). For layers that track failures
     * themselves and must see every op run, like the graph executor. */
    VQ_PROP_RUN_ON_FAILED = 1u << 3,
};

/* One op to push. The engine copies what it needs during vq_push /
 * vq_opr_new: the reads and writes arrays may be reused at once. The same
 * var may appear several times, in either or both arrays: duplicates are
 * merged and a var that is both read and written counts as written. */
typedef struct vq_task {
    vq_sync_fn fn;                 /* exactly one of fn, async_fn */
    vq_async_fn async_fn;          /* see vq_async_fn */
    void *arg;                     /* passed to fn / async_fn; owned by the caller */
    void (*arg_free)(void *arg);   /* after completion (or failure); may be NULL */
    vq_ctx ctx;                    /* zero = CPU 0 */
    vq_var *const *reads;          /* the vars the op reads (nreads of them) */
    int nreads;                    /* entries in reads */
    vq_var *const *writes;         /* the vars the op writes (nwrites of them) */
    int nwrites;                   /* entries in writes */
    int priority;                  /* higher first among ready ops */
    unsigned props;                /* VQ_PROP_* */
    const char *name;              /* for traces; must outlive the engine; may be NULL */
} vq_task;

enum {
    VQ_ENGINE_DEFAULT = 0,  /* VARQ_ENGINE, or threaded */
    VQ_ENGINE_THREADED = 1, /* CPU worker pool */
    VQ_ENGINE_NAIVE = 2,    /* runs each op inside vq_push, in the caller's thread, one
                               op at a time across threads; while an async op is out,
                               pushes from other threads run (they cannot wait for it) */
};

enum {
    VQ_ENGINE_PROFILE = 1u << 0, /* record every op for vq_profiler_dump */
};

/* Engine options. Zero in any field means "the default": for kind and
 * cpu_workers the default comes from VARQ_ENGINE and VARQ_CPU_WORKERS when
 * they are set, otherwise threaded and the number of online cores. */
typedef struct vq_engine_opts {
    int kind;             /* VQ_ENGINE_* */
    int cpu_workers;      /* 0 = VARQ_CPU_WORKERS or the number of cores */
    int cpu_prio_workers; /* extra workers that run only VQ_PROP_CPU_PRIORITIZED ops */
    int gpu_streams;      /* compute streams per GPU (0 = 2; 1..64), each with a worker;
                             plus one copy stream to and one from each device */
    unsigned flags;       /* VQ_ENGINE_PROFILE */
    int cpu_bind;         /* VQ_CPU_BIND_*: where CPU workers run (0 = VARQ_CPU_BIND or the
                             default, spread) */
} vq_engine_opts;

/* vq_engine_opts.cpu_bind. Workers are bound to CPUs of the process's own
 * CPU mask (sched_getaffinity: taskset and cgroup limits hold), one CPU
 * each, worker i of n on the CPU at position i * m / n of the m allowed
 * (spread) or at position i mod m (close); with more workers than CPUs
 * both wrap around. Binding is best effort: a CPU that refuses leaves its
 * worker free. Without binding the kernel's scheduler may keep two busy
 * workers on one CPU for a whole run (docs/perf/engine.md). */
enum {
    VQ_CPU_BIND_DEFAULT = 0, /* VARQ_CPU_BIND=none|spread|close, or spread */
    VQ_CPU_BIND_NONE = 1,    /* let the scheduler place the workers */
    VQ_CPU_BIND_SPREAD = 2,
    VQ_CPU_BIND_CLOSE = 3,
};

/* Creates an engine. opts may be NULL (defaults and environment). The
 * environment: VARQ_ENGINE=threaded|naive, VARQ_CPU_WORKERS=N (1..1024),
 * VARQ_CPU_BIND=none|spread|close,
 * VARQ_PROFILE=path.json (record ops; write a Chrome trace there when the
 * engine is freed, as vq_profiler_dump does; a path it could not write is
 * refused here as vq_profiler_check_path says, VQ_EINVAL for a directory
 * and VQ_EIO for the rest, checked without creating anything). A value
 * that is not understood is VQ_EINVAL, never a silent default. On success
 * *out owns a new engine that the caller frees with vq_engine_free. */
VQ_API int vq_engine_new(vq_engine **out, const vq_engine_opts *opts);

/* Waits for every pushed op to complete (async ops included: one that never
 * calls vq_done_finish makes this hang), writes the VARQ_PROFILE trace if
 * one was asked for, stops the workers and frees the engine with every var
 * and prebuilt op still alive in it. If that trace cannot be written (the
 * disk is full, its directory was removed meanwhile) one line saying why
 * goes to stderr, and the file at the path is left as it was
 * (vq_profiler_dump); that line is all, since this function returns
 * nothing. A program whose status must say so (varq run exits 1) takes
 * VARQ_PROFILE over instead: reads it and unsets it before vq_engine_new,
 * creates the engine with VQ_ENGINE_PROFILE, and checks what
 * vq_profiler_dump returns before freeing it. (The library's other
 * lines on stderr are for environment variables it cannot refuse with an
 * error: VARQ_ISA, VARQ_CPU_CACHE_MB). Must not be called from inside an op, nor concurrently
 * with other calls on the same engine. Tensors used with e (those ops have
 * run on, or whose var an executor or vq_tensor_var gave them) must be
 * released first, scopes holding them freed first: the last release of
 * such a tensor pushes its free on e. Captures still open on e, on any
 * thread, are ended first, their recorded calls pushed and run with the
 * rest (capture.h). NULL is a no-op. */
VQ_API void vq_engine_free(vq_engine *e);

/* Creates a var owned by the engine. name (may be NULL) is copied, cut to
 * 31 bytes, and shows in error messages. Returns NULL on bad arguments or
 * when out of memory (see vq_errmsg). */
VQ_API vq_var *vq_var_new(vq_engine *e, const char *name);

/* Frees v after every op already pushed on it: the deletion is itself a
 * write pushed on v (or, when nothing is queued on v, done at once in the
 * same place of the engine's order). An error still recorded on v is
 * discarded. v must not be
 * pushed on or waited for after this call starts. Returns VQ_EINVAL for a
 * var that is NULL, of another engine, or already freed. */
VQ_API int vq_var_free(vq_engine *e, vq_var *v);

/* Pushes one op and returns at once (the naive engine runs it first). The
 * engine copies *t.
 *
 * Throttle: when more than 4096 ops are in flight, a pushing thread that is
 * not a worker helps the workers — it runs queued ready ops itself until half
 * of them are done — and while over 64 per worker are in flight, a sync op
 * with no vars runs at once in the pushing thread (as OpenMP runs undeferred
 * tasks). The throttle waits only while the workers have work: async ops
 * waiting for their vq_done_finish (and the ops queued behind them) never
 * hold a pusher back, so a thread may push any number of async ops and
 * finish them itself afterwards. The naive engine is the exception by
 * nature: it runs each op inside vq_push, so its vq_push of an async op
 * returns once the op is finished — from its async_fn or another thread.
 * So an op may run on the thread of vq_push (vq_exec_ctx.worker is then -1):
 * do not push while holding a lock that an op takes. Returns 0, or VQ_EINVAL (NULL engine or task, negative
 * count, NULL array with a positive count, both or neither of fn and
 * async_fn, a NULL, foreign or freed var, an unknown prop or ctx), or
 * VQ_ENOSYS for a GPU ctx in a build or engine without GPUs, or VQ_ENOMEM
 * when the op cannot be allocated (with a message). A rejected op
 * is not run and its arg_free is not called. An op whose vars are failed is
 * not run either: it is skipped, its arg_free is called, and the error of
 * the first failed var among its writes, then its reads, is passed on to the
 * vars it writes (docs/engine.md, "Errors"). */
VQ_API int vq_push(vq_engine *e, const vq_task *t);
/* GPU specifics of vq_push and vq_opr_new: VQ_ENOSYS (the message says why
 * and how to get the emulated backend) when no GPU backend is available;
 * VQ_EINVAL for an async_fn (GPU ops are sync), a device id out of range,
 * VQ_PROP_CPU_PRIORITIZED, or both copy props. An error that a GPU op's
 * stream work reports later (a kernel fault) is the stream's sticky error:
 * it fails the next CPU op that synchronizes on the op's vars, and is
 * returned by vq_wait_var of those vars and by vq_wait_all. */

/* Builds an op once, to push many times without allocating or merging
 * vars again. Returns NULL on the errors vq_push would return (see
 * vq_errmsg). arg_free, if set, is called once, when the opr is freed and
 * its last push has completed. */
VQ_API vq_opr *vq_opr_new(vq_engine *e, const vq_task *t);

/* Pushes a prebuilt op; the same as vq_push of its task. Several pushes of
 * one opr may be in flight at once: each is one op in push order. Each opr
 * keeps one spare op of its own (allocated by vq_opr_new), so that a push
 * made while no earlier push of the same opr is in flight never lacks an
 * op. VQ_ENOMEM when the engine's op pool cannot grow and the spare is out
 * with such an earlier push, or when the push's var blocks (one per var of
 * the op, from a pool) cannot be had for want of memory, as for vq_push. */
VQ_API int vq_push_opr(vq_engine *e, vq_opr *op);

/* Releases a prebuilt op. Pushes already made still run; its memory and
 * arg_free follow the last of them. */
VQ_API void vq_opr_free(vq_engine *e, vq_opr *op);

/* Completes an async op with 0 or a negative error. Call exactly once per
 * invocation of the async function, from any thread; done is invalid after. */
VQ_API void vq_done_finish(vq_done *d, int err);

/* Blocks until every op pushed on v before this call has completed, then
 * returns v's error (0 if none) and clears it, so that later ops on v run
 * again. When that error is an op's failure, vq_errmsg() names the op
 * that failed first, by its task name, and why, however many ops skipped
 * for it lie between: "var \"c\": an op it depends on failed: op 'A'
 * (VQ_EIO: ...)"; the why is the error's name, or for an imperative call
 * (vq_op_run) its kernel's message ("op 'div' (integer division by
 * zero ...)"). For an error of GPU stream work the message is left as it
 * was (vq_tensor_wait names the kernel). Returns VQ_EDEADLK at once when
 * called from inside an op, and VQ_EINVAL for a NULL, foreign or freed
 * var. While it waits, the calling thread runs queued ready CPU ops
 * itself (any of the engine's, with vq_exec_ctx.worker -1, as a pusher
 * past the throttle does) and spins a little before it sleeps, so that a
 * wait right after a push does not pay a handoff to a sleeping worker and
 * back: as with vq_push, do not call it while holding a lock that an op
 * takes. vq_tensor_wait waits through it. */
VQ_API int vq_wait_var(vq_engine *e, vq_var *v);

/* Blocks until every op pushed so far (by any thread) has completed. Returns
 * the first error of an op that failed or was skipped since the last
 * vq_wait_all, or 0, and clears that record; vars stay failed until
 * vq_wait_var. Returns VQ_EDEADLK at once when called from inside an op. */
VQ_API int vq_wait_all(vq_engine *e);

/* Non-zero when the calling thread is inside an op's function (or its
 * arg_free) of any engine: a place where waiting would deadlock. Layers that
 * wait (the graph executor's synchronous run) use it to fail with
 * VQ_EDEADLK instead. Thread-safe (reads a thread-local). */
VQ_API int vq_thread_in_op(void);

/* Inside the fn (or async_fn, during its call) of a VQ_PROP_RUN_ON_FAILED
 * op: 0, or the negative error of waiting for the GPU work on its vars (a
 * failed event wait: a stream error), whose message vq_errmsg() holds until
 * the fn calls something that sets another. The op fails with it whatever
 * the fn returns. 0 everywhere else. Thread-safe (reads a thread-local). */
VQ_API int vq_op_wait_error(void);

/* From a GPU op's fn (x is its vq_exec_ctx): enqueues fn(arg) on the op's
 * stream, in stream order, on a host thread (cudaLaunchHostFunc with CUDA,
 * the stream's thread when emulated). fn returns 0 or a negative VQ_* code;
 * a failure becomes the stream's sticky error (see vq_push). fn must not
 * call the engine. It is how host-side "device work" is written, and the
 * emulated backend's kernels. Returns 0, or VQ_EINVAL when x is not a GPU
 * op's context. */
VQ_API int vq_gpu_launch_host(const vq_exec_ctx *x, int (*fn)(void *arg), void *arg);

/* Writes a Chrome trace (JSON, opens in Perfetto or chrome://tracing) of
 * every op completed so far: name, worker, start and end. The engine must
 * have been created with VQ_ENGINE_PROFILE or VARQ_PROFILE; otherwise
 * VQ_EINVAL. Ops still running are not in the trace. Every write is
 * checked: one that fails (a full disk, a file size limit) is VQ_EIO, the
 * message naming path and the cause ("No space left on device").
 *
 * A trace is never left cut short where a whole one is expected: when path
 * is a regular file or names nothing yet, the trace goes to a new file
 * beside it (path.PID.N.tmp, in the same directory, so that directory must
 * be writable) which is renamed over path once every byte is written; on
 * a failure that file is removed and path keeps what it had. A replaced
 * file keeps its permission bits, and one without write permission is not
 * replaced (VQ_EIO). Anything else at path (a device such as /dev/stdout,
 * a FIFO, a symbolic link) is opened and written in place, and after a
 * failure holds what was written before it.
 *
 * It may run while other threads push ops on e (each worker's records are
 * read under their lock), not concurrently with vq_engine_free. The
 * caller keeps path. */
VQ_API int vq_profiler_dump(vq_engine *e, const char *path);

/* Whether vq_profiler_dump could write a trace at path as things stand now,
 * by the rule above, checked without creating anything: a regular file or
 * a new name needs a writable directory (and an existing file write
 * permission), anything else write permission. Returns 0, VQ_EINVAL for a
 * NULL or empty path or a directory, VQ_EIO naming path and why (a
 * missing directory, permission denied, a read-only file system). A tool
 * calls it before long work whose trace it will write at the end, as
 * `varq run --profile` does. The disk can still fill, or permissions
 * change, before the trace is written. Thread-safe; the caller keeps
 * path. */
VQ_API int vq_profiler_check_path(const char *path);

#ifdef __cplusplus
}
#endif
#endif
