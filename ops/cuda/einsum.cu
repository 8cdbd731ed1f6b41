/* CUDA kernel for einsum's loop steps (ops/cpu/einsum.c,
 * ops/einsum_shared.h): one thread per output element, its sum over the
 * summed labels walked in the CPU's order and added in T (integers as
 * unsigned, wrapping): the CPU's bits. The GEMM steps are cuBLAS's
 * (einsum_host.c). Launcher: kernels.h. */
#include "kernels.h"

#include <stdint.h>

template <typename T, typename U>
__global__ void einsum_loop_kernel(const T *a, const T *b, T *out, vq__es_loop lp)
{
    bool two = lp.nop == 2;
    VQ__CUDA_FOR_EACH(o, lp.out_numel)
    {
        int64_t rest = o, ao = 0, bo = 0, oo = 0;
        for (int d = lp.nout - 1; d >= 0; d--) {
            int64_t i = rest % lp.size[d];
            rest /= lp.size[d];
            ao += i * lp.stride[0][d];
            bo += i * lp.stride[1][d];
            oo += i * lp.ostride[d];
        }
        if (lp.nsum == 0) {
            out[oo] = two ? (T)((U)a[ao] * (U)b[bo]) : a[ao];
            continue;
        }
        int64_t idx[VQ__ES_MAX_LOOP] = {0};
        U acc = 0;
        for (int64_t j = 0; j < lp.sum_numel; j++) {
            acc = (U)(acc + (two ? (U)((U)a[ao] * (U)b[bo]) : (U)a[ao]));
            for (int d = lp.nout + lp.nsum - 1; d >= lp.nout; d--) {
                ao += lp.stride[0][d];
                bo += lp.stride[1][d];
                if (++idx[d] < lp.size[d])
                    break;
                ao -= lp.stride[0][d] * lp.size[d];
                bo -= lp.stride[1][d] * lp.size[d];
                idx[d] = 0;
            }
        }
        out[oo] = (T)acc;
    }
}

extern "C" int vq__cuda_einsum_loop(int dtype, const void *a, const void *b, void *out,
                                    const vq__es_loop *lp, void *stream)
{
    if (lp->nop < 1 || lp->nop > 2 || lp->nout < 0 || lp->nsum < 0 ||
        lp->nout + lp->nsum > VQ__ES_MAX_LOOP || lp->out_numel < 0)
        return VQ_EINVAL;
    if (lp->out_numel == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(lp->out_numel);
    switch (dtype) {
    case VQ_F32:
        einsum_loop_kernel<float, float><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const float *)a, (const float *)b, (float *)out, *lp);
        break;
    case VQ_F64:
        einsum_loop_kernel<double, double><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const double *)a, (const double *)b, (double *)out, *lp);
        break;
    case VQ_I32:
        einsum_loop_kernel<int32_t, uint32_t><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const int32_t *)a, (const int32_t *)b, (int32_t *)out, *lp);
        break;
    case VQ_I64:
        einsum_loop_kernel<int64_t, uint64_t><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const int64_t *)a, (const int64_t *)b, (int64_t *)out, *lp);
        break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}
