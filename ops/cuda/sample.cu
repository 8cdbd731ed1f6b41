/* CUDA kernels for grid_sample, roi_align and their gradients
 * (ops/cpu/sample.c): the CPU kernels' loops with one thread per grid
 * point (grid_sample, and its gradient wrt Grid) or per element of Out
 * (roi_align), each calling ops/sample_shared.h's functions as the CPU
 * does (--fmad=false: the CPU's bits). The gradients into X add with
 * atomics, so they agree with the CPU's sums to rounding. Launchers:
 * kernels.h. */
#include "kernels.h"
#include "../sample_shared.h"

#include <stdint.h>

template <typename L> __device__ inline int64_t batch_at(const void *b, int64_t r)
{
    return (int64_t)((const L *)b)[r];
}

/* RoI r's batch index, or -1 (noted at *bad_row) when it is outside
 * [0, n). */
__device__ inline int64_t batch_of(int batch_dtype, const void *b, int64_t r, int64_t n,
                                   unsigned long long *bad_row)
{
    int64_t i = batch_dtype == VQ_I64 ? batch_at<int64_t>(b, r) : batch_at<int32_t>(b, r);
    if (i >= 0 && i < n)
        return i;
    atomicMin(bad_row, (unsigned long long)r);
    return -1;
}

/* The kernels for T, the shared functions' suffix S. */
#define SAMPLE_KERNELS(T, S)                                                                    \
    __global__ void grid_sample_##S(const T *x, const T *grid, T *out, int64_t total,           \
                                    int64_t c, int64_t h, int64_t w, int64_t np,                \
                                    vq__grid_sample_params p)                                   \
    {                                                                                           \
        VQ__CUDA_FOR_EACH(e, total)                                                             \
        {                                                                                       \
            int64_t b = e / np, s = e % np;                                                     \
            vq__grid_pt_##S pt;                                                                 \
            vq__grid_point_##S(grid[2 * e], grid[2 * e + 1], h, w, &p, &pt);                    \
            for (int64_t ch = 0; ch < c; ch++)                                                  \
                out[(b * c + ch) * np + s] = vq__grid_value_##S(&pt, x + (b * c + ch) * h * w); \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    __global__ void grid_dx_##S(const T *grid, const T *g, T *dx, int64_t total, int64_t c,     \
                                int64_t h, int64_t w, int64_t np, vq__grid_sample_params p)     \
    {                                                                                           \
        VQ__CUDA_FOR_EACH(e, total)                                                             \
        {                                                                                       \
            int64_t b = e / np, s = e % np, off[16];                                            \
            T amt[16];                                                                          \
            vq__grid_pt_##S pt;                                                                 \
            vq__grid_point_##S(grid[2 * e], grid[2 * e + 1], h, w, &p, &pt);                    \
            for (int64_t ch = 0; ch < c; ch++) {                                                \
                T *img = dx + (b * c + ch) * h * w;                                             \
                int m = vq__grid_scatter_##S(&pt, g[(b * c + ch) * np + s], off, amt);          \
                for (int t = 0; t < m; t++)                                                     \
                    atomicAdd(&img[off[t]], amt[t]);                                            \
            }                                                                                   \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    __global__ void grid_dgrid_##S(const T *x, const T *grid, const T *g, T *dgrid,             \
                                   int64_t total, int64_t c, int64_t h, int64_t w, int64_t np,  \
                                   vq__grid_sample_params p)                                    \
    {                                                                                           \
        VQ__CUDA_FOR_EACH(e, total)                                                             \
        {                                                                                       \
            int64_t b = e / np, s = e % np;                                                     \
            vq__grid_pt_##S pt;                                                                 \
            vq__grid_point_##S(grid[2 * e], grid[2 * e + 1], h, w, &p, &pt);                    \
            T gx = 0, gy = 0;                                                                   \
            for (int64_t ch = 0; ch < c; ch++)                                                  \
                vq__grid_dgrid_##S(&pt, x + (b * c + ch) * h * w, g[(b * c + ch) * np + s],     \
                                   &gx, &gy);                                                   \
            dgrid[2 * e] = pt.mx * gx;                                                          \
            dgrid[2 * e + 1] = pt.my * gy;                                                      \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    __global__ void roi_align_##S(const T *x, const T *rois, int batch_dtype, const void *batch, \
                                  T *out, int64_t total, int64_t n, int64_t c, int64_t h,       \
                                  int64_t w, vq__roi_align_params p,                            \
                                  unsigned long long *bad_row)                                  \
    {                                                                                           \
        int64_t bins = p.oh * p.ow;                                                             \
        VQ__CUDA_FOR_EACH(e, total)                                                             \
        {                                                                                       \
            int64_t r = e / (c * bins), ch = e / bins % c, bin = e % bins;                      \
            int64_t b = batch_of(batch_dtype, batch, r, n, bad_row);                            \
            if (b < 0) {                                                                        \
                out[e] = 0;                                                                     \
                continue;                                                                       \
            }                                                                                   \
            vq__roi_box_##S box;                                                                \
            vq__roi_box_of_##S(rois + 4 * r, &p, &box);                                         \
            out[e] = vq__roi_bin_##S(&box, p.mode, bin / p.ow, bin % p.ow,                      \
                                     x + (b * c + ch) * h * w, h, w);                           \
        }                                                                                       \
    }                                                                                           \
                                                                                                \
    __global__ void roi_align_grad_##S(const T *rois, int batch_dtype, const void *batch,       \
                                       const T *g, T *dx, int64_t total, int64_t n, int64_t c,  \
                                       int64_t h, int64_t w, vq__roi_align_params p,            \
                                       unsigned long long *bad_row)                             \
    {                                                                                           \
        int64_t bins = p.oh * p.ow;                                                             \
        VQ__CUDA_FOR_EACH(e, total)                                                             \
        {                                                                                       \
            int64_t r = e / (c * bins), ch = e / bins % c, bin = e % bins;                      \
            int64_t b = batch_of(batch_dtype, batch, r, n, bad_row);                            \
            if (b < 0)                                                                          \
                continue;                                                                       \
            vq__roi_box_##S box;                                                                \
            vq__roi_box_of_##S(rois + 4 * r, &p, &box);                                         \
            T *img = dx + (b * c + ch) * h * w;                                                 \
            for (int64_t iy = 0; iy < box.gh; iy++)                                             \
                for (int64_t ix = 0; ix < box.gw; ix++) {                                       \
                    int64_t pos[4];                                                             \
                    T wt[4];                                                                    \
                    if (!vq__roi_sample_##S(&box, bin / p.ow, bin % p.ow, iy, ix, h, w, pos,    \
                                            wt))                                                \
                        continue;                                                               \
                    for (int t = 0; t < 4; t++)                                                 \
                        atomicAdd(&img[pos[t]], g[e] * wt[t] / box.count);                      \
                }                                                                               \
        }                                                                                       \
    }

SAMPLE_KERNELS(float, f32)
SAMPLE_KERNELS(double, f64)

/* Launches kernel_f32 or kernel_f64 by dtype over n threads' worth of
 * work on stream s, the pointers cast to the type. */
#define LAUNCH(kernel, dtype, n, s, ...)                                                   \
    do {                                                                                   \
        if ((dtype) == VQ_F32) {                                                           \
            typedef float T;                                                               \
            kernel##_f32<<<vq__cuda_blocks(n), VQ__CUDA_THREADS, 0, (s)>>>(__VA_ARGS__);   \
        } else if ((dtype) == VQ_F64) {                                                    \
            typedef double T;                                                              \
            kernel##_f64<<<vq__cuda_blocks(n), VQ__CUDA_THREADS, 0, (s)>>>(__VA_ARGS__);   \
        } else {                                                                           \
            return VQ_EINVAL;                                                              \
        }                                                                                  \
    } while (0)

static bool dims_bad(int64_t n, int64_t c, int64_t h, int64_t w, int64_t m)
{
    return n < 0 || c < 0 || h < 0 || w < 0 || m < 0;
}

extern "C" int vq__cuda_grid_sample(int dtype, const void *x, const void *grid, void *out,
                                    int64_t n, int64_t c, int64_t h, int64_t w, int64_t np,
                                    const vq__grid_sample_params *p, void *stream)
{
    if (dims_bad(n, c, h, w, np))
        return VQ_EINVAL;
    int64_t total = n * np;
    if (total == 0 || c == 0)
        return 0;
    LAUNCH(grid_sample, dtype, total, VQ__CUDA_STREAM(stream), (const T *)x, (const T *)grid,
           (T *)out, total, c, h, w, np, *p);
    return vq__cuda_launched();
}

extern "C" int vq__cuda_grid_sample_grad(int dtype, const void *x, const void *grid,
                                         const void *dout, void *d, int64_t n, int64_t c,
                                         int64_t h, int64_t w, int64_t np,
                                         const vq__grid_sample_params *p, void *stream)
{
    if (dims_bad(n, c, h, w, np) || (dtype != VQ_F32 && dtype != VQ_F64))
        return VQ_EINVAL;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    int64_t total = n * np;
    if (p->wrt == 1) {
        if (total == 0)
            return 0;
        LAUNCH(grid_dgrid, dtype, total, s, (const T *)x, (const T *)grid, (const T *)dout,
               (T *)d, total, c, h, w, np, *p);
        return vq__cuda_launched();
    }
    size_t es = dtype == VQ_F32 ? sizeof(float) : sizeof(double);
    int64_t nx = n * c * h * w;
    if (nx == 0)
        return 0;
    int rc = vq__cuda_called(cudaMemsetAsync(d, 0, (size_t)nx * es, s));
    if (rc < 0 || total == 0)
        return rc;
    LAUNCH(grid_dx, dtype, total, s, (const T *)grid, (const T *)dout, (T *)d, total, c, h, w, np,
           *p);
    return vq__cuda_launched();
}

extern "C" int vq__cuda_roi_align(int dtype, int batch_dtype, const void *x, const void *rois,
                                  const void *batch, void *out, int64_t n, int64_t c, int64_t h,
                                  int64_t w, int64_t nroi, const vq__roi_align_params *p,
                                  unsigned long long *bad_row, void *stream)
{
    if (dims_bad(n, c, h, w, nroi) || p->oh < 1 || p->ow < 1 || !bad_row ||
        (batch_dtype != VQ_I32 && batch_dtype != VQ_I64))
        return VQ_EINVAL;
    int64_t total = nroi * c * p->oh * p->ow;
    if (total == 0)
        return 0;
    LAUNCH(roi_align, dtype, total, VQ__CUDA_STREAM(stream), (const T *)x, (const T *)rois,
           batch_dtype, batch, (T *)out, total, n, c, h, w, *p, bad_row);
    return vq__cuda_launched();
}

extern "C" int vq__cuda_roi_align_grad(int dtype, int batch_dtype, const void *rois,
                                       const void *batch, const void *dout, void *dx, int64_t n,
                                       int64_t c, int64_t h, int64_t w, int64_t nroi,
                                       const vq__roi_align_params *p, unsigned long long *bad_row,
                                       void *stream)
{
    if (dims_bad(n, c, h, w, nroi) || p->oh < 1 || p->ow < 1 || !bad_row ||
        (batch_dtype != VQ_I32 && batch_dtype != VQ_I64) || (dtype != VQ_F32 && dtype != VQ_F64))
        return VQ_EINVAL;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    size_t es = dtype == VQ_F32 ? sizeof(float) : sizeof(double);
    int64_t nx = n * c * h * w, total = nroi * c * p->oh * p->ow;
    int rc = nx ? vq__cuda_called(cudaMemsetAsync(dx, 0, (size_t)nx * es, s)) : 0;
    if (rc < 0 || total == 0)
        return rc;
    LAUNCH(roi_align_grad, dtype, total, s, (const T *)rois, batch_dtype, batch, (const T *)dout,
           (T *)dx, total, n, c, h, w, *p, bad_row);
    return vq__cuda_launched();
}
