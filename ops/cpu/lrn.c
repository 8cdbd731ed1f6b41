/* lrn (ONNX LRN, torch.nn.LocalResponseNorm): each element divided by a
 * power of the sum of squares over a window of channels around it, and its
 * gradient lrn_grad.
 *
 * lrn(X; size, alpha, beta, bias) -> Out, X f32 or f64 of rank >= 2
 * ([N, C, ...]): Out[n, k, ...] = X[n, k, ...] / (bias + alpha / size *
 * S)^beta, S the sum of X[n, j, ...]^2 over the channels j in [k - lo,
 * k + hi] that exist, lo = floor((size - 1) / 2), hi = ceil((size - 1) /
 * 2), as ONNX defines it (PyTorch puts an even size's extra channel before
 * k instead). lrn_grad(X, dOut) -> dX is its derivative (ops/lrn_shared.h,
 * which says how it is derived), the maker's one gradient op.
 *
 * Both kernels compute each element on its own, with ops/lrn_shared.h's
 * functions, which the CUDA kernels (ops/cuda/lrn.cu, a thread per
 * element) call too: the same sums in the same order, pow within an ulp. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"
#include "../lrn_shared.h"

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};
static const char *const grad_in[] = {"X", "dOut"};
static const char *const grad_out[] = {"dX"};

static const vq__attr_spec lrn_attrs[] = {
    {"size", VQ_ATTR_INT, true, NULL},
    {"alpha", VQ_ATTR_FLOAT, false, "0.0001"},
    {"beta", VQ_ATTR_FLOAT, false, "0.75"},
    {"bias", VQ_ATTR_FLOAT, false, "1"},
};

static int lrn_params(vq__infer *c)
{
    vq__lrn_params *p = c->params;
    int rc = vq__check_dtype(c, 0, VQ__FLOATS);
    if (rc < 0)
        return rc;
    if (c->in[0].ndim < 2)
        return vq__in_fail(c, 0, "has rank %d; lrn needs [N, C, ...] (rank >= 2)", c->in[0].ndim);
    p->size = vq__attr_int(c, "size", 1);
    if (p->size < 1 || p->size > INT32_MAX)
        return vq__attr_fail(c, "size", "is %lld; it must be in [1, 2^31)", (long long)p->size);
    p->lo = (p->size - 1) / 2;
    p->hi = p->size / 2; /* ceil((size - 1) / 2) */
    p->scale = vq__attr_float(c, "alpha", 1e-4) / (double)p->size;
    p->beta = vq__attr_float(c, "beta", 0.75);
    p->bias = vq__attr_float(c, "bias", 1.0);
    return 0;
}

static int lrn_infer(vq__infer *c)
{
    int rc = lrn_params(c);
    if (rc < 0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

static int lrn_grad_infer(vq__infer *c)
{
    int rc = lrn_params(c);
    if (rc < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0 ||
        (rc = vq__check_same_shape(c, 0, 1)) < 0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

/* The geometry of a call on X ([N, C, inner]); *n gets N. */
static vq__lrn_geom lrn_geom(const vq__lrn_params *p, const vq_tensor *x, int64_t *n)
{
    vq__lrn_geom g = {x->shape[1], 1, p->lo, p->hi, p->scale, p->beta, p->bias};
    for (int d = 2; d < x->ndim; d++)
        g.inner *= x->shape[d];
    *n = x->shape[0];
    return g;
}

/* Each element of Out (or dX) from its lane of X (and dOut). */
#define LRN_EACH(T, EXPR)                                                 \
    do {                                                                  \
        const T *xs = x->data, *gs = dy ? (const T *)dy->data : NULL;     \
        T *os = out->data;                                                \
        for (int64_t b = 0; b < n; b++)                                   \
            for (int64_t ch = 0; ch < g.c; ch++)                          \
                for (int64_t i = 0; i < g.inner; i++) {                   \
                    int64_t lane = b * g.c * g.inner + i;                 \
                    const T *xl = xs + lane, *gl = gs ? gs + lane : NULL; \
                    (void)gl;                                             \
                    os[(b * g.c + ch) * g.inner + i] = EXPR;              \
                }                                                         \
    } while (0)

static int lrn_kernel(const vq__kcall *k)
{
    vq_tensor *x = k->in[0], *out = k->out[0], *dy = k->nin > 1 ? k->in[1] : NULL;
    int64_t n;
    vq__lrn_geom g = lrn_geom(k->params, x, &n);
    if (x->numel == 0)
        return 0;
    if (dy && x->dtype == VQ_F32)
        LRN_EACH(float, vq__lrn_grad_f32(xl, gl, &g, ch));
    else if (dy)
        LRN_EACH(double, vq__lrn_grad_f64(xl, gl, &g, ch));
    else if (x->dtype == VQ_F32)
        LRN_EACH(float, vq__lrn_out_f32(xl, &g, ch));
    else
        LRN_EACH(double, vq__lrn_out_f64(xl, &g, ch));
    return 0;
}

static int lrn_grad(const vq__grad *g)
{
    int wanted = vq__grad_wanted(g);
    if (wanted <= 0)
        return wanted;
    const char *in[2] = {g->in[0], g->dout[0]};
    return vq__emit(g, "lrn_grad", in, 2, &g->din[0], 1, g->attrs, g->nattrs);
}

const vq__op_def vq__ops_lrn[] = {
    {.type = "lrn",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .attrs = lrn_attrs,
     .nattrs = 4,
     .params_size = sizeof(vq__lrn_params),
     .infer = lrn_infer,
     .kernel = {lrn_kernel},
     .cuda = VQ__CUDA_OP(vq__lrn_gpu),
     .grad = lrn_grad},
    {.type = "lrn_grad",
     .in_slots = grad_in,
     .nin_slots = 2,
     .out_slots = grad_out,
     .nout_slots = 1,
     .attrs = lrn_attrs,
     .nattrs = 4,
     .params_size = sizeof(vq__lrn_params),
     .infer = lrn_grad_infer,
     .kernel = {lrn_kernel},
     .cuda = VQ__CUDA_OP(vq__lrn_gpu)},
    {0},
};
