/* Ops registered by the user (op_register.h): they run wherever built-in
 * ops do — vq_op_run with and without an engine, programs and their
 * encoding, autodiff, the executor on the CPU and the emulated GPU — and
 * an async kernel finished from another thread never holds a worker.
 * Bad definitions, duplicate names and failing callbacks are errors that
 * name the op. */
#include <varq/varq.h>

#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "leakcheck.h"
#include "opcheck.h"

/* ---- the ops the tests register ---- */

static const char *const X[] = {"X"}, *const OUT[] = {"Out"};
static const char *const XB[] = {"X", "Bias"};

struct alpha {
    double alpha;
};

static double attr_float(const vq_op_infer_call *c, const char *name, double dflt)
{
    for (int i = 0; i < c->nattrs; i++)
        if (!strcmp(c->attrs[i].name, name))
            return c->attrs[i].type == VQ_ATTR_FLOAT ? c->attrs[i].f : (double)c->attrs[i].i;
    return dflt;
}

static int64_t attr_int(const vq_op_infer_call *c, const char *name, int64_t dflt)
{
    for (int i = 0; i < c->nattrs; i++)
        if (!strcmp(c->attrs[i].name, name))
            return c->attrs[i].i;
    return dflt;
}

/* t_scale(X) -> Out = alpha X; its gradient is t_scale of dOut. */
static int scale_infer(const vq_op_infer_call *c)
{
    if (c->in[0].dtype != VQ_F32 && c->in[0].dtype != VQ_F64)
        return vq_error_set(VQ_EINVAL, "input X: not a float tensor");
    c->out[0] = c->in[0];
    ((struct alpha *)c->params)->alpha = attr_float(c, "alpha", 2.0);
    return 0;
}

static int scale_cpu(const vq_op_kernel_call *k)
{
    double a = ((const struct alpha *)k->params)->alpha;
    int64_t n = vq_tensor_numel(k->in[0]);
    if (vq_tensor_dtype(k->in[0]) == VQ_F32) {
        const float *x = vq_tensor_data(k->in[0]);
        float *y = vq_tensor_data(k->out[0]);
        for (int64_t i = 0; i < n; i++)
            y[i] = (float)(a * x[i]);
    } else {
        const double *x = vq_tensor_data(k->in[0]);
        double *y = vq_tensor_data(k->out[0]);
        for (int64_t i = 0; i < n; i++)
            y[i] = a * x[i];
    }
    return 0;
}

static int scale_grad(const vq_op_grad_call *g)
{
    if (!g->din[0] || !g->dout[0])
        return 0;
    return vq_op_grad_emit(g, "t_scale", &g->dout[0], 1, &g->din[0], 1, g->attrs, g->nattrs);
}

/* t_fail(X) -> Out: mode 1 fails in infer, 2 in the kernel with a
 * message, 3 in the kernel without one; 0 copies X. */
static int fail_infer(const vq_op_infer_call *c)
{
    int64_t mode = attr_int(c, "mode", 0);
    if (mode == 1)
        return vq_error_set(VQ_EINVAL, "attribute mode: 1 is refused here");
    c->out[0] = c->in[0];
    *(int64_t *)c->params = mode;
    return 0;
}

static int fail_cpu(const vq_op_kernel_call *k)
{
    int64_t mode = *(const int64_t *)k->params;
    if (mode == 2)
        return vq_error_set(VQ_EIO, "the kernel says no");
    if (mode == 3)
        return VQ_EIO;
    memcpy(vq_tensor_data(k->out[0]), vq_tensor_data(k->in[0]), vq_tensor_nbytes(k->in[0]));
    return 0;
}

/* t_async(X) -> Out = X + 1 (f32), computed by a thread of its own after
 * the kernel returned; with wait, only once t_flag has run (or after 5 s,
 * as a failure: then a worker was held while the kernel was out); with
 * fail, it finishes with an error. */
static atomic_int flag;

struct job {
    const vq_op_kernel_call *k;
    vq_op_done *done;
};

static void *finisher(void *arg)
{
    struct job *j = arg;
    int64_t mode = *(const int64_t *)j->k->params;
    int err = 0;
    for (int waited = 0; (mode & 1) && !atomic_load(&flag); waited++) {
        if (waited == 5000) {
            err = vq_error_set(VQ_EIO, "t_flag never ran: a worker was held");
            break;
        }
        usleep(1000);
    }
    if (mode & 2) {
        err = vq_error_set(VQ_EIO, "the finisher says no");
    } else if (!err) {
        const float *x = vq_tensor_data(j->k->in[0]);
        float *y = vq_tensor_data(j->k->out[0]);
        for (int64_t i = 0; i < vq_tensor_numel(j->k->in[0]); i++)
            y[i] = x[i] + 1;
    }
    vq_op_done *done = j->done;
    free(j);
    vq_op_done_finish(done, err);
    return NULL;
}

static int async_infer(const vq_op_infer_call *c)
{
    if (c->in[0].dtype != VQ_F32)
        return vq_error_set(VQ_EINVAL, "input X: f32 only");
    c->out[0] = c->in[0];
    *(int64_t *)c->params = attr_int(c, "wait", 0) | attr_int(c, "fail", 0) << 1;
    return 0;
}

static void async_start(const vq_op_kernel_call *k, vq_op_done *done)
{
    struct job *j = malloc(sizeof *j);
    cr_assert_not_null(j);
    *j = (struct job){k, done};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, finisher, j), 0);
    pthread_detach(t);
}

static int flag_infer(const vq_op_infer_call *c)
{
    c->out[0] = c->in[0];
    return 0;
}

static int flag_cpu(const vq_op_kernel_call *k)
{
    memcpy(vq_tensor_data(k->out[0]), vq_tensor_data(k->in[0]), vq_tensor_nbytes(k->in[0]));
    atomic_store(&flag, 1);
    return 0;
}

/* t_bias(X, Bias?) -> Out = X + Bias[0] (0 without Bias), f64. */
static int bias_infer(const vq_op_infer_call *c)
{
    if (c->nin == 2 && c->in[1].ndim != 1)
        return vq_error_set(VQ_EINVAL, "input Bias: rank %d, expected 1", c->in[1].ndim);
    c->out[0] = c->in[0];
    return 0;
}

static int bias_cpu(const vq_op_kernel_call *k)
{
    double b = k->nin == 2 ? ((const double *)vq_tensor_data(k->in[1]))[0] : 0;
    const double *x = vq_tensor_data(k->in[0]);
    double *y = vq_tensor_data(k->out[0]);
    for (int64_t i = 0; i < vq_tensor_numel(k->in[0]); i++)
        y[i] = x[i] + b;
    return 0;
}

static int gpu_only(const vq_op_kernel_call *k)
{
    (void)k;
    return 0;
}

static const vq_op_attr_spec ALPHA[] = {{"alpha", VQ_ATTR_FLOAT, false, "2"}};
static const vq_op_attr_spec MODE[] = {{"mode", VQ_ATTR_INT, false, "0"}};
static const vq_op_attr_spec ASYNC_ATTRS[] = {{"wait", VQ_ATTR_BOOL, false, "0"},
                                              {"fail", VQ_ATTR_BOOL, false, "0"}};

static void register_ops(void)
{
    const vq_op_def defs[] = {
        {.name = "t_scale", .inputs = X, .ninputs = 1, .outputs = OUT, .noutputs = 1,
         .flags = VQ_OP_INPLACE_OK, .attrs = ALPHA, .nattrs = 1,
         .params_size = sizeof(struct alpha), .infer = scale_infer, .cpu = scale_cpu,
         .grad = scale_grad},
        {.name = "t_fail", .inputs = X, .ninputs = 1, .outputs = OUT, .noutputs = 1,
         .attrs = MODE, .nattrs = 1, .params_size = sizeof(int64_t), .infer = fail_infer,
         .cpu = fail_cpu},
        {.name = "t_async", .inputs = X, .ninputs = 1, .outputs = OUT, .noutputs = 1,
         .attrs = ASYNC_ATTRS, .nattrs = 2, .params_size = sizeof(int64_t),
         .infer = async_infer, .cpu_async = async_start},
        {.name = "t_flag", .inputs = X, .ninputs = 1, .outputs = OUT, .noutputs = 1,
         .infer = flag_infer, .cpu = flag_cpu},
        {.name = "t_bias", .inputs = XB, .ninputs = 2, .outputs = OUT, .noutputs = 1,
         .flags = VQ_OP_OPTIONAL_IN, .infer = bias_infer, .cpu = bias_cpu},
        {.name = "t_gpu_only", .inputs = X, .ninputs = 1, .outputs = OUT, .noutputs = 1,
         .infer = flag_infer, .gpu = gpu_only},
    };
    for (size_t i = 0; i < sizeof defs / sizeof defs[0]; i++)
        cr_assert_eq(vq_op_register(&defs[i]), 0, "%s: %s", defs[i].name, vq_errmsg());
}

static void setup(void)
{
    setenv("VARQ_GPU_BACKEND", "emulated", 1);
    atomic_store(&flag, 0);
    register_ops();
}

TestSuite(op_register, .init = setup, .fini = leak_check);

static vq_engine *engine(int workers)
{
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = workers, .gpu_streams = 1};
    vq_engine *e = NULL;
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    return e;
}

static vq_tensor *vec(vq_dtype dt, int n, double first)
{
    double v[16];
    for (int i = 0; i < n; i++)
        v[i] = first + i;
    return oc_from(dt, 1, (int64_t[]){n}, v);
}

/* ---- registration ---- */

Test(op_register, registered_ops_are_listed_in_order_with_their_signatures)
{
    cr_assert_str_eq(vq_op_signature("t_scale"), "t_scale(X) -> Out; alpha:float=2");
    cr_assert_str_eq(vq_op_signature("t_bias"), "t_bias(X, Bias?) -> Out");
    cr_assert_str_eq(vq_op_signature("t_async"),
                     "t_async(X) -> Out; wait:bool=false fail:bool=false");
    int n = vq_op_count();
    bool seen = false;
    for (int i = 1; i < n; i++) {
        cr_assert_lt(strcmp(vq_op_name(i - 1), vq_op_name(i)), 0, "%s before %s",
                     vq_op_name(i - 1), vq_op_name(i));
        seen |= !strcmp(vq_op_name(i), "t_scale");
    }
    cr_assert(seen);
    /* one more op: one more entry, and the built-ins are still there */
    cr_assert_eq(vq_op_register(&(vq_op_def){.name = "t_more", .inputs = X, .ninputs = 1,
                                             .outputs = OUT, .noutputs = 1,
                                             .infer = flag_infer, .cpu = flag_cpu}),
                 0);
    cr_assert_eq(vq_op_count(), n + 1);
    cr_assert_not_null(vq_op_signature("matmul"));
    cr_assert_not_null(vq_op_signature("t_more"));
}

static void refused(const vq_op_def *d, const char *words)
{
    cr_assert_eq(vq_op_register(d), VQ_EINVAL, "%s registered", d ? d->name : "NULL");
    cr_assert(strstr(vq_errmsg(), words), "\"%s\" does not say \"%s\"", vq_errmsg(), words);
}

Test(op_register, bad_definitions_and_taken_names_are_refused_with_a_reason)
{
    vq_op_def ok = {.name = "t_new", .inputs = X, .ninputs = 1, .outputs = OUT, .noutputs = 1,
                    .infer = flag_infer, .cpu = flag_cpu};
    vq_op_def d;
    int before = vq_op_count();
    refused(NULL, "def is NULL");
    d = ok, d.name = "add";
    refused(&d, "already registered");
    d = ok, d.name = "t_scale";
    refused(&d, "already registered");
    d = ok, d.name = "";
    refused(&d, "bad op name");
    d = ok, d.name = "has space";
    refused(&d, "bad op name");
    d = ok, d.infer = NULL;
    refused(&d, "no infer");
    d = ok, d.cpu = NULL;
    refused(&d, "no kernel");
    d = ok, d.noutputs = 0;
    refused(&d, "at least one output");
    d = ok, d.inputs = (const char *const[]){"X", "X"}, d.ninputs = 2;
    refused(&d, "named twice");
    d = ok, d.flags = VQ_OP_VARIADIC_IN | VQ_OP_OPTIONAL_IN;
    refused(&d, "not both");
    d = ok, d.flags = 1u << 9;
    refused(&d, "unknown flags");
    d = ok, d.params_size = VQ_OP_MAX_PARAMS + 1;
    refused(&d, "params_size");
    d = ok, d.attrs = (const vq_op_attr_spec[]){{"a", VQ_ATTR_INT, false, "0"},
                                                {"a", VQ_ATTR_FLOAT, false, "0"}};
    d.nattrs = 2;
    refused(&d, "attribute a is named twice");
    d = ok, d.attrs = (const vq_op_attr_spec[]){{"a", (vq_attr_type)99, false, "0"}};
    d.nattrs = 1;
    refused(&d, "no vq_attr_type");
    cr_assert_eq(vq_op_count(), before, "a refused op was registered");
    cr_assert_eq(vq_op_register(&ok), 0, "%s", vq_errmsg());
}

struct lookups {
    atomic_int stop;
    atomic_long calls;
};

static void *run_while_registering(void *arg)
{
    struct lookups *l = arg;
    vq_tensor *x = vec(VQ_F64, 4, 1);
    while (!atomic_load(&l->stop)) {
        vq_tensor *y = NULL;
        cr_assert_eq(vq_op_run(NULL, "t_scale", &x, 1, &y, 1, NULL, 0), 0, "%s", vq_errmsg());
        cr_assert_eq(oc_get(y, 3), 8.0);
        vq_tensor_release(y);
        cr_assert_not_null(vq_op_signature("matmul"));
        atomic_fetch_add(&l->calls, 1);
    }
    vq_tensor_release(x);
    return NULL;
}

Test(op_register, registering_while_other_threads_run_ops_loses_nothing)
{
    struct lookups l = {0};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, run_while_registering, &l), 0);
    int before = vq_op_count();
    while (atomic_load(&l.calls) == 0) /* the lookups run before and during */
        sched_yield();
    char name[32];
    for (int i = 0; i < 200; i++) {
        snprintf(name, sizeof name, "t_many_%03d", i);
        cr_assert_eq(vq_op_register(&(vq_op_def){.name = name, .inputs = X, .ninputs = 1,
                                                 .outputs = OUT, .noutputs = 1,
                                                 .infer = flag_infer, .cpu = flag_cpu}),
                     0, "%s", vq_errmsg());
    }
    atomic_store(&l.stop, 1);
    pthread_join(t, NULL);
    cr_assert_eq(vq_op_count(), before + 200);
    for (int i = 0; i < 200; i++) {
        snprintf(name, sizeof name, "t_many_%03d", i);
        char want[64];
        snprintf(want, sizeof want, "%s(X) -> Out", name);
        cr_assert_str_eq(vq_op_signature(name), want);
    }
}

/* ---- imperative calls ---- */

Test(op_register, a_registered_op_runs_with_and_without_an_engine)
{
    vq_tensor *x = vec(VQ_F32, 5, -2);
    vq_tensor *y = NULL, *z = NULL;
    vq_attr a = VQ_ATTR_F("alpha", -0.5);
    cr_assert_eq(vq_op_run(NULL, "t_scale", &x, 1, &y, 1, &a, 1), 0, "%s", vq_errmsg());
    vq_engine *e = engine(2);
    cr_assert_eq(vq_op_run(e, "t_scale", &x, 1, &z, 1, NULL, 0), 0, "%s", vq_errmsg());
    /* in place, as the flag allows */
    cr_assert_eq(vq_op_run(e, "t_scale", &z, 1, &z, 1, NULL, 0), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(z), 0);
    for (int i = 0; i < 5; i++) {
        cr_assert_float_eq(oc_get(y, i), -0.5 * (i - 2), 1e-7);
        cr_assert_float_eq(oc_get(z, i), 4.0 * (i - 2), 1e-7);
    }
    vq_tensor_release(x);
    vq_tensor_release(y);
    vq_tensor_release(z);
    vq_engine_free(e);
}

Test(op_register, an_optional_input_may_be_left_out)
{
    vq_tensor *x = vec(VQ_F64, 3, 1), *b = vec(VQ_F64, 1, 10);
    vq_tensor *in[2] = {x, b};
    vq_tensor *y1 = oc_run1("t_bias", in, 2, NULL, 0), *y0 = oc_run1("t_bias", in, 1, NULL, 0);
    cr_assert_eq(oc_get(y1, 2), 13.0);
    cr_assert_eq(oc_get(y0, 2), 3.0);
    cr_assert_eq(oc_try("t_bias", in, 0, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "t_bias: takes 1 or 2 inputs, got 0"), "%s", vq_errmsg());
    vq_tensor *three[3] = {x, b, b};
    cr_assert_eq(oc_try("t_bias", three, 3, 1, NULL, 0), VQ_EINVAL);
    vq_tensor_release(x);
    vq_tensor_release(b);
    vq_tensor_release(y0);
    vq_tensor_release(y1);
}

Test(op_register, failing_callbacks_give_errors_that_name_the_op)
{
    vq_tensor *x = vec(VQ_F32, 2, 0), *i32 = oc_from(VQ_I32, 1, (int64_t[]){1}, (double[]){1});
    vq_attr m1 = VQ_ATTR_I("mode", 1), m2 = VQ_ATTR_I("mode", 2), m3 = VQ_ATTR_I("mode", 3);
    cr_assert_eq(oc_try("t_fail", &x, 1, 1, &m1, 1), VQ_EINVAL);
    cr_assert_str_eq(vq_errmsg(), "t_fail: attribute mode: 1 is refused here");
    cr_assert_eq(oc_try("t_scale", &i32, 1, 1, NULL, 0), VQ_EINVAL);
    cr_assert_str_eq(vq_errmsg(), "t_scale: input X: not a float tensor");
    vq_attr bad = VQ_ATTR_S("alpha", "two");
    cr_assert_eq(oc_try("t_scale", &x, 1, 1, &bad, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "t_scale") && strstr(vq_errmsg(), "alpha"), "%s",
              vq_errmsg());
    vq_attr unknown = VQ_ATTR_I("beta", 1);
    cr_assert_eq(oc_try("t_scale", &x, 1, 1, &unknown, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "beta"), "%s", vq_errmsg());
    /* kernel failures: returned without an engine, on the outputs with one */
    cr_assert_eq(oc_try("t_fail", &x, 1, 1, &m2, 1), VQ_EIO);
    cr_assert_str_eq(vq_errmsg(), "t_fail: the kernel says no");
    cr_assert_eq(oc_try("t_fail", &x, 1, 1, &m3, 1), VQ_EIO);
    cr_assert(strstr(vq_errmsg(), "t_fail: CPU kernel failed"), "%s", vq_errmsg());
    vq_engine *e = engine(2);
    vq_tensor *y = NULL;
    cr_assert_eq(vq_op_run(e, "t_fail", &x, 1, &y, 1, &m2, 1), 0);
    cr_assert_eq(vq_tensor_wait(y), VQ_EIO);
    cr_assert(strstr(vq_errmsg(), "t_fail: the kernel says no"), "%s", vq_errmsg());
    /* an op with only a GPU kernel cannot run on the CPU */
    cr_assert_eq(oc_try("t_gpu_only", &x, 1, 1, NULL, 0), VQ_ENOSYS);
    cr_assert(strstr(vq_errmsg(), "t_gpu_only"), "%s", vq_errmsg());
    vq_tensor_release(y);
    vq_tensor_release(x);
    vq_tensor_release(i32);
    vq_engine_free(e);
}

/* ---- async kernels ---- */

Test(op_register, an_async_kernel_out_does_not_hold_the_only_worker)
{
    vq_engine *e = engine(1);
    vq_tensor *a = vec(VQ_F32, 4, 1), *c = vec(VQ_F32, 4, 5);
    vq_tensor *b = NULL, *d = NULL;
    vq_attr wait = VQ_ATTR_B("wait", true);
    /* t_async finishes only after t_flag, pushed after it, has run on the
     * engine's single worker */
    cr_assert_eq(vq_op_run(e, "t_async", &a, 1, &b, 1, &wait, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_op_run(e, "t_flag", &c, 1, &d, 1, NULL, 0), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(b), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_wait_all(e), 0);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(oc_get(b, i), i + 2.0);
    /* a reader of the async op's output waits for its finish */
    vq_tensor *b2 = NULL;
    cr_assert_eq(vq_op_run(e, "t_async", &a, 1, &b2, 1, NULL, 0), 0);
    vq_tensor *b3 = NULL;
    cr_assert_eq(vq_op_run(e, "t_scale", &b2, 1, &b3, 1, NULL, 0), 0);
    cr_assert_eq(vq_tensor_wait(b3), 0);
    cr_assert_eq(oc_get(b3, 3), 10.0);
    vq_tensor *arr[] = {a, b, c, d, b2, b3};
    for (int i = 0; i < 6; i++)
        vq_tensor_release(arr[i]);
    vq_engine_free(e);
}

Test(op_register, an_async_kernel_without_an_engine_is_waited_for)
{
    vq_tensor *a = vec(VQ_F32, 3, 0);
    vq_tensor *b = oc_run1("t_async", &a, 1, NULL, 0);
    cr_assert_eq(oc_get(b, 2), 3.0);
    vq_attr fail = VQ_ATTR_B("fail", true);
    cr_assert_eq(oc_try("t_async", &a, 1, 1, &fail, 1), VQ_EIO);
    cr_assert_str_eq(vq_errmsg(), "t_async: the finisher says no");
    vq_tensor_release(a);
    vq_tensor_release(b);
}

Test(op_register, an_async_failure_reaches_the_outputs_with_its_message)
{
    vq_engine *e = engine(2);
    vq_tensor *a = vec(VQ_F32, 3, 0), *b = NULL;
    vq_attr fail = VQ_ATTR_B("fail", true);
    cr_assert_eq(vq_op_run(e, "t_async", &a, 1, &b, 1, &fail, 1), 0);
    cr_assert_eq(vq_tensor_wait(b), VQ_EIO);
    cr_assert(strstr(vq_errmsg(), "t_async: the finisher says no"), "%s", vq_errmsg());
    vq_tensor_release(a);
    vq_tensor_release(b);
    vq_engine_free(e);
}

/* ---- programs ---- */

/* x (fed, f32 [n]) -> t_async -> t_scale -> y; c (fed) -> t_flag -> d. */
static vq_program *async_program(bool fail)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    const char *names[] = {"x", "ax", "y", "c", "d"};
    for (int i = 0; i < 5; i++)
        cr_assert_eq(vq_program_add_var(p, 0, names[i], VQ_F32, 1, (int64_t[]){-1}, false), 0);
    vq_attr attrs[2] = {VQ_ATTR_B("wait", true), VQ_ATTR_B("fail", fail)};
    cr_assert_geq(vq_program_add_op(p, 0, "t_async", (const char *const[]){"x"}, 1,
                                   (const char *const[]){"ax"}, 1, attrs, 2),
                 0, "%s", vq_errmsg());
    cr_assert_geq(vq_program_add_op(p, 0, "t_scale", (const char *const[]){"ax"}, 1,
                                   (const char *const[]){"y"}, 1, NULL, 0),
                 0, "%s", vq_errmsg());
    cr_assert_geq(vq_program_add_op(p, 0, "t_flag", (const char *const[]){"c"}, 1,
                                   (const char *const[]){"d"}, 1, NULL, 0),
                 0);
    return p;
}

Test(op_register, programs_run_async_ops_on_one_worker_and_fail_naming_them)
{
    vq_engine *e = engine(1);
    vq_exec *ex;
    vq_scope *s;
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    cr_assert_eq(vq_scope_new(&s), 0);
    vq_tensor *x = vec(VQ_F32, 4, 1), *c = vec(VQ_F32, 4, 0);
    vq_feed feeds[2] = {{"x", x}, {"c", c}};
    for (int round = 0; round < 3; round++) {
        atomic_store(&flag, 0);
        vq_program *p = async_program(false);
        vq_fetch f[2] = {{"y", NULL}, {"d", NULL}};
        cr_assert_eq(vq_exec_run(ex, p, s, feeds, 2, f, 2), 0, "%s", vq_errmsg());
        for (int i = 0; i < 4; i++)
            cr_assert_eq(oc_get(f[0].tensor, i), 2.0 * (i + 2));
        vq_tensor_release(f[0].tensor);
        vq_tensor_release(f[1].tensor);
        vq_program_free(p);
    }
    vq_program *bad = async_program(true);
    vq_fetch f = {"y", NULL};
    cr_assert_eq(vq_exec_run(ex, bad, s, feeds, 2, &f, 1), VQ_EIO);
    cr_assert(strstr(vq_errmsg(), "t_async") && strstr(vq_errmsg(), "the finisher says no"),
              "%s", vq_errmsg());
    vq_program_free(bad);
    vq_tensor_release(x);
    vq_tensor_release(c);
    vq_scope_free(s);
    vq_exec_free(ex);
    vq_engine_free(e);
}

/* x (fed, f64 [2,3]) -> t_scale(alpha) -> t_bias(, b) -> y; w persistable. */
static vq_program *scale_program(double alpha)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t sh[2] = {2, 3};
    cr_assert_eq(vq_program_add_var(p, 0, "x", VQ_F64, 2, sh, false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "h", VQ_F64, 2, sh, false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "y", VQ_F64, 2, sh, false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "b", VQ_F64, 1, (int64_t[]){1}, true), 0);
    vq_attr a = VQ_ATTR_F("alpha", alpha);
    cr_assert_geq(vq_program_add_op(p, 0, "t_scale", (const char *const[]){"x"}, 1,
                                   (const char *const[]){"h"}, 1, &a, 1),
                 0);
    cr_assert_geq(vq_program_add_op(p, 0, "t_bias", (const char *const[]){"h", "b"}, 2,
                                   (const char *const[]){"y"}, 1, NULL, 0),
                 0, "%s", vq_errmsg());
    return p;
}

static void run_scale_program(vq_exec *ex, vq_program *p, double want_first)
{
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    vq_tensor *b = vec(VQ_F64, 1, 0.5);
    cr_assert_eq(vq_scope_set(s, "b", b), 0);
    double xs[6] = {1, 2, 3, 4, 5, 6};
    vq_tensor *x = oc_from(VQ_F64, 2, (int64_t[]){2, 3}, xs);
    vq_feed feed = {"x", x};
    vq_fetch f = {"y", NULL};
    cr_assert_eq(vq_exec_run(ex, p, s, &feed, 1, &f, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_device(f.tensor).kind, VQ_DEV_CPU);
    cr_assert_float_eq(oc_get(f.tensor, 0), want_first, 1e-12);
    cr_assert_float_eq(oc_get(f.tensor, 5), 6 * (want_first - 0.5) + 0.5, 1e-12);
    vq_tensor_release(f.tensor);
    vq_tensor_release(x);
    vq_tensor_release(b);
    vq_scope_free(s);
}

Test(op_register, programs_with_registered_ops_encode_decode_and_run_on_cpu_and_gpu)
{
    vq_program *p = scale_program(3), *q;
    void *buf;
    size_t len;
    cr_assert_eq(vq_program_encode(p, &buf, &len), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_program_decode(&q, buf, len), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_program_hash(p), vq_program_hash(q));
    vq_engine *e = engine(2);
    vq_exec *cpu, *gpu;
    cr_assert_eq(vq_exec_new(&cpu, e, NULL), 0);
    vq_exec_opts go = {.device = {VQ_DEV_GPU, 0}, .flags = VQ_EXEC_FETCH_HOST};
    cr_assert_eq(vq_exec_new(&gpu, e, &go), 0, "%s", vq_errmsg());
    run_scale_program(cpu, q, 3.5);
    run_scale_program(gpu, q, 3.5);
    /* the program without the optional Bias: encoded without the slot */
    vq_program_free(q);
    free(buf);
    vq_exec_free(cpu);
    vq_exec_free(gpu);
    vq_program_free(p);
    vq_engine_free(e);
}

Test(op_register, a_program_naming_an_unregistered_op_fails_to_prepare_naming_it)
{
    vq_program *p = scale_program(3), *q;
    void *buf;
    size_t len;
    cr_assert_eq(vq_program_encode(p, &buf, &len), 0);
    /* the same program, with an op type that nobody registered */
    char *at = memmem(buf, len, "t_scale", 7);
    cr_assert_not_null(at);
    memcpy(at, "t_ghost", 7);
    cr_assert_eq(vq_program_decode(&q, buf, len), 0, "%s", vq_errmsg());
    vq_engine *e = engine(1);
    vq_exec *ex;
    vq_scope *s;
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    cr_assert_eq(vq_scope_new(&s), 0);
    cr_assert_eq(vq_exec_prepare(ex, q, s, (const char *const[]){"x"}, 1,
                                 (const char *const[]){"y"}, 1),
                 VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "t_ghost"), "%s", vq_errmsg());
    vq_scope_free(s);
    vq_exec_free(ex);
    vq_program_free(q);
    vq_program_free(p);
    free(buf);
    vq_engine_free(e);
}

Test(op_register, the_gradient_maker_emits_ops_that_match_finite_differences)
{
    uint64_t rng = oc_seed("op_register");
    vq_tensor *x = oc_rand(&rng, VQ_F64, 2, (int64_t[]){3, 4}, -1, 1);
    vq_attr a = VQ_ATTR_F("alpha", -1.25);
    double err = oc_grad_check("t_scale", &x, 1, 1, &a, 1, 1u, &rng);
    cr_assert_lt(err, 1e-7, "gradient error %g", err);
    vq_tensor_release(x);
}

Test(op_register, autodiff_goes_through_registered_ops_and_not_through_ops_without_gradient)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "w", VQ_F32, 1, (int64_t[]){4}, true), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "h", VQ_F32, 1, (int64_t[]){4}, false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "loss", VQ_F32, 0, NULL, false), 0);
    vq_attr a = VQ_ATTR_F("alpha", 3);
    cr_assert_geq(vq_program_add_op(p, 0, "t_scale", (const char *const[]){"w"}, 1,
                                   (const char *const[]){"h"}, 1, &a, 1),
                 0);
    cr_assert_geq(vq_program_add_op(p, 0, "sum", (const char *const[]){"h"}, 1,
                                   (const char *const[]){"loss"}, 1, NULL, 0),
                 0, "%s", vq_errmsg());
    vq_program *q;
    cr_assert_eq(vq_program_clone(p, &q), 0);
    cr_assert_eq(vq_append_backward(p, "loss", NULL, 0), 1, "%s", vq_errmsg());
    vq_engine *e = engine(2);
    vq_exec *ex;
    vq_scope *s;
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    cr_assert_eq(vq_scope_new(&s), 0);
    vq_tensor *w = vec(VQ_F32, 4, 1);
    cr_assert_eq(vq_scope_set(s, "w", w), 0);
    vq_fetch f = {"w@GRAD", NULL};
    cr_assert_eq(vq_exec_run(ex, p, s, NULL, 0, &f, 1), 0, "%s", vq_errmsg());
    for (int i = 0; i < 4; i++)
        cr_assert_float_eq(oc_get(f.tensor, i), 3.0, 1e-6); /* d sum(3 w) / dw */
    vq_tensor_release(f.tensor);
    /* an op registered without a gradient maker is a constant to autodiff,
     * as argmax is: nothing flows back through it */
    cr_assert_eq(vq_program_add_var(q, 0, "h2", VQ_F32, 1, (int64_t[]){4}, false), 0);
    cr_assert_eq(vq_program_add_var(q, 0, "loss2", VQ_F32, 0, NULL, false), 0);
    cr_assert_geq(vq_program_add_op(q, 0, "t_flag", (const char *const[]){"h"}, 1,
                                   (const char *const[]){"h2"}, 1, NULL, 0),
                 0);
    cr_assert_geq(vq_program_add_op(q, 0, "sum", (const char *const[]){"h2"}, 1,
                                   (const char *const[]){"loss2"}, 1, NULL, 0),
                 0);
    cr_assert_eq(vq_append_backward(q, "loss2", NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "does not depend on any parameter"), "%s", vq_errmsg());
    vq_tensor_release(w);
    vq_scope_free(s);
    vq_exec_free(ex);
    vq_program_free(p);
    vq_program_free(q);
    vq_engine_free(e);
}

/* A maker that keeps its context: the pointer it got and a copy. */
static const vq_op_grad_call *kept_ptr;
static vq_op_grad_call kept_copy;
static int kept_calls, kept_copy_rc;

static int keeping_grad(const vq_op_grad_call *g)
{
    if (kept_calls++ > 0) /* a copy kept from the first call is not this call's context */
        kept_copy_rc = vq_op_grad_emit(&kept_copy, "t_scale", &g->dout[0], 1, &g->din[0], 1,
                                       g->attrs, g->nattrs);
    kept_ptr = g;
    kept_copy = *g;
    return vq_op_grad_emit(g, "t_scale", &g->dout[0], 1, &g->din[0], 1, g->attrs, g->nattrs);
}

/* Overwrites the stack below the caller's frame, where the kept contexts
 * and varq's own record of the maker call were. */
static __attribute__((noinline)) void clobber_stack(void)
{
    volatile unsigned char junk[1 << 16];
    for (size_t i = 0; i < sizeof junk; i++) /* volatile: not a dead store */
        junk[i] = 0xa5;
}

/* op(w) -> h; sum(h) -> loss (w f64[4]), with alpha = 3 if op takes it. */
static vq_program *scaled_sum(const char *op, bool alpha)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "w", VQ_F64, 1, (int64_t[]){4}, true), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "h", VQ_F64, 1, (int64_t[]){4}, false), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "loss", VQ_F64, 0, NULL, false), 0);
    vq_attr a = VQ_ATTR_F("alpha", 3);
    cr_assert_geq(vq_program_add_op(p, 0, op, (const char *const[]){"w"}, 1,
                                    (const char *const[]){"h"}, 1, &a, alpha),
                  0, "%s", vq_errmsg());
    cr_assert_geq(vq_program_add_op(p, 0, "sum", (const char *const[]){"h"}, 1,
                                    (const char *const[]){"loss"}, 1, NULL, 0),
                  0, "%s", vq_errmsg());
    return p;
}

Test(op_register, a_gradient_context_kept_past_its_maker_call_is_refused)
{
    cr_assert_eq(vq_op_register(&(vq_op_def){.name = "t_keep",
                                             .inputs = X,
                                             .ninputs = 1,
                                             .outputs = OUT,
                                             .noutputs = 1,
                                             .attrs = ALPHA,
                                             .nattrs = 1,
                                             .params_size = sizeof(struct alpha),
                                             .infer = scale_infer,
                                             .cpu = scale_cpu,
                                             .grad = keeping_grad}),
                 0, "%s", vq_errmsg());
    vq_program *p = scaled_sum("t_keep", true);
    cr_assert_eq(vq_append_backward(p, "loss", NULL, 0), 1, "%s", vq_errmsg());
    clobber_stack();
    const char *names[] = {"h", "w"};
    cr_assert_eq(vq_op_grad_emit(kept_ptr, "t_scale", names, 1, names + 1, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "gradient maker"), "%s", vq_errmsg());
    cr_assert_eq(vq_op_grad_emit(&kept_copy, "t_scale", names, 1, names + 1, 1, NULL, 0),
                 VQ_EINVAL);
    cr_assert_null(vq_op_grad_temp(kept_ptr));
    cr_assert_null(vq_op_grad_temp(&kept_copy));
    cr_assert(strstr(vq_errmsg(), "vq_op_grad_temp"), "%s", vq_errmsg());
    /* inside a later maker call, the earlier call's copy is refused too */
    vq_program *q = scaled_sum("t_keep", true);
    cr_assert_eq(vq_append_backward(q, "loss", NULL, 0), 1, "%s", vq_errmsg());
    cr_assert_eq(kept_calls, 2);
    cr_assert_eq(kept_copy_rc, VQ_EINVAL);
    vq_program_free(p);
    vq_program_free(q);
}

/* t_cube(X) -> Out = X^3 (f64); its maker builds 3 X^2 dOut from two
 * temporaries: t0 = X * X, t1 = t0 * dOut, dX = 3 t1. */
static int cube_infer(const vq_op_infer_call *c)
{
    if (c->in[0].dtype != VQ_F64)
        return vq_error_set(VQ_EINVAL, "input X: f64 only");
    c->out[0] = c->in[0];
    return 0;
}

static int cube_cpu(const vq_op_kernel_call *k)
{
    const double *x = vq_tensor_data(k->in[0]);
    double *y = vq_tensor_data(k->out[0]);
    for (int64_t i = 0; i < vq_tensor_numel(k->in[0]); i++)
        y[i] = x[i] * x[i] * x[i];
    return 0;
}

static int cube_grad(const vq_op_grad_call *g)
{
    if (!g->din[0] || !g->dout[0])
        return 0;
    const char *t0 = vq_op_grad_temp(g), *t1 = vq_op_grad_temp(g);
    if (!t0 || !t1)
        return VQ_ENOMEM;
    vq_attr three = VQ_ATTR_F("scale", 3);
    int rc =
        vq_op_grad_emit(g, "mul", (const char *const[]){g->in[0], g->in[0]}, 2, &t0, 1, NULL, 0);
    if (rc == 0)
        rc = vq_op_grad_emit(g, "mul", (const char *const[]){t0, g->dout[0]}, 2, &t1, 1, NULL, 0);
    if (rc == 0)
        rc = vq_op_grad_emit(g, "scale", &t1, 1, &g->din[0], 1, &three, 1);
    return rc;
}

static double run_loss(vq_exec *ex, vq_program *p, vq_scope *s, const char *fetch, int64_t i)
{
    vq_fetch f = {fetch, NULL};
    cr_assert_eq(vq_exec_run(ex, p, s, NULL, 0, &f, 1), 0, "%s", vq_errmsg());
    double v = oc_get(f.tensor, i);
    vq_tensor_release(f.tensor);
    return v;
}

Test(op_register, a_gradient_maker_builds_its_gradient_from_temporaries)
{
    cr_assert_eq(vq_op_register(&(vq_op_def){.name = "t_cube",
                                             .inputs = X,
                                             .ninputs = 1,
                                             .outputs = OUT,
                                             .noutputs = 1,
                                             .infer = cube_infer,
                                             .cpu = cube_cpu,
                                             .grad = cube_grad}),
                 0, "%s", vq_errmsg());
    vq_program *p = scaled_sum("t_cube", false), *fwd;
    cr_assert_eq(vq_program_clone(p, &fwd), 0);
    cr_assert_eq(vq_append_backward(p, "loss", NULL, 0), 1, "%s", vq_errmsg());
    /* the temporaries are vars of their own, with the inferred dtype and
     * shape */
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_eq(vq_program_dump(p, f), 0, "%s", vq_errmsg());
    fclose(f);
    cr_assert(strstr(text, "var @TEMP@0 : f64[4]\n"), "%s", text);
    cr_assert(strstr(text, "var @TEMP@1 : f64[4]\n"), "%s", text);
    free(text);

    vq_engine *e = engine(2);
    vq_exec *ex;
    vq_scope *s;
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    cr_assert_eq(vq_scope_new(&s), 0);
    double w0[4] = {-1.5, -0.25, 0.5, 2};
    vq_tensor *w = oc_from(VQ_F64, 1, (int64_t[]){4}, w0);
    cr_assert_eq(vq_scope_set(s, "w", w), 0);
    const double h = 1e-5;
    for (int64_t i = 0; i < 4; i++) {
        double analytic = run_loss(ex, p, s, "w@GRAD", i);
        oc_set(w, i, w0[i] + h);
        double up = run_loss(ex, fwd, s, "loss", 0);
        oc_set(w, i, w0[i] - h);
        double down = run_loss(ex, fwd, s, "loss", 0);
        oc_set(w, i, w0[i]);
        double numeric = (up - down) / (2 * h);
        cr_assert_float_eq(analytic, numeric, 1e-6 * fmax(1, fabs(numeric)),
                           "w[%lld]: analytic %.12g, numeric %.12g", (long long)i, analytic,
                           numeric);
        cr_assert_float_eq(analytic, 3 * w0[i] * w0[i], 1e-12);
    }
    vq_tensor_release(w);
    vq_scope_free(s);
    vq_exec_free(ex);
    vq_program_free(p);
    vq_program_free(fwd);
    vq_engine_free(e);
}

/* t_clobber: t_scale's forward, and a maker that also writes what
 * clobber_target names: 0 the forward input, 1 the forward output, 2 the
 * gradient flowing in. */
static int clobber_target;

static int clobber_grad(const vq_op_grad_call *g)
{
    int rc = vq_op_grad_emit(g, "t_scale", &g->dout[0], 1, &g->din[0], 1, g->attrs, g->nattrs);
    const char *targets[] = {g->in[0], g->out[0], g->dout[0]};
    const char *victim = targets[clobber_target];
    if (rc == 0)
        rc = vq_op_grad_emit(g, "t_scale", &g->dout[0], 1, &victim, 1, NULL, 0);
    return rc;
}

Test(op_register, a_gradient_maker_that_writes_forward_vars_is_refused_naming_it)
{
    cr_assert_eq(vq_op_register(&(vq_op_def){.name = "t_clobber",
                                             .inputs = X,
                                             .ninputs = 1,
                                             .outputs = OUT,
                                             .noutputs = 1,
                                             .attrs = ALPHA,
                                             .nattrs = 1,
                                             .params_size = sizeof(struct alpha),
                                             .infer = scale_infer,
                                             .cpu = scale_cpu,
                                             .grad = clobber_grad}),
                 0, "%s", vq_errmsg());
    const char *names[] = {"var w,", "var h,", "var h@GRAD,"};
    for (clobber_target = 0; clobber_target < 3; clobber_target++) {
        vq_program *p = scaled_sum("t_clobber", true);
        cr_assert_eq(vq_append_backward(p, "loss", NULL, 0), VQ_EINVAL, "target %d accepted",
                     clobber_target);
        cr_assert(strstr(vq_errmsg(), "gradient maker of t_clobber writes"), "%s", vq_errmsg());
        cr_assert(strstr(vq_errmsg(), names[clobber_target]), "%s", vq_errmsg());
        vq_program_free(p);
    }
}

Test(op_register, registered_ops_run_on_gpu_tensors_and_gpu_only_kernels_are_checked)
{
    vq_engine *e = engine(1);
    vq_tensor *x = vec(VQ_F32, 4, 1), *gx = NULL, *gy = NULL, *back = NULL;
    cr_assert_eq(vq_tensor_copy_to(e, x, (vq_ctx){VQ_DEV_GPU, 0}, &gx), 0, "%s", vq_errmsg());
    vq_attr a = VQ_ATTR_F("alpha", 0.5);
    cr_assert_eq(vq_op_run(e, "t_scale", &gx, 1, &gy, 1, &a, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_device(gy).kind, VQ_DEV_GPU);
    cr_assert_eq(vq_tensor_copy_to(e, gy, (vq_ctx){VQ_DEV_CPU, 0}, &back), 0);
    cr_assert_eq(vq_tensor_wait(back), 0, "%s", vq_errmsg());
    for (int i = 0; i < 4; i++)
        cr_assert_eq(oc_get(back, i), 0.5 * (i + 1));
    /* the emulated backend runs CPU kernels: an async-only or GPU-only op
     * has none there */
    vq_tensor *none = NULL;
    cr_assert_eq(vq_op_run(e, "t_async", &gx, 1, &none, 1, NULL, 0), VQ_ENOSYS);
    cr_assert(strstr(vq_errmsg(), "t_async"), "%s", vq_errmsg());
    vq_tensor *arr[] = {x, gx, gy, back};
    for (int i = 0; i < 4; i++)
        vq_tensor_release(arr[i]);
    vq_engine_free(e);
}
