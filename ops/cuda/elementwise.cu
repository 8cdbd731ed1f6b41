/* CUDA kernels for the one-thread-per-element ops: binary add/sub/mul/div
 * with broadcasting and scale (ops/cpu/elementwise.c), relu/sigmoid/tanh and
 * their gradients (ops/cpu/activation.c), fill_constant and the Philox
 * random fills (ops/cpu/init.c, ops/rng.c). Launchers: kernels.h. */
#include "kernels.h"

#include <stdint.h>

/* ---- binary with broadcasting ---- */

struct bcast {
    int ndim;
    int64_t shape[VQ_MAX_DIMS];
    int64_t xs[VQ_MAX_DIMS], ys[VQ_MAX_DIMS];
};

template <typename T> struct wrap { typedef T type; };
template <> struct wrap<int32_t> { typedef uint32_t type; };
template <> struct wrap<int64_t> { typedef uint64_t type; };

template <typename T> __device__ inline bool is_int() { return false; }
template <> __device__ inline bool is_int<int32_t>() { return true; }
template <> __device__ inline bool is_int<int64_t>() { return true; }

template <typename T> __device__ inline T min_of() { return 0; }
template <> __device__ inline int32_t min_of<int32_t>() { return INT32_MIN; }
template <> __device__ inline int64_t min_of<int64_t>() { return INT64_MIN; }

template <typename T>
__global__ void binary_kernel(int op, const T *x, const T *y, T *out, int64_t n, bcast b,
                              int *div_error)
{
    typedef typename wrap<T>::type U; /* integers: wrapping arithmetic */
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < n;
         o += (int64_t)gridDim.x * blockDim.x) {
        int64_t rest = o, xo = 0, yo = 0;
        for (int d = b.ndim - 1; d >= 0; d--) {
            int64_t i = rest % b.shape[d];
            rest /= b.shape[d];
            xo += i * b.xs[d];
            yo += i * b.ys[d];
        }
        T a = x[xo], c = y[yo], r;
        switch (op) {
        case VQ__CUDA_ADD: r = (T)((U)a + (U)c); break;
        case VQ__CUDA_SUB: r = (T)((U)a - (U)c); break;
        case VQ__CUDA_MUL: r = (T)((U)a * (U)c); break;
        default:
            if (is_int<T>() && (c == 0 || (a == min_of<T>() && c == (T)-1))) {
                if (div_error)
                    *div_error = 1;
                r = 0;
            } else {
                r = a / c;
            }
            break;
        }
        out[o] = r;
    }
}

extern "C" int vq__cuda_binary(int op, int dtype, const void *x, const void *y, void *out,
                               int ndim, const int64_t *shape, const int64_t *xstride,
                               const int64_t *ystride, int *div_error, void *stream)
{
    if (op < VQ__CUDA_ADD || op > VQ__CUDA_DIV || ndim < 0 || ndim > VQ_MAX_DIMS)
        return VQ_EINVAL;
    bcast b;
    b.ndim = ndim;
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return VQ_EINVAL;
        b.shape[d] = shape[d];
        b.xs[d] = xstride[d];
        b.ys[d] = ystride[d];
        n *= shape[d];
    }
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    switch (dtype) {
    case VQ_F32:
        binary_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>(op, (const float *)x,
                                                           (const float *)y, (float *)out, n, b,
                                                           div_error);
        break;
    case VQ_F64:
        binary_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>(op, (const double *)x,
                                                            (const double *)y, (double *)out, n,
                                                            b, div_error);
        break;
    case VQ_I32:
        binary_kernel<int32_t><<<g, VQ__CUDA_THREADS, 0, s>>>(op, (const int32_t *)x,
                                                             (const int32_t *)y, (int32_t *)out,
                                                             n, b, div_error);
        break;
    case VQ_I64:
        binary_kernel<int64_t><<<g, VQ__CUDA_THREADS, 0, s>>>(op, (const int64_t *)x,
                                                             (const int64_t *)y, (int64_t *)out,
                                                             n, b, div_error);
        break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}

/* ---- scale ---- */

template <typename T>
__global__ void scale_kernel(const T *x, T *out, int64_t n, T scale, T bias)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        out[i] = scale * x[i] + bias; /* --fmad=false: two roundings, as on the CPU */
}

extern "C" int vq__cuda_scale(int dtype, const void *x, void *out, int64_t n, double scale,
                              double bias, void *stream)
{
    if (n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    if (dtype == VQ_F32)
        scale_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>((const float *)x, (float *)out, n,
                                                          (float)scale, (float)bias);
    else if (dtype == VQ_F64)
        scale_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>((const double *)x, (double *)out, n,
                                                           scale, bias);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

/* ---- relu / sigmoid / tanh ---- */

__device__ inline float exp_of(float v) { return expf(v); }
__device__ inline double exp_of(double v) { return exp(v); }
__device__ inline float tanh_of(float v) { return tanhf(v); }
__device__ inline double tanh_of(double v) { return tanh(v); }

template <typename T> __global__ void unary_kernel(int op, const T *x, T *o, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        T v = x[i];
        switch (op) {
        case VQ__CUDA_RELU: o[i] = v < 0 ? (T)0 : v; break; /* keeps NaN */
        case VQ__CUDA_SIGMOID:
            if (v >= 0) {
                o[i] = (T)1 / ((T)1 + exp_of(-v));
            } else {
                T e = exp_of(v);
                o[i] = e / ((T)1 + e);
            }
            break;
        default: o[i] = tanh_of(v); break;
        }
    }
}

template <typename T>
__global__ void unary_grad_kernel(int op, const T *y, const T *g, T *d, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        T yi = y[i], gi = g[i];
        switch (op) {
        case VQ__CUDA_RELU: d[i] = yi > 0 ? gi : (T)0; break;
        case VQ__CUDA_SIGMOID: d[i] = gi * yi * ((T)1 - yi); break;
        default: d[i] = gi * ((T)1 - yi * yi); break;
        }
    }
}

extern "C" int vq__cuda_unary(int op, int dtype, const void *x, void *out, int64_t n,
                              void *stream)
{
    if (op < VQ__CUDA_RELU || op > VQ__CUDA_TANH || n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    if (dtype == VQ_F32)
        unary_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>(op, (const float *)x, (float *)out, n);
    else if (dtype == VQ_F64)
        unary_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>(op, (const double *)x,
                                                           (double *)out, n);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

extern "C" int vq__cuda_unary_grad(int op, int dtype, const void *y, const void *gr, void *dx,
                                   int64_t n, void *stream)
{
    if (op < VQ__CUDA_RELU || op > VQ__CUDA_TANH || n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    if (dtype == VQ_F32)
        unary_grad_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>(op, (const float *)y,
                                                               (const float *)gr, (float *)dx, n);
    else if (dtype == VQ_F64)
        unary_grad_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>(
            op, (const double *)y, (const double *)gr, (double *)dx, n);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

/* ---- fill_constant ---- */

template <typename T> __global__ void fill_kernel(T *o, int64_t n, T v)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        o[i] = v;
}

extern "C" int vq__cuda_fill(int dtype, void *out, int64_t n, double value, int64_t ivalue,
                             void *stream)
{
    if (n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    switch (dtype) {
    case VQ_F32:
        fill_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>((float *)out, n, (float)value);
        break;
    case VQ_F64: fill_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>((double *)out, n, value); break;
    case VQ_I32:
        fill_kernel<int32_t><<<g, VQ__CUDA_THREADS, 0, s>>>((int32_t *)out, n, (int32_t)ivalue);
        break;
    case VQ_I64: fill_kernel<int64_t><<<g, VQ__CUDA_THREADS, 0, s>>>((int64_t *)out, n, ivalue); break;
    case VQ_BOOL:
        fill_kernel<uint8_t><<<g, VQ__CUDA_THREADS, 0, s>>>((uint8_t *)out, n, (uint8_t)ivalue);
        break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}

/* ---- Philox4x32-10 and the random fills: ops/rng.c and ops/cpu/init.c,
 * step for step. Every double operation is written as its _rn intrinsic so
 * that no multiply-add is fused whatever the compiler flags. ---- */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

__device__ inline void philox(uint64_t counter, uint64_t key, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
#pragma unroll
    for (int round = 0; round < 10; round++) {
        uint32_t hi0 = __umulhi(PHILOX_M0, c0), lo0 = PHILOX_M0 * c0;
        uint32_t hi1 = __umulhi(PHILOX_M1, c2), lo1 = PHILOX_M1 * c2;
        uint32_t n0 = hi1 ^ c1 ^ k0;
        uint32_t n1 = lo1;
        uint32_t n2 = hi0 ^ c3 ^ k1;
        uint32_t n3 = lo0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += PHILOX_W0;
        k1 += PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

__device__ inline uint64_t bits53(uint32_t hi, uint32_t lo)
{
    return (((uint64_t)hi << 32) | lo) >> 11;
}

/* u = (w0 >> 8) 2^-24 (f32) or bits53(w0, w1) 2^-53 (f64), both exact;
 * value = a + (b * u), each rounded to double, then to float for f32. */
template <typename T>
__global__ void uniform_kernel(T *o, int64_t n, double a, double b, uint64_t seed)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t w[4];
        philox((uint64_t)i, seed, w);
        if (sizeof(T) == 4) {
            double u = __dmul_rn((double)(w[0] >> 8), 0x1p-24);
            o[i] = (T)__double2float_rn(__dadd_rn(a, __dmul_rn(b, u)));
        } else {
            double u = __dmul_rn(__ull2double_rn(bits53(w[0], w[1])), 0x1p-53);
            o[i] = (T)__dadd_rn(a, __dmul_rn(b, u));
        }
    }
}

#define TWO_PI 6.283185307179586 /* 2 pi rounded to double, as init.c */

/* Box-Muller in double, init.c's gaussian_kernel. */
template <typename T>
__global__ void gaussian_kernel(T *o, int64_t n, double a, double b, uint64_t seed)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t w[4];
        philox((uint64_t)i, seed, w);
        double u1 = __dmul_rn(__ull2double_rn(bits53(w[0], w[1]) + 1), 0x1p-53);
        double u2 = __dmul_rn(__ull2double_rn(bits53(w[2], w[3])), 0x1p-53);
        double r2 = __dmul_rn(-2.0, log(u1));
        double angle = __dmul_rn(TWO_PI, u2);
        double z = __dmul_rn(__dsqrt_rn(r2), cos(angle));
        double v = __dadd_rn(a, __dmul_rn(b, z));
        if (sizeof(T) == 4)
            o[i] = (T)__double2float_rn(v);
        else
            o[i] = (T)v;
    }
}

extern "C" int vq__cuda_uniform(int dtype, void *out, int64_t n, double a, double b,
                                uint64_t seed, void *stream)
{
    if (n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    if (dtype == VQ_F32)
        uniform_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>((float *)out, n, a, b, seed);
    else if (dtype == VQ_F64)
        uniform_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>((double *)out, n, a, b, seed);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

extern "C" int vq__cuda_gaussian(int dtype, void *out, int64_t n, double a, double b,
                                 uint64_t seed, void *stream)
{
    if (n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    if (dtype == VQ_F32)
        gaussian_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>((float *)out, n, a, b, seed);
    else if (dtype == VQ_F64)
        gaussian_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>((double *)out, n, a, b, seed);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}
