/* The executor: prepares a program into a plan (checked, shapes inferred,
 * one engine var per program var, one prebuilt engine op per program op),
 * keeps plans in an LRU cache keyed by XXH3-64 of the program, the feed and
 * fetch names and the device, and runs a plan as pushes.
 *
 * A run pushes one bind op per feed, then every op of block 0 in program
 * order, then one final op that reads the fetched vars and reports. The
 * engine's var queues do all the ordering: no dependency graph is built,
 * and preparation is linear in ops plus edges. A cond or while op is
 * pushed as two halves that push the ops of its blocks when its predicate
 * is known (control.c); the frames that hold each block's values, and the
 * structures this file shares with control.c, are described in plan.h.
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
 * Release by reference count: preparation counts, for each version of each
 * var (the value one op writes, until the next op writes the var), the ops
 * that read it. The writer sets the var's counter to that number; each
 * reader decrements it after its kernel; the last one releases the tensor,
 * unless the version is fetched or the var persistable. Versions of one var
 * are serialized by the engine (the next writer waits for the readers), so
 * one counter per var suffices even with runs overlapping. */
#include "graph_internal.h"
#include "plan.h"
#include "scope.h"

#include <sched.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define RING VQ__RUN_RING
#define NOT_IN_SCOPE 1 /* bind_persistable: not bound and not written first */

static void meta_of_tensor(vq__meta *m, const vq_tensor *t);
static bool metas_equal(const vq__meta *a, const vq__meta *b);

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
    atomic_fetch_sub_explicit(&pl->live, v->value->nbytes, memory_order_relaxed);
    vq__tensor_release_on(v->value, stream);
    v->value = NULL;
    v->borrowed = false;
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
         * version never gets here: its count includes the final op. */
        if (atomic_fetch_sub_explicit(&v->readers_left, 1, memory_order_acq_rel) == 1)
            vq__slot_drop(pl, v, stream);
    }
}

/* Sets output j's new version in place: value, counter, immediate release
 * of a value nobody reads. */
static void output_done(struct fop *f, int j, vq_tensor *t, void *stream)
{
    struct plan *pl = f->t->plan;
    struct pvar *v = f->out[j];
    if (v->persistable)
        return; /* the scope tensor, written in place */
    if (v->value != t) {
        vq__slot_drop(pl, v, stream);
        v->value = t; /* the reference op_exec took */
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
 * op_exec to the end of its kernel. On op_exec's stack for sync kernels;
 * on the heap while an async kernel is out (it may finish on any thread,
 * after op_exec_async returned). */
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
    if (atomic_load_explicit(&r->err, memory_order_acquire))
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
    if (op->fixed) {
        memcpy(om, op->fixed, (size_t)src->nout * sizeof om[0]);
        s->params = op->fixed + src->nout;
    } else {
        for (int i = 0; i < src->nin; i++)
            meta_of_tensor(&im[i], s->in[i]);
        vq__meta *cache = f->infer_cache;
        bool hit = cache != NULL;
        for (int i = 0; hit && i < src->nin; i++)
            hit = metas_equal(&cache[i], &im[i]);
        if (hit) { /* the shapes of the last execution: its inference holds */
            memcpy(om, cache + src->nin, (size_t)src->nout * sizeof om[0]);
            s->params = cache + src->nin + src->nout;
        } else {
            memset(s->pbuf, 0, op->def->params_size);
            memset(om, 0, (size_t)src->nout * sizeof om[0]);
            vq__infer c = {.def = op->def, .attrs = src->attrs, .nattrs = src->nattrs,
                           .nin = src->nin, .in = im, .nout = src->nout, .out = om,
                           .params = s->pbuf};
            err = op->def->infer(&c);
            size_t metas = (size_t)(src->nin + src->nout) * sizeof *cache;
            if (err == 0 && !cache)
                cache = f->infer_cache = vq__malloc(metas + op->def->params_size);
            if (err == 0 && cache) { /* no room: infer again next time */
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
        bool fits = cur && cur->dtype == om[j].dtype && cur->ndim == om[j].ndim &&
                    !memcmp(cur->shape, om[j].shape, (size_t)cur->ndim * sizeof cur->shape[0]);
        /* in place: the var's own tensor, unless it is borrowed (a feed
         * stays the caller's: the op writes a new one) */
        if (v->persistable || (is_in_place(src, j) && !v->borrowed)) {
            if (!fits) {
                err = vq__fail(VQ_EINVAL, "output %s (slot %d) would change %s's shape or dtype",
                               vq__op_out_slot(op->def, j), j,
                               pl->prog->vars[src->out[j]].name);
                break;
            }
            s->out[j] = vq_tensor_retain(cur);
        } else {
            err = vq__tensor_empty_at(&s->out[j], pl->exec->device, om[j].dtype, om[j].ndim,
                                      om[j].shape, stream);
            if (err)
                break;
            note_live(r, pl, s->out[j]->nbytes);
        }
    }
    return err;
}

/* A kernel call for s, on x's device. */
static vq__kcall op_kcall(struct op_state *s, const vq_exec_ctx *x)
{
    const struct pop *op = s->f->t;
    return (vq__kcall){.def = op->def, .params = s->params, .in = s->in, .nin = op->src->nin,
                       .out = s->out, .nout = op->src->nout, .x = x, .defer = op_defer_fail,
                       .defer_user = s->run, .defer_tag = (void *)op};
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
            if (s->out[j] != v->value && !v->persistable)
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
        output_done(f, j, s->out[j], stream);
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
static int op_exec(void *arg, const vq_exec_ctx *x)
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
static void op_exec_async(void *arg, const vq_exec_ctx *x, vq_done *done)
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
static int final_exec(void *arg, const vq_exec_ctx *x)
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
    run_free(r);
    pthread_mutex_lock(&pl->ring_lock);
    pl->inflight--;
    pthread_cond_broadcast(&pl->ring_cond);
    pthread_mutex_unlock(&pl->ring_lock);
    vq_exec *ex = pl->exec;
    pthread_mutex_lock(&ex->lock);
    ex->stats.runs++;
    ex->stats.last_peak_bytes = peak;
    pl->refs--; /* pl may be evicted from here on */
    pthread_cond_broadcast(&ex->idle);
    pthread_mutex_unlock(&ex->lock);
    done(user, err);
    return 0;
}

/* ---- preparation ---- */

static void plan_destroy(struct plan *pl)
{
    vq_engine *e = pl->exec->engine;
    vq__frame_destroy(&pl->root);
    for (int k = 0; pl->ops && k < pl->nops; k++) {
        struct pop *t = &pl->ops[k];
        free(t->out_readers);
        free(t->fixed);
        free(t->in_counts);
        if (t->src && t->in != t->src->in)
            free(t->in);
        vq__ctl_info_free(t->ctl);
    }
    if (pl->final)
        vq_opr_free(e, pl->final);
    for (int v = 0; pl->vars && v < pl->nvars; v++) {
        vq_tensor_release(pl->vars[v].value);
        if (pl->vars[v].own_ev)
            vq_var_free(e, pl->vars[v].ev);
    }
    if (pl->done_var)
        vq_var_free(e, pl->done_var);
    free(pl->ops);
    free(pl->vars);
    free(pl->local);
    free(pl->block_nvars);
    free(pl->feeds);
    free(pl->fetches);
    free(pl->key_names);
    vq_program_free(pl->prog);
    pthread_mutex_destroy(&pl->push_lock);
    pthread_mutex_destroy(&pl->ring_lock);
    pthread_cond_destroy(&pl->ring_cond);
    free(pl);
}

bool vq__meta_compatible(const vq__meta *a, const vq__meta *b)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (!vq__dim_match(a->shape[i], b->shape[i]))
            return false;
    return true;
}

void vq__meta_str(char *buf, size_t size, const vq__meta *m)
{
    char shape[120];
    snprintf(buf, size, "%s%s", vq_dtype_name(m->dtype),
             vq__shape_str(shape, sizeof shape, m->ndim, m->shape));
}

static void meta_of_tensor(vq__meta *m, const vq_tensor *t)
{
    m->dtype = t->dtype;
    m->ndim = t->ndim;
    memcpy(m->shape, t->shape, sizeof m->shape);
}

static bool metas_equal(const vq__meta *a, const vq__meta *b)
{
    return a->dtype == b->dtype && a->ndim == b->ndim &&
           !memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof a->shape[0]);
}

/* A scope tensor must be on the executor's device: one elsewhere (loaded
 * from .npy, made by a CPU startup run, trained on a GPU and now evaluated
 * on the CPU) is moved: copied synchronously, after the work pushed on it,
 * and rebound in the scope, so later plans find it there. On success *tp
 * is the tensor to use (one reference). Runs in preparation, under the
 * executor's lock: the work waited for is never this executor's (its plans
 * hold only tensors on its device). */
static int scope_move(struct plan *pl, const char *name, vq_tensor **tp)
{
    vq_tensor *t = *tp;
    vq_ctx want = pl->exec->device, have = vq_tensor_device(t);
    if (have.kind == want.kind && have.id == want.id)
        return 0;
    char what[160];
    snprintf(what, sizeof what, "persistable var %s", name);
    if (have.kind == VQ_DEV_GPU && want.kind == VQ_DEV_GPU)
        return vq__fail(VQ_EINVAL, "%s: the scope's tensor is on GPU %d, the executor runs on "
                                   "GPU %d (copy it with vq_tensor_copy_to)",
                        what, have.id, want.id);
    int rc = vq_tensor_wait(t);
    if (rc < 0)
        return vq__fail_prefixed(rc, "%s", what);
    vq_tensor *m;
    if ((rc = vq__tensor_empty_on(&m, want, t->dtype, t->ndim, t->shape, what)) < 0)
        return rc;
    if ((rc = vq__tensor_copy_sync(m, t)) < 0 || (rc = vq_scope_set(pl->scope, name, m)) < 0) {
        vq_tensor_release(m);
        return vq__fail_prefixed(rc, "%s", what);
    }
    vq_tensor_release(t);
    *tp = m;
    return 0;
}

/* Binds persistable var v to its scope tensor (creating it, zeroed, when
 * the program writes it first and its shape is known). */
static int bind_persistable(struct plan *pl, int v, bool written_first)
{
    struct pvar *pv = &pl->vars[v];
    const char *name = pl->prog->vars[v].name;
    if (pv->value)
        return 0;
    vq_tensor *t = vq__scope_take(pl->scope, name);
    if (!t) {
        if (!written_first)
            return NOT_IN_SCOPE;
        for (int i = 0; i < pv->meta.ndim; i++)
            if (pv->meta.shape[i] < 0)
                return vq__fail(VQ_EINVAL,
                                "persistable var %s: shape has unknown dims; declare it fully",
                                name);
        vq_tensor *fresh;
        int rc = vq_tensor_new(&fresh, pv->meta.dtype, pv->meta.ndim, pv->meta.shape);
        if (rc < 0)
            return rc;
        t = vq__scope_get_or_set(pl->scope, name, fresh);
        vq_tensor_release(fresh);
        if (!t)
            return vq__fail(VQ_ENOMEM, "scope: out of memory");
    }
    int rc = scope_move(pl, name, &t);
    if (rc < 0) {
        vq_tensor_release(t);
        return rc;
    }
    vq__meta m;
    meta_of_tensor(&m, t);
    if (!vq__meta_compatible(&m, &pv->meta)) {
        char a[140], b[140];
        vq__meta_str(a, sizeof a, &m);
        vq__meta_str(b, sizeof b, &pv->meta);
        vq_tensor_release(t);
        return vq__fail(VQ_EINVAL, "persistable var %s: the scope holds %s, the program says %s",
                        name, a, b);
    }
    pv->meta = m;
    pv->value = t;
    return 0;
}

/* Prefixes the message of a failed check of op t with where it is. */
int vq__pop_error(const struct pop *t, int rc)
{
    char where[48];
    if (t->block)
        snprintf(where, sizeof where, "block %d op %d", t->block, t->index);
    else
        snprintf(where, sizeof where, "op %d", t->index);
    /* Registry messages start with the op type already. */
    if (!strncmp(vq_errmsg(), t->src->type, strlen(t->src->type)))
        return vq__fail_prefixed(rc, "%s", where);
    return vq__fail_prefixed(rc, "%s (%s)", where, t->src->type);
}

static int find_names(const vq_program *p, const char *what, const char *const *names, int n,
                      int **out)
{
    *out = malloc((size_t)(n ? n : 1) * sizeof **out);
    if (!*out)
        return vq__fail(VQ_ENOMEM, "prepare: out of memory");
    for (int i = 0; i < n; i++) {
        if (!names[i])
            return vq__fail(VQ_EINVAL, "%s %d: name is NULL", what, i);
        int v = vq__program_find_var(p, names[i]);
        if (v < 0)
            return vq__fail(VQ_EINVAL, "%s %s: the program has no such var", what, names[i]);
        if (p->vars[v].block != 0)
            return vq__fail(VQ_EINVAL, "%s %s: the var is declared in block %d; only vars of "
                                       "block 0 are fed and fetched",
                            what, names[i], p->vars[v].block);
        for (int j = 0; j < i; j++)
            if ((*out)[j] == v)
                return vq__fail(VQ_EINVAL, "%s %s is given twice", what, names[i]);
        (*out)[i] = v;
    }
    return 0;
}

/* Walks block 0 once: checks, infers, counts readers per version. */

void *vq__grow(void *arr, int n, int *cap, size_t elem)
{
    if (n < *cap)
        return arr;
    int c = *cap ? 2 * *cap : 8;
    void *a = vq__realloc(arr, (size_t)c * elem);
    if (!a) {
        vq__fail(VQ_ENOMEM, "prepare: out of memory");
        return NULL;
    }
    *cap = c;
    return a;
}

int vq__varset_add(struct varset *s, int v)
{
    for (int i = 0; i < s->n; i++)
        if (s->v[i] == v)
            return 0;
    int *a = vq__grow(s->v, s->n, &s->cap, sizeof *s->v);
    if (!a)
        return VQ_ENOMEM;
    s->v = a;
    s->v[s->n++] = v;
    return 0;
}

/* An input of op t: has it a value here, is it counted as a reader. */
static int walk_input(struct walk *w, struct pop *t, int i, int block, struct varset *ext)
{
    struct plan *pl = w->pl;
    vq_program *p = pl->prog;
    int v = t->in[i];
    struct pvar *pv = &pl->vars[v];
    int rc = 0;
    pv->used = true;
    if (!w->has[v] && pv->persistable) {
        rc = bind_persistable(pl, v, false);
        if (rc == NOT_IN_SCOPE)
            rc = vq__pop_error(t, vq__fail(VQ_EINVAL,
                                           "reads var %s, which is persistable but is not in "
                                           "the scope and no earlier op writes it",
                                           p->vars[v].name));
        w->has[v] = rc == 0;
    } else if (!w->has[v]) {
        rc = vq__pop_error(t, vq__fail(VQ_EINVAL,
                                       "reads var %s, which no earlier op writes and no feed "
                                       "provides",
                                       p->vars[v].name));
    }
    if (rc)
        return rc;
    /* Readers of the version read here. A var of an enclosing block is
     * held by the control op whose block this is: not counted here. An op
     * that writes the var it reads (in place) counts too: op_exec
     * releases the version it read before it sets the one it wrote. */
    bool counts = !pv->persistable && p->vars[v].block == block;
    for (int j = 0; j < t->src->nout && counts && (t->def->flags & VQ__CONTROL); j++)
        counts = t->src->out[j] != v; /* a control op releases its reads at its end */
    for (int ii = 0; ii < i && counts; ii++)
        counts = t->in[ii] != v;
    t->in_counts[i] = counts;
    if (counts)
        (*w->owner[v])++;
    if (p->vars[v].block != block)
        return vq__varset_add(ext, v);
    return 0;
}

/* A kernel op's shapes: inference, the fixed metas, the outputs' checks. */
static int walk_infer(struct walk *w, struct pop *t)
{
    struct plan *pl = w->pl;
    vq_program *p = pl->prog;
    const vq__pop *src = t->src;
    vq__meta im[VQ__MAX_SLOTS], om[VQ__MAX_SLOTS];
    _Alignas(16) unsigned char params[VQ__MAX_PARAMS];
    for (int i = 0; i < src->nin; i++)
        im[i] = pl->vars[src->in[i]].meta;
    int rc = vq__op_infer(t->def, src->attrs, src->nattrs, src->nin, im, src->nout, om, params);
    if (rc)
        return vq__pop_error(t, rc);
    bool known = true;
    for (int i = 0; i < src->nin && known; i++)
        for (int d = 0; d < im[i].ndim && known; d++)
            known = im[i].shape[d] >= 0;
    if (known) {
        t->fixed = vq__malloc((size_t)src->nout * sizeof *t->fixed + t->def->params_size);
        if (!t->fixed)
            return vq__fail(VQ_ENOMEM, "prepare: out of memory");
        memcpy(t->fixed, om, (size_t)src->nout * sizeof *t->fixed);
        memcpy(t->fixed + src->nout, params, t->def->params_size);
    }
    for (int j = 0; j < src->nout; j++) {
        int v = src->out[j];
        struct pvar *pv = &pl->vars[v];
        for (int i = 0; i < src->nin; i++)
            if (src->in[i] == v && !(t->def->flags & VQ__INPLACE_OK))
                return vq__pop_error(t, vq__fail(VQ_EINVAL,
                                                 "reads and writes var %s, and this op cannot "
                                                 "work in place",
                                                 p->vars[v].name));
        if (!vq__meta_compatible(&om[j], &pv->meta)) {
            char a[140], d[140];
            vq__meta_str(a, sizeof a, &om[j]);
            vq__meta_str(d, sizeof d, &pv->meta);
            return vq__pop_error(t, vq__fail(VQ_EINVAL, "output %s (slot %d) var %s: inferred "
                                                        "%s, declared %s",
                                             vq__op_out_slot(t->def, j), j, p->vars[v].name, a,
                                             d));
        }
        for (int d = 0; d < pv->meta.ndim; d++)
            if (pv->meta.shape[d] < 0)
                pv->meta.shape[d] = om[j].shape[d];
    }
    return 0;
}

/* Walks the ops of one block in order: checks, infers, counts readers per
 * version; control ops walk their own blocks first (control.c). */
int vq__walk_block(struct walk *w, int block, struct varset *ext)
{
    struct plan *pl = w->pl;
    vq_program *p = pl->prog;
    const vq__block *b = &p->blocks[block];
    for (int k = 0; k < b->nops; k++) {
        const vq__pop *src = &p->ops[b->ops[k]];
        struct pop *t = &pl->ops[b->ops[k]];
        *t = (struct pop){.plan = pl, .block = block, .index = k, .src = src, .def = src->def,
                          .nin = src->nin, .in = src->in};
        if (!t->def)
            return vq__pop_error(t, vq__fail(VQ_EINVAL, "unknown op type \"%s\"", src->type));
        bool control = t->def->flags & VQ__CONTROL;
        int rc = 0;
        if (src->nin > VQ__MAX_SLOTS || src->nout > VQ__MAX_SLOTS)
            return vq__pop_error(t, vq__op_check_arity(t->def, src->nin, src->nout));
        if (!control && (rc = pl->exec->device.kind == VQ_DEV_GPU
                                  ? vq__gpu_kernel_check(t->def)
                                  : vq__cpu_kernel_check(t->def)) < 0)
            return vq__pop_error(t, rc);
        for (int j = 0; j < src->nout; j++) {
            int v = src->out[j];
            for (int jj = 0; jj < j; jj++)
                if (src->out[jj] == v)
                    return vq__pop_error(t, vq__fail(VQ_EINVAL, "writes var %s twice",
                                                     p->vars[v].name));
            if (p->vars[v].block != block)
                return vq__pop_error(t, vq__fail(VQ_EINVAL,
                                                 "writes var %s of block %d: an op of a cond or "
                                                 "while block writes only its own block's vars "
                                                 "(results leave through the control op's "
                                                 "outputs)",
                                                 p->vars[v].name, p->vars[v].block));
        }
        /* Inputs are checked first: a control op's blocks read what its
         * inputs name, and its own walk needs them bound. */
        t->in_counts = vq__calloc((size_t)(src->nin ? src->nin : 1), sizeof *t->in_counts);
        if (!t->in_counts)
            return vq__fail(VQ_ENOMEM, "prepare: out of memory");
        for (int i = 0; i < src->nin && rc == 0; i++)
            rc = walk_input(w, t, i, block, ext);
        if (rc)
            return rc;
        if (control) {
            int nin0 = t->nin;
            if ((rc = vq__ctl_walk(w, t)) != 0)
                return rc;
            /* its blocks' reads of enclosing vars */
            bool *counts = vq__realloc(t->in_counts, (size_t)(t->nin ? t->nin : 1) * sizeof *counts);
            if (!counts)
                return vq__fail(VQ_ENOMEM, "prepare: out of memory");
            t->in_counts = counts;
            for (int i = nin0; i < t->nin && rc == 0; i++)
                rc = walk_input(w, t, i, block, ext);
        } else {
            rc = walk_infer(w, t);
        }
        if (rc)
            return rc;
        t->out_readers = vq__calloc((size_t)(src->nout ? src->nout : 1), sizeof *t->out_readers);
        if (!t->out_readers)
            return vq__fail(VQ_ENOMEM, "prepare: out of memory");
        for (int j = 0; j < src->nout; j++) {
            int v = src->out[j];
            struct pvar *pv = &pl->vars[v];
            pv->used = true;
            if (pv->persistable && !w->has[v] && (rc = bind_persistable(pl, v, true)) != 0)
                return vq__pop_error(t, rc);
            w->has[v] = true;
            w->owner[v] = &t->out_readers[j];
        }
    }
    return 0;
}

/* Walks the program from block 0, then binds the fetches. */
static int plan_walk(struct plan *pl)
{
    vq_program *p = pl->prog;
    size_t nv = (size_t)(pl->nvars ? pl->nvars : 1);
    struct walk w = {.pl = pl, .has = vq__calloc(nv, sizeof *w.has),
                     .owner = vq__calloc(nv, sizeof *w.owner),
                     .block_user = vq__malloc((size_t)p->nblocks * sizeof *w.block_user)};
    struct varset ext = {0};
    pl->ops = vq__calloc((size_t)(p->nops ? p->nops : 1), sizeof *pl->ops);
    pl->nops = p->nops;
    int rc = 0;
    if (!w.has || !w.owner || !w.block_user || !pl->ops)
        rc = vq__fail(VQ_ENOMEM, "prepare: out of memory");
    for (int b = 0; rc == 0 && b < p->nblocks; b++)
        w.block_user[b] = -1;
    for (int i = 0; rc == 0 && i < pl->nfeeds; i++) {
        w.has[pl->feeds[i]] = true;
        w.owner[pl->feeds[i]] = &pl->vars[pl->feeds[i]].init_readers;
        pl->vars[pl->feeds[i]].used = true;
    }
    if (rc == 0)
        rc = vq__walk_block(&w, 0, &ext);
    /* A fetched version counts the final op as a reader that never
     * decrements: it stays until the next run's writer replaces it. */
    for (int i = 0; i < pl->nfetches && rc == 0; i++) {
        int v = pl->fetches[i];
        pl->vars[v].used = true;
        if (!w.has[v] && pl->vars[v].persistable) {
            rc = bind_persistable(pl, v, false);
            if (rc == NOT_IN_SCOPE)
                rc = vq__fail(VQ_EINVAL, "fetch %s: persistable, but not in the scope",
                              p->vars[v].name);
        } else if (!w.has[v]) {
            rc = vq__fail(VQ_EINVAL, "fetch %s: no op writes it and no feed provides it",
                          p->vars[v].name);
        } else if (!pl->vars[v].persistable) {
            (*w.owner[v])++;
        }
    }
    free(ext.v);
    free(w.has);
    free(w.owner);
    free(w.block_user);
    return rc;
}

struct pvar *vq__frame_slot(struct frame *fr, int v, bool *dep)
{
    struct plan *pl = fr->plan;
    int b = pl->prog->vars[v].block;
    for (struct frame *f = fr; f; f = f->up) {
        if (f->block != b)
            continue;
        *dep = f == fr;
        if (!f->owner)
            return &pl->vars[v];
        struct ctl *c = f->owner;
        const struct ctl_info *ci = c->fop->t->ctl;
        for (int k = 0; ci->is_while && k < ci->nouts; k++)
            if (ci->body_in[k] == v) {
                /* the value the previous iteration carries over */
                struct frame *prev = &c->frames[(f->slot + c->nframes - 1) % c->nframes];
                return &prev->vars[pl->local[ci->outs[0][k]]];
            }
        return &f->vars[pl->local[v]];
    }
    *dep = false;
    return NULL; /* not reached: preparation checked that v is visible */
}

/* The slots of a frame that is not the root: one engine var each for the
 * vars of its block that some op uses. */
int vq__frame_vars(struct frame *fr)
{
    struct plan *pl = fr->plan;
    int n = pl->block_nvars[fr->block];
    fr->vars = vq__calloc((size_t)(n ? n : 1), sizeof *fr->vars);
    if (!fr->vars)
        return vq__fail(VQ_ENOMEM, "prepare: out of memory");
    for (int v = 0; v < pl->nvars; v++) {
        if (pl->prog->vars[v].block != fr->block || !pl->vars[v].used)
            continue;
        struct pvar *s = &fr->vars[pl->local[v]];
        atomic_init(&s->readers_left, 0);
        if (!(s->ev = vq_var_new(pl->exec->engine, pl->prog->vars[v].name)))
            return vq__fail_prefixed(VQ_ENOMEM, "%s", pl->prog->vars[v].name);
        s->own_ev = true;
    }
    return 0;
}

/* ---- segments ----
 *
 * MXNet's bulk execution: consecutive kernel ops of a frame that form a
 * chain (each reads an output of the one before it) run as one engine op,
 * their kernels back to back, so that a chain of tiny ops pays the
 * engine's push, dependency tracking and hand-off once per segment instead
 * of once per op. The segment's engine op reads and writes the union of
 * its ops' vars. Its place in push order is its first op's, so running its
 * ops together is one of the serial orders the engine allows; what it can
 * cost is parallelism: an op that joins brings its own dependencies, which
 * then hold back the segment's first ops. So an op joins only when every
 * op of the frame it depends on (the last writer of each var it reads,
 * the last writer and the readers since of each var it writes) is in the
 * segment or in the chain that leads to it (those already run before the
 * segment's first op can start); dependencies on what was there before the
 * frame's ops (feeds, parameters, an earlier run's writes) are allowed.
 * Same priority, sync kernels, no control ops, at most SEG_MAX ops. Inside,
 * each op keeps its error message (op_end), its release of its inputs and
 * its profiler record (vq__prof_span, beside the segment's own). */
enum { SEG_MAX = 16 };

/* Per engine var of the frame: the last op that wrote it and the first op
 * that read it since (open addressing on the var's address). */
struct seg_map {
    struct seg_ent { vq_var *v; int writer, first_reader; } *ent;
    size_t mask;
};

static struct seg_ent *seg_find(struct seg_map *m, vq_var *v)
{
    size_t h = ((uintptr_t)v >> 4) * 0x9e3779b97f4a7c15ull;
    for (size_t i = h & m->mask;; i = (i + 1) & m->mask)
        if (!m->ent[i].v || m->ent[i].v == v) {
            if (!m->ent[i].v)
                m->ent[i] = (struct seg_ent){v, -1, -1};
            return &m->ent[i];
        }
}

/* The segment being built: its first op, and its vars (duplicates are
 * merged by vq_opr_new). */
struct seg {
    int start, len;
    int max;      /* SEG_MAX, or 1 with VQ_EXEC_NO_SEGMENTS */
    int bound;    /* ops from here on are in the segment or lead to it */
    vq_var **w, **r;
    int nw, nr, wcap, rcap;
};

static int seg_exec(void *arg, const vq_exec_ctx *x)
{
    struct fop *f = arg;
    vq_engine *e = f->t->plan->exec->engine;
    bool prof = vq__engine_profiling(e);
    for (int i = 0; i < f->seg_len; i++) {
        uint64_t t0 = prof ? vq__now_ns() : 0;
        op_exec(&f[i], x);
        if (prof)
            vq__prof_span(e, f[i].t->src->def->type, t0, vq__now_ns(), x ? x->worker : -1);
    }
    return 0;
}

/* The engine op of the segment sg, on its first fop. */
static int seg_close(struct frame *fr, struct seg *sg)
{
    if (sg->len == 0)
        return 0;
    struct plan *pl = fr->plan;
    struct fop *f = &fr->ops[sg->start];
    const vq__pop *src = f->t->src;
    bool async = sg->len == 1 && f->t->def->kernel_async && pl->exec->device.kind == VQ_DEV_CPU;
    vq_task t = {.fn = async ? NULL : sg->len > 1 ? seg_exec : op_exec,
                 .async_fn = async ? op_exec_async : NULL, .arg = f, .ctx = pl->exec->device,
                 .reads = sg->r, .nreads = sg->nr, .writes = sg->w, .nwrites = sg->nw,
                 .props = VQ_PROP_RUN_ON_FAILED,
                 .name = sg->len > 1 ? "segment" : src->def->type, .priority = src->priority};
    f->seg_len = sg->len;
    sg->len = sg->nw = sg->nr = 0;
    if (!(f->opr = vq_opr_new(pl->exec->engine, &t)))
        return vq__pop_error(f->t, VQ_ENOMEM);
    return 0;
}

/* Whether op k (a sync kernel op) may join the open segment; k's engine
 * vars are vars[0 .. nw) written, then nr read. */
static bool seg_joins(const struct frame *fr, const struct seg *sg, struct seg_map *m, int k,
                      vq_var *const *vars, int nw, int nr)
{
    if (sg->len == 0 || sg->len >= sg->max || sg->start + sg->len != k)
        return false;
    const struct fop *prev = &fr->ops[k - 1], *f = &fr->ops[k];
    /* an op with an async kernel has an engine op of its own */
    if (prev->t->src->priority != f->t->src->priority || prev->t->def->kernel_async ||
        f->t->def->kernel_async)
        return false;
    for (int i = 0; i < nw + nr; i++) {
        struct seg_ent *e = seg_find(m, vars[i]);
        if (e->writer >= 0 && e->writer < sg->bound)
            return false;
        if (i < nw && e->first_reader >= 0 && e->first_reader < sg->bound)
            return false;
    }
    return true;
}

/* Room for n more in *arr (capacity *cap); false when out of memory (*arr
 * stays). */
static bool seg_room(vq_var ***arr, int used, int n, int *cap)
{
    if (used + n <= *cap)
        return true;
    int c = *cap ? *cap : 16;
    while (c < used + n)
        c *= 2;
    vq_var **a = vq__realloc(*arr, (size_t)c * sizeof *a);
    if (!a)
        return false;
    *arr = a;
    *cap = c;
    return true;
}

static int seg_add(struct seg *sg, vq_var *const *vars, int nw, int nr)
{
    if (!seg_room(&sg->w, sg->nw, nw, &sg->wcap) || !seg_room(&sg->r, sg->nr, nr, &sg->rcap))
        return VQ_ENOMEM;
    if (nw) /* sg->w may still be NULL when nw is 0 (UBSan) */
        memcpy(sg->w + sg->nw, vars, (size_t)nw * sizeof *vars);
    if (nr)
        memcpy(sg->r + sg->nr, vars + nw, (size_t)nr * sizeof *vars);
    sg->nw += nw;
    sg->nr += nr;
    return 0;
}

/* One fop per op of the frame's block, its slots resolved, and the
 * prebuilt engine ops: one per segment (above), one per control op (its
 * instance, control.c). */
int vq__frame_ops(struct frame *fr)
{
    struct plan *pl = fr->plan;
    const vq__block *b = &pl->prog->blocks[fr->block];
    fr->ops = vq__calloc((size_t)(b->nops ? b->nops : 1), sizeof *fr->ops);
    if (!fr->ops)
        return vq__fail(VQ_ENOMEM, "prepare: out of memory");
    fr->nops = b->nops;
    size_t accesses = 0;
    for (int k = 0; k < b->nops; k++)
        accesses += (size_t)pl->ops[b->ops[k]].nin + (size_t)pl->ops[b->ops[k]].src->nout;
    size_t cap = 16;
    while (cap < 2 * accesses)
        cap *= 2;
    struct seg_map m = {vq__calloc(cap, sizeof *m.ent), cap - 1};
    if (!m.ent)
        return vq__fail(VQ_ENOMEM, "prepare: out of memory");
    struct seg sg = {.max = pl->exec->no_segments ? 1 : SEG_MAX};
    int rc = 0;
    for (int k = 0; k < b->nops && rc == 0; k++) {
        struct fop *f = &fr->ops[k];
        f->t = &pl->ops[b->ops[k]];
        f->fr = fr;
        const vq__pop *src = f->t->src;
        f->in = vq__malloc((size_t)(f->t->nin ? f->t->nin : 1) * sizeof *f->in);
        f->out = vq__malloc((size_t)(src->nout ? src->nout : 1) * sizeof *f->out);
        if (!f->in || !f->out) {
            rc = vq__fail(VQ_ENOMEM, "prepare: out of memory");
            break;
        }
        vq_var *vars[2 * VQ__MAX_SLOTS];
        int nw = 0, nr = 0;
        bool dep, linked = false; /* linked: reads an output of op k - 1 */
        for (int j = 0; j < src->nout; j++) {
            f->out[j] = vq__frame_slot(fr, src->out[j], &dep);
            vars[nw++] = f->out[j]->ev;
        }
        for (int i = 0; i < f->t->nin; i++) {
            f->in[i] = vq__frame_slot(fr, f->t->in[i], &dep);
            bool written = false;
            for (int j = 0; j < src->nout && !written; j++)
                written = src->out[j] == f->t->in[i];
            if (!f->t->ctl && dep && !written) /* a control op builds its own */
                vars[nw + nr++] = f->in[i]->ev;
            for (int j = 0; k > 0 && dep && !linked && j < fr->ops[k - 1].t->src->nout; j++)
                linked = fr->ops[k - 1].out[j] == f->in[i];
        }
        if (f->t->ctl) {
            if ((rc = seg_close(fr, &sg)) == 0)
                rc = vq__ctl_build(f);
            continue;
        }
        if (!(linked && seg_joins(fr, &sg, &m, k, vars, nw, nr))) {
            int from = sg.len ? sg.bound : k;
            if ((rc = seg_close(fr, &sg)) < 0)
                break;
            sg.start = k;
            /* a linked op's chain leads to it from where the last one's did */
            sg.bound = linked ? from : k;
        }
        if (seg_add(&sg, vars, nw, nr) < 0) {
            rc = vq__fail(VQ_ENOMEM, "prepare: out of memory");
            break;
        }
        sg.len++;
        for (int i = nw; i < nw + nr; i++) {
            struct seg_ent *e = seg_find(&m, vars[i]);
            if (e->first_reader < 0)
                e->first_reader = k;
        }
        for (int i = 0; i < nw; i++)
            *seg_find(&m, vars[i]) = (struct seg_ent){vars[i], k, -1};
    }
    if (rc == 0)
        rc = seg_close(fr, &sg);
    free(sg.w);
    free(sg.r);
    free(m.ent);
    return rc;
}

void vq__push_prebuilt(vq_engine *e, vq_opr *o)
{
    while (vq_push_opr(e, o) == VQ_ENOMEM)
        sched_yield();
}

void vq__frame_push_from(struct frame *fr, int k)
{
    vq_engine *e = fr->plan->exec->engine;
    if (k == 0 && fr->head)
        vq__push_prebuilt(e, fr->head);
    for (; k < fr->nops; k++) {
        if (!fr->ops[k].ctl) {
            if (fr->ops[k].opr) /* NULL: inside an earlier op's segment */
                vq__push_prebuilt(e, fr->ops[k].opr);
        }
        else if (!vq__ctl_push(&fr->ops[k]))
            return; /* the rest follows the control op's blocks */
    }
    vq__push_prebuilt(e, fr->tail);
}

void vq__frame_destroy(struct frame *fr)
{
    struct plan *pl = fr->plan;
    if (!pl)
        return; /* never built */
    vq_engine *e = pl->exec->engine;
    for (int k = 0; fr->ops && k < fr->nops; k++) {
        struct fop *f = &fr->ops[k];
        if (f->ctl)
            vq__ctl_destroy(f->ctl);
        if (f->opr)
            vq_opr_free(e, f->opr);
        free(f->in);
        free(f->out);
        free(f->infer_cache);
    }
    free(fr->ops);
    fr->ops = NULL;
    if (fr->step)
        vq_opr_free(e, fr->step);
    if (fr->head)
        vq_opr_free(e, fr->head);
    if (fr->owner) {
        for (int i = 0; fr->vars && i < pl->block_nvars[fr->block]; i++) {
            vq_tensor_release(fr->vars[i].value);
            if (fr->vars[i].own_ev)
                vq_var_free(e, fr->vars[i].ev);
        }
        free(fr->vars);
    }
}

/* Engine vars of the root frame, its ops, and the final op. */
static int plan_build_ops(struct plan *pl)
{
    vq_engine *e = pl->exec->engine;
    int rc = 0;
    for (int v = 0; v < pl->nvars && rc == 0; v++) {
        struct pvar *pv = &pl->vars[v];
        if (!pv->used || pl->prog->vars[v].block != 0)
            continue;
        if (pv->persistable) {
            pv->ev = vq_tensor_var(pv->value, e);
        } else {
            pv->ev = vq_var_new(e, pl->prog->vars[v].name);
            pv->own_ev = pv->ev != NULL;
        }
        /* a scope tensor of another engine, or no memory for the var */
        if (!pv->ev)
            rc = vq__fail_prefixed(pv->persistable && atomic_load(&pv->value->engine) != e
                                       ? VQ_EINVAL
                                       : VQ_ENOMEM,
                                   "%s", pl->prog->vars[v].name);
    }
    if (rc == 0 && !(pl->done_var = vq_var_new(e, "run_done")))
        rc = VQ_ENOMEM;
    pl->root = (struct frame){.plan = pl, .block = 0, .vars = pl->vars};
    if (rc == 0)
        rc = vq__frame_ops(&pl->root);
    if (rc)
        return rc;
    /* The final op must follow every op of the run. An op that some later
     * op must wait for (it writes a var accessed later, or reads a var
     * written later) is followed by it; the others, the sinks, are what
     * the final op reads: their outputs, the fetches, and feeds no op
     * touches. (A control op writes its outputs when all it ran is done.) */
    const struct frame *root = &pl->root;
    vq_var **vars = vq__malloc((size_t)(pl->nvars + 1) * sizeof *vars);
    int *last_access = vq__malloc(((size_t)pl->nvars + 1) * sizeof *last_access);
    int *last_write = vq__malloc(((size_t)pl->nvars + 1) * sizeof *last_write);
    bool *pick = vq__calloc((size_t)pl->nvars + 1, sizeof *pick);
    if (!vars || !last_access || !last_write || !pick) {
        rc = vq__fail(VQ_ENOMEM, "prepare: out of memory");
        goto out;
    }
    for (int v = 0; v < pl->nvars; v++)
        last_access[v] = last_write[v] = -1;
    for (int k = 0; k < root->nops; k++) {
        const struct pop *t = root->ops[k].t;
        for (int i = 0; i < t->nin; i++)
            last_access[t->in[i]] = k;
        for (int j = 0; j < t->src->nout; j++)
            last_access[t->src->out[j]] = last_write[t->src->out[j]] = k;
    }
    for (int k = 0; k < root->nops; k++) {
        const struct pop *t = root->ops[k].t;
        bool followed = false;
        for (int j = 0; j < t->src->nout && !followed; j++)
            followed = last_access[t->src->out[j]] > k;
        for (int i = 0; i < t->nin && !followed; i++)
            followed = last_write[t->in[i]] > k;
        for (int j = 0; j < t->src->nout && !followed; j++)
            pick[t->src->out[j]] = true;
    }
    for (int i = 0; i < pl->nfetches; i++)
        pick[pl->fetches[i]] = true;
    for (int i = 0; i < pl->nfeeds; i++)
        if (last_access[pl->feeds[i]] < 0)
            pick[pl->feeds[i]] = true;
    int n = 0;
    for (int v = 0; v < pl->nvars; v++)
        if (pick[v])
            vars[n++] = pl->vars[v].ev;
    vq_task t = {.fn = final_exec, .arg = pl, .reads = vars, .nreads = n,
                 .writes = &pl->done_var, .nwrites = 1, .props = VQ_PROP_RUN_ON_FAILED,
                 .name = "run_done"};
    if (!(pl->final = vq_opr_new(e, &t)))
        rc = vq__fail_prefixed(VQ_ENOMEM, "%s", "prepare");
    pl->root.tail = pl->final;
out:
    free(vars);
    free(last_access);
    free(last_write);
    free(pick);
    return rc;
}

/* Plans are destroyed outside the executor's lock: destroying pushes var
 * deletions, and on the naive engine a push runs ops, which take the lock
 * (a run's final op) while the engine's own lock is held. So a plan dropped
 * under the lock is buried, and reap() destroys it once the lock is let
 * go. */
static void bury(vq_exec *ex, struct plan *pl)
{
    pl->lru_next = ex->dead;
    ex->dead = pl;
}

static void reap(vq_exec *ex)
{
    pthread_mutex_lock(&ex->lock);
    struct plan *pl = ex->dead;
    ex->dead = NULL;
    pthread_mutex_unlock(&ex->lock);
    while (pl) {
        struct plan *next = pl->lru_next;
        plan_destroy(pl);
        pl = next;
    }
}

static int plan_new(vq_exec *ex, const vq_program *p, vq_scope *s, const char *const *feeds,
                    int nfeeds, const char *const *fetches, int nfetches, struct plan **out)
{
    struct plan *pl = vq__calloc(1, sizeof *pl);
    if (!pl)
        return vq__fail(VQ_ENOMEM, "prepare: out of memory");
    pl->exec = ex;
    pl->scope = s;
    pthread_mutexattr_t recursive;
    pthread_mutexattr_init(&recursive);
    pthread_mutexattr_settype(&recursive, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&pl->push_lock, &recursive);
    pthread_mutexattr_destroy(&recursive);
    pthread_mutex_init(&pl->ring_lock, NULL);
    pthread_cond_init(&pl->ring_cond, NULL);
    int rc = vq__program_copy(p, &pl->prog);
    if (rc == 0) {
        pl->nvars = pl->prog->nvars;
        size_t nv = (size_t)(pl->nvars ? pl->nvars : 1);
        pl->vars = vq__calloc(nv, sizeof *pl->vars);
        pl->local = vq__malloc(nv * sizeof *pl->local);
        pl->block_nvars = vq__calloc((size_t)pl->prog->nblocks, sizeof *pl->block_nvars);
        if (!pl->vars || !pl->local || !pl->block_nvars)
            rc = vq__fail(VQ_ENOMEM, "prepare: out of memory");
    }
    for (int v = 0; rc == 0 && v < pl->nvars; v++) {
        const vq__pvar *d = &pl->prog->vars[v];
        pl->vars[v].meta.dtype = d->dtype;
        pl->vars[v].meta.ndim = d->ndim;
        memcpy(pl->vars[v].meta.shape, d->shape, sizeof d->shape);
        pl->vars[v].persistable = d->persistable;
        atomic_init(&pl->vars[v].readers_left, 0);
        pl->local[v] = pl->block_nvars[d->block]++;
    }
    if (rc == 0 && (rc = find_names(pl->prog, "feed", feeds, nfeeds, &pl->feeds)) == 0)
        pl->nfeeds = nfeeds;
    for (int i = 0; rc == 0 && i < pl->nfeeds; i++)
        if (pl->vars[pl->feeds[i]].persistable)
            rc = vq__fail(VQ_EINVAL, "feed %s: the var is persistable; set it in the scope",
                          feeds[i]);
    if (rc == 0 && (rc = find_names(pl->prog, "fetch", fetches, nfetches, &pl->fetches)) == 0)
        pl->nfetches = nfetches;
    if (rc == 0)
        rc = plan_walk(pl);
    if (rc == 0)
        rc = plan_build_ops(pl);
    if (rc) {
        bury(ex, pl);
        return rc;
    }
    *out = pl;
    return 0;
}

/* ---- the plan cache ---- */

/* The names part of a key: feeds, then fetches, each NUL terminated, with
 * the counts in front so that (a | b) and (a b |) differ. */
static char *key_names(const char *const *feeds, int nfeeds, const char *const *fetches,
                       int nfetches, size_t *len)
{
    size_t n = 32;
    for (int i = 0; i < nfeeds; i++)
        n += strlen(feeds[i]) + 1;
    for (int i = 0; i < nfetches; i++)
        n += strlen(fetches[i]) + 1;
    char *buf = vq__malloc(n);
    if (!buf)
        return NULL;
    /* no printf: this runs once per run */
    memcpy(buf, &nfeeds, sizeof nfeeds);
    memcpy(buf + sizeof nfeeds, &nfetches, sizeof nfetches);
    size_t at = sizeof nfeeds + sizeof nfetches;
    for (int i = 0; i < nfeeds + nfetches; i++) {
        const char *nm = i < nfeeds ? feeds[i] : fetches[i - nfeeds];
        size_t l = strlen(nm) + 1;
        memcpy(buf + at, nm, l);
        at += l;
    }
    *len = at;
    return buf;
}

static void lru_unlink(vq_exec *ex, struct plan *pl)
{
    if (pl->lru_prev)
        pl->lru_prev->lru_next = pl->lru_next;
    else
        ex->lru_head = pl->lru_next;
    if (pl->lru_next)
        pl->lru_next->lru_prev = pl->lru_prev;
    else
        ex->lru_tail = pl->lru_prev;
    pl->lru_prev = pl->lru_next = NULL;
    ex->nplans--;
}

static void lru_push_front(vq_exec *ex, struct plan *pl)
{
    pl->lru_prev = NULL;
    pl->lru_next = ex->lru_head;
    if (ex->lru_head)
        ex->lru_head->lru_prev = pl;
    ex->lru_head = pl;
    if (!ex->lru_tail)
        ex->lru_tail = pl;
    ex->nplans++;
}

/* Drops idle plans from the cold end while the cache is over size. A plan
 * with runs in flight stays until a later call. Called locked. */
static void lru_trim(vq_exec *ex)
{
    struct plan *pl = ex->lru_tail;
    while (ex->nplans > ex->cache_size && pl) {
        struct plan *prev = pl->lru_prev;
        if (pl->refs == 1) {
            lru_unlink(ex, pl);
            bury(ex, pl);
        }
        pl = prev;
    }
}

/* Finds or builds the plan and pins it (refs + 1). Called locked. */
static int plan_get(vq_exec *ex, const vq_program *p, vq_scope *s, const char *const *feeds,
                    int nfeeds, const char *const *fetches, int nfetches, struct plan **out)
{
    size_t nlen;
    char *names = key_names(feeds, nfeeds, fetches, nfetches, &nlen);
    if (!names)
        return vq__fail(VQ_ENOMEM, "prepare: out of memory");
    uint64_t ph = vq_program_hash(p);
    struct {
        uint64_t prog;
        int kind, id;
    } head = {ph, ex->device.kind, ex->device.id};
    XXH3_state_t *st = XXH3_createState();
    if (!st) {
        free(names);
        return vq__fail(VQ_ENOMEM, "prepare: out of memory");
    }
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, &head, sizeof head);
    XXH3_64bits_update(st, names, nlen);
    uint64_t key = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    uint64_t gen = s ? vq__scope_generation(s) : 0, sid = vq__scope_id(s);
    for (struct plan *pl = ex->lru_head; pl; pl = pl->lru_next) {
        if (pl->key != key || pl->prog_hash != ph || pl->scope_id != sid || pl->key_len != nlen ||
            memcmp(pl->key_names, names, nlen))
            continue;
        if (pl->scope_gen != gen && pl->refs == 1) {
            /* The scope's bindings changed: the plan's persistable vars may
             * point at old tensors. Prepare again. */
            lru_unlink(ex, pl);
            bury(ex, pl);
            break;
        }
        if (pl->scope_gen != gen)
            continue;
        lru_unlink(ex, pl);
        lru_push_front(ex, pl);
        pl->refs++;
        ex->stats.cache_hits++;
        free(names);
        *out = pl;
        return 0;
    }
    struct plan *pl = NULL;
    int rc = plan_new(ex, p, s, feeds, nfeeds, fetches, nfetches, &pl);
    if (rc) {
        free(names);
        return rc;
    }
    pl->key = key;
    pl->prog_hash = ph;
    pl->key_names = names;
    pl->key_len = nlen;
    pl->scope_gen = s ? vq__scope_generation(s) : 0; /* after our own bindings */
    pl->scope_id = sid;
    pl->refs = 2;
    ex->stats.prepares++;
    lru_push_front(ex, pl);
    lru_trim(ex);
    *out = pl;
    return 0;
}

static void plan_unpin(vq_exec *ex, struct plan *pl)
{
    pthread_mutex_lock(&ex->lock);
    pl->refs--;
    pthread_cond_broadcast(&ex->idle);
    lru_trim(ex);
    pthread_mutex_unlock(&ex->lock);
    reap(ex);
}

/* ---- public ---- */

VQ_API int vq_exec_new(vq_exec **out, vq_engine *e, const vq_exec_opts *opts)
{
    if (!out || !e)
        return vq__fail(VQ_EINVAL, "vq_exec_new: NULL argument");
    vq_exec_opts o = opts ? *opts : (vq_exec_opts){0};
    if (o.cache_size < 0)
        return vq__fail(VQ_EINVAL, "vq_exec_new: cache_size is %d", o.cache_size);
    if (o.flags & ~(VQ_EXEC_CHECK_NAN | VQ_EXEC_FETCH_HOST | VQ_EXEC_NO_SEGMENTS))
        return vq__fail(VQ_EINVAL, "vq_exec_new: unknown flags 0x%x", o.flags);
    const char *env = getenv("VARQ_CHECK_NAN");
    if (env && strcmp(env, "0") && strcmp(env, "1") && *env)
        return vq__fail(VQ_EINVAL, "vq_exec_new: VARQ_CHECK_NAN is \"%s\", not 0 or 1", env);
    bool check_nan = (o.flags & VQ_EXEC_CHECK_NAN) || (env && !strcmp(env, "1"));
    vq__allocator *a;
    int rc;
    if (o.device.kind == VQ_DEV_GPU && (rc = vq__gpu_allocator(o.device.id, &a)) < 0) {
        /* The device must exist now: VQ_ENOSYS / VQ_EINVAL saying why. */
        char what[48];
        snprintf(what, sizeof what, "vq_exec_new: GPU %d", o.device.id);
        return vq__fail_prefixed(rc, "%s", what);
    } else if (o.device.kind != VQ_DEV_GPU &&
               (o.device.kind != VQ_DEV_CPU || o.device.id != 0)) {
        return vq__fail(VQ_EINVAL, "vq_exec_new: device {%d, %d} is not CPU 0 or a GPU",
                        o.device.kind, o.device.id);
    }
    vq_exec *ex = vq__calloc(1, sizeof *ex);
    if (!ex)
        return vq__fail(VQ_ENOMEM, "vq_exec_new: out of memory");
    ex->engine = e;
    ex->device = o.device;
    ex->cache_size = o.cache_size ? o.cache_size : 16;
    ex->check_nan = check_nan;
    ex->fetch_host = (o.flags & VQ_EXEC_FETCH_HOST) != 0;
    const char *seg = getenv("VARQ_EXEC_SEGMENTS");
    ex->no_segments = (o.flags & VQ_EXEC_NO_SEGMENTS) || (seg && !strcmp(seg, "0"));
    pthread_mutex_init(&ex->lock, NULL);
    pthread_cond_init(&ex->idle, NULL);
    *out = ex;
    return 0;
}

VQ_API void vq_exec_free(vq_exec *ex)
{
    if (!ex)
        return;
    pthread_mutex_lock(&ex->lock);
    for (;;) {
        bool busy = false;
        for (struct plan *pl = ex->lru_head; pl && !busy; pl = pl->lru_next)
            busy = pl->refs > 1;
        if (!busy)
            break;
        pthread_cond_wait(&ex->idle, &ex->lock);
    }
    while (ex->lru_head) {
        struct plan *pl = ex->lru_head;
        lru_unlink(ex, pl);
        bury(ex, pl);
    }
    pthread_mutex_unlock(&ex->lock);
    reap(ex);
    pthread_mutex_destroy(&ex->lock);
    pthread_cond_destroy(&ex->idle);
    free(ex);
}

VQ_API int vq_exec_get_stats(vq_exec *ex, vq_exec_stats *out)
{
    if (!ex || !out)
        return vq__fail(VQ_EINVAL, "vq_exec_get_stats: NULL argument");
    pthread_mutex_lock(&ex->lock);
    *out = ex->stats;
    pthread_mutex_unlock(&ex->lock);
    return 0;
}

VQ_API int vq_exec_prepare(vq_exec *ex, const vq_program *p, vq_scope *s,
                           const char *const *feeds, int nfeeds, const char *const *fetches,
                           int nfetches)
{
    if (!ex || !p || nfeeds < 0 || nfetches < 0 || (nfeeds && !feeds) || (nfetches && !fetches))
        return vq__fail(VQ_EINVAL, "vq_exec_prepare: bad argument");
    for (int i = 0; i < nfeeds; i++)
        if (!feeds[i])
            return vq__fail(VQ_EINVAL, "vq_exec_prepare: feed %d is NULL", i);
    for (int i = 0; i < nfetches; i++)
        if (!fetches[i])
            return vq__fail(VQ_EINVAL, "vq_exec_prepare: fetch %d is NULL", i);
    pthread_mutex_lock(&ex->lock);
    struct plan *pl;
    int rc = plan_get(ex, p, s, feeds, nfeeds, fetches, nfetches, &pl);
    pthread_mutex_unlock(&ex->lock);
    reap(ex);
    if (rc == 0)
        plan_unpin(ex, pl);
    return rc;
}

#define NAMES_ON_STACK 32

static int run_start(vq_exec *ex, const vq_program *p, vq_scope *s, const vq_feed *feeds,
                     int nfeeds, vq_fetch *fetches, int nfetches, void (*done)(void *, int),
                     void *user, char *msg_out)
{
    if (!ex || !p || nfeeds < 0 || nfetches < 0 || (nfeeds && !feeds) || (nfetches && !fetches))
        return vq__fail(VQ_EINVAL, "vq_exec_run: bad argument");
    const char *fstack[NAMES_ON_STACK], *gstack[NAMES_ON_STACK];
    const char **fnames = nfeeds <= NAMES_ON_STACK ? fstack : vq__malloc((size_t)nfeeds * sizeof *fnames);
    const char **gnames = nfetches <= NAMES_ON_STACK ? gstack
                                                     : vq__malloc((size_t)nfetches * sizeof *gnames);
    struct run *r = vq__calloc(1, sizeof *r);
    struct bind **binds = vq__calloc((size_t)(nfeeds ? nfeeds : 1), sizeof *binds);
    int rc = 0;
    bool hold = ex->device.kind == VQ_DEV_GPU && nfeeds > 0; /* host feeds, see struct run */
    if (r && hold)
        r->held = vq__malloc((size_t)nfeeds * sizeof *r->held);
    if (!fnames || !gnames || !r || !binds || (hold && !r->held))
        rc = vq__fail(VQ_ENOMEM, "vq_exec_run: out of memory");
    for (int i = 0; rc == 0 && i < nfeeds; i++) {
        if (!feeds[i].name || !feeds[i].tensor)
            rc = vq__fail(VQ_EINVAL, "vq_exec_run: feed %d has no name or tensor", i);
        else
            fnames[i] = feeds[i].name;
    }
    for (int i = 0; rc == 0 && i < nfetches; i++) {
        if (!fetches[i].name)
            rc = vq__fail(VQ_EINVAL, "vq_exec_run: fetch %d has no name", i);
        gnames[i] = fetches[i].name;
        fetches[i].tensor = NULL;
    }
    struct plan *pl = NULL;
    if (rc == 0) {
        pthread_mutex_lock(&ex->lock);
        rc = plan_get(ex, p, s, fnames, nfeeds, gnames, nfetches, &pl);
        pthread_mutex_unlock(&ex->lock);
        reap(ex);
    }
    /* Feeds must fit their vars; one that imperative ops wrote is waited
     * for here, so those ops come first. */
    for (int i = 0; rc == 0 && i < nfeeds; i++) {
        vq__meta m;
        meta_of_tensor(&m, feeds[i].tensor);
        const struct pvar *pv = &pl->vars[pl->feeds[i]];
        vq_ctx fd = feeds[i].tensor->dev, xd = ex->device;
        if (fd.kind == VQ_DEV_GPU && (xd.kind != VQ_DEV_GPU || fd.id != xd.id)) {
            char where[32];
            if (xd.kind == VQ_DEV_GPU)
                snprintf(where, sizeof where, "GPU %d", xd.id);
            else
                snprintf(where, sizeof where, "the CPU");
            rc = vq__fail(VQ_EINVAL, "feed %s: the tensor is on GPU %d; the executor runs on %s "
                                     "(copy it with vq_tensor_copy_to)",
                          feeds[i].name, fd.id, where);
        } else if (!vq__meta_compatible(&m, &pv->meta)) {
            char a[140], b[140];
            vq__meta_str(a, sizeof a, &m);
            vq__meta_str(b, sizeof b, &pv->meta);
            rc = vq__fail(VQ_EINVAL, "feed %s: got %s, the var is %s", feeds[i].name, a, b);
        } else if (atomic_load_explicit(&feeds[i].tensor->var, memory_order_acquire) &&
                   (rc = vq_tensor_wait(feeds[i].tensor)) < 0) {
            /* A tensor written by imperative ops: they finish first, and a
             * failure of theirs fails this call instead of poisoning the
             * run's vars (the engine would skip the run's ops). */
            char what[160];
            snprintf(what, sizeof what, "feed %s", feeds[i].name);
            rc = vq__fail_prefixed(rc, "%s", what);
        } else if (!(binds[i] = vq__malloc(sizeof *binds[i]))) {
            rc = vq__fail(VQ_ENOMEM, "vq_exec_run: out of memory");
        } else {
            bool copy = xd.kind == VQ_DEV_GPU && fd.kind != VQ_DEV_GPU;
            *binds[i] = (struct bind){pl, r, pl->feeds[i], copy, vq_tensor_retain(feeds[i].tensor)};
            if (copy)
                r->held[r->nheld++] = vq_tensor_retain(feeds[i].tensor);
        }
    }
    if (rc) {
    fail:
        for (int i = 0; i < nfeeds && binds; i++)
            if (binds[i])
                bind_free(binds[i]);
        if (pl)
            plan_unpin(ex, pl);
        if (r)
            run_free(r);
        goto out;
    }
    r->plan = pl;
    r->fetches = fetches;
    r->done = done;
    r->user = user;
    r->msg_out = msg_out;
    atomic_init(&r->err, 0);
    atomic_init(&r->peak, 0);

    pthread_mutex_lock(&pl->push_lock);
    pthread_mutex_lock(&pl->ring_lock);
    while (pl->inflight >= RING) {
        if (vq_thread_in_op()) {
            /* Waiting here would hold a worker the runs in flight need. */
            pthread_mutex_unlock(&pl->ring_lock);
            pthread_mutex_unlock(&pl->push_lock);
            rc = vq__fail(VQ_EBUSY, "vq_exec_run_async: %d runs of this plan are in flight "
                                    "and this is an op: it cannot wait for one to end",
                          RING);
            goto fail;
        }
        pthread_cond_wait(&pl->ring_cond, &pl->ring_lock);
    }
    pl->inflight++;
    pthread_mutex_unlock(&pl->ring_lock);
    pl->ring[pl->next_seq++ % RING] = r;
    vq_engine *e = ex->engine;
    for (int i = 0; i < nfeeds; i++) {
        vq_task t = {.fn = bind_exec, .arg = binds[i], .arg_free = bind_free,
                     .props = VQ_PROP_RUN_ON_FAILED, .writes = &pl->vars[pl->feeds[i]].ev,
                     .nwrites = 1, .name = "feed"};
        if (binds[i]->copy) {
            t.ctx = ex->device;
            t.props |= VQ_PROP_COPY_TO_DEV;
        }
        if (vq_push(e, &t) < 0) {
            /* Out of memory: the run fails; its ops still run to keep
             * every op's count of executions in step. */
            atomic_store(&r->err, VQ_ENOMEM);
            snprintf(r->msg, sizeof r->msg, "feed %s: %s", feeds[i].name, vq_errmsg());
            bind_free(binds[i]);
        }
    }
    vq__frame_push_from(&pl->root, 0); /* ends with the final op */
    pthread_mutex_unlock(&pl->push_lock);
    rc = 0;
out:
    if (fnames != fstack)
        free(fnames);
    if (gnames != gstack)
        free(gnames);
    free(binds);
    return rc;
}

VQ_API int vq_exec_run_async(vq_exec *ex, const vq_program *p, vq_scope *s,
                             const vq_feed *feeds, int nfeeds, vq_fetch *fetches, int nfetches,
                             void (*done)(void *user, int err), void *user)
{
    if (!done)
        return vq__fail(VQ_EINVAL, "vq_exec_run_async: done is NULL");
    return run_start(ex, p, s, feeds, nfeeds, fetches, nfetches, done, user, NULL);
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

/* Spins (yielding) this many times before sleeping: a small run ends within
 * a few microseconds, and a futex wake-up costs more than that on a VM. */
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
    int rc = run_start(x, p, s, feeds, nfeeds, fetches, nfetches, sync_done, &w, w.msg);
    if (rc == 0) {
        for (int i = 0; i < SYNC_SPINS &&
                        !atomic_load_explicit(&w.finished, memory_order_acquire);
             i++)
            sched_yield();
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
