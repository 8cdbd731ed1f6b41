/* CUDA kernels of ops/cpu/math.c: exp, log, sqrt, reciprocal, erf, power,
 * sin ... atanh, floor, ceil, round (rint: halves to even, as nearbyint on
 * the CPU) and math_grad elementwise (grid-stride), log_softmax and its gradient
 * per line of the axis (one thread per line, in double as on the CPU). */
#include "kernels.h"

template <typename T> __device__ inline T pow_of(T a, T b);
template <> __device__ inline float pow_of(float a, float b) { return powf(a, b); }
template <> __device__ inline double pow_of(double a, double b) { return pow(a, b); }
template <typename T> __device__ inline T exp_t(T a);
template <> __device__ inline float exp_t(float a) { return expf(a); }
template <> __device__ inline double exp_t(double a) { return exp(a); }
template <typename T> __device__ inline T log_t(T a);
template <> __device__ inline float log_t(float a) { return logf(a); }
template <> __device__ inline double log_t(double a) { return log(a); }
template <typename T> __device__ inline T sqrt_t(T a);
template <> __device__ inline float sqrt_t(float a) { return sqrtf(a); }
template <> __device__ inline double sqrt_t(double a) { return sqrt(a); }
template <typename T> __device__ inline T erf_t(T a);
template <> __device__ inline float erf_t(float a) { return erff(a); }
template <> __device__ inline double erf_t(double a) { return erf(a); }

/* sin ... round in T: float calls the f-suffixed function, double the plain one */
#define UNARY_T(NAME, FN)                                                                     \
    __device__ inline float NAME##_t(float a) { return FN##f(a); }                            \
    __device__ inline double NAME##_t(double a) { return FN(a); }
UNARY_T(sin, sin)
UNARY_T(cos, cos)
UNARY_T(tan, tan)
UNARY_T(asin, asin)
UNARY_T(acos, acos)
UNARY_T(atan, atan)
UNARY_T(sinh, sinh)
UNARY_T(cosh, cosh)
UNARY_T(asinh, asinh)
UNARY_T(acosh, acosh)
UNARY_T(atanh, atanh)
UNARY_T(floor, floor)
UNARY_T(ceil, ceil)
UNARY_T(round, rint)

template <typename T> __global__ void math_kernel(int op, T e, const T *x, T *o, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        T v = x[i];
        switch (op) {
        case VQ__CUDA_EXP: o[i] = exp_t(v); break;
        case VQ__CUDA_LOG: o[i] = log_t(v); break;
        case VQ__CUDA_SQRT: o[i] = sqrt_t(v); break;
        case VQ__CUDA_RECIPROCAL: o[i] = (T)1 / v; break;
        case VQ__CUDA_ERF: o[i] = erf_t(v); break;
        case VQ__CUDA_POWER: o[i] = pow_of(v, e); break;
        case VQ__CUDA_SIN: o[i] = sin_t(v); break;
        case VQ__CUDA_COS: o[i] = cos_t(v); break;
        case VQ__CUDA_TAN: o[i] = tan_t(v); break;
        case VQ__CUDA_ASIN: o[i] = asin_t(v); break;
        case VQ__CUDA_ACOS: o[i] = acos_t(v); break;
        case VQ__CUDA_ATAN: o[i] = atan_t(v); break;
        case VQ__CUDA_SINH: o[i] = sinh_t(v); break;
        case VQ__CUDA_COSH: o[i] = cosh_t(v); break;
        case VQ__CUDA_ASINH: o[i] = asinh_t(v); break;
        case VQ__CUDA_ACOSH: o[i] = acosh_t(v); break;
        case VQ__CUDA_ATANH: o[i] = atanh_t(v); break;
        case VQ__CUDA_FLOOR: o[i] = floor_t(v); break;
        case VQ__CUDA_CEIL: o[i] = ceil_t(v); break;
        default: o[i] = round_t(v); break;
        }
    }
}

template <typename T>
__global__ void math_grad_kernel(int op, T e, const T *x, const T *y, const T *g, T *d, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        switch (op) {
        case VQ__CUDA_EXP: d[i] = g[i] * y[i]; break;
        case VQ__CUDA_LOG: d[i] = g[i] / x[i]; break;
        case VQ__CUDA_SQRT: d[i] = g[i] / ((T)2 * y[i]); break;
        case VQ__CUDA_RECIPROCAL: d[i] = -g[i] * y[i] * y[i]; break;
        case VQ__CUDA_ERF: d[i] = g[i] * (T)1.1283791670955126 * exp_t(-x[i] * x[i]); break;
        case VQ__CUDA_POWER: d[i] = g[i] * e * pow_of(x[i], e - (T)1); break;
        case VQ__CUDA_SIN: d[i] = g[i] * cos_t(x[i]); break;
        case VQ__CUDA_COS: d[i] = g[i] * -sin_t(x[i]); break;
        case VQ__CUDA_TAN: d[i] = g[i] * ((T)1 + y[i] * y[i]); break;
        case VQ__CUDA_ASIN: d[i] = g[i] * ((T)1 / sqrt_t((T)1 - x[i] * x[i])); break;
        case VQ__CUDA_ACOS: d[i] = g[i] * ((T)-1 / sqrt_t((T)1 - x[i] * x[i])); break;
        case VQ__CUDA_ATAN: d[i] = g[i] * ((T)1 / ((T)1 + x[i] * x[i])); break;
        case VQ__CUDA_SINH: d[i] = g[i] * cosh_t(x[i]); break;
        case VQ__CUDA_COSH: d[i] = g[i] * sinh_t(x[i]); break;
        case VQ__CUDA_ASINH: d[i] = g[i] * ((T)1 / sqrt_t(x[i] * x[i] + (T)1)); break;
        case VQ__CUDA_ACOSH:
            d[i] = g[i] * ((T)1 / (sqrt_t(x[i] - (T)1) * sqrt_t(x[i] + (T)1)));
            break;
        case VQ__CUDA_ATANH: d[i] = g[i] * ((T)1 / ((T)1 - x[i] * x[i])); break;
        default: d[i] = (T)0; break; /* floor, ceil, round */
        }
    }
}

extern "C" int vq__cuda_math(int op, int dtype, double exponent, const void *x, void *out,
                             int64_t n, void *stream)
{
    if (op < VQ__CUDA_EXP || op >= VQ__CUDA_MATH_COUNT || n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    if (dtype == VQ_F32)
        math_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>(op, (float)exponent, (const float *)x,
                                                          (float *)out, n);
    else if (dtype == VQ_F64)
        math_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>(op, exponent, (const double *)x,
                                                           (double *)out, n);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

extern "C" int vq__cuda_math_grad(int op, int dtype, double exponent, const void *x,
                                  const void *y, const void *gr, void *dx, int64_t n,
                                  void *stream)
{
    if (op < VQ__CUDA_EXP || op >= VQ__CUDA_MATH_COUNT || n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    if (dtype == VQ_F32)
        math_grad_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>(
            op, (float)exponent, (const float *)x, (const float *)y, (const float *)gr,
            (float *)dx, n);
    else if (dtype == VQ_F64)
        math_grad_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>(
            op, exponent, (const double *)x, (const double *)y, (const double *)gr, (double *)dx,
            n);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

/* One thread per line: line l starts at (l / inner) * len * inner + l % inner. */
template <typename T>
__global__ void lsm_kernel(const T *x, T *o, int64_t outer, int64_t len, int64_t inner)
{
    for (int64_t l = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; l < outer * inner;
         l += (int64_t)gridDim.x * blockDim.x) {
        int64_t at = (l / inner) * len * inner + l % inner;
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < len; j++)
            if ((double)x[at + j * inner] > mx)
                mx = x[at + j * inner];
        for (int64_t j = 0; j < len; j++)
            sum += exp((double)x[at + j * inner] - mx);
        double shift = mx + log(sum);
        for (int64_t j = 0; j < len; j++)
            o[at + j * inner] = (T)((double)x[at + j * inner] - shift);
    }
}

template <typename T>
__global__ void lsm_grad_kernel(const T *y, const T *g, T *d, int64_t outer, int64_t len,
                                int64_t inner)
{
    for (int64_t l = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; l < outer * inner;
         l += (int64_t)gridDim.x * blockDim.x) {
        int64_t at = (l / inner) * len * inner + l % inner;
        double sum = 0;
        for (int64_t j = 0; j < len; j++)
            sum += (double)g[at + j * inner];
        for (int64_t j = 0; j < len; j++) {
            int64_t i = at + j * inner;
            d[i] = (T)((double)g[i] - exp((double)y[i]) * sum);
        }
    }
}

extern "C" int vq__cuda_log_softmax(int dtype, const void *x, void *out, int64_t outer,
                                    int64_t len, int64_t inner, void *stream)
{
    if (outer < 0 || len < 0 || inner < 0)
        return VQ_EINVAL;
    if (outer * inner == 0 || len == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(outer * inner);
    if (dtype == VQ_F32)
        lsm_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>((const float *)x, (float *)out, outer,
                                                         len, inner);
    else if (dtype == VQ_F64)
        lsm_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>((const double *)x, (double *)out,
                                                          outer, len, inner);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

extern "C" int vq__cuda_log_softmax_grad(int dtype, const void *y, const void *gr, void *dx,
                                         int64_t outer, int64_t len, int64_t inner, void *stream)
{
    if (outer < 0 || len < 0 || inner < 0)
        return VQ_EINVAL;
    if (outer * inner == 0 || len == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(outer * inner);
    if (dtype == VQ_F32)
        lsm_grad_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const float *)y, (const float *)gr, (float *)dx, outer, len, inner);
    else if (dtype == VQ_F64)
        lsm_grad_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const double *)y, (const double *)gr, (double *)dx, outer, len, inner);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}
