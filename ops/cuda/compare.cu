/* CUDA kernels of ops/cpu/compare.c: comparisons and logic (bool out),
 * logical_not, maximum and minimum, where, abs, and the gradient ops
 * minmax_grad, where_grad and abs_grad. Launchers: kernels.h.
 *
 * Every kernel is one thread per output element (per element of dz for the
 * gradients). Operands are addressed through a vq__cuda_walk: the output's
 * dims, each operand's stride per dim (0 where it is broadcast). The
 * gradients sum their terms in the order of dOut's elements, from 0, as
 * the CPU kernels do, so they match the CPU bit for bit. */
#include "kernels.h"

#include <stdint.h>

/* Offsets of output element o in the walk's operands. */
__device__ inline void walk_offsets(const vq__cuda_walk &w, int64_t o, int64_t off[3])
{
    off[0] = off[1] = off[2] = 0;
    for (int d = w.ndim - 1; d >= 0; d--) {
        int64_t i = o % w.shape[d];
        o /= w.shape[d];
        for (int k = 0; k < 3; k++)
            off[k] += i * w.stride[k][d];
    }
}

#define EACH_OUTPUT(o, n)                                                                     \
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < (n);                \
         o += (int64_t)gridDim.x * blockDim.x)

/* ---- comparisons, logic, maximum, minimum ---- */

template <typename T>
__global__ void compare_kernel(int op, const T *x, const T *y, uint8_t *out, int64_t n,
                               vq__cuda_walk w)
{
    EACH_OUTPUT(o, n)
    {
        int64_t off[3];
        walk_offsets(w, o, off);
        T a = x[off[0]], b = y[off[1]];
        bool r;
        switch (op) {
        case VQ__CUDA_LESS: r = a < b; break;
        case VQ__CUDA_LESS_EQUAL: r = a <= b; break;
        case VQ__CUDA_GREATER: r = a > b; break;
        case VQ__CUDA_GREATER_EQUAL: r = a >= b; break;
        case VQ__CUDA_EQUAL: r = a == b; break;
        case VQ__CUDA_NOT_EQUAL: r = a != b; break;
        case VQ__CUDA_AND: r = a && b; break;
        default: r = a || b; break;
        }
        out[o] = r;
    }
}

/* a != a: a NaN wins, as on the CPU. */
template <typename T>
__global__ void minmax_kernel(int op, const T *x, const T *y, T *out, int64_t n, vq__cuda_walk w)
{
    EACH_OUTPUT(o, n)
    {
        int64_t off[3];
        walk_offsets(w, o, off);
        T a = x[off[0]], b = y[off[1]];
        out[o] = (op == VQ__CUDA_MAXIMUM ? a > b : a < b) || a != a ? a : b;
    }
}

template <typename T>
static int launch_binary(int op, const void *x, const void *y, void *out, int64_t n,
                         const vq__cuda_walk *w, cudaStream_t s)
{
    unsigned g = vq__cuda_blocks(n);
    if (op >= VQ__CUDA_MAXIMUM)
        minmax_kernel<T><<<g, VQ__CUDA_THREADS, 0, s>>>(op, (const T *)x, (const T *)y, (T *)out,
                                                         n, *w);
    else
        compare_kernel<T><<<g, VQ__CUDA_THREADS, 0, s>>>(op, (const T *)x, (const T *)y,
                                                          (uint8_t *)out, n, *w);
    return 0;
}

static int64_t walk_numel(const vq__cuda_walk *w)
{
    int64_t n = 1;
    for (int d = 0; d < w->ndim; d++)
        n *= w->shape[d];
    return n;
}

static bool walk_ok(const vq__cuda_walk *w)
{
    if (w->ndim < 0 || w->ndim > VQ_MAX_DIMS)
        return false;
    for (int d = 0; d < w->ndim; d++)
        if (w->shape[d] < 0)
            return false;
    return true;
}

extern "C" int vq__cuda_compare(int op, int dtype, const void *x, const void *y, void *out,
                                const vq__cuda_walk *w, void *stream)
{
    bool logic = op == VQ__CUDA_AND || op == VQ__CUDA_OR, minmax = op >= VQ__CUDA_MAXIMUM;
    if (op < VQ__CUDA_LESS || op > VQ__CUDA_MINIMUM || !walk_ok(w) ||
        (logic && dtype != VQ_BOOL) || (minmax && dtype == VQ_BOOL))
        return VQ_EINVAL;
    int64_t n = walk_numel(w);
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    switch (dtype) {
    case VQ_F32: launch_binary<float>(op, x, y, out, n, w, s); break;
    case VQ_F64: launch_binary<double>(op, x, y, out, n, w, s); break;
    case VQ_I32: launch_binary<int32_t>(op, x, y, out, n, w, s); break;
    case VQ_I64: launch_binary<int64_t>(op, x, y, out, n, w, s); break;
    case VQ_BOOL: launch_binary<uint8_t>(op, x, y, out, n, w, s); break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}

/* ---- logical_not, abs, abs_grad: one element each ---- */

__global__ void not_kernel(const uint8_t *x, uint8_t *out, int64_t n)
{
    EACH_OUTPUT(o, n)
    out[o] = !x[o];
}

extern "C" int vq__cuda_logical_not(const void *x, void *out, int64_t n, void *stream)
{
    if (n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    not_kernel<<<vq__cuda_blocks(n), VQ__CUDA_THREADS, 0, VQ__CUDA_STREAM(stream)>>>(
        (const uint8_t *)x, (uint8_t *)out, n);
    return vq__cuda_launched();
}

template <typename T> struct unsigned_of { typedef T type; };
template <> struct unsigned_of<int32_t> { typedef uint32_t type; };
template <> struct unsigned_of<int64_t> { typedef uint64_t type; };

/* Floats: -0 gives +0; integers wrap at the most negative value. */
template <typename T> __global__ void abs_kernel(const T *x, T *out, int64_t n)
{
    typedef typename unsigned_of<T>::type U;
    EACH_OUTPUT(o, n)
    {
        T a = x[o];
        out[o] = a < 0 ? (T)((U)0 - (U)a) : a == 0 ? (T)0 : a;
    }
}

extern "C" int vq__cuda_abs(int dtype, const void *x, void *out, int64_t n, void *stream)
{
    if (n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    unsigned g = vq__cuda_blocks(n);
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    switch (dtype) {
    case VQ_F32: abs_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>((const float *)x, (float *)out, n); break;
    case VQ_F64: abs_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>((const double *)x, (double *)out, n); break;
    case VQ_I32: abs_kernel<int32_t><<<g, VQ__CUDA_THREADS, 0, s>>>((const int32_t *)x, (int32_t *)out, n); break;
    case VQ_I64: abs_kernel<int64_t><<<g, VQ__CUDA_THREADS, 0, s>>>((const int64_t *)x, (int64_t *)out, n); break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}

template <typename T> __global__ void abs_grad_kernel(const T *g, const T *x, T *dx, int64_t n)
{
    EACH_OUTPUT(o, n)
    dx[o] = x[o] > 0 ? g[o] : x[o] < 0 ? -g[o] : (T)0;
}

extern "C" int vq__cuda_abs_grad(int dtype, const void *g, const void *x, void *dx, int64_t n,
                                 void *stream)
{
    if (n < 0 || (dtype != VQ_F32 && dtype != VQ_F64))
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    unsigned b = vq__cuda_blocks(n);
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    if (dtype == VQ_F32)
        abs_grad_kernel<float><<<b, VQ__CUDA_THREADS, 0, s>>>((const float *)g, (const float *)x,
                                                               (float *)dx, n);
    else
        abs_grad_kernel<double><<<b, VQ__CUDA_THREADS, 0, s>>>((const double *)g,
                                                                (const double *)x, (double *)dx, n);
    return vq__cuda_launched();
}

/* ---- where ---- */

/* T: an unsigned type of the element's size (the values are only moved). */
template <typename T>
__global__ void where_kernel(const uint8_t *cond, const T *x, const T *y, T *out, int64_t n,
                             vq__cuda_walk w)
{
    EACH_OUTPUT(o, n)
    {
        int64_t off[3];
        walk_offsets(w, o, off);
        out[o] = cond[off[0]] ? x[off[1]] : y[off[2]];
    }
}

extern "C" int vq__cuda_where(size_t size, const void *cond, const void *x, const void *y,
                              void *out, const vq__cuda_walk *w, void *stream)
{
    if (!walk_ok(w))
        return VQ_EINVAL;
    int64_t n = walk_numel(w);
    if (n == 0)
        return 0;
    unsigned g = vq__cuda_blocks(n);
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    const uint8_t *c = (const uint8_t *)cond;
    switch (size) {
    case 1: where_kernel<uint8_t><<<g, VQ__CUDA_THREADS, 0, s>>>(c, (const uint8_t *)x, (const uint8_t *)y, (uint8_t *)out, n, *w); break;
    case 4: where_kernel<uint32_t><<<g, VQ__CUDA_THREADS, 0, s>>>(c, (const uint32_t *)x, (const uint32_t *)y, (uint32_t *)out, n, *w); break;
    case 8: where_kernel<uint64_t><<<g, VQ__CUDA_THREADS, 0, s>>>(c, (const uint64_t *)x, (const uint64_t *)y, (uint64_t *)out, n, *w); break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}

/* ---- minmax_grad, where_grad: sums over broadcast dims ---- */

/* The walk split for one thread per element of dz: kept dims (dz's own,
 * row-major) and summed dims (where dz's operand is broadcast), each with
 * the strides of dOut (0), and the two other operands (1, 2). */
struct sum_walk {
    int nk, ns;
    int64_t kshape[VQ_MAX_DIMS], k[3][VQ_MAX_DIMS];
    int64_t sshape[VQ_MAX_DIMS], s[3][VQ_MAX_DIMS];
    int64_t count;
};

/* op: VQ__CUDA_MAXIMUM / _MINIMUM (a = x, b = y; wrt picks the operand),
 * or -1 for where_grad (a = cond, wrt 0 takes elements where it holds). */
template <typename T>
__device__ inline T grad_term(int op, int wrt, T g, const void *p, const void *q, int64_t po,
                              int64_t qo)
{
    bool to_first;
    if (op < 0) {
        to_first = ((const uint8_t *)p)[po] != 0;
    } else {
        T a = ((const T *)p)[po], b = ((const T *)q)[qo];
        to_first = (op == VQ__CUDA_MAXIMUM ? a >= b : a <= b) || a != a;
    }
    return to_first == !wrt ? g : (T)0;
}

template <typename T>
__global__ void sum_grad_kernel(int op, int wrt, const T *g, const void *p, const void *q, T *dz,
                                int64_t nz, sum_walk w)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nz;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t rest = i, off[3] = {0, 0, 0};
        for (int d = w.nk - 1; d >= 0; d--) {
            int64_t c = rest % w.kshape[d];
            rest /= w.kshape[d];
            for (int k = 0; k < 3; k++)
                off[k] += c * w.k[k][d];
        }
        T acc = 0;
        int64_t idx[VQ_MAX_DIMS] = {0};
        for (int64_t j = 0; j < w.count; j++) {
            /* the CPU adds only the terms that flow (dz += g): skip the rest */
            T t = grad_term<T>(op, wrt, g[off[0]], p, q, off[1], off[2]);
            if (grad_term<T>(op, wrt, (T)1, p, q, off[1], off[2]) != (T)0)
                acc += t;
            for (int d = w.ns - 1; d >= 0; d--) {
                for (int k = 0; k < 3; k++)
                    off[k] += w.s[k][d];
                if (++idx[d] < w.sshape[d])
                    break;
                for (int k = 0; k < 3; k++)
                    off[k] -= w.s[k][d] * w.sshape[d];
                idx[d] = 0;
            }
        }
        dz[i] = acc;
    }
}

extern "C" int vq__cuda_sum_grad(int op, int wrt, int dtype, const void *g, const void *p,
                                 const void *q, void *dz, int64_t nz, const vq__cuda_walk *w,
                                 int zsel, void *stream)
{
    if ((op != -1 && op != VQ__CUDA_MAXIMUM && op != VQ__CUDA_MINIMUM) || (wrt != 0 && wrt != 1) ||
        (zsel != 1 && zsel != 2) || nz < 0 || !walk_ok(w) || (dtype != VQ_F32 && dtype != VQ_F64))
        return VQ_EINVAL;
    if (nz == 0)
        return 0;
    /* dOut is contiguous: walk operand 0's strides must be row-major. */
    sum_walk sw = {};
    sw.count = 1;
    int64_t kept = 1;
    for (int d = 0; d < w->ndim; d++) {
        if (w->shape[d] == 1)
            continue;
        bool summed = w->stride[zsel][d] == 0;
        int m = summed ? sw.ns++ : sw.nk++;
        int64_t *shape = summed ? sw.sshape : sw.kshape;
        shape[m] = w->shape[d];
        for (int k = 0; k < 3; k++)
            (summed ? sw.s[k] : sw.k[k])[m] = w->stride[k][d];
        if (summed)
            sw.count *= w->shape[d];
        else
            kept *= w->shape[d];
    }
    if (kept != nz)
        return VQ_EINVAL;
    unsigned b = vq__cuda_blocks(nz);
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    if (dtype == VQ_F32)
        sum_grad_kernel<float><<<b, VQ__CUDA_THREADS, 0, s>>>(op, wrt, (const float *)g, p, q,
                                                               (float *)dz, nz, sw);
    else
        sum_grad_kernel<double><<<b, VQ__CUDA_THREADS, 0, s>>>(op, wrt, (const double *)g, p, q,
                                                                (double *)dz, nz, sw);
    return vq__cuda_launched();
}
