/* ONNX's linear quantization as varq ops: QuantizeLinear,
 * DequantizeLinear, DynamicQuantizeLinear; and the helpers of scales and
 * zero points that the integer products (qproduct.c) share (quant.h).
 *
 * quantize_linear(X, Scale[, ZeroPoint]) -> Y; axis = 1, dtype = "u8":
 *   Y = saturate(round(X / Scale) + ZeroPoint), the division in f32, the
 *   rounding to nearest even, saturation to Y's range (NaN gives Y's
 *   least value). X f32, f16, bf16 (widened to f32) or i32 (converted to
 *   f32); Scale f32, f16 or bf16; Y is ZeroPoint's dtype (u8, i8, u16,
 *   i16), or dtype without one (zero point 0).
 * dequantize_linear(X, Scale[, ZeroPoint]) -> Y; axis = 1:
 *   Y = f32(X - ZeroPoint) * Scale, of Scale's dtype (f16 and bf16 rounded
 *   from the f32 result). X u8, i8, u16, i16 or i32, ZeroPoint its dtype.
 * Scale and ZeroPoint are one value (any shape of one element: per
 * tensor) or 1-D along X's dim axis (per axis), ZeroPoint shaped as Scale.
 *
 * dynamic_quantize_linear(X) -> Y, Scale, ZeroPoint: X f32, Y u8, Scale
 *   f32 and ZeroPoint u8 scalars, by ONNX's formula: lo = min(0, min X),
 *   hi = max(0, max X), Scale = (hi - lo) / 255, ZeroPoint =
 *   saturate(round((0 - lo) / Scale)), then Y as quantize_linear. An X of
 *   zeros (or empty) gives Scale 0, ZeroPoint 0 and Y 0.
 *
 * None has a gradient or a CUDA kernel. */
#include "quant.h"

#include <math.h>
#include <string.h>

/* ---- scales and zero points ---- */

/* The range of an integer dtype. */
void vq__quant_range(vq_dtype dt, float *lo, float *hi)
{
    switch (dt) {
    case VQ_I8: *lo = -128, *hi = 127; return;
    case VQ_U16: *lo = 0, *hi = 65535; return;
    case VQ_I16: *lo = -32768, *hi = 32767; return;
    case VQ_I32: *lo = (float)INT32_MIN, *hi = (float)INT32_MAX; return;
    default: *lo = 0, *hi = 255; return;
    }
}

/* Element i of an integer tensor's bytes as an int32. */
int32_t vq__quant_int_at(vq_dtype dt, const void *p, int64_t i)
{
    switch (dt) {
    case VQ_U8: return ((const uint8_t *)p)[i];
    case VQ_I8: return ((const int8_t *)p)[i];
    case VQ_U16: return ((const uint16_t *)p)[i];
    case VQ_I16: return ((const int16_t *)p)[i];
    default: return ((const int32_t *)p)[i];
    }
}

/* n floats of t (f32, f16, bf16) from element 0 into out. */
void vq__quant_floats(const vq_tensor *t, float *out, int64_t n)
{
    if (t->dtype == VQ_F16)
        vq__half()->f16_to_f32(t->data, out, n);
    else if (t->dtype == VQ_BF16)
        vq__half()->bf16_to_f32(t->data, out, n);
    else
        memcpy(out, t->data, (size_t)n * sizeof *out);
}

bool vq__quant_one_value(const vq__meta *m)
{
    int64_t n = 1;
    for (int d = 0; d < m->ndim; d++)
        n *= m->shape[d];
    return n == 1;
}

/* Checks a scale or zero point (slot) against its operand's dim: one
 * value, or 1-D of dim (unknown dims pass). what: "row of A", ... */
int vq__quant_per_check(const vq__infer *c, int slot, int64_t dim, const char *what)
{
    const vq__meta *s = &c->in[slot];
    if (vq__quant_one_value(s))
        return 0;
    if (s->ndim != 1)
        return vq__in_fail(c, slot, "has %d dims; it is one value or 1-D, one per %s", s->ndim,
                           what);
    if (!vq__dim_match(s->shape[0], dim))
        return vq__in_fail(c, slot, "has %lld values, not one or %lld (one per %s)",
                           (long long)s->shape[0], (long long)dim, what);
    return 0;
}

/* ---- quantize_linear, dequantize_linear ---- */

static const char *const q_in[] = {"X", "Scale", "ZeroPoint"};
static const char *const y_out[] = {"Y"};

/* The axis, and the checks of Scale and ZeroPoint against X, that both
 * ops share: params' axis -1 for one value. */
static int qdq_common(vq__infer *c, struct quant_params *p)
{
    const vq__meta *x = &c->in[0], *s = &c->in[1];
    int rc = vq__check_dtype(c, 1, Q_FLOATS);
    if (rc < 0)
        return rc;
    if (c->nin > 2) {
        if (s->ndim != c->in[2].ndim || !vq__dim_match(s->shape[0], c->in[2].shape[0]))
            return vq__in_fail(c, 2, "is not shaped as Scale");
    }
    p->axis = -1;
    if (vq__quant_one_value(s))
        return 0;
    int axis;
    if ((rc = vq__axis(c, "axis", vq__attr_int(c, "axis", 1), x->ndim, &axis)) < 0)
        return rc;
    if ((rc = vq__quant_per_check(c, 1, x->shape[axis], "element of X's dim axis")) < 0)
        return rc;
    p->axis = axis;
    return 0;
}

static int quantize_infer(vq__infer *c)
{
    struct quant_params *p = c->params;
    int rc = vq__check_dtype(c, 0, Q_FLOATS | M_BIT(VQ_I32));
    if (rc < 0 || (rc = qdq_common(c, p)) < 0)
        return rc;
    if ((rc = vq__attr_dtype(c, "dtype", VQ_U8, &p->ydt)) < 0)
        return rc;
    if (c->nin > 2) {
        if ((rc = vq__check_dtype(c, 2, Q_INTS)) < 0)
            return rc;
        p->ydt = c->in[2].dtype;
    } else if (!(M_BIT(p->ydt) & Q_INTS))
        return vq__attr_fail(c, "dtype", "is %s, not u8, i8, u16 or i16", vq_dtype_name(p->ydt));
    c->out[0] = c->in[0];
    c->out[0].dtype = p->ydt;
    return 0;
}

static int dequantize_infer(vq__infer *c)
{
    struct quant_params *p = c->params;
    int rc = vq__check_dtype(c, 0, Q_INTS | M_BIT(VQ_I32));
    if (rc < 0 || (rc = qdq_common(c, p)) < 0)
        return rc;
    if (c->nin > 2 && (rc = vq__check_same_dtype(c, 0, 2)) < 0)
        return rc;
    c->out[0] = c->in[0];
    c->out[0].dtype = c->in[1].dtype;
    return 0;
}

/* One block of n floats quantized with scale s and zero point z into
 * Y's dtype at y (element offset o). */
static void quantize_portable(const float *x, int64_t n, float s, float z, vq_dtype ydt, void *y,
                              int64_t o)
{
    float lo, hi;
    vq__quant_range(ydt, &lo, &hi);
    for (int64_t i = 0; i < n; i++) {
        float v = nearbyintf(x[i] / s) + z;
        v = v >= lo ? v : lo; /* NaN: lo */
        v = v <= hi ? v : hi;
        switch (ydt) {
        case VQ_U8: ((uint8_t *)y)[o + i] = (uint8_t)v; break;
        case VQ_I8: ((int8_t *)y)[o + i] = (int8_t)v; break;
        case VQ_U16: ((uint16_t *)y)[o + i] = (uint16_t)v; break;
        default: ((int16_t *)y)[o + i] = (int16_t)v; break;
        }
    }
}

#if HAVE_X86
/* The same, 16 at a time, for u8 and i8: the same bits (division, round
 * to nearest even, max with lo first so NaN gives lo). */
__attribute__((target("avx512f"))) static void
quantize_avx512(const float *x, int64_t n, float s, float z, vq_dtype ydt, void *y, int64_t o)
{
    float lo, hi;
    vq__quant_range(ydt, &lo, &hi);
    __m512 vs = _mm512_set1_ps(s), vz = _mm512_set1_ps(z), vlo = _mm512_set1_ps(lo),
           vhi = _mm512_set1_ps(hi);
    int8_t *dst = (int8_t *)y + o;
    for (int64_t i = 0; i < n; i += 16) {
        int64_t left = n - i;
        __mmask16 m = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
        __m512 v = _mm512_div_ps(_mm512_maskz_loadu_ps(m, x + i), vs);
        v = _mm512_add_ps(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC),
                          vz);
        v = _mm512_min_ps(_mm512_max_ps(v, vlo), vhi); /* max(NaN, lo) is lo */
        _mm512_mask_cvtepi32_storeu_epi8(dst + i, m, _mm512_cvtps_epi32(v));
    }
}
#endif

static void quantize_block(const float *x, int64_t n, float s, float z, vq_dtype ydt, void *y,
                           int64_t o)
{
#if HAVE_X86
    if ((ydt == VQ_U8 || ydt == VQ_I8) && vq__isa() >= VQ__ISA_AVX512) {
        quantize_avx512(x, n, s, z, ydt, y, o);
        return;
    }
#endif
    quantize_portable(x, n, s, z, ydt, y, o);
}

/* X walked as [outer, d, inner] around the axis (d 1 per tensor). */
struct axis_walk {
    int64_t outer, d, inner;
};

static struct axis_walk walk_of(const vq_tensor *x, int axis)
{
    struct axis_walk w = {1, 1, 1};
    for (int i = 0; i < x->ndim; i++) {
        if (axis < 0 || i < axis)
            w.outer *= x->shape[i];
        else if (i == axis)
            w.d = x->shape[i];
        else
            w.inner *= x->shape[i];
    }
    if (axis < 0) {
        w.inner = w.outer;
        w.outer = 1;
    }
    return w;
}

#define QBUF 256 /* floats converted at a time */

static int quantize_kernel(const vq__kcall *k)
{
    const struct quant_params *p = k->params;
    const vq_tensor *x = k->in[0], *st = k->in[1], *zt = k->nin > 2 ? k->in[2] : NULL;
    vq_tensor *y = k->out[0];
    struct axis_walk w = walk_of(x, p->axis);
    vq_tensor *buf = NULL;
    int rc = vq__kernel_scratch(k, VQ_F32, 2 * w.d + QBUF, "scales", &buf);
    if (rc < 0)
        return rc;
    float *scale = buf->data, *zero = scale + w.d, *conv = zero + w.d;
    vq__quant_floats(st, scale, w.d);
    for (int64_t c = 0; c < w.d; c++)
        zero[c] = zt ? (float)vq__quant_int_at(zt->dtype, zt->data, c) : 0.0f;
    for (int64_t o = 0; o < w.outer; o++)
        for (int64_t c = 0; c < w.d; c++) {
            int64_t base = (o * w.d + c) * w.inner;
            if (x->dtype == VQ_F32) {
                quantize_block((const float *)x->data + base, w.inner, scale[c], zero[c], p->ydt,
                               y->data, base);
                continue;
            }
            for (int64_t i = 0; i < w.inner; i += QBUF) {
                int64_t n = w.inner - i < QBUF ? w.inner - i : QBUF;
                const void *src = vq__elem_at(x->data, base + i, vq_dtype_size(x->dtype));
                if (x->dtype == VQ_F16)
                    vq__half()->f16_to_f32(src, conv, n);
                else if (x->dtype == VQ_BF16)
                    vq__half()->bf16_to_f32(src, conv, n);
                else
                    for (int64_t j = 0; j < n; j++)
                        conv[j] = (float)((const int32_t *)src)[j];
                quantize_block(conv, n, scale[c], zero[c], p->ydt, y->data, base + i);
            }
        }
    vq_tensor_release(buf);
    return 0;
}

static int dequantize_kernel(const vq__kcall *k)
{
    const struct quant_params *p = k->params;
    const vq_tensor *x = k->in[0], *st = k->in[1], *zt = k->nin > 2 ? k->in[2] : NULL;
    vq_tensor *y = k->out[0];
    struct axis_walk w = walk_of(x, p->axis);
    vq_tensor *buf = NULL;
    int rc = vq__kernel_scratch(k, VQ_F32, w.d + QBUF, "scales", &buf);
    if (rc < 0)
        return rc;
    float *scale = buf->data, *conv = scale + w.d;
    vq__quant_floats(st, scale, w.d);
    for (int64_t o = 0; o < w.outer; o++)
        for (int64_t c = 0; c < w.d; c++) {
            int64_t base = (o * w.d + c) * w.inner;
            int32_t z = zt ? vq__quant_int_at(zt->dtype, zt->data, c) : 0;
            float s = scale[c];
            for (int64_t i = 0; i < w.inner; i += QBUF) {
                int64_t n = w.inner - i < QBUF ? w.inner - i : QBUF;
                float *dst = y->dtype == VQ_F32 ? (float *)y->data + base + i : conv;
                for (int64_t j = 0; j < n; j++)
                    dst[j] = (float)(int32_t)((uint32_t)vq__quant_int_at(x->dtype, x->data,
                                                                         base + i + j) -
                                              (uint32_t)z) *
                             s;
                void *out = vq__elem_at(y->data, base + i, vq_dtype_size(y->dtype));
                if (y->dtype == VQ_F16)
                    vq__half()->f32_to_f16(conv, out, n);
                else if (y->dtype == VQ_BF16)
                    vq__half()->f32_to_bf16(conv, out, n);
            }
        }
    vq_tensor_release(buf);
    return 0;
}

/* ---- dynamic_quantize_linear ---- */

static const char *const dq_in[] = {"X"};
static const char *const dq_out[] = {"Y", "Scale", "ZeroPoint"};

static int dynamic_infer(vq__infer *c)
{
    int rc = vq__check_dtype(c, 0, M_BIT(VQ_F32));
    if (rc < 0)
        return rc;
    c->out[0] = c->in[0];
    c->out[0].dtype = VQ_U8;
    c->out[1] = (vq__meta){.dtype = VQ_F32, .ndim = 0};
    c->out[2] = (vq__meta){.dtype = VQ_U8, .ndim = 0};
    return 0;
}

static int dynamic_kernel(const vq__kcall *k)
{
    const vq_tensor *x = k->in[0];
    const float *xd = x->data;
    float lo = 0, hi = 0; /* the range always holds 0 */
    for (int64_t i = 0; i < x->numel; i++) {
        lo = xd[i] < lo ? xd[i] : lo;
        hi = xd[i] > hi ? xd[i] : hi;
    }
    float scale = (hi - lo) / 255.0f;
    float z = 0;
    if (scale > 0) {
        z = nearbyintf((0 - lo) / scale);
        z = z >= 0 ? z : 0;
        z = z <= 255 ? z : 255;
    }
    *(float *)k->out[1]->data = scale;
    *(uint8_t *)k->out[2]->data = (uint8_t)z;
    if (scale > 0)
        quantize_block(xd, x->numel, scale, z, VQ_U8, k->out[0]->data, 0);
    else
        memset(k->out[0]->data, 0, (size_t)x->numel);
    return 0;
}

/* ---- the table ---- */

static const vq__attr_spec quantize_attrs[] = {{"axis", VQ_ATTR_INT, false, "1"},
                                               {"dtype", VQ_ATTR_STRING, false, "u8"}};
static const vq__attr_spec axis_attrs[] = {{"axis", VQ_ATTR_INT, false, "1"}};

const vq__op_def vq__ops_quant[] = {
    VQ__QOP("dequantize_linear", q_in, 3, y_out, 1, VQ__OPTIONAL_IN, axis_attrs, 1,
            dequantize_infer, dequantize_kernel),
    VQ__QOP("dynamic_quantize_linear", dq_in, 1, dq_out, 3, 0, NULL, 0, dynamic_infer,
            dynamic_kernel),
    VQ__QOP("quantize_linear", q_in, 3, y_out, 1, VQ__OPTIONAL_IN, quantize_attrs, 2,
            quantize_infer, quantize_kernel),
    {0},
};
