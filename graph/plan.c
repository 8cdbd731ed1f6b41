/* The executor's plans: preparation of a program into a plan (checked,
 * shapes inferred, one engine var per program var, one prebuilt engine op
 * per program op or segment of ops). segments.c builds each frame's engine
 * ops (its segments); plan_cache.c keeps the executor's LRU cache of plans
 * and the executor's life.
 *
 * This file owns everything a plan is before its first run and everything
 * that does not change from run to run; run.c owns what happens once per
 * run (the pushes, the engine ops' bodies, the final report). The two meet
 * in plan.h: the structures, and the few calls each makes of the other
 * (vq__plan_acquire / vq__plan_unpin from run.c; the engine ops' bodies
 * vq__op_exec, vq__seg_exec, vq__final_exec from here, named in the
 * prebuilt ops). A split by ownership rather than by size: preparation
 * runs under the executor's lock and may fail with a message; the run side
 * runs inside engine ops and never fails the engine.
 *
 * Preparation walks the program once from block 0 (plan_walk): the feeds
 * first, then each op in order (vq__walk_block: the op's own checks, its
 * inputs, the inference of its outputs, the count of its outputs'
 * readers), then the fetches. Cond and while ops walk their blocks through
 * control.c. It is linear in ops plus edges: no dependency graph is built,
 * the engine's var queues do all the ordering at run time.
 *
 * Release by reference count: preparation counts, for each version of each
 * var (the value one op writes, until the next op writes the var), the ops
 * that read it. The writer sets the var's counter to that number; each
 * reader decrements it after its kernel; the last one releases the tensor,
 * unless the version is fetched or the var persistable. Versions of one var
 * are serialized by the engine (the next writer waits for the readers), so
 * one counter per var suffices even with runs overlapping. */
#include "graph_internal.h"
#include "memplan.h"
#include "plan.h"
#include "optimize.h"
#include "scope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOT_IN_SCOPE 1 /* bind_persistable: not bound and not written first */

/* ---- preparation ---- */

void vq__plan_destroy(struct plan *pl)
{
    vq_engine *e = pl->exec->engine;
    vq__frame_destroy(&pl->root);
    for (int k = 0; pl->ops && k < pl->nops; k++) {
        struct pop *t = &pl->ops[k];
        if (t->src && t->in != t->src->in)
            free(t->in);
        vq__ctl_info_free(t->ctl);
    }
    if (pl->final)
        vq_opr_free(e, pl->final);
    if (pl->final_all)
        vq_opr_free(e, pl->final_all);
    for (int v = 0; pl->vars && v < pl->nvars; v++) {
        vq_tensor_release(pl->vars[v].value);
        vq_tensor_release(pl->vars[v].pval);
        if (pl->vars[v].own_ev)
            vq_var_free(e, pl->vars[v].ev);
    }
    if (pl->done_var)
        vq_var_free(e, pl->done_var);
    vq__memplan_free(pl); /* after the slots: none holds an arena's header now */
    vq__big_free(pl->ops);
    vq__big_free(pl->vars);
    vq__big_free(pl->rec);
    vq__big_free(pl->local);
    free(pl->block_nvars);
    free(pl->feeds);
    free(pl->feed_metas);
    free(pl->fetches);
    free(pl->key_names);
    vq_program_free(pl->prog);
    vq__arena_free(&pl->arena);
    vq__arena_free(&pl->counts);
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

void vq__meta_of_tensor(vq__meta *m, const vq_tensor *t)
{
    m->dtype = t->dtype;
    m->ndim = t->ndim;
    memcpy(m->shape, t->shape, sizeof m->shape);
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
            return vq__fail(VQ_ENOMEM, "persistable var %s: out of memory", name);
    }
    int rc = scope_move(pl, name, &t);
    if (rc < 0) {
        vq_tensor_release(t);
        return rc;
    }
    vq__meta m;
    vq__meta_of_tensor(&m, t);
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
        return vq__fail(VQ_ENOMEM, "out of memory");
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

void *vq__grow(void *arr, int n, int *cap, size_t elem)
{
    if (n < *cap)
        return arr;
    int c = *cap ? 2 * *cap : 8;
    void *a = vq__realloc(arr, (size_t)c * elem);
    if (!a) {
        vq__fail(VQ_ENOMEM, "out of memory");
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
    struct vrec *r = &w->rec[v]; /* the var's one line: not its slot */
    int rc = 0;
    r->used = true;
    if (!r->has && r->persistable) {
        rc = bind_persistable(pl, v, false);
        if (rc == NOT_IN_SCOPE)
            rc = vq__pop_error(t, vq__fail(VQ_EINVAL,
                                           "reads var %s, which is persistable but is not in "
                                           "the scope and no earlier op writes it",
                                           p->vars[v].name));
        r->has = rc == 0;
    } else if (!r->has) {
        rc = vq__pop_error(t, vq__fail(VQ_EINVAL,
                                       "reads var %s, which no earlier op writes and no feed "
                                       "provides",
                                       p->vars[v].name));
    }
    if (rc)
        return rc;
    /* Readers of the version read here. A var of an enclosing block is
     * held by the control op whose block this is: not counted here. An op
     * that writes the var it reads (in place) counts too: vq__op_exec
     * releases the version it read before it sets the one it wrote. */
    /* block 0 sees only its own vars (the builder checked what an op
     * names): no look at the var's declaration, a cache miss per read in
     * a big program */
    int vblock = block ? p->vars[v].block : 0;
    bool counts = !r->persistable && vblock == block;
    for (int j = 0; j < t->src->nout && counts && (t->def->flags & VQ__CONTROL); j++)
        counts = t->src->out[j] != v; /* a control op releases its reads at its end */
    for (int ii = 0; ii < i && counts; ii++)
        counts = t->in[ii] != v;
    t->in_counts[i] = counts;
    if (counts)
        (*r->owner)++;
    if (vblock != block)
        return vq__varset_add(ext, v);
    return 0;
}

/* ---- shape values at preparation ---- */

/* The most elements a value preparation computes may have: shapes,
 * bounds, a few indices. */
#define PVAL_MAX_ELEMS 64

static bool meta_known(const vq__meta *m)
{
    for (int d = 0; d < m->ndim; d++)
        if (m->shape[d] < 0)
            return false;
    return true;
}

static bool pval_size_ok(const vq__meta *m)
{
    int64_t n = vq__numel(m->ndim, m->shape);
    return n >= 0 && n <= PVAL_MAX_ELEMS;
}

/* The value preparation knows for var v read by an op of block 0: one it
 * computed, or a small integer scope tensor on the host that no op of the
 * program writes (the importer's constants: shape arithmetic reads them;
 * binding another tensor to the name prepares again, plan_cache.c). */
static vq_tensor *pval_of(struct walk *w, int v)
{
    struct pvar *pv = &w->pl->vars[v];
    if (pv->pval || !pv->persistable || w->written[v] || !pv->value)
        return pv->pval;
    const vq_tensor *t = pv->value;
    if ((t->dtype == VQ_I64 || t->dtype == VQ_I32) && t->dev.kind == VQ_DEV_CPU &&
        t->numel <= PVAL_MAX_ELEMS)
        pv->pval = vq_tensor_retain(pv->value);
    return pv->pval;
}

/* After op t of block 0 inferred om (params): its outputs' values when
 * preparation can compute them, small ones of a deterministic op with a
 * CPU kernel, from its inputs' values, or for an op whose kernel reads only
 * its inputs' shapes (VQ__META_ONLY: shape) from their metas; the values
 * its outputs held before are dropped (a var written twice). A failure
 * computing one only leaves it unknown: the op computes it when it runs. */
static void pval_compute(struct walk *w, const struct pop *t, vq_tensor *const *val,
                         const vq__meta *im, const vq__meta *om, const void *params)
{
    struct plan *pl = w->pl;
    const vq__pop *src = t->src;
    const vq__op_def *d = t->def;
    for (int j = 0; j < src->nout; j++) {
        vq_tensor_release(pl->vars[src->out[j]].pval);
        pl->vars[src->out[j]].pval = NULL;
    }
    if ((d->flags & (VQ__CONTROL | VQ__RANDOM)) || !d->kernel[VQ_DEV_CPU] || d->kernel_async ||
        d->user)
        return;
    bool ok = true;
    for (int j = 0; j < src->nout && ok; j++)
        ok = meta_known(&om[j]) && pval_size_ok(&om[j]);
    vq_tensor fake[VQ__MAX_SLOTS];
    vq_tensor *in[VQ__MAX_SLOTS];
    for (int i = 0; i < src->nin && ok; i++) {
        if ((d->flags & VQ__META_ONLY) && meta_known(&im[i])) {
            /* the kernel reads the shape only: a header without data */
            fake[i] = (vq_tensor){.dtype = im[i].dtype,
                                  .ndim = im[i].ndim,
                                  .numel = vq__numel(im[i].ndim, im[i].shape),
                                  .dev = {VQ_DEV_CPU, 0}};
            memcpy(fake[i].shape, im[i].shape, sizeof im[i].shape);
            in[i] = &fake[i];
        } else {
            ok = (in[i] = val[i]) != NULL;
        }
    }
    vq_tensor *out[VQ__MAX_SLOTS] = {0};
    for (int j = 0; j < src->nout && ok; j++)
        ok = vq__tensor_empty(&out[j], om[j].dtype, om[j].ndim, om[j].shape) == 0;
    if (ok) {
        vq__kcall k =
            {.def = d, .params = params, .in = in, .nin = src->nin, .out = out, .nout = src->nout};
        ok = d->kernel[VQ_DEV_CPU](&k) == 0;
    }
    for (int j = 0; j < src->nout; j++) {
        if (ok)
            pl->vars[src->out[j]].pval = out[j];
        else
            vq_tensor_release(out[j]);
    }
}

/* A kernel op's shapes: inference, the fixed metas, the outputs' checks. */
static int walk_infer(struct walk *w, struct pop *t)
{
    struct plan *pl = w->pl;
    vq_program *p = pl->prog;
    const vq__pop *src = t->src;
    vq__meta im[VQ__MAX_SLOTS], om[VQ__MAX_SLOTS];
    _Alignas(16) unsigned char params[VQ__MAX_PARAMS];
    vq_tensor *val[VQ__MAX_SLOTS];
    bool root = t->block == 0;
    for (int i = 0; i < src->nin; i++) {
        im[i] = pl->vars[src->in[i]].meta;
        val[i] = root ? pval_of(w, src->in[i]) : NULL;
    }
    int rc = vq__op_infer_vals(t->def, src->attrs, src->nattrs, src->nin, im, val, src->nout, om,
                               params);
    if (rc)
        return vq__pop_error(t, rc);
    /* an op reading values is fixed when preparation knew them */
    bool known = true;
    for (int i = 0; i < src->nin && known; i++) {
        int slot = i < t->def->nin_slots ? i : t->def->nin_slots - 1;
        known = !(t->def->value_in & (1u << slot)) || val[i];
    }
    if (root)
        pval_compute(w, t, val, im, om, params);
    for (int i = 0; i < src->nin && known; i++)
        for (int d = 0; d < im[i].ndim && known; d++)
            known = im[i].shape[d] >= 0;
    if (known) {
        t->fixed = vq__arena_alloc(&pl->arena,
                                   (size_t)src->nout * sizeof *t->fixed + t->def->params_size, 16);
        if (!t->fixed)
            return vq__fail(VQ_ENOMEM, "out of memory");
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

/* The op's own checks, before any of its vars is looked at: a known type
 * with a kernel for the executor's device, a count of slots the op can
 * have, each output written once and in the op's own block. */
static int walk_check_op(struct walk *w, struct pop *t, int block)
{
    struct plan *pl = w->pl;
    vq_program *p = pl->prog;
    const vq__pop *src = t->src;
    int rc;
    if (!t->def)
        return vq__pop_error(t, vq__fail(VQ_EINVAL, "unknown op type \"%s\"", src->type));
    if (src->nin > VQ__MAX_SLOTS || src->nout > VQ__MAX_SLOTS)
        return vq__pop_error(t, vq__op_check_arity(t->def, src->nin, src->nout));
    if (!(t->def->flags & VQ__CONTROL) &&
        (rc = pl->exec->device.kind == VQ_DEV_GPU ? vq__gpu_kernel_check(t->def)
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
    return 0;
}

/* The first pass over an op's vars: each input has a value here, and the
 * reads it counts (walk_input). Inputs are checked before anything else
 * of the op: a control op's blocks read what its inputs name, and its own
 * walk needs them bound. A control op's reads of enclosing vars, which its
 * walk appends after from (its own inputs), are checked the same way. */
static int walk_inputs(struct walk *w, struct pop *t, int from, int block, struct varset *ext)
{
    bool *counts = vq__arena_alloc(&w->pl->arena, (size_t)(t->nin ? t->nin : 1), 1);
    if (!counts)
        return vq__fail(VQ_ENOMEM, "out of memory");
    if (from > 0) /* a control op's reads of enclosing vars, after its inputs */
        memcpy(counts, t->in_counts, (size_t)from);
    t->in_counts = counts;
    memset(counts + from, 0, (size_t)(t->nin - from) * sizeof *counts);
    int rc = 0;
    for (int i = from; i < t->nin && rc == 0; i++)
        rc = walk_input(w, t, i, block, ext);
    return rc;
}

/* The last pass: the op's outputs are new versions; each starts a counter
 * of its readers, which the walk of the ops after it fills in (and a
 * fetch, in plan_walk). A persistable output is bound to its scope tensor
 * here when no earlier op wrote it. */
static int walk_count_readers(struct walk *w, struct pop *t)
{
    struct plan *pl = w->pl;
    const vq__pop *src = t->src;
    /* from an arena of their own: a reader of an arbitrary earlier var
     * counts itself there, in a few hundred KiB rather than all the plan */
    t->out_readers = vq__arena_calloc(&pl->counts, (size_t)(src->nout ? src->nout : 1),
                                      sizeof *t->out_readers, _Alignof(int));
    if (!t->out_readers)
        return vq__fail(VQ_ENOMEM, "out of memory");
    for (int j = 0; j < src->nout; j++) {
        int v = src->out[j];
        struct vrec *r = &w->rec[v];
        int rc;
        r->used = true;
        if (r->persistable && !r->has && (rc = bind_persistable(pl, v, true)) != 0)
            return vq__pop_error(t, rc);
        r->has = true;
        r->owner = &t->out_readers[j];
    }
    return 0;
}

/* Walks the ops of one block in order, each in three passes: its inputs
 * checked (and their reads counted), its outputs inferred (a control op
 * walks its own blocks instead, control.c), its outputs' reader counters
 * started. */
/* The walk's lines for the inputs of op k of b: the records and metas of
 * op k + PREFETCH_OPS, the readers' counters of op k + PREFETCH_OPS / 2
 * (their owner pointers asked for by then). */
static inline void walk_prefetch(const struct walk *w, const vq__block *b, int k)
{
    if (w->pl->nvars < PREFETCH_MIN_VARS)
        return;
    const vq_program *p = w->pl->prog;
    if (k + PREFETCH_OPS < b->nops) {
        const vq__pop *o = &p->ops[b->ops[k + PREFETCH_OPS]];
        for (int i = 0; i < o->nin; i++) {
            const vq__meta *m = &w->pl->vars[o->in[i]].meta;
            VQ__PREFETCH(&w->rec[o->in[i]]);
            VQ__PREFETCH(m);
            VQ__PREFETCH((const char *)(m + 1) - 1); /* 72 bytes: often two lines */
        }
    }
    if (k + PREFETCH_OPS / 2 < b->nops) {
        const vq__pop *o = &p->ops[b->ops[k + PREFETCH_OPS / 2]];
        for (int i = 0; i < o->nin; i++)
            if (w->rec[o->in[i]].owner)
                VQ__PREFETCH(w->rec[o->in[i]].owner);
    }
}

int vq__walk_block(struct walk *w, int block, struct varset *ext)
{
    struct plan *pl = w->pl;
    vq_program *p = pl->prog;
    const vq__block *b = &p->blocks[block];
    for (int k = 0; k < b->nops; k++) {
        walk_prefetch(w, b, k);
        const vq__pop *src = &p->ops[b->ops[k]];
        struct pop *t = &pl->ops[b->ops[k]];
        *t = (struct pop){.plan = pl, .block = block, .index = k, .src = src, .def = src->def,
                          .nin = src->nin, .in = src->in};
        int rc = walk_check_op(w, t, block);
        if (rc == 0)
            rc = walk_inputs(w, t, 0, block, ext);
        if (rc == 0 && t->def->flags & VQ__CONTROL) {
            int nin0 = t->nin;
            if ((rc = vq__ctl_walk(w, t)) == 0)
                rc = walk_inputs(w, t, nin0, block, ext); /* its blocks' reads */
        } else if (rc == 0) {
            rc = walk_infer(w, t);
        }
        if (rc == 0)
            rc = walk_count_readers(w, t);
        if (rc)
            return rc;
        if (block == 0) { /* the ops naming each var, for the segments */
            pl->root_ctl |= t->ctl != NULL;
            for (int j = 0; j < src->nout; j++)
                w->rec[src->out[j]].seg.last_use = w->rec[src->out[j]].seg.last_write = k;
            for (int i = 0; i < t->nin; i++)
                w->rec[t->in[i]].seg.last_use = k;
        }
    }
    return 0;
}

/* Before block 0: the feeds have values, read by the ops that follow. */
static int walk_feeds(struct walk *w)
{
    struct plan *pl = w->pl;
    for (int i = 0; i < pl->nfeeds; i++) {
        struct vrec *r = &w->rec[pl->feeds[i]];
        r->has = r->used = true;
        r->owner = &pl->vars[pl->feeds[i]].init_readers;
        vq__meta *m = &pl->vars[pl->feeds[i]].meta;
        if (!pl->feed_metas)
            continue;
        /* a plan for these feeds' shapes: the dims the program leaves
         * open are theirs (feed_bind checks each run's feeds against) */
        if (!vq__meta_compatible(&pl->feed_metas[i], m)) {
            char a[140], d[140];
            vq__meta_str(a, sizeof a, &pl->feed_metas[i]);
            vq__meta_str(d, sizeof d, m);
            return vq__fail(VQ_EINVAL, "feed %s: got %s, the var is %s",
                            pl->prog->vars[pl->feeds[i]].name, a, d);
        }
        *m = pl->feed_metas[i];
    }
    return 0;
}

bool vq__program_reads_values(const vq_program *p)
{
    for (int k = 0; k < p->nops; k++)
        if (p->ops[k].def && vq__reads_values(p->ops[k].def, p->ops[k].nin))
            return true;
    return false;
}

/* After block 0: each fetch has a value. A fetched version counts the
 * final op as a reader that never decrements: it stays until the next
 * run's writer replaces it. */
static int walk_fetches(struct walk *w)
{
    struct plan *pl = w->pl;
    vq_program *p = pl->prog;
    int rc = 0;
    for (int i = 0; i < pl->nfetches && rc == 0; i++) {
        int v = pl->fetches[i];
        w->rec[v].used = true;
        if (!w->rec[v].has && pl->vars[v].persistable) {
            rc = bind_persistable(pl, v, false);
            if (rc == NOT_IN_SCOPE)
                rc = vq__fail(VQ_EINVAL, "fetch %s: persistable, but not in the scope",
                              p->vars[v].name);
        } else if (!w->rec[v].has) {
            rc = vq__fail(VQ_EINVAL, "fetch %s: no op writes it and no feed provides it",
                          p->vars[v].name);
        } else if (!pl->vars[v].persistable) {
            (*w->rec[v].owner)++;
        }
    }
    return rc;
}

/* Walks the program: the feeds, block 0 (and through it every block),
 * the fetches. */
static int plan_walk(struct plan *pl)
{
    vq_program *p = pl->prog;
    struct walk w = {.pl = pl,
                     .rec = pl->rec,
                     .block_user = vq__big_alloc((size_t)p->nblocks * sizeof *w.block_user),
                     .written = vq__big_calloc((size_t)(pl->nvars ? pl->nvars : 1), 1)};
    struct varset ext = {0};
    pl->ops = vq__big_calloc((size_t)(p->nops ? p->nops : 1), sizeof *pl->ops);
    pl->nops = p->nops;
    int rc = 0;
    if (!w.block_user || !pl->ops || !w.written)
        rc = vq__fail(VQ_ENOMEM, "out of memory");
    for (int k = 0; rc == 0 && k < p->nops; k++)
        for (int j = 0; j < p->ops[k].nout; j++)
            w.written[p->ops[k].out[j]] = 1;
    for (int b = 0; rc == 0 && b < p->nblocks; b++)
        w.block_user[b] = -1;
    /* before any recursion into blocks: each level costs stack here and in
     * the frames built after */
    for (int b = 1; rc == 0 && b < p->nblocks; b++)
        if (vq__block_depth(p, b) > VQ_MAX_BLOCK_DEPTH)
            rc = vq__fail(VQ_EINVAL,
                          "block %d is nested more than VQ_MAX_BLOCK_DEPTH (%d) levels deep", b,
                          VQ_MAX_BLOCK_DEPTH);
    if (rc == 0)
        rc = walk_feeds(&w);
    if (rc == 0)
        rc = vq__walk_block(&w, 0, &ext);
    if (rc == 0)
        rc = walk_fetches(&w);
    free(ext.v);
    vq__big_free(w.block_user);
    vq__big_free(w.written);
    return rc;
}

struct pvar *vq__frame_slot(struct frame *fr, int v, bool *dep)
{
    struct plan *pl = fr->plan;
    if (!fr->up) { /* the root: block 0, whose ops name only its vars */
        *dep = true;
        return &pl->vars[v];
    }
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
    fr->vars = vq__big_calloc((size_t)(n ? n : 1), sizeof *fr->vars);
    if (!fr->vars)
        return vq__fail(VQ_ENOMEM, "out of memory");
    for (int v = 0; v < pl->nvars; v++) {
        if (pl->vars[v].block != fr->block || !pl->rec[v].used)
            continue;
        struct pvar *s = &fr->vars[pl->local[v]];
        atomic_init(&s->readers_left, 0);
        if (!(s->ev = vq_var_new(pl->exec->engine, pl->prog->vars[v].name)))
            return vq__fail_prefixed(VQ_ENOMEM, "%s", pl->prog->vars[v].name);
        s->own_ev = true;
    }
    return 0;
}

int vq__evlist_add(struct evlist *l, vq_var *v)
{
    vq_var **a = vq__grow(l->v, l->n, &l->cap, sizeof *l->v);
    if (!a)
        return VQ_ENOMEM;
    l->v = a;
    l->v[l->n++] = v;
    return 0;
}

/* Whether the root's vars get their engine vars only when a segment
 * keeps them (seg_close): a CPU plan whose block 0 has no control op.
 * Control ops name the root's engine vars in their own ops, and a GPU
 * plan's vars carry stream events, so those roots get one per var first
 * (plan_build_ops). A var only the ops of one segment name gets none: on
 * a chain of 10^5 ops, about 70% of them. */
bool vq__root_lazy(const struct plan *pl)
{
    return !pl->root_ctl && pl->exec->device.kind == VQ_DEV_CPU;
}

/* Gives root var v its engine var if it has none: the scope tensor's for
 * a persistable var, else its own. 0, or VQ_EINVAL for a scope tensor of
 * another engine, VQ_ENOMEM (messages set). */
int vq__root_ev(struct plan *pl, int v)
{
    struct pvar *pv = &pl->vars[v];
    if (pv->ev)
        return 0;
    vq_engine *e = pl->exec->engine;
    if (pv->persistable) {
        pv->ev = vq_tensor_var(pv->value, e);
    } else {
        pv->ev = vq_var_new(e, pl->prog->vars[v].name);
        pv->own_ev = pv->ev != NULL;
    }
    int rc = pv->ev ? vq__evlist_add(&pl->root_evs, pv->ev) : 0;
    pl->rec[v].seg.ev = pv->ev;
    /* a scope tensor of another engine, or no memory for the var */
    if (!pv->ev || rc < 0)
        return vq__fail_prefixed(pv->persistable && atomic_load(&pv->value->engine) != e
                                     ? VQ_EINVAL
                                     : VQ_ENOMEM,
                                 "%s", pl->prog->vars[v].name);
    return 0;
}

/* The engine vars the final op reads, so that it follows every op of the
 * run: into vars (room for nvars), their number. An op that some later op
 * must wait for (it writes a var accessed later, or reads a var written
 * later) is followed by it; the others, the sinks, are what the final op
 * reads: their outputs, the fetches, and feeds no op touches. (A control
 * op writes its outputs when all it ran is done.) */
static int plan_sink_vars(const struct plan *pl, vq_var **vars)
{
    const struct frame *root = &pl->root;
    int *last_access = vq__big_alloc(((size_t)pl->nvars + 1) * sizeof *last_access);
    int *last_write = vq__big_alloc(((size_t)pl->nvars + 1) * sizeof *last_write);
    bool *pick = vq__big_calloc((size_t)pl->nvars + 1, sizeof *pick);
    int n = 0;
    if (!last_access || !last_write || !pick) {
        n = vq__fail(VQ_ENOMEM, "out of memory");
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
    for (int v = 0; v < pl->nvars; v++)
        if (pick[v])
            vars[n++] = pl->vars[v].ev;
out:
    vq__big_free(last_access);
    vq__big_free(last_write);
    vq__big_free(pick);
    return n;
}

/* Engine vars of the root frame, its ops, and the final op. A lazy root
 * (root_lazy) makes only its persistable vars', its feeds' and its
 * fetches' here, the rest as segments keep them, and its final op's reads
 * come from the segments (seg_close) instead of another walk over the
 * ops and vars (plan_sink_vars). */
static int plan_build_ops(struct plan *pl)
{
    vq_engine *e = pl->exec->engine;
    bool lazy = vq__root_lazy(pl);
    int rc = 0;
    pl->root_evs.v = vq__malloc((size_t)(pl->nvars + 1) * sizeof *pl->root_evs.v);
    pl->root_evs.cap = pl->nvars + 1;
    if (!pl->root_evs.v)
        rc = vq__fail(VQ_ENOMEM, "out of memory");
    for (int v = 0; (!lazy || pl->npersistable) && v < pl->nvars && rc == 0; v++) {
        const struct pvar *pv = &pl->vars[v];
        if (pl->rec[v].used && pv->block == 0 && (!lazy || pv->persistable))
            rc = vq__root_ev(pl, v);
    }
    for (int i = 0; lazy && i < pl->nfeeds && rc == 0; i++)
        rc = vq__root_ev(pl, pl->feeds[i]);
    for (int i = 0; lazy && i < pl->nfetches && rc == 0; i++)
        rc = vq__root_ev(pl, pl->fetches[i]);
    if (rc == 0 && !(pl->done_var = vq_var_new(e, "run_done")))
        rc = VQ_ENOMEM;
    pl->root = (struct frame){.plan = pl, .block = 0, .vars = pl->vars};
    if (rc == 0)
        rc = vq__frame_ops(&pl->root);
    /* the final op of a lazy root reads the fetches and the feeds no op
     * touches, besides what the segments left */
    for (int i = 0; lazy && i < pl->nfetches && rc == 0; i++)
        rc = vq__evlist_add(&pl->final_reads, pl->vars[pl->fetches[i]].ev);
    for (int i = 0; lazy && i < pl->nfeeds && rc == 0; i++)
        if (pl->rec[pl->feeds[i]].seg.last_use < 0)
            rc = vq__evlist_add(&pl->final_reads, pl->vars[pl->feeds[i]].ev);
    vq_var **sinks = NULL;
    int n = 0;
    if (rc == 0 && !lazy) {
        sinks = vq__big_alloc((size_t)(pl->nvars + 1) * sizeof *sinks);
        n = sinks ? plan_sink_vars(pl, sinks) : vq__fail(VQ_ENOMEM, "out of memory");
    }
    vq_task t = {.fn = vq__final_exec,
                 .arg = pl,
                 .reads = lazy ? pl->final_reads.v : sinks,
                 .nreads = lazy ? pl->final_reads.n : n,
                 .writes = &pl->done_var,
                 .nwrites = 1,
                 .props = VQ_PROP_RUN_ON_FAILED,
                 .name = "run_done"};
    /* What their pushes need is set aside now (vq__push_tail): two of the
     * final op's, which a pusher inside an op may push while an earlier
     * run's is in flight, and one of final_all's, needed at most once per
     * plan (a cut run retires it). */
    if (rc == 0 && n >= 0 && !(pl->final = vq_opr_new(e, &t)))
        n = vq__fail(VQ_ENOMEM, "out of memory");
    if (rc == 0 && n >= 0 && vq__opr_reserve(pl->final, 2) < 0)
        n = VQ_ENOMEM;
    if (rc == 0 && n >= 0) { /* final_all: every engine var of block 0 */
        t.reads = pl->root_evs.v;
        t.nreads = pl->root_evs.n;
        if (!(pl->final_all = vq_opr_new(e, &t)))
            n = vq__fail(VQ_ENOMEM, "out of memory");
        else if (vq__opr_reserve(pl->final_all, 1) < 0)
            n = VQ_ENOMEM;
    }
    pl->root.tail = pl->final;
    pl->root.tail_cut = pl->final_all;
    vq__big_free(sinks);
    free(pl->root_evs.v);
    free(pl->final_reads.v);
    pl->root_evs = pl->final_reads = (struct evlist){0};
    vq__big_free(pl->rec); /* preparation's only */
    pl->rec = NULL;
    return rc < 0 ? rc : n < 0 ? n : 0;
}
/* A scalar constant of the scope for the optimization passes: a host f32
 * or f64 tensor of one element (what an importer's constants are; binding
 * another tensor to the name prepares again, plan_cache.c). */
static bool scope_scalar(void *user, const char *name, double *v)
{
    const vq_tensor *t = vq_scope_get(user, name);
    if (!t || t->numel != 1 || t->dev.kind != VQ_DEV_CPU || !t->data)
        return false;
    if (t->dtype == VQ_F32)
        *v = *(const float *)t->data;
    else if (t->dtype == VQ_F64)
        *v = *(const double *)t->data;
    else
        return false;
    return true;
}

/* The plan's frozen copy of p: of the optimized program (optimize.h) on
 * a CPU executor whose passes are on and p only infers, else of p. The
 * feeds and fetches stay as they are. A failure to optimize (memory) only
 * leaves p unoptimized. */
static int plan_program(struct plan *pl, const vq_program *p, const char *const *feeds, int nfeeds,
                        const char *const *fetches, int nfetches)
{
    vq_program *opt = NULL;
    if (pl->exec->opt && pl->exec->device.kind == VQ_DEV_CPU) {
        int nkeep = nfeeds + nfetches;
        const char **keep = vq__malloc((size_t)(nkeep ? nkeep : 1) * sizeof *keep);
        if (keep) {
            for (int i = 0; i < nfeeds; i++)
                keep[i] = feeds[i];
            for (int i = 0; i < nfetches; i++)
                keep[nfeeds + i] = fetches[i];
            if (vq__program_optimize(p, pl->exec->opt, keep, nkeep, pl->scope ? scope_scalar : NULL,
                                     pl->scope, &opt, NULL) < 0)
                opt = NULL;
            free(keep);
        }
    }
    int rc = vq__program_freeze(opt ? opt : p, &pl->prog);
    vq_program_free(opt);
    return rc;
}

int vq__plan_new(vq_exec *ex, const vq_program *p, vq_scope *s, const char *const *feeds,
                 int nfeeds, const vq__meta *feed_metas, const char *const *fetches, int nfetches,
                 struct plan **out)
{
    struct plan *pl = vq__calloc(1, sizeof *pl);
    if (!pl)
        return vq__fail(VQ_ENOMEM, "out of memory");
    pl->exec = ex;
    pl->scope = s;
    pl->rng_key = vq__rng_fold(ex->seed, ex->plans_made++); /* under ex->lock */
    pthread_mutexattr_t recursive;
    pthread_mutexattr_init(&recursive);
    pthread_mutexattr_settype(&recursive, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&pl->push_lock, &recursive);
    pthread_mutexattr_destroy(&recursive);
    pthread_mutex_init(&pl->ring_lock, NULL);
    pthread_cond_init(&pl->ring_cond, NULL);
    atomic_init(&pl->broken, false);
    /* pop and fop records: about 100 bytes per op */
    vq__arena_init(&pl->arena, (size_t)p->nops * 112);
    vq__arena_init(&pl->counts, (size_t)p->nops * sizeof(int));
    int rc = plan_program(pl, p, feeds, nfeeds, fetches, nfetches);
    if (rc == 0) {
        pl->nvars = pl->prog->nvars;
        size_t nv = (size_t)(pl->nvars ? pl->nvars : 1);
        pl->vars = vq__big_alloc(nv * sizeof *pl->vars); /* each set whole below */
        _Static_assert(_Alignof(struct vrec) <= 64, "vq__big_alloc aligns to 64");
        pl->rec = vq__big_alloc(nv * sizeof *pl->rec);
        pl->local = vq__big_alloc(nv * sizeof *pl->local);
        pl->block_nvars = vq__calloc((size_t)pl->prog->nblocks, sizeof *pl->block_nvars);
        if (!pl->vars || !pl->local || !pl->block_nvars || !pl->rec) {
            pl->nvars = 0; /* no slot set: plan_destroy reads none */
            rc = vq__fail(VQ_ENOMEM, "out of memory");
        }
    }
    for (int v = 0; rc == 0 && v < pl->nvars; v++) {
        const vq__pvar *d = &pl->prog->vars[v];
        struct pvar *pv = &pl->vars[v];
        *pv = (struct pvar){.meta = {.dtype = d->dtype, .ndim = d->ndim},
                            .persistable = d->persistable,
                            .block = d->block};
        memcpy(pv->meta.shape, d->shape, sizeof d->shape);
        atomic_init(&pv->readers_left, 0);
        /* a persistable var is the scope's: touched outside the ops */
        struct seg_ent e = SEG_ENT_NONE;
        e.outside = d->persistable;
        pl->rec[v] = (struct vrec){.seg = e, .persistable = d->persistable};
        pl->npersistable += d->persistable;
        pl->local[v] = pl->block_nvars[d->block]++;
    }
    if (rc == 0 && (rc = find_names(pl->prog, "feed", feeds, nfeeds, &pl->feeds)) == 0)
        pl->nfeeds = nfeeds;
    if (rc == 0)
        pl->dynamic = vq__program_reads_values(pl->prog);
    if (rc == 0 && feed_metas && nfeeds) {
        if (!(pl->feed_metas = vq__malloc((size_t)nfeeds * sizeof *pl->feed_metas)))
            rc = vq__fail(VQ_ENOMEM, "out of memory");
        else
            memcpy(pl->feed_metas, feed_metas, (size_t)nfeeds * sizeof *feed_metas);
    }
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
    if (rc == 0)
        rc = vq__memplan_build(pl);
    if (rc) {
        vq__plan_bury(ex, pl);
        return rc;
    }
    *out = pl;
    return 0;
}
