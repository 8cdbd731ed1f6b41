/* varq beyond one machine: collectives and point-to-point transfers as
 * engine ops over MPI, usable imperatively on tensors and inside programs,
 * and a data-parallel pass for training.
 *
 * A vq_dist is varq's view of one MPI communicator (a duplicate of the
 * caller's, with MPI_ERRORS_RETURN set, so MPI failures come back as
 * errors instead of aborting). Every communication call pushes one async
 * engine op that reads and writes the tensors' vars like any other op: it
 * is ordered by the var queues after the ops that produce its inputs and
 * before the ops that consume its outputs, and it overlaps every op that
 * shares no var with it. No engine worker ever waits for a peer in MPI:
 * the op's function hands it to varq's communication thread (one per
 * process, for every handle), which starts the nonblocking MPI call
 * (MPI_Iallreduce, MPI_Ibcast, MPI_Isend, ...), polls it with MPI_Test and
 * calls vq_done_finish when it is complete. The exceptions save that
 * crossing and the one back, most of a small op's cost. An op that is
 * next in its handle's order while no other thread is in MPI is started
 * by the thread that runs it: on an engine worker, if small (up to 2 KiB),
 * polled there for at most 20 microseconds per stage and finished there
 * when it completes in that time. An op whose inputs are ready when it is
 * pushed (nothing queued before it on its tensors) is run by the calling
 * thread inside the call, which then acts as a host calling MPI itself
 * would: it polls the op for 20 microseconds plus what its data takes at
 * 1 GB/s (at most 1 ms) per stage, and, for a collective of 256 KiB to
 * 16 MiB that the ranks agreed to move with the blocking MPI call (see the
 * checks below), makes that call; so such a call can take about the
 * transfer's time before it returns. What did not complete in that time
 * goes on on the communication thread, as does a blocking call above
 * 16 MiB. While no communication is out the thread sleeps.
 *
 * THE ORDERING RULE. MPI matches collectives by their order on a
 * communicator: every rank must issue the same collectives, with the same
 * dtype, element count, reduction and root, in the same order. varq numbers
 * the communication ops of a handle in the order they are pushed (the
 * imperative calls below) or, for ops inside programs, the order their
 * dist_ticket ops run (below), and their MPI calls start in that order
 * even when a later one becomes ready first. So: push the same
 * sequence of collectives on every rank (a loop over the same parameters
 * in the same order), and chain the communication ops of a program (use
 * vq_dist_program_add, or the data-parallel pass, which do). Do not have
 * imperative calls and program runs with communication ops in flight on
 * the same handle at once: their relative order would depend on timing.
 * Use two handles (two communicators, each ordered alone) for that.
 *
 * Mismatches are detected, by default: before its data moves, each
 * collective exchanges a 7-number signature (sequence number, kind, dtype,
 * element count, reduction or root, whether this rank's input had failed,
 * and whether it may block, below) in one small MPI_Iallreduce. Ranks that disagree all fail that
 * op with VQ_EINVAL naming what differs, and no data moves; a rank whose
 * input var carried a failure (an earlier op failed there) makes the op
 * fail with VQ_EIO on every rank, naming that rank, instead of sending
 * garbage or leaving the others waiting. The communicator stays usable
 * after both. VQ_DIST_NO_CHECK turns the exchange off (one latency less
 * per collective; then mismatches are undefined behaviour as in plain
 * MPI) for collectives under 256 KiB: larger ones always make it, since it
 * is also how the ranks agree to move their data with the blocking MPI
 * call (MPI_Allreduce, ..., faster than the nonblocking ones in Open MPI)
 * when no other communication is in flight on any of them, and how each
 * knows that the others have issued the collective before it blocks.
 * Point-to-point transfers check the received byte count.
 *
 * A collective that a rank never issues (it skipped it, exited, or issued
 * a different one in a handle without checks) cannot be cancelled in MPI.
 * After timeout_s seconds without completion (default 600, or
 * VARQ_DIST_TIMEOUT) the op fails with VQ_EIO saying so, the handle is
 * marked broken, every later op on it fails at once, and vq_dist_free
 * skips MPI_Finalize (which could hang) and returns VQ_EIO. A rank that
 * exits without MPI_Finalize makes mpirun stop the job with its message.
 *
 * MPI initialization: vq_dist_new initializes MPI itself when nobody has,
 * with MPI_THREAD_SERIALIZED: varq calls MPI from the thread that creates
 * and frees handles, from its communication thread and from the threads
 * that start ops (above), never from two at once (a process-wide lock),
 * which is exactly what SERIALIZED allows; FUNNELED would not do (the
 * communication thread is not the main thread), and
 * MULTIPLE is not needed and slower in some MPI builds. varq then calls
 * MPI_Finalize when the last handle is freed (MPI cannot be initialized
 * twice: later vq_dist_new calls fail). A caller that initialized MPI
 * itself must have at least MPI_THREAD_SERIALIZED and must not call MPI
 * while varq communication ops are in flight, or must have
 * MPI_THREAD_MULTIPLE; it finalizes MPI itself.
 *
 * Tensors must be on the CPU. A GPU tensor is staged through the host by
 * the caller for now: vq_tensor_copy_to to the CPU, communicate, copy back.
 *
 * With the naive engine (VQ_ENGINE_NAIVE) every push waits for its op, so a
 * send above MPI's eager limit (some KiB) waits for the peer to push the
 * matching recv: two ranks that both send first then wait for each other.
 * The threaded engine has no such constraint.
 *
 * Without MPI in the build (meson -Dmpi=disabled, or no MPI found) this
 * header is the same and every function returns VQ_ENOSYS saying so.
 *
 * Thread-safety: the communication calls may be called from any thread,
 * but the ordering rule above is about one order of pushes per handle: a
 * program that pushes from several threads must make that order the same
 * on every rank itself. vq_dist_new and vq_dist_free are collective over
 * the communicator and not concurrent with other calls on the handle. */
#ifndef VARQ_DIST_H
#define VARQ_DIST_H

#include <varq/engine.h>
#include <varq/error.h>
#include <varq/graph.h>
#include <varq/tensor.h>

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A communication handle: one MPI communicator used by one engine (see
 * the head of this file). */
typedef struct vq_dist vq_dist;

/* Reductions of allreduce and reduce_scatter. MEAN is the sum divided by
 * the number of ranks (for integers: truncated toward zero). For VQ_BOOL,
 * SUM and MAX are a logical or and MEAN is VQ_EINVAL. */
typedef enum vq_reduce_op {
    VQ_REDUCE_SUM = 0,
    VQ_REDUCE_MEAN = 1,
    VQ_REDUCE_MAX = 2,
} vq_reduce_op;

enum {
    VQ_DIST_NO_CHECK = 1u << 0, /* no signature exchange before collectives */
};

/* Options; zero in a field means the default. */
typedef struct vq_dist_opts {
    const void *comm;  /* points to an MPI_Comm to duplicate; NULL: MPI_COMM_WORLD */
    double timeout_s;  /* seconds an op may wait for the other ranks (0: VARQ_DIST_TIMEOUT,
                        * or 600) */
    unsigned flags;    /* VQ_DIST_* */
} vq_dist_opts;

/* Creates a handle for engine e over a duplicate of *(MPI_Comm *)comm (NULL:
 * MPI_COMM_WORLD), initializing MPI first if needed (see above). Collective:
 * every rank of the communicator calls it. On success *out owns the handle
 * (vq_dist_free). VQ_EINVAL for a NULL argument, an MPI initialized without
 * MPI_THREAD_SERIALIZED, or an MPI already finalized; VQ_EIO when an MPI
 * call fails (the message has MPI's); VQ_ENOSYS without MPI. Not thread-safe
 * against other vq_dist_new / vq_dist_free calls. */
VQ_API int vq_dist_new(vq_dist **out, vq_engine *e, const void *comm);

/* The same with options (NULL: all defaults). VQ_EINVAL also for an
 * unknown flag, a negative or NaN timeout, or a VARQ_DIST_TIMEOUT that is
 * not a positive number. */
VQ_API int vq_dist_new_opts(vq_dist **out, vq_engine *e, const vq_dist_opts *opts);

/* This process's rank and the number of ranks, fixed at creation;
 * thread-safe. -1 for NULL. */
VQ_API int vq_dist_rank(const vq_dist *d);
VQ_API int vq_dist_size(const vq_dist *d);

/* The handle's communicator id: the integer the graph ops' comm attribute
 * names (1 for the first handle a process creates, then 2, ...; an id is
 * reused once its handle is freed). Thread-safe. -1 for NULL. */
VQ_API int vq_dist_id(const vq_dist *d);

/* Frees the handle after its communication ops completed: call it once
 * vq_wait_all (or waits on the tensors) returned; it waits for ops still
 * at the communication thread, but an op pushed and never run (its inputs
 * never ready) would make it wait forever. Frees the duplicated
 * communicator; the last handle of a process whose MPI varq initialized
 * calls MPI_Finalize. Collective. Returns 0, or VQ_EIO for a handle broken
 * by a timeout (then nothing is freed in MPI and MPI is not finalized: the
 * process should exit). NULL is a no-op returning 0. */
VQ_API int vq_dist_free(vq_dist *d);

/* ---- communication ops on tensors ----
 *
 * Each call checks its arguments (NULL, dtypes and element counts that do
 * not fit, a root, peer or tag out of range, more than INT_MAX elements or
 * bytes: VQ_EINVAL; VQ_ENOSYS for a GPU tensor, and for a reduction
 * (allreduce, reduce_scatter) of a dtype other than f32, f64, i32, i64 and
 * bool, which the other calls move as they are) and then pushes one op
 * onto d's engine and returns (having run it, when its inputs were ready:
 * see the top of this file): wait on the written tensors (vq_tensor_wait)
 * or vq_wait_all for the result and for errors that happened in the op
 * (VQ_EIO with MPI's message, the mismatch and failure errors above). The
 * op holds references to its tensors until it is done. Thread-safe in the
 * sense of the ordering rule. Collectives are collective: every rank calls
 * them in the same order. */

/* out = reduction over the ranks of in, elementwise; in and out have the
 * same dtype and element count (shapes may differ); out may be in (then
 * the op writes in place). */
VQ_API int vq_dist_allreduce(vq_dist *d, vq_tensor *in, vq_tensor *out, vq_reduce_op op);

/* t on every rank = t on rank root. Reads and writes t. */
VQ_API int vq_dist_broadcast(vq_dist *d, vq_tensor *t, int root);

/* out = the ranks' in, concatenated in rank order (out has size times in's
 * elements, same dtype). */
VQ_API int vq_dist_allgather(vq_dist *d, vq_tensor *in, vq_tensor *out);

/* The reduction over the ranks of in (size times out's elements), of which
 * this rank gets block rank (out's element count) in out. */
VQ_API int vq_dist_reduce_scatter(vq_dist *d, vq_tensor *in, vq_tensor *out,
                                  vq_reduce_op op);

/* Sends t's bytes to rank dest with tag (0..32767), and receives into t a
 * message from rank src with that tag. Messages between two ranks with
 * one tag arrive in send order. A received message of another byte count
 * than t's fails the recv (VQ_EIO). A send whose input var had failed
 * sends an empty message, so the receiver fails instead of waiting. send
 * reads t (it stays readable by other ops meanwhile); recv writes t. */
VQ_API int vq_dist_send(vq_dist *d, vq_tensor *t, int dest, int tag);
VQ_API int vq_dist_recv(vq_dist *d, vq_tensor *t, int src, int tag);

/* ---- in programs ----
 *
 * Design. The graph ops are ordinary registered ops (vq_op_register, with
 * async CPU kernels that hand the work to the communication thread), so
 * programs holding them save, load, dump and run like any other. A
 * program cannot hold a pointer, so an op names its handle by an integer
 * attribute, comm = vq_dist_id(d): every process numbers its handles in
 * creation order, so the same program file works on every rank and in
 * every run of the job, and the kernel finds the handle in a process-wide
 * table (a run with no live handle of that id fails naming it). The ops
 * are registered by the first vq_dist_new:
 *
 *   allreduce(X...) -> Out...   {comm:int, reduce:string="sum"}
 *   broadcast(X...) -> Out...   {comm:int, root:int=0}
 *   send(X...) -> Out...        {comm:int, peer:int, tag:int=0}
 *   recv(X...) -> Out...        {comm:int, peer:int, tag:int=0}
 *
 * Out[i] has X[i]'s dtype and shape and may be the same var (in place).
 * The X of one op are fused into one message (one MPI call for the
 * bucket); allreduce and broadcast need one dtype for all the X that have
 * elements. send passes X through to Out (the op's output is what later
 * ops can depend on); recv overwrites Out with the message, X giving
 * only the dtypes and shapes. "reduce" is "sum", "mean" or "max".
 *
 * The executor starts an op when its inputs are ready, which is not the
 * same order on every rank. vq_dist_program_add therefore puts before
 * every communication op a small op that numbers it,
 *
 *   dist_ticket(Token, X...) -> (Token, Ticket)   {comm:int}
 *
 * which runs once X (the communication op's inputs) are ready, reads and
 * writes the var "@DIST<id>" (f32 [0], persistable, created by startup),
 * and writes the handle's next sequence number into Ticket (a fresh i64
 * [1] var, "@DIST<id>.ticket<n>"), which the communication op then takes
 * as one more input after its X (it has one output fewer than inputs).
 * The token chains the numbering in program order, run after run, and the
 * communication thread starts the MPI calls in number order: the ordering
 * rule holds by construction, and since the token is free again as soon
 * as a number is taken, the next op starts while the previous one's data
 * is still moving (bucket after bucket). Communication ops added with
 * vq_program_add_op directly (no Ticket input: numbered when their kernel
 * starts) are not ordered; the signature check catches the mismatches it
 * can.
 *
 * A failure on one rank in a program run makes that rank skip its later
 * ops, communication included: the other ranks then fail by timeout
 * (above), not silently. */

/* Appends communication op type ("allreduce", "broadcast", "send" or
 * "recv") of handle d to block 0 of main, with inputs in and outputs out
 * (var names, n of each), the attribute comm set to d's id plus attrs
 * (the others: reduce, root, peer, tag), after its dist_ticket op (the
 * token declared in main and startup, and created by an op appended to
 * startup, the first time; the ticket var declared in main). Returns the
 * communication op's index (its dist_ticket is the one before) or a
 * negative error
 * (VQ_EINVAL naming what is wrong). Not thread-safe (programs are built by
 * one thread). */
VQ_API int vq_dist_program_add(vq_program *main, vq_program *startup, vq_dist *d,
                               const char *type, const char *const *in,
                               const char *const *out, int n, const vq_attr *attrs,
                               int nattrs);

/* Data parallelism, for a main program on which vq_optimizer_minimize has
 * run (so it holds the backward and the updates).
 *
 * Each rank feeds its shard of every global batch. The pass finds every
 * parameter gradient "w@GRAD", orders them by the position of their last
 * write in the backward (the last layers' first), packs them greedily into
 * buckets of at most bucket_bytes (a larger gradient is a bucket alone),
 * and inserts for each bucket one allreduce (mean) op right after the op
 * that writes the bucket's last gradient: the engine starts it as soon as
 * the bucket is complete, so the late layers' all-reduce overlaps the
 * backward of the early ones, as in Horovod and PyTorch DDP. The updates
 * then see the mean gradient over the ranks, which for equal shards is the
 * gradient of the global batch. The bucket ops get engine priority
 * `priority` (higher starts first among ready ops). To startup it appends
 * a broadcast from rank 0 of every persistable float var startup writes
 * (parameters and optimizer state), so every rank starts from rank 0's
 * values.
 *
 * Returns the number of buckets, or a negative error: VQ_EINVAL for NULL
 * arguments or a gradient read before the last of its bucket is written;
 * VQ_ENOSYS for a block 0 with control flow (cond, while: their block
 * indices would shift). Edits both programs: not thread-safe, like every
 * program builder; run it once, before the programs are prepared. */
typedef struct vq_dist_dp_opts {
    size_t bucket_bytes; /* 0: 1 MiB */
    int priority;        /* engine priority of the bucket ops; 0: 100 */
} vq_dist_dp_opts;

/* Inserts the gradient all-reduces into main and the broadcasts into
 * startup, as described above vq_dist_dp_opts; opts may be NULL (the
 * defaults). */
VQ_API int vq_dist_data_parallel(vq_program *main, vq_program *startup, vq_dist *d,
                                 const vq_dist_dp_opts *opts);

#ifdef __cplusplus
}
#endif
#endif
