/* CUDA kernel for range (ops/cpu/shape_value.c): one thread per element,
 * Start + i * Delta computed in U (the float dtype itself; i64 for the
 * integers, then narrowed), the CPU kernel's expression: its bits.
 * Launcher: kernels.h. */
#include "kernels.h"

#include <stdint.h>

template <typename T, typename U>
__global__ void range_kernel(T *out, int64_t n, U start, U delta)
{
    VQ__CUDA_FOR_EACH(i, n)
    {
        out[i] = (T)(start + (U)i * delta);
    }
}

extern "C" int vq__cuda_range(int dtype, void *out, int64_t n, double start, double delta,
                              int64_t istart, int64_t idelta, void *stream)
{
    if (n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned b = vq__cuda_blocks(n);
    switch (dtype) {
    case VQ_F32:
        range_kernel<float, float><<<b, VQ__CUDA_THREADS, 0, s>>>((float *)out, n, (float)start,
                                                                  (float)delta);
        break;
    case VQ_F64:
        range_kernel<double, double><<<b, VQ__CUDA_THREADS, 0, s>>>((double *)out, n, start,
                                                                    delta);
        break;
    case VQ_I32:
        range_kernel<int32_t, int64_t><<<b, VQ__CUDA_THREADS, 0, s>>>((int32_t *)out, n, istart,
                                                                      idelta);
        break;
    case VQ_I64:
        range_kernel<int64_t, int64_t><<<b, VQ__CUDA_THREADS, 0, s>>>((int64_t *)out, n, istart,
                                                                      idelta);
        break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}
