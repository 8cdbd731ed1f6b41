/* f32 arrays to and from the 16-bit floats (VQ_F16, VQ_BF16), in bulk:
 * F16C's vcvtps2ph / vcvtph2ps and AVX512-BF16's vcvtne2ps2bf16 where the
 * CPU has them and vq__isa() allows (F16C from the avx2 level, AVX512-BF16
 * at avx512), tensor/half.c's exact one-value code otherwise. Every level
 * gives the same bits (tests/test_dtypes.c checks all 65,536 patterns each
 * way): round to nearest even, overflow to infinity, subnormals exact,
 * NaN quiet with the top of its payload. */
#ifndef VARQ_OPS_MATH_HALF_H
#define VARQ_OPS_MATH_HALF_H

#include "isa.h"

#include <stdint.h>

struct vq__half_conv {
    const char *name; /* "portable", "f16c", "avx512bf16": what a test names */
    void (*f32_to_f16)(const float *x, uint16_t *o, int64_t n);
    void (*f16_to_f32)(const uint16_t *x, float *o, int64_t n);
    void (*f32_to_bf16)(const float *x, uint16_t *o, int64_t n);
    void (*bf16_to_f32)(const uint16_t *x, float *o, int64_t n);
};

/* The conversions vq__isa() picks (the CPU's features looked up once).
 * Thread-safe. */
const struct vq__half_conv *vq__half(void);

/* The conversions at level l as far as the CPU has the features (for
 * tests: the portable ones at VQ__ISA_PORTABLE). */
const struct vq__half_conv *vq__half_at(enum vq__isa_level l);

#endif
