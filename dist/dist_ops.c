/* The dist module's imperative calls (include/varq/dist.h): each checks
 * its arguments, builds a vq__comm, numbers it in its handle's order and
 * pushes it as an async engine op (VQ_PROP_RUN_ON_FAILED, so that a rank
 * whose input failed still takes part and tells the others). When the
 * engine runs it, it notes whether its inputs carry a failure and hands it
 * to the communication thread (dist.c); the engine's arg_free frees it. */
#include "dist_internal.h"

#include "engine_services.h" /* a var's carried failure */
#include "tensor_services.h" /* a tensor's failure message (fail_msg) */

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void comm_free(void *arg)
{
    vq__comm *c = arg;
    for (int i = 0; i < c->n; i++) {
        if (c->out[i] != c->in[i])
            vq_tensor_release(c->out[i]);
        vq_tensor_release(c->in[i]);
    }
    if (c->own_buf)
        free(c->buf);
    free(c);
}

static void end_skip(vq__comm *c, int err)
{
    (void)err;
    free(c);
}

static void end_engine(vq__comm *c, int err)
{
    if (err) { /* the message, for vq_tensor_wait on what the op writes */
        for (int i = 0; i < c->n; i++) {
            if (c->kind == VQ__COMM_SEND)
                break;
            char *msg = vq__strdup(vq_errmsg());
            free(atomic_exchange(&c->out[i]->fail_msg, msg));
        }
    }
    vq_done_finish(c->end_arg, err);
}

static bool var_failed(vq_tensor *t, vq_engine *e)
{
    /* The op has its turn on t's var: earlier writers completed and
     * stored their error before granting it (the queue orders it). */
    vq_var *v = vq_tensor_var(t, e);
    return v && vq__var_error(v) != 0;
}

/* The engine runs the op: note a failed input, hand it over.
 * hot path: no malloc, no global lock */
static void comm_run(void *arg, const vq_exec_ctx *x, vq_done *done)
{
    (void)x;
    vq__comm *c = arg;
    c->end_arg = done;
    for (int i = 0; i < c->n; i++)
        if (var_failed(c->in[i], c->d->e) ||
            (c->kind == VQ__COMM_BROADCAST && var_failed(c->out[i], c->d->e)))
            c->local_err = 1;
    vq__comm_submit(c);
}

static int check_tensor(const char *fn, vq_tensor *t, const char *which)
{
    if (!t)
        return vq__fail(VQ_EINVAL, "%s: %s is NULL", fn, which);
    if (vq_tensor_device(t).kind != VQ_DEV_CPU)
        return vq__fail(VQ_ENOSYS, "%s: %s is on a GPU: copy it to the CPU first "
                                   "(vq_tensor_copy_to), varq communicates host memory",
                        fn, which);
    if (vq_tensor_numel(t) > INT_MAX || vq_tensor_nbytes(t) > INT_MAX)
        return vq__fail(VQ_EINVAL, "%s: %s has %lld elements, more than one MPI call moves",
                        fn, which, (long long)vq_tensor_numel(t));
    return 0;
}

/* Builds the vq__comm of one imperative call (in and out retained). */
static int comm_make(vq_dist *d, int kind, vq_tensor *in, vq_tensor *out, vq__comm **res)
{
    vq__comm *c = vq__calloc(1, sizeof *c);
    if (!c)
        return vq__fail(VQ_ENOMEM, "dist: out of memory");
    c->d = d;
    c->kind = kind;
    c->n = 1;
    c->in[0] = vq_tensor_retain(in);
    c->out[0] = out == in ? in : vq_tensor_retain(out);
    c->dtype = vq_tensor_dtype(in);
    c->end = end_engine;
    *res = c;
    return 0;
}

/* Numbers c and pushes it: reads in, writes out (send writes nothing).
 * An op whose inputs are ready at its push is run by this thread at once
 * (start_here in dist.c says how far it carries it): no worker is woken
 * for it and none hands it back, which is most of a small op's latency. */
static int comm_push(vq__comm *c)
{
    vq_dist *d = c->d;
    vq_var *r = vq_tensor_var(c->in[0], d->e);
    vq_var *w = c->kind == VQ__COMM_SEND ? NULL : vq_tensor_var(c->out[0], d->e);
    if (!r || (c->kind != VQ__COMM_SEND && !w)) {
        comm_free(c);
        return VQ_EINVAL; /* vq_tensor_var said why: a tensor of another engine */
    }
    vq_task t = {.async_fn = comm_run, .arg = c, .arg_free = comm_free, .reads = &r,
                 .nreads = 1, .writes = &w, .nwrites = w ? 1 : 0,
                 .props = VQ_PROP_RUN_ON_FAILED, .name = vq__comm_kind_name(c->kind)};
    pthread_mutex_lock(&d->push_lock);
    c->seq = vq__dist_next_seq(d);
    snprintf(c->what, sizeof c->what, "%s #%llu", vq__comm_kind_name(c->kind),
             (unsigned long long)c->seq);
    /* Held until push_lock is released: then, if its inputs are ready,
     * this thread runs it at once (start_here) instead of a worker. */
    void *held = NULL;
    int rc = vq__push_held(d->e, &t, &held);
    if (rc < 0) {
        /* The number is taken: the thread must see it to go past it. */
        char msg[256];
        snprintf(msg, sizeof msg, "%s", vq_errmsg());
        for (int i = 0; i < c->n; i++) {
            if (c->out[i] != c->in[i])
                vq_tensor_release(c->out[i]);
            vq_tensor_release(c->in[i]);
            c->in[i] = c->out[i] = NULL;
        }
        c->n = 0;
        c->kind = VQ__COMM_SKIP;
        c->end = end_skip;
        vq__comm_submit(c);
        vq__fail(rc, "%s", msg);
    }
    pthread_mutex_unlock(&d->push_lock);
    if (held) {
        vq__comm_releasing = c; /* c may be freed in the call: only compared */
        vq__push_release(d->e, held);
        vq__comm_releasing = NULL;
    }
    return rc;
}

static int check_red(const char *fn, vq_reduce_op op, vq_dtype dt)
{
    if ((unsigned)op > VQ_REDUCE_MAX)
        return vq__fail(VQ_EINVAL, "%s: reduction %d is not a vq_reduce_op", fn, (int)op);
    if (op == VQ_REDUCE_MEAN && dt == VQ_BOOL)
        return vq__fail(VQ_EINVAL, "%s: the mean of bool tensors is not defined", fn);
    /* MPI has no sum of f16 or bf16, and divide() knows the first five */
    if (dt > VQ_BOOL)
        return vq__fail(VQ_ENOSYS,
                        "%s: dtype %s is not supported by reductions (f32, f64, i32, "
                        "i64, bool; broadcast, allgather, send and recv move any dtype)",
                        fn, vq_dtype_name(dt));
    return 0;
}

VQ_API int vq_dist_allreduce(vq_dist *d, vq_tensor *in, vq_tensor *out, vq_reduce_op op)
{
    const char *fn = "vq_dist_allreduce";
    int rc;
    if (!d)
        return vq__fail(VQ_EINVAL, "%s: handle is NULL", fn);
    if ((rc = check_tensor(fn, in, "in")) < 0 || (rc = check_tensor(fn, out, "out")) < 0)
        return rc;
    if (vq_tensor_dtype(in) != vq_tensor_dtype(out) || vq_tensor_numel(in) != vq_tensor_numel(out))
        return vq__fail(VQ_EINVAL, "%s: in (%s, %lld elements) and out (%s, %lld) differ", fn,
                        vq_dtype_name(vq_tensor_dtype(in)), (long long)vq_tensor_numel(in),
                        vq_dtype_name(vq_tensor_dtype(out)), (long long)vq_tensor_numel(out));
    if ((rc = check_red(fn, op, vq_tensor_dtype(in))) < 0)
        return rc;
    vq__comm *c = NULL;
    if ((rc = comm_make(d, VQ__COMM_ALLREDUCE, in, out, &c)) < 0)
        return rc;
    c->red = op;
    return comm_push(c);
}

VQ_API int vq_dist_broadcast(vq_dist *d, vq_tensor *t, int root)
{
    const char *fn = "vq_dist_broadcast";
    int rc;
    if (!d)
        return vq__fail(VQ_EINVAL, "%s: handle is NULL", fn);
    if ((rc = check_tensor(fn, t, "t")) < 0)
        return rc;
    if (root < 0 || root >= d->size)
        return vq__fail(VQ_EINVAL, "%s: root %d is not a rank (0..%d)", fn, root, d->size - 1);
    vq__comm *c = NULL;
    if ((rc = comm_make(d, VQ__COMM_BROADCAST, t, t, &c)) < 0)
        return rc;
    c->peer = root;
    return comm_push(c);
}

/* allgather and reduce_scatter: in has size times out's elements or the
 * other way round. */
static int gather_scatter(vq_dist *d, int kind, vq_tensor *in, vq_tensor *out, vq_reduce_op op)
{
    const char *fn = kind == VQ__COMM_ALLGATHER ? "vq_dist_allgather" : "vq_dist_reduce_scatter";
    int rc;
    if (!d)
        return vq__fail(VQ_EINVAL, "%s: handle is NULL", fn);
    if ((rc = check_tensor(fn, in, "in")) < 0 || (rc = check_tensor(fn, out, "out")) < 0)
        return rc;
    if (in == out)
        return vq__fail(VQ_EINVAL, "%s: in and out are the same tensor", fn);
    int64_t small = vq_tensor_numel(kind == VQ__COMM_ALLGATHER ? in : out);
    int64_t big = vq_tensor_numel(kind == VQ__COMM_ALLGATHER ? out : in);
    if (vq_tensor_dtype(in) != vq_tensor_dtype(out) || big != small * d->size)
        return vq__fail(VQ_EINVAL, "%s: %s must have %d times the elements of %s, of the same "
                                   "dtype (in: %s, %lld; out: %s, %lld)",
                        fn, kind == VQ__COMM_ALLGATHER ? "out" : "in", d->size,
                        kind == VQ__COMM_ALLGATHER ? "in" : "out",
                        vq_dtype_name(vq_tensor_dtype(in)), (long long)vq_tensor_numel(in),
                        vq_dtype_name(vq_tensor_dtype(out)), (long long)vq_tensor_numel(out));
    if (kind == VQ__COMM_REDUCE_SCATTER && (rc = check_red(fn, op, vq_tensor_dtype(in))) < 0)
        return rc;
    vq__comm *c = NULL;
    if ((rc = comm_make(d, kind, in, out, &c)) < 0)
        return rc;
    c->red = op;
    return comm_push(c);
}

VQ_API int vq_dist_allgather(vq_dist *d, vq_tensor *in, vq_tensor *out)
{
    return gather_scatter(d, VQ__COMM_ALLGATHER, in, out, VQ_REDUCE_SUM);
}

VQ_API int vq_dist_reduce_scatter(vq_dist *d, vq_tensor *in, vq_tensor *out, vq_reduce_op op)
{
    return gather_scatter(d, VQ__COMM_REDUCE_SCATTER, in, out, op);
}

static int point_to_point(vq_dist *d, int kind, vq_tensor *t, int peer, int tag)
{
    const char *fn = kind == VQ__COMM_SEND ? "vq_dist_send" : "vq_dist_recv";
    int rc;
    if (!d)
        return vq__fail(VQ_EINVAL, "%s: handle is NULL", fn);
    if ((rc = check_tensor(fn, t, "t")) < 0)
        return rc;
    if (peer < 0 || peer >= d->size)
        return vq__fail(VQ_EINVAL, "%s: rank %d is not a rank (0..%d)", fn, peer, d->size - 1);
    if (tag < 0 || tag > 32767)
        return vq__fail(VQ_EINVAL, "%s: tag %d is outside 0..32767", fn, tag);
    vq__comm *c = NULL;
    if ((rc = comm_make(d, kind, t, t, &c)) < 0)
        return rc;
    c->peer = peer;
    c->tag = tag;
    return comm_push(c);
}

VQ_API int vq_dist_send(vq_dist *d, vq_tensor *t, int dest, int tag)
{
    return point_to_point(d, VQ__COMM_SEND, t, dest, tag);
}

VQ_API int vq_dist_recv(vq_dist *d, vq_tensor *t, int src, int tag)
{
    return point_to_point(d, VQ__COMM_RECV, t, src, tag);
}
