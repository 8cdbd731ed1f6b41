/* The op runtime's surface (ops/), for the layers above it (graph/,
 * capture/, onnx/): an op's definition (slots, attribute schema,
 * inference, kernels per device, gradient maker) as the registry holds
 * it, finding one, checking and inferring a call, running its kernel on a
 * device, the default generator's keys and the executor's NaN check.
 * What kernel files share among themselves (the op tables, the helpers of
 * inference and gradient makers, GEMM, windows, reductions) stays in
 * ops/ops_internal.h.
 *
 * How an op call flows: the registry (registry.c) finds the definition,
 * checks the attributes against its schema, and calls infer() with the
 * inputs' dtypes and shapes (vq__meta); infer checks them, fills the output
 * metas and the op's params (a small struct of parsed attributes, so kernels
 * never look attributes up by name). The kernel then gets tensors and those
 * params. The graph layer runs infer once per op when it prepares a plan,
 * with -1 for dims it does not know yet, and again with real shapes when it
 * runs; imperative calls run it on every call. */
#ifndef VARQ_OPS_SERVICES_H
#define VARQ_OPS_SERVICES_H

#include <varq/op_register.h>
#include <varq/ops.h>
#include <varq/tensor.h>

#include "../rng_shared.h"   /* vq__philox, vq__rng_fold: every random op's generator */
#include "engine_services.h" /* vq__fail, vq__malloc & co., the GPU op's stream */
#include "tensor_services.h" /* the tensor object, allocators, GPU memory */

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- op definitions (registry.c) ---- */

#define VQ__MAX_SLOTS 64 /* tensors per op call, variadic slots included */

/* dtype and shape of a slot; -1 dims are unknown (graph preparation).
 * Registered ops' callbacks see the same struct under its public name. */
typedef vq_op_meta vq__meta;

typedef struct vq__attr_spec {
    const char *name;
    vq_attr_type type;
    bool required;
    const char *dflt; /* the default, for vq_op_signature (e.g. "0", "-1") */
} vq__attr_spec;

struct vq__op_def;

typedef struct vq__infer {
    const struct vq__op_def *def;
    const vq_attr *attrs;
    int nattrs;
    int nin;
    const vq__meta *in;
    int nout;
    vq__meta *out; /* to fill */
    void *params;  /* def->params_size zeroed bytes to fill */
    /* The values of the input slots the op reads during inference
     * (vq__op_def.value_in), as host tensors; NULL, or a NULL entry, when
     * not known yet: at preparation, where inference leaves the dims they
     * decide unknown (-1), to be inferred again when the op runs. */
    vq_tensor *const *val;
} vq__infer;

typedef struct vq__kcall {
    const struct vq__op_def *def;
    const void *params;
    vq_tensor *const *in;
    int nin;
    vq_tensor *const *out;
    int nout;
    const vq_exec_ctx *x; /* NULL when run outside an engine */
    /* How a GPU kernel reports an error it finds only on the device (an
     * integer division by zero, a label out of range), from stream work:
     * defer(defer_user, defer_tag, err, message) when defer is set (the
     * graph executor: the run fails, the stream stays usable); when NULL,
     * the stream work returns the error, which becomes the stream's sticky
     * error (imperative calls: it reaches the outputs' vars). */
    void (*defer)(void *user, void *tag, int err, const char *msg);
    void *defer_user, *defer_tag;
    /* A random op's (VQ__RANDOM) Philox key when the call gives it neither
     * a State input nor a seed attribute: this execution's, from the
     * caller's default generator (the graph executor's, vq__rng_next for
     * imperative calls). Unread by other ops, and by random ops whose
     * numbers the call fixes. */
    uint64_t rng;
} vq__kcall;

/* A gradient maker's view of one forward op in a program: var names.
 * din[i] is the name to give the gradient of input i, or NULL if that one
 * is not wanted; dout[j] the name of the gradient flowing into output j
 * (NULL: none flows). The maker calls emit once per gradient op it needs;
 * temp() hands out fresh names for intermediate vars. */
typedef struct vq__grad {
    const struct vq__op_def *def;
    const char *const *in;
    int nin;
    const char *const *out;
    int nout;
    const char *const *din;
    const char *const *dout;
    const vq_attr *attrs;
    int nattrs;
    int (*emit)(void *user, const char *type, const char *const *in, int nin,
                const char *const *out, int nout, const vq_attr *attrs, int nattrs);
    const char *(*temp)(void *user);
    void *user;
} vq__grad;

enum {
    VQ__VARIADIC_IN = 1u << 0,  /* the last input slot takes 1..N tensors */
    VQ__VARIADIC_OUT = 1u << 1, /* the last output slot takes 1..N tensors */
    VQ__INPLACE_OK = 1u << 2,   /* an output may be the same tensor as an input */
    VQ__CONTROL = 1u << 3,      /* cond / while: no kernel; the graph executor runs its
                                * blocks (graph/control.c) */
    VQ__OPTIONAL_IN = 1u << 4,  /* the last input slot may be absent (0 or 1 tensors) */
    VQ__OPTIONAL_OUT = 1u << 5, /* the last output slot may be absent (0 or 1 tensors) */
};

/* A flag too: the op draws random numbers. Its params begin with a
 * vq__rng_params (params.h), and unless that says the call fixes its
 * numbers, the kernel's key is vq__kcall.rng, which the caller sets
 * (ops/cpu/init.c's file head). */
enum { VQ__RANDOM = 1u << 6 };

/* A flag too: the CPU kernel reads only its inputs' dtypes and shapes,
 * never their data (shape): the graph computes its small outputs when it
 * prepares a plan whose shapes it knows, from tensor headers without data. */
enum { VQ__META_ONLY = 1u << 7 };

/* A flag too: the op takes the dtypes added after the first five (f16,
 * bf16, i8, u8, i16, u16, u32, u64; VQ__BASE_DTYPES are the five), its
 * inference checking which (vq__check_dtype). Without it vq__op_infer
 * refuses them before the op's own inference runs (VQ_ENOSYS naming the
 * op, the slot and the dtype), so a kernel written for the first five
 * never meets one it would misread. */
enum { VQ__EXT_DTYPES = 1u << 8 };

/* A flag too: the op's CUDA kernel takes the added dtypes (cast); the
 * CUDA dispatcher refuses them for every other op (VQ_ENOSYS naming op
 * and dtype), whose kernels know the first five only. */
enum { VQ__CUDA_EXT_DTYPES = 1u << 9 };
#define VQ__BASE_DTYPES \
    ((1u << VQ_F32) | (1u << VQ_F64) | (1u << VQ_I32) | (1u << VQ_I64) | (1u << VQ_BOOL))

#define VQ__NDEV 2 /* kernel table index: VQ_DEV_CPU, VQ_DEV_GPU */

struct vq__cuda_launch; /* ops/cuda/cuda_internal.h */

typedef struct vq__op_def {
    const char *type;
    const char *const *in_slots;
    int nin_slots;
    const char *const *out_slots;
    int nout_slots;
    unsigned flags;
    const vq__attr_spec *attrs;
    int nattrs;
    int code;           /* free for the kernel file: e.g. which elementwise op */
    size_t params_size; /* <= VQ__MAX_PARAMS */
    int (*infer)(vq__infer *c);
    int (*kernel[VQ__NDEV])(const vq__kcall *k);
    /* NULL: the op has no gradient (asking for one is an error naming it);
     * ops without inputs and the gradient ops themselves. */
    int (*grad)(const vq__grad *g);
    /* Registered ops only (ops/user.c): an async CPU kernel, which engines
     * prefer to kernel[VQ_DEV_CPU]. It starts the op and returns; the op
     * ends with vq_op_done_finish(done, err) from any thread. k's arrays
     * and params stay valid until then, k itself only during the call. */
    void (*kernel_async)(const vq__kcall *k, vq_op_done *done);
    const struct vq__user_op *user; /* registered ops: their copied definition */
    /* Built-in ops on the CUDA backend: the op's launches
     * (ops/cuda/<family>_host.c), which kernel[VQ_DEV_GPU], the dispatcher
     * vq__cuda_run, calls after the launch prologue. Named by the
     * definition itself (VQ__CUDA_OP, ops/cuda/cuda_ops.h), so the table of
     * definitions is the one kernel table; NULL in a build without CUDA
     * and for ops without CUDA kernels. */
    int (*cuda)(const vq__kcall *k, const struct vq__cuda_launch *l);
    /* Bit i set: inference reads the value of input slot i (a shape, a
     * range's bounds), not only its dtype and shape, so the shapes of the
     * outputs depend on data. Callers pass those values (vq__infer.val):
     * the executor when the op runs (the tensor of a GPU input copied to
     * the host), vq_op_run after waiting for them. Such an op's output
     * shapes are never fixed at preparation. */
    unsigned value_in;
    /* Ops the registry widens (ops/widen.c): the op's own inference and
     * CPU kernel, which see the added dtypes' wide forms (f16 and bf16 as
     * f32, the narrow integers as i64) while infer and kernel[VQ_DEV_CPU]
     * are widen.c's, converting around them. NULL for the others. */
    int (*wide_infer)(vq__infer *c);
    int (*wide_kernel)(const vq__kcall *k);
    /* widen.c's class of the op (its enum): which wide form each dtype
     * takes (0: the integers as i64, u64 refused). */
    int wide_class;
} vq__op_def;

/* Makes def, a copy in the registry's table, take the added dtypes by
 * widening when its type is on widen.c's list (the elementwise ops, the
 * reductions, matmul, convolution and pooling, the ops that move
 * elements): sets VQ__EXT_DTYPES and the wide_* fields. */
void vq__widen_pick(vq__op_def *def);

/* The completion handle an async kernel gets: each caller embeds one in
 * its state and says what finishing does (vq_op_done_finish calls it). */
struct vq_op_done {
    void (*finish)(vq_op_done *d, int err);
};

#define VQ__MAX_PARAMS 256

/* ---- the registry (registry.c) ---- */

/* The definition of type, or NULL. Thread-safe (lock-free; see
 * registry.c's table). */
const vq__op_def *vq__op_find(const char *type);

/* The op can run on the CPU: it has a CPU or an async kernel. Else
 * VQ_ENOSYS naming it. */
int vq__cpu_kernel_check(const vq__op_def *def);

/* The refusal VQ__EXT_DTYPES describes, for a call's inputs (in, nin)
 * and, after inference, its outputs (out, nout; NULL before): 0 when the
 * op takes them. Registered ops check their own dtypes. */
int vq__dtype_gate(const vq__op_def *def, int nin, const vq__meta *in, int nout,
                   const vq__meta *out);

/* Checks attrs against def's schema and calls def->infer: the whole static
 * check of one call. Errors name the op and the slot or attribute. */
int vq__op_infer(const vq__op_def *def, const vq_attr *attrs, int nattrs, int nin,
                 const vq__meta *in, int nout, vq__meta *out, void *params);

/* Whether a call of def with nin inputs gives an input whose value its
 * inference reads (def->value_in): a fill_constant given its shape as an
 * attribute reads none. */
static inline bool vq__reads_values(const vq__op_def *def, int nin)
{
    return nin > 0 && (def->value_in & ((nin >= 32 ? 0u : 1u << nin) - 1u)) != 0;
}

/* vq__op_infer with the values of the inputs inference reads (val[i] for
 * slot i in def->value_in; NULL, or NULL entries, when unknown). */
int vq__op_infer_vals(const vq__op_def *def, const vq_attr *attrs, int nattrs, int nin,
                      const vq__meta *in, vq_tensor *const *val, int nout, vq__meta *out,
                      void *params);

/* The host copies of a call's value inputs (def->value_in) among in[]:
 * host[i] = in[i] for a CPU tensor, a new host copy for a GPU one, NULL
 * for the slots inference does not read. stream: the GPU op's stream,
 * which the copy joins and waits for (vq__tensor_read_on); NULL: a
 * synchronous copy (vq__tensor_copy_sync: the caller has waited for the
 * tensor's writer). vq__values_release drops the copies. */
int vq__values_host(const vq__op_def *def, vq_tensor *const *in, int nin, void *stream,
                    vq_tensor **host);
void vq__values_release(const vq__op_def *def, vq_tensor *const *in, int nin, vq_tensor **host);

/* Checks attrs against def's schema (names known and unique, types fit,
 * required ones present, lists and strings well formed): VQ_EINVAL naming
 * the op and attribute. The graph layer's check of a program's ops. */
int vq__attrs_check(const vq__op_def *def, const vq_attr *attrs, int nattrs);

/* The whole check of one vq_op_run call, as vq_op_run makes it before
 * pushing: the op type, the counts, NULL arrays and inputs, the devices
 * (and that the op has a kernel there), the attributes, inference and the
 * given outputs. On success *def, the output metas om (nout), the params
 * and *dev are filled. The same errors and messages as vq_op_run. */
int vq__op_call_check(vq_engine *e, const char *type, vq_tensor *const *in, int nin,
                      vq_tensor **out, int nout, const vq_attr *attrs, int nattrs,
                      const struct vq__op_def **def, vq_op_meta *om, void *params, vq_ctx *dev);

/* Puts "<type>: input|output <n>" before the current message, for the
 * tensor at index i of a call's inputs then outputs (nin inputs), as
 * vq_op_run names a slot whose tensor failed; returns err. */
int vq__call_slot_fail(int err, const char *type, int i, int nin);

/* Expected input / output counts for a call: VQ_EINVAL (message naming the
 * op) if nin or nout is not allowed. */
int vq__op_check_arity(const vq__op_def *def, int nin, int nout);

/* Name of input slot i (the variadic slot repeats) / output slot i. */
const char *vq__op_in_slot(const vq__op_def *def, int i);
const char *vq__op_out_slot(const vq__op_def *def, int i);

/* VQ_EINVAL with "op: input X (slot 0): <formatted>". */
int vq__in_fail(const vq__infer *c, int slot, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* VQ_EINVAL with "op: attribute name: <formatted>". */
int vq__attr_fail(const vq__infer *c, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* VQ_EINVAL with "op: <formatted>". */
int vq__op_fail(const vq__op_def *def, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The failure note (engine_services.h) of a kernel of def that has just
 * failed, its message in vq_errmsg() ("<type>: what", as vq__op_fail and
 * vq_error_set in a registered op write it): "op '<type>' (what)". The
 * call sets it on its outputs' vars, whence it reaches the tensors of the
 * ops the failure skips; eager calls and capture's replays make the same
 * text. NULL when out of memory. Thread-safe. */
struct vq__fail_note *vq__kernel_fail_note(const vq__op_def *def);

/* Dims are equal, or one is unknown (-1). */
static inline bool vq__dim_match(int64_t a, int64_t b)
{
    return a == b || a < 0 || b < 0;
}

/* ---- the default generator (registry.c) ---- */

/* Whether a call of def with these params (inferred) draws from its
 * caller's default generator: a random op (VQ__RANDOM) given neither a
 * seed attribute nor a State input (params.h's vq__rng_params). Then the
 * caller sets vq__kcall.rng. */
bool vq__draws_default(const vq__op_def *def, const void *params);

/* VARQ_SEED, the default seed of executors and imperative calls: 1 with
 * *seed set when it is set, 0 when it is not, VQ_EINVAL naming it and
 * its value (who: the call, in front) when it is anything but decimal
 * digits that fit 64 bits. Reads the environment each time. */
int vq__env_seed(const char *who, uint64_t *seed);

/* The key of the next imperative call drawing from the process's default
 * generator: vq__rng_fold(seed, n) for the n-th such call of the process
 * (n from 0, one atomic counter; seed: VARQ_SEED as the first call found
 * it, else VQ_DEFAULT_SEED). VQ_EINVAL (who in front) when VARQ_SEED was
 * bad at that first call. Thread-safe; the numbers then follow the order
 * in which threads take their keys. */
int vq__rng_next(const char *who, uint64_t *key);

/* ---- running a kernel (registry.c, gpu.c) ---- */

/* Runs def's kernel for device dev (on a GPU: vq__gpu_kernel_of's).
 * Returns its result; on failure the message is in vq_errmsg() and names
 * the op. */
int vq__kernel_run(const vq__kcall *k, vq_ctx dev);

/* (gpu.c) The kernel def runs on GPUs with the current backend: on the
 * emulated one vq__gpu_host_kernel (its CPU kernel as stream work); on
 * CUDA def->kernel[VQ_DEV_GPU] (vq__gpu_kernel_pick's choice for built-in
 * ops, a registered op's own). VQ_ENOSYS naming the op when there is none,
 * or the backend's error when there is no GPU backend. Thread-safe. */
int vq__gpu_kernel_of(const vq__op_def *def, int (**fn)(const vq__kcall *k));

/* 0 when def can run on GPUs with the current backend (vq__gpu_kernel_of
 * finds a kernel); else its error. */
int vq__gpu_kernel_check(const vq__op_def *def);

/* ---- the executor's NaN check (VQ_EXEC_CHECK_NAN; gpu.c) ---- */

/* The index of the first NaN or infinity in t's elements (host memory),
 * its value in *v; -1 when there is none or t is not f32/f64. */
int64_t vq__first_nonfinite(const vq_tensor *t, double *v);

/* The check's error: VQ_EIO, "output SLOT var VAR holds NaN (+inf, -inf)
 * at element I (VQ_EXEC_CHECK_NAN)". */
int vq__nonfinite_fail(const char *slot, const char *var, double v, int64_t i);

/* Enqueues, after the GPU call k's kernels on its stream, the check of its
 * output j (an f32 or f64 tensor): when a NaN or infinity is there, the
 * error above (var names the output's var; it must outlive the stream
 * work) reaches k's defer hook, which k must have. On the emulated backend
 * a host function scans the tensor; on CUDA a kernel finds the first such
 * element and a host function reads what it found. Returns 0 or the error
 * of enqueueing (nothing enqueued then). */
int vq__gpu_check_finite(const vq__kcall *k, int j, const char *var);

#endif
