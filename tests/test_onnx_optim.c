/* The optimizers of ONNX's domain ai.onnx.preview.training (Adagrad, Adam,
 * Momentum, onnx/t_optim.c): models that import only that domain, of
 * several tensors, fed at run time, against the spec's formulas written
 * out here in double (ONNX's reference in its backend test generators),
 * at the first step (T = 0) and a later one; and how the importer and the
 * census treat the domain. */
#include <varq/varq.h>

#include "onnx.pb-c.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include "leakcheck.h"
#include "onnx_models.h"

TestSuite(onnx_optim, .fini = leak_check);

#define TRAINING "ai.onnx.preview.training"

/* Two tensors: X1 [3] and X2 [2, 2], laid end to end (7 elements). */
#define NEL 7
static const int64_t D1[1] = {3}, D2[2] = {2, 2};

static Onnx__ModelProto *training_model(void)
{
    Onnx__ModelProto *m = model_new(1);
    free(m->opset_import[0]->domain);
    m->opset_import[0]->domain = strdup(TRAINING);
    add_input(m, "R", 0, NULL);
    add_input_of(m, "T", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 0, NULL);
    return m;
}

/* Inputs name1, name2 (X1's and X2's shapes), and their names into in[]. */
static void pair(Onnx__ModelProto *m, const char *name, const char **in, int *k)
{
    static char names[16][8];
    static int next;
    for (int t = 0; t < 2; t++) {
        char *s = names[next++ % 16];
        snprintf(s, 8, "%s%d", name, t + 1);
        add_input(m, s, t ? 2 : 1, t ? D2 : D1);
        in[(*k)++] = s;
    }
}

/* Runs the node op (attributes set by the caller through *node) over R,
 * T and nstate states besides X and G; out[j] gets output j's 7 values. */
struct case_ {
    const char *op, *mode;
    int nstate;
    double norm, alpha, beta, eps, decay, post;
};

static void run_case(const struct case_ *c, float r, int64_t t, const float *in, double *out)
{
    Onnx__ModelProto *m = training_model();
    const char *names[16] = {"R", "T"};
    int k = 2;
    static const char *const groups[4] = {"X", "G", "V", "H"};
    int ngroups = 2 + c->nstate;
    for (int g = 0; g < ngroups; g++)
        pair(m, g == 2 && !strcmp(c->op, "Adagrad") ? "H" : groups[g], names, &k);
    names[k] = NULL;
    const char *outs[8];
    static const char *const onames[6] = {"Y1", "Y2", "S1", "S2", "Q1", "Q2"};
    int nout = 2 * (1 + c->nstate);
    for (int j = 0; j < nout; j++)
        outs[j] = onames[j];
    outs[nout] = NULL;
    Onnx__NodeProto *n = add_node(m, c->op, "opt", names, outs);
    n->domain = strdup(TRAINING);
    attr_float(n, "norm_coefficient", (float)c->norm);
    if (!strcmp(c->op, "Adagrad")) {
        attr_float(n, "decay_factor", (float)c->decay);
        attr_float(n, "epsilon", (float)c->eps);
    } else {
        attr_float(n, "alpha", (float)c->alpha);
        attr_float(n, "beta", (float)c->beta);
    }
    if (!strcmp(c->op, "Adam")) {
        attr_float(n, "epsilon", (float)c->eps);
        attr_float(n, "norm_coefficient_post", (float)c->post);
    }
    if (c->mode)
        attr_string(n, "mode", c->mode);
    for (int j = 0; j < nout; j++)
        add_output(m, onames[j]);
    struct imported im = import_ok(m);
    struct run run = run_new();
    vq_feed feeds[10];
    int nf = 0;
    vq_tensor *tr, *tt;
    cr_assert_eq(vq_tensor_from(&tr, VQ_F32, 0, NULL, &r), 0);
    cr_assert_eq(vq_tensor_from(&tt, VQ_I64, 0, NULL, &t), 0);
    feeds[nf++] = (vq_feed){"R", tr};
    feeds[nf++] = (vq_feed){"T", tt};
    for (int i = 2; i < k; i++) {
        int g = (i - 2) / 2, which = (i - 2) % 2;
        vq_tensor *v;
        cr_assert_eq(vq_tensor_from(&v, VQ_F32, which ? 2 : 1, which ? D2 : D1,
                                    in + g * NEL + (which ? 3 : 0)),
                     0);
        feeds[nf++] = (vq_feed){names[i], v};
    }
    vq_fetch f[6];
    for (int j = 0; j < nout; j++)
        f[j] = (vq_fetch){onames[j], NULL};
    cr_assert_eq(vq_exec_run(run.ex, im.p, im.s, feeds, nf, f, nout), 0, "%s", vq_errmsg());
    for (int j = 0; j < nout; j++) {
        const float *y = vq_tensor_data(f[j].tensor);
        int64_t count = vq_tensor_numel(f[j].tensor);
        cr_assert_eq(count, j % 2 ? 4 : 3, "%s output %d", c->op, j);
        for (int64_t e = 0; e < count; e++)
            out[j / 2 * NEL + (j % 2 ? 3 : 0) + e] = y[e];
        vq_tensor_release(f[j].tensor);
    }
    for (int i = 0; i < nf; i++)
        vq_tensor_release(feeds[i].tensor);
    imported_free(&im);
    run_free(&run);
}

/* The spec's formulas, element e: in[] is X, G, then the states (V, H /
 * H), want[] the new X, then the new states. */
static void reference(const struct case_ *c, double r, int64_t t, const float *in, int e,
                      double *want)
{
    double x = in[e], g = in[NEL + e], gr = c->norm * x + g;
    if (!strcmp(c->op, "Adagrad")) {
        double h = in[2 * NEL + e], rr = r / (1 + t * c->decay), hn = h + gr * gr;
        want[0] = x - rr * gr / (sqrt(hn) + c->eps);
        want[1] = hn;
    } else if (!strcmp(c->op, "Adam")) {
        double v = in[2 * NEL + e], h = in[3 * NEL + e];
        double vn = c->alpha * v + (1 - c->alpha) * gr, hn = c->beta * h + (1 - c->beta) * gr * gr;
        double ra =
            t > 0 ? r * sqrt(1 - pow(c->beta, (double)t)) / (1 - pow(c->alpha, (double)t)) : r;
        want[0] = (1 - c->post) * (x - ra * (vn / (sqrt(hn) + c->eps)));
        want[1] = vn;
        want[2] = hn;
    } else {
        double v = in[2 * NEL + e], b = t > 0 ? c->beta : 1, vn = c->alpha * v + b * gr;
        want[0] = strcmp(c->mode, "nesterov") ? x - r * vn : x - r * (gr + c->alpha * vn);
        want[1] = vn;
    }
}

Test(onnx_optim, adagrad_adam_and_momentum_of_two_tensors_follow_the_spec_formulas)
{
    static const struct case_ cases[] = {
        {"Adagrad", NULL, 1, 0.01, 0, 0, 1e-5, 0.3, 0},
        {"Adam", NULL, 2, 0.02, 0.9, 0.99, 1e-3, 0, 0},
        {"Adam", NULL, 2, 0.0, 0.8, 0.5, 1e-6, 0, 0.1},
        {"Momentum", "standard", 1, 0.05, 0.9, 0.7, 0, 0, 0},
        {"Momentum", "nesterov", 1, 0.05, 0.9, 0.7, 0, 0, 0},
    };
    float in[4 * NEL];
    for (int i = 0; i < 4 * NEL; i++)
        in[i] = (float)(sin(1.3 * i + 0.2) * (i >= 2 * NEL ? 0.5 : 2) + (i >= 3 * NEL ? 1 : 0));
    /* H is a sum of squares: never negative */
    for (int i = 2 * NEL; i < 4 * NEL; i++)
        in[i] = fabsf(in[i]);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int64_t t = 0; t <= 5; t += 5) {
            const struct case_ *c = &cases[ci];
            double got[3 * NEL], want[3];
            run_case(c, 0.125f, t, in, got);
            for (int e = 0; e < NEL; e++) {
                reference(c, 0.125, t, in, e, want);
                for (int j = 0; j <= c->nstate; j++)
                    cr_assert(fabs(got[j * NEL + e] - want[j]) <= 2e-6 * (1 + fabs(want[j])),
                              "%s %s T=%lld output %d [%d]: %.9g, expected %.9g", c->op,
                              c->mode ? c->mode : "", (long long)t, j, e, got[j * NEL + e],
                              want[j]);
            }
        }
}

Test(onnx_optim, the_census_marks_the_training_ops_translated_and_other_domains_not)
{
    int adam = -1;
    for (int i = 0; vq_onnx_op_name(i); i++) {
        bool training = !strcmp(vq_onnx_op_name(i), "Adam") ||
                        !strcmp(vq_onnx_op_name(i), "Adagrad") ||
                        !strcmp(vq_onnx_op_name(i), "Momentum");
        cr_assert_str_eq(vq_onnx_op_domain(i), training ? TRAINING : "", "%s", vq_onnx_op_name(i));
        if (!strcmp(vq_onnx_op_name(i), "Adam"))
            adam = i;
    }
    cr_assert_geq(adam, 0);
    Onnx__ModelProto *m = training_model();
    add_input(m, "X", 1, D1);
    add_input(m, "G", 1, D1);
    add_input(m, "V", 1, D1);
    Onnx__NodeProto *n =
        add_node(m, "Momentum", "mo", NAMES("R", "T", "X", "G", "V"), NAMES("Xn", "Vn"));
    n->domain = strdup(TRAINING);
    attr_float(n, "alpha", 0.9f);
    attr_float(n, "beta", 0.9f);
    attr_float(n, "norm_coefficient", 0);
    attr_string(n, "mode", "standard");
    /* Adam of the default domain is no op of ONNX's */
    add_node(m, "Adam", "plain", NAMES("R", "T", "X", "G", "V", "V"), NAMES("Y"));
    add_output(m, "Xn");
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_onnx_ops ops;
    cr_assert_eq(vq_onnx_ops_read(&ops, buf, len), 0, "%s", vq_errmsg());
    cr_assert_eq(ops.nops, 2);
    /* by domain, then type: the default domain ("") first */
    cr_assert_str_eq(ops.ops[0].domain, "");
    cr_assert_str_eq(ops.ops[0].type, "Adam");
    cr_assert_not(ops.ops[0].supported);
    cr_assert_str_eq(ops.ops[1].domain, TRAINING);
    cr_assert_str_eq(ops.ops[1].type, "Momentum");
    cr_assert(ops.ops[1].supported);
    vq_onnx_ops_free(&ops);
    vq_scope *s;
    vq_program *p;
    cr_assert_eq(vq_scope_new(&s), 0);
    cr_assert_eq(vq_program_from_onnx(&p, s, buf, len), VQ_ENOSYS, "%s", vq_errmsg());
    cr_assert(strstr(vq_errmsg(), "uses 1 op type that varq does not translate: Adam (1 node: "
                                  "node 1 \"plain\")"),
              "%s", vq_errmsg());
    free(buf);
    /* an op of the default domain in a model that imports only the
     * training domain */
    strcpy(m->graph->node[1]->op_type, "Relu");
    buf = pack(m, &len);
    cr_assert_eq(vq_program_from_onnx(&p, s, buf, len), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "node 1 (Relu \"plain\"): the model imports no version of the "
                                  "op's domain ai.onnx"),
              "%s", vq_errmsg());
    free(buf);
    /* and the training domain of another version */
    m->opset_import[0]->version = 2;
    buf = pack(m, &len);
    cr_assert_eq(vq_program_from_onnx(&p, s, buf, len), VQ_ENOSYS);
    cr_assert(strstr(vq_errmsg(), "opset 2 of " TRAINING "; varq reads 1"), "%s", vq_errmsg());
    free(buf);
    vq_scope_free(s);
    onnx__model_proto__free_unpacked(m, NULL);
}

Test(onnx_optim, momentum_needs_its_attributes_and_a_known_mode)
{
    Onnx__ModelProto *m = training_model();
    add_input(m, "X", 1, D1);
    add_input(m, "G", 1, D1);
    add_input(m, "V", 1, D1);
    Onnx__NodeProto *n =
        add_node(m, "Momentum", "mo", NAMES("R", "T", "X", "G", "V"), NAMES("Xn", "Vn"));
    n->domain = strdup(TRAINING);
    attr_float(n, "alpha", 0.9f);
    attr_float(n, "beta", 0.9f);
    attr_float(n, "norm_coefficient", 0);
    add_output(m, "Xn");
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_scope *s;
    vq_program *p;
    cr_assert_eq(vq_scope_new(&s), 0);
    cr_assert_eq(vq_program_from_onnx(&p, s, buf, len), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "attribute mode is missing"), "%s", vq_errmsg());
    free(buf);
    attr_string(n, "mode", "heavy");
    buf = pack(m, &len);
    cr_assert_eq(vq_program_from_onnx(&p, s, buf, len), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "mode is \"heavy\""), "%s", vq_errmsg());
    free(buf);
    vq_scope_free(s);
    onnx__model_proto__free_unpacked(m, NULL);
}
