/* varq ops: the registered operators (matmul, add, softmax, adam, ...) and
 * the imperative way to run them on tensors.
 *
 * Every op type is registered once with its input and output slots, its
 * attribute schema, shape and dtype inference, a kernel per device and a
 * gradient maker. vq_op_run checks a call against all of that at once, in the
 * caller's thread, and pushes the kernel onto the engine with the input
 * tensors' vars as reads and the output tensors' vars as writes: calls return
 * before the work is done and the engine keeps them in program order, like
 * MXNet's NDArray. The list of ops and their attributes is in
 * docs/reference/ops.md and in `varq ops`. */
#ifndef VARQ_OPS_H
#define VARQ_OPS_H

#include <varq/engine.h>
#include <varq/error.h>
#include <varq/tensor.h>

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The type of an attribute's value (vq_attr.type). */
typedef enum vq_attr_type {
    VQ_ATTR_INT = 1,
    VQ_ATTR_FLOAT,
    VQ_ATTR_STRING,
    VQ_ATTR_BOOL,
    VQ_ATTR_INTS,
    VQ_ATTR_FLOATS,
    VQ_ATTR_STRINGS,
    VQ_ATTR_BOOLS,
} vq_attr_type;

/* One named attribute of an op call. Which fields count depends on type:
 * i (INT, BOOL as 0/1), f (FLOAT), s (STRING), ints (INTS, BOOLS) / floats
 * (FLOATS) / strings (STRINGS) with n entries. An INT is accepted where a
 * FLOAT is expected. The caller keeps every pointer; varq copies what it
 * needs before vq_op_run returns. */
typedef struct vq_attr {
    const char *name;           /* the attribute's name in the op's schema */
    vq_attr_type type;          /* which of the fields below holds the value */
    int64_t i;                  /* INT, or BOOL as 0 or 1 */
    double f;                   /* FLOAT */
    const char *s;              /* STRING */
    const int64_t *ints;        /* INTS, or BOOLS as 0s and 1s: n entries */
    const double *floats;       /* FLOATS: n entries */
    const char *const *strings; /* STRINGS: n entries */
    int n;                      /* entries in ints, floats or strings */
} vq_attr;

/* Compound literals for one vq_attr of each type, e.g.
 * VQ_ATTR_B("transpose_x", true) or VQ_ATTR_IS("perm", perm, 2): name nm,
 * value v (an array of cnt entries for the list types). */
#define VQ_ATTR_I(nm, v) ((vq_attr){.name = (nm), .type = VQ_ATTR_INT, .i = (v)})
#define VQ_ATTR_F(nm, v) ((vq_attr){.name = (nm), .type = VQ_ATTR_FLOAT, .f = (v)})
#define VQ_ATTR_B(nm, v) ((vq_attr){.name = (nm), .type = VQ_ATTR_BOOL, .i = !!(v)})
#define VQ_ATTR_S(nm, v) ((vq_attr){.name = (nm), .type = VQ_ATTR_STRING, .s = (v)})
#define VQ_ATTR_IS(nm, v, cnt) ((vq_attr){.name = (nm), .type = VQ_ATTR_INTS, .ints = (v), .n = (cnt)})
#define VQ_ATTR_FS(nm, v, cnt) \
    ((vq_attr){.name = (nm), .type = VQ_ATTR_FLOATS, .floats = (v), .n = (cnt)})
#define VQ_ATTR_SS(nm, v, cnt) \
    ((vq_attr){.name = (nm), .type = VQ_ATTR_STRINGS, .strings = (v), .n = (cnt)})

/* The seed of the default generators of random ops (vq_op_run below,
 * vq_exec_opts.seed) when neither the caller nor VARQ_SEED gives one. */
#define VQ_DEFAULT_SEED 5489u

/* Runs op `type` on nin input tensors, producing nout outputs.
 *
 * Inputs come in the order of the op's input slots (a variadic last slot,
 * like concat's, takes the remaining tensors). Outputs likewise: out[i] ==
 * NULL asks varq to create the output with the inferred dtype and shape (the
 * caller then owns one reference to it); a tensor given in out[i] must have
 * exactly that dtype and shape, and is overwritten (it may be one of the
 * inputs: optimizers update their parameters in place this way).
 *
 * Everything checkable is checked before anything is pushed: an unknown op,
 * a wrong number of inputs or outputs, a dtype or shape that does not fit,
 * an unknown, missing or mistyped attribute are VQ_EINVAL with a message
 * naming the op and the slot or attribute; nothing is created then.
 *
 * With an engine, the kernel is pushed (ordered after earlier ops on the
 * same tensors) and vq_op_run returns at once; an error found while the
 * kernel runs (e.g. a label out of range) reaches the outputs' vars: see
 * vq_tensor_wait. With e == NULL the kernel runs now in the calling thread
 * and its error is returned; the tensors must then not be in use by ops
 * pending on an engine.
 *
 * Devices: the tensors of one call (inputs and given outputs) must all be
 * on the same device, else VQ_EINVAL naming the first slot that differs.
 * On a GPU (vq_tensor_new_on, vq_tensor_copy_to) the kernel is pushed with
 * ctx {VQ_DEV_GPU, id} and runs on that device's streams, created outputs
 * are on that device, and an engine is required (VQ_EINVAL for e == NULL).
 * On the emulated backend every op with a CPU kernel runs: its CPU kernel
 * is the stream work. On CUDA, an op without a CUDA kernel is VQ_ENOSYS
 * naming the op, before anything is pushed.
 *
 * Random numbers (uniform_random, gaussian_random, dropout): a call with
 * a seed attribute or a State input draws exactly what that fixes, every
 * time. A call with neither draws from the process's default generator:
 * the n-th such call of the process (counted when vq_op_run is called)
 * draws with a Philox key made from (seed, n) alone, where seed is
 * VARQ_SEED (decimal digits, read at the first such call; anything else
 * makes every such call VQ_EINVAL naming it) or else VQ_DEFAULT_SEED. So
 * each call draws new numbers, and a program that makes the same calls in
 * the same order draws the same numbers on every run of the process; calls
 * from several threads at once take their places in whatever order they
 * reach the counter. Such calls are not captured (include/varq/capture.h):
 * they run as plain calls. Programs run by an executor have a generator of
 * their own (vq_exec_opts.seed).
 *
 * Thread-safety: may be called from several threads and from inside ops;
 * the engine orders calls that share tensors in the order they were made. */
VQ_API int vq_op_run(vq_engine *e, const char *type, vq_tensor *const *in, int nin,
                     vq_tensor **out, int nout, const vq_attr *attrs, int nattrs);

/* The registered op types, for listings: vq_op_count() of them, indexed
 * from 0 in alphabetical order. vq_op_name returns NULL out of range. Static
 * strings; thread-safe. */
VQ_API int vq_op_count(void);
VQ_API const char *vq_op_name(int index);

/* A one-line description of op `type`: its slots and attributes, e.g.
 * "matmul(X, Y) -> Out; transpose_x:bool=0 transpose_y:bool=0". NULL for an
 * unknown op. Static string; thread-safe. */
VQ_API const char *vq_op_signature(const char *type);

/* What op `type` has besides its slots and attributes, as VQ_OP_HAS_* and
 * VQ_OP_IS_* bits, for listings (`varq ops --markdown`); VQ_EINVAL for an
 * unknown op. Which GPU kernels exist depends on the build (CUDA or not).
 * Thread-safe. */
VQ_API int vq_op_traits(const char *type);

/* vq_op_traits' bits. */
enum {
    VQ_OP_HAS_CPU = 1 << 0,       /* a CPU kernel (for registered ops: cpu or cpu_async) */
    VQ_OP_HAS_GPU = 1 << 1,       /* a GPU kernel of its own in this build (CUDA, or a
                                   * registered op's gpu); the emulated GPU backend runs
                                   * every op that has a CPU kernel */
    VQ_OP_HAS_ASYNC = 1 << 2,     /* an async CPU kernel (op_register.h's cpu_async) */
    VQ_OP_HAS_GRAD = 1 << 3,      /* a gradient maker: vq_append_backward differentiates
                                   * through the op (else it treats its outputs as
                                   * constants) */
    VQ_OP_IS_CONTROL = 1 << 4,    /* cond or while: no kernel; the graph executor runs
                                   * its blocks, and autodiff differentiates through them */
    VQ_OP_IS_REGISTERED = 1 << 5, /* added by vq_op_register, not built in */
};

#ifdef __cplusplus
}
#endif
#endif
