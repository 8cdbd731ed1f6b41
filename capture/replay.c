/* Replay (capture.c's head says how it fits): at a cut, the segment's
 * path ends in a plan (the ops in order and which slots the engine op
 * reads and writes, kept per node in an LRU), and one engine op per
 * segment replays the recorded calls' kernels from it. */
#include "capture_internal.h"

#include "engine_services.h" /* a var's carried failure */

#include <stdlib.h>
#include <string.h>

#define MAX_PLANS 64    /* plans kept per state (LRU) */
#define MAX_NODES 65536 /* nodes per cache before it is dropped and rebuilt */

struct plan_temp {
    int k, j, s; /* call, its output, the slot (see plan->temps) */
};

struct plan {
    struct node *end;
    struct plan *next_at_end;
    struct plan *lru_prev, *lru_next;
    atomic_int refs; /* the cache's one (until evicted) + runs in flight */
    int nslots;
    unsigned char *kinds; /* per slot, K_EXT_* or K_NEW_KEEP / K_NEW_TEMP */
    int nops;
    struct node **ops;
    int *rw; /* slots read (nreads), then written (nwrites) */
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
    vq_var **vars; /* plan->rw's */
};

/* ---- plans and the cache ---- */

static void plan_unref(struct plan *p)
{
    if (atomic_fetch_sub_explicit(&p->refs, 1, memory_order_acq_rel) == 1) {
        free(atomic_load_explicit(&p->spare_run, memory_order_acquire));
        free(p); /* kinds, ops, rw and temps live in the same block */
    }
}

void vq__capture_cache_unref(struct cache *c)
{
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (struct plan *p = c->lru_head, *next; p; p = next) {
        next = p->lru_next;
        plan_unref(p);
    }
    vq__capture_recipes_free(c->root.recipes);
    for (struct node *n = c->all, *next; n; n = next) {
        next = n->all_next;
        vq__capture_attrs_free(n->attrs, n->nattrs);
        vq__capture_recipes_free(n->recipes);
        for (int j = 0; j < n->nout; j++)
            vq_tensor_release(atomic_load_explicit(&n->spare[j], memory_order_acquire));
        free(n);
    }
    free(c);
}

struct cache *vq__capture_cache_new(void)
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

/* ---- the engine's error record ----
 *
 * A segment is one engine op, but eager calls fail tensor by tensor. The
 * run records errors per slot and, before its op completes, sets them on
 * the vars it writes (vq__var_fail), which is what vq__op_finish does for a
 * failed op's writes: the op holds write access to them, so the queue
 * orders this store with every other access, as it orders the engine's
 * own. */
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
            vq__kcall kc = {.def = n->def,
                            .params = n->params,
                            .in = in,
                            .nin = n->nin,
                            .out = out,
                            .nout = n->nout,
                            .x = x};
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
    vq__capture_cache_unref(c);
}

/* Pushes the segment of S as one engine op and starts an empty one.
 * Called with S locked. Returns 0 or the push's error. With held, the
 * push is a held one (vq__push_held): the caller, about to wait for the
 * segment, lets it go with vq__push_release after unlocking S, and then
 * runs it itself when it is ready. */
int vq__capture_seg_cut_held(struct state *S, int cause, void **held)
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
            *r = (struct run){.plan = p,
                              .cache = c,
                              .e = S->e,
                              .nslots = ns,
                              .t = (vq_tensor **)(mem + off_t),
                              .vars = (vq_var **)(mem + off_v),
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
        vq_task t = {.fn = run_exec,
                     .arg = r,
                     .arg_free = run_free,
                     .ctx = S->dev,
                     .reads = r->vars,
                     .nreads = p->nreads,
                     .writes = r->vars + p->nreads,
                     .nwrites = p->nwrites,
                     .props = VQ_PROP_RUN_ON_FAILED,
                     .name = "capture_segment"};
        rc = held ? vq__push_held(S->e, &t, held) : vq_push(S->e, &t);
        if (rc < 0) { /* not run, arg_free not called */
            plan_unref(p);
            vq__capture_cache_unref(c);
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
        struct cache *fresh = vq__capture_cache_new();
        if (fresh) {
            S->cache = fresh;
            vq__capture_cache_unref(c);
            state_reset_segment(S);
        }
    }
    return rc;
}

int vq__capture_seg_cut(struct state *S, int cause)
{
    return vq__capture_seg_cut_held(S, cause, NULL);
}
