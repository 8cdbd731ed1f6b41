/* CUDA kernels for the 3-D convolutions (ops/cpu/conv3d.c): vol2col and
 * col2vol, whose products are cuBLAS's (vq__cuda_matmul: ops/cuda/conv3d_host.c
 * strings them together, as for conv2d). The geometry, which element a
 * column entry reads and the gather of col2vol are ops/vol_shared.h's,
 * the code the CPU kernels run: col2vol is one thread per input element,
 * adding the entries that read it in the order of the taps, from 0, as
 * the CPU does, deterministic and without atomics. Launchers: kernels.h. */
#include "kernels.h"

#include <stdint.h>

/* *g = *v with its plane and volume sizes set, for the kernels; false,
 * nothing set, for a geometry no kernel can run. */
static bool vol_geom(const vq__vol *v, int64_t channels, vq__vol *g)
{
    if (!v || channels < 0 || v->d < 0 || v->h < 0 || v->w < 0 || v->od < 0 || v->oh < 0 ||
        v->ow < 0 || v->kd < 1 || v->kh < 1 || v->kw < 1 || v->sd < 1 || v->sh < 1 ||
        v->sw < 1 || v->dd < 1 || v->dh < 1 || v->dw < 1 || v->pd < 0 || v->ph < 0 || v->pw < 0)
        return false;
    *g = *v;
    g->plane = v->od * v->oh * v->ow;
    g->vol = v->d * v->h * v->w;
    return true;
}

template <typename T> __global__ void vol2col_kernel(const T *x, T *col, vq__vol v, int64_t n)
{
    VQ__CUDA_FOR_EACH(e, n) {
        int64_t src = vq__vol_tap(&v, e / v.plane, e % v.plane);
        col[e] = src >= 0 ? x[src] : (T)0;
    }
}

static __device__ inline float gather(const float *col, const vq__vol *v, int64_t i)
{
    return vq__vol_gather_f32(col, v, i);
}

static __device__ inline double gather(const double *col, const vq__vol *v, int64_t i)
{
    return vq__vol_gather_f64(col, v, i);
}

template <typename T> __global__ void col2vol_kernel(const T *col, T *x, vq__vol v, int64_t n)
{
    VQ__CUDA_FOR_EACH(e, n) x[e] = gather(col, &v, e);
}

extern "C" int vq__cuda_vol2col(int dtype, const void *x, void *col, const vq__vol *v,
                                int64_t channels, void *stream)
{
    vq__vol g;
    if (!vol_geom(v, channels, &g))
        return VQ_EINVAL;
    int64_t n = channels * v->kd * v->kh * v->kw * g.plane;
    if (n == 0)
        return 0;
    VQ__CUDA_LAUNCH_FLOATS(vol2col_kernel, dtype, n, VQ__CUDA_STREAM(stream),
                           ((const float *)x, (float *)col, g, n),
                           ((const double *)x, (double *)col, g, n));
    return vq__cuda_launched();
}

extern "C" int vq__cuda_col2vol(int dtype, const void *col, void *x, const vq__vol *v,
                                int64_t channels, void *stream)
{
    vq__vol g;
    if (!vol_geom(v, channels, &g))
        return VQ_EINVAL;
    int64_t n = channels * g.vol;
    if (n == 0)
        return 0;
    VQ__CUDA_LAUNCH_FLOATS(col2vol_kernel, dtype, n, VQ__CUDA_STREAM(stream),
                           ((const float *)col, (float *)x, g, n),
                           ((const double *)col, (double *)x, g, n));
    return vq__cuda_launched();
}
