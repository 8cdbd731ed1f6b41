/* Indexing ops: gather (numpy's take along an axis, ONNX's Gather),
 * gather_elements (ONNX's GatherElements, torch.gather) and split (one
 * tensor cut into pieces along an axis, concat's inverse), with their
 * gradient ops. They only move elements, so they take every dtype.
 *
 * gather(X, Indices; axis) -> Out sees X as [outer, dim, inner] around the
 * axis and Out as [outer, n, inner], n the number of indices: Out's shape is
 * X.shape[:axis] + Indices.shape + X.shape[axis+1:], and row (o, j) of Out
 * is row (o, Indices[j]) of X. Indices are i32 or i64; a negative index
 * counts from the end. An index outside [-dim, dim) fails the kernel with a
 * message naming the op, the index and its element in Indices: the first
 * bad one in Indices' order, found before anything is written, always
 * (even when X or Out is empty). The CUDA kernels (ops/cuda/index.cu) name
 * the same element (ops/cuda/index_host.c's device-side checks).
 *
 * gather_grad(X, Indices, dOut; axis) -> dX is zeros of X's shape with each
 * row of dOut added at the row of X its index picked, so repeated indices
 * add up. The CPU adds in the order of dOut's elements; the CUDA kernel adds
 * with atomics, in no fixed order, so the two agree to rounding.
 *
 * gather_elements(X, Indices; axis) -> Out: Indices has X's rank and, off
 * the axis, dims no larger than X's; Out has Indices' shape, and its
 * element at coordinates c is X's at c with c[axis] replaced by
 * Indices[c] (negative counting from the end). Indices are checked as
 * gather's are, with the same message. gather_elements_grad(X, Indices,
 * dOut; axis) -> dX is zeros of X's shape with each element of dOut added
 * at the element of X it was read from (the CPU in dOut's order, CUDA with
 * atomics).
 *
 * split(X; axis, sizes) -> Out...: output j holds X's elements from
 * offset_j = sizes[0] + ... + sizes[j-1] on along the axis, sizes[j] of
 * them; the sizes must sum to the dim (checked when it is known). Its
 * gradient is concat of the outputs' gradients when one flows into every
 * output. When some outputs get none, the maker emits split_grad(X, G...;
 * axis, absent) instead: G_j is output j's gradient or, where none flows,
 * the forward output j itself, whose shape stands for zeros (its values are
 * never read; absent lists those j). Autodiff hands gradient makers no
 * temporary vars, so the zeros cannot be made by a zeros_like of their own;
 * the cost is that such a forward output stays alive until the backward
 * pass has run. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"
#include "../shape_shared.h" /* vq__lines_of */

#include <stdio.h>
#include <string.h>

static const char *const gather_in[] = {"X", "Indices"};
static const char *const gather_grad_in[] = {"X", "Indices", "dOut"};
static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};
static const char *const dx_out[] = {"dX"};
static const char *const split_grad_in[] = {"X", "dOut"};

#define INDEX_DTYPES ((1u << VQ_I32) | (1u << VQ_I64))

/* ---- gather ---- */

static const vq__attr_spec gather_attrs[] = {
    {"axis", VQ_ATTR_INT, false, "0"},
};

/* X (slot 0) and Indices (slot 1) against axis: fills p and Out's meta. */
static int gather_meta(const vq__infer *c, vq__gather_params *p, vq__meta *out)
{
    const vq__meta *x = &c->in[0], *ix = &c->in[1];
    int rc = vq__check_dtype(c, 1, INDEX_DTYPES);
    if (rc < 0)
        return rc;
    if (x->ndim == 0)
        return vq__in_fail(c, 0, "is a scalar (rank 0); gather needs at least one dim");
    if ((rc = vq__axis(c, "axis", vq__attr_int(c, "axis", 0), x->ndim, &p->axis)) < 0)
        return rc;
    int nd = x->ndim - 1 + ix->ndim;
    if (nd > VQ_MAX_DIMS)
        return vq__in_fail(c, 1, "has %d dims: with X's %d, Out would have %d, more than %d",
                           ix->ndim, x->ndim, nd, VQ_MAX_DIMS);
    out->dtype = x->dtype;
    out->ndim = 0;
    for (int d = 0; d < p->axis; d++)
        out->shape[out->ndim++] = x->shape[d];
    for (int d = 0; d < ix->ndim; d++)
        out->shape[out->ndim++] = ix->shape[d];
    for (int d = p->axis + 1; d < x->ndim; d++)
        out->shape[out->ndim++] = x->shape[d];
    return 0;
}

static int gather_infer(vq__infer *c)
{
    int rc = vq__check_dtype(c, 0, VQ__ANY);
    return rc < 0 ? rc : gather_meta(c, c->params, &c->out[0]);
}

static int64_t index_at(const vq_tensor *t, int64_t j)
{
    return t->dtype == VQ_I32 ? ((const int32_t *)t->data)[j] : ((const int64_t *)t->data)[j];
}

/* The first index outside [-dim, dim), in Indices' order, as the op's error. */
static int indices_check(const vq__kcall *k, const vq_tensor *idx, int64_t dim, int axis)
{
    for (int64_t j = 0; j < idx->numel; j++) {
        int64_t v = index_at(idx, j);
        if (v < -dim || v >= dim)
            return vq__op_fail(k->def,
                               "index %lld at Indices element %lld is outside [-%lld, %lld) "
                               "(X's dim %d)",
                               (long long)v, (long long)j, (long long)dim, (long long)dim, axis);
    }
    return 0;
}

static int gather_kernel(const vq__kcall *k)
{
    const vq__gather_params *p = k->params;
    vq_tensor *x = k->in[0], *idx = k->in[1], *out = k->out[0];
    int64_t outer, dim, inner, n = idx->numel;
    vq__lines_of(x->ndim, x->shape, p->axis, &outer, &dim, &inner);
    int rc = indices_check(k, idx, dim, p->axis);
    if (rc < 0 || out->numel == 0)
        return rc;
    size_t row = (size_t)inner * vq_dtype_size(x->dtype);
    const char *src = x->data;
    char *dst = out->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < n; j++) {
            int64_t v = index_at(idx, j);
            v += v < 0 ? dim : 0;
            memcpy(dst + (size_t)(o * n + j) * row, src + (size_t)(o * dim + v) * row, row);
        }
    return 0;
}

/* gather's and gather_elements' gradient: <type>_grad(X, Indices, dOut),
 * which has exactly the forward op's attributes. */
static int gathers_grad(const vq__grad *g)
{
    if (!g->din[0]) /* Indices have no gradient */
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output Out");
    const char *in[3] = {g->in[0], g->in[1], g->dout[0]};
    char type[32];
    snprintf(type, sizeof type, "%s_grad", g->def->type);
    return vq__emit(g, type, in, 3, &g->din[0], 1, g->attrs, g->nattrs);
}

/* <type>_grad(X, Indices, dOut; axis) -> dX, X's meta; meta gives the
 * forward op's output meta, which dOut must have (what: its name). */
static int gathers_grad_infer(vq__infer *c,
                              int (*meta)(const vq__infer *, vq__gather_params *, vq__meta *),
                              const char *what)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 2)) < 0)
        return rc;
    vq__meta want;
    if ((rc = meta(c, c->params, &want)) < 0 || (rc = vq__check_shape_is(c, 2, &want, what)) < 0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

static int gather_grad_infer(vq__infer *c)
{
    return gathers_grad_infer(c, gather_meta, "gather's output shape");
}

#define SCATTER_ADD(T)                                                                       \
    do {                                                                                     \
        const T *gs = g->data;                                                               \
        T *d = dx->data;                                                                     \
        for (int64_t o = 0; o < outer; o++)                                                  \
            for (int64_t j = 0; j < n; j++) {                                                \
                int64_t v = index_at(idx, j);                                                \
                v += v < 0 ? dim : 0;                                                        \
                const T *from = gs + (o * n + j) * inner;                                    \
                T *to = d + (o * dim + v) * inner;                                           \
                for (int64_t i = 0; i < inner; i++)                                          \
                    to[i] += from[i];                                                        \
            }                                                                                \
    } while (0)

static int gather_grad_kernel(const vq__kcall *k)
{
    const vq__gather_params *p = k->params;
    vq_tensor *idx = k->in[1], *g = k->in[2], *dx = k->out[0];
    int64_t outer, dim, inner, n = idx->numel;
    vq__lines_of(dx->ndim, dx->shape, p->axis, &outer, &dim, &inner);
    int rc = indices_check(k, idx, dim, p->axis);
    if (rc < 0)
        return rc;
    memset(dx->data, 0, dx->nbytes);
    if (dx->dtype == VQ_F32)
        SCATTER_ADD(float);
    else
        SCATTER_ADD(double);
    return 0;
}

/* ---- gather_elements ---- */

/* X (slot 0) and Indices (slot 1) against axis: fills p; Out's meta is
 * Indices' shape with X's dtype. */
static int elements_meta(const vq__infer *c, vq__gather_params *p, vq__meta *out)
{
    const vq__meta *x = &c->in[0], *ix = &c->in[1];
    int rc = vq__check_dtype(c, 1, INDEX_DTYPES);
    if (rc < 0)
        return rc;
    if (x->ndim == 0)
        return vq__in_fail(c, 0, "is a scalar (rank 0); gather_elements needs at least one dim");
    if ((rc = vq__axis(c, "axis", vq__attr_int(c, "axis", 0), x->ndim, &p->axis)) < 0)
        return rc;
    if (ix->ndim != x->ndim)
        return vq__in_fail(c, 1, "has rank %d; X has %d, and gather_elements wants the same",
                           ix->ndim, x->ndim);
    for (int d = 0; d < x->ndim; d++)
        if (d != p->axis && ix->shape[d] >= 0 && x->shape[d] >= 0 && ix->shape[d] > x->shape[d])
            return vq__in_fail(c, 1, "has %lld in dim %d, more than X's %lld (axis is %d)",
                               (long long)ix->shape[d], d, (long long)x->shape[d], p->axis);
    *out = *ix;
    out->dtype = x->dtype;
    return 0;
}

static int elements_infer(vq__infer *c)
{
    int rc = vq__check_dtype(c, 0, VQ__ANY);
    return rc < 0 ? rc : elements_meta(c, c->params, &c->out[0]);
}

/* A walk over Indices' elements in row-major order that keeps the offset
 * in X of the same coordinates, the axis' left out. */
struct elements_walk {
    int nd, axis;
    int64_t c[VQ_MAX_DIMS], shape[VQ_MAX_DIMS], xs[VQ_MAX_DIMS], off;
};

static void walk_init(struct elements_walk *w, const vq_tensor *x, const vq_tensor *idx, int axis)
{
    w->nd = x->ndim;
    w->axis = axis;
    w->off = 0;
    int64_t stride = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        w->c[d] = 0;
        w->shape[d] = idx->shape[d];
        w->xs[d] = stride;
        stride *= x->shape[d];
    }
}

static inline void walk_next(struct elements_walk *w)
{
    for (int d = w->nd - 1; d >= 0; d--) {
        int64_t step = d == w->axis ? 0 : w->xs[d];
        w->off += step;
        if (++w->c[d] < w->shape[d])
            return;
        w->off -= w->c[d] * step;
        w->c[d] = 0;
    }
}

/* X's offset of the element Indices' element e picks. */
static inline int64_t walk_source(const struct elements_walk *w, const vq_tensor *idx, int64_t e,
                                  int64_t dim)
{
    int64_t v = index_at(idx, e);
    return w->off + (v + (v < 0 ? dim : 0)) * w->xs[w->axis];
}

#define GATHER_ELEMENTS(T)                              \
    do {                                                \
        const T *src = x->data;                         \
        T *dst = out->data;                             \
        for (int64_t e = 0; e < n; e++, walk_next(&w))  \
            dst[e] = src[walk_source(&w, idx, e, dim)]; \
    } while (0)

static int gather_elements_kernel(const vq__kcall *k)
{
    const vq__gather_params *p = k->params;
    vq_tensor *x = k->in[0], *idx = k->in[1], *out = k->out[0];
    int64_t dim = x->shape[p->axis], n = idx->numel;
    int rc = indices_check(k, idx, dim, p->axis);
    if (rc < 0 || n == 0)
        return rc;
    struct elements_walk w;
    walk_init(&w, x, idx, p->axis);
    switch (vq_dtype_size(x->dtype)) {
    case 8: GATHER_ELEMENTS(uint64_t); break;
    case 4: GATHER_ELEMENTS(uint32_t); break;
    default: GATHER_ELEMENTS(uint8_t); break;
    }
    return 0;
}

static int elements_grad_infer(vq__infer *c)
{
    return gathers_grad_infer(c, elements_meta, "Indices' shape");
}

#define SCATTER_ELEMENTS(T)                            \
    do {                                               \
        const T *gs = g->data;                         \
        T *d = dx->data;                               \
        for (int64_t e = 0; e < n; e++, walk_next(&w)) \
            d[walk_source(&w, idx, e, dim)] += gs[e];  \
    } while (0)

static int gather_elements_grad_kernel(const vq__kcall *k)
{
    const vq__gather_params *p = k->params;
    vq_tensor *idx = k->in[1], *g = k->in[2], *dx = k->out[0];
    int64_t dim = dx->shape[p->axis], n = idx->numel;
    int rc = indices_check(k, idx, dim, p->axis);
    if (rc < 0)
        return rc;
    memset(dx->data, 0, dx->nbytes);
    if (n == 0)
        return 0;
    struct elements_walk w;
    walk_init(&w, dx, idx, p->axis);
    if (dx->dtype == VQ_F32)
        SCATTER_ELEMENTS(float);
    else
        SCATTER_ELEMENTS(double);
    return 0;
}

/* ---- split ---- */

static const vq__attr_spec split_attrs[] = {
    {"axis", VQ_ATTR_INT, false, "0"},
    {"sizes", VQ_ATTR_INTS, true, NULL},
};

static int split_infer(vq__infer *c)
{
    const vq__meta *x = &c->in[0];
    vq__split_params *p = c->params;
    const vq_attr *sizes = vq__attr_find(c, "sizes");
    int rc = vq__check_dtype(c, 0, VQ__ANY);
    if (rc < 0)
        return rc;
    if (x->ndim == 0)
        return vq__in_fail(c, 0, "is a scalar (rank 0); split needs at least one dim");
    if ((rc = vq__axis(c, "axis", vq__attr_int(c, "axis", 0), x->ndim, &p->axis)) < 0)
        return rc;
    if (sizes->n != c->nout)
        return vq__attr_fail(c, "sizes", "has %d entries for %d outputs", sizes->n, c->nout);
    int64_t sum = 0;
    for (int j = 0; j < sizes->n; j++) {
        if (sizes->ints[j] < 0 || sizes->ints[j] > INT64_MAX - sum)
            return vq__attr_fail(c, "sizes", "entry %d is %lld", j, (long long)sizes->ints[j]);
        sum += sizes->ints[j];
        c->out[j] = *x;
        c->out[j].shape[p->axis] = sizes->ints[j];
    }
    int64_t dim = x->shape[p->axis];
    if (dim >= 0 && sum != dim) {
        char sx[100];
        return vq__attr_fail(c, "sizes", "sum to %lld, but X's dim %d is %lld (X is %s)",
                             (long long)sum, p->axis, (long long)dim,
                             vq__shape_str(sx, sizeof sx, x->ndim, x->shape));
    }
    return 0;
}

/* Copies the piece of whole [outer, dim, inner] at offset `at` along the
 * axis into piece [outer, len, inner], or back when to_whole. */
static void piece_copy(const vq_tensor *whole, const vq_tensor *piece, int axis, int64_t at,
                       bool to_whole)
{
    int64_t outer, dim, inner;
    vq__lines_of(whole->ndim, whole->shape, axis, &outer, &dim, &inner);
    int64_t len = piece->shape[axis];
    size_t es = vq_dtype_size(whole->dtype), row = (size_t)(len * inner) * es;
    if (row == 0)
        return;
    for (int64_t o = 0; o < outer; o++) {
        char *w = (char *)whole->data + (size_t)((o * dim + at) * inner) * es;
        char *q = (char *)piece->data + (size_t)o * row;
        if (to_whole)
            memcpy(w, q, row);
        else
            memcpy(q, w, row);
    }
}

static int split_kernel(const vq__kcall *k)
{
    const vq__split_params *p = k->params;
    int64_t at = 0;
    for (int j = 0; j < k->nout; j++) {
        piece_copy(k->in[0], k->out[j], p->axis, at, false);
        at += k->out[j]->shape[p->axis];
    }
    return 0;
}

static int split_grad(const vq__grad *g)
{
    if (!g->din[0])
        return 0;
    if (g->nout > VQ__MAX_SLOTS - 1)
        return vq__op_fail(g->def, "%d outputs: too many for split_grad", g->nout);
    int64_t axis = 0, absent[VQ__MAX_SLOTS];
    int nabsent = 0;
    for (int i = 0; i < g->nattrs; i++)
        if (!strcmp(g->attrs[i].name, "axis"))
            axis = g->attrs[i].i;
    const char *in[VQ__MAX_SLOTS];
    in[0] = g->in[0];
    for (int j = 0; j < g->nout; j++) {
        in[1 + j] = g->dout[j] ? g->dout[j] : g->out[j];
        if (!g->dout[j])
            absent[nabsent++] = j;
    }
    if (nabsent == g->nout)
        return vq__op_fail(g->def, "no gradient flows into any output Out");
    vq_attr at[2] = {VQ_ATTR_I("axis", axis), VQ_ATTR_IS("absent", absent, nabsent)};
    if (nabsent == 0)
        return vq__emit(g, "concat", in + 1, g->nout, &g->din[0], 1, at, 1);
    return vq__emit(g, "split_grad", in, 1 + g->nout, &g->din[0], 1, at, 2);
}

/* split_grad(X, dOut...; axis, absent) -> dX: the dOuts concatenated along
 * the axis, zeros for those listed in absent. */
static const vq__attr_spec split_grad_attrs[] = {
    {"axis", VQ_ATTR_INT, false, "0"},
    {"absent", VQ_ATTR_INTS, false, "[]"},
};

static int split_grad_infer(vq__infer *c)
{
    const vq__meta *x = &c->in[0];
    vq__split_params *p = c->params;
    int rc = vq__check_dtype(c, 0, VQ__FLOATS);
    if (rc < 0)
        return rc;
    if (x->ndim == 0)
        return vq__in_fail(c, 0, "is a scalar (rank 0); split needs at least one dim");
    if ((rc = vq__axis(c, "axis", vq__attr_int(c, "axis", 0), x->ndim, &p->axis)) < 0)
        return rc;
    const vq_attr *absent = vq__attr_find(c, "absent");
    int ng = c->nin - 1;
    for (int i = 0; absent && i < absent->n; i++) {
        int64_t j = absent->ints[i];
        if (j < 0 || j >= ng || (p->absent & (1ull << j)))
            return vq__attr_fail(c, "absent", "entry %d is %lld: not a new position among the "
                                              "%d dOut inputs",
                                 i, (long long)j, ng);
        p->absent |= 1ull << j;
    }
    int64_t sum = 0;
    bool known = true;
    for (int j = 1; j < c->nin; j++) {
        const vq__meta *gj = &c->in[j];
        if ((rc = vq__check_same_dtype(c, 0, j)) < 0 || (rc = vq__check_rank(c, j, x->ndim)) < 0)
            return rc;
        for (int d = 0; d < x->ndim; d++)
            if (d != p->axis && !vq__dim_match(gj->shape[d], x->shape[d])) {
                char a[100], b[100];
                return vq__in_fail(c, j, "shape %s differs from X's %s in dim %d (axis is %d)",
                                   vq__shape_str(a, sizeof a, gj->ndim, gj->shape),
                                   vq__shape_str(b, sizeof b, x->ndim, x->shape), d, p->axis);
            }
        known = known && gj->shape[p->axis] >= 0;
        sum += gj->shape[p->axis] < 0 ? 0 : gj->shape[p->axis];
    }
    int64_t dim = x->shape[p->axis];
    if (known && dim >= 0 && sum != dim)
        return vq__op_fail(c->def, "the dOut inputs' dims %d sum to %lld, but X's is %lld",
                           p->axis, (long long)sum, (long long)dim);
    c->out[0] = *x;
    return 0;
}

static int split_grad_kernel(const vq__kcall *k)
{
    const vq__split_params *p = k->params;
    vq_tensor *dx = k->out[0];
    if (p->absent)
        memset(dx->data, 0, dx->nbytes);
    int64_t at = 0;
    for (int j = 1; j < k->nin; j++) {
        if (!(p->absent & (1ull << (j - 1))))
            piece_copy(dx, k->in[j], p->axis, at, true);
        at += k->in[j]->shape[p->axis];
    }
    return 0;
}

const vq__op_def vq__ops_index[] = {
    {.type = "gather",
     .in_slots = gather_in,
     .nin_slots = 2,
     .out_slots = out_slot,
     .nout_slots = 1,
     .attrs = gather_attrs,
     .nattrs = 1,
     .params_size = sizeof(vq__gather_params),
     .infer = gather_infer,
     .kernel = {gather_kernel},
     .cuda = VQ__CUDA_OP(vq__gather_gpu),
     .grad = gathers_grad},
    {.type = "gather_grad",
     .in_slots = gather_grad_in,
     .nin_slots = 3,
     .out_slots = dx_out,
     .nout_slots = 1,
     .attrs = gather_attrs,
     .nattrs = 1,
     .params_size = sizeof(vq__gather_params),
     .infer = gather_grad_infer,
     .kernel = {gather_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__gather_gpu)},
    {.type = "gather_elements",
     .in_slots = gather_in,
     .nin_slots = 2,
     .out_slots = out_slot,
     .nout_slots = 1,
     .attrs = gather_attrs,
     .nattrs = 1,
     .params_size = sizeof(vq__gather_params),
     .infer = elements_infer,
     .kernel = {gather_elements_kernel},
     .cuda = VQ__CUDA_OP(vq__gather_elements_gpu),
     .grad = gathers_grad},
    {.type = "gather_elements_grad",
     .in_slots = gather_grad_in,
     .nin_slots = 3,
     .out_slots = dx_out,
     .nout_slots = 1,
     .attrs = gather_attrs,
     .nattrs = 1,
     .params_size = sizeof(vq__gather_params),
     .infer = elements_grad_infer,
     .kernel = {gather_elements_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__gather_elements_gpu)},
    {.type = "split",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .flags = VQ__VARIADIC_OUT,
     .attrs = split_attrs,
     .nattrs = 2,
     .params_size = sizeof(vq__split_params),
     .infer = split_infer,
     .kernel = {split_kernel},
     .cuda = VQ__CUDA_OP(vq__split_gpu),
     .grad = split_grad},
    {.type = "split_grad",
     .in_slots = split_grad_in,
     .nin_slots = 2,
     .out_slots = dx_out,
     .nout_slots = 1,
     .flags = VQ__VARIADIC_IN,
     .attrs = split_grad_attrs,
     .nattrs = 2,
     .params_size = sizeof(vq__split_params),
     .infer = split_grad_infer,
     .kernel = {split_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__split_grad_gpu)},
    {0},
};
