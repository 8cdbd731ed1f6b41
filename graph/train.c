/* Reverse-mode autodiff over a program and optimizers as program ops.
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
#include "internal.h"

#include <varq/train.h>

#include <math.h>
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
};

static int emit_op(void *user, const char *type, const char *const *in, int nin,
                   const char *const *out, int nout, const vq_attr *attrs, int nattrs)
{
    struct bw *b = user;
    int rc = vq_program_add_op(b->p, b->block, type, in, nin, out, nout, attrs, nattrs);
    if (rc < 0 && !b->err)
        b->err = rc;
    return rc < 0 ? rc : 0;
}

static const char *no_temp(void *user)
{
    (void)user;
    vq__fail(VQ_ENOSYS, "autodiff: gradient makers get no temporary vars; emit one op per "
                        "gradient");
    return NULL;
}

static char *grad_name(const struct bw *b, const char *var, int part)
{
    size_t n = strlen(var) + strlen(b->suffix) + 32;
    char *s = malloc(n);
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
        return vq__fail(VQ_ENOMEM, "autodiff: out of memory");
    int rc = 0;
    if (g->nparts == 1 && !strcmp(g->part[0], name)) {
        /* A single gradient was emitted under the final name already. */
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
                next = malloc(n);
                if (!next) {
                    rc = vq__fail(VQ_ENOMEM, "autodiff: out of memory");
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
    char **parts = realloc(gv->part, ((size_t)gv->nparts + 1) * sizeof *parts);
    if (!parts)
        return vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    gv->part = parts;
    if (!(gv->part[gv->nparts] = strdup(name)))
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
}

static int bw_alloc(struct bw *b, vq_program *p, int block, const char *suffix, int nfwd)
{
    *b = (struct bw){.p = p, .block = block, .suffix = suffix, .nvars = p->nvars};
    b->requires = calloc((size_t)b->nvars + 1, sizeof *b->requires);
    b->needed = calloc((size_t)b->nvars + 1, sizeof *b->needed);
    b->g = calloc((size_t)b->nvars + 1, sizeof *b->g);
    b->fwd = malloc(((size_t)nfwd + 1) * sizeof *b->fwd);
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
        int *nv = realloc(*v, (size_t)(*cap *= 2) * sizeof *nv);
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
    int *v = malloc((size_t)cap * sizeof *v);
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

/* The backward of cond op (fwd index k of b) as a cond in b's block over
 * two new blocks: each recomputes its branch (the forward values are gone
 * once the forward cond is done) and differentiates it, from the output
 * gradients dout, into the gradients of the vars in reads[] that have a
 * din name; a var the branch does not use gets zeros. */
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
    char **results[2] = {calloc((size_t)nreads + 1, sizeof(char *)),
                         calloc((size_t)nreads + 1, sizeof(char *))};
    int nb[2] = {-1, -1}, rc = 0;
    if (!results[0] || !results[1])
        rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    for (int br = 0; br < 2 && rc == 0; br++) {
        int fb = blocks[br];
        const vq__block *fblk = &p->blocks[fb];
        for (int i = 0; i < fblk->nops; i++)
            if (is_control(&p->ops[fblk->ops[i]]))
                return vq__fail(VQ_ENOSYS, "vq_append_backward: op %d (cond): block %d holds a "
                                           "%s; gradients through nested control flow are not "
                                           "available yet",
                                k, fb, p->ops[fblk->ops[i]].type);
        if ((rc = nb[br] = vq_program_add_block(p, 0)) < 0)
            break;
        rc = 0;
        char suffix[32], re[32];
        snprintf(suffix, sizeof suffix, "@B%d", nb[br]);
        snprintf(re, sizeof re, "@RE%d", nb[br]);
        /* 1. the branch again, its vars renamed into the new block */
        int nfops = p->blocks[fb].nops;
        int first_op = p->nops;
        for (int i = 0; i < nfops && rc == 0; i++) {
            const vq__pop *src = &p->ops[p->blocks[fb].ops[i]];
            int nin = src->nin, no = src->nout;
            char *names[2 * VQ__MAX_SLOTS] = {0};
            for (int s = 0; s < nin + no && rc == 0; s++) {
                int v = s < nin ? src->in[s] : src->out[s - nin];
                const char *nm = p->vars[v].name;
                size_t len = strlen(nm) + strlen(re) + 1;
                if (!(names[s] = malloc(len)))
                    rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
                else if (p->vars[v].block == fb)
                    snprintf(names[s], len, "%s%s", nm, re);
                else
                    snprintf(names[s], len, "%s", nm);
                if (rc == 0 && s >= nin && vq__program_find_var(p, names[s]) < 0)
                    rc = declare_like(p, nb[br], names[s], v, false);
                if (rc == 0 && s < nin && p->vars[v].block == fb &&
                    vq__program_find_var(p, names[s]) < 0)
                    rc = declare_like(p, nb[br], names[s], v, false);
            }
            if (rc >= 0) {
                src = &p->ops[p->blocks[fb].ops[i]]; /* declaring may not move ops, but */
                vq_attr *attrs = src->attrs;
                rc = vq_program_add_op(p, nb[br], src->type, (const char *const *)names, nin,
                                       (const char *const *)names + nin, no, attrs,
                                       src->nattrs);
            }
            for (int s = 0; s < nin + no; s++)
                free(names[s]);
            rc = rc < 0 ? rc : 0;
        }
        if (rc)
            break;
        /* 2. differentiate the copy */
        struct bw sub;
        if ((rc = bw_alloc(&sub, p, nb[br], suffix, nfops)) < 0)
            break;
        for (int i = 0; i < nfops; i++)
            sub.fwd[i] = first_op + i;
        for (int i = 0; i < nreads; i++)
            if (din[i])
                sub.requires[reads[i]] = true;
        for (int i = 0; i < nfops; i++) {
            const vq__pop *c = &p->ops[sub.fwd[i]];
            bool any = false;
            for (int j = 0; j < c->nin; j++)
                any |= sub.requires[c->in[j]];
            for (int j = 0; j < c->nout; j++)
                if (any && c->def && c->def->grad && is_float(p->vars[c->out[j]].dtype))
                    sub.requires[c->out[j]] = true;
        }
        /* the seeds: each output's gradient flows into the var the branch
         * gives for it */
        for (int j = 0; j < nout && rc == 0; j++) {
            if (!dout[j])
                continue;
            int v = vq__program_find_var(p, outs[br]->strings[j]);
            if (v >= 0 && p->vars[v].block == fb) {
                char nm[256];
                snprintf(nm, sizeof nm, "%s%s", p->vars[v].name, re);
                v = vq__program_find_var(p, nm);
            }
            if (v < 0 || !sub.requires[v])
                continue;
            sub.needed[v] = true;
            sub.g[v].expected++;
            rc = add_part(&sub, v, dout[j]);
        }
        for (int i = nfops - 1; i >= 0 && rc == 0; i--) {
            const vq__pop *c = &p->ops[sub.fwd[i]];
            bool flows = false;
            for (int j = 0; j < c->nout; j++)
                flows |= sub.needed[c->out[j]];
            if (!flows)
                continue;
            for (int j = 0; j < c->nin; j++)
                if (sub.requires[c->in[j]]) {
                    sub.needed[c->in[j]] = true;
                    sub.g[c->in[j]].expected++;
                }
        }
        if (rc == 0)
            rc = bw_ops(&sub);
        /* 3. the branch's result per wanted var: its gradient, or zeros */
        for (int i = 0; i < nreads && rc == 0; i++) {
            if (!din[i])
                continue;
            int v = reads[i];
            if ((rc = finalize(&sub, v)) < 0)
                break;
            results[br][i] = grad_name(&sub, p->vars[v].name, -1);
            if (!results[br][i]) {
                rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
                break;
            }
            if (!sub.g[v].final) {
                rc = declare_like(p, nb[br], results[br][i], v, false);
                if (rc >= 0)
                    rc = vq_program_add_op(p, nb[br], "zeros_like",
                                           (const char *[]){p->vars[v].name}, 1,
                                           (const char *const *)&results[br][i], 1, NULL, 0);
                rc = rc < 0 ? rc : 0;
            }
        }
        bw_free(&sub);
    }
    /* 4. the backward cond: Out = the gradients of the wanted vars */
    if (rc == 0) {
        const char *xin[VQ__MAX_SLOTS + 1], *outn[VQ__MAX_SLOTS], *t[VQ__MAX_SLOTS],
            *e[VQ__MAX_SLOTS];
        int nx = 0, no = 0;
        xin[nx++] = p->vars[cond_var].name;
        for (int j = 0; j < nout && nx < VQ__MAX_SLOTS; j++)
            if (dout[j])
                xin[nx++] = dout[j];
        for (int i = 0; i < nreads && no < VQ__MAX_SLOTS; i++)
            if (din[i]) {
                outn[no] = din[i];
                t[no] = results[0][i];
                e[no] = results[1][i];
                no++;
            }
        vq_attr at[4] = {VQ_ATTR_I("then_block", nb[0]), VQ_ATTR_I("else_block", nb[1]),
                         VQ_ATTR_SS("then_outputs", t, no), VQ_ATTR_SS("else_outputs", e, no)};
        if (nx < 2) /* X takes one var at least: no gradient flows, give zeros */
            xin[nx++] = p->vars[cond_var].name;
        rc = vq_program_add_op(p, b->block, "cond", xin, nx, outn, no, at, 4);
        rc = rc < 0 ? rc : 0;
    }
    for (int br = 0; br < 2; br++) {
        for (int i = 0; results[br] && i < nreads; i++)
            free(results[br][i]);
        free(results[br]);
    }
    return rc;
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
        if (control && strcmp(op0->type, "cond")) {
            rc = vq__fail(VQ_ENOSYS, "vq_append_backward: op %d (%s): the loss depends on its "
                                     "outputs, and gradients through while are not available "
                                     "yet",
                          k, op0->type);
            free(in);
            break;
        }
        if (!control && (!op0->def || !op0->def->grad)) {
            rc = vq__fail(VQ_EINVAL, "vq_append_backward: op %d (%s) has no gradient, but the "
                                     "loss depends on its inputs",
                          k, op0->type);
            free(in);
            break;
        }
        const char **dout = calloc((size_t)nout + 1, sizeof *dout);
        const char **din = calloc((size_t)nin + 1, sizeof *din);
        const char **in_n = calloc((size_t)nin + 1, sizeof *in_n);
        const char *out_n[VQ__MAX_SLOTS];
        char **owned = calloc((size_t)nin + 1, sizeof *owned);
        char *dout_owned[VQ__MAX_SLOTS] = {0};
        if (!dout || !din || !in_n || !owned)
            rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
        for (int j = 0; j < nout && rc == 0; j++) {
            int v = out[j];
            out_n[j] = p->vars[v].name;
            dout[j] = NULL;
            if (b->needed[v] && (rc = finalize(b, v)) == 0 && b->g[v].final)
                dout[j] = dout_owned[j] = grad_name(b, p->vars[v].name, -1);
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
            rc = declare_like(p, b->block, owned[i], v, false);
            din[i] = owned[i];
            if (gv->expected == 1)
                gv->final = true;
        }
        if (rc >= 0 && control) {
            rc = cond_backward(b, k, in, nin, din, dout);
        } else if (rc >= 0) {
            op0 = &p->ops[b->fwd[k]];
            vq__grad gr = {.def = op0->def, .in = in_n, .nin = nin, .out = out_n, .nout = nout,
                           .din = din, .dout = dout, .attrs = op0->attrs,
                           .nattrs = op0->nattrs, .emit = emit_op, .temp = no_temp, .user = b};
            rc = op0->def->grad(&gr);
            if (rc >= 0 && b->err)
                rc = b->err;
        }
        if (rc < 0) {
            char msg[200];
            snprintf(msg, sizeof msg, "%s", vq_errmsg());
            const char *type = p->ops[b->fwd[k]].type;
            if (strncmp(msg, "vq_append_backward", 18))
                rc = vq__fail(rc, "vq_append_backward: op %d (%s): %s", k, type, msg);
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
    const int nvars = p->nvars, nops = p->blocks[0].nops;
    struct bw b;
    int rc = bw_alloc(&b, p, 0, "", nops), nparams = 0;
    if (rc < 0)
        return rc;
    int *writer = malloc(((size_t)nvars + 1) * sizeof *writer);
    bool *stop = calloc((size_t)nvars + 1, sizeof *stop);
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
    for (int v = 0; v < nvars; v++)
        stop[v] |= !b.requires[v] && p->vars[v].persistable;
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
            if (writer[v] >= 0 || (p->vars[v].persistable && any))
                rc = vq__fail(VQ_ENOSYS,
                              "vq_append_backward: var %s is written twice (op %d and %d) or "
                              "updated in place; autodiff needs each var written once",
                              p->vars[v].name, writer[v], k);
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

VQ_API int vq_program_clone(const vq_program *p, vq_program **out)
{
    if (!p || !out)
        return vq__fail(VQ_EINVAL, "vq_program_clone: NULL argument");
    return vq__program_copy(p, out);
}

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

VQ_API int vq_optimizer_minimize(vq_program *main, vq_program *startup, const char *loss,
                                 const vq_optimizer *opt)
{
    if (!main || !startup || !loss || !opt)
        return vq__fail(VQ_EINVAL, "vq_optimizer_minimize: NULL argument");
    if (!(opt->learning_rate >= 0) || (unsigned)opt->kind > VQ_OPT_ADAM)
        return vq__fail(VQ_EINVAL, "vq_optimizer_minimize: bad kind or learning rate");
    int nvars = main->nvars; /* parameters are declared before the gradients */
    int rc = vq_append_backward(main, loss, NULL, 0);
    if (rc < 0)
        return rc;
    int updated = 0;
    for (int v = 0; v < nvars && rc >= 0; v++) {
        if (!main->vars[v].persistable || !is_float(main->vars[v].dtype))
            continue;
        char gname[300], s1[300], s2[300], s3[300];
        snprintf(gname, sizeof gname, "%s@GRAD", main->vars[v].name);
        if (vq__program_find_var(main, gname) < 0)
            continue;
        vq__pvar d = main->vars[v];
        for (int i = 0; i < d.ndim; i++)
            if (d.shape[i] < 0)
                return vq__fail(VQ_EINVAL, "vq_optimizer_minimize: parameter %s has unknown dims",
                                d.name);
        const char *w = d.name;
        vq_attr lr = VQ_ATTR_F("learning_rate", opt->learning_rate);
        switch (opt->kind) {
        case VQ_OPT_SGD:
            rc = vq_program_add_op(main, 0, "sgd", (const char *const[]){w, gname}, 2,
                                   (const char *const[]){w}, 1, &lr, 1);
            break;
        case VQ_OPT_MOMENTUM: {
            rc = add_state(main, startup, v, "@VELOCITY", d.dtype, d.ndim, d.shape, s1, sizeof s1);
            vq_attr a[3] = {lr, VQ_ATTR_F("mu", opt->mu ? opt->mu : 0.9),
                            VQ_ATTR_B("use_nesterov", opt->nesterov)};
            if (rc >= 0)
                rc = vq_program_add_op(main, 0, "momentum", (const char *const[]){w, gname, s1}, 3,
                                       (const char *const[]){w, s1}, 2, a, 3);
            break;
        }
        case VQ_OPT_ADAM: {
            int64_t one[1] = {1};
            rc = add_state(main, startup, v, "@MOMENT1", d.dtype, d.ndim, d.shape, s1, sizeof s1);
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
                                       (const char *const[]){w, gname, s1, s2, s3}, 5,
                                       (const char *const[]){w, s1, s2, s3}, 4, a, 4);
            break;
        }
        }
        updated += rc >= 0;
    }
    return rc < 0 ? rc : updated;
}
