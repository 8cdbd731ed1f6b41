/* CUDA kernel for cumsum (ops/cpu/cumsum.c): one thread per lane of
 * [outer, len, inner] (a line along the axis), adding its elements one
 * after the other in the CPU's order and dtype (integers as unsigned,
 * wrapping): the CPU's bits. Launcher: kernels.h. */
#include "kernels.h"

#include <stdint.h>

template <typename T, typename U>
__global__ void cumsum_kernel(const T *x, T *out, int64_t lanes, int64_t len, int64_t inner,
                              int exclusive, int reverse)
{
    VQ__CUDA_FOR_EACH(lane, lanes)
    {
        int64_t o = lane / inner, i = lane % inner;
        const T *xl = x + o * len * inner + i;
        T *ol = out + o * len * inner + i;
        U acc = 0;
        for (int64_t s = 0; s < len; s++) {
            int64_t k = reverse ? len - 1 - s : s;
            if (exclusive) {
                ol[k * inner] = (T)acc;
                acc = (U)(acc + (U)xl[k * inner]);
            } else {
                acc = s == 0 ? (U)xl[k * inner] : (U)(acc + (U)xl[k * inner]);
                ol[k * inner] = (T)acc;
            }
        }
    }
}

extern "C" int vq__cuda_cumsum(int dtype, const void *x, void *out, int64_t outer, int64_t len,
                               int64_t inner, int exclusive, int reverse, void *stream)
{
    if (outer < 0 || len < 0 || inner < 0)
        return VQ_EINVAL;
    int64_t lanes = outer * inner;
    if (lanes == 0 || len == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned b = vq__cuda_blocks(lanes);
    switch (dtype) {
    case VQ_F32:
        cumsum_kernel<float, float><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const float *)x, (float *)out, lanes, len, inner, exclusive, reverse);
        break;
    case VQ_F64:
        cumsum_kernel<double, double><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const double *)x, (double *)out, lanes, len, inner, exclusive, reverse);
        break;
    case VQ_I32:
        cumsum_kernel<int32_t, uint32_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const int32_t *)x, (int32_t *)out, lanes, len, inner, exclusive, reverse);
        break;
    case VQ_I64:
        cumsum_kernel<int64_t, uint64_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const int64_t *)x, (int64_t *)out, lanes, len, inner, exclusive, reverse);
        break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}
