/* ONNX's reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin and
 * ReduceProd as varq's reductions; ReduceSumSquare, ReduceL1, ReduceL2,
 * ReduceLogSum and ReduceLogSumExp as a sum between elementwise ops. Their
 * axes are an attribute before opset 18 (13 for ReduceSum), an input
 * since. */
#include "onnx_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ReduceSum (axes an input since opset 13), ReduceMean, ReduceMax,
 * ReduceMin, ReduceProd (since 18): the row's varq op. */
static int t_reduce(struct ox *x)
{
    const char *type = ox_type(x), *o = ox_out0(x);
    struct ox_val *v = ox_input(x, 0);
    int64_t axes[OX_MAXI];
    int n, rc = ox_axes(x, strcmp(type, "sum") ? 18 : 13, axes, &n);
    if (rc)
        return rc;
    if (n <= 0 && ox_int(x, "noop_with_empty_axes"))
        return ox_alias(x, o, v);
    vq_attr a[2] = {VQ_ATTR_IS("axes", axes, n < 0 ? 0 : n),
                    VQ_ATTR_B("keepdim", ox_int(x, "keepdims") != 0)};
    return ox_emit(x, type, &v, 1, &o, 1, a, 2, NULL);
}

/* ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp: an
 * elementwise op (pre), a sum over the axes (attributes before opset 18),
 * an elementwise op after (post); NULL for none. */
static int reduce_wrapped(struct ox *x, const char *pre, const char *post)
{
    struct ox_val *v = ox_input(x, 0), *p = v, *s;
    int64_t axes[OX_MAXI];
    int n, rc = ox_axes(x, 18, axes, &n);
    if (rc == 0 && pre && !strcmp(pre, "square"))
        rc = ox_emit(x, "mul", (struct ox_val *[]){v, v}, 2, NULL, 1, NULL, 0, &p);
    else if (rc == 0 && pre)
        rc = ox_emit(x, pre, &v, 1, NULL, 1, NULL, 0, &p);
    vq_attr a[2] = {VQ_ATTR_IS("axes", axes, n < 0 ? 0 : n),
                    VQ_ATTR_B("keepdim", ox_int(x, "keepdims") != 0)};
    const char *o = ox_out0(x), *name = post ? NULL : o;
    if (rc == 0)
        rc = ox_emit(x, "sum", &p, 1, &name, 1, a, 2, &s);
    return rc || !post ? rc : ox_emit(x, post, &s, 1, &o, 1, NULL, 0, NULL);
}

static int t_reduce_sum_square(struct ox *x)
{
    return reduce_wrapped(x, "square", NULL);
}

static int t_reduce_l1(struct ox *x)
{
    return reduce_wrapped(x, "abs", NULL);
}

static int t_reduce_l2(struct ox *x)
{
    return reduce_wrapped(x, "square", "sqrt");
}

static int t_reduce_log_sum(struct ox *x)
{
    return reduce_wrapped(x, NULL, "log");
}

static int t_reduce_log_sum_exp(struct ox *x)
{
    return reduce_wrapped(x, "exp", "log");
}

/* ---- the rows ---- */

#define REDUCE(name, type, last)                                                        \
    const struct ox_op ox_op_##name =                                                   \
        OX_ROW(t_reduce, type, 1, 2, true,                                              \
               OX_ATTRS(OX_INTS("axes", OX_MAXI, .until = last), OX_INT("keepdims", 1), \
                        OX_INT("noop_with_empty_axes", 0)));
#define REDUCE_WRAPPED(name, fn)      \
    const struct ox_op ox_op_##name = \
        OX_ROW(fn, NULL, 1, 2, true,  \
               OX_ATTRS(OX_INTS("axes", OX_MAXI, .until = 18), OX_INT("keepdims", 1)));

REDUCE(ReduceSum, "sum", 13)
REDUCE(ReduceMean, "mean", 18)
REDUCE(ReduceMax, "reduce_max", 18)
REDUCE(ReduceMin, "reduce_min", 18)
REDUCE(ReduceProd, "reduce_prod", 18)
REDUCE_WRAPPED(ReduceSumSquare, t_reduce_sum_square)
REDUCE_WRAPPED(ReduceL1, t_reduce_l1)
REDUCE_WRAPPED(ReduceL2, t_reduce_l2)
REDUCE_WRAPPED(ReduceLogSum, t_reduce_log_sum)
REDUCE_WRAPPED(ReduceLogSumExp, t_reduce_log_sum_exp)
