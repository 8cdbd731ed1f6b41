/* Extrema: argmax and argmin (the position of the largest / smallest
 * element along one axis, as i64) and reduce_max and reduce_min (the
 * extremum over a set of axes), with reduce_minmax_grad, the gradient of
 * the latter two. argmax and argmin have no gradient: their output is an
 * index.
 *
 * argmax / argmin(X; axis, keepdim, select_last_index) -> Out: X seen as
 * [outer, len, inner] around the axis; among equal extrema the first is
 * picked, the last with select_last_index. NaN counts as the extremum, as
 * numpy's argmax and argmin have it: the first NaN (the last with
 * select_last_index) wins. An empty axis has no position to pick and is an
 * error, as in numpy.
 *
 * reduce_max / reduce_min(X; axes, keepdim) -> Out follow sum and mean
 * (ops/cpu/reduce.c): an empty axes list reduces every axis, keepdim keeps
 * reduced dims as 1. NaN propagates (any NaN in the set gives NaN, as
 * numpy's max); between -0 and +0, max picks +0 and min -0, so the result
 * does not depend on the order the elements are visited in (the CUDA
 * kernels reduce in a tree). The extremum of an empty set is ONNX's: -inf
 * for max and +inf for min in f32 and f64, the dtype's lowest / highest
 * value in i32 and i64.
 *
 * reduce_minmax_grad(X, Out, dOut; op, axes, keepdim) -> dX: dOut flows to
 * the elements equal to their extremum (NaN counting as equal to a NaN
 * extremum), split evenly among ties: each of the k equal elements gets
 * dOut / k, in X's dtype, as TensorFlow's reduce_max and PyTorch's amax
 * have it. The others get 0. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"
#include "../shape_shared.h" /* vq__lines_of */

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};
static const char *const grad_in[] = {"X", "Out", "dOut"};
static const char *const grad_out[] = {"dX"};

static const char *const op_names[] = {"reduce_max", "reduce_min"};

/* ---- comparisons: the rules of the file comment ---- */

/* Whether v replaces the running extremum a (reduce_max / reduce_min).
 * Integers never hold NaN or signed zeros: the extra tests are false. */
#define TAKES_MAX(v, a)                                                                    \
    (!nan_of(a) && (nan_of(v) || (v) > (a) || ((v) == (a) && signbit_of(a) && !signbit_of(v))))
#define TAKES_MIN(v, a)                                                                    \
    (!nan_of(a) && (nan_of(v) || (v) < (a) || ((v) == (a) && !signbit_of(a) && signbit_of(v))))

static inline bool nan_of(double v)
{
    return isnan(v);
}

static inline bool signbit_of(double v)
{
    return signbit(v) != 0;
}

/* Whether v at a later position replaces the best so far b (argmax /
 * argmin): NaN is the extremum; ties go to the later one only with last. */
static inline bool arg_better(double v, double b, int op, bool last)
{
    if (isnan(b))
        return last && isnan(v);
    if (isnan(v))
        return true;
    if (op == VQ__EXTREMUM_MAX)
        return last ? v >= b : v > b;
    return last ? v <= b : v < b;
}

/* ---- argmax, argmin ---- */

static const vq__attr_spec arg_attrs[] = {
    {"axis", VQ_ATTR_INT, false, "0"},
    {"keepdim", VQ_ATTR_BOOL, false, "true"},
    {"select_last_index", VQ_ATTR_BOOL, false, "false"},
};

static int arg_infer(vq__infer *c)
{
    const vq__meta *x = &c->in[0];
    vq__arg_params *p = c->params;
    int rc = vq__check_dtype(c, 0, VQ__NUMERIC);
    if (rc < 0)
        return rc;
    if (x->ndim == 0)
        return vq__in_fail(c, 0, "is a scalar (rank 0); %s needs at least one dim",
                           c->def->type);
    if ((rc = vq__axis(c, "axis", vq__attr_int(c, "axis", 0), x->ndim, &p->axis)) < 0)
        return rc;
    if (x->shape[p->axis] == 0) {
        char sx[100];
        return vq__in_fail(c, 0, "dim %d (the axis) of %s is 0: no element to pick", p->axis,
                           vq__shape_str(sx, sizeof sx, x->ndim, x->shape));
    }
    p->op = c->def->code;
    p->keepdim = vq__attr_bool(c, "keepdim", true);
    p->last = vq__attr_bool(c, "select_last_index", false);
    vq__meta *out = &c->out[0];
    out->dtype = VQ_I64;
    out->ndim = 0;
    for (int d = 0; d < x->ndim; d++)
        if (d != p->axis)
            out->shape[out->ndim++] = x->shape[d];
        else if (p->keepdim)
            out->shape[out->ndim++] = 1;
    return 0;
}

/* Each lane (o, i) keeps its best position in Out and compares the next
 * element along the axis with X at that position. */
#define ARG_LOOP(T)                                                                        \
    do {                                                                                   \
        const T *xs = x->data;                                                             \
        for (int64_t o = 0; o < outer; o++) {                                              \
            const T *xo = xs + o * len * inner;                                            \
            int64_t *best = out + o * inner;                                               \
            for (int64_t i = 0; i < inner; i++)                                            \
                best[i] = 0;                                                               \
            for (int64_t l = 1; l < len; l++)                                              \
                for (int64_t i = 0; i < inner; i++)                                        \
                    if (arg_better((double)xo[l * inner + i], (double)xo[best[i] * inner + i], \
                                   p->op, p->last))                                        \
                        best[i] = l;                                                       \
        }                                                                                  \
    } while (0)

static int arg_kernel(const vq__kcall *k)
{
    const vq__arg_params *p = k->params;
    vq_tensor *x = k->in[0];
    int64_t *out = k->out[0]->data, outer, len, inner;
    vq__lines_of(x->ndim, x->shape, p->axis, &outer, &len, &inner);
    /* i64 values past 2^53 compare as doubles only approximately: their own
     * loop. */
    if (x->dtype == VQ_I64) {
        const int64_t *xs = x->data;
        for (int64_t o = 0; o < outer; o++) {
            const int64_t *xo = xs + o * len * inner;
            int64_t *best = out + o * inner;
            for (int64_t i = 0; i < inner; i++)
                best[i] = 0;
            for (int64_t l = 1; l < len; l++)
                for (int64_t i = 0; i < inner; i++) {
                    int64_t v = xo[l * inner + i], b = xo[best[i] * inner + i];
                    bool take = p->op == VQ__EXTREMUM_MAX ? (p->last ? v >= b : v > b)
                                                          : (p->last ? v <= b : v < b);
                    if (take)
                        best[i] = l;
                }
        }
        return 0;
    }
    switch (x->dtype) {
    case VQ_F32: ARG_LOOP(float); break;
    case VQ_F64: ARG_LOOP(double); break;
    default: ARG_LOOP(int32_t); break;
    }
    return 0;
}

/* ---- reduce_max, reduce_min: shapes ---- */

static const vq__attr_spec reduce_attrs[] = {
    {"axes", VQ_ATTR_INTS, false, "[]"},
    {"keepdim", VQ_ATTR_BOOL, false, "false"},
};

static int extremum_infer(vq__infer *c)
{
    vq__extremum_params *p = c->params;
    int rc = vq__check_dtype(c, 0, VQ__NUMERIC);
    if (rc < 0)
        return rc;
    p->op = c->def->code;
    return vq__reduce_plan(c, &p->mask, &c->out[0]);
}

/* One innermost row of vq__reduce_walk_rows: X's elements xo .. xo + n - 1
 * (consecutive), Out's oo, oo + os, ... (os 0 or 1). */
struct row {
    int64_t xo, oo, n, os;
};

/* ---- reduce_max, reduce_min: the kernel ---- */

struct fold {
    const void *x;
    void *out;
    int op;
};

#define FOLD_ROW(T)                                                                        \
    static void fold_row_##T(void *user, int64_t xo_, int64_t oo_, int64_t n_, int64_t os_) \
    {                                                                                      \
        struct row r = {xo_, oo_, n_, os_};                                                \
        struct fold *f = user;                                                             \
        const T *x = (const T *)f->x + r.xo;                                               \
        T *o = (T *)f->out + r.oo;                                                         \
        if (f->op == VQ__EXTREMUM_MAX) {                                                   \
            for (int64_t i = 0; i < r.n; i++)                                              \
                if (TAKES_MAX(x[i], o[i * r.os]))                                          \
                    o[i * r.os] = x[i];                                                    \
        } else {                                                                           \
            for (int64_t i = 0; i < r.n; i++)                                              \
                if (TAKES_MIN(x[i], o[i * r.os]))                                          \
                    o[i * r.os] = x[i];                                                    \
        }                                                                                  \
    }

FOLD_ROW(float)
FOLD_ROW(double)
FOLD_ROW(int32_t)
FOLD_ROW(int64_t)

#define FILL(T, v)                                                                         \
    do {                                                                                   \
        T *o = out->data;                                                                  \
        for (int64_t i = 0; i < out->numel; i++)                                           \
            o[i] = (v);                                                                    \
    } while (0)

static int extremum_kernel(const vq__kcall *k)
{
    const vq__extremum_params *p = k->params;
    vq_tensor *x = k->in[0], *out = k->out[0];
    bool max = p->op == VQ__EXTREMUM_MAX;
    void (*row)(void *, int64_t, int64_t, int64_t, int64_t);
    switch (x->dtype) {
    case VQ_F32:
        FILL(float, max ? -INFINITY : INFINITY);
        row = fold_row_float;
        break;
    case VQ_F64:
        FILL(double, max ? -INFINITY : INFINITY);
        row = fold_row_double;
        break;
    case VQ_I32:
        FILL(int32_t, max ? INT32_MIN : INT32_MAX);
        row = fold_row_int32_t;
        break;
    default:
        FILL(int64_t, max ? INT64_MIN : INT64_MAX);
        row = fold_row_int64_t;
        break;
    }
    if (x->numel == 0)
        return 0;
    vq__reduce_walk w;
    vq__reduce_walk_init(&w, x, p->mask);
    struct fold f = {.x = x->data, .out = out->data, .op = p->op};
    vq__reduce_walk_rows(&w, &f, row);
    return 0;
}

static int extremum_grad(const vq__grad *g)
{
    int wanted = vq__grad_wanted(g);
    if (wanted <= 0)
        return wanted;
    vq_attr at[3];
    int n = 0;
    for (int i = 0; i < g->nattrs && n < 2; i++)
        at[n++] = g->attrs[i];
    at[n++] = VQ_ATTR_S("op", g->def->type);
    const char *in[3] = {g->in[0], g->out[0], g->dout[0]};
    return vq__emit(g, "reduce_minmax_grad", in, 3, &g->din[0], 1, at, n);
}

/* ---- reduce_minmax_grad(X, Out, dOut; op, axes, keepdim) -> dX ---- */

static const vq__attr_spec grad_attrs[] = {
    {"op", VQ_ATTR_STRING, true, NULL},
    {"axes", VQ_ATTR_INTS, false, "[]"},
    {"keepdim", VQ_ATTR_BOOL, false, "false"},
};

static int extremum_grad_infer(vq__infer *c)
{
    vq__extremum_params *p = c->params;
    const vq_attr *op = vq__attr_find(c, "op");
    p->op = -1;
    for (int i = 0; i < 2; i++)
        if (!strcmp(op->s, op_names[i]))
            p->op = i;
    if (p->op < 0)
        return vq__attr_fail(c, "op", "\"%s\" is not reduce_max or reduce_min", op->s);
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0 ||
        (rc = vq__check_same_dtype(c, 0, 2)) < 0)
        return rc;
    vq__meta want;
    if ((rc = vq__reduce_plan(c, &p->mask, &want)) < 0 ||
        (rc = vq__check_shape_is(c, 1, &want, "X's reduced shape")) < 0 ||
        (rc = vq__check_shape_is(c, 2, &want, "X's reduced shape")) < 0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

struct spread {
    const void *x, *out, *g;
    void *dx;
    int64_t *count; /* per element of Out: how many elements of X equal it */
};

#define IS_TIE(v, m) ((v) == (m) || (nan_of(v) && nan_of(m)))

#define SPREAD_ROWS(T)                                                                     \
    static void count_row_##T(void *user, int64_t xo_, int64_t oo_, int64_t n_, int64_t os_) \
    {                                                                                      \
        struct row r = {xo_, oo_, n_, os_};                                                \
        struct spread *s = user;                                                           \
        const T *x = (const T *)s->x + r.xo, *m = (const T *)s->out + r.oo;                \
        int64_t *c = s->count + r.oo;                                                      \
        for (int64_t i = 0; i < r.n; i++)                                                  \
            c[i * r.os] += IS_TIE(x[i], m[i * r.os]);                                      \
    }                                                                                      \
    static void spread_row_##T(void *user, int64_t xo_, int64_t oo_, int64_t n_, int64_t os_) \
    {                                                                                      \
        struct row r = {xo_, oo_, n_, os_};                                                \
        struct spread *s = user;                                                           \
        const T *x = (const T *)s->x + r.xo, *m = (const T *)s->out + r.oo;                \
        const T *g = (const T *)s->g + r.oo;                                               \
        const int64_t *c = s->count + r.oo;                                                \
        T *dx = (T *)s->dx + r.xo;                                                         \
        for (int64_t i = 0; i < r.n; i++)                                                  \
            dx[i] = IS_TIE(x[i], m[i * r.os]) ? g[i * r.os] / (T)c[i * r.os] : (T)0;       \
    }

SPREAD_ROWS(float)
SPREAD_ROWS(double)

static int extremum_grad_kernel(const vq__kcall *k)
{
    const vq__extremum_params *p = k->params;
    vq_tensor *x = k->in[0], *m = k->in[1], *g = k->in[2], *dx = k->out[0];
    if (dx->numel == 0)
        return 0;
    struct spread s = {.x = x->data, .out = m->data, .g = g->data, .dx = dx->data};
    s.count = vq__calloc((size_t)m->numel, sizeof *s.count);
    if (!s.count)
        return vq__fail(VQ_ENOMEM, "%s: out of memory for %lld counts", k->def->type,
                        (long long)m->numel);
    vq__reduce_walk w;
    vq__reduce_walk_init(&w, x, p->mask);
    bool f32 = x->dtype == VQ_F32;
    vq__reduce_walk_rows(&w, &s, f32 ? count_row_float : count_row_double);
    vq__reduce_walk_rows(&w, &s, f32 ? spread_row_float : spread_row_double);
    free(s.count);
    return 0;
}

#define ARG(name, c)                                                                            \
    {                                                                                           \
        .type = name, .in_slots = x_in, .nin_slots = 1, .out_slots = out_slot, .nout_slots = 1, \
        .attrs = arg_attrs, .nattrs = 3, .code = c, .params_size = sizeof(vq__arg_params),      \
        .infer = arg_infer, .kernel = {arg_kernel}, .cuda = VQ__CUDA_OP(vq__arg_gpu)            \
    }

#define EXTREMUM(name, c)                                                                          \
    {                                                                                              \
        .type = name, .in_slots = x_in, .nin_slots = 1, .out_slots = out_slot, .nout_slots = 1,    \
        .attrs = reduce_attrs, .nattrs = 2, .code = c, .params_size = sizeof(vq__extremum_params), \
        .infer = extremum_infer, .kernel = {extremum_kernel},                                      \
        .cuda = VQ__CUDA_OP(vq__extremum_gpu), .grad = extremum_grad                               \
    }

const vq__op_def vq__ops_extremum[] = {
    ARG("argmax", VQ__EXTREMUM_MAX),
    ARG("argmin", VQ__EXTREMUM_MIN),
    EXTREMUM("reduce_max", VQ__EXTREMUM_MAX),
    EXTREMUM("reduce_min", VQ__EXTREMUM_MIN),
    {.type = "reduce_minmax_grad",
     .in_slots = grad_in,
     .nin_slots = 3,
     .out_slots = grad_out,
     .nout_slots = 1,
     .attrs = grad_attrs,
     .nattrs = 3,
     .params_size = sizeof(vq__extremum_params),
     .infer = extremum_grad_infer,
     .kernel = {extremum_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__extremum_grad_gpu)},
    {0},
};
