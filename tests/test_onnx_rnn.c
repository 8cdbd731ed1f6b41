/* ONNX's LSTM, GRU and RNN imported (onnx/t_rnn.c) against the spec's
 * recurrences written here in plain C in double precision: each direction,
 * sequence_lens with mixed lengths (known at import and fed), layout 1,
 * initial states, peepholes, input_forget, clip, GRU's
 * linear_before_reset, every activation the spec lists with its alpha and
 * beta, omitted outputs; what varq cannot unroll is refused naming the
 * node; and training through an imported LSTM gives each weight the
 * gradient a finite difference of the reference gives. */
#include <varq/varq.h>

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "leakcheck.h"
#include "onnx_models.h"

TestSuite(onnx_rnn, .fini = leak_check);

#define MAXN 4096

/* One node to import and check: its op, sizes and attributes, which
 * optional inputs it has and which outputs it names. */
struct spec {
    const char *op; /* "LSTM", "GRU" or "RNN" */
    int T, B, I, H;
    const char *direction; /* NULL: forward (the attribute left out) */
    int layout;
    bool bias, init_h, init_c, peep;
    const int32_t *lens; /* sequence_lens, or NULL */
    bool lens_fed;       /* lens as a graph input (known only at run time) */
    bool batch_symbolic; /* X's batch dim named, not given */
    double clip;         /* > 0: the attribute */
    int lbr, input_forget;
    int nacts;
    const char *acts[6];
    int nalpha, nbeta;
    float alpha[6], beta[6];
    bool no_y, no_h, want_c; /* Y and Y_h are named unless no_*, Y_c when want_c */
    bool f64;
};

/* The inputs in layout 0 (X [T, B, I], states [D, B, H]), as doubles
 * holding the values the model gets (f32-rounded for an f32 model). */
struct data {
    int D, G;
    double *x, *w, *r, *b, *p, *h0, *c0;
};

static int gates_of(const char *op)
{
    return !strcmp(op, "LSTM") ? 4 : !strcmp(op, "GRU") ? 3 : 1;
}

static int dirs_of(const struct spec *s)
{
    return s->direction && !strcmp(s->direction, "bidirectional") ? 2 : 1;
}

static double *values(int n, double seed, double scale, bool f64)
{
    double *v = malloc((size_t)n * sizeof *v);
    for (int i = 0; i < n; i++) {
        double a = scale * sin(0.73 * i + seed) * (1 + 0.5 * cos(1.9 * i));
        v[i] = f64 ? a : (double)(float)a;
    }
    return v;
}

static struct data data_new(const struct spec *s)
{
    struct data d = {.D = dirs_of(s), .G = gates_of(s->op)};
    int gh = d.G * s->H;
    d.x = values(s->T * s->B * s->I, 0.3, 1.0, s->f64);
    d.w = values(d.D * gh * s->I, 1.1, 0.6, s->f64);
    d.r = values(d.D * gh * s->H, 2.7, 0.5, s->f64);
    d.b = values(d.D * 2 * gh, 0.9, 0.3, s->f64);
    d.p = values(d.D * 3 * s->H, 3.3, 0.4, s->f64);
    d.h0 = values(d.D * s->B * s->H, 4.1, 0.5, s->f64);
    d.c0 = values(d.D * s->B * s->H, 5.2, 0.5, s->f64);
    return d;
}

static void data_free(struct data *d)
{
    free(d->x), free(d->w), free(d->r), free(d->b), free(d->p), free(d->h0), free(d->c0);
}

/* ---- the reference ---- */

struct ref_act {
    char name[32];
    double alpha, beta;
};

static double act_apply(const struct ref_act *a, double v)
{
    const char *n = a->name;
    if (!strcasecmp(n, "Relu"))
        return v > 0 ? v : 0;
    if (!strcasecmp(n, "Tanh"))
        return tanh(v);
    if (!strcasecmp(n, "Sigmoid"))
        return 1 / (1 + exp(-v));
    if (!strcasecmp(n, "Affine"))
        return a->alpha * v + a->beta;
    if (!strcasecmp(n, "LeakyRelu"))
        return v < 0 ? a->alpha * v : v;
    if (!strcasecmp(n, "ThresholdedRelu"))
        return v > a->alpha ? v : 0;
    if (!strcasecmp(n, "ScaledTanh"))
        return a->alpha * tanh(a->beta * v);
    if (!strcasecmp(n, "HardSigmoid"))
        return fmax(0, fmin(1, a->alpha * v + a->beta));
    if (!strcasecmp(n, "Elu"))
        return v >= 0 ? v : a->alpha * (exp(v) - 1);
    if (!strcasecmp(n, "Softsign"))
        return v / (1 + fabs(v));
    if (!strcasecmp(n, "Softplus"))
        return log1p(exp(v));
    cr_assert_fail("activation %s", n);
    return 0;
}

/* The activations of direction d: the spec's defaults, or the node's with
 * the alphas and betas consumed in order by those that take them. */
static void ref_acts(const struct spec *s, int D, struct ref_act out[2][3])
{
    static const char *const defaults[3][3] = {{"Tanh"},
                                               {"Sigmoid", "Tanh"},
                                               {"Sigmoid", "Tanh", "Tanh"}};
    int per = gates_of(s->op) == 4 ? 3 : gates_of(s->op) == 3 ? 2 : 1;
    int n = s->nacts ? s->nacts : per, ia = 0, ib = 0;
    for (int k = 0; k < n; k++) {
        struct ref_act a = {"", 0, 0};
        snprintf(a.name, sizeof a.name, "%s", s->nacts ? s->acts[k] : defaults[per - 1][k]);
        /* the ONNX ops' defaults */
        static const struct {
            const char *n;
            int ta, tb;
            double a, b;
        } tab[] = {{"Affine", 1, 1, 1, 0},          {"LeakyRelu", 1, 0, 0.01, 0},
                   {"ThresholdedRelu", 1, 0, 1, 0}, {"ScaledTanh", 1, 1, 1, 1},
                   {"HardSigmoid", 1, 1, 0.2, 0.5}, {"Elu", 1, 0, 1, 0}};
        for (int j = 0; j < 6; j++) {
            if (strcasecmp(a.name, tab[j].n))
                continue;
            a.alpha = tab[j].a, a.beta = tab[j].b;
            if (tab[j].ta && ia < s->nalpha)
                a.alpha = s->alpha[ia++];
            if (tab[j].tb && ib < s->nbeta)
                a.beta = s->beta[ib++];
        }
        out[k / per][k % per] = a;
        if (n == per && D == 2)
            out[1][k] = a;
    }
}

static double clipped(const struct spec *s, double v)
{
    return s->clip > 0 ? fmax(-s->clip, fmin(s->clip, v)) : v;
}

/* Y [T, D, B, H], Y_h and Y_c [D, B, H] (layout 0) by the spec's
 * equations, one sequence at a time. */
static void reference(const struct spec *s, const struct data *d, double *y, double *yh, double *yc)
{
    int T = s->T, B = s->B, I = s->I, H = s->H, D = d->D, G = d->G, gh = G * H;
    struct ref_act acts[2][3];
    ref_acts(s, D, acts);
    memset(y, 0, (size_t)T * D * B * H * sizeof *y);
    for (int dir = 0; dir < D; dir++) {
        bool reverse = D == 2 ? dir == 1 : s->direction && !strcmp(s->direction, "reverse");
        const double *W = d->w + dir * gh * I, *R = d->r + dir * gh * H;
        const double *Wb = d->b + dir * 2 * gh, *Rb = Wb + gh, *P = d->p + dir * 3 * H;
        struct ref_act *f = &acts[dir][0], *g = &acts[dir][1], *hact = &acts[dir][2];
        for (int b = 0; b < B; b++) {
            double h[16], c[16], xw[64], hr[64], nh[16], nc[16];
            for (int j = 0; j < H; j++) {
                h[j] = s->init_h ? d->h0[(dir * B + b) * H + j] : 0;
                c[j] = s->init_c ? d->c0[(dir * B + b) * H + j] : 0;
            }
            int len = s->lens ? s->lens[b] : T;
            for (int k = 0; k < len; k++) {
                int t = reverse ? len - 1 - k : k;
                const double *xt = d->x + (t * B + b) * I;
                for (int j = 0; j < gh; j++) {
                    xw[j] = s->bias ? Wb[j] : 0;
                    hr[j] = s->bias ? Rb[j] : 0;
                    for (int i = 0; i < I; i++)
                        xw[j] += xt[i] * W[j * I + i];
                    for (int i = 0; i < H; i++)
                        hr[j] += h[i] * R[j * H + i];
                }
                for (int j = 0; j < H; j++) {
                    if (G == 4) { /* i, o, f, c */
                        double pi = s->peep ? P[j] : 0, po = s->peep ? P[H + j] : 0,
                               pf = s->peep ? P[2 * H + j] : 0;
                        double ig = act_apply(f, clipped(s, xw[j] + hr[j] + pi * c[j]));
                        double fg = s->input_forget
                                        ? 1 - ig
                                        : act_apply(f, clipped(s, xw[2 * H + j] + hr[2 * H + j] +
                                                                      pf * c[j]));
                        double cg = act_apply(g, clipped(s, xw[3 * H + j] + hr[3 * H + j]));
                        nc[j] = fg * c[j] + ig * cg;
                        double og = act_apply(f, clipped(s, xw[H + j] + hr[H + j] + po * nc[j]));
                        nh[j] = og * act_apply(hact, nc[j]);
                    } else if (G == 3) { /* z, r, h */
                        double z = act_apply(f, clipped(s, xw[j] + hr[j]));
                        double hh;
                        if (s->lbr) {
                            double r = act_apply(f, clipped(s, xw[H + j] + hr[H + j]));
                            hh = xw[2 * H + j] + r * hr[2 * H + j];
                        } else {
                            hh = xw[2 * H + j] + (s->bias ? Rb[2 * H + j] : 0);
                            for (int i = 0; i < H; i++) {
                                double ri = act_apply(f, clipped(s, xw[H + i] + hr[H + i]));
                                hh += ri * h[i] * R[(2 * H + j) * H + i];
                            }
                        }
                        double n = act_apply(g, clipped(s, hh));
                        nh[j] = (1 - z) * n + z * h[j];
                    } else {
                        nh[j] = act_apply(f, clipped(s, xw[j] + hr[j]));
                    }
                }
                for (int j = 0; j < H; j++) {
                    h[j] = nh[j];
                    if (G == 4)
                        c[j] = nc[j];
                    y[((t * D + dir) * B + b) * H + j] = h[j];
                }
            }
            for (int j = 0; j < H; j++) {
                yh[(dir * B + b) * H + j] = h[j];
                yc[(dir * B + b) * H + j] = c[j];
            }
        }
    }
}

/* ---- the model ---- */

static int32_t elem_of(const struct spec *s)
{
    return s->f64 ? ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE : ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT;
}

/* An initializer of the model's float type from doubles. */
static void add_floats(Onnx__ModelProto *m, const struct spec *s, const char *name, int ndim,
                       const int64_t *dims, const double *v)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= dims[i];
    if (s->f64) {
        add_init_of(m, name, elem_of(s), sizeof(double), ndim, dims, v);
        return;
    }
    float *f = malloc((size_t)n * sizeof *f);
    for (int64_t i = 0; i < n; i++)
        f[i] = (float)v[i];
    add_init_of(m, name, elem_of(s), sizeof(float), ndim, dims, f);
    free(f);
}

/* states [D, B, H] in the model's layout (1: [B, D, H]) */
static double *states_in_layout(const struct spec *s, int D, const double *v)
{
    double *o = malloc((size_t)D * s->B * s->H * sizeof *o);
    for (int dd = 0; dd < D; dd++)
        for (int b = 0; b < s->B; b++)
            for (int j = 0; j < s->H; j++)
                o[s->layout ? (b * D + dd) * s->H + j : (dd * s->B + b) * s->H + j] =
                    v[(dd * s->B + b) * s->H + j];
    return o;
}

static Onnx__ModelProto *rnn_model(const struct spec *s, const struct data *d)
{
    int D = d->D, gh = d->G * s->H;
    int64_t B = s->batch_symbolic ? -1 : s->B;
    Onnx__ModelProto *m = model_new(14);
    int64_t xd[3] = {s->layout ? B : s->T, s->layout ? s->T : B, s->I};
    add_input_of(m, "X", elem_of(s), 3, xd);
    add_floats(m, s, "W", 3, (int64_t[]){D, gh, s->I}, d->w);
    add_floats(m, s, "R", 3, (int64_t[]){D, gh, s->H}, d->r);
    if (s->bias)
        add_floats(m, s, "B", 2, (int64_t[]){D, 2 * gh}, d->b);
    if (s->lens && s->lens_fed)
        add_input_of(m, "lens", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, 1, (int64_t[]){B});
    else if (s->lens)
        add_init_of(m, "lens", ONNX__TENSOR_PROTO__DATA_TYPE__INT32, sizeof(int32_t), 1,
                    (int64_t[]){s->B}, s->lens);
    int64_t sd[3] = {s->layout ? s->B : D, s->layout ? D : s->B, s->H};
    if (s->init_h) {
        double *h = states_in_layout(s, D, d->h0);
        add_floats(m, s, "h0", 3, sd, h);
        free(h);
    }
    if (s->init_c) {
        double *c = states_in_layout(s, D, d->c0);
        add_floats(m, s, "c0", 3, sd, c);
        free(c);
    }
    if (s->peep)
        add_floats(m, s, "P", 2, (int64_t[]){D, 3 * s->H}, d->p);
    const char *ins[9] = {"X",
                          "W",
                          "R",
                          s->bias ? "B" : "",
                          s->lens ? "lens" : "",
                          s->init_h ? "h0" : "",
                          s->init_c ? "c0" : "",
                          s->peep ? "P" : "",
                          NULL};
    int nin = 8;
    while (nin > 3 && !*ins[nin - 1])
        ins[--nin] = NULL;
    const char *outs[4] = {s->no_y ? "" : "Y", s->no_h ? "" : "Y_h", s->want_c ? "Y_c" : NULL,
                           NULL};
    Onnx__NodeProto *n = add_node(m, s->op, "rec", ins, outs);
    attr_int(n, "hidden_size", s->H);
    if (s->direction)
        attr_string(n, "direction", s->direction);
    if (s->layout)
        attr_int(n, "layout", s->layout);
    if (s->clip > 0)
        attr_float(n, "clip", (float)s->clip);
    if (s->lbr)
        attr_int(n, "linear_before_reset", 1);
    if (s->input_forget)
        attr_int(n, "input_forget", 1);
    if (s->nacts)
        attr_strings(n, "activations", s->nacts, s->acts);
    if (s->nalpha)
        attr_floats(n, "activation_alpha", s->nalpha, s->alpha);
    if (s->nbeta)
        attr_floats(n, "activation_beta", s->nbeta, s->beta);
    for (int j = 0; j < 3; j++) {
        if (!outs[j] || !*outs[j])
            continue;
        Onnx__GraphProto *g = m->graph;
        GROW(g->output, g->n_output);
        g->output[g->n_output++] = value_info(outs[j], elem_of(s), 0, NULL);
    }
    return m;
}

/* X in the model's layout, as a tensor of its type */
static vq_tensor *x_tensor(const struct spec *s, const struct data *d)
{
    int n = s->T * s->B * s->I;
    double *v = malloc((size_t)n * sizeof *v);
    for (int t = 0; t < s->T; t++)
        for (int b = 0; b < s->B; b++)
            for (int i = 0; i < s->I; i++)
                v[s->layout ? (b * s->T + t) * s->I + i : (t * s->B + b) * s->I + i] =
                    d->x[(t * s->B + b) * s->I + i];
    int64_t shape[3] = {s->layout ? s->B : s->T, s->layout ? s->T : s->B, s->I};
    vq_tensor *x;
    if (s->f64) {
        cr_assert_eq(vq_tensor_from(&x, VQ_F64, 3, shape, v), 0);
    } else {
        float *f = malloc((size_t)n * sizeof *f);
        for (int i = 0; i < n; i++)
            f[i] = (float)v[i];
        cr_assert_eq(vq_tensor_from(&x, VQ_F32, 3, shape, f), 0);
        free(f);
    }
    free(v);
    return x;
}

static double elem(vq_tensor *t, int64_t i)
{
    return vq_tensor_dtype(t) == VQ_F64 ? ((const double *)vq_tensor_data(t))[i]
                                        : ((const float *)vq_tensor_data(t))[i];
}

/* got (a fetched output in the model's layout) against want (layout 0):
 * Y is [T, D, B, H] (layout 1: [B, T, D, H]), a state [D, B, H] (layout 1:
 * [B, D, H]). */
static void compare(const struct spec *s, int D, const char *what, vq_tensor *got,
                    const double *want, bool is_y)
{
    int T = s->T, B = s->B, H = s->H;
    int n = (is_y ? T : 1) * D * B * H;
    cr_assert_eq(vq_tensor_numel(got), n, "%s has %lld elements, not %d", what,
                 (long long)vq_tensor_numel(got), n);
    int64_t want_shape[4];
    int r = 0;
    if (s->layout) {
        want_shape[r++] = B;
        if (is_y)
            want_shape[r++] = T;
        want_shape[r++] = D;
    } else {
        if (is_y)
            want_shape[r++] = T;
        want_shape[r++] = D;
        want_shape[r++] = B;
    }
    want_shape[r++] = H;
    cr_assert_eq(vq_tensor_ndim(got), r, "%s's rank", what);
    for (int i = 0; i < r; i++)
        cr_assert_eq(vq_tensor_shape(got)[i], want_shape[i], "%s's dim %d", what, i);
    double tol = s->f64 ? 1e-12 : 2e-5;
    for (int t = 0; t < (is_y ? T : 1); t++)
        for (int dd = 0; dd < D; dd++)
            for (int b = 0; b < B; b++)
                for (int j = 0; j < H; j++) {
                    int64_t gi = s->layout ? ((b * (is_y ? T : 1) + t) * D + dd) * H + j
                                           : ((t * D + dd) * B + b) * H + j;
                    double w = want[((t * D + dd) * B + b) * H + j], g = elem(got, gi);
                    cr_assert(fabs(g - w) <= tol * (1 + fabs(w)),
                              "%s %s[t %d, dir %d, batch %d, %d]: %.9g, want %.9g", s->op, what, t,
                              dd, b, j, g, w);
                }
}

/* Imports s's model, runs it and compares each named output with the
 * reference. */
static void check(const struct spec *s)
{
    struct data d = data_new(s);
    int D = d.D, T = s->T, B = s->B, H = s->H;
    double *y = malloc((size_t)T * D * B * H * sizeof *y), yh[2 * 8 * 16], yc[2 * 8 * 16];
    cr_assert(D * B * H <= 2 * 8 * 16);
    reference(s, &d, y, yh, yc);
    struct imported im = import_ok(rnn_model(s, &d));
    struct run r = run_new();
    vq_tensor *x = x_tensor(s, &d), *lens = NULL;
    vq_feed feeds[2] = {{"X", x}, {"lens", NULL}};
    int nfeeds = 1;
    if (s->lens && s->lens_fed) {
        cr_assert_eq(vq_tensor_from(&lens, VQ_I32, 1, (int64_t[]){B}, s->lens), 0);
        feeds[nfeeds++].tensor = lens;
    }
    vq_fetch f[3];
    int nf = 0;
    if (!s->no_y)
        f[nf++] = (vq_fetch){"Y", NULL};
    if (!s->no_h)
        f[nf++] = (vq_fetch){"Y_h", NULL};
    if (s->want_c)
        f[nf++] = (vq_fetch){"Y_c", NULL};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, feeds, nfeeds, f, nf), 0, "%s", vq_errmsg());
    for (int k = 0; k < nf; k++) {
        const char *name = f[k].name;
        compare(s, D, name, f[k].tensor,
                !strcmp(name, "Y")     ? y
                : !strcmp(name, "Y_h") ? yh
                                       : yc,
                !strcmp(name, "Y"));
        vq_tensor_release(f[k].tensor);
    }
    vq_tensor_release(x);
    if (lens)
        vq_tensor_release(lens);
    imported_free(&im);
    run_free(&r);
    free(y);
    data_free(&d);
}

static const char *const KINDS[3] = {"LSTM", "GRU", "RNN"};
static const char *const DIRECTIONS[3] = {"forward", "reverse", "bidirectional"};

/* ---- tests ---- */

Test(onnx_rnn, each_kind_matches_the_spec_forward_reverse_and_bidirectional)
{
    for (int k = 0; k < 3; k++)
        for (int dir = 0; dir < 3; dir++) {
            struct spec s = {.op = KINDS[k],
                             .T = 5,
                             .B = 3,
                             .I = 4,
                             .H = 3,
                             .direction = DIRECTIONS[dir],
                             .bias = true,
                             .want_c = k == 0};
            check(&s);
        }
}

Test(onnx_rnn, defaults_without_bias_states_or_direction)
{
    for (int k = 0; k < 3; k++) {
        struct spec s = {.op = KINDS[k], .T = 3, .B = 2, .I = 2, .H = 4};
        check(&s);
    }
}

Test(onnx_rnn, mixed_sequence_lengths_zero_the_outputs_past_each_and_keep_its_states)
{
    static const int32_t lens[4] = {6, 2, 0, 4};
    for (int k = 0; k < 3; k++)
        for (int dir = 0; dir < 3; dir++)
            for (int fed = 0; fed < 2; fed++) {
                struct spec s = {.op = KINDS[k],
                                 .T = 6,
                                 .B = 4,
                                 .I = 3,
                                 .H = 2,
                                 .direction = DIRECTIONS[dir],
                                 .bias = true,
                                 .init_h = fed,
                                 .init_c = fed && k == 0,
                                 .lens = lens,
                                 .lens_fed = fed,
                                 .want_c = k == 0,
                                 .peep = k == 0 && fed};
                check(&s);
            }
}

Test(onnx_rnn, lengths_all_equal_to_the_sequence_need_no_mask)
{
    static const int32_t lens[2] = {4, 4};
    struct spec s =
        {.op = "LSTM", .T = 4, .B = 2, .I = 3, .H = 2, .bias = true, .lens = lens, .want_c = true};
    check(&s);
}

Test(onnx_rnn, layout_1_is_batch_major_with_initial_states)
{
    static const int32_t lens[3] = {2, 5, 3};
    for (int k = 0; k < 3; k++)
        for (int dir = 0; dir < 3; dir += 2) {
            struct spec s = {.op = KINDS[k],
                             .T = 5,
                             .B = 3,
                             .I = 2,
                             .H = 3,
                             .layout = 1,
                             .direction = DIRECTIONS[dir],
                             .bias = true,
                             .init_h = true,
                             .init_c = k == 0,
                             .want_c = k == 0,
                             .lens = dir ? lens : NULL};
            check(&s);
        }
}

Test(onnx_rnn, a_batch_known_only_at_run_time)
{
    static const int32_t lens[3] = {3, 1, 2};
    for (int k = 0; k < 3; k++) {
        struct spec s = {.op = KINDS[k],
                         .T = 3,
                         .B = 3,
                         .I = 2,
                         .H = 2,
                         .direction = "bidirectional",
                         .bias = true,
                         .init_h = true,
                         .lens = lens,
                         .lens_fed = true,
                         .batch_symbolic = true};
        check(&s);
    }
}

Test(onnx_rnn, lstm_peepholes_and_input_forget)
{
    for (int dir = 0; dir < 3; dir++)
        for (int forget = 0; forget < 2; forget++) {
            struct spec s = {.op = "LSTM",
                             .T = 4,
                             .B = 2,
                             .I = 3,
                             .H = 3,
                             .direction = DIRECTIONS[dir],
                             .bias = true,
                             .init_h = true,
                             .init_c = true,
                             .peep = true,
                             .input_forget = forget,
                             .want_c = true};
            check(&s);
        }
}

Test(onnx_rnn, clip_bounds_the_inputs_of_the_activations)
{
    for (int k = 0; k < 3; k++) {
        struct spec s = {.op = KINDS[k],
                         .T = 4,
                         .B = 2,
                         .I = 3,
                         .H = 3,
                         .direction = "bidirectional",
                         .bias = true,
                         .init_h = true,
                         .init_c = k == 0,
                         .peep = k == 0,
                         .clip = 0.35,
                         .want_c = k == 0};
        check(&s);
    }
}

Test(onnx_rnn, gru_linear_before_reset_0_and_1)
{
    for (int lbr = 0; lbr < 2; lbr++)
        for (int dir = 0; dir < 3; dir++)
            for (int bias = 0; bias < 2; bias++) {
                struct spec s = {.op = "GRU",
                                 .T = 4,
                                 .B = 2,
                                 .I = 3,
                                 .H = 3,
                                 .direction = DIRECTIONS[dir],
                                 .bias = bias,
                                 .init_h = dir == 1,
                                 .lbr = lbr};
                check(&s);
            }
}

Test(onnx_rnn, every_activation_the_spec_lists_with_its_alpha_and_beta)
{
    /* LSTM: f, g, h per direction; the alphas and betas go, in order, to
     * the activations that take them */
    struct spec l = {.op = "LSTM",
                     .T = 4,
                     .B = 2,
                     .I = 3,
                     .H = 2,
                     .direction = "bidirectional",
                     .bias = true,
                     .init_h = true,
                     .init_c = true,
                     .want_c = true,
                     .nacts = 6,
                     .acts = {"HardSigmoid", "LeakyRelu", "Softsign", "sigmoid", "ScaledTanh",
                              "Softplus"},
                     .nalpha = 3,
                     .alpha = {0.3f, 0.2f, 0.8f},
                     .nbeta = 2,
                     .beta = {0.45f, 1.3f}};
    check(&l);
    struct spec g = {.op = "GRU",
                     .T = 4,
                     .B = 2,
                     .I = 3,
                     .H = 2,
                     .bias = true,
                     .init_h = true,
                     .nacts = 2,
                     .acts = {"Sigmoid", "Elu"},
                     .nalpha = 1,
                     .alpha = {0.7f}};
    check(&g);
    static const char *const single[] = {"Relu",       "Tanh",     "Affine",    "ThresholdedRelu",
                                         "Elu",        "Softplus", "LeakyRelu", "HardSigmoid",
                                         "ScaledTanh", "Softsign", "Sigmoid"};
    for (int i = 0; i < 11; i++) {
        struct spec r = {.op = "RNN",
                         .T = 4,
                         .B = 2,
                         .I = 3,
                         .H = 3,
                         .bias = true,
                         .init_h = true,
                         .nacts = 1,
                         .acts = {single[i]},
                         .nalpha = i % 2,
                         .alpha = {0.15f},
                         .nbeta = i % 2,
                         .beta = {-0.2f}};
        check(&r);
        /* with the defaults of the ONNX ops when no alpha or beta is given */
        r.nalpha = r.nbeta = 0;
        r.direction = "bidirectional"; /* one direction's list, for both */
        check(&r);
    }
}

Test(onnx_rnn, outputs_may_be_omitted)
{
    struct spec a = {.op = "LSTM",
                     .T = 3,
                     .B = 2,
                     .I = 2,
                     .H = 2,
                     .bias = true,
                     .no_y = true,
                     .no_h = true,
                     .want_c = true,
                     .direction = "bidirectional"};
    check(&a);
    struct spec b = {.op = "GRU", .T = 3, .B = 2, .I = 2, .H = 2, .no_h = true, .layout = 1};
    check(&b);
    struct spec c =
        {.op = "RNN", .T = 3, .B = 2, .I = 2, .H = 2, .no_y = true, .direction = "reverse"};
    check(&c);
}

Test(onnx_rnn, a_long_sequence_concatenates_in_rounds)
{
    /* more steps than an op has slots: the projection is split, and Y
     * concatenated, in rounds of 64 */
    struct spec s =
        {.op = "RNN", .T = 150, .B = 2, .I = 2, .H = 2, .bias = true, .direction = "bidirectional"};
    check(&s);
}

/* Imports m and expects error rc with a message naming the node "rec"
 * and holding frag; nothing is left in the scope. */
static void refused_model(Onnx__ModelProto *m, int rc, const char *frag)
{
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_scope *sc;
    vq_program *p;
    cr_assert_eq(vq_scope_new(&sc), 0);
    int got = vq_program_from_onnx(&p, sc, buf, len);
    cr_assert_eq(got, rc, "rc %d: %s", got, vq_errmsg());
    cr_assert_null(p);
    cr_assert(strstr(vq_errmsg(), frag), "\"%s\" not in: %s", frag, vq_errmsg());
    cr_assert(strstr(vq_errmsg(), "\"rec\""), "the node is named: %s", vq_errmsg());
    cr_assert_eq(vq_scope_count(sc), 0);
    vq_scope_free(sc);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}

/* s's model, refused with rc and frag; a symbolic_t model names X's
 * dim 0 (the sequence) instead of giving it. */
static void refused(const struct spec *s, bool symbolic_t, int rc, const char *frag)
{
    struct data d = data_new(s);
    Onnx__ModelProto *m = rnn_model(s, &d);
    if (symbolic_t) {
        Onnx__TensorShapeProto__Dimension *t = m->graph->input[0]->type->tensor_type->shape->dim[0];
        t->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
        t->dim_param = strdup("T");
    }
    refused_model(m, rc, frag);
    data_free(&d);
}

Test(onnx_rnn, what_cannot_be_unrolled_or_is_not_in_the_spec_is_refused)
{
    struct spec s = {.op = "LSTM", .T = 3, .B = 2, .I = 2, .H = 2};
    refused(&s, true, VQ_ENOSYS, "sequence length");
    struct spec big = {.op = "RNN", .T = 4097, .B = 1, .I = 1, .H = 1};
    refused(&big, false, VQ_ENOSYS, "4096");
    struct spec act =
        {.op = "GRU", .T = 2, .B = 1, .I = 1, .H = 1, .nacts = 2, .acts = {"Sigmoid", "Swish"}};
    refused(&act, false, VQ_ENOSYS, "Swish");
    struct spec nacts =
        {.op = "LSTM", .T = 2, .B = 1, .I = 1, .H = 1, .nacts = 2, .acts = {"Sigmoid", "Tanh"}};
    refused(&nacts, false, VQ_EINVAL, "activations");
    struct spec dir = {.op = "RNN", .T = 2, .B = 1, .I = 1, .H = 1, .direction = "sideways"};
    refused(&dir, false, VQ_EINVAL, "sideways");
    static const int32_t lens[1] = {3};
    struct spec far = {.op = "RNN", .T = 2, .B = 1, .I = 1, .H = 1, .lens = lens};
    refused(&far, false, VQ_EINVAL, "sequence_lens");
    /* rnn_model writes clip only when positive */
    struct spec clip = {.op = "GRU", .T = 2, .B = 1, .I = 1, .H = 1};
    struct data d = data_new(&clip);
    Onnx__ModelProto *m = rnn_model(&clip, &d);
    attr_float(m->graph->node[0], "clip", -1.0f);
    refused_model(m, VQ_EINVAL, "clip");
    data_free(&d);
}

/* ---- training ---- */

/* loss = sum(Y * ty) + sum(Y_c * tc) by the reference */
static double ref_loss(const struct spec *s, const struct data *d, const double *ty,
                       const double *tc)
{
    int D = d->D, n = s->T * D * s->B * s->H, m = D * s->B * s->H;
    double *y = malloc((size_t)n * sizeof *y), yh[64], yc[64], loss = 0;
    reference(s, d, y, yh, yc);
    for (int i = 0; i < n; i++)
        loss += y[i] * ty[i];
    for (int i = 0; i < m; i++)
        loss += yc[i] * tc[i];
    free(y);
    return loss;
}

Test(onnx_rnn, training_through_an_imported_lstm_gives_each_weight_its_gradient)
{
    /* f64, bidirectional, peepholes and mixed lengths: one SGD step with
     * rate 1 leaves w - dloss/dw in the scope, for every entry of W, R, B,
     * P and the initial states, against central differences of the
     * reference */
    static const int32_t lens[3] = {4, 2, 3};
    struct spec s = {.op = "LSTM",
                     .T = 4,
                     .B = 3,
                     .I = 2,
                     .H = 2,
                     .direction = "bidirectional",
                     .bias = true,
                     .init_h = true,
                     .init_c = true,
                     .peep = true,
                     .lens = lens,
                     .want_c = true,
                     .f64 = true};
    struct data d = data_new(&s);
    int D = d.D, ny = s.T * D * s.B * s.H, nc = D * s.B * s.H;
    double *ty = values(ny, 6.1, 1.0, true), *tc = values(nc, 7.3, 1.0, true);
    Onnx__ModelProto *m = rnn_model(&s, &d);
    add_init_of(m, "ty", ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, sizeof(double), 4,
                (int64_t[]){s.T, D, s.B, s.H}, ty);
    add_init_of(m, "tc", ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, sizeof(double), 3,
                (int64_t[]){D, s.B, s.H}, tc);
    add_node(m, "Mul", "my", NAMES("Y", "ty"), NAMES("py"));
    add_node(m, "Mul", "mc", NAMES("Y_c", "tc"), NAMES("pc"));
    Onnx__NodeProto *r1 = add_node(m, "ReduceSum", "sy", NAMES("py"), NAMES("ly"));
    attr_int(r1, "keepdims", 0);
    Onnx__NodeProto *r2 = add_node(m, "ReduceSum", "sc", NAMES("pc"), NAMES("lc"));
    attr_int(r2, "keepdims", 0);
    add_node(m, "Add", "loss", NAMES("ly", "lc"), NAMES("loss"));
    Onnx__GraphProto *g = m->graph;
    GROW(g->output, g->n_output);
    g->output[g->n_output++] = value_info("loss", ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, 0, NULL);
    struct imported im = import_ok(m);
    vq_program *startup;
    cr_assert_eq(vq_program_new(&startup), 0);
    vq_optimizer sgd = {.kind = VQ_OPT_SGD, .learning_rate = 1};
    const char *params[] = {"W", "R", "B", "P", "h0", "c0"};
    vq_optimizer opt = sgd;
    opt.parameters = params;
    opt.nparameters = 6;
    cr_assert_eq(vq_optimizer_minimize(im.p, startup, "loss", &opt), 6, "%s", vq_errmsg());
    struct run r = run_new();
    vq_tensor *x = x_tensor(&s, &d);
    vq_feed feed = {"X", x};
    vq_fetch fl = {"loss", NULL};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, &fl, 1), 0, "%s", vq_errmsg());
    double want_loss = ref_loss(&s, &d, ty, tc);
    cr_assert(fabs(elem(fl.tensor, 0) - want_loss) < 1e-10, "loss %.12g, want %.12g",
              elem(fl.tensor, 0), want_loss);
    vq_tensor_release(fl.tensor);
    double *vals[6] = {d.w, d.r, d.b, d.p, d.h0, d.c0};
    int checked = 0;
    for (int k = 0; k < 6; k++) {
        vq_tensor *after = vq_scope_get(im.s, params[k]);
        cr_assert_not_null(after, "%s", params[k]);
        for (int64_t i = 0; i < vq_tensor_numel(after); i++) {
            /* the states' entries in layout 0 are the model's (layout 0) */
            double *v = &vals[k][i], keep = *v, h = 1e-6;
            *v = keep + h;
            double up = ref_loss(&s, &d, ty, tc);
            *v = keep - h;
            double down = ref_loss(&s, &d, ty, tc);
            *v = keep;
            double fd = (up - down) / (2 * h), grad = keep - elem(after, i);
            cr_assert(fabs(grad - fd) < 1e-7 * (1 + fabs(fd)),
                      "d loss / d %s[%lld]: %.10g, "
                      "finite difference %.10g",
                      params[k], (long long)i, grad, fd);
            checked++;
        }
    }
    cr_assert_gt(checked, 100);
    vq_tensor_release(x);
    imported_free(&im);
    run_free(&r);
    vq_program_free(startup);
    free(ty);
    free(tc);
    data_free(&d);
}

Test(onnx_rnn, an_lstm_pytorch_computes_takes_its_weights_cut_at_import_and_trains_them)
{
    /* f64, bidirectional, with biases and initial states: the node becomes
     * one lstm op and the moves of its output (no slice or concat left to
     * run), its W, R and B cut at import into parameters in PyTorch's gate
     * order ("W@weight_ih_l0", ...); one SGD step with rate 1 leaves p -
     * dloss/dp in each, against central differences of the reference at
     * the entry of W, R or B it came from */
    if (getenv("VARQ_ONNX_UNROLL_RNN"))
        cr_skip_test("the node is unrolled (VARQ_ONNX_UNROLL_RNN)");
    struct spec s = {.op = "LSTM",
                     .T = 3,
                     .B = 2,
                     .I = 2,
                     .H = 2,
                     .direction = "bidirectional",
                     .bias = true,
                     .init_h = true,
                     .init_c = true,
                     .want_c = true,
                     .f64 = true};
    struct data d = data_new(&s);
    int D = d.D, H = s.H, gh = 4 * H, ny = s.T * D * s.B * H, nc = D * s.B * H;
    double *ty = values(ny, 6.1, 1.0, true), *tc = values(nc, 7.3, 1.0, true);
    Onnx__ModelProto *m = rnn_model(&s, &d);
    struct imported probe = import_ok(m);
    cr_assert_leq(vq_program_nops(probe.p, 0), 4, "%d ops", vq_program_nops(probe.p, 0));
    imported_free(&probe);
    m = rnn_model(&s, &d);
    add_init_of(m, "ty", ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, sizeof(double), 4,
                (int64_t[]){s.T, D, s.B, s.H}, ty);
    add_init_of(m, "tc", ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, sizeof(double), 3,
                (int64_t[]){D, s.B, s.H}, tc);
    add_node(m, "Mul", "my", NAMES("Y", "ty"), NAMES("py"));
    add_node(m, "Mul", "mc", NAMES("Y_c", "tc"), NAMES("pc"));
    Onnx__NodeProto *r1 = add_node(m, "ReduceSum", "sy", NAMES("py"), NAMES("ly"));
    attr_int(r1, "keepdims", 0);
    Onnx__NodeProto *r2 = add_node(m, "ReduceSum", "sc", NAMES("pc"), NAMES("lc"));
    attr_int(r2, "keepdims", 0);
    add_node(m, "Add", "loss", NAMES("ly", "lc"), NAMES("loss"));
    Onnx__GraphProto *g = m->graph;
    GROW(g->output, g->n_output);
    g->output[g->n_output++] = value_info("loss", ONNX__TENSOR_PROTO__DATA_TYPE__DOUBLE, 0, NULL);
    struct imported im = import_ok(m);
    /* the pieces: source tensor, direction, first row of the source */
    static const char *const pieces[8] = {"W@weight_ih_l0",         "R@weight_hh_l0",
                                          "B@bias_ih_l0",           "B@bias_hh_l0",
                                          "W@weight_ih_l0_reverse", "R@weight_hh_l0_reverse",
                                          "B@bias_ih_l0_reverse",   "B@bias_hh_l0_reverse"};
    vq_program *startup;
    cr_assert_eq(vq_program_new(&startup), 0);
    vq_optimizer opt = {.kind = VQ_OPT_SGD,
                        .learning_rate = 1,
                        .parameters = pieces,
                        .nparameters = 8};
    cr_assert_eq(vq_optimizer_minimize(im.p, startup, "loss", &opt), 8, "%s", vq_errmsg());
    struct run r = run_new();
    vq_tensor *x = x_tensor(&s, &d);
    vq_feed feed = {"X", x};
    vq_fetch fl = {"loss", NULL};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, &fl, 1), 0, "%s", vq_errmsg());
    cr_assert(fabs(elem(fl.tensor, 0) - ref_loss(&s, &d, ty, tc)) < 1e-10);
    vq_tensor_release(fl.tensor);
    static const int from[4] = {0, 2, 3, 1}; /* PyTorch's gate g is ONNX's from[g] */
    for (int k = 0; k < 8; k++) {
        int dir = k / 4, kind = k % 4;
        double *src = kind == 0 ? d.w : kind == 1 ? d.r : d.b;
        int inner = kind == 0 ? s.I : kind == 1 ? H : 1, rows = kind >= 2 ? 2 * gh : gh;
        int first = kind == 3 ? gh : 0;
        vq_tensor *after = vq_scope_get(im.s, pieces[k]);
        cr_assert_not_null(after, "%s", pieces[k]);
        cr_assert_eq(vq_tensor_numel(after), (int64_t)gh * inner);
        for (int64_t i = 0; i < vq_tensor_numel(after); i++) {
            int row = (int)(i / inner), col = (int)(i % inner);
            int srow = first + from[row / H] * H + row % H;
            double *v = &src[((int64_t)dir * rows + srow) * inner + col], keep = *v, h = 1e-6;
            *v = keep + h;
            double up = ref_loss(&s, &d, ty, tc);
            *v = keep - h;
            double down = ref_loss(&s, &d, ty, tc);
            *v = keep;
            double fd = (up - down) / (2 * h), grad = keep - elem(after, i);
            cr_assert(fabs(grad - fd) < 1e-7 * (1 + fabs(fd)), "d loss / d %s[%lld]: %.10g, %.10g",
                      pieces[k], (long long)i, grad, fd);
        }
    }
    vq_tensor_release(x);
    imported_free(&im);
    run_free(&r);
    vq_program_free(startup);
    free(ty);
    free(tc);
    data_free(&d);
}
