/* ONNX's losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss,
 * composed of varq ops (the one-hot pick, the weights, the reduction), so
 * each part has its gradient and its GPU kernel. */
#include "onnx_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- losses: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss ----
 *
 * Composed of varq ops, so each part has its gradient and GPU kernel:
 * the class picked by each target is a one-hot mask, equal(target with a
 * class axis of 1, the classes 0 .. C-1 along axis 1), multiplied into
 * the input and summed over the class axis (the other classes add zeros;
 * a target equal to an ignore_index outside [0, C) picks nothing). The
 * weight of each element is the class weight at its target (a gather of
 * the weights at the target, ignored targets replaced by class 0 first)
 * times 0 where the target is ignore_index; the loss is minus the picked
 * value times that weight, then reduced: none, sum, or mean (the sum over
 * the sum of the weights, as ONNX defines it; over the count of elements
 * when no weight or ignore_index is given). */
static int nll_loss(struct ox *x, struct ox_val *in, struct ox_val *target, struct ox_val *weight,
                    const char *out_name)
{
    const char *reduction = ox_str(x, "reduction");
    int64_t ii = ox_int(x, "ignore_index");
    bool has_ii = ox_given(x, "ignore_index");
    int rc;
    bool none = !strcmp(reduction, "none"), sum = !strcmp(reduction, "sum");
    if (!none && !sum && strcmp(reduction, "mean"))
        return ox_fail(x, VQ_EINVAL, "reduction \"%s\" is not none, sum or mean", reduction);
    vq_dtype dt = in->meta.dtype;
    int r = in->meta.ndim;
    if (!ox_is_float(dt))
        return ox_fail(x, VQ_EINVAL, "the input is %s, not a floating-point tensor",
                       vq_dtype_name(dt));
    if (target->meta.dtype != VQ_I32 && target->meta.dtype != VQ_I64)
        return ox_fail(x, VQ_EINVAL, "the target is %s, not int32 or int64",
                       vq_dtype_name(target->meta.dtype));
    if (r < 2 || target->meta.ndim != r - 1)
        return ox_fail(x, VQ_EINVAL,
                       "the input has rank %d and the target %d: want [N, C, ...] "
                       "and [N, ...]",
                       r, target->meta.ndim);
    int64_t c = in->meta.shape[1];
    if (c <= 0)
        return ox_fail(x, VQ_ENOSYS,
                       "the number of classes (the input's dim 1) is not known "
                       "at import");
    /* the classes along axis 1 of a tensor of the input's rank */
    int64_t cshape[VQ_MAX_DIMS];
    for (int i = 0; i < r; i++)
        cshape[i] = i == 1 ? c : 1;
    vq_tensor *ct;
    if ((rc = ox_tensor_new(x, &ct, VQ_I64, r, cshape)) < 0)
        return rc;
    for (int64_t k = 0; k < c; k++)
        ((int64_t *)vq_tensor_data(ct))[k] = k;
    struct ox_val *cls, *t64 = target, *tu, *hot, *hotf, *prod, *picked, *w = NULL, *mask = NULL;
    int64_t want[VQ_MAX_DIMS];
    int from[VQ_MAX_DIMS];
    for (int i = 0, j = 0; i < r; i++) {
        want[i] = i == 1 ? 1 : target->meta.shape[j];
        from[i] = i == 1 ? -1 : j++;
    }
    int64_t axis1 = 1;
    vq_attr sum1[2] = {VQ_ATTR_IS("axes", &axis1, 1), VQ_ATTR_B("keepdim", false)};
    vq_attr to_dt = VQ_ATTR_S("dtype", vq_dtype_name(dt));
    if ((rc = ox_const(x, NULL, ct, &cls)) < 0 || (rc = ox_cast(x, &t64, VQ_I64)) < 0 ||
        (rc = ox_reshape_known(x, t64, want, from, r, NULL, &tu)) < 0 ||
        (rc = ox_emit(x, "equal", (struct ox_val *[]){tu, cls}, 2, NULL, 1, NULL, 0, &hot)) < 0 ||
        (rc = ox_emit(x, "cast", &hot, 1, NULL, 1, &to_dt, 1, &hotf)) < 0 ||
        (rc = ox_emit(x, "mul", (struct ox_val *[]){in, hotf}, 2, NULL, 1, NULL, 0, &prod)) < 0 ||
        (rc = ox_emit(x, "sum", &prod, 1, NULL, 1, sum1, 2, &picked)) < 0)
        return rc;
    if (has_ii) {
        struct ox_val *iiv, *keep;
        if ((rc = ox_scalar(x, VQ_I64, (double)ii, &iiv)) < 0 ||
            (rc = ox_emit(x, "not_equal", (struct ox_val *[]){t64, iiv}, 2, NULL, 1, NULL, 0,
                          &keep)) < 0 ||
            (rc = ox_emit(x, "cast", &keep, 1, NULL, 1, &to_dt, 1, &mask)) < 0)
            return rc;
        if (weight) {
            struct ox_val *zero;
            if ((rc = ox_scalar(x, VQ_I64, 0, &zero)) < 0 ||
                (rc = ox_select(x, keep, t64, zero, NULL, &t64)) < 0)
                return rc;
        }
    }
    if (weight) {
        vq_attr g = VQ_ATTR_I("axis", 0);
        if ((rc = ox_cast(x, &weight, dt)) < 0 ||
            (rc = ox_emit(x, "gather", (struct ox_val *[]){weight, t64}, 2, NULL, 1, &g, 1, &w)) <
                0)
            return rc;
        if (mask &&
            (rc = ox_emit(x, "mul", (struct ox_val *[]){w, mask}, 2, NULL, 1, NULL, 0, &w)) < 0)
            return rc;
    } else {
        w = mask;
    }
    struct ox_val *loss, *wl = picked;
    if (w && (rc = ox_emit(x, "mul", (struct ox_val *[]){picked, w}, 2, NULL, 1, NULL, 0, &wl)) < 0)
        return rc;
    vq_attr neg[2] = {VQ_ATTR_F("scale", -1), VQ_ATTR_F("bias", 0)};
    vq_attr all[2] = {VQ_ATTR_IS("axes", NULL, 0), VQ_ATTR_B("keepdim", false)};
    if (none)
        return ox_emit(x, "scale", &wl, 1, &out_name, 1, neg, 2, NULL);
    if ((rc = ox_emit(x, "scale", &wl, 1, NULL, 1, neg, 2, &loss)) < 0)
        return rc;
    if (sum || !w)
        return ox_emit(x, sum ? "sum" : "mean", &loss, 1, &out_name, 1, all, 2, NULL);
    struct ox_val *num, *den;
    if ((rc = ox_emit(x, "sum", &loss, 1, NULL, 1, all, 2, &num)) < 0 ||
        (rc = ox_emit(x, "sum", &w, 1, NULL, 1, all, 2, &den)) < 0)
        return rc;
    return ox_emit(x, "div", (struct ox_val *[]){num, den}, 2, &out_name, 1, NULL, 0, NULL);
}

static int t_nll_loss(struct ox *x)
{
    return nll_loss(x, ox_input(x, 0), ox_input(x, 1), ox_input(x, 2), ox_out0(x));
}

/* SoftmaxCrossEntropyLoss: the loss above of log_softmax over axis 1,
 * which is the optional second output log_prob. */
static int t_sce_loss(struct ox *x)
{
    struct ox_val *scores = ox_input(x, 0), *lp;
    if (scores->meta.ndim < 2)
        return ox_fail(x, VQ_EINVAL, "the scores have rank %d: want [N, C, ...]",
                       scores->meta.ndim);
    vq_attr a = VQ_ATTR_I("axis", 1);
    const char *lp_name = ox_out(x, 1);
    int rc = ox_emit(x, "log_softmax", &scores, 1, &lp_name, 1, &a, 1, &lp);
    return rc ? rc : nll_loss(x, lp, ox_input(x, 1), ox_input(x, 2), ox_out0(x));
}

/* ---- the rows ---- */

/* ignore_index: none when absent */
#define LOSS_ATTRS OX_STR("reduction", "mean", 16), OX_INT("ignore_index", 0)
const struct ox_op ox_op_NegativeLogLikelihoodLoss =
    OX_ROW(t_nll_loss, NULL, 2, 3, true, OX_ATTRS(LOSS_ATTRS));
const struct ox_op ox_op_SoftmaxCrossEntropyLoss =
    OX_ROW(t_sce_loss, NULL, 2, 3, true, OX_ATTRS(LOSS_ATTRS));
