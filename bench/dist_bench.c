/* All-reduce through varq's op against MPI_Allreduce called directly, 4 B
 * to 64 MiB of f32, on the ranks mpirun starts:
 *
 *   mpi      MPI_Allreduce(MPI_IN_PLACE) in a loop: the floor
 *   mpi_nb   MPI_Iallreduce + MPI_Wait in a loop: the nonblocking call
 *            varq's thread makes (Open MPI runs it with other algorithms,
 *            libnbc's, than the blocking one)
 *   varq     vq_dist_allreduce in place, then vq_tensor_wait, in a loop:
 *            one op at a time, the latency a host that waits sees
 *   chain    the same ops all pushed at once (each waits for the previous
 *            through the tensor's var), one wait at the end: what an
 *            engine-driven program sees
 *
 * each without the signature exchange (VQ_DIST_NO_CHECK) and, in the
 * column "checked", with it (the default). Times are per op, the slowest
 * rank's, the best of 5 repetitions (the machine may be shared); ratio =
 * mpi time / varq time (the bandwidth ratio); overhead = varq time - mpi
 * time. The goals (issue 18): ratio >= 0.95 at >= 1 MiB,
 * overhead <= 2 us at 4 B.
 *
 * Usage: mpirun -np 2 dist_bench [--tiny] [--max BYTES]   (--tiny: to 4 KiB, once)
 * (tests/mpirun.sh handles the flags mpirun needs here). */
#include <varq/dist.h>
#include <varq/varq.h>

#include <mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank;

#define CHECK(call)                                                                        \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ < 0) {                                                                     \
            fprintf(stderr, "rank %d: %s: %s\n", rank, #call, vq_errmsg());                \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

/* The slowest rank's value. */
static double slowest(double t)
{
    double m;
    MPI_Allreduce(&t, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

static double time_mpi(float *buf, int n, int iters)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++)
        MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return slowest((MPI_Wtime() - t0) / iters);
}

static double time_mpi_nb(float *buf, int n, int iters)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        MPI_Request r;
        MPI_Iallreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
    return slowest((MPI_Wtime() - t0) / iters);
}

static double time_varq(vq_dist *d, vq_tensor *t, int iters, int chained)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        CHECK(vq_dist_allreduce(d, t, t, VQ_REDUCE_SUM));
        if (!chained)
            CHECK(vq_tensor_wait(t));
    }
    CHECK(vq_tensor_wait(t));
    return slowest((MPI_Wtime() - t0) / iters);
}

int main(int argc, char **argv)
{
    int tiny = 0;
    size_t max = (size_t)64 << 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tiny"))
            tiny = 1;
        else if (!strcmp(argv[i], "--max") && i + 1 < argc)
            max = strtoull(argv[++i], NULL, 10);
    }
    if (tiny)
        max = 4 << 10;
    vq_engine *e;
    vq_dist *fast, *checked;
    CHECK(vq_engine_new(&e, NULL));
    CHECK(vq_dist_new_opts(&fast, e, &(vq_dist_opts){.flags = VQ_DIST_NO_CHECK}));
    CHECK(vq_dist_new(&checked, e, NULL));
    rank = vq_dist_rank(fast);
    if (rank == 0)
        printf("allreduce f32 sum on %d ranks, per op (slowest rank)\n"
               "%10s %10s %10s %10s %7s %9s %10s %7s %10s\n",
               vq_dist_size(fast), "bytes", "mpi_us", "mpi_nb_us", "varq_us", "ratio",
               "ovh_us", "chain_us", "ratio", "checked_us");
    for (size_t bytes = 4; bytes <= max; bytes *= 4) {
        int n = (int)(bytes / 4);
        int iters = (int)((size_t)(tiny ? 1 << 20 : 64 << 20) / bytes);
        /* at least 10: a 16 MiB op varies by 10% from one call to the next here */
        iters = iters < 10 ? 10 : iters > (tiny ? 20 : 1000) ? (tiny ? 20 : 1000) : iters;
        int64_t shape = n;
        vq_tensor *t;
        CHECK(vq_tensor_new(&t, VQ_F32, 1, &shape));
        float *raw = malloc(bytes);
        memset(raw, 0, bytes);
        /* warm up both paths (connections, buffers) */
        time_mpi(raw, n, 3);
        time_varq(fast, t, 3, 0);
        double mpi = 1e30, mpi_nb = 1e30, varq = 1e30, chain = 1e30, chk = 1e30;
        /* interleaved: a noisy spell hits every column alike */
        for (int rep = 0; rep < (tiny ? 1 : 5); rep++) {
            mpi = fmin(mpi, time_mpi(raw, n, iters));
            mpi_nb = fmin(mpi_nb, time_mpi_nb(raw, n, iters));
            varq = fmin(varq, time_varq(fast, t, iters, 0));
            chain = fmin(chain, time_varq(fast, t, iters, 1));
            chk = fmin(chk, time_varq(checked, t, iters, 0));
        }
        if (rank == 0)
            printf("%10zu %10.2f %10.2f %10.2f %7.3f %9.2f %10.2f %7.3f %10.2f\n", bytes,
                   1e6 * mpi, 1e6 * mpi_nb, 1e6 * varq, mpi / varq, 1e6 * (varq - mpi),
                   1e6 * chain, mpi / chain, 1e6 * chk);
        fflush(stdout);
        free(raw);
        vq_tensor_release(t);
    }
    CHECK(vq_wait_all(e));
    CHECK(vq_dist_free(checked));
    CHECK(vq_dist_free(fast));
    vq_engine_free(e);
    return 0;
}
