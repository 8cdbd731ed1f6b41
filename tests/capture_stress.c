/* Capture stress without a test framework, so that it runs under
 * ThreadSanitizer too (Criterion cannot): several threads capture on one
 * engine at once. Each updates its own tensor in place through captured
 * segments (with temporaries released mid-segment and host reads that cut),
 * every thread adds to one shared counter in place (so segments of
 * different threads cut each other), and threads read each other's tensors
 * (cuts from outside). At the end every private tensor and the counter must
 * hold exactly what serial execution gives; the threads exit while their
 * capture states are cached (their destructors run). Then one segment
 * with two independent large branches (which eager runs at once on two
 * workers) must give the bits of the same calls run eagerly on another
 * engine, step after step. Usage:
 * capture_stress [iterations per thread]. */
#include <varq/varq.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define THREADS 4
#define N 16

static vq_engine *engine;
static vq_tensor *counter;      /* f64 [1] */
static vq_tensor *mine[THREADS]; /* f64 [N] */
static atomic_int failures;
static int iters = 300;

static void check(int ok, const char *what, int who)
{
    if (!ok) {
        fprintf(stderr, "capture_stress: thread %d: %s (%s)\n", who, what, vq_errmsg());
        atomic_fetch_add(&failures, 1);
    }
}

static void *worker(void *arg)
{
    int me = (int)(intptr_t)arg;
    unsigned seed = 1234u + (unsigned)me;
    vq_attr one = VQ_ATTR_F("bias", 1), two = VQ_ATTR_F("scale", 2);
    vq_attr half = VQ_ATTR_F("scale", 0.5);
    double expect = me; /* every element of mine[me] */
    for (int it = 0; it < iters; it++) {
        check(vq_capture_begin(engine) == 0, "begin", me);
        /* mine = (2 * mine) * 0.5 + 1, through two temporaries */
        vq_tensor *t = NULL, *u = NULL;
        check(vq_op_run(engine, "scale", &mine[me], 1, &t, 1, &two, 1) == 0, "scale", me);
        check(vq_op_run(engine, "scale", &t, 1, &u, 1, &half, 1) == 0, "scale", me);
        vq_tensor_release(t);
        check(vq_op_run(engine, "scale", &u, 1, &mine[me], 1, &one, 1) == 0, "scale", me);
        vq_tensor_release(u);
        expect += 1;
        check(vq_op_run(engine, "scale", &counter, 1, &counter, 1, &one, 1) == 0, "count", me);
        int r = rand_r(&seed) % 10;
        if (r == 0) { /* a host read of our own tensor: a cut */
            check(vq_tensor_wait(mine[me]) == 0, "wait", me);
            check(((double *)vq_tensor_data(mine[me]))[N - 1] == expect, "value mid-way", me);
        } else if (r == 1) { /* someone else's: cuts their segment */
            check(vq_tensor_wait(mine[(me + 1) % THREADS]) == 0, "wait other", me);
        }
        check(vq_capture_end(engine) == 0, "end", me);
    }
    vq_capture_stats st;
    check(vq_capture_get_stats(engine, &st) == 0, "stats", me);
    check(st.ops_recorded == (uint64_t)iters * 4, "ops recorded", me);
    check(st.ops_recorded - st.op_hits <= 64, "guards hit after the first steps", me);
    check(vq_tensor_wait(mine[me]) == 0, "final wait", me);
    for (int i = 0; i < N; i++)
        check(((double *)vq_tensor_data(mine[me]))[i] == expect, "final value", me);
    return NULL;
}

/* Two 64x64 matmul -> relu/scale -> in-place sgd branches; w[0], w[1] are
 * updated in place, the returned sum is the caller's. */
static vq_tensor *branches_step(vq_engine *e, vq_tensor *x, vq_tensor **w)
{
    vq_attr lr = VQ_ATTR_F("learning_rate", 0.0625), half = VQ_ATTR_F("scale", 0.5);
    vq_tensor *a = NULL, *c = NULL, *ra = NULL, *sc = NULL, *sum = NULL;
    int rc = vq_op_run(e, "matmul", (vq_tensor *[]){x, w[0]}, 2, &a, 1, NULL, 0);
    rc |= vq_op_run(e, "matmul", (vq_tensor *[]){x, w[1]}, 2, &c, 1, NULL, 0);
    rc |= vq_op_run(e, "relu", &a, 1, &ra, 1, NULL, 0);
    rc |= vq_op_run(e, "scale", &c, 1, &sc, 1, &half, 1);
    rc |= vq_op_run(e, "sgd", (vq_tensor *[]){w[0], ra}, 2, &w[0], 1, &lr, 1);
    rc |= vq_op_run(e, "sgd", (vq_tensor *[]){w[1], sc}, 2, &w[1], 1, &lr, 1);
    rc |= vq_op_run(e, "add", (vq_tensor *[]){ra, sc}, 2, &sum, 1, NULL, 0);
    check(rc == 0, "branches call", -1);
    vq_tensor_release(a);
    vq_tensor_release(c);
    vq_tensor_release(ra);
    vq_tensor_release(sc);
    return sum;
}

static int same_bits(vq_tensor *a, vq_tensor *b)
{
    return vq_tensor_wait(a) == 0 && vq_tensor_wait(b) == 0 &&
           !memcmp(vq_tensor_data(a), vq_tensor_data(b), vq_tensor_nbytes(a));
}

static void branches(int steps)
{
    vq_engine *e[2];
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    vq_tensor *x[2], *w[2][2];
    int64_t sh[2] = {64, 64};
    float v[64 * 64];
    for (int k = 0; k < 2; k++) {
        check(vq_engine_new(&e[k], &o) == 0, "branches engine", -1);
        for (int t = 0; t < 3; t++) {
            for (int i = 0; i < 64 * 64; i++)
                v[i] = (float)((i * 7 + t * 13) % 17) / 17.0f - 0.5f;
            check(vq_tensor_from(t ? &w[k][t - 1] : &x[k], VQ_F32, 2, sh, v) == 0,
                  "branches tensor", -1);
        }
    }
    for (int step = 0; step < steps; step++) {
        vq_tensor *eager = branches_step(e[0], x[0], w[0]);
        check(vq_capture_begin(e[1]) == 0, "branches begin", -1);
        vq_tensor *captured = branches_step(e[1], x[1], w[1]);
        check(vq_capture_end(e[1]) == 0, "branches end", -1);
        check(same_bits(eager, captured), "branches: sum differs from eager", -1);
        check(same_bits(w[0][0], w[1][0]) && same_bits(w[0][1], w[1][1]),
              "branches: weights differ from eager", -1);
        vq_tensor_release(eager);
        vq_tensor_release(captured);
    }
    for (int k = 0; k < 2; k++) {
        vq_tensor_release(x[k]);
        vq_tensor_release(w[k][0]);
        vq_tensor_release(w[k][1]);
        vq_engine_free(e[k]);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1)
        iters = atoi(argv[1]);
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    if (vq_engine_new(&engine, &o) != 0) {
        fprintf(stderr, "capture_stress: engine: %s\n", vq_errmsg());
        return 1;
    }
    int64_t one[1] = {1}, n[1] = {N};
    check(vq_tensor_new(&counter, VQ_F64, 1, one) == 0, "counter", -1);
    for (int k = 0; k < THREADS; k++) {
        double v[N];
        for (int i = 0; i < N; i++)
            v[i] = k;
        check(vq_tensor_from(&mine[k], VQ_F64, 1, n, v) == 0, "tensor", -1);
    }
    for (int round = 0; round < 2; round++) { /* the second round: fresh threads */
        pthread_t th[THREADS];
        for (int k = 0; k < THREADS; k++)
            pthread_create(&th[k], NULL, worker, (void *)(intptr_t)k);
        for (int k = 0; k < THREADS; k++)
            pthread_join(th[k], NULL);
        for (int k = 0; k < THREADS && round == 0; k++) { /* start again from k */
            check(vq_tensor_wait(mine[k]) == 0, "reset", -1);
            for (int i = 0; i < N; i++)
                ((double *)vq_tensor_data(mine[k]))[i] = k;
        }
    }
    check(vq_tensor_wait(counter) == 0, "counter wait", -1);
    long long got = (long long)((double *)vq_tensor_data(counter))[0];
    check(got == 2LL * THREADS * iters, "counter value", -1);
    vq_tensor_release(counter);
    for (int k = 0; k < THREADS; k++)
        vq_tensor_release(mine[k]);
    vq_engine_free(engine);
    branches(iters / 10 + 5);
    int f = atomic_load(&failures);
    printf("capture_stress: %d threads x %d steps x 2 rounds, counter %lld: %s\n", THREADS, iters,
           got, f ? "FAILED" : "ok");
    return f ? 1 : 0;
}
