/* CUDA kernels for the one-thread-per-element ops: binary
 * add/sub/mul/div/pow/mod with broadcasting, their gradient elementwise_grad (one thread per
 * element of the gradient, summing over the broadcast dims) and scale
 * (ops/cpu/elementwise.c), relu/sigmoid/tanh and their gradients
 * (ops/cpu/activation.c), square_error and the elementwise gradients of the
 * regression losses (ops/cpu/loss.c), fill_constant, the Philox random
 * fills, dropout and the advance of their generator state (ops/cpu/init.c,
 * ops/rng_shared.h). Also the launchers' error string
 * (vq__cuda_fail). Launchers: kernels.h. */
#include "kernels.h"
#include "../rng_shared.h" /* vq__philox, vq__bits53 */

#include <stdint.h>
#include <type_traits>

/* ---- why the last launch failed ---- */

/* Per thread: the launchers run on the engine's GPU workers, and the
 * caller reads it right after the failing call. */
static thread_local const char *last_error = "";

int vq__cuda_fail(const char *why)
{
    last_error = why;
    return VQ_EIO;
}

extern "C" const char *vq__cuda_last_error(void)
{
    return last_error;
}

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

__device__ inline float fmod_of(float a, float b) { return fmodf(a, b); }
__device__ inline double fmod_of(double a, double b) { return fmod(a, b); }

/* elementwise.c's float_mod: C's fmod (exact), moved to the divisor's sign
 * for Python's % (a zero takes the divisor's sign, as numpy's). */
template <typename T> __device__ inline T python_mod(bool python, T a, T b)
{
    T r = fmod_of(a, b);
    if (!python)
        return r;
    if (r != 0)
        return (b < 0) != (r < 0) ? r + b : r;
    return copysign(r, b);
}

template <typename T>
__global__ void binary_kernel(int op, const T *x, const T *y, T *out, int64_t n, bcast b,
                              unsigned long long *bad_at)
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
        case VQ__CUDA_POW:
            if constexpr (!std::is_integral<T>::value) {
                r = (T)pow((double)a, (double)c);
            } else if (c < 0) { /* elementwise.c's integer pow */
                if (a == 0 && bad_at)
                    atomicMin(bad_at, (unsigned long long)o);
                r = a == 1 ? (T)1 : a == (T)-1 ? ((c & 1) ? (T)-1 : (T)1) : (T)0;
            } else {
                U base = (U)a, p = 1;
                for (U e = (U)c; e; e >>= 1) {
                    if (e & 1)
                        p *= base;
                    base *= base;
                }
                r = (T)p;
            }
            break;
        case VQ__CUDA_MOD:
        case VQ__CUDA_FMOD:
            if constexpr (std::is_integral<T>::value) { /* elementwise.c's INT_ROW */
                if (c == 0) {
                    if (bad_at)
                        atomicMin(bad_at, (unsigned long long)o);
                    r = 0;
                } else if (c == (T)-1) {
                    r = 0;
                } else {
                    r = a % c;
                    if (op == VQ__CUDA_MOD && r != 0 && ((r < 0) != (c < 0)))
                        r += c;
                }
            } else {
                r = python_mod(op == VQ__CUDA_MOD, a, c);
            }
            break;
        default:
            if (is_int<T>() && (c == 0 || (a == min_of<T>() && c == (T)-1))) {
                if (bad_at)
                    atomicMin(bad_at, (unsigned long long)o);
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
                               const int64_t *ystride, unsigned long long *bad_at,
                               void *stream)
{
    if (op < VQ__CUDA_ADD || op > VQ__CUDA_FMOD || ndim < 0 || ndim > VQ_MAX_DIMS)
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
                                                           bad_at);
        break;
    case VQ_F64:
        binary_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>(op, (const double *)x,
                                                            (const double *)y, (double *)out, n,
                                                            b, bad_at);
        break;
    case VQ_I32:
        binary_kernel<int32_t><<<g, VQ__CUDA_THREADS, 0, s>>>(op, (const int32_t *)x,
                                                             (const int32_t *)y, (int32_t *)out,
                                                             n, b, bad_at);
        break;
    case VQ_I64:
        binary_kernel<int64_t><<<g, VQ__CUDA_THREADS, 0, s>>>(op, (const int64_t *)x,
                                                             (const int64_t *)y, (int64_t *)out,
                                                             n, b, bad_at);
        break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}

/* ---- elementwise_grad ---- */

/* g's dims seen from the operand the gradient is for: its own dims (kept:
 * dz's index decomposes over them, row-major) and the dims along which it
 * was broadcast (summed), each with the strides of g (contiguous), x and y
 * in elements. */
struct grad_walk {
    int nk, ns;
    int64_t kshape[VQ_MAX_DIMS], kg[VQ_MAX_DIMS], kx[VQ_MAX_DIMS], ky[VQ_MAX_DIMS];
    int64_t sshape[VQ_MAX_DIMS], sg[VQ_MAX_DIMS], sx[VQ_MAX_DIMS], sy[VQ_MAX_DIMS];
    int64_t count; /* terms per element of dz: the product of sshape */
};

__device__ inline float floor_of(float v) { return floorf(v); }
__device__ inline double floor_of(double v) { return floor(v); }
__device__ inline float trunc_of(float v) { return truncf(v); }
__device__ inline double trunc_of(double v) { return trunc(v); }

/* elementwise.c's GRAD_ROW term: g times d op / d operand wrt, in T. */
template <typename T> __device__ inline T grad_term(int op, int wrt, T g, T a, T b)
{
    switch (op) {
    case VQ__CUDA_ADD: return g;
    case VQ__CUDA_SUB: return wrt ? -g : g;
    case VQ__CUDA_MUL: return g * (wrt ? a : b);
    case VQ__CUDA_DIV: return wrt ? -g * a / (b * b) : g / b;
    case VQ__CUDA_MOD: return wrt ? -g * floor_of(a / b) : g;
    case VQ__CUDA_FMOD: return wrt ? -g * trunc_of(a / b) : g;
    default: /* pow, in double as the CPU's */
        return wrt ? g * (T)pow((double)a, (double)b) * (T)log((double)a)
                   : g * b * (T)pow((double)a, (double)(b - 1));
    }
}

/* One thread per element of dz: its terms in the order of g's elements
 * (the summed dims walked row-major, an odometer), added in T from 0 as
 * the CPU's dz[i] += d does; direct: no dim is summed and the op is add or
 * sub, where the CPU copies (or negates) g instead of adding to 0. */
template <typename T>
__global__ void binary_grad_kernel(int op, int wrt, const T *g, const T *x, const T *y, T *dz,
                                   int64_t nz, grad_walk w, int direct)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nz;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rest = i, go = 0, xo = 0, yo = 0;
        for (int d = w.nk - 1; d >= 0; d--) {
            int64_t c = rest % w.kshape[d];
            rest /= w.kshape[d];
            go += c * w.kg[d];
            xo += c * w.kx[d];
            yo += c * w.ky[d];
        }
        if (direct) {
            dz[i] = grad_term<T>(op, wrt, g[go], x[xo], y[yo]);
            continue;
        }
        T acc = 0;
        int64_t idx[VQ_MAX_DIMS] = {0};
        for (int64_t j = 0; j < w.count; j++) {
            acc += grad_term<T>(op, wrt, g[go], x[xo], y[yo]);
            for (int d = w.ns - 1; d >= 0; d--) {
                go += w.sg[d];
                xo += w.sx[d];
                yo += w.sy[d];
                if (++idx[d] < w.sshape[d])
                    break;
                go -= w.sg[d] * w.sshape[d];
                xo -= w.sx[d] * w.sshape[d];
                yo -= w.sy[d] * w.sshape[d];
                idx[d] = 0;
            }
        }
        dz[i] = acc;
    }
}

extern "C" int vq__cuda_binary_grad(int op, int wrt, int dtype, const void *g, const void *x,
                                    const void *y, void *dz, int64_t nz, int ndim,
                                    const int64_t *shape, const int64_t *xstride,
                                    const int64_t *ystride, void *stream)
{
    if (op < VQ__CUDA_ADD || op > VQ__CUDA_FMOD || (wrt != 0 && wrt != 1) || nz < 0 ||
        ndim < 0 || ndim > VQ_MAX_DIMS || (dtype != VQ_F32 && dtype != VQ_F64))
        return VQ_EINVAL;
    if (nz == 0)
        return 0;
    /* g is contiguous: its strides from the shape. */
    int64_t gstride[VQ_MAX_DIMS], s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] < 0)
            return VQ_EINVAL;
        gstride[d] = s;
        s *= shape[d];
    }
    const int64_t *zs = wrt ? ystride : xstride;
    grad_walk w;
    w.nk = w.ns = 0;
    w.count = 1;
    int64_t kept = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1)
            continue; /* index always 0 */
        if (zs[d] != 0) {
            w.kshape[w.nk] = shape[d];
            w.kg[w.nk] = gstride[d];
            w.kx[w.nk] = xstride[d];
            w.ky[w.nk] = ystride[d];
            w.nk++;
            kept *= shape[d];
        } else {
            w.sshape[w.ns] = shape[d];
            w.sg[w.ns] = gstride[d];
            w.sx[w.ns] = xstride[d];
            w.sy[w.ns] = ystride[d];
            w.ns++;
            w.count *= shape[d];
        }
    }
    if (kept != nz)
        return VQ_EINVAL;
    int direct = w.ns == 0 && (op == VQ__CUDA_ADD || op == VQ__CUDA_SUB);
    cudaStream_t st = VQ__CUDA_STREAM(stream);
    unsigned blocks = vq__cuda_blocks(nz);
    if (dtype == VQ_F32)
        binary_grad_kernel<float><<<blocks, VQ__CUDA_THREADS, 0, st>>>(
            op, wrt, (const float *)g, (const float *)x, (const float *)y, (float *)dz, nz, w,
            direct);
    else
        binary_grad_kernel<double><<<blocks, VQ__CUDA_THREADS, 0, st>>>(
            op, wrt, (const double *)g, (const double *)x, (const double *)y, (double *)dz, nz,
            w, direct);
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

/* clamp(a x + b, 0, 1), NaN kept, in T (activation.c's HARD_SIGMOID) */
template <typename T> __device__ inline T hard_sigmoid_of(T v, T a, T b)
{
    T l = a * v + b;
    return l < 0 ? (T)0 : l > 1 ? (T)1 : l;
}

template <typename T>
__global__ void unary_kernel(int op, const T *x, T *o, int64_t n, T a, T b)
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
        case VQ__CUDA_SILU: o[i] = v / ((T)1 + exp_of(-v)); break;
        case VQ__CUDA_HARD_SIGMOID: o[i] = hard_sigmoid_of(v, a, b); break;
        case VQ__CUDA_HARD_SWISH: o[i] = v * hard_sigmoid_of(v, a, b); break;
        default: o[i] = tanh_of(v); break;
        }
    }
}

/* y: the forward output for relu, sigmoid, tanh; its input for the rest */
template <typename T>
__global__ void unary_grad_kernel(int op, const T *y, const T *g, T *d, int64_t n, T a, T b)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        T yi = y[i], gi = g[i];
        switch (op) {
        case VQ__CUDA_RELU: d[i] = yi > 0 ? gi : (T)0; break;
        case VQ__CUDA_SIGMOID: d[i] = gi * yi * ((T)1 - yi); break;
        case VQ__CUDA_SILU: {
            T s = (T)1 / ((T)1 + exp_of(-yi));
            d[i] = gi * s * ((T)1 + yi * ((T)1 - s));
            break;
        }
        case VQ__CUDA_HARD_SIGMOID:
        case VQ__CUDA_HARD_SWISH: {
            T l = a * yi + b, in = l > 0 && l < 1 ? a : (T)0;
            d[i] = op == VQ__CUDA_HARD_SIGMOID ? gi * in
                                               : gi * (hard_sigmoid_of(yi, a, b) + yi * in);
            break;
        }
        default: d[i] = gi * ((T)1 - yi * yi); break;
        }
    }
}

extern "C" int vq__cuda_unary(int op, int dtype, const void *x, void *out, int64_t n,
                              double alpha, double beta, void *stream)
{
    if (op < VQ__CUDA_RELU || op > VQ__CUDA_HARD_SWISH || n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    if (dtype == VQ_F32)
        unary_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>(op, (const float *)x, (float *)out, n,
                                                          (float)alpha, (float)beta);
    else if (dtype == VQ_F64)
        unary_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>(op, (const double *)x,
                                                           (double *)out, n, alpha, beta);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

extern "C" int vq__cuda_unary_grad(int op, int dtype, const void *y, const void *gr, void *dx,
                                   int64_t n, double alpha, double beta, void *stream)
{
    if (op < VQ__CUDA_RELU || op > VQ__CUDA_HARD_SWISH || n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    if (dtype == VQ_F32)
        unary_grad_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>(
            op, (const float *)y, (const float *)gr, (float *)dx, n, (float)alpha, (float)beta);
    else if (dtype == VQ_F64)
        unary_grad_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>(
            op, (const double *)y, (const double *)gr, (double *)dx, n, alpha, beta);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

/* ---- square_error and the regression losses' gradients ---- */

template <typename T> __global__ void square_error_kernel(const T *x, const T *y, T *o, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        T d = x[i] - y[i];
        o[i] = d * d;
    }
}

template <typename T>
__global__ void square_error_grad_kernel(const T *x, const T *y, const T *g, T *d, int64_t n,
                                         T two)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        d[i] = two * (x[i] - y[i]) * g[i];
}

/* The scale is mse_grad_kernel's, (T)(sign * g / n) in double, computed by
 * each thread that has an element (so that with dz == g, n == 1, nothing
 * reads g after the one thread wrote it). */
template <typename T>
__global__ void mse_grad_kernel(const T *x, const T *y, const T *g, T *d, int64_t n, double sign)
{
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i >= n)
        return;
    T s = (T)(sign * (double)g[0] / (double)n);
    for (; i < n; i += (int64_t)gridDim.x * blockDim.x)
        d[i] = s * (x[i] - y[i]);
}

extern "C" int vq__cuda_square_error(int dtype, const void *x, const void *y, void *out,
                                     int64_t n, void *stream)
{
    if (n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    if (dtype == VQ_F32)
        square_error_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const float *)x, (const float *)y, (float *)out, n);
    else if (dtype == VQ_F64)
        square_error_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const double *)x, (const double *)y, (double *)out, n);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

extern "C" int vq__cuda_square_error_grad(int wrt, int dtype, const void *x, const void *y,
                                          const void *gr, void *dz, int64_t n, void *stream)
{
    if (n < 0 || (wrt != 0 && wrt != 1))
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    double two = wrt ? -2 : 2;
    if (dtype == VQ_F32)
        square_error_grad_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const float *)x, (const float *)y, (const float *)gr, (float *)dz, n, (float)two);
    else if (dtype == VQ_F64)
        square_error_grad_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const double *)x, (const double *)y, (const double *)gr, (double *)dz, n, two);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

extern "C" int vq__cuda_mse_grad(int wrt, int dtype, const void *x, const void *y,
                                 const void *gr, void *dz, int64_t n, void *stream)
{
    if (n < 0 || (wrt != 0 && wrt != 1))
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    double sign = wrt ? -2 : 2;
    if (dtype == VQ_F32)
        mse_grad_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const float *)x, (const float *)y, (const float *)gr, (float *)dz, n, sign);
    else if (dtype == VQ_F64)
        mse_grad_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const double *)x, (const double *)y, (const double *)gr, (double *)dz, n, sign);
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

/* ---- the random fills: ops/cpu/init.c step for step, with its generator
 * (ops/rng_shared.h's vq__philox and vq__bits53). Every double operation is
 * written as its _rn intrinsic so that no multiply-add is fused whatever
 * the compiler flags. ---- */

/* The Philox key and first counter: (state[0], state[1]) from device
 * memory when state is given (each thread reads the two words; the
 * advance that overwrites them is a later kernel on the same stream),
 * else (seed, 0). */
__device__ inline void rng_start(const int64_t *state, uint64_t seed, uint64_t *key,
                                 uint64_t *base)
{
    if (state) {
        *key = (uint64_t)state[0];
        *base = (uint64_t)state[1];
    } else {
        *key = seed;
        *base = 0;
    }
}

/* u = (w0 >> 8) 2^-24 (f32) or vq__bits53(w0, w1) 2^-53 (f64), both exact;
 * value = a + (b * u), each rounded to double, then to float for f32. */
template <typename T>
__global__ void uniform_kernel(T *o, int64_t n, double a, double b, uint64_t seed,
                               const int64_t *state)
{
    uint64_t key, base;
    rng_start(state, seed, &key, &base);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t w[4];
        vq__philox(base + (uint64_t)i, key, w);
        if (sizeof(T) == 4) {
            double u = __dmul_rn((double)(w[0] >> 8), 0x1p-24);
            o[i] = (T)__double2float_rn(__dadd_rn(a, __dmul_rn(b, u)));
        } else {
            double u = __dmul_rn(__ull2double_rn(vq__bits53(w[0], w[1])), 0x1p-53);
            o[i] = (T)__dadd_rn(a, __dmul_rn(b, u));
        }
    }
}

#define TWO_PI 6.283185307179586 /* 2 pi rounded to double, as init.c */

/* Box-Muller in double, init.c's gaussian_kernel. */
template <typename T>
__global__ void gaussian_kernel(T *o, int64_t n, double a, double b, uint64_t seed,
                                const int64_t *state)
{
    uint64_t key, base;
    rng_start(state, seed, &key, &base);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t w[4];
        vq__philox(base + (uint64_t)i, key, w);
        double u1 = __dmul_rn(__ull2double_rn(vq__bits53(w[0], w[1]) + 1), 0x1p-53);
        double u2 = __dmul_rn(__ull2double_rn(vq__bits53(w[2], w[3])), 0x1p-53);
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
                                uint64_t seed, const void *state, void *stream)
{
    if (n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    const int64_t *st = (const int64_t *)state;
    if (dtype == VQ_F32)
        uniform_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>((float *)out, n, a, b, seed, st);
    else if (dtype == VQ_F64)
        uniform_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>((double *)out, n, a, b, seed, st);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

extern "C" int vq__cuda_gaussian(int dtype, void *out, int64_t n, double a, double b,
                                 uint64_t seed, const void *state, void *stream)
{
    if (n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    const int64_t *st = (const int64_t *)state;
    if (dtype == VQ_F32)
        gaussian_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>((float *)out, n, a, b, seed, st);
    else if (dtype == VQ_F64)
        gaussian_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>((double *)out, n, a, b, seed, st);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

/* ---- dropout: init.c's dropout_kernel. The product is one _rn multiply
 * in T, as the CPU's T * T. ---- */

__device__ inline float mul_rn(float a, float b)
{
    return __fmul_rn(a, b);
}

__device__ inline double mul_rn(double a, double b)
{
    return __dmul_rn(a, b);
}

template <typename T>
__global__ void dropout_kernel(const T *x, T *out, T *mask, int64_t n, double p, T scale,
                               int is_test, uint64_t seed, const int64_t *state)
{
    uint64_t key, base;
    rng_start(state, seed, &key, &base);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        T v = x[i], m = 1;
        if (!is_test) {
            uint32_t w[4];
            vq__philox(base + (uint64_t)i, key, w);
            double u = __dmul_rn(__ull2double_rn(vq__bits53(w[0], w[1])), 0x1p-53);
            m = u >= p ? scale : (T)0;
            v = mul_rn(v, m);
        }
        out[i] = v;
        mask[i] = m;
    }
}

extern "C" int vq__cuda_dropout(int dtype, const void *x, void *out, void *mask, int64_t n,
                                double p, double scale, int is_test, uint64_t seed,
                                const void *state, void *stream)
{
    if (n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    const int64_t *st = (const int64_t *)state;
    if (dtype == VQ_F32)
        dropout_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const float *)x, (float *)out, (float *)mask, n, p, (float)scale,
            is_test, seed, st);
    else if (dtype == VQ_F64)
        dropout_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const double *)x, (double *)out, (double *)mask, n, p, scale, is_test, seed, st);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

/* One thread: the state's two words are read before either is written,
 * so state_out may be state. */
__global__ void rng_advance_kernel(const int64_t *state, int64_t *state_out, uint64_t n)
{
    uint64_t key = (uint64_t)state[0], base = (uint64_t)state[1];
    state_out[0] = (int64_t)key;
    state_out[1] = (int64_t)(base + n);
}

extern "C" int vq__cuda_rng_advance(const void *state, void *state_out, uint64_t n, void *stream)
{
    if (!state || !state_out)
        return VQ_EINVAL;
    rng_advance_kernel<<<1, 1, 0, VQ__CUDA_STREAM(stream)>>>((const int64_t *)state,
                                                            (int64_t *)state_out, n);
    return vq__cuda_launched();
}
