/* ONNX's windows over images (NCHW): Conv, ConvTranspose, MaxPool,
 * MaxUnpool, AveragePool and the global pools, as varq's 2-D and 3-D window ops. A
 * 1-D window runs as a 2-D one of height 1, its attributes lifted; a 3-D
 * pool as two 2-D ones; the pads come from pads or auto_pad (and, for
 * ConvTranspose, output_shape), computed here with every step checked for
 * overflow, since strides, dilations and sizes are the model's. */
#include "onnx_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Window ops work on 2-D images; a 1-D one ([N, C, L]) runs as a 2-D one
 * of height 1 ([N, C, 1, L]), its attributes lifted (stride, dilation and
 * kernel 1 along the added dim, no padding). sd: the input's spatial
 * rank, 1 or 2. */
static int spatial_rank(struct ox *x, const struct ox_val *v, int *sd)
{
    *sd = v->meta.ndim - 2;
    if (*sd >= 1 && *sd <= 3)
        return 0;
    return ox_fail(x, VQ_ENOSYS,
                   "input of rank %d: varq has 1-D, 2-D and 3-D windows (NCL, NCHW, NCDHW)",
                   v->meta.ndim);
}

/* An ints attribute of sd entries lifted to 2 when sd is 1 (absent: d
 * each); 3-D windows keep their 3. */
static int lifted(struct ox *x, const char *name, int sd, int64_t d, int64_t *out)
{
    int n;
    const int64_t *v = ox_ints(x, name, &n);
    if (n >= 0 && n != sd)
        return ox_fail(x, VQ_EINVAL, "%s has %d entries for %d spatial dims", name, n, sd);
    if (sd == 3) {
        for (int i = 0; i < 3; i++)
            out[i] = n < 0 ? d : v[i];
        return 0;
    }
    out[0] = sd == 1 ? 1 : n < 0 ? d : v[0];
    out[1] = n < 0 ? d : v[sd - 1];
    return 0;
}

/* The pads attribute of a window op over sd spatial dims, as the lifted
 * window's (ONNX's begins then ends: top, left, bottom, right; 3-D:
 * front, top, left, back, bottom, right; a 1-D window's added dim gets
 * none) into pads (zeros when absent). */
static int lifted_pads(struct ox *x, int sd, int64_t *pads)
{
    int n, nd = sd == 3 ? 3 : 2; /* the dims of the lifted window */
    const int64_t *p = ox_ints(x, "pads", &n);
    memset(pads, 0, (size_t)(2 * nd) * sizeof *pads);
    if (n >= 0 && n != 2 * sd)
        return ox_fail(x, VQ_EINVAL, "pads has %d entries for %d spatial dims", n, sd);
    if (n > 0 && sd != 1)
        memcpy(pads, p, (size_t)n * sizeof *p);
    else if (n > 0) {
        pads[1] = p[0];
        pads[3] = p[1];
    }
    return 0;
}

/* v as [N, C, 1, L] when it is [N, C, L]; *out = v otherwise. */
static int lift(struct ox *x, struct ox_val *v, int sd, struct ox_val **out)
{
    *out = v;
    if (sd != 1)
        return 0;
    return ox_reshape(x, v, (int64_t[]){0, 0, 1, -1}, 4, NULL, out);
}

/* Emits a window op on the lifted input into out0, dropping the added
 * dim of a 1-D result. */
static int window_emit(struct ox *x, const char *type, struct ox_val *const *in, int nin, int sd,
                       const vq_attr *attrs, int nattrs)
{
    const char *o = ox_out0(x), *name = sd != 1 ? o : NULL;
    struct ox_val *r;
    int rc = ox_emit(x, type, in, nin, &name, 1, attrs, nattrs, &r);
    if (rc || sd != 1)
        return rc;
    return ox_reshape(x, r, (int64_t[]){0, 0, -1}, 3, o, NULL);
}

/* The pads of a window op on the lifted input v: the pads attribute, or
 * auto_pad (SAME_UPPER / SAME_LOWER need the spatial dims known at
 * import). */
static int window_pads(struct ox *x, const struct ox_val *v, int sd, const int64_t *kernel,
                       const int64_t *strides, const int64_t *dil, int64_t *pads)
{
    const char *mode = ox_str(x, "auto_pad");
    int nd = sd == 3 ? 3 : 2; /* the dims of the lifted window */
    int rc = lifted_pads(x, sd, pads);
    if (rc)
        return rc;
    if (!strcmp(mode, "NOTSET") || !strcmp(mode, "VALID")) {
        if (!strcmp(mode, "VALID"))
            memset(pads, 0, (size_t)(2 * nd) * sizeof *pads);
        return 0;
    }
    bool upper = !strcmp(mode, "SAME_UPPER");
    if (!upper && strcmp(mode, "SAME_LOWER"))
        return ox_fail(x, VQ_EINVAL,
                       "auto_pad \"%s\" is not NOTSET, VALID, SAME_UPPER or "
                       "SAME_LOWER",
                       mode);
    for (int i = 0; i < nd; i++) {
        int64_t in = v->meta.shape[2 + i];
        if (in < 0)
            return ox_fail(x, VQ_ENOSYS,
                           "auto_pad %s needs the spatial dims known when the "
                           "model is imported",
                           mode);
        /* strides, dilations and kernel are the model's: checked here, where
         * they divide and multiply before the op's own checks */
        int64_t st = strides[i], span, total;
        if (st < 1 || dil[i] < 1 || kernel[i] < 0)
            return ox_fail(x, VQ_EINVAL,
                           "strides %lld, dilations %lld, kernel %lld: a window "
                           "needs them positive",
                           (long long)st, (long long)dil[i], (long long)kernel[i]);
        int64_t out = in / st + (in % st != 0); /* ceil(in / st) <= in */
        if (__builtin_mul_overflow(kernel[i] > 0 ? kernel[i] - 1 : 0, dil[i], &span) ||
            __builtin_add_overflow((out - 1) * st + 1 - in, span, &total))
            return ox_fail(x, VQ_EINVAL, "kernel %lld dilated by %lld overflows",
                           (long long)kernel[i], (long long)dil[i]);
        if (total < 0)
            total = 0;
        pads[upper ? i : nd + i] = total / 2;
        pads[upper ? nd + i : i] = total - total / 2;
    }
    return 0;
}

/* What Conv and ConvTranspose share: X, W and an optional B (in), the
 * output, the spatial rank, strides, dilations and group, with X and W
 * lifted to 2-D windows (3-D ones stay 3-D: conv3d, conv_transpose3d). */
static int conv_common(struct ox *x, struct ox_val **in, int *sd, int64_t *strides, int64_t *dil)
{
    in[0] = ox_input(x, 0);
    in[1] = ox_input(x, 1);
    in[2] = ox_input(x, 2);
    int rc = spatial_rank(x, in[0], sd);
    if (rc == 0 && in[1]->meta.ndim != *sd + 2)
        rc = ox_fail(x, VQ_EINVAL, "W has rank %d, X %d", in[1]->meta.ndim, in[0]->meta.ndim);
    if (rc == 0)
        rc = lifted(x, "strides", *sd, 1, strides);
    if (rc == 0)
        rc = lifted(x, "dilations", *sd, 1, dil);
    if (rc == 0)
        rc = lift(x, in[0], *sd, &in[0]);
    if (rc == 0)
        rc = lift(x, in[1], *sd, &in[1]);
    return rc;
}

static int t_conv(struct ox *x)
{
    struct ox_val *in[3];
    int64_t strides[3], dil[3], kernel[3], pads[6];
    int sd = 0;
    int rc = conv_common(x, in, &sd, strides, dil);
    if (rc)
        return rc;
    int nd = sd == 3 ? 3 : 2;
    for (int i = 0; i < nd; i++)
        kernel[i] = in[1]->meta.shape[2 + i];
    if ((rc = window_pads(x, in[0], sd, kernel, strides, dil, pads)) < 0)
        return rc;
    /* An activation that translate_at (import.c) fused into this Conv, one
     * over images: conv2d's clip. */
    double clip[2] = {x->fuse_lo, x->fuse_hi};
    vq_attr a[5] = {VQ_ATTR_IS("strides", strides, nd), VQ_ATTR_IS("pads", pads, 2 * nd),
                    VQ_ATTR_IS("dilations", dil, nd), VQ_ATTR_I("groups", ox_int(x, "group")),
                    VQ_ATTR_FS("clip", clip, 2)};
    return window_emit(x, sd == 3 ? "conv3d" : "conv2d", in, in[2] ? 3 : 2, sd, a,
                       x->fuse && sd == 2 ? 5 : 4);
}

/* The total padding of a ConvTranspose along lifted dim i (len the input's
 * size there, k the kernel's) that gives the output size want (may raise
 * *outpad, for rows past the last window): the model's strides,
 * dilations, paddings and sizes, each step checked for overflow. */
static int transpose_pad(struct ox *x, int64_t len, int64_t k, int64_t st, int64_t dil,
                         int64_t want, bool given, int64_t *outpad, int64_t *out)
{
    int64_t total, t1, t2;
    bool bad = st < 1 || dil < 1 || *outpad < 0;
    if (!bad && !given)
        bad = __builtin_mul_overflow(len, st, &want);
    bad = bad || want < 0 || __builtin_mul_overflow(st, len - 1, &t1) ||
          __builtin_mul_overflow(k - 1, dil, &t2) || __builtin_add_overflow(t1, t2, &total) ||
          __builtin_add_overflow(total, *outpad, &total) ||
          __builtin_sub_overflow(total, want, &total) || __builtin_add_overflow(total, 1, &total) ||
          (total < 0 && __builtin_sub_overflow(*outpad, total, &t1));
    if (bad)
        return ox_fail(x, VQ_EINVAL,
                       "strides %lld, dilations %lld, output_padding "
                       "%lld and the output size overflow or are not "
                       "positive",
                       (long long)st, (long long)dil, (long long)*outpad);
    if (total < 0 && *outpad - total < st) {
        /* rows past the last window: what output_padding adds */
        *outpad -= total;
        total = 0;
    }
    if (total < 0)
        return ox_fail(x, VQ_ENOSYS,
                       "output size %lld is past what the strides and "
                       "output_padding give (%lld)",
                       (long long)want, (long long)(want + total));
    *out = total;
    return 0;
}

/* ConvTranspose: X [N, C, spatial], W [C, M / group, kernel]. Its pads
 * come from pads, or from output_shape or auto_pad SAME_* (which need the
 * spatial dims known at import): the total padding that gives the wanted
 * size, split as the ONNX spec says (SAME_UPPER puts the odd one at the
 * end). */
static int t_conv_transpose(struct ox *x)
{
    struct ox_val *in[3];
    int64_t strides[3], dil[3], outpad[3], pads[6] = {0};
    int sd = 0, nshape;
    const char *mode = ox_str(x, "auto_pad");
    const int64_t *shape = ox_ints(x, "output_shape", &nshape);
    int rc = conv_common(x, in, &sd, strides, dil);
    if (rc == 0)
        rc = lifted(x, "output_padding", sd, 0, outpad);
    if (sd == 1)
        outpad[0] = 0; /* the added dim of a 1-D window gets no padding */
    if (rc == 0)
        rc = lifted_pads(x, sd, pads);
    if (rc == 0 && nshape >= 0 && nshape != sd && nshape != sd + 2)
        rc = ox_fail(x, VQ_EINVAL, "output_shape has %d entries for %d spatial dims", nshape, sd);
    if (rc)
        return rc;
    bool same = !strcmp(mode, "SAME_UPPER") || !strcmp(mode, "SAME_LOWER");
    if (!same && strcmp(mode, "NOTSET") && strcmp(mode, "VALID"))
        return ox_fail(x, VQ_EINVAL,
                       "auto_pad \"%s\" is not NOTSET, VALID, SAME_UPPER or "
                       "SAME_LOWER",
                       mode);
    int nd = sd == 3 ? 3 : 2; /* the dims of the lifted window */
    for (int i = nd - sd; (nshape > 0 || same) && i < nd; i++) {
        int64_t len = in[0]->meta.shape[2 + i], k = in[1]->meta.shape[2 + i], total = 0;
        if (len < 0 || k < 0)
            return ox_fail(x, VQ_ENOSYS,
                           "%s needs the spatial dims known when the model is "
                           "imported",
                           nshape > 0 ? "output_shape" : "auto_pad SAME");
        int64_t want = nshape > 0 ? shape[nshape - nd + i] : 0;
        if ((rc = transpose_pad(x, len, k, strides[i], dil[i], want, nshape > 0, &outpad[i],
                                &total)) < 0)
            return rc;
        bool upper = !strcmp(mode, "SAME_UPPER");
        pads[i] = upper ? total / 2 : total - total / 2;
        pads[nd + i] = total - pads[i];
    }
    vq_attr a[5] = {VQ_ATTR_IS("strides", strides, nd), VQ_ATTR_IS("pads", pads, 2 * nd),
                    VQ_ATTR_IS("dilations", dil, nd), VQ_ATTR_I("groups", ox_int(x, "group")),
                    VQ_ATTR_IS("output_padding", outpad, nd)};
    return window_emit(x, sd == 3 ? "conv_transpose3d" : "conv_transpose2d", in, in[2] ? 3 : 2, sd,
                       a, 5);
}

/* A 3-D pool as two 2-D ones (type, attributes a of which the window's
 * are a[0..2] and the pads a[2]): X [N, C, D, H, W] seen as [N, C * D, H,
 * W] pooled over (H, W), then [N, C, D, OH * OW] pooled over D alone. Max
 * and average pools are separable: the maximum of a box is the maximum
 * over its depth of the planes' maxima (and the first maximum in (d, h, w)
 * order stays the first, for the gradient), and the taps of a box on the
 * input (or the pads) are the product of those along each dim, so the
 * average's divisor is too. C, D, H and W must be known at import. */
static int pool3d(struct ox *x, const char *type, struct ox_val *v, const int64_t *kernel,
                  const int64_t *strides, const int64_t *dil, const int64_t *pads, vq_attr *a,
                  int na)
{
    const int64_t *d = v->meta.shape;
    for (int i = 1; i < 5; i++)
        if (d[i] < 0)
            return ox_fail(x, VQ_ENOSYS,
                           "a 3-D pool's channels and spatial dims must be known "
                           "when the model is imported");
    struct ox_val *r;
    int64_t k2[2] = {kernel[1], kernel[2]}, s2[2] = {strides[1], strides[2]};
    int64_t d2[2] = {dil[1], dil[2]}, p2[4] = {pads[1], pads[2], pads[4], pads[5]};
    int64_t kd[2] = {kernel[0], 1}, sd[2] = {strides[0], 1}, dd[2] = {dil[0], 1};
    int64_t pd[4] = {pads[0], 0, pads[3], 0};
    a[0] = VQ_ATTR_IS("kernel", k2, 2);
    a[1] = VQ_ATTR_IS("strides", s2, 2);
    a[2] = VQ_ATTR_IS("pads", p2, 4);
    if (!strcmp(a[4].name, "dilations"))
        a[4] = VQ_ATTR_IS("dilations", d2, 2);
    const char *tmp = NULL;
    struct ox_val *q;
    int64_t cd;
    if (__builtin_mul_overflow(d[1], d[2], &cd))
        return ox_fail(x, VQ_EINVAL, "channels %lld times depth %lld overflow", (long long)d[1],
                       (long long)d[2]);
    int rc = ox_reshape(x, v, (int64_t[]){0, cd, d[3], d[4]}, 4, NULL, &q);
    if (rc == 0)
        rc = ox_emit(x, type, &q, 1, &tmp, 1, a, na, &r);
    if (rc)
        return rc;
    int64_t oh = r->meta.shape[2], ow = r->meta.shape[3], plane;
    if (oh < 0 || ow < 0 || __builtin_mul_overflow(oh, ow, &plane))
        return ox_fail(x, VQ_EINVAL, "a 3-D pool's output plane %lldx%lld is not a size",
                       (long long)oh, (long long)ow);
    a[0] = VQ_ATTR_IS("kernel", kd, 2);
    a[1] = VQ_ATTR_IS("strides", sd, 2);
    a[2] = VQ_ATTR_IS("pads", pd, 4);
    if (!strcmp(a[4].name, "dilations"))
        a[4] = VQ_ATTR_IS("dilations", dd, 2);
    rc = ox_reshape(x, r, (int64_t[]){0, d[1], d[2], plane}, 4, NULL, &q);
    if (rc == 0)
        rc = ox_emit(x, type, &q, 1, &tmp, 1, a, na, &r);
    return rc ? rc : ox_reshape(x, r, (int64_t[]){0, 0, 0, oh, ow}, 5, ox_out0(x), NULL);
}

/* MaxPool (Indices too) and AveragePool: the row's varq op, max_pool2d or
 * avg_pool2d. */
static int t_pool(struct ox *x)
{
    bool max = !strcmp(ox_type(x), "max_pool2d");
    struct ox_val *v = ox_input(x, 0);
    int64_t kernel[3], strides[3], dil[3] = {1, 1, 1}, pads[6];
    int sd = 0;
    int rc = spatial_rank(x, v, &sd);
    if (rc == 0 && !ox_given(x, "kernel_shape"))
        rc = ox_fail(x, VQ_EINVAL, "no kernel_shape");
    if (rc == 0)
        rc = lifted(x, "kernel_shape", sd, 1, kernel);
    if (rc == 0)
        rc = lifted(x, "strides", sd, 1, strides);
    if (rc == 0 && max)
        rc = lifted(x, "dilations", sd, 1, dil);
    if (rc == 0 && ox_out(x, 1) && (!max || sd == 3))
        rc = ox_fail(x, VQ_ENOSYS, "its Indices output is not supported (a 3-D window)");
    if (rc == 0)
        rc = lift(x, v, sd, &v);
    if (rc == 0)
        rc = window_pads(x, v, sd, kernel, strides, dil, pads);
    if (rc)
        return rc;
    vq_attr a[5] = {VQ_ATTR_IS("kernel", kernel, 2), VQ_ATTR_IS("strides", strides, 2),
                    VQ_ATTR_IS("pads", pads, 4),
                    VQ_ATTR_B("ceil_mode", ox_int(x, "ceil_mode") != 0),
                    max ? VQ_ATTR_IS("dilations", dil, 2)
                        : VQ_ATTR_B("count_include_pad", ox_int(x, "count_include_pad") != 0)};
    if (sd == 3)
        return pool3d(x, ox_type(x), v, kernel, strides, dil, pads, a, 5);
    if ((rc = window_emit(x, ox_type(x), &v, 1, sd, a, 5)) || !ox_out(x, 1))
        return rc;
    /* Indices: where each maximum is, flattened over the whole input (a
     * 1-D pool's lifted [N, C, 1, W] flattens the same) */
    const char *idx = ox_out(x, 1), *name = sd != 1 ? idx : NULL;
    struct ox_val *r;
    vq_attr ai[6] = {a[0], a[1], a[2],
                     a[3], a[4], VQ_ATTR_I("storage_order", ox_int(x, "storage_order"))};
    if ((rc = ox_emit(x, "max_pool2d_argmax", &v, 1, &name, 1, ai, 6, &r)) || sd != 1)
        return rc;
    return ox_reshape(x, r, (int64_t[]){0, 0, -1}, 3, idx, NULL);
}

/* MaxUnpool as ONNX's reference computes it: max_unpool2d of X and I
 * into MaxPool's inverse size along each spatial dim, (in - 1) stride -
 * pads + kernel, I's indices flat over that; then, when output_shape
 * (input 2, known at import) asks for more, zeros after the end of each
 * dim (the reference's test_maxunpool_export_with_output_shape; ONNX
 * Runtime instead reads the indices as flat over output_shape). A 1-D one
 * runs lifted, as the pools; a 3-D one as a 2-D one over [N, C, D H, W]
 * (the same flat indices) of that size, which needs X's spatial dims
 * known at import, as does output_shape. */
static int t_max_unpool(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *idx = ox_input(x, 1);
    int64_t kernel[3], strides[3], pads[6], shape[VQ_MAX_DIMS], size[3];
    int sd = 0, nshape;
    int rc = spatial_rank(x, v, &sd);
    if (rc == 0 && !ox_given(x, "kernel_shape"))
        rc = ox_fail(x, VQ_EINVAL, "no kernel_shape");
    if (rc == 0)
        rc = lifted(x, "kernel_shape", sd, 1, kernel);
    if (rc == 0)
        rc = lifted(x, "strides", sd, 1, strides);
    if (rc == 0)
        rc = lifted_pads(x, sd, pads);
    if (rc == 0)
        rc = ox_const_ints(x, 2, "output_shape", shape, VQ_MAX_DIMS, &nshape);
    if (rc)
        return rc;
    if (idx->meta.ndim != v->meta.ndim)
        return ox_fail(x, VQ_EINVAL, "I has rank %d, X %d", idx->meta.ndim, v->meta.ndim);
    if (nshape >= 0 && nshape != sd + 2)
        return ox_fail(x, VQ_EINVAL, "output_shape has %d entries for X of rank %d", nshape,
                       sd + 2);
    for (int d = 0; nshape >= 0 && d < 2; d++)
        if (v->meta.shape[d] >= 0 && shape[d] != v->meta.shape[d])
            return ox_fail(x, VQ_EINVAL, "output_shape's dim %d is %lld, X's %lld", d,
                           (long long)shape[d], (long long)v->meta.shape[d]);
    /* the inverse size along the lifted window's dims (-1: unknown) */
    int nd = sd == 3 ? 3 : 2;
    bool known = true;
    for (int i = 0; i < nd; i++) {
        int64_t in = sd == 1 && i == 0 ? 1 : v->meta.shape[v->meta.ndim - nd + i];
        if (in < 0) {
            size[i] = -1;
            known = false;
        } else if (__builtin_mul_overflow(in > 0 ? in - 1 : 0, strides[i], &size[i]) ||
                   __builtin_add_overflow(size[i], kernel[i] - pads[i] - pads[nd + i], &size[i])) {
            return ox_fail(x, VQ_EINVAL, "the output size overflows");
        }
    }
    if (!known && (sd == 3 || nshape >= 0))
        return ox_fail(x, VQ_ENOSYS, "%s needs X's spatial dims known when the model is imported",
                       sd == 3 ? "a 3-D MaxUnpool" : "output_shape");
    /* zeros after the end of each spatial dim, for output_shape */
    int64_t ends[2 * VQ_MAX_DIMS] = {0};
    bool grow = false;
    for (int i = 0; nshape >= 0 && i < sd; i++) {
        int64_t inferred = size[nd - sd + i];
        if (shape[2 + i] < inferred)
            return ox_fail(x, VQ_EINVAL,
                           "output_shape's dim %d is %lld, less than the unpooled %lld", 2 + i,
                           (long long)shape[2 + i], (long long)inferred);
        ends[sd + 2 + 2 + i] = shape[2 + i] - inferred;
        grow |= shape[2 + i] > inferred;
    }
    const char *o = ox_out0(x), *name = grow ? NULL : o;
    struct ox_val *in[2], *r;
    if (sd == 3) {
        int64_t flat = v->meta.shape[4], out2[2], ones[2] = {1, 1};
        if (__builtin_mul_overflow(size[0], size[1], &out2[0]))
            return ox_fail(x, VQ_EINVAL, "the output size overflows");
        out2[1] = size[2];
        vq_attr a[2] = {VQ_ATTR_IS("kernel", ones, 2), VQ_ATTR_IS("output_size", out2, 2)};
        const char *tmp = NULL;
        if ((rc = ox_reshape(x, v, (int64_t[]){0, 0, -1, flat}, 4, NULL, &in[0])) < 0 ||
            (rc = ox_reshape(x, idx, (int64_t[]){0, 0, -1, flat}, 4, NULL, &in[1])) < 0 ||
            (rc = ox_emit(x, "max_unpool2d", in, 2, &tmp, 1, a, 2, &r)) < 0 ||
            (rc = ox_reshape(x, r, (int64_t[]){0, 0, size[0], size[1], size[2]}, 5, name, &r)) < 0)
            return rc;
    } else {
        vq_attr a[3] = {VQ_ATTR_IS("kernel", kernel, 2), VQ_ATTR_IS("strides", strides, 2),
                        VQ_ATTR_IS("pads", pads, 4)};
        const char *tmp = NULL;
        if ((rc = lift(x, v, sd, &in[0])) < 0 || (rc = lift(x, idx, sd, &in[1])) < 0 ||
            (rc = ox_emit(x, "max_unpool2d", in, 2, sd == 1 ? &tmp : &name, 1, a, 3, &r)) < 0 ||
            (sd == 1 && (rc = ox_reshape(x, r, (int64_t[]){0, 0, -1}, 3, name, &r)) < 0))
            return rc;
    }
    if (!grow)
        return 0;
    vq_attr pa[1] = {VQ_ATTR_IS("pads", ends, 2 * (sd + 2))};
    return ox_emit(x, "pad", &r, 1, &o, 1, pa, 1, NULL);
}

static int t_global_average_pool(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    const char *o = ox_out0(x);
    if (v->meta.ndim < 3)
        return ox_fail(x, VQ_EINVAL, "input of rank %d (needs N, C and spatial dims)",
                       v->meta.ndim);
    return ox_emit(x, "global_avg_pool", &v, 1, &o, 1, NULL, 0, NULL);
}

/* GlobalMaxPool: the largest value over the spatial dims, kept as 1s. */
static int t_global_max_pool(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    if (v->meta.ndim < 3)
        return ox_fail(x, VQ_EINVAL, "input of rank %d (needs N, C and spatial dims)",
                       v->meta.ndim);
    int64_t axes[VQ_MAX_DIMS];
    for (int i = 2; i < v->meta.ndim; i++)
        axes[i - 2] = i;
    vq_attr a[2] = {VQ_ATTR_IS("axes", axes, v->meta.ndim - 2), VQ_ATTR_B("keepdim", true)};
    const char *o = ox_out0(x);
    return ox_emit(x, "reduce_max", &v, 1, &o, 1, a, 2, NULL);
}

/* ---- for the quantized convolutions (t_quant.c) ---- */

int ox_qconv_window(struct ox *x, struct ox_val **xv, struct ox_val **wv, int *sd, int64_t *strides,
                    int64_t *dil, int64_t *pads)
{
    int rc = spatial_rank(x, *xv, sd);
    if (rc)
        return rc;
    if (*sd == 3)
        return ox_fail(x, VQ_ENOSYS, "a 3-D quantized convolution is not translated");
    if ((*wv)->meta.ndim != *sd + 2)
        return ox_fail(x, VQ_EINVAL, "W has rank %d, X %d", (*wv)->meta.ndim, (*xv)->meta.ndim);
    if ((rc = lifted(x, "strides", *sd, 1, strides)) ||
        (rc = lifted(x, "dilations", *sd, 1, dil)) || (rc = lift(x, *xv, *sd, xv)) ||
        (rc = lift(x, *wv, *sd, wv)))
        return rc;
    int64_t kernel[2] = {(*wv)->meta.shape[2], (*wv)->meta.shape[3]};
    return window_pads(x, *xv, *sd, kernel, strides, dil, pads);
}

int ox_window_emit(struct ox *x, const char *type, struct ox_val *const *in, int nin, int sd,
                   const vq_attr *attrs, int nattrs)
{
    return window_emit(x, type, in, nin, sd, attrs, nattrs);
}

/* ---- the rows ---- */

/* what every window reads (the lifted dims: at most 3, pads 6) */
#define WINDOW_ATTRS OX_INTS("strides", 3), OX_STR("auto_pad", "NOTSET", 32), OX_INTS("pads", 6)

const struct ox_op ox_op_Conv =
    OX_ROW(t_conv, NULL, 2, 3, true,
           OX_ATTRS(WINDOW_ATTRS, OX_INTS("dilations", 3), OX_INT("group", 1)));
const struct ox_op ox_op_ConvTranspose =
    OX_ROW(t_conv_transpose, NULL, 2, 3, true,
           OX_ATTRS(WINDOW_ATTRS, OX_INTS("dilations", 3), OX_INT("group", 1),
                    OX_INTS("output_padding", 3), OX_INTS("output_shape", 5)));
const struct ox_op ox_op_MaxPool =
    OX_ROW(t_pool, "max_pool2d", 1, 1, true,
           OX_ATTRS(WINDOW_ATTRS, OX_INTS("kernel_shape", 3), OX_INTS("dilations", 3),
                    OX_INT("ceil_mode", 0), OX_INT("storage_order", 0)));
const struct ox_op ox_op_AveragePool =
    OX_ROW(t_pool, "avg_pool2d", 1, 1, true,
           OX_ATTRS(WINDOW_ATTRS, OX_INTS("kernel_shape", 3), OX_INT("ceil_mode", 0),
                    OX_INT("count_include_pad", 0)));
const struct ox_op ox_op_MaxUnpool =
    OX_ROW(t_max_unpool, NULL, 2, 3, true,
           OX_ATTRS(OX_INTS("kernel_shape", 3), OX_INTS("pads", 6), OX_INTS("strides", 3)));
const struct ox_op ox_op_GlobalAveragePool = OX_ROW(t_global_average_pool, NULL, 1, 1, true, NULL);
const struct ox_op ox_op_GlobalMaxPool = OX_ROW(t_global_max_pool, NULL, 1, 1, true, NULL);
