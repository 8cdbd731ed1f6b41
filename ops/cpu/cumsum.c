/* cumsum (numpy's cumsum, ONNX's CumSum): running sums along one axis, and
 * its gradient, which is cumsum itself.
 *
 * cumsum(X; axis, exclusive, reverse) -> Out, X f32, f64, i32 or i64 of
 * rank >= 1 (integers wrap): Out's element k along the axis is the sum of
 * X's elements 0..k (exclusive: 0..k-1, 0 for the first), or k..len-1
 * (reverse; with exclusive k+1..len-1), added one after the other in that
 * order and in X's dtype, as numpy's cumsum does.
 *
 * The gradient of an inclusive forward running sum is the reverse one of
 * dOut, and that of an exclusive one the exclusive reverse one: the maker
 * emits cumsum(dOut; axis, exclusive, !reverse). The CPU kernel walks the
 * lines along the axis a row of `inner` lanes at a time (each lane's sum
 * in the same order); the CUDA kernel runs a thread per lane: the CPU's
 * bits. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"
#include "../shape_shared.h" /* vq__lines_of */

#include <string.h>

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};

static const vq__attr_spec cumsum_attrs[] = {
    {"axis", VQ_ATTR_INT, false, "0"},
    {"exclusive", VQ_ATTR_BOOL, false, "false"},
    {"reverse", VQ_ATTR_BOOL, false, "false"},
};

static int cumsum_infer(vq__infer *c)
{
    vq__cumsum_params *p = c->params;
    int rc = vq__check_dtype(c, 0, VQ__NUMERIC);
    if (rc < 0)
        return rc;
    if (c->in[0].ndim == 0)
        return vq__in_fail(c, 0, "is a scalar (rank 0); cumsum needs an axis");
    if ((rc = vq__axis(c, "axis", vq__attr_int(c, "axis", 0), c->in[0].ndim, &p->axis)) < 0)
        return rc;
    p->exclusive = vq__attr_bool(c, "exclusive", false);
    p->reverse = vq__attr_bool(c, "reverse", false);
    c->out[0] = c->in[0];
    return 0;
}

/* Lines [outer, len, inner]: row k of a line block is its inner lanes at
 * position k. Each row of Out is the previous row of Out plus a row of X
 * (the same row, or the one before it when exclusive), in the direction
 * reverse says. Integers add as unsigned (wrapping). */
#define CUMSUM(T, U)                                                                         \
    do {                                                                                     \
        const T *xs = x->data;                                                               \
        T *os = out->data;                                                                   \
        for (int64_t o = 0; o < outer; o++) {                                                \
            const T *xb = xs + o * len * inner;                                              \
            T *ob = os + o * len * inner;                                                    \
            for (int64_t s = 0; s < len; s++) {                                              \
                int64_t k = p->reverse ? len - 1 - s : s, prev = p->reverse ? k + 1 : k - 1; \
                T *row = ob + k * inner;                                                     \
                const T *add = xb + (p->exclusive ? prev : k) * inner;                       \
                if (s == 0 && p->exclusive)                                                  \
                    memset(row, 0, (size_t)inner * sizeof(T));                               \
                else if (s == 0)                                                             \
                    memcpy(row, add, (size_t)inner * sizeof(T));                             \
                else                                                                         \
                    for (int64_t i = 0; i < inner; i++)                                      \
                        row[i] = (T)((U)ob[prev * inner + i] + (U)add[i]);                   \
            }                                                                                \
        }                                                                                    \
    } while (0)

static int cumsum_kernel(const vq__kcall *k)
{
    const vq__cumsum_params *p = k->params;
    vq_tensor *x = k->in[0], *out = k->out[0];
    int64_t outer, len, inner;
    vq__lines_of(x->ndim, x->shape, p->axis, &outer, &len, &inner);
    if (x->numel == 0)
        return 0;
    switch (x->dtype) {
    case VQ_F32: CUMSUM(float, float); break;
    case VQ_F64: CUMSUM(double, double); break;
    case VQ_I32: CUMSUM(int32_t, uint32_t); break;
    default: CUMSUM(int64_t, uint64_t); break;
    }
    return 0;
}

static int cumsum_grad(const vq__grad *g)
{
    int wanted = vq__grad_wanted(g);
    if (wanted <= 0)
        return wanted;
    bool exclusive = false, reverse = false;
    int64_t axis = 0;
    for (int i = 0; i < g->nattrs; i++) {
        if (!strcmp(g->attrs[i].name, "axis"))
            axis = g->attrs[i].i;
        else if (!strcmp(g->attrs[i].name, "exclusive"))
            exclusive = g->attrs[i].i != 0;
        else if (!strcmp(g->attrs[i].name, "reverse"))
            reverse = g->attrs[i].i != 0;
    }
    vq_attr at[3] = {VQ_ATTR_I("axis", axis), VQ_ATTR_B("exclusive", exclusive),
                     VQ_ATTR_B("reverse", !reverse)};
    return vq__emit(g, "cumsum", &g->dout[0], 1, &g->din[0], 1, at, 3);
}

const vq__op_def vq__ops_cumsum[] = {
    {.type = "cumsum",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .attrs = cumsum_attrs,
     .nattrs = 3,
     .params_size = sizeof(vq__cumsum_params),
     .infer = cumsum_infer,
     .kernel = {cumsum_kernel},
     .cuda = VQ__CUDA_OP(vq__cumsum_gpu),
     .grad = cumsum_grad},
    {0},
};
