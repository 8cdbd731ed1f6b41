/* Layers: thin helpers over the builder that declare a layer's vars, its
 * parameters (in the main and the startup program, with their
 * initializers) and its ops; and the generator state that random ops in a
 * program share (a persistable (seed, counter) var set by startup). A
 * model zoo of one file. */
#include "graph_internal.h"

#include <varq/train.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int find(const vq_program *p, const char *name, const char *fn)
{
    int v = name ? vq__program_find_var(p, name) : -1;
    if (v < 0)
        return vq__fail(VQ_EINVAL, "%s: no var %s", fn, name ? name : "(NULL)");
    return v;
}

/* A layer's result: 0, or the builder's error rc prefixed with the layer
 * call the user made (the builder's message names vq_program_add_*). */
static int built(int rc, const char *fn)
{
    return rc < 0 ? vq__fail_prefixed(rc, "%s", fn) : 0;
}

/* Declares a persistable parameter in main and startup, and appends its
 * uniform initializer to startup. */
static int add_param(vq_program *main, vq_program *startup, const char *name, vq_dtype dt,
                     int ndim, const int64_t *shape, double bound, uint64_t seed)
{
    int rc = vq_program_add_var(main, 0, name, dt, ndim, shape, true);
    if (rc >= 0)
        rc = vq_program_add_var(startup, 0, name, dt, ndim, shape, true);
    vq_attr a[5] = {VQ_ATTR_IS("shape", shape, ndim), VQ_ATTR_S("dtype", vq_dtype_name(dt)),
                    VQ_ATTR_F("min", -bound), VQ_ATTR_F("max", bound),
                    VQ_ATTR_I("seed", (int64_t)(seed & INT64_MAX))};
    if (rc >= 0)
        rc = vq_program_add_op(startup, 0, "uniform_random", NULL, 0,
                               (const char *const[]){name}, 1, a, 5);
    return rc < 0 ? rc : 0;
}

VQ_API int vq_layer_linear(vq_program *main, vq_program *startup, const char *x, const char *y,
                           int64_t out, uint64_t seed)
{
    if (!main || !startup || !y || out <= 0)
        return vq__fail(VQ_EINVAL, "vq_layer_linear: bad argument");
    int xv = find(main, x, "vq_layer_linear");
    if (xv < 0)
        return xv;
    vq__pvar d = main->vars[xv];
    if (d.ndim != 2 || d.shape[1] <= 0)
        return vq__fail(VQ_EINVAL, "vq_layer_linear: %s must be [batch, in] with in known", x);
    int64_t in = d.shape[1];
    char w[256], b[256], xw[256];
    snprintf(w, sizeof w, "%s.w", y);
    snprintf(b, sizeof b, "%s.b", y);
    snprintf(xw, sizeof xw, "%s.xw", y);
    int64_t ws[2] = {in, out}, bs[1] = {out}, ys[2] = {d.shape[0], out};
    double bound = 1.0 / sqrt((double)in);
    int rc = add_param(main, startup, w, d.dtype, 2, ws, bound, seed);
    if (rc >= 0)
        rc = add_param(main, startup, b, d.dtype, 1, bs, bound, seed + 1);
    if (rc >= 0)
        rc = vq_program_add_var(main, 0, xw, d.dtype, 2, ys, false);
    if (rc >= 0)
        rc = vq_program_add_var(main, 0, y, d.dtype, 2, ys, false);
    if (rc >= 0)
        rc = vq_program_add_op(main, 0, "matmul", (const char *const[]){x, w}, 2,
                               (const char *const[]){xw}, 1, NULL, 0);
    if (rc >= 0)
        rc = vq_program_add_op(main, 0, "add", (const char *const[]){xw, b}, 2,
                               (const char *const[]){y}, 1, NULL, 0);
    return built(rc, "vq_layer_linear");
}

/* vq_layer_lstm, _gru and _rnn: type "lstm", "gru" or "rnn", G gates. */
static int recurrent_layer(vq_program *main, vq_program *startup, const char *x, const char *y,
                           int64_t hidden, const vq_rnn_layer_opts *opts, uint64_t seed,
                           const char *type, int gates, const char *fn)
{
    static const vq_rnn_layer_opts defaults = {0};
    const vq_rnn_layer_opts *o = opts ? opts : &defaults;
    int layers = o->num_layers ? o->num_layers : 1, dirs = o->bidirectional ? 2 : 1;
    const char *nl = o->nonlinearity ? o->nonlinearity : "tanh";
    if (!main || !startup || !y || hidden <= 0 || hidden > INT32_MAX / 8 || layers < 1 ||
        layers > 16)
        return vq__fail(VQ_EINVAL, "%s: bad argument (hidden %lld, %d layers)", fn,
                        (long long)hidden, layers);
    if (strcmp(nl, "tanh") && strcmp(nl, "relu"))
        return vq__fail(VQ_EINVAL, "%s: nonlinearity is \"%s\", not \"tanh\" or \"relu\"", fn, nl);
    int xv = find(main, x, fn);
    if (xv < 0)
        return xv;
    vq__pvar d = main->vars[xv];
    if (d.ndim != 3 || d.shape[2] <= 0)
        return vq__fail(VQ_EINVAL, "%s: %s must be [T, batch, in] with in known", fn, x);
    int per = o->no_bias ? 2 : 4, nw = layers * dirs * per, ns = gates == 4 ? 2 : 1;
    /* X, the weights, then (outputs) Y, HN, CN and Reserve: the names */
    char(*names)[256] = vq__malloc((size_t)(nw + 4) * sizeof *names);
    const char **in = vq__malloc((size_t)(nw + 1) * sizeof *in);
    if (!names || !in) {
        free(names);
        free(in);
        return vq__fail(VQ_ENOMEM, "%s: out of memory", fn);
    }
    static const char *const kinds[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
    int64_t gh = gates * hidden;
    double bound = 1.0 / sqrt((double)hidden);
    int rc = 0;
    in[0] = x;
    for (int j = 0; j < nw && rc >= 0; j++) {
        int k = j % per, ld = j / per, l = ld / dirs, dir = ld % dirs;
        int64_t in_w = l == 0 ? d.shape[2] : (int64_t)dirs * hidden;
        snprintf(names[j], sizeof names[j], "%s.%s_l%d%s", y, kinds[k], l, dir ? "_reverse" : "");
        int64_t shape[2] = {gh, k == 0 ? in_w : hidden};
        rc = add_param(main, startup, names[j], d.dtype, k < 2 ? 2 : 1, shape, bound, seed + j);
        in[1 + j] = names[j];
    }
    const char *out[4] = {y, names[nw], names[nw + 1], names[nw + 2]};
    snprintf(names[nw], sizeof names[nw], "%s.hn", y);
    snprintf(names[nw + 1], sizeof names[nw + 1], "%s.%s", y, ns == 2 ? "cn" : "reserve");
    snprintf(names[nw + 2], sizeof names[nw + 2], "%s.reserve", y);
    int64_t ys[3] = {d.shape[0], d.shape[1], (int64_t)dirs * hidden};
    int64_t hs[3] = {(int64_t)layers * dirs, d.shape[1], hidden};
    if (rc >= 0)
        rc = vq_program_add_var(main, 0, y, d.dtype, 3, ys, false);
    for (int s = 0; s < ns && rc >= 0; s++)
        rc = vq_program_add_var(main, 0, out[1 + s], d.dtype, 3, hs, false);
    /* Reserve's size follows from T and batch: the op's inference gives
     * it (-1 while either is unknown) */
    int64_t rs = -1;
    if (d.shape[0] >= 0 && d.shape[1] >= 0) {
        int64_t saved = gates == 4 ? 5 * hidden : gates == 3 ? 4 * hidden : 0;
        rs = (int64_t)layers * d.shape[0] * d.shape[1] * dirs * (hidden + saved);
    }
    if (rc >= 0 && !o->inference)
        rc = vq_program_add_var(main, 0, out[1 + ns], d.dtype, 1, &rs, false);
    vq_attr a[5] = {VQ_ATTR_I("hidden_size", hidden), VQ_ATTR_I("num_layers", layers),
                    VQ_ATTR_B("bidirectional", dirs == 2), VQ_ATTR_B("bias", !o->no_bias),
                    VQ_ATTR_S("nonlinearity", nl)};
    if (rc >= 0)
        rc = vq_program_add_op(main, 0, type, in, 1 + nw, out, 1 + ns + !o->inference, a,
                               gates == 1 ? 5 : 4);
    free(names);
    free(in);
    return built(rc, fn);
}

VQ_API int vq_layer_lstm(vq_program *main, vq_program *startup, const char *x, const char *y,
                         int64_t hidden, const vq_rnn_layer_opts *opts, uint64_t seed)
{
    return recurrent_layer(main, startup, x, y, hidden, opts, seed, "lstm", 4, "vq_layer_lstm");
}

VQ_API int vq_layer_gru(vq_program *main, vq_program *startup, const char *x, const char *y,
                        int64_t hidden, const vq_rnn_layer_opts *opts, uint64_t seed)
{
    return recurrent_layer(main, startup, x, y, hidden, opts, seed, "gru", 3, "vq_layer_gru");
}

VQ_API int vq_layer_rnn(vq_program *main, vq_program *startup, const char *x, const char *y,
                        int64_t hidden, const vq_rnn_layer_opts *opts, uint64_t seed)
{
    return recurrent_layer(main, startup, x, y, hidden, opts, seed, "rnn", 1, "vq_layer_rnn");
}

VQ_API int vq_layer_activation(vq_program *main, const char *act, const char *x, const char *y)
{
    if (!main || !act || !y)
        return vq__fail(VQ_EINVAL, "vq_layer_activation: NULL argument");
    if (strcmp(act, "relu") && strcmp(act, "sigmoid") && strcmp(act, "tanh") &&
        strcmp(act, "softmax"))
        return vq__fail(VQ_EINVAL, "vq_layer_activation: unknown activation %s", act);
    int xv = find(main, x, "vq_layer_activation");
    if (xv < 0)
        return xv;
    vq__pvar d = main->vars[xv];
    int rc = vq_program_add_var(main, 0, y, d.dtype, d.ndim, d.shape, false);
    if (rc >= 0)
        rc = vq_program_add_op(main, 0, act, (const char *const[]){x}, 1,
                               (const char *const[]){y}, 1, NULL, 0);
    return built(rc, "vq_layer_activation");
}

VQ_API int vq_layer_mse_loss(vq_program *main, const char *pred, const char *label,
                             const char *loss)
{
    if (!main || !loss)
        return vq__fail(VQ_EINVAL, "vq_layer_mse_loss: NULL argument");
    int pv = find(main, pred, "vq_layer_mse_loss");
    if (pv < 0 || find(main, label, "vq_layer_mse_loss") < 0)
        return VQ_EINVAL;
    int rc = vq_program_add_var(main, 0, loss, main->vars[pv].dtype, 0, NULL, false);
    if (rc >= 0)
        rc = vq_program_add_op(main, 0, "mse", (const char *const[]){pred, label}, 2,
                               (const char *const[]){loss}, 1, NULL, 0);
    return built(rc, "vq_layer_mse_loss");
}

VQ_API int vq_layer_softmax_cross_entropy(vq_program *main, const char *logits,
                                          const char *label, const char *probs,
                                          const char *loss)
{
    if (!main || !probs || !loss)
        return vq__fail(VQ_EINVAL, "vq_layer_softmax_cross_entropy: NULL argument");
    int lv = find(main, logits, "vq_layer_softmax_cross_entropy");
    if (lv < 0 || find(main, label, "vq_layer_softmax_cross_entropy") < 0)
        return VQ_EINVAL;
    vq__pvar d = main->vars[lv];
    if (d.ndim != 2)
        return vq__fail(VQ_EINVAL, "vq_layer_softmax_cross_entropy: %s must be [batch, classes]",
                        logits);
    char rows[256];
    snprintf(rows, sizeof rows, "%s.rows", loss);
    int64_t rs[2] = {d.shape[0], 1};
    int rc = vq_program_add_var(main, 0, probs, d.dtype, 2, d.shape, false);
    if (rc >= 0)
        rc = vq_program_add_var(main, 0, rows, d.dtype, 2, rs, false);
    if (rc >= 0)
        rc = vq_program_add_var(main, 0, loss, d.dtype, 0, NULL, false);
    if (rc >= 0)
        rc = vq_program_add_op(main, 0, "softmax_cross_entropy",
                               (const char *const[]){logits, label}, 2,
                               (const char *const[]){probs, rows}, 2, NULL, 0);
    if (rc >= 0)
        rc = vq_program_add_op(main, 0, "mean", (const char *const[]){rows}, 1,
                               (const char *const[]){loss}, 1, NULL, 0);
    return built(rc, "vq_layer_softmax_cross_entropy");
}

/* The state starts as (seed, 0) from two one-element fill_constants and a
 * concat: existing ops with CPU and CUDA kernels, where a new "value list"
 * op would have needed both for three lines of startup. The halves are
 * startup-only vars "<name>.seed" and "<name>.counter". fill_constant's
 * INT value keeps all 64 bits of the seed (as the i64 two's complement:
 * the generator uses State[0] as the uint64_t it was). */
VQ_API int vq_layer_rng_state(vq_program *main, vq_program *startup, const char *name,
                              uint64_t seed)
{
    if (!main || !startup || !name)
        return vq__fail(VQ_EINVAL, "vq_layer_rng_state: NULL argument");
    char half[2][256];
    snprintf(half[0], sizeof half[0], "%s.seed", name);
    snprintf(half[1], sizeof half[1], "%s.counter", name);
    int64_t two = 2, one = 1;
    int rc = vq_program_add_var(main, 0, name, VQ_I64, 1, &two, true);
    if (rc >= 0)
        rc = vq_program_add_var(startup, 0, name, VQ_I64, 1, &two, true);
    for (int i = 0; i < 2 && rc >= 0; i++) {
        vq_attr a[3] = {VQ_ATTR_IS("shape", &one, 1), VQ_ATTR_S("dtype", "i64"),
                        VQ_ATTR_I("value", i ? 0 : (int64_t)seed)};
        rc = vq_program_add_var(startup, 0, half[i], VQ_I64, 1, &one, false);
        if (rc >= 0)
            rc = vq_program_add_op(startup, 0, "fill_constant", NULL, 0,
                                   (const char *const[]){half[i]}, 1, a, 3);
    }
    vq_attr axis = VQ_ATTR_I("axis", 0);
    if (rc >= 0)
        rc = vq_program_add_op(startup, 0, "concat", (const char *const[]){half[0], half[1]}, 2,
                               (const char *const[]){name}, 1, &axis, 1);
    return built(rc, "vq_layer_rng_state");
}

VQ_API int vq_layer_dropout(vq_program *main, const char *x, const char *y, double p,
                            const char *state)
{
    if (!main || !y)
        return vq__fail(VQ_EINVAL, "vq_layer_dropout: NULL argument");
    if (!(p >= 0 && p < 1))
        return vq__fail(VQ_EINVAL, "vq_layer_dropout: p is %g, not in [0, 1)", p);
    int xv = find(main, x, "vq_layer_dropout");
    if (xv < 0)
        return xv;
    if (state && find(main, state, "vq_layer_dropout") < 0)
        return VQ_EINVAL;
    vq__pvar d = main->vars[xv];
    char mask[256];
    snprintf(mask, sizeof mask, "%s.mask", y);
    int rc = vq_program_add_var(main, 0, y, d.dtype, d.ndim, d.shape, false);
    if (rc >= 0)
        rc = vq_program_add_var(main, 0, mask, d.dtype, d.ndim, d.shape, false);
    vq_attr a = VQ_ATTR_F("p", p);
    /* With a state, the op reads it and writes it back (StateOut = State):
     * the engine orders every op on it, and the next run draws on. */
    if (rc >= 0)
        rc = vq_program_add_op(main, 0, "dropout", (const char *const[]){x, state}, state ? 2 : 1,
                               (const char *const[]){y, mask, state}, state ? 3 : 2, &a, 1);
    return built(rc, "vq_layer_dropout");
}
