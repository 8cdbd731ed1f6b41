/* CUDA kernels for the ops whose output shapes depend on data
 * (ops/cpu/dynamic.c): nonzero (one block: chunk counts, their scan,
 * then each chunk's coordinates), top_k (a thread per slice), unique and
 * non_max_suppression (one thread: sorting and suppression are
 * sequential, and these run on the small tensors models give them), and
 * compress and its gradient (the places by one thread, then a thread per
 * element). Outputs come sized by the inference that ran on the host;
 * the kernels fill them. top_k, unique and non_max_suppression run
 * ops/dynamic_shared.h's functions, as the CPU does: its bits. Launchers:
 * kernels.h. */
#include "kernels.h"

#include <stdint.h>

/* ---- nonzero ---- */

#define NZ_THREADS 256

struct nz_dims {
    int ndim;
    int64_t shape[VQ_MAX_DIMS];
};

template <typename T>
__device__ bool nz_at(const T *x, int64_t i)
{
    return x[i] != (T)0;
}

template <typename T>
__global__ void nonzero_kernel(const T *x, int64_t n, nz_dims d, int64_t *out, int64_t count)
{
    __shared__ int64_t start[NZ_THREADS];
    int64_t chunk = (n + NZ_THREADS - 1) / NZ_THREADS, lo = threadIdx.x * chunk;
    int64_t hi = lo + chunk < n ? lo + chunk : n, c = 0;
    for (int64_t i = lo; i < hi; i++)
        c += nz_at(x, i);
    start[threadIdx.x] = c;
    __syncthreads();
    if (threadIdx.x == 0) /* exclusive scan of the counts */
        for (int64_t t = 0, sum = 0; t < NZ_THREADS; t++) {
            int64_t v = start[t];
            start[t] = sum;
            sum += v;
        }
    __syncthreads();
    int64_t j = start[threadIdx.x];
    for (int64_t i = lo; i < hi && j < count; i++) {
        if (!nz_at(x, i))
            continue;
        int64_t r = i;
        for (int k = d.ndim - 1; k >= 0; k--) {
            out[k * count + j] = r % d.shape[k];
            r /= d.shape[k];
        }
        if (d.ndim == 0)
            out[j] = 0;
        j++;
    }
}

extern "C" int vq__cuda_nonzero(int dtype, const void *x, int64_t n, int ndim,
                                const int64_t *shape, int64_t *out, int64_t count, void *stream)
{
    if (n < 0 || count < 0 || ndim < 0 || ndim > VQ_MAX_DIMS)
        return VQ_EINVAL;
    if (count == 0)
        return 0;
    nz_dims d = {ndim, {0}};
    for (int i = 0; i < ndim; i++)
        d.shape[i] = shape[i];
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    switch (dtype) {
    case VQ_F32: nonzero_kernel<float><<<1, NZ_THREADS, 0, s>>>((const float *)x, n, d, out, count); break;
    case VQ_F64: nonzero_kernel<double><<<1, NZ_THREADS, 0, s>>>((const double *)x, n, d, out, count); break;
    case VQ_I32: nonzero_kernel<int32_t><<<1, NZ_THREADS, 0, s>>>((const int32_t *)x, n, d, out, count); break;
    case VQ_I64: nonzero_kernel<int64_t><<<1, NZ_THREADS, 0, s>>>((const int64_t *)x, n, d, out, count); break;
    case VQ_BOOL: nonzero_kernel<uint8_t><<<1, NZ_THREADS, 0, s>>>((const uint8_t *)x, n, d, out, count); break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}

/* ---- top_k ---- */

template <typename T>
__global__ void top_k_kernel(const T *x, T *vals, int64_t *idx, int64_t *heap, int64_t outer,
                             int64_t n, int64_t inner, int64_t k, int dtype, int largest)
{
    VQ__CUDA_FOR_EACH(s, outer * inner)
    {
        int64_t o = s / inner, i = s % inner;
        const T *base = x + o * n * inner + i;
        int64_t *h = heap + s * k;
        vq__topk_slice(base, dtype, n, inner, k, largest != 0, h);
        for (int64_t j = 0; j < k; j++) {
            int64_t at = (o * k + j) * inner + i;
            vals[at] = base[h[j] * inner];
            idx[at] = h[j];
        }
    }
}

extern "C" int vq__cuda_top_k(int dtype, const void *x, void *vals, int64_t *idx, int64_t *heap,
                              int64_t outer, int64_t n, int64_t inner, int64_t k, int largest,
                              void *stream)
{
    if (outer < 0 || n < 0 || inner < 0 || k < 0)
        return VQ_EINVAL;
    int64_t slices = outer * inner;
    if (slices == 0 || k == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned b = vq__cuda_blocks(slices);
#define TOP_K(T)                                                                              \
    top_k_kernel<T><<<b, VQ__CUDA_THREADS, 0, s>>>((const T *)x, (T *)vals, idx, heap, outer, \
                                                   n, inner, k, dtype, largest)
    switch (dtype) {
    case VQ_F32: TOP_K(float); break;
    case VQ_F64: TOP_K(double); break;
    case VQ_I32: TOP_K(int32_t); break;
    case VQ_I64: TOP_K(int64_t); break;
    default: return VQ_EINVAL;
    }
#undef TOP_K
    return vq__cuda_launched();
}

/* ---- unique ---- */

__global__ void unique_kernel(const void *x, vq__unique_geom g, int64_t *w, void *y, int es,
                              int64_t *first, int64_t *inverse, int64_t *counts)
{
    vq__unique_run(x, &g, w, y, es, first, inverse, counts);
}

extern "C" int vq__cuda_unique(const void *x, vq__unique_geom g, int64_t *w, void *y, int esize,
                               int64_t *first, int64_t *inverse, int64_t *counts, void *stream)
{
    if (g.m < 0 || g.outer < 0 || g.inner < 0)
        return VQ_EINVAL;
    if (g.m == 0)
        return 0;
    unique_kernel<<<1, 1, 0, VQ__CUDA_STREAM(stream)>>>(x, g, w, y, esize, first, inverse,
                                                         counts);
    return vq__cuda_launched();
}

/* ---- compress ---- */

/* pos[j]: the place of slice j among the kept ones (-1: left out). */
__global__ void compress_places(const uint8_t *cond, int64_t len, int64_t *pos)
{
    for (int64_t j = 0, t = 0; j < len; j++)
        pos[j] = cond[j] ? t++ : -1;
}

template <typename T>
__global__ void compress_kernel(const int64_t *pos, const T *x, T *out, int64_t outer, int64_t len,
                                int64_t dim, int64_t inner, int64_t n)
{
    VQ__CUDA_FOR_EACH(e, outer * len * inner)
    {
        int64_t i = e % inner, j = e / inner % len, o = e / inner / len;
        if (pos[j] >= 0)
            out[(o * n + pos[j]) * inner + i] = x[(o * dim + j) * inner + i];
    }
}

template <typename T>
__global__ void compress_grad_kernel(const uint8_t *cond, const int64_t *pos, const T *g, T *dx,
                                     int64_t outer, int64_t len, int64_t dim, int64_t inner,
                                     int64_t n)
{
    VQ__CUDA_FOR_EACH(e, outer * dim * inner)
    {
        int64_t i = e % inner, j = e / inner % dim, o = e / inner / dim;
        dx[e] = j < len && cond[j] ? g[(o * n + pos[j]) * inner + i] : (T)0;
    }
}

extern "C" int vq__cuda_compress(const uint8_t *cond, int64_t len, int64_t *pos, const void *x,
                                 void *out, int esize, int64_t outer, int64_t dim, int64_t inner,
                                 int64_t n, void *stream)
{
    if (len < 0 || outer < 0 || dim < 0 || inner < 0 || n < 0 || len > dim)
        return VQ_EINVAL;
    int64_t total = outer * len * inner;
    if (total == 0 || n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    compress_places<<<1, 1, 0, s>>>(cond, len, pos);
    unsigned b = vq__cuda_blocks(total);
    switch (esize) {
    case 1:
        compress_kernel<uint8_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            pos, (const uint8_t *)x, (uint8_t *)out, outer, len, dim, inner, n);
        break;
    case 4:
        compress_kernel<uint32_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            pos, (const uint32_t *)x, (uint32_t *)out, outer, len, dim, inner, n);
        break;
    case 8:
        compress_kernel<uint64_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            pos, (const uint64_t *)x, (uint64_t *)out, outer, len, dim, inner, n);
        break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}

extern "C" int vq__cuda_compress_grad(int dtype, const uint8_t *cond, int64_t len, int64_t *pos,
                                      const void *g, void *dx, int64_t outer, int64_t dim,
                                      int64_t inner, int64_t n, void *stream)
{
    if (len < 0 || outer < 0 || dim < 0 || inner < 0 || n < 0 || len > dim)
        return VQ_EINVAL;
    int64_t total = outer * dim * inner;
    if (total == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    if (len > 0)
        compress_places<<<1, 1, 0, s>>>(cond, len, pos);
    VQ__CUDA_LAUNCH_FLOATS(compress_grad_kernel, dtype, total, s,
                           (cond, pos, (const float *)g, (float *)dx, outer, len, dim, inner, n),
                           (cond, pos, (const double *)g, (double *)dx, outer, len, dim, inner, n));
    return vq__cuda_launched();
}

/* ---- non_max_suppression ---- */

__global__ void nms_kernel(const float *boxes, const float *scores, const void *max_out,
                           int max_dtype, const float *iou, const float *thr, vq__nms_problem p,
                           int64_t *w, int64_t *out)
{
    double mo = max_dtype == VQ_I32 ? (double)*(const int32_t *)max_out
                                    : (double)*(const int64_t *)max_out;
    p.max_out = mo > (double)INT64_MAX / 2 ? INT64_MAX / 2 : (int64_t)mo;
    p.iou = *iou;
    p.has_thr = thr != NULL;
    p.score_thr = thr ? *thr : 0.0f;
    vq__nms_run(boxes, scores, &p, w, out);
}

extern "C" int vq__cuda_nms(const float *boxes, const float *scores, const void *max_out,
                            int max_dtype, const float *iou, const float *thr, vq__nms_problem p,
                            int64_t *w, int64_t *out, void *stream)
{
    if (p.batches < 0 || p.classes < 0 || p.spatial < 0)
        return VQ_EINVAL;
    if (p.batches * p.classes * p.spatial == 0)
        return 0;
    nms_kernel<<<1, 1, 0, VQ__CUDA_STREAM(stream)>>>(boxes, scores, max_out, max_dtype, iou, thr,
                                                      p, w, out);
    return vq__cuda_launched();
}
