/* Serial equivalence on random workloads (tests/workload.c), on the threaded
 * engine with 1, 2 and 8 workers and on the naive engine.
 *
 * VARQ_TEST_SEED=N replays a seed (every failure names it); VARQ_TEST_OPS=N
 * sets the ops per run (default 350000, 20000 under sanitizers). */
#include "sanitizer.h"
#include "workload.h"

#include <varq/varq.h>

#include <criterion/criterion.h>
#include "leakcheck.h"

TestSuite(engine_random, .fini = leak_check);

#ifdef VQ_TEST_SANITIZER
#define DEFAULT_OPS 20000
#else
#define DEFAULT_OPS 350000
#endif

static void check(int kind, int workers, unsigned flags)
{
    uint64_t seed = workload_seed();
    int nops = workload_ops(DEFAULT_OPS);
    char msg[256];
    long ran = 0;
    /* A seed whose early failures poison most of the workload still has
     * to match the serial model, but checks little: then the next seeds
     * run too (deterministic from the first, so VARQ_TEST_SEED replays),
     * until one runs most of its ops. */
    for (int k = 0; k < 8 && ran <= nops / 2; k++, seed++) {
        int rc = workload_check(kind, workers, flags, seed, nops, &ran, msg, sizeof msg);
        cr_assert_eq(rc, 0, "%s", msg);
        cr_log_info("seed %llu: %ld of %d steps ran", (unsigned long long)seed, ran, nops);
    }
    cr_assert_gt(ran, nops / 2, "8 seeds from %llu: at most %ld of %d ops ran: too few for a "
                                "meaningful check",
                 (unsigned long long)(seed - 8), ran, nops);
}

Test(engine_random, threaded_1_worker_matches_serial, .timeout = 300)
{
    check(VQ_ENGINE_THREADED, 1, 0);
}

Test(engine_random, threaded_2_workers_match_serial, .timeout = 300)
{
    check(VQ_ENGINE_THREADED, 2, 0);
}

Test(engine_random, threaded_8_workers_match_serial, .timeout = 300)
{
    check(VQ_ENGINE_THREADED, 8, 0);
}

Test(engine_random, threaded_with_profiler_matches_serial, .timeout = 300)
{
    check(VQ_ENGINE_THREADED, 2, VQ_ENGINE_PROFILE);
}

Test(engine_random, naive_matches_serial, .timeout = 300)
{
    check(VQ_ENGINE_NAIVE, 1, 0);
}
