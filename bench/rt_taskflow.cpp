/* Taskflow's side of the engine benchmarks (bench.h): every workload as
 * Taskflow's dynamic tasks on one tf::Executor of `workers` threads, pushed
 * from the main thread (not one of the workers), as varq's are.
 *
 * Taskflow has no data: ordering comes only from the tasks a new task is
 * told to wait for. So the dependent workloads keep, per var, the last
 * writer and the readers since it (what varq's engine keeps for the user),
 * and each task waits for the last writer of what it reads and, for what it
 * writes, the readers since the last write (or that write): the same graph
 * as varq's reads and writes make. Those tasks are made with
 * tf::Executor::silent_dependent_async (dependent async tasks without a
 * future); independent tasks with silent_async, the cheapest submission
 * Taskflow has. Each clock runs from the first submission to the end of
 * wait_for_all; the handles still held are dropped after it. */
#include <taskflow/taskflow.hpp>

#include <cstdio>
#include <exception>
#include <vector>

#include "bench.h"

static tf::Executor *executor;
static char description[160];

static int tf_init(int workers)
{
    try {
        executor = new tf::Executor(static_cast<size_t>(workers));
    } catch (const std::exception &e) {
        std::fprintf(stderr, "taskflow: tf::Executor(%d): %s\n", workers, e.what());
        return -1;
    }
    if (executor->num_workers() != static_cast<size_t>(workers)) {
        std::fprintf(stderr, "taskflow: asked for %d workers, got %zu\n", workers,
                     executor->num_workers());
        return -1;
    }
    /* The first tasks of each worker allocate (its queue, the node pool):
     * paid here, untimed, as the other runtimes pay theirs at init. */
    tf::AsyncTask prev;
    long sink = 0;
    for (int k = 0; k < 4096; k++)
        prev = executor->silent_dependent_async([&sink] { sink++; }, prev);
    for (int k = 0; k < 4096; k++)
        executor->silent_async([] {});
    executor->wait_for_all();
    if (sink != 4096) {
        std::fprintf(stderr, "taskflow: wrong warm-up result\n");
        return -1;
    }
    std::snprintf(description, sizeof description,
                  "Taskflow %d.%d.%d, tf::Executor(%d); independent: silent_async, "
                  "others: silent_dependent_async",
                  TF_VERSION / 100000, TF_VERSION / 100 % 1000, TF_VERSION % 100, workers);
    return 0;
}

static void tf_fini(void)
{
    delete executor;
    executor = nullptr;
}

static const char *tf_describe(void)
{
    return description;
}

/* Runs one workload's submissions (f) and waits for all; seconds, or -1. */
template <typename F> static double timed(const char *what, F &&f)
{
    try {
        double t0 = bench_now();
        f();
        executor->wait_for_all();
        return bench_now() - t0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "taskflow: %s: %s\n", what, e.what());
        executor->wait_for_all();
        return -1;
    }
}

static double tf_independent(long n, unsigned char *done)
{
    return timed("independent", [=] {
        for (long i = 0; i < n; i++)
            executor->silent_async([=] { bench_independent(done, i); });
    });
}

static double tf_chain(long n, uint64_t *x)
{
    tf::AsyncTask prev; /* empty: the first task waits for nothing */
    return timed("chain", [&] {
        for (long i = 0; i < n; i++)
            prev = executor->silent_dependent_async([x] { bench_chain(x); }, prev);
    });
}

static double tf_fanout(long rounds, int readers, uint64_t *x, uint64_t *sums)
{
    /* the previous round's readers: the next writer waits for them */
    std::vector<tf::AsyncTask> rd;
    rd.reserve(static_cast<size_t>(readers));
    tf::AsyncTask w;
    return timed("fanout", [&] {
        for (long r = 0; r < rounds; r++) {
            if (rd.empty())
                w = executor->silent_dependent_async([x] { bench_fan_write(x); }, w);
            else
                w = executor->silent_dependent_async([x] { bench_fan_write(x); }, rd.begin(),
                                                     rd.end());
            rd.clear();
            for (int j = 0; j < readers; j++)
                rd.push_back(
                    executor->silent_dependent_async([=] { bench_fan_read(x, sums, j); }, w));
        }
    });
}

/* Per var: its last writer and the readers since (the user's side of a
 * runtime without data). deps() fills what a task reading `reads` and
 * writing `write` must wait for; add() records the task. */
struct tracker {
    std::vector<tf::AsyncTask> writer;
    std::vector<std::vector<tf::AsyncTask>> readers;
    std::vector<tf::AsyncTask> deps;

    explicit tracker(int nvars) : writer(static_cast<size_t>(nvars)),
                                  readers(static_cast<size_t>(nvars))
    {
    }

    void dep(const tf::AsyncTask &t)
    {
        if (t.empty())
            return;
        for (const tf::AsyncTask &d : deps)
            if (d.hash_value() == t.hash_value())
                return;
        deps.push_back(t);
    }

    void collect(const int *reads, int nreads, int write)
    {
        deps.clear();
        for (int k = 0; k < nreads; k++)
            dep(writer[static_cast<size_t>(reads[k])]);
        std::vector<tf::AsyncTask> &rw = readers[static_cast<size_t>(write)];
        if (rw.empty())
            dep(writer[static_cast<size_t>(write)]);
        for (const tf::AsyncTask &t : rw)
            dep(t);
    }

    void add(const tf::AsyncTask &t, const int *reads, int nreads, int write)
    {
        for (int k = 0; k < nreads; k++)
            readers[static_cast<size_t>(reads[k])].push_back(t);
        readers[static_cast<size_t>(write)].clear();
        writer[static_cast<size_t>(write)] = t;
    }
};

static double tf_random(long n, int nvars, const struct bench_triple *t, uint64_t *vars)
{
    tracker tr(nvars);
    return timed("random", [&] {
        for (long i = 0; i < n; i++) {
            int reads[2] = {t[i].a, t[i].b};
            tr.collect(reads, 2, t[i].c);
            tf::AsyncTask task = executor->silent_dependent_async(
                [=] { bench_random(vars, t, i); }, tr.deps.begin(), tr.deps.end());
            tr.add(task, reads, 2, t[i].c);
        }
    });
}

/* Points of the two rows as vars: row s's point i is var (s % 2) * width + i,
 * as bench.h lays out the grid. */
static double tf_stencil(int width, int steps, long grain, double *grid)
{
    tracker tr(2 * width);
    return timed("stencil", [&] {
        for (int s = 1; s <= steps; s++)
            for (int i = 0; i < width; i++) {
                int reads[3], nr = 0;
                for (int k = i - 1; k <= i + 1; k++)
                    if (k >= 0 && k < width)
                        reads[nr++] = ((s - 1) % 2) * width + k;
                int write = (s % 2) * width + i;
                tr.collect(reads, nr, write);
                tf::AsyncTask task = executor->silent_dependent_async(
                    [=] { bench_stencil(grid, width, s, i, grain); }, tr.deps.begin(),
                    tr.deps.end());
                tr.add(task, reads, nr, write);
            }
    });
}

static const struct bench_rt bench_rt_taskflow = {
    "taskflow", tf_init, tf_fini, tf_describe, tf_independent, tf_chain, tf_fanout, tf_random,
    tf_stencil,
};

int main(int argc, char **argv)
{
    const struct bench_rt *rts[] = {&bench_rt_taskflow};
    return bench_main(argc, argv, rts, 1);
}
