/* ONNX's sampling ops: GridSample (opset 16's 4-D input; opset 20's mode
 * names linear and cubic too, on 4-D input) as varq's grid_sample, and
 * RoiAlign (opsets 10 and 16) as roi_align. */
#include "onnx_internal.h"

#include <string.h>

/* GridSample(X, Grid; mode, padding_mode, align_corners). */
static int t_grid_sample(struct ox *x)
{
    struct ox_val *in[2] = {ox_input(x, 0), ox_input(x, 1)};
    if (in[0]->meta.ndim != 4)
        return ox_fail(x, VQ_ENOSYS, "input of rank %d: varq samples 4-D (NCHW) input",
                       in[0]->meta.ndim);
    const char *mode = ox_str(x, "mode");
    if (!strcmp(mode, "linear")) /* opset 20's names */
        mode = "bilinear";
    else if (!strcmp(mode, "cubic"))
        mode = "bicubic";
    vq_attr at[3] = {VQ_ATTR_S("mode", mode), VQ_ATTR_S("padding_mode", ox_str(x, "padding_mode")),
                     VQ_ATTR_B("align_corners", ox_int(x, "align_corners") != 0)};
    const char *o = ox_out0(x);
    return ox_emit(x, "grid_sample", in, 2, &o, 1, at, 3, NULL);
}

/* RoiAlign(X, rois, batch_indices; mode, output_height, output_width,
 * sampling_ratio, spatial_scale, coordinate_transformation_mode). */
static int t_roi_align(struct ox *x)
{
    struct ox_val *in[3] = {ox_input(x, 0), ox_input(x, 1), ox_input(x, 2)};
    vq_attr at[6] = {VQ_ATTR_S("mode", ox_str(x, "mode")),
                     VQ_ATTR_I("output_height", ox_int(x, "output_height")),
                     VQ_ATTR_I("output_width", ox_int(x, "output_width")),
                     VQ_ATTR_I("sampling_ratio", ox_int(x, "sampling_ratio")),
                     VQ_ATTR_F("spatial_scale", ox_float(x, "spatial_scale")),
                     VQ_ATTR_S("coordinate_transformation_mode",
                               ox_str(x, "coordinate_transformation_mode"))};
    const char *o = ox_out0(x);
    return ox_emit(x, "roi_align", in, 3, &o, 1, at, 6, NULL);
}

/* ---- the rows ---- */

const struct ox_op ox_op_GridSample =
    OX_ROW(t_grid_sample, NULL, 2, 2, true,
           OX_ATTRS(OX_STR("mode", "bilinear", 32), OX_STR("padding_mode", "zeros", 32),
                    OX_INT("align_corners", 0)));
/* opset 10 has no coordinate_transformation_mode: its RoIs are
 * output_half_pixel's; opset 16 defaults to half_pixel */
const struct ox_op ox_op_RoiAlign =
    OX_ROW(t_roi_align, NULL, 3, 3, true,
           OX_ATTRS(OX_STR("mode", "avg", 32), OX_INT("output_height", 1),
                    OX_INT("output_width", 1), OX_INT("sampling_ratio", 0),
                    OX_FLOAT("spatial_scale", 1),
                    OX_STR("coordinate_transformation_mode", "output_half_pixel", 32, .since = 16,
                           .changed = 16, .s2 = "half_pixel")));
