/* The random serial-equivalence workloads as a plain program: no test
 * framework, public API only. It is the engine's ThreadSanitizer test
 * (Criterion cannot start under TSan: Snaipe/Criterion#274), and
 * scripts/test.sh also builds it outside the tree against varq.pc.
 *
 * usage: engine_stress [ops per run]   (VARQ_TEST_SEED replays a seed) */
#include "workload.h"

#include <varq/varq.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int nops = argc > 1 ? atoi(argv[1]) : workload_ops(20000);
    uint64_t seed = workload_seed();
    struct {
        int kind, workers;
        unsigned flags;
    } runs[] = {{VQ_ENGINE_THREADED, 1, 0}, {VQ_ENGINE_THREADED, 2, 0},
                {VQ_ENGINE_THREADED, 8, 0}, {VQ_ENGINE_THREADED, 3, VQ_ENGINE_PROFILE},
                {VQ_ENGINE_NAIVE, 1, 0}};
    int failed = 0;
    for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
        char msg[256];
        long ran = 0;
        if (workload_check(runs[i].kind, runs[i].workers, runs[i].flags, seed + i, nops, &ran, msg,
                           sizeof msg) < 0) {
            fprintf(stderr, "engine_stress: %s\n", msg);
            failed = 1;
        } else {
            printf("%s engine, %d workers%s: %d steps, %ld ops ran, same as serial (seed %llu)\n",
                   runs[i].kind == VQ_ENGINE_NAIVE ? "naive" : "threaded", runs[i].workers,
                   runs[i].flags ? ", profiling" : "", nops, ran, (unsigned long long)(seed + i));
        }
    }
    return failed;
}
