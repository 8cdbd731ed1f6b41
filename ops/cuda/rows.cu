/* CUDA kernels for the ops that work line by line with a reduction per
 * line: softmax and softmax_grad (ops/cpu/activation.c), the class losses
 * cross_entropy and softmax_cross_entropy with their gradients
 * (ops/cpu/loss.c), and sum / mean with their gradients (ops/cpu/reduce.c).
 * One block per line; a block reduces in shared memory in double.
 * Launchers and the bad-label protocol: kernels.h. */
#include "kernels.h"

#include <math.h>
#include <stdint.h>

#define LINE_THREADS 256

/* Block-wide max / sum of one double per thread (all threads must call). */
__device__ double block_max(double v)
{
    __shared__ double sh[LINE_THREADS];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s && sh[threadIdx.x + s] > sh[threadIdx.x])
            sh[threadIdx.x] = sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

__device__ double block_sum(double v)
{
    __shared__ double sh[LINE_THREADS];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

/* Integers: wrapping sums in the unsigned type of the same width. */
template <typename U> __device__ U block_sum_u(U v)
{
    __shared__ U sh[LINE_THREADS];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    U r = sh[0];
    __syncthreads();
    return r;
}

/* Lines: blockIdx walks outer * inner lines (grid-stride), line l starts at
 * (l / inner) * len * inner + l % inner, with stride inner. */
#define FOR_LINES(outer, inner)                                                               \
    for (int64_t line = blockIdx.x; line < (outer) * (inner); line += gridDim.x)

static unsigned line_blocks(int64_t lines)
{
    return (unsigned)(lines > 65535 * 16 ? 65535 * 16 : lines);
}

/* ---- softmax ---- */

/* As activation.c: max over the line (NaN never wins a comparison), then
 * e = exp(x - max) in double stored rounded to T, the sum of the unrounded
 * e, then out = (T)(stored e * (1 / sum)). In place is safe: the max is
 * complete (barrier) before anything is written, pass 2 reads x[j] before
 * the same thread writes out[j], and pass 3 reads only out. */
template <typename T>
__global__ void softmax_kernel(const T *x, T *o, int64_t outer, int64_t len, int64_t inner)
{
    FOR_LINES(outer, inner)
    {
        int64_t at = (line / inner) * len * inner + line % inner;
        const T *xl = x + at;
        T *ol = o + at;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
            if ((double)xl[j * inner] > mx)
                mx = xl[j * inner];
        mx = block_max(mx);
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
            double e = exp((double)xl[j * inner] - mx);
            ol[j * inner] = (T)e;
            sum += e;
        }
        sum = block_sum(sum);
        double inv = 1 / sum;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
            ol[j * inner] = (T)(ol[j * inner] * inv);
        __syncthreads();
    }
}

template <typename T>
__global__ void softmax_grad_kernel(const T *y, const T *g, T *d, int64_t outer, int64_t len,
                                    int64_t inner)
{
    FOR_LINES(outer, inner)
    {
        int64_t at = (line / inner) * len * inner + line % inner;
        double dot = 0;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
            dot += (double)y[at + j * inner] * g[at + j * inner];
        dot = block_sum(dot);
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
            int64_t i = at + j * inner;
            d[i] = (T)(y[i] * (g[i] - dot));
        }
        __syncthreads();
    }
}

static bool bad_lines(int64_t outer, int64_t len, int64_t inner)
{
    return outer < 0 || len < 0 || inner < 0;
}

extern "C" int vq__cuda_softmax(int dtype, const void *x, void *out, int64_t outer, int64_t len,
                                int64_t inner, void *stream)
{
    if (bad_lines(outer, len, inner))
        return VQ_EINVAL;
    if (outer * inner == 0 || len == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = line_blocks(outer * inner);
    if (dtype == VQ_F32)
        softmax_kernel<float><<<g, LINE_THREADS, 0, s>>>((const float *)x, (float *)out, outer,
                                                         len, inner);
    else if (dtype == VQ_F64)
        softmax_kernel<double><<<g, LINE_THREADS, 0, s>>>((const double *)x, (double *)out, outer,
                                                          len, inner);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

extern "C" int vq__cuda_softmax_grad(int dtype, const void *y, const void *gr, void *dx,
                                     int64_t outer, int64_t len, int64_t inner, void *stream)
{
    if (bad_lines(outer, len, inner))
        return VQ_EINVAL;
    if (outer * inner == 0 || len == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = line_blocks(outer * inner);
    if (dtype == VQ_F32)
        softmax_grad_kernel<float><<<g, LINE_THREADS, 0, s>>>(
            (const float *)y, (const float *)gr, (float *)dx, outer, len, inner);
    else if (dtype == VQ_F64)
        softmax_grad_kernel<double><<<g, LINE_THREADS, 0, s>>>(
            (const double *)y, (const double *)gr, (double *)dx, outer, len, inner);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

/* ---- class losses ---- */

template <typename L> __device__ inline int64_t label_at(const void *l, int64_t r)
{
    return (int64_t)((const L *)l)[r];
}

__device__ inline void note_bad(unsigned long long *bad_row, int64_t r)
{
    if (bad_row)
        atomicMin(bad_row, (unsigned long long)r);
}

extern "C" int vq__cuda_label_check_reset(unsigned long long *bad_row, void *stream)
{
    if (!bad_row)
        return VQ_EINVAL;
    return cudaMemsetAsync(bad_row, 0xff, sizeof *bad_row, VQ__CUDA_STREAM(stream)) ==
                   cudaSuccess
               ? 0
               : VQ_EIO;
}

/* One thread per row. */
template <typename T, typename L>
__global__ void ce_kernel(const T *x, const void *label, T *loss, int64_t rows, int64_t classes,
                          unsigned long long *bad_row)
{
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows;
         r += (int64_t)gridDim.x * blockDim.x) {
        int64_t lab = label_at<L>(label, r);
        if (lab < 0 || lab >= classes) {
            note_bad(bad_row, r);
            loss[r] = (T)NAN;
            continue;
        }
        loss[r] = (T)-log((double)x[r * classes + lab]);
    }
}

/* One thread per element of dX: -g / x at the label, 0 elsewhere. */
template <typename T, typename L>
__global__ void ce_grad_kernel(const T *x, const void *label, const T *g, T *d, int64_t rows,
                               int64_t classes, unsigned long long *bad_row)
{
    int64_t n = rows * classes;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / classes, j = i % classes, lab = label_at<L>(label, r);
        if (lab < 0 || lab >= classes) {
            if (j == 0)
                note_bad(bad_row, r);
            d[i] = (T)NAN;
        } else {
            d[i] = j == lab ? -g[r] / x[i] : (T)0;
        }
    }
}

/* One block per row, loss.c's formulas. */
template <typename T, typename L>
__global__ void sce_kernel(const T *x, const void *label, T *sm, T *loss, int64_t rows,
                           int64_t classes, unsigned long long *bad_row)
{
    FOR_LINES(rows, (int64_t)1)
    {
        int64_t r = line, lab = label_at<L>(label, r);
        const T *xr = x + r * classes;
        T *sr = sm + r * classes;
        if (lab < 0 || lab >= classes) {
            if (threadIdx.x == 0) {
                note_bad(bad_row, r);
                loss[r] = (T)NAN;
            }
            for (int64_t j = threadIdx.x; j < classes; j += blockDim.x)
                sr[j] = (T)NAN;
            continue; /* uniform across the block: no barrier is skipped unevenly */
        }
        double mx = -INFINITY, sum = 0;
        for (int64_t j = threadIdx.x; j < classes; j += blockDim.x)
            if ((double)xr[j] > mx)
                mx = xr[j];
        mx = block_max(mx);
        double xlab = xr[lab]; /* read before any thread writes sr (in place) */
        __syncthreads();
        for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
            double e = exp((double)xr[j] - mx);
            sr[j] = (T)e;
            sum += e;
        }
        sum = block_sum(sum);
        double inv = 1 / sum;
        for (int64_t j = threadIdx.x; j < classes; j += blockDim.x)
            sr[j] = (T)(sr[j] * inv);
        if (threadIdx.x == 0)
            loss[r] = (T)(log(sum) - (xlab - mx));
        __syncthreads();
    }
}

template <typename T, typename L>
__global__ void sce_grad_kernel(const T *s, const void *label, const T *g, T *d, int64_t rows,
                                int64_t classes, unsigned long long *bad_row)
{
    int64_t n = rows * classes;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / classes, j = i % classes, lab = label_at<L>(label, r);
        if (lab < 0 || lab >= classes) {
            if (j == 0)
                note_bad(bad_row, r);
            d[i] = (T)NAN;
        } else {
            d[i] = (s[i] - (j == lab ? (T)1 : (T)0)) * g[r];
        }
    }
}

static bool bad_loss_args(int dtype, int label_dtype, int64_t rows, int64_t classes)
{
    return (dtype != VQ_F32 && dtype != VQ_F64) || (label_dtype != VQ_I32 && label_dtype != VQ_I64) ||
           rows < 0 || classes < 0;
}

/* Launches KERNEL<T, L> with L from label_dtype. */
#define LOSS_DISPATCH(KERNEL, T, grid, threads, s, ...)                                     \
    do {                                                                                    \
        if (label_dtype == VQ_I32)                                                          \
            KERNEL<T, int32_t><<<grid, threads, 0, s>>>(__VA_ARGS__);                        \
        else                                                                                \
            KERNEL<T, int64_t><<<grid, threads, 0, s>>>(__VA_ARGS__);                        \
    } while (0)

extern "C" int vq__cuda_cross_entropy(int dtype, int label_dtype, const void *x,
                                      const void *label, void *loss, int64_t rows,
                                      int64_t classes, unsigned long long *bad_row, void *stream)
{
    if (bad_loss_args(dtype, label_dtype, rows, classes))
        return VQ_EINVAL;
    if (rows == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(rows);
    if (dtype == VQ_F32)
        LOSS_DISPATCH(ce_kernel, float, g, VQ__CUDA_THREADS, s, (const float *)x, label, (float *)loss,
                      rows, classes, bad_row);
    else
        LOSS_DISPATCH(ce_kernel, double, g, VQ__CUDA_THREADS, s, (const double *)x, label,
                      (double *)loss, rows, classes, bad_row);
    return vq__cuda_launched();
}

extern "C" int vq__cuda_cross_entropy_grad(int dtype, int label_dtype, const void *x,
                                           const void *label, const void *gr, void *dx,
                                           int64_t rows, int64_t classes,
                                           unsigned long long *bad_row, void *stream)
{
    if (bad_loss_args(dtype, label_dtype, rows, classes))
        return VQ_EINVAL;
    if (rows * classes == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(rows * classes);
    if (dtype == VQ_F32)
        LOSS_DISPATCH(ce_grad_kernel, float, g, VQ__CUDA_THREADS, s, (const float *)x, label,
                      (const float *)gr, (float *)dx, rows, classes, bad_row);
    else
        LOSS_DISPATCH(ce_grad_kernel, double, g, VQ__CUDA_THREADS, s, (const double *)x, label,
                      (const double *)gr, (double *)dx, rows, classes, bad_row);
    return vq__cuda_launched();
}

extern "C" int vq__cuda_softmax_cross_entropy(int dtype, int label_dtype, const void *logits,
                                              const void *label, void *sm, void *loss,
                                              int64_t rows, int64_t classes,
                                              unsigned long long *bad_row, void *stream)
{
    if (bad_loss_args(dtype, label_dtype, rows, classes))
        return VQ_EINVAL;
    if (rows == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = line_blocks(rows);
    if (dtype == VQ_F32)
        LOSS_DISPATCH(sce_kernel, float, g, LINE_THREADS, s, (const float *)logits, label, (float *)sm,
                      (float *)loss, rows, classes, bad_row);
    else
        LOSS_DISPATCH(sce_kernel, double, g, LINE_THREADS, s, (const double *)logits, label,
                      (double *)sm, (double *)loss, rows, classes, bad_row);
    return vq__cuda_launched();
}

extern "C" int vq__cuda_softmax_cross_entropy_grad(int dtype, int label_dtype, const void *sm,
                                                   const void *label, const void *gr,
                                                   void *dlogits, int64_t rows, int64_t classes,
                                                   unsigned long long *bad_row, void *stream)
{
    if (bad_loss_args(dtype, label_dtype, rows, classes))
        return VQ_EINVAL;
    if (rows * classes == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(rows * classes);
    if (dtype == VQ_F32)
        LOSS_DISPATCH(sce_grad_kernel, float, g, VQ__CUDA_THREADS, s, (const float *)sm, label,
                      (const float *)gr, (float *)dlogits, rows, classes, bad_row);
    else
        LOSS_DISPATCH(sce_grad_kernel, double, g, VQ__CUDA_THREADS, s, (const double *)sm, label,
                      (const double *)gr, (double *)dlogits, rows, classes, bad_row);
    return vq__cuda_launched();
}

/* ---- sum / mean ---- */

template <typename T> struct acc { typedef double type; };
template <> struct acc<int32_t> { typedef uint32_t type; };
template <> struct acc<int64_t> { typedef uint64_t type; };

__device__ inline double reduce_block(double v) { return block_sum(v); }
__device__ inline uint32_t reduce_block(uint32_t v) { return block_sum_u<uint32_t>(v); }
__device__ inline uint64_t reduce_block(uint64_t v) { return block_sum_u<uint64_t>(v); }

template <typename T>
__global__ void reduce_kernel(int mean, const T *x, T *out, int64_t outer, int64_t len,
                              int64_t inner)
{
    typedef typename acc<T>::type A;
    FOR_LINES(outer, inner)
    {
        int64_t at = (line / inner) * len * inner + line % inner;
        A s = 0;
        for (int64_t j = threadIdx.x; j < len; j += blockDim.x)
            s += (A)x[at + j * inner];
        s = reduce_block(s);
        if (threadIdx.x == 0) {
            if (mean) /* floats only; 0 / 0 is NaN */
                out[line] = (T)(len ? (double)s / (double)len : (double)NAN);
            else
                out[line] = (T)s;
        }
    }
}

template <typename T>
__global__ void reduce_grad_kernel(const T *g, T *dx, int64_t outer, int64_t len, int64_t inner,
                                   double scale)
{
    int64_t n = outer * len * inner;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o = i / (len * inner), in = i % inner;
        dx[i] = (T)(g[o * inner + in] * scale);
    }
}

extern "C" int vq__cuda_reduce(int mean, int dtype, const void *x, void *out, int64_t outer,
                               int64_t len, int64_t inner, void *stream)
{
    if (bad_lines(outer, len, inner) || (mean && dtype != VQ_F32 && dtype != VQ_F64))
        return VQ_EINVAL;
    if (outer * inner == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = line_blocks(outer * inner);
    switch (dtype) {
    case VQ_F32:
        reduce_kernel<float><<<g, LINE_THREADS, 0, s>>>(mean, (const float *)x, (float *)out,
                                                        outer, len, inner);
        break;
    case VQ_F64:
        reduce_kernel<double><<<g, LINE_THREADS, 0, s>>>(mean, (const double *)x, (double *)out,
                                                         outer, len, inner);
        break;
    case VQ_I32:
        reduce_kernel<int32_t><<<g, LINE_THREADS, 0, s>>>(0, (const int32_t *)x, (int32_t *)out,
                                                          outer, len, inner);
        break;
    case VQ_I64:
        reduce_kernel<int64_t><<<g, LINE_THREADS, 0, s>>>(0, (const int64_t *)x, (int64_t *)out,
                                                          outer, len, inner);
        break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}

extern "C" int vq__cuda_reduce_grad(int mean, int dtype, const void *gr, void *dx, int64_t outer,
                                    int64_t len, int64_t inner, void *stream)
{
    if (bad_lines(outer, len, inner))
        return VQ_EINVAL;
    int64_t n = outer * len * inner;
    if (n == 0)
        return 0;
    double scale = mean ? 1.0 / (double)len : 1.0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    if (dtype == VQ_F32)
        reduce_grad_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>((const float *)gr, (float *)dx,
                                                                 outer, len, inner, scale);
    else if (dtype == VQ_F64)
        reduce_grad_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const double *)gr, (double *)dx, outer, len, inner, scale);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}
