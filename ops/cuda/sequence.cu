/* CUDA kernel for reverse_sequence (ops/cpu/sequence.c): one thread per
 * element of Out, copying the element of X the CPU's row copy moves there
 * (elements of 1, 4 or 8 bytes): the CPU's bytes. A bad length (the
 * device-side range check reports it, ops/cuda/checks.c) reverses
 * nothing. Launcher: kernels.h. */
#include "kernels.h"

#include <stdint.h>

template <typename E, typename L>
__global__ void reverse_sequence_kernel(const E *x, const L *lens, E *out, int64_t total,
                                        int64_t d0, int64_t d1, int64_t inner, int batch_axis)
{
    VQ__CUDA_FOR_EACH(e, total)
    {
        int64_t i = e % inner, r = e / inner, a0 = r / d1, a1 = r % d1;
        int64_t t = batch_axis ? a0 : a1, b = batch_axis ? a1 : a0, nt = batch_axis ? d0 : d1;
        int64_t v = (int64_t)lens[b];
        int64_t from = v >= 0 && v <= nt && t < v ? v - 1 - t : t;
        int64_t src = batch_axis ? from * d1 + b : b * d1 + from;
        out[e] = x[src * inner + i];
    }
}

template <typename E>
static int reverse_sequence_as(int len_dtype, const void *x, const void *lens, void *out,
                               int64_t total, int64_t d0, int64_t d1, int64_t inner,
                               int batch_axis, cudaStream_t s)
{
    unsigned g = vq__cuda_blocks(total);
    if (len_dtype == VQ_I32)
        reverse_sequence_kernel<E, int32_t><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const E *)x, (const int32_t *)lens, (E *)out, total, d0, d1, inner, batch_axis);
    else if (len_dtype == VQ_I64)
        reverse_sequence_kernel<E, int64_t><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const E *)x, (const int64_t *)lens, (E *)out, total, d0, d1, inner, batch_axis);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

extern "C" int vq__cuda_reverse_sequence(int esize, int len_dtype, const void *x, const void *lens,
                                         void *out, int64_t d0, int64_t d1, int64_t inner,
                                         int batch_axis, void *stream)
{
    if (d0 < 0 || d1 < 0 || inner < 0)
        return VQ_EINVAL;
    int64_t total = d0 * d1 * inner;
    if (total == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    switch (esize) {
    case 1:
        return reverse_sequence_as<uint8_t>(len_dtype, x, lens, out, total, d0, d1, inner,
                                            batch_axis, s);
    case 4:
        return reverse_sequence_as<uint32_t>(len_dtype, x, lens, out, total, d0, d1, inner,
                                             batch_axis, s);
    case 8:
        return reverse_sequence_as<uint64_t>(len_dtype, x, lens, out, total, d0, d1, inner,
                                             batch_axis, s);
    default: return VQ_EINVAL;
    }
}
