/* Batch normalization in its inference form: batch_norm(X, Scale, Bias,
 * Mean, Var) -> Out, per channel (X's dim 1, for X of rank >= 2):
 *   Out = (X - Mean) / sqrt(Var + epsilon) * Scale + Bias,
 * with Mean and Var given (running statistics), not computed from the
 * batch. Its gradient op batch_norm_grad(X, Scale, Mean, Var, dOut) -> dZ
 * gives, with wrt the forward input (inv = 1 / sqrt(Var + epsilon),
 * a = Scale * inv, sums over every dim but the channel's):
 *   0 X:     dX = dOut * a
 *   1 Scale: sum(dOut * (X - Mean)) * inv
 *   2 Bias:  sum(dOut)
 *   3 Mean:  -a * sum(dOut)
 *   4 Var:   -1/2 * Scale * inv^3 * sum(dOut * (X - Mean)).
 * The gradient maker emits wrt 0 .. 2 only: the running statistics are
 * constants for autodiff, as PyTorch's buffers are (fine-tuning must not
 * move them); wrt 3 and 4 are there for callers that want them.
 *
 * Per-channel constants and sums are in double for both dtypes, in the
 * order of the expressions above, which the CUDA kernels (ops/cuda/conv.cu)
 * repeat: the elementwise results match bit for bit, the sums to
 * rounding. X is seen as [outer, C, inner].
 *
 * batch_norm_train(X, Scale, Bias, Mean, Var) -> Out, NewMean, NewVar is
 * the training form (ONNX's training_mode 1): per channel, the batch's
 * mean mu and biased variance v (over the channel's M = outer * inner
 * elements, in double, two passes) normalize X,
 *   Out = (X - mu) / sqrt(v + epsilon) * Scale + Bias,
 * and the running statistics move towards them, in ONNX's convention
 * (PyTorch's momentum m is ONNX's 1 - m, and PyTorch updates the running
 * variance with the unbiased one):
 *   NewMean = Mean * momentum + mu * (1 - momentum), likewise NewVar.
 * An empty batch (M = 0) has mu = v = NaN, which NewMean and NewVar get.
 * Its gradient op batch_norm_train_grad(X, Scale, dOut...) -> dZ
 * recomputes mu and v from X (no saved state between the ops) and takes,
 * in its variadic last slot, the gradients that flow into Out, NewMean and
 * NewVar (attribute grads says which: 1, 2, 4), so that autodiff trains
 * through the batch statistics, those of the running ones included.
 * With a = Scale / sqrt(v + eps), xc = X - mu, sums over the channel:
 *   0 X:     dX = a (dOut - sum(dOut) / M - xc sum(dOut xc) / (M (v + eps)))
 *                 + (1 - momentum) (dNewMean + 2 xc dNewVar) / M
 *   1 Scale: sum(dOut xc) / sqrt(v + eps)
 *   2 Bias:  sum(dOut).
 * Mean and Var get no gradient, as batch_norm's (constants for autodiff).
 * The CUDA kernels (ops/cuda/conv.cu) use one block per channel, a tree of
 * the same double sums: the CPU's results to rounding. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"

#include <math.h>

static const char *const bn_in[] = {"X", "Scale", "Bias", "Mean", "Var"};
static const char *const bn_out[] = {"Out"};
static const char *const grad_in[] = {"X", "Scale", "Mean", "Var", "dOut"};
static const char *const grad_out[] = {"dZ"};

/* ---- shapes ---- */

/* X (slot 0) and the per-channel inputs in slots first..last, each [C]. */
static int bn_check(vq__infer *c, int first, int last)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0)
        return rc;
    const vq__meta *x = &c->in[0];
    if (x->ndim < 2)
        return vq__in_fail(c, 0, "has %d dims; batch_norm needs at least 2 ([N, C, ...])",
                           x->ndim);
    for (int s = first; s <= last; s++) {
        if ((rc = vq__check_same_dtype(c, 0, s)) < 0)
            return rc;
        const vq__meta *v = &c->in[s];
        if (v->ndim != 1 || !vq__dim_match(v->shape[0], x->shape[1])) {
            char sv[100], sx[100];
            return vq__in_fail(c, s, "shape %s is not [C] for X's %lld channels (X is %s)",
                               vq__shape_str(sv, sizeof sv, v->ndim, v->shape),
                               (long long)x->shape[1],
                               vq__shape_str(sx, sizeof sx, x->ndim, x->shape));
        }
    }
    vq__batch_norm_params *p = c->params;
    p->epsilon = vq__attr_float(c, "epsilon", 1e-5);
    if (!(p->epsilon >= 0))
        return vq__attr_fail(c, "epsilon", "is %g; it must be >= 0", p->epsilon);
    return 0;
}

/* X's channel count, from whichever input knows it. */
static int64_t channels(const vq__infer *c, int first, int last)
{
    int64_t ch = c->in[0].shape[1];
    for (int s = first; s <= last && ch < 0; s++)
        ch = c->in[s].shape[0];
    return ch;
}

static int bn_infer(vq__infer *c)
{
    int rc = bn_check(c, 1, 4);
    if (rc < 0)
        return rc;
    c->out[0] = c->in[0];
    c->out[0].shape[1] = channels(c, 1, 4);
    return 0;
}

static int bn_grad_infer(vq__infer *c)
{
    vq__batch_norm_params *p = c->params;
    int rc = bn_check(c, 1, 3);
    if (rc < 0 || (rc = vq__check_same_dtype(c, 0, 4)) < 0 ||
        (rc = vq__check_same_shape(c, 0, 4)) < 0)
        return rc;
    int64_t wrt = vq__attr_int(c, "wrt", 0);
    if (wrt < 0 || wrt > 4)
        return vq__attr_fail(c, "wrt", "is %lld, not 0 (X), 1 (Scale), 2 (Bias), 3 (Mean) or "
                                       "4 (Var)",
                             (long long)wrt);
    p->wrt = (int)wrt;
    c->out[0] = c->in[0];
    int64_t ch = channels(c, 1, 3);
    for (int d = 0; d < c->out[0].ndim; d++)
        if (c->out[0].shape[d] < 0)
            c->out[0].shape[d] = c->in[4].shape[d];
    if (p->wrt > 0) {
        c->out[0].ndim = 1;
        c->out[0].shape[0] = ch;
    } else {
        c->out[0].shape[1] = ch;
    }
    return 0;
}

/* ---- kernels ---- */

/* X as [outer, C, inner]. */
struct layout {
    int64_t outer, c, inner;
};

static struct layout layout_of(const vq_tensor *x)
{
    struct layout l = {x->shape[0], x->shape[1], 1};
    for (int d = 2; d < x->ndim; d++)
        l.inner *= x->shape[d];
    return l;
}

#define BATCH_NORM(T)                                                                        \
    static void bn_##T(const T *x, const T *scale, const T *bias, const T *mean,             \
                       const T *var, T *o, struct layout l, double eps)                      \
    {                                                                                        \
        for (int64_t ch = 0; ch < l.c; ch++) {                                               \
            double a = (double)scale[ch] * (1.0 / sqrt((double)var[ch] + eps));              \
            double m = mean[ch], b = bias[ch];                                               \
            for (int64_t n = 0; n < l.outer; n++) {                                          \
                int64_t at = (n * l.c + ch) * l.inner;                                       \
                for (int64_t i = 0; i < l.inner; i++)                                        \
                    o[at + i] = (T)(((double)x[at + i] - m) * a + b);                        \
            }                                                                                \
        }                                                                                    \
    }                                                                                        \
                                                                                             \
    static void bn_grad_##T(int wrt, const T *x, const T *scale, const T *mean, const T *var, \
                            const T *g, T *dz, struct layout l, double eps)                  \
    {                                                                                        \
        for (int64_t ch = 0; ch < l.c; ch++) {                                               \
            double inv = 1.0 / sqrt((double)var[ch] + eps), a = (double)scale[ch] * inv;     \
            double m = mean[ch], sg = 0, sgx = 0;                                            \
            for (int64_t n = 0; n < l.outer; n++) {                                          \
                int64_t at = (n * l.c + ch) * l.inner;                                       \
                if (wrt == 0) {                                                              \
                    for (int64_t i = 0; i < l.inner; i++)                                    \
                        dz[at + i] = (T)((double)g[at + i] * a);                             \
                    continue;                                                                \
                }                                                                            \
                for (int64_t i = 0; i < l.inner; i++) {                                      \
                    sg += g[at + i];                                                         \
                    sgx += (double)g[at + i] * ((double)x[at + i] - m);                      \
                }                                                                            \
            }                                                                                \
            switch (wrt) {                                                                   \
            case 0: break;                                                                   \
            case 1: dz[ch] = (T)(sgx * inv); break;                                          \
            case 2: dz[ch] = (T)sg; break;                                                   \
            case 3: dz[ch] = (T)(-a * sg); break;                                            \
            default: dz[ch] = (T)(-0.5 * (double)scale[ch] * (inv * inv * inv) * sgx); break; \
            }                                                                                \
        }                                                                                    \
    }

BATCH_NORM(float)
BATCH_NORM(double)

static int bn_kernel(const vq__kcall *k)
{
    const vq__batch_norm_params *p = k->params;
    vq_tensor *const *in = k->in;
    struct layout l = layout_of(in[0]);
    if (in[0]->dtype == VQ_F32)
        bn_float(in[0]->data, in[1]->data, in[2]->data, in[3]->data, in[4]->data,
                 k->out[0]->data, l, p->epsilon);
    else
        bn_double(in[0]->data, in[1]->data, in[2]->data, in[3]->data, in[4]->data,
                  k->out[0]->data, l, p->epsilon);
    return 0;
}

static int bn_grad_kernel(const vq__kcall *k)
{
    const vq__batch_norm_params *p = k->params;
    vq_tensor *const *in = k->in;
    struct layout l = layout_of(in[0]);
    if (in[0]->dtype == VQ_F32)
        bn_grad_float(p->wrt, in[0]->data, in[1]->data, in[2]->data, in[3]->data, in[4]->data,
                      k->out[0]->data, l, p->epsilon);
    else
        bn_grad_double(p->wrt, in[0]->data, in[1]->data, in[2]->data, in[3]->data,
                       in[4]->data, k->out[0]->data, l, p->epsilon);
    return 0;
}

/* One batch_norm_grad per wanted input, wrt the input's slot. */
static int bn_grad(const vq__grad *g)
{
    int wanted = vq__grad_wanted(g);
    if (wanted <= 0)
        return wanted;
    if (g->nattrs < 0 || g->nattrs > 1)
        return vq__op_fail(g->def, "%d attributes; batch_norm has 1", g->nattrs);
    vq_attr attrs[2];
    int n = 0;
    for (int i = 0; i < g->nattrs; i++)
        attrs[n++] = g->attrs[i];
    const char *in[5] = {g->in[0], g->in[1], g->in[3], g->in[4], g->dout[0]};
    /* X, Scale and Bias: Mean and Var are the running statistics, constants
     * for autodiff as PyTorch's buffers are (fine-tuning must not move
     * them); batch_norm_grad still computes their gradients (wrt 3, 4) when
     * called directly. */
    for (int i = 0; i < g->nin && i < 3; i++) {
        if (!g->din[i])
            continue;
        attrs[n] = VQ_ATTR_I("wrt", i);
        int rc = vq__emit(g, "batch_norm_grad", in, 5, &g->din[i], 1, attrs, n + 1);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- batch_norm_train ---- */

static const char *const train_outs[] = {"Out", "NewMean", "NewVar"};
static const char *const train_grad_in[] = {"X", "Scale", "dOut"};

static int bn_train_infer(vq__infer *c)
{
    vq__batch_norm_params *p = c->params;
    int rc = bn_check(c, 1, 4);
    if (rc < 0)
        return rc;
    p->momentum = vq__attr_float(c, "momentum", 0.9);
    if (!(p->momentum >= 0 && p->momentum <= 1))
        return vq__attr_fail(c, "momentum", "is %g; it must be in [0, 1]", p->momentum);
    int64_t ch = channels(c, 1, 4);
    c->out[0] = c->in[0];
    c->out[0].shape[1] = ch;
    for (int j = 1; j < 3; j++) {
        c->out[j] = c->in[2 + j];
        c->out[j].shape[0] = ch;
    }
    return 0;
}

/* The bits of grads, in order: dOut, dNewMean, dNewVar. */
static int grads_count(int grads)
{
    return (grads & 1) + (grads >> 1 & 1) + (grads >> 2 & 1);
}

static int bn_train_grad_infer(vq__infer *c)
{
    vq__batch_norm_params *p = c->params;
    int64_t wrt = vq__attr_int(c, "wrt", 0), grads = vq__attr_int(c, "grads", 1);
    if (wrt < 0 || wrt > 2)
        return vq__attr_fail(c, "wrt", "is %lld, not 0 (X), 1 (Scale) or 2 (Bias)", (long long)wrt);
    if (grads < 1 || grads > 7)
        return vq__attr_fail(c, "grads",
                             "is %lld, not a nonzero mask of 1 (dOut), 2 "
                             "(dNewMean) and 4 (dNewVar)",
                             (long long)grads);
    p->wrt = (int)wrt;
    p->grads = (int)grads;
    if (c->nin != 2 + grads_count(p->grads))
        return vq__op_fail(c->def, "grads %d says %d gradient(s) follow X and Scale, got %d",
                           p->grads, grads_count(p->grads), c->nin - 2);
    int rc = bn_check(c, 1, 1);
    if (rc < 0)
        return rc;
    p->momentum = vq__attr_float(c, "momentum", 0.9);
    if (!(p->momentum >= 0 && p->momentum <= 1))
        return vq__attr_fail(c, "momentum", "is %g; it must be in [0, 1]", p->momentum);
    int64_t ch = channels(c, 1, 1);
    for (int s = 2, bit = 1; bit <= 4; bit <<= 1) {
        if (!(p->grads & bit))
            continue;
        if ((rc = vq__check_same_dtype(c, 0, s)) < 0)
            return rc;
        if (bit == 1 && (rc = vq__check_same_shape(c, 0, s)) < 0)
            return rc;
        const vq__meta *v = &c->in[s];
        if (bit > 1 && (v->ndim != 1 || !vq__dim_match(v->shape[0], ch))) {
            char sv[100];
            return vq__in_fail(c, s, "shape %s is not [C] for X's %lld channels",
                               vq__shape_str(sv, sizeof sv, v->ndim, v->shape), (long long)ch);
        }
        s++;
    }
    c->out[0] = c->in[0];
    if (p->wrt > 0) {
        c->out[0].ndim = 1;
        c->out[0].shape[0] = ch;
    } else {
        c->out[0].shape[1] = ch;
        if (p->grads & 1)
            for (int d = 0; d < c->out[0].ndim; d++)
                if (c->out[0].shape[d] < 0)
                    c->out[0].shape[d] = c->in[2].shape[d];
    }
    return 0;
}

/* The batch's mean and biased variance of channel ch, in double, two
 * passes (NaN for an empty batch). */
#define BATCH_MOMENTS(T)                                                                    \
    static void moments_##T(const T *x, struct layout l, int64_t ch, double *mu, double *v) \
    {                                                                                       \
        double m = (double)(l.outer * l.inner), s = 0, q = 0;                               \
        for (int64_t n = 0; n < l.outer; n++) {                                             \
            const T *r = x + (n * l.c + ch) * l.inner;                                      \
            for (int64_t i = 0; i < l.inner; i++)                                           \
                s += r[i];                                                                  \
        }                                                                                   \
        *mu = s / m;                                                                        \
        for (int64_t n = 0; n < l.outer; n++) {                                             \
            const T *r = x + (n * l.c + ch) * l.inner;                                      \
            for (int64_t i = 0; i < l.inner; i++)                                           \
                q += ((double)r[i] - *mu) * ((double)r[i] - *mu);                           \
        }                                                                                   \
        *v = q / m;                                                                         \
    }

/* Per channel: the moments, then the running statistics (read before
 * they are written: NewMean may be Mean), then Out (which may be X: the
 * channel's moments are taken before its elements are overwritten). */
#define BATCH_NORM_TRAIN(T)                                                                      \
    BATCH_MOMENTS(T)                                                                             \
    static void bn_train_##T(const T *x, const T *scale, const T *bias, const T *mean,           \
                             const T *var, T *o, T *nmean, T *nvar, struct layout l, double eps, \
                             double mom)                                                         \
    {                                                                                            \
        for (int64_t ch = 0; ch < l.c; ch++) {                                                   \
            double mu, v;                                                                        \
            moments_##T(x, l, ch, &mu, &v);                                                      \
            nmean[ch] = (T)((double)mean[ch] * mom + mu * (1 - mom));                            \
            nvar[ch] = (T)((double)var[ch] * mom + v * (1 - mom));                               \
            double a = (double)scale[ch] * (1.0 / sqrt(v + eps)), b = bias[ch];                  \
            for (int64_t n = 0; n < l.outer; n++) {                                              \
                int64_t at = (n * l.c + ch) * l.inner;                                           \
                for (int64_t i = 0; i < l.inner; i++)                                            \
                    o[at + i] = (T)(((double)x[at + i] - mu) * a + b);                           \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
                                                                                                 \
    static void bn_train_grad_##T(int wrt, const T *x, const T *scale, const T *g, const T *gm,  \
                                  const T *gv, T *dz, struct layout l, double eps, double mom)   \
    {                                                                                            \
        double m = (double)(l.outer * l.inner);                                                  \
        for (int64_t ch = 0; ch < l.c; ch++) {                                                   \
            double mu, v, sg = 0, sgx = 0;                                                       \
            moments_##T(x, l, ch, &mu, &v);                                                      \
            for (int64_t n = 0; g && n < l.outer; n++) {                                         \
                int64_t at = (n * l.c + ch) * l.inner;                                           \
                for (int64_t i = 0; i < l.inner; i++) {                                          \
                    sg += g[at + i];                                                             \
                    sgx += (double)g[at + i] * ((double)x[at + i] - mu);                         \
                }                                                                                \
            }                                                                                    \
            double inv = 1.0 / sqrt(v + eps);                                                    \
            if (wrt == 1 || wrt == 2) {                                                          \
                /* an empty batch has no terms (and NaN moments) */                              \
                dz[ch] = (T)(m == 0 ? 0 : wrt == 1 ? sgx * inv : sg);                            \
                continue;                                                                        \
            }                                                                                    \
            double a = (double)scale[ch] * inv, gmv = gm ? (double)gm[ch] : 0;                   \
            double gvv = gv ? (double)gv[ch] : 0;                                                \
            for (int64_t n = 0; n < l.outer; n++) {                                              \
                int64_t at = (n * l.c + ch) * l.inner;                                           \
                for (int64_t i = 0; i < l.inner; i++) {                                          \
                    double xc = (double)x[at + i] - mu, d = 0;                                   \
                    if (g)                                                                       \
                        d = a * ((double)g[at + i] - sg / m - xc * (inv * inv) * sgx / m);       \
                    d += (1 - mom) * (gmv + 2 * xc * gvv) / m;                                   \
                    dz[at + i] = (T)d;                                                           \
                }                                                                                \
            }                                                                                    \
        }                                                                                        \
    }

BATCH_NORM_TRAIN(float)
BATCH_NORM_TRAIN(double)

static int bn_train_kernel(const vq__kcall *k)
{
    const vq__batch_norm_params *p = k->params;
    vq_tensor *const *in = k->in, *const *out = k->out;
    struct layout l = layout_of(in[0]);
    if (in[0]->dtype == VQ_F32)
        bn_train_float(in[0]->data, in[1]->data, in[2]->data, in[3]->data, in[4]->data,
                       out[0]->data, out[1]->data, out[2]->data, l, p->epsilon, p->momentum);
    else
        bn_train_double(in[0]->data, in[1]->data, in[2]->data, in[3]->data, in[4]->data,
                        out[0]->data, out[1]->data, out[2]->data, l, p->epsilon, p->momentum);
    return 0;
}

/* The gradients in the variadic slot, by grads' bits: dOut, dNewMean,
 * dNewVar (NULL when absent). */
static void train_grads(const vq__kcall *k, const void **g)
{
    const vq__batch_norm_params *p = k->params;
    for (int bit = 1, s = 2, j = 0; bit <= 4; bit <<= 1, j++)
        g[j] = p->grads & bit ? k->in[s++]->data : NULL;
}

static int bn_train_grad_kernel(const vq__kcall *k)
{
    const vq__batch_norm_params *p = k->params;
    vq_tensor *x = k->in[0], *scale = k->in[1];
    const void *g[3];
    train_grads(k, g);
    struct layout l = layout_of(x);
    if (x->dtype == VQ_F32)
        bn_train_grad_float(p->wrt, x->data, scale->data, g[0], g[1], g[2], k->out[0]->data, l,
                            p->epsilon, p->momentum);
    else
        bn_train_grad_double(p->wrt, x->data, scale->data, g[0], g[1], g[2], k->out[0]->data, l,
                             p->epsilon, p->momentum);
    return 0;
}

/* One batch_norm_train_grad per wanted input of X, Scale and Bias, with
 * the gradients that flow into the outputs. */
static int bn_train_grad(const vq__grad *g)
{
    bool any = false;
    for (int i = 0; i < g->nin && i < 3; i++)
        any |= g->din[i] != NULL;
    if (!any)
        return 0;
    const char *in[5] = {g->in[0], g->in[1]};
    int nin = 2, grads = 0;
    for (int j = 0; j < 3 && j < g->nout; j++)
        if (g->dout[j]) {
            in[nin++] = g->dout[j];
            grads |= 1 << j;
        }
    if (!grads)
        return vq__op_fail(g->def, "no gradient flows into Out, NewMean or NewVar");
    if (g->nattrs < 0 || g->nattrs > 2)
        return vq__op_fail(g->def, "%d attributes; batch_norm_train has 2", g->nattrs);
    vq_attr attrs[4];
    int n = 0;
    for (int i = 0; i < g->nattrs; i++)
        attrs[n++] = g->attrs[i];
    attrs[n++] = VQ_ATTR_I("grads", grads);
    for (int i = 0; i < 3; i++) {
        if (!g->din[i])
            continue;
        attrs[n] = VQ_ATTR_I("wrt", i);
        int rc = vq__emit(g, "batch_norm_train_grad", in, nin, &g->din[i], 1, attrs, n + 1);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static const vq__attr_spec bn_train_attrs[] = {
    {"epsilon", VQ_ATTR_FLOAT, false, "1e-05"},
    {"momentum", VQ_ATTR_FLOAT, false, "0.9"},
    {"wrt", VQ_ATTR_INT, true, NULL},   /* batch_norm_train_grad only */
    {"grads", VQ_ATTR_INT, true, NULL}, /* batch_norm_train_grad only */
};

static const vq__attr_spec bn_attrs[] = {
    {"epsilon", VQ_ATTR_FLOAT, false, "1e-05"},
    {"wrt", VQ_ATTR_INT, true, NULL}, /* batch_norm_grad only */
};

const vq__op_def vq__ops_norm[] = {
    {.type = "batch_norm",
     .in_slots = bn_in,
     .nin_slots = 5,
     .out_slots = bn_out,
     .nout_slots = 1,
     .flags = VQ__INPLACE_OK,
     .attrs = bn_attrs,
     .nattrs = 1,
     .params_size = sizeof(vq__batch_norm_params),
     .infer = bn_infer,
     .kernel = {bn_kernel},
     .cuda = VQ__CUDA_OP(vq__batch_norm_gpu),
     .grad = bn_grad},
    {.type = "batch_norm_grad",
     .in_slots = grad_in,
     .nin_slots = 5,
     .out_slots = grad_out,
     .nout_slots = 1,
     .attrs = bn_attrs,
     .nattrs = 2,
     .params_size = sizeof(vq__batch_norm_params),
     .infer = bn_grad_infer,
     .kernel = {bn_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__batch_norm_grad_gpu)},
    {.type = "batch_norm_train",
     .in_slots = bn_in,
     .nin_slots = 5,
     .out_slots = train_outs,
     .nout_slots = 3,
     .flags = VQ__INPLACE_OK,
     .attrs = bn_train_attrs,
     .nattrs = 2,
     .params_size = sizeof(vq__batch_norm_params),
     .infer = bn_train_infer,
     .kernel = {bn_train_kernel},
     .cuda = VQ__CUDA_OP(vq__batch_norm_train_gpu),
     .grad = bn_train_grad},
    {.type = "batch_norm_train_grad",
     .in_slots = train_grad_in,
     .nin_slots = 3,
     .out_slots = grad_out,
     .nout_slots = 1,
     .flags = VQ__VARIADIC_IN,
     .attrs = bn_train_attrs,
     .nattrs = 4,
     .params_size = sizeof(vq__batch_norm_params),
     .infer = bn_train_grad_infer,
     .kernel = {bn_train_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__batch_norm_train_grad_gpu)},
    {0},
};
