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

/* Declares name with var v's dtype and shape (non-persistable). */
static int declare_like(vq_program *p, const char *name, int v, bool persistable)
{
    vq__pvar d = p->vars[v]; /* copy: adding a var may move the table */
    return vq_program_add_var(p, 0, name, d.dtype, d.ndim, d.shape, persistable);
}

struct grad_names {
    char **part;  /* names of the partial gradients emitted so far */
    int nparts, expected;
    bool final;   /* "x@GRAD" exists */
};

struct emit_ctx {
    vq_program *p;
    int err;
};

static int emit_op(void *user, const char *type, const char *const *in, int nin,
                   const char *const *out, int nout, const vq_attr *attrs, int nattrs)
{
    struct emit_ctx *c = user;
    int rc = vq_program_add_op(c->p, 0, type, in, nin, out, nout, attrs, nattrs);
    if (rc < 0 && !c->err)
        c->err = rc;
    return rc < 0 ? rc : 0;
}

static const char *no_temp(void *user)
{
    (void)user;
    vq__fail(VQ_ENOSYS, "autodiff: gradient makers get no temporary vars; emit one op per "
                        "gradient");
    return NULL;
}

static char *grad_name(const char *var, int part)
{
    size_t n = strlen(var) + 32;
    char *s = malloc(n);
    if (s) {
        if (part < 0)
            snprintf(s, n, "%s@GRAD", var);
        else
            snprintf(s, n, "%s@GRAD@RENAME@%d", var, part);
    }
    return s;
}

/* Sums the partial gradients of v into v@GRAD (declared here). */
static int finalize(vq_program *p, int v, struct grad_names *g)
{
    if (g->final || g->nparts == 0)
        return 0;
    char *name = grad_name(p->vars[v].name, -1);
    if (!name)
        return vq__fail(VQ_ENOMEM, "autodiff: out of memory");
    int rc = 0;
    if (g->nparts == 1 && g->expected == 1) {
        /* A single gradient was emitted under the final name already. */
    } else {
        rc = declare_like(p, name, v, false);
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
                rc = declare_like(p, next, v, false);
            }
            if (rc >= 0)
                rc = vq_program_add_op(p, 0, "add", (const char *[]){acc, g->part[i]}, 2,
                                       (const char *const *)&next, 1, NULL, 0);
            if (tmp)
                free(tmp);
            tmp = next == name ? NULL : next;
            acc = next;
        }
        free(tmp);
        if (rc >= 0 && g->nparts == 1) /* one part, but renamed: copy it */
            rc = vq_program_add_op(p, 0, "scale", (const char *[]){g->part[0]}, 1,
                                   (const char *const *)&name, 1, NULL, 0);
    }
    free(name);
    g->final = rc >= 0;
    return rc < 0 ? rc : 0;
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
    bool *requires = calloc((size_t)nvars + 1, sizeof *requires);
    bool *needed = calloc((size_t)nvars + 1, sizeof *needed);
    int *writer = malloc(((size_t)nvars + 1) * sizeof *writer);
    struct grad_names *g = calloc((size_t)nvars + 1, sizeof *g);
    int *fwd = malloc(((size_t)nops + 1) * sizeof *fwd);
    int rc = 0, nparams = 0;
    if (!requires || !needed || !writer || !g || !fwd) {
        rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
        goto out;
    }
    memcpy(fwd, p->blocks[0].ops, (size_t)nops * sizeof *fwd);
    for (int v = 0; v < nvars; v++) {
        writer[v] = -1;
        requires[v] = p->vars[v].persistable && is_float(p->vars[v].dtype);
    }
    for (int i = 0; i < nno_grad; i++) {
        int v = no_grad[i] ? vq__program_find_var(p, no_grad[i]) : -1;
        if (v < 0) {
            rc = vq__fail(VQ_EINVAL, "vq_append_backward: no_grad var %s does not exist",
                          no_grad[i] ? no_grad[i] : "(NULL)");
            goto out;
        }
        requires[v] = false;
    }
    bool *stop = calloc((size_t)nvars + 1, sizeof *stop);
    if (!stop) {
        rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
        goto out;
    }
    for (int v = 0; v < nvars; v++)
        stop[v] = !requires[v] && p->vars[v].persistable;
    for (int i = 0; i < nno_grad; i++)
        stop[vq__program_find_var(p, no_grad[i])] = true;
    /* Forward: who writes what, and what is computed from parameters. */
    for (int k = 0; k < nops && rc == 0; k++) {
        const vq__pop *op = &p->ops[fwd[k]];
        bool any = false;
        for (int i = 0; i < op->nin; i++)
            any |= requires[op->in[i]];
        for (int j = 0; j < op->nout && rc == 0; j++) {
            int v = op->out[j];
            if (writer[v] >= 0 || (p->vars[v].persistable && any))
                rc = vq__fail(VQ_ENOSYS,
                              "vq_append_backward: var %s is written twice (op %d and %d) or "
                              "updated in place; autodiff needs each var written once",
                              p->vars[v].name, writer[v], k);
            writer[v] = k;
            /* A cond or while may read parameters in its blocks without
             * naming them: its outputs count as computed from them. */
            bool control = op->def && (op->def->flags & VQ__CONTROL);
            if ((any || control) && op->def && (op->def->grad || control) &&
                is_float(p->vars[v].dtype) && !stop[v])
                requires[v] = true;
        }
    }
    free(stop);
    if (rc)
        goto out;
    if (!requires[L]) {
        rc = vq__fail(VQ_EINVAL, "vq_append_backward: loss %s does not depend on any parameter",
                      loss);
        goto out;
    }
    /* Backward reachability from the loss, and how many partial gradients
     * each var will get. */
    needed[L] = true;
    for (int k = nops - 1; k >= 0; k--) {
        const vq__pop *op = &p->ops[fwd[k]];
        bool flows = false;
        for (int j = 0; j < op->nout; j++)
            flows |= needed[op->out[j]];
        if (!flows)
            continue;
        if (op->def && (op->def->flags & VQ__CONTROL)) {
            rc = vq__fail(VQ_ENOSYS, "vq_append_backward: op %d (%s): the loss depends on its "
                                     "outputs, and gradients through cond and while are not "
                                     "available yet",
                          k, op->type);
            goto out;
        }
        for (int i = 0; i < op->nin; i++)
            if (requires[op->in[i]]) {
                needed[op->in[i]] = true;
                g[op->in[i]].expected++;
            }
    }
    /* The seed: d loss / d loss = 1. */
    {
        char *lg = grad_name(loss, -1);
        vq__pvar d = p->vars[L];
        vq_attr a[3] = {VQ_ATTR_IS("shape", d.shape, d.ndim),
                        VQ_ATTR_S("dtype", vq_dtype_name(d.dtype)), VQ_ATTR_F("value", 1.0)};
        rc = lg ? declare_like(p, lg, L, false) : VQ_ENOMEM;
        if (rc >= 0)
            rc = vq_program_add_op(p, 0, "fill_constant", NULL, 0, (const char *const *)&lg, 1,
                                   a, 3);
        free(lg);
        if (rc < 0)
            goto out;
        rc = 0;
        g[L].final = true;
    }
    struct emit_ctx ec = {.p = p};
    for (int k = nops - 1; k >= 0 && rc == 0; k--) {
        /* Copy what we need: emitting ops moves p->ops. */
        const vq__pop *op0 = &p->ops[fwd[k]];
        int nin = op0->nin, nout = op0->nout, in[VQ__MAX_SLOTS], out[VQ__MAX_SLOTS];
        memcpy(in, op0->in, (size_t)nin * sizeof *in);
        memcpy(out, op0->out, (size_t)nout * sizeof *out);
        bool flows = false;
        for (int j = 0; j < nout; j++)
            flows |= needed[out[j]];
        bool wants = false;
        for (int i = 0; i < nin; i++)
            wants |= requires[in[i]];
        if (!flows || !wants)
            continue;
        if (!op0->def || !op0->def->grad) {
            rc = vq__fail(VQ_EINVAL, "vq_append_backward: op %d (%s) has no gradient, but the "
                                     "loss depends on its inputs",
                          k, op0->type);
            break;
        }
        const char *dout[VQ__MAX_SLOTS], *din[VQ__MAX_SLOTS], *in_n[VQ__MAX_SLOTS],
            *out_n[VQ__MAX_SLOTS];
        char *owned[VQ__MAX_SLOTS] = {0};
        char *dout_owned[VQ__MAX_SLOTS] = {0};
        for (int j = 0; j < nout && rc == 0; j++) {
            int v = out[j];
            out_n[j] = p->vars[v].name;
            dout[j] = NULL;
            if (needed[v] && (rc = finalize(p, v, &g[v])) == 0 && g[v].final)
                dout[j] = dout_owned[j] = grad_name(p->vars[v].name, -1);
        }
        for (int i = 0; i < nin && rc == 0; i++) {
            int v = in[i];
            in_n[i] = p->vars[v].name;
            din[i] = NULL;
            if (!requires[v])
                continue;
            struct grad_names *gv = &g[v];
            owned[i] = grad_name(p->vars[v].name, gv->expected == 1 ? -1 : gv->nparts);
            char **parts = realloc(gv->part, ((size_t)gv->nparts + 1) * sizeof *parts);
            if (!owned[i] || !parts) {
                rc = vq__fail(VQ_ENOMEM, "vq_append_backward: out of memory");
                break;
            }
            gv->part = parts;
            gv->part[gv->nparts++] = strdup(owned[i]);
            rc = declare_like(p, owned[i], v, false);
            din[i] = owned[i];
            if (gv->expected == 1)
                gv->final = true;
        }
        if (rc >= 0) {
            op0 = &p->ops[fwd[k]];
            vq__grad gr = {.def = op0->def, .in = in_n, .nin = nin, .out = out_n, .nout = nout,
                           .din = din, .dout = dout, .attrs = op0->attrs,
                           .nattrs = op0->nattrs, .emit = emit_op, .temp = no_temp, .user = &ec};
            rc = op0->def->grad(&gr);
            if (rc >= 0 && ec.err)
                rc = ec.err;
            if (rc < 0) {
                char msg[200];
                snprintf(msg, sizeof msg, "%s", vq_errmsg());
                rc = vq__fail(rc, "vq_append_backward: op %d (%s): %s", k, op0->type, msg);
            }
        }
        for (int i = 0; i < nin; i++)
            free(owned[i]);
        for (int j = 0; j < nout; j++)
            free(dout_owned[j]);
        rc = rc < 0 ? rc : 0;
    }
    /* Leaves (parameters): sum their parts too. */
    for (int v = 0; v < nvars && rc == 0; v++)
        if (needed[v] && requires[v] && writer[v] < 0) {
            rc = finalize(p, v, &g[v]);
            nparams += p->vars[v].persistable && g[v].final;
        }
out:
    for (int v = 0; g && v < nvars; v++) {
        for (int i = 0; i < g[v].nparts; i++)
            free(g[v].part[i]);
        free(g[v].part);
    }
    free(g);
    free(requires);
    free(needed);
    free(writer);
    free(fwd);
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
