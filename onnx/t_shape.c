/* ONNX's shape and layout ops: Reshape, Flatten, Transpose, Concat,
 * Squeeze, Unsqueeze, Split, Expand, Tile, Pad, DepthToSpace and
 * SpaceToDepth, and the ops whose result is known when the model is
 * imported (Constant, Shape, Size, ConstantOfShape, EyeLike, Range,
 * Trilu's mask): shapes, axes and pads are read with ox_const_ints, so a
 * shape computed from other shapes folds at import and never reaches the
 * program. */
#include "onnx_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* A shape read (rc, n entries): given, and of a rank varq has. */
static int shape_given(struct ox *x, int rc, int n)
{
    if (rc)
        return rc;
    if (n < 0)
        return ox_fail(x, VQ_EINVAL, "no shape");
    if (n > VQ_MAX_DIMS)
        return ox_fail(x, VQ_ENOSYS, "rank %d is more than varq's %d", n, VQ_MAX_DIMS);
    return 0;
}

/* A reshape, expand or fill_constant (type) of v (NULL for the fill) to a
 * shape computed at run time: the op reads it when it runs, and the
 * result's dims are what import knows of the shape's entries (part.c).
 * The shape must be a 1-D integer value of a known length; attrs are the
 * op's others (reshape's allowzero, the fill's dtype and value). */
static int shape_from_run(struct ox *x, const char *type, struct ox_val *v, struct ox_val *shape,
                          bool allowzero, const vq_attr *attrs, int nattrs)
{
    vq__meta m;
    if (ox_shape_meta(shape, v && strcmp(type, "expand") ? &v->meta : NULL, allowzero, &m) < 0)
        return ox_fail(x, VQ_ENOSYS,
                       "the shape \"%s\" is computed at run time and is not a 1-D integer "
                       "tensor of a length known at import (at most %d entries)",
                       shape->name, VQ_MAX_DIMS);
    struct ox_val *in[2] = {v, shape}, *res;
    const char *o = ox_out0(x);
    int rc = ox_emit(x, type, v ? in : in + 1, v ? 2 : 1, &o, 1, attrs, nattrs, &res);
    if (rc < 0)
        return rc;
    if (!strcmp(type, "expand")) { /* numpy's broadcast, both ways */
        int r = m.ndim > v->meta.ndim ? m.ndim : v->meta.ndim;
        vq__meta e = {.dtype = v->meta.dtype, .ndim = r};
        for (int i = 0; i < r; i++) {
            int is = i - (r - m.ndim), ix = i - (r - v->meta.ndim);
            int64_t ds = is >= 0 ? m.shape[is] : 1, dx = ix >= 0 ? v->meta.shape[ix] : 1;
            e.shape[i] = ds == 1 ? dx : dx > 1 ? dx : ds;
        }
        m = e;
    }
    for (int i = 0; i < m.ndim; i++)
        if (res->meta.shape[i] < 0)
            res->meta.shape[i] = m.shape[i];
    return 0;
}

static int t_reshape(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t shape[OX_MAXI], allowzero = ox_int(x, "allowzero");
    int n, rc = 0;
    if (x->opset >= 5 && ox_input(x, 1) && !ox_known(x, ox_input(x, 1)))
        return shape_from_run(x, "reshape", v, ox_input(x, 1), allowzero,
                              &VQ_ATTR_I("allowzero", 1), allowzero ? 1 : 0);
    if (x->opset < 5)
        ox_ints_copy(x, "shape", shape, &n);
    else
        rc = ox_const_ints(x, 1, "shape", shape, OX_MAXI, &n);
    if ((rc = shape_given(x, rc, n)) < 0)
        return rc;
    bool zero = false;
    for (int i = 0; allowzero && i < n; i++)
        zero |= shape[i] == 0;
    if (!zero)
        return ox_reshape(x, v, shape, n, ox_out0(x), NULL);
    /* allowzero with a 0 in the shape: an empty dim, not a copied one */
    const char *name = ox_out0(x);
    vq_attr a[2] = {VQ_ATTR_IS("shape", shape, n), VQ_ATTR_I("allowzero", 1)};
    return ox_emit(x, "reshape", &v, 1, &name, 1, a, 2, NULL);
}

static int t_flatten(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t axis = ox_int(x, "axis");
    int r = v->meta.ndim, ax = 0;
    if (axis < -r || axis > r)
        return ox_fail(x, VQ_EINVAL, "axis %lld is out of range for rank %d", (long long)axis, r);
    ax = (int)(axis < 0 ? axis + r : axis);
    int64_t lead = 1, rest = 1;
    for (int i = 0; i < r; i++) {
        int64_t *p = i < ax ? &lead : &rest;
        *p = v->meta.shape[i] < 0 || *p < 0 ? -1 : *p * v->meta.shape[i];
    }
    int64_t shape[2] = {lead, -1};
    if (lead < 0 && rest >= 0) {
        shape[0] = -1;
        shape[1] = rest;
    } else if (lead < 0 && ax == 1) {
        shape[0] = 0; /* the batch dim, copied */
    } else if (lead < 0) {
        return ox_fail(x, VQ_ENOSYS, "dims known only at run time on both sides of axis %d", ax);
    }
    return ox_reshape(x, v, shape, 2, ox_out0(x), NULL);
}

static int t_transpose(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t perm[OX_MAXI];
    int n;
    ox_ints_copy(x, "perm", perm, &n);
    if (n < 0) {
        n = v->meta.ndim;
        for (int i = 0; i < n; i++)
            perm[i] = n - 1 - i;
    }
    vq_attr a = VQ_ATTR_IS("perm", perm, n);
    const char *o = ox_out0(x);
    return ox_emit(x, "transpose", &v, 1, &o, 1, &a, 1, NULL);
}

/* Concat: one concat, or, past the inputs a varq op takes, concats of
 * up to VQ__MAX_SLOTS inputs each, then one of their results (exporters
 * write a node with an input per class or per feature level). */
static int t_concat(struct ox *x)
{
    const Onnx__NodeProto *n = x->node;
    int nin = (int)n->n_input, max = VQ__MAX_SLOTS;
    if (nin > max * max)
        return ox_fail(x, VQ_ENOSYS, "%d inputs (varq takes 1 to %d)", nin, max * max);
    struct ox_val *in[VQ__MAX_SLOTS], *part[VQ__MAX_SLOTS];
    int ax = 0, rc = 0, nparts = (nin + max - 1) / max;
    for (int p = 0; p < nparts && rc == 0; p++) {
        int first = p * max, cnt = nin - first < max ? nin - first : max;
        for (int i = 0; i < cnt; i++)
            if (!(in[i] = ox_input(x, first + i)))
                return ox_fail(x, VQ_EINVAL, "input %d is missing", first + i);
        if (p == 0 && (rc = ox_axis(x, "axis", ox_int(x, "axis"), in[0]->meta.ndim, &ax)) < 0)
            return rc;
        vq_attr a = VQ_ATTR_I("axis", ax);
        const char *o = nparts == 1 ? ox_out0(x) : NULL;
        rc = ox_emit(x, "concat", in, cnt, &o, 1, &a, 1, &part[p]);
    }
    if (rc || nparts == 1)
        return rc;
    vq_attr a = VQ_ATTR_I("axis", ax);
    const char *o = ox_out0(x);
    return ox_emit(x, "concat", part, nparts, &o, 1, &a, 1, NULL);
}

static int t_squeeze(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t axes[OX_MAXI];
    int n, rc = ox_axes(x, 13, axes, &n);
    if (rc)
        return rc;
    int r = v->meta.ndim;
    bool drop[VQ_MAX_DIMS] = {0};
    if (n < 0) {
        for (int i = 0; i < r; i++) {
            if (v->meta.shape[i] < 0)
                return ox_fail(x, VQ_ENOSYS, "no axes, and dim %d is known only at run time", i);
            drop[i] = v->meta.shape[i] == 1;
        }
    }
    for (int k = 0; k < n; k++) {
        int a = 0;
        if ((rc = ox_axis(x, "axis", axes[k], r, &a)) < 0)
            return rc;
        if (v->meta.shape[a] > 1)
            return ox_fail(x, VQ_EINVAL, "axis %d has size %lld, not 1", a,
                           (long long)v->meta.shape[a]);
        drop[a] = true;
    }
    int64_t want[VQ_MAX_DIMS];
    int from[VQ_MAX_DIMS], m = 0;
    for (int i = 0; i < r; i++)
        if (!drop[i]) {
            want[m] = v->meta.shape[i];
            from[m++] = i;
        }
    return ox_reshape_known(x, v, want, from, m, ox_out0(x), NULL);
}

static int t_unsqueeze(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t axes[OX_MAXI];
    int n, rc = ox_axes(x, 13, axes, &n);
    if (rc)
        return rc;
    if (n < 0)
        return ox_fail(x, VQ_EINVAL, "no axes");
    int r = v->meta.ndim + n;
    if (r > VQ_MAX_DIMS)
        return ox_fail(x, VQ_ENOSYS, "rank %d is more than varq's %d", r, VQ_MAX_DIMS);
    bool add[VQ_MAX_DIMS] = {0};
    for (int k = 0; k < n; k++) {
        int a = 0;
        if ((rc = ox_axis(x, "axis", axes[k], r, &a)) < 0)
            return rc;
        if (add[a])
            return ox_fail(x, VQ_EINVAL, "axis %d is given twice", a);
        add[a] = true;
    }
    int64_t want[VQ_MAX_DIMS];
    int from[VQ_MAX_DIMS];
    for (int i = 0, j = 0; i < r; i++) {
        if (add[i]) {
            want[i] = 1;
            from[i] = -1;
        } else {
            want[i] = v->meta.shape[j];
            from[i] = j++;
        }
    }
    struct ox_val *res;
    if ((rc = ox_reshape_known(x, v, want, from, r, ox_out0(x), &res)) == 0 && !res->konst) {
        res->sym = v->sym; /* one element stays one element */
        res->sym_off = v->sym_off;
    }
    return rc;
}

/* Split: sizes as the split attribute (before 13), an input (since), or
 * equal parts (num_outputs in 18, else the number of outputs). */
static int t_split(struct ox *x)
{
    const Onnx__NodeProto *n = x->node;
    struct ox_val *v = ox_input(x, 0);
    int64_t axis = ox_int(x, "axis"), sizes[OX_MAXI];
    int ns = -1, rc = 0;
    if (x->opset < 13)
        ox_ints_copy(x, "split", sizes, &ns);
    else
        rc = ox_const_ints(x, 1, "split", sizes, OX_MAXI, &ns);
    if (rc)
        return rc;
    int nout = (int)n->n_output, ax = 0;
    if (nout < 1 || nout > VQ__MAX_SLOTS)
        return ox_fail(x, VQ_ENOSYS, "%d outputs (varq takes 1 to %d)", nout, VQ__MAX_SLOTS);
    if ((rc = ox_axis(x, "axis", axis, v->meta.ndim, &ax)) < 0)
        return rc;
    if (ns < 0) {
        int64_t dim = v->meta.shape[ax];
        if (dim < 0)
            return ox_fail(x, VQ_ENOSYS, "equal parts of a dim known only at run time");
        for (int j = 0; j < nout; j++) /* the last part takes the rest (opset 18) */
            sizes[j] = j < nout - 1 ? (dim + nout - 1) / nout
                                    : dim - (int64_t)(nout - 1) * ((dim + nout - 1) / nout);
        ns = nout;
    }
    if (ns != nout)
        return ox_fail(x, VQ_EINVAL, "%d sizes for %d outputs", ns, nout);
    const char *names[VQ__MAX_SLOTS];
    for (int j = 0; j < nout; j++)
        names[j] = ox_out(x, j);
    vq_attr a[2] = {VQ_ATTR_I("axis", ax), VQ_ATTR_IS("sizes", sizes, ns)};
    return ox_emit(x, "split", &v, 1, names, nout, a, 2, NULL);
}

/* Expand(X, shape) and Tile(X, repeats): the row's varq op (expand or
 * tile), the second input known (its name the op's attribute's), or read
 * by the op when it runs. */
static int t_shaped(struct ox *x)
{
    const char *type = ox_type(x), *what = strcmp(type, "tile") ? "shape" : "repeats";
    struct ox_val *v = ox_input(x, 0);
    int64_t vals[OX_MAXI];
    int n;
    if (!strcmp(type, "expand") && ox_input(x, 1) && !ox_known(x, ox_input(x, 1)))
        return shape_from_run(x, "expand", v, ox_input(x, 1), false, NULL, 0);
    if (!strcmp(type, "tile") && ox_input(x, 1) && !ox_known(x, ox_input(x, 1))) {
        /* repeats computed at run time: tile reads its Repeats input's
         * value when it runs */
        struct ox_val *in[2] = {v, ox_input(x, 1)};
        const char *o = ox_out0(x);
        int rc = ox_cast(x, &in[1], VQ_I64);
        return rc < 0 ? rc : ox_emit(x, "tile", in, 2, &o, 1, NULL, 0, NULL);
    }
    int rc = ox_const_ints(x, 1, what, vals, OX_MAXI, &n);
    if (rc == 0 && n < 0)
        rc = ox_fail(x, VQ_EINVAL, "no %s", what);
    if (rc)
        return rc;
    vq_attr a = VQ_ATTR_IS(what, vals, n);
    const char *o = ox_out0(x);
    return ox_emit(x, type, &v, 1, &o, 1, &a, 1, NULL);
}

/* Pad: attributes before opset 11; pads, constant_value and (18) axes as
 * inputs since. */
static int t_pad(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *cv = x->opset >= 11 ? ox_input(x, 2) : NULL;
    int64_t pads[OX_MAXI], axes[OX_MAXI];
    int n, na = -1, rc = 0;
    const char *mode = ox_str(x, "mode");
    double value = ox_float(x, "value");
    if (x->opset < 11) {
        ox_ints_copy(x, x->opset < 2 ? "paddings" : "pads", pads, &n);
    } else {
        if ((rc = ox_const_ints(x, 1, "pads", pads, OX_MAXI, &n)) == 0)
            rc = ox_const_ints(x, 3, "axes", axes, OX_MAXI, &na);
        if (rc == 0 && cv) {
            if (!ox_known(x, cv) || cv->konst->numel != 1)
                rc = ox_fail(x, VQ_ENOSYS,
                             "constant_value must be known when the model is "
                             "imported (one value)");
            else
                value = ox_first_value(cv->konst);
        }
    }
    if (rc)
        return rc;
    int r = v->meta.ndim;
    if (na >= 0) { /* pads for the listed axes only: spread to every dim */
        int64_t full[OX_MAXI] = {0};
        if (n != 2 * na)
            return ox_fail(x, VQ_EINVAL, "pads has %d entries for %d axes", n, na);
        for (int k = 0; k < na; k++) {
            int a = 0;
            if ((rc = ox_axis(x, "axis", axes[k], r, &a)) < 0)
                return rc;
            full[a] = pads[k];
            full[r + a] = pads[na + k];
        }
        memcpy(pads, full, (size_t)(2 * r) * sizeof *pads);
        n = 2 * r;
    }
    vq_attr a[3] = {VQ_ATTR_IS("pads", pads, n < 0 ? 0 : n), VQ_ATTR_S("mode", mode),
                    VQ_ATTR_F("value", value)};
    const char *o = ox_out0(x);
    return ox_emit(x, "pad", &v, 1, &o, 1, a, 3, NULL);
}

/* DepthToSpace and SpaceToDepth: a reshape, a transpose and a reshape,
 * with N, C, H, W known at import (blocksize b; DCR or CRD mode, which
 * SpaceToDepth does not have: DCR). The row's type says which: "to_space"
 * or "to_depth". */
static int t_space_depth(struct ox *x)
{
    bool to_space = !strcmp(ox_type(x), "to_space");
    struct ox_val *v = ox_input(x, 0), *a, *t;
    int64_t b = ox_int(x, "blocksize");
    const char *mode = to_space ? ox_str(x, "mode") : "DCR";
    int rc;
    if (v->meta.ndim != 4)
        return ox_fail(x, VQ_EINVAL, "the input has rank %d, not 4", v->meta.ndim);
    int64_t n = v->meta.shape[0], c = v->meta.shape[1], h = v->meta.shape[2], w = v->meta.shape[3];
    if (n < 0 || c < 0 || h < 0 || w < 0)
        return ox_fail(x, VQ_ENOSYS, "the input's shape is not known at import");
    /* a bound that keeps b * b and the dims times b within int64 */
    if (b <= 0 || b > (1 << 20))
        return ox_fail(x, VQ_EINVAL, "blocksize %lld is not in [1, 2^20]", (long long)b);
    int64_t hb, wb, cbb;
    if (__builtin_mul_overflow(h, b, &hb) || __builtin_mul_overflow(w, b, &wb) ||
        __builtin_mul_overflow(c, b * b, &cbb))
        return ox_fail(x, VQ_EINVAL, "blocksize %lld times the input's dims overflows",
                       (long long)b);
    bool crd = !strcmp(mode, "CRD");
    if (!crd && strcmp(mode, "DCR"))
        return ox_fail(x, VQ_EINVAL, "mode \"%s\" is not DCR or CRD", mode);
    int64_t s6[6], perm[6], out[4];
    if (to_space) {
        if (c % (b * b))
            return ox_fail(x, VQ_EINVAL, "%lld channels are not a multiple of %lld", (long long)c,
                           (long long)(b * b));
        int64_t cc = c / (b * b);
        if (crd) {
            memcpy(s6, (int64_t[]){n, cc, b, b, h, w}, sizeof s6);
            memcpy(perm, (int64_t[]){0, 1, 4, 2, 5, 3}, sizeof perm);
        } else {
            memcpy(s6, (int64_t[]){n, b, b, cc, h, w}, sizeof s6);
            memcpy(perm, (int64_t[]){0, 3, 4, 1, 5, 2}, sizeof perm);
        }
        memcpy(out, (int64_t[]){n, cc, hb, wb}, sizeof out);
    } else {
        if (h % b || w % b)
            return ox_fail(x, VQ_EINVAL, "%lld x %lld is not a multiple of the blocksize %lld",
                           (long long)h, (long long)w, (long long)b);
        memcpy(s6, (int64_t[]){n, c, h / b, b, w / b, b}, sizeof s6);
        memcpy(perm, (int64_t[]){0, 3, 5, 1, 2, 4}, sizeof perm);
        memcpy(out, (int64_t[]){n, cbb, h / b, w / b}, sizeof out);
    }
    vq_attr pa = VQ_ATTR_IS("perm", perm, 6);
    if ((rc = ox_reshape(x, v, s6, 6, NULL, &a)) < 0 ||
        (rc = ox_emit(x, "transpose", &a, 1, NULL, 1, &pa, 1, &t)) < 0)
        return rc;
    return ox_reshape(x, t, out, 4, ox_out0(x), NULL);
}

static int t_constant(struct ox *x)
{
    int rc;
    const Onnx__NodeProto *n = x->node;
    if (n->n_attribute != 1)
        return ox_fail(x, VQ_EINVAL, "Constant takes exactly one attribute, not %zu",
                       n->n_attribute);
    const Onnx__AttributeProto *a = n->attribute[0];
    const char *an = a->name ? a->name : "";
    vq_tensor *t = NULL;
    if (!strcmp(an, "value") && a->t) {
        char what[300];
        snprintf(what, sizeof what, "the value of Constant \"%s\"", ox_out0(x));
        rc = vq__onnx_tensor(a->t, x->dir, what, &t);
    } else if (!strcmp(an, "value_float")) {
        rc = vq_tensor_from(&t, VQ_F32, 0, NULL, &a->f);
    } else if (!strcmp(an, "value_int")) {
        rc = vq_tensor_from(&t, VQ_I64, 0, NULL, &a->i);
    } else if (!strcmp(an, "value_floats")) {
        int64_t len = (int64_t)a->n_floats;
        rc = vq_tensor_from(&t, VQ_F32, 1, &len, a->floats);
    } else if (!strcmp(an, "value_ints")) {
        int64_t len = (int64_t)a->n_ints;
        rc = vq_tensor_from(&t, VQ_I64, 1, &len, a->ints);
    } else {
        return ox_fail(x, VQ_ENOSYS, "a constant given as %s is not supported", an);
    }
    return rc < 0 ? ox_fail(x, rc, "%s", vq_errmsg()) : ox_const(x, ox_out0(x), t, NULL);
}

static int t_shape(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int r = v->meta.ndim, rc;
    int64_t start = ox_int(x, "start"), end = ox_given(x, "end") ? ox_int(x, "end") : r;
    start = start < 0 ? (start + r < 0 ? 0 : start + r) : (start > r ? r : start);
    end = end < 0 ? (end + r < 0 ? 0 : end + r) : (end > r ? r : end);
    int64_t len = end > start ? end - start : 0;
    bool known = true;
    for (int64_t i = start; i < start + len; i++)
        known &= v->meta.shape[i] >= 0;
    if (!known) {
        /* a dim the feed gives: the shape op computes it at run time, the
         * entries the model fixes stay known here (part.c) */
        struct ox_val *res;
        vq_attr a[2] = {VQ_ATTR_I("start", start), VQ_ATTR_I("end", end)};
        const char *o = ox_out0(x);
        if ((rc = ox_emit(x, "shape", &v, 1, &o, 1, a, 2, &res)) < 0)
            return rc;
        for (int64_t i = 0; i < len; i++)
            if ((res->pv[i] = v->meta.shape[start + i]) >= 0)
                res->pmask |= 1u << i;
        return 0;
    }
    vq_tensor *t;
    if ((rc = vq_tensor_from(&t, VQ_I64, 1, &len, v->meta.shape + start)) < 0)
        return rc;
    return ox_const(x, ox_out0(x), t, NULL);
}

static int t_size(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t n = vq__numel(v->meta.ndim, v->meta.shape);
    if (n < 0)
        return ox_fail(x, VQ_ENOSYS, "the size of \"%s\" is known only at run time", v->name);
    vq_tensor *t;
    int rc = vq_tensor_from(&t, VQ_I64, 0, NULL, &n);
    return rc < 0 ? rc : ox_const(x, ox_out0(x), t, NULL);
}

static int t_constant_of_shape(struct ox *x)
{
    int64_t shape[OX_MAXI];
    int n, rc = 0;
    struct ox_val *sv = ox_input(x, 0);
    bool run = sv && !ox_known(x, sv);
    if (!run)
        rc = ox_const_ints(x, 0, "shape", shape, OX_MAXI, &n);
    if (!run && (rc = shape_given(x, rc, n)) < 0)
        return rc;
    vq_dtype dt = VQ_F32;
    double value = 0;
    const Onnx__TensorProto *vt = ox_tensor(x, "value");
    if (vt) {
        vq_tensor *t;
        if ((rc = vq__onnx_tensor(vt, x->dir, "the value of ConstantOfShape", &t)) < 0)
            return rc;
        dt = t->dtype;
        if (t->numel != 1)
            rc = ox_fail(x, VQ_EINVAL, "value has %lld elements, not 1", (long long)t->numel);
        else
            value = ox_first_value(t);
        vq_tensor_release(t);
        if (rc)
            return rc;
    }
    vq_attr at[3] = {VQ_ATTR_S("dtype", vq_dtype_name(dt)), VQ_ATTR_F("value", value),
                     VQ_ATTR_IS("shape", shape, n)};
    const char *o = ox_out0(x);
    if (!run)
        return ox_emit(x, "fill_constant", NULL, 0, &o, 1, at, 3, NULL);
    /* the shape computed at run time: the fill reads it then */
    return shape_from_run(x, "fill_constant", NULL, sv, true, at, 2);
}

/* EyeLike: a known matrix of the input's 2-D shape, ones on diagonal k,
 * of dtype (the input's by default). */
static int t_eye_like(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t k = ox_int(x, "k"), dtype = ox_given(x, "dtype") ? ox_int(x, "dtype") : -1;
    int rc;
    vq_dtype dt = v->meta.dtype;
    if (dtype >= 0 && !vq__onnx_dtype((int32_t)dtype, &dt))
        return ox_fail(x, VQ_ENOSYS, "dtype %lld is not one of varq's", (long long)dtype);
    if (v->meta.ndim != 2)
        return ox_fail(x, VQ_EINVAL, "the input has rank %d, not 2", v->meta.ndim);
    int64_t n = v->meta.shape[0], m = v->meta.shape[1];
    if (n < 0 || m < 0)
        return ox_fail(x, VQ_ENOSYS, "the input's shape is not known at import");
    vq_tensor *t;
    if ((rc = ox_tensor_new(x, &t, dt, 2, (int64_t[]){n, m})) < 0)
        return rc;
    memset(vq_tensor_data(t), 0, (size_t)(n * m) * vq_dtype_size(dt));
    for (int64_t i = 0; i < n; i++) {
        int64_t j; /* k is the model's: any int64 */
        if (__builtin_add_overflow(i, k, &j) || j < 0 || j >= m)
            continue;
        char *at = (char *)vq_tensor_data(t) + (size_t)(i * m + j) * vq_dtype_size(dt);
        vq__elem_set(dt, at, 0, 1);
    }
    return ox_const(x, ox_out0(x), t, NULL);
}

/* Range(start, limit, delta): the three scalars must be known at import,
 * and so is the result, numpy's arange: max(ceil((limit - start) / delta),
 * 0) elements start + i * delta (computed in double for floats, exactly
 * for integers). */
static int t_range(struct ox *x)
{
    static const char *const names[3] = {"start", "limit", "delta"};
    const vq_tensor *t[3];
    int rc = 0;
    struct ox_val *in[3] = {ox_input(x, 0), ox_input(x, 1), ox_input(x, 2)};
    if (!ox_known(x, in[0]) || !ox_known(x, in[1]) || !ox_known(x, in[2])) {
        /* bounds computed at run time (a sequence length): the range op,
         * whose length is known when it runs */
        const char *o = ox_out0(x);
        return ox_emit(x, "range", in, 3, &o, 1, NULL, 0, NULL);
    }
    for (int i = 0; i < 3 && rc == 0; i++) {
        struct ox_val *v = ox_input(x, i);
        if (!ox_known(x, v))
            rc = ox_fail(x, VQ_ENOSYS,
                         "input %d (%s) \"%s\" must be known when the model is imported "
                         "(Range's length is its output's shape)",
                         i, names[i], v->name);
        else if (v->konst->numel != 1)
            rc = ox_fail(x, VQ_EINVAL, "input %d (%s) has %lld elements, not 1", i, names[i],
                         (long long)v->konst->numel);
        else if (i > 0 && v->konst->dtype != t[0]->dtype)
            rc = ox_fail(x, VQ_EINVAL, "input %d (%s) is %s, start is %s", i, names[i],
                         vq_dtype_name(v->konst->dtype), vq_dtype_name(t[0]->dtype));
        else
            t[i] = v->konst;
    }
    if (rc)
        return rc;
    vq_dtype dt = t[0]->dtype;
    if (dt == VQ_BOOL)
        return ox_fail(x, VQ_EINVAL, "the inputs are bool; Range takes numbers");
    double start = ox_first_value(t[0]), limit = ox_first_value(t[1]), delta = ox_first_value(t[2]);
    int64_t s64 = 0, d64 = 0;
    if (!ox_is_float(dt)) {
        s64 = dt == VQ_I64 ? *(const int64_t *)t[0]->data : *(const int32_t *)t[0]->data;
        d64 = dt == VQ_I64 ? *(const int64_t *)t[2]->data : *(const int32_t *)t[2]->data;
    }
    if (delta == 0 || !isfinite(delta) || !isfinite(start) || !isfinite(limit))
        return ox_fail(x, VQ_EINVAL, "Range(%g, %g, %g): delta must be nonzero and all finite",
                       start, limit, delta);
    double len = ceil((limit - start) / delta);
    if (!ox_is_float(dt)) {
        /* exactly, in unsigned arithmetic: a double rounds int64 bounds,
         * and limit - start may not fit an int64 */
        int64_t l64 = dt == VQ_I64 ? *(const int64_t *)t[1]->data : *(const int32_t *)t[1]->data;
        bool up = d64 > 0;
        uint64_t span = up ? (l64 > s64 ? (uint64_t)l64 - (uint64_t)s64 : 0)
                           : (s64 > l64 ? (uint64_t)s64 - (uint64_t)l64 : 0);
        uint64_t mag = up ? (uint64_t)d64 : 0 - (uint64_t)d64;
        len = span ? (double)((span - 1) / mag + 1) : 0;
    }
    if (len > (double)VQ_ONNX_MADE_MAX_ELEMS)
        return ox_fail(x, VQ_ENOSYS,
                       "Range(%g, %g, %g) has %g elements, more than VQ_ONNX_MADE_MAX_ELEMS "
                       "(Range is computed when the model is imported)",
                       start, limit, delta, len);
    int64_t n = len > 0 ? (int64_t)len : 0;
    vq_tensor *out;
    if ((rc = ox_tensor_new(x, &out, dt, 1, &n)) < 0)
        return rc;
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case VQ_F32: ((float *)out->data)[i] = (float)(start + (double)i * delta); break;
        case VQ_F64: ((double *)out->data)[i] = start + (double)i * delta; break;
        /* every value lies between start and limit, but i * delta may
         * not fit: modulo 2^64, which lands on the value */
        case VQ_I32: ((int32_t *)out->data)[i] = (int32_t)(s64 + i * d64); break;
        default:
            ((int64_t *)out->data)[i] = (int64_t)((uint64_t)s64 + (uint64_t)i * (uint64_t)d64);
            break;
        }
    }
    return ox_const(x, ox_out0(x), out, NULL);
}

/* Trilu of v whose last two dims are known only at run time (a causal
 * mask of the sequence length): the mask is computed then, from the rows'
 * and columns' numbers, range(0, n) as [n, 1] and range(0, m) as [1, m]:
 * keep where col - row >= k (upper) or <= k (lower). */
static int trilu_run(struct ox *x, struct ox_val *v, bool upper, int64_t k)
{
    int r = v->meta.ndim, rc = 0;
    const char *tmp = NULL;
    struct ox_val *zero, *one, *idx[2], *kv, *diff, *mask, *zv;
    if (k > ((int64_t)1 << 53) || k < -((int64_t)1 << 53)) /* a diagonal past any dim */
        k = k > 0 ? ((int64_t)1 << 53) : -((int64_t)1 << 53);
    if ((rc = ox_scalar(x, VQ_I64, 0, &zero)) < 0 || (rc = ox_scalar(x, VQ_I64, 1, &one)) < 0 ||
        (rc = ox_scalar(x, VQ_I64, (double)k, &kv)) < 0)
        return rc;
    for (int j = 0; j < 2 && rc == 0; j++) {
        struct ox_val *len, *seq;
        vq_attr a[2] = {VQ_ATTR_I("start", r - 2 + j), VQ_ATTR_I("end", r - 1 + j)};
        int64_t none = 0, to[2] = {j ? 1 : -1, j ? -1 : 1};
        if ((rc = ox_emit(x, "shape", &v, 1, &tmp, 1, a, 2, &len)) < 0 ||
            (rc = ox_reshape(x, len, &none, 0, NULL, &len)) < 0 ||
            (rc = ox_emit(x, "range", (struct ox_val *[]){zero, len, one}, 3, &tmp, 1, NULL, 0,
                          &seq)) < 0)
            break;
        rc = ox_reshape(x, seq, to, 2, NULL, &idx[j]);
    }
    if (rc == 0)
        rc = ox_emit(x, "sub", (struct ox_val *[]){idx[1], idx[0]}, 2, &tmp, 1, NULL, 0, &diff);
    if (rc == 0)
        rc = ox_emit(x, upper ? "greater_equal" : "less_equal", (struct ox_val *[]){diff, kv}, 2,
                     &tmp, 1, NULL, 0, &mask);
    if (rc == 0)
        rc = ox_scalar(x, v->meta.dtype, 0, &zv);
    return rc < 0 ? rc : ox_select(x, mask, v, zv, ox_out0(x), NULL);
}

/* Trilu: X where a known mask of its last two dims holds, else 0; the
 * mask keeps column j of row i when j - i >= k (upper) or j - i <= k
 * (lower). Those two dims and k (an input, 0 when absent) must be known
 * at import. */
static int t_trilu(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *mask, *zero;
    int64_t upper = ox_int(x, "upper"), k = 0;
    int nk;
    int rc = ox_const_ints(x, 1, "k", &k, 1, &nk);
    if (rc)
        return rc;
    if (nk == 0)
        return ox_fail(x, VQ_EINVAL, "k has no element");
    if (nk < 0)
        k = 0;
    int r = v->meta.ndim;
    if (r < 2)
        return ox_fail(x, VQ_EINVAL, "the input has rank %d; Trilu needs at least 2", r);
    int64_t n = v->meta.shape[r - 2], m = v->meta.shape[r - 1];
    if (n < 0 || m < 0)
        return trilu_run(x, v, upper, k);
    vq_tensor *t;
    if ((rc = ox_tensor_new(x, &t, VQ_BOOL, 2, (int64_t[]){n, m})) < 0)
        return rc;
    unsigned char *b = vq_tensor_data(t);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < m; j++) /* j - i is small; k may be any int64 */
            b[i * m + j] = upper ? j - i >= k : j - i <= k;
    if ((rc = ox_const(x, NULL, t, &mask)) < 0 || (rc = ox_scalar(x, v->meta.dtype, 0, &zero)) < 0)
        return rc;
    return ox_select(x, mask, v, zero, ox_out0(x), NULL);
}

/* ---- the rows ---- */

const struct ox_op ox_op_Reshape =
    OX_ROW(t_reshape, NULL, 1, 2, true,
           OX_ATTRS(OX_INTS("shape", OX_MAXI, .until = 5), OX_INT("allowzero", 0)));
const struct ox_op ox_op_Flatten = OX_ROW(t_flatten, NULL, 1, 1, true, OX_ATTRS(OX_INT("axis", 1)));
const struct ox_op ox_op_Transpose =
    OX_ROW(t_transpose, NULL, 1, 1, true, OX_ATTRS(OX_INTS("perm", OX_MAXI)));
/* the axis: required since opset 4; 1 before */
const struct ox_op ox_op_Concat =
    OX_ROW(t_concat, NULL, 1, OX_ANY, true, OX_ATTRS(OX_INT("axis", 1, .changed = 4, .i2 = 0)));
const struct ox_op ox_op_Squeeze =
    OX_ROW(t_squeeze, NULL, 1, 2, true, OX_ATTRS(OX_INTS("axes", OX_MAXI, .until = 13)));
const struct ox_op ox_op_Unsqueeze =
    OX_ROW(t_unsqueeze, NULL, 1, 2, true, OX_ATTRS(OX_INTS("axes", OX_MAXI, .until = 13)));
const struct ox_op ox_op_Split =
    OX_ROW(t_split, NULL, 1, 2, false,
           OX_ATTRS(OX_INT("axis", 0), OX_INTS("split", OX_MAXI, .until = 13)));
/* shape or repeats absent: the translation says so */
const struct ox_op ox_op_Expand = OX_ROW(t_shaped, "expand", 1, 2, true, NULL);
const struct ox_op ox_op_Tile = OX_ROW(t_shaped, "tile", 1, 2, true, NULL);
/* pads and value: attributes before opset 11 (pads named paddings in 1),
 * inputs since */
const struct ox_op ox_op_Pad =
    OX_ROW(t_pad, NULL, 1, 4, true,
           OX_ATTRS(OX_STR("mode", "constant", 16), OX_INTS("paddings", OX_MAXI, .until = 2),
                    OX_INTS("pads", OX_MAXI, .since = 2, .until = 11),
                    OX_FLOAT("value", 0, .until = 11)));
const struct ox_op ox_op_DepthToSpace =
    OX_ROW(t_space_depth, "to_space", 1, 1, true,
           OX_ATTRS(OX_INT("blocksize", 0), OX_STR("mode", "DCR", 8)));
const struct ox_op ox_op_SpaceToDepth =
    OX_ROW(t_space_depth, "to_depth", 1, 1, true, OX_ATTRS(OX_INT("blocksize", 0)));
/* Constant reads its one attribute itself: which one it is, is the
 * value's type */
const struct ox_op ox_op_Constant = OX_ROW(t_constant, NULL, 0, 0, true, NULL);
/* end: the rank when absent */
const struct ox_op ox_op_Shape =
    OX_ROW(t_shape, NULL, 1, 1, true, OX_ATTRS(OX_INT("start", 0), OX_INT("end", 0)));
const struct ox_op ox_op_Size = OX_ROW(t_size, NULL, 1, 1, true, NULL);
const struct ox_op ox_op_ConstantOfShape =
    OX_ROW(t_constant_of_shape, NULL, 0, 1, true, OX_ATTRS(OX_TENSOR("value")));
/* dtype: the input's when absent */
const struct ox_op ox_op_EyeLike =
    OX_ROW(t_eye_like, NULL, 1, 1, true, OX_ATTRS(OX_INT("k", 0), OX_INT("dtype", 0)));
const struct ox_op ox_op_Range = OX_ROW(t_range, NULL, 3, 3, true, NULL);
const struct ox_op ox_op_Trilu = OX_ROW(t_trilu, NULL, 1, 2, true, OX_ATTRS(OX_INT("upper", 1)));
