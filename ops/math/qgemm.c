/* The 8-bit integer matrix product (qgemm.h): C = (A - za)(B - zb) in i32.
 *
 * Every path first brings the operands to one form, A unsigned and B
 * signed, which is what AVX-512 VNNI's vpdpbusd multiplies (u8 x i8, four
 * products summed into an i32 lane, without saturation): an i8 A becomes
 * u8 by A + 128 (flip the top bit) with its zero point raised by 128, a u8
 * B becomes i8 by B - 128 with its zero point lowered by 128; (A - za) and
 * (B - zb) stay the same numbers. The product then runs on the raw bytes,
 * S = A B, and the zero points come in at the store, exactly, from the
 * rows' sums of A (ra) and the columns' sums of B (cb):
 *
 *   C[i, j] = S[i, j] - zb[j] (ra[i] - k za[i]) - za[i] cb[j]
 *
 * all in i32 arithmetic that wraps, the same integers as the plain loop.
 *
 * The vector paths pack A (rows padded to a multiple of the tile's height,
 * k to a multiple of the group the instruction sums) and B (panels of one
 * register's columns, the group's k values of a column side by side) with
 * zeros, so the tiles need no edge cases but the masked store:
 * - AVX-512 VNNI: tiles of 6 rows x 32 columns (12 zmm accumulators), one
 *   vpdpbusd per 4 k of 16 columns;
 * - AVX2: A and B widened to i16 and vpmaddwd (2 k of 8 columns per
 *   instruction) into tiles of 6 x 16: exact, where vpmaddubsw's i16 sum
 *   of two u8 x i8 products would saturate (255 * 127 * 2 > 32767).
 * The portable path is the defining loop. Panels are shared among the
 * pool's idle workers (vq__parallel_for) once both are packed. */
#include "qgemm.h"

#include "engine_services.h" /* vq__parallel_for */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define HAVE_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define HAVE_X86 0
#endif

/* ---- the defining loop (portable) ---- */

/* GCC's -O2 vectorizes only loops that need no scalar remainder; the
 * rows here are worth the remainder. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("vect-cost-model=cheap")))
#endif
static int
qgemm_portable(const vq__qgemm_args *g)
{
    int64_t m = g->m, n = g->n, k = g->k;
    uint32_t *acc = malloc((size_t)(n ? n : 1) * 2 * sizeof *acc);
    if (!acc)
        return VQ_ENOMEM;
    uint32_t *zbv = acc + n;
    for (int64_t j = 0; j < n; j++)
        zbv[j] = (uint32_t)g->zb[j * g->zb_step];
    for (int64_t i = 0; i < m; i++) {
        memset(acc, 0, (size_t)n * sizeof *acc);
        const uint8_t *arow = (const uint8_t *)g->a + i * g->lda;
        uint32_t za = (uint32_t)g->za[i * g->za_step];
        for (int64_t p = 0; p < k; p++) {
            uint32_t a = (g->a_signed ? (uint32_t)(int32_t)(int8_t)arow[p] : arow[p]) - za;
            const uint8_t *brow = (const uint8_t *)g->b + p * g->ldb;
            if (g->b_signed)
                for (int64_t j = 0; j < n; j++)
                    acc[j] += a * ((uint32_t)(int32_t)(int8_t)brow[j] - zbv[j]);
            else
                for (int64_t j = 0; j < n; j++)
                    acc[j] += a * ((uint32_t)brow[j] - zbv[j]);
        }
        for (int64_t j = 0; j < n; j++)
            g->c[i * g->ldc + j] = (int32_t)acc[j];
    }
    free(acc);
    return 0;
}

#if HAVE_X86

/* ---- what the vector paths share: the packed form ---- */

struct packed {
    const vq__qgemm_args *g;
    int64_t mp, kg, np; /* rows padded, k padded to the group, panels (even) */
    void *a, *b;        /* packed A (rows of kg), B (panels of kg x width) */
    int32_t *ra, *za;   /* per padded row: sum of A's row, A's zero point (unsigned form) */
    int32_t *cb, *zb;   /* per padded column: sum of B's column, its zero point (signed form) */
    void *block;
};

static int64_t round_up(int64_t v, int64_t to)
{
    return (v + to - 1) / to * to;
}

/* One allocation for everything: A (mp x kg elements of es bytes), B (np
 * panels of kg x width), the four vectors. */
static int packed_alloc(struct packed *pk, const vq__qgemm_args *g, int mr, int group, int width,
                        size_t es)
{
    pk->g = g;
    pk->mp = round_up(g->m, mr);
    pk->kg = round_up(g->k, group);
    pk->np = round_up((g->n + width - 1) / width, 2);
    size_t asz = (size_t)round_up(pk->mp * pk->kg * (int64_t)es, 64);
    size_t bsz = (size_t)round_up(pk->np * pk->kg * width * (int64_t)es, 64);
    size_t cols = (size_t)(pk->np * width), rows = (size_t)pk->mp;
    size_t vsz = (size_t)round_up((int64_t)(2 * rows + 2 * cols) * 4, 64);
    pk->block = aligned_alloc(64, asz + bsz + vsz);
    if (!pk->block)
        return VQ_ENOMEM;
    char *p = pk->block;
    pk->a = p;
    pk->b = p + asz;
    pk->ra = (int32_t *)(p + asz + bsz);
    pk->za = pk->ra + rows;
    pk->cb = pk->za + rows;
    pk->zb = pk->cb + cols;
    memset(pk->ra, 0, vsz);
    for (int64_t i = 0; i < g->m; i++)
        pk->za[i] = g->za[i * g->za_step] + (g->a_signed ? 128 : 0);
    for (int64_t j = 0; j < g->n; j++)
        pk->zb[j] = g->zb[j * g->zb_step] - (g->b_signed ? 0 : 128);
    return 0;
}

/* A's row i in the unsigned form into dst (kg bytes, zeros past k), its
 * sum into ra[i]: 64 bytes at a time, summed by vpsadbw. */
__attribute__((target("avx512f,avx512bw"))) static void pack_a_row_u8(const struct packed *pk,
                                                                      int64_t i, uint8_t *dst)
{
    const vq__qgemm_args *g = pk->g;
    const uint8_t *src = (const uint8_t *)g->a + i * g->lda;
    __m512i flip = _mm512_set1_epi8(g->a_signed ? (char)0x80 : 0), sum = _mm512_setzero_si512();
    for (int64_t p = 0; p < pk->kg; p += 64) {
        int64_t left = g->k - p;
        __mmask64 m = left >= 64 ? ~(__mmask64)0 : left <= 0 ? 0 : ((__mmask64)1 << left) - 1;
        __m512i v =
            _mm512_maskz_mov_epi8(m, _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, src + p), flip));
        int64_t room = pk->kg - p;
        __mmask64 w = room >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << room) - 1;
        _mm512_mask_storeu_epi8(dst + p, w, v);
        sum = _mm512_add_epi64(sum, _mm512_sad_epu8(v, _mm512_setzero_si512()));
    }
    pk->ra[i] = (int32_t)(uint32_t)_mm512_reduce_add_epi64(sum);
}

/* B's element (p, j) in the signed form; 0 outside B (read in place: the
 * AVX2 path, which gets B whole). */
static inline int32_t b_at(const vq__qgemm_args *g, int64_t p, int64_t j)
{
    if (p >= g->k || j >= g->n)
        return 0;
    uint8_t v = ((const uint8_t *)g->b)[p * g->ldb + j];
    return (int8_t)(g->b_signed ? v : v ^ 0x80);
}

/* The store of one tile row's register of 'width' columns from j0:
 * the zero points' terms, then only the columns of C. */
#define QG_TERM(i) ((int32_t)((uint32_t)pk->ra[i] - (uint32_t)pk->g->k * (uint32_t)pk->za[i]))

/* ---- AVX-512 VNNI: 6 x 32 tiles ---- */

#define VN_MR 6

/* B's rows p .. p + 3 (rows[t]: row p + t's bytes, NULL past k) into
 * every panel's group of 4 k at p, and the columns' sums: 1 x each byte,
 * four to a lane, exact. */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void
vnni_pack_rows(const struct packed *pk, int64_t p, const uint8_t *const rows[4])
{
    const vq__qgemm_args *g = pk->g;
    bool all = rows[3] != NULL;
    __m128i flip = _mm_set1_epi8(g->b_signed ? 0 : (char)0x80);
    __m512i ones = _mm512_set1_epi8(1);
    int64_t q = 0;
    if (all) {
        /* 64 columns (4 panels) at a time: the bytes interleaved within
         * 128-bit lanes, then the lanes transposed so that each panel's
         * 64 bytes are together */
        __m512i flip4 = _mm512_set1_epi8(g->b_signed ? 0 : (char)0x80);
        for (; (q + 4) * 16 <= g->n; q += 4) {
            int64_t j0 = q * 16;
            __m512i r0 = _mm512_xor_si512(_mm512_loadu_si512(rows[0] + j0), flip4);
            __m512i r1 = _mm512_xor_si512(_mm512_loadu_si512(rows[1] + j0), flip4);
            __m512i r2 = _mm512_xor_si512(_mm512_loadu_si512(rows[2] + j0), flip4);
            __m512i r3 = _mm512_xor_si512(_mm512_loadu_si512(rows[3] + j0), flip4);
            __m512i t0 = _mm512_unpacklo_epi8(r0, r1), t1 = _mm512_unpackhi_epi8(r0, r1);
            __m512i t2 = _mm512_unpacklo_epi8(r2, r3), t3 = _mm512_unpackhi_epi8(r2, r3);
            __m512i u0 = _mm512_unpacklo_epi16(t0, t2), u1 = _mm512_unpackhi_epi16(t0, t2);
            __m512i u2 = _mm512_unpacklo_epi16(t1, t3), u3 = _mm512_unpackhi_epi16(t1, t3);
            __m512i a = _mm512_shuffle_i64x2(u0, u1, 0x44), b = _mm512_shuffle_i64x2(u0, u1, 0xee);
            __m512i c = _mm512_shuffle_i64x2(u2, u3, 0x44), d = _mm512_shuffle_i64x2(u2, u3, 0xee);
            __m512i panel[4] = {_mm512_shuffle_i64x2(a, c, 0x88), _mm512_shuffle_i64x2(a, c, 0xdd),
                                _mm512_shuffle_i64x2(b, d, 0x88), _mm512_shuffle_i64x2(b, d, 0xdd)};
            for (int l = 0; l < 4; l++) {
                _mm512_store_si512((int8_t *)pk->b + ((q + l) * pk->kg + p) * 16, panel[l]);
                __m512i sum = _mm512_loadu_si512(pk->cb + j0 + 16 * l);
                _mm512_storeu_si512(pk->cb + j0 + 16 * l, _mm512_dpbusd_epi32(sum, ones, panel[l]));
            }
        }
    }
    for (; q < pk->np; q++) {
        int8_t *dst = (int8_t *)pk->b + (q * pk->kg + p) * 16;
        int64_t j0 = q * 16;
        if (all && j0 + 16 <= g->n) {
            __m128i r0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(rows[0] + j0)), flip);
            __m128i r1 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(rows[1] + j0)), flip);
            __m128i r2 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(rows[2] + j0)), flip);
            __m128i r3 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)(rows[3] + j0)), flip);
            __m128i t0 = _mm_unpacklo_epi8(r0, r1), t1 = _mm_unpackhi_epi8(r0, r1);
            __m128i t2 = _mm_unpacklo_epi8(r2, r3), t3 = _mm_unpackhi_epi8(r2, r3);
            _mm_store_si128((__m128i *)dst, _mm_unpacklo_epi16(t0, t2));
            _mm_store_si128((__m128i *)(dst + 16), _mm_unpackhi_epi16(t0, t2));
            _mm_store_si128((__m128i *)(dst + 32), _mm_unpacklo_epi16(t1, t3));
            _mm_store_si128((__m128i *)(dst + 48), _mm_unpackhi_epi16(t1, t3));
        } else {
            uint8_t fl = g->b_signed ? 0 : 0x80;
            for (int c = 0; c < 16; c++)
                for (int t = 0; t < 4; t++)
                    dst[c * 4 + t] = rows[t] && j0 + c < g->n ? (int8_t)(rows[t][j0 + c] ^ fl) : 0;
        }
        __m512i sum = _mm512_loadu_si512(pk->cb + j0);
        _mm512_storeu_si512(pk->cb + j0, _mm512_dpbusd_epi32(sum, ones, _mm512_load_si512(dst)));
    }
}

/* All of B, 4 rows at a time: read in place, or written by g->b_rows into
 * a strip of 4 rows (which stays in cache, where a whole im2col matrix
 * would not). */
static int vnni_pack_b(const struct packed *pk)
{
    const vq__qgemm_args *g = pk->g;
    uint8_t *strip = g->b_rows ? malloc((size_t)(4 * g->n)) : NULL;
    if (g->b_rows && !strip)
        return VQ_ENOMEM;
    for (int64_t p = 0; p < pk->kg; p += 4) {
        int64_t nv = g->k - p < 4 ? g->k - p : 4;
        const uint8_t *rows[4] = {NULL, NULL, NULL, NULL};
        if (strip)
            g->b_rows(g->b_ctx, p, nv, strip, g->n);
        for (int64_t t = 0; t < nv; t++)
            rows[t] = strip      ? strip + t * g->n
                      : g->b_row ? g->b_row(g->b_ctx, p + t)
                                 : (const uint8_t *)g->b + (p + t) * g->ldb;
        vnni_pack_rows(pk, p, rows);
    }
    free(strip);
    return 0;
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void
vnni_store(const struct packed *pk, __m512i acc, int64_t i, int64_t j0)
{
    const vq__qgemm_args *g = pk->g;
    if (j0 >= g->n)
        return;
    __m512i zb = _mm512_loadu_si512(pk->zb + j0), cb = _mm512_loadu_si512(pk->cb + j0);
    acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(zb, _mm512_set1_epi32(QG_TERM(i))));
    acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(cb, _mm512_set1_epi32(pk->za[i])));
    int64_t left = g->n - j0;
    __mmask16 mask = left >= 16 ? 0xffff : (__mmask16)((1u << left) - 1);
    _mm512_mask_storeu_epi32(g->c + i * g->ldc + j0, mask, acc);
}

/* hot path: no malloc, no global lock */
__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void
vnni_tile(const struct packed *pk, int64_t i0, int64_t q)
{
    int64_t kg = pk->kg;
    const uint8_t *a = (const uint8_t *)pk->a + i0 * kg;
    const int8_t *b0 = (const int8_t *)pk->b + q * kg * 16, *b1 = b0 + kg * 16;
    __m512i c00 = _mm512_setzero_si512(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
            c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t p = 0; p < kg; p += 4) {
        __m512i v0 = _mm512_load_si512(b0 + p * 16), v1 = _mm512_load_si512(b1 + p * 16);
        int32_t w;
#define VN_ROW(r)                                       \
    memcpy(&w, a + (r)*kg + p, 4);                      \
    {                                                   \
        __m512i ab = _mm512_set1_epi32(w);              \
        c##r##0 = _mm512_dpbusd_epi32(c##r##0, ab, v0); \
        c##r##1 = _mm512_dpbusd_epi32(c##r##1, ab, v1); \
    }
        VN_ROW(0) VN_ROW(1) VN_ROW(2) VN_ROW(3) VN_ROW(4) VN_ROW(5)
#undef VN_ROW
    }
    __m512i acc[VN_MR][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                             {c30, c31}, {c40, c41}, {c50, c51}};
    for (int r = 0; r < VN_MR && i0 + r < pk->g->m; r++) {
        vnni_store(pk, acc[r][0], i0 + r, q * 16);
        vnni_store(pk, acc[r][1], i0 + r, q * 16 + 16);
    }
}

static int vnni_chunk(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const struct packed *pk = arg;
    for (int64_t pair = lo; pair < hi; pair++)
        for (int64_t i0 = 0; i0 < pk->g->m; i0 += VN_MR)
            vnni_tile(pk, i0, 2 * pair);
    return 0;
}

static int qgemm_vnni(const vq__qgemm_args *g)
{
    struct packed pk;
    if (packed_alloc(&pk, g, VN_MR, 4, 16, 1) < 0)
        return VQ_ENOMEM;
    for (int64_t i = 0; i < g->m; i++)
        pack_a_row_u8(&pk, i, (uint8_t *)pk.a + i * pk.kg);
    memset((uint8_t *)pk.a + g->m * pk.kg, 0, (size_t)((pk.mp - g->m) * pk.kg));
    int rc = vnni_pack_b(&pk);
    /* two panels (32 columns) per pair, four pairs a chunk */
    if (rc == 0)
        rc = vq__parallel_for(pk.np / 2, 4, vnni_chunk, &pk);
    free(pk.block);
    return rc;
}

/* ---- AVX2: operands widened to i16, 4 x 16 tiles of vpmaddwd ---- */

#define AV_MR 6

/* A widened to i16 (unsigned form), rows of kg, with the rows' sums. */
static void avx2_pack_a(const struct packed *pk)
{
    const vq__qgemm_args *g = pk->g;
    int16_t *a = pk->a;
    uint8_t flip = g->a_signed ? 0x80 : 0;
    memset(a, 0, (size_t)(pk->mp * pk->kg) * sizeof *a);
    for (int64_t i = 0; i < g->m; i++) {
        const uint8_t *src = (const uint8_t *)g->a + i * g->lda;
        int16_t *dst = a + i * pk->kg;
        uint32_t s = 0;
        for (int64_t p = 0; p < g->k; p++) {
            dst[p] = (int16_t)(uint8_t)(src[p] ^ flip);
            s += (uint32_t)dst[p];
        }
        pk->ra[i] = (int32_t)s;
    }
}

/* B's panel q widened to i16 (signed form): per 2 k, 8 columns of k
 * pairs; the columns' sums from vpmaddwd by ones. */
__attribute__((target("avx2"))) static void avx2_pack_b(const struct packed *pk, int64_t q)
{
    const vq__qgemm_args *g = pk->g;
    int16_t *dst = (int16_t *)pk->b + q * pk->kg * 8;
    int64_t j0 = q * 8;
    bool full = j0 + 8 <= g->n;
    __m128i flip = _mm_set1_epi8(g->b_signed ? 0 : (char)0x80);
    __m256i sum = _mm256_setzero_si256(), ones = _mm256_set1_epi16(1);
    for (int64_t p = 0; p < pk->kg; p += 2, dst += 16) {
        __m256i v;
        if (full && p + 2 <= g->k) {
            const uint8_t *s = (const uint8_t *)g->b + p * g->ldb + j0;
            __m128i r0, r1;
            int64_t w0, w1;
            memcpy(&w0, s, 8);
            memcpy(&w1, s + g->ldb, 8);
            r0 = _mm_cvtepi8_epi16(_mm_xor_si128(_mm_cvtsi64_si128(w0), flip));
            r1 = _mm_cvtepi8_epi16(_mm_xor_si128(_mm_cvtsi64_si128(w1), flip));
            v = _mm256_set_m128i(_mm_unpackhi_epi16(r0, r1), _mm_unpacklo_epi16(r0, r1));
        } else {
            int16_t t[16];
            for (int c = 0; c < 8; c++)
                for (int u = 0; u < 2; u++)
                    t[c * 2 + u] = (int16_t)b_at(g, p + u, j0 + c);
            v = _mm256_loadu_si256((const __m256i *)t);
        }
        _mm256_store_si256((__m256i *)dst, v);
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(v, ones));
    }
    _mm256_storeu_si256((__m256i *)(pk->cb + j0), sum);
}

__attribute__((target("avx2"))) static void avx2_store(const struct packed *pk, __m256i acc,
                                                       int64_t i, int64_t j0)
{
    const vq__qgemm_args *g = pk->g;
    if (j0 >= g->n)
        return;
    __m256i zb = _mm256_loadu_si256((const __m256i *)(pk->zb + j0));
    __m256i cb = _mm256_loadu_si256((const __m256i *)(pk->cb + j0));
    acc = _mm256_sub_epi32(acc, _mm256_mullo_epi32(zb, _mm256_set1_epi32(QG_TERM(i))));
    acc = _mm256_sub_epi32(acc, _mm256_mullo_epi32(cb, _mm256_set1_epi32(pk->za[i])));
    int32_t *dst = g->c + i * g->ldc + j0;
    if (g->n - j0 >= 8) {
        _mm256_storeu_si256((__m256i *)dst, acc);
        return;
    }
    int32_t tmp[8];
    _mm256_storeu_si256((__m256i *)tmp, acc);
    memcpy(dst, tmp, (size_t)(g->n - j0) * sizeof *dst);
}

/* hot path: no malloc, no global lock */
__attribute__((target("avx2"))) static void avx2_tile(const struct packed *pk, int64_t i0,
                                                      int64_t q)
{
    int64_t kg = pk->kg;
    const int16_t *a = (const int16_t *)pk->a + i0 * kg;
    const int16_t *b0 = (const int16_t *)pk->b + q * kg * 8, *b1 = b0 + kg * 8;
    __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
            c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    for (int64_t p = 0; p < kg; p += 2) {
        __m256i v0 = _mm256_load_si256((const __m256i *)(b0 + p * 8));
        __m256i v1 = _mm256_load_si256((const __m256i *)(b1 + p * 8));
        int32_t w;
#define AV_ROW(r)                                                       \
    memcpy(&w, a + (r)*kg + p, 4);                                      \
    {                                                                   \
        __m256i ab = _mm256_set1_epi32(w);                              \
        c##r##0 = _mm256_add_epi32(c##r##0, _mm256_madd_epi16(ab, v0)); \
        c##r##1 = _mm256_add_epi32(c##r##1, _mm256_madd_epi16(ab, v1)); \
    }
        AV_ROW(0) AV_ROW(1) AV_ROW(2) AV_ROW(3) AV_ROW(4) AV_ROW(5)
#undef AV_ROW
    }
    __m256i acc[AV_MR][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                             {c30, c31}, {c40, c41}, {c50, c51}};
    for (int r = 0; r < AV_MR && i0 + r < pk->g->m; r++) {
        avx2_store(pk, acc[r][0], i0 + r, q * 8);
        avx2_store(pk, acc[r][1], i0 + r, q * 8 + 8);
    }
}

static int avx2_chunk(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const struct packed *pk = arg;
    for (int64_t pair = lo; pair < hi; pair++)
        for (int64_t i0 = 0; i0 < pk->g->m; i0 += AV_MR)
            avx2_tile(pk, i0, 2 * pair);
    return 0;
}

static int qgemm_avx2(const vq__qgemm_args *g)
{
    struct packed pk;
    if (packed_alloc(&pk, g, AV_MR, 2, 8, 2) < 0)
        return VQ_ENOMEM;
    avx2_pack_a(&pk);
    for (int64_t q = 0; q < pk.np; q++)
        avx2_pack_b(&pk, q);
    int rc = vq__parallel_for(pk.np / 2, 8, avx2_chunk, &pk);
    free(pk.block);
    return rc;
}

/* AVX-512 VNNI (CPUID 7: ECX bit 11) with BW (EBX bit 30), read from
 * CPUID as half.c reads its features: the OS's saving of the zmm state is
 * what vq__isa's AVX-512 level vouches for. */
static bool vnni;
static pthread_once_t vnni_once = PTHREAD_ONCE_INIT;

static void vnni_read(void)
{
    unsigned a, b, c, d;
    vnni = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c >> 11 & 1) && (b >> 30 & 1);
}

/* Read once: CPUID traps to the hypervisor in a virtual machine, which
 * costs more than a small product. */
static bool cpu_vnni(void)
{
    pthread_once(&vnni_once, vnni_read);
    return vnni;
}
#endif

enum path { PORTABLE, AVX2, VNNI };

static enum path path_at(enum vq__isa_level l)
{
    enum vq__isa_level cpu = vq__isa_cpu();
    if (l > cpu)
        l = cpu;
#if HAVE_X86
    if (l >= VQ__ISA_AVX512 && cpu_vnni())
        return VNNI;
    if (l >= VQ__ISA_AVX2)
        return AVX2;
#endif
    return PORTABLE;
}

static int run_path(enum path path, const vq__qgemm_args *g)
{
    switch (path) {
#if HAVE_X86
    case VNNI: return qgemm_vnni(g);
    case AVX2: return qgemm_avx2(g);
#endif
    default: return qgemm_portable(g);
    }
}

const char *vq__qgemm_path(enum vq__isa_level l)
{
    static const char *const names[] = {"portable", "avx2", "avx512vnni"};
    return names[path_at(l)];
}

int vq__qgemm_at(enum vq__isa_level l, const vq__qgemm_args *g)
{
    if (g->m <= 0 || g->n <= 0)
        return 0;
    if (g->k <= 0) {
        for (int64_t i = 0; i < g->m; i++)
            memset(g->c + i * g->ldc, 0, (size_t)g->n * sizeof *g->c);
        return 0;
    }
    enum path path = path_at(l);
    if (path == VNNI || (!g->b_rows && !g->b_row))
        return run_path(path, g);
    /* the other paths read B whole: its rows written out first */
    uint8_t *b = malloc((size_t)(g->k * g->n));
    if (!b)
        return VQ_ENOMEM;
    if (g->b_rows)
        g->b_rows(g->b_ctx, 0, g->k, b, g->n);
    else
        for (int64_t p = 0; p < g->k; p++)
            memcpy(b + p * g->n, g->b_row(g->b_ctx, p), (size_t)g->n);
    vq__qgemm_args whole = *g;
    whole.b = b;
    whole.ldb = g->n;
    whole.b_rows = NULL;
    whole.b_row = NULL;
    int rc = run_path(path, &whole);
    free(b);
    return rc;
}

int vq__qgemm(const vq__qgemm_args *g)
{
    return vq__qgemm_at(vq__isa(), g);
}
