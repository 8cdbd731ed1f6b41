/* Recording (capture.c's head says how it fits): each vq_op_run call of
 * a capturing thread becomes a node of the cache's tree, the child of the
 * segment's last call, matched against the children recorded before
 * (the guard) or checked and added; its tensors become the segment's
 * slots. */
#include "capture_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- nodes ---- */

static bool attr_equal(const vq_attr *a, const vq_attr *b)
{
    if (a->type != b->type || strcmp(a->name ? a->name : "", b->name ? b->name : ""))
        return false;
    switch (a->type) {
    case VQ_ATTR_INT:
    case VQ_ATTR_BOOL: return a->i == b->i;
    case VQ_ATTR_FLOAT: return !memcmp(&a->f, &b->f, sizeof a->f);
    case VQ_ATTR_STRING: return (!a->s && !b->s) || (a->s && b->s && !strcmp(a->s, b->s));
    case VQ_ATTR_INTS:
    case VQ_ATTR_BOOLS:
        return a->n == b->n && (a->n <= 0 || !memcmp(a->ints, b->ints, (size_t)a->n * 8));
    case VQ_ATTR_FLOATS:
        return a->n == b->n && (a->n <= 0 || !memcmp(a->floats, b->floats, (size_t)a->n * 8));
    case VQ_ATTR_STRINGS:
        if (a->n != b->n)
            return false;
        for (int i = 0; i < a->n; i++)
            if (strcmp(a->strings[i] ? a->strings[i] : "", b->strings[i] ? b->strings[i] : ""))
                return false;
        return true;
    }
    return false;
}

void vq__capture_attrs_free(vq_attr *a, int n)
{
    for (int i = 0; a && i < n; i++) {
        free((char *)a[i].name);
        free((char *)a[i].s);
        free((void *)a[i].ints);
        free((void *)a[i].floats);
        if (a[i].strings)
            for (int k = 0; k < a[i].n; k++)
                free((char *)a[i].strings[k]);
        free((void *)a[i].strings);
    }
    free(a);
}

static char *dup_str(const char *s)
{
    return s ? vq__strdup(s) : NULL;
}

/* Deep copies of attrs (checked already: well formed). NULL on ENOMEM. */
vq_attr *vq__capture_attrs_copy(const vq_attr *src, int n, bool *ok)
{
    *ok = true;
    if (n == 0)
        return NULL;
    vq_attr *a = vq__calloc((size_t)n, sizeof *a);
    if (!a) {
        *ok = false;
        return NULL;
    }
    for (int i = 0; i < n && *ok; i++) {
        a[i] = (vq_attr){.name = dup_str(src[i].name),
                         .type = src[i].type,
                         .i = src[i].i,
                         .f = src[i].f,
                         .n = src[i].n};
        *ok = a[i].name != NULL;
        if (src[i].s && !(a[i].s = dup_str(src[i].s)))
            *ok = false;
        size_t bytes = src[i].n > 0 ? (size_t)src[i].n * 8 : 0;
        if ((src[i].type == VQ_ATTR_INTS || src[i].type == VQ_ATTR_BOOLS) && bytes) {
            int64_t *v = vq__malloc(bytes);
            if (v)
                memcpy(v, src[i].ints, bytes);
            a[i].ints = v;
            *ok = *ok && v;
        } else if (src[i].type == VQ_ATTR_FLOATS && bytes) {
            double *v = vq__malloc(bytes);
            if (v)
                memcpy(v, src[i].floats, bytes);
            a[i].floats = v;
            *ok = *ok && v;
        } else if (src[i].type == VQ_ATTR_STRINGS && src[i].n > 0) {
            char **v = vq__calloc((size_t)src[i].n, sizeof *v);
            a[i].strings = (const char *const *)v;
            *ok = *ok && v;
            for (int k = 0; v && k < src[i].n; k++)
                if (!(v[k] = dup_str(src[i].strings[k] ? src[i].strings[k] : "")))
                    *ok = false;
        }
    }
    if (!*ok) {
        vq__capture_attrs_free(a, n);
        return NULL;
    }
    return a;
}

static void hash_meta(XXH3_state_t *st, const vq__meta *m)
{
    XXH3_64bits_update(st, &m->dtype, sizeof m->dtype);
    XXH3_64bits_update(st, &m->ndim, sizeof m->ndim);
    if (m->ndim > 0)
        XXH3_64bits_update(st, m->shape, (size_t)m->ndim * sizeof m->shape[0]);
}

/* The guard after n: its parent's, then n's op, wiring, metas and attrs. */
static uint64_t node_hash(const struct node *n)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return n->parent->hash * 31 + (uint64_t)n->depth; /* still exact: nodes compare fully */
    XXH3_64bits_reset_withSeed(st, n->parent->hash);
    XXH3_64bits_update(st, n->def->type, strlen(n->def->type) + 1);
    int counts[4] = {n->nin, n->nout, n->dev.kind, n->dev.id};
    XXH3_64bits_update(st, counts, sizeof counts);
    XXH3_64bits_update(st, n->wire, (size_t)(n->nin + n->nout) * sizeof *n->wire);
    if (n->nout)
        XXH3_64bits_update(st, n->fresh, (size_t)n->nout);
    for (int i = 0; i < n->nin + n->nout; i++)
        hash_meta(st, &n->meta[i]);
    for (int i = 0; i < n->nattrs; i++) {
        const vq_attr *a = &n->attrs[i];
        XXH3_64bits_update(st, a->name, strlen(a->name) + 1);
        XXH3_64bits_update(st, &a->type, sizeof a->type);
        XXH3_64bits_update(st, &a->i, sizeof a->i);
        XXH3_64bits_update(st, &a->f, sizeof a->f);
        if (a->s)
            XXH3_64bits_update(st, a->s, strlen(a->s) + 1);
        if (a->ints && a->n > 0)
            XXH3_64bits_update(st, a->ints, (size_t)a->n * 8);
        if (a->floats && a->n > 0)
            XXH3_64bits_update(st, a->floats, (size_t)a->n * 8);
        for (int k = 0; a->strings && k < a->n; k++)
            XXH3_64bits_update(st, a->strings[k], strlen(a->strings[k]) + 1);
    }
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

static struct node *node_new(struct cache *c, struct node *parent, const vq__op_def *d, vq_ctx dev,
                             int nin, int nout, const int *wire, const unsigned char *fresh,
                             const vq__meta *metas, const vq_attr *attrs, int nattrs,
                             const void *params)
{
    size_t nw = (size_t)(nin + nout);
    size_t off_wire = (sizeof(struct node) + 15) & ~(size_t)15;
    size_t off_meta = (off_wire + nw * sizeof(int) + 15) & ~(size_t)15;
    size_t off_fresh = off_meta + nw * sizeof(vq__meta);
    size_t off_spare = (off_fresh + (size_t)nout + 15) & ~(size_t)15;
    size_t off_params = (off_spare + (size_t)nout * sizeof(vq_tensor *) + 15) & ~(size_t)15;
    char *mem = vq__calloc(1, off_params + d->params_size + 16);
    if (!mem)
        return NULL;
    struct node *n = (struct node *)mem;
    n->wire = (int *)(mem + off_wire);
    n->meta = (vq__meta *)(mem + off_meta);
    n->fresh = (unsigned char *)(mem + off_fresh);
    n->spare = (_Atomic(vq_tensor *) *)(mem + off_spare);
    for (int j = 0; j < nout; j++)
        atomic_init(&n->spare[j], NULL);
    n->params = mem + off_params;
    bool ok;
    n->attrs = vq__capture_attrs_copy(attrs, nattrs, &ok);
    if (!ok) {
        free(mem);
        return NULL;
    }
    n->nattrs = nattrs;
    n->parent = parent;
    n->def = d;
    n->dev = dev;
    n->depth = parent->depth + 1;
    n->nin = nin;
    n->nout = nout;
    memcpy(n->wire, wire, nw * sizeof(int));
    memcpy(n->meta, metas, nw * sizeof(vq__meta));
    if (nout)
        memcpy(n->fresh, fresh, (size_t)nout);
    if (d->params_size)
        memcpy(n->params, params, d->params_size);
    n->hash = node_hash(n);
    n->sibling = parent->child;
    parent->child = n;
    n->all_next = c->all;
    c->all = n;
    c->nnodes++;
    return n;
}

/* ---- recording ---- */

/* hot path (a loop: shapes have few dims, a memcmp call costs more) */
static bool meta_is(const vq__meta *m, const vq_tensor *t)
{
    if (m->dtype != t->dtype || m->ndim != t->ndim)
        return false;
    for (int d = 0; d < t->ndim; d++)
        if (m->shape[d] != t->shape[d])
            return false;
    return true;
}

static void meta_of(vq__meta *m, const vq_tensor *t)
{
    memset(m, 0, sizeof *m);
    m->dtype = t->dtype;
    m->ndim = t->ndim;
    memcpy(m->shape, t->shape, (size_t)t->ndim * sizeof t->shape[0]);
}

/* Adds t (whose reference the segment takes: retained unless take) as
 * slot S->nslots. */
static int slot_add(struct state *S, vq_tensor *t, unsigned char kind, bool take)
{
    if (S->nslots == S->cap) {
        int cap = S->cap ? 2 * S->cap : 64;
        vq_tensor **slot = vq__realloc(S->slot, (size_t)cap * sizeof *slot);
        if (!slot)
            return vq__fail(VQ_ENOMEM, "capture: out of memory");
        S->slot = slot;
        unsigned char *kind_arr = vq__realloc(S->kind, (size_t)cap);
        if (!kind_arr)
            return vq__fail(VQ_ENOMEM, "capture: out of memory");
        S->kind = kind_arr;
        S->cap = cap;
    }
    /* Claimed once: a tensor is in one segment at a time. */
    void *none = NULL;
    if (!atomic_compare_exchange_strong(&t->capture, &none, S)) {
        S->foreign = t;
        return FOREIGN;
    }
    int s = S->nslots++;
    S->slot[s] = take ? t : vq_tensor_retain(t);
    S->kind[s] = kind;
    t->capture_slot = s;
    return s;
}

static void slots_rollback(struct state *S, int to)
{
    while (S->nslots > to) {
        vq_tensor *t = S->slot[--S->nslots];
        atomic_store_explicit(&t->capture, NULL, memory_order_relaxed);
        vq_tensor_release(t);
    }
}

static bool same_dev(vq_ctx a, vq_ctx b)
{
    return a.kind == b.kind && a.id == b.id;
}

/* A new tensor of the call's (not seen by anyone yet) as slot
 * S->nslots, with the reference the caller passes in. */
static int slot_add_new(struct state *S, vq_tensor *t)
{
    if (S->nslots == S->cap)
        return slot_add(S, t, K_NEW, true); /* grows the arrays */
    atomic_store_explicit(&t->capture, S, memory_order_relaxed);
    int s = S->nslots++;
    S->slot[s] = t;
    S->kind[s] = K_NEW;
    t->capture_slot = s;
    return s;
}

/* The end of recording a call that matches node hit (its inputs and given
 * outputs wired, slots n0.. added for them): the new outputs made (or
 * taken from the node's spares), the kinds updated, the segment moved on
 * to hit. Returns 0 or the error of making an output (the call's slots
 * rolled back). */
static int record_finish(struct state *S, struct node *hit, vq_ctx dev, int nin, vq_tensor **out,
                         int nout, const int *wire, const unsigned char *fresh, int n0)
{
    const vq__meta *om = hit->meta + nin;
    int rc = 0;
    for (int j = 0; j < nout && rc == 0; j++) {
        if (!fresh[j])
            continue;
        /* Only this thread takes a spare, and a run only puts one where
         * there is none (spare_put): a load and a store suffice. */
        vq_tensor *t = NULL;
        if (dev.kind == VQ_DEV_CPU &&
            (t = atomic_load_explicit(&hit->spare[j], memory_order_acquire)))
            atomic_store_explicit(&hit->spare[j], NULL, memory_order_relaxed);
        if (!t)
            rc =
                vq__tensor_empty_on(&t, dev, om[j].dtype, om[j].ndim, om[j].shape, "vq_tensor_new");
        int s = rc == 0 ? slot_add_new(S, t) : rc;
        if (rc == 0 && s < 0) {
            vq_tensor_release(t);
            rc = s;
        }
    }
    if (rc < 0) {
        slots_rollback(S, n0);
        return rc;
    }
    for (int j = 0; j < nout; j++) {
        if (fresh[j]) {
            /* The segment's reference and the caller's: nobody else has
             * seen the tensor yet. */
            vq_tensor *t = S->slot[wire[nin + j]];
            atomic_store_explicit(&t->refs, S->replaying ? 1 : 2, memory_order_relaxed);
            out[j] = t;
        } else if (S->kind[wire[nin + j]] == K_EXT_READ)
            S->kind[wire[nin + j]] = K_EXT_WRITE;
    }
    S->dev = dev;
    S->at = hit;
    S->last = hit;
    S->nops++;
    S->stats.ops_recorded++;
    if (S->nops >= VQ_CAPTURE_MAX_OPS && !S->replaying)
        vq__capture_seg_cut(S, VQ_CAPTURE_CUT_SIZE);
    return 0;
}

/* Whether the call is one that record can wire without the op's check
 * (its arguments well formed, its tensors on one device): its device
 * (*dev; dev_hint for a call without tensors) and whether a tensor is
 * another engine's (*other_engine). */
static bool record_simple(const struct state *S, const char *type, vq_tensor *const *in, int nin,
                          vq_tensor **out, int nout, const vq_attr *attrs, int nattrs,
                          const vq_ctx *dev_hint, vq_ctx *dev_out, bool *other_out)
{
    vq_engine *e = S->e;
    bool simple = type && nin >= 0 && nout >= 0 && nin <= VQ__MAX_SLOTS && nout <= VQ__MAX_SLOTS &&
                  (!nin || in) && (!nout || out) && (nattrs == 0 || (nattrs > 0 && attrs));
    vq_ctx dev = {VQ_DEV_CPU, 0};
    bool have_dev = false, other_engine = false;
    for (int i = 0; simple && i < nin + nout; i++) {
        vq_tensor *t = i < nin ? in[i] : out[i - nin];
        if (!t) {
            simple = i >= nin; /* a NULL input: the check says so */
            continue;
        }
        vq_engine *owner = atomic_load_explicit(&t->engine, memory_order_relaxed);
        other_engine |= owner && owner != e;
        if (!have_dev) {
            dev = t->dev;
            have_dev = true;
        } else if (!same_dev(dev, t->dev)) {
            simple = false; /* the check names the slot */
        }
    }
    if (!have_dev && dev_hint)
        dev = *dev_hint; /* a gradient op without tensors: the segment's device */
    *dev_out = dev;
    *other_out = other_engine;
    return simple;
}

/* The guard: the child of the segment's last node that matches this call
 * exactly (wired as wire and fresh say, n0 the slots before it), or NULL. */
static struct node *record_guard(const struct state *S, const char *type, vq_tensor *const *in,
                                 int nin, vq_tensor **out, int nout, const vq_attr *attrs,
                                 int nattrs, vq_ctx dev, const int *wire,
                                 const unsigned char *fresh, int n0)
{
    struct node *hit = NULL;
    for (struct node *c = S->at->child; c && !hit; c = c->sibling) {
        if (c->nin != nin || c->nout != nout || c->nattrs != nattrs || !same_dev(c->dev, dev) ||
            strcmp(c->def->type, type))
            continue;
        bool same = true;
        for (int i = 0; i < nin + nout && same; i++)
            same = c->wire[i] == wire[i];
        for (int j = 0; j < nout && same; j++)
            same = c->fresh[j] == fresh[j];
        /* A slot the segment had before this call (below n0) has the
         * meta it had when the path was recorded: its first call checked
         * it, or a node of the path made it, and a tensor's meta never
         * changes. Only the call's new tensors are compared. */
        for (int i = 0; i < nin && same; i++)
            same = wire[i] < n0 || meta_is(&c->meta[i], in[i]);
        for (int j = 0; j < nout && same; j++)
            same = fresh[j] || wire[nin + j] < n0 || meta_is(&c->meta[nin + j], out[j]);
        for (int a = 0; a < nattrs && same; a++)
            same = attr_equal(&c->attrs[a], &attrs[a]);
        if (same)
            hit = c;
    }
    return hit;
}

/* Records one call into S's segment (S locked, every tensor of the call
 * either S's or no capture's). Returns 0, the call's error, or
 * VQ__CAPTURE_EAGER after cutting the segment (the call runs eagerly). */
int vq__capture_record(struct state *S, const char *type, vq_tensor *const *in, int nin,
                       vq_tensor **out, int nout, const vq_attr *attrs, int nattrs,
                       const vq_ctx *dev_hint)
{
    vq_engine *e = S->e;
    vq_ctx dev = {VQ_DEV_CPU, 0};
    bool other_engine = false;
    const vq__op_def *vd = type ? vq__op_find(type) : NULL;
    if (vd && vq__reads_values(vd, nin)) {
        /* its output shapes depend on its inputs' values, which a replay
         * could not re-read: it runs eagerly, after the work it reads */
        vq__capture_seg_cut(S, VQ_CAPTURE_CUT_FALLBACK);
        return VQ__CAPTURE_EAGER;
    }
    bool simple =
        record_simple(S, type, in, nin, out, nout, attrs, nattrs, dev_hint, &dev, &other_engine);
    vq__meta om_buf[VQ__MAX_SLOTS];
    _Alignas(16) unsigned char params[VQ__MAX_PARAMS];
    if (!simple) {
        /* Only a call the check refuses gets here (it fails as eagerly). */
        const vq__op_def *d;
        vq_ctx dv;
        int rc =
            vq__op_call_check(e, type, in, nin, out, nout, attrs, nattrs, &d, om_buf, params, &dv);
        if (rc < 0)
            return rc;
        vq__capture_seg_cut(S, VQ_CAPTURE_CUT_FALLBACK);
        return VQ__CAPTURE_EAGER;
    }
    if (S->nops > 0 && !same_dev(dev, S->dev))
        vq__capture_seg_cut(S, VQ_CAPTURE_CUT_DEVICE);
    /* The wiring: slot numbers, new tensors of the call added tentatively. */
    int n0 = S->nslots, rc = 0;
    int wire[2 * VQ__MAX_SLOTS];
    unsigned char fresh[VQ__MAX_SLOTS];
    for (int i = 0; i < nin + nout && rc >= 0; i++) {
        vq_tensor *t = i < nin ? in[i] : out[i - nin];
        if (i >= nin)
            fresh[i - nin] = t == NULL;
        if (!t)
            continue;
        if (atomic_load_explicit(&t->capture, memory_order_relaxed) == S)
            wire[i] = t->capture_slot;
        else
            rc = wire[i] = slot_add(S, t, i < nin ? K_EXT_READ : K_EXT_WRITE, false);
    }
    if (rc < 0) {
        slots_rollback(S, n0);
        return rc;
    }
    rc = 0;
    for (int j = 0, next = S->nslots; j < nout; j++)
        if (fresh[j])
            wire[nin + j] = next++;
    /* The guard: a node that matches this call exactly. */
    struct node *hit =
        record_guard(S, type, in, nin, out, nout, attrs, nattrs, dev, wire, fresh, n0);
    if (hit) {
        S->stats.op_hits++;
    } else {
        const vq__op_def *d;
        vq_ctx dv;
        rc = vq__op_call_check(e, type, in, nin, out, nout, attrs, nattrs, &d, om_buf, params, &dv);
        /* No synchronous kernel to replay; or a random op drawing from the
         * process's default generator, whose key is taken per call (a
         * replay would repeat one draw). */
        if (rc == 0 && ((d->kernel_async && dev.kind == VQ_DEV_CPU) || (d->flags & VQ__CONTROL) ||
                        vq__draws_default(d, params)))
            rc = VQ__CAPTURE_EAGER;
        if (rc) {
            slots_rollback(S, n0);
            if (rc == VQ__CAPTURE_EAGER)
                vq__capture_seg_cut(S, VQ_CAPTURE_CUT_FALLBACK);
            return rc;
        }
        vq__meta metas[2 * VQ__MAX_SLOTS];
        for (int i = 0; i < nin; i++)
            meta_of(&metas[i], in[i]);
        memcpy(metas + nin, om_buf, (size_t)nout * sizeof *metas);
        hit =
            node_new(S->cache, S->at, d, dev, nin, nout, wire, fresh, metas, attrs, nattrs, params);
        if (!hit) {
            slots_rollback(S, n0);
            return vq__fail(VQ_ENOMEM, "%s: out of memory (capture)", d->type);
        }
    }
    /* A tensor of another engine fails as vq_op_run's does, after the check
     * (ops/registry.c: the first such input, then output, by its index). */
    for (int i = 0; other_engine && i < nin + nout; i++) {
        vq_tensor *t = i < nin ? in[i] : out[i - nin];
        vq_engine *owner = t ? atomic_load(&t->engine) : NULL;
        if (owner && owner != e) {
            slots_rollback(S, n0);
            vq__fail(VQ_EINVAL, "the tensor is already used with another engine");
            return vq__call_slot_fail(VQ_EINVAL, type, i, nin);
        }
    }
    return record_finish(S, hit, dev, nin, out, nout, wire, fresh, n0);
}

/* Records a gradient op of a recipe (vq_capture_backward) whose last
 * replay matched node n, if this call is wired as it was then: every input
 * and given output is the segment's, in the slot n says, the new outputs
 * are the next slots, and the segment is at n's parent on n's device. The
 * op's type and attributes are the recipe's own (it never changes them),
 * equal to n's; the metas of the segment's tensors are those of the path
 * (see record's guard). Returns 1 when it does not apply (record it
 * then), else as record_finish. */
int vq__capture_record_known(struct state *S, struct node *n, vq_tensor *const *in, int nin,
                             vq_tensor **out, int nout)
{
    if (!n || n->parent != S->at || S->nops == 0 || n->nin != nin || n->nout != nout ||
        !same_dev(n->dev, S->dev))
        return 1;
    for (int i = 0; i < nin; i++)
        if (!in[i] || atomic_load_explicit(&in[i]->capture, memory_order_relaxed) != S ||
            in[i]->capture_slot != n->wire[i])
            return 1;
    for (int j = 0, next = S->nslots; j < nout; j++) {
        if (n->fresh[j] != !out[j])
            return 1;
        if (n->fresh[j] ? n->wire[nin + j] != next++
                        : atomic_load_explicit(&out[j]->capture, memory_order_relaxed) != S ||
                              out[j]->capture_slot != n->wire[nin + j])
            return 1;
    }
    S->stats.op_hits++;
    return record_finish(S, n, S->dev, nin, out, nout, n->wire, n->fresh, S->nslots);
}
