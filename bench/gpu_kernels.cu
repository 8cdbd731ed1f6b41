/* gpu_kernels.cu: the CUDA side of bench/gpu_bench.c, built only when the
 * root meson.build found the toolkit (have_cuda). An empty kernel, the launch
 * that a benchmarked varq op makes on its stream, and the raw loops that
 * varq is measured against: the same empty kernel launched straight on
 * streams of our own, with nothing between the caller and cudart.
 *
 * Functions are C-callable (extern "C") and return 0 or a cudaError_t as
 * int; gb_cuda_error_string names one. Launches are not checked one by one
 * (a raw loop would not check them either): the caller asks
 * gb_cuda_launch_error after each timed run, so that an invalid stream
 * handle or a missing kernel image still fails the run. The raw streams
 * are non-blocking like the engine's (engine/stream_cuda.c), so neither side
 * synchronizes with the legacy default stream. */
#include <cuda_runtime.h>

__global__ void gb_empty_kernel(void) {}

/* The raw side's streams and events: two of each, made by gb_cuda_raw_open
 * before any timing. */
static cudaStream_t raw_stream[2];
static cudaEvent_t raw_event[2];

extern "C" {

const char *gb_cuda_error_string(int err)
{
    return cudaGetErrorString((cudaError_t)err);
}

/* One empty kernel on stream (a cudaStream_t), not checked. */
int gb_cuda_launch(void *stream)
{
    gb_empty_kernel<<<1, 1, 0, (cudaStream_t)stream>>>();
    return 0;
}

/* The first launch error since the last call (cleared), or 0. */
int gb_cuda_launch_error(void)
{
    return (int)cudaGetLastError();
}

/* Device 0 and the raw side's streams and events. Returns 0, or the CUDA
 * error (no device, no driver) with nothing left allocated. */
int gb_cuda_raw_open(void)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n < 1)
        e = cudaErrorNoDevice;
    if (e == cudaSuccess)
        e = cudaSetDevice(0);
    for (int i = 0; i < 2 && e == cudaSuccess; i++)
        e = cudaStreamCreateWithFlags(&raw_stream[i], cudaStreamNonBlocking);
    for (int i = 0; i < 2 && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&raw_event[i], cudaEventDisableTiming);
    if (e == cudaSuccess) {
        /* The first launch loads the module: not in any timing. */
        gb_empty_kernel<<<1, 1, 0, raw_stream[0]>>>();
        e = cudaGetLastError();
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(raw_stream[0]);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        for (int i = 0; i < 2; i++) {
            if (raw_event[i])
                (void)cudaEventDestroy(raw_event[i]);
            if (raw_stream[i])
                (void)cudaStreamDestroy(raw_stream[i]);
            raw_event[i] = NULL;
            raw_stream[i] = NULL;
        }
    }
    return (int)e;
}

void gb_cuda_raw_close(void)
{
    for (int i = 0; i < 2; i++) {
        if (raw_event[i])
            (void)cudaEventDestroy(raw_event[i]);
        if (raw_stream[i])
            (void)cudaStreamDestroy(raw_stream[i]);
        raw_event[i] = NULL;
        raw_stream[i] = NULL;
    }
}

/* n empty kernels on one stream, then cudaStreamSynchronize. */
int gb_cuda_raw_one_stream(long n)
{
    cudaStream_t s = raw_stream[0];
    for (long i = 0; i < n; i++)
        gb_empty_kernel<<<1, 1, 0, s>>>();
    cudaError_t e = cudaGetLastError();
    cudaError_t sync = cudaStreamSynchronize(s);
    return (int)(e != cudaSuccess ? e : sync);
}

/* n empty kernels alternating the two streams, cudaDeviceSynchronize after
 * each: ordering two streams by waiting on the host. */
int gb_cuda_raw_alternate_sync(long n)
{
    cudaError_t first = cudaSuccess;
    for (long i = 0; i < n; i++) {
        gb_empty_kernel<<<1, 1, 0, raw_stream[i & 1]>>>();
        cudaError_t e = cudaDeviceSynchronize();
        if (e != cudaSuccess && first == cudaSuccess)
            first = e;
    }
    cudaError_t e = cudaGetLastError();
    return (int)(first != cudaSuccess ? first : e);
}

/* n empty kernels alternating the two streams, each stream waiting on the
 * device for the other's previous kernel (an event recorded after each
 * launch, cudaStreamWaitEvent before the next): what varq does for a chain
 * that changes streams, without the engine. */
int gb_cuda_raw_alternate_events(long n)
{
    for (long i = 0; i < n; i++) {
        cudaStream_t s = raw_stream[i & 1];
        if (i > 0)
            (void)cudaStreamWaitEvent(s, raw_event[(i - 1) & 1], 0);
        gb_empty_kernel<<<1, 1, 0, s>>>();
        (void)cudaEventRecord(raw_event[i & 1], s);
    }
    cudaError_t e = cudaGetLastError();
    for (int k = 0; k < 2; k++) {
        cudaError_t sync = cudaStreamSynchronize(raw_stream[k]);
        if (e == cudaSuccess)
            e = sync;
    }
    return (int)e;
}

} /* extern "C" */
