/* ONNX's network layers other than windows: the normalizations
 * (BatchNormalization, LayerNormalization, InstanceNormalization,
 * MeanVarianceNormalization, LRN), the
 * products (MatMul, Gemm), Softmax, LogSoftmax and Hardmax, Dropout at
 * inference, and Resize / Upsample. The normalizations varq has no op for
 * are composed of varq's (the ops of ONNX's own function bodies). */
#include "onnx_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* BatchNormalization: at inference (the running statistics) a batch_norm;
 * in training mode a batch_norm_train, whose outputs NewMean and NewVar
 * are the node's running_mean and running_var. Training mode is the
 * attribute training_mode from opset 14, and before it the outputs mean
 * and var being asked for (opsets 9 to 13: their saved_mean and saved_var
 * are not produced). */
static int t_batch_norm(struct ox *x)
{
    struct ox_val *in[5];
    for (int i = 0; i < 5; i++)
        in[i] = ox_input(x, i);
    double eps = ox_float(x, "epsilon"), momentum = ox_float(x, "momentum");
    bool training = x->opset >= 14 ? ox_int(x, "training_mode") != 0 : ox_out(x, 1) || ox_out(x, 2);
    if (!ox_int(x, "spatial"))
        return ox_fail(x, VQ_ENOSYS, "spatial 0 is not supported");
    if (ox_out(x, 3) || ox_out(x, 4))
        return ox_fail(x, VQ_ENOSYS, "its outputs saved_mean and saved_var are not supported");
    if (!training && (ox_out(x, 1) || ox_out(x, 2)))
        return ox_fail(x, VQ_EINVAL, "outputs running_mean and running_var need training_mode 1");
    if (training) {
        vq_attr a[2] = {VQ_ATTR_F("epsilon", eps), VQ_ATTR_F("momentum", momentum)};
        const char *o[3] = {ox_out0(x), ox_out(x, 1), ox_out(x, 2)};
        return ox_emit(x, "batch_norm_train", in, 5, o, 3, a, 2, NULL);
    }
    vq_attr a = VQ_ATTR_F("epsilon", eps);
    const char *o = ox_out0(x);
    return ox_emit(x, "batch_norm", in, 5, &o, 1, &a, 1, NULL);
}

/* LayerNormalization (opset 17): over the axes from axis to the last,
 * mean = mean(X), d = X - mean, inv = 1 / sqrt(mean(d * d) + epsilon),
 * Y = d * inv * Scale (+ B), in the stash type (float unless stash_type
 * says double; X is cast to it and Y back), with the optional outputs Mean
 * and InvStdDev of X's rank (1 on the normalized axes). Composed of varq
 * ops, so each has its gradient and its GPU kernel; the same ops as
 * ONNX's own function body for it. */
static int t_layer_norm(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *scale = ox_input(x, 1), *bias = ox_input(x, 2);
    struct ox_val *mean, *d, *sq, *var, *ve, *sd, *inv, *n, *y;
    int64_t stash = ox_int(x, "stash_type");
    double eps = ox_float(x, "epsilon");
    int rc;
    vq_dtype xt = v->meta.dtype, st;
    if (!ox_is_float(xt))
        return ox_fail(x, VQ_EINVAL, "X is %s, not a floating-point tensor", vq_dtype_name(xt));
    if (!vq__onnx_dtype((int32_t)stash, &st) || !ox_is_float(st))
        return ox_fail(x, VQ_ENOSYS, "stash_type %lld is not float or double", (long long)stash);
    int rank = v->meta.ndim, a0 = 0;
    if ((rc = ox_axis(x, "axis", ox_int(x, "axis"), rank, &a0)) < 0)
        return rc;
    int64_t axes[VQ_MAX_DIMS];
    for (int i = a0; i < rank; i++)
        axes[i - a0] = i;
    vq_attr ra[2] = {VQ_ATTR_IS("axes", axes, rank - a0), VQ_ATTR_B("keepdim", true)};
    vq_attr ea[2] = {VQ_ATTR_F("scale", 1), VQ_ATTR_F("bias", eps)};
    const char *mean_name = ox_out(x, 1), *inv_name = ox_out(x, 2);
    const char *y_name = st == xt && !bias ? ox_out0(x) : NULL;
    if ((rc = ox_cast(x, &v, st)) < 0 || (rc = ox_cast(x, &scale, st)) < 0 ||
        (bias && (rc = ox_cast(x, &bias, st)) < 0))
        return rc;
    if ((rc = ox_emit(x, "mean", &v, 1, &mean_name, 1, ra, 2, &mean)) < 0 ||
        (rc = ox_emit(x, "sub", (struct ox_val *[]){v, mean}, 2, NULL, 1, NULL, 0, &d)) < 0 ||
        (rc = ox_emit(x, "mul", (struct ox_val *[]){d, d}, 2, NULL, 1, NULL, 0, &sq)) < 0 ||
        (rc = ox_emit(x, "mean", &sq, 1, NULL, 1, ra, 2, &var)) < 0 ||
        (rc = ox_emit(x, "scale", &var, 1, NULL, 1, ea, 2, &ve)) < 0 ||
        (rc = ox_emit(x, "sqrt", &ve, 1, NULL, 1, NULL, 0, &sd)) < 0 ||
        (rc = ox_emit(x, "reciprocal", &sd, 1, &inv_name, 1, NULL, 0, &inv)) < 0 ||
        (rc = ox_emit(x, "mul", (struct ox_val *[]){d, inv}, 2, NULL, 1, NULL, 0, &n)) < 0 ||
        (rc = ox_emit(x, "mul", (struct ox_val *[]){n, scale}, 2, &y_name, 1, NULL, 0, &y)) < 0)
        return rc;
    if (bias) {
        const char *name = st == xt ? ox_out0(x) : NULL;
        if ((rc = ox_emit(x, "add", (struct ox_val *[]){y, bias}, 2, &name, 1, NULL, 0, &y)) < 0)
            return rc;
    }
    if (st == xt)
        return 0;
    vq_attr c = VQ_ATTR_S("dtype", vq_dtype_name(xt));
    const char *o = ox_out0(x);
    return ox_emit(x, "cast", &y, 1, &o, 1, &c, 1, NULL);
}

/* InstanceNormalization: per sample and channel over the spatial dims,
 * (X - mean) / sqrt(var + epsilon) * scale + B, scale and B per channel
 * (reshaped to [C, 1, ...] to broadcast). */
static int t_instance_norm(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *scale = ox_input(x, 1), *bias = ox_input(x, 2);
    struct ox_val *mean, *d, *sq, *var, *ve, *sd, *n, *y;
    double eps = ox_float(x, "epsilon");
    int rc, r = v->meta.ndim;
    if (r < 3)
        return ox_fail(x, VQ_EINVAL, "input of rank %d (needs N, C and spatial dims)", r);
    if (!ox_is_float(v->meta.dtype))
        return ox_fail(x, VQ_EINVAL, "the input is %s, not a floating-point tensor",
                       vq_dtype_name(v->meta.dtype));
    int64_t axes[VQ_MAX_DIMS], cshape[VQ_MAX_DIMS];
    for (int i = 2; i < r; i++)
        axes[i - 2] = i;
    cshape[0] = -1;
    for (int i = 1; i < r - 1; i++)
        cshape[i] = 1;
    vq_attr ra[2] = {VQ_ATTR_IS("axes", axes, r - 2), VQ_ATTR_B("keepdim", true)};
    vq_attr ea[2] = {VQ_ATTR_F("scale", 1), VQ_ATTR_F("bias", eps)};
    const char *o = ox_out0(x);
    if ((rc = ox_reshape(x, scale, cshape, r - 1, NULL, &scale)) < 0 ||
        (rc = ox_reshape(x, bias, cshape, r - 1, NULL, &bias)) < 0 ||
        (rc = ox_emit(x, "mean", &v, 1, NULL, 1, ra, 2, &mean)) < 0 ||
        (rc = ox_emit(x, "sub", (struct ox_val *[]){v, mean}, 2, NULL, 1, NULL, 0, &d)) < 0 ||
        (rc = ox_emit(x, "mul", (struct ox_val *[]){d, d}, 2, NULL, 1, NULL, 0, &sq)) < 0 ||
        (rc = ox_emit(x, "mean", &sq, 1, NULL, 1, ra, 2, &var)) < 0 ||
        (rc = ox_emit(x, "scale", &var, 1, NULL, 1, ea, 2, &ve)) < 0 ||
        (rc = ox_emit(x, "sqrt", &ve, 1, NULL, 1, NULL, 0, &sd)) < 0 ||
        (rc = ox_emit(x, "div", (struct ox_val *[]){d, sd}, 2, NULL, 1, NULL, 0, &n)) < 0 ||
        (rc = ox_emit(x, "mul", (struct ox_val *[]){n, scale}, 2, NULL, 1, NULL, 0, &y)) < 0)
        return rc;
    return ox_emit(x, "add", (struct ox_val *[]){y, bias}, 2, &o, 1, NULL, 0, NULL);
}

/* LRN: varq's lrn (ONNX's window and formula; opsets 1 and 13 alike). */
static int t_lrn(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    if (!ox_given(x, "size"))
        return ox_fail(x, VQ_EINVAL, "attribute size is missing");
    vq_attr at[4] = {VQ_ATTR_I("size", ox_int(x, "size")), VQ_ATTR_F("alpha", ox_float(x, "alpha")),
                     VQ_ATTR_F("beta", ox_float(x, "beta")),
                     VQ_ATTR_F("bias", ox_float(x, "bias"))};
    const char *o = ox_out0(x);
    return ox_emit(x, "lrn", &v, 1, &o, 1, at, 4, NULL);
}

/* MeanVarianceNormalization: ONNX's function body, op for op, over axes
 * (default [0, 2, 3]): (X - mean(X)) / (sqrt(mean(X^2) - mean(X)^2) +
 * 1e-9), so that it trains and runs wherever those ops do. */
static int t_mvn(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *mean, *mean2, *sq, *msq, *var, *sd, *sde, *d;
    int n, rc, r = v->meta.ndim;
    int64_t axes[VQ_MAX_DIMS] = {0, 2, 3};
    const int64_t *given = ox_ints(x, "axes", &n);
    if (!ox_is_float(v->meta.dtype))
        return ox_fail(x, VQ_EINVAL, "the input is %s, not a floating-point tensor",
                       vq_dtype_name(v->meta.dtype));
    bool dflt = n < 0;
    if (dflt)
        n = 3;
    for (int i = 0; i < n; i++) {
        int a;
        if ((rc = ox_axis(x, "axes", dflt ? axes[i] : given[i], r, &a)) < 0)
            return rc;
        axes[i] = a;
    }
    vq_attr ra[2] = {VQ_ATTR_IS("axes", axes, n), VQ_ATTR_B("keepdim", true)};
    vq_attr ea[2] = {VQ_ATTR_F("scale", 1), VQ_ATTR_F("bias", 1e-9)};
    const char *o = ox_out0(x);
    if ((rc = ox_emit(x, "mean", &v, 1, NULL, 1, ra, 2, &mean)) < 0 ||
        (rc = ox_emit(x, "mul", (struct ox_val *[]){mean, mean}, 2, NULL, 1, NULL, 0, &mean2)) <
            0 ||
        (rc = ox_emit(x, "mul", (struct ox_val *[]){v, v}, 2, NULL, 1, NULL, 0, &sq)) < 0 ||
        (rc = ox_emit(x, "mean", &sq, 1, NULL, 1, ra, 2, &msq)) < 0 ||
        (rc = ox_emit(x, "sub", (struct ox_val *[]){msq, mean2}, 2, NULL, 1, NULL, 0, &var)) < 0 ||
        (rc = ox_emit(x, "sqrt", &var, 1, NULL, 1, NULL, 0, &sd)) < 0 ||
        (rc = ox_emit(x, "sub", (struct ox_val *[]){v, mean}, 2, NULL, 1, NULL, 0, &d)) < 0 ||
        (rc = ox_emit(x, "scale", &sd, 1, NULL, 1, ea, 2, &sde)) < 0)
        return rc;
    return ox_emit(x, "div", (struct ox_val *[]){d, sde}, 2, &o, 1, NULL, 0, NULL);
}

/* MatMul, numpy's: a 1-D operand is a row (A) or a column (B) whose dim is
 * dropped from the result. */
static int t_matmul(struct ox *x)
{
    struct ox_val *a = ox_input(x, 0), *b = ox_input(x, 1), *prod;
    int rc;
    bool a1 = a->meta.ndim == 1, b1 = b->meta.ndim == 1;
    if (a1 && (rc = ox_reshape(x, a, (int64_t[]){1, -1}, 2, NULL, &a)) < 0)
        return rc;
    if (b1 && (rc = ox_reshape(x, b, (int64_t[]){-1, 1}, 2, NULL, &b)) < 0)
        return rc;
    if (a->meta.ndim == 2 && b->meta.ndim > 2)
        return ox_fail(x, VQ_ENOSYS, "a 2-D A with a batched B (rank %d) is not supported",
                       b->meta.ndim);
    const char *name = a1 || b1 ? NULL : ox_out0(x);
    if ((rc = ox_emit(x, "matmul", (struct ox_val *[]){a, b}, 2, &name, 1, NULL, 0, &prod)) < 0)
        return rc;
    if (!a1 && !b1)
        return 0;
    /* drop the dims that were added: the result's rank minus one or two */
    int r = prod->meta.ndim, n = 0;
    int64_t want[VQ_MAX_DIMS];
    int from[VQ_MAX_DIMS];
    for (int i = 0; i < r; i++) {
        if ((a1 && i == r - 2) || (b1 && i == r - 1))
            continue;
        want[n] = prod->meta.shape[i];
        from[n++] = i;
    }
    return ox_reshape_known(x, prod, want, from, n, ox_out0(x), NULL);
}

/* Gemm: alpha op(A) op(B) + beta C. */
static int t_gemm(struct ox *x)
{
    struct ox_val *a = ox_input(x, 0), *b = ox_input(x, 1), *c = ox_input(x, 2), *prod;
    double beta = ox_float(x, "beta");
    int rc;
    if (a->meta.ndim != 2 || b->meta.ndim != 2)
        return ox_fail(x, VQ_EINVAL, "A and B must be matrices (ranks %d and %d)", a->meta.ndim,
                       b->meta.ndim);
    vq_attr at[3] = {VQ_ATTR_B("transpose_x", ox_int(x, "transA") != 0),
                     VQ_ATTR_B("transpose_y", ox_int(x, "transB") != 0),
                     VQ_ATTR_F("alpha", ox_float(x, "alpha"))};
    const char *name = c && beta != 0 ? NULL : ox_out0(x);
    if ((rc = ox_emit(x, "matmul", (struct ox_val *[]){a, b}, 2, &name, 1, at, 3, &prod)) < 0)
        return rc;
    if (!c || beta == 0)
        return 0;
    if (beta != 1) {
        vq_attr s = VQ_ATTR_F("scale", beta);
        if ((rc = ox_emit(x, "scale", &c, 1, NULL, 1, &s, 1, &c)) < 0)
            return rc;
    }
    const char *o = ox_out0(x);
    return ox_emit(x, "add", (struct ox_val *[]){prod, c}, 2, &o, 1, NULL, 0, NULL);
}

/* Softmax and LogSoftmax (the row's varq op): since opset 13 along one
 * axis (default -1); before, over the dims from axis on (default 1),
 * which is the same when that is the last axis and otherwise goes through
 * a 2-D reshape. */
static int t_softmax(struct ox *x)
{
    const char *type = ox_type(x), *o = ox_out0(x);
    struct ox_val *v = ox_input(x, 0);
    int r = v->meta.ndim, ax = 0;
    int rc = ox_axis(x, "axis", ox_int(x, "axis"), r ? r : 1, &ax);
    if (rc)
        return rc;
    if (x->opset >= 13 || ax == r - 1 || r == 0) {
        vq_attr a = VQ_ATTR_I("axis", x->opset >= 13 ? ax : -1);
        return ox_emit(x, type, &v, 1, &o, 1, &a, 1, NULL);
    }
    int64_t lead = 1;
    for (int i = 0; i < ax; i++)
        lead = v->meta.shape[i] < 0 || lead < 0 ? -1 : lead * v->meta.shape[i];
    int64_t shape[2] = {lead, -1};
    if (lead < 0) {
        int64_t rest = 1;
        for (int i = ax; i < r; i++)
            rest = v->meta.shape[i] < 0 || rest < 0 ? -1 : rest * v->meta.shape[i];
        if (rest < 0)
            return ox_fail(x, VQ_ENOSYS,
                           "opset-%lld Softmax over axis %d needs the dims "
                           "before or from the axis known at import",
                           (long long)x->opset, ax);
        shape[0] = -1;
        shape[1] = rest;
    }
    struct ox_val *flat, *soft;
    vq_attr a = VQ_ATTR_I("axis", 1);
    if ((rc = ox_reshape(x, v, shape, 2, NULL, &flat)) < 0 ||
        (rc = ox_emit(x, type, &flat, 1, NULL, 1, &a, 1, &soft)) < 0)
        return rc;
    /* back to X's shape */
    return ox_emit(x, "reshape_grad", (struct ox_val *[]){v, soft}, 2, &o, 1, NULL, 0, NULL);
}

/* Hardmax (opset 13): 1 where X has the first largest value along the
 * axis, 0 elsewhere: argmax (keeping the axis) against the positions
 * 0 .. dim-1 along it. Before opset 13 the axis coerced X to 2-D; that is
 * the same only for the last axis, the one varq takes there. */
static int t_hardmax(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *am, *pos, *hot;
    int r = v->meta.ndim, a = 0;
    int rc = ox_axis(x, "axis", ox_int(x, "axis"), r, &a);
    if (rc)
        return rc;
    if (x->opset < 13 && a != r - 1)
        return ox_fail(x, VQ_ENOSYS, "opset-%lld Hardmax over axis %d, not the last",
                       (long long)x->opset, a);
    int64_t dim = v->meta.shape[a], shape[VQ_MAX_DIMS];
    if (dim < 0)
        return ox_fail(x, VQ_ENOSYS, "the dim of axis %d is not known at import", a);
    for (int i = 0; i < r; i++)
        shape[i] = i == a ? dim : 1;
    vq_tensor *t;
    if ((rc = ox_tensor_new(x, &t, VQ_I64, r, shape)) < 0)
        return rc;
    for (int64_t i = 0; i < dim; i++)
        ((int64_t *)vq_tensor_data(t))[i] = i;
    vq_attr aa[3] = {VQ_ATTR_I("axis", a), VQ_ATTR_B("keepdim", true),
                     VQ_ATTR_B("select_last_index", false)};
    vq_attr c = VQ_ATTR_S("dtype", vq_dtype_name(v->meta.dtype));
    const char *o = ox_out0(x);
    if ((rc = ox_const(x, NULL, t, &pos)) < 0 ||
        (rc = ox_emit(x, "argmax", &v, 1, NULL, 1, aa, 3, &am)) < 0 ||
        (rc = ox_emit(x, "equal", (struct ox_val *[]){am, pos}, 2, NULL, 1, NULL, 0, &hot)) < 0)
        return rc;
    return ox_emit(x, "cast", &hot, 1, &o, 1, &c, 1, NULL);
}

/* Dropout in training mode with a ratio that drops: ONNX's reference,
 * mask = uniform(0, 1) >= ratio, Y = X * mask / (1 - ratio), with
 * uniform_random (seeded by the node's seed when it gives one). The draws
 * are varq's (Philox), not numpy's, so the elements dropped differ from
 * ONNX's reference outputs; which are kept and their scale do not. X's
 * shape must be known at import (uniform_random's). */
static int dropout_training(struct ox *x, struct ox_val *v, struct ox_val *ratio)
{
    int64_t shape[VQ_MAX_DIMS];
    for (int d = 0; d < v->meta.ndim; d++)
        if ((shape[d] = v->meta.shape[d]) < 0)
            return ox_fail(x, VQ_ENOSYS,
                           "training_mode is true and input 0's dim %d is known only at run "
                           "time (the random mask needs X's shape when the model is imported)",
                           d);
    if (!ox_is_float(v->meta.dtype))
        return ox_fail(x, VQ_ENOSYS, "training_mode with a %s input", vq_dtype_name(v->meta.dtype));
    vq_dtype dt = v->meta.dtype;
    struct ox_val *r = ratio, *u, *keep, *one, *left, *scaled, *fkeep;
    int rc = 0;
    if (!r && (rc = ox_scalar(x, dt, 0.5, &r)) < 0)
        return rc;
    if ((rc = ox_cast(x, &r, dt)) < 0)
        return rc;
    vq_attr at[5] = {VQ_ATTR_IS("shape", shape, v->meta.ndim),
                     VQ_ATTR_S("dtype", vq_dtype_name(dt)), VQ_ATTR_F("min", 0),
                     VQ_ATTR_F("max", 1), VQ_ATTR_I("seed", ox_int(x, "seed"))};
    vq_attr c = VQ_ATTR_S("dtype", vq_dtype_name(dt));
    const char *y = ox_out0(x), *mask = ox_out(x, 1);
    if ((rc = ox_emit(x, "uniform_random", NULL, 0, NULL, 1, at, ox_given(x, "seed") ? 5 : 4, &u)) <
            0 ||
        (rc = ox_emit(x, "greater_equal", (struct ox_val *[]){u, r}, 2, &mask, 1, NULL, 0, &keep)) <
            0 ||
        (rc = ox_scalar(x, dt, 1, &one)) < 0 ||
        (rc = ox_emit(x, "sub", (struct ox_val *[]){one, r}, 2, NULL, 1, NULL, 0, &left)) < 0 ||
        (rc = ox_emit(x, "div", (struct ox_val *[]){v, left}, 2, NULL, 1, NULL, 0, &scaled)) < 0 ||
        (rc = ox_emit(x, "cast", &keep, 1, NULL, 1, &c, 1, &fkeep)) < 0)
        return rc;
    return ox_emit(x, "mul", (struct ox_val *[]){scaled, fkeep}, 2, &y, 1, NULL, 0, NULL);
}

/* Dropout at inference: the identity, and a mask of all true. So is a
 * Dropout in training mode whose ratio is 0 (ONNX's reference drops
 * nothing then): PyTorch exports F.dropout(x, p=0.0), whose training
 * argument defaults to true, that way (torchvision's swin_t). In training
 * mode with another ratio: dropout_training. */
static int t_dropout(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0), *training = x->opset >= 12 ? ox_input(x, 2) : NULL;
    struct ox_val *ratio = x->opset >= 12 ? ox_input(x, 1) : NULL;
    int rc = 0;
    if (training) {
        if (!ox_known(x, training) || training->konst->dtype != VQ_BOOL)
            return ox_fail(x, VQ_ENOSYS,
                           "training_mode must be known when the model is "
                           "imported (a bool constant)");
        /* the ratio as imported: a known (or offered) value, or an
         * initializer, which is a parameter rather than a known value */
        const vq_tensor *r = !ratio               ? NULL
                             : ox_known(x, ratio) ? ratio->konst
                                                  : ox_param_value(x, ratio);
        bool none = r && r->numel == 1 && ox_is_float(r->dtype) && ox_first_value(r) == 0;
        if (*(unsigned char *)training->konst->data && !none)
            return dropout_training(x, v, ratio);
    }
    if (ox_out(x, 1)) {
        /* not(bool(zeros_like(X))) */
        struct ox_val *z, *b;
        vq_attr a = VQ_ATTR_S("dtype", "bool");
        const char *mask = ox_out(x, 1);
        if ((rc = ox_emit(x, "zeros_like", &v, 1, NULL, 1, NULL, 0, &z)) == 0 &&
            (rc = ox_emit(x, "cast", &z, 1, NULL, 1, &a, 1, &b)) == 0)
            rc = ox_emit(x, "logical_not", &b, 1, &mask, 1, NULL, 0, NULL);
    }
    return rc ? rc : ox_alias(x, ox_out0(x), v);
}

/* uniform_random in [low, high) of input v's shape (which must be known
 * at import) and dtype dt, seeded when the node gives a seed (ONNX's
 * float, truncated), else drawing from the executor's default generator
 * at each run. */
static int uniform_like(struct ox *x, struct ox_val *v, vq_dtype dt, double low, double high,
                        const char *name, struct ox_val **out)
{
    /* truncated to an integer: one outside int64's range (or NaN) has none */
    double seed = ox_float(x, "seed");
    if (!(seed > -9.2e18 && seed < 9.2e18))
        return ox_fail(x, VQ_EINVAL, "seed %g is not a number an int64 holds", seed);
    int64_t shape[VQ_MAX_DIMS];
    for (int d = 0; d < v->meta.ndim; d++)
        if ((shape[d] = v->meta.shape[d]) < 0)
            return ox_fail(x, VQ_ENOSYS, "input 0's dim %d is known only at run time", d);
    vq_attr at[5] = {VQ_ATTR_IS("shape", shape, v->meta.ndim),
                     VQ_ATTR_S("dtype", vq_dtype_name(dt)), VQ_ATTR_F("min", low),
                     VQ_ATTR_F("max", high), VQ_ATTR_I("seed", (int64_t)seed)};
    return ox_emit(x, "uniform_random", NULL, 0, &name, 1, at, ox_given(x, "seed") ? 5 : 4, out);
}

/* The node's dtype attribute, else the dtype of input 0. */
static int dtype_attr(struct ox *x, vq_dtype *dt)
{
    *dt = ox_input(x, 0)->meta.dtype;
    if (ox_given(x, "dtype") && !vq__onnx_dtype((int32_t)ox_int(x, "dtype"), dt))
        return ox_fail(x, VQ_ENOSYS, "dtype %s", vq__onnx_type_name((int32_t)ox_int(x, "dtype")));
    return 0;
}

/* RandomUniformLike(input; dtype, high, low, seed): uniform_random. */
static int t_random_uniform_like(struct ox *x)
{
    vq_dtype dt;
    int rc = dtype_attr(x, &dt);
    if (rc == 0 && dt != VQ_F32 && dt != VQ_F64)
        rc = ox_fail(x, VQ_ENOSYS, "a random %s tensor (f32 and f64 only)", vq_dtype_name(dt));
    return rc ? rc
              : uniform_like(x, ox_input(x, 0), dt, ox_float(x, "low"), ox_float(x, "high"),
                             ox_out0(x), NULL);
}

/* Bernoulli(input; dtype, seed): uniform_random in [0, 1) less than the
 * probabilities (in their dtype, as ONNX's reference draws), cast to
 * dtype. */
static int t_bernoulli(struct ox *x)
{
    struct ox_val *p = ox_input(x, 0), *u, *lt;
    vq_dtype dt;
    int rc = dtype_attr(x, &dt);
    if (rc < 0 || (rc = uniform_like(x, p, p->meta.dtype, 0, 1, NULL, &u)) < 0 ||
        (rc = ox_emit(x, "less", (struct ox_val *[]){u, p}, 2, NULL, 1, NULL, 0, &lt)) < 0)
        return rc;
    vq_attr c = VQ_ATTR_S("dtype", vq_dtype_name(dt));
    const char *o = ox_out0(x);
    return ox_emit(x, "cast", &lt, 1, &o, 1, &c, 1, NULL);
}

/* The values of input i as doubles, which must be a known f32 or f64
 * tensor, or a float initializer (its imported value), of at most max
 * elements (*n = -1 when the input is absent). */
static int const_floats(struct ox *x, int i, const char *what, double *out, int max, int *n)
{
    struct ox_val *v = ox_input(x, i);
    *n = -1;
    if (!v)
        return 0;
    const vq_tensor *t = ox_known(x, v) ? v->konst : ox_param_value(x, v);
    int rc = ox_list_value(x, i, what, v, t, t && ox_is_float(t->dtype), "a float tensor", max);
    if (rc)
        return rc;
    for (int64_t k = 0; k < t->numel; k++)
        out[k] = t->dtype == VQ_F64 ? ((const double *)t->data)[k] : ((const float *)t->data)[k];
    *n = (int)t->numel;
    return 0;
}

/* How a resize interpolates: its modes and the attributes of cubic and
 * tf_crop_and_resize. */
struct resize_how {
    const char *mode, *ctm, *nearest;
    double cubic_a, extra;
    bool exclude;
};

/* resize of input 0 into output 0 with the given scales (ns entries) or
 * sizes (nz), the modes and the other attributes (how). */
static int emit_resize(struct ox *x, const struct resize_how *how, const double *scales, int ns,
                       const int64_t *sizes, int nz, const double *roi, int nroi)
{
    struct ox_val *v = ox_input(x, 0);
    int r = v->meta.ndim, n = ns > 0 ? ns : nz;
    if (ns > 0 && nz > 0)
        return ox_fail(x, VQ_EINVAL, "both scales and sizes are given; Resize takes one");
    if (n <= 0)
        return ox_fail(x, VQ_EINVAL, "neither scales nor sizes is given");
    if (n != r)
        return ox_fail(x, VQ_EINVAL, "%s has %d entries; X has rank %d",
                       ns > 0 ? "scales" : "sizes", n, r);
    vq_attr at[9];
    int na = 0;
    at[na++] = ns > 0 ? VQ_ATTR_FS("scales", scales, ns) : VQ_ATTR_IS("sizes", sizes, nz);
    at[na++] = VQ_ATTR_S("mode", how->mode);
    at[na++] = VQ_ATTR_S("coordinate_transformation_mode", how->ctm);
    at[na++] = VQ_ATTR_S("nearest_mode", how->nearest);
    at[na++] = VQ_ATTR_F("cubic_coeff_a", how->cubic_a);
    at[na++] = VQ_ATTR_B("exclude_outside", how->exclude);
    at[na++] = VQ_ATTR_F("extrapolation_value", how->extra);
    if (nroi > 0)
        at[na++] = VQ_ATTR_FS("roi", roi, nroi);
    const char *o = ox_out0(x);
    return ox_emit(x, "resize", &v, 1, &o, 1, at, na, NULL);
}

/* Resize: opset 10 (X, scales; mode) resizes as Upsample does; 11 and 13
 * (X, roi, scales, sizes) with the coordinate transformation, nearest and
 * cubic attributes. scales or sizes (and roi in tf_crop_and_resize) must
 * be known at import; an empty scales counts as absent. */
static int t_resize(struct ox *x)
{
    struct resize_how how = {ox_str(x, "mode"),
                             ox_str(x, "coordinate_transformation_mode"),
                             ox_str(x, "nearest_mode"),
                             ox_float(x, "cubic_coeff_a"),
                             ox_float(x, "extrapolation_value"),
                             ox_int(x, "exclude_outside") != 0};
    double scales[VQ_MAX_DIMS], roi[2 * VQ_MAX_DIMS];
    int64_t sizes[VQ_MAX_DIMS];
    int ns = -1, nz = -1, nroi = -1;
    bool v10 = x->opset < 11;
    int rc = const_floats(x, v10 ? 1 : 2, "scales", scales, VQ_MAX_DIMS, &ns);
    if (rc == 0 && !v10)
        rc = ox_const_ints(x, 3, "sizes", sizes, VQ_MAX_DIMS, &nz);
    if (rc == 0 && !v10 && !strcmp(how.ctm, "tf_crop_and_resize")) {
        rc = const_floats(x, 1, "roi", roi, 2 * VQ_MAX_DIMS, &nroi);
        if (rc == 0 && nroi <= 0)
            rc = ox_fail(x, VQ_EINVAL,
                         "coordinate_transformation_mode tf_crop_and_resize needs "
                         "the roi (input 1)");
    }
    if (rc)
        return rc;
    if (v10 && strcmp(how.mode, "nearest") && strcmp(how.mode, "linear"))
        return ox_fail(x, VQ_EINVAL, "mode \"%s\" is not nearest or linear (opset 10)", how.mode);
    return emit_resize(x, &how, scales, ns, sizes, nz, roi, nroi);
}

/* Upsample (opsets 7 and 9): X resized by scales (the attribute in 7, input
 * 1 in 9), nearest or linear, the asymmetric transformation (a nearest
 * output element reads X at floor(o / scale)). */
static int t_upsample(struct ox *x)
{
    struct resize_how how = {ox_str(x, "mode"), "asymmetric", "floor", -0.75, 0, false};
    double scales[VQ_MAX_DIMS];
    int ns = -1;
    if (x->opset >= 9) {
        int rc = const_floats(x, 1, "scales", scales, VQ_MAX_DIMS, &ns);
        if (rc)
            return rc;
    } else {
        const float *f = ox_floats(x, "scales", &ns);
        if (ns <= 0)
            return ox_fail(x, VQ_EINVAL, "attribute scales is missing");
        for (int i = 0; i < ns; i++)
            scales[i] = f[i];
    }
    if (strcmp(how.mode, "nearest") && strcmp(how.mode, "linear"))
        return ox_fail(x, VQ_ENOSYS, "mode \"%s\" is not nearest or linear", how.mode);
    return emit_resize(x, &how, scales, ns, NULL, -1, NULL, -1);
}

/* ---- the rows ---- */

const struct ox_op ox_op_BatchNormalization =
    OX_ROW(t_batch_norm, NULL, 5, 5, true,
           OX_ATTRS(OX_FLOAT("epsilon", 1e-5), OX_FLOAT("momentum", 0.9),
                    OX_INT("training_mode", 0, .since = 14), OX_INT("spatial", 1)));
const struct ox_op ox_op_LayerNormalization =
    OX_ROW(t_layer_norm, NULL, 2, 3, true,
           OX_ATTRS(OX_INT("axis", -1), OX_FLOAT("epsilon", 1e-5),
                    OX_INT("stash_type", ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT)));
const struct ox_op ox_op_InstanceNormalization =
    OX_ROW(t_instance_norm, NULL, 3, 3, true, OX_ATTRS(OX_FLOAT("epsilon", 1e-5)));
const struct ox_op ox_op_LRN = OX_ROW(t_lrn, NULL, 1, 1, true,
                                      OX_ATTRS(OX_INT("size", 0), OX_FLOAT("alpha", 1e-4),
                                               OX_FLOAT("beta", 0.75), OX_FLOAT("bias", 1)));
const struct ox_op ox_op_MeanVarianceNormalization =
    OX_ROW(t_mvn, NULL, 1, 1, true, OX_ATTRS(OX_INTS("axes", VQ_MAX_DIMS)));
const struct ox_op ox_op_MatMul = OX_ROW(t_matmul, NULL, 2, 2, true, NULL);
const struct ox_op ox_op_Gemm = OX_ROW(t_gemm, NULL, 2, 3, true,
                                       OX_ATTRS(OX_INT("transA", 0), OX_INT("transB", 0),
                                                OX_FLOAT("alpha", 1), OX_FLOAT("beta", 1)));
/* the axis: 1 before opset 13 (the dims from it on), -1 since (one axis) */
#define SOFTMAX_AXIS OX_INT("axis", 1, .changed = 13, .i2 = -1)
const struct ox_op ox_op_Softmax = OX_ROW(t_softmax, "softmax", 1, 1, true, OX_ATTRS(SOFTMAX_AXIS));
const struct ox_op ox_op_LogSoftmax =
    OX_ROW(t_softmax, "log_softmax", 1, 1, true, OX_ATTRS(SOFTMAX_AXIS));
const struct ox_op ox_op_Hardmax = OX_ROW(t_hardmax, NULL, 1, 1, true, OX_ATTRS(SOFTMAX_AXIS));
const struct ox_op ox_op_Dropout =
    OX_ROW(t_dropout, NULL, 1, 3, true, OX_ATTRS(OX_INT("seed", 0, .since = 12)));
const struct ox_op ox_op_RandomUniformLike =
    OX_ROW(t_random_uniform_like, NULL, 1, 1, true,
           OX_ATTRS(OX_INT("dtype", 0), OX_FLOAT("high", 1), OX_FLOAT("low", 0),
                    OX_FLOAT("seed", 0)));
const struct ox_op ox_op_Bernoulli =
    OX_ROW(t_bernoulli, NULL, 1, 1, true, OX_ATTRS(OX_INT("dtype", 0), OX_FLOAT("seed", 0)));
/* opset 10's Resize transforms as Upsample does: asymmetric, floor */
const struct ox_op ox_op_Resize =
    OX_ROW(t_resize, NULL, 1, 4, true,
           OX_ATTRS(OX_STR("mode", "nearest", 32),
                    OX_STR("coordinate_transformation_mode", "asymmetric", 32, .changed = 11,
                           .s2 = "half_pixel"),
                    OX_STR("nearest_mode", "floor", 32, .changed = 11, .s2 = "round_prefer_floor"),
                    OX_FLOAT("cubic_coeff_a", -0.75), OX_INT("exclude_outside", 0),
                    OX_FLOAT("extrapolation_value", 0)));
/* scales: an attribute in opset 7, an input since 9 */
const struct ox_op ox_op_Upsample =
    OX_ROW(t_upsample, NULL, 1, 2, true,
           OX_ATTRS(OX_STR("mode", "nearest", 32), OX_FLOATS("scales", VQ_MAX_DIMS, .until = 9)));
