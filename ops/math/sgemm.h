/* varq's own f32 matrix product for x86-64 CPUs with AVX2 + FMA or
 * AVX-512 (ops/math/sgemm.c), which vq__gemm_ldc (ops/cpu/matmul.c),
 * conv2d and Winograd take instead of OpenBLAS's sgemm: why, and the
 * calls. One implementation for both widths: the blocking, the packed
 * layout of B and the drivers are shared, the tiles are 8 x 32 in zmm
 * registers or 6 x 16 in ymm (sgemm_width.h). */
#ifndef VARQ_OPS_CPU_SGEMM_H
#define VARQ_OPS_CPU_SGEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "isa.h"

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#include <immintrin.h>
/* The first n of 16 lanes (none for n <= 0, all for n >= 16): the masks
 * of a row's last, partial vector, for the AVX-512 code that shares this
 * header (sgemm.c, winograd.c). */
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

/* The width varq's own product runs at here: vq__isa()'s level when that
 * is VQ__ISA_AVX2 or VQ__ISA_AVX512, the build is x86-64 by gcc or clang
 * and the environment variable VARQ_GEMM is not "openblas" (read once per
 * process); else VQ__ISA_PORTABLE, and the callers take OpenBLAS. Any
 * thread. */
enum vq__isa_level vq__sgemm_level(void);

/* Whether varq's own product runs here (vq__sgemm_level() is not
 * portable). Any thread. */
bool vq__sgemm_ok(void);

/* Row-major C[m,n] = alpha * op(A) op(B) + beta * C at vq__sgemm_level():
 * op(A) = A (m x k, rows lda apart) or, with ta, A^T (A k x m); op(B) = B
 * (k x n, rows ldb apart) or, with tb, B^T (B n x k); C's rows ldc apart,
 * nothing past column n touched; beta 0 (C not read: NaN there does not
 * matter) or any other value; m, n, k >= 1. Only when vq__sgemm_ok() said
 * true. false when this thread's packing buffer (256 KiB, kept for the
 * thread's life) cannot be allocated: C is then untouched and the caller
 * takes another path. For m <= VQ__SG_FEW rows of A not transposed
 * (a linear layer at batch 1), B is streamed once without packing: as dot
 * products of A's rows with B's rows (tb), or as sums of B's rows. Else
 * each element of C is the sum over k in blocks of 256 in order, with
 * fused multiply-adds. The bits depend only on the level, the forms, the
 * sizes and the values, not on the thread. Runs on the calling thread
 * only (callers split large products over the engine's workers). Any
 * thread; calls on disjoint C run at once. ep: NULL, or what to do to C's
 * elements as they are stored for the last time. */
bool vq__sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
               int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
               const vq__sg_epilogue *ep);

/* vq__sgemm at the given level (VQ__ISA_AVX2 or VQ__ISA_AVX512, at most
 * vq__isa_cpu()'s), whatever VARQ_ISA and VARQ_GEMM say: for tests and
 * benchmarks that compare the widths in one process. false also for a
 * level it has no kernel for. */
bool vq__sgemm_at(enum vq__isa_level level, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                  float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                  float *c, int64_t ldc, const vq__sg_epilogue *ep);

/* The most rows of A the streaming products take (vq__sgemm). */
#define VQ__SG_FEW 4

/* Columns per panel of a packed B (vq__sgemm_panels), at both widths. */
#define VQ__SG_PANEL 32

/* vq__sgemm with B already in the kernel's layout, so that B is copied
 * there once for every call that reads it (conv2d's im2col columns, read
 * by each block of output channels): panel q (B's columns [32 q, 32 q +
 * 32)) at bp + q * k * VQ__SG_PANEL, its row p at + p * VQ__SG_PANEL,
 * zeros past column n. C = A B (A m x k, rows lda apart, not transposed),
 * C not read; ep as for vq__sgemm. Needs no buffer, so it always does the
 * product; the bits are vq__sgemm's for the same A and B when m is above
 * VQ__SG_FEW. At vq__sgemm_level(); plain loops where that is portable.
 * Any thread. */
void vq__sgemm_panels(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *bp,
                      float *c, int64_t ldc, const vq__sg_epilogue *ep);

/* vq__sgemm_panels at the given level (as vq__sgemm_at; portable: plain
 * loops). */
void vq__sgemm_panels_at(enum vq__isa_level level, int64_t m, int64_t n, int64_t k, const float *a,
                         int64_t lda, const float *bp, float *c, int64_t ldc,
                         const vq__sg_epilogue *ep);

/* B (k x n, rows ldb apart) into vq__sgemm_panels' layout at bp: the
 * panels [q0, q1) of it (columns [32 q0, min(32 q1, n))), so that callers
 * can share the copy out by panels. The layout is the same at every level.
 * Any thread; disjoint panels at once. */
void vq__sgemm_pack(int64_t k, int64_t n, const float *b, int64_t ldb, float *bp, int64_t q0,
                    int64_t q1);

#endif
