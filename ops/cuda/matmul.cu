/* matmul on the GPU through cuBLAS: vq__cuda_matmul runs
 * cublas{S,D}gemmStridedBatched on a handle cached per (device, stream),
 * created lazily under a mutex and bound to the stream. Row-major operands
 * are handed to column-major cuBLAS as their transposes: Out^T = op(Y)^T
 * op(X)^T. Built without cuBLAS (VARQ_CUDA_NO_CUBLAS) the launcher returns
 * VQ_ENOSYS. Launcher: kernels.h.
 *
 * cuBLAS is opened with dlopen at the first product, not linked: linking
 * it made every process that loads varq pay for cuBLAS's loading whether
 * it used a GPU or not (libcublasLt's constructors and its 190 MiB of
 * writable data: 0.36 s and 220 MB of memory to start `varq --help`, and
 * LeakSanitizer scanning those 190 MiB at every exit). The build's cuBLAS
 * headers give the functions' types and the soname's major version; the
 * library is looked for by soname first (LD_LIBRARY_PATH, the runpath,
 * ld.so's cache), then in the toolkit's library directory the build found
 * (VARQ_CUDA_LIBDIR). */
#include "kernels.h"

#include <limits.h>
#include <pthread.h>
#include <stdint.h>

#ifdef VARQ_CUDA_NO_CUBLAS

extern "C" int vq__cuda_matmul(int, int, int, int64_t, int64_t, int64_t, int64_t, double,
                               const void *, int, const void *, int, double, void *, void *)
{
    return vq__cuda_blas_load();
}

extern "C" int vq__cuda_gemm(int, int, int, int64_t, int64_t, int64_t, double, const void *,
                             int64_t, const void *, int64_t, double, void *, int64_t, void *)
{
    return vq__cuda_blas_load();
}

extern "C" void vq__cuda_blas_release(void) {}

extern "C" int vq__cuda_blas_load(void)
{
    vq__cuda_fail("this build's CUDA kernels have no cuBLAS");
    return VQ_ENOSYS;
}

#else

#include <cublas_v2.h>
#include <dlfcn.h>
#include <stdio.h>

#define STR_(x) #x
#define STR(x) STR_(x)
#define CUBLAS_SONAME "libcublas.so." STR(CUBLAS_VER_MAJOR)

/* The cuBLAS functions varq calls, resolved once by blas_load. */
static struct {
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSgemmStridedBatched) sgemm;
    decltype(&cublasDgemmStridedBatched) dgemm;
    decltype(&cublasGetStatusString) status_string;
} blas;

#define MAX_HANDLES 64

struct handle_slot {
    int device;
    cudaStream_t stream;
    cublasHandle_t h;
};

static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static handle_slot handles[MAX_HANDLES];
static int nhandles;
/* 0: not tried yet; 1: blas is filled; < 0: the load failed with that
 * error (every later call fails the same way, with load_why). Under
 * handles_lock. */
static int loaded;
static char load_why[320];

/* Opens cuBLAS and resolves blas, once; under handles_lock. The library
 * stays open for the process's life: handles made from it may live until
 * exit, and cuBLAS does not support being unloaded under them. */
static int blas_load_locked(void)
{
    if (loaded)
        return loaded;
    const char *names[] = {CUBLAS_SONAME,
#ifdef VARQ_CUDA_LIBDIR
                           VARQ_CUDA_LIBDIR "/" CUBLAS_SONAME
#endif
    };
    void *lib = NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++)
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *e = dlerror();
        snprintf(load_why, sizeof load_why, "cannot load cuBLAS (" CUBLAS_SONAME "): %s",
                 e ? e : "not found");
        return loaded = VQ_ENOSYS;
    }
    struct {
        void **slot;
        const char *name;
    } fns[] = {
        {(void **)&blas.create, "cublasCreate_v2"},
        {(void **)&blas.destroy, "cublasDestroy_v2"},
        {(void **)&blas.set_stream, "cublasSetStream_v2"},
        {(void **)&blas.sgemm, "cublasSgemmStridedBatched"},
        {(void **)&blas.dgemm, "cublasDgemmStridedBatched"},
        {(void **)&blas.status_string, "cublasGetStatusString"},
    };
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        if (!(*fns[i].slot = dlsym(lib, fns[i].name))) {
            snprintf(load_why, sizeof load_why, CUBLAS_SONAME " has no %s", fns[i].name);
            dlclose(lib);
            return loaded = VQ_ENOSYS;
        }
    return loaded = 1;
}

extern "C" int vq__cuda_blas_load(void)
{
    pthread_mutex_lock(&handles_lock);
    int rc = blas_load_locked();
    pthread_mutex_unlock(&handles_lock);
    if (rc > 0)
        return 0;
    vq__cuda_fail(load_why); /* written once, before loaded was set */
    return rc;
}

/* The handle for (current device, stream), created on first use (the
 * first one loads cuBLAS); NULL if cuBLAS cannot be loaded or make one,
 * or the cache is full. A handle is used by one stream; two threads on
 * the same stream serialize on the stream anyway, and cuBLAS calls on one
 * handle from two host threads are allowed when they share its stream. */
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
    if (!h && nhandles < MAX_HANDLES && blas_load_locked() > 0 &&
        blas.create(&h) == CUBLAS_STATUS_SUCCESS) {
        if (blas.set_stream(h, stream) != CUBLAS_STATUS_SUCCESS) {
            blas.destroy(h);
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
        blas.destroy(handles[i].h);
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
    cublasHandle_t h = handle_for((cudaStream_t)stream); /* loads cuBLAS the first time */
    if (!h) {
        int rc = vq__cuda_blas_load(); /* VQ_ENOSYS and why if it could not be loaded */
        if (rc < 0)
            return rc;
        return vq__cuda_fail("no cuBLAS handle (cublasCreate failed, or 64 streams have one)");
    }
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
        st = blas.sgemm(h, ta, tb, (int)n, (int)m, (int)k, &a, (const float *)y, lda, sa,
                        (const float *)x, ldb, sb, &b, (float *)out, (int)n, sc, (int)batch);
    } else {
        double a = alpha, b = beta;
        st = blas.dgemm(h, ta, tb, (int)n, (int)m, (int)k, &a, (const double *)y, lda, sa,
                        (const double *)x, ldb, sb, &b, (double *)out, (int)n, sc, (int)batch);
    }
    return st == CUBLAS_STATUS_SUCCESS ? 0 : vq__cuda_fail(blas.status_string(st));
}

/* One product with leading dimensions, row-major as vq__gemm_ldc: handed
 * to cuBLAS transposed as vq__cuda_matmul does (C^T = op(B)^T op(A)^T),
 * through the strided-batched entry point with a batch of one, so that no
 * other cuBLAS function needs resolving. */
extern "C" int vq__cuda_gemm(int dtype, int ta, int tb, int64_t m, int64_t n, int64_t k,
                             double alpha, const void *a, int64_t lda, const void *b,
                             int64_t ldb, double beta, void *c, int64_t ldc, void *stream)
{
    if ((dtype != VQ_F32 && dtype != VQ_F64) || m < 0 || n < 0 || k < 0 || m > INT_MAX ||
        n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX ||
        ldc < n || (beta != 0 && beta != 1))
        return VQ_EINVAL;
    if (m == 0 || n == 0)
        return 0;
    size_t es = dtype == VQ_F32 ? 4 : 8;
    if (k == 0) { /* an empty sum: beta * C */
        if (beta != 0)
            return 0;
        return vq__cuda_called(cudaMemset2DAsync(c, (size_t)ldc * es, 0, (size_t)n * es,
                                                 (size_t)m, (cudaStream_t)stream));
    }
    cublasHandle_t h = handle_for((cudaStream_t)stream);
    if (!h) {
        int rc = vq__cuda_blas_load();
        if (rc < 0)
            return rc;
        return vq__cuda_fail("no cuBLAS handle (cublasCreate failed, or 64 streams have one)");
    }
    /* column-major: C^T (n x m, ldc) = op(B)^T (n x k) * op(A)^T (k x m) */
    cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t st;
    if (dtype == VQ_F32) {
        float al = (float)alpha, be = (float)beta;
        st = blas.sgemm(h, opb, opa, (int)n, (int)m, (int)k, &al, (const float *)b, (int)ldb, 0,
                        (const float *)a, (int)lda, 0, &be, (float *)c, (int)ldc, 0, 1);
    } else {
        double al = alpha, be = beta;
        st = blas.dgemm(h, opb, opa, (int)n, (int)m, (int)k, &al, (const double *)b, (int)ldb,
                        0, (const double *)a, (int)lda, 0, &be, (double *)c, (int)ldc, 0, 1);
    }
    return st == CUBLAS_STATUS_SUCCESS ? 0 : vq__cuda_fail(blas.status_string(st));
}

#endif
