/* ONNX MaxUnpool (onnx/t_window.c), DFT and STFT (onnx/t_dft.c) imported
 * and run against references written out here: MaxUnpool of 1, 2 and 3
 * spatial dims as ONNX's reference computes it (the indices flat over
 * MaxPool's inverse size, output_shape adding zeros after each dim's
 * end); DFT and STFT against numpy.fft's values, generated with
 * /usr/bin/python3 and pasted as constants. */
#include <varq/varq.h>

#include "onnx.pb-c.h"

#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include "leakcheck.h"
#include "onnx_models.h"

TestSuite(onnx_unpool_dft, .fini = leak_check);

/* Runs m (imported) on the feeds, fetching y into a new tensor. */
static vq_tensor *run_model(Onnx__ModelProto *m, vq_feed *feeds, int nfeeds)
{
    struct imported im = import_ok(m);
    struct run r = run_new();
    vq_fetch f = {"y", NULL};
    cr_assert_eq(vq_exec_run(r.ex, im.p, im.s, feeds, nfeeds, &f, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(f.tensor), 0);
    imported_free(&im);
    run_free(&r);
    return f.tensor;
}

/* ---- MaxUnpool ---- */

/* X [1, 2, spatial...] (nx elements, values 1, 2, ...), I each X's index
 * flat over the inverse size isz; output_shape osz (NULL: none): the
 * result against the reference's loop. */
static void unpool_case(int sd, const int64_t *xsp, const int64_t *k, const int64_t *isz,
                        const int64_t *osz, const int64_t *iv)
{
    int64_t xs[5] = {1, 2}, os[5] = {1, 2};
    int64_t nx = 2, ni = 2, no = 2;
    for (int i = 0; i < sd; i++) {
        xs[2 + i] = xsp[i];
        os[2 + i] = osz ? osz[i] : isz[i];
        nx *= xsp[i];
        ni *= isz[i];
        no *= os[2 + i];
    }
    Onnx__ModelProto *m = model_new(11);
    add_input(m, "x", sd + 2, xs);
    add_input_of(m, "i", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, sd + 2, xs);
    if (osz)
        add_init_ints(m, "shape", sd + 2, os);
    Onnx__NodeProto *n = add_node(m, "MaxUnpool", "unpool",
                                  osz ? NAMES("x", "i", "shape") : NAMES("x", "i"), NAMES("y"));
    attr_ints(n, "kernel_shape", sd, k);
    attr_ints(n, "strides", sd, k);
    add_output(m, "y");
    float xv[64];
    for (int64_t e = 0; e < nx; e++)
        xv[e] = (float)(e + 1);
    vq_tensor *tx, *ti;
    cr_assert_eq(vq_tensor_from(&tx, VQ_F32, sd + 2, xs, xv), 0);
    cr_assert_eq(vq_tensor_from(&ti, VQ_I64, sd + 2, xs, iv), 0);
    vq_feed feeds[2] = {{"x", tx}, {"i", ti}};
    vq_tensor *y = run_model(m, feeds, 2);
    cr_assert_eq(vq_tensor_ndim(y), sd + 2);
    for (int i = 0; i < sd + 2; i++)
        cr_assert_eq(vq_tensor_shape(y)[i], os[i], "%d-D: dim %d", sd, i);
    /* the reference: scatter into the inverse size, then its corner of Out */
    float inv[256] = {0};
    cr_assert_leq(ni, 256);
    for (int64_t e = 0; e < nx; e++)
        inv[iv[e]] = xv[e];
    const float *got = vq_tensor_data(y);
    for (int64_t e = 0; e < no; e++) {
        int64_t rest = e, at = 0, mul = 1;
        bool inside = true;
        for (int d = sd + 1; d >= 0; d--) {
            int64_t c = rest % os[d], idim = d < 2 ? os[d] : isz[d - 2];
            rest /= os[d];
            inside &= c < idim;
            at += c * mul;
            mul *= idim;
        }
        float want = inside ? inv[at] : 0.0f;
        cr_assert_eq(got[e], want, "%d-D: element %lld: %g, expected %g", sd, (long long)e, got[e],
                     want);
    }
    vq_tensor_release(y);
    vq_tensor_release(tx);
    vq_tensor_release(ti);
}

Test(onnx_unpool_dft, max_unpool_of_1_2_and_3_spatial_dims_follows_onnxs_reference)
{
    /* 1-D: X [1, 2, 3], kernel 2: inverse size 6 */
    unpool_case(1, (int64_t[]){3}, (int64_t[]){2}, (int64_t[]){6}, NULL,
                (int64_t[]){1, 2, 5, 6, 9, 11});
    unpool_case(1, (int64_t[]){3}, (int64_t[]){2}, (int64_t[]){6}, (int64_t[]){8},
                (int64_t[]){0, 3, 4, 7, 8, 10});
    /* 2-D: X [1, 2, 2, 2], kernel 2: 4 x 4, output_shape 5 x 6 */
    unpool_case(2, (int64_t[]){2, 2}, (int64_t[]){2, 2}, (int64_t[]){4, 4}, (int64_t[]){5, 6},
                (int64_t[]){5, 2, 13, 15, 16, 19, 24, 31});
    /* 3-D: X [1, 2, 2, 1, 2], kernel 2: 4 x 2 x 4, with and without output_shape */
    const int64_t iv3[8] = {1, 6, 9, 31, 32, 37, 50, 63};
    unpool_case(3, (int64_t[]){2, 1, 2}, (int64_t[]){2, 2, 2}, (int64_t[]){4, 2, 4}, NULL, iv3);
    unpool_case(3, (int64_t[]){2, 1, 2}, (int64_t[]){2, 2, 2}, (int64_t[]){4, 2, 4},
                (int64_t[]){5, 3, 4}, iv3);
}

Test(onnx_unpool_dft, max_unpool_output_shape_smaller_than_the_unpooled_is_an_error)
{
    Onnx__ModelProto *m = model_new(11);
    add_input(m, "x", 4, (int64_t[]){1, 1, 2, 2});
    add_input_of(m, "i", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 4, (int64_t[]){1, 1, 2, 2});
    add_init_ints(m, "shape", 4, (int64_t[]){1, 1, 3, 4});
    Onnx__NodeProto *n = add_node(m, "MaxUnpool", "unpool", NAMES("x", "i", "shape"), NAMES("y"));
    attr_ints(n, "kernel_shape", 2, (int64_t[]){2, 2});
    attr_ints(n, "strides", 2, (int64_t[]){2, 2});
    add_output(m, "y");
    size_t len;
    uint8_t *buf = pack(m, &len);
    vq_scope *s;
    vq_program *p;
    cr_assert_eq(vq_scope_new(&s), 0);
    cr_assert_eq(vq_program_from_onnx(&p, s, buf, len), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "output_shape's dim 2 is 3, less than the unpooled 4"), "%s",
              vq_errmsg());
    vq_scope_free(s);
    free(buf);
    onnx__model_proto__free_unpacked(m, NULL);
}

/* ---- DFT and STFT ---- */

/* numpy's (/usr/bin/python3: numpy.fft.fft of each windowed frame, the
 * onesided bins taken; inputs sig(i) over the flat index, rounded to
 * float, the window 0.5 - 0.5 cos(2 pi j / 8) in float). */
/* [2, 5, 5, 2] */
static const double STFT_WINDOWED[100] = {0.0100603456,   0,
                                          0.507295042,    0.116383928,
                                          0.33408682,     -0.0338807297,
                                          -2.26819912,    -0.121586752,
                                          2.84357416,     0,
                                          1.83087142,     0,
                                          -1.32608161,    0.608693758,
                                          1.0992994,      0.229617455,
                                          -0.409206535,   -0.889868042,
                                          -0.558893935,   0,
                                          1.60203134,     0,
                                          -1.20683173,    -0.841343483,
                                          1.18473142,     0.316646573,
                                          -0.764368856,   0.38567392,
                                          -0.0290930213,  0,
                                          -0.365680026,   0,
                                          -0.0652314043,  -0.333195338,
                                          1.21723209,     -0.568004086,
                                          -1.63208751,    0.690737521,
                                          1.32585368,     0,
                                          -1.06350892,    0,
                                          0.512664679,    0.43379605,
                                          0.241149165,    -1.15471511,
                                          -0.331657219,   0.43347797,
                                          0.219195666,    0,
                                          0.000370420053, 0,
                                          0.19117447,     0.989877889,
                                          -0.366819222,   -1.38450705,
                                          -0.210960342,   0.803806821,
                                          0.772839768,    0,
                                          -0.126045052,   0,
                                          0.546091018,    -0.754015476,
                                          -1.12870237,    1.04485098,
                                          0.198422077,    -1.1057339,
                                          0.894423608,    0,
                                          0.148450077,    0,
                                          -0.348310178,   0.499327896,
                                          -0.518954948,   -0.082613195,
                                          2.17349977,     -0.53868285,
                                          -2.76091936,    0,
                                          -1.22587624,    0,
                                          1.17609614,     -1.20179958,
                                          -0.96064648,    1.08484805,
                                          0.322557627,    0.304355971,
                                          0.149861665,    0,
                                          -0.305502423,   0,
                                          -0.598068641,   0.789957622,
                                          1.45538774,     -0.66772149,
                                          -0.651306464,   0.687643925,
                                          -0.10652285,    0};
/* [1, 2, 5, 2] */
static const double STFT_COMPLEX[20] = {3.229031,    0.401586235,  -2.67760335,  0.800098786,
                                        1.50502699,  1.5469419,    -0.228718693, 1.1530797,
                                        2.37961884,  1.0776976,    0.165022366,  0.784253791,
                                        2.62210934,  -0.105151493, -2.3148803,   -0.823536252,
                                        0.988028686, 1.35608891,   0.611607759,  1.3764729};
/* [1, 6, 2] */
static const double DFT_PADDED[12] = {1.26610366,   0,
                                      2.12434946,   -1.23257994,
                                      -0.868787423, -0.492336278,
                                      1.27159801,   1.11022302e-16,
                                      -0.868787423, 0.492336278,
                                      2.12434946,   1.23257994};

static float sig(int64_t i)
{
    return (float)sin(0.37 * (double)i * (double)i + 0.11 * (double)i + 1);
}

/* y against want (n values) to 1e-5 of the larger magnitude. */
static void expect_values(vq_tensor *y, int ndim, const int64_t *shape, const double *want)
{
    cr_assert_eq(vq_tensor_ndim(y), ndim);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        cr_assert_eq(vq_tensor_shape(y)[d], shape[d], "dim %d", d);
        n *= shape[d];
    }
    const float *got = vq_tensor_data(y);
    for (int64_t e = 0; e < n; e++)
        cr_assert(fabs(got[e] - want[e]) <= 1e-5 * fmax(1, fabs(want[e])),
                  "element %lld: %.9g, expected %.9g", (long long)e, got[e], want[e]);
}

static vq_tensor *signal_of(int ndim, const int64_t *shape)
{
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, VQ_F32, ndim, shape), 0);
    float *d = vq_tensor_data(t);
    for (int64_t i = 0; i < vq_tensor_numel(t); i++)
        d[i] = sig(i);
    return t;
}

Test(onnx_unpool_dft, stft_frames_windows_and_transforms_a_real_or_complex_signal)
{
    /* a real signal, frame_step 3, a window of 8: 5 frames, onesided 5 bins */
    Onnx__ModelProto *m = model_new(17);
    add_input(m, "x", 3, (int64_t[]){2, 20, 1});
    add_input(m, "w", 1, (int64_t[]){8});
    add_init_ints(m, "step", 1, (int64_t[]){3});
    add_node(m, "STFT", "stft", NAMES("x", "step", "w"), NAMES("y"));
    add_output(m, "y");
    vq_tensor *x = signal_of(3, (int64_t[]){2, 20, 1}), *w;
    float wv[8];
    for (int j = 0; j < 8; j++)
        wv[j] = (float)(0.5 - 0.5 * cos(2 * M_PI * j / 8));
    cr_assert_eq(vq_tensor_from(&w, VQ_F32, 1, (int64_t[]){8}, wv), 0);
    vq_feed f1[2] = {{"x", x}, {"w", w}};
    vq_tensor *y = run_model(m, f1, 2);
    expect_values(y, 4, (int64_t[]){2, 5, 5, 2}, STFT_WINDOWED);
    vq_tensor_release(y);
    vq_tensor_release(x);
    vq_tensor_release(w);
    /* a complex one, frame_length 5 and no window, both sides */
    m = model_new(17);
    add_input(m, "x", 3, (int64_t[]){1, 12, 2});
    add_init_ints(m, "step", 1, (int64_t[]){4});
    add_init_ints(m, "len", 1, (int64_t[]){5});
    Onnx__NodeProto *n = add_node(m, "STFT", "stft", NAMES("x", "step", "", "len"), NAMES("y"));
    attr_int(n, "onesided", 0);
    add_output(m, "y");
    x = signal_of(3, (int64_t[]){1, 12, 2});
    vq_feed f2 = {"x", x};
    y = run_model(m, &f2, 1);
    expect_values(y, 4, (int64_t[]){1, 2, 5, 2}, STFT_COMPLEX);
    vq_tensor_release(y);
    vq_tensor_release(x);
}

Test(onnx_unpool_dft, dft_pads_the_signal_to_its_dft_length)
{
    Onnx__ModelProto *m = model_new(17);
    add_input(m, "x", 3, (int64_t[]){1, 4, 1});
    add_init_ints(m, "n", 1, (int64_t[]){6});
    add_node(m, "DFT", "dft", NAMES("x", "n"), NAMES("y"));
    add_output(m, "y");
    vq_tensor *x = signal_of(3, (int64_t[]){1, 4, 1});
    vq_feed f = {"x", x};
    vq_tensor *y = run_model(m, &f, 1);
    expect_values(y, 3, (int64_t[]){1, 6, 2}, DFT_PADDED);
    vq_tensor_release(y);
    vq_tensor_release(x);
}
