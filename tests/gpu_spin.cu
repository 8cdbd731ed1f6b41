/* A device-side timer for the GPU suites on CUDA (built only when the root
 * meson.build found the toolkit): a one-thread kernel that spins for a
 * given time and writes when it started and ended, read from %globaltimer
 * (ns), into mapped host memory. What test_engine_gpu uses to show that
 * work on a copy stream overlaps work on the compute stream: CUDA may run
 * the host functions of all streams one after another (it did on an
 * H200), so host-function sleeps cannot show it there.
 *
 * C-callable; each returns 0 or a cudaError_t as int. */
#include <cuda_runtime.h>

static __device__ unsigned long long global_ns(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void tg_spin_kernel(unsigned long long ns, unsigned long long *times)
{
    unsigned long long t0 = global_ns(), t = t0;
    while (t - t0 < ns)
        t = global_ns();
    times[0] = t0;
    times[1] = t;
}

extern "C" {

/* Two host-mapped words per spin, [start, end] in ns; 0 or an error. */
int tg_times_new(unsigned long long **out, int nspins)
{
    cudaError_t e = cudaHostAlloc((void **)out, sizeof **out * 2 * (size_t)nspins,
                                  cudaHostAllocMapped);
    if (e == cudaSuccess)
        for (int i = 0; i < 2 * nspins; i++)
            (*out)[i] = 0;
    return (int)e;
}

void tg_times_free(unsigned long long *t)
{
    cudaFreeHost(t);
}

/* Spins us microseconds on stream (a cudaStream_t), writing times[0..1]. */
int tg_spin(void *stream, long us, unsigned long long *times)
{
    unsigned long long *dev = NULL;
    cudaError_t e = cudaHostGetDevicePointer((void **)&dev, times, 0);
    if (e != cudaSuccess)
        return (int)e;
    tg_spin_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((unsigned long long)us * 1000ull, dev);
    return (int)cudaGetLastError();
}

} /* extern "C" */
