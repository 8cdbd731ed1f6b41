/* Imperative op calls on an engine (vq_op_run): ordering, references held
 * by pending ops, kernel errors reaching vq_tensor_wait, static errors
 * that push nothing, a tensor's one engine. */
#include <varq/varq.h>

#include <criterion/criterion.h>
#include <string.h>
#include <time.h>
#include "cpu_stats.h"
#include "leakcheck.h"

TestSuite(imperative, .fini = leak_check);

static vq_engine *engine(int kind, int workers)
{
    vq_engine *e;
    vq_engine_opts o = {.kind = kind, .cpu_workers = workers};
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    return e;
}

/* x = 1, then 200 times x = x + x alternated with y = x * 0.5: the engine
 * must keep each read after the write before it. */
static void chain(vq_engine *e)
{
    int64_t n = 1000;
    vq_tensor *x, *half, *y = NULL;
    cr_assert_eq(vq_tensor_new(&x, VQ_F64, 1, &n), 0);
    double h = 0.5;
    int64_t one = 1;
    cr_assert_eq(vq_tensor_from(&half, VQ_F64, 1, &one, &h), 0);
    for (int64_t i = 0; i < n; i++)
        ((double *)vq_tensor_data(x))[i] = (double)i;
    for (int it = 0; it < 20; it++) {
        vq_tensor *in[2] = {x, x}, *out[1] = {x};
        cr_assert_eq(vq_op_run(e, "add", in, 2, out, 1, NULL, 0), 0, "%s", vq_errmsg());
        vq_tensor *in2[2] = {x, half}, *o2[1] = {NULL};
        cr_assert_eq(vq_op_run(e, "mul", in2, 2, o2, 1, NULL, 0), 0, "%s", vq_errmsg());
        vq_tensor_release(y); /* the pending mul that wrote it keeps it alive */
        y = o2[0];
    }
    cr_assert_eq(vq_tensor_wait(y), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(x), 0);
    for (int64_t i = 0; i < n; i++) {
        double want = (double)i * (double)(1 << 20);
        cr_assert_eq(((double *)vq_tensor_data(x))[i], want);
        cr_assert_eq(((double *)vq_tensor_data(y))[i], want / 2);
    }
    vq_tensor_release(x);
    vq_tensor_release(y);
    vq_tensor_release(half);
}

Test(imperative, ops_on_an_engine_run_in_program_order)
{
    vq_engine *engines[4] = {engine(VQ_ENGINE_THREADED, 1), engine(VQ_ENGINE_THREADED, 2),
                             engine(VQ_ENGINE_THREADED, 8), engine(VQ_ENGINE_NAIVE, 0)};
    for (int i = 0; i < 4; i++) {
        chain(engines[i]);
        cr_assert_eq(vq_wait_all(engines[i]), 0);
        vq_engine_free(engines[i]);
    }
}

static int slow_fill(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    double *d = vq_tensor_data(arg);
    d[0] = 42;
    return 0;
}

Test(imperative, released_tensors_live_until_their_ops_are_done)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2);
    vq_mem_stats before = stats();
    int64_t n = 1;
    vq_tensor *x, *y[1] = {NULL};
    cr_assert_eq(vq_tensor_new(&x, VQ_F64, 1, &n), 0);
    /* A caller's own op on the tensor's var, holding no reference. */
    vq_var *w[1] = {vq_tensor_var(x, e)};
    cr_assert_not_null(w[0]);
    vq_task t = {.fn = slow_fill, .arg = x, .writes = w, .nwrites = 1};
    cr_assert_eq(vq_push(e, &t), 0);
    vq_attr a = VQ_ATTR_F("scale", 2);
    cr_assert_eq(vq_op_run(e, "scale", &x, 1, y, 1, &a, 1), 0, "%s", vq_errmsg());
    vq_tensor_release(x); /* storage must outlive slow_fill and scale */
    cr_assert_eq(vq_tensor_wait(y[0]), 0);
    cr_assert_eq(((double *)vq_tensor_data(y[0]))[0], 84);
    vq_tensor_release(y[0]);
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert_eq(stats().live_bytes, before.live_bytes);
    vq_engine_free(e);
}

Test(imperative, kernel_errors_reach_the_outputs_and_what_depends_on_them)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2);
    int64_t n = 2;
    int32_t a[2] = {4, 6}, b[2] = {2, 0};
    vq_tensor *x, *y, *q[1] = {NULL}, *r[1] = {NULL};
    cr_assert_eq(vq_tensor_from(&x, VQ_I32, 1, &n, a), 0);
    cr_assert_eq(vq_tensor_from(&y, VQ_I32, 1, &n, b), 0);
    vq_tensor *in[2] = {x, y};
    cr_assert_eq(vq_op_run(e, "div", in, 2, q, 1, NULL, 0), 0, "checks pass; the kernel fails");
    vq_tensor *in2[2] = {q[0], x};
    cr_assert_eq(vq_op_run(e, "add", in2, 2, r, 1, NULL, 0), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(r[0]), VQ_EINVAL);
    cr_assert_eq(vq_tensor_wait(q[0]), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "div: integer division by zero"), "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(q[0]), 0, "the error was reported once");
    vq_tensor_release(x);
    vq_tensor_release(y);
    vq_tensor_release(q[0]);
    vq_tensor_release(r[0]);
    vq_wait_all(e);
    vq_engine_free(e);
}

Test(imperative, static_errors_push_nothing_and_create_nothing)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 1);
    int64_t s1[1] = {3}, s2[1] = {4};
    vq_tensor *x, *y, *o[1] = {NULL};
    cr_assert_eq(vq_tensor_new(&x, VQ_F32, 1, s1), 0);
    cr_assert_eq(vq_tensor_new(&y, VQ_F32, 1, s2), 0);
    vq_mem_stats before = stats();
    vq_tensor *in[2] = {x, y};
    cr_assert_eq(vq_op_run(e, "add", in, 2, o, 1, NULL, 0), VQ_EINVAL);
    cr_assert_null(o[0]);
    cr_assert_eq(stats().live_bytes, before.live_bytes);
    in[1] = NULL;
    cr_assert_eq(vq_op_run(e, "add", in, 2, o, 1, NULL, 0), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "add: input Y (slot 1) is NULL"), "%s", vq_errmsg());
    cr_assert_eq(vq_op_run(e, NULL, in, 2, o, 1, NULL, 0), VQ_EINVAL);
    vq_tensor_release(x);
    vq_tensor_release(y);
    vq_engine_free(e);
}

Test(imperative, a_tensor_belongs_to_one_engine)
{
    vq_engine *e1 = engine(VQ_ENGINE_THREADED, 1), *e2 = engine(VQ_ENGINE_NAIVE, 0);
    int64_t n = 2;
    vq_tensor *x, *o[1] = {NULL};
    cr_assert_eq(vq_tensor_new(&x, VQ_F32, 1, &n), 0);
    cr_assert_not_null(vq_tensor_var(x, e1));
    cr_assert_eq(vq_tensor_var(x, e1), vq_tensor_var(x, e1));
    cr_assert_null(vq_tensor_var(x, e2));
    cr_assert_eq(vq_op_run(e2, "relu", &x, 1, o, 1, NULL, 0) < 0, 1);
    cr_assert_null(o[0]);
    vq_tensor_release(x);
    vq_wait_all(e1);
    vq_engine_free(e1);
    vq_engine_free(e2);
}
