/* varq op registration: how a library user adds an op of their own, which
 * then works wherever the built-in ops do — vq_op_run, programs (and their
 * save/load), vq_append_backward, the graph executor on the CPU and GPUs,
 * and the listings (vq_op_count, vq_op_signature, `varq ops`).
 *
 * An op is described once by a vq_op_def: its input and output slots, its
 * attribute schema, an inference callback, kernels (CPU, GPU, or an async
 * CPU kernel that finishes later from any thread) and an optional gradient
 * maker. varq checks every call against the slots and the schema before the
 * inference callback sees it, exactly as for its own ops; the inference
 * callback checks the inputs' dtypes and shapes, fills the outputs' and
 * parses the attributes into a small params block that the kernels get (so
 * kernels never look attributes up by name).
 *
 * A minimal op (see examples/custom_op.c for a whole one, with a gradient):
 *
 *     static int twice_infer(const vq_op_infer_call *c) {
 *         c->out[0] = c->in[0];               // same dtype and shape
 *         return 0;
 *     }
 *     static int twice_cpu(const vq_op_kernel_call *k) {
 *         const float *x = vq_tensor_data(k->in[0]);
 *         float *y = vq_tensor_data(k->out[0]);
 *         for (int64_t i = 0; i < vq_tensor_numel(k->in[0]); i++) y[i] = 2 * x[i];
 *         return 0;
 *     }
 *     static const char *const X[] = {"X"}, *const Out[] = {"Out"};
 *     vq_op_register(&(vq_op_def){.name = "twice", .inputs = X, .ninputs = 1,
 *                                 .outputs = Out, .noutputs = 1,
 *                                 .infer = twice_infer, .cpu = twice_cpu});
 */
#ifndef VARQ_OP_REGISTER_H
#define VARQ_OP_REGISTER_H

#include <varq/ops.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* dtype and shape of one input or output. In a program's preparation a dim
 * may be -1 (not known until the run); at run time every dim is known. */
typedef struct vq_op_meta {
    vq_dtype dtype;             /* the element type */
    int ndim;                   /* dimensions: 0 (a scalar) to VQ_MAX_DIMS */
    int64_t shape[VQ_MAX_DIMS]; /* the first ndim entries count */
} vq_op_meta;

/* One attribute an op accepts. dflt is the default written out for
 * listings ("0.5", "none"); varq does not apply it: an absent attribute
 * is absent from the call, and the inference callback uses its default. */
typedef struct vq_op_attr_spec {
    const char *name;  /* the attribute's name */
    vq_attr_type type; /* the type its value must have */
    bool required;     /* a call without it is VQ_EINVAL */
    const char *dflt;  /* the default, for listings only; may be NULL */
} vq_op_attr_spec;

/* The inference callback's view of one call (inputs already checked
 * against the slots: their count, dtype and rank are valid; attributes
 * against the schema: names known, types right, required ones present). */
typedef struct vq_op_infer_call {
    const char *op;        /* the op's name */
    const vq_attr *attrs;  /* the call's attributes, as given */
    int nattrs;            /* entries in attrs */
    int nin;               /* entries in in */
    const vq_op_meta *in;  /* the inputs' dtypes and shapes, in slot order */
    int nout;              /* entries in out */
    vq_op_meta *out;       /* to fill: every output's dtype, ndim and shape */
    void *params;          /* params_size zeroed bytes to fill for the kernels */
    void *user;            /* vq_op_def.user */
} vq_op_infer_call;

/* A kernel's view of one run of the op. The output tensors exist with the
 * inferred dtypes and shapes (their bytes are not initialized, except for
 * an output that is also an input: an in-place op); on a GPU their data is
 * device memory. */
typedef struct vq_op_kernel_call {
    const char *op;        /* the op's name */
    const void *params;    /* what the inference callback wrote */
    vq_tensor *const *in;  /* the input tensors, in slot order */
    int nin;               /* entries in in */
    vq_tensor *const *out; /* the output tensors to write, in slot order */
    int nout;              /* entries in out */
    vq_ctx ctx;            /* the device it runs for */
    void *stream;          /* GPU kernel: the stream to enqueue on (a cudaStream_t
                            * with CUDA); NULL for CPU kernels */
    void *user;            /* vq_op_def.user */
} vq_op_kernel_call;

/* The completion handle an async kernel gets, like the engine's vq_done. */
typedef struct vq_op_done vq_op_done;

/* A gradient maker's view of one forward op in a program: var names.
 * din[i] is the name to give the gradient of input i (NULL: not wanted);
 * dout[j] the gradient flowing into output j (NULL: none flows). */
typedef struct vq_op_grad_call {
    const char *op;          /* the forward op's type */
    const char *const *in;   /* its input vars */
    int nin;                 /* entries in in (and in din) */
    const char *const *out;  /* its output vars */
    int nout;                /* entries in out (and in dout) */
    const char *const *din;  /* the gradient names to write, per input; NULL: none */
    const char *const *dout; /* the incoming gradients, per output; NULL: none */
    const vq_attr *attrs;    /* the forward op's attributes */
    int nattrs;              /* entries in attrs */
    void *user;              /* vq_op_def.user */
    const void *impl;        /* varq's own; do not touch */
} vq_op_grad_call;

/* vq_op_def.flags */
enum {
    VQ_OP_VARIADIC_IN = 1u << 0,  /* the last input slot takes 1..N tensors */
    VQ_OP_VARIADIC_OUT = 1u << 1, /* the last output slot takes 1..N tensors */
    VQ_OP_INPLACE_OK = 1u << 2,   /* an output may be the same tensor as an input */
    VQ_OP_OPTIONAL_IN = 1u << 4,  /* the last input slot may be absent */
    VQ_OP_OPTIONAL_OUT = 1u << 5, /* the last output slot may be absent */
};

#define VQ_OP_MAX_PARAMS 256 /* vq_op_def.params_size at most */
#define VQ_OP_MAX_SLOTS 64   /* tensors per call, variadic slots included */

/* An op's definition, for vq_op_register (see the head of this file). */
typedef struct vq_op_def {
    const char *name;              /* letters, digits, '_' and '.'; not a registered name */
    const char *const *inputs;     /* input slot names, e.g. {"X", "Y"} */
    int ninputs;                   /* entries in inputs */
    const char *const *outputs;    /* output slot names; at least one */
    int noutputs;                  /* entries in outputs */
    unsigned flags;                /* VQ_OP_* */
    const vq_op_attr_spec *attrs;  /* the attribute schema */
    int nattrs;                    /* entries in attrs */
    size_t params_size;            /* bytes of params the kernels get, <= VQ_OP_MAX_PARAMS */

    /* Required. Checks the inputs (and attributes beyond their types),
     * fills every output's meta and the params. Returns 0 or a negative
     * error (VQ_EINVAL for a call that does not fit) after setting a
     * message with vq_error_set; varq puts the op's name in front. Called
     * from any thread, possibly at once for several calls. */
    int (*infer)(const vq_op_infer_call *c);

    /* Kernels: at least one. cpu runs the op on the CPU in the calling
     * worker (and is the stream work on the emulated GPU backend). gpu
     * enqueues the op on k->stream and returns (the engine's GPU workers do
     * not set the current CUDA device: multi-GPU kernels call
     * cudaSetDevice(k->ctx.id)). cpu_async starts the op on the CPU and
     * returns at once; the op is done when vq_op_done_finish(done, err) is
     * called, exactly once, from any thread: no worker waits meanwhile.
     * When both cpu and cpu_async are set, engines use cpu_async and
     * vq_op_run without an engine uses cpu. k and the tensors it points to
     * stay valid until the kernel returns (cpu_async: until
     * vq_op_done_finish). Return 0 or a negative error after vq_error_set. */
    int (*cpu)(const vq_op_kernel_call *k);
    int (*gpu)(const vq_op_kernel_call *k);
    void (*cpu_async)(const vq_op_kernel_call *k, vq_op_done *done);

    /* Optional: emits the gradient ops of one forward op with
     * vq_op_grad_emit (by op name, built-in or registered), as the
     * built-in ops do. NULL: the op has no gradient; vq_append_backward
     * treats its outputs as constants (as it does argmax's). */
    int (*grad)(const vq_op_grad_call *g);

    void *user; /* passed to every callback; owned by the caller, kept forever */
} vq_op_def;

/* Registers def. varq copies the name, slot names and attribute schema;
 * the callbacks and user must stay valid for the life of the process (an
 * op cannot be unregistered: plans may hold it).
 *
 * VQ_EINVAL with a message for a NULL or bad def: an empty or malformed
 * name, a name already registered (built-in or not), missing infer or
 * kernels, too many slots, repeated or empty slot or attribute names, an
 * unknown attribute type or flag, a variadic or optional flag without a
 * slot, params_size past VQ_OP_MAX_PARAMS.
 *
 * Thread-safety: may be called from any thread at any time, also while
 * ops run and programs execute; calls that look ops up see the op once
 * this returns. */
VQ_API int vq_op_register(const vq_op_def *def);

/* Ends an async kernel's op with 0 or a negative error (set a message with
 * vq_error_set first, in the calling thread). Call exactly once per
 * cpu_async invocation, from any thread; done is invalid after. */
VQ_API void vq_op_done_finish(vq_op_done *done, int err);

/* Appends one gradient op to the program being differentiated: op type
 * (built-in or registered), its input and output var names, attributes
 * (copied). Names of forward vars, of gradients from g->din / g->dout, or
 * fresh ones from vq_op_grad_temp. Its outputs may be only gradients the
 * maker was asked for (g->din) and temporaries: any other var (a forward
 * input or output, g->dout) is VQ_EINVAL naming the maker's op type and
 * the var, since every run would overwrite it. Returns 0 or a negative
 * error (propagate it).
 *
 * Only inside the gradient maker of g, in the thread that called it, with
 * the very pointer the maker got: any other g (kept from an earlier call,
 * a copy of the struct, another thread's) is VQ_EINVAL, and nothing is
 * read through it. */
VQ_API int vq_op_grad_emit(const vq_op_grad_call *g, const char *type, const char *const *in,
                           int nin, const char *const *out, int nout, const vq_attr *attrs,
                           int nattrs);

/* A fresh var name for an intermediate of the gradient ops, which no var
 * of the program has. The var is declared (in the block the gradient ops
 * go to) when an op emitted with vq_op_grad_emit first writes it, with the
 * dtype and shape that op infers from its inputs' declared ones (a dim
 * unknown there stays unknown until the program is prepared); an op that
 * reads it before is refused by vq_op_grad_emit, as for any undeclared
 * var. The string is varq's and valid while the gradient maker runs.
 *
 * Only inside the gradient maker of g, as vq_op_grad_emit. NULL with
 * VQ_EINVAL for any other g, with VQ_ENOMEM when out of memory
 * (vq_errmsg says which). */
VQ_API const char *vq_op_grad_temp(const vq_op_grad_call *g);

#ifdef __cplusplus
}
#endif
#endif
