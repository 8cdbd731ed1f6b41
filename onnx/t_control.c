/* ONNX's control flow: If onto varq's cond (or the taken branch's nodes
 * inline, when the condition is known at import), Loop onto while
 * (carrying the iteration number and the condition, stacking the scan
 * outputs) and Scan onto while (carrying the iteration number, slicing the
 * scan inputs by it). Their subgraphs are translated into blocks of the program
 * through ox_subgraph, the walk import.c lends them. */
#include "onnx_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The block of program var name, or -1. */
static int var_block(struct ox *x, const char *name)
{
    int v = vq__program_find_var(x->p, name);
    return v < 0 ? -1 : x->p->vars[v].block;
}

/* A var of the current block holding v under a new name: v's own var when
 * it is one of this block's and not one of avoid[] (navoid names), else a
 * copy (a reshape keeping every dim). */
static int own_var(struct ox *x, struct ox_val *v, const char *const *avoid, int navoid,
                   struct ox_val **out)
{
    int rc = ox_var_of(x, v);
    if (rc)
        return rc;
    bool ok = var_block(x, v->var) == x->block;
    for (int i = 0; ok && i < navoid; i++)
        ok = strcmp(v->var, avoid[i]) != 0;
    if (ok) {
        *out = v;
        return 0;
    }
    /* a copy into a new var of this block (added directly: ox_emit would
     * fold a known value instead of giving it a var) */
    int64_t keep[VQ_MAX_DIMS] = {0};
    vq_attr a = VQ_ATTR_IS("shape", keep, v->meta.ndim);
    const char *in = v->var;
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s@onnx%d", v->name, x->ntemps++);
    struct ox_val *c;
    if ((rc = ox_block_var(x, tmp, &v->meta, &c)) < 0)
        return rc;
    const char *o = c->var;
    rc = vq_program_add_op(x->p, x->block, "reshape", &in, 1, &o, 1, &a, 1);
    if (rc < 0)
        return ox_fail(x, rc, "%s", vq_errmsg());
    *out = c;
    return 0;
}

/* A meta that holds both a and b (dims that differ become -1). */
static int meta_join(struct ox *x, const vq__meta *a, const vq__meta *b, vq__meta *out, int j)
{
    if (a->dtype != b->dtype || a->ndim != b->ndim)
        return ox_fail(x, VQ_EINVAL,
                       "output %d: the branches give %s of rank %d and %s of rank "
                       "%d",
                       j, vq_dtype_name(a->dtype), a->ndim, vq_dtype_name(b->dtype), b->ndim);
    *out = *a;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            out->shape[i] = -1;
    return 0;
}

/* Whether g may give a sequence or an optional: an output declared one,
 * or a node of an op that makes one. */
static bool gives_containers(const Onnx__GraphProto *g)
{
    static const char *const makers[] = {"Sequence", "Optional", "SplitToSequence"};
    for (size_t i = 0; i < g->n_node; i++)
        for (size_t k = 0; k < sizeof makers / sizeof *makers; k++)
            if (g->node[i]->op_type &&
                !strncmp(g->node[i]->op_type, makers[k], strlen(makers[k])) &&
                strcmp(g->node[i]->op_type, "SequenceLength") &&
                strcmp(g->node[i]->op_type, "SequenceAt") &&
                strcmp(g->node[i]->op_type, "OptionalHasElement"))
                return true;
    for (size_t j = 0; j < g->n_output; j++) {
        const Onnx__TypeProto *tp = g->output[j]->type;
        if (tp && (tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE ||
                   tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE))
            return true;
    }
    return false;
}

static int t_if(struct ox *x)
{
    struct ox_val *c = ox_input(x, 0);
    const Onnx__NodeProto *n = x->node;
    const Onnx__GraphProto *g[2] = {ox_graph(x, "then_branch"), ox_graph(x, "else_branch")};
    int rc;
    if (!g[0] || !g[1])
        return ox_fail(x, VQ_EINVAL, "then_branch and else_branch must be graphs");
    int nout = (int)n->n_output;
    if (nout < 1 || nout > VQ__MAX_SLOTS || g[0]->n_output != n->n_output ||
        g[1]->n_output != n->n_output)
        return ox_fail(x, VQ_EINVAL,
                       "%d outputs, branches with %zu and %zu (varq takes 1 to %d, "
                       "the same in both)",
                       nout, g[0]->n_output, g[1]->n_output, VQ__MAX_SLOTS);
    if (c->meta.dtype != VQ_BOOL || vq__numel(c->meta.ndim, c->meta.shape) > 1)
        return ox_fail(x, VQ_EINVAL, "cond must be one bool");
    /* branches that give sequences or optionals: the condition is needed
     * at import (an offered one is taken), since those are resolved then
     * (t_sequence.c) */
    if (!c->konst && (gives_containers(g[0]) || gives_containers(g[1])))
        ox_known(x, c);
    if (c->konst) {
        /* known now: the taken branch's nodes, in this block */
        int taken = *(unsigned char *)c->konst->data ? 0 : 1;
        if ((rc = ox_subgraph(x, g[taken], x->block)) < 0)
            return rc;
        for (int j = 0; j < nout && rc == 0; j++) {
            struct ox_val *v = ox_find(x, g[taken]->output[j]->name);
            rc = v ? (ox_out(x, j) ? ox_alias(x, ox_out(x, j), v) : 0)
                   : ox_fail(x, VQ_EINVAL, "branch output \"%s\" is produced by no node",
                             g[taken]->output[j]->name);
        }
        return rc;
    }
    if ((rc = ox_var_of(x, c)) < 0)
        return rc;
    int outer = x->block, blk[2];
    char **names[2] = {vq__calloc((size_t)nout, sizeof(char *)),
                       vq__calloc((size_t)nout, sizeof(char *))};
    vq__meta metas[2][VQ__MAX_SLOTS];
    if (!names[0] || !names[1])
        rc = vq__fail(VQ_ENOMEM, "onnx: out of memory");
    for (int b = 0; b < 2 && rc == 0; b++) {
        if ((rc = blk[b] = vq_program_add_block(x->p, outer)) < 0)
            break;
        rc = ox_subgraph(x, g[b], blk[b]);
        x->block = blk[b];
        for (int j = 0; j < nout && rc == 0; j++) {
            struct ox_val *v = ox_find(x, g[b]->output[j]->name), *own;
            if (!v) {
                rc = ox_fail(x, VQ_EINVAL, "branch output \"%s\" is produced by no node",
                             g[b]->output[j]->name);
                break;
            }
            if (v->seq || v->none) {
                rc = ox_fail(x, VQ_ENOSYS,
                             "output %d is %s, and the condition is known only at run time: "
                             "varq resolves sequences and optionals when the model is "
                             "imported (offer the condition's input at import)",
                             j, v->seq ? "a sequence" : "an optional that may hold nothing");
                break;
            }
            if ((rc = own_var(x, v, NULL, 0, &own)) < 0)
                break;
            metas[b][j] = own->meta;
            if (!(names[b][j] = vq__strdup(own->var)))
                rc = vq__fail(VQ_ENOMEM, "onnx: out of memory");
        }
        x->block = outer;
    }
    const char *outs[VQ__MAX_SLOTS];
    char tmp[VQ__MAX_SLOTS][300];
    for (int j = 0; j < nout && rc == 0; j++) {
        vq__meta m;
        struct ox_val *o;
        if ((rc = meta_join(x, &metas[0][j], &metas[1][j], &m, j)) < 0)
            break;
        const char *name = ox_out(x, j);
        if (!name) {
            snprintf(tmp[j], sizeof tmp[j], "%s@onnx%d", n->name ? n->name : "if", x->ntemps++);
            name = tmp[j];
        }
        if ((rc = ox_block_var(x, name, &m, &o)) == 0)
            outs[j] = o->var;
    }
    if (rc == 0) {
        vq_attr a[4] = {VQ_ATTR_I("then_block", blk[0]), VQ_ATTR_I("else_block", blk[1]),
                        VQ_ATTR_SS("then_outputs", (const char *const *)names[0], nout),
                        VQ_ATTR_SS("else_outputs", (const char *const *)names[1], nout)};
        const char *in[2] = {c->var, c->var};
        rc = vq_program_add_op(x->p, outer, "cond", in, 2, outs, nout, a, 4);
        rc = rc < 0 ? ox_fail(x, rc, "%s", vq_errmsg()) : 0;
    }
    for (int b = 0; b < 2; b++) {
        for (int j = 0; names[b] && j < nout; j++)
            free(names[b][j]);
        free(names[b]);
    }
    return rc;
}

/* Whether body output 0 (cond_out) is body input 1 (cond_in), directly or
 * through Identity nodes. */
static bool cond_passes_through(const Onnx__GraphProto *g)
{
    const char *name = g->output[0]->name, *in = g->input[1]->name;
    for (size_t hops = 0; name && hops <= g->n_node; hops++) {
        if (in && !strcmp(name, in))
            return true;
        const char *from = NULL;
        for (size_t i = 0; i < g->n_node && !from; i++) {
            const Onnx__NodeProto *nd = g->node[i];
            if (nd->n_output >= 1 && nd->output[0] && !strcmp(nd->output[0], name))
                from = nd->op_type && !strcmp(nd->op_type, "Identity") && nd->n_input == 1
                           ? nd->input[0]
                           : "";
        }
        if (!from || !*from)
            return false;
        name = from;
    }
    return false;
}

/* The scan outputs: for each scan value v (body output first + s), a var
 * of the body that holds it, none of the body inputs bin[0 .. nc) nor an
 * earlier scan output's (into stk[s]); the while stacks them
 * (stack_outputs). Each iteration's value with a new dim 0 in front, the
 * iterations (known when the loop runs exactly iters times, else -1), into
 * sm[s]. */
static int scan_vars(struct ox *x, const Onnx__GraphProto *g, int first, int nscan, int64_t iters,
                     const char **bin, int nc, const char **stk, vq__meta *sm)
{
    const char *avoid[2 * VQ__MAX_SLOTS];
    memcpy(avoid, bin, (size_t)nc * sizeof *avoid);
    for (int s = 0; s < nscan; s++) {
        const char *nm = g->output[first + s]->name;
        struct ox_val *v = nm ? ox_find(x, nm) : NULL, *own;
        if (!v)
            return ox_fail(x, VQ_EINVAL, "body output \"%s\" is produced by no node", nm ? nm : "");
        if (v->meta.ndim + 1 > VQ_MAX_DIMS)
            return ox_fail(x, VQ_ENOSYS, "scan output %d has %d dims, more than %d", s,
                           v->meta.ndim + 1, VQ_MAX_DIMS);
        int rc = own_var(x, v, avoid, nc + s, &own);
        if (rc)
            return rc;
        stk[s] = avoid[nc + s] = own->var;
        sm[s] = v->meta;
        sm[s].ndim = v->meta.ndim + 1;
        sm[s].shape[0] = iters;
        memcpy(sm[s].shape + 1, v->meta.shape, (size_t)v->meta.ndim * sizeof(int64_t));
    }
    return 0;
}

/* What t_loop's steps fill in. */
struct loop {
    const Onnx__GraphProto *g; /* the body */
    struct ox_val *m, *cond;   /* the node's inputs M and cond, or NULL */
    int nv, nscan, nc;         /* carried values v..., scan outputs, nv + 2 */
    bool exact;                /* the loop runs exactly M times */
    int64_t max_iters;         /* M when known at import, else -1 */
    vq__meta im;               /* iter's meta (as the body declares it) */
    /* the carried values' initial values (iter, cond, v...) and the entry
     * predicate */
    struct ox_val *init[VQ__MAX_SLOTS], *entry;
    int body; /* the body's block */
    /* the body's vars: inputs, outputs, stacked scan values (of meta bm,
     * the iterations in front) and its predicate */
    const char *bin[VQ__MAX_SLOTS], *bout[VQ__MAX_SLOTS], *stk[VQ__MAX_SLOTS];
    vq__meta bm[VQ__MAX_SLOTS];
    struct ox_val *pred;
};

/* The counts the body and the node must agree on, and the trip count. */
static int loop_plan(struct ox *x, struct loop *l)
{
    const Onnx__NodeProto *n = x->node;
    const Onnx__GraphProto *g = l->g;
    if (!g)
        return ox_fail(x, VQ_EINVAL, "body must be a graph");
    int nv = l->nv = n->n_input >= 2 ? (int)n->n_input - 2 : 0;
    if (g->n_input != (size_t)nv + 2 || g->n_output < (size_t)nv + 1)
        return ox_fail(x, VQ_EINVAL,
                       "the body has %zu inputs and %zu outputs for %d carried "
                       "values",
                       g->n_input, g->n_output, nv);
    int nscan = l->nscan = (int)g->n_output - nv - 1;
    l->nc = nv + 2;
    if (n->n_output > (size_t)(nv + nscan))
        return ox_fail(x, VQ_EINVAL, "%zu outputs for %d carried values and %d scan outputs",
                       n->n_output, nv, nscan);
    if (nv + nscan + 2 > VQ__MAX_SLOTS - 1)
        return ox_fail(x, VQ_ENOSYS, "%d carried values and %d scan outputs, more than %d", nv,
                       nscan, VQ__MAX_SLOTS - 3);
    struct ox_val *m = l->m, *cond = l->cond;
    if (!m && !cond)
        return ox_fail(x, VQ_EINVAL, "neither M nor cond: the loop would never end");
    /* scan outputs with a static dim 0: a loop that runs exactly M times
     * (an offered M is used for that) */
    bool exact = nscan > 0 && m && cond_passes_through(g);
    if (exact && cond)
        exact = ox_known(x, cond) && cond->konst->numel == 1 && cond->konst->dtype == VQ_BOOL &&
                *(const uint8_t *)cond->konst->data;
    l->exact = exact && ox_known(x, m);
    l->max_iters = -1;
    if (m && m->konst) {
        if (m->konst->numel != 1 || m->konst->dtype != VQ_I64)
            return ox_fail(x, VQ_EINVAL, "M must be one int64");
        l->max_iters = *(int64_t *)m->konst->data;
        if (l->max_iters < 0)
            l->max_iters = 0;
    }
    return 0;
}

/* The carried values' initial values: iter (int64, as the body declares
 * it), cond, v...; and the entry predicate: cond, and 0 < M when M is
 * known only at run time. */
static int loop_inits(struct ox *x, struct loop *l)
{
    struct ox_val **init = l->init, *m = l->m;
    vq__meta cm = {.dtype = VQ_BOOL, .ndim = 0};
    l->im = (vq__meta){.dtype = VQ_I64, .ndim = 0};
    const Onnx__TypeProto *it = l->g->input[0]->type;
    if (it && it->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE && it->tensor_type->shape &&
        it->tensor_type->shape->n_dim == 1) {
        l->im.ndim = cm.ndim = 1;
        l->im.shape[0] = cm.shape[0] = 1;
    }
    vq_tensor *t0, *t1;
    int64_t zero = 0;
    unsigned char yes = 1;
    int rc;
    if ((rc = vq_tensor_from(&t0, VQ_I64, l->im.ndim, l->im.shape, &zero)) < 0 ||
        (rc = ox_const(x, NULL, t0, &init[0])) < 0)
        return rc;
    if (l->cond) {
        init[1] = l->cond;
    } else if ((rc = vq_tensor_from(&t1, VQ_BOOL, cm.ndim, cm.shape, &yes)) < 0 ||
               (rc = ox_const(x, NULL, t1, &init[1])) < 0) {
        return rc;
    }
    if (init[1]->meta.dtype != VQ_BOOL)
        return ox_fail(x, VQ_EINVAL, "cond must be a bool");
    for (int k = 0; k < l->nv; k++)
        if (!(init[2 + k] = ox_input(x, 2 + k)))
            return ox_fail(x, VQ_EINVAL, "input %d is missing", 2 + k);
    l->entry = init[1];
    if (m && !m->konst) {
        struct ox_val *lt;
        if ((rc = ox_emit(x, "less", (struct ox_val *[]){init[0], m}, 2, NULL, 1, NULL, 0, &lt)) <
                0 ||
            (rc = ox_emit(x, "logical_and", (struct ox_val *[]){l->entry, lt}, 2, NULL, 1, NULL, 0,
                          &l->entry)) < 0)
            return rc;
    }
    for (int k = 0; k < l->nc; k++)
        if ((rc = ox_var_of(x, init[k])) < 0)
            return rc;
    return ox_var_of(x, l->entry);
}

/* The body's outputs, in its block: iter + 1, cond_out, v_out..., the
 * scan values, and the predicate (cond_out, and iter + 1 < M when M is
 * known only at run time), each in a var none of the body's inputs hold. */
static int loop_outputs(struct ox *x, struct loop *l)
{
    const Onnx__GraphProto *g = l->g;
    struct ox_val *iter_in = ox_find(x, l->bin[0]), *iter_out, *onev, *next, *own;
    vq_tensor *t;
    int64_t one = 1;
    int rc = vq_tensor_from(&t, VQ_I64, l->im.ndim, l->im.shape, &one);
    if (rc == 0)
        rc = ox_const(x, NULL, t, &onev);
    if (rc == 0)
        rc = ox_emit(x, "add", (struct ox_val *[]){iter_in, onev}, 2, NULL, 1, NULL, 0, &iter_out);
    if (rc)
        return rc;
    l->bout[0] = iter_out->var;
    struct ox_val *cond_out = ox_find(x, g->output[0]->name);
    if (!cond_out)
        return ox_fail(x, VQ_EINVAL, "body output \"%s\" is produced by no node",
                       g->output[0]->name);
    next = cond_out;
    if (l->m && !l->m->konst) {
        struct ox_val *lt;
        if ((rc = ox_emit(x, "less", (struct ox_val *[]){iter_out, l->m}, 2, NULL, 1, NULL, 0,
                          &lt)) == 0)
            rc = ox_emit(x, "logical_and", (struct ox_val *[]){cond_out, lt}, 2, NULL, 1, NULL, 0,
                         &next);
    }
    if (rc == 0 && (rc = own_var(x, cond_out, l->bin, l->nc, &own)) == 0)
        l->bout[1] = own->var;
    for (int k = 0; k < l->nv && rc == 0; k++) {
        struct ox_val *v = ox_find(x, g->output[1 + k]->name);
        if (!v)
            rc = ox_fail(x, VQ_EINVAL, "body output \"%s\" is produced by no node",
                         g->output[1 + k]->name);
        else if ((rc = own_var(x, v, l->bin, l->nc, &own)) == 0)
            l->bout[2 + k] = own->var;
    }
    if (rc == 0)
        rc = scan_vars(x, g, 1 + l->nv, l->nscan, l->exact ? l->max_iters : -1, l->bin, l->nc,
                       l->stk, l->bm);
    return rc ? rc : own_var(x, next, l->bin, l->nc, &l->pred);
}

/* The body: a block of its own, with vars for its inputs, its nodes, its
 * outputs. */
static int loop_body(struct ox *x, struct loop *l)
{
    int outer = x->block, rc = 0;
    if ((l->body = vq_program_add_block(x->p, outer)) < 0)
        return l->body;
    x->block = l->body;
    for (int k = 0; k < l->nc && rc == 0; k++) {
        struct ox_val *v;
        const char *nm = l->g->input[k]->name;
        vq__meta meta = k == 0 ? l->im : l->init[k]->meta;
        if (!nm || !*nm)
            rc = ox_fail(x, VQ_EINVAL, "body input %d has no name", k);
        else if ((rc = ox_block_var(x, nm, &meta, &v)) == 0)
            l->bin[k] = v->var;
        if (rc == 0 && k == 0)
            v->sym = v; /* the iteration number: never negative */
    }
    x->block = outer;
    if (rc == 0)
        rc = ox_subgraph(x, l->g, l->body);
    if (rc)
        return rc;
    x->block = l->body;
    rc = loop_outputs(x, l);
    x->block = outer;
    return rc;
}

/* The while, its outputs: the final iter and cond (temporaries), v...,
 * the scan outputs. */
static int loop_emit(struct ox *x, struct loop *l)
{
    const Onnx__NodeProto *n = x->node;
    int nc = l->nc, nscan = l->nscan, rc = 0;
    const char *xin[VQ__MAX_SLOTS], *outs[VQ__MAX_SLOTS];
    xin[0] = l->entry->var;
    for (int k = 0; k < nc; k++)
        xin[1 + k] = l->init[k]->var;
    char tmp[VQ__MAX_SLOTS][300];
    for (int k = 0; k < nc + nscan && rc == 0; k++) {
        const char *name = k >= 2 ? ox_out(x, k - 2) : NULL;
        if (!name) {
            snprintf(tmp[k], sizeof tmp[k], "%s@onnx%d", n->name ? n->name : "loop", x->ntemps++);
            name = tmp[k];
        }
        struct ox_val *o;
        vq__meta meta = k == 0 ? l->im : k >= nc ? l->bm[k - nc] : l->init[k]->meta;
        if ((rc = ox_block_var(x, name, &meta, &o)) == 0)
            outs[k] = o->var;
    }
    if (rc)
        return rc;
    vq_attr a[6] = {VQ_ATTR_I("body_block", l->body),
                    VQ_ATTR_SS("body_inputs", l->bin, nc),
                    VQ_ATTR_SS("body_outputs", l->bout, nc),
                    VQ_ATTR_S("body_cond", l->pred->var),
                    VQ_ATTR_I("max_iters", l->max_iters),
                    VQ_ATTR_SS("stack_outputs", l->stk, nscan)};
    rc =
        vq_program_add_op(x->p, x->block, "while", xin, nc + 1, outs, nc + nscan, a, nscan ? 6 : 5);
    return rc < 0 ? ox_fail(x, rc, "%s", vq_errmsg()) : 0;
}

/* The most iterations loop_unrolled translates the body for: each adds
 * the body's ops to the program. */
#define OX_UNROLL_MAX 4096

/* A Loop that carries a sequence or an optional (carried value k, the
 * first): unrolled at import. A sequence is a list of values the import
 * knows (t_sequence.c), and a while's carried vars are tensors of one
 * meta, so the body is translated once per iteration instead, into the
 * current block, each pass in a frame of its own (its names made anew),
 * given the iteration number and condition as known values and the
 * previous pass's carried values. This needs M and cond known at import
 * (constants, or inputs offered then) and the body's cond_out known in
 * every pass; a sequence grown over a count known only at run time would
 * need a run-time list, and fails naming the node. */
static int loop_unrolled(struct ox *x, struct loop *l, int k0)
{
    const Onnx__GraphProto *g = l->g;
    int nv = l->nv, rc = 0;
    int64_t m = -1;
    bool go = true;
    if (l->m && (!ox_known(x, l->m) || !ox_known_int1(l->m, &m)))
        return ox_fail(x, VQ_ENOSYS,
                       "carried value %d is a %s, and the trip count M is known only at run "
                       "time: varq resolves sequences when the model is imported, so a loop "
                       "that carries one is unrolled then and needs M known (a constant, or "
                       "an input offered at import)",
                       k0, ox_input(x, 2 + k0)->seq ? "sequence" : "optional");
    if (l->cond && (!ox_known(x, l->cond) || l->cond->konst->numel != 1))
        return ox_fail(x, VQ_ENOSYS,
                       "carried value %d is a sequence or an optional, and cond is known only "
                       "at run time: a loop that carries one is unrolled at import and needs "
                       "its condition known then",
                       k0);
    if (l->cond)
        go = ox_first_value(l->cond->konst) != 0;
    if (l->nscan > 0)
        return ox_fail(x, VQ_ENOSYS,
                       "a loop that carries a sequence or an optional is unrolled at import; "
                       "varq does not stack scan outputs there (%d of them)",
                       l->nscan);
    struct ox_val *cur[VQ__MAX_SLOTS], *cond = l->cond;
    for (int k = 0; k < nv; k++)
        if (!(cur[k] = ox_input(x, 2 + k)))
            return ox_fail(x, VQ_EINVAL, "input %d is missing", 2 + k);
    const Onnx__TypeProto *it = g->input[0]->type;
    int ndim = it && it->value_case == ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE &&
                       it->tensor_type->shape && it->tensor_type->shape->n_dim == 1
                   ? 1
                   : 0;
    int64_t one = 1;
    for (int64_t i = 0; go && (m < 0 || i < m) && rc == 0; i++) {
        if (i >= OX_UNROLL_MAX)
            return ox_fail(x, VQ_ENOSYS,
                           "a loop that carries a sequence or an optional is unrolled at "
                           "import, at most %d iterations",
                           OX_UNROLL_MAX);
        struct ox_frame f = {0};
        ox_frame_push(x, &f);
        vq_tensor *ti = NULL, *tc = NULL;
        unsigned char yes = 1;
        struct ox_val *iv;
        rc = vq_tensor_from(&ti, VQ_I64, ndim, &one, &i);
        if (rc == 0)
            rc = ox_const(x, g->input[0]->name, ti, &iv);
        if (rc == 0 && !cond && (rc = vq_tensor_from(&tc, VQ_BOOL, 0, NULL, &yes)) == 0)
            rc = ox_const(x, NULL, tc, &cond);
        if (rc == 0)
            rc = ox_alias(x, g->input[1]->name, cond);
        for (int k = 0; k < nv && rc == 0; k++)
            rc = ox_alias(x, g->input[2 + k]->name, cur[k]);
        const Onnx__NodeProto *node = x->node;
        int index = x->node_index;
        if (rc == 0)
            rc = ox_subgraph(x, g, x->block);
        x->node = node;
        x->node_index = index;
        for (int j = 0; j <= nv && rc == 0; j++) {
            struct ox_val *o = ox_find(x, g->output[j]->name);
            if (!o)
                rc = ox_fail(x, VQ_EINVAL, "body output \"%s\" is produced by no node",
                             g->output[j]->name);
            else if (j > 0)
                cur[j - 1] = o;
            else if (!ox_known(x, o) || o->konst->numel != 1)
                rc = ox_fail(x, VQ_ENOSYS,
                             "the body's condition is known only at run time: a loop that "
                             "carries a sequence or an optional is unrolled at import and "
                             "needs it known then");
            else
                go = ox_first_value((cond = o)->konst) != 0;
        }
        ox_frame_pop(x);
    }
    for (int k = 0; k < nv && rc == 0; k++)
        if (ox_out(x, k))
            rc = ox_alias(x, ox_out(x, k), cur[k]);
    return rc;
}

/* Loop(M, cond, v...) with body (iter, cond_in, v_in...) -> (cond_out,
 * v_out..., scan...): a while carrying (iter, cond, v...), whose predicate
 * is the body's cond_out (and iter < M when M is known only at run time; a
 * known M is max_iters), and stacking the scan values of every iteration
 * (stack_outputs, joined once when the loop ends). A scan output's dim 0,
 * the iterations, is M when the loop runs exactly M iterations (M known at
 * import, cond absent or known true, and cond_out the body's cond_in
 * through Identity nodes), else known only at run time (-1). The steps
 * below fill a struct loop in turn: its plan, the carried values'
 * initial values, the body, the while. */
static int t_loop(struct ox *x)
{
    struct loop l = {.g = ox_graph(x, "body"), .m = ox_input(x, 0), .cond = ox_input(x, 1)};
    int rc;
    if ((rc = loop_plan(x, &l)) < 0)
        return rc;
    for (int k = 0; k < l.nv; k++) {
        struct ox_val *v = ox_input(x, 2 + k);
        if (v && (v->seq || v->none))
            return loop_unrolled(x, &l, k);
    }
    if ((rc = ox_tensor_in(x, 0, l.m)) < 0 || (rc = ox_tensor_in(x, 1, l.cond)) < 0 ||
        (rc = loop_inits(x, &l)) < 0 || (rc = loop_body(x, &l)) < 0)
        return rc;
    return loop_emit(x, &l);
}

/* ---- Scan ---- */

/* One scan (what t_scan's steps fill in): the opset 9 form, which the
 * opset 8 form runs once per batch element. */
struct scan {
    const Onnx__GraphProto *g; /* the body */
    int n, m, k;               /* states, scan inputs, scan outputs */
    /* the scan inputs with their scanned axis moved to dim 0, and whether
     * each is read from its end */
    struct ox_val *xs[VQ__MAX_SLOTS];
    bool rev_in[VQ__MAX_SLOTS];
    /* the outputs' names (NULL: temporaries); whether each scan output is
     * stacked back to front, and the axis it is stacked on (may be
     * negative, as ONNX gives it) */
    const char *names[VQ__MAX_SLOTS];
    bool rev_out[VQ__MAX_SLOTS];
    int64_t ax_out[VQ__MAX_SLOTS];
    int64_t iters;                              /* the scanned length when known, else -1 */
    struct ox_val *len, *last;                  /* it, and it - 1, as int64 scalars */
    struct ox_val *init[VQ__MAX_SLOTS], *entry; /* iter 0, states...; 0 < len */
    int body;
    const char *bin[VQ__MAX_SLOTS], *bout[VQ__MAX_SLOTS], *stk[VQ__MAX_SLOTS];
    vq__meta bm[VQ__MAX_SLOTS];
    struct ox_val *pred;
    struct ox_val *res[VQ__MAX_SLOTS]; /* the final states, the scan outputs */
};

/* v's entry dim (known at import or not) as an int64 scalar. */
static int dim_value(struct ox *x, struct ox_val *v, int dim, struct ox_val **out)
{
    if (v->meta.shape[dim] >= 0)
        return ox_scalar(x, VQ_I64, (double)v->meta.shape[dim], out);
    struct ox_val *sh, *zero;
    vq_attr a[2] = {VQ_ATTR_I("start", dim), VQ_ATTR_I("end", dim + 1)};
    vq_attr g = VQ_ATTR_I("axis", 0);
    int rc;
    if ((rc = ox_emit(x, "shape", &v, 1, NULL, 1, a, 2, &sh)) < 0 ||
        (rc = ox_scalar(x, VQ_I64, 0, &zero)) < 0)
        return rc;
    return ox_emit(x, "gather", (struct ox_val *[]){sh, zero}, 2, NULL, 1, &g, 1, out);
}

/* v with dim from moved to dim to (the others in order), into name
 * (NULL: a temporary); v itself when from == to and name is NULL. */
static int move_dim(struct ox *x, struct ox_val *v, int from, int to, const char *name,
                    struct ox_val **out)
{
    if (from == to && !name) {
        *out = v;
        return 0;
    }
    int64_t perm[VQ_MAX_DIMS];
    for (int i = 0, j = 0; i < v->meta.ndim; i++) {
        if (j == from)
            j++;
        perm[i] = i == to ? from : j++;
    }
    vq_attr a = VQ_ATTR_IS("perm", perm, v->meta.ndim);
    return ox_emit(x, "transpose", &v, 1, &name, 1, &a, 1, out);
}

/* v's slice at index idx (an int64 scalar) of dim 0. */
static int slice_at(struct ox *x, struct ox_val *v, struct ox_val *idx, struct ox_val **out)
{
    vq_attr a = VQ_ATTR_I("axis", 0);
    return ox_emit(x, "gather", (struct ox_val *[]){v, idx}, 2, NULL, 1, &a, 1, out);
}

/* The directions of the scan inputs or outputs (attribute name, n of
 * them): 0 forward, 1 reverse. */
static int scan_dirs(struct ox *x, const char *name, int n, bool *rev)
{
    int nd;
    const int64_t *d = ox_ints(x, name, &nd);
    if (nd >= 0 && nd != n)
        return ox_fail(x, VQ_EINVAL, "%s has %d entries for %d values", name, nd, n);
    for (int i = 0; i < n; i++) {
        if (nd >= 0 && d[i] != 0 && d[i] != 1)
            return ox_fail(x, VQ_EINVAL, "%s[%d] is %lld: 0 (forward) or 1 (reverse)", name, i,
                           (long long)d[i]);
        rev[i] = nd >= 0 && d[i] == 1;
    }
    return 0;
}

/* The scan's length (the scan inputs' dim 0, which must agree), the
 * carried values' initial values (iter 0, the states) and the entry
 * predicate 0 < len. */
static int scan_prepare(struct ox *x, struct scan *c)
{
    c->iters = -1;
    struct ox_val *first = c->xs[0], *zero, *one;
    for (int s = 0; s < c->m; s++) {
        int64_t len = c->xs[s]->meta.shape[0];
        if (len >= 0 && c->iters >= 0 && len != c->iters)
            return ox_fail(x, VQ_EINVAL, "scan input %d has %lld steps, an earlier one %lld", s,
                           (long long)len, (long long)c->iters);
        if (len >= 0) {
            c->iters = len;
            first = c->xs[s];
        }
    }
    int rc;
    if ((rc = dim_value(x, first, 0, &c->len)) < 0 || (rc = ox_scalar(x, VQ_I64, 0, &zero)) < 0 ||
        (rc = ox_scalar(x, VQ_I64, 1, &one)) < 0 ||
        (rc = ox_emit(x, "sub", (struct ox_val *[]){c->len, one}, 2, NULL, 1, NULL, 0, &c->last)) <
            0 ||
        (rc = ox_emit(x, "less", (struct ox_val *[]){zero, c->len}, 2, NULL, 1, NULL, 0,
                      &c->entry)) < 0)
        return rc;
    c->init[0] = zero;
    for (int k = 0; k <= c->n; k++)
        if ((rc = ox_var_of(x, c->init[k])) < 0)
            return rc;
    return ox_var_of(x, c->entry);
}

/* A temporary var name for the node's scan machinery, into buf. */
static const char *scan_temp(struct ox *x, char *buf, size_t size)
{
    snprintf(buf, size, "%s@onnx%d", x->node->name && *x->node->name ? x->node->name : "scan",
             x->ntemps++);
    return buf;
}

/* The body, a block of its own: vars for the iteration number and the
 * states, each scan input's slice (at the iteration, or at len - 1 -
 * iteration in reverse) under the body's input name, its nodes, then its
 * outputs: iter + 1, the states, the scan values and the predicate
 * iter + 1 < len. */
static int scan_body(struct ox *x, struct scan *c)
{
    const Onnx__GraphProto *g = c->g;
    int outer = x->block, rc = 0, nc = c->n + 1;
    if ((c->body = vq_program_add_block(x->p, outer)) < 0)
        return c->body;
    x->block = c->body;
    struct ox_val *iter = NULL, *one, *next = NULL, *lt;
    char tmp[300];
    vq__meta im = {.dtype = VQ_I64, .ndim = 0};
    if ((rc = ox_block_var(x, scan_temp(x, tmp, sizeof tmp), &im, &iter)) == 0) {
        iter->sym = iter; /* never negative */
        c->bin[0] = iter->var;
    }
    for (int k = 0; k < c->n && rc == 0; k++) {
        struct ox_val *v;
        const char *nm = g->input[k]->name;
        if (!nm || !*nm)
            rc = ox_fail(x, VQ_EINVAL, "body input %d has no name", k);
        else if ((rc = ox_block_var(x, nm, &c->init[1 + k]->meta, &v)) == 0)
            c->bin[1 + k] = v->var;
    }
    for (int s = 0; s < c->m && rc == 0; s++) {
        const char *nm = g->input[c->n + s]->name;
        struct ox_val *idx = iter, *slice;
        if (!nm || !*nm)
            rc = ox_fail(x, VQ_EINVAL, "body input %d has no name", c->n + s);
        else if (c->rev_in[s])
            rc = ox_emit(x, "sub", (struct ox_val *[]){c->last, iter}, 2, NULL, 1, NULL, 0, &idx);
        if (rc == 0 && (rc = slice_at(x, c->xs[s], idx, &slice)) == 0)
            rc = ox_alias(x, nm, slice);
    }
    if (rc == 0)
        rc = ox_subgraph(x, g, c->body);
    if (rc == 0 && (rc = ox_scalar(x, VQ_I64, 1, &one)) == 0 &&
        (rc = ox_emit(x, "add", (struct ox_val *[]){iter, one}, 2, NULL, 1, NULL, 0, &next)) == 0)
        c->bout[0] = next->var;
    for (int k = 0; k < c->n && rc == 0; k++) {
        struct ox_val *v = ox_find(x, g->output[k]->name), *own;
        if (!v)
            rc = ox_fail(x, VQ_EINVAL, "body output \"%s\" is produced by no node",
                         g->output[k]->name);
        else if ((rc = own_var(x, v, c->bin, nc, &own)) == 0)
            c->bout[1 + k] = own->var;
    }
    if (rc == 0)
        rc = scan_vars(x, g, c->n, c->k, c->iters, c->bin, nc, c->stk, c->bm);
    if (rc == 0 &&
        (rc = ox_emit(x, "less", (struct ox_val *[]){next, c->len}, 2, NULL, 1, NULL, 0, &lt)) == 0)
        rc = own_var(x, lt, c->bin, nc, &c->pred);
    x->block = outer;
    return rc;
}

/* The while and its results: the final states, and each scan output
 * stacked along dim 0, gathered back to front when reversed, its dim 0
 * moved to its axis. */
static int scan_emit(struct ox *x, struct scan *c)
{
    int nc = c->n + 1, rc = 0, ax[VQ__MAX_SLOTS];
    for (int s = 0; s < c->k; s++)
        if ((rc = ox_axis(x, "scan_output_axes", c->ax_out[s], c->bm[s].ndim, &ax[s])) < 0)
            return rc;
    const char *xin[VQ__MAX_SLOTS], *outs[VQ__MAX_SLOTS];
    xin[0] = c->entry->var;
    for (int k = 0; k < nc; k++)
        xin[1 + k] = c->init[k]->var;
    char tmp[VQ__MAX_SLOTS][300];
    for (int k = 0; k < nc + c->k && rc == 0; k++) {
        int j = k - 1, s = k - nc;
        bool direct = k >= 1 && (s < 0 || (!c->rev_out[s] && ax[s] == 0));
        const char *name = direct ? c->names[j] : NULL;
        if (!name)
            name = scan_temp(x, tmp[k], sizeof tmp[k]);
        vq__meta meta = k == 0  ? (vq__meta){.dtype = VQ_I64, .ndim = 0}
                        : s < 0 ? c->init[k]->meta
                                : c->bm[s];
        struct ox_val *o;
        if ((rc = ox_block_var(x, name, &meta, &o)) == 0) {
            outs[k] = o->var;
            if (j >= 0)
                c->res[j] = o;
        }
    }
    if (rc)
        return rc;
    vq_attr a[6] = {VQ_ATTR_I("body_block", c->body),
                    VQ_ATTR_SS("body_inputs", c->bin, nc),
                    VQ_ATTR_SS("body_outputs", c->bout, nc),
                    VQ_ATTR_S("body_cond", c->pred->var),
                    VQ_ATTR_I("max_iters", c->iters),
                    VQ_ATTR_SS("stack_outputs", c->stk, c->k)};
    rc = vq_program_add_op(x->p, x->block, "while", xin, nc + 1, outs, nc + c->k, a, c->k ? 6 : 5);
    if (rc < 0)
        return ox_fail(x, rc, "%s", vq_errmsg());
    for (int s = 0; s < c->k; s++) {
        struct ox_val **v = &c->res[c->n + s], *stop, *step, *idx;
        const char *name = c->names[c->n + s], *to = ax[s] == 0 ? name : NULL;
        vq_attr g = VQ_ATTR_I("axis", 0);
        if (c->rev_out[s] &&
            ((rc = ox_scalar(x, VQ_I64, -1, &stop)) < 0 ||
             (rc = ox_scalar(x, VQ_I64, -1, &step)) < 0 ||
             (rc = ox_emit(x, "range", (struct ox_val *[]){c->last, stop, step}, 3, NULL, 1, NULL,
                           0, &idx)) < 0 ||
             (rc = ox_emit(x, "gather", (struct ox_val *[]){*v, idx}, 2, &to, 1, &g, 1, v)) < 0))
            return rc;
        if (ax[s] != 0 && (rc = move_dim(x, *v, 0, ax[s], name, v)) < 0)
            return rc;
    }
    return 0;
}

/* One scan: its length and initial values, its body, its while. */
static int scan_run(struct ox *x, struct scan *c)
{
    int rc;
    if ((rc = scan_prepare(x, c)) < 0 || (rc = scan_body(x, c)) < 0)
        return rc;
    return scan_emit(x, c);
}

/* The node's counts and its body's, which must agree. */
static int scan_counts(struct ox *x, struct scan *c, int first)
{
    const Onnx__NodeProto *nd = x->node;
    const Onnx__GraphProto *g = c->g;
    if (!g)
        return ox_fail(x, VQ_EINVAL, "body must be a graph");
    int m = c->m = (int)ox_int(x, "num_scan_inputs");
    int n = c->n = (int)nd->n_input - first - m;
    if (m < 1 || n < 0)
        return ox_fail(x, VQ_EINVAL, "num_scan_inputs %d for %zu inputs", m, nd->n_input);
    if (g->n_input != (size_t)(n + m) || g->n_output < (size_t)n)
        return ox_fail(x, VQ_EINVAL,
                       "the body has %zu inputs and %zu outputs for %d states and %d scan inputs",
                       g->n_input, g->n_output, n, m);
    c->k = (int)g->n_output - n;
    if (nd->n_output > (size_t)(n + c->k))
        return ox_fail(x, VQ_EINVAL, "%zu outputs for %d states and %d scan outputs", nd->n_output,
                       n, c->k);
    if (n + c->k + 2 > VQ__MAX_SLOTS - 1 || m > VQ__MAX_SLOTS)
        return ox_fail(x, VQ_ENOSYS, "%d states, %d scan inputs and %d scan outputs: too many", n,
                       m, c->k);
    for (int k = 0; k < n + m; k++)
        if (!ox_input(x, first + k))
            return ox_fail(x, VQ_EINVAL, "input %d is missing", first + k);
    return 0;
}

/* Scan since opset 9: states..., scan inputs... (each scanned along its
 * scan_input_axes entry). */
static int scan9(struct ox *x, struct scan *c)
{
    int rc, na, no;
    if ((rc = scan_counts(x, c, 0)) < 0 ||
        (rc = scan_dirs(x, "scan_input_directions", c->m, c->rev_in)) < 0 ||
        (rc = scan_dirs(x, "scan_output_directions", c->k, c->rev_out)) < 0)
        return rc;
    const int64_t *axes = ox_ints(x, "scan_input_axes", &na),
                  *oaxes = ox_ints(x, "scan_output_axes", &no);
    if ((na >= 0 && na != c->m) || (no >= 0 && no != c->k))
        return ox_fail(x, VQ_EINVAL,
                       "scan_input_axes / scan_output_axes have %d / %d entries "
                       "for %d scan inputs and %d scan outputs",
                       na, no, c->m, c->k);
    for (int s = 0; s < c->m; s++) {
        struct ox_val *v = ox_input(x, c->n + s);
        int ax = 0;
        if (v->meta.ndim < 1)
            return ox_fail(x, VQ_EINVAL, "scan input %d is a scalar: nothing to scan", s);
        if ((rc = ox_axis(x, "scan_input_axes", na >= 0 ? axes[s] : 0, v->meta.ndim, &ax)) < 0 ||
            (rc = move_dim(x, v, ax, 0, NULL, &c->xs[s])) < 0)
            return rc;
    }
    for (int k = 0; k < c->n; k++)
        c->init[1 + k] = ox_input(x, k);
    for (int j = 0; j < c->n + c->k; j++)
        c->names[j] = ox_out(x, j);
    for (int s = 0; s < c->k; s++)
        c->ax_out[s] = no >= 0 ? oaxes[s] : 0;
    return scan_run(x, c);
}

/* Scan of opset 8: sequence_lens, then states [batch, ...] and scan
 * inputs [batch, sequence, ...]; the body sees one batch element. A
 * while over the batch runs the opset 9 scan of each element's values in
 * its body and stacks its results into the outputs. */
static int scan8(struct ox *x, struct scan *c)
{
    int rc;
    struct ox_val *lens = ox_input(x, 0);
    if ((rc = scan_counts(x, c, 1)) < 0 || (rc = scan_dirs(x, "directions", c->m, c->rev_in)) < 0)
        return rc;
    if (lens)
        return ox_fail(x, VQ_ENOSYS,
                       "sequence_lens (Scan of opset 8) is not supported: sequences "
                       "of the batch's full length are");
    struct ox_val *vals[VQ__MAX_SLOTS], *zero, *one, *nb, *entry;
    for (int k = 0; k < c->n + c->m; k++) {
        vals[k] = ox_input(x, 1 + k);
        if (vals[k]->meta.ndim < (k < c->n ? 1 : 2))
            return ox_fail(x, VQ_EINVAL, "input %d has %d dims: too few for a batch%s", 1 + k,
                           vals[k]->meta.ndim, k < c->n ? "" : " and a sequence");
    }
    if ((rc = dim_value(x, vals[0], 0, &nb)) < 0 || (rc = ox_scalar(x, VQ_I64, 0, &zero)) < 0 ||
        (rc = ox_scalar(x, VQ_I64, 1, &one)) < 0 ||
        (rc = ox_emit(x, "less", (struct ox_val *[]){zero, nb}, 2, NULL, 1, NULL, 0, &entry)) < 0 ||
        (rc = ox_var_of(x, zero)) < 0 || (rc = ox_var_of(x, entry)) < 0)
        return rc;
    /* the batch loop's body: element b of every input, the scan, b + 1 */
    int outer = x->block, body = vq_program_add_block(x->p, outer);
    if (body < 0)
        return body;
    x->block = body;
    char tmp[VQ__MAX_SLOTS + 2][300];
    struct ox_val *b = NULL, *next, *lt, *pred;
    vq__meta im = {.dtype = VQ_I64, .ndim = 0};
    const char *bin = NULL, *stk[VQ__MAX_SLOTS];
    vq__meta sm[VQ__MAX_SLOTS];
    if ((rc = ox_block_var(x, scan_temp(x, tmp[0], sizeof tmp[0]), &im, &b)) == 0) {
        b->sym = b;
        bin = b->var;
    }
    for (int k = 0; k < c->n + c->m && rc == 0; k++) {
        struct ox_val *e;
        if ((rc = slice_at(x, vals[k], b, &e)) == 0) {
            if (k < c->n)
                c->init[1 + k] = e;
            else
                c->xs[k - c->n] = e;
        }
    }
    if (rc == 0)
        rc = scan_run(x, c);
    for (int j = 0; j < c->n + c->k && rc == 0; j++) {
        struct ox_val *own, *v = c->res[j];
        if ((rc = own_var(x, v, &bin, 1, &own)) < 0)
            break;
        stk[j] = own->var;
        sm[j] = v->meta;
        sm[j].ndim = v->meta.ndim + 1;
        sm[j].shape[0] = nb->konst ? *(const int64_t *)nb->konst->data : -1;
        memcpy(sm[j].shape + 1, v->meta.shape, (size_t)v->meta.ndim * sizeof(int64_t));
    }
    if (rc == 0 &&
        (rc = ox_emit(x, "add", (struct ox_val *[]){b, one}, 2, NULL, 1, NULL, 0, &next)) == 0 &&
        (rc = ox_emit(x, "less", (struct ox_val *[]){next, nb}, 2, NULL, 1, NULL, 0, &lt)) == 0)
        rc = own_var(x, lt, &bin, 1, &pred);
    x->block = outer;
    if (rc)
        return rc;
    const char *xin[2] = {entry->var, zero->var}, *outs[VQ__MAX_SLOTS], *bout = next->var;
    struct ox_val *o;
    if ((rc = ox_block_var(x, scan_temp(x, tmp[1], sizeof tmp[1]), &im, &o)) < 0)
        return rc;
    outs[0] = o->var;
    for (int j = 0; j < c->n + c->k; j++) {
        const char *name = ox_out(x, j);
        if (!name)
            name = scan_temp(x, tmp[2 + j], sizeof tmp[2 + j]);
        if ((rc = ox_block_var(x, name, &sm[j], &o)) < 0)
            return rc;
        outs[1 + j] = o->var;
    }
    vq_attr a[6] = {VQ_ATTR_I("body_block", body),
                    VQ_ATTR_SS("body_inputs", &bin, 1),
                    VQ_ATTR_SS("body_outputs", &bout, 1),
                    VQ_ATTR_S("body_cond", pred->var),
                    VQ_ATTR_I("max_iters", sm[0].shape[0]),
                    VQ_ATTR_SS("stack_outputs", stk, c->n + c->k)};
    rc = vq_program_add_op(x->p, x->block, "while", xin, 2, outs, 1 + c->n + c->k, a, 6);
    return rc < 0 ? ox_fail(x, rc, "%s", vq_errmsg()) : 0;
}

/* Scan(states..., scan inputs...) with body (states..., slices...) ->
 * (states..., scan values...), since opset 9: a while carrying the
 * iteration number and the states, whose body gathers each scan input's
 * slice at the iteration (from the end for a reversed input), run len
 * times (the scanned axis' length, known at import or read when the
 * while starts), stacking the scan values; a reversed scan output is
 * gathered back to front, and a scan output axis other than 0 is a
 * transpose after. Opset 8's batched form is that scan per batch
 * element, in a while over the batch. */
static int t_scan(struct ox *x)
{
    struct scan c = {.g = ox_graph(x, "body")};
    return x->opset < 9 ? scan8(x, &c) : scan9(x, &c);
}

/* ---- the rows ---- */

const struct ox_op ox_op_If =
    OX_ROW(t_if, NULL, 1, 1, false, OX_ATTRS(OX_GRAPH("then_branch"), OX_GRAPH("else_branch")));
/* M and cond may be absent (""), the carried values any number */
/* carried values may be sequences and optionals (loop_unrolled) */
const struct ox_op ox_op_Loop = {.fn = t_loop,
                                 .min_in = 0,
                                 .max_in = OX_ANY,
                                 .attrs = OX_ATTRS(OX_GRAPH("body")),
                                 .containers = true};
/* states and scan inputs: any number (num_scan_inputs of them scanned),
 * after opset 8's optional sequence_lens */
const struct ox_op ox_op_Scan =
    OX_ROW(t_scan, NULL, 0, OX_ANY, false,
           OX_ATTRS(OX_GRAPH("body"), OX_INT("num_scan_inputs", 0),
                    OX_INTS("directions", VQ__MAX_SLOTS, .until = 9),
                    OX_INTS("scan_input_directions", VQ__MAX_SLOTS, .since = 9),
                    OX_INTS("scan_output_directions", VQ__MAX_SLOTS, .since = 9),
                    OX_INTS("scan_input_axes", VQ__MAX_SLOTS, .since = 11),
                    OX_INTS("scan_output_axes", VQ__MAX_SLOTS, .since = 11)));
