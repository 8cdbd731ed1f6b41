/* ONNX's integer products as varq ops: MatMulInteger, ConvInteger,
 * QLinearMatMul and QLinearConv, on varq's 8-bit integer GEMM
 * (ops/math/qgemm.c: exact i32 sums, AVX-512 VNNI / AVX2 / portable).
 *
 * matmul_integer(A, B, AZeroPoint, BZeroPoint) -> Y (i32): numpy's matmul
 *   of (A - AZeroPoint) and (B - BZeroPoint), batch dims broadcast, 1-D
 *   operands as numpy takes them; A and B u8 or i8 (each its own);
 *   AZeroPoint one value or 1-D [M] (per row of A), BZeroPoint one value
 *   or 1-D [N] (per column of B), each of its operand's dtype. Sums wrap
 *   in i32.
 * conv_integer(X, W, XZeroPoint, WZeroPoint) -> Y (i32): conv2d (NCHW;
 *   strides, pads, dilations, groups as conv2d's) of (X - XZeroPoint) and
 *   (W - WZeroPoint), padding contributing 0; XZeroPoint one value,
 *   WZeroPoint one value or [M] (per output channel). A depthwise call
 *   (one input and one output channel per group) sums its taps directly;
 *   the others run the integer GEMM per image and group: at stride 1 on
 *   the input padded once with the zero point, each tap's rows read in
 *   place (wide_conv); else on im2col's rows (padding filled with the zero
 *   point), which it asks for 4 at a time.
 * qlinear_matmul(A, AScale, AZeroPoint, B, BScale, BZeroPoint, YScale,
 *   YZeroPoint) -> Y: the integer product P of matmul_integer, then Y =
 *   saturate(round(f32(P) * (AScale * BScale / YScale)) + YZeroPoint), the
 *   multiplier in f32 in that order (ONNX Runtime's), per row of A and per
 *   column of B where the scales are; Y of YZeroPoint's dtype (u8, i8).
 * qlinear_conv(X, XScale, XZeroPoint, W, WScale, WZeroPoint, YScale,
 *   YZeroPoint[, B]) -> Y: conv_integer's P plus the optional i32 bias B
 *   [M], requantized as qlinear_matmul with WScale per output channel.
 *
 *
 * None has a gradient or a CUDA kernel. */
#include "quant.h"

#include "../math/qgemm.h"
#include "../window_shared.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const y_out[] = {"Y"};

/* ---- the integer products: shapes ---- */

/* The matrix product's geometry of A (slot ia) and B (slot ib): numpy's
 * matmul, 1-D operands included. */
struct mm_shape {
    int64_t m, n, k;
    int bnd;                      /* batch dims of Out */
    int64_t batch[VQ_MAX_DIMS];   /* Out's batch dims */
    int64_t astride[VQ_MAX_DIMS]; /* A's matrices apart along each (0: broadcast) */
    int64_t bstride[VQ_MAX_DIMS];
};

static int mm_meta(const vq__infer *c, int ia, int ib, vq__meta *out)
{
    const vq__meta *a = &c->in[ia], *b = &c->in[ib];
    if (a->ndim < 1 || b->ndim < 1)
        return vq__in_fail(c, a->ndim < 1 ? ia : ib, "is a scalar; matmul needs 1 dim or more");
    int64_t k = a->shape[a->ndim - 1], kb = b->shape[b->ndim == 1 ? 0 : b->ndim - 2];
    if (!vq__dim_match(k, kb))
        return vq__in_fail(c, ib, "inner dims differ: A's last is %lld, B's %lld", (long long)k,
                           (long long)kb);
    int an = a->ndim >= 2 ? a->ndim - 2 : 0, bn = b->ndim >= 2 ? b->ndim - 2 : 0;
    int nd = an > bn ? an : bn;
    out->ndim = 0;
    for (int d = 0; d < nd; d++) {
        int64_t da = d - (nd - an) >= 0 ? a->shape[d - (nd - an)] : 1;
        int64_t db = d - (nd - bn) >= 0 ? b->shape[d - (nd - bn)] : 1;
        if (da != db && da != 1 && db != 1 && da >= 0 && db >= 0)
            return vq__in_fail(c, ib, "batch dim %d is %lld, A's %lld: they do not broadcast", d,
                               (long long)db, (long long)da);
        out->shape[out->ndim++] = da == 1 ? db : db == 1 ? da : da < 0 ? db : da;
    }
    if (a->ndim >= 2)
        out->shape[out->ndim++] = a->shape[a->ndim - 2];
    if (b->ndim >= 2)
        out->shape[out->ndim++] = b->shape[b->ndim - 1];
    out->dtype = VQ_I32;
    return 0;
}

static struct mm_shape mm_of(const vq_tensor *a, const vq_tensor *b)
{
    struct mm_shape s;
    s.k = a->shape[a->ndim - 1];
    s.m = a->ndim >= 2 ? a->shape[a->ndim - 2] : 1;
    s.n = b->ndim >= 2 ? b->shape[b->ndim - 1] : 1;
    int an = a->ndim >= 2 ? a->ndim - 2 : 0, bn = b->ndim >= 2 ? b->ndim - 2 : 0;
    s.bnd = an > bn ? an : bn;
    int64_t as = s.m * s.k, bs = s.k * s.n;
    for (int d = s.bnd - 1; d >= 0; d--) {
        int64_t da = d - (s.bnd - an) >= 0 ? a->shape[d - (s.bnd - an)] : 1;
        int64_t db = d - (s.bnd - bn) >= 0 ? b->shape[d - (s.bnd - bn)] : 1;
        s.batch[d] = da > db ? da : db;
        s.astride[d] = da == 1 ? 0 : as;
        s.bstride[d] = db == 1 ? 0 : bs;
        as *= da;
        bs *= db;
    }
    return s;
}

/* The i32 product of every batch entry into p (Out's elements, m x n
 * matrices one after another); za / zb: the zero points as ints, per row
 * / column when their step is 1. */
static int mm_run(const struct mm_shape *s, const vq_tensor *a, const vq_tensor *b,
                  const int32_t *za, int zas, const int32_t *zb, int zbs, int32_t *p)
{
    int64_t nb = 1;
    for (int d = 0; d < s->bnd; d++)
        nb *= s->batch[d];
    for (int64_t e = 0; e < nb; e++) {
        int64_t ao = 0, bo = 0, rest = e;
        for (int d = s->bnd - 1; d >= 0; d--) {
            int64_t i = rest % s->batch[d];
            rest /= s->batch[d];
            ao += i * s->astride[d];
            bo += i * s->bstride[d];
        }
        vq__qgemm_args g = {.m = s->m,
                            .n = s->n,
                            .k = s->k,
                            .a = (const uint8_t *)a->data + ao,
                            .lda = s->k,
                            .a_signed = a->dtype == VQ_I8,
                            .za = za,
                            .za_step = zas,
                            .b = (const uint8_t *)b->data + bo,
                            .ldb = s->n,
                            .b_signed = b->dtype == VQ_I8,
                            .zb = zb,
                            .zb_step = zbs,
                            .c = p + e * s->m * s->n,
                            .ldc = s->n};
        int rc = vq__qgemm(&g);
        if (rc < 0)
            return vq__fail(rc, "%s: out of memory for the packed operands", "integer matmul");
    }
    return 0;
}

/* A zero point tensor's values as ints into z (n of them, or 1), its step. */
static int zero_ints(const vq_tensor *t, int32_t *z, int64_t n)
{
    if (t->numel == 1) {
        z[0] = vq__quant_int_at(t->dtype, t->data, 0);
        return 0;
    }
    for (int64_t i = 0; i < n; i++)
        z[i] = vq__quant_int_at(t->dtype, t->data, i);
    return 1;
}

/* ---- requantizing ---- */

#if HAVE_X86
/* requantize_row 16 at a time: the same bits (the i32 to f32 conversion
 * and the product round to nearest even as C's do). */
__attribute__((target("avx512f"))) static void requantize_avx512(const int32_t *p, int32_t bias,
                                                                 const float *mult, int ms, float z,
                                                                 vq_dtype ydt, void *y, int64_t o,
                                                                 int64_t n)
{
    float lo, hi;
    vq__quant_range(ydt, &lo, &hi);
    __m512 vz = _mm512_set1_ps(z), vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi),
           m1 = _mm512_set1_ps(mult[0]);
    __m512i vb = _mm512_set1_epi32(bias);
    int8_t *dst = (int8_t *)y + o;
    for (int64_t i = 0; i < n; i += 16) {
        int64_t left = n - i;
        __mmask16 m = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
        __m512 v = _mm512_cvtepi32_ps(_mm512_add_epi32(_mm512_maskz_loadu_epi32(m, p + i), vb));
        v = _mm512_mul_ps(v, ms ? _mm512_maskz_loadu_ps(m, mult + i) : m1);
        v = _mm512_add_ps(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                          vz);
        v = _mm512_min_ps(_mm512_max_ps(v, vlo), vhi);
        _mm512_mask_cvtepi32_storeu_epi8(dst + i, m, _mm512_cvtps_epi32(v));
    }
}
#endif

/* P (n values, i32) plus bias, times mult[j * ms] into Y's dtype: round
 * to nearest even, plus the zero point, saturated. */
static void requantize_row(const int32_t *p, int32_t bias, const float *mult, int ms, float z,
                           vq_dtype ydt, void *y, int64_t o, int64_t n)
{
#if HAVE_X86
    if (vq__isa() >= VQ__ISA_AVX512) {
        requantize_avx512(p, bias, mult, ms, z, ydt, y, o, n);
        return;
    }
#endif
    float lo, hi;
    vq__quant_range(ydt, &lo, &hi);
    for (int64_t j = 0; j < n; j++) {
        float v = nearbyintf((float)(int32_t)((uint32_t)p[j] + (uint32_t)bias) * mult[j * ms]) + z;
        v = v >= lo ? v : lo;
        v = v <= hi ? v : hi;
        if (ydt == VQ_U8)
            ((uint8_t *)y)[o + j] = (uint8_t)v;
        else
            ((int8_t *)y)[o + j] = (int8_t)v;
    }
}

/* The f32 multipliers sa[i] * sb[j] / sy of one row i of the product
 * (sb per column when nb > 1) into mult; its step. */
static int multipliers(float sa, const float *sb, int64_t nb, float sy, float *mult)
{
    for (int64_t j = 0; j < nb; j++)
        mult[j] = sa * sb[j] / sy;
    return nb > 1;
}

/* ---- matmul_integer, qlinear_matmul ---- */

static const char *const mi_in[] = {"A", "B", "AZeroPoint", "BZeroPoint"};
static const char *const qm_in[] = {"A",      "AScale",     "AZeroPoint", "B",
                                    "BScale", "BZeroPoint", "YScale",     "YZeroPoint"};

/* A's rows (M) and B's columns (N) as inference sees them. */
static void mm_dims(const vq__infer *c, int ia, int ib, int64_t *m, int64_t *n)
{
    const vq__meta *a = &c->in[ia], *b = &c->in[ib];
    *m = a->ndim >= 2 ? a->shape[a->ndim - 2] : 1;
    *n = b->ndim >= 2 ? b->shape[b->ndim - 1] : 1;
}

static int matmul_integer_infer(vq__infer *c)
{
    int rc;
    int64_t m, n;
    if ((rc = vq__check_dtype(c, 0, Q_INT8)) < 0 || (rc = vq__check_dtype(c, 1, Q_INT8)) < 0 ||
        (rc = vq__check_same_dtype(c, 0, 2)) < 0 || (rc = vq__check_same_dtype(c, 1, 3)) < 0)
        return rc;
    mm_dims(c, 0, 1, &m, &n);
    if ((rc = vq__quant_per_check(c, 2, m, "row of A")) < 0 ||
        (rc = vq__quant_per_check(c, 3, n, "column of B")) < 0)
        return rc;
    return mm_meta(c, 0, 1, &c->out[0]);
}

static int matmul_integer_kernel(const vq__kcall *k)
{
    const vq_tensor *a = k->in[0], *b = k->in[1];
    struct mm_shape s = mm_of(a, b);
    vq_tensor *z = NULL;
    int rc = vq__kernel_scratch(k, VQ_I32, s.m + s.n + 1, "zero points", &z);
    if (rc < 0)
        return rc;
    int32_t *za = z->data, *zb = za + s.m;
    int zas = zero_ints(k->in[2], za, s.m), zbs = zero_ints(k->in[3], zb, s.n);
    rc = mm_run(&s, a, b, za, zas, zb, zbs, k->out[0]->data);
    vq_tensor_release(z);
    return rc;
}

static int qlinear_matmul_infer(vq__infer *c)
{
    int rc;
    int64_t m, n;
    if ((rc = vq__check_dtype(c, 0, Q_INT8)) < 0 || (rc = vq__check_dtype(c, 3, Q_INT8)) < 0 ||
        (rc = vq__check_dtype(c, 7, Q_INT8)) < 0 || (rc = vq__check_same_dtype(c, 0, 2)) < 0 ||
        (rc = vq__check_same_dtype(c, 3, 5)) < 0)
        return rc;
    for (int s = 1; s <= 6; s += (s == 1 ? 3 : 2))
        if ((rc = vq__check_dtype(c, s, M_BIT(VQ_F32))) < 0)
            return rc;
    mm_dims(c, 0, 3, &m, &n);
    if ((rc = vq__quant_per_check(c, 1, m, "row of A")) < 0 ||
        (rc = vq__quant_per_check(c, 2, m, "row of A")) < 0 ||
        (rc = vq__quant_per_check(c, 4, n, "column of B")) < 0 ||
        (rc = vq__quant_per_check(c, 5, n, "column of B")) < 0)
        return rc;
    if (!vq__quant_one_value(&c->in[6]) || !vq__quant_one_value(&c->in[7]))
        return vq__in_fail(c, vq__quant_one_value(&c->in[6]) ? 7 : 6, "is not one value");
    if ((rc = mm_meta(c, 0, 3, &c->out[0])) < 0)
        return rc;
    c->out[0].dtype = c->in[7].dtype;
    return 0;
}

static int qlinear_matmul_kernel(const vq__kcall *k)
{
    const vq_tensor *a = k->in[0], *b = k->in[3], *yz = k->in[7];
    vq_tensor *y = k->out[0];
    struct mm_shape s = mm_of(a, b);
    int64_t nb = 1;
    for (int d = 0; d < s.bnd; d++)
        nb *= s.batch[d];
    vq_tensor *z = NULL, *prod = NULL;
    int rc = vq__kernel_scratch(k, VQ_I32, 3 * (s.m + s.n) + 1, "scales", &z);
    if (rc < 0)
        return rc;
    if ((rc = vq__kernel_scratch(k, VQ_I32, nb * s.m * s.n, "i32 product", &prod)) < 0) {
        vq_tensor_release(z);
        return rc;
    }
    int32_t *za = z->data, *zb = za + s.m;
    float *sa = (float *)(zb + s.n), *sb = sa + s.m, *mult = sb + s.n;
    int zas = zero_ints(k->in[2], za, s.m), zbs = zero_ints(k->in[5], zb, s.n);
    int64_t nsa = k->in[1]->numel, nsb = k->in[4]->numel;
    vq__quant_floats(k->in[1], sa, nsa);
    vq__quant_floats(k->in[4], sb, nsb);
    float sy = *(const float *)k->in[6]->data,
          yzero = (float)vq__quant_int_at(yz->dtype, yz->data, 0);
    rc = prod ? mm_run(&s, a, b, za, zas, zb, zbs, prod->data) : 0;
    for (int64_t i = 0; prod && rc == 0 && i < s.m; i++) {
        int ms = multipliers(sa[nsa > 1 ? i : 0], sb, nsb, sy, mult);
        for (int64_t e = 0; e < nb; e++) {
            int64_t o = (e * s.m + i) * s.n;
            requantize_row((const int32_t *)prod->data + o, 0, mult, ms, yzero, y->dtype, y->data,
                           o, s.n);
        }
    }
    vq_tensor_release(prod);
    vq_tensor_release(z);
    return rc;
}

/* ---- conv_integer, qlinear_conv ---- */

static const char *const ci_in[] = {"X", "W", "XZeroPoint", "WZeroPoint"};
static const char *const qc_in[] = {"X",          "XScale", "XZeroPoint", "W", "WScale",
                                    "WZeroPoint", "YScale", "YZeroPoint", "B"};

/* X (slot ix), W (slot iw) and the attributes: Out's meta (i32) and p. */
static int qconv_meta(vq__infer *c, int ix, int iw, struct quant_params *p)
{
    int rc;
    if ((rc = vq__check_dtype(c, ix, Q_INT8)) < 0 || (rc = vq__check_dtype(c, iw, Q_INT8)) < 0 ||
        (rc = vq__check_rank(c, ix, 4)) < 0 || (rc = vq__check_rank(c, iw, 4)) < 0 ||
        (rc = vq__window_attrs(c, &p->w)) < 0)
        return rc;
    int64_t groups = vq__attr_int(c, "groups", 1);
    if (groups < 1 || groups > INT32_MAX)
        return vq__attr_fail(c, "groups", "is %lld, outside [1, 2^31)", (long long)groups);
    p->w.groups = groups;
    const vq__meta *x = &c->in[ix], *w = &c->in[iw];
    int64_t C = x->shape[1], M = w->shape[0], cg = w->shape[1];
    if (M >= 0 && M % groups)
        return vq__in_fail(c, iw, "has %lld output channels, which groups %lld does not divide",
                           (long long)M, (long long)groups);
    if (C >= 0 && cg >= 0 && cg * groups != C)
        return vq__in_fail(c, iw, "has %lld input channels per group; X has %lld in %lld groups",
                           (long long)cg, (long long)C, (long long)groups);
    int64_t hw[2];
    if ((rc = vq__window_out_hw(c, &p->w, x->shape[2], x->shape[3], w->shape[2], w->shape[3], false,
                                hw)) < 0)
        return rc;
    c->out[0] = (vq__meta){.dtype = VQ_I32, .ndim = 4, .shape = {x->shape[0], M, hw[0], hw[1]}};
    return 0;
}

static int conv_integer_infer(vq__infer *c)
{
    int rc = qconv_meta(c, 0, 1, c->params);
    if (rc < 0 || (rc = vq__check_same_dtype(c, 0, 2)) < 0 ||
        (rc = vq__check_same_dtype(c, 1, 3)) < 0)
        return rc;
    if (!vq__quant_one_value(&c->in[2]))
        return vq__in_fail(c, 2, "is not one value");
    return vq__quant_per_check(c, 3, c->in[1].shape[0], "output channel");
}

static int qlinear_conv_infer(vq__infer *c)
{
    int rc = qconv_meta(c, 0, 3, c->params);
    if (rc < 0 || (rc = vq__check_same_dtype(c, 0, 2)) < 0 ||
        (rc = vq__check_same_dtype(c, 3, 5)) < 0 || (rc = vq__check_dtype(c, 7, Q_INT8)) < 0)
        return rc;
    for (int s = 1; s <= 6; s += (s == 1 ? 3 : 2))
        if ((rc = vq__check_dtype(c, s, M_BIT(VQ_F32))) < 0)
            return rc;
    int64_t M = c->in[3].shape[0];
    for (int s = 1; s <= 7; s++)
        if (s != 3 && s != 4 && s != 5 && !vq__quant_one_value(&c->in[s]))
            return vq__in_fail(c, s, "is not one value");
    if ((rc = vq__quant_per_check(c, 4, M, "output channel")) < 0 ||
        (rc = vq__quant_per_check(c, 5, M, "output channel")) < 0)
        return rc;
    if (c->nin > 8) {
        if ((rc = vq__check_dtype(c, 8, M_BIT(VQ_I32))) < 0 || (rc = vq__check_rank(c, 8, 1)) < 0)
            return rc;
        if (!vq__dim_match(c->in[8].shape[0], M))
            return vq__in_fail(c, 8, "has %lld values for %lld output channels",
                               (long long)c->in[8].shape[0], (long long)M);
    }
    c->out[0].dtype = c->in[7].dtype;
    return 0;
}

/* im2col of one image's group, row by row, for the product (qgemm.h's
 * b_rows): row r of [channels * kh * kw, oh * ow] is input channel r /
 * (kh kw) seen through tap (r / kw % kh, r % kw), padding filled with pad
 * (the zero point's byte: it contributes 0). */
struct im2col_src {
    const uint8_t *x; /* the group's planes [channels, h, w] */
    const vq__window *w;
    uint8_t pad;
};

static void im2col_rows(const void *ctx, int64_t r0, int64_t nr, uint8_t *col, int64_t ldd)
{
    const struct im2col_src *src = ctx;
    const vq__window *w = src->w;
    uint8_t pad = src->pad;
    for (int64_t r = r0; r < r0 + nr; r++) {
        int64_t ch = r / (w->kh * w->kw), ki = r / w->kw % w->kh, kj = r % w->kw;
        uint8_t *dst = col + (r - r0) * ldd;
        const uint8_t *plane = src->x + ch * w->h * w->w;
        int64_t off = kj * w->dw - w->pl, c0 = 0, c1 = w->ow;
        while (c0 < c1 && c0 * w->sw + off < 0)
            c0++;
        while (c1 > c0 && (c1 - 1) * w->sw + off >= w->w)
            c1--;
        for (int64_t oi = 0; oi < w->oh; oi++) {
            int64_t hi = oi * w->sh - w->pt + ki * w->dh;
            uint8_t *d = dst + oi * w->ow;
            if (hi < 0 || hi >= w->h) {
                memset(d, pad, (size_t)w->ow);
                continue;
            }
            const uint8_t *row = plane + hi * w->w;
            /* padding, the input's columns [c0, c1), padding */
            memset(d, pad, (size_t)c0);
            if (w->sw == 1)
                memcpy(d + c0, row + c0 + off, (size_t)(c1 - c0));
            else
                for (int64_t oj = c0; oj < c1; oj++)
                    d[oj] = row[oj * w->sw + off];
            memset(d + c1, pad, (size_t)(w->ow - c1));
        }
    }
}

/* A convolution of stride 1 as a product of "wide" rows: X's group copied
 * once into planes padded with the zero point (hp x wp), im2col's row of
 * channel c and tap (ki, kj) is then the padded planes from (c, ki dh, kj
 * dw) on, oh rows of wp bytes, in place: the product's columns are the
 * output rows at the padded width, of which the first ow are the output's
 * (the last dw (kw - 1) of each row mix neighbouring rows, and are
 * dropped). */
struct wide_src {
    const uint8_t *pad;
    int64_t hp, wp, kh, kw, dh, dw;
};

static const uint8_t *wide_row(const void *ctx, int64_t r)
{
    const struct wide_src *s = ctx;
    int64_t ch = r / (s->kh * s->kw), ki = r / s->kw % s->kh, kj = r % s->kw;
    return s->pad + (ch * s->hp + ki * s->dh) * s->wp + kj * s->dw;
}

/* The i32 convolution of one image's group xg (cg planes) by stride-1
 * window win into out (mg planes of oh x ow), through the wide rows; a
 * the weights' (mg x kc), zero points as qgemm takes them. */
static int wide_conv(const vq__kcall *k, const vq__window *win, const uint8_t *xg, int64_t cg,
                     vq__qgemm_args a, int32_t *out)
{
    int64_t hp = win->h + win->pt + win->pb, wp = win->w + win->pl + win->pr;
    int64_t slack = win->dw * (win->kw - 1) + 64, ncol = win->oh * wp;
    vq_tensor *pt = NULL, *ct = NULL;
    int rc = vq__kernel_scratch(k, VQ_U8, cg * hp * wp + slack, "padded planes", &pt);
    if (rc == 0)
        rc = vq__kernel_scratch(k, VQ_I32, a.m * ncol, "wide product", &ct);
    if (rc < 0) {
        vq_tensor_release(pt);
        return rc;
    }
    uint8_t *pad = pt->data;
    memset(pad, (uint8_t)*a.zb, (size_t)(cg * hp * wp + slack));
    for (int64_t c = 0; c < cg; c++)
        for (int64_t y = 0; y < win->h; y++)
            memcpy(pad + (c * hp + y + win->pt) * wp + win->pl, xg + (c * win->h + y) * win->w,
                   (size_t)win->w);
    struct wide_src src = {pad, hp, wp, win->kh, win->kw, win->dh, win->dw};
    a.n = ncol;
    a.ldc = ncol;
    a.c = ct->data;
    a.b = NULL;
    a.b_rows = NULL;
    a.b_row = wide_row;
    a.b_ctx = &src;
    if ((rc = vq__qgemm(&a)) < 0)
        rc = vq__fail(rc, "%s: out of memory for the packed operands", k->def->type);
    for (int64_t m = 0; rc == 0 && m < a.m; m++)
        for (int64_t oi = 0; oi < win->oh; oi++)
            memcpy(out + (m * win->oh + oi) * win->ow,
                   (const int32_t *)ct->data + m * ncol + oi * wp, (size_t)win->ow * sizeof *out);
    vq_tensor_release(ct);
    vq_tensor_release(pt);
    return rc;
}

/* ---- depthwise: one input and one output channel per group ---- */

#define DW_MAX_TAPS 256

struct dw_job {
    const vq__window *win;
    const uint8_t *x, *w;
    bool x_signed, w_signed;
    int32_t xz;
    const int32_t *wz;
    int wzs;
    int32_t *p;
    int64_t channels;
};

#if HAVE_X86
/* One plane, stride 1, u8 X, from its copy pp (rows pw apart) padded with
 * X's zero point (so padding adds 0) and 16 bytes of slack: 16 outputs at
 * a time, every tap summed in a register. wv: the taps less W's zero
 * point. */
__attribute__((target("avx512f"))) static void dw_plane_avx512(const struct dw_job *j,
                                                               const uint8_t *pp, int64_t pw,
                                                               const int32_t *wv, int32_t *o)
{
    const vq__window *w = j->win;
    __m512i xz = _mm512_set1_epi32(j->xz);
    for (int64_t oi = 0; oi < w->oh; oi++)
        for (int64_t oj = 0; oj < w->ow; oj += 16) {
            int64_t left = w->ow - oj;
            __mmask16 m = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
            __m512i acc = _mm512_setzero_si512();
            for (int64_t ki = 0; ki < w->kh; ki++) {
                const uint8_t *r = pp + (oi * w->sh + ki * w->dh) * pw + oj;
                for (int64_t kj = 0; kj < w->kw; kj++) {
                    __m128i b = _mm_loadu_si128((const __m128i *)(r + kj * w->dw));
                    __m512i v = _mm512_sub_epi32(_mm512_cvtepu8_epi32(b), xz);
                    acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(v, _mm512_set1_epi32(
                                                                          wv[ki * w->kw + kj])));
                }
            }
            _mm512_mask_storeu_epi32(o + oi * w->ow + oj, m, acc);
        }
}

/* The planes [lo, hi) by dw_plane_avx512 (stride 1, u8 X): false when the
 * padded copy cannot be had (the caller takes the plain loop). */
static bool dw_planes_avx512(const struct dw_job *j, int64_t lo, int64_t hi)
{
    const vq__window *w = j->win;
    int64_t ph = w->h + w->pt + w->pb, pw = w->w + w->pl + w->pr, taps = w->kh * w->kw;
    uint8_t *pp = malloc((size_t)(ph * pw + 16));
    if (!pp)
        return false;
    int32_t wv[DW_MAX_TAPS];
    for (int64_t e = lo; e < hi; e++) {
        int64_t ch = e % j->channels;
        const uint8_t *x = j->x + e * w->h * w->w, *wt = j->w + ch * taps;
        int32_t wz = j->wz[j->wzs ? ch : 0];
        for (int64_t t = 0; t < taps; t++)
            wv[t] = (j->w_signed ? (int32_t)(int8_t)wt[t] : (int32_t)wt[t]) - wz;
        memset(pp, (uint8_t)j->xz, (size_t)(ph * pw + 16));
        for (int64_t y = 0; y < w->h; y++)
            memcpy(pp + (y + w->pt) * pw + w->pl, x + y * w->w, (size_t)w->w);
        dw_plane_avx512(j, pp, pw, wv, j->p + e * w->oh * w->ow);
    }
    free(pp);
    return true;
}
#endif

/* The planes [lo, hi) of (image, channel) pairs: for each tap, its weight
 * less the zero point times each input element under it less X's zero
 * point, added into the output plane (taps over padding add nothing). */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("vect-cost-model=cheap")))
#endif
static int
dw_planes(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const struct dw_job *j = arg;
    const vq__window *w = j->win;
#if HAVE_X86
    if (w->sw == 1 && !j->x_signed && vq__isa() >= VQ__ISA_AVX512 && dw_planes_avx512(j, lo, hi))
        return 0;
#endif
    int64_t plane = w->oh * w->ow, taps = w->kh * w->kw;
    for (int64_t e = lo; e < hi; e++) {
        int64_t ch = e % j->channels;
        const uint8_t *x = j->x + e * w->h * w->w, *wt = j->w + ch * taps;
        int32_t *o = j->p + e * plane, wz = j->wz[j->wzs ? ch : 0];
        memset(o, 0, (size_t)plane * sizeof *o);
        for (int64_t ki = 0; ki < w->kh; ki++)
            for (int64_t kj = 0; kj < w->kw; kj++) {
                int32_t wv = (j->w_signed ? (int32_t)(int8_t)wt[ki * w->kw + kj]
                                          : (int32_t)wt[ki * w->kw + kj]) -
                             wz;
                if (!wv)
                    continue;
                /* the output columns whose input column lies inside the plane */
                int64_t off = kj * w->dw - w->pl, c0 = 0, c1 = w->ow;
                while (c0 < c1 && c0 * w->sw + off < 0)
                    c0++;
                while (c1 > c0 && (c1 - 1) * w->sw + off >= w->w)
                    c1--;
                for (int64_t oi = 0; oi < w->oh; oi++) {
                    int64_t hi_ = oi * w->sh - w->pt + ki * w->dh;
                    if (hi_ < 0 || hi_ >= w->h)
                        continue;
                    const uint8_t *row = x + hi_ * w->w + off;
                    int32_t *orow = o + oi * w->ow;
                    /* locals: a store through orow could otherwise alias them */
                    int64_t s = w->sw;
                    int32_t xz = j->xz;
                    if (j->x_signed)
                        for (int64_t oj = c0; oj < c1; oj++)
                            orow[oj] += wv * ((int32_t)(int8_t)row[oj * s] - xz);
                    else if (s == 1) /* contiguous: vectorized */
                        for (int64_t oj = c0; oj < c1; oj++)
                            orow[oj] += wv * ((int32_t)row[oj] - xz);
                    else
                        for (int64_t oj = c0; oj < c1; oj++)
                            orow[oj] += wv * ((int32_t)row[oj * s] - xz);
                }
            }
    }
    return 0;
}

/* The i32 convolution of X and W (zero points xz, and wz per channel when
 * wzs is 1) into p (Out's elements). */
static int qconv_run(const vq__kcall *k, const struct quant_params *prm, const vq_tensor *x,
                     const vq_tensor *w, int32_t xz, const int32_t *wz, int wzs, int32_t *p,
                     const vq_tensor *out)
{
    vq__window win = vq__window_make(x->shape, w->shape[2], w->shape[3], out->shape, prm->w.stride,
                                     prm->w.pad, prm->w.dilation);
    int64_t groups = prm->w.groups, cg = x->shape[1] / groups, mg = w->shape[0] / groups;
    int64_t kc = cg * win.kh * win.kw, ncol = win.oh * win.ow;
    if (cg == 1 && mg == 1 && groups > 1 && win.kh * win.kw <= DW_MAX_TAPS) {
        /* the sums stay far inside i32: |x - xz|, |w - wz| < 2^9, at most
         * 2^8 taps */
        struct dw_job j = {&win, x->data, w->data, x->dtype == VQ_I8, w->dtype == VQ_I8, xz, wz,
                           wzs,  p,       groups};
        return vq__parallel_for(win.n * groups, 4, dw_planes, &j);
    }
    bool direct = win.kh == 1 && win.kw == 1 && win.sh == 1 && win.sw == 1 && win.pt == 0 &&
                  win.pl == 0 && win.pb == 0 && win.pr == 0;
    int rc = 0;
    for (int64_t n = 0; rc == 0 && n < win.n; n++)
        for (int64_t g = 0; rc == 0 && g < groups; g++) {
            const uint8_t *xg =
                (const uint8_t *)x->data + (n * x->shape[1] + g * cg) * win.h * win.w;
            struct im2col_src src = {xg, &win, (uint8_t)xz};
            vq__qgemm_args a = {.m = mg,
                                .n = ncol,
                                .k = kc,
                                .a = (const uint8_t *)w->data + g * mg * kc,
                                .lda = kc,
                                .a_signed = w->dtype == VQ_I8,
                                .za = wz + (wzs ? g * mg : 0),
                                .za_step = wzs,
                                .b = direct ? xg : NULL,
                                .ldb = ncol,
                                .b_signed = x->dtype == VQ_I8,
                                .zb = &xz,
                                .zb_step = 0,
                                .c = p + (n * w->shape[0] + g * mg) * ncol,
                                .ldc = ncol,
                                .b_rows = direct ? NULL : im2col_rows,
                                .b_ctx = &src};
            if (!direct && win.sh == 1 && win.sw == 1)
                rc = wide_conv(k, &win, xg, cg, a, a.c);
            else if ((rc = vq__qgemm(&a)) < 0)
                rc = vq__fail(rc, "%s: out of memory for the packed operands", k->def->type);
        }
    return rc;
}

static int conv_integer_kernel(const vq__kcall *k)
{
    const vq_tensor *w = k->in[1];
    vq_tensor *z = NULL;
    int rc = vq__kernel_scratch(k, VQ_I32, w->shape[0] + 1, "zero points", &z);
    if (rc < 0)
        return rc;
    int32_t xz = vq__quant_int_at(k->in[2]->dtype, k->in[2]->data, 0), *wz = z->data;
    int wzs = zero_ints(k->in[3], wz, w->shape[0]);
    rc = qconv_run(k, k->params, k->in[0], w, xz, wz, wzs, k->out[0]->data, k->out[0]);
    vq_tensor_release(z);
    return rc;
}

static int qlinear_conv_kernel(const vq__kcall *k)
{
    const vq_tensor *w = k->in[3], *yz = k->in[7], *bias = k->nin > 8 ? k->in[8] : NULL;
    vq_tensor *y = k->out[0];
    int64_t M = w->shape[0], plane = y->shape[2] * y->shape[3];
    vq_tensor *z = NULL, *prod = NULL;
    int rc = vq__kernel_scratch(k, VQ_I32, 3 * M + 1, "scales", &z);
    if (rc < 0)
        return rc;
    if ((rc = vq__kernel_scratch(k, VQ_I32, y->numel, "i32 product", &prod)) < 0) {
        vq_tensor_release(z);
        return rc;
    }
    int32_t *wz = z->data, xz = vq__quant_int_at(k->in[2]->dtype, k->in[2]->data, 0);
    float *sw = (float *)(wz + M), *mult = sw + M;
    int wzs = zero_ints(k->in[5], wz, M);
    int64_t nsw = k->in[4]->numel;
    vq__quant_floats(k->in[4], sw, nsw);
    float sx = *(const float *)k->in[1]->data, sy = *(const float *)k->in[6]->data;
    float yzero = (float)vq__quant_int_at(yz->dtype, yz->data, 0);
    multipliers(sx, sw, nsw, sy, mult);
    if (prod)
        rc = qconv_run(k, k->params, k->in[0], w, xz, wz, wzs, prod->data, y);
    for (int64_t n = 0; prod && rc == 0 && n < y->shape[0]; n++)
        for (int64_t m = 0; m < M; m++) {
            int64_t o = (n * M + m) * plane;
            requantize_row((const int32_t *)prod->data + o,
                           bias ? ((const int32_t *)bias->data)[m] : 0, mult + (nsw > 1 ? m : 0), 0,
                           yzero, y->dtype, y->data, o, plane);
        }
    vq_tensor_release(prod);
    vq_tensor_release(z);
    return rc;
}

/* ---- the table ---- */

static const vq__attr_spec conv_attrs[] = {
    {"strides", VQ_ATTR_INTS, false, "[1,1]"},
    {"pads", VQ_ATTR_INTS, false, "[0,0,0,0]"},
    {"dilations", VQ_ATTR_INTS, false, "[1,1]"},
    {"groups", VQ_ATTR_INT, false, "1"},
};

const vq__op_def vq__ops_qproduct[] = {
    VQ__QOP("conv_integer", ci_in, 4, y_out, 1, 0, conv_attrs, 4, conv_integer_infer,
            conv_integer_kernel),
    VQ__QOP("matmul_integer", mi_in, 4, y_out, 1, 0, NULL, 0, matmul_integer_infer,
            matmul_integer_kernel),
    VQ__QOP("qlinear_conv", qc_in, 9, y_out, 1, VQ__OPTIONAL_IN, conv_attrs, 4, qlinear_conv_infer,
            qlinear_conv_kernel),
    VQ__QOP("qlinear_matmul", qm_in, 8, y_out, 1, 0, NULL, 0, qlinear_matmul_infer,
            qlinear_matmul_kernel),
    {0},
};
