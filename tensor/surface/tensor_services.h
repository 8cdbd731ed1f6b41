/* The tensor runtime's surface (tensor/), for the layers above it (ops/,
 * graph/, capture/, onnx/, dist/): the tensor object,
 * the allocator interface and the allocators' trim hooks, GPU memory
 * (the backend, per-device allocators, copies between host and devices),
 * the broadcasting walk and atomic file writes. The op runtime (ops/)
 * builds on it; nothing here knows of op definitions or kernels. */
#ifndef VARQ_TENSOR_SERVICES_H
#define VARQ_TENSOR_SERVICES_H

#include <varq/ops.h> /* vq_attr, for capture's op_run hook */
#include <varq/tensor.h>

#include "engine_services.h" /* vq__fail, vq__malloc & co., the GPU op's stream */

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- allocator (alloc.c) ---- */

/* One per device. Blocks are 64-byte aligned. stream is the stream of the
 * block's last user, for stream-ordered devices; NULL on the CPU. */
typedef struct vq__allocator {
    void *(*alloc)(struct vq__allocator *a, size_t bytes, void *stream);
    void (*free)(struct vq__allocator *a, void *p, size_t bytes, void *stream);
    int (*stats)(struct vq__allocator *a, vq_mem_stats *out);
    void (*reset_peak)(struct vq__allocator *a);
    void (*trim)(struct vq__allocator *a);
} vq__allocator;

/* The allocator of dev, or NULL (no such device in this build, or no GPU
 * backend; vq_errmsg() says why). */
vq__allocator *vq__allocator_of(vq_ctx dev);

/* A cache that holds memory outside the allocators (a kernel's kept
 * transforms, ops/math/winograd.c) registers fn here, so that vq_mem_trim
 * on a device of kind dev_kind (VQ_DEV_CPU or VQ_DEV_GPU) empties it too,
 * after the allocator's own trim; the allocator then need not know the
 * cache. fn must be callable from any thread at any time and live for the
 * rest of the process. Registering the same fn twice has no effect;
 * VQ_ENOMEM past VQ__TRIM_HOOKS_MAX hooks. Any thread (a cache registers
 * when it first keeps memory). */
#define VQ__TRIM_HOOKS_MAX 16
int vq__mem_trim_hook_add(int dev_kind, void (*fn)(void));

/* ---- GPUs (gpu.c) ---- */

struct vq__stream_backend;

/* The GPU backend the ops use: the one the engine picks
 * (vq__stream_backend_get(NULL)), looked up once it exists. VQ_ENOSYS with
 * the backend's message when there is none. Thread-safe. */
int vq__gpu_backend(const struct vq__stream_backend **out);

/* The allocator of GPU id: blocks from the backend's malloc_async on a
 * private per-device stream (synchronized, so any stream may use them);
 * free_async on the stream passed to free (the block's last user), or on
 * that private stream when NULL. VQ_ENOSYS (no backend) or VQ_EINVAL (no
 * such device) with a message. Thread-safe. */
int vq__gpu_allocator(int id, vq__allocator **out);

/* Copies n bytes between host and GPU id memory (kind a VQ__MEMCPY_*
 * value) on the device allocator's private stream and waits for it: for
 * callers outside any engine op order (the executor binding scope tensors
 * at preparation), which must have waited for the engine work on both
 * buffers themselves. Thread-safe. */
int vq__gpu_copy_sync(int id, void *dst, const void *src, size_t n, int kind);

/* Copies src's bytes into dst (same size; CPU or GPU on either side, one
 * GPU at most) and waits for the copy: vq__gpu_copy_sync's rules. */
int vq__tensor_copy_sync(vq_tensor *dst, const vq_tensor *src);

/* Copies parts[0], parts[stride], ... parts[(n - 1) * stride] (one size,
 * n of them, on dst's device) one after the other into dst, whose bytes
 * they fill, and waits for the copies: vq__gpu_copy_sync's rules. What
 * joins a while's stacked values once the loop is done (graph/control.c). */
int vq__tensor_stack_sync(vq_tensor *dst, vq_tensor *const *parts, int stride, int64_t n);

/* Enqueues a copy of src's bytes into dst (same size) on stream, a GPU
 * op's stream: the source must stay valid until the stream reaches it. */
int vq__tensor_copy_async(vq_tensor *dst, const vq_tensor *src, void *stream);

/* Copies src (on a GPU) into the host tensor dst on stream, a GPU op's
 * stream, and waits for the stream: what a GPU op that must read a value
 * on the host (an input giving a shape) calls, its stream being ordered
 * after the value's writer. Not from the stream's own host work. */
int vq__tensor_read_on(vq_tensor *dst, const vq_tensor *src, void *stream);

/* Copies between host and device memory go through pinned staging
 * buffers (ops/gpu.c): how many copies used one, and how many buffers were
 * allocated, since the process started. Thread-safe. */
void vq__gpu_stage_stats(uint64_t *uses, uint64_t *allocs);

/* Copies into buf the message of the last op kernel that failed in stream
 * work on GPU id (the emulated backend's host kernels, the CUDA kernels'
 * device-side checks), for vq_tensor_wait; false when there was none.
 * Thread-safe. */
bool vq__gpu_last_failure(int id, char *buf, size_t size);

/* For stream work of an op's kernel on GPU id that found an error err
 * (message in vq_errmsg()): what the work returns. With the call's defer
 * hook set (vq__kcall), defer gets the error and the result is 0 (the
 * stream stays usable); without, the message is kept as GPU id's last
 * failure and err is returned, to become the stream's sticky error. Makes
 * no backend calls, so host functions may call it. Thread-safe. */
int vq__gpu_work_failed(int id, int err,
                        void (*defer)(void *user, void *tag, int err, const char *msg),
                        void *defer_user, void *defer_tag);

/* ---- tensors (tensor.c) ---- */

struct vq_tensor {
    atomic_int refs;
    vq_dtype dtype;
    int ndim;
    int64_t shape[VQ_MAX_DIMS];
    int64_t numel;
    size_t nbytes;
    void *data;
    vq_ctx dev;
    vq__allocator *alloc;
    /* Set once, by the first engine the tensor is used with. */
    _Atomic(vq_var *) var;
    _Atomic(vq_engine *) engine;
    /* Message of the failed op that last wrote the tensor (malloc'd, or
     * NULL). Stored by that op, taken by vq_tensor_wait after the var says
     * the op is done. */
    _Atomic(char *) fail_msg;
    /* The capture (capture/capture.c) whose recorded calls, not yet pushed,
     * use this tensor, and the tensor's slot in that capture's segment;
     * NULL when none. Set and cleared by the capturing code under its
     * lock; read by anyone (the cut hooks below). */
    _Atomic(void *) capture;
    int capture_slot;
    /* GPU tensors: events recorded on the streams of the GPU ops that let
     * go of a shared reference (vq__tensor_release_on while others held
     * one), which the stream that frees the storage waits for first.
     * Pushed lock-free; taken by the last reference only. */
    _Atomic(struct vq__tensor_use *) uses;
};

/* vq_tensor_var without the capture cut: for capture itself, which pushes
 * the recorded work on t with it. Sets *out and returns 0, or fails with a
 * message that names no call (the caller puts its own before it):
 * VQ_EINVAL, t is another engine's, or VQ_ENOMEM. */
int vq__tensor_var(vq_tensor *t, vq_engine *e, vq_var **out);
/* vq_tensor_var for the library's own calls (vq_op_run, vq_tensor_copy_to):
 * the capture cut, then vq__tensor_var, its message left to the caller. */
int vq__tensor_var_cut(vq_tensor *t, vq_engine *e, vq_var **out);

/* A new CPU tensor whose bytes are not initialized. */
int vq__tensor_empty(vq_tensor **out, vq_dtype dt, int ndim, const int64_t *shape);

/* The same on device dev (CPU 0 or a GPU): VQ_ENOSYS / VQ_EINVAL for a GPU
 * without backend or out of range, with the message. fn names the caller
 * in messages. */
int vq__tensor_empty_on(vq_tensor **out, vq_ctx dev, vq_dtype dt, int ndim, const int64_t *shape,
                        const char *fn);

/* A new tensor on dev whose storage is allocated in stream order on
 * stream (a GPU op's stream): usable by work enqueued on that stream from
 * now on, and by other streams after an event recorded there (the engine's
 * events on the op's vars). stream NULL: as vq__tensor_empty_on. */
int vq__tensor_empty_at(vq_tensor **out, vq_ctx dev, vq_dtype dt, int ndim, const int64_t *shape,
                        void *stream);

/* vq_tensor_release for a tensor that has no engine var (the graph
 * executor's temporaries), from a GPU op on stream: the last reference
 * frees the storage in stream order on stream, after the work enqueued
 * there so far, which must include every use made through this
 * reference (the caller's ordering). A reference that is not the last
 * records an event on stream that the free waits for: two slots holding
 * one tensor (a control op's result) are read by ops on streams that
 * nothing else orders. stream NULL: vq_tensor_release. */
void vq__tensor_release_on(vq_tensor *t, void *stream);

/* For tensor.c: the GPU side of vq__tensor_release_on. vq__gpu_use_note
 * records an event on stream after the work enqueued there so far and
 * pushes it on t->uses (when no event can be had, it waits for the
 * stream instead); vq__gpu_uses_settle makes the stream t's storage is
 * freed on (stream, or the allocator's own when NULL) wait for every
 * event on t->uses, and frees them. */
void vq__gpu_use_note(vq_tensor *t, void *stream);
void vq__gpu_uses_settle(vq_tensor *t, void *stream);

/* Elements of a shape; -1 if a dim is negative (unknown), INT64_MAX past
 * 2^62 elements. */
int64_t vq__numel(int ndim, const int64_t *shape);

/* The integer (-1)^neg * magnitude rounded to f16 or bf16 as vq_f64_to_f16
 * rounds (exactly: no detour through a double). (half.c) */
uint16_t vq__int_to_f16(bool neg, uint64_t magnitude);
uint16_t vq__int_to_bf16(bool neg, uint64_t magnitude);

/* Element i of data (dtype dt) as a double (exact but for the 64-bit
 * integers past 2^53), and a double stored as element i: rounded as cast
 * rounds (ops/cpu/shape.c), integers truncated toward zero and saturated,
 * NaN to 0. For the layers' small constants and printing, not for
 * kernels. (half.c) */
double vq__elem_get(vq_dtype dt, const void *data, int64_t i);
void vq__elem_set(vq_dtype dt, void *data, int64_t i, double v);

/* Writes "[2,3,4]" into buf (always terminated). Returns buf. */
char *vq__shape_str(char *buf, size_t size, int ndim, const int64_t *shape);

/* ---- capture hooks ----
 *
 * Capture (capture/, a layer above this one) records vq_op_run calls
 * instead of pushing them and pushes them later, together. This layer
 * cannot include it, so capture installs these hooks the first time it is
 * used; until then the pointer is NULL and the hooks cost one load.
 *
 * op_run: called by vq_op_run before anything else, for calls with an
 * engine. Returns VQ__CAPTURE_EAGER when the call is to run eagerly (this
 * thread does not capture on e, or the call cannot be recorded; either way
 * capture first pushed whatever recorded work touches the call's tensors,
 * so the eager push comes after it), else the call's result: 0 when it
 * was recorded, or the error eager execution would have returned.
 * cut: t->capture was set: push the recorded work that uses t (cause: a
 * VQ__CUT_* value, for statistics) before t's var or bytes are used. */
enum { VQ__CAPTURE_EAGER = 1 };
enum { VQ__CUT_HOST_READ = 0, VQ__CUT_VAR = 1 };
typedef struct vq__capture_hooks {
    int (*op_run)(vq_engine *e, const char *type, vq_tensor *const *in, int nin, vq_tensor **out,
                  int nout, const vq_attr *attrs, int nattrs);
    void (*cut)(vq_tensor *t, int cause);
} vq__capture_hooks;
extern _Atomic(const vq__capture_hooks *) vq__capture;

/* Before t's var or bytes are used: pushes recorded work on t, if any. */
static inline void vq__capture_cut(vq_tensor *t, int cause)
{
    if (__builtin_expect(atomic_load_explicit(&t->capture, memory_order_relaxed) != NULL, 0)) {
        const vq__capture_hooks *h = atomic_load_explicit(&vq__capture, memory_order_acquire);
        if (h)
            h->cut(t, cause);
    }
}

/* Stride-0 broadcasting walk over an output of `ndim` dims: for each
 * innermost row it calls row(user, offsets of each input in elements, row
 * length, per-input innermost stride 0/1, output offset). The output is
 * contiguous. */
typedef struct vq__bcast {
    int ndim;
    int64_t shape[VQ_MAX_DIMS];     /* output shape */
    int64_t stride[2][VQ_MAX_DIMS]; /* per input, in elements, 0 where broadcast */
} vq__bcast;

/* Sets up b for output shape out and the two input shapes. */
void vq__bcast_init(vq__bcast *b, const vq_tensor *out, const vq_tensor *x, const vq_tensor *y);

/* Calls fn once per innermost row; fn(user, xoff, yoff, ooff, n, xs, ys). */
void vq__bcast_rows(const vq__bcast *b, void *user,
                    void (*fn)(void *user, int64_t xoff, int64_t yoff, int64_t ooff, int64_t n,
                               int64_t xs, int64_t ys));

/* ---- files (file.c) ---- */

typedef struct vq__file_part {
    const void *buf;
    size_t n;
} vq__file_part;

/* Writes the parts to path atomically (see file.c): VQ_EIO naming the path,
 * or VQ_ENOMEM. */
int vq__file_replace(const char *path, const vq__file_part *parts, int nparts);

/* VQ_EIO with "path: what: strerror(err)". */
int vq__io_fail(const char *path, const char *what, int err);

/* Tests only: after `after` more files written by vq__file_replace, each
 * further write fails with ENOSPC, as on a full disk; -1 turns it off.
 * Process-wide (atomic). */
void vq__file_inject_enospc(int after);

/* Tests only: the same for other faults of the (after+1)-th file written:
 * VQ__FAULT_FULL (ENOSPC before any byte), VQ__FAULT_MIDWAY (half the
 * bytes written, then EIO: a write interrupted midway), VQ__FAULT_SHORT
 * (every write() takes at most 7 bytes: must still succeed). */
enum { VQ__FAULT_FULL, VQ__FAULT_MIDWAY, VQ__FAULT_SHORT };
void vq__file_inject_fault(int after, int kind);

/* Syncs the directory holding path (best effort). */
void vq__file_sync_dir_of(const char *path);

#endif
