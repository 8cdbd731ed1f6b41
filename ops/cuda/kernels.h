/* CUDA kernels for the op registry's GPU slot: C-callable launchers, one
 * family per kind of op, that the op families' host glue
 * (ops/cuda/<family>_host.c: vq__kcall -> launch) calls with the tensors'
 * device pointers and the op's params, and their dispatcher.
 * Built only when the CUDA toolkit is found (have_cuda: see
 * ops/cuda/meson.build); this header is plain C for the C side and
 * extern "C" for the .cu files.
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
 *    (cudaGetLastError; the CUDA error is then cleared, and its string kept
 *    for vq__cuda_last_error). Errors of the kernel's execution surface at the
 *    stream's next synchronization. No launcher sets vq_errmsg(): the
 *    caller words the message;
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

#include <stddef.h>
#include <stdint.h>

#include "../layout_shared.h" /* vq__pad_geom */
#include "../window_shared.h" /* vq__window */
#include "../vol_shared.h"    /* vq__vol */
#include "../resize_shared.h" /* vq__resize_geom */
#include "../scatter_shared.h" /* vq__elements_geom, vq__nd_geom */
#include "../lrn_shared.h"     /* vq__lrn_geom */
#include "../params.h"         /* vq__grid_sample_params, vq__roi_align_params */
#include "../einsum_shared.h"  /* vq__es_loop */
#include "../dynamic_shared.h" /* vq__unique_geom, vq__nms_problem */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the GPU kernel functions (ops/cuda/launch.c) ---- */

struct vq__kcall;
struct vq__cuda_launch;

/* The CUDA kernel of every op that has launches (its definition's GPU
 * slot): the launch prologue (the op's stream and device, made current),
 * then k->def->cuda, the op's launches (named by its definition: see
 * cuda_ops.h). */
int vq__cuda_run(const struct vq__kcall *k);

/* gpu.c's vq__gpu_check_finite on CUDA: after the call's kernels, the
 * first NaN or infinity of output j is found on the device and a host
 * function reads it and fails through k's defer hook. */
int vq__cuda_check_finite(const struct vq__kcall *k, int j, const char *var);

/* Why the calling thread's last launcher call that returned VQ_EIO failed:
 * CUDA's or cuBLAS's error string (static), for the caller's message; ""
 * before any failure. */
const char *vq__cuda_last_error(void);

/* ---- elementwise (ops/cpu/elementwise.c) ---- */

/* op for vq__cuda_binary and vq__cuda_binary_grad: params.h's
 * VQ__BINARY_* (elementwise_host.c checks that they agree). */
enum {
    VQ__CUDA_ADD = 0,
    VQ__CUDA_SUB = 1,
    VQ__CUDA_MUL = 2,
    VQ__CUDA_DIV = 3,
    VQ__CUDA_POW = 4,
    VQ__CUDA_MOD = 5,
    VQ__CUDA_FMOD = 6,
};

/* out = x op y with numpy broadcasting, for f32, f64, i32 and i64. The
 * broadcast is described as vq__bcast_init (tensor/broadcast.c) leaves it:
 * pass b.ndim, b.shape, b.stride[0], b.stride[1]. out is contiguous with
 * prod(shape) elements; xstride/ystride are per-dim strides in elements (0
 * where broadcast); ndim 0 is one element. Integers wrap; an integer
 * division by zero (or INT_MIN / -1), an integer mod or fmod by zero, or
 * integer 0 to a negative power (pow: elementwise.c's integer pow), writes 0 to that element and, if
 * bad_at is not NULL, records the element's index there with atomicMin:
 * *bad_at is a device unsigned long long the caller sets to UINT64_MAX
 * before the launch and reads after it (the smallest index is the element
 * the CPU op names in its error). */
int vq__cuda_binary(int op, int dtype, const void *x, const void *y, void *out, int ndim,
                    const int64_t *shape, const int64_t *xstride, const int64_t *ystride,
                    unsigned long long *bad_at, void *stream);

/* elementwise_grad, f32 and f64: dz (nz elements, contiguous in operand
 * wrt's shape) = d op(x, y) / d operand * g, summed over the dims along
 * which that operand was broadcast. ndim, shape, xstride and ystride
 * describe the broadcast of x and y to g's shape exactly as for
 * vq__cuda_binary; a dim along which the operand's stride is 0 is summed.
 * One thread per element of dz adds its terms in T in the order of g's
 * elements, starting from 0, as the CPU kernel does, so the result is the
 * CPU's bit for bit; add and sub with nothing summed write g (or -g)
 * itself, as the CPU's copy does. VQ_EINVAL if nz is not the product of the
 * operand's dims. */
int vq__cuda_binary_grad(int op, int wrt, int dtype, const void *g, const void *x, const void *y,
                         void *dz, int64_t nz, int ndim, const int64_t *shape,
                         const int64_t *xstride, const int64_t *ystride, void *stream);

/* out = scale * x + bias (f32: scale and bias rounded to float first, as
 * scale_kernel does). */
int vq__cuda_scale(int dtype, const void *x, void *out, int64_t n, double scale, double bias,
                   void *stream);

/* ---- predicates and selects (ops/cpu/compare.c; compare.cu) ---- */

/* op for vq__cuda_compare and minmax_grad's vq__cuda_sum_grad: params.h's
 * VQ__CMP_* (compare_host.c checks that they agree). */
enum {
    VQ__CUDA_LESS = 0, VQ__CUDA_LESS_EQUAL = 1, VQ__CUDA_GREATER = 2, VQ__CUDA_GREATER_EQUAL = 3,
    VQ__CUDA_EQUAL = 4, VQ__CUDA_NOT_EQUAL = 5, VQ__CUDA_AND = 6, VQ__CUDA_OR = 7,
    VQ__CUDA_MAXIMUM = 8, VQ__CUDA_MINIMUM = 9,
};

/* Up to three operands broadcast to an output of ndim dims: stride[k][d]
 * is operand k's stride along output dim d in elements (0 where it is
 * broadcast); the output is contiguous. ndim 0 is one element. */
typedef struct vq__cuda_walk {
    int ndim;
    int64_t shape[VQ_MAX_DIMS];
    int64_t stride[3][VQ_MAX_DIMS];
} vq__cuda_walk;

/* out = x op y over walk operands 0 (x) and 1 (y): comparisons (f32, f64,
 * i32, i64, bool; out bool), logical_and / _or (bool), maximum / minimum
 * (not bool; out x's dtype; a NaN wins). */
int vq__cuda_compare(int op, int dtype, const void *x, const void *y, void *out,
                     const vq__cuda_walk *w, void *stream);
/* out = !x over n bools. */
int vq__cuda_logical_not(const void *x, void *out, int64_t n, void *stream);
/* out = |x| (f32, f64, i32, i64; -0 gives +0, integers wrap). */
int vq__cuda_abs(int dtype, const void *x, void *out, int64_t n, void *stream);
/* dx = g * sign(x), 0 at 0 (f32, f64). */
int vq__cuda_abs_grad(int dtype, const void *g, const void *x, void *dx, int64_t n,
                      void *stream);
/* out = cond ? x : y over walk operands 0 (cond, bool), 1 (x), 2 (y), for
 * elements of size bytes (1, 4 or 8). */
int vq__cuda_where(size_t size, const void *cond, const void *x, const void *y, void *out,
                   const vq__cuda_walk *w, void *stream);
/* minmax_grad (op VQ__CUDA_MAXIMUM / _MINIMUM; p = x, q = y) and where_grad
 * (op -1; p = cond, q unused), f32 and f64: dz (nz elements, contiguous in
 * the shape of walk operand zsel, 1 or 2) = the sum over the dims along
 * which that operand is broadcast of g (walk operand 0, contiguous) where
 * the gradient flows to it, in the order of g's elements from 0, as the
 * CPU kernels add. VQ_EINVAL if nz is not the operand's element count. */
int vq__cuda_sum_grad(int op, int wrt, int dtype, const void *g, const void *p, const void *q,
                      void *dz, int64_t nz, const vq__cuda_walk *w, int zsel, void *stream);

/* ---- activations (ops/cpu/activation.c) ---- */

/* op for vq__cuda_unary / vq__cuda_unary_grad: params.h's VQ__ACT_*. */
enum {
    VQ__CUDA_RELU = 0,
    VQ__CUDA_SIGMOID = 1,
    VQ__CUDA_TANH = 2,
    VQ__CUDA_SILU = 3,
    VQ__CUDA_HARD_SIGMOID = 4,
    VQ__CUDA_HARD_SWISH = 5
};

/* out = relu / sigmoid / tanh / silu / hard_sigmoid / hard_swish of x;
 * alpha and beta are the hard ones' clamp(alpha x + beta, 0, 1). */
int vq__cuda_unary(int op, int dtype, const void *x, void *out, int64_t n, double alpha,
                   double beta, void *stream);

/* dx from y and the output's gradient g, y the forward output for relu
 * (g where y > 0), sigmoid (g y (1 - y)) and tanh (g (1 - y^2)), the
 * forward input for silu, hard_sigmoid and hard_swish. */
int vq__cuda_unary_grad(int op, int dtype, const void *y, const void *g, void *dx, int64_t n,
                        double alpha, double beta, void *stream);

/* ---- math (ops/cpu/math.c; math.cu) ---- */

/* op for vq__cuda_math / vq__cuda_math_grad: params.h's VQ__MATH_*. */
enum {
    VQ__CUDA_EXP = 0,
    VQ__CUDA_LOG = 1,
    VQ__CUDA_SQRT = 2,
    VQ__CUDA_RECIPROCAL = 3,
    VQ__CUDA_ERF = 4,
    VQ__CUDA_POWER = 5,
    VQ__CUDA_SIN = 6,
    VQ__CUDA_COS = 7,
    VQ__CUDA_TAN = 8,
    VQ__CUDA_ASIN = 9,
    VQ__CUDA_ACOS = 10,
    VQ__CUDA_ATAN = 11,
    VQ__CUDA_SINH = 12,
    VQ__CUDA_COSH = 13,
    VQ__CUDA_ASINH = 14,
    VQ__CUDA_ACOSH = 15,
    VQ__CUDA_ATANH = 16,
    VQ__CUDA_FLOOR = 17,
    VQ__CUDA_CEIL = 18,
    VQ__CUDA_ROUND = 19,
    VQ__CUDA_MATH_COUNT = 20,
};

/* out = op(x) (power: x^exponent). */
int vq__cuda_math(int op, int dtype, double exponent, const void *x, void *out, int64_t n,
                  void *stream);
/* dx from x, the output y and its gradient g, as math_grad on the CPU. */
int vq__cuda_math_grad(int op, int dtype, double exponent, const void *x, const void *y,
                       const void *g, void *dx, int64_t n, void *stream);
/* log_softmax along the middle of [outer, len, inner], and its gradient
 * from the output y: dx = g - exp(y) sum(g). */
int vq__cuda_log_softmax(int dtype, const void *x, void *out, int64_t outer, int64_t len,
                         int64_t inner, void *stream);
int vq__cuda_log_softmax_grad(int dtype, const void *y, const void *g, void *dx, int64_t outer,
                              int64_t len, int64_t inner, void *stream);

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

/* The executor's NaN check: *bad = the smallest index of a NaN or
 * infinity among x's n elements (f32, f64), by atomicMin (the caller sets
 * it to ULLONG_MAX first), then one thread writes that element's value,
 * as a double, to *value. */
int vq__cuda_find_nonfinite(int dtype, const void *x, int64_t n, unsigned long long *bad,
                            double *value, void *stream);

/* One thread: *label_out = label[*bad_row] when *bad_row is not UINT64_MAX
 * (the label the CPU op's message names), else nothing. All pointers are
 * device pointers; enqueue it after the loss launches that share bad_row. */
int vq__cuda_label_fetch(int label_dtype, const void *label, const unsigned long long *bad_row,
                         long long *label_out, void *stream);

/* out = (x - y)^2 elementwise, in T (f32, f64); may run in place. */
int vq__cuda_square_error(int dtype, const void *x, const void *y, void *out, int64_t n,
                          void *stream);

/* dz = two * (x - y) * g with two = +2 (wrt 0) or -2 (wrt 1), in T; may
 * run in place. */
int vq__cuda_square_error_grad(int wrt, int dtype, const void *x, const void *y, const void *g,
                               void *dz, int64_t n, void *stream);

/* *out = mean((x - y)^2) over n elements, the differences and the sum in
 * double (one block), then rounded to T; n == 0 writes 0 (the CPU op's
 * empty mean), so this launcher launches even then. */
int vq__cuda_mse(int dtype, const void *x, const void *y, void *out, int64_t n, void *stream);

/* dz = s * (x - y) with s = (T)(+-2 * g[0] / n) computed in double from
 * the scalar g (device memory) by every thread, as mse_grad_kernel does on
 * the host: the CPU's bits. May run in place: dz may be x or y, or g when
 * X is a scalar (n == 1: the one thread reads g before it writes). */
int vq__cuda_mse_grad(int wrt, int dtype, const void *x, const void *y, const void *g, void *dz,
                      int64_t n, void *stream);

/* ---- reductions (ops/cpu/reduce.c) ---- */

/* X seen as [outer, len, inner], reduced over len: out[o, i] = sum (or mean)
 * of x[o, :, i]. Sum over all elements: outer = inner = 1, len = numel;
 * along the last axis: inner = 1. f32 and f64 accumulate in double; sum
 * also takes i32 / i64, which wrap. The mean of len == 0 is NaN; with outer
 * * inner == 0 nothing is written. One block per output element. */
int vq__cuda_reduce(int mean, int dtype, const void *x, void *out, int64_t outer, int64_t len,
                    int64_t inner, void *stream);

/* sum / mean of X (ndim dims, shape) over any set of its axes: bit d of
 * mask set reduces dim d. Out holds the kept dims in X's order (keepdim
 * adds only 1s, which change nothing here). Dims of size 1 are dropped and
 * neighbouring dims that are both reduced or both kept are merged; one
 * reduced run left is vq__cuda_reduce's [outer, len, inner], more take a
 * kernel with one block per output element whose threads walk the reduced
 * index space mixed-radix. Accumulation and dtypes as vq__cuda_reduce: the
 * float results match the CPU's to rounding (a tree of double sums instead
 * of rows added in order), the integer ones bit for bit. */
int vq__cuda_reduce_axes(int mean, int dtype, const void *x, void *out, int ndim,
                         const int64_t *shape, unsigned mask, void *stream);

/* sum_grad / mean_grad, f32 and f64: dx (X's shape: ndim, shape) = g
 * broadcast over the axes in mask, times 1 / (X's elements / g's) for
 * mean, as (T)(g * scale) in double: the CPU's bits. One thread per
 * element of dx. */
int vq__cuda_reduce_axes_grad(int mean, int dtype, const void *g, void *dx, int ndim,
                              const int64_t *shape, unsigned mask, void *stream);

/* ---- optimizers (ops/cpu/optim.c) ---- */

/* param_out = param - lr * grad, in double. lr_dev: NULL, or the device
 * address of the learning rate (one element of dtype), read when the
 * kernel runs in place of lr. */
int vq__cuda_sgd(int dtype, const void *param, const void *grad, void *param_out, int64_t n,
                 double lr, const void *lr_dev, void *stream);

/* v = mu v + g; p -= lr (nesterov ? g + mu v : v), in double; lr_dev as
 * vq__cuda_sgd's. */
int vq__cuda_momentum(int dtype, const void *param, const void *grad, const void *velocity,
                      void *param_out, void *velocity_out, int64_t n, double lr,
                      const void *lr_dev, double mu, int nesterov, void *stream);

/* The constants of one Adam step that depend on the step count t = step +
 * 1, in device memory: step_size = lr / c1 and inv_sqrt_c2 = 1 / sqrt(c2)
 * with c1 = 1 - beta1^t, c2 = 1 - beta2^t, all in double as the CPU op
 * computes them (the kernel rounds them to the parameter's dtype, as
 * adam_kernel does). ok == 0 (a bad step count) makes the kernel write
 * nothing, as the CPU op fails before writing. Who computes them, and
 * when, is the caller's: optim_host.c does it on the host in stream order (see
 * adam_gpu there). */
typedef struct vq__cuda_adam_consts {
    double step_size, inv_sqrt_c2;
    long long ok;
} vq__cuda_adam_consts;

/* One Adam step in the parameter's precision, as adam_kernel, with consts
 * read on the device when the kernel runs. */
int vq__cuda_adam(int dtype, const void *param, const void *grad, const void *m1, const void *m2,
                  void *param_out, void *m1_out, void *m2_out, int64_t n, double beta1,
                  double beta2, double eps, const vq__cuda_adam_consts *consts, void *stream);

/* ---- init (ops/cpu/init.c, ops/rng_shared.h) ---- */

/* out[i] = value for f32 / f64 (value rounded to float for f32), ivalue for
 * i32 / i64 / bool (one byte). */
int vq__cuda_fill(int dtype, void *out, int64_t n, double value, int64_t ivalue, void *stream);

/* uniform_random with a = min, b = max - min; gaussian_random with a =
 * mean, b = std: element i from Philox4x32-10(counter base + i, key), the
 * formulas documented in ops/cpu/init.c, where (key, base) is (state[0],
 * state[1]) read on the device when the kernel runs if state (an i64 [2]
 * in device memory) is not NULL, else (seed, 0): seed is the key of a
 * call without State (its seed attribute, or the default generator's key,
 * vq__kcall.rng). Uniform is bit for bit
 * the CPU's; gaussian's products and sums round as the CPU's, and its log
 * and cos are CUDA's (log within 1 ulp, cos within 2 of the exact value,
 * as glibc's are within 1): equal to the CPU's except where the two
 * libraries round differently (compare, do not assume, as init.c says).
 * The state is only read: vq__cuda_rng_advance writes StateOut after. */
int vq__cuda_uniform(int dtype, void *out, int64_t n, double a, double b, uint64_t seed,
                     const void *state, void *stream);
int vq__cuda_gaussian(int dtype, void *out, int64_t n, double a, double b, uint64_t seed,
                      const void *state, void *stream);

/* dropout, init.c's formula: out[i] = x[i] * mask[i], mask[i] = scale
 * (rounded to dtype) where the uniform draw of element i (state or seed
 * as above) is >= p, else 0; is_test: out = x, mask = 1. out or mask may
 * be x. */
int vq__cuda_dropout(int dtype, const void *x, void *out, void *mask, int64_t n, double p,
                     double scale, int is_test, uint64_t seed, const void *state, void *stream);

/* state_out = (state[0], state[1] + n) (i64 [2], device memory, modulo
 * 2^64), by one thread, read and written when it runs: enqueued after the
 * kernels that read state, it may overwrite it in place. */
int vq__cuda_rng_advance(const void *state, void *state_out, uint64_t n, void *stream);

/* ---- shape ops (ops/cpu/shape.c) ---- */

/* Copies a box of elements of esize bytes (1, 4 or 8): element (i0, i1,
 * ...) of the box, shape[ndim], is read at src + sum i_d * src_stride[d]
 * and written at dst + sum i_d * dst_stride[d] (strides in elements; dst
 * and src point at the box's first element). Dims of size 1 are dropped
 * and dims that stay contiguous on both sides merged first, as shape.c's
 * block_copy does; a box contiguous on both sides is one
 * cudaMemcpyAsync. transpose, concat, slice and their gradients are all
 * this copy. Pure moves: the CPU's bits. */
int vq__cuda_strided_copy(int esize, void *dst, const void *src, int ndim, const int64_t *shape,
                          const int64_t *dst_stride, const int64_t *src_stride, void *stream);

/* n elements of dtype from (VQ_*, all five) converted to dtype to, with
 * shape.c's rules: float to integer truncates toward zero and saturates
 * (NaN gives 0), integer to narrower integer wraps, anything to bool is x
 * != 0, f64 to f32 rounds to nearest (overflowing to +-inf). Equal dtypes
 * copy. The conversions are IEEE and exact where the CPU's are: the CPU's
 * bits (NaN payloads aside). */
int vq__cuda_cast(int from, int to, const void *x, void *out, int64_t n, void *stream);

/* ---- matmul (cuBLAS; ops/cpu/matmul.c) ---- */

/* out[b] = alpha * op(x[b]) op(y[b]) + beta * out[b] for b < batch,
 * row-major: op(x) is [m, k] (x stored [k, m] when tx), op(y) is [k, n] (y
 * stored [n, k] when ty), out [m, n]. x_shared / y_shared: one x (one y)
 * for every batch (matmul's 2-D Y; matmul_grad's shared operands). beta is
 * 0 (out is not read) or 1 (accumulate: matmul_grad's sum over batches).
 * Runs cublas{S,D}gemmStridedBatched on a cuBLAS handle kept per (device,
 * stream), created on first use (thread-safe) and bound to stream; k == 0
 * writes beta * out, i.e. zeros for beta 0. Dims past INT_MAX are
 * VQ_EINVAL; a cuBLAS failure is VQ_EIO. Where cuBLAS cannot be loaded
 * (vq__cuda_blas_load), or in a build without it (VARQ_CUDA_NO_CUBLAS),
 * it returns VQ_ENOSYS with the reason as vq__cuda_last_error. */
int vq__cuda_matmul(int dtype, int tx, int ty, int64_t batch, int64_t m, int64_t n, int64_t k,
                    double alpha, const void *x, int x_shared, const void *y, int y_shared,
                    double beta, void *out, void *stream);

/* C (m x n, rows ldc apart) = alpha op(A) op(B) + beta C, row-major as
 * vq__gemm_ldc (ops_internal.h) takes it: op(A) is [m, k] (A stored [k,
 * m] when ta), op(B) [k, n] (B stored [n, k] when tb), lda and ldb the
 * stored rows' strides. beta 0 (C not read) or 1. One cuBLAS product on
 * the stream's handle, as vq__cuda_matmul; k == 0 writes beta * C. Dims
 * or strides past INT_MAX, or ldc < n, are VQ_EINVAL; the errors
 * otherwise are vq__cuda_matmul's. */
int vq__cuda_gemm(int dtype, int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha,
                  const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                  int64_t ldc, void *stream);

/* Destroys every cached cuBLAS handle (at shutdown, when no stream uses
 * them). */
void vq__cuda_blas_release(void);

/* Opens cuBLAS (dlopen, not linked: matmul.cu says why) and resolves the
 * functions matmul calls; the first call does the work, under a lock, and
 * later calls return its outcome. 0, or VQ_ENOSYS with the reason (the
 * library or a function not found, or a build without cuBLAS) kept as
 * the calling thread's vq__cuda_last_error. Needs no GPU. Thread-safe. */
int vq__cuda_blas_load(void);

/* ---- convolutions and pools (ops/cpu/conv.c, ops/cpu/pool.c; conv.cu) ---- */

/* The geometry w is ops/window_shared.h's vq__window, whose rules the CPU
 * kernels share; a window with a negative size, a kernel, stride or
 * dilation below 1 or a negative pad is VQ_EINVAL. conv2d is im2col, then
 * vq__cuda_matmul per image (a batch of one product per group), then the
 * bias; its gradients are products and col2im. */

/* col [c * kh * kw, oh * ow] from one image x [c, h, w] (c = w->c, every
 * channel; w->n is not read): row (ch, i, j) holds tap (i, j) of every
 * window, 0 in the padding. One thread per entry of col. */
int vq__cuda_im2col(int dtype, const void *x, void *col, const vq__window *w, void *stream);

/* x [c, h, w] = for each element, the sum of the entries of col whose tap
 * read it, in the order of the taps, from 0: conv_grad.c's col2im into a
 * zeroed image, bit for bit. Writes every element of x; one thread per
 * element of x. */
int vq__cuda_col2im(int dtype, const void *col, void *x, const vq__window *w, void *stream);

/* conv3d (ops/cpu/conv3d.c; conv3d.cu), with v ops/vol_shared.h's
 * geometry (its plane and vol are recomputed from the dims; a negative
 * size, a kernel, stride or dilation below 1 or a negative pad is
 * VQ_EINVAL). col [channels * kd * kh * kw, od * oh * ow] from one image's
 * channels x [channels, d, h, w]: entry (row, col) is what vq__vol_tap
 * reads, 0 in the padding; one thread per entry of col. */
int vq__cuda_vol2col(int dtype, const void *x, void *col, const vq__vol *v, int64_t channels,
                     void *stream);

/* x [channels, d, h, w] = for each element, vq__vol_gather: the entries
 * of col that read it, in the order of the taps, from 0 (conv3d.c's
 * col2vol, bit for bit); writes every element; one thread per element. */
int vq__cuda_col2vol(int dtype, const void *col, void *x, const vq__vol *v, int64_t channels,
                     void *stream);

/* out [n, m, plane] += b[m] (conv2d's bias). */
int vq__cuda_bias_add(int dtype, void *out, const void *b, int64_t n, int64_t m, int64_t plane,
                      void *stream);

/* conv2d's fused clip (ops/cpu/conv.c): out[i] = min(max(out[i], lo), hi)
 * with maximum's and minimum's results (NaN stays). */
int vq__cuda_clip(int dtype, void *out, int64_t n, double lo, double hi, void *stream);

/* conv2d_grad with clip: m[i] = g[i] where lo < out[i] < hi, else 0. */
int vq__cuda_clip_mask(int dtype, const void *g, const void *out, void *m, int64_t n, double lo,
                       double hi, void *stream);

/* max_pool2d: out [n, c, oh, ow] = the element vq__window_argmax finds in
 * each window of x [n, c, h, w], -inf for a window wholly in the padding.
 * One thread per output. The CPU's bits. */
int vq__cuda_max_pool(int dtype, const void *x, void *out, const vq__window *w, void *stream);
/* max_pool2d_argmax: out [n, c, oh, ow] (i64) = the flat index in x of
 * the element vq__window_argmax finds (its plane's (w, h) order when
 * column_major), as ops/cpu/pool.c. */
int vq__cuda_max_pool_argmax(int dtype, const void *x, int64_t *out, const vq__window *w,
                             bool column_major, void *stream);

/* max_pool2d_grad: dx [n, c, h, w] = for each element, the sum of g over
 * the windows whose maximum it is, in the order of the outputs, as
 * pool.c adds them: the CPU's bits. One thread per element of dx. */
int vq__cuda_max_pool_grad(int dtype, const void *x, const void *g, void *dx,
                           const vq__window *w, void *stream);

/* avg_pool2d (no dilation: w->dh = w->dw = 1): out = the sum of each
 * window's taps on the input, in double, over vq__window_avg_count. One
 * thread per output: the CPU's sums in the CPU's order. */
int vq__cuda_avg_pool(int dtype, const void *x, void *out, const vq__window *w,
                      int count_include_pad, void *stream);

/* avg_pool2d_grad: dx = for each element, the sum over the windows that
 * hold it of (T)(g / divisor), in the order of the outputs, as pool.c
 * adds them. One thread per element of dx. */
int vq__cuda_avg_pool_grad(int dtype, const void *g, void *dx, const vq__window *w,
                           int count_include_pad, void *stream);

/* ---- batch_norm (ops/cpu/norm.c; conv.cu) ---- */

/* X [outer, c, inner]: out = (x - mean) * a + bias per channel, with a =
 * scale * (1 / sqrt(var + eps)), in double as norm.c computes it: the
 * CPU's bits. May run in place (out == x). */
int vq__cuda_batch_norm(int dtype, const void *x, const void *scale, const void *bias,
                        const void *mean, const void *var, void *out, int64_t outer, int64_t c,
                        int64_t inner, double eps, void *stream);

/* batch_norm_grad with wrt (0 X, 1 Scale, 2 Bias, 3 Mean, 4 Var; norm.c's
 * formulas): wrt 0 writes dz [outer, c, inner] = g * a elementwise (the
 * CPU's bits); the others write dz [c] from the channel's sums of g and of
 * g (x - mean), one block per channel, a tree of double sums (the CPU's
 * to rounding). */
int vq__cuda_batch_norm_grad(int wrt, int dtype, const void *x, const void *scale,
                             const void *mean, const void *var, const void *g, void *dz,
                             int64_t outer, int64_t c, int64_t inner, double eps, void *stream);

/* batch_norm_train (norm.c's formulas), one block per channel: the
 * channel's moments as trees of double sums (the CPU's to rounding), then
 * nmean, nvar [c] and out [outer, c, inner] (which may be x, as nmean may
 * be mean and nvar var). */
int vq__cuda_batch_norm_train(int dtype, const void *x, const void *scale, const void *bias,
                              const void *mean, const void *var, void *out, void *nmean, void *nvar,
                              int64_t outer, int64_t c, int64_t inner, double eps, double mom,
                              void *stream);

/* batch_norm_train_grad with wrt (0 X, 1 Scale, 2 Bias), one block per
 * channel: g (dOut), gm (dNewMean) and gv (dNewVar) may each be NULL, a
 * gradient that does not flow. */
int vq__cuda_batch_norm_train_grad(int wrt, int dtype, const void *x, const void *scale,
                                   const void *g, const void *gm, const void *gv, void *dz,
                                   int64_t outer, int64_t c, int64_t inner, double eps, double mom,
                                   void *stream);

/* ---- indexing, extrema, layout (ops/cpu/index.c, extremum.c, layout.c;
 * index.cu) ---- */

/* op for the extrema launchers: params.h's VQ__EXTREMUM_*
 * (extremum_host.c checks that they agree). */
enum { VQ__CUDA_EXTREMUM_MAX = 0, VQ__CUDA_EXTREMUM_MIN = 1 };

/* Records in *bad_at, with atomicMin, the smallest j < n whose index
 * idx[j] (index_dtype VQ_I32 or VQ_I64) is outside [-dim, dim). The caller
 * sets *bad_at to UINT64_MAX before (as for the class losses' bad_row) and
 * fetches the index there with vq__cuda_label_fetch, for the CPU op's
 * message. One thread per index. */
int vq__cuda_index_check(int index_dtype, const void *idx, int64_t n, int64_t dim,
                         unsigned long long *bad_at, void *stream);

/* The same for the range [lo, hi) (reverse_sequence's lengths,
 * max_unpool2d's indices): the smallest j < n with idx[j] outside it. */
int vq__cuda_range_check(int index_dtype, const void *idx, int64_t n, int64_t lo, int64_t hi,
                         unsigned long long *bad_at, void *stream);

/* gather: x [outer, dim, inner] of elements of esize bytes (1, 4 or 8),
 * out [outer, n, inner]: row (o, j) of out is row (o, idx[j]) of x, a
 * negative index counting from the end; a row of a bad index is written
 * as zero bytes (vq__cuda_index_check reports it). One thread per element
 * of out. The CPU's bits. */
int vq__cuda_gather(int esize, int index_dtype, const void *x, const void *idx, void *out,
                    int64_t outer, int64_t dim, int64_t inner, int64_t n, void *stream);

/* gather_grad, f32 and f64: dx [outer, dim, inner] = zeros, then row (o, j)
 * of g [outer, n, inner] added at row (o, idx[j]) with atomicAdd (rows of
 * bad indices skipped). The adds happen in no fixed order: equal to the
 * CPU's sums to rounding, and bit for bit where no row is picked twice. */
int vq__cuda_gather_grad(int dtype, int index_dtype, const void *idx, const void *g, void *dx,
                         int64_t outer, int64_t dim, int64_t inner, int64_t n, void *stream);

/* gather_elements: out (ndim dims, ishape, Indices' shape) of elements of
 * esize bytes (1, 4 or 8) from x (xshape): out's element at coordinates c
 * is x's at c with c[axis] replaced by idx's element there, a negative
 * index counting from the end; a bad index's element is written as zero
 * bytes (vq__cuda_index_check reports it). One thread per element of out.
 * The CPU's bits. */
int vq__cuda_gather_elements(int esize, int index_dtype, const void *x, const void *idx, void *out,
                             int ndim, const int64_t *xshape, const int64_t *ishape, int axis,
                             void *stream);

/* gather_elements_grad, f32 and f64: dx (xshape) = zeros, then each element
 * of g (ishape) added with atomicAdd at the element of x it was read from
 * (bad indices skipped): equal to the CPU's sums to rounding, bit for bit
 * where no element is read twice. */
int vq__cuda_gather_elements_grad(int dtype, int index_dtype, const void *idx, const void *g,
                                  void *dx, int ndim, const int64_t *xshape, const int64_t *ishape,
                                  int axis, void *stream);

/* argmax / argmin (op) along the middle of x [outer, len, inner] (f32,
 * f64, i32, i64; len >= 1): out (i64) [outer, inner] = the position
 * extremum.c's rules pick (NaN wins; ties to the first, or the last when
 * last is set). One thread per output, scanning in order: the CPU's
 * result. */
int vq__cuda_arg_extremum(int op, int last, int dtype, const void *x, int64_t *out,
                          int64_t outer, int64_t len, int64_t inner, void *stream);

/* reduce_max / reduce_min (op) of x (ndim dims, shape; f32, f64, i32, i64)
 * over the axes whose bit is set in mask, out holding the kept dims in X's
 * order. One block per output element, a tree of extremum.c's comparisons
 * (NaN propagates; max prefers +0 to -0, min -0 to +0), whose result the
 * order of the comparisons does not change: the CPU's (NaN payloads
 * aside). An empty set gives -inf / +inf, or the integer dtype's lowest /
 * highest value. */
int vq__cuda_reduce_extremum(int op, int dtype, const void *x, void *out, int ndim,
                             const int64_t *shape, unsigned mask, void *stream);

/* reduce_minmax_grad, f32 and f64: dx (X's shape) = g / k at the elements
 * equal to their extremum m (NaN equal to a NaN m), k the number of such
 * elements in the set, and 0 elsewhere, in T as extremum.c computes it:
 * the CPU's bits. One block per output element: the count, then dx. */
int vq__cuda_reduce_extremum_grad(int dtype, const void *x, const void *m, const void *g,
                                  void *dx, int ndim, const int64_t *shape, unsigned mask,
                                  void *stream);

/* tile: out (ndim dims, oshape) of elements of esize bytes; out's
 * coordinate c along dim d reads x's (xshape) c mod xshape[d]. One thread
 * per element of out. The CPU's bits. (expand is vq__cuda_strided_copy
 * with source strides 0 along the broadcast dims.) */
int vq__cuda_tile(int esize, const void *x, void *out, int ndim, const int64_t *xshape,
                  const int64_t *oshape, void *stream);

/* tile_grad, f32 and f64: dx (xshape) = for each element, the sum of g
 * (gshape) over the tiles, added in T from 0 in the order of g's elements,
 * as layout.c adds them: the CPU's bits. One thread per element of dx. */
int vq__cuda_tile_grad(int dtype, const void *g, void *dx, int ndim, const int64_t *xshape,
                       const int64_t *gshape, void *stream);

/* pad (all five dtypes): out = x cropped and padded as geo says
 * (ops/layout_shared.h: geo->xshape is x's shape, geo->oshape out's), the
 * constant where constant mode reads no element: value for f32 (rounded
 * to float) and f64, ivalue for i32, i64 and bool (ivalue != 0). One
 * thread per element of out. The CPU's bits. */
int vq__cuda_pad(int dtype, const void *x, void *out, const vq__pad_geom *geo, double value,
                 int64_t ivalue, void *stream);

/* pad_grad, f32 and f64: dx (geo->xshape) = for each element, the sum of g
 * (geo->oshape) over the outputs that read it (vq__pad_readers), added in
 * T from 0 in the order of g's elements, as layout.c adds them: the CPU's
 * bits; 0 for cropped elements. One thread per element of dx. */
int vq__cuda_pad_grad(int dtype, const void *g, void *dx, const vq__pad_geom *geo,
                      void *stream);

/* resize (ops/cpu/resize.c, ops/resize_shared.h's rules): out
 * (geo->oshape) from x (geo->xshape). Nearest mode copies elements (all
 * five dtypes); linear and cubic (f32, f64) sum in double. An extrapolated
 * element (tf_crop_and_resize) is value for f32 (rounded to float) and
 * f64, ivalue for i32, i64 and bool (ivalue != 0). One thread per element
 * of out. The CPU's bits. */
int vq__cuda_resize(int dtype, const void *x, void *out, const vq__resize_geom *geo, double value,
                    int64_t ivalue, void *stream);

/* resize_grad, f32 and f64: dx (geo->xshape) = zeros, then each element of
 * g (geo->oshape) times its taps' weight products added with atomicAdd at
 * their elements of dx: equal to the CPU's sums to rounding. */
int vq__cuda_resize_grad(int dtype, const void *g, void *dx, const vq__resize_geom *geo,
                         void *stream);

/* cumsum (ops/cpu/cumsum.c), f32, f64, i32 and i64 (integers wrap): out
 * [outer, len, inner] = the running sums of x along the middle dim,
 * exclusive and reverse as the CPU's; one thread per lane, adding in the
 * CPU's order: the CPU's bits. */
int vq__cuda_cumsum(int dtype, const void *x, void *out, int64_t outer, int64_t len, int64_t inner,
                    int exclusive, int reverse, void *stream);

/* ---- recurrent layers (ops/cpu/rnn.c; rnn.cu), f32 and f64 ---- */

/* cell: params.h's VQ__RNN_*. The biases a step adds, folded as rnn.c's
 * fold_biases: bx[GH + H] = bias_ih + bias_hh for the gates both sides
 * add (gru: r and z; the n part bias_ih's alone), then gru's b_hn; bi and
 * bh may be NULL (no biases: zeros). f32 adds in float, as the CPU. */
int vq__cuda_rnn_bias(int dtype, int cell, int64_t H, int64_t GH, const void *bi, const void *bh,
                      void *bx, void *stream);

/* One step of nb batch rows, rnn.c's lstm_step, gru_step or plain_step
 * element by element (one thread each, the CPU's order): xp and hp the
 * input and hidden projections (rows G*H apart), bx the folded biases
 * (gru's b_hn at bx + 3H), prev the previous c (lstm) or h (gru; rows ldp
 * apart; NULL: zeros; lstm's may be cur + 4H: each element is read before
 * it is written), cur the saved cells (rows sv apart; not read or written
 * by rnn), h the new state (rows ldh apart). */
int vq__cuda_rnn_step(int dtype, int cell, int64_t nb, int64_t H, const void *xp, const void *hp,
                      const void *bx, const void *prev, int64_t ldp, void *cur, int64_t sv, void *h,
                      int64_t ldh, void *stream);

/* One step backwards: dh [nb, H] (the gradient into h_t) plus dy's rows
 * (ldy apart; NULL: none), then rnn.c's lstm_back (cur, sv, prev: c_{t-1}
 * rows ldp apart or NULL; dc updated; the gates into dgx), gru_back (prev:
 * h_{t-1}; dgx and dgh; dh becomes dh z) or plain_back (hout: h_t, rows
 * ldo apart; dgx). lstm and rnn leave dh with dy added (the product that
 * follows overwrites it). */
int vq__cuda_rnn_back(int dtype, int cell, int64_t nb, int64_t H, const void *dy, int64_t ldy,
                      const void *cur, int64_t sv, const void *prev, int64_t ldp, const void *hout,
                      int64_t ldo, void *dh, void *dc, void *dgx, void *dgh, void *stream);

/* dst[j] = the sum of the n rows of src [n, m] at column j, from 0 in
 * row order (rnn.c's col_sums: the CPU's bits); one thread per column. */
int vq__cuda_rnn_col_sums(int dtype, int64_t n, int64_t m, const void *src, void *dst,
                          void *stream);

/* max_unpool2d and max_unpool2d_grad (ops/cpu/unpool.c), f32 and f64
 * values, i32 or i64 indices, n of them (x's and dx's elements) into nout
 * places of out (g's elements): owner (nout of them, the caller's
 * scratch) first gets, for each place, 1 + the last i whose idx[i] is
 * there (0: none; an index outside [0, nout) is skipped, the range check
 * reports it); then out = owner ? x[owner - 1] : 0, and dx[i] =
 * g[idx[i]] where owner there is i + 1, else 0: the CPU's bits. */
int vq__cuda_max_unpool(int dtype, int index_dtype, const void *x, const void *idx, void *out,
                        unsigned long long *owner, int64_t n, int64_t nout, void *stream);
int vq__cuda_max_unpool_grad(int dtype, int index_dtype, const void *idx, const void *g, void *dx,
                             unsigned long long *owner, int64_t n, int64_t nout, void *stream);

/* dft (ops/cpu/dft.c), f32 and f64: x [outer, len, inner, parts] (parts
 * 1: real, 2: complex) to out [outer, nout, inner, 2]: out's bin k of
 * each line is sum_j<min(len, n) x[j] exp(sign 2 pi i (j k mod n) / n)
 * times scale, in double, one thread per bin: the CPU's to rounding. */
int vq__cuda_dft(int dtype, const void *x, void *out, int64_t outer, int64_t len, int64_t inner,
                 int64_t parts, int64_t n, int64_t nout, int inverse, void *stream);

/* range (ops/cpu/shape_value.c), f32, f64, i32, i64: out[i] = start +
 * i * delta for i < n (istart, idelta for the integers), the CPU's
 * expression in the CPU's dtype: its bits. */
int vq__cuda_range(int dtype, void *out, int64_t n, double start, double delta, int64_t istart,
                   int64_t idelta, void *stream);
/* ---- scatter_elements, scatter_nd, gather_nd (ops/cpu/scatter.c) ---- */

/* vq__cuda_index_check for the index tuples of scatter_nd and gather_nd:
 * the smallest j < n whose index idx[j] is outside [-dim, dim), dim =
 * geo->dim[j % geo->k] (the dim that tuple entry indexes). */
int vq__cuda_index_nd_check(int index_dtype, const void *idx, int64_t n, const vq__nd_geom *geo,
                            unsigned long long *bad_at, void *stream);

/* scatter_elements: out = x (nx elements, copied on the stream), then each
 * element of upd lands on out as geo and reduction (scatter_shared.h's
 * VQ__SCATTER_*) say; dtype f32, f64, i32, i64, or bool with reduction
 * none; bad indices skipped (vq__cuda_index_check reports them). One
 * thread per lane of geo, its elements in order: the CPU's bits, the
 * last of duplicate indices winning with reduction none. */
int vq__cuda_scatter_elements(int dtype, int index_dtype, int reduction, const void *x,
                              const void *idx, const void *upd, void *out, int64_t nx,
                              const vq__elements_geom *geo, void *stream);

/* scatter_nd: out = x (nx elements), then each slice of upd lands on the
 * slice of out its index tuple addresses (geo), combined as reduction
 * says; dtypes as scatter_elements'; bad tuples skipped. One thread per
 * batch and position in the slice, the tuples in order: the CPU's bits. */
int vq__cuda_scatter_nd(int dtype, int index_dtype, int reduction, const void *x, const void *idx,
                        const void *upd, void *out, int64_t nx, const vq__nd_geom *geo,
                        void *stream);

/* gather_nd: out's slice t (elements of esize bytes: 1, 4 or 8) is x's
 * slice that index tuple t addresses (geo); a bad tuple's slice is zero
 * bytes. One thread per element of out. The CPU's bits. */
int vq__cuda_gather_nd(int esize, int index_dtype, const void *x, const void *idx, void *out,
                       const vq__nd_geom *geo, void *stream);
/* grid_sample (ops/cpu/sample.c, ops/sample_shared.h's rules), f32 and
 * f64: x [n, c, h, w], grid [n, np, 2] (np output points per batch entry),
 * out [n, c, np]; one thread per grid point, over the channels. The CPU's
 * bits. */
int vq__cuda_grid_sample(int dtype, const void *x, const void *grid, void *out, int64_t n,
                         int64_t c, int64_t h, int64_t w, int64_t np,
                         const vq__grid_sample_params *p, void *stream);

/* grid_sample_grad, the same dims, dout [n, c, np]: p->wrt 0, d (x's
 * shape) = zeros, then what each point adds at its taps (channel by
 * channel) with atomicAdd: the CPU's sums to rounding; p->wrt 1, d
 * [n, np, 2] = each point's derivative, one thread per point summing the
 * channels in the CPU's order: the CPU's bits. */
int vq__cuda_grid_sample_grad(int dtype, const void *x, const void *grid, const void *dout, void *d,
                              int64_t n, int64_t c, int64_t h, int64_t w, int64_t np,
                              const vq__grid_sample_params *p, void *stream);

/* roi_align (ops/cpu/sample.c), f32 and f64: x [n, c, h, w], rois
 * [nroi, 4], batch [nroi] (batch_dtype VQ_I32 or VQ_I64), out
 * [nroi, c, p->oh, p->ow]; one thread per element of out: the CPU's bits.
 * A RoI whose batch index is outside [0, n) gets zeros, and the smallest
 * such RoI goes to *bad_row (atomicMin; reset to all ones by the caller;
 * vq__cuda_label_fetch reads its index). */
int vq__cuda_roi_align(int dtype, int batch_dtype, const void *x, const void *rois,
                       const void *batch, void *out, int64_t n, int64_t c, int64_t h, int64_t w,
                       int64_t nroi, const vq__roi_align_params *p, unsigned long long *bad_row,
                       void *stream);

/* roi_align_grad (avg), the same dims, dout [nroi, c, p->oh, p->ow]: dx
 * = zeros, then each bin's sampling points' taps' shares added with
 * atomicAdd (the CPU's sums to rounding); bad batch indices as roi_align's
 * (their RoIs add nothing). */
int vq__cuda_roi_align_grad(int dtype, int batch_dtype, const void *rois, const void *batch,
                            const void *dout, void *dx, int64_t n, int64_t c, int64_t h, int64_t w,
                            int64_t nroi, const vq__roi_align_params *p,
                            unsigned long long *bad_row, void *stream);

/* reduce_prod (ops/cpu/prod.c), f32, f64, i32 and i64: out (X's kept
 * dims) = the product of each group of x (ndim dims, shape; bit d of mask
 * reduces dim d) in X's order, in double for floats and wrapping unsigned
 * for integers. One thread per element of out. The CPU's bits. */
int vq__cuda_reduce_prod(int dtype, const void *x, void *out, int ndim, const int64_t *shape,
                         unsigned mask, void *stream);

/* reduce_prod_grad, f32 and f64: dx (X's shape) = g times the product of
 * the other elements of each element's group (prod.c's rule for zeros);
 * scratch holds 2 doubles per element of g (each group's product of
 * nonzero elements and count of zeros). The CPU's bits. */
int vq__cuda_reduce_prod_grad(int dtype, const void *x, const void *g, void *dx, double *scratch,
                              int ndim, const int64_t *shape, unsigned mask, void *stream);

/* lrn and lrn_grad (ops/cpu/lrn.c), f32 and f64: out ([n, g->c,
 * g->inner]) = lrn of x, or (dy not NULL) its gradient given dOut dy; one
 * thread per element with ops/lrn_shared.h's functions, as the CPU's. */
int vq__cuda_lrn(int dtype, const void *x, const void *dy, void *out, int64_t n,
                 const vq__lrn_geom *g, void *stream);

/* reverse_sequence (ops/cpu/sequence.c): out = x ([d0, d1, inner],
 * elements of esize bytes: 1, 4 or 8) with the first lens[b] steps of each
 * batch entry b reversed in time (batch_axis 1: x is [T, B, inner]; 0:
 * [B, T, inner]); lens (len_dtype VQ_I32 or VQ_I64) outside [0, T]
 * reverse nothing (vq__cuda_range_check reports them). One thread per
 * element. The CPU's bytes. */
int vq__cuda_reverse_sequence(int esize, int len_dtype, const void *x, const void *lens, void *out,
                              int64_t d0, int64_t d1, int64_t inner, int batch_axis, void *stream);
/* einsum's loop step (ops/cpu/einsum.c, ops/einsum_shared.h), f32, f64,
 * i32 and i64 (integers wrap): out (lp's output strides) = for each output
 * element, the sum over lp's summed labels of a (times b when lp->nop is
 * 2), in T from 0 in the CPU's order, or the product itself with nothing
 * summed. One thread per output element. The CPU's bits. */
/* det and det_grad (ops/cpu/det.c), f32 and f64, batch matrices of n x n:
 * one thread per matrix runs ops/linalg_shared.h's LU (det: out[b]) or
 * cofactors times g[b] (det_grad: dx) in double on its slice of scratch
 * (det: n^2 + n doubles per matrix; det_grad: 4 n^2 + 2 n). The CPU's
 * bits. */
int vq__cuda_det(int dtype, const void *x, void *out, double *scratch, int64_t batch, int64_t n,
                 void *stream);
int vq__cuda_det_grad(int dtype, const void *x, const void *g, void *dx, double *scratch,
                      int64_t batch, int64_t n, void *stream);

/* tfidf_vectorizer (ops/cpu/tfidf.c): a thread per row of x ([rows, C],
 * i32 or i64) counts the pool's n-grams into out ([rows, size], f32), then
 * applies mode (0 TF, 1 IDF, 2 TFIDF) with w (NULL: 1 each). */
int vq__cuda_tfidf(int dtype, const void *x, const int64_t *pool, int64_t npool,
                   const int64_t *counts, int64_t ncounts, const int64_t *idx, const float *w,
                   float *out, int64_t rows, int64_t C, int min_gram, int max_gram, int max_skip,
                   int mode, int64_t size, void *stream);

int vq__cuda_einsum_loop(int dtype, const void *a, const void *b, void *out, const vq__es_loop *lp,
                         void *stream);

/* ---- ops with data-dependent output shapes (ops/cpu/dynamic.c) ---- */

/* nonzero: out [rank, count] (rank >= 1; a scalar's is 1) = the
 * coordinates of the nonzero elements of x (n elements of dtype, dims
 * shape[0..ndim)), row-major. One block: each thread counts a contiguous
 * chunk, a scan of the counts, then each writes its chunk's. */
int vq__cuda_nonzero(int dtype, const void *x, int64_t n, int ndim, const int64_t *shape,
                     int64_t *out, int64_t count, void *stream);

/* top_k: x [outer, n, inner] (f32, f64, i32, i64) -> vals, idx [outer, k,
 * inner]: one thread per slice runs ops/dynamic_shared.h's selection on
 * its k entries of heap (outer * inner * k). The CPU's bits. */
int vq__cuda_top_k(int dtype, const void *x, void *vals, int64_t *idx, int64_t *heap, int64_t outer,
                   int64_t n, int64_t inner, int64_t k, int largest, void *stream);

/* unique: one thread runs ops/dynamic_shared.h's vq__unique_run on w (4 m
 * integers). The CPU's bits. */
int vq__cuda_unique(const void *x, vq__unique_geom g, int64_t *w, void *y, int esize,
                    int64_t *first, int64_t *inverse, int64_t *counts, void *stream);

/* compress: out [outer, n, inner] = the slices j < len of x [outer, dim,
 * inner] (elements of esize bytes) where cond[j]; pos (len integers)
 * takes each one's place, by one thread, then one thread per element
 * moves it. compress_grad (f32, f64): dx [outer, dim, inner] = g's slice
 * at pos[j] where cond[j], else 0. */
int vq__cuda_compress(const uint8_t *cond, int64_t len, int64_t *pos, const void *x, void *out,
                      int esize, int64_t outer, int64_t dim, int64_t inner, int64_t n,
                      void *stream);
int vq__cuda_compress_grad(int dtype, const uint8_t *cond, int64_t len, int64_t *pos, const void *g,
                           void *dx, int64_t outer, int64_t dim, int64_t inner, int64_t n,
                           void *stream);

/* non_max_suppression: one thread reads the thresholds (max_out of
 * max_dtype VQ_I32 or VQ_I64; thr NULL: none) into p and runs
 * ops/dynamic_shared.h's vq__nms_run on w (2 * spatial integers), writing
 * out. The CPU's bits. */
int vq__cuda_nms(const float *boxes, const float *scores, const void *max_out, int max_dtype,
                 const float *iou, const float *thr, vq__nms_problem p, int64_t *w, int64_t *out,
                 void *stream);

#ifdef __cplusplus
}
#endif

/* ---- shared by the .cu files ---- */
#ifdef __CUDACC__
#include <cuda_runtime.h>

/* (elementwise.cu) Keeps why (a static string) as the calling thread's
 * vq__cuda_last_error and returns VQ_EIO. */
int vq__cuda_fail(const char *why);

/* VQ_EIO if the last launch failed (clearing the error), else 0. */
static inline int vq__cuda_launched(void)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? 0 : vq__cuda_fail(cudaGetErrorString(e));
}

/* 0 if a runtime call enqueued its work (a memset, a copy), else VQ_EIO
 * keeping CUDA's reason (the error is cleared). */
static inline int vq__cuda_called(cudaError_t e)
{
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    return vq__cuda_fail(cudaGetErrorString(e));
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

/* A grid-stride loop: e takes every index in [0, n) once across the grid. */
#define VQ__CUDA_FOR_EACH(e, n)                                               \
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < (n); \
         e += (int64_t)gridDim.x * blockDim.x)

/* Launches kernel<float> or kernel<double>, by dtype, with a grid for n
 * elements on stream s: ARGS_F32 and ARGS_F64 are the parenthesized
 * arguments for each (the pointers cast to the type); another dtype
 * returns VQ_EINVAL from the launcher. */
#define VQ__CUDA_LAUNCH_FLOATS(kernel, dtype, n, s, ARGS_F32, ARGS_F64)                \
    do {                                                                               \
        if ((dtype) == VQ_F32)                                                         \
            kernel<float><<<vq__cuda_blocks(n), VQ__CUDA_THREADS, 0, (s)>>> ARGS_F32;  \
        else if ((dtype) == VQ_F64)                                                    \
            kernel<double><<<vq__cuda_blocks(n), VQ__CUDA_THREADS, 0, (s)>>> ARGS_F64; \
        else                                                                           \
            return VQ_EINVAL;                                                          \
    } while (0)
#endif

#endif
