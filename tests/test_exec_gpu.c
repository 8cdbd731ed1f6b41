/* The executor on a GPU (vq_exec_opts.device = GPU n): programs give the
 * CPU executor's results, host feeds are copied in, fetches stay on the
 * device, scope tensors move to the device and back, temporaries are
 * released in stream order, kernel errors found on the device fail the run
 * and leave the plan and the streams usable, and the seed model and an MLP
 * train to the CPU's weights.
 *
 * The backend is VARQ_GPU_BACKEND's, emulated (2 devices) when it is unset:
 * on a machine with a GPU, `VARQ_GPU_BACKEND=cuda build/tests/test_exec_gpu`
 * runs the same checks on CUDA (tolerances, not bits, where CUDA's math
 * library differs; see each test). A backend with no usable device skips
 * every test with the reason. */
#include "leakcheck.h"
#include "opcheck.h"
#include "programs.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static bool cuda; /* the real backend: compare to rounding, not bits */

static void setup(void)
{
    setenv("VARQ_GPU_BACKEND", "emulated", 0);
    setenv("VARQ_GPU_EMUL_DEVICES", "2", 0);
    cuda = !strcmp(getenv("VARQ_GPU_BACKEND"), "cuda");
    vq_mem_stats st;
    if (vq_mem_get_stats((vq_ctx){VQ_DEV_GPU, 0}, &st) < 0)
        cr_skip_test("no GPU backend: %s", vq_errmsg());
}

TestSuite(exec_gpu, .init = setup, .fini = leak_check);

static const vq_ctx gpu0 = {VQ_DEV_GPU, 0}, gpu1 = {VQ_DEV_GPU, 1}, cpu = {VQ_DEV_CPU, 0};

static vq_engine *engine(int kind, int workers, int streams)
{
    vq_engine *e;
    vq_engine_opts o = {.kind = kind, .cpu_workers = workers, .gpu_streams = streams};
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    return e;
}

static vq_exec *executor(vq_engine *e, vq_ctx dev)
{
    vq_exec *ex;
    vq_exec_opts o = {.device = dev};
    cr_assert_eq(vq_exec_new(&ex, e, &o), 0, "%s", vq_errmsg());
    return ex;
}

/* A host copy of t (on any device), made with engine e. */
static vq_tensor *to_host(vq_engine *e, vq_tensor *t)
{
    if (vq_tensor_device(t).kind == VQ_DEV_CPU)
        return vq_tensor_retain(t);
    vq_tensor *h;
    cr_assert_eq(vq_tensor_copy_to(e, t, cpu, &h), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(h), 0, "%s", vq_errmsg());
    return h;
}

/* Same dtype and shape, and values equal (bits on the emulated backend;
 * within rel of the largest magnitude on CUDA). */
static void assert_close(vq_tensor *a, vq_tensor *b, double rel, const char *what)
{
    cr_assert_eq(vq_tensor_dtype(a), vq_tensor_dtype(b), "%s", what);
    cr_assert_eq(vq_tensor_ndim(a), vq_tensor_ndim(b), "%s", what);
    for (int i = 0; i < vq_tensor_ndim(a); i++)
        cr_assert_eq(vq_tensor_shape(a)[i], vq_tensor_shape(b)[i], "%s", what);
    if (!cuda) {
        cr_assert_eq(memcmp(vq_tensor_data(a), vq_tensor_data(b), vq_tensor_nbytes(a)), 0,
                     "%s: bits differ", what);
        return;
    }
    double scale = 1e-30;
    for (int64_t i = 0; i < vq_tensor_numel(b); i++)
        scale = fmax(scale, fabs(oc_get(b, i)));
    for (int64_t i = 0; i < vq_tensor_numel(a); i++)
        cr_assert_leq(fabs(oc_get(a, i) - oc_get(b, i)), rel * scale, "%s: element %ld: %g vs %g",
                      what, (long)i, oc_get(a, i), oc_get(b, i));
}

/* Runs p once on dev with scope tensors w, b and feed x (copies of the
 * given host tensors); returns y on the host. feed_on_device: x is copied
 * to the device first instead of being copied by the run. */
static vq_tensor *run_mlp(vq_engine *e, vq_ctx dev, vq_program *p, vq_tensor *w, vq_tensor *b,
                          vq_tensor *x, bool feed_on_device)
{
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    vq_tensor *wk, *bk, *xk;
    cr_assert_eq(vq_tensor_copy_to(NULL, w, cpu, &wk), 0);
    cr_assert_eq(vq_tensor_copy_to(NULL, b, cpu, &bk), 0);
    cr_assert_eq(vq_scope_set(s, "w", wk), 0);
    cr_assert_eq(vq_scope_set(s, "b", bk), 0);
    cr_assert_eq(vq_tensor_copy_to(NULL, x, cpu, &xk), 0);
    if (feed_on_device) {
        vq_tensor *d;
        cr_assert_eq(vq_tensor_copy_to(e, xk, dev, &d), 0, "%s", vq_errmsg());
        vq_tensor_release(xk);
        xk = d;
    }
    vq_exec *ex = executor(e, dev);
    vq_feed feed = {"x", xk};
    vq_fetch fetch = {"y", NULL};
    cr_assert_eq(vq_exec_run(ex, p, s, &feed, 1, &fetch, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_device(fetch.tensor).kind, dev.kind);
    cr_assert_eq(vq_tensor_device(fetch.tensor).id, dev.id);
    /* The scope's tensors moved to the executor's device. */
    cr_assert_eq(vq_tensor_device(vq_scope_get(s, "w")).kind, dev.kind);
    vq_tensor *y = to_host(e, fetch.tensor);
    vq_tensor_release(fetch.tensor);
    vq_tensor_release(xk);
    vq_tensor_release(wk);
    vq_tensor_release(bk);
    vq_exec_free(ex);
    vq_scope_free(s);
    return y;
}

Test(exec_gpu, a_program_on_either_gpu_gives_the_cpu_results_on_every_engine)
{
    uint64_t rng = oc_seed("exec_gpu");
    vq_program *p = mlp_program();
    int64_t ws[2] = {5, 3}, bs[1] = {3}, xs[2] = {7, 5};
    vq_tensor *w = oc_rand(&rng, VQ_F64, 2, ws, -1, 1), *b = oc_rand(&rng, VQ_F64, 1, bs, -1, 1);
    vq_tensor *x = oc_rand(&rng, VQ_F64, 2, xs, -2, 2);
    vq_engine *ce = engine(VQ_ENGINE_THREADED, 2, 0);
    vq_tensor *want = run_mlp(ce, cpu, p, w, b, x, false); /* used with ce: freed before it */
    int kinds[5][3] = {{VQ_ENGINE_THREADED, 1, 1}, {VQ_ENGINE_THREADED, 2, 2},
                       {VQ_ENGINE_THREADED, 2, 4}, {VQ_ENGINE_THREADED, 8, 3},
                       {VQ_ENGINE_NAIVE, 0, 0}};
    for (int k = 0; k < 5; k++)
        for (int d = 0; d < 2; d++)
            for (int on_dev = 0; on_dev < 2; on_dev++) {
                vq_engine *e = engine(kinds[k][0], kinds[k][1], kinds[k][2]);
                vq_ctx dev = d ? gpu1 : gpu0;
                if (cuda && d == 1) {
                    vq_engine_free(e);
                    continue; /* one real GPU is enough */
                }
                vq_tensor *got = run_mlp(e, dev, p, w, b, x, on_dev);
                char what[64];
                snprintf(what, sizeof what, "engine %d, GPU %d, feed on device %d", k, d, on_dev);
                assert_close(got, want, 1e-12, what);
                vq_tensor_release(got);
                vq_engine_free(e);
            }
    vq_tensor_release(want);
    vq_engine_free(ce);
    vq_tensor_release(w);
    vq_tensor_release(b);
    vq_tensor_release(x);
    vq_program_free(p);
}

Test(exec_gpu, a_long_chain_of_temporaries_peaks_at_a_few_tensors_on_the_gpu)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2, 2);
    vq_exec *ex = executor(e, gpu0);
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t n = 1 << 18; /* 1 MiB of f32 */
    var(p, "t0", VQ_F32, 1, &n, false);
    char a[16], b[16];
    for (int i = 0; i < 200; i++) {
        snprintf(a, sizeof a, "t%d", i);
        snprintf(b, sizeof b, "t%d", i + 1);
        var(p, b, VQ_F32, 1, &n, false);
        vq_attr sc = VQ_ATTR_F("bias", 1);
        op(p, "scale", (const char *const[]){a}, 1, (const char *const[]){b}, 1, &sc, 1);
    }
    vq_tensor *x;
    cr_assert_eq(vq_tensor_new(&x, VQ_F32, 1, &n), 0);
    vq_feed feed = {"t0", x};
    vq_fetch fetch = {"t200", NULL};
    for (int round = 0; round < 2; round++) {
        cr_assert_eq(vq_mem_reset_peak(gpu0), 0);
        vq_mem_stats before;
        cr_assert_eq(vq_mem_get_stats(gpu0, &before), 0);
        cr_assert_eq(vq_exec_run(ex, p, NULL, &feed, 1, &fetch, 1), 0, "%s", vq_errmsg());
        vq_mem_stats st;
        cr_assert_eq(vq_mem_get_stats(gpu0, &st), 0);
        /* The fed copy, the value being written and the one read, plus the
         * fetched result held by the plan: far below 200 MiB. */
        cr_assert_leq(st.peak_bytes - before.live_bytes, (size_t)5 << 20, "peak %zu MiB",
                      (st.peak_bytes - before.live_bytes) >> 20);
        vq_tensor *h = to_host(e, fetch.tensor);
        cr_assert_eq(((float *)vq_tensor_data(h))[0], 200.0f);
        vq_tensor_release(h);
        vq_tensor_release(fetch.tensor);
    }
    vq_tensor_release(x);
    vq_program_free(p);
    vq_exec_free(ex);
    vq_engine_free(e);
    vq_mem_stats st;
    cr_assert_eq(vq_mem_get_stats(gpu0, &st), 0);
    cr_assert_eq(st.live_bytes, 0, "%zu bytes still live on GPU 0", st.live_bytes);
}

struct counter {
    atomic_int calls, errors;
};

static void on_done(void *user, int err)
{
    struct counter *c = user;
    atomic_fetch_add(&c->calls, 1);
    if (err)
        atomic_fetch_add(&c->errors, 1);
}

Test(exec_gpu, async_runs_in_flight_each_report_once_with_their_own_results)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2, 2);
    vq_exec *ex = executor(e, gpu0);
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t n = 1000;
    var(p, "x", VQ_F32, 1, &n, false);
    var(p, "y", VQ_F32, 1, &n, false);
    var(p, "z", VQ_F32, 1, &n, false);
    vq_attr twice = VQ_ATTR_F("scale", 2);
    op(p, "scale", NAMES("x"), 1, NAMES("y"), 1, &twice, 1);
    op(p, "add", NAMES("y", "x"), 2, NAMES("z"), 1, NULL, 0);
    enum { RUNS = 24 };
    vq_tensor *x[RUNS];
    vq_feed feed[RUNS];
    vq_fetch fetch[RUNS];
    struct counter c = {0};
    for (int i = 0; i < RUNS; i++) {
        cr_assert_eq(vq_tensor_new(&x[i], VQ_F32, 1, &n), 0);
        for (int j = 0; j < n; j++)
            ((float *)vq_tensor_data(x[i]))[j] = (float)(i + j);
        feed[i] = (vq_feed){"x", x[i]};
        fetch[i] = (vq_fetch){"z", NULL};
        cr_assert_eq(vq_exec_run_async(ex, p, NULL, &feed[i], 1, &fetch[i], 1, on_done, &c), 0,
                     "%s", vq_errmsg());
    }
    cr_assert_eq(vq_wait_all(e), 0, "%s", vq_errmsg());
    cr_assert_eq(atomic_load(&c.calls), RUNS);
    cr_assert_eq(atomic_load(&c.errors), 0);
    for (int i = 0; i < RUNS; i++) {
        vq_tensor *h = to_host(e, fetch[i].tensor);
        for (int j = 0; j < n; j += 97)
            cr_assert_eq(((float *)vq_tensor_data(h))[j], 3.0f * (float)(i + j), "run %d", i);
        vq_tensor_release(h);
        vq_tensor_release(fetch[i].tensor);
        vq_tensor_release(x[i]);
    }
    vq_program_free(p);
    vq_exec_free(ex);
    vq_engine_free(e);
}

Test(exec_gpu, a_kernel_error_found_on_the_device_fails_the_run_and_the_gpu_stays_usable)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2, 2);
    vq_exec *ex = executor(e, gpu0);
    vq_program *p = div_program();
    int64_t s[1] = {2};
    int32_t av[2] = {6, 8}, zero[2] = {1, 0}, two[2] = {2, 2};
    vq_tensor *a, *bz, *b2;
    cr_assert_eq(vq_tensor_from(&a, VQ_I32, 1, s, av), 0);
    cr_assert_eq(vq_tensor_from(&bz, VQ_I32, 1, s, zero), 0);
    cr_assert_eq(vq_tensor_from(&b2, VQ_I32, 1, s, two), 0);
    vq_feed feeds[2] = {{"a", a}, {"b", bz}};
    vq_fetch fetch = {"r", NULL};
    /* Every stream gets a failing run, then good ones. */
    for (int round = 0; round < 4; round++) {
        feeds[1].tensor = bz;
        cr_assert_eq(vq_exec_run(ex, p, NULL, feeds, 2, &fetch, 1), VQ_EINVAL);
        cr_assert(strstr(vq_errmsg(), "op 0 (div): div: integer division by zero"), "%s",
                  vq_errmsg());
        cr_assert_null(fetch.tensor);
        feeds[1].tensor = b2;
        cr_assert_eq(vq_exec_run(ex, p, NULL, feeds, 2, &fetch, 1), 0, "%s", vq_errmsg());
        vq_tensor *h = to_host(e, fetch.tensor);
        cr_assert_eq(((int32_t *)vq_tensor_data(h))[1], 12);
        vq_tensor_release(h);
        vq_tensor_release(fetch.tensor);
    }
    cr_assert_eq(vq_wait_all(e), 0, "%s", vq_errmsg());
    vq_tensor_release(a);
    vq_tensor_release(bz);
    vq_tensor_release(b2);
    vq_program_free(p);
    vq_exec_free(ex);
    vq_engine_free(e);
}

/* VQ_EXEC_CHECK_NAN on a GPU executor: the check runs as stream work
 * after each op's kernel; the first NaN or infinity fails the run naming
 * the op, output, var and element, and the plan and streams stay usable.
 * f32 and f64, NaN and +inf; off, a NaN is a value like any other. */
Test(exec_gpu, the_nan_check_names_the_op_and_var_on_a_gpu)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t s[1] = {4};
    var(p, "x", VQ_F32, 1, s, false);
    var(p, "y", VQ_F32, 1, s, false);
    var(p, "z", VQ_F32, 1, s, false);
    var(p, "d", VQ_F64, 1, s, false);
    var(p, "r", VQ_F64, 1, s, false);
    op(p, "relu", NAMES("x"), 1, NAMES("y"), 1, NULL, 0);
    op(p, "log", NAMES("y"), 1, NAMES("z"), 1, NULL, 0);
    op(p, "reciprocal", NAMES("d"), 1, NAMES("r"), 1, NULL, 0);
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2, 2);
    float xbad[4] = {1, -1, 2, 3}, xgood[4] = {1, 4, 2, 3};
    double dbad[4] = {1, 2, 4, 0}, dgood[4] = {1, 2, 4, 8};
    vq_tensor *xb, *xg, *db, *dg;
    cr_assert_eq(vq_tensor_from(&xb, VQ_F32, 1, s, xbad), 0);
    cr_assert_eq(vq_tensor_from(&xg, VQ_F32, 1, s, xgood), 0);
    cr_assert_eq(vq_tensor_from(&db, VQ_F64, 1, s, dbad), 0);
    cr_assert_eq(vq_tensor_from(&dg, VQ_F64, 1, s, dgood), 0);
    for (int on = 0; on < 2; on++) {
        vq_exec *ex;
        vq_exec_opts o = {.device = gpu0,
                          .flags = VQ_EXEC_FETCH_HOST | (on ? VQ_EXEC_CHECK_NAN : 0)};
        cr_assert_eq(vq_exec_new(&ex, e, &o), 0, "%s", vq_errmsg());
        vq_fetch f[2] = {{"z", NULL}, {"r", NULL}};
        for (int round = 0; round < 3; round++) {
            vq_feed feeds[2] = {{"x", xb}, {"d", dg}};
            int rc = vq_exec_run(ex, p, NULL, feeds, 2, f, 2);
            if (!on) {
                cr_assert_eq(rc, 0, "off: %s", vq_errmsg());
                float z1 = ((float *)vq_tensor_data(f[0].tensor))[0];
                cr_assert_eq(z1, 0.0f);
                /* relu(-1) = 0, log(0) = -inf: a value like any other */
                cr_assert(isinf(((float *)vq_tensor_data(f[0].tensor))[1]));
                vq_tensor_release(f[0].tensor);
                vq_tensor_release(f[1].tensor);
                break;
            }
            cr_assert_eq(rc, VQ_EIO, "%s", vq_errmsg());
            cr_assert(strstr(vq_errmsg(), "op 1 (log): output Out var z holds -inf at element 1 "
                                          "(VQ_EXEC_CHECK_NAN)"),
                      "%s", vq_errmsg());
            cr_assert_null(f[0].tensor);
            feeds[0].tensor = xg;
            feeds[1].tensor = db;
            cr_assert_eq(vq_exec_run(ex, p, NULL, feeds, 2, f, 2), VQ_EIO);
            cr_assert(strstr(vq_errmsg(), "op 2 (reciprocal): output Out var r holds +inf at "
                                          "element 3"),
                      "%s", vq_errmsg());
            feeds[1].tensor = dg; /* the plan and the streams stay usable */
            cr_assert_eq(vq_exec_run(ex, p, NULL, feeds, 2, f, 2), 0, "%s", vq_errmsg());
            cr_assert_eq(((double *)vq_tensor_data(f[1].tensor))[3], 0.125);
            vq_tensor_release(f[0].tensor);
            vq_tensor_release(f[1].tensor);
        }
        cr_assert_eq(vq_wait_all(e), 0, "%s", vq_errmsg());
        vq_exec_free(ex);
    }
    vq_tensor_release(xb);
    vq_tensor_release(xg);
    vq_tensor_release(db);
    vq_tensor_release(dg);
    vq_program_free(p);
    vq_engine_free(e);
}

Test(exec_gpu, a_failed_gpu_stream_fails_the_run_instead_of_hanging)
{
    /* An imperative GPU op failing inside stream work is a fault of its
     * stream (sticky, as in CUDA). A run reading its output must report,
     * not hang. */
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2, 1);
    vq_exec *ex = executor(e, gpu0);
    vq_scope *sc;
    cr_assert_eq(vq_scope_new(&sc), 0);
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    int64_t s[1] = {2};
    var(p, "w", VQ_I32, 1, s, true);
    var(p, "r", VQ_I32, 1, s, false);
    op(p, "add", NAMES("w", "w"), 2, NAMES("r"), 1, NULL, 0);
    int32_t av[2] = {4, 6}, zero[2] = {1, 0};
    vq_tensor *ah, *zh, *a, *z;
    cr_assert_eq(vq_tensor_from(&ah, VQ_I32, 1, s, av), 0);
    cr_assert_eq(vq_tensor_from(&zh, VQ_I32, 1, s, zero), 0);
    cr_assert_eq(vq_tensor_copy_to(e, ah, gpu0, &a), 0);
    cr_assert_eq(vq_tensor_copy_to(e, zh, gpu0, &z), 0);
    cr_assert_eq(vq_scope_set(sc, "w", a), 0);
    vq_fetch fetch = {"r", NULL};
    cr_assert_eq(vq_exec_run(ex, p, sc, NULL, 0, &fetch, 1), 0, "%s", vq_errmsg());
    vq_tensor_release(fetch.tensor);
    vq_tensor *in[2] = {a, z}, *out[1] = {a};
    cr_assert_eq(vq_op_run(e, "div", in, 2, out, 1, NULL, 0), 0); /* fails on the stream */
    int rc = vq_exec_run(ex, p, sc, NULL, 0, &fetch, 1);
    cr_assert_lt(rc, 0);
    cr_assert(strstr(vq_errmsg(), "integer division by zero"), "%s", vq_errmsg());
    cr_assert_null(fetch.tensor);
    vq_wait_all(e); /* reports the fault; clears the record */
    vq_tensor_release(ah);
    vq_tensor_release(zh);
    vq_tensor_release(a);
    vq_tensor_release(z);
    vq_program_free(p);
    vq_exec_free(ex);
    vq_scope_free(sc);
    vq_engine_free(e);
}

Test(exec_gpu, bad_devices_and_feeds_are_refused_with_the_reason)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2, 2);
    vq_exec *ex;
    vq_exec_opts o = {.device = {VQ_DEV_GPU, 9}};
    cr_assert_eq(vq_exec_new(&ex, e, &o), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "no GPU 9"), "%s", vq_errmsg());
    o.device = (vq_ctx){7, 0};
    cr_assert_eq(vq_exec_new(&ex, e, &o), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "is not CPU 0 or a GPU"), "%s", vq_errmsg());
    if (!cuda) {
        /* A tensor on GPU 1 fed to an executor on GPU 0. */
        ex = executor(e, gpu0);
        vq_program *p;
        cr_assert_eq(vq_program_new(&p), 0);
        int64_t xs[2] = {2, 5};
        var(p, "x", VQ_F64, 2, xs, false);
        var(p, "y", VQ_F64, 2, xs, false);
        op(p, "relu", NAMES("x"), 1, NAMES("y"), 1, NULL, 0);
        vq_tensor *x;
        cr_assert_eq(vq_tensor_new_on(&x, gpu1, VQ_F64, 2, xs), 0, "%s", vq_errmsg());
        vq_feed feed = {"x", x};
        vq_fetch fetch = {"y", NULL};
        vq_scope *s;
        cr_assert_eq(vq_scope_new(&s), 0);
        cr_assert_eq(vq_exec_run(ex, p, s, &feed, 1, &fetch, 1), VQ_EINVAL);
        cr_assert(strstr(vq_errmsg(), "feed x: the tensor is on GPU 1; the executor runs on GPU 0"),
                  "%s", vq_errmsg());
        vq_tensor_release(x);
        vq_scope_free(s);
        vq_program_free(p);
        vq_exec_free(ex);
    }
    vq_engine_free(e);
}

/* ---- training on the GPU ---- */

/* Trains startup/main for steps on dev (a fresh scope), feeding batches
 * from x/label (host tensors); returns the scope (tensors on dev) and the
 * last loss on the host in *loss. */
static vq_scope *train(vq_engine *e, vq_ctx dev, vq_program *startup, vq_program *main_p,
                       vq_tensor *x, vq_tensor *label, int steps, double *losses)
{
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    vq_exec *ex = executor(e, dev);
    cr_assert_eq(vq_exec_run(ex, startup, s, NULL, 0, NULL, 0), 0, "%s", vq_errmsg());
    vq_feed feeds[2] = {{"x", x}, {"label", label}};
    for (int i = 0; i < steps; i++) {
        vq_fetch fetch = {"loss", NULL};
        cr_assert_eq(vq_exec_run(ex, main_p, s, feeds, 2, &fetch, 1), 0, "step %d: %s", i,
                     vq_errmsg());
        vq_tensor *h = to_host(e, fetch.tensor);
        losses[i] = oc_get(h, 0);
        vq_tensor_release(h);
        vq_tensor_release(fetch.tensor);
    }
    vq_exec_free(ex);
    return s;
}

static void compare_training(vq_program *startup, vq_program *main_p, vq_tensor *x,
                             vq_tensor *label, const char *const *params, int nparams)
{
    enum { STEPS = 30 };
    double cl[STEPS], gl[STEPS];
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2, 2);
    vq_scope *cs = train(e, cpu, startup, main_p, x, label, STEPS, cl);
    vq_scope *gs = train(e, gpu0, startup, main_p, x, label, STEPS, gl);
    cr_assert_lt(cl[STEPS - 1], cl[0], "the CPU run did not learn: %g -> %g", cl[0],
                 cl[STEPS - 1]);
    for (int i = 0; i < STEPS; i++)
        cr_assert_leq(fabs(gl[i] - cl[i]), 1e-4 * fmax(1, fabs(cl[i])), "step %d: %g vs %g", i,
                      gl[i], cl[i]);
    for (int i = 0; i < nparams; i++) {
        vq_tensor *g = vq_scope_get(gs, params[i]);
        cr_assert_not_null(g, "%s", params[i]);
        cr_assert_eq(vq_tensor_device(g).kind, VQ_DEV_GPU, "%s", params[i]);
        vq_tensor *h = to_host(e, g);
        vq_tensor *c = vq_scope_get(cs, params[i]);
        double scale = 1e-30, worst = 0;
        for (int64_t j = 0; j < vq_tensor_numel(c); j++) {
            scale = fmax(scale, fabs(oc_get(c, j)));
            worst = fmax(worst, fabs(oc_get(h, j) - oc_get(c, j)));
        }
        cr_assert_leq(worst, 1e-4 * scale, "%s: differs by %g", params[i], worst);
        if (!cuda)
            cr_assert_eq(memcmp(vq_tensor_data(h), vq_tensor_data(c), vq_tensor_nbytes(c)), 0,
                         "%s: bits differ on the emulated backend", params[i]);
        vq_tensor_release(h);
    }
    vq_scope_free(cs);
    vq_scope_free(gs);
    vq_engine_free(e);
}

#define MAX_PARAMS 32

/* The persistable vars the startup program creates (parameters and
 * optimizer state), found by running it into a scratch scope. */
static int param_names(vq_program *startup, char names[][64], const char **params)
{
    vq_scope *probe;
    cr_assert_eq(vq_scope_new(&probe), 0);
    vq_engine *e = engine(VQ_ENGINE_THREADED, 1, 0);
    vq_exec *ex = executor(e, cpu);
    cr_assert_eq(vq_exec_run(ex, startup, probe, NULL, 0, NULL, 0), 0, "%s", vq_errmsg());
    int np = 0;
    for (int i = 0; i < vq_scope_count(probe) && np < MAX_PARAMS; i++, np++) {
        snprintf(names[np], 64, "%s", vq_scope_name(probe, i));
        params[np] = names[np];
    }
    vq_exec_free(ex);
    vq_scope_free(probe);
    vq_engine_free(e);
    return np;
}

static void xy_vars(vq_program *main_p, int64_t batch, int64_t in, int64_t lab, vq_dtype lab_dt)
{
    int64_t xs[2] = {batch, in}, ls[2] = {batch, lab};
    var(main_p, "x", VQ_F32, 2, xs, false);
    var(main_p, "label", lab_dt, lab_dt == VQ_F32 ? 2 : 1, ls, false);
}

Test(exec_gpu, the_seed_model_trains_on_the_gpu_to_the_cpu_weights)
{
    uint64_t rng = oc_seed("exec_gpu_seed");
    vq_program *startup, *main_p;
    cr_assert_eq(vq_program_new(&startup), 0);
    cr_assert_eq(vq_program_new(&main_p), 0);
    xy_vars(main_p, 32, 16, 1, VQ_F32);
    cr_assert_eq(vq_layer_linear(main_p, startup, "x", "out", 1, 2026), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_layer_mse_loss(main_p, "out", "label", "loss"), 0, "%s", vq_errmsg());
    vq_optimizer sgd = {.kind = VQ_OPT_SGD, .learning_rate = 0.05};
    cr_assert_eq(vq_optimizer_minimize(main_p, startup, "loss", &sgd), 2, "%s", vq_errmsg());
    int64_t xs[2] = {32, 16}, ls[2] = {32, 1};
    vq_tensor *x = oc_rand(&rng, VQ_F32, 2, xs, -1, 1), *l = oc_rand(&rng, VQ_F32, 2, ls, -1, 1);
    const char *params[MAX_PARAMS];
    char names[MAX_PARAMS][64];
    int np = param_names(startup, names, params);
    cr_assert_geq(np, 2);
    compare_training(startup, main_p, x, l, params, np);
    vq_tensor_release(x);
    vq_tensor_release(l);
    vq_program_free(startup);
    vq_program_free(main_p);
}

Test(exec_gpu, an_mlp_with_adam_trains_on_the_gpu_to_the_cpu_weights)
{
    uint64_t rng = oc_seed("exec_gpu_mlp");
    vq_program *startup, *main_p;
    cr_assert_eq(vq_program_new(&startup), 0);
    cr_assert_eq(vq_program_new(&main_p), 0);
    xy_vars(main_p, 64, 64, 1, VQ_I64);
    cr_assert_eq(vq_layer_linear(main_p, startup, "x", "h", 32, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_layer_activation(main_p, "relu", "h", "a"), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_layer_linear(main_p, startup, "a", "logits", 10, 2), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_layer_softmax_cross_entropy(main_p, "logits", "label", "probs", "loss"), 0,
                 "%s", vq_errmsg());
    vq_optimizer adam = {.kind = VQ_OPT_ADAM, .learning_rate = 0.005};
    cr_assert_eq(vq_optimizer_minimize(main_p, startup, "loss", &adam), 4, "%s", vq_errmsg());
    int64_t xs[2] = {64, 64}, ls[1] = {64};
    vq_tensor *x = oc_rand(&rng, VQ_F32, 2, xs, 0, 1), *l;
    cr_assert_eq(vq_tensor_new(&l, VQ_I64, 1, ls), 0);
    for (int i = 0; i < 64; i++)
        ((int64_t *)vq_tensor_data(l))[i] = (int64_t)(oc_next(&rng) % 10);
    const char *params[MAX_PARAMS];
    char names[MAX_PARAMS][64];
    int np = param_names(startup, names, params);
    cr_assert_geq(np, 4);
    compare_training(startup, main_p, x, l, params, np);
    vq_tensor_release(x);
    vq_tensor_release(l);
    vq_program_free(startup);
    vq_program_free(main_p);
}

Test(exec_gpu, scope_tensors_trained_on_the_gpu_save_and_move_back_to_the_cpu)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2, 2);
    vq_program *startup, *main_p;
    int64_t s[1] = {3};
    cr_assert_eq(vq_program_new(&startup), 0);
    var(startup, "w", VQ_F32, 1, s, true);
    vq_attr fill[2] = {VQ_ATTR_IS("shape", s, 1), VQ_ATTR_F("value", 2)};
    op(startup, "fill_constant", NULL, 0, NAMES("w"), 1, fill, 2);
    cr_assert_eq(vq_program_new(&main_p), 0);
    var(main_p, "w", VQ_F32, 1, s, true);
    var(main_p, "g", VQ_F32, 1, s, false);
    vq_attr lr = VQ_ATTR_F("learning_rate", 0.5);
    op(main_p, "sgd", NAMES("w", "g"), 2, NAMES("w"), 1, &lr, 1);
    vq_scope *sc;
    cr_assert_eq(vq_scope_new(&sc), 0);
    vq_exec *gx = executor(e, gpu0), *cx = executor(e, cpu);
    cr_assert_eq(vq_exec_run(gx, startup, sc, NULL, 0, NULL, 0), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_device(vq_scope_get(sc, "w")).kind, VQ_DEV_GPU);
    float gv[3] = {1, 2, 3};
    vq_tensor *g;
    cr_assert_eq(vq_tensor_from(&g, VQ_F32, 1, s, gv), 0);
    vq_feed feed = {"g", g};
    vq_fetch fetch = {"w", NULL};
    cr_assert_eq(vq_exec_run(gx, main_p, sc, &feed, 1, &fetch, 1), 0, "%s", vq_errmsg());
    /* A persistable fetch is a snapshot on the device. */
    cr_assert_neq(fetch.tensor, vq_scope_get(sc, "w"));
    vq_tensor *h = to_host(e, fetch.tensor);
    cr_assert_eq(((float *)vq_tensor_data(h))[2], 0.5f);
    vq_tensor_release(h);
    vq_tensor_release(fetch.tensor);
    /* Saving copies the device tensor to the host. */
    char dir[] = "/tmp/varq_gpu_scope_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(vq_scope_save(sc, dir), 0, "%s", vq_errmsg());
    vq_scope *loaded;
    cr_assert_eq(vq_scope_new(&loaded), 0);
    cr_assert_eq(vq_scope_load(loaded, dir), 0, "%s", vq_errmsg());
    cr_assert_eq(((float *)vq_tensor_data(vq_scope_get(loaded, "w")))[1], 1.0f);
    vq_scope_free(loaded);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
    /* A CPU executor moves the scope's tensor back and goes on. */
    cr_assert_eq(vq_exec_run(cx, main_p, sc, &feed, 1, &fetch, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_device(vq_scope_get(sc, "w")).kind, VQ_DEV_CPU);
    cr_assert_eq(((float *)vq_tensor_data(fetch.tensor))[2], -1.0f);
    vq_tensor_release(fetch.tensor);
    /* And the GPU executor moves it to the device again. */
    cr_assert_eq(vq_exec_run(gx, main_p, sc, &feed, 1, &fetch, 1), 0, "%s", vq_errmsg());
    h = to_host(e, fetch.tensor);
    cr_assert_eq(((float *)vq_tensor_data(h))[2], -2.5f);
    vq_tensor_release(h);
    vq_tensor_release(fetch.tensor);
    vq_tensor_release(g);
    vq_exec_free(gx);
    vq_exec_free(cx);
    vq_scope_free(sc);
    vq_program_free(startup);
    vq_program_free(main_p);
    vq_engine_free(e);
}

/* VQ_EXEC_FETCH_HOST: a GPU executor's fetches come back as CPU tensors,
 * the same values; the scope stays on the device. */
Test(exec_gpu, fetches_come_back_on_the_host_when_asked)
{
    uint64_t rng = oc_seed("exec_gpu");
    vq_program *p = mlp_program();
    int64_t ws[2] = {5, 3}, bs[1] = {3}, xs[2] = {7, 5};
    vq_tensor *w = oc_rand(&rng, VQ_F64, 2, ws, -1, 1), *b = oc_rand(&rng, VQ_F64, 1, bs, -1, 1);
    vq_tensor *x = oc_rand(&rng, VQ_F64, 2, xs, -2, 2);
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2, 2);
    vq_tensor *want = run_mlp(e, gpu0, p, w, b, x, false);
    vq_scope *s;
    cr_assert_eq(vq_scope_new(&s), 0);
    cr_assert_eq(vq_scope_set(s, "w", w), 0);
    cr_assert_eq(vq_scope_set(s, "b", b), 0);
    vq_exec *ex;
    vq_exec_opts o = {.device = gpu0, .flags = VQ_EXEC_FETCH_HOST};
    cr_assert_eq(vq_exec_new(&ex, e, &o), 0, "%s", vq_errmsg());
    for (int run = 0; run < 3; run++) {
        vq_feed feed = {"x", x};
        vq_fetch fetch[2] = {{"y", NULL}, {"w", NULL}};
        cr_assert_eq(vq_exec_run(ex, p, s, &feed, 1, fetch, 2), 0, "%s", vq_errmsg());
        for (int i = 0; i < 2; i++)
            cr_assert_eq(vq_tensor_device(fetch[i].tensor).kind, VQ_DEV_CPU, "fetch %d", i);
        assert_close(fetch[0].tensor, want, 1e-12, "fetched on the host");
        assert_close(fetch[1].tensor, w, 0, "a scope tensor fetched on the host");
        cr_assert_eq(vq_tensor_device(vq_scope_get(s, "w")).kind, VQ_DEV_GPU);
        vq_tensor_release(fetch[0].tensor);
        vq_tensor_release(fetch[1].tensor);
    }
    vq_exec_free(ex);
    vq_scope_free(s);
    /* want, w, b and x were used with e (engine.h: released before it) */
    vq_tensor_release(want);
    vq_tensor_release(w);
    vq_tensor_release(b);
    vq_tensor_release(x);
    vq_engine_free(e);
    vq_program_free(p);
}

/* Random ops without a seed draw from the executor's default generator:
 * on the GPU the same numbers as on the CPU for the same seed, run after
 * run (the GPU kernels get the same keys). */
Test(exec_gpu, the_default_generator_draws_on_the_gpu_what_it_draws_on_the_cpu)
{
    enum { RUNS = 3 };
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2, 2);
    vq_exec *ex[2];
    const vq_ctx devs[2] = {cpu, gpu0};
    for (int d = 0; d < 2; d++) {
        vq_exec_opts o = {.device = devs[d], .seed = 4321, .flags = VQ_EXEC_FETCH_HOST};
        cr_assert_eq(vq_exec_new(&ex[d], e, &o), 0, "%s", vq_errmsg());
    }
    vq_program *p = random_program();
    vq_tensor *first_u = NULL;
    for (int r = 0; r < RUNS; r++) {
        vq_tensor *got[2][RANDOM_FETCHES];
        for (int d = 0; d < 2; d++)
            random_run(ex[d], p, got[d]);
        const char *names[RANDOM_FETCHES] = {"y", "u", "s", "acc"};
        for (int i = 0; i < RANDOM_FETCHES; i++) {
            char what[48];
            snprintf(what, sizeof what, "run %d, fetch %s", r, names[i]);
            assert_close(got[1][i], got[0][i], 1e-15, what);
        }
        if (r == 0)
            first_u = vq_tensor_retain(got[0][1]);
        else
            cr_assert_eq(random_same(got[0][1], first_u), 0, "run %d repeats run 0", r);
        random_release(got[0]);
        random_release(got[1]);
    }
    vq_tensor_release(first_u);
    vq_program_free(p);
    for (int d = 0; d < 2; d++)
        vq_exec_free(ex[d]);
    vq_engine_free(e);
}
