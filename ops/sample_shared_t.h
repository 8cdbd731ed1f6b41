/* The text of ops/sample_shared.h's functions for one floating type,
 * included by that header once per type with VQ__SAMPLE_T (the type),
 * VQ__SAMPLE_NAME (a name's suffixed form) and VQ__SAMPLE_FN (math.h's
 * function of the type) defined. No include guard: that is the point. */

#define T VQ__SAMPLE_T
#define N(name) VQ__SAMPLE_NAME(name)
#define F(fn) VQ__SAMPLE_FN(fn)

/* ---- grid_sample ---- */

/* torch's clip_coordinates(_set_grad): c clamped to [0, n - 1]; *g its
 * derivative, 1 strictly inside and 0 elsewhere. NaN stays NaN. */
VQ__SHARED_FN T N(vq__grid_clip)(T c, int64_t n, T *g)
{
    T hi = (T)(n - 1);
    *g = 0;
    if (c <= 0)
        return 0;
    if (c >= hi)
        return hi;
    *g = 1;
    return c;
}

/* torch's reflect_coordinates(_set_grad): c reflected about lo2 / 2 and
 * hi2 / 2 until it lies between them; *g its derivative, 1 or -1. */
VQ__SHARED_FN T N(vq__grid_reflect)(T c, int64_t lo2, int64_t hi2, T *g)
{
    if (lo2 == hi2) {
        *g = 0;
        return 0;
    }
    T lo = (T)lo2 / 2, span = (T)(hi2 - lo2) / 2, sign = 1;
    c = c - lo;
    if (c < 0) {
        sign = -1;
        c = -c;
    }
    T extra = F(fmod)(c, span), flips = F(floor)(c / span);
    if (F(fmod)(flips, (T)2) == 0) {
        *g = sign;
        return extra + lo;
    }
    *g = -sign;
    return span - extra + lo;
}

/* torch's compute_coordinates: c moved by the padding mode along a dim of
 * n; *g (the derivative so far) times the move's. */
VQ__SHARED_FN T N(vq__grid_pad)(T c, int64_t n, int padding, int align, T *g)
{
    T gc, gr;
    if (padding == VQ__GRID_BORDER) {
        c = N(vq__grid_clip)(c, n, &gc);
        *g = *g * gc;
    } else if (padding == VQ__GRID_REFLECTION) {
        c = align ? N(vq__grid_reflect)(c, 0, 2 * (n - 1), &gr)
                  : N(vq__grid_reflect)(c, -1, 2 * n - 1, &gr);
        c = N(vq__grid_clip)(c, n, &gc);
        *g = *g * gr * gc;
    }
    return c;
}

/* torch's grid_sampler_unnormalize(_set_grad): grid value v as a
 * coordinate along a dim of n; *g its derivative. */
VQ__SHARED_FN T N(vq__grid_unnormalize)(T v, int64_t n, int align, T *g)
{
    if (align) {
        *g = (T)(n - 1) / 2;
        return ((v + 1) / 2) * (T)(n - 1);
    }
    *g = (T)n / 2;
    return ((v + 1) * (T)n - 1) / 2;
}

/* The element c names along a dim of n as torch reads it (truncated), or
 * -1 outside the dim (NaN too); never converts an out-of-range float. */
VQ__SHARED_FN int64_t N(vq__grid_index)(T c, int64_t n)
{
    if (!(c > -1 && c < (T)n))
        return -1;
    int64_t i = (int64_t)c;
    return i < n ? i : -1;
}

/* One grid point: its taps along each axis (n per axis: 1 nearest, 2
 * bilinear, 4 bicubic), as X's column (col) and row offset (row * W), -1
 * for a tap outside X; the weights along each axis (bicubic: Keys'
 * coefficients), bicubic's coefficients' derivatives (torch's sign), and
 * each source coordinate's derivative by its grid value (mx, my). */
typedef struct N(vq__grid_pt) {
    int n;
    int64_t col[4], row[4];
    T wx[4], wy[4], gx[4], gy[4];
    T mx, my;
} N(vq__grid_pt);

/* Keys' cubic coefficients of fraction t (torch's
 * get_cubic_upsample_coefficients) and their derivatives
 * (get_cubic_coefficients_grad), a = -0.75. */
VQ__SHARED_FN void N(vq__grid_cubic)(T t, T *w, T *gw)
{
    const T a = (T)-0.75;
    T x = t + 1;
    w[0] = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    w[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
    x = 1 - t;
    w[2] = ((a + 2) * x - (a + 3)) * x * x + 1;
    x = x + 1;
    w[3] = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
    x = -1 - t;
    gw[0] = (-3 * a * x - 10 * a) * x - 8 * a;
    x = -t;
    gw[1] = (-3 * (a + 2) * x - 2 * (a + 3)) * x;
    x = 1 - t;
    gw[2] = (3 * (a + 2) * x - 2 * (a + 3)) * x;
    x = 2 - t;
    gw[3] = (3 * a * x - 10 * a) * x + 8 * a;
}

/* One axis of a grid point: grid value v along a dim of n whose
 * elements are stride apart; the taps into at, weights into w (and gw),
 * the coordinate's derivative into *m. */
VQ__SHARED_FN void N(vq__grid_axis)(T v, int64_t n, int64_t stride, int mode, int padding,
                                    int align, int64_t *at, T *w, T *gw, T *m)
{
    if (mode == VQ__GRID_BICUBIC) {
        T c = N(vq__grid_unnormalize)(v, n, align, m);
        T f = F(floor)(c), ignored = 1;
        N(vq__grid_cubic)(c - f, w, gw);
        for (int i = 0; i < 4; i++) {
            int64_t k =
                N(vq__grid_index)(N(vq__grid_pad)(f - 1 + (T)i, n, padding, align, &ignored), n);
            at[i] = k < 0 ? -1 : k * stride;
        }
        return;
    }
    T c = N(vq__grid_unnormalize)(v, n, align, m);
    c = N(vq__grid_pad)(c, n, padding, align, m);
    if (mode == VQ__GRID_NEAREST) {
        int64_t k = N(vq__grid_index)(F(nearbyint)(c), n);
        at[0] = k < 0 ? -1 : k * stride;
        w[0] = 1;
        return;
    }
    T f = F(floor)(c);
    int64_t k0 = N(vq__grid_index)(f, n), k1 = N(vq__grid_index)(f + 1, n);
    at[0] = k0 < 0 ? -1 : k0 * stride;
    at[1] = k1 < 0 ? -1 : k1 * stride;
    w[0] = (f + 1) - c;
    w[1] = c - f;
}

/* The grid point (gx, gy) (the grid's last dim: x first) on an image of
 * h x w. */
VQ__SHARED_FN void N(vq__grid_point)(T gx, T gy, int64_t h, int64_t w,
                                     const vq__grid_sample_params *p, N(vq__grid_pt) * pt)
{
    pt->n = p->mode == VQ__GRID_BICUBIC ? 4 : p->mode == VQ__GRID_NEAREST ? 1 : 2;
    N(vq__grid_axis)(gx, w, 1, p->mode, p->padding, p->align, pt->col, pt->wx, pt->gx, &pt->mx);
    N(vq__grid_axis)(gy, h, w, p->mode, p->padding, p->align, pt->row, pt->wy, pt->gy, &pt->my);
}

/* X's value at tap (r, c) of pt in image img, 0 outside. */
VQ__SHARED_FN T N(vq__grid_tap)(const N(vq__grid_pt) * pt, const T *img, int r, int c)
{
    return pt->row[r] >= 0 && pt->col[c] >= 0 ? img[pt->row[r] + pt->col[c]] : (T)0;
}

/* The sampled value of pt in one channel's image img. bilinear: 0, then
 * each tap inside X's value times its weight added (rows, then columns);
 * bicubic: each row's sum of values times column coefficients, then the
 * rows' sum times row coefficients. */
VQ__SHARED_FN T N(vq__grid_value)(const N(vq__grid_pt) * pt, const T *img)
{
    if (pt->n == 1)
        return N(vq__grid_tap)(pt, img, 0, 0);
    if (pt->n == 2) {
        T v = 0;
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 2; c++)
                if (pt->row[r] >= 0 && pt->col[c] >= 0)
                    v += img[pt->row[r] + pt->col[c]] * (pt->wx[c] * pt->wy[r]);
        return v;
    }
    T rows[4];
    for (int r = 0; r < 4; r++)
        rows[r] = N(vq__grid_tap)(pt, img, r, 0) * pt->wx[0] +
                  N(vq__grid_tap)(pt, img, r, 1) * pt->wx[1] +
                  N(vq__grid_tap)(pt, img, r, 2) * pt->wx[2] +
                  N(vq__grid_tap)(pt, img, r, 3) * pt->wx[3];
    return rows[0] * pt->wy[0] + rows[1] * pt->wy[1] + rows[2] * pt->wy[2] + rows[3] * pt->wy[3];
}

/* What one element g of dOut adds to dX's image through pt: the taps
 * inside X, as offsets into off and amounts into amt (at most 16), in
 * torch's order; returns how many. */
VQ__SHARED_FN int N(vq__grid_scatter)(const N(vq__grid_pt) * pt, T g, int64_t *off, T *amt)
{
    int k = 0;
    if (pt->n == 1) {
        if (pt->row[0] >= 0 && pt->col[0] >= 0) {
            off[k] = pt->row[0] + pt->col[0];
            amt[k++] = g;
        }
    } else if (pt->n == 2) {
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 2; c++)
                if (pt->row[r] >= 0 && pt->col[c] >= 0) {
                    off[k] = pt->row[r] + pt->col[c];
                    amt[k++] = (pt->wx[c] * pt->wy[r]) * g;
                }
    } else {
        for (int c = 0; c < 4; c++)
            for (int r = 0; r < 4; r++)
                if (pt->row[r] >= 0 && pt->col[c] >= 0) {
                    off[k] = pt->row[r] + pt->col[c];
                    amt[k++] = g * pt->wx[c] * pt->wy[r];
                }
    }
    return k;
}

/* Adds to *gx and *gy what one channel (image img, dOut element g) adds
 * to the derivative of pt's value by its source coordinates (torch's
 * grid_sampler_2d_backward, before the multipliers mx and my). nearest
 * adds nothing. */
VQ__SHARED_FN void N(vq__grid_dgrid)(const N(vq__grid_pt) * pt, const T *img, T g, T *gx, T *gy)
{
    if (pt->n == 2) {
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 2; c++) {
                if (pt->row[r] < 0 || pt->col[c] < 0)
                    continue;
                T v = img[pt->row[r] + pt->col[c]];
                if (c == 0)
                    *gx -= v * pt->wy[r] * g;
                else
                    *gx += v * pt->wy[r] * g;
                if (r == 0)
                    *gy -= v * pt->wx[c] * g;
                else
                    *gy += v * pt->wx[c] * g;
            }
    } else if (pt->n == 4) {
        for (int c = 0; c < 4; c++)
            for (int r = 0; r < 4; r++) {
                T v = N(vq__grid_tap)(pt, img, r, c);
                *gx -= v * pt->gx[c] * pt->wy[r] * g;
                *gy -= v * pt->gy[r] * pt->wx[c] * g;
            }
    }
}

/* ---- roi_align ---- */

/* One RoI's bins: the first bin's corner (x0, y0), a bin's size (bw,
 * bh), the sampling grid per bin (gh x gw points) and the divisor of the
 * average (count, at least 1). */
typedef struct N(vq__roi_box) {
    T x0, y0, bw, bh, count;
    int64_t gh, gw;
} N(vq__roi_box);

/* ceil(q) as a sampling grid's size: 0 for q <= 0 or NaN, at most 2^31. */
VQ__SHARED_FN int64_t N(vq__roi_grid)(T q)
{
    q = F(ceil)(q);
    return q > 0 ? (q < (T)2147483648.0 ? (int64_t)q : (int64_t)1 << 31) : 0;
}

/* The box of RoI roi ([x1, y1, x2, y2]) under p (ONNX Runtime's and
 * torchvision's order of operations). */
VQ__SHARED_FN void N(vq__roi_box_of)(const T *roi, const vq__roi_align_params *p,
                                     N(vq__roi_box) * b)
{
    T off = p->half_pixel ? (T)0.5 : (T)0, s = (T)p->scale;
    T x0 = roi[0] * s - off, y0 = roi[1] * s - off;
    T x1 = roi[2] * s - off, y1 = roi[3] * s - off;
    T rw = x1 - x0, rh = y1 - y0;
    if (!p->half_pixel) { /* malformed RoIs become 1 x 1 */
        rw = rw < 1 ? (T)1 : rw;
        rh = rh < 1 ? (T)1 : rh;
    }
    b->x0 = x0;
    b->y0 = y0;
    b->bh = rh / (T)p->oh;
    b->bw = rw / (T)p->ow;
    b->gh = p->ratio > 0 ? p->ratio : N(vq__roi_grid)(rh / (T)p->oh);
    b->gw = p->ratio > 0 ? p->ratio : N(vq__roi_grid)(rw / (T)p->ow);
    int64_t count = b->gh * b->gw;
    b->count = (T)(count > 1 ? count : 1);
}

/* Sampling point (iy, ix) of bin (ph, pw) of b on an image of h x w: its
 * four taps (offsets into pos: low row low column, low high, high low,
 * high high) and their weights; false when the point is outside X by
 * more than a pixel (or not a number), and reads nothing. */
VQ__SHARED_FN bool N(vq__roi_sample)(const N(vq__roi_box) * b, int64_t ph, int64_t pw, int64_t iy,
                                     int64_t ix, int64_t h, int64_t w, int64_t *pos, T *wt)
{
    T y = b->y0 + (T)ph * b->bh + ((T)iy + (T)0.5) * b->bh / (T)b->gh;
    T x = b->x0 + (T)pw * b->bw + ((T)ix + (T)0.5) * b->bw / (T)b->gw;
    if (!(y >= -1 && y <= (T)h && x >= -1 && x <= (T)w) || h == 0 || w == 0)
        return false;
    y = y <= 0 ? (T)0 : y;
    x = x <= 0 ? (T)0 : x;
    int64_t yl = (int64_t)y, xl = (int64_t)x, yh, xh;
    if (yl >= h - 1) {
        yh = yl = h - 1;
        y = (T)yl;
    } else {
        yh = yl + 1;
    }
    if (xl >= w - 1) {
        xh = xl = w - 1;
        x = (T)xl;
    } else {
        xh = xl + 1;
    }
    T ly = y - (T)yl, lx = x - (T)xl, hy = 1 - ly, hx = 1 - lx;
    wt[0] = hy * hx;
    wt[1] = hy * lx;
    wt[2] = ly * hx;
    wt[3] = ly * lx;
    pos[0] = yl * w + xl;
    pos[1] = yl * w + xh;
    pos[2] = yh * w + xl;
    pos[3] = yh * w + xh;
    return true;
}

/* std::max's choice: b when a < b, else a. */
VQ__SHARED_FN T N(vq__roi_max)(T a, T b)
{
    return a < b ? b : a;
}

/* Out's element for bin (ph, pw) of b in one channel's image img (h x
 * w): avg, the points' interpolated values summed in order and divided by
 * the count; max, the largest weighted tap over the points (0 when the bin
 * has none). */
VQ__SHARED_FN T N(vq__roi_bin)(const N(vq__roi_box) * b, int mode, int64_t ph, int64_t pw,
                               const T *img, int64_t h, int64_t w)
{
    T out = 0;
    bool first = true;
    for (int64_t iy = 0; iy < b->gh; iy++)
        for (int64_t ix = 0; ix < b->gw; ix++) {
            int64_t pos[4];
            T wt[4], v = 0;
            bool in = N(vq__roi_sample)(b, ph, pw, iy, ix, h, w, pos, wt);
            if (mode == VQ__ROI_AVG) {
                if (in)
                    v = wt[0] * img[pos[0]] + wt[1] * img[pos[1]] + wt[2] * img[pos[2]] +
                        wt[3] * img[pos[3]];
                out += v;
                continue;
            }
            if (in)
                v = N(vq__roi_max)(N(vq__roi_max)(N(vq__roi_max)(wt[0] * img[pos[0]],
                                                                 wt[1] * img[pos[1]]),
                                                  wt[2] * img[pos[2]]),
                                   wt[3] * img[pos[3]]);
            out = first ? v : N(vq__roi_max)(out, v);
            first = false;
        }
    return mode == VQ__ROI_AVG ? out / b->count : out;
}

#undef T
#undef N
#undef F
