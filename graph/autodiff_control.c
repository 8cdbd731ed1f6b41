/* Autodiff through control flow, for autodiff.c's reverse pass: the
 * backward of a cond (one pass per branch, over a copy of the branch's
 * ops, into a block of its own) and of a while (a loop that replays the
 * forward iterations, last first, each differentiated by a pass over a
 * copy of the body). */
#include "autodiff.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What copy_block renames: vars of the copied blocks (map[old] >= 0)
 * become "<name><re>", from[i] becomes to[i]. */
struct copy {
    vq_program *p;
    const char *re;
    const int *from;
    const char *const *to;
    int nmap;
    int *map; /* old block -> its copy, or -1 */
};

/* The name var v has in the copy (malloc'd), declared there when it is a
 * var of a copied block met for the first time. */
static char *copy_name(struct copy *cp, int v, int *rc)
{
    vq_program *p = cp->p;
    const char *nm = p->vars[v].name, *mapped = NULL;
    for (int m = 0; m < cp->nmap && !mapped; m++)
        if (cp->from[m] == v)
            mapped = cp->to[m];
    int nb = mapped ? -1 : cp->map[p->vars[v].block];
    size_t len = strlen(nm) + strlen(cp->re) + 1 + (mapped ? strlen(mapped) : 0);
    char *s = vq__malloc(len);
    if (!s) {
        *rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
        return NULL;
    }
    snprintf(s, len, "%s%s", mapped ? mapped : nm, nb >= 0 ? cp->re : "");
    if (nb >= 0 && vq__program_find_var(p, s) < 0 && (*rc = declare_like(p, nb, s, v, false)) < 0) {
        free(s);
        return NULL;
    }
    return s;
}

static int copy_block_rec(struct copy *cp, int fb, int nb);

/* The attributes of control op opi for its copy in nb: its blocks copied
 * (as children of nb), the var names of its string attributes renamed.
 * out[] gets the attributes; *owned, the name arrays to free after use. */
static int copy_ctl_attrs(struct copy *cp, int opi, int nb, vq_attr *out, char ***owned,
                          int *nowned)
{
    vq_program *p = cp->p;
    int rc = 0, na = p->ops[opi].nattrs, cap = 0;
    for (int a = 0; a < na; a++)
        cap += p->ops[opi].attrs[a].type == VQ_ATTR_STRINGS ? p->ops[opi].attrs[a].n + 1 : 1;
    char **own = vq__calloc((size_t)cap + 1, sizeof *own);
    if (!own)
        return vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    *owned = own;
    *nowned = 0;
    for (int a = 0; a < na && rc == 0; a++) {
        vq_attr at = p->ops[opi].attrs[a]; /* copy: the program grows below */
        if (at.type == VQ_ATTR_INT && strstr(at.name, "_block") && at.i > 0 && at.i < p->nblocks) {
            int old = (int)at.i, copy = vq_program_add_block(p, nb);
            if (copy < 0)
                return copy;
            cp->map[old] = copy;
            if ((rc = copy_block_rec(cp, old, copy)) < 0)
                return rc;
            at.i = copy;
        } else if (at.type == VQ_ATTR_STRINGS && strcmp(at.name, "replay_inputs") &&
                   strcmp(at.name, "body_inputs") && strcmp(at.name, "body_outputs") &&
                   strcmp(at.name, "then_outputs") && strcmp(at.name, "else_outputs")) {
            /* not var names */
        } else if (at.type == VQ_ATTR_STRINGS ||
                   (at.type == VQ_ATTR_STRING && !strcmp(at.name, "body_cond"))) {
            bool one = at.type == VQ_ATTR_STRING;
            int n = one ? 1 : at.n;
            char **names = vq__calloc((size_t)n + 1, sizeof *names);
            if (!names)
                return vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
            own[(*nowned)++] = (char *)names;
            for (int i = 0; i < n && rc == 0; i++) {
                const char *nm = one ? at.s : at.strings[i];
                int v = vq__program_find_var(p, nm);
                names[i] = v < 0 ? vq__strdup(nm) : copy_name(cp, v, &rc);
                if (!names[i] && rc == 0)
                    rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
            }
            if (one)
                at.s = names[0];
            else
                at.strings = (const char *const *)names;
        }
        out[a] = at;
    }
    return rc;
}

static void copy_attrs_free(char **owned, int nowned)
{
    for (int i = 0; owned && i < nowned; i++) {
        char **names = (char **)owned[i];
        for (int k = 0; names[k]; k++)
            free(names[k]);
        free(names);
    }
    free(owned);
}

/* Whether op draws from the executor's default generator: a random op
 * with neither a seed attribute nor its (last, optional) State input. */
static bool draws_default(const vq__pop *op)
{
    if (!op->def || !(op->def->flags & VQ__RANDOM) || op->nin >= op->def->nin_slots)
        return false;
    for (int a = 0; a < op->nattrs; a++)
        if (!strcmp(op->attrs[a].name, "seed"))
            return false;
    return true;
}

static int copy_block_rec(struct copy *cp, int fb, int nb)
{
    vq_program *p = cp->p;
    int rc = 0;
    for (int i = 0; i < p->blocks[fb].nops && rc == 0; i++) {
        int opi = p->blocks[fb].ops[i];
        int nin = p->ops[opi].nin, no = p->ops[opi].nout;
        /* The copy is a new op of the plan, with keys of its own: its
         * numbers would not be the forward's, and the gradient would be
         * that of other numbers. A seed attribute draws the same in both. */
        if (draws_default(&p->ops[opi]))
            return vq__fail(VQ_EINVAL,
                            "vq_append_backward: block %d op %d (%s) draws from the "
                            "executor's default generator; its cond or while "
                            "computes the block again for the gradient and would "
                            "draw other numbers: give it a seed attribute",
                            fb, i, p->ops[opi].type);
        char *names[2 * VQ__MAX_SLOTS] = {0};
        for (int s = 0; s < nin + no && rc == 0; s++) {
            const vq__pop *src = &p->ops[opi];
            names[s] = copy_name(cp, s < nin ? src->in[s] : src->out[s - nin], &rc);
        }
        vq_attr *attrs = NULL;
        char **owned = NULL;
        int nowned = 0, na = p->ops[opi].nattrs;
        if (rc >= 0 && is_control(&p->ops[opi])) {
            if (!(attrs = vq__calloc((size_t)na + 1, sizeof *attrs)))
                rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
            else
                rc = copy_ctl_attrs(cp, opi, nb, attrs, &owned, &nowned);
        }
        if (rc >= 0) {
            const vq__pop *src = &p->ops[opi];
            rc = vq_program_add_op(p, nb, src->type, (const char *const *)names, nin,
                                   (const char *const *)names + nin, no, attrs ? attrs : src->attrs,
                                   na);
        }
        copy_attrs_free(owned, nowned);
        free(attrs);
        for (int s = 0; s < nin + no; s++)
            free(names[s]);
        rc = rc < 0 ? rc : 0;
    }
    return rc;
}

/* Copies the ops of block fb to the end of block nb (the forward values of
 * a control op's blocks are gone by the time its gradient runs, so the
 * gradient's blocks compute them again), with the blocks of its control
 * ops copied too, as children of nb. A var of fb or of those blocks is
 * renamed "<name><re>" and declared in the copy of its block, except
 * from[i], which becomes the var to[i]; other vars keep their names.
 * *first is the place in nb of the first copy. */
static int copy_block(vq_program *p, int fb, int nb, const char *re, const int *from,
                      const char *const *to, int nmap, int *first)
{
    *first = p->blocks[nb].nops;
    struct copy cp = {.p = p,
                      .re = re,
                      .from = from,
                      .to = to,
                      .nmap = nmap,
                      .map = vq__malloc(((size_t)p->nblocks + 1) * sizeof(int))};
    if (!cp.map)
        return vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    for (int i = 0; i < p->nblocks; i++)
        cp.map[i] = -1;
    cp.map[fb] = nb;
    int rc = copy_block_rec(&cp, fb, nb);
    free(cp.map);
    return rc;
}

/* Differentiates the ops of block nb from its first-th on: the gradient
 * of seed[i] is the var named seed_name[i]; for each wanted[i], result[i]
 * becomes a var of nb holding its gradient (malloc'd name), zeros when no
 * gradient reaches it. Gradient names end in "@B<nb>". */
static int block_backward(vq_program *p, int nb, int first, const int *seed,
                          const char *const *seed_name, int nseed, const int *wanted, int nwanted,
                          char **result)
{
    char suffix[32];
    snprintf(suffix, sizeof suffix, "@B%d", nb);
    struct bw sub;
    int n = p->blocks[nb].nops - first;
    int rc = vq__bw_alloc(&sub, p, nb, suffix, n);
    if (rc < 0)
        return rc;
    if (n > 0) /* an empty block's ops is NULL: no offset from it */
        memcpy(sub.fwd, p->blocks[nb].ops + first, (size_t)n * sizeof *sub.fwd);
    for (int i = 0; i < nwanted; i++)
        sub.requires_grad[wanted[i]] = is_float(p->vars[wanted[i]].dtype);
    /* a cond or while reads what its blocks read */
    int **reads = vq__calloc((size_t)n + 1, sizeof *reads),
        *nreads = vq__calloc((size_t)n + 1, sizeof *nreads);
    if (!reads || !nreads)
        rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    for (int i = 0; i < n && rc == 0; i++)
        rc = vq__op_reads(p, &p->ops[sub.fwd[i]], &reads[i], &nreads[i]);
    for (int i = 0; i < n && rc == 0; i++) {
        const vq__pop *c = &p->ops[sub.fwd[i]];
        bool any = false;
        for (int j = 0; j < nreads[i]; j++)
            any |= sub.requires_grad[reads[i][j]];
        bool has_grad = c->def && (c->def->grad || is_control(c));
        for (int j = 0; j < c->nout; j++)
            if (any && has_grad && is_float(p->vars[c->out[j]].dtype))
                sub.requires_grad[c->out[j]] = true;
    }
    for (int i = 0; i < nseed && rc == 0; i++) {
        int v = seed[i];
        if (v < 0 || !sub.requires_grad[v])
            continue;
        sub.needed[v] = true;
        sub.g[v].expected++;
        rc = vq__bw_add_part(&sub, v, seed_name[i]);
    }
    for (int i = n - 1; i >= 0 && rc == 0; i--) {
        const vq__pop *c = &p->ops[sub.fwd[i]];
        bool flows = false;
        for (int j = 0; j < c->nout; j++)
            flows |= sub.needed[c->out[j]];
        if (!flows)
            continue;
        for (int j = 0; j < nreads[i]; j++)
            if (sub.requires_grad[reads[i][j]]) {
                sub.needed[reads[i][j]] = true;
                sub.g[reads[i][j]].expected++;
            }
    }
    for (int i = 0; reads && i < n; i++)
        free(reads[i]);
    free(reads);
    free(nreads);
    if (rc == 0)
        rc = vq__bw_ops(&sub);
    for (int i = 0; i < nwanted && rc == 0; i++) {
        int v = wanted[i];
        if ((rc = vq__bw_finalize(&sub, v)) < 0)
            break;
        if (!(result[i] = vq__bw_final_name(&sub, v))) {
            rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
            break;
        }
        if (!sub.g[v].final) {
            rc = declare_like(p, nb, result[i], v, false);
            if (rc >= 0)
                rc = vq_program_add_op(p, nb, "zeros_like", (const char *[]){p->vars[v].name}, 1,
                                       (const char *const *)&result[i], 1, NULL, 0);
            rc = rc < 0 ? rc : 0;
        }
    }
    vq__bw_free(&sub);
    return rc;
}

/* The var a name of block fb became in its copy (copy_block's renaming). */
static int copied_var(const vq_program *p, int v, int fb, const char *re)
{
    if (v < 0 || p->vars[v].block != fb)
        return v;
    char nm[256];
    snprintf(nm, sizeof nm, "%s%s", p->vars[v].name, re);
    return vq__program_find_var(p, nm);
}

static void names_free(char **names, int n)
{
    for (int i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
}

/* The backward of cond op (fwd index k of b) as a cond in b's block over
 * two new blocks: each recomputes its branch and differentiates it, from
 * the output gradients dout, into the gradients of the vars in reads[]
 * that have a din name; a var the branch does not use gets zeros. */
int vq__cond_backward(struct bw *b, int k, const int *reads, int nreads, const char **din,
                      const char *const *dout)
{
    vq_program *p = b->p;
    const vq__pop *op0 = &p->ops[b->fwd[k]];
    int nout = op0->nout, cond_var = op0->in[0];
    int blocks[2] = {-1, -1};
    const vq_attr *outs[2] = {NULL, NULL};
    for (int a = 0; a < op0->nattrs; a++) {
        const vq_attr *at = &op0->attrs[a];
        if (!strcmp(at->name, "then_block"))
            blocks[0] = (int)at->i;
        else if (!strcmp(at->name, "else_block"))
            blocks[1] = (int)at->i;
        else if (!strcmp(at->name, "then_outputs"))
            outs[0] = at;
        else if (!strcmp(at->name, "else_outputs"))
            outs[1] = at;
    }
    for (int i = 0; i < 2; i++)
        if (blocks[i] <= 0 || blocks[i] >= p->nblocks || !outs[i] || outs[i]->n != nout)
            return vq__fail(VQ_EINVAL,
                            "vq_append_backward: op %d (cond) is malformed (prepare "
                            "the program to see why)",
                            k);
    int *wanted = vq__malloc(((size_t)nreads + 1) * sizeof *wanted), nw = 0;
    int *seed = vq__malloc(((size_t)nout + 1) * sizeof *seed), ns = 0;
    const char **seed_name = vq__malloc(((size_t)nout + 1) * sizeof *seed_name);
    char **results[2] = {vq__calloc((size_t)nreads + 1, sizeof(char *)),
                         vq__calloc((size_t)nreads + 1, sizeof(char *))};
    int nb[2] = {-1, -1}, rc = 0;
    if (!wanted || !seed || !seed_name || !results[0] || !results[1])
        rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    for (int i = 0; i < nreads && rc == 0; i++)
        if (din[i])
            wanted[nw++] = reads[i];
    for (int br = 0; br < 2 && rc == 0; br++) {
        if ((rc = nb[br] = vq_program_add_block(p, b->block)) < 0)
            break;
        char re[32];
        snprintf(re, sizeof re, "@RE%d", nb[br]);
        int first;
        if ((rc = copy_block(p, blocks[br], nb[br], re, NULL, NULL, 0, &first)) < 0)
            break;
        /* each output's gradient flows into the var the branch gives for it */
        ns = 0;
        for (int j = 0; j < nout; j++)
            if (dout[j]) {
                int v = vq__program_find_var(p, outs[br]->strings[j]);
                seed[ns] = copied_var(p, v, blocks[br], re);
                seed_name[ns++] = dout[j];
            }
        rc = block_backward(p, nb[br], first, seed, seed_name, ns, wanted, nw, results[br]);
    }
    /* the backward cond: Out = the gradients of the wanted vars */
    if (rc == 0) {
        const char *xin[VQ__MAX_SLOTS + 1], *outn[VQ__MAX_SLOTS];
        int nx = 0, no = 0;
        xin[nx++] = p->vars[cond_var].name;
        for (int j = 0; j < nout && nx < VQ__MAX_SLOTS; j++)
            if (dout[j])
                xin[nx++] = dout[j];
        for (int i = 0; i < nreads && no < VQ__MAX_SLOTS; i++)
            if (din[i])
                outn[no++] = din[i];
        vq_attr at[4] = {VQ_ATTR_I("then_block", nb[0]), VQ_ATTR_I("else_block", nb[1]),
                         VQ_ATTR_SS("then_outputs", (const char *const *)results[0], nw),
                         VQ_ATTR_SS("else_outputs", (const char *const *)results[1], nw)};
        if (nx < 2) /* X takes one var at least */
            xin[nx++] = p->vars[cond_var].name;
        rc = vq_program_add_op(p, b->block, "cond", xin, nx, outn, no, at, 4);
        rc = rc < 0 ? rc : 0;
    }
    names_free(results[0], nreads);
    names_free(results[1], nreads);
    free(wanted);
    free(seed);
    free(seed_name);
    return rc;
}

/* Declares name in block like var v and fills it with zeros of v's
 * shape. */
static int zeros_var(vq_program *p, int block, const char *name, int v)
{
    int rc = declare_like(p, block, name, v, false);
    if (rc >= 0)
        rc = vq_program_add_op(p, block, "zeros_like", (const char *[]){p->vars[v].name}, 1,
                               (const char *[]){name}, 1, NULL, 0);
    return rc < 0 ? rc : 0;
}

/* Which carried values of while op opi (body block body, body_inputs
 * bin, body_outputs bout, nc of each) depend on what pass b
 * differentiates: those whose initial value does, and those the body
 * computes from such a value or an enclosing var that does, to a fixed
 * point. Gradients are carried only for these: a counter or a sequence
 * fed in gets none. */
static int carried_requires(const struct bw *b, int opi, int body, const vq_attr *bin,
                            const vq_attr *bout, int nc, bool *out)
{
    vq_program *p = b->p;
    bool *rq = vq__calloc((size_t)p->nvars + 1, sizeof *rq);
    int *bi = vq__malloc(((size_t)nc + 1) * sizeof *bi),
        *bo = vq__malloc(((size_t)nc + 1) * sizeof *bo);
    int rc = 0;
    if (!rq || !bi || !bo)
        rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    for (int v = 0; rc == 0 && v < b->nvars; v++)
        rq[v] = b->requires_grad[v];
    for (int c = 0; rc == 0 && c < nc; c++) {
        bi[c] = vq__program_find_var(p, bin->strings[c]);
        bo[c] = vq__program_find_var(p, bout->strings[c]);
        if (bi[c] >= 0)
            rq[bi[c]] = b->requires_grad[p->ops[opi].in[1 + c]];
    }
    for (bool changed = true; rc == 0 && changed;) {
        changed = false;
        for (int k = 0; k < p->blocks[body].nops && rc == 0; k++) {
            const vq__pop *op = &p->ops[p->blocks[body].ops[k]];
            int *in = NULL, nin = 0;
            if ((rc = vq__op_reads(p, op, &in, &nin)) < 0)
                break;
            bool any = false;
            for (int i = 0; i < nin; i++)
                any |= rq[in[i]];
            free(in);
            if (!any || !op->def || !(op->def->grad || is_control(op)))
                continue;
            for (int j = 0; j < op->nout; j++)
                if (!rq[op->out[j]] && is_float(p->vars[op->out[j]].dtype))
                    changed = rq[op->out[j]] = true;
        }
        for (int c = 0; c < nc; c++)
            if (bi[c] >= 0 && bo[c] >= 0 && rq[bo[c]] && !rq[bi[c]])
                changed = rq[bi[c]] = true;
    }
    for (int c = 0; rc == 0 && c < nc; c++)
        out[c] = bi[c] >= 0 && rq[bi[c]] && is_float(p->vars[bi[c]].dtype);
    free(rq);
    free(bi);
    free(bo);
    return rc < 0 ? rc : 0;
}

/* Entry s of while op's stack_outputs ("?" when malformed). */
static const char *stack_name(const vq__pop *op, int s)
{
    for (int a = 0; a < op->nattrs; a++)
        if (!strcmp(op->attrs[a].name, "stack_outputs") && s >= 0 && s < op->attrs[a].n)
            return op->attrs[a].strings[s];
    return "?";
}

/* One while's backward (while_backward): the forward loop (op opi, the
 * k-th of b's pass, at pos in its block), the block nb that replays one
 * iteration, and the names it makes. Per carried value c (of nc) and
 * per other read (nsum of them, the vars the body reads from outside),
 * n in all: replay[] (the replayed inputs), and per loop-carried entry
 * (nl: the ncarry carried float values, then the sums) gin[], gout[],
 * ginit[] and the junk names of gradients nobody wants, all in nm. */
struct while_bw {
    struct bw *b;
    vq_program *p;
    int k, opi, pos;
    const int *reads;
    int nreads;
    const char **din;
    const char *const *dout;
    int nc, body, cond_var;
    const vq_attr *bin, *bout;
    int nb;
    char re[32];
    int nsum, ncarry, n, nl, first;
    char **nm, **replay, **gin, **gout, **ginit;
    int *from, *wanted, *seed;
    const char **seed_name;
    char **result;
    bool *carried;
};

/* The forward loop's place, body and carried values, checked: 0 or the
 * refusal (nothing changed yet). */
static int while_bw_parse(struct while_bw *w)
{
    vq_program *p = w->p;
    const struct bw *b = w->b;
    int k = w->k, opi = w->opi, pos = 0; /* pos: its place in its block, for replay_of */
    while (pos < p->blocks[b->block].nops && p->blocks[b->block].ops[pos] != opi)
        pos++;
    w->pos = pos;
    const vq__pop *op0 = &p->ops[opi];
    int nc = op0->nout, body = -1;
    const vq_attr *bin = NULL, *bout = NULL;
    w->cond_var = op0->in[0];
    for (int a = 0; a < op0->nattrs; a++) {
        const vq_attr *at = &op0->attrs[a];
        if (!strcmp(at->name, "body_block"))
            body = (int)at->i;
        else if (!strcmp(at->name, "body_inputs"))
            bin = at;
        else if (!strcmp(at->name, "body_outputs"))
            bout = at;
        else if (!strcmp(at->name, "stack_outputs"))
            nc -= at->n; /* the stacked outputs follow the carried ones */
    }
    /* The gradient of a stacked output would be one slice of it per
     * iteration, fed to the replayed iterations in reverse: not done, so a
     * loss that depends on one is refused rather than differentiated as if
     * it did not. */
    for (int j = nc > 0 ? nc : 0; j < op0->nout; j++)
        if (w->dout[j])
            return vq__fail(VQ_ENOSYS,
                            "vq_append_backward: op %d (while): the loss depends on its "
                            "output %s, which stacks stack_outputs[%d] %s over the "
                            "iterations; autodiff does not differentiate through "
                            "stack_outputs (compute the loss from carried values)",
                            k, p->vars[op0->out[j]].name, j - nc, stack_name(op0, j - nc));
    if (body <= 0 || body >= p->nblocks || !bin || !bout || bin->n != nc || bout->n != nc ||
        op0->nin != 1 + nc || w->nreads < 1 + nc)
        return vq__fail(VQ_EINVAL,
                        "vq_append_backward: op %d (while) is malformed (prepare "
                        "the program to see why)",
                        k);
    w->nc = nc;
    w->body = body;
    w->bin = bin;
    w->bout = bout;
    return 0;
}

/* Marks the forward loop to keep its iterations, adds the replaying
 * block and the arrays: 0 or the failure. */
static int while_bw_begin(struct while_bw *w)
{
    vq_program *p = w->p;
    int opi = w->opi;
    vq_attr save = VQ_ATTR_B("save_carries", true);
    int rc = vq__pop_attr_set(p, opi, &save);
    if (rc < 0)
        return rc;
    /* setting it may have moved the op's attributes */
    const vq__pop *op0 = &p->ops[opi];
    for (int a = 0; a < op0->nattrs; a++) {
        if (!strcmp(op0->attrs[a].name, "body_inputs"))
            w->bin = &op0->attrs[a];
        else if (!strcmp(op0->attrs[a].name, "body_outputs"))
            w->bout = &op0->attrs[a];
    }
    int nb = vq_program_add_block(p, w->b->block);
    if (nb < 0)
        return nb;
    w->nb = nb;
    snprintf(w->re, sizeof w->re, "@RE%d", nb);
    /* carried gradients: one per carried value that depends on what b
     * differentiates; sums: one per other read (reads[1 + nc ...], the
     * vars the body reads from outside) */
    int nc = w->nc;
    w->nsum = w->nreads - 1 - nc;
    int n = w->n = nc + w->nsum;
    /* replay, in, out, init, unused */
    w->nm = vq__calloc((size_t)(5 * n + 1), sizeof *w->nm);
    w->from = vq__malloc(((size_t)nc + 1) * sizeof *w->from);
    w->wanted = vq__malloc(((size_t)n + 1) * sizeof *w->wanted);
    w->seed = vq__malloc(((size_t)nc + 1) * sizeof *w->seed);
    w->seed_name = vq__malloc(((size_t)nc + 1) * sizeof *w->seed_name);
    w->result = vq__calloc((size_t)n + 1, sizeof *w->result);
    w->carried = vq__calloc((size_t)nc + 1, sizeof *w->carried);
    if (!w->nm || !w->from || !w->wanted || !w->seed || !w->seed_name || !w->result || !w->carried)
        return vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    w->replay = w->nm;
    w->gin = w->nm + n;
    w->gout = w->nm + 2 * n;
    w->ginit = w->nm + 3 * n;
    return 0;
}

/* Which carried values get a gradient, the replayed inputs declared in
 * nb, and the body copied into nb reading them. */
static int while_bw_replay_inputs(struct while_bw *w)
{
    vq_program *p = w->p;
    const vq_attr *bin = w->bin;
    int nc = w->nc, nb = w->nb;
    char **replay = w->replay;
    int rc = carried_requires(w->b, w->opi, w->body, bin, w->bout, nc, w->carried);
    /* the replayed inputs */
    for (int c = 0; c < nc && rc == 0; c++) {
        int v = vq__program_find_var(p, bin->strings[c]);
        size_t len = strlen(bin->strings[c]) + 40;
        if (v < 0 || !(replay[c] = vq__malloc(len))) {
            rc = vq__fail(v < 0 ? VQ_EINVAL : VQ_ENOMEM,
                          "vq_append_backward: op %d (while): "
                          "body input %s",
                          w->k, bin->strings[c]);
            break;
        }
        snprintf(replay[c], len, "%s@REPLAY%d", bin->strings[c], nb);
        w->from[c] = v;
        rc = declare_like(p, nb, replay[c], v, false);
        w->ncarry += w->carried[c];
    }
    if (rc >= 0)
        rc = copy_block(p, w->body, nb, w->re, w->from, (const char *const *)replay, nc, &w->first);
    return rc;
}

/* The loop's own carried gradients and sums, and their initial values. */
static int while_bw_carried(struct while_bw *w)
{
    vq_program *p = w->p;
    struct bw *b = w->b;
    int nc = w->nc, nb = w->nb, n = w->n, rc = 0;
    char **gin = w->gin, **gout = w->gout, **ginit = w->ginit;
    int nl = 0; /* loop-carried entries: carried float values, then sums */
    for (int i = 0; i < n && rc >= 0; i++) {
        bool isc = i < nc;
        if (isc && !w->carried[i])
            continue;
        int v = isc ? vq__program_find_var(p, w->bin->strings[i]) : w->reads[1 + i];
        if (!isc && !w->din[1 + i])
            continue; /* no gradient wanted for that read */
        const char *base = p->vars[v].name;
        size_t len = strlen(base) + 48;
        gin[nl] = vq__malloc(len);
        gout[nl] = vq__malloc(len);
        ginit[nl] = vq__malloc(len);
        if (!gin[nl] || !gout[nl] || !ginit[nl]) {
            rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
            break;
        }
        snprintf(gin[nl], len, "%s@GIN%d", base, nb);
        snprintf(gout[nl], len, "%s@GOUT%d", base, nb);
        snprintf(ginit[nl], len, "%s@GINIT%d", base, nb);
        if ((rc = declare_like(p, nb, gin[nl], v, false)) < 0)
            break;
        if (isc) {
            /* seed: the gradient reaching the body's output c this iteration */
            int o = vq__program_find_var(p, w->bout->strings[i]);
            w->seed[nl] = copied_var(p, o, w->body, w->re);
            w->seed_name[nl] = gin[nl];
            w->wanted[nl] = vq__program_find_var(p, w->replay[i]);
            /* initial: the gradient of the loop's output, or zeros */
            int out_v = p->ops[w->opi].out[i];
            if (w->dout[i]) {
                free(ginit[nl]);
                ginit[nl] = vq__strdup(w->dout[i]);
                rc = ginit[nl] ? 0 : vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
            } else {
                rc = zeros_var(p, b->block, ginit[nl], out_v);
            }
        } else {
            w->wanted[nl] = v;
            rc = zeros_var(p, b->block, ginit[nl], v);
        }
        nl++;
        rc = rc < 0 ? rc : 0;
    }
    w->nl = nl;
    return rc;
}

/* The body's outputs: the input gradients, and the sums grown by this
 * iteration's part; then the body's predicate, which a replaying loop
 * does not read. */
static int while_bw_body_outputs(struct while_bw *w, char *bc, size_t bc_size)
{
    vq_program *p = w->p;
    int nb = w->nb, nl = w->nl, rc = 0;
    char **gin = w->gin, **gout = w->gout, **result = w->result;
    for (int i = 0; i < nl && rc >= 0; i++) {
        int v = vq__program_find_var(p, gin[i]), r = vq__program_find_var(p, result[i]);
        bool own = r >= 0 && p->vars[r].block == nb; /* a var of the body... */
        for (int j = 0; j < nl && own; j++)
            own = strcmp(result[i], gin[j]) != 0; /* ...that no iteration binds */
        if (i < w->ncarry && own) {               /* it carries on as it is */
            free(gout[i]);
            if (!(gout[i] = vq__strdup(result[i])))
                rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
            continue;
        }
        if ((rc = declare_like(p, nb, gout[i], v, false)) < 0)
            break;
        if (i < w->ncarry)
            rc = vq_program_add_op(p, nb, "scale", (const char *[]){result[i]}, 1,
                                   (const char *[]){gout[i]}, 1, NULL, 0);
        else
            rc = vq_program_add_op(p, nb, "add", (const char *[]){gin[i], result[i]}, 2,
                                   (const char *[]){gout[i]}, 1, NULL, 0);
    }
    /* the body's predicate, which a replaying loop does not read */
    snprintf(bc, bc_size, "while@PRED%d", nb);
    if (rc >= 0 && (rc = vq_program_add_var(p, nb, bc, VQ_BOOL, 0, NULL, false)) >= 0)
        rc = vq_program_add_op(p, nb, "logical_not", (const char *[]){p->vars[w->cond_var].name}, 1,
                               (const char *[]){bc}, 1, NULL, 0);
    return rc;
}

/* The replaying while: Out = gradients of the carried X (those wanted,
 * others into vars nobody reads) and of the enclosing reads. */
static int while_bw_replaying_op(struct while_bw *w, const char *bc)
{
    vq_program *p = w->p;
    int nl = w->nl, n = w->n, nc = w->nc, rc = 0;
    char **gin = w->gin, **ginit = w->ginit;
    const char **xin = vq__malloc(((size_t)nl + 2) * sizeof *xin);
    const char **outn = vq__malloc(((size_t)nl + 1) * sizeof *outn);
    char **junk = w->nm + 4 * n;
    if (!xin || !outn) {
        rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    } else {
        xin[0] = p->vars[w->cond_var].name;
        int j = 0;
        for (int i = 0; i < n && rc >= 0; i++) {
            bool isc = i < nc;
            if ((isc && !w->carried[i]) || (!isc && !w->din[1 + i]))
                continue;
            xin[1 + j] = ginit[j];
            if (w->din[1 + i]) {
                outn[j] = w->din[1 + i];
            } else {
                /* a carried value whose gradient nobody wants */
                size_t len = strlen(ginit[j]) + 16;
                if (!(junk[j] = vq__malloc(len))) {
                    rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
                    break;
                }
                snprintf(junk[j], len, "%s@UNUSED", ginit[j]);
                int v = vq__program_find_var(p, gin[j]);
                rc = declare_like(p, w->b->block, junk[j], v, false);
                outn[j] = junk[j];
            }
            j++;
        }
        if (rc >= 0 && nl > 0) {
            vq_attr at[7] = {VQ_ATTR_I("body_block", w->nb),
                             VQ_ATTR_SS("body_inputs", (const char *const *)gin, nl),
                             VQ_ATTR_SS("body_outputs", (const char *const *)w->gout, nl),
                             VQ_ATTR_S("body_cond", bc),
                             VQ_ATTR_I("replay_of", w->pos),
                             VQ_ATTR_SS("replay_inputs", (const char *const *)w->replay, nc)};
            rc = vq_program_add_op(p, w->b->block, "while", xin, 1 + nl, outn, nl, at, 6);
        }
    }
    free(xin);
    free(outn);
    return rc;
}

static void while_bw_free(struct while_bw *w)
{
    if (w->nm)
        for (int i = 0; i < 5 * w->n + 1; i++)
            free(w->nm[i]);
    free(w->nm);
    free(w->from);
    free(w->wanted);
    free(w->seed);
    free(w->seed_name);
    names_free(w->result, w->n);
    free(w->carried);
}

/* The backward of while op k of b's block: the forward loop is marked to
 * keep every iteration's carried inputs (save_carries), and a while that
 * replays it (replay_of) runs once per forward iteration, last first. Its
 * body binds the saved inputs (replay_inputs), recomputes that iteration,
 * and differentiates it: it carries the gradient of each float carried
 * value (starting from the gradient of the loop's output, or zeros) and a
 * sum per enclosing var the body reads (starting from zeros); its outputs
 * are the gradients of X and of those vars. */
int vq__while_backward(struct bw *b, int k, const int *reads, int nreads, const char **din,
                       const char *const *dout)
{
    struct while_bw w = {.b = b,
                         .p = b->p,
                         .k = k,
                         .opi = b->fwd[k],
                         .reads = reads,
                         .nreads = nreads,
                         .din = din,
                         .dout = dout};
    int rc = while_bw_parse(&w);
    if (rc < 0)
        return rc;
    char bc[48];
    rc = while_bw_begin(&w);
    if (rc >= 0)
        rc = while_bw_replay_inputs(&w);
    if (rc >= 0)
        rc = while_bw_carried(&w);
    if (rc >= 0)
        rc = block_backward(w.p, w.nb, w.first, w.seed, w.seed_name, w.ncarry, w.wanted, w.nl,
                            w.result);
    if (rc >= 0)
        rc = while_bw_body_outputs(&w, bc, sizeof bc);
    if (rc >= 0)
        rc = while_bw_replaying_op(&w, bc);
    while_bw_free(&w);
    return rc < 0 ? rc : 0;
}
