/* What the ops whose output shapes depend on data (ops/cpu/dynamic.c) run
 * alike on the CPU and in their CUDA kernels (ops/cuda/dynamic.cu): the
 * order top_k and unique sort elements in, top_k's selection of one
 * slice, unique's whole computation, and non_max_suppression's. Written
 * once, so that the two compute the same bits (nvcc with --fmad=false, as
 * ops/cuda/kernels.h says); the CPU inference runs the same functions to
 * count what the outputs will hold. Plain C, and __host__ __device__
 * under nvcc (VQ__SHARED_FN).
 *
 * Every order here is total: equal keys fall back to the lower index, so
 * a heap sort (in place, no recursion, usable by one GPU thread) gives
 * the one result a stable sort would. */
#ifndef VARQ_OPS_DYNAMIC_SHARED_H
#define VARQ_OPS_DYNAMIC_SHARED_H

#include "shape_shared.h" /* VQ__SHARED_FN */

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* Element i of x, of dtype dt (f32, f64, i32, i64, bool), compared with
 * element j: -1, 0 or 1. NaN is greater than every number and equal to
 * NaN (numpy's sort and unique); -0 equals 0. */
VQ__SHARED_FN int vq__dyn_cmp(const void *x, int dt, int64_t i, int64_t j)
{
    switch (dt) {
    case VQ_F32: {
        float a = ((const float *)x)[i], b = ((const float *)x)[j];
        if (a != a || b != b)
            return (a != a) - (b != b);
        return (a > b) - (a < b);
    }
    case VQ_F64: {
        double a = ((const double *)x)[i], b = ((const double *)x)[j];
        if (a != a || b != b)
            return (a != a) - (b != b);
        return (a > b) - (a < b);
    }
    case VQ_I32: {
        int32_t a = ((const int32_t *)x)[i], b = ((const int32_t *)x)[j];
        return (a > b) - (a < b);
    }
    case VQ_I64: {
        int64_t a = ((const int64_t *)x)[i], b = ((const int64_t *)x)[j];
        return (a > b) - (a < b);
    }
    default: {
        uint8_t a = ((const uint8_t *)x)[i], b = ((const uint8_t *)x)[j];
        return (a > b) - (a < b);
    }
    }
}

/* ---- top_k ---- */

/* Whether element a of a slice (elements stride apart from x) comes
 * before element b in top_k's order: the larger first (largest) or the
 * smaller, then the lower index. */
VQ__SHARED_FN bool vq__topk_before(const void *x, int dt, int64_t stride, int64_t a, int64_t b,
                                   bool largest)
{
    int c = vq__dyn_cmp(x, dt, a * stride, b * stride);
    if (c != 0)
        return largest ? c > 0 : c < 0;
    return a < b;
}

/* Restores the heap below node i of h[0..n): every parent comes after
 * its children in the order (the root is the last of the kept ones). */
VQ__SHARED_FN void vq__topk_sift(int64_t *h, int64_t n, int64_t i, const void *x, int dt,
                                 int64_t stride, bool largest)
{
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && vq__topk_before(x, dt, stride, h[c], h[c + 1], largest))
            c++; /* the later child */
        if (!vq__topk_before(x, dt, stride, h[i], h[c], largest))
            return;
        int64_t t = h[i];
        h[i] = h[c];
        h[c] = t;
        i = c;
    }
}

/* The first k of the n elements of one slice (x, elements stride apart)
 * in top_k's order, into h[0..k): their indices, first to last. A heap of
 * the k best seen so far, whose root is the worst of them. */
VQ__SHARED_FN void vq__topk_slice(const void *x, int dt, int64_t n, int64_t stride, int64_t k,
                                  bool largest, int64_t *h)
{
    if (k <= 0)
        return;
    int64_t size = 0;
    for (int64_t i = 0; i < n; i++) {
        if (size < k) {
            /* sift up */
            int64_t j = size++;
            h[j] = i;
            while (j > 0) {
                int64_t p = (j - 1) / 2;
                if (!vq__topk_before(x, dt, stride, h[p], h[j], largest))
                    break;
                int64_t t = h[p];
                h[p] = h[j];
                h[j] = t;
                j = p;
            }
        } else if (vq__topk_before(x, dt, stride, i, h[0], largest)) {
            h[0] = i;
            vq__topk_sift(h, size, 0, x, dt, stride, largest);
        }
    }
    /* the worst to the end, one at a time: best first */
    for (int64_t end = size - 1; end > 0; end--) {
        int64_t t = h[0];
        h[0] = h[end];
        h[end] = t;
        vq__topk_sift(h, end, 0, x, dt, stride, largest);
    }
}

/* ---- unique ---- */

/* X seen as [outer, m, inner]: unique compares its m slices (each the
 * outer x inner elements at one index of the middle dim, o-major), as
 * numpy's unique along an axis does; without an axis outer = inner = 1. */
typedef struct vq__unique_geom {
    int dt;
    int64_t outer, m, inner;
    bool sorted;
} vq__unique_geom;

/* Slice a against slice b, lexicographically: -1, 0 or 1. */
VQ__SHARED_FN int vq__unique_cmp(const void *x, const vq__unique_geom *g, int64_t a, int64_t b)
{
    for (int64_t o = 0; o < g->outer; o++)
        for (int64_t i = 0; i < g->inner; i++) {
            int64_t base = o * g->m * g->inner + i;
            int c = vq__dyn_cmp(x, g->dt, base + a * g->inner, base + b * g->inner);
            if (c)
                return c;
        }
    return 0;
}

/* The key order of the heap sorts below: slices (by value, then index)
 * when key is NULL, else the integers key[] (then index). */
VQ__SHARED_FN bool vq__unique_before(const void *x, const vq__unique_geom *g, const int64_t *key,
                                     int64_t a, int64_t b)
{
    if (key)
        return key[a] != key[b] ? key[a] < key[b] : a < b;
    int c = vq__unique_cmp(x, g, a, b);
    return c ? c < 0 : a < b;
}

VQ__SHARED_FN void vq__unique_sift(int64_t *h, int64_t n, int64_t i, const void *x,
                                   const vq__unique_geom *g, const int64_t *key)
{
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && vq__unique_before(x, g, key, h[c], h[c + 1]))
            c++;
        if (!vq__unique_before(x, g, key, h[i], h[c]))
            return;
        int64_t t = h[i];
        h[i] = h[c];
        h[c] = t;
        i = c;
    }
}

/* h[0..n) sorted ascending in vq__unique_before's order. */
VQ__SHARED_FN void vq__unique_sort(int64_t *h, int64_t n, const void *x, const vq__unique_geom *g,
                                   const int64_t *key)
{
    for (int64_t i = n / 2 - 1; i >= 0; i--)
        vq__unique_sift(h, n, i, x, g, key);
    for (int64_t end = n - 1; end > 0; end--) {
        int64_t t = h[0];
        h[0] = h[end];
        h[end] = t;
        vq__unique_sift(h, end, 0, x, g, key);
    }
}

/* unique of x: returns the number of distinct slices U. w: 4 m scratch
 * integers. When y is not NULL, also writes the outputs: y (x's dtype,
 * [outer, U, inner]; es its element size) the distinct slices, first
 * occurrence's bits; first[U] the index of each one's first occurrence;
 * inverse[m] each slice's index in y; counts[U]. Sorted: ascending;
 * otherwise in the order of first occurrences. */
VQ__SHARED_FN int64_t vq__unique_run(const void *x, const vq__unique_geom *g, int64_t *w, void *y,
                                     int es, int64_t *first, int64_t *inverse, int64_t *counts)
{
    int64_t m = g->m, *ord = w, *gfirst = w + m, *gorder = w + 2 * m, *grank = w + 3 * m;
    for (int64_t i = 0; i < m; i++)
        ord[i] = i;
    vq__unique_sort(ord, m, x, g, NULL);
    /* groups of equal slices; each group's first is its lowest index */
    int64_t u = 0;
    for (int64_t j = 0; j < m; j++) {
        if (j == 0 || vq__unique_cmp(x, g, ord[j - 1], ord[j]) != 0)
            gfirst[u++] = ord[j];
        if (inverse)
            inverse[ord[j]] = u - 1;
    }
    if (!y)
        return u;
    for (int64_t r = 0; r < u; r++)
        gorder[r] = r;
    if (!g->sorted) /* groups in the order of their first indices */
        vq__unique_sort(gorder, u, x, g, gfirst);
    for (int64_t r = 0; r < u; r++)
        grank[gorder[r]] = r;
    for (int64_t r = 0; r < u; r++) {
        int64_t s = gfirst[gorder[r]];
        first[r] = s;
        counts[r] = 0;
        for (int64_t o = 0; o < g->outer; o++)
            for (int64_t i = 0; i < g->inner * es; i++)
                ((char *)y)[((o * u + r) * g->inner) * es + i] =
                    ((const char *)x)[((o * m + s) * g->inner) * es + i];
    }
    for (int64_t i = 0; i < m; i++) {
        inverse[i] = grank[inverse[i]];
        counts[inverse[i]]++;
    }
    return u;
}

/* ---- non_max_suppression ---- */

/* Whether box a suppresses box b (ONNX Runtime's SuppressByIOU, which
 * ONNX's reference follows): corners [y1, x1, y2, x2] in either order
 * (center 0) or [x_center, y_center, width, height] (center 1), their
 * intersection over union above thr, in float. */
VQ__SHARED_FN bool vq__nms_suppresses(const float *a, const float *b, int center, float thr)
{
    float ax0, ax1, ay0, ay1, bx0, bx1, by0, by1;
    if (center == 0) {
        ax0 = fminf(a[1], a[3]), ax1 = fmaxf(a[1], a[3]);
        bx0 = fminf(b[1], b[3]), bx1 = fmaxf(b[1], b[3]);
        ay0 = fminf(a[0], a[2]), ay1 = fmaxf(a[0], a[2]);
        by0 = fminf(b[0], b[2]), by1 = fmaxf(b[0], b[2]);
    } else {
        float aw = a[2] / 2, bw = b[2] / 2, ah = a[3] / 2, bh = b[3] / 2;
        ax0 = a[0] - aw, ax1 = a[0] + aw, bx0 = b[0] - bw, bx1 = b[0] + bw;
        ay0 = a[1] - ah, ay1 = a[1] + ah, by0 = b[1] - bh, by1 = b[1] + bh;
    }
    float ix0 = fmaxf(ax0, bx0), ix1 = fminf(ax1, bx1);
    if (ix1 <= ix0)
        return false;
    float iy0 = fmaxf(ay0, by0), iy1 = fminf(ay1, by1);
    if (iy1 <= iy0)
        return false;
    float inter = (ix1 - ix0) * (iy1 - iy0);
    if (inter <= 0.0f)
        return false;
    float area_a = (ax1 - ax0) * (ay1 - ay0), area_b = (bx1 - bx0) * (by1 - by0);
    float uni = area_a + area_b - inter;
    if (area_a <= 0.0f || area_b <= 0.0f || uni <= 0.0f)
        return false;
    return inter / uni > thr;
}

/* Candidate a before b: the higher score, then the lower index; NaN
 * scores last. */
VQ__SHARED_FN bool vq__nms_before(const float *s, int64_t a, int64_t b)
{
    float x = s[a], y = s[b];
    if (x != y) {
        if (x != x || y != y)
            return y != y && x == x;
        return x > y;
    }
    return a < b;
}

VQ__SHARED_FN void vq__nms_sift(int64_t *h, int64_t n, int64_t i, const float *s)
{
    for (;;) {
        int64_t c = 2 * i + 1;
        if (c >= n)
            return;
        if (c + 1 < n && vq__nms_before(s, h[c], h[c + 1]))
            c++;
        if (!vq__nms_before(s, h[i], h[c]))
            return;
        int64_t t = h[i];
        h[i] = h[c];
        h[c] = t;
        i = c;
    }
}

/* One NMS problem: boxes [batches, spatial, 4], scores [batches, classes,
 * spatial] (f32); at most max_out selected per class; a score threshold
 * when has_thr (a candidate's score must exceed it). Per batch, then
 * class: candidates in score order, each kept unless a box kept before
 * it in its class suppresses it, until max_out are kept. Returns how many
 * are kept in all; out (NULL: only count) gets their [batch, class, box]
 * rows. w: 2 * spatial scratch integers. */
typedef struct vq__nms_problem {
    int64_t batches, classes, spatial, max_out;
    int center;
    bool has_thr;
    float iou, score_thr;
} vq__nms_problem;

/* The candidates of one class (scores s of ns boxes) into ord, in score
 * order; returns how many. */
VQ__SHARED_FN int64_t vq__nms_order(const float *s, int64_t ns, const vq__nms_problem *p,
                                    int64_t *ord)
{
    int64_t n = 0;
    for (int64_t i = 0; i < ns; i++)
        if (!p->has_thr || s[i] > p->score_thr)
            ord[n++] = i;
    /* heap sort: the last in the order at the root, moved to the end */
    for (int64_t i = n / 2 - 1; i >= 0; i--)
        vq__nms_sift(ord, n, i, s);
    for (int64_t end = n - 1; end > 0; end--) {
        int64_t t = ord[0];
        ord[0] = ord[end];
        ord[end] = t;
        vq__nms_sift(ord, end, 0, s);
    }
    return n;
}

/* Every candidate against every box kept before it: what the CUDA kernel
 * runs (ops/cpu/dynamic.c has the CPU's faster equivalent). */
VQ__SHARED_FN int64_t vq__nms_run(const float *boxes, const float *scores, const vq__nms_problem *p,
                                  int64_t *w, int64_t *out)
{
    int64_t total = 0, ns = p->spatial, *ord = w, *sel = w + ns;
    if (p->max_out <= 0)
        return 0;
    for (int64_t b = 0; b < p->batches; b++)
        for (int64_t c = 0; c < p->classes; c++) {
            const float *s = scores + (b * p->classes + c) * ns, *bx = boxes + b * ns * 4;
            int64_t n = vq__nms_order(s, ns, p, ord);
            int64_t kept = 0;
            for (int64_t j = 0; j < n && kept < p->max_out; j++) {
                bool keep = true;
                for (int64_t q = 0; q < kept && keep; q++)
                    keep = !vq__nms_suppresses(bx + ord[j] * 4, bx + sel[q] * 4, p->center, p->iou);
                if (!keep)
                    continue;
                sel[kept++] = ord[j];
                if (out) {
                    out[total * 3] = b;
                    out[total * 3 + 1] = c;
                    out[total * 3 + 2] = ord[j];
                }
                total++;
            }
        }
    return total;
}

#endif
