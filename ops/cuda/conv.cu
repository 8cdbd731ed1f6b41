/* CUDA kernels for the sliding-window ops and batch_norm: im2col and
 * col2im for conv2d (whose products are cuBLAS's, through
 * vq__cuda_matmul: ops/cuda/conv_host.c strings them together), the bias add,
 * the fused clip and its gradient's mask,
 * max_pool2d and avg_pool2d with their gradients (ops/cpu/conv.c,
 * ops/cpu/pool.c), and batch_norm with its gradient (ops/cpu/norm.c).
 * global_avg_pool needs none of its own: it is rows.cu's mean.
 *
 * The geometry and its rules (which element a tap reads, the average's
 * divisor, where a max window has its maximum) are ops/window_shared.h's,
 * the same code the CPU kernels run. The gradients that the CPU scatters
 * (col2im, the pools' gradients) are gathered here, one thread per input
 * element, deterministic and without atomics: each thread visits the
 * windows that read its element in the order in which the CPU adds their
 * terms (col2im: the taps in order; the pools: the outputs in order, i.e.
 * the taps backwards), starting from 0 as the CPU's zeroed buffer does, so
 * the same terms give the same bits. batch_norm computes its per-channel
 * constants per element, in double, in norm.c's order; its gradients'
 * sums are one block per channel, a tree of double sums, as are
 * batch_norm_train's moments and its gradient's sums. Launchers:
 * kernels.h. */
#include "kernels.h"

#include <math.h>
#include <stdint.h>

static __device__ inline int64_t argmax_of(const float *x, const vq__window *w, int64_t oh,
                                           int64_t ow)
{
    return vq__window_argmax_f32(x, w, oh, ow);
}

static __device__ inline int64_t argmax_of(const double *x, const vq__window *w, int64_t oh,
                                           int64_t ow)
{
    return vq__window_argmax_f64(x, w, oh, ow);
}

static bool bad_window(const vq__window *w)
{
    return !w || w->n < 0 || w->c < 0 || w->h < 0 || w->w < 0 || w->oh < 0 || w->ow < 0 ||
           w->kh < 1 || w->kw < 1 || w->sh < 1 || w->sw < 1 || w->dh < 1 || w->dw < 1 ||
           w->pt < 0 || w->pl < 0 || w->pb < 0 || w->pr < 0;
}

/* ---- im2col and col2im ---- */

template <typename T> __global__ void im2col_kernel(const T *x, T *col, vq__window w)
{
    int64_t plane = w.oh * w.ow, n = w.c * w.kh * w.kw * plane;
    VQ__CUDA_FOR_EACH(e, n) {
        int64_t p = e % plane, row = e / plane;
        int64_t j = row % w.kw, i = (row / w.kw) % w.kh, c = row / (w.kw * w.kh);
        int64_t ih = (p / w.ow) * w.sh - w.pt + i * w.dh;
        int64_t iw = (p % w.ow) * w.sw - w.pl + j * w.dw;
        col[e] = ih >= 0 && ih < w.h && iw >= 0 && iw < w.w ? x[(c * w.h + ih) * w.w + iw] : (T)0;
    }
}

template <typename T> __global__ void col2im_kernel(const T *col, T *x, vq__window w)
{
    int64_t plane = w.oh * w.ow, n = w.c * w.h * w.w;
    VQ__CUDA_FOR_EACH(e, n) {
        int64_t iw = e % w.w, ih = (e / w.w) % w.h, c = e / (w.w * w.h);
        T acc = 0;
        for (int64_t i = 0; i < w.kh; i++) {
            int64_t oh = vq__window_source(ih, i, w.pt, w.sh, w.dh, w.oh);
            if (oh < 0)
                continue;
            for (int64_t j = 0; j < w.kw; j++) {
                int64_t ow = vq__window_source(iw, j, w.pl, w.sw, w.dw, w.ow);
                if (ow >= 0)
                    acc += col[((c * w.kh + i) * w.kw + j) * plane + oh * w.ow + ow];
            }
        }
        x[e] = acc;
    }
}

extern "C" int vq__cuda_im2col(int dtype, const void *x, void *col, const vq__window *w,
                               void *stream)
{
    if (bad_window(w))
        return VQ_EINVAL;
    int64_t n = w->c * w->kh * w->kw * w->oh * w->ow;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    VQ__CUDA_LAUNCH_FLOATS(im2col_kernel, dtype, n, s, ((const float *)x, (float *)col, *w),
                  ((const double *)x, (double *)col, *w));
    return vq__cuda_launched();
}

extern "C" int vq__cuda_col2im(int dtype, const void *col, void *x, const vq__window *w,
                               void *stream)
{
    if (bad_window(w))
        return VQ_EINVAL;
    int64_t n = w->c * w->h * w->w;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    VQ__CUDA_LAUNCH_FLOATS(col2im_kernel, dtype, n, s, ((const float *)col, (float *)x, *w),
                  ((const double *)col, (double *)x, *w));
    return vq__cuda_launched();
}

/* ---- bias ---- */

template <typename T>
__global__ void bias_add_kernel(T *o, const T *b, int64_t total, int64_t m, int64_t plane)
{
    VQ__CUDA_FOR_EACH(e, total)
        o[e] += b[(e / plane) % m];
}

extern "C" int vq__cuda_bias_add(int dtype, void *out, const void *b, int64_t n, int64_t m,
                                 int64_t plane, void *stream)
{
    if (n < 0 || m < 0 || plane < 0)
        return VQ_EINVAL;
    int64_t total = n * m * plane;
    if (total == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    VQ__CUDA_LAUNCH_FLOATS(bias_add_kernel, dtype, total, s,
                  ((float *)out, (const float *)b, total, m, plane),
                  ((double *)out, (const double *)b, total, m, plane));
    return vq__cuda_launched();
}

/* ---- conv2d's fused clip (attribute clip, ops/cpu/conv.c) ---- */

/* conv.c's clamp: max(v, lo) then min(., hi) with maximum's and minimum's
 * results (NaN stays, -0 at lo = 0 becomes +0). */
template <typename T>
__global__ void clip_kernel(T *o, int64_t n, T lo, T hi)
{
    VQ__CUDA_FOR_EACH(e, n)
    {
        T v = o[e];
        v = v <= lo ? lo : v;
        o[e] = v >= hi ? hi : v;
    }
}

extern "C" int vq__cuda_clip(int dtype, void *out, int64_t n, double lo, double hi, void *stream)
{
    if (n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    VQ__CUDA_LAUNCH_FLOATS(clip_kernel, dtype, n, s, ((float *)out, n, (float)lo, (float)hi),
                  ((double *)out, n, lo, hi));
    return vq__cuda_launched();
}

/* conv2d_grad's dOut through the clip: g where lo < out < hi, else 0. */
template <typename T>
__global__ void clip_mask_kernel(const T *g, const T *out, T *m, int64_t n, T lo, T hi)
{
    VQ__CUDA_FOR_EACH(e, n)
        m[e] = out[e] > lo && out[e] < hi ? g[e] : (T)0;
}

extern "C" int vq__cuda_clip_mask(int dtype, const void *g, const void *out, void *m, int64_t n,
                                  double lo, double hi, void *stream)
{
    if (n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    VQ__CUDA_LAUNCH_FLOATS(clip_mask_kernel, dtype, n, s,
                  ((const float *)g, (const float *)out, (float *)m, n, (float)lo, (float)hi),
                  ((const double *)g, (const double *)out, (double *)m, n, lo, hi));
    return vq__cuda_launched();
}

/* ---- max_pool2d ---- */

template <typename T> __global__ void max_pool_kernel(const T *x, T *o, vq__window w)
{
    int64_t plane = w.h * w.w, oplane = w.oh * w.ow, n = w.n * w.c * oplane;
    VQ__CUDA_FOR_EACH(e, n) {
        int64_t p = e / oplane, q = e % oplane;
        const T *xp = x + p * plane;
        int64_t a = argmax_of(xp, &w, q / w.ow, q % w.ow);
        o[e] = a < 0 ? (T)-INFINITY : xp[a];
    }
}

template <typename T>
__global__ void max_pool_argmax_kernel(const T *x, int64_t *o, vq__window w, bool column_major)
{
    int64_t plane = w.h * w.w, oplane = w.oh * w.ow, n = w.n * w.c * oplane;
    VQ__CUDA_FOR_EACH(e, n) {
        int64_t p = e / oplane, q = e % oplane;
        int64_t a = argmax_of(x + p * plane, &w, q / w.ow, q % w.ow);
        if (a >= 0 && column_major)
            a = a % w.w * w.h + a / w.w;
        o[e] = a < 0 ? -1 : p * plane + a;
    }
}

/* dx[e] = the sum of g over the windows whose maximum is element e, in the
 * order of the outputs: oh rises as the tap row i falls, ow as j falls. */
template <typename T>
__global__ void max_pool_grad_kernel(const T *x, const T *g, T *dx, vq__window w)
{
    int64_t plane = w.h * w.w, oplane = w.oh * w.ow, n = w.n * w.c * plane;
    VQ__CUDA_FOR_EACH(e, n) {
        int64_t p = e / plane, q = e % plane, ih = q / w.w, iw = q % w.w;
        const T *xp = x + p * plane, *gp = g + p * oplane;
        T acc = 0;
        for (int64_t i = w.kh - 1; i >= 0; i--) {
            int64_t oh = vq__window_source(ih, i, w.pt, w.sh, w.dh, w.oh);
            if (oh < 0)
                continue;
            for (int64_t j = w.kw - 1; j >= 0; j--) {
                int64_t ow = vq__window_source(iw, j, w.pl, w.sw, w.dw, w.ow);
                if (ow >= 0 && argmax_of(xp, &w, oh, ow) == q)
                    acc += gp[oh * w.ow + ow];
            }
        }
        dx[e] = acc;
    }
}

extern "C" int vq__cuda_max_pool(int dtype, const void *x, void *out, const vq__window *w,
                                 void *stream)
{
    if (bad_window(w))
        return VQ_EINVAL;
    int64_t n = w->n * w->c * w->oh * w->ow;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    VQ__CUDA_LAUNCH_FLOATS(max_pool_kernel, dtype, n, s, ((const float *)x, (float *)out, *w),
                  ((const double *)x, (double *)out, *w));
    return vq__cuda_launched();
}

extern "C" int vq__cuda_max_pool_argmax(int dtype, const void *x, int64_t *out,
                                        const vq__window *w, bool column_major, void *stream)
{
    if (bad_window(w))
        return VQ_EINVAL;
    int64_t n = w->n * w->c * w->oh * w->ow;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    VQ__CUDA_LAUNCH_FLOATS(max_pool_argmax_kernel, dtype, n, s, ((const float *)x, out, *w, column_major),
                  ((const double *)x, out, *w, column_major));
    return vq__cuda_launched();
}

extern "C" int vq__cuda_max_pool_grad(int dtype, const void *x, const void *g, void *dx,
                                      const vq__window *w, void *stream)
{
    if (bad_window(w))
        return VQ_EINVAL;
    int64_t n = w->n * w->c * w->h * w->w;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    VQ__CUDA_LAUNCH_FLOATS(max_pool_grad_kernel, dtype, n, s,
                  ((const float *)x, (const float *)g, (float *)dx, *w),
                  ((const double *)x, (const double *)g, (double *)dx, *w));
    return vq__cuda_launched();
}

/* ---- avg_pool2d (no dilation) ---- */

/* The sum of the window's taps on the input, row by row in double, over
 * pool.c's divisor. */
template <typename T>
__global__ void avg_pool_kernel(const T *x, T *o, vq__window w, bool include_pad)
{
    int64_t plane = w.h * w.w, oplane = w.oh * w.ow, n = w.n * w.c * oplane;
    VQ__CUDA_FOR_EACH(e, n) {
        int64_t p = e / oplane, oh = (e % oplane) / w.ow, ow = e % w.ow;
        const T *xp = x + p * plane;
        int64_t h0 = oh * w.sh - w.pt, w0 = ow * w.sw - w.pl;
        int64_t h1 = h0 + w.kh < w.h ? h0 + w.kh : w.h, w1 = w0 + w.kw < w.w ? w0 + w.kw : w.w;
        h0 = h0 < 0 ? 0 : h0;
        w0 = w0 < 0 ? 0 : w0;
        double s = 0;
        for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++)
                s += xp[ih * w.w + iw];
        o[e] = (T)(s / (double)vq__window_avg_count(&w, oh, ow, include_pad));
    }
}

/* dx[e] = the sum of (T)(g / divisor) over the windows that hold element
 * e, in the order of the outputs. */
template <typename T>
__global__ void avg_pool_grad_kernel(const T *g, T *dx, vq__window w, bool include_pad)
{
    int64_t plane = w.h * w.w, oplane = w.oh * w.ow, n = w.n * w.c * plane;
    VQ__CUDA_FOR_EACH(e, n) {
        int64_t p = e / plane, q = e % plane, ih = q / w.w, iw = q % w.w;
        const T *gp = g + p * oplane;
        T acc = 0;
        for (int64_t i = w.kh - 1; i >= 0; i--) {
            int64_t oh = vq__window_source(ih, i, w.pt, w.sh, 1, w.oh);
            if (oh < 0)
                continue;
            for (int64_t j = w.kw - 1; j >= 0; j--) {
                int64_t ow = vq__window_source(iw, j, w.pl, w.sw, 1, w.ow);
                if (ow < 0)
                    continue;
                int64_t count = vq__window_avg_count(&w, oh, ow, include_pad);
                acc += (T)((double)gp[oh * w.ow + ow] / (double)count);
            }
        }
        dx[e] = acc;
    }
}

extern "C" int vq__cuda_avg_pool(int dtype, const void *x, void *out, const vq__window *w,
                                 int count_include_pad, void *stream)
{
    if (bad_window(w))
        return VQ_EINVAL;
    int64_t n = w->n * w->c * w->oh * w->ow;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    bool inc = count_include_pad != 0;
    VQ__CUDA_LAUNCH_FLOATS(avg_pool_kernel, dtype, n, s, ((const float *)x, (float *)out, *w, inc),
                  ((const double *)x, (double *)out, *w, inc));
    return vq__cuda_launched();
}

extern "C" int vq__cuda_avg_pool_grad(int dtype, const void *g, void *dx, const vq__window *w,
                                      int count_include_pad, void *stream)
{
    if (bad_window(w))
        return VQ_EINVAL;
    int64_t n = w->n * w->c * w->h * w->w;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    bool inc = count_include_pad != 0;
    VQ__CUDA_LAUNCH_FLOATS(avg_pool_grad_kernel, dtype, n, s, ((const float *)g, (float *)dx, *w, inc),
                  ((const double *)g, (double *)dx, *w, inc));
    return vq__cuda_launched();
}

/* ---- batch_norm ---- */

#define BN_THREADS 256

/* Block-wide sum of one double per thread (all threads must call; the
 * block is BN_THREADS, a power of 2). */
static __device__ double bn_block_sum(double v)
{
    __shared__ double sh[BN_THREADS];
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

/* a = Scale * (1 / sqrt(Var + eps)), in norm.c's order. */
template <typename T>
__device__ inline double bn_factor(const T *scale, const T *var, int64_t ch, double eps)
{
    return (double)scale[ch] * (1.0 / sqrt((double)var[ch] + eps));
}

template <typename T>
__global__ void bn_kernel(const T *x, const T *scale, const T *bias, const T *mean,
                          const T *var, T *o, int64_t n, int64_t c, int64_t inner, double eps)
{
    VQ__CUDA_FOR_EACH(e, n) {
        int64_t ch = (e / inner) % c;
        double a = bn_factor(scale, var, ch, eps);
        o[e] = (T)(((double)x[e] - (double)mean[ch]) * a + (double)bias[ch]);
    }
}

template <typename T>
__global__ void bn_grad_x_kernel(const T *scale, const T *var, const T *g, T *dx, int64_t n,
                                 int64_t c, int64_t inner, double eps)
{
    VQ__CUDA_FOR_EACH(e, n) {
        int64_t ch = (e / inner) % c;
        dx[e] = (T)((double)g[e] * bn_factor(scale, var, ch, eps));
    }
}

/* One block per channel: the sums of g and of g (x - mean) over the
 * channel's elements, then dScale, dBias, dMean or dVar (wrt 1 .. 4). */
template <typename T>
__global__ void bn_grad_sums_kernel(int wrt, const T *x, const T *scale, const T *mean,
                                    const T *var, const T *g, T *dz, int64_t outer, int64_t c,
                                    int64_t inner, double eps)
{
    for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
        double m = mean[ch], sg = 0, sgx = 0;
        for (int64_t k = threadIdx.x; k < outer * inner; k += blockDim.x) {
            int64_t at = ((k / inner) * c + ch) * inner + k % inner;
            double gv = g[at];
            sg += gv;
            sgx += gv * ((double)x[at] - m);
        }
        sg = bn_block_sum(sg);
        sgx = bn_block_sum(sgx);
        if (threadIdx.x == 0) {
            double inv = 1.0 / sqrt((double)var[ch] + eps), a = (double)scale[ch] * inv;
            switch (wrt) {
            case 1: dz[ch] = (T)(sgx * inv); break;
            case 2: dz[ch] = (T)sg; break;
            case 3: dz[ch] = (T)(-a * sg); break;
            default: dz[ch] = (T)(-0.5 * (double)scale[ch] * (inv * inv * inv) * sgx); break;
            }
        }
    }
}

extern "C" int vq__cuda_batch_norm(int dtype, const void *x, const void *scale, const void *bias,
                                   const void *mean, const void *var, void *out, int64_t outer,
                                   int64_t c, int64_t inner, double eps, void *stream)
{
    if (outer < 0 || c < 0 || inner < 0)
        return VQ_EINVAL;
    int64_t n = outer * c * inner;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    VQ__CUDA_LAUNCH_FLOATS(bn_kernel, dtype, n, s,
                  ((const float *)x, (const float *)scale, (const float *)bias,
                   (const float *)mean, (const float *)var, (float *)out, n, c, inner, eps),
                  ((const double *)x, (const double *)scale, (const double *)bias,
                   (const double *)mean, (const double *)var, (double *)out, n, c, inner, eps));
    return vq__cuda_launched();
}

extern "C" int vq__cuda_batch_norm_grad(int wrt, int dtype, const void *x, const void *scale,
                                        const void *mean, const void *var, const void *g,
                                        void *dz, int64_t outer, int64_t c, int64_t inner,
                                        double eps, void *stream)
{
    if (wrt < 0 || wrt > 4 || outer < 0 || c < 0 || inner < 0)
        return VQ_EINVAL;
    if (dtype != VQ_F32 && dtype != VQ_F64)
        return VQ_EINVAL;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    if (wrt == 0) {
        int64_t n = outer * c * inner;
        if (n == 0)
            return 0;
        VQ__CUDA_LAUNCH_FLOATS(bn_grad_x_kernel, dtype, n, s,
                      ((const float *)scale, (const float *)var, (const float *)g, (float *)dz,
                       n, c, inner, eps),
                      ((const double *)scale, (const double *)var, (const double *)g,
                       (double *)dz, n, c, inner, eps));
        return vq__cuda_launched();
    }
    if (c == 0)
        return 0;
    unsigned blocks = (unsigned)(c > 65535 * 16 ? 65535 * 16 : c);
    if (dtype == VQ_F32)
        bn_grad_sums_kernel<float><<<blocks, BN_THREADS, 0, s>>>(
            wrt, (const float *)x, (const float *)scale, (const float *)mean, (const float *)var,
            (const float *)g, (float *)dz, outer, c, inner, eps);
    else
        bn_grad_sums_kernel<double><<<blocks, BN_THREADS, 0, s>>>(
            wrt, (const double *)x, (const double *)scale, (const double *)mean,
            (const double *)var, (const double *)g, (double *)dz, outer, c, inner, eps);
    return vq__cuda_launched();
}

/* ---- batch_norm_train ---- */

/* The batch's mean and biased variance of channel ch (norm.c's
 * moments_T: two passes of double sums, here each a block's tree); every
 * thread of the block gets them. */
template <typename T>
__device__ void bn_moments(const T *x, int64_t outer, int64_t c, int64_t inner, int64_t ch,
                           double *mu, double *v)
{
    double m = (double)(outer * inner), s = 0, q = 0;
    for (int64_t k = threadIdx.x; k < outer * inner; k += blockDim.x)
        s += x[((k / inner) * c + ch) * inner + k % inner];
    *mu = bn_block_sum(s) / m;
    for (int64_t k = threadIdx.x; k < outer * inner; k += blockDim.x) {
        double d = (double)x[((k / inner) * c + ch) * inner + k % inner] - *mu;
        q += d * d;
    }
    *v = bn_block_sum(q) / m;
}

/* One block per channel: the moments, the running statistics (thread 0,
 * read before written: NewMean may be Mean), then the channel's Out (which
 * may be X: bn_block_sum's barriers order the reads before the writes). */
template <typename T>
__global__ void bn_train_kernel(const T *x, const T *scale, const T *bias, const T *mean,
                                const T *var, T *o, T *nmean, T *nvar, int64_t outer, int64_t c,
                                int64_t inner, double eps, double mom)
{
    for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
        double mu, v;
        bn_moments(x, outer, c, inner, ch, &mu, &v);
        double a = (double)scale[ch] * (1.0 / sqrt(v + eps)), b = bias[ch];
        if (threadIdx.x == 0) {
            nmean[ch] = (T)((double)mean[ch] * mom + mu * (1 - mom));
            nvar[ch] = (T)((double)var[ch] * mom + v * (1 - mom));
        }
        for (int64_t k = threadIdx.x; k < outer * inner; k += blockDim.x) {
            int64_t at = ((k / inner) * c + ch) * inner + k % inner;
            o[at] = (T)(((double)x[at] - mu) * a + b);
        }
        __syncthreads();
    }
}

/* One block per channel, norm.c's bn_train_grad_T: g, gm, gv may be NULL
 * (the gradients that do not flow). */
template <typename T>
__global__ void bn_train_grad_kernel(int wrt, const T *x, const T *scale, const T *g,
                                     const T *gm, const T *gv, T *dz, int64_t outer, int64_t c,
                                     int64_t inner, double eps, double mom)
{
    double m = (double)(outer * inner);
    for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
        double mu, v, sg = 0, sgx = 0;
        bn_moments(x, outer, c, inner, ch, &mu, &v);
        for (int64_t k = threadIdx.x; g && k < outer * inner; k += blockDim.x) {
            int64_t at = ((k / inner) * c + ch) * inner + k % inner;
            sg += g[at];
            sgx += (double)g[at] * ((double)x[at] - mu);
        }
        sg = bn_block_sum(sg);
        sgx = bn_block_sum(sgx);
        double inv = 1.0 / sqrt(v + eps);
        if (wrt == 1 || wrt == 2) {
            if (threadIdx.x == 0)
                dz[ch] = (T)(m == 0 ? 0 : wrt == 1 ? sgx * inv : sg);
            continue;
        }
        double a = (double)scale[ch] * inv, gmv = gm ? (double)gm[ch] : 0;
        double gvv = gv ? (double)gv[ch] : 0;
        for (int64_t k = threadIdx.x; k < outer * inner; k += blockDim.x) {
            int64_t at = ((k / inner) * c + ch) * inner + k % inner;
            double xc = (double)x[at] - mu, d = 0;
            if (g)
                d = a * ((double)g[at] - sg / m - xc * (inv * inv) * sgx / m);
            d += (1 - mom) * (gmv + 2 * xc * gvv) / m;
            dz[at] = (T)d;
        }
    }
}

extern "C" int vq__cuda_batch_norm_train(int dtype, const void *x, const void *scale,
                                         const void *bias, const void *mean, const void *var,
                                         void *out, void *nmean, void *nvar, int64_t outer,
                                         int64_t c, int64_t inner, double eps, double mom,
                                         void *stream)
{
    if (outer < 0 || c < 0 || inner < 0)
        return VQ_EINVAL;
    if (dtype != VQ_F32 && dtype != VQ_F64)
        return VQ_EINVAL;
    if (c == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned blocks = (unsigned)(c > 65535 * 16 ? 65535 * 16 : c);
    if (dtype == VQ_F32)
        bn_train_kernel<float><<<blocks, BN_THREADS, 0, s>>>(
            (const float *)x, (const float *)scale, (const float *)bias, (const float *)mean,
            (const float *)var, (float *)out, (float *)nmean, (float *)nvar, outer, c, inner, eps,
            mom);
    else
        bn_train_kernel<double><<<blocks, BN_THREADS, 0, s>>>(
            (const double *)x, (const double *)scale, (const double *)bias,
            (const double *)mean, (const double *)var, (double *)out, (double *)nmean,
            (double *)nvar, outer, c, inner, eps, mom);
    return vq__cuda_launched();
}

extern "C" int vq__cuda_batch_norm_train_grad(int wrt, int dtype, const void *x,
                                              const void *scale, const void *g, const void *gm,
                                              const void *gv, void *dz, int64_t outer, int64_t c,
                                              int64_t inner, double eps, double mom,
                                              void *stream)
{
    if (wrt < 0 || wrt > 2 || outer < 0 || c < 0 || inner < 0)
        return VQ_EINVAL;
    if (dtype != VQ_F32 && dtype != VQ_F64)
        return VQ_EINVAL;
    if (c == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned blocks = (unsigned)(c > 65535 * 16 ? 65535 * 16 : c);
    if (dtype == VQ_F32)
        bn_train_grad_kernel<float><<<blocks, BN_THREADS, 0, s>>>(
            wrt, (const float *)x, (const float *)scale, (const float *)g, (const float *)gm,
            (const float *)gv, (float *)dz, outer, c, inner, eps, mom);
    else
        bn_train_grad_kernel<double><<<blocks, BN_THREADS, 0, s>>>(
            wrt, (const double *)x, (const double *)scale, (const double *)g,
            (const double *)gm, (const double *)gv, (double *)dz, outer, c, inner, eps, mom);
    return vq__cuda_launched();
}
