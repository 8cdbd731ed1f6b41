/* ONNX ModelProto -> varq program.
 *
 * The import walks the graph once, in the node order ONNX requires
 * (topological). Every ONNX value gets a struct ox_val: what it is (dtype
 * and shape as far as known) and, once an op reads it at run time, the
 * program var holding it. Initializers become persistable vars whose
 * tensors go to the caller's scope; the integer ones (shapes, axes,
 * indices) are also known values, so that translations can read them as
 * attributes. A translation (t_*.c) emits varq ops through ox_emit, which
 * infers each output's dtype and shape with the op's own inference; when
 * every input of an op is known at import (a Constant, an integer
 * initializer, a Shape of a known shape, and what is computed from those)
 * the op runs right away on the CPU and its outputs are known too, so
 * shape arithmetic never reaches the program. Float initializers are never
 * folded: they are parameters that training must reach.
 *
 * Nothing reaches the caller's scope until the whole model imported: the
 * tensors to bind are collected and set at the end. */
#include "onnx_internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OX_MIN_OPSET 1
#define OX_MAX_OPSET 18

/* ---- the model ---- */

/* The versions of the operator sets the model imports that varq reads:
 * *out that of the default domain (ai.onnx), *training that of
 * ai.onnx.preview.training (0 when not imported). A model may import only
 * the latter (its nodes all of that domain, as ONNX's tests of Adam and
 * friends): *out is then 0, and a node of the default domain is refused
 * where it is met (ox_nodes). */
static int model_opset(const Onnx__ModelProto *m, int64_t *out, int64_t *training)
{
    *out = -1;
    *training = 0;
    bool found = false;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        if ((!o->domain || !*o->domain || !strcmp(o->domain, "ai.onnx")) && o->has_version) {
            *out = o->version;
            found = true;
        } else if (o->domain && !strcmp(o->domain, OX_TRAINING) && o->has_version) {
            if (o->version != 1)
                return vq__fail(VQ_ENOSYS,
                                "onnx: the model uses opset %lld of " OX_TRAINING "; varq reads 1",
                                (long long)o->version);
            *training = 1;
        }
    }
    if (found && *out < 0)
        return vq__fail(VQ_EINVAL,
                        "onnx: opset %lld of ai.onnx is not valid (versions start "
                        "at 1)",
                        (long long)*out);
    if (!found && *training) {
        *out = 0;
        return 0;
    }
    if (!found && m->n_opset_import > 0 && m->opset_import[0]->domain &&
        *m->opset_import[0]->domain)
        return vq__fail(VQ_ENOSYS,
                        "onnx: the model uses only other operator sets than ai.onnx "
                        "and " OX_TRAINING " (%s first); varq reads those two",
                        m->opset_import[0]->domain);
    if (!found)
        return vq__fail(VQ_EINVAL, "onnx: the model imports no version of the default operator "
                                   "set (ai.onnx)");
    if (*out < OX_MIN_OPSET || *out > OX_MAX_OPSET)
        return vq__fail(VQ_ENOSYS, "onnx: the model uses opset %lld of ai.onnx; varq reads %d "
                                   "to %d",
                        (long long)*out, OX_MIN_OPSET, OX_MAX_OPSET);
    return 0;
}

static bool is_initializer(const Onnx__GraphProto *g, const char *name)
{
    for (size_t i = 0; i < g->n_initializer; i++)
        if (g->initializer[i]->name && !strcmp(g->initializer[i]->name, name))
            return true;
    return false;
}

/* What a value of type tp is: a tensor, a sequence of tensors or an
 * optional of either (anything else reads as a tensor, which input_meta
 * then refuses); *inner gets the tensor type within. */
static vq_onnx_kind value_kind(const Onnx__TypeProto *tp, const Onnx__TypeProto **inner)
{
    vq_onnx_kind k = VQ_ONNX_TENSOR;
    if (tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE && tp->optional_type &&
        tp->optional_type->elem_type) {
        k = VQ_ONNX_OPTIONAL;
        tp = tp->optional_type->elem_type;
    }
    if (tp && tp->value_case == ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE && tp->sequence_type &&
        tp->sequence_type->elem_type) {
        k = k == VQ_ONNX_OPTIONAL ? VQ_ONNX_OPTIONAL_SEQUENCE : VQ_ONNX_SEQUENCE;
        tp = tp->sequence_type->elem_type;
    }
    *inner = tp;
    return k;
}

/* A graph input's declared type: a tensor of a varq dtype with a shape
 * (dims given by name are -1). tp: its tensor type (the element type of a
 * sequence); rank: the rank to take when tp gives no shape (a sequence's
 * element, from the offered value), or -1. */
static int input_meta(const char *name, const Onnx__TypeProto *tp, int rank, vq__meta *m)
{
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return vq__fail(VQ_ENOSYS,
                        "onnx: graph input \"%s\" is not a tensor, a sequence of "
                        "tensors or an optional of either (maps and sparse tensors "
                        "are not supported)",
                        name);
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    int32_t et = tt->has_elem_type ? tt->elem_type : 0;
    if (!vq__onnx_dtype(et, &m->dtype))
        return vq__fail(VQ_ENOSYS,
                        "onnx: graph input \"%s\" has element type %s; varq has "
                        "float, double, float16, bfloat16, bool and the integers of 8 to 64 bits",
                        name, vq__onnx_type_name(et));
    if (!tt->shape && rank >= 0) {
        m->ndim = rank;
        for (int i = 0; i < rank; i++)
            m->shape[i] = -1;
        return 0;
    }
    if (!tt->shape)
        return vq__fail(VQ_ENOSYS, "onnx: graph input \"%s\" has no shape (its rank must be "
                                   "known)",
                        name);
    if (tt->shape->n_dim > VQ_MAX_DIMS)
        return vq__fail(VQ_ENOSYS, "onnx: graph input \"%s\" has %zu dims; varq has at most %d",
                        name, tt->shape->n_dim, VQ_MAX_DIMS);
    m->ndim = (int)tt->shape->n_dim;
    for (int i = 0; i < m->ndim; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            if (d->dim_value < 0)
                return vq__fail(VQ_EINVAL, "onnx: graph input \"%s\": dim %d is %lld", name, i,
                                (long long)d->dim_value);
            m->shape[i] = d->dim_value;
        } else {
            m->shape[i] = -1; /* by name, or not given: known at run */
        }
    }
    if (vq__numel(m->ndim, m->shape) == INT64_MAX)
        return vq__fail(VQ_EINVAL, "onnx: graph input \"%s\": shape overflows", name);
    return 0;
}

/* ---- fusing an activation into the Conv before it, x * Sigmoid(x) ---- */

static bool is_op(const Onnx__NodeProto *n, const char *type)
{
    return n->op_type && !strcmp(n->op_type, type) && (!n->domain || !*n->domain);
}

size_t ox_reads_of(const Onnx__GraphProto *g, const char *name)
{
    size_t count = 0;
    for (size_t i = 0; i < g->n_node; i++) {
        const Onnx__NodeProto *n = g->node[i];
        for (size_t a = 0; a < n->n_attribute; a++)
            if (n->attribute[a]->g || n->attribute[a]->n_graphs)
                return SIZE_MAX;
        for (size_t k = 0; k < n->n_input; k++)
            count += n->input[k] && !strcmp(n->input[k], name);
    }
    for (size_t i = 0; i < g->n_output; i++)
        count += g->output[i]->name && !strcmp(g->output[i]->name, name);
    return count;
}

/* A Clip bound: input i of clip (opset 11+), a known f32 or f64 scalar,
 * or absent (*v keeps its default). false when it is not known. */
static bool clip_bound(struct ox *x, const Onnx__NodeProto *clip, size_t i, double *v)
{
    if (i >= clip->n_input || !clip->input[i] || !*clip->input[i])
        return true;
    struct ox_val *b = ox_find(x, clip->input[i]);
    if (!b || !b->konst || b->konst->numel != 1 || vq_tensor_device(b->konst).kind != VQ_DEV_CPU)
        return false;
    if (b->konst->dtype == VQ_F32)
        *v = *(const float *)b->konst->data;
    else if (b->konst->dtype == VQ_F64)
        *v = *(const double *)b->konst->data;
    else
        return false;
    return *v == *v;
}

/* The node that reads node i's only output when node i is a Conv and
 * that node, a Relu or a Clip, is its only reader (through its first
 * input), else 0 (node 0 reads nothing before it). */
static size_t act_reader(const Onnx__GraphProto *g, size_t i)
{
    const Onnx__NodeProto *c = g->node[i];
    if (!is_op(c, "Conv") || c->n_output != 1 || !c->output[0] || !*c->output[0] ||
        ox_reads_of(g, c->output[0]) != 1)
        return 0;
    for (size_t j = i + 1; j < g->n_node; j++) {
        const Onnx__NodeProto *a = g->node[j];
        for (size_t k = 0; k < a->n_input; k++)
            if (a->input[k] && !strcmp(a->input[k], c->output[0]))
                return k == 0 && (is_op(a, "Relu") || is_op(a, "Clip")) && a->n_output == 1 &&
                               a->output[0] && *a->output[0]
                           ? j
                           : 0;
    }
    return 0;
}

/* The range [*lo, *hi] of activation node a (a Relu, or a Clip whose
 * bounds are known by now); false when a Clip's bounds are not known. */
static bool act_range(struct ox *x, const Onnx__NodeProto *a, double *lo, double *hi)
{
    *lo = 0;
    *hi = INFINITY;
    if (is_op(a, "Relu"))
        return true;
    *lo = -INFINITY;
    if (x->opset < 11) {
        const Onnx__NodeProto *outer = x->node;
        x->node = a;
        bool ok = ox_attr_float(x, "min", -INFINITY, lo) == 0 &&
                  ox_attr_float(x, "max", INFINITY, hi) == 0;
        x->node = outer;
        return ok && *lo == *lo && *hi == *hi && *lo <= *hi;
    }
    return clip_bound(x, a, 1, lo) && clip_bound(x, a, 2, hi) && *lo <= *hi;
}

/* The Mul that reads node i's only output when node i is a Sigmoid of
 * some x and that Mul, x * Sigmoid(x) in either order (SiLU, swish), is
 * its only reader; else 0. */
static size_t silu_reader(const Onnx__GraphProto *g, size_t i)
{
    const Onnx__NodeProto *s = g->node[i];
    if (!is_op(s, "Sigmoid") || s->n_input != 1 || !s->input[0] || !*s->input[0] ||
        s->n_output != 1 || !s->output[0] || !*s->output[0] || ox_reads_of(g, s->output[0]) != 1)
        return 0;
    const char *in = s->input[0], *out = s->output[0];
    for (size_t j = i + 1; j < g->n_node; j++) {
        const Onnx__NodeProto *m = g->node[j];
        for (size_t k = 0; k < m->n_input; k++)
            if (m->input[k] && !strcmp(m->input[k], out)) {
                bool pair = is_op(m, "Mul") && m->n_input == 2 && m->input[0] && m->input[1] &&
                            !strcmp(m->input[1 - k], in) && m->n_output == 1 && m->output[0] &&
                            *m->output[0];
                return pair ? j : 0;
            }
    }
    return 0;
}

/* Translates node i of g: a Conv that act_reader pairs with an activation
 * waits for it (deferred[j] = i + 1 for the activation j); at the
 * activation, the Conv writes the activation's output through conv2d's
 * clip, with the same results as the unfused ops (NaN kept; relu's -0
 * becomes +0), or, when a Clip's bounds are not known, the two are
 * translated as they come. Likewise a Sigmoid that silu_reader pairs with
 * its Mul waits for it, and becomes one silu writing the Mul's output
 * (rounded once instead of twice: within 1 ulp of the pair's result). */
static int translate_at(struct ox *x, const Onnx__GraphProto *g, size_t i, size_t *deferred,
                        size_t *qdq)
{
    size_t j;
    int qrc;
    if (qdq && ox_qdq_at(x, g, i, qdq, &qrc)) /* QDQ fusion (qdq.c) */
        return qrc;
    if (deferred && ((j = act_reader(g, i)) != 0 || (j = silu_reader(g, i)) != 0)) {
        deferred[j] = i + 1;
        return 0;
    }
    if (!deferred || !deferred[i])
        return vq__onnx_translate(x);
    size_t c = deferred[i] - 1;
    if (is_op(g->node[c], "Sigmoid")) { /* silu_reader's pair: one silu */
        Onnx__NodeProto sig = *g->node[c];
        const Onnx__NodeProto *mul = g->node[i];
        sig.output = mul->output; /* the Sigmoid writes the Mul's output */
        x->node = &sig;
        x->node_index = (int)c;
        x->silu = true;
        int rc = vq__onnx_translate(x);
        x->silu = false;
        x->node = mul;
        x->node_index = (int)i;
        return rc;
    }
    const Onnx__NodeProto *act = g->node[i];
    Onnx__NodeProto conv = *g->node[c];
    double lo = 0, hi = 0;
    /* only conv2d has the clip: a Conv over volumes (conv3d) or a line
     * keeps its activation */
    struct ox_val *xin = conv.n_input && conv.input[0] ? ox_find(x, conv.input[0]) : NULL;
    bool fuse = xin && xin->meta.ndim == 4 && act_range(x, act, &lo, &hi);
    if (fuse)
        conv.output = act->output; /* the Conv writes the activation's output */
    x->node = &conv;
    x->node_index = (int)c;
    x->fuse = fuse;
    x->fuse_lo = lo;
    x->fuse_hi = hi;
    int rc = vq__onnx_translate(x);
    x->fuse = false;
    x->node = act;
    x->node_index = (int)i;
    return rc < 0 || fuse ? rc : vq__onnx_translate(x);
}

static int ox_nodes(struct ox *x, const Onnx__GraphProto *g, int block)
{
    const Onnx__NodeProto *outer = x->node;
    int outer_index = x->node_index, outer_block = x->block, rc = 0;
    /* vq__onnx_nesting_check bounded this before unpacking; checked again
     * here, before recursing, for any graph that reaches here another way */
    if (x->depth > OX_MAX_NESTING)
        return ox_fail(x, VQ_EINVAL, "subgraphs nest more than %d levels deep", OX_MAX_NESTING);
    x->depth++;
    x->block = block;
    /* without memory for it, no fusion */
    size_t *deferred = g->n_node ? calloc(g->n_node, sizeof *deferred) : NULL;
    size_t *qdq = g->n_node ? calloc(g->n_node, sizeof *qdq) : NULL;
    if (qdq)
        ox_qdq_mark(g, qdq);
    for (size_t i = 0; i < g->n_node && rc == 0; i++) {
        const Onnx__NodeProto *n = g->node[i];
        x->node = n;
        x->node_index = (int)i;
        if (!n->op_type || !*n->op_type)
            rc = ox_fail(x, VQ_EINVAL, "the node has no op type");
        else if (!vq__onnx_default_domain(n->domain) &&
                 !vq__onnx_translatable(n->domain, n->op_type))
            /* the census counted it: the error lists every op type varq
             * does not translate */
            rc = x->unsupported ? vq__onnx_ops_fail(x->unsupported, x->opset)
                                : ox_fail(x, VQ_ENOSYS,
                                          "op %s of domain %s is not supported (varq reads the "
                                          "default domain ai.onnx, opset %lld)",
                                          n->op_type, n->domain, (long long)x->opset);
        else if (vq__onnx_translatable(n->domain, n->op_type) &&
                 (vq__onnx_default_domain(n->domain) ? x->opset == 0 : !x->training_opset))
            rc = ox_fail(x, VQ_EINVAL, "the model imports no version of the op's domain %s",
                         vq__onnx_default_domain(n->domain) ? "ai.onnx" : n->domain);
        else
            rc = translate_at(x, g, i, deferred, qdq);
    }
    free(deferred);
    free(qdq);
    x->depth--;
    x->node = outer;
    x->node_index = outer_index;
    x->block = outer_block;
    return rc;
}

/* The value offered for graph input v, if any: it must be a CPU tensor of
 * the input's dtype and rank, with its known dims. */
static int offer_attach(struct ox *x, struct ox_val *v)
{
    const vq_onnx_opts *o = x->opts;
    for (int i = 0; o && i < o->nvalues; i++) {
        const vq_tensor *t = o->values[i].tensor;
        if (strcmp(o->values[i].name, v->name))
            continue;
        bool fits = t->dtype == v->meta.dtype && t->ndim == v->meta.ndim;
        for (int d = 0; fits && d < t->ndim; d++)
            fits = v->meta.shape[d] < 0 || v->meta.shape[d] == t->shape[d];
        if (!fits) {
            char a[96], b[96];
            return vq__fail(VQ_EINVAL,
                            "onnx: the value offered for graph input \"%s\" is %s%s; "
                            "the model declares %s%s",
                            v->name, vq_dtype_name(t->dtype),
                            vq__shape_str(a, sizeof a, t->ndim, t->shape),
                            vq_dtype_name(v->meta.dtype),
                            vq__shape_str(b, sizeof b, v->meta.ndim, v->meta.shape));
        }
        v->offered = vq_tensor_retain((vq_tensor *)t);
        v->offer = i;
        return 0;
    }
    return 0;
}

/* Each offered value names a graph input that is not an initializer. */
static int offers_check(const struct ox *x, const Onnx__GraphProto *g)
{
    const vq_onnx_opts *o = x->opts;
    for (int i = 0; o && i < o->nvalues; i++) {
        bool found = false;
        for (size_t k = 0; !found && k < g->n_input; k++)
            found = g->input[k]->name && !strcmp(g->input[k]->name, o->values[i].name) &&
                    !is_initializer(g, o->values[i].name);
        if (!found)
            return vq__fail(VQ_EINVAL,
                            "onnx: value %d is offered for \"%s\", which is not a "
                            "graph input of the model (or is an initializer)",
                            i, o->values[i].name);
    }
    return 0;
}

/* The offer for graph input name (its index in *at), or NULL. */
static const vq_onnx_value *offer_of(const struct ox *x, const char *name, int *at)
{
    for (int i = 0; x->opts && i < x->opts->nvalues; i++)
        if (!strcmp(x->opts->values[i].name, name)) {
            *at = i;
            return &x->opts->values[i];
        }
    return NULL;
}

/* A feed var for v (a graph input, or a sequence input's element). */
static int feed_var(struct ox *x, struct ox_val *v)
{
    if (!(v->var = vq__strdup(v->name)))
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    int rc = vq_program_add_var(x->p, 0, v->var, v->meta.dtype, v->meta.ndim, v->meta.shape, false);
    return rc < 0 ? vq__fail(rc, "onnx: graph input \"%s\": %s", v->name, vq_errmsg()) : 0;
}

/* A graph input that is a sequence or an optional (kind; tp its tensor
 * type): an optional offered as holding nothing is a none value; a
 * sequence is its offered elements, each a feed NAME[i] (t_sequence.c
 * says why sequences are resolved at import); an optional tensor is a
 * tensor feed. */
static int container_input(struct ox *x, const char *name, vq_onnx_kind kind,
                           const Onnx__TypeProto *tp)
{
    int at = -1, rc;
    const vq_onnx_value *o = offer_of(x, name, &at);
    struct ox_val *v;
    bool seq = kind == VQ_ONNX_SEQUENCE || kind == VQ_ONNX_OPTIONAL_SEQUENCE;
    if (o && o->none && kind == VQ_ONNX_SEQUENCE)
        return vq__fail(VQ_EINVAL,
                        "onnx: graph input \"%s\" is a sequence, not an optional: "
                        "it cannot be offered as holding nothing",
                        name);
    if (o && o->none) {
        vq__meta m;
        if ((rc = input_meta(name, tp, 0, &m)) < 0 || (rc = ox_val_new(x, name, &v)) < 0)
            return rc;
        v->none = true;
        v->seq = seq;
        v->meta = (vq__meta){.dtype = m.dtype, .ndim = 0};
        return 0;
    }
    if (!seq) {
        if ((rc = ox_val_new(x, name, &v)) < 0 || (rc = input_meta(name, tp, -1, &v->meta)) < 0)
            return rc;
        if (o && o->tensor) {
            v->offered = vq_tensor_retain(o->tensor);
            v->offer = at;
        }
        return feed_var(x, v);
    }
    if (!o || !o->sequence)
        return vq__fail(VQ_ENOSYS,
                        "onnx: graph input \"%s\" is a sequence: varq resolves sequences when "
                        "the model is imported, so its value must be offered then "
                        "(vq_onnx_opts; its elements are then fed as \"%s[0]\" and on)",
                        name, name);
    if (o->nelems < 0 || (o->nelems && !o->elems))
        return vq__fail(VQ_EINVAL, "onnx: the sequence offered for \"%s\" has %d elements at %p",
                        name, o->nelems, (const void *)o->elems);
    struct ox_val **e = vq__calloc((size_t)o->nelems + 1, sizeof *e);
    if (!e)
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    vq__meta em = {0};
    rc = input_meta(name, tp, 0, &em);
    for (int i = 0; i < o->nelems && rc == 0; i++) {
        const vq_tensor *t = o->elems[i];
        char en[512];
        snprintf(en, sizeof en, "%s[%d]", name, i);
        if (!t || t->dev.kind != VQ_DEV_CPU) {
            rc = vq__fail(VQ_EINVAL, "onnx: element %d offered for \"%s\" is %s", i, name,
                          t ? "not on the CPU" : "NULL");
            break;
        }
        if ((rc = ox_val_new(x, en, &e[i])) < 0 ||
            (rc = input_meta(name, tp, t->ndim, &e[i]->meta)) < 0)
            break;
        bool fits = t->dtype == e[i]->meta.dtype && t->ndim == e[i]->meta.ndim;
        for (int d = 0; fits && d < t->ndim; d++)
            fits = e[i]->meta.shape[d] < 0 || e[i]->meta.shape[d] == t->shape[d];
        if (!fits) {
            char a[96], b[96];
            rc = vq__fail(VQ_EINVAL,
                          "onnx: element %d offered for graph input \"%s\" is %s%s; the model "
                          "declares %s%s",
                          i, name, vq_dtype_name(t->dtype),
                          vq__shape_str(a, sizeof a, t->ndim, t->shape),
                          vq_dtype_name(e[i]->meta.dtype),
                          vq__shape_str(b, sizeof b, e[i]->meta.ndim, e[i]->meta.shape));
            break;
        }
        e[i]->offered = vq_tensor_retain((vq_tensor *)t);
        e[i]->offer = at;
        rc = feed_var(x, e[i]);
    }
    if (rc == 0 && (rc = ox_val_new(x, name, &v)) == 0) {
        v->seq = true;
        v->meta = (vq__meta){.dtype = em.dtype, .ndim = 0};
        v->seq_n = o->nelems;
        v->elems = e;
        e = NULL;
    }
    free(e);
    return rc;
}

/* Graph output name, v: a var of that name (a copy when v is held in
 * another var). */
static int output_var(struct ox *x, const char *name, struct ox_val *v)
{
    if (v->var && !strcmp(v->var, name))
        return 0;
    if (!v->var && v->konst && !strcmp(v->name, name))
        return ox_var_of(x, v);
    int rc = ox_var_of(x, v);
    if (rc < 0)
        return rc;
    /* an alias: copy into a var of its name (a reshape that keeps every
     * dim) */
    int64_t keep[VQ_MAX_DIMS] = {0};
    vq_attr a = VQ_ATTR_IS("shape", keep, v->meta.ndim);
    const char *in = v->var;
    if ((rc = vq_program_add_var(x->p, 0, name, v->meta.dtype, v->meta.ndim, v->meta.shape,
                                 false)) < 0 ||
        (rc = vq_program_add_op(x->p, 0, "reshape", &in, 1, &name, 1, &a, 1)) < 0)
        return vq__fail(rc, "onnx: graph output \"%s\": %s", name, vq_errmsg());
    return 0;
}

static int import_graph(struct ox *x, const Onnx__GraphProto *g)
{
    int rc = offers_check(x, g);
    for (size_t i = 0; i < g->n_initializer && rc == 0; i++) {
        const Onnx__TensorProto *t = g->initializer[i];
        if (!t->name || !*t->name)
            return vq__fail(VQ_EINVAL, "onnx: initializer %zu has no name", i);
        char what[300];
        snprintf(what, sizeof what, "initializer \"%s\"", t->name);
        vq_tensor *v;
        if ((rc = vq__onnx_tensor(t, x->dir, what, &v)) < 0)
            return rc;
        /* The bytes are in v now: let go of the unpacked copy at once, so
         * that a model's weights are held twice at most while it imports
         * (the unpacked message and the tensors), not three times with
         * the file's bytes. free_unpacked skips a NULL field. */
        Onnx__TensorProto *tm = (Onnx__TensorProto *)t;
        if (tm->raw_data.data && tm->raw_data.len) {
            vq__protobuf_allocator.free(vq__protobuf_allocator.allocator_data, tm->raw_data.data);
            tm->raw_data.data = NULL;
            tm->raw_data.len = 0;
        }
        struct ox_val *val;
        if (v->dtype == VQ_F32 || v->dtype == VQ_F64) {
            /* a parameter: a var only, so that nothing folds it away */
            rc = ox_param(x, t->name, v);
            vq_tensor_release(v);
        } else if ((rc = ox_const(x, t->name, v, &val)) == 0) {
            rc = ox_var_of(x, val);
        }
    }
    for (size_t i = 0; i < g->n_input && rc == 0; i++) {
        const Onnx__ValueInfoProto *vi = g->input[i];
        if (!vi->name || !*vi->name)
            return vq__fail(VQ_EINVAL, "onnx: graph input %zu has no name", i);
        if (is_initializer(g, vi->name))
            continue;
        struct ox_val *v;
        const Onnx__TypeProto *tp;
        vq_onnx_kind kind = value_kind(vi->type, &tp);
        if (kind != VQ_ONNX_TENSOR) {
            if ((rc = container_input(x, vi->name, kind, tp)) < 0)
                return rc;
            continue;
        }
        if ((rc = ox_val_new(x, vi->name, &v)) < 0 ||
            (rc = input_meta(vi->name, vi->type, -1, &v->meta)) < 0)
            return rc;
        if ((rc = offer_attach(x, v)) < 0 || (rc = feed_var(x, v)) < 0)
            return rc;
    }
    if (rc == 0)
        rc = ox_nodes(x, g, 0);
    x->node = NULL;
    /* outputs: vars under their own names; a sequence's elements as
     * NAME[i], an optional that holds nothing as none */
    for (size_t i = 0; i < g->n_output && rc == 0; i++) {
        const char *name = g->output[i]->name;
        struct ox_val *v = name ? ox_find(x, name) : NULL;
        if (!v)
            return vq__fail(VQ_EINVAL, "onnx: graph output \"%s\" is produced by no node",
                            name ? name : "");
        for (int k = 0; v->seq && k < v->seq_n && rc == 0; k++) {
            char en[512];
            snprintf(en, sizeof en, "%s[%d]", name, k);
            rc = output_var(x, en, v->elems[k]);
        }
        if (!v->seq && !v->none)
            rc = output_var(x, name, v);
    }
    return rc;
}

/* The offers are usable: names and CPU tensors. */
static int opts_check(const vq_onnx_opts *o)
{
    if (!o)
        return 0;
    if (o->nvalues < 0 || (o->nvalues && !o->values))
        return vq__fail(VQ_EINVAL, "vq_program_from_onnx_opts: %d values at %p", o->nvalues,
                        (const void *)o->values);
    for (int i = 0; i < o->nvalues; i++) {
        const vq_onnx_value *v = &o->values[i];
        if (!v->name || (!v->tensor && !v->sequence && !v->none))
            return vq__fail(VQ_EINVAL, "vq_program_from_onnx_opts: value %d has no %s", i,
                            v->name ? "tensor" : "name");
        if (v->tensor && v->tensor->dev.kind != VQ_DEV_CPU)
            return vq__fail(VQ_EINVAL,
                            "vq_program_from_onnx_opts: value %d (\"%s\") is not on "
                            "the CPU",
                            i, v->name);
        if (o->specialized)
            o->specialized[i] = false;
    }
    return 0;
}

/* The ModelProto encoded in buf[0..len), unpacked into *m (free with
 * onnx__model_proto__free_unpacked and vq__protobuf_allocator) once its
 * nesting is known to be safe to unpack. */
static int model_unpack(const void *buf, size_t len, Onnx__ModelProto **m)
{
    int rc = vq__onnx_nesting_check(buf, len);
    if (rc < 0)
        return rc;
    unsigned failed = vq__protobuf_failed_allocs();
    *m = onnx__model_proto__unpack(&vq__protobuf_allocator, len, buf);
    if (!*m && vq__protobuf_failed_allocs() != failed)
        return vq__fail(VQ_ENOMEM, "onnx: out of memory while parsing %zu bytes", len);
    if (!*m)
        return vq__fail(VQ_EINVAL, "onnx: not an ONNX model (%zu bytes that do not decode as "
                                   "a ModelProto: truncated or corrupted?)",
                        len);
    return 0;
}

/* own_buf: buf is the import's own (the file's bytes), freed as soon as
 * it is unpacked, whatever happens (the unpacked message copies what it
 * keeps). */
static int import_model(vq_program **out, vq_scope *params, const void *buf, size_t len,
                        const char *dir, const vq_onnx_opts *opts, bool own_buf)
{
    if (!out || (!buf && len))
        return vq__fail(VQ_EINVAL, "vq_program_from_onnx: NULL argument");
    *out = NULL;
    int orc = opts_check(opts);
    Onnx__ModelProto *m = NULL;
    int urc = orc < 0 ? orc : model_unpack(buf, len, &m);
    if (own_buf)
        free((void *)buf);
    if (urc < 0)
        return urc;
    struct ox x = {.dir = dir, .opts = opts, .walk = ox_nodes};
    vq_onnx_ops census = {0};
    int rc = 0;
    if (!m->graph)
        rc = vq__fail(VQ_EINVAL, "onnx: the model has no graph");
    if (rc == 0)
        rc = model_opset(m, &x.opset, &x.training_opset);
    /* Every op type, before translating: when some are not translated, the
     * error names them all where the translation meets the first. Not
     * refused here: an If whose condition is known at import translates
     * only the branch it takes, and the other may hold any op. */
    if (rc == 0)
        rc = vq__onnx_census(m->graph, false, &census);
    for (int i = 0; rc == 0 && i < census.nops && !x.unsupported; i++)
        if (!census.ops[i].supported)
            x.unsupported = &census;
    if (rc == 0)
        rc = vq_program_new(&x.p);
    if (rc == 0)
        rc = import_graph(&x, m->graph);
    if (rc == 0 && x.nbinds && !params)
        rc = vq__fail(VQ_EINVAL, "onnx: the model has initializers or constants: params must "
                                 "be a scope to hold them");
    for (int i = 0; rc == 0 && i < x.nbinds; i++)
        rc = vq_scope_set(params, x.binds[i].name, x.binds[i].t);
    vq__onnx_ops_release(&census);
    onnx__model_proto__free_unpacked(m, &vq__protobuf_allocator);
    if (rc < 0) {
        vq_program_free(x.p);
        ox_release(&x);
        return rc;
    }
    *out = x.p;
    ox_release(&x);
    return 0;
}

VQ_API int vq_program_from_onnx(vq_program **out, vq_scope *params, const void *buf, size_t len)
{
    return import_model(out, params, buf, len, NULL, NULL, false);
}

VQ_API int vq_program_from_onnx_opts(vq_program **out, vq_scope *params, const void *buf,
                                     size_t len, const vq_onnx_opts *opts)
{
    return import_model(out, params, buf, len, NULL, opts, false);
}

/* The whole file at path (malloc'd into *buf). */
static int read_file(const char *path, void **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return vq__fail(VQ_EIO, "onnx: %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *b = vq__malloc(cap);
    int rc = 0;
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *nb = cap > SIZE_MAX / 2 ? NULL : vq__realloc(b, cap * 2);
        if (!nb) {
            free(b);
            b = NULL;
            break;
        }
        b = nb;
        cap *= 2;
    }
    if (!b)
        rc = vq__fail(VQ_ENOMEM, "onnx: %s: out of memory", path);
    else if (ferror(f))
        rc = vq__fail(VQ_EIO, "onnx: %s: read error", path);
    fclose(f);
    if (rc < 0) {
        free(b);
        return rc;
    }
    *buf = b;
    *len = n;
    return 0;
}

VQ_API int vq_program_from_onnx_file_opts(vq_program **out, vq_scope *params, const char *path,
                                          const vq_onnx_opts *opts)
{
    if (!out || !path)
        return vq__fail(VQ_EINVAL, "vq_program_from_onnx_file: NULL argument");
    *out = NULL;
    void *buf = NULL;
    size_t len = 0;
    int rc = read_file(path, &buf, &len);
    if (rc < 0)
        return rc;
    char *dir = vq__strdup(path);
    if (!dir) {
        free(buf);
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    }
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        strcpy(dir, ".");
    rc = import_model(out, params, buf, len, *dir ? dir : "/", opts, true); /* frees buf */
    free(dir);
    return rc;
}

VQ_API int vq_program_from_onnx_file(vq_program **out, vq_scope *params, const char *path)
{
    return vq_program_from_onnx_file_opts(out, params, path, NULL);
}

VQ_API void vq_onnx_info_free(vq_onnx_info *info)
{
    if (!info)
        return;
    for (int i = 0; info->inputs && i < info->ninputs; i++)
        free(info->inputs[i]);
    for (int i = 0; info->outputs && i < info->noutputs; i++)
        free(info->outputs[i]);
    free(info->inputs);
    free(info->outputs);
    free(info->input_kinds);
    free(info->output_kinds);
    memset(info, 0, sizeof *info);
}

VQ_API int vq_onnx_info_read(vq_onnx_info *out, const void *buf, size_t len)
{
    if (!out || (!buf && len))
        return vq__fail(VQ_EINVAL, "vq_onnx_info_read: NULL argument");
    memset(out, 0, sizeof *out);
    /* Read from a copy without the weights' bytes: names, inputs and
     * outputs are all this needs, and a model of 250 MB of weights would
     * otherwise be held twice more while it reads them. */
    void *lean = NULL;
    size_t lean_len = 0;
    int src = vq__onnx_strip_weights(buf, len, &lean, &lean_len);
    if (src < 0)
        return src;
    Onnx__ModelProto *m;
    int urc = src == 0 ? model_unpack(lean, lean_len, &m) : model_unpack(buf, len, &m);
    free(lean);
    if (urc < 0)
        return urc;
    int64_t opset = -1, training;
    int rc = m->graph ? model_opset(m, &opset, &training)
                      : vq__fail(VQ_EINVAL, "onnx: the model has no "
                                            "graph");
    const Onnx__GraphProto *g = m->graph;
    if (rc == 0) {
        out->opset = (int)opset;
        out->inputs = vq__calloc(g->n_input + 1, sizeof *out->inputs);
        out->outputs = vq__calloc(g->n_output + 1, sizeof *out->outputs);
        out->input_kinds = vq__calloc(g->n_input + 1, sizeof *out->input_kinds);
        out->output_kinds = vq__calloc(g->n_output + 1, sizeof *out->output_kinds);
        if (!out->inputs || !out->outputs || !out->input_kinds || !out->output_kinds)
            rc = vq__fail(VQ_ENOMEM, "onnx: out of memory");
    }
    for (size_t i = 0; rc == 0 && i < g->n_input; i++) {
        const char *nm = g->input[i]->name ? g->input[i]->name : "";
        if (is_initializer(g, nm))
            continue;
        const Onnx__TypeProto *tp;
        out->input_kinds[out->ninputs] = value_kind(g->input[i]->type, &tp);
        if (!(out->inputs[out->ninputs++] = vq__strdup(nm)))
            rc = vq__fail(VQ_ENOMEM, "onnx: out of memory");
    }
    for (size_t i = 0; rc == 0 && i < g->n_output; i++) {
        const Onnx__TypeProto *tp;
        out->output_kinds[out->noutputs] = value_kind(g->output[i]->type, &tp);
        if (!(out->outputs[out->noutputs++] = vq__strdup(g->output[i]->name ? g->output[i]->name
                                                                        : "")))
            rc = vq__fail(VQ_ENOMEM, "onnx: out of memory");
    }
    onnx__model_proto__free_unpacked(m, &vq__protobuf_allocator);
    if (rc < 0)
        vq_onnx_info_free(out);
    return rc;
}

VQ_API void vq_onnx_ops_free(vq_onnx_ops *ops)
{
    if (ops)
        vq__onnx_ops_release(ops);
}

VQ_API int vq_onnx_ops_read(vq_onnx_ops *out, const void *buf, size_t len)
{
    if (!out || (!buf && len))
        return vq__fail(VQ_EINVAL, "vq_onnx_ops_read: NULL argument");
    memset(out, 0, sizeof *out);
    Onnx__ModelProto *m;
    int rc = model_unpack(buf, len, &m);
    if (rc < 0)
        return rc;
    rc = m->graph ? vq__onnx_census(m->graph, true, out)
                  : vq__fail(VQ_EINVAL, "onnx: the model has no graph");
    onnx__model_proto__free_unpacked(m, &vq__protobuf_allocator);
    return rc;
}
