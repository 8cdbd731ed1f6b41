/* cond and while in programs: results against the same computation done
 * directly in C (every op used here is exact in f64, so the bits must
 * agree), on the naive engine and the threaded engine with 1, 2 and 8
 * workers, on the CPU and on the emulated GPU executor; zero iterations,
 * max_iters, nesting both ways, flat memory over a long loop, many runs in
 * flight, failures inside a body, and the preparation errors for bad
 * control ops. */
#include <varq/varq.h>

#include "fixtures.h"
#include "leakcheck.h"
#include "sanitizer.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(control, .fini = leak_check);

static const int64_t S3[1] = {3};

static void bvar(vq_program *p, int b, const char *name, vq_dtype dt, int ndim,
                 const int64_t *shape)
{
    cr_assert_eq(vq_program_add_var(p, b, name, dt, ndim, shape, false), 0, "%s", vq_errmsg());
}

static void bop(vq_program *p, int b, const char *type, const char *const *in, int nin,
                const char *const *out, int nout, const vq_attr *attrs, int nattrs)
{
    int rc = vq_program_add_op(p, b, type, in, nin, out, nout, attrs, nattrs);
    cr_assert_geq(rc, 0, "%s", vq_errmsg());
}

static void while_attrs(vq_attr a[5], int body, const char *const *in, const char *const *out,
                        int n, const char *cond, int64_t max_iters)
{
    a[0] = VQ_ATTR_I("body_block", body);
    a[1] = VQ_ATTR_SS("body_inputs", in, n);
    a[2] = VQ_ATTR_SS("body_outputs", out, n);
    a[3] = VQ_ATTR_S("body_cond", cond);
    a[4] = VQ_ATTR_I("max_iters", max_iters);
}

/* Adds a while to block blk: op "c x... -> out..." names its inputs and
 * outputs, carried "in... -> out..." the body's loop-carried vars, bc the
 * body's predicate; stack the stacked body vars (NULL for none). */
static void add_while(vq_program *p, int blk, int body, const char *op, const char *carried,
                      const char *bc, int64_t max_iters, const char *stack)
{
    char obuf[256], cbuf[256], sbuf[256], *ow[FX_MAX_WORDS], *cw[FX_MAX_WORDS], *sw[FX_MAX_WORDS];
    int no, nc, ns = 0;
    spec_words(op, obuf, sizeof obuf, ow, &no);
    spec_words(carried, cbuf, sizeof cbuf, cw, &nc);
    if (stack)
        spec_words(stack, sbuf, sizeof sbuf, sw, &ns);
    int oa = 0, ca = 0;
    while (oa < no && strcmp(ow[oa], "->") != 0)
        oa++;
    while (ca < nc && strcmp(cw[ca], "->") != 0)
        ca++;
    cr_assert(oa < no && ca < nc && nc - ca - 1 == ca, "bad while spec: %s / %s", op, carried);
    vq_attr a[6];
    while_attrs(a, body, (const char *const *)cw, (const char *const *)cw + ca + 1, ca, bc,
                max_iters);
    a[5] = VQ_ATTR_SS("stack_outputs", (const char *const *)sw, ns);
    bop(p, blk, "while", (const char *const *)ow, oa, (const char *const *)ow + oa + 1, no - oa - 1,
        a, stack ? 6 : 5);
}

static void cond_attrs(vq_attr a[4], int then_b, int else_b, const char *const *then_out,
                       const char *const *else_out, int n)
{
    a[0] = VQ_ATTR_I("then_block", then_b);
    a[1] = VQ_ATTR_I("else_block", else_b);
    a[2] = VQ_ATTR_SS("then_outputs", then_out, n);
    a[3] = VQ_ATTR_SS("else_outputs", else_out, n);
}

/* Adds a cond to block blk: op "c x... -> out..." names its inputs and
 * outputs, then_out and else_out the branches' outputs ("t ..."). */
static void add_cond(vq_program *p, int blk, int then_b, int else_b, const char *op,
                     const char *then_out, const char *else_out)
{
    char obuf[256], tbuf[256], ebuf[256], *ow[FX_MAX_WORDS], *tw[FX_MAX_WORDS], *ew[FX_MAX_WORDS];
    int no, nt, ne;
    spec_words(op, obuf, sizeof obuf, ow, &no);
    spec_words(then_out, tbuf, sizeof tbuf, tw, &nt);
    spec_words(else_out, ebuf, sizeof ebuf, ew, &ne);
    int oa = 0;
    while (oa < no && strcmp(ow[oa], "->") != 0)
        oa++;
    cr_assert(oa < no && nt == ne, "bad cond spec: %s", op);
    vq_attr a[4];
    cond_attrs(a, then_b, else_b, (const char *const *)tw, (const char *const *)ew, nt);
    bop(p, blk, "cond", (const char *const *)ow, oa, (const char *const *)ow + oa + 1, no - oa - 1,
        a, 4);
}

/* The counter loop's vars and ops but the while (and the block 0 vars
 * extra declares after its own); returns the body block. */
static int counter_parts_with(vq_program *p, const char *extra)
{
    declare_vars(p, 0, "f64 n one half i0 io; f64[3] x xo; bool c0");
    declare_vars(p, 0, extra);
    int b = block_with(p, 0, "f64[3] bx bt bx2; f64 bi bi2; bool bc",
                       "add bi one -> bi2; mul bx half -> bt; add bt bi2 -> bx2; less bi2 n -> bc");
    add_ops(p, 0, "less i0 n -> c0");
    return b;
}

static int counter_parts(vq_program *p)
{
    return counter_parts_with(p, "");
}

/* i = i0; while i < n: i = i + one; x = x * half + i   (x f64[3])
 * Fetches xo, io. max_iters as given. */
static vq_program *counter_loop(int64_t max_iters)
{
    vq_program *p = new_program();
    int b = counter_parts(p);
    add_while(p, 0, b, "c0 x i0 -> xo io", "bx bi -> bx2 bi2", "bc", max_iters, NULL);
    return p;
}

static void counter_ref(double x[3], double *i, double n, int64_t max_iters)
{
    for (int64_t k = 0; *i < n && (max_iters < 0 || k < max_iters); k++) {
        *i = *i + 1.0;
        for (int j = 0; j < 3; j++)
            x[j] = x[j] * 0.5 + *i;
    }
}

static vq_tensor *scalar(double v)
{
    vq_tensor *t = tensor_new(VQ_F64, 0, NULL);
    *(double *)vq_tensor_data(t) = v;
    return t;
}

static vq_tensor *vec3(double a, double b, double c)
{
    vq_tensor *t = tensor_new(VQ_F64, 1, S3);
    double *d = vq_tensor_data(t);
    d[0] = a;
    d[1] = b;
    d[2] = c;
    return t;
}

struct setup {
    const char *name;
    int kind, workers;
    bool gpu;
};

static const struct setup setups[] = {
    {"naive", VQ_ENGINE_NAIVE, 1, false},     {"threaded 1", VQ_ENGINE_THREADED, 1, false},
    {"threaded 2", VQ_ENGINE_THREADED, 2, false}, {"threaded 8", VQ_ENGINE_THREADED, 8, false},
    {"naive gpu", VQ_ENGINE_NAIVE, 1, true},  {"threaded 2 gpu", VQ_ENGINE_THREADED, 2, true},
};

struct fix {
    vq_engine *e;
    vq_exec *ex;
    vq_scope *s;
};

static struct fix fix_new(const struct setup *st)
{
    struct fix f;
    vq_engine_opts eo = {.kind = st->kind, .cpu_workers = st->workers};
    cr_assert_eq(vq_engine_new(&f.e, &eo), 0, "%s", vq_errmsg());
    vq_exec_opts o = {0};
    if (st->gpu)
        o.device = (vq_ctx){VQ_DEV_GPU, 0};
    cr_assert_eq(vq_exec_new(&f.ex, f.e, &o), 0, "%s: %s", st->name, vq_errmsg());
    cr_assert_eq(vq_scope_new(&f.s), 0);
    return f;
}

static void fix_free(struct fix *f)
{
    vq_exec_free(f->ex);
    vq_scope_free(f->s);
    vq_engine_free(f->e);
}

/* Runs check on p with a fresh fixture on every setup, then frees p. */
static void on_every_setup(vq_program *p, void (*check)(struct fix *, vq_program *, const char *))
{
    for (int s = 0; s < N_OF(setups); s++) {
        struct fix f = fix_new(&setups[s]);
        check(&f, p, setups[s].name);
        fix_free(&f);
    }
    vq_program_free(p);
}

/* The counter loop's feeds: x, n, one = 1, half = 0.5, i0. */
struct counter_feeds {
    vq_tensor *t[5];
    vq_feed feeds[5];
};

static void counter_feeds_make(struct counter_feeds *c, vq_tensor *x, double n, double i0)
{
    vq_tensor *t[5] = {x, scalar(n), scalar(1), scalar(0.5), scalar(i0)};
    const char *names[5] = {"x", "n", "one", "half", "i0"};
    for (int i = 0; i < 5; i++) {
        c->t[i] = t[i];
        c->feeds[i] = (vq_feed){names[i], t[i]};
    }
}

static void counter_feeds_free(struct counter_feeds *c)
{
    release_tensors(c->t, 5);
}

static void run_counter(struct fix *f, vq_program *p, const char *what, double n, double i0,
                        int64_t max_iters)
{
    struct counter_feeds cf;
    counter_feeds_make(&cf, vec3(1.5, -2.25, 1e6), n, i0);
    vq_fetch fetches[] = {{"xo", NULL}, {"io", NULL}};
    int rc = vq_exec_run(f->ex, p, f->s, cf.feeds, 5, fetches, 2);
    cr_assert_eq(rc, 0, "%s: %s", what, vq_errmsg());
    double want[3] = {1.5, -2.25, 1e6}, wi = i0;
    counter_ref(want, &wi, n, max_iters);
    vq_tensor *xo = on_host(f->e, fetches[0].tensor), *io = on_host(f->e, fetches[1].tensor);
    const double *got = vq_tensor_data(xo);
    for (int j = 0; j < 3; j++)
        cr_assert(memcmp(&got[j], &want[j], sizeof want[j]) == 0, "%s n=%g: x[%d] = %.17g, want %.17g",
                  what, n, j, got[j], want[j]);
    cr_assert_eq(*(const double *)vq_tensor_data(io), wi, "%s: i = %g, want %g", what,
                 *(const double *)vq_tensor_data(io), wi);
    vq_tensor_release(xo);
    vq_tensor_release(io);
    counter_feeds_free(&cf);
}

Test(control, while_matches_the_loop_in_c_on_every_engine_and_device)
{
    vq_program *p = counter_loop(-1);
    for (int s = 0; s < N_OF(setups); s++) {
        struct fix f = fix_new(&setups[s]);
        const double ns[] = {0, 1, 2, 7, 40};
        for (int k = 0; k < N_OF(ns); k++)
            run_counter(&f, p, setups[s].name, ns[k], 0, -1);
        fix_free(&f);
    }
    vq_program_free(p);
}

Test(control, while_runs_zero_iterations_and_stops_at_max_iters)
{
    struct fix f = fix_new(&setups[2]);
    vq_program *p = counter_loop(-1);
    run_counter(&f, p, "cond false at entry", 3, 5, -1);
    vq_program_free(p);
    const int64_t limits[] = {0, 1, 3, 100};
    for (int k = 0; k < N_OF(limits); k++) {
        p = counter_loop(limits[k]);
        run_counter(&f, p, "max_iters", 10, 0, limits[k]);
        vq_program_free(p);
    }
    fix_free(&f);
}

/* y = cond(s > zero, x) with then: t = x * x, else: x itself. */
static vq_program *square_if_positive(void)
{
    vq_program *p = program_with_vars("f64[3] x; f64 s zero; bool c; f64[3] y z");
    int tb = new_block(p, 0), eb = new_block(p, 0);
    bvar(p, tb, "t", VQ_F64, 1, S3);
    add_ops(p, tb, "mul x x -> t");
    add_ops(p, 0, "greater s zero -> c");
    add_cond(p, 0, tb, eb, "c x -> y", "t", "x");
    add_ops(p, 0, "add y x -> z");
    return p;
}

static void square_if_positive_check(struct fix *f, vq_program *p, const char *name)
{
    for (int k = 0; k < 4; k++) {
        double sv = k % 2 ? -1.0 : 2.0;
        vq_tensor *x = vec3(1.5, -3, 0.25), *ts = scalar(sv), *zero = scalar(0);
        vq_feed feeds[] = {{"x", x}, {"s", ts}, {"zero", zero}};
        vq_fetch fetch = {"z", NULL};
        cr_assert_eq(vq_exec_run(f->ex, p, f->s, feeds, 3, &fetch, 1), 0, "%s: %s", name,
                     vq_errmsg());
        vq_tensor *z = on_host(f->e, fetch.tensor);
        const double *got = vq_tensor_data(z), xs[3] = {1.5, -3, 0.25};
        for (int j = 0; j < 3; j++) {
            double want = (sv > 0 ? xs[j] * xs[j] : xs[j]) + xs[j];
            cr_assert_eq(got[j], want, "%s s=%g: z[%d] = %g, want %g", name, sv, j, got[j], want);
        }
        vq_tensor_release(z);
        vq_tensor_release(x);
        vq_tensor_release(ts);
        vq_tensor_release(zero);
    }
}

Test(control, cond_runs_the_taken_branch_on_every_engine_and_device)
{
    on_every_setup(square_if_positive(), square_if_positive_check);
}

/* while x > one: x = cond(x > ten, then x * half, else x - one); i += one */
static vq_program *halve_or_decrement(void)
{
    vq_program *p = program_with_vars("f64 x one half ten i0 xo io; bool c0");
    int b = new_block(p, 0);
    declare_vars(p, b, "f64 bx bi bx2 bi2; bool cc bc");
    int tb = new_block(p, b), eb = new_block(p, b);
    bvar(p, tb, "t", VQ_F64, 0, NULL);
    bvar(p, eb, "e", VQ_F64, 0, NULL);
    add_ops(p, tb, "mul bx half -> t");
    add_ops(p, eb, "sub bx one -> e");
    add_ops(p, b, "greater bx ten -> cc");
    add_cond(p, b, tb, eb, "cc bx -> bx2", "t", "e");
    add_ops(p, b, "add bi one -> bi2; greater bx2 one -> bc");
    add_ops(p, 0, "greater x one -> c0");
    add_while(p, 0, b, "c0 x i0 -> xo io", "bx bi -> bx2 bi2", "bc", -1, NULL);
    return p;
}

static void halve_or_decrement_check(struct fix *f, vq_program *p, const char *name)
{
    const double xs[] = {0.5, 1, 9, 10, 1000, 12345.678};
    for (int k = 0; k < N_OF(xs); k++) {
        vq_tensor *t[] = {scalar(xs[k]), scalar(1), scalar(0.5), scalar(10), scalar(0)};
        vq_feed feeds[] = {{"x", t[0]}, {"one", t[1]}, {"half", t[2]}, {"ten", t[3]}, {"i0", t[4]}};
        vq_fetch fetches[] = {{"xo", NULL}, {"io", NULL}};
        cr_assert_eq(vq_exec_run(f->ex, p, f->s, feeds, 5, fetches, 2), 0, "%s: %s", name,
                     vq_errmsg());
        double x = xs[k], i = 0;
        while (x > 1) {
            x = x > 10 ? x * 0.5 : x - 1;
            i += 1;
        }
        vq_tensor *xo = on_host(f->e, fetches[0].tensor), *io = on_host(f->e, fetches[1].tensor);
        cr_assert_eq(*(double *)vq_tensor_data(xo), x, "%s x0=%g", name, xs[k]);
        cr_assert_eq(*(double *)vq_tensor_data(io), i, "%s x0=%g", name, xs[k]);
        vq_tensor_release(xo);
        vq_tensor_release(io);
        release_tensors(t, N_OF(t));
    }
}

Test(control, cond_inside_while_matches_c)
{
    on_every_setup(halve_or_decrement(), halve_or_decrement_check);
}

/* ---- memory, asynchronous runs, failures ---- */

/* while i < n: x = x * half + one; i = i + one, over x f64[len]. */
static vq_program *vector_loop(int64_t len)
{
    vq_program *p = program_with_vars("f64 n one half i0 io");
    bvar(p, 0, "x", VQ_F64, 1, &len);
    bvar(p, 0, "xo", VQ_F64, 1, &len);
    bvar(p, 0, "c0", VQ_BOOL, 0, NULL);
    int b = new_block(p, 0);
    bvar(p, b, "bx", VQ_F64, 1, &len);
    bvar(p, b, "bt", VQ_F64, 1, &len);
    bvar(p, b, "bx2", VQ_F64, 1, &len);
    declare_vars(p, b, "f64 bi bi2; bool bc");
    add_ops(p, b, "mul bx half -> bt; add bt one -> bx2; add bi one -> bi2; less bi2 n -> bc");
    add_ops(p, 0, "less i0 n -> c0");
    add_while(p, 0, b, "c0 x i0 -> xo io", "bx bi -> bx2 bi2", "bc", -1, NULL);
    return p;
}

static size_t vector_loop_peak(struct fix *f, vq_program *p, int64_t len, double n)
{
    vq_tensor *x, *t[] = {scalar(n), scalar(1), scalar(0.5), scalar(0)};
    x = tensor_new(VQ_F64, 1, &len);
    memset(vq_tensor_data(x), 0, (size_t)len * sizeof(double));
    vq_feed feeds[] = {{"x", x}, {"n", t[0]}, {"one", t[1]}, {"half", t[2]}, {"i0", t[3]}};
    vq_fetch fetch = {"io", NULL};
    cr_assert_eq(vq_exec_run(f->ex, p, f->s, feeds, 5, &fetch, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(*(double *)vq_tensor_data(fetch.tensor), n);
    vq_tensor_release(fetch.tensor);
    vq_tensor_release(x);
    release_tensors(t, N_OF(t));
    vq_exec_stats st;
    cr_assert_eq(vq_exec_get_stats(f->ex, &st), 0);
    return st.last_peak_bytes;
}

#ifdef VQ_TEST_SANITIZER
#define LONG_LOOP 10000
#else
#define LONG_LOOP 100000
#endif

Test(control, a_long_loop_keeps_memory_flat)
{
    const int64_t len = 4096; /* 32 KiB per value */
    const size_t value = (size_t)len * sizeof(double);
    vq_program *p = vector_loop(len);
    for (int s = 0; s < 3; s++) {
        struct fix f = fix_new(&setups[s]);
        size_t one = vector_loop_peak(&f, p, len, 1);
        size_t many = vector_loop_peak(&f, p, len, LONG_LOOP);
        /* One iteration holds the feed x, bt and bx2 (and scalars); the
         * ring may hold a few iterations' values at once, never more. */
        cr_assert_leq(many, 2 * one, "%s: peak %zu bytes over %d iterations, %zu over one",
                      setups[s].name, many, LONG_LOOP, one);
        cr_assert_geq(one, 3 * value, "%s: one iteration's peak %zu", setups[s].name, one);
        fix_free(&f);
    }
    vq_program_free(p);
}

struct async_result {
    atomic_int done, failed;
    vq_fetch fetches[2];
    double n;
};

static void async_done(void *user, int err)
{
    struct async_result *r = user;
    if (err)
        atomic_fetch_add(&r->failed, 1);
    atomic_fetch_add(&r->done, 1);
}

Test(control, many_async_runs_with_loops_in_flight)
{
    for (int s = 0; s < N_OF(setups); s++) {
        struct fix f = fix_new(&setups[s]);
        vq_program *p = counter_loop(-1);
        enum { RUNS = 24 };
        struct async_result res[RUNS];
        vq_tensor *x = vec3(1.5, -2.25, 1e6), *one = scalar(1), *half = scalar(0.5),
                  *i0 = scalar(0), *ns[RUNS];
        for (int k = 0; k < RUNS; k++) {
            atomic_init(&res[k].done, 0);
            atomic_init(&res[k].failed, 0);
            res[k].n = k % 7;
            res[k].fetches[0] = (vq_fetch){"xo", NULL};
            res[k].fetches[1] = (vq_fetch){"io", NULL};
            ns[k] = scalar(res[k].n);
            vq_feed feeds[] = {{"x", x}, {"n", ns[k]}, {"one", one}, {"half", half},
                               {"i0", i0}};
            cr_assert_eq(vq_exec_run_async(f.ex, p, f.s, feeds, 5, res[k].fetches, 2,
                                           async_done, &res[k]),
                         0, "%s: %s", setups[s].name, vq_errmsg());
        }
        cr_assert_eq(vq_wait_all(f.e), 0, "%s", vq_errmsg());
        for (int k = 0; k < RUNS; k++) {
            cr_assert_eq(atomic_load(&res[k].done), 1);
            cr_assert_eq(atomic_load(&res[k].failed), 0);
            double want[3] = {1.5, -2.25, 1e6}, wi = 0;
            counter_ref(want, &wi, res[k].n, -1);
            vq_tensor *xo = on_host(f.e, res[k].fetches[0].tensor);
            cr_assert(memcmp(vq_tensor_data(xo), want, sizeof want) == 0, "%s run %d",
                      setups[s].name, k);
            vq_tensor_release(xo);
            vq_tensor_release(res[k].fetches[1].tensor);
            vq_tensor_release(ns[k]);
        }
        vq_tensor_release(x);
        vq_tensor_release(one);
        vq_tensor_release(half);
        vq_tensor_release(i0);
        vq_program_free(p);
        fix_free(&f);
    }
}

/* while i < n: q = d / (n - i - one) ... in i32: divides by zero on the
 * iteration where i = n - 1. */
static vq_program *failing_loop(void)
{
    vq_program *p = program_with_vars("i32 n one i0 io q0 qo d; bool c0");
    int b = block_with(p, 0, "i32 bi bi2 bq bq2 left den; bool bc",
                       "sub n bi -> left; sub left one -> den; div d den -> bq2; add bi one -> "
                       "bi2; less bi2 n -> bc");
    add_ops(p, 0, "less i0 n -> c0");
    add_while(p, 0, b, "c0 i0 q0 -> io qo", "bi bq -> bi2 bq2", "bc", -1, NULL);
    return p;
}

static vq_tensor *iscalar(int32_t v)
{
    vq_tensor *t = tensor_new(VQ_I32, 0, NULL);
    *(int32_t *)vq_tensor_data(t) = v;
    return t;
}

static void failing_loop_check(struct fix *f, vq_program *p, const char *name)
{
    for (int round = 0; round < 3; round++) {
        vq_tensor *t[] = {iscalar(5), iscalar(1), iscalar(0), iscalar(0), iscalar(60)};
        vq_feed feeds[] = {{"n", t[0]}, {"one", t[1]}, {"i0", t[2]}, {"q0", t[3]}, {"d", t[4]}};
        vq_fetch fetch = {"qo", NULL};
        int rc = vq_exec_run(f->ex, p, f->s, feeds, 5, &fetch, 1);
        cr_assert_eq(rc, VQ_EINVAL, "%s: rc %d (%s)", name, rc, vq_errmsg());
        cr_assert(strstr(vq_errmsg(), "block 1 op 2 (div)"), "%s: %s", name, vq_errmsg());
        cr_assert_null(fetch.tensor);
        /* n = 0: no iteration, no division */
        vq_tensor_release(t[0]);
        t[0] = iscalar(0);
        feeds[0].tensor = t[0];
        cr_assert_eq(vq_exec_run(f->ex, p, f->s, feeds, 5, &fetch, 1), 0, "%s: %s", name,
                     vq_errmsg());
        vq_tensor *q = on_host(f->e, fetch.tensor);
        cr_assert_eq(*(int32_t *)vq_tensor_data(q), 0);
        vq_tensor_release(q);
        release_tensors(t, N_OF(t));
    }
}

Test(control, a_failing_body_fails_the_run_and_the_plan_stays_usable)
{
    on_every_setup(failing_loop(), failing_loop_check);
}

/* ---- bad control ops: errors at preparation ---- */

static void expect_error(vq_program *p, const char *const *feeds, int nfeeds, const char *fetch,
                         const char *needle)
{
    struct fix f = fix_new(&setups[2]);
    int rc = vq_exec_prepare(f.ex, p, f.s, feeds, nfeeds, &fetch, 1);
    cr_assert_eq(rc, VQ_EINVAL, "prepared a bad program (expected \"%s\"): rc %d", needle, rc);
    cr_assert(strstr(vq_errmsg(), needle), "message \"%s\" lacks \"%s\"", vq_errmsg(), needle);
    fix_free(&f);
    vq_program_free(p);
}

#define COUNTER_FEEDS NAMES("x", "n", "one", "half", "i0"), 5

/* The counter loop with one attribute of the while replaced. */
static vq_program *counter_with(const vq_attr *change)
{
    vq_program *p = program_with_vars("f64 n one half i0 io nf; f64[3] x xo; bool c0");
    int b = new_block(p, 0);
    declare_vars(p, b, "f64[3] bx bx2; f64 bi bi2; bool bc; f64 bf");
    int64_t s4 = 4;
    bvar(p, b, "b4", VQ_F64, 1, &s4);
    int nested = new_block(p, b);
    (void)nested;
    add_ops(p, b, "add bi one -> bi2; mul bx half -> bx2; less bi2 n -> bc");
    add_ops(p, 0, "less i0 n -> c0");
    vq_attr a[5];
    while_attrs(a, b, NAMES("bx", "bi"), NAMES("bx2", "bi2"), 2, "bc", -1);
    for (int i = 0; change && i < 5; i++)
        if (!strcmp(a[i].name, change->name))
            a[i] = *change;
    bop(p, 0, "while", NAMES("c0", "x", "i0"), 3, NAMES("xo", "io"), 2, a, 5);
    return p;
}

Test(control, bad_while_ops_are_errors_naming_the_op_block_and_var)
{
    vq_attr a;
    a = VQ_ATTR_I("body_block", 2);
    expect_error(counter_with(&a), COUNTER_FEEDS, "xo",
                 "op 1 (while): body_block 2 is not a child of block 0 (its parent is block 1)");
    a = VQ_ATTR_I("body_block", 7);
    expect_error(counter_with(&a), COUNTER_FEEDS, "xo", "body_block 7: no such block");
    a = VQ_ATTR_I("body_block", 0);
    expect_error(counter_with(&a), COUNTER_FEEDS, "xo", "body_block 0: no such block");
    a = VQ_ATTR_SS("body_inputs", NAMES("bx"), 1);
    expect_error(counter_with(&a), COUNTER_FEEDS, "xo",
                 "body_inputs names 1 vars; the op has 2 loop-carried inputs X");
    a = VQ_ATTR_SS("body_outputs", NAMES("bx2", "bf"), 2);
    expect_error(counter_with(&a), COUNTER_FEEDS, "xo",
                 "body_outputs[1]: var bf is not written by the body (block 1)");
    a = VQ_ATTR_SS("body_outputs", NAMES("bx2", "bi"), 2);
    expect_error(counter_with(&a), COUNTER_FEEDS, "xo",
                 "body_outputs[1]: var bi is not written by the body");
    a = VQ_ATTR_SS("body_outputs", NAMES("bx2", "b4"), 2);
    expect_error(counter_with(&a), COUNTER_FEEDS, "xo", "body_outputs[1]: var b4 is not written");
    a = VQ_ATTR_SS("body_outputs", NAMES("bx2", "nope"), 2);
    expect_error(counter_with(&a), COUNTER_FEEDS, "xo", "body_outputs[1]: block 1 has no var nope");
    a = VQ_ATTR_S("body_cond", "bi2");
    expect_error(counter_with(&a), COUNTER_FEEDS, "xo",
                 "body_cond bi2 is f64[]; a predicate is a bool scalar");
    a = VQ_ATTR_S("body_cond", "c0");
    expect_error(counter_with(&a), COUNTER_FEEDS, "xo", "body_cond c0 is not a var of the body");
    a = VQ_ATTR_S("body_cond", "bf");
    expect_error(counter_with(&a), COUNTER_FEEDS, "xo", "body_cond bf is not written by the body");
    a = VQ_ATTR_I("max_iters", -5);
    expect_error(counter_with(&a), COUNTER_FEEDS, "xo", "max_iters is -5");
    a = VQ_ATTR_SS("body_inputs", NAMES("bx", "x"), 2);
    expect_error(counter_with(&a), COUNTER_FEEDS, "xo",
                 "body_inputs[1]: var x is declared in block 0, not in the body (block 1)");
}

Test(control, a_carried_value_must_keep_its_shape)
{
    vq_program *p = new_program();
    int64_t s2 = 2;
    declare_vars(p, 0, "f64[3] x xo; bool c");
    bvar(p, 0, "y", VQ_F64, 1, &s2);
    int b = new_block(p, 0);
    bvar(p, b, "bx", VQ_F64, 1, S3);
    bvar(p, b, "bx2", VQ_F64, 1, &s2);
    bvar(p, b, "bc", VQ_BOOL, 0, NULL);
    add_ops(p, b, "add y y -> bx2; logical_not c -> bc");
    add_while(p, 0, b, "c x -> xo", "bx -> bx2", "bc", -1, NULL);
    expect_error(p, NAMES("x", "c", "y"), 3, "xo",
                 "body_outputs[0] bx2 is f64[2] but carries into body input bx, which is f64[3]");
}

/* x, y, z f64[3], c bool, f f64 scalar in block 0, and two empty blocks. */
static vq_program *cond_skeleton(int *tb, int *eb)
{
    vq_program *p = program_with_vars("f64[3] x y z; bool c; f64 f");
    *tb = new_block(p, 0);
    *eb = new_block(p, 0);
    return p;
}

Test(control, bad_cond_ops_are_errors)
{
    /* branches that disagree on a shape */
    int tb, eb;
    vq_program *p = cond_skeleton(&tb, &eb);
    int64_t s2 = 2;
    bvar(p, 0, "w", VQ_F64, 1, &s2);
    bvar(p, tb, "t", VQ_F64, 1, S3);
    add_ops(p, tb, "add x x -> t");
    add_cond(p, 0, tb, eb, "c x -> y", "t", "w");
    expect_error(p, NAMES("x", "w", "c"), 3, "y",
                 "op 0 (cond): output 0: then_outputs[0] t is f64[3], else_outputs[0] w is "
                 "f64[2]");

    /* a predicate that is not a bool scalar */
    p = cond_skeleton(&tb, &eb);
    add_cond(p, 0, tb, eb, "f x -> y", "x", "x");
    expect_error(p, NAMES("x", "f"), 2, "y",
                 "op 0 (cond): input Cond f is f64[]; a predicate is a bool scalar");

    /* a branch that writes an enclosing var */
    p = cond_skeleton(&tb, &eb);
    add_ops(p, tb, "add x x -> z");
    add_cond(p, 0, tb, eb, "c x -> y", "x", "x");
    expect_error(p, NAMES("x", "c"), 2, "y",
                 "block 1 op 0 (add): writes var z of block 0: an op of a cond or while block "
                 "writes only its own block's vars");

    /* one block used by two ops */
    p = cond_skeleton(&tb, &eb);
    add_cond(p, 0, tb, eb, "c x -> y", "x", "x");
    add_cond(p, 0, tb, eb, "c x -> z", "x", "x");
    expect_error(p, NAMES("x", "c"), 2, "z",
                 "op 1 (cond): then_block 1 is already the block of op 0 of block 0");

    /* then == else */
    p = cond_skeleton(&tb, &eb);
    add_cond(p, 0, tb, tb, "c x -> y", "x", "x");
    expect_error(p, NAMES("x", "c"), 2, "y", "else_block 1 is already the block of op 0");
}

Test(control, control_ops_are_refused_outside_programs)
{
    vq_tensor *c = NULL, *x = scalar(1), *out = NULL;
    c = tensor_new(VQ_BOOL, 0, NULL);
    vq_tensor *in[] = {c, x};
    vq_attr a[4];
    cond_attrs(a, 1, 2, NAMES("x"), NAMES("x"), 1);
    cr_assert_eq(vq_op_run(NULL, "cond", in, 2, &out, 1, a, 4), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "cond: a control-flow op runs only inside a program"), "%s",
              vq_errmsg());
    cr_assert_null(out);
    vq_tensor_release(c);
    vq_tensor_release(x);
}

/* ---- iterations overlap ---- */

/* while i < n: i = i + one; s = m @ m (s is read by nothing: each
 * iteration's matmul depends only on m, not on the iteration before). */
static vq_program *independent_work_loop(void)
{
    vq_program *p = new_program();
    int64_t mm[2] = {320, 320};
    declare_vars(p, 0, "f64 n one i0 io");
    bvar(p, 0, "m", VQ_F64, 2, mm);
    bvar(p, 0, "c0", VQ_BOOL, 0, NULL);
    int b = new_block(p, 0);
    declare_vars(p, b, "f64 bi bi2; bool bc");
    bvar(p, b, "s", VQ_F64, 2, mm);
    add_ops(p, b, "add bi one -> bi2; less bi2 n -> bc; matmul m m -> s");
    add_ops(p, 0, "less i0 n -> c0");
    add_while(p, 0, b, "c0 i0 -> io", "bi -> bi2", "bc", -1, NULL);
    return p;
}

/* Start and end (µs) of every op called name in a Chrome trace. */
static int trace_spans(const char *path, const char *name, double *start, double *end, int max)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f);
    static char buf[1 << 22];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    char key[64];
    snprintf(key, sizeof key, "{\"name\":\"%s\"", name);
    int n = 0;
    for (char *at = strstr(buf, key); at && n < max; at = strstr(at + 1, key)) {
        char *ts = strstr(at, "\"ts\":"), *dur = strstr(at, "\"dur\":");
        cr_assert(ts && dur);
        start[n] = strtod(ts + 5, NULL);
        end[n] = start[n] + strtod(dur + 6, NULL);
        n++;
    }
    return n;
}

Test(control, an_iteration_starts_its_independent_work_before_the_last_one_ends)
{
    vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2,
                         .flags = VQ_ENGINE_PROFILE};
    struct fix f;
    cr_assert_eq(vq_engine_new(&f.e, &eo), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_exec_new(&f.ex, f.e, NULL), 0);
    cr_assert_eq(vq_scope_new(&f.s), 0);
    vq_program *p = independent_work_loop();
    int64_t mm[2] = {320, 320};
    vq_tensor *m = tensor_new(VQ_F64, 2, mm);
    double *md = vq_tensor_data(m);
    for (int i = 0; i < 320 * 320; i++)
        md[i] = (i % 7) * 0.25;
    enum { ITERS = 24 };
    vq_tensor *t[] = {scalar(ITERS), scalar(1), scalar(0)};
    vq_feed feeds[] = {{"n", t[0]}, {"one", t[1]}, {"i0", t[2]}, {"m", m}};
    vq_fetch fetch = {"io", NULL};
    cr_assert_eq(vq_exec_run(f.ex, p, f.s, feeds, 4, &fetch, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(*(double *)vq_tensor_data(fetch.tensor), ITERS);
    vq_tensor_release(fetch.tensor);
    char path[] = "/tmp/varq_control_traceXXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(vq_profiler_dump(f.e, path), 0, "%s", vq_errmsg());
    double start[64], end[64];
    int n = trace_spans(path, "matmul", start, end, 64);
    if (getenv("KEEP_TRACE")) printf("trace %s\n", path); else unlink(path);
    cr_assert_eq(n, ITERS, "%d matmuls in the trace", n);
    /* Two matmuls of different iterations ran at the same time. */
    int overlapping = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            overlapping += i != j && start[j] >= start[i] && start[j] < end[i];
    cr_assert_gt(overlapping, 0, "no iteration's matmul started before another's ended");
    release_tensors(t, N_OF(t));
    vq_tensor_release(m);
    vq_program_free(p);
    fix_free(&f);
}

/* ---- random programs with nested cond and while, against C ---- */

/* A random program over f64 scalars: statements out = a op b (add, sub,
 * maximum, minimum, or times one half), out = cond(a > b, then-block
 * result, else-block result) and (out, _) = while(zero < limit, v, zero)
 * whose body updates v with random statements and counts to the limit;
 * blocks nest up to depth 2. The same statements are interpreted in C. */
enum { R_BIN, R_COND, R_WHILE };

struct rstmt {
    int kind, op, out, a, b;
    int blocks[2];  /* cond: then, else; while: body */
    int res[2];     /* cond: each branch's result; while: the body's new v */
    int bv, bi, bi2, bc, limit, outi; /* while */
};

#define RMAX_VARS 512
#define RMAX_STMTS 256

struct rprog {
    vq_program *p;
    int nvars;
    char names[RMAX_VARS][8];
    double env[RMAX_VARS];
    struct rstmt st[RMAX_STMTS];
    int nst;
    int block_n[128]; /* statements of each block, in order */
    int order[128][16];
    uint64_t rng;
    int one, half, zero, limits[4];
};

static uint64_t rnext(struct rprog *g)
{
    uint64_t z = (g->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int rvar(struct rprog *g, int block, vq_dtype dt)
{
    cr_assert_lt(g->nvars, RMAX_VARS);
    int v = g->nvars++;
    snprintf(g->names[v], sizeof g->names[v], "v%d", v);
    bvar(g->p, block, g->names[v], dt, 0, NULL);
    return v;
}

struct avail {
    int v[128];
    int n;
};

static int rpick(struct rprog *g, const struct avail *a)
{
    return a->v[rnext(g) % (uint64_t)a->n];
}

static const char *const rbin_ops[] = {"add", "sub", "maximum", "minimum", "mul"};

static void rgen_block(struct rprog *g, int block, int depth, struct avail *av);

static void rgen_stmt(struct rprog *g, int block, int depth, struct avail *av)
{
    cr_assert_lt(g->nst, RMAX_STMTS);
    int k = g->nst++;
    struct rstmt *s = &g->st[k];
    memset(s, 0, sizeof *s);
    g->order[block][g->block_n[block]++] = k;
    int r = (int)(rnext(g) % 10);
    s->kind = depth >= 2 || r < 6 ? R_BIN : r < 8 ? R_COND : R_WHILE;
    s->a = rpick(g, av);
    s->b = rpick(g, av);
    if (s->kind == R_BIN) {
        s->op = (int)(rnext(g) % 5);
        if (s->op == 4)
            s->b = g->half; /* products stay small */
        s->out = rvar(g, block, VQ_F64);
        bop(g->p, block, rbin_ops[s->op], (const char *[]){g->names[s->a], g->names[s->b]}, 2,
            (const char *[]){g->names[s->out]}, 1, NULL, 0);
    } else if (s->kind == R_COND) {
        int c = rvar(g, block, VQ_BOOL);
        bop(g->p, block, "greater", (const char *[]){g->names[s->a], g->names[s->b]}, 2,
            (const char *[]){g->names[c]}, 1, NULL, 0);
        for (int i = 0; i < 2; i++) {
            s->blocks[i] = new_block(g->p, block);
            cr_assert_lt(s->blocks[i], 128);
            struct avail sub = *av;
            rgen_block(g, s->blocks[i], depth + 1, &sub);
            s->res[i] = rpick(g, &sub); /* may be a var from outside */
        }
        s->out = rvar(g, block, VQ_F64);
        vq_attr a[4];
        cond_attrs(a, s->blocks[0], s->blocks[1], (const char *[]){g->names[s->res[0]]},
                   (const char *[]){g->names[s->res[1]]}, 1);
        bop(g->p, block, "cond", (const char *[]){g->names[c], g->names[s->a]}, 2,
            (const char *[]){g->names[s->out]}, 1, a, 4);
    } else {
        s->limit = g->limits[rnext(g) % 4];
        int c0 = rvar(g, block, VQ_BOOL);
        bop(g->p, block, "less", (const char *[]){g->names[g->zero], g->names[s->limit]}, 2,
            (const char *[]){g->names[c0]}, 1, NULL, 0);
        int body = s->blocks[0] = new_block(g->p, block);
        cr_assert_lt(body, 128);
        s->bv = rvar(g, body, VQ_F64);
        s->bi = rvar(g, body, VQ_F64);
        struct avail sub = *av;
        sub.v[sub.n++] = s->bv;
        sub.v[sub.n++] = s->bi;
        int first = g->nvars;
        rgen_block(g, body, depth + 1, &sub);
        /* the new v: a var the body wrote itself */
        struct avail own = {.n = 0};
        for (int i = 0; i < sub.n; i++)
            if (sub.v[i] >= first && g->names[sub.v[i]][0] && own.n < 128)
                own.v[own.n++] = sub.v[i];
        s->res[0] = rpick(g, &own);
        s->bi2 = rvar(g, body, VQ_F64);
        s->bc = rvar(g, body, VQ_BOOL);
        bop(g->p, body, "add", (const char *[]){g->names[s->bi], g->names[g->one]}, 2,
            (const char *[]){g->names[s->bi2]}, 1, NULL, 0);
        bop(g->p, body, "less", (const char *[]){g->names[s->bi2], g->names[s->limit]}, 2,
            (const char *[]){g->names[s->bc]}, 1, NULL, 0);
        s->out = rvar(g, block, VQ_F64);
        s->outi = rvar(g, block, VQ_F64);
        vq_attr a[5];
        while_attrs(a, body, (const char *[]){g->names[s->bv], g->names[s->bi]},
                    (const char *[]){g->names[s->res[0]], g->names[s->bi2]}, 2, g->names[s->bc],
                    -1);
        bop(g->p, block, "while",
            (const char *[]){g->names[c0], g->names[s->a], g->names[g->zero]}, 3,
            (const char *[]){g->names[s->out], g->names[s->outi]}, 2, a, 5);
    }
    av->v[av->n++] = s->out;
}

static void rgen_block(struct rprog *g, int block, int depth, struct avail *av)
{
    int n = 1 + (int)(rnext(g) % (depth ? 3 : 6));
    for (int i = 0; i < n && av->n < 120; i++)
        rgen_stmt(g, block, depth, av);
}

static void rrun_block(struct rprog *g, int block)
{
    for (int i = 0; i < g->block_n[block]; i++) {
        struct rstmt *s = &g->st[g->order[block][i]];
        double a = g->env[s->a], b = g->env[s->b];
        if (s->kind == R_BIN) {
            double r[] = {a + b, a - b, a > b ? a : b, a < b ? a : b, a * b};
            g->env[s->out] = r[s->op];
        } else if (s->kind == R_COND) {
            int br = a > b ? 0 : 1;
            rrun_block(g, s->blocks[br]);
            g->env[s->out] = g->env[s->res[br]];
        } else {
            double v = a, i = 0, lim = g->env[s->limit];
            if (0 < lim) {
                bool go;
                do {
                    g->env[s->bv] = v;
                    g->env[s->bi] = i;
                    rrun_block(g, s->blocks[0]);
                    v = g->env[s->res[0]];
                    i = i + 1;
                    go = i < lim;
                } while (go);
            }
            g->env[s->out] = v;
            g->env[s->outi] = i;
        }
    }
}

Test(control, random_nested_programs_match_their_c_interpretation)
{
    uint64_t seed = 20261124;
    const char *env = getenv("VARQ_TEST_SEED");
    if (env && *env)
        seed = strtoull(env, NULL, 0);
    static struct rprog g;
    struct fix fx[N_OF(setups)];
    for (int s = 0; s < N_OF(setups); s++)
        fx[s] = fix_new(&setups[s]);
    int loops = 0, conds = 0;
    for (int prog = 0; prog < 40; prog++) {
        memset(&g, 0, sizeof g);
        g.rng = seed * 1000 + (uint64_t)prog;
        cr_assert_eq(vq_program_new(&g.p), 0);
        struct avail av = {.n = 0};
        const double consts[] = {1, 0.5, 0, 1, 2, 3, 5};
        int cv[7];
        for (int i = 0; i < 7; i++) {
            cv[i] = rvar(&g, 0, VQ_F64);
            g.env[cv[i]] = consts[i];
        }
        g.one = cv[0];
        g.half = cv[1];
        g.zero = cv[2];
        for (int i = 0; i < 4; i++)
            g.limits[i] = cv[3 + i];
        int ninputs = 3;
        for (int i = 0; i < ninputs; i++) {
            int v = rvar(&g, 0, VQ_F64);
            g.env[v] = (double)(int64_t)(rnext(&g) % 17) - 8 + 0.25 * (double)(rnext(&g) % 4);
            av.v[av.n++] = v;
        }
        int nfeeds = g.nvars;
        av.v[av.n++] = g.one;
        rgen_block(&g, 0, 0, &av);
        for (int i = 0; i < g.nst; i++) {
            loops += g.st[i].kind == R_WHILE;
            conds += g.st[i].kind == R_COND;
        }
        double want[RMAX_VARS];
        rrun_block(&g, 0);
        memcpy(want, g.env, sizeof want);
        /* feeds: every input var; fetches: every statement of block 0 */
        vq_feed feeds[16];
        for (int i = 0; i < nfeeds; i++)
            feeds[i] = (vq_feed){g.names[i], scalar(g.env[i])};
        int fetch_vars[16], nf = 0;
        for (int i = 0; i < g.block_n[0]; i++)
            fetch_vars[nf++] = g.st[g.order[0][i]].out;
        for (int s = 0; s < N_OF(setups); s++) {
            vq_fetch fetches[16];
            for (int i = 0; i < nf; i++)
                fetches[i] = (vq_fetch){g.names[fetch_vars[i]], NULL};
            int rc = vq_exec_run(fx[s].ex, g.p, fx[s].s, feeds, nfeeds, fetches, nf);
            if (rc) {
                vq_program_dump(g.p, stderr);
                cr_assert_fail("seed %llu program %d %s: %s", (unsigned long long)seed, prog,
                               setups[s].name, vq_errmsg());
            }
            for (int i = 0; i < nf; i++) {
                vq_tensor *t = on_host(fx[s].e, fetches[i].tensor);
                double got = *(double *)vq_tensor_data(t);
                if (memcmp(&got, &want[fetch_vars[i]], sizeof got)) {
                    vq_program_dump(g.p, stderr);
                    cr_assert_fail("seed %llu program %d %s: %s = %.17g, want %.17g",
                                   (unsigned long long)seed, prog, setups[s].name,
                                   g.names[fetch_vars[i]], got, want[fetch_vars[i]]);
                }
                vq_tensor_release(t);
            }
        }
        for (int i = 0; i < nfeeds; i++)
            vq_tensor_release(feeds[i].tensor);
        vq_program_free(g.p);
    }
    cr_assert_gt(loops, 10, "only %d loops generated", loops);
    cr_assert_gt(conds, 10, "only %d conds generated", conds);
    for (int s = 0; s < N_OF(setups); s++)
        fix_free(&fx[s]);
}

/* ---- fuzz: mutated encodings of programs with nested blocks ---- */

static uint64_t fuzz_rng;

static uint64_t fuzz_next(void)
{
    uint64_t z = (fuzz_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Decodes, dumps and prepares one mutated encoding: each step succeeds or
 * fails with a message, never crashes (ASan checks the reads). */
static int fuzz_prepare(struct fix *f, const uint8_t *buf, size_t len, uint64_t seed, int casenum)
{
    vq_program *q = NULL;
    int rc = vq_program_decode(&q, buf, len);
    if (rc < 0) {
        cr_assert_eq(rc, VQ_EINVAL, "seed %llu case %d", (unsigned long long)seed, casenum);
        return 0;
    }
    FILE *null = fopen("/dev/null", "w");
    cr_assert_eq(vq_program_dump(q, null), 0);
    fclose(null);
    const char *feeds[] = {"x", "one", "half", "ten", "i0"}, *fetch = "xo";
    rc = vq_exec_prepare(f->ex, q, f->s, feeds, 5, &fetch, 1);
    if (rc < 0)
        cr_assert(vq_errmsg()[0], "seed %llu case %d: rc %d without a message",
                  (unsigned long long)seed, casenum, rc);
    vq_program_free(q);
    return rc == 0;
}

Test(control, fuzzed_programs_with_blocks_decode_and_prepare_or_fail_cleanly)
{
    uint64_t seed = 20261124;
    const char *env = getenv("VARQ_TEST_SEED");
    if (env && *env)
        seed = strtoull(env, NULL, 0);
    fuzz_rng = seed;
    struct fix f = fix_new(&setups[2]);
    /* a small plan cache: most cases are new programs */
    vq_exec_free(f.ex);
    vq_exec_opts o = {.cache_size = 2};
    cr_assert_eq(vq_exec_new(&f.ex, f.e, &o), 0);
    vq_program *p = halve_or_decrement();
    void *good;
    size_t len;
    cr_assert_eq(vq_program_encode(p, &good, &len), 0);
    int cases = 0, prepared = 0;
    uint8_t *buf = malloc(len);
    while (cases < 4000) {
        memcpy(buf, good, len);
        size_t n = len;
        int kind = (int)(fuzz_next() % 4), edits = 1 + (int)(fuzz_next() % 3);
        for (int e = 0; e < edits; e++) {
            size_t at = (size_t)(fuzz_next() % len);
            if (kind == 0 || kind == 2)
                buf[at] ^= (uint8_t)(1u << (fuzz_next() % 8));
            else
                buf[at] = (uint8_t)fuzz_next();
        }
        if (kind >= 2)
            n = (size_t)(fuzz_next() % (len + 1));
        uint8_t *copy = malloc(n ? n : 1); /* exact size */
        memcpy(copy, buf, n);
        prepared += fuzz_prepare(&f, copy, n, seed, cases++);
        free(copy);
    }
    /* The unmutated program prepares. */
    prepared += fuzz_prepare(&f, good, len, seed, cases++);
    cr_assert_geq(prepared, 1);
    fprintf(stderr, "control fuzz: seed %llu, %d cases, %d prepared\n", (unsigned long long)seed,
            cases, prepared);
    free(buf);
    free(good);
    vq_program_free(p);
    fix_free(&f);
}

/* The nested program with the control ops' attributes drawn at random from
 * plausible values: every block index, every var name (of any block, or
 * none), lists of 0-3 names. Preparation must refuse or accept each one
 * without crashing; an accepted one must run (bounded by max_iters). */
static vq_program *random_control_attrs(void)
{
    static const char *const names[] = {"x", "one", "half", "ten", "i0", "xo", "io", "c0",
                                        "bx", "bi", "bx2", "bi2", "cc", "bc", "t", "e", "nope"};
    const int nn = N_OF(names);
    vq_program *p = program_with_vars("f64 x one half ten i0 xo io; bool c0");
    int b = new_block(p, 0);
    declare_vars(p, b, "f64 bx bi bx2 bi2; bool cc bc");
    bool else_in_body = fuzz_next() % 2; /* else a child of block 0: misplaced */
    int tb = new_block(p, b), eb = new_block(p, else_in_body ? b : 0);
    bvar(p, tb, "t", VQ_F64, 0, NULL);
    bvar(p, eb, "e", VQ_F64, 0, NULL);
    add_ops(p, tb, "mul bx half -> t");
    bop(p, eb, "sub", NAMES(else_in_body && fuzz_next() % 2 ? "bx" : "x", "one"), 2,
        NAMES("e"), 1, NULL, 0);
    add_ops(p, b, "greater bx ten -> cc");
    /* the right attributes, then up to two of them drawn at random */
    const char *l1[3] = {"t"}, *l2[3] = {"e"}, *l3[3] = {"bx", "bi"}, *l4[3] = {"bx2", "bi2"};
    const char **lists[] = {l1, l2, l3, l4};
    int counts[4] = {1, 1, 2, 2}, blocks[3] = {tb, eb, b};
    const char *body_cond = "bc";
    int edits = (int)(fuzz_next() % 3);
    for (int e = 0; e < edits; e++) {
        int what = (int)(fuzz_next() % 8);
        if (what < 3) {
            blocks[what] = (int)(fuzz_next() % 6) - 1;
        } else if (what < 7) {
            int i = what - 3;
            counts[i] = (int)(fuzz_next() % 4);
            for (int j = 0; j < counts[i]; j++)
                lists[i][j] = names[fuzz_next() % (uint64_t)nn];
        } else {
            body_cond = names[fuzz_next() % (uint64_t)nn];
        }
    }
    vq_attr ca[4];
    cond_attrs(ca, blocks[0], blocks[1], l1, l2, 1);
    ca[2].n = counts[0];
    ca[3].n = counts[1];
    bop(p, b, "cond", NAMES("cc", "bx"), 2, NAMES("bx2"), 1, ca, 4);
    add_ops(p, b, "add bi one -> bi2; greater bx2 one -> bc");
    add_ops(p, 0, "greater x one -> c0");
    vq_attr wa[5];
    while_attrs(wa, blocks[2], l3, l4, 2, body_cond, 20);
    wa[1].n = counts[2];
    wa[2].n = counts[3];
    bop(p, 0, "while", NAMES("c0", "x", "i0"), 3, NAMES("xo", "io"), 2, wa, 5);
    return p;
}

Test(control, random_control_attributes_prepare_or_fail_cleanly)
{
    fuzz_rng = 777;
    struct fix f = fix_new(&setups[2]);
    int prepared = 0;
    vq_tensor *t[] = {scalar(50), scalar(1), scalar(0.5), scalar(10), scalar(0)};
    vq_feed feeds[] = {{"x", t[0]}, {"one", t[1]}, {"half", t[2]}, {"ten", t[3]}, {"i0", t[4]}};
    for (int k = 0; k < 1500; k++) {
        vq_program *p = random_control_attrs();
        vq_fetch fetch = {"xo", NULL};
        int rc = vq_exec_run(f.ex, p, f.s, feeds, 5, &fetch, 1);
        if (rc == 0) {
            prepared++;
            vq_tensor_release(fetch.tensor);
        } else {
            cr_assert_eq(rc, VQ_EINVAL, "case %d: rc %d: %s", k, rc, vq_errmsg());
        }
        vq_program_free(p);
    }
    release_tensors(t, N_OF(t));
    fprintf(stderr, "control attribute fuzz: 1500 cases, %d ran\n", prepared);
    cr_assert_geq(prepared, 1);
    fix_free(&f);
}

/* ---- against the same loop unrolled into straight-line code ---- */

/* counter_loop's n iterations written out in block 0. */
static vq_program *counter_unrolled(int n)
{
    char x[16] = "x";
    vq_program *p = program_with_vars("f64 n one half i0; f64[3] x");
    for (int k = 0; k < n; k++) {
        declare_varsf(p, 0, "f64 i%d; f64[3] t%d x%d", k + 1, k, k + 1);
        add_opsf(p, 0, "add i%d one -> i%d; mul %s half -> t%d; add t%d i%d -> x%d", k, k + 1, x, k,
                 k, k + 1, k + 1);
        snprintf(x, sizeof x, "x%d", k + 1);
    }
    return p;
}

Test(control, while_gives_the_bits_of_the_unrolled_program)
{
    vq_program *loop = counter_loop(-1);
    for (int s = 0; s < N_OF(setups); s++) {
        struct fix f = fix_new(&setups[s]);
        for (int n = 1; n <= 9; n += 4) {
            vq_program *flat = counter_unrolled(n);
            vq_tensor *x = vec3(0.1, -7.3, 3e-5), *tn = scalar(n), *one = scalar(1),
                      *half = scalar(0.5), *i0 = scalar(0);
            vq_feed feeds[] = {{"x", x}, {"n", tn}, {"one", one}, {"half", half}, {"i0", i0}};
            char last[16];
            snprintf(last, sizeof last, "x%d", n);
            vq_fetch a = {"xo", NULL}, b = {last, NULL};
            cr_assert_eq(vq_exec_run(f.ex, loop, f.s, feeds, 5, &a, 1), 0, "%s", vq_errmsg());
            cr_assert_eq(vq_exec_run(f.ex, flat, f.s, feeds, 5, &b, 1), 0, "%s", vq_errmsg());
            vq_tensor *ha = on_host(f.e, a.tensor), *hb = on_host(f.e, b.tensor);
            cr_assert(memcmp(vq_tensor_data(ha), vq_tensor_data(hb), 3 * sizeof(double)) == 0,
                      "%s n=%d: the loop and the unrolled program differ", setups[s].name, n);
            vq_tensor_release(ha);
            vq_tensor_release(hb);
            vq_tensor *all[] = {x, tn, one, half, i0};
            release_tensors(all, N_OF(all));
            vq_program_free(flat);
        }
        fix_free(&f);
    }
    vq_program_free(loop);
}

Test(control, carried_dims_unknown_at_preparation)
{
    /* The body's output dim depends on y's unknown dim, the input's is
     * known: refused. */
    vq_program *p = program_with_vars("f64[3] x; f64[-1] y; f64[3] xo; bool c");
    int b =
        block_with(p, 0, "f64[3] bx; f64[-1] bx2; bool bc", "abs y -> bx2; logical_not c -> bc");
    add_while(p, 0, b, "c x -> xo", "bx -> bx2", "bc", -1, NULL);
    expect_error(p, NAMES("x", "y", "c"), 3, "xo",
                 "body_outputs[0] bx2 is f64[-1] but carries into body input bx, which is f64[3] "
                 "(a carried dim must be known wherever the input's is");

    /* Unknown everywhere: the body infers shapes as it runs. */
    cr_assert_eq(vq_program_new(&p), 0);
    declare_vars(p, 0, "f64 n one half i0 io; f64[-1] x xo; bool c0");
    b = block_with(p, 0, "f64[-1] bx bx2; f64 bi bi2; bool bc",
                   "mul bx half -> bx2; add bi one -> bi2; less bi2 n -> bc");
    add_ops(p, 0, "less i0 n -> c0");
    add_while(p, 0, b, "c0 x i0 -> xo io", "bx bi -> bx2 bi2", "bc", -1, NULL);
    struct fix f = fix_new(&setups[2]);
    for (int64_t len = 1; len <= 5; len += 2) {
        vq_tensor *x, *t[] = {scalar(3), scalar(1), scalar(0.5), scalar(0)};
        x = tensor_new(VQ_F64, 1, &len);
        for (int64_t j = 0; j < len; j++)
            ((double *)vq_tensor_data(x))[j] = (double)j + 1;
        vq_feed feeds[] = {{"x", x}, {"n", t[0]}, {"one", t[1]}, {"half", t[2]}, {"i0", t[3]}};
        vq_fetch fetch = {"xo", NULL};
        cr_assert_eq(vq_exec_run(f.ex, p, f.s, feeds, 5, &fetch, 1), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_tensor_shape(fetch.tensor)[0], len);
        for (int64_t j = 0; j < len; j++)
            cr_assert_eq(((double *)vq_tensor_data(fetch.tensor))[j], ((double)j + 1) / 8);
        vq_tensor_release(fetch.tensor);
        vq_tensor_release(x);
        release_tensors(t, N_OF(t));
    }
    fix_free(&f);
    vq_program_free(p);
}

Test(control, a_cond_output_declared_known_needs_known_branches)
{
    vq_program *p = program_with_vars("f64[3] x; f64[-1] y; bool c; f64[3] o");
    int tb = new_block(p, 0), eb = new_block(p, 0);
    add_cond(p, 0, tb, eb, "c x -> o", "x", "y");
    expect_error(p, NAMES("x", "y", "c"), 3, "o",
                 "op 0 (cond): output Out (slot 0) var o: dim 0 is declared 3 but a branch "
                 "gives it unknown");
}

/* ---- gradients through cond ---- */

/* loss = sum(y * y), y = cond(c, x): then t2 = (x * w) * w + v,
 * else e = x - w (v unused there: its gradient is zero on that side). */
static vq_program *cond_loss_program(void)
{
    vq_program *p = new_program();
    cr_assert_eq(vq_program_add_var(p, 0, "w", VQ_F64, 1, S3, true), 0);
    cr_assert_eq(vq_program_add_var(p, 0, "v", VQ_F64, 1, S3, true), 0);
    declare_vars(p, 0, "f64[3] x; bool c; f64[3] y yy; f64 loss");
    int tb = new_block(p, 0), eb = new_block(p, 0);
    declare_vars(p, tb, "f64[3] t1 t2 t3");
    bvar(p, eb, "e", VQ_F64, 1, S3);
    add_ops(p, tb, "mul x w -> t1; mul t1 w -> t2; add t2 v -> t3");
    add_ops(p, eb, "sub x w -> e");
    add_cond(p, 0, tb, eb, "c x -> y", "t3", "e");
    add_ops(p, 0, "mul y y -> yy; sum yy -> loss");
    return p;
}

static double loss_of(struct fix *f, vq_program *p, vq_feed *feeds, int nfeeds)
{
    vq_fetch fetch = {"loss", NULL};
    cr_assert_eq(vq_exec_run(f->ex, p, f->s, feeds, nfeeds, &fetch, 1), 0, "%s", vq_errmsg());
    vq_tensor *h = on_host(f->e, fetch.tensor);
    double l = *(double *)vq_tensor_data(h);
    vq_tensor_release(h);
    return l;
}

/* Runs p (with its gradient ops) once, fetching "<param>@GRAD" for each
 * parameter of f's scope named in params[], and compares every element
 * with central differences of fwd's loss (h = 1e-6, relative to the
 * larger of the two and 1e-3; limit 1e-6). Parameters are set again
 * before each run: on a GPU the plan copies the scope's host tensors when
 * it prepares. Returns the largest difference. */
static double fd_check(struct fix *f, vq_program *fwd, vq_program *p, vq_feed *feeds,
                       int nfeeds, const char *const *params, int np, const char *what)
{
    vq_fetch g[8];
    char names[8][32];
    for (int q = 0; q < np; q++) {
        snprintf(names[q], sizeof names[q], "%s@GRAD", params[q]);
        g[q] = (vq_fetch){names[q], NULL};
    }
    cr_assert_eq(vq_exec_run(f->ex, p, f->s, feeds, nfeeds, g, np), 0, "%s: %s", what,
                 vq_errmsg());
    double worst = 0;
    for (int q = 0; q < np; q++) {
        vq_tensor *gq = on_host(f->e, g[q].tensor);
        for (int64_t i = 0; i < vq_tensor_numel(gq); i++) {
            vq_tensor *hp = on_host(f->e, vq_tensor_retain(vq_scope_get(f->s, params[q])));
            double *d = vq_tensor_data(hp), base = d[i], h = 1e-6;
            d[i] = base + h;
            cr_assert_eq(vq_scope_set(f->s, params[q], hp), 0);
            double up = loss_of(f, fwd, feeds, nfeeds);
            d[i] = base - h;
            cr_assert_eq(vq_scope_set(f->s, params[q], hp), 0);
            double down = loss_of(f, fwd, feeds, nfeeds);
            d[i] = base;
            cr_assert_eq(vq_scope_set(f->s, params[q], hp), 0);
            vq_tensor_release(hp);
            double num = (up - down) / (2 * h), ana = ((double *)vq_tensor_data(gq))[i];
            double err = fabs(ana - num) / fmax(fmax(fabs(ana), fabs(num)), 1e-3);
            worst = fmax(worst, err);
            cr_assert_leq(err, 1e-6, "%s: d%s[%lld]: %.9g vs %.9g", what, params[q],
                          (long long)i, ana, num);
        }
        vq_tensor_release(gq);
    }
    return worst;
}

/* A random op drawing from the executor's default generator inside a
 * differentiated cond: its recomputation for the gradient would draw
 * other numbers, so autodiff refuses it, naming it; with a seed it is
 * differentiated. */
Test(control, autodiff_refuses_a_recomputed_random_op_without_a_seed)
{
    for (int seeded = 0; seeded < 2; seeded++) {
        vq_program *p = cond_loss_program();
        int tb = 1; /* cond_loss_program's then block */
        declare_vars(p, tb, "f64[3] t4 t4m");
        vq_attr a[2] = {VQ_ATTR_F("p", 0.5), VQ_ATTR_I("seed", 3)};
        bop(p, tb, "dropout", NAMES("t3"), 1, NAMES("t4", "t4m"), 2, a, seeded ? 2 : 1);
        int rc = vq_append_backward(p, "loss", NULL, 0);
        if (seeded) {
            cr_assert_eq(rc, 2, "%s", vq_errmsg());
        } else {
            cr_assert_eq(rc, VQ_EINVAL, "%d: %s", rc, vq_errmsg());
            cr_assert(strstr(vq_errmsg(), "block 1 op 3 (dropout) draws from the executor's "
                                          "default generator"),
                      "%s", vq_errmsg());
        }
        vq_program_free(p);
    }
}

Test(control, gradients_through_cond_match_finite_differences)
{
    vq_program *fwd = cond_loss_program(), *p = cond_loss_program();
    cr_assert_eq(vq_append_backward(p, "loss", NULL, 0), 2, "%s", vq_errmsg());
    const int setup_ids[] = {0, 2, 3, 5};
    const char *params[] = {"w", "v"};
    for (int si = 0; si < N_OF(setup_ids); si++) {
        const struct setup *st = &setups[setup_ids[si]];
        struct fix f = fix_new(st);
        vq_tensor *w = vec3(0.5, -1.25, 2), *v = vec3(0.3, 0.2, -0.7);
        cr_assert_eq(vq_scope_set(f.s, "w", w), 0);
        cr_assert_eq(vq_scope_set(f.s, "v", v), 0);
        vq_tensor_release(w);
        vq_tensor_release(v);
        for (int branch = 0; branch < 2; branch++) {
            vq_tensor *x = vec3(1.5, -0.5, 0.75), *c;
            c = tensor_new(VQ_BOOL, 0, NULL);
            *(unsigned char *)vq_tensor_data(c) = branch == 0;
            vq_feed feeds[] = {{"x", x}, {"c", c}};
            char what[64];
            snprintf(what, sizeof what, "%s, %s branch", st->name, branch ? "else" : "then");
            fd_check(&f, fwd, p, feeds, 2, params, 2, what);
            if (branch == 1) { /* v is not used by the else branch: exactly zero */
                vq_fetch gv = {"v@GRAD", NULL};
                cr_assert_eq(vq_exec_run(f.ex, p, f.s, feeds, 2, &gv, 1), 0, "%s", vq_errmsg());
                vq_tensor *h = on_host(f.e, gv.tensor);
                for (int i = 0; i < 3; i++)
                    cr_assert_eq(((double *)vq_tensor_data(h))[i], 0.0);
                vq_tensor_release(h);
            }
            vq_tensor_release(x);
            vq_tensor_release(c);
        }
        fix_free(&f);
    }
    vq_program_free(p);
    vq_program_free(fwd);
}

/* ---- gradients through while ---- */

/* while_loss_program's vars and ops before the while (and the block 0
 * vars extra declares after its own); returns the body block. */
static int while_loss_parts(vq_program *p, const char *extra)
{
    declare_vars(p, 0, "f64[3] w* b* h0*; f64 n one i0 io; bool c0; f64[3] h hh; f64 loss");
    declare_vars(p, 0, extra);
    int b = block_with(p, 0, "f64[3] bh z1 z2 bh2; f64 bi bi2; bool bc",
                       "mul bh w -> z1; add z1 b -> z2; tanh z2 -> bh2; add bi one -> bi2; less "
                       "bi2 n -> bc");
    add_ops(p, 0, "less i0 n -> c0");
    return b;
}

/* h = h0; i = 0; while i < n: h = tanh(h * w + b); i = i + one;
 * loss = sum(h * h). w, b, h0 are parameters. */
static vq_program *while_loss_program(void)
{
    vq_program *p = new_program();
    int b = while_loss_parts(p, "");
    add_while(p, 0, b, "c0 h0 i0 -> h io", "bh bi -> bh2 bi2", "bc", -1, NULL);
    add_ops(p, 0, "mul h h -> hh; sum hh -> loss");
    return p;
}

Test(control, gradients_through_while_match_finite_differences)
{
    vq_program *fwd = while_loss_program(), *p = while_loss_program();
    cr_assert_eq(vq_append_backward(p, "loss", NULL, 0), 3, "%s", vq_errmsg());
    const char *params[] = {"w", "b", "h0"};
    const int setup_ids[] = {0, 2, 3, 5};
    double worst = 0;
    for (int si = 0; si < N_OF(setup_ids); si++) {
        const struct setup *st = &setups[setup_ids[si]];
        struct fix f = fix_new(st);
        vq_tensor *init[] = {vec3(0.5, -1.25, 0.8), vec3(0.3, 0.2, -0.7),
                             vec3(0.9, -0.4, 0.1)};
        for (int q = 0; q < 3; q++) {
            cr_assert_eq(vq_scope_set(f.s, params[q], init[q]), 0);
            vq_tensor_release(init[q]);
        }
        const double ns[] = {0, 1, 3, 6};
        for (int ni = 0; ni < N_OF(ns); ni++) {
            vq_tensor *tn = scalar(ns[ni]), *one = scalar(1), *i0 = scalar(0);
            vq_feed feeds[] = {{"n", tn}, {"one", one}, {"i0", i0}};
            char what[64];
            snprintf(what, sizeof what, "%s, %g iterations", st->name, ns[ni]);
            worst = fmax(worst, fd_check(&f, fwd, p, feeds, 3, params, 3, what));
            vq_tensor_release(tn);
            vq_tensor_release(one);
            vq_tensor_release(i0);
        }
        fix_free(&f);
    }
    fprintf(stderr, "gradients through while: largest relative difference %.3g\n", worst);
    vq_program_free(p);
    vq_program_free(fwd);
}

Test(control, loops_are_cached_plans_and_survive_save_and_load)
{
    struct fix f = fix_new(&setups[2]);
    vq_program *p = counter_loop(-1);
    char path[] = "/tmp/varq_control_saveXXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(vq_program_save(p, path), 0, "%s", vq_errmsg());
    vq_program *q;
    cr_assert_eq(vq_program_load(&q, path), 0, "%s", vq_errmsg());
    unlink(path);
    cr_assert_eq(vq_program_hash(p), vq_program_hash(q));
    for (int k = 0; k < 5; k++)
        run_counter(&f, k % 2 ? q : p, "loaded", 3 + k, 0, -1);
    vq_exec_stats st;
    cr_assert_eq(vq_exec_get_stats(f.ex, &st), 0);
    cr_assert_eq(st.prepares, 1, "one plan for the program and its loaded copy");
    cr_assert_eq(st.cache_hits, 4);
    vq_program_free(q);
    vq_program_free(p);
    fix_free(&f);
}

/* while_loss_program's recurrence unrolled n times into block 0. */
static vq_program *while_loss_unrolled(int n)
{
    vq_program *p = program_with_vars("f64[3] w* b* h0*; f64 n one i0 loss");
    char h[16] = "h0";
    for (int k = 0; k < n; k++) {
        declare_varsf(p, 0, "f64[3] z1_%d z2_%d h_%d", k, k, k + 1);
        add_opsf(p, 0, "mul %s w -> z1_%d; add z1_%d b -> z2_%d; tanh z2_%d -> h_%d", h, k, k, k, k,
                 k + 1);
        snprintf(h, sizeof h, "h_%d", k + 1);
    }
    bvar(p, 0, "hh", VQ_F64, 1, S3);
    bop(p, 0, "mul", (const char *[]){h, h}, 2, NAMES("hh"), 1, NULL, 0);
    add_ops(p, 0, "sum hh -> loss");
    return p;
}

Test(control, gradients_through_while_equal_the_unrolled_programs)
{
    vq_program *loop = while_loss_program();
    cr_assert_eq(vq_append_backward(loop, "loss", NULL, 0), 3, "%s", vq_errmsg());
    struct fix f = fix_new(&setups[2]);
    vq_tensor *init[] = {vec3(0.5, -1.25, 0.8), vec3(0.3, 0.2, -0.7), vec3(0.9, -0.4, 0.1)};
    const char *params[] = {"w", "b", "h0"};
    for (int q = 0; q < 3; q++) {
        cr_assert_eq(vq_scope_set(f.s, params[q], init[q]), 0);
        vq_tensor_release(init[q]);
    }
    for (int n = 1; n <= 7; n += 3) {
        vq_program *flat = while_loss_unrolled(n);
        cr_assert_eq(vq_append_backward(flat, "loss", NULL, 0), 3, "%s", vq_errmsg());
        vq_tensor *tn = scalar(n), *one = scalar(1), *i0 = scalar(0);
        vq_feed feeds[] = {{"n", tn}, {"one", one}, {"i0", i0}};
        vq_fetch a[] = {{"w@GRAD", NULL}, {"b@GRAD", NULL}, {"h0@GRAD", NULL}};
        vq_fetch b[] = {{"w@GRAD", NULL}, {"b@GRAD", NULL}, {"h0@GRAD", NULL}};
        cr_assert_eq(vq_exec_run(f.ex, loop, f.s, feeds, 3, a, 3), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_exec_run(f.ex, flat, f.s, feeds, 3, b, 3), 0, "%s", vq_errmsg());
        for (int q = 0; q < 3; q++) {
            const double *x = vq_tensor_data(a[q].tensor), *y = vq_tensor_data(b[q].tensor);
            for (int i = 0; i < 3; i++)
                cr_assert_leq(fabs(x[i] - y[i]), 1e-14 * fmax(1, fabs(y[i])),
                              "n=%d d%s[%d]: loop %.17g, unrolled %.17g", n, params[q], i, x[i],
                              y[i]);
            vq_tensor_release(a[q].tensor);
            vq_tensor_release(b[q].tensor);
        }
        vq_tensor_release(tn);
        vq_tensor_release(one);
        vq_tensor_release(i0);
        vq_program_free(flat);
    }
    fix_free(&f);
    vq_program_free(loop);
}

/* ---- gradients through control flow nested in control flow ---- */

/* Parameters w, b, v, h0 (f64[3]) and the scalar feeds named in
 * scalars[], in a new program; loss = sum(y * y) is added by nest_loss. */
static vq_program *nest_program(const char *const *scalars, int nscalars)
{
    vq_program *p = new_program();
    const char *params[] = {"w", "b", "v", "h0"};
    for (int i = 0; i < N_OF(params); i++)
        cr_assert_eq(vq_program_add_var(p, 0, params[i], VQ_F64, 1, S3, true), 0);
    for (int i = 0; i < nscalars; i++)
        bvar(p, 0, scalars[i], VQ_F64, 0, NULL);
    return p;
}

static void nest_loss(vq_program *p, const char *y)
{
    declare_vars(p, 0, "f64[3] yy; f64 loss");
    bop(p, 0, "mul", (const char *[]){y, y}, 2, NAMES("yy"), 1, NULL, 0);
    add_ops(p, 0, "sum yy -> loss");
}

/* In block blk: out = tanh(in * w + b), through vars named <out>.z1/z2. */
static void nest_tanh_step(vq_program *p, int blk, const char *in, const char *out)
{
    char z1[48], z2[48];
    snprintf(z1, sizeof z1, "%s.z1", out);
    snprintf(z2, sizeof z2, "%s.z2", out);
    bvar(p, blk, z1, VQ_F64, 1, S3);
    bvar(p, blk, z2, VQ_F64, 1, S3);
    bvar(p, blk, out, VQ_F64, 1, S3);
    bop(p, blk, "mul", (const char *[]){in, "w"}, 2, (const char *[]){z1}, 1, NULL, 0);
    bop(p, blk, "add", (const char *[]){z1, "b"}, 2, (const char *[]){z2}, 1, NULL, 0);
    bop(p, blk, "tanh", (const char *[]){z2}, 1, (const char *[]){out}, 1, NULL, 0);
}

/* In block blk: a while over (x, i0) running while i < lim, its body
 * inner(body block, x var, out name) computing the next x; outputs xo, io
 * (declared here). Prefix names the body's vars. */
static void nest_while(vq_program *p, int blk, const char *pre, const char *x, const char *lim,
                       const char *xo, const char *io,
                       void (*inner)(vq_program *p, int body, const char *pre, const char *x,
                                     const char *out))
{
    char c0[64], bx[64], bi[64], bx2[64], bi2[64], bc[64];
    snprintf(c0, sizeof c0, "%s.c0", pre);
    snprintf(bx, sizeof bx, "%s.x", pre);
    snprintf(bi, sizeof bi, "%s.i", pre);
    snprintf(bx2, sizeof bx2, "%s.x2", pre);
    snprintf(bi2, sizeof bi2, "%s.i2", pre);
    snprintf(bc, sizeof bc, "%s.c", pre);
    bvar(p, blk, c0, VQ_BOOL, 0, NULL);
    bvar(p, blk, xo, VQ_F64, 1, S3);
    bvar(p, blk, io, VQ_F64, 0, NULL);
    bop(p, blk, "less", (const char *[]){"i0", lim}, 2, (const char *[]){c0}, 1, NULL, 0);
    int body = new_block(p, blk);
    bvar(p, body, bx, VQ_F64, 1, S3);
    bvar(p, body, bi, VQ_F64, 0, NULL);
    bvar(p, body, bi2, VQ_F64, 0, NULL);
    bvar(p, body, bc, VQ_BOOL, 0, NULL);
    bop(p, body, "add", (const char *[]){bi, "one"}, 2, (const char *[]){bi2}, 1, NULL, 0);
    inner(p, body, pre, bx, bx2);
    bop(p, body, "less", (const char *[]){bi2, lim}, 2, (const char *[]){bc}, 1, NULL, 0);
    vq_attr a[5];
    while_attrs(a, body, (const char *[]){bx, bi}, (const char *[]){bx2, bi2}, 2, bc, -1);
    bop(p, blk, "while", (const char *[]){c0, x, "i0"}, 3, (const char *[]){xo, io}, 2, a, 5);
}

static void body_tanh(vq_program *p, int body, const char *pre, const char *x, const char *out)
{
    (void)pre;
    nest_tanh_step(p, body, x, out);
}

/* A while body whose next x is cond(i < half, tanh(x w + b), x * v). */
static void body_cond(vq_program *p, int body, const char *pre, const char *x, const char *out)
{
    char cb[48], bi2[48], t[48], e[48];
    snprintf(cb, sizeof cb, "%s.cb", pre);
    snprintf(bi2, sizeof bi2, "%s.i2", pre);
    snprintf(t, sizeof t, "%s.t", pre);
    snprintf(e, sizeof e, "%s.e", pre);
    bvar(p, body, cb, VQ_BOOL, 0, NULL);
    bvar(p, body, out, VQ_F64, 1, S3);
    bop(p, body, "less", (const char *[]){bi2, "half"}, 2, (const char *[]){cb}, 1, NULL, 0);
    int tb = new_block(p, body), eb = new_block(p, body);
    nest_tanh_step(p, tb, x, t);
    bvar(p, eb, e, VQ_F64, 1, S3);
    bop(p, eb, "mul", (const char *[]){x, "v"}, 2, (const char *[]){e}, 1, NULL, 0);
    vq_attr a[4];
    cond_attrs(a, tb, eb, (const char *[]){t}, (const char *[]){e}, 1);
    bop(p, body, "cond", (const char *[]){cb, x}, 2, (const char *[]){out}, 1, a, 4);
}

/* A while body whose next x is v * (m tanh steps from x, a while). */
static void body_while(vq_program *p, int body, const char *pre, const char *x,
                       const char *out)
{
    char g[48], gi[48], ipre[24];
    snprintf(g, sizeof g, "%s.g", pre);
    snprintf(gi, sizeof gi, "%s.gi", pre);
    snprintf(ipre, sizeof ipre, "%s.in", pre);
    nest_while(p, body, ipre, x, "m", g, gi, body_tanh);
    bvar(p, body, out, VQ_F64, 1, S3);
    bop(p, body, "mul", (const char *[]){g, "v"}, 2, (const char *[]){out}, 1, NULL, 0);
}

/* cond inside while: n iterations, the first ones (i < half) tanh steps,
 * the others x * v. */
static vq_program *nest_cond_in_while(void)
{
    vq_program *p = nest_program(NAMES("n", "one", "i0", "half"), 4);
    nest_while(p, 0, "o", "h0", "n", "h", "io", body_cond);
    nest_loss(p, "h");
    return p;
}

/* while inside while: n outer iterations, each m tanh steps, times v. */
static vq_program *nest_while_in_while(void)
{
    vq_program *p = nest_program(NAMES("n", "m", "one", "i0"), 4);
    nest_while(p, 0, "o", "h0", "n", "h", "io", body_while);
    nest_loss(p, "h");
    return p;
}

/* while inside cond, and cond inside cond:
 * y = c1 ? (c2 ? <n tanh steps from h0> : h0 - v) : h0 * v */
static vq_program *nest_in_cond(void)
{
    vq_program *p = nest_program(NAMES("n", "one", "i0"), 3);
    declare_vars(p, 0, "bool c1 c2; f64[3] y");
    int tb = new_block(p, 0), eb = new_block(p, 0);
    bvar(p, tb, "t", VQ_F64, 1, S3);
    int ttb = new_block(p, tb), teb = new_block(p, tb);
    nest_while(p, ttb, "w1", "h0", "n", "tw", "twi", body_tanh);
    bvar(p, teb, "ts", VQ_F64, 1, S3);
    add_ops(p, teb, "sub h0 v -> ts");
    add_cond(p, tb, ttb, teb, "c2 h0 -> t", "tw", "ts");
    bvar(p, eb, "e", VQ_F64, 1, S3);
    add_ops(p, eb, "mul h0 v -> e");
    add_cond(p, 0, tb, eb, "c1 h0 -> y", "t", "e");
    nest_loss(p, "y");
    return p;
}

static void nest_params(struct fix *f)
{
    const char *params[] = {"w", "b", "v", "h0"};
    vq_tensor *init[] = {vec3(0.5, -1.25, 0.8), vec3(0.3, 0.2, -0.7), vec3(1.1, 0.9, -0.95),
                         vec3(0.9, -0.4, 0.1)};
    for (int q = 0; q < 4; q++) {
        cr_assert_eq(vq_scope_set(f->s, params[q], init[q]), 0);
        vq_tensor_release(init[q]);
    }
}

static vq_tensor *boolean(bool b)
{
    vq_tensor *t = tensor_new(VQ_BOOL, 0, NULL);
    *(unsigned char *)vq_tensor_data(t) = b;
    return t;
}

static const char *const nest_params_names[] = {"w", "b", "v", "h0"};
static const int nest_setups[] = {0, 2, 3, 5};

/* One case of a nested-gradient check: its feeds and what a failure
 * names. */
struct nest_case {
    vq_tensor *t[5];
    vq_feed feeds[5];
    int nfeeds;
    char what[64];
};

static void nest_case_feeds(struct nest_case *c, const char *const *names, vq_tensor *const *t,
                            int n)
{
    c->nfeeds = n;
    for (int i = 0; i < n; i++) {
        c->t[i] = t[i];
        c->feeds[i] = (vq_feed){names[i], t[i]};
    }
}

/* The largest relative difference between build()'s gradients and finite
 * differences over ncases cases (make fills case k) on nest_setups. */
static double nest_fd_worst(vq_program *(*build)(void), int ncases,
                            void (*make)(struct nest_case *, const char *, int))
{
    vq_program *fwd = build(), *p = build();
    cr_assert_eq(vq_append_backward(p, "loss", NULL, 0), 4, "%s", vq_errmsg());
    double worst = 0;
    for (int si = 0; si < N_OF(nest_setups); si++) {
        const struct setup *st = &setups[nest_setups[si]];
        struct fix f = fix_new(st);
        nest_params(&f);
        for (int k = 0; k < ncases; k++) {
            struct nest_case c;
            make(&c, st->name, k);
            worst =
                fmax(worst, fd_check(&f, fwd, p, c.feeds, c.nfeeds, nest_params_names, 4, c.what));
            release_tensors(c.t, c.nfeeds);
        }
        fix_free(&f);
    }
    vq_program_free(p);
    vq_program_free(fwd);
    return worst;
}

/* 0 to 6 iterations (past the ring of frames), the first 2 through the
 * then branch */
static void cond_in_while_case(struct nest_case *c, const char *setup, int k)
{
    int n = 2 * k;
    nest_case_feeds(c, NAMES("n", "one", "i0", "half"),
                    (vq_tensor *[]){scalar(n), scalar(1), scalar(0), scalar(2.5)}, 4);
    snprintf(c->what, sizeof c->what, "%s, %d iterations", setup, n);
}

Test(control, gradients_through_a_cond_inside_a_while_match_finite_differences)
{
    double worst = nest_fd_worst(nest_cond_in_while, 4, cond_in_while_case);
    fprintf(stderr, "gradients through a cond in a while: largest relative difference %.3g\n",
            worst);
}

static void while_in_while_case(struct nest_case *c, const char *setup, int k)
{
    const int nm[][2] = {{0, 2}, {1, 0}, {2, 3}, {5, 2}};
    nest_case_feeds(c, NAMES("n", "m", "one", "i0"),
                    (vq_tensor *[]){scalar(nm[k][0]), scalar(nm[k][1]), scalar(1), scalar(0)}, 4);
    snprintf(c->what, sizeof c->what, "%s, %d x %d iterations", setup, nm[k][0], nm[k][1]);
}

Test(control, gradients_through_a_while_inside_a_while_match_finite_differences)
{
    double worst = nest_fd_worst(nest_while_in_while, 4, while_in_while_case);
    fprintf(stderr, "gradients through a while in a while: largest relative difference %.3g\n",
            worst);
}

/* case 1: zero iterations of the loop */
static void in_cond_case(struct nest_case *c, const char *setup, int k)
{
    nest_case_feeds(c, NAMES("n", "one", "i0", "c1", "c2"),
                    (vq_tensor *[]){scalar(k == 1 ? 0 : 3), scalar(1), scalar(0), boolean(k < 3),
                                    boolean(k < 2)},
                    5);
    snprintf(c->what, sizeof c->what, "%s, case %d", setup, k);
}

Test(control, gradients_through_a_while_and_a_cond_inside_a_cond_match_finite_differences)
{
    double worst = nest_fd_worst(nest_in_cond, 4, in_cond_case);
    fprintf(stderr,
            "gradients through a cond's nested blocks: largest relative difference "
            "%.3g\n",
            worst);
}

/* nest_while_in_while unrolled into block 0: n times (m tanh steps, then
 * times v). */
static vq_program *nest_while_in_while_unrolled(int n, int m)
{
    vq_program *p = nest_program(NAMES("n", "m", "one", "i0"), 4);
    char h[32] = "h0", next[32];
    for (int k = 0; k < n; k++) {
        for (int j = 0; j < m; j++) {
            snprintf(next, sizeof next, "h_%d_%d", k, j);
            nest_tanh_step(p, 0, h, next);
            memcpy(h, next, sizeof h);
        }
        snprintf(next, sizeof next, "h_%d", k);
        bvar(p, 0, next, VQ_F64, 1, S3);
        bop(p, 0, "mul", (const char *[]){h, "v"}, 2, (const char *[]){next}, 1, NULL, 0);
        memcpy(h, next, sizeof h);
    }
    nest_loss(p, h);
    return p;
}

Test(control, gradients_through_nested_whiles_equal_the_unrolled_programs)
{
    vq_program *loop = nest_while_in_while();
    cr_assert_eq(vq_append_backward(loop, "loss", NULL, 0), 4, "%s", vq_errmsg());
    struct fix f = fix_new(&setups[2]);
    nest_params(&f);
    const int nm[][2] = {{1, 1}, {2, 3}, {5, 2}};
    for (int k = 0; k < N_OF(nm); k++) {
        vq_program *flat = nest_while_in_while_unrolled(nm[k][0], nm[k][1]);
        cr_assert_eq(vq_append_backward(flat, "loss", NULL, 0), 4, "%s", vq_errmsg());
        vq_tensor *in[] = {scalar(nm[k][0]), scalar(nm[k][1]), scalar(1), scalar(0)};
        vq_feed feeds[] = {{"n", in[0]}, {"m", in[1]}, {"one", in[2]}, {"i0", in[3]}};
        vq_fetch a[4], b[4];
        char names[4][16];
        for (int q = 0; q < 4; q++) {
            snprintf(names[q], sizeof names[q], "%s@GRAD", nest_params_names[q]);
            a[q] = b[q] = (vq_fetch){names[q], NULL};
        }
        cr_assert_eq(vq_exec_run(f.ex, loop, f.s, feeds, 4, a, 4), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_exec_run(f.ex, flat, f.s, feeds, 4, b, 4), 0, "%s", vq_errmsg());
        for (int q = 0; q < 4; q++) {
            const double *x = vq_tensor_data(a[q].tensor), *y = vq_tensor_data(b[q].tensor);
            for (int i = 0; i < 3; i++)
                cr_assert_leq(fabs(x[i] - y[i]), 1e-14 * fmax(1, fabs(y[i])),
                              "%d x %d: d%s[%d]: loop %.17g, unrolled %.17g", nm[k][0],
                              nm[k][1], nest_params_names[q], i, x[i], y[i]);
            vq_tensor_release(a[q].tensor);
            vq_tensor_release(b[q].tensor);
        }
        for (int i = 0; i < 4; i++)
            vq_tensor_release(in[i]);
        vq_program_free(flat);
    }
    fix_free(&f);
    vq_program_free(loop);
}

/* ---- stacked outputs ---- */

/* counter_loop whose while also stacks, per iteration, bt (x * half, read
 * by nothing else after), bi2 (carried) and bc (the predicate): xs
 * f64[?, 3], is f64[?], cs bool[?]. */
static vq_program *stacking_counter_loop(int64_t max_iters)
{
    vq_program *p = new_program();
    int b = counter_parts_with(p, "f64[-1,3] xs; f64[-1] is; bool[-1] cs");
    add_while(p, 0, b, "c0 x i0 -> xo io xs is cs", "bx bi -> bx2 bi2", "bc", max_iters,
              "bt bi2 bc");
    return p;
}

/* Runs it and compares every stacked row with the loop done in C. */
static void run_stacking(struct fix *f, vq_program *p, const char *what, double n,
                         int64_t max_iters)
{
    struct counter_feeds cf;
    counter_feeds_make(&cf, vec3(1.5, -2.25, 1e6), n, 0);
    vq_fetch fetches[] = {{"xo", NULL}, {"xs", NULL}, {"is", NULL}, {"cs", NULL}};
    int rc = vq_exec_run(f->ex, p, f->s, cf.feeds, 5, fetches, 4);
    cr_assert_eq(rc, 0, "%s: %s", what, vq_errmsg());
    vq_tensor *got[4];
    for (int k = 0; k < 4; k++)
        got[k] = on_host(f->e, fetches[k].tensor);
    double want[3] = {1.5, -2.25, 1e6}, wi = 0;
    int64_t iters = 0;
    for (; wi < n && (max_iters < 0 || iters < max_iters); iters++) {
        wi = wi + 1.0;
        for (int j = 0; j < 3; j++) {
            double bt = want[j] * 0.5;
            const double *xs = vq_tensor_data(got[1]);
            cr_assert(iters < vq_tensor_shape(got[1])[0] && xs[iters * 3 + j] == bt,
                      "%s n=%g: xs[%lld][%d]", what, n, (long long)iters, j);
            want[j] = bt + wi;
        }
        cr_assert_eq(((const double *)vq_tensor_data(got[2]))[iters], wi, "%s: is[%lld]", what,
                     (long long)iters);
        cr_assert_eq(((const unsigned char *)vq_tensor_data(got[3]))[iters], wi < n, "%s: cs[%lld]",
                     what, (long long)iters);
    }
    const int64_t *xs_shape = vq_tensor_shape(got[1]);
    cr_assert(vq_tensor_ndim(got[1]) == 2 && xs_shape[0] == iters && xs_shape[1] == 3,
              "%s n=%g: xs is [%lld, %lld] after %lld iterations", what, n, (long long)xs_shape[0],
              (long long)xs_shape[1], (long long)iters);
    cr_assert(vq_tensor_ndim(got[2]) == 1 && vq_tensor_shape(got[2])[0] == iters, "%s", what);
    cr_assert(vq_tensor_ndim(got[3]) == 1 && vq_tensor_shape(got[3])[0] == iters, "%s", what);
    cr_assert_eq(vq_tensor_dtype(got[3]), VQ_BOOL);
    const double *xo = vq_tensor_data(got[0]);
    for (int j = 0; j < 3; j++)
        cr_assert(xo[j] == want[j], "%s: xo[%d]", what, j);
    release_tensors(got, 4);
    counter_feeds_free(&cf);
}

/* stack_outputs: each iteration's values along a new axis 0, against C,
 * for 0, 1, a few and many iterations, with max_iters, on every engine
 * and on the emulated GPU executor, over repeated runs of one plan. */
Test(control, a_while_stacks_each_iterations_values_into_an_output)
{
    vq_program *p = stacking_counter_loop(-1), *capped = stacking_counter_loop(5);
    for (int s = 0; s < N_OF(setups); s++) {
        struct fix f = fix_new(&setups[s]);
        const double ns[] = {0, 1, 2, 7, 40, 1000, 3};
        for (int k = 0; k < N_OF(ns); k++)
            run_stacking(&f, p, setups[s].name, ns[k], -1);
        run_stacking(&f, capped, setups[s].name, 40, 5);
        run_stacking(&f, capped, setups[s].name, 2, 5);
        fix_free(&f);
    }
    vq_program_free(p);
    vq_program_free(capped);
}

/* The stacked output of a loop that runs no iteration: [0, the var's
 * dims], on the executor's device. */
Test(control, a_while_without_iterations_stacks_an_empty_output)
{
    vq_program *p = stacking_counter_loop(-1), *none = stacking_counter_loop(0);
    for (int s = 0; s < N_OF(setups); s++) {
        struct fix f = fix_new(&setups[s]);
        run_stacking(&f, p, setups[s].name, -1, -1);
        run_stacking(&f, none, setups[s].name, 10, 0);
        vq_tensor *x = vec3(1, 2, 3), *tn = scalar(0), *one = scalar(1), *half = scalar(0.5),
                  *ti = scalar(0);
        vq_feed feeds[] = {{"x", x}, {"n", tn}, {"one", one}, {"half", half}, {"i0", ti}};
        vq_fetch fx = {"xs", NULL};
        cr_assert_eq(vq_exec_run(f.ex, p, f.s, feeds, 5, &fx, 1), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_tensor_device(fx.tensor).kind, setups[s].gpu ? VQ_DEV_GPU : VQ_DEV_CPU);
        cr_assert_eq(vq_tensor_numel(fx.tensor), 0);
        vq_tensor_release(fx.tensor);
        vq_tensor *all[] = {x, tn, one, half, ti};
        release_tensors(all, N_OF(all));
        fix_free(&f);
    }
    vq_program_free(p);
    vq_program_free(none);
}

/* A stacked output declared with its number of iterations: a run that
 * makes another number fails naming the var; the plan stays usable. */
Test(control, a_stacked_output_declared_with_its_iterations_checks_them)
{
    vq_program *p = program_with_vars("f64 n one i0 io; bool c0; f64[4] is");
    int b = block_with(p, 0, "f64 bi bi2; bool bc", "add bi one -> bi2; less bi2 n -> bc");
    add_ops(p, 0, "less i0 n -> c0");
    add_while(p, 0, b, "c0 i0 -> io is", "bi -> bi2", "bc", -1, "bi2");
    struct fix f = fix_new(&setups[2]);
    for (int k = 0; k < 3; k++) {
        double n = k == 1 ? 3 : 4;
        vq_tensor *tn = scalar(n), *one = scalar(1), *ti = scalar(0);
        vq_feed feeds[] = {{"n", tn}, {"one", one}, {"i0", ti}};
        vq_fetch fx = {"is", NULL};
        int rc = vq_exec_run(f.ex, p, f.s, feeds, 3, &fx, 1);
        if (k == 1) {
            cr_assert_eq(rc, VQ_EINVAL);
            cr_assert(strstr(vq_errmsg(), "op 1 (while): stack_outputs[0] bi2: the loop ran 3 "
                                          "iterations, its output is declared with 4"),
                      "%s", vq_errmsg());
        } else {
            cr_assert_eq(rc, 0, "%s", vq_errmsg());
            cr_assert_eq(((const double *)vq_tensor_data(fx.tensor))[3], 4);
            vq_tensor_release(fx.tensor);
        }
        vq_tensor_release(tn);
        vq_tensor_release(one);
        vq_tensor_release(ti);
    }
    fix_free(&f);
    vq_program_free(p);
}

/* What preparation refuses in stack_outputs, naming the op and the var. */
Test(control, bad_stack_outputs_are_errors_naming_the_op_and_var)
{
    struct {
        const char *const *names;
        int n, nout;
        int64_t dim1;
        const char *msg;
    } cases[] = {
        {NAMES("bi"), 1, 3, 3, "stack_outputs[0]: var bi is not written by the body"},
        {NAMES("nope"), 1, 3, 3, "stack_outputs[0]: block 1 has no var nope"},
        {NAMES("bt", "bt"), 2, 4, 3, "stack_outputs names var bt twice"},
        {NAMES("bt"), 1, 2, 3, "has 2 outputs for 2 loop-carried inputs X and 1 stack_outputs"},
        {NAMES("bt"), 1, 3, 4,
         "output Out (slot 2) var xs: stack_outputs[0] bt gives "
         "f64[-1,3], declared f64[-1,4]"},
    };
    for (int k = 0; k < N_OF(cases); k++) {
        vq_program *p = new_program();
        char extra[64];
        snprintf(extra, sizeof extra, "f64[-1,%lld] xs; f64[-1,3] xs2", (long long)cases[k].dim1);
        int b = counter_parts_with(p, extra);
        vq_attr a[6];
        while_attrs(a, b, NAMES("bx", "bi"), NAMES("bx2", "bi2"), 2, "bc", -1);
        a[5] = VQ_ATTR_SS("stack_outputs", cases[k].names, cases[k].n);
        bop(p, 0, "while", NAMES("c0", "x", "i0"), 3, NAMES("xo", "io", "xs", "xs2"), cases[k].nout,
            a, 6);
        struct fix f = fix_new(&setups[2]);
        struct counter_feeds cf;
        counter_feeds_make(&cf, vec3(1, 2, 3), 2, 0);
        vq_fetch fo = {"xo", NULL};
        cr_assert_eq(vq_exec_run(f.ex, p, f.s, cf.feeds, 5, &fo, 1), VQ_EINVAL, "case %d", k);
        cr_assert(strstr(vq_errmsg(), "op 1 (while): ") && strstr(vq_errmsg(), cases[k].msg),
                  "case %d: %s", k, vq_errmsg());
        counter_feeds_free(&cf);
        fix_free(&f);
        vq_program_free(p);
    }
}

/* while_loss_program with the loop also stacking z2 (hs f64[?, 3]) and a
 * second loss, sum(hs * hs), that depends on it. */
static vq_program *stacking_loss_program(void)
{
    vq_program *q = new_program();
    int b = while_loss_parts(q, "f64[-1,3] hs hs2; f64 loss2");
    add_while(q, 0, b, "c0 h0 i0 -> h io hs", "bh bi -> bh2 bi2", "bc", -1, "z2");
    add_ops(q, 0, "mul h h -> hh; sum hh -> loss; mul hs hs -> hs2; sum hs2 -> loss2");
    return q;
}

/* Autodiff through a stacking while: a loss that does not depend on the
 * stacked output gets the gradients it gets without stacking (the same
 * bits); one that does is refused, naming the op and the output, rather
 * than differentiated wrongly. */
Test(control, autodiff_through_a_stacking_while_refuses_the_stacked_output)
{
    vq_program *plain = while_loss_program(), *p = stacking_loss_program();
    cr_assert_eq(vq_append_backward(plain, "loss", NULL, 0), 3, "%s", vq_errmsg());
    cr_assert_eq(vq_append_backward(p, "loss", NULL, 0), 3, "%s", vq_errmsg());
    const char *params[] = {"w", "b", "h0"};
    const int setup_ids[] = {0, 2, 5};
    for (int si = 0; si < N_OF(setup_ids); si++) {
        struct fix f = fix_new(&setups[setup_ids[si]]);
        vq_tensor *init[] = {vec3(0.5, -1.25, 0.8), vec3(0.3, 0.2, -0.7), vec3(0.9, -0.4, 0.1)};
        for (int q = 0; q < 3; q++) {
            cr_assert_eq(vq_scope_set(f.s, params[q], init[q]), 0);
            vq_tensor_release(init[q]);
        }
        for (int n = 0; n < 5; n += 2) {
            vq_tensor *tn = scalar(n), *one = scalar(1), *i0 = scalar(0);
            vq_feed feeds[] = {{"n", tn}, {"one", one}, {"i0", i0}};
            vq_fetch a[4] = {{"w@GRAD", NULL}, {"b@GRAD", NULL}, {"h0@GRAD", NULL}, {"hs", NULL}};
            vq_fetch b[3] = {{"w@GRAD", NULL}, {"b@GRAD", NULL}, {"h0@GRAD", NULL}};
            cr_assert_eq(vq_exec_run(f.ex, p, f.s, feeds, 3, a, 4), 0, "%s", vq_errmsg());
            cr_assert_eq(vq_exec_run(f.ex, plain, f.s, feeds, 3, b, 3), 0, "%s", vq_errmsg());
            for (int q = 0; q < 3; q++) {
                vq_tensor *x = on_host(f.e, a[q].tensor), *y = on_host(f.e, b[q].tensor);
                cr_assert(!memcmp(vq_tensor_data(x), vq_tensor_data(y), 3 * sizeof(double)),
                          "%s, n %d: %s differs", setups[setup_ids[si]].name, n, a[q].name);
                vq_tensor_release(x);
                vq_tensor_release(y);
            }
            cr_assert_eq(vq_tensor_shape(a[3].tensor)[0], n);
            vq_tensor_release(a[3].tensor);
            vq_tensor_release(tn);
            vq_tensor_release(one);
            vq_tensor_release(i0);
        }
        fix_free(&f);
    }
    vq_program_free(p);
    p = stacking_loss_program();
    cr_assert_eq(vq_append_backward(p, "loss2", NULL, 0), VQ_ENOSYS);
    cr_assert(strstr(vq_errmsg(), "op 1 (while)") && strstr(vq_errmsg(), "hs") &&
                  strstr(vq_errmsg(), "stack_outputs"),
              "%s", vq_errmsg());
    vq_program_free(p);
    vq_program_free(plain);
}
