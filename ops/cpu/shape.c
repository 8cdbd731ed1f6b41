/* Ops that move elements without computing on them: transpose, reshape,
 * concat, slice and cast, and their gradient ops. Every output is a fresh
 * contiguous row-major copy (varq tensors have no views).
 *
 * transpose, concat, slice and their gradients are all one strided block
 * copy (block_copy below): a box of elements read with one set of strides
 * and written with another. Dims of size 1 are dropped and dims that stay
 * contiguous on both sides are merged first, so a concat along axis k
 * becomes rows of memcpy, and so does a slice that keeps whole trailing
 * dims; only a transpose that moves the last dim copies element by
 * element.
 *
 * cast converts between all dtypes. Float to integer truncates toward
 * zero and saturates: values past the integer's range give its min or max
 * (negative values give 0 for the unsigned types), and NaN gives 0 (C
 * leaves these conversions undefined; numpy and ONNX leave them
 * unspecified). Integer to narrower integer wraps (keeps the low bits),
 * and so does between signed and unsigned of one width. Anything to bool
 * is x != 0 (so NaN is true). Float to a narrower float (f64 to f32, f16
 * or bf16; f32 to f16 or bf16) and an integer to a float round to nearest
 * even once from the exact value, and overflow to +-inf as IEEE 754
 * defines; NaN stays NaN (quiet). The first five dtypes among themselves
 * take the direct loops below; any pair with another dtype takes
 * vq__cast_any. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"
#include "../shape_shared.h"
#include "../math/half.h"

#include <math.h>
#include <string.h>

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};
static const char *const x_dout_in[] = {"X", "dOut"};
static const char *const dx_out[] = {"dX"};

/* Row-major strides, in elements, of a contiguous tensor of this shape. */
static void contiguous_strides(int ndim, const int64_t *shape, int64_t *stride)
{
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= shape[d];
    }
}

/* ---- strided block copy ---- */

/* One row of n elements of size E (a constant, so the memcpy is a move). */
#define GATHER_ROW(E)                                                        \
    do {                                                                     \
        for (int64_t i = 0; i < n; i++)                                      \
            memcpy(d + (i * ds) * (E), s + (i * ss) * (E), (E));             \
    } while (0)

/* Copies the block b from src to dst (both pointing at the block's first
 * element); elements are esize bytes. */
static void block_copy(vq__box b, void *dst, const void *src, size_t esize)
{
    for (int d = 0; d < b.ndim; d++)
        if (b.shape[d] == 0)
            return;
    vq__box_simplify(&b);
    if (b.ndim == 0) {
        memcpy(dst, src, esize);
        return;
    }
    int last = b.ndim - 1;
    int64_t n = b.shape[last], ss = b.src[last], ds = b.dst[last];
    int64_t idx[VQ_MAX_DIMS] = {0}, so = 0, dof = 0;
    for (;;) {
        const char *s = (const char *)src + so * (int64_t)esize;
        char *d = (char *)dst + dof * (int64_t)esize;
        if (ss == 1 && ds == 1)
            memcpy(d, s, (size_t)n * esize);
        else if (esize == 8)
            GATHER_ROW(8);
        else if (esize == 4)
            GATHER_ROW(4);
        else
            GATHER_ROW(1);
        int k = last - 1;
        for (; k >= 0; k--) {
            so += b.src[k];
            dof += b.dst[k];
            if (++idx[k] < b.shape[k])
                break;
            so -= b.src[k] * b.shape[k];
            dof -= b.dst[k] * b.shape[k];
            idx[k] = 0;
        }
        if (k < 0)
            return;
    }
}

/* ---- transpose ---- */

static const vq__attr_spec transpose_attrs[] = {
    {"perm", VQ_ATTR_INTS, true, NULL},
};

static int transpose_infer(vq__infer *c)
{
    const vq__meta *x = &c->in[0];
    const vq_attr *perm = vq__attr_find(c, "perm");
    vq__transpose_params *p = c->params;
    if (perm->n != x->ndim)
        return vq__attr_fail(c, "perm", "has %d entries for X's %d dims", perm->n, x->ndim);
    unsigned seen = 0;
    for (int i = 0; i < perm->n; i++) {
        int64_t a = perm->ints[i];
        if (a < 0 || a >= x->ndim || (seen & (1u << a)))
            return vq__attr_fail(c, "perm", "is not a permutation of 0..%d (entry %d is %lld)",
                                 x->ndim - 1, i, (long long)a);
        seen |= 1u << a;
        p->perm[i] = (int)a;
    }
    c->out[0].dtype = x->dtype;
    c->out[0].ndim = x->ndim;
    for (int i = 0; i < x->ndim; i++)
        c->out[0].shape[i] = x->shape[p->perm[i]];
    return 0;
}

static int transpose_kernel(const vq__kcall *k)
{
    const vq__transpose_params *p = k->params;
    vq_tensor *x = k->in[0], *out = k->out[0];
    int64_t xs[VQ_MAX_DIMS];
    contiguous_strides(x->ndim, x->shape, xs);
    vq__box b = {.ndim = out->ndim};
    contiguous_strides(out->ndim, out->shape, b.dst);
    for (int i = 0; i < out->ndim; i++) {
        b.shape[i] = out->shape[i];
        b.src[i] = xs[p->perm[i]];
    }
    block_copy(b, out->data, x->data, vq_dtype_size(x->dtype));
    return 0;
}

/* Reads the perm attribute of a forward transpose (which its infer checked). */
static int transpose_grad(const vq__grad *g)
{
    if (!g->din[0])
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output Out");
    const vq_attr *perm = NULL;
    for (int i = 0; i < g->nattrs; i++)
        if (!strcmp(g->attrs[i].name, "perm"))
            perm = &g->attrs[i];
    if (!perm || perm->n < 0 || perm->n > VQ_MAX_DIMS)
        return vq__op_fail(g->def, "attribute perm is missing or too long");
    int64_t inv[VQ_MAX_DIMS];
    unsigned seen = 0;
    for (int i = 0; i < perm->n; i++) {
        int64_t a = perm->ints[i];
        if (a < 0 || a >= perm->n || (seen & (1u << a)))
            return vq__op_fail(g->def, "attribute perm is not a permutation");
        seen |= 1u << a;
        inv[a] = i;
    }
    vq_attr at = VQ_ATTR_IS("perm", inv, perm->n);
    return vq__emit(g, "transpose", &g->dout[0], 1, &g->din[0], 1, &at, 1);
}

/* ---- reshape ---- */

static const char *const reshape_in[] = {"X", "Shape"};

static const vq__attr_spec reshape_attrs[] = {
    {"shape", VQ_ATTR_INTS, false, "none"},
    {"allowzero", VQ_ATTR_INT, false, "0"},
};

/* Out's shape from the attribute shape, or from the value of input Shape
 * (ONNX's Reshape, whose shape a model computes): 0 copies X's dim at
 * that index (with allowzero, ONNX's: 0 is an empty dim), one -1 takes
 * whatever count is left. Unknown X dims give -1 where Out's dim depends
 * on them; an unknown Shape value (preparation) unknown dims. */
static int reshape_infer(vq__infer *c)
{
    const vq__meta *x = &c->in[0];
    int64_t ints[VQ_MAX_DIMS];
    int n;
    vq__meta *out = &c->out[0];
    char sx[100];
    int rc = vq__ints_arg(c, 1, "shape", ints, VQ_MAX_DIMS, &n);
    if (rc < 0)
        return rc;
    out->dtype = x->dtype;
    if (rc == 1) { /* the value is known when the op runs */
        if (n < 0)
            return vq__in_fail(c, 1, "has an unknown length: Out's rank would be unknown");
        out->ndim = n;
        for (int i = 0; i < n; i++)
            out->shape[i] = -1;
        return 0;
    }
    out->ndim = n;
    int infer_at = -1;
    for (int i = 0; i < n; i++) {
        int64_t d = ints[i];
        if (d == -1) {
            if (infer_at >= 0)
                return vq__attr_fail(c, "shape", "has more than one -1 (entries %d and %d)",
                                     infer_at, i);
            infer_at = i;
            out->shape[i] = 1; /* placeholder while counting the others */
        } else if (d == 0 && vq__attr_int(c, "allowzero", 0)) {
            out->shape[i] = 0;
        } else if (d == 0) {
            if (i >= x->ndim)
                return vq__attr_fail(c, "shape",
                                     "entry %d is 0 (copy X's dim), but X has %d dims", i,
                                     x->ndim);
            out->shape[i] = x->shape[i];
        } else if (d < 0) {
            return vq__attr_fail(c, "shape", "entry %d is %lld", i, (long long)d);
        } else {
            out->shape[i] = d;
        }
    }
    int64_t have = vq__numel(x->ndim, x->shape), rest = vq__numel(out->ndim, out->shape);
    if (infer_at >= 0) {
        if (have < 0 || rest < 0) {
            out->shape[infer_at] = -1;
            return 0;
        }
        if (rest == 0 || rest == INT64_MAX || have % rest != 0)
            return vq__attr_fail(c, "shape", "cannot take X's %lld elements (X is %s)",
                                 (long long)have, vq__shape_str(sx, sizeof sx, x->ndim, x->shape));
        out->shape[infer_at] = have / rest;
        return 0;
    }
    if (have >= 0 && rest >= 0 && have != rest) {
        char so[100];
        return vq__attr_fail(c, "shape", "%s has a different element count from X's %s",
                             vq__shape_str(so, sizeof so, out->ndim, out->shape),
                             vq__shape_str(sx, sizeof sx, x->ndim, x->shape));
    }
    return 0;
}

/* reshape and reshape_grad: the same bytes under another shape (the
 * definition's code is the slot of the source: X, or reshape_grad's
 * dOut). */
static int copy_kernel(const vq__kcall *k)
{
    vq_tensor *x = k->in[k->def->code], *out = k->out[0];
    if (out->nbytes)
        memcpy(out->data, x->data, out->nbytes);
    return 0;
}

static int reshape_grad(const vq__grad *g)
{
    if (!g->din[0])
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output Out");
    const char *in[2] = {g->in[0], g->dout[0]};
    return vq__emit(g, "reshape_grad", in, 2, &g->din[0], 1, NULL, 0);
}

/* reshape_grad(X, dOut) -> dX: dOut's elements in X's shape. */
static int reshape_grad_infer(vq__infer *c)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0)
        return rc;
    int64_t nx = vq__numel(c->in[0].ndim, c->in[0].shape);
    int64_t ng = vq__numel(c->in[1].ndim, c->in[1].shape);
    if (nx >= 0 && ng >= 0 && nx != ng) {
        char a[100], b[100];
        return vq__in_fail(c, 1, "shape %s has a different element count from X's %s",
                           vq__shape_str(a, sizeof a, c->in[1].ndim, c->in[1].shape),
                           vq__shape_str(b, sizeof b, c->in[0].ndim, c->in[0].shape));
    }
    c->out[0] = c->in[0];
    return 0;
}

/* ---- concat ---- */

static const vq__attr_spec concat_attrs[] = {
    {"axis", VQ_ATTR_INT, false, "0"},
};

/* Checks inputs first..nin-1 (the tensors to concatenate) and fills the
 * concatenated shape and p->axis. Each dim other than the axis takes the
 * first known value among the inputs. */
static int concat_plan(const vq__infer *c, int first, vq__concat_params *p, vq__meta *out)
{
    const vq__meta *x0 = &c->in[first];
    if (x0->ndim == 0)
        return vq__in_fail(c, first, "is a scalar (rank 0); concat needs at least one dim");
    int rc = vq__axis(c, "axis", vq__attr_int(c, "axis", 0), x0->ndim, &p->axis);
    if (rc < 0)
        return rc;
    *out = *x0;
    out->shape[p->axis] = 0;
    for (int i = first; i < c->nin; i++) {
        const vq__meta *x = &c->in[i];
        if ((rc = vq__check_same_dtype(c, first, i)) < 0 || (rc = vq__check_rank(c, i, x0->ndim)) < 0)
            return rc;
        for (int d = 0; d < x->ndim; d++) {
            if (d == p->axis) {
                if (out->shape[d] >= 0)
                    out->shape[d] = x->shape[d] < 0 ? -1 : out->shape[d] + x->shape[d];
                continue;
            }
            if (!vq__dim_match(out->shape[d], x->shape[d])) {
                char a[100], b[100];
                return vq__in_fail(c, i, "shape %s differs from %s's %s in dim %d (axis is %d)",
                                   vq__shape_str(a, sizeof a, x->ndim, x->shape),
                                   vq__op_in_slot(c->def, first),
                                   vq__shape_str(b, sizeof b, x0->ndim, x0->shape), d, p->axis);
            }
            if (out->shape[d] < 0)
                out->shape[d] = x->shape[d];
        }
    }
    return 0;
}

static int concat_infer(vq__infer *c)
{
    return concat_plan(c, 0, c->params, &c->out[0]);
}

/* The block of piece's elements inside the concatenation whole (both
 * contiguous), starting at element *offset of whole. */
static void concat_block(const vq_tensor *whole, const vq_tensor *piece, int axis, int64_t at,
                         vq__box *b, int64_t *offset)
{
    b->ndim = piece->ndim;
    memcpy(b->shape, piece->shape, sizeof b->shape);
    contiguous_strides(whole->ndim, whole->shape, b->dst);
    contiguous_strides(piece->ndim, piece->shape, b->src);
    *offset = at * b->dst[axis];
}

static int concat_kernel(const vq__kcall *k)
{
    const vq__concat_params *p = k->params;
    vq_tensor *out = k->out[0];
    size_t es = vq_dtype_size(out->dtype);
    int64_t at = 0, offset;
    for (int i = 0; i < k->nin; i++) {
        if (k->in[i]->numel == 0)
            continue;
        vq__box b;
        concat_block(out, k->in[i], p->axis, at, &b, &offset);
        block_copy(b, (char *)out->data + offset * (int64_t)es, k->in[i]->data, es);
        at += k->in[i]->shape[p->axis];
    }
    return 0;
}

static int concat_grad(const vq__grad *g)
{
    const char *in[VQ__MAX_SLOTS + 1];
    if (g->nin > VQ__MAX_SLOTS)
        return vq__op_fail(g->def, "%d inputs: too many for concat_grad", g->nin);
    int64_t axis = 0;
    for (int i = 0; i < g->nattrs; i++)
        if (!strcmp(g->attrs[i].name, "axis"))
            axis = g->attrs[i].i;
    for (int i = 0; i < g->nin; i++) {
        if (!g->din[i])
            continue;
        if (!g->dout[0])
            return vq__op_fail(g->def, "no gradient flows into output Out");
        in[0] = g->dout[0];
        for (int j = 0; j < g->nin; j++)
            in[1 + j] = g->in[j];
        vq_attr at[2] = {VQ_ATTR_I("axis", axis), VQ_ATTR_I("index", i)};
        int rc = vq__emit(g, "concat_grad", in, 1 + g->nin, &g->din[i], 1, at, 2);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* concat_grad(dOut, X...; axis, index) -> dX: the piece of dOut that came
 * from input `index`. */
static const char *const concat_grad_in[] = {"dOut", "X"};

static const vq__attr_spec concat_grad_attrs[] = {
    {"axis", VQ_ATTR_INT, false, "0"},
    {"index", VQ_ATTR_INT, true, NULL},
};

static int concat_grad_infer(vq__infer *c)
{
    vq__concat_params *p = c->params;
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0)
        return rc;
    vq__meta whole;
    if ((rc = concat_plan(c, 1, p, &whole)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0)
        return rc;
    int64_t index = vq__attr_int(c, "index", 0);
    if (index < 0 || index >= c->nin - 1)
        return vq__attr_fail(c, "index", "is %lld, outside [0, %d) for %d inputs X",
                             (long long)index, c->nin - 1, c->nin - 1);
    p->index = (int)index;
    const vq__meta *g = &c->in[0];
    bool same = g->ndim == whole.ndim;
    for (int i = 0; same && i < g->ndim; i++)
        same = vq__dim_match(g->shape[i], whole.shape[i]);
    if (!same) {
        char a[100], b[100];
        return vq__in_fail(c, 0, "shape %s is not the concatenated shape %s",
                           vq__shape_str(a, sizeof a, g->ndim, g->shape),
                           vq__shape_str(b, sizeof b, whole.ndim, whole.shape));
    }
    c->out[0] = c->in[1 + p->index];
    return 0;
}

static int concat_grad_kernel(const vq__kcall *k)
{
    const vq__concat_params *p = k->params;
    vq_tensor *g = k->in[0], *dx = k->out[0];
    size_t es = vq_dtype_size(dx->dtype);
    int64_t at = 0, offset;
    if (dx->numel == 0)
        return 0;
    for (int i = 0; i < p->index; i++)
        at += k->in[1 + i]->shape[p->axis];
    vq__box b;
    concat_block(g, dx, p->axis, at, &b, &offset);
    /* The same block read the other way: from the whole into the piece. */
    int64_t tmp[VQ_MAX_DIMS];
    memcpy(tmp, b.src, sizeof tmp);
    memcpy(b.src, b.dst, sizeof tmp);
    memcpy(b.dst, tmp, sizeof tmp);
    block_copy(b, dx->data, (const char *)g->data + offset * (int64_t)es, es);
    return 0;
}

/* ---- slice ---- */

static const vq__attr_spec slice_attrs[] = {
    {"axes", VQ_ATTR_INTS, true, NULL},
    {"starts", VQ_ATTR_INTS, true, NULL},
    {"ends", VQ_ATTR_INTS, true, NULL},
};

/* numpy's x[start:end] along each listed axis of X (input 0): negative
 * bounds count from the end, both are clamped to [0, dim], and end <= start
 * is empty. An unknown dim gives an unknown result dim. */
static int slice_plan(const vq__infer *c, vq__slice_params *p, vq__meta *out)
{
    const vq__meta *x = &c->in[0];
    const vq_attr *axes = vq__attr_find(c, "axes"), *starts = vq__attr_find(c, "starts"),
                  *ends = vq__attr_find(c, "ends");
    if (starts->n != axes->n)
        return vq__attr_fail(c, "starts", "has %d entries, axes has %d", starts->n, axes->n);
    if (ends->n != axes->n)
        return vq__attr_fail(c, "ends", "has %d entries, axes has %d", ends->n, axes->n);
    if (axes->n > 0 && x->ndim == 0)
        return vq__attr_fail(c, "axes", "X is a scalar (rank 0): it has no axis to slice");
    *out = *x;
    unsigned seen = 0;
    for (int i = 0; i < axes->n; i++) {
        int a, rc = vq__axis(c, "axes", axes->ints[i], x->ndim, &a);
        if (rc < 0)
            return rc;
        if (seen & (1u << a))
            return vq__attr_fail(c, "axes", "axis %lld repeats axis %d", (long long)axes->ints[i],
                                 a);
        seen |= 1u << a;
        int64_t dim = x->shape[a];
        if (dim < 0) {
            out->shape[a] = -1;
            continue;
        }
        int64_t s = starts->ints[i], e = ends->ints[i];
        s = s < 0 ? (s + dim < 0 ? 0 : s + dim) : (s > dim ? dim : s);
        e = e < 0 ? (e + dim < 0 ? 0 : e + dim) : (e > dim ? dim : e);
        p->start[a] = s;
        out->shape[a] = e > s ? e - s : 0;
    }
    return 0;
}

static int slice_infer(vq__infer *c)
{
    return slice_plan(c, c->params, &c->out[0]);
}

/* The block of the slice inside X (contiguous), starting at element
 * *offset of X; dst strides are the slice's own, contiguous. */
static void slice_block(const vq__slice_params *p, const vq_tensor *x, const vq_tensor *part,
                        vq__box *b, int64_t *offset)
{
    b->ndim = x->ndim;
    memcpy(b->shape, part->shape, sizeof b->shape);
    contiguous_strides(x->ndim, x->shape, b->src);
    contiguous_strides(part->ndim, part->shape, b->dst);
    *offset = 0;
    for (int d = 0; d < x->ndim; d++)
        *offset += p->start[d] * b->src[d];
}

static int slice_kernel(const vq__kcall *k)
{
    vq_tensor *x = k->in[0], *out = k->out[0];
    size_t es = vq_dtype_size(x->dtype);
    vq__box b;
    int64_t offset;
    slice_block(k->params, x, out, &b, &offset);
    if (out->numel > 0)
        block_copy(b, out->data, (const char *)x->data + offset * (int64_t)es, es);
    return 0;
}

static int slice_grad(const vq__grad *g)
{
    if (!g->din[0])
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output Out");
    const char *in[2] = {g->in[0], g->dout[0]};
    /* slice_grad has exactly slice's attributes. */
    return vq__emit(g, "slice_grad", in, 2, &g->din[0], 1, g->attrs, g->nattrs);
}

/* slice_grad(X, dOut; axes, starts, ends) -> dX: zeros in X's shape with
 * dOut at the slice. */
static int slice_grad_infer(vq__infer *c)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0)
        return rc;
    vq__meta want;
    if ((rc = slice_plan(c, c->params, &want)) < 0)
        return rc;
    if ((rc = vq__check_shape_is(c, 1, &want, "the slice's shape")) < 0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

static int slice_grad_kernel(const vq__kcall *k)
{
    vq_tensor *g = k->in[1], *dx = k->out[0];
    size_t es = vq_dtype_size(dx->dtype);
    memset(dx->data, 0, dx->nbytes);
    vq__box b;
    int64_t offset;
    slice_block(k->params, dx, g, &b, &offset);
    int64_t tmp[VQ_MAX_DIMS];
    memcpy(tmp, b.src, sizeof tmp);
    memcpy(b.src, b.dst, sizeof tmp);
    memcpy(b.dst, tmp, sizeof tmp);
    if (g->numel > 0)
        block_copy(b, (char *)dx->data + offset * (int64_t)es, g->data, es);
    return 0;
}

/* ---- cast ---- */

static const vq__attr_spec cast_attrs[] = {
    {"dtype", VQ_ATTR_STRING, true, NULL},
};

static int cast_infer(vq__infer *c)
{
    vq__cast_params *p = c->params;
    int rc = vq__attr_dtype(c, "dtype", VQ_F32, &p->to);
    if (rc < 0)
        return rc;
    c->out[0] = c->in[0];
    c->out[0].dtype = p->to;
    return 0;
}

/* One loop per (source, destination) pair; CONV(v) converts one value. */
#define CAST_LOOP(S, D, CONV)                                               \
    do {                                                                    \
        const S *src = x->data;                                             \
        D *dst = out->data;                                                 \
        for (int64_t i = 0; i < n; i++)                                     \
            dst[i] = CONV(src[i]);                                          \
    } while (0)

#define AS_F32(v) ((float)(v))
#define AS_F64(v) ((double)(v))
/* Integer to narrower integer wraps: the value is reduced modulo 2^32 in
 * uint32_t and then converted, which gcc and clang define as wrapping. */
#define WRAP_I32(v) ((int32_t)(uint32_t)(uint64_t)(v))
#define AS_I64(v) ((int64_t)(v))
#define AS_BOOL(v) ((uint8_t)((v) != 0))

#define CAST_FROM(S)                                                               \
    switch (p->to) {                                                               \
    case VQ_F32: CAST_LOOP(S, float, AS_F32); break;                               \
    case VQ_F64: CAST_LOOP(S, double, AS_F64); break;                              \
    case VQ_I32: CAST_LOOP(S, int32_t, S##_TO_I32); break;                         \
    case VQ_I64: CAST_LOOP(S, int64_t, S##_TO_I64); break;                         \
    default: CAST_LOOP(S, uint8_t, AS_BOOL); break;                                \
    }

#define float_TO_I32(v) vq__to_i32((double)(v))
#define float_TO_I64(v) vq__to_i64((double)(v))
#define double_TO_I32(v) vq__to_i32(v)
#define double_TO_I64(v) vq__to_i64(v)
#define int32_t_TO_I32(v) (v)
#define int32_t_TO_I64(v) AS_I64(v)
#define int64_t_TO_I32(v) WRAP_I32(v)
#define int64_t_TO_I64(v) (v)
#define uint8_t_TO_I32(v) ((int32_t)(v))
#define uint8_t_TO_I64(v) AS_I64(v)

/* A cast that involves a dtype beyond the first five: in chunks, each read
 * into the widest type of its kind (a double, or a 64-bit integer pattern)
 * and written from there (shape_shared.h's vq__cast_*: one rounding from
 * the exact value), with the switches over dtypes outside the loops; f32
 * to and from f16 and bf16 in bulk by the CPU's conversion instructions
 * (ops/math/half.h), which round exactly as vq__cast_* do. */
#define CAST_CHUNK 256

#define CAST_CASE(DT, STMT) \
    case DT: STMT; break;
/* STMT for each dtype D as a compile-time constant, so that the inlined
 * switch in each vq__cast_* folds away */
#define CAST_EACH(dt, STMT)       \
    switch (dt) {                 \
        CAST_CASE(VQ_F32, {       \
            enum { D = VQ_F32 };  \
            STMT;                 \
        })                        \
        CAST_CASE(VQ_F64, {       \
            enum { D = VQ_F64 };  \
            STMT;                 \
        })                        \
        CAST_CASE(VQ_I32, {       \
            enum { D = VQ_I32 };  \
            STMT;                 \
        })                        \
        CAST_CASE(VQ_I64, {       \
            enum { D = VQ_I64 };  \
            STMT;                 \
        })                        \
        CAST_CASE(VQ_BOOL, {      \
            enum { D = VQ_BOOL }; \
            STMT;                 \
        })                        \
        CAST_CASE(VQ_F16, {       \
            enum { D = VQ_F16 };  \
            STMT;                 \
        })                        \
        CAST_CASE(VQ_BF16, {      \
            enum { D = VQ_BF16 }; \
            STMT;                 \
        })                        \
        CAST_CASE(VQ_I8, {        \
            enum { D = VQ_I8 };   \
            STMT;                 \
        })                        \
        CAST_CASE(VQ_U8, {        \
            enum { D = VQ_U8 };   \
            STMT;                 \
        })                        \
        CAST_CASE(VQ_I16, {       \
            enum { D = VQ_I16 };  \
            STMT;                 \
        })                        \
        CAST_CASE(VQ_U16, {       \
            enum { D = VQ_U16 };  \
            STMT;                 \
        })                        \
        CAST_CASE(VQ_U32, {       \
            enum { D = VQ_U32 };  \
            STMT;                 \
        })                        \
        CAST_CASE(VQ_U64, {       \
            enum { D = VQ_U64 };  \
            STMT;                 \
        })                        \
    }

void vq__cast_any(vq_dtype sdt, const void *src, vq_dtype ddt, void *dst, int64_t n)
{
    const struct vq__half_conv *h = vq__half();
    if (sdt == VQ_F32 && (ddt == VQ_F16 || ddt == VQ_BF16)) {
        (ddt == VQ_F16 ? h->f32_to_f16 : h->f32_to_bf16)(src, dst, n);
        return;
    }
    if ((sdt == VQ_F16 || sdt == VQ_BF16) && ddt == VQ_F32) {
        (sdt == VQ_F16 ? h->f16_to_f32 : h->bf16_to_f32)(src, dst, n);
        return;
    }
    size_t ss = vq_dtype_size(sdt), ds = vq_dtype_size(ddt);
    bool from_float = vq__cast_is_float(sdt), sgn = vq__cast_is_signed(sdt);
    for (int64_t at = 0; at < n; at += CAST_CHUNK) {
        int64_t m = n - at < CAST_CHUNK ? n - at : CAST_CHUNK;
        const char *s = (const char *)src + (size_t)at * ss;
        char *d = (char *)dst + (size_t)at * ds;
        if (from_float) {
            double w[CAST_CHUNK];
            CAST_EACH(sdt, for (int64_t j = 0; j < m; j++) w[j] = vq__cast_load_float(D, s, j))
            CAST_EACH(ddt, for (int64_t j = 0; j < m; j++) vq__cast_store_float(D, d, j, w[j]))
        } else {
            uint64_t w[CAST_CHUNK];
            CAST_EACH(sdt, for (int64_t j = 0; j < m; j++) w[j] = vq__cast_load_int(D, s, j))
            CAST_EACH(ddt, for (int64_t j = 0; j < m; j++) vq__cast_store_int(D, d, j, w[j], sgn))
        }
    }
}

static int cast_kernel(const vq__kcall *k)
{
    const vq__cast_params *p = k->params;
    vq_tensor *x = k->in[0], *out = k->out[0];
    int64_t n = x->numel;
    if (x->dtype == out->dtype) {
        if (x->nbytes)
            memcpy(out->data, x->data, x->nbytes);
        return 0;
    }
    if (x->dtype > VQ_BOOL || out->dtype > VQ_BOOL) {
        vq__cast_any(x->dtype, x->data, out->dtype, out->data, n);
        return 0;
    }
    switch (x->dtype) {
    case VQ_F32: CAST_FROM(float) break;
    case VQ_F64: CAST_FROM(double) break;
    case VQ_I32: CAST_FROM(int32_t) break;
    case VQ_I64: CAST_FROM(int64_t) break;
    default: CAST_FROM(uint8_t) break;
    }
    return 0;
}

static bool is_float(vq_dtype dt)
{
    return vq__cast_is_float(dt);
}

static int cast_grad(const vq__grad *g)
{
    if (!g->din[0])
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output Out");
    const char *name = NULL;
    for (int i = 0; i < g->nattrs; i++)
        if (!strcmp(g->attrs[i].name, "dtype"))
            name = g->attrs[i].s;
    vq_dtype to;
    if (!name || vq_dtype_parse(name, &to) < 0)
        return vq__op_fail(g->def, "attribute dtype is missing or unknown");
    if (!is_float(to))
        return vq__op_fail(g->def, "cast to %s has no gradient (integer and bool casts have "
                                   "no gradient)", vq_dtype_name(to));
    const char *in[2] = {g->in[0], g->dout[0]};
    return vq__emit(g, "cast_grad", in, 2, &g->din[0], 1, NULL, 0);
}

/* cast_grad(X, dOut) -> dX: dOut converted back to X's dtype. */
static int cast_grad_infer(vq__infer *c)
{
    for (int i = 0; i < 2; i++)
        if (!is_float(c->in[i].dtype))
            return vq__in_fail(c, i, "dtype %s: integer and bool casts have no gradient",
                               vq_dtype_name(c->in[i].dtype));
    int rc = vq__check_same_shape(c, 0, 1);
    if (rc < 0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

static int cast_grad_kernel(const vq__kcall *k)
{
    vq_tensor *g = k->in[1], *dx = k->out[0];
    int64_t n = g->numel;
    if (g->dtype == dx->dtype) {
        if (g->nbytes)
            memcpy(dx->data, g->data, g->nbytes);
    } else if (g->dtype > VQ_BOOL || dx->dtype > VQ_BOOL) {
        vq__cast_any(g->dtype, g->data, dx->dtype, dx->data, n);
    } else if (dx->dtype == VQ_F32) {
        const double *s = g->data;
        float *d = dx->data;
        for (int64_t i = 0; i < n; i++)
            d[i] = (float)s[i];
    } else {
        const float *s = g->data;
        double *d = dx->data;
        for (int64_t i = 0; i < n; i++)
            d[i] = s[i];
    }
    return 0;
}

#define UNARY_DEF(name, at, nat, ps, inf, kern, gr, cuda_)                                      \
    {                                                                                           \
        .type = name, .in_slots = x_in, .nin_slots = 1, .out_slots = out_slot, .nout_slots = 1, \
        .attrs = at, .nattrs = nat, .params_size = ps, .infer = inf, .kernel = {kern},          \
        .cuda = VQ__CUDA_OP(cuda_), .grad = gr                                                  \
    }

#define GRAD_DEF(name, at, nat, ps, inf, kern, cuda_)                                              \
    {                                                                                              \
        .type = name, .in_slots = x_dout_in, .nin_slots = 2, .out_slots = dx_out, .nout_slots = 1, \
        .attrs = at, .nattrs = nat, .params_size = ps, .infer = inf, .kernel = {kern},             \
        .cuda = VQ__CUDA_OP(cuda_)                                                                 \
    }

const vq__op_def vq__ops_shape[] = {
    UNARY_DEF("transpose", transpose_attrs, 1, sizeof(vq__transpose_params), transpose_infer,
              transpose_kernel, transpose_grad, VQ__CUDA_OP(vq__transpose_gpu)),
    {.type = "reshape",
     .in_slots = reshape_in,
     .nin_slots = 2,
     .out_slots = out_slot,
     .nout_slots = 1,
     .flags = VQ__OPTIONAL_IN,
     .value_in = 1u << 1,
     .attrs = reshape_attrs,
     .nattrs = 2,
     .infer = reshape_infer,
     .kernel = {copy_kernel},
     .cuda = VQ__CUDA_OP(vq__copy_gpu),
     .grad = reshape_grad},
    {.type = "reshape_grad",
     .in_slots = x_dout_in,
     .nin_slots = 2,
     .out_slots = dx_out,
     .nout_slots = 1,
     .code = 1,
     .infer = reshape_grad_infer,
     .kernel = {copy_kernel},
     .cuda = VQ__CUDA_OP(vq__copy_gpu)},
    {.type = "concat",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .flags = VQ__VARIADIC_IN,
     .attrs = concat_attrs,
     .nattrs = 1,
     .params_size = sizeof(vq__concat_params),
     .infer = concat_infer,
     .kernel = {concat_kernel},
     .cuda = VQ__CUDA_OP(vq__concat_gpu),
     .grad = concat_grad},
    {.type = "concat_grad",
     .in_slots = concat_grad_in,
     .nin_slots = 2,
     .out_slots = dx_out,
     .nout_slots = 1,
     .flags = VQ__VARIADIC_IN,
     .attrs = concat_grad_attrs,
     .nattrs = 2,
     .params_size = sizeof(vq__concat_params),
     .infer = concat_grad_infer,
     .kernel = {concat_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__concat_grad_gpu)},
    UNARY_DEF("slice", slice_attrs, 3, sizeof(vq__slice_params), slice_infer, slice_kernel,
              slice_grad, VQ__CUDA_OP(vq__slice_gpu)),
    GRAD_DEF("slice_grad", slice_attrs, 3, sizeof(vq__slice_params), slice_grad_infer,
             slice_grad_kernel, VQ__CUDA_OP(vq__slice_grad_gpu)),
    {.type = "cast",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .flags = VQ__EXT_DTYPES | VQ__CUDA_EXT_DTYPES, /* every dtype to every dtype */
     .attrs = cast_attrs,
     .nattrs = 1,
     .params_size = sizeof(vq__cast_params),
     .infer = cast_infer,
     .kernel = {cast_kernel},
     .cuda = VQ__CUDA_OP(vq__cast_gpu),
     .grad = cast_grad},
    {.type = "cast_grad",
     .in_slots = x_dout_in,
     .nin_slots = 2,
     .out_slots = dx_out,
     .nout_slots = 1,
     .flags = VQ__EXT_DTYPES | VQ__CUDA_EXT_DTYPES, /* the floats (cast_grad_infer) */
     .infer = cast_grad_infer,
     .kernel = {cast_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__cast_grad_gpu)},
    {0},
};
