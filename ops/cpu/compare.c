/* Predicates and selects, the ops that control flow is written with:
 * comparisons (less ... not_equal) and logic (logical_and, _or, _not) that
 * make bool tensors, where(Cond, X, Y) that picks between two tensors, and
 * abs, maximum and minimum, with the gradient ops of the last four.
 *
 * All binary ones broadcast like numpy and walk the output in rows
 * (broadcast.c). Comparisons take two tensors of one dtype (bool too, for
 * equal and not_equal) and order NaN as IEEE does: every comparison with a
 * NaN is false except not_equal. maximum and minimum propagate NaN, as
 * numpy does. Integer abs wraps (abs of the most negative value is itself),
 * like the other integer arithmetic of varq.
 *
 * Gradients: where's flows to X where Cond holds and to Y elsewhere, summed
 * over the dims each was broadcast along (where_grad); maximum's to X where
 * X >= Y and to Y elsewhere, minimum's to X where X <= Y (minmax_grad: ties
 * go to X, as TensorFlow does); abs's is dOut * sign(X), 0 at 0 (abs_grad).
 * Comparisons and logic have none: their outputs are bool, which autodiff
 * never differentiates. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"

#include <string.h>

enum {
    CMP_LESS = VQ__CMP_LESS, CMP_LESS_EQUAL = VQ__CMP_LESS_EQUAL, CMP_GREATER = VQ__CMP_GREATER,
    CMP_GREATER_EQUAL = VQ__CMP_GREATER_EQUAL, CMP_EQUAL = VQ__CMP_EQUAL,
    CMP_NOT_EQUAL = VQ__CMP_NOT_EQUAL, LOGIC_AND = VQ__CMP_AND, LOGIC_OR = VQ__CMP_OR,
    MINMAX_MAX = VQ__CMP_MAXIMUM, MINMAX_MIN = VQ__CMP_MINIMUM,
};

static const char *const xy_in[] = {"X", "Y"};
static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};

#define BOOL_ONLY (1u << VQ_BOOL)

struct rows {
    const void *x, *y;
    void *out;
    int op;
};

/* ---- comparisons, logic, maximum, minimum: (X, Y) -> Out ---- */

/* Out is bool, except for maximum and minimum (X's dtype). */
static int binary_infer(vq__infer *c)
{
    int code = c->def->code, rc;
    unsigned mask = code >= MINMAX_MAX  ? VQ__NUMERIC
                    : code >= LOGIC_AND ? BOOL_ONLY
                    : code >= CMP_EQUAL ? VQ__ANY
                                        : VQ__NUMERIC;
    if ((rc = vq__check_dtype(c, 0, mask)) < 0 || (rc = vq__check_dtype(c, 1, mask)) < 0 ||
        (rc = vq__check_same_dtype(c, 0, 1)) < 0 || (rc = vq__broadcast_shapes(c, 0, 1, &c->out[0])) < 0)
        return rc;
    c->out[0].dtype = code >= MINMAX_MAX ? c->in[0].dtype : VQ_BOOL;
    return 0;
}

#define EACH(T, expr)                                                                         \
    for (int64_t i = 0; i < n; i++) {                                                         \
        T a = x[i * xs], b = y[i * ys];                                                       \
        o[i] = (expr);                                                                        \
    }

#define COMPARE_ROW(T)                                                                        \
    static void compare_row_##T(void *user, int64_t xo, int64_t yo, int64_t oo, int64_t n,    \
                                int64_t xs, int64_t ys)                                       \
    {                                                                                         \
        struct rows *r = user;                                                                \
        const T *x = (const T *)r->x + xo, *y = (const T *)r->y + yo;                         \
        uint8_t *o = (uint8_t *)r->out + oo;                                                  \
        switch (r->op) {                                                                      \
        case CMP_LESS: EACH(T, a < b); break;                                                 \
        case CMP_LESS_EQUAL: EACH(T, a <= b); break;                                          \
        case CMP_GREATER: EACH(T, a > b); break;                                              \
        case CMP_GREATER_EQUAL: EACH(T, a >= b); break;                                       \
        case CMP_EQUAL: EACH(T, a == b); break;                                               \
        case CMP_NOT_EQUAL: EACH(T, a != b); break;                                           \
        case LOGIC_AND: EACH(T, a && b); break;                                               \
        default: EACH(T, a || b); break;                                                      \
        }                                                                                     \
    }

COMPARE_ROW(float)
COMPARE_ROW(double)
COMPARE_ROW(int32_t)
COMPARE_ROW(int64_t)
COMPARE_ROW(uint8_t)

typedef void (*row_fn)(void *, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t);

static row_fn compare_row_of(vq_dtype dt)
{
    switch (dt) {
    case VQ_F32: return compare_row_float;
    case VQ_F64: return compare_row_double;
    case VQ_I32: return compare_row_int32_t;
    case VQ_I64: return compare_row_int64_t;
    default: return compare_row_uint8_t;
    }
}

/* logical_not(X) and abs(X): Out is X's dtype and shape; the dtypes
 * allowed are the op's code (a dtype mask). */
static int unary_infer(vq__infer *c)
{
    int rc = vq__check_dtype(c, 0, (unsigned)c->def->code);
    if (rc < 0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

static int not_kernel(const vq__kcall *k)
{
    const uint8_t *x = k->in[0]->data;
    uint8_t *o = k->out[0]->data;
    for (int64_t i = 0; i < k->in[0]->numel; i++)
        o[i] = !x[i];
    return 0;
}

/* a != a: a is NaN, which wins (for integers it is never true). */
#define MINMAX_ROW(T)                                                                         \
    static void minmax_row_##T(void *user, int64_t xo, int64_t yo, int64_t oo, int64_t n,     \
                               int64_t xs, int64_t ys)                                        \
    {                                                                                         \
        struct rows *r = user;                                                                \
        const T *x = (const T *)r->x + xo, *y = (const T *)r->y + yo;                         \
        T *o = (T *)r->out + oo;                                                              \
        if (r->op == MINMAX_MAX) {                                                            \
            EACH(T, a > b || a != a ? a : b);                                                 \
        } else {                                                                              \
            EACH(T, a < b || a != a ? a : b);                                                 \
        }                                                                                     \
    }

MINMAX_ROW(float)
MINMAX_ROW(double)
MINMAX_ROW(int32_t)
MINMAX_ROW(int64_t)

static int binary_kernel(const vq__kcall *k)
{
    vq_tensor *x = k->in[0], *y = k->in[1], *out = k->out[0];
    int code = k->def->code;
    vq__bcast b;
    vq__bcast_init(&b, out, x, y);
    struct rows r = {x->data, y->data, out->data, code};
    row_fn row = compare_row_of(x->dtype);
    if (code >= MINMAX_MAX)
        row = x->dtype == VQ_F32   ? minmax_row_float
              : x->dtype == VQ_F64 ? minmax_row_double
              : x->dtype == VQ_I32 ? minmax_row_int32_t
                                   : minmax_row_int64_t;
    vq__bcast_rows(&b, &r, row);
    return 0;
}

static const char *const grad3_out[] = {"dZ"};
static const char *const minmax_grad_in[] = {"dOut", "X", "Y"};

static int minmax_grad(const vq__grad *g)
{
    return vq__emit_xy_grads(g, "minmax_grad");
}

/* minmax_grad(dOut, X, Y) -> dZ, attrs op (maximum, minimum) and wrt. */
static int minmax_grad_infer(vq__infer *c)
{
    const vq_attr *op = vq__attr_find(c, "op");
    int code = !strcmp(op->s, "maximum") ? MINMAX_MAX : !strcmp(op->s, "minimum") ? MINMAX_MIN : -1;
    if (code < 0)
        return vq__attr_fail(c, "op", "\"%s\" is not maximum or minimum", op->s);
    int64_t wrt = vq__attr_int(c, "wrt", 0);
    if (wrt != 0 && wrt != 1)
        return vq__attr_fail(c, "wrt", "is %lld, not 0 (X) or 1 (Y)", (long long)wrt);
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0 ||
        (rc = vq__check_same_dtype(c, 0, 2)) < 0 ||
        (rc = vq__check_broadcast_is(c, 0, 1, 2, "the broadcast shape of X and Y")) < 0)
        return rc;
    vq__select_grad_params *p = c->params;
    p->op = code;
    p->wrt = (int)wrt;
    c->out[0] = c->in[1 + wrt];
    return 0;
}

struct grad_rows {
    const void *g, *x, *y;
    void *dz;
    int op, wrt;
};

/* X's share: x >= y (maximum) or x <= y (minimum); a NaN in x takes it. */
#define MINMAX_GRAD_ROW(T)                                                                    \
    static void minmax_grad_row_##T(void *user, int64_t xo, int64_t yo, int64_t oo,           \
                                    int64_t n, int64_t xs, int64_t ys)                        \
    {                                                                                         \
        struct grad_rows *r = user;                                                           \
        const T *g = (const T *)r->g + oo, *x = (const T *)r->x + xo, *y = (const T *)r->y + yo; \
        T *dz = (T *)r->dz + (r->wrt ? yo : xo);                                              \
        int64_t zs = r->wrt ? ys : xs;                                                        \
        for (int64_t i = 0; i < n; i++) {                                                     \
            T a = x[i * xs], b = y[i * ys];                                                   \
            bool to_x = (r->op == MINMAX_MAX ? a >= b : a <= b) || a != a;                    \
            if (to_x == !r->wrt)                                                              \
                dz[i * zs] += g[i];                                                           \
        }                                                                                     \
    }

MINMAX_GRAD_ROW(float)
MINMAX_GRAD_ROW(double)

static int minmax_grad_kernel(const vq__kcall *k)
{
    const vq__select_grad_params *p = k->params;
    vq_tensor *g = k->in[0], *x = k->in[1], *y = k->in[2], *dz = k->out[0];
    memset(dz->data, 0, dz->nbytes);
    vq__bcast b;
    vq__bcast_init(&b, g, x, y);
    struct grad_rows r = {g->data, x->data, y->data, dz->data, p->op, p->wrt};
    vq__bcast_rows(&b, &r, g->dtype == VQ_F32 ? minmax_grad_row_float : minmax_grad_row_double);
    return 0;
}

/* ---- where(Cond, X, Y) -> Out ---- */

static const char *const where_in[] = {"Cond", "X", "Y"};

/* Out's shape: Cond, X and Y broadcast together. */
static int where_infer(vq__infer *c)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, BOOL_ONLY)) < 0 || (rc = vq__check_dtype(c, 1, VQ__ANY)) < 0 ||
        (rc = vq__check_same_dtype(c, 1, 2)) < 0)
        return rc;
    vq__meta m[2];
    if ((rc = vq__broadcast_shapes(c, 0, 1, &m[0])) < 0)
        return rc;
    m[1] = c->in[2];
    vq__infer all = *c;
    all.in = m; /* (Cond with X) against Y: a message names slots 0 and 1 */
    if (vq__broadcast_shapes(&all, 0, 1, &c->out[0]) < 0) {
        char a[100], b[100], d[100];
        return vq__op_fail(c->def, "Cond %s, X %s and Y %s do not broadcast together",
                           vq__shape_str(a, sizeof a, c->in[0].ndim, c->in[0].shape),
                           vq__shape_str(b, sizeof b, c->in[1].ndim, c->in[1].shape),
                           vq__shape_str(d, sizeof d, c->in[2].ndim, c->in[2].shape));
    }
    c->out[0].dtype = c->in[1].dtype;
    return 0;
}

struct where_rows {
    const uint8_t *cond;
    const char *v;
    char *out;
    size_t size; /* bytes per element */
    uint8_t take; /* copy v where cond equals this */
};

static void where_row(void *user, int64_t co, int64_t vo, int64_t oo, int64_t n, int64_t cs,
                      int64_t vs)
{
    struct where_rows *r = user;
    const uint8_t *c = r->cond + co;
    size_t z = r->size;
    const char *v = r->v + (size_t)vo * z;
    char *o = r->out + (size_t)oo * z;
    for (int64_t i = 0; i < n; i++)
        if (c[i * cs] == r->take)
            memcpy(o + (size_t)i * z, v + (size_t)(i * vs) * z, z);
}

/* Two passes over Out: X where Cond holds, then Y where it does not (the
 * row walk broadcasts two operands into the output at a time). */
static int where_kernel(const vq__kcall *k)
{
    vq_tensor *cond = k->in[0], *out = k->out[0];
    for (int pass = 0; pass < 2; pass++) {
        vq_tensor *v = k->in[1 + pass];
        vq__bcast b;
        vq__bcast_init(&b, out, cond, v);
        struct where_rows r = {cond->data, v->data, out->data, vq_dtype_size(v->dtype),
                               (uint8_t)!pass};
        vq__bcast_rows(&b, &r, where_row);
    }
    return 0;
}

static const char *const where_grad_in[] = {"dOut", "Cond", "Z"};

static int where_grad(const vq__grad *g)
{
    for (int i = 0; i < 2; i++) {
        if (!g->din[1 + i])
            continue;
        const char *in[3] = {g->dout[0], g->in[0], g->in[1 + i]};
        vq_attr wrt = VQ_ATTR_I("wrt", i);
        int rc = vq__emit(g, "where_grad", in, 3, &g->din[1 + i], 1, &wrt, 1);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* where_grad(dOut, Cond, Z) -> dZ, attr wrt: Z is where's X (wrt 0) or Y
 * (1); dZ gets dOut where Cond is (wrt 0) or is not (1) true, summed to
 * Z's shape. */
static int where_grad_infer(vq__infer *c)
{
    int64_t wrt = vq__attr_int(c, "wrt", 0);
    if (wrt != 0 && wrt != 1)
        return vq__attr_fail(c, "wrt", "is %lld, not 0 (X) or 1 (Y)", (long long)wrt);
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_dtype(c, 1, BOOL_ONLY)) < 0 ||
        (rc = vq__check_same_dtype(c, 0, 2)) < 0)
        return rc;
    /* Cond and Z each broadcast to dOut's shape (Out's, which the third
     * operand may have widened too). */
    for (int k = 1; k <= 2; k++) {
        vq__meta m;
        if ((rc = vq__broadcast_shapes(c, 0, k, &m)) < 0)
            return rc;
        m.dtype = c->in[0].dtype;
        if ((rc = vq__check_shape_is(c, 0, &m, "a shape that Cond and Z broadcast to")) < 0)
            return rc;
    }
    ((vq__select_grad_params *)c->params)->wrt = (int)wrt;
    c->out[0] = c->in[2];
    return 0;
}

struct where_grad_rows {
    const void *g;
    const uint8_t *cond;
    void *dz;
    uint8_t take;
};

#define WHERE_GRAD_ROW(T)                                                                     \
    static void where_grad_row_##T(void *user, int64_t co, int64_t zo, int64_t oo, int64_t n, \
                                   int64_t cs, int64_t zs)                                    \
    {                                                                                         \
        struct where_grad_rows *r = user;                                                     \
        const T *g = (const T *)r->g + oo;                                                    \
        const uint8_t *c = r->cond + co;                                                      \
        T *dz = (T *)r->dz + zo;                                                              \
        for (int64_t i = 0; i < n; i++)                                                       \
            if (c[i * cs] == r->take)                                                         \
                dz[i * zs] += g[i];                                                           \
    }

WHERE_GRAD_ROW(float)
WHERE_GRAD_ROW(double)

static int where_grad_kernel(const vq__kcall *k)
{
    vq_tensor *g = k->in[0], *cond = k->in[1], *dz = k->out[0];
    memset(dz->data, 0, dz->nbytes);
    vq__bcast b;
    vq__bcast_init(&b, g, cond, k->in[2]);
    struct where_grad_rows r = {g->data, cond->data, dz->data,
                                (uint8_t)(((const vq__select_grad_params *)k->params)->wrt == 0)};
    vq__bcast_rows(&b, &r, g->dtype == VQ_F32 ? where_grad_row_float : where_grad_row_double);
    return 0;
}

/* ---- abs(X) -> Out, abs_grad(dOut, X) -> dX ---- */

static int abs_kernel(const vq__kcall *k)
{
    vq_tensor *x = k->in[0], *o = k->out[0];
    int64_t n = x->numel;
    switch (x->dtype) {
    case VQ_F32: {
        const float *a = x->data;
        float *b = o->data;
        for (int64_t i = 0; i < n; i++)
            b[i] = a[i] < 0 ? -a[i] : a[i] == 0 ? 0.0f : a[i]; /* abs(-0) is +0 */
        break;
    }
    case VQ_F64: {
        const double *a = x->data;
        double *b = o->data;
        for (int64_t i = 0; i < n; i++)
            b[i] = a[i] < 0 ? -a[i] : a[i] == 0 ? 0.0 : a[i];
        break;
    }
    case VQ_I32: {
        const int32_t *a = x->data;
        int32_t *b = o->data;
        for (int64_t i = 0; i < n; i++)
            b[i] = a[i] < 0 ? (int32_t)(0u - (uint32_t)a[i]) : a[i]; /* wraps at INT32_MIN */
        break;
    }
    default: {
        const int64_t *a = x->data;
        int64_t *b = o->data;
        for (int64_t i = 0; i < n; i++)
            b[i] = a[i] < 0 ? (int64_t)(0u - (uint64_t)a[i]) : a[i];
        break;
    }
    }
    return 0;
}

static const char *const abs_grad_in[] = {"dOut", "X"};
static const char *const abs_grad_out[] = {"dX"};

static int abs_grad(const vq__grad *g)
{
    const char *in[2] = {g->dout[0], g->in[0]};
    return vq__emit(g, "abs_grad", in, 2, &g->din[0], 1, NULL, 0);
}

static int abs_grad_infer(vq__infer *c)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0 ||
        (rc = vq__check_shape_is(c, 0, &c->in[1], "X's shape")) < 0)
        return rc;
    c->out[0] = c->in[1];
    return 0;
}

#define ABS_GRAD(T)                                                                           \
    static void abs_grad_##T(const T *g, const T *x, T *dx, int64_t n)                        \
    {                                                                                         \
        for (int64_t i = 0; i < n; i++)                                                       \
            dx[i] = x[i] > 0 ? g[i] : x[i] < 0 ? -g[i] : (T)0;                                \
    }

ABS_GRAD(float)
ABS_GRAD(double)

static int abs_grad_kernel(const vq__kcall *k)
{
    vq_tensor *g = k->in[0], *x = k->in[1], *dx = k->out[0];
    if (g->dtype == VQ_F32)
        abs_grad_float(g->data, x->data, dx->data, g->numel);
    else
        abs_grad_double(g->data, x->data, dx->data, g->numel);
    return 0;
}

static const vq__attr_spec minmax_grad_attrs[] = {
    {"op", VQ_ATTR_STRING, true, NULL},
    {"wrt", VQ_ATTR_INT, true, NULL},
};

static const vq__attr_spec where_grad_attrs[] = {
    {"wrt", VQ_ATTR_INT, true, NULL},
};

#define COMPARE(name, c)                                                                         \
    {                                                                                            \
        .type = name, .in_slots = xy_in, .nin_slots = 2, .out_slots = out_slot, .nout_slots = 1, \
        .code = c, .infer = binary_infer, .kernel = {binary_kernel},                             \
        .cuda = VQ__CUDA_OP(vq__compare_gpu)                                                     \
    }

#define MINMAX(name, c)                                                                          \
    {                                                                                            \
        .type = name, .in_slots = xy_in, .nin_slots = 2, .out_slots = out_slot, .nout_slots = 1, \
        .flags = VQ__INPLACE_OK, .code = c, .infer = binary_infer, .kernel = {binary_kernel},    \
        .cuda = VQ__CUDA_OP(vq__compare_gpu), .grad = minmax_grad                                \
    }

const vq__op_def vq__ops_compare[] = {
    COMPARE("less", CMP_LESS),
    COMPARE("less_equal", CMP_LESS_EQUAL),
    COMPARE("greater", CMP_GREATER),
    COMPARE("greater_equal", CMP_GREATER_EQUAL),
    COMPARE("equal", CMP_EQUAL),
    COMPARE("not_equal", CMP_NOT_EQUAL),
    COMPARE("logical_and", LOGIC_AND),
    COMPARE("logical_or", LOGIC_OR),
    {.type = "logical_not",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .flags = VQ__INPLACE_OK,
     .code = BOOL_ONLY,
     .infer = unary_infer,
     .kernel = {not_kernel},
     .cuda = VQ__CUDA_OP(vq__not_gpu)},
    MINMAX("maximum", MINMAX_MAX),
    MINMAX("minimum", MINMAX_MIN),
    {.type = "minmax_grad",
     .in_slots = minmax_grad_in,
     .nin_slots = 3,
     .out_slots = grad3_out,
     .nout_slots = 1,
     .attrs = minmax_grad_attrs,
     .nattrs = 2,
     .params_size = sizeof(vq__select_grad_params),
     .infer = minmax_grad_infer,
     .kernel = {minmax_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__minmax_grad_gpu)},
    {.type = "where",
     .in_slots = where_in,
     .nin_slots = 3,
     .out_slots = out_slot,
     .nout_slots = 1,
     .infer = where_infer,
     .kernel = {where_kernel},
     .cuda = VQ__CUDA_OP(vq__where_gpu),
     .grad = where_grad},
    {.type = "where_grad",
     .in_slots = where_grad_in,
     .nin_slots = 3,
     .out_slots = grad3_out,
     .nout_slots = 1,
     .attrs = where_grad_attrs,
     .nattrs = 1,
     .params_size = sizeof(vq__select_grad_params),
     .infer = where_grad_infer,
     .kernel = {where_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__where_grad_gpu)},
    {.type = "abs",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .flags = VQ__INPLACE_OK,
     .code = VQ__NUMERIC,
     .infer = unary_infer,
     .kernel = {abs_kernel},
     .cuda = VQ__CUDA_OP(vq__abs_gpu),
     .grad = abs_grad},
    {.type = "abs_grad",
     .in_slots = abs_grad_in,
     .nin_slots = 2,
     .out_slots = abs_grad_out,
     .nout_slots = 1,
     .infer = abs_grad_infer,
     .kernel = {abs_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__abs_grad_gpu)},
    {0},
};
