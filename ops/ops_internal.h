/* Private structures of the ops module: the op definition every kernel
 * file registers (slots, attribute schema, inference, kernels per device,
 * gradient maker), the registry and the helpers kernels share. Tensors,
 * allocators and GPU memory are the tensor runtime's (tensor/).
 *
 * How an op call flows: the registry (registry.c) finds the definition,
 * checks the attributes against its schema, and calls infer() with the
 * inputs' dtypes and shapes (vq__meta); infer checks them, fills the output
 * metas and the op's params (a small struct of parsed attributes, so kernels
 * never look attributes up by name). The kernel then gets tensors and those
 * params. The graph layer runs infer once per op when it prepares a plan,
 * with -1 for dims it does not know yet, and again with real shapes when it
 * runs; imperative calls run it on every call. */
#ifndef VARQ_OPS_INTERNAL_H
#define VARQ_OPS_INTERNAL_H

#include <varq/op_register.h>
#include <varq/ops.h>
#include <varq/tensor.h>

#include "../engine/engine_services.h" /* vq__fail, vq__malloc & co., the GPU op's stream */
#include "../tensor/tensor_internal.h" /* the tensor object, allocators, GPU memory */
#include "rng_shared.h" /* vq__philox: every random op's generator, CPU and CUDA alike */

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
    vq__meta *out;   /* to fill */
    void *params;    /* def->params_size zeroed bytes to fill */
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

/* The address elems elements of es bytes past base (a kernel's view of an
 * image, a group or a batch entry inside a tensor's bytes). */
static inline char *vq__elem_at(const void *base, int64_t elems, size_t es)
{
    return (char *)base + (size_t)elems * es;
}

/* A CPU scratch tensor of n elements of dt for kernel call k (*out stays
 * NULL for n == 0), released with vq_tensor_release. On failure the
 * message names k's op and what the buffer is for ("im2col buffer"). */
int vq__kernel_scratch(const vq__kcall *k, vq_dtype dt, int64_t n, const char *what,
                       vq_tensor **out);

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
    VQ__VARIADIC_IN = 1u << 0, /* the last input slot takes 1..N tensors */
    VQ__VARIADIC_OUT = 1u << 1, /* the last output slot takes 1..N tensors */
    VQ__INPLACE_OK = 1u << 2,  /* an output may be the same tensor as an input */
    VQ__CONTROL = 1u << 3,     /* cond / while: no kernel; the graph executor runs its
                                * blocks (graph/control.c) */
    VQ__OPTIONAL_IN = 1u << 4,  /* the last input slot may be absent (0 or 1 tensors) */
    VQ__OPTIONAL_OUT = 1u << 5, /* the last output slot may be absent (0 or 1 tensors) */
};

/* A flag too: the op draws random numbers. Its params begin with a
 * vq__rng_params (params.h), and unless that says the call fixes its
 * numbers, the kernel's key is vq__kcall.rng, which the caller sets
 * (ops/cpu/init.c's file head). */
enum { VQ__RANDOM = 1u << 6 };

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
     * (ops/cuda/<family>_host.c),
     * which kernel[VQ_DEV_GPU], the dispatcher vq__cuda_run, calls after
     * the launch prologue. Set in the registry's copy of the op when the
     * registry is built (vq__gpu_kernel_pick); NULL in a build without
     * CUDA and for ops without CUDA kernels. */
    int (*cuda)(const vq__kcall *k, const struct vq__cuda_launch *l);
} vq__op_def;

/* The completion handle an async kernel gets: each caller embeds one in
 * its state and says what finishing does (vq_op_done_finish calls it). */
struct vq_op_done {
    void (*finish)(vq_op_done *d, int err);
};

#define VQ__MAX_PARAMS 256

/* Each kernel file defines one table, ended by an entry with type NULL. */
extern const vq__op_def vq__ops_elementwise[];
extern const vq__op_def vq__ops_activation[];
extern const vq__op_def vq__ops_math[];
extern const vq__op_def vq__ops_loss[];
extern const vq__op_def vq__ops_reduce[];
extern const vq__op_def vq__ops_shape[];
extern const vq__op_def vq__ops_matmul[];
extern const vq__op_def vq__ops_init[];
extern const vq__op_def vq__ops_optim[];
extern const vq__op_def vq__ops_compare[];
extern const vq__op_def vq__ops_control[];
extern const vq__op_def vq__ops_conv[];
extern const vq__op_def vq__ops_conv3d[];
extern const vq__op_def vq__ops_pool[];
extern const vq__op_def vq__ops_norm[];
extern const vq__op_def vq__ops_index[];
extern const vq__op_def vq__ops_extremum[];
extern const vq__op_def vq__ops_layout[];
extern const vq__op_def vq__ops_resize[];
extern const vq__op_def vq__ops_cumsum[];
extern const vq__op_def vq__ops_prod[];

/* The definition of type, or NULL. Thread-safe (lock-free; see
 * registry.c's table). */
const vq__op_def *vq__op_find(const char *type);

/* Adds a registered op's definition to the table (registry.c): VQ_EINVAL
 * when its type is taken. d must live for the rest of the process.
 * Thread-safe. */
int vq__op_table_add(const vq__op_def *d);

/* (user.c) Runs k's async kernel and waits for its vq_op_done_finish: for
 * calls outside any engine (vq_op_run with e == NULL). Returns its error,
 * with the finishing thread's message. */
int vq__kernel_run_waiting(const vq__kcall *k);

/* The op can run on the CPU: it has a CPU or an async kernel. Else
 * VQ_ENOSYS naming it. */
int vq__cpu_kernel_check(const vq__op_def *def);

/* Checks attrs against def's schema and calls def->infer: the whole static
 * check of one call. Errors name the op and the slot or attribute. */
int vq__op_infer(const vq__op_def *def, const vq_attr *attrs, int nattrs, int nin,
                 const vq__meta *in, int nout, vq__meta *out, void *params);

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

/* ---- helpers for infer functions (registry.c) ---- */

/* Attribute lookup after schema checks: the attribute, or NULL if absent. */
const vq_attr *vq__attr_find(const vq__infer *c, const char *name);
int64_t vq__attr_int(const vq__infer *c, const char *name, int64_t dflt);
double vq__attr_float(const vq__infer *c, const char *name, double dflt);
bool vq__attr_bool(const vq__infer *c, const char *name, bool dflt);
/* A dtype attribute given as a name ("f32", "float32", ...). */
int vq__attr_dtype(const vq__infer *c, const char *name, vq_dtype dflt, vq_dtype *out);

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

/* Input slot must have one of the dtypes in mask (bit 1 << dtype). */
#define VQ__FLOATS ((1u << VQ_F32) | (1u << VQ_F64))
#define VQ__NUMERIC (VQ__FLOATS | (1u << VQ_I32) | (1u << VQ_I64))
#define VQ__ANY (VQ__NUMERIC | (1u << VQ_BOOL))
int vq__check_dtype(const vq__infer *c, int slot, unsigned mask);
/* Inputs a and b must have the same dtype. */
int vq__check_same_dtype(const vq__infer *c, int a, int b);
/* Input slot must have rank ndim. */
int vq__check_rank(const vq__infer *c, int slot, int ndim);
/* Inputs a and b must have equal shapes (unknown dims match anything). */
int vq__check_same_shape(const vq__infer *c, int a, int b);

/* Input slot's shape must equal want's (unknown dims match anything):
 * otherwise "shape [..] is not <what> [..]". */
int vq__check_shape_is(const vq__infer *c, int slot, const vq__meta *want, const char *what);
/* Input slot's shape must be inputs a and b broadcast together (what names
 * that in the message): a gradient op's check that dOut is the shape of
 * the forward op's output. */
int vq__check_broadcast_is(const vq__infer *c, int slot, int a, int b, const char *what);

/* Dims are equal, or one is unknown (-1). */
static inline bool vq__dim_match(int64_t a, int64_t b)
{
    return a == b || a < 0 || b < 0;
}

/* Broadcasts the shapes of inputs a and b numpy-style into out (with -1
 * for dims that depend on unknown ones). VQ_EINVAL naming the dim. */
int vq__broadcast_shapes(const vq__infer *c, int a, int b, vq__meta *out);

/* The reductions' attributes axes (empty: every axis) and keepdim against
 * X (input 0): *mask gets bit d for each reduced dim, out the reduced shape
 * (dtype X's). VQ_EINVAL naming a bad or repeated axis. (reduce.c) */
int vq__reduce_plan(const vq__infer *c, unsigned *mask, vq__meta *out);

/* X walked against its reduction over the dims in mask (reduce.c): dims of
 * size 1 dropped, neighbours both reduced or both kept merged; then row()
 * for each innermost row of a non-empty X, in X's order: X's elements xo
 * .. xo + n - 1 and Out's oo, oo + os, ... (os 0 or 1). */
typedef struct vq__reduce_walk {
    int ndim;
    int64_t shape[VQ_MAX_DIMS];   /* X's dims after dropping 1s and merging */
    int64_t ostride[VQ_MAX_DIMS]; /* Out's stride along each, 0 where reduced */
} vq__reduce_walk;
void vq__reduce_walk_init(vq__reduce_walk *w, const vq_tensor *x, unsigned mask);
void vq__reduce_walk_rows(const vq__reduce_walk *w, void *user,
                          void (*row)(void *user, int64_t xo, int64_t oo, int64_t n, int64_t os));

/* Normalizes axis (negative counts from the end) for rank ndim. */
int vq__axis(const vq__infer *c, const char *attr, int64_t axis, int ndim, int *out);

/* ---- sliding windows: conv2d and the pools (cpu/conv.c) ---- */

struct vq__window_params;

/* Reads into p those of the attributes kernel (2 values, each in
 * [1, 2^31)), strides (2, in [1, 2^31)), pads (4: top, left, bottom,
 * right, in [0, 2^31)) and dilations (2, in [1, 2^31)) that the op's
 * schema has, with their defaults (dilations 1, 1 when it has none).
 * VQ_EINVAL naming the op, the attribute and its values. */
int vq__window_attrs(const vq__infer *c, struct vq__window_params *p);

/* Out's height and width (out[0], out[1]) for an input of h x w and a
 * window of kh x kw (p's strides, pads and dilations; ceil_mode as given):
 * -1 where they depend on an unknown (-1) dim. VQ_EINVAL naming the op,
 * the dim and the sizes when a dilated window is larger than the padded
 * input (an output dim would be <= 0). */
int vq__window_out_hw(const vq__infer *c, const struct vq__window_params *p, int64_t h, int64_t w,
                      int64_t kh, int64_t kw, bool ceil_mode, int64_t out[2]);

/* (cpu/conv.c) The gradient maker of conv_transpose2d and conv_transpose3d
 * (conv: "conv2d" or "conv3d", the forward convolution of the same rank;
 * rank: X's, 4 or 5): dX = conv(dOut, W), dW = <conv>_grad(dOut, W, X;
 * wrt 1), both with the op's attributes but output_padding, and the
 * bias's gradient dOut summed over every dim but the channels. */
int vq__conv_transpose_grad(const vq__grad *g, const char *conv, int rank);

/* (cpu/matmul.c) Row-major C[m,n] = alpha * op(A) op(B) + beta * C on
 * OpenBLAS's gemm with one BLAS thread, beta 0 or 1, sizes up to INT_MAX
 * (the caller checks); empty products write beta * C (zeros for beta 0)
 * and never reach OpenBLAS. */
void vq__gemm(vq_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
              const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c);
/* Elementwise kernels of at least 2 * VQ__PAR_ELEMS elements share the
 * call with the idle workers (vq__parallel_for), in chunks of this many
 * elements: about 30 us of work each, well above a helper op's cost, and
 * fixed, so that the chunks do not depend on who runs the op. */
#define VQ__PAR_ELEMS ((int64_t)1 << 15)

/* The same with C's rows ldc elements apart (ldc >= n): a block of columns
 * of a wider C. */
void vq__gemm_ldc(vq_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                  const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                  int64_t ldc);

/* ---- grad maker helpers (registry.c) ---- */

static inline int vq__emit(const vq__grad *g, const char *type, const char *const *in, int nin,
                           const char *const *out, int nout, const vq_attr *attrs, int nattrs)
{
    return g->emit(g->user, type, in, nin, out, nout, attrs, nattrs);
}

/* The start of a gradient maker of a one-output op: 0 when no input wants
 * a gradient (nothing to emit), 1 when some does and one flows into Out,
 * VQ_EINVAL naming the op when some does but none flows. */
int vq__grad_wanted(const vq__grad *g);

/* The gradient ops of a binary forward op (X, Y) -> Out whose gradient op
 * is grad_type(dOut, X, Y) -> dZ with attributes op (the forward op's
 * type) and wrt (0: X, 1: Y): one for each of X and Y that is wanted. */
int vq__emit_xy_grads(const vq__grad *g, const char *grad_type);

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

/* ---- running a kernel (registry.c) ---- */

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

/* (gpu.c) Picks the CUDA kernel of the built-in op def, once, when the
 * registry is built (registry.c, on its own copy of def): when def's GPU
 * slot is empty and ops/cuda/launch.c has launches for its type, def->cuda
 * becomes them and the GPU slot the dispatcher vq__cuda_run. Nothing in a
 * build without CUDA. */
void vq__gpu_kernel_pick(vq__op_def *def);

/* (gpu.c) Runs def's CPU kernel as stream work of the GPU op k->x (the
 * emulated backend's kernel for every op): k is copied into a heap block
 * that the stream work frees. VQ_ENOSYS naming the op on a backend that is
 * not the emulated one. */
int vq__gpu_host_kernel(const vq__kcall *k);

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
