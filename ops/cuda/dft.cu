/* CUDA kernel for dft (ops/cpu/dft.c): one thread per output bin of each
 * line, summing the line's values times their twiddles in double in j's
 * order, each twiddle from cos and sin of its own angle (j k mod n), as
 * the CPU's plain sums; the CPU's FFT (n a power of two) adds in another
 * order: equal to rounding. Launcher: kernels.h. */
#include "kernels.h"

#include <stdint.h>

template <typename T>
__global__ void dft_kernel(const T *x, T *out, int64_t total, int64_t len, int64_t inner,
                           int64_t parts, int64_t n, int64_t nout, double sign, double scale)
{
    VQ__CUDA_FOR_EACH(e, total)
    {
        int64_t i = e % inner, k = e / inner % nout, ob = e / (inner * nout);
        double sr = 0, si = 0;
        int64_t m = len < n ? len : n;
        for (int64_t j = 0; j < m; j++) {
            int64_t at = ((ob * len + j) * inner + i) * parts;
            double re = (double)x[at], im = parts == 2 ? (double)x[at + 1] : 0.0;
            double a = sign * 2 * M_PI * (double)(j * k % n) / (double)n;
            double wr = cos(a), wi = sin(a);
            sr += re * wr - im * wi;
            si += re * wi + im * wr;
        }
        out[2 * e] = (T)(sr * scale);
        out[2 * e + 1] = (T)(si * scale);
    }
}

extern "C" int vq__cuda_dft(int dtype, const void *x, void *out, int64_t outer, int64_t len,
                            int64_t inner, int64_t parts, int64_t n, int64_t nout, int inverse,
                            void *stream)
{
    if (outer < 0 || len < 0 || inner < 0 || n < 1 || nout < 0 || (parts != 1 && parts != 2))
        return VQ_EINVAL;
    int64_t total = outer * nout * inner;
    if (total == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    double sign = inverse ? 1 : -1, scale = inverse ? 1.0 / (double)n : 1;
    VQ__CUDA_LAUNCH_FLOATS(dft_kernel, dtype, total, s,
                           ((const float *)x, (float *)out, total, len, inner, parts, n, nout,
                            sign, scale),
                           ((const double *)x, (double *)out, total, len, inner, parts, n, nout,
                            sign, scale));
    return vq__cuda_launched();
}
