/* Cancelling runs (vq_exec_cancel) and per-run deadlines
 * (vq_exec_opts.timeout_ms): endless while loops, alone and nested, in
 * synchronous and asynchronous runs, on the threaded and naive engines,
 * stopped from another thread or by the deadline; each run ends with its
 * error naming the loop, and the executor then runs another program
 * correctly. tests/control_stress.c --cancel runs the threaded case under
 * ThreadSanitizer. */
#include <varq/varq.h>

#include "leakcheck.h"

#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

TestSuite(cancel, .fini = leak_check, .timeout = 120);

#define NAMES(...) ((const char *const[]){__VA_ARGS__})

static void bvar(vq_program *p, int b, const char *name, int ndim)
{
    static const int64_t s3[1] = {3};
    cr_assert_eq(vq_program_add_var(p, b, name, VQ_F64, ndim, ndim ? s3 : NULL, false), 0, "%s",
                 vq_errmsg());
}

static void bop(vq_program *p, int b, const char *type, const char *const *in, int nin,
                const char *const *out, int nout, const vq_attr *attrs, int nattrs)
{
    cr_assert_geq(vq_program_add_op(p, b, type, in, nin, out, nout, attrs, nattrs), 0, "%s",
                  vq_errmsg());
}

static void bool_var(vq_program *p, int b, const char *name)
{
    cr_assert_eq(vq_program_add_var(p, b, name, VQ_BOOL, 0, NULL, false), 0, "%s", vq_errmsg());
}

/* The body of "i = i + one; x = x * half + i; c = i < n" in block b (a
 * child of parent), reading the loop's bx, bi and n, one, half from
 * enclosing blocks; the while op in parent over (x, i) -> (xo, io). With
 * n = +inf it never ends. prefix keeps nested loops' names apart. */
static int counter_while(vq_program *p, int parent, const char *x, const char *i, const char *xo,
                         const char *io, const char *pre)
{
    int b = vq_program_add_block(p, parent);
    cr_assert_geq(b, 0, "%s", vq_errmsg());
    char n[8][24];
    const char *suffix[8] = {"bx", "bt", "bx2", "bi", "bi2", "bc", "c0", "w"};
    for (int k = 0; k < 8; k++)
        snprintf(n[k], sizeof n[k], "%s%s", pre, suffix[k]);
    bvar(p, b, n[0], 1);
    bvar(p, b, n[1], 1);
    bvar(p, b, n[2], 1);
    bvar(p, b, n[3], 0);
    bvar(p, b, n[4], 0);
    bool_var(p, b, n[5]);
    bop(p, b, "add", NAMES(n[3], "one"), 2, NAMES(n[4]), 1, NULL, 0);
    bop(p, b, "mul", NAMES(n[0], "half"), 2, NAMES(n[1]), 1, NULL, 0);
    bop(p, b, "add", NAMES(n[1], n[4]), 2, NAMES(n[2]), 1, NULL, 0);
    bop(p, b, "less", NAMES(n[4], "n"), 2, NAMES(n[5]), 1, NULL, 0);
    bool_var(p, parent, n[6]);
    bop(p, parent, "less", NAMES(i, "n"), 2, NAMES(n[6]), 1, NULL, 0);
    vq_attr a[5] = {VQ_ATTR_I("body_block", b), VQ_ATTR_SS("body_inputs", NAMES(n[0], n[3]), 2),
                    VQ_ATTR_SS("body_outputs", NAMES(n[2], n[4]), 2), VQ_ATTR_S("body_cond", n[5]),
                    VQ_ATTR_I("max_iters", -1)};
    bop(p, parent, "while", NAMES(n[6], x, i), 3, NAMES(xo, io), 2, a, 5);
    return b;
}

/* x, i0 -> xo, io through one counter loop; nested: the outer loop's body
 * runs an inner loop of its own (from the outer i) before its step. */
static vq_program *loop_program(bool nested)
{
    vq_program *p;
    cr_assert_eq(vq_program_new(&p), 0);
    const char *scalars[] = {"n", "one", "half", "i0", "io"};
    for (int k = 0; k < 5; k++)
        bvar(p, 0, scalars[k], 0);
    bvar(p, 0, "x", 1);
    bvar(p, 0, "xo", 1);
    if (!nested) {
        counter_while(p, 0, "x", "i0", "xo", "io", "");
        return p;
    }
    int outer = counter_while(p, 0, "x", "i0", "xo", "io", "o_");
    /* in the outer body, before its ops: an inner loop over (o_bx, o_bi) */
    bvar(p, outer, "in_xo", 1);
    bvar(p, outer, "in_io", 0);
    counter_while(p, outer, "o_bx", "o_bi", "in_xo", "in_io", "in_");
    return p;
}

static vq_tensor *scalar(double v)
{
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, VQ_F64, 0, NULL), 0);
    *(double *)vq_tensor_data(t) = v;
    return t;
}

struct feeds {
    vq_feed f[5];
};

static struct feeds feeds_for(double n)
{
    vq_tensor *x;
    cr_assert_eq(vq_tensor_new(&x, VQ_F64, 1, (int64_t[]){3}), 0);
    double *d = vq_tensor_data(x);
    d[0] = 1, d[1] = 2, d[2] = 3;
    return (struct feeds){
        {{"n", scalar(n)}, {"one", scalar(1)}, {"half", scalar(0.5)}, {"i0", scalar(0)}, {"x", x}}};
}

static void feeds_release(struct feeds *f)
{
    for (int k = 0; k < 5; k++)
        vq_tensor_release(f->f[k].tensor);
}

/* A finite run (n = 10) on ex, checked against the loop in C. */
static void check_finite_run(vq_exec *ex, vq_program *p)
{
    struct feeds f = feeds_for(10);
    vq_fetch out[2] = {{"xo", NULL}, {"io", NULL}};
    cr_assert_eq(vq_exec_run(ex, p, NULL, f.f, 5, out, 2), 0, "%s", vq_errmsg());
    double x[3] = {1, 2, 3}, i = 0;
    while (i < 10) {
        i += 1;
        for (int k = 0; k < 3; k++)
            x[k] = x[k] * 0.5 + i;
    }
    cr_assert_eq(*(double *)vq_tensor_data(out[1].tensor), i);
    const double *got = vq_tensor_data(out[0].tensor);
    for (int k = 0; k < 3; k++)
        cr_assert_eq(got[k], x[k], "x[%d]: %.17g, want %.17g", k, got[k], x[k]);
    vq_tensor_release(out[0].tensor);
    vq_tensor_release(out[1].tensor);
    feeds_release(&f);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

struct canceller {
    vq_exec *ex;
    int delay_ms;
    int reached; /* vq_exec_cancel's result */
};

static void *cancel_later(void *arg)
{
    struct canceller *c = arg;
    sleep_ms(c->delay_ms);
    while ((c->reached = vq_exec_cancel(c->ex)) == 0) /* the run not started yet */
        sleep_ms(1);
    return NULL;
}

static vq_engine *engine_of(int kind)
{
    vq_engine *e;
    vq_engine_opts o = {.kind = kind, .cpu_workers = 2};
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    return e;
}

/* An endless run on kind's engine, cancelled from another thread: the
 * error, the message, then a finite run on the same executor. */
static void cancel_sync(int kind, bool nested)
{
    vq_engine *e = engine_of(kind);
    vq_exec *ex;
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    vq_program *p = loop_program(nested);
    struct canceller c = {ex, 30, -1};
    pthread_t th;
    pthread_create(&th, NULL, cancel_later, &c);
    struct feeds f = feeds_for(INFINITY);
    vq_fetch out[2] = {{"xo", NULL}, {"io", NULL}};
    int rc = vq_exec_run(ex, p, NULL, f.f, 5, out, 2);
    pthread_join(th, NULL);
    cr_assert_eq(rc, VQ_ECANCELED, "run: %d (%s)", rc, vq_errmsg());
    /* where it stopped: the while, or an op of a loop's body */
    cr_assert(strstr(vq_errmsg(), "cancelled") &&
                  (strstr(vq_errmsg(), "while") || strstr(vq_errmsg(), "block ")),
              "%s", vq_errmsg());
    cr_assert_null(out[0].tensor);
    cr_assert_null(out[1].tensor);
    cr_assert_geq(c.reached, 1);
    feeds_release(&f);
    check_finite_run(ex, p);
    vq_program_free(p);
    vq_exec_free(ex);
    vq_engine_free(e);
}

Test(cancel, endless_while_threaded)
{
    cancel_sync(VQ_ENGINE_THREADED, false);
}

Test(cancel, endless_while_naive)
{
    cancel_sync(VQ_ENGINE_NAIVE, false);
}

Test(cancel, endless_nested_while_threaded)
{
    cancel_sync(VQ_ENGINE_THREADED, true);
}

Test(cancel, endless_nested_while_naive)
{
    cancel_sync(VQ_ENGINE_NAIVE, true);
}

struct async_done {
    atomic_int calls;
    atomic_int err[4];
};

static void on_done(void *user, int err)
{
    struct async_done *d = user;
    int k = atomic_fetch_add(&d->calls, 1);
    if (k < 4)
        atomic_store(&d->err[k], err);
}

Test(cancel, async_runs_in_flight_all_end)
{
    vq_engine *e = engine_of(VQ_ENGINE_THREADED);
    vq_exec *ex;
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    vq_program *p = loop_program(false);
    struct async_done d = {0};
    struct feeds f[3];
    vq_fetch out[3][2];
    for (int k = 0; k < 3; k++) {
        f[k] = feeds_for(INFINITY);
        out[k][0] = (vq_fetch){"xo", NULL};
        out[k][1] = (vq_fetch){"io", NULL};
        cr_assert_eq(vq_exec_run_async(ex, p, NULL, f[k].f, 5, out[k], 2, on_done, &d), 0, "%s",
                     vq_errmsg());
    }
    sleep_ms(20);
    cr_assert_eq(atomic_load(&d.calls), 0, "an endless run ended by itself");
    cr_assert_eq(vq_exec_cancel(ex), 3);
    /* vq_exec_free waits for the runs: they end, it returns */
    vq_exec_free(ex);
    cr_assert_eq(atomic_load(&d.calls), 3);
    for (int k = 0; k < 3; k++) {
        cr_assert_eq(atomic_load(&d.err[k]), VQ_ECANCELED);
        cr_assert_null(out[k][0].tensor);
        feeds_release(&f[k]);
    }
    cr_assert_eq(vq_exec_cancel(NULL), VQ_EINVAL);
    vq_program_free(p);
    vq_engine_free(e);
}

Test(cancel, nothing_in_flight)
{
    vq_engine *e = engine_of(VQ_ENGINE_THREADED);
    vq_exec *ex;
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    cr_assert_eq(vq_exec_cancel(ex), 0);
    vq_program *p = loop_program(false);
    check_finite_run(ex, p); /* a cancel before the run does not reach it */
    vq_program_free(p);
    vq_exec_free(ex);
    vq_engine_free(e);
}

static void deadline(int kind, bool nested)
{
    vq_engine *e = engine_of(kind);
    vq_exec *ex;
    vq_exec_opts o = {.timeout_ms = 50};
    cr_assert_eq(vq_exec_new(&ex, e, &o), 0);
    vq_program *p = loop_program(nested);
    struct feeds f = feeds_for(INFINITY);
    vq_fetch out[2] = {{"xo", NULL}, {"io", NULL}};
    int rc = vq_exec_run(ex, p, NULL, f.f, 5, out, 2);
    cr_assert_eq(rc, VQ_ETIMEDOUT, "run: %d (%s)", rc, vq_errmsg());
    cr_assert(strstr(vq_errmsg(), "deadline") && strstr(vq_errmsg(), "timeout_ms 50") &&
                  (strstr(vq_errmsg(), "while") || strstr(vq_errmsg(), "block ")),
              "%s", vq_errmsg());
    cr_assert_null(out[0].tensor);
    feeds_release(&f);
    check_finite_run(ex, p); /* well within 50 ms */
    vq_program_free(p);
    vq_exec_free(ex);
    vq_engine_free(e);
}

Test(cancel, deadline_threaded)
{
    deadline(VQ_ENGINE_THREADED, false);
}

Test(cancel, deadline_naive_nested)
{
    deadline(VQ_ENGINE_NAIVE, true);
}

Test(cancel, bad_timeout)
{
    vq_engine *e = engine_of(VQ_ENGINE_THREADED);
    vq_exec *ex = NULL;
    vq_exec_opts o = {.timeout_ms = -1};
    cr_assert_eq(vq_exec_new(&ex, e, &o), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "timeout_ms"));
    vq_engine_free(e);
}

Test(cancel, strerror_names_the_codes)
{
    cr_assert(strstr(vq_strerror(VQ_ETIMEDOUT), "VQ_ETIMEDOUT"), "%s", vq_strerror(VQ_ETIMEDOUT));
    cr_assert(strstr(vq_strerror(VQ_ECANCELED), "VQ_ECANCELED"));
}

/* `varq run --timeout`: the endless loop saved as a program, its feeds as
 * .npy files; the tool ends the run, exits 1 and says why. */
Test(cancel, cli_timeout)
{
    const char *bin = getenv("VARQ_BIN");
    cr_assert_not_null(bin, "VARQ_BIN (the varq tool) is not set");
    char dir[] = "/tmp/varq-cancel-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char path[256], cmd[2048];
    vq_program *p = loop_program(false);
    snprintf(path, sizeof path, "%s/loop.pb", dir);
    cr_assert_eq(vq_program_save(p, path), 0, "%s", vq_errmsg());
    vq_program_free(p);
    struct feeds f = feeds_for(INFINITY);
    int len = snprintf(cmd, sizeof cmd, "%s run %s --timeout 0.2", bin, path);
    for (int k = 0; k < 5; k++) {
        snprintf(path, sizeof path, "%s/%s.npy", dir, f.f[k].name);
        cr_assert_eq(vq_npy_save(path, f.f[k].tensor), 0, "%s", vq_errmsg());
        len += snprintf(cmd + len, sizeof cmd - (size_t)len, " --feed %s=%s", f.f[k].name, path);
    }
    feeds_release(&f);
    snprintf(cmd + len, sizeof cmd - (size_t)len, " --fetch io 2>%s/err", dir);
    int status = system(cmd);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 1, "%s: status %d", cmd, status);
    snprintf(path, sizeof path, "%s/err", dir);
    FILE *e = fopen(path, "r");
    cr_assert_not_null(e);
    char msg[1024] = "";
    size_t n = fread(msg, 1, sizeof msg - 1, e);
    msg[n] = '\0';
    fclose(e);
    cr_assert(strstr(msg, "deadline") && strstr(msg, "timeout_ms 200"), "%s", msg);
    /* a bad value is a usage error */
    snprintf(cmd, sizeof cmd, "%s run %s/loop.pb --timeout -1 2>/dev/null", bin, dir);
    status = system(cmd);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 2, "status %d", status);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
