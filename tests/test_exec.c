/* The executor: programs built with the builder run on the engine and give
 * what the same ops give when run directly, with identical bits on every
 * engine; the plan cache; release by reference count (peak memory); async
 * runs in flight; errors naming the op; a push the engine cannot take.
 * (Scopes are test_scope.c.) */
#include "fault.h" /* vq__fault_arm */
#include "leakcheck.h"
#include "opcheck.h"
#include "programs.h"

#include <criterion/criterion.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

TestSuite(exec, .fini = leak_check);

#define N(...) (int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

static vq_engine *engine(int kind, int workers)
{
    vq_engine *e;
    vq_engine_opts o = {.kind = kind, .cpu_workers = workers};
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    return e;
}

static vq_tensor *direct_mlp(vq_tensor *x, vq_tensor *w, vq_tensor *b)
{
    vq_tensor *in[2] = {x, w};
    vq_tensor *xw = oc_run1("matmul", in, 2, NULL, 0);
    in[0] = xw;
    in[1] = b;
    vq_tensor *z = oc_run1("add", in, 2, NULL, 0);
    vq_tensor *r = oc_run1("relu", &z, 1, NULL, 0);
    vq_attr half = VQ_ATTR_F("scale", 0.5);
    vq_tensor *s = oc_run1("scale", &r, 1, &half, 1);
    vq_tensor *y = oc_run1("softmax", &s, 1, NULL, 0);
    vq_tensor_release(xw);
    vq_tensor_release(z);
    vq_tensor_release(r);
    vq_tensor_release(s);
    return y;
}

/* mlp_program run once on e: an executor (options o), a scope holding
 * copies of w and b and a copy of x fed (a tensor belongs to one engine:
 * each gets its own copies); y must have want's bits. */
struct mlp_run {
    vq_exec *ex;
    vq_scope *s;
    vq_tensor *xk;
    vq_fetch fetch;
};

static void mlp_run(struct mlp_run *r, vq_engine *e, const vq_exec_opts *o, vq_program *p,
                    vq_tensor *w, vq_tensor *b, vq_tensor *x, vq_tensor *want)
{
    vq_tensor *wk = tensor_of(VQ_F64, 2, vq_tensor_shape(w), vq_tensor_data(w));
    vq_tensor *bk = tensor_of(VQ_F64, 1, vq_tensor_shape(b), vq_tensor_data(b));
    cr_assert_eq(vq_scope_new(&r->s), 0);
    cr_assert_eq(vq_scope_set(r->s, "w", wk), 0);
    cr_assert_eq(vq_scope_set(r->s, "b", bk), 0);
    vq_tensor_release(wk);
    vq_tensor_release(bk);
    cr_assert_eq(vq_exec_new(&r->ex, e, o), 0);
    r->xk = tensor_of(VQ_F64, 2, vq_tensor_shape(x), vq_tensor_data(x));
    vq_feed feed = {"x", r->xk};
    r->fetch = (vq_fetch){"y", NULL};
    cr_assert_eq(vq_exec_run(r->ex, p, r->s, &feed, 1, &r->fetch, 1), 0, "%s", vq_errmsg());
    assert_same_bits(r->fetch.tensor, want);
}

static void mlp_run_free(struct mlp_run *r)
{
    vq_tensor_release(r->fetch.tensor);
    vq_tensor_release(r->xk);
    vq_exec_free(r->ex);
    vq_scope_free(r->s);
}

Test(exec, program_gives_the_direct_results_with_identical_bits_on_every_engine)
{
    uint64_t rng = oc_seed("exec");
    vq_program *p = mlp_program();
    int64_t ws[2] = {5, 3}, bs[1] = {3};
    vq_tensor *w = oc_rand(&rng, VQ_F64, 2, ws, -1, 1), *b = oc_rand(&rng, VQ_F64, 1, bs, -1, 1);
    int kinds[4][2] = {{VQ_ENGINE_THREADED, 1}, {VQ_ENGINE_THREADED, 2},
                       {VQ_ENGINE_THREADED, 8}, {VQ_ENGINE_NAIVE, 0}};
    for (int64_t batch = 1; batch <= 7; batch += 3) {
        int64_t xs[2] = {batch, 5};
        vq_tensor *x = oc_rand(&rng, VQ_F64, 2, xs, -2, 2);
        vq_tensor *want = direct_mlp(x, w, b);
        for (int k = 0; k < 4; k++) {
            vq_engine *e = engine(kinds[k][0], kinds[k][1]);
            struct mlp_run r;
            mlp_run(&r, e, NULL, p, w, b, x, want);
            mlp_run_free(&r);
            vq_engine_free(e);
        }
        release_tensors((vq_tensor *[]){want, x}, 2);
    }
    release_tensors((vq_tensor *[]){w, b}, 2);
    vq_program_free(p);
}

struct fixture {
    vq_engine *e;
    vq_exec *ex;
    vq_scope *s;
};

static struct fixture fixture(int cache)
{
    struct fixture f;
    f.e = engine(VQ_ENGINE_THREADED, 2);
    vq_exec_opts o = {.cache_size = cache};
    cr_assert_eq(vq_exec_new(&f.ex, f.e, &o), 0);
    cr_assert_eq(vq_scope_new(&f.s), 0);
    return f;
}

static void fixture_free(struct fixture *f)
{
    vq_exec_free(f->ex);
    vq_scope_free(f->s);
    vq_engine_free(f->e);
}

static vq_exec_stats stats(vq_exec *ex)
{
    vq_exec_stats st;
    cr_assert_eq(vq_exec_get_stats(ex, &st), 0);
    return st;
}

/* out = x * 2 + 1 (and also u = relu(x)). */
static vq_program *small_program(double scale)
{
    vq_program *p = new_program();
    declare_vars(p, 0, "f32[4] x out u");
    vq_attr a[2] = {VQ_ATTR_F("scale", scale), VQ_ATTR_F("bias", 1)};
    op(p, "scale", NAMES("x"), 1, NAMES("out"), 1, a, 2);
    op(p, "relu", NAMES("x"), 1, NAMES("u"), 1, NULL, 0);
    return p;
}

static vq_tensor *vec4(float a, float b, float c, float d)
{
    int64_t s[1] = {4};
    float v[4] = {a, b, c, d};
    vq_tensor *t = tensor_of(VQ_F32, 1, s, v);
    return t;
}

static int run_small(struct fixture *f, vq_program *p, const char *fetch_name, float *first)
{
    vq_tensor *x = vec4(1, -2, 3, -4);
    vq_feed feed = {"x", x};
    vq_fetch fetch = {fetch_name, NULL};
    int rc = vq_exec_run(f->ex, p, f->s, &feed, 1, &fetch, 1);
    if (rc == 0) {
        *first = ((float *)vq_tensor_data(fetch.tensor))[0];
        vq_tensor_release(fetch.tensor);
    }
    vq_tensor_release(x);
    return rc;
}

Test(exec, the_plan_cache_hits_on_the_same_program_and_misses_on_any_change)
{
    struct fixture f = fixture(4);
    vq_program *p = small_program(2), *same = small_program(2), *other = small_program(3);
    float v;
    cr_assert_eq(run_small(&f, p, "out", &v), 0, "%s", vq_errmsg());
    cr_assert_eq(v, 3);
    cr_assert_eq(stats(f.ex).prepares, 1);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(run_small(&f, p, "out", &v), 0);
    cr_assert_eq(run_small(&f, same, "out", &v), 0, "an equal program built again");
    cr_assert_eq(stats(f.ex).prepares, 1, "no preparation on a hit");
    cr_assert_eq(stats(f.ex).cache_hits, 6);
    cr_assert_eq(run_small(&f, other, "out", &v), 0);
    cr_assert_eq(v, 4);
    cr_assert_eq(stats(f.ex).prepares, 2, "a changed attribute misses");
    cr_assert_eq(run_small(&f, p, "u", &v), 0);
    cr_assert_eq(v, 1);
    cr_assert_eq(stats(f.ex).prepares, 3, "a different fetch list misses");
    vq_program_add_var(p, 0, "extra", VQ_F32, 0, NULL, false);
    cr_assert_eq(run_small(&f, p, "out", &v), 0);
    cr_assert_eq(stats(f.ex).prepares, 4, "a changed program misses");
    cr_assert_eq(stats(f.ex).runs, 10);
    vq_program_free(p);
    vq_program_free(same);
    vq_program_free(other);
    fixture_free(&f);
}

Test(exec, the_cache_evicts_the_least_recently_used_plan)
{
    struct fixture f = fixture(2);
    vq_program *a = small_program(2), *b = small_program(3), *c = small_program(4);
    float v;
    cr_assert_eq(run_small(&f, a, "out", &v), 0);
    cr_assert_eq(run_small(&f, b, "out", &v), 0);
    cr_assert_eq(run_small(&f, a, "out", &v), 0); /* a is now the most recent */
    cr_assert_eq(run_small(&f, c, "out", &v), 0); /* evicts b */
    cr_assert_eq(stats(f.ex).prepares, 3);
    cr_assert_eq(run_small(&f, a, "out", &v), 0);
    cr_assert_eq(stats(f.ex).prepares, 3);
    cr_assert_eq(run_small(&f, b, "out", &v), 0);
    cr_assert_eq(stats(f.ex).prepares, 4);
    vq_program_free(a);
    vq_program_free(b);
    vq_program_free(c);
    fixture_free(&f);
}

Test(exec, a_long_chain_of_temporaries_peaks_at_a_few_tensors)
{
    struct fixture f = fixture(0);
    int64_t s[1] = {1 << 18}; /* 1 MiB of f32 */
    vq_program *p = program_with_vars("f32[262144] t0 w*");
    char name[32], prev[32] = "t0";
    for (int i = 1; i <= 1000; i++) {
        snprintf(name, sizeof name, "t%d", i);
        var(p, name, VQ_F32, 1, s, false);
        vq_attr a = VQ_ATTR_F("scale", 1.0);
        vq_attr b = VQ_ATTR_F("bias", 1.0);
        vq_attr ab[2] = {a, b};
        const char *in[1] = {prev};
        const char *out[1] = {name};
        op(p, "scale", in, 1, out, 1, ab, 2);
        strcpy(prev, name);
    }
    /* w = w + t1000: a persistable written in place at the end. */
    op(p, "add", NAMES("w", "t1000"), 2, NAMES("w"), 1, NULL, 0);
    vq_tensor *w = tensor_new(VQ_F32, 1, s);
    cr_assert_eq(vq_scope_set(f.s, "w", w), 0);
    vq_tensor *t0 = tensor_new(VQ_F32, 1, s);
    vq_feed feed = {"t0", t0};
    vq_fetch fetch[2] = {{"t1000", NULL}, {"t500", NULL}};
    for (int run = 1; run <= 2; run++) {
        cr_assert_eq(vq_exec_run(f.ex, p, f.s, &feed, 1, fetch, 2), 0, "%s", vq_errmsg());
        size_t peak = stats(f.ex).last_peak_bytes;
        cr_log_info("run %d: peak %zu bytes for 1000 temporaries of 1 MiB", run, peak);
        cr_assert_lt(peak, 8u << 20, "peak %zu bytes", peak);
        cr_assert_eq(((float *)vq_tensor_data(fetch[0].tensor))[7], 1000.0f);
        cr_assert_eq(((float *)vq_tensor_data(fetch[1].tensor))[7], 500.0f,
                     "a fetched temporary survives");
        cr_assert_eq(vq_tensor_wait(w), 0);
        cr_assert_eq(((float *)vq_tensor_data(w))[3], 1000.0f * run, "persistable updated");
        vq_tensor_release(fetch[0].tensor);
        vq_tensor_release(fetch[1].tensor);
    }
    vq_tensor_release(t0);
    vq_tensor_release(w);
    vq_program_free(p);
    fixture_free(&f);
}

/* Two persistable vars bound to one scope tensor share its engine var: the
 * segments' map (graph/segments.c) keys them as one, and the updates through both
 * names apply in program order. */
Test(exec, two_persistable_names_of_one_tensor_update_it_in_program_order)
{
    struct fixture f = fixture(0);
    vq_program *p = new_program();
    int64_t s[1] = {4};
    declare_vars(p, 0, "f32[4] x t1 t2 t3 w* v*");
    vq_attr ab[2] = {VQ_ATTR_F("scale", 1.0), VQ_ATTR_F("bias", 1.0)};
    op(p, "scale", NAMES("x"), 1, NAMES("t1"), 1, ab, 2);       /* x + 1 */
    op(p, "add", NAMES("w", "t1"), 2, NAMES("w"), 1, NULL, 0);  /* z += x + 1 */
    op(p, "scale", NAMES("t1"), 1, NAMES("t2"), 1, ab, 2);      /* x + 2 */
    op(p, "mul", NAMES("v", "t2"), 2, NAMES("v"), 1, NULL, 0);  /* z *= x + 2 */
    op(p, "add", NAMES("t2", "w"), 2, NAMES("t3"), 1, NULL, 0); /* reads z after */
    vq_tensor *z = tensor_new(VQ_F32, 1, s);
    cr_assert_eq(vq_scope_set(f.s, "w", z), 0);
    cr_assert_eq(vq_scope_set(f.s, "v", z), 0);
    float xv[4] = {0, 1, 2, 3};
    vq_tensor *x = tensor_of(VQ_F32, 1, s, xv);
    vq_feed feed = {"x", x};
    vq_fetch fetch = {"t3", NULL};
    float want[4] = {0, 0, 0, 0};
    for (int run = 1; run <= 3; run++) {
        cr_assert_eq(vq_exec_run(f.ex, p, f.s, &feed, 1, &fetch, 1), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_tensor_wait(z), 0);
        for (int i = 0; i < 4; i++) {
            want[i] = (want[i] + xv[i] + 1) * (xv[i] + 2);
            cr_assert_float_eq(((float *)vq_tensor_data(z))[i], want[i], 1e-3, "run %d [%d]", run,
                               i);
            cr_assert_float_eq(((float *)vq_tensor_data(fetch.tensor))[i], xv[i] + 2 + want[i],
                               1e-3, "run %d [%d]", run, i);
        }
        vq_tensor_release(fetch.tensor);
    }
    vq_tensor_release(x);
    vq_tensor_release(z);
    vq_program_free(p);
    fixture_free(&f);
}

struct async_result {
    atomic_int calls;
    int err;
};

static void on_done(void *user, int err)
{
    struct async_result *r = user;
    r->err = err;
    atomic_fetch_add(&r->calls, 1);
}

Test(exec, sixteen_async_runs_in_flight_each_report_once_with_their_own_results)
{
    struct fixture f = fixture(0);
    vq_program *p = small_program(2);
    enum { RUNS = 16 };
    vq_tensor *x[RUNS];
    vq_fetch fetch[RUNS][1];
    struct async_result res[RUNS];
    for (int i = 0; i < RUNS; i++) {
        x[i] = vec4((float)i, 0, 0, 0);
        vq_feed feed = {"x", x[i]};
        fetch[i][0] = (vq_fetch){"out", NULL};
        atomic_init(&res[i].calls, 0);
        res[i].err = 1;
        cr_assert_eq(vq_exec_run_async(f.ex, p, f.s, &feed, 1, fetch[i], 1, on_done, &res[i]),
                     0, "%s", vq_errmsg());
    }
    cr_assert_eq(vq_wait_all(f.e), 0);
    for (int i = 0; i < RUNS; i++) {
        cr_assert_eq(atomic_load(&res[i].calls), 1, "run %d called back %d times", i,
                     atomic_load(&res[i].calls));
        cr_assert_eq(res[i].err, 0);
        cr_assert_eq(((float *)vq_tensor_data(fetch[i][0].tensor))[0], 2.0f * i + 1);
        vq_tensor_release(fetch[i][0].tensor);
        vq_tensor_release(x[i]);
    }
    cr_assert_eq(stats(f.ex).prepares, 1);
    vq_program_free(p);
    fixture_free(&f);
}

/* An i32[2] feed of div_program. */
static vq_tensor *div_feed(int32_t a, int32_t b)
{
    int64_t s[1] = {2};
    int32_t v[2] = {a, b};
    return tensor_of(VQ_I32, 1, s, v);
}

Test(exec, a_failing_op_fails_the_run_with_its_name_and_the_plan_stays_usable)
{
    struct fixture f = fixture(0);
    vq_program *p = div_program();
    int64_t s[1] = {2};
    int32_t av[2] = {6, 8}, zero[2] = {1, 0}, two[2] = {2, 2};
    vq_tensor *a, *bz, *b2;
    a = tensor_of(VQ_I32, 1, s, av);
    bz = tensor_of(VQ_I32, 1, s, zero);
    b2 = tensor_of(VQ_I32, 1, s, two);
    vq_feed feeds[2] = {{"a", a}, {"b", bz}};
    vq_fetch fetch = {"r", NULL};
    cr_assert_eq(vq_exec_run(f.ex, p, f.s, feeds, 2, &fetch, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "op 0 (div): div: integer division by zero"), "%s",
              vq_errmsg());
    cr_assert_null(fetch.tensor);
    feeds[1].tensor = b2;
    cr_assert_eq(vq_exec_run(f.ex, p, f.s, feeds, 2, &fetch, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(((int32_t *)vq_tensor_data(fetch.tensor))[1], 12);
    vq_tensor_release(fetch.tensor);
    vq_tensor_release(a);
    vq_tensor_release(bz);
    vq_tensor_release(b2);
    vq_program_free(p);
    fixture_free(&f);
}

/* An error names the call the user made, preparation's too. */
Test(exec, errors_name_the_call_made)
{
    struct fixture f = fixture(0);
    vq_program *p = small_program(2);
    struct async_result r = {0};
    vq_fetch fetch = {"nope", NULL};
    cr_assert_eq(vq_exec_run_async(f.ex, NULL, f.s, NULL, 0, NULL, 0, on_done, &r), VQ_EINVAL);
    cr_assert_str_eq(vq_errmsg(), "vq_exec_run_async: bad argument");
    cr_assert_eq(vq_exec_run(f.ex, p, f.s, NULL, 0, &fetch, 1), VQ_EINVAL);
    cr_assert_str_eq(vq_errmsg(), "vq_exec_run: fetch nope: the program has no such var");
    cr_assert_eq(vq_exec_run_async(f.ex, p, f.s, NULL, 0, &fetch, 1, on_done, &r), VQ_EINVAL);
    cr_assert_str_eq(vq_errmsg(), "vq_exec_run_async: fetch nope: the program has no such var");
    const char *nope = "nope";
    cr_assert_eq(vq_exec_prepare(f.ex, p, f.s, NULL, 0, &nope, 1), VQ_EINVAL);
    cr_assert_str_eq(vq_errmsg(), "vq_exec_prepare: fetch nope: the program has no such var");
    cr_assert_eq(atomic_load(&r.calls), 0);
    vq_program_free(p);
    fixture_free(&f);
}

static void expect_prepare_error(struct fixture *f, vq_program *p, const char *const *feeds,
                                 int nfeeds, const char *fetch, const char *needle)
{
    int rc = vq_exec_prepare(f->ex, p, f->s, feeds, nfeeds, &fetch, 1);
    cr_assert_lt(rc, 0, "prepared a bad program (expected \"%s\")", needle);
    cr_assert(strstr(vq_errmsg(), needle), "message \"%s\" lacks \"%s\"", vq_errmsg(), needle);
}

Test(exec, bad_programs_are_errors_naming_the_op_and_var)
{
    struct fixture f = fixture(0);
    vq_program *p = new_program();
    int64_t s2[2] = {2, 3}, s3[2] = {4, 5}, s1[1] = {3};
    var(p, "x", VQ_F32, 2, s2, false);
    var(p, "y", VQ_F32, 2, s3, false);
    declare_vars(p, 0, "f32[2,3] t z");
    var(p, "k", VQ_F64, 1, s1, false);
    var(p, "w", VQ_F32, 2, s2, true);
    op(p, "matmul", NAMES("x", "y"), 2, NAMES("z"), 1, NULL, 0);
    expect_prepare_error(&f, p, NAMES("x", "y"), 2, "z",
                         "op 0: matmul: input Y (slot 1)");
    vq_program_free(p);

    cr_assert_eq(vq_program_new(&p), 0);
    declare_vars(p, 0, "f32[2,3] x t z w*");
    op(p, "relu", NAMES("t"), 1, NAMES("z"), 1, NULL, 0);
    expect_prepare_error(&f, p, NAMES("x"), 1, "z",
                         "op 0 (relu): reads var t, which no earlier op writes and no feed");
    vq_program_free(p);

    cr_assert_eq(vq_program_new(&p), 0);
    declare_vars(p, 0, "f32[2,3] x z w*");
    op(p, "add", NAMES("x", "w"), 2, NAMES("z"), 1, NULL, 0);
    expect_prepare_error(&f, p, NAMES("x"), 1, "z",
                         "op 0 (add): reads var w, which is persistable but is not in the scope");
    expect_prepare_error(&f, p, NAMES("nope"), 1, "z", "feed nope: the program has no such var");
    vq_program_free(p);

    cr_assert_eq(vq_program_new(&p), 0);
    var(p, "x", VQ_F32, 2, s2, false);
    var(p, "k", VQ_F64, 1, s1, false);
    op(p, "relu", NAMES("x"), 1, NAMES("k"), 1, NULL, 0);
    expect_prepare_error(&f, p, NAMES("x"), 1, "k",
                         "op 0 (relu): output Out (slot 0) var k: inferred f32[2,3], declared "
                         "f64[3]");
    vq_program_free(p);
    cr_assert_eq(stats(f.ex).prepares, 0);
    fixture_free(&f);
}

Test(exec, feeds_of_the_wrong_shape_are_refused)
{
    struct fixture f = fixture(0);
    vq_program *p = small_program(2);
    int64_t s[1] = {5};
    vq_tensor *x = tensor_new(VQ_F32, 1, s);
    run_refused(f.ex, p, f.s, "x", x, "out", "feed x: got f32[5], the var is f32[4]");
    vq_tensor_release(x);
    vq_program_free(p);
    fixture_free(&f);
}

Test(exec, a_startup_program_creates_persistables_that_the_main_program_updates)
{
    struct fixture f = fixture(0);
    vq_program *startup, *main_p;
    int64_t s[1] = {3};
    cr_assert_eq(vq_program_new(&startup), 0);
    var(startup, "w", VQ_F32, 1, s, true);
    vq_attr fill[2] = {VQ_ATTR_IS("shape", s, 1), VQ_ATTR_F("value", 2)};
    op(startup, "fill_constant", NULL, 0, NAMES("w"), 1, fill, 2);
    cr_assert_eq(vq_program_new(&main_p), 0);
    declare_vars(main_p, 0, "f32[3] w* g");
    vq_attr lr = VQ_ATTR_F("learning_rate", 0.5);
    op(main_p, "sgd", NAMES("w", "g"), 2, NAMES("w"), 1, &lr, 1);
    cr_assert_eq(vq_exec_run(f.ex, startup, f.s, NULL, 0, NULL, 0), 0, "%s", vq_errmsg());
    vq_tensor *g;
    int64_t gs[1] = {3};
    float gv[3] = {1, 2, 3};
    g = tensor_of(VQ_F32, 1, gs, gv);
    vq_feed feed = {"g", g};
    vq_fetch fetch = {"w", NULL};
    for (int i = 0; i < 3; i++) {
        if (i)
            vq_tensor_release(fetch.tensor);
        cr_assert_eq(vq_exec_run(f.ex, main_p, f.s, &feed, 1, &fetch, 1), 0, "%s", vq_errmsg());
    }
    /* w = 2 - 3 * 0.5 * g */
    float *w = vq_tensor_data(fetch.tensor);
    cr_assert_eq(w[0], 0.5f);
    cr_assert_eq(w[2], -2.5f);
    vq_tensor_release(fetch.tensor);
    /* The fetch was a snapshot; the scope holds the live tensor. */
    cr_assert_not_null(vq_scope_get(f.s, "w"));
    vq_tensor_release(g);
    vq_program_free(startup);
    vq_program_free(main_p);
    fixture_free(&f);
}

Test(exec, gpu_tensors_are_refused_as_feeds)
{
    setenv("VARQ_GPU_BACKEND", "emulated", 1); /* this test's own process */
    struct fixture f = fixture(0);
    vq_program *p = small_program(2);
    int64_t s[1] = {4};
    vq_tensor *x;
    cr_assert_eq(vq_tensor_new_on(&x, (vq_ctx){VQ_DEV_GPU, 0}, VQ_F32, 1, s), 0, "%s",
                 vq_errmsg());
    run_refused(f.ex, p, f.s, "x", x, "out", "feed x: the tensor is on GPU 0");
    vq_tensor_release(x);
    vq_program_free(p);
    fixture_free(&f);
}

Test(exec, a_feed_whose_imperative_op_failed_fails_the_run_without_hanging)
{
    struct fixture f = fixture(0);
    vq_program *p = program_of("i32[2] q r", "add q q -> r");
    vq_tensor *x = div_feed(4, 6), *y = div_feed(1, 0), *q[1] = {NULL};
    vq_tensor *in[2] = {x, y};
    cr_assert_eq(vq_op_run(f.e, "div", in, 2, q, 1, NULL, 0), 0); /* fails in the kernel */
    run_refused(f.ex, p, f.s, "q", q[0], "r", "feed q: div: integer division by zero");
    vq_feed feed = {"q", q[0]};
    vq_fetch fetch = {"r", NULL};
    /* The error was reported and cleared; the tensor (garbage, but valid)
     * and the plan work again. */
    cr_assert_eq(vq_exec_run(f.ex, p, f.s, &feed, 1, &fetch, 1), 0, "%s", vq_errmsg());
    vq_tensor_release(fetch.tensor);
    vq_tensor_release(x);
    vq_tensor_release(y);
    vq_tensor_release(q[0]);
    vq_program_free(p);
    fixture_free(&f);
}

Test(exec, a_failed_imperative_op_on_a_scope_tensor_does_not_stop_runs)
{
    struct fixture f = fixture(0);
    vq_program *p = program_of("i32[2] w* r", "add w w -> r");
    vq_tensor *w = div_feed(4, 6), *y = div_feed(1, 0);
    cr_assert_eq(vq_scope_set(f.s, "w", w), 0);
    vq_tensor *in[2] = {w, y}, *out[1] = {w};
    cr_assert_eq(vq_op_run(f.e, "div", in, 2, out, 1, NULL, 0), 0); /* fails in the kernel */
    for (int i = 0; i < 3; i++) { /* used to skip the run's ops and never return */
        vq_fetch fetch = {"r", NULL};
        cr_assert_eq(vq_exec_run(f.ex, p, f.s, NULL, 0, &fetch, 1), 0, "%s", vq_errmsg());
        vq_tensor_release(fetch.tensor);
    }
    cr_assert_eq(vq_tensor_wait(w), VQ_EINVAL, "the failure is still w's to report");
    cr_assert(strstr(vq_errmsg(), "div: integer division by zero"), "%s", vq_errmsg());
    vq_tensor_release(w);
    vq_tensor_release(y);
    vq_program_free(p);
    fixture_free(&f);
}

/* relu(x) -> x, scale(x) -> x with x fed; and a while whose body writes
 * its carried value in place, started from a fed tensor: the caller's
 * tensor never changes (copy on write), the fetches are the results. On
 * the naive engine and threaded, and on the emulated GPU (a device feed is
 * used as it is, so it must not be written either). */
Test(exec, fed_tensors_are_never_written_by_in_place_ops)
{
    vq_program *p = new_program();
    int64_t s[1] = {4};
    var(p, "x", VQ_F32, 1, s, false);
    op(p, "relu", NAMES("x"), 1, NAMES("x"), 1, NULL, 0);
    vq_attr a[2] = {VQ_ATTR_F("scale", 2), VQ_ATTR_F("bias", 1)};
    op(p, "scale", NAMES("x"), 1, NAMES("x"), 1, a, 2);
    const struct {
        int kind;
        bool gpu;
    } setups[] = {{VQ_ENGINE_NAIVE, false}, {VQ_ENGINE_THREADED, false},
                  {VQ_ENGINE_THREADED, true}};
    for (int k = 0; k < 3; k++) {
        if (setups[k].gpu)
            setenv("VARQ_GPU_BACKEND", "emulated", 0);
        vq_engine *e = engine(setups[k].kind, 2);
        vq_exec *ex;
        vq_exec_opts o = {.device = {setups[k].gpu ? VQ_DEV_GPU : VQ_DEV_CPU, 0}};
        cr_assert_eq(vq_exec_new(&ex, e, &o), 0, "%s", vq_errmsg());
        vq_scope *sc;
        cr_assert_eq(vq_scope_new(&sc), 0);
        vq_tensor *x = vec4(1, -2, 3, -4), *fed = x;
        if (setups[k].gpu) { /* fed as a tensor on the device */
            cr_assert_eq(vq_tensor_copy_to(e, x, (vq_ctx){VQ_DEV_GPU, 0}, &fed), 0, "%s",
                         vq_errmsg());
            cr_assert_eq(vq_tensor_wait(fed), 0);
        }
        for (int run = 0; run < 3; run++) {
            vq_feed feed = {"x", fed};
            vq_fetch fetch = {"x", NULL};
            cr_assert_eq(vq_exec_run(ex, p, sc, &feed, 1, &fetch, 1), 0, "%s", vq_errmsg());
            vq_tensor *got = fetch.tensor, *host = got;
            if (setups[k].gpu) {
                cr_assert_eq(vq_tensor_copy_to(e, got, (vq_ctx){VQ_DEV_CPU, 0}, &host), 0);
                cr_assert_eq(vq_tensor_wait(host), 0);
            }
            const float *g = vq_tensor_data(host);
            const float want[4] = {3, 1, 7, 1};
            for (int i = 0; i < 4; i++)
                cr_assert_eq(g[i], want[i], "setup %d run %d [%d]: %g", k, run, i, g[i]);
            if (host != got)
                vq_tensor_release(host);
            vq_tensor_release(got);
        }
        vq_tensor *check = fed;
        if (setups[k].gpu) {
            cr_assert_eq(vq_tensor_copy_to(e, fed, (vq_ctx){VQ_DEV_CPU, 0}, &check), 0);
            cr_assert_eq(vq_tensor_wait(check), 0);
        }
        const float *c = vq_tensor_data(check);
        cr_assert(c[0] == 1 && c[1] == -2 && c[2] == 3 && c[3] == -4,
                  "setup %d: the fed tensor became [%g, %g, %g, %g]", k, c[0], c[1], c[2], c[3]);
        if (check != fed)
            vq_tensor_release(check);
        if (fed != x)
            vq_tensor_release(fed);
        vq_tensor_release(x);
        vq_exec_free(ex);
        vq_scope_free(sc);
        vq_engine_free(e);
    }
    vq_program_free(p);
}

/* VQ_EXEC_CHECK_NAN / VARQ_CHECK_NAN: the first NaN or infinity an op
 * writes fails the run naming the op, output, var and element. */
Test(exec, the_nan_check_names_the_op_and_var_that_made_a_nan)
{
    vq_program *p = program_of("f32[4] x y z", "relu x -> y; log x -> z");
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2);
    vq_scope *sc;
    cr_assert_eq(vq_scope_new(&sc), 0);
    vq_tensor *bad = vec4(1, -1, 2, 0), *good = vec4(1, 3, 2, 5);
    for (int mode = 0; mode < 4; mode++) {
        vq_exec_opts o = {.flags = mode == 1 ? VQ_EXEC_CHECK_NAN : 0};
        if (mode == 2)
            setenv("VARQ_CHECK_NAN", "1", 1);
        if (mode == 3)
            setenv("VARQ_CHECK_NAN", "yes", 1);
        vq_exec *ex = NULL;
        int rc = vq_exec_new(&ex, e, &o);
        unsetenv("VARQ_CHECK_NAN");
        if (mode == 3) {
            cr_assert_eq(rc, VQ_EINVAL);
            cr_assert(strstr(vq_errmsg(), "VARQ_CHECK_NAN is \"yes\""), "%s", vq_errmsg());
            continue;
        }
        cr_assert_eq(rc, 0, "%s", vq_errmsg());
        vq_feed feed = {"x", bad};
        vq_fetch f = {"z", NULL};
        rc = vq_exec_run(ex, p, sc, &feed, 1, &f, 1);
        if (mode == 0) {
            cr_assert_eq(rc, 0, "off: NaN is a value like any other");
            cr_assert(isnan(((float *)vq_tensor_data(f.tensor))[1]));
            vq_tensor_release(f.tensor);
        } else {
            cr_assert_eq(rc, VQ_EIO);
            cr_assert(strstr(vq_errmsg(), "op 1 (log): output Out var z holds NaN at element 1"),
                      "%s", vq_errmsg());
            feed.tensor = good; /* the plan stays usable */
            cr_assert_eq(vq_exec_run(ex, p, sc, &feed, 1, &f, 1), 0, "%s", vq_errmsg());
            vq_tensor_release(f.tensor);
        }
        vq_exec_free(ex);
    }
    vq_tensor_release(bad);
    vq_tensor_release(good);
    vq_scope_free(sc);
    vq_engine_free(e);
    vq_program_free(p);
}

/* The start time of the first event named name in a Chrome trace. */
static double trace_start(const char *path, const char *name)
{
    FILE *f = fopen(path, "r");
    cr_assert(f);
    char line[512], key[64];
    snprintf(key, sizeof key, "{\"name\":\"%s\"", name);
    double ts = -1;
    while (ts < 0 && fgets(line, sizeof line, f)) {
        const char *t = strstr(line, "\"ts\":");
        if (strncmp(line, key, strlen(key)) == 0 && t)
            ts = atof(t + 5);
    }
    fclose(f);
    return ts;
}

/* Writes e's profile to a new file named from path (a mkstemp template,
 * rewritten in place). */
static void profiler_dump_tmp(vq_engine *e, char *path)
{
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(vq_profiler_dump(e, path), 0);
}

/* Op priorities: two independent ops queued behind a long one on one
 * worker start in push order, or the higher-priority one first; the
 * priority is saved and dumped. */
Test(exec, op_priorities_order_ready_ops)
{
    int64_t big[2] = {400, 400}, s4[1] = {4};
    for (int prio = 0; prio < 2; prio++) {
        vq_program *p = new_program();
        declare_vars(p, 0, "f32[400,400] m mm");
        var(p, "x", VQ_F32, 1, s4, false);
        var(p, "a", VQ_F32, 1, s4, false);
        var(p, "b", VQ_F32, 1, s4, false);
        add_ops(p, 0, "matmul m m -> mm; relu x -> a; sigmoid x -> b");
        if (prio) {
            cr_assert_eq(vq_program_set_op_priority(p, 0, 2, 5), 0);
            cr_assert_eq(vq_program_set_op_priority(p, 0, 3, 5), VQ_EINVAL);
            char *text = NULL;
            size_t len = 0;
            FILE *mf = open_memstream(&text, &len);
            cr_assert_eq(vq_program_dump(p, mf), 0);
            fclose(mf);
            cr_assert(strstr(text, "op 2 sigmoid(X=x) -> (Out=b) priority 5"), "%s", text);
            free(text);
        }
        vq_engine *e;
        vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 1,
                             .flags = VQ_ENGINE_PROFILE};
        cr_assert_eq(vq_engine_new(&e, &eo), 0);
        vq_exec *ex;
        cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
        vq_scope *sc;
        cr_assert_eq(vq_scope_new(&sc), 0);
        vq_tensor *m, *x = vec4(1, -2, 3, -4);
        m = tensor_new(VQ_F32, 2, big);
        vq_feed feeds[2] = {{"m", m}, {"x", x}};
        vq_fetch f[2] = {{"a", NULL}, {"b", NULL}};
        cr_assert_eq(vq_exec_prepare(ex, p, sc, (const char *[]){"m", "x"}, 2,
                                     (const char *[]){"a", "b"}, 2), 0, "%s", vq_errmsg());
        /* Asynchronous: a synchronous run's caller would take the matmul
         * itself (vq__defer_begin) and leave the worker free to start each
         * small op as it is pushed; here the worker gets the matmul. */
        struct async_result res = {.err = 1};
        atomic_init(&res.calls, 0);
        cr_assert_eq(vq_exec_run_async(ex, p, sc, feeds, 2, f, 2, on_done, &res), 0, "%s",
                     vq_errmsg());
        cr_assert_eq(vq_wait_all(e), 0);
        cr_assert_eq(res.err, 0);
        char path[] = "/tmp/varq_prio_XXXXXX";
        profiler_dump_tmp(e, path);
        double relu = trace_start(path, "relu"), sig = trace_start(path, "sigmoid");
        unlink(path);
        cr_assert(relu >= 0 && sig >= 0);
        if (prio)
            cr_assert_lt(sig, relu, "priority 5 starts first: sigmoid %g, relu %g", sig, relu);
        else
            cr_assert_lt(relu, sig, "push order: relu %g, sigmoid %g", relu, sig);
        vq_tensor_release(f[0].tensor);
        vq_tensor_release(f[1].tensor);
        vq_tensor_release(m);
        vq_tensor_release(x);
        vq_exec_free(ex);
        vq_scope_free(sc);
        vq_engine_free(e);
        vq_program_free(p);
    }
}

/* Opens a profiler trace; key becomes the start of a line naming a span
 * called name. */
static FILE *trace_open(const char *path, const char *name, char *key, size_t cap)
{
    FILE *f = fopen(path, "r");
    cr_assert(f);
    snprintf(key, cap, "{\"name\":\"%s\"", name);
    return f;
}

/* Spans named name in a profiler trace: their count, and the first one's
 * start and end (microseconds). */
static int trace_count(const char *path, const char *name, double *start, double *end)
{
    char line[512], key[64];
    FILE *f = trace_open(path, name, key, sizeof key);
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        const char *t = strstr(line, "\"ts\":"), *d = strstr(line, "\"dur\":");
        if (strncmp(line, key, strlen(key)) || !t || !d)
            continue;
        if (n++ == 0) {
            *start = atof(t + 5);
            *end = *start + atof(d + 6);
        }
    }
    fclose(f);
    return n;
}

/* A chain of ops (matmul, add, relu, scale, softmax) runs as one engine op,
 * a segment, unless VQ_EXEC_NO_SEGMENTS: the same bits either way, and the
 * profiler still has one record per op, inside the segment's. */
Test(exec, a_chain_runs_as_one_segment_with_a_profiler_record_per_op)
{
    uint64_t rng = oc_seed("segments");
    vq_program *p = mlp_program();
    int64_t ws[2] = {5, 3}, bs[1] = {3}, xs[2] = {4, 5};
    vq_tensor *w = oc_rand(&rng, VQ_F64, 2, ws, -1, 1), *b = oc_rand(&rng, VQ_F64, 1, bs, -1, 1);
    vq_tensor *x = oc_rand(&rng, VQ_F64, 2, xs, -2, 2);
    vq_tensor *want = direct_mlp(x, w, b);
    static const char *const types[] = {"matmul", "add", "relu", "scale", "softmax"};
    for (int noseg = 0; noseg < 2; noseg++) {
        vq_engine *e;
        vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 1,
                             .flags = VQ_ENGINE_PROFILE};
        cr_assert_eq(vq_engine_new(&e, &eo), 0);
        vq_exec_opts xo = {.flags = noseg ? VQ_EXEC_NO_SEGMENTS : 0};
        struct mlp_run r;
        mlp_run(&r, e, &xo, p, w, b, x, want);
        char path[] = "/tmp/varq_seg_XXXXXX";
        profiler_dump_tmp(e, path);
        double s0 = 0, s1 = 0;
        cr_assert_eq(trace_count(path, "segment", &s0, &s1), noseg ? 0 : 1);
        for (int i = 0; i < 5; i++) {
            double t0 = 0, t1 = 0;
            cr_assert_eq(trace_count(path, types[i], &t0, &t1), 1, "%s", types[i]);
            if (!noseg) /* 1 ns of slack for the rounding of the microseconds */
                cr_assert(t0 >= s0 - 1e-3 && t1 <= s1 + 1e-3,
                          "%s [%g, %g] outside the segment [%g, %g]", types[i], t0, t1, s0, s1);
        }
        unlink(path);
        mlp_run_free(&r);
        vq_engine_free(e);
    }
    release_tensors((vq_tensor *[]){want, x, w, b}, 4);
    vq_program_free(p);
}

/* Two independent branches joined: y1 = relu(x), y2 = scale(x), z = y1 + y2,
 * on n elements. */
static vq_program *branches_program(int64_t n)
{
    vq_program *p = new_program();
    int64_t s[1] = {n};
    var(p, "x", VQ_F64, 1, s, false);
    var(p, "y1", VQ_F64, 1, s, false);
    var(p, "y2", VQ_F64, 1, s, false);
    var(p, "z", VQ_F64, 1, s, false);
    vq_attr two = VQ_ATTR_F("scale", 2);
    op(p, "relu", NAMES("x"), 1, NAMES("y1"), 1, NULL, 0);
    op(p, "scale", NAMES("x"), 1, NAMES("y2"), 1, &two, 1);
    op(p, "add", NAMES("y1", "y2"), 2, NAMES("z"), 1, NULL, 0);
    return p;
}

/* A block whose ops are all small (shapes known, at most 1,024 elements)
 * runs as one segment even where its ops do not form a chain; with 2,048
 * elements the independent branches keep engine ops of their own. The
 * values are those of the ops run one by one. */
Test(exec, a_block_of_small_ops_runs_as_one_segment_whatever_its_dependences)
{
    for (int big = 0; big < 2; big++) {
        int64_t n = big ? 2048 : 1024;
        vq_program *p = branches_program(n);
        vq_engine *e;
        vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED,
                             .cpu_workers = 2,
                             .flags = VQ_ENGINE_PROFILE};
        cr_assert_eq(vq_engine_new(&e, &eo), 0);
        vq_exec *ex;
        cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
        vq_tensor *x = tensor_new(VQ_F64, 1, &n);
        double *xv = vq_tensor_data(x);
        for (int64_t i = 0; i < n; i++)
            xv[i] = (double)(i % 7) - 3;
        vq_feed feed = {"x", x};
        vq_fetch fetch = {"z", NULL};
        cr_assert_eq(vq_exec_run(ex, p, NULL, &feed, 1, &fetch, 1), 0, "%s", vq_errmsg());
        const double *z = vq_tensor_data(fetch.tensor);
        for (int64_t i = 0; i < n; i++)
            cr_assert_eq(z[i], (xv[i] > 0 ? xv[i] : 0) + 2 * xv[i], "z[%lld]", (long long)i);
        char path[] = "/tmp/varq_small_XXXXXX";
        profiler_dump_tmp(e, path);
        double s0 = 0, s1 = 0, t0 = 0, t1 = 0;
        int segs = trace_count(path, "segment", &s0, &s1);
        cr_assert_eq(trace_count(path, "relu", &t0, &t1), 1);
        if (!big) {
            cr_assert_eq(segs, 1, "one segment for the small block, not %d", segs);
            cr_assert(t0 >= s0 - 1e-3 && t1 <= s1 + 1e-3, "relu outside the segment");
        } else {
            cr_assert(segs == 0 || t0 < s0 - 1e-3 || t1 > s1 + 1e-3,
                      "the 2,048-element relu ran inside a segment");
        }
        unlink(path);
        vq_tensor_release(fetch.tensor);
        vq_tensor_release(x);
        vq_exec_free(ex);
        vq_engine_free(e);
        vq_program_free(p);
    }
}

/* A segment hands the engine only the vars something outside it touches
 * (the others are named by its ops alone): runs in flight at once, each
 * with its own feed, still see their own intermediates. Small blocks (one
 * segment, the intermediates inner) and 4,096-element ones (segments
 * split at the branches) alike. */
Test(exec, runs_in_flight_keep_their_intermediates_apart_when_segments_name_fewer_vars)
{
    enum { RUNS = 32 };
    for (int big = 0; big < 2; big++) {
        int64_t n = big ? 4096 : 256;
        vq_program *p = branches_program(n);
        vq_engine *e;
        vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
        cr_assert_eq(vq_engine_new(&e, &eo), 0);
        vq_exec *ex;
        cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
        vq_tensor *x[RUNS];
        vq_fetch fetch[RUNS][1];
        struct async_result res[RUNS];
        for (int r = 0; r < RUNS; r++) {
            x[r] = tensor_new(VQ_F64, 1, &n);
            double *xv = vq_tensor_data(x[r]);
            for (int64_t i = 0; i < n; i++)
                xv[i] = (double)((i + r) % 9) - 4 + r;
            vq_feed feed = {"x", x[r]};
            fetch[r][0] = (vq_fetch){"z", NULL};
            atomic_init(&res[r].calls, 0);
            res[r].err = 1;
            cr_assert_eq(vq_exec_run_async(ex, p, NULL, &feed, 1, fetch[r], 1, on_done, &res[r]), 0,
                         "%s", vq_errmsg());
        }
        cr_assert_eq(vq_wait_all(e), 0);
        for (int r = 0; r < RUNS; r++) {
            cr_assert_eq(atomic_load(&res[r].calls), 1);
            cr_assert_eq(res[r].err, 0);
            const double *xv = vq_tensor_data(x[r]), *z = vq_tensor_data(fetch[r][0].tensor);
            for (int64_t i = 0; i < n; i++)
                cr_assert_eq(z[i], (xv[i] > 0 ? xv[i] : 0) + 2 * xv[i], "run %d z[%lld]", r,
                             (long long)i);
            vq_tensor_release(fetch[r][0].tensor);
            vq_tensor_release(x[r]);
        }
        vq_exec_free(ex);
        vq_engine_free(e);
        vq_program_free(p);
    }
}

/* The rows ("tid") of a trace's spans named name, at most max of them. */
static int trace_rows(const char *path, const char *name, int *rows, int max)
{
    char line[512], key[64];
    FILE *f = trace_open(path, name, key, sizeof key);
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        const char *tid = strstr(line, "\"tid\":");
        if (!strncmp(line, key, strlen(key)) && tid && n < max)
            rows[n++] = atoi(tid + 6);
    }
    fclose(f);
    return n;
}

/* A synchronous run on a threaded engine runs on the calling thread when
 * nothing holds it back: its feeds' binds (their vars free), then the
 * chain they start (the segment, the final op), none of them handed to
 * the two idle workers. The profiler shows every record on the row of
 * other threads, after the workers' rows. */
Test(exec, a_synchronous_run_with_free_vars_runs_on_the_calling_thread)
{
    vq_engine *e;
    vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2, .flags = VQ_ENGINE_PROFILE};
    cr_assert_eq(vq_engine_new(&e, &eo), 0);
    vq_exec *ex;
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    vq_program *p = div_program();
    vq_tensor *a = div_feed(6, 8), *b = div_feed(2, 2);
    vq_feed feeds[2] = {{"a", a}, {"b", b}};
    for (int run = 0; run < 4; run++) {
        vq_fetch fetch = {"r", NULL};
        cr_assert_eq(vq_exec_run(ex, p, NULL, feeds, 2, &fetch, 1), 0, "%s", vq_errmsg());
        cr_assert_eq(((int32_t *)vq_tensor_data(fetch.tensor))[1], 8 / 2 + 8);
        vq_tensor_release(fetch.tensor);
    }
    char path[] = "/tmp/varq_caller_XXXXXX";
    profiler_dump_tmp(e, path);
    static const char *const names[] = {"feed", "segment", "run_done"};
    for (int k = 0; k < 3; k++) {
        int rows[16];
        int n = trace_rows(path, names[k], rows, 16);
        cr_assert_eq(n, k == 0 ? 8 : 4, "%d %s records", n, names[k]);
        for (int i = 0; i < n; i++)
            cr_assert_eq(rows[i], 2, "%s %d ran on row %d, not the caller's (2)", names[k], i,
                         rows[i]);
    }
    unlink(path);
    vq_tensor_release(a);
    vq_tensor_release(b);
    vq_exec_free(ex);
    vq_engine_free(e);
    vq_program_free(p);
}

/* vq_exec_run's waiter runs the run's queued ops itself (as vq_wait_var's
 * does): with the engine's one worker held by another op, a run still
 * finishes, on the calling thread. The holding op waits for a gate that
 * opens only after the run returned (10 s at most: a waiter that only
 * waited would find it closed that long). */
struct gate {
    atomic_bool started, open, timed_out;
};

static int hold_worker(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct gate *g = arg;
    atomic_store(&g->started, true);
    for (int i = 0; !atomic_load(&g->open); i++) {
        if (i == 10000) {
            atomic_store(&g->timed_out, true);
            break;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

Test(exec, the_waiting_thread_runs_the_runs_ops_while_the_worker_is_busy)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 1);
    vq_exec *ex;
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0);
    vq_program *p = div_program();
    vq_tensor *a = div_feed(6, 8), *b = div_feed(2, 2);
    vq_feed feeds[2] = {{"a", a}, {"b", b}};
    vq_fetch fetch = {"r", NULL};
    /* once, so that the timed run below needs no preparation */
    cr_assert_eq(vq_exec_run(ex, p, NULL, feeds, 2, &fetch, 1), 0, "%s", vq_errmsg());
    vq_tensor_release(fetch.tensor);
    static struct gate g;
    vq_task t = {.fn = hold_worker, .arg = &g, .name = "hold_worker"};
    cr_assert_eq(vq_push(e, &t), 0);
    while (!atomic_load(&g.started))
        sched_yield();
    cr_assert_eq(vq_exec_run(ex, p, NULL, feeds, 2, &fetch, 1), 0, "%s", vq_errmsg());
    atomic_store(&g.open, true);
    cr_assert_eq(vq_wait_all(e), 0);
    cr_assert(!atomic_load(&g.timed_out), "the run waited for the busy worker");
    cr_assert_eq(((int32_t *)vq_tensor_data(fetch.tensor))[1], 12);
    vq_tensor_release(fetch.tensor);
    vq_tensor_release(a);
    vq_tensor_release(b);
    vq_program_free(p);
    vq_exec_free(ex);
    vq_engine_free(e);
}

/* ---- a push the engine cannot take ---- */

/* The two programs of the test below, each with its inputs made before
 * the failures start (a test's own allocation must not fail), its run and
 * its check. */
struct fault_case {
    const char *name;
    vq_program *(*build)(void);
    const char *const *feeds;
    int nfeeds;
    const char *const *fetches;
    int nfetches;
    void (*inputs)(vq_tensor **in);
    bool (*right)(vq_fetch *out); /* the fetched values are the expected ones */
};

static vq_tensor *scalar_f32(float v)
{
    vq_tensor *t = tensor_of(VQ_F32, 0, NULL, &v);
    return t;
}

static bool is_relu_of_x(vq_tensor *y)
{
    const float *v = vq_tensor_data(y);
    return v[0] == 1 && v[1] == 0 && v[2] == 3 && v[3] == 0;
}

/* y = relu(scale(...relu(scale(x))...)), CHAIN ops in block 0: the
 * pushes of the caller's thread. */
enum { CHAIN = 96 };

static vq_program *chain_program(void)
{
    vq_program *p = new_program();
    int64_t s[1] = {4};
    char names[CHAIN + 1][16];
    for (int i = 0; i <= CHAIN; i++) {
        snprintf(names[i], sizeof names[i], i == 0 ? "x" : i == CHAIN ? "y" : "t%d", i);
        var(p, names[i], VQ_F32, 1, s, false);
    }
    for (int i = 0; i < CHAIN; i++)
        op(p, i % 2 ? "relu" : "scale", NAMES(names[i]), 1, NAMES(names[i + 1]), 1, NULL, 0);
    return p;
}

static void chain_inputs(vq_tensor **in)
{
    in[0] = vec4(1, -2, 3, -4);
}

static bool chain_right(vq_fetch *out)
{
    return is_relu_of_x(out[0].tensor);
}

/* while (i < n) { t_k = scale(x) for k < WIDTH; x = relu(t_0); i = i + 1 },
 * 24 iterations: the pushes of the loop's ops, from inside the engine's
 * ops (WIDTH of them at once, which outgrow what the pools keep for a
 * worker). */
enum { WIDTH = 48 };

static vq_program *loop_program(void)
{
    vq_program *p = new_program();
    int64_t s[1] = {4};
    declare_vars(p, 0, "f32[4] x xo");
    const char *scalars[] = {"i0", "n", "one", "io"};
    for (int i = 0; i < 4; i++)
        var(p, scalars[i], VQ_F32, 0, NULL, false);
    var(p, "c0", VQ_BOOL, 0, NULL, false);
    int b = vq_program_add_block(p, 0);
    cr_assert_gt(b, 0, "%s", vq_errmsg());
    cr_assert_eq(vq_program_add_var(p, b, "bx", VQ_F32, 1, s, false), 0);
    cr_assert_eq(vq_program_add_var(p, b, "bx2", VQ_F32, 1, s, false), 0);
    char bt[WIDTH][16];
    for (int k = 0; k < WIDTH; k++) {
        snprintf(bt[k], sizeof bt[k], "bt%d", k);
        cr_assert_eq(vq_program_add_var(p, b, bt[k], VQ_F32, 1, s, false), 0);
    }
    cr_assert_eq(vq_program_add_var(p, b, "bi", VQ_F32, 0, NULL, false), 0);
    cr_assert_eq(vq_program_add_var(p, b, "bi2", VQ_F32, 0, NULL, false), 0);
    cr_assert_eq(vq_program_add_var(p, b, "bc", VQ_BOOL, 0, NULL, false), 0);
    for (int k = 0; k < WIDTH; k++)
        cr_assert_geq(vq_program_add_op(p, b, "scale", NAMES("bx"), 1, NAMES(bt[k]), 1, NULL, 0),
                      0);
    cr_assert_geq(vq_program_add_op(p, b, "relu", NAMES("bt0"), 1, NAMES("bx2"), 1, NULL, 0), 0);
    cr_assert_geq(vq_program_add_op(p, b, "add", NAMES("bi", "one"), 2, NAMES("bi2"), 1, NULL, 0),
                  0);
    cr_assert_geq(vq_program_add_op(p, b, "less", NAMES("bi2", "n"), 2, NAMES("bc"), 1, NULL, 0),
                  0);
    op(p, "less", NAMES("i0", "n"), 2, NAMES("c0"), 1, NULL, 0);
    vq_attr a[5] = {VQ_ATTR_I("body_block", b), VQ_ATTR_SS("body_inputs", NAMES("bx", "bi"), 2),
                    VQ_ATTR_SS("body_outputs", NAMES("bx2", "bi2"), 2),
                    VQ_ATTR_S("body_cond", "bc"), VQ_ATTR_I("max_iters", -1)};
    op(p, "while", NAMES("c0", "x", "i0"), 3, NAMES("xo", "io"), 2, a, 5);
    return p;
}

static void loop_inputs(vq_tensor **in)
{
    in[0] = vec4(1, -2, 3, -4);
    in[1] = scalar_f32(0);
    in[2] = scalar_f32(24);
    in[3] = scalar_f32(1);
}

static bool loop_right(vq_fetch *out)
{
    return is_relu_of_x(out[0].tensor) && *(const float *)vq_tensor_data(out[1].tensor) == 24;
}

static const struct fault_case fault_cases[] = {
    {"a chain", chain_program, NAMES("x"), 1, NAMES("y"), 1, chain_inputs, chain_right},
    {"a loop", loop_program, NAMES("x", "i0", "n", "one"), 4, NAMES("xo", "io"), 2, loop_inputs,
     loop_right},
};

/* One run; 0 and *right set, or its error. */
static int fault_run(const struct fault_case *fc, vq_exec *ex, vq_program *p, vq_tensor **in,
                     bool *right)
{
    vq_feed feeds[4];
    vq_fetch fetches[2];
    for (int i = 0; i < fc->nfeeds; i++)
        feeds[i] = (vq_feed){fc->feeds[i], in[i]};
    for (int i = 0; i < fc->nfetches; i++)
        fetches[i] = (vq_fetch){fc->fetches[i], NULL};
    int rc = vq_exec_run(ex, p, NULL, feeds, fc->nfeeds, fetches, fc->nfetches);
    *right = rc == 0 && fc->right(fetches);
    for (int i = 0; i < fc->nfetches; i++)
        vq_tensor_release(fetches[i].tensor);
    return rc;
}

enum { FAULT_SURVIVED = 10, FAULT_REPORTED, FAULT_PUSH_REPORTED, FAULT_NOT_REACHED, FAULT_BAD };

/* In a child process (a hang is an alarm): the executor prepares the
 * program, runs it with the n-th allocation from then on failing, then
 * again without. Exits with what the failed run did; FAULT_BAD, after
 * saying why, when it returned anything but 0 with the right values or
 * VQ_ENOMEM with a message, or when the executor could not run again. */
static void fault_child(const struct fault_case *fc, vq_program *p, long n, bool lasting)
{
    alarm(30);
    vq_engine *e;
    vq_exec *ex;
    vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    vq_exec_opts xo = {.flags = VQ_EXEC_NO_SEGMENTS};
    if (vq_engine_new(&e, &eo) < 0 || vq_exec_new(&ex, e, &xo) < 0 ||
        vq_exec_prepare(ex, p, NULL, fc->feeds, fc->nfeeds, fc->fetches, fc->nfetches) < 0) {
        fprintf(stderr, "%s, N=%ld: setup: %s\n", fc->name, n, vq_errmsg());
        _exit(FAULT_BAD);
    }
    bool right;
    vq_tensor *in[4];
    fc->inputs(in);
    if (lasting)
        vq__fault_arm_lasting(n);
    else
        vq__fault_arm(n);
    int rc = fault_run(fc, ex, p, in, &right);
    bool fired = vq__fault_fired();
    vq__fault_arm(0);
    char msg[256];
    snprintf(msg, sizeof msg, "%s", vq_errmsg());
    int what = !fired ? FAULT_NOT_REACHED
               : rc == 0 ? FAULT_SURVIVED
               : strstr(msg, "the engine could not take the op") ? FAULT_PUSH_REPORTED
                                                                : FAULT_REPORTED;
    if ((rc == 0 && !right) || (rc < 0 && (rc != VQ_ENOMEM || !msg[0]))) {
        fprintf(stderr, "%s, N=%ld: the run returned %d (%s), values %s\n", fc->name, n, rc, msg,
                right ? "right" : "wrong");
        _exit(FAULT_BAD);
    }
    if ((rc = fault_run(fc, ex, p, in, &right)) != 0 || !right) {
        fprintf(stderr, "%s, N=%ld: the next run returned %d (%s)\n", fc->name, n, rc,
                vq_errmsg());
        _exit(FAULT_BAD);
    }
    for (int i = 0; i < fc->nfeeds; i++)
        vq_tensor_release(in[i]);
    vq_exec_free(ex);
    vq_engine_free(e);
    vq_program_free(p);
    /* Under ASan the engine's pools allocate each object by itself, so a
     * loop's run makes 1,255 allocations rather than 35, and each child's
     * leak check cost about 0.4 s on 2026-12-06's machine (LeakSanitizer
     * scanning what the child inherited): checking all of them took the
     * test past meson's 600 s. So children check where the path this test
     * is about was taken (a push failed, or the run survived its failure)
     * and at every 16th allocation otherwise. */
    if (what != FAULT_REPORTED || n % 16 == 1)
        leak_check();
    _exit(what);
}

/* vq_push_opr returns VQ_ENOMEM when the engine's pools cannot grow. A
 * run whose op the engine could not take used to retry the push in a
 * yield loop until memory came back (forever, if it never did; and when
 * the pusher is an op that earlier pushes wait for, on one worker, never
 * at all). Now the run reports VQ_ENOMEM naming the op, and the executor
 * prepares a new plan for the next run. Each allocation of a run, in
 * turn, fails once (SQLite's method, as tests/alloc_fault.c): some of
 * them are the pools' growth during the pushes, of block 0 by the
 * caller's thread (a chain) and of a loop's body by the engine's ops. */
Test(exec, a_push_the_engine_cannot_take_fails_the_run_and_the_executor_runs_again)
{
    /* the chain's ops pushed one by one, as written: the elementwise pass
     * would make the chain one op (graph/optimize.c) */
    setenv("VARQ_OPT", "0", 1);
    for (size_t c = 0; c < sizeof fault_cases / sizeof fault_cases[0]; c++) {
        const struct fault_case *fc = &fault_cases[c];
        vq_program *p = fc->build();
        int seen[FAULT_BAD + 1] = {0};
        long n = 0;
        /* Whether a pool grows inside a push depends on the pushing
         * thread's cache: a loop's body is pushed by whichever worker ran
         * the iteration before, and on a loaded machine that worker's
         * cache sometimes holds enough, so that no allocation of the run
         * is a push's (about 1 sweep in 7 here, before this retry too).
         * Sweep again until one is, at most 8 times. */
        for (int sweep = 0; sweep < 8 && !seen[FAULT_PUSH_REPORTED]; sweep++) {
            memset(seen, 0, sizeof seen);
            for (n = 1; n < 5000; n++) {
                pid_t pid = fork();
                cr_assert_geq(pid, 0);
                if (pid == 0)
                    fault_child(fc, p, n, false);
                int status;
                cr_assert_eq(waitpid(pid, &status, 0), pid);
                cr_assert(WIFEXITED(status),
                          "%s, N=%ld: the child died (signal %d; SIGALRM %d: a "
                          "hang)",
                          fc->name, n, WTERMSIG(status), SIGALRM);
                int what = WEXITSTATUS(status);
                cr_assert(what >= FAULT_SURVIVED && what < FAULT_BAD,
                          "%s, N=%ld: exit %d (see above)", fc->name, n, what);
                seen[what]++;
                if (what == FAULT_NOT_REACHED)
                    break;
            }
            cr_assert_eq(seen[FAULT_NOT_REACHED], 1, "%s: the run makes over %ld allocations",
                         fc->name, n);
        }
        cr_assert_gt(seen[FAULT_PUSH_REPORTED], 0,
                     "%s: no failed push was reported in 8 sweeps (the last: %ld allocations, "
                     "%d runs survived, %d failed otherwise)",
                     fc->name, n - 1, seen[FAULT_SURVIVED], seen[FAULT_REPORTED]);
        vq_program_free(p);
    }
    unsetenv("VARQ_OPT");
}

/* Memory that never comes back: from the n-th allocation of a run on,
 * every allocation fails. A run whose push failed still has to push its
 * frame's tail (the final op, a loop's step or exit, a control op's end)
 * to report; that push used to be retried until memory came back, so
 * such a run never returned. Now the tails' pushes take what was set
 * aside for them when the plan was built, and every run returns: 0 with
 * the right values or VQ_ENOMEM with a message, and once memory is back
 * the executor runs again (fault_child; a hang is its alarm). */
Test(exec, a_run_returns_when_memory_runs_out_for_good)
{
    for (size_t c = 0; c < sizeof fault_cases / sizeof fault_cases[0]; c++) {
        const struct fault_case *fc = &fault_cases[c];
        vq_program *p = fc->build();
        int seen[FAULT_BAD + 1] = {0};
        long n;
        for (n = 1; n < 5000; n++) {
            pid_t pid = fork();
            cr_assert_geq(pid, 0);
            if (pid == 0)
                fault_child(fc, p, n, true);
            int status;
            cr_assert_eq(waitpid(pid, &status, 0), pid);
            cr_assert(WIFEXITED(status),
                      "%s, N=%ld: the child died (signal %d; SIGALRM %d: a hang)", fc->name, n,
                      WTERMSIG(status), SIGALRM);
            int what = WEXITSTATUS(status);
            cr_assert(what >= FAULT_SURVIVED && what < FAULT_BAD, "%s, N=%ld: exit %d (see above)",
                      fc->name, n, what);
            seen[what]++;
            if (what == FAULT_NOT_REACHED)
                break;
        }
        cr_assert_eq(seen[FAULT_NOT_REACHED], 1, "%s: the run makes over %ld allocations",
                     fc->name, n);
        cr_assert_gt(seen[FAULT_REPORTED] + seen[FAULT_PUSH_REPORTED], 0,
                     "%s: no run failed in %ld allocations", fc->name, n - 1);
        vq_program_free(p);
    }
}

/* Page faults of this process so far (minor: memory the kernel hands in). */
static long minor_faults(void)
{
    struct rusage u;
    cr_assert_eq(getrusage(RUSAGE_SELF, &u), 0);
    return u.ru_minflt;
}

/* A freed plan's big arrays are kept for the next prepare
 * (VARQ_PLAN_RETAIN_MB): preparing a 20,000-op chain again on a fresh
 * executor takes its pages from the last one instead of about 2,500 fresh
 * ones from the kernel (16 MiB of records), which made preparation cost
 * more per op the bigger the program. Not under ASan, which keeps none. */
Test(exec, a_prepare_reuses_the_memory_of_the_plan_freed_before_it)
{
#if defined(__SANITIZE_ADDRESS__)
    cr_skip_test("no memory is kept under AddressSanitizer");
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    cr_skip_test("no memory is kept under AddressSanitizer");
#endif
#endif
    enum { N = 20000 };
    vq_program *p = new_program();
    int64_t s[1] = {4};
    char a[16], b[16];
    var(p, "x", VQ_F32, 1, s, false);
    for (int i = 1; i <= N; i++) {
        snprintf(b, sizeof b, "t%d", i);
        var(p, b, VQ_F32, 1, s, false);
    }
    for (int i = 0; i < N; i++) {
        snprintf(a, sizeof a, i ? "t%d" : "x", i);
        snprintf(b, sizeof b, "t%d", i + 1);
        op(p, "relu", NAMES(a), 1, NAMES(b), 1, NULL, 0);
    }
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2);
    long faults[3];
    for (int r = 0; r < 3; r++) {
        vq_exec *ex;
        setenv("VARQ_OPT", "0", 1); /* the chain as 20,000 ops, not one fused op */
        cr_assert_eq(vq_exec_new(&ex, e, NULL), 0, "%s", vq_errmsg());
        unsetenv("VARQ_OPT");
        long before = minor_faults();
        cr_assert_eq(vq_exec_prepare(ex, p, NULL, NAMES("x"), 1, NAMES("t20000"), 1), 0, "%s",
                     vq_errmsg());
        faults[r] = minor_faults() - before;
        vq_exec_free(ex);
        vq_wait_all(e);
    }
    cr_assert_lt(faults[2], 200,
                 "the third prepare of %d ops took %ld fresh pages (the first %ld, the second %ld)",
                 N, faults[2], faults[0], faults[1]);
    vq_engine_free(e);
    vq_program_free(p);
}

/* ---- the default generator of random ops (vq_exec_opts.seed) ---- */

static vq_exec *seeded_exec(vq_engine *e, uint64_t seed, unsigned flags)
{
    vq_exec *ex;
    vq_exec_opts o = {.seed = seed, .flags = flags};
    cr_assert_eq(vq_exec_new(&ex, e, &o), 0, "%s", vq_errmsg());
    return ex;
}

/* Elements of two dropout outputs that are both dropped or both kept. */
static int64_t same_drops(vq_tensor *a, vq_tensor *b)
{
    const double *x = vq_tensor_data(a), *y = vq_tensor_data(b);
    int64_t n = 0;
    for (int64_t i = 0; i < vq_tensor_numel(a); i++)
        n += (x[i] == 0) == (y[i] == 0);
    return n;
}

/* Each run draws other numbers (root frame and loop body alike), as
 * PyTorch's default generator does; the op with a seed attribute replays. */
Test(exec, random_ops_without_a_seed_draw_anew_each_run)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2);
    vq_exec *ex;
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0, "%s", vq_errmsg());
    vq_program *p = random_program();
    vq_tensor *a[RANDOM_FETCHES], *b[RANDOM_FETCHES];
    random_run(ex, p, a);
    random_run(ex, p, b);
    int64_t kept = 0;
    for (int64_t i = 0; i < RANDOM_X; i++)
        kept += ((const double *)vq_tensor_data(a[0]))[i] != 0;
    cr_assert(kept > RANDOM_X / 4 && kept < 3 * RANDOM_X / 4, "kept %lld of %d", (long long)kept,
              RANDOM_X);
    cr_assert_lt(same_drops(a[0], b[0]), 3 * RANDOM_X / 4, "dropout drops the same elements");
    cr_assert_eq(random_same(a[1], b[1]), 0, "uniform_random repeats");
    cr_assert_eq(random_same(a[3], b[3]), 0, "the loop's uniform_random repeats");
    assert_same_bits(a[2], b[2]); /* seed 7: the same every run */
    random_release(a);
    random_release(b);
    vq_program_free(p);
    vq_exec_free(ex);
    vq_engine_free(e);
}

/* Three runs on executors with seed 1234: the same bits whatever the
 * engine, the worker count, the segments or runs in flight at once (the
 * loop's iterations overlap in its ring of frames); another seed draws
 * other numbers. */
Test(exec, executors_with_one_seed_draw_one_sequence_on_any_engine, .timeout = 120)
{
    enum { RUNS = 3 };
    struct {
        int kind, workers;
        unsigned flags;
        bool async;
    } cases[] = {
        {VQ_ENGINE_THREADED, 1, 0, false},
        {VQ_ENGINE_THREADED, 2, 0, false},
        {VQ_ENGINE_THREADED, 8, 0, true},
        {VQ_ENGINE_NAIVE, 0, 0, false},
        {VQ_ENGINE_THREADED, 2, VQ_EXEC_NO_SEGMENTS, true},
    };
    vq_program *p = random_program();
    vq_tensor *ref[RUNS][RANDOM_FETCHES];
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        vq_engine *e = engine(cases[k].kind, cases[k].workers);
        vq_exec *ex = seeded_exec(e, 1234, cases[k].flags);
        vq_tensor *got[RUNS][RANDOM_FETCHES];
        if (!cases[k].async) {
            for (int r = 0; r < RUNS; r++)
                random_run(ex, p, got[r]);
        } else {
            /* the runs in flight together: each op's executions still
             * belong to the runs in push order */
            vq_fetch f[RUNS][RANDOM_FETCHES];
            struct async_result res[RUNS];
            int64_t xs[1] = {RANDOM_X}, as[1] = {8};
            double xv[RANDOM_X], zeros[8] = {0}, scal[3] = {0, RANDOM_ITERS, 1};
            for (int i = 0; i < RANDOM_X; i++)
                xv[i] = 1.5;
            vq_tensor *in[5];
            in[0] = tensor_of(VQ_F64, 1, xs, xv);
            in[1] = tensor_of(VQ_F64, 1, as, zeros);
            for (int i = 0; i < 3; i++)
                cr_assert_eq(vq_tensor_from(&in[2 + i], VQ_F64, 0, NULL, &scal[i]), 0);
            vq_feed feeds[5] = {{"x", in[0]},
                                {"acc0", in[1]},
                                {"i0", in[2]},
                                {"n", in[3]},
                                {"one", in[4]}};
            for (int r = 0; r < RUNS; r++) {
                const char *names[RANDOM_FETCHES] = {"y", "u", "s", "acc"};
                for (int i = 0; i < RANDOM_FETCHES; i++)
                    f[r][i] = (vq_fetch){names[i], NULL};
                atomic_init(&res[r].calls, 0);
                res[r].err = 1;
                cr_assert_eq(vq_exec_run_async(ex, p, NULL, feeds, 5, f[r], RANDOM_FETCHES, on_done,
                                               &res[r]),
                             0, "%s", vq_errmsg());
            }
            cr_assert_eq(vq_wait_all(e), 0);
            for (int r = 0; r < RUNS; r++) {
                cr_assert_eq(res[r].err, 0);
                for (int i = 0; i < RANDOM_FETCHES; i++)
                    got[r][i] = f[r][i].tensor;
            }
            for (int i = 0; i < 5; i++)
                vq_tensor_release(in[i]);
        }
        for (int r = 0; r < RUNS; r++) {
            if (k == 0) {
                memcpy(ref[r], got[r], sizeof got[r]);
                continue;
            }
            for (int i = 0; i < RANDOM_FETCHES; i++)
                cr_assert_eq(random_same(got[r][i], ref[r][i]), vq_tensor_numel(ref[r][i]),
                             "case %zu, run %d, fetch %d differs", k, r, i);
            random_release(got[r]);
        }
        vq_exec_free(ex);
        vq_engine_free(e);
    }
    for (int r = 1; r < RUNS; r++) {
        cr_assert_eq(random_same(ref[r][1], ref[0][1]), 0, "run %d repeats run 0", r);
        cr_assert_eq(random_same(ref[r][3], ref[0][3]), 0, "run %d's loop repeats run 0's", r);
    }
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2);
    vq_exec *ex = seeded_exec(e, 1235, 0);
    vq_tensor *other[RANDOM_FETCHES];
    random_run(ex, p, other);
    cr_assert_eq(random_same(other[1], ref[0][1]), 0, "seed 1235 draws what 1234 draws");
    assert_same_bits(other[2], ref[0][2]); /* the seed attribute's, whatever the executor's */
    random_release(other);
    vq_exec_free(ex);
    vq_engine_free(e);
    for (int r = 0; r < RUNS; r++)
        random_release(ref[r]);
    vq_program_free(p);
}

/* An op with a seed attribute draws what vq_op_run draws with that seed,
 * in every run of every executor. */
Test(exec, an_explicit_seed_attribute_replays_exactly)
{
    int64_t n = 64;
    vq_attr at[3] = {VQ_ATTR_IS("shape", &n, 1), VQ_ATTR_S("dtype", "f64"), VQ_ATTR_I("seed", 7)};
    vq_tensor *want = oc_run1("uniform_random", NULL, 0, at, 3);
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2);
    vq_program *p = random_program();
    for (uint64_t seed = 1; seed <= 2; seed++) {
        vq_exec *ex = seeded_exec(e, seed, 0);
        for (int r = 0; r < 2; r++) {
            vq_tensor *got[RANDOM_FETCHES];
            random_run(ex, p, got);
            assert_same_bits(got[2], want);
            random_release(got);
        }
        vq_exec_free(ex);
    }
    vq_program_free(p);
    vq_engine_free(e);
    vq_tensor_release(want);
}

/* The first run of an executor made with opts; *first gets its fetches. */
static void first_run(vq_engine *e, const vq_exec_opts *o, vq_tensor *first[RANDOM_FETCHES])
{
    vq_exec *ex;
    cr_assert_eq(vq_exec_new(&ex, e, o), 0, "%s", vq_errmsg());
    vq_program *p = random_program();
    random_run(ex, p, first);
    vq_program_free(p);
    vq_exec_free(ex);
}

/* seed 0 takes VARQ_SEED when it is set, VQ_DEFAULT_SEED when not; a seed
 * given in the options wins over VARQ_SEED. */
Test(exec, varq_seed_seeds_executors_made_without_a_seed)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 2);
    vq_tensor *env[RANDOM_FETCHES], *given[RANDOM_FETCHES], *other[RANDOM_FETCHES],
        *dflt[RANDOM_FETCHES], *dflt_given[RANDOM_FETCHES];
    cr_assert_eq(setenv("VARQ_SEED", "18446744073709551615", 1), 0);
    first_run(e, NULL, env);
    first_run(e, &(vq_exec_opts){.seed = UINT64_MAX}, given);
    first_run(e, &(vq_exec_opts){.seed = 99}, other);
    cr_assert_eq(unsetenv("VARQ_SEED"), 0);
    first_run(e, NULL, dflt);
    first_run(e, &(vq_exec_opts){.seed = VQ_DEFAULT_SEED}, dflt_given);
    for (int i = 0; i < RANDOM_FETCHES; i++) {
        assert_same_bits(env[i], given[i]);
        assert_same_bits(dflt[i], dflt_given[i]);
    }
    cr_assert_eq(random_same(env[1], other[1]), 0);
    cr_assert_eq(random_same(env[1], dflt[1]), 0);
    random_release(env);
    random_release(given);
    random_release(other);
    random_release(dflt);
    random_release(dflt_given);
    vq_engine_free(e);
}

Test(exec, a_bad_varq_seed_fails_vq_exec_new_naming_it)
{
    vq_engine *e = engine(VQ_ENGINE_THREADED, 1);
    const char *bad[] = {"12x", "", "-1", " 7", "+7", "0x10", "18446744073709551616"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(setenv("VARQ_SEED", bad[i], 1), 0);
        char want[80];
        snprintf(want, sizeof want, "vq_exec_new: VARQ_SEED is \"%s\", not decimal digits", bad[i]);
        for (int given = 0; given < 2; given++) {
            vq_exec *ex = NULL;
            vq_exec_opts o = {.seed = given ? 5 : 0};
            cr_assert_eq(vq_exec_new(&ex, e, &o), VQ_EINVAL, "VARQ_SEED=\"%s\" accepted", bad[i]);
            cr_assert_null(ex);
            cr_assert(strstr(vq_errmsg(), want), "got \"%s\"", vq_errmsg());
        }
    }
    cr_assert_eq(setenv("VARQ_SEED", "0", 1), 0);
    vq_exec *ex;
    cr_assert_eq(vq_exec_new(&ex, e, NULL), 0, "%s", vq_errmsg());
    vq_exec_free(ex);
    vq_engine_free(e);
}
