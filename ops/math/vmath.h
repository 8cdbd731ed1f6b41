/* Vectorized f32 transcendentals for the elementwise kernels: exp, log,
 * erf, tanh, the logistic sigmoid and SiLU (x sigmoid(x)) over arrays of
 * floats, without a libm call per element. Each has one body of C that
 * gcc and clang vectorize, compiled three times (the build's baseline,
 * AVX2 + FMA, AVX-512 F) and picked at run time by vq__isa() (isa.h), as
 * the other kernels with AVX2 / AVX-512 variants are.
 *
 * exp, log, erf and tanh compute each element in double from the float
 * input and round to float once, so each result is within 1 ulp of the
 * correctly rounded one (the portable level's exp and log are libm's expf
 * and logf: with SSE2 alone the bodies are slower than those). sigmoid and
 * silu, the activations of whole convolutional nets, work in float alone
 * (a double division per element was most of their time): sigmoid within
 * 2 ulp, silu within 3 (its product x t rounds once more)
 * (tests/test_vmath.c measures it at each level against double libm, over
 * a dense sample of all floats and the edges: denormals, +-0, +-inf, NaN,
 * overflow and underflow). The body has no libm call and no branch: the
 * range checks are integer compares on the float's bits (gcc does not
 * if-convert float compares under its default -ftrapping-math, and the
 * loop would stay scalar), and ISO C mode contracts nothing into FMAs, so
 * the variants give the same bits (but for libm's exp and log).
 *
 * Special values: exp(+inf) = +inf, exp(-inf) = +0, log(+-0) = -inf,
 * log(x < 0) = NaN, erf(+-inf) = +-1, tanh(+-inf) = +-1, sigmoid(+inf) =
 * 1, sigmoid(-inf) = 0, silu(+inf) = +inf, silu(-inf) = NaN (as the
 * composition -inf * sigmoid(-inf) = -inf * 0 gives); a NaN input gives
 * that NaN back.
 *
 * All functions are pure and thread-safe; x and o may be the same array
 * (each element is read before it is written) but must not otherwise
 * overlap. */
#ifndef VARQ_OPS_MATH_VMATH_H
#define VARQ_OPS_MATH_VMATH_H

#include <stdint.h>

#include "isa.h"

typedef void (*vq__vmath_fn)(const float *x, float *o, int64_t n);
typedef void (*vq__vmath_sub_fn)(const float *x, float m, float *o, int64_t n);

/* One level's functions: o[i] = f(x[i]) for i < n; exp_sub: o[i] =
 * exp(x[i] - m), the difference taken in double (softmax's exponentials
 * of a line shifted by its max: x[i] - m is exact there, and the result
 * is exp's, within 1 ulp). */
struct vq__vmath {
    vq__vmath_fn exp, log, erf, tanh, sigmoid, silu;
    vq__vmath_sub_fn exp_sub;
};

/* The functions at level l, or at the highest level below it that this
 * build compiled (a build for another architecture has the portable ones
 * only). Tests and benchmarks call every level; kernels call vq__vmath(). */
const struct vq__vmath *vq__vmath_at(enum vq__isa_level l);

/* The functions at vq__isa()'s level. */
const struct vq__vmath *vq__vmath(void);

#endif
