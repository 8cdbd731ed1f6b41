/* varq's own f32 matrix product for CPUs with AVX-512 (ops/math/sgemm512.c),
 * which vq__gemm_ldc (ops/cpu/matmul.c) takes instead of OpenBLAS's sgemm
 * where it applies: why, and the two calls. */
#ifndef VARQ_OPS_CPU_SGEMM512_H
#define VARQ_OPS_CPU_SGEMM512_H

#include <stdbool.h>
#include <stdint.h>

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#include <immintrin.h>
/* The first n of 16 lanes (none for n <= 0, all for n >= 16): the masks
 * of a row's last, partial vector, for the AVX-512 code that shares this
 * header (sgemm512.c, winograd.c). */
static inline __mmask16 vq__sg_lanes(int64_t n)
{
    return n >= 16 ? 0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* conv2d's clip on 16 lanes, as its epilogue does it (v <= lo ? lo : v,
 * then v >= hi ? hi : v: a NaN stays), so the same bits: the products'
 * fused epilogue and Winograd's output transform. */
__attribute__((target("avx512f"))) static inline __m512 vq__sg_clip(__m512 x, __m512 lo, __m512 hi)
{
    x = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_LE_OQ), x, lo);
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, hi, _CMP_GE_OQ), x, hi);
}
#endif

/* What a product does to each element of C as it stores it for the last
 * time, when given one (conv2d's bias and clip, without a pass of their
 * own over C): adds bias[i] to row i (bias NULL: nothing), then with clip
 * clamps as conv2d's epilogue does (v <= lo ? lo : v, then v >= hi ? hi :
 * v: a NaN stays), so the same bits as that pass after the product. */
typedef struct vq__sg_epilogue {
    const float *bias;
    bool clip;
    float lo, hi;
} vq__sg_epilogue;

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
 * once. ep: NULL, or what to do to C's elements as they are stored for the
 * last time. */
bool vq__sgemm512(bool ta, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                  int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
                  const vq__sg_epilogue *ep);

/* Row-major C[m,n] = alpha * A B^T + beta * C for a few rows of A (m x k,
 * rows lda apart) and B n x k (rows ldb apart, so that B^T is k x n), as
 * dot products of A's rows with B's rows in 16 lanes: a linear layer at
 * batch 1 (ONNX's Gemm with transB), where OpenBLAS's sgemm took 3x as
 * long. beta 0 (C not read) or 1; m, n, k >= 1. Only when
 * vq__sgemm512_ok() said true; needs no buffer. Each dot product's order
 * depends only on k. Any thread. */
void vq__sgemm512_dots(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* Columns per panel of a packed B (vq__sgemm512_panels). */
#define VQ__SG_PANEL 32

/* vq__sgemm512 with B already in the kernel's layout, so that B is copied
 * there once for every call that reads it (conv2d's im2col columns, read
 * by each block of output channels): panel q (B's columns [32 q, 32 q +
 * 32)) at bp + q * k * VQ__SG_PANEL, its row p at + p * VQ__SG_PANEL,
 * zeros past column n. C = A B (A m x k, rows lda apart, not transposed),
 * C not read; ep as for vq__sgemm512. Needs no buffer, so it always does
 * the product; the bits
 * are vq__sgemm512's for the same A and B. Meant for when
 * vq__sgemm512_ok() said true (elsewhere it takes plain loops). Any
 * thread. */
void vq__sgemm512_panels(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                         const float *bp, float *c, int64_t ldc, const vq__sg_epilogue *ep);

/* B (k x n, rows ldb apart) into vq__sgemm512_panels' layout at bp: the
 * panels [q0, q1) of it (columns [32 q0, min(32 q1, n))), so that callers
 * can share the copy out by panels. Any thread; disjoint panels at once. */
void vq__sgemm512_pack(int64_t k, int64_t n, const float *b, int64_t ldb, float *bp, int64_t q0,
                       int64_t q1);

#endif
