/* Ordering: random programs that mix local ops (vq_op_run add, sub, and a
 * clamp) with communication (allreduce sum and max, broadcast, a ring of
 * send/recv) on a few shared tensors give, on every rank, what a serial
 * model of all ranks gives. Everything is pushed before anything is waited
 * for (a few random waits aside), so the engine reorders freely and only
 * the var queues and the communication order keep the result right.
 * Framework-free (MPI and Criterion's fork do not mix).
 *
 * Usage: dist_order [OPS [ROUNDS]]; VARQ_TEST_SEED=N replays a seed (rank
 * 0's seed is broadcast, and printed on failure). Values are integers
 * clamped to [-1000, 1000], so every sum is exact in any order. */
#include "dist_check.h"

#include <varq/dist.h>
#include <varq/varq.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define K 6  /* shared tensors */
#define M 37 /* elements each */
#define MAXR 16

static uint64_t rng;
static unsigned next(unsigned n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (unsigned)((rng >> 33) % n);
}

static double model[MAXR][K][M];

static double clampd(double v) { return v < -1000 ? -1000 : v > 1000 ? 1000 : v; }

static void run_op(vq_engine *e, const char *type, vq_tensor *a, vq_tensor *b)
{
    vq_tensor *in[2] = {a, b}, *out[1] = {a};
    CHECK(vq_op_run(e, type, in, 2, out, 1, NULL, 0));
}

static int one_round(vq_engine *e, vq_dist *d, int nops, uint64_t seed)
{
    vq_tensor *t[K], *lo, *hi;
    int64_t m = M;
    double los[M], his[M];
    for (int i = 0; i < M; i++) {
        los[i] = -1000;
        his[i] = 1000;
    }
    CHECK(vq_tensor_from(&lo, VQ_F64, 1, &m, los));
    CHECK(vq_tensor_from(&hi, VQ_F64, 1, &m, his));
    for (int r = 0; r < size; r++)
        for (int k = 0; k < K; k++)
            for (int i = 0; i < M; i++)
                model[r][k][i] = (double)((r * 31 + k * 7 + i * 3) % 23 - 11);
    for (int k = 0; k < K; k++)
        CHECK(vq_tensor_from(&t[k], VQ_F64, 1, &m, model[rank][k]));
    rng = seed;
    for (int n = 0; n < nops; n++) {
        int a = (int)next(K), b = (int)next(K);
        switch (next(8)) {
        case 0: case 1: /* local: a += b, clamped */
            run_op(e, "add", t[a], t[b]);
            run_op(e, "minimum", t[a], hi);
            run_op(e, "maximum", t[a], lo);
            for (int r = 0; r < size; r++)
                for (int i = 0; i < M; i++)
                    model[r][a][i] = clampd(model[r][a][i] + model[r][b][i]);
            break;
        case 2: /* local: a -= b */
            run_op(e, "sub", t[a], t[b]);
            run_op(e, "minimum", t[a], hi);
            run_op(e, "maximum", t[a], lo);
            for (int r = 0; r < size; r++)
                for (int i = 0; i < M; i++)
                    model[r][a][i] = clampd(model[r][a][i] - model[r][b][i]);
            break;
        case 3: { /* allreduce sum, clamped after */
            CHECK(vq_dist_allreduce(d, t[a], t[a], VQ_REDUCE_SUM));
            run_op(e, "minimum", t[a], hi);
            run_op(e, "maximum", t[a], lo);
            for (int i = 0; i < M; i++) {
                double s = 0;
                for (int r = 0; r < size; r++)
                    s += model[r][a][i];
                for (int r = 0; r < size; r++)
                    model[r][a][i] = clampd(s);
            }
            break;
        }
        case 4: /* allreduce max into b (out of place) */
            if (a == b)
                break;
            CHECK(vq_dist_allreduce(d, t[a], t[b], VQ_REDUCE_MAX));
            for (int i = 0; i < M; i++) {
                double mx = -1e300;
                for (int r = 0; r < size; r++)
                    mx = model[r][a][i] > mx ? model[r][a][i] : mx;
                for (int r = 0; r < size; r++)
                    model[r][b][i] = mx;
            }
            break;
        case 5: { /* broadcast a from a random root */
            int root = (int)next((unsigned)size);
            CHECK(vq_dist_broadcast(d, t[a], root));
            for (int r = 0; r < size; r++)
                if (r != root)
                    memcpy(model[r][a], model[root][a], sizeof model[r][a]);
            break;
        }
        case 6: { /* ring: a goes to the next rank, into its b */
            if (a == b)
                break;
            int tag = (int)next(4);
            CHECK(vq_dist_send(d, t[a], (rank + 1) % size, tag));
            CHECK(vq_dist_recv(d, t[b], (rank + size - 1) % size, tag));
            double prev[MAXR][M];
            for (int r = 0; r < size; r++)
                memcpy(prev[r], model[r][a], sizeof prev[r]);
            for (int r = 0; r < size; r++)
                memcpy(model[r][b], prev[(r + size - 1) % size], sizeof model[r][b]);
            break;
        }
        default: /* now and then the host looks */
            CHECK(vq_tensor_wait(t[a]));
            for (int i = 0; i < M; i++)
                if (((double *)vq_tensor_data(t[a]))[i] != model[rank][a][i]) {
                    fprintf(stderr, "rank %d: op %d: tensor %d element %d is %g, the model "
                                    "says %g\n",
                            rank, n, a, i, ((double *)vq_tensor_data(t[a]))[i],
                            model[rank][a][i]);
                    return 1;
                }
            break;
        }
    }
    int bad = 0;
    for (int k = 0; k < K; k++) {
        CHECK(vq_tensor_wait(t[k]));
        for (int i = 0; i < M && !bad; i++)
            if (((double *)vq_tensor_data(t[k]))[i] != model[rank][k][i]) {
                fprintf(stderr, "rank %d: at the end tensor %d element %d is %g, the model "
                                "says %g\n",
                        rank, k, i, ((double *)vq_tensor_data(t[k]))[i], model[rank][k][i]);
                bad = 1;
            }
        vq_tensor_release(t[k]);
    }
    vq_tensor_release(lo);
    vq_tensor_release(hi);
    return bad;
}

int main(int argc, char **argv)
{
    int nops = argc > 1 ? atoi(argv[1]) : 400, rounds = argc > 2 ? atoi(argv[2]) : 5;
    vq_engine *e;
    vq_dist *d;
    CHECK(vq_engine_new(&e, NULL));
    CHECK(vq_dist_new(&d, e, NULL));
    rank = vq_dist_rank(d);
    size = vq_dist_size(d);
    if (size < 2 || size > MAXR) {
        fprintf(stderr, "dist_order: run it under mpirun with 2 to %d ranks\n", MAXR);
        return 1;
    }
    /* one seed for every rank: rank 0's, through varq itself */
    const char *env = getenv("VARQ_TEST_SEED");
    int64_t seed = env ? strtoll(env, NULL, 10) : (int64_t)time(NULL), one = 1;
    vq_tensor *st;
    CHECK(vq_tensor_from(&st, VQ_I64, 1, &one, &seed));
    CHECK(vq_dist_broadcast(d, st, 0));
    CHECK(vq_tensor_wait(st));
    seed = *(int64_t *)vq_tensor_data(st);
    vq_tensor_release(st);
    int bad = 0;
    for (int r = 0; r < rounds && !bad; r++)
        bad = one_round(e, d, nops, (uint64_t)seed + (uint64_t)r);
    CHECK(vq_wait_all(e));
    int rc = vq_dist_free(d);
    vq_engine_free(e);
    if (bad || rc < 0) {
        fprintf(stderr, "rank %d: FAILED; replay with VARQ_TEST_SEED=%lld\n", rank,
                (long long)seed);
        return 1;
    }
    if (rank == 0)
        printf("dist_order: %d rounds of %d random ops on %d ranks match the serial model "
               "(seed %lld)\n",
               rounds, nops, size, (long long)seed);
    return 0;
}
