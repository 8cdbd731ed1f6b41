/* ONNX import: a model exported by PyTorch (torch.onnx.export) or any other
 * ONNX producer becomes a varq program that the executor runs, autodiff
 * differentiates and optimizers train.
 *
 * The model's graph inputs that are not initializers become feed vars (a
 * dim given as a name, like "batch", is -1: resolved when the program is
 * prepared with a real feed), its outputs become vars of the same names to
 * fetch, and its initializers become persistable vars whose tensors are set
 * in the scope given as params. Each node becomes one or more varq ops; a
 * node whose inputs are all known when the model is read (initializers,
 * Constant nodes, Shape of a known shape, and what is computed from them)
 * is computed then, not at run time, when each of its results has at most
 * VQ_ONNX_FOLD_MAX_ELEMS elements. A bigger result (a ConstantOfShape of
 * [2^30, 4], an Expand of a known value to a large shape) stays an op of
 * the program: its memory is taken when the program runs (where a run
 * that cannot have it fails with VQ_ENOMEM naming the op), never by the
 * import, so a model of a few bytes cannot make the import allocate
 * gigabytes. A translation that needs such a value at import (a
 * Reshape's shape, a Tile's repeats) fails with VQ_ENOSYS saying it was
 * too large to compute when the model was imported. Which ONNX ops and
 * opsets are supported, and how each maps, is listed in docs/onnx.md and
 * docs/reference/onnx-ops.md; which cases of ONNX's own backend tests pass,
 * in docs/onnx-conformance.md.
 *
 * Supported tensor types are varq's dtypes (float, double, int32, int64,
 * bool); a model using another (float16, uint8, strings) is refused with
 * VQ_ENOSYS naming the tensor and its type.
 *
 * Errors never crash and never leave anything behind: a file that is not
 * an ONNX model, a truncated or corrupted one, nodes of ops varq does not
 * translate (VQ_ENOSYS; the message lists every such op type of the model,
 * in its graph and subgraphs, with its domain when not the default one, the
 * number of its nodes and where the first is, up to 32 types and as many as
 * the message holds, then how many more), an attribute
 * value that is not supported, an input no node produces, a cycle, a shape
 * whose size overflows, subgraphs (If, Loop) nested more than 64 levels
 * deep, an external-data file that is missing or too short:
 * VQ_EINVAL, VQ_ENOSYS or VQ_EIO with a message naming the node or tensor;
 * *out is then NULL and params is left as it was.
 *
 * Built when meson finds the onnx.proto that Debian's libonnx-dev installs
 * (option onnx=auto); without it every function here returns VQ_ENOSYS
 * saying the importer was not built.
 *
 * Thread-safety: the functions share nothing; a scope may be used by other
 * threads meanwhile (its functions lock). */
#ifndef VARQ_ONNX_H
#define VARQ_ONNX_H

#include <varq/graph.h>
#include <varq/tensor.h>

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most elements a value the importer computes at import may have
 * (2^18: 1 MiB of float); see the head of this file. */
#define VQ_ONNX_FOLD_MAX_ELEMS ((int64_t)1 << 18)

/* The most elements of a tensor a translation makes at import from the
 * model's dims and values (Range's values, Trilu's mask, OneHot's
 * positions, EyeLike's identity, the indices of a stepped Slice): 2^24,
 * 128 MiB of int64. Past it the import fails with VQ_ENOSYS naming the
 * node, so a few bytes of model cannot ask the import for gigabytes. */
#define VQ_ONNX_MADE_MAX_ELEMS ((int64_t)1 << 24)

/* Imports the serialized ModelProto buf[0..len) into a new program *out,
 * which the caller frees with vq_program_free. The initializers' tensors
 * are set in params (may be NULL only when the model has none; a var of
 * the same name there is replaced). Tensors stored as external data are
 * refused here (VQ_EINVAL): use the _file variant, which finds their files
 * next to the model. buf is only read during the call. */
VQ_API int vq_program_from_onnx(vq_program **out, vq_scope *params, const void *buf, size_t len);

/* The same for the model in the file at path; external-data tensors are
 * read from files relative to the model's directory (and only from there:
 * a location with ".." or an absolute path, a symbolic link that leads out
 * of the directory, or a file that is not a regular one, such as a FIFO,
 * is VQ_EINVAL; a link to a file inside the directory is followed).
 * VQ_EIO when a file cannot be read. */
VQ_API int vq_program_from_onnx_file(vq_program **out, vq_scope *params, const char *path);

/* Values the caller will feed, offered for specialization. varq prepares
 * static shapes, so a graph input that gives a shape, axes, pads, repeats,
 * split sizes, a Dropout's training_mode or a Pad's constant must be known
 * when the model is imported (docs/onnx.md). Offered its value,
 * the importer uses it where a translation needs it known, and only
 * there: the program is then specialized on that value (as XLA compiles
 * per value of a compile-time constant argument, and TensorRT needs shape
 * tensors at build time). The input stays a feed, and a run must feed it
 * the same value; an offered input whose value no translation needs stays
 * an ordinary feed.
 *
 * Sequences and optionals: varq resolves them when the model is
 * imported (docs/onnx.md): a graph input that is a sequence of n tensors
 * becomes n feeds named NAME[0] ... NAME[n-1], n taken from the value
 * offered for it (an offer is then required); a graph output that is a
 * sequence becomes the fetches NAME[0] ... (vq_program_var_info says how
 * many: the first index it does not find). An optional input offered as
 * holding nothing (none) has no feed, one offered as holding a value is
 * that value's feed(s), one not offered is taken to hold a value; an
 * optional output that holds nothing has no var. */
typedef struct vq_onnx_value {
    const char *name; /* a graph input that is not an initializer */
    /* its value, on the CPU, of the input's dtype and rank (NULL for a
     * sequence or a none) */
    vq_tensor *tensor;
    bool sequence;           /* a sequence of nelems tensors elems[] (CPU tensors) */
    int nelems;              /* a sequence's length */
    vq_tensor *const *elems; /* its elements (only read) */
    bool none;               /* an optional input that holds nothing */
} vq_onnx_value;

/* Import options (vq_program_from_onnx_opts); all zero: none. */
typedef struct vq_onnx_opts {
    const vq_onnx_value *values; /* nvalues offers (may be NULL when 0) */
    int nvalues;                 /* entries in values (and in specialized) */
    /* NULL, or nvalues flags: set to whether the program was specialized
     * on values[i] (false ones need not be fed the same value). */
    bool *specialized;
} vq_onnx_opts;

/* vq_program_from_onnx and vq_program_from_onnx_file with options (opts
 * may be NULL: the same as those). The offered tensors are only read,
 * during the call (other threads may read them meanwhile). VQ_EINVAL,
 * naming it, for an offer whose name is not a graph input, or whose
 * tensor is not on the CPU or does not fit the input's declared dtype,
 * rank and dims. */
VQ_API int vq_program_from_onnx_opts(vq_program **out, vq_scope *params, const void *buf,
                                     size_t len, const vq_onnx_opts *opts);
VQ_API int vq_program_from_onnx_file_opts(vq_program **out, vq_scope *params, const char *path,
                                          const vq_onnx_opts *opts);

/* What an ONNX value is (vq_onnx_info, vq_onnx_data_read). */
typedef enum vq_onnx_kind {
    VQ_ONNX_TENSOR = 0,       /* a tensor */
    VQ_ONNX_SEQUENCE,         /* a sequence of tensors */
    VQ_ONNX_OPTIONAL,         /* an optional tensor */
    VQ_ONNX_OPTIONAL_SEQUENCE /* an optional sequence of tensors */
} vq_onnx_kind;

/* What a caller needs to run an imported model: the names to feed and to
 * fetch, in the model's order, and what each is (a sequence's elements
 * are fed and fetched as NAME[i]: vq_onnx_value). */
typedef struct vq_onnx_info {
    int opset;                  /* version of the default ("ai.onnx") operator set; 0 when the
                     * model imports only ai.onnx.preview.training */
    int ninputs;                /* graph inputs that are not initializers: the feeds */
    char **inputs;              /* their names, ninputs of them */
    int noutputs;               /* graph outputs: the fetches */
    char **outputs;             /* their names, noutputs of them */
    vq_onnx_kind *input_kinds;  /* what each input is, ninputs of them */
    vq_onnx_kind *output_kinds; /* what each output is, noutputs of them */
} vq_onnx_info;

/* Reads the feeds and fetches of the model buf[0..len) into *out (its
 * arrays owned by *out: free them with vq_onnx_info_free). Checks only
 * that the model decodes and has a graph. */
VQ_API int vq_onnx_info_read(vq_onnx_info *out, const void *buf, size_t len);

/* Frees what vq_onnx_info_read put in info (not info itself) and zeroes
 * it. NULL is ignored. */
VQ_API void vq_onnx_info_free(vq_onnx_info *info);

/* The ONNX op types the importer translates, in alphabetical order: the
 * i-th (from 0), or NULL past the end (or when not built). Static
 * strings. Which cases of each pass ONNX's backend tests is in
 * docs/onnx-conformance.md. */
VQ_API const char *vq_onnx_op_name(int i);

/* The domain of vq_onnx_op_name(i): "" for the default (ai.onnx), else
 * "ai.onnx.preview.training" (Adagrad, Adam and Momentum, its opset 1);
 * NULL past the end (or when not built). Static strings; thread-safe. */
VQ_API const char *vq_onnx_op_domain(int i);

/* One op type a model uses (vq_onnx_ops_read). */
typedef struct vq_onnx_op_use {
    char *domain;   /* its domain; "" for ONNX's default (written "" or "ai.onnx") */
    char *type;     /* the op type, as the model writes it */
    int64_t count;  /* its nodes, in the graph and every subgraph */
    bool supported; /* whether the importer translates it (vq_onnx_op_name lists it) */
    /* where its first node is (in the order of the graph, each node
     * followed by its subgraphs), as messages say it: 'node 4 "name"', or
     * 'node 4 (output "y")' for a node without a name, then the graphs
     * around it, as in 'node 0 "n" in body of node 2 (Loop "loop")'; names
     * cut at 48 bytes, control characters printed as '?' */
    char *first;
} vq_onnx_op_use;

/* The op types a model uses (vq_onnx_ops_read). */
typedef struct vq_onnx_ops {
    int nops;            /* distinct op types */
    vq_onnx_op_use *ops; /* nops of them, by domain and then type (strcmp order) */
} vq_onnx_ops;

/* Reads which op types the model buf[0..len) uses, in its graph and in
 * every subgraph (If, Loop, Scan or any node's graph attributes), into *out:
 * each with its count, where its first node is and whether the importer
 * translates it (what `varq onnx-ops MODEL.onnx` prints). The arrays and
 * strings are owned by *out: free them with vq_onnx_ops_free. Checks only
 * that the model decodes, has a graph and gives each node an op type
 * (VQ_EINVAL otherwise, *out then empty); it does not check opsets or
 * types, which the import does. buf is only read during the call.
 * Thread-safe: it shares nothing. */
VQ_API int vq_onnx_ops_read(vq_onnx_ops *out, const void *buf, size_t len);

/* Frees what vq_onnx_ops_read put in ops (not ops itself) and zeroes it.
 * NULL is ignored. */
VQ_API void vq_onnx_ops_free(vq_onnx_ops *ops);

/* Decodes a serialized ONNX TensorProto (the input_0.pb / output_0.pb
 * files of ONNX's test cases) into a new CPU tensor *out that the caller
 * releases. If name is not NULL, *name gets the tensor's name (malloc'd,
 * "" when it has none; the caller frees it). Raw and typed data are both
 * read; external data is VQ_EINVAL. */
VQ_API int vq_tensor_from_onnx(vq_tensor **out, char **name, const void *buf, size_t len);

/* A value of ONNX's test data (vq_onnx_data_read). */
typedef struct vq_onnx_data {
    vq_tensor *tensor; /* a tensor (or an optional's), else NULL */
    bool sequence;     /* a sequence (or an optional's): nelems elems */
    int nelems;        /* a sequence's length */
    vq_tensor **elems; /* its elements (owned: vq_onnx_data_free) */
    bool none;         /* an optional that holds nothing */
} vq_onnx_data;

/* Decodes buf[0..len), a serialized TensorProto (kind VQ_ONNX_TENSOR),
 * SequenceProto of tensors (VQ_ONNX_SEQUENCE) or OptionalProto of a
 * tensor or such a sequence (the optional kinds), as ONNX's test cases
 * store a graph input or output of that kind, into *out: new CPU tensors
 * the caller frees with vq_onnx_data_free. VQ_EINVAL for bytes that do
 * not decode, VQ_ENOSYS for an element type varq does not have or a
 * sequence of something other than tensors. buf is only read. */
VQ_API int vq_onnx_data_read(vq_onnx_data *out, vq_onnx_kind kind, const void *buf, size_t len);

/* Releases what vq_onnx_data_read put in d (not d itself) and zeroes it.
 * NULL is ignored. */
VQ_API void vq_onnx_data_free(vq_onnx_data *d);

#ifdef __cplusplus
}
#endif

#endif
