/* matmul on the GPU through cuBLAS: vq__cuda_matmul runs
 * cublas{S,D}gemmStridedBatched on a handle cached per (device, stream),
 * created lazily under a mutex and bound to the stream. Row-major operands
 * are handed to column-major cuBLAS as their transposes: Out^T = op(Y)^T
 * op(X)^T. Built without cuBLAS (VARQ_CUDA_NO_CUBLAS) the launcher returns
 * VQ_ENOSYS. Launcher: kernels.h. */
#include "kernels.h"

#include <limits.h>
#include <pthread.h>
#include <stdint.h>

#ifdef VARQ_CUDA_NO_CUBLAS

extern "C" int vq__cuda_matmul(int, int, int, int64_t, int64_t, int64_t, int64_t, double,
                               const void *, int, const void *, int, double, void *, void *)
{
    return VQ_ENOSYS;
}

extern "C" void vq__cuda_blas_release(void) {}

#else

#include <cublas_v2.h>

#define MAX_HANDLES 64

struct handle_slot {
    int device;
    cudaStream_t stream;
    cublasHandle_t h;
};

static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static handle_slot handles[MAX_HANDLES];
static int nhandles;

/* The handle for (current device, stream), created on first use; NULL if
 * cuBLAS cannot make one or the cache is full. A handle is used by one
 * stream; two threads on the same stream serialize on the stream anyway,
 * and cuBLAS calls on one handle from two host threads are allowed when
 * they share its stream. */
static cublasHandle_t handle_for(cudaStream_t stream)
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess)
        return NULL;
    cublasHandle_t h = NULL;
    pthread_mutex_lock(&handles_lock);
    for (int i = 0; i < nhandles; i++)
        if (handles[i].device == dev && handles[i].stream == stream) {
            h = handles[i].h;
            break;
        }
    if (!h && nhandles < MAX_HANDLES && cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) {
        if (cublasSetStream(h, stream) != CUBLAS_STATUS_SUCCESS) {
            cublasDestroy(h);
            h = NULL;
        } else {
            handles[nhandles].device = dev;
            handles[nhandles].stream = stream;
            handles[nhandles].h = h;
            nhandles++;
        }
    }
    pthread_mutex_unlock(&handles_lock);
    return h;
}

extern "C" void vq__cuda_blas_release(void)
{
    pthread_mutex_lock(&handles_lock);
    for (int i = 0; i < nhandles; i++)
        cublasDestroy(handles[i].h);
    nhandles = 0;
    pthread_mutex_unlock(&handles_lock);
}

extern "C" int vq__cuda_matmul(int dtype, int tx, int ty, int64_t batch, int64_t m, int64_t n,
                               int64_t k, double alpha, const void *x, int x_shared,
                               const void *y, int y_shared, double beta, void *out,
                               void *stream)
{
    if ((dtype != VQ_F32 && dtype != VQ_F64) || batch < 0 || m < 0 || n < 0 || k < 0 ||
        batch > INT_MAX || m > INT_MAX || n > INT_MAX || k > INT_MAX ||
        (beta != 0 && beta != 1))
        return VQ_EINVAL;
    if (batch == 0 || m == 0 || n == 0)
        return 0;
    if (k == 0) { /* an empty sum: beta * out */
        if (beta != 0)
            return 0;
        return vq__cuda_called(cudaMemsetAsync(
            out, 0, (size_t)(batch * m * n) * (dtype == VQ_F32 ? 4 : 8), (cudaStream_t)stream));
    }
    cublasHandle_t h = handle_for((cudaStream_t)stream);
    if (!h)
        return vq__cuda_fail("no cuBLAS handle (cublasCreate failed, or 64 streams have one)");
    /* Column-major: C (n x m, ldc n) = A (n x k) * B (k x m), A = Y's view,
     * B = X's view (see the file comment). */
    cublasOperation_t ta = ty ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t tb = tx ? CUBLAS_OP_T : CUBLAS_OP_N;
    int lda = ty ? (int)k : (int)n, ldb = tx ? (int)m : (int)k;
    long long sa = y_shared ? 0 : (long long)k * n, sb = x_shared ? 0 : (long long)m * k;
    long long sc = (long long)m * n;
    cublasStatus_t st;
    if (dtype == VQ_F32) {
        float a = (float)alpha, b = (float)beta;
        st = cublasSgemmStridedBatched(h, ta, tb, (int)n, (int)m, (int)k, &a, (const float *)y,
                                       lda, sa, (const float *)x, ldb, sb, &b, (float *)out,
                                       (int)n, sc, (int)batch);
    } else {
        double a = alpha, b = beta;
        st = cublasDgemmStridedBatched(h, ta, tb, (int)n, (int)m, (int)k, &a, (const double *)y,
                                       lda, sa, (const double *)x, ldb, sb, &b, (double *)out,
                                       (int)n, sc, (int)batch);
    }
    return st == CUBLAS_STATUS_SUCCESS ? 0 : vq__cuda_fail(cublasGetStatusString(st));
}

#endif
