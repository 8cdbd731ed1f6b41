/* CUDA kernels for the ops that move elements without computing on them
 * (ops/cpu/shape.c): one strided box copy that transpose, concat, slice and
 * their gradients are all made of, as on the CPU, and cast between all
 * dtypes with shape.c's conversion rules. reshape and the equal-dtype casts
 * are plain device-to-device copies. Launchers: kernels.h. */
#include "kernels.h"
#include "../shape_shared.h"

#include <math.h>
#include <stdint.h>

/* ---- strided box copy ---- */

/* One thread per element of the box, in the box's row-major order (the
 * destination's, for the usual contiguous destination: coalesced writes). */
template <typename E>
__global__ void strided_copy_kernel(E *dst, const E *src, int64_t total, vq__box b)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rest = i, so = 0, doff = 0;
        for (int d = b.ndim - 1; d >= 0; d--) {
            int64_t c = rest % b.shape[d];
            rest /= b.shape[d];
            so += c * b.src[d];
            doff += c * b.dst[d];
        }
        dst[doff] = src[so];
    }
}

extern "C" int vq__cuda_strided_copy(int esize, void *dst, const void *src, int ndim,
                                     const int64_t *shape, const int64_t *dst_stride,
                                     const int64_t *src_stride, void *stream)
{
    if (ndim < 0 || ndim > VQ_MAX_DIMS || (esize != 1 && esize != 4 && esize != 8))
        return VQ_EINVAL;
    vq__box b;
    b.ndim = ndim;
    int64_t total = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0)
            return VQ_EINVAL;
        b.shape[d] = shape[d];
        b.src[d] = src_stride[d];
        b.dst[d] = dst_stride[d];
        total *= shape[d];
    }
    if (total == 0)
        return 0;
    vq__box_simplify(&b);
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    if (b.ndim == 0 || (b.ndim == 1 && b.src[0] == 1 && b.dst[0] == 1))
        return vq__cuda_called(cudaMemcpyAsync(dst, src, (size_t)total * (size_t)esize,
                                               cudaMemcpyDeviceToDevice, s));
    unsigned g = vq__cuda_blocks(total);
    if (esize == 8)
        strided_copy_kernel<uint64_t><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (uint64_t *)dst, (const uint64_t *)src, total, b);
    else if (esize == 4)
        strided_copy_kernel<uint32_t><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (uint32_t *)dst, (const uint32_t *)src, total, b);
    else
        strided_copy_kernel<uint8_t><<<g, VQ__CUDA_THREADS, 0, s>>>((uint8_t *)dst,
                                                                   (const uint8_t *)src, total, b);
    return vq__cuda_launched();
}

/* ---- cast ---- */

/* One value of S converted to D, shape.c's CAST_FROM table: floats and
 * bool convert as C does (IEEE round to nearest; bool is 0 or 1), floats
 * to integers through to_i32 / to_i64, i64 to i32 wraps (modulo 2^32),
 * anything to bool is v != 0 (uint8_t stands for bool). */
template <typename D> struct convert {
    template <typename S> __device__ static D from(S v) { return (D)v; }
};
template <> struct convert<int32_t> {
    __device__ static int32_t from(float v) { return vq__to_i32((double)v); }
    __device__ static int32_t from(double v) { return vq__to_i32(v); }
    __device__ static int32_t from(int32_t v) { return v; }
    __device__ static int32_t from(int64_t v) { return (int32_t)(uint32_t)(uint64_t)v; }
    __device__ static int32_t from(uint8_t v) { return (int32_t)v; }
};
template <> struct convert<int64_t> {
    __device__ static int64_t from(float v) { return vq__to_i64((double)v); }
    __device__ static int64_t from(double v) { return vq__to_i64(v); }
    __device__ static int64_t from(int32_t v) { return (int64_t)v; }
    __device__ static int64_t from(int64_t v) { return v; }
    __device__ static int64_t from(uint8_t v) { return (int64_t)v; }
};
template <> struct convert<uint8_t> {
    template <typename S> __device__ static uint8_t from(S v) { return (uint8_t)(v != 0); }
};

template <typename S, typename D> __global__ void cast_kernel(const S *x, D *o, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        o[i] = convert<D>::from(x[i]);
}

template <typename S>
static int cast_from(int to, const void *x, void *out, int64_t n, unsigned g, cudaStream_t s)
{
    const S *src = (const S *)x;
    switch (to) {
    case VQ_F32: cast_kernel<S, float><<<g, VQ__CUDA_THREADS, 0, s>>>(src, (float *)out, n); break;
    case VQ_F64:
        cast_kernel<S, double><<<g, VQ__CUDA_THREADS, 0, s>>>(src, (double *)out, n);
        break;
    case VQ_I32:
        cast_kernel<S, int32_t><<<g, VQ__CUDA_THREADS, 0, s>>>(src, (int32_t *)out, n);
        break;
    case VQ_I64:
        cast_kernel<S, int64_t><<<g, VQ__CUDA_THREADS, 0, s>>>(src, (int64_t *)out, n);
        break;
    case VQ_BOOL:
        cast_kernel<S, uint8_t><<<g, VQ__CUDA_THREADS, 0, s>>>(src, (uint8_t *)out, n);
        break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}

static size_t dtype_bytes(int dt)
{
    switch (dt) {
    case VQ_F32:
    case VQ_I32:
    case VQ_U32: return 4;
    case VQ_F64:
    case VQ_I64:
    case VQ_U64: return 8;
    case VQ_BOOL:
    case VQ_I8:
    case VQ_U8: return 1;
    case VQ_F16:
    case VQ_BF16:
    case VQ_I16:
    case VQ_U16: return 2;
    default: return 0;
    }
}

/* A cast with a dtype beyond the first five: each element through
 * shape_shared.h's vq__cast_one, the CPU's cast_any conversions (one
 * rounding from the exact value), so the bits agree with the CPU's. The
 * switches over the dtypes are uniform across a launch. */
__global__ void cast_any_kernel(int from, const void *x, int to, void *o, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        vq__cast_one(from, x, to, o, i);
}

extern "C" int vq__cuda_cast(int from, int to, const void *x, void *out, int64_t n, void *stream)
{
    if (n < 0 || !dtype_bytes(from) || !dtype_bytes(to))
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    if (from == to)
        return vq__cuda_called(
            cudaMemcpyAsync(out, x, (size_t)n * dtype_bytes(from), cudaMemcpyDeviceToDevice, s));
    unsigned g = vq__cuda_blocks(n);
    if (from > VQ_BOOL || to > VQ_BOOL) {
        cast_any_kernel<<<g, VQ__CUDA_THREADS, 0, s>>>(from, x, to, out, n);
        return vq__cuda_launched();
    }
    switch (from) {
    case VQ_F32: return cast_from<float>(to, x, out, n, g, s);
    case VQ_F64: return cast_from<double>(to, x, out, n, g, s);
    case VQ_I32: return cast_from<int32_t>(to, x, out, n, g, s);
    case VQ_I64: return cast_from<int64_t>(to, x, out, n, g, s);
    default: return cast_from<uint8_t>(to, x, out, n, g, s);
    }
}
