/* The dist module in programs, on the ranks mpirun starts (2 or 4):
 *
 *  1. ops: a program with allreduce, broadcast and a send on rank 0 that a
 *     recv on rank 1 receives (a program cut across ranks), run three
 *     times, against values computed here.
 *  2. data parallelism: a small MLP (tanh, MSE, SGD and then Adam) trained
 *     with vq_dist_data_parallel, each rank feeding its shard of every
 *     global batch, every rank initialized with other seeds (startup's
 *     broadcast must undo that), against the same model trained in this
 *     process alone on the global batches: every parameter within 1e-5
 *     relative (norm of the difference / norm). Small buckets (one per
 *     gradient), so there are several all-reduces per step.
 *  3. overlap: the profiler's records of one step show an allreduce that
 *     started before the backward's last op ended, and a program's two
 *     all-reduces that ran at the same time.
 *
 * Framework-free (MPI and Criterion's fork do not mix); exit status
 * nonzero on failure. */
#include "dist_check.h"

#include <varq/dist.h>
#include <varq/varq.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- 1. the ops ---- */

static void ops_in_a_program(vq_engine *e, vq_dist *d)
{
    vq_program *p, *s;
    CHECK(vq_program_new(&p));
    CHECK(vq_program_new(&s));
    int64_t four[1] = {4};
    const char *vars[] = {"x", "a", "c", "r"};
    for (int i = 0; i < 4; i++)
        CHECK(vq_program_add_var(p, 0, vars[i], VQ_F32, 1, four, false));
    vq_attr two = VQ_ATTR_F("scale", 2), one = VQ_ATTR_F("scale", 1);
    CHECK(vq_program_add_op(p, 0, "scale", (const char *const[]){"x"}, 1,
                            (const char *const[]){"a"}, 1, &two, 1));
    CHECK(vq_program_add_op(p, 0, "scale", (const char *const[]){"x"}, 1,
                            (const char *const[]){"c"}, 1, &one, 1));
    CHECK(vq_dist_program_add(p, s, d, "allreduce", (const char *const[]){"a"},
                              (const char *const[]){"a"}, 1, NULL, 0));
    vq_attr root = VQ_ATTR_I("root", size - 1);
    CHECK(vq_dist_program_add(p, s, d, "broadcast", (const char *const[]){"c"},
                              (const char *const[]){"c"}, 1, &root, 1));
    vq_attr p2p[2] = {VQ_ATTR_I("peer", rank == 0 ? 1 : 0), VQ_ATTR_I("tag", 7)};
    if (rank == 0)
        CHECK(vq_dist_program_add(p, s, d, "send", (const char *const[]){"c"},
                                  (const char *const[]){"c"}, 1, p2p, 2));
    if (rank == 1) /* x gives the dtype and shape; r receives */
        CHECK(vq_dist_program_add(p, s, d, "recv", (const char *const[]){"x"},
                                  (const char *const[]){"r"}, 1, p2p, 2));
    else
        CHECK(vq_program_add_op(p, 0, "scale", (const char *const[]){"x"}, 1,
                                (const char *const[]){"r"}, 1, &one, 1));
    /* the program survives a save and a load (the comm attribute is an int) */
    void *buf;
    size_t len;
    vq_program *q;
    CHECK(vq_program_encode(p, &buf, &len));
    CHECK(vq_program_decode(&q, buf, len));
    free(buf);
    vq_exec *ex;
    vq_scope *sc;
    CHECK(vq_exec_new(&ex, e, NULL));
    CHECK(vq_scope_new(&sc));
    CHECK(vq_exec_run(ex, s, sc, NULL, 0, NULL, 0));
    for (int run = 0; run < 3; run++) {
        float xs[4];
        for (int i = 0; i < 4; i++)
            xs[i] = (float)(rank * 10 + i + run);
        vq_tensor *x;
        CHECK(vq_tensor_from(&x, VQ_F32, 1, four, xs));
        vq_feed feed = {"x", x};
        vq_fetch f[3] = {{"a", NULL}, {"c", NULL}, {"r", NULL}};
        CHECK(vq_exec_run(ex, run == 1 ? q : p, sc, &feed, 1, f, 3));
        for (int i = 0; i < 4; i++) {
            float sum = 0;
            for (int r = 0; r < size; r++)
                sum += 2 * (float)(r * 10 + i + run);
            float a = ((float *)vq_tensor_data(f[0].tensor))[i];
            float c = ((float *)vq_tensor_data(f[1].tensor))[i];
            float r = ((float *)vq_tensor_data(f[2].tensor))[i];
            EXPECT(a == sum, "run %d: allreduce: a[%d] = %g, expected %g", run, i, a, sum);
            EXPECT(c == (float)((size - 1) * 10 + i + run), "run %d: broadcast: c[%d] = %g",
                   run, i, c);
            float want_r = rank == 1 ? (float)(size - 1) * 10 + i + run : xs[i];
            EXPECT(r == want_r, "run %d: recv: r[%d] = %g, expected %g", run, i, r, want_r);
        }
        for (int i = 0; i < 3; i++)
            vq_tensor_release(f[i].tensor);
        vq_tensor_release(x);
    }
    vq_exec_free(ex);
    vq_scope_free(sc);
    vq_program_free(p);
    vq_program_free(q);
    vq_program_free(s);
}

/* ---- 2. data parallelism (3: overlap with the backward) ---- */

#define IN 8
#define HID 16
#define OUT 4
#define SHARD 4
#define STEPS 8

static void build_mlp(vq_program **startup, vq_program **main, uint64_t seed, vq_optimizer_kind k)
{
    CHECK(vq_program_new(startup));
    CHECK(vq_program_new(main));
    int64_t xs[2] = {-1, IN}, ys[2] = {-1, OUT};
    CHECK(vq_program_add_var(*main, 0, "x", VQ_F32, 2, xs, false));
    CHECK(vq_program_add_var(*main, 0, "y", VQ_F32, 2, ys, false));
    CHECK(vq_layer_linear(*main, *startup, "x", "h", HID, seed));
    CHECK(vq_layer_activation(*main, "tanh", "h", "a"));
    CHECK(vq_layer_linear(*main, *startup, "a", "o", HID, seed + 2));
    CHECK(vq_layer_activation(*main, "tanh", "o", "b"));
    CHECK(vq_layer_linear(*main, *startup, "b", "p", OUT, seed + 4));
    CHECK(vq_layer_mse_loss(*main, "p", "y", "loss"));
    vq_optimizer opt = {.kind = k, .learning_rate = k == VQ_OPT_SGD ? 0.1 : 0.01};
    CHECK(vq_optimizer_minimize(*main, *startup, "loss", &opt));
}

/* Rows [from, from + n) of step's global batch. */
static void batch(int step, int from, int n, vq_tensor **x, vq_tensor **y)
{
    int64_t xs[2] = {n, IN}, ys[2] = {n, OUT};
    float xb[64 * IN], yb[64 * OUT];
    for (int r = 0; r < n; r++) {
        for (int j = 0; j < IN; j++)
            xb[r * IN + j] = sinf((float)(step * 131 + (from + r) * 17 + j * 3));
        for (int j = 0; j < OUT; j++)
            yb[r * OUT + j] = cosf((float)(step * 7 + (from + r) * 5 + j));
    }
    CHECK(vq_tensor_from(x, VQ_F32, 2, xs, xb));
    CHECK(vq_tensor_from(y, VQ_F32, 2, ys, yb));
}

static void train(vq_exec *ex, vq_program *main, vq_scope *s, int from, int n)
{
    for (int step = 0; step < STEPS; step++) {
        vq_tensor *x, *y;
        batch(step, from, n, &x, &y);
        vq_feed feeds[2] = {{"x", x}, {"y", y}};
        CHECK(vq_exec_run(ex, main, s, feeds, 2, NULL, 0));
        vq_tensor_release(x);
        vq_tensor_release(y);
    }
}

static double compare_scopes(vq_scope *got, vq_scope *want)
{
    double worst = 0;
    const char *params[] = {"h.w", "h.b", "o.w", "o.b", "p.w", "p.b"};
    for (int i = 0; i < 6; i++) {
        vq_tensor *g = vq_scope_get(got, params[i]), *w = vq_scope_get(want, params[i]);
        CHECK(vq_tensor_wait(g));
        CHECK(vq_tensor_wait(w));
        double diff = 0, norm = 0;
        for (int64_t k = 0; k < vq_tensor_numel(w); k++) {
            double a = ((float *)vq_tensor_data(g))[k], b = ((float *)vq_tensor_data(w))[k];
            diff += (a - b) * (a - b);
            norm += b * b;
        }
        double rel = sqrt(diff) / (sqrt(norm) + 1e-30);
        worst = rel > worst ? rel : worst;
    }
    return worst;
}

enum { MAXEV = 4096 };

/* The spans (start and end, us) of the events of a profiler trace named
 * name, or (suffix) ending in it; their count, or -1. */
static int spans_in_trace(const char *path, const char *name, int suffix, double (*sp)[2])
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[512];
    int n = 0;
    size_t len = strlen(name);
    while (fgets(line, sizeof line, f) && n < MAXEV) {
        char ev[64];
        const char *ts = strstr(line, "\"ts\":");
        if (sscanf(line, "{\"name\":\"%63[^\"]\"", ev) != 1 || !ts)
            continue;
        double t, dur;
        if (sscanf(ts, "\"ts\":%lf,\"dur\":%lf", &t, &dur) != 2)
            continue;
        size_t m = strlen(ev);
        if (suffix ? m > len && !strcmp(ev + m - len, name) : !strcmp(ev, name)) {
            sp[n][0] = t;
            sp[n++][1] = t + dur;
        }
    }
    fclose(f);
    return n;
}

/* The time spans of a and b ran together, summed. */
static double overlap_of(double (*a)[2], int na, double (*b)[2], int nb)
{
    double both = 0;
    for (int i = 0; i < na; i++)
        for (int j = 0; j < nb; j++) {
            double lo = a[i][0] > b[j][0] ? a[i][0] : b[j][0];
            double hi = a[i][1] < b[j][1] ? a[i][1] : b[j][1];
            if (hi > lo && (a != b || i < j))
                both += hi - lo;
        }
    return both;
}

/* Does the trace hold an allreduce that ran while an op of the backward
 * (a *_grad op) ran? (Steps do not overlap each other: a step's backward
 * needs the last step's updates, which need its all-reduces.) The time
 * they ran together, summed, in *both_us. */
static int overlap_in_trace(const char *path, double *both_us)
{
    static double ar[MAXEV][2], gr[MAXEV][2];
    int nar = spans_in_trace(path, "allreduce", 0, ar);
    int ngr = spans_in_trace(path, "_grad", 1, gr);
    if (nar < 0 || ngr < 0)
        return -1;
    *both_us = overlap_of(ar, nar, gr, ngr);
    return *both_us > 0;
}

static void data_parallel(vq_optimizer_kind kind, int profile)
{
    vq_engine *e, *e_ref;
    vq_engine_opts eo = {.flags = profile ? VQ_ENGINE_PROFILE : 0};
    CHECK(vq_engine_new(&e, &eo));
    CHECK(vq_engine_new(&e_ref, NULL));
    vq_dist *d;
    CHECK(vq_dist_new(&d, e, NULL));
    vq_program *st, *mn, *rst, *rmn;
    build_mlp(&st, &mn, 100 + (uint64_t)rank * 10, kind); /* other seeds per rank */
    build_mlp(&rst, &rmn, 100, kind);                     /* rank 0's */
    vq_dist_dp_opts dpo = {.bucket_bytes = 64};
    int nb = vq_dist_data_parallel(mn, st, d, &dpo);
    CHECK(nb);
    EXPECT(nb == 6, "%d buckets, expected one per gradient (6)", nb);
    vq_exec *ex, *rex;
    vq_scope *s, *rs;
    CHECK(vq_exec_new(&ex, e, NULL));
    CHECK(vq_exec_new(&rex, e_ref, NULL));
    CHECK(vq_scope_new(&s));
    CHECK(vq_scope_new(&rs));
    CHECK(vq_exec_run(ex, st, s, NULL, 0, NULL, 0));
    CHECK(vq_exec_run(rex, rst, rs, NULL, 0, NULL, 0));
    double init = compare_scopes(s, rs);
    EXPECT(init == 0, "after startup the parameters differ from rank 0's by %g", init);
    train(ex, mn, s, rank * SHARD, SHARD);
    train(rex, rmn, rs, 0, SHARD * size);
    double err = compare_scopes(s, rs);
    EXPECT(err <= 1e-5, "%s: data-parallel weights differ from one process's by %g relative",
           kind == VQ_OPT_SGD ? "sgd" : "adam", err);
    if (rank == 0)
        printf("dist_graph: data parallel (%s, %d buckets, %d steps, %d ranks): max relative "
               "error %.3g\n",
               kind == VQ_OPT_SGD ? "sgd" : "adam", nb, STEPS, size, err);
    if (profile) {
        char path[64];
        snprintf(path, sizeof path, "/tmp/varq_dist_graph_%d_%d.json", (int)getpid(), rank);
        CHECK(vq_profiler_dump(e, path));
        double lead;
        int ov = overlap_in_trace(path, &lead);
        EXPECT(ov == 1, "no allreduce ran while a backward op ran (%d)", ov);
        if (rank == 0 && ov == 1)
            printf("dist_graph: all-reduces ran during backward ops for %.1f us over %d steps\n",
                   lead, STEPS);
        unlink(path);
    }
    CHECK(vq_wait_all(e));
    vq_exec_free(ex);
    vq_exec_free(rex);
    vq_scope_free(s);
    vq_scope_free(rs);
    vq_program_free(st);
    vq_program_free(mn);
    vq_program_free(rst);
    vq_program_free(rmn);
    CHECK(vq_dist_free(d));
    vq_engine_free(e);
    vq_engine_free(e_ref);
}

/* ---- 3. communication ops of a program overlap each other ----
 *
 * A program with an all-reduce of 8 MiB and then one of 16 bytes, both
 * ready at once: the second must start while the first is still out (the
 * token that orders them is released when the first has its number, not
 * when it completes). Without that, the spans in the profiler's records
 * follow each other. */
static void comm_ops_overlap(void)
{
    vq_engine *e;
    vq_engine_opts eo = {.flags = VQ_ENGINE_PROFILE};
    CHECK(vq_engine_new(&e, &eo));
    vq_dist *d;
    CHECK(vq_dist_new(&d, e, NULL));
    vq_program *p, *s;
    CHECK(vq_program_new(&p));
    CHECK(vq_program_new(&s));
    int64_t big[1] = {2 << 20}, small[1] = {4};
    CHECK(vq_program_add_var(p, 0, "big", VQ_F32, 1, big, false));
    CHECK(vq_program_add_var(p, 0, "small", VQ_F32, 1, small, false));
    CHECK(vq_dist_program_add(p, s, d, "allreduce", (const char *const[]){"big"},
                              (const char *const[]){"big"}, 1, NULL, 0));
    CHECK(vq_dist_program_add(p, s, d, "allreduce", (const char *const[]){"small"},
                              (const char *const[]){"small"}, 1, NULL, 0));
    vq_exec *ex;
    vq_scope *sc;
    CHECK(vq_exec_new(&ex, e, NULL));
    CHECK(vq_scope_new(&sc));
    CHECK(vq_exec_run(ex, s, sc, NULL, 0, NULL, 0));
    vq_tensor *bt, *st;
    CHECK(vq_tensor_new(&bt, VQ_F32, 1, big));
    CHECK(vq_tensor_new(&st, VQ_F32, 1, small));
    for (int64_t i = 0; i < big[0]; i++)
        ((float *)vq_tensor_data(bt))[i] = (float)(i % 7 + rank);
    for (int i = 0; i < 4; i++)
        ((float *)vq_tensor_data(st))[i] = (float)(i + rank);
    vq_feed feeds[2] = {{"big", bt}, {"small", st}};
    vq_fetch f[2] = {{"big", NULL}, {"small", NULL}};
    CHECK(vq_exec_run(ex, p, sc, feeds, 2, f, 2));
    float b7 = ((float *)vq_tensor_data(f[0].tensor))[7];
    float s3 = ((float *)vq_tensor_data(f[1].tensor))[3];
    float rsum = (float)(size * (size - 1) / 2);
    EXPECT(b7 == rsum && s3 == (float)size * 3 + rsum,
           "allreduce results %g and %g, expected %g and %g", b7, s3, rsum, (float)size * 3 + rsum);
    char path[64];
    snprintf(path, sizeof path, "/tmp/varq_dist_graph_ov_%d_%d.json", (int)getpid(), rank);
    CHECK(vq_profiler_dump(e, path));
    static double ar[MAXEV][2];
    int nar = spans_in_trace(path, "allreduce", 0, ar);
    unlink(path);
    EXPECT(nar == 2, "%d allreduce spans in the trace, expected 2", nar);
    double both = nar == 2 ? overlap_of(ar, nar, ar, nar) : 0;
    EXPECT(both > 0,
           "the program's two all-reduces did not overlap (spans %.1f-%.1f and "
           "%.1f-%.1f us)",
           ar[0][0], ar[0][1], ar[1][0], ar[1][1]);
    if (rank == 0 && both > 0)
        printf("dist_graph: a program's two all-reduces ran together for %.1f us\n", both);
    for (int i = 0; i < 2; i++)
        vq_tensor_release(f[i].tensor);
    vq_tensor_release(bt);
    vq_tensor_release(st);
    CHECK(vq_wait_all(e));
    vq_exec_free(ex);
    vq_scope_free(sc);
    vq_program_free(p);
    vq_program_free(s);
    CHECK(vq_dist_free(d));
    vq_engine_free(e);
}

int main(void)
{
    vq_engine *e;
    vq_dist *keep; /* keeps MPI up across the parts (the last free finalizes) */
    CHECK(vq_engine_new(&e, NULL));
    CHECK(vq_dist_new(&keep, e, NULL));
    rank = vq_dist_rank(keep);
    size = vq_dist_size(keep);
    if (size < 2 || size * SHARD > 64) {
        fprintf(stderr, "dist_graph: run it under mpirun with 2 to 16 ranks\n");
        return 1;
    }
    ops_in_a_program(e, keep);
    comm_ops_overlap();
    data_parallel(VQ_OPT_SGD, 1);
    data_parallel(VQ_OPT_ADAM, 0);
    CHECK(vq_wait_all(e));
    int rc = vq_dist_free(keep);
    vq_engine_free(e);
    if (failures || rc < 0) {
        fprintf(stderr, "rank %d: FAILED (%d)\n", rank, failures);
        return 1;
    }
    if (rank == 0)
        printf("dist_graph: ok on %d ranks\n", size);
    return 0;
}
