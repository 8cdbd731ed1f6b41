/* lstm, gru and rnn (ops/cpu/rnn.c): outputs and gradients against
 * PyTorch's nn.LSTM, nn.GRU and nn.RNN with the same weights
 * (tests/rnn_ref.h, from tests/reference/gen_rnn_ref.py) in f64 and f32,
 * two layers and bidirectional, B = 1 and B > 1, with and without initial
 * states and biases; the gradient maker (with and without Reserve among
 * the forward op's outputs) against finite differences; the same bits on
 * 1, 2 and 8 workers; bad calls failing with messages. */
#include "opcheck.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "leakcheck.h"
#include "rnn_ref.h"

static uint64_t rng;

static void setup(void)
{
    rng = oc_seed("ops_rnn");
}

TestSuite(ops_rnn, .init = setup, .fini = leak_check);

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define MAX_IN 64

struct rnn_case {
    const char *name, *type, *nl;
    int T, B, I, H, L, D, bias, states;
    const double *x, *w, *h0, *c0, *y, *hn, *cn, *dy, *dhn, *dcn, *dx, *dw, *dh0, *dc0;
};

#define CASE(n, N, type, nl)                                                                 \
    {                                                                                        \
#n, type, nl, N##_DIMS, n##_x, n##_w, n##_h0, n##_c0, n##_y, n##_hn, n##_cn, n##_dy, \
            n##_dhn, n##_dcn, n##_dx, n##_dw, n##_dh0, n##_dc0                               \
    }

static const struct rnn_case cases[] = {
    CASE(lstm_2l_bi, LSTM_2L_BI, "lstm", NULL),
    CASE(lstm_1l_b1, LSTM_1L_B1, "lstm", NULL),
    CASE(gru_2l_bi, GRU_2L_BI, "gru", NULL),
    CASE(gru_1l_b1, GRU_1L_B1, "gru", NULL),
    CASE(rnn_tanh_2l_bi, RNN_TANH_2L_BI, "rnn", "tanh"),
    CASE(rnn_relu_nobias, RNN_RELU_NOBIAS, "rnn", "relu"),
};

static int gates(const struct rnn_case *c)
{
    return !strcmp(c->type, "lstm") ? 4 : !strcmp(c->type, "gru") ? 3 : 1;
}

static int nstates(const struct rnn_case *c)
{
    return !strcmp(c->type, "lstm") ? 2 : 1;
}

/* The call's inputs: X, the weights cut from the case's flat list in
 * PyTorch's order and shapes, then H0 (and C0). Returns their count. */
static int case_inputs(const struct rnn_case *c, vq_dtype dt, vq_tensor **in)
{
    int n = 0;
    in[n++] = oc_from(dt, 3, (int64_t[]){c->T, c->B, c->I}, c->x);
    int64_t gh = (int64_t)gates(c) * c->H, off = 0;
    for (int l = 0; l < c->L; l++)
        for (int d = 0; d < c->D; d++)
            for (int k = 0; k < (c->bias ? 4 : 2); k++) {
                int64_t in_w = l == 0 ? c->I : (int64_t)c->D * c->H;
                int64_t shape[2] = {gh, k == 0 ? in_w : k == 1 ? c->H : 0};
                int nd = k < 2 ? 2 : 1;
                in[n++] = oc_from(dt, nd, shape, c->w + off);
                off += k < 2 ? gh * shape[1] : gh;
            }
    int64_t s[3] = {(int64_t)c->L * c->D, c->B, c->H};
    if (c->states) {
        in[n++] = oc_from(dt, 3, s, c->h0);
        if (nstates(c) == 2)
            in[n++] = oc_from(dt, 3, s, c->c0);
    }
    return n;
}

static int case_attrs(const struct rnn_case *c, vq_attr *at)
{
    int n = 0;
    at[n++] = VQ_ATTR_I("hidden_size", c->H);
    at[n++] = VQ_ATTR_I("num_layers", c->L);
    at[n++] = VQ_ATTR_B("bidirectional", c->D == 2);
    at[n++] = VQ_ATTR_B("bias", c->bias);
    if (c->nl)
        at[n++] = VQ_ATTR_S("nonlinearity", c->nl);
    return n;
}

static void release_all(vq_tensor **t, int n)
{
    for (int i = 0; i < n; i++)
        vq_tensor_release(t[i]);
}

/* Asserts t's elements are want's to within tol (absolute), naming what. */
static void assert_near(vq_tensor *t, const double *want, double tol, const char *c,
                        const char *what)
{
    for (int64_t i = 0; i < vq_tensor_numel(t); i++) {
        double g = oc_get(t, i);
        cr_assert(fabs(g - want[i]) <= tol, "%s %s[%lld]: %.17g, PyTorch %.17g", c, what,
                  (long long)i, g, want[i]);
    }
}

static const vq_dtype dts[] = {VQ_F64, VQ_F32};
static const double tols[] = {1e-12, 1e-5};

Test(ops_rnn, outputs_match_pytorch_in_f64_and_f32_with_and_without_reserve)
{
    for (int k = 0; k < N_OF(cases); k++)
        for (int t = 0; t < 2; t++)
            for (int r = 0; r < 2; r++) {
                const struct rnn_case *c = &cases[k];
                vq_tensor *in[MAX_IN], *out[4];
                int nin = case_inputs(c, dts[t], in), ns = nstates(c);
                vq_attr at[5];
                int na = case_attrs(c, at);
                oc_run(c->type, in, nin, out, 1 + ns + r, at, na);
                assert_near(out[0], c->y, tols[t], c->name, "Y");
                assert_near(out[1], c->hn, tols[t], c->name, "HN");
                if (ns == 2)
                    assert_near(out[2], c->cn, tols[t], c->name, "CN");
                release_all(out, 1 + ns + r);
                release_all(in, nin);
            }
}

Test(ops_rnn, gradient_op_matches_pytorch_autograd_in_f64_and_f32)
{
    for (int k = 0; k < N_OF(cases); k++)
        for (int t = 0; t < 2; t++) {
            const struct rnn_case *c = &cases[k];
            vq_tensor *in[MAX_IN], *out[4], *gin[MAX_IN], *gout[MAX_IN];
            int nin = case_inputs(c, dts[t], in), ns = nstates(c);
            vq_attr at[6];
            int na = case_attrs(c, at);
            oc_run(c->type, in, nin, out, 2 + ns, at, na);
            int ng = 0;
            for (int i = 0; i < nin; i++)
                gin[ng++] = in[i];
            gin[ng++] = out[1 + ns];
            int64_t y[3] = {c->T, c->B, (int64_t)c->D * c->H},
                    s[3] = {(int64_t)c->L * c->D, c->B, c->H};
            vq_tensor *d[3] = {oc_from(dts[t], 3, y, c->dy), oc_from(dts[t], 3, s, c->dhn),
                               ns == 2 ? oc_from(dts[t], 3, s, c->dcn) : NULL};
            for (int j = 0; j <= ns; j++)
                gin[ng++] = d[j];
            at[na++] = VQ_ATTR_I("grads", ns == 2 ? 7 : 3);
            char type[16];
            snprintf(type, sizeof type, "%s_grad", c->type);
            oc_run(type, gin, ng, gout, nin, at, na);
            assert_near(gout[0], c->dx, tols[t], c->name, "dX");
            int64_t off = 0;
            int nw = nin - 1 - (c->states ? ns : 0);
            for (int j = 0; j < nw; j++) {
                assert_near(gout[1 + j], c->dw + off, tols[t], c->name, "dW");
                off += vq_tensor_numel(gout[1 + j]);
            }
            if (c->states) {
                assert_near(gout[1 + nw], c->dh0, tols[t], c->name, "dH0");
                if (ns == 2)
                    assert_near(gout[2 + nw], c->dc0, tols[t], c->name, "dC0");
            }
            release_all(gout, nin);
            release_all(d, ns + 1);
            release_all(out, 2 + ns);
            release_all(in, nin);
        }
}

Test(ops_rnn, gradient_maker_matches_finite_differences)
{
    for (int k = 0; k < N_OF(cases); k++) {
        const struct rnn_case *c = &cases[k];
        if (c->nl && !strcmp(c->nl, "relu"))
            continue; /* relu's kink: finite differences across it are not the derivative */
        vq_tensor *in[MAX_IN];
        int nin = case_inputs(c, VQ_F64, in);
        vq_attr at[5];
        int na = case_attrs(c, at);
        /* without Reserve: the maker runs the forward op again for it */
        oc_grad_check(c->type, in, nin, 1 + nstates(c), at, na, (1u << nin) - 1, &rng);
        release_all(in, nin);
    }
    cr_assert_lt(oc_worst_grad_error(), 1e-6, "worst relative error %g", oc_worst_grad_error());
}

Test(ops_rnn, same_bits_on_1_2_and_8_workers)
{
    /* large enough that the two directions are worth sharing */
    struct rnn_case c = {.name = "big",
                         .type = "lstm",
                         .T = 12,
                         .B = 5,
                         .I = 16,
                         .H = 24,
                         .L = 2,
                         .D = 2,
                         .bias = 1};
    static const char *const types[] = {"lstm", "gru", "rnn"};
    for (int ty = 0; ty < 3; ty++) {
        c.type = types[ty];
        int64_t nwts = 0, gh = (int64_t)gates(&c) * c.H;
        nwts = 2 * (gh * c.I + gh * c.H + 2 * gh) + 2 * (gh * 2 * c.H + gh * c.H + 2 * gh);
        double *w = malloc((size_t)nwts * sizeof *w), *x = malloc(12 * 5 * 16 * sizeof *x);
        cr_assert(w && x);
        for (int64_t i = 0; i < nwts; i++)
            w[i] = oc_uniform(&rng, -0.3, 0.3);
        for (int i = 0; i < 12 * 5 * 16; i++)
            x[i] = oc_uniform(&rng, -1, 1);
        c.w = w;
        c.x = x;
        for (int t = 0; t < 2; t++) {
            vq_tensor *in[MAX_IN], *ref[4];
            int nin = case_inputs(&c, dts[t], in), nout = 2 + nstates(&c);
            vq_attr at[5];
            int na = case_attrs(&c, at);
            oc_run(c.type, in, nin, ref, nout, at, na);
            /* and the gradient op, dY only */
            vq_tensor *gin[MAX_IN], *gref[MAX_IN];
            int ng = 0;
            for (int i = 0; i < nin; i++)
                gin[ng++] = in[i];
            gin[ng++] = ref[nout - 1];
            gin[ng++] = ref[0]; /* any tensor of Y's shape serves as dY */
            at[na] = VQ_ATTR_I("grads", 1);
            char gt[16];
            snprintf(gt, sizeof gt, "%s_grad", c.type);
            oc_run(gt, gin, ng, gref, nin, at, na + 1);
            static const int workers[] = {1, 2, 8};
            for (int wk = 0; wk < 3; wk++) {
                vq_engine *e;
                cr_assert_eq(vq_engine_new(&e, &(vq_engine_opts){.kind = VQ_ENGINE_THREADED,
                                                                 .cpu_workers = workers[wk]}),
                             0, "%s", vq_errmsg());
                /* fresh inputs: a tensor belongs to the first engine it meets */
                vq_tensor *ein[MAX_IN], *o[4] = {0}, *g[MAX_IN] = {0}, *egin[MAX_IN];
                case_inputs(&c, dts[t], ein);
                cr_assert_eq(vq_op_run(e, c.type, ein, nin, o, nout, at, na), 0, "%s", vq_errmsg());
                memcpy(egin, ein, sizeof(vq_tensor *) * (size_t)nin);
                egin[nin] = o[nout - 1];
                egin[nin + 1] = o[0];
                cr_assert_eq(vq_op_run(e, gt, egin, ng, g, nin, at, na + 1), 0, "%s", vq_errmsg());
                for (int j = 0; j < nout; j++) {
                    cr_assert_eq(vq_tensor_wait(o[j]), 0, "%s", vq_errmsg());
                    cr_assert_eq(memcmp(vq_tensor_data(o[j]), vq_tensor_data(ref[j]),
                                        vq_tensor_nbytes(ref[j])),
                                 0, "%s output %d differs on %d workers", c.type, j, workers[wk]);
                }
                for (int j = 0; j < nin; j++) {
                    cr_assert_eq(vq_tensor_wait(g[j]), 0, "%s", vq_errmsg());
                    cr_assert_eq(memcmp(vq_tensor_data(g[j]), vq_tensor_data(gref[j]),
                                        vq_tensor_nbytes(gref[j])),
                                 0, "%s gradient %d differs on %d workers", c.type, j, workers[wk]);
                }
                release_all(o, nout);
                release_all(g, nin);
                release_all(ein, nin);
                vq_engine_free(e);
            }
            release_all(gref, nin);
            release_all(ref, nout);
            release_all(in, nin);
        }
        free(w);
        free(x);
    }
}

/* Runs type on in with nout outputs and the case's attributes; asserts
 * VQ_EINVAL with a message containing want. */
static void assert_fails(const char *type, vq_tensor **in, int nin, int nout, const vq_attr *at,
                         int na, const char *want)
{
    cr_assert_eq(oc_try(type, in, nin, nout, at, na), VQ_EINVAL, "%s: no error for %s", type, want);
    cr_assert(strstr(vq_errmsg(), want), "%s: got \"%s\", wanted \"%s\"", type, vq_errmsg(), want);
}

Test(ops_rnn, bad_calls_fail_with_messages)
{
    const struct rnn_case *c = &cases[0]; /* lstm, 2 layers, bidirectional, states */
    vq_tensor *in[MAX_IN];
    int nin = case_inputs(c, VQ_F64, in);
    vq_attr at[6];
    int na = case_attrs(c, at);
    /* a weight missing: the count no longer fits */
    assert_fails("lstm", in, 10, 3, at, na, "2 layer(s) of 2 direction(s) take 16 weights");
    assert_fails("lstm", in, nin - 1, 3, at, na, "optionally H0 and C0: got 1 input(s)");
    /* weights swapped: weight_hh_l0 where weight_ih_l0 belongs */
    vq_tensor *sw[MAX_IN];
    memcpy(sw, in, sizeof(vq_tensor *) * (size_t)nin);
    sw[1] = in[2];
    assert_fails("lstm", sw, nin, 3, at, na,
                 "input weight_ih_l0 (input 1): shape [16, 4] is not [16, 3]");
    /* layer 1's input is D * H wide */
    sw[1] = in[1];
    sw[9] = in[1];
    assert_fails("lstm", sw, nin, 3, at, na,
                 "weight_ih_l1 (input 9): shape [16, 3] is not [16, 8]");
    /* H0 of the wrong batch */
    vq_tensor *h0;
    cr_assert_eq(vq_tensor_new(&h0, VQ_F64, 3, (int64_t[]){4, 3, 4}), 0);
    sw[9] = in[9];
    sw[17] = h0;
    assert_fails("lstm", sw, nin, 3, at, na,
                 "input H0 (input 17): shape [4, 3, 4] is not [4, 2, 4]");
    /* a weight of another dtype */
    vq_tensor *w32;
    cr_assert_eq(vq_tensor_new(&w32, VQ_F32, 1, (int64_t[]){16}), 0);
    sw[17] = in[17];
    sw[3] = w32;
    assert_fails("lstm", sw, nin, 3, at, na, "input bias_ih_l0 (input 3) is f32, X is f64");
    /* X of rank 2, attributes out of range or foreign */
    vq_tensor *x2;
    cr_assert_eq(vq_tensor_new(&x2, VQ_F64, 2, (int64_t[]){5, 3}), 0);
    sw[3] = in[3];
    sw[0] = x2;
    assert_fails("lstm", sw, nin, 3, at, na, "input X (slot 0)");
    vq_attr bad[6];
    memcpy(bad, at, sizeof at);
    bad[0] = VQ_ATTR_I("hidden_size", 0);
    assert_fails("lstm", in, nin, 3, bad, na, "attribute hidden_size");
    bad[0] = at[0];
    bad[na] = VQ_ATTR_S("nonlinearity", "relu");
    assert_fails("lstm", in, nin, 3, bad, na + 1, "unknown attribute 'nonlinearity'");
    bad[na] = VQ_ATTR_S("nonlinearity", "sigmoid");
    assert_fails("rnn", in, 17, 2, bad, na + 1, "not \"tanh\" or \"relu\"");
    assert_fails("lstm", in, nin, 1, at, na, "outputs");
    /* the gradient op: grads out of range, Reserve of the wrong size */
    vq_tensor *gin[MAX_IN];
    memcpy(gin, in, sizeof(vq_tensor *) * (size_t)nin);
    gin[nin] = x2; /* not Reserve */
    gin[nin + 1] = x2;
    bad[na] = VQ_ATTR_I("grads", 8);
    assert_fails("lstm_grad", gin, nin + 2, nin, bad, na + 1, "attribute grads");
    bad[na] = VQ_ATTR_I("grads", 1);
    assert_fails("lstm_grad", gin, nin + 2, nin, bad, na + 1, "input Reserve");
    vq_tensor_release(x2);
    vq_tensor_release(w32);
    vq_tensor_release(h0);
    release_all(in, nin);
}

/* In a program, autodiff through lstm: loss = mean(Y) + mean(CN), X's
 * steps unknown at preparation, with and without Reserve among the op's
 * outputs (without it the gradient
 * maker runs the forward op again); the executor's gradients are those
 * of lstm_grad called directly with dY and dCN of 1 / numel. */
Test(ops_rnn, autodiff_through_lstm_in_a_program_with_and_without_reserve)
{
    const struct rnn_case *c = &cases[0];
    vq_tensor *in[MAX_IN];
    int nin = case_inputs(c, VQ_F64, in);
    vq_attr at[6];
    int na = case_attrs(c, at);
    /* the reference: lstm_grad with the gradients of the two means */
    vq_tensor *ref[4], *gin[MAX_IN], *gref[MAX_IN];
    oc_run("lstm", in, nin, ref, 4, at, na);
    memcpy(gin, in, sizeof(vq_tensor *) * (size_t)nin);
    gin[nin] = ref[3];
    int64_t ny = vq_tensor_numel(ref[0]), nc = vq_tensor_numel(ref[2]);
    double *dy = malloc((size_t)ny * sizeof *dy), *dc = malloc((size_t)nc * sizeof *dc);
    cr_assert(dy && dc);
    for (int64_t i = 0; i < ny; i++)
        dy[i] = 1.0 / (double)ny;
    for (int64_t i = 0; i < nc; i++)
        dc[i] = 1.0 / (double)nc;
    gin[nin + 1] = oc_from(VQ_F64, 3, vq_tensor_shape(ref[0]), dy);
    gin[nin + 2] = oc_from(VQ_F64, 3, vq_tensor_shape(ref[2]), dc);
    at[na] = VQ_ATTR_I("grads", 5);
    oc_run("lstm_grad", gin, nin + 3, gref, nin, at, na + 1);

    for (int r = 0; r < 2; r++) {
        vq_program *p;
        cr_assert_eq(vq_program_new(&p), 0);
        char names[MAX_IN][16];
        const char *op_in[MAX_IN];
        /* x's steps unknown until it is fed: the plan infers Y's and
         * Reserve's sizes when it runs */
        for (int i = 0; i < nin; i++) {
            snprintf(names[i], 16, i == 0 ? "x" : "p%d", i);
            op_in[i] = names[i];
            int64_t sh[3];
            memcpy(sh, vq_tensor_shape(in[i]), sizeof(int64_t) * (size_t)vq_tensor_ndim(in[i]));
            if (i == 0)
                sh[0] = -1;
            cr_assert_eq(vq_program_add_var(p, 0, names[i], VQ_F64, vq_tensor_ndim(in[i]), sh,
                                            i > 0),
                         0, "%s", vq_errmsg());
        }
        const char *outs[4] = {"y", "hn", "cn", "reserve"}, *loss[3] = {"my", "mc", "loss"};
        for (int j = 0; j < 3 + r; j++) {
            int64_t sh[3];
            memcpy(sh, vq_tensor_shape(ref[j]), sizeof(int64_t) * (size_t)vq_tensor_ndim(ref[j]));
            if (j == 0 || j == 3)
                sh[0] = -1;
            cr_assert_eq(vq_program_add_var(p, 0, outs[j], VQ_F64, vq_tensor_ndim(ref[j]), sh,
                                            false),
                         0);
        }
        for (int j = 0; j < 3; j++)
            cr_assert_eq(vq_program_add_var(p, 0, loss[j], VQ_F64, 0, NULL, false), 0);
        cr_assert_geq(vq_program_add_op(p, 0, "lstm", op_in, nin, outs, 3 + r, at, na), 0, "%s",
                      vq_errmsg());
        cr_assert_geq(vq_program_add_op(p, 0, "mean", &outs[0], 1, &loss[0], 1, NULL, 0), 0);
        cr_assert_geq(vq_program_add_op(p, 0, "mean", &outs[2], 1, &loss[1], 1, NULL, 0), 0);
        cr_assert_geq(vq_program_add_op(p, 0, "add", loss, 2, &loss[2], 1, NULL, 0), 0);
        cr_assert_geq(vq_append_backward(p, "loss", NULL, 0), 0, "%s", vq_errmsg());
        vq_engine *e;
        vq_exec *ex;
        vq_scope *sc;
        cr_assert_eq(vq_engine_new(&e, NULL), 0);
        cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
        cr_assert_eq(vq_scope_new(&sc), 0);
        vq_tensor *ein[MAX_IN];
        case_inputs(c, VQ_F64, ein);
        for (int i = 1; i < nin; i++)
            cr_assert_eq(vq_scope_set(sc, names[i], ein[i]), 0);
        vq_feed feed = {"x", ein[0]};
        char gname[MAX_IN][24];
        vq_fetch f[MAX_IN];
        /* the parameters' gradients (autodiff gives the fed x none) */
        for (int i = 1; i < nin; i++) {
            snprintf(gname[i], 24, "%.15s@GRAD", names[i]);
            f[i] = (vq_fetch){gname[i], NULL};
        }
        cr_assert_eq(vq_exec_run(ex, p, sc, &feed, 1, f + 1, nin - 1), 0, "%s", vq_errmsg());
        for (int i = 1; i < nin; i++) {
            char what[48];
            snprintf(what, sizeof what, "%.22s (reserve %d)", gname[i], r);
            for (int64_t k = 0; k < vq_tensor_numel(gref[i]); k++)
                cr_assert(fabs(oc_get(f[i].tensor, k) - oc_get(gref[i], k)) <= 1e-12,
                          "%s[%lld]: program %.17g, lstm_grad %.17g", what, (long long)k,
                          oc_get(f[i].tensor, k), oc_get(gref[i], k));
            vq_tensor_release(f[i].tensor);
        }
        release_all(ein, nin); /* before their engine goes */
        vq_scope_free(sc);
        vq_exec_free(ex);
        vq_engine_free(e);
        vq_program_free(p);
    }
    free(dy);
    free(dc);
    release_all(gref, nin);
    release_all(&gin[nin + 1], 2);
    release_all(ref, 4);
    release_all(in, nin);
}

/* Zero steps: Y is empty, HN and CN are H0 and C0, and the gradient
 * passes dHN and dCN through to dH0 and dC0 with zeros for the weights;
 * an empty batch gives empty outputs. */
Test(ops_rnn, zero_steps_and_an_empty_batch)
{
    struct rnn_case c = cases[0];
    c.T = 0;
    vq_tensor *in[MAX_IN], *out[4], *g[MAX_IN], *gin[MAX_IN];
    int nin = case_inputs(&c, VQ_F64, in), nw = nin - 3;
    vq_attr at[6];
    int na = case_attrs(&c, at);
    oc_run("lstm", in, nin, out, 4, at, na);
    cr_assert_eq(vq_tensor_numel(out[0]), 0);
    cr_assert_eq(vq_tensor_numel(out[3]), 0);
    assert_near(out[1], c.h0, 0, "T=0", "HN");
    assert_near(out[2], c.c0, 0, "T=0", "CN");
    memcpy(gin, in, sizeof(vq_tensor *) * (size_t)nin);
    gin[nin] = out[3];
    gin[nin + 1] = out[1]; /* dHN: H0's values */
    gin[nin + 2] = out[2]; /* dCN: C0's */
    at[na] = VQ_ATTR_I("grads", 6);
    oc_run("lstm_grad", gin, nin + 3, g, nin, at, na + 1);
    for (int j = 1; j <= nw; j++)
        for (int64_t i = 0; i < vq_tensor_numel(g[j]); i++)
            cr_assert_eq(oc_get(g[j], i), 0, "dW %d [%lld]", j, (long long)i);
    assert_near(g[1 + nw], c.h0, 0, "T=0", "dH0");
    assert_near(g[2 + nw], c.c0, 0, "T=0", "dC0");
    release_all(g, nin);
    release_all(out, 4);
    release_all(in, nin);

    c = cases[2]; /* gru, no states */
    c.B = 0;
    nin = case_inputs(&c, VQ_F32, in);
    na = case_attrs(&c, at);
    oc_run("gru", in, nin, out, 3, at, na);
    for (int j = 0; j < 3; j++)
        cr_assert_eq(vq_tensor_numel(out[j]), 0);
    release_all(out, 3);
    release_all(in, nin);
}

Test(ops_rnn, f32_cells_in_chunks_across_rows_match_f64)
{
    /* the f32 cells (vectorized gates, chunks of 256 (row, unit) pairs
     * that start and end inside rows: H = 100, B = 7), the packed
     * weights of the products and the input projection in chunks of steps
     * (5 for lstm, 7 for gru: T = 12 is not a multiple), against the f64
     * kernel's plain loops, with states, Reserve and two layers of two
     * directions */
    struct rnn_case c = {.name = "chunks",
                         .T = 12,
                         .B = 7,
                         .I = 5,
                         .H = 100,
                         .L = 2,
                         .D = 2,
                         .bias = 1,
                         .states = 1};
    static const char *const types[] = {"lstm", "gru", "rnn"};
    for (int ty = 0; ty < 3; ty++) {
        c.type = types[ty];
        int64_t gh = (int64_t)gates(&c) * c.H;
        int64_t nwts = 2 * (gh * c.I + gh * c.H + 2 * gh) + 2 * (gh * 2 * c.H + gh * c.H + 2 * gh);
        int nx = c.T * c.B * c.I, ns = c.L * c.D * c.B * c.H;
        double *w = malloc((size_t)nwts * sizeof *w), *x = malloc((size_t)nx * sizeof *x);
        double *h0 = malloc((size_t)ns * sizeof *h0), *c0 = malloc((size_t)ns * sizeof *c0);
        cr_assert(w && x && h0 && c0);
        for (int64_t i = 0; i < nwts; i++)
            w[i] = oc_uniform(&rng, -0.1, 0.1);
        for (int i = 0; i < nx; i++)
            x[i] = oc_uniform(&rng, -1, 1);
        for (int i = 0; i < ns; i++) {
            h0[i] = oc_uniform(&rng, -1, 1);
            c0[i] = oc_uniform(&rng, -1, 1);
        }
        c.w = w;
        c.x = x;
        c.h0 = h0;
        c.c0 = c0;
        vq_attr at[5];
        int na = case_attrs(&c, at), nout = 2 + nstates(&c);
        vq_tensor *in64[MAX_IN], *in32[MAX_IN], *o64[4], *o32[4];
        int nin = case_inputs(&c, VQ_F64, in64);
        case_inputs(&c, VQ_F32, in32);
        oc_run(c.type, in64, nin, o64, nout, at, na);
        oc_run(c.type, in32, nin, o32, nout, at, na);
        for (int j = 0; j < nout - 1; j++)
            for (int64_t i = 0; i < vq_tensor_numel(o64[j]); i++)
                cr_assert(fabs(oc_get(o32[j], i) - oc_get(o64[j], i)) < 1e-5,
                          "%s output %d [%lld]: f32 %.9g, f64 %.9g", c.type, j, (long long)i,
                          oc_get(o32[j], i), oc_get(o64[j], i));
        release_all(o64, nout);
        release_all(o32, nout);
        release_all(in64, nin);
        release_all(in32, nin);
        free(w);
        free(x);
        free(h0);
        free(c0);
    }
}
