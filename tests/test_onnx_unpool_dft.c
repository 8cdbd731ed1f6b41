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
