/* The vectorized f32 transcendentals (vmath.h): one body per function,
 * inlined into a portable, an AVX2 and an AVX-512 variant.
 *
 * Each function walks its array in chunks of CHUNK floats through two
 * local buffers: the loop over a chunk has a constant trip count and
 * cannot alias the caller's arrays, so gcc vectorizes it also at -O2 (its
 * cheap cost model refuses a loop that needs an alias check or a scalar
 * epilogue), and an in-place call (x == o) stays vectorized. The copies
 * cost little next to the arithmetic.
 *
 * Every body but sigmoid's and silu's converts the float to double, works
 * in double with a polynomial whose relative error is below 1e-9, and
 * rounds to float once; double has the range for every intermediate (2^k for |k| <= 151),
 * so only the final rounding over- or underflows, as the exact result
 * would. exp_core is the shared piece: y = k ln2 + r, |r| <= ln2/2, with
 * k from rounding by the 1.5 * 2^52 shifter and 2^k from the exponent
 * bits; expm1(r) by its Taylor series to r^9/9! (truncation below 1e-11,
 * relative). */
#include "vmath.h"

#include <math.h>
#include <string.h>

#ifdef __clang__
#pragma clang fp contract(off) /* the levels' bits agree only without FMAs */
#endif

#define CHUNK 256

#define INLINE __attribute__((always_inline)) static inline

INLINE uint32_t f2u(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

INLINE float u2f(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

INLINE uint64_t d2u(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

INLINE double u2d(uint64_t u)
{
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* a where mask is all ones, b where it is zero */
INLINE uint32_t sel32(uint32_t mask, uint32_t a, uint32_t b)
{
    return (a & mask) | (b & ~mask);
}

INLINE uint32_t min32(uint32_t a, uint32_t b)
{
    return a < b ? a : b;
}

#define SIGN 0x80000000u
#define ABS 0x7fffffffu
#define INF 0x7f800000u

/* all ones where the float with these bits is a NaN */
INLINE uint32_t nan_mask(uint32_t xb)
{
    return 0u - (uint32_t)((xb & ABS) > INF);
}

/* expm1(r) for |r| <= ln2/2, by its Taylor series to r^9/9! (relative
 * truncation below 1e-11), nested from the highest term. */
INLINE double expm1_taylor(double r)
{
    double p = 1. / 40320 + r * (1. / 362880);
    p = 1. / 5040 + r * p;
    p = 1. / 720 + r * p;
    p = 1. / 120 + r * p;
    p = 1. / 24 + r * p;
    p = 1. / 6 + r * p;
    p = 1. / 2 + r * p;
    p = 1 + r * p;
    return r * p;
}

/* exp(y) for |y| <= 700 (the result stays a normal double). */
INLINE double exp_core(double y)
{
    const double shifter = 0x1.8p52, ln2_hi = 0x1.62e42fee00000p-1, ln2_lo = 0x1.a39ef35793c76p-33;
    const uint64_t shifter_bits = 0x4338000000000000u;
    double t = y * 0x1.71547652b82fep0 + shifter; /* y / ln2, rounded, + shifter */
    double k = t - shifter;
    double r = (y - k * ln2_hi) - k * ln2_lo;
    double p = expm1_taylor(r);
    double s = u2d((d2u(t) - shifter_bits + 1023) << 52); /* 2^k */
    return s * p + s;
}

/* exp: x clamped to [-104, 89] (exp is 0 below -103.98 and +inf above
 * 88.73 in float), so that exp_core's k stays small. */
INLINE float exp_one(float xf)
{
    uint32_t xb = f2u(xf), ab = xb & ABS;
    uint32_t lim = (xb & SIGN) ? 0x42d00000u : 0x42b20000u; /* 104, 89 */
    float xc = u2f(min32(ab, lim) | (xb & SIGN));
    float r = (float)exp_core(xc);
    return u2f(sel32(nan_mask(xb), xb, f2u(r)));
}

/* exp(x - m) with y = x - m in double, clamped to [-104, 89] by its bits
 * (sign and magnitude: the larger magnitude, the larger the bits); NaN
 * for a NaN difference (a NaN x, or inf - inf). */
INLINE float exp_sub_one(float xf, double m)
{
    const uint64_t sign = 0x8000000000000000u, abs = ~sign;
    uint64_t yb = d2u((double)xf - m), ab = yb & abs;
    uint64_t lim = (yb & sign) ? 0x405a000000000000u : 0x4056400000000000u; /* 104, 89 */
    /* signed compares (both below 2^63): AVX2 has those, not unsigned */
    double yc = u2d(((int64_t)ab < (int64_t)lim ? ab : lim) | (yb & sign));
    uint32_t nan = 0u - (uint32_t)((int64_t)ab > (int64_t)0x7ff0000000000000u);
    return u2f(sel32(nan, 0x7fc00000u, f2u((float)exp_core(yc))));
}

/* exp(-a) for a in [0, 120] in float alone, as e * s * 2^-64 with s =
 * 2^(64 - k) (normal for k <= 190), so that sigmoid and silu can form
 * their products before the result's one step into the denormals: a =
 * k ln2 - r by Cody and Waite (ln2's high part has 15 bits, so k ln2_hi is
 * exact for |k| <= 255, and so is k ln2_hi - a: both are multiples of a's
 * ulp, within ln2/2 of each other), e = exp(r) = 1 + r + r^2 q(r) with q
 * by Taylor to r^7/7! (truncation below 6e-9). */
INLINE float expneg_f(float a, float *s)
{
    const float shifter = 0x1.8p23f, ln2_hi = 0x1.62e4p-1f, ln2_lo = 0x1.7f7d1cp-20f;
    float t = a * 0x1.715476p0f + shifter; /* a / ln2, rounded, + shifter */
    float k = t - shifter;
    float r = (k * ln2_hi - a) + k * ln2_lo; /* -a + k ln2, in [-ln2/2, ln2/2] */
    float q = 1.f / 5040 * r + 1.f / 720;
    q = q * r + 1.f / 120;
    q = q * r + 1.f / 24;
    q = q * r + 1.f / 6;
    q = q * r + 0.5f;
    uint32_t kb = f2u(t) - f2u(shifter); /* k, as an integer */
    *s = u2f((uint32_t)(127 + 64 - kb) << 23);
    return 1.f + (r * r * q + r);
}

/* sigmoid = 1 / (1 + t) for x >= 0 and t / (1 + t) below, t = exp(-|x|):
 * t never overflows, and the quotient t / (1 + t) is formed on t 2^64 and
 * scaled once at the end, so it keeps its accuracy into the denormals.
 * Float arithmetic only (a double division per element cost three times
 * the rest); within 2 ulp (tests/test_vmath.c). |x| clamped to 104
 * (sigmoid is 0 below -103.28 and 1 above 17 in float). */
INLINE float sigmoid_one(float xf)
{
    uint32_t xb = f2u(xf), ab = xb & ABS, neg = 0u - (xb >> 31);
    float s, e = expneg_f(u2f(min32(ab, 0x42d00000u)), &s);
    float tp = e * s, den = 1.f + tp * 0x1p-64f;
    float num = u2f(sel32(neg, f2u(tp), f2u(0x1p64f)));
    float r = num / den * 0x1p-64f;
    return u2f(sel32(nan_mask(xb), xb, f2u(r)));
}

/* silu = x / (1 + t) for x >= 0 and x t / (1 + t) below, t as for
 * sigmoid, the negative side on t 2^64 and scaled at the end; |x| clamped
 * to 120 in both factors (x t rounds to -0 below -120); -inf gives NaN,
 * as -inf * 0 does.
 * Within 3 ulp: the product x t adds one rounding to sigmoid's. */
INLINE float silu_one(float xf)
{
    uint32_t xb = f2u(xf), ab = xb & ABS, neg = 0u - (xb >> 31), cb = min32(ab, 0x42f00000u);
    float s, e = expneg_f(u2f(cb), &s);
    float tp = e * s, den = 1.f + tp * 0x1p-64f;
    float num = u2f(sel32(neg, f2u(u2f(cb | SIGN) * tp), xb));
    float r = num / den * u2f(sel32(neg, f2u(0x1p-64f), 0x3f800000u));
    uint32_t ninf = 0u - (uint32_t)(xb == 0xff800000u);
    return u2f(sel32(nan_mask(xb), xb, sel32(ninf, 0xffc00000u, f2u(r))));
}

/* tanh|x| = m / (m + 2), m = expm1(2|x|) = 2^k (p(r) + 1) - 1, |x|
 * clamped to 10 (tanh is 1 from 9.1 on in float); the sign copied back. */
INLINE float tanh_one(float xf)
{
    uint32_t xb = f2u(xf), ab = xb & ABS;
    double y = 2.0 * u2f(min32(ab, 0x41200000u)); /* 10 */
    const double shifter = 0x1.8p52, ln2_hi = 0x1.62e42fee00000p-1, ln2_lo = 0x1.a39ef35793c76p-33;
    const uint64_t shifter_bits = 0x4338000000000000u;
    double t = y * 0x1.71547652b82fep0 + shifter;
    double k = t - shifter;
    double r = (y - k * ln2_hi) - k * ln2_lo;
    double p = expm1_taylor(r);
    double s = u2d((d2u(t) - shifter_bits + 1023) << 52);
    double m = s * p + (s - 1); /* expm1(y), accurate also where y is small */
    float th = (float)(m / (m + 2));
    return u2f(sel32(nan_mask(xb), xb, f2u(th) | (xb & SIGN)));
}

/* erf|x|: below 1, |x| P(2x^2 - 1) with P a degree-7 Chebyshev fit of
 * erf(sqrt(t)) / sqrt(t) on t in [0, 1] (relative error 4e-11); from 1 on,
 * 1 - exp(-x^2) Q((|x| - 2.5) / 1.5) with Q a degree-14 fit of erfcx on
 * [1, 4] (relative 2e-10); |x| clamped to 4 (erf is 1 from 3.92 on in
 * float). Both are computed and one is picked, without a branch; x^2 is
 * exact in double. The sign copied back. */
INLINE float erf_one(float xf)
{
    uint32_t xb = f2u(xf), ab = xb & ABS, cb = min32(ab, 0x40800000u); /* 4 */
    double a = u2f(cb), t = a * a, v = 2 * t - 1;
    double pa = -0x1.445f480000000p-24;
    pa = 0x1.4a9da1c200000p-20 + v * pa;
    pa = -0x1.2638790ec0000p-16 + v * pa;
    pa = 0x1.c827dc5998000p-13 + v * pa;
    pa = -0x1.2b902beb7b700p-9 + v * pa;
    pa = 0x1.4543691d90848p-6 + v * pa;
    pa = -0x1.1fd1629207163p-3 + v * pa;
    pa = 0x1.ee51eb238477fp-1 + v * pa;
    double u = (a - 2.5) * (1 / 1.5);
    double qb = 0x1.d7ef800000000p-20;
    qb = -0x1.5322faaaaaaabp-18 + u * qb;
    qb = 0x1.0134f27777777p-17 + u * qb;
    qb = -0x1.580319edddddfp-16 + u * qb;
    qb = 0x1.09f52b0155553p-14 + u * qb;
    qb = -0x1.58efcd9755555p-13 + u * qb;
    qb = 0x1.ac97c7fc71111p-12 + u * qb;
    qb = -0x1.0766f7894b556p-10 + u * qb;
    qb = 0x1.3b0f81e660bbdp-9 + u * qb;
    qb = -0x1.6d189fa75759ap-8 + u * qb;
    qb = 0x1.99406769df5bcp-7 + u * qb;
    qb = -0x1.ba7456838bb3ep-6 + u * qb;
    qb = 0x1.cba83be340710p-5 + u * qb;
    qb = -0x1.c8ca440df4f46p-4 + u * qb;
    qb = 0x1.afbb3f3b73467p-3 + u * qb;
    uint32_t small = 0u - (uint32_t)(cb < 0x3f800000u); /* |x| < 1 */
    float ra = (float)(a * pa), rb = (float)(1 - exp_core(-t) * qb);
    uint32_t r = sel32(small, f2u(ra), f2u(rb)) | (xb & SIGN);
    return u2f(sel32(nan_mask(xb), xb, r));
}

/* log x = e ln2 + log m with x = m 2^e, m in (sqrt(1/2), sqrt(2)] (a
 * denormal float is a normal double), log m = 2 atanh(s), s = (m - 1) /
 * (m + 1), |s| <= 0.172, by its series to s^13/13 (truncation below
 * 2e-12, relative). +-0 gives -inf, x < 0 NaN, +inf and NaN themselves. */
INLINE float log_one(float xf)
{
    uint32_t xb = f2u(xf);
    uint64_t db = d2u((double)u2f(xb & ABS)), mant = db & 0x000fffffffffffffu;
    /* the mantissa of sqrt(2): above it, halve m and add one to e */
    uint64_t up = (uint64_t)((int64_t)mant > (int64_t)0x6a09e667f3bcdu);
    /* e as a double without an int64 conversion (none in AVX2): the
     * biased exponent in the low bits of 2^52's mantissa */
    double e = u2d(0x4330000000000000u | ((db >> 52) + up)) - (0x1p52 + 1023);
    double m = u2d(mant | (1023 - up) << 52);
    double s = (m - 1) / (m + 1), s2 = s * s;
    double q = 1. / 11 + s2 * (1. / 13);
    q = 1. / 9 + s2 * q;
    q = 1. / 7 + s2 * q;
    q = 1. / 5 + s2 * q;
    q = 1. / 3 + s2 * q;
    double l = 2 * s * (1 + s2 * q);
    float r = (float)(e * 0x1.62e42fefa39efp-1 + l);
    uint32_t zero = 0u - (uint32_t)((xb & ABS) == 0);
    uint32_t neg = 0u - (xb >> 31);
    uint32_t rb = sel32(zero, 0xff800000u, sel32(neg, 0x7fc00000u, f2u(r)));
    uint32_t keep = 0u - (uint32_t)(xb == INF);
    return u2f(sel32(nan_mask(xb) | keep, xb, rb));
}

/* fn over n floats in chunks (see the file head) */
#define CHUNKED(name)                                                \
    INLINE void name##_chunks(const float *x, float *o, int64_t n)   \
    {                                                                \
        float in[CHUNK], out[CHUNK];                                 \
        for (int64_t i = 0; i < n; i += CHUNK) {                     \
            int64_t m = n - i < CHUNK ? n - i : CHUNK;               \
            memcpy(in, x + i, (size_t)m * sizeof *in);               \
            if (m < CHUNK)                                           \
                memset(in + m, 0, (size_t)(CHUNK - m) * sizeof *in); \
            for (int j = 0; j < CHUNK; j++)                          \
                out[j] = name##_one(in[j]);                          \
            memcpy(o + i, out, (size_t)m * sizeof *out);             \
        }                                                            \
    }

CHUNKED(exp)

INLINE void exp_sub_chunks(const float *x, float m, float *o, int64_t n)
{
    float in[CHUNK], out[CHUNK];
    for (int64_t i = 0; i < n; i += CHUNK) {
        int64_t k = n - i < CHUNK ? n - i : CHUNK;
        memcpy(in, x + i, (size_t)k * sizeof *in);
        if (k < CHUNK)
            memset(in + k, 0, (size_t)(CHUNK - k) * sizeof *in);
        for (int j = 0; j < CHUNK; j++)
            out[j] = exp_sub_one(in[j], m);
        memcpy(o + i, out, (size_t)k * sizeof *out);
    }
}
CHUNKED(log)
CHUNKED(erf)
CHUNKED(tanh)
CHUNKED(sigmoid)
CHUNKED(silu)

/* One level's functions, each the chunked body under target ATTR. */
#define LEVEL(lv, ATTR)                                                                          \
    ATTR static void exp_##lv(const float *x, float *o, int64_t n)                               \
    {                                                                                            \
        exp_chunks(x, o, n);                                                                     \
    }                                                                                            \
    ATTR static void log_##lv(const float *x, float *o, int64_t n)                               \
    {                                                                                            \
        log_chunks(x, o, n);                                                                     \
    }                                                                                            \
    ATTR static void erf_##lv(const float *x, float *o, int64_t n)                               \
    {                                                                                            \
        erf_chunks(x, o, n);                                                                     \
    }                                                                                            \
    ATTR static void tanh_##lv(const float *x, float *o, int64_t n)                              \
    {                                                                                            \
        tanh_chunks(x, o, n);                                                                    \
    }                                                                                            \
    ATTR static void sigmoid_##lv(const float *x, float *o, int64_t n)                           \
    {                                                                                            \
        sigmoid_chunks(x, o, n);                                                                 \
    }                                                                                            \
    ATTR static void silu_##lv(const float *x, float *o, int64_t n)                              \
    {                                                                                            \
        silu_chunks(x, o, n);                                                                    \
    }                                                                                            \
    ATTR static void exp_sub_##lv(const float *x, float m, float *o, int64_t n)                  \
    {                                                                                            \
        exp_sub_chunks(x, m, o, n);                                                              \
    }                                                                                            \
    __attribute__((unused)) static const struct vq__vmath vmath_##lv = {exp_##lv,     log_##lv,  \
                                                                        erf_##lv,     tanh_##lv, \
                                                                        sigmoid_##lv, silu_##lv, \
                                                                        exp_sub_##lv};

LEVEL(portable, )

/* The portable level takes exp and log from libm: with SSE2's two doubles
 * a vector (and, for log, no 64-bit compare to vectorize with) their
 * bodies are slower than glibc's expf and logf, which are as accurate. */
static void exp_libm(const float *x, float *o, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        o[i] = expf(x[i]);
}

static void log_libm(const float *x, float *o, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        o[i] = logf(x[i]);
}

static const struct vq__vmath vmath_baseline = {exp_libm,        log_libm,         erf_portable,
                                                tanh_portable,   sigmoid_portable, silu_portable,
                                                exp_sub_portable};

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define VMATH_X86 1
/* FMA is allowed but never used: ISO C mode contracts no a * b + c. gcc
 * would split 512-bit loops in two 256-bit halves for some CPUs; the
 * option keeps the whole width (clang's generic tuning does already). */
#ifdef __clang__
#define TARGET_AVX512 __attribute__((target("avx512f")))
#else
#define TARGET_AVX512 __attribute__((target("avx512f,prefer-vector-width=512")))
#endif
LEVEL(avx2, __attribute__((target("avx2,fma"))))
LEVEL(avx512, TARGET_AVX512)
#endif

const struct vq__vmath *vq__vmath_at(enum vq__isa_level l)
{
#ifdef VMATH_X86
    if (l >= VQ__ISA_AVX512)
        return &vmath_avx512;
    if (l >= VQ__ISA_AVX2)
        return &vmath_avx2;
#else
    (void)l;
#endif
    return &vmath_baseline;
}

const struct vq__vmath *vq__vmath(void)
{
    return vq__vmath_at(vq__isa());
}
