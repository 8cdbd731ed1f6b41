/* ONNX's indexing ops: Slice (step 1 as varq's slice, other steps of
 * known dims as gathers, and a window that moves with a Loop's iteration
 * as a gather of moving indices), Gather, GatherElements, GatherND,
 * Scatter, ScatterElements, ScatterND, OneHot, CumSum, ReverseSequence,
 * ArgMax and ArgMin. */
#include "onnx_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Slice(X, starts, ends[, axes[, steps]]) of one axis whose starts and
 * ends are known only at run time but move together (ox_val.sym): ends =
 * starts + len with len known, and starts never negative (a Loop's
 * iteration number plus a known offset of at least 0), step 1. Then the
 * result has len elements along the axis at any iteration: a gather of
 * indices starts + [0, len). (Where ONNX would clamp a window that runs
 * past the dim, giving fewer, the gather fails at run time naming the
 * index: varq's shapes are static.) *done is false when this is not such
 * a Slice. */
static int slice_moving(struct ox *x, struct ox_val *v, bool *done)
{
    struct ox_val *s = ox_input(x, 1), *e = ox_input(x, 2), *a = ox_input(x, 3);
    struct ox_val *st = ox_input(x, 4);
    *done = false;
    if (!s || !e || !s->sym || s->sym != e->sym || ox_known(x, s) || ox_known(x, e))
        return 0;
    int rc;
    int64_t axis = 0, step = 1, len = e->sym_off - s->sym_off;
    if ((a && !ox_known_int1(a, &axis)) || (st && !ox_known_int1(st, &step)) || step != 1 ||
        s->sym_off < 0 || len < 0)
        return 0;
    if (axis < 0)
        axis += v->meta.ndim;
    if (axis < 0 || axis >= v->meta.ndim)
        return ox_fail(x, VQ_EINVAL, "axis %lld of a rank-%d input", (long long)axis, v->meta.ndim);
    vq_tensor *t;
    if ((rc = ox_tensor_new(x, &t, s->meta.dtype, 1, &len)) < 0)
        return rc;
    for (int64_t j = 0; j < len; j++) {
        if (t->dtype == VQ_I64)
            ((int64_t *)t->data)[j] = j;
        else
            ((int32_t *)t->data)[j] = (int32_t)j;
    }
    struct ox_val *ar, *idx;
    const char *o = ox_out0(x);
    vq_attr at = VQ_ATTR_I("axis", axis);
    if ((rc = ox_const(x, NULL, t, &ar)) < 0 ||
        (rc = ox_emit(x, "add", (struct ox_val *[]){s, ar}, 2, NULL, 1, NULL, 0, &idx)) < 0 ||
        (rc = ox_emit(x, "gather", (struct ox_val *[]){v, idx}, 2, &o, 1, &at, 1, NULL)) < 0)
        return rc;
    *done = true;
    return 0;
}

/* Whether a Slice node (opset 10 on, its axes and steps known) has a step
 * other than 1 along a dim known only at run time: that takes the
 * run-time path too. */
static bool slice_steps_unknown_dim(struct ox *x, const struct ox_val *v)
{
    int64_t axes[OX_MAXI], steps[OX_MAXI];
    int na = -1, nst = -1;
    struct ox_val *av = ox_input(x, 3), *pv = ox_input(x, 4);
    if (!pv || !ox_known(x, pv) || (av && !ox_known(x, av)) ||
        ox_const_ints(x, 4, "steps", steps, OX_MAXI, &nst) < 0 ||
        (av && ox_const_ints(x, 3, "axes", axes, OX_MAXI, &na) < 0))
        return false;
    for (int i = 0; i < nst; i++) {
        int64_t ax = na >= 0 && i < na ? axes[i] : i;
        ax = ax < 0 ? ax + v->meta.ndim : ax;
        if (steps[i] != 1 && ax >= 0 && ax < v->meta.ndim && v->meta.shape[ax] < 0)
            return true;
    }
    return false;
}

/* A scalar i64 value: entry i of the 1-D value v (a Slice's starts or
 * ends), or a known one. */
static int slice_entry(struct ox *x, struct ox_val *v, int i, struct ox_val **out)
{
    struct ox_val *in[2] = {v, NULL};
    int rc = ox_cast(x, &in[0], VQ_I64);
    if (rc == 0)
        rc = ox_scalar(x, VQ_I64, i, &in[1]);
    const char *tmp = NULL;
    vq_attr a = VQ_ATTR_I("axis", 0);
    return rc < 0 ? rc : ox_emit(x, "gather", in, 2, &tmp, 1, &a, 1, out);
}

/* b = op(a, c) for scalars, into a temporary. */
static int scalar_op(struct ox *x, const char *op, struct ox_val *a, struct ox_val *c,
                     struct ox_val **out)
{
    const char *tmp = NULL;
    return ox_emit(x, op, (struct ox_val *[]){a, c}, 2, &tmp, 1, NULL, 0, out);
}

/* ONNX's bound p of a slice along a dim of size dim (a scalar value):
 * p + dim when negative, then clamped to [0, dim] going up (step > 0),
 * [-1, dim - 1] going down. */
static int slice_bound(struct ox *x, struct ox_val *p, struct ox_val *dim, bool up,
                       struct ox_val **out)
{
    struct ox_val *zero, *neg, *shifted, *lo, *hi, *t;
    int rc = ox_scalar(x, VQ_I64, up ? 0 : -1, &lo);
    if (rc == 0)
        rc = ox_scalar(x, VQ_I64, 0, &zero);
    if (rc == 0)
        rc = scalar_op(x, "less", p, zero, &neg);
    if (rc == 0)
        rc = scalar_op(x, "add", p, dim, &shifted);
    if (rc == 0)
        rc = ox_select(x, neg, shifted, p, NULL, &t);
    struct ox_val *one;
    if (rc == 0 && up)
        hi = dim;
    else if (rc == 0 && (rc = ox_scalar(x, VQ_I64, 1, &one)) == 0)
        rc = scalar_op(x, "sub", dim, one, &hi);
    if (rc == 0)
        rc = scalar_op(x, "maximum", t, lo, &t);
    return rc < 0 ? rc : scalar_op(x, "minimum", t, hi, out);
}

/* Slice whose starts or ends are computed at run time (x[:, :seq]), or
 * with a step along a dim known only then: per axis, the bounds ONNX
 * clamps, computed by ops, and a gather of range(start, end, step) along
 * the axis. The axes and steps must be known at import. */
static int slice_run(struct ox *x, struct ox_val *v, struct ox_val *sv, struct ox_val *ev,
                     const int64_t *axes, const int64_t *steps, int n)
{
    struct ox_val *cur = v;
    const char *o = ox_out0(x), *tmp = NULL;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        int64_t ax = axes[i] < 0 ? axes[i] + v->meta.ndim : axes[i], st = steps ? steps[i] : 1;
        if (ax < 0 || ax >= v->meta.ndim)
            return ox_fail(x, VQ_EINVAL, "axis %lld of a rank-%d input", (long long)axes[i],
                           v->meta.ndim);
        if (st == 0)
            return ox_fail(x, VQ_EINVAL, "step 0 on axis %lld", (long long)axes[i]);
        struct ox_val *dim, *s, *e, *step, *idx;
        vq_attr a[2] = {VQ_ATTR_I("start", ax), VQ_ATTR_I("end", ax + 1)};
        int64_t scalar = 0;
        if ((rc = ox_emit(x, "shape", &cur, 1, &tmp, 1, a, 2, &dim)) < 0 ||
            (rc = ox_reshape(x, dim, &scalar, 0, NULL, &dim)) < 0 ||
            (rc = slice_entry(x, sv, i, &s)) < 0 || (rc = slice_entry(x, ev, i, &e)) < 0 ||
            (rc = slice_bound(x, s, dim, st > 0, &s)) < 0 ||
            (rc = slice_bound(x, e, dim, st > 0, &e)) < 0 ||
            (rc = ox_scalar(x, VQ_I64, (double)st, &step)) < 0)
            return rc;
        if (st != (int64_t)(double)st)
            return ox_fail(x, VQ_ENOSYS, "step %lld is not exact as a double", (long long)st);
        if ((rc = ox_emit(x, "range", (struct ox_val *[]){s, e, step}, 3, &tmp, 1, NULL, 0, &idx)) <
            0)
            return rc;
        vq_attr g = VQ_ATTR_I("axis", ax);
        rc = ox_emit(x, "gather", (struct ox_val *[]){cur, idx}, 2, i + 1 == n ? &o : &tmp, 1, &g,
                     1, &cur);
    }
    return rc;
}

static int t_slice(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t starts[OX_MAXI], ends[OX_MAXI], axes[OX_MAXI], steps[OX_MAXI];
    int ns, ne, na, nst = -1, rc = 0;
    if (x->opset < 10) {
        ox_ints_copy(x, "starts", starts, &ns);
        ox_ints_copy(x, "ends", ends, &ne);
        ox_ints_copy(x, "axes", axes, &na);
    } else {
        bool done;
        if ((rc = slice_moving(x, v, &done)) < 0 || done)
            return rc;
        struct ox_val *sv = ox_input(x, 1), *ev = ox_input(x, 2);
        if (sv && ev && (!ox_known(x, sv) || !ox_known(x, ev) || slice_steps_unknown_dim(x, v))) {
            /* bounds computed at run time: axes and steps must be known */
            int64_t len = sv->meta.ndim == 1 ? sv->meta.shape[0] : -1;
            if (len < 0 || len > OX_MAXI || ev->meta.ndim != 1 || ev->meta.shape[0] != len)
                return ox_fail(x, VQ_ENOSYS,
                               "starts and ends computed at run time must be 1-D "
                               "of one length known at import");
            if ((rc = ox_const_ints(x, 3, "axes", axes, OX_MAXI, &na)) < 0 ||
                (rc = ox_const_ints(x, 4, "steps", steps, OX_MAXI, &nst)) < 0)
                return rc;
            if ((na >= 0 && na != len) || (nst >= 0 && nst != len))
                return ox_fail(x, VQ_EINVAL, "starts, ends, axes and steps differ in length");
            for (int i = 0; na < 0 && i < len; i++)
                axes[i] = i;
            return slice_run(x, v, sv, ev, axes, nst < 0 ? NULL : steps, (int)len);
        }
        if ((rc = ox_const_ints(x, 1, "starts", starts, OX_MAXI, &ns)) == 0 &&
            (rc = ox_const_ints(x, 2, "ends", ends, OX_MAXI, &ne)) == 0 &&
            (rc = ox_const_ints(x, 3, "axes", axes, OX_MAXI, &na)) == 0)
            rc = ox_const_ints(x, 4, "steps", steps, OX_MAXI, &nst);
    }
    if (rc)
        return rc;
    if (ns < 0 || ne != ns || (na >= 0 && na != ns) || (nst >= 0 && nst != ns))
        return ox_fail(x, VQ_EINVAL, "starts, ends, axes and steps differ in length");
    if (na < 0)
        for (int i = 0; i < ns; i++)
            axes[i] = i;
    /* varq's slice takes step 1; the axes with another step (known dims
     * only) become gathers of the indices the step picks, computed here */
    int64_t s1[3][OX_MAXI];
    int n1 = 0, stepped[OX_MAXI], nstep = 0;
    for (int i = 0; i < ns; i++) {
        if (nst < 0 || steps[i] == 1) {
            s1[0][n1] = axes[i], s1[1][n1] = starts[i], s1[2][n1++] = ends[i];
            continue;
        }
        int64_t ax = axes[i] < 0 ? axes[i] + v->meta.ndim : axes[i];
        if (steps[i] == 0)
            return ox_fail(x, VQ_EINVAL, "step 0 on axis %lld", (long long)axes[i]);
        if (ax < 0 || ax >= v->meta.ndim)
            return ox_fail(x, VQ_EINVAL, "axis %lld of a rank-%d input", (long long)axes[i],
                           v->meta.ndim);
        if (v->meta.shape[ax] < 0)
            return ox_fail(x, VQ_ENOSYS,
                           "step %lld on axis %lld, whose size is known only at "
                           "run time (varq slices with step 1, and other steps "
                           "of known dims)",
                           (long long)steps[i], (long long)ax);
        stepped[nstep++] = i;
    }
    struct ox_val *cur = v;
    const char *o = ox_out0(x), *temp = NULL;
    if (n1 > 0 || nstep == 0) {
        vq_attr a[3] = {VQ_ATTR_IS("axes", s1[0], n1), VQ_ATTR_IS("starts", s1[1], n1),
                        VQ_ATTR_IS("ends", s1[2], n1)};
        if ((rc = ox_emit(x, "slice", &cur, 1, nstep ? &temp : &o, 1, a, 3, &cur)) < 0)
            return rc;
    }
    for (int k = 0; k < nstep; k++) {
        int i = stepped[k];
        int64_t ax = axes[i] < 0 ? axes[i] + v->meta.ndim : axes[i], dim = v->meta.shape[ax];
        int64_t st = steps[i], lo = starts[i] < 0 ? starts[i] + dim : starts[i];
        int64_t hi = ends[i] < 0 ? ends[i] + dim : ends[i];
        /* ONNX's clamps: [0, dim] going up, [-1, dim - 1] going down */
        int64_t top = st > 0 ? dim : dim - 1, bottom = st > 0 ? 0 : -1;
        lo = lo < bottom ? bottom : lo > top ? top : lo;
        hi = hi < bottom ? bottom : hi > top ? top : hi;
        /* the span is at most dim + 1, but the step is the model's: any
         * int64, INT64_MIN too, whose negation overflows; its magnitude
         * as unsigned, and ceil(span / |step|) without adding them */
        uint64_t span =
            st > 0 ? (hi > lo ? (uint64_t)(hi - lo) : 0) : (lo > hi ? (uint64_t)(lo - hi) : 0);
        uint64_t mag = st > 0 ? (uint64_t)st : 0 - (uint64_t)st;
        int64_t count = span ? (int64_t)((span - 1) / mag + 1) : 0;
        vq_tensor *idx;
        if ((rc = ox_tensor_new(x, &idx, VQ_I64, 1, &count)) < 0)
            return rc;
        for (int64_t j = 0; j < count; j++) /* count > 1 only when |st| < dim */
            ((int64_t *)idx->data)[j] = lo + j * st;
        struct ox_val *in[2] = {cur, NULL};
        if ((rc = ox_const(x, NULL, idx, &in[1])) < 0)
            return rc;
        vq_attr a = VQ_ATTR_I("axis", ax);
        if ((rc = ox_emit(x, "gather", in, 2, k + 1 == nstep ? &o : &temp, 1, &a, 1, &cur)) < 0)
            return rc;
    }
    return 0;
}

/* Gather and GatherElements: gather and gather_elements (the row's varq
 * op), the same inputs and axis. */
static int t_take_along(struct ox *x)
{
    struct ox_val *in[2] = {ox_input(x, 0), ox_input(x, 1)};
    vq_attr a = VQ_ATTR_I("axis", ox_int(x, "axis"));
    const char *o = ox_out0(x);
    return ox_emit(x, ox_type(x), in, 2, &o, 1, &a, 1, NULL);
}

/* GatherND: gather_nd, with batch_dims (opset 12 on; 0 before). */
static int t_gather_nd(struct ox *x)
{
    struct ox_val *in[2] = {ox_input(x, 0), ox_input(x, 1)};
    vq_attr a = VQ_ATTR_I("batch_dims", ox_int(x, "batch_dims"));
    const char *o = ox_out0(x);
    return ox_emit(x, "gather_nd", in, 2, &o, 1, &a, 1, NULL);
}

/* Scatter (opsets 9 and 10: ScatterElements without reduction),
 * ScatterElements and ScatterND: the row's varq op on the same inputs,
 * with the axis (not ScatterND's) and the reduction (from opset 16, none
 * before; varq takes max and min, opset 18's, in any opset). Duplicate
 * indices, which ONNX leaves undefined with reduction none, resolve as
 * varq's ops say: the last one in Indices' order wins. */
static int t_scatter(struct ox *x)
{
    struct ox_val *in[3] = {ox_input(x, 0), ox_input(x, 1), ox_input(x, 2)};
    const struct ox_op *row = x->args->op;
    vq_attr a[2];
    int n = 0;
    if (row != &ox_op_ScatterND)
        a[n++] = VQ_ATTR_I("axis", ox_int(x, "axis"));
    if (row != &ox_op_Scatter)
        a[n++] = VQ_ATTR_S("reduction", ox_str(x, "reduction"));
    const char *o = ox_out0(x);
    return ox_emit(x, ox_type(x), in, 3, &o, 1, a, n, NULL);
}

/* OneHot: values[1] where the position along the new axis equals the
 * index (negative ones count from depth), values[0] elsewhere; depth must
 * be known at import. */
static int t_one_hot(struct ox *x)
{
    struct ox_val *idx, *vals, *pos, *i64, *neg, *wrapped, *iu, *hot, *on, *off, *dv;
    int64_t depth;
    int rc;
    struct ox_val *dval = ox_input(x, 1);
    idx = ox_input(x, 0);
    vals = ox_input(x, 2);
    if (!dval || !ox_known(x, dval) || dval->konst->numel != 1)
        return ox_fail(x, VQ_ENOSYS, "depth is not one value known at import");
    /* the positions 0 .. depth-1 are made here: a bounded count, and a
     * double checked before it becomes an integer (NaN or 1e30 would not
     * convert) */
    double dd = ox_first_value(dval->konst);
    if (!(dd >= 1 && dd <= (double)(1 << 30)))
        return ox_fail(x, VQ_EINVAL, "depth %g is not in [1, 2^30]", dd);
    depth = (int64_t)dd;
    if (vals->meta.ndim != 1 || vals->meta.shape[0] != 2)
        return ox_fail(x, VQ_EINVAL, "values is not a 2-element vector");
    int r = idx->meta.ndim + 1, a = 0;
    if ((rc = ox_axis(x, "axis", ox_int(x, "axis"), r, &a)) < 0)
        return rc;
    int64_t pshape[VQ_MAX_DIMS], want[VQ_MAX_DIMS];
    int from[VQ_MAX_DIMS];
    for (int i = 0, j = 0; i < r; i++) {
        pshape[i] = i == a ? depth : 1;
        want[i] = i == a ? 1 : idx->meta.shape[j];
        from[i] = i == a ? -1 : j++;
    }
    vq_tensor *t;
    if ((rc = ox_tensor_new(x, &t, VQ_I64, r, pshape)) < 0)
        return rc;
    for (int64_t i = 0; i < depth; i++)
        ((int64_t *)vq_tensor_data(t))[i] = i;
    struct ox_val *zero;
    vq_attr g = VQ_ATTR_I("axis", 0);
    const char *o = ox_out0(x);
    i64 = idx;
    if ((rc = ox_const(x, NULL, t, &pos)) < 0 || (rc = ox_cast(x, &i64, VQ_I64)) < 0 ||
        (rc = ox_scalar(x, VQ_I64, 0, &zero)) < 0 ||
        (rc = ox_scalar(x, VQ_I64, (double)depth, &dv)) < 0 ||
        (rc = ox_emit(x, "less", (struct ox_val *[]){i64, zero}, 2, NULL, 1, NULL, 0, &neg)) < 0 ||
        (rc = ox_emit(x, "add", (struct ox_val *[]){i64, dv}, 2, NULL, 1, NULL, 0, &wrapped)) < 0 ||
        (rc = ox_select(x, neg, wrapped, i64, NULL, &i64)) < 0 ||
        (rc = ox_reshape_known(x, i64, want, from, r, NULL, &iu)) < 0 ||
        (rc = ox_emit(x, "equal", (struct ox_val *[]){iu, pos}, 2, NULL, 1, NULL, 0, &hot)) < 0)
        return rc;
    struct ox_val *k0, *k1;
    if ((rc = ox_scalar(x, VQ_I64, 0, &k0)) < 0 || (rc = ox_scalar(x, VQ_I64, 1, &k1)) < 0 ||
        (rc = ox_emit(x, "gather", (struct ox_val *[]){vals, k0}, 2, NULL, 1, &g, 1, &off)) < 0 ||
        (rc = ox_emit(x, "gather", (struct ox_val *[]){vals, k1}, 2, NULL, 1, &g, 1, &on)) < 0)
        return rc;
    return ox_select(x, hot, on, off, o, NULL);
}

/* CumSum(X, axis; exclusive, reverse): cumsum, the axis known at import. */
static int t_cumsum(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    int64_t axis;
    int n;
    int rc = ox_const_ints(x, 1, "axis", &axis, 1, &n);
    if (rc == 0 && n != 1)
        rc = ox_fail(x, VQ_EINVAL, "input 1 (axis) is %s; CumSum needs one axis",
                     n < 0 ? "missing" : "empty");
    if (rc)
        return rc;
    vq_attr at[3] = {VQ_ATTR_I("axis", axis), VQ_ATTR_B("exclusive", ox_int(x, "exclusive") != 0),
                     VQ_ATTR_B("reverse", ox_int(x, "reverse") != 0)};
    const char *o = ox_out0(x);
    return ox_emit(x, "cumsum", &v, 1, &o, 1, at, 3, NULL);
}

/* ReverseSequence(input, sequence_lens; batch_axis, time_axis): varq's
 * reverse_sequence, which checks the axes and lengths. */
static int t_reverse_sequence(struct ox *x)
{
    struct ox_val *in[2] = {ox_input(x, 0), ox_input(x, 1)};
    vq_attr at[2] = {VQ_ATTR_I("batch_axis", ox_int(x, "batch_axis")),
                     VQ_ATTR_I("time_axis", ox_int(x, "time_axis"))};
    const char *o = ox_out0(x);
    return ox_emit(x, "reverse_sequence", in, 2, &o, 1, at, 2, NULL);
}

/* ArgMax, ArgMin: the row's varq op. */
static int t_arg_extreme(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    vq_attr a[3] = {VQ_ATTR_I("axis", ox_int(x, "axis")),
                    VQ_ATTR_B("keepdim", ox_int(x, "keepdims") != 0),
                    VQ_ATTR_B("select_last_index", ox_int(x, "select_last_index") != 0)};
    const char *o = ox_out0(x);
    return ox_emit(x, ox_type(x), &v, 1, &o, 1, a, 3, NULL);
}

/* ---- the rows ---- */

/* starts, ends and axes: attributes before opset 10, inputs since */
const struct ox_op ox_op_Slice =
    OX_ROW(t_slice, NULL, 1, 5, true,
           OX_ATTRS(OX_INTS("starts", OX_MAXI, .until = 10), OX_INTS("ends", OX_MAXI, .until = 10),
                    OX_INTS("axes", OX_MAXI, .until = 10)));
const struct ox_op ox_op_Gather =
    OX_ROW(t_take_along, "gather", 2, 2, true, OX_ATTRS(OX_INT("axis", 0)));
const struct ox_op ox_op_GatherElements =
    OX_ROW(t_take_along, "gather_elements", 2, 2, true, OX_ATTRS(OX_INT("axis", 0)));
const struct ox_op ox_op_GatherND =
    OX_ROW(t_gather_nd, "gather_nd", 2, 2, true, OX_ATTRS(OX_INT("batch_dims", 0, .since = 12)));
const struct ox_op ox_op_Scatter =
    OX_ROW(t_scatter, "scatter_elements", 3, 3, true, OX_ATTRS(OX_INT("axis", 0)));
const struct ox_op ox_op_ScatterElements =
    OX_ROW(t_scatter, "scatter_elements", 3, 3, true,
           OX_ATTRS(OX_INT("axis", 0), OX_STR("reduction", "none", 8, .since = 16)));
const struct ox_op ox_op_ScatterND = OX_ROW(t_scatter, "scatter_nd", 3, 3, true,
                                            OX_ATTRS(OX_STR("reduction", "none", 8, .since = 16)));
const struct ox_op ox_op_OneHot = OX_ROW(t_one_hot, NULL, 3, 3, true, OX_ATTRS(OX_INT("axis", -1)));
/* the axis absent: the translation says so */
const struct ox_op ox_op_CumSum =
    OX_ROW(t_cumsum, NULL, 1, 2, true, OX_ATTRS(OX_INT("exclusive", 0), OX_INT("reverse", 0)));
const struct ox_op ox_op_ReverseSequence =
    OX_ROW(t_reverse_sequence, NULL, 2, 2, true,
           OX_ATTRS(OX_INT("batch_axis", 1), OX_INT("time_axis", 0)));
#define ARG_ATTRS OX_INT("axis", 0), OX_INT("keepdims", 1), OX_INT("select_last_index", 0)
const struct ox_op ox_op_ArgMax = OX_ROW(t_arg_extreme, "argmax", 1, 1, true, OX_ATTRS(ARG_ATTRS));
const struct ox_op ox_op_ArgMin = OX_ROW(t_arg_extreme, "argmin", 1, 1, true, OX_ATTRS(ARG_ATTRS));
