/* varq's own f32 matrix product for CPUs with AVX-512 (ops/cpu/sgemm512.c),
 * which vq__gemm_ldc (ops/cpu/matmul.c) takes instead of OpenBLAS's sgemm
 * where it applies: why, and the two calls. */
#ifndef VARQ_OPS_CPU_SGEMM512_H
#define VARQ_OPS_CPU_SGEMM512_H

#include <stdbool.h>
#include <stdint.h>

/* Whether vq__sgemm512 runs here: an x86-64 build by gcc or clang, a CPU
 * with AVX-512F, and the environment variable VARQ_GEMM not "openblas"
 * (both read once per process). Any thread. */
bool vq__sgemm512_ok(void);

/* Row-major C[m,n] = alpha * op(A) B + beta * C, op(A) = A (m x k, rows
 * lda apart) or, with ta, A^T (A k x m), B k x n (rows ldb apart, not
 * transposed), C's rows ldc apart; beta 0 (C not read: NaN there does not
 * matter) or 1; m, n, k >= 1. Only when vq__sgemm512_ok() said true.
 * false when this thread's packing buffer (256 KiB, kept for the thread's
 * life) cannot be allocated: C is then untouched and the caller takes
 * another path. Each element of C is the sum over k in blocks of 256 in
 * order, with fused multiply-adds, so the bits depend only on the sizes
 * and values, not on the thread. Any thread; calls on disjoint C run at
 * once. */
bool vq__sgemm512(bool ta, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                  int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

#endif
