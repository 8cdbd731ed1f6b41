/* Capture of imperative calls (include/varq/capture.h): vq_op_run calls
 * recorded into segments, guarded by their structure, and pushed as one
 * engine op each that replays the calls' kernels from a cached plan.
 *
 * How it fits: ops/ (below) calls the two hooks it exports (ops/ops_internal.h:
 * vq__capture) from vq_op_run and from the tensor functions that read
 * bytes or take a var; this file installs them on the first
 * vq_capture_begin. It sits beside graph/, which it uses for imperative
 * autodiff (a program of the segment's calls, vq_append_backward).
 *
 * The pieces:
 *   state  - one per thread and engine: the segment being recorded (its
 *            tensors, "slots", in order of first use, each with one
 *            reference held by the segment) and the cache.
 *   node   - one recorded call's structure after the calls of its parent:
 *            op, attributes (deep copies), input and output metas, wiring
 *            (slot numbers), and the checked result (output metas,
 *            params). The path from the root to the current node is the
 *            segment's guard; node->hash is its hash.
 *   plan   - at a path's end, per set of slot kinds (which new tensors the
 *            caller still holds): the ops in order and which slots the
 *            segment's engine op reads and writes. Kept in an LRU.
 *   run    - one push of a plan: the slots' tensors, their vars, and the
 *            per-slot errors while the kernels run.
 *
 * Locking: a state's lock is held by its thread while it records a call or
 * cuts, and by any thread that cuts it because it touches one of its
 * tensors (t->capture). Lock order: a thread never holds two states'
 * locks (it lets go of its own before cutting another's); states_lock is
 * innermost and guards t->capture -> state lookups against a state's free
 * at thread exit, and the registry of every thread's states.
 *
 * An engine freed while states are open on it (vq_engine_free's hook,
 * engine_freed): every state of the engine, whichever thread's, is ended
 * as vq_capture_end would (its segment pushed) and marked dead, under its
 * lock, before the engine drains. A dead state is never pushed from
 * again; its thread skips it (state_find), forgets it at its next
 * vq_capture_begin or its exit, and never touches the freed engine. */
#include <varq/capture.h>

#include "../engine/engine_services.h" /* a var's carried failure */
#include "../engine/spinlock.h"
#include "../graph/graph_internal.h"

#include <varq/train.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define MAX_PLANS 64    /* plans kept per state (LRU) */
#define MAX_NODES 65536 /* nodes per cache before it is dropped and rebuilt */

enum { FOREIGN = -1000 }; /* record: a tensor is another segment's (S->foreign) */
enum { K_EXT_READ = 1, K_EXT_WRITE = 2, K_NEW_KEEP = 3, K_NEW_TEMP = 4, K_NEW = 5 };

struct plan;
struct recipe;

struct node {
    struct node *parent, *child, *sibling;
    struct node *all_next; /* every node of the cache, for freeing */
    uint64_t hash;
    const vq__op_def *def;
    vq_ctx dev;            /* the call's device (the check depends on it) */
    int depth;             /* calls on the path, this one included */
    int nin, nout;
    int *wire;             /* nin + nout slot numbers */
    unsigned char *fresh;  /* per output: created by the call (not given) */
    vq__meta *meta;        /* inputs' metas, then the outputs' (inferred) */
    vq_attr *attrs;
    int nattrs;
    void *params;
    struct plan *plans;    /* plans ending here */
    struct recipe *recipes; /* vq_capture_backward recipes from here */
    /* Per output: a CPU tensor of the output's meta that a run of a plan
     * through here made as this call's output, used as a temporary and
     * handed back when it ended (see spare_put), or NULL. The next call
     * that matches this node takes it instead of making a tensor. */
    _Atomic(vq_tensor *) *spare;
};

struct plan_temp {
    int k, j, s; /* call, its output, the slot (see plan->temps) */
};

struct plan {
    struct node *end;
    struct plan *next_at_end;
    struct plan *lru_prev, *lru_next;
    atomic_int refs;       /* the cache's one (until evicted) + runs in flight */
    int nslots;
    unsigned char *kinds;  /* per slot, K_EXT_* or K_NEW_KEEP / K_NEW_TEMP */
    int nops;
    struct node **ops;
    int *rw;               /* slots read (nreads), then written (nwrites) */
    int nreads, nwrites;
    /* The temporaries (K_NEW_TEMP slots), each with the call that makes
     * it: ops[temps[i].k]'s output temps[i].j is slot temps[i].s. */
    struct plan_temp *temps;
    int ntemps;
    /* A finished run of this plan kept for the next push (see run_free),
     * or NULL: taken under the state's lock, put back by a worker only
     * where there is none. */
    _Atomic(struct run *) spare_run;
};

struct cache {
    atomic_int refs;       /* its state's + one per run in flight */
    struct node root;
    struct node *all;
    int nnodes;
    struct plan *lru_head, *lru_tail;
    int nplans;
};

struct state {
    vq__spinlock lock; /* state_lock */
    vq_engine *e;
    struct state *next;    /* the thread's states */
    struct state *reg_prev, *reg_next; /* under states_lock: the registry */
    int refs;              /* under states_lock: the thread's + cutters' */
    /* e was freed (engine_freed): written under the state's lock and
     * states_lock; read under either, or relaxed by the state's own
     * thread, which learns of the free through the caller's own ordering
     * (it may not use e meanwhile). */
    atomic_bool dead;
    bool active;
    struct cache *cache;
    struct node *at;       /* the segment's last call (cache->root: empty) */
    int nops;
    vq_tensor **slot;
    unsigned char *kind;
    int nslots, cap;
    vq_ctx dev;
    int first_err;         /* of pushes since vq_capture_begin */
    vq_tensor *foreign;    /* record: the tensor another segment claimed */
    struct node *last;     /* the node the last recorded call matched */
    /* vq_capture_backward replays a recipe: its new tensors get no
     * caller's reference (the segment's keeps them), and the size cut
     * waits for the end of the replay (it would release them). */
    bool replaying;
    vq_capture_stats stats;
};

struct run {
    struct plan *plan;
    struct cache *cache;
    vq_engine *e;
    int nslots;
    bool ran;
    vq_tensor **t;
    int *err;
    /* Per slot where err is set (only there: never cleared for a push),
     * the note of the failure (a reference), or NULL. */
    struct vq__fail_note **note;
    vq_var **vars;         /* plan->rw's */
};

static pthread_mutex_t states_lock = PTHREAD_MUTEX_INITIALIZER;
static struct state *registry; /* under states_lock: every live state */
static _Thread_local struct state *my_states;
static pthread_key_t states_key;
static pthread_once_t states_once = PTHREAD_ONCE_INIT;

/* A state's lock: taken by its thread for every recorded call, and only
 * now and then by another (a cut), so the engine's spinlock: one exchange
 * to take it, a store to let go (a mutex costs two read-modify-writes and
 * more instructions per call); a waiter spins a little, then yields the
 * core, since the holder may be preempted. */
static void state_lock(struct state *S)
{
    vq__spin_lock(&S->lock);
}

static void state_unlock(struct state *S)
{
    vq__spin_unlock(&S->lock);
}

/* ---- the engine's error record ----
 *
 * A segment is one engine op, but eager calls fail tensor by tensor. The
 * run records errors per slot and, before its op completes, sets them on
 * the vars it writes (vq__var_fail), which is what vq__op_finish does for a
 * failed op's writes: the op holds write access to them, so the queue
 * orders this store with every other access, as it orders the engine's
 * own. */
/* ---- nodes ---- */

static bool attr_equal(const vq_attr *a, const vq_attr *b)
{
    if (a->type != b->type || strcmp(a->name ? a->name : "", b->name ? b->name : ""))
        return false;
    switch (a->type) {
    case VQ_ATTR_INT:
    case VQ_ATTR_BOOL:
        return a->i == b->i;
    case VQ_ATTR_FLOAT:
        return !memcmp(&a->f, &b->f, sizeof a->f);
    case VQ_ATTR_STRING:
        return (!a->s && !b->s) || (a->s && b->s && !strcmp(a->s, b->s));
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

static void attrs_free(vq_attr *a, int n)
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
static vq_attr *attrs_copy(const vq_attr *src, int n, bool *ok)
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
        a[i] = (vq_attr){.name = dup_str(src[i].name), .type = src[i].type, .i = src[i].i,
                         .f = src[i].f, .n = src[i].n};
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
        attrs_free(a, n);
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

static struct node *node_new(struct cache *c, struct node *parent, const vq__op_def *d,
                             vq_ctx dev, int nin, int nout, const int *wire,
                             const unsigned char *fresh, const vq__meta *metas,
                             const vq_attr *attrs, int nattrs, const void *params)
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
    n->attrs = attrs_copy(attrs, nattrs, &ok);
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

/* ---- plans and the cache ---- */

static void plan_unref(struct plan *p)
{
    if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1) {
        free(atomic_load_explicit(&p->spare_run, memory_order_acquire));
        free(p); /* kinds, ops, rw and temps live in the same block */
    }
}

static void recipes_free(struct recipe *r);

static void cache_unref(struct cache *c)
{
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (struct plan *p = c->lru_head, *next; p; p = next) {
        next = p->lru_next;
        plan_unref(p);
    }
    recipes_free(c->root.recipes);
    for (struct node *n = c->all, *next; n; n = next) {
        next = n->all_next;
        attrs_free(n->attrs, n->nattrs);
        recipes_free(n->recipes);
        for (int j = 0; j < n->nout; j++)
            vq_tensor_release(atomic_load_explicit(&n->spare[j], memory_order_acquire));
        free(n);
    }
    free(c);
}

static struct cache *cache_new(void)
{
    struct cache *c = vq__calloc(1, sizeof *c);
    if (c) {
        atomic_init(&c->refs, 1);
        c->root.hash = 0x5eed5eed5eed5eedull;
    }
    return c;
}

static void lru_unlink(struct cache *c, struct plan *p)
{
    if (p->lru_prev)
        p->lru_prev->lru_next = p->lru_next;
    else
        c->lru_head = p->lru_next;
    if (p->lru_next)
        p->lru_next->lru_prev = p->lru_prev;
    else
        c->lru_tail = p->lru_prev;
    p->lru_prev = p->lru_next = NULL;
}

static void lru_front(struct cache *c, struct plan *p)
{
    p->lru_next = c->lru_head;
    if (c->lru_head)
        c->lru_head->lru_prev = p;
    c->lru_head = p;
    if (!c->lru_tail)
        c->lru_tail = p;
}

static void lru_evict(struct cache *c)
{
    while (c->nplans > MAX_PLANS) {
        struct plan *p = c->lru_tail;
        lru_unlink(c, p);
        struct plan **at = &p->end->plans;
        while (*at != p)
            at = &(*at)->next_at_end;
        *at = p->next_at_end;
        c->nplans--;
        plan_unref(p); /* runs in flight keep it */
    }
}

/* The plan of the path ending at end with these slot kinds. */
static struct plan *plan_build(struct cache *c, struct node *end, int nslots,
                               const unsigned char *kinds)
{
    int nops = end->depth, nrw = 0, ntemps = 0;
    for (int s = 0; s < nslots; s++) {
        nrw += kinds[s] != K_NEW_TEMP;
        ntemps += kinds[s] == K_NEW_TEMP;
    }
    size_t off_ops = (sizeof(struct plan) + 15) & ~(size_t)15;
    size_t off_rw = off_ops + (size_t)nops * sizeof(struct node *);
    size_t off_temps = off_rw + (size_t)nrw * sizeof(int);
    size_t off_kinds = off_temps + (size_t)ntemps * sizeof(struct plan_temp);
    char *mem = vq__calloc(1, off_kinds + (size_t)nslots + 1);
    if (!mem)
        return NULL;
    struct plan *p = (struct plan *)mem;
    p->ops = (struct node **)(mem + off_ops);
    p->rw = (int *)(mem + off_rw);
    p->temps = (struct plan_temp *)(mem + off_temps);
    p->kinds = (unsigned char *)(mem + off_kinds);
    memcpy(p->kinds, kinds, (size_t)nslots);
    p->nslots = nslots;
    p->nops = nops;
    p->end = end;
    int k = nops;
    for (struct node *n = end; n->parent; n = n->parent)
        p->ops[--k] = n;
    for (int s = 0; s < nslots; s++)
        if (kinds[s] == K_EXT_READ)
            p->rw[p->nreads++] = s;
    for (int s = 0; s < nslots; s++)
        if (kinds[s] == K_EXT_WRITE || kinds[s] == K_NEW_KEEP)
            p->rw[p->nreads + p->nwrites++] = s;
    /* A temporary is a new tensor: a call of the path made it. */
    for (k = 0; k < nops; k++) {
        const struct node *n = p->ops[k];
        for (int j = 0; j < n->nout; j++)
            if (n->fresh[j] && kinds[n->wire[n->nin + j]] == K_NEW_TEMP)
                p->temps[p->ntemps++] = (struct plan_temp){k, j, n->wire[n->nin + j]};
    }
    atomic_init(&p->refs, 1);
    atomic_init(&p->spare_run, NULL);
    p->next_at_end = end->plans;
    end->plans = p;
    lru_front(c, p);
    c->nplans++;
    lru_evict(c);
    return p;
}

/* ---- running a segment (inside its engine op) ---- */

/* The failed kernel's message goes to each output, for vq_tensor_wait (as
 * vq_op_run's note_failure); its note, with the outputs' slots' errors,
 * to the slots, for the vars the run writes. */
static void note_failure(struct run *r, const struct node *n, vq_tensor *const *out, int err)
{
    for (int i = 0; i < n->nout; i++) {
        char *msg = vq__strdup(vq_errmsg());
        free(atomic_exchange(&out[i]->fail_msg, msg));
    }
    struct vq__fail_note *note = vq__kernel_fail_note(n->def);
    for (int j = 0; j < n->nout; j++) {
        int s = n->wire[n->nin + j];
        if (!r->err[s]) {
            r->err[s] = err;
            vq__fail_note_ref(note);
            r->note[s] = note;
        }
    }
    vq__fail_note_unref(note); /* the slots hold theirs */
}

/* A temporary of a finished run (CPU, no var, no reference but the run's)
 * becomes the spare of the node whose output it was, when that one is
 * free; else it is released. Its bytes are left as they are: an output's
 * bytes are uninitialized for the kernel, as a new tensor's. */
static void spare_put(struct node *n, int j, vq_tensor *t)
{
    vq_tensor *none = NULL;
    if (atomic_load_explicit(&t->fail_msg, memory_order_relaxed)) /* the run's own: no race */
        free(atomic_exchange_explicit(&t->fail_msg, NULL, memory_order_acq_rel));
    if (!atomic_compare_exchange_strong_explicit(&n->spare[j], &none, t, memory_order_release,
                                                 memory_order_relaxed))
        vq_tensor_release(t);
}

/* hot path: the segment's kernels in order, no allocation of its own */
static int run_exec(void *arg, const vq_exec_ctx *x)
{
    struct run *r = arg;
    const struct plan *p = r->plan;
    void *stream = vq__gpu_op_stream(); /* NULL on the CPU */
    int nrw = p->nreads + p->nwrites;
    r->ran = true;
    /* The errors the vars carry now (the op runs even so: RUN_ON_FAILED);
     * while there is none, no call is skipped (any). */
    int any = 0;
    for (int i = 0; i < nrw; i++)
        any |= r->err[p->rw[i]] = vq__var_error(r->vars[i]);
    for (int i = 0; any && i < nrw; i++) /* the notes, where the errors are */
        if (r->err[p->rw[i]]) {
            r->note[p->rw[i]] = vq__var_fail_note(r->vars[i]);
            vq__fail_note_ref(r->note[p->rw[i]]);
        }
    vq_tensor *in[VQ__MAX_SLOTS], *out[VQ__MAX_SLOTS];
    for (int k = 0; k < p->nops; k++) {
        const struct node *n = p->ops[k];
        const int *w = n->wire;
        for (int i = 0; i < n->nin; i++)
            in[i] = r->t[w[i]];
        for (int j = 0; j < n->nout; j++)
            out[j] = r->t[w[n->nin + j]];
        /* skipped as the engine skips an op: the first failed slot among
         * its writes, then its reads, whose note it passes on */
        int skip = 0, from = -1;
        for (int j = 0; any && !skip && j < n->nout; j++)
            skip = r->err[from = w[n->nin + j]];
        for (int i = 0; any && !skip && i < n->nin; i++)
            skip = r->err[from = w[i]];
        int err = skip;
        if (!skip) {
            vq__kcall kc = {.def = n->def, .params = n->params, .in = in, .nin = n->nin,
                            .out = out, .nout = n->nout, .x = x};
            err = vq__kernel_run(&kc, x->ctx);
            if (err)
                note_failure(r, n, out, err);
        }
        if (err) {
            any = 1;
            for (int j = 0; j < n->nout; j++) {
                int s = w[n->nin + j];
                if (!r->err[s]) { /* (a failed kernel's outputs have theirs) */
                    r->err[s] = err;
                    r->note[s] = r->note[from];
                    vq__fail_note_ref(r->note[s]);
                }
            }
            vq__engine_note_fail(r->e, err);
        }
    }
    for (int i = p->nreads; any && i < nrw; i++)
        if (r->err[p->rw[i]])
            vq__var_fail_noted(r->vars[i], r->err[p->rw[i]], r->note[p->rw[i]]);
    for (int s = 0; any && s < r->nslots; s++) /* the vars hold theirs */
        if (r->err[s])
            vq__fail_note_unref(r->note[s]);
    /* Temporaries (no var, no other reference) are freed here, in stream
     * order on a GPU; on the CPU they go back to the nodes that made them
     * (spare_put). The other tensors need no reference from the run: a
     * tensor's storage is freed by an op on its var, which comes after
     * this one. */
    for (int i = 0; i < p->ntemps; i++) {
        const struct plan_temp *tp = &p->temps[i];
        vq_tensor *t = r->t[tp->s];
        r->t[tp->s] = NULL;
        if (!stream && t && t->dev.kind == VQ_DEV_CPU)
            spare_put(p->ops[tp->k], tp->j, t);
        else
            vq__tensor_release_on(t, stream);
    }
    return 0;
}

static void run_free(void *arg)
{
    struct run *r = arg;
    for (int s = 0; !r->ran && s < r->nslots; s++)
        if (r->plan->kinds[s] == K_NEW_TEMP)
            vq_tensor_release(r->t[s]);
    struct plan *p = r->plan;
    struct cache *c = r->cache;
    struct run *none = NULL;
    if (!atomic_compare_exchange_strong_explicit(&p->spare_run, &none, r, memory_order_release,
                                                 memory_order_relaxed))
        free(r);
    plan_unref(p);
    cache_unref(c);
}

/* ---- states ---- */

static void state_reset_segment(struct state *S)
{
    S->at = &S->cache->root;
    S->nops = 0;
    S->nslots = 0;
}

/* Pushes the segment of S as one engine op and starts an empty one.
 * Called with S locked. Returns 0 or the push's error. With held, the
 * push is a held one (vq__push_held): the caller, about to wait for the
 * segment, lets it go with vq__push_release after unlocking S, and then
 * runs it itself when it is ready. */
static int seg_cut_held(struct state *S, int cause, void **held)
{
    if (S->nops == 0)
        return 0;
    struct cache *c = S->cache;
    int ns = S->nslots;
    /* A new tensor the caller still holds is written for the caller; one
     * it let go of is a temporary, which nobody else can reach. */
    for (int s = 0; s < ns; s++) {
        if (S->kind[s] == K_NEW)
            S->kind[s] = atomic_load_explicit(&S->slot[s]->refs, memory_order_relaxed) > 1
                             ? K_NEW_KEEP
                             : K_NEW_TEMP;
        if (S->kind[s] == K_NEW_TEMP) /* the run frees it: unmarked before */
            atomic_store_explicit(&S->slot[s]->capture, NULL, memory_order_relaxed);
    }
    struct node *end = S->at;
    struct plan *p = end->plans;
    while (p && (p->nslots != ns || memcmp(p->kinds, S->kind, (size_t)ns)))
        p = p->next_at_end;
    int rc = 0;
    if (p) {
        S->stats.cache_hits++;
        lru_unlink(c, p);
        lru_front(c, p);
    } else if ((p = plan_build(c, end, ns, S->kind))) {
        S->stats.plans_built++;
    } else {
        rc = vq__fail(VQ_ENOMEM, "capture: out of memory for a plan");
    }
    int nrw = p ? p->nreads + p->nwrites : 0;
    struct run *r = NULL;
    if (rc == 0) {
        size_t off_t = (sizeof *r + 15) & ~(size_t)15;
        size_t off_v = off_t + (size_t)ns * sizeof(vq_tensor *);
        size_t off_e = off_v + (size_t)nrw * sizeof(vq_var *);
        size_t off_n = (off_e + (size_t)ns * sizeof(int) + 7) & ~(size_t)7;
        /* The plan's last finished run, if it kept one (the same size). */
        char *mem = (char *)atomic_load_explicit(&p->spare_run, memory_order_acquire);
        if (mem)
            atomic_store_explicit(&p->spare_run, NULL, memory_order_relaxed);
        else
            mem = vq__malloc(off_n + (size_t)ns * sizeof(struct vq__fail_note *));
        if (!mem) {
            rc = vq__fail(VQ_ENOMEM, "capture: out of memory for a segment run");
        } else {
            r = (struct run *)mem;
            *r = (struct run){.plan = p, .cache = c, .e = S->e, .nslots = ns,
                              .t = (vq_tensor **)(mem + off_t), .vars = (vq_var **)(mem + off_v),
                              .err = (int *)(mem + off_e)};
            r->note = (struct vq__fail_note **)(mem + off_n);
            memset(r->err, 0, (size_t)ns * sizeof(int));
            memcpy(r->t, S->slot, (size_t)ns * sizeof(vq_tensor *));
            /* (not vq_tensor_var: its cut would come back here) */
            for (int i = 0; i < nrw && rc == 0; i++)
                rc = vq__tensor_var(r->t[p->rw[i]], S->e, &r->vars[i]); /* ENOMEM only */
        }
    }
    if (rc == 0) {
        atomic_fetch_add_explicit(&p->refs, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
        vq_task t = {.fn = run_exec, .arg = r, .arg_free = run_free, .ctx = S->dev,
                     .reads = r->vars, .nreads = p->nreads, .writes = r->vars + p->nreads,
                     .nwrites = p->nwrites, .props = VQ_PROP_RUN_ON_FAILED,
                     .name = "capture_segment"};
        rc = held ? vq__push_held(S->e, &t, held) : vq_push(S->e, &t);
        if (rc < 0) { /* not run, arg_free not called */
            plan_unref(p);
            cache_unref(c);
        }
    }
    /* Only now may other threads find the tensors free (t->capture NULL):
     * a thread that found S there waited for our lock, and its work on
     * them comes after the push. The segment's references go (a storage
     * freed now is freed by an op ordered after the run's). */
    for (int i = 0; rc == 0 && i < nrw; i++) { /* pushed: the plan's reads and writes */
        vq_tensor *t = S->slot[p->rw[i]];
        atomic_store_explicit(&t->capture, NULL, memory_order_release);
        vq_tensor_release(t);
    }
    for (int s = 0; rc < 0 && s < ns; s++) {
        if (S->kind[s] != K_NEW_TEMP)
            atomic_store_explicit(&S->slot[s]->capture, NULL, memory_order_release);
        vq_tensor_release(S->slot[s]);
    }
    if (rc < 0) {
        /* Only out of memory: the recorded calls are lost; their outputs
         * stay as they were (their bytes uninitialized, as a failed push
         * leaves them). */
        free(r);
        if (!S->first_err)
            S->first_err = rc;
    } else {
        S->stats.segments_run++;
        S->stats.cuts[cause]++;
        S->stats.guard = end->hash;
    }
    state_reset_segment(S);
    if (c->nnodes > MAX_NODES) { /* drop the tree; runs in flight keep theirs */
        struct cache *fresh = cache_new();
        if (fresh) {
            S->cache = fresh;
            cache_unref(c);
            state_reset_segment(S);
        }
    }
    return rc;
}

static int seg_cut(struct state *S, int cause)
{
    return seg_cut_held(S, cause, NULL);
}

static void state_unref(struct state *S)
{
    pthread_mutex_lock(&states_lock);
    bool last = --S->refs == 0;
    pthread_mutex_unlock(&states_lock);
    if (!last)
        return;
    if (S->cache) /* a dead state's went with its engine */
        cache_unref(S->cache);
    free(S->slot);
    free(S->kind);
    free(S);
}

/* The thread lets go of S: out of the registry (no engine's free finds
 * it any more), then its reference. */
static void state_forget(struct state *S)
{
    pthread_mutex_lock(&states_lock);
    if (S->reg_prev)
        S->reg_prev->reg_next = S->reg_next;
    else
        registry = S->reg_next;
    if (S->reg_next)
        S->reg_next->reg_prev = S->reg_prev;
    pthread_mutex_unlock(&states_lock);
    state_unref(S);
}

/* Thread exit: what is still recorded is pushed (unless the engine went
 * first: vq_engine_free pushed it then), then the states go. */
static void states_free(void *arg)
{
    struct state *S = arg;
    while (S) {
        struct state *next = S->next;
        state_lock(S);
        if (!atomic_load_explicit(&S->dead, memory_order_relaxed))
            seg_cut(S, VQ_CAPTURE_CUT_END);
        S->active = false;
        state_unlock(S);
        state_forget(S);
        S = next;
    }
}

/* vq_engine_free's hook: ends every state open on e, whichever thread's,
 * before the engine drains (see the file head). One state per round: the
 * registry is scanned under states_lock, the state cut under its own lock
 * with states_lock let go (the lock order), and marked dead under both, so
 * the next round skips it. A state whose thread exits meanwhile is cut by
 * whichever of the two takes its lock first; the other finds nothing to
 * push. */
static void engine_freed(vq_engine *e)
{
    for (;;) {
        pthread_mutex_lock(&states_lock);
        struct state *S = registry;
        while (S && (S->e != e || atomic_load_explicit(&S->dead, memory_order_relaxed)))
            S = S->reg_next;
        if (S)
            S->refs++;
        pthread_mutex_unlock(&states_lock);
        if (!S)
            return;
        state_lock(S);
        if (!atomic_load_explicit(&S->dead, memory_order_relaxed)) {
            seg_cut(S, VQ_CAPTURE_CUT_END);
            S->active = false;
            pthread_mutex_lock(&states_lock);
            atomic_store_explicit(&S->dead, true, memory_order_relaxed);
            pthread_mutex_unlock(&states_lock);
            /* The tree's kept temporaries go now rather than at the thread's
             * exit; a run still in flight keeps the cache it holds. */
            cache_unref(S->cache);
            S->cache = NULL;
        }
        state_unlock(S);
        state_unref(S);
    }
}

static void states_key_make(void)
{
    pthread_key_create(&states_key, states_free);
    vq__engine_on_free(engine_freed);
}

/* hot path: the calling thread's live state for e (a dead one's engine
 * may have been freed and another made at its address) */
static struct state *state_find(vq_engine *e)
{
    for (struct state *S = my_states; S; S = S->next)
        if (S->e == e && !atomic_load_explicit(&S->dead, memory_order_relaxed))
            return S;
    return NULL;
}

/* The calling thread forgets its dead states (their engines are gone). */
static void states_prune(void)
{
    bool changed = false;
    for (struct state **p = &my_states; *p;) {
        struct state *S = *p;
        if (atomic_load_explicit(&S->dead, memory_order_relaxed)) {
            *p = S->next;
            state_forget(S);
            changed = true;
        } else {
            p = &S->next;
        }
    }
    if (changed)
        pthread_setspecific(states_key, my_states);
}

/* Cuts the segment that uses t, whoever's it is (a cut from outside it). */
static void cut_tensor(vq_tensor *t, int cause)
{
    pthread_mutex_lock(&states_lock);
    /* acquire: S was made by its thread before it claimed t (slot_add's
     * exchange); nothing else need order that with this thread. */
    struct state *S = atomic_load_explicit(&t->capture, memory_order_acquire);
    if (S)
        S->refs++;
    pthread_mutex_unlock(&states_lock);
    if (!S)
        return;
    /* A host read waits for the segment next: it runs it itself. */
    void *held = NULL;
    void **hold = cause == VQ_CAPTURE_CUT_HOST_READ ? &held : NULL;
    if (state_find(S->e) != S)
        cause = VQ_CAPTURE_CUT_THREAD;
    state_lock(S);
    if (atomic_load_explicit(&t->capture, memory_order_relaxed) == S)
        seg_cut_held(S, cause, hold);
    state_unlock(S);
    vq__push_release(S->e, held);
    state_unref(S);
}

static void hook_cut(vq_tensor *t, int cause)
{
    /* Not from inside an op: it may be running inside a push made under a
     * state's lock (the throttle runs ready ops in the pusher). */
    if (vq_thread_in_op())
        return;
    cut_tensor(t, cause == VQ__CUT_VAR ? VQ_CAPTURE_CUT_VAR : VQ_CAPTURE_CUT_HOST_READ);
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
        seg_cut(S, VQ_CAPTURE_CUT_SIZE);
    return 0;
}

/* Records one call into S's segment (S locked, every tensor of the call
 * either S's or no capture's). Returns 0, the call's error, or
 * VQ__CAPTURE_EAGER after cutting the segment (the call runs eagerly). */
static int record(struct state *S, const char *type, vq_tensor *const *in, int nin,
                  vq_tensor **out, int nout, const vq_attr *attrs, int nattrs,
                  const vq_ctx *dev_hint)
{
    vq_engine *e = S->e;
    bool simple = type && nin >= 0 && nout >= 0 && nin <= VQ__MAX_SLOTS &&
                  nout <= VQ__MAX_SLOTS && (!nin || in) && (!nout || out) &&
                  (nattrs == 0 || (nattrs > 0 && attrs));
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
    vq__meta om_buf[VQ__MAX_SLOTS];
    _Alignas(16) unsigned char params[VQ__MAX_PARAMS];
    if (!simple) {
        /* Only a call the check refuses gets here (it fails as eagerly). */
        const vq__op_def *d;
        vq_ctx dv;
        int rc = vq__op_call_check(e, type, in, nin, out, nout, attrs, nattrs, &d, om_buf, params,
                                   &dv);
        if (rc < 0)
            return rc;
        seg_cut(S, VQ_CAPTURE_CUT_FALLBACK);
        return VQ__CAPTURE_EAGER;
    }
    if (S->nops > 0 && !same_dev(dev, S->dev))
        seg_cut(S, VQ_CAPTURE_CUT_DEVICE);
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
    if (hit) {
        S->stats.op_hits++;
    } else {
        const vq__op_def *d;
        vq_ctx dv;
        rc = vq__op_call_check(e, type, in, nin, out, nout, attrs, nattrs, &d, om_buf, params,
                               &dv);
        /* No synchronous kernel to replay; or a random op drawing from the
         * process's default generator, whose key is taken per call (a
         * replay would repeat one draw). */
        if (rc == 0 && ((d->kernel_async && dev.kind == VQ_DEV_CPU) || (d->flags & VQ__CONTROL) ||
                        vq__draws_default(d, params)))
            rc = VQ__CAPTURE_EAGER;
        if (rc) {
            slots_rollback(S, n0);
            if (rc == VQ__CAPTURE_EAGER)
                seg_cut(S, VQ_CAPTURE_CUT_FALLBACK);
            return rc;
        }
        vq__meta metas[2 * VQ__MAX_SLOTS];
        for (int i = 0; i < nin; i++)
            meta_of(&metas[i], in[i]);
        memcpy(metas + nin, om_buf, (size_t)nout * sizeof *metas);
        hit = node_new(S->cache, S->at, d, dev, nin, nout, wire, fresh, metas, attrs, nattrs,
                       params);
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
static int record_known(struct state *S, struct node *n, vq_tensor *const *in, int nin,
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

static int hook_op_run(vq_engine *e, const char *type, vq_tensor *const *in, int nin,
                       vq_tensor **out, int nout, const vq_attr *attrs, int nattrs)
{
    /* Calls from inside ops run eagerly and cut nothing (see hook_cut). */
    if (vq_thread_in_op())
        return VQ__CAPTURE_EAGER;
    struct state *S = state_find(e);
    if (S && S->active) {
        /* Recorded work of others on these tensors is pushed first (their
         * calls came earlier): record finds it when it claims the tensor
         * (FOREIGN), then the call is recorded again. */
        for (;;) {
            state_lock(S);
            int rc = record(S, type, in, nin, out, nout, attrs, nattrs, NULL);
            vq_tensor *foreign = S->foreign;
            S->foreign = NULL;
            state_unlock(S);
            if (rc != FOREIGN)
                return rc;
            cut_tensor(foreign, VQ_CAPTURE_CUT_THREAD); /* claimed by another segment */
        }
    }
    /* Not capturing: recorded work of others on these tensors is pushed
     * before the call runs eagerly. */
    for (int i = 0; i < nin + nout; i++) {
        vq_tensor *t = i < nin ? (in ? in[i] : NULL) : (out ? out[i - nin] : NULL);
        if (t && atomic_load_explicit(&t->capture, memory_order_relaxed))
            cut_tensor(t, VQ_CAPTURE_CUT_THREAD);
    }
    return VQ__CAPTURE_EAGER;
}

static const vq__capture_hooks hooks = {.op_run = hook_op_run, .cut = hook_cut};

/* ---- public ---- */

VQ_API int vq_capture_begin(vq_engine *e)
{
    if (!e)
        return vq__fail(VQ_EINVAL, "vq_capture_begin: engine is NULL");
    struct state *S = state_find(e);
    if (S && S->active)
        return vq__fail(VQ_EINVAL, "vq_capture_begin: this thread already captures on the engine");
    if (!S) {
        states_prune();
        pthread_once(&states_once, states_key_make);
        S = vq__calloc(1, sizeof *S);
        if (!S || !(S->cache = cache_new())) {
            free(S);
            return vq__fail(VQ_ENOMEM, "vq_capture_begin: out of memory");
        }
        atomic_flag_clear(&S->lock.flag);
        atomic_init(&S->dead, false);
        S->e = e;
        S->refs = 1;
        state_reset_segment(S);
        S->next = my_states;
        my_states = S;
        pthread_setspecific(states_key, my_states);
        pthread_mutex_lock(&states_lock);
        S->reg_next = registry;
        if (registry)
            registry->reg_prev = S;
        registry = S;
        pthread_mutex_unlock(&states_lock);
        atomic_store_explicit(&vq__capture, &hooks, memory_order_release);
    }
    state_lock(S);
    S->active = true;
    S->first_err = 0;
    state_unlock(S);
    return 0;
}

VQ_API int vq_capture_end(vq_engine *e)
{
    struct state *S = e ? state_find(e) : NULL;
    if (!S || !S->active)
        return vq__fail(VQ_EINVAL, "vq_capture_end: this thread does not capture on the engine");
    state_lock(S);
    void *held = NULL;
    seg_cut_held(S, VQ_CAPTURE_CUT_END, &held);
    S->active = false;
    int rc = S->first_err;
    state_unlock(S);
    vq__push_release(e, held);
    return rc;
}

VQ_API int vq_capture_get_stats(vq_engine *e, vq_capture_stats *out)
{
    if (!e || !out)
        return vq__fail(VQ_EINVAL, "vq_capture_get_stats: NULL argument");
    struct state *S = state_find(e);
    if (!S) {
        memset(out, 0, sizeof *out);
        return 0;
    }
    state_lock(S);
    *out = S->stats;
    state_unlock(S);
    return 0;
}

/* ---- imperative autodiff ---- */

/* What vq_capture_backward appends after a node for one (loss, params):
 * the gradient ops with their tensors named by number: below base, a slot
 * of the segment; from base on, the k-th new tensor the recipe makes. */
struct recipe {
    struct recipe *next;
    int loss;
    int nparams;
    int *params;       /* slots */
    int *grads;        /* per param: a tensor number, or -1 (no gradient) */
    int base;          /* slots of the segment when recorded */
    int nops;
    struct rop {
        char *type;
        int nin, nout;
        int *in, *out; /* tensor numbers; an output number first written here is made by it */
        vq_attr *attrs;
        int nattrs;
        struct node *node; /* the node its last replay matched (record_known) */
    } *ops;
    int nnew;
};

static void recipes_free(struct recipe *r)
{
    while (r) {
        struct recipe *next = r->next;
        for (int k = 0; r->ops && k < r->nops; k++) {
            free(r->ops[k].type);
            free(r->ops[k].in);
            attrs_free(r->ops[k].attrs, r->ops[k].nattrs);
        }
        free(r->ops);
        free(r->params);
        free(r->grads);
        free(r);
        r = next;
    }
}

/* The segment as a program: var "t<s>" per slot (params persistable), one
 * op per recorded call; then vq_append_backward; the ops it appended,
 * turned into a recipe. */
static int recipe_make(struct state *S, int loss, const int *params, int nparams,
                       struct recipe **out)
{
    vq_program *p = NULL;
    struct recipe *rc_r = NULL;
    char name[32];
    int ns = S->nslots, rc = vq_program_new(&p);
    bool *is_param = vq__calloc((size_t)ns + 1, sizeof *is_param);
    struct node **ops = vq__calloc((size_t)S->nops + 1, sizeof *ops);
    if (rc == 0 && (!is_param || !ops))
        rc = vq__fail(VQ_ENOMEM, "vq_capture_backward: out of memory");
    for (int i = 0; i < nparams; i++)
        if (is_param)
            is_param[params[i]] = true;
    for (int s = 0; rc == 0 && s < ns; s++) {
        snprintf(name, sizeof name, "t%d", s);
        vq_tensor *t = S->slot[s];
        rc = vq_program_add_var(p, 0, name, t->dtype, t->ndim, t->shape, is_param[s]);
    }
    int k = S->nops;
    for (struct node *n = S->at; n->parent; n = n->parent)
        ops[--k] = n;
    for (k = 0; rc == 0 && k < S->nops; k++) {
        const struct node *n = ops[k];
        char names[2 * VQ__MAX_SLOTS][16];
        const char *ptr[2 * VQ__MAX_SLOTS];
        for (int i = 0; i < n->nin + n->nout; i++) {
            snprintf(names[i], sizeof names[i], "t%d", n->wire[i]);
            ptr[i] = names[i];
        }
        rc = vq_program_add_op(p, 0, n->def->type, ptr, n->nin, ptr + n->nin, n->nout, n->attrs,
                               n->nattrs);
        if (rc > 0)
            rc = 0;
    }
    int nfwd = rc == 0 ? p->blocks[0].nops : 0;
    /* A loss that depends on no param gets no gradient ops (and every
     * param NULL), where vq_append_backward would refuse it. */
    bool *dep = is_param;
    for (k = 0; rc == 0 && k < S->nops; k++) {
        const struct node *n = ops[k];
        bool any = false;
        for (int i = 0; i < n->nin; i++)
            any |= dep[n->wire[i]];
        for (int j = 0; any && j < n->nout; j++)
            dep[n->wire[n->nin + j]] = true;
    }
    bool none = rc == 0 && !dep[loss];
    snprintf(name, sizeof name, "t%d", loss);
    if (rc == 0 && !none)
        rc = vq_append_backward(p, name, NULL, 0);
    if (rc >= 0) {
        rc = 0;
        rc_r = vq__calloc(1, sizeof *rc_r);
        if (!rc_r)
            rc = vq__fail(VQ_ENOMEM, "vq_capture_backward: out of memory");
    }
    /* Tensor numbers: slots keep theirs; vars the backward declared get
     * ns, ns + 1, ... in the order the recipe first writes them. */
    int *num = NULL;
    if (rc == 0 && !(num = vq__malloc(((size_t)p->nvars + 1) * sizeof *num)))
        rc = vq__fail(VQ_ENOMEM, "vq_capture_backward: out of memory");
    for (int v = 0; rc == 0 && v < p->nvars; v++) {
        num[v] = -1;
        if (p->vars[v].name[0] == 't' && !strchr(p->vars[v].name, '@'))
            num[v] = atoi(p->vars[v].name + 1);
    }
    if (rc == 0) {
        rc_r->base = ns;
        rc_r->loss = loss;
        rc_r->nparams = nparams;
        rc_r->nops = p->blocks[0].nops - nfwd;
        rc_r->ops = vq__calloc((size_t)rc_r->nops + 1, sizeof *rc_r->ops);
        rc_r->params = vq__malloc(((size_t)nparams + 1) * sizeof(int));
        rc_r->grads = vq__malloc(((size_t)nparams + 1) * sizeof(int));
        if (!rc_r->ops || !rc_r->params || !rc_r->grads)
            rc = vq__fail(VQ_ENOMEM, "vq_capture_backward: out of memory");
        else
            memcpy(rc_r->params, params, (size_t)nparams * sizeof(int));
    }
    int next = ns;
    for (k = 0; rc == 0 && k < rc_r->nops; k++) {
        const vq__pop *op = &p->ops[p->blocks[0].ops[nfwd + k]];
        struct rop *ro = &rc_r->ops[k];
        bool ok;
        ro->type = vq__strdup(op->type);
        ro->nin = op->nin;
        ro->nout = op->nout;
        ro->in = vq__malloc(((size_t)op->nin + op->nout + 1) * sizeof(int));
        ro->attrs = attrs_copy(op->attrs, op->nattrs, &ok);
        ro->nattrs = op->nattrs;
        if (!ro->type || !ro->in || !ok) {
            rc = vq__fail(VQ_ENOMEM, "vq_capture_backward: out of memory");
            break;
        }
        ro->out = ro->in + op->nin;
        for (int i = 0; i < op->nin && rc == 0; i++) {
            ro->in[i] = num[op->in[i]];
            if (ro->in[i] < 0)
                rc = vq__fail(VQ_EINVAL, "vq_capture_backward: gradient op %s reads %s before "
                                         "anything writes it",
                              op->type, p->vars[op->in[i]].name);
        }
        for (int j = 0; j < op->nout && rc == 0; j++) {
            int v = op->out[j];
            if (num[v] < 0)
                num[v] = next++;
            else if (num[v] < ns)
                rc = vq__fail(VQ_ENOSYS, "vq_capture_backward: gradient op %s writes %s, a "
                                         "tensor of the segment",
                              op->type, p->vars[v].name);
            ro->out[j] = num[v];
        }
    }
    for (int i = 0; rc == 0 && i < nparams; i++) {
        snprintf(name, sizeof name, "t%d@GRAD", params[i]);
        int v = vq__program_find_var(p, name);
        rc_r->grads[i] = v >= 0 ? num[v] : -1;
    }
    if (rc == 0)
        rc_r->nnew = next - ns;
    free(num);
    free(is_param);
    free(ops);
    vq_program_free(p);
    if (rc < 0) {
        recipes_free(rc_r);
        return rc;
    }
    *out = rc_r;
    return 0;
}

VQ_API int vq_capture_backward(vq_engine *e, vq_tensor *loss, vq_tensor *const *params,
                               int nparams, vq_tensor **grads)
{
    if (!e || !loss || nparams < 0 || (nparams && (!params || !grads)))
        return vq__fail(VQ_EINVAL, "vq_capture_backward: bad argument");
    for (int i = 0; i < nparams; i++) {
        grads[i] = NULL;
        if (!params[i])
            return vq__fail(VQ_EINVAL, "vq_capture_backward: param %d is NULL", i);
    }
    struct state *S = state_find(e);
    if (!S || !S->active)
        return vq__fail(VQ_EINVAL,
                        "vq_capture_backward: this thread does not capture on the engine");
    state_lock(S);
    int rc = 0;
    int ploss = atomic_load(&loss->capture) == S ? loss->capture_slot : -1;
    if (ploss < 0 || S->kind[ploss] == K_EXT_READ)
        rc = vq__fail(VQ_EINVAL, "vq_capture_backward: the loss is not written by the calls "
                                 "recorded since the last cut");
    int pslot[VQ__MAX_SLOTS];
    int *ps = nparams <= VQ__MAX_SLOTS ? pslot : vq__malloc((size_t)nparams * sizeof(int));
    if (!ps && rc == 0)
        rc = vq__fail(VQ_ENOMEM, "vq_capture_backward: out of memory");
    for (int i = 0; i < nparams && rc == 0; i++) {
        ps[i] = atomic_load(&params[i]->capture) == S ? params[i]->capture_slot : -1;
        if (ps[i] >= 0 && S->kind[ps[i]] != K_EXT_READ)
            rc = vq__fail(VQ_EINVAL, "vq_capture_backward: param %d is written by the segment",
                          i);
    }
    /* The recipe for this node, loss and params, or a new one. */
    struct recipe *r = NULL;
    for (r = rc == 0 ? S->at->recipes : NULL; r; r = r->next)
        if (r->loss == ploss && r->nparams == nparams && r->base == S->nslots &&
            !memcmp(r->params, ps, (size_t)nparams * sizeof(int)))
            break;
    if (rc == 0 && !r) {
        /* Params the segment never read get no gradient: mark them out. */
        int live[VQ__MAX_SLOTS], nlive = 0;
        int *lp = nparams <= VQ__MAX_SLOTS ? live : vq__malloc((size_t)nparams * sizeof(int));
        if (!lp)
            rc = vq__fail(VQ_ENOMEM, "vq_capture_backward: out of memory");
        for (int i = 0; rc == 0 && i < nparams; i++)
            if (ps[i] >= 0)
                lp[nlive++] = ps[i];
        if (rc == 0 && (rc = recipe_make(S, ploss, lp, nlive, &r)) == 0) {
            /* recipe_make's params are the live ones: map back to all */
            int *grads_all = vq__malloc(((size_t)nparams + 1) * sizeof(int));
            int *params_all = vq__malloc(((size_t)nparams + 1) * sizeof(int));
            if (!grads_all || !params_all) {
                free(grads_all);
                free(params_all);
                recipes_free(r);
                r = NULL;
                rc = vq__fail(VQ_ENOMEM, "vq_capture_backward: out of memory");
            } else {
                for (int i = 0, l = 0; i < nparams; i++) {
                    params_all[i] = ps[i];
                    grads_all[i] = ps[i] >= 0 ? r->grads[l++] : -1;
                }
                free(r->grads);
                free(r->params);
                r->grads = grads_all;
                r->params = params_all;
                r->nparams = nparams;
                r->next = S->at->recipes;
                S->at->recipes = r;
            }
        }
        if (lp != live)
            free(lp);
    }
    /* Replay: every gradient op recorded like a caller's call, except that
     * made[] holds no references (the segment's keep the new tensors: no
     * cut comes before the replay's end) and the size cut waits for it. */
    vq_tensor *made_buf[64], **made = NULL; /* on the stack for most steps */
    if (rc == 0 && r->nnew && r->nnew <= 64) {
        made = made_buf;
        memset(made, 0, (size_t)r->nnew * sizeof *made);
    } else if (rc == 0 && r->nnew && !(made = vq__calloc((size_t)r->nnew, sizeof *made))) {
        rc = vq__fail(VQ_ENOMEM, "vq_capture_backward: out of memory");
    }
    S->replaying = true;
    for (int k = 0; rc == 0 && k < r->nops; k++) {
        struct rop *ro = &r->ops[k];
        vq_tensor *in[VQ__MAX_SLOTS], *outs[VQ__MAX_SLOTS];
        for (int i = 0; i < ro->nin; i++)
            in[i] = ro->in[i] < r->base ? S->slot[ro->in[i]] : made[ro->in[i] - r->base];
        for (int j = 0; j < ro->nout; j++)
            outs[j] = made[ro->out[j] - r->base];
        rc = record_known(S, ro->node, in, ro->nin, outs, ro->nout);
        if (rc == 1) {
            rc = record(S, ro->type, in, ro->nin, outs, ro->nout, ro->attrs, ro->nattrs, &S->dev);
            ro->node = rc == 0 ? S->last : NULL;
        }
        if (rc == VQ__CAPTURE_EAGER) /* not reached: the gradient ops replay */
            rc = vq__fail(VQ_ENOSYS, "vq_capture_backward: %s cannot be recorded", ro->type);
        for (int j = 0; rc == 0 && j < ro->nout; j++)
            made[ro->out[j] - r->base] = outs[j];
    }
    S->replaying = false;
    for (int i = 0; rc == 0 && i < nparams; i++)
        grads[i] = r->grads[i] >= 0 ? vq_tensor_retain(made[r->grads[i] - r->base]) : NULL;
    if (S->nops >= VQ_CAPTURE_MAX_OPS)
        seg_cut(S, VQ_CAPTURE_CUT_SIZE);
    if (made != made_buf)
        free(made);
    if (ps != pslot)
        free(ps);
    state_unlock(S);
    return rc;
}
