/* The bulk 16-bit float conversions (half.h): one portable loop over
 * tensor/half.c's exact functions, and vector loops that use the CPU's
 * conversion instructions, each with the portable loop for its tail.
 *
 * vcvtne2ps2bf16 treats subnormal inputs as zero (AVX512-BF16 always
 * does), so its loop redoes those lanes by integer rounding of the f32
 * pattern: adding 0x7fff plus the kept bit's parity and dropping the low
 * 16 bits is round-to-nearest-even, exact for every finite f32 (a carry
 * into the exponent is the correct rounding up to the next binade, and
 * from the largest binade to infinity). */
#include "half.h"

#include "tensor_services.h"

#include <stdbool.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

static void f32_to_f16_portable(const float *x, uint16_t *o, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        o[i] = vq_f32_to_f16(x[i]);
}

static void f16_to_f32_portable(const uint16_t *x, float *o, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        o[i] = vq_f16_to_f32(x[i]);
}

static void f32_to_bf16_portable(const float *x, uint16_t *o, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        o[i] = vq_f32_to_bf16(x[i]);
}

static void bf16_to_f32_portable(const uint16_t *x, float *o, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        o[i] = vq_bf16_to_f32(x[i]);
}

static const struct vq__half_conv portable = {"portable", f32_to_f16_portable, f16_to_f32_portable,
                                              f32_to_bf16_portable, bf16_to_f32_portable};

#if HAVE_X86
__attribute__((target("avx2,f16c"))) static void f32_to_f16_f16c(const float *x, uint16_t *o,
                                                                 int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(o + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    f32_to_f16_portable(x + i, o + i, n - i);
}

__attribute__((target("avx2,f16c"))) static void f16_to_f32_f16c(const uint16_t *x, float *o,
                                                                 int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(o + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    f16_to_f32_portable(x + i, o + i, n - i);
}

/* bf16 to f32 is a shift; NaNs get the quiet bit as vq_bf16_to_f32 sets it */
__attribute__((target("avx2"))) static void bf16_to_f32_avx2(const uint16_t *x, float *o, int64_t n)
{
    int64_t i = 0;
    const __m256i expo = _mm256_set1_epi32(0x7f800000), quiet = _mm256_set1_epi32(0x400000);
    const __m256i abs = _mm256_set1_epi32(0x7fffffff);
    for (; i + 8 <= n; i += 8) {
        __m256i b =
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(x + i))), 16);
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, abs), expo);
        b = _mm256_or_si256(b, _mm256_and_si256(nan, quiet));
        _mm256_storeu_ps(o + i, _mm256_castsi256_ps(b));
    }
    bf16_to_f32_portable(x + i, o + i, n - i);
}

/* 16 lanes of f32 patterns b rounded to bf16 by integer arithmetic (the
 * file's head), NaNs quiet with the top of their payload */
__attribute__((target("avx512f,avx512bw"))) static inline __m256i bf16_round_int(__m512i b)
{
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
    __m512i r =
        _mm512_add_epi32(b,
                         _mm512_add_epi32(bias, _mm512_and_si512(_mm512_srli_epi32(b, 16), one)));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_or_epi32(r, nan, b, _mm512_set1_epi32(0x400000)); /* no rounding for NaN */
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void
f32_to_bf16_avx512(const float *x, uint16_t *o, int64_t n)
{
    int64_t i = 0;
    const __m512i expo = _mm512_set1_epi32(0x7f800000), zero = _mm512_setzero_si512();
    for (; i + 32 <= n; i += 32) {
        __m512 lo = _mm512_loadu_ps(x + i), hi = _mm512_loadu_ps(x + i + 16);
        __m512i r = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
        /* lanes with a zero exponent field and a non-zero fraction:
         * subnormals, which the instruction flushed */
        __m512i blo = _mm512_castps_si512(lo), bhi = _mm512_castps_si512(hi);
        __mmask16 slo = _mm512_cmpeq_epi32_mask(_mm512_and_si512(blo, expo), zero) &
                        _mm512_test_epi32_mask(blo, _mm512_set1_epi32(0x7fffff));
        __mmask16 shi = _mm512_cmpeq_epi32_mask(_mm512_and_si512(bhi, expo), zero) &
                        _mm512_test_epi32_mask(bhi, _mm512_set1_epi32(0x7fffff));
        if (slo | shi) {
            __m256i flo = bf16_round_int(blo), fhi = bf16_round_int(bhi);
            __m512i fixed = _mm512_inserti64x4(_mm512_castsi256_si512(flo), fhi, 1);
            r = _mm512_mask_mov_epi16(r, (__mmask32)slo | (__mmask32)shi << 16, fixed);
        }
        _mm512_storeu_si512(o + i, r);
    }
    f32_to_bf16_portable(x + i, o + i, n - i);
}

/* AVX-512 without BF16: the integer rounding for every lane */
__attribute__((target("avx512f,avx512bw"))) static void
f32_to_bf16_avx512_int(const float *x, uint16_t *o, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(o + i), bf16_round_int(_mm512_loadu_si512(x + i)));
    f32_to_bf16_portable(x + i, o + i, n - i);
}

static const struct vq__half_conv f16c = {"f16c", f32_to_f16_f16c, f16_to_f32_f16c,
                                          f32_to_bf16_portable, bf16_to_f32_avx2};
static const struct vq__half_conv avx512_int = {"avx512", f32_to_f16_f16c, f16_to_f32_f16c,
                                                f32_to_bf16_avx512_int, bf16_to_f32_avx2};
static const struct vq__half_conv avx512bf16 = {"avx512bf16", f32_to_f16_f16c, f16_to_f32_f16c,
                                                f32_to_bf16_avx512, bf16_to_f32_avx2};
#endif

#if HAVE_X86
/* F16C (CPUID 1: ECX bit 29) and AVX512-BF16 (CPUID 7.1: EAX bit 5) read
 * from CPUID itself: clang 14's __builtin_cpu_supports knows neither
 * name. The OS's saving of the vector state is what vq__isa's level
 * already vouches for (AVX2 or AVX-512 are on only where it does). */
static bool cpu_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}

static bool cpu_avx512bf16(void)
{
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a >> 5 & 1);
}
#endif

const struct vq__half_conv *vq__half_at(enum vq__isa_level l)
{
#if HAVE_X86
    __builtin_cpu_init();
    if (l >= VQ__ISA_AVX512 && __builtin_cpu_supports("avx512bw") && cpu_f16c())
        return cpu_avx512bf16() ? &avx512bf16 : &avx512_int;
    if (l >= VQ__ISA_AVX2 && cpu_f16c())
        return &f16c;
#else
    (void)l;
#endif
    return &portable;
}

const struct vq__half_conv *vq__half(void)
{
    return vq__half_at(vq__isa());
}
