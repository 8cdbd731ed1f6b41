/* Sampling ops: grid_sample (torch.nn.functional.grid_sample on 4-D
 * input, ONNX GridSample) and roi_align (ONNX RoiAlign, torchvision's
 * roi_align), with their gradient ops. f32 and f64; ops/sample_shared.h
 * holds the arithmetic (coordinates, taps, weights, sums), which the CUDA
 * kernels (ops/cuda/sample.cu) share, so the two give the same bits
 * (gradients into X: the same to rounding, CUDA adding with atomics).
 *
 * grid_sample(X, Grid; mode, padding_mode, align_corners) -> Out: X is
 * [N, C, H, W] (H and W not empty), Grid [N, Ho, Wo, 2] of X's dtype, its
 * last dim a point's x (along W) then y (along H), -1 and 1 the edges of
 * X (align_corners: the centres of the edge pixels; otherwise their outer
 * edges). Out [N, C, Ho, Wo] is X sampled at each point in each channel.
 * mode bilinear (default), nearest (half to even) or bicubic (Keys, a =
 * -0.75); padding_mode zeros (default: outside reads 0), border or
 * reflection; all as torch computes them (sample_shared.h).
 *
 * grid_sample_grad(X, Grid, dOut; the same, wrt) -> dX (wrt 0) or dGrid
 * (wrt 1), as torch's grid_sampler_2d_backward: dX is zeros with each
 * element of dOut times each tap's weight added at the tap (bicubic: the
 * taps the padding moved to); dGrid is each point's derivative summed over
 * the channels, times the coordinate's derivative by the grid value (0
 * where border or reflection clamp it; nearest: zeros). The CPU adds dX
 * in torch's order (points, then channels); dGrid needs no atomics.
 *
 * roi_align(X, Rois, BatchIndices; mode, output_height, output_width,
 * sampling_ratio, spatial_scale, coordinate_transformation_mode) -> Out:
 * X [N, C, H, W], Rois [R, 4] of X's dtype ([x1, y1, x2, y2] in the input
 * image's pixels), BatchIndices [R] (i32 or i64, each in [0, N): the
 * kernel fails naming the first one that is not, before it writes
 * anything). Out [R, C, output_height, output_width]: each bin of each
 * RoI pooled (mode avg, the default, or max) over its sampling points,
 * each read bilinearly (sample_shared.h's rules). ONNX's defaults: 1, 1,
 * 0 (adaptive), 1.0; coordinate_transformation_mode half_pixel (ONNX
 * opset 16's default, torchvision's aligned=True) or output_half_pixel
 * (opset 10, aligned=False).
 *
 * roi_align_grad(X, Rois, BatchIndices, dOut; the same) -> dX, avg only
 * (as torchvision's): zeros, then each element of dOut times each
 * sampling point's tap weight divided by the bin's count added at the
 * tap. The CPU adds in RoI order, a worker per block of channels. Rois
 * and BatchIndices have no gradient. */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"
#include "../sample_shared.h"

#include <string.h>

static const char *const grid_in[] = {"X", "Grid"};
static const char *const grid_grad_in[] = {"X", "Grid", "dOut"};
static const char *const roi_in[] = {"X", "Rois", "BatchIndices"};
static const char *const roi_grad_in[] = {"X", "Rois", "BatchIndices", "dOut"};
static const char *const out_slot[] = {"Out"};
static const char *const din_out[] = {"dIn"};
static const char *const dx_out[] = {"dX"};

/* The string attribute name as its index in names (dflt when absent). */
static int pick(const vq__infer *c, const char *name, const char *const *names, int dflt,
                const char *list, int *out)
{
    const vq_attr *a = vq__attr_find(c, name);
    *out = dflt;
    if (!a)
        return 0;
    for (int i = 0; names[i]; i++)
        if (!strcmp(a->s, names[i])) {
            *out = i;
            return 0;
        }
    return vq__attr_fail(c, name, "\"%s\" is not %s", a->s, list);
}

/* An NCHW X (slot 0) of floats whose H and W are not empty. */
static int image_check(const vq__infer *c)
{
    int rc;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = vq__check_rank(c, 0, 4)) < 0)
        return rc;
    const int64_t *s = c->in[0].shape;
    if (s[2] == 0 || s[3] == 0)
        return vq__in_fail(c, 0, "has an empty spatial dim ([%lld, %lld, %lld, %lld])",
                           (long long)s[0], (long long)s[1], (long long)s[2], (long long)s[3]);
    return 0;
}

/* Two known dims that differ. */
static bool differ(int64_t a, int64_t b)
{
    return a >= 0 && b >= 0 && a != b;
}

/* ---- grid_sample ---- */

static const vq__attr_spec grid_attrs[] = {
    {"mode", VQ_ATTR_STRING, false, "bilinear"},
    {"padding_mode", VQ_ATTR_STRING, false, "zeros"},
    {"align_corners", VQ_ATTR_BOOL, false, "false"},
    {"wrt", VQ_ATTR_INT, false, "0"}, /* grid_sample_grad only */
};

/* In the order of params.h's VQ__GRID_* values. */
static const char *const grid_modes[] = {"bilinear", "nearest", "bicubic", NULL};
static const char *const paddings[] = {"zeros", "border", "reflection", NULL};

/* X (slot 0) and Grid (slot 1) against the attributes: fills p and Out's
 * meta. */
static int grid_meta(const vq__infer *c, vq__grid_sample_params *p, vq__meta *out)
{
    int rc;
    if ((rc = image_check(c)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0 ||
        (rc = vq__check_rank(c, 1, 4)) < 0)
        return rc;
    const vq__meta *x = &c->in[0], *g = &c->in[1];
    if (differ(g->shape[3], 2))
        return vq__in_fail(c, 1, "has last dim %lld; a grid point is 2 values (x, y)",
                           (long long)g->shape[3]);
    if (differ(g->shape[0], x->shape[0]))
        return vq__in_fail(c, 1, "has batch dim %lld; X's is %lld", (long long)g->shape[0],
                           (long long)x->shape[0]);
    if ((rc = pick(c, "mode", grid_modes, VQ__GRID_BILINEAR, "bilinear, nearest or bicubic",
                   &p->mode)) < 0 ||
        (rc = pick(c, "padding_mode", paddings, VQ__GRID_ZEROS, "zeros, border or reflection",
                   &p->padding)) < 0)
        return rc;
    p->align = vq__attr_bool(c, "align_corners", false);
    p->wrt = 0;
    out->dtype = x->dtype;
    out->ndim = 4;
    out->shape[0] = x->shape[0] >= 0 ? x->shape[0] : g->shape[0];
    out->shape[1] = x->shape[1];
    out->shape[2] = g->shape[1];
    out->shape[3] = g->shape[2];
    return 0;
}

static int grid_infer(vq__infer *c)
{
    return grid_meta(c, c->params, &c->out[0]);
}

/* grid_sample_grad(X, Grid, dOut; grid_sample's, wrt) -> dX or dGrid. */
static int grid_grad_infer(vq__infer *c)
{
    vq__grid_sample_params *p = c->params;
    vq__meta want;
    int rc;
    if ((rc = grid_meta(c, p, &want)) < 0 || (rc = vq__check_same_dtype(c, 0, 2)) < 0 ||
        (rc = vq__check_shape_is(c, 2, &want, "grid_sample's output shape")) < 0)
        return rc;
    int64_t wrt = vq__attr_int(c, "wrt", 0);
    if (wrt != 0 && wrt != 1)
        return vq__attr_fail(c, "wrt", "is %lld; 0 (X) or 1 (Grid)", (long long)wrt);
    p->wrt = (int)wrt;
    c->out[0] = c->in[p->wrt];
    return 0;
}

/* One grid_sample_grad per input that wants a gradient, with wrt. */
static int grid_grad(const vq__grad *g)
{
    int wanted = vq__grad_wanted(g), rc;
    if (wanted <= 0)
        return wanted;
    vq_attr at[4];
    int n = 0;
    for (int i = 0; i < g->nattrs && n < 3; i++)
        at[n++] = g->attrs[i];
    const char *in[3] = {g->in[0], g->in[1], g->dout[0]};
    for (int wrt = 0; wrt < 2; wrt++) {
        if (!g->din[wrt])
            continue;
        at[n] = VQ_ATTR_I("wrt", wrt);
        if ((rc = vq__emit(g, "grid_sample_grad", in, 3, &g->din[wrt], 1, at, n + 1)) < 0)
            return rc;
    }
    return 0;
}

/* A call's tensors and dims: X [n, c, h, w], Grid and dOut over np
 * points (ho * wo per batch entry). */
struct grid_job {
    const vq__grid_sample_params *p;
    const void *x, *grid, *dout;
    void *out;
    int64_t n, c, h, w, hw, np;
};

static void grid_job_of(const vq__kcall *k, struct grid_job *j)
{
    const vq_tensor *x = k->in[0], *g = k->in[1];
    *j = (struct grid_job){.p = k->params,
                           .x = x->data,
                           .grid = g->data,
                           .dout = k->nin > 2 ? k->in[2]->data : NULL,
                           .out = k->out[0]->data,
                           .n = x->shape[0],
                           .c = x->shape[1],
                           .h = x->shape[2],
                           .w = x->shape[3],
                           .hw = x->shape[2] * x->shape[3],
                           .np = g->shape[1] * g->shape[2]};
}

/* Out's points lo..hi-1 (over every batch entry), every channel. */
#define GRID_RANGE(T, S)                                                                         \
    static int grid_range_##S(void *arg, int64_t lo, int64_t hi, int slot)                       \
    {                                                                                            \
        (void)slot;                                                                              \
        const struct grid_job *j = arg;                                                          \
        const T *x = j->x, *grid = j->grid;                                                      \
        T *out = j->out;                                                                         \
        for (int64_t e = lo; e < hi; e++) {                                                      \
            int64_t b = e / j->np, s = e % j->np;                                                \
            vq__grid_pt_##S pt;                                                                  \
            vq__grid_point_##S(grid[2 * e], grid[2 * e + 1], j->h, j->w, j->p, &pt);             \
            for (int64_t ch = 0; ch < j->c; ch++)                                                \
                out[(b * j->c + ch) * j->np + s] =                                               \
                    vq__grid_value_##S(&pt, x + (b * j->c + ch) * j->hw);                        \
        }                                                                                        \
        return 0;                                                                                \
    }                                                                                            \
                                                                                                 \
    /* dX: batch entries lo..hi-1, each point's channels scattered in order. */                  \
    static int grid_dx_range_##S(void *arg, int64_t lo, int64_t hi, int slot)                    \
    {                                                                                            \
        (void)slot;                                                                              \
        const struct grid_job *j = arg;                                                          \
        const T *grid = j->grid, *g = j->dout;                                                   \
        T *dx = j->out;                                                                          \
        for (int64_t b = lo; b < hi; b++)                                                        \
            for (int64_t s = 0; s < j->np; s++) {                                                \
                int64_t e = b * j->np + s, off[16];                                              \
                T amt[16];                                                                       \
                vq__grid_pt_##S pt;                                                              \
                vq__grid_point_##S(grid[2 * e], grid[2 * e + 1], j->h, j->w, j->p, &pt);         \
                for (int64_t ch = 0; ch < j->c; ch++) {                                          \
                    T *img = dx + (b * j->c + ch) * j->hw;                                       \
                    int m = vq__grid_scatter_##S(&pt, g[(b * j->c + ch) * j->np + s], off, amt); \
                    for (int t = 0; t < m; t++)                                                  \
                        img[off[t]] += amt[t];                                                   \
                }                                                                                \
            }                                                                                    \
        return 0;                                                                                \
    }                                                                                            \
                                                                                                 \
    /* dGrid: points lo..hi-1, each summed over the channels. */                                 \
    static int grid_dgrid_range_##S(void *arg, int64_t lo, int64_t hi, int slot)                 \
    {                                                                                            \
        (void)slot;                                                                              \
        const struct grid_job *j = arg;                                                          \
        const T *x = j->x, *grid = j->grid, *g = j->dout;                                        \
        T *dgrid = j->out;                                                                       \
        for (int64_t e = lo; e < hi; e++) {                                                      \
            int64_t b = e / j->np, s = e % j->np;                                                \
            vq__grid_pt_##S pt;                                                                  \
            vq__grid_point_##S(grid[2 * e], grid[2 * e + 1], j->h, j->w, j->p, &pt);             \
            T gx = 0, gy = 0;                                                                    \
            for (int64_t ch = 0; ch < j->c; ch++)                                                \
                vq__grid_dgrid_##S(&pt, x + (b * j->c + ch) * j->hw,                             \
                                   g[(b * j->c + ch) * j->np + s], &gx, &gy);                    \
            dgrid[2 * e] = pt.mx * gx;                                                           \
            dgrid[2 * e + 1] = pt.my * gy;                                                       \
        }                                                                                        \
        return 0;                                                                                \
    }

GRID_RANGE(float, f32)
GRID_RANGE(double, f64)

/* Points a chunk: about C * 16 multiply-adds each. */
#define GRID_CHUNK ((int64_t)1 << 10)

static int grid_kernel(const vq__kcall *k)
{
    struct grid_job j;
    grid_job_of(k, &j);
    bool f32 = k->in[0]->dtype == VQ_F32;
    return vq__parallel_for(j.n * j.np, GRID_CHUNK, f32 ? grid_range_f32 : grid_range_f64, &j);
}

static int grid_grad_kernel(const vq__kcall *k)
{
    const vq__grid_sample_params *p = k->params;
    struct grid_job j;
    grid_job_of(k, &j);
    bool f32 = k->in[0]->dtype == VQ_F32;
    if (p->wrt == 1)
        return vq__parallel_for(j.n * j.np, GRID_CHUNK,
                                f32 ? grid_dgrid_range_f32 : grid_dgrid_range_f64, &j);
    memset(j.out, 0, k->out[0]->nbytes);
    /* a batch entry a chunk: entries write disjoint images of dX */
    return vq__parallel_for(j.n, 1, f32 ? grid_dx_range_f32 : grid_dx_range_f64, &j);
}

/* ---- roi_align ---- */

static const vq__attr_spec roi_attrs[] = {
    {"mode", VQ_ATTR_STRING, false, "avg"},
    {"output_height", VQ_ATTR_INT, false, "1"},
    {"output_width", VQ_ATTR_INT, false, "1"},
    {"sampling_ratio", VQ_ATTR_INT, false, "0"},
    {"spatial_scale", VQ_ATTR_FLOAT, false, "1"},
    {"coordinate_transformation_mode", VQ_ATTR_STRING, false, "half_pixel"},
};

static const char *const roi_modes[] = {"avg", "max", NULL};
static const char *const roi_ctms[] = {"output_half_pixel", "half_pixel", NULL};

#define ROI_LIMIT ((int64_t)1 << 31)

/* X, Rois and BatchIndices (slots 0 to 2) against the attributes: fills
 * p and Out's meta. */
static int roi_meta(const vq__infer *c, vq__roi_align_params *p, vq__meta *out)
{
    int rc;
    if ((rc = image_check(c)) < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0 ||
        (rc = vq__check_rank(c, 1, 2)) < 0 ||
        (rc = vq__check_dtype(c, 2, (1u << VQ_I32) | (1u << VQ_I64))) < 0 ||
        (rc = vq__check_rank(c, 2, 1)) < 0)
        return rc;
    const vq__meta *x = &c->in[0], *r = &c->in[1], *bi = &c->in[2];
    if (differ(r->shape[1], 4))
        return vq__in_fail(c, 1, "has %lld columns; a RoI is 4 values (x1, y1, x2, y2)",
                           (long long)r->shape[1]);
    if (differ(bi->shape[0], r->shape[0]))
        return vq__in_fail(c, 2, "has %lld entries; Rois has %lld RoIs", (long long)bi->shape[0],
                           (long long)r->shape[0]);
    if ((rc = pick(c, "mode", roi_modes, VQ__ROI_AVG, "avg or max", &p->mode)) < 0 ||
        (rc = pick(c, "coordinate_transformation_mode", roi_ctms, 1,
                   "half_pixel or output_half_pixel", &p->half_pixel)) < 0)
        return rc;
    p->oh = vq__attr_int(c, "output_height", 1);
    p->ow = vq__attr_int(c, "output_width", 1);
    p->ratio = vq__attr_int(c, "sampling_ratio", 0);
    p->scale = vq__attr_float(c, "spatial_scale", 1);
    if (p->oh < 1 || p->oh >= ROI_LIMIT)
        return vq__attr_fail(c, "output_height", "is %lld, not in [1, 2^31)", (long long)p->oh);
    if (p->ow < 1 || p->ow >= ROI_LIMIT)
        return vq__attr_fail(c, "output_width", "is %lld, not in [1, 2^31)", (long long)p->ow);
    if (p->ratio < 0 || p->ratio >= ROI_LIMIT)
        return vq__attr_fail(c, "sampling_ratio", "is %lld, not in [0, 2^31)", (long long)p->ratio);
    if (!isfinite(p->scale))
        return vq__attr_fail(c, "spatial_scale", "is %g, not finite", p->scale);
    out->dtype = x->dtype;
    out->ndim = 4;
    out->shape[0] = r->shape[0] >= 0 ? r->shape[0] : bi->shape[0];
    out->shape[1] = x->shape[1];
    out->shape[2] = p->oh;
    out->shape[3] = p->ow;
    return 0;
}

static int roi_infer(vq__infer *c)
{
    return roi_meta(c, c->params, &c->out[0]);
}

/* roi_align_grad(X, Rois, BatchIndices, dOut; roi_align's) -> dX. */
static int roi_grad_infer(vq__infer *c)
{
    vq__roi_align_params *p = c->params;
    vq__meta want;
    int rc;
    if ((rc = roi_meta(c, p, &want)) < 0 || (rc = vq__check_same_dtype(c, 0, 3)) < 0 ||
        (rc = vq__check_shape_is(c, 3, &want, "roi_align's output shape")) < 0)
        return rc;
    if (p->mode != VQ__ROI_AVG)
        return vq__attr_fail(c, "mode", "is max; roi_align's gradient is avg's only");
    c->out[0] = c->in[0];
    return 0;
}

static int roi_grad(const vq__grad *g)
{
    if (g->din[1] || g->din[2])
        return vq__op_fail(g->def, "input %s: RoIs and their batch indices have no gradient",
                           g->din[1] ? "Rois (slot 1)" : "BatchIndices (slot 2)");
    if (!g->din[0])
        return 0;
    if (!g->dout[0])
        return vq__op_fail(g->def, "no gradient flows into output Out");
    const char *in[4] = {g->in[0], g->in[1], g->in[2], g->dout[0]};
    /* roi_align_grad has exactly roi_align's attributes */
    return vq__emit(g, "roi_align_grad", in, 4, &g->din[0], 1, g->attrs, g->nattrs);
}

/* BatchIndices' entry r. */
static int64_t batch_index(const vq_tensor *bi, int64_t r)
{
    return bi->dtype == VQ_I64 ? ((const int64_t *)bi->data)[r] : ((const int32_t *)bi->data)[r];
}

/* Every batch index in [0, n): otherwise the op fails naming the first
 * one that is not (ops/cuda/checks.c words it alike). */
static int batch_check(const vq__kcall *k, const vq_tensor *bi, int64_t n)
{
    for (int64_t r = 0; r < bi->numel; r++) {
        int64_t b = batch_index(bi, r);
        if (b < 0 || b >= n)
            return vq__op_fail(k->def,
                               "batch index %lld of RoI %lld is outside [0, %lld) (X's batch "
                               "size)",
                               (long long)b, (long long)r, (long long)n);
    }
    return 0;
}

struct roi_job {
    const vq__roi_align_params *p;
    const vq_tensor *bi;
    const void *x, *rois, *dout;
    void *out;
    int64_t nroi, c, h, w, bins;
};

static void roi_job_of(const vq__kcall *k, struct roi_job *j)
{
    const vq_tensor *x = k->in[0];
    const vq__roi_align_params *p = k->params;
    *j = (struct roi_job){.p = p,
                          .bi = k->in[2],
                          .x = x->data,
                          .rois = k->in[1]->data,
                          .dout = k->nin > 3 ? k->in[3]->data : NULL,
                          .out = k->out[0]->data,
                          .nroi = k->in[1]->shape[0],
                          .c = x->shape[1],
                          .h = x->shape[2],
                          .w = x->shape[3],
                          .bins = p->oh * p->ow};
}

#define ROI_RANGE(T, S)                                                                           \
    /* Out's images lo..hi-1 (RoI r, channel ch: r * C + ch), every bin. */                       \
    static int roi_range_##S(void *arg, int64_t lo, int64_t hi, int slot)                         \
    {                                                                                             \
        (void)slot;                                                                               \
        const struct roi_job *j = arg;                                                            \
        const T *x = j->x, *rois = j->rois;                                                       \
        T *out = j->out;                                                                          \
        for (int64_t e = lo; e < hi; e++) {                                                       \
            int64_t r = e / j->c, ch = e % j->c;                                                  \
            vq__roi_box_##S b;                                                                    \
            vq__roi_box_of_##S(rois + 4 * r, j->p, &b);                                           \
            const T *img = x + (batch_index(j->bi, r) * j->c + ch) * j->h * j->w;                 \
            for (int64_t ph = 0; ph < j->p->oh; ph++)                                             \
                for (int64_t pw = 0; pw < j->p->ow; pw++)                                         \
                    out[e * j->bins + ph * j->p->ow + pw] =                                       \
                        vq__roi_bin_##S(&b, j->p->mode, ph, pw, img, j->h, j->w);                 \
        }                                                                                         \
        return 0;                                                                                 \
    }                                                                                             \
                                                                                                  \
    /* dX's channels lo..hi-1, the RoIs in order. */                                              \
    static int roi_dx_range_##S(void *arg, int64_t lo, int64_t hi, int slot)                      \
    {                                                                                             \
        (void)slot;                                                                               \
        const struct roi_job *j = arg;                                                            \
        const T *rois = j->rois, *g = j->dout;                                                    \
        T *dx = j->out;                                                                           \
        for (int64_t r = 0; r < j->nroi; r++) {                                                   \
            vq__roi_box_##S b;                                                                    \
            vq__roi_box_of_##S(rois + 4 * r, j->p, &b);                                           \
            for (int64_t ch = lo; ch < hi; ch++) {                                                \
                T *img = dx + (batch_index(j->bi, r) * j->c + ch) * j->h * j->w;                  \
                const T *gb = g + (r * j->c + ch) * j->bins;                                      \
                for (int64_t ph = 0; ph < j->p->oh; ph++)                                         \
                    for (int64_t pw = 0; pw < j->p->ow; pw++)                                     \
                        for (int64_t iy = 0; iy < b.gh; iy++)                                     \
                            for (int64_t ix = 0; ix < b.gw; ix++) {                               \
                                int64_t pos[4];                                                   \
                                T wt[4];                                                          \
                                if (!vq__roi_sample_##S(&b, ph, pw, iy, ix, j->h, j->w, pos, wt)) \
                                    continue;                                                     \
                                for (int t = 0; t < 4; t++)                                       \
                                    img[pos[t]] += gb[ph * j->p->ow + pw] * wt[t] / b.count;      \
                            }                                                                     \
            }                                                                                     \
        }                                                                                         \
        return 0;                                                                                 \
    }

ROI_RANGE(float, f32)
ROI_RANGE(double, f64)

static int roi_kernel(const vq__kcall *k)
{
    struct roi_job j;
    roi_job_of(k, &j);
    int rc = batch_check(k, j.bi, k->in[0]->shape[0]);
    if (rc < 0)
        return rc;
    bool f32 = k->in[0]->dtype == VQ_F32;
    /* images of bins * samples reads each: a few at a time */
    return vq__parallel_for(j.nroi * j.c, 4, f32 ? roi_range_f32 : roi_range_f64, &j);
}

static int roi_grad_kernel(const vq__kcall *k)
{
    struct roi_job j;
    roi_job_of(k, &j);
    int rc = batch_check(k, j.bi, k->in[0]->shape[0]);
    if (rc < 0)
        return rc;
    memset(j.out, 0, k->out[0]->nbytes);
    bool f32 = k->in[0]->dtype == VQ_F32;
    /* channels write disjoint images of dX */
    return vq__parallel_for(j.c, 4, f32 ? roi_dx_range_f32 : roi_dx_range_f64, &j);
}

const vq__op_def vq__ops_sample[] = {
    {.type = "grid_sample",
     .in_slots = grid_in,
     .nin_slots = 2,
     .out_slots = out_slot,
     .nout_slots = 1,
     .attrs = grid_attrs,
     .nattrs = 3,
     .params_size = sizeof(vq__grid_sample_params),
     .infer = grid_infer,
     .kernel = {grid_kernel},
     .cuda = VQ__CUDA_OP(vq__grid_sample_gpu),
     .grad = grid_grad},
    {.type = "grid_sample_grad",
     .in_slots = grid_grad_in,
     .nin_slots = 3,
     .out_slots = din_out,
     .nout_slots = 1,
     .attrs = grid_attrs,
     .nattrs = 4,
     .params_size = sizeof(vq__grid_sample_params),
     .infer = grid_grad_infer,
     .kernel = {grid_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__grid_sample_grad_gpu)},
    {.type = "roi_align",
     .in_slots = roi_in,
     .nin_slots = 3,
     .out_slots = out_slot,
     .nout_slots = 1,
     .attrs = roi_attrs,
     .nattrs = 6,
     .params_size = sizeof(vq__roi_align_params),
     .infer = roi_infer,
     .kernel = {roi_kernel},
     .cuda = VQ__CUDA_OP(vq__roi_align_gpu),
     .grad = roi_grad},
    {.type = "roi_align_grad",
     .in_slots = roi_grad_in,
     .nin_slots = 4,
     .out_slots = dx_out,
     .nout_slots = 1,
     .attrs = roi_attrs,
     .nattrs = 6,
     .params_size = sizeof(vq__roi_align_params),
     .infer = roi_grad_infer,
     .kernel = {roi_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__roi_align_grad_gpu)},
    {0},
};
