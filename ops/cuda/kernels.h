/* CUDA kernels for the op registry's GPU slot: C-callable launchers, one
 * family per kind of op, that a GPU kernel function (vq__kcall -> launch)
 * calls with the tensors' device pointers and the op's params. Built only
 * when the CUDA toolkit is found (have_cuda: see ops/cuda/meson.build); this
 * header is plain C for the C side and extern "C" for the .cu files.
 *
 * Conventions for every launcher:
 *  - pointers are device pointers; counts are elements; dtype is VQ_F32 or
 *    VQ_F64 (and VQ_I32 / VQ_I64 where a launcher says so); labels are
 *    VQ_I32 or VQ_I64 (label_dtype);
 *  - stream is a cudaStream_t (NULL: the legacy default stream); the launch
 *    is asynchronous: inputs must stay valid and outputs are written only
 *    when the stream reaches the kernel;
 *  - returns 0, VQ_EINVAL for an argument the kernels do not handle (an
 *    unknown op or dtype, a negative count), or VQ_EIO when the launch fails
 *    (cudaGetLastError; the CUDA error is then cleared). Errors of the
 *    kernel's execution surface at the stream's next synchronization;
 *  - zero elements launch nothing and return 0;
 *  - results follow the formulas of the CPU kernels (ops/cpu, the file named
 *    at each section). The
 *    .cu files are compiled with --fmad=false, so products and sums round
 *    separately, as on the CPU (x86-64 gcc, no FMA). Elementwise arithmetic
 *    and the optimizers therefore match the CPU bit for bit; sums over many
 *    elements (softmax, reductions, losses) add in a tree instead of left to
 *    right, and expf/exp/log/tanh are CUDA's (within an ulp or two of
 *    glibc's), so those match to rounding, not bit for bit;
 *  - in place (out == an input) is allowed where the CPU op allows it
 *    (VQ__INPLACE_OK), since each thread reads an element before it writes
 *    the same element, and row kernels read a row before writing it.
 *
 * The launchers are hidden symbols of libvarq (nvcc runs with
 * -Xcompiler -fvisibility=hidden): the library's own files call them, users
 * of libvarq.so do not see them. */
#ifndef VARQ_OPS_CUDA_KERNELS_H
#define VARQ_OPS_CUDA_KERNELS_H

#include <varq/error.h>
#include <varq/tensor.h>

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise (ops/cpu/elementwise.c) ---- */

/* op for vq__cuda_binary: elementwise.c's enum. */
enum { VQ__CUDA_ADD = 0, VQ__CUDA_SUB = 1, VQ__CUDA_MUL = 2, VQ__CUDA_DIV = 3 };

/* out = x op y with numpy broadcasting, for f32, f64, i32 and i64. The
 * broadcast is described as vq__bcast_init (ops/broadcast.c) leaves it:
 * pass b.ndim, b.shape, b.stride[0], b.stride[1]. out is contiguous with
 * prod(shape) elements; xstride/ystride are per-dim strides in elements (0
 * where broadcast); ndim 0 is one element. Integers wrap; an integer
 * division by zero (or INT_MIN / -1) writes 0 to that element and, if
 * div_error is not NULL, sets *div_error (a device int) to 1, which the
 * caller reads after the stream is synchronized (the CPU op fails there). */
int vq__cuda_binary(int op, int dtype, const void *x, const void *y, void *out, int ndim,
                    const int64_t *shape, const int64_t *xstride, const int64_t *ystride,
                    int *div_error, void *stream);

/* out = scale * x + bias (f32: scale and bias rounded to float first, as
 * scale_kernel does). */
int vq__cuda_scale(int dtype, const void *x, void *out, int64_t n, double scale, double bias,
                   void *stream);

/* ---- activations (ops/cpu/activation.c) ---- */

/* op for vq__cuda_unary / vq__cuda_unary_grad: activation.c's enum. */
enum { VQ__CUDA_RELU = 0, VQ__CUDA_SIGMOID = 1, VQ__CUDA_TANH = 2 };

/* out = relu / sigmoid / tanh of x. */
int vq__cuda_unary(int op, int dtype, const void *x, void *out, int64_t n, void *stream);

/* dx from the forward output y and its gradient g: relu: g where y > 0;
 * sigmoid: g y (1 - y); tanh: g (1 - y^2). */
int vq__cuda_unary_grad(int op, int dtype, const void *y, const void *g, void *dx, int64_t n,
                        void *stream);

/* The tensor seen as [outer, len, inner] around the softmax axis (inner = 1
 * for the last axis, the fast case: one block per row, coalesced). One block
 * per line; max-subtracted, exp and sum in double for both dtypes. */
int vq__cuda_softmax(int dtype, const void *x, void *out, int64_t outer, int64_t len,
                     int64_t inner, void *stream);

/* dx = y * (g - sum(g * y)) along each line, the dot in double. */
int vq__cuda_softmax_grad(int dtype, const void *y, const void *g, void *dx, int64_t outer,
                          int64_t len, int64_t inner, void *stream);

/* ---- losses (ops/cpu/loss.c) ---- */

/* X is [rows, classes] (rows = the number of labels). A label outside
 * [0, classes) is found only on the device: that row's outputs are NaN (the
 * loss; for softmax_cross_entropy also its Softmax row; for the grads the
 * whole dX row), the other rows are computed, and if bad_row is not NULL
 * the smallest such row is recorded there with atomicMin. *bad_row is a
 * device unsigned long long the caller sets to UINT64_MAX before the launch
 * (vq__cuda_label_check_reset) and reads after synchronizing: UINT64_MAX
 * means every label was in range; otherwise the CPU op's error ("label L at
 * row R is outside [0, C)") can be reported with the label read back from
 * row R. One flag may serve several launches. */
int vq__cuda_label_check_reset(unsigned long long *bad_row, void *stream);

/* loss[r] = -log(x[r, label[r]]). */
int vq__cuda_cross_entropy(int dtype, int label_dtype, const void *x, const void *label,
                           void *loss, int64_t rows, int64_t classes,
                           unsigned long long *bad_row, void *stream);

/* dx = -g[r] / x[r, label[r]] at the label, 0 elsewhere. */
int vq__cuda_cross_entropy_grad(int dtype, int label_dtype, const void *x, const void *label,
                                const void *g, void *dx, int64_t rows, int64_t classes,
                                unsigned long long *bad_row, void *stream);

/* softmax[r] = softmax(logits[r]), loss[r] = log(sum exp(x - max)) -
 * (x[label] - max), in double. One block per row. */
int vq__cuda_softmax_cross_entropy(int dtype, int label_dtype, const void *logits,
                                   const void *label, void *softmax, void *loss, int64_t rows,
                                   int64_t classes, unsigned long long *bad_row, void *stream);

/* dlogits = (softmax - onehot(label)) * g[r]; may run in place on softmax. */
int vq__cuda_softmax_cross_entropy_grad(int dtype, int label_dtype, const void *softmax,
                                        const void *label, const void *g, void *dlogits,
                                        int64_t rows, int64_t classes,
                                        unsigned long long *bad_row, void *stream);

/* ---- reductions (ops/cpu/reduce.c) ---- */

/* X seen as [outer, len, inner], reduced over len: out[o, i] = sum (or mean)
 * of x[o, :, i]. Sum over all elements: outer = inner = 1, len = numel;
 * along the last axis: inner = 1. (Any contiguous run of reduced axes fits;
 * other axis sets are a TODO.) f32 and f64 accumulate in double; sum also
 * takes i32 / i64, which wrap. The mean of len == 0 is NaN; with outer *
 * inner == 0 nothing is written. One block per output element. */
int vq__cuda_reduce(int mean, int dtype, const void *x, void *out, int64_t outer, int64_t len,
                    int64_t inner, void *stream);

/* sum_grad / mean_grad: dx[o, j, i] = g[o, i] (* 1 / len for mean). */
int vq__cuda_reduce_grad(int mean, int dtype, const void *g, void *dx, int64_t outer,
                         int64_t len, int64_t inner, void *stream);

/* ---- optimizers (ops/cpu/optim.c) ---- */

/* param_out = param - lr * grad, in double. */
int vq__cuda_sgd(int dtype, const void *param, const void *grad, void *param_out, int64_t n,
                 double lr, void *stream);

/* v = mu v + g; p -= lr (nesterov ? g + mu v : v), in double. */
int vq__cuda_momentum(int dtype, const void *param, const void *grad, const void *velocity,
                      void *param_out, void *velocity_out, int64_t n, double lr, double mu,
                      int nesterov, void *stream);

/* One Adam step in the parameter's precision, as adam_kernel: c1 = 1 -
 * beta1^t and c2 = 1 - beta2^t for t = step + 1, computed by the caller on
 * the host in double (pow), which also checks and advances the i64 step
 * (the CPU op reads it on the host; a GPU caller copies it back or keeps a
 * host copy). */
int vq__cuda_adam(int dtype, const void *param, const void *grad, const void *m1, const void *m2,
                  void *param_out, void *m1_out, void *m2_out, int64_t n, double lr,
                  double beta1, double beta2, double eps, double c1, double c2, void *stream);

/* ---- init (ops/cpu/init.c, ops/rng.c) ---- */

/* out[i] = value for f32 / f64 (value rounded to float for f32), ivalue for
 * i32 / i64 / bool (one byte). */
int vq__cuda_fill(int dtype, void *out, int64_t n, double value, int64_t ivalue, void *stream);

/* uniform_random with a = min, b = max - min; gaussian_random with a =
 * mean, b = std: element i from Philox4x32-10(counter i, key seed), the
 * formulas documented in ops/cpu/init.c. Uniform is bit for bit the CPU's;
 * gaussian's products and sums round as the CPU's, and its log and cos are
 * CUDA's (log within 1 ulp, cos within 2 of the exact value, as glibc's
 * are within 1): equal to the CPU's except where the two libraries round
 * differently (compare, do not assume, as init.c says). */
int vq__cuda_uniform(int dtype, void *out, int64_t n, double a, double b, uint64_t seed,
                     void *stream);
int vq__cuda_gaussian(int dtype, void *out, int64_t n, double a, double b, uint64_t seed,
                      void *stream);

/* ---- matmul (cuBLAS; ops/cpu/matmul.c) ---- */

/* out[b] = alpha * op(x[b]) op(y[b]) for b < batch, row-major: op(x) is
 * [m, k] (x stored [k, m] when tx), op(y) is [k, n] (y stored [n, k] when
 * ty), out [m, n]. y_shared: one y for every batch (matmul's 2-D Y). Runs
 * cublas{S,D}gemmStridedBatched on a cuBLAS handle kept per (device,
 * stream), created on first use (thread-safe) and bound to stream. Dims past
 * INT_MAX are VQ_EINVAL; a cuBLAS failure is VQ_EIO. In a build without
 * cuBLAS (VARQ_CUDA_NO_CUBLAS) it returns VQ_ENOSYS. */
int vq__cuda_matmul(int dtype, int tx, int ty, int64_t batch, int64_t m, int64_t n, int64_t k,
                    double alpha, const void *x, const void *y, int y_shared, void *out,
                    void *stream);

/* Destroys every cached cuBLAS handle (at shutdown, when no stream uses
 * them). */
void vq__cuda_blas_release(void);

#ifdef __cplusplus
}
#endif

/* ---- shared by the .cu files ---- */
#ifdef __CUDACC__
#include <cuda_runtime.h>

/* VQ_EIO if the last launch failed (clearing the error), else 0. */
static inline int vq__cuda_launched(void)
{
    return cudaGetLastError() == cudaSuccess ? 0 : VQ_EIO;
}

#define VQ__CUDA_THREADS 256

/* Blocks for a grid-stride loop over n elements (capped; the loop covers
 * the rest). */
static inline unsigned vq__cuda_blocks(int64_t n)
{
    int64_t b = (n + VQ__CUDA_THREADS - 1) / VQ__CUDA_THREADS;
    return (unsigned)(b > 65535 * 8 ? 65535 * 8 : b);
}

#define VQ__CUDA_STREAM(s) ((cudaStream_t)(s))
#endif

#endif
