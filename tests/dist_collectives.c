/* Every communication op of include/varq/dist.h, on whatever number of
 * ranks mpirun starts (the suite runs 2 and 4), for every dtype and sizes
 * from 0 elements up, against a reference each rank computes alone (every
 * rank's input is a known function of its rank). Framework-free: MPI and
 * Criterion's fork do not mix; exit status nonzero on the first mismatch.
 *
 * Usage: dist_collectives [--big]   (--big adds one 64 MiB allreduce,
 * broadcast and allgather of f32). Values are small integers so that sums
 * are exact in any order. All ops of a round are pushed before any wait,
 * so they overlap in the engine and at the communication thread. */
#include "dist_check.h"

#include <varq/dist.h>
#include <varq/varq.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Element i of rank r's input, as a small integer (bool: 0 or 1). */
static int64_t value(int r, int64_t i, int salt, vq_dtype dt)
{
    int64_t v = ((r + 1) * 7 + i * 3 + salt * 5) % 17 - 8;
    return dt == VQ_BOOL ? (v & 1) : v;
}

static void put(void *p, int64_t i, vq_dtype dt, int64_t v)
{
    switch (dt) {
    case VQ_F32: ((float *)p)[i] = (float)v; break;
    case VQ_F64: ((double *)p)[i] = (double)v; break;
    case VQ_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case VQ_I64: ((int64_t *)p)[i] = v; break;
    default: ((uint8_t *)p)[i] = (uint8_t)v; break;
    }
}

static double get(const void *p, int64_t i, vq_dtype dt)
{
    switch (dt) {
    case VQ_F32: return ((const float *)p)[i];
    case VQ_F64: return ((const double *)p)[i];
    case VQ_I32: return ((const int32_t *)p)[i];
    case VQ_I64: return (double)((const int64_t *)p)[i];
    default: return ((const uint8_t *)p)[i];
    }
}

static vq_tensor *make(vq_dtype dt, int64_t n, int r, int salt)
{
    vq_tensor *t;
    CHECK(vq_tensor_new(&t, dt, 1, &n));
    void *p = vq_tensor_data(t);
    for (int64_t i = 0; i < n; i++)
        put(p, i, dt, value(r, i, salt, dt));
    return t;
}

/* The reduction over ranks of element i (salt), as the op computes it. */
static double reduced(int64_t i, int salt, vq_dtype dt, vq_reduce_op op)
{
    int64_t s = 0, m = INT64_MIN;
    for (int r = 0; r < size; r++) {
        int64_t v = value(r, i, salt, dt);
        s += v;
        m = v > m ? v : m;
    }
    if (dt == VQ_BOOL)
        return (double)m; /* or */
    if (op == VQ_REDUCE_MAX)
        return (double)m;
    if (op == VQ_REDUCE_SUM)
        return (double)s;
    switch (dt) { /* MEAN: the division the op does, in the dtype */
    case VQ_F32: return (double)((float)s / (float)size);
    case VQ_F64: return (double)s / size;
    default: return (double)(s / size);
    }
}

static void expect(const char *what, vq_dtype dt, int64_t n, vq_tensor *t, int64_t i,
                   double want)
{
    double got = get(vq_tensor_data(t), i, dt);
    if (got != want && failures++ < 10)
        fprintf(stderr, "rank %d: %s %s n=%lld: element %lld is %g, expected %g\n", rank, what,
                vq_dtype_name(dt), (long long)n, (long long)i, got, want);
}

struct round {
    vq_tensor *ar[3], *ar_out, *bc, *ag_in, *ag_out, *rs_in, *rs_out, *snd, *rcv;
};

/* Pushes every op for dtype dt and n elements per rank. */
static void push_round(vq_dist *d, vq_dtype dt, int64_t n, struct round *R)
{
    memset(R, 0, sizeof *R);
    for (int op = 0; op < 3; op++) {
        if (op == VQ_REDUCE_MEAN && dt == VQ_BOOL)
            continue;
        R->ar[op] = make(dt, n, rank, op);
        if (op == 1) { /* out of place once */
            R->ar_out = make(dt, n, rank, 99);
            CHECK(vq_dist_allreduce(d, R->ar[op], R->ar_out, (vq_reduce_op)op));
        } else {
            CHECK(vq_dist_allreduce(d, R->ar[op], R->ar[op], (vq_reduce_op)op));
        }
    }
    R->bc = make(dt, n, rank, 3);
    CHECK(vq_dist_broadcast(d, R->bc, size - 1));
    R->ag_in = make(dt, n, rank, 4);
    R->ag_out = make(dt, n * size, rank, 98);
    CHECK(vq_dist_allgather(d, R->ag_in, R->ag_out));
    R->rs_in = make(dt, n * size, rank, 5);
    R->rs_out = make(dt, n, rank, 97);
    CHECK(vq_dist_reduce_scatter(d, R->rs_in, R->rs_out, VQ_REDUCE_SUM));
    R->snd = make(dt, n, rank, 6);
    R->rcv = make(dt, n, rank, 96);
    CHECK(vq_dist_send(d, R->snd, (rank + 1) % size, (int)dt));
    CHECK(vq_dist_recv(d, R->rcv, (rank + size - 1) % size, (int)dt));
}

static void check_round(vq_dtype dt, int64_t n, struct round *R)
{
    static const char *const names[] = {"allreduce(sum)", "allreduce(mean)", "allreduce(max)"};
    for (int op = 0; op < 3; op++) {
        if (!R->ar[op])
            continue;
        vq_tensor *t = op == 1 ? R->ar_out : R->ar[op];
        CHECK(vq_tensor_wait(t));
        for (int64_t i = 0; i < n; i++)
            expect(names[op], dt, n, t, i, reduced(i, op, dt, (vq_reduce_op)op));
        if (op == 1) /* the input of an out-of-place allreduce is left as it was */
            for (int64_t i = 0; i < n; i++)
                expect("allreduce input", dt, n, R->ar[1], i, (double)value(rank, i, 1, dt));
    }
    CHECK(vq_tensor_wait(R->bc));
    for (int64_t i = 0; i < n; i++)
        expect("broadcast", dt, n, R->bc, i, (double)value(size - 1, i, 3, dt));
    CHECK(vq_tensor_wait(R->ag_out));
    for (int r = 0; r < size; r++)
        for (int64_t i = 0; i < n; i++)
            expect("allgather", dt, n, R->ag_out, r * n + i, (double)value(r, i, 4, dt));
    CHECK(vq_tensor_wait(R->rs_out));
    for (int64_t i = 0; i < n; i++)
        expect("reduce_scatter", dt, n, R->rs_out, i,
               reduced(rank * n + i, 5, dt, VQ_REDUCE_SUM));
    CHECK(vq_tensor_wait(R->snd));
    CHECK(vq_tensor_wait(R->rcv));
    for (int64_t i = 0; i < n; i++) {
        expect("send (left as it was)", dt, n, R->snd, i, (double)value(rank, i, 6, dt));
        expect("recv", dt, n, R->rcv, i, (double)value((rank + size - 1) % size, i, 6, dt));
    }
    vq_tensor *all[] = {R->ar[0], R->ar[1], R->ar[2], R->ar_out, R->bc, R->ag_in, R->ag_out,
                        R->rs_in, R->rs_out, R->snd, R->rcv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        vq_tensor_release(all[i]);
}

/* 64 MiB of f32 through allreduce, broadcast and allgather (the gather's
 * output is size times that). */
static void big(vq_dist *d)
{
    int64_t n = (64 << 20) / 4;
    vq_tensor *a = make(VQ_F32, n, rank, 0), *b = make(VQ_F32, n, rank, 3);
    int64_t gn = n / size;
    vq_tensor *gi = make(VQ_F32, gn, rank, 4), *go = make(VQ_F32, gn * size, rank, 98);
    CHECK(vq_dist_allreduce(d, a, a, VQ_REDUCE_SUM));
    CHECK(vq_dist_broadcast(d, b, 0));
    CHECK(vq_dist_allgather(d, gi, go));
    CHECK(vq_tensor_wait(a));
    CHECK(vq_tensor_wait(b));
    CHECK(vq_tensor_wait(go));
    for (int64_t i = 0; i < n; i += 4099) {
        expect("allreduce(sum) 64 MiB", VQ_F32, n, a, i, reduced(i, 0, VQ_F32, VQ_REDUCE_SUM));
        expect("broadcast 64 MiB", VQ_F32, n, b, i, (double)value(0, i, 3, VQ_F32));
    }
    for (int64_t i = 0; i < gn * size; i += 4099)
        expect("allgather 64 MiB", VQ_F32, gn, go, i,
               (double)value((int)(i / gn), i % gn, 4, VQ_F32));
    vq_tensor_release(a);
    vq_tensor_release(b);
    vq_tensor_release(gi);
    vq_tensor_release(go);
}

int main(int argc, char **argv)
{
    bool with_big = argc > 1 && !strcmp(argv[1], "--big");
    vq_engine *e;
    vq_dist *d;
    CHECK(vq_engine_new(&e, NULL));
    CHECK(vq_dist_new(&d, e, NULL));
    rank = vq_dist_rank(d);
    size = vq_dist_size(d);
    if (vq_dist_size(d) < 2 || rank < 0 || vq_dist_id(d) < 1) {
        fprintf(stderr, "dist_collectives: run it under mpirun with 2 or more ranks\n");
        return 1;
    }
    static const int64_t sizes[] = {0, 1, 7, 1000, 1 << 17};
    for (int dt = 0; dt <= VQ_BOOL; dt++) { /* the dtypes reductions take (dist.h) */
        struct round R[sizeof sizes / sizeof sizes[0]];
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) /* all in flight */
            push_round(d, (vq_dtype)dt, sizes[s], &R[s]);
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            check_round((vq_dtype)dt, sizes[s], &R[s]);
    }
    if (with_big)
        big(d);
    /* bad arguments are refused before anything is pushed */
    vq_tensor *x = make(VQ_F32, 4, rank, 0), *y = make(VQ_F64, 4, rank, 0);
    if (vq_dist_allreduce(d, x, y, VQ_REDUCE_SUM) != VQ_EINVAL ||
        vq_dist_broadcast(d, x, size) != VQ_EINVAL || vq_dist_send(d, x, -1, 0) != VQ_EINVAL ||
        vq_dist_recv(d, x, 0, 40000) != VQ_EINVAL || vq_dist_allgather(d, x, x) != VQ_EINVAL) {
        fprintf(stderr, "rank %d: a bad argument was accepted\n", rank);
        failures++;
    }
    vq_tensor_release(x);
    vq_tensor_release(y);
    CHECK(vq_wait_all(e));
    int rc = vq_dist_free(d);
    vq_engine_free(e);
    if (rc < 0 || failures) {
        fprintf(stderr, "rank %d: FAILED (%d mismatches)\n", rank, failures);
        return 1;
    }
    if (rank == 0)
        printf("dist_collectives: every op, %d dtypes, %d ranks: ok\n", VQ_BOOL + 1, size);
    return 0;
}
