/* CUDA kernels for max_unpool2d and its gradient (ops/cpu/unpool.c): where
 * indices repeat, the CPU's last write wins; here each place of Out first
 * learns its last writer (atomicMax of 1 + the element's position, which
 * does not depend on the threads' order), then every place of Out, or of
 * dX, is written by one thread: the CPU's bits. Launchers: kernels.h. */
#include "kernels.h"

#include <stdint.h>

template <typename I>
__global__ void unpool_owner_kernel(const I *idx, unsigned long long *owner, int64_t n,
                                    int64_t nout)
{
    VQ__CUDA_FOR_EACH(i, n)
    {
        int64_t at = (int64_t)idx[i];
        if (at >= 0 && at < nout)
            atomicMax(owner + at, (unsigned long long)(i + 1));
    }
}

template <typename T>
__global__ void unpool_gather_kernel(const T *x, const unsigned long long *owner, T *out,
                                     int64_t nout)
{
    VQ__CUDA_FOR_EACH(o, nout)
    {
        unsigned long long w = owner[o];
        out[o] = w ? x[w - 1] : (T)0;
    }
}

template <typename T, typename I>
__global__ void unpool_grad_kernel(const I *idx, const T *g, const unsigned long long *owner,
                                   T *dx, int64_t n, int64_t nout)
{
    VQ__CUDA_FOR_EACH(i, n)
    {
        int64_t at = (int64_t)idx[i];
        bool wins = at >= 0 && at < nout && owner[at] == (unsigned long long)(i + 1);
        dx[i] = wins ? g[at] : (T)0;
    }
}

/* owner = 0, then each place's last writer. */
static int owners(int index_dtype, const void *idx, unsigned long long *owner, int64_t n,
                  int64_t nout, cudaStream_t s)
{
    if (cudaMemsetAsync(owner, 0, (size_t)nout * sizeof *owner, s) != cudaSuccess)
        return vq__cuda_launched();
    if (n == 0)
        return 0;
    unsigned b = vq__cuda_blocks(n);
    if (index_dtype == VQ_I32)
        unpool_owner_kernel<int32_t>
            <<<b, VQ__CUDA_THREADS, 0, s>>>((const int32_t *)idx, owner, n, nout);
    else if (index_dtype == VQ_I64)
        unpool_owner_kernel<int64_t>
            <<<b, VQ__CUDA_THREADS, 0, s>>>((const int64_t *)idx, owner, n, nout);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

extern "C" int vq__cuda_max_unpool(int dtype, int index_dtype, const void *x, const void *idx,
                                   void *out, unsigned long long *owner, int64_t n, int64_t nout,
                                   void *stream)
{
    if (n < 0 || nout < 0 || (dtype != VQ_F32 && dtype != VQ_F64))
        return VQ_EINVAL;
    if (nout == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    int rc = owners(index_dtype, idx, owner, n, nout, s);
    if (rc)
        return rc;
    VQ__CUDA_LAUNCH_FLOATS(unpool_gather_kernel, dtype, nout, s,
                           ((const float *)x, owner, (float *)out, nout),
                           ((const double *)x, owner, (double *)out, nout));
    return vq__cuda_launched();
}

extern "C" int vq__cuda_max_unpool_grad(int dtype, int index_dtype, const void *idx, const void *g,
                                        void *dx, unsigned long long *owner, int64_t n,
                                        int64_t nout, void *stream)
{
    if (n < 0 || nout < 0 || (dtype != VQ_F32 && dtype != VQ_F64) ||
        (index_dtype != VQ_I32 && index_dtype != VQ_I64))
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    int rc = nout ? owners(index_dtype, idx, owner, n, nout, s) : 0;
    if (rc)
        return rc;
    unsigned b = vq__cuda_blocks(n);
    if (dtype == VQ_F32 && index_dtype == VQ_I32)
        unpool_grad_kernel<float, int32_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const int32_t *)idx, (const float *)g, owner, (float *)dx, n, nout);
    else if (dtype == VQ_F32)
        unpool_grad_kernel<float, int64_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const int64_t *)idx, (const float *)g, owner, (float *)dx, n, nout);
    else if (index_dtype == VQ_I32)
        unpool_grad_kernel<double, int32_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const int32_t *)idx, (const double *)g, owner, (double *)dx, n, nout);
    else
        unpool_grad_kernel<double, int64_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const int64_t *)idx, (const double *)g, owner, (double *)dx, n, nout);
    return vq__cuda_launched();
}
