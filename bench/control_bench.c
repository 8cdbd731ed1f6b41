/* control_bench: what a `while` op costs in the graph executor, and whether
 * its iterations overlap (graph/control.c runs a body in a ring of frames).
 *
 * (1) Overhead per iteration. A while whose body is three scalar f64 ops
 *         i2 = i + one;  x2 = x * half;  c = less(i2, n)
 *     run for N iterations (--iters, default 1000), against the same 3N ops
 *     unrolled into one straight block-0 program, both with vq_exec_run on
 *     a threaded engine of W workers (--workers, default 2). Both plans are
 *     prepared before any timing; the runs reuse them (checked: no timed run
 *     builds a plan). Printed: ns per iteration of each, and while/unrolled
 *     (goal <= 1.5x); then ns per iteration of one 100000-iteration run of
 *     the same while, and its ratio to the N-iteration figure (a per-run
 *     cost amortized, or a cost that grows with the iteration count).
 * (2) Overlap. A while of K = 64 iterations whose body is the counter
 *     (i2 = i + one; c = less(i2, k)) and a slow op, an f64 256x256 matmul:
 *       independent: bm2 = matmul(m, p), from enclosing vars only; bm2 is a
 *                    loop output (carried, so not dead), but no iteration
 *                    reads the previous one's, so iterations may overlap;
 *       chained:     bm2 = matmul(bm, p), the previous iteration's result,
 *                    so the matmuls form a serial chain.
 *     Each on 1 worker and on W workers: ms per iteration, and the speedup
 *     1 -> W workers. Independent should approach min(W, cores) (2x at the
 *     default); chained should stay near 1x. OpenBLAS runs single-threaded
 *     inside varq ops, so the workers are the only parallelism.
 *
 * Every run's fetches are checked against the same computation in C
 * (exact f64 compares: p is a cyclic-shift permutation, so m @ p only moves
 * columns, and the counter ops are exact), outside the timed region, so a
 * broken loop cannot look fast. Any varq failure prints vq_errmsg() and
 * exits 1.
 *
 * Reading the output: these machines are noisy, so each repetition times
 * every side back to back, ratios are taken within a repetition against
 * the peer measured next to it, and each figure is printed as
 * "median [min .. max]" over the repetitions (--reps, default 7), after one
 * warm-up repetition that is not counted.
 *
 * usage: control_bench [--reps R] [--iters N] [--workers W] [--json] [--tiny]
 *   --json  print one JSON object on stdout with the same figures, instead
 *           of the tables
 *   --tiny  small sizes (a meson test: checks the results well under a
 *           second; no timing is asserted) */
#define _POSIX_C_SOURCE 200809L
#include <varq/varq.h>
#include "measure.h" /* bench_now, bench_median, bench_stats */

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NAMES(...) ((const char *const[]){__VA_ARGS__})

struct config {
    int reps, iters, long_iters, runs, workers; /* runs: N-iteration runs per repetition */
    int k_iters, mat_n;                         /* the overlap loop */
    bool json;
};

static void check(int rc, const char *what)
{
    if (rc >= 0)
        return;
    fprintf(stderr, "control_bench: %s: %s (%s)\n", what, vq_errmsg(), vq_strerror(rc));
    exit(1);
}

static void *alloc_or_exit(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "control_bench: out of memory\n");
        exit(1);
    }
    return p;
}

/* ---- median [min .. max] over the repetitions ---- */

struct spread {
    double median, min, max;
};

static struct spread spread_of(const double *v, int n)
{
    double *s = alloc_or_exit((size_t)n * sizeof *s);
    memcpy(s, v, (size_t)n * sizeof *s);
    struct spread r = {bench_median(s, n), s[0], s[n - 1]};
    free(s);
    return r;
}

/* ---- building programs ---- */

static void add_var(vq_program *p, int block, const char *name, vq_dtype dt, int ndim,
                    const int64_t *shape)
{
    check(vq_program_add_var(p, block, name, dt, ndim, shape, false), "vq_program_add_var");
}

static void add_op(vq_program *p, int block, const char *type, const char *const *in, int nin,
                   const char *out, const vq_attr *attrs, int nattrs)
{
    check(vq_program_add_op(p, block, type, in, nin, &out, 1, attrs, nattrs),
          "vq_program_add_op");
}

/* while(cond, X = init...) -> outs..., body_inputs and body_outputs paired
 * with init and outs, predicate body_cond, no iteration limit. */
static void add_while(vq_program *p, int body, const char *cond, const char *const *init,
                      const char *const *outs, const char *const *body_in,
                      const char *const *body_out, int n, const char *body_cond)
{
    const char *in[8] = {cond};
    for (int k = 0; k < n; k++)
        in[1 + k] = init[k];
    const vq_attr a[5] = {VQ_ATTR_I("body_block", body), VQ_ATTR_SS("body_inputs", body_in, n),
                          VQ_ATTR_SS("body_outputs", body_out, n),
                          VQ_ATTR_S("body_cond", body_cond), VQ_ATTR_I("max_iters", -1)};
    check(vq_program_add_op(p, 0, "while", in, 1 + n, outs, n, a, 5), "add the while op");
}

/* i = i0, x = x0; while i < n: (i, x) = (i + one, x * half). Fetch io, xo. */
static vq_program *counter_while_program(void)
{
    vq_program *p;
    check(vq_program_new(&p), "vq_program_new");
    const char *scalars[] = {"n", "one", "half", "i0", "x0", "io", "xo"};
    for (size_t k = 0; k < sizeof scalars / sizeof *scalars; k++)
        add_var(p, 0, scalars[k], VQ_F64, 0, NULL);
    add_var(p, 0, "c0", VQ_BOOL, 0, NULL);
    int b = vq_program_add_block(p, 0);
    check(b, "vq_program_add_block");
    const char *body_vars[] = {"bi", "bx", "bi2", "bx2"};
    for (size_t k = 0; k < sizeof body_vars / sizeof *body_vars; k++)
        add_var(p, b, body_vars[k], VQ_F64, 0, NULL);
    add_var(p, b, "bc", VQ_BOOL, 0, NULL);
    add_op(p, b, "add", NAMES("bi", "one"), 2, "bi2", NULL, 0);
    add_op(p, b, "mul", NAMES("bx", "half"), 2, "bx2", NULL, 0);
    add_op(p, b, "less", NAMES("bi2", "n"), 2, "bc", NULL, 0);
    add_op(p, 0, "less", NAMES("i0", "n"), 2, "c0", NULL, 0);
    add_while(p, b, "c0", NAMES("i0", "x0"), NAMES("io", "xo"), NAMES("bi", "bx"),
              NAMES("bi2", "bx2"), 2, "bc");
    return p;
}

/* The same body written out iters times in block 0: step k (1..iters)
 * computes i<k> = i<k-1> + one, x<k> = x<k-1> * half, c<k> = less(i<k>, n).
 * Fetch i<iters>, x<iters>. */
static vq_program *counter_unrolled_program(int iters)
{
    vq_program *p;
    check(vq_program_new(&p), "vq_program_new");
    add_var(p, 0, "n", VQ_F64, 0, NULL);
    add_var(p, 0, "one", VQ_F64, 0, NULL);
    add_var(p, 0, "half", VQ_F64, 0, NULL);
    char i_prev[24], x_prev[24], i_k[24], x_k[24], c_k[24];
    for (int k = 0; k <= iters; k++) {
        snprintf(i_k, sizeof i_k, "i%d", k);
        snprintf(x_k, sizeof x_k, "x%d", k);
        add_var(p, 0, i_k, VQ_F64, 0, NULL);
        add_var(p, 0, x_k, VQ_F64, 0, NULL);
        if (k > 0) {
            snprintf(c_k, sizeof c_k, "c%d", k);
            add_var(p, 0, c_k, VQ_BOOL, 0, NULL);
        }
    }
    for (int k = 1; k <= iters; k++) {
        snprintf(i_prev, sizeof i_prev, "i%d", k - 1);
        snprintf(x_prev, sizeof x_prev, "x%d", k - 1);
        snprintf(i_k, sizeof i_k, "i%d", k);
        snprintf(x_k, sizeof x_k, "x%d", k);
        snprintf(c_k, sizeof c_k, "c%d", k);
        add_op(p, 0, "add", NAMES(i_prev, "one"), 2, i_k, NULL, 0);
        add_op(p, 0, "mul", NAMES(x_prev, "half"), 2, x_k, NULL, 0);
        add_op(p, 0, "less", NAMES(i_k, "n"), 2, c_k, NULL, 0);
    }
    return p;
}

/* i = i0; bm = m; while i < k: i = i + one; bm = matmul(chained ? bm : m, p).
 * m, p, bm: f64[mat_n, mat_n]. Fetch io, mo. */
static vq_program *matmul_while_program(int64_t mat_n, bool chained)
{
    const int64_t sq[2] = {mat_n, mat_n};
    vq_program *p;
    check(vq_program_new(&p), "vq_program_new");
    const char *scalars[] = {"k", "one", "i0", "io"};
    for (size_t j = 0; j < sizeof scalars / sizeof *scalars; j++)
        add_var(p, 0, scalars[j], VQ_F64, 0, NULL);
    add_var(p, 0, "c0", VQ_BOOL, 0, NULL);
    add_var(p, 0, "m", VQ_F64, 2, sq);
    add_var(p, 0, "p", VQ_F64, 2, sq);
    add_var(p, 0, "mo", VQ_F64, 2, sq);
    int b = vq_program_add_block(p, 0);
    check(b, "vq_program_add_block");
    add_var(p, b, "bi", VQ_F64, 0, NULL);
    add_var(p, b, "bi2", VQ_F64, 0, NULL);
    add_var(p, b, "bc", VQ_BOOL, 0, NULL);
    add_var(p, b, "bm", VQ_F64, 2, sq);
    add_var(p, b, "bm2", VQ_F64, 2, sq);
    add_op(p, b, "add", NAMES("bi", "one"), 2, "bi2", NULL, 0);
    add_op(p, b, "less", NAMES("bi2", "k"), 2, "bc", NULL, 0);
    add_op(p, b, "matmul", NAMES(chained ? "bm" : "m", "p"), 2, "bm2", NULL, 0);
    add_op(p, 0, "less", NAMES("i0", "k"), 2, "c0", NULL, 0);
    add_while(p, b, "c0", NAMES("i0", "m"), NAMES("io", "mo"), NAMES("bi", "bm"),
              NAMES("bi2", "bm2"), 2, "bc");
    return p;
}

/* ---- a program with its feeds, and the results it must fetch ---- */

struct job {
    const char *label;
    vq_program *prog;
    vq_feed feeds[5];
    int nfeeds;
    const char *fetch_count, *fetch_data; /* the loop counter; x or m */
    int iters;                            /* iterations a run does */
    double want_count;
    const double *want_data;
    int64_t want_numel;
};

static vq_tensor *scalar_f64(double v)
{
    vq_tensor *t;
    check(vq_tensor_from(&t, VQ_F64, 0, NULL, &v), "vq_tensor_from");
    return t;
}

static void prepare_job(vq_exec *x, const struct job *j)
{
    const char *feeds[5];
    for (int k = 0; k < j->nfeeds; k++)
        feeds[k] = j->feeds[k].name;
    check(vq_exec_prepare(x, j->prog, NULL, feeds, j->nfeeds,
                          NAMES(j->fetch_count, j->fetch_data), 2),
          j->label);
}

static void verify_fetches(const struct job *j, vq_tensor *count, vq_tensor *data)
{
    double got = *(const double *)vq_tensor_data(count);
    if (got != j->want_count) {
        fprintf(stderr, "control_bench: %s: %s = %.17g, the loop in C gives %.17g\n", j->label,
                j->fetch_count, got, j->want_count);
        exit(1);
    }
    if (vq_tensor_numel(data) != j->want_numel) {
        fprintf(stderr, "control_bench: %s: %s has %lld elements, want %lld\n", j->label,
                j->fetch_data, (long long)vq_tensor_numel(data), (long long)j->want_numel);
        exit(1);
    }
    const double *d = vq_tensor_data(data);
    for (int64_t e = 0; e < j->want_numel; e++)
        if (d[e] != j->want_data[e]) {
            fprintf(stderr, "control_bench: %s: %s[%lld] = %.17g, the loop in C gives %.17g\n",
                    j->label, j->fetch_data, (long long)e, d[e], j->want_data[e]);
            exit(1);
        }
}

/* Seconds per iteration over `runs` runs of j on x: only vq_exec_run is
 * timed; every run's fetches are then checked. */
static double time_per_iter(vq_exec *x, const struct job *j, int runs)
{
    double total = 0;
    for (int r = 0; r < runs; r++) {
        vq_fetch f[2] = {{j->fetch_count, NULL}, {j->fetch_data, NULL}};
        double t0 = bench_now();
        check(vq_exec_run(x, j->prog, NULL, j->feeds, j->nfeeds, f, 2), j->label);
        total += bench_now() - t0;
        verify_fetches(j, f[0].tensor, f[1].tensor);
        vq_tensor_release(f[0].tensor);
        vq_tensor_release(f[1].tensor);
    }
    return total / ((double)runs * j->iters);
}

static uint64_t plans_built(vq_exec *x)
{
    vq_exec_stats st;
    check(vq_exec_get_stats(x, &st), "vq_exec_get_stats");
    return st.prepares;
}

static void check_no_plan_built(vq_exec *x, uint64_t before, const char *part)
{
    uint64_t after = plans_built(x);
    if (after != before) {
        fprintf(stderr, "control_bench: %s: the timed runs built %llu plans (the plan cache "
                        "missed)\n",
                part, (unsigned long long)(after - before));
        exit(1);
    }
}

static void engine_and_exec(int workers, vq_engine **e, vq_exec **x)
{
    vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = workers};
    check(vq_engine_new(e, &eo), "vq_engine_new");
    check(vq_exec_new(x, *e, NULL), "vq_exec_new");
}

/* ---- (1) overhead per iteration ---- */

/* x * 0.5^times, multiplied out one step at a time as the loop's ops do
 * (so it underflows to zero the same way). */
static double halved(double x, int times)
{
    for (int k = 0; k < times; k++)
        x *= 0.5;
    return x;
}

struct overhead {
    struct spread while_ns, unrolled_ns, ratio, long_ns, long_ratio;
};

static struct overhead bench_overhead(const struct config *c)
{
    vq_engine *e;
    vq_exec *x;
    engine_and_exec(c->workers, &e, &x);
    vq_program *loop = counter_while_program(), *flat = counter_unrolled_program(c->iters);
    vq_tensor *n = scalar_f64(c->iters), *n_long = scalar_f64(c->long_iters);
    vq_tensor *one = scalar_f64(1), *half = scalar_f64(0.5), *i0 = scalar_f64(0);
    vq_tensor *x0 = scalar_f64(1);

    double want_x = halved(1, c->iters), want_x_long = halved(1, c->long_iters);
    char final_i[24], final_x[24];
    snprintf(final_i, sizeof final_i, "i%d", c->iters);
    snprintf(final_x, sizeof final_x, "x%d", c->iters);

    struct job w = {.label = "while", .prog = loop,
                    .feeds = {{"n", n}, {"one", one}, {"half", half}, {"i0", i0}, {"x0", x0}},
                    .nfeeds = 5, .fetch_count = "io", .fetch_data = "xo", .iters = c->iters,
                    .want_count = c->iters, .want_data = &want_x, .want_numel = 1};
    struct job u = w;
    u.label = "unrolled";
    u.prog = flat;
    u.fetch_count = final_i;
    u.fetch_data = final_x;
    struct job l = w;
    l.label = "long while";
    l.feeds[0].tensor = n_long;
    l.iters = c->long_iters;
    l.want_count = c->long_iters;
    l.want_data = &want_x_long;

    prepare_job(x, &w); /* l shares w's plan: the same program, feeds and fetches */
    prepare_job(x, &u);
    uint64_t plans = plans_built(x);

    double *tw = alloc_or_exit((size_t)c->reps * 5 * sizeof *tw);
    double *tu = tw + c->reps, *tr = tu + c->reps, *tl = tr + c->reps, *tlr = tl + c->reps;
    for (int r = -1; r < c->reps; r++) { /* -1: warm-up */
        double sw = time_per_iter(x, &w, c->runs);
        double su = time_per_iter(x, &u, c->runs);
        double sl = time_per_iter(x, &l, 1);
        if (r >= 0) {
            tw[r] = sw * 1e9, tu[r] = su * 1e9, tr[r] = sw / su;
            tl[r] = sl * 1e9, tlr[r] = sl / sw;
        }
    }
    check_no_plan_built(x, plans, "overhead");
    struct overhead o = {spread_of(tw, c->reps), spread_of(tu, c->reps), spread_of(tr, c->reps),
                         spread_of(tl, c->reps), spread_of(tlr, c->reps)};
    free(tw);
    vq_tensor *feeds[] = {n, n_long, one, half, i0, x0};
    for (size_t k = 0; k < sizeof feeds / sizeof *feeds; k++)
        vq_tensor_release(feeds[k]);
    vq_exec_free(x);
    vq_program_free(loop);
    vq_program_free(flat);
    vq_engine_free(e);
    return o;
}

/* ---- (2) overlap ---- */

struct overlap {
    struct spread indep_1, indep_w, indep_speedup;
    struct spread chain_1, chain_w, chain_speedup, chain_over_indep_w;
};

/* dst = src with its columns moved right by `by` (cyclically): src @ p^by
 * for p the cyclic shift below. */
static void shift_columns(const double *src, double *dst, int64_t n, int64_t by)
{
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = 0; c < n; c++)
            dst[r * n + c] = src[r * n + ((c - by) % n + n) % n];
}

static vq_tensor *matrix_f64(int64_t n, const double *data)
{
    const int64_t sq[2] = {n, n};
    vq_tensor *t;
    check(vq_tensor_from(&t, VQ_F64, 2, sq, data), "vq_tensor_from");
    return t;
}

static struct overlap bench_overlap(const struct config *c)
{
    int64_t n = c->mat_n;
    size_t nn = (size_t)(n * n);
    double *m = alloc_or_exit(4 * nn * sizeof *m);
    double *p = m + nn, *want_indep = p + nn, *want_chain = want_indep + nn;
    /* distinct entries, so a wrong shift cannot match; p[j][j + 1] = 1 */
    for (size_t e = 0; e < nn; e++) {
        m[e] = (double)e + 1;
        p[e] = 0;
    }
    for (int64_t j = 0; j < n; j++)
        p[j * n + (j + 1) % n] = 1;
    shift_columns(m, want_indep, n, 1);
    shift_columns(m, want_chain, n, c->k_iters);

    vq_tensor *tm = matrix_f64(n, m), *tp = matrix_f64(n, p);
    vq_tensor *tk = scalar_f64(c->k_iters), *one = scalar_f64(1), *i0 = scalar_f64(0);
    vq_program *indep = matmul_while_program(n, false), *chain = matmul_while_program(n, true);
    struct job ji = {.label = "independent matmuls", .prog = indep,
                     .feeds = {{"k", tk}, {"one", one}, {"i0", i0}, {"m", tm}, {"p", tp}},
                     .nfeeds = 5, .fetch_count = "io", .fetch_data = "mo", .iters = c->k_iters,
                     .want_count = c->k_iters, .want_data = want_indep,
                     .want_numel = (int64_t)nn};
    struct job jc = ji;
    jc.label = "chained matmuls";
    jc.prog = chain;
    jc.want_data = want_chain;

    vq_engine *e1, *ew;
    vq_exec *x1, *xw;
    engine_and_exec(1, &e1, &x1);
    engine_and_exec(c->workers, &ew, &xw);
    prepare_job(x1, &ji);
    prepare_job(x1, &jc);
    prepare_job(xw, &ji);
    prepare_job(xw, &jc);
    uint64_t plans1 = plans_built(x1), plansw = plans_built(xw);

    int R = c->reps;
    double *t = alloc_or_exit((size_t)R * 7 * sizeof *t);
    double *i1 = t, *iw = t + R, *isp = t + 2 * R, *c1 = t + 3 * R, *cw = t + 4 * R,
           *csp = t + 5 * R, *cri = t + 6 * R;
    for (int r = -1; r < R; r++) { /* -1: warm-up */
        double a = time_per_iter(x1, &ji, 1), b = time_per_iter(xw, &ji, 1);
        double d = time_per_iter(x1, &jc, 1), f = time_per_iter(xw, &jc, 1);
        if (r >= 0) {
            i1[r] = a * 1e3, iw[r] = b * 1e3, isp[r] = a / b;
            c1[r] = d * 1e3, cw[r] = f * 1e3, csp[r] = d / f, cri[r] = f / b;
        }
    }
    check_no_plan_built(x1, plans1, "overlap, 1 worker");
    check_no_plan_built(xw, plansw, "overlap, W workers");
    struct overlap o = {spread_of(i1, R), spread_of(iw, R), spread_of(isp, R), spread_of(c1, R),
                        spread_of(cw, R), spread_of(csp, R), spread_of(cri, R)};
    free(t);
    vq_exec_free(x1);
    vq_exec_free(xw);
    vq_engine_free(e1);
    vq_engine_free(ew);
    vq_tensor *feeds[] = {tm, tp, tk, one, i0};
    for (size_t k = 0; k < sizeof feeds / sizeof *feeds; k++)
        vq_tensor_release(feeds[k]);
    vq_program_free(indep);
    vq_program_free(chain);
    free(m);
    return o;
}

/* ---- output ---- */

/* One figure: ns with no decimals, ms with three, ratios (suffix "x") with two. */
static void print_row(const char *label, struct spread s, int decimals, const char *suffix,
                      const char *note)
{
    char cell[80];
    snprintf(cell, sizeof cell, "%.*f%s [%.*f .. %.*f]", decimals, s.median, suffix, decimals,
             s.min, decimals, s.max);
    printf("  %-46s %26s%s%s\n", label, cell, *note ? "  " : "", note);
}

static void print_tables(const struct config *c, const struct overhead *o,
                         const struct overlap *v)
{
    printf("control_bench: threaded engine, %d repetitions after 1 warm-up, %ld cores online;\n"
           "each figure: median [min .. max] over the repetitions, ratios taken within a "
           "repetition\n",
           c->reps, sysconf(_SC_NPROCESSORS_ONLN));
    printf("\n(1) while overhead: body = 3 scalar f64 ops (add, mul, less); workers: %d\n"
           "    %d runs of %d iterations per repetition; unrolled = the same %d ops in block 0\n",
           c->workers, c->runs, c->iters, 3 * c->iters);
    char label[64];
    print_row("while, ns/iteration", o->while_ns, 0, "", "");
    print_row("unrolled, ns/iteration (3 ops)", o->unrolled_ns, 0, "", "");
    print_row("while / unrolled", o->ratio, 2, "x", "goal <= 1.5x");
    snprintf(label, sizeof label, "while, %d iterations, ns/iteration", c->long_iters);
    print_row(label, o->long_ns, 0, "", "one run per repetition");
    snprintf(label, sizeof label, "  / while of %d iterations", c->iters);
    print_row(label, o->long_ratio, 2, "x", "~1: the cost per iteration is flat");

    printf("\n(2) overlap: body = counter (add, less) + matmul f64[%d x %d]; %d iterations per "
           "run, one run per repetition\n",
           c->mat_n, c->mat_n, c->k_iters);
    print_row("independent (matmul(m, p)), 1 worker, ms/it", v->indep_1, 3, "", "");
    snprintf(label, sizeof label, "independent, %d workers, ms/it", c->workers);
    print_row(label, v->indep_w, 3, "", "");
    snprintf(label, sizeof label, "  speedup 1 -> %d workers", c->workers);
    print_row(label, v->indep_speedup, 2, "x", "iterations overlap: near min(workers, cores)");
    print_row("chained (matmul(bm, p)), 1 worker, ms/it", v->chain_1, 3, "", "");
    snprintf(label, sizeof label, "chained, %d workers, ms/it", c->workers);
    print_row(label, v->chain_w, 3, "", "");
    snprintf(label, sizeof label, "  speedup 1 -> %d workers", c->workers);
    print_row(label, v->chain_speedup, 2, "x", "a serial chain: ~1x");
    snprintf(label, sizeof label, "  chained / independent at %d workers", c->workers);
    print_row(label, v->chain_over_indep_w, 2, "x", "");
}

static void json_spread(const char *name, struct spread s, bool last)
{
    printf("\"%s\":{\"median\":%.6g,\"min\":%.6g,\"max\":%.6g}%s", name, s.median, s.min, s.max,
           last ? "" : ",");
}

static void print_json(const struct config *c, const struct overhead *o,
                       const struct overlap *v)
{
    printf("{\"bench\":\"control_bench\",\"cores\":%ld,\"workers\":%d,\"reps\":%d,",
           sysconf(_SC_NPROCESSORS_ONLN), c->workers, c->reps);
    printf("\"overhead\":{\"iters\":%d,\"runs\":%d,\"long_iters\":%d,", c->iters, c->runs,
           c->long_iters);
    json_spread("while_ns_per_iter", o->while_ns, false);
    json_spread("unrolled_ns_per_iter", o->unrolled_ns, false);
    json_spread("while_over_unrolled", o->ratio, false);
    json_spread("long_while_ns_per_iter", o->long_ns, false);
    json_spread("long_over_short_while", o->long_ratio, true);
    printf("},\"overlap\":{\"iters\":%d,\"matrix\":%d,", c->k_iters, c->mat_n);
    json_spread("independent_1_worker_ms_per_iter", v->indep_1, false);
    json_spread("independent_w_workers_ms_per_iter", v->indep_w, false);
    json_spread("independent_speedup", v->indep_speedup, false);
    json_spread("chained_1_worker_ms_per_iter", v->chain_1, false);
    json_spread("chained_w_workers_ms_per_iter", v->chain_w, false);
    json_spread("chained_speedup", v->chain_speedup, false);
    json_spread("chained_over_independent_w_workers", v->chain_over_indep_w, true);
    printf("}}\n");
}

/* A positive int from argv[i], or exit 2. */
static int positive_arg(const char *opt, const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 1 || v > 100000000) {
        fprintf(stderr, "control_bench: %s wants a positive integer, not '%s'\n", opt, s);
        exit(2);
    }
    return (int)v;
}

int main(int argc, char **argv)
{
    int reps = 0, iters = 0, workers = 2;
    bool tiny = false, json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tiny") == 0) {
            tiny = true;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = positive_arg(argv[i], argv[i + 1]), i++;
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = positive_arg(argv[i], argv[i + 1]), i++;
        } else if (strcmp(argv[i], "--workers") == 0 && i + 1 < argc) {
            workers = positive_arg(argv[i], argv[i + 1]), i++;
        } else {
            fprintf(stderr, "usage: %s [--reps R] [--iters N] [--workers W] [--json] [--tiny]\n",
                    argv[0]);
            return 2;
        }
    }
    /* 64 shifts of a 256-column matrix, 4 of 16 columns: neither is the
     * identity, so the chained result tells the iteration count. */
    struct config c = tiny ? (struct config){.reps = 2, .iters = 20, .long_iters = 200,
                                             .runs = 2, .k_iters = 4, .mat_n = 16}
                           : (struct config){.reps = 7, .iters = 1000, .long_iters = 100000,
                                             .runs = 10, .k_iters = 64, .mat_n = 256};
    if (reps)
        c.reps = reps;
    if (iters)
        c.iters = iters;
    c.workers = workers;
    c.json = json;

    struct overhead o = bench_overhead(&c);
    struct overlap v = bench_overlap(&c);
    if (c.json)
        print_json(&c, &o, &v);
    else
        print_tables(&c, &o, &v);
    return 0;
}
