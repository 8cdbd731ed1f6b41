/* Losses: cross_entropy on probabilities, softmax_cross_entropy fused on
 * logits, square_error elementwise, mse to a scalar, and their gradient ops.
 *
 * The class losses take X as [..., C] (the classes along the last dim) and
 * integer labels (i32 or i64) shaped like X without that dim, with or
 * without a trailing 1; they give one loss per row, shaped X.shape[:-1] +
 * [1]. A label outside [0, C) is found only when the kernel reads it, so it
 * is an error of the run (through vq_tensor_wait on an engine), not of the
 * call. Labels have no gradient: asking for one is an error. cross_entropy
 * takes X as given: a probability of 0 at the label gives +inf.
 *
 * softmax_cross_entropy computes loss = log(sum(exp(x - max))) - (x[label]
 * - max), in double also for f32, so large logits neither overflow nor lose
 * the loss to cancellation; its gradient is the softmax it already output
 * minus the one-hot label. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"

#include <math.h>
#include <string.h>

#define LABEL_DTYPES ((1u << VQ_I32) | (1u << VQ_I64))

/* ---- shared checks ---- */

/* Each unknown dim of m that other knows, from other (same rank). */
static void fill_unknown_dims(vq__meta *m, const vq__meta *other)
{
    for (int i = 0; i < m->ndim && i < other->ndim; i++)
        if (m->shape[i] < 0)
            m->shape[i] = other->shape[i];
}

/* X (slot xs) is [..., C] and Label (slot ls) an integer tensor shaped
 * X.shape[:-1] or X.shape[:-1] + [1]. Fills rows with the per-row loss
 * meta: X's dtype, shape X.shape[:-1] + [1] (dims unknown in X taken from
 * Label). */
static int check_labels(vq__infer *c, int xs, int ls, vq__meta *rows)
{
    const vq__meta *x = &c->in[xs], *l = &c->in[ls];
    int rc;
    if ((rc = vq__check_dtype(c, xs, VQ__FLOATS)) < 0)
        return rc;
    if (x->ndim < 1)
        return vq__in_fail(c, xs, "has 0 dims, expected [..., classes]");
    if ((rc = vq__check_dtype(c, ls, LABEL_DTYPES)) < 0)
        return rc;
    int lead = x->ndim - 1;
    bool fits = l->ndim == lead || (l->ndim == x->ndim && vq__dim_match(l->shape[lead], 1));
    for (int i = 0; fits && i < lead; i++)
        fits = vq__dim_match(l->shape[i], x->shape[i]);
    rows->dtype = x->dtype;
    rows->ndim = x->ndim;
    for (int i = 0; i < lead; i++)
        rows->shape[i] = x->shape[i] >= 0 ? x->shape[i] : l->shape[i];
    rows->shape[lead] = 1;
    if (fits)
        return 0;
    char sl[100], sx[100], sr[100], srl[100];
    return vq__in_fail(c, ls, "shape %s does not fit %s's %s: expected %s or %s",
                       vq__shape_str(sl, sizeof sl, l->ndim, l->shape),
                       vq__op_in_slot(c->def, xs), vq__shape_str(sx, sizeof sx, x->ndim, x->shape),
                       vq__shape_str(sr, sizeof sr, lead, rows->shape),
                       vq__shape_str(srl, sizeof srl, rows->ndim, rows->shape));
}

/* Input slot must have the dtype of slot `like` and the shape of want. */
static int check_meta(vq__infer *c, int slot, int like, const vq__meta *want)
{
    int rc = vq__check_same_dtype(c, like, slot);
    if (rc < 0)
        return rc;
    const vq__meta *m = &c->in[slot];
    bool same = m->ndim == want->ndim;
    for (int i = 0; same && i < m->ndim; i++)
        same = vq__dim_match(m->shape[i], want->shape[i]);
    if (same)
        return 0;
    char a[100], b[100];
    return vq__in_fail(c, slot, "shape %s, expected %s", vq__shape_str(a, sizeof a, m->ndim, m->shape),
                       vq__shape_str(b, sizeof b, want->ndim, want->shape));
}

static int64_t label_at(const vq_tensor *l, int64_t row)
{
    return l->dtype == VQ_I32 ? ((const int32_t *)l->data)[row] : ((const int64_t *)l->data)[row];
}

static int label_fail(const vq__kcall *k, int64_t label, int64_t row, int64_t classes)
{
    return vq__op_fail(k->def, "label %lld at row %lld is outside [0, %lld)", (long long)label,
                       (long long)row, (long long)classes);
}

/* A tensor of labels has one element per row. */
#define ROWS_OF(label) ((label)->numel)
#define CLASSES_OF(x) ((x)->shape[(x)->ndim - 1])

static const char *const out_slot[] = {"Out"};
static const char *const dx_slot[] = {"dX"};
static const char *const dz_slot[] = {"dZ"};

/* ---- cross_entropy(X, Label) -> Out = -log(X[..., label]) ---- */

static const char *const ce_in[] = {"X", "Label"};
static const char *const ce_grad_in[] = {"X", "Label", "dOut"};

static int ce_infer(vq__infer *c)
{
    return check_labels(c, 0, 1, &c->out[0]);
}

#define CROSS_ENTROPY(T)                                                              \
    static int ce_##T(const vq__kcall *k)                                            \
    {                                                                                \
        const vq_tensor *x = k->in[0], *l = k->in[1];                                \
        const T *p = x->data;                                                        \
        T *o = k->out[0]->data;                                                      \
        int64_t classes = CLASSES_OF(x);                                             \
        for (int64_t r = 0; r < ROWS_OF(l); r++) {                                   \
            int64_t lab = label_at(l, r);                                            \
            if (lab < 0 || lab >= classes)                                           \
                return label_fail(k, lab, r, classes);                               \
            o[r] = (T)-log((double)p[r * classes + lab]);                            \
        }                                                                            \
        return 0;                                                                    \
    }

CROSS_ENTROPY(float)
CROSS_ENTROPY(double)

static int ce_kernel(const vq__kcall *k)
{
    return k->in[0]->dtype == VQ_F32 ? ce_float(k) : ce_double(k);
}

/* cross_entropy_grad(X, Label, dOut) -> dX = -dOut / X at the label, 0
 * elsewhere. */
static int ce_grad_infer(vq__infer *c)
{
    vq__meta rows;
    int rc;
    if ((rc = check_labels(c, 0, 1, &rows)) < 0 || (rc = check_meta(c, 2, 0, &rows)) < 0)
        return rc;
    c->out[0] = c->in[0];
    fill_unknown_dims(&c->out[0], &rows);
    fill_unknown_dims(&c->out[0], &c->in[2]);
    c->out[0].shape[c->out[0].ndim - 1] = c->in[0].shape[c->in[0].ndim - 1];
    return 0;
}

#define CROSS_ENTROPY_GRAD(T)                                                         \
    static int ce_grad_##T(const vq__kcall *k)                                       \
    {                                                                                \
        const vq_tensor *x = k->in[0], *l = k->in[1];                                \
        const T *p = x->data, *g = k->in[2]->data;                                   \
        T *d = k->out[0]->data;                                                      \
        int64_t classes = CLASSES_OF(x);                                             \
        memset(d, 0, k->out[0]->nbytes);                                             \
        for (int64_t r = 0; r < ROWS_OF(l); r++) {                                   \
            int64_t lab = label_at(l, r);                                            \
            if (lab < 0 || lab >= classes)                                           \
                return label_fail(k, lab, r, classes);                               \
            d[r * classes + lab] = -g[r] / p[r * classes + lab];                     \
        }                                                                            \
        return 0;                                                                    \
    }

CROSS_ENTROPY_GRAD(float)
CROSS_ENTROPY_GRAD(double)

static int ce_grad_kernel(const vq__kcall *k)
{
    return k->in[0]->dtype == VQ_F32 ? ce_grad_float(k) : ce_grad_double(k);
}

static int labels_have_no_gradient(const vq__grad *g)
{
    return vq__op_fail(g->def, "input Label (slot 1): labels have no gradient");
}

static int ce_grad(const vq__grad *g)
{
    if (g->din[1])
        return labels_have_no_gradient(g);
    if (!g->din[0])
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output Out");
    const char *in[3] = {g->in[0], g->in[1], g->dout[0]};
    return vq__emit(g, "cross_entropy_grad", in, 3, &g->din[0], 1, NULL, 0);
}

/* ---- softmax_cross_entropy(Logits, Label) -> (Softmax, Loss) ---- */

static const char *const sce_in[] = {"Logits", "Label"};
static const char *const sce_out[] = {"Softmax", "Loss"};
static const char *const sce_grad_in[] = {"Softmax", "Label", "dLoss"};
static const char *const sce_grad_out[] = {"dLogits"};

static int sce_infer(vq__infer *c)
{
    int rc = check_labels(c, 0, 1, &c->out[1]);
    if (rc < 0)
        return rc;
    c->out[0] = c->in[0];
    fill_unknown_dims(&c->out[0], &c->out[1]);
    c->out[0].shape[c->out[0].ndim - 1] = c->in[0].shape[c->in[0].ndim - 1];
    return 0;
}

/* Per row: the label is checked before anything of the row is written. */
#define SOFTMAX_CROSS_ENTROPY(T)                                                      \
    static int sce_##T(const vq__kcall *k)                                           \
    {                                                                                \
        const vq_tensor *x = k->in[0], *l = k->in[1];                                \
        T *s = k->out[0]->data, *loss = k->out[1]->data;                             \
        int64_t classes = CLASSES_OF(x);                                             \
        for (int64_t r = 0; r < ROWS_OF(l); r++) {                                   \
            const T *xr = (const T *)x->data + r * classes;                          \
            T *sr = s + r * classes;                                                 \
            int64_t lab = label_at(l, r);                                            \
            if (lab < 0 || lab >= classes)                                           \
                return label_fail(k, lab, r, classes);                               \
            double max = -INFINITY, sum = 0;                                         \
            for (int64_t j = 0; j < classes; j++)                                    \
                if (xr[j] > max)                                                     \
                    max = xr[j];                                                     \
            for (int64_t j = 0; j < classes; j++) {                                  \
                double e = exp((double)xr[j] - max);                                 \
                sr[j] = (T)e;                                                        \
                sum += e;                                                            \
            }                                                                        \
            double inv = 1 / sum;                                                    \
            for (int64_t j = 0; j < classes; j++)                                    \
                sr[j] = (T)(sr[j] * inv);                                            \
            loss[r] = (T)(log(sum) - ((double)xr[lab] - max));                       \
        }                                                                            \
        return 0;                                                                    \
    }

SOFTMAX_CROSS_ENTROPY(float)
SOFTMAX_CROSS_ENTROPY(double)

static int sce_kernel(const vq__kcall *k)
{
    return k->in[0]->dtype == VQ_F32 ? sce_float(k) : sce_double(k);
}

/* softmax_cross_entropy_grad(Softmax, Label, dLoss) -> dLogits =
 * (Softmax - onehot(label)) * dLoss. */
static int sce_grad_infer(vq__infer *c)
{
    return ce_grad_infer(c);
}

/* In place is safe: each element is read before the same one is written. */
#define SOFTMAX_CROSS_ENTROPY_GRAD(T)                                                 \
    static int sce_grad_##T(const vq__kcall *k)                                      \
    {                                                                                \
        const vq_tensor *sm = k->in[0], *l = k->in[1];                               \
        const T *s = sm->data, *g = k->in[2]->data;                                  \
        T *d = k->out[0]->data;                                                      \
        int64_t classes = CLASSES_OF(sm);                                            \
        for (int64_t r = 0; r < ROWS_OF(l); r++) {                                   \
            int64_t lab = label_at(l, r);                                            \
            if (lab < 0 || lab >= classes)                                           \
                return label_fail(k, lab, r, classes);                               \
            T gr = g[r];                                                             \
            for (int64_t j = 0; j < classes; j++) {                                  \
                int64_t i = r * classes + j;                                         \
                d[i] = (s[i] - (j == lab ? (T)1 : (T)0)) * gr;                       \
            }                                                                        \
        }                                                                            \
        return 0;                                                                    \
    }

SOFTMAX_CROSS_ENTROPY_GRAD(float)
SOFTMAX_CROSS_ENTROPY_GRAD(double)

static int sce_grad_kernel(const vq__kcall *k)
{
    return k->in[0]->dtype == VQ_F32 ? sce_grad_float(k) : sce_grad_double(k);
}

static int sce_grad(const vq__grad *g)
{
    if (g->din[1])
        return labels_have_no_gradient(g);
    if (g->dout[0])
        return vq__op_fail(g->def, "output Softmax (slot 0) is not differentiable here; use "
                                   "softmax and cross_entropy for a gradient through it");
    if (!g->din[0])
        return 0;
    if (!g->dout[1])
        return vq__op_fail(g->def, "no gradient flows into output Loss");
    const char *in[3] = {g->out[0], g->in[1], g->dout[1]};
    return vq__emit(g, "softmax_cross_entropy_grad", in, 3, &g->din[0], 1, NULL, 0);
}

/* ---- square_error(X, Y) -> (X - Y)^2 and mse(X, Y) -> mean((X - Y)^2) ---- */

static const char *const xy_in[] = {"X", "Y"};
static const char *const xy_grad_in[] = {"X", "Y", "dOut"};

static const vq__attr_spec wrt_attrs[] = {
    {"wrt", VQ_ATTR_INT, true, NULL},
};

/* X and Y: floats of one dtype and one shape (no broadcasting). out gets
 * their meta, each dim from whichever knows it. */
static int check_xy(vq__infer *c, vq__meta *out)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0 ||
        (rc = vq__check_same_shape(c, 0, 1)) < 0)
        return rc;
    *out = c->in[0];
    fill_unknown_dims(out, &c->in[1]);
    return 0;
}

static int check_wrt(vq__infer *c)
{
    int64_t wrt = vq__attr_int(c, "wrt", 0);
    if (wrt != 0 && wrt != 1)
        return vq__attr_fail(c, "wrt", "is %lld, not 0 (X) or 1 (Y)", (long long)wrt);
    ((vq__wrt_params *)c->params)->wrt = (int)wrt;
    return 0;
}

static int se_infer(vq__infer *c)
{
    return check_xy(c, &c->out[0]);
}

#define SQUARE_ERROR(T)                                                               \
    static void se_##T(const T *x, const T *y, T *o, int64_t n)                      \
    {                                                                                \
        for (int64_t i = 0; i < n; i++) {                                            \
            T d = x[i] - y[i];                                                       \
            o[i] = d * d;                                                            \
        }                                                                            \
    }

SQUARE_ERROR(float)
SQUARE_ERROR(double)

static int se_kernel(const vq__kcall *k)
{
    vq_tensor *x = k->in[0], *y = k->in[1], *o = k->out[0];
    if (x->dtype == VQ_F32)
        se_float(x->data, y->data, o->data, x->numel);
    else
        se_double(x->data, y->data, o->data, x->numel);
    return 0;
}

/* square_error_grad(X, Y, dOut; wrt) -> dZ = ±2 (X - Y) dOut. */
static int se_grad_infer(vq__infer *c)
{
    int rc;
    if ((rc = check_wrt(c)) < 0 || (rc = check_xy(c, &c->out[0])) < 0 ||
        (rc = check_meta(c, 2, 0, &c->out[0])) < 0)
        return rc;
    fill_unknown_dims(&c->out[0], &c->in[2]);
    return 0;
}

#define SQUARE_ERROR_GRAD(T)                                                          \
    static void se_grad_##T(const T *x, const T *y, const T *g, T *d, int64_t n,     \
                            T two)                                                   \
    {                                                                                \
        for (int64_t i = 0; i < n; i++)                                              \
            d[i] = two * (x[i] - y[i]) * g[i];                                       \
    }

SQUARE_ERROR_GRAD(float)
SQUARE_ERROR_GRAD(double)

static int se_grad_kernel(const vq__kcall *k)
{
    const vq__wrt_params *p = k->params;
    vq_tensor *x = k->in[0], *y = k->in[1], *g = k->in[2], *d = k->out[0];
    double two = p->wrt ? -2 : 2;
    if (x->dtype == VQ_F32)
        se_grad_float(x->data, y->data, g->data, d->data, x->numel, (float)two);
    else
        se_grad_double(x->data, y->data, g->data, d->data, x->numel, two);
    return 0;
}

/* One gradient op per input asked for; both read X and Y (not X - Y) so
 * neither needs a temporary. */
static int xy_grad(const vq__grad *g, const char *grad_type)
{
    if (!g->din[0] && !g->din[1])
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output Out");
    for (int i = 0; i < 2; i++) {
        if (!g->din[i])
            continue;
        const char *in[3] = {g->in[0], g->in[1], g->dout[0]};
        vq_attr wrt = VQ_ATTR_I("wrt", i);
        int rc = vq__emit(g, grad_type, in, 3, &g->din[i], 1, &wrt, 1);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int se_grad(const vq__grad *g)
{
    return xy_grad(g, "square_error_grad");
}

/* mse of no elements is 0 (not 0/0): an empty batch adds nothing to a sum
 * of losses, and its gradient is empty anyway. */
static int mse_infer(vq__infer *c)
{
    vq__meta xy;
    int rc = check_xy(c, &xy);
    if (rc < 0)
        return rc;
    c->out[0].dtype = xy.dtype;
    c->out[0].ndim = 0;
    return 0;
}

#define MSE(T)                                                                        \
    static double mse_##T(const T *x, const T *y, int64_t n)                         \
    {                                                                                \
        double sum = 0;                                                              \
        for (int64_t i = 0; i < n; i++) {                                            \
            double d = (double)x[i] - (double)y[i];                                  \
            sum += d * d;                                                            \
        }                                                                            \
        return n ? sum / (double)n : 0;                                              \
    }

MSE(float)
MSE(double)

static int mse_kernel(const vq__kcall *k)
{
    vq_tensor *x = k->in[0], *y = k->in[1], *o = k->out[0];
    if (x->dtype == VQ_F32)
        *(float *)o->data = (float)mse_float(x->data, y->data, x->numel);
    else
        *(double *)o->data = mse_double(x->data, y->data, x->numel);
    return 0;
}

/* mse_grad(X, Y, dOut; wrt) -> dZ = ±2 (X - Y) dOut / N, dOut a scalar. */
static int mse_grad_infer(vq__infer *c)
{
    int rc;
    if ((rc = check_wrt(c)) < 0 || (rc = check_xy(c, &c->out[0])) < 0 ||
        (rc = vq__check_same_dtype(c, 0, 2)) < 0 || (rc = vq__check_rank(c, 2, 0)) < 0)
        return rc;
    return 0;
}

static int mse_grad_kernel(const vq__kcall *k)
{
    const vq__wrt_params *p = k->params;
    vq_tensor *x = k->in[0], *y = k->in[1], *g = k->in[2], *d = k->out[0];
    if (x->numel == 0)
        return 0;
    double n = (double)x->numel, sign = p->wrt ? -2 : 2;
    /* dOut is read once, before the loop: dZ may be the same tensor. */
    if (x->dtype == VQ_F32) {
        float s = (float)(sign * *(const float *)g->data / n);
        const float *a = x->data, *b = y->data;
        float *o = d->data;
        for (int64_t i = 0; i < x->numel; i++)
            o[i] = s * (a[i] - b[i]);
    } else {
        double s = sign * *(const double *)g->data / n;
        const double *a = x->data, *b = y->data;
        double *o = d->data;
        for (int64_t i = 0; i < x->numel; i++)
            o[i] = s * (a[i] - b[i]);
    }
    return 0;
}

static int mse_grad(const vq__grad *g)
{
    return xy_grad(g, "mse_grad");
}

const vq__op_def vq__ops_loss[] = {
    {.type = "cross_entropy",
     .in_slots = ce_in,
     .nin_slots = 2,
     .out_slots = out_slot,
     .nout_slots = 1,
     .infer = ce_infer,
     .kernel = {ce_kernel},
     .cuda = VQ__CUDA_OP(vq__ce_gpu),
     .grad = ce_grad},
    {.type = "cross_entropy_grad",
     .in_slots = ce_grad_in,
     .nin_slots = 3,
     .out_slots = dx_slot,
     .nout_slots = 1,
     .infer = ce_grad_infer,
     .kernel = {ce_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__ce_grad_gpu)},
    {.type = "softmax_cross_entropy",
     .in_slots = sce_in,
     .nin_slots = 2,
     .out_slots = sce_out,
     .nout_slots = 2,
     .infer = sce_infer,
     .kernel = {sce_kernel},
     .cuda = VQ__CUDA_OP(vq__sce_gpu),
     .grad = sce_grad},
    {.type = "softmax_cross_entropy_grad",
     .in_slots = sce_grad_in,
     .nin_slots = 3,
     .out_slots = sce_grad_out,
     .nout_slots = 1,
     .flags = VQ__INPLACE_OK,
     .infer = sce_grad_infer,
     .kernel = {sce_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__sce_grad_gpu)},
    {.type = "square_error",
     .in_slots = xy_in,
     .nin_slots = 2,
     .out_slots = out_slot,
     .nout_slots = 1,
     .flags = VQ__INPLACE_OK,
     .infer = se_infer,
     .kernel = {se_kernel},
     .cuda = VQ__CUDA_OP(vq__se_gpu),
     .grad = se_grad},
    {.type = "square_error_grad",
     .in_slots = xy_grad_in,
     .nin_slots = 3,
     .out_slots = dz_slot,
     .nout_slots = 1,
     .flags = VQ__INPLACE_OK,
     .attrs = wrt_attrs,
     .nattrs = 1,
     .params_size = sizeof(vq__wrt_params),
     .infer = se_grad_infer,
     .kernel = {se_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__se_grad_gpu)},
    {.type = "mse",
     .in_slots = xy_in,
     .nin_slots = 2,
     .out_slots = out_slot,
     .nout_slots = 1,
     .infer = mse_infer,
     .kernel = {mse_kernel},
     .cuda = VQ__CUDA_OP(vq__mse_gpu),
     .grad = mse_grad},
    {.type = "mse_grad",
     .in_slots = xy_grad_in,
     .nin_slots = 3,
     .out_slots = dz_slot,
     .nout_slots = 1,
     .flags = VQ__INPLACE_OK,
     .attrs = wrt_attrs,
     .nattrs = 1,
     .params_size = sizeof(vq__wrt_params),
     .infer = mse_grad_infer,
     .kernel = {mse_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__mse_grad_gpu)},
    {0},
};
