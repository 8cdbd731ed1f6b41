/* CUDA kernels for det and det_grad (ops/cpu/det.c): one thread per
 * matrix, running ops/linalg_shared.h's LU and cofactors in double on a
 * slice of a scratch buffer, as the CPU does: the CPU's bits. Launchers:
 * kernels.h. */
#include "kernels.h"
#include "../linalg_shared.h"

#include <stdint.h>

template <typename T>
__global__ void det_kernel(const T *x, T *out, double *w, int64_t batch, int64_t n)
{
    VQ__CUDA_FOR_EACH(b, batch)
    {
        int64_t nn = n * n;
        double *lu = w + b * (nn + n);
        for (int64_t i = 0; i < nn; i++)
            lu[i] = (double)x[b * nn + i];
        out[b] = (T)vq__lu_det(lu, n, lu + nn);
    }
}

template <typename T>
__global__ void det_grad_kernel(const T *x, const T *g, T *dx, double *w, int64_t batch,
                                int64_t n)
{
    VQ__CUDA_FOR_EACH(b, batch)
    {
        int64_t nn = n * n;
        double *xm = w + b * (4 * nn + 2 * n), *c = xm + nn;
        for (int64_t i = 0; i < nn; i++)
            xm[i] = (double)x[b * nn + i];
        vq__cofactors(xm, n, c, c + nn);
        double gb = (double)g[b];
        for (int64_t i = 0; i < nn; i++)
            dx[b * nn + i] = (T)(gb * c[i]);
    }
}

extern "C" int vq__cuda_det(int dtype, const void *x, void *out, double *scratch, int64_t batch,
                            int64_t n, void *stream)
{
    if (batch < 0 || n < 0)
        return VQ_EINVAL;
    if (batch == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    VQ__CUDA_LAUNCH_FLOATS(det_kernel, dtype, batch, s,
                    ((const float *)x, (float *)out, scratch, batch, n),
                    ((const double *)x, (double *)out, scratch, batch, n));
    return vq__cuda_launched();
}

extern "C" int vq__cuda_det_grad(int dtype, const void *x, const void *g, void *dx,
                                 double *scratch, int64_t batch, int64_t n, void *stream)
{
    if (batch < 0 || n < 0)
        return VQ_EINVAL;
    if (batch == 0 || n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    VQ__CUDA_LAUNCH_FLOATS(det_grad_kernel, dtype, batch, s,
                    ((const float *)x, (const float *)g, (float *)dx, scratch, batch, n),
                    ((const double *)x, (const double *)g, (double *)dx, scratch, batch, n));
    return vq__cuda_launched();
}
