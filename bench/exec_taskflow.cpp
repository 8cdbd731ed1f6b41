/* exec_taskflow: the peer of exec_bench's run table (the cost per op of a
 * run of a graph built once): exec_bench's program (exec_chain.h: the same
 * ops, the same fan-in edges, the same arithmetic on plain floats) as a
 * static tf::Taskflow, built once, then run many times with
 * executor.run(taskflow).wait(), against varq's prepared plan run by
 * vq_exec_run. One task per op; an edge from the producer of each var an op
 * reads (the graph has no write-after-read: every var is written once per
 * run). Every run's result is compared with the chain computed serially; a
 * difference exits 1.
 *
 * usage: exec_taskflow [--tiny] [--ops N] [--runs K] [--reps R] [--workers 1,2]
 *   defaults as exec_bench's: 10k ops, 20 runs per repetition, 9
 *   repetitions after one warm-up, 1 and 2 workers.
 * Prints a table, and one tab-separated line per worker count:
 *   graph taskflow <workers> <ops> <median ns/op> <min ns/op> */
#include <taskflow/taskflow.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <vector>

#include "exec_chain.h"
#include "measure.h"

namespace {

struct sizes {
    int ops, runs, reps;
};

bool same(float got, float want)
{
    return std::fabs(got - want) <= 1e-5f * (1 + std::fabs(want));
}

/* Median and min ns per op per run at `workers`, or -1 with a message. */
int bench_graph(int workers, const sizes &z, double *median, double *min)
{
    int n = z.ops;
    struct chain_op *ops = chain_make(n);
    std::vector<float> vals(static_cast<size_t>(n) + 1);
    std::vector<double> t(static_cast<size_t>(z.reps));
    if (!ops) {
        std::fprintf(stderr, "exec_taskflow: out of memory\n");
        return -1;
    }
    float want = chain_expect(ops, n);
    int rc = 0;
    try {
        tf::Executor executor(static_cast<size_t>(workers));
        tf::Taskflow graph;
        std::vector<tf::Task> task(static_cast<size_t>(n) + 1);
        float *v = vals.data();
        for (int i = 1; i <= n; i++) {
            const struct chain_op *o = &ops[i];
            task[static_cast<size_t>(i)] = graph.emplace([o, v] { chain_step(o, v); });
            if (o->a >= 1)
                task[static_cast<size_t>(o->a)].precede(task[static_cast<size_t>(i)]);
            if (o->b >= 1)
                task[static_cast<size_t>(o->b)].precede(task[static_cast<size_t>(i)]);
        }
        /* Repetition -1 is the warm-up (the first run allocates). */
        for (int r = -1; r < z.reps && rc == 0; r++) {
            double t0 = bench_now();
            for (int k = 0; k < z.runs; k++) {
                vals[0] = FEED_VALUE;
                executor.run(graph).wait();
                if (!same(vals[static_cast<size_t>(n)], want)) {
                    std::fprintf(stderr, "exec_taskflow: %d workers: the graph computed %.9g, "
                                 "the serial chain %.9g\n", workers, vals[static_cast<size_t>(n)],
                                 want);
                    rc = -1;
                    break;
                }
            }
            if (r >= 0)
                t[static_cast<size_t>(r)] = (bench_now() - t0) / ((double)z.runs * n);
        }
    } catch (const std::exception &e) {
        std::fprintf(stderr, "exec_taskflow: %s\n", e.what());
        rc = -1;
    }
    std::free(ops);
    if (rc == 0) {
        bench_stats(t.data(), z.reps, median, min);
        *median *= 1e9;
        *min *= 1e9;
    }
    return rc;
}

int positive(const char *s)
{
    char *end;
    long v = std::strtol(s, &end, 10);
    return *s && !*end && v > 0 && v <= 100000000 ? (int)v : -1;
}

int usage(const char *argv0)
{
    std::fprintf(stderr,
                 "usage: %s [--tiny] [--ops N] [--runs K] [--reps R] [--workers 1,2]\n", argv0);
    return 2;
}

} // namespace

int main(int argc, char **argv)
{
    sizes z = {10000, 20, 9};
    int workers[8] = {1, 2}, nw = 2;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
        if (std::strcmp(argv[i], "--tiny") == 0) {
            z = {1000, 3, 2};
        } else if (v && std::strcmp(argv[i], "--workers") == 0) {
            nw = 0;
            for (const char *s = v; *s && nw < 8;) {
                char *end;
                long w = std::strtol(s, &end, 10);
                if (end == s || w < 1 || w > 1024)
                    return usage(argv[0]);
                workers[nw++] = (int)w;
                s = *end == ',' ? end + 1 : end;
                if (*end && *end != ',')
                    return usage(argv[0]);
            }
            i++;
        } else if (v && (!std::strcmp(argv[i], "--ops") || !std::strcmp(argv[i], "--runs") ||
                         !std::strcmp(argv[i], "--reps"))) {
            int n = positive(v);
            if (n < 0 || (!std::strcmp(argv[i], "--reps") && n > 1000))
                return usage(argv[0]);
            (!std::strcmp(argv[i], "--ops") ? z.ops : !std::strcmp(argv[i], "--runs") ? z.runs
                                                                                     : z.reps) = n;
            i++;
        } else {
            return usage(argv[0]);
        }
    }
    if (z.ops < 2 || nw == 0)
        return usage(argv[0]);
    std::printf("Taskflow %d.%d.%d static graph of exec_bench's chain: %d ops, %d runs per "
                "repetition,\n%d repetitions; ns per op per run, median (min); "
                "executor.run(taskflow).wait()\n",
                TF_VERSION / 100000, TF_VERSION / 100 % 1000, TF_VERSION % 100, z.ops, z.runs,
                z.reps);
    std::printf("%7s %14s\n", "workers", "taskflow");
    for (int k = 0; k < nw; k++) {
        double med, min;
        if (bench_graph(workers[k], z, &med, &min) < 0)
            return 1;
        char cell[40];
        std::snprintf(cell, sizeof cell, "%.0f (%.0f)", med, min);
        std::printf("%7d %14s\n", workers[k], cell);
        std::printf("graph\ttaskflow\t%d\t%d\t%.1f\t%.1f\n", workers[k], z.ops, med, min);
        std::fflush(stdout);
    }
    return 0;
}
