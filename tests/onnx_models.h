/* Builders of ONNX models and the runs of imported ones that the ONNX
 * suites share (test_onnx.c, test_onnx_rnn.c): a model made with the
 * protobuf-c code the importer reads with, its inputs, initializers,
 * nodes and attributes; packed, imported into a new scope (the import must
 * succeed), run on a threaded engine, and freed. */
#ifndef VARQ_TESTS_ONNX_MODELS_H
#define VARQ_TESTS_ONNX_MODELS_H

#include <varq/varq.h>

#include "onnx.pb-c.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GROW(arr, n) ((arr) = realloc((arr), ((n) + 1) * sizeof *(arr)))

static inline Onnx__ModelProto *model_new(int64_t opset)
{
    Onnx__ModelProto *m = calloc(1, sizeof *m);
    onnx__model_proto__init(m);
    m->has_ir_version = 1;
    m->ir_version = 8;
    Onnx__OperatorSetIdProto *o = calloc(1, sizeof *o);
    onnx__operator_set_id_proto__init(o);
    o->domain = strdup("");
    o->has_version = 1;
    o->version = opset;
    GROW(m->opset_import, m->n_opset_import);
    m->opset_import[m->n_opset_import++] = o;
    m->graph = calloc(1, sizeof *m->graph);
    onnx__graph_proto__init(m->graph);
    m->graph->name = strdup("g");
    return m;
}

/* A value info of a float tensor; dims < 0 are named "N". */
static inline Onnx__ValueInfoProto *value_info(const char *name, int32_t elem, int ndim,
                                               const int64_t *dims)
{
    Onnx__ValueInfoProto *vi = calloc(1, sizeof *vi);
    onnx__value_info_proto__init(vi);
    vi->name = strdup(name);
    Onnx__TypeProto *tp = calloc(1, sizeof *tp);
    onnx__type_proto__init(tp);
    Onnx__TypeProto__Tensor *tt = calloc(1, sizeof *tt);
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = elem;
    tt->shape = calloc(1, sizeof *tt->shape);
    onnx__tensor_shape_proto__init(tt->shape);
    for (int i = 0; i < ndim; i++) {
        Onnx__TensorShapeProto__Dimension *d = calloc(1, sizeof *d);
        onnx__tensor_shape_proto__dimension__init(d);
        if (dims[i] >= 0) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = dims[i];
        } else {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = strdup("N");
        }
        GROW(tt->shape->dim, tt->shape->n_dim);
        tt->shape->dim[tt->shape->n_dim++] = d;
    }
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->type = tp;
    return vi;
}

static inline void add_input(Onnx__ModelProto *m, const char *name, int ndim, const int64_t *dims)
{
    Onnx__GraphProto *g = m->graph;
    GROW(g->input, g->n_input);
    g->input[g->n_input++] = value_info(name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, ndim, dims);
}

static inline void add_output(Onnx__ModelProto *m, const char *name)
{
    Onnx__GraphProto *g = m->graph;
    GROW(g->output, g->n_output);
    g->output[g->n_output++] = value_info(name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, 0, NULL);
}

static inline Onnx__TensorProto *tensor(const char *name, int32_t type, int ndim,
                                        const int64_t *dims, const void *data, size_t nbytes)
{
    Onnx__TensorProto *t = calloc(1, sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = strdup(name);
    t->has_data_type = 1;
    t->data_type = type;
    t->n_dims = (size_t)ndim;
    t->dims = malloc(((size_t)ndim + 1) * sizeof *t->dims);
    if (ndim > 0)
        memcpy(t->dims, dims, (size_t)ndim * sizeof *dims);
    t->has_raw_data = 1;
    t->raw_data.len = nbytes;
    t->raw_data.data = malloc(nbytes + 1);
    memcpy(t->raw_data.data, data, nbytes);
    return t;
}

static inline Onnx__TensorProto *add_init(Onnx__ModelProto *m, const char *name, int ndim,
                                          const int64_t *dims, const float *data)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= dims[i];
    Onnx__GraphProto *g = m->graph;
    GROW(g->initializer, g->n_initializer);
    Onnx__TensorProto *t = tensor(name, ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT, ndim, dims, data,
                                  (size_t)n * sizeof(float));
    g->initializer[g->n_initializer++] = t;
    return t;
}

static inline void add_init_ints(Onnx__ModelProto *m, const char *name, int n, const int64_t *v)
{
    Onnx__GraphProto *g = m->graph;
    GROW(g->initializer, g->n_initializer);
    int64_t dims[1] = {n};
    g->initializer[g->n_initializer++] =
        tensor(name, ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, dims, v, (size_t)n * sizeof *v);
}

/* Graph outputs, one per name; names is NULL-terminated. */
static inline void add_outputs(Onnx__ModelProto *m, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        add_output(m, names[i]);
}

/* A node; ins and outs are NULL-terminated. */
static inline Onnx__NodeProto *add_node(Onnx__ModelProto *m, const char *op, const char *name,
                                        const char *const *ins, const char *const *outs)
{
    Onnx__NodeProto *n = calloc(1, sizeof *n);
    onnx__node_proto__init(n);
    n->op_type = strdup(op);
    n->name = strdup(name);
    for (; ins && *ins; ins++) {
        GROW(n->input, n->n_input);
        n->input[n->n_input++] = strdup(*ins);
    }
    for (; outs && *outs; outs++) {
        GROW(n->output, n->n_output);
        n->output[n->n_output++] = strdup(*outs);
    }
    Onnx__GraphProto *g = m->graph;
    GROW(g->node, g->n_node);
    g->node[g->n_node++] = n;
    return n;
}

static inline Onnx__AttributeProto *attr(Onnx__NodeProto *n, const char *name, int type)
{
    Onnx__AttributeProto *a = calloc(1, sizeof *a);
    onnx__attribute_proto__init(a);
    a->name = strdup(name);
    a->has_type = 1;
    a->type = type;
    GROW(n->attribute, n->n_attribute);
    n->attribute[n->n_attribute++] = a;
    return a;
}

static inline void attr_int(Onnx__NodeProto *n, const char *name, int64_t v)
{
    Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    a->has_i = 1;
    a->i = v;
}

static inline void attr_float(Onnx__NodeProto *n, const char *name, float v)
{
    Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    a->has_f = 1;
    a->f = v;
}

static inline void attr_ints(Onnx__NodeProto *n, const char *name, int k, const int64_t *v)
{
    Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS);
    a->n_ints = (size_t)k;
    a->ints = malloc(((size_t)k + 1) * sizeof *v);
    memcpy(a->ints, v, (size_t)k * sizeof *v);
}

/* With VARQ_ONNX_SEEDS set to a directory, every model packed here is
 * also written there, named by a hash of its bytes: seeds for the fuzzer
 * tests/fuzz_onnx.c (scripts/test.sh). */
static inline void seed_write(const uint8_t *buf, size_t len)
{
    const char *dir = getenv("VARQ_ONNX_SEEDS");
    if (!dir || !*dir)
        return;
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ buf[i]) * 1099511628211u;
    char path[4096];
    snprintf(path, sizeof path, "%s/test_onnx-%016llx.onnx", dir, (unsigned long long)h);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(buf, 1, len, f);
        fclose(f);
    }
}

static inline uint8_t *pack(const Onnx__ModelProto *m, size_t *len)
{
    *len = onnx__model_proto__get_packed_size(m);
    uint8_t *buf = malloc(*len + 1);
    onnx__model_proto__pack(m, buf);
    seed_write(buf, *len);
    return buf;
}

#define NAMES(...) ((const char *const[]){__VA_ARGS__, NULL})

struct run {
    vq_engine *e;
    vq_exec *ex;
};

static inline struct run run_new(void)
{
    struct run r;
    vq_engine_opts eo = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    cr_assert_eq(vq_engine_new(&r.e, &eo), 0);
    cr_assert_eq(vq_exec_new(&r.ex, r.e, NULL), 0);
    return r;
}

/* After the scopes whose tensors its runs used: their last release pushes
 * on the engine (engine.h, vq_engine_free). */
static inline void run_free(struct run *r)
{
    vq_exec_free(r->ex);
    vq_engine_free(r->e);
}

/* A model packed and imported into a new scope. */
struct imported {
    Onnx__ModelProto *m;
    uint8_t *buf;
    size_t len;
    vq_scope *s;
    vq_program *p;
};

/* Packs m and imports it into a new scope; the import must succeed. */
static inline struct imported import_ok(Onnx__ModelProto *m)
{
    struct imported im = {.m = m};
    im.buf = pack(m, &im.len);
    cr_assert_eq(vq_scope_new(&im.s), 0);
    cr_assert_eq(vq_program_from_onnx(&im.p, im.s, im.buf, im.len), 0, "%s", vq_errmsg());
    return im;
}

/* Frees the program, the scope, the packed bytes and the model (before
 * run_free: see there). */
static inline void imported_free(struct imported *im)
{
    vq_scope_free(im->s);
    vq_program_free(im->p);
    free(im->buf);
    onnx__model_proto__free_unpacked(im->m, NULL);
}

/* ---- typed inputs and initializers, string and float-list attributes ---- */

/* A graph input of ONNX element type elem (dims < 0 are named "N"). */
static inline void add_input_of(Onnx__ModelProto *m, const char *name, int32_t elem, int ndim,
                                const int64_t *dims)
{
    Onnx__GraphProto *g = m->graph;
    GROW(g->input, g->n_input);
    g->input[g->n_input++] = value_info(name, elem, ndim, dims);
}

/* An initializer of ONNX element type elem, esize bytes an element. */
static inline void add_init_of(Onnx__ModelProto *m, const char *name, int32_t elem, size_t esize,
                               int ndim, const int64_t *dims, const void *data)
{
    int64_t n = 1;
    for (int i = 0; i < ndim; i++)
        n *= dims[i];
    Onnx__GraphProto *g = m->graph;
    GROW(g->initializer, g->n_initializer);
    g->initializer[g->n_initializer++] = tensor(name, elem, ndim, dims, data, (size_t)n * esize);
}

static inline void attr_string(Onnx__NodeProto *n, const char *name, const char *v)
{
    Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING);
    a->has_s = 1;
    a->s.len = strlen(v);
    a->s.data = (uint8_t *)strdup(v);
}

static inline void attr_strings(Onnx__NodeProto *n, const char *name, int k, const char *const *v)
{
    Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS);
    a->n_strings = (size_t)k;
    a->strings = calloc((size_t)k + 1, sizeof *a->strings);
    for (int i = 0; i < k; i++) {
        a->strings[i].len = strlen(v[i]);
        a->strings[i].data = (uint8_t *)strdup(v[i]);
    }
}

static inline void attr_floats(Onnx__NodeProto *n, const char *name, int k, const float *v)
{
    Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS);
    a->n_floats = (size_t)k;
    a->floats = malloc(((size_t)k + 1) * sizeof *v);
    memcpy(a->floats, v, (size_t)k * sizeof *v);
}

/* ---- subgraphs (If branches, Loop bodies) ---- */

static inline Onnx__GraphProto *subgraph(const char *name)
{
    Onnx__GraphProto *g = calloc(1, sizeof *g);
    onnx__graph_proto__init(g);
    g->name = strdup(name);
    return g;
}

static inline void attr_graph(Onnx__NodeProto *n, const char *name, Onnx__GraphProto *g)
{
    Onnx__AttributeProto *a = attr(n, name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH);
    a->g = g;
}

/* Adds a node to a graph (add_node works on a model), named for its op. */
static inline Onnx__NodeProto *graph_node(Onnx__GraphProto *g, const char *op,
                                          const char *const *ins, const char *const *outs)
{
    Onnx__ModelProto shell;
    onnx__model_proto__init(&shell);
    shell.graph = g;
    return add_node(&shell, op, op, ins, outs);
}

#endif
