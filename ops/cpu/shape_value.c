/* Ops whose values are shapes and index ranges, what imported models
 * compute their shapes with when a dim is known only from the feed (a
 * batch, a sequence length): shape (ONNX's Shape) and range (ONNX's
 * Range). Their results are small integer tensors that the ops reading a
 * shape from an input (reshape, expand, fill_constant: vq__op_def's
 * value_in) consume when they run.
 *
 * shape(X; start, end) -> Out: i64 [n], X's dims start..end-1, both
 * clamped to [0, rank] after adding rank to a negative one, as ONNX's
 * Shape-15 reads them (n is 0 when end <= start). X's values are not
 * read, only its dims: its output is known as soon as X's shape is.
 *
 * range(Start, Limit, Delta) -> Out: 1-D of their dtype (f32, f64, i32,
 * i64), element i = Start + i * Delta, for max(ceil((Limit - Start) /
 * Delta), 0) elements (ONNX's Range). The three are scalars whose values
 * decide Out's length, so inference reads them (value_in); Delta 0 is an
 * error. The product i * Delta is computed in the dtype, as ONNX's
 * reference does, and the CUDA kernel computes the same expression: the
 * CPU's bits.
 *
 * Neither has a gradient: their outputs depend on shapes, or on bounds
 * that only place the elements. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"

#include <math.h>
#include <string.h>

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};
static const char *const range_in[] = {"Start", "Limit", "Delta"};

/* ---- shape ---- */

static const vq__attr_spec shape_attrs[] = {
    {"start", VQ_ATTR_INT, false, "0"},
    {"end", VQ_ATTR_INT, false, "none"},
};

static int clamp_dim(int64_t v, int rank)
{
    if (v < 0)
        v += rank;
    return v < 0 ? 0 : v > rank ? rank : (int)v;
}

static int shape_infer(vq__infer *c)
{
    vq__shape_params *p = c->params;
    int rank = c->in[0].ndim;
    const vq_attr *end = vq__attr_find(c, "end");
    p->start = clamp_dim(vq__attr_int(c, "start", 0), rank);
    int e = end ? clamp_dim(end->i, rank) : rank;
    p->count = e > p->start ? e - p->start : 0;
    c->out[0].dtype = VQ_I64;
    c->out[0].ndim = 1;
    c->out[0].shape[0] = p->count;
    return 0;
}

static int shape_kernel(const vq__kcall *k)
{
    const vq__shape_params *p = k->params;
    int64_t *o = k->out[0]->data;
    for (int i = 0; i < p->count; i++)
        o[i] = k->in[0]->shape[p->start + i];
    return 0;
}

/* ---- range ---- */

/* One scalar bound's value as a double (the count's arithmetic) and as an
 * integer (the integer dtypes' elements). */
static void scalar_value(const vq_tensor *t, double *d, int64_t *i)
{
    switch (t->dtype) {
    case VQ_F32: *d = *(const float *)t->data, *i = 0; break;
    case VQ_F64: *d = *(const double *)t->data, *i = 0; break;
    case VQ_I32: *i = *(const int32_t *)t->data, *d = (double)*i; break;
    default: *i = *(const int64_t *)t->data, *d = (double)*i; break;
    }
}

static int range_infer(vq__infer *c)
{
    vq__range_params *p = c->params;
    int rc = vq__check_dtype(c, 0, VQ__NUMERIC);
    for (int i = 1; i < 3 && rc == 0; i++)
        rc = vq__check_same_dtype(c, 0, i);
    if (rc < 0)
        return rc;
    for (int i = 0; i < 3; i++)
        if (vq__numel(c->in[i].ndim, c->in[i].shape) != 1 && c->in[i].ndim != 0)
            return vq__in_fail(c, i, "must be a scalar (one element)");
    c->out[0].dtype = c->in[0].dtype;
    c->out[0].ndim = 1;
    c->out[0].shape[0] = -1;
    if (!c->val || !c->val[0] || !c->val[1] || !c->val[2])
        return 0; /* the length is known when the op runs */
    double start, limit, delta;
    int64_t ilimit;
    scalar_value(c->val[0], &start, &p->istart);
    scalar_value(c->val[1], &limit, &ilimit);
    scalar_value(c->val[2], &delta, &p->idelta);
    p->start = start, p->delta = delta;
    for (int i = 0; i < 3; i++) {
        double v = i == 0 ? start : i == 1 ? limit : delta;
        if (isnan(v) || (i == 2 && v == 0))
            return vq__in_fail(c, i, "is %g: range has no length", v);
    }
    double n = ceil((limit - start) / delta);
    if (!(n <= (double)((int64_t)1 << 40)))
        return vq__op_fail(c->def, "(Limit - Start) / Delta is %g elements, more than 2^40", n);
    int64_t span;
    if ((c->in[0].dtype == VQ_I32 || c->in[0].dtype == VQ_I64) &&
        !__builtin_sub_overflow(ilimit, p->istart, &span)) /* exact: big bounds lose no bits */
        n = (double)(span / p->idelta + (span % p->idelta != 0 && (span > 0) == (p->idelta > 0)));
    c->out[0].shape[0] = n > 0 ? (int64_t)n : 0;
    return 0;
}

static int range_kernel(const vq__kcall *k)
{
    const vq__range_params *p = k->params;
    vq_tensor *o = k->out[0];
    switch (o->dtype) {
    case VQ_F32: {
        float s = (float)p->start, d = (float)p->delta;
        for (int64_t i = 0; i < o->numel; i++)
            ((float *)o->data)[i] = s + (float)i * d;
        break;
    }
    case VQ_F64:
        for (int64_t i = 0; i < o->numel; i++)
            ((double *)o->data)[i] = p->start + (double)i * p->delta;
        break;
    case VQ_I32:
        for (int64_t i = 0; i < o->numel; i++)
            ((int32_t *)o->data)[i] = (int32_t)(p->istart + i * p->idelta);
        break;
    default:
        for (int64_t i = 0; i < o->numel; i++)
            ((int64_t *)o->data)[i] = p->istart + i * p->idelta;
        break;
    }
    return 0;
}

const vq__op_def vq__ops_shape_value[] = {
    {.type = "shape",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .flags = VQ__META_ONLY,
     .attrs = shape_attrs,
     .nattrs = 2,
     .params_size = sizeof(vq__shape_params),
     .infer = shape_infer,
     .kernel = {shape_kernel},
     .cuda = VQ__CUDA_OP(vq__shape_gpu)},
    {.type = "range",
     .in_slots = range_in,
     .nin_slots = 3,
     .out_slots = out_slot,
     .nout_slots = 1,
     .value_in = 7u,
     .params_size = sizeof(vq__range_params),
     .infer = range_infer,
     .kernel = {range_kernel},
     .cuda = VQ__CUDA_OP(vq__range_gpu)},
    {0},
};
