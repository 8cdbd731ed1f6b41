/* Reverse-mode autodiff over a program (vq_append_backward); the
 * optimizers (optimizers.c) and capture's imperative autodiff build on it.
 * The backward of cond and while ops is autodiff_control.c's.
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
#include "autodiff.h"

#include <varq/train.h>

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
char *vq__bw_final_name(const struct bw *b, int v)
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
int vq__bw_finalize(struct bw *b, int v)
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
int vq__bw_add_part(struct bw *b, int v, const char *name)
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

void vq__bw_free(struct bw *b)
{
    for (int v = 0; b->g && v < b->nvars; v++) {
        for (int i = 0; i < b->g[v].nparts; i++)
            free(b->g[v].part[i]);
        free(b->g[v].part);
    }
    free(b->g);
    free(b->requires_grad);
    free(b->needed);
    free(b->fwd);
    temps_clear(b);
    free(b->temps);
}

int vq__bw_alloc(struct bw *b, vq_program *p, int block, const char *suffix, int nfwd)
{
    *b = (struct bw){.p = p, .block = block, .suffix = suffix, .nvars = p->nvars};
    b->requires_grad = vq__calloc((size_t)b->nvars + 1, sizeof *b->requires_grad);
    b->needed = vq__calloc((size_t)b->nvars + 1, sizeof *b->needed);
    b->g = vq__calloc((size_t)b->nvars + 1, sizeof *b->g);
    b->fwd = vq__malloc(((size_t)nfwd + 1) * sizeof *b->fwd);
    if (!b->requires_grad || !b->needed || !b->g || !b->fwd) {
        vq__bw_free(b);
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
int vq__op_reads(const vq_program *p, const vq__pop *op, int **out, int *n)
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
                if ((rc = vq__op_reads(p, &p->ops[bb->ops[k]], &inner, &inner_n)) < 0)
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

/* The gradient maker of kernel op k of pass b, called with the names of
 * its inputs (in_n, vars in), outputs (out_n), their gradients (dout) and
 * those it must write (din). An input it leaves without a gradient loses
 * its part. */
static int maker_backward(struct bw *b, int k, const int *in, int nin, const char **in_n,
                          const char *const *out_n, int nout, const char **din, const char **dout)
{
    vq_program *p = b->p;
    const vq__pop *op0 = &p->ops[b->fwd[k]];
    int rc;
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
    return rc;
}

/* Fwd op k of pass b, if a gradient flows into an output and an input
 * wants one: its outputs' gradients summed, its inputs' partial gradients
 * named, and its gradient ops appended (a cond's or while's own, else its
 * gradient maker's). */
static int op_backward(struct bw *b, int k)
{
    vq_program *p = b->p;
    int rc = 0;
    /* Copy what we need: emitting ops moves p->ops. */
    const vq__pop *op0 = &p->ops[b->fwd[k]];
    int nin = 0, nout = op0->nout, *in = NULL, out[VQ__MAX_SLOTS];
    if ((rc = vq__op_reads(p, op0, &in, &nin)) < 0)
        return rc;
    op0 = &p->ops[b->fwd[k]];
    memcpy(out, op0->out, (size_t)nout * sizeof *out);
    bool flows = false, wants = false;
    for (int j = 0; j < nout; j++)
        flows |= b->needed[out[j]];
    for (int i = 0; i < nin; i++)
        wants |= b->requires_grad[in[i]];
    if (!flows || !wants) {
        free(in);
        return 0;
    }
    bool control = is_control(op0);
    if (!control && (!op0->def || !op0->def->grad)) {
        rc = vq__fail(VQ_EINVAL,
                      "vq_append_backward: op %d (%s) has no gradient, but the "
                      "loss depends on its inputs",
                      k, op0->type);
        free(in);
        return rc;
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
        if (b->needed[v] && (rc = vq__bw_finalize(b, v)) == 0 && b->g[v].final &&
            !(dout[j] = dout_owned[j] = vq__bw_final_name(b, v)))
            rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
    }
    for (int i = 0; i < nin && rc == 0; i++) {
        int v = in[i];
        in_n[i] = p->vars[v].name;
        din[i] = NULL;
        if (!b->requires_grad[v])
            continue;
        struct grad_names *gv = &b->g[v];
        owned[i] = grad_name(b, p->vars[v].name, gv->expected == 1 ? -1 : gv->nparts);
        if (!owned[i] || (rc = vq__bw_add_part(b, v, owned[i])) < 0) {
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
    if (rc >= 0 && control && !strcmp(p->ops[b->fwd[k]].type, "cond"))
        rc = vq__cond_backward(b, k, in, nin, din, dout);
    else if (rc >= 0 && control)
        rc = vq__while_backward(b, k, in, nin, din, dout);
    else if (rc >= 0)
        rc = maker_backward(b, k, in, nin, in_n, out_n, nout, din, dout);
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
    return rc < 0 ? rc : 0;
}

/* The reverse loop of pass b: its fwd ops in reverse, each with a gradient
 * flowing into an output gets its gradient ops (b->requires_grad, b->needed and
 * the expected part counts are set). */
int vq__bw_ops(struct bw *b)
{
    int rc = 0;
    for (int k = b->nfwd - 1; k >= 0 && rc == 0; k--)
        rc = op_backward(b, k);
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
        if ((rc = vq__op_reads(p, op, &in, &nin)) < 0)
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

/* Which vars of block 0's pass b need a gradient to begin with (float
 * parameters, less the no_grad and stop_gradient ones), and where
 * gradients stop (stop: those, and the persistable vars left out). */
static int backward_roots(struct bw *b, const char *const *no_grad, int nno_grad, bool *stop)
{
    vq_program *p = b->p;
    for (int v = 0; v < p->nvars; v++)
        b->requires_grad[v] = p->vars[v].persistable && is_float(p->vars[v].dtype);
    for (int i = 0; i < nno_grad; i++) {
        int v = no_grad[i] ? vq__program_find_var(p, no_grad[i]) : -1;
        if (v < 0)
            return vq__fail(VQ_EINVAL, "vq_append_backward: no_grad var %s does not exist",
                            no_grad[i] ? no_grad[i] : "(NULL)");
        b->requires_grad[v] = false;
        stop[v] = true;
    }
    for (int v = 0; v < p->nvars; v++) {
        if (p->vars[v].stop_gradient) {
            b->requires_grad[v] = false;
            stop[v] = true;
        }
        stop[v] |= !b->requires_grad[v] && p->vars[v].persistable;
    }
    return 0;
}

/* Forward: who writes what (writer, -1: nothing), and what is computed
 * from parameters (a cond or while reads what its blocks read). */
static int backward_forward(struct bw *b, int *writer, const bool *stop)
{
    vq_program *p = b->p;
    int rc = 0;
    for (int v = 0; v < p->nvars; v++)
        writer[v] = -1;
    for (int k = 0; k < b->nfwd && rc == 0; k++) {
        const vq__pop *op = &p->ops[b->fwd[k]];
        int *in = NULL, nin = 0;
        if ((rc = vq__op_reads(p, op, &in, &nin)) < 0)
            break;
        op = &p->ops[b->fwd[k]];
        bool any = false;
        for (int i = 0; i < nin; i++)
            any |= b->requires_grad[in[i]];
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
                b->requires_grad[v] = true;
        }
    }
    return rc;
}

/* Backward reachability from the loss L, and how many partial gradients
 * each var will get. */
static int backward_reach(struct bw *b, int L)
{
    vq_program *p = b->p;
    int rc = 0;
    b->needed[L] = true;
    for (int k = b->nfwd - 1; k >= 0 && rc == 0; k--) {
        const vq__pop *op = &p->ops[b->fwd[k]];
        bool flows = false;
        for (int j = 0; j < op->nout; j++)
            flows |= b->needed[op->out[j]];
        if (!flows)
            continue;
        int *in = NULL, nin = 0;
        if ((rc = vq__op_reads(p, op, &in, &nin)) < 0)
            break;
        for (int i = 0; i < nin; i++)
            if (b->requires_grad[in[i]]) {
                b->needed[in[i]] = true;
                b->g[in[i]].expected++;
            }
        free(in);
    }
    return rc;
}

/* The seed: d loss / d loss = 1. */
static int backward_seed(struct bw *b, const char *loss, int L)
{
    vq_program *p = b->p;
    char *lg = grad_name(b, loss, -1);
    vq__pvar d = p->vars[L];
    vq_attr a[3] = {VQ_ATTR_IS("shape", d.shape, d.ndim),
                    VQ_ATTR_S("dtype", vq_dtype_name(d.dtype)), VQ_ATTR_F("value", 1.0)};
    int rc = lg ? declare_like(p, 0, lg, L, false) : VQ_ENOMEM;
    if (rc >= 0)
        rc = vq_program_add_op(p, 0, "fill_constant", NULL, 0, (const char *const *)&lg, 1, a, 3);
    free(lg);
    if (rc < 0)
        return rc;
    b->g[L].final = true;
    return 0;
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
    rc = vq__bw_alloc(&b, p, 0, "", nops);
    if (rc < 0)
        return rc;
    int *writer = vq__malloc(((size_t)nvars + 1) * sizeof *writer);
    bool *stop = vq__calloc((size_t)nvars + 1, sizeof *stop);
    if (!writer || !stop) {
        rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
        goto out;
    }
    memcpy(b.fwd, p->blocks[0].ops, (size_t)nops * sizeof *b.fwd);
    if ((rc = backward_roots(&b, no_grad, nno_grad, stop)) < 0 ||
        (rc = backward_forward(&b, writer, stop)) != 0)
        goto out;
    if (!b.requires_grad[L]) {
        rc = vq__fail(VQ_EINVAL, "vq_append_backward: loss %s does not depend on any parameter",
                      loss);
        goto out;
    }
    if ((rc = backward_reach(&b, L)) != 0 || (rc = backward_seed(&b, loss, L)) < 0)
        goto out;
    rc = vq__bw_ops(&b);
    /* Leaves (parameters): sum their parts too. */
    for (int v = 0; v < nvars && rc == 0; v++)
        if (b.needed[v] && b.requires_grad[v] && writer[v] < 0) {
            rc = vq__bw_finalize(&b, v);
            nparams += p->vars[v].persistable && b.g[v].final;
        }
out:
    vq__bw_free(&b);
    free(writer);
    free(stop);
    return rc < 0 ? rc : nparams;
}
