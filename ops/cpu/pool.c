/* Pooling over NCHW planes: max_pool2d (padding acts as -inf; dilations)
 * and max_pool2d_argmax (where each maximum is: ONNX MaxPool's Indices),
 * avg_pool2d (count_include_pad) and global_avg_pool (the mean over every
 * dim after the first two, for any rank >= 3), and their gradient ops.
 *
 * The window geometry, the output size (ceil_mode included), the
 * average's divisor and the max's position are ops/window_shared.h's,
 * which the CUDA kernels (ops/cuda/conv.cu) use as well. Each pad must be
 * smaller than the dilated kernel along its dim, so that no window of the
 * padded input lies wholly in its leading or trailing pad (the rule
 * PyTorch enforces more strictly, pad <= kernel / 2).
 *
 * The gradients scatter dOut back onto dX in the order of the outputs:
 * max_pool2d_grad(X, dOut) adds each output's gradient at the first
 * position of its window's maximum (recomputed from X), avg_pool2d_grad
 * adds dOut / divisor at each of the window's taps on the input. An
 * element of dX thus gets its terms in the order of the outputs, which the
 * CUDA kernels (one thread per element of dX, gathering) keep.
 * global_avg_pool sums in double; its gradient is dOut * (1 / count)
 * spread over the plane, as reduce.c's mean_grad computes it. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"
#include "../window_shared.h"
#include "../math/isa.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#ifdef __SSE__
#include <xmmintrin.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif
#endif

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};
static const char *const grad_in[] = {"X", "dOut"};
static const char *const grad_out[] = {"dX"};

/* ---- shapes ---- */

/* X (slot 0) against the attributes: fills p and Out's meta. */
static int pool_meta(const vq__infer *c, vq__window_params *p, vq__meta *out)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_rank(c, 0, 4)) < 0 ||
        (rc = vq__window_attrs(c, p)) < 0)
        return rc;
    p->ceil_mode = vq__attr_bool(c, "ceil_mode", false);
    p->count_include_pad = vq__attr_bool(c, "count_include_pad", false);
    static const char *const side[4] = {"top", "left", "bottom", "right"};
    for (int i = 0; i < 4; i++) {
        int64_t extent = p->dilation[i % 2] * (p->kernel[i % 2] - 1) + 1;
        if (p->pad[i] >= extent)
            return vq__attr_fail(c, "pads", "pad %lld (%s) is not smaller than the dilated "
                                            "kernel %s %lld: a window could lie wholly in it",
                                 (long long)p->pad[i], side[i], i % 2 ? "width" : "height",
                                 (long long)extent);
    }
    const vq__meta *x = &c->in[0];
    int64_t hw[2];
    if ((rc = vq__window_out_hw(c, p, x->shape[2], x->shape[3], p->kernel[0], p->kernel[1],
                                p->ceil_mode, hw)) < 0)
        return rc;
    *out = *x;
    out->shape[2] = hw[0];
    out->shape[3] = hw[1];
    return 0;
}

static int pool_infer(vq__infer *c)
{
    return pool_meta(c, c->params, &c->out[0]);
}

/* max_pool2d_argmax: max_pool2d's shape, in i64. */
static int argmax_infer(vq__infer *c)
{
    vq__window_params *p = c->params;
    int rc = pool_meta(c, p, &c->out[0]);
    c->out[0].dtype = VQ_I64;
    int64_t order = vq__attr_int(c, "storage_order", 0);
    if (rc == 0 && order != 0 && order != 1)
        return vq__attr_fail(c, "storage_order", "is %lld, not 0 (row-major) or 1 (column-major)",
                             (long long)order);
    p->column_major = order == 1;
    return rc;
}

/* max_pool2d_grad / avg_pool2d_grad (X, dOut) -> dX. */
static int pool_grad_infer(vq__infer *c)
{
    vq__meta full;
    int rc = pool_meta(c, c->params, &full);
    if (rc < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0 ||
        (rc = vq__check_shape_is(c, 1, &full, "the pool's output shape")) < 0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

static vq__window window_of(const vq__window_params *p, const vq_tensor *x, const int64_t *out)
{
    return vq__window_make(x->shape, p->kernel[0], p->kernel[1], out, p->stride, p->pad,
                           p->dilation);
}

/* ---- max_pool2d ---- */

/* The forward pass takes each window's maximum row by row: each of the
 * window's rows folds its taps, and the rows fold into Out's row in turn,
 * with FIRST_MAX, which keeps the first of equal values (of +0 and -0
 * too, which compare equal) and lets a NaN beat any number, the first NaN
 * staying. Folded left over a window's taps in row-major order, that is
 * the value at vq__window_argmax's position; and as the rule is
 * associative, folding each row and then the rows gives the same element.
 * Taps in the padding are skipped: a -inf there would change nothing but
 * the argmax. The outputs whose taps along a row all lie on the input (the
 * interior columns) fold without bounds checks, by SSE 4 outputs at a
 * time for f32 at strides 1 and 2 (the stem's 3x3 stride-2 pool of
 * ResNets), by the scalar loop otherwise and off x86. */
#define FIRST_MAX(a, b) ((a) >= (b) || (a) != (a) ? (a) : (b))

/* The outputs [*lo, *hi) along one dim of n inputs whose k taps (stride
 * s, dilation d, leading pad p0) all lie on the input, of nout. */
static void interior(int64_t n, int64_t p0, int64_t k, int64_t s, int64_t d, int64_t nout,
                     int64_t *lo, int64_t *hi)
{
    int64_t last = n - 1 + p0 - (k - 1) * d; /* o * s <= last */
    *lo = (p0 + s - 1) / s;
    *hi = last < 0 ? 0 : last / s + 1;
    *hi = *hi < nout ? *hi : nout;
    *lo = *lo < *hi ? *lo : *hi;
}

/* MAX_POOL(T, ARGMAX) defines max_row_T, which folds input row xr into
 * Out's row o at outputs [q0, q1), checking each tap's column (first: o
 * takes the row's maxima); max_row_inner_T, the same for interior outputs
 * [q0, q1), every tap on the input; max_pool_T, the forward pass over
 * w's planes; and max_pool_grad_T. */
#define MAX_POOL(T, ARGMAX)                                                                       \
    static void max_row_##T(const T *xr, T *o, const vq__window *w, int64_t q0, int64_t q1,       \
                            bool first)                                                           \
    {                                                                                             \
        for (int64_t q = q0; q < q1; q++) {                                                       \
            int64_t c0 = q * w->sw - w->pl;                                                       \
            T m = (T)-INFINITY;                                                                   \
            for (int64_t j = 0; j < w->kw; j++) {                                                 \
                int64_t iw = c0 + j * w->dw;                                                      \
                if (iw >= 0 && iw < w->w)                                                         \
                    m = FIRST_MAX(m, xr[iw]);                                                     \
            }                                                                                     \
            o[q] = first ? m : FIRST_MAX(o[q], m);                                                \
        }                                                                                         \
    }                                                                                             \
                                                                                                  \
    static void max_row_inner_##T(const T *xr, T *o, const vq__window *w, int64_t q0, int64_t q1, \
                                  bool first)                                                     \
    {                                                                                             \
        for (int64_t q = q0; q < q1; q++) {                                                       \
            const T *p = xr + q * w->sw - w->pl;                                                  \
            T m = p[0];                                                                           \
            for (int64_t j = 1; j < w->kw; j++)                                                   \
                m = FIRST_MAX(m, p[j * w->dw]);                                                   \
            o[q] = first ? m : FIRST_MAX(o[q], m);                                                \
        }                                                                                         \
    }                                                                                             \
                                                                                                  \
    static void max_pool_##T(const T *x, T *o, const vq__window *w)                               \
    {                                                                                             \
        int64_t plane = w->h * w->w, oplane = w->oh * w->ow, lo, hi;                              \
        interior(w->w, w->pl, w->kw, w->sw, w->dw, w->ow, &lo, &hi);                              \
        for (int64_t p = 0; p < w->n * w->c; p++) {                                               \
            const T *xp = x + p * plane;                                                          \
            for (int64_t oh = 0; oh < w->oh; oh++) {                                              \
                T *op = o + p * oplane + oh * w->ow;                                              \
                bool first = true;                                                                \
                for (int64_t i = 0; i < w->kh; i++) {                                             \
                    int64_t ih = oh * w->sh - w->pt + i * w->dh;                                  \
                    if (ih < 0 || ih >= w->h)                                                     \
                        continue;                                                                 \
                    const T *xr = xp + ih * w->w;                                                 \
                    max_row_##T(xr, op, w, 0, lo, first);                                         \
                    MAX_ROW_INNER_##T(xr, op, w, lo, hi, first);                                  \
                    max_row_##T(xr, op, w, hi, w->ow, first);                                     \
                    first = false;                                                                \
                }                                                                                 \
                for (int64_t q = 0; first && q < w->ow; q++) /* wholly in the pads */             \
                    op[q] = (T)-INFINITY;                                                         \
            }                                                                                     \
        }                                                                                         \
    }                                                                                             \
                                                                                                  \
    static void max_pool_grad_##T(const T *x, const T *g, T *dx, const vq__window *w)             \
    {                                                                                             \
        int64_t plane = w->h * w->w, oplane = w->oh * w->ow;                                      \
        memset(dx, 0, (size_t)(w->n * w->c * plane) * sizeof(T));                                 \
        for (int64_t p = 0; p < w->n * w->c; p++) {                                               \
            const T *xp = x + p * plane, *gp = g + p * oplane;                                    \
            T *dp = dx + p * plane;                                                               \
            for (int64_t oh = 0; oh < w->oh; oh++)                                                \
                for (int64_t ow = 0; ow < w->ow; ow++) {                                          \
                    int64_t a = ARGMAX(xp, w, oh, ow);                                            \
                    if (a >= 0)                                                                   \
                        dp[a] += gp[oh * w->ow + ow];                                             \
                }                                                                                 \
        }                                                                                         \
    }

#ifdef __SSE__
/* first_max on 4 lanes: a where a >= b or a is NaN, else b. */
static inline __m128 first_max4(__m128 a, __m128 b)
{
    __m128 keep = _mm_or_ps(_mm_cmpge_ps(a, b), _mm_cmpunord_ps(a, a));
    return _mm_or_ps(_mm_and_ps(keep, a), _mm_andnot_ps(keep, b));
}

static void max_row_inner_float(const float *xr, float *o, const vq__window *w, int64_t q0,
                                int64_t q1, bool first);

/* max_row_inner_float by 4 outputs at strides 1 and 2, the rest (other
 * strides, the last 0 to 3 outputs) by the scalar loop. At stride 2, tap
 * j of outputs q..q+3 is elements 0, 2, 4, 6 from q's: two loads, of
 * elements 0-3 and 3-6, so that none reads past the last tap of q + 3. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define POOL_AVX512 1
/* first_max on 16 lanes: a where a >= b or a is NaN, else b. */
__attribute__((target("avx512f"))) static inline __m512 first_max16(__m512 a, __m512 b)
{
    __mmask16 keep = _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(keep, b, a);
}

/* The same by 16 outputs with AVX-512 (same comparisons, so the same
 * values), the last 1 to 15 with masks; *qp goes to q1. At stride 2,
 * tap j of outputs q..q+15 is elements 0, 2, ..., 30 from q's: a load of
 * 0-15 and a masked one of 16-30 (none past the last tap of q + 15),
 * their even elements gathered by one permute. Masked loads for a whole
 * block of 16 too, so that one loop does both. */
__attribute__((target("avx512f"))) static void max_row_inner_avx512(const float *xr, float *o,
                                                                    const vq__window *w,
                                                                    int64_t *qp, int64_t q1,
                                                                    bool first)
{
    const __m512i even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    int64_t q = *qp;
    for (; q < q1; q += 16) {
        /* n outputs, each tap's run of them `need` elements: masks keep the
         * loads from reading past the last tap of the last output */
        int64_t n = q1 - q < 16 ? q1 - q : 16, need = (n - 1) * w->sw + 1;
        __mmask16 out = n == 16 ? 0xffff : (__mmask16)((1u << n) - 1);
        __mmask16 lo = need >= 16 ? 0xffff : (__mmask16)((1u << need) - 1);
        __mmask16 hi = need > 16 ? (__mmask16)((1u << (need - 16)) - 1) : 0;
        const float *p = xr + q * w->sw - w->pl;
        __m512 m = _mm512_setzero_ps();
        for (int64_t j = 0; j < w->kw; j++) {
            const float *t = p + j * w->dw;
            __m512 v = w->sw == 1 ? _mm512_maskz_loadu_ps(lo, t)
                                  : _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(lo, t), even,
                                                           _mm512_maskz_loadu_ps(hi, t + 16));
            m = j ? first_max16(m, v) : v;
        }
        if (!first)
            m = first_max16(_mm512_maskz_loadu_ps(out, o + q), m);
        _mm512_mask_storeu_ps(o + q, out, m);
    }
    q = q1;
    *qp = q;
}
#endif

static void max_row_inner_sse(const float *xr, float *o, const vq__window *w, int64_t q0,
                              int64_t q1, bool first)
{
    int64_t q = q0;
#ifdef POOL_AVX512
    if ((w->sw == 1 || w->sw == 2) && q1 > q0 && vq__isa() >= VQ__ISA_AVX512)
        max_row_inner_avx512(xr, o, w, &q, q1, first);
#endif
    if (w->sw == 1 || w->sw == 2)
        for (; q + 4 <= q1; q += 4) {
            const float *p = xr + q * w->sw - w->pl;
            __m128 m = _mm_setzero_ps();
            for (int64_t j = 0; j < w->kw; j++) {
                const float *t = p + j * w->dw;
                __m128 v = w->sw == 1 ? _mm_loadu_ps(t)
                                      : _mm_shuffle_ps(_mm_loadu_ps(t), _mm_loadu_ps(t + 3),
                                                       _MM_SHUFFLE(3, 1, 2, 0));
                m = j ? first_max4(m, v) : v;
            }
            _mm_storeu_ps(o + q, first ? m : first_max4(_mm_loadu_ps(o + q), m));
        }
    max_row_inner_float(xr, o, w, q, q1, first);
}
#define MAX_ROW_INNER_float max_row_inner_sse
#else
#define MAX_ROW_INNER_float max_row_inner_float
#endif
#define MAX_ROW_INNER_double max_row_inner_double

MAX_POOL(float, vq__window_argmax_f32)
MAX_POOL(double, vq__window_argmax_f64)

/* A pool's call, shared by planes (image, channel) with the idle workers
 * when it is large. */
struct pool_job {
    const vq__kcall *k;
    vq__window w;
};

/* The call's planes [lo, hi) as a window of hi - lo channels of one image. */
static vq__window planes_of(const struct pool_job *j, int64_t lo, int64_t hi, size_t *xoff,
                            size_t *ooff)
{
    vq__window w = j->w;
    size_t es = vq_dtype_size(j->k->in[0]->dtype);
    *xoff = (size_t)(lo * w.h * w.w) * es;
    *ooff = (size_t)(lo * w.oh * w.ow) * es;
    w.n = 1;
    w.c = hi - lo;
    return w;
}

static int max_pool_part(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const struct pool_job *j = arg;
    size_t xo, oo;
    vq__window w = planes_of(j, lo, hi, &xo, &oo);
    const char *x = j->k->in[0]->data;
    char *o = j->k->out[0]->data;
    if (j->k->in[0]->dtype == VQ_F32)
        max_pool_float((const float *)(x + xo), (float *)(o + oo), &w);
    else
        max_pool_double((const double *)(x + xo), (double *)(o + oo), &w);
    return 0;
}

/* Runs part over the call's planes: shared when its output is large, in
 * chunks of planes cut from the shapes alone. */
static int pool_planes(const struct pool_job *j, vq__range_fn part)
{
    int64_t planes = j->w.n * j->w.c, oplane = j->w.oh * j->w.ow;
    if (planes * oplane < 2 * VQ__PAR_ELEMS || planes < 2)
        return part((void *)j, 0, planes, 0);
    int64_t chunk = oplane >= VQ__PAR_ELEMS ? 1 : VQ__PAR_ELEMS / oplane;
    return vq__parallel_for(planes, chunk, part, (void *)j);
}

static int max_pool_kernel(const vq__kcall *k)
{
    vq_tensor *x = k->in[0], *o = k->out[0];
    if (o->numel == 0)
        return 0;
    struct pool_job j = {k, window_of(k->params, x, o->shape)};
    return pool_planes(&j, max_pool_part);
}

/* Out[n, c, oh, ow] = the index of the window's first maximum in X
 * flattened ((n * C + c) * H + h) * W + w, as ONNX MaxPool's Indices
 * (storage_order 0; 1: ((n * C + c) * W + w) * H + h); -1 for a window
 * wholly in the padding (which the pad rule excludes). */
static int max_pool_argmax_kernel(const vq__kcall *k)
{
    const vq__window_params *pr = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    vq__window w = window_of(pr, x, o->shape);
    int64_t plane = w.h * w.w, oplane = w.oh * w.ow, *out = o->data;
    for (int64_t p = 0; p < w.n * w.c; p++)
        for (int64_t q = 0; q < oplane; q++) {
            int64_t a = x->dtype == VQ_F32
                            ? vq__window_argmax_f32((const float *)x->data + p * plane, &w,
                                                    q / w.ow, q % w.ow)
                            : vq__window_argmax_f64((const double *)x->data + p * plane, &w,
                                                    q / w.ow, q % w.ow);
            if (a >= 0 && pr->column_major)
                a = a % w.w * w.h + a / w.w;
            out[p * oplane + q] = a < 0 ? -1 : p * plane + a;
        }
    return 0;
}

static int max_pool_grad_kernel(const vq__kcall *k)
{
    vq_tensor *x = k->in[0], *g = k->in[1], *dx = k->out[0];
    if (dx->numel == 0)
        return 0;
    vq__window w = window_of(k->params, x, g->shape);
    if (x->dtype == VQ_F32)
        max_pool_grad_float(x->data, g->data, dx->data, &w);
    else
        max_pool_grad_double(x->data, g->data, dx->data, &w);
    return 0;
}

/* ---- avg_pool2d ---- */

/* The taps of output (oh, ow)'s window that lie on the input: rows
 * [h0, h1), columns [w0, w1) (avg_pool2d has no dilation). */
struct taps {
    int64_t h0, h1, w0, w1;
};

static struct taps taps_of(const vq__window *w, int64_t oh, int64_t ow)
{
    struct taps t = {oh * w->sh - w->pt, 0, ow * w->sw - w->pl, 0};
    t.h1 = t.h0 + w->kh < w->h ? t.h0 + w->kh : w->h;
    t.w1 = t.w0 + w->kw < w->w ? t.w0 + w->kw : w->w;
    t.h0 = t.h0 < 0 ? 0 : t.h0;
    t.w0 = t.w0 < 0 ? 0 : t.w0;
    return t;
}

#define AVG_POOL(T)                                                                          \
    static void avg_pool_##T(const T *x, T *o, const vq__window *w, bool include_pad)       \
    {                                                                                        \
        int64_t plane = w->h * w->w, oplane = w->oh * w->ow;                                 \
        for (int64_t p = 0; p < w->n * w->c; p++) {                                          \
            const T *xp = x + p * plane;                                                     \
            T *op = o + p * oplane;                                                          \
            for (int64_t oh = 0; oh < w->oh; oh++)                                           \
                for (int64_t ow = 0; ow < w->ow; ow++) {                                     \
                    struct taps t = taps_of(w, oh, ow);                                      \
                    double s = 0;                                                            \
                    for (int64_t ih = t.h0; ih < t.h1; ih++)                                 \
                        for (int64_t iw = t.w0; iw < t.w1; iw++)                             \
                            s += xp[ih * w->w + iw];                                         \
                    int64_t n = vq__window_avg_count(w, oh, ow, include_pad);                \
                    op[oh * w->ow + ow] = (T)(s / (double)n);                                \
                }                                                                            \
        }                                                                                    \
    }                                                                                        \
                                                                                             \
    static void avg_pool_grad_##T(const T *g, T *dx, const vq__window *w, bool include_pad) \
    {                                                                                        \
        int64_t plane = w->h * w->w, oplane = w->oh * w->ow;                                 \
        memset(dx, 0, (size_t)(w->n * w->c * plane) * sizeof(T));                            \
        for (int64_t p = 0; p < w->n * w->c; p++) {                                          \
            const T *gp = g + p * oplane;                                                    \
            T *dp = dx + p * plane;                                                          \
            for (int64_t oh = 0; oh < w->oh; oh++)                                           \
                for (int64_t ow = 0; ow < w->ow; ow++) {                                     \
                    struct taps t = taps_of(w, oh, ow);                                      \
                    int64_t n = vq__window_avg_count(w, oh, ow, include_pad);                \
                    T v = (T)((double)gp[oh * w->ow + ow] / (double)n);                      \
                    for (int64_t ih = t.h0; ih < t.h1; ih++)                                 \
                        for (int64_t iw = t.w0; iw < t.w1; iw++)                             \
                            dp[ih * w->w + iw] += v;                                         \
                }                                                                            \
        }                                                                                    \
    }

AVG_POOL(float)
AVG_POOL(double)

static int avg_pool_part(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const struct pool_job *j = arg;
    const vq__window_params *p = j->k->params;
    size_t xo, oo;
    vq__window w = planes_of(j, lo, hi, &xo, &oo);
    const char *x = j->k->in[0]->data;
    char *o = j->k->out[0]->data;
    if (j->k->in[0]->dtype == VQ_F32)
        avg_pool_float((const float *)(x + xo), (float *)(o + oo), &w, p->count_include_pad);
    else
        avg_pool_double((const double *)(x + xo), (double *)(o + oo), &w, p->count_include_pad);
    return 0;
}

static int avg_pool_kernel(const vq__kcall *k)
{
    vq_tensor *x = k->in[0], *o = k->out[0];
    if (o->numel == 0)
        return 0;
    struct pool_job j = {k, window_of(k->params, x, o->shape)};
    return pool_planes(&j, avg_pool_part);
}

static int avg_pool_grad_kernel(const vq__kcall *k)
{
    const vq__window_params *p = k->params;
    vq_tensor *x = k->in[0], *g = k->in[1], *dx = k->out[0];
    if (dx->numel == 0)
        return 0;
    vq__window w = window_of(p, x, g->shape);
    if (x->dtype == VQ_F32)
        avg_pool_grad_float(g->data, dx->data, &w, p->count_include_pad);
    else
        avg_pool_grad_double(g->data, dx->data, &w, p->count_include_pad);
    return 0;
}

/* max_pool2d and avg_pool2d: one gradient op (X, dOut) with the forward
 * op's attributes, which its gradient op shares. */
static int pool_grad(const vq__grad *g)
{
    if (!g->din[0])
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output Out");
    char type[32];
    snprintf(type, sizeof type, "%s_grad", g->def->type);
    const char *in[2] = {g->in[0], g->dout[0]};
    return vq__emit(g, type, in, 2, &g->din[0], 1, g->attrs, g->nattrs);
}

/* ---- global_avg_pool ---- */

static int global_meta(const vq__infer *c, vq__meta *out)
{
    int rc = vq__check_dtype(c, 0, VQ__FLOATS);
    if (rc < 0)
        return rc;
    if (c->in[0].ndim < 3)
        return vq__in_fail(c, 0, "has %d dims; global_avg_pool needs at least 3 ([N, C, ...])",
                           c->in[0].ndim);
    *out = c->in[0];
    for (int d = 2; d < out->ndim; d++)
        out->shape[d] = 1;
    return 0;
}

static int global_infer(vq__infer *c)
{
    return global_meta(c, &c->out[0]);
}

static int global_grad_infer(vq__infer *c)
{
    vq__meta full;
    int rc = global_meta(c, &full);
    if (rc < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0 ||
        (rc = vq__check_shape_is(c, 1, &full, "X's pooled shape")) < 0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

/* X as [planes, len]: len is the product of the dims after the first two. */
static int64_t plane_len(const vq_tensor *x)
{
    int64_t len = 1;
    for (int d = 2; d < x->ndim; d++)
        len *= x->shape[d];
    return len;
}

/* The mean of zero elements is NaN, as reduce.c's. */
#define GLOBAL_POOL(T)                                                                       \
    static void global_pool_##T(const T *x, T *o, int64_t planes, int64_t len)              \
    {                                                                                        \
        for (int64_t p = 0; p < planes; p++) {                                               \
            double s = 0;                                                                    \
            for (int64_t i = 0; i < len; i++)                                                \
                s += x[p * len + i];                                                         \
            o[p] = (T)(len ? s / (double)len : NAN);                                         \
        }                                                                                    \
    }                                                                                        \
                                                                                             \
    static void global_pool_grad_##T(const T *g, T *dx, int64_t planes, int64_t len)        \
    {                                                                                        \
        double scale = 1.0 / (double)len;                                                    \
        for (int64_t p = 0; p < planes; p++)                                                 \
            for (int64_t i = 0; i < len; i++)                                                \
                dx[p * len + i] = (T)(g[p] * scale);                                         \
    }

GLOBAL_POOL(float)
GLOBAL_POOL(double)

static int global_kernel(const vq__kcall *k)
{
    vq_tensor *x = k->in[0], *o = k->out[0];
    if (x->dtype == VQ_F32)
        global_pool_float(x->data, o->data, o->numel, plane_len(x));
    else
        global_pool_double(x->data, o->data, o->numel, plane_len(x));
    return 0;
}

static int global_grad_kernel(const vq__kcall *k)
{
    vq_tensor *g = k->in[1], *dx = k->out[0];
    if (dx->numel == 0)
        return 0;
    if (dx->dtype == VQ_F32)
        global_pool_grad_float(g->data, dx->data, g->numel, plane_len(dx));
    else
        global_pool_grad_double(g->data, dx->data, g->numel, plane_len(dx));
    return 0;
}

static int global_grad(const vq__grad *g)
{
    if (!g->din[0])
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output Out");
    const char *in[2] = {g->in[0], g->dout[0]};
    return vq__emit(g, "global_avg_pool_grad", in, 2, &g->din[0], 1, NULL, 0);
}

static const vq__attr_spec max_pool_attrs[] = {
    {"kernel", VQ_ATTR_INTS, true, NULL},
    {"strides", VQ_ATTR_INTS, false, "[1,1]"},
    {"pads", VQ_ATTR_INTS, false, "[0,0,0,0]"},
    {"dilations", VQ_ATTR_INTS, false, "[1,1]"},
    {"ceil_mode", VQ_ATTR_BOOL, false, "0"},
};

static const vq__attr_spec argmax_attrs[] = {
    {"kernel", VQ_ATTR_INTS, true, NULL},       {"strides", VQ_ATTR_INTS, false, "[1,1]"},
    {"pads", VQ_ATTR_INTS, false, "[0,0,0,0]"}, {"dilations", VQ_ATTR_INTS, false, "[1,1]"},
    {"ceil_mode", VQ_ATTR_BOOL, false, "0"},    {"storage_order", VQ_ATTR_INT, false, "0"},
};

static const vq__attr_spec avg_pool_attrs[] = {
    {"kernel", VQ_ATTR_INTS, true, NULL},
    {"strides", VQ_ATTR_INTS, false, "[1,1]"},
    {"pads", VQ_ATTR_INTS, false, "[0,0,0,0]"},
    {"ceil_mode", VQ_ATTR_BOOL, false, "0"},
    {"count_include_pad", VQ_ATTR_BOOL, false, "0"},
};

#define POOL(name, c, attrs_, kern, grad_)                                                      \
    {                                                                                           \
        .type = name, .in_slots = x_in, .nin_slots = 1, .out_slots = out_slot, .nout_slots = 1, \
        .attrs = attrs_, .nattrs = 5, .code = c, .params_size = sizeof(vq__window_params),      \
        .infer = pool_infer, .kernel = {kern}, .cuda = VQ__CUDA_OP(vq__pool_gpu), .grad = grad_ \
    }

#define POOL_GRAD(name, c, attrs_, kern)                                                           \
    {                                                                                              \
        .type = name, .in_slots = grad_in, .nin_slots = 2, .out_slots = grad_out, .nout_slots = 1, \
        .attrs = attrs_, .nattrs = 5, .code = c, .params_size = sizeof(vq__window_params),         \
        .infer = pool_grad_infer, .kernel = {kern}, .cuda = VQ__CUDA_OP(vq__pool_grad_gpu)         \
    }

const vq__op_def vq__ops_pool[] = {
    POOL("max_pool2d", VQ__POOL_MAX, max_pool_attrs, max_pool_kernel, pool_grad),
    POOL_GRAD("max_pool2d_grad", VQ__POOL_MAX, max_pool_attrs, max_pool_grad_kernel),
    /* no gradient: indices */
    {.type = "max_pool2d_argmax",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .attrs = argmax_attrs,
     .nattrs = 6,
     .params_size = sizeof(vq__window_params),
     .infer = argmax_infer,
     .kernel = {max_pool_argmax_kernel},
     .cuda = VQ__CUDA_OP(vq__max_pool_argmax_gpu)},
    POOL("avg_pool2d", VQ__POOL_AVG, avg_pool_attrs, avg_pool_kernel, pool_grad),
    POOL_GRAD("avg_pool2d_grad", VQ__POOL_AVG, avg_pool_attrs, avg_pool_grad_kernel),
    {.type = "global_avg_pool",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .infer = global_infer,
     .kernel = {global_kernel},
     .cuda = VQ__CUDA_OP(vq__global_pool_gpu),
     .grad = global_grad},
    {.type = "global_avg_pool_grad",
     .in_slots = grad_in,
     .nin_slots = 2,
     .out_slots = grad_out,
     .nout_slots = 1,
     .infer = global_grad_infer,
     .kernel = {global_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__global_pool_grad_gpu)},
    {0},
};
