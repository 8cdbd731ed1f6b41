/* CUDA kernels for reduce_prod and reduce_prod_grad (ops/cpu/prod.c): one
 * thread per output element multiplies its group's elements in X's
 * row-major order (the kept dims give the group's base, the reduced ones
 * are walked mixed-radix, the last fastest), as the CPU's walk does, in
 * the same accumulator types: the CPU's bits. The gradient's first kernel
 * keeps each group's product of nonzero elements and count of zeros the
 * same way, in a scratch buffer the caller gives; the second computes each
 * element of dX from its group's pair with the CPU's formula. Launchers:
 * kernels.h. */
#include "kernels.h"

#include <stdint.h>

/* X's dims split into the kept ones (Out's, in order) and the reduced
 * ones, with X's strides. */
struct prod_geom {
    int nk, nr;
    int64_t kshape[VQ_MAX_DIMS], kstride[VQ_MAX_DIMS];
    int64_t rshape[VQ_MAX_DIMS], rstride[VQ_MAX_DIMS];
    int64_t group;
};

static int geom_make(prod_geom *g, int ndim, const int64_t *shape, unsigned mask, int64_t *nx,
                     int64_t *no)
{
    if (ndim < 0 || ndim > VQ_MAX_DIMS)
        return VQ_EINVAL;
    g->nk = g->nr = 0;
    g->group = *no = 1;
    int64_t s = 1, st[VQ_MAX_DIMS];
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] < 0)
            return VQ_EINVAL;
        st[d] = s;
        s *= shape[d];
    }
    *nx = s;
    for (int d = 0; d < ndim; d++) {
        if (mask & (1u << d)) {
            g->rshape[g->nr] = shape[d];
            g->rstride[g->nr++] = st[d];
            g->group *= shape[d];
        } else {
            g->kshape[g->nk] = shape[d];
            g->kstride[g->nk++] = st[d];
            *no *= shape[d];
        }
    }
    return 0;
}

/* X's offset of the first element of output o's group. */
__device__ static int64_t group_base(const prod_geom &g, int64_t o)
{
    int64_t base = 0;
    for (int k = g.nk - 1; k >= 0; k--) {
        base += (o % g.kshape[k]) * g.kstride[k];
        o /= g.kshape[k];
    }
    return base;
}

/* Calls BODY with `off` each element of output o's group, in X's order. */
#define FOR_GROUP(g, o, off, BODY)                                    \
    do {                                                              \
        int64_t t_[VQ_MAX_DIMS], off = group_base((g), (o));          \
        for (int k_ = 0; k_ < (g).nr; k_++)                           \
            t_[k_] = 0;                                               \
        for (int64_t j_ = 0; j_ < (g).group; j_++) {                  \
            BODY;                                                     \
            for (int k_ = (g).nr - 1; k_ >= 0; k_--) {                \
                off += (g).rstride[k_];                               \
                if (++t_[k_] < (g).rshape[k_])                        \
                    break;                                            \
                off -= t_[k_] * (g).rstride[k_];                      \
                t_[k_] = 0;                                           \
            }                                                         \
        }                                                             \
    } while (0)

template <typename T, typename A>
__global__ void prod_kernel(const T *x, T *out, int64_t no, prod_geom g)
{
    VQ__CUDA_FOR_EACH(o, no)
    {
        A acc = 1;
        FOR_GROUP(g, o, off, acc = (A)(acc * (A)x[off]));
        out[o] = (T)acc;
    }
}

template <typename T>
__global__ void nonzero_kernel(const T *x, double *pz, int64_t no, prod_geom g)
{
    VQ__CUDA_FOR_EACH(o, no)
    {
        double p = 1, z = 0;
        FOR_GROUP(g, o, off, if (x[off] == 0) z += 1; else p *= (double)x[off]);
        pz[2 * o] = p;
        pz[2 * o + 1] = z;
    }
}

/* dX's element e: its output's index from its kept coordinates. */
template <typename T>
__global__ void spread_kernel(const T *x, const T *g, const double *pz, T *dx, int64_t nx,
                              prod_geom geo)
{
    VQ__CUDA_FOR_EACH(e, nx)
    {
        int64_t o = 0;
        for (int k = 0; k < geo.nk; k++)
            o = o * geo.kshape[k] + e / geo.kstride[k] % geo.kshape[k];
        double p = pz[2 * o], z = pz[2 * o + 1];
        double v = z == 0 ? p / (double)x[e] : z == 1 && x[e] == 0 ? p : 0;
        dx[e] = (T)((double)g[o] * v);
    }
}

extern "C" int vq__cuda_reduce_prod(int dtype, const void *x, void *out, int ndim,
                                    const int64_t *shape, unsigned mask, void *stream)
{
    prod_geom g;
    int64_t nx, no;
    if (geom_make(&g, ndim, shape, mask, &nx, &no) < 0)
        return VQ_EINVAL;
    if (no == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned b = vq__cuda_blocks(no);
    switch (dtype) {
    case VQ_F32:
        prod_kernel<float, double>
            <<<b, VQ__CUDA_THREADS, 0, s>>>((const float *)x, (float *)out, no, g);
        break;
    case VQ_F64:
        prod_kernel<double, double>
            <<<b, VQ__CUDA_THREADS, 0, s>>>((const double *)x, (double *)out, no, g);
        break;
    case VQ_I32:
        prod_kernel<int32_t, uint32_t>
            <<<b, VQ__CUDA_THREADS, 0, s>>>((const int32_t *)x, (int32_t *)out, no, g);
        break;
    case VQ_I64:
        prod_kernel<int64_t, uint64_t>
            <<<b, VQ__CUDA_THREADS, 0, s>>>((const int64_t *)x, (int64_t *)out, no, g);
        break;
    default: return VQ_EINVAL;
    }
    return vq__cuda_launched();
}

extern "C" int vq__cuda_reduce_prod_grad(int dtype, const void *x, const void *g, void *dx,
                                         double *scratch, int ndim, const int64_t *shape,
                                         unsigned mask, void *stream)
{
    prod_geom geo;
    int64_t nx, no;
    if (geom_make(&geo, ndim, shape, mask, &nx, &no) < 0)
        return VQ_EINVAL;
    if (nx == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    VQ__CUDA_LAUNCH_FLOATS(nonzero_kernel, dtype, no, s, ((const float *)x, scratch, no, geo),
                           ((const double *)x, scratch, no, geo));
    int rc = vq__cuda_launched();
    if (rc < 0)
        return rc;
    VQ__CUDA_LAUNCH_FLOATS(spread_kernel, dtype, nx, s,
                           ((const float *)x, (const float *)g, scratch, (float *)dx, nx, geo),
                           ((const double *)x, (const double *)g, scratch, (double *)dx, nx, geo));
    return vq__cuda_launched();
}
