/* Failure behaviour of the dist module, on the ranks mpirun starts:
 *
 *   (default)      an op that failed on rank 1 before an allreduce and a
 *                  send: every rank gets an error naming it from
 *                  vq_tensor_wait (none hangs, none gets garbage as a
 *                  result); mismatched collectives (another element count,
 *                  another kind) fail with VQ_EINVAL on every rank; after
 *                  all of that the communicator still works.
 *   --timeout      rank 1 skips a collective: the other ranks get VQ_EIO
 *                  after the handle's 2 s timeout, the handle is broken and
 *                  vq_dist_free says so. MPI cannot recover: the ranks then
 *                  exit without MPI_Finalize and mpirun reports it; the
 *                  suite checks the line "timeout behaviour: ok".
 *                  Then a gap in a handle's numbering (a dist_ticket op
 *                  whose number no communication op uses, as when a run
 *                  fails between the two): the next op of the handle fails
 *                  with VQ_EIO after its 2 s timeout on every rank instead
 *                  of waiting forever ("gap behaviour: ok" on each rank).
 *                  Then rank 1 skips a 1 MiB all-reduce on a handle without
 *                  checks (which varq may move with the blocking call, once
 *                  every rank is known to be in it): the others still get
 *                  VQ_EIO after 2 s, not a hang ("large skip: ok").
 *   --exit-early   rank 1 exits at once; the others start an allreduce.
 *                  mpirun stops the job with its message (the suite checks
 *                  that it ends, nonzero, well before the time limit).
 *
 * Framework-free (MPI and Criterion's fork do not mix). */
#include "dist_check.h"

#include <varq/dist.h>
#include <varq/varq.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static vq_tensor *ints(int64_t n, int32_t v)
{
    vq_tensor *t;
    CHECK(vq_tensor_new(&t, VQ_I32, 1, &n));
    for (int64_t i = 0; i < n; i++)
        ((int32_t *)vq_tensor_data(t))[i] = v;
    return t;
}

/* A tensor whose producing op failed on rank 1 (an integer division by
 * zero there) and holds 1s elsewhere. */
static vq_tensor *failed_on_rank1(vq_engine *e)
{
    vq_tensor *a = ints(8, 6), *z = ints(8, rank == 1 ? 0 : 6), *q = NULL;
    vq_tensor *in[2] = {a, z};
    CHECK(vq_op_run(e, "div", in, 2, &q, 1, NULL, 0));
    vq_tensor_release(a);
    vq_tensor_release(z);
    return q;
}

/* Is the working communicator still fine? A sum of ranks. */
static void still_works(vq_dist *d, const char *after)
{
    vq_tensor *t = ints(3, rank);
    CHECK(vq_dist_allreduce(d, t, t, VQ_REDUCE_SUM));
    int rc = vq_tensor_wait(t);
    EXPECT(rc == 0 && ((int32_t *)vq_tensor_data(t))[2] == size * (size - 1) / 2,
           "after %s an allreduce gives %d (rc %d: %s)", after,
           ((int32_t *)vq_tensor_data(t))[2], rc, vq_errmsg());
    vq_tensor_release(t);
}

static void failures_propagate(vq_engine *e, vq_dist *d)
{
    /* a failed input of rank 1, then an allreduce of it */
    vq_tensor *q = failed_on_rank1(e);
    CHECK(vq_dist_allreduce(d, q, q, VQ_REDUCE_SUM));
    int rc = vq_tensor_wait(q);
    EXPECT(rc < 0, "an allreduce of an input that failed on rank 1 succeeded");
    if (rank != 1)
        EXPECT(rc == VQ_EIO && strstr(vq_errmsg(), "rank 1") && strstr(vq_errmsg(), "failure"),
               "rc %d, message: %s", rc, vq_errmsg());
    vq_tensor_release(q);
    still_works(d, "a failed allreduce");

    /* rank 1 sends a failed tensor to rank 0 */
    if (rank <= 1) {
        vq_tensor *t = rank == 1 ? failed_on_rank1(e) : ints(8, 0);
        if (rank == 1)
            CHECK(vq_dist_send(d, t, 0, 3));
        else
            CHECK(vq_dist_recv(d, t, 1, 3));
        rc = vq_tensor_wait(t);
        if (rank == 0)
            EXPECT(rc == VQ_EIO && strstr(vq_errmsg(), "0 bytes"),
                   "recv of a failed send: rc %d: %s", rc, vq_errmsg());
        vq_tensor_release(t);
    }
    vq_wait_all(e); /* clear the engine's record of the failures */
    still_works(d, "a failed send");

    /* mismatched element counts, then mismatched kinds */
    vq_tensor *m = ints(rank == 0 ? 10 : 12, 1);
    CHECK(vq_dist_allreduce(d, m, m, VQ_REDUCE_SUM));
    rc = vq_tensor_wait(m);
    EXPECT(rc == VQ_EINVAL && strstr(vq_errmsg(), "element count"),
           "mismatched counts: rc %d: %s", rc, vq_errmsg());
    if (rank == 0)
        CHECK(vq_dist_broadcast(d, m, 0));
    else
        CHECK(vq_dist_allreduce(d, m, m, VQ_REDUCE_MAX));
    rc = vq_tensor_wait(m);
    EXPECT(rc == VQ_EINVAL && strstr(vq_errmsg(), "same order"),
           "mismatched kinds: rc %d: %s", rc, vq_errmsg());
    vq_tensor_release(m);
    still_works(d, "mismatched collectives");
    vq_wait_all(e); /* the failures above, recorded by the engine */
}

/* A number taken by dist_ticket and never used: the next op of d2 (an
 * allreduce every rank issues) must fail after d2's timeout on every rank. */
static void gap_in_numbering(vq_engine *e)
{
    vq_dist *d2;
    CHECK(vq_dist_new_opts(&d2, e, &(vq_dist_opts){.timeout_s = 2}));
    vq_program *p;
    CHECK(vq_program_new(&p));
    int64_t zero[1] = {0}, four[1] = {4};
    CHECK(vq_program_add_var(p, 0, "tok", VQ_F32, 1, zero, false));
    CHECK(vq_program_add_var(p, 0, "x", VQ_I32, 1, four, false));
    CHECK(vq_program_add_var(p, 0, "ticket", VQ_I64, 1, (int64_t[]){1}, false));
    vq_attr comm = VQ_ATTR_I("comm", vq_dist_id(d2));
    CHECK(vq_program_add_op(p, 0, "dist_ticket", (const char *const[]){"tok", "x"}, 2,
                            (const char *const[]){"tok", "ticket"}, 2, &comm, 1));
    vq_exec *ex;
    vq_scope *sc;
    CHECK(vq_exec_new(&ex, e, NULL));
    CHECK(vq_scope_new(&sc));
    vq_tensor *tok, *x = ints(4, 1);
    CHECK(vq_tensor_new(&tok, VQ_F32, 1, zero));
    vq_feed feeds[2] = {{"tok", tok}, {"x", x}};
    CHECK(vq_exec_run(ex, p, sc, feeds, 2, NULL, 0));
    CHECK(vq_dist_allreduce(d2, x, x, VQ_REDUCE_SUM));
    int rc = vq_tensor_wait(x);
    EXPECT(rc == VQ_EIO && strstr(vq_errmsg(), "never came"),
           "an op behind a gap in the numbering: rc %d: %s", rc, vq_errmsg());
    vq_wait_all(e);
    rc = vq_dist_free(d2);
    EXPECT(rc == VQ_EIO, "vq_dist_free of a handle broken by a gap: %d", rc);
    vq_tensor_release(tok);
    vq_tensor_release(x);
    vq_exec_free(ex);
    vq_scope_free(sc);
    vq_program_free(p);
}

/* Rank 1 skips a collective large enough for the blocking call. */
static void large_skipped(vq_engine *e)
{
    vq_dist *d4;
    CHECK(vq_dist_new_opts(&d4, e, &(vq_dist_opts){.timeout_s = 2, .flags = VQ_DIST_NO_CHECK}));
    vq_tensor *t = ints(256 << 10, 1); /* 1 MiB */
    if (rank != 1) {
        CHECK(vq_dist_allreduce(d4, t, t, VQ_REDUCE_SUM));
        int rc = vq_tensor_wait(t);
        EXPECT(rc == VQ_EIO && strstr(vq_errmsg(), "did not complete in 2 s"),
               "a 1 MiB collective rank 1 skipped: rc %d: %s", rc, vq_errmsg());
        vq_wait_all(e);
        rc = vq_dist_free(d4);
        EXPECT(rc == VQ_EIO, "vq_dist_free of a broken handle: %d", rc);
    } else {
        sleep(4);
        CHECK(vq_dist_free(d4));
    }
    vq_tensor_release(t);
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    vq_engine *e;
    vq_dist *d;
    CHECK(vq_engine_new(&e, NULL));
    CHECK(vq_dist_new(&d, e, NULL));
    rank = vq_dist_rank(d);
    size = vq_dist_size(d);
    if (size < 2) {
        fprintf(stderr, "dist_failure: run it under mpirun with 2 or more ranks\n");
        return 1;
    }
    if (!strcmp(mode, "--exit-early")) {
        if (rank == 1)
            _exit(3); /* no MPI_Finalize, no goodbye */
        vq_tensor *t = ints(4, 1);
        CHECK(vq_dist_allreduce(d, t, t, VQ_REDUCE_SUM));
        vq_tensor_wait(t); /* mpirun ends the job meanwhile */
        fprintf(stderr, "rank %d: the allreduce ended: %s\n", rank, vq_errmsg());
        return 1;
    }
    if (!strcmp(mode, "--timeout")) {
        vq_dist *d2;
        CHECK(vq_dist_new_opts(&d2, e, &(vq_dist_opts){.timeout_s = 2}));
        vq_tensor *t = ints(4, 1);
        if (rank != 1) {
            CHECK(vq_dist_allreduce(d2, t, t, VQ_REDUCE_SUM));
            int rc = vq_tensor_wait(t);
            EXPECT(rc == VQ_EIO && strstr(vq_errmsg(), "did not complete in 2 s"),
                   "a collective rank 1 skipped: rc %d: %s", rc, vq_errmsg());
            CHECK(vq_dist_broadcast(d2, t, 0)); /* broken: fails at once */
            rc = vq_tensor_wait(t);
            EXPECT(rc == VQ_EIO && strstr(vq_errmsg(), "broken"), "after: rc %d: %s", rc,
                   vq_errmsg());
            vq_wait_all(e);
            rc = vq_dist_free(d2);
            EXPECT(rc == VQ_EIO, "vq_dist_free of a broken handle: %d", rc);
        } else {
            sleep(4);
            CHECK(vq_dist_free(d2));
        }
        vq_tensor_release(t);
        if (rank != 1)
            printf("rank %d: timeout behaviour: %s\n", rank, failures ? "FAILED" : "ok");
        int before = failures;
        gap_in_numbering(e);
        printf("rank %d: gap behaviour: %s\n", rank, failures > before ? "FAILED" : "ok");
        before = failures;
        large_skipped(e);
        if (rank != 1)
            printf("rank %d: large skip: %s\n", rank, failures > before ? "FAILED" : "ok");
        fflush(stdout);
        /* MPI cannot finish a collective that one rank abandoned: the
         * ranks that timed out leave without MPI_Finalize (vq_dist_free
         * skips it once a handle broke). */
        vq_dist_free(d);
        vq_engine_free(e);
        return failures ? 1 : 0;
    }
    failures_propagate(e, d);
    CHECK(vq_wait_all(e));
    int rc = vq_dist_free(d);
    vq_engine_free(e);
    if (failures || rc < 0) {
        fprintf(stderr, "rank %d: FAILED (%d)\n", rank, failures);
        return 1;
    }
    if (rank == 0)
        printf("dist_failure: failures and mismatches reach every rank on %d ranks: ok\n", size);
    return 0;
}
