/* exec_bench: what the graph executor costs on top of the engine.
 *
 * (1) Prepare: vq_exec_prepare of programs of 1k, 10k and 100k ops on a
 *     fresh executor (a cache miss every time), to check that preparation
 *     grows linearly: ns per op at 100k over ns per op at 1k should stay
 *     below 2.
 * (2) Run overhead: a program of 10k ops on one-element tensors (as close to
 *     an empty op as an op gets), run many times with vq_exec_run on its
 *     cached plan, against the same ops as raw prebuilt engine ops
 *     (vq_opr_new once, vq_push_opr per pass, then vq_wait_all) doing the
 *     same arithmetic on plain floats over engine vars with the same reads
 *     and writes. Goal: executor / raw <= 1.1 ns per op. The executor runs
 *     twice: with segments (consecutive chained ops as one engine op, the
 *     default) and with VQ_EXEC_NO_SEGMENTS (one engine op per op).
 *
 * Both use one program shape (exec_chain.h, shared with exec_taskflow.cpp,
 * which runs it as a static Taskflow graph): x -> t1 -> ... -> tN, op i
 * being, by i % 3, add(t[i-1], t[j]) with j a pseudo-random earlier var
 * (fan-in), scale (-0.5 x + 1) or relu of t[i-1], all f32[1]; x is fed, tN
 * fetched. Every run's result is compared with the same chain computed
 * serially here; a difference exits 1.
 *
 * usage: exec_bench [--tiny] [--json FILE] [--only prepare|run] [--ops N]
 *                   [--reps R] [--runs K] [--workers N] [--side exec|noseg|raw]
 *   --tiny  small sizes and few repetitions: checks the results in about a
 *           second (a meson test); no timing is asserted.
 *   For profiling one part (valgrind --tool=callgrind; counts per op come
 *   from the difference of two runs with different --reps or --runs):
 *   --only    only (1) or only (2)
 *   --ops     (1): one program size instead of three; (2): the chain's ops
 *   --reps    repetitions: of each prepare size, of the run table
 *   --runs    (2): runs per repetition
 *   --workers (2): only the threaded engine with N workers
 *   --side    (2): only the executor with segments, only the executor
 *             without, or only the raw ops (the ratios then print as 0) */
#include <varq/varq.h>
#include "exec_chain.h" /* the program shape: chain_make, chain_step, chain_expect */
#include "measure.h"    /* bench_now, bench_median, bench_stats */

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct sizes {
    int prepare_ops[3], prepare_reps[3], nprepare;
    int run_ops, runs, run_reps;
};

static const struct sizes full = {{1000, 10000, 100000}, {31, 11, 7}, 3, 10000, 20, 9};
static const struct sizes tiny = {{100, 1000}, {3, 3}, 2, 1000, 3, 2};

/* --side: which of the run table's three sides run */
enum { SIDE_EXEC = 1, SIDE_NOSEG = 2, SIDE_RAW = 4, SIDE_ALL = 7 };
static int g_sides = SIDE_ALL;

static int die(const char *what, int rc)
{
    fprintf(stderr, "exec_bench: %s: %s (%s)\n", what, vq_errmsg(), vq_strerror(rc));
    return -1;
}

/* ---- the chain (exec_chain.h) ---- */

static int same(float got, float want)
{
    return fabsf(got - want) <= 1e-5f * (1 + fabsf(want));
}

static void var_name(char *buf, size_t size, int v)
{
    if (v == 0)
        snprintf(buf, size, "x");
    else
        snprintf(buf, size, "t%d", v);
}

static vq_program *program_make(const struct chain_op *ops, int n)
{
    vq_program *p;
    if (vq_program_new(&p) < 0)
        return NULL;
    const int64_t shape[1] = {1};
    char name[32], a[32], b[32], c[32];
    for (int v = 0; v <= n; v++) {
        var_name(name, sizeof name, v);
        if (vq_program_add_var(p, 0, name, VQ_F32, 1, shape, false) < 0)
            goto fail;
    }
    const vq_attr scale[2] = {VQ_ATTR_F("scale", SCALE), VQ_ATTR_F("bias", BIAS)};
    for (int i = 1; i <= n; i++) {
        const struct chain_op *o = &ops[i];
        var_name(a, sizeof a, o->a);
        var_name(c, sizeof c, o->c);
        const char *in[2] = {a, b}, *out[1] = {c};
        int rc;
        if (o->kind == OP_ADD) {
            var_name(b, sizeof b, o->b);
            rc = vq_program_add_op(p, 0, "add", in, 2, out, 1, NULL, 0);
        } else if (o->kind == OP_SCALE) {
            rc = vq_program_add_op(p, 0, "scale", in, 1, out, 1, scale, 2);
        } else {
            rc = vq_program_add_op(p, 0, "relu", in, 1, out, 1, NULL, 0);
        }
        if (rc < 0)
            goto fail;
    }
    return p;
fail:
    fprintf(stderr, "exec_bench: building the program: %s\n", vq_errmsg());
    vq_program_free(p);
    return NULL;
}

/* ---- (1) prepare ---- */

struct prepare_result {
    int ops, reps;
    double hash_us, median_us, min_us;
};

static int bench_prepare(vq_engine *e, int n, int reps, struct prepare_result *res)
{
    struct chain_op *ops = chain_make(n);
    vq_program *p = ops ? program_make(ops, n) : NULL;
    free(ops);
    if (!p)
        return -1;
    char fetch[32];
    var_name(fetch, sizeof fetch, n);
    const char *feeds[1] = {"x"}, *fetches[1] = {fetch};
    /* The program hash is cached in the program after its first use: time
     * it once here, apart, so that every repetition below does the same
     * work. */
    double t0 = bench_now();
    vq_program_hash(p);
    res->hash_us = (bench_now() - t0) * 1e6;
    double *t = malloc((size_t)reps * sizeof *t);
    int rc = 0;
    /* Repetition -1 is a warm-up: the first prepare of a size also pays
     * for growing the heap, which later ones find done. */
    for (int r = -1; r < reps && rc == 0; r++) {
        vq_exec *x;
        if ((rc = vq_exec_new(&x, e, NULL)) < 0) {
            die("vq_exec_new", rc);
            break;
        }
        t0 = bench_now();
        rc = vq_exec_prepare(x, p, NULL, feeds, 1, fetches, 1);
        if (r >= 0)
            t[r] = bench_now() - t0;
        if (rc < 0)
            die("vq_exec_prepare", rc);
        vq_exec_stats st;
        vq_exec_get_stats(x, &st);
        if (rc == 0 && st.prepares != 1) {
            fprintf(stderr, "exec_bench: prepare on a fresh executor built %llu plans\n",
                    (unsigned long long)st.prepares);
            rc = -1;
        }
        vq_exec_free(x);
        vq_wait_all(e); /* the plan's vars are freed as engine ops: not in the next timing */
    }
    if (rc == 0) {
        res->ops = n;
        res->reps = reps;
        bench_stats(t, reps, &res->median_us, &res->min_us);
        res->median_us *= 1e6;
        res->min_us *= 1e6;
    }
    free(t);
    vq_program_free(p);
    return rc < 0 ? -1 : 0;
}

/* ---- (2) run overhead ---- */

static float *g_vals;

static int raw_exec(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    chain_step(arg, g_vals);
    return 0;
}

struct run_result {
    const char *engine;
    int workers;
    double exec_ns, exec_min_ns, raw_ns, raw_min_ns;
    double noseg_ns, noseg_min_ns; /* VQ_EXEC_NO_SEGMENTS */
};

static int bench_run(const char *kind_name, int kind, int workers, const struct sizes *z,
                     struct run_result *res)
{
    int n = z->run_ops, rc = 0;
    vq_engine *e = NULL;
    vq_exec *x = NULL, *xn = NULL;
    vq_program *p = NULL;
    vq_tensor *feed = NULL;
    vq_var **vars = NULL;
    vq_opr **oprs = NULL;
    double *te = malloc((size_t)z->run_reps * sizeof *te);
    double *tr = malloc((size_t)z->run_reps * sizeof *tr);
    double *tn = malloc((size_t)z->run_reps * sizeof *tn);
    struct chain_op *ops = chain_make(n);
    g_vals = calloc((size_t)n + 1, sizeof *g_vals);
    if (!te || !tr || !tn || !ops || !g_vals || !(p = program_make(ops, n))) {
        fprintf(stderr, "exec_bench: out of memory\n");
        rc = -1;
        goto out;
    }
    float want = chain_expect(ops, n);
    vq_engine_opts eo = {.kind = kind, .cpu_workers = workers};
    vq_exec_opts nseg = {.flags = VQ_EXEC_NO_SEGMENTS};
    if ((rc = vq_engine_new(&e, &eo)) < 0 || (rc = vq_exec_new(&x, e, NULL)) < 0 ||
        (rc = vq_exec_new(&xn, e, &nseg)) < 0) {
        rc = die("engine or executor", rc);
        goto out;
    }

    /* The executor's side: the plan is prepared (and a first run done)
     * before the timing. */
    const int64_t shape[1] = {1};
    float fv = FEED_VALUE;
    if ((rc = vq_tensor_from(&feed, VQ_F32, 1, shape, &fv)) < 0) {
        rc = die("vq_tensor_from", rc);
        goto out;
    }
    char fetch_name[32];
    var_name(fetch_name, sizeof fetch_name, n);
    vq_feed fd = {"x", feed};

    /* The raw side: one engine var per program var, one prebuilt op per op. */
    vars = calloc((size_t)n + 1, sizeof *vars);
    oprs = calloc((size_t)n + 1, sizeof *oprs);
    if (!vars || !oprs) {
        fprintf(stderr, "exec_bench: out of memory\n");
        rc = -1;
        goto out;
    }
    for (int v = 0; v <= n; v++)
        if (!(vars[v] = vq_var_new(e, NULL))) {
            rc = die("vq_var_new", VQ_ENOMEM);
            goto out;
        }
    for (int i = 1; i <= n; i++) {
        vq_var *reads[2] = {vars[ops[i].a], ops[i].b >= 0 ? vars[ops[i].b] : NULL};
        vq_task t = {.fn = raw_exec, .arg = &ops[i], .reads = reads,
                     .nreads = ops[i].b >= 0 ? 2 : 1, .writes = &vars[i], .nwrites = 1,
                     .name = "raw"};
        if (!(oprs[i] = vq_opr_new(e, &t))) {
            rc = die("vq_opr_new", VQ_ENOMEM);
            goto out;
        }
    }

    /* Repetitions alternate the two sides so that both see the same
     * machine (these VMs drift). Repetition -1 is the warm-up. */
    for (int r = -1; r < z->run_reps; r++) {
        double t0 = bench_now(), tx[2];
        for (int side = 0; side < 2; side++) {
            for (int k = 0; k < z->runs && (g_sides & (side ? SIDE_NOSEG : SIDE_EXEC)); k++) {
                vq_fetch fe = {fetch_name, NULL};
                if ((rc = vq_exec_run(side ? xn : x, p, NULL, &fd, 1, &fe, 1)) < 0) {
                    rc = die("vq_exec_run", rc);
                    goto out;
                }
                float got = *(float *)vq_tensor_data(fe.tensor);
                vq_tensor_release(fe.tensor);
                if (!same(got, want)) {
                    fprintf(stderr, "exec_bench: %s engine, %d workers: executor%s computed "
                            "%.9g, the serial chain %.9g\n", kind_name, workers,
                            side ? " (no segments)" : "", got, want);
                    rc = -1;
                    goto out;
                }
            }
            tx[side] = bench_now();
        }
        double t1 = tx[1];
        for (int k = 0; k < z->runs && (g_sides & SIDE_RAW); k++) {
            g_vals[0] = FEED_VALUE;
            for (int i = 1; i <= n; i++)
                vq_push_opr(e, oprs[i]);
            if ((rc = vq_wait_all(e)) < 0) {
                rc = die("vq_wait_all", rc);
                goto out;
            }
            if (!same(g_vals[n], want)) {
                fprintf(stderr, "exec_bench: %s engine, %d workers: raw ops computed %.9g, "
                        "the serial chain %.9g\n", kind_name, workers, g_vals[n], want);
                rc = -1;
                goto out;
            }
        }
        double t2 = bench_now();
        if (r >= 0) {
            double per = (double)z->runs * n;
            te[r] = g_sides & SIDE_EXEC ? (tx[0] - t0) / per : 0;
            tn[r] = g_sides & SIDE_NOSEG ? (tx[1] - tx[0]) / per : 0;
            tr[r] = g_sides & SIDE_RAW ? (t2 - t1) / per : 0;
        }
    }
    vq_exec_stats st;
    vq_exec_get_stats(x, &st);
    if (st.prepares != ((g_sides & SIDE_EXEC) ? 1u : 0u)) {
        fprintf(stderr, "exec_bench: the runs built %llu plans, not 1\n",
                (unsigned long long)st.prepares);
        rc = -1;
        goto out;
    }
    res->engine = kind_name;
    res->workers = workers;
    bench_stats(te, z->run_reps, &res->exec_ns, &res->exec_min_ns);
    bench_stats(tr, z->run_reps, &res->raw_ns, &res->raw_min_ns);
    bench_stats(tn, z->run_reps, &res->noseg_ns, &res->noseg_min_ns);
    res->exec_ns *= 1e9, res->exec_min_ns *= 1e9, res->raw_ns *= 1e9, res->raw_min_ns *= 1e9;
    res->noseg_ns *= 1e9, res->noseg_min_ns *= 1e9;
out:
    vq_exec_free(x);
    vq_exec_free(xn);
    vq_tensor_release(feed);
    for (int i = 1; oprs && i <= n; i++)
        if (oprs[i])
            vq_opr_free(e, oprs[i]);
    for (int v = 0; vars && v <= n; v++)
        if (vars[v])
            vq_var_free(e, vars[v]);
    vq_engine_free(e);
    vq_program_free(p);
    free(vars);
    free(oprs);
    free(ops);
    free(g_vals);
    g_vals = NULL;
    free(te);
    free(tr);
    free(tn);
    return rc < 0 ? -1 : 0;
}

/* ---- output ---- */

/* a / b, or 0 where a side did not run (--side) */
static double ratio(double a, double b)
{
    return a > 0 && b > 0 ? a / b : 0;
}

static int write_json(const char *path, const struct sizes *z, const struct prepare_result *pr,
                      int npr, double linearity, double linearity_min,
                      const struct run_result *rr, int nrr)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "exec_bench: cannot write %s\n", path);
        return -1;
    }
    char date[32];
    time_t t = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    fprintf(f, "{\"date\":\"%s\",\"cores\":%ld,\n\"prepare\":[", date,
            sysconf(_SC_NPROCESSORS_ONLN));
    for (int i = 0; i < npr; i++)
        fprintf(f,
                "%s\n{\"ops\":%d,\"reps\":%d,\"hash_us\":%.1f,\"median_us\":%.1f,"
                "\"min_us\":%.1f,\"ns_per_op\":%.1f}",
                i ? "," : "", pr[i].ops, pr[i].reps, pr[i].hash_us, pr[i].median_us,
                pr[i].min_us, pr[i].median_us * 1e3 / pr[i].ops);
    fprintf(f, "],\n\"prepare_linearity\":%.3f,\"prepare_linearity_of_mins\":%.3f,\n\"run\":{\"ops\":%d,\"runs\":%d,\"reps\":%d,"
            "\"rows\":[", linearity, linearity_min, z->run_ops, z->runs, z->run_reps);
    for (int i = 0; i < nrr; i++)
        fprintf(f,
                "%s\n{\"engine\":\"%s\",\"workers\":%d,\"exec_ns_per_op\":%.1f,"
                "\"exec_min_ns_per_op\":%.1f,\"raw_ns_per_op\":%.1f,\"raw_min_ns_per_op\":%.1f,"
                "\"ratio\":%.3f,\"noseg_ns_per_op\":%.1f,\"noseg_min_ns_per_op\":%.1f,"
                "\"noseg_ratio\":%.3f}",
                i ? "," : "", rr[i].engine, rr[i].workers, rr[i].exec_ns, rr[i].exec_min_ns,
                rr[i].raw_ns, rr[i].raw_min_ns, ratio(rr[i].exec_ns, rr[i].raw_ns), rr[i].noseg_ns,
                rr[i].noseg_min_ns, ratio(rr[i].noseg_ns, rr[i].raw_ns));
    fprintf(f, "\n]}}\n");
    return fclose(f) == 0 ? 0 : -1;
}

static int usage(const char *argv0)
{
    fprintf(stderr,
            "usage: %s [--tiny] [--json FILE] [--only prepare|run] [--ops N] [--reps R]\n"
            "       [--runs K] [--workers N] [--side exec|noseg|raw]\n",
            argv0);
    return 2;
}

/* A positive int option value, or -1. */
static int positive(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    return *s && !*end && v > 0 && v <= 100000000 ? (int)v : -1;
}

int main(int argc, char **argv)
{
    struct sizes z_opt = full;
    const struct sizes *z = &full;
    const char *json = NULL;
    bool do_prepare = true, do_run = true;
    int ops = 0, reps = 0, runs = 0, only_workers = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--tiny") == 0) {
            z = &tiny;
        } else if (strcmp(argv[i], "--json") == 0 && v) {
            json = argv[++i];
        } else if (strcmp(argv[i], "--only") == 0 && v &&
                   (!strcmp(v, "prepare") || !strcmp(v, "run"))) {
            do_prepare = !strcmp(v, "prepare");
            do_run = !do_prepare;
            i++;
        } else if (strcmp(argv[i], "--side") == 0 && v &&
                   (!strcmp(v, "exec") || !strcmp(v, "noseg") || !strcmp(v, "raw"))) {
            g_sides = !strcmp(v, "exec") ? SIDE_EXEC : !strcmp(v, "noseg") ? SIDE_NOSEG : SIDE_RAW;
            i++;
        } else if (v && (!strcmp(argv[i], "--ops") || !strcmp(argv[i], "--reps") ||
                         !strcmp(argv[i], "--runs") || !strcmp(argv[i], "--workers"))) {
            int n = positive(v);
            if (n < 0)
                return usage(argv[0]);
            *(!strcmp(argv[i], "--ops")    ? &ops
              : !strcmp(argv[i], "--reps") ? &reps
              : !strcmp(argv[i], "--runs") ? &runs
                                           : &only_workers) = n;
            i++;
        } else {
            return usage(argv[0]);
        }
    }
    z_opt = *z;
    if (ops) {
        z_opt.prepare_ops[0] = z_opt.run_ops = ops;
        z_opt.nprepare = 1;
    }
    for (int i = 0; reps && i < z_opt.nprepare; i++)
        z_opt.prepare_reps[i] = reps;
    if (reps)
        z_opt.run_reps = reps;
    if (runs)
        z_opt.runs = runs;
    z = &z_opt;

    printf("graph executor: chain of add (with a random earlier var) / scale / relu on f32[1]\n");
    struct prepare_result pr[3];
    double linearity = 0, linearity_min = 0;
    if (do_prepare) {
        printf("\nprepare on a fresh executor (cache miss), threaded engine, 2 workers;\n"
               "after one warm-up, median of the repetitions (min); hash = the program's\n"
               "first vq_program_hash (then cached in it), timed apart\n");
        printf("%8s %5s %10s %22s %10s\n", "ops", "reps", "hash us", "prepare us", "ns/op");
        vq_engine *e;
        vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
        int rc = vq_engine_new(&e, &eo);
        if (rc < 0)
            return die("vq_engine_new", rc), 1;
        for (int i = 0; i < z->nprepare; i++) {
            if (bench_prepare(e, z->prepare_ops[i], z->prepare_reps[i], &pr[i]) < 0) {
                vq_engine_free(e);
                return 1;
            }
            char cell[40];
            snprintf(cell, sizeof cell, "%.0f (%.0f)", pr[i].median_us, pr[i].min_us);
            printf("%8d %5d %10.0f %22s %10.0f\n", pr[i].ops, pr[i].reps, pr[i].hash_us, cell,
                   pr[i].median_us * 1e3 / pr[i].ops);
            fflush(stdout);
        }
        vq_engine_free(e);
        const struct prepare_result *lo = &pr[0], *hi = &pr[z->nprepare - 1];
        linearity = (hi->median_us / hi->ops) / (lo->median_us / lo->ops);
        linearity_min = (hi->min_us / hi->ops) / (lo->min_us / lo->ops);
        if (z->nprepare > 1)
            printf("linearity: ns/op at %d ops / ns/op at %d ops = %.2f (of the mins: %.2f; "
                   "goal <= 2)\n",
                   hi->ops, lo->ops, linearity, linearity_min);
    }

    struct run_result rr[3];
    int nrr = 0;
    if (do_run) {
        printf("\nrun: %d ops, %d runs per repetition, %d repetitions; ns per op per run,\n"
               "median (min); executor = vq_exec_run of the cached plan (segments: chained ops\n"
               "as one engine op; no seg.: VQ_EXEC_NO_SEGMENTS), raw = vq_push_opr of the same\n"
               "ops (same vars, same arithmetic on plain floats), then vq_wait_all\n",
               z->run_ops, z->runs, z->run_reps);
        printf("%-9s %7s %14s %14s %14s %9s %9s\n", "engine", "workers", "executor", "no seg.",
               "raw", "exec/raw", "noseg/raw");
        static const struct {
            const char *name;
            int kind, workers;
        } configs[] = {{"threaded", VQ_ENGINE_THREADED, 1},
                       {"threaded", VQ_ENGINE_THREADED, 2},
                       {"naive", VQ_ENGINE_NAIVE, 1}};
        for (size_t c = 0; c < sizeof configs / sizeof *configs; c++) {
            int kind = configs[c].kind, workers = configs[c].workers;
            if (only_workers) { /* --workers: one threaded row */
                if (c > 0)
                    break;
                workers = only_workers;
            }
            if (bench_run(configs[c].name, kind, workers, z, &rr[nrr]) < 0)
                return 1;
            const struct run_result *r = &rr[nrr++];
            char ex[40], ns[40], raw[40], w[16] = "-";
            snprintf(ex, sizeof ex, "%.0f (%.0f)", r->exec_ns, r->exec_min_ns);
            snprintf(ns, sizeof ns, "%.0f (%.0f)", r->noseg_ns, r->noseg_min_ns);
            snprintf(raw, sizeof raw, "%.0f (%.0f)", r->raw_ns, r->raw_min_ns);
            if (kind != VQ_ENGINE_NAIVE)
                snprintf(w, sizeof w, "%d", r->workers);
            printf("%-9s %7s %14s %14s %14s %8.2fx %8.2fx\n", r->engine, w, ex, ns, raw,
                   ratio(r->exec_ns, r->raw_ns), ratio(r->noseg_ns, r->raw_ns));
            fflush(stdout);
        }
        printf("goal: executor/raw <= 1.1\n");
    }
    if (json && write_json(json, z, pr, do_prepare ? z->nprepare : 0, linearity, linearity_min, rr,
                           nrr) < 0)
        return 1;
    return 0;
}
