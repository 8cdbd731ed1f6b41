/* An f32 matrix product with AVX2 + FMA or AVX-512 (sgemm.h), for the
 * products that dominate a network's time: conv2d's im2col and 1x1
 * products and the Winograd path's 36 per block (ops/cpu/conv.c,
 * winograd.c), and matmul's and Gemm's, all through vq__gemm_ldc.
 *
 * Why not OpenBLAS there: OpenBLAS picks its kernel per CPU at load time
 * from a table of the CPUs its release knew, and falls back to its oldest
 * x86-64 kernel (Prescott: SSE3, 4 lanes) on a CPU it does not recognise,
 * as Debian 12's 0.3.21 does on current Xeons and EPYCs; the environment
 * can also hold it to another (OPENBLAS_CORETYPE). So the speed of every
 * product would depend on the release of a system library. varq keeps its
 * own kernel at the width vq__isa() allows, for every transpose form, and
 * leaves f64 and CPUs without AVX2 + FMA to OpenBLAS. VARQ_GEMM=openblas
 * turns it off.
 *
 * The classic blocking (Goto and van de Geijn, "Anatomy of
 * High-Performance Matrix Multiplication", 2008): B is copied a block of
 * KC rows by NC columns at a time into panels of 32 columns (zeros past
 * n), each panel's KC x 32 floats contiguous, so the inner loop reads it
 * in order from L1 (B transposed is copied by 8 x 8 transposes); A is read
 * in place, MR rows at a time (each row's KC floats in order, or,
 * transposed, MR floats per step from one line), one broadcast per row
 * and step. A tile of MR rows by two vectors of sums stays in registers
 * for the whole block of k, then is added to C (or, for the first block
 * with beta 0, written). Tiles at C's bottom and right edges read A's
 * last row again for the missing rows and store with masks. The tiles,
 * the packing and the streaming products for a few rows of A are written
 * once for both widths (sgemm_width.h). */
#include "sgemm.h"
#include "isa.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define SG_HAVE 1
#include <immintrin.h>
#endif

#define SG_KC 256
#define SG_NC 256

static pthread_once_t sg_once = PTHREAD_ONCE_INIT;
static enum vq__isa_level sg_level = VQ__ISA_PORTABLE;
#ifdef SG_HAVE
static bool sg_keyed;
static pthread_key_t sg_key; /* each thread's panel buffer */
#endif

static void sg_init(void)
{
#ifdef SG_HAVE
    sg_keyed = pthread_key_create(&sg_key, free) == 0;
    const char *e = getenv("VARQ_GEMM");
    enum vq__isa_level l = vq__isa();
    if (sg_keyed && l >= VQ__ISA_AVX2 && !(e && !strcmp(e, "openblas")))
        sg_level = l;
#endif
}

enum vq__isa_level vq__sgemm_level(void)
{
    pthread_once(&sg_once, sg_init);
    return sg_level;
}

bool vq__sgemm_ok(void)
{
    return vq__sgemm_level() != VQ__ISA_PORTABLE;
}

/* Plain loops for a product from packed panels, where no kernel runs (a
 * build for another CPU): the sums over k in order. */
static void sg_panels_plain(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                            const float *bp, float *c, int64_t ldc, const vq__sg_epilogue *ep)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0;
            for (int64_t p = 0; p < k; p++)
                s += a[i * lda + p] *
                     bp[j / VQ__SG_PANEL * k * VQ__SG_PANEL + p * VQ__SG_PANEL + j % VQ__SG_PANEL];
            if (ep && ep->bias)
                s += ep->bias[i];
            if (ep && ep->clip) {
                s = s <= ep->lo ? ep->lo : s;
                s = s >= ep->hi ? ep->hi : s;
            }
            c[i * ldc + j] = s;
        }
}

/* sgemm_width.h's packing in plain loops. */
static void sg_pack_plain(int64_t kc, int64_t nc, const float *b, int64_t ldb, float *bp)
{
    for (int64_t j0 = 0; j0 < nc; j0 += VQ__SG_PANEL) {
        int64_t w = nc - j0 < VQ__SG_PANEL ? nc - j0 : VQ__SG_PANEL;
        for (int64_t p = 0; p < kc; p++) {
            float *d = bp + j0 * kc + p * VQ__SG_PANEL;
            memcpy(d, b + p * ldb + j0, (size_t)w * sizeof(float));
            memset(d + w, 0, (size_t)(VQ__SG_PANEL - w) * sizeof(float));
        }
    }
}

#ifdef SG_HAVE

/* ---- the two widths (sgemm_width.h) ---- */

#define SGW_BITS 512
#define SGW_V __m512
#define SGW_M __mmask16
#define SGW_L 16
#define SGW_MR 8
#define SGW_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define SGW(name) sg_##name##_512
#define SGW_ATTR __attribute__((target("avx512f")))
#define SGW_load _mm512_loadu_ps
#define SGW_store _mm512_storeu_ps
#define SGW_set1 _mm512_set1_ps
#define SGW_zero _mm512_setzero_ps
#define SGW_fma _mm512_fmadd_ps
#define SGW_mul _mm512_mul_ps
#define SGW_add _mm512_add_ps
#define SGW_mask vq__sg_lanes
#define SGW_mload(m, p) _mm512_maskz_loadu_ps(m, p)
#define SGW_mstore(p, m, v) _mm512_mask_storeu_ps(p, m, v)
#define SGW_clip vq__sg_clip
#define SGW_sum _mm512_reduce_add_ps
#include "sgemm_width.h"
#undef SGW_BITS
#undef SGW_V
#undef SGW_M
#undef SGW_L
#undef SGW_MR
#undef SGW_ROWS
#undef SGW
#undef SGW_ATTR
#undef SGW_load
#undef SGW_store
#undef SGW_set1
#undef SGW_zero
#undef SGW_fma
#undef SGW_mul
#undef SGW_add
#undef SGW_mask
#undef SGW_mload
#undef SGW_mstore
#undef SGW_clip
#undef SGW_sum

#define SG_AVX2 __attribute__((target("avx2,fma")))

/* The first n of 8 lanes, as AVX2's masked loads and stores take them. */
SG_AVX2 static inline __m256i sg_lanes8(int64_t n)
{
    int k = n >= 8 ? 8 : n <= 0 ? 0 : (int)n;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* vq__sg_clip on 8 lanes (the same comparisons, so the same bits). */
SG_AVX2 static inline __m256 sg_clip8(__m256 x, __m256 lo, __m256 hi)
{
    x = _mm256_blendv_ps(x, lo, _mm256_cmp_ps(x, lo, _CMP_LE_OQ));
    return _mm256_blendv_ps(x, hi, _mm256_cmp_ps(x, hi, _CMP_GE_OQ));
}

SG_AVX2 static inline float sg_sum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

#define SGW_BITS 256
#define SGW_V __m256
#define SGW_M __m256i
#define SGW_L 8
#define SGW_MR 6
#define SGW_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5)
#define SGW(name) sg_##name##_256
#define SGW_ATTR SG_AVX2
#define SGW_load _mm256_loadu_ps
#define SGW_store _mm256_storeu_ps
#define SGW_set1 _mm256_set1_ps
#define SGW_zero _mm256_setzero_ps
#define SGW_fma _mm256_fmadd_ps
#define SGW_mul _mm256_mul_ps
#define SGW_add _mm256_add_ps
#define SGW_mask sg_lanes8
#define SGW_mload(m, p) _mm256_maskload_ps(p, m)
#define SGW_mstore(p, m, v) _mm256_maskstore_ps(p, m, v)
#define SGW_clip sg_clip8
#define SGW_sum sg_sum8
#include "sgemm_width.h"

/* B^T's rows [0, kc), columns [0, nc), B n x k with rows ldb apart (so
 * B^T's element (p, j) is b[j * ldb + p]), into sg_pack's layout: 8 x 8
 * blocks by AVX's transpose (both widths have AVX2), the rest element by
 * element. */
SG_AVX2 static void sg_pack_t(int64_t kc, int64_t nc, const float *b, int64_t ldb, float *bp)
{
    for (int64_t j0 = 0; j0 < nc; j0 += VQ__SG_PANEL) {
        int64_t w = nc - j0 < VQ__SG_PANEL ? nc - j0 : VQ__SG_PANEL, j = 0;
        float *d = bp + j0 * kc;
        for (; j + 8 <= w; j += 8) {
            const float *s = b + (j0 + j) * ldb;
            int64_t p = 0;
            for (; p + 8 <= kc; p += 8) {
                __m256 r0 = _mm256_loadu_ps(s + p), r1 = _mm256_loadu_ps(s + ldb + p);
                __m256 r2 = _mm256_loadu_ps(s + 2 * ldb + p), r3 = _mm256_loadu_ps(s + 3 * ldb + p);
                __m256 r4 = _mm256_loadu_ps(s + 4 * ldb + p), r5 = _mm256_loadu_ps(s + 5 * ldb + p);
                __m256 r6 = _mm256_loadu_ps(s + 6 * ldb + p), r7 = _mm256_loadu_ps(s + 7 * ldb + p);
                __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
                __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
                __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
                __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
                __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
                __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
                __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
                __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
                __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
                __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
                __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
                __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
                float *o = d + p * VQ__SG_PANEL + j;
                _mm256_storeu_ps(o, _mm256_permute2f128_ps(u0, u4, 0x20));
                _mm256_storeu_ps(o + VQ__SG_PANEL, _mm256_permute2f128_ps(u1, u5, 0x20));
                _mm256_storeu_ps(o + 2 * VQ__SG_PANEL, _mm256_permute2f128_ps(u2, u6, 0x20));
                _mm256_storeu_ps(o + 3 * VQ__SG_PANEL, _mm256_permute2f128_ps(u3, u7, 0x20));
                _mm256_storeu_ps(o + 4 * VQ__SG_PANEL, _mm256_permute2f128_ps(u0, u4, 0x31));
                _mm256_storeu_ps(o + 5 * VQ__SG_PANEL, _mm256_permute2f128_ps(u1, u5, 0x31));
                _mm256_storeu_ps(o + 6 * VQ__SG_PANEL, _mm256_permute2f128_ps(u2, u6, 0x31));
                _mm256_storeu_ps(o + 7 * VQ__SG_PANEL, _mm256_permute2f128_ps(u3, u7, 0x31));
            }
            for (; p < kc; p++)
                for (int64_t l = 0; l < 8; l++)
                    d[p * VQ__SG_PANEL + j + l] = s[l * ldb + p];
        }
        for (; j < w; j++)
            for (int64_t p = 0; p < kc; p++)
                d[p * VQ__SG_PANEL + j] = b[(j0 + j) * ldb + p];
        if (w < VQ__SG_PANEL)
            for (int64_t p = 0; p < kc; p++)
                memset(d + p * VQ__SG_PANEL + w, 0, (size_t)(VQ__SG_PANEL - w) * sizeof(float));
    }
}

/* One width's functions. */
struct sg_width {
    void (*pack)(int64_t kc, int64_t nc, const float *b, int64_t ldb, float *bp);
    void (*block)(int64_t m, int64_t nc, int64_t kc, const float *a, int64_t ars, int64_t acs,
                  const float *bp, int64_t pstride, float *c, int64_t ldc, float alpha, float beta,
                  const vq__sg_epilogue *ep);
    void (*few)(bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
                const vq__sg_epilogue *ep);
};

static const struct sg_width sg_widths[] = {
    [VQ__ISA_AVX2] = {sg_pack_256, sg_block_256, sg_few_256},
    [VQ__ISA_AVX512] = {sg_pack_512, sg_block_512, sg_few_512},
};

static const struct sg_width *sg_width_at(enum vq__isa_level l)
{
    return l == VQ__ISA_AVX2 || l == VQ__ISA_AVX512 ? &sg_widths[l] : NULL;
}

/* This thread's panel buffer, SG_KC * SG_NC floats, 64-byte aligned. */
static float *sg_buffer(void)
{
    pthread_once(&sg_once, sg_init);
    if (!sg_keyed)
        return NULL;
    float *p = pthread_getspecific(sg_key);
    if (p)
        return p;
    p = aligned_alloc(64, (size_t)SG_KC * SG_NC * sizeof(float));
    if (p && pthread_setspecific(sg_key, p) != 0) {
        free(p);
        p = NULL;
    }
    return p;
}

bool vq__sgemm_at(enum vq__isa_level level, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                  float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                  float *c, int64_t ldc, const vq__sg_epilogue *ep)
{
    const struct sg_width *w = sg_width_at(level);
    if (!w)
        return false;
    if (!ta && m <= VQ__SG_FEW) {
        w->few(tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ep);
        return true;
    }
    float *bp = sg_buffer();
    if (!bp)
        return false;
    int64_t ars = ta ? 1 : lda, acs = ta ? lda : 1;
    for (int64_t jc = 0; jc < n; jc += SG_NC) {
        int64_t nc = n - jc < SG_NC ? n - jc : SG_NC;
        for (int64_t pc = 0; pc < k; pc += SG_KC) {
            int64_t kc = k - pc < SG_KC ? k - pc : SG_KC;
            if (tb)
                sg_pack_t(kc, nc, b + jc * ldb + pc, ldb, bp);
            else
                w->pack(kc, nc, b + pc * ldb + jc, ldb, bp);
            w->block(m, nc, kc, a + pc * acs, ars, acs, bp, kc * VQ__SG_PANEL, c + jc, ldc, alpha,
                     pc > 0 ? 1 : beta, pc + kc == k ? ep : NULL);
        }
    }
    return true;
}

void vq__sgemm_panels_at(enum vq__isa_level level, int64_t m, int64_t n, int64_t k, const float *a,
                         int64_t lda, const float *bp, float *c, int64_t ldc,
                         const vq__sg_epilogue *ep)
{
    const struct sg_width *w = sg_width_at(level);
    if (!w) {
        sg_panels_plain(m, n, k, a, lda, bp, c, ldc, ep);
        return;
    }
    /* the blocks of vq__sgemm, so the same sums: columns SG_NC at a time,
     * k SG_KC at a time (row pc of each panel) */
    for (int64_t jc = 0; jc < n; jc += SG_NC) {
        int64_t nc = n - jc < SG_NC ? n - jc : SG_NC;
        for (int64_t pc = 0; pc < k; pc += SG_KC) {
            int64_t kc = k - pc < SG_KC ? k - pc : SG_KC;
            w->block(m, nc, kc, a + pc, lda, 1,
                     bp + jc / VQ__SG_PANEL * k * VQ__SG_PANEL + pc * VQ__SG_PANEL,
                     k * VQ__SG_PANEL, c + jc, ldc, 1, pc > 0 ? 1 : 0, pc + kc == k ? ep : NULL);
        }
    }
}

/* The packing at vq__isa()'s level (the layout is the same at each). */
static void sg_pack(int64_t kc, int64_t nc, const float *b, int64_t ldb, float *bp)
{
    const struct sg_width *w = sg_width_at(vq__isa());
    if (w)
        w->pack(kc, nc, b, ldb, bp);
    else
        sg_pack_plain(kc, nc, b, ldb, bp);
}

#else

#define sg_pack sg_pack_plain

#endif

#ifndef SG_HAVE
bool vq__sgemm_at(enum vq__isa_level level, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                  float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                  float *c, int64_t ldc, const vq__sg_epilogue *ep)
{
    (void)level, (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda;
    (void)b, (void)ldb, (void)beta, (void)c, (void)ldc, (void)ep;
    return false;
}

void vq__sgemm_panels_at(enum vq__isa_level level, int64_t m, int64_t n, int64_t k, const float *a,
                         int64_t lda, const float *bp, float *c, int64_t ldc,
                         const vq__sg_epilogue *ep)
{
    (void)level;
    sg_panels_plain(m, n, k, a, lda, bp, c, ldc, ep);
}
#endif

bool vq__sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
               int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
               const vq__sg_epilogue *ep)
{
    return vq__sgemm_at(vq__sgemm_level(), ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                        ep);
}

void vq__sgemm_panels(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda, const float *bp,
                      float *c, int64_t ldc, const vq__sg_epilogue *ep)
{
    vq__sgemm_panels_at(vq__sgemm_level(), m, n, k, a, lda, bp, c, ldc, ep);
}

void vq__sgemm_pack(int64_t k, int64_t n, const float *b, int64_t ldb, float *bp, int64_t q0,
                    int64_t q1)
{
    int64_t j0 = q0 * VQ__SG_PANEL, j1 = q1 * VQ__SG_PANEL < n ? q1 * VQ__SG_PANEL : n;
    if (j1 > j0)
        sg_pack(k, j1 - j0, b + j0, ldb, bp + j0 * k);
}
