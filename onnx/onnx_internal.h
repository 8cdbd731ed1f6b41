/* What the ONNX importer's files share: the import's state (every ONNX
 * value by name, what it is known to be), the helpers the import and the
 * per-op translations use (ox.c), the tensor codec (tensor.c), the table
 * of translations (translate.c) and what each op declares there. */
#ifndef VARQ_ONNX_INTERNAL_H
#define VARQ_ONNX_INTERNAL_H

#include "graph_services.h"
#include "onnx.pb-c.h"
#include "onnx_ops.h"

#include <varq/onnx.h>

#include <stdbool.h>
#include <stdint.h>

/* One ONNX value (a graph input, an initializer, a node output, or a
 * temporary a translation made). */
struct ox_val {
    char *name;        /* ONNX name; temporaries get "<node output>@onnx<k>" */
    char *var;         /* the program var holding it, NULL until needed */
    vq__meta meta;     /* dtype and shape (-1 for dims known only at run) */
    vq_tensor *konst;  /* its value, when known at import (one reference) */
    /* A graph input's value that the caller offered (vq_onnx_opts), taken
     * as konst only when a translation needs it known (ox_known); one
     * reference, and its index among the offers. */
    vq_tensor *offered;
    int offer;
    /* Not NULL: a one-element integer value known only at run time that
     * equals sym's value plus sym_off, sym being a value that is never
     * negative (a Loop body's iteration number): what lets a Slice whose
     * starts and ends move with the iteration have a static size. */
    struct ox_val *sym;
    int64_t sym_off;
    /* Computable at import but not computed then: it, or a value it is
     * computed from, has more than VQ_ONNX_FOLD_MAX_ELEMS elements (ox_emit
     * left it to the run); what messages say when it is needed at import. */
    bool too_big;
    /* A small integer value made at run time (0-D or 1-D, at most
     * VQ_MAX_DIMS entries) with entries known at import (part.c): bit i
     * of pmask says entry i is pv[i]. 0: none known. */
    unsigned pmask;
    int64_t pv[VQ_MAX_DIMS];
    /* A sequence (t_sequence.c): its elements, values of their own, seq_n
     * of them, in order; meta.dtype is their dtype (an empty sequence has
     * one too). It has no var and no konst: the importer resolves every
     * sequence to its elements, so its length is always known here. */
    bool seq;
    int seq_n;
    struct ox_val **elems;
    /* An optional that holds nothing (Optional without an input, an
     * optional graph input offered empty): no var, no konst; meta.dtype
     * and seq say what it would hold. A present optional is its value. */
    bool none;
};

/* Names a subgraph translated more than once (a Loop that carries a
 * sequence, unrolled at import; a SequenceMap's body, once per element)
 * produces in one pass: each is stored under a name of its own, name#k,
 * and looked up through the innermost frame that maps it (ox_find), so
 * that the passes neither clash nor see each other's values. */
struct ox_frame {
    struct ox_frame *up;
    int tag;
    int n, cap;
    char **from, **to;
};

struct ox {
    vq_program *p;
    vq_scope *scope;
    int64_t opset;          /* of the default domain (0: the model imports only OX_TRAINING) */
    int64_t training_opset; /* of OX_TRAINING: 1, or 0 when the model does not import it */
    const char *dir;     /* the model's directory (external data), or NULL */
    struct ox_val **vals;
    int nvals, cap;
    int *index;          /* open addressing by name hash: val index, -1 empty */
    int index_cap;
    const Onnx__NodeProto *node; /* the node being translated */
    int node_index;
    int block;           /* where ops go: 0, or a block of an If or Loop */
    int depth;           /* subgraphs open in ox_nodes: 0 in the model's graph */
    int ntemps;
    /* what goes into the caller's scope once the import succeeded */
    struct ox_bind {
        char *name;
        vq_tensor *t;
    } *binds;
    int nbinds;
    const struct vq_onnx_opts *opts; /* offered input values, or NULL */
    /* import.c's fusion of a Relu or Clip into the Conv before it: while
     * that Conv (one over images) is translated, t_conv (t_window.c) gives its
     * conv2d attribute clip [lo, hi] */
    bool fuse;
    double fuse_lo, fuse_hi;
    /* import.c's fusion of x * Sigmoid(x): while that Sigmoid is
     * translated (writing the Mul's output), it emits silu */
    bool silu;
    /* import.c's walk over a graph's nodes, for the translations of If and
     * Loop (ox_subgraph): a hook, so that the translations do not call
     * back into import.c */
    int (*walk)(struct ox *x, const Onnx__GraphProto *g, int block);
    /* the declared attributes of the node being translated */
    const struct ox_args *args;
    /* the model's op types (census.c) when some are not translated, else
     * NULL: what the error names when the translation meets one */
    const vq_onnx_ops *unsupported;
    /* the innermost pass of a subgraph translated repeatedly, or NULL;
     * nframes: tags given so far */
    struct ox_frame *frame;
    int nframes;
};

/* Levels of subgraphs (If branches, Loop bodies, inside one another) a
 * model may nest: each costs a recursion of the import (ox_nodes) and of
 * protobuf-c's unpack, so a bound keeps a small hostile model from
 * overflowing the stack. Real models nest a handful. */
#define OX_MAX_NESTING 64

/* ---- wire.c ---- */

/* VQ_EINVAL, saying so, when the encoded ModelProto buf[0..len) nests
 * subgraphs deeper than OX_MAX_NESTING or messages deeper than protobuf-c
 * may safely recurse; read without unpacking (0 for bytes that are not a
 * model: unpack refuses those). */
/* A copy of the encoded ModelProto buf[0..len) without its main graph's
 * initializers (wire.c), for reading what else it says without holding its
 * weights twice: 0 and *out (free), 1 when the bytes do not parse here
 * (nothing made: unpack the original, which will judge them), or
 * VQ_ENOMEM. */
int vq__onnx_strip_weights(const void *buf, size_t len, void **out, size_t *out_len);
int vq__onnx_nesting_check(const void *buf, size_t len);

/* ---- census.c: the op types a model uses ---- */

/* The op types of g and of every subgraph in its nodes' attributes, into
 * *out (released with vq__onnx_ops_release; see vq_onnx_ops_read). strict:
 * a node with no op type is VQ_EINVAL (else it is left to the
 * translation, which refuses it where it meets it). */
int vq__onnx_census(const Onnx__GraphProto *g, bool strict, vq_onnx_ops *out);
void vq__onnx_ops_release(vq_onnx_ops *ops);
/* The one domain besides the default that varq reads (opset 1): the
 * optimizers Adagrad, Adam and Momentum (t_optim.c). */
#define OX_TRAINING "ai.onnx.preview.training"
/* Whether domain is the default one (NULL, "" and "ai.onnx"). */
bool vq__onnx_default_domain(const char *domain);
/* Whether the translate table has type, of domain domain (the default
 * domain, or OX_TRAINING for the rows that name it). */
bool vq__onnx_translatable(const char *domain, const char *type);
/* VQ_ENOSYS with the message that lists the types of ops that are not
 * translated (at most 32, and as many as the message holds, then "and N
 * more"), each with its count and first node, and what to do. */
int vq__onnx_ops_fail(const vq_onnx_ops *ops, int64_t opset);

/* ---- tensor.c ---- */

/* An ONNX element type as a varq dtype; false when varq has none. */
bool vq__onnx_dtype(int32_t onnx_type, vq_dtype *out);
const char *vq__onnx_type_name(int32_t onnx_type);
/* Decodes t into a new CPU tensor. dir: where external data lives (NULL:
 * refused). what: the tensor's role, for messages. */
int vq__onnx_tensor(const Onnx__TensorProto *t, const char *dir, const char *what,
                    vq_tensor **out);

/* ---- ox.c: values, messages, inputs, attributes, emitting ops ---- */

/* A new value named name (copied), not yet in any var; a name produced
 * twice fails the node. */
int ox_val_new(struct ox *x, const char *name, struct ox_val **out);
/* A float initializer name = t (a new reference): a value held by a
 * persistable var only, never known at import, so that nothing folds away
 * a parameter training must reach. */
int ox_param(struct ox *x, const char *name, vq_tensor *t);
/* Frees the values and the tensors queued for the caller's scope. */
void ox_release(struct ox *x);

/* Fails the node being translated: "onnx: node 3 (Conv \"conv1\"): ...". */
int ox_fail(struct ox *x, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
struct ox_val *ox_find(struct ox *x, const char *name);
/* Input i of the node: NULL when it is absent (past the end, or ""), else
 * its value (an input no one produced fails the import). */
int ox_in(struct ox *x, int i, struct ox_val **out);
/* Whether v's value is known at import. A graph input whose value the
 * caller offered becomes known here, the first time a translation needs
 * it: the program is then specialized on it (and the offer is marked so in
 * opts->specialized). */
bool ox_known(struct ox *x, struct ox_val *v);
/* v's value at import: its known value, or the imported value of the
 * float initializer (a parameter, never folded) it is; NULL when neither.
 * For inputs that only configure an op (Resize's scales and roi): the
 * program keeps what they held at import. */
const vq_tensor *ox_param_value(struct ox *x, const struct ox_val *v);
/* The node's attribute name, or NULL. */
const Onnx__AttributeProto *ox_attr(struct ox *x, const char *name);
/* The float attribute name of the node, def when absent: for a node not
 * being translated (import.c's fusion reads a Clip's bounds); a
 * translation reads its declared attributes (ox_int and friends). */
int ox_attr_float(struct ox *x, const char *name, double def, double *out);
/* Fails the node unless t, the value of input i (v; what: its role, for
 * messages), is known (not NULL), of the type it needs (typed; else it
 * is named as not want), of one dim and at most max entries. */
int ox_list_value(struct ox *x, int i, const char *what, const struct ox_val *v, const vq_tensor *t,
                  bool typed, const char *want, int max);
/* The values of input i, which must be a known integer tensor of at most
 * max elements (*n = -1 when the input is absent). what: for messages. */
int ox_const_ints(struct ox *x, int i, const char *what, int64_t *out, int max, int *n);

/* A new tensor *t the translation fills at import: refused (VQ_ENOSYS,
 * naming the node) past VQ_ONNX_MADE_MAX_ELEMS elements, since its shape
 * comes from the model; an allocation failure fails the node likewise. */
int ox_tensor_new(struct ox *x, vq_tensor **t, vq_dtype dt, int ndim, const int64_t *shape);
/* Emits varq op type over values in[] (NULL entries are not allowed) into
 * outputs: out_names[j] names the ONNX value that output j becomes, or is
 * NULL for a temporary; *out_vals[j] (when out_vals is not NULL) gets the
 * new values. When every input is known at import and every output has at
 * most VQ_ONNX_FOLD_MAX_ELEMS elements, the op runs now and its outputs
 * are known too; otherwise it is added to the program. */
int ox_emit(struct ox *x, const char *type, struct ox_val *const *in, int nin,
            const char *const *out_names, int nout, const vq_attr *attrs, int nattrs,
            struct ox_val **out_vals);
/* Makes the ONNX value name another name for v (Identity and friends);
 * a sequence's alias has the same elements, an empty optional's is one. */
int ox_alias(struct ox *x, const char *name, struct ox_val *v);
/* A new known value (takes the reference t) under name, or a temporary
 * when name is NULL. */
int ox_const(struct ox *x, const char *name, vq_tensor *t, struct ox_val **out);
/* The node's output j's name, or NULL when absent ("" or past the end). */
const char *ox_out(struct ox *x, int j);

/* Translates the nodes of g (an If's or Loop's subgraph) into program
 * block block, through x->walk. */
int ox_subgraph(struct ox *x, const Onnx__GraphProto *g, int block);
/* A new value name held by a new var of the current block, of meta m. */
int ox_block_var(struct ox *x, const char *name, const vq__meta *m, struct ox_val **out);
/* Makes sure v has a program var (a known value becomes a persistable var
 * of block 0). */
int ox_var_of(struct ox *x, struct ox_val *v);

/* A pass of a subgraph translated repeatedly (struct ox_frame): between
 * ox_frame_push and ox_frame_pop, the values made are named anew. f is
 * the caller's (zeroed); pop frees what push and the names took. */
void ox_frame_push(struct ox *x, struct ox_frame *f);
void ox_frame_pop(struct ox *x);
/* Whether v is a tensor, and if not, fails the node: input i (what: its
 * role) is a sequence or an optional holding nothing. */
int ox_tensor_in(struct ox *x, int i, const struct ox_val *v);

/* ---- what an op declares: its inputs and attributes (ox.c reads them) ---- */

enum ox_attr_type {
    OX_T_INT,
    OX_T_FLOAT,
    OX_T_STRING,
    OX_T_INTS,
    OX_T_FLOATS,
    OX_T_GRAPH,
    OX_T_TENSOR
};

/* One attribute a translation reads: its name, its type and the ONNX
 * spec's default (i, f or s). It is read in the opsets [since, until) (0:
 * no bound), those where ONNX has it; in others it reads as absent, with
 * its default. From opset changed on, the default is i2 or s2 (Softmax's
 * axis: 1, and -1 since opset 13). max: the entries a list may have, the
 * bytes a string may take with its terminator (at most OX_STR_MAX); more
 * is refused, naming the attribute. Graphs and tensors are not
 * type-checked: their translations say what they need. */
struct ox_attr_spec {
    const char *name;
    enum ox_attr_type type;
    int64_t i;
    double f;
    const char *s;
    int max;
    int since, until;
    int changed;
    int64_t i2;
    const char *s2;
};

/* Specs, optionally followed by designated fields (.until = 13, .changed
 * = 13, .i2 = -1): OX_INT("axis", 1, .changed = 13, .i2 = -1). */
#define OX_INT(n, def, ...)                                    \
    {                                                          \
        .name = (n), .type = OX_T_INT, .i = (def), __VA_ARGS__ \
    }
#define OX_FLOAT(n, def, ...)                                    \
    {                                                            \
        .name = (n), .type = OX_T_FLOAT, .f = (def), __VA_ARGS__ \
    }
#define OX_STR(n, def, size, ...)                                                \
    {                                                                            \
        .name = (n), .type = OX_T_STRING, .s = (def), .max = (size), __VA_ARGS__ \
    }
#define OX_INTS(n, most, ...)                                      \
    {                                                              \
        .name = (n), .type = OX_T_INTS, .max = (most), __VA_ARGS__ \
    }
#define OX_FLOATS(n, most, ...)                                      \
    {                                                                \
        .name = (n), .type = OX_T_FLOATS, .max = (most), __VA_ARGS__ \
    }
#define OX_GRAPH(n)                     \
    {                                   \
        .name = (n), .type = OX_T_GRAPH \
    }
#define OX_TENSOR(n)                     \
    {                                    \
        .name = (n), .type = OX_T_TENSOR \
    }
/* A row's attribute list (at most OX_MAX_ATTRS). */
#define OX_ATTRS(...) ((const struct ox_attr_spec[]){__VA_ARGS__, {0}})
#define OX_MAX_ATTRS 8
#define OX_STR_MAX 32
/* max_in of an op with any number of inputs */
#define OX_ANY (-1)

/* A row of the translate table: the translation, and what it declares. */
struct ox_op {
    int (*fn)(struct ox *x);
    /* the varq op of translations that several ONNX ops share (unary,
     * binary, ...), or NULL */
    const char *type;
    /* inputs: the first min_in must be given (an absent one fails the node
     * as missing), at most max_in (OX_ANY: any number) may be */
    int min_in, max_in;
    bool out0;                        /* output 0 must be named */
    const struct ox_attr_spec *attrs; /* OX_ATTRS(...), or NULL */
    /* the op's domain: NULL for the default one, else OX_TRAINING (no
     * other op type of either domain has the same name) */
    const char *domain;
    /* the translation takes sequences and empty optionals as inputs (the
     * Sequence and Optional ops, Identity, If, Loop); other rows are
     * given tensors only, which vq__onnx_translate checks */
    bool containers;
};

/* The values of a node's declared attributes, read and checked before its
 * translation runs (vq__onnx_translate). */
struct ox_args {
    const struct ox_op *op;
    struct ox_attr_value {
        bool given;                 /* the node has it, in an opset that reads it */
        int64_t i;                  /* OX_T_INT */
        double f;                   /* OX_T_FLOAT */
        int n;                      /* OX_T_INTS, OX_T_FLOATS: entries, -1 when absent */
        const int64_t *ints;        /* n of them (the node's) */
        const float *floats;        /* n of them (the node's) */
        const Onnx__GraphProto *g;  /* OX_T_GRAPH, NULL when absent */
        const Onnx__TensorProto *t; /* OX_T_TENSOR, NULL when absent */
        char s[OX_STR_MAX];         /* OX_T_STRING */
    } v[OX_MAX_ATTRS];
};

/* Checks x->node against op: its inputs (each present one must be a known
 * value; the first min_in present), output 0 when op->out0, and reads its
 * declared attributes into *args (type, list length, string length
 * checked). On success x->args is args. */
int ox_args_read(struct ox *x, const struct ox_op *op, struct ox_args *args);

/* The declared attributes of the node being translated, already checked:
 * its value, or its default. name must be declared in the op's row. */
int64_t ox_int(const struct ox *x, const char *name);
double ox_float(const struct ox *x, const char *name);
const char *ox_str(const struct ox *x, const char *name);
/* A list's entries (*n of them; *n = -1 and no entries when absent). */
const int64_t *ox_ints(const struct ox *x, const char *name, int *n);
const float *ox_floats(const struct ox *x, const char *name, int *n);
const Onnx__GraphProto *ox_graph(const struct ox *x, const char *name);
const Onnx__TensorProto *ox_tensor(const struct ox *x, const char *name);
/* Whether the node gives attribute name (for defaults that depend on the
 * input, such as Shape's end). */
bool ox_given(const struct ox *x, const char *name);
/* Input i of the node being translated, checked by ox_args_read: NULL when
 * absent (past the end, or ""). */
struct ox_val *ox_input(struct ox *x, int i);
/* The varq op of the translation's row (struct ox_op.type). */
const char *ox_type(const struct ox *x);

/* ---- ox.c: what several translations compose ---- */

/* Entries of the lists an op reads: a dim per axis, or two (pads). */
#define OX_MAXI (VQ_MAX_DIMS * 2)
/* Row initializers: translation, varq op (NULL: none), inputs min and
 * max, output 0 required, attributes (OX_ATTRS(...) or NULL). */
#define OX_ROW(fn, type, min_in, max_in, out0, attrs)      \
    {                                                      \
        fn, type, min_in, max_in, out0, attrs, NULL, false \
    }

/* Output 0, which the op requires. */
const char *ox_out0(struct ox *x);
/* A scalar constant of dtype dt. */
int ox_scalar(struct ox *x, vq_dtype dt, double value, struct ox_val **out);
bool ox_is_float(vq_dtype dt);
/* The first element of a known tensor, as a double. */
double ox_first_value(const vq_tensor *t);
/* An axis in [-rank, rank) as an index. */
int ox_axis(struct ox *x, const char *what, int64_t a, int rank, int *out);
/* The entries of the node's declared ints attribute name into out (*n =
 * -1 when absent; the row's spec bounds *n by out's size). */
void ox_ints_copy(const struct ox *x, const char *name, int64_t *out, int *n);
/* One known integer element, into *out. */
bool ox_known_int1(const struct ox_val *v, int64_t *out);
/* A reshape of v to shape (entries: a dim, 0 = v's dim there, -1 = the
 * rest), into name (NULL: a temporary). */
int ox_reshape(struct ox *x, struct ox_val *v, const int64_t *shape, int n, const char *name,
               struct ox_val **out);
/* A reshape of v to rank n with the known dims of want[] (-1: unknown,
 * v's dim from[i] when from[i] >= 0): each unknown dim is copied from v
 * when v has it at the same place (0), one other may be left to the count
 * (-1); with more, the target is computed at run time from v's dims. */
int ox_reshape_known(struct ox *x, struct ox_val *v, const int64_t *want, const int *from, int n,
                     const char *name, struct ox_val **out);
/* *v cast to dtype (a new value), unless it has that type. */
int ox_cast(struct ox *x, struct ox_val **v, vq_dtype dtype);
/* y = where(c, a, b) into name. */
int ox_select(struct ox *x, struct ox_val *c, struct ox_val *a, struct ox_val *b, const char *name,
              struct ox_val **out);
/* scale * X + bias into a temporary. */
int ox_affine(struct ox *x, struct ox_val *v, double scale, double bias, struct ox_val **out);
/* The axes of Squeeze / Unsqueeze / reductions: an attribute before
 * opset since (13, or 18 for the reductions but ReduceSum), input 1
 * since. */
int ox_axes(struct ox *x, int since, int64_t *axes, int *n);

/* ---- part.c: shapes partly known at import ---- */

/* The entries of v, a small integer value (0-D or 1-D, at most
 * VQ_MAX_DIMS entries, of a known length): *n of them into vals, bit i of
 * *mask set where entry i is known (all, for a known value). false when v
 * is not such a value. */
bool ox_entries(const struct ox_val *v, int64_t *vals, unsigned *mask, int *n);
/* After ox_emit added varq op type over in[] into out: the entries of out
 * known from the known entries of the inputs (for the ops shape arithmetic
 * uses: reshape, cast, gather, slice, concat, add, sub, mul, div,
 * maximum, minimum); out becomes known when all are. 0, or an error. */
int ox_part_emitted(struct ox *x, const char *type, struct ox_val *const *in, int nin,
                    struct ox_val *out, const vq_attr *attrs, int nattrs);
/* The meta of a reshape of x (NULL: not a reshape, a fill) to the value
 * of shape, as far as import knows it: a known entry is that dim (0
 * copies x's, unless allowzero), another -1. -1 when shape is not a 1-D
 * small integer value. */
int ox_shape_meta(const struct ox_val *shape, const vq__meta *x, bool allowzero, vq__meta *out);

/* ---- import.c, qdq.c: fusions of nodes at import ---- */

/* How many times name is read in g: as a node input or a graph output. A
 * graph with subgraphs (If, Loop) counts as reading every name: their
 * nodes may read it too (import.c). */
size_t ox_reads_of(const Onnx__GraphProto *g, const char *name);
/* QDQ fusion (qdq.c's head): marks in state (g->n_node zeroed entries)
 * the DequantizeLinear nodes that wait for their Conv or MatMul. */
void ox_qdq_mark(const Onnx__GraphProto *g, size_t *state);
/* Before node i of g is translated as usual: true when the fusion took it
 * (held, fused, or the fused node written; *rc its result, or an error
 * translating held nodes), false when the usual translation goes on. */
bool ox_qdq_at(struct ox *x, const Onnx__GraphProto *g, size_t i, size_t *state, int *rc);

/* ---- t_window.c: what the quantized convolutions (t_quant.c) share ---- */

/* The window of a convolution of X (*xv) by W (*wv) over 1 or 2 spatial
 * dims (3: VQ_ENOSYS), read from the node's strides, dilations, pads and
 * auto_pad as Conv reads them: both lifted to 2-D images when 1-D, and the
 * 2-D op's strides (2), dilations (2) and pads (4) into the arrays; *sd
 * the spatial rank. */
int ox_qconv_window(struct ox *x, struct ox_val **xv, struct ox_val **wv, int *sd, int64_t *strides,
                    int64_t *dil, int64_t *pads);
/* Emits 2-D window op type into the node's output 0, dropping the added
 * dim of a 1-D result (sd 1). */
int ox_window_emit(struct ox *x, const char *type, struct ox_val *const *in, int nin, int sd,
                   const vq_attr *attrs, int nattrs);

/* ---- the translate table (translate.c) ---- */

/* The rows, one per op of OX_OPS (onnx_ops.h), each beside its
 * translation: t_elementwise.c, t_window.c, t_nn.c, t_shape.c, t_index.c,
 * t_reduce.c, t_loss.c, t_control.c, t_rnn.c, t_signal.c, t_sample.c,
 * t_linalg.c, t_optim.c, t_dft.c, t_sequence.c, t_quant.c. */
#define OX_DECLARE_ROW(name) extern const struct ox_op ox_op_##name;
OX_OPS(OX_DECLARE_ROW)
#undef OX_DECLARE_ROW

/* The row of op type type of domain domain (NULL, "" or "ai.onnx": the
 * default), or NULL. */
const struct ox_op *vq__onnx_op_find(const char *domain, const char *type);

/* Translates x->node: looks up its row, checks and reads what the row
 * declares, runs its translation; VQ_ENOSYS naming the op when there is
 * none. */
int vq__onnx_translate(struct ox *x);

#endif
