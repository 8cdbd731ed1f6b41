/* reverse_sequence (ONNX ReverseSequence): the first Lens[b] steps of each
 * batch entry b reversed in time, the rest copied, and its gradient, which
 * is reverse_sequence itself.
 *
 * reverse_sequence(X, Lens; batch_axis, time_axis) -> Out, X of any dtype
 * and rank >= 2 whose dims 0 and 1 are the batch and time axes (batch_axis
 * 1, time_axis 0, ONNX's default: [T, B, ...]; or 0 and 1: [B, T, ...]),
 * Lens i32 or i64 of shape [B], each in [0, T] (0 and 1 reverse nothing):
 * Out[t, b, ...] = X[Lens[b] - 1 - t, b, ...] for t < Lens[b], else
 * X[t, b, ...]. A length outside [0, T] fails the op, naming the first
 * (on the GPU too: a device-side check, ops/cuda/checks.c).
 *
 * Out is a permutation of X's rows of `inner` elements (the dims after the
 * first two) that is its own inverse: the gradient is
 * reverse_sequence(dOut, Lens) with the same attributes. The CPU kernel
 * copies rows; the CUDA one (ops/cuda/sequence.cu) an element per thread:
 * the same bytes. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"

#include <string.h>

static const char *const in_slots[] = {"X", "Lens"};
static const char *const out_slot[] = {"Out"};

static const vq__attr_spec attrs[] = {
    {"batch_axis", VQ_ATTR_INT, false, "1"},
    {"time_axis", VQ_ATTR_INT, false, "0"},
};

static int reverse_sequence_infer(vq__infer *c)
{
    vq__reverse_sequence_params *p = c->params;
    int rc = vq__check_dtype(c, 0, VQ__ANY);
    if (rc < 0 || (rc = vq__check_dtype(c, 1, (1u << VQ_I32) | (1u << VQ_I64))) < 0 ||
        (rc = vq__check_rank(c, 1, 1)) < 0)
        return rc;
    if (c->in[0].ndim < 2)
        return vq__in_fail(c, 0, "has rank %d; reverse_sequence needs a batch and a time axis",
                           c->in[0].ndim);
    int64_t b = vq__attr_int(c, "batch_axis", 1), t = vq__attr_int(c, "time_axis", 0);
    if ((b != 0 && b != 1) || b == t || (t != 0 && t != 1))
        return vq__attr_fail(c, "batch_axis",
                             "batch_axis %lld and time_axis %lld are not 0 and 1 or 1 and 0",
                             (long long)b, (long long)t);
    p->batch_axis = (int)b;
    if (!vq__dim_match(c->in[1].shape[0], c->in[0].shape[b]))
        return vq__in_fail(c, 1, "has %lld lengths for a batch of %lld (X's dim %lld)",
                           (long long)c->in[1].shape[0], (long long)c->in[0].shape[b],
                           (long long)b);
    c->out[0] = c->in[0];
    return 0;
}

/* Element j of an i32 or i64 tensor. */
static int64_t len_at(const vq_tensor *t, int64_t j)
{
    return t->dtype == VQ_I32 ? ((const int32_t *)t->data)[j] : ((const int64_t *)t->data)[j];
}

int vq__range_check(const vq__kcall *k, const vq_tensor *idx, int64_t lo, int64_t hi,
                    const char *what, const char *slot)
{
    for (int64_t j = 0; j < idx->numel; j++) {
        int64_t v = len_at(idx, j);
        if (v < lo || v >= hi)
            return vq__op_fail(k->def, "%s %lld at %s element %lld is outside [%lld, %lld)", what,
                               (long long)v, slot, (long long)j, (long long)lo, (long long)hi);
    }
    return 0;
}

static int reverse_sequence_kernel(const vq__kcall *k)
{
    const vq__reverse_sequence_params *p = k->params;
    vq_tensor *x = k->in[0], *lens = k->in[1], *out = k->out[0];
    int64_t nb = x->shape[p->batch_axis], nt = x->shape[1 - p->batch_axis];
    int rc = vq__range_check(k, lens, 0, nt + 1, "length", "Lens");
    if (rc < 0 || x->numel == 0)
        return rc;
    size_t row = (size_t)(x->numel / (nb * nt)) * vq_dtype_size(x->dtype);
    const char *src = x->data;
    char *dst = out->data;
    for (int64_t b = 0; b < nb; b++) {
        int64_t v = len_at(lens, b);
        for (int64_t t = 0; t < nt; t++) {
            int64_t from = t < v ? v - 1 - t : t;
            /* the row of (t, b): time-major or batch-major */
            int64_t o = p->batch_axis ? t * nb + b : b * nt + t;
            int64_t i = p->batch_axis ? from * nb + b : b * nt + from;
            memcpy(dst + (size_t)o * row, src + (size_t)i * row, row);
        }
    }
    return 0;
}

static int reverse_sequence_grad(const vq__grad *g)
{
    if (!g->din[0]) /* Lens have no gradient */
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output Out");
    const char *in[2] = {g->dout[0], g->in[1]};
    return vq__emit(g, "reverse_sequence", in, 2, &g->din[0], 1, g->attrs, g->nattrs);
}

const vq__op_def vq__ops_sequence[] = {
    {.type = "reverse_sequence",
     .in_slots = in_slots,
     .nin_slots = 2,
     .out_slots = out_slot,
     .nout_slots = 1,
     .attrs = attrs,
     .nattrs = 2,
     .params_size = sizeof(vq__reverse_sequence_params),
     .infer = reverse_sequence_infer,
     .kernel = {reverse_sequence_kernel},
     .cuda = VQ__CUDA_OP(vq__reverse_sequence_gpu),
     .grad = reverse_sequence_grad},
    {0},
};
