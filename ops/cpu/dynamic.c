/* Ops whose output shapes depend on their inputs' values, not only on
 * their shapes: nonzero, top_k, unique, compress and non_max_suppression
 * (ONNX's NonZero, TopK, Unique, Compress, NonMaxSuppression). Their
 * definitions mark those inputs (vq__op_def.value_in): inference reads
 * them, so a program's executor infers these ops again each time they run
 * and vq_op_run waits for the inputs first (ops/surface/ops_services.h);
 * at preparation inference gives the outputs' ranks with -1 for what the
 * values decide. The kernels, CPU and CUDA (ops/cuda/dynamic.cu), get the
 * outputs already sized by that inference and only fill them; what both
 * compute alike lives in ops/dynamic_shared.h.
 *
 * nonzero(X) -> Out: i64 [rank, count], the coordinates of X's nonzero
 * elements (NaN is nonzero, -0 is zero) in row-major order, one row per
 * dim; a scalar X counts as [1] (numpy 1's and ONNX Runtime's reading).
 * No gradient.
 *
 * top_k(X, K; axis, largest, sorted) -> Values, Indices: along axis
 * (default -1), the K largest elements (largest 1, the default) or the K
 * smallest, first to last, ties the lower index first, NaN above every
 * number; Indices i64. K: a scalar or one-element i64 / i32 input in [0,
 * dim], or attribute k when there is no input (ONNX's TopK before opset
 * 10). sorted 0 is allowed and gives the same sorted order (ONNX leaves
 * the order free then). X f32, f64, i32, i64. Gradient wrt X:
 * gather_elements_grad(X, Indices, dValues; axis), dValues added where
 * each value was read (torch.topk's).
 *
 * unique(X; sorted, axis) -> Y, Indices, InverseIndices, Counts (ONNX's
 * Unique, numpy.unique): the distinct elements of X flattened (axis
 * absent) or its distinct slices along axis, sorted ascending (sorted 1,
 * the default; slices lexicographically; NaN last, NaNs equal, -0 equal
 * to 0) or in the order they first occur (sorted 0); Indices (i64) the
 * index of each one's first occurrence, whose bits Y holds;
 * InverseIndices (i64, one per element or slice of X) the index in Y of
 * each; Counts (i64) how often each occurs. Any dtype. No gradient.
 *
 * compress(X, Condition; axis) -> Out (ONNX's Compress, numpy.compress):
 * the slices of X along axis (X flattened when axis is absent) whose
 * entry in Condition (bool, 1-D) is true; a Condition shorter than the dim
 * leaves the rest out, a longer one must be false past it. Any dtype.
 * compress_grad(X, Condition, dOut; axis) -> dX: dOut's slices back where
 * they came from, zeros elsewhere (f32, f64); it reads Condition's value
 * too, to check dOut's shape.
 *
 * non_max_suppression(Boxes, Scores, MaxOutputBoxesPerClass, IouThreshold
 * [, ScoreThreshold]; center_point_box) -> Selected (ONNX's
 * NonMaxSuppression, as ONNX Runtime and ONNX's reference compute it):
 * Boxes f32 [batches, spatial, 4] ([y1, x1, y2, x2], corners in either
 * order, or with center_point_box 1 [x_center, y_center, width, height]),
 * Scores f32 [batches, classes, spatial], the three thresholds scalars
 * (or one element: MaxOutputBoxesPerClass i64 or i32, the others f32;
 * IouThreshold in [0, 1]). Per batch, then class, candidates (score above
 * ScoreThreshold when given) in descending score order, the lower index
 * first among equal scores and NaN scores last; each is kept unless its
 * intersection over union with a box kept before it in its class exceeds
 * IouThreshold, until MaxOutputBoxesPerClass are kept (0 or less: none).
 * Selected: i64 [kept, 3] rows of [batch, class, box]. No gradient. */
#include "../ops_internal.h"
#include "../dynamic_shared.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};
static const char *const dx_out[] = {"dX"};

/* An integer (i32 or i64) or float input of one element, as a double. */
static double scalar_of(const vq_tensor *t)
{
    switch (t->dtype) {
    case VQ_F32: return *(const float *)t->data;
    case VQ_F64: return *(const double *)t->data;
    case VQ_I32: return *(const int32_t *)t->data;
    case VQ_I64: return (double)*(const int64_t *)t->data;
    default: return *(const uint8_t *)t->data;
    }
}

/* Input slot must hold one element (a scalar, or [1]) of a dtype in mask. */
static int one_element(vq__infer *c, int slot, unsigned mask)
{
    int rc = vq__check_dtype(c, slot, mask);
    if (rc < 0)
        return rc;
    const vq__meta *m = &c->in[slot];
    if (m->ndim > 1 || (m->ndim == 1 && m->shape[0] != 1 && m->shape[0] >= 0))
        return vq__in_fail(c, slot, "must be a scalar or hold one element");
    return 0;
}

/* The optional axis attribute: *axis -1 when absent (X flattened). */
static int axis_or_flat(vq__infer *c, int ndim, int *axis)
{
    const vq_attr *a = vq__attr_find(c, "axis");
    *axis = -1;
    return a ? vq__axis(c, "axis", a->i, ndim, axis) : 0;
}

/* ---- nonzero ---- */

static bool is_nonzero(const vq_tensor *x, int64_t i)
{
    switch (x->dtype) {
    case VQ_F32: return ((const float *)x->data)[i] != 0;
    case VQ_F64: return ((const double *)x->data)[i] != 0;
    case VQ_I32: return ((const int32_t *)x->data)[i] != 0;
    case VQ_I64: return ((const int64_t *)x->data)[i] != 0;
    default: return ((const uint8_t *)x->data)[i] != 0;
    }
}

static int nonzero_infer(vq__infer *c)
{
    int rc = vq__check_dtype(c, 0, VQ__ANY);
    if (rc < 0)
        return rc;
    c->out[0].dtype = VQ_I64;
    c->out[0].ndim = 2;
    c->out[0].shape[0] = c->in[0].ndim > 0 ? c->in[0].ndim : 1;
    c->out[0].shape[1] = -1;
    const vq_tensor *x = c->val ? c->val[0] : NULL;
    if (!x)
        return 0;
    int64_t n = 0;
    for (int64_t i = 0; i < x->numel; i++)
        n += is_nonzero(x, i);
    c->out[0].shape[1] = n;
    return 0;
}

static int nonzero_kernel(const vq__kcall *k)
{
    vq_tensor *x = k->in[0], *o = k->out[0];
    int64_t count = o->shape[1], *out = o->data, j = 0;
    int rank = x->ndim;
    for (int64_t i = 0; i < x->numel && j < count; i++) {
        if (!is_nonzero(x, i))
            continue;
        int64_t r = i;
        for (int d = rank - 1; d >= 0; d--) {
            out[d * count + j] = r % x->shape[d];
            r /= x->shape[d];
        }
        if (rank == 0)
            out[j] = 0;
        j++;
    }
    return 0;
}

/* ---- top_k ---- */

static const char *const top_k_in[] = {"X", "K"};
static const char *const top_k_out[] = {"Values", "Indices"};

static const vq__attr_spec top_k_attrs[] = {
    {"axis", VQ_ATTR_INT, false, "-1"},
    {"largest", VQ_ATTR_BOOL, false, "1"},
    {"sorted", VQ_ATTR_BOOL, false, "1"},
    {"k", VQ_ATTR_INT, false, "none"},
};

static int top_k_infer(vq__infer *c)
{
    vq__top_k_params *p = c->params;
    const vq__meta *x = &c->in[0];
    int rc = vq__check_dtype(c, 0, VQ__NUMERIC);
    if (rc < 0)
        return rc;
    if (x->ndim == 0)
        return vq__in_fail(c, 0, "is a scalar; top_k needs at least one dim");
    if ((rc = vq__axis(c, "axis", vq__attr_int(c, "axis", -1), x->ndim, &p->axis)) < 0)
        return rc;
    p->largest = vq__attr_bool(c, "largest", true);
    const vq_attr *ka = vq__attr_find(c, "k");
    int64_t k = -1;
    if (c->nin > 1) {
        if (ka)
            return vq__attr_fail(c, "k", "is given, and so is input K: give one");
        if ((rc = one_element(c, 1, (1u << VQ_I32) | (1u << VQ_I64))) < 0)
            return rc;
        if (c->val && c->val[1])
            k = (int64_t)scalar_of(c->val[1]);
    } else if (!ka) {
        return vq__op_fail(c->def, "needs input K or attribute k");
    } else {
        k = ka->i;
    }
    int64_t dim = x->shape[p->axis];
    if (k != -1 && (k < 0 || (dim >= 0 && k > dim)))
        return vq__op_fail(c->def, "K is %lld; X's dim %d is %lld, and K must lie in [0, %lld]",
                           (long long)k, p->axis, (long long)dim, (long long)dim);
    c->out[0] = *x;
    c->out[0].shape[p->axis] = k;
    c->out[1] = c->out[0];
    c->out[1].dtype = VQ_I64;
    return 0;
}

static int top_k_kernel(const vq__kcall *k)
{
    const vq__top_k_params *p = k->params;
    vq_tensor *x = k->in[0], *vals = k->out[0], *idx = k->out[1];
    int64_t outer, n, inner, kk = vals->shape[p->axis];
    vq__lines_of(x->ndim, x->shape, p->axis, &outer, &n, &inner);
    if (vals->numel == 0)
        return 0;
    vq_tensor *heap;
    int rc = vq__kernel_scratch(k, VQ_I64, kk, "heap", &heap);
    if (rc < 0)
        return rc;
    size_t es = vq_dtype_size(x->dtype);
    int64_t *h = heap->data, *oi = idx->data;
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const char *base = (const char *)x->data + (size_t)(o * n * inner + i) * es;
            vq__topk_slice(base, x->dtype, n, inner, kk, p->largest, h);
            for (int64_t j = 0; j < kk; j++) {
                int64_t at = (o * kk + j) * inner + i;
                memcpy((char *)vals->data + (size_t)at * es, base + (size_t)(h[j] * inner) * es,
                       es);
                oi[at] = h[j];
            }
        }
    vq_tensor_release(heap);
    return 0;
}

/* dX = gather_elements_grad(X, Indices, dValues; axis): Values is
 * gather_elements(X, Indices; axis). */
static int top_k_grad(const vq__grad *g)
{
    if (!g->din[0])
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output Values");
    int64_t axis = -1;
    for (int i = 0; i < g->nattrs; i++)
        if (!strcmp(g->attrs[i].name, "axis"))
            axis = g->attrs[i].i;
    vq_attr at = VQ_ATTR_I("axis", axis);
    const char *in[3] = {g->in[0], g->out[1], g->dout[0]};
    return vq__emit(g, "gather_elements_grad", in, 3, &g->din[0], 1, &at, 1);
}

/* ---- unique ---- */

static const char *const unique_out[] = {"Y", "Indices", "InverseIndices", "Counts"};

static const vq__attr_spec unique_attrs[] = {
    {"sorted", VQ_ATTR_BOOL, false, "1"},
    {"axis", VQ_ATTR_INT, false, "none"},
};

static vq__unique_geom unique_geom(const vq__select_params *p, int ndim, const int64_t *shape,
                                   vq_dtype dt)
{
    vq__unique_geom g = {.dt = dt, .outer = 1, .inner = 1, .sorted = p->sorted};
    if (p->axis < 0)
        g.m = vq__numel(ndim, shape);
    else
        vq__lines_of(ndim, shape, p->axis, &g.outer, &g.m, &g.inner);
    return g;
}

static int unique_infer(vq__infer *c)
{
    vq__select_params *p = c->params;
    const vq__meta *x = &c->in[0];
    int rc = vq__check_dtype(c, 0, VQ__ANY);
    if (rc < 0 || (rc = axis_or_flat(c, x->ndim, &p->axis)) < 0)
        return rc;
    p->sorted = vq__attr_bool(c, "sorted", true);
    int64_t m = p->axis < 0 ? vq__numel(x->ndim, x->shape) : x->shape[p->axis], u = -1;
    const vq_tensor *xv = c->val ? c->val[0] : NULL;
    if (xv) {
        vq__unique_geom g = unique_geom(p, xv->ndim, xv->shape, xv->dtype);
        int64_t *w = g.m > 0 ? vq__malloc((size_t)(4 * g.m) * sizeof *w) : NULL;
        if (g.m > 0 && !w)
            return vq__op_fail(c->def, "out of memory for %lld slices", (long long)g.m);
        u = g.m > 0 ? vq__unique_run(xv->data, &g, w, NULL, 0, NULL, NULL, NULL) : 0;
        free(w);
    }
    vq__meta *y = &c->out[0];
    if (p->axis < 0) {
        y->dtype = x->dtype, y->ndim = 1, y->shape[0] = u;
    } else {
        *y = *x;
        y->shape[p->axis] = u;
    }
    for (int j = 1; j < 4; j++) {
        c->out[j].dtype = VQ_I64;
        c->out[j].ndim = 1;
        c->out[j].shape[0] = j == 2 ? m : u;
    }
    return 0;
}

static int unique_kernel(const vq__kcall *k)
{
    const vq__select_params *p = k->params;
    vq_tensor *x = k->in[0];
    vq__unique_geom g = unique_geom(p, x->ndim, x->shape, x->dtype);
    if (g.m == 0)
        return 0;
    vq_tensor *w;
    int rc = vq__kernel_scratch(k, VQ_I64, 4 * g.m, "sort scratch", &w);
    if (rc < 0)
        return rc;
    vq__unique_run(x->data, &g, w->data, k->out[0]->data, (int)vq_dtype_size(x->dtype),
                   k->out[1]->data, k->out[2]->data, k->out[3]->data);
    vq_tensor_release(w);
    return 0;
}

/* ---- compress ---- */

static const char *const compress_in[] = {"X", "Condition"};
static const char *const compress_grad_in[] = {"X", "Condition", "dOut"};

static const vq__attr_spec compress_attrs[] = {
    {"axis", VQ_ATTR_INT, false, "none"},
};

/* Out's meta (dims known from X, the count from Condition's value when
 * known) into out. */
static int compress_meta(vq__infer *c, vq__meta *out)
{
    vq__select_params *p = c->params;
    const vq__meta *x = &c->in[0];
    int rc = axis_or_flat(c, x->ndim, &p->axis);
    if (rc < 0 || (rc = vq__check_dtype(c, 1, 1u << VQ_BOOL)) < 0 ||
        (rc = vq__check_rank(c, 1, 1)) < 0)
        return rc;
    int64_t dim = p->axis < 0 ? vq__numel(x->ndim, x->shape) : x->shape[p->axis], n = -1;
    const vq_tensor *cond = c->val ? c->val[1] : NULL;
    if (cond && dim >= 0) {
        const uint8_t *b = cond->data;
        n = 0;
        for (int64_t i = 0; i < cond->numel; i++) {
            if (b[i] && i >= dim)
                return vq__in_fail(c, 1, "is true at %lld, past X's %lld %s", (long long)i,
                                   (long long)dim,
                                   p->axis < 0 ? "elements" : "entries on the axis");
            n += b[i] != 0;
        }
    }
    if (p->axis < 0) {
        out->dtype = x->dtype, out->ndim = 1, out->shape[0] = n;
    } else {
        *out = *x;
        out->shape[p->axis] = n;
    }
    return 0;
}

static int compress_infer(vq__infer *c)
{
    int rc = vq__check_dtype(c, 0, VQ__ANY);
    return rc < 0 ? rc : compress_meta(c, &c->out[0]);
}

/* X seen as [outer, dim, inner] around the axis (flattened: [1, n, 1]). */
static void compress_lines(const vq__select_params *p, const vq_tensor *x, int64_t *outer,
                           int64_t *dim, int64_t *inner)
{
    if (p->axis < 0)
        *outer = *inner = 1, *dim = x->numel;
    else
        vq__lines_of(x->ndim, x->shape, p->axis, outer, dim, inner);
}

static int compress_kernel(const vq__kcall *k)
{
    const vq__select_params *p = k->params;
    vq_tensor *x = k->in[0], *cond = k->in[1], *o = k->out[0];
    int64_t outer, dim, inner, len = cond->numel < 0 ? 0 : cond->numel;
    compress_lines(p, x, &outer, &dim, &inner);
    if (len > dim)
        len = dim;
    int64_t n = p->axis < 0 ? o->numel : o->shape[p->axis];
    size_t es = vq_dtype_size(x->dtype), row = (size_t)inner * es;
    const uint8_t *b = cond->data;
    for (int64_t q = 0; q < outer; q++)
        for (int64_t j = 0, t = 0; j < len; j++)
            if (b[j])
                memcpy((char *)o->data + (size_t)(q * n + t++) * row,
                       (const char *)x->data + (size_t)(q * dim + j) * row, row);
    return 0;
}

static int compress_grad(const vq__grad *g)
{
    int wanted = vq__grad_wanted(g);
    if (wanted <= 0 || !g->din[0])
        return wanted;
    const char *in[3] = {g->in[0], g->in[1], g->dout[0]};
    return vq__emit(g, "compress_grad", in, 3, &g->din[0], 1, g->attrs, g->nattrs);
}

static int compress_grad_infer(vq__infer *c)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 2)) < 0)
        return rc;
    vq__meta want;
    if ((rc = compress_meta(c, &want)) < 0)
        return rc;
    if ((rc = vq__check_shape_is(c, 2, &want, "compress's output shape")) < 0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

static int compress_grad_kernel(const vq__kcall *k)
{
    const vq__select_params *p = k->params;
    vq_tensor *cond = k->in[1], *g = k->in[2], *dx = k->out[0];
    int64_t outer, dim, inner, len = cond->numel;
    compress_lines(p, dx, &outer, &dim, &inner);
    if (len > dim)
        len = dim;
    int64_t n = p->axis < 0 ? g->numel : g->shape[p->axis];
    memset(dx->data, 0, dx->nbytes);
    size_t es = vq_dtype_size(dx->dtype), row = (size_t)inner * es;
    const uint8_t *b = cond->data;
    for (int64_t q = 0; q < outer; q++)
        for (int64_t j = 0, t = 0; j < len && t < n; j++)
            if (b[j])
                memcpy((char *)dx->data + (size_t)(q * dim + j) * row,
                       (const char *)g->data + (size_t)(q * n + t++) * row, row);
    return 0;
}

/* ---- non_max_suppression ---- */

static const char *const nms_in[] = {"Boxes", "Scores", "MaxOutputBoxesPerClass", "IouThreshold",
                                     "ScoreThreshold"};
static const char *const nms_out[] = {"Selected"};

static const vq__attr_spec nms_attrs[] = {
    {"center_point_box", VQ_ATTR_INT, false, "0"},
};

/* The problem of a call whose inputs are the host tensors in[]. */
static vq__nms_problem nms_problem(const vq__nms_params *p, vq_tensor *const *in, int nin)
{
    vq__nms_problem q = {.batches = in[0]->shape[0],
                         .spatial = in[0]->shape[1],
                         .classes = in[1]->shape[1],
                         .center = p->center,
                         .has_thr = nin > 4};
    double mo = scalar_of(in[2]);
    q.max_out = mo > (double)INT64_MAX / 2 ? INT64_MAX / 2 : (int64_t)mo;
    q.iou = (float)scalar_of(in[3]);
    q.score_thr = nin > 4 ? (float)scalar_of(in[4]) : 0;
    return q;
}

/* vq__nms_run's selection without comparing boxes that cannot overlap.
 * Exporters run NMS over every class at once with each class' boxes
 * shifted apart (torchvision's batched_nms), so thousands of boxes are
 * kept and a candidate checked against each of them would cost n * kept
 * IoUs (seconds for a detection model). Kept boxes go into buckets by
 * their left edge, each bucket as wide as the widest candidate: a kept
 * box that overlaps a candidate in x has its left edge within one width
 * of the candidate's, so only the buckets around it are looked at (one
 * more on each side absorbs rounding), and of those only boxes that
 * overlap it in x and y reach the IoU. The decision per pair is
 * vq__nms_suppresses', so the result is vq__nms_run's; candidates with a
 * coordinate that is not finite take the plain loop. Returns the count,
 * or -1 when out of memory. */
struct nms_grid {
    int64_t *ord, *sel, *next, *head;
    float *x0, *x1, *y0, *y1;
};

/* Box j's extent as vq__nms_suppresses computes it (the same float
 * operations, so the same values); false when a coordinate is not
 * finite. */
static bool nms_extent(struct nms_grid *g, const float *a, int center, int64_t j)
{
    if (center == 0) {
        g->x0[j] = fminf(a[1], a[3]), g->x1[j] = fmaxf(a[1], a[3]);
        g->y0[j] = fminf(a[0], a[2]), g->y1[j] = fmaxf(a[0], a[2]);
    } else {
        float w = a[2] / 2, h = a[3] / 2;
        g->x0[j] = a[0] - w, g->x1[j] = a[0] + w;
        g->y0[j] = a[1] - h, g->y1[j] = a[1] + h;
    }
    return isfinite(g->x0[j]) && isfinite(g->x1[j]) && isfinite(g->y0[j]) && isfinite(g->y1[j]) &&
           isfinite(a[0]) && isfinite(a[1]) && isfinite(a[2]) && isfinite(a[3]);
}

/* The kept boxes that may suppress candidate box j, then whether one does. */
static bool nms_grid_suppressed(const struct nms_grid *g, const float *bx, int64_t j,
                                const vq__nms_problem *p, float minx, float width, int64_t nb)
{
    float lo = g->x0[j] - width, hi = g->x1[j];
    int64_t first = lo <= minx ? 0 : (int64_t)((lo - minx) / width) - 1;
    int64_t last = (int64_t)((hi - minx) / width) + 1;
    first = first < 0 ? 0 : first;
    last = last >= nb ? nb - 1 : last;
    for (int64_t k = first; k <= last; k++)
        for (int64_t q = g->head[k]; q >= 0; q = g->next[q]) {
            int64_t i = g->sel[q];
            /* apart in x or y: vq__nms_suppresses says no */
            if (g->x1[i] <= g->x0[j] || g->x1[j] <= g->x0[i] || g->y1[i] <= g->y0[j] ||
                g->y1[j] <= g->y0[i])
                continue;
            if (vq__nms_suppresses(bx + j * 4, bx + i * 4, p->center, p->iou))
                return true;
        }
    return false;
}

static int64_t nms_grid_class(struct nms_grid *g, const float *bx, const float *s,
                              const vq__nms_problem *p, int64_t b, int64_t c, int64_t *out,
                              int64_t total)
{
    int64_t ns = p->spatial, n = vq__nms_order(s, ns, p, g->ord), kept = 0;
    float minx = INFINITY, maxx = -INFINITY, width = 0;
    bool finite = true;
    for (int64_t i = 0; i < n && finite; i++) {
        int64_t j = g->ord[i];
        finite = nms_extent(g, bx + j * 4, p->center, j);
        minx = fminf(minx, g->x0[j]);
        maxx = fmaxf(maxx, g->x0[j]);
        width = fmaxf(width, g->x1[j] - g->x0[j]);
    }
    /* buckets: at most about 4 per candidate (wider ones past that) */
    int64_t nb = 1;
    if (finite && n > 0) {
        if (!(width > 0))
            width = 1; /* nothing has area: nothing suppresses */
        double span = ((double)maxx - minx) / width;
        if (span > 4.0 * (double)n + 16)
            width = (float)(((double)maxx - minx) / (4.0 * (double)n + 16)) * 1.001f;
        nb = (int64_t)(((double)maxx - minx) / width) + 1;
    }
    for (int64_t k = 0; k < nb; k++)
        g->head[k] = -1;
    for (int64_t i = 0; i < n && kept < p->max_out; i++) {
        int64_t j = g->ord[i];
        bool sup = false;
        if (finite) {
            sup = nms_grid_suppressed(g, bx, j, p, minx, width, nb);
        } else {
            for (int64_t q = 0; q < kept && !sup; q++)
                sup = vq__nms_suppresses(bx + j * 4, bx + g->sel[q] * 4, p->center, p->iou);
        }
        if (sup)
            continue;
        if (finite) {
            int64_t k = (int64_t)((g->x0[j] - minx) / width);
            k = k >= nb ? nb - 1 : k;
            g->next[kept] = g->head[k];
            g->head[k] = kept;
        }
        g->sel[kept++] = j;
        if (out) {
            out[total * 3] = b;
            out[total * 3 + 1] = c;
            out[total * 3 + 2] = j;
        }
        total++;
    }
    return total;
}

static int64_t nms_fast(const float *boxes, const float *scores, const vq__nms_problem *p,
                        int64_t *out)
{
    if (p->max_out <= 0 || p->spatial <= 0)
        return 0;
    size_t ns = (size_t)p->spatial, heads = 4 * ns + 17;
    struct nms_grid g = {.ord = vq__malloc(ns * sizeof(int64_t)),
                         .sel = vq__malloc(ns * sizeof(int64_t)),
                         .next = vq__malloc(ns * sizeof(int64_t)),
                         .head = vq__malloc(heads * sizeof(int64_t)),
                         .x0 = vq__malloc(ns * sizeof(float)),
                         .x1 = vq__malloc(ns * sizeof(float)),
                         .y0 = vq__malloc(ns * sizeof(float)),
                         .y1 = vq__malloc(ns * sizeof(float))};
    int64_t total = -1;
    if (g.ord && g.sel && g.next && g.head && g.x0 && g.x1 && g.y0 && g.y1) {
        total = 0;
        for (int64_t b = 0; b < p->batches; b++)
            for (int64_t c = 0; c < p->classes; c++)
                total =
                    nms_grid_class(&g, boxes + b * p->spatial * 4,
                                   scores + (b * p->classes + c) * p->spatial, p, b, c, out, total);
    }
    free(g.ord);
    free(g.sel);
    free(g.next);
    free(g.head);
    free(g.x0);
    free(g.x1);
    free(g.y0);
    free(g.y1);
    return total;
}

static int nms_infer(vq__infer *c)
{
    vq__nms_params *p = c->params;
    const vq__meta *b = &c->in[0], *s = &c->in[1];
    int rc;
    if ((rc = vq__check_dtype(c, 0, 1u << VQ_F32)) < 0 ||
        (rc = vq__check_dtype(c, 1, 1u << VQ_F32)) < 0 || (rc = vq__check_rank(c, 0, 3)) < 0 ||
        (rc = vq__check_rank(c, 1, 3)) < 0 ||
        (rc = one_element(c, 2, (1u << VQ_I32) | (1u << VQ_I64))) < 0 ||
        (rc = one_element(c, 3, 1u << VQ_F32)) < 0 ||
        (c->nin > 4 && (rc = one_element(c, 4, 1u << VQ_F32)) < 0))
        return rc;
    if (!vq__dim_match(b->shape[2], 4))
        return vq__in_fail(c, 0, "has %lld coordinates per box, not 4", (long long)b->shape[2]);
    if (!vq__dim_match(b->shape[0], s->shape[0]) || !vq__dim_match(b->shape[1], s->shape[2]))
        return vq__op_fail(c->def,
                           "Boxes [batches, spatial, 4] is [%lld, %lld, 4] and Scores [batches, "
                           "classes, spatial] [%lld, %lld, %lld]: they disagree",
                           (long long)b->shape[0], (long long)b->shape[1], (long long)s->shape[0],
                           (long long)s->shape[1], (long long)s->shape[2]);
    int64_t center = vq__attr_int(c, "center_point_box", 0);
    if (center != 0 && center != 1)
        return vq__attr_fail(c, "center_point_box", "is %lld, not 0 or 1", (long long)center);
    p->center = (int)center;
    c->out[0].dtype = VQ_I64;
    c->out[0].ndim = 2;
    c->out[0].shape[0] = -1;
    c->out[0].shape[1] = 3;
    for (int i = 0; i < c->nin; i++)
        if (!c->val || !c->val[i])
            return 0;
    vq__nms_problem q = nms_problem(p, c->val, c->nin);
    if (!(q.iou >= 0 && q.iou <= 1))
        return vq__in_fail(c, 3, "is %g, not in [0, 1]", (double)q.iou);
    int64_t n = nms_fast(c->val[0]->data, c->val[1]->data, &q, NULL);
    if (n < 0)
        return vq__op_fail(c->def, "out of memory for %lld boxes", (long long)q.spatial);
    c->out[0].shape[0] = n;
    return 0;
}

static int nms_kernel(const vq__kcall *k)
{
    vq__nms_problem q = nms_problem(k->params, k->in, k->nin);
    if (nms_fast(k->in[0]->data, k->in[1]->data, &q, k->out[0]->data) < 0)
        return vq__op_fail(k->def, "out of memory for %lld boxes", (long long)q.spatial);
    return 0;
}

const vq__op_def vq__ops_dynamic[] = {
    {.type = "nonzero",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .value_in = 1u,
     .infer = nonzero_infer,
     .kernel = {nonzero_kernel},
     .cuda = VQ__CUDA_OP(vq__nonzero_gpu)},
    {.type = "top_k",
     .in_slots = top_k_in,
     .nin_slots = 2,
     .out_slots = top_k_out,
     .nout_slots = 2,
     .flags = VQ__OPTIONAL_IN,
     .value_in = 1u << 1,
     .attrs = top_k_attrs,
     .nattrs = 4,
     .params_size = sizeof(vq__top_k_params),
     .infer = top_k_infer,
     .kernel = {top_k_kernel},
     .cuda = VQ__CUDA_OP(vq__top_k_gpu),
     .grad = top_k_grad},
    {.type = "unique",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = unique_out,
     .nout_slots = 4,
     .value_in = 1u,
     .attrs = unique_attrs,
     .nattrs = 2,
     .params_size = sizeof(vq__select_params),
     .infer = unique_infer,
     .kernel = {unique_kernel},
     .cuda = VQ__CUDA_OP(vq__unique_gpu)},
    {.type = "compress",
     .in_slots = compress_in,
     .nin_slots = 2,
     .out_slots = out_slot,
     .nout_slots = 1,
     .value_in = 1u << 1,
     .attrs = compress_attrs,
     .nattrs = 1,
     .params_size = sizeof(vq__select_params),
     .infer = compress_infer,
     .kernel = {compress_kernel},
     .cuda = VQ__CUDA_OP(vq__compress_gpu),
     .grad = compress_grad},
    {.type = "compress_grad",
     .in_slots = compress_grad_in,
     .nin_slots = 3,
     .out_slots = dx_out,
     .nout_slots = 1,
     .value_in = 1u << 1,
     .attrs = compress_attrs,
     .nattrs = 1,
     .params_size = sizeof(vq__select_params),
     .infer = compress_grad_infer,
     .kernel = {compress_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__compress_grad_gpu)},
    {.type = "non_max_suppression",
     .in_slots = nms_in,
     .nin_slots = 5,
     .out_slots = nms_out,
     .nout_slots = 1,
     .flags = VQ__OPTIONAL_IN,
     .value_in = 0x1fu,
     .attrs = nms_attrs,
     .nattrs = 1,
     .params_size = sizeof(vq__nms_params),
     .infer = nms_infer,
     .kernel = {nms_kernel},
     .cuda = VQ__CUDA_OP(vq__nms_gpu)},
    {0},
};
