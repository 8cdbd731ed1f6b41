/* A user-registered op, end to end: "swish" (Out = X * sigmoid(beta X),
 * a fused activation varq does not have) and its gradient op
 * "swish_grad", registered with vq_op_register, then trained inside a
 * program: a two-layer network with swish between the layers learns
 * y = sin(3 x0) x1 with Adam, the gradient of swish coming from the
 * gradient maker below through vq_append_backward.
 *
 *   custom_op [DIR]   trains, exits 0 when the loss fell below a tenth of
 *                     its start; with DIR, also saves the trained forward
 *                     program (DIR/model.pb), its parameters (DIR/params),
 *                     an input (DIR/x.npy) and this process's output for
 *                     it (DIR/want.npy), for `varq --plugin` to replay.
 *
 * Built with -DVARQ_PLUGIN, the same file is a plugin for the varq tool:
 * `varq --plugin ./libcustom_op_plugin.so ops` lists swish, and `varq
 * --plugin ... run DIR/model.pb ...` runs the saved program. */
#include <varq/varq.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* What swish's inference hands its kernels. */
struct swish_params {
    double beta;
};

/* beta from the attributes (1 when absent): registered ops parse their
 * attributes once, in infer, never in the kernels. */
static int swish_params_read(const vq_op_infer_call *c, struct swish_params *p)
{
    p->beta = 1.0;
    for (int i = 0; i < c->nattrs; i++)
        if (c->attrs[i].type == VQ_ATTR_FLOAT) /* the schema allows only beta */
            p->beta = c->attrs[i].f;
        else
            p->beta = (double)c->attrs[i].i; /* an int where a float goes */
    if (!isfinite(p->beta))
        return vq_error_set(VQ_EINVAL, "attribute beta: is not finite");
    return 0;
}

static bool is_float(vq_dtype dt)
{
    return dt == VQ_F32 || dt == VQ_F64;
}

/* swish(X) -> Out: Out is X's dtype and shape. */
static int swish_infer(const vq_op_infer_call *c)
{
    if (!is_float(c->in[0].dtype))
        return vq_error_set(VQ_EINVAL, "input X: dtype %s, expected f32 or f64",
                            vq_dtype_name(c->in[0].dtype));
    c->out[0] = c->in[0];
    return swish_params_read(c, c->params);
}

/* swish_grad(dOut, X) -> dX: dOut and X agree (unknown dims match). */
static int swish_grad_infer(const vq_op_infer_call *c)
{
    const vq_op_meta *d = &c->in[0], *x = &c->in[1];
    bool same = d->dtype == x->dtype && d->ndim == x->ndim && is_float(x->dtype);
    for (int i = 0; same && i < x->ndim; i++)
        same = d->shape[i] == x->shape[i] || d->shape[i] < 0 || x->shape[i] < 0;
    if (!same)
        return vq_error_set(VQ_EINVAL, "input dOut: not a float tensor of X's dtype and shape");
    c->out[0] = *x;
    return swish_params_read(c, c->params);
}

static double sigmoid(double v)
{
    return 1.0 / (1.0 + exp(-v));
}

static int swish_cpu(const vq_op_kernel_call *k)
{
    const struct swish_params *p = k->params;
    int64_t n = vq_tensor_numel(k->in[0]);
    if (vq_tensor_dtype(k->in[0]) == VQ_F32) {
        const float *x = vq_tensor_data(k->in[0]);
        float *y = vq_tensor_data(k->out[0]);
        for (int64_t i = 0; i < n; i++)
            y[i] = (float)(x[i] * sigmoid(p->beta * x[i]));
    } else {
        const double *x = vq_tensor_data(k->in[0]);
        double *y = vq_tensor_data(k->out[0]);
        for (int64_t i = 0; i < n; i++)
            y[i] = x[i] * sigmoid(p->beta * x[i]);
    }
    return 0;
}

/* dX = dOut * (s + beta x s (1 - s)), s = sigmoid(beta x). */
static double swish_slope(double beta, double x)
{
    double s = sigmoid(beta * x);
    return s + beta * x * s * (1 - s);
}

static int swish_grad_cpu(const vq_op_kernel_call *k)
{
    const struct swish_params *p = k->params;
    int64_t n = vq_tensor_numel(k->in[1]);
    if (vq_tensor_dtype(k->in[1]) == VQ_F32) {
        const float *d = vq_tensor_data(k->in[0]), *x = vq_tensor_data(k->in[1]);
        float *dx = vq_tensor_data(k->out[0]);
        for (int64_t i = 0; i < n; i++)
            dx[i] = (float)(d[i] * swish_slope(p->beta, x[i]));
    } else {
        const double *d = vq_tensor_data(k->in[0]), *x = vq_tensor_data(k->in[1]);
        double *dx = vq_tensor_data(k->out[0]);
        for (int64_t i = 0; i < n; i++)
            dx[i] = d[i] * swish_slope(p->beta, x[i]);
    }
    return 0;
}

/* The gradient maker: one swish_grad op, with the forward op's beta. */
static int swish_grad(const vq_op_grad_call *g)
{
    if (!g->din[0] || !g->dout[0])
        return 0; /* no gradient wanted for X, or none flows into Out */
    return vq_op_grad_emit(g, "swish_grad", (const char *const[]){g->dout[0], g->in[0]}, 2,
                           &g->din[0], 1, g->attrs, g->nattrs);
}

static int register_swish(void)
{
    static const char *const x[] = {"X"}, *const out[] = {"Out"};
    static const char *const grad_in[] = {"dOut", "X"}, *const grad_out[] = {"dX"};
    static const vq_op_attr_spec beta[] = {{"beta", VQ_ATTR_FLOAT, false, "1"}};
    int rc = vq_op_register(&(vq_op_def){.name = "swish", .inputs = x, .ninputs = 1,
                                         .outputs = out, .noutputs = 1, .attrs = beta,
                                         .nattrs = 1,
                                         .params_size = sizeof(struct swish_params),
                                         .infer = swish_infer, .cpu = swish_cpu,
                                         .grad = swish_grad});
    if (rc == 0)
        rc = vq_op_register(&(vq_op_def){.name = "swish_grad", .inputs = grad_in, .ninputs = 2,
                                         .outputs = grad_out, .noutputs = 1, .attrs = beta,
                                         .nattrs = 1,
                                         .params_size = sizeof(struct swish_params),
                                         .infer = swish_grad_infer, .cpu = swish_grad_cpu});
    return rc;
}

#ifdef VARQ_PLUGIN

/* What `varq --plugin` calls after loading this file. */
__attribute__((visibility("default"))) int vq_plugin_init(void)
{
    return register_swish();
}

#else

#define CHECK(call)                                                                        \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ < 0) {                                                                     \
            fprintf(stderr, "custom_op: %s: %s\n", #call, vq_errmsg());                    \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

enum { BATCH = 64, STEPS = 600 };

/* A batch of x uniform in [-1, 1]^2 and y = sin(3 x0) x1. */
static void batch(vq_tensor **x, vq_tensor **y, unsigned *rng)
{
    CHECK(vq_tensor_new(x, VQ_F32, 2, (int64_t[]){BATCH, 2}));
    CHECK(vq_tensor_new(y, VQ_F32, 2, (int64_t[]){BATCH, 1}));
    float *xd = vq_tensor_data(*x), *yd = vq_tensor_data(*y);
    for (int i = 0; i < BATCH; i++) {
        for (int j = 0; j < 2; j++) {
            *rng = *rng * 1664525u + 1013904223u;
            xd[2 * i + j] = (float)(*rng >> 8) / (float)(1u << 24) * 2 - 1;
        }
        yd[i] = sinf(3 * xd[2 * i]) * xd[2 * i + 1];
    }
}

static float step(vq_exec *ex, vq_program *p, vq_scope *s, vq_tensor *x, vq_tensor *y)
{
    vq_feed feeds[2] = {{"x", x}, {"y", y}};
    vq_fetch loss = {"loss", NULL};
    CHECK(vq_exec_run(ex, p, s, feeds, 2, &loss, 1));
    float v = *(float *)vq_tensor_data(loss.tensor);
    vq_tensor_release(loss.tensor);
    return v;
}

/* The forward program, its parameters, an input and our output for it:
 * what the varq tool (with this file as its plugin) must reproduce. */
static void save_for_cli(const char *dir, vq_exec *ex, vq_program *fwd, vq_scope *s)
{
    char path[4096];
    unsigned rng = 7;
    vq_tensor *x, *y;
    batch(&x, &y, &rng);
    vq_feed feed = {"x", x};
    vq_fetch out = {"out", NULL};
    CHECK(vq_exec_run(ex, fwd, s, &feed, 1, &out, 1));
    snprintf(path, sizeof path, "%s/model.pb", dir);
    CHECK(vq_program_save(fwd, path));
    snprintf(path, sizeof path, "%s/params", dir);
    CHECK(vq_scope_save(s, path));
    snprintf(path, sizeof path, "%s/x.npy", dir);
    CHECK(vq_npy_save(path, x));
    snprintf(path, sizeof path, "%s/want.npy", dir);
    CHECK(vq_npy_save(path, out.tensor));
    vq_tensor_release(out.tensor);
    vq_tensor_release(x);
    vq_tensor_release(y);
}

int main(int argc, char **argv)
{
    CHECK(register_swish());
    printf("registered: %s\n            %s\n", vq_op_signature("swish"),
           vq_op_signature("swish_grad"));

    vq_program *startup, *main_p, *fwd;
    CHECK(vq_program_new(&startup));
    CHECK(vq_program_new(&main_p));
    CHECK(vq_program_add_var(main_p, 0, "x", VQ_F32, 2, (int64_t[]){-1, 2}, false));
    CHECK(vq_program_add_var(main_p, 0, "y", VQ_F32, 2, (int64_t[]){-1, 1}, false));
    CHECK(vq_layer_linear(main_p, startup, "x", "h", 32, 11));
    CHECK(vq_program_add_var(main_p, 0, "a", VQ_F32, 2, (int64_t[]){-1, 32}, false));
    vq_attr beta = VQ_ATTR_F("beta", 1.5);
    CHECK(vq_program_add_op(main_p, 0, "swish", (const char *const[]){"h"}, 1,
                            (const char *const[]){"a"}, 1, &beta, 1));
    CHECK(vq_layer_linear(main_p, startup, "a", "out", 1, 13));
    CHECK(vq_program_clone(main_p, &fwd)); /* the model, before the loss */
    CHECK(vq_layer_mse_loss(main_p, "out", "y", "loss"));
    vq_optimizer adam = {.kind = VQ_OPT_ADAM, .learning_rate = 0.01};
    CHECK(vq_optimizer_minimize(main_p, startup, "loss", &adam));

    vq_engine *e;
    vq_exec *ex;
    vq_scope *s;
    CHECK(vq_engine_new(&e, NULL));
    CHECK(vq_exec_new(&ex, e, NULL));
    CHECK(vq_scope_new(&s));
    CHECK(vq_exec_run(ex, startup, s, NULL, 0, NULL, 0));
    unsigned rng = 1;
    float first = 0, last = 0, avg = 0;
    for (int i = 0; i < STEPS; i++) {
        vq_tensor *x, *y;
        batch(&x, &y, &rng);
        float l = step(ex, main_p, s, x, y);
        vq_tensor_release(x);
        vq_tensor_release(y);
        if (i == 0)
            first = l;
        avg += l;
        if ((i + 1) % 100 == 0) {
            last = avg / 100;
            printf("steps %3d-%3d  mean loss %.5f\n", i - 98, i + 1, last);
            avg = 0;
        }
    }
    if (argc > 1)
        save_for_cli(argv[1], ex, fwd, s);
    vq_scope_free(s);
    vq_exec_free(ex);
    vq_engine_free(e);
    vq_program_free(fwd);
    vq_program_free(main_p);
    vq_program_free(startup);
    bool ok = last < first / 10;
    printf("first loss %.5f, last %.5f: %s\n", first, last,
           ok ? "learned through swish" : "did not learn");
    return ok ? 0 : 1;
}

#endif
