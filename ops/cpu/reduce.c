/* Reductions: sum and mean over a set of axes, and their gradient ops,
 * which broadcast dOut back over the reduced axes.
 *
 * Both directions walk X in row-major order. Before walking, dims of size 1
 * are dropped and neighbouring dims that are both reduced or both kept are
 * merged, so X becomes at most eight alternating runs of kept and reduced
 * dims; each innermost row then either folds into one output element
 * (reduced innermost dim) or adds elementwise into a contiguous run of the
 * output (kept innermost dim).
 *
 * f32 sums accumulate in double; f64 sums accumulate in the output. Integer
 * sums wrap: they are done in the unsigned type of the same width (signed
 * overflow would be undefined). The mean of zero elements is NaN, as in
 * numpy: 0 / 0. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const grad_names[] = {"sum_grad", "mean_grad"};

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};
static const char *const grad_in[] = {"X", "dOut"};
static const char *const grad_out[] = {"dX"};

int vq__reduce_plan(const vq__infer *c, unsigned *mask, vq__meta *out)
{
    const vq__meta *x = &c->in[0];
    const vq_attr *axes = vq__attr_find(c, "axes");
    int n = axes ? axes->n : 0;
    if (n > 0 && x->ndim == 0)
        return vq__attr_fail(c, "axes", "X is a scalar (rank 0): it has no axis to reduce");
    *mask = 0;
    for (int i = 0; i < n; i++) {
        int a, rc = vq__axis(c, "axes", axes->ints[i], x->ndim, &a);
        if (rc < 0)
            return rc;
        if (*mask & (1u << a))
            return vq__attr_fail(c, "axes", "axis %lld repeats axis %d", (long long)axes->ints[i],
                                 a);
        *mask |= 1u << a;
    }
    if (n == 0)
        *mask = (1u << x->ndim) - 1;
    bool keepdim = vq__attr_bool(c, "keepdim", false);
    out->dtype = x->dtype;
    out->ndim = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (!(*mask & (1u << d)))
            out->shape[out->ndim++] = x->shape[d];
        else if (keepdim)
            out->shape[out->ndim++] = 1;
    }
    return 0;
}

static int reduce_infer(vq__infer *c)
{
    int rc = vq__check_dtype(c, 0, c->def->code == VQ__REDUCE_MEAN ? VQ__FLOATS : VQ__NUMERIC);
    if (rc < 0)
        return rc;
    return vq__reduce_plan(c, &((vq__reduce_params *)c->params)->mask, &c->out[0]);
}

/* ---- walking X against the reduced output ---- */

void vq__reduce_walk_init(vq__reduce_walk *w, const vq_tensor *x, unsigned mask)
{
    bool reduced[VQ_MAX_DIMS];
    w->ndim = 0;
    for (int d = 0; d < x->ndim; d++) {
        if (x->shape[d] == 1)
            continue;
        bool r = mask & (1u << d);
        if (w->ndim > 0 && reduced[w->ndim - 1] == r) {
            w->shape[w->ndim - 1] *= x->shape[d];
            continue;
        }
        reduced[w->ndim] = r;
        w->shape[w->ndim++] = x->shape[d];
    }
    int64_t s = 1;
    for (int k = w->ndim - 1; k >= 0; k--) {
        w->ostride[k] = reduced[k] ? 0 : s;
        if (!reduced[k])
            s *= w->shape[k];
    }
}

/* Calls row(user, X offset, Out offset, length, Out's stride 0 or 1) for
 * each innermost row of a non-empty X. X's offsets are consecutive. */
void vq__reduce_walk_rows(const vq__reduce_walk *w, void *user,
                          void (*row)(void *user, int64_t xo, int64_t oo, int64_t n, int64_t os))
{
    if (w->ndim == 0) {
        row(user, 0, 0, 1, 0);
        return;
    }
    int last = w->ndim - 1;
    int64_t n = w->shape[last], idx[VQ_MAX_DIMS] = {0}, xo = 0, oo = 0;
    for (;;) {
        row(user, xo, oo, n, w->ostride[last]);
        xo += n;
        int d = last - 1;
        for (; d >= 0; d--) {
            oo += w->ostride[d];
            if (++idx[d] < w->shape[d])
                break;
            oo -= w->ostride[d] * w->shape[d];
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}

/* ---- forward kernels ---- */

struct sum_rows {
    const void *x;
    void *acc; /* out numel accumulators: double, or the output itself */
};

/* A is the accumulator type: double for floats, the unsigned type of the
 * same width for integers (which wraps). */
#define SUM_ROW(name, T, A)                                                         \
    static void name(void *user, int64_t xo, int64_t oo, int64_t n, int64_t os)     \
    {                                                                               \
        struct sum_rows *r = user;                                                  \
        const T *x = (const T *)r->x + xo;                                          \
        A *acc = (A *)r->acc + oo;                                                  \
        if (os == 0) {                                                              \
            A s = 0;                                                                \
            for (int64_t i = 0; i < n; i++)                                         \
                s += (A)x[i];                                                       \
            acc[0] += s;                                                            \
        } else {                                                                    \
            for (int64_t i = 0; i < n; i++)                                         \
                acc[i] += (A)x[i];                                                  \
        }                                                                           \
    }

SUM_ROW(sum_row_f32, float, double)
SUM_ROW(sum_row_f64, double, double)
/* The output's int32_t / int64_t elements are accessed as their unsigned
 * counterparts, which C's aliasing rules allow. */
SUM_ROW(sum_row_i32, int32_t, uint32_t)
SUM_ROW(sum_row_i64, int64_t, uint64_t)

static int reduce_kernel(const vq__kcall *k)
{
    const vq__reduce_params *p = k->params;
    vq_tensor *x = k->in[0], *out = k->out[0];
    int64_t n = out->numel;
    if (n == 0)
        return 0;
    double *tmp = NULL;
    struct sum_rows r = {.x = x->data, .acc = out->data};
    void (*row)(void *, int64_t, int64_t, int64_t, int64_t);
    switch (x->dtype) {
    case VQ_F32:
        tmp = vq__calloc((size_t)n, sizeof *tmp);
        if (!tmp)
            return vq__fail(VQ_ENOMEM, "%s: out of memory for %lld accumulators", k->def->type,
                            (long long)n);
        r.acc = tmp;
        row = sum_row_f32;
        break;
    case VQ_F64: row = sum_row_f64; break;
    case VQ_I32: row = sum_row_i32; break;
    default: row = sum_row_i64; break;
    }
    if (!tmp)
        memset(out->data, 0, out->nbytes);
    if (x->numel > 0) {
        vq__reduce_walk w;
        vq__reduce_walk_init(&w, x, p->mask);
        vq__reduce_walk_rows(&w, &r, row);
    }
    if (k->def->code == VQ__REDUCE_MEAN) {
        /* count == 0 only when a reduced dim is 0: the mean is then NaN. */
        int64_t count = x->numel / n;
        double *acc = x->dtype == VQ_F32 ? tmp : out->data;
        for (int64_t i = 0; i < n; i++)
            acc[i] = count ? acc[i] / (double)count : NAN;
    }
    if (tmp) {
        float *o = out->data;
        for (int64_t i = 0; i < n; i++)
            o[i] = (float)tmp[i];
        free(tmp);
    }
    return 0;
}

static int reduce_grad(const vq__grad *g)
{
    if (!g->din[0])
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output Out");
    const char *in[2] = {g->in[0], g->dout[0]};
    /* sum and mean have exactly the attributes of their gradient ops. */
    return vq__emit(g, grad_names[g->def->code], in, 2, &g->din[0], 1, g->attrs, g->nattrs);
}

/* ---- gradient ops: dX = dOut broadcast over the reduced axes (/ count) ---- */

static int reduce_grad_infer(vq__infer *c)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0)
        return rc;
    vq__meta want;
    if ((rc = vq__reduce_plan(c, &((vq__reduce_params *)c->params)->mask, &want)) < 0)
        return rc;
    if ((rc = vq__check_shape_is(c, 1, &want, "X's reduced shape")) < 0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

struct spread_rows {
    const void *g;
    void *dx;
    double scale;
};

#define SPREAD_ROW(name, T)                                                      \
    static void name(void *user, int64_t xo, int64_t oo, int64_t n, int64_t os)  \
    {                                                                            \
        struct spread_rows *r = user;                                            \
        const T *g = (const T *)r->g + oo;                                       \
        T *dx = (T *)r->dx + xo;                                                 \
        for (int64_t i = 0; i < n; i++)                                          \
            dx[i] = (T)(g[i * os] * r->scale);                                   \
    }

SPREAD_ROW(spread_row_f32, float)
SPREAD_ROW(spread_row_f64, double)

static int reduce_grad_kernel(const vq__kcall *k)
{
    const vq__reduce_params *p = k->params;
    vq_tensor *g = k->in[1], *dx = k->out[0];
    if (dx->numel == 0)
        return 0;
    /* dX non-empty means every reduced dim is non-zero, and so is dOut. */
    struct spread_rows r = {.g = g->data, .dx = dx->data, .scale = 1.0};
    if (k->def->code == VQ__REDUCE_MEAN)
        r.scale = 1.0 / (double)(dx->numel / g->numel);
    vq__reduce_walk w;
    vq__reduce_walk_init(&w, dx, p->mask);
    vq__reduce_walk_rows(&w, &r, dx->dtype == VQ_F32 ? spread_row_f32 : spread_row_f64);
    return 0;
}

static const vq__attr_spec reduce_attrs[] = {
    {"axes", VQ_ATTR_INTS, false, "[]"},
    {"keepdim", VQ_ATTR_BOOL, false, "false"},
};

#define REDUCE(name, c)                                                                          \
    {                                                                                            \
        .type = name, .in_slots = x_in, .nin_slots = 1, .out_slots = out_slot, .nout_slots = 1,  \
        .attrs = reduce_attrs, .nattrs = 2, .code = c, .params_size = sizeof(vq__reduce_params), \
        .infer = reduce_infer, .kernel = {reduce_kernel}, .cuda = VQ__CUDA_OP(vq__reduce_gpu),   \
        .grad = reduce_grad                                                                      \
    }

#define REDUCE_GRAD(name, c)                                                                       \
    {                                                                                              \
        .type = name, .in_slots = grad_in, .nin_slots = 2, .out_slots = grad_out, .nout_slots = 1, \
        .attrs = reduce_attrs, .nattrs = 2, .code = c, .params_size = sizeof(vq__reduce_params),   \
        .infer = reduce_grad_infer, .kernel = {reduce_grad_kernel},                                \
        .cuda = VQ__CUDA_OP(vq__reduce_grad_gpu)                                                   \
    }

const vq__op_def vq__ops_reduce[] = {
    REDUCE("sum", VQ__REDUCE_SUM),
    REDUCE("mean", VQ__REDUCE_MEAN),
    REDUCE_GRAD("sum_grad", VQ__REDUCE_SUM),
    REDUCE_GRAD("mean_grad", VQ__REDUCE_MEAN),
    {0},
};
