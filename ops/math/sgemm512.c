/* An f32 matrix product with AVX-512 (sgemm512.h), for the products that
 * dominate a convolution net's time: conv2d's im2col and 1x1 products and
 * the Winograd path's 36 per block (ops/cpu/conv.c, winograd.c), and
 * matmul's, all through vq__gemm_ldc.
 *
 * Why not OpenBLAS there: OpenBLAS picks its kernel per CPU at load time,
 * and the environment can hold it to an older one (OPENBLAS_CORETYPE; on
 * the machines this project runs on it is pinned to Haswell's AVX2
 * kernel, half of an AVX-512 core's multiply-adds per cycle). Convolution
 * is nearly all of ResNet-18's and MobileNetV2's time (docs/perf/models.md),
 * so varq keeps its own kernel for the one form they use,
 * B not transposed, and leaves every other form, and CPUs without
 * AVX-512, to OpenBLAS. VARQ_GEMM=openblas turns it off.
 *
 * The classic blocking (Goto and van de Geijn, "Anatomy of
 * High-Performance Matrix Multiplication", 2008): B is copied a block of
 * KC rows by NC columns at a time into panels of NR columns (zeros past
 * n), each panel's KC x NR floats contiguous, so the inner loop reads it
 * in order from L1; A is read in place, MR rows at a time (each row's KC
 * floats in order, or, transposed, MR floats per step from one line),
 * one broadcast per row and step. A tile of MR x NR sums stays in 16
 * registers for the whole block of k, then is added to C (or, for the
 * first block with beta 0, written). Tiles at C's bottom and right edges
 * read A's last row again for the missing rows and store with masks. */
#include "sgemm512.h"
#include "isa.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define SG_HAVE 1
#include <immintrin.h>
#endif

#define SG_MR 8
#define SG_NR VQ__SG_PANEL
#define SG_KC 256
#define SG_NC 256

static pthread_once_t sg_once = PTHREAD_ONCE_INIT;
static bool sg_on;
#ifdef SG_HAVE
static pthread_key_t sg_key; /* each thread's panel buffer */
#endif

static void sg_init(void)
{
#ifdef SG_HAVE
    const char *e = getenv("VARQ_GEMM");
    sg_on = vq__isa() >= VQ__ISA_AVX512 && !(e && !strcmp(e, "openblas")) &&
            pthread_key_create(&sg_key, free) == 0;
#endif
}

bool vq__sgemm512_ok(void)
{
    pthread_once(&sg_once, sg_init);
    return sg_on;
}

/* B's rows [0, kc), columns [0, nc) (b's rows ldb apart) into panels of
 * SG_NR columns: panel q at bp + q * kc * SG_NR, row p of it at
 * + p * SG_NR, zeros past nc. With AVX-512 each row of a panel is two
 * (masked) loads and two stores: a call to memcpy per row cost more than
 * the copy itself, a visible part of ResNet-18's time at batch 1. */
#ifdef SG_HAVE
__attribute__((target("avx512f"))) static void sg_pack(int64_t kc, int64_t nc, const float *b,
                                                       int64_t ldb, float *bp)
{
    for (int64_t j0 = 0; j0 < nc; j0 += SG_NR) {
        __mmask16 m0 = vq__sg_lanes(nc - j0), m1 = vq__sg_lanes(nc - j0 - 16);
        float *d = bp + j0 * kc;
        const float *s = b + j0;
        for (int64_t p = 0; p < kc; p++, d += SG_NR, s += ldb) {
            _mm512_storeu_ps(d, _mm512_maskz_loadu_ps(m0, s));
            _mm512_storeu_ps(d + 16, _mm512_maskz_loadu_ps(m1, s + 16));
        }
    }
}
#else
static void sg_pack(int64_t kc, int64_t nc, const float *b, int64_t ldb, float *bp)
{
    for (int64_t j0 = 0; j0 < nc; j0 += SG_NR) {
        int64_t w = nc - j0 < SG_NR ? nc - j0 : SG_NR;
        float *d = bp + j0 * kc;
        const float *s = b + j0;
        if (w == SG_NR) {
            for (int64_t p = 0; p < kc; p++)
                memcpy(d + p * SG_NR, s + p * ldb, SG_NR * sizeof(float));
        } else {
            for (int64_t p = 0; p < kc; p++) {
                memcpy(d + p * SG_NR, s + p * ldb, (size_t)w * sizeof(float));
                memset(d + p * SG_NR + w, 0, (size_t)(SG_NR - w) * sizeof(float));
            }
        }
    }
}

#endif

void vq__sgemm512_pack(int64_t k, int64_t n, const float *b, int64_t ldb, float *bp, int64_t q0,
                       int64_t q1)
{
    int64_t j0 = q0 * SG_NR, j1 = q1 * SG_NR < n ? q1 * SG_NR : n;
    if (j1 > j0)
        sg_pack(k, j1 - j0, b + j0, ldb, bp + j0 * k);
}

#ifdef SG_HAVE

/* This thread's panel buffer, SG_KC * SG_NC floats, 64-byte aligned. */
static float *sg_buffer(void)
{
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

#define SG_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

/* One tile: rows r[0..7] of op(A) (r[i] + p * acs is element p), the
 * panel bp (kc x SG_NR), nv 16-column halves of it (1 or 2, a constant
 * where inlined), into C at c (rows ldc apart): the first mr rows, the
 * columns masks m0 and m1 allow; add: C += alpha * sum, else C = alpha *
 * sum; then ep (NULL: none; the tile's rows are row0.. of ep's). */
#define SG_ATTR __attribute__((target("avx512f"), always_inline)) inline
static SG_ATTR void sg_tile(int64_t kc, const float *const r[SG_MR], int64_t acs, const float *bp,
                            int nv, int mr, __mmask16 m0, __mmask16 m1, float *c, int64_t ldc,
                            float alpha, bool add, const vq__sg_epilogue *ep, int64_t row0)
{
#define SG_DECL(i) __m512 s##i##a = _mm512_setzero_ps(), s##i##b = _mm512_setzero_ps();
    SG_ROWS(SG_DECL)
#define SG_PTR(i) const float *r##i = r[i];
    SG_ROWS(SG_PTR)
    int64_t off = 0;
    if (nv == 2) {
        for (int64_t p = 0; p < kc; p++, off += acs, bp += SG_NR) {
            /* A's rows 128 floats ahead, a line per row every 16 steps:
             * the 8 short runs of a tile are more than the hardware's
             * prefetcher follows (it pays on ResNet-18's 7x7 layers'
             * product with A coming from memory) */
            if (acs == 1 && (p & 15) == 0) {
#define SG_PREFETCH(i) _mm_prefetch((const char *)(r##i + off + 128), _MM_HINT_T0);
                SG_ROWS(SG_PREFETCH)
            }
            __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
#define SG_STEP2(i)                                 \
    {                                               \
        __m512 av = _mm512_set1_ps(r##i[off]);      \
        s##i##a = _mm512_fmadd_ps(av, b0, s##i##a); \
        s##i##b = _mm512_fmadd_ps(av, b1, s##i##b); \
    }
            SG_ROWS(SG_STEP2)
        }
    } else {
        for (int64_t p = 0; p < kc; p++, off += acs, bp += SG_NR) {
            __m512 b0 = _mm512_loadu_ps(bp);
#define SG_STEP1(i) s##i##a = _mm512_fmadd_ps(_mm512_set1_ps(r##i[off]), b0, s##i##a);
            SG_ROWS(SG_STEP1)
        }
    }
    __m512 al = _mm512_set1_ps(alpha);
    const float *bias = ep && ep->bias ? ep->bias + row0 : NULL;
    bool clip = ep && ep->clip;
    __m512 lo = _mm512_set1_ps(clip ? ep->lo : 0), hi = _mm512_set1_ps(clip ? ep->hi : 0);
#define SG_EPI(x, i)                                   \
    if (bias)                                          \
        x = _mm512_add_ps(x, _mm512_set1_ps(bias[i])); \
    if (clip)                                          \
        x = vq__sg_clip(x, lo, hi);
#define SG_STORE(i)                                                                           \
    if (i < mr) {                                                                             \
        float *ci = c + (int64_t)(i)*ldc;                                                     \
        __m512 u = add ? _mm512_fmadd_ps(al, s##i##a, _mm512_maskz_loadu_ps(m0, ci))          \
                       : _mm512_mul_ps(al, s##i##a);                                          \
        SG_EPI(u, i)                                                                          \
        _mm512_mask_storeu_ps(ci, m0, u);                                                     \
        if (nv == 2) {                                                                        \
            __m512 v = add ? _mm512_fmadd_ps(al, s##i##b, _mm512_maskz_loadu_ps(m1, ci + 16)) \
                           : _mm512_mul_ps(al, s##i##b);                                      \
            SG_EPI(v, i)                                                                      \
            _mm512_mask_storeu_ps(ci + 16, m1, v);                                            \
        }                                                                                     \
    }
    SG_ROWS(SG_STORE)
}

/* The tiles of one packed block: columns [0, nc) of bp (its panels
 * pstride floats apart) against op(A)'s rows [0, m) from a (element
 * (i, p) at a + i * ars + p * acs); ep: NULL but in the last block of k. */
__attribute__((target("avx512f"))) static void sg_block(int64_t m, int64_t nc, int64_t kc,
                                                        const float *a, int64_t ars, int64_t acs,
                                                        const float *bp, int64_t pstride, float *c,
                                                        int64_t ldc, float alpha, bool add,
                                                        const vq__sg_epilogue *ep)
{
    for (int64_t j0 = 0; j0 < nc; j0 += SG_NR) {
        int64_t w = nc - j0 < SG_NR ? nc - j0 : SG_NR;
        __mmask16 m0 = vq__sg_lanes(w), m1 = vq__sg_lanes(w - 16);
        const float *panel = bp + j0 / SG_NR * pstride;
        for (int64_t i0 = 0; i0 < m; i0 += SG_MR) {
            int mr = m - i0 < SG_MR ? (int)(m - i0) : SG_MR;
            const float *r[SG_MR];
            for (int i = 0; i < SG_MR; i++)
                r[i] = a + (i0 + (i < mr ? i : mr - 1)) * ars;
            if (w > 16)
                sg_tile(kc, r, acs, panel, 2, mr, m0, m1, c + i0 * ldc + j0, ldc, alpha, add, ep,
                        i0);
            else
                sg_tile(kc, r, acs, panel, 1, mr, m0, m1, c + i0 * ldc + j0, ldc, alpha, add, ep,
                        i0);
        }
    }
}

bool vq__sgemm512(bool ta, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                  int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
                  const vq__sg_epilogue *ep)
{
    float *bp = sg_buffer();
    if (!bp)
        return false;
    int64_t ars = ta ? 1 : lda, acs = ta ? lda : 1;
    for (int64_t jc = 0; jc < n; jc += SG_NC) {
        int64_t nc = n - jc < SG_NC ? n - jc : SG_NC;
        for (int64_t pc = 0; pc < k; pc += SG_KC) {
            int64_t kc = k - pc < SG_KC ? k - pc : SG_KC;
            sg_pack(kc, nc, b + pc * ldb + jc, ldb, bp);
            sg_block(m, nc, kc, a + pc * acs, ars, acs, bp, kc * SG_NR, c + jc, ldc, alpha,
                     pc > 0 || beta != 0, pc + kc == k ? ep : NULL);
        }
    }
    return true;
}

void vq__sgemm512_panels(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                         const float *bp, float *c, int64_t ldc, const vq__sg_epilogue *ep)
{
    /* the blocks of vq__sgemm512, so the same sums: columns SG_NC at a
     * time, k SG_KC at a time (row pc of each panel) */
    for (int64_t jc = 0; jc < n; jc += SG_NC) {
        int64_t nc = n - jc < SG_NC ? n - jc : SG_NC;
        for (int64_t pc = 0; pc < k; pc += SG_KC) {
            int64_t kc = k - pc < SG_KC ? k - pc : SG_KC;
            sg_block(m, nc, kc, a + pc, lda, 1, bp + jc / SG_NR * k * SG_NR + pc * SG_NR, k * SG_NR,
                     c + jc, ldc, 1, pc > 0, pc + kc == k ? ep : NULL);
        }
    }
}

__attribute__((target("avx512f"))) void vq__sgemm512_dots(int64_t m, int64_t n, int64_t k,
                                                          float alpha, const float *a, int64_t lda,
                                                          const float *b, int64_t ldb, float beta,
                                                          float *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++) {
        const float *x = a + i * lda;
        for (int64_t j = 0; j < n; j++) {
            const float *y = b + j * ldb;
            __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
            int64_t p = 0;
            for (; p + 32 <= k; p += 32) {
                s0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + p), _mm512_loadu_ps(y + p), s0);
                s1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + p + 16), _mm512_loadu_ps(y + p + 16), s1);
            }
            for (; p < k; p += 16) {
                __mmask16 mk = vq__sg_lanes(k - p);
                s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, x + p),
                                     _mm512_maskz_loadu_ps(mk, y + p), s0);
            }
            float d = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
            c[i * ldc + j] = beta != 0 ? alpha * d + c[i * ldc + j] : alpha * d;
        }
    }
}

#else

void vq__sgemm512_dots(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                       const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float d = 0;
            for (int64_t p = 0; p < k; p++)
                d += a[i * lda + p] * b[j * ldb + p];
            c[i * ldc + j] = beta != 0 ? alpha * d + c[i * ldc + j] : alpha * d;
        }
}

/* Without AVX-512 nothing calls it (vq__sgemm512_ok() is false), but it
 * still computes what it says, by plain sums over k in order. */
void vq__sgemm512_panels(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                         const float *bp, float *c, int64_t ldc, const vq__sg_epilogue *ep)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0;
            for (int64_t p = 0; p < k; p++)
                s += a[i * lda + p] * bp[j / SG_NR * k * SG_NR + p * SG_NR + j % SG_NR];
            if (ep && ep->bias)
                s += ep->bias[i];
            if (ep && ep->clip) {
                s = s <= ep->lo ? ep->lo : s;
                s = s >= ep->hi ? ep->hi : s;
            }
            c[i * ldc + j] = s;
        }
}

bool vq__sgemm512(bool ta, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                  int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
                  const vq__sg_epilogue *ep)
{
    (void)ta, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b, (void)ldb;
    (void)beta, (void)c, (void)ldc, (void)ep;
    return false;
}

#endif
