/* 2-D convolution: conv2d (NCHW, strides, asymmetric pads, dilations,
 * groups, an optional bias) on the CPU through im2col and OpenBLAS's gemm
 * (vq__gemm, cpu/matmul.c), and the shape checks and op table of conv2d,
 * its gradient op conv2d_grad and conv_transpose2d. Also the attribute
 * checks and the output-size rule that the pools (cpu/pool.c) share:
 * vq__window_attrs and vq__window_out_hw (ops_internal.h). The depthwise
 * stencils are in conv_depthwise.c; conv2d_grad's and conv_transpose2d's
 * kernels, with col2im, in conv_grad.c; what the three share in conv.h.
 *
 * conv2d(X, W[, B]) -> Out: X [N, C, H, W], W [M, C/groups, kH, kW], B
 * [M]. The bias is optional, and the registry has no optional slots: W is
 * a variadic slot that takes W and then, if given, B (so a program's op
 * lists W=[w, b]); infer allows 2 or 3 inputs and names the third "B" in
 * its messages.
 *
 * For each image and group, im2col copies the group's input channels into
 * a [C/groups * kH * kW, Ho * Wo] matrix, one row per (channel, tap) with
 * zeros where the tap lies in the padding, and Out's group is one gemm:
 * W_g [M/groups, C/groups * kH * kW] times that matrix. A 1x1 kernel with
 * stride 1 and no padding needs no copy: X's plane is the matrix. A
 * depthwise call (groups > 1, one input channel per group) skips both:
 * a direct stencil per output plane (conv_depthwise.c; 3x3 taps from
 * a zero-padded copy of the plane, with AVX-512 where the CPU has it). The
 * column buffer is one group's, reused for every image and group, and
 * comes from the CPU allocator's cache (tensor/alloc.c), so a loop that runs
 * the same layer every step stops allocating.
 *
 * Large f32 3x3 layers of stride 1, dilation 1 and one group (most of
 * ResNet's multiply-adds) take Winograd's F(4x4, 3x3) instead
 * (ops/math/winograd.c): about a quarter of the multiplies. The environment
 * variable VARQ_CONV_WINOGRAD=0 keeps them on im2col.
 *
 * Attribute clip [lo, hi] (optional; lo <= hi, either may be infinite)
 * clips Out in the pass that adds the bias, right after each block's
 * product while it is in cache: Out = min(max(Z, lo), hi) elementwise, as
 * maximum and minimum compute it (NaN stays NaN, -0 at lo = 0 becomes +0).
 * The ONNX importer fuses a Relu ([0, inf]) or a Clip with known bounds
 * into the Conv before it this way, saving one or two passes over the
 * output and their buffers. The CUDA kernels refuse it (ENOSYS).
 *
 * Attribute act (optional: relu, sigmoid, tanh, silu, hard_sigmoid with
 * act_alpha and act_beta, hard_swish) applies that activation after the
 * bias and the clip, on each block of output right after its product
 * (after the whole product on the Winograd path), with the bits of the
 * activation op itself (vq__act_apply). graph/optimize.c's conv-act pass
 * sets it on inference programs; such a conv2d has no gradient, and the
 * CUDA kernels refuse it (ENOSYS).
 *
 * conv2d_grad (dX by col2im, dW by im2col, dB, each through the clip when
 * the forward op has one) is told with its kernel in conv_grad.c. */
#include "conv.h"
#include "../cuda/cuda_ops.h"
#include "../math/isa.h"
#include "../math/sgemm.h"
#include "../math/winograd.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const conv_in[] = {"X", "W"};
static const char *const conv_out[] = {"Out"};
static const char *const grad_in[] = {"X", "W", "dOut", "Out"};
static const char *const grad_out[] = {"dZ"};

/* ---- attributes and output sizes (shared with the pools) ---- */

static bool schema_has(const vq__op_def *def, const char *name)
{
    for (int i = 0; i < def->nattrs; i++)
        if (!strcmp(def->attrs[i].name, name))
            return true;
    return false;
}

/* A list attribute of n ints, each in [lo, 2^31), into out; dflt when it
 * is absent. what names the values, for the message. */
static int ints_attr(const vq__infer *c, const char *name, int n, int64_t lo, const int64_t *dflt,
                     const char *what, int64_t *out)
{
    const vq_attr *a = vq__attr_find(c, name);
    if (!a) {
        memcpy(out, dflt, (size_t)n * sizeof *out);
        return 0;
    }
    char list[100];
    if (a->n != n)
        return vq__attr_fail(c, name, "has %d values %s; expected %d (%s)", a->n,
                             vq__shape_str(list, sizeof list, a->n, a->ints), n, what);
    for (int i = 0; i < n; i++) {
        if (a->ints[i] < lo || a->ints[i] > INT32_MAX)
            return vq__attr_fail(c, name, "is %s: value %d (%s) is %lld, outside [%lld, 2^31)",
                                 vq__shape_str(list, sizeof list, a->n, a->ints), i, what,
                                 (long long)a->ints[i], (long long)lo);
        out[i] = a->ints[i];
    }
    return 0;
}

int vq__window_attrs(const vq__infer *c, vq__window_params *p)
{
    static const int64_t ones[2] = {1, 1}, zeros[4] = {0, 0, 0, 0};
    int rc = 0;
    if (schema_has(c->def, "kernel"))
        rc = ints_attr(c, "kernel", 2, 1, ones, "height, width", p->kernel);
    if (rc == 0)
        rc = ints_attr(c, "strides", 2, 1, ones, "height, width", p->stride);
    if (rc == 0)
        rc = ints_attr(c, "pads", 4, 0, zeros, "top, left, bottom, right", p->pad);
    p->dilation[0] = p->dilation[1] = 1;
    if (rc == 0 && schema_has(c->def, "dilations"))
        rc = ints_attr(c, "dilations", 2, 1, ones, "height, width", p->dilation);
    return rc;
}

int vq__window_out_hw(const vq__infer *c, const vq__window_params *p, int64_t h, int64_t w,
                      int64_t kh, int64_t kw, bool ceil_mode, int64_t out[2])
{
    static const char *const dim[2] = {"height", "width"};
    const int64_t in[2] = {h, w}, k[2] = {kh, kw};
    for (int d = 0; d < 2; d++) {
        int64_t p0 = p->pad[d], p1 = p->pad[d + 2];
        out[d] = vq__window_out(in[d], p0, p1, k[d], p->stride[d], p->dilation[d], ceil_mode);
        if (out[d] == 0)
            return vq__op_fail(c->def,
                               "output %s would be <= 0: input %s %lld with pads %lld and %lld "
                               "is smaller than the dilated kernel %s %lld (kernel %lld, "
                               "dilation %lld)",
                               dim[d], dim[d], (long long)in[d], (long long)p0, (long long)p1,
                               dim[d], (long long)(p->dilation[d] * (k[d] - 1) + 1),
                               (long long)k[d], (long long)p->dilation[d]);
    }
    return 0;
}

/* ---- shapes ---- */

/* "conv2d: input B (slot 2): ...": the variadic slot's third tensor is the
 * bias, which vq__in_fail would call W. */
int vq__conv_bias_fail(const vq__infer *c, const char *fmt, ...)
{
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return vq__op_fail(c->def, "input B (slot 2): %s", msg);
}

/* What conv2d and conv_transpose2d check alike: X and W float 4-D tensors
 * of one dtype, the window attributes and groups (into p). */
int vq__conv_common(const vq__infer *c, vq__window_params *p)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0 ||
        (rc = vq__check_rank(c, 0, 4)) < 0 || (rc = vq__check_rank(c, 1, 4)) < 0 ||
        (rc = vq__window_attrs(c, p)) < 0)
        return rc;
    int64_t groups = vq__attr_int(c, "groups", 1);
    if (groups < 1 || groups > INT32_MAX)
        return vq__attr_fail(c, "groups", "is %lld, outside [1, 2^31)", (long long)groups);
    p->groups = groups;
    return 0;
}

/* Checks X (slot 0), W (slot 1) and, when bias_slot > 0, the bias there
 * against the attributes: fills p (but wrt) and Out's meta; -1 for Out's
 * dims that depend on unknown ones. */
static int conv_meta(const vq__infer *c, vq__window_params *p, int bias_slot, vq__meta *out)
{
    int rc = vq__conv_common(c, p);
    if (rc < 0)
        return rc;
    int64_t groups = p->groups;
    const vq__meta *x = &c->in[0], *w = &c->in[1];
    char sx[100], sw[100];
#define SHAPES()                                      \
    (vq__shape_str(sx, sizeof sx, x->ndim, x->shape), \
     vq__shape_str(sw, sizeof sw, w->ndim, w->shape))
    int64_t C = x->shape[1], M = w->shape[0], cg = w->shape[1], kh = w->shape[2], kw = w->shape[3];
    if (C >= 0 && C % groups != 0 && (SHAPES(), true))
        return vq__in_fail(c, 0,
                           "has %lld channels (dim 1), which groups %lld does not divide: "
                           "X is %s",
                           (long long)C, (long long)groups, sx);
    if (M >= 0 && M % groups != 0 && (SHAPES(), true))
        return vq__in_fail(c, 1,
                           "has %lld output channels (dim 0), which groups %lld does not "
                           "divide: W is %s",
                           (long long)M, (long long)groups, sw);
    if (C >= 0 && cg >= 0 && cg * groups != C && (SHAPES(), true))
        return vq__in_fail(c, 1,
                           "has %lld input channels per group (dim 1), but X's %lld "
                           "channels in %lld group(s) make %lld: X is %s, W is %s",
                           (long long)cg, (long long)C, (long long)groups, (long long)(C / groups),
                           sx, sw);
    if (((kh >= 0 && kh < 1) || (kw >= 0 && kw < 1) || kh > INT32_MAX || kw > INT32_MAX) &&
        (SHAPES(), true))
        return vq__in_fail(c, 1,
                           "kernel %lldx%lld (dims 2 and 3): each must be in [1, 2^31): "
                           "W is %s",
                           (long long)kh, (long long)kw, sw);
    int64_t hw[2];
    if ((rc = vq__window_out_hw(c, p, x->shape[2], x->shape[3], kh, kw, false, hw)) < 0)
        return rc;
    /* gemm's sizes are ints: a group's rows, its columns, the plane */
    int64_t rows = cg >= 0 && kh >= 0 && kw >= 0 ? cg * kh * kw : -1;
    int64_t plane = hw[0] >= 0 && hw[1] >= 0 ? hw[0] * hw[1] : -1;
    if ((rows > INT_MAX || plane > INT_MAX || (M >= 0 && M / groups > INT_MAX)) && (SHAPES(), true))
        return vq__op_fail(c->def, "X %s and W %s make a product past BLAS's int sizes", sx, sw);
#undef SHAPES
    out->dtype = x->dtype;
    out->ndim = 4;
    out->shape[0] = x->shape[0];
    out->shape[1] = M;
    out->shape[2] = hw[0];
    out->shape[3] = hw[1];
    if (bias_slot > 0) {
        const vq__meta *b = &c->in[bias_slot];
        if (b->dtype != x->dtype)
            return vq__conv_bias_fail(c, "dtype %s differs from X's %s", vq_dtype_name(b->dtype),
                                      vq_dtype_name(x->dtype));
        if (b->ndim != 1 || !vq__dim_match(b->shape[0], M)) {
            char sb[100];
            return vq__conv_bias_fail(c, "shape %s is not [M] for W's M = %lld output channels",
                                      vq__shape_str(sb, sizeof sb, b->ndim, b->shape),
                                      (long long)M);
        }
        if (out->shape[1] < 0)
            out->shape[1] = b->shape[0];
    }
    return 0;
}

/* The clip attribute: [lo, hi], lo <= hi, either infinite, neither NaN;
 * absent: no clip. */
static int clip_attr(const vq__infer *c, vq__window_params *p)
{
    const vq_attr *a = vq__attr_find(c, "clip");
    p->clip = a != NULL;
    if (!a)
        return 0;
    if (a->n != 2)
        return vq__attr_fail(c, "clip", "has %d values; expected 2 (lo, hi)", a->n);
    double v[2];
    for (int i = 0; i < 2; i++)
        v[i] = a->type == VQ_ATTR_INTS ? (double)a->ints[i] : a->floats[i];
    if (v[0] != v[0] || v[1] != v[1] || v[0] > v[1])
        return vq__attr_fail(c, "clip", "is [%g, %g]: lo must be <= hi, neither NaN", v[0], v[1]);
    p->clip_lo = v[0];
    p->clip_hi = v[1];
    return 0;
}

/* The act attribute: one of the activations vq__act_apply computes, by
 * its op's name; act_alpha and act_beta are hard_sigmoid's (hard_swish's
 * are fixed, as the op's). */
static const char *const act_names[] = {"relu", "sigmoid",      "tanh",
                                        "silu", "hard_sigmoid", "hard_swish"};

static int act_attr(const vq__infer *c, vq__window_params *p)
{
    const vq_attr *a = vq__attr_find(c, "act");
    p->has_act = a != NULL;
    if (!a)
        return 0;
    p->act.op = -1;
    for (int i = 0; i < (int)(sizeof act_names / sizeof act_names[0]); i++)
        if (a->s && !strcmp(a->s, act_names[i]))
            p->act.op = i;
    if (p->act.op < 0)
        return vq__attr_fail(c, "act",
                             "is \"%s\", not relu, sigmoid, tanh, silu, hard_sigmoid or hard_swish",
                             a->s ? a->s : "");
    p->act.alpha = 1.0 / 6;
    p->act.beta = 0.5;
    if (p->act.op == VQ__ACT_HARD_SIGMOID) {
        p->act.alpha = vq__attr_float(c, "act_alpha", 0.2);
        p->act.beta = vq__attr_float(c, "act_beta", 0.5);
    }
    return 0;
}

static int conv2d_infer(vq__infer *c)
{
    if (c->nin > 3)
        return vq__op_fail(c->def, "takes X, W and an optional bias B, got %d inputs", c->nin);
    int rc = clip_attr(c, c->params);
    if (rc == 0)
        rc = act_attr(c, c->params);
    return rc < 0 ? rc : conv_meta(c, c->params, c->nin == 3 ? 2 : 0, &c->out[0]);
}

static int conv2d_grad_infer(vq__infer *c)
{
    vq__window_params *p = c->params;
    int64_t wrt = vq__attr_int(c, "wrt", 0);
    if (wrt < 0 || wrt > 2)
        return vq__attr_fail(c, "wrt", "is %lld, not 0 (X), 1 (W) or 2 (the bias)", (long long)wrt);
    p->wrt = (int)wrt;
    vq__meta full;
    int rc = clip_attr(c, p);
    if (rc < 0 || (rc = conv_meta(c, p, 0, &full)) < 0 ||
        (rc = vq__check_same_dtype(c, 0, 2)) < 0 ||
        (rc = vq__check_shape_is(c, 2, &full, "conv2d's output shape")) < 0)
        return rc;
    if (p->clip != (c->nin == 4))
        return vq__op_fail(c->def,
                           "takes conv2d's Out (slot 3) exactly when clip is given: "
                           "%d inputs, %s",
                           c->nin, p->clip ? "clip given" : "no clip");
    if (c->nin == 4 && ((rc = vq__check_same_dtype(c, 0, 3)) < 0 ||
                        (rc = vq__check_shape_is(c, 3, &full, "conv2d's output shape")) < 0))
        return rc;
    if (p->wrt < 2) {
        c->out[0] = c->in[p->wrt];
    } else {
        c->out[0].dtype = c->in[0].dtype;
        c->out[0].ndim = 1;
        c->out[0].shape[0] = c->in[1].shape[0] >= 0 ? c->in[1].shape[0] : c->in[2].shape[1];
    }
    return 0;
}

/* ---- im2col ---- */

/* col [channels * kh * kw, oh * ow] from the planes x [channels, h, w]:
 * row (c, i, j) holds tap (i, j) of every window, 0 in the padding. Rows
 * with stride 1 along the width are copies of input rows. */
#define IM2COL(T, NAME, ATTR)                                                                  \
    VECTORIZE ATTR static void NAME(const T *x, T *col, const vq__window *w, int64_t channels) \
    {                                                                                          \
        int64_t plane = w->oh * w->ow;                                                         \
        for (int64_t c = 0; c < channels; c++)                                                 \
            for (int64_t i = 0; i < w->kh; i++)                                                \
                for (int64_t j = 0; j < w->kw; j++) {                                          \
                    T *row = col + ((c * w->kh + i) * w->kw + j) * plane;                      \
                    int64_t off = j * w->dw - w->pl, lo, hi;                                   \
                    vq__window_taps(off, w->sw, w->w, w->ow, &lo, &hi);                        \
                    for (int64_t oh = 0; oh < w->oh; oh++) {                                   \
                        T *r = row + oh * w->ow;                                               \
                        int64_t ih = oh * w->sh - w->pt + i * w->dh;                           \
                        if (ih < 0 || ih >= w->h) {                                            \
                            memset(r, 0, (size_t)w->ow * sizeof(T));                           \
                            continue;                                                          \
                        }                                                                      \
                        const T *xr = x + (c * w->h + ih) * w->w;                              \
                        for (int64_t o = 0; o < lo; o++)                                       \
                            r[o] = 0;                                                          \
                        if (w->sw == 1 && hi > lo)                                             \
                            memcpy(r + lo, xr + lo + off, (size_t)(hi - lo) * sizeof(T));      \
                        else if (w->sw == 2) /* a constant stride vectorizes */                \
                            for (int64_t o = lo; o < hi; o++)                                  \
                                r[o] = xr[2 * o + off];                                        \
                        else                                                                   \
                            for (int64_t o = lo; o < hi; o++)                                  \
                                r[o] = xr[o * w->sw + off];                                    \
                        for (int64_t o = hi; o < w->ow; o++)                                   \
                            r[o] = 0;                                                          \
                    }                                                                          \
                }                                                                              \
    }

IM2COL(float, im2col_float, )
IM2COL(double, im2col_double, )
/* With AVX-512 (chosen at run time) the strided rows (the stem's 7x7
 * stride-2 layer) become permutes of full vector loads: its im2col took
 * 30% of the layer's time in SSE2. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define IM2COL_AVX512 1
IM2COL(float, im2col_float_avx512, __attribute__((target("avx512f"))))
#endif

void vq__conv_im2col(vq_dtype dt, const void *x, void *col, const vq__window *w, int64_t channels)
{
#ifdef IM2COL_AVX512
    if (dt == VQ_F32 && vq__isa() >= VQ__ISA_AVX512) {
        im2col_float_avx512(x, col, w, channels);
        return;
    }
#endif
    if (dt == VQ_F32)
        im2col_float(x, col, w, channels);
    else
        im2col_double(x, col, w, channels);
}

/* ---- kernels ---- */

/* max(v, lo) then min(., hi) with maximum's and minimum's results: v <=
 * lo is false for NaN, which stays; at v == lo (-0 and +0 too) lo wins.
 * Selects without branches, which the clip's data-dependent outcomes
 * would mispredict. */
static inline float clamp_float(float v, float lo, float hi)
{
    v = v <= lo ? lo : v;
    return v >= hi ? hi : v;
}

static inline double clamp_double(double v, double lo, double hi)
{
    v = v <= lo ? lo : v;
    return v >= hi ? hi : v;
}

#define CLAMP(v, lo, hi) _Generic((v), float : clamp_float, double : clamp_double)(v, lo, hi)

/* The output pass after the product, on nch channel rows of ncol
 * columns at o, rows plane apart: the bias of channels [ch0, ch0 + nch)
 * (b NULL: none), then the clip when clip is set. max(v, lo) and
 * min(v, hi) as maximum and minimum compute them: NaN stays NaN, -0 at
 * lo = 0 becomes +0. Each element on its own, so any cut of the output
 * into blocks gives the same bits. */
#define EPILOGUE(T)                                                                              \
    VECTORIZE static void epilogue_##T(T *o, const T *b, int64_t ch0, int64_t nch, int64_t ncol, \
                                       int64_t plane, bool clip, T lo, T hi)                     \
    {                                                                                            \
        for (int64_t c = 0; c < nch; c++) {                                                      \
            T *r = o + c * plane, bv = b ? b[ch0 + c] : 0;                                       \
            if (b && clip) {                                                                     \
                for (int64_t i = 0; i < ncol; i++)                                               \
                    r[i] = CLAMP(r[i] + bv, lo, hi);                                             \
            } else if (b) {                                                                      \
                for (int64_t i = 0; i < ncol; i++)                                               \
                    r[i] += bv;                                                                  \
            } else {                                                                             \
                for (int64_t i = 0; i < ncol; i++)                                               \
                    r[i] = CLAMP(r[i], lo, hi);                                                  \
            }                                                                                    \
        }                                                                                        \
    }

EPILOGUE(float)
EPILOGUE(double)

/* conv2d's output pass (EPILOGUE) on columns [c0, c0 + ncol) of output
 * channels [ch0, ch0 + nch); o is channel ch0's plane. */
void vq__conv_epilogue(const struct conv_job *j, char *o, int64_t ch0, int64_t nch, int64_t c0,
                       int64_t ncol)
{
    vq__conv_bias_clip(j, o, ch0, nch, c0, ncol);
    vq__conv_act(j, o, nch, c0, ncol);
}

void vq__conv_bias_clip(const struct conv_job *j, char *o, int64_t ch0, int64_t nch, int64_t c0,
                        int64_t ncol)
{
    const vq__window_params *p = j->p;
    if (j->b || p->clip) {
        if (j->dt == VQ_F32)
            epilogue_float((float *)o + c0, (const float *)j->b, ch0, nch, ncol, j->cv->plane,
                           p->clip, (float)p->clip_lo, (float)p->clip_hi);
        else
            epilogue_double((double *)o + c0, (const double *)j->b, ch0, nch, ncol, j->cv->plane,
                            p->clip, p->clip_lo, p->clip_hi);
    }
}

/* The f32 sigmoid, tanh and silu (ops/math/vmath.c) work in chunks of 256
 * elements whatever n is, so a call pays for its last chunk whole: one
 * contiguous run of rows goes in one call, and short rows of a column
 * block (a plane apart) are packed back to back into ACT_PACK_BYTES at a
 * time, so that only each pack's last chunk can be partial. The other
 * activations are plain loops: their rows go as they are. */
enum { ACT_PACK_BYTES = 16384, ACT_LONG_ROW = 2048 };

void vq__conv_act(const struct conv_job *j, char *o, int64_t nch, int64_t c0, int64_t ncol)
{
    if (!j->p->has_act || nch <= 0 || ncol <= 0)
        return;
    int64_t plane = j->cv->plane;
    if (c0 == 0 && ncol == plane) {
        vq__act_apply(&j->p->act, j->dt, o, o, nch * plane);
        return;
    }
    int op = j->p->act.op;
    bool chunked =
        j->dt == VQ_F32 && (op == VQ__ACT_SIGMOID || op == VQ__ACT_TANH || op == VQ__ACT_SILU);
    if (!chunked || ncol >= ACT_LONG_ROW) {
        for (int64_t c = 0; c < nch; c++) {
            char *r = vq__elem_at(o, c * plane + c0, j->es);
            vq__act_apply(&j->p->act, j->dt, r, r, ncol);
        }
        return;
    }
    _Alignas(64) char buf[ACT_PACK_BYTES];
    size_t es = j->es;
    const int64_t cap = ACT_PACK_BYTES / (int64_t)es;
    int64_t c = 0, at = 0; /* the next element to pack: row c, column at */
    while (c < nch) {
        int64_t c1 = c, at1 = at, n = 0;
        while (c < nch && n < cap) { /* pack */
            int64_t k = ncol - at < cap - n ? ncol - at : cap - n;
            memcpy(buf + n * es, vq__elem_at(o, c * plane + c0 + at, es), (size_t)k * es);
            n += k;
            at += k;
            if (at == ncol)
                c++, at = 0;
        }
        vq__act_apply(&j->p->act, j->dt, buf, buf, n);
        for (int64_t m = 0; m < n;) { /* and back */
            int64_t k = ncol - at1 < n - m ? ncol - at1 : n - m;
            memcpy(vq__elem_at(o, c1 * plane + c0 + at1, es), buf + m * es, (size_t)k * es);
            m += k;
            at1 += k;
            if (at1 == ncol)
                c1++, at1 = 0;
        }
    }
}

/* conv2d's output pass for the AVX-512 product to do as it stores
 * (sgemm.h), for output channels from ch0 on. */
static vq__sg_epilogue conv_sg_epilogue(const struct conv_job *j, int64_t ch0)
{
    return (vq__sg_epilogue){.bias = j->b ? (const float *)j->b + ch0 : NULL,
                             .clip = j->p->clip,
                             .lo = (float)j->p->clip_lo,
                             .hi = (float)j->p->clip_hi};
}

/* Output channels [ch0, ch0 + m) of one item's output (plane0: channel
 * ch0's plane), columns [c0, c0 + n): weights a (m rows of cv->rows) by
 * columns b (rows ldb apart), then the output pass; with the AVX-512
 * product the pass happens as it stores. */
static void conv_product(const struct conv_job *j, int64_t ch0, int64_t m, const void *a,
                         const void *b, int64_t ldb, char *plane0, int64_t c0, int64_t n)
{
    const vq__conv *cv = j->cv;
    char *o = vq__elem_at(plane0, c0, j->es);
    if (j->dt == VQ_F32 && vq__sgemm_ok()) {
        vq__sg_epilogue ep = conv_sg_epilogue(j, ch0);
        if (vq__sgemm(false, false, m, n, cv->rows, 1, a, cv->rows, b, ldb, 0, (float *)o,
                      cv->plane, ep.bias || ep.clip ? &ep : NULL)) {
            vq__conv_act(j, plane0, m, c0, n);
            return;
        }
    }
    vq__gemm_ldc(j->dt, false, false, m, n, cv->rows, 1, a, cv->rows, b, ldb, 0, o, cv->plane);
    vq__conv_epilogue(j, plane0, ch0, m, c0, n);
}

/* Whole (image, group) items, item = n * groups + g, each participant
 * with its own columns. */
static int conv_items(void *arg, int64_t lo, int64_t hi, int slot)
{
    struct conv_job *j = arg;
    const vq__conv *cv = j->cv;
    for (int64_t item = lo; item < hi; item++) {
        int64_t n = item / cv->groups, g = item % cv->groups;
        const char *xg = vq__elem_at(j->x, (n * cv->w.c + g * cv->cg) * cv->w.h * cv->w.w, j->es);
        const void *src = xg;
        if (!cv->direct) {
            if (!j->cols[slot]) {
                int64_t len = cv->rows * cv->plane;
                if (vq__tensor_empty(&j->cols[slot], j->dt, 1, &len) < 0)
                    return VQ_ENOMEM;
            }
            vq__conv_im2col(j->dt, xg, j->cols[slot]->data, &cv->w, cv->cg);
            src = j->cols[slot]->data;
        }
        char *og = vq__elem_at(j->o, (n * cv->m + g * cv->mg) * cv->plane, j->es);
        conv_product(j, g * cv->mg, cv->mg, vq__elem_at(j->w, g * cv->mg * cv->rows, j->es), src,
                     cv->plane, og, 0, cv->plane);
    }
    return 0;
}

/* Within one item: the columns of input channels [lo, hi). */
static int conv_im2col_part(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    struct conv_job *j = arg;
    const vq__conv *cv = j->cv;
    int64_t taps = cv->w.kh * cv->w.kw;
    vq__conv_im2col(j->dt, vq__elem_at(j->xg, lo * cv->w.h * cv->w.w, j->es),
                    vq__elem_at(j->col, lo * taps * cv->plane, j->es), &cv->w, hi - lo);
    return 0;
}

/* Within one item: bands [lo, hi) of j->band output rows, each with its
 * own im2col into the participant's columns (a band's, small enough to
 * stay in the core's cache for the product that reads them back), then
 * the product into those rows of every output channel. */
static int conv_bands(void *arg, int64_t lo, int64_t hi, int slot)
{
    struct conv_job *j = arg;
    const vq__conv *cv = j->cv;
    int64_t ow = cv->w.ow;
    for (int64_t band = lo; band < hi; band++) {
        int64_t y0 = band * j->band;
        int64_t y1 = y0 + j->band < cv->w.oh ? y0 + j->band : cv->w.oh, ncol = (y1 - y0) * ow;
        if (!j->cols[slot]) {
            int64_t len = cv->rows * j->band * ow;
            if (vq__tensor_empty(&j->cols[slot], j->dt, 1, &len) < 0)
                return VQ_ENOMEM;
        }
        /* the band as a window of its own: y1 - y0 output rows, the first
         * reading input row y0 * sh - pt (pt below 0: inside the input) */
        vq__window v = cv->w;
        v.oh = y1 - y0;
        v.pt = cv->w.pt - y0 * cv->w.sh;
        vq__conv_im2col(j->dt, j->xg, j->cols[slot]->data, &v, cv->cg);
        conv_product(j, 0, cv->mg, j->wg, j->cols[slot]->data, ncol, j->wg_out, y0 * ow, ncol);
    }
    return 0;
}

/* Within one item: output columns [lo, hi) of every output channel. */
static int conv_gemm_cols(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    struct conv_job *j = arg;
    const vq__conv *cv = j->cv;
    conv_product(j, 0, cv->mg, j->wg, vq__elem_at(j->col, lo, j->es), cv->plane, j->wg_out, lo,
                 hi - lo);
    return 0;
}

/* Within one item: the columns' panels [lo, hi) into j->pan. */
static int conv_pack_part(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    struct conv_job *j = arg;
    vq__sgemm_pack(j->cv->rows, j->cv->plane, j->col, j->cv->plane, j->pan, lo, hi);
    return 0;
}

/* Within one item: output channels [lo, hi), every column, from the
 * panels. */
static int conv_gemm_panels(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    struct conv_job *j = arg;
    const vq__conv *cv = j->cv;
    float *o = (float *)j->wg_out + lo * cv->plane;
    vq__sg_epilogue ep = conv_sg_epilogue(j, lo);
    vq__sgemm_panels(hi - lo, cv->plane, cv->rows, (const float *)j->wg + lo * cv->rows, cv->rows,
                     j->pan, o, cv->plane, ep.bias || ep.clip ? &ep : NULL);
    vq__conv_act(j, (char *)o, hi - lo, 0, cv->plane);
    return 0;
}

/* Within one item: output channels [lo, hi), every column. */
static int conv_gemm_rows(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    struct conv_job *j = arg;
    const vq__conv *cv = j->cv;
    vq__gemm(j->dt, false, false, hi - lo, cv->plane, cv->rows, 1,
             vq__elem_at(j->wg, lo * cv->rows, j->es), cv->rows, j->col, cv->plane, 0,
             vq__elem_at(j->wg_out, lo * cv->plane, j->es));
    vq__conv_epilogue(j, vq__elem_at(j->wg_out, lo * cv->plane, j->es), lo, hi - lo, 0, cv->plane);
    return 0;
}

/* Products of fewer multiply-adds than this (about 50 us) run on one
 * worker: the helper ops of a parallel loop, and the wait for a chunk a
 * descheduled helper holds on a loaded machine, would cost more than they
 * save. */
#define CONV_PARALLEL_MACS (1 << 20)
/* A single image's call is cut into this many blocks (of input channels
 * for the im2col, of output columns or channels for the product): enough
 * to balance a few workers, few enough that repacking the product's other
 * operand per block costs little. */
#define CONV_BLOCKS 8

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* The fewest output channels a block of a product split by channels
 * takes (conv_gemm_rows), or half of them when there are fewer than twice
 * this many: each block packs the whole of the other operand (the
 * columns) again, so small blocks spend their time copying. One core,
 * AVX-512 (ops/math/sgemm.c), ResNet-18's 14x14 layers' product
 * (2304 x 196 columns): 32 channels 179 GFLOP/s, 128 232, 256 243; its 7x7
 * ones (4608 x 49): 64 156, 128 181. */
#define CONV_MIN_ROW_BLOCK 128

static int64_t conv_row_block(int64_t mg)
{
    int64_t b = ceil_div(mg, CONV_BLOCKS), half = ceil_div(mg, 2);
    int64_t least = half < CONV_MIN_ROW_BLOCK ? half : CONV_MIN_ROW_BLOCK;
    return b >= least ? b : least;
}

/* About the most floats of im2col columns one band keeps (512 KiB: half
 * of a core's L2 on the machines of docs/perf/cpu-kernels.md). */
#define CONV_BAND_FLOATS ((int64_t)1 << 17)

/* Output rows per band for a single image's im2col product (conv_bands),
 * or 0 for the whole plane at once: when the columns outgrow
 * CONV_BAND_FLOATS and there are more output columns than channels, the
 * plane is cut into bands of whole output rows, each im2col'd and
 * multiplied while its columns are still in the cache, instead of writing
 * the whole im2col buffer to memory and reading it back (ResNet-18's
 * 7x7 first layer: 7.4 MB of columns, 1.38 -> 1.02 ms with AVX-512). */
static int64_t conv_band_rows(const vq__conv *cv)
{
    if (cv->direct || cv->plane < cv->mg || cv->rows * cv->plane <= CONV_BAND_FLOATS)
        return 0;
    int64_t rows = CONV_BAND_FLOATS / (cv->rows * cv->w.ow);
    rows = rows < 1 ? 1 : rows;
    return rows >= cv->w.oh ? 0 : rows;
}

/* ---- stride 1 without im2col ----
 *
 * At stride 1, row (c, i, j) of the im2col columns is X's plane c, zero-
 * padded, read from row i * dh and column j * dw on: contiguous in a
 * padded copy P of X (hp x wp per channel, wp = ow + (kw - 1) dw) when the
 * output is computed on rows of wp columns instead of ow, the last
 * (kw - 1) dw of each row then dropped. So the product's panels are copied
 * straight from P, a plane's worth of floats per row instead of im2col's
 * short rows and a second copy into the panels, for a few columns more
 * (taken when they cost few more vectors: conv_vectors). ResNet-18's 7x7
 * 512-channel layers at batch 1: 0.68-0.71 -> 0.65-0.68 ms (3 alternated
 * runs). Each output element is the same sum of the same products in
 * the same order as through im2col, so the same bits. */

/* P for input channels [lo, hi). */
static int conv_flat_pad(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    struct conv_job *j = arg;
    const vq__window *v = &j->cv->w;
    for (int64_t c = lo; c < hi; c++) {
        float *d = j->pad + c * j->hp * j->wp;
        const float *x = (const float *)j->xg + c * v->h * v->w;
        for (int64_t y = 0; y < j->hp; y++) {
            int64_t iy = y - v->pt;
            for (int64_t q = 0; q < j->wp; q++) {
                int64_t ix = q - v->pl;
                d[y * j->wp + q] =
                    iy >= 0 && iy < v->h && ix >= 0 && ix < v->w ? x[iy * v->w + ix] : 0;
            }
        }
    }
    return 0;
}

/* Panels [lo, hi) of the product's columns (k rows, oh * wp columns)
 * from P. */
static int conv_flat_pack(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    struct conv_job *j = arg;
    const vq__conv *cv = j->cv;
    const vq__window *v = &cv->w;
    int64_t n = v->oh * j->wp, taps = v->kh * v->kw;
    for (int64_t q = lo; q < hi; q++) {
        int64_t j0 = q * VQ__SG_PANEL, w = n - j0 < VQ__SG_PANEL ? n - j0 : VQ__SG_PANEL;
        float *d = j->pan + q * cv->rows * VQ__SG_PANEL;
        for (int64_t r = 0; r < cv->rows; r++, d += VQ__SG_PANEL) {
            int64_t c = r / taps, t = r % taps, i = t / v->kw, jj = t % v->kw;
            const float *s = j->pad + c * j->hp * j->wp + i * v->dh * j->wp + jj * v->dw + j0;
            if (w == VQ__SG_PANEL) {
                memcpy(d, s, VQ__SG_PANEL * sizeof(float));
            } else {
                memcpy(d, s, (size_t)w * sizeof(float));
                memset(d + w, 0, (size_t)(VQ__SG_PANEL - w) * sizeof(float));
            }
        }
    }
    return 0;
}

/* Output channels [lo, hi): the product on rows of wp columns into
 * j->flat (with the bias and the clip), then each row's first ow columns
 * into Out. */
static int conv_flat_gemm(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    struct conv_job *j = arg;
    const vq__conv *cv = j->cv;
    const vq__window *v = &cv->w;
    int64_t n = v->oh * j->wp;
    vq__sg_epilogue ep = conv_sg_epilogue(j, lo);
    vq__sgemm_panels(hi - lo, n, cv->rows, (const float *)j->wg + lo * cv->rows, cv->rows, j->pan,
                     j->flat + lo * n, n, ep.bias || ep.clip ? &ep : NULL);
    for (int64_t ch = lo; ch < hi; ch++)
        for (int64_t y = 0; y < v->oh; y++)
            memcpy((float *)j->wg_out + ch * cv->plane + y * v->ow, j->flat + ch * n + y * j->wp,
                   (size_t)v->ow * sizeof(float));
    vq__conv_act(j, vq__elem_at(j->wg_out, lo * cv->plane, j->es), hi - lo, 0, cv->plane);
    return 0;
}

/* The 16-lane vectors the AVX-512 product spends per row of A on n
 * columns: its panels of 32 take one or two. The wider rows are taken
 * when they add at most an eighth: at 7x7 (3x3 kernel) 63 columns for 49
 * are 4 vectors either way; at 14x14, 224 for 196 are 14 against 13, and
 * they took as long as im2col when the machine was quiet (0.60-0.64
 * against 0.61 ms per layer) and less when another tenant loaded its
 * memory (0.75-0.78 against 0.83-0.85: im2col's columns are written and
 * read back once more); 6 alternated pairs. */
static int64_t conv_vectors(int64_t n)
{
    return n / VQ__SG_PANEL * 2 + ceil_div(n % VQ__SG_PANEL, 16);
}

/* The fused activation on whole output planes [lo, hi) (after Winograd,
 * whose own pass does only the bias and the clip). */
static int conv_act_planes(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    struct conv_job *j = arg;
    vq__conv_act(j, vq__elem_at(j->o, lo * j->cv->plane, j->es), hi - lo, 0, j->cv->plane);
    return 0;
}

/* conv2d's single image and group at stride 1, by the above. */
static int conv_flat(const vq__kcall *k, struct conv_job *j)
{
    const vq__conv *cv = j->cv;
    const vq__window *v = &cv->w;
    j->hp = v->oh + (v->kh - 1) * v->dh;
    j->wp = v->ow + (v->kw - 1) * v->dw;
    int64_t n = v->oh * j->wp, npan = ceil_div(n, VQ__SG_PANEL);
    /* P, and (kw - 1) dw zeros past it that the last rows' last panel reads */
    int64_t npad = cv->cg * j->hp * j->wp + (v->kw - 1) * v->dw;
    vq_tensor *buf = NULL;
    int rc = vq__kernel_scratch(k, VQ_F32, npad + cv->rows * npan * VQ__SG_PANEL + cv->mg * n,
                                "padded input and packed columns", &buf);
    if (rc < 0)
        return rc;
    j->pad = buf->data;
    j->pan = j->pad + npad;
    j->flat = j->pan + cv->rows * npan * VQ__SG_PANEL;
    memset(j->pad + npad - (v->kw - 1) * v->dw, 0, (size_t)((v->kw - 1) * v->dw) * sizeof(float));
    vq__parallel_for(cv->cg, ceil_div(cv->cg, CONV_BLOCKS), conv_flat_pad, j);
    vq__parallel_for(npan, ceil_div(npan, CONV_BLOCKS), conv_flat_pack, j);
    vq__parallel_for(cv->mg, conv_row_block(cv->mg), conv_flat_gemm, j);
    vq_tensor_release(buf);
    return 0;
}

/* The engine's workers share a large call (vq__parallel_for): whole
 * (image, group) items when there are several, else the im2col over
 * blocks of input channels and then the product over blocks of output
 * columns (or of output channels, when they outnumber the columns: fewer
 * repacks of the larger operand). The blocks depend only on the shapes,
 * so the result is the same bits whoever runs the op and however many
 * workers help. */
static int conv2d_kernel(const vq__kcall *k)
{
    const vq__window_params *p = k->params;
    vq_tensor *x = k->in[0], *w = k->in[1], *b = k->nin > 2 ? k->in[2] : NULL, *o = k->out[0];
    if (o->numel == 0)
        return 0;
    vq__conv cv =
        vq__conv_of(x->shape, w->shape, p->groups, o->shape, p->stride, p->pad, p->dilation);
    struct conv_job j = {.cv = &cv,
                         .p = p,
                         .dt = x->dtype,
                         .es = vq_dtype_size(x->dtype),
                         .x = x->data,
                         .w = w->data,
                         .b = b ? b->data : NULL,
                         .o = o->data};
    if (vq__winograd_fits(&cv, x->dtype)) {
        /* the activation after, in blocks of channels shared like the rest */
        int rc = vq__conv_winograd(k, &cv, p, x->data, w->data, b ? b->data : NULL, o->data);
        if (rc < 0 || !p->has_act)
            return rc;
        int64_t planes = cv.w.n * cv.m;
        return vq__parallel_for(planes, ceil_div(planes, CONV_BLOCKS), conv_act_planes, &j);
    }
    int64_t items = cv.w.n * cv.groups;
    bool share =
        (double)cv.m * (double)cv.plane * (double)cv.rows * (double)cv.w.n >= CONV_PARALLEL_MACS;
    if (cv.groups > 1 && cv.cg == 1) {
        /* depthwise: output planes, in blocks of about CONV_BLOCKS per worker */
        int64_t planes = cv.w.n * cv.m;
        return share ? vq__parallel_for(planes, ceil_div(planes, 4 * CONV_BLOCKS),
                                        vq__conv_depthwise, &j)
                     : vq__conv_depthwise(&j, 0, planes, 0);
    }
    int rc = 0;
    int64_t band = share && items == 1 ? conv_band_rows(&cv) : 0;
    if (!share || items > 1 || band) {
        j.xg = x->data;
        j.wg = w->data;
        j.wg_out = o->data;
        j.band = band;
        if (band)
            rc = vq__parallel_for(ceil_div(cv.w.oh, band), 1, conv_bands, &j);
        else
            rc = share ? vq__parallel_for(items, 1, conv_items, &j) : conv_items(&j, 0, items, 0);
        for (int i = 0; i < VQ__PAR_MAX_SLOTS; i++)
            vq_tensor_release(j.cols[i]);
        if (rc == VQ_ENOMEM) {
            return vq__fail(rc, "%s: the im2col buffer of %lld elements", k->def->type,
                            (long long)(cv.rows * (band ? band * cv.w.ow : cv.plane)));
        }
        return rc;
    }
    /* one image, one group, one band */
    j.xg = x->data;
    j.wg = w->data;
    j.wg_out = o->data;
    if (!cv.direct && cv.plane < cv.mg && cv.w.sh == 1 && cv.w.sw == 1 && j.dt == VQ_F32 &&
        vq__sgemm_ok() &&
        conv_vectors(cv.w.oh * (cv.w.ow + (cv.w.kw - 1) * cv.w.dw)) * 8 <=
            conv_vectors(cv.plane) * 9)
        return conv_flat(k, &j);
    vq_tensor *col = NULL;
    if (!cv.direct &&
        (rc = vq__kernel_scratch(k, j.dt, cv.rows * cv.plane, "im2col buffer", &col)) < 0)
        return rc;
    j.xg = x->data;
    j.wg = w->data;
    j.wg_out = o->data;
    j.col = col ? col->data : (void *)j.xg;
    if (col)
        vq__parallel_for(cv.cg, ceil_div(cv.cg, CONV_BLOCKS), conv_im2col_part, &j);
    if (cv.plane >= cv.mg) {
        vq__parallel_for(cv.plane, ceil_div(ceil_div(cv.plane, CONV_BLOCKS), 16) * 16,
                         conv_gemm_cols, &j);
    } else if (j.dt == VQ_F32 && vq__sgemm_ok()) {
        /* every block of channels reads all the columns: copy them into
         * the kernel's panels once, not once per block */
        int64_t npan = ceil_div(cv.plane, VQ__SG_PANEL);
        vq_tensor *pan = NULL;
        if ((rc = vq__kernel_scratch(k, VQ_F32, cv.rows * npan * VQ__SG_PANEL, "packed columns",
                                     &pan)) < 0) {
            vq_tensor_release(col);
            return rc;
        }
        j.pan = pan->data;
        vq__parallel_for(npan, ceil_div(npan, CONV_BLOCKS), conv_pack_part, &j);
        vq__parallel_for(cv.mg, conv_row_block(cv.mg), conv_gemm_panels, &j);
        vq_tensor_release(pan);
    } else {
        vq__parallel_for(cv.mg, conv_row_block(cv.mg), conv_gemm_rows, &j);
    }
    vq_tensor_release(col);
    return 0;
}

static const vq__attr_spec conv_transpose_attrs[] = {
    {"strides", VQ_ATTR_INTS, false, "[1,1]"},        {"pads", VQ_ATTR_INTS, false, "[0,0,0,0]"},
    {"dilations", VQ_ATTR_INTS, false, "[1,1]"},      {"groups", VQ_ATTR_INT, false, "1"},
    {"output_padding", VQ_ATTR_INTS, false, "[0,0]"},
};

static const vq__attr_spec conv_attrs[] = {
    {"strides", VQ_ATTR_INTS, false, "[1,1]"},   {"pads", VQ_ATTR_INTS, false, "[0,0,0,0]"},
    {"dilations", VQ_ATTR_INTS, false, "[1,1]"}, {"groups", VQ_ATTR_INT, false, "1"},
    {"clip", VQ_ATTR_FLOATS, false, NULL},       {"act", VQ_ATTR_STRING, false, NULL},
    {"act_alpha", VQ_ATTR_FLOAT, false, "0.2"},  {"act_beta", VQ_ATTR_FLOAT, false, "0.5"},
};

/* conv2d's but the fused activation's, which has no gradient, and wrt */
static const vq__attr_spec conv_grad_attrs[] = {
    {"strides", VQ_ATTR_INTS, false, "[1,1]"},   {"pads", VQ_ATTR_INTS, false, "[0,0,0,0]"},
    {"dilations", VQ_ATTR_INTS, false, "[1,1]"}, {"groups", VQ_ATTR_INT, false, "1"},
    {"clip", VQ_ATTR_FLOATS, false, NULL},       {"wrt", VQ_ATTR_INT, true, NULL},
};

const vq__op_def vq__ops_conv[] = {
    {.type = "conv2d",
     .in_slots = conv_in,
     .nin_slots = 2,
     .out_slots = conv_out,
     .nout_slots = 1,
     .flags = VQ__VARIADIC_IN,
     .attrs = conv_attrs,
     .nattrs = 8,
     .params_size = sizeof(vq__window_params),
     .infer = conv2d_infer,
     .kernel = {conv2d_kernel},
     .cuda = VQ__CUDA_OP(vq__conv2d_gpu),
     .grad = vq__conv2d_grad},
    {.type = "conv2d_grad",
     .in_slots = grad_in,
     .nin_slots = 4,
     .out_slots = grad_out,
     .nout_slots = 1,
     .flags = VQ__OPTIONAL_IN,
     .attrs = conv_grad_attrs,
     .nattrs = 6,
     .params_size = sizeof(vq__window_params),
     .infer = conv2d_grad_infer,
     .kernel = {vq__conv2d_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__conv2d_grad_gpu)},
    {.type = "conv_transpose2d",
     .in_slots = conv_in,
     .nin_slots = 2,
     .out_slots = conv_out,
     .nout_slots = 1,
     .flags = VQ__VARIADIC_IN,
     .attrs = conv_transpose_attrs,
     .nattrs = 5,
     .params_size = sizeof(vq__window_params),
     .infer = vq__conv_transpose2d_infer,
     .kernel = {vq__conv_transpose2d_kernel},
     .cuda = VQ__CUDA_OP(vq__conv_transpose2d_gpu),
     .grad = vq__conv_transpose2d_grad},
    {0},
};
