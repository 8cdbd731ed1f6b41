/* What the importer's parts share: the import's values by name (struct
 * ox_val), the messages that name the node being translated, the node's
 * inputs, outputs and attributes, and ox_emit, through which every
 * translation adds varq ops (or computes them right away when their inputs
 * are known); the reading and checking of what an op's row declares; and
 * the small compositions several translations share (a scalar, a
 * reshape, a cast, a where). import.c walks the model with these, and so
 * do the translations (t_*.c); neither calls into the other through here,
 * so the files depend one way: import.c -> translate.c -> t_*.c -> ox.c. */
#include "onnx_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- values by name ---- */

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return h;
}

static struct ox_val *find_stored(struct ox *x, const char *name)
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

struct ox_val *ox_find(struct ox *x, const char *name)
{
    /* the innermost pass that made name holds it under its own name (the
     * latest mapping wins: a pass may only make a name once) */
    for (const struct ox_frame *f = x->frame; f && name; f = f->up)
        for (int i = f->n - 1; i >= 0; i--)
            if (!strcmp(f->from[i], name))
                return find_stored(x, f->to[i]);
    return find_stored(x, name);
}

void ox_frame_push(struct ox *x, struct ox_frame *f)
{
    f->up = x->frame;
    f->tag = x->nframes++;
    x->frame = f;
}

void ox_frame_pop(struct ox *x)
{
    struct ox_frame *f = x->frame;
    if (!f)
        return;
    for (int i = 0; i < f->n; i++) {
        free(f->from[i]);
        free(f->to[i]);
    }
    free(f->from);
    free(f->to);
    x->frame = f->up;
    *f = (struct ox_frame){0};
}

/* The name a value made now is stored under: name itself, or in a pass
 * (struct ox_frame) name#tag, remembered in the pass's map; NULL without
 * memory (the message set). The caller frees it. */
static char *stored_name(struct ox *x, const char *name)
{
    struct ox_frame *f = x->frame;
    if (!f) {
        char *s = vq__strdup(name);
        if (!s)
            vq__fail(VQ_ENOMEM, "onnx: out of memory");
        return s;
    }
    size_t len = strlen(name) + 24;
    char *to = vq__malloc(len), *from = vq__strdup(name);
    if (f->n == f->cap) {
        int cap = f->cap ? 2 * f->cap : 16;
        char **a = vq__realloc(f->from, (size_t)cap * sizeof *a);
        if (a)
            f->from = a;
        char **b = a ? vq__realloc(f->to, (size_t)cap * sizeof *b) : NULL;
        if (b) {
            f->to = b;
            f->cap = cap;
        }
    }
    if (!to || !from || f->n == f->cap) {
        free(to);
        free(from);
        vq__fail(VQ_ENOMEM, "onnx: out of memory");
        return NULL;
    }
    snprintf(to, len, "%s#%d", name, f->tag);
    f->from[f->n] = from;
    f->to[f->n++] = to;
    char *s = vq__strdup(to);
    if (!s)
        vq__fail(VQ_ENOMEM, "onnx: out of memory");
    return s;
}

int ox_tensor_in(struct ox *x, int i, const struct ox_val *v)
{
    if (!v || (!v->seq && !v->none))
        return 0;
    return ox_fail(x, VQ_EINVAL, "input %d \"%s\" is %s; the op takes a tensor", i, v->name,
                   v->seq ? "a sequence" : "an optional that holds nothing");
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

int ox_val_new(struct ox *x, const char *name, struct ox_val **out)
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
    if (!v)
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    if (!(v->name = stored_name(x, name))) {
        free(v);
        return VQ_ENOMEM;
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
    free(v->elems);
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
        return ox_fail(x, VQ_EINVAL,
                       "input %d \"%s\" is not a graph input, an initializer or "
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

/* ---- declared inputs and attributes ---- */

static const struct {
    int proto;
    const char *what;
} attr_types[] = {
    [OX_T_INT] = {ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT, "an int"},
    [OX_T_FLOAT] = {ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT, "a float"},
    [OX_T_STRING] = {ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING, "a string"},
    [OX_T_INTS] = {ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS, "a list of ints"},
    [OX_T_FLOATS] = {ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS, "a list of floats"},
};

/* Attribute spec of the node into *v: its value when the node gives it in
 * an opset that reads it, else the default for x's opset. */
static int attr_read(struct ox *x, const struct ox_attr_spec *spec, struct ox_attr_value *v)
{
    static const int64_t no_ints[1];
    static const float no_floats[1];
    bool later = spec->changed && x->opset >= spec->changed;
    const Onnx__AttributeProto *a = ox_attr(x, spec->name);
    if ((spec->since && x->opset < spec->since) || (spec->until && x->opset >= spec->until))
        a = NULL;
    *v = (struct ox_attr_value){.given = a != NULL,
                                .i = later ? spec->i2 : spec->i,
                                .f = spec->f,
                                .n = -1,
                                .ints = no_ints,
                                .floats = no_floats};
    snprintf(v->s, sizeof v->s, "%s",
             (later ? spec->s2 : spec->s) ? (later ? spec->s2 : spec->s) : "");
    if (!a)
        return 0;
    if (spec->type == OX_T_GRAPH || spec->type == OX_T_TENSOR) {
        v->g = a->g;
        v->t = a->t;
        return 0;
    }
    int rc = attr_type(x, a, attr_types[spec->type].proto, attr_types[spec->type].what);
    if (rc)
        return rc;
    size_t n = spec->type == OX_T_INTS ? a->n_ints : a->n_floats;
    switch (spec->type) {
    case OX_T_INT: v->i = a->i; return 0;
    case OX_T_FLOAT: v->f = a->f; return 0;
    case OX_T_STRING:
        if (a->s.len >= (size_t)spec->max || a->s.len >= sizeof v->s)
            return ox_fail(x, VQ_EINVAL, "attribute %s is too long", spec->name);
        if (a->s.len) /* an empty string's data is NULL */
            memcpy(v->s, a->s.data, a->s.len);
        v->s[a->s.len] = '\0';
        return 0;
    default: /* a list; an empty one's entries are NULL */
        if (n > (size_t)spec->max)
            return ox_fail(x, VQ_ENOSYS, "attribute %s has %zu entries, more than %d", spec->name,
                           n, spec->max);
        v->n = (int)n;
        if (n && spec->type == OX_T_INTS)
            v->ints = a->ints;
        else if (n)
            v->floats = a->floats;
        return 0;
    }
}

/* Input i of op's node, present (or not yet required) and known by
 * name. */
static int input_check(struct ox *x, const struct ox_op *op, int i)
{
    struct ox_val *v;
    int rc = ox_in(x, i, &v);
    if (rc == 0 && !v && i < op->min_in)
        rc = ox_fail(x, VQ_EINVAL, "input %d is missing", i);
    return rc;
}

int ox_args_read(struct ox *x, const struct ox_op *op, struct ox_args *args)
{
    const Onnx__NodeProto *n = x->node;
    if (op->max_in != OX_ANY && n->n_input > (size_t)op->max_in)
        return ox_fail(x, VQ_EINVAL, "%zu inputs; %s takes at most %d", n->n_input, n->op_type,
                       op->max_in);
    int rc = 0;
    for (int i = 0; rc == 0 && (i < op->min_in || (size_t)i < n->n_input); i++)
        rc = input_check(x, op, i);
    if (rc == 0 && op->out0 && !ox_out(x, 0))
        rc = ox_fail(x, VQ_EINVAL, "output 0 has no name");
    args->op = op;
    for (int k = 0; rc == 0 && op->attrs && op->attrs[k].name; k++)
        rc = attr_read(x, &op->attrs[k], &args->v[k]);
    if (rc == 0)
        x->args = args;
    return rc;
}

/* The value of declared attribute name; a name the row does not declare
 * reads as absent (n = -1, zeros), which a translation's tests catch. */
static const struct ox_attr_value *attr_value(const struct ox *x, const char *name)
{
    static const struct ox_attr_value absent = {.n = -1};
    const struct ox_attr_spec *spec = x->args->op->attrs;
    for (int k = 0; spec && spec[k].name; k++)
        if (!strcmp(spec[k].name, name))
            return &x->args->v[k];
    return &absent;
}

int64_t ox_int(const struct ox *x, const char *name)
{
    return attr_value(x, name)->i;
}

double ox_float(const struct ox *x, const char *name)
{
    return attr_value(x, name)->f;
}

const char *ox_str(const struct ox *x, const char *name)
{
    return attr_value(x, name)->s;
}

const int64_t *ox_ints(const struct ox *x, const char *name, int *n)
{
    const struct ox_attr_value *v = attr_value(x, name);
    *n = v->n;
    return v->ints;
}

const float *ox_floats(const struct ox *x, const char *name, int *n)
{
    const struct ox_attr_value *v = attr_value(x, name);
    *n = v->n;
    return v->floats;
}

const Onnx__GraphProto *ox_graph(const struct ox *x, const char *name)
{
    return attr_value(x, name)->g;
}

const Onnx__TensorProto *ox_tensor(const struct ox *x, const char *name)
{
    return attr_value(x, name)->t;
}

bool ox_given(const struct ox *x, const char *name)
{
    return attr_value(x, name)->given;
}

struct ox_val *ox_input(struct ox *x, int i)
{
    const Onnx__NodeProto *n = x->node;
    if (i < 0 || (size_t)i >= n->n_input || !n->input[i] || !*n->input[i])
        return NULL;
    return ox_find(x, n->input[i]);
}

const char *ox_type(const struct ox *x)
{
    return x->args->op->type;
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

int ox_list_value(struct ox *x, int i, const char *what, const struct ox_val *v, const vq_tensor *t,
                  bool typed, const char *want, int max)
{
    if (!t)
        return ox_fail(x, VQ_ENOSYS,
                       "input %d (%s) \"%s\" must be known when the model is "
                       "imported (an initializer, a Constant, or computed from "
                       "known shapes)",
                       i, what, v->name);
    if (!typed)
        return ox_fail(x, VQ_EINVAL, "input %d (%s) is %s, not %s", i, what,
                       vq_dtype_name(t->dtype), want);
    if (t->ndim > 1)
        return ox_fail(x, VQ_EINVAL, "input %d (%s) has %d dims, not 1", i, what, t->ndim);
    if (t->numel > max)
        return ox_fail(x, VQ_ENOSYS, "input %d (%s) has %lld entries, more than %d", i, what,
                       (long long)t->numel, max);
    return 0;
}

int ox_const_ints(struct ox *x, int i, const char *what, int64_t *out, int max, int *n)
{
    struct ox_val *v = ox_input(x, i);
    *n = -1;
    if (!v)
        return 0;
    if (!ox_known(x, v) && v->too_big)
        return ox_fail(x, VQ_ENOSYS,
                       "input %d (%s) \"%s\" must be known when the model is imported, but "
                       "it is, or is computed from, a value of more than %lld elements, too "
                       "large to compute then (left to the run)",
                       i, what, v->name, (long long)VQ_ONNX_FOLD_MAX_ELEMS);
    const vq_tensor *t = ox_known(x, v) ? v->konst : NULL;
    int rc = ox_list_value(x, i, what, v, t, t && (t->dtype == VQ_I64 || t->dtype == VQ_I32),
                           "an integer tensor", max);
    if (rc)
        return rc;
    for (int64_t k = 0; k < t->numel; k++)
        out[k] = t->dtype == VQ_I64 ? ((const int64_t *)t->data)[k] : ((const int32_t *)t->data)[k];
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

int ox_param(struct ox *x, const char *name, vq_tensor *t)
{
    struct ox_val *v;
    int rc = ox_val_new(x, name, &v);
    if (rc < 0)
        return rc;
    meta_of(&v->meta, t);
    if (!(v->var = vq__strdup(name)))
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    return param_var(x, name, t);
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

int ox_var_of(struct ox *x, struct ox_val *v)
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
    int rc = ox_val_new(x, name, &v);
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
    int rc = ox_val_new(x, name, &v);
    if (rc < 0)
        return rc;
    v->meta = src->meta;
    v->too_big = src->too_big;
    v->sym = src->sym;
    v->sym_off = src->sym_off;
    if (src->konst)
        v->konst = vq_tensor_retain(src->konst);
    v->none = src->none;
    v->seq = src->seq;
    v->seq_n = src->seq_n;
    if (src->seq_n > 0) {
        if (!(v->elems = vq__malloc((size_t)src->seq_n * sizeof *v->elems)))
            return vq__fail(VQ_ENOMEM, "onnx: out of memory");
        memcpy(v->elems, src->elems, (size_t)src->seq_n * sizeof *v->elems);
    }
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
    vq_tensor *val[VQ__MAX_SLOTS];
    for (int i = 0; i < nin; i++) {
        im[i] = in[i]->meta;
        val[i] = in[i]->konst; /* what an op sized by values reads: known ones fold */
        known &= in[i]->konst != NULL;
        too_big |= in[i]->too_big;
        computable &= in[i]->konst || in[i]->too_big;
    }
    _Alignas(16) unsigned char params[VQ__MAX_PARAMS];
    int rc = vq__op_infer_vals(def, attrs, nattrs, nin, im, val, nout, om, params);
    if (rc < 0)
        return ox_fail(x, rc, "%s", vq_errmsg());
    /* a random op without a seed draws anew at each run: never folded */
    if (vq__draws_default(def, params))
        known = false;
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
    struct ox_val *outs[VQ__MAX_SLOTS] = {0};
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
            rc = ox_var_of(x, in[i]);
            iv[i] = in[i]->var;
        }
        for (int j = 0; j < nout && rc == 0; j++) {
            if ((rc = ox_val_new(x, names[j], &outs[j])) < 0)
                break;
            outs[j]->meta = om[j];
            outs[j]->too_big = too_big;
            if (!(outs[j]->var = vq__strdup(outs[j]->name)))
                return vq__fail(VQ_ENOMEM, "onnx: out of memory");
            rc = vq_program_add_var(x->p, x->block, outs[j]->var, om[j].dtype, om[j].ndim,
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
        if (nout == 1 && (rc = ox_part_emitted(x, type, in, nin, outs[0], attrs, nattrs)) < 0)
            return rc;
    }
    for (int j = 0; out_vals && j < nout; j++)
        out_vals[j] = outs[j];
    return 0;
}

/* ---- subgraphs and vars of blocks ---- */

int ox_subgraph(struct ox *x, const Onnx__GraphProto *g, int block)
{
    return x->walk(x, g, block);
}

int ox_block_var(struct ox *x, const char *name, const vq__meta *m, struct ox_val **out)
{
    struct ox_val *v;
    int rc = ox_val_new(x, name, &v);
    if (rc < 0)
        return rc;
    v->meta = *m;
    if (!(v->var = vq__strdup(v->name)))
        return vq__fail(VQ_ENOMEM, "onnx: out of memory");
    rc = vq_program_add_var(x->p, x->block, v->var, m->dtype, m->ndim, m->shape, false);
    if (rc < 0)
        return ox_fail(x, rc, "declaring \"%s\": %s", v->var, vq_errmsg());
    *out = v;
    return 0;
}

void ox_release(struct ox *x)
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

/* ---- what several translations compose ---- */

/* Output 0, which the op requires. */
const char *ox_out0(struct ox *x)
{
    return ox_out(x, 0);
}

/* A scalar constant of dtype dt. */
int ox_scalar(struct ox *x, vq_dtype dt, double value, struct ox_val **out)
{
    vq_tensor *t;
    int rc = vq_tensor_new(&t, dt, 0, NULL);
    if (rc < 0)
        return rc;
    vq__elem_set(dt, vq_tensor_data(t), 0, value);
    return ox_const(x, NULL, t, out);
}

bool ox_is_float(vq_dtype dt)
{
    return dt == VQ_F32 || dt == VQ_F64;
}

/* The first element of a known tensor, as a double. */
double ox_first_value(const vq_tensor *t)
{
    return vq__elem_get(t->dtype, t->data, 0);
}

/* An axis in [-rank, rank) as an index. */
int ox_axis(struct ox *x, const char *what, int64_t a, int rank, int *out)
{
    if (a < -rank || a >= rank)
        return ox_fail(x, VQ_EINVAL, "%s %lld is out of range for rank %d", what, (long long)a,
                       rank);
    *out = (int)(a < 0 ? a + rank : a);
    return 0;
}

/* The entries of the node's declared ints attribute name into out (*n =
 * -1 when absent; the row's spec bounds *n by out's size). */
void ox_ints_copy(const struct ox *x, const char *name, int64_t *out, int *n)
{
    const int64_t *v = ox_ints(x, name, n);
    if (*n > 0)
        memcpy(out, v, (size_t)*n * sizeof *out);
}

/* One known integer element, into *out. */
bool ox_known_int1(const struct ox_val *v, int64_t *out)
{
    const vq_tensor *t = v->konst;
    if (!t || t->numel != 1 || (t->dtype != VQ_I64 && t->dtype != VQ_I32))
        return false;
    *out = t->dtype == VQ_I64 ? *(const int64_t *)t->data : *(const int32_t *)t->data;
    return true;
}

/* A reshape of v to shape (entries: a dim, 0 = v's dim there, -1 = the
 * rest), into name (NULL: a temporary). */
int ox_reshape(struct ox *x, struct ox_val *v, const int64_t *shape, int n, const char *name,
               struct ox_val **out)
{
    vq_attr a = VQ_ATTR_IS("shape", shape, n);
    return ox_emit(x, "reshape", &v, 1, &name, 1, &a, 1, out);
}

/* A reshape of v to the shape want[] whose unknown dims (-1) are v's dims
 * from[] (moved: an Unsqueeze of [batch, seq] at 0), built at run time:
 * a concat of the known dims and of shape ops reading v's dims. */
static int reshape_run(struct ox *x, struct ox_val *v, const int64_t *want, const int *from, int n,
                       const char *name, struct ox_val **out)
{
    struct ox_val *parts[VQ_MAX_DIMS], *shape;
    const char *tmp = NULL;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (want[i] >= 0) {
            vq_tensor *t;
            int64_t one = 1;
            if ((rc = vq_tensor_from(&t, VQ_I64, 1, &one, &want[i])) == 0)
                rc = ox_const(x, NULL, t, &parts[i]);
        } else if (from[i] < 0) {
            return ox_fail(x, VQ_ENOSYS, "dim %d of the result is known only at run time", i);
        } else {
            vq_attr a[2] = {VQ_ATTR_I("start", from[i]), VQ_ATTR_I("end", from[i] + 1)};
            rc = ox_emit(x, "shape", &v, 1, &tmp, 1, a, 2, &parts[i]);
        }
    }
    vq_attr axis = VQ_ATTR_I("axis", 0);
    if (rc == 0)
        rc = ox_emit(x, "concat", parts, n, &tmp, 1, &axis, 1, &shape);
    if (rc < 0)
        return rc;
    struct ox_val *in[2] = {v, shape}, *res;
    if ((rc = ox_emit(x, "reshape", in, 2, &name, 1, NULL, 0, &res)) < 0)
        return rc;
    for (int i = 0; i < n; i++) /* what import knows of the dims */
        res->meta.shape[i] = want[i] >= 0 ? want[i] : v->meta.shape[from[i]];
    if (out)
        *out = res;
    return 0;
}

/* A reshape of v to rank n with the known dims of want[] (-1: unknown):
 * each unknown dim is copied from v when v has it at the same place (0),
 * one other may be left to the count (-1); with more, the shape is built
 * at run time from v's dims (reshape_run). */
int ox_reshape_known(struct ox *x, struct ox_val *v, const int64_t *want, const int *from, int n,
                     const char *name, struct ox_val **out)
{
    int64_t shape[VQ_MAX_DIMS];
    int free_at = -1;
    for (int i = 0; i < n; i++) {
        if (want[i] >= 0)
            shape[i] = want[i];
        else if (from[i] == i)
            shape[i] = 0;
        else if (free_at < 0)
            shape[i] = -1, free_at = i;
        else
            return reshape_run(x, v, want, from, n, name, out);
    }
    return ox_reshape(x, v, shape, n, name, out);
}

/* *v cast to dtype (a new value), unless it has that type. */
int ox_cast(struct ox *x, struct ox_val **v, vq_dtype dtype)
{
    if ((*v)->meta.dtype == dtype)
        return 0;
    vq_attr c = VQ_ATTR_S("dtype", vq_dtype_name(dtype));
    const char *temp = NULL;
    return ox_emit(x, "cast", v, 1, &temp, 1, &c, 1, v);
}

/* y = where(c, a, b) into name. */
int ox_select(struct ox *x, struct ox_val *c, struct ox_val *a, struct ox_val *b, const char *name,
              struct ox_val **out)
{
    return ox_emit(x, "where", (struct ox_val *[]){c, a, b}, 3, &name, 1, NULL, 0, out);
}

/* scale * X + bias into a temporary. */
int ox_affine(struct ox *x, struct ox_val *v, double scale, double bias, struct ox_val **out)
{
    vq_attr a[2] = {VQ_ATTR_F("scale", scale), VQ_ATTR_F("bias", bias)};
    return ox_emit(x, "scale", &v, 1, NULL, 1, a, 2, out);
}

/* The axes of Squeeze / Unsqueeze / reductions: an attribute before
 * opset since (13, or 18 for the reductions but ReduceSum), input 1
 * since. */
int ox_axes(struct ox *x, int since, int64_t *axes, int *n)
{
    if (x->opset < since) {
        ox_ints_copy(x, "axes", axes, n);
        return 0;
    }
    return ox_const_ints(x, 1, "axes", axes, OX_MAXI, n);
}
