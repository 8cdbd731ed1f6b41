/* A frame's ops and their engine ops (vq__frame_ops): one fop per op of
 * the frame's block, its slots resolved, and the prebuilt engine ops, one
 * per segment of kernel ops (below) and one per control op (control.c).
 * Preparation (plan.c) calls it for the root frame once the walk is done;
 * control.c for the frames of a cond's branch or a while's body. */
#include "graph_internal.h"
#include "plan.h"

#include <stdlib.h>
#include <string.h>

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
    int max;                   /* SEG_MAX, or 1 with VQ_EXEC_NO_SEGMENTS */
    int bound;                 /* ops from here on are in the segment or lead to it */
    bool lazy;                 /* the root's engine vars are made as segments keep them */
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
    if (fr->up || !vq__root_lazy(pl))
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
    return s->ev ? 0 : vq__root_ev(pl, (int)(s - pl->vars));
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
    fr->ops = vq__big_alloc((size_t)(b->nops ? b->nops : 1) * sizeof *fr->ops);
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
    vq__big_free(fr->ops);
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
        vq__big_free(fr->vars);
    }
}
