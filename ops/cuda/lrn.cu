/* CUDA kernels for lrn and lrn_grad (ops/cpu/lrn.c): one thread per
 * element, each calling ops/lrn_shared.h's function for it, as the CPU
 * kernel does: the same sums in the same order (pow is CUDA's, within an
 * ulp of glibc's). Launchers: kernels.h. */
#include "kernels.h"
#include "../lrn_shared.h"

#include <stdint.h>

__device__ inline float lrn_out(const float *x, const vq__lrn_geom *g, int64_t k)
{
    return vq__lrn_out_f32(x, g, k);
}
__device__ inline double lrn_out(const double *x, const vq__lrn_geom *g, int64_t k)
{
    return vq__lrn_out_f64(x, g, k);
}
__device__ inline float lrn_dx(const float *x, const float *dy, const vq__lrn_geom *g, int64_t k)
{
    return vq__lrn_grad_f32(x, dy, g, k);
}
__device__ inline double lrn_dx(const double *x, const double *dy, const vq__lrn_geom *g,
                                int64_t k)
{
    return vq__lrn_grad_f64(x, dy, g, k);
}

/* Element e of [n, C, inner]: its lane's channel 0 and its channel. dy
 * NULL: lrn; else lrn_grad. */
template <typename T>
__global__ void lrn_kernel(const T *x, const T *dy, T *out, int64_t total, vq__lrn_geom g)
{
    VQ__CUDA_FOR_EACH(e, total)
    {
        int64_t i = e % g.inner, k = e / g.inner % g.c, b = e / (g.inner * g.c);
        int64_t lane = b * g.c * g.inner + i;
        out[e] = dy ? lrn_dx(x + lane, dy + lane, &g, k) : lrn_out(x + lane, &g, k);
    }
}

extern "C" int vq__cuda_lrn(int dtype, const void *x, const void *dy, void *out, int64_t n,
                            const vq__lrn_geom *g, void *stream)
{
    if (n < 0 || g->c < 0 || g->inner < 0)
        return VQ_EINVAL;
    int64_t total = n * g->c * g->inner;
    if (total == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    VQ__CUDA_LAUNCH_FLOATS(lrn_kernel, dtype, total, s,
                           ((const float *)x, (const float *)dy, (float *)out, total, *g),
                           ((const double *)x, (const double *)dy, (double *)out, total, *g));
    return vq__cuda_launched();
}
