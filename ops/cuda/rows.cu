/* CUDA kernels for the ops that work line by line with a reduction per
 * line: softmax and softmax_grad (ops/cpu/activation.c), the class losses
 * cross_entropy and softmax_cross_entropy with their gradients, and mse
 * (ops/cpu/loss.c), and sum / mean over any axes with their gradients
 * (ops/cpu/reduce.c). One block per line (per output element); a block
 * reduces in shared memory in double. Launchers and the bad-label
 * protocol: kernels.h. */
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
    return vq__cuda_called(
        cudaMemsetAsync(bad_row, 0xff, sizeof *bad_row, VQ__CUDA_STREAM(stream)));
}

template <typename L>
__global__ void label_fetch_kernel(const L *label, const unsigned long long *bad_row,
                                   long long *out)
{
    unsigned long long r = *bad_row;
    if (r != ~0ull)
        *out = (long long)label[r];
}

extern "C" int vq__cuda_label_fetch(int label_dtype, const void *label,
                                    const unsigned long long *bad_row, long long *label_out,
                                    void *stream)
{
    if (!bad_row || !label_out)
        return VQ_EINVAL;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    if (label_dtype == VQ_I32)
        label_fetch_kernel<int32_t><<<1, 1, 0, s>>>((const int32_t *)label, bad_row, label_out);
    else if (label_dtype == VQ_I64)
        label_fetch_kernel<int64_t><<<1, 1, 0, s>>>((const int64_t *)label, bad_row, label_out);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

/* The executor's NaN check: grid-stride, the smallest bad index wins. */
template <typename T>
__global__ void find_nonfinite_kernel(const T *x, int64_t n, unsigned long long *bad)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        if (!isfinite(x[i]))
            note_bad(bad, i);
}

template <typename T>
__global__ void nonfinite_value_kernel(const T *x, const unsigned long long *bad, double *value)
{
    unsigned long long i = *bad;
    if (i != ~0ull)
        *value = (double)x[i];
}

extern "C" int vq__cuda_find_nonfinite(int dtype, const void *x, int64_t n,
                                       unsigned long long *bad, double *value, void *stream)
{
    if (!bad || !value || n < 0)
        return VQ_EINVAL;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    if (dtype == VQ_F32) {
        if (n > 0)
            find_nonfinite_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>((const float *)x, n, bad);
        nonfinite_value_kernel<float><<<1, 1, 0, s>>>((const float *)x, bad, value);
    } else if (dtype == VQ_F64) {
        if (n > 0)
            find_nonfinite_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>((const double *)x, n, bad);
        nonfinite_value_kernel<double><<<1, 1, 0, s>>>((const double *)x, bad, value);
    } else {
        return VQ_EINVAL;
    }
    return vq__cuda_launched();
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

/* ---- mse ---- */

/* One block: loss.c's MSE, the differences and their squares in double,
 * summed in a tree instead of left to right. */
template <typename T> __global__ void mse_kernel(const T *x, const T *y, T *out, int64_t n)
{
    double sum = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        double d = (double)x[j] - (double)y[j];
        sum += d * d;
    }
    sum = block_sum(sum);
    if (threadIdx.x == 0)
        *out = (T)(n ? sum / (double)n : 0);
}

extern "C" int vq__cuda_mse(int dtype, const void *x, const void *y, void *out, int64_t n,
                            void *stream)
{
    if (n < 0)
        return VQ_EINVAL;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    if (dtype == VQ_F32)
        mse_kernel<float><<<1, LINE_THREADS, 0, s>>>((const float *)x, (const float *)y,
                                                     (float *)out, n);
    else if (dtype == VQ_F64)
        mse_kernel<double><<<1, LINE_THREADS, 0, s>>>((const double *)x, (const double *)y,
                                                      (double *)out, n);
    else
        return VQ_EINVAL;
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

/* X's dims after dropping 1s and merging neighbours that are both reduced
 * or both kept: the runs, in order, with their X strides. */
struct runs {
    int n;
    int64_t shape[VQ_MAX_DIMS], stride[VQ_MAX_DIMS];
    bool reduced[VQ_MAX_DIMS];
};

static bool runs_of(int ndim, const int64_t *shape, unsigned mask, runs *r)
{
    int64_t xs[VQ_MAX_DIMS], s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] < 0)
            return false;
        xs[d] = s;
        s *= shape[d];
    }
    r->n = 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1)
            continue;
        bool red = (mask >> d) & 1u;
        if (r->n > 0 && r->reduced[r->n - 1] == red) {
            /* X is contiguous: the previous run steps over this dim. */
            r->shape[r->n - 1] *= shape[d];
            r->stride[r->n - 1] = xs[d];
            continue;
        }
        r->shape[r->n] = shape[d];
        r->stride[r->n] = xs[d];
        r->reduced[r->n] = red;
        r->n++;
    }
    return true;
}

/* The general case: kept dims (Out's index decomposes over them) and
 * reduced dims (the index space each block walks), with X strides. */
struct reduce_walk {
    int nk, nr;
    int64_t kshape[VQ_MAX_DIMS], kstride[VQ_MAX_DIMS];
    int64_t rshape[VQ_MAX_DIMS], rstride[VQ_MAX_DIMS];
    int64_t count; /* product of rshape */
};

/* One block per output element (grid-stride over them, uniform across the
 * block, so every thread reaches each barrier of reduce_block); thread t
 * takes the reduced elements t, t + blockDim.x, ..., each found by a
 * mixed-radix decomposition of its index. */
template <typename T>
__global__ void reduce_axes_kernel(int mean, const T *x, T *out, int64_t nout, reduce_walk w)
{
    typedef typename acc<T>::type A;
    for (int64_t o = blockIdx.x; o < nout; o += gridDim.x) {
        int64_t rest = o, base = 0;
        for (int d = w.nk - 1; d >= 0; d--) {
            base += rest % w.kshape[d] * w.kstride[d];
            rest /= w.kshape[d];
        }
        A s = 0;
        for (int64_t j = threadIdx.x; j < w.count; j += blockDim.x) {
            int64_t r = j, at = base;
            for (int d = w.nr - 1; d >= 0; d--) {
                at += r % w.rshape[d] * w.rstride[d];
                r /= w.rshape[d];
            }
            s += (A)x[at];
        }
        s = reduce_block(s);
        if (threadIdx.x == 0) {
            if (mean)
                out[o] = (T)(w.count ? (double)s / (double)w.count : (double)NAN);
            else
                out[o] = (T)s;
        }
    }
}

extern "C" int vq__cuda_reduce_axes(int mean, int dtype, const void *x, void *out, int ndim,
                                    const int64_t *shape, unsigned mask, void *stream)
{
    runs r;
    if (ndim < 0 || ndim > VQ_MAX_DIMS || !runs_of(ndim, shape, mask, &r) ||
        (mean && dtype != VQ_F32 && dtype != VQ_F64) ||
        (dtype != VQ_F32 && dtype != VQ_F64 && dtype != VQ_I32 && dtype != VQ_I64))
        return VQ_EINVAL;
    int nred = 0, first = -1;
    for (int i = 0; i < r.n; i++)
        if (r.reduced[i]) {
            nred++;
            if (first < 0)
                first = i;
        }
    if (nred <= 1) {
        /* [outer, len, inner] around the one reduced run (len 1 if none). */
        int64_t outer = 1, len = 1, inner = 1;
        for (int i = 0; i < r.n; i++) {
            if (i == first)
                len = r.shape[i];
            else if (first < 0 || i < first)
                outer *= r.shape[i];
            else
                inner *= r.shape[i];
        }
        return vq__cuda_reduce(mean, dtype, x, out, outer, len, inner, stream);
    }
    reduce_walk w;
    w.nk = w.nr = 0;
    w.count = 1;
    int64_t nout = 1;
    for (int i = 0; i < r.n; i++) {
        if (r.reduced[i]) {
            w.rshape[w.nr] = r.shape[i];
            w.rstride[w.nr++] = r.stride[i];
            w.count *= r.shape[i];
        } else {
            w.kshape[w.nk] = r.shape[i];
            w.kstride[w.nk++] = r.stride[i];
            nout *= r.shape[i];
        }
    }
    if (nout == 0)
        return 0;
    /* Threads: a power of two (reduce_block halves), enough for count. */
    unsigned threads = 32;
    while (threads < LINE_THREADS && (int64_t)threads < w.count)
        threads *= 2;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = line_blocks(nout);
    switch (dtype) {
    case VQ_F32:
        reduce_axes_kernel<float><<<g, threads, 0, s>>>(mean, (const float *)x, (float *)out,
                                                        nout, w);
        break;
    case VQ_F64:
        reduce_axes_kernel<double><<<g, threads, 0, s>>>(mean, (const double *)x, (double *)out,
                                                         nout, w);
        break;
    case VQ_I32:
        reduce_axes_kernel<int32_t><<<g, threads, 0, s>>>(0, (const int32_t *)x, (int32_t *)out,
                                                          nout, w);
        break;
    default:
        reduce_axes_kernel<int64_t><<<g, threads, 0, s>>>(0, (const int64_t *)x, (int64_t *)out,
                                                          nout, w);
        break;
    }
    return vq__cuda_launched();
}

/* dX's dims (after runs_of) with dOut's stride along each: 0 where
 * reduced, contiguous over the kept ones. */
struct spread_walk {
    int n;
    int64_t shape[VQ_MAX_DIMS], gstride[VQ_MAX_DIMS];
};

template <typename T>
__global__ void reduce_axes_grad_kernel(const T *g, T *dx, int64_t n, spread_walk w,
                                        double scale)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rest = i, go = 0;
        for (int d = w.n - 1; d >= 0; d--) {
            go += rest % w.shape[d] * w.gstride[d];
            rest /= w.shape[d];
        }
        dx[i] = (T)(g[go] * scale);
    }
}

extern "C" int vq__cuda_reduce_axes_grad(int mean, int dtype, const void *gr, void *dx,
                                         int ndim, const int64_t *shape, unsigned mask,
                                         void *stream)
{
    runs r;
    if (ndim < 0 || ndim > VQ_MAX_DIMS || !runs_of(ndim, shape, mask, &r) ||
        (dtype != VQ_F32 && dtype != VQ_F64))
        return VQ_EINVAL;
    spread_walk w;
    w.n = r.n;
    int64_t n = 1, gn = 1;
    for (int i = r.n - 1; i >= 0; i--) {
        w.shape[i] = r.shape[i];
        w.gstride[i] = r.reduced[i] ? 0 : gn;
        if (!r.reduced[i])
            gn *= r.shape[i];
        n *= r.shape[i];
    }
    if (n == 0)
        return 0;
    /* dX non-empty: every reduced dim is non-zero, and so is dOut. */
    double scale = mean ? 1.0 / (double)(n / gn) : 1.0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    if (dtype == VQ_F32)
        reduce_axes_grad_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>((const float *)gr,
                                                                      (float *)dx, n, w, scale);
    else
        reduce_axes_grad_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const double *)gr, (double *)dx, n, w, scale);
    return vq__cuda_launched();
}
