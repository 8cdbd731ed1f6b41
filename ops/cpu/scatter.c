/* The scatter family: scatter_elements (ONNX's ScatterElements and
 * Scatter, torch's scatter and scatter_reduce), scatter_nd (ONNX's
 * ScatterND) and gather_nd (ONNX's GatherND), with their gradients, which
 * are these ops again and gather_elements (index.c). They move elements,
 * so with reduction none they take every dtype; the reductions take f32,
 * f64, i32 and i64. Indices are i32 or i64, a negative index counting
 * from the end of its dim.
 *
 * scatter_elements(X, Indices, Updates; axis, reduction) -> Out: Indices
 * and Updates share a shape of X's rank, no larger than X's off the axis.
 * Out is X, then each element of Updates, in Indices' order (row-major),
 * lands on Out's element at its own coordinates with the axis' replaced by
 * the index there: it replaces it (reduction "none"), or is added, or
 * multiplied, or kept when larger ("max") or smaller ("min"), with
 * reduce_max's NaN and signed-zero rules. Duplicate indices are allowed:
 * they combine in Indices' order, so with reduction none the last one
 * wins (ONNX leaves that case undefined; varq defines it on every device).
 *
 * scatter_nd(X, Indices, Updates; batch_dims, reduction) -> Out: Indices
 * is [batch..., n..., k]: each of its tuples of k entries addresses a
 * slice of X (X's dims past batch_dims + k; the batch dims, which Indices
 * shares with X, pick the batch). Updates is Indices' shape but the last
 * dim, then the slice's: Updates' slice t lands on the slice tuple t
 * addresses, element by element as in scatter_elements, the tuples in
 * Indices' order. ONNX's ScatterND is batch_dims 0; varq's batch_dims
 * makes it gather_nd's gradient.
 *
 * gather_nd(X, Indices; batch_dims) -> Out: Out is Indices' shape but the
 * last dim, then the slice's, and its slice t is X's slice that tuple t
 * addresses (ONNX's GatherND).
 *
 * An index outside [-dim, dim) fails the kernel before anything is
 * written, with a message naming the op, the index, its element of
 * Indices (the first bad one in Indices' order) and X's dim it indexes,
 * as gather's does; the CUDA kernels (ops/cuda/scatter.cu) name the same
 * element (device-side checks, ops/cuda/scatter_host.c).
 *
 * The CPU kernels and the CUDA kernels walk the updates in lanes
 * (ops/scatter_shared.h says why): Out's every element sees its updates
 * in Indices' order on both, so both give the same bits, sums and
 * products included, without atomics.
 *
 * Gradients (dOut flowing into Out), for reductions none and add (mul,
 * max and min have none; the maker says so):
 *  - scatter_elements: dX is dOut with the elements an update replaced
 *    zeroed (none: scatter_elements(dOut, Indices, zeros_like(Updates))),
 *    or dOut itself (add); dUpdates is gather_elements(dOut, Indices), as
 *    in torch, so with reduction none a duplicate that lost still gets the
 *    gradient of the element it was written to;
 *  - scatter_nd: the same with scatter_nd and gather_nd;
 *  - gather_nd: dX = scatter_nd(zeros_like(X), Indices, dOut; add). */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"
#include "../scatter_shared.h"

#include <stdio.h>
#include <string.h>

static const char *const scatter_in[] = {"X", "Indices", "Updates"};
static const char *const gather_in[] = {"X", "Indices"};
static const char *const out_slot[] = {"Out"};

#define INDEX_DTYPES ((1u << VQ_I32) | (1u << VQ_I64))

/* In the order of VQ__SCATTER_*. */
static const char *const reduction_names[] = {"none", "add", "mul", "max", "min"};

static const vq__attr_spec elements_attrs[] = {
    {"axis", VQ_ATTR_INT, false, "0"},
    {"reduction", VQ_ATTR_STRING, false, "none"},
};

static const vq__attr_spec scatter_nd_attrs[] = {
    {"batch_dims", VQ_ATTR_INT, false, "0"},
    {"reduction", VQ_ATTR_STRING, false, "none"},
};

static const vq__attr_spec gather_nd_attrs[] = {
    {"batch_dims", VQ_ATTR_INT, false, "0"},
};

/* The reduction attribute into p, and X's and Updates' dtypes against it:
 * any with none, f32, f64, i32 or i64 with the others. */
static int reduction_read(const vq__infer *c, vq__scatter_params *p)
{
    const vq_attr *r = vq__attr_find(c, "reduction");
    const char *name = r ? r->s : "none";
    p->reduction = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(name, reduction_names[i]))
            p->reduction = i;
    if (p->reduction < 0)
        return vq__attr_fail(c, "reduction", "\"%s\" is not none, add, mul, max or min", name);
    int rc = vq__check_dtype(c, 0, p->reduction == VQ__SCATTER_NONE ? VQ__ANY : VQ__NUMERIC);
    return rc < 0 ? rc : vq__check_same_dtype(c, 0, 2);
}

/* ---- checking indices (index.c's wording, which the CUDA checks share) ---- */

static int index_fail(const vq__kcall *k, int64_t v, int64_t j, int64_t dim, int axis)
{
    return vq__op_fail(k->def,
                       "index %lld at Indices element %lld is outside [-%lld, %lld) (X's dim %d)",
                       (long long)v, (long long)j, (long long)dim, (long long)dim, axis);
}

/* scatter_elements: every index against X's dim along the axis. */
static int elements_indices_check(const vq__kcall *k, const vq_tensor *idx, int64_t dim, int axis)
{
    bool is64 = idx->dtype == VQ_I64;
    for (int64_t j = 0; j < idx->numel; j++) {
        int64_t v = vq__index_at(idx->data, is64, j);
        if (v < -dim || v >= dim)
            return index_fail(k, v, j, dim, axis);
    }
    return 0;
}

/* scatter_nd, gather_nd: each tuple entry against the dim it indexes. */
static int nd_indices_check(const vq__kcall *k, const vq_tensor *idx, const vq__nd_geom *g)
{
    bool is64 = idx->dtype == VQ_I64;
    for (int64_t j = 0; j < idx->numel; j++) {
        int64_t v = vq__index_at(idx->data, is64, j), dim = g->dim[j % g->k];
        if (v < -dim || v >= dim)
            return index_fail(k, v, j, dim, g->batch_dims + (int)(j % g->k));
    }
    return 0;
}

/* ---- scatter_elements ---- */

static int elements_infer(vq__infer *c)
{
    const vq__meta *x = &c->in[0], *ix = &c->in[1];
    vq__scatter_params *p = c->params;
    int rc = reduction_read(c, p);
    if (rc < 0 || (rc = vq__check_dtype(c, 1, INDEX_DTYPES)) < 0)
        return rc;
    if (x->ndim == 0)
        return vq__in_fail(c, 0, "is a scalar (rank 0); scatter_elements needs at least one dim");
    if ((rc = vq__axis(c, "axis", vq__attr_int(c, "axis", 0), x->ndim, &p->axis)) < 0)
        return rc;
    if (ix->ndim != x->ndim)
        return vq__in_fail(c, 1, "has rank %d; X has %d, and scatter_elements wants the same",
                           ix->ndim, x->ndim);
    if ((rc = vq__check_same_shape(c, 1, 2)) < 0)
        return rc;
    for (int d = 0; d < x->ndim; d++)
        if (d != p->axis && ix->shape[d] >= 0 && x->shape[d] >= 0 && ix->shape[d] > x->shape[d])
            return vq__in_fail(c, 1, "has %lld in dim %d, more than X's %lld (axis is %d)",
                               (long long)ix->shape[d], d, (long long)x->shape[d], p->axis);
    c->out[0] = *x;
    return 0;
}

/* Each lane of Updates (scatter_shared.h) in turn, its elements in order;
 * FN combines (scatter_shared.h's vq__scatter_<dtype>). */
#define SCATTER_LANES(T, FN)                                                   \
    do {                                                                       \
        const T *u = upd->data;                                                \
        T *o = out->data;                                                      \
        int64_t us = g.ustride[g.axis], xs = g.xstride[g.axis];                \
        for (int64_t l = 0; l < g.lanes; l++) {                                \
            int64_t u0, x0;                                                    \
            vq__elements_lane(&g, l, &u0, &x0);                                \
            for (int64_t j = 0; j < g.len; j++) {                              \
                int64_t e = u0 + j * us, v = vq__index_at(idx->data, is64, e); \
                T *d = o + x0 + (v + (v < 0 ? g.dim : 0)) * xs;                \
                *d = FN(p->reduction, *d, u[e]);                               \
            }                                                                  \
        }                                                                      \
    } while (0)

static int scatter_elements_kernel(const vq__kcall *k)
{
    const vq__scatter_params *p = k->params;
    vq_tensor *x = k->in[0], *idx = k->in[1], *upd = k->in[2], *out = k->out[0];
    bool is64 = idx->dtype == VQ_I64;
    int rc = elements_indices_check(k, idx, x->shape[p->axis], p->axis);
    if (rc < 0)
        return rc;
    if (x->nbytes)
        memcpy(out->data, x->data, x->nbytes);
    vq__elements_geom g;
    vq__elements_geom_make(&g, x->ndim, x->shape, upd->shape, p->axis);
    switch (x->dtype) {
    case VQ_F32: SCATTER_LANES(float, vq__scatter_f32); break;
    case VQ_F64: SCATTER_LANES(double, vq__scatter_f64); break;
    case VQ_I32: SCATTER_LANES(int32_t, vq__scatter_i32); break;
    case VQ_I64: SCATTER_LANES(int64_t, vq__scatter_i64); break;
    default: SCATTER_LANES(uint8_t, vq__scatter_bool); break;
    }
    return 0;
}

/* The forward op's attribute name (int), or dflt. */
static int64_t grad_attr_int(const vq__grad *g, const char *name, int64_t dflt)
{
    for (int i = 0; i < g->nattrs; i++)
        if (!strcmp(g->attrs[i].name, name))
            return g->attrs[i].i;
    return dflt;
}

/* The forward op's reduction, or -1 (VQ_EINVAL set) when it has no
 * gradient. */
static int grad_reduction(const vq__grad *g)
{
    const char *r = "none";
    for (int i = 0; i < g->nattrs; i++)
        if (!strcmp(g->attrs[i].name, "reduction"))
            r = g->attrs[i].s;
    if (!strcmp(r, "none"))
        return VQ__SCATTER_NONE;
    if (!strcmp(r, "add"))
        return VQ__SCATTER_ADD;
    vq__op_fail(g->def, "reduction %s has no gradient (none and add have one)", r);
    return -1;
}

/* scatter_elements' and scatter_nd's gradient; gather (gather_elements,
 * gather_nd) takes dOut's elements at the updates' places, with attrs
 * (the axis or batch_dims). */
static int scatters_grad(const vq__grad *g, const char *gather, const vq_attr *attrs)
{
    int rc = vq__grad_wanted(g);
    if (rc <= 0 || (!g->din[0] && !g->din[2])) /* Indices have no gradient */
        return rc < 0 ? rc : 0;
    int red = grad_reduction(g);
    if (red < 0)
        return VQ_EINVAL;
    rc = 0;
    if (g->din[0] && red == VQ__SCATTER_ADD) {
        const char *in[2] = {g->in[0], g->dout[0]};
        rc = vq__emit(g, "reshape_grad", in, 2, &g->din[0], 1, NULL, 0);
    } else if (g->din[0]) { /* dOut with the replaced elements zeroed */
        const char *zeros = g->temp(g->user);
        if (!zeros)
            return VQ_ENOMEM;
        const char *in[3] = {g->dout[0], g->in[1], zeros};
        if ((rc = vq__emit(g, "zeros_like", &g->in[2], 1, &zeros, 1, NULL, 0)) >= 0)
            rc = vq__emit(g, g->def->type, in, 3, &g->din[0], 1, attrs, 1);
    }
    if (rc >= 0 && g->din[2]) {
        const char *in[2] = {g->dout[0], g->in[1]};
        rc = vq__emit(g, gather, in, 2, &g->din[2], 1, attrs, 1);
    }
    return rc;
}

static int scatter_elements_grad(const vq__grad *g)
{
    vq_attr axis = VQ_ATTR_I("axis", grad_attr_int(g, "axis", 0));
    return scatters_grad(g, "gather_elements", &axis);
}

/* ---- scatter_nd and gather_nd ---- */

/* X (slot 0) and Indices (slot 1) against batch_dims: fills p and *res,
 * gather_nd's Out and scatter_nd's Updates: Indices' dims but the last,
 * then X's past the index tuples' (dtype X's). */
static int nd_meta(const vq__infer *c, vq__scatter_params *p, vq__meta *res)
{
    const vq__meta *x = &c->in[0], *ix = &c->in[1];
    const char *type = c->def->type;
    int rc = vq__check_dtype(c, 1, INDEX_DTYPES);
    if (rc < 0)
        return rc;
    if (ix->ndim == 0)
        return vq__in_fail(c, 1, "is a scalar (rank 0); %s reads index tuples along its last dim",
                           type);
    int64_t b = vq__attr_int(c, "batch_dims", 0);
    if (b < 0 || b >= ix->ndim || b >= x->ndim)
        return vq__attr_fail(c, "batch_dims",
                             "is %lld; X of rank %d and Indices of rank %d take 0 to %d",
                             (long long)b, x->ndim, ix->ndim,
                             (ix->ndim < x->ndim ? ix->ndim : x->ndim) - 1);
    p->batch_dims = (int)b;
    for (int d = 0; d < b; d++)
        if (!vq__dim_match(ix->shape[d], x->shape[d]))
            return vq__in_fail(c, 1, "has %lld in batch dim %d; X has %lld",
                               (long long)ix->shape[d], d, (long long)x->shape[d]);
    int64_t k = ix->shape[ix->ndim - 1];
    if (k < 0)
        return vq__in_fail(c, 1, "has an unknown last dim; %s needs the index tuples' length",
                           type);
    if (k > x->ndim - b)
        return vq__in_fail(c, 1,
                           "has index tuples of %lld entries; X of rank %d has %lld dims past "
                           "its %lld batch dims",
                           (long long)k, x->ndim, (long long)(x->ndim - b), (long long)b);
    int nd = ix->ndim - 1 + x->ndim - (int)(b + k);
    if (nd > VQ_MAX_DIMS)
        return vq__in_fail(c, 1, "has %d dims: with X's %d, the result would have %d, more than %d",
                           ix->ndim, x->ndim, nd, VQ_MAX_DIMS);
    res->dtype = x->dtype;
    res->ndim = 0;
    for (int d = 0; d < ix->ndim - 1; d++)
        res->shape[res->ndim++] = ix->shape[d];
    for (int d = (int)(b + k); d < x->ndim; d++)
        res->shape[res->ndim++] = x->shape[d];
    return 0;
}

static int scatter_nd_infer(vq__infer *c)
{
    vq__scatter_params *p = c->params;
    vq__meta want;
    int rc = reduction_read(c, p);
    if (rc < 0 || (rc = nd_meta(c, p, &want)) < 0 ||
        (rc = vq__check_shape_is(c, 2, &want,
                                 "Indices' dims but the last, then X's past the index tuples'")) <
            0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

/* Each tuple's slice in turn, in Indices' order (the lanes of
 * scatter_shared.h, interleaved: each lane still in order). */
#define SCATTER_TUPLES(T, FN)                                 \
    do {                                                      \
        const T *u = upd->data;                               \
        T *o = out->data;                                     \
        for (int64_t t = 0; t < tuples; t++) {                \
            T *d = o + vq__nd_source(&g, idx->data, is64, t); \
            const T *s = u + t * g.slice;                     \
            for (int64_t i = 0; i < g.slice; i++)             \
                d[i] = FN(p->reduction, d[i], s[i]);          \
        }                                                     \
    } while (0)

static int scatter_nd_kernel(const vq__kcall *k)
{
    const vq__scatter_params *p = k->params;
    vq_tensor *x = k->in[0], *idx = k->in[1], *upd = k->in[2], *out = k->out[0];
    bool is64 = idx->dtype == VQ_I64;
    vq__nd_geom g;
    vq__nd_geom_make(&g, x->ndim, x->shape, idx->ndim, idx->shape, p->batch_dims);
    int rc = nd_indices_check(k, idx, &g);
    if (rc < 0)
        return rc;
    if (x->nbytes)
        memcpy(out->data, x->data, x->nbytes);
    int64_t tuples = g.batches * g.n;
    if (g.slice == 0)
        return 0;
    switch (x->dtype) {
    case VQ_F32: SCATTER_TUPLES(float, vq__scatter_f32); break;
    case VQ_F64: SCATTER_TUPLES(double, vq__scatter_f64); break;
    case VQ_I32: SCATTER_TUPLES(int32_t, vq__scatter_i32); break;
    case VQ_I64: SCATTER_TUPLES(int64_t, vq__scatter_i64); break;
    default: SCATTER_TUPLES(uint8_t, vq__scatter_bool); break;
    }
    return 0;
}

static int scatter_nd_grad(const vq__grad *g)
{
    vq_attr b = VQ_ATTR_I("batch_dims", grad_attr_int(g, "batch_dims", 0));
    return scatters_grad(g, "gather_nd", &b);
}

static int gather_nd_infer(vq__infer *c)
{
    int rc = vq__check_dtype(c, 0, VQ__ANY);
    return rc < 0 ? rc : nd_meta(c, c->params, &c->out[0]);
}

static int gather_nd_kernel(const vq__kcall *k)
{
    const vq__scatter_params *p = k->params;
    vq_tensor *x = k->in[0], *idx = k->in[1], *out = k->out[0];
    vq__nd_geom g;
    vq__nd_geom_make(&g, x->ndim, x->shape, idx->ndim, idx->shape, p->batch_dims);
    int rc = nd_indices_check(k, idx, &g);
    if (rc < 0 || out->numel == 0)
        return rc;
    bool is64 = idx->dtype == VQ_I64;
    size_t es = vq_dtype_size(x->dtype), row = (size_t)g.slice * es;
    for (int64_t t = 0; t < g.batches * g.n; t++)
        memcpy((char *)out->data + (size_t)t * row,
               (const char *)x->data + (size_t)vq__nd_source(&g, idx->data, is64, t) * es, row);
    return 0;
}

/* dX = scatter_nd(zeros_like(X), Indices, dOut; batch_dims, add). */
static int gather_nd_grad(const vq__grad *g)
{
    int rc = vq__grad_wanted(g);
    if (rc <= 0 || !g->din[0])
        return rc < 0 ? rc : 0;
    const char *zeros = g->temp(g->user);
    if (!zeros)
        return VQ_ENOMEM;
    const char *in[3] = {zeros, g->in[1], g->dout[0]};
    vq_attr at[2] = {VQ_ATTR_I("batch_dims", grad_attr_int(g, "batch_dims", 0)),
                     VQ_ATTR_S("reduction", "add")};
    if ((rc = vq__emit(g, "zeros_like", &g->in[0], 1, &zeros, 1, NULL, 0)) < 0)
        return rc;
    return vq__emit(g, "scatter_nd", in, 3, &g->din[0], 1, at, 2);
}

const vq__op_def vq__ops_scatter[] = {
    {.type = "scatter_elements",
     .in_slots = scatter_in,
     .nin_slots = 3,
     .out_slots = out_slot,
     .nout_slots = 1,
     .attrs = elements_attrs,
     .nattrs = 2,
     .params_size = sizeof(vq__scatter_params),
     .infer = elements_infer,
     .kernel = {scatter_elements_kernel},
     .cuda = VQ__CUDA_OP(vq__scatter_elements_gpu),
     .grad = scatter_elements_grad},
    {.type = "scatter_nd",
     .in_slots = scatter_in,
     .nin_slots = 3,
     .out_slots = out_slot,
     .nout_slots = 1,
     .attrs = scatter_nd_attrs,
     .nattrs = 2,
     .params_size = sizeof(vq__scatter_params),
     .infer = scatter_nd_infer,
     .kernel = {scatter_nd_kernel},
     .cuda = VQ__CUDA_OP(vq__scatter_nd_gpu),
     .grad = scatter_nd_grad},
    {.type = "gather_nd",
     .in_slots = gather_in,
     .nin_slots = 2,
     .out_slots = out_slot,
     .nout_slots = 1,
     .attrs = gather_nd_attrs,
     .nattrs = 1,
     .params_size = sizeof(vq__scatter_params),
     .infer = gather_nd_infer,
     .kernel = {gather_nd_kernel},
     .cuda = VQ__CUDA_OP(vq__gather_nd_gpu),
     .grad = gather_nd_grad},
    {0},
};
