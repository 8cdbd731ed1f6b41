/* What lrn's CPU kernels (ops/cpu/lrn.c) and CUDA kernels (ops/cuda/lrn.cu)
 * share, written once: the window of channels each channel's square sum
 * covers, the denominator, the output and the gradient of one element, in
 * one order of operations. Plain C, and __host__ __device__ under nvcc
 * (shape_shared.h's VQ__SHARED_FN), so that both sides add and round
 * alike (pow is each side's own: within an ulp).
 *
 * X is [N, C, inner] (inner: the product of the dims after C). Channel k's
 * window is [k - lo, k + hi] clipped to [0, C), lo = floor((size - 1) / 2),
 * hi = ceil((size - 1) / 2) (ONNX LRN's, which for an even size puts the
 * extra channel after k); S_k = the sum of x_j^2 over it, in the window's
 * order, in X's dtype; d_k = bias + (alpha / size) * S_k; y_k = x_k /
 * d_k^beta.
 *
 * The gradient: channel c's window holds k exactly when c lies in
 * [k - hi, k + lo], so
 *   dx_k = g_k / d_k^beta
 *          - 2 (alpha / size) beta x_k * sum_{c in [k - hi, k + lo]} g_c x_c / (d_c^beta d_c),
 * each d_c recomputed (one thread per element on the GPU, no scratch). */
#ifndef VARQ_OPS_LRN_SHARED_H
#define VARQ_OPS_LRN_SHARED_H

#include "shape_shared.h" /* VQ__SHARED_FN */

#include <math.h>
#include <stdint.h>

/* One call: X's channels and the stride between them (inner), the window
 * (lo, hi), alpha / size (scale), beta and bias. */
typedef struct vq__lrn_geom {
    int64_t c, inner, lo, hi;
    double scale, beta, bias;
} vq__lrn_geom;

/* f32 and f64 versions of each function: x and g point at channel 0 of the
 * element's lane (stride inner between channels). */
#define VQ__LRN_FNS(T, SUF, POW)                                                                  \
    VQ__SHARED_FN T vq__lrn_den_##SUF(const T *x, const vq__lrn_geom *g, int64_t k)               \
    {                                                                                             \
        int64_t a = k - g->lo < 0 ? 0 : k - g->lo, b = k + g->hi >= g->c ? g->c - 1 : k + g->hi;  \
        T s = 0;                                                                                  \
        for (int64_t j = a; j <= b; j++)                                                          \
            s += x[j * g->inner] * x[j * g->inner];                                               \
        return (T)g->bias + (T)g->scale * s;                                                      \
    }                                                                                             \
    VQ__SHARED_FN T vq__lrn_out_##SUF(const T *x, const vq__lrn_geom *g, int64_t k)               \
    {                                                                                             \
        return x[k * g->inner] / POW(vq__lrn_den_##SUF(x, g, k), (T)g->beta);                     \
    }                                                                                             \
    VQ__SHARED_FN T vq__lrn_grad_##SUF(const T *x, const T *dy, const vq__lrn_geom *g, int64_t k) \
    {                                                                                             \
        int64_t a = k - g->hi < 0 ? 0 : k - g->hi, b = k + g->lo >= g->c ? g->c - 1 : k + g->lo;  \
        T acc = 0;                                                                                \
        for (int64_t c = a; c <= b; c++) {                                                        \
            T d = vq__lrn_den_##SUF(x, g, c);                                                     \
            acc += dy[c * g->inner] * x[c * g->inner] / (POW(d, (T)g->beta) * d);                 \
        }                                                                                         \
        T dk = vq__lrn_den_##SUF(x, g, k);                                                        \
        return dy[k * g->inner] / POW(dk, (T)g->beta) -                                           \
               (T)(2 * g->scale * g->beta) * x[k * g->inner] * acc;                               \
    }

VQ__LRN_FNS(float, f32, powf)
VQ__LRN_FNS(double, f64, pow)

#endif
