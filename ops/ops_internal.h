/* Private structures of the ops module, shared by its kernel files: the
 * op tables, the helpers of inference and gradient makers, sliding
 * windows, reductions, GEMM, kernel scratch. The op definition and what
 * the layers above use of the registry are the surface
 * (ops/surface/ops_services.h); tensors, allocators and GPU memory are
 * the tensor runtime's (tensor/surface/tensor_services.h). */
#ifndef VARQ_OPS_INTERNAL_H
#define VARQ_OPS_INTERNAL_H

#include "ops_services.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- op definitions (registry.c) ---- */

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
extern const vq__op_def vq__ops_fused[];
extern const vq__op_def vq__ops_conv3d[];
extern const vq__op_def vq__ops_pool[];
extern const vq__op_def vq__ops_norm[];
extern const vq__op_def vq__ops_index[];
extern const vq__op_def vq__ops_extremum[];
extern const vq__op_def vq__ops_layout[];
extern const vq__op_def vq__ops_resize[];
extern const vq__op_def vq__ops_cumsum[];
extern const vq__op_def vq__ops_tfidf[];
extern const vq__op_def vq__ops_shape_value[];
extern const vq__op_def vq__ops_prod[];
extern const vq__op_def vq__ops_scatter[];
extern const vq__op_def vq__ops_lrn[];
extern const vq__op_def vq__ops_sequence[];
extern const vq__op_def vq__ops_sample[];
extern const vq__op_def vq__ops_einsum[];
extern const vq__op_def vq__ops_det[];
extern const vq__op_def vq__ops_unpool[];
extern const vq__op_def vq__ops_dft[];
extern const vq__op_def vq__ops_dynamic[];
extern const vq__op_def vq__ops_rnn[];
extern const vq__op_def vq__ops_quant[];
extern const vq__op_def vq__ops_qproduct[];

/* Adds a registered op's definition to the table (registry.c): VQ_EINVAL
 * when its type is taken. d must live for the rest of the process.
 * Thread-safe. */
int vq__op_table_add(const vq__op_def *d);

/* (user.c) Runs k's async kernel and waits for its vq_op_done_finish: for
 * calls outside any engine (vq_op_run with e == NULL). Returns its error,
 * with the finishing thread's message. */
int vq__kernel_run_waiting(const vq__kcall *k);

/* ---- helpers for infer functions (registry.c) ---- */

/* Attribute lookup after schema checks: the attribute, or NULL if absent. */
const vq_attr *vq__attr_find(const vq__infer *c, const char *name);
int64_t vq__attr_int(const vq__infer *c, const char *name, int64_t dflt);
double vq__attr_float(const vq__infer *c, const char *name, double dflt);
bool vq__attr_bool(const vq__infer *c, const char *name, bool dflt);
/* A dtype attribute given as a name ("f32", "float32", ...). */
int vq__attr_dtype(const vq__infer *c, const char *name, vq_dtype dflt, vq_dtype *out);

/* An int list an op takes either from attribute attr or, when the call
 * has input slot (a 1-D i64 or i32 tensor in def->value_in), from that
 * input's value: its entries into out (at most max), *n of them; 0. Both
 * given, neither, or an input of another type or rank: VQ_EINVAL naming
 * them. 1 when the input's value is not known (preparation): *n is then
 * its length, -1 when that is unknown too, and out is not set. */
int vq__ints_arg(const vq__infer *c, int slot, const char *attr, int64_t *out, int max, int *n);

/* n elements of src (dtype sdt) converted to ddt into dst, by cast's
 * rules (ops/cpu/shape.c's head). (shape.c) */
void vq__cast_any(vq_dtype sdt, const void *src, vq_dtype ddt, void *dst, int64_t n);

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

struct vq__unary_params;

/* o[i] = the activation p (relu, sigmoid, tanh, silu, hard_sigmoid,
 * hard_swish; VQ__ACT_*) of x[i] for i < n, f32 or f64, with the bits the
 * op's own kernel gives (activation.c); x == o is allowed. The fused
 * forms (conv2d's act, fused_elementwise) call it so that fusing changes
 * no result. Thread-safe. */
void vq__act_apply(const struct vq__unary_params *p, vq_dtype dt, const void *x, void *o,
                   int64_t n);
/* o[i] = the math op (VQ__MATH_*; exponent: power's) of x[i], f32 or f64,
 * as the op's kernel computes it (math.c); x == o allowed. Thread-safe. */
void vq__math_apply(int op, double exponent, vq_dtype dt, const void *x, void *o, int64_t n);

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

/* (cpu/conv_grad.c) The gradient maker of conv_transpose2d and conv_transpose3d
 * (conv: "conv2d" or "conv3d", the forward convolution of the same rank;
 * rank: X's, 4 or 5): dX = conv(dOut, W), dW = <conv>_grad(dOut, W, X;
 * wrt 1), both with the op's attributes but output_padding, and the
 * bias's gradient dOut summed over every dim but the channels. */
int vq__conv_transpose_grad(const vq__grad *g, const char *conv, int rank);

/* (cpu/matmul.c) Row-major C[m,n] = alpha * op(A) op(B) + beta * C on
 * the calling thread: f32 on varq's own kernel where it runs
 * (math/sgemm.h), else on OpenBLAS's gemm with one BLAS thread; beta 0 or
 * 1, sizes up to INT_MAX (the caller checks); empty products write beta *
 * C (zeros for beta 0) and never reach OpenBLAS. */
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

/* (cpu/sequence.c) Fails k's op unless every element of idx (i32 or i64)
 * lies in [lo, hi): "<what> <v> at <slot> element <j> is outside [lo,
 * hi)", naming the first that does not (the CUDA side's range check,
 * ops/cuda/checks.c, words it alike). */
int vq__range_check(const vq__kcall *k, const vq_tensor *idx, int64_t lo, int64_t hi,
                    const char *what, const char *slot);

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

/* ---- running a kernel (registry.c) ---- */

/* (gpu.c) Picks the CUDA kernel of the built-in op def, once, when the
 * registry is built (registry.c, on its own copy of def): when def's GPU
 * slot is empty and def names its launches (def->cuda), the GPU slot
 * becomes the dispatcher vq__cuda_run. Nothing in a build without CUDA. */
void vq__gpu_kernel_pick(vq__op_def *def);

/* (gpu.c) Runs def's CPU kernel as stream work of the GPU op k->x (the
 * emulated backend's kernel for every op): k is copied into a heap block
 * that the stream work frees. VQ_ENOSYS naming the op on a backend that is
 * not the emulated one. */
int vq__gpu_host_kernel(const vq__kcall *k);

#endif
