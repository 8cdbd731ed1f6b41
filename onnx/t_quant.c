/* ONNX's quantized ops as varq's (ops/cpu/quant.c, qproduct.c): QuantizeLinear and
 * DequantizeLinear (opsets 10 to 19: per tensor, per axis since 13, f16
 * and bf16 scales since 19; the float8 types of 19 have no varq dtype),
 * DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul and
 * QLinearConv. Absent zero points become zeros of their operand's dtype
 * (the varq ops take them as inputs); the convolutions read their window
 * as Conv does (t_window.c), 1-D ones lifted to 2-D images. */
#include "onnx_internal.h"

/* QuantizeLinear(x, y_scale[, y_zero_point]; axis): quantize_linear. */
static int t_quantize(struct ox *x)
{
    struct ox_val *in[3] = {ox_input(x, 0), ox_input(x, 1), ox_input(x, 2)};
    vq_attr a = VQ_ATTR_I("axis", ox_int(x, "axis"));
    const char *o = ox_out0(x);
    return ox_emit(x, ox_type(x), in, in[2] ? 3 : 2, &o, 1, &a, 1, NULL);
}

/* DynamicQuantizeLinear(x) -> y, y_scale, y_zero_point. */
static int t_dynamic_quantize(struct ox *x)
{
    struct ox_val *in = ox_input(x, 0);
    const char *o[3] = {ox_out(x, 0), ox_out(x, 1), ox_out(x, 2)};
    return ox_emit(x, "dynamic_quantize_linear", &in, 1, o, 3, NULL, 0, NULL);
}

/* Input i, or a zero of like's dtype when the node leaves it out. */
static int zero_point(struct ox *x, int i, const struct ox_val *like, struct ox_val **out)
{
    *out = ox_input(x, i);
    return *out ? 0 : ox_scalar(x, like->meta.dtype, 0, out);
}

/* MatMulInteger(A, B[, a_zero_point[, b_zero_point]]) -> i32. */
static int t_matmul_integer(struct ox *x)
{
    struct ox_val *in[4] = {ox_input(x, 0), ox_input(x, 1)};
    int rc = zero_point(x, 2, in[0], &in[2]);
    if (rc == 0)
        rc = zero_point(x, 3, in[1], &in[3]);
    const char *o = ox_out0(x);
    return rc ? rc : ox_emit(x, "matmul_integer", in, 4, &o, 1, NULL, 0, NULL);
}

/* QLinearMatMul(a, a_scale, a_zero_point, b, b_scale, b_zero_point,
 * y_scale, y_zero_point). */
static int t_qlinear_matmul(struct ox *x)
{
    struct ox_val *in[8];
    for (int i = 0; i < 8; i++)
        in[i] = ox_input(x, i);
    const char *o = ox_out0(x);
    return ox_emit(x, "qlinear_matmul", in, 8, &o, 1, NULL, 0, NULL);
}

/* The 2-D window of a quantized convolution of in[xi] by in[wi] (both
 * lifted when 1-D) as conv2d's attributes, then the op into output 0. */
static int qconv_emit(struct ox *x, const char *type, struct ox_val **in, int nin, int xi, int wi)
{
    int64_t strides[3], dil[3], pads[6];
    int sd = 0;
    int rc = ox_qconv_window(x, &in[xi], &in[wi], &sd, strides, dil, pads);
    if (rc)
        return rc;
    vq_attr a[4] = {VQ_ATTR_IS("strides", strides, 2), VQ_ATTR_IS("pads", pads, 4),
                    VQ_ATTR_IS("dilations", dil, 2), VQ_ATTR_I("groups", ox_int(x, "group"))};
    return ox_window_emit(x, type, in, nin, sd, a, 4);
}

/* ConvInteger(x, w[, x_zero_point[, w_zero_point]]) -> i32. */
static int t_conv_integer(struct ox *x)
{
    struct ox_val *in[4] = {ox_input(x, 0), ox_input(x, 1)};
    int rc = zero_point(x, 2, in[0], &in[2]);
    if (rc == 0)
        rc = zero_point(x, 3, in[1], &in[3]);
    return rc ? rc : qconv_emit(x, "conv_integer", in, 4, 0, 1);
}

/* QLinearConv(x, x_scale, x_zero_point, w, w_scale, w_zero_point,
 * y_scale, y_zero_point[, B]). */
static int t_qlinear_conv(struct ox *x)
{
    struct ox_val *in[9];
    for (int i = 0; i < 9; i++)
        in[i] = ox_input(x, i);
    return qconv_emit(x, "qlinear_conv", in, in[8] ? 9 : 8, 0, 3);
}

#define QCONV_ATTRS                                                                       \
    OX_ATTRS(OX_INTS("strides", 3), OX_STR("auto_pad", "NOTSET", 32), OX_INTS("pads", 6), \
             OX_INTS("dilations", 3), OX_INT("group", 1), OX_INTS("kernel_shape", 3))

const struct ox_op ox_op_QuantizeLinear =
    OX_ROW(t_quantize, "quantize_linear", 2, 3, true,
           OX_ATTRS(OX_INT("axis", 1, .since = 13), OX_INT("saturate", 1, .since = 19)));
const struct ox_op ox_op_DequantizeLinear =
    OX_ROW(t_quantize, "dequantize_linear", 2, 3, true, OX_ATTRS(OX_INT("axis", 1, .since = 13)));
const struct ox_op ox_op_DynamicQuantizeLinear =
    OX_ROW(t_dynamic_quantize, NULL, 1, 1, false, NULL);
const struct ox_op ox_op_MatMulInteger = OX_ROW(t_matmul_integer, NULL, 2, 4, true, NULL);
const struct ox_op ox_op_QLinearMatMul = OX_ROW(t_qlinear_matmul, NULL, 8, 8, true, NULL);
const struct ox_op ox_op_ConvInteger = OX_ROW(t_conv_integer, NULL, 2, 4, true, QCONV_ATTRS);
const struct ox_op ox_op_QLinearConv = OX_ROW(t_qlinear_conv, NULL, 8, 9, true, QCONV_ATTRS);
