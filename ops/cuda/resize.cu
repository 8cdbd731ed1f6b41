/* CUDA kernels for resize and resize_grad (ops/cpu/resize.c): one thread
 * per element of Out (of dOut for the gradient), each computing its taps
 * along every dim with ops/resize_shared.h's rules, the ones the CPU
 * kernels tabulate. nearest copies the element its taps name (every
 * dtype); linear and cubic evaluate the same nested sum in double as the
 * CPU (--fmad=false: the CPU's bits); the gradient adds each element of
 * dOut times its taps' weight products into dX with atomics, so it agrees
 * with the CPU's sums to rounding. Launchers: kernels.h. */
#include "kernels.h"
#include "../resize_shared.h"

#include <stdint.h>

/* Out's element e's taps into pt; false when it is extrapolated. */
__device__ static bool point_of(const vq__resize_geom &g, int64_t e, vq__resize_point *pt)
{
    int64_t c[VQ_MAX_DIMS], xs[VQ_MAX_DIMS], stride = 1;
    for (int d = g.ndim - 1; d >= 0; d--) {
        c[d] = e % g.oshape[d];
        e /= g.oshape[d];
        xs[d] = stride;
        stride *= g.xshape[d];
    }
    pt->m = 0;
    pt->base = 0;
    for (int d = 0; d < g.ndim; d++) {
        int64_t idx[VQ__RESIZE_TAPS];
        double w[VQ__RESIZE_TAPS];
        int n = vq__resize_taps(&g, d, c[d], idx, w);
        if (n == 0)
            return false;
        vq__resize_point_add(pt, n, idx, w, xs[d]);
    }
    return true;
}

template <typename E>
__global__ void resize_nearest_kernel(const E *x, E *out, int64_t total, vq__resize_geom g,
                                      E value)
{
    VQ__CUDA_FOR_EACH(e, total)
    {
        vq__resize_point pt;
        out[e] = point_of(g, e, &pt) ? x[pt.base] : value;
    }
}

template <typename T>
__global__ void resize_interp_kernel(const T *x, T *out, int64_t total, vq__resize_geom g,
                                     double value)
{
    VQ__CUDA_FOR_EACH(e, total)
    {
        vq__resize_point pt;
        double v = point_of(g, e, &pt) ? vq__resize_point_sum(&pt, x, sizeof(T) == 8) : value;
        out[e] = (T)v;
    }
}

template <typename T>
__global__ void resize_grad_kernel(const T *g, T *dx, int64_t total, vq__resize_geom geo)
{
    VQ__CUDA_FOR_EACH(e, total)
    {
        vq__resize_point pt;
        if (!point_of(geo, e, &pt))
            continue;
#define ADD(off, v) atomicAdd(&dx[off], (T)(v))
        VQ__RESIZE_POINT_SCATTER(&pt, (double)g[e], ADD);
#undef ADD
    }
}

/* The element counts of geo's X and Out; VQ_EINVAL for a bad geometry. */
static int geom_check(const vq__resize_geom *geo, int64_t *nx, int64_t *no)
{
    if (geo->ndim < 1 || geo->ndim > VQ_MAX_DIMS)
        return VQ_EINVAL;
    *nx = *no = 1;
    for (int d = 0; d < geo->ndim; d++) {
        if (geo->xshape[d] < 0 || geo->oshape[d] < 0 ||
            (geo->xshape[d] == 0 && geo->oshape[d] > 0))
            return VQ_EINVAL;
        *nx *= geo->xshape[d];
        *no *= geo->oshape[d];
    }
    return 0;
}

extern "C" int vq__cuda_resize(int dtype, const void *x, void *out, const vq__resize_geom *geo,
                               double value, int64_t ivalue, void *stream)
{
    int64_t nx, no;
    if (geom_check(geo, &nx, &no) < 0)
        return VQ_EINVAL;
    if (no == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned b = vq__cuda_blocks(no);
    if (geo->mode != VQ__RESIZE_NEAREST) {
        VQ__CUDA_LAUNCH_FLOATS(resize_interp_kernel, dtype, no, s,
                               ((const float *)x, (float *)out, no, *geo, value),
                               ((const double *)x, (double *)out, no, *geo, value));
        return vq__cuda_launched();
    }
    switch (dtype) {
    case VQ_F32:
        resize_nearest_kernel<float><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const float *)x, (float *)out, no, *geo, (float)value);
        break;
    case VQ_F64:
        resize_nearest_kernel<double><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const double *)x, (double *)out, no, *geo, value);
        break;
    case VQ_I32:
        resize_nearest_kernel<int32_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const int32_t *)x, (int32_t *)out, no, *geo, (int32_t)ivalue);
        break;
    case VQ_I64:
        resize_nearest_kernel<int64_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const int64_t *)x, (int64_t *)out, no, *geo, ivalue);
        break;
    case VQ_BOOL:
        resize_nearest_kernel<uint8_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const uint8_t *)x, (uint8_t *)out, no, *geo, (uint8_t)(ivalue != 0));
        break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}

extern "C" int vq__cuda_resize_grad(int dtype, const void *g, void *dx,
                                    const vq__resize_geom *geo, void *stream)
{
    int64_t nx, no;
    if (geom_check(geo, &nx, &no) < 0 || (dtype != VQ_F32 && dtype != VQ_F64))
        return VQ_EINVAL;
    if (nx == 0)
        return 0;
    size_t es = dtype == VQ_F32 ? sizeof(float) : sizeof(double);
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    int rc = vq__cuda_called(cudaMemsetAsync(dx, 0, (size_t)nx * es, s));
    if (rc < 0 || no == 0)
        return rc;
    VQ__CUDA_LAUNCH_FLOATS(resize_grad_kernel, dtype, no, s,
                           ((const float *)g, (float *)dx, no, *geo),
                           ((const double *)g, (double *)dx, no, *geo));
    return vq__cuda_launched();
}
