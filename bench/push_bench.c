/* The cost of vq_push itself: nanoseconds per push from one pushing thread
 * (the hot path a single-threaded caller pays), for ops of 1, 2, 4 and 8
 * written vars, and the throughput of 1, 2 and 4 threads pushing at once on
 * shared vars. Ops are empty; a push is timed from the call to its return,
 * in batches of 2048 (under the throttle's 4096) followed by vq_wait_all
 * outside the timing, so that the pusher never helps the workers.
 *
 * Public API only: build it against another libvarq (an older commit, say)
 * to compare the two in one run; the difference is the change's cost.
 *   usage: push_bench [--ops N] [--reps R] [--max-pushers P] [--tiny]
 * (--max-pushers 1 for a libvarq older than the fix of concurrent pushers,
 * where several pushers could deadlock.)
 * Output: "push <vars> <ns per push, median> <min>" (time inside vq_push)
 *     and "pushers <threads> <vars> <ns per op, median> <min>" (wall time of
 *     pushing and running all ops, threads pushing ops / threads each). */
#define _POSIX_C_SOURCE 200809L
#include <varq/varq.h>
#include "measure.h" /* bench_now, bench_median, bench_stats */

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NVARS 64
#define BATCH 2048

static int empty(void *arg, const vq_exec_ctx *x)
{
    (void)arg;
    (void)x;
    return 0;
}

struct pusher {
    vq_engine *e;
    vq_var **vars;
    long ops;
    int nvars, id;
    double seconds; /* inside vq_push */
    int rc;
};

/* Op i writes nvars vars in a stride over the pool, so ops overlap and
 * queue behind each other as a program's ops do. */
static void *push_ops(void *arg)
{
    struct pusher *p = arg;
    vq_var *w[8];
    p->seconds = 0;
    for (long done = 0; done < p->ops && p->rc == 0;) {
        long n = p->ops - done < BATCH ? p->ops - done : BATCH;
        double t0 = bench_now();
        for (long i = done; i < done + n; i++) {
            for (int k = 0; k < p->nvars; k++)
                w[k] = p->vars[(i * 3 + k * 7 + p->id * 5) % NVARS];
            vq_task t = {.fn = empty, .writes = w, .nwrites = p->nvars, .name = "empty"};
            if (vq_push(p->e, &t) < 0)
                p->rc = -1;
        }
        p->seconds += bench_now() - t0;
        done += n;
        if (p->id == 0 && vq_wait_all(p->e) < 0) /* the only pusher: outside the timing */
            p->rc = -1;
    }
    return NULL;
}

/* ns per push over reps runs of threads pushers; median and min. Not wall:
 * the time inside vq_push of one pusher; wall: the wall time of pushing and
 * running everything. */
static int measure(int threads, int nvars, long ops, int reps, bool wall, double *median,
                   double *min)
{
    double t[32];
    for (int r = 0; r < reps; r++) {
        vq_engine *e;
        vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
        if (vq_engine_new(&e, &o) < 0)
            return -1;
        vq_var *vars[NVARS];
        for (int i = 0; i < NVARS; i++)
            vars[i] = vq_var_new(e, "v");
        struct pusher p[4];
        pthread_t th[4];
        double t0 = bench_now();
        for (int i = 0; i < threads; i++) {
            p[i] = (struct pusher){e, vars, ops / threads, nvars, wall ? i + 1 : 0, 0, 0};
            pthread_create(&th[i], NULL, push_ops, &p[i]);
        }
        int rc = 0;
        for (int i = 0; i < threads; i++) {
            pthread_join(th[i], NULL);
            rc |= p[i].rc;
        }
        double secs = p[0].seconds;
        if (vq_wait_all(e) < 0)
            rc = -1;
        if (wall)
            secs = bench_now() - t0;
        vq_engine_free(e);
        if (rc)
            return -1;
        t[r] = secs * 1e9 / (double)ops;
    }
    bench_stats(t, reps, median, min);
    return 0;
}

int main(int argc, char **argv)
{
    long ops = 1000000;
    int reps = 7, max_pushers = 4;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--ops") == 0 && i + 1 < argc) {
            ops = atol(argv[++i]);
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--max-pushers") == 0 && i + 1 < argc) {
            max_pushers = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--tiny") == 0) {
            ops = 20000;
            reps = 1;
        } else {
            fprintf(stderr, "usage: %s [--ops N] [--reps R] [--max-pushers P] [--tiny]\n",
                    argv[0]);
            return 2;
        }
    }
    if (ops < 4 || reps < 1 || reps > 32 || max_pushers < 1 || max_pushers > 4) {
        fprintf(stderr, "push_bench: --ops at least 4, --reps in 1..32, --max-pushers 1..4\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    static const int nvars[] = {1, 2, 4, 8};
    for (size_t i = 0; i < sizeof nvars / sizeof *nvars; i++) {
        double med, min;
        if (measure(1, nvars[i], ops, reps, false, &med, &min) < 0) {
            fprintf(stderr, "push_bench: %s\n", vq_errmsg());
            return 1;
        }
        printf("push\t%d\t%.1f\t%.1f\n", nvars[i], med, min);
    }
    for (int threads = 1; threads <= max_pushers; threads *= 2) {
        double med, min;
        if (measure(threads, 2, ops, reps, true, &med, &min) < 0) {
            fprintf(stderr, "push_bench: %s\n", vq_errmsg());
            return 1;
        }
        printf("pushers\t%d\t2\t%.1f\t%.1f\n", threads, med, min);
    }
    return 0;
}
