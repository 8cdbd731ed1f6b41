/* cond and while in the executor: their checks at preparation, and their
 * execution as engine ops (the plan's frames are described in plan.h).
 *
 * A control op is pushed as two halves. Its begin op (sync) reads the
 * predicate and the inputs, reads the value of the predicate on the host,
 * and pushes the ops of the block that runs: the taken branch, or the
 * first iteration of the body, followed by the body's step op. Its end op
 * (async) reads the same vars and writes the outputs; it stays in flight
 * until the block's exit op says all that was pushed is done, so the ops
 * after the control op that read its outputs, or write what its blocks
 * read, wait for exactly that.
 *
 * A while body runs in a ring of frames: iteration i in frame i % N, its
 * body inputs bound to the outputs iteration i - 1 left in the previous
 * frame. The step op of iteration i reads only the body's predicate: once
 * it is computed, the step pushes iteration i + 1 (or the exit), while the
 * rest of iteration i may still run. Iteration i + 1 waits, through the
 * engine vars, only for the values it reads: that is what lets iterations
 * overlap, as TensorFlow's parallel_iterations does. The exit op writes
 * every var of every frame, so it runs after all of them; it takes the
 * last iteration's outputs and empties the frames.
 *
 * No op waits on a worker for a predicate: the begin and step ops are
 * pushed behind the ops that compute it, and read it when they run. */
#include "plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- preparation ---- */

static const vq_attr *attr_get(const vq__pop *src, const char *name)
{
    for (int i = 0; i < src->nattrs; i++)
        if (!strcmp(src->attrs[i].name, name))
            return &src->attrs[i];
    return NULL;
}

static int ctl_fail(const struct pop *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int ctl_fail(const struct pop *t, const char *fmt, ...)
{
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return vq__pop_error(t, vq__fail(VQ_EINVAL, "%s", msg));
}

/* Block b is nested in block outer (or is it). */
static bool block_within(const vq_program *p, int b, int outer)
{
    for (; b >= 0; b = p->blocks[b].parent)
        if (b == outer)
            return true;
    return false;
}

/* The block attribute name: a child of t's block that no other op uses. */
static int take_block(struct walk *w, struct pop *t, const char *name, int *out)
{
    const vq_program *p = w->pl->prog;
    int64_t b = attr_get(t->src, name)->i;
    if (b <= 0 || b >= p->nblocks)
        return ctl_fail(t, "%s %lld: no such block (the program has blocks 1..%d besides "
                           "block 0)",
                        name, (long long)b, p->nblocks - 1);
    if (p->blocks[b].parent != t->block)
        return ctl_fail(t, "%s %lld is not a child of block %d (its parent is block %d)", name,
                        (long long)b, t->block, p->blocks[b].parent);
    if (w->block_user[b] >= 0) {
        const struct pop *o = &w->pl->ops[w->block_user[b]];
        return ctl_fail(t, "%s %lld is already the block of op %d of block %d", name,
                        (long long)b, o->index, o->block);
    }
    for (int v = 0; v < p->nvars; v++)
        if (p->vars[v].block == b && p->vars[v].persistable)
            return ctl_fail(t, "block %lld declares var %s persistable: persistable vars "
                               "belong to block 0",
                            (long long)b, p->vars[v].name);
    w->block_user[b] = (int)(t->src - p->ops);
    *out = (int)b;
    return 0;
}

/* The vars named by strings attribute name, each visible from block b. */
static int take_names(struct walk *w, struct pop *t, const char *name, int want, int b,
                      int **out)
{
    const vq_program *p = w->pl->prog;
    const vq_attr *a = attr_get(t->src, name);
    if (a->n != want)
        return ctl_fail(t, "%s names %d vars; the op has %d %s", name, a->n, want,
                        strcmp(name, "body_inputs") ? "outputs" : "loop-carried inputs X");
    *out = malloc((size_t)(want ? want : 1) * sizeof **out);
    if (!*out)
        return vq__fail(VQ_ENOMEM, "out of memory");
    for (int k = 0; k < want; k++) {
        int v = vq__program_find_var(p, a->strings[k]);
        if (v < 0)
            return ctl_fail(t, "%s[%d]: block %d has no var %s", name, k, b, a->strings[k]);
        if (!block_within(p, b, p->vars[v].block))
            return ctl_fail(t, "%s[%d]: var %s is declared in block %d, which block %d does "
                               "not see",
                            name, k, a->strings[k], p->vars[v].block, b);
        (*out)[k] = v;
    }
    return 0;
}

static int check_predicate(const struct pop *t, const char *what, const char *name,
                           const vq__meta *m)
{
    bool scalar = m->ndim == 0 || (m->ndim == 1 && (m->shape[0] == 1 || m->shape[0] < 0));
    if (m->dtype == VQ_BOOL && scalar)
        return 0;
    char s[140];
    vq__meta_str(s, sizeof s, m);
    return ctl_fail(t, "%s %s is %s; a predicate is a bool scalar (shape [] or [1])", what,
                    name, s);
}

/* Output k of block b: written there, or a var the block sees from
 * outside (read by the exit, so held like the block's own reads). */
static int block_output(struct walk *w, struct pop *t, const char *attr, int b, int k, int v,
                        struct varset *ext)
{
    const vq_program *p = w->pl->prog;
    if (!w->rec[v].has)
        return ctl_fail(t, "%s[%d]: var %s has no value at the end of block %d", attr, k,
                        p->vars[v].name, b);
    if (p->vars[v].block != b)
        return vq__varset_add(ext, v);
    (*w->rec[v].owner)++; /* the exit takes it */
    return 0;
}

static int walk_cond(struct walk *w, struct pop *t, struct ctl_info *ci, struct varset *ext)
{
    struct plan *pl = w->pl;
    const vq_program *p = pl->prog;
    static const char *const blk_attr[2] = {"then_block", "else_block"};
    static const char *const out_attr[2] = {"then_outputs", "else_outputs"};
    int rc;
    for (int i = 0; i < 2; i++)
        if ((rc = take_block(w, t, blk_attr[i], &ci->blocks[i])) != 0)
            return rc;
    for (int i = 0; i < 2; i++) {
        if ((rc = take_names(w, t, out_attr[i], ci->nouts, ci->blocks[i], &ci->outs[i])) != 0 ||
            (rc = vq__walk_block(w, ci->blocks[i], ext)) != 0)
            return rc;
        for (int k = 0; k < ci->nouts; k++)
            if ((rc = block_output(w, t, out_attr[i], ci->blocks[i], k, ci->outs[i][k], ext)))
                return rc;
    }
    for (int k = 0; k < ci->nouts; k++) {
        const vq__meta *a = &pl->vars[ci->outs[0][k]].meta, *b = &pl->vars[ci->outs[1][k]].meta;
        struct pvar *o = &pl->vars[t->src->out[k]];
        char sa[140], sb[140];
        if (!vq__meta_compatible(a, b)) {
            vq__meta_str(sa, sizeof sa, a);
            vq__meta_str(sb, sizeof sb, b);
            return ctl_fail(t, "output %d: then_outputs[%d] %s is %s, else_outputs[%d] %s is %s",
                            k, k, p->vars[ci->outs[0][k]].name, sa, k,
                            p->vars[ci->outs[1][k]].name, sb);
        }
        if (!vq__meta_compatible(a, &o->meta)) {
            vq__meta_str(sa, sizeof sa, a);
            vq__meta_str(sb, sizeof sb, &o->meta);
            return ctl_fail(t, "output Out (slot %d) var %s: the branches give %s, declared %s",
                            k, p->vars[t->src->out[k]].name, sa, sb);
        }
        for (int d = 0; d < o->meta.ndim; d++) {
            if (o->meta.shape[d] >= 0 && (a->shape[d] < 0 || b->shape[d] < 0))
                /* the ops after it are prepared for the declared dim */
                return ctl_fail(t, "output Out (slot %d) var %s: dim %d is declared %lld but "
                                   "a branch gives it unknown (declare it -1)",
                                k, p->vars[t->src->out[k]].name, d,
                                (long long)o->meta.shape[d]);
            if (o->meta.shape[d] < 0 && a->shape[d] == b->shape[d])
                o->meta.shape[d] = a->shape[d];
        }
    }
    return 0;
}

/* Readers of the value iteration i leaves for input k, counted when it is
 * written: the next iteration's, or one for the exit when there are none. */
static int carry_count(const struct ctl_info *ci, int k)
{
    /* a saving loop's record op reads each iteration's inputs too */
    return (ci->carry_readers[k] ? ci->carry_readers[k] : 1) + ci->save;
}

/* A while's autodiff extensions: save_carries, or replay_of with
 * replay_inputs (vars of the body bound to the saved values). */
static int walk_replay(struct walk *w, struct pop *t, struct ctl_info *ci, int body)
{
    struct plan *pl = w->pl;
    const vq_program *p = pl->prog;
    const vq_attr *sv = attr_get(t->src, "save_carries"), *ro = attr_get(t->src, "replay_of");
    ci->save = sv && sv->i;
    ci->replay_of = ro ? (int)ro->i : -1;
    if (ci->replay_of < 0)
        return 0;
    if (ci->replay_of >= t->index)
        return ctl_fail(t, "replay_of %d is not an earlier op of block %d", ci->replay_of,
                        t->block);
    const struct pop *f = &pl->ops[p->blocks[t->block].ops[ci->replay_of]];
    if (!f->ctl || !f->ctl->is_while || !f->ctl->save)
        return ctl_fail(t, "replay_of %d is not a while with save_carries", ci->replay_of);
    ci->nreplay = f->ctl->nouts;
    ci->replay_readers = vq__calloc((size_t)ci->nreplay + 1, sizeof *ci->replay_readers);
    if (!ci->replay_readers)
        return vq__fail(VQ_ENOMEM, "out of memory");
    const vq_attr *ri = attr_get(t->src, "replay_inputs");
    if (!ri)
        return ctl_fail(t, "replay_of needs replay_inputs");
    int rc = take_names(w, t, "replay_inputs", ci->nreplay, body, &ci->replay_in);
    for (int k = 0; k < ci->nreplay && rc == 0; k++) {
        int v = ci->replay_in[k];
        const vq__meta *want = &pl->vars[f->ctl->body_in[k]].meta;
        if (p->vars[v].block != body || w->rec[v].has ||
            !vq__meta_compatible(want, &pl->vars[v].meta))
            return ctl_fail(t, "replay_inputs[%d]: var %s must be a var of the body, neither a "
                               "body input nor written, shaped like the saved input",
                            k, p->vars[v].name);
        w->rec[v].has = true;
        w->rec[v].owner = &ci->replay_readers[k];
        w->rec[v].used = true;
    }
    return rc;
}

/* A while's stack_outputs, after its body was walked: vars the body
 * writes (none a body input, none twice), and the outputs they become,
 * each [iterations, the var's dims]. */
static int walk_stack(struct walk *w, struct pop *t, struct ctl_info *ci, int body)
{
    struct plan *pl = w->pl;
    const vq_program *p = pl->prog;
    if (ci->nstack == 0)
        return 0;
    int rc = take_names(w, t, "stack_outputs", ci->nstack, body, &ci->stack);
    for (int s = 0; s < ci->nstack && rc == 0; s++) {
        int v = ci->stack[s];
        bool is_input = false, twice = false;
        for (int j = 0; j < ci->nouts; j++)
            is_input |= ci->body_in[j] == v;
        for (int j = 0; j < s; j++)
            twice |= ci->stack[j] == v;
        if (p->vars[v].block != body || is_input || !w->rec[v].has)
            return ctl_fail(t,
                            "stack_outputs[%d]: var %s is not written by the body (block "
                            "%d); pass a value through with an op",
                            s, p->vars[v].name, body);
        if (twice)
            return ctl_fail(t, "stack_outputs names var %s twice", p->vars[v].name);
        const vq__meta *m = &pl->vars[v].meta;
        int j = ci->nouts + s;
        struct pvar *o = &pl->vars[t->src->out[j]];
        char sa[140], sb[140];
        vq__meta want = {.dtype = m->dtype, .ndim = m->ndim + 1};
        want.shape[0] = o->meta.ndim > 0 ? o->meta.shape[0] : -1; /* the iterations */
        if (m->ndim + 1 > VQ_MAX_DIMS)
            return ctl_fail(t, "stack_outputs[%d]: var %s has %d dims; stacked, more than %d", s,
                            p->vars[v].name, m->ndim, VQ_MAX_DIMS);
        memcpy(want.shape + 1, m->shape, (size_t)m->ndim * sizeof m->shape[0]);
        if (!vq__meta_compatible(&want, &o->meta)) {
            want.shape[0] = -1;
            vq__meta_str(sa, sizeof sa, &want);
            vq__meta_str(sb, sizeof sb, &o->meta);
            return ctl_fail(t,
                            "output Out (slot %d) var %s: stack_outputs[%d] %s gives %s, "
                            "declared %s",
                            j, p->vars[t->src->out[j]].name, s, p->vars[v].name, sa, sb);
        }
        for (int d = 1; d < o->meta.ndim; d++)
            if (o->meta.shape[d] < 0)
                o->meta.shape[d] = m->shape[d - 1];
    }
    return rc;
}

static int walk_while(struct walk *w, struct pop *t, struct ctl_info *ci, struct varset *ext)
{
    struct plan *pl = w->pl;
    const vq_program *p = pl->prog;
    const vq__pop *src = t->src;
    int rc, body;
    if ((rc = take_block(w, t, "body_block", &body)) != 0)
        return rc;
    ci->blocks[0] = body;
    const vq_attr *mi = attr_get(src, "max_iters");
    ci->max_iters = mi ? mi->i : -1;
    if (ci->max_iters < -1)
        return ctl_fail(t, "max_iters is %lld; it is -1 (no limit) or a count >= 0",
                        (long long)ci->max_iters);
    const vq_attr *so = attr_get(src, "stack_outputs");
    ci->nstack = so ? so->n : 0;
    ci->nouts = src->nin - 1;
    if (src->nout != src->nin - 1 + ci->nstack)
        return ctl_fail(t,
                        "has %d outputs for %d loop-carried inputs X and %d stack_outputs; "
                        "it has one output per each",
                        src->nout, src->nin - 1, ci->nstack);
    ci->carry_readers = vq__calloc((size_t)(ci->nouts ? ci->nouts : 1), sizeof *ci->carry_readers);
    if (!ci->carry_readers)
        return vq__fail(VQ_ENOMEM, "out of memory");
    if ((rc = take_names(w, t, "body_inputs", ci->nouts, body, &ci->body_in)) != 0 ||
        (rc = take_names(w, t, "body_outputs", ci->nouts, body, &ci->outs[0])) != 0)
        return rc;
    char sa[140], sb[140];
    for (int k = 0; k < ci->nouts; k++) {
        int v = ci->body_in[k];
        struct pvar *bv = &pl->vars[v];
        const vq__meta *x = &pl->vars[src->in[1 + k]].meta;
        if (p->vars[v].block != body)
            return ctl_fail(t, "body_inputs[%d]: var %s is declared in block %d, not in the "
                               "body (block %d)",
                            k, p->vars[v].name, p->vars[v].block, body);
        for (int j = 0; j < k; j++)
            if (ci->body_in[j] == v)
                return ctl_fail(t, "body_inputs names var %s twice", p->vars[v].name);
        if (!vq__meta_compatible(x, &bv->meta)) {
            vq__meta_str(sa, sizeof sa, x);
            vq__meta_str(sb, sizeof sb, &bv->meta);
            return ctl_fail(t, "input X (slot %d) %s is %s; body input %s is declared %s",
                            1 + k, p->vars[src->in[1 + k]].name, sa, p->vars[v].name, sb);
        }
        for (int d = 0; d < bv->meta.ndim; d++)
            if (bv->meta.shape[d] < 0)
                bv->meta.shape[d] = x->shape[d];
        w->rec[v].used = true;
        w->rec[v].has = true;
        w->rec[v].owner = &ci->carry_readers[k];
    }
    if ((rc = walk_replay(w, t, ci, body)) != 0 || (rc = vq__walk_block(w, body, ext)) != 0)
        return rc;
    const vq_attr *bc = attr_get(src, "body_cond");
    int c = vq__program_find_var(p, bc->s);
    if (c < 0 || p->vars[c].block != body)
        return ctl_fail(t, "body_cond %s is not a var of the body (block %d)", bc->s, body);
    for (int k = 0; k < ci->nouts; k++) {
        int v = ci->outs[0][k];
        bool is_input = false;
        for (int j = 0; j < ci->nouts; j++)
            is_input |= ci->body_in[j] == v;
        if (p->vars[v].block != body || is_input || !w->rec[v].has)
            return ctl_fail(t, "body_outputs[%d]: var %s is not written by the body (block "
                               "%d); pass a value through with an op",
                            k, p->vars[v].name, body);
        const vq__meta *in = &pl->vars[ci->body_in[k]].meta, *o = &pl->vars[v].meta;
        bool unknown = false; /* the body's ops were prepared for the input's dims */
        for (int d = 0; d < o->ndim && d < in->ndim; d++)
            unknown |= o->shape[d] < 0 && in->shape[d] >= 0;
        if (!vq__meta_compatible(in, o) || unknown) {
            vq__meta_str(sa, sizeof sa, o);
            vq__meta_str(sb, sizeof sb, in);
            return ctl_fail(t, "body_outputs[%d] %s is %s but carries into body input %s, "
                               "which is %s%s",
                            k, p->vars[v].name, sa, p->vars[ci->body_in[k]].name, sb,
                            unknown ? " (a carried dim must be known wherever the input's "
                                      "is; declare the input and X with -1 there)"
                                    : "");
        }
    }
    bool cond_is_input = false;
    for (int j = 0; j < ci->nouts; j++)
        cond_is_input |= ci->body_in[j] == c;
    if (cond_is_input || !w->rec[c].has)
        return ctl_fail(t, "body_cond %s is not written by the body (block %d)", bc->s, body);
    if ((rc = check_predicate(t, "body_cond", bc->s, &pl->vars[c].meta)) != 0)
        return rc;
    ci->body_cond = c;
    if ((rc = walk_stack(w, t, ci, body)) != 0)
        return rc;
    /* The value an iteration leaves is read by the next one; the
     * predicate's by the step op. The last iteration's next never runs, so
     * its values stay for the exit; one that no iteration reads is held
     * for it (and dropped when its frame is used again). A stacked value
     * is read by the iteration's stack op. */
    for (int k = 0; k < ci->nouts; k++)
        *w->rec[ci->outs[0][k]].owner += carry_count(ci, k);
    (*w->rec[c].owner)++;
    for (int s = 0; s < ci->nstack; s++)
        (*w->rec[ci->stack[s]].owner)++;
    for (int k = 0; k < ci->nouts; k++) {
        struct pvar *o = &pl->vars[src->out[k]];
        const vq__meta *x = &pl->vars[src->in[1 + k]].meta;
        if (!vq__meta_compatible(x, &o->meta)) {
            vq__meta_str(sa, sizeof sa, x);
            vq__meta_str(sb, sizeof sb, &o->meta);
            return ctl_fail(t, "output Out (slot %d) var %s: X gives %s, declared %s", k,
                            p->vars[src->out[k]].name, sa, sb);
        }
        for (int d = 0; d < o->meta.ndim; d++)
            if (o->meta.shape[d] < 0)
                o->meta.shape[d] = x->shape[d];
    }
    return 0;
}

int vq__ctl_walk(struct walk *w, struct pop *t)
{
    struct plan *pl = w->pl;
    const vq__pop *src = t->src;
    struct ctl_info *ci = vq__calloc(1, sizeof *ci);
    if (!ci)
        return vq__fail(VQ_ENOMEM, "out of memory");
    t->ctl = ci;
    ci->replay_of = -1;
    ci->is_while = !strcmp(t->def->type, "while");
    ci->nouts = src->nout;
    for (int j = 0; j < src->nout; j++)
        if (pl->vars[src->out[j]].persistable)
            return ctl_fail(t, "output Out (slot %d) var %s is persistable; a %s's outputs are "
                               "new values (write a parameter with an op after it)",
                            j, pl->prog->vars[src->out[j]].name, src->type);
    int rc = check_predicate(t, "input Cond", pl->prog->vars[src->in[0]].name,
                             &pl->vars[src->in[0]].meta);
    struct varset ext = {0};
    if (rc == 0)
        rc = ci->is_while ? walk_while(w, t, ci, &ext) : walk_cond(w, t, ci, &ext);
    if (rc == 0) {
        /* What the blocks read from outside becomes the op's input too,
         * after the ones X lists. */
        t->in = vq__malloc((size_t)(src->nin + ext.n) * sizeof *t->in);
        if (!t->in) {
            t->in = src->in;
            rc = vq__fail(VQ_ENOMEM, "out of memory");
        } else {
            memcpy(t->in, src->in, (size_t)src->nin * sizeof *t->in);
            t->nin = src->nin;
            for (int i = 0; i < ext.n; i++) {
                bool listed = false;
                for (int j = 0; j < src->nin && !listed; j++)
                    listed = src->in[j] == ext.v[i];
                if (!listed)
                    t->in[t->nin++] = ext.v[i];
            }
        }
    }
    free(ext.v);
    return rc;
}

void vq__ctl_info_free(struct ctl_info *ci)
{
    if (!ci)
        return;
    free(ci->outs[0]);
    free(ci->outs[1]);
    free(ci->body_in);
    free(ci->carry_readers);
    free(ci->replay_in);
    free(ci->replay_readers);
    free(ci->stack);
    free(ci);
}

/* ---- execution ---- */

/* The value of a predicate (a bool scalar on the CPU or a GPU). */
static int read_predicate(const vq_tensor *t, bool *out)
{
    if (!t)
        return vq__fail(VQ_EINVAL, "the predicate has no value");
    if (t->numel != 1)
        return vq__fail(VQ_EINVAL, "the predicate has %lld elements, not 1",
                        (long long)t->numel);
    if (t->dev.kind == VQ_DEV_CPU) {
        *out = *(const unsigned char *)t->data != 0;
        return 0;
    }
    vq_tensor *h = NULL;
    int rc = vq__tensor_empty(&h, t->dtype, t->ndim, t->shape);
    if (rc == 0 && (rc = vq__tensor_copy_sync(h, t)) == 0)
        *out = *(const unsigned char *)h->data != 0;
    vq_tensor_release(h);
    return rc;
}

static void ctl_finish(struct ctl *c)
{
    struct fop *f = c->fop;
    const struct pop *t = f->t;
    struct plan *pl = t->plan;
    struct run *r = c->run;
    bool failed = atomic_load_explicit(&r->err, memory_order_acquire) != 0;
    for (int k = 0; k < t->src->nout; k++) {
        struct pvar *o = f->out[k];
        vq_tensor *v = c->result[k];
        c->result[k] = NULL;
        if (failed || !v) {
            vq_tensor_release(v);
            vq__slot_drop(pl, o, NULL);
        } else if (o->value == v) {
            vq_tensor_release(v); /* an output that is its own input, unchanged */
        } else {
            vq__slot_set(r, pl, o, v);
        }
        atomic_store_explicit(&o->readers_left, t->out_readers[k], memory_order_relaxed);
        if (t->out_readers[k] == 0)
            vq__slot_drop(pl, o, NULL);
    }
    vq__fop_inputs_done(f, NULL);
    vq_done *done = c->done;
    c->done = NULL;
    /* From here on the next execution may start. */
    vq_done_finish(done, 0);
}

/* The end op and the blocks' exit (or the begin op, when no block runs)
 * each call this once per execution; the second finishes it, while the
 * end op holds the outputs. */
static void ctl_part_done(struct ctl *c)
{
    if (atomic_fetch_sub_explicit(&c->pending, 1, memory_order_acq_rel) == 1)
        ctl_finish(c);
}

/* Drops what a saving loop kept of its last execution. */
static void tape_clear(struct tape *tp)
{
    for (int64_t i = 0; i < tp->n * tp->width; i++)
        vq_tensor_release(tp->v[i]);
    tp->n = tp->replayed = 0;
}

/* Appends to tp the values of vars[0 .. tp->width) in frame fr, one
 * reference each, as one of their readers (each var's count of readers
 * goes down by one). what: for the message when there is no room. */
static void tape_append(struct ctl *c, struct tape *tp, struct frame *fr, const int *vars,
                        const char *what)
{
    struct plan *pl = fr->plan;
    bool room = tp->n < tp->cap;
    if (!room) {
        int64_t cap = tp->cap ? 2 * tp->cap : 16;
        vq_tensor **v = vq__realloc(tp->v, (size_t)(cap * tp->width) * sizeof *v);
        if (v) {
            tp->v = v;
            tp->cap = cap;
            room = true;
        } else {
            char msg[120];
            snprintf(msg, sizeof msg, "%s: out of memory", what);
            vq__run_fail(c->run, c->fop->t, VQ_ENOMEM, msg);
        }
    }
    for (int k = 0; k < tp->width; k++) {
        struct pvar *s = &fr->vars[pl->local[vars[k]]];
        if (room)
            tp->v[tp->n * tp->width + k] = s->value ? vq_tensor_retain(s->value) : NULL;
        if (atomic_fetch_sub_explicit(&s->readers_left, 1, memory_order_acq_rel) == 1)
            vq__slot_drop(pl, s, NULL);
    }
    tp->n += room;
}

/* A saving loop's head op: keeps the inputs of the iteration it starts
 * (what the previous frame's outputs hold), in iteration order (every
 * record writes the tape var). */
static int ctl_record(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct frame *fr = arg;
    struct ctl *c = fr->owner;
    struct frame *prev = &c->frames[(fr->slot + c->nframes - 1) % c->nframes];
    tape_append(c, &c->tape, prev, c->fop->t->ctl->outs[0], "saving a loop iteration");
    return 0;
}

/* A stacking loop's stack op, after the ops of an iteration: keeps the
 * values its stack_outputs took there, in iteration order (every stack op
 * writes the stack var). */
static int ctl_stack(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct frame *fr = arg;
    struct ctl *c = fr->owner;
    tape_append(c, &c->stacked, fr, c->fop->t->ctl->stack, "stacking a loop's values");
    return 0;
}

/* Stacked output s of a stacking loop's execution (*out: one reference
 * for it): the kept values along a new axis 0, on the device they are on,
 * copied once; with no iteration, [0, the var's dims] (dims preparation
 * could not infer are 0) on the executor's device. */
static int stack_join(struct ctl *c, int s, vq_tensor **out)
{
    const struct pop *t = c->fop->t;
    const struct ctl_info *ci = t->ctl;
    struct plan *pl = t->plan;
    struct tape *tp = &c->stacked;
    const char *name = pl->prog->vars[ci->stack[s]].name;
    const vq__meta *om = &pl->vars[t->src->out[ci->nouts + s]].meta;
    int64_t shape[VQ_MAX_DIMS];
    shape[0] = tp->n;
    if (om->shape[0] >= 0 && om->shape[0] != tp->n)
        return vq__fail(VQ_EINVAL,
                        "stack_outputs[%d] %s: the loop ran %lld iterations, its "
                        "output is declared with %lld",
                        s, name, (long long)tp->n, (long long)om->shape[0]);
    if (tp->n == 0) {
        const vq__meta *m = &pl->vars[ci->stack[s]].meta;
        for (int d = 0; d < m->ndim; d++)
            shape[1 + d] = m->shape[d] < 0 ? 0 : m->shape[d];
        return vq__tensor_empty_on(out, pl->exec->device, m->dtype, m->ndim + 1, shape, "while");
    }
    const vq_tensor *first = tp->v[s];
    for (int64_t i = 0; i < tp->n; i++) {
        const vq_tensor *v = tp->v[i * tp->width + s];
        char sa[80], sb[80];
        if (!v)
            return vq__fail(VQ_EINVAL, "stack_outputs[%d] %s has no value in iteration %lld", s,
                            name, (long long)i);
        if (v->dtype != first->dtype || v->ndim != first->ndim ||
            memcmp(v->shape, first->shape, (size_t)v->ndim * sizeof v->shape[0]))
            return vq__fail(VQ_EINVAL,
                            "stack_outputs[%d] %s is %s %s in iteration %lld, %s %s "
                            "in iteration 0; stacked values have one shape",
                            s, name, vq_dtype_name(v->dtype),
                            vq__shape_str(sa, sizeof sa, v->ndim, v->shape), (long long)i,
                            vq_dtype_name(first->dtype),
                            vq__shape_str(sb, sizeof sb, first->ndim, first->shape));
    }
    memcpy(shape + 1, first->shape, (size_t)first->ndim * sizeof shape[0]);
    for (int d = 1; d < om->ndim; d++)
        if (om->shape[d] >= 0 && om->shape[d] != shape[d]) {
            char sa[80];
            return vq__fail(VQ_EINVAL,
                            "stack_outputs[%d] %s is %s; its output is declared "
                            "with dim %d %lld",
                            s, name, vq__shape_str(sa, sizeof sa, first->ndim, first->shape), d,
                            (long long)om->shape[d]);
        }
    int rc = vq__tensor_empty_on(out, first->dev, first->dtype, first->ndim + 1, shape, "while");
    if (rc == 0)
        rc = vq__tensor_stack_sync(*out, tp->v + s, tp->width, tp->n);
    if (rc < 0) {
        vq_tensor_release(*out);
        *out = NULL;
    }
    return rc;
}

/* A stacking loop's stacked outputs into c->result, unless the run failed;
 * then what was kept is let go. */
static void stack_results(struct ctl *c)
{
    const struct ctl_info *ci = c->fop->t->ctl;
    for (int s = 0; s < ci->nstack; s++) {
        if (atomic_load_explicit(&c->run->err, memory_order_acquire))
            break;
        int rc = stack_join(c, s, &c->result[ci->nouts + s]);
        if (rc < 0)
            vq__run_fail(c->run, c->fop->t, rc, vq_errmsg());
    }
    tape_clear(&c->stacked);
}

/* A replaying loop's head op: binds the iteration's replay inputs to the
 * saved inputs of forward iteration T - 1 - j, handing over the tape's
 * references (each saved value is freed once this iteration is done with
 * it). Binds run in iteration order (they write the tape var). */
static int ctl_bind(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct frame *fr = arg;
    struct ctl *c = fr->owner;
    const struct ctl_info *ci = c->fop->t->ctl;
    struct plan *pl = fr->plan;
    struct tape *tp = &c->replay->tape;
    int64_t idx = tp->n - 1 - tp->replayed++;
    for (int k = 0; k < ci->nreplay; k++) {
        struct pvar *s = &fr->vars[pl->local[ci->replay_in[k]]];
        vq_tensor *v = NULL;
        if (idx >= 0) {
            v = tp->v[idx * tp->width + k];
            tp->v[idx * tp->width + k] = NULL;
        }
        vq__slot_set(c->run, pl, s, v);
        s->borrowed = v != NULL; /* the tape's: may be another slot's value too */
        atomic_store_explicit(&s->readers_left, ci->replay_readers[k], memory_order_relaxed);
        if (ci->replay_readers[k] == 0)
            vq__slot_drop(pl, s, NULL);
    }
    return 0;
}

/* The blocks of this execution are done, or none runs. */
static void blocks_done(struct ctl *c)
{
    bool deferred = c->end_deferred;
    c->end_deferred = false;
    struct fop *f = c->fop;
    ctl_part_done(c);
    if (deferred) {
        vq__push_tail(f->t->plan, c->end);
        vq__frame_push_from(f->fr, (int)(f - f->fr->ops) + 1);
    }
}

static void push_iteration(struct ctl *c)
{
    vq__frame_push_from(&c->frames[c->iter % c->nframes], 0); /* ends with the step */
}

static int ctl_begin(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct ctl *c = arg;
    struct fop *f = c->fop;
    const struct ctl_info *ci = f->t->ctl;
    struct plan *pl = f->t->plan;
    struct run *r = vq__fop_run(f);
    c->run = r;
    c->iter = 0;
    atomic_store_explicit(&c->pending, 2, memory_order_relaxed);
    int werr = vq_op_wait_error();
    if (werr)
        vq__run_fail(r, f->t, werr, vq_errmsg());
    bool go = false;
    if (ci->save)
        tape_clear(&c->tape);
    tape_clear(&c->stacked);
    if (ci->replay_of >= 0) {
        /* as many iterations as the forward loop ran; the predicates are
         * not read */
        go = c->replay->tape.n > 0;
        c->replay->tape.replayed = 0;
    } else if (!atomic_load_explicit(&r->err, memory_order_acquire)) {
        int rc = read_predicate(f->in[0]->value, &go);
        if (rc)
            vq__run_fail(r, f->t, rc, vq_errmsg());
    }
    if (atomic_load_explicit(&r->err, memory_order_acquire)) {
        blocks_done(c);
        return 0;
    }
    if (!ci->is_while) {
        c->last = go ? 0 : 1;
        vq__frame_push_from(&c->frames[c->last], 0); /* ends with its exit */
        return 0;
    }
    if (!go || ci->max_iters == 0) {
        for (int k = 0; k < ci->nouts; k++)
            c->result[k] = f->in[1 + k]->value ? vq_tensor_retain(f->in[1 + k]->value) : NULL;
        stack_results(c);
        blocks_done(c);
        return 0;
    }
    /* The inputs become what a previous iteration left in the frame
     * before the first: the exit of the last execution emptied it. */
    struct frame *pre = &c->frames[c->nframes - 1];
    for (int k = 0; k < ci->nouts; k++) {
        struct pvar *s = &pre->vars[pl->local[ci->outs[0][k]]];
        vq_tensor *v = f->in[1 + k]->value;
        vq__slot_set(r, pl, s, v ? vq_tensor_retain(v) : NULL);
        s->borrowed = v != NULL; /* X's tensor: a feed, a scope tensor, a value read on */
        atomic_store_explicit(&s->readers_left, carry_count(ci, k), memory_order_relaxed);
    }
    push_iteration(c);
    return 0;
}

/* After an iteration's predicate: the next iteration, or the exit. */
static int ctl_step(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct frame *fr = arg;
    struct ctl *c = fr->owner;
    const struct pop *t = c->fop->t;
    const struct ctl_info *ci = t->ctl;
    struct plan *pl = fr->plan;
    struct run *r = c->run;
    struct pvar *cs = &fr->vars[pl->local[ci->body_cond]];
    int werr = vq_op_wait_error();
    if (werr)
        vq__run_fail(r, t, werr, vq_errmsg());
    bool go = false;
    /* A cancelled run, or one past its deadline, stops here: an endless
     * loop's ops may all be cheap ones that check nothing else. */
    if (atomic_load_explicit(&r->err, memory_order_acquire) ||
        vq__run_stopping(r, t, c->iter + 1)) {
        go = false;
    } else if (ci->replay_of >= 0) {
        go = c->iter + 1 < c->replay->tape.n;
    } else {
        int rc = read_predicate(cs->value, &go);
        if (rc) {
            char msg[256];
            snprintf(msg, sizeof msg, "body_cond %s: %s", pl->prog->vars[ci->body_cond].name,
                     vq_errmsg());
            vq__run_fail(r, t, rc, msg);
        }
    }
    if (atomic_fetch_sub_explicit(&cs->readers_left, 1, memory_order_acq_rel) == 1)
        vq__slot_drop(pl, cs, NULL);
    c->iter++;
    if (go && !atomic_load_explicit(&r->err, memory_order_acquire) &&
        (ci->max_iters < 0 || c->iter < ci->max_iters)) {
        push_iteration(c);
    } else {
        c->last = fr->slot;
        vq__push_tail(pl, c->exit[0]);
    }
    return 0;
}

/* Runs after every op the execution pushed: takes the results, empties
 * the frames it used. */
static int ctl_exit(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    struct ctl *c = arg;
    const struct pop *t = c->fop->t;
    const struct ctl_info *ci = t->ctl;
    struct plan *pl = t->plan;
    struct run *r = c->run;
    int werr = vq_op_wait_error();
    if (werr)
        vq__run_fail(r, t, werr, vq_errmsg());
    struct frame *last = &c->frames[c->last];
    for (int k = 0; k < ci->nouts; k++) {
        bool dep;
        int v = ci->outs[ci->is_while ? 0 : c->last][k];
        struct pvar *s = ci->is_while ? &last->vars[pl->local[v]] : vq__frame_slot(last, v, &dep);
        c->result[k] = s->value ? vq_tensor_retain(s->value) : NULL;
    }
    stack_results(c);
    int lo = ci->is_while ? 0 : c->last, hi = ci->is_while ? c->nframes : c->last + 1;
    for (int i = lo; i < hi; i++) /* a while's whole ring, the branch that ran */
        for (int j = 0; j < pl->block_nvars[c->frames[i].block]; j++)
            vq__slot_drop(pl, &c->frames[i].vars[j], NULL);
    blocks_done(c);
    return 0;
}

static void ctl_end(void *arg, const vq_exec_ctx *x, vq_done *done)
{
    (void)x;
    struct ctl *c = arg;
    int werr = vq_op_wait_error();
    if (werr)
        vq__run_fail(c->run, c->fop->t, werr, vq_errmsg());
    c->done = done;
    ctl_part_done(c);
}

int vq__ctl_push(struct fop *f)
{
    vq_engine *e = f->t->plan->exec->engine;
    struct ctl *c = f->ctl;
    /* The naive engine would run the end op, and block on it, before the
     * ops the begin op pushes from inside itself. Set before the push:
     * there the begin op may run inside it. */
    bool deferred = false;
    if (vq__engine_runs_inline(e)) {
        /* One op at a time there, and this push is the plan's (its
         * push_lock, or the op that pushes): nothing reads the flag now.
         * Other engines never write it, so their executions in flight
         * never see it change. */
        deferred = vq_thread_in_op();
        c->end_deferred = deferred;
    }
    int rc = vq__push_prebuilt(e, c->begin);
    if (rc < 0)
        return rc; /* nothing pushed: the frame stops here */
    if (deferred)
        return VQ__CTL_DEFERRED;
    vq__push_tail(f->t->plan, c->end); /* the begin op's blocks end in it */
    return 0;
}

/* ---- building ---- */

/* Every engine var of frame fr: its slots' and its control ops'. */
static int frame_evs(const struct frame *fr, struct evlist *s)
{
    int rc = 0;
    for (int j = 0; j < fr->plan->block_nvars[fr->block] && rc == 0; j++)
        if (fr->vars[j].ev)
            rc = vq__evlist_add(s, fr->vars[j].ev);
    for (int k = 0; k < fr->nops && rc == 0; k++)
        if (fr->ops[k].ctl)
            rc = vq__evlist_add(s, fr->ops[k].ctl->inst);
    return rc;
}

static vq_opr *opr_make(struct plan *pl, const vq_task *t)
{
    vq_opr *o = vq_opr_new(pl->exec->engine, t);
    if (!o)
        vq__fail(VQ_ENOMEM, "%s: %s", t->name, vq_errmsg());
    return o;
}

/* An op that vq__push_tail pushes (an end, a step, an exit), with what
 * TAIL_PUSHES of its pushes need set aside: an execution has one of each
 * in flight, and the next may be pushed (by the step that ends it) before
 * its op has come back. */
enum { TAIL_PUSHES = 2 };

static vq_opr *tail_make(struct plan *pl, const vq_task *t)
{
    vq_opr *o = opr_make(pl, t);
    if (o && vq__opr_reserve(o, TAIL_PUSHES) < 0) {
        vq__fail(VQ_ENOMEM, "%s: %s", t->name, vq_errmsg());
        vq_opr_free(pl->exec->engine, o);
        return NULL;
    }
    return o;
}

/* A saving while's tape: per frame the op that records the carried
 * values it starts from (head), all writing the tape var. */
static int build_tape(struct ctl *c)
{
    struct plan *pl = c->fop->fr->plan;
    const struct ctl_info *ci = c->fop->t->ctl;
    int rc = 0;
    c->tape.width = ci->nouts;
    if (!(c->tape_var = vq_var_new(pl->exec->engine, "tape")))
        rc = vq__fail(VQ_ENOMEM, "out of memory");
    for (int i = 0; i < c->nframes && rc == 0; i++) {
        struct frame *prev = &c->frames[(i + c->nframes - 1) % c->nframes];
        struct evlist in = {0};
        for (int k = 0; k < ci->nouts && rc == 0; k++)
            rc = vq__evlist_add(&in, prev->vars[pl->local[ci->outs[0][k]]].ev);
        vq_task rt = {.fn = ctl_record,
                      .arg = &c->frames[i],
                      .reads = in.v,
                      .nreads = in.n,
                      .writes = &c->tape_var,
                      .nwrites = 1,
                      .props = VQ_PROP_RUN_ON_FAILED,
                      .name = "while_record"};
        if (rc == 0 && !(c->frames[i].head = opr_make(pl, &rt)))
            rc = VQ_ENOMEM;
        free(in.v);
    }
    return rc;
}

/* The stack ops of a while with stack_outputs: per frame one that appends
 * the iteration's stacked values (stack), all writing the stack var. */
static int build_stack(struct ctl *c)
{
    struct plan *pl = c->fop->fr->plan;
    const struct ctl_info *ci = c->fop->t->ctl;
    int rc = 0;
    c->stacked.width = ci->nstack;
    if (!(c->stack_var = vq_var_new(pl->exec->engine, "stack")))
        rc = vq__fail(VQ_ENOMEM, "out of memory");
    for (int i = 0; i < c->nframes && rc == 0; i++) {
        struct evlist in = {0};
        for (int s = 0; s < ci->nstack && rc == 0; s++)
            rc = vq__evlist_add(&in, c->frames[i].vars[pl->local[ci->stack[s]]].ev);
        vq_task st = {.fn = ctl_stack,
                      .arg = &c->frames[i],
                      .reads = in.v,
                      .nreads = in.n,
                      .writes = &c->stack_var,
                      .nwrites = 1,
                      .props = VQ_PROP_RUN_ON_FAILED,
                      .name = "while_stack"};
        if (rc == 0 && !(c->frames[i].stack = opr_make(pl, &st)))
            rc = VQ_ENOMEM;
        free(in.v);
    }
    return rc;
}

/* A replaying while's heads: per frame the op that binds the saved
 * inputs of the iteration it replays (from the saving loop's tape). */
static int build_replay(struct ctl *c)
{
    struct plan *pl = c->fop->fr->plan;
    const struct ctl_info *ci = c->fop->t->ctl;
    int rc = 0;
    c->replay = c->fop->fr->ops[ci->replay_of].ctl; /* built: an earlier op of the frame */
    for (int i = 0; i < c->nframes && rc == 0; i++) {
        struct evlist out = {0};
        for (int k = 0; k < ci->nreplay && rc == 0; k++)
            rc = vq__evlist_add(&out, c->frames[i].vars[pl->local[ci->replay_in[k]]].ev);
        if (rc == 0)
            rc = vq__evlist_add(&out, c->replay->tape_var);
        vq_task bt = {.fn = ctl_bind,
                      .arg = &c->frames[i],
                      .writes = out.v,
                      .nwrites = out.n,
                      .props = VQ_PROP_RUN_ON_FAILED,
                      .name = "while_replay"};
        if (rc == 0 && !(c->frames[i].head = opr_make(pl, &bt)))
            rc = VQ_ENOMEM;
        free(out.v);
    }
    return rc;
}

/* The control op's begin and end ops in its frame: the reads it has in
 * this frame, the outputs. */
static int build_begin_end(struct fop *f)
{
    struct frame *fr = f->fr;
    struct plan *pl = fr->plan;
    const struct pop *t = f->t;
    const struct ctl_info *ci = t->ctl;
    struct ctl *c = f->ctl;
    int rc = 0;
    struct evlist reads = {0}, writes = {0};
    for (int i = 0; i < t->nin && rc == 0; i++) {
        bool dep;
        vq__frame_slot(fr, t->in[i], &dep);
        if (dep)
            rc = vq__evlist_add(&reads, f->in[i]->ev);
    }
    for (int j = 0; j < t->src->nout && rc == 0; j++)
        rc = vq__evlist_add(&writes, f->out[j]->ev);
    if (rc == 0)
        rc = vq__evlist_add(&writes, c->inst);
    /* A replaying loop runs after the saving one's end, and the saving
     * one's next execution after the replaying one's end: its inst var. */
    if (rc == 0 && c->replay)
        rc = vq__evlist_add(&writes, c->replay->inst);
    int nend_reads = reads.n;
    if (rc == 0)
        rc = vq__evlist_add(&reads, c->inst); /* begin's: after the last execution's end */
    if (rc == 0 && c->replay)
        rc = vq__evlist_add(&reads, c->replay->inst);
    if (rc == 0) {
        vq_task bt = {.fn = ctl_begin,
                      .arg = c,
                      .reads = reads.v,
                      .nreads = reads.n,
                      .props = VQ_PROP_RUN_ON_FAILED,
                      .name = ci->is_while ? "while_begin" : "cond_begin"};
        vq_task nt = {.async_fn = ctl_end,
                      .arg = c,
                      .reads = reads.v,
                      .nreads = nend_reads,
                      .writes = writes.v,
                      .nwrites = writes.n,
                      .props = VQ_PROP_RUN_ON_FAILED,
                      .name = ci->is_while ? "while_end" : "cond_end"};
        if (!(c->begin = opr_make(pl, &bt)) || !(c->end = tail_make(pl, &nt)))
            rc = VQ_ENOMEM;
    }
    free(reads.v);
    free(writes.v);
    return rc;
}

int vq__ctl_build(struct fop *f)
{
    struct frame *fr = f->fr;
    struct plan *pl = fr->plan;
    const struct pop *t = f->t;
    const struct ctl_info *ci = t->ctl;
    struct ctl *c = vq__calloc(1, sizeof *c);
    if (!c)
        return vq__fail(VQ_ENOMEM, "out of memory");
    f->ctl = c;
    c->fop = f;
    c->nframes = ci->is_while ? VQ__WHILE_FRAMES : 2;
    c->frames = vq__calloc((size_t)c->nframes, sizeof *c->frames);
    c->result = vq__calloc((size_t)(t->src->nout ? t->src->nout : 1), sizeof *c->result);
    if (!c->frames || !c->result)
        return vq__fail(VQ_ENOMEM, "out of memory");
    atomic_init(&c->pending, 0);
    if (!(c->inst = vq_var_new(pl->exec->engine, t->src->type)))
        return vq__fail(VQ_ENOMEM, "out of memory");
    int rc = 0;
    for (int i = 0; i < c->nframes && rc == 0; i++) {
        c->frames[i] = (struct frame){.plan = pl, .block = ci->blocks[ci->is_while ? 0 : i],
                                      .up = fr, .owner = c, .slot = i};
        rc = vq__frame_vars(&c->frames[i]);
    }
    /* Every frame's slots exist before any op resolves its vars: a body
     * input names the previous frame's. */
    for (int i = 0; i < c->nframes && rc == 0; i++)
        rc = vq__frame_ops(&c->frames[i]);
    for (int i = 0; ci->is_while && i < c->nframes && rc == 0; i++) {
        struct frame *b = &c->frames[i];
        vq_var *cv = b->vars[pl->local[ci->body_cond]].ev;
        vq_task st = {.fn = ctl_step, .arg = b, .reads = &cv, .nreads = 1,
                      .props = VQ_PROP_RUN_ON_FAILED, .name = "while_step"};
        if (!(b->step = tail_make(pl, &st)))
            rc = VQ_ENOMEM;
        b->tail = b->step;
    }
    if (rc == 0 && ci->save)
        rc = build_tape(c);
    if (rc == 0 && ci->nstack > 0)
        rc = build_stack(c);
    if (rc == 0 && ci->replay_of >= 0)
        rc = build_replay(c);
    for (int x = 0; x < (ci->is_while ? 1 : 2) && rc == 0; x++) {
        struct evlist all = {0};
        for (int i = 0; i < c->nframes && rc == 0; i++)
            if (ci->is_while || i == x)
                rc = frame_evs(&c->frames[i], &all);
        if (rc == 0 && c->stack_var) /* after every stack op */
            rc = vq__evlist_add(&all, c->stack_var);
        vq_task et = {.fn = ctl_exit, .arg = c, .writes = all.v, .nwrites = all.n,
                      .props = VQ_PROP_RUN_ON_FAILED,
                      .name = ci->is_while ? "while_exit" : "cond_exit"};
        if (rc == 0 && !(c->exit[x] = tail_make(pl, &et)))
            rc = VQ_ENOMEM;
        if (rc == 0 && !ci->is_while)
            c->frames[x].tail = c->exit[x];
        free(all.v);
    }
    if (rc == 0)
        rc = build_begin_end(f);
    return rc;
}

void vq__ctl_destroy(struct ctl *c)
{
    vq_engine *e = c->fop->t->plan->exec->engine;
    for (int i = 0; c->frames && i < c->nframes; i++)
        vq__frame_destroy(&c->frames[i]);
    for (int x = 0; x < 2; x++)
        if (c->exit[x])
            vq_opr_free(e, c->exit[x]);
    if (c->begin)
        vq_opr_free(e, c->begin);
    if (c->end)
        vq_opr_free(e, c->end);
    if (c->inst)
        vq_var_free(e, c->inst);
    tape_clear(&c->tape);
    free(c->tape.v);
    if (c->tape_var)
        vq_var_free(e, c->tape_var);
    tape_clear(&c->stacked);
    free(c->stacked.v);
    if (c->stack_var)
        vq_var_free(e, c->stack_var);
    for (int k = 0; c->result && k < c->fop->t->src->nout; k++)
        vq_tensor_release(c->result[k]);
    free(c->result);
    free(c->frames);
    free(c);
}
