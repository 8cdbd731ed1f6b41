/* Worker placement: does a run take twice as long because two busy workers
 * share one CPU? For each VARQ_CPU_BIND mode (none, spread, close) it runs
 * the same CPU-bound workload REPS times, each on a fresh engine with as
 * many workers as the process may use CPUs (independent tasks of a fixed
 * amount of arithmetic, several per worker), and prints the distribution
 * of run times — min, p10, median, p90, max — and how many runs were slow
 * (over 1.5x the fastest run of all modes): the bimodal runs #17 measured
 * are the slow ones. With --load, two `nice -n 10` busy loops run beside
 * it (a shared machine), and the same is printed.
 *
 * usage: bind_bench [--reps N] [--load] */
#include <varq/varq.h>
#include "measure.h" /* bench_now, bench_median, bench_stats */

#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define TASKS_PER_WORKER 16
#define WORK 400000 /* iterations of the task's loop: about 0.3 ms */

/* Each task stores its result in its own slot (arg), so that the loop is
 * not optimized away and no two tasks write one place. */
static int task(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    double a = 1.0;
    for (int i = 0; i < WORK; i++)
        a = a * 1.0000001 + 1e-9;
    *(volatile double *)arg = a;
    return 0;
}

/* One run: a fresh engine, the tasks, their end. Seconds. */
static double one_run(int bind, int workers)
{
    vq_engine *e;
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = workers, .cpu_bind = bind};
    if (vq_engine_new(&e, &o) < 0) {
        fprintf(stderr, "bind_bench: %s\n", vq_errmsg());
        exit(1);
    }
    double *slots = calloc((size_t)(TASKS_PER_WORKER * workers), sizeof *slots);
    if (!slots) {
        fprintf(stderr, "bind_bench: out of memory\n");
        exit(1);
    }
    double t0 = bench_now();
    for (int i = 0; i < TASKS_PER_WORKER * workers; i++) {
        vq_task t = {.fn = task, .arg = &slots[i]};
        if (vq_push(e, &t) < 0) {
            fprintf(stderr, "bind_bench: %s\n", vq_errmsg());
            exit(1);
        }
    }
    vq_wait_all(e);
    double dt = bench_now() - t0;
    vq_engine_free(e);
    free(slots);
    return dt;
}

static pid_t busy_loop(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (setpriority(PRIO_PROCESS, 0, 10) < 0) {
        }
        volatile unsigned long x = 0;
        for (;;)
            x++;
    }
    return pid;
}

int main(int argc, char **argv)
{
    int reps = 50;
    int load = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--load"))
            load = 1;
        else {
            fprintf(stderr, "usage: %s [--reps N] [--load]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1)
        reps = 1;
    cpu_set_t allowed;
    int workers = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : 2;
    static const struct {
        const char *name;
        int bind;
    } modes[] = {{"none", VQ_CPU_BIND_NONE}, {"spread", VQ_CPU_BIND_SPREAD},
                 {"close", VQ_CPU_BIND_CLOSE}};
    enum { NMODES = 3 };
    double *t[NMODES];
    pid_t busy[2] = {0, 0};
    if (load)
        for (int i = 0; i < 2; i++)
            busy[i] = busy_loop();
    one_run(VQ_CPU_BIND_NONE, workers); /* warm-up */
    for (int m = 0; m < NMODES; m++)
        t[m] = malloc((size_t)reps * sizeof *t[m]);
    /* interleaved, so that a change of the machine's load hits every mode */
    for (int r = 0; r < reps; r++)
        for (int m = 0; m < NMODES; m++)
            t[m][r] = one_run(modes[m].bind, workers);
    for (int i = 0; i < 2; i++)
        if (busy[i] > 0) {
            kill(busy[i], SIGKILL);
            waitpid(busy[i], NULL, 0);
        }
    double best = 1e30;
    for (int m = 0; m < NMODES; m++)
        for (int r = 0; r < reps; r++)
            best = t[m][r] < best ? t[m][r] : best;
    printf("worker placement: %d workers on %d allowed CPUs, %d independent tasks of ~%d "
           "iterations, %d runs per mode (interleaved)%s\n",
           workers, workers, TASKS_PER_WORKER * workers, WORK, reps,
           load ? ", two nice-10 busy loops beside it" : "");
    printf("%-8s %8s %8s %8s %8s %8s   slow (> 1.5 x %.1f ms)\n", "bind", "min ms", "p10",
           "median", "p90", "max", best * 1e3);
    for (int m = 0; m < NMODES; m++) {
        bench_sort(t[m], reps);
        int slow = 0;
        for (int r = 0; r < reps; r++)
            slow += t[m][r] > 1.5 * best;
        printf("%-8s %8.1f %8.1f %8.1f %8.1f %8.1f   %d of %d\n", modes[m].name, t[m][0] * 1e3,
               t[m][reps / 10] * 1e3, t[m][reps / 2] * 1e3, t[m][(reps * 9) / 10] * 1e3,
               t[m][reps - 1] * 1e3, slow, reps);
        free(t[m]);
    }
    return 0;
}
