/* Recurrent layers: lstm, gru and rnn (PyTorch's nn.LSTM, nn.GRU and
 * nn.RNN, sequence-major, so that weights transfer as they are) and their
 * gradient ops lstm_grad, gru_grad and rnn_grad (backpropagation through
 * time over the activations the forward call saved).
 *
 * lstm(X, W..., [H0, C0]) -> Y, HN, CN, [Reserve]
 * gru(X, W..., [H0]) -> Y, HN, [Reserve]
 * rnn(X, W..., [H0]) -> Y, HN, [Reserve]
 *   attributes hidden_size H (required), num_layers L (1), bidirectional
 *   (false: D = 1, true: D = 2), bias (true), rnn's nonlinearity ("tanh"
 *   or "relu"). X is [T, B, I], f32 or f64. W... are the weights of each
 *   layer and direction in PyTorch's order (layer 0, layer 0 reverse,
 *   layer 1, ...), each as PyTorch names them: weight_ih [G*H, in],
 *   weight_hh [G*H, H], then with bias bias_ih [G*H] and bias_hh [G*H]
 *   (G: lstm 4, gates i, f, g, o; gru 3, r, z, n; rnn 1; in: I for layer
 *   0, D*H above): the list model.parameters() gives. H0 and C0, both
 *   [L*D, B, H], are optional (zeros). Y is [T, B, D*H] (the last
 *   layer's outputs, the reverse direction's in the second half), HN and
 *   CN [L*D, B, H] (each layer and direction's last state: the reverse
 *   direction's is the one at t = 0).
 *
 * Why one variadic slot of weights and the states after them: a layer's
 * weights keep their PyTorch shapes and order, so a state_dict maps onto
 * the inputs one to one, and each gets its own gradient without slicing a
 * packed buffer; the states come last so that they can be left out. The
 * count of weights follows from the attributes, so the call's input
 * count says whether the states are given.
 *
 * Reserve, an optional last output, holds what the gradient needs: for
 * each layer its outputs [T, B, D*H], then each direction's saved cells
 * [T, B, S] (lstm: the gates i, f, g, o after their activations and the
 * cell c, S = 5H; gru: r, z, n and W_hn h + b_hn, S = 4H; rnn: nothing,
 * its derivative comes from h). A call without it (inference) keeps the
 * cells of one step in scratch. The gradient maker reads Reserve when the
 * forward op in the program writes it and otherwise emits the forward op
 * again with it (the same bits); the executor frees it after the gradient
 * op, its one reader.
 *
 * <cell>_grad(X, W..., [H0, C0], Reserve, [dY], [dHN], [dCN]) -> dX,
 * dW..., [dH0, dC0]: the forward op's attributes and grads (bits 1: dY,
 * 2: dHN, 4: dCN: which of the gradients flowing into the outputs follow
 * Reserve, at least one). One call computes every gradient.
 *
 * The kernels: per layer and direction, the input projection of all T
 * steps is one matrix product (OpenBLAS, vq__gemm) before the recurrence;
 * each step is one product of h with W_hh and one pass over [B, G*H]
 * that adds the biases, applies the gates and writes h (and c); scratch
 * comes once per call, and the weights are transposed (f32 with AVX-512:
 * packed into the product's panels) once per call, not per step; f32
 * cells on AVX-512 take gate functions of their own (the _512 cells). The two directions of a layer are independent and
 * run as two chunks of vq__parallel_for (the idle workers take one), the
 * bits the same however they run. The gradient runs the steps backwards,
 * keeping the gates' gradients of every step, and then forms dW_ih, dW_hh,
 * the biases' gradients and dX as whole-sequence products. The CUDA
 * kernels (ops/cuda/rnn_host.c) walk the same way on the op's stream, the
 * products on cuBLAS and one thread per element in the cells. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"
#include "../math/isa.h"
#include "../math/sgemm.h"
#include "../math/vmath.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const x_w_in[] = {"X", "W"};
static const char *const lstm_out[] = {"Y", "HN", "CN", "Reserve"};
static const char *const gru_out[] = {"Y", "HN", "Reserve"};
static const char *const grad_out[] = {"dX", "dW"};

/* lstm and gru take the first 4, their gradient ops all 5 */
static const vq__attr_spec cell_attrs[] = {
    {"hidden_size", VQ_ATTR_INT, true, NULL},
    {"num_layers", VQ_ATTR_INT, false, "1"},
    {"bidirectional", VQ_ATTR_BOOL, false, "false"},
    {"bias", VQ_ATTR_BOOL, false, "true"},
    {"grads", VQ_ATTR_INT, true, NULL},
};

/* rnn the first 5, rnn_grad all 6 */
static const vq__attr_spec rnn_attrs[] = {
    {"hidden_size", VQ_ATTR_INT, true, NULL},        {"num_layers", VQ_ATTR_INT, false, "1"},
    {"bidirectional", VQ_ATTR_BOOL, false, "false"}, {"bias", VQ_ATTR_BOOL, false, "true"},
    {"nonlinearity", VQ_ATTR_STRING, false, "tanh"}, {"grads", VQ_ATTR_INT, true, NULL},
};

/* ---- shapes ---- */

static int gates_of(int cell)
{
    return cell == VQ__RNN_LSTM ? 4 : cell == VQ__RNN_GRU ? 3 : 1;
}

/* The states a cell carries: lstm h and c, the others h. */
static int states_of(int cell)
{
    return cell == VQ__RNN_LSTM ? 2 : 1;
}

/* Elements saved per step, batch row and direction. */
static int64_t saved_of(const vq__rnn_params *p)
{
    return p->cell == VQ__RNN_LSTM  ? 5 * (int64_t)p->hidden
           : p->cell == VQ__RNN_GRU ? 4 * (int64_t)p->hidden
                                    : 0;
}

static int per_dir(const vq__rnn_params *p)
{
    return p->bias ? 4 : 2;
}

static int nweights(const vq__rnn_params *p)
{
    return p->layers * p->dirs * per_dir(p);
}

/* Reserve's elements: -1 when T or B is unknown. */
static int64_t reserve_numel(const vq__rnn_params *p)
{
    if (p->steps < 0 || p->batch < 0)
        return -1;
    return (int64_t)p->layers * p->steps * p->batch * p->dirs * (p->hidden + saved_of(p));
}

static const char *const weight_names[] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};

/* Weight j of the list: its PyTorch name into buf. */
static const char *weight_name(const vq__rnn_params *p, int j, char *buf, size_t n)
{
    int ld = j / per_dir(p), l = ld / p->dirs, d = ld % p->dirs;
    snprintf(buf, n, "%s_l%d%s", weight_names[j % per_dir(p)], l, d ? "_reverse" : "");
    return buf;
}

static void meta_str(const vq__meta *m, char *buf, size_t n)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int d = 0; d < m->ndim && o < n; d++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", d ? ", " : "", (long long)m->shape[d]);
    if (o < n)
        snprintf(buf + o, n - o, "]");
}

/* Input i must be of X's dtype with the shape want. */
static int check_input(const vq__infer *c, int i, const char *name, const vq__meta *want)
{
    const vq__meta *m = &c->in[i];
    if (m->dtype != c->in[0].dtype)
        return vq__op_fail(c->def, "input %s (input %d) is %s, X is %s", name, i,
                           vq_dtype_name(m->dtype), vq_dtype_name(c->in[0].dtype));
    bool ok = m->ndim == want->ndim;
    for (int d = 0; ok && d < m->ndim; d++)
        ok = vq__dim_match(m->shape[d], want->shape[d]);
    if (!ok) {
        char got[96], exp[96];
        meta_str(m, got, sizeof got);
        meta_str(want, exp, sizeof exp);
        return vq__op_fail(c->def, "input %s (input %d): shape %s is not %s", name, i, got, exp);
    }
    return 0;
}

static vq__meta meta_of(vq_dtype dt, int ndim, int64_t a, int64_t b, int64_t c)
{
    vq__meta m = {.dtype = dt, .ndim = ndim};
    m.shape[0] = a;
    m.shape[1] = b;
    m.shape[2] = c;
    return m;
}

/* The attributes, X and the weights: the part of the forward and the
 * gradient op's inference they share. */
static int infer_common(vq__infer *c, vq__rnn_params *p)
{
    p->cell = c->def->code;
    int64_t h = vq__attr_int(c, "hidden_size", 0), l = vq__attr_int(c, "num_layers", 1);
    if (h < 1 || h > INT32_MAX / 8)
        return vq__attr_fail(c, "hidden_size", "is %lld, not in [1, 2^28)", (long long)h);
    if (l < 1 || l > 16)
        return vq__attr_fail(c, "num_layers", "is %lld, not in [1, 16]", (long long)l);
    p->hidden = (int)h;
    p->layers = (int)l;
    p->dirs = vq__attr_bool(c, "bidirectional", false) ? 2 : 1;
    p->bias = vq__attr_bool(c, "bias", true);
    const vq_attr *nl = vq__attr_find(c, "nonlinearity"); /* rnn's schema alone has it */
    if (nl && !strcmp(nl->s, "relu"))
        p->cell = VQ__RNN_RELU;
    else if (nl && strcmp(nl->s, "tanh"))
        return vq__attr_fail(c, "nonlinearity", "is \"%s\", not \"tanh\" or \"relu\"", nl->s);
    if (1 + nweights(p) + 2 > VQ__MAX_SLOTS)
        return vq__op_fail(c->def, "%d layers of %d direction(s) take %d weights, more than %d",
                           p->layers, p->dirs, nweights(p), VQ__MAX_SLOTS - 8);
    int rc = vq__check_dtype(c, 0, VQ__FLOATS);
    if (rc == 0)
        rc = vq__check_rank(c, 0, 3);
    if (rc < 0)
        return rc;
    p->steps = c->in[0].shape[0];
    p->batch = c->in[0].shape[1];
    p->input = c->in[0].shape[2];
    /* the products' dims are BLAS ints: T * B rows, I columns */
    if ((p->steps > 0 && p->batch > INT32_MAX / p->steps) || p->input > INT32_MAX)
        return vq__in_fail(c, 0, "T * B = %lld rows or I = %lld is past BLAS's limit of %d",
                           (long long)p->steps * (long long)p->batch, (long long)p->input,
                           INT32_MAX);
    if (c->nin < 1 + nweights(p))
        return vq__op_fail(c->def,
                           "%d layer(s) of %d direction(s) take %d weights (%s per layer and "
                           "direction), got %d input(s) after X",
                           p->layers, p->dirs, nweights(p),
                           p->bias ? "weight_ih, weight_hh, bias_ih, bias_hh"
                                   : "weight_ih, weight_hh",
                           c->nin - 1);
    int64_t gh = (int64_t)gates_of(p->cell) * p->hidden;
    for (int j = 0; j < nweights(p); j++) {
        int kind = j % per_dir(p), layer = j / per_dir(p) / p->dirs;
        int64_t in = layer == 0 ? p->input : (int64_t)p->dirs * p->hidden;
        vq__meta want = kind == 0   ? meta_of(c->in[0].dtype, 2, gh, in, 0)
                        : kind == 1 ? meta_of(c->in[0].dtype, 2, gh, p->hidden, 0)
                                    : meta_of(c->in[0].dtype, 1, gh, 0, 0);
        char name[40];
        if ((rc = check_input(c, 1 + j, weight_name(p, j, name, sizeof name), &want)) < 0)
            return rc;
    }
    return 0;
}

/* H0 and C0 from input first on, when states says they are given. */
static int infer_states(vq__infer *c, const vq__rnn_params *p, int first)
{
    vq__meta want = meta_of(c->in[0].dtype, 3, (int64_t)p->layers * p->dirs, p->batch, p->hidden);
    for (int s = 0; p->states && s < states_of(p->cell); s++) {
        int rc = check_input(c, first + s, s ? "C0" : "H0", &want);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int rnn_infer(vq__infer *c)
{
    vq__rnn_params *p = c->params;
    int rc = infer_common(c, p);
    if (rc < 0)
        return rc;
    int ns = states_of(p->cell), rest = c->nin - 1 - nweights(p);
    if (rest != 0 && rest != ns)
        return vq__op_fail(c->def,
                           "takes X, %d weights and optionally %s: got %d input(s) after the "
                           "weights",
                           nweights(p), ns == 2 ? "H0 and C0" : "H0", rest);
    p->states = rest != 0;
    if ((rc = infer_states(c, p, 1 + nweights(p))) < 0)
        return rc;
    if (c->nout != ns + 1 && c->nout != ns + 2)
        return vq__op_fail(c->def, "has %d outputs (Reserve optional), not %d", ns + 2, c->nout);
    p->reserve = c->nout == ns + 2;
    vq_dtype dt = c->in[0].dtype;
    c->out[0] = meta_of(dt, 3, p->steps, p->batch, (int64_t)p->dirs * p->hidden); /* Y */
    for (int s = 0; s < ns; s++)
        c->out[1 + s] = meta_of(dt, 3, (int64_t)p->layers * p->dirs, p->batch, p->hidden);
    if (p->reserve)
        c->out[1 + ns] = meta_of(dt, 1, reserve_numel(p), 0, 0);
    return 0;
}

static int popcount3(int bits)
{
    return (bits & 1) + (bits >> 1 & 1) + (bits >> 2 & 1);
}

static int rnn_grad_infer(vq__infer *c)
{
    vq__rnn_params *p = c->params;
    int rc = infer_common(c, p);
    if (rc < 0)
        return rc;
    int ns = states_of(p->cell), grads = (int)vq__attr_int(c, "grads", 0);
    if (grads < 1 || grads >= 1 << (1 + ns))
        return vq__attr_fail(c, "grads", "is %d: bits 1 (dY), 2 (dHN)%s, at least one", grads,
                             ns == 2 ? ", 4 (dCN)" : "");
    p->grads = grads;
    int rest = c->nin - 1 - nweights(p) - 1 - popcount3(grads);
    if (rest != 0 && rest != ns)
        return vq__op_fail(c->def,
                           "takes X, %d weights, optionally %s, Reserve and %d gradient(s): got "
                           "%d input(s)",
                           nweights(p), ns == 2 ? "H0 and C0" : "H0", popcount3(grads), c->nin);
    p->states = rest != 0;
    int r = 1 + nweights(p) + rest;
    if ((rc = infer_states(c, p, 1 + nweights(p))) < 0)
        return rc;
    vq_dtype dt = c->in[0].dtype;
    vq__meta want = meta_of(dt, 1, reserve_numel(p), 0, 0);
    if ((rc = check_input(c, r, "Reserve", &want)) < 0)
        return rc;
    int i = r + 1;
    if (grads & 1) {
        want = meta_of(dt, 3, p->steps, p->batch, (int64_t)p->dirs * p->hidden);
        if ((rc = check_input(c, i++, "dY", &want)) < 0)
            return rc;
    }
    want = meta_of(dt, 3, (int64_t)p->layers * p->dirs, p->batch, p->hidden);
    for (int s = 0; s < ns; s++)
        if (grads & 2 << s && (rc = check_input(c, i++, s ? "dCN" : "dHN", &want)) < 0)
            return rc;
    int nout = 1 + nweights(p) + (p->states ? ns : 0);
    if (c->nout != nout)
        return vq__op_fail(c->def, "has %d outputs (dX, the weights'%s), not %d", nout,
                           p->states ? (ns == 2 ? ", dH0, dC0" : ", dH0") : "", c->nout);
    for (int j = 0; j < nout; j++)
        c->out[j] = c->in[j];
    return 0;
}

/* ---- the cells, one step over [B, G*H] ---- */

/* Per batch row b: xp (the input projection, row stride G*H), hp (h_prev
 * W_hh^T, the same), bx (the biases added to both, G*H; gru's n part only
 * b_in), bn (gru: b_hn); the previous state (NULL: zeros) with its row
 * stride; cur, the saved cells (row stride sv); h, the new state (row
 * stride ldh). The sigmoid never exponentiates a positive number. */
#define RNN_CELLS(T, EXP, TANH)                                                                    \
    static inline T sigm_##T(T v)                                                                  \
    {                                                                                              \
        if (v >= 0)                                                                                \
            return (T)1 / ((T)1 + EXP(-v));                                                        \
        T e = EXP(v);                                                                              \
        return e / ((T)1 + e);                                                                     \
    }                                                                                              \
    /* unused for float: its forward takes the vectorized cells below */                           \
    __attribute__((unused)) static void lstm_step_##T(int64_t nb, int64_t H, const T *xp,          \
                                                      const T *hp, const T *bx, const T *cprev,    \
                                                      int64_t ldc, T *cur, int64_t sv, T *h,       \
                                                      int64_t ldh)                                 \
    {                                                                                              \
        for (int64_t b = 0; b < nb; b++) {                                                         \
            const T *x = xp + b * 4 * H, *r = hp + b * 4 * H;                                      \
            const T *cp = cprev ? cprev + b * ldc : NULL;                                          \
            T *s = cur + b * sv, *ho = h + b * ldh;                                                \
            for (int64_t j = 0; j < H; j++) {                                                      \
                T i = sigm_##T(x[j] + r[j] + bx[j]);                                               \
                T f = sigm_##T(x[H + j] + r[H + j] + bx[H + j]);                                   \
                T g = TANH(x[2 * H + j] + r[2 * H + j] + bx[2 * H + j]);                           \
                T o = sigm_##T(x[3 * H + j] + r[3 * H + j] + bx[3 * H + j]);                       \
                T c = f * (cp ? cp[j] : (T)0) + i * g;                                             \
                s[j] = i;                                                                          \
                s[H + j] = f;                                                                      \
                s[2 * H + j] = g;                                                                  \
                s[3 * H + j] = o;                                                                  \
                s[4 * H + j] = c;                                                                  \
                ho[j] = o * TANH(c);                                                               \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    __attribute__((unused)) static void gru_step_##T(int64_t nb, int64_t H, const T *xp,           \
                                                     const T *hp, const T *bx, const T *bn,        \
                                                     const T *hprev, int64_t ldp, T *cur,          \
                                                     int64_t sv, T *h, int64_t ldh)                \
    {                                                                                              \
        for (int64_t b = 0; b < nb; b++) {                                                         \
            const T *x = xp + b * 3 * H, *r = hp + b * 3 * H;                                      \
            const T *pv = hprev ? hprev + b * ldp : NULL;                                          \
            T *s = cur + b * sv, *ho = h + b * ldh;                                                \
            for (int64_t j = 0; j < H; j++) {                                                      \
                T rr = sigm_##T(x[j] + r[j] + bx[j]);                                              \
                T z = sigm_##T(x[H + j] + r[H + j] + bx[H + j]);                                   \
                T hn = r[2 * H + j] + bn[j];                                                       \
                T n = TANH(x[2 * H + j] + bx[2 * H + j] + rr * hn);                                \
                s[j] = rr;                                                                         \
                s[H + j] = z;                                                                      \
                s[2 * H + j] = n;                                                                  \
                s[3 * H + j] = hn;                                                                 \
                ho[j] = ((T)1 - z) * n + z * (pv ? pv[j] : (T)0);                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void plain_step_##T(int relu, int64_t nb, int64_t H, const T *xp, const T *hp,          \
                               const T *bx, T *h, int64_t ldh)                                     \
    {                                                                                              \
        for (int64_t b = 0; b < nb; b++) {                                                         \
            const T *x = xp + b * H, *r = hp + b * H;                                              \
            T *ho = h + b * ldh;                                                                   \
            for (int64_t j = 0; j < H; j++) {                                                      \
                T a = x[j] + r[j] + bx[j];                                                         \
                ho[j] = relu ? (a < 0 ? (T)0 : a) : TANH(a);                                       \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    /* The step backwards: dh (row stride H) holds the gradient flowing into                     \
     * h_t; the gates' gradients go to dgx (the input side) and dgh (the                         \
     * hidden side, gru's n part differs), dc becomes dc_{t-1} and gru's dh                      \
     * the direct part of dh_{t-1} (the product with W_hh adds the rest). */ \
    static void lstm_back_##T(int64_t nb, int64_t H, const T *cur, int64_t sv, const T *cprev,     \
                              int64_t ldc, T *dh, T *dc, T *dg)                                    \
    {                                                                                              \
        for (int64_t b = 0; b < nb; b++) {                                                         \
            const T *s = cur + b * sv, *cp = cprev ? cprev + b * ldc : NULL;                       \
            T *g4 = dg + b * 4 * H, *dhb = dh + b * H, *dcb = dc + b * H;                          \
            for (int64_t j = 0; j < H; j++) {                                                      \
                T i = s[j], f = s[H + j], g = s[2 * H + j], o = s[3 * H + j];                      \
                T tc = TANH(s[4 * H + j]), d = dhb[j];                                             \
                T dcc = dcb[j] + d * o * ((T)1 - tc * tc);                                         \
                g4[j] = dcc * g * i * ((T)1 - i);                                                  \
                g4[H + j] = dcc * (cp ? cp[j] : (T)0) * f * ((T)1 - f);                            \
                g4[2 * H + j] = dcc * i * ((T)1 - g * g);                                          \
                g4[3 * H + j] = d * tc * o * ((T)1 - o);                                           \
                dcb[j] = dcc * f;                                                                  \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void gru_back_##T(int64_t nb, int64_t H, const T *cur, int64_t sv, const T *hprev,      \
                             int64_t ldp, T *dh, T *dgx, T *dgh)                                   \
    {                                                                                              \
        for (int64_t b = 0; b < nb; b++) {                                                         \
            const T *s = cur + b * sv, *pv = hprev ? hprev + b * ldp : NULL;                       \
            T *gx = dgx + b * 3 * H, *gh = dgh + b * 3 * H, *dhb = dh + b * H;                     \
            for (int64_t j = 0; j < H; j++) {                                                      \
                T r = s[j], z = s[H + j], n = s[2 * H + j], hn = s[3 * H + j], d = dhb[j];         \
                T dan = d * ((T)1 - z) * ((T)1 - n * n);                                           \
                T dar = dan * hn * r * ((T)1 - r);                                                 \
                T daz = d * ((pv ? pv[j] : (T)0) - n) * z * ((T)1 - z);                            \
                gx[j] = gh[j] = dar;                                                               \
                gx[H + j] = gh[H + j] = daz;                                                       \
                gx[2 * H + j] = dan;                                                               \
                gh[2 * H + j] = dan * r;                                                           \
                dhb[j] = d * z;                                                                    \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void plain_back_##T(int relu, int64_t nb, int64_t H, const T *h, int64_t ldh,           \
                               const T *dh, T *dg)                                                 \
    {                                                                                              \
        for (int64_t b = 0; b < nb; b++)                                                           \
            for (int64_t j = 0; j < H; j++) {                                                      \
                T v = h[b * ldh + j], d = dh[b * H + j];                                           \
                dg[b * H + j] = relu ? (v > 0 ? d : (T)0) : d * ((T)1 - v * v);                    \
            }                                                                                      \
    }                                                                                              \
    /* dst[j] += the sum of the n rows of src (row stride m) in order. */                          \
    static void col_sums_##T(int64_t n, int64_t m, const T *src, T *dst)                           \
    {                                                                                              \
        memset(dst, 0, (size_t)m * sizeof(T));                                                     \
        for (int64_t r = 0; r < n; r++)                                                            \
            for (int64_t j = 0; j < m; j++)                                                        \
                dst[j] += src[r * m + j];                                                          \
    }

RNN_CELLS(float, expf, tanhf)
RNN_CELLS(double, exp, tanh)

/* The f32 cells with vmath's vectorized sigmoid and tanh (within 1 ulp,
 * at the machine's width) over chunks of a row's gates: the scalar libm
 * calls above took most of a small layer's time. The pre-activations are
 * summed in the same order. */
enum { VCH = 256 };

static void lstm_step_vf(int64_t nb, int64_t H, const float *xp, const float *hp, const float *bx,
                         const float *cprev, int64_t ldc, float *cur, int64_t sv, float *h,
                         int64_t ldh)
{
    /* chunks of VCH (row, unit) pairs across the rows, so that each call
     * of a gate function covers many elements even for narrow layers
     * (vmath computes whole chunks of 256), gathered and scattered in
     * runs of a row's contiguous units */
    const struct vq__vmath *vm = vq__vmath();
    float a[4][VCH], o[4][VCH], c[VCH], tc[VCH];
    int64_t total = nb * H;
    for (int64_t f0 = 0; f0 < total; f0 += VCH) {
        int64_t n = total - f0 < VCH ? total - f0 : VCH;
        for (int64_t k = 0, b = f0 / H, j = f0 % H; k < n; b++, j = 0) {
            int64_t run = H - j < n - k ? H - j : n - k;
            const float *x = xp + b * 4 * H + j, *r = hp + b * 4 * H + j, *bb = bx + j;
            for (int g = 0; g < 4; g++)
                for (int64_t u = 0; u < run; u++)
                    a[g][k + u] = x[g * H + u] + r[g * H + u] + bb[g * H + u];
            for (int64_t u = 0; u < run; u++)
                c[k + u] = cprev ? cprev[b * ldc + j + u] : 0.0f;
            k += run;
        }
        vm->sigmoid(a[0], o[0], n);
        vm->sigmoid(a[1], o[1], n);
        vm->tanh(a[2], o[2], n);
        vm->sigmoid(a[3], o[3], n);
        for (int64_t k = 0; k < n; k++)
            c[k] = o[1][k] * c[k] + o[0][k] * o[2][k];
        vm->tanh(c, tc, n);
        for (int64_t k = 0, b = f0 / H, j = f0 % H; k < n; b++, j = 0) {
            int64_t run = H - j < n - k ? H - j : n - k;
            float *s = cur + b * sv + j, *ho = h + b * ldh + j;
            for (int g = 0; g < 4; g++)
                memcpy(s + g * H, o[g] + k, (size_t)run * sizeof(float));
            memcpy(s + 4 * H, c + k, (size_t)run * sizeof(float));
            for (int64_t u = 0; u < run; u++)
                ho[u] = o[3][k + u] * tc[k + u];
            k += run;
        }
    }
}

static void gru_step_vf(int64_t nb, int64_t H, const float *xp, const float *hp, const float *bx,
                        const float *bn, const float *hprev, int64_t ldp, float *cur, int64_t sv,
                        float *h, int64_t ldh)
{
    /* chunks across the rows as lstm_step_vf's */
    const struct vq__vmath *vm = vq__vmath();
    float a[3][VCH], o[3][VCH], hn[VCH];
    int64_t total = nb * H;
    for (int64_t f0 = 0; f0 < total; f0 += VCH) {
        int64_t n = total - f0 < VCH ? total - f0 : VCH;
        for (int64_t k = 0, b = f0 / H, j = f0 % H; k < n; b++, j = 0) {
            int64_t run = H - j < n - k ? H - j : n - k;
            const float *x = xp + b * 3 * H + j, *r = hp + b * 3 * H + j, *bb = bx + j;
            for (int g = 0; g < 2; g++)
                for (int64_t u = 0; u < run; u++)
                    a[g][k + u] = x[g * H + u] + r[g * H + u] + bb[g * H + u];
            for (int64_t u = 0; u < run; u++) {
                hn[k + u] = r[2 * H + u] + bn[j + u];
                a[2][k + u] = x[2 * H + u] + bb[2 * H + u];
            }
            k += run;
        }
        vm->sigmoid(a[0], o[0], n);
        vm->sigmoid(a[1], o[1], n);
        for (int64_t k = 0; k < n; k++)
            a[2][k] = a[2][k] + o[0][k] * hn[k];
        vm->tanh(a[2], o[2], n);
        for (int64_t k = 0, b = f0 / H, j = f0 % H; k < n; b++, j = 0) {
            int64_t run = H - j < n - k ? H - j : n - k;
            float *s = cur + b * sv + j, *ho = h + b * ldh + j;
            const float *pv = hprev ? hprev + b * ldp + j : NULL;
            for (int g = 0; g < 3; g++)
                memcpy(s + g * H, o[g] + k, (size_t)run * sizeof(float));
            memcpy(s + 3 * H, hn + k, (size_t)run * sizeof(float));
            const float *z = o[1] + k, *nn = o[2] + k;
            if (pv)
                for (int64_t u = 0; u < run; u++)
                    ho[u] = (1.0f - z[u]) * nn[u] + z[u] * pv[u];
            else
                for (int64_t u = 0; u < run; u++)
                    ho[u] = (1.0f - z[u]) * nn[u] + z[u] * 0.0f;
            k += run;
        }
    }
}

static void tanh_step_vf(int64_t nb, int64_t H, const float *xp, const float *hp, const float *bx,
                         float *h, int64_t ldh)
{
    const struct vq__vmath *vm = vq__vmath();
    float a[VCH], o[VCH];
    int64_t total = nb * H;
    for (int64_t f0 = 0; f0 < total; f0 += VCH) {
        int64_t n = total - f0 < VCH ? total - f0 : VCH;
        for (int64_t k = 0, b = f0 / H, j = f0 % H; k < n; b++, j = 0) {
            int64_t run = H - j < n - k ? H - j : n - k;
            for (int64_t u = 0; u < run; u++)
                a[k + u] = xp[b * H + j + u] + hp[b * H + j + u] + bx[j + u];
            k += run;
        }
        vm->tanh(a, o, n);
        for (int64_t k = 0, b = f0 / H, j = f0 % H; k < n; b++, j = 0) {
            int64_t run = H - j < n - k ? H - j : n - k;
            memcpy(h + b * ldh + j, o + k, (size_t)run * sizeof(float));
            k += run;
        }
    }
}

/* The f32 cells on AVX-512 (vq__isa() at that level), 16 units of a row
 * at a time straight from the products to the saved cells and h, with
 * gate functions of their own in f32 arithmetic: sigmoid = 1 / (1 +
 * exp(-x)), exp by Cephes's expf polynomial (within 3 ulp), and tanh
 * Eigen's rational approximation on [-7.9, 7.9] (within 5 ulp; x itself
 * below 0.0004), what ONNX Runtime's and PyTorch's CPU kernels do too.
 * vmath's functions (within 1 ulp, in f64) took half the time of a small
 * layer's steps. A NaN stays NaN: every clamp puts x second in min and
 * max, which return their second operand when one is NaN. The sums and
 * products are those of the cells above, in the same order. */
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define CELLS512 1
#define AVX512 __attribute__((target("avx512f")))

AVX512 static inline __m512 exp16(__m512 x)
{
    x = _mm512_min_ps(_mm512_set1_ps(88.7f), _mm512_max_ps(_mm512_set1_ps(-103.9f), x));
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x); /* x - k ln2, in two */
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, k); /* p 2^k */
}

AVX512 static inline __m512 sigm16(__m512 x)
{
    __m512 one = _mm512_set1_ps(1.0f);
    return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

AVX512 static inline __m512 tanh16(__m512 x)
{
    __m512 lim = _mm512_set1_ps(7.90531110763549805f);
    __m512 xc = _mm512_min_ps(lim, _mm512_max_ps(_mm512_sub_ps(_mm512_setzero_ps(), lim), x));
    __m512 x2 = _mm512_mul_ps(xc, xc);
    __m512 p = _mm512_set1_ps(-2.76076847742355e-16f);
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(2.00018790482477e-13f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(-8.60467152213735e-11f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(5.12229709037114e-08f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(1.48572235717979e-05f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(6.37261928875436e-04f));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(4.89352455891786e-03f));
    p = _mm512_mul_ps(p, xc);
    __m512 q = _mm512_set1_ps(1.19825839466702e-06f);
    q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(1.18534705686654e-04f));
    q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(2.26843463243900e-03f));
    q = _mm512_fmadd_ps(q, x2, _mm512_set1_ps(4.89352518554385e-03f));
    __mmask16 tiny = _mm512_cmp_ps_mask(_mm512_abs_ps(x), _mm512_set1_ps(0.0004f), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(tiny, _mm512_div_ps(p, q), x);
}

/* x + r + b at 16 lanes (m of them) */
AVX512 static inline __m512 sum3(__mmask16 m, const float *x, const float *r, const float *b)
{
    return _mm512_add_ps(_mm512_add_ps(_mm512_maskz_loadu_ps(m, x), _mm512_maskz_loadu_ps(m, r)),
                         _mm512_maskz_loadu_ps(m, b));
}

AVX512 static void lstm_step_512(int64_t nb, int64_t H, const float *xp, const float *hp,
                                 const float *bx, const float *cprev, int64_t ldc, float *cur,
                                 int64_t sv, float *h, int64_t ldh)
{
    for (int64_t b = 0; b < nb; b++) {
        const float *x = xp + b * 4 * H, *r = hp + b * 4 * H;
        float *s = cur + b * sv;
        for (int64_t j = 0; j < H; j += 16) {
            __mmask16 m = vq__sg_lanes(H - j);
            __m512 i = sigm16(sum3(m, x + j, r + j, bx + j));
            __m512 f = sigm16(sum3(m, x + H + j, r + H + j, bx + H + j));
            __m512 g = tanh16(sum3(m, x + 2 * H + j, r + 2 * H + j, bx + 2 * H + j));
            __m512 o = sigm16(sum3(m, x + 3 * H + j, r + 3 * H + j, bx + 3 * H + j));
            __m512 cp = cprev ? _mm512_maskz_loadu_ps(m, cprev + b * ldc + j) : _mm512_setzero_ps();
            __m512 c = _mm512_add_ps(_mm512_mul_ps(f, cp), _mm512_mul_ps(i, g));
            _mm512_mask_storeu_ps(s + j, m, i);
            _mm512_mask_storeu_ps(s + H + j, m, f);
            _mm512_mask_storeu_ps(s + 2 * H + j, m, g);
            _mm512_mask_storeu_ps(s + 3 * H + j, m, o);
            _mm512_mask_storeu_ps(s + 4 * H + j, m, c);
            _mm512_mask_storeu_ps(h + b * ldh + j, m, _mm512_mul_ps(o, tanh16(c)));
        }
    }
}

AVX512 static void gru_step_512(int64_t nb, int64_t H, const float *xp, const float *hp,
                                const float *bx, const float *bn, const float *hprev, int64_t ldp,
                                float *cur, int64_t sv, float *h, int64_t ldh)
{
    __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t b = 0; b < nb; b++) {
        const float *x = xp + b * 3 * H, *r = hp + b * 3 * H;
        float *s = cur + b * sv;
        for (int64_t j = 0; j < H; j += 16) {
            __mmask16 m = vq__sg_lanes(H - j);
            __m512 rr = sigm16(sum3(m, x + j, r + j, bx + j));
            __m512 z = sigm16(sum3(m, x + H + j, r + H + j, bx + H + j));
            __m512 hn = _mm512_add_ps(_mm512_maskz_loadu_ps(m, r + 2 * H + j),
                                      _mm512_maskz_loadu_ps(m, bn + j));
            __m512 a = _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + 2 * H + j),
                                     _mm512_maskz_loadu_ps(m, bx + 2 * H + j));
            __m512 n = tanh16(_mm512_add_ps(a, _mm512_mul_ps(rr, hn)));
            __m512 pv = hprev ? _mm512_maskz_loadu_ps(m, hprev + b * ldp + j) : _mm512_setzero_ps();
            _mm512_mask_storeu_ps(s + j, m, rr);
            _mm512_mask_storeu_ps(s + H + j, m, z);
            _mm512_mask_storeu_ps(s + 2 * H + j, m, n);
            _mm512_mask_storeu_ps(s + 3 * H + j, m, hn);
            __m512 ho =
                _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(one, z), n), _mm512_mul_ps(z, pv));
            _mm512_mask_storeu_ps(h + b * ldh + j, m, ho);
        }
    }
}

/* lstm_back_float with tanh16 for tanh(c) (the scalar tanhf took a
 * third of the gradient's cell time), the same expressions otherwise. */
AVX512 static void lstm_back_512(int64_t nb, int64_t H, const float *cur, int64_t sv,
                                 const float *cprev, int64_t ldc, float *dh, float *dc, float *dg)
{
    __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t b = 0; b < nb; b++) {
        const float *s = cur + b * sv;
        float *g4 = dg + b * 4 * H, *dhb = dh + b * H, *dcb = dc + b * H;
        for (int64_t j = 0; j < H; j += 16) {
            __mmask16 m = vq__sg_lanes(H - j);
            __m512 i = _mm512_maskz_loadu_ps(m, s + j), f = _mm512_maskz_loadu_ps(m, s + H + j);
            __m512 g = _mm512_maskz_loadu_ps(m, s + 2 * H + j);
            __m512 o = _mm512_maskz_loadu_ps(m, s + 3 * H + j);
            __m512 tc = tanh16(_mm512_maskz_loadu_ps(m, s + 4 * H + j));
            __m512 d = _mm512_maskz_loadu_ps(m, dhb + j);
            __m512 cp = cprev ? _mm512_maskz_loadu_ps(m, cprev + b * ldc + j) : _mm512_setzero_ps();
            __m512 dcc = _mm512_add_ps(_mm512_maskz_loadu_ps(m, dcb + j),
                                       _mm512_mul_ps(_mm512_mul_ps(d, o),
                                                     _mm512_sub_ps(one, _mm512_mul_ps(tc, tc))));
            _mm512_mask_storeu_ps(g4 + j, m,
                                  _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dcc, g), i),
                                                _mm512_sub_ps(one, i)));
            _mm512_mask_storeu_ps(g4 + H + j, m,
                                  _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(dcc, cp), f),
                                                _mm512_sub_ps(one, f)));
            _mm512_mask_storeu_ps(g4 + 2 * H + j, m,
                                  _mm512_mul_ps(_mm512_mul_ps(dcc, i),
                                                _mm512_sub_ps(one, _mm512_mul_ps(g, g))));
            _mm512_mask_storeu_ps(g4 + 3 * H + j, m,
                                  _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(d, tc), o),
                                                _mm512_sub_ps(one, o)));
            _mm512_mask_storeu_ps(dcb + j, m, _mm512_mul_ps(dcc, f));
        }
    }
}

AVX512 static void tanh_step_512(int64_t nb, int64_t H, const float *xp, const float *hp,
                                 const float *bx, float *h, int64_t ldh)
{
    for (int64_t b = 0; b < nb; b++)
        for (int64_t j = 0; j < H; j += 16) {
            __mmask16 m = vq__sg_lanes(H - j);
            __m512 a = sum3(m, xp + b * H + j, hp + b * H + j, bx + j);
            _mm512_mask_storeu_ps(h + b * ldh + j, m, tanh16(a));
        }
}
#endif

/* ---- forward ---- */

/* One call's layout: the weights, states and Reserve's parts. */
typedef struct rnn_call {
    const vq__rnn_params *p;
    vq_dtype dt;
    size_t es;
    int64_t T, B, H, GH, S, TB;
    void *const *w;      /* weight j's data, nweights(p) of them */
    const void *h0, *c0; /* NULL: zeros */
    char *res;           /* Reserve, NULL without it */
    char *scr;           /* scratch, `per` elements per direction */
    int64_t per;
    int64_t max_in; /* the widest layer input: max(I, D*H) */
    /* f32 on vq__sgemm: the forward's W^T packed in its panels, GHp
     * (GH in whole panels) columns; else GHp = GH */
    bool panels;
    int64_t GHp;
    bool cells512; /* f32 at vq__isa()'s AVX-512 level: the cells' _512 forms */
    int64_t chunk; /* the forward's steps per input projection (xp's rows / B) */
    /* the layer being run */
    int layer;
    const char *in; /* the layer's input [T, B, in_w] */
    int64_t in_w;
    char *out; /* its output [T, B, D*H] */
    /* forward: HN, CN; backward: dY of the layer (NULL: zeros), dHN, dCN
     * (NULL: zeros), dH0, dC0 (NULL: not wanted), the weights' gradients */
    void *hn, *cn;
    const char *dyl;
    const void *dhn, *dcn;
    void *dh0, *dc0;
    void *const *dw;
} rnn_call;

#define AT(ptr, n) ((char *)(ptr) + (size_t)(n)*c->es)

/* Layer l's output in Reserve, and direction d's saved cells. */
static char *res_layer(const rnn_call *c, int l)
{
    return AT(c->res, (int64_t)l * c->TB * c->p->dirs * (c->H + c->S));
}

static char *res_saved(const rnn_call *c, int l, int d)
{
    return AT(res_layer(c, l), c->TB * c->p->dirs * c->H + d * c->TB * c->S);
}

static const void *weight(const rnn_call *c, int l, int d, int k)
{
    int j = (l * c->p->dirs + d) * per_dir(c->p) + k;
    return k < per_dir(c->p) ? c->w[j] : NULL;
}

/* The biases a step adds (G*H; gru's n part only b_in) and then gru's
 * b_hn (H), into bx. */
static void fold_biases(const rnn_call *c, int d, char *bx)
{
    const char *bi = weight(c, c->layer, d, 2), *bh = weight(c, c->layer, d, 3);
    int64_t H = c->H, both = c->p->cell == VQ__RNN_GRU ? 2 * H : c->GH;
    for (int64_t j = 0; j < c->GH + H; j++) {
        double v = 0;
        if (bi && j < c->GH)
            v = c->dt == VQ_F32 ? ((const float *)bi)[j] : ((const double *)bi)[j];
        if (bh && (j < both || j >= c->GH)) {
            int64_t k = j < both ? j : j - H; /* gru: b_hn at 2H..3H of bias_hh */
            double u = c->dt == VQ_F32 ? ((const float *)bh)[k] : ((const double *)bh)[k];
            v = j < c->GH ? (c->dt == VQ_F32 ? (double)((float)v + (float)u) : v + u) : u;
        }
        if (c->dt == VQ_F32)
            ((float *)bx)[j] = (float)v;
        else
            ((double *)bx)[j] = v;
    }
}

/* h_{t-1} for the step s of direction d (NULL: zeros), its row stride in
 * *ld; the same for c_{t-1} (lstm). */
static const char *h_prev(const rnn_call *c, int d, int64_t s, int64_t *ld)
{
    int64_t T = c->T, tp = d ? T - s : s - 1; /* the step before, in time */
    if (s == 0) {
        *ld = c->H;
        return c->h0 ? AT(c->h0, (int64_t)(c->layer * c->p->dirs + d) * c->B * c->H) : NULL;
    }
    *ld = c->p->dirs * c->H;
    return AT(c->out, tp * c->B * c->p->dirs * c->H + d * c->H);
}

static const char *c_prev(const rnn_call *c, int d, int64_t s, const char *saved, int64_t *ld)
{
    int64_t T = c->T, tp = d ? T - s : s - 1;
    if (s == 0) {
        *ld = c->H;
        return c->c0 ? AT(c->c0, (int64_t)(c->layer * c->p->dirs + d) * c->B * c->H) : NULL;
    }
    *ld = c->S;
    return AT(saved, tp * c->B * c->S + 4 * c->H);
}

/* m rows of n elements (src) into n rows of m (dst). */
static void transpose(const rnn_call *c, int64_t m, int64_t n, const void *src, char *dst)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            if (c->dt == VQ_F32)
                ((float *)dst)[j * m + i] = ((const float *)src)[i * n + j];
            else
                ((double *)dst)[j * m + i] = ((const double *)src)[i * n + j];
        }
}

/* W [n, k] (rows of k) as the B operand W^T [k, n] of
 * vq__sgemm_panels, straight from W's rows: what one transpose and the
 * product's own packing did for every step's product, done once per call
 * (each panel's 32 rows of W read in order, zeros past row n). */
static void pack_panels(int64_t n, int64_t k, const float *w, float *bp)
{
    for (int64_t q = 0; q * VQ__SG_PANEL < n; q++) {
        float *panel = bp + q * k * VQ__SG_PANEL;
        for (int64_t jj = 0; jj < VQ__SG_PANEL; jj++) {
            int64_t j = q * VQ__SG_PANEL + jj;
            const float *row = j < n ? w + j * k : NULL;
            for (int64_t p = 0; p < k; p++)
                panel[p * VQ__SG_PANEL + jj] = row ? row[p] : 0.0f;
        }
    }
}

/* Up to this many batch rows, a step's product with W_hh takes W_hh as it
 * is, as dot products (vq__sgemm's path for a few rows of A against B
 * transposed), instead of its packed panels:
 * at batch 1 the panels' kernel, made for many rows, took half again as
 * long. */
#define DOT_ROWS 1

/* The columns of a product's packed B: n rounded up to whole panels. */
static int64_t panel_cols(int64_t n)
{
    return (n + VQ__SG_PANEL - 1) / VQ__SG_PANEL * VQ__SG_PANEL;
}

/* out [m, n] = a [m, k] (rows lda apart) times W^T, W being [n, k]: in
 * w_t, W^T [k, n] for vq__gemm, or with panels, W packed by pack_panels. */
static void times_wt(const rnn_call *c, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                     const char *w_t, void *out)
{
    if (c->panels)
        vq__sgemm_panels(m, n, k, a, lda, (const float *)w_t, out, n, NULL);
    else
        vq__gemm(c->dt, false, false, m, n, k, 1, a, lda, w_t, n, 0, out);
}

/* One direction of the current layer. Scratch: the input projection of
 * chunk steps [chunk * B, GH], h W_hh^T [B, GH], the folded biases [GH + H], W_ih^T and W_hh^T
 * (packed for the product, widths rounded up to whole panels), and
 * without Reserve the cells of one step [B, S]. */
static int forward_dir(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const rnn_call *c = arg;
    const vq__rnn_params *p = c->p;
    int64_t T = c->T, B = c->B, H = c->H, GH = c->GH, DH = p->dirs * H;
    for (int d = (int)lo; d < hi; d++) {
        char *xp = AT(c->scr, d * c->per), *hp = AT(xp, c->chunk * B * GH), *bx = AT(hp, B * GH),
             *bn = AT(bx, GH), *wih = AT(bn, H), *whh = AT(wih, c->max_in * c->GHp),
             *cells = AT(whh, H * c->GHp);
        char *saved = c->res ? res_saved(c, c->layer, d) : cells;
        fold_biases(c, d, bx);
        /* W^T in scratch, once per call: the products then take B
         * untransposed, the form varq's own f32 kernel runs (vq__gemm),
         * or already in its packed form */
        if (c->panels) {
            pack_panels(GH, c->in_w, weight(c, c->layer, d, 0), (float *)wih);
            if (B > DOT_ROWS)
                pack_panels(GH, H, weight(c, c->layer, d, 1), (float *)whh);
        } else {
            transpose(c, GH, c->in_w, weight(c, c->layer, d, 0), wih);
            transpose(c, GH, H, weight(c, c->layer, d, 1), whh);
        }
        int64_t t_lo = 0; /* the first time step xp holds */
        for (int64_t s = 0; s < T; s++) {
            int64_t t = d ? T - 1 - s : s, ldh, ldc = 0;
            if (s % c->chunk == 0) { /* the input projection of the next chunk of steps */
                int64_t n = T - s < c->chunk ? T - s : c->chunk;
                t_lo = d ? T - s - n : s;
                if (B > 0 && c->in_w > 0)
                    times_wt(c, n * B, GH, c->in_w, AT(c->in, t_lo * B * c->in_w), c->in_w, wih,
                             xp);
                else
                    memset(xp, 0, (size_t)(n * B * GH) * c->es);
            }
            const char *hprev = h_prev(c, d, s, &ldh), *cprev = NULL;
            if (hprev && B > 0 && !(c->panels && B <= DOT_ROWS))
                times_wt(c, B, GH, H, hprev, ldh, whh, hp);
            else if (hprev && B > 0) {
                if (!vq__sgemm(false, true, B, GH, H, 1, (const float *)hprev, ldh,
                               weight(c, c->layer, d, 1), H, 0, (float *)hp, GH, NULL))
                    times_wt(c, B, GH, H, hprev, ldh, whh, hp);
            } else
                memset(hp, 0, (size_t)(B * GH) * c->es);
            char *cur = c->res ? AT(saved, t * B * c->S) : cells;
            char *h = AT(c->out, t * B * DH + d * H), *x = AT(xp, (t - t_lo) * B * GH);
            if (p->cell == VQ__RNN_LSTM) {
                cprev = c->res || s == 0 ? c_prev(c, d, s, saved, &ldc) : AT(cells, 4 * H);
                if (!c->res && s > 0)
                    ldc = c->S;
                if (c->cells512)
                    lstm_step_512(B, H, (float *)x, (float *)hp, (float *)bx, (const float *)cprev,
                                  ldc, (float *)cur, c->S, (float *)h, DH);
                else if (c->dt == VQ_F32)
                    lstm_step_vf(B, H, (float *)x, (float *)hp, (float *)bx, (const float *)cprev,
                                 ldc, (float *)cur, c->S, (float *)h, DH);
                else
                    lstm_step_double(B, H, (double *)x, (double *)hp, (double *)bx,
                                     (const double *)cprev, ldc, (double *)cur, c->S, (double *)h,
                                     DH);
            } else if (p->cell == VQ__RNN_GRU) {
                if (c->cells512)
                    gru_step_512(B, H, (float *)x, (float *)hp, (float *)bx, (float *)bn,
                                 (const float *)hprev, ldh, (float *)cur, c->S, (float *)h, DH);
                else if (c->dt == VQ_F32)
                    gru_step_vf(B, H, (float *)x, (float *)hp, (float *)bx, (float *)bn,
                                (const float *)hprev, ldh, (float *)cur, c->S, (float *)h, DH);
                else
                    gru_step_double(B, H, (double *)x, (double *)hp, (double *)bx, (double *)bn,
                                    (const double *)hprev, ldh, (double *)cur, c->S, (double *)h,
                                    DH);
            } else if (c->cells512 && p->cell != VQ__RNN_RELU) {
                tanh_step_512(B, H, (float *)x, (float *)hp, (float *)bx, (float *)h, DH);
            } else if (c->dt == VQ_F32 && p->cell != VQ__RNN_RELU) {
                tanh_step_vf(B, H, (float *)x, (float *)hp, (float *)bx, (float *)h, DH);
            } else if (c->dt == VQ_F32) {
                plain_step_float(1, B, H, (float *)x, (float *)hp, (float *)bx, (float *)h, DH);
            } else {
                plain_step_double(p->cell == VQ__RNN_RELU, B, H, (double *)x, (double *)hp,
                                  (double *)bx, (double *)h, DH);
            }
        }
        /* the last state: h at the last step in this direction's order */
        int64_t ld = (int64_t)(c->layer * p->dirs + d) * B * H, ldx;
        const char *hl = T ? AT(c->out, (d ? 0 : T - 1) * B * DH + d * H) : h_prev(c, d, 0, &ldx);
        for (int64_t b = 0; b < B; b++) {
            if (hl)
                memcpy(AT(c->hn, ld + b * H), AT(hl, b * (T ? DH : H)), (size_t)H * c->es);
            else
                memset(AT(c->hn, ld + b * H), 0, (size_t)H * c->es);
        }
        if (p->cell == VQ__RNN_LSTM) {
            const char *cl;
            int64_t ldc;
            if (T == 0)
                cl = c_prev(c, d, 0, saved, &ldc);
            else if (c->res)
                cl = AT(saved, (d ? 0 : T - 1) * B * c->S + 4 * H), ldc = c->S;
            else
                cl = AT(cells, 4 * H), ldc = c->S;
            for (int64_t b = 0; b < B; b++) {
                if (cl)
                    memcpy(AT(c->cn, ld + b * H), AT(cl, b * ldc), (size_t)H * c->es);
                else
                    memset(AT(c->cn, ld + b * H), 0, (size_t)H * c->es);
            }
        }
    }
    return 0;
}

static void call_init(rnn_call *c, const vq__rnn_params *p, vq_dtype dt, vq_tensor *const *in)
{
    *c = (rnn_call){.p = p, .dt = dt, .es = vq_dtype_size(dt)};
    c->T = in[0]->shape[0];
    c->B = in[0]->shape[1];
    c->H = p->hidden;
    c->GH = (int64_t)gates_of(p->cell) * p->hidden;
    c->S = saved_of(p);
    c->TB = c->T * c->B;
#ifdef CELLS512
    c->cells512 = dt == VQ_F32 && vq__isa() >= VQ__ISA_AVX512;
#endif
}

static int rnn_kernel(const vq__kcall *k)
{
    const vq__rnn_params *p = k->params;
    vq_tensor *x = k->in[0];
    rnn_call cc, *c = &cc;
    call_init(c, p, x->dtype, k->in);
    void *w[VQ__MAX_SLOTS];
    int nw = nweights(p), ns = states_of(p->cell);
    for (int j = 0; j < nw; j++)
        w[j] = k->in[1 + j]->data;
    c->w = w;
    c->h0 = p->states ? k->in[1 + nw]->data : NULL;
    c->c0 = p->states && ns == 2 ? k->in[2 + nw]->data : NULL;
    c->hn = k->out[1]->data;
    c->cn = ns == 2 ? k->out[2]->data : NULL;
    c->res = p->reserve ? k->out[1 + ns]->data : NULL;
    int64_t DH = p->dirs * c->H, ybufs = !c->res && p->layers > 1 ? 2 * c->TB * DH : 0;
    c->max_in = x->shape[2] > DH ? x->shape[2] : DH;
    c->panels = c->dt == VQ_F32 && vq__sgemm_ok();
    c->GHp = c->panels ? panel_cols(c->GH) : c->GH;

    /* with panels, the input projection runs chunk steps at a time, so
     * that its rows (about 64 KiB) stay in the core's cache beside W_hh,
     * and the scratch does not grow with T; the rows' bits are the same
     * either way (each row's sums depend only on the sizes) */
    c->chunk = c->T > 0 ? c->T : 1;
    if (c->panels && c->B * c->GH > 0) {
        int64_t steps = 16384 / (c->B * c->GH);
        c->chunk = steps < 1 ? 1 : steps < c->chunk ? steps : c->chunk;
    }
    c->per = c->chunk * c->B * c->GH + c->B * c->GH + c->GH + c->H + c->max_in * c->GHp +
             c->H * c->GHp + (c->res ? 0 : c->B * c->S);
    vq_tensor *scr;
    int rc = vq__kernel_scratch(k, x->dtype, p->dirs * c->per + ybufs, "recurrence scratch", &scr);
    if (rc < 0)
        return rc;
    c->scr = scr ? scr->data : NULL;
    for (int l = 0; l < p->layers; l++) {
        c->layer = l;
        c->in = l == 0 ? x->data : (const char *)c->out;
        c->in_w = l == 0 ? x->shape[2] : DH;
        c->out = c->res               ? res_layer(c, l)
                 : l == p->layers - 1 ? (char *)k->out[0]->data
                                      : AT(c->scr, p->dirs * c->per + (l & 1) * c->TB * DH);
        vq__parallel_for(p->dirs, 1, forward_dir, c);
    }
    if (c->res && c->TB)
        memcpy(k->out[0]->data, c->out, (size_t)(c->TB * DH) * c->es);
    vq_tensor_release(scr);
    return 0;
}

/* ---- backward ---- */

/* Rows [n, H] from src (row stride lds; NULL: zeros) into dst (stride H). */
static void rows_copy(const rnn_call *c, int64_t n, const char *src, int64_t lds, char *dst)
{
    for (int64_t b = 0; b < n; b++) {
        if (src)
            memcpy(AT(dst, b * c->H), AT(src, b * lds), (size_t)c->H * c->es);
        else
            memset(AT(dst, b * c->H), 0, (size_t)c->H * c->es);
    }
}

/* One direction of the current layer backwards. Scratch: the gates'
 * gradients of every step on the input side [TB, GH] (gru: and on the
 * hidden side, another [TB, GH]), dh and dc [B, H]. */
static int backward_dir(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const rnn_call *c = arg;
    const vq__rnn_params *p = c->p;
    int64_t T = c->T, B = c->B, H = c->H, GH = c->GH, DH = p->dirs * H;
    bool gru = p->cell == VQ__RNN_GRU, relu = p->cell == VQ__RNN_RELU;
    for (int d = (int)lo; d < hi; d++) {
        char *dgx = AT(c->scr, d * c->per), *dgh = gru ? AT(dgx, c->TB * GH) : dgx;
        char *dh = AT(dgx, (gru ? 2 : 1) * c->TB * GH), *dc = AT(dh, B * H);
        /* W_hh in the product's panels, once per call, for the steps'
         * products that overwrite dh (gru's add to it: vq__gemm) */
        const float *whh_p = NULL;
        if (c->panels && !gru) {
            float *bp = (float *)AT(dc, B * H);
            vq__sgemm_pack(GH, H, weight(c, c->layer, d, 1), H, bp, 0,
                           panel_cols(H) / VQ__SG_PANEL);
            whh_p = bp;
        }
        char *saved = res_saved(c, c->layer, d);
        const void *whh = weight(c, c->layer, d, 1);
        int64_t ls = (int64_t)(c->layer * p->dirs + d) * B * H;
        rows_copy(c, B, c->dhn ? AT(c->dhn, ls) : NULL, H, dh);
        rows_copy(c, B, c->dcn ? AT(c->dcn, ls) : NULL, H, dc);
        for (int64_t s = T - 1; s >= 0; s--) {
            int64_t t = d ? T - 1 - s : s, ldh, ldc;
            if (c->dyl)
                for (int64_t b = 0; b < B; b++) {
                    if (c->dt == VQ_F32) {
                        float *g = (float *)dh + b * H;
                        const float *y = (const float *)c->dyl + (t * B + b) * DH + d * H;
                        for (int64_t j = 0; j < H; j++)
                            g[j] += y[j];
                    } else {
                        double *g = (double *)dh + b * H;
                        const double *y = (const double *)c->dyl + (t * B + b) * DH + d * H;
                        for (int64_t j = 0; j < H; j++)
                            g[j] += y[j];
                    }
                }
            const char *hprev = h_prev(c, d, s, &ldh), *cur = AT(saved, t * B * c->S);
            char *gx = AT(dgx, t * B * GH), *gh = AT(dgh, t * B * GH);
            if (p->cell == VQ__RNN_LSTM) {
                const char *cprev = c_prev(c, d, s, saved, &ldc);
                if (c->cells512)
                    lstm_back_512(B, H, (const float *)cur, c->S, (const float *)cprev, ldc,
                                  (float *)dh, (float *)dc, (float *)gx);
                else if (c->dt == VQ_F32)
                    lstm_back_float(B, H, (const float *)cur, c->S, (const float *)cprev, ldc,
                                    (float *)dh, (float *)dc, (float *)gx);
                else
                    lstm_back_double(B, H, (const double *)cur, c->S, (const double *)cprev, ldc,
                                     (double *)dh, (double *)dc, (double *)gx);
            } else if (gru) {
                if (c->dt == VQ_F32)
                    gru_back_float(B, H, (const float *)cur, c->S, (const float *)hprev, ldh,
                                   (float *)dh, (float *)gx, (float *)gh);
                else
                    gru_back_double(B, H, (const double *)cur, c->S, (const double *)hprev, ldh,
                                    (double *)dh, (double *)gx, (double *)gh);
            } else {
                const char *h = AT(c->out, t * B * DH + d * H);
                if (c->dt == VQ_F32)
                    plain_back_float(relu, B, H, (const float *)h, DH, (const float *)dh,
                                     (float *)gx);
                else
                    plain_back_double(relu, B, H, (const double *)h, DH, (const double *)dh,
                                      (double *)gx);
            }
            /* dh_{t-1} = (gru: dh z +) the hidden side's gradients W_hh */
            if (whh_p && B > 0)
                vq__sgemm_panels(B, H, GH, (const float *)gh, GH, whh_p, (float *)dh, H, NULL);
            else
                vq__gemm(c->dt, false, false, B, H, GH, 1, gh, GH, whh, H, gru ? 1 : 0, dh);
        }
        if (c->dh0)
            memcpy(AT(c->dh0, ls), dh, (size_t)(B * H) * c->es);
        if (c->dc0)
            memcpy(AT(c->dc0, ls), dc, (size_t)(B * H) * c->es);
        /* the weights' gradients over the whole sequence */
        int j = (c->layer * p->dirs + d) * per_dir(p);
        vq__gemm(c->dt, true, false, GH, c->in_w, c->TB, 1, dgx, GH, c->in, c->in_w, 0, c->dw[j]);
        /* h_{t-1} of the steps after the first are the layer's outputs one
         * step back in this direction's order; the first's is H0 */
        int64_t first = d ? T - 1 : 0, rest = T > 0 ? (T - 1) * B : 0;
        vq__gemm(c->dt, true, false, GH, H, rest, 1, AT(dgh, d ? 0 : B * GH), GH,
                 AT(c->out, (d ? B * DH : 0) + d * H), DH, 0, c->dw[j + 1]);
        if (c->h0 && T > 0)
            vq__gemm(c->dt, true, false, GH, H, B, 1, AT(dgh, first * B * GH), GH, AT(c->h0, ls), H,
                     1, c->dw[j + 1]);
        if (p->bias) {
            if (c->dt == VQ_F32) {
                col_sums_float(c->TB, GH, (const float *)dgx, c->dw[j + 2]);
                col_sums_float(c->TB, GH, (const float *)dgh, c->dw[j + 3]);
            } else {
                col_sums_double(c->TB, GH, (const double *)dgx, c->dw[j + 2]);
                col_sums_double(c->TB, GH, (const double *)dgh, c->dw[j + 3]);
            }
        }
    }
    return 0;
}

static int rnn_grad_kernel(const vq__kcall *k)
{
    const vq__rnn_params *p = k->params;
    vq_tensor *x = k->in[0];
    rnn_call cc, *c = &cc;
    call_init(c, p, x->dtype, k->in);
    void *w[VQ__MAX_SLOTS], *dw[VQ__MAX_SLOTS];
    int nw = nweights(p), ns = states_of(p->cell), i = 1 + nw;
    for (int j = 0; j < nw; j++) {
        w[j] = k->in[1 + j]->data;
        dw[j] = k->out[1 + j]->data;
    }
    c->w = w;
    c->dw = dw;
    if (p->states) {
        c->h0 = k->in[i++]->data;
        c->c0 = ns == 2 ? k->in[i++]->data : NULL;
        c->dh0 = k->out[1 + nw]->data;
        c->dc0 = ns == 2 ? k->out[2 + nw]->data : NULL;
    }
    c->res = k->in[i++]->data;
    const char *dy = p->grads & 1 ? k->in[i++]->data : NULL;
    c->dhn = p->grads & 2 ? k->in[i++]->data : NULL;
    c->dcn = p->grads & 4 ? k->in[i++]->data : NULL;
    int64_t DH = p->dirs * c->H, dbufs = p->layers > 1 ? 2 * c->TB * DH : 0;
    c->panels = c->dt == VQ_F32 && vq__sgemm_ok() && p->cell != VQ__RNN_GRU;
    c->per = c->TB * c->GH * (p->cell == VQ__RNN_GRU ? 2 : 1) + 2 * c->B * c->H +
             (c->panels ? c->GH * panel_cols(c->H) : 0);
    vq_tensor *scr;
    int rc = vq__kernel_scratch(k, x->dtype, p->dirs * c->per + dbufs, "gradient scratch", &scr);
    if (rc < 0)
        return rc;
    c->scr = scr ? scr->data : NULL;
    char *dbuf = c->scr ? AT(c->scr, p->dirs * c->per) : NULL;
    for (int l = p->layers - 1; l >= 0; l--) {
        c->layer = l;
        c->in = l == 0 ? x->data : res_layer(c, l - 1);
        c->in_w = l == 0 ? x->shape[2] : DH;
        c->out = res_layer(c, l);
        c->dyl = l == p->layers - 1 ? dy : AT(dbuf, (l & 1) * c->TB * DH);
        vq__parallel_for(p->dirs, 1, backward_dir, c);
        /* dX of the layer: both directions' input-side gradients times W_ih */
        char *dxl = l == 0 ? (char *)k->out[0]->data : AT(dbuf, ((l - 1) & 1) * c->TB * DH);
        for (int d = 0; d < p->dirs; d++)
            vq__gemm(c->dt, false, false, c->TB, c->in_w, c->GH, 1, AT(c->scr, d * c->per), c->GH,
                     weight(c, l, d, 0), c->in_w, d ? 1 : 0, dxl);
    }
    vq_tensor_release(scr);
    return 0;
}

/* ---- the gradient maker ---- */

/* One <cell>_grad computing every gradient: its unwanted outputs get
 * temporary names. Without Reserve among the forward op's outputs, the
 * forward op runs again to write it. */
static int rnn_grad(const vq__grad *g)
{
    bool any = false;
    for (int i = 0; i < g->nin; i++)
        any |= g->din[i] != NULL;
    if (!any)
        return 0;
    const vq__op_def *def = g->def;
    int ns = def->code == VQ__RNN_LSTM ? 2 : 1, grads = 0;
    for (int s = 0; s <= ns; s++)
        if (g->dout[s])
            grads |= 1 << s;
    if (!grads)
        return vq__op_fail(def, "no gradient flows into Y, HN%s", ns == 2 ? " or CN" : "");
    vq_attr attrs[8];
    int na = 0;
    for (int i = 0; i < g->nattrs && na < 7; i++)
        if (strcmp(g->attrs[i].name, "grads"))
            attrs[na++] = g->attrs[i];
    const char *reserve = g->nout == ns + 2 ? g->out[ns + 1] : NULL;
    if (!reserve) {
        const char *outs[4];
        for (int j = 0; j < ns + 2; j++)
            outs[j] = g->temp(g->user);
        int rc = vq__emit(g, def->type, g->in, g->nin, outs, ns + 2, attrs, na);
        if (rc < 0)
            return rc;
        reserve = outs[ns + 1];
    }
    const char *in[VQ__MAX_SLOTS], *out[VQ__MAX_SLOTS];
    int nin = 0;
    for (int i = 0; i < g->nin && nin < VQ__MAX_SLOTS - 4; i++)
        in[nin++] = g->in[i];
    in[nin++] = reserve;
    for (int s = 0; s <= ns; s++)
        if (g->dout[s])
            in[nin++] = g->dout[s];
    for (int i = 0; i < g->nin; i++)
        out[i] = g->din[i] ? g->din[i] : g->temp(g->user);
    attrs[na++] = VQ_ATTR_I("grads", grads);
    char type[16];
    snprintf(type, sizeof type, "%s_grad", def->type);
    return vq__emit(g, type, in, nin, out, g->nin, attrs, na);
}

const vq__op_def vq__ops_rnn[] = {
    {.type = "lstm",
     .in_slots = x_w_in,
     .nin_slots = 2,
     .out_slots = lstm_out,
     .nout_slots = 4,
     .flags = VQ__VARIADIC_IN | VQ__OPTIONAL_OUT,
     .attrs = cell_attrs,
     .nattrs = 4,
     .code = VQ__RNN_LSTM,
     .params_size = sizeof(vq__rnn_params),
     .infer = rnn_infer,
     .kernel = {rnn_kernel},
     .cuda = VQ__CUDA_OP(vq__rnn_gpu),
     .grad = rnn_grad},
    {.type = "gru",
     .in_slots = x_w_in,
     .nin_slots = 2,
     .out_slots = gru_out,
     .nout_slots = 3,
     .flags = VQ__VARIADIC_IN | VQ__OPTIONAL_OUT,
     .attrs = cell_attrs,
     .nattrs = 4,
     .code = VQ__RNN_GRU,
     .params_size = sizeof(vq__rnn_params),
     .infer = rnn_infer,
     .kernel = {rnn_kernel},
     .cuda = VQ__CUDA_OP(vq__rnn_gpu),
     .grad = rnn_grad},
    {.type = "rnn",
     .in_slots = x_w_in,
     .nin_slots = 2,
     .out_slots = gru_out,
     .nout_slots = 3,
     .flags = VQ__VARIADIC_IN | VQ__OPTIONAL_OUT,
     .attrs = rnn_attrs,
     .nattrs = 5,
     .code = VQ__RNN_TANH,
     .params_size = sizeof(vq__rnn_params),
     .infer = rnn_infer,
     .kernel = {rnn_kernel},
     .cuda = VQ__CUDA_OP(vq__rnn_gpu),
     .grad = rnn_grad},
    {.type = "lstm_grad",
     .in_slots = x_w_in,
     .nin_slots = 2,
     .out_slots = grad_out,
     .nout_slots = 2,
     .flags = VQ__VARIADIC_IN | VQ__VARIADIC_OUT,
     .attrs = cell_attrs,
     .nattrs = 5,
     .code = VQ__RNN_LSTM,
     .params_size = sizeof(vq__rnn_params),
     .infer = rnn_grad_infer,
     .kernel = {rnn_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__rnn_grad_gpu)},
    {.type = "gru_grad",
     .in_slots = x_w_in,
     .nin_slots = 2,
     .out_slots = grad_out,
     .nout_slots = 2,
     .flags = VQ__VARIADIC_IN | VQ__VARIADIC_OUT,
     .attrs = cell_attrs,
     .nattrs = 5,
     .code = VQ__RNN_GRU,
     .params_size = sizeof(vq__rnn_params),
     .infer = rnn_grad_infer,
     .kernel = {rnn_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__rnn_grad_gpu)},
    {.type = "rnn_grad",
     .in_slots = x_w_in,
     .nin_slots = 2,
     .out_slots = grad_out,
     .nout_slots = 2,
     .flags = VQ__VARIADIC_IN | VQ__VARIADIC_OUT,
     .attrs = rnn_attrs,
     .nattrs = 6,
     .code = VQ__RNN_TANH,
     .params_size = sizeof(vq__rnn_params),
     .infer = rnn_grad_infer,
     .kernel = {rnn_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__rnn_grad_gpu)},
    {0},
};
