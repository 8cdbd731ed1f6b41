/* Private surface of the dist module (include/varq/dist.h): the handle,
 * the one description of a communication op that both the imperative
 * calls (dist_ops.c) and the graph kernels (dist_graph.c) hand to the
 * communication thread (dist.c), and the functions between the files.
 *
 * Life of a vq__comm: made by the caller (dist.c's vq_dist_* or a graph
 * kernel), numbered (seq) in its handle's order, submitted by
 * vq__comm_submit once the engine runs the op, started in seq order (by
 * the submitting thread when nothing is ahead of it, else by the
 * communication thread), polled, and ended by calling end(c, err),
 * which finishes the engine op (and frees c, or lets the engine's
 * arg_free do it). */
#ifndef VARQ_DIST_INTERNAL_H
#define VARQ_DIST_INTERNAL_H

#include <varq/dist.h>

#include <mpi.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

enum vq__comm_kind {
    VQ__COMM_SKIP = 0, /* a number taken by a push that failed: nothing to do */
    VQ__COMM_ALLREDUCE,
    VQ__COMM_BROADCAST,
    VQ__COMM_ALLGATHER,
    VQ__COMM_REDUCE_SCATTER,
    VQ__COMM_SEND,
    VQ__COMM_RECV,
};

#define VQ__COMM_MAX_T 64 /* tensors of one fused op (VQ_OP_MAX_SLOTS) */

typedef struct vq__comm vq__comm;
struct vq__comm {
    vq__comm *next;       /* in the incoming stack, then the handle's waiting list */
    vq_dist *d;
    uint64_t seq;         /* the op's number in d's order */
    int kind;             /* enum vq__comm_kind */
    vq_reduce_op red;
    int peer;             /* root (broadcast), dest or src (send, recv) */
    int tag;
    vq_dtype dtype;       /* of the tensors with elements */
    /* The tensors: n inputs and n outputs (out[i] may be in[i]); for
     * allgather and reduce_scatter n is 1 and in and out differ in size. */
    int n;
    vq_tensor *in[VQ__COMM_MAX_T], *out[VQ__COMM_MAX_T];
    int local_err;        /* this rank's input carried a failure */
    /* Ends the op with err (vq_errmsg() set in the calling thread). */
    void (*end)(vq__comm *c, int err);
    void *end_arg;        /* the engine's vq_done or the kernel's vq_op_done */
    /* The communication thread's state. */
    /* 0 not started, 1 signature exchange, 2 data, 3 data to move by the
     * blocking call (on the communication thread) */
    int stage;
    MPI_Request req;
    int64_t sig[14];      /* 7 fields and their negations, reduced by MAX */
    bool blocking;        /* the ranks agreed to move the data by a blocking call */
    void *buf;            /* fusion buffer (malloc'd), or an output's bytes */
    bool own_buf;
    size_t count;         /* elements per rank in buf (bytes for send, recv) */
    double t_start;       /* monotonic seconds when started */
    int err;              /* how it ended, and why (kept while G.mpi is released) */
    char msg[256];
    char what[48];        /* "allreduce #12" for messages */
};

/* A handle. Fields above the line are fixed at creation or atomic; the
 * ones below are read and written under G.mpi only (dist.c): by the
 * communication thread, or by a submitter starting an op itself. */
struct vq_dist {
    vq_engine *e;
    MPI_Comm comm;
    int rank, size, id;
    unsigned flags;
    double timeout_s;
    pthread_mutex_t push_lock; /* push order == seq order for the imperative calls */
    atomic_uint_fast64_t next_seq;
    atomic_int outstanding;    /* submitted to the thread and not ended */
    atomic_bool broken;        /* a collective timed out: the communicator is unusable */
    /* ---- under G.mpi: */
    uint64_t next_issue;       /* seq of the next op to start */
    uint64_t ncollectives;     /* collectives started: the signature's first field */
    /* The collective whose signature exchange is out, or NULL. The next op
     * starts only after it has started its data call: data calls then start
     * in seq order on every rank, whichever exchange completes first. */
    vq__comm *in_exchange;
    vq__comm *waiting;         /* arrived early, sorted by seq */
    /* Since when (monotonic s) ops have been waiting while the one
     * numbered next_issue has not arrived; 0 when not. */
    double gap_since;
};

/* "allreduce", "send", ... for messages and traces; static strings. */
const char *vq__comm_kind_name(int kind);
/* Numbers c in d's order (the next seq). */
uint64_t vq__dist_next_seq(vq_dist *d);
/* Starts c here when nothing is ahead of it (and may end it here: then c
 * may be freed on return), else hands it to the communication thread.
 * Thread-safe; no lock held by the caller that an op takes (it is called
 * from engine ops, and may finish the engine op inside the call). */
void vq__comm_submit(vq__comm *c);
/* The op that the calling thread, its pusher, is releasing (comm_push):
 * if it runs here, vq__comm_submit is called by the thread that pushed
 * it, outside the engine's ops, which may carry it further than a worker
 * (start_here says how far). NULL otherwise. */
extern _Thread_local const vq__comm *vq__comm_releasing;
/* The handle of communicator id, or NULL. Thread-safe. */
vq_dist *vq__dist_lookup(int id);
/* Registers the graph ops once per process (dist_graph.c). */
int vq__dist_graph_register(void);

#endif
