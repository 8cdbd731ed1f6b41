/* The params of the ops whose kernels run on more than one device: the
 * small structs of parsed attributes that each op's infer fills (see
 * ops_internal.h) and its kernels read, and the op codes (vq__op_def.code) they
 * carry. The CPU kernels (ops/cpu) and the CUDA kernel functions
 * (ops/cuda/<family>_host.c) read the same params, so the structs live here, once;
 * each one is filled only by the infer of the file named above it. */
#ifndef VARQ_OPS_PARAMS_H
#define VARQ_OPS_PARAMS_H

#include <varq/tensor.h>

#include <stdbool.h>
#include <stdint.h>

/* ---- elementwise (ops/cpu/elementwise.c) ---- */

/* add, sub, mul, div, pow, and mod's two kinds (MOD: the sign of the
 * divisor, Python's %; FMOD: the sign of the dividend, C's fmod and %):
 * vq__op_def.code and vq__binary_params.op; also the op of
 * elementwise_grad. Equal to kernels.h's VQ__CUDA_ADD ... */
enum {
    VQ__BINARY_ADD,
    VQ__BINARY_SUB,
    VQ__BINARY_MUL,
    VQ__BINARY_DIV,
    VQ__BINARY_POW,
    VQ__BINARY_MOD,
    VQ__BINARY_FMOD,
};

typedef struct vq__binary_params {
    int op;
} vq__binary_params;

/* elementwise_grad: the derivative of op(X, Y) with respect to input wrt
 * (0: X, 1: Y). */
typedef struct vq__binary_grad_params {
    int op, wrt;
} vq__binary_grad_params;

/* scale: Out = scale * X + bias. */
typedef struct vq__scale_params {
    double scale, bias;
} vq__scale_params;

/* ---- predicates and selects (ops/cpu/compare.c) ---- */

/* Comparisons, logic, maximum and minimum: vq__op_def.code; minmax_grad's
 * op (params[0]). Equal to kernels.h's VQ__CUDA_LESS ... */
enum {
    VQ__CMP_LESS, VQ__CMP_LESS_EQUAL, VQ__CMP_GREATER, VQ__CMP_GREATER_EQUAL, VQ__CMP_EQUAL,
    VQ__CMP_NOT_EQUAL, VQ__CMP_AND, VQ__CMP_OR, VQ__CMP_MAXIMUM, VQ__CMP_MINIMUM,
};

/* minmax_grad: op (VQ__CMP_MAXIMUM or _MINIMUM) and wrt (0: X, 1: Y);
 * where_grad: wrt alone. */
typedef struct vq__select_grad_params {
    int op, wrt;
} vq__select_grad_params;

/* ---- activations (ops/cpu/activation.c) ---- */

/* relu, sigmoid, tanh, silu, hard_sigmoid, hard_swish and their _grad
 * ops: vq__op_def.code and vq__unary_params.op. Equal to kernels.h's
 * VQ__CUDA_RELU ... */
enum {
    VQ__ACT_RELU,
    VQ__ACT_SIGMOID,
    VQ__ACT_TANH,
    VQ__ACT_SILU,
    VQ__ACT_HARD_SIGMOID,
    VQ__ACT_HARD_SWISH
};

/* alpha and beta: hard_sigmoid's clamp(alpha X + beta, 0, 1) (hard_swish
 * has 1/6 and 1/2; the others ignore them). */
typedef struct vq__unary_params {
    int op;
    double alpha, beta;
} vq__unary_params;

/* softmax, softmax_grad: the axis, normalized to [0, ndim). */
typedef struct vq__softmax_params {
    int axis;
} vq__softmax_params;

/* ---- math (ops/cpu/math.c) ---- */

/* exp, log, sqrt, reciprocal, erf, power, the trigonometric and hyperbolic
 * functions and their inverses, floor, ceil, round: vq__op_def.code and
 * vq__math_params.op (also math_grad's); exponent is power's. Equal to
 * kernels.h's VQ__CUDA_EXP ... */
enum {
    VQ__MATH_EXP,
    VQ__MATH_LOG,
    VQ__MATH_SQRT,
    VQ__MATH_RECIPROCAL,
    VQ__MATH_ERF,
    VQ__MATH_POWER,
    VQ__MATH_SIN,
    VQ__MATH_COS,
    VQ__MATH_TAN,
    VQ__MATH_ASIN,
    VQ__MATH_ACOS,
    VQ__MATH_ATAN,
    VQ__MATH_SINH,
    VQ__MATH_COSH,
    VQ__MATH_ASINH,
    VQ__MATH_ACOSH,
    VQ__MATH_ATANH,
    VQ__MATH_FLOOR,
    VQ__MATH_CEIL,
    VQ__MATH_ROUND,
    VQ__MATH_COUNT
};

typedef struct vq__math_params {
    int op;
    double exponent;
} vq__math_params;

/* log_softmax and log_softmax_grad take vq__softmax_params. */

/* ---- losses (ops/cpu/loss.c) ---- */

/* square_error_grad, mse_grad: the gradient of input wrt (0: X, 1: Y). */
typedef struct vq__wrt_params {
    int wrt;
} vq__wrt_params;

/* ---- reductions (ops/cpu/reduce.c) ---- */

/* sum, mean and their _grad ops: vq__op_def.code. */
enum { VQ__REDUCE_SUM, VQ__REDUCE_MEAN };

typedef struct vq__reduce_params {
    unsigned mask; /* bit d set: X's dim d is reduced */
} vq__reduce_params;

/* ---- shape ops (ops/cpu/shape.c) ---- */

typedef struct vq__transpose_params {
    int perm[VQ_MAX_DIMS]; /* Out's dim i is X's dim perm[i] */
} vq__transpose_params;

/* concat, concat_grad. */
typedef struct vq__concat_params {
    int axis;
    int index; /* concat_grad: which input's piece */
} vq__concat_params;

/* slice, slice_grad. */
typedef struct vq__slice_params {
    int64_t start[VQ_MAX_DIMS]; /* per X dim; 0 for dims not sliced */
} vq__slice_params;

typedef struct vq__cast_params {
    vq_dtype to;
} vq__cast_params;

/* ---- matmul (ops/cpu/matmul.c) ---- */

/* matmul, matmul_grad. */
typedef struct vq__matmul_params {
    bool tx, ty;
    int wrt; /* matmul_grad: 0 (dX) or 1 (dY); matmul: unused */
    double alpha;
} vq__matmul_params;

/* ---- init (ops/cpu/init.c) ---- */

typedef struct vq__fill_params {
    double value;   /* f32, f64 */
    int64_t ivalue; /* i32, i64, bool */
} vq__fill_params;

/* The first member of every random op's params (VQ__RANDOM,
 * ops_internal.h): the seed attribute, and whether the call fixes its
 * numbers (a seed attribute or a State input); when it does not, the key
 * is the kernel call's rng (init.c's file head). */
typedef struct vq__rng_params {
    uint64_t seed;
    bool fixed;
} vq__rng_params;

/* uniform_random: a = min, b = max - min. gaussian_random: a = mean, b =
 * std. */
typedef struct vq__random_params {
    vq__rng_params rng; /* first */
    double a, b;
} vq__random_params;

/* dropout: p, scale = 1 / (1 - p) (Mask's value for a kept element, in
 * double), is_test. */
typedef struct vq__dropout_params {
    vq__rng_params rng; /* first */
    double p, scale;
    bool is_test;
} vq__dropout_params;

/* ---- optimizers (ops/cpu/optim.c) ---- */

/* sgd, momentum, adam: vq__op_def.code. */
enum { VQ__OPTIM_SGD, VQ__OPTIM_MOMENTUM, VQ__OPTIM_ADAM };

/* lr_in: the input slot of LearningRate when the call gives it (then lr
 * is unused and the rate is read from that tensor when the kernel runs),
 * or -1: the attribute learning_rate, in lr. */
typedef struct vq__optim_params {
    double lr, mu, beta1, beta2, eps;
    bool nesterov;
    int lr_in;
} vq__optim_params;

/* lr_schedule: kind (PyTorch's scheduler it follows) and its numbers,
 * checked; dtype is LearningRate's. */
enum { VQ__LR_STEP, VQ__LR_COSINE, VQ__LR_LINEAR, VQ__LR_WARMUP_COSINE };

typedef struct vq__lr_schedule_params {
    int kind;
    vq_dtype dtype;
    double base_lr, gamma, eta_min, start_factor, end_factor;
    int64_t step_size, t_max, total_iters;
} vq__lr_schedule_params;

/* The rate of schedule p at step t >= 0, in double (ops/lr_schedule.c):
 * the CPU kernel and the CUDA one (a host function, ops/cuda/) call this
 * same code, so they agree bit for bit. */
double vq__lr_schedule_value(const vq__lr_schedule_params *p, int64_t t);

/* ---- sliding windows (ops/cpu/conv.c, ops/cpu/pool.c) ---- */

/* conv2d, conv2d_grad, max_pool2d, avg_pool2d and their _grad ops: the
 * attributes, checked (ops/window_shared.h turns them and the tensors'
 * shapes into a call's geometry). */
typedef struct vq__window_params {
    int64_t kernel[2];   /* the pools' kernel (conv2d's is W's last two dims) */
    int64_t stride[2];   /* height, width */
    int64_t pad[4];      /* top, left, bottom, right */
    int64_t dilation[2]; /* 1, 1 for avg_pool2d */
    int64_t groups;      /* conv2d */
    int wrt;             /* conv2d_grad: 0 dX, 1 dW, 2 dB */
    /* conv2d, conv2d_grad: the fused clip [lo, hi] of conv2d's output
     * (attribute clip; ops/cpu/conv.c), when clip is set */
    double clip_lo, clip_hi;
    bool clip;
    /* conv2d: the fused activation after the bias and the clip (attribute
     * act and its act_alpha, act_beta: hard_sigmoid's), when has_act */
    bool has_act;
    vq__unary_params act;
    bool ceil_mode, count_include_pad; /* the pools; count_include_pad: avg_pool2d */
    bool column_major;                 /* max_pool2d_argmax: indices (w, h), not (h, w) */
} vq__window_params;

/* conv3d, conv3d_grad, conv_transpose3d (ops/cpu/conv3d.c): the
 * attributes, checked (ops/vol_shared.h turns them and the tensors' shapes
 * into a call's geometry). */
typedef struct vq__conv3d_params {
    int64_t stride[3]; /* depth, height, width */
    int64_t pad[6];    /* front, top, left, back, bottom, right */
    int64_t dilation[3];
    int64_t output_padding[3]; /* conv_transpose3d */
    int64_t groups;
    int wrt; /* conv3d_grad: 0 dX, 1 dW, 2 dB */
} vq__conv3d_params;

/* ---- batch normalization (ops/cpu/norm.c) ---- */

typedef struct vq__batch_norm_params {
    double epsilon;
    double momentum; /* batch_norm_train */
    int wrt;         /* the _grad ops: the forward input: 0 X, 1 Scale, 2 Bias, 3 Mean, 4 Var */
    /* batch_norm_train_grad: which of dOut (1), dNewMean (2), dNewVar (4)
     * its variadic last slot holds, in that order */
    int grads;
} vq__batch_norm_params;

/* ---- indexing (ops/cpu/index.c) ---- */

/* gather, gather_grad: the axis, normalized to [0, ndim). */
typedef struct vq__gather_params {
    int axis;
} vq__gather_params;

/* split, split_grad: the axis, normalized. split_grad: bit j of absent set
 * means no gradient flows into output j: dOut j is then the forward output
 * j, read for its shape only (zeros). */
typedef struct vq__split_params {
    int axis;
    uint64_t absent;
} vq__split_params;

/* ---- extrema (ops/cpu/extremum.c) ---- */

/* argmax / argmin, reduce_max / reduce_min: vq__op_def.code and the op of
 * the params below (reduce_minmax_grad's from its op attribute). Equal to
 * kernels.h's VQ__CUDA_EXTREMUM_MAX ... */
enum { VQ__EXTREMUM_MAX, VQ__EXTREMUM_MIN };

/* argmax, argmin: last is select_last_index. */
typedef struct vq__arg_params {
    int op, axis;
    bool keepdim, last;
} vq__arg_params;

/* reduce_max, reduce_min, reduce_minmax_grad. */
typedef struct vq__extremum_params {
    unsigned mask; /* bit d set: X's dim d is reduced */
    int op;
} vq__extremum_params;

/* ---- layout (ops/cpu/layout.c) ---- */

/* pad, pad_grad: begin[d] is pads[d] (negative: a crop); the end pads are
 * Out's dims minus X's minus begin. mode is a VQ__PADMODE_* of
 * ops/layout_shared.h (which the CPU and CUDA kernels share). value is the
 * constant for f32 and f64, ivalue for i32, i64 and bool. expand and tile
 * take no params: the tensors' shapes say everything their kernels need. */
typedef struct vq__pad_params {
    int64_t begin[VQ_MAX_DIMS];
    int mode;
    double value;
    int64_t ivalue;
} vq__pad_params;

/* ---- resize (ops/cpu/resize.c) ---- */

/* resize's mode, coordinate_transformation_mode and nearest_mode, in the
 * order of their names in resize.c (ops/resize_shared.h reads them). */
enum { VQ__RESIZE_NEAREST, VQ__RESIZE_LINEAR, VQ__RESIZE_CUBIC };
enum {
    VQ__RESIZE_HALF_PIXEL,
    VQ__RESIZE_PYTORCH_HALF_PIXEL,
    VQ__RESIZE_ALIGN_CORNERS,
    VQ__RESIZE_ASYMMETRIC,
    VQ__RESIZE_TF_HALF_PIXEL_FOR_NN,
    VQ__RESIZE_TF_CROP_AND_RESIZE,
};
enum {
    VQ__RESIZE_ROUND_PREFER_FLOOR,
    VQ__RESIZE_ROUND_PREFER_CEIL,
    VQ__RESIZE_FLOOR,
    VQ__RESIZE_CEIL,
};

/* resize, resize_grad: the modes above, exclude_outside, cubic_coeff_a
 * (a), extrapolation_value (value for f32 and f64, ivalue for i32, i64 and
 * bool); scale[d] the given scale of dim d, or 0 where sizes gave Out's
 * dim; roi every dim's start, then every dim's end (0 and 1 when absent). */
typedef struct vq__resize_params {
    int mode, ctm, nearest, exclude;
    double a, value;
    int64_t ivalue;
    double scale[VQ_MAX_DIMS];
    double roi[2 * VQ_MAX_DIMS];
} vq__resize_params;

/* ---- cumsum (ops/cpu/cumsum.c) ---- */

/* cumsum: the axis (normalized), exclusive and reverse. */
typedef struct vq__cumsum_params {
    int axis, exclusive, reverse;
} vq__cumsum_params;

/* ---- recurrent layers (ops/cpu/rnn.c) ---- */

enum { VQ__RNN_LSTM, VQ__RNN_GRU, VQ__RNN_TANH, VQ__RNN_RELU };

/* lstm, gru, rnn and their gradient ops: the cell (above), hidden size,
 * layers, directions (1 or 2), whether the weights include biases and
 * the call gives H0 (and C0), whether the forward call writes Reserve;
 * the gradient op's grads (bits: dY 1, dHN 2, dCN 4 among its inputs);
 * X's dims T, B and I (-1 unknown). */
typedef struct vq__rnn_params {
    int cell, hidden, layers, dirs, bias, states, reserve, grads;
    int64_t steps, batch, input;
} vq__rnn_params;

/* ---- dft (ops/cpu/dft.c) ---- */

/* dft: the signal's axis (normalized, never the last), inverse, onesided,
 * and the transform's length n (the axis' size unless attribute length
 * says otherwise). */
typedef struct vq__dft_params {
    int axis, inverse, onesided;
    int64_t length;
} vq__dft_params;

/* ---- shape and range (ops/cpu/shape_value.c) ---- */

/* shape: the first dim of X it reports, and how many. */
typedef struct vq__shape_params {
    int start, count;
} vq__shape_params;

/* range: Start and Delta, as doubles (f32, f64) and integers (i32, i64). */
typedef struct vq__range_params {
    double start, delta;
    int64_t istart, idelta;
} vq__range_params;
/* ---- scatter_elements, scatter_nd, gather_nd (ops/cpu/scatter.c) ---- */

/* axis (scatter_elements, normalized), batch_dims (scatter_nd,
 * gather_nd) and reduction (the scatters: scatter_shared.h's
 * VQ__SCATTER_*). */
typedef struct vq__scatter_params {
    int axis, batch_dims, reduction;
} vq__scatter_params;
/* ---- lrn (ops/cpu/lrn.c) ---- */

/* lrn, lrn_grad: the window (size channels: lo before, hi after each),
 * alpha / size (scale), beta and bias (ops/lrn_shared.h's formulas). */
typedef struct vq__lrn_params {
    int64_t size, lo, hi;
    double scale, beta, bias;
} vq__lrn_params;

/* ---- reverse_sequence (ops/cpu/sequence.c) ---- */

/* reverse_sequence: the batch axis, 0 or 1 (the time axis is the other). */
typedef struct vq__reverse_sequence_params {
    int batch_axis;
} vq__reverse_sequence_params;
/* ---- grid_sample, roi_align (ops/cpu/sample.c) ---- */

/* grid_sample's mode and padding_mode, in the order of their names in
 * sample.c (ops/sample_shared.h reads them). */
enum { VQ__GRID_BILINEAR, VQ__GRID_NEAREST, VQ__GRID_BICUBIC };
enum { VQ__GRID_ZEROS, VQ__GRID_BORDER, VQ__GRID_REFLECTION };

/* grid_sample, grid_sample_grad: the modes above, align_corners; wrt (the
 * gradient op only): 0 dX, 1 dGrid. */
typedef struct vq__grid_sample_params {
    int mode, padding, align, wrt;
} vq__grid_sample_params;

/* roi_align, roi_align_grad: mode (0 avg, 1 max), half_pixel (1) or
 * output_half_pixel (0), the output's height and width, sampling_ratio
 * (0: adaptive) and spatial_scale. */
enum { VQ__ROI_AVG, VQ__ROI_MAX };
typedef struct vq__roi_align_params {
    int mode, half_pixel;
    int64_t oh, ow, ratio;
    double scale;
} vq__roi_align_params;
/* ---- einsum (ops/cpu/einsum.c) ---- */

/* The operands einsum takes (the shape donor included). */
#define VQ__EINSUM_MAX_IN 8

/* einsum's equation as infer parsed it against the inputs' ranks: each
 * input's and Out's dims as labels (0-25: 'A'-'Z', 26-51: 'a'-'z', so that
 * their order is the characters'; 52 + j: the j-th dim of the ellipsis
 * from its right end, so that ellipses broadcast from the right);
 * shape_of: the input that only gives Out its shape (-1: none). */
typedef struct vq__einsum_params {
    int nin, nout, shape_of;
    int8_t rank[VQ__EINSUM_MAX_IN];
    uint8_t label[VQ__EINSUM_MAX_IN][VQ_MAX_DIMS];
    uint8_t out[VQ_MAX_DIMS];
} vq__einsum_params;

/* ---- ops with data-dependent output shapes (ops/cpu/dynamic.c) ---- */

/* top_k: the axis, and whether the largest come first. */
typedef struct vq__top_k_params {
    int axis, largest;
} vq__top_k_params;

/* compress, compress_grad and unique: the axis, -1 for X flattened;
 * unique's sorted. */
typedef struct vq__select_params {
    int axis, sorted;
} vq__select_params;

/* non_max_suppression: the box format (center_point_box). */
typedef struct vq__nms_params {
    int center;
} vq__nms_params;

/* ---- tfidf_vectorizer (ops/cpu/tfidf.c) ---- */

enum { VQ__TFIDF_TF, VQ__TFIDF_IDF, VQ__TFIDF_TFIDF };

/* tfidf_vectorizer: the n-gram lengths, the largest skip, the mode
 * (VQ__TFIDF_*) and the output's columns. */
typedef struct vq__tfidf_params {
    int min_gram, max_gram, max_skip, mode;
    int64_t size;
} vq__tfidf_params;

#endif
