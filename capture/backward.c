/* Imperative autodiff (vq_capture_backward): the segment recorded so far
 * becomes a program, graph/'s vq_append_backward differentiates it, and
 * the gradient ops it appends, kept as a recipe at the segment's node,
 * are recorded into the segment like the caller's own calls. */
#include "capture_internal.h"

#include <varq/train.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- imperative autodiff ---- */

/* What vq_capture_backward appends after a node for one (loss, params):
 * the gradient ops with their tensors named by number: below base, a slot
 * of the segment; from base on, the k-th new tensor the recipe makes. */
struct recipe {
    struct recipe *next;
    int loss;
    int nparams;
    int *params; /* slots */
    int *grads;  /* per param: a tensor number, or -1 (no gradient) */
    int base;    /* slots of the segment when recorded */
    int nops;
    struct rop {
        char *type;
        int nin, nout;
        int *in, *out; /* tensor numbers; an output number first written here is made by it */
        vq_attr *attrs;
        int nattrs;
        struct node *node; /* the node its last replay matched (record_known) */
    } * ops;
    int nnew;
};

void vq__capture_recipes_free(struct recipe *r)
{
    while (r) {
        struct recipe *next = r->next;
        for (int k = 0; r->ops && k < r->nops; k++) {
            free(r->ops[k].type);
            free(r->ops[k].in);
            vq__capture_attrs_free(r->ops[k].attrs, r->ops[k].nattrs);
        }
        free(r->ops);
        free(r->params);
        free(r->grads);
        free(r);
        r = next;
    }
}

/* The segment of S as program p: var "t<s>" per slot (persistable where
 * is_param says), one op per recorded call (ops: the path's nodes, the
 * first call first). */
static int segment_program(struct state *S, const bool *is_param, struct node **ops, vq_program *p)
{
    char name[32];
    int rc = 0;
    for (int s = 0; rc == 0 && s < S->nslots; s++) {
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
    return rc;
}

/* Recipe r's ops: those vq_append_backward appended to p (from op nfwd
 * of block 0), their vars by tensor number (num: slots keep theirs; the
 * backward's vars get ns, ns + 1, ... in the order the recipe first
 * writes them). *next_out: the number after the last. */
static int recipe_ops(struct recipe *r, const vq_program *p, int nfwd, int ns, int *num,
                      int *next_out)
{
    int rc = 0, next = ns;
    for (int k = 0; rc == 0 && k < r->nops; k++) {
        const vq__pop *op = &p->ops[p->blocks[0].ops[nfwd + k]];
        struct rop *ro = &r->ops[k];
        bool ok;
        ro->type = vq__strdup(op->type);
        ro->nin = op->nin;
        ro->nout = op->nout;
        ro->in = vq__malloc(((size_t)op->nin + op->nout + 1) * sizeof(int));
        ro->attrs = vq__capture_attrs_copy(op->attrs, op->nattrs, &ok);
        ro->nattrs = op->nattrs;
        if (!ro->type || !ro->in || !ok) {
            rc = vq__fail(VQ_ENOMEM, "vq_capture_backward: out of memory");
            break;
        }
        ro->out = ro->in + op->nin;
        for (int i = 0; i < op->nin && rc == 0; i++) {
            ro->in[i] = num[op->in[i]];
            if (ro->in[i] < 0)
                rc = vq__fail(VQ_EINVAL,
                              "vq_capture_backward: gradient op %s reads %s before "
                              "anything writes it",
                              op->type, p->vars[op->in[i]].name);
        }
        for (int j = 0; j < op->nout && rc == 0; j++) {
            int v = op->out[j];
            if (num[v] < 0)
                num[v] = next++;
            else if (num[v] < ns)
                rc = vq__fail(VQ_ENOSYS,
                              "vq_capture_backward: gradient op %s writes %s, a "
                              "tensor of the segment",
                              op->type, p->vars[v].name);
            ro->out[j] = num[v];
        }
    }
    *next_out = next;
    return rc;
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
    if (rc == 0)
        rc = segment_program(S, is_param, ops, p);
    int nfwd = rc == 0 ? p->blocks[0].nops : 0;
    /* A loss that depends on no param gets no gradient ops (and every
     * param NULL), where vq_append_backward would refuse it. */
    bool *dep = is_param;
    for (int k = 0; rc == 0 && k < S->nops; k++) {
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
    if (rc == 0)
        rc = recipe_ops(rc_r, p, nfwd, ns, num, &next);
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
        vq__capture_recipes_free(rc_r);
        return rc;
    }
    *out = rc_r;
    return 0;
}

VQ_API int vq_capture_backward(vq_engine *e, vq_tensor *loss, vq_tensor *const *params, int nparams,
                               vq_tensor **grads)
{
    if (!e || !loss || nparams < 0 || (nparams && (!params || !grads)))
        return vq__fail(VQ_EINVAL, "vq_capture_backward: bad argument");
    for (int i = 0; i < nparams; i++) {
        grads[i] = NULL;
        if (!params[i])
            return vq__fail(VQ_EINVAL, "vq_capture_backward: param %d is NULL", i);
    }
    struct state *S = vq__capture_state_find(e);
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
            rc = vq__fail(VQ_EINVAL, "vq_capture_backward: param %d is written by the segment", i);
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
                vq__capture_recipes_free(r);
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
        rc = vq__capture_record_known(S, ro->node, in, ro->nin, outs, ro->nout);
        if (rc == 1) {
            rc = vq__capture_record(S, ro->type, in, ro->nin, outs, ro->nout, ro->attrs, ro->nattrs,
                                    &S->dev);
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
        vq__capture_seg_cut(S, VQ_CAPTURE_CUT_SIZE);
    if (made != made_buf)
        free(made);
    if (ps != pslot)
        free(ps);
    state_unlock(S);
    return rc;
}
