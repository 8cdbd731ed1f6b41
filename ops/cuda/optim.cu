/* CUDA kernels for the optimizer updates sgd, momentum (with Nesterov's
 * variant) and adam, with ops/cpu/optim.c's formulas: sgd and momentum in
 * double for both dtypes, adam in the parameter's own precision with the
 * bias corrections folded into constants. One thread per element reads
 * every input of its element before writing any output, so the outputs may
 * be the state inputs themselves (in place). A LearningRate input is read
 * from device memory by sgd's and momentum's kernels; adam's enters only
 * its step size, computed on the host in stream order (optim_host.c's vq__adam_gpu).
 * lr_schedule has no kernel here: optim_host.c computes it the same way. Launchers:
 * kernels.h. */
#include "kernels.h"

#include <math.h>
#include <stdint.h>

/* lr_dev (the LearningRate input), when set, is read by every thread
 * before it writes: with the CPU's (double) of the same element, the
 * CPU's bits. */
template <typename T>
__global__ void sgd_kernel(const T *pa, const T *g, T *po, int64_t n, double lr, const T *lr_dev)
{
    if (lr_dev)
        lr = (double)*lr_dev;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        po[i] = (T)((double)pa[i] - lr * (double)g[i]);
}

template <typename T>
__global__ void momentum_kernel(const T *pa, const T *g, const T *v, T *po, T *vo, int64_t n,
                                double lr, const T *lr_dev, double mu, int nesterov)
{
    if (lr_dev)
        lr = (double)*lr_dev;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        double pi = pa[i], gi = g[i], vi = mu * (double)v[i] + gi;
        double d = nesterov ? gi + mu * vi : vi;
        vo[i] = (T)vi;
        po[i] = (T)(pi - lr * d);
    }
}

__device__ inline float sqrt_of(float v) { return sqrtf(v); }
__device__ inline double sqrt_of(double v) { return sqrt(v); }

/* The constants are rounded to T exactly as adam_kernel does: those of the
 * attributes on the host, those of the step count here, from the doubles
 * in c (see vq__cuda_adam_consts). */
template <typename T>
__global__ void adam_kernel(const T *pa, const T *g, const T *m, const T *v, T *po, T *mo, T *vo,
                            int64_t n, T b1, T b2, T a1, T a2, T eps,
                            const vq__cuda_adam_consts *c)
{
    if (!c->ok)
        return;
    const T step = (T)c->step_size, inv_sqrt_c2 = (T)c->inv_sqrt_c2;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        T gi = g[i];
        T mi = b1 * m[i] + a1 * gi;
        T vi = b2 * v[i] + a2 * gi * gi;
        T pi = pa[i];
        mo[i] = mi;
        vo[i] = vi;
        po[i] = pi - step * mi / (sqrt_of(vi) * inv_sqrt_c2 + eps);
    }
}

extern "C" int vq__cuda_sgd(int dtype, const void *param, const void *grad, void *param_out,
                            int64_t n, double lr, const void *lr_dev, void *stream)
{
    if (n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    if (dtype == VQ_F32)
        sgd_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>((const float *)param, (const float *)grad,
                                                        (float *)param_out, n, lr,
                                                        (const float *)lr_dev);
    else if (dtype == VQ_F64)
        sgd_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const double *)param, (const double *)grad, (double *)param_out, n, lr,
            (const double *)lr_dev);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

extern "C" int vq__cuda_momentum(int dtype, const void *param, const void *grad,
                                 const void *velocity, void *param_out, void *velocity_out,
                                 int64_t n, double lr, const void *lr_dev, double mu,
                                 int nesterov, void *stream)
{
    if (n < 0)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    if (dtype == VQ_F32)
        momentum_kernel<float><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const float *)param, (const float *)grad, (const float *)velocity,
            (float *)param_out, (float *)velocity_out, n, lr, (const float *)lr_dev, mu, nesterov);
    else if (dtype == VQ_F64)
        momentum_kernel<double><<<g, VQ__CUDA_THREADS, 0, s>>>(
            (const double *)param, (const double *)grad, (const double *)velocity,
            (double *)param_out, (double *)velocity_out, n, lr, (const double *)lr_dev, mu,
            nesterov);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}

template <typename T>
static void adam_launch(unsigned g, cudaStream_t s, const void *param, const void *grad,
                        const void *m1, const void *m2, void *param_out, void *m1_out,
                        void *m2_out, int64_t n, double beta1, double beta2, double eps,
                        const vq__cuda_adam_consts *c)
{
    adam_kernel<T><<<g, VQ__CUDA_THREADS, 0, s>>>(
        (const T *)param, (const T *)grad, (const T *)m1, (const T *)m2, (T *)param_out,
        (T *)m1_out, (T *)m2_out, n, (T)beta1, (T)beta2, (T)(1 - beta1), (T)(1 - beta2),
        (T)eps, c);
}

extern "C" int vq__cuda_adam(int dtype, const void *param, const void *grad, const void *m1,
                             const void *m2, void *param_out, void *m1_out, void *m2_out,
                             int64_t n, double beta1, double beta2, double eps,
                             const vq__cuda_adam_consts *consts, void *stream)
{
    if (n < 0 || !consts)
        return VQ_EINVAL;
    if (n == 0)
        return 0;
    cudaStream_t s = VQ__CUDA_STREAM(stream);
    unsigned g = vq__cuda_blocks(n);
    if (dtype == VQ_F32)
        adam_launch<float>(g, s, param, grad, m1, m2, param_out, m1_out, m2_out, n, beta1, beta2,
                           eps, consts);
    else if (dtype == VQ_F64)
        adam_launch<double>(g, s, param, grad, m1, m2, param_out, m1_out, m2_out, n, beta1,
                            beta2, eps, consts);
    else
        return VQ_EINVAL;
    return vq__cuda_launched();
}
