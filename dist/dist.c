/* The dist module's core: handles (vq_dist) and the process-wide
 * communication thread that drives every nonblocking MPI call
 * (include/varq/dist.h); the imperative calls that feed it are in
 * dist_ops.c, the graph ops in dist_graph.c.
 *
 * How an op flows. vq_dist_allreduce & co. check their arguments, build a
 * vq__comm, give it the handle's next sequence number and push it as an
 * async engine op (VQ_PROP_RUN_ON_FAILED, so that a rank whose input
 * failed still takes part and tells the others). When the engine runs it,
 * its function notes whether its inputs carry a failure and submits the
 * vq__comm (vq__comm_submit). If it is next in its handle's order and no
 * thread is in MPI, the submitting thread starts it itself and polls it
 * for a few microseconds (start_here): a small op then completes without
 * leaving the thread that ran it, which is its pusher when its inputs
 * were ready at the push (comm_push in dist_ops.c). Otherwise, or if it is still out after
 * that, it goes to the communication thread (a lock-free stack, and a
 * wake-up when the thread sleeps). The thread keeps, per
 * handle, the ops that arrived before an earlier-numbered one (waiting,
 * sorted by seq) and starts them strictly in seq order: the ordering rule
 * of dist.h then only asks the ranks to push in the same order. A started
 * op goes through the signature exchange (stage 1) and the data call
 * (stage 2), each a nonblocking MPI call polled with MPI_Test, then ends:
 * the engine's vq_done_finish, after which the engine's arg_free frees it.
 * A number that never arrives (a program run that failed after its
 * dist_ticket op took a number and before the communication op ran) would
 * hold every later op of its handle forever: after timeout_s the first op
 * behind the gap fails and the handle is broken, as after a timed-out
 * collective.
 *
 * Locks. G.lock guards the handle table and the thread's start and stop.
 * G.mpi is held by whoever calls MPI (the thread for each round of polling,
 * a submitter in start_here, vq_dist_new and vq_dist_free for theirs):
 * MPI_THREAD_SERIALIZED's promise; it also guards the handles' ordering
 * state (struct vq_dist's second half). Neither is held while calling the
 * engine. */
#include "dist_internal.h"

#include "engine_services.h" /* vq__fail, vq__malloc */

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_HANDLES 64
#define SPIN_S 100e-6 /* how long the idle thread polls before it sleeps */
#define INLINE_SPIN_S 20e-6 /* how long a submitter polls an op it started (start_here) */
#define INLINE_MAX_BYTES ((size_t)2 << 10) /* and up to what size it polls it at all */
/* The pusher of a ready op polls it longer, by what its data takes at
 * 1 GB/s, up to a bound (start_here) */
#define PUSHER_SPIN_S_PER_BYTE 1e-9
#define PUSHER_SPIN_MAX_S 1e-3
/* and, whatever the clock says, for at least this many polls per stage */
#define PUSHER_MIN_POLLS 64
/* Collectives from this size on always exchange the signature and, when
 * no other communication is in flight on any rank, move their data with
 * the blocking call (comm_start says why). */
#define BLOCKING_MIN_BYTES ((size_t)256 << 10)
/* Up to this size the pusher of a ready collective makes the blocking
 * call itself (start_here): a few ms of its time at most (the 16 MiB
 * all-reduce of docs/perf/mpi.md); a larger one returns from its push
 * once the call is handed to the communication thread, so that what the
 * pusher pushes next overlaps it. */
#define PUSHER_BLOCKING_MAX_BYTES ((size_t)16 << 20)

static struct {
    pthread_mutex_t lock;
    pthread_mutex_t mpi;
    pthread_t thread;
    bool running;
    atomic_bool stop;
    _Atomic(vq__comm *) incoming; /* a stack: newest first */
    _Atomic(vq__comm *) handed;   /* started by a submitter, not done: a stack too */
    vq__comm *active;             /* the thread's started ops, not done; under G.mpi */
    atomic_int sleeping;
    pthread_mutex_t wake_lock;
    pthread_cond_t wake;
    vq_dist *table[MAX_HANDLES]; /* by id; 0 unused */
    int nhandles;
    bool we_initialized;
} G = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .mpi = PTHREAD_MUTEX_INITIALIZER,
    .wake_lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *vq__comm_kind_name(int kind)
{
    static const char *const names[] = {"skip", "allreduce", "broadcast", "allgather",
                                        "reduce_scatter", "send", "recv"};
    return kind >= 0 && kind <= VQ__COMM_RECV ? names[kind] : "?";
}

static bool is_collective(int kind)
{
    return kind >= VQ__COMM_ALLREDUCE && kind <= VQ__COMM_REDUCE_SCATTER;
}

static MPI_Datatype mpi_type(vq_dtype dt)
{
    switch (dt) {
    case VQ_F32: return MPI_FLOAT;
    case VQ_F64: return MPI_DOUBLE;
    case VQ_I32: return MPI_INT32_T;
    case VQ_I64: return MPI_INT64_T;
    case VQ_I8: return MPI_INT8_T;
    case VQ_U8: return MPI_UINT8_T;
    case VQ_I16: return MPI_INT16_T;
    case VQ_U32: return MPI_UINT32_T;
    case VQ_U64: return MPI_UINT64_T;
    /* only moved (check_red refuses their reductions): 16-bit patterns */
    case VQ_U16:
    case VQ_F16:
    case VQ_BF16: return MPI_UINT16_T;
    default: return MPI_UNSIGNED_CHAR; /* VQ_BOOL: 0 or 1, reduced by MAX (or) */
    }
}

static MPI_Op mpi_op(vq_reduce_op red, vq_dtype dt)
{
    return red == VQ_REDUCE_MAX || dt == VQ_BOOL ? MPI_MAX : MPI_SUM;
}

/* An MPI error as a varq one, with MPI's words. */
static int mpi_fail(const vq__comm *c, const char *call, int mrc)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(mrc, s, &len) != MPI_SUCCESS)
        snprintf(s, sizeof s, "MPI error %d", mrc);
    return vq__fail(VQ_EIO, "dist: %s: %s failed: %s", c ? c->what : "", call, s);
}

/* ---- the communication thread ---- */

static void wake_thread(void)
{
    if (atomic_load(&G.sleeping)) { /* seq_cst: pairs with the sleeper's store and load */
        pthread_mutex_lock(&G.wake_lock);
        pthread_cond_signal(&G.wake);
        pthread_mutex_unlock(&G.wake_lock);
    }
}

/* Pushes c onto one of the thread's stacks and wakes it. */
static void hand_to_thread(_Atomic(vq__comm *) *stack, vq__comm *c)
{
    vq__comm *head = atomic_load_explicit(stack, memory_order_relaxed);
    do
        c->next = head;
    while (!atomic_compare_exchange_weak_explicit(stack, &head, c, memory_order_release,
                                                  memory_order_relaxed));
    wake_thread();
}

uint64_t vq__dist_next_seq(vq_dist *d)
{
    return atomic_fetch_add(&d->next_seq, 1);
}

/* Ends c: off every list already, and G.mpi not held (the engine may run
 * other ops in this call). err and the message were kept by comm_done. */
static void comm_end(vq__comm *c)
{
    vq_dist *d = c->d;
    int err = c->err;
    if (err)
        vq__fail(err, "%s", c->msg);
    c->end(c, err);
    atomic_fetch_sub(&d->outstanding, 1);
}

/* c is done with err (its message in this thread's vq_errmsg()): onto
 * the list of ops to end once G.mpi is released. */
static void comm_done(vq__comm *c, int err, vq__comm **finished)
{
    if (c->d->in_exchange == c)
        c->d->in_exchange = NULL;
    c->err = err;
    if (err)
        snprintf(c->msg, sizeof c->msg, "%s", vq_errmsg());
    c->next = *finished;
    *finished = c;
}

/* Stage 0 of an allreduce, broadcast, send or recv: c->buf holds what goes
 * out (or receives what comes in), c->count its elements (bytes for send
 * and recv). One tensor with elements is used in place (in copied to out
 * first when they differ); several are packed into a fusion buffer. */
static int pack(vq__comm *c)
{
    bool bytes = c->kind == VQ__COMM_SEND || c->kind == VQ__COMM_RECV;
    size_t esize = bytes ? 1 : vq_dtype_size(c->dtype);
    int with = -1, nwith = 0;
    size_t total = 0;
    for (int i = 0; i < c->n; i++) {
        if (c->in[i] != c->out[i] && c->kind != VQ__COMM_RECV)
            memcpy(vq_tensor_data(c->out[i]), vq_tensor_data(c->in[i]),
                   vq_tensor_nbytes(c->in[i]));
        if (vq_tensor_nbytes(c->out[i])) {
            with = i;
            nwith++;
            total += vq_tensor_nbytes(c->out[i]);
        }
    }
    c->count = total / esize;
    c->own_buf = false;
    c->buf = NULL;
    if (nwith == 1) {
        c->buf = vq_tensor_data(c->out[with]);
    } else if (nwith > 1) {
        if (!(c->buf = vq__malloc(total)))
            return vq__fail(VQ_ENOMEM, "dist: %s: no memory for a %zu-byte fusion buffer",
                            c->what, total);
        c->own_buf = true;
        if (c->kind != VQ__COMM_RECV) {
            size_t at = 0;
            for (int i = 0; i < c->n; i++) {
                size_t nb = vq_tensor_nbytes(c->out[i]);
                memcpy((char *)c->buf + at, vq_tensor_data(c->out[i]), nb);
                at += nb;
            }
        }
    }
    if (c->kind == VQ__COMM_SEND && c->local_err)
        c->count = 0; /* an empty message: the receiver fails instead of waiting */
    return 0;
}

static void unpack(vq__comm *c)
{
    if (!c->own_buf)
        return;
    size_t at = 0;
    for (int i = 0; i < c->n; i++) {
        size_t nb = vq_tensor_nbytes(c->out[i]);
        memcpy(vq_tensor_data(c->out[i]), (char *)c->buf + at, nb);
        at += nb;
    }
}

/* Divides the count elements at p by size (MEAN). */
static void divide(void *p, size_t count, vq_dtype dt, int size)
{
    switch (dt) {
    case VQ_F32:
        for (size_t i = 0; i < count; i++)
            ((float *)p)[i] /= (float)size;
        break;
    case VQ_F64:
        for (size_t i = 0; i < count; i++)
            ((double *)p)[i] /= size;
        break;
    case VQ_I32:
        for (size_t i = 0; i < count; i++)
            ((int32_t *)p)[i] /= size;
        break;
    case VQ_I64:
        for (size_t i = 0; i < count; i++)
            ((int64_t *)p)[i] /= size;
        break;
    default: break;
    }
}

/* The signature every rank must agree on (the first 5 fields), whether
 * this rank's input failed, and whether this rank would rather not block
 * (any rank's 1 wins: the MAX). */
static void sig_fill(vq__comm *c, bool may_block)
{
    int64_t f[7] = {(int64_t)c->d->ncollectives,
                    c->kind,
                    c->dtype,
                    (int64_t)c->count,
                    c->kind == VQ__COMM_BROADCAST ? c->peer : (int64_t)c->red,
                    c->local_err ? c->d->rank + 1 : 0,
                    !may_block};
    for (int i = 0; i < 7; i++) {
        c->sig[i] = f[i];
        c->sig[7 + i] = -f[i];
    }
}

/* After the exchange: 0, or the error every rank finds alike. */
static int sig_check(vq__comm *c)
{
    static const char *const field[] = {"collective number", "kind", "dtype",
                                        "element count", "reduction or root"};
    for (int i = 0; i < 5; i++)
        if (c->sig[i] != -c->sig[7 + i])
            return vq__fail(VQ_EINVAL,
                            "dist: %s: the ranks disagree on its %s (this rank: %s of %zu "
                            "%s elements): every rank must issue the same collectives in the "
                            "same order",
                            c->what, field[i], vq__comm_kind_name(c->kind), c->count,
                            vq_dtype_name(c->dtype));
    if (c->sig[5])
        return vq__fail(VQ_EIO,
                        "dist: %s: the input of rank %lld carried a failure (an earlier op "
                        "failed there); no data was exchanged",
                        c->what, (long long)c->sig[5] - 1);
    c->blocking = c->sig[6] == 0;
    return 0;
}

static int comm_complete(vq__comm *c, const MPI_Status *st);

/* Moves the data of collective c with the blocking call (stage 3): only
 * on the communication thread, once every rank has agreed to (sig_check).
 * Returns 0 or an error, like comm_complete. */
static int move_blocking(vq__comm *c)
{
    vq_dist *d = c->d;
    MPI_Datatype T = mpi_type(c->dtype);
    int n = (int)c->count, mrc = MPI_SUCCESS;
    const char *call = "?";
    switch (c->kind) {
    case VQ__COMM_ALLREDUCE:
        call = "MPI_Allreduce";
        mrc = MPI_Allreduce(MPI_IN_PLACE, c->buf, n, T, mpi_op(c->red, c->dtype), d->comm);
        break;
    case VQ__COMM_BROADCAST:
        call = "MPI_Bcast";
        mrc = MPI_Bcast(c->buf, n, T, c->peer, d->comm);
        break;
    case VQ__COMM_ALLGATHER:
        call = "MPI_Allgather";
        mrc =
            MPI_Allgather(vq_tensor_data(c->in[0]), n, T, vq_tensor_data(c->out[0]), n, T, d->comm);
        break;
    case VQ__COMM_REDUCE_SCATTER:
        call = "MPI_Reduce_scatter_block";
        mrc = MPI_Reduce_scatter_block(vq_tensor_data(c->in[0]), vq_tensor_data(c->out[0]), n, T,
                                       mpi_op(c->red, c->dtype), d->comm);
        break;
    default: break; /* point-to-point never blocks */
    }
    if (mrc != MPI_SUCCESS)
        return mpi_fail(c, call, mrc);
    MPI_Status none;
    memset(&none, 0, sizeof none);
    return comm_complete(c, &none);
}

/* Starts the data call of c (stage 2). */
static int start_data(vq__comm *c)
{
    vq_dist *d = c->d;
    MPI_Datatype T = mpi_type(c->dtype);
    int n = (int)c->count, mrc = MPI_SUCCESS;
    const char *call = "?";
    c->stage = 2;
    switch (c->kind) {
    case VQ__COMM_ALLREDUCE:
        call = "MPI_Iallreduce";
        mrc = MPI_Iallreduce(MPI_IN_PLACE, c->buf, n, T, mpi_op(c->red, c->dtype), d->comm,
                             &c->req);
        break;
    case VQ__COMM_BROADCAST:
        call = "MPI_Ibcast";
        mrc = MPI_Ibcast(c->buf, n, T, c->peer, d->comm, &c->req);
        break;
    case VQ__COMM_ALLGATHER:
        call = "MPI_Iallgather";
        mrc = MPI_Iallgather(vq_tensor_data(c->in[0]), n, T, vq_tensor_data(c->out[0]), n, T,
                             d->comm, &c->req);
        break;
    case VQ__COMM_REDUCE_SCATTER:
        call = "MPI_Ireduce_scatter_block";
        mrc = MPI_Ireduce_scatter_block(vq_tensor_data(c->in[0]), vq_tensor_data(c->out[0]), n,
                                        T, mpi_op(c->red, c->dtype), d->comm, &c->req);
        break;
    case VQ__COMM_SEND:
        call = "MPI_Isend";
        mrc = MPI_Isend(c->buf, n, MPI_BYTE, c->peer, c->tag, d->comm, &c->req);
        break;
    case VQ__COMM_RECV:
        call = "MPI_Irecv";
        mrc = MPI_Irecv(c->buf, n, MPI_BYTE, c->peer, c->tag, d->comm, &c->req);
        break;
    default: break;
    }
    return mrc == MPI_SUCCESS ? 1 : mpi_fail(c, call, mrc);
}

/* The bytes an op moves per rank: its larger side (in for reduce_scatter,
 * out for allgather). The same on every rank when the signatures agree. */
static size_t comm_bytes(const vq__comm *c)
{
    size_t in = 0, out = 0;
    for (int i = 0; i < c->n; i++) {
        in += vq_tensor_nbytes(c->in[i]);
        out += vq_tensor_nbytes(c->out[i]);
    }
    return in > out ? in : out;
}

/* Starts c (stage 0 to 1 or 2). Returns 1 while it is out, 0 when it is
 * done already (nothing to send), or an error.
 *
 * Large collectives and the blocking call. Open MPI's nonblocking
 * collectives (libnbc) pick slower algorithms than its blocking ones: at 1
 * MiB to 64 MiB an MPI_Iallreduce polled to completion takes 1.3 to 1.5
 * times an MPI_Allreduce (docs/perf/mpi.md). The communication thread is
 * not an engine worker, so it may block, but two rules hold it back: MPI
 * matches no blocking collective with a nonblocking one, so every rank
 * must choose alike; and a blocking call cannot time out, so it must only
 * start once every rank is known to have issued the collective. Both come
 * from the signature exchange, which a collective of BLOCKING_MIN_BYTES or
 * more therefore always makes (VQ_DIST_NO_CHECK or not: one small
 * all-reduce more, which the faster data call pays for from about this
 * size; at 256 KiB the two about cancel on docs/perf/mpi.md's VM): each rank
 * says whether it may block (may_block: nothing else of its communication
 * is in flight or waiting, so nothing waits behind the call), the MAX
 * makes one answer, and after the exchange every rank has issued the
 * collective, so the blocking call is matched. Nor can two ranks block
 * in two collectives each waiting for the other: a rank blocks in X only
 * if every rank started X's exchange with nothing else out, so on every
 * rank any other blocking collective finished before X began or begins
 * after X ends. Others' ops that arrive meanwhile wait for it, as they
 * would wait for the bandwidth. */
static int comm_start(vq__comm *c, bool may_block)
{
    vq_dist *d = c->d;
    c->t_start = now_s();
    if (atomic_load(&d->broken))
        return vq__fail(VQ_EIO, "dist: %s: the communicator is broken: an earlier "
                                "collective timed out",
                        c->what);
    if (c->kind == VQ__COMM_ALLGATHER || c->kind == VQ__COMM_REDUCE_SCATTER) {
        c->count = (size_t)vq_tensor_numel(c->kind == VQ__COMM_ALLGATHER ? c->in[0] : c->out[0]);
    } else {
        int rc = pack(c);
        if (rc < 0)
            return rc;
    }
    bool big = is_collective(c->kind) && comm_bytes(c) >= BLOCKING_MIN_BYTES;
    if (is_collective(c->kind) && (!(d->flags & VQ_DIST_NO_CHECK) || big)) {
        sig_fill(c, big && may_block);
        d->ncollectives++;
        c->stage = 1;
        d->in_exchange = c;
        int mrc = MPI_Iallreduce(MPI_IN_PLACE, c->sig, 14, MPI_INT64_T, MPI_MAX, d->comm, &c->req);
        return mrc == MPI_SUCCESS ? 1 : mpi_fail(c, "MPI_Iallreduce (signature)", mrc);
    }
    if (is_collective(c->kind))
        d->ncollectives++;
    /* A collective with no elements, checked or not, moves nothing: every
     * rank agrees on the count (checked, or by the ordering rule). */
    if (c->count == 0 && is_collective(c->kind))
        return c->local_err ? vq__fail(VQ_EIO, "dist: %s: this rank's input carried a failure",
                                       c->what)
                            : 0;
    return start_data(c);
}

/* The data call of c completed with status st: the last touches. */
static int comm_complete(vq__comm *c, const MPI_Status *st)
{
    if (c->kind == VQ__COMM_RECV) {
        int got = 0;
        MPI_Get_count(st, MPI_BYTE, &got);
        if ((size_t)got != c->count)
            return vq__fail(VQ_EIO,
                            "dist: %s: the message from rank %d (tag %d) has %d bytes, %zu "
                            "expected%s",
                            c->what, c->peer, c->tag, got, c->count,
                            got == 0 ? " (the sender's input had failed, or it sent an empty "
                                       "tensor)"
                                     : "");
    }
    bool reduces = c->kind == VQ__COMM_ALLREDUCE || c->kind == VQ__COMM_REDUCE_SCATTER;
    if (reduces && c->red == VQ_REDUCE_MEAN)
        divide(c->kind == VQ__COMM_ALLREDUCE ? c->buf : vq_tensor_data(c->out[0]), c->count,
               c->dtype, c->d->size);
    if (c->kind == VQ__COMM_ALLREDUCE || c->kind == VQ__COMM_BROADCAST ||
        c->kind == VQ__COMM_RECV)
        unpack(c);
    return c->local_err
               ? vq__fail(VQ_EIO, "dist: %s: this rank's input carried a failure", c->what)
               : 0;
}

/* Polls c once. Returns 1 while it is out, else 0 or its error. Only the
 * communication thread (on_thread) moves data by a blocking call. */
static int comm_poll(vq__comm *c, double now, bool on_thread)
{
    if (c->stage == 3)
        return on_thread ? move_blocking(c) : 1;
    int flag = 0;
    MPI_Status st;
    int mrc = MPI_Test(&c->req, &flag, &st);
    if (mrc != MPI_SUCCESS)
        return mpi_fail(c, "MPI_Test", mrc);
    if (!flag) {
        if (now - c->t_start > c->d->timeout_s) {
            atomic_store(&c->d->broken, true);
            /* MPI may still write the buffers if a peer shows up: keep them. */
            c->own_buf = false;
            for (int i = 0; i < c->n; i++)
                if (c->out[i])
                    vq_tensor_retain(c->out[i]);
            return vq__fail(VQ_EIO,
                            "dist: %s did not complete in %g s: another rank has not issued it "
                            "(it skipped it after a failure, exited, or issued other "
                            "collectives); the communicator is broken",
                            c->what, c->d->timeout_s);
        }
        return 1;
    }
    if (c->stage == 1) {
        c->d->in_exchange = NULL;
        int rc = sig_check(c);
        if (rc < 0)
            return rc;
        if (c->count == 0)
            return 0;
        if (c->blocking) {
            c->stage = 3;
            return on_thread ? move_blocking(c) : 1;
        }
        return start_data(c);
    }
    return comm_complete(c, &st);
}

/* d's next op to start has not arrived while later ones wait: after
 * timeout_s, the first of them fails and d is broken (the others then fail
 * at once). Returns whether it failed one. */
static bool gap_check(vq_dist *d, vq__comm **finished)
{
    double now = now_s();
    if (!d->gap_since)
        d->gap_since = now;
    if (now - d->gap_since <= d->timeout_s)
        return false;
    vq__comm *c = d->waiting;
    d->waiting = c->next;
    d->gap_since = 0;
    atomic_store(&d->broken, true);
    comm_done(c,
              vq__fail(VQ_EIO,
                       "dist: %s could not start in %g s: op #%llu of its handle, which must "
                       "start before it, never came (a program run failed between that op's "
                       "dist_ticket and the op, or the op's inputs never became ready); the "
                       "communicator is broken",
                       c->what, d->timeout_s, (unsigned long long)d->next_issue),
              finished);
    return true;
}

_Thread_local const vq__comm *vq__comm_releasing;

/* Starts c on the calling thread (its pusher, an engine worker running the
 * op, or a waiter helping) when it is next in its handle's order and no
 * other thread is in MPI: a crossing to the communication thread and back
 * saved, which is most of a small op's cost. It polls each stage of c
 * (signature exchange, data) for INLINE_SPIN_S, about what a small
 * all-reduce takes when the peers are there too, and ends c here if it
 * completed; else the thread polls it on. So a worker is held for a few
 * such spells at most: still no worker waits for a peer that is late. On
 * a worker (or a waiter, which runs ops as one) an op above
 * INLINE_MAX_BYTES is only started here: past Open MPI's shared-memory
 * eager size (4 KiB) a message moves in rendezvous rounds that each need
 * the peer's polling, so it seldom completes within the spell, which would
 * only take a core from the ops that compute (measured: the digits MLP's
 * data-parallel step with its 8 KiB buckets).
 *
 * Its pusher (c == vq__comm_releasing: the op's inputs were ready at its
 * push, and comm_push runs it at once) carries it further, as a host that
 * calls MPI itself would. It polls every size, for the spell plus what the
 * data takes at 1 GB/s (at most PUSHER_SPIN_MAX_S; with the plain spell a
 * 4 to 64 KiB op often outlasted it on one rank and went to the
 * communication thread, several times slower), and for at least
 * PUSHER_MIN_POLLS polls: with more ranks than cores the clock runs on
 * while this rank is descheduled (MPI_Test yields the core), which says
 * nothing about the peers, and a spell measured in time alone sent most
 * small ops to the thread (with more ranks than cores, a small op took
 * several times MPI_Allreduce's own time). And it makes the
 * blocking call of a large collective (stage 3) itself, up to
 * PUSHER_BLOCKING_MAX_BYTES: on the thread the same call took longer,
 * and the handoff there and back added a fixed cost.
 * The pusher is outside the engine's ops, so no op waits for it; it only
 * pushes its next op later (the bounds keep that delay short; a larger
 * transfer goes to the thread and overlaps what the pusher pushes next).
 * The blocking call is as safe here as on the thread: after the signature
 * exchange every rank has issued the collective and nothing else of its
 * communication is in flight (comm_start), and G.mpi is held through it
 * as the thread holds it. With it, an all-reduce waited for op by op
 * costs about what MPI_Allreduce costs at every size (docs/perf/mpi.md).
 * Returns false, touching nothing, when c is for the thread.
 * hot path: no malloc (but a fused op's buffer, as on the thread); G.mpi
 * only when free */
static bool start_here(vq__comm *c)
{
    bool pusher = c == vq__comm_releasing;
    size_t bytes = comm_bytes(c);
    vq_dist *d = c->d;
    if (pthread_mutex_trylock(&G.mpi) != 0)
        return false;
    /* under G.mpi: the thread's per-handle state is stable */
    if (d->waiting || d->in_exchange || c->seq != d->next_issue) {
        pthread_mutex_unlock(&G.mpi);
        return false;
    }
    d->next_issue++;
    d->gap_since = 0;
    /* may it block, for a large collective (comm_start)? Then the thread,
     * or here its pusher, makes the call (stage 3) once the exchange agreed. Other handles'
     * waiting ops are not seen here: the answer only has to be alike on
     * every rank, and the exchange makes it so. */
    bool alone = !G.active && !atomic_load(&G.handed) && !atomic_load(&G.incoming);
    double spell = bytes <= INLINE_MAX_BYTES ? INLINE_SPIN_S : 0;
    if (pusher)
        spell = fmin(INLINE_SPIN_S + PUSHER_SPIN_S_PER_BYTE * (double)bytes, PUSHER_SPIN_MAX_S);
    bool may_block_here = pusher && bytes <= PUSHER_BLOCKING_MAX_BYTES;
    int rc = comm_start(c, alone), stage = c->stage;
    double since = c->t_start; /* each stage (signature, data) gets the time */
    int polls = 0;             /* of this stage */
    while (rc == 1) {
        double now = now_s();
        if (c->stage != stage) {
            stage = c->stage;
            since = now;
            polls = 0;
        }
        if ((now - since >= spell && (!pusher || polls >= PUSHER_MIN_POLLS)) ||
            (stage == 3 && !may_block_here))
            break;
        polls++;
        rc = comm_poll(c, now, may_block_here);
    }
    vq__comm *finished = NULL;
    if (rc != 1)
        comm_done(c, rc, &finished);
    pthread_mutex_unlock(&G.mpi);
    if (rc == 1)
        hand_to_thread(&G.handed, c);
    else
        comm_end(c);
    return true;
}

/* hot path: no malloc; a lock only to wake the thread when it sleeps */
void vq__comm_submit(vq__comm *c)
{
    atomic_fetch_add(&c->d->outstanding, 1);
    if (c->kind != VQ__COMM_SKIP && start_here(c))
        return;
    hand_to_thread(&G.incoming, c);
}

/* Moves the arrived ops into their handles' waiting lists, in seq order;
 * notes each handle with waiting ops in hs (at most MAX_HANDLES). */
static void take_incoming(vq_dist **hs, int *nh)
{
    vq__comm *c = atomic_exchange_explicit(&G.incoming, NULL, memory_order_acquire);
    while (c) {
        vq__comm *next = c->next;
        vq_dist *d = c->d;
        vq__comm **at = &d->waiting;
        while (*at && (*at)->seq < c->seq)
            at = &(*at)->next;
        c->next = *at;
        *at = c;
        int i = 0;
        while (i < *nh && hs[i] != d)
            i++;
        if (i == *nh)
            hs[(*nh)++] = d;
        c = next;
    }
}

static void *comm_thread(void *arg)
{
    (void)arg;
    vq_dist *hs[MAX_HANDLES];          /* handles with waiting ops */
    int nh = 0;
    double idle_since = now_s();
    unsigned empty_rounds = 0;
    for (;;) {
        bool worked = false;
        vq__comm *finished = NULL;
        pthread_mutex_lock(&G.mpi);
        /* under G.mpi: start_here reads the handles' waiting lists */
        take_incoming(hs, &nh);
        for (vq__comm *c = atomic_exchange_explicit(&G.handed, NULL, memory_order_acquire), *n; c;
             c = n) {
            n = c->next;
            c->next = G.active;
            G.active = c;
        }
        /* start what is next in each handle's order */
        for (int i = 0; i < nh; i++) {
            vq_dist *d = hs[i];
            if (d->waiting && d->waiting->seq == d->next_issue)
                d->gap_since = 0;
            /* a broken handle fails every op at once, in whatever order */
            while (d->waiting && !d->in_exchange &&
                   (d->waiting->seq == d->next_issue || atomic_load(&d->broken))) {
                vq__comm *c = d->waiting;
                d->waiting = c->next;
                d->next_issue = c->seq + 1;
                worked = true;
                /* nothing else in flight or waiting here: it may block */
                bool alone = !G.active && !atomic_load(&G.handed) && nh == 1 && !d->waiting;
                int rc = c->kind == VQ__COMM_SKIP ? 0 : comm_start(c, alone);
                if (rc == 1) {
                    c->next = G.active;
                    G.active = c;
                } else {
                    comm_done(c, rc, &finished);
                }
            }
            if (d->waiting && !d->in_exchange)
                worked |= gap_check(d, &finished);
            else
                d->gap_since = 0;
            if (!d->waiting)
                hs[i--] = hs[--nh];
        }
        /* poll what is out */
        double now = G.active ? now_s() : 0;
        for (vq__comm **at = &G.active; *at;) {
            vq__comm *c = *at;
            int rc = comm_poll(c, now, true);
            if (rc == 1) {
                at = &c->next;
                continue;
            }
            *at = c->next;
            worked = true;
            comm_done(c, rc, &finished);
        }
        pthread_mutex_unlock(&G.mpi);
        while (finished) {
            vq__comm *c = finished;
            finished = c->next;
            comm_end(c);
        }
        if (worked || atomic_load_explicit(&G.incoming, memory_order_relaxed) ||
            atomic_load_explicit(&G.handed, memory_order_relaxed)) {
            idle_since = now_s();
            continue;
        }
        /* Nothing moved. While requests are out, polling is what moves
         * them (MPI progresses inside MPI_Test), so poll on, but every 64th
         * empty round let the threads that would move something else (the
         * workers running the next op, the peer rank on an oversubscribed
         * machine) have the CPU; idle, yield every round. A yield costs a
         * system call when nobody waits. */
        if (!G.active || (++empty_rounds & 63) == 0) /* G.active: only this thread writes it */
            sched_yield();
        if (G.active) {
            idle_since = now_s();
            continue;
        }
        if (atomic_load(&G.stop) && nh == 0)
            break;
        if (now_s() - idle_since < SPIN_S)
            continue;
        /* Sleep. The flag is set before the last look at incoming, and a
         * submitter pushes before it reads the flag (both seq_cst): one
         * of the two sees the other. */
        pthread_mutex_lock(&G.wake_lock);
        atomic_store(&G.sleeping, 1);
        if (!atomic_load(&G.incoming) && !atomic_load(&G.handed) && !atomic_load(&G.stop)) {
            if (nh == 0) {
                pthread_cond_wait(&G.wake, &G.wake_lock);
            } else { /* ops wait for a gap: wake up to time it (gap_check) */
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_nsec += 100000000;
                if (until.tv_nsec >= 1000000000) {
                    until.tv_sec++;
                    until.tv_nsec -= 1000000000;
                }
                pthread_cond_timedwait(&G.wake, &G.wake_lock, &until);
            }
        }
        atomic_store(&G.sleeping, 0);
        pthread_mutex_unlock(&G.wake_lock);
        idle_since = now_s();
    }
    return NULL;
}

/* ---- handles ---- */

static int timeout_of(const vq_dist_opts *o, double *out)
{
    if (o->timeout_s < 0 || isnan(o->timeout_s))
        return vq__fail(VQ_EINVAL, "vq_dist_new: timeout_s %g is negative", o->timeout_s);
    *out = o->timeout_s > 0 ? o->timeout_s : 600;
    const char *env = getenv("VARQ_DIST_TIMEOUT");
    if (o->timeout_s == 0 && env && *env) {
        char *end;
        errno = 0;
        double v = strtod(env, &end);
        if (errno || *end || !(v > 0))
            return vq__fail(VQ_EINVAL, "vq_dist_new: VARQ_DIST_TIMEOUT=%s is not a positive "
                                       "number of seconds",
                            env);
        *out = v;
    }
    return 0;
}

/* MPI ready for varq: initialized by us (SERIALIZED) or by the caller
 * with at least that. Under G.lock and G.mpi. */
static int mpi_ready(void)
{
    int inited = 0, finalized = 0, provided = 0;
    MPI_Finalized(&finalized);
    if (finalized)
        return vq__fail(VQ_EINVAL, "vq_dist_new: MPI was finalized already (by the last "
                                   "vq_dist_free, or by the caller): MPI cannot start twice");
    MPI_Initialized(&inited);
    if (!inited) {
        int mrc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (mrc != MPI_SUCCESS)
            return mpi_fail(NULL, "MPI_Init_thread", mrc);
        G.we_initialized = true;
        /* Open MPI reports errors of nonblocking collectives' requests on
         * MPI_COMM_WORLD whatever their communicator: since varq owns this
         * MPI, it makes those come back as errors too. */
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED)
        return vq__fail(VQ_EINVAL, "vq_dist_new: MPI provides thread level %d, below "
                                   "MPI_THREAD_SERIALIZED: varq's communication thread calls MPI",
                        provided);
    return 0;
}

VQ_API int vq_dist_new_opts(vq_dist **out, vq_engine *e, const vq_dist_opts *opts)
{
    if (!out || !e)
        return vq__fail(VQ_EINVAL, "vq_dist_new: NULL argument");
    *out = NULL;
    vq_dist_opts o = opts ? *opts : (vq_dist_opts){0};
    if (o.flags & ~(unsigned)VQ_DIST_NO_CHECK)
        return vq__fail(VQ_EINVAL, "vq_dist_new: unknown flags 0x%x", o.flags);
    double timeout;
    int rc = timeout_of(&o, &timeout);
    if (rc < 0)
        return rc;
    if ((rc = vq__dist_graph_register()) < 0)
        return rc;
    vq_dist *d = vq__calloc(1, sizeof *d);
    if (!d)
        return vq__fail(VQ_ENOMEM, "vq_dist_new: out of memory");
    d->e = e;
    d->flags = o.flags;
    d->timeout_s = timeout;
    d->comm = MPI_COMM_NULL;
    pthread_mutex_init(&d->push_lock, NULL);
    pthread_mutex_lock(&G.lock);
    pthread_mutex_lock(&G.mpi);
    rc = mpi_ready();
    int mrc = MPI_SUCCESS;
    if (rc >= 0) {
        MPI_Comm base = o.comm ? *(const MPI_Comm *)o.comm : MPI_COMM_WORLD;
        if ((mrc = MPI_Comm_dup(base, &d->comm)) != MPI_SUCCESS)
            rc = mpi_fail(NULL, "vq_dist_new: MPI_Comm_dup", mrc);
    }
    if (rc >= 0 && (mrc = MPI_Comm_set_errhandler(d->comm, MPI_ERRORS_RETURN)) != MPI_SUCCESS)
        rc = mpi_fail(NULL, "vq_dist_new: MPI_Comm_set_errhandler", mrc);
    if (rc >= 0) {
        MPI_Comm_rank(d->comm, &d->rank);
        MPI_Comm_size(d->comm, &d->size);
    }
    pthread_mutex_unlock(&G.mpi);
    for (int i = 1; rc >= 0 && i < MAX_HANDLES && !d->id; i++)
        if (!G.table[i])
            d->id = i;
    if (rc >= 0 && !d->id)
        rc = vq__fail(VQ_EBUSY, "vq_dist_new: %d handles exist already", MAX_HANDLES - 1);
    if (rc >= 0 && !G.running) {
        atomic_store(&G.stop, false);
        if (pthread_create(&G.thread, NULL, comm_thread, NULL) != 0)
            rc = vq__fail(VQ_ENOMEM, "vq_dist_new: cannot start the communication thread");
        else
            G.running = true;
    }
    if (rc >= 0) {
        G.table[d->id] = d;
        G.nhandles++;
    }
    pthread_mutex_unlock(&G.lock);
    if (rc < 0) {
        if (d->comm != MPI_COMM_NULL) {
            pthread_mutex_lock(&G.mpi);
            MPI_Comm_free(&d->comm);
            pthread_mutex_unlock(&G.mpi);
        }
        pthread_mutex_destroy(&d->push_lock);
        free(d);
        return rc;
    }
    *out = d;
    return 0;
}

VQ_API int vq_dist_new(vq_dist **out, vq_engine *e, const void *comm)
{
    vq_dist_opts o = {.comm = comm};
    return vq_dist_new_opts(out, e, &o);
}

VQ_API int vq_dist_rank(const vq_dist *d) { return d ? d->rank : -1; }
VQ_API int vq_dist_size(const vq_dist *d) { return d ? d->size : -1; }
VQ_API int vq_dist_id(const vq_dist *d) { return d ? d->id : -1; }

vq_dist *vq__dist_lookup(int id)
{
    pthread_mutex_lock(&G.lock);
    vq_dist *d = id > 0 && id < MAX_HANDLES ? G.table[id] : NULL;
    pthread_mutex_unlock(&G.lock);
    return d;
}

VQ_API int vq_dist_free(vq_dist *d)
{
    if (!d)
        return 0;
    /* the ops the thread holds end (by completion or by timeout) */
    while (atomic_load(&d->outstanding) > 0) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&G.lock);
    G.table[d->id] = NULL;
    bool last = --G.nhandles == 0;
    if (last && G.running) {
        atomic_store(&G.stop, true);
        pthread_mutex_lock(&G.wake_lock);
        pthread_cond_signal(&G.wake);
        pthread_mutex_unlock(&G.wake_lock);
        pthread_join(G.thread, NULL);
        G.running = false;
    }
    bool broken = atomic_load(&d->broken);
    int rc = 0;
    pthread_mutex_lock(&G.mpi);
    if (broken) {
        rc = vq__fail(VQ_EIO, "vq_dist_free: the communicator was broken by a timeout: MPI "
                              "is left as it is (not finalized); exit the process");
        G.we_initialized = false; /* never finalize over a broken collective */
    } else {
        MPI_Comm_free(&d->comm);
        if (last && G.we_initialized) {
            MPI_Finalize();
            G.we_initialized = false;
        }
    }
    pthread_mutex_unlock(&G.mpi);
    pthread_mutex_unlock(&G.lock);
    pthread_mutex_destroy(&d->push_lock);
    free(d);
    return rc;
}
