/* ONNX's recurrent layers, LSTM, GRU and RNN. A node that computes what
 * PyTorch's layers compute (native_fits) becomes one lstm, gru or rnn op,
 * its weights cut into PyTorch's gate order (at import, when they are
 * initializers: torch_weight). Any other is composed of varq ops: for
 * each direction the input projection of every
 * step, X W^T + Wb + Rb, is one matmul before the recurrence; the
 * recurrence is unrolled, each step one matmul with R and the gates'
 * activations, sums and products; sequence_lens masks each step with
 * where, so that outputs past a sequence's length are zeros and the final
 * states are those at its length, as the spec says. Being composed, the
 * imported layers train through autodiff and run on a GPU as any program
 * does. Unrolling needs the sequence length known at import, and at most
 * RNN_MAX_STEPS steps: a few bytes of model must not make the importer
 * emit millions of ops. */
#include "onnx_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The longest sequence unrolled (docs/onnx.md says so). */
#define RNN_MAX_STEPS 4096

/* ---- activations ---- */

enum act_kind {
    ACT_RELU,
    ACT_TANH,
    ACT_SIGMOID,
    ACT_AFFINE,
    ACT_LEAKY_RELU,
    ACT_THRESHOLDED_RELU,
    ACT_SCALED_TANH,
    ACT_HARD_SIGMOID,
    ACT_ELU,
    ACT_SOFTSIGN,
    ACT_SOFTPLUS
};

/* The activations the spec lists, matched without regard to case (as
 * ONNX Runtime does); takes_alpha / takes_beta: whether the activation
 * consumes an entry of activation_alpha / activation_beta (the lists hold
 * entries only for the activations that take them, in order, as ONNX
 * Runtime reads them), and the ONNX op's defaults when the list has run
 * out. */
static const struct {
    const char *name;
    enum act_kind kind;
    bool takes_alpha, takes_beta;
    double alpha, beta;
} act_table[] = {
    {"Relu", ACT_RELU, false, false, 0, 0},
    {"Tanh", ACT_TANH, false, false, 0, 0},
    {"Sigmoid", ACT_SIGMOID, false, false, 0, 0},
    {"Affine", ACT_AFFINE, true, true, 1, 0},
    {"LeakyRelu", ACT_LEAKY_RELU, true, false, 0.01, 0},
    {"ThresholdedRelu", ACT_THRESHOLDED_RELU, true, false, 1, 0},
    {"ScaledTanh", ACT_SCALED_TANH, true, true, 1, 1},
    {"HardSigmoid", ACT_HARD_SIGMOID, true, true, 0.2, 0.5},
    {"Elu", ACT_ELU, true, false, 1, 0},
    {"Softsign", ACT_SOFTSIGN, false, false, 0, 0},
    {"Softplus", ACT_SOFTPLUS, false, false, 0, 0},
};

struct act {
    enum act_kind kind;
    double alpha, beta;
    struct ox_val *threshold; /* ThresholdedRelu's alpha as a scalar, made once */
};

/* ---- one node's recurrence ---- */

enum rnn_kind { KIND_RNN, KIND_GRU, KIND_LSTM };

/* What the recurrence of one node needs, read and checked once. */
struct rnn {
    enum rnn_kind kind;
    int gates;    /* G: the blocks of H rows in W and R (1, 3, 4) */
    int nacts;    /* activations per direction (1, 2, 3) */
    int dirs;     /* 1 or 2 */
    bool reverse; /* the one direction is "reverse" */
    int64_t steps, hidden;
    vq_dtype dt;
    struct act act[2][3]; /* per direction: f, g, h */
    double clip;          /* > 0: the gates' inputs clamped to [-clip, clip] */
    bool input_forget, lbr;
    struct ox_val *x; /* X time-major: [T, B, I] */
    struct ox_val *w, *r, *b, *p;
    struct ox_val *h0, *c0; /* initial_h, initial_c as [D, B, H], or NULL: zeros */
    struct ox_val *lens;    /* sequence_lens as [1, B, 1], or NULL: every one is T */
    struct ox_val **masks;  /* [T]: lens > t, made when a step first needs it */
    struct ox_val *zero, *one, *clip_lo, *clip_hi; /* scalars of dt */
    struct ox_val **xs; /* [T]: the current direction's projection of step t */
};

/* One direction's weights, cut from W, R, B and P. A NULL stands for
 * zeros (no B, no P). */
struct dir_weights {
    struct ox_val *w, *r;    /* [G*H, I], [G*H, H] */
    struct ox_val *bias;     /* [1, G*H] added to the projection */
    struct ox_val *rzr, *rh; /* GRU: R's rows of z and r, and of h */
    struct ox_val *rb;       /* GRU with linear_before_reset: Rb [1, 3H] */
    struct ox_val *rbs[3];   /* ... and its gates' parts [1, H] */
    struct ox_val *peep[3];  /* LSTM: P's i, o, f parts [1, H] */
};

/* ---- small compositions; a NULL operand stands for zeros ---- */

static int emit1(struct ox *x, const char *type, struct ox_val *a, struct ox_val **out)
{
    return ox_emit(x, type, &a, 1, NULL, 1, NULL, 0, out);
}

static int emit2(struct ox *x, const char *type, struct ox_val *a, struct ox_val *b,
                 struct ox_val **out)
{
    return ox_emit(x, type, (struct ox_val *[]){a, b}, 2, NULL, 1, NULL, 0, out);
}

static int add_z(struct ox *x, struct ox_val *a, struct ox_val *b, struct ox_val **out)
{
    if (!a || !b) {
        *out = a ? a : b;
        return 0;
    }
    return emit2(x, "add", a, b, out);
}

static int mul_z(struct ox *x, struct ox_val *a, struct ox_val *b, struct ox_val **out)
{
    if (!a || !b) {
        *out = NULL;
        return 0;
    }
    return emit2(x, "mul", a, b, out);
}

/* v W^T: v [.., K], w [N, K] (NULL for a zero v) */
static int times_t(struct ox *x, struct ox_val *v, struct ox_val *w, struct ox_val **out)
{
    if (!v) {
        *out = NULL;
        return 0;
    }
    vq_attr a = VQ_ATTR_B("transpose_y", true);
    return ox_emit(x, "matmul", (struct ox_val *[]){v, w}, 2, NULL, 1, &a, 1, out);
}

/* v's elements [lo, hi) along axis, and along axis 0 the one at d when
 * axis is not 0 (a direction's row of B or P). */
static int cut(struct ox *x, struct ox_val *v, int d, int axis, int64_t lo, int64_t hi,
               struct ox_val **out)
{
    int64_t axes[2] = {0, axis}, starts[2] = {d, lo}, ends[2] = {d + 1, hi};
    int n = axis == 0 ? 1 : 2;
    if (axis == 0)
        starts[0] = lo, ends[0] = hi;
    vq_attr a[3] = {VQ_ATTR_IS("axes", axes, n), VQ_ATTR_IS("starts", starts, n),
                    VQ_ATTR_IS("ends", ends, n)};
    return ox_emit(x, "slice", &v, 1, NULL, 1, a, 3, out);
}

/* v [.., G*H] cut into its G gates of H along the last axis. */
static int split_gates(struct ox *x, struct ox_val *v, int gates, int64_t hidden,
                       struct ox_val **out)
{
    if (!v) {
        for (int g = 0; g < gates; g++)
            out[g] = NULL;
        return 0;
    }
    int64_t sizes[4] = {hidden, hidden, hidden, hidden};
    vq_attr a[2] = {VQ_ATTR_I("axis", v->meta.ndim - 1), VQ_ATTR_IS("sizes", sizes, gates)};
    return ox_emit(x, "split", &v, 1, NULL, gates, a, 2, out);
}

/* v[0..n) concatenated along axis into name (NULL: a temporary), in
 * rounds of at most VQ__MAX_SLOTS inputs (the slots of one op); v is
 * overwritten. */
static int concat_all(struct ox *x, struct ox_val **v, int n, int axis, const char *name,
                      struct ox_val **out)
{
    vq_attr a = VQ_ATTR_I("axis", axis);
    int rc = 0;
    while (n > VQ__MAX_SLOTS) {
        int m = 0;
        for (int i = 0; i < n && rc == 0; i += VQ__MAX_SLOTS) {
            int k = n - i < VQ__MAX_SLOTS ? n - i : VQ__MAX_SLOTS;
            if (k == 1)
                v[m++] = v[i];
            else /* writes v[m], m <= i, after reading v[i .. i + k) */
                rc = ox_emit(x, "concat", v + i, k, NULL, 1, &a, 1, &v[m++]);
        }
        if (rc)
            return rc;
        n = m;
    }
    if (n == 1) {
        *out = v[0];
        return name ? ox_alias(x, name, v[0]) : 0;
    }
    return ox_emit(x, "concat", v, n, &name, 1, &a, 1, out);
}

/* v transposed by perm (3 or 4 dims) into name. */
static int permute(struct ox *x, struct ox_val *v, const int64_t *perm, const char *name,
                   struct ox_val **out)
{
    vq_attr a = VQ_ATTR_IS("perm", perm, v->meta.ndim);
    return ox_emit(x, "transpose", &v, 1, &name, 1, &a, 1, out);
}

/* v clamped to [-clip, clip] when the node has a clip. */
static int clip(struct ox *x, const struct rnn *n, struct ox_val *v, struct ox_val **out)
{
    struct ox_val *lo;
    if (n->clip <= 0) {
        *out = v;
        return 0;
    }
    int rc = emit2(x, "maximum", v, n->clip_lo, &lo);
    return rc ? rc : emit2(x, "minimum", lo, n->clip_hi, out);
}

/* a(v), the activation composed of varq ops where varq has none. */
static int activate(struct ox *x, const struct rnn *n, struct act *a, struct ox_val *v,
                    struct ox_val **out)
{
    struct ox_val *t, *u, *w;
    int rc;
    switch (a->kind) {
    case ACT_RELU: return emit1(x, "relu", v, out);
    case ACT_TANH: return emit1(x, "tanh", v, out);
    case ACT_SIGMOID: return emit1(x, "sigmoid", v, out);
    case ACT_AFFINE: return ox_affine(x, v, a->alpha, a->beta, out);
    case ACT_LEAKY_RELU: /* where(v < 0, alpha v, v) */
        if ((rc = emit2(x, "less", v, n->zero, &t)) < 0 || (rc = ox_affine(x, v, a->alpha, 0, &u)))
            return rc;
        return ox_select(x, t, u, v, NULL, out);
    case ACT_THRESHOLDED_RELU: /* where(v > alpha, v, 0) */
        if ((!a->threshold && (rc = ox_scalar(x, n->dt, a->alpha, &a->threshold)) < 0) ||
            (rc = emit2(x, "greater", v, a->threshold, &t)) < 0)
            return rc;
        return ox_select(x, t, v, n->zero, NULL, out);
    case ACT_SCALED_TANH: /* alpha tanh(beta v) */
        if ((rc = ox_affine(x, v, a->beta, 0, &t)) < 0 || (rc = emit1(x, "tanh", t, &u)) < 0)
            return rc;
        return ox_affine(x, u, a->alpha, 0, out);
    case ACT_HARD_SIGMOID: { /* clamp(alpha v + beta, 0, 1) */
        vq_attr ab[2] = {VQ_ATTR_F("alpha", a->alpha), VQ_ATTR_F("beta", a->beta)};
        return ox_emit(x, "hard_sigmoid", &v, 1, NULL, 1, ab, 2, out);
    }
    case ACT_ELU: /* where(v > 0, v, alpha (exp(min(v, 0)) - 1)): the exp of
                   * the branch not taken never overflows, so that its
                   * gradient, zero, is not inf * 0 */
        if ((rc = emit2(x, "greater", v, n->zero, &t)) < 0 ||
            (rc = emit2(x, "minimum", v, n->zero, &u)) < 0 || (rc = emit1(x, "exp", u, &w)) < 0 ||
            (rc = ox_affine(x, w, a->alpha, -a->alpha, &u)) < 0)
            return rc;
        return ox_select(x, t, v, u, NULL, out);
    case ACT_SOFTSIGN: /* v / (1 + |v|) */
        if ((rc = emit1(x, "abs", v, &t)) < 0 || (rc = ox_affine(x, t, 1, 1, &u)) < 0)
            return rc;
        return emit2(x, "div", v, u, out);
    case ACT_SOFTPLUS: /* relu(v) + log(1 + exp(-|v|)), which does not overflow */
        if ((rc = emit1(x, "abs", v, &t)) < 0 || (rc = ox_affine(x, t, -1, 0, &u)) < 0 ||
            (rc = emit1(x, "exp", u, &w)) < 0 || (rc = ox_affine(x, w, 1, 1, &t)) < 0 ||
            (rc = emit1(x, "log", t, &u)) < 0 || (rc = emit1(x, "relu", v, &w)) < 0)
            return rc;
        return emit2(x, "add", w, u, out);
    }
    return ox_fail(x, VQ_EINVAL, "activation %d", (int)a->kind);
}

/* ---- reading the node ---- */

/* The activations (attribute activations, else the spec's defaults) with
 * their alphas and betas, for each direction. */
static int read_activations(struct ox *x, struct rnn *n)
{
    static const char *const defaults[3][3] = {[KIND_RNN] = {"Tanh"},
                                               [KIND_GRU] = {"Sigmoid", "Tanh"},
                                               [KIND_LSTM] = {"Sigmoid", "Tanh", "Tanh"}};
    const Onnx__AttributeProto *at = ox_attr(x, "activations");
    int nal, nbe, ia = 0, ib = 0;
    const float *alphas = ox_floats(x, "activation_alpha", &nal);
    const float *betas = ox_floats(x, "activation_beta", &nbe);
    int count = n->nacts;
    if (at) {
        if (at->has_type && at->type != ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS)
            return ox_fail(x, VQ_EINVAL, "attribute activations is not a list of strings");
        count = (int)at->n_strings;
        if (count != n->nacts && count != n->nacts * n->dirs)
            return ox_fail(x, VQ_EINVAL, "attribute activations has %d entries, not %d%s", count,
                           n->nacts * n->dirs, n->dirs == 2 ? " (or one direction's)" : "");
    }
    for (int k = 0; k < count; k++) {
        char name[32] = "";
        if (at) {
            size_t len =
                at->strings[k].len < sizeof name - 1 ? at->strings[k].len : sizeof name - 1;
            if (len)
                memcpy(name, at->strings[k].data, len);
            name[len] = '\0';
        } else {
            strcpy(name, defaults[n->kind][k]);
        }
        int e = -1;
        for (int j = 0; e < 0 && j < (int)(sizeof act_table / sizeof act_table[0]); j++)
            if (!strcasecmp(name, act_table[j].name))
                e = j;
        if (e < 0)
            return ox_fail(x, VQ_ENOSYS, "activation \"%s\" is not one the spec lists", name);
        struct act a = {act_table[e].kind, act_table[e].alpha, act_table[e].beta, NULL};
        if (act_table[e].takes_alpha && ia < nal)
            a.alpha = alphas[ia++];
        if (act_table[e].takes_beta && ib < nbe)
            a.beta = betas[ib++];
        n->act[k / n->nacts][k % n->nacts] = a;
        if (count == n->nacts && n->dirs == 2)
            n->act[1][k] = a; /* one direction's, for both */
    }
    return 0;
}

/* Whether v (a [rank] input; NULL passes) has rank dims and, where both
 * are known, the dims want (-1: any). */
static int check_dims(struct ox *x, const struct ox_val *v, const char *what, int rank,
                      const int64_t *want)
{
    if (!v)
        return 0;
    bool ok = v->meta.ndim == rank;
    for (int i = 0; ok && i < rank; i++)
        ok = want[i] < 0 || v->meta.shape[i] < 0 || v->meta.shape[i] == want[i];
    if (!ok) {
        char got[100], exp[100];
        int64_t w[VQ_MAX_DIMS];
        for (int i = 0; i < rank; i++)
            w[i] = want[i];
        vq__shape_str(got, sizeof got, v->meta.ndim, v->meta.shape);
        vq__shape_str(exp, sizeof exp, rank, w);
        return ox_fail(x, VQ_EINVAL, "%s has shape %s, not %s", what, got, exp);
    }
    return 0;
}

/* sequence_lens into n->lens ([1, B, 1]), or NULL when it is known to be
 * T for every sequence. */
static int read_lens(struct ox *x, struct rnn *n, struct ox_val *v, int64_t batch)
{
    if (!v)
        return 0;
    if ((v->meta.dtype != VQ_I32 && v->meta.dtype != VQ_I64) || v->meta.ndim != 1)
        return ox_fail(x, VQ_EINVAL,
                       "sequence_lens must be a 1-D int32 tensor (it is %s of %d dims)",
                       vq_dtype_name(v->meta.dtype), v->meta.ndim);
    if (batch >= 0 && v->meta.shape[0] >= 0 && v->meta.shape[0] != batch)
        return ox_fail(x, VQ_EINVAL, "sequence_lens has %lld entries for a batch of %lld",
                       (long long)v->meta.shape[0], (long long)batch);
    if (v->konst) {
        bool full = true;
        for (int64_t i = 0; i < v->konst->numel; i++) {
            int64_t len = v->meta.dtype == VQ_I32 ? ((const int32_t *)v->konst->data)[i]
                                                  : ((const int64_t *)v->konst->data)[i];
            if (len < 0 || len > n->steps)
                return ox_fail(x, VQ_EINVAL, "sequence_lens[%lld] is %lld, not in [0, %lld]",
                               (long long)i, (long long)len, (long long)n->steps);
            full &= len == n->steps;
        }
        if (full)
            return 0;
    }
    return ox_reshape(x, v, (int64_t[]){1, -1, 1}, 3, NULL, &n->lens);
}

/* Step t's mask: sequence_lens > t, [1, B, 1]. */
static int mask_of(struct ox *x, struct rnn *n, int64_t t, struct ox_val **out)
{
    if (!n->masks[t]) {
        struct ox_val *k;
        int rc = ox_scalar(x, n->lens->meta.dtype, (double)t, &k);
        if (rc == 0)
            rc = emit2(x, "greater", n->lens, k, &n->masks[t]);
        if (rc)
            return rc;
    }
    *out = n->masks[t];
    return 0;
}

/* Reads and checks the node into *n (whose kind, gates and nacts are
 * set). */
static int read_node(struct ox *x, struct rnn *n)
{
    struct ox_val *v = ox_input(x, 0);
    const char *dir = ox_str(x, "direction");
    bool layout1 = ox_int(x, "layout") != 0;
    int rc;
    if (!strcmp(dir, "forward") || !strcmp(dir, "reverse"))
        n->dirs = 1, n->reverse = dir[0] == 'r';
    else if (!strcmp(dir, "bidirectional"))
        n->dirs = 2;
    else
        return ox_fail(x, VQ_EINVAL, "direction \"%s\" is not forward, reverse or bidirectional",
                       dir);
    if (ox_int(x, "layout") != 0 && ox_int(x, "layout") != 1)
        return ox_fail(x, VQ_EINVAL, "layout %lld is not 0 or 1", (long long)ox_int(x, "layout"));
    n->dt = v->meta.dtype;
    if (!ox_is_float(n->dt) || v->meta.ndim != 3)
        return ox_fail(x, VQ_EINVAL,
                       "X must be a float or double tensor of 3 dims (it is %s of %d)",
                       vq_dtype_name(n->dt), v->meta.ndim);
    n->steps = v->meta.shape[layout1 ? 1 : 0];
    int64_t batch = v->meta.shape[layout1 ? 0 : 1];
    if (n->steps < 0)
        return ox_fail(x, VQ_ENOSYS,
                       "the sequence length (X's dim %d) is not known at import; varq unrolls "
                       "the recurrence and needs it",
                       layout1 ? 1 : 0);
    if (n->steps == 0 || n->steps > RNN_MAX_STEPS)
        return ox_fail(x, VQ_ENOSYS, "a sequence of %lld steps: varq unrolls 1 to %d",
                       (long long)n->steps, RNN_MAX_STEPS);
    n->w = ox_input(x, 1), n->r = ox_input(x, 2), n->b = ox_input(x, 3);
    n->p = n->kind == KIND_LSTM ? ox_input(x, 7) : NULL;
    n->hidden = ox_int(x, "hidden_size");
    if (n->hidden <= 0 && n->r->meta.ndim == 3)
        n->hidden = n->r->meta.shape[2];
    if (n->hidden <= 0)
        return ox_fail(x, VQ_EINVAL, "hidden_size is not given and R's dims do not say it");
    if (n->hidden > INT32_MAX / 8) /* 2 G H, B's width, must not overflow */
        return ox_fail(x, VQ_EINVAL, "hidden_size %lld is too large", (long long)n->hidden);
    int64_t d = n->dirs, gh = n->gates * n->hidden, h = n->hidden;
    if ((rc = check_dims(x, n->w, "W", 3, (int64_t[]){d, gh, v->meta.shape[2]})) < 0 ||
        (rc = check_dims(x, n->r, "R", 3, (int64_t[]){d, gh, h})) < 0 ||
        (rc = check_dims(x, n->b, "B", 2, (int64_t[]){d, 2 * gh})) < 0 ||
        (rc = check_dims(x, n->p, "P", 2, (int64_t[]){d, 3 * h})) < 0)
        return rc;
    static const char *const names[] = {"W", "R", "B", "P", "initial_h", "initial_c"};
    const struct ox_val *same[] = {n->w, n->r, n->b, n->p, ox_input(x, 5), ox_input(x, 6)};
    for (int i = 0; i < 6; i++)
        if (same[i] && same[i]->meta.dtype != n->dt)
            return ox_fail(x, VQ_EINVAL, "%s is %s, X is %s", names[i],
                           vq_dtype_name(same[i]->meta.dtype), vq_dtype_name(n->dt));
    if (ox_given(x, "clip")) {
        n->clip = ox_float(x, "clip");
        if (!(n->clip > 0))
            return ox_fail(x, VQ_EINVAL, "clip %g is not positive", n->clip);
        if ((rc = ox_scalar(x, n->dt, -n->clip, &n->clip_lo)) < 0 ||
            (rc = ox_scalar(x, n->dt, n->clip, &n->clip_hi)) < 0)
            return rc;
    }
    n->input_forget = n->kind == KIND_LSTM && ox_int(x, "input_forget") != 0;
    n->lbr = n->kind == KIND_GRU && ox_int(x, "linear_before_reset") != 0;
    if ((rc = read_activations(x, n)) < 0 || (rc = ox_scalar(x, n->dt, 0, &n->zero)) < 0 ||
        (rc = ox_scalar(x, n->dt, 1, &n->one)) < 0)
        return rc;
    /* time-major: X [T, B, I], the states [D, B, H] */
    int64_t swap[3] = {1, 0, 2}, hd[3] = {layout1 ? batch : d, layout1 ? d : batch, h};
    n->x = v;
    n->h0 = ox_input(x, 5);
    n->c0 = n->kind == KIND_LSTM ? ox_input(x, 6) : NULL;
    if ((rc = check_dims(x, n->h0, "initial_h", 3, hd)) < 0 ||
        (rc = check_dims(x, n->c0, "initial_c", 3, hd)) < 0)
        return rc;
    if (layout1 && ((rc = permute(x, v, swap, NULL, &n->x)) < 0 ||
                    (n->h0 && (rc = permute(x, n->h0, swap, NULL, &n->h0)) < 0) ||
                    (n->c0 && (rc = permute(x, n->c0, swap, NULL, &n->c0)) < 0)))
        return rc;
    return read_lens(x, n, ox_input(x, 4), batch);
}

/* Direction d's weights from W, R, B, P. */
static int cut_weights(struct ox *x, const struct rnn *n, int d, struct dir_weights *dw)
{
    int64_t gh = n->gates * n->hidden, h = n->hidden;
    struct ox_val *w = n->w, *r = n->r, *wb = NULL, *rb = NULL;
    int rc = 0;
    memset(dw, 0, sizeof *dw);
    if (n->dirs == 2 &&
        ((rc = cut(x, w, d, 0, d, d + 1, &w)) < 0 || (rc = cut(x, r, d, 0, d, d + 1, &r)) < 0))
        return rc;
    if ((rc = ox_reshape(x, w, (int64_t[]){gh, -1}, 2, NULL, &dw->w)) < 0 ||
        (rc = ox_reshape(x, r, (int64_t[]){gh, h}, 2, NULL, &dw->r)) < 0)
        return rc;
    if (n->b && ((rc = cut(x, n->b, d, 1, 0, gh, &wb)) < 0 ||
                 (rc = cut(x, n->b, d, 1, gh, 2 * gh, &rb)) < 0))
        return rc;
    /* GRU's linear_before_reset adds Rb's h part inside r (.) (...): Rb is
     * added to each step's recurrent product instead */
    if (n->lbr) {
        dw->bias = wb;
        dw->rb = rb;
        if ((rc = split_gates(x, rb, 3, h, dw->rbs)) < 0)
            return rc;
    } else if ((rc = add_z(x, wb, rb, &dw->bias)) < 0) {
        return rc;
    }
    if (n->kind == KIND_GRU && !n->lbr &&
        ((rc = cut(x, dw->r, 0, 0, 0, 2 * h, &dw->rzr)) < 0 ||
         (rc = cut(x, dw->r, 0, 0, 2 * h, 3 * h, &dw->rh)) < 0))
        return rc;
    for (int k = 0; n->p && k < 3 && rc == 0; k++)
        rc = cut(x, n->p, d, 1, k * h, (k + 1) * h, &dw->peep[k]);
    return rc;
}

/* The projection of every step, X W^T + bias [T, B, G*H], cut into the
 * steps' [1, B, G*H] (n->xs): a split of at most VQ__MAX_SLOTS steps at a
 * time. */
static int project(struct ox *x, struct rnn *n, const struct dir_weights *dw)
{
    struct ox_val *prod, *all;
    int64_t ones[VQ__MAX_SLOTS];
    int rc;
    if ((rc = times_t(x, n->x, dw->w, &prod)) < 0 || (rc = add_z(x, prod, dw->bias, &all)) < 0)
        return rc;
    for (int i = 0; i < VQ__MAX_SLOTS; i++)
        ones[i] = 1;
    for (int64_t t0 = 0; t0 < n->steps; t0 += VQ__MAX_SLOTS) {
        int64_t k = n->steps - t0 < VQ__MAX_SLOTS ? n->steps - t0 : VQ__MAX_SLOTS;
        struct ox_val *piece = all;
        if (k < n->steps && (rc = cut(x, all, 0, 0, t0, t0 + k, &piece)) < 0)
            return rc;
        if (k == 1) {
            n->xs[t0] = piece;
            continue;
        }
        vq_attr a[2] = {VQ_ATTR_I("axis", 0), VQ_ATTR_IS("sizes", ones, (int)k)};
        if ((rc = ox_emit(x, "split", &piece, 1, NULL, (int)k, a, 2, n->xs + t0)) < 0)
            return rc;
    }
    return 0;
}

/* ---- the steps: from the projection xt and the states h, c (NULL:
 * zeros), the new states ---- */

/* Ht = f(xt + h R^T) */
static int rnn_step(struct ox *x, const struct rnn *n, const struct dir_weights *dw, struct act *a,
                    struct ox_val *xt, struct ox_val *h, struct ox_val **hn)
{
    struct ox_val *hr, *s, *sc;
    int rc;
    if ((rc = times_t(x, h, dw->r, &hr)) < 0 || (rc = add_z(x, xt, hr, &s)) < 0 ||
        (rc = clip(x, n, s, &sc)) < 0)
        return rc;
    return activate(x, n, &a[0], sc, hn);
}

/* z = f(xz + h Rz^T), r = f(xr + h Rr^T) (the biases are in xt);
 * n = g(xh + (r (.) h) Rh^T), or with linear_before_reset
 * g(xh + r (.) (h Rh^T + Rbh)); Ht = (1 - z) (.) n + z (.) h. */
static int gru_step(struct ox *x, const struct rnn *n, const struct dir_weights *dw, struct act *a,
                    struct ox_val *xt, struct ox_val *h, struct ox_val **hn)
{
    struct ox_val *xg[3], *hg[3], *gz, *gr, *cz, *cr, *z, *r, *rh, *hh, *gh, *ch, *nn, *omz, *a1,
        *a2, *prod, *hb;
    int64_t hidden = n->hidden;
    int rc;
    if ((rc = split_gates(x, xt, 3, hidden, xg)) < 0)
        return rc;
    if (n->lbr) {
        if ((rc = times_t(x, h, dw->r, &prod)) < 0)
            return rc;
        if (!prod) {
            for (int g = 0; g < 3; g++)
                hg[g] = dw->rbs[g];
        } else if ((rc = add_z(x, prod, dw->rb, &hb)) < 0 ||
                   (rc = split_gates(x, hb, 3, hidden, hg)) < 0) {
            return rc;
        }
    } else if ((rc = times_t(x, h, dw->rzr, &prod)) < 0 ||
               (rc = split_gates(x, prod, 2, hidden, hg)) < 0) {
        return rc;
    }
    if ((rc = add_z(x, xg[0], hg[0], &gz)) < 0 || (rc = add_z(x, xg[1], hg[1], &gr)) < 0 ||
        (rc = clip(x, n, gz, &cz)) < 0 || (rc = clip(x, n, gr, &cr)) < 0 ||
        (rc = activate(x, n, &a[0], cz, &z)) < 0 || (rc = activate(x, n, &a[0], cr, &r)) < 0)
        return rc;
    if (n->lbr)
        rc = mul_z(x, r, hg[2], &hh);
    else if ((rc = mul_z(x, r, h, &rh)) == 0)
        rc = times_t(x, rh, dw->rh, &hh);
    if (rc || (rc = add_z(x, xg[2], hh, &gh)) < 0 || (rc = clip(x, n, gh, &ch)) < 0 ||
        (rc = activate(x, n, &a[1], ch, &nn)) < 0 || (rc = ox_affine(x, z, -1, 1, &omz)) < 0 ||
        (rc = emit2(x, "mul", omz, nn, &a1)) < 0 || (rc = mul_z(x, z, h, &a2)) < 0)
        return rc;
    return add_z(x, a1, a2, hn);
}

/* i = f(xi + h Ri^T + Pi (.) c), f = f(xf + h Rf^T + Pf (.) c) (1 - i
 * with input_forget), cc = g(xc + h Rc^T), C = f (.) c + i (.) cc,
 * o = f(xo + h Ro^T + Po (.) C), Ht = o (.) h(C); W's gates in the order
 * i, o, f, c, P's i, o, f. */
static int lstm_step(struct ox *x, const struct rnn *n, const struct dir_weights *dw, struct act *a,
                     struct ox_val *xt, struct ox_val *h, struct ox_val *c, struct ox_val **hn,
                     struct ox_val **cn)
{
    struct ox_val *hr, *s, *g[4], *pc, *gi, *gf, *go, *ci, *cf, *cc, *co, *i, *f, *o, *blk, *fc,
        *ib, *pco, *hc;
    int rc;
    if ((rc = times_t(x, h, dw->r, &hr)) < 0 || (rc = add_z(x, xt, hr, &s)) < 0 ||
        (rc = split_gates(x, s, 4, n->hidden, g)) < 0)
        return rc;
    if ((rc = mul_z(x, dw->peep[0], c, &pc)) < 0 || (rc = add_z(x, g[0], pc, &gi)) < 0 ||
        (rc = clip(x, n, gi, &ci)) < 0 || (rc = activate(x, n, &a[0], ci, &i)) < 0)
        return rc;
    if (n->input_forget)
        rc = ox_affine(x, i, -1, 1, &f);
    else if ((rc = mul_z(x, dw->peep[2], c, &pc)) == 0 && (rc = add_z(x, g[2], pc, &gf)) == 0 &&
             (rc = clip(x, n, gf, &cf)) == 0)
        rc = activate(x, n, &a[0], cf, &f);
    if (rc || (rc = clip(x, n, g[3], &cc)) < 0 || (rc = activate(x, n, &a[1], cc, &blk)) < 0 ||
        (rc = mul_z(x, f, c, &fc)) < 0 || (rc = emit2(x, "mul", i, blk, &ib)) < 0 ||
        (rc = add_z(x, fc, ib, cn)) < 0)
        return rc;
    if ((rc = mul_z(x, dw->peep[1], *cn, &pco)) < 0 || (rc = add_z(x, g[1], pco, &go)) < 0 ||
        (rc = clip(x, n, go, &co)) < 0 || (rc = activate(x, n, &a[0], co, &o)) < 0 ||
        (rc = activate(x, n, &a[2], *cn, &hc)) < 0)
        return rc;
    return emit2(x, "mul", o, hc, hn);
}

/* Direction d over every step, in its order: its outputs ys[t] ([1, B, H],
 * when ys is not NULL) and its last states. */
static int run_direction(struct ox *x, struct rnn *n, int d, struct ox_val **ys,
                         struct ox_val **h_last, struct ox_val **c_last)
{
    bool reverse = n->dirs == 2 ? d == 1 : n->reverse;
    struct dir_weights dw;
    struct ox_val *h = NULL, *c = NULL;
    int rc;
    if ((rc = cut_weights(x, n, d, &dw)) < 0 || (rc = project(x, n, &dw)) < 0 ||
        (n->h0 && (rc = cut(x, n->h0, 0, 0, d, d + 1, &h)) < 0) ||
        (n->c0 && (rc = cut(x, n->c0, 0, 0, d, d + 1, &c)) < 0))
        return rc;
    for (int64_t k = 0; k < n->steps; k++) {
        int64_t t = reverse ? n->steps - 1 - k : k;
        struct ox_val *hn = NULL, *cn = NULL, *m = NULL, *y = NULL;
        struct act *a = n->act[d];
        if (n->kind == KIND_LSTM)
            rc = lstm_step(x, n, &dw, a, n->xs[t], h, c, &hn, &cn);
        else if (n->kind == KIND_GRU)
            rc = gru_step(x, n, &dw, a, n->xs[t], h, &hn);
        else
            rc = rnn_step(x, n, &dw, a, n->xs[t], h, &hn);
        if (rc)
            return rc;
        if (!n->lens) {
            y = h = hn;
            c = cn;
        } else {
            /* past a sequence's length: the output is 0, the states stay */
            if ((rc = mask_of(x, n, t, &m)) < 0 ||
                ((ys || !h) && (rc = ox_select(x, m, hn, n->zero, NULL, &y)) < 0) ||
                (h && (rc = ox_select(x, m, hn, h, NULL, &h)) < 0) ||
                (cn && (rc = ox_select(x, m, cn, c ? c : n->zero, NULL, &c)) < 0))
                return rc;
            if (!h)
                h = y;
        }
        if (ys)
            ys[t] = y;
    }
    *h_last = h;
    *c_last = c;
    return 0;
}

/* The node's outputs from each direction's: Y [T, D, B, H] (layout 1:
 * [B, T, D, H]) from the steps' [1, B, H]; Y_h, Y_c [D, B, H] (layout 1:
 * [B, D, H]). */
static int emit_outputs(struct ox *x, const struct rnn *n, struct ox_val ***ys, struct ox_val **hs,
                        struct ox_val **cs)
{
    bool layout1 = ox_int(x, "layout") != 0;
    const char *yname = ox_out(x, 0);
    int64_t swap[3] = {1, 0, 2}, to_batch[4] = {2, 0, 1, 3};
    struct ox_val *per[2], *v;
    int rc;
    if (yname) {
        for (int d = 0; d < n->dirs; d++) {
            struct ox_val *seq;
            const char *name = n->dirs == 1 && !layout1 ? yname : NULL;
            if ((rc = concat_all(x, ys[d], (int)n->steps, 0, NULL, &seq)) < 0 ||
                (rc = ox_reshape(x, seq, (int64_t[]){n->steps, 1, -1, n->hidden}, 4, name,
                                 &per[d])) < 0)
                return rc;
        }
        v = per[0];
        if (n->dirs == 2 && (rc = concat_all(x, per, 2, 1, layout1 ? NULL : yname, &v)) < 0)
            return rc;
        if (layout1 && (rc = permute(x, v, to_batch, yname, NULL)) < 0)
            return rc;
    }
    for (int k = 1; k <= 2; k++) {
        const char *name = ox_out(x, k);
        struct ox_val **last = k == 1 ? hs : cs;
        if (!name || (k == 2 && n->kind != KIND_LSTM))
            continue;
        if ((rc = concat_all(x, last, n->dirs, 0, layout1 ? NULL : name, &v)) < 0 ||
            (layout1 && (rc = permute(x, v, swap, name, NULL)) < 0))
            return rc;
    }
    return 0;
}

/* ---- onto varq's own recurrent ops ---- */

/* Whether the node means exactly what PyTorch's layer computes, which is
 * what varq's lstm, gru and rnn ops run: the default activations (an RNN's
 * Tanh or Relu, the same for both directions), no clip, no peepholes, no
 * input_forget, GRU's linear_before_reset, every sequence at its full
 * length, forward or bidirectional, and initial states given together. */
static bool native_fits(struct ox *x, const struct rnn *n)
{
    static const enum act_kind defaults[3][3] = {
        [KIND_RNN] = {ACT_TANH},
        [KIND_GRU] = {ACT_SIGMOID, ACT_TANH},
        [KIND_LSTM] = {ACT_SIGMOID, ACT_TANH, ACT_TANH},
    };
    if (n->clip > 0 || n->p || n->input_forget || n->lens || n->reverse ||
        (n->kind == KIND_GRU && !n->lbr) || (n->kind == KIND_LSTM && !n->h0 != !n->c0))
        return false;
    for (int d = 0; d < n->dirs; d++)
        for (int k = 0; k < n->nacts; k++) {
            enum act_kind a = n->act[d][k].kind, want = defaults[n->kind][k];
            bool relu = n->kind == KIND_RNN && a == ACT_RELU && n->act[0][0].kind == ACT_RELU;
            if (a != want && !relu)
                return false;
        }
    (void)x;
    return true;
}

/* Direction d's G blocks of H rows of v (W, R [D, G*H, ...] or B [D, 2 G*H]
 * from column first), along axis 1, as [G*H, ...] or [G*H] in PyTorch's
 * gate order: ONNX's LSTM is i, o, f, c
 * and PyTorch's i, f, g, o; ONNX's GRU z, r, h and PyTorch's r, z, n. */
static int torch_gates(struct ox *x, const struct rnn *n, struct ox_val *v, int d, int axis,
                       int64_t first, struct ox_val **out)
{
    static const int lstm[4] = {0, 2, 3, 1}, gru[3] = {1, 0, 2};
    const int *from = n->kind == KIND_LSTM ? lstm : n->kind == KIND_GRU ? gru : NULL;
    int64_t h = n->hidden;
    struct ox_val *blocks[4];
    int rc = 0;
    for (int g = 0; g < n->gates && rc == 0; g++) {
        int64_t lo = first + (from ? from[g] : g) * h;
        rc = cut(x, v, d, axis, lo, lo + h, &blocks[g]);
    }
    if (rc)
        return rc;
    /* a [1, rows, cols] or [1, G*H] piece: the direction's dim dropped */
    struct ox_val *cat;
    if (n->gates == 1)
        cat = blocks[0];
    else if ((rc = concat_all(x, blocks, n->gates, axis, NULL, &cat)) < 0)
        return rc;
    int64_t shape[2] = {n->gates * h, -1};
    return ox_reshape(x, cat, shape, v->meta.ndim - 1, NULL, out);
}

/* torch_gates for v a float initializer (a parameter, never known at
 * import): the piece is cut now, in C, into a parameter of its own named
 * "<v>@<PyTorch's name>" (weight_ih_l0, bias_hh_l0_reverse, ...), so that
 * no slice or concat runs with the model; training through the node then
 * updates those parameters, which v's var no longer feeds. Another value
 * goes through torch_gates (a known one folds there). */
static int torch_weight(struct ox *x, const struct rnn *n, struct ox_val *v, int d, int64_t first,
                        const char *torch_name, struct ox_val **out)
{
    const vq_tensor *t = v->konst ? NULL : ox_param_value(x, v);
    if (!t)
        return torch_gates(x, n, v, d, 1, first, out);
    char name[400];
    snprintf(name, sizeof name, "%s@%s_l0%s", v->name, torch_name, d ? "_reverse" : "");
    if ((*out = ox_find(x, name)) != NULL) /* another node shares v */
        return 0;
    static const int lstm[4] = {0, 2, 3, 1}, gru[3] = {1, 0, 2};
    const int *from = n->kind == KIND_LSTM ? lstm : n->kind == KIND_GRU ? gru : NULL;
    int64_t h = n->hidden, inner = t->ndim == 3 ? t->shape[2] : 1;
    int64_t shape[2] = {n->gates * h, inner};
    vq_tensor *piece;
    int rc = ox_tensor_new(x, &piece, t->dtype, t->ndim - 1, shape);
    if (rc < 0)
        return rc;
    size_t es = vq_dtype_size(t->dtype), block = (size_t)(h * inner) * es;
    const char *src = (const char *)t->data + (size_t)(d * t->shape[1] * inner) * es;
    for (int g = 0; g < n->gates; g++)
        memcpy((char *)piece->data + (size_t)g * block,
               src + (size_t)((first + (from ? from[g] : g) * h) * inner) * es, block);
    rc = ox_param(x, name, piece);
    vq_tensor_release(piece);
    if (rc < 0)
        return rc;
    *out = ox_find(x, name);
    return 0;
}

/* The node as one lstm, gru or rnn op: X, then per direction PyTorch's
 * weight_ih, weight_hh (and bias_ih, bias_hh) cut from W, R and B in its
 * gate order, then initial_h (and initial_c); its Y [T, B, D*H] reshaped
 * and transposed into ONNX's [T, D, B, H] (or layout 1's [B, T, D, H]),
 * its HN (and CN) ONNX's Y_h (and Y_c). */
static int native(struct ox *x, const struct rnn *n)
{
    static const char *const types[] =
        {[KIND_RNN] = "rnn", [KIND_GRU] = "gru", [KIND_LSTM] = "lstm"};
    struct ox_val *in[16];
    int nin = 0, rc = 0;
    in[nin++] = n->x;
    for (int d = 0; d < n->dirs && rc == 0; d++) {
        int64_t gh = n->gates * n->hidden;
        if ((rc = torch_weight(x, n, n->w, d, 0, "weight_ih", &in[nin++])) < 0 ||
            (rc = torch_weight(x, n, n->r, d, 0, "weight_hh", &in[nin++])) < 0)
            break;
        if (n->b && ((rc = torch_weight(x, n, n->b, d, 0, "bias_ih", &in[nin++])) < 0 ||
                     (rc = torch_weight(x, n, n->b, d, gh, "bias_hh", &in[nin++])) < 0))
            break;
    }
    if (rc)
        return rc;
    if (n->h0)
        in[nin++] = n->h0;
    if (n->c0)
        in[nin++] = n->c0;
    vq_attr a[5] = {VQ_ATTR_I("hidden_size", n->hidden), VQ_ATTR_I("num_layers", 1),
                    VQ_ATTR_B("bidirectional", n->dirs == 2), VQ_ATTR_B("bias", n->b != NULL),
                    VQ_ATTR_S("nonlinearity", n->act[0][0].kind == ACT_RELU ? "relu" : "tanh")};
    bool layout1 = ox_int(x, "layout") != 0;
    int nout = n->kind == KIND_LSTM ? 3 : 2;
    const char *names[3] = {NULL, layout1 ? NULL : ox_out(x, 1),
                            layout1 || nout < 3 ? NULL : ox_out(x, 2)};
    struct ox_val *out[3];
    if ((rc = ox_emit(x, types[n->kind], in, nin, names, nout, a, n->kind == KIND_RNN ? 5 : 4,
                      out)) < 0)
        return rc;
    int64_t swap[3] = {1, 0, 2};
    for (int k = 1; layout1 && k < nout; k++)
        if (ox_out(x, k) && (rc = permute(x, out[k], swap, ox_out(x, k), NULL)) < 0)
            return rc;
    const char *yname = ox_out(x, 0);
    if (!yname)
        return 0;
    struct ox_val *y4;
    int64_t perm0[4] = {0, 2, 1, 3}, perm1[4] = {1, 0, 2, 3};
    if (n->dirs == 1 && !layout1) /* [T, B, H] as [T, 1, B, H]: no data moves */
        return ox_reshape(x, out[0], (int64_t[]){0, 1, -1, n->hidden}, 4, yname, NULL);
    if ((rc = ox_reshape(x, out[0], (int64_t[]){0, 0, n->dirs, n->hidden}, 4, NULL, &y4)) < 0)
        return rc;
    return permute(x, y4, layout1 ? perm1 : perm0, yname, NULL);
}

static int recurrent(struct ox *x, enum rnn_kind kind)
{
    static const int gates[] = {[KIND_RNN] = 1, [KIND_GRU] = 3, [KIND_LSTM] = 4};
    struct rnn n = {.kind = kind, .gates = gates[kind], .nacts = (int)kind + 1};
    struct ox_val *hs[2] = {0}, *cs[2] = {0}, **ys[2] = {0};
    int rc = read_node(x, &n);
    if (rc)
        return rc;
    if (native_fits(x, &n) && !getenv("VARQ_ONNX_UNROLL_RNN"))
        return native(x, &n);
    size_t t = (size_t)n.steps;
    n.masks = vq__calloc(t, sizeof *n.masks);
    n.xs = vq__calloc(t, sizeof *n.xs);
    bool want_y = ox_out(x, 0) != NULL;
    for (int d = 0; want_y && d < n.dirs; d++)
        ys[d] = vq__calloc(t, sizeof *ys[d]);
    if (!n.masks || !n.xs || (want_y && (!ys[0] || (n.dirs == 2 && !ys[1]))))
        rc = vq__fail(VQ_ENOMEM, "onnx: out of memory");
    for (int d = 0; rc == 0 && d < n.dirs; d++)
        rc = run_direction(x, &n, d, ys[d], &hs[d], &cs[d]);
    if (rc == 0)
        rc = emit_outputs(x, &n, ys, hs, cs);
    free(n.masks);
    free(n.xs);
    free(ys[0]);
    free(ys[1]);
    return rc;
}

static int t_rnn(struct ox *x)
{
    return recurrent(x, KIND_RNN);
}

static int t_gru(struct ox *x)
{
    return recurrent(x, KIND_GRU);
}

static int t_lstm(struct ox *x)
{
    return recurrent(x, KIND_LSTM);
}

/* ---- the rows ---- */

/* The attributes the three share; activations (a list of strings) is read
 * from the node itself. */
#define RNN_ATTRS                                                                           \
    OX_FLOATS("activation_alpha", 6), OX_FLOATS("activation_beta", 6), OX_FLOAT("clip", 0), \
        OX_STR("direction", "forward", 16), OX_INT("hidden_size", 0),                       \
        OX_INT("layout", 0, .since = 14)

/* X, W, R, B, sequence_lens, initial_h (LSTM: initial_c, P) */
const struct ox_op ox_op_RNN = OX_ROW(t_rnn, NULL, 3, 6, false, OX_ATTRS(RNN_ATTRS));
const struct ox_op ox_op_GRU =
    OX_ROW(t_gru, NULL, 3, 6, false,
           OX_ATTRS(RNN_ATTRS, OX_INT("linear_before_reset", 0, .since = 3)));
const struct ox_op ox_op_LSTM =
    OX_ROW(t_lstm, NULL, 3, 8, false, OX_ATTRS(RNN_ATTRS, OX_INT("input_forget", 0)));
