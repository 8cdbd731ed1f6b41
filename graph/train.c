/* Reverse-mode autodiff over a program, optimizers as program ops, and
 * learning-rate schedules (an lr_schedule op and its step counter) whose
 * rate var the optimizers' update ops read.
 *
 * vq_append_backward walks block 0 once forward (which vars need a
 * gradient: parameters and what is computed from them) and once backward
 * from the loss (which of those the loss depends on), then visits the
 * forward ops in reverse. For each op with a gradient flowing into an
 * output it calls the op's gradient maker with var names: the gradients of
 * its outputs, and a name for the gradient of each input that needs one.
 * A var read by several ops (or twice by one) gets one partial gradient per
 * read, "x@GRAD@RENAME@i", and an add chain sums them into "x@GRAD" just
 * before the op that wrote x is visited: by then every reader, which comes
 * later in the program, has been visited. The program grows while this
 * runs, so ops and vars are held by index, never by pointer. */
#include "graph_internal.h"

#include <varq/train.h>

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_float(vq_dtype dt)
{
    return dt == VQ_F32 || dt == VQ_F64;
}

static bool is_control(const vq__pop *op)
{
    return op->def && (op->def->flags & VQ__CONTROL);
}

/* Declares name in block with var v's dtype and shape. */
static int declare_like(vq_program *p, int block, const char *name, int v, bool persistable)
{
    vq__pvar d = p->vars[v]; /* copy: adding a var may move the table */
    return vq_program_add_var(p, block, name, d.dtype, d.ndim, d.shape, persistable);
}

struct grad_names {
    char **part;  /* names of the partial gradients emitted so far */
    int nparts, expected;
    bool final;   /* the summed gradient exists */
    bool alias;   /* ... under the name of its single part (part[0]) */
};

/* One reverse pass: the forward ops fwd (program op indices, in order) of
 * one block, differentiated into block `block`. Block 0's pass is the
 * program's; a cond's backward runs one pass per branch, into a block of
 * its own, over a copy of the branch's ops. Gradient names end in suffix
 * ("" for block 0, "@B<n>" in block n) so that passes never clash. */
struct bw {
    vq_program *p;
    int block;
    const char *suffix;
    int *fwd, nfwd;
    int nvars;        /* the arrays below cover vars 0..nvars-1 */
    bool *requires, *needed;
    struct grad_names *g;
    int err;          /* emit_op's first failure */
    /* the gradient names the maker being called must write (din), and
     * whether it wrote each: an input it leaves alone gets no gradient */
    const char *const *want;
    const char *maker;   /* the forward op type whose gradient maker runs */
    const int *want_var; /* the input each want[] is the gradient of */
    bool *wrote;
    int nwant;
    /* the temporaries handed to the maker being called (vq_op_grad_temp),
     * declared when an op it emits first writes them; freed when it
     * returns. ntemps_made numbers them across the whole pass. */
    char **temps;
    int ntemps, temps_cap, ntemps_made;
};

static bool is_temp(const struct bw *b, const char *name)
{
    for (int i = 0; i < b->ntemps; i++)
        if (!strcmp(b->temps[i], name))
            return true;
    return false;
}

/* Declares the temporaries among out (not declared yet) with the dtype and
 * shape op type infers for them from its inputs' declared ones. Inputs
 * that are not declared are left to vq_program_add_op to report. */
static int declare_temps(struct bw *b, const char *type, const char *const *in, int nin,
                         const char *const *out, int nout, const vq_attr *attrs, int nattrs)
{
    bool any = false;
    for (int j = 0; j < nout && !any; j++)
        any = is_temp(b, out[j]) && vq__program_find_var(b->p, out[j]) < 0;
    const vq__op_def *def = vq__op_find(type);
    if (!any || !def || nin > VQ__MAX_SLOTS || nout > VQ__MAX_SLOTS)
        return 0;
    vq__meta im[VQ__MAX_SLOTS], om[VQ__MAX_SLOTS];
    for (int i = 0; i < nin; i++) {
        int v = in[i] ? vq__program_find_var(b->p, in[i]) : -1;
        if (v < 0)
            return 0;
        const vq__pvar *d = &b->p->vars[v];
        im[i] = (vq__meta){.dtype = d->dtype, .ndim = d->ndim};
        memcpy(im[i].shape, d->shape, sizeof im[i].shape);
    }
    union {
        max_align_t align;
        unsigned char bytes[VQ__MAX_PARAMS];
    } params;
    int rc = vq__op_infer(def, attrs, nattrs, nin, im, nout, om, &params);
    for (int j = 0; j < nout && rc >= 0; j++)
        if (is_temp(b, out[j]) && vq__program_find_var(b->p, out[j]) < 0)
            rc = vq_program_add_var(b->p, b->block, out[j], om[j].dtype, om[j].ndim, om[j].shape,
                                    false);
    return rc < 0 ? rc : 0;
}

static int emit_op(void *user, const char *type, const char *const *in, int nin,
                   const char *const *out, int nout, const vq_attr *attrs, int nattrs)
{
    struct bw *b = user;
    int rc = 0;
    /* A maker writes only what it was asked for and its own temporaries:
     * anything else (a parameter, a forward output, an incoming gradient)
     * would be overwritten by every run of the program. */
    for (int j = 0; j < nout && rc >= 0; j++) {
        bool asked = is_temp(b, out[j]);
        for (int i = 0; i < b->nwant && !asked; i++)
            asked = b->want[i] && !strcmp(b->want[i], out[j]);
        if (!asked)
            rc = vq__fail(VQ_EINVAL,
                          "the gradient maker of %s writes var %s, not a gradient it was asked "
                          "for (din) nor one of its temporaries (its op %s)",
                          b->maker, out[j], type);
    }
    /* the gradient vars it writes, declared now (like their inputs) */
    for (int j = 0; j < nout && rc >= 0; j++)
        for (int i = 0; i < b->nwant && rc >= 0; i++)
            if (b->want[i] && !strcmp(b->want[i], out[j])) {
                if (!b->wrote[i] && vq__program_find_var(b->p, out[j]) < 0)
                    rc = declare_like(b->p, b->block, out[j], b->want_var[i], false);
                b->wrote[i] = true;
            }
    if (rc >= 0)
        rc = declare_temps(b, type, in, nin, out, nout, attrs, nattrs);
    if (rc >= 0)
        rc = vq_program_add_op(b->p, b->block, type, in, nin, out, nout, attrs, nattrs);
    if (rc < 0 && !b->err)
        b->err = rc;
    return rc < 0 ? rc : 0;
}

/* "@TEMP@<n>" with the pass's suffix: a name no var has, nor a temporary
 * handed out before in this pass (declared or not). */
static const char *make_temp(void *user)
{
    struct bw *b = user;
    if (b->ntemps == b->temps_cap) {
        int cap = b->temps_cap ? 2 * b->temps_cap : 4;
        char **grown = vq__realloc(b->temps, (size_t)cap * sizeof *grown);
        if (!grown) {
            vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
            return NULL;
        }
        b->temps = grown;
        b->temps_cap = cap;
    }
    size_t n = strlen(b->suffix) + 32;
    char *name = vq__malloc(n);
    if (!name) {
        vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
        return NULL;
    }
    do
        snprintf(name, n, "@TEMP@%d%s", b->ntemps_made++, b->suffix);
    while (vq__program_find_var(b->p, name) >= 0);
    return b->temps[b->ntemps++] = name;
}

static void temps_clear(struct bw *b)
{
    for (int i = 0; i < b->ntemps; i++)
        free(b->temps[i]);
    b->ntemps = 0;
}

static char *grad_name(const struct bw *b, const char *var, int part);

/* The name of var v's (finalized) gradient, malloc'd. */
static char *final_name(const struct bw *b, int v)
{
    return b->g[v].alias ? vq__strdup(b->g[v].part[0]) : grad_name(b, b->p->vars[v].name, -1);
}

static char *grad_name(const struct bw *b, const char *var, int part)
{
    size_t n = strlen(var) + strlen(b->suffix) + 32;
    char *s = vq__malloc(n);
    if (s) {
        if (part < 0)
            snprintf(s, n, "%s@GRAD%s", var, b->suffix);
        else
            snprintf(s, n, "%s@GRAD@RENAME@%d%s", var, part, b->suffix);
    }
    return s;
}

/* Sums the partial gradients of v into its gradient (declared here), or
 * copies a single part that has another name. */
static int finalize(struct bw *b, int v)
{
    vq_program *p = b->p;
    struct grad_names *g = &b->g[v];
    if (g->final || g->nparts == 0)
        return 0;
    char *name = grad_name(b, p->vars[v].name, -1);
    if (!name)
        return vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    int rc = 0;
    if (g->nparts == 1 && !strcmp(g->part[0], name)) {
        /* A single gradient was emitted under the final name already. */
    } else if (g->nparts == 1 && b->block != 0) {
        /* Inside a control op's gradient nobody sees the names: the single
         * part is the gradient, no copy. Block 0's keep "v@GRAD". */
        g->alias = true;
    } else if (g->nparts == 1) {
        rc = declare_like(p, b->block, name, v, false);
        if (rc >= 0) /* one part, but named otherwise: copy it */
            rc = vq_program_add_op(p, b->block, "scale", (const char *[]){g->part[0]}, 1,
                                   (const char *const *)&name, 1, NULL, 0);
    } else {
        rc = declare_like(p, b->block, name, v, false);
        const char *acc = g->part[0];
        char *tmp = NULL;
        for (int i = 1; i < g->nparts && rc >= 0; i++) {
            char *next = NULL;
            if (i == g->nparts - 1) {
                next = name;
            } else {
                size_t n = strlen(name) + 24;
                next = vq__malloc(n);
                if (!next) {
                    rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
                    break;
                }
                snprintf(next, n, "%s@SUM@%d", name, i);
                rc = declare_like(p, b->block, next, v, false);
            }
            if (rc >= 0)
                rc = vq_program_add_op(p, b->block, "add", (const char *[]){acc, g->part[i]}, 2,
                                       (const char *const *)&next, 1, NULL, 0);
            if (tmp)
                free(tmp);
            tmp = next == name ? NULL : next;
            acc = next;
        }
        free(tmp);
    }
    free(name);
    g->final = rc >= 0;
    return rc < 0 ? rc : 0;
}

/* Adds name (copied) as a partial gradient of v. */
static int add_part(struct bw *b, int v, const char *name)
{
    struct grad_names *gv = &b->g[v];
    char **parts = vq__realloc(gv->part, ((size_t)gv->nparts + 1) * sizeof *parts);
    if (!parts)
        return vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    gv->part = parts;
    if (!(gv->part[gv->nparts] = vq__strdup(name)))
        return vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    gv->nparts++;
    return 0;
}

static void bw_free(struct bw *b)
{
    for (int v = 0; b->g && v < b->nvars; v++) {
        for (int i = 0; i < b->g[v].nparts; i++)
            free(b->g[v].part[i]);
        free(b->g[v].part);
    }
    free(b->g);
    free(b->requires);
    free(b->needed);
    free(b->fwd);
    temps_clear(b);
    free(b->temps);
}

static int bw_alloc(struct bw *b, vq_program *p, int block, const char *suffix, int nfwd)
{
    *b = (struct bw){.p = p, .block = block, .suffix = suffix, .nvars = p->nvars};
    b->requires = vq__calloc((size_t)b->nvars + 1, sizeof *b->requires);
    b->needed = vq__calloc((size_t)b->nvars + 1, sizeof *b->needed);
    b->g = vq__calloc((size_t)b->nvars + 1, sizeof *b->g);
    b->fwd = vq__malloc(((size_t)nfwd + 1) * sizeof *b->fwd);
    if (!b->requires || !b->needed || !b->g || !b->fwd) {
        bw_free(b);
        return vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    }
    b->nfwd = nfwd;
    return 0;
}

/* Appends x to the list v (n used of *cap) unless it is there. */
static int reads_add(int **v, int *n, int *cap, int x)
{
    for (int j = 0; j < *n; j++)
        if ((*v)[j] == x)
            return 0;
    if (*n == *cap) {
        int *nv = vq__realloc(*v, (size_t)(*cap *= 2) * sizeof *nv);
        if (!nv)
            return vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
        *v = nv;
    }
    (*v)[(*n)++] = x;
    return 0;
}

/* Block blk is one of control op op's blocks. */
static bool op_block(const vq__pop *op, int blk)
{
    for (int a = 0; a < op->nattrs; a++)
        if (op->attrs[a].type == VQ_ATTR_INT && strstr(op->attrs[a].name, "_block") &&
            op->attrs[a].i == blk)
            return true;
    return false;
}

/* The vars an op reads: its inputs, and for a cond or while the vars of
 * enclosing blocks its blocks read (a cond's outputs that name such vars
 * included), as the executor finds them. *out is malloc'd. */
static int op_reads(const vq_program *p, const vq__pop *op, int **out, int *n)
{
    int cap = op->nin + 8;
    int *v = vq__malloc((size_t)cap * sizeof *v);
    if (!v)
        return vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    memcpy(v, op->in, (size_t)op->nin * sizeof *v);
    *n = op->nin;
    int rc = 0;
    for (int a = 0; is_control(op) && a < op->nattrs && rc == 0; a++) {
        const vq_attr *at = &op->attrs[a];
        if (at->type == VQ_ATTR_INT && strstr(at->name, "_block") && at->i > 0 &&
            at->i < p->nblocks) {
            const vq__block *bb = &p->blocks[at->i];
            for (int k = 0; k < bb->nops && rc == 0; k++) {
                int inner_n = 0, *inner = NULL;
                if ((rc = op_reads(p, &p->ops[bb->ops[k]], &inner, &inner_n)) < 0)
                    break;
                for (int i = 0; i < inner_n && rc == 0; i++)
                    if (p->vars[inner[i]].block != at->i)
                        rc = reads_add(&v, n, &cap, inner[i]);
                free(inner);
            }
        } else if (at->type == VQ_ATTR_STRINGS &&
                   (!strcmp(at->name, "then_outputs") || !strcmp(at->name, "else_outputs"))) {
            for (int i = 0; i < at->n && rc == 0; i++) {
                int x = vq__program_find_var(p, at->strings[i]);
                if (x >= 0 && !op_block(op, p->vars[x].block)) /* from outside */
                    rc = reads_add(&v, n, &cap, x);
            }
        }
    }
    if (rc < 0) {
        free(v);
        return rc;
    }
    *out = v;
    return 0;
}

static int bw_ops(struct bw *b);

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
        if (at.type == VQ_ATTR_INT && strstr(at.name, "_block") && at.i > 0 &&
            at.i < p->nblocks) {
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
        } else if (at.type == VQ_ATTR_STRINGS || (at.type == VQ_ATTR_STRING &&
                                                  !strcmp(at.name, "body_cond"))) {
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
                                   (const char *const *)names + nin, no,
                                   attrs ? attrs : src->attrs, na);
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
    struct copy cp = {.p = p, .re = re, .from = from, .to = to, .nmap = nmap,
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
                          const char *const *seed_name, int nseed, const int *wanted,
                          int nwanted, char **result)
{
    char suffix[32];
    snprintf(suffix, sizeof suffix, "@B%d", nb);
    struct bw sub;
    int n = p->blocks[nb].nops - first;
    int rc = bw_alloc(&sub, p, nb, suffix, n);
    if (rc < 0)
        return rc;
    if (n > 0) /* an empty block's ops is NULL: no offset from it */
        memcpy(sub.fwd, p->blocks[nb].ops + first, (size_t)n * sizeof *sub.fwd);
    for (int i = 0; i < nwanted; i++)
        sub.requires[wanted[i]] = is_float(p->vars[wanted[i]].dtype);
    /* a cond or while reads what its blocks read */
    int **reads = vq__calloc((size_t)n + 1, sizeof *reads), *nreads = vq__calloc((size_t)n + 1, sizeof *nreads);
    if (!reads || !nreads)
        rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    for (int i = 0; i < n && rc == 0; i++)
        rc = op_reads(p, &p->ops[sub.fwd[i]], &reads[i], &nreads[i]);
    for (int i = 0; i < n && rc == 0; i++) {
        const vq__pop *c = &p->ops[sub.fwd[i]];
        bool any = false;
        for (int j = 0; j < nreads[i]; j++)
            any |= sub.requires[reads[i][j]];
        bool has_grad = c->def && (c->def->grad || is_control(c));
        for (int j = 0; j < c->nout; j++)
            if (any && has_grad && is_float(p->vars[c->out[j]].dtype))
                sub.requires[c->out[j]] = true;
    }
    for (int i = 0; i < nseed && rc == 0; i++) {
        int v = seed[i];
        if (v < 0 || !sub.requires[v])
            continue;
        sub.needed[v] = true;
        sub.g[v].expected++;
        rc = add_part(&sub, v, seed_name[i]);
    }
    for (int i = n - 1; i >= 0 && rc == 0; i--) {
        const vq__pop *c = &p->ops[sub.fwd[i]];
        bool flows = false;
        for (int j = 0; j < c->nout; j++)
            flows |= sub.needed[c->out[j]];
        if (!flows)
            continue;
        for (int j = 0; j < nreads[i]; j++)
            if (sub.requires[reads[i][j]]) {
                sub.needed[reads[i][j]] = true;
                sub.g[reads[i][j]].expected++;
            }
    }
    for (int i = 0; reads && i < n; i++)
        free(reads[i]);
    free(reads);
    free(nreads);
    if (rc == 0)
        rc = bw_ops(&sub);
    for (int i = 0; i < nwanted && rc == 0; i++) {
        int v = wanted[i];
        if ((rc = finalize(&sub, v)) < 0)
            break;
        if (!(result[i] = final_name(&sub, v))) {
            rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
            break;
        }
        if (!sub.g[v].final) {
            rc = declare_like(p, nb, result[i], v, false);
            if (rc >= 0)
                rc = vq_program_add_op(p, nb, "zeros_like", (const char *[]){p->vars[v].name},
                                       1, (const char *const *)&result[i], 1, NULL, 0);
            rc = rc < 0 ? rc : 0;
        }
    }
    bw_free(&sub);
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
static int cond_backward(struct bw *b, int k, const int *reads, int nreads, const char **din,
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
            return vq__fail(VQ_EINVAL, "vq_append_backward: op %d (cond) is malformed (prepare "
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
        rc = block_backward(p, nb[br], first, seed, seed_name, ns, wanted, nw,
                            results[br]);
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
    int *bi = vq__malloc(((size_t)nc + 1) * sizeof *bi), *bo = vq__malloc(((size_t)nc + 1) * sizeof *bo);
    int rc = 0;
    if (!rq || !bi || !bo)
        rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    for (int v = 0; rc == 0 && v < b->nvars; v++)
        rq[v] = b->requires[v];
    for (int c = 0; rc == 0 && c < nc; c++) {
        bi[c] = vq__program_find_var(p, bin->strings[c]);
        bo[c] = vq__program_find_var(p, bout->strings[c]);
        if (bi[c] >= 0)
            rq[bi[c]] = b->requires[p->ops[opi].in[1 + c]];
    }
    for (bool changed = true; rc == 0 && changed;) {
        changed = false;
        for (int k = 0; k < p->blocks[body].nops && rc == 0; k++) {
            const vq__pop *op = &p->ops[p->blocks[body].ops[k]];
            int *in = NULL, nin = 0;
            if ((rc = op_reads(p, op, &in, &nin)) < 0)
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

/* The backward of while op k of b's block: the forward loop is marked to
 * keep every iteration's carried inputs (save_carries), and a while that
 * replays it (replay_of) runs once per forward iteration, last first. Its
 * body binds the saved inputs (replay_inputs), recomputes that iteration,
 * and differentiates it: it carries the gradient of each float carried
 * value (starting from the gradient of the loop's output, or zeros) and a
 * sum per enclosing var the body reads (starting from zeros); its outputs
 * are the gradients of X and of those vars. */
static int while_backward(struct bw *b, int k, const int *reads, int nreads, const char **din,
                          const char *const *dout)
{
    vq_program *p = b->p;
    int opi = b->fwd[k], pos = 0; /* pos: its place in its block, for replay_of */
    while (pos < p->blocks[b->block].nops && p->blocks[b->block].ops[pos] != opi)
        pos++;
    const vq__pop *op0 = &p->ops[opi];
    int nc = op0->nout, body = -1, cond_var = op0->in[0];
    const vq_attr *bin = NULL, *bout = NULL;
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
        if (dout[j])
            return vq__fail(VQ_ENOSYS,
                            "vq_append_backward: op %d (while): the loss depends on its "
                            "output %s, which stacks stack_outputs[%d] %s over the "
                            "iterations; autodiff does not differentiate through "
                            "stack_outputs (compute the loss from carried values)",
                            k, p->vars[op0->out[j]].name, j - nc, stack_name(op0, j - nc));
    if (body <= 0 || body >= p->nblocks || !bin || !bout || bin->n != nc || bout->n != nc ||
        op0->nin != 1 + nc || nreads < 1 + nc)
        return vq__fail(VQ_EINVAL, "vq_append_backward: op %d (while) is malformed (prepare "
                                   "the program to see why)",
                        k);
    vq_attr save = VQ_ATTR_B("save_carries", true);
    int rc = vq__pop_attr_set(p, opi, &save);
    if (rc < 0)
        return rc;
    /* setting it may have moved the op's attributes */
    op0 = &p->ops[opi];
    for (int a = 0; a < op0->nattrs; a++) {
        if (!strcmp(op0->attrs[a].name, "body_inputs"))
            bin = &op0->attrs[a];
        else if (!strcmp(op0->attrs[a].name, "body_outputs"))
            bout = &op0->attrs[a];
    }
    int nb = vq_program_add_block(p, b->block);
    if (nb < 0)
        return nb;
    char re[32];
    snprintf(re, sizeof re, "@RE%d", nb);
    /* carried gradients: one per carried value that depends on what b
     * differentiates; sums: one per other read (reads[1 + nc ...], the
     * vars the body reads from outside) */
    int nsum = nreads - 1 - nc, ncarry = 0;
    int n = nc + nsum;
    char **nm = vq__calloc((size_t)(5 * n + 1), sizeof *nm); /* replay, in, out, init, unused */
    int *from = vq__malloc(((size_t)nc + 1) * sizeof *from);
    int *wanted = vq__malloc(((size_t)n + 1) * sizeof *wanted), *seed = vq__malloc(((size_t)nc + 1) * sizeof *seed);
    const char **seed_name = vq__malloc(((size_t)nc + 1) * sizeof *seed_name);
    char **result = vq__calloc((size_t)n + 1, sizeof *result);
    bool *carried = vq__calloc((size_t)nc + 1, sizeof *carried);
    if (!nm || !from || !wanted || !seed || !seed_name || !result || !carried) {
        rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
        goto out;
    }
    char **replay = nm, **gin = nm + n, **gout = nm + 2 * n, **ginit = nm + 3 * n;
    rc = carried_requires(b, opi, body, bin, bout, nc, carried);
    /* the replayed inputs */
    for (int c = 0; c < nc && rc == 0; c++) {
        int v = vq__program_find_var(p, bin->strings[c]);
        size_t len = strlen(bin->strings[c]) + 40;
        if (v < 0 || !(replay[c] = vq__malloc(len))) {
            rc = vq__fail(v < 0 ? VQ_EINVAL : VQ_ENOMEM, "vq_append_backward: op %d (while): "
                                                         "body input %s",
                          k, bin->strings[c]);
            break;
        }
        snprintf(replay[c], len, "%s@REPLAY%d", bin->strings[c], nb);
        from[c] = v;
        rc = declare_like(p, nb, replay[c], v, false);
        ncarry += carried[c];
    }
    int first = 0;
    if (rc >= 0)
        rc = copy_block(p, body, nb, re, from, (const char *const *)replay, nc, &first);
    /* the loop's own carried gradients and sums, and their initial values */
    int nl = 0; /* loop-carried entries: carried float values, then sums */
    for (int i = 0; i < n && rc >= 0; i++) {
        bool isc = i < nc;
        if (isc && !carried[i])
            continue;
        int v = isc ? vq__program_find_var(p, bin->strings[i]) : reads[1 + i];
        if (!isc && !din[1 + i])
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
            int o = vq__program_find_var(p, bout->strings[i]);
            seed[nl] = copied_var(p, o, body, re);
            seed_name[nl] = gin[nl];
            wanted[nl] = vq__program_find_var(p, replay[i]);
            /* initial: the gradient of the loop's output, or zeros */
            int out_v = p->ops[opi].out[i];
            if (dout[i]) {
                free(ginit[nl]);
                ginit[nl] = vq__strdup(dout[i]);
                rc = ginit[nl] ? 0 : vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
            } else {
                rc = zeros_var(p, b->block, ginit[nl], out_v);
            }
        } else {
            wanted[nl] = v;
            rc = zeros_var(p, b->block, ginit[nl], v);
        }
        nl++;
        rc = rc < 0 ? rc : 0;
    }
    if (rc >= 0)
        rc = block_backward(p, nb, first, seed, seed_name, ncarry, wanted, nl, result);
    /* the body's outputs: the input gradients, and the sums grown by this
     * iteration's part */
    for (int i = 0; i < nl && rc >= 0; i++) {
        int v = vq__program_find_var(p, gin[i]), r = vq__program_find_var(p, result[i]);
        bool own = r >= 0 && p->vars[r].block == nb; /* a var of the body... */
        for (int j = 0; j < nl && own; j++)
            own = strcmp(result[i], gin[j]) != 0; /* ...that no iteration binds */
        if (i < ncarry && own) { /* it carries on as it is */
            free(gout[i]);
            if (!(gout[i] = vq__strdup(result[i])))
                rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
            continue;
        }
        if ((rc = declare_like(p, nb, gout[i], v, false)) < 0)
            break;
        if (i < ncarry)
            rc = vq_program_add_op(p, nb, "scale", (const char *[]){result[i]}, 1,
                                   (const char *[]){gout[i]}, 1, NULL, 0);
        else
            rc = vq_program_add_op(p, nb, "add", (const char *[]){gin[i], result[i]}, 2,
                                   (const char *[]){gout[i]}, 1, NULL, 0);
    }
    /* the body's predicate, which a replaying loop does not read */
    char bc[48];
    snprintf(bc, sizeof bc, "while@PRED%d", nb);
    if (rc >= 0 && (rc = vq_program_add_var(p, nb, bc, VQ_BOOL, 0, NULL, false)) >= 0)
        rc = vq_program_add_op(p, nb, "logical_not", (const char *[]){p->vars[cond_var].name}, 1,
                               (const char *[]){bc}, 1, NULL, 0);
    /* the replaying while: Out = gradients of the carried X (those wanted,
     * others into vars nobody reads) and of the enclosing reads */
    if (rc >= 0) {
        const char **xin = vq__malloc(((size_t)nl + 2) * sizeof *xin);
        const char **outn = vq__malloc(((size_t)nl + 1) * sizeof *outn);
        char **junk = nm + 4 * n;
        if (!xin || !outn) {
            rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
        } else {
            xin[0] = p->vars[cond_var].name;
            int j = 0;
            for (int i = 0; i < n && rc >= 0; i++) {
                bool isc = i < nc;
                if ((isc && !carried[i]) || (!isc && !din[1 + i]))
                    continue;
                xin[1 + j] = ginit[j];
                if (din[1 + i]) {
                    outn[j] = din[1 + i];
                } else {
                    /* a carried value whose gradient nobody wants */
                    size_t len = strlen(ginit[j]) + 16;
                    if (!(junk[j] = vq__malloc(len))) {
                        rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
                        break;
                    }
                    snprintf(junk[j], len, "%s@UNUSED", ginit[j]);
                    int v = vq__program_find_var(p, gin[j]);
                    rc = declare_like(p, b->block, junk[j], v, false);
                    outn[j] = junk[j];
                }
                j++;
            }
            if (rc >= 0 && nl > 0) {
                vq_attr at[7] = {VQ_ATTR_I("body_block", nb),
                                 VQ_ATTR_SS("body_inputs", (const char *const *)gin, nl),
                                 VQ_ATTR_SS("body_outputs", (const char *const *)gout, nl),
                                 VQ_ATTR_S("body_cond", bc),
                                 VQ_ATTR_I("replay_of", pos),
                                 VQ_ATTR_SS("replay_inputs", (const char *const *)replay, nc)};
                rc = vq_program_add_op(p, b->block, "while", xin, 1 + nl, outn, nl, at, 6);
            }
        }
        free(xin);
        free(outn);
    }
out:
    if (nm)
        for (int i = 0; i < 5 * n + 1; i++)
            free(nm[i]);
    free(nm);
    free(from);
    free(wanted);
    free(seed);
    free(seed_name);
    names_free(result, n);
    free(carried);
    return rc < 0 ? rc : 0;
}

/* The reverse loop of pass b: its fwd ops in reverse, each with a gradient
 * flowing into an output gets its gradient ops (b->requires, b->needed and
 * the expected part counts are set). */
static int bw_ops(struct bw *b)
{
    vq_program *p = b->p;
    int rc = 0;
    for (int k = b->nfwd - 1; k >= 0 && rc == 0; k--) {
        /* Copy what we need: emitting ops moves p->ops. */
        const vq__pop *op0 = &p->ops[b->fwd[k]];
        int nin = 0, nout = op0->nout, *in = NULL, out[VQ__MAX_SLOTS];
        if ((rc = op_reads(p, op0, &in, &nin)) < 0)
            break;
        op0 = &p->ops[b->fwd[k]];
        memcpy(out, op0->out, (size_t)nout * sizeof *out);
        bool flows = false, wants = false;
        for (int j = 0; j < nout; j++)
            flows |= b->needed[out[j]];
        for (int i = 0; i < nin; i++)
            wants |= b->requires[in[i]];
        if (!flows || !wants) {
            free(in);
            continue;
        }
        bool control = is_control(op0);
        if (!control && (!op0->def || !op0->def->grad)) {
            rc = vq__fail(VQ_EINVAL, "vq_append_backward: op %d (%s) has no gradient, but the "
                                     "loss depends on its inputs",
                          k, op0->type);
            free(in);
            break;
        }
        const char **dout = vq__calloc((size_t)nout + 1, sizeof *dout);
        const char **din = vq__calloc((size_t)nin + 1, sizeof *din);
        const char **in_n = vq__calloc((size_t)nin + 1, sizeof *in_n);
        const char *out_n[VQ__MAX_SLOTS];
        char **owned = vq__calloc((size_t)nin + 1, sizeof *owned);
        char *dout_owned[VQ__MAX_SLOTS] = {0};
        if (!dout || !din || !in_n || !owned)
            rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
        for (int j = 0; j < nout && rc == 0; j++) {
            int v = out[j];
            out_n[j] = p->vars[v].name;
            dout[j] = NULL;
            if (b->needed[v] && (rc = finalize(b, v)) == 0 && b->g[v].final &&
                !(dout[j] = dout_owned[j] = final_name(b, v)))
                rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
        }
        for (int i = 0; i < nin && rc == 0; i++) {
            int v = in[i];
            in_n[i] = p->vars[v].name;
            din[i] = NULL;
            if (!b->requires[v])
                continue;
            struct grad_names *gv = &b->g[v];
            owned[i] = grad_name(b, p->vars[v].name, gv->expected == 1 ? -1 : gv->nparts);
            if (!owned[i] || (rc = add_part(b, v, owned[i])) < 0) {
                rc = rc < 0 ? rc : vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
                break;
            }
            /* a control op's gradient writes it below; a gradient maker's
             * op declares it when it writes it (emit_op) */
            if (control)
                rc = declare_like(p, b->block, owned[i], v, false);
            din[i] = owned[i];
            if (gv->expected == 1)
                gv->final = true;
        }
        if (rc >= 0 && control && !strcmp(p->ops[b->fwd[k]].type, "cond")) {
            rc = cond_backward(b, k, in, nin, din, dout);
        } else if (rc >= 0 && control) {
            rc = while_backward(b, k, in, nin, din, dout);
        } else if (rc >= 0) {
            op0 = &p->ops[b->fwd[k]];
            vq__grad gr = {.def = op0->def,
                           .in = in_n,
                           .nin = nin,
                           .out = out_n,
                           .nout = nout,
                           .din = din,
                           .dout = dout,
                           .attrs = op0->attrs,
                           .nattrs = op0->nattrs,
                           .emit = emit_op,
                           .temp = make_temp,
                           .user = b};
            bool *wrote = vq__calloc((size_t)nin + 1, sizeof *wrote);
            if (!wrote) {
                rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
            } else {
                b->want = din;
                b->maker = op0->def->type;
                b->want_var = in;
                b->wrote = wrote;
                b->nwant = nin;
                rc = op0->def->grad(&gr);
                b->want = NULL;
                b->nwant = 0;
                temps_clear(b);
            }
            if (rc >= 0 && b->err)
                rc = b->err;
            /* An input the maker left without a gradient (one the op treats
             * as a constant, like batch_norm's running statistics) gets
             * none from this op: its part is dropped. */
            for (int i = 0; rc >= 0 && i < nin; i++) {
                if (!din[i] || wrote[i])
                    continue;
                struct grad_names *gv = &b->g[in[i]];
                for (int q = gv->nparts - 1; q >= 0; q--)
                    if (!strcmp(gv->part[q], din[i])) {
                        free(gv->part[q]);
                        memmove(gv->part + q, gv->part + q + 1,
                                (size_t)(gv->nparts - q - 1) * sizeof *gv->part);
                        gv->nparts--;
                        break;
                    }
                gv->expected--;
                gv->final = false;
            }
            free(wrote);
        }
        if (rc < 0) {
            char msg[200];
            snprintf(msg, sizeof msg, "%s", vq_errmsg());
            const char *type = p->ops[b->fwd[k]].type, *m = msg;
            if (!strncmp(m, "vq_append_backward: ", 20))
                m += 20;
            if (strncmp(m, "op ", 3)) /* not named by a nested pass already */
                rc = vq__fail(rc, "vq_append_backward: op %d (%s): %s", k, type, m);
        }
        for (int i = 0; owned && i < nin; i++)
            free(owned[i]);
        for (int j = 0; j < nout; j++)
            free(dout_owned[j]);
        free(owned);
        free(dout);
        free(din);
        free(in_n);
        free(in);
        rc = rc < 0 ? rc : 0;
    }
    return rc;
}

/* Paddle's renaming, for vars that block 0's kernel ops write more than
 * once (`y = relu(y)`, `h = h + x`): each version but the last gets a name
 * of its own, "<var>@V<k>" for the k-th write, declared like the var, and
 * the ops that read a version read that name; the last write keeps the
 * var's name, so fetches and the final value are unchanged. Autodiff then
 * sees each var written once. A version stops gradients when the var does
 * (stop_gradient or no_grad). Persistable vars are left alone (an update of
 * a parameter is not part of a differentiable forward: the check after
 * says so), and so are vars a cond or while reads or writes (their blocks
 * name them): VQ_ENOSYS naming the var and the op. */
static int rename_versions(vq_program *p, const char *const *no_grad, int nno_grad)
{
    const int nvars = p->nvars, nops = p->blocks[0].nops;
    int *writes = vq__calloc((size_t)nvars + 1, sizeof *writes);
    int *cur = vq__malloc(((size_t)nvars + 1) * sizeof *cur);
    int rc = writes && cur ? 0 : vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    bool any = false;
    for (int k = 0; k < nops && rc == 0; k++) {
        const vq__pop *op = &p->ops[p->blocks[0].ops[k]];
        for (int j = 0; j < op->nout; j++) {
            int v = op->out[j];
            if (!p->vars[v].persistable && p->vars[v].block == 0)
                any |= ++writes[v] > 1;
        }
    }
    for (int k = 0; k < nops && rc == 0 && any; k++) {
        const vq__pop *op = &p->ops[p->blocks[0].ops[k]];
        if (!is_control(op))
            continue;
        int *in = NULL, nin = 0;
        if ((rc = op_reads(p, op, &in, &nin)) < 0)
            break;
        for (int i = 0; i < nin + op->nout && rc == 0; i++) {
            int v = i < nin ? in[i] : op->out[i - nin];
            if (writes[v] > 1)
                rc = vq__fail(VQ_ENOSYS,
                              "vq_append_backward: var %s is written %d times and op %d (%s) "
                              "reads or writes it; autodiff renames the versions of vars that "
                              "kernel ops write, not those a cond's or while's blocks see: give "
                              "each version its own name",
                              p->vars[v].name, writes[v], k, op->type);
        }
        free(in);
    }
    int *multi = rc == 0 ? vq__calloc((size_t)nvars + 1, sizeof *multi) : NULL;
    if (rc == 0 && !multi)
        rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    for (int v = 0; v < nvars && rc == 0; v++) {
        cur[v] = v;
        multi[v] = writes[v] > 1; /* writes[v] counts down: writes still to come */
    }
    for (int k = 0; k < nops && rc == 0 && any; k++) {
        vq__pop *op = &p->ops[p->blocks[0].ops[k]];
        for (int i = 0; i < op->nin; i++)
            op->in[i] = cur[op->in[i]]; /* the version written last so far */
        for (int j = 0; j < op->nout && rc == 0; j++) {
            int v = op->out[j];
            if (!multi[v])
                continue;
            if (--writes[v] == 0) { /* the last write: the var's own name */
                cur[v] = v;
                continue;
            }
            bool stop = p->vars[v].stop_gradient;
            for (int i = 0; i < nno_grad; i++)
                stop |= no_grad[i] && !strcmp(no_grad[i], p->vars[v].name);
            char name[300];
            int nv;
            /* k-th write: count the versions made so far by name */
            for (int ver = 1;; ver++) {
                snprintf(name, sizeof name, "%s@V%d", p->vars[v].name, ver);
                if (vq__program_find_var(p, name) < 0)
                    break;
            }
            if ((rc = declare_like(p, 0, name, v, false)) < 0)
                break;
            nv = vq__program_find_var(p, name);
            p->vars[nv].stop_gradient = stop;
            op->out[j] = cur[v] = nv;
        }
    }
    free(multi);
    free(writes);
    free(cur);
    return rc;
}

VQ_API int vq_append_backward(vq_program *p, const char *loss, const char *const *no_grad,
                              int nno_grad)
{
    if (!p || !loss || nno_grad < 0 || (nno_grad && !no_grad))
        return vq__fail(VQ_EINVAL, "vq_append_backward: bad argument");
    int L = vq__program_find_var(p, loss);
    if (L < 0)
        return vq__fail(VQ_EINVAL, "vq_append_backward: no var %s", loss);
    if (!is_float(p->vars[L].dtype) || vq__numel(p->vars[L].ndim, p->vars[L].shape) != 1)
        return vq__fail(VQ_EINVAL,
                        "vq_append_backward: loss %s must be a float var with one element "
                        "(a known shape)",
                        loss);
    for (int i = 0; i < nno_grad; i++)
        if (no_grad[i] && vq__program_find_var(p, no_grad[i]) < 0)
            return vq__fail(VQ_EINVAL, "vq_append_backward: no_grad var %s does not exist",
                            no_grad[i]);
    int rc = rename_versions(p, no_grad, nno_grad);
    if (rc < 0)
        return rc;
    const int nvars = p->nvars, nops = p->blocks[0].nops;
    struct bw b;
    int nparams = 0;
    rc = bw_alloc(&b, p, 0, "", nops);
    if (rc < 0)
        return rc;
    int *writer = vq__malloc(((size_t)nvars + 1) * sizeof *writer);
    bool *stop = vq__calloc((size_t)nvars + 1, sizeof *stop);
    if (!writer || !stop) {
        rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
        goto out;
    }
    memcpy(b.fwd, p->blocks[0].ops, (size_t)nops * sizeof *b.fwd);
    for (int v = 0; v < nvars; v++) {
        writer[v] = -1;
        b.requires[v] = p->vars[v].persistable && is_float(p->vars[v].dtype);
    }
    for (int i = 0; i < nno_grad; i++) {
        int v = no_grad[i] ? vq__program_find_var(p, no_grad[i]) : -1;
        if (v < 0) {
            rc = vq__fail(VQ_EINVAL, "vq_append_backward: no_grad var %s does not exist",
                          no_grad[i] ? no_grad[i] : "(NULL)");
            goto out;
        }
        b.requires[v] = false;
        stop[v] = true;
    }
    for (int v = 0; v < nvars; v++) {
        if (p->vars[v].stop_gradient) {
            b.requires[v] = false;
            stop[v] = true;
        }
        stop[v] |= !b.requires[v] && p->vars[v].persistable;
    }
    /* Forward: who writes what, and what is computed from parameters (a
     * cond or while reads what its blocks read). */
    for (int k = 0; k < nops && rc == 0; k++) {
        const vq__pop *op = &p->ops[b.fwd[k]];
        int *in = NULL, nin = 0;
        if ((rc = op_reads(p, op, &in, &nin)) < 0)
            break;
        op = &p->ops[b.fwd[k]];
        bool any = false;
        for (int i = 0; i < nin; i++)
            any |= b.requires[in[i]];
        free(in);
        bool has_grad = op->def && (op->def->grad || is_control(op));
        for (int j = 0; j < op->nout && rc == 0; j++) {
            int v = op->out[j];
            /* A persistable var updated from a parameter's descendants is
             * a second write (its old value is gone); one that is not a
             * float (an RNG state, a counter) carries no gradient, so its
             * update does not matter here. */
            if (writer[v] >= 0)
                rc = vq__fail(VQ_ENOSYS,
                              "vq_append_backward: var %s is written by op %d and op %d (a "
                              "persistable var, or one a sub-block declares): autodiff renames "
                              "only block 0's temporaries; give each version its own var",
                              p->vars[v].name, writer[v], k);
            else if (p->vars[v].persistable && any && is_float(p->vars[v].dtype))
                rc = vq__fail(VQ_ENOSYS,
                              "vq_append_backward: persistable var %s is updated (op %d) from "
                              "values computed from parameters; autodiff differentiates the "
                              "forward computation, not updates of parameters: give the result "
                              "its own var",
                              p->vars[v].name, k);
            writer[v] = k;
            if (any && has_grad && is_float(p->vars[v].dtype) && !stop[v])
                b.requires[v] = true;
        }
    }
    if (rc)
        goto out;
    if (!b.requires[L]) {
        rc = vq__fail(VQ_EINVAL, "vq_append_backward: loss %s does not depend on any parameter",
                      loss);
        goto out;
    }
    /* Backward reachability from the loss, and how many partial gradients
     * each var will get. */
    b.needed[L] = true;
    for (int k = nops - 1; k >= 0 && rc == 0; k--) {
        const vq__pop *op = &p->ops[b.fwd[k]];
        bool flows = false;
        for (int j = 0; j < op->nout; j++)
            flows |= b.needed[op->out[j]];
        if (!flows)
            continue;
        int *in = NULL, nin = 0;
        if ((rc = op_reads(p, op, &in, &nin)) < 0)
            break;
        for (int i = 0; i < nin; i++)
            if (b.requires[in[i]]) {
                b.needed[in[i]] = true;
                b.g[in[i]].expected++;
            }
        free(in);
    }
    if (rc)
        goto out;
    /* The seed: d loss / d loss = 1. */
    {
        char *lg = grad_name(&b, loss, -1);
        vq__pvar d = p->vars[L];
        vq_attr a[3] = {VQ_ATTR_IS("shape", d.shape, d.ndim),
                        VQ_ATTR_S("dtype", vq_dtype_name(d.dtype)), VQ_ATTR_F("value", 1.0)};
        rc = lg ? declare_like(p, 0, lg, L, false) : VQ_ENOMEM;
        if (rc >= 0)
            rc = vq_program_add_op(p, 0, "fill_constant", NULL, 0, (const char *const *)&lg, 1,
                                   a, 3);
        free(lg);
        if (rc < 0)
            goto out;
        rc = 0;
        b.g[L].final = true;
    }
    rc = bw_ops(&b);
    /* Leaves (parameters): sum their parts too. */
    for (int v = 0; v < nvars && rc == 0; v++)
        if (b.needed[v] && b.requires[v] && writer[v] < 0) {
            rc = finalize(&b, v);
            nparams += p->vars[v].persistable && b.g[v].final;
        }
out:
    bw_free(&b);
    free(writer);
    free(stop);
    return rc < 0 ? rc : nparams;
}

/* ---- optimizers ---- */

/* Declares state var `name` like parameter v in both programs and appends a
 * zero fill to startup. */
static int add_state(vq_program *main, vq_program *startup, int v, const char *suffix,
                     vq_dtype dt, int ndim, const int64_t *shape, char *name, size_t size)
{
    snprintf(name, size, "%s%s", main->vars[v].name, suffix);
    int rc = vq_program_add_var(main, 0, name, dt, ndim, shape, true);
    if (rc >= 0 && vq__program_find_var(startup, name) < 0)
        rc = vq_program_add_var(startup, 0, name, dt, ndim, shape, true);
    vq_attr a[3] = {VQ_ATTR_IS("shape", shape, ndim), VQ_ATTR_S("dtype", vq_dtype_name(dt)),
                    VQ_ATTR_F("value", 0)};
    if (rc >= 0)
        rc = vq_program_add_op(startup, 0, "fill_constant", NULL, 0,
                               (const char *const[]){name}, 1, a, 3);
    return rc < 0 ? rc : 0;
}

/* A scalar constant of dtype dt named name in main (a fill_constant op at
 * this point of the program). */
static int scalar_const(vq_program *main, const char *name, vq_dtype dt, double value)
{
    if (vq__program_find_var(main, name) >= 0)
        return 0;
    int rc = vq_program_add_var(main, 0, name, dt, 0, NULL, false);
    vq_attr a[3] = {VQ_ATTR_IS("shape", NULL, 0), VQ_ATTR_S("dtype", vq_dtype_name(dt)),
                    VQ_ATTR_F("value", value)};
    if (rc >= 0)
        rc = vq_program_add_op(main, 0, "fill_constant", NULL, 0, (const char *[]){name}, 1, a,
                               3);
    return rc < 0 ? rc : 0;
}

/* out = type(in...) into a new var like var v of main (dtype dt, v's shape
 * unless scalar). */
static int opt_op(vq_program *main, const char *type, const char *const *in, int nin,
                  const char *out, int v, vq_dtype dt, bool scalar, const vq_attr *attrs,
                  int nattrs)
{
    vq__pvar d = main->vars[v];
    int rc = vq_program_add_var(main, 0, out, dt, scalar ? 0 : d.ndim, d.shape, false);
    if (rc >= 0)
        rc = vq_program_add_op(main, 0, type, in, nin, (const char *[]){out}, 1, attrs, nattrs);
    return rc < 0 ? rc : 0;
}

/* *grad (malloc'd) becomes a copy of name. */
static int grad_becomes(char **grad, const char *name)
{
    char *c = vq__strdup(name);
    if (!c)
        return vq__fail(VQ_ENOMEM, "vq_optimizer_minimize: out of memory");
    free(*grad);
    *grad = c;
    return 0;
}

/* The gradient of each updated parameter after clipping and weight decay
 * (opt's controls): grad[i] (malloc'd names, in place of "<w>@GRAD"). */
static int opt_controls(vq_program *main, const vq_optimizer *opt, const int *params, int n,
                        char **grad)
{
    int rc = 0;
    char a[320], b[320];
    for (int i = 0; i < n && rc == 0 && opt->clip_value > 0; i++) {
        vq_dtype dt = main->vars[params[i]].dtype;
        snprintf(a, sizeof a, "clip_value@lo@%s", vq_dtype_name(dt));
        snprintf(b, sizeof b, "clip_value@hi@%s", vq_dtype_name(dt));
        if ((rc = scalar_const(main, a, dt, -opt->clip_value)) < 0 ||
            (rc = scalar_const(main, b, dt, opt->clip_value)) < 0)
            break;
        char lo[320], hi[320];
        snprintf(lo, sizeof lo, "%s@CLIPLO", grad[i]);
        snprintf(hi, sizeof hi, "%s@CLIP", grad[i]);
        if ((rc = opt_op(main, "maximum", (const char *[]){grad[i], a}, 2, lo, params[i], dt,
                         false, NULL, 0)) < 0 ||
            (rc = opt_op(main, "minimum", (const char *[]){lo, b}, 2, hi, params[i], dt, false,
                         NULL, 0)) < 0)
            break;
        rc = grad_becomes(&grad[i], hi);
    }
    if (rc == 0 && opt->clip_norm > 0 && n > 0) {
        /* total = sqrt(sum of every gradient's squares), in f64 */
        char acc[320] = "";
        for (int i = 0; i < n && rc == 0; i++) {
            vq_dtype dt = main->vars[params[i]].dtype;
            char sq[320], s[320], s64[320], sum[320];
            snprintf(sq, sizeof sq, "%s@SQ", grad[i]);
            snprintf(s, sizeof s, "%s@SQSUM", grad[i]);
            snprintf(s64, sizeof s64, "%s@SQSUM64", grad[i]);
            snprintf(sum, sizeof sum, "clip_norm@sum@%d", i);
            vq_attr f64 = VQ_ATTR_S("dtype", "f64");
            if ((rc = opt_op(main, "mul", (const char *[]){grad[i], grad[i]}, 2, sq, params[i],
                             dt, false, NULL, 0)) < 0 ||
                (rc = opt_op(main, "sum", (const char *[]){sq}, 1, s, params[i], dt, true, NULL,
                             0)) < 0 ||
                (rc = opt_op(main, "cast", (const char *[]){s}, 1, s64, params[i], VQ_F64, true,
                             &f64, 1)) < 0)
                break;
            if (i > 0)
                rc = opt_op(main, "add", (const char *[]){acc, s64}, 2, sum, params[i], VQ_F64,
                            true, NULL, 0);
            snprintf(acc, sizeof acc, "%s", i > 0 ? sum : s64);
        }
        vq_attr eps[2] = {VQ_ATTR_F("scale", 1), VQ_ATTR_F("bias", 1e-6)};
        if (rc == 0)
            rc = scalar_const(main, "clip_norm@max", VQ_F64, opt->clip_norm);
        if (rc == 0)
            rc = scalar_const(main, "clip_norm@one", VQ_F64, 1);
        if (rc == 0)
            rc = opt_op(main, "sqrt", (const char *[]){acc}, 1, "clip_norm@total", params[0],
                        VQ_F64, true, NULL, 0);
        if (rc == 0)
            rc = opt_op(main, "scale", (const char *[]){"clip_norm@total"}, 1, "clip_norm@den",
                        params[0], VQ_F64, true, eps, 2);
        if (rc == 0)
            rc = opt_op(main, "div", (const char *[]){"clip_norm@max", "clip_norm@den"}, 2,
                        "clip_norm@ratio", params[0], VQ_F64, true, NULL, 0);
        if (rc == 0)
            rc = opt_op(main, "minimum", (const char *[]){"clip_norm@ratio", "clip_norm@one"},
                        2, "clip_norm@coef", params[0], VQ_F64, true, NULL, 0);
        for (int i = 0; i < n && rc == 0; i++) {
            vq_dtype dt = main->vars[params[i]].dtype;
            const char *coef = "clip_norm@coef";
            char cast[320], out[320];
            if (dt != VQ_F64) {
                snprintf(cast, sizeof cast, "clip_norm@coef@%s", vq_dtype_name(dt));
                vq_attr to = VQ_ATTR_S("dtype", vq_dtype_name(dt));
                if (vq__program_find_var(main, cast) < 0 &&
                    (rc = opt_op(main, "cast", (const char *[]){coef}, 1, cast, params[i], dt,
                                 true, &to, 1)) < 0)
                    break;
                coef = cast;
            }
            snprintf(out, sizeof out, "%s@CLIPNORM", grad[i]);
            if ((rc = opt_op(main, "mul", (const char *[]){grad[i], coef}, 2, out, params[i], dt,
                             false, NULL, 0)) < 0)
                break;
            rc = grad_becomes(&grad[i], out);
        }
    }
    for (int i = 0; i < n && rc == 0 && opt->weight_decay > 0 && !opt->decoupled; i++) {
        const char *w = main->vars[params[i]].name;
        vq_dtype dt = main->vars[params[i]].dtype;
        char d[320], out[320];
        snprintf(d, sizeof d, "%s@DECAY", w);
        snprintf(out, sizeof out, "%s@WD", grad[i]);
        vq_attr sc = VQ_ATTR_F("scale", opt->weight_decay);
        if ((rc = opt_op(main, "scale", (const char *[]){w}, 1, d, params[i], dt, false, &sc,
                         1)) < 0 ||
            (rc = opt_op(main, "add", (const char *[]){grad[i], d}, 2, out, params[i], dt, false,
                         NULL, 0)) < 0)
            break;
        rc = grad_becomes(&grad[i], out);
    }
    return rc;
}

/* The name of var src of main (a float scalar) in dtype dt, into out:
 * src itself when it has that dtype, else "<src>@<dt>" (src's shape, []
 * or [1]), cast from it by an op appended to main the first time it is
 * asked for. */
static int scalar_in(vq_program *main, const char *src, vq_dtype dt, char *out, size_t size)
{
    int v = vq__program_find_var(main, src);
    if (main->vars[v].dtype == dt) {
        snprintf(out, size, "%s", src);
        return 0;
    }
    snprintf(out, size, "%s@%s", src, vq_dtype_name(dt));
    if (vq__program_find_var(main, out) >= 0)
        return 0;
    vq_attr to = VQ_ATTR_S("dtype", vq_dtype_name(dt));
    return opt_op(main, "cast", (const char *[]){src}, 1, out, v, dt, false, &to, 1);
}

/* AdamW's decay of parameter w when the learning rate is the var lr:
 * w *= 1 - lr * wd, the factor computed in double from lr (as PyTorch
 * computes it from its float lr) once per run and dtype, then rounded to
 * w's dtype, as PyTorch's mul_ rounds its scalar. */
static int adamw_decay_by_var(vq_program *main, const char *lr, double wd, int w)
{
    char lr64[320], dec[320], factor[320], wds[32];
    int rc = scalar_in(main, lr, VQ_F64, lr64, sizeof lr64);
    /* named for wd too: another vq_optimizer_minimize on the same rate may
     * decay by another amount */
    snprintf(wds, sizeof wds, "%g", wd);
    if (strtod(wds, NULL) != wd)
        snprintf(wds, sizeof wds, "%.17g", wd);
    snprintf(dec, sizeof dec, "%s@ADAMW_DECAY@%s", lr, wds);
    vq_attr sc[2] = {VQ_ATTR_F("scale", -wd), VQ_ATTR_F("bias", 1)};
    if (rc == 0 && vq__program_find_var(main, dec) < 0)
        rc = opt_op(main, "scale", (const char *[]){lr64}, 1, dec,
                    vq__program_find_var(main, lr64), VQ_F64, false, sc, 2);
    if (rc == 0)
        rc = scalar_in(main, dec, main->vars[w].dtype, factor, sizeof factor);
    const char *name = main->vars[w].name;
    if (rc == 0)
        rc = vq_program_add_op(main, 0, "mul", (const char *const[]){name, factor}, 2,
                               (const char *const[]){name}, 1, NULL, 0);
    return rc < 0 ? rc : 0;
}

/* The vars not in opt->parameters, as vq_append_backward's no_grad
 * (*out malloc'd, *n of them). */
static int frozen_vars(vq_program *main, const vq_optimizer *opt, const char ***out, int *n)
{
    *out = NULL;
    *n = 0;
    if (!opt->parameters)
        return 0;
    for (int i = 0; i < opt->nparameters; i++) {
        int v = opt->parameters[i] ? vq__program_find_var(main, opt->parameters[i]) : -1;
        if (v < 0 || !main->vars[v].persistable || !is_float(main->vars[v].dtype))
            return vq__fail(VQ_EINVAL, "vq_optimizer_minimize: parameter %s is not a float "
                                       "persistable var of the program",
                            opt->parameters[i] ? opt->parameters[i] : "(NULL)");
    }
    const char **list = vq__malloc(((size_t)main->nvars + 1) * sizeof *list);
    if (!list)
        return vq__fail(VQ_ENOMEM, "vq_optimizer_minimize: out of memory");
    for (int v = 0; v < main->nvars; v++) {
        if (!main->vars[v].persistable || !is_float(main->vars[v].dtype))
            continue;
        bool listed = false;
        for (int i = 0; i < opt->nparameters && !listed; i++)
            listed = !strcmp(opt->parameters[i], main->vars[v].name);
        if (!listed)
            list[(*n)++] = main->vars[v].name;
    }
    *out = list;
    return 0;
}

static int optimizer_minimize(vq_program *main, vq_program *startup, const char *loss,
                              const vq_optimizer *opt)
{
    if (!main || !startup || !loss || !opt)
        return vq__fail(VQ_EINVAL, "vq_optimizer_minimize: NULL argument");
    if ((!opt->learning_rate_var && !(opt->learning_rate >= 0)) ||
        (unsigned)opt->kind > VQ_OPT_ADAM)
        return vq__fail(VQ_EINVAL, "vq_optimizer_minimize: bad kind or learning rate");
    const char *lr_var = opt->learning_rate_var;
    if (lr_var) {
        int v = vq__program_find_var(main, lr_var);
        const vq__pvar *d = v >= 0 ? &main->vars[v] : NULL;
        if (!d || d->block != 0 || !is_float(d->dtype) ||
            !(d->ndim == 0 || (d->ndim == 1 && d->shape[0] == 1)))
            return vq__fail(VQ_EINVAL, "vq_optimizer_minimize: learning_rate_var %s is not a "
                                       "float var of block 0 of main with one element ([] or "
                                       "[1])",
                            lr_var);
    }
    if (!(opt->weight_decay >= 0) || !(opt->clip_value >= 0) || !(opt->clip_norm >= 0) ||
        opt->nparameters < 0 || (opt->nparameters > 0 && !opt->parameters))
        return vq__fail(VQ_EINVAL, "vq_optimizer_minimize: a negative weight_decay, "
                                   "clip_value or clip_norm, or a bad parameter list");
    if (opt->decoupled && opt->kind != VQ_OPT_ADAM)
        return vq__fail(VQ_EINVAL, "vq_optimizer_minimize: decoupled weight decay is AdamW's: "
                                   "kind must be VQ_OPT_ADAM");
    int nvars = main->nvars; /* parameters are declared before the gradients */
    const char **frozen;
    int nfrozen;
    int rc = frozen_vars(main, opt, &frozen, &nfrozen);
    if (rc < 0)
        return rc;
    rc = vq_append_backward(main, loss, frozen, nfrozen);
    free(frozen);
    if (rc < 0)
        return rc;
    /* the parameters with a gradient, and their gradients' names */
    int *params = vq__malloc(((size_t)nvars + 1) * sizeof *params), n = 0;
    char **grad = vq__calloc((size_t)nvars + 1, sizeof *grad);
    if (!params || !grad)
        rc = vq__fail(VQ_ENOMEM, "vq_optimizer_minimize: out of memory");
    for (int v = 0; v < nvars && rc >= 0; v++) {
        if (!main->vars[v].persistable || !is_float(main->vars[v].dtype))
            continue;
        char gname[300];
        snprintf(gname, sizeof gname, "%s@GRAD", main->vars[v].name);
        if (vq__program_find_var(main, gname) < 0)
            continue;
        for (int i = 0; i < main->vars[v].ndim; i++)
            if (main->vars[v].shape[i] < 0)
                rc = vq__fail(VQ_EINVAL, "vq_optimizer_minimize: parameter %s has unknown dims",
                              main->vars[v].name);
        params[n] = v;
        if (rc >= 0 && !(grad[n++] = vq__strdup(gname)))
            rc = vq__fail(VQ_ENOMEM, "vq_optimizer_minimize: out of memory");
    }
    if (rc >= 0)
        rc = opt_controls(main, opt, params, n, grad);
    int updated = 0;
    for (int i = 0; i < n && rc >= 0; i++) {
        int v = params[i];
        char s1[300], s2[300], s3[300];
        vq__pvar d = main->vars[v];
        const char *w = d.name, *g = grad[i];
        /* The rate: the attribute learning_rate (first of the attributes
         * below), or the var as the ops' last input LearningRate, in the
         * parameter's dtype (nattr and nlr drop the one not used). */
        char lr_in[320] = "";
        int nattr = lr_var ? 1 : 0, nlr = lr_var ? 1 : 0;
        if (lr_var)
            rc = scalar_in(main, lr_var, d.dtype, lr_in, sizeof lr_in);
        vq_attr lr = VQ_ATTR_F("learning_rate", opt->learning_rate);
        switch (rc < 0 ? -1 : (int)opt->kind) {
        case VQ_OPT_SGD:
            rc = vq_program_add_op(main, 0, "sgd", (const char *const[]){w, g, lr_in}, 2 + nlr,
                                   (const char *const[]){w}, 1, &lr, 1 - nattr);
            break;
        case VQ_OPT_MOMENTUM: {
            rc = add_state(main, startup, v, "@VELOCITY", d.dtype, d.ndim, d.shape, s1, sizeof s1);
            vq_attr a[3] = {lr, VQ_ATTR_F("mu", opt->mu ? opt->mu : 0.9),
                            VQ_ATTR_B("use_nesterov", opt->nesterov)};
            if (rc >= 0)
                rc = vq_program_add_op(main, 0, "momentum",
                                       (const char *const[]){w, g, s1, lr_in}, 3 + nlr,
                                       (const char *const[]){w, s1}, 2, a + nattr, 3 - nattr);
            break;
        }
        case VQ_OPT_ADAM: {
            int64_t one[1] = {1};
            if (opt->decoupled && opt->weight_decay > 0 && lr_var) {
                rc = adamw_decay_by_var(main, lr_var, opt->weight_decay, v);
            } else if (opt->decoupled && opt->weight_decay > 0) {
                /* AdamW: param *= 1 - lr * wd, then Adam */
                vq_attr sc = VQ_ATTR_F("scale", 1 - opt->learning_rate * opt->weight_decay);
                rc = vq_program_add_op(main, 0, "scale", (const char *const[]){w}, 1,
                                       (const char *const[]){w}, 1, &sc, 1);
            }
            if (rc >= 0)
                rc = add_state(main, startup, v, "@MOMENT1", d.dtype, d.ndim, d.shape, s1,
                               sizeof s1);
            if (rc >= 0)
                rc = add_state(main, startup, v, "@MOMENT2", d.dtype, d.ndim, d.shape, s2,
                               sizeof s2);
            if (rc >= 0)
                rc = add_state(main, startup, v, "@STEP", VQ_I64, 1, one, s3, sizeof s3);
            vq_attr a[4] = {lr, VQ_ATTR_F("beta1", opt->beta1 ? opt->beta1 : 0.9),
                            VQ_ATTR_F("beta2", opt->beta2 ? opt->beta2 : 0.999),
                            VQ_ATTR_F("epsilon", opt->epsilon ? opt->epsilon : 1e-8)};
            if (rc >= 0)
                rc = vq_program_add_op(main, 0, "adam",
                                       (const char *const[]){w, g, s1, s2, s3, lr_in}, 5 + nlr,
                                       (const char *const[]){w, s1, s2, s3}, 4, a + nattr,
                                       4 - nattr);
            break;
        }
        default: break; /* scalar_in failed */
        }
        updated += rc >= 0;
    }
    for (int i = 0; grad && i < n; i++)
        free(grad[i]);
    free(grad);
    free(params);
    return rc < 0 ? rc : updated;
}

/* ---- learning-rate schedules ---- */

static int lr_schedule_build(vq_program *main, vq_program *startup, const char *lr_var,
                             const vq_lr_schedule *s)
{
    if (!main || !startup || !lr_var || !s)
        return vq__fail(VQ_EINVAL, "vq_lr_schedule_build: NULL argument");
    static const char *const kinds[] = {"step", "cosine", "linear", "warmup_cosine"};
    if ((unsigned)s->kind > VQ_LR_WARMUP_COSINE)
        return vq__fail(VQ_EINVAL, "vq_lr_schedule_build: kind %d is not a vq_lr_schedule_kind",
                        (int)s->kind);
    if (s->dtype != VQ_F32 && s->dtype != VQ_F64)
        return vq__fail(VQ_EINVAL, "vq_lr_schedule_build: dtype %d: the learning rate is f32 "
                                   "or f64",
                        (int)s->dtype);
    char step[320];
    snprintf(step, sizeof step, "%s@STEP", lr_var);
    if (vq__program_find_var(main, lr_var) >= 0 || vq__program_find_var(main, step) >= 0)
        return vq__fail(VQ_EINVAL, "vq_lr_schedule_build: main declares %s already",
                        vq__program_find_var(main, lr_var) >= 0 ? lr_var : step);
    /* The kind's numbers only: the op refuses another kind's. */
    vq_attr a[8] = {VQ_ATTR_S("kind", kinds[s->kind]), VQ_ATTR_F("base_lr", s->base_lr),
                    VQ_ATTR_S("dtype", vq_dtype_name(s->dtype))};
    int na = 3;
    if (s->kind == VQ_LR_STEP) {
        a[na++] = VQ_ATTR_I("step_size", s->step_size);
        a[na++] = VQ_ATTR_F("gamma", s->gamma);
    }
    if (s->kind == VQ_LR_LINEAR || s->kind == VQ_LR_WARMUP_COSINE) {
        a[na++] = VQ_ATTR_F("start_factor", s->start_factor);
        a[na++] = VQ_ATTR_F("end_factor", s->end_factor);
        a[na++] = VQ_ATTR_I("total_iters", s->total_iters);
    }
    if (s->kind == VQ_LR_COSINE || s->kind == VQ_LR_WARMUP_COSINE) {
        a[na++] = VQ_ATTR_I("t_max", s->t_max);
        a[na++] = VQ_ATTR_F("eta_min", s->eta_min);
    }
    /* The op's own checks of the numbers, now rather than when main is
     * prepared, before anything is declared: a refused schedule leaves
     * both programs as they were. */
    const vq__op_def *def = vq__op_find("lr_schedule");
    if (!def)
        return vq__fail(VQ_ENOSYS, "vq_lr_schedule_build: no lr_schedule op");
    vq__meta in = {.dtype = VQ_I64, .ndim = 1, .shape = {1}}, out[2];
    union {
        max_align_t align;
        unsigned char bytes[VQ__MAX_PARAMS];
    } params;
    int rc = vq__op_infer(def, a, na, 1, &in, 2, out, &params);
    if (rc < 0)
        return rc;
    int64_t one[1] = {1};
    vq_attr zero[3] = {VQ_ATTR_IS("shape", one, 1), VQ_ATTR_S("dtype", "i64"),
                       VQ_ATTR_F("value", 0)};
    rc = vq_program_add_var(main, 0, lr_var, s->dtype, 0, NULL, false);
    if (rc >= 0)
        rc = vq_program_add_var(main, 0, step, VQ_I64, 1, one, true);
    if (rc >= 0 && vq__program_find_var(startup, step) < 0)
        rc = vq_program_add_var(startup, 0, step, VQ_I64, 1, one, true);
    if (rc >= 0)
        rc = vq_program_add_op(startup, 0, "fill_constant", NULL, 0, (const char *const[]){step},
                               1, zero, 3);
    if (rc >= 0)
        rc = vq_program_add_op(main, 0, "lr_schedule", (const char *const[]){step}, 1,
                               (const char *const[]){lr_var, step}, 2, a, na);
    return rc < 0 ? rc : 0;
}

/* The errors of the calls these two make for the user (vq_append_backward,
 * the builder's vq_program_add_*) name the call the user made first. */
static int named(int rc, const char *fn)
{
    if (rc < 0 && strncmp(vq_errmsg(), fn, strlen(fn)) != 0)
        return vq__fail_prefixed(rc, "%s", fn);
    return rc;
}

VQ_API int vq_optimizer_minimize(vq_program *main, vq_program *startup, const char *loss,
                                 const vq_optimizer *opt)
{
    return named(optimizer_minimize(main, startup, loss, opt), "vq_optimizer_minimize");
}

VQ_API int vq_lr_schedule_build(vq_program *main, vq_program *startup, const char *lr_var,
                                const vq_lr_schedule *s)
{
    return named(lr_schedule_build(main, startup, lr_var, s), "vq_lr_schedule_build");
}
