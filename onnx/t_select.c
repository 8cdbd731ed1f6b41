/* ONNX's ops whose output shapes depend on data: NonZero, TopK, Unique,
 * Compress and NonMaxSuppression, each onto the varq op of the same job
 * (ops/cpu/dynamic.c). Those ops read the values that decide their
 * outputs' sizes when they run, so the imported program declares those
 * dims unknown (-1) and one prepared plan serves any data. */
#include "onnx_internal.h"

#include <string.h>

/* NonZero(X): nonzero, i64 [rank, count]. */
static int t_nonzero(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    const char *o = ox_out0(x);
    return ox_emit(x, "nonzero", &v, 1, &o, 1, NULL, 0, NULL);
}

/* TopK(X[, K]; axis, largest, sorted, k): top_k, K an attribute before
 * opset 10 and an input since; a K known at import becomes the attribute,
 * so that the outputs' dims are known, else the op reads it when it runs. */
static int t_top_k(struct ox *x)
{
    struct ox_val *in[2] = {ox_input(x, 0), x->opset >= 10 ? ox_input(x, 1) : NULL};
    int64_t k = ox_int(x, "k");
    int rc = 0;
    if (x->opset >= 10) {
        if (!in[1])
            return ox_fail(x, VQ_EINVAL, "input K is absent");
        if (ox_known(x, in[1])) {
            int n;
            if ((rc = ox_const_ints(x, 1, "K", &k, 1, &n)) < 0)
                return rc;
            in[1] = NULL;
        } else if ((rc = ox_cast(x, &in[1], VQ_I64)) < 0) {
            return rc;
        }
    }
    vq_attr a[3] = {VQ_ATTR_I("axis", ox_int(x, "axis")),
                    VQ_ATTR_B("largest", ox_int(x, "largest") != 0), VQ_ATTR_I("k", k)};
    const char *o[2] = {ox_out0(x), ox_out(x, 1)};
    return ox_emit(x, "top_k", in, in[1] ? 2 : 1, o, 2, a, in[1] ? 2 : 3, NULL);
}

/* Unique(X; sorted, axis): unique; its absent outputs are temporaries. */
static int t_unique(struct ox *x)
{
    struct ox_val *v = ox_input(x, 0);
    vq_attr a[2] = {VQ_ATTR_B("sorted", ox_int(x, "sorted") != 0),
                    VQ_ATTR_I("axis", ox_int(x, "axis"))};
    const char *o[4] = {ox_out0(x), ox_out(x, 1), ox_out(x, 2), ox_out(x, 3)};
    return ox_emit(x, "unique", &v, 1, o, 4, a, ox_given(x, "axis") ? 2 : 1, NULL);
}

/* Compress(X, condition; axis): compress, X flattened without the axis. */
static int t_compress(struct ox *x)
{
    struct ox_val *in[2] = {ox_input(x, 0), ox_input(x, 1)};
    vq_attr a = VQ_ATTR_I("axis", ox_int(x, "axis"));
    const char *o = ox_out0(x);
    int rc = ox_cast(x, &in[1], VQ_BOOL);
    return rc < 0 ? rc : ox_emit(x, "compress", in, 2, &o, 1, &a, ox_given(x, "axis"), NULL);
}

/* NonMaxSuppression(boxes, scores[, max_output_boxes_per_class,
 * iou_threshold, score_threshold]; center_point_box): the two absent
 * bounds as ONNX's defaults (0: nothing selected; 0), an absent score
 * threshold as none. */
static int t_nms(struct ox *x)
{
    struct ox_val *in[5] = {ox_input(x, 0), ox_input(x, 1), ox_input(x, 2), ox_input(x, 3),
                            ox_input(x, 4)};
    int rc = 0;
    if (!in[2])
        rc = ox_scalar(x, VQ_I64, 0, &in[2]);
    if (rc == 0 && !in[3])
        rc = ox_scalar(x, VQ_F32, 0, &in[3]);
    if (rc < 0)
        return rc;
    vq_attr a = VQ_ATTR_I("center_point_box", ox_int(x, "center_point_box"));
    const char *o = ox_out0(x);
    return ox_emit(x, "non_max_suppression", in, in[4] ? 5 : 4, &o, 1, &a, 1, NULL);
}

/* ---- the rows ---- */

const struct ox_op ox_op_NonZero = OX_ROW(t_nonzero, NULL, 1, 1, true, NULL);
/* k: an attribute before opset 10; largest and sorted since 11 */
const struct ox_op ox_op_TopK =
    OX_ROW(t_top_k, NULL, 1, 2, true,
           OX_ATTRS(OX_INT("axis", -1), OX_INT("k", 0, .until = 10),
                    OX_INT("largest", 1, .since = 11), OX_INT("sorted", 1, .since = 11)));
const struct ox_op ox_op_Unique =
    OX_ROW(t_unique, NULL, 1, 1, true, OX_ATTRS(OX_INT("sorted", 1), OX_INT("axis", 0)));
const struct ox_op ox_op_Compress =
    OX_ROW(t_compress, NULL, 2, 2, true, OX_ATTRS(OX_INT("axis", 0)));
const struct ox_op ox_op_NonMaxSuppression =
    OX_ROW(t_nms, NULL, 2, 5, true, OX_ATTRS(OX_INT("center_point_box", 0)));
