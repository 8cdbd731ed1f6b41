/* grid_sample and roi_align (ops/cpu/sample.c): outputs and gradients
 * against PyTorch's grid_sample and torchvision's roi_align (avg), and max
 * mode against ONNX's reference, all in float64 (tests/sample_ref.h,
 * written by tests/reference/gen_sample_ref.py), in f64 to the last bits
 * and in f32 to f32's rounding; the gradient makers against finite
 * differences; a large call shared with idle workers giving the serial
 * bits; errors naming the slot, attribute or bad batch index. */
#include "opcheck.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include "leakcheck.h"
#include "sample_ref.h"

static uint64_t rng;

static void setup(void)
{
    rng = oc_seed("ops_sample");
}

TestSuite(ops_sample, .init = setup, .fini = leak_check);

#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

static const int64_t gs_x_shape[4] = {GS_X}, gs_g_shape[4] = {GS_G};
/* (block-scope compound literals: C wants constants in a static's initializer) */
#define gs_out_shape \
    ((const int64_t[4]){gs_x_shape[0], gs_x_shape[1], gs_g_shape[1], gs_g_shape[2]})

/* f64: torch's own order of operations, so a few ulps at most; f32: the
 * same values rounded to float on the way (the refs are float64's). */
static double rtol_of(vq_dtype dt)
{
    return dt == VQ_F64 ? 1e-13 : 2e-5;
}

static double atol_of(vq_dtype dt)
{
    return dt == VQ_F64 ? 1e-13 : 2e-5;
}

static void gs_attrs(const struct gs_ref *r, vq_attr *at)
{
    at[0] = VQ_ATTR_S("mode", r->mode);
    at[1] = VQ_ATTR_S("padding_mode", r->padding);
    at[2] = VQ_ATTR_B("align_corners", r->align);
}

Test(ops_sample, grid_sample_matches_torch_in_every_mode_and_padding)
{
    static const vq_dtype dts[] = {VQ_F64, VQ_F32};
    for (int d = 0; d < N_OF(dts); d++)
        for (int c = 0; c < N_OF(gs_refs); c++) {
            const struct gs_ref *r = &gs_refs[c];
            vq_tensor *in[2] = {oc_from(dts[d], 4, gs_x_shape, gs_x),
                                oc_from(dts[d], 4, gs_g_shape, gs_grid)};
            vq_attr at[3];
            gs_attrs(r, at);
            cr_log_info("%s %s %s align_corners %d", vq_dtype_name(dts[d]), r->mode, r->padding,
                        r->align);
            vq_tensor *out = oc_run1("grid_sample", in, 2, at, 3);
            cr_assert_eq(vq_tensor_dtype(out), dts[d]);
            oc_assert_close(out, 4, gs_out_shape, r->out, rtol_of(dts[d]), atol_of(dts[d]));
            vq_tensor_release(out);
            vq_tensor_release(in[0]);
            vq_tensor_release(in[1]);
        }
}

Test(ops_sample, grid_sample_grad_matches_torchs_backward_wrt_x_and_grid)
{
    static const vq_dtype dts[] = {VQ_F64, VQ_F32};
    for (int d = 0; d < N_OF(dts); d++)
        for (int c = 0; c < N_OF(gs_refs); c++) {
            const struct gs_ref *r = &gs_refs[c];
            vq_tensor *in[3] = {oc_from(dts[d], 4, gs_x_shape, gs_x),
                                oc_from(dts[d], 4, gs_g_shape, gs_grid),
                                oc_from(dts[d], 4, gs_out_shape, gs_dout)};
            for (int wrt = 0; wrt < 2; wrt++) {
                vq_attr at[4];
                gs_attrs(r, at);
                at[3] = VQ_ATTR_I("wrt", wrt);
                cr_log_info("%s %s %s align_corners %d wrt %d", vq_dtype_name(dts[d]), r->mode,
                            r->padding, r->align, wrt);
                vq_tensor *out = oc_run1("grid_sample_grad", in, 3, at, 4);
                /* dGrid sums C products of up to 16 terms: a little more room */
                oc_assert_close(out, 4, wrt ? gs_g_shape : gs_x_shape, wrt ? r->dgrid : r->dx,
                                rtol_of(dts[d]) * 4, atol_of(dts[d]) * 4);
                vq_tensor_release(out);
            }
            for (int i = 0; i < 3; i++)
                vq_tensor_release(in[i]);
        }
}

Test(ops_sample, grid_sample_gradients_match_finite_differences)
{
    static const char *const modes[] = {"bilinear", "nearest", "bicubic"};
    static const char *const pads[] = {"zeros", "border", "reflection"};
    for (int m = 0; m < 3; m++)
        for (int p = 0; p < 3; p++)
            for (int a = 0; a < 2; a++) {
                vq_tensor *in[2] = {oc_rand(&rng, VQ_F64, 4, (int64_t[]){2, 3, 4, 5}, -2, 2),
                                    oc_rand(&rng, VQ_F64, 4, (int64_t[]){2, 3, 2, 2}, -1.3, 1.3)};
                vq_attr at[3] = {VQ_ATTR_S("mode", modes[m]), VQ_ATTR_S("padding_mode", pads[p]),
                                 VQ_ATTR_B("align_corners", a)};
                /* nearest is piecewise constant in the grid: its gradient there is 0 */
                oc_grad_check("grid_sample", in, 2, 1, at, 3, m == 1 ? 1u : 3u, &rng);
                vq_tensor_release(in[0]);
                vq_tensor_release(in[1]);
            }
    cr_assert_lt(oc_worst_grad_error(), 1e-5, "worst relative error %g", oc_worst_grad_error());
}

/* A large call shared with the idle workers gives the serial bits. */
Test(ops_sample, shared_calls_give_the_serial_bits)
{
    vq_engine_opts o = {.kind = VQ_ENGINE_THREADED, .cpu_workers = 2};
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &o), 0, "%s", vq_errmsg());
    vq_tensor *in[3] = {oc_rand(&rng, VQ_F32, 4, (int64_t[]){2, 3, 20, 30}, -2, 2),
                        oc_rand(&rng, VQ_F32, 4, (int64_t[]){2, 40, 50, 2}, -1.1, 1.1),
                        oc_rand(&rng, VQ_F32, 4, (int64_t[]){2, 3, 40, 50}, -1, 1)};
    vq_attr at[4] = {VQ_ATTR_S("mode", "bicubic"), VQ_ATTR_S("padding_mode", "reflection"),
                     VQ_ATTR_B("align_corners", false), VQ_ATTR_I("wrt", 1)};
    oc_assert_shared_equals_serial(e, "grid_sample", in, 2, at, 3);
    oc_assert_shared_equals_serial(e, "grid_sample_grad", in, 3, at, 4);
    at[3] = VQ_ATTR_I("wrt", 0);
    oc_assert_shared_equals_serial(e, "grid_sample_grad", in, 3, at, 4);
    double rois[12] = {0, 0, 29, 19, 3.5, 2, 20, 11, -4, 1, 8, 30}, idx[3] = {1, 0, 1};
    vq_tensor *r[4] = {in[0], oc_from(VQ_F32, 2, (int64_t[]){3, 4}, rois),
                       oc_from(VQ_I64, 1, (int64_t[]){3}, idx),
                       oc_rand(&rng, VQ_F32, 4, (int64_t[]){3, 3, 7, 7}, -1, 1)};
    vq_attr ra[2] = {VQ_ATTR_I("output_height", 7), VQ_ATTR_I("output_width", 7)};
    oc_assert_shared_equals_serial(e, "roi_align", r, 3, ra, 2);
    oc_assert_shared_equals_serial(e, "roi_align_grad", r, 4, ra, 2);
    for (int i = 0; i < 3; i++)
        vq_tensor_release(in[i]);
    for (int i = 1; i < 4; i++)
        vq_tensor_release(r[i]);
    vq_engine_free(e);
}

/* ---- roi_align ---- */

static const int64_t ra_x_shape[4] = {RA_X}, ra_rois_shape[2] = {RA_R, 4},
                     ra_batch_shape[1] = {RA_R};
#define ra_out_shape ((const int64_t[4]){RA_R, ra_x_shape[1], 3, 2})

static void ra_attrs(const struct ra_ref *r, const char *mode, vq_attr *at)
{
    at[0] = VQ_ATTR_S("mode", mode);
    at[1] = VQ_ATTR_I("output_height", 3);
    at[2] = VQ_ATTR_I("output_width", 2);
    at[3] = VQ_ATTR_I("sampling_ratio", r->ratio);
    at[4] = VQ_ATTR_F("spatial_scale", r->scale);
    at[5] = VQ_ATTR_S("coordinate_transformation_mode",
                      r->half_pixel ? "half_pixel" : "output_half_pixel");
}

Test(ops_sample, roi_align_matches_torchvision_and_onnxs_max)
{
    static const vq_dtype dts[] = {VQ_F64, VQ_F32};
    for (int d = 0; d < N_OF(dts); d++)
        for (int b = 0; b < 2; b++)
            for (int c = 0; c < N_OF(ra_refs); c++) {
                const struct ra_ref *r = &ra_refs[c];
                vq_tensor *in[3] = {oc_from(dts[d], 4, ra_x_shape, ra_x),
                                    oc_from(dts[d], 2, ra_rois_shape, ra_rois),
                                    oc_from(b ? VQ_I64 : VQ_I32, 1, ra_batch_shape, ra_batch)};
                for (int m = 0; m < 2; m++) {
                    vq_attr at[6];
                    ra_attrs(r, m ? "max" : "avg", at);
                    cr_log_info("%s, case %d, %s", vq_dtype_name(dts[d]), c, m ? "max" : "avg");
                    vq_tensor *out = oc_run1("roi_align", in, 3, at, 6);
                    oc_assert_close(out, 4, ra_out_shape, m ? r->max : r->out, rtol_of(dts[d]),
                                    atol_of(dts[d]));
                    vq_tensor_release(out);
                }
                for (int i = 0; i < 3; i++)
                    vq_tensor_release(in[i]);
            }
}

Test(ops_sample, roi_align_grad_matches_torchvision)
{
    static const vq_dtype dts[] = {VQ_F64, VQ_F32};
    for (int d = 0; d < N_OF(dts); d++)
        for (int c = 0; c < N_OF(ra_refs); c++) {
            const struct ra_ref *r = &ra_refs[c];
            vq_tensor *in[4] = {oc_from(dts[d], 4, ra_x_shape, ra_x),
                                oc_from(dts[d], 2, ra_rois_shape, ra_rois),
                                oc_from(VQ_I64, 1, ra_batch_shape, ra_batch),
                                oc_from(dts[d], 4, ra_out_shape, ra_dout)};
            vq_attr at[6];
            ra_attrs(r, "avg", at);
            cr_log_info("%s, case %d", vq_dtype_name(dts[d]), c);
            vq_tensor *out = oc_run1("roi_align_grad", in, 4, at, 6);
            oc_assert_close(out, 4, ra_x_shape, r->dx, rtol_of(dts[d]), atol_of(dts[d]));
            vq_tensor_release(out);
            for (int i = 0; i < 4; i++)
                vq_tensor_release(in[i]);
        }
}

Test(ops_sample, roi_align_gradient_matches_finite_differences)
{
    for (int c = 0; c < N_OF(ra_refs); c++) {
        vq_tensor *in[3] = {oc_rand(&rng, VQ_F64, 4, ra_x_shape, -1, 1),
                            oc_from(VQ_F64, 2, ra_rois_shape, ra_rois),
                            oc_from(VQ_I32, 1, ra_batch_shape, ra_batch)};
        vq_attr at[6];
        ra_attrs(&ra_refs[c], "avg", at);
        oc_grad_check("roi_align", in, 3, 1, at, 6, 1u, &rng);
        for (int i = 0; i < 3; i++)
            vq_tensor_release(in[i]);
    }
    cr_assert_lt(oc_worst_grad_error(), 1e-6, "worst relative error %g", oc_worst_grad_error());
}

/* A RoI whose corners are swapped: with half_pixel, no sampling points
 * when their number is adaptive (ceil of a negative size), and with a
 * fixed number they walk back from the first corner; without, it is 1 x 1
 * pixels. */
Test(ops_sample, a_reversed_roi_samples_as_onnx_runtime_does)
{
    double xv[16], rv[4] = {3, 3, 1, 1}, bv[1] = {0};
    for (int i = 0; i < 16; i++)
        xv[i] = i;
    vq_tensor *in[3] = {oc_from(VQ_F64, 4, (int64_t[]){1, 1, 4, 4}, xv),
                        oc_from(VQ_F64, 2, (int64_t[]){1, 4}, rv),
                        oc_from(VQ_I64, 1, (int64_t[]){1}, bv)};
    static const struct {
        const char *ctm;
        int ratio;
        double want;
    } cases[] = {
        {"half_pixel", 0, 0},
        /* the one point at (2.5, 2.5) + (-2, -2) / 2: X at (1.5, 1.5) */
        {"half_pixel", 1, 7.5},
        /* the bin [3, 4) x [3, 4), its point (3.5, 3.5) clamped to X's last pixel */
        {"output_half_pixel", 1, 15},
    };
    for (int c = 0; c < N_OF(cases); c++) {
        vq_attr at[2] = {VQ_ATTR_S("coordinate_transformation_mode", cases[c].ctm),
                         VQ_ATTR_I("sampling_ratio", cases[c].ratio)};
        vq_tensor *out = oc_run1("roi_align", in, 3, at, 2);
        oc_assert_close(out, 4, (int64_t[]){1, 1, 1, 1}, &cases[c].want, 0, 0);
        vq_tensor_release(out);
    }
    for (int i = 0; i < 3; i++)
        vq_tensor_release(in[i]);
}

Test(ops_sample, a_bad_batch_index_fails_naming_it)
{
    double bv[3] = {0, 2, -1};
    for (int grad = 0; grad < 2; grad++) {
        vq_tensor *in[4] = {oc_rand(&rng, VQ_F32, 4, (int64_t[]){2, 1, 4, 4}, -1, 1),
                            oc_rand(&rng, VQ_F32, 2, (int64_t[]){3, 4}, 0, 3),
                            oc_from(VQ_I64, 1, (int64_t[]){3}, bv),
                            oc_rand(&rng, VQ_F32, 4, (int64_t[]){3, 1, 1, 1}, -1, 1)};
        cr_assert_eq(oc_try(grad ? "roi_align_grad" : "roi_align", in, grad ? 4 : 3, 1, NULL, 0),
                     VQ_EINVAL);
        cr_assert(strstr(vq_errmsg(), "batch index 2 of RoI 1 is outside [0, 2)"), "%s",
                  vq_errmsg());
        for (int i = 0; i < 4; i++)
            vq_tensor_release(in[i]);
    }
}

Test(ops_sample, bad_inputs_name_the_slot_or_attribute)
{
    vq_tensor *x, *g, *g3, *e, *xi, *rois, *bi, *bf;
    cr_assert_eq(vq_tensor_new(&x, VQ_F32, 4, (int64_t[]){2, 3, 4, 5}), 0);
    cr_assert_eq(vq_tensor_new(&g, VQ_F32, 4, (int64_t[]){2, 6, 7, 2}), 0);
    cr_assert_eq(vq_tensor_new(&g3, VQ_F32, 4, (int64_t[]){2, 6, 7, 3}), 0);
    cr_assert_eq(vq_tensor_new(&e, VQ_F32, 4, (int64_t[]){2, 3, 0, 5}), 0);
    cr_assert_eq(vq_tensor_new(&xi, VQ_I32, 4, (int64_t[]){2, 3, 4, 5}), 0);
    cr_assert_eq(vq_tensor_new(&rois, VQ_F32, 2, (int64_t[]){3, 4}), 0);
    cr_assert_eq(vq_tensor_new(&bi, VQ_I64, 1, (int64_t[]){3}), 0);
    cr_assert_eq(vq_tensor_new(&bf, VQ_F32, 1, (int64_t[]){3}), 0);
    struct {
        const char *op;
        vq_tensor *in[3];
        int nin;
        vq_attr at;
        const char *says;
    } bad[] = {
        {"grid_sample", {x, g3}, 2, VQ_ATTR_B("align_corners", 0), "input Grid (slot 1)"},
        {"grid_sample", {e, g}, 2, VQ_ATTR_B("align_corners", 0), "empty spatial dim"},
        {"grid_sample", {xi, g}, 2, VQ_ATTR_B("align_corners", 0), "input X (slot 0)"},
        {"grid_sample", {x, g}, 2, VQ_ATTR_S("mode", "linear"), "attribute mode"},
        {"grid_sample", {x, g}, 2, VQ_ATTR_S("padding_mode", "wrap"), "attribute padding_mode"},
        {"roi_align", {x, rois, bf}, 3, VQ_ATTR_I("output_width", 1), "input BatchIndices"},
        {"roi_align", {x, g, bi}, 3, VQ_ATTR_I("output_width", 1), "input Rois (slot 1)"},
        {"roi_align", {x, rois, bi}, 3, VQ_ATTR_I("output_height", 0), "attribute output_height"},
        {"roi_align", {x, rois, bi}, 3, VQ_ATTR_I("sampling_ratio", -1), "sampling_ratio"},
        {"roi_align", {x, rois, bi}, 3, VQ_ATTR_S("mode", "sum"), "attribute mode"},
    };
    for (int i = 0; i < N_OF(bad); i++) {
        cr_assert_eq(oc_try(bad[i].op, bad[i].in, bad[i].nin, 1, &bad[i].at, 1), VQ_EINVAL,
                     "case %d", i);
        cr_assert(strstr(vq_errmsg(), bad[i].says), "case %d: %s", i, vq_errmsg());
    }
    vq_tensor_release(x);
    vq_tensor_release(g);
    vq_tensor_release(g3);
    vq_tensor_release(e);
    vq_tensor_release(xi);
    vq_tensor_release(rois);
    vq_tensor_release(bi);
    vq_tensor_release(bf);
}

/* roi_align's gradient is avg's: max mode has none, and RoIs have none. */
Test(ops_sample, roi_align_grad_is_avgs_only)
{
    vq_tensor *in[4] = {oc_rand(&rng, VQ_F32, 4, (int64_t[]){1, 1, 4, 4}, -1, 1),
                        oc_rand(&rng, VQ_F32, 2, (int64_t[]){2, 4}, 0, 3),
                        oc_from(VQ_I32, 1, (int64_t[]){2}, (double[]){0, 0}),
                        oc_rand(&rng, VQ_F32, 4, (int64_t[]){2, 1, 1, 1}, -1, 1)};
    vq_attr at = VQ_ATTR_S("mode", "max");
    cr_assert_eq(oc_try("roi_align_grad", in, 4, 1, &at, 1), VQ_EINVAL);
    cr_assert(strstr(vq_errmsg(), "roi_align_grad: attribute mode"), "%s", vq_errmsg());
    for (int i = 0; i < 4; i++)
        vq_tensor_release(in[i]);
}
