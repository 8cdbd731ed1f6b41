/* CUDA kernels for scatter_elements, scatter_nd and gather_nd
 * (ops/cpu/scatter.c), and the device-side check of scatter_nd's and
 * gather_nd's index tuples. The scatters run one thread per lane
 * (ops/scatter_shared.h): each thread applies the updates of its lane in
 * Indices' order with scatter_shared.h's arithmetic, so every element of
 * Out sees its updates in the CPU kernel's order, duplicates and rounding
 * included: the CPU's bits, without atomics. The price is that a lane's
 * updates run one after another: scatter_nd with few elements per slice
 * and many tuples has little parallelism. Launchers: kernels.h. */
#include "kernels.h"

#include <stdint.h>

/* scatter_shared.h's combine rule of each element type (uint8_t: bool). */
__device__ inline float combine(int red, float a, float v)
{
    return vq__scatter_f32(red, a, v);
}
__device__ inline double combine(int red, double a, double v)
{
    return vq__scatter_f64(red, a, v);
}
__device__ inline int32_t combine(int red, int32_t a, int32_t v)
{
    return vq__scatter_i32(red, a, v);
}
__device__ inline int64_t combine(int red, int64_t a, int64_t v)
{
    return vq__scatter_i64(red, a, v);
}
__device__ inline uint8_t combine(int red, uint8_t a, uint8_t v)
{
    return vq__scatter_bool(red, a, v);
}

/* ---- the index tuples' check ---- */

__global__ void index_nd_check_kernel(const void *idx, bool is64, int64_t n, vq__nd_geom g,
                                      unsigned long long *bad)
{
    VQ__CUDA_FOR_EACH(j, n)
    {
        int64_t v = vq__index_at(idx, is64, j), dim = g.dim[j % g.k];
        if (v < -dim || v >= dim)
            atomicMin(bad, (unsigned long long)j);
    }
}

extern "C" int vq__cuda_index_nd_check(int index_dtype, const void *idx, int64_t n,
                                       const vq__nd_geom *geo, unsigned long long *bad_at,
                                       void *stream)
{
    if (n < 0 || !bad_at || (index_dtype != VQ_I32 && index_dtype != VQ_I64))
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    if (geo->k <= 0)
        return VQ_EINVAL;
    index_nd_check_kernel<<<vq__cuda_blocks(n), VQ__CUDA_THREADS, 0, VQ__CUDA_STREAM(stream)>>>(
        idx, index_dtype == VQ_I64, n, *geo, bad_at);
    return vq__cuda_launched();
}

/* ---- scatter_elements ---- */

template <typename T>
__global__ void scatter_elements_kernel(const void *idx, bool is64, const T *upd, T *out,
                                        vq__elements_geom g, int red)
{
    int64_t us = g.ustride[g.axis], xs = g.xstride[g.axis];
    VQ__CUDA_FOR_EACH(l, g.lanes)
    {
        int64_t u0, x0;
        vq__elements_lane(&g, l, &u0, &x0);
        for (int64_t j = 0; j < g.len; j++) {
            int64_t e = u0 + j * us, v = vq__index_at(idx, is64, e);
            v += v < 0 ? g.dim : 0;
            if (v < 0 || v >= g.dim)
                continue;
            T *d = out + x0 + v * xs;
            *d = combine(red, *d, upd[e]);
        }
    }
}

/* out = x on s; 0 or VQ_EIO. */
static int copy_x(const void *x, void *out, int64_t nx, size_t es, cudaStream_t s)
{
    if (nx == 0)
        return 0;
    return vq__cuda_called(cudaMemcpyAsync(out, x, (size_t)nx * es, cudaMemcpyDeviceToDevice, s));
}

/* Whether dtype and reduction go together, and dtype's element size. */
static bool scatter_dtype_ok(int dtype, int reduction, size_t *es)
{
    if (reduction < VQ__SCATTER_NONE || reduction > VQ__SCATTER_MIN)
        return false;
    switch (dtype) {
    case VQ_F32:
    case VQ_I32: *es = 4; return true;
    case VQ_F64:
    case VQ_I64: *es = 8; return true;
    case VQ_BOOL: *es = 1; return reduction == VQ__SCATTER_NONE;
    default: return false;
    }
}

extern "C" int vq__cuda_scatter_elements(int dtype, int index_dtype, int reduction, const void *x,
                                         const void *idx, const void *upd, void *out, int64_t nx,
                                         const vq__elements_geom *geo, void *stream)
{
    size_t es;
    if (nx < 0 || !scatter_dtype_ok(dtype, reduction, &es) ||
        (index_dtype != VQ_I32 && index_dtype != VQ_I64) || geo->axis < 0 ||
        geo->axis >= geo->ndim)
        return VQ_EINVAL;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    int rc = copy_x(x, out, nx, es, s);
    if (rc < 0 || geo->lanes == 0)
        return rc;
    bool is64 = index_dtype == VQ_I64;
    unsigned b = vq__cuda_blocks(geo->lanes);
    switch (dtype) {
    case VQ_F32:
        scatter_elements_kernel<float><<<b, VQ__CUDA_THREADS, 0, s>>>(
            idx, is64, (const float *)upd, (float *)out, *geo, reduction);
        break;
    case VQ_F64:
        scatter_elements_kernel<double><<<b, VQ__CUDA_THREADS, 0, s>>>(
            idx, is64, (const double *)upd, (double *)out, *geo, reduction);
        break;
    case VQ_I32:
        scatter_elements_kernel<int32_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            idx, is64, (const int32_t *)upd, (int32_t *)out, *geo, reduction);
        break;
    case VQ_I64:
        scatter_elements_kernel<int64_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            idx, is64, (const int64_t *)upd, (int64_t *)out, *geo, reduction);
        break;
    default:
        scatter_elements_kernel<uint8_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            idx, is64, (const uint8_t *)upd, (uint8_t *)out, *geo, reduction);
        break;
    }
    return vq__cuda_launched();
}

/* ---- scatter_nd ---- */

template <typename T>
__global__ void scatter_nd_kernel(const void *idx, bool is64, const T *upd, T *out, vq__nd_geom g,
                                  int red)
{
    VQ__CUDA_FOR_EACH(lane, g.batches * g.slice)
    {
        int64_t b = lane / g.slice, i = lane % g.slice;
        for (int64_t n = 0; n < g.n; n++) {
            int64_t t = b * g.n + n, off = vq__nd_source(&g, idx, is64, t);
            if (off < 0)
                continue;
            T *d = out + off + i;
            *d = combine(red, *d, upd[t * g.slice + i]);
        }
    }
}

extern "C" int vq__cuda_scatter_nd(int dtype, int index_dtype, int reduction, const void *x,
                                   const void *idx, const void *upd, void *out, int64_t nx,
                                   const vq__nd_geom *geo, void *stream)
{
    size_t es;
    if (nx < 0 || !scatter_dtype_ok(dtype, reduction, &es) ||
        (index_dtype != VQ_I32 && index_dtype != VQ_I64))
        return VQ_EINVAL;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    int rc = copy_x(x, out, nx, es, s);
    int64_t lanes = geo->batches * geo->slice;
    if (rc < 0 || lanes == 0 || geo->n == 0)
        return rc;
    bool is64 = index_dtype == VQ_I64;
    unsigned b = vq__cuda_blocks(lanes);
    switch (dtype) {
    case VQ_F32:
        scatter_nd_kernel<float><<<b, VQ__CUDA_THREADS, 0, s>>>(idx, is64, (const float *)upd,
                                                                (float *)out, *geo, reduction);
        break;
    case VQ_F64:
        scatter_nd_kernel<double><<<b, VQ__CUDA_THREADS, 0, s>>>(idx, is64, (const double *)upd,
                                                                 (double *)out, *geo, reduction);
        break;
    case VQ_I32:
        scatter_nd_kernel<int32_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            idx, is64, (const int32_t *)upd, (int32_t *)out, *geo, reduction);
        break;
    case VQ_I64:
        scatter_nd_kernel<int64_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            idx, is64, (const int64_t *)upd, (int64_t *)out, *geo, reduction);
        break;
    default:
        scatter_nd_kernel<uint8_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            idx, is64, (const uint8_t *)upd, (uint8_t *)out, *geo, reduction);
        break;
    }
    return vq__cuda_launched();
}

/* ---- gather_nd ---- */

template <typename E>
__global__ void gather_nd_kernel(const E *x, const void *idx, bool is64, E *out, int64_t total,
                                 vq__nd_geom g)
{
    VQ__CUDA_FOR_EACH(e, total)
    {
        int64_t off = vq__nd_source(&g, idx, is64, e / g.slice);
        out[e] = off >= 0 ? x[off + e % g.slice] : (E)0;
    }
}

extern "C" int vq__cuda_gather_nd(int esize, int index_dtype, const void *x, const void *idx,
                                  void *out, const vq__nd_geom *geo, void *stream)
{
    if (index_dtype != VQ_I32 && index_dtype != VQ_I64)
        return VQ_EINVAL;
    int64_t total = geo->batches * geo->n * geo->slice;
    if (total < 0)
        return VQ_EINVAL;
    if (total == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    bool is64 = index_dtype == VQ_I64;
    unsigned b = vq__cuda_blocks(total);
    switch (esize) {
    case 8:
        gather_nd_kernel<uint64_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const uint64_t *)x, idx, is64, (uint64_t *)out, total, *geo);
        break;
    case 4:
        gather_nd_kernel<uint32_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const uint32_t *)x, idx, is64, (uint32_t *)out, total, *geo);
        break;
    case 1:
        gather_nd_kernel<uint8_t><<<b, VQ__CUDA_THREADS, 0, s>>>((const uint8_t *)x, idx, is64,
                                                                 (uint8_t *)out, total, *geo);
        break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}
