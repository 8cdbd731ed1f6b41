/* The random serial-equivalence workloads as a plain program: no test
 * framework, public API only. It is the engine's ThreadSanitizer test
 * (Criterion cannot start under TSan: Snaipe/Criterion#274), and
 * scripts/test.sh also builds it outside the tree against varq.pc.
 *
 * It also runs the workload with GPU ops on the host-emulated stream
 * backend (two devices; it sets VARQ_GPU_BACKEND and VARQ_GPU_EMUL_DEVICES),
 * with a fifth of the ops.
 *
 * usage: engine_stress [ops per run]   (VARQ_TEST_SEED replays a seed) */
#define _POSIX_C_SOURCE 200809L /* setenv, when built outside the tree with -std=c11 */
#include "workload.h"

#include <varq/varq.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- freeing an engine while async ops are finished by other threads ---- */

static atomic_long finished;

struct later {
    vq_done *done;
    pthread_t thread;
};

static void *finish_it(void *arg)
{
    struct later *l = arg;
    atomic_fetch_add(&finished, 1);
    vq_done_finish(l->done, 0);
    return NULL;
}

static void async_later(void *arg, const vq_exec_ctx *x, vq_done *done)
{
    (void)x;
    struct later *l = arg;
    l->done = done;
    pthread_create(&l->thread, NULL, finish_it, l);
}

static int count_op(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    atomic_fetch_add((atomic_long *)arg, 1);
    return 0;
}

/* Pushes sync and async ops on shared vars, creates and frees vars as it
 * goes, then frees the engine at once: every op must have run. */
static int free_with_pending(int workers)
{
    enum { NOPS = 4000, NASYNC = 64, NV = 16 };
    static struct later later[NASYNC];
    atomic_long ran = 0;
    atomic_store(&finished, 0);
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = workers};
    vq_engine *e;
    if (vq_engine_new(&e, &o) < 0)
        return -1;
    vq_var *v[NV];
    for (int i = 0; i < NV; i++)
        v[i] = vq_var_new(e, "v");
    int a = 0;
    for (int i = 0; i < NOPS; i++) {
        vq_var *r = v[(i * 7) % NV], *w = v[(i * 3 + 1) % NV];
        vq_task t = {.reads = &r, .nreads = 1, .writes = &w, .nwrites = w != r};
        if (i % (NOPS / NASYNC) == 0 && a < NASYNC) {
            t.async_fn = async_later;
            t.arg = &later[a++];
        } else {
            t.fn = count_op;
            t.arg = &ran;
        }
        if (vq_push(e, &t) < 0)
            return -1;
        if (i % 97 == 0) {
            int k = i % NV;
            if (vq_var_free(e, v[k]) < 0)
                return -1;
            v[k] = vq_var_new(e, "v");
        }
    }
    vq_engine_free(e);
    for (int i = 0; i < a; i++)
        pthread_join(later[i].thread, NULL);
    if (atomic_load(&ran) != NOPS - a || atomic_load(&finished) != a) {
        fprintf(stderr, "engine_stress: free_with_pending(%d): %ld sync and %ld async ops ran\n",
                workers, atomic_load(&ran), atomic_load(&finished));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    int nops = argc > 1 ? atoi(argv[1]) : workload_ops(20000);
    uint64_t seed = workload_seed();
    setenv("VARQ_GPU_BACKEND", "emulated", 1);
    setenv("VARQ_GPU_EMUL_DEVICES", "2", 1);
    struct {
        int kind, workers;
        unsigned flags;
    } runs[] = {{VQ_ENGINE_THREADED, 1, 0}, {VQ_ENGINE_THREADED, 2, 0},
                {VQ_ENGINE_THREADED, 8, 0}, {VQ_ENGINE_THREADED, 3, VQ_ENGINE_PROFILE},
                {VQ_ENGINE_NAIVE, 1, 0}, {VQ_ENGINE_THREADED, 2, WORKLOAD_GPU},
                {VQ_ENGINE_THREADED, 4, WORKLOAD_GPU | VQ_ENGINE_PROFILE},
                {VQ_ENGINE_NAIVE, 1, WORKLOAD_GPU}};
    int failed = 0;
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        char msg[256];
        long ran = 0;
        bool gpu = runs[i].flags & WORKLOAD_GPU;
        int n = gpu ? nops / 5 : nops;
        if (workload_check(runs[i].kind, runs[i].workers, runs[i].flags, seed + i, n, &ran, msg,
                           sizeof msg) < 0) {
            fprintf(stderr, "engine_stress: %s\n", msg);
            failed = 1;
        } else {
            printf("%s engine, %d workers%s%s: %d steps, %ld ops ran, same as serial (seed %llu)\n",
                   runs[i].kind == VQ_ENGINE_NAIVE ? "naive" : "threaded", runs[i].workers,
                   runs[i].flags & VQ_ENGINE_PROFILE ? ", profiling" : "",
                   gpu ? ", GPU ops on 2 emulated devices" : "", n, ran,
                   (unsigned long long)(seed + i));
        }
    }
    for (int w = 1; w <= 4; w *= 2)
        for (int rep = 0; rep < 20; rep++)
            if (free_with_pending(w) < 0) {
                fprintf(stderr, "engine_stress: freeing an engine with pending ops failed\n");
                failed = 1;
                break;
            }
    if (!failed)
        printf("engine freed with pending sync and async ops: nothing lost\n");
    return failed;
}
