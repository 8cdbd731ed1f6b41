/* ONNX ModelProto -> varq program.
 *
 * The import walks the graph once, in the node order ONNX requires
 * (topological). Every ONNX value gets a struct ox_val: what it is (dtype
 * and shape as far as known) and, once an op reads it at run time, the
 * program var holding it. Initializers become persistable vars whose
 * tensors go to the caller's scope; the integer ones (shapes, axes,
 * indices) are also known values, so that translations can read them as
 * attributes. A translation (ops.c) emits varq ops through ox_emit, which
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OX_MIN_OPSET 1
#define OX_MAX_OPSET 18

/* ---- values by name ---- */

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

struct ox_val *ox_find(struct ox *x, const char *name)
{
    if (!name || !x->index_cap)
        return NULL;
    size_t mask = (size_t)x->index_cap - 1;
    for (size_t i = (size_t)name_hash(name) & mask;; i = (i + 1) & mask) {
        int k = x->index[i];
        if (k < 0)
            return NULL;
        if (!strcmp(x->vals[k]->name, name))
            return x->vals[k];
    }
}

static int index_put(struct ox *x, int k)
{
    size_t mask = (size_t)x->index_cap - 1;
    size_t i = (size_t)name_hash(x->vals[k]->name) & mask;
    while (x->index[i] >= 0)
        i = (i + 1) & mask;
    x->index[i] = k;
    return 0;
}

/* A new value named name (copied), not yet in any var. */
static int val_new(struct ox *x, const char *name, struct ox_val **out)
{
    if (ox_find(x, name))
        return ox_fail(x, VQ_EINVAL, "value \"%s\" is produced twice", name);
    if (x->nvals == x->cap) {
        int cap = x->cap ? 2 * x->cap : 64;
        struct ox_val **v = vq__realloc(x->vals, (size_t)cap * sizeof *v);
        if (!v)
            return vq__fail(VQ_ENOMEM, "onnx: out of memory");
        x->vals = v;
        x->cap = cap;
    }
    if (2 * (x->nvals + 1) > x->index_cap) {
        int cap = x->index_cap ? 2 * x->index_cap : 128;
        int *idx = vq__malloc((size_t)cap * sizeof *idx);
        if (!idx)
            return vq__fail(VQ_ENOMEM, "onnx: out of memory");
        free(x->index);
        x->index = idx;
        x->index_cap = cap;
        for (int i = 0; i < cap; i++)
            idx[i] = -1;
        for (int k = 0; k < x->nvals; k++)
            index_put(x, k);
    }
    struct ox_val *v = vq__calloc(1, sizeof *v);
    if (!v || !(v->name = vq__strdup(name))) {
        free(v);
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    }
    x->vals[x->nvals] = v;
    index_put(x, x->nvals++);
    *out = v;
    return 0;
}

static void val_free(struct ox_val *v)
{
    free(v->name);
    free(v->var);
    vq_tensor_release(v->konst);
    vq_tensor_release(v->offered);
    free(v);
}

static void meta_of(vq__meta *m, const vq_tensor *t)
{
    m->dtype = t->dtype;
    m->ndim = t->ndim;
    memcpy(m->shape, t->shape, (size_t)t->ndim * sizeof t->shape[0]);
}

/* ---- messages ---- */

int ox_fail(struct ox *x, int rc, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const Onnx__NodeProto *n = x->node;
    if (!n)
        return vq__fail(rc, "onnx: %s", msg);
    return vq__fail(rc, "onnx: node %d (%s \"%s\"): %s", x->node_index,
                    n->op_type ? n->op_type : "?", n->name ? n->name : "", msg);
}

/* ---- what translations use ---- */

int ox_in(struct ox *x, int i, struct ox_val **out)
{
    *out = NULL;
    const Onnx__NodeProto *n = x->node;
    if (i < 0 || (size_t)i >= n->n_input || !n->input[i] || !*n->input[i])
        return 0;
    if (!(*out = ox_find(x, n->input[i])))
        return ox_fail(x, VQ_EINVAL, "input %d \"%s\" is not a graph input, an initializer or "
                                     "the output of an earlier node (a cycle, or nodes out of "
                                     "order)",
                       i, n->input[i]);
    return 0;
}

const char *ox_out(struct ox *x, int j)
{
    const Onnx__NodeProto *n = x->node;
    if (j < 0 || (size_t)j >= n->n_output || !n->output[j] || !*n->output[j])
        return NULL;
    return n->output[j];
}

const Onnx__AttributeProto *ox_attr(struct ox *x, const char *name)
{
    const Onnx__NodeProto *n = x->node;
    for (size_t i = 0; i < n->n_attribute; i++)
        if (n->attribute[i]->name && !strcmp(n->attribute[i]->name, name))
            return n->attribute[i];
    return NULL;
}

static int attr_type(struct ox *x, const Onnx__AttributeProto *a, int type, const char *want)
{
    if (a->has_type && (int)a->type != type)
        return ox_fail(x, VQ_EINVAL, "attribute %s is not %s", a->name, want);
    if (a->ref_attr_name)
        return ox_fail(x, VQ_ENOSYS, "attribute %s refers to a function attribute", a->name);
    return 0;
}

int ox_attr_int(struct ox *x, const char *name, int64_t def, int64_t *out)
{
    const Onnx__AttributeProto *a = ox_attr(x, name);
    *out = def;
    if (!a)
        return 0;
    int rc = attr_type(x, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, "an int");
    if (rc == 0)
        *out = a->i;
    return rc;
}

int ox_attr_float(struct ox *x, const char *name, double def, double *out)
{
    const Onnx__AttributeProto *a = ox_attr(x, name);
    *out = def;
    if (!a)
        return 0;
    int rc = attr_type(x, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, "a float");
    if (rc == 0)
        *out = a->f;
    return rc;
}

int ox_attr_ints(struct ox *x, const char *name, int64_t *out, int max, int *n)
{
    const Onnx__AttributeProto *a = ox_attr(x, name);
    *n = -1;
    if (!a)
        return 0;
    int rc = attr_type(x, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, "a list of ints");
    if (rc)
        return rc;
    if (a->n_ints > (size_t)max)
        return ox_fail(x, VQ_ENOSYS, "attribute %s has %zu entries, more than %d", name,
                       a->n_ints, max);
    if (a->n_ints) /* an empty list's ints are NULL */
        memcpy(out, a->ints, a->n_ints * sizeof *out);
    *n = (int)a->n_ints;
    return 0;
}

int ox_attr_str(struct ox *x, const char *name, const char *def, char *buf, size_t size)
{
    const Onnx__AttributeProto *a = ox_attr(x, name);
    snprintf(buf, size, "%s", def);
    if (!a)
        return 0;
    int rc = attr_type(x, a, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "a string");
    if (rc)
        return rc;
    if (a->s.len >= size)
        return ox_fail(x, VQ_EINVAL, "attribute %s is too long", name);
    if (a->s.len) /* an empty string's data is NULL */
        memcpy(buf, a->s.data, a->s.len);
    buf[a->s.len] = '\0';
    return 0;
}

bool ox_known(struct ox *x, struct ox_val *v)
{
    if (!v->konst && v->offered) {
        v->konst = v->offered;
        v->offered = NULL;
        if (x->opts->specialized)
            x->opts->specialized[v->offer] = true;
    }
    return v->konst != NULL;
}

int ox_tensor_new(struct ox *x, vq_tensor **t, vq_dtype dt, int ndim, const int64_t *shape)
{
    *t = NULL;
    int64_t n = vq__numel(ndim, shape);
    if (n < 0 || n > VQ_ONNX_MADE_MAX_ELEMS)
        return ox_fail(x, VQ_ENOSYS,
                       "its translation makes a tensor of %lld elements when the model is "
                       "imported (sized by the model's dims or values), more than "
                       "VQ_ONNX_MADE_MAX_ELEMS (%lld)",
                       (long long)n, (long long)VQ_ONNX_MADE_MAX_ELEMS);
    int rc = vq_tensor_new(t, dt, ndim, shape);
    return rc < 0 ? ox_fail(x, rc, "%s", vq_errmsg()) : 0;
}

int ox_const_ints(struct ox *x, int i, const char *what, int64_t *out, int max, int *n)
{
    struct ox_val *v;
    int rc = ox_in(x, i, &v);
    *n = -1;
    if (rc || !v)
        return rc;
    if (!ox_known(x, v) && v->too_big)
        return ox_fail(x, VQ_ENOSYS,
                       "input %d (%s) \"%s\" must be known when the model is imported, but "
                       "it is, or is computed from, a value of more than %lld elements, too "
                       "large to compute then (left to the run)",
                       i, what, v->name, (long long)VQ_ONNX_FOLD_MAX_ELEMS);
    if (!ox_known(x, v))
        return ox_fail(x, VQ_ENOSYS, "input %d (%s) \"%s\" must be known when the model is "
                                     "imported (an initializer, a Constant, or computed from "
                                     "known shapes)",
                       i, what, v->name);
    const vq_tensor *t = v->konst;
    if (t->dtype != VQ_I64 && t->dtype != VQ_I32)
        return ox_fail(x, VQ_EINVAL, "input %d (%s) is %s, not an integer tensor", i, what,
                       vq_dtype_name(t->dtype));
    if (t->ndim > 1)
        return ox_fail(x, VQ_EINVAL, "input %d (%s) has %d dims, not 1", i, what, t->ndim);
    if (t->numel > max)
        return ox_fail(x, VQ_ENOSYS, "input %d (%s) has %lld entries, more than %d", i, what,
                       (long long)t->numel, max);
    for (int64_t k = 0; k < t->numel; k++)
        out[k] = t->dtype == VQ_I64 ? ((const int64_t *)t->data)[k]
                                    : ((const int32_t *)t->data)[k];
    *n = (int)t->numel;
    return 0;
}

/* Queues name = t (a new reference) for the caller's scope. */
static int bind_later(struct ox *x, const char *name, vq_tensor *t)
{
    struct ox_bind *b = vq__realloc(x->binds, ((size_t)x->nbinds + 1) * sizeof *b);
    if (!b)
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    x->binds = b;
    if (!(b[x->nbinds].name = vq__strdup(name)))
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    b[x->nbinds++].t = vq_tensor_retain(t);
    return 0;
}

/* A persistable var named name like t, whose tensor is bound in the
 * scope at the end of the import. */
static int param_var(struct ox *x, const char *name, vq_tensor *t)
{
    int rc = vq_program_add_var(x->p, 0, name, t->dtype, t->ndim, t->shape, true);
    if (rc < 0)
        return ox_fail(x, rc, "declaring \"%s\": %s", name, vq_errmsg());
    return bind_later(x, name, t);
}

const vq_tensor *ox_param_value(struct ox *x, const struct ox_val *v)
{
    if (v->konst)
        return v->konst;
    for (int i = 0; v->var && i < x->nbinds; i++)
        if (!strcmp(x->binds[i].name, v->var))
            return x->binds[i].t;
    return NULL;
}

/* A program var for v: a known value becomes a persistable var. */
static int val_var(struct ox *x, struct ox_val *v)
{
    if (v->var)
        return 0;
    if (!v->konst)
        return ox_fail(x, VQ_EINVAL, "value \"%s\" has neither a var nor a value", v->name);
    if (!(v->var = vq__strdup(v->name)))
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    return param_var(x, v->var, v->konst);
}

int ox_const(struct ox *x, const char *name, vq_tensor *t, struct ox_val **out)
{
    char tmp[300];
    if (!name) {
        const char *base = ox_out(x, 0);
        snprintf(tmp, sizeof tmp, "%s@onnx%d", base ? base : "const", x->ntemps++);
        name = tmp;
    }
    struct ox_val *v;
    int rc = val_new(x, name, &v);
    if (rc < 0) {
        vq_tensor_release(t);
        return rc;
    }
    v->konst = t;
    meta_of(&v->meta, t);
    if (out)
        *out = v;
    return 0;
}

int ox_alias(struct ox *x, const char *name, struct ox_val *src)
{
    struct ox_val *v;
    int rc = val_new(x, name, &v);
    if (rc < 0)
        return rc;
    v->meta = src->meta;
    v->too_big = src->too_big;
    v->sym = src->sym;
    v->sym_off = src->sym_off;
    if (src->konst)
        v->konst = vq_tensor_retain(src->konst);
    if (src->var && !(v->var = vq__strdup(src->var)))
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    return 0;
}

int ox_emit(struct ox *x, const char *type, struct ox_val *const *in, int nin,
            const char *const *out_names, int nout, const vq_attr *attrs, int nattrs,
            struct ox_val **out_vals)
{
    const vq__op_def *def = vq__op_find(type);
    if (!def)
        return ox_fail(x, VQ_ENOSYS, "varq has no op %s", type);
    if (nin > VQ__MAX_SLOTS || nout > VQ__MAX_SLOTS)
        return ox_fail(x, VQ_ENOSYS, "more than %d inputs or outputs", VQ__MAX_SLOTS);
    bool known = true, too_big = false, computable = true;
    vq__meta im[VQ__MAX_SLOTS], om[VQ__MAX_SLOTS];
    for (int i = 0; i < nin; i++) {
        im[i] = in[i]->meta;
        known &= in[i]->konst != NULL;
        too_big |= in[i]->too_big;
        computable &= in[i]->konst || in[i]->too_big;
    }
    _Alignas(16) unsigned char params[VQ__MAX_PARAMS];
    int rc = vq__op_infer(def, attrs, nattrs, nin, im, nout, om, params);
    if (rc < 0)
        return ox_fail(x, rc, "%s", vq_errmsg());
    /* Folding allocates what the op makes, and a few bytes of model can ask
     * for any size (fill_constant has no inputs: a ConstantOfShape is always
     * known): a large result is left to the run, which takes its memory as
     * the op's and fails like the op when it cannot. */
    for (int j = 0; known && j < nout; j++) {
        int64_t n = vq__numel(om[j].ndim, om[j].shape);
        if (n < 0 || n > VQ_ONNX_FOLD_MAX_ELEMS) {
            known = false;
            too_big = true;
        }
    }
    too_big &= computable;
    char tmp[VQ__MAX_SLOTS][300];
    struct ox_val *outs[VQ__MAX_SLOTS];
    const char *names[VQ__MAX_SLOTS];
    for (int j = 0; j < nout; j++) {
        names[j] = out_names ? out_names[j] : NULL;
        if (!names[j]) {
            const char *base = ox_out(x, 0);
            snprintf(tmp[j], sizeof tmp[j], "%s@onnx%d", base ? base : "tmp", x->ntemps++);
            names[j] = tmp[j];
        }
    }
    if (known) {
        /* every input is known: compute now */
        vq_tensor *ti[VQ__MAX_SLOTS], *to[VQ__MAX_SLOTS] = {0};
        for (int i = 0; i < nin; i++)
            ti[i] = in[i]->konst;
        if ((rc = vq_op_run(NULL, type, ti, nin, to, nout, attrs, nattrs)) < 0)
            return ox_fail(x, rc, "%s", vq_errmsg());
        for (int j = 0; j < nout; j++) {
            if (rc == 0)
                rc = ox_const(x, names[j], to[j], &outs[j]);
            else
                vq_tensor_release(to[j]);
        }
        if (rc < 0)
            return rc;
    } else {
        const char *iv[VQ__MAX_SLOTS];
        for (int i = 0; i < nin && rc == 0; i++) {
            rc = val_var(x, in[i]);
            iv[i] = in[i]->var;
        }
        for (int j = 0; j < nout && rc == 0; j++) {
            if ((rc = val_new(x, names[j], &outs[j])) < 0)
                break;
            outs[j]->meta = om[j];
            outs[j]->too_big = too_big;
            if (!(outs[j]->var = vq__strdup(names[j])))
                return vq__fail(VQ_ENOMEM, "onnx: out of memory");
            rc = vq_program_add_var(x->p, x->block, names[j], om[j].dtype, om[j].ndim,
                                    om[j].shape, false);
            if (rc < 0)
                return ox_fail(x, rc, "declaring \"%s\": %s", names[j], vq_errmsg());
        }
        if (rc < 0)
            return rc;
        const char *ov[VQ__MAX_SLOTS];
        for (int j = 0; j < nout; j++)
            ov[j] = outs[j]->var;
        rc = vq_program_add_op(x->p, x->block, type, iv, nin, ov, nout, attrs, nattrs);
        if (rc < 0)
            return ox_fail(x, rc, "%s", vq_errmsg());
    }
    for (int j = 0; out_vals && j < nout; j++)
        out_vals[j] = outs[j];
    return 0;
}

/* ---- the model ---- */

static int model_opset(const Onnx__ModelProto *m, int64_t *out)
{
    *out = -1;
    bool found = false;
    for (size_t i = 0; i < m->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = m->opset_import[i];
        if ((!o->domain || !*o->domain || !strcmp(o->domain, "ai.onnx")) && o->has_version) {
            *out = o->version;
            found = true;
        }
    }
    if (found && *out < 0)
        return vq__fail(VQ_EINVAL,
                        "onnx: opset %lld of ai.onnx is not valid (versions start "
                        "at 1)",
                        (long long)*out);
    if (!found && m->n_opset_import > 0 && m->opset_import[0]->domain &&
        *m->opset_import[0]->domain)
        return vq__fail(VQ_ENOSYS, "onnx: the model uses only other operator sets than ai.onnx "
                                   "(%s first); varq reads ai.onnx",
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

/* A graph input's declared type: a tensor of a varq dtype with a shape
 * (dims given by name are -1). */
static int input_meta(const Onnx__ValueInfoProto *vi, vq__meta *m)
{
    const char *name = vi->name;
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return vq__fail(VQ_ENOSYS, "onnx: graph input \"%s\" is not a tensor (sequences, maps "
                                   "and optionals are not supported)",
                        name);
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    int32_t et = tt->has_elem_type ? tt->elem_type : 0;
    if (!vq__onnx_dtype(et, &m->dtype))
        return vq__fail(VQ_ENOSYS, "onnx: graph input \"%s\" has element type %s; varq has "
                                   "float, double, int32, int64 and bool",
                        name, vq__onnx_type_name(et));
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

/* ---- fusing an activation into the Conv before it ---- */

static bool is_op(const Onnx__NodeProto *n, const char *type)
{
    return n->op_type && !strcmp(n->op_type, type) && (!n->domain || !*n->domain);
}

/* How many times name is read in g: as a node input or a graph output. A
 * graph with subgraphs (If, Loop) counts as reading every name: their
 * nodes may read it too. */
static size_t reads_of(const Onnx__GraphProto *g, const char *name)
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
        reads_of(g, c->output[0]) != 1)
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

/* Translates node i of g: a Conv that act_reader pairs with an activation
 * waits for it (deferred[j] = i + 1 for the activation j); at the
 * activation, the Conv writes the activation's output through conv2d's
 * clip, with the same results as the unfused ops (NaN kept; relu's -0
 * becomes +0), or, when a Clip's bounds are not known, the two are
 * translated as they come. */
static int translate_at(struct ox *x, const Onnx__GraphProto *g, size_t i, size_t *deferred)
{
    size_t j;
    if (deferred && (j = act_reader(g, i)) != 0) {
        deferred[j] = i + 1;
        return 0;
    }
    if (!deferred || !deferred[i])
        return vq__onnx_translate(x);
    size_t c = deferred[i] - 1;
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

int ox_nodes(struct ox *x, const Onnx__GraphProto *g, int block)
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
    for (size_t i = 0; i < g->n_node && rc == 0; i++) {
        const Onnx__NodeProto *n = g->node[i];
        x->node = n;
        x->node_index = (int)i;
        if (!n->op_type || !*n->op_type)
            rc = ox_fail(x, VQ_EINVAL, "the node has no op type");
        else if (n->domain && *n->domain && strcmp(n->domain, "ai.onnx"))
            rc = ox_fail(x, VQ_ENOSYS,
                         "op %s of domain %s is not supported (varq reads the "
                         "default domain ai.onnx, opset %lld)",
                         n->op_type, n->domain, (long long)x->opset);
        else
            rc = translate_at(x, g, i, deferred);
    }
    free(deferred);
    x->depth--;
    x->node = outer;
    x->node_index = outer_index;
    x->block = outer_block;
    return rc;
}

int ox_block_var(struct ox *x, const char *name, const vq__meta *m, struct ox_val **out)
{
    struct ox_val *v;
    int rc = val_new(x, name, &v);
    if (rc < 0)
        return rc;
    v->meta = *m;
    if (!(v->var = vq__strdup(name)))
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    rc = vq_program_add_var(x->p, x->block, name, m->dtype, m->ndim, m->shape, false);
    if (rc < 0)
        return ox_fail(x, rc, "declaring \"%s\": %s", name, vq_errmsg());
    *out = v;
    return 0;
}

int ox_var_of(struct ox *x, struct ox_val *v)
{
    return val_var(x, v);
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
        struct ox_val *val;
        if (v->dtype == VQ_F32 || v->dtype == VQ_F64) {
            /* a parameter: a var only, so that nothing folds it away */
            rc = val_new(x, t->name, &val);
            if (rc == 0) {
                meta_of(&val->meta, v);
                if (!(val->var = vq__strdup(t->name)))
                    rc = vq__fail(VQ_ENOMEM, "onnx: out of memory");
            }
            if (rc == 0)
                rc = param_var(x, t->name, v);
            vq_tensor_release(v);
        } else if ((rc = ox_const(x, t->name, v, &val)) == 0) {
            rc = val_var(x, val);
        }
    }
    for (size_t i = 0; i < g->n_input && rc == 0; i++) {
        const Onnx__ValueInfoProto *vi = g->input[i];
        if (!vi->name || !*vi->name)
            return vq__fail(VQ_EINVAL, "onnx: graph input %zu has no name", i);
        if (is_initializer(g, vi->name))
            continue;
        struct ox_val *v;
        if ((rc = val_new(x, vi->name, &v)) < 0 || (rc = input_meta(vi, &v->meta)) < 0)
            return rc;
        if (!(v->var = vq__strdup(vi->name)))
            return vq__fail(VQ_ENOMEM, "onnx: out of memory");
        if ((rc = offer_attach(x, v)) < 0)
            return rc;
        rc = vq_program_add_var(x->p, 0, v->var, v->meta.dtype, v->meta.ndim, v->meta.shape,
                                false);
        if (rc < 0)
            return vq__fail(rc, "onnx: graph input \"%s\": %s", vi->name, vq_errmsg());
        rc = 0;
    }
    if (rc == 0)
        rc = ox_nodes(x, g, 0);
    x->node = NULL;
    /* outputs: vars under their own names */
    for (size_t i = 0; i < g->n_output && rc == 0; i++) {
        const char *name = g->output[i]->name;
        struct ox_val *v = name ? ox_find(x, name) : NULL;
        if (!v)
            return vq__fail(VQ_EINVAL, "onnx: graph output \"%s\" is produced by no node",
                            name ? name : "");
        if (v->var && !strcmp(v->var, name))
            continue;
        if (!v->var && v->konst) {
            rc = val_var(x, v);
            continue;
        }
        /* an alias: copy into a var of its name (a reshape that keeps
         * every dim) */
        int64_t keep[VQ_MAX_DIMS] = {0};
        vq_attr a = VQ_ATTR_IS("shape", keep, v->meta.ndim);
        const char *in = v->var;
        if ((rc = vq_program_add_var(x->p, 0, name, v->meta.dtype, v->meta.ndim, v->meta.shape,
                                     false)) < 0 ||
            (rc = vq_program_add_op(x->p, 0, "reshape", &in, 1, &name, 1, &a, 1)) < 0)
            return vq__fail(rc, "onnx: graph output \"%s\": %s", name, vq_errmsg());
        rc = 0;
    }
    return rc;
}

static void ox_free(struct ox *x)
{
    for (int i = 0; i < x->nvals; i++)
        val_free(x->vals[i]);
    free(x->vals);
    free(x->index);
    for (int i = 0; i < x->nbinds; i++) {
        free(x->binds[i].name);
        vq_tensor_release(x->binds[i].t);
    }
    free(x->binds);
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
        if (!v->name || !v->tensor)
            return vq__fail(VQ_EINVAL, "vq_program_from_onnx_opts: value %d has no %s", i,
                            v->name ? "tensor" : "name");
        if (v->tensor->dev.kind != VQ_DEV_CPU)
            return vq__fail(VQ_EINVAL,
                            "vq_program_from_onnx_opts: value %d (\"%s\") is not on "
                            "the CPU",
                            i, v->name);
        if (o->specialized)
            o->specialized[i] = false;
    }
    return 0;
}

static int import_model(vq_program **out, vq_scope *params, const void *buf, size_t len,
                        const char *dir, const vq_onnx_opts *opts)
{
    if (!out || (!buf && len))
        return vq__fail(VQ_EINVAL, "vq_program_from_onnx: NULL argument");
    *out = NULL;
    int orc = opts_check(opts);
    if (orc < 0)
        return orc;
    int nrc = vq__onnx_nesting_check(buf, len);
    if (nrc < 0)
        return nrc;
    unsigned failed = vq__protobuf_failed_allocs();
    Onnx__ModelProto *m = onnx__model_proto__unpack(&vq__protobuf_allocator, len, buf);
    if (!m && vq__protobuf_failed_allocs() != failed)
        return vq__fail(VQ_ENOMEM, "onnx: out of memory while parsing %zu bytes", len);
    if (!m)
        return vq__fail(VQ_EINVAL, "onnx: not an ONNX model (%zu bytes that do not decode as "
                                   "a ModelProto: truncated or corrupted?)",
                        len);
    struct ox x = {.dir = dir, .opts = opts};
    int rc = 0;
    if (!m->graph)
        rc = vq__fail(VQ_EINVAL, "onnx: the model has no graph");
    if (rc == 0)
        rc = model_opset(m, &x.opset);
    if (rc == 0)
        rc = vq_program_new(&x.p);
    if (rc == 0)
        rc = import_graph(&x, m->graph);
    if (rc == 0 && x.nbinds && !params)
        rc = vq__fail(VQ_EINVAL, "onnx: the model has initializers or constants: params must "
                                 "be a scope to hold them");
    for (int i = 0; rc == 0 && i < x.nbinds; i++)
        rc = vq_scope_set(params, x.binds[i].name, x.binds[i].t);
    onnx__model_proto__free_unpacked(m, &vq__protobuf_allocator);
    if (rc < 0) {
        vq_program_free(x.p);
        ox_free(&x);
        return rc;
    }
    *out = x.p;
    ox_free(&x);
    return 0;
}

VQ_API int vq_program_from_onnx(vq_program **out, vq_scope *params, const void *buf, size_t len)
{
    return import_model(out, params, buf, len, NULL, NULL);
}

VQ_API int vq_program_from_onnx_opts(vq_program **out, vq_scope *params, const void *buf,
                                     size_t len, const vq_onnx_opts *opts)
{
    return import_model(out, params, buf, len, NULL, opts);
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
    rc = import_model(out, params, buf, len, *dir ? dir : "/", opts);
    free(dir);
    free(buf);
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
    memset(info, 0, sizeof *info);
}

VQ_API int vq_onnx_info_read(vq_onnx_info *out, const void *buf, size_t len)
{
    if (!out || (!buf && len))
        return vq__fail(VQ_EINVAL, "vq_onnx_info_read: NULL argument");
    memset(out, 0, sizeof *out);
    int nrc = vq__onnx_nesting_check(buf, len);
    if (nrc < 0)
        return nrc;
    unsigned failed = vq__protobuf_failed_allocs();
    Onnx__ModelProto *m = onnx__model_proto__unpack(&vq__protobuf_allocator, len, buf);
    if (!m && vq__protobuf_failed_allocs() != failed)
        return vq__fail(VQ_ENOMEM, "onnx: out of memory while parsing %zu bytes", len);
    if (!m)
        return vq__fail(VQ_EINVAL, "onnx: not an ONNX model (%zu bytes that do not decode as "
                                   "a ModelProto: truncated or corrupted?)",
                        len);
    int64_t opset = -1;
    int rc = m->graph ? model_opset(m, &opset) : vq__fail(VQ_EINVAL, "onnx: the model has no "
                                                                     "graph");
    const Onnx__GraphProto *g = m->graph;
    if (rc == 0) {
        out->opset = (int)opset;
        out->inputs = vq__calloc(g->n_input + 1, sizeof *out->inputs);
        out->outputs = vq__calloc(g->n_output + 1, sizeof *out->outputs);
        if (!out->inputs || !out->outputs)
            rc = vq__fail(VQ_ENOMEM, "onnx: out of memory");
    }
    for (size_t i = 0; rc == 0 && i < g->n_input; i++) {
        const char *nm = g->input[i]->name ? g->input[i]->name : "";
        if (is_initializer(g, nm))
            continue;
        if (!(out->inputs[out->ninputs++] = vq__strdup(nm)))
            rc = vq__fail(VQ_ENOMEM, "onnx: out of memory");
    }
    for (size_t i = 0; rc == 0 && i < g->n_output; i++)
        if (!(out->outputs[out->noutputs++] = vq__strdup(g->output[i]->name ? g->output[i]->name
                                                                        : "")))
            rc = vq__fail(VQ_ENOMEM, "onnx: out of memory");
    onnx__model_proto__free_unpacked(m, &vq__protobuf_allocator);
    if (rc < 0)
        vq_onnx_info_free(out);
    return rc;
}
