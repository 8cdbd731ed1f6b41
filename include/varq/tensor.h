/* varq tensors: typed, shaped, contiguous arrays whose storage is
 * reference counted and comes from a per-device allocator; .npy files.
 *
 * A tensor is an opaque handle. Its dtype and shape are fixed at creation;
 * its bytes are row-major (C order) and contiguous. Ops read and write
 * tensors asynchronously on an engine (see ops.h): each tensor that has been
 * used with an engine owns one engine var, and the engine orders every op
 * that touches the tensor through it. Before the caller reads or writes the
 * bytes itself it calls vq_tensor_wait.
 *
 * Ownership: every function that hands out a tensor (vq_tensor_new,
 * vq_tensor_from, vq_npy_load, vq_op_run's created outputs) gives the caller
 * one reference, which it drops with vq_tensor_release. Ops in flight hold
 * their own references, so releasing a tensor that a pushed op still uses is
 * safe: the storage goes back to the allocator when the last op is done.
 *
 * Thread-safety: retain and release may be called from any thread at any
 * time. The accessors of dtype and shape read immutable fields and are
 * thread-safe. The bytes follow the engine's rules: two threads may not
 * touch them directly unless the caller orders the accesses itself. */
#ifndef VARQ_TENSOR_H
#define VARQ_TENSOR_H

#include <varq/engine.h>
#include <varq/error.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The element types of tensors (Paddle's and numpy's names: float32,
 * float64, int32, int64, bool, float16, bfloat16, int8, uint8, int16,
 * uint16, uint32, uint64). The values are part of the ABI and of the
 * program file format: new ones are appended.
 *
 * VQ_F16 is IEEE 754 binary16 and VQ_BF16 bfloat16 (the top 16 bits of an
 * f32), both stored as their 16-bit patterns. They are storage types:
 * the ops that take them compute in f32 and round the result once
 * (vq_op_run reports the ops that do not take a dtype: VQ_ENOSYS naming
 * the op and the dtype). cast converts between every pair (ops.h's cast:
 * floats round to nearest even, float to integer truncates and
 * saturates, integer to integer wraps). */
typedef enum vq_dtype {
    VQ_F32 = 0,
    VQ_F64 = 1,
    VQ_I32 = 2,
    VQ_I64 = 3,
    VQ_BOOL = 4, /* one byte per element, 0 or 1 */
    VQ_F16 = 5,  /* IEEE binary16: 1 sign, 5 exponent, 10 fraction bits */
    VQ_BF16 = 6, /* bfloat16: 1 sign, 8 exponent, 7 fraction bits */
    VQ_I8 = 7,
    VQ_U8 = 8,
    VQ_I16 = 9,
    VQ_U16 = 10,
    VQ_U32 = 11,
    VQ_U64 = 12,
} vq_dtype;

#define VQ_DTYPE_COUNT 13 /* the number of vq_dtype values: 0 to VQ_DTYPE_COUNT - 1 */
#define VQ_MAX_DIMS 8     /* the most dimensions a tensor has */

/* A tensor: an opaque handle, reference counted (see the head of this
 * file). */
typedef struct vq_tensor vq_tensor;

/* Size in bytes of one element; 0 for a value that is not a vq_dtype. */
VQ_API size_t vq_dtype_size(vq_dtype dt);

/* Short name: "f32", "f64", "i32", "i64", "bool", "f16", "bf16", "i8",
 * "u8", "i16", "u16", "u32", "u64"; "?" for a bad value. Static string. */
VQ_API const char *vq_dtype_name(vq_dtype dt);

/* Parses a dtype name: the short names above or numpy's ("float32",
 * "float64", "int32", "int64", "bool", "float16", "bfloat16", "int8",
 * "uint8", "int16", "uint16", "uint32", "uint64"). VQ_EINVAL for anything
 * else. */
VQ_API int vq_dtype_parse(const char *name, vq_dtype *out);

/* The 16-bit floats' values (VQ_F16: IEEE binary16, VQ_BF16: bfloat16,
 * each element its 16-bit pattern). To f16 or bf16: rounded to nearest,
 * ties to even, once from the exact value (subnormals included); past the
 * largest finite value, infinity; NaN stays NaN, quiet, with the top of its
 * payload (what F16C and AVX512-BF16 do). To f32: exact (a NaN made
 * quiet). Pure functions: thread-safe. */
VQ_API uint16_t vq_f32_to_f16(float f);
VQ_API uint16_t vq_f64_to_f16(double d);
VQ_API uint16_t vq_f32_to_bf16(float f);
VQ_API uint16_t vq_f64_to_bf16(double d);
VQ_API float vq_f16_to_f32(uint16_t h);
VQ_API float vq_bf16_to_f32(uint16_t h);

/* A new CPU tensor filled with zeros. ndim is 0 (a scalar) to VQ_MAX_DIMS;
 * every dim is >= 0 (a zero dim makes an empty tensor). On success *out
 * holds one reference. VQ_EINVAL for a bad dtype or shape, VQ_ENOMEM. */
VQ_API int vq_tensor_new(vq_tensor **out, vq_dtype dt, int ndim, const int64_t *shape);

/* Like vq_tensor_new, then copies numel * vq_dtype_size(dt) bytes from data
 * (which the caller keeps). For VQ_BOOL every byte must be 0 or 1. */
VQ_API int vq_tensor_from(vq_tensor **out, vq_dtype dt, int ndim, const int64_t *shape,
                          const void *data);

/* Wraps memory the caller owns as a CPU tensor, without copying: the
 * tensor's bytes are data[0 .. numel * vq_dtype_size(dt)), row-major and
 * contiguous, aligned to at least the element size (varq's kernels do not
 * need more; vq_tensor_data returns data itself). What language bindings
 * use to share a numpy array or a DLPack tensor with varq.
 *
 * Ownership: on success *out holds one reference, and the memory belongs
 * to the tensor until release(user) is called, exactly once, when the last
 * reference is gone and every op pushed on the tensor is done; the caller
 * keeps the memory valid until then (for a binding: the producer object
 * stays alive until release drops it). release may be NULL (the memory
 * outlives the tensor by other means). On failure release is NOT called and
 * *out is NULL. The memory is not counted by vq_mem_get_stats.
 *
 * Ops may write a wrapped tensor like any other (an op whose output it is,
 * vq_op_run with it as an output); the executor never writes its feeds. The
 * caller must not touch the bytes while ops use them (vq_tensor_wait).
 *
 * Thread-safety: release runs on whichever thread drops the last reference
 * or runs the tensor's free op (an engine worker), so it must be callable
 * from any thread (a Python binding takes the GIL in it). VQ_EINVAL for a
 * bad dtype or shape, NULL data with a non-zero size, or data not aligned
 * to the element size; VQ_ENOMEM. Thread-safe. */
VQ_API int vq_tensor_wrap(vq_tensor **out, vq_dtype dt, int ndim, const int64_t *shape, void *data,
                          void (*release)(void *user), void *user);

/* Adds a reference and returns t. Thread-safe. */
VQ_API vq_tensor *vq_tensor_retain(vq_tensor *t);

/* Drops a reference; the last one frees the tensor's engine var (after every
 * op already pushed on it; at once when none is queued and the tensor is on
 * the CPU) and returns its storage to the allocator. NULL is
 * ignored. Thread-safe. Must not be called for a tensor the caller does not
 * hold a reference to. */
VQ_API void vq_tensor_release(vq_tensor *t);

/* The tensor's dtype, fixed at creation. Thread-safe. */
VQ_API vq_dtype vq_tensor_dtype(const vq_tensor *t);
/* The number of dimensions (0 for a scalar), fixed at creation.
 * Thread-safe. */
VQ_API int vq_tensor_ndim(const vq_tensor *t);
/* The shape: ndim entries, valid as long as the tensor is. Thread-safe. */
VQ_API const int64_t *vq_tensor_shape(const vq_tensor *t);
/* The number of elements (the product of the dims; 1 for a scalar).
 * Thread-safe. */
VQ_API int64_t vq_tensor_numel(const vq_tensor *t);
/* The size of the bytes: numel * vq_dtype_size(dtype). Thread-safe. */
VQ_API size_t vq_tensor_nbytes(const vq_tensor *t);

/* The bytes (numel * dtype size), 64-byte aligned (a wrapped tensor's are
 * the caller's, aligned as vq_tensor_wrap says), valid as long as the
 * caller holds a reference. Not ordered with pushed ops: call
 * vq_tensor_wait first. For a tensor on a GPU this is the device pointer
 * (host memory only on the emulated backend): the host must not dereference
 * it; pass it to device code, or copy the tensor to the CPU with
 * vq_tensor_copy_to. */
VQ_API void *vq_tensor_data(vq_tensor *t);

/* The device the tensor's storage is on: {VQ_DEV_CPU, 0} or {VQ_DEV_GPU,
 * id}. Fixed at creation; thread-safe. */
VQ_API vq_ctx vq_tensor_device(const vq_tensor *t);

/* ---- tensors on GPUs (docs/gpu.md) ----
 *
 * A GPU tensor's storage comes from its device's allocator: stream-ordered
 * device memory (cudaMallocAsync, or host memory on the emulated backend),
 * freed on the stream of its last user when the last reference goes. Ops
 * on GPU tensors run on that device's streams (vq_op_run); the host reaches
 * the values through vq_tensor_copy_to. The GPU backend is the engine's
 * (VARQ_GPU_BACKEND=cuda|emulated, VARQ_GPU_EMUL_DEVICES; see engine.h).
 * vq_npy_save copies a GPU tensor to the host itself. */

/* A new tensor on device dev: {VQ_DEV_CPU, 0} gives what vq_tensor_new
 * gives (zeros); on a GPU the bytes are NOT initialized (write them with an
 * op or a copy first). On success *out holds one reference. VQ_EINVAL for a
 * bad dtype or shape or a device id out of range, VQ_ENOSYS when there is
 * no GPU backend (vq_errmsg() says why and how to get the emulated one),
 * VQ_ENOMEM. Thread-safe. */
VQ_API int vq_tensor_new_on(vq_tensor **out, vq_ctx dev, vq_dtype dt, int ndim,
                            const int64_t *shape);

/* Copies src into a new tensor on device dev (same dtype and shape), as an
 * op pushed on engine e and ordered after the ops already pushed on src:
 * host to device on dev's to-device copy stream (VQ_PROP_COPY_TO_DEV),
 * device to host on the source device's from-device copy stream
 * (VQ_PROP_COPY_FROM_DEV), device to device on the destination device's
 * compute streams, host to host on a CPU worker. Returns at once; *out
 * holds one reference to the new tensor, whose later users (vq_op_run,
 * vq_tensor_wait) are ordered after the copy. e may be NULL only when
 * neither side is a GPU (the copy is then done in the calling thread).
 * VQ_EINVAL for NULL arguments or a GPU copy without an engine, the errors
 * of vq_tensor_new_on and vq_push; on failure *out is NULL. Thread-safe. */
VQ_API int vq_tensor_copy_to(vq_engine *e, vq_tensor *src, vq_ctx dev, vq_tensor **out);

/* Blocks until every op already pushed that reads or writes t is done.
 * Returns 0, or the error of the failed op that wrote t (or that an op
 * writing t inherited); vq_errmsg() then names the op that failed: its own
 * message for a tensor it wrote ("div: integer division by zero ..."),
 * and for a tensor written by an op skipped for the failure (however many
 * skipped ops lie between) "an op this tensor depends on failed: op 'div'
 * (integer division by zero ...)", the op type that failed first and its
 * message; the same text whether the calls ran eagerly or captured. The
 * error is taken, as vq_wait_var takes its var's: t's error is cleared,
 * so a second wait returns 0 and later ops that use t run again. Returns at
 * once for a tensor never used with an engine. Not from inside an op
 * (VQ_EDEADLK). Thread-safe. Waits as vq_wait_var does: the thread may run
 * ready ops meanwhile, so do not hold a lock that an op takes. */
VQ_API int vq_tensor_wait(vq_tensor *t);

/* The engine var that orders the ops on t in engine e, created on first use
 * (thread-safe). A tensor belongs to the first engine it is used with (by
 * vq_op_run, an executor run or this call): another engine gets NULL and
 * VQ_EINVAL in vq_errmsg(), and the tensor must be released before that
 * engine is freed (its var dies with the engine). The tensor owns the var:
 * do not free it. Use it to push your own ops that touch the tensor's
 * bytes. */
VQ_API vq_var *vq_tensor_var(vq_tensor *t, vq_engine *e);

/* ---- memory ---- */

/* The counters of one device's allocator (vq_mem_get_stats). */
typedef struct vq_mem_stats {
    size_t live_bytes;   /* bytes in tensors that exist now */
    size_t peak_bytes;   /* highest live_bytes since start or the last reset */
    size_t cached_bytes; /* freed blocks kept for reuse */
    size_t system_bytes; /* live + cached: what the allocator holds */
    uint64_t allocs;     /* allocations served */
    uint64_t reuses;     /* of which served from the cache */
} vq_mem_stats;

/* Counters of the allocator of device dev ({VQ_DEV_CPU, 0} for host memory,
 * {VQ_DEV_GPU, id} for a GPU: there cached_bytes is 0 and system_bytes is
 * live_bytes, the backend's memory pool doing the caching). VQ_ENOSYS for a
 * device this build has no allocator for, or a GPU without backend;
 * VQ_EINVAL for a GPU id out of range. Thread-safe; the fields are read
 * one by one, so they can be mutually off by the allocations and frees in
 * flight. live_bytes and peak_bytes are exact (one process-wide counter;
 * the peak is the highest value it took). On the CPU each thread caches
 * freed blocks of up to 256 KiB for itself (at most 4 MiB, and all thread
 * caches and the shared cache together within VARQ_CPU_CACHE_MB), and
 * cached_bytes, allocs and reuses are summed over the threads: exact when
 * no allocation or free runs meanwhile, otherwise off by at most the
 * blocks in flight between a thread's cache and the shared one. */
VQ_API int vq_mem_get_stats(vq_ctx dev, vq_mem_stats *out);

/* Sets peak_bytes to the current live_bytes. Thread-safe. */
VQ_API int vq_mem_reset_peak(vq_ctx dev);

/* Gives every cached block back to the system. Thread-safe. On the CPU:
 * the shared cache and the calling thread's at once; another live
 * thread's cache (at most 4 MiB, see vq_mem_get_stats) when that thread
 * next allocates or frees, or exits; an exited thread's blocks went to
 * the shared cache at its exit. Also on the CPU, the weight transforms
 * conv2d's Winograd path keeps between calls (docs/perf/cpu-kernels.md;
 * they are outside these counters), those a running call uses
 * when it ends. */
VQ_API int vq_mem_trim(vq_ctx dev);

/* ---- .npy files ---- */

/* Reads a .npy file (format versions 1.0, 2.0 and 3.0; little-endian or
 * byte-sized dtypes f4, f8, i4, i8, b1, f2, i1, u1, i2, u2, u4, u8, and V2
 * for bf16; C order; at most VQ_MAX_DIMS dims) into a new CPU tensor.
 *
 * bf16, which numpy lacks, is stored as descr '|V2' (numpy's 2-byte void):
 * each element is the bf16's 16-bit pattern, little-endian. numpy loads
 * such a file as void bytes; a.view('<u2') gives the patterns and
 * a.view(ml_dtypes.bfloat16) the values, and an array of ml_dtypes'
 * bfloat16 viewed as 'V2' saves a file varq reads as bf16. varq reads
 * '|V2' (and '<V2') as bf16 and writes bf16 tensors so. A truncated or malformed file, Fortran order,
 * another dtype, or a big-endian file is VQ_EINVAL with a message naming the
 * file and the problem; an unreadable file is VQ_EIO. */
VQ_API int vq_npy_load(const char *path, vq_tensor **out);

/* The same from len bytes in memory (the caller keeps buf). */
VQ_API int vq_npy_parse(const void *buf, size_t len, vq_tensor **out);

/* Writes t as a .npy file (version 1.0, or 2.0 when the header needs it),
 * after waiting for the ops pushed on t; a GPU tensor is copied to the host
 * first (synchronously). The file is written beside path, synced to the
 * disk and renamed over it, so path holds the old file or the whole new one
 * even after a power loss; a replaced file keeps its mode. VQ_EIO if the
 * file cannot be written (nothing partial is left behind), and for an
 * existing file the caller may not write or that has no write permission
 * at all ("the file is read-only", as numpy.save refuses it). */
VQ_API int vq_npy_save(const char *path, vq_tensor *t);

#ifdef __cplusplus
}
#endif
#endif
