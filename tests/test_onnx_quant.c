/* Quantized ONNX models beyond ONNX's conformance cases: QDQ fusion at
 * import (onnx/qdq.c: DequantizeLinear -> Conv / MatMul -> QuantizeLinear
 * becomes one qlinear_conv / qlinear_matmul, with the bits of that op run
 * directly and within one quantization step of the unfused ops; a pattern
 * with another reader stays unfused), and the translations' defaults
 * (MatMulInteger without zero points, a 1-D ConvInteger lifted to 2-D). */
#include "onnx_models.h"

#include <math.h>

#define U8 ONNX__TENSOR_PROTO__DATA_TYPE__UINT8
#define I8 ONNX__TENSOR_PROTO__DATA_TYPE__INT8
#define I32 ONNX__TENSOR_PROTO__DATA_TYPE__INT32
#define F32 ONNX__TENSOR_PROTO__DATA_TYPE__FLOAT

static char *dump_of(vq_program *p)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert_eq(vq_program_dump(p, f), 0);
    fclose(f);
    return text;
}

static vq_tensor *tensor_of(vq_dtype dt, int ndim, const int64_t *shape, const void *data)
{
    vq_tensor *t;
    cr_assert_eq(vq_tensor_from(&t, dt, ndim, shape, data), 0);
    return t;
}

static vq_tensor *op1(const char *type, vq_tensor **in, int nin, const vq_attr *a, int na)
{
    vq_tensor *out = NULL;
    cr_assert_eq(vq_op_run(NULL, type, in, nin, &out, 1, a, na), 0, "%s: %s", type, vq_errmsg());
    return out;
}

/* The data of the QDQ convolution: x [1, 3, 6, 6] u8, w [4, 3, 3, 3] i8
 * per output channel, bias [4] i32 at scale xs * ws. */
static uint8_t xq[108];
static int8_t wq[108], wz[4];
static int32_t bq[4] = {300, -1200, 0, 4000};
static float xs = 0.05f, ws[4] = {0.004f, 0.01f, 0.007f, 0.002f}, bs[4], ys = 0.08f;
static uint8_t xz = 120, yz = 110;

static void conv_data(void)
{
    for (int i = 0; i < 108; i++) {
        xq[i] = (uint8_t)(37 * i + 11);
        wq[i] = (int8_t)(int)(100 * sin(0.7 * i));
    }
    for (int m = 0; m < 4; m++)
        bs[m] = xs * ws[m];
}

/* The QDQ model; extra: x's DequantizeLinear output is a graph output too
 * (a second reader: no fusion). */
static Onnx__ModelProto *qdq_conv_model(bool extra)
{
    Onnx__ModelProto *m = model_new(13);
    add_input_of(m, "xq", U8, 4, (int64_t[]){1, 3, 6, 6});
    add_init_of(m, "xs", F32, 4, 0, NULL, &xs);
    add_init_of(m, "xz", U8, 1, 0, NULL, &xz);
    add_init_of(m, "wq", I8, 1, 4, (int64_t[]){4, 3, 3, 3}, wq);
    add_init_of(m, "ws", F32, 4, 1, (int64_t[]){4}, ws);
    add_init_of(m, "wz", I8, 1, 1, (int64_t[]){4}, wz);
    add_init_of(m, "bq", I32, 4, 1, (int64_t[]){4}, bq);
    add_init_of(m, "bs", F32, 4, 1, (int64_t[]){4}, bs);
    add_init_of(m, "ys", F32, 4, 0, NULL, &ys);
    add_init_of(m, "yz", U8, 1, 0, NULL, &yz);
    add_node(m, "DequantizeLinear", "dx", NAMES("xq", "xs", "xz"), NAMES("x"));
    attr_int(add_node(m, "DequantizeLinear", "dw", NAMES("wq", "ws", "wz"), NAMES("w")), "axis", 0);
    attr_int(add_node(m, "DequantizeLinear", "db", NAMES("bq", "bs"), NAMES("b")), "axis", 0);
    attr_ints(add_node(m, "Conv", "conv", NAMES("x", "w", "b"), NAMES("y")), "pads", 4,
              (int64_t[]){1, 1, 1, 1});
    add_node(m, "QuantizeLinear", "q", NAMES("y", "ys", "yz"), NAMES("yq"));
    add_output(m, "yq");
    if (extra)
        add_output(m, "x");
    return m;
}

/* yq of the imported model on xq, run on r (freed after the model's
 * scope: onnx_models.h's run_free). */
static vq_tensor *run_model(struct run *r, struct imported *im)
{
    vq_tensor *tx = tensor_of(VQ_U8, 4, (int64_t[]){1, 3, 6, 6}, xq);
    vq_feed feed = {"xq", tx};
    vq_fetch fetch = {"yq", NULL};
    cr_assert_eq(vq_exec_run(r->ex, im->p, im->s, &feed, 1, &fetch, 1), 0, "%s", vq_errmsg());
    vq_tensor_release(tx);
    return fetch.tensor;
}

Test(onnx_quant, qdq_conv_is_one_qlinear_conv_with_its_bits)
{
    conv_data();
    struct imported im = import_ok(qdq_conv_model(false));
    char *text = dump_of(im.p);
    cr_assert(strstr(text, "qlinear_conv"), "%s", text);
    cr_assert(!strstr(text, "conv2d") && !strstr(text, "quantize_linear"), "%s", text);
    free(text);
    struct run r = run_new();
    vq_tensor *y = run_model(&r, &im);
    /* the op itself on the same tensors */
    int64_t four = 4;
    vq_tensor *in[9] = {tensor_of(VQ_U8, 4, (int64_t[]){1, 3, 6, 6}, xq),
                        tensor_of(VQ_F32, 0, NULL, &xs),
                        tensor_of(VQ_U8, 0, NULL, &xz),
                        tensor_of(VQ_I8, 4, (int64_t[]){4, 3, 3, 3}, wq),
                        tensor_of(VQ_F32, 1, &four, ws),
                        tensor_of(VQ_I8, 1, &four, wz),
                        tensor_of(VQ_F32, 0, NULL, &ys),
                        tensor_of(VQ_U8, 0, NULL, &yz),
                        tensor_of(VQ_I32, 1, &four, bq)};
    static const int64_t pads[4] = {1, 1, 1, 1};
    vq_attr pa = VQ_ATTR_IS("pads", pads, 4);
    vq_tensor *want = op1("qlinear_conv", in, 9, &pa, 1);
    cr_assert_eq(vq_tensor_numel(y), 144);
    cr_assert_eq(memcmp(vq_tensor_data(y), vq_tensor_data(want), 144), 0);
    /* and within a step of the unfused ops: dequantize, f32 conv, quantize */
    vq_tensor *dx = op1("dequantize_linear", (vq_tensor *[]){in[0], in[1], in[2]}, 3, NULL, 0);
    vq_attr ax0 = VQ_ATTR_I("axis", 0);
    vq_tensor *dw = op1("dequantize_linear", (vq_tensor *[]){in[3], in[4], in[5]}, 3, &ax0, 1);
    vq_tensor *bsv = tensor_of(VQ_F32, 1, &four, bs);
    vq_tensor *db = op1("dequantize_linear", (vq_tensor *[]){in[8], bsv}, 2, &ax0, 1);
    vq_tensor *cf = op1("conv2d", (vq_tensor *[]){dx, dw, db}, 3, &pa, 1);
    vq_tensor *qf = op1("quantize_linear", (vq_tensor *[]){cf, in[6], in[7]}, 3, NULL, 0);
    const uint8_t *a = vq_tensor_data(y), *b = vq_tensor_data(qf);
    for (int i = 0; i < 144; i++)
        cr_assert(abs(a[i] - b[i]) <= 1, "[%d]: fused %d, unfused %d", i, a[i], b[i]);
    vq_tensor *all[] = {y, want, dx, dw, bsv, db, cf, qf};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        vq_tensor_release(all[i]);
    for (int i = 0; i < 9; i++)
        vq_tensor_release(in[i]);
    imported_free(&im);
    run_free(&r);
}

Test(onnx_quant, a_dequantized_input_read_twice_stays_unfused)
{
    conv_data();
    struct imported im = import_ok(qdq_conv_model(true));
    char *text = dump_of(im.p);
    cr_assert(strstr(text, "conv2d") && !strstr(text, "qlinear_conv"), "%s", text);
    free(text);
    struct imported fused = import_ok(qdq_conv_model(false));
    struct run r = run_new();
    vq_tensor *y = run_model(&r, &im), *yf = run_model(&r, &fused);
    const uint8_t *a = vq_tensor_data(y), *b = vq_tensor_data(yf);
    for (int i = 0; i < 144; i++)
        cr_assert(abs(a[i] - b[i]) <= 1, "[%d]: unfused %d, fused %d", i, a[i], b[i]);
    vq_tensor_release(y);
    vq_tensor_release(yf);
    imported_free(&im);
    imported_free(&fused);
    run_free(&r);
}

/* MatMul with B per column (axis 1 of [K, N]): one qlinear_matmul. */
Test(onnx_quant, qdq_matmul_with_per_column_weights_is_one_qlinear_matmul)
{
    enum { M = 3, K = 20, N = 5 };
    static uint8_t a[M * K], az = 128, yzm = 100;
    static int8_t b[K * N], bz[N];
    static float as = 0.02f, bsc[N] = {0.01f, 0.02f, 0.015f, 0.03f, 0.005f}, ysm = 0.1f;
    for (int i = 0; i < M * K; i++)
        a[i] = (uint8_t)(91 * i + 7);
    for (int i = 0; i < K * N; i++)
        b[i] = (int8_t)(int)(120 * cos(0.3 * i));
    Onnx__ModelProto *m = model_new(13);
    add_input_of(m, "aq", U8, 2, (int64_t[]){M, K});
    add_init_of(m, "as", F32, 4, 0, NULL, &as);
    add_init_of(m, "az", U8, 1, 0, NULL, &az);
    add_init_of(m, "bq", I8, 1, 2, (int64_t[]){K, N}, b);
    add_init_of(m, "bs", F32, 4, 1, (int64_t[]){N}, bsc);
    add_init_of(m, "bz", I8, 1, 1, (int64_t[]){N}, bz);
    add_init_of(m, "ys", F32, 4, 0, NULL, &ysm);
    add_init_of(m, "yz", U8, 1, 0, NULL, &yzm);
    add_node(m, "DequantizeLinear", "da", NAMES("aq", "as", "az"), NAMES("a"));
    attr_int(add_node(m, "DequantizeLinear", "db", NAMES("bq", "bs", "bz"), NAMES("b")), "axis", 1);
    add_node(m, "MatMul", "mm", NAMES("a", "b"), NAMES("y"));
    add_node(m, "QuantizeLinear", "q", NAMES("y", "ys", "yz"), NAMES("yq"));
    add_output(m, "yq");
    struct imported im = import_ok(m);
    char *text = dump_of(im.p);
    cr_assert(strstr(text, "qlinear_matmul") && !strstr(text, " matmul("), "%s", text);
    free(text);
    struct run r = run_new();
    vq_tensor *ta = tensor_of(VQ_U8, 2, (int64_t[]){M, K}, a);
    vq_feed feed = {"aq", ta};
    vq_fetch fetch = {"yq", NULL};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, &feed, 1, &fetch, 1), 0, "%s", vq_errmsg());
    const uint8_t *y = vq_tensor_data(fetch.tensor);
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            int32_t acc = 0;
            for (int p = 0; p < K; p++)
                acc += (a[i * K + p] - az) * (b[p * N + j] - bz[j]);
            float v = nearbyintf((float)acc * (as * bsc[j] / ysm)) + yzm;
            v = fminf(fmaxf(v, 0), 255);
            cr_assert_eq(y[i * N + j], (uint8_t)v, "(%d, %d)", i, j);
        }
    vq_tensor_release(fetch.tensor);
    vq_tensor_release(ta);
    imported_free(&im);
    run_free(&r);
}

/* MatMulInteger without zero points, and a ConvInteger over lines ([N, C,
 * L], lifted to images of height 1) with auto_pad SAME_UPPER. */
Test(onnx_quant, integer_products_default_zero_points_and_1d_windows)
{
    Onnx__ModelProto *m = model_new(10);
    add_input_of(m, "a", U8, 2, (int64_t[]){2, 3});
    add_input_of(m, "b", I8, 2, (int64_t[]){3, 2});
    add_input_of(m, "x", U8, 3, (int64_t[]){1, 1, 5});
    add_input_of(m, "w", U8, 3, (int64_t[]){1, 1, 3});
    add_node(m, "MatMulInteger", "mi", NAMES("a", "b"), NAMES("y"));
    Onnx__NodeProto *c = add_node(m, "ConvInteger", "ci", NAMES("x", "w"), NAMES("z"));
    attr_string(c, "auto_pad", "SAME_UPPER");
    add_outputs(m, NAMES("y", "z"));
    struct imported im = import_ok(m);
    static const uint8_t av[6] = {1, 2, 3, 4, 5, 250}, xv[5] = {1, 2, 3, 4, 5}, wv[3] = {1, 0, 2};
    static const int8_t bv[6] = {1, -1, 2, -2, 3, -128};
    vq_tensor *t[4] = {tensor_of(VQ_U8, 2, (int64_t[]){2, 3}, av),
                       tensor_of(VQ_I8, 2, (int64_t[]){3, 2}, bv),
                       tensor_of(VQ_U8, 3, (int64_t[]){1, 1, 5}, xv),
                       tensor_of(VQ_U8, 3, (int64_t[]){1, 1, 3}, wv)};
    vq_feed feed[4] = {{"a", t[0]}, {"b", t[1]}, {"x", t[2]}, {"w", t[3]}};
    vq_fetch fetch[2] = {{"y", NULL}, {"z", NULL}};
    struct run r = run_new();
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, feed, 4, fetch, 2), 0, "%s", vq_errmsg());
    const int32_t *y = vq_tensor_data(fetch[0].tensor), *z = vq_tensor_data(fetch[1].tensor);
    static const int32_t wy[4] = {14, -389, 764, -32014}, wzv[5] = {4, 7, 10, 13, 4};
    cr_assert_eq(vq_tensor_dtype(fetch[0].tensor), VQ_I32);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(y[i], wy[i], "y[%d] = %d", i, y[i]);
    cr_assert_eq(vq_tensor_ndim(fetch[1].tensor), 3);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(z[i], wzv[i], "z[%d] = %d", i, z[i]);
    for (int i = 0; i < 4; i++)
        vq_tensor_release(t[i]);
    vq_tensor_release(fetch[0].tensor);
    vq_tensor_release(fetch[1].tensor);
    imported_free(&im);
    run_free(&r);
}
