/* CUDA kernels for the indexing, extremum and layout ops (ops/cpu/index.c,
 * extremum.c, layout.c): gather and gather_elements and their scatter-add
 * gradients with the
 * device-side index check, argmax / argmin, reduce_max / reduce_min and
 * their gradient, tile and pad and their gradients. split, its gradient and
 * expand are vq__cuda_strided_copy boxes (shape.cu), put together by
 * ops/cuda/index_host.c and layout_host.c. Launchers: kernels.h.
 *
 * The gradients of tile and pad gather, one thread per element of dX,
 * the elements of dOut that read it, in the order of dOut's elements, which
 * is the order the CPU kernels add them in: the CPU's bits, without
 * atomics. gather_grad alone adds with atomics: which rows of dOut land on
 * a row of dX depends on the index values, and gathering them would cost a
 * pass over every index per element of dX. */
#include "kernels.h"
#include "../layout_shared.h"

#include <math.h>
#include <stdint.h>

#define GRID_LOOP(i, n)                                                                      \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);                \
         i += (int64_t)gridDim.x * blockDim.x)

/* Blocks for one block per output element (the loop covers the rest). */
static unsigned blocks_per_output(int64_t n)
{
    return (unsigned)(n > 65535 * 8 ? 65535 * 8 : n);
}

/* ---- the extremum rules of extremum.c, per type ---- */

template <typename T> struct num;
template <> struct num<float> {
    __device__ static float lowest() { return -INFINITY; }
    __device__ static float highest() { return INFINITY; }
    __device__ static bool nan(float v) { return isnan(v); }
    __device__ static bool neg(float v) { return signbit(v); }
};
template <> struct num<double> {
    __device__ static double lowest() { return -INFINITY; }
    __device__ static double highest() { return INFINITY; }
    __device__ static bool nan(double v) { return isnan(v); }
    __device__ static bool neg(double v) { return signbit(v); }
};
template <> struct num<int32_t> {
    __device__ static int32_t lowest() { return INT32_MIN; }
    __device__ static int32_t highest() { return INT32_MAX; }
    __device__ static bool nan(int32_t) { return false; }
    __device__ static bool neg(int32_t) { return false; } /* only asked of equal values */
};
template <> struct num<int64_t> {
    __device__ static int64_t lowest() { return INT64_MIN; }
    __device__ static int64_t highest() { return INT64_MAX; }
    __device__ static bool nan(int64_t) { return false; }
    __device__ static bool neg(int64_t) { return false; }
};

/* extremum.c's TAKES_MAX / TAKES_MIN: whether v replaces the running
 * extremum a. */
template <typename T> __device__ inline bool takes(int op, T v, T a)
{
    if (num<T>::nan(a))
        return false;
    if (num<T>::nan(v))
        return true;
    if (op == VQ__CUDA_EXTREMUM_MAX)
        return v > a || (v == a && num<T>::neg(a) && !num<T>::neg(v));
    return v < a || (v == a && !num<T>::neg(a) && num<T>::neg(v));
}

/* extremum.c's arg_better. */
template <typename T> __device__ inline bool arg_better(T v, T b, int op, int last)
{
    if (num<T>::nan(b))
        return last && num<T>::nan(v);
    if (num<T>::nan(v))
        return true;
    if (op == VQ__CUDA_EXTREMUM_MAX)
        return last ? v >= b : v > b;
    return last ? v <= b : v < b;
}

template <typename T> __device__ inline bool is_tie(T v, T m)
{
    return v == m || (num<T>::nan(v) && num<T>::nan(m));
}

/* ---- gather ---- */

template <typename I>
__global__ void index_check_kernel(const I *idx, int64_t n, int64_t dim, unsigned long long *bad)
{
    GRID_LOOP(j, n)
    {
        int64_t v = (int64_t)idx[j];
        if (v < -dim || v >= dim)
            atomicMin(bad, (unsigned long long)j);
    }
}

extern "C" int vq__cuda_index_check(int index_dtype, const void *idx, int64_t n, int64_t dim,
                                    unsigned long long *bad_at, void *stream)
{
    if (n < 0 || dim < 0 || !bad_at)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    if (index_dtype == VQ_I32)
        index_check_kernel<int32_t>
            <<<g, VQ__CUDA_THREADS, 0, s>>>((const int32_t *)idx, n, dim, bad_at);
    else if (index_dtype == VQ_I64)
        index_check_kernel<int64_t>
            <<<g, VQ__CUDA_THREADS, 0, s>>>((const int64_t *)idx, n, dim, bad_at);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

template <typename I>
__global__ void range_check_kernel(const I *idx, int64_t n, int64_t lo, int64_t hi,
                                   unsigned long long *bad)
{
    GRID_LOOP(j, n)
    {
        int64_t v = (int64_t)idx[j];
        if (v < lo || v >= hi)
            atomicMin(bad, (unsigned long long)j);
    }
}

extern "C" int vq__cuda_range_check(int index_dtype, const void *idx, int64_t n, int64_t lo,
                                    int64_t hi, unsigned long long *bad_at, void *stream)
{
    if (n < 0 || !bad_at)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    if (index_dtype == VQ_I32)
        range_check_kernel<int32_t>
            <<<g, VQ__CUDA_THREADS, 0, s>>>((const int32_t *)idx, n, lo, hi, bad_at);
    else if (index_dtype == VQ_I64)
        range_check_kernel<int64_t>
            <<<g, VQ__CUDA_THREADS, 0, s>>>((const int64_t *)idx, n, lo, hi, bad_at);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

template <typename E, typename I>
__global__ void gather_kernel(const E *x, const I *idx, E *out, int64_t total, int64_t dim,
                              int64_t inner, int64_t n)
{
    GRID_LOOP(e, total)
    {
        int64_t i = e % inner, j = (e / inner) % n, o = e / (inner * n);
        int64_t v = (int64_t)idx[j];
        v += v < 0 ? dim : 0;
        out[e] = v >= 0 && v < dim ? x[(o * dim + v) * inner + i] : (E)0;
    }
}

template <typename E>
static int gather_as(int index_dtype, const void *x, const void *idx, void *out, int64_t total,
                     int64_t dim, int64_t inner, int64_t n, cudaStream_t s)
{
    unsigned g = vq__cuda_blocks(total);
    if (index_dtype == VQ_I32)
        gather_kernel<E, int32_t><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const E *)x, (const int32_t *)idx, (E *)out, total, dim, inner, n);
    else if (index_dtype == VQ_I64)
        gather_kernel<E, int64_t><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const E *)x, (const int64_t *)idx, (E *)out, total, dim, inner, n);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

extern "C" int vq__cuda_gather(int esize, int index_dtype, const void *x, const void *idx,
                               void *out, int64_t outer, int64_t dim, int64_t inner, int64_t n,
                               void *stream)
{
    if (outer < 0 || dim < 0 || inner < 0 || n < 0)
        return VQ_EINVAL;
    int64_t total = outer * n * inner;
    if (total == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    switch (esize) {
    case 8: return gather_as<uint64_t>(index_dtype, x, idx, out, total, dim, inner, n, s);
    case 4: return gather_as<uint32_t>(index_dtype, x, idx, out, total, dim, inner, n, s);
    case 1: return gather_as<uint8_t>(index_dtype, x, idx, out, total, dim, inner, n, s);
    default: return VQ_EINVAL;
    }
}

template <typename T, typename I>
__global__ void gather_grad_kernel(const I *idx, const T *g, T *dx, int64_t total, int64_t dim,
                                   int64_t inner, int64_t n)
{
    GRID_LOOP(e, total)
    {
        int64_t i = e % inner, j = (e / inner) % n, o = e / (inner * n);
        int64_t v = (int64_t)idx[j];
        v += v < 0 ? dim : 0;
        if (v >= 0 && v < dim)
            atomicAdd(&dx[(o * dim + v) * inner + i], g[e]);
    }
}

template <typename T>
static int gather_grad_as(int index_dtype, const void *idx, const void *g, void *dx,
                          int64_t total, int64_t dim, int64_t inner, int64_t n, cudaStream_t s)
{
    unsigned b = vq__cuda_blocks(total);
    if (index_dtype == VQ_I32)
        gather_grad_kernel<T, int32_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const int32_t *)idx, (const T *)g, (T *)dx, total, dim, inner, n);
    else if (index_dtype == VQ_I64)
        gather_grad_kernel<T, int64_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const int64_t *)idx, (const T *)g, (T *)dx, total, dim, inner, n);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

extern "C" int vq__cuda_gather_grad(int dtype, int index_dtype, const void *idx, const void *g,
                                    void *dx, int64_t outer, int64_t dim, int64_t inner,
                                    int64_t n, void *stream)
{
    if (outer < 0 || dim < 0 || inner < 0 || n < 0 || (dtype != VQ_F32 && dtype != VQ_F64))
        return VQ_EINVAL;
    size_t es = dtype == VQ_F32 ? sizeof(float) : sizeof(double);
    int64_t nx = outer * dim * inner, total = outer * n * inner;
    if (nx == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    int rc = vq__cuda_called(cudaMemsetAsync(dx, 0, (size_t)nx * es, s));
    if (rc < 0 || total == 0)
        return rc;
    if (dtype == VQ_F32)
        return gather_grad_as<float>(index_dtype, idx, g, dx, total, dim, inner, n, s);
    return gather_grad_as<double>(index_dtype, idx, g, dx, total, dim, inner, n, s);
}

/* ---- argmax, argmin ---- */

template <typename T>
__global__ void arg_kernel(const T *x, int64_t *out, int64_t lanes, int64_t len, int64_t inner,
                           int op, int last)
{
    GRID_LOOP(e, lanes)
    {
        const T *p = x + (e / inner) * len * inner + e % inner;
        int64_t best = 0;
        for (int64_t l = 1; l < len; l++)
            if (arg_better(p[l * inner], p[best * inner], op, last))
                best = l;
        out[e] = best;
    }
}

extern "C" int vq__cuda_arg_extremum(int op, int last, int dtype, const void *x, int64_t *out,
                                     int64_t outer, int64_t len, int64_t inner, void *stream)
{
    if (outer < 0 || len < 1 || inner < 0 ||
        (op != VQ__CUDA_EXTREMUM_MAX && op != VQ__CUDA_EXTREMUM_MIN))
        return VQ_EINVAL;
    int64_t lanes = outer * inner;
    if (lanes == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(lanes);
    switch (dtype) {
    case VQ_F32:
        arg_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>((const float *)x, out, lanes, len,
                                                         inner, op, last);
        break;
    case VQ_F64:
        arg_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>((const double *)x, out, lanes, len,
                                                          inner, op, last);
        break;
    case VQ_I32:
        arg_kernel<int32_t><<<g, VQ__CUDA_THREADS, 0, s>>>((const int32_t *)x, out, lanes, len,
                                                           inner, op, last);
        break;
    case VQ_I64:
        arg_kernel<int64_t><<<g, VQ__CUDA_THREADS, 0, s>>>((const int64_t *)x, out, lanes, len,
                                                           inner, op, last);
        break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}

/* ---- reduce_max, reduce_min ---- */

/* X's dims split into kept and reduced ones (size-1 dims dropped), each
 * with X's stride, innermost first: output o and reduced index r name X's
 * element radix_offset(o, kept) + radix_offset(r, reduced). */
struct red_layout {
    int nk, nr;
    int64_t kshape[VQ_MAX_DIMS], kstride[VQ_MAX_DIMS];
    int64_t rshape[VQ_MAX_DIMS], rstride[VQ_MAX_DIMS];
    int64_t nout, nred;
};

static int red_layout_make(red_layout *L, int ndim, const int64_t *shape, unsigned mask)
{
    if (ndim < 0 || ndim > VQ_MAX_DIMS)
        return VQ_EINVAL;
    int64_t stride = 1;
    L->nk = L->nr = 0;
    L->nout = L->nred = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] < 0)
            return VQ_EINVAL;
        if (shape[d] != 1) {
            if (mask & (1u << d)) {
                L->rshape[L->nr] = shape[d];
                L->rstride[L->nr++] = stride;
                L->nred *= shape[d];
            } else {
                L->kshape[L->nk] = shape[d];
                L->kstride[L->nk++] = stride;
                L->nout *= shape[d];
            }
        }
        stride *= shape[d];
    }
    return 0;
}

/* The offset of index i in the mixed radix of (shape, stride), innermost
 * dim first. */
__device__ inline int64_t radix_offset(int64_t i, int n, const int64_t *shape,
                                       const int64_t *stride)
{
    int64_t off = 0;
    for (int k = 0; k < n; k++) {
        off += (i % shape[k]) * stride[k];
        i /= shape[k];
    }
    return off;
}

template <typename T>
__global__ void reduce_extremum_kernel(const T *x, T *out, red_layout L, int op)
{
    __shared__ T acc[VQ__CUDA_THREADS];
    for (int64_t o = blockIdx.x; o < L.nout; o += gridDim.x) {
        const T *base = x + radix_offset(o, L.nk, L.kshape, L.kstride);
        T a = op == VQ__CUDA_EXTREMUM_MAX ? num<T>::lowest() : num<T>::highest();
        for (int64_t r = threadIdx.x; r < L.nred; r += blockDim.x) {
            T v = base[radix_offset(r, L.nr, L.rshape, L.rstride)];
            if (takes(op, v, a))
                a = v;
        }
        acc[threadIdx.x] = a;
        __syncthreads();
        for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
            if (threadIdx.x < h && takes(op, acc[threadIdx.x + h], acc[threadIdx.x]))
                acc[threadIdx.x] = acc[threadIdx.x + h];
            __syncthreads();
        }
        if (threadIdx.x == 0)
            out[o] = acc[0];
        __syncthreads(); /* acc is reused by the next output */
    }
}

extern "C" int vq__cuda_reduce_extremum(int op, int dtype, const void *x, void *out, int ndim,
                                        const int64_t *shape, unsigned mask, void *stream)
{
    red_layout L;
    if ((op != VQ__CUDA_EXTREMUM_MAX && op != VQ__CUDA_EXTREMUM_MIN) ||
        red_layout_make(&L, ndim, shape, mask) < 0)
        return VQ_EINVAL;
    if (L.nout == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = blocks_per_output(L.nout);
    switch (dtype) {
    case VQ_F32:
        reduce_extremum_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>((const float *)x,
                                                                     (float *)out, L, op);
        break;
    case VQ_F64:
        reduce_extremum_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>((const double *)x,
                                                                      (double *)out, L, op);
        break;
    case VQ_I32:
        reduce_extremum_kernel<int32_t><<<g, VQ__CUDA_THREADS, 0, s>>>((const int32_t *)x,
                                                                       (int32_t *)out, L, op);
        break;
    case VQ_I64:
        reduce_extremum_kernel<int64_t><<<g, VQ__CUDA_THREADS, 0, s>>>((const int64_t *)x,
                                                                       (int64_t *)out, L, op);
        break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}

template <typename T>
__global__ void reduce_extremum_grad_kernel(const T *x, const T *m, const T *g, T *dx,
                                            red_layout L)
{
    __shared__ long long ties[VQ__CUDA_THREADS];
    for (int64_t o = blockIdx.x; o < L.nout; o += gridDim.x) {
        int64_t base = radix_offset(o, L.nk, L.kshape, L.kstride);
        T mo = m[o];
        long long c = 0;
        for (int64_t r = threadIdx.x; r < L.nred; r += blockDim.x)
            c += is_tie(x[base + radix_offset(r, L.nr, L.rshape, L.rstride)], mo);
        ties[threadIdx.x] = c;
        __syncthreads();
        for (unsigned h = blockDim.x / 2; h > 0; h /= 2) {
            if (threadIdx.x < h)
                ties[threadIdx.x] += ties[threadIdx.x + h];
            __syncthreads();
        }
        /* unused when nothing ties (a count of 0) */
        T share = g[o] / (T)ties[0];
        for (int64_t r = threadIdx.x; r < L.nred; r += blockDim.x) {
            int64_t at = base + radix_offset(r, L.nr, L.rshape, L.rstride);
            dx[at] = is_tie(x[at], mo) ? share : (T)0;
        }
        __syncthreads(); /* ties is reused by the next output */
    }
}

extern "C" int vq__cuda_reduce_extremum_grad(int dtype, const void *x, const void *m,
                                             const void *g, void *dx, int ndim,
                                             const int64_t *shape, unsigned mask, void *stream)
{
    red_layout L;
    if (red_layout_make(&L, ndim, shape, mask) < 0)
        return VQ_EINVAL;
    if (L.nout == 0 || L.nred == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned b = blocks_per_output(L.nout);
    if (dtype == VQ_F32)
        reduce_extremum_grad_kernel<float><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const float *)x, (const float *)m, (const float *)g, (float *)dx, L);
    else if (dtype == VQ_F64)
        reduce_extremum_grad_kernel<double><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const double *)x, (const double *)m, (const double *)g, (double *)dx, L);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

/* ---- tile ---- */

/* Two shapes of ndim dims: X's and Out's (or dOut's). */
struct shapes {
    int ndim;
    int64_t x[VQ_MAX_DIMS], o[VQ_MAX_DIMS];
};

static int shapes_make(shapes *sh, int ndim, const int64_t *xshape, const int64_t *oshape,
                       int64_t *nx, int64_t *no)
{
    if (ndim < 0 || ndim > VQ_MAX_DIMS)
        return VQ_EINVAL;
    sh->ndim = ndim;
    *nx = *no = 1;
    for (int d = 0; d < ndim; d++) {
        if (xshape[d] < 0 || oshape[d] < 0)
            return VQ_EINVAL;
        sh->x[d] = xshape[d];
        sh->o[d] = oshape[d];
        *nx *= xshape[d];
        *no *= oshape[d];
    }
    return 0;
}

template <typename E> __global__ void tile_kernel(const E *x, E *out, int64_t total, shapes sh)
{
    GRID_LOOP(e, total)
    {
        int64_t rest = e, xo = 0, xs = 1;
        for (int d = sh.ndim - 1; d >= 0; d--) {
            int64_t c = rest % sh.o[d];
            rest /= sh.o[d];
            xo += (c % sh.x[d]) * xs;
            xs *= sh.x[d];
        }
        out[e] = x[xo];
    }
}

extern "C" int vq__cuda_tile(int esize, const void *x, void *out, int ndim, const int64_t *xshape,
                             const int64_t *oshape, void *stream)
{
    shapes sh;
    int64_t nx, no;
    if (shapes_make(&sh, ndim, xshape, oshape, &nx, &no) < 0)
        return VQ_EINVAL;
    if (no == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(no);
    switch (esize) {
    case 8:
        tile_kernel<uint64_t><<<g, VQ__CUDA_THREADS, 0, s>>>((const uint64_t *)x,
                                                             (uint64_t *)out, no, sh);
        break;
    case 4:
        tile_kernel<uint32_t><<<g, VQ__CUDA_THREADS, 0, s>>>((const uint32_t *)x,
                                                             (uint32_t *)out, no, sh);
        break;
    case 1:
        tile_kernel<uint8_t><<<g, VQ__CUDA_THREADS, 0, s>>>((const uint8_t *)x, (uint8_t *)out,
                                                            no, sh);
        break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}

/* dx[j] = the sum over the tiles t (row-major, the last dim fastest: the
 * order of dOut's elements) of g at t * X's shape + j. */
template <typename T> __global__ void tile_grad_kernel(const T *g, T *dx, int64_t total, shapes sh)
{
    GRID_LOOP(e, total)
    {
        int64_t jc[VQ_MAX_DIMS], t[VQ_MAX_DIMS], reps[VQ_MAX_DIMS], gs[VQ_MAX_DIMS];
        int64_t rest = e, stride = 1;
        bool none = false;
        for (int d = sh.ndim - 1; d >= 0; d--) {
            jc[d] = rest % sh.x[d];
            rest /= sh.x[d];
            reps[d] = sh.o[d] / sh.x[d];
            none = none || reps[d] == 0;
            t[d] = 0;
            gs[d] = stride;
            stride *= sh.o[d];
        }
        T sum = 0;
        while (!none) {
            int64_t off = 0;
            for (int d = 0; d < sh.ndim; d++)
                off += (t[d] * sh.x[d] + jc[d]) * gs[d];
            sum += g[off];
            int d = sh.ndim - 1;
            for (; d >= 0; d--) {
                if (++t[d] < reps[d])
                    break;
                t[d] = 0;
            }
            none = d < 0;
        }
        dx[e] = sum;
    }
}

extern "C" int vq__cuda_tile_grad(int dtype, const void *g, void *dx, int ndim,
                                  const int64_t *xshape, const int64_t *gshape, void *stream)
{
    shapes sh;
    int64_t nx, ng;
    if (shapes_make(&sh, ndim, xshape, gshape, &nx, &ng) < 0)
        return VQ_EINVAL;
    if (nx == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned b = vq__cuda_blocks(nx);
    if (dtype == VQ_F32)
        tile_grad_kernel<float><<<b, VQ__CUDA_THREADS, 0, s>>>((const float *)g, (float *)dx,
                                                               nx, sh);
    else if (dtype == VQ_F64)
        tile_grad_kernel<double><<<b, VQ__CUDA_THREADS, 0, s>>>((const double *)g, (double *)dx,
                                                                nx, sh);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

/* ---- pad ---- */

template <typename E>
__global__ void pad_kernel(const E *x, E *out, int64_t total, vq__pad_geom geo, E value)
{
    GRID_LOOP(e, total)
    {
        int64_t rest = e, xo = 0, xs = 1;
        bool constant = false;
        for (int d = geo.ndim - 1; d >= 0; d--) {
            int64_t c = rest % geo.oshape[d];
            rest /= geo.oshape[d];
            int64_t j = vq__pad_source(&geo, d, c);
            constant = constant || j < 0;
            xo += j < 0 ? 0 : j * xs;
            xs *= geo.xshape[d];
        }
        out[e] = constant ? value : x[xo];
    }
}

static int pad_geom_check(const vq__pad_geom *geo, int64_t *nx, int64_t *no)
{
    if (geo->ndim < 0 || geo->ndim > VQ_MAX_DIMS)
        return VQ_EINVAL;
    *nx = *no = 1;
    for (int d = 0; d < geo->ndim; d++) {
        if (geo->xshape[d] < 0 || geo->oshape[d] < 0 || geo->kept[d] < 0)
            return VQ_EINVAL;
        *nx *= geo->xshape[d];
        *no *= geo->oshape[d];
    }
    return 0;
}

extern "C" int vq__cuda_pad(int dtype, const void *x, void *out, const vq__pad_geom *geo,
                            double value, int64_t ivalue, void *stream)
{
    int64_t nx, no;
    if (pad_geom_check(geo, &nx, &no) < 0)
        return VQ_EINVAL;
    if (no == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(no);
    switch (dtype) {
    case VQ_F32:
        pad_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>((const float *)x, (float *)out, no,
                                                         *geo, (float)value);
        break;
    case VQ_F64:
        pad_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>((const double *)x, (double *)out, no,
                                                          *geo, value);
        break;
    case VQ_I32:
        pad_kernel<int32_t><<<g, VQ__CUDA_THREADS, 0, s>>>((const int32_t *)x, (int32_t *)out,
                                                           no, *geo, (int32_t)ivalue);
        break;
    case VQ_I64:
        pad_kernel<int64_t><<<g, VQ__CUDA_THREADS, 0, s>>>((const int64_t *)x, (int64_t *)out,
                                                           no, *geo, ivalue);
        break;
    case VQ_BOOL:
        pad_kernel<uint8_t><<<g, VQ__CUDA_THREADS, 0, s>>>((const uint8_t *)x, (uint8_t *)out,
                                                           no, *geo, (uint8_t)(ivalue != 0));
        break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}

/* dx[j] = the sum of g over the product of each dim's readers of j's
 * coordinate (vq__pad_readers: increasing ranges), walked row-major: the
 * order of dOut's elements. */
template <typename T>
__global__ void pad_grad_kernel(const T *g, T *dx, int64_t total, vq__pad_geom geo)
{
    GRID_LOOP(e, total)
    {
        int64_t ranges[VQ_MAX_DIMS][6], cur[VQ_MAX_DIMS], gs[VQ_MAX_DIMS];
        int nr[VQ_MAX_DIMS], rk[VQ_MAX_DIMS];
        int64_t rest = e, stride = 1;
        bool none = false;
        for (int d = geo.ndim - 1; d >= 0; d--) {
            int64_t c = rest % geo.xshape[d];
            rest /= geo.xshape[d];
            nr[d] = vq__pad_readers(&geo, d, c, ranges[d]);
            none = none || nr[d] == 0;
            rk[d] = 0;
            cur[d] = ranges[d][0];
            gs[d] = stride;
            stride *= geo.oshape[d];
        }
        T sum = 0;
        while (!none) {
            int64_t off = 0;
            for (int d = 0; d < geo.ndim; d++)
                off += cur[d] * gs[d];
            sum += g[off];
            int d = geo.ndim - 1;
            for (; d >= 0; d--) {
                if (++cur[d] < ranges[d][2 * rk[d] + 1])
                    break;
                if (++rk[d] < nr[d]) {
                    cur[d] = ranges[d][2 * rk[d]];
                    break;
                }
                rk[d] = 0;
                cur[d] = ranges[d][0];
            }
            none = d < 0;
        }
        dx[e] = sum;
    }
}

extern "C" int vq__cuda_pad_grad(int dtype, const void *g, void *dx, const vq__pad_geom *geo,
                                 void *stream)
{
    int64_t nx, no;
    if (pad_geom_check(geo, &nx, &no) < 0)
        return VQ_EINVAL;
    if (nx == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned b = vq__cuda_blocks(nx);
    if (dtype == VQ_F32)
        pad_grad_kernel<float><<<b, VQ__CUDA_THREADS, 0, s>>>((const float *)g, (float *)dx, nx,
                                                              *geo);
    else if (dtype == VQ_F64)
        pad_grad_kernel<double><<<b, VQ__CUDA_THREADS, 0, s>>>((const double *)g, (double *)dx,
                                                               nx, *geo);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

/* ---- gather_elements ---- */

/* x's offset of the element out's element e reads: e's coordinates in
 * out's shape (sh.o), the axis' replaced by the index; -1 for a bad index. */
template <typename I>
__device__ int64_t elements_source(const I *idx, int64_t e, const shapes &sh, int axis)
{
    int64_t v = (int64_t)idx[e], dim = sh.x[axis];
    v += v < 0 ? dim : 0;
    if (v < 0 || v >= dim)
        return -1;
    int64_t rest = e, xo = 0, xs = 1;
    for (int d = sh.ndim - 1; d >= 0; d--) {
        int64_t c = rest % sh.o[d];
        rest /= sh.o[d];
        xo += (d == axis ? v : c) * xs;
        xs *= sh.x[d];
    }
    return xo;
}

template <typename E, typename I>
__global__ void gather_elements_kernel(const E *x, const I *idx, E *out, int64_t total, shapes sh,
                                       int axis)
{
    GRID_LOOP(e, total)
    {
        int64_t src = elements_source(idx, e, sh, axis);
        out[e] = src >= 0 ? x[src] : (E)0;
    }
}

template <typename E>
static int gather_elements_as(int index_dtype, const void *x, const void *idx, void *out,
                              int64_t total, const shapes &sh, int axis, cudaStream_t s)
{
    unsigned g = vq__cuda_blocks(total);
    if (index_dtype == VQ_I32)
        gather_elements_kernel<E, int32_t><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const E *)x, (const int32_t *)idx, (E *)out, total, sh, axis);
    else if (index_dtype == VQ_I64)
        gather_elements_kernel<E, int64_t><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const E *)x, (const int64_t *)idx, (E *)out, total, sh, axis);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

extern "C" int vq__cuda_gather_elements(int esize, int index_dtype, const void *x, const void *idx,
                                        void *out, int ndim, const int64_t *xshape,
                                        const int64_t *ishape, int axis, void *stream)
{
    shapes sh;
    int64_t nx, ni;
    if (shapes_make(&sh, ndim, xshape, ishape, &nx, &ni) < 0 || axis < 0 || axis >= ndim)
        return VQ_EINVAL;
    if (ni == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    switch (esize) {
    case 8: return gather_elements_as<uint64_t>(index_dtype, x, idx, out, ni, sh, axis, s);
    case 4: return gather_elements_as<uint32_t>(index_dtype, x, idx, out, ni, sh, axis, s);
    case 1: return gather_elements_as<uint8_t>(index_dtype, x, idx, out, ni, sh, axis, s);
    default: return VQ_EINVAL;
    }
}

template <typename T, typename I>
__global__ void gather_elements_grad_kernel(const I *idx, const T *g, T *dx, int64_t total,
                                            shapes sh, int axis)
{
    GRID_LOOP(e, total)
    {
        int64_t dst = elements_source(idx, e, sh, axis);
        if (dst >= 0)
            atomicAdd(&dx[dst], g[e]);
    }
}

template <typename T>
static int gather_elements_grad_as(int index_dtype, const void *idx, const void *g, void *dx,
                                   int64_t total, const shapes &sh, int axis, cudaStream_t s)
{
    unsigned b = vq__cuda_blocks(total);
    if (index_dtype == VQ_I32)
        gather_elements_grad_kernel<T, int32_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const int32_t *)idx, (const T *)g, (T *)dx, total, sh, axis);
    else if (index_dtype == VQ_I64)
        gather_elements_grad_kernel<T, int64_t><<<b, VQ__CUDA_THREADS, 0, s>>>(
            (const int64_t *)idx, (const T *)g, (T *)dx, total, sh, axis);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

extern "C" int vq__cuda_gather_elements_grad(int dtype, int index_dtype, const void *idx,
                                             const void *g, void *dx, int ndim,
                                             const int64_t *xshape, const int64_t *ishape,
                                             int axis, void *stream)
{
    shapes sh;
    int64_t nx, ni;
    if (shapes_make(&sh, ndim, xshape, ishape, &nx, &ni) < 0 || axis < 0 || axis >= ndim ||
        (dtype != VQ_F32 && dtype != VQ_F64))
        return VQ_EINVAL;
    if (nx == 0)
        return 0;
    size_t es = dtype == VQ_F32 ? sizeof(float) : sizeof(double);
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    int rc = vq__cuda_called(cudaMemsetAsync(dx, 0, (size_t)nx * es, s));
    if (rc < 0 || ni == 0)
        return rc;
    if (dtype == VQ_F32)
        return gather_elements_grad_as<float>(index_dtype, idx, g, dx, ni, sh, axis, s);
    return gather_elements_grad_as<double>(index_dtype, idx, g, dx, ni, sh, axis, s);
}
