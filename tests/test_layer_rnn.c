/* vq_layer_lstm, vq_layer_gru and vq_layer_rnn (graph/layers.c): the
 * parameters they declare (PyTorch's names, order and shapes) initialized
 * by startup as PyTorch does (uniform in [-1/sqrt(H), 1/sqrt(H)], each its
 * own draw); with PyTorch's weights of tests/rnn_ref.h bound under those
 * names, the program's outputs are nn.LSTM's, nn.GRU's and nn.RNN's (f64,
 * 1e-12); and training through the layer reaches every parameter. */
#include <varq/varq.h>

#include "leakcheck.h"
#include "opcheck.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rnn_ref.h"

TestSuite(layer_rnn, .fini = leak_check);

/* The cases of rnn_ref.h without initial states (the layers start from
 * zeros): T, B, I, H, L, D, bias, states. */
struct ref_case {
    const char *type, *nl;
    int T, B, I, H, L, D, bias, states;
    const double *x, *w, *y, *hn;
};

static const struct ref_case cases[] = {
    {"lstm", NULL, LSTM_1L_B1_DIMS, lstm_1l_b1_x, lstm_1l_b1_w, lstm_1l_b1_y, lstm_1l_b1_hn},
    {"gru", NULL, GRU_2L_BI_DIMS, gru_2l_bi_x, gru_2l_bi_w, gru_2l_bi_y, gru_2l_bi_hn},
    {"rnn", "relu", RNN_RELU_NOBIAS_DIMS, rnn_relu_nobias_x, rnn_relu_nobias_w, rnn_relu_nobias_y,
     rnn_relu_nobias_hn},
};

static int gates(const char *type)
{
    return !strcmp(type, "lstm") ? 4 : !strcmp(type, "gru") ? 3 : 1;
}

static int layer(const struct ref_case *c, vq_program *m, vq_program *s, uint64_t seed)
{
    vq_rnn_layer_opts o = {.num_layers = c->L,
                           .bidirectional = c->D == 2,
                           .no_bias = !c->bias,
                           .nonlinearity = c->nl};
    if (!strcmp(c->type, "lstm"))
        return vq_layer_lstm(m, s, "x", "y", c->H, &o, seed);
    if (!strcmp(c->type, "gru"))
        return vq_layer_gru(m, s, "x", "y", c->H, &o, seed);
    return vq_layer_rnn(m, s, "x", "y", c->H, &o, seed);
}

struct built {
    vq_program *main, *startup;
    vq_engine *e;
    vq_exec *ex;
    vq_scope *s;
};

static struct built build(const struct ref_case *c)
{
    struct built b;
    cr_assert_eq(vq_program_new(&b.main), 0);
    cr_assert_eq(vq_program_new(&b.startup), 0);
    cr_assert_eq(vq_program_add_var(b.main, 0, "x", VQ_F64, 3, (int64_t[]){c->T, c->B, c->I},
                                    false),
                 0);
    cr_assert_eq(layer(c, b.main, b.startup, 7), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_engine_new(&b.e, NULL), 0);
    cr_assert_eq(vq_exec_new(&b.ex, b.e, NULL), 0);
    cr_assert_eq(vq_scope_new(&b.s), 0);
    cr_assert_eq(vq_exec_run(b.ex, b.startup, b.s, NULL, 0, NULL, 0), 0, "%s", vq_errmsg());
    return b;
}

static void built_free(struct built *b)
{
    vq_exec_free(b->ex);
    vq_scope_free(b->s);
    vq_engine_free(b->e);
    vq_program_free(b->main);
    vq_program_free(b->startup);
}

/* Parameter j's PyTorch name, and its element count. */
static int64_t param(const struct ref_case *c, int j, char *name, size_t n)
{
    static const char *const kinds[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
    int per = c->bias ? 4 : 2, k = j % per, l = j / per / c->D, d = j / per % c->D;
    int64_t gh = (int64_t)gates(c->type) * c->H, in = l == 0 ? c->I : (int64_t)c->D * c->H;
    snprintf(name, n, "y.%s_l%d%s", kinds[k], l, d ? "_reverse" : "");
    return k == 0 ? gh * in : k == 1 ? gh * c->H : gh;
}

Test(layer_rnn, startup_initializes_pytorchs_parameters_as_pytorch_does)
{
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const struct ref_case *c = &cases[k];
        struct built b = build(c);
        int nw = c->L * c->D * (c->bias ? 4 : 2);
        double bound = 1 / sqrt((double)c->H), first[64];
        for (int j = 0; j < nw; j++) {
            char name[64];
            int64_t n = param(c, j, name, sizeof name);
            vq_tensor *t = vq_scope_get(b.s, name);
            cr_assert_not_null(t, "%s: no %s", c->type, name);
            cr_assert_eq(vq_tensor_numel(t), n, "%s: %s", c->type, name);
            double lo = 1, hi = -1, mean = 0;
            for (int64_t i = 0; i < n; i++) {
                double v = oc_get(t, i);
                lo = fmin(lo, v), hi = fmax(hi, v), mean += v / (double)n;
            }
            cr_assert(lo >= -bound && hi <= bound, "%s: %s in [%g, %g], bound %g", c->type, name,
                      lo, hi, bound);
            /* spread over the range, each parameter its own numbers */
            if (n >= 12)
                cr_assert(hi - lo > bound && fabs(mean) < 0.6 * bound, "%s: %s [%g, %g] mean %g",
                          c->type, name, lo, hi, mean);
            first[j] = oc_get(t, 0);
            for (int i = 0; i < j; i++)
                cr_assert_neq(first[i], first[j], "%s: parameters %d and %d", c->type, i, j);
        }
        built_free(&b);
    }
}

Test(layer_rnn, with_pytorchs_weights_the_outputs_are_pytorchs)
{
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const struct ref_case *c = &cases[k];
        struct built b = build(c);
        int nw = c->L * c->D * (c->bias ? 4 : 2);
        int64_t off = 0;
        for (int j = 0; j < nw; j++) {
            char name[64];
            int64_t n = param(c, j, name, sizeof name);
            vq_tensor *t = vq_scope_get(b.s, name), *w;
            cr_assert_eq(vq_tensor_from(&w, VQ_F64, vq_tensor_ndim(t), vq_tensor_shape(t),
                                        c->w + off),
                         0);
            cr_assert_eq(vq_scope_set(b.s, name, w), 0);
            vq_tensor_release(w);
            off += n;
        }
        vq_tensor *x = oc_from(VQ_F64, 3, (int64_t[]){c->T, c->B, c->I}, c->x);
        vq_feed feed = {"x", x};
        vq_fetch f[2] = {{"y", NULL}, {"y.hn", NULL}};
        cr_assert_eq(vq_exec_run(b.ex, b.main, b.s, &feed, 1, f, 2), 0, "%s", vq_errmsg());
        const double *want[2] = {c->y, c->hn};
        for (int o = 0; o < 2; o++) {
            for (int64_t i = 0; i < vq_tensor_numel(f[o].tensor); i++)
                cr_assert(fabs(oc_get(f[o].tensor, i) - want[o][i]) < 1e-12,
                          "%s %s[%lld]: %.17g, PyTorch %.17g", c->type, f[o].name, (long long)i,
                          oc_get(f[o].tensor, i), want[o][i]);
            vq_tensor_release(f[o].tensor);
        }
        vq_tensor_release(x);
        built_free(&b);
    }
}

Test(layer_rnn, adam_through_the_layer_updates_every_parameter_and_lowers_the_loss)
{
    /* loss = mean((y - 0.5)^2) by a few Adam steps: every parameter moves
     * and the loss goes down */
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        const struct ref_case *c = &cases[k];
        struct built b = build(c);
        int64_t ys[3] = {c->T, c->B, (int64_t)c->D * c->H};
        cr_assert_eq(vq_program_add_var(b.main, 0, "target", VQ_F64, 3, ys, false), 0);
        cr_assert_eq(vq_layer_mse_loss(b.main, "y", "target", "loss"), 0, "%s", vq_errmsg());
        vq_optimizer adam = {.kind = VQ_OPT_ADAM, .learning_rate = 0.01};
        int nw = c->L * c->D * (c->bias ? 4 : 2);
        /* a fresh startup for Adam's moments, then the parameters' first
         * values kept */
        vq_program *st;
        cr_assert_eq(vq_program_new(&st), 0);
        cr_assert_eq(vq_optimizer_minimize(b.main, st, "loss", &adam), nw, "%s", vq_errmsg());
        cr_assert_eq(vq_exec_run(b.ex, st, b.s, NULL, 0, NULL, 0), 0, "%s", vq_errmsg());
        double before[64];
        for (int j = 0; j < nw; j++) {
            char name[64];
            param(c, j, name, sizeof name);
            before[j] = oc_get(vq_scope_get(b.s, name), 0);
        }
        int64_t nt = ys[0] * ys[1] * ys[2];
        double *tv = malloc((size_t)nt * sizeof *tv);
        for (int64_t i = 0; i < nt; i++)
            tv[i] = 0.5;
        vq_tensor *x = oc_from(VQ_F64, 3, (int64_t[]){c->T, c->B, c->I}, c->x);
        vq_tensor *target = oc_from(VQ_F64, 3, ys, tv);
        vq_feed feeds[2] = {{"x", x}, {"target", target}};
        double first = 0, last = 0;
        for (int step = 0; step < 20; step++) {
            vq_fetch f = {"loss", NULL};
            cr_assert_eq(vq_exec_run(b.ex, b.main, b.s, feeds, 2, &f, 1), 0, "%s", vq_errmsg());
            last = oc_get(f.tensor, 0);
            if (step == 0)
                first = last;
            vq_tensor_release(f.tensor);
        }
        cr_assert_lt(last, 0.9 * first, "%s: loss %g -> %g", c->type, first, last);
        for (int j = 0; j < nw; j++) {
            char name[64];
            param(c, j, name, sizeof name);
            cr_assert_neq(oc_get(vq_scope_get(b.s, name), 0), before[j], "%s: %s did not move",
                          c->type, name);
        }
        free(tv);
        vq_tensor_release(x);
        vq_tensor_release(target);
        vq_program_free(st);
        built_free(&b);
    }
}

Test(layer_rnn, bad_arguments_fail_with_messages)
{
    vq_program *m, *s;
    cr_assert_eq(vq_program_new(&m), 0);
    cr_assert_eq(vq_program_new(&s), 0);
    cr_assert_eq(vq_program_add_var(m, 0, "x2", VQ_F32, 2, (int64_t[]){4, 3}, false), 0);
    cr_assert_eq(vq_program_add_var(m, 0, "x", VQ_F32, 3, (int64_t[]){5, 4, 3}, false), 0);
    cr_assert_eq(vq_layer_lstm(m, s, "x2", "y", 8, NULL, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "[T, batch, in]"), "%s", vq_errmsg());
    cr_assert_eq(vq_layer_gru(m, s, "nope", "y", 8, NULL, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "no var nope"), "%s", vq_errmsg());
    cr_assert_eq(vq_layer_rnn(m, s, "x", "y", 0, NULL, 1), VQ_EINVAL);
    vq_rnn_layer_opts o = {.nonlinearity = "gelu"};
    cr_assert_eq(vq_layer_rnn(m, s, "x", "y", 8, &o, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "gelu"), "%s", vq_errmsg());
    /* an inference layer: no Reserve */
    vq_rnn_layer_opts inf = {.inference = true};
    cr_assert_eq(vq_layer_lstm(m, s, "x", "y", 8, &inf, 1), 0, "%s", vq_errmsg());
    vq_program_free(m);
    vq_program_free(s);
}
