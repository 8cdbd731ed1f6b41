/* The executor's runs: a run of a prepared plan (plan.c) is a sequence of
 * pushes, and this file holds both the pushing and the bodies of the
 * engine ops it pushes (kernel ops and segments, feed binds, the final
 * op), with vq_exec_run and vq_exec_run_async.
 *
 * A run pushes one bind op per feed, then every op of block 0 in program
 * order, then one final op that reads the fetched vars and reports. The
 * engine's var queues do all the ordering. A cond or while op is pushed as
 * two halves that push the ops of its blocks when its predicate is known
 * (control.c); the frames that hold each block's values are described in
 * plan.h.
 *
 * Which run an op execution of block 0 belongs to: every run pushes every
 * op once, in run order (runs push under the plan's lock), and an op's
 * executions are ordered by the engine (each op writes a var), so the n-th
 * execution of an op belongs to the n-th run of the plan. Runs sit in a
 * ring indexed by their sequence number; an op counts its own executions.
 * (The ops of other blocks belong to the run of their control op's
 * instance, which runs one execution at a time.)
 *
 * Errors inside a run never reach the engine: a failing kernel records the
 * run's first error (with the op's index and type) and returns 0; later ops
 * of the same run see the error and only do their bookkeeping. So no var is
 * ever left failed, other runs in flight are unaffected and the plan stays
 * usable. Every op of a plan is pushed with VQ_PROP_RUN_ON_FAILED: a
 * failure some other op left on a scope tensor's var must not make the
 * engine skip one (the count of executions above would break and the run
 * would never report).
 *
 * A push that fails (vq_push_opr's VQ_ENOMEM: the engine's pools could not
 * grow) fails the run the same way, and the frame's remaining ops are not
 * pushed; the frame's tail (the final op, or a loop's step or exit) still
 * is, so that the run reports. Those ops then lag one execution behind the
 * others, which breaks the count above for later runs: the plan is retired
 * (struct plan's broken), and the next run prepares a new one. */
#include "graph_internal.h"
#include "memplan.h"
#include "plan.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RING VQ__RUN_RING

static bool metas_equal(const vq__meta *a, const vq__meta *b)
{
    return a->dtype == b->dtype && a->ndim == b->ndim &&
           !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]);
}

/* ---- run-time bookkeeping (inside engine ops) ---- */

static void note_live(struct run *r, struct plan *pl, size_t add)
{
    size_t live = atomic_fetch_add_explicit(&pl->live, add, memory_order_relaxed) + add;
    size_t p = atomic_load_explicit(&r->peak, memory_order_relaxed);
    while (live > p && !atomic_compare_exchange_weak_explicit(&r->peak, &p, live,
                                                               memory_order_relaxed,
                                                               memory_order_relaxed))
        ;
}

/* Drops the value of v held by the plan. Only for non-persistable vars.
 * stream: that of the GPU op dropping it (the storage is freed in stream
 * order after the op's work, which follows every other use), or NULL. */
void vq__slot_drop(struct plan *pl, struct pvar *v, void *stream)
{
    if (!v->value)
        return;
    if (!v->in_arena)
        atomic_fetch_sub_explicit(&pl->live, v->value->nbytes, memory_order_relaxed);
    vq__tensor_release_on(v->value, stream);
    v->value = NULL;
    v->borrowed = false;
    v->in_arena = false;
}

void vq__slot_set(struct run *r, struct plan *pl, struct pvar *v, vq_tensor *t)
{
    vq__slot_drop(pl, v, NULL);
    v->value = t;
    if (t)
        note_live(r, pl, t->nbytes); /* every slot holding it counts it */
}

void vq__run_fail(struct run *r, const struct pop *t, int err, const char *msg)
{
    int none = 0;
    if (!atomic_compare_exchange_strong(&r->err, &none, err))
        return;
    if (t->block)
        snprintf(r->msg, sizeof r->msg, "block %d op %d (%s): %s", t->block, t->index,
                 t->src->type, msg);
    else
        snprintf(r->msg, sizeof r->msg, "op %d (%s): %s", t->index, t->src->type, msg);
}

bool vq__run_stopping(struct run *r, const struct pop *t, int64_t iter)
{
    int stop = atomic_load_explicit(&r->stop, memory_order_relaxed);
    if (!stop && r->deadline_ns && vq__now_ns() >= r->deadline_ns)
        stop = VQ_ETIMEDOUT;
    if (!stop)
        return false;
    char msg[160];
    int n = stop == VQ_ECANCELED
                ? snprintf(msg, sizeof msg, "the run was cancelled (vq_exec_cancel)")
                : snprintf(msg, sizeof msg, "the run's deadline passed (timeout_ms %d)",
                           r->plan->exec->timeout_ms);
    if (iter >= 0 && n > 0 && (size_t)n < sizeof msg)
        snprintf(msg + n, sizeof msg - (size_t)n, ", at iteration %lld", (long long)iter);
    vq__run_fail(r, t, stop, msg);
    return true;
}

struct run *vq__fop_run(struct fop *f)
{
    if (f->fr->owner)
        return f->fr->owner->run;
    return f->t->plan->ring[f->execs++ % RING];
}

/* After the kernel (or instead of it, when the run has failed): the inputs
 * this op counted are read. */
void vq__fop_inputs_done(struct fop *f, void *stream)
{
    struct plan *pl = f->t->plan;
    for (int i = 0; i < f->t->nin; i++) {
        if (!f->t->in_counts[i])
            continue;
        struct pvar *v = f->in[i];
        /* acq_rel: the last reader sees the others' reads done. A fetched
         * version never gets here: its count includes the final op. A
         * count of 1 is this op's own: the others are done (acquire: as
         * their releases), so no read-modify-write. */
        if (atomic_load_explicit(&v->readers_left, memory_order_acquire) == 1) {
            atomic_store_explicit(&v->readers_left, 0, memory_order_relaxed);
            vq__slot_drop(pl, v, stream);
        } else if (atomic_fetch_sub_explicit(&v->readers_left, 1, memory_order_acq_rel) == 1) {
            vq__slot_drop(pl, v, stream);
        }
    }
}

/* Sets output j's new version in place: value, counter, immediate release
 * of a value nobody reads. in_arena: t is a header on the run's arena. */
static void output_done(struct fop *f, int j, vq_tensor *t, bool in_arena, void *stream)
{
    struct plan *pl = f->t->plan;
    struct pvar *v = f->out[j];
    if (v->persistable)
        return; /* the scope tensor, written in place */
    if (v->value != t) {
        vq__slot_drop(pl, v, stream);
        v->value = t; /* the reference vq__op_exec took */
        v->in_arena = in_arena;
    }
    atomic_store_explicit(&v->readers_left, f->t->out_readers[j], memory_order_relaxed);
    if (f->t->out_readers[j] == 0)
        vq__slot_drop(pl, v, stream); /* nobody reads it and it is not fetched */
}

static bool is_in_place(const vq__pop *src, int j)
{
    for (int i = 0; i < src->nin; i++)
        if (src->in[i] == src->out[j])
            return true;
    return false;
}

/* VQ_EXEC_CHECK_NAN: the first NaN or infinity in op's float outputs, in
 * host memory. */
static int check_finite(const struct pop *op, vq_tensor *const *out)
{
    const vq__pop *src = op->src;
    for (int j = 0; j < src->nout; j++) {
        double v;
        int64_t i = vq__first_nonfinite(out[j], &v);
        if (i >= 0)
            return vq__nonfinite_fail(vq__op_out_slot(op->def, j),
                                      op->plan->prog->vars[src->out[j]].name, v, i);
    }
    return 0;
}

/* The same on a GPU stream: a check after the kernel's work for each float
 * output, which fails the run through the call's defer hook (ops' gpu.c). */
static int check_finite_gpu(const struct pop *op, const vq__kcall *k)
{
    int err = 0;
    for (int j = 0; j < op->src->nout && err == 0; j++)
        if (k->out[j]->dtype == VQ_F32 || k->out[j]->dtype == VQ_F64)
            err = vq__gpu_check_finite(k, j, op->plan->prog->vars[op->src->out[j]].name);
    return err;
}

/* Output j of an in-place op is the very tensor its input of the same var
 * held (not a new one: the input was not borrowed). */
static bool kept_live(const vq__pop *src, int j, vq_tensor *const *out, vq_tensor *const *in)
{
    for (int i = 0; i < src->nin; i++)
        if (src->in[i] == src->out[j] && in[i] == out[j])
            return true;
    return false;
}

/* The run failed: an op's outputs hold no stale values, and their
 * counters stay right for the readers that will skip too. */
static void skip_outputs(struct fop *f, void *stream)
{
    const vq__pop *src = f->t->src;
    for (int j = 0; j < src->nout; j++) {
        struct pvar *v = f->out[j];
        if (!v->persistable) {
            if (!is_in_place(src, j))
                vq__slot_drop(f->t->plan, v, stream);
            atomic_store_explicit(&v->readers_left, f->t->out_readers[j], memory_order_relaxed);
        }
    }
}

/* A GPU kernel's error found on the device (stream work of op's kernel,
 * which runs before the run's final op synchronizes the GPU work). */
static void op_defer_fail(void *user, void *tag, int err, const char *msg)
{
    vq__run_fail(user, tag, err, msg);
}

/* One execution of a kernel op: its tensors and params, from the start of
 * vq__op_exec to the end of its kernel. On vq__op_exec's stack for sync kernels;
 * on the heap while an async kernel is out (it may finish on any thread,
 * after vq__op_exec_async returned). */
struct op_state {
    vq_op_done done;       /* async kernels: finishing it ends the op */
    vq_done *engine_done;  /* ... and then this engine op */
    struct fop *f;
    struct run *run;       /* f's run: vq__fop_run(f), taken once per execution */
    int nout;              /* outputs made so far */
    const void *params;
    vq_tensor *in[VQ__MAX_SLOTS], *out[VQ__MAX_SLOTS];
    _Alignas(16) unsigned char pbuf[VQ__MAX_PARAMS];
};

enum { OP_SKIP = 1 }; /* op_begin: the run failed before this op: nothing to do */

/* Everything before the kernel: the inputs, inference with the real
 * shapes (unless preparation knew them all), the outputs. Returns 0 when
 * the kernel may run, OP_SKIP, or an error for op_end. */
static int op_begin(struct op_state *s, void *stream)
{
    struct fop *f = s->f;
    const struct pop *op = f->t;
    struct plan *pl = op->plan;
    const vq__pop *src = op->src;
    struct run *r = s->run;
    vq__meta im[VQ__MAX_SLOTS], om[VQ__MAX_SLOTS];
    int werr = vq_op_wait_error();
    if (werr)
        vq__run_fail(r, op, werr, vq_errmsg());
    if (atomic_load_explicit(&r->err, memory_order_acquire) || vq__run_stopping(r, op, -1))
        return OP_SKIP;
    for (int i = 0; i < src->nin; i++) {
        s->in[i] = f->in[i]->value;
        if (!s->in[i]) {
            vq__run_fail(r, op, VQ_EINVAL,
                         "an input has no value (an earlier op of the run failed)");
            return OP_SKIP;
        }
    }
    /* Shapes may differ from run to run (feeds with other batch sizes):
     * unless preparation knew them all, infer with the real ones.
     * Attributes were checked at preparation. */
    s->params = s->pbuf;
    int err = 0;
    const vq__meta *outm = om; /* the output metas: om, or read in place */
    if (op->fixed) {
        outm = op->fixed;
        s->params = op->fixed + src->nout;
    } else {
        for (int i = 0; i < src->nin; i++)
            vq__meta_of_tensor(&im[i], s->in[i]);
        vq__meta *cache = f->infer_cache;
        /* an op whose shapes depend on its inputs' values infers every
         * time, with those values (GPU ones copied to the host: the
         * inputs' writers are done, as for a loop's predicate) */
        bool values = vq__reads_values(op->def, src->nin);
        bool hit = cache != NULL && !values;
        for (int i = 0; hit && i < src->nin; i++)
            hit = metas_equal(&cache[i], &im[i]);
        if (hit) { /* the shapes of the last execution: its inference holds */
            outm = cache + src->nin;
            s->params = cache + src->nin + src->nout;
        } else {
            memset(s->pbuf, 0, op->def->params_size);
            memset(om, 0, (size_t)src->nout * sizeof om[0]);
            vq_tensor *val[VQ__MAX_SLOTS];
            if (values)
                err = vq__values_host(op->def, s->in, src->nin, stream, val);
            vq__infer c = {.def = op->def,
                           .attrs = src->attrs,
                           .nattrs = src->nattrs,
                           .nin = src->nin,
                           .in = im,
                           .nout = src->nout,
                           .out = om,
                           .params = s->pbuf,
                           .val = values ? val : NULL};
            if (err == 0)
                err = op->def->infer(&c);
            if (values)
                vq__values_release(op->def, s->in, src->nin, val);
            /* what preparation could not check: the shapes the program
             * declares for the outputs, against the real ones */
            for (int j = 0; err == 0 && j < src->nout; j++)
                if (!vq__meta_compatible(&om[j], &pl->vars[src->out[j]].meta)) {
                    char a[140], d[140];
                    vq__meta_str(a, sizeof a, &om[j]);
                    vq__meta_str(d, sizeof d, &pl->vars[src->out[j]].meta);
                    err = vq__fail(VQ_EINVAL,
                                   "output %s (slot %d) var %s: the run's inputs give "
                                   "%s, the program declares %s",
                                   vq__op_out_slot(op->def, j), j, pl->prog->vars[src->out[j]].name,
                                   a, d);
                }
            /* an op reading values infers on every execution: no cache */
            size_t metas = (size_t)(src->nin + src->nout) * sizeof *cache;
            if (err == 0 && !cache && !values)
                cache = f->infer_cache = vq__malloc(metas + op->def->params_size);
            if (err == 0 && cache && !values) { /* no room: infer again next time */
                memcpy(cache, im, (size_t)src->nin * sizeof *cache);
                memcpy(cache + src->nin, om, (size_t)src->nout * sizeof *cache);
                memcpy(cache + src->nin + src->nout, s->pbuf, op->def->params_size);
            }
        }
    }
    for (; err == 0 && s->nout < src->nout; s->nout++) {
        int j = s->nout;
        struct pvar *v = f->out[j];
        vq_tensor *cur = v->value;
        /* in place: the var's own tensor, unless it is borrowed (a feed
         * stays the caller's: the op writes a new one) */
        if (v->persistable || (is_in_place(src, j) && !v->borrowed)) {
            bool fits =
                cur && cur->dtype == outm[j].dtype && cur->ndim == outm[j].ndim &&
                !memcmp(cur->shape, outm[j].shape, (size_t)cur->ndim * sizeof cur->shape[0]);
            if (!fits) {
                err = vq__fail(VQ_EINVAL, "output %s (slot %d) would change %s's shape or dtype",
                               vq__op_out_slot(op->def, j), j,
                               pl->prog->vars[src->out[j]].name);
                break;
            }
            s->out[j] = vq_tensor_retain(cur);
        } else if ((cur = vq__memplan_tensor(pl, r->mem, src->out[j]))) {
            /* the run's arena (memplan.c): fixed metas, so the header fits */
            s->out[j] = vq_tensor_retain(cur);
        } else {
            err = vq__tensor_empty_at(&s->out[j], pl->exec->device, outm[j].dtype, outm[j].ndim,
                                      outm[j].shape, stream);
            if (err)
                break;
            note_live(r, pl, s->out[j]->nbytes);
        }
    }
    return err;
}

/* A kernel call for s, on x's device. Called once per execution whose
 * kernel runs: a random op's key counts them (struct fop's draws). A
 * fop's executions never overlap (each writes its outputs' vars, and the
 * next waits for it), so the n-th gets the n-th key whatever the worker
 * count, and two executors with one seed making the same runs draw the
 * same numbers. */
static vq__kcall op_kcall(struct op_state *s, const vq_exec_ctx *x)
{
    const struct pop *op = s->f->t;
    vq__kcall k = {.def = op->def,
                   .params = s->params,
                   .in = s->in,
                   .nin = op->src->nin,
                   .out = s->out,
                   .nout = op->src->nout,
                   .x = x,
                   .defer = op_defer_fail,
                   .defer_user = s->run,
                   .defer_tag = (void *)op};
    if (op->def->flags & VQ__RANDOM)
        k.rng = vq__rng_fold(s->f->rng_key, s->f->draws++);
    return k;
}

/* Everything after the kernel (or after op_begin, when err or OP_SKIP
 * says the kernel did not run): the NaN check, the outputs handed to the
 * vars and the inputs' counters, or on failure the run failed and the
 * outputs dropped. */
static void op_end(struct op_state *s, int err, void *stream)
{
    struct fop *f = s->f;
    const struct pop *op = f->t;
    struct plan *pl = op->plan;
    const vq__pop *src = op->src;
    if (err == OP_SKIP)
        goto skip;
    if (err == 0 && pl->exec->check_nan && !stream)
        err = check_finite(op, s->out);
    if (err) {
        vq__run_fail(s->run, op, err, vq_errmsg());
        for (int j = 0; j < s->nout; j++) {
            struct pvar *v = f->out[j];
            if (s->out[j] != v->value && !v->persistable &&
                s->out[j] != vq__memplan_tensor(pl, s->run->mem, src->out[j]))
                atomic_fetch_sub_explicit(&pl->live, s->out[j]->nbytes, memory_order_relaxed);
            vq__tensor_release_on(s->out[j], stream);
        }
        goto skip;
    }
    /* The versions read first: an in-place op read the version its output
     * replaces (when that was the last read, the slot lets go of the
     * tensor, which the op's own reference keeps for the output). */
    vq__fop_inputs_done(f, stream);
    for (int j = 0; j < src->nout; j++) {
        struct pvar *v = f->out[j];
        if (v->persistable || v->value == s->out[j]) {
            vq_tensor_release(s->out[j]); /* the slot already holds it */
        } else if (!v->value && kept_live(src, j, s->out, s->in)) {
            /* written in place into the tensor just let go: counted again */
            note_live(s->run, pl, s->out[j]->nbytes);
        }
        output_done(f, j, s->out[j], s->out[j] == vq__memplan_tensor(pl, s->run->mem, src->out[j]),
                    stream);
    }
    return;

skip:
    vq__fop_inputs_done(f, stream);
    skip_outputs(f, stream);
}

/* The body of every prebuilt kernel op with a sync kernel: on a CPU
 * worker, or on a GPU worker with x->stream, where the kernel is enqueued
 * and the bookkeeping is done at launch (in the engine's op order, which
 * the streams follow). */
int vq__op_exec(void *arg, const vq_exec_ctx *x)
{
    struct op_state s;
    s.f = arg;
    s.run = vq__fop_run(s.f);
    s.nout = 0;
    void *stream = vq__gpu_op_stream(); /* NULL on the CPU */
    int err = op_begin(&s, stream);
    if (err == 0) {
        vq__kcall k = op_kcall(&s, x);
        err = vq__kernel_run(&k, x ? x->ctx : (vq_ctx){VQ_DEV_CPU, 0});
        if (err == 0 && stream && s.f->t->plan->exec->check_nan)
            err = check_finite_gpu(s.f->t, &k);
    }
    op_end(&s, err, stream);
    return 0;
}

/* A registered op's async kernel finished (any thread). */
static void op_async_finish(vq_op_done *d, int err)
{
    struct op_state *s = (struct op_state *)d;
    vq_done *engine_done = s->engine_done;
    op_end(s, err, NULL);
    free(s);
    vq_done_finish(engine_done, 0); /* the run's failure is in the run */
}

/* The same for an op with an async kernel (CPU only): no worker waits
 * while the kernel is out. */
void vq__op_exec_async(void *arg, const vq_exec_ctx *x, vq_done *done)
{
    struct fop *f = arg;
    struct op_state *s = vq__malloc(sizeof *s);
    if (!s) {
        struct op_state fail = {.f = f, .run = vq__fop_run(f)};
        op_end(&fail, vq__fail(VQ_ENOMEM, "out of memory"), NULL);
        vq_done_finish(done, 0);
        return;
    }
    *s = (struct op_state){.done = {.finish = op_async_finish}, .engine_done = done, .f = f,
                           .run = vq__fop_run(f)};
    int err = op_begin(s, NULL);
    if (err) {
        op_async_finish(&s->done, err);
        return;
    }
    vq__kcall k = op_kcall(s, x);
    f->t->def->kernel_async(&k, &s->done);
}

struct bind {
    struct plan *plan;
    struct run *run;
    int var;
    bool copy;
    vq_tensor *t;
};

static int bind_exec(void *arg, const vq_exec_ctx *x)
{
    struct bind *b = arg;
    struct plan *pl = b->plan;
    struct pvar *v = &pl->vars[b->var];
    void *stream = vq__gpu_op_stream();
    vq_tensor *t = b->t;
    (void)x;
    int err = vq_op_wait_error();
    if (b->copy && err == 0) {
        vq_tensor *d;
        err = vq__tensor_empty_at(&d, pl->exec->device, t->dtype, t->ndim, t->shape, stream);
        if (err == 0 && (err = vq__tensor_copy_async(d, t, stream)) < 0)
            vq__tensor_release_on(d, stream);
        t = err == 0 ? d : NULL;
    }
    if (err) {
        int none = 0;
        if (atomic_compare_exchange_strong(&b->run->err, &none, err))
            snprintf(b->run->msg, sizeof b->run->msg, "feed %s: %s", pl->prog->vars[b->var].name,
                     vq_errmsg());
        vq__slot_drop(pl, v, stream);
    } else if (v->value != t) {
        vq__slot_drop(pl, v, stream);
        v->value = b->copy ? t : vq_tensor_retain(t);
        /* Counted whether the plan allocated it or not, so that
         * drop_value's subtraction balances. */
        atomic_fetch_add_explicit(&pl->live, t->nbytes, memory_order_relaxed);
    }
    if (!err)
        v->borrowed = !b->copy; /* the caller's tensor, unless copied to the device */
    atomic_store_explicit(&v->readers_left, v->init_readers, memory_order_relaxed);
    return 0;
}

static void bind_free(void *arg)
{
    struct bind *b = arg;
    vq_tensor_release(b->t);
    free(b);
}

/* The executor's list of runs in flight (under ex->lock). */
static void runs_link(vq_exec *ex, struct run *r)
{
    r->prev = NULL;
    r->next = ex->runs;
    if (ex->runs)
        ex->runs->prev = r;
    ex->runs = r;
}

static void runs_unlink(vq_exec *ex, struct run *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        ex->runs = r->next;
    if (r->next)
        r->next->prev = r->prev;
}

int vq__runs_cancel(vq_exec *ex)
{
    int n = 0;
    pthread_mutex_lock(&ex->lock);
    for (struct run *r = ex->runs; r; r = r->next, n++)
        atomic_store_explicit(&r->stop, VQ_ECANCELED, memory_order_relaxed);
    pthread_mutex_unlock(&ex->lock);
    return n;
}

static void run_free(struct run *r)
{
    for (int i = 0; i < r->nheld; i++)
        vq_tensor_release(r->held[i]);
    free(r->held);
    free(r);
}

/* The last op of a run: hands out the fetches, reports, frees the run.
 * Runs of a plan end in order: their final ops all write done_var. It runs
 * after every op of the run because it reads what the run's sink ops wrote
 * (see plan_build_ops), and every other op is followed by a later one. */
int vq__final_exec(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct plan *pl = arg;
    struct run *r = pl->ring[pl->final_execs++ % RING];
    int werr = vq_op_wait_error(), none = 0;
    /* A GPU failure the run's kernels did not report themselves (a fault
     * of a stream it used). */
    if (werr && atomic_compare_exchange_strong(&r->err, &none, werr))
        snprintf(r->msg, sizeof r->msg, "GPU %d: %s", pl->exec->device.id, vq_errmsg());
    int err = atomic_load(&r->err);
    for (int i = 0; i < pl->nfetches && err == 0; i++) {
        struct pvar *v = &pl->vars[pl->fetches[i]];
        vq_tensor *t = v->value;
        const char *name = pl->prog->vars[pl->fetches[i]].name;
        if (!t) {
            err = VQ_EINVAL;
            snprintf(r->msg, sizeof r->msg, "fetch %s has no value", name);
        } else if (v->persistable || (pl->exec->fetch_host && t->dev.kind == VQ_DEV_GPU)) {
            /* A snapshot (the scope tensor changes with later runs), or the
             * host copy asked for */
            vq_ctx where = pl->exec->fetch_host ? (vq_ctx){VQ_DEV_CPU, 0} : t->dev;
            vq_tensor *copy;
            err = vq__tensor_empty_on(&copy, where, t->dtype, t->ndim, t->shape, "fetch");
            if (err == 0 && (err = vq__tensor_copy_sync(copy, t)) < 0)
                vq_tensor_release(copy);
            if (err == 0)
                r->fetches[i].tensor = copy;
            else
                snprintf(r->msg, sizeof r->msg, "fetch %s: %s", name, vq_errmsg());
        } else {
            r->fetches[i].tensor = vq_tensor_retain(t);
        }
    }
    if (err) {
        for (int i = 0; i < pl->nfetches; i++) {
            vq_tensor_release(r->fetches[i].tensor);
            r->fetches[i].tensor = NULL;
        }
        if (r->msg_out)
            memcpy(r->msg_out, r->msg, sizeof r->msg);
        vq__fail(err, "%s", r->msg); /* for vq_errmsg() inside done */
    }
    void (*done)(void *, int) = r->done;
    void *user = r->user;
    size_t peak = atomic_load(&r->peak);
    size_t arena = r->mem ? pl->mem->bytes : 0;
    /* every op of the run is done (see above): its arena is free */
    vq__memplan_give(pl, r->mem);
    r->mem = NULL;
    pthread_mutex_lock(&pl->ring_lock);
    pl->inflight--;
    pthread_cond_broadcast(&pl->ring_cond);
    pthread_mutex_unlock(&pl->ring_lock);
    vq_exec *ex = pl->exec;
    pthread_mutex_lock(&ex->lock);
    runs_unlink(ex, r); /* before it is freed: vq_exec_cancel looks */
    ex->stats.runs++;
    ex->stats.last_peak_bytes = peak;
    ex->stats.last_arena_bytes = arena;
    pthread_mutex_unlock(&ex->lock);
    run_free(r);
    done(user, err);
    /* After done: vq_exec_free, which waits for this, then never returns
     * while a done callback still runs. */
    pthread_mutex_lock(&ex->lock);
    pl->refs--; /* pl may be evicted from here on */
    pthread_cond_broadcast(&ex->idle);
    pthread_mutex_unlock(&ex->lock);
    return 0;
}

int vq__seg_exec(void *arg, const vq_exec_ctx *x)
{
    struct fop *f = arg;
    vq_engine *e = f->t->plan->exec->engine;
    bool prof = vq__engine_profiling(e);
    for (int i = 0; i < f->seg_len; i++) {
        uint64_t t0 = prof ? vq__now_ns() : 0;
        vq__op_exec(&f[i], x);
        if (prof)
            vq__prof_span(e, f[i].t->src->def->type, t0, vq__now_ns(), x ? x->worker : -1);
    }
    return 0;
}

int vq__push_prebuilt(vq_engine *e, vq_opr *o)
{
    return vq_push_opr(e, o);
}

void vq__push_tail(struct plan *pl, vq_opr *o)
{
    vq_engine *e = pl->exec->engine;
    bool waited = false;
    long pause_ns = 50 * 1000;
    /* Out of memory, the push takes what was set aside for it when the
     * plan was built (vq__opr_reserve): the run then ends, failed, even if
     * memory never comes back. Only more pushes of o in flight than were
     * provided for wait here, for the earlier ones to give theirs back. */
    while (vq__push_opr_reserved(e, o) == VQ_ENOMEM) {
        if (!waited && !vq_thread_in_op()) {
            /* The run's own pusher (root frame): the earlier runs were
             * pushed whole and end without this thread. */
            pthread_mutex_lock(&pl->ring_lock);
            while (pl->inflight > 1)
                pthread_cond_wait(&pl->ring_cond, &pl->ring_lock);
            pthread_mutex_unlock(&pl->ring_lock);
            waited = true;
            continue;
        }
        struct timespec ts = {0, pause_ns};
        nanosleep(&ts, NULL);
        if (pause_ns < 10 * 1000 * 1000)
            pause_ns *= 2;
    }
}

/* The run a frame's ops belong to while it is pushed: a block's frame is
 * its control op's execution's; the root frame is pushed under the plan's
 * push_lock by the run that last took a place in the ring (or, on the
 * naive engine, by an op of that run's push, see vq__ctl_push). */
static struct run *frame_run(const struct frame *fr)
{
    if (fr->owner)
        return fr->owner->run;
    return fr->plan->ring[(fr->plan->next_seq - 1) % RING];
}

/* A push of op t of frame fr failed (err, the engine's message set): the
 * run reports it, and the plan, whose later ops of the frame now lag one
 * execution behind, is retired. */
static void push_failed(struct frame *fr, const struct pop *t, int err)
{
    char msg[200];
    snprintf(msg, sizeof msg, "the engine could not take the op (%s)", vq_errmsg());
    vq__run_fail(frame_run(fr), t, err, msg);
    atomic_store(&fr->plan->broken, true);
}

void vq__frame_push_from(struct frame *fr, int k)
{
    vq_engine *e = fr->plan->exec->engine;
    int rc = 0;
    if (k == 0 && fr->head && (rc = vq__push_prebuilt(e, fr->head)) < 0)
        push_failed(fr, fr->owner->fop->t, rc); /* a loop's record or bind op */
    for (; rc == 0 && k < fr->nops; k++) {
        struct fop *f = &fr->ops[k];
        if (f->ctl)
            rc = vq__ctl_push(f);
        else if (f->opr) /* NULL: inside an earlier op's segment */
            rc = vq__push_prebuilt(e, f->opr);
        if (rc == VQ__CTL_DEFERRED)
            return; /* the rest follows the control op's blocks */
        if (rc < 0)
            push_failed(fr, f->t, rc);
    }
    /* a stacking loop's stack op: after the ops that write what it keeps,
     * before the step that may push the next iteration's */
    if (rc == 0 && fr->stack && (rc = vq__push_prebuilt(e, fr->stack)) < 0)
        push_failed(fr, fr->owner->fop->t, rc);
    vq__push_tail(fr->plan, rc < 0 && fr->tail_cut ? fr->tail_cut : fr->tail);
}

#define NAMES_ON_STACK 32

/* The feed and fetch names of a call, for the plan cache's key: on the
 * stack up to NAMES_ON_STACK of each. */
struct run_names {
    const char **feeds, **fetches;
    const char *fstack[NAMES_ON_STACK], *gstack[NAMES_ON_STACK];
};

static void names_free(struct run_names *n)
{
    if (n->feeds != n->fstack)
        free(n->feeds);
    if (n->fetches != n->gstack)
        free(n->fetches);
}

/* Checks that every feed has a name and a tensor and every fetch a name,
 * and collects the names; clears the fetches' tensors. */
static int names_take(struct run_names *n, const char *who, const vq_feed *feeds, int nfeeds,
                      vq_fetch *fetches, int nfetches)
{
    n->feeds = nfeeds <= NAMES_ON_STACK ? n->fstack : vq__malloc((size_t)nfeeds * sizeof *n->feeds);
    n->fetches = nfetches <= NAMES_ON_STACK ? n->gstack
                                            : vq__malloc((size_t)nfetches * sizeof *n->fetches);
    if (!n->feeds || !n->fetches)
        return vq__fail(VQ_ENOMEM, "%s: out of memory", who);
    for (int i = 0; i < nfeeds; i++) {
        if (!feeds[i].name || !feeds[i].tensor)
            return vq__fail(VQ_EINVAL, "%s: feed %d has no name or tensor", who, i);
        n->feeds[i] = feeds[i].name;
    }
    for (int i = 0; i < nfetches; i++) {
        fetches[i].tensor = NULL;
        if (!fetches[i].name)
            return vq__fail(VQ_EINVAL, "%s: fetch %d has no name", who, i);
        n->fetches[i] = fetches[i].name;
    }
    return 0;
}

/* Checks feed i against its var and makes its bind op's argument.
 * Feeds must fit their vars; one that imperative ops wrote is waited for
 * here, so those ops come first. */
static int feed_bind(struct plan *pl, struct run *r, const char *who, const vq_feed *feed,
                     int i, struct bind **out)
{
    vq__meta m;
    vq__meta_of_tensor(&m, feed->tensor);
    const struct pvar *pv = &pl->vars[pl->feeds[i]];
    vq_ctx fd = feed->tensor->dev, xd = pl->exec->device;
    int rc;
    if (fd.kind == VQ_DEV_GPU && (xd.kind != VQ_DEV_GPU || fd.id != xd.id)) {
        char where[32];
        if (xd.kind == VQ_DEV_GPU)
            snprintf(where, sizeof where, "GPU %d", xd.id);
        else
            snprintf(where, sizeof where, "the CPU");
        return vq__fail(VQ_EINVAL, "feed %s: the tensor is on GPU %d; the executor runs on %s "
                                   "(copy it with vq_tensor_copy_to)",
                        feed->name, fd.id, where);
    }
    if (!vq__meta_compatible(&m, &pv->meta)) {
        char a[140], b[140];
        vq__meta_str(a, sizeof a, &m);
        vq__meta_str(b, sizeof b, &pv->meta);
        return vq__fail(VQ_EINVAL, "feed %s: got %s, the var is %s", feed->name, a, b);
    }
    if (atomic_load_explicit(&feed->tensor->var, memory_order_acquire) &&
        (rc = vq_tensor_wait(feed->tensor)) < 0) {
        /* A tensor written by imperative ops: they finish first, and a
         * failure of theirs fails this call instead of poisoning the
         * run's vars (the engine would skip the run's ops). */
        char what[160];
        snprintf(what, sizeof what, "feed %s", feed->name);
        return vq__fail_prefixed(rc, "%s", what);
    }
    if (!(*out = vq__malloc(sizeof **out)))
        return vq__fail(VQ_ENOMEM, "%s: out of memory", who);
    bool copy = xd.kind == VQ_DEV_GPU && fd.kind != VQ_DEV_GPU;
    **out = (struct bind){pl, r, pl->feeds[i], copy, vq_tensor_retain(feed->tensor)};
    if (copy)
        r->held[r->nheld++] = vq_tensor_retain(feed->tensor);
    return 0;
}

/* Undoes feed_bind: the binds, and the feeds held for the copies. */
static void run_unbind(struct run *r, struct bind **binds, int nfeeds)
{
    for (int i = 0; i < nfeeds; i++) {
        if (binds[i])
            bind_free(binds[i]);
        binds[i] = NULL;
    }
    for (int i = 0; i < r->nheld; i++)
        vq_tensor_release(r->held[i]);
    r->nheld = 0;
}

/* Takes a place in the plan's ring of runs in flight, waiting for one
 * when all are taken (except inside an op). Called with push_lock held;
 * on failure, releases it. */
static int ring_enter(struct plan *pl, struct run *r, const char *who)
{
    pthread_mutex_lock(&pl->ring_lock);
    while (pl->inflight >= RING) {
        if (vq_thread_in_op()) {
            /* Waiting here would hold a worker the runs in flight need. */
            pthread_mutex_unlock(&pl->ring_lock);
            pthread_mutex_unlock(&pl->push_lock);
            return vq__fail(VQ_EBUSY, "%s: %d runs of this plan are in flight and this is an "
                                      "op: it cannot wait for one to end",
                            who, RING);
        }
        pthread_cond_wait(&pl->ring_cond, &pl->ring_lock);
    }
    pl->inflight++;
    pthread_mutex_unlock(&pl->ring_lock);
    pl->ring[pl->next_seq++ % RING] = r;
    return 0;
}

/* Pushes run r: a bind op per feed (each takes its bind), then the ops of
 * block 0 and the final op. Called with push_lock held. */
static void run_push(struct plan *pl, struct run *r, const vq_feed *feeds, int nfeeds,
                     struct bind **binds)
{
    vq_exec *ex = pl->exec;
    for (int i = 0; i < nfeeds; i++) {
        vq_task t = {.fn = bind_exec, .arg = binds[i], .arg_free = bind_free,
                     .props = VQ_PROP_RUN_ON_FAILED, .writes = &pl->vars[pl->feeds[i]].ev,
                     .nwrites = 1, .name = "feed"};
        if (binds[i]->copy) {
            t.ctx = ex->device;
            t.props |= VQ_PROP_COPY_TO_DEV;
        }
        /* Held and let go at once: a bind whose var is free (no earlier
         * run still reads it) runs here, now, instead of waking a worker
         * for a pointer's store (vq__push_held). */
        void *held = NULL;
        if (vq__push_held(ex->engine, &t, &held) < 0) {
            /* Out of memory: the run fails; its ops still run to keep
             * every op's count of executions in step. */
            atomic_store(&r->err, VQ_ENOMEM);
            snprintf(r->msg, sizeof r->msg, "feed %s: %s", feeds[i].name, vq_errmsg());
            bind_free(binds[i]);
        }
        vq__push_release(ex->engine, held);
    }
    vq__frame_push_from(&pl->root, 0); /* ends with the final op */
}

/* vq_exec_run and vq_exec_run_async (who): starts a run, which reports to
 * done once. On an error returned here, done is never called. */
static int run_start(vq_exec *ex, const char *who, const vq_program *p, vq_scope *s,
                     const vq_feed *feeds, int nfeeds, vq_fetch *fetches, int nfetches,
                     void (*done)(void *, int), void *user, char *msg_out)
{
    if (!ex || !p || nfeeds < 0 || nfetches < 0 || (nfeeds && !feeds) || (nfetches && !fetches))
        return vq__fail(VQ_EINVAL, "%s: bad argument", who);
    struct run_names names = {0};
    struct plan *pl = NULL;
    bool hold = ex->device.kind == VQ_DEV_GPU && nfeeds > 0; /* host feeds, see struct run */
    struct run *r = vq__calloc(1, sizeof *r);
    struct bind **binds = vq__calloc((size_t)(nfeeds ? nfeeds : 1), sizeof *binds);
    if (r && hold)
        r->held = vq__malloc((size_t)nfeeds * sizeof *r->held);
    int rc = 0;
    if (!r || !binds || (hold && !r->held)) {
        rc = vq__fail(VQ_ENOMEM, "%s: out of memory", who);
        goto fail_run;
    }
    if ((rc = names_take(&names, who, feeds, nfeeds, fetches, nfetches)) < 0)
        goto fail_run;
    for (;;) {
        rc = vq__plan_acquire(ex, who, p, s, names.feeds, nfeeds, feeds, names.fetches, nfetches,
                              &pl);
        if (rc < 0)
            goto fail_run;
        for (int i = 0; i < nfeeds; i++)
            if ((rc = feed_bind(pl, r, who, &feeds[i], i, &binds[i])) < 0)
                goto fail_plan;
        pthread_mutex_lock(&pl->push_lock);
        if (!atomic_load(&pl->broken))
            break;
        /* A run pushed meanwhile failed to push its ops: another plan. */
        pthread_mutex_unlock(&pl->push_lock);
        run_unbind(r, binds, nfeeds);
        vq__plan_unpin(ex, pl);
    }
    r->plan = pl;
    r->fetches = fetches;
    r->done = done;
    r->user = user;
    r->msg_out = msg_out;
    atomic_init(&r->err, 0);
    atomic_init(&r->peak, 0);
    atomic_init(&r->stop, 0);
    if (ex->timeout_ms)
        r->deadline_ns = vq__now_ns() + (uint64_t)ex->timeout_ms * 1000000u;
    if ((rc = ring_enter(pl, r, who)) < 0)
        goto fail_plan;
    /* NULL (no plan, or no memory for an arena): outputs allocated one by one */
    r->mem = vq__memplan_take(pl);
    pthread_mutex_lock(&ex->lock);
    runs_link(ex, r);
    pthread_mutex_unlock(&ex->lock);
    run_push(pl, r, feeds, nfeeds, binds); /* from here the run reports to done */
    pthread_mutex_unlock(&pl->push_lock);
    names_free(&names);
    free(binds);
    return 0;

fail_plan:
    run_unbind(r, binds, nfeeds);
    vq__plan_unpin(ex, pl);
fail_run:
    names_free(&names);
    if (r)
        run_free(r);
    free(binds);
    return rc;
}

VQ_API int vq_exec_run_async(vq_exec *ex, const vq_program *p, vq_scope *s,
                             const vq_feed *feeds, int nfeeds, vq_fetch *fetches, int nfetches,
                             void (*done)(void *user, int err), void *user)
{
    if (!done)
        return vq__fail(VQ_EINVAL, "vq_exec_run_async: done is NULL");
    return run_start(ex, "vq_exec_run_async", p, s, feeds, nfeeds, fetches, nfetches, done,
                     user, NULL);
}

struct sync_wait {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    atomic_bool finished; /* set under lock */
    int err;
    char msg[256];
};

static void sync_done(void *user, int err)
{
    struct sync_wait *w = user;
    pthread_mutex_lock(&w->lock);
    w->err = err;
    atomic_store_explicit(&w->finished, true, memory_order_release);
    pthread_cond_signal(&w->cond); /* no system call unless the waiter sleeps */
    pthread_mutex_unlock(&w->lock);
}

/* Looks this many times before sleeping, running a queued ready op of the
 * engine between looks when there is one (vq__engine_help, as
 * vq_wait_var's waiter does) and yielding the core when there is none: a
 * small run ends within a few microseconds, and a futex wake-up costs more
 * than that on a VM; run by the waiting thread, it needs no wake-up at all. */
#define SYNC_SPINS 256

VQ_API int vq_exec_run(vq_exec *x, const vq_program *p, vq_scope *s, const vq_feed *feeds,
                       int nfeeds, vq_fetch *fetches, int nfetches)
{
    if (vq_thread_in_op())
        return vq__fail(VQ_EDEADLK, "vq_exec_run: called from inside an op; use "
                                    "vq_exec_run_async");
    struct sync_wait w = {.err = 0};
    atomic_init(&w.finished, false);
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    /* The run's first ready op is this thread's to run, when it waits. */
    vq__defer_begin(x ? x->engine : NULL);
    int rc = run_start(x, "vq_exec_run", p, s, feeds, nfeeds, fetches, nfetches, sync_done, &w,
                       w.msg);
    vq__defer_end(x ? x->engine : NULL, &w.finished);
    if (rc == 0) {
        for (int i = 0; i < SYNC_SPINS && !atomic_load_explicit(&w.finished, memory_order_acquire);
             i++) {
            if (vq__engine_help(x->engine, &w.finished))
                i = 0;
            else
                sched_yield();
        }
        /* Taking the lock also waits for sync_done to let go of w. */
        pthread_mutex_lock(&w.lock);
        while (!atomic_load_explicit(&w.finished, memory_order_acquire))
            pthread_cond_wait(&w.cond, &w.lock);
        pthread_mutex_unlock(&w.lock);
        rc = w.err;
        if (rc)
            vq__fail(rc, "%s", w.msg);
    }
    pthread_mutex_destroy(&w.lock);
    pthread_cond_destroy(&w.cond);
    return rc;
}
