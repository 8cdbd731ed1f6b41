/* max_unpool2d (ONNX MaxUnpool, PyTorch's max_unpool2d): a max pool's
 * values put back where their maxima were, zeros elsewhere; and its
 * gradient.
 *
 * max_unpool2d(X, Indices; kernel, strides, pads, output_size) -> Out,
 * X [N, C, H, W] f32 or f64, Indices i32 or i64 of X's shape, each an
 * index into Out flattened over all of its [N, C, OH, OW] (as
 * max_pool2d_argmax makes them, ONNX MaxPool's Indices): Out is zero but
 * Out.flat[Indices[i]] = X[i]. Out's height and width are output_size
 * when given, else the inverse of the pool's: (H - 1) * stride - pad_top
 * - pad_bottom + kernel (width alike). An index outside [0, Out's size)
 * is an error naming it. Where indices repeat (overlapping windows that
 * share a maximum), the last element of X in its order wins, as a plain
 * loop would have it: the CPU writes in that order, and the CUDA kernels
 * (ops/cuda/unpool.cu) mark each element of Out with the last index
 * that writes it and then gather, so both give the same bits.
 *
 * Its gradient, max_unpool2d_grad(X, Indices, dOut) -> dX (the forward
 * op's attributes): dX[i] = dOut.flat[Indices[i]] where element i is the
 * one that wins its place of Out, else 0 (a loser's value reaches no
 * output). Indices have no gradient. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"

#include <stdlib.h>
#include <string.h>

static const char *const unpool_in[] = {"X", "Indices"};
static const char *const out_slot[] = {"Out"};
static const char *const grad_in[] = {"X", "Indices", "dOut"};
static const char *const grad_out[] = {"dX"};

static const vq__attr_spec unpool_attrs[] = {
    {"kernel", VQ_ATTR_INTS, true, NULL},
    {"strides", VQ_ATTR_INTS, false, "[1,1]"},
    {"pads", VQ_ATTR_INTS, false, "[0,0,0,0]"},
    {"output_size", VQ_ATTR_INTS, false, NULL},
};

/* X and Indices (slots 0 and 1) against the attributes: Out's meta. */
static int unpool_meta(const vq__infer *c, vq__meta *out)
{
    vq__window_params p;
    memset(&p, 0, sizeof p);
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_rank(c, 0, 4)) < 0 ||
        (rc = vq__check_dtype(c, 1, (1u << VQ_I32) | (1u << VQ_I64))) < 0 ||
        (rc = vq__check_same_shape(c, 0, 1)) < 0 || (rc = vq__window_attrs(c, &p)) < 0)
        return rc;
    *out = c->in[0];
    const vq_attr *size = vq__attr_find(c, "output_size");
    if (size && size->n != 2) {
        char list[100];
        return vq__attr_fail(c, "output_size", "has %d values %s; expected 2 (height, width)",
                             size->n, vq__shape_str(list, sizeof list, size->n, size->ints));
    }
    static const char *const dim[2] = {"height", "width"};
    for (int d = 0; d < 2; d++) {
        int64_t n = c->in[0].shape[2 + d];
        if (size) {
            if (size->ints[d] < 0 || size->ints[d] > INT32_MAX)
                return vq__attr_fail(c, "output_size", "%s is %lld, outside [0, 2^31)", dim[d],
                                     (long long)size->ints[d]);
            out->shape[2 + d] = size->ints[d];
            continue;
        }
        if (n < 0) {
            out->shape[2 + d] = -1;
            continue;
        }
        int64_t o = n == 0 ? 0 : (n - 1) * p.stride[d] - p.pad[d] - p.pad[d + 2] + p.kernel[d];
        if (o < 0)
            return vq__op_fail(c->def,
                               "output %s would be %lld: input %s %lld, stride %lld, pads %lld "
                               "and %lld, kernel %lld",
                               dim[d], (long long)o, dim[d], (long long)n, (long long)p.stride[d],
                               (long long)p.pad[d], (long long)p.pad[d + 2],
                               (long long)p.kernel[d]);
        out->shape[2 + d] = o;
    }
    return 0;
}

static int unpool_infer(vq__infer *c)
{
    return unpool_meta(c, &c->out[0]);
}

/* (X, Indices, dOut) -> dX: dOut must have the forward op's Out meta. */
static int unpool_grad_infer(vq__infer *c)
{
    vq__meta want;
    int rc;
    if ((rc = unpool_meta(c, &want)) < 0 || (rc = vq__check_same_dtype(c, 0, 2)) < 0 ||
        (rc = vq__check_shape_is(c, 2, &want, "max_unpool2d's output shape")) < 0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

static int64_t index_at(const vq_tensor *t, int64_t i)
{
    return t->dtype == VQ_I32 ? ((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
}

static int unpool_kernel(const vq__kcall *k)
{
    vq_tensor *x = k->in[0], *idx = k->in[1], *out = k->out[0];
    int rc = vq__range_check(k, idx, 0, out->numel, "index", "Indices");
    if (rc < 0)
        return rc;
    memset(out->data, 0, out->nbytes);
    if (x->dtype == VQ_F32) {
        const float *xs = x->data;
        float *o = out->data;
        for (int64_t i = 0; i < x->numel; i++)
            o[index_at(idx, i)] = xs[i];
    } else {
        const double *xs = x->data;
        double *o = out->data;
        for (int64_t i = 0; i < x->numel; i++)
            o[index_at(idx, i)] = xs[i];
    }
    return 0;
}

static int unpool_grad_kernel(const vq__kcall *k)
{
    vq_tensor *idx = k->in[1], *g = k->in[2], *dx = k->out[0];
    int rc = vq__range_check(k, idx, 0, g->numel, "index", "Indices");
    if (rc < 0 || dx->numel == 0)
        return rc;
    /* the last element of X that writes each place of Out */
    int64_t *owner = vq__malloc((size_t)(g->numel ? g->numel : 1) * sizeof *owner);
    if (!owner)
        return vq__op_fail(k->def, "out of memory for %lld owners", (long long)g->numel);
    for (int64_t i = 0; i < idx->numel; i++)
        owner[index_at(idx, i)] = i;
    if (dx->dtype == VQ_F32) {
        const float *gs = g->data;
        float *d = dx->data;
        for (int64_t i = 0; i < dx->numel; i++) {
            int64_t at = index_at(idx, i);
            d[i] = owner[at] == i ? gs[at] : 0.0f;
        }
    } else {
        const double *gs = g->data;
        double *d = dx->data;
        for (int64_t i = 0; i < dx->numel; i++) {
            int64_t at = index_at(idx, i);
            d[i] = owner[at] == i ? gs[at] : 0.0;
        }
    }
    free(owner);
    return 0;
}

static int unpool_grad(const vq__grad *g)
{
    if (g->din[1])
        return vq__op_fail(g->def, "input Indices (slot 1): indices have no gradient");
    if (!g->din[0])
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output Out");
    const char *in[3] = {g->in[0], g->in[1], g->dout[0]};
    return vq__emit(g, "max_unpool2d_grad", in, 3, &g->din[0], 1, g->attrs, g->nattrs);
}

const vq__op_def vq__ops_unpool[] = {
    {.type = "max_unpool2d",
     .in_slots = unpool_in,
     .nin_slots = 2,
     .out_slots = out_slot,
     .nout_slots = 1,
     .attrs = unpool_attrs,
     .nattrs = 4,
     .infer = unpool_infer,
     .kernel = {unpool_kernel},
     .cuda = VQ__CUDA_OP(vq__max_unpool_gpu),
     .grad = unpool_grad},
    {.type = "max_unpool2d_grad",
     .in_slots = grad_in,
     .nin_slots = 3,
     .out_slots = grad_out,
     .nout_slots = 1,
     .attrs = unpool_attrs,
     .nattrs = 4,
     .infer = unpool_grad_infer,
     .kernel = {unpool_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__max_unpool_grad_gpu)},
    {0},
};
