/* reduce_prod (numpy's prod, ONNX's ReduceProd) over a set of axes, and
 * its gradient op.
 *
 * reduce_prod(X; axes, keepdim) -> Out follows sum (reduce.c: the same
 * attributes, the same output shape; every axis when axes is empty): X
 * f32, f64, i32 or i64, each output element the product of its elements
 * taken in X's row-major order, starting from 1 (so the product of none is
 * 1), in double for floats and in the unsigned type of X's width for
 * integers (which wrap).
 *
 * reduce_prod_grad(X, dOut; axes, keepdim) -> dX (f32, f64): each element
 * gets dOut times the product of the other elements of its group, without
 * dividing by zero: with no zero in the group, the group's product over
 * the element; with one, that zero element gets the product of the
 * nonzero ones and the others 0; with more, every element 0. A first pass
 * keeps each group's product of nonzero elements and its count of zeros
 * (in double), a second computes dX from them. The CUDA kernels
 * (ops/cuda/prod.cu) multiply in the same order: the CPU's bits. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"

#include <string.h>

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};
static const char *const grad_in[] = {"X", "dOut"};
static const char *const grad_out[] = {"dX"};

static const vq__attr_spec prod_attrs[] = {
    {"axes", VQ_ATTR_INTS, false, "[]"},
    {"keepdim", VQ_ATTR_BOOL, false, "false"},
};

static int prod_infer(vq__infer *c)
{
    int rc = vq__check_dtype(c, 0, VQ__NUMERIC);
    if (rc < 0)
        return rc;
    return vq__reduce_plan(c, &((vq__reduce_params *)c->params)->mask, &c->out[0]);
}

/* reduce_prod_grad(X, dOut; axes, keepdim) -> dX. */
static int prod_grad_infer(vq__infer *c)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0)
        return rc;
    vq__meta want;
    if ((rc = vq__reduce_plan(c, &((vq__reduce_params *)c->params)->mask, &want)) < 0 ||
        (rc = vq__check_shape_is(c, 1, &want, "reduce_prod's output shape")) < 0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

static int prod_grad(const vq__grad *g)
{
    int wanted = vq__grad_wanted(g);
    if (wanted <= 0)
        return wanted;
    const char *in[2] = {g->in[0], g->dout[0]};
    return vq__emit(g, "reduce_prod_grad", in, 2, &g->din[0], 1, g->attrs, g->nattrs);
}

/* ---- the kernels ---- */

struct prod_rows {
    const void *x, *g;
    void *acc, *dx; /* acc: Out's accumulators (A), or [nonzero product, zeros] pairs */
};

/* A: double for floats, the unsigned type of X's width for integers. */
#define PROD_ROW(name, T, A)                                                    \
    static void name(void *user, int64_t xo, int64_t oo, int64_t n, int64_t os) \
    {                                                                           \
        struct prod_rows *r = user;                                             \
        const T *x = (const T *)r->x + xo;                                      \
        A *acc = (A *)r->acc + oo;                                              \
        for (int64_t i = 0; i < n; i++)                                         \
            acc[i * os] = (A)(acc[i * os] * (A)x[i]);                           \
    }

PROD_ROW(prod_row_f32, float, double)
PROD_ROW(prod_row_f64, double, double)
PROD_ROW(prod_row_i32, int32_t, uint32_t)
PROD_ROW(prod_row_i64, int64_t, uint64_t)

static int prod_kernel(const vq__kcall *k)
{
    const vq__reduce_params *p = k->params;
    vq_tensor *x = k->in[0], *out = k->out[0];
    int64_t no = out->numel;
    if (no == 0)
        return 0;
    vq_tensor *acc = NULL;
    if (x->dtype == VQ_F32) {
        int rc = vq__kernel_scratch(k, VQ_F64, no, "products", &acc);
        if (rc < 0)
            return rc;
    }
    void *a = acc ? acc->data : out->data;
    for (int64_t i = 0; i < no; i++) {
        switch (x->dtype) {
        case VQ_I32: ((uint32_t *)a)[i] = 1; break;
        case VQ_I64: ((uint64_t *)a)[i] = 1; break;
        default: ((double *)a)[i] = 1; break;
        }
    }
    if (x->numel > 0) {
        struct prod_rows r = {.x = x->data, .acc = a};
        vq__reduce_walk w;
        vq__reduce_walk_init(&w, x, p->mask);
        vq__reduce_walk_rows(&w, &r,
                             x->dtype == VQ_F32   ? prod_row_f32
                             : x->dtype == VQ_F64 ? prod_row_f64
                             : x->dtype == VQ_I32 ? prod_row_i32
                                                  : prod_row_i64);
    }
    if (acc) {
        for (int64_t i = 0; i < no; i++)
            ((float *)out->data)[i] = (float)((const double *)a)[i];
        vq_tensor_release(acc);
    }
    return 0;
}

/* Pass 1: each group's product of nonzero elements and count of zeros. */
#define NONZERO_ROW(name, T)                                                    \
    static void name(void *user, int64_t xo, int64_t oo, int64_t n, int64_t os) \
    {                                                                           \
        struct prod_rows *r = user;                                             \
        const T *x = (const T *)r->x + xo;                                      \
        double *acc = (double *)r->acc + 2 * oo;                                \
        for (int64_t i = 0; i < n; i++) {                                       \
            double *pz = acc + 2 * i * os;                                      \
            if (x[i] == 0)                                                      \
                pz[1] += 1;                                                     \
            else                                                                \
                pz[0] *= (double)x[i];                                          \
        }                                                                       \
    }

/* Pass 2: dX from them. */
#define SPREAD_ROW(name, T)                                                                     \
    static void name(void *user, int64_t xo, int64_t oo, int64_t n, int64_t os)                 \
    {                                                                                           \
        struct prod_rows *r = user;                                                             \
        const T *x = (const T *)r->x + xo, *g = (const T *)r->g + oo;                           \
        const double *acc = (const double *)r->acc + 2 * oo;                                    \
        T *dx = (T *)r->dx + xo;                                                                \
        for (int64_t i = 0; i < n; i++) {                                                       \
            const double *pz = acc + 2 * i * os;                                                \
            double v = pz[1] == 0 ? pz[0] / (double)x[i] : pz[1] == 1 && x[i] == 0 ? pz[0] : 0; \
            dx[i] = (T)((double)g[i * os] * v);                                                 \
        }                                                                                       \
    }

NONZERO_ROW(nonzero_row_f32, float)
NONZERO_ROW(nonzero_row_f64, double)
SPREAD_ROW(spread_row_f32, float)
SPREAD_ROW(spread_row_f64, double)

static int prod_grad_kernel(const vq__kcall *k)
{
    const vq__reduce_params *p = k->params;
    vq_tensor *x = k->in[0], *g = k->in[1], *dx = k->out[0];
    if (dx->numel == 0)
        return 0;
    /* dX non-empty: every reduced dim is non-zero, and dOut too */
    vq_tensor *acc;
    int rc = vq__kernel_scratch(k, VQ_F64, 2 * g->numel, "products and zero counts", &acc);
    if (rc < 0)
        return rc;
    double *a = acc->data;
    for (int64_t i = 0; i < g->numel; i++) {
        a[2 * i] = 1;
        a[2 * i + 1] = 0;
    }
    struct prod_rows r = {.x = x->data, .g = g->data, .acc = a, .dx = dx->data};
    vq__reduce_walk w;
    vq__reduce_walk_init(&w, x, p->mask);
    bool f32 = x->dtype == VQ_F32;
    vq__reduce_walk_rows(&w, &r, f32 ? nonzero_row_f32 : nonzero_row_f64);
    vq__reduce_walk_rows(&w, &r, f32 ? spread_row_f32 : spread_row_f64);
    vq_tensor_release(acc);
    return 0;
}

const vq__op_def vq__ops_prod[] = {
    {.type = "reduce_prod",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .attrs = prod_attrs,
     .nattrs = 2,
     .params_size = sizeof(vq__reduce_params),
     .infer = prod_infer,
     .kernel = {prod_kernel},
     .cuda = VQ__CUDA_OP(vq__reduce_prod_gpu),
     .grad = prod_grad},
    {.type = "reduce_prod_grad",
     .in_slots = grad_in,
     .nin_slots = 2,
     .out_slots = grad_out,
     .nout_slots = 1,
     .attrs = prod_attrs,
     .nattrs = 2,
     .params_size = sizeof(vq__reduce_params),
     .infer = prod_grad_infer,
     .kernel = {prod_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__reduce_prod_gpu)},
    {0},
};
