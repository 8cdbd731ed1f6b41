/* What the sampling ops' CPU kernels (ops/cpu/sample.c) and CUDA kernels
 * (ops/cuda/sample.cu) share, written once: where grid_sample's grid
 * point reads X (its taps and their weights) and the sums over them, and
 * where roi_align's sampling points fall. Plain C, and __host__ __device__
 * under nvcc (shape_shared.h's VQ__SHARED_FN).
 *
 * Every function exists for float and double (suffix _f32, _f64) and
 * computes in that type, as torch's grid_sampler_2d and ONNX Runtime's
 * RoiAlign (which ONNX's reference follows) do: the same operations in the
 * same order, so that the CPU and CUDA kernels agree bit for bit, and with
 * torch and ONNX to the last rounding of their own order. The text of the
 * functions is sample_shared_t.h, included once per type.
 *
 * grid_sample (torch.nn.functional.grid_sample on 4-D input): a grid
 * value v in [-1, 1] along a dim of n elements maps to the coordinate
 *   align_corners   ((v + 1) / 2) * (n - 1)
 *   otherwise       ((v + 1) * n - 1) / 2
 * and the padding mode then moves it (bilinear and nearest: the point's
 * coordinate; bicubic: each tap's): border clamps it to [0, n - 1];
 * reflection reflects it about the edges (-0.5 and n - 0.5, or 0 and
 * n - 1 with align_corners) until it lies between them, then clamps it;
 * zeros leaves it. Taps outside X read 0. bilinear reads the 2 x 2 taps
 * around the coordinate, weights the products of (1 - r, r) along each
 * axis; nearest the tap at the coordinate rounded half to even; bicubic
 * the 4 x 4 taps floor - 1 .. floor + 2 with Keys' coefficients (a =
 * -0.75), the rows summed first. A coordinate that is not a number reads
 * nothing (every tap outside X).
 *
 * roi_align (ONNX RoiAlign): a RoI [x1, y1, x2, y2] scaled by
 * spatial_scale (and shifted by -0.5 with half_pixel) is cut into
 * oh x ow bins (at least 1 x 1 pixels without half_pixel), each sampled
 * on a grid of sampling_ratio points per axis (0: ceil(the bin's size),
 * at most 2^31); a point more than a pixel outside X reads 0, others are
 * clamped into X and read bilinearly. avg averages a bin's points; max
 * takes the largest weighted tap over them (ONNX's reference: each
 * point's largest weight * value, not its interpolated value). */
#ifndef VARQ_OPS_SAMPLE_SHARED_H
#define VARQ_OPS_SAMPLE_SHARED_H

#include "params.h"       /* vq__grid_sample_params, vq__roi_align_params */
#include "shape_shared.h" /* VQ__SHARED_FN */

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#define VQ__SAMPLE_T float
#define VQ__SAMPLE_NAME(name) name##_f32
#define VQ__SAMPLE_FN(fn) fn##f
#include "sample_shared_t.h"
#undef VQ__SAMPLE_T
#undef VQ__SAMPLE_NAME
#undef VQ__SAMPLE_FN

#define VQ__SAMPLE_T double
#define VQ__SAMPLE_NAME(name) name##_f64
#define VQ__SAMPLE_FN(fn) fn
#include "sample_shared_t.h"
#undef VQ__SAMPLE_T
#undef VQ__SAMPLE_NAME
#undef VQ__SAMPLE_FN

#endif
