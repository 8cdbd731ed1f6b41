/* The executor's plans: preparation of a program into a plan (checked,
 * shapes inferred, one engine var per program var, one prebuilt engine op
 * per program op or segment of ops), and the executor's LRU cache of plans
 * keyed by XXH3-64 of the program, the feed and fetch names and the device.
 * Also the executor's life (vq_exec_new, vq_exec_free, vq_exec_prepare):
 * an executor is its plan cache.
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
#include "plan.h"
#include "scope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define NOT_IN_SCOPE 1 /* bind_persistable: not bound and not written first */

/* ---- preparation ---- */

static void plan_destroy(struct plan *pl)
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
        if (pl->vars[v].own_ev)
            vq_var_free(e, pl->vars[v].ev);
    }
    if (pl->done_var)
        vq_var_free(e, pl->done_var);
    free(pl->ops);
    free(pl->vars);
    free(pl->rec);
    free(pl->local);
    free(pl->block_nvars);
    free(pl->feeds);
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
/* How far ahead, in ops, the walk and the segments ask for the lines of
 * the vars an op reads: an op reading an arbitrary earlier var (a chain's
 * skip connection) misses the cache on its record, its slot's meta, its
 * readers' counter and its engine var, and once a program's vars no
 * longer fit the cache those misses were most of preparation's time.
 * Asked for ahead, they overlap with the ops in between. */
enum { PREFETCH_OPS = 16 };

/* Below this many vars what the walk and the segments read of them (a
 * record, a slot, an engine var: about 300 bytes a var) stays in the
 * caches, and asking ahead only costs its instructions: exec_bench's
 * chain prepared 10^3 ops in 113-115 ns per op with the prefetches and
 * 106-108 without, 10^4 in 121-125 and 120-121, 10^5 in 188-190 and
 * (prefetching) 186-188. */
enum { PREFETCH_MIN_VARS = 1 << 15 };

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
static void walk_feeds(struct walk *w)
{
    struct plan *pl = w->pl;
    for (int i = 0; i < pl->nfeeds; i++) {
        struct vrec *r = &w->rec[pl->feeds[i]];
        r->has = r->used = true;
        r->owner = &pl->vars[pl->feeds[i]].init_readers;
    }
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
                     .block_user = vq__malloc((size_t)p->nblocks * sizeof *w.block_user)};
    struct varset ext = {0};
    pl->ops = vq__calloc((size_t)(p->nops ? p->nops : 1), sizeof *pl->ops);
    pl->nops = p->nops;
    int rc = 0;
    if (!w.block_user || !pl->ops)
        rc = vq__fail(VQ_ENOMEM, "out of memory");
    for (int b = 0; rc == 0 && b < p->nblocks; b++)
        w.block_user[b] = -1;
    /* before any recursion into blocks: each level costs stack here and in
     * the frames built after */
    for (int b = 1; rc == 0 && b < p->nblocks; b++)
        if (vq__block_depth(p, b) > VQ_MAX_BLOCK_DEPTH)
            rc = vq__fail(VQ_EINVAL,
                          "block %d is nested more than VQ_MAX_BLOCK_DEPTH (%d) levels deep", b,
                          VQ_MAX_BLOCK_DEPTH);
    if (rc == 0) {
        walk_feeds(&w);
        rc = vq__walk_block(&w, 0, &ext);
    }
    if (rc == 0)
        rc = walk_fetches(&w);
    free(ext.v);
    free(w.block_user);
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
    fr->vars = vq__calloc((size_t)(n ? n : 1), sizeof *fr->vars);
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
static bool root_lazy(const struct plan *pl)
{
    return !pl->root_ctl && pl->exec->device.kind == VQ_DEV_CPU;
}

/* Gives root var v its engine var if it has none: the scope tensor's for
 * a persistable var, else its own. 0, or VQ_EINVAL for a scope tensor of
 * another engine, VQ_ENOMEM (messages set). */
static int root_ev(struct plan *pl, int v)
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

#define SEG_ENT_NONE ((struct seg_ent){-1, -1, -1, -1, -1, -1, -1, false, false, NULL})

/* Per engine var of the frame, a struct seg_ent (plan.h), so that a
 * segment hands the engine each var once (vq_opr_new's merge of more than
 * 32 vars sorts them, on every segment of a long chain). Indexed by slot:
 * the frame's own slots, then (a while body) the previous iteration's,
 * whose slots an op's engine accesses name (vq__frame_slot's dep). Each
 * such slot has its own engine var, except persistable ones (the root's),
 * which share the scope tensor's: two vars bound to one tensor share an
 * entry (alias). The root's entries are in the plan's per-var records
 * (struct vrec, stride 64 bytes: the walk's fields beside them); other
 * frames' in an array of their own. Walked nearly in order by a chain: a
 * hash on the engine vars' addresses spread the same over 32 bytes per
 * access. */
struct seg_map {
    char *ent; /* entry i at ent + i * stride */
    size_t stride;
    bool own;          /* ent is the frame's own array (freed with the map) */
    int nown;          /* the frame's own slots */
    struct pvar *prev; /* a while body's previous iteration's slots, or NULL */
};

static inline struct seg_ent *seg_at(const struct seg_map *m, size_t i)
{
    return (struct seg_ent *)(void *)(m->ent + i * m->stride);
}

static struct seg_ent *seg_find(const struct frame *fr, struct seg_map *m, const struct pvar *s)
{
    /* addresses as integers: s is in one of two arrays */
    uintptr_t off = (uintptr_t)s - (uintptr_t)fr->vars;
    size_t id = off / sizeof *s;
    if (off >= (uintptr_t)m->nown * sizeof *s)
        id = (size_t)m->nown + ((uintptr_t)s - (uintptr_t)m->prev) / sizeof *s;
    struct seg_ent *e = seg_at(m, id);
    return e->alias >= 0 ? seg_at(m, (size_t)e->alias) : e;
}

static void seg_map_free(struct seg_map *m)
{
    if (m->own)
        free(m->ent);
    m->ent = NULL;
}

/* The entries of frame fr, and the aliases of persistable vars bound to
 * one tensor. 0, or VQ_ENOMEM (message set). */
static int seg_map_init(struct frame *fr, struct seg_map *m)
{
    struct plan *pl = fr->plan;
    m->nown = fr->owner ? pl->block_nvars[fr->block] : pl->nvars;
    m->prev = NULL;
    if (!fr->owner) { /* set by plan_new and the walk */
        m->ent = (char *)&pl->rec[0].seg;
        m->stride = sizeof *pl->rec;
        m->own = false;
    } else {
        int n = m->nown;
        if (fr->owner->fop->t->ctl->is_while) {
            struct ctl *c = fr->owner;
            m->prev = c->frames[(fr->slot + c->nframes - 1) % c->nframes].vars;
            n *= 2;
        }
        struct seg_ent *ent = vq__malloc((size_t)(n ? n : 1) * sizeof *ent);
        if (!ent)
            return vq__fail(VQ_ENOMEM, "out of memory");
        for (int i = 0; i < n; i++)
            ent[i] = SEG_ENT_NONE;
        m->ent = (char *)ent;
        m->stride = sizeof *ent;
        m->own = true;
        return 0; /* no persistable vars outside block 0 */
    }
    int np = pl->npersistable;
    if (np < 2)
        return 0;
    size_t cap = 4;
    while (cap < 2 * (size_t)np)
        cap *= 2;
    int *seen = vq__malloc(cap * sizeof *seen);
    if (!seen)
        return vq__fail(VQ_ENOMEM, "out of memory");
    memset(seen, 0xff, cap * sizeof *seen); /* -1: empty */
    for (int v = 0; v < pl->nvars; v++) {
        vq_var *ev = pl->vars[v].ev;
        if (!pl->vars[v].persistable || !ev)
            continue;
        size_t h = ((uintptr_t)ev >> 4) * 0x9e3779b97f4a7c15ull;
        for (size_t i = h & (cap - 1);; i = (i + 1) & (cap - 1)) {
            if (seen[i] < 0) {
                seen[i] = v;
                break;
            }
            if (pl->vars[seen[i]].ev == ev) {
                seg_at(m, (size_t)v)->alias = seen[i];
                break;
            }
        }
    }
    free(seen);
    return 0;
}

/* The segment being built: its first op, and its vars, each once (a var
 * both written and read is listed as a write: seg_add, seg_close). */
struct seg {
    int start, len;
    int max;      /* SEG_MAX, or 1 with VQ_EXEC_NO_SEGMENTS */
    int bound;    /* ops from here on are in the segment or lead to it */
    bool lazy;    /* the root's engine vars are made as segments keep them */
    struct pvar **w, **r;      /* slots */
    struct seg_ent **we, **re; /* the entries of w and r */
    int nw, nr, wcap, rcap;
    vq_var **ev; /* seg_close: the engine vars of w then r (room for evcap) */
    int evcap;
};

/* Whether the var of entry e is named by no op of the frame outside ops
 * [start, end] and by nothing outside the frame's ops: then the segment
 * of those ops need not hand it to the engine (nothing else is ordered
 * against it), which saves its queueing and completion on every run. */
static bool seg_inner(const struct seg_ent *e, int start, int end)
{
    return !e->outside && e->first_use >= start && e->last_use <= end && e->first_use >= 0;
}

/* The vars a segment of frame fr may keep from the engine: those of the
 * root frame of a CPU plan whose block has no control op (its blocks' ops
 * name the root's vars too). Other frames, and GPU plans (stream events
 * ride on the vars), keep every var. Feeds (their bind ops) and fetches
 * (the final op) are touched outside the ops; persistable vars (the
 * scope's, which other runs and the caller share) are marked as the ops
 * naming them are resolved, while their slots are in the cache anyway.
 * Such a root is also lazy (root_lazy): its vars get an engine var only
 * when a segment keeps them. */
static bool seg_uses(const struct frame *fr, struct seg_map *m)
{
    const struct plan *pl = fr->plan;
    if (fr->up || !root_lazy(pl))
        return false;
    for (int i = 0; i < pl->nfeeds; i++)
        seg_at(m, (size_t)pl->feeds[i])->outside = true;
    for (int i = 0; i < pl->nfetches; i++)
        seg_at(m, (size_t)pl->fetches[i])->outside = true;
    return true;
}

/* Notes that op k names the var of entry e (inner: the frame's uses are
 * tracked, seg_uses). The walk set its last uses; plan_new marked a
 * persistable var as touched outside. */
static inline void seg_use(struct seg_ent *e, int k)
{
    if (e->first_use < 0)
        e->first_use = k;
}

/* A capacity of at least used + n, from cap (doubling from 16). */
static int seg_grown(int cap, int used, int n)
{
    int c = cap ? cap : 16;
    while (c < used + n)
        c *= 2;
    return c;
}

/* Gives slot s its engine var: made now for a root var of a lazy root
 * (other slots have theirs). 0, or root_ev's error. */
static int slot_ev(struct plan *pl, struct pvar *s)
{
    return s->ev ? 0 : root_ev(pl, (int)(s - pl->vars));
}

/* The engine op of the segment sg, on its first fop. */
static int seg_close(struct frame *fr, struct seg *sg)
{
    if (sg->len == 0)
        return 0;
    struct plan *pl = fr->plan;
    int end = sg->start + sg->len - 1;
    int nr = 0; /* the reads of vars that a later op of the segment writes go */
    for (int i = 0; i < sg->nr; i++)
        if (!sg->re[i]->listed_write && !(sg->len > 1 && seg_inner(sg->re[i], sg->start, end))) {
            sg->re[nr] = sg->re[i];
            sg->r[nr++] = sg->r[i];
        }
    sg->nr = nr;
    /* The vars only the segment's ops name go too, but for one written
     * var: the segment's executions in successive runs stay ordered by
     * it, and with them every var they name. */
    int nw = 0;
    for (int i = 0; i < sg->nw; i++)
        if (!(sg->len > 1 && seg_inner(sg->we[i], sg->start, end)) || (i == sg->nw - 1 && !nw)) {
            sg->we[nw] = sg->we[i];
            sg->w[nw++] = sg->w[i];
        }
    sg->nw = nw;
    if (nw + nr > sg->evcap) {
        int c = seg_grown(sg->evcap, 0, nw + nr);
        vq_var **a = vq__realloc(sg->ev, (size_t)c * sizeof *a);
        if (!a)
            return vq__fail(VQ_ENOMEM, "out of memory");
        sg->ev = a;
        sg->evcap = c;
    }
    for (int i = 0; i < nw + nr; i++) {
        /* from the entry: an arbitrary earlier var's slot stays untouched */
        struct seg_ent *e = i < nw ? sg->we[i] : sg->re[i - nw];
        if (!e->ev) {
            struct pvar *slot = i < nw ? sg->w[i] : sg->r[i - nw];
            int rc = slot_ev(pl, slot);
            if (rc < 0)
                return rc;
            e->ev = slot->ev;
        }
        sg->ev[i] = e->ev;
    }
    /* A lazy root's final op reads one written var of each segment that
     * no later op follows (accesses a var it writes, or writes a var it
     * reads): the final op follows them, and through them every other. */
    bool followed = !sg->lazy || nw == 0;
    for (int i = 0; i < nw && !followed; i++)
        followed = sg->we[i]->last_use > end;
    for (int i = 0; i < nr && !followed; i++)
        followed = sg->re[i]->last_write > end;
    if (!followed && vq__evlist_add(&pl->final_reads, sg->ev[0]) < 0)
        return VQ_ENOMEM;
    struct fop *f = &fr->ops[sg->start];
    const vq__pop *src = f->t->src;
    bool async = sg->len == 1 && f->t->def->kernel_async && pl->exec->device.kind == VQ_DEV_CPU;
    vq_task t = {.fn = async         ? NULL
                       : sg->len > 1 ? vq__seg_exec
                                     : vq__op_exec,
                 .async_fn = async ? vq__op_exec_async : NULL,
                 .arg = f,
                 .ctx = pl->exec->device,
                 .reads = sg->ev + nw,
                 .nreads = nr,
                 .writes = sg->ev,
                 .nwrites = nw,
                 .props = VQ_PROP_RUN_ON_FAILED,
                 .name = sg->len > 1 ? "segment" : src->def->type,
                 .priority = src->priority};
    f->seg_len = sg->len;
    sg->len = sg->nw = sg->nr = 0;
    if (!(f->opr = vq_opr_new(pl->exec->engine, &t)))
        return vq__pop_error(f->t, VQ_ENOMEM);
    return 0;
}

/* Whether op k (a sync kernel op) may join the open segment; k's engine
 * vars are vars[0 .. nw) written, then nr read, their entries ents. */
static bool seg_joins(const struct frame *fr, const struct seg *sg, int k,
                      struct seg_ent *const *ents, int nw, int nr)
{
    if (sg->len == 0 || sg->len >= sg->max || sg->start + sg->len != k)
        return false;
    const struct fop *prev = &fr->ops[k - 1], *f = &fr->ops[k];
    /* an op with an async kernel has an engine op of its own */
    if (prev->t->src->priority != f->t->src->priority || prev->t->def->kernel_async ||
        f->t->def->kernel_async)
        return false;
    for (int i = 0; i < nw + nr; i++) {
        const struct seg_ent *e = ents[i];
        if (e->writer >= 0 && e->writer < sg->bound)
            return false;
        if (i < nw && e->first_reader >= 0 && e->first_reader < sg->bound)
            return false;
    }
    return true;
}

/* A root block whose ops are all small runs as one segment, whatever its
 * dependences: every op a sync kernel of one priority, every input and
 * output shape known at preparation and of at most SMALL_ELEMS elements,
 * at most SMALL_OPS ops (a training step of a tiny model: the seed's).
 * The ops run in program order, one of the serial orders the engine
 * allows; what the rule gives up, parallelism between ops of a few
 * hundred nanoseconds each, costs less than the engine ops, their
 * dependences and their handoffs between threads, that it saves. */
enum { SMALL_ELEMS = 1024, SMALL_OPS = 64 };

static bool meta_small(const vq__meta *m)
{
    if (m->ndim < 0)
        return false;
    int64_t n = 1;
    for (int d = 0; d < m->ndim; d++) {
        if (m->shape[d] < 0 || (n *= m->shape[d]) > SMALL_ELEMS)
            return false;
    }
    return true;
}

static bool block_small(const struct frame *fr, const vq__block *b)
{
    const struct plan *pl = fr->plan;
    if (fr->up || b->nops < 2 || b->nops > SMALL_OPS)
        return false;
    for (int k = 0; k < b->nops; k++) {
        const struct pop *t = &pl->ops[b->ops[k]];
        if (t->ctl || !t->fixed || t->def->kernel_async ||
            t->src->priority != pl->ops[b->ops[0]].src->priority)
            return false;
        for (int j = 0; j < t->src->nout; j++)
            if (!meta_small(&t->fixed[j]))
                return false;
        for (int i = 0; i < t->nin; i++)
            if (!meta_small(&pl->vars[t->in[i]].meta))
                return false;
    }
    return true;
}

/* Room for nw more writes and nr more reads; false when out of memory
 * (the lists stay as they were). */
static bool seg_room(struct seg *sg, int nw, int nr)
{
    if (sg->nw + nw > sg->wcap) {
        int c = seg_grown(sg->wcap, sg->nw, nw);
        struct pvar **a = vq__realloc(sg->w, (size_t)c * sizeof *a);
        if (!a)
            return false;
        sg->w = a; /* room beyond wcap until we has it too */
        struct seg_ent **e = vq__realloc(sg->we, (size_t)c * sizeof *e);
        if (!e)
            return false;
        sg->we = e;
        sg->wcap = c;
    }
    if (sg->nr + nr > sg->rcap) {
        int c = seg_grown(sg->rcap, sg->nr, nr);
        struct pvar **a = vq__realloc(sg->r, (size_t)c * sizeof *a);
        if (!a)
            return false;
        sg->r = a; /* room beyond rcap until re has it too */
        struct seg_ent **e = vq__realloc(sg->re, (size_t)c * sizeof *e);
        if (!e)
            return false;
        sg->re = e;
        sg->rcap = c;
    }
    return true;
}

/* Adds an op's vars (nw written, then nr read) to the segment, each var
 * once: a write of a var listed as a read is listed again, as a write, and
 * seg_close drops the read. */
static int seg_add(struct seg *sg, struct pvar *const *vars, struct seg_ent *const *ents, int nw,
                   int nr)
{
    if (!seg_room(sg, nw, nr))
        return VQ_ENOMEM;
    for (int i = 0; i < nw + nr; i++) {
        struct seg_ent *e = ents[i];
        bool write = i < nw;
        if (e->listed == sg->start && (e->listed_write || !write))
            continue; /* listed already, in a mode that covers this access */
        if (write) {
            sg->we[sg->nw] = e;
            sg->w[sg->nw++] = vars[i];
        } else {
            sg->re[sg->nr] = e;
            sg->r[sg->nr++] = vars[i];
        }
        e->listed = sg->start;
        e->listed_write = write;
    }
    return 0;
}

/* The root frame's lines for the inputs of op k of b (walk_prefetch's
 * reasons): the records (segment entries) of op k + PREFETCH_OPS, and the
 * engine vars of op k + PREFETCH_OPS / 2, which vq_opr_new checks (their
 * first 128 bytes). And for its outputs, what root_ev reads when a
 * segment hands one to the engine: the slot, the program's var, then its
 * name (vq_var_new copies it). Those vars, about a third of a chain's,
 * are too sparse for the hardware's prefetcher: each was a miss (about
 * 100 ns per root_ev at 10^5 ops against 10 at 10^3). */
static inline void seg_prefetch(const struct plan *pl, const vq__block *b, int k)
{
    if (pl->nvars < PREFETCH_MIN_VARS)
        return;
    const struct pop *ops = pl->ops;
    if (k + PREFETCH_OPS < b->nops) {
        const struct pop *t = &ops[b->ops[k + PREFETCH_OPS]];
        for (int i = 0; i < t->nin; i++)
            VQ__PREFETCH(&pl->rec[t->in[i]]);
        for (int j = 0; j < t->src->nout; j++) {
            VQ__PREFETCH(&pl->vars[t->src->out[j]].ev);
            VQ__PREFETCH(&pl->prog->vars[t->src->out[j]].name);
        }
    }
    if (k + PREFETCH_OPS / 2 < b->nops) {
        const struct pop *t = &ops[b->ops[k + PREFETCH_OPS / 2]];
        for (int i = 0; i < t->nin; i++) {
            const char *ev = (const char *)pl->rec[t->in[i]].seg.ev;
            if (ev) {
                VQ__PREFETCH(ev);
                VQ__PREFETCH(ev + 64);
            }
        }
        for (int j = 0; j < t->src->nout; j++)
            VQ__PREFETCH(pl->prog->vars[t->src->out[j]].name);
    }
}

/* One fop per op of the frame's block, its slots resolved, and the
 * prebuilt engine ops: one per segment (above), one per control op (its
 * instance, control.c). */
int vq__frame_ops(struct frame *fr)
{
    struct plan *pl = fr->plan;
    const vq__block *b = &pl->prog->blocks[fr->block];
    /* not zeroed: each fop is set whole as the loop reaches it, and
     * fr->nops counts those (vq__frame_destroy reads them) until all are */
    fr->ops = vq__malloc((size_t)(b->nops ? b->nops : 1) * sizeof *fr->ops);
    fr->nops = 0;
    if (!fr->ops)
        return vq__fail(VQ_ENOMEM, "out of memory");
    struct seg_map m = {0};
    int rc = seg_map_init(fr, &m);
    if (rc)
        return rc;
    bool uses = seg_uses(fr, &m);
    bool small = !pl->exec->no_segments && block_small(fr, b);
    struct seg sg = {.max = pl->exec->no_segments ? 1 : small ? SMALL_OPS : SEG_MAX, .lazy = uses};
    for (int k = 0; k < b->nops && rc == 0; k++) {
        if (!fr->up)
            seg_prefetch(pl, b, k);
        struct fop *f = &fr->ops[k];
        *f = (struct fop){.t = &pl->ops[b->ops[k]], .fr = fr};
        fr->nops = k + 1;
        if (f->t->def->flags & VQ__RANDOM) /* build order: the same in every plan of p */
            f->rng_key = vq__rng_fold(pl->rng_key, pl->nrandom++);
        const vq__pop *src = f->t->src;
        f->in = vq__arena_alloc(&pl->arena, (size_t)(f->t->nin ? f->t->nin : 1) * sizeof *f->in,
                                _Alignof(struct pvar *));
        f->out = vq__arena_alloc(&pl->arena, (size_t)(src->nout ? src->nout : 1) * sizeof *f->out,
                                 _Alignof(struct pvar *));
        if (!f->in || !f->out) {
            rc = vq__fail(VQ_ENOMEM, "out of memory");
            break;
        }
        struct pvar *vars[2 * VQ__MAX_SLOTS];    /* slots: engine vars at seg_close */
        struct seg_ent *ents[2 * VQ__MAX_SLOTS]; /* the entries of vars (kernel ops) */
        int nw = 0, nr = 0;
        bool dep, linked = false; /* linked: reads an output of op k - 1 */
        for (int j = 0; j < src->nout; j++) {
            f->out[j] = vq__frame_slot(fr, src->out[j], &dep);
            ents[nw] = seg_find(fr, &m, f->out[j]);
            if (uses)
                seg_use(ents[nw], k);
            vars[nw++] = f->out[j];
        }
        for (int i = 0; i < f->t->nin; i++) {
            f->in[i] = vq__frame_slot(fr, f->t->in[i], &dep);
            bool written = false;
            for (int j = 0; j < src->nout && !written; j++)
                written = src->out[j] == f->t->in[i];
            if (!f->t->ctl && dep && !written) { /* a control op builds its own */
                ents[nw + nr] = seg_find(fr, &m, f->in[i]);
                if (uses)
                    seg_use(ents[nw + nr], k);
                vars[nw + nr++] = f->in[i];
            }
            for (int j = 0; k > 0 && dep && !linked && j < fr->ops[k - 1].t->src->nout; j++)
                linked = fr->ops[k - 1].out[j] == f->in[i];
        }
        if (f->t->ctl) {
            if ((rc = seg_close(fr, &sg)) == 0)
                rc = vq__ctl_build(f);
            continue;
        }
        bool joins = small ? sg.len > 0 : linked && seg_joins(fr, &sg, k, ents, nw, nr);
        if (!joins) {
            int from = sg.len ? sg.bound : k;
            if ((rc = seg_close(fr, &sg)) < 0)
                break;
            sg.start = k;
            /* a linked op's chain leads to it from where the last one's did */
            sg.bound = linked ? from : k;
        }
        if (seg_add(&sg, vars, ents, nw, nr) < 0) {
            rc = vq__fail(VQ_ENOMEM, "out of memory");
            break;
        }
        sg.len++;
        for (int i = nw; i < nw + nr; i++) {
            struct seg_ent *e = ents[i];
            if (e->first_reader < 0)
                e->first_reader = k;
        }
        for (int i = 0; i < nw; i++) {
            struct seg_ent *e = ents[i];
            e->writer = k;
            e->first_reader = -1;
        }
    }
    if (rc == 0)
        rc = seg_close(fr, &sg);
    free(sg.w);
    free(sg.we);
    free(sg.r);
    free(sg.re);
    free(sg.ev);
    seg_map_free(&m);
    return rc;
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
        free(f->infer_cache);
    }
    free(fr->ops);
    fr->ops = NULL;
    if (fr->step)
        vq_opr_free(e, fr->step);
    if (fr->head)
        vq_opr_free(e, fr->head);
    if (fr->stack)
        vq_opr_free(e, fr->stack);
    if (fr->owner) {
        for (int i = 0; fr->vars && i < pl->block_nvars[fr->block]; i++) {
            vq_tensor_release(fr->vars[i].value);
            if (fr->vars[i].own_ev)
                vq_var_free(e, fr->vars[i].ev);
        }
        free(fr->vars);
    }
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
    int *last_access = vq__malloc(((size_t)pl->nvars + 1) * sizeof *last_access);
    int *last_write = vq__malloc(((size_t)pl->nvars + 1) * sizeof *last_write);
    bool *pick = vq__calloc((size_t)pl->nvars + 1, sizeof *pick);
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
    free(last_access);
    free(last_write);
    free(pick);
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
    bool lazy = root_lazy(pl);
    int rc = 0;
    pl->root_evs.v = vq__malloc((size_t)(pl->nvars + 1) * sizeof *pl->root_evs.v);
    pl->root_evs.cap = pl->nvars + 1;
    if (!pl->root_evs.v)
        rc = vq__fail(VQ_ENOMEM, "out of memory");
    for (int v = 0; (!lazy || pl->npersistable) && v < pl->nvars && rc == 0; v++) {
        const struct pvar *pv = &pl->vars[v];
        if (pl->rec[v].used && pv->block == 0 && (!lazy || pv->persistable))
            rc = root_ev(pl, v);
    }
    for (int i = 0; lazy && i < pl->nfeeds && rc == 0; i++)
        rc = root_ev(pl, pl->feeds[i]);
    for (int i = 0; lazy && i < pl->nfetches && rc == 0; i++)
        rc = root_ev(pl, pl->fetches[i]);
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
        sinks = vq__malloc((size_t)(pl->nvars + 1) * sizeof *sinks);
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
    if (rc == 0 && n >= 0 && !(pl->final = vq_opr_new(e, &t)))
        n = vq__fail(VQ_ENOMEM, "out of memory");
    if (rc == 0 && n >= 0) { /* final_all: every engine var of block 0 */
        t.reads = pl->root_evs.v;
        t.nreads = pl->root_evs.n;
        if (!(pl->final_all = vq_opr_new(e, &t)))
            n = vq__fail(VQ_ENOMEM, "out of memory");
    }
    pl->root.tail = pl->final;
    pl->root.tail_cut = pl->final_all;
    free(sinks);
    free(pl->root_evs.v);
    free(pl->final_reads.v);
    pl->root_evs = pl->final_reads = (struct evlist){0};
    free(pl->rec); /* preparation's only */
    pl->rec = NULL;
    return rc < 0 ? rc : n < 0 ? n : 0;
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
    int rc = vq__program_freeze(p, &pl->prog);
    if (rc == 0) {
        pl->nvars = pl->prog->nvars;
        size_t nv = (size_t)(pl->nvars ? pl->nvars : 1);
        pl->vars = vq__malloc(nv * sizeof *pl->vars); /* each set whole below */
        pl->rec = vq__aligned_alloc(_Alignof(struct vrec), nv * sizeof *pl->rec);
        pl->local = vq__malloc(nv * sizeof *pl->local);
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
 * the counts in front so that (a | b) and (a b |) differ. Written into
 * buf (size bytes) when it fits, else into a new allocation; NULL when
 * out of memory. */
static char *key_names(char *buf, size_t size, const char *const *feeds, int nfeeds,
                       const char *const *fetches, int nfetches, size_t *len)
{
    size_t n = sizeof nfeeds + sizeof nfetches;
    for (int i = 0; i < nfeeds; i++)
        n += strlen(feeds[i]) + 1;
    for (int i = 0; i < nfetches; i++)
        n += strlen(fetches[i]) + 1;
    if (n > size && !(buf = vq__malloc(n)))
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
    /* A cache hit (every run) keeps the names on the stack; a new plan
     * keeps a copy. */
    char stack[256];
    size_t nlen;
    char *names = key_names(stack, sizeof stack, feeds, nfeeds, fetches, nfetches, &nlen);
    if (!names)
        return vq__fail(VQ_ENOMEM, "out of memory");
    uint64_t ph = vq_program_hash(p);
    /* The program's hash and the device seed the hash of the names. */
    uint64_t dev = (uint64_t)(unsigned)ex->device.kind << 32 | (unsigned)ex->device.id;
    uint64_t seed = ph ^ dev * 0x9e3779b97f4a7c15ull;
    uint64_t key = XXH3_64bits_withSeed(names, nlen, seed);
    uint64_t gen = s ? vq__scope_generation(s) : 0, sid = vq__scope_id(s);
    for (struct plan *pl = ex->lru_head, *next; pl; pl = next) {
        next = pl->lru_next;
        if (atomic_load(&pl->broken)) {
            /* a run's push failed (struct plan): never used again */
            if (pl->refs == 1) {
                lru_unlink(ex, pl);
                bury(ex, pl);
            }
            continue;
        }
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
        if (names != stack)
            free(names);
        *out = pl;
        return 0;
    }
    struct plan *pl = NULL;
    if (names == stack) { /* the new plan keeps its own copy */
        if (!(names = vq__malloc(nlen)))
            return vq__fail(VQ_ENOMEM, "out of memory");
        memcpy(names, stack, nlen);
    }
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

int vq__plan_acquire(vq_exec *ex, const char *who, const vq_program *p, vq_scope *s,
                     const char *const *feeds, int nfeeds, const char *const *fetches,
                     int nfetches, struct plan **out)
{
    pthread_mutex_lock(&ex->lock);
    int rc = plan_get(ex, p, s, feeds, nfeeds, fetches, nfetches, out);
    pthread_mutex_unlock(&ex->lock);
    reap(ex);
    /* Preparation's messages say what and where ("op 3 (add): reads var
     * t, ..."); the call the user made goes in front. */
    return rc < 0 ? vq__fail_prefixed(rc, "%s", who) : rc;
}

void vq__plan_unpin(vq_exec *ex, struct plan *pl)
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
    if (o.timeout_ms < 0)
        return vq__fail(VQ_EINVAL, "vq_exec_new: timeout_ms is %d", o.timeout_ms);
    if (o.flags & ~(VQ_EXEC_CHECK_NAN | VQ_EXEC_FETCH_HOST | VQ_EXEC_NO_SEGMENTS))
        return vq__fail(VQ_EINVAL, "vq_exec_new: unknown flags 0x%x", o.flags);
    const char *env = getenv("VARQ_CHECK_NAN");
    if (env && strcmp(env, "0") && strcmp(env, "1") && *env)
        return vq__fail(VQ_EINVAL, "vq_exec_new: VARQ_CHECK_NAN is \"%s\", not 0 or 1", env);
    /* checked whenever it is set, even where o.seed overrides it */
    uint64_t env_seed;
    int rc = vq__env_seed("vq_exec_new", &env_seed);
    if (rc < 0)
        return rc;
    uint64_t seed = o.seed ? o.seed : rc ? env_seed : VQ_DEFAULT_SEED;
    bool check_nan = (o.flags & VQ_EXEC_CHECK_NAN) || (env && !strcmp(env, "1"));
    vq__allocator *a;
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
    ex->timeout_ms = o.timeout_ms;
    ex->seed = seed;
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

VQ_API int vq_exec_cancel(vq_exec *ex)
{
    if (!ex)
        return vq__fail(VQ_EINVAL, "vq_exec_cancel: NULL executor");
    return vq__runs_cancel(ex);
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
    struct plan *pl;
    int rc =
        vq__plan_acquire(ex, "vq_exec_prepare", p, s, feeds, nfeeds, fetches, nfetches, &pl);
    if (rc == 0)
        vq__plan_unpin(ex, pl);
    return rc;
}
