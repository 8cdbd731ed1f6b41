/* CUDA kernels of the recurrent layers lstm, gru and rnn and their
 * gradients (ops/cpu/rnn.c; host glue rnn_host.c): the biases folded once
 * per layer and direction, one step of a cell over [B, H] (one thread per
 * batch row and hidden unit, the CPU's formulas in its order, so each
 * element is the CPU's given the same products), the step backwards, and
 * the biases' gradients as column sums in the CPU's order. The products
 * between them are cuBLAS's (vq__cuda_gemm). Launchers: kernels.h. */
#include "kernels.h"

#include <stdint.h>

template <typename T> __device__ inline T rnn_exp(T v);
template <> __device__ inline float rnn_exp<float>(float v) { return expf(v); }
template <> __device__ inline double rnn_exp<double>(double v) { return exp(v); }
template <typename T> __device__ inline T rnn_tanh(T v);
template <> __device__ inline float rnn_tanh<float>(float v) { return tanhf(v); }
template <> __device__ inline double rnn_tanh<double>(double v) { return tanh(v); }

/* rnn.c's sigm: never exponentiates a positive number */
template <typename T> __device__ inline T rnn_sigm(T v)
{
    if (v >= 0)
        return (T)1 / ((T)1 + rnn_exp<T>(-v));
    T e = rnn_exp<T>(v);
    return e / ((T)1 + e);
}

/* fold_biases: bx[j] for j < GH the biases both sides add (gru's n part
 * b_in alone), then gru's b_hn (H); f32 adds in float as the CPU does. */
template <typename T>
__global__ void rnn_bias_kernel(int gru, int64_t H, int64_t GH, const T *bi, const T *bh, T *bx)
{
    VQ__CUDA_FOR_EACH(j, GH + H)
    {
        int64_t both = gru ? 2 * H : GH;
        T v = 0;
        if (bi && j < GH)
            v = bi[j];
        if (bh && (j < both || j >= GH)) {
            int64_t k = j < both ? j : j - H;
            T u = bh[k];
            v = j < GH ? v + u : u;
        }
        bx[j] = v;
    }
}

extern "C" int vq__cuda_rnn_bias(int dtype, int cell, int64_t H, int64_t GH, const void *bi,
                                 const void *bh, void *bx, void *stream)
{
    if (H < 0 || GH < 0)
        return VQ_EINVAL;
    if (GH + H == 0)
        return 0;
    int gru = cell == VQ__RNN_GRU;
    VQ__CUDA_LAUNCH_FLOATS(rnn_bias_kernel, dtype, GH + H, VQ__CUDA_STREAM(stream),
                           (gru, H, GH, (const float *)bi, (const float *)bh, (float *)bx),
                           (gru, H, GH, (const double *)bi, (const double *)bh, (double *)bx));
    return vq__cuda_launched();
}

/* One step: rnn.c's lstm_step, gru_step and plain_step, element (b, j). */
template <typename T>
__global__ void rnn_step_kernel(int cell, int64_t nb, int64_t H, const T *xp, const T *hp,
                                const T *bx, const T *prev, int64_t ldp, T *cur, int64_t sv, T *h,
                                int64_t ldh)
{
    VQ__CUDA_FOR_EACH(e, nb * H)
    {
        int64_t b = e / H, j = e % H;
        T *ho = h + b * ldh;
        if (cell == VQ__RNN_LSTM) {
            const T *x = xp + b * 4 * H, *r = hp + b * 4 * H;
            const T *cp = prev ? prev + b * ldp : NULL;
            T *s = cur + b * sv;
            T i = rnn_sigm<T>(x[j] + r[j] + bx[j]);
            T f = rnn_sigm<T>(x[H + j] + r[H + j] + bx[H + j]);
            T g = rnn_tanh<T>(x[2 * H + j] + r[2 * H + j] + bx[2 * H + j]);
            T o = rnn_sigm<T>(x[3 * H + j] + r[3 * H + j] + bx[3 * H + j]);
            T c = f * (cp ? cp[j] : (T)0) + i * g; /* cp[j] may be s[4H + j]: read first */
            s[j] = i;
            s[H + j] = f;
            s[2 * H + j] = g;
            s[3 * H + j] = o;
            s[4 * H + j] = c;
            ho[j] = o * rnn_tanh<T>(c);
        } else if (cell == VQ__RNN_GRU) {
            const T *x = xp + b * 3 * H, *r = hp + b * 3 * H, *bn = bx + 3 * H;
            const T *pv = prev ? prev + b * ldp : NULL;
            T *s = cur + b * sv;
            T rr = rnn_sigm<T>(x[j] + r[j] + bx[j]);
            T z = rnn_sigm<T>(x[H + j] + r[H + j] + bx[H + j]);
            T hn = r[2 * H + j] + bn[j];
            T n = rnn_tanh<T>(x[2 * H + j] + bx[2 * H + j] + rr * hn);
            s[j] = rr;
            s[H + j] = z;
            s[2 * H + j] = n;
            s[3 * H + j] = hn;
            ho[j] = ((T)1 - z) * n + z * (pv ? pv[j] : (T)0);
        } else {
            const T *x = xp + b * H, *r = hp + b * H;
            T a = x[j] + r[j] + bx[j];
            ho[j] = cell == VQ__RNN_RELU ? (a < 0 ? (T)0 : a) : rnn_tanh<T>(a);
        }
    }
}

extern "C" int vq__cuda_rnn_step(int dtype, int cell, int64_t nb, int64_t H, const void *xp,
                                 const void *hp, const void *bx, const void *prev, int64_t ldp,
                                 void *cur, int64_t sv, void *h, int64_t ldh, void *stream)
{
    if (nb < 0 || H < 0)
        return VQ_EINVAL;
    if (nb * H == 0)
        return 0;
    VQ__CUDA_LAUNCH_FLOATS(rnn_step_kernel, dtype, nb * H, VQ__CUDA_STREAM(stream),
                           (cell, nb, H, (const float *)xp, (const float *)hp,
                            (const float *)bx, (const float *)prev, ldp, (float *)cur, sv,
                            (float *)h, ldh),
                           (cell, nb, H, (const double *)xp, (const double *)hp,
                            (const double *)bx, (const double *)prev, ldp, (double *)cur, sv,
                            (double *)h, ldh));
    return vq__cuda_launched();
}

/* One step backwards: rnn_grad's dY row added to dh first (backward_dir's
 * loop), then rnn.c's lstm_back, gru_back or plain_back, element (b, j). */
template <typename T>
__global__ void rnn_back_kernel(int cell, int64_t nb, int64_t H, const T *dy, int64_t ldy,
                                const T *cur, int64_t sv, const T *prev, int64_t ldp,
                                const T *hout, int64_t ldo, T *dh, T *dc, T *dgx, T *dgh)
{
    VQ__CUDA_FOR_EACH(e, nb * H)
    {
        int64_t b = e / H, j = e % H;
        T d = dh[b * H + j];
        if (dy)
            d += dy[b * ldy + j];
        if (cell == VQ__RNN_LSTM) {
            const T *s = cur + b * sv, *cp = prev ? prev + b * ldp : NULL;
            T *g4 = dgx + b * 4 * H;
            T i = s[j], f = s[H + j], g = s[2 * H + j], o = s[3 * H + j];
            T tc = rnn_tanh<T>(s[4 * H + j]);
            T dcc = dc[b * H + j] + d * o * ((T)1 - tc * tc);
            g4[j] = dcc * g * i * ((T)1 - i);
            g4[H + j] = dcc * (cp ? cp[j] : (T)0) * f * ((T)1 - f);
            g4[2 * H + j] = dcc * i * ((T)1 - g * g);
            g4[3 * H + j] = d * tc * o * ((T)1 - o);
            dc[b * H + j] = dcc * f;
            dh[b * H + j] = d;
        } else if (cell == VQ__RNN_GRU) {
            const T *s = cur + b * sv, *pv = prev ? prev + b * ldp : NULL;
            T *gx = dgx + b * 3 * H, *gh = dgh + b * 3 * H;
            T r = s[j], z = s[H + j], n = s[2 * H + j], hn = s[3 * H + j];
            T dan = d * ((T)1 - z) * ((T)1 - n * n);
            T dar = dan * hn * r * ((T)1 - r);
            T daz = d * ((pv ? pv[j] : (T)0) - n) * z * ((T)1 - z);
            gx[j] = gh[j] = dar;
            gx[H + j] = gh[H + j] = daz;
            gx[2 * H + j] = dan;
            gh[2 * H + j] = dan * r;
            dh[b * H + j] = d * z;
        } else {
            T v = hout[b * ldo + j];
            dgx[b * H + j] = cell == VQ__RNN_RELU ? (v > 0 ? d : (T)0) : d * ((T)1 - v * v);
            dh[b * H + j] = d;
        }
    }
}

extern "C" int vq__cuda_rnn_back(int dtype, int cell, int64_t nb, int64_t H, const void *dy,
                                 int64_t ldy, const void *cur, int64_t sv, const void *prev,
                                 int64_t ldp, const void *hout, int64_t ldo, void *dh, void *dc,
                                 void *dgx, void *dgh, void *stream)
{
    if (nb < 0 || H < 0)
        return VQ_EINVAL;
    if (nb * H == 0)
        return 0;
    VQ__CUDA_LAUNCH_FLOATS(rnn_back_kernel, dtype, nb * H, VQ__CUDA_STREAM(stream),
                           (cell, nb, H, (const float *)dy, ldy, (const float *)cur, sv,
                            (const float *)prev, ldp, (const float *)hout, ldo, (float *)dh,
                            (float *)dc, (float *)dgx, (float *)dgh),
                           (cell, nb, H, (const double *)dy, ldy, (const double *)cur, sv,
                            (const double *)prev, ldp, (const double *)hout, ldo, (double *)dh,
                            (double *)dc, (double *)dgx, (double *)dgh));
    return vq__cuda_launched();
}

/* col_sums: dst[j] = the sum of src's n rows' column j, from 0, in order. */
template <typename T> __global__ void rnn_col_sums_kernel(int64_t n, int64_t m, const T *src, T *dst)
{
    VQ__CUDA_FOR_EACH(j, m)
    {
        T acc = 0;
        for (int64_t r = 0; r < n; r++)
            acc += src[r * m + j];
        dst[j] = acc;
    }
}

extern "C" int vq__cuda_rnn_col_sums(int dtype, int64_t n, int64_t m, const void *src, void *dst,
                                     void *stream)
{
    if (n < 0 || m < 0)
        return VQ_EINVAL;
    if (m == 0)
        return 0;
    VQ__CUDA_LAUNCH_FLOATS(rnn_col_sums_kernel, dtype, m, VQ__CUDA_STREAM(stream),
                           (n, m, (const float *)src, (float *)dst),
                           (n, m, (const double *)src, (double *)dst));
    return vq__cuda_launched();
}
