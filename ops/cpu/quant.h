/* What the quantized ops' files share (ops/cpu/quant.c: quantize_linear
 * and friends; ops/cpu/qproduct.c: the integer products): the params, the
 * dtype masks, and the reading and checking of scales and zero points.
 * Private to ops/cpu. */
#ifndef VARQ_OPS_CPU_QUANT_H
#define VARQ_OPS_CPU_QUANT_H

#include "../math/half.h"
#include "../math/isa.h"
#include "../ops_internal.h"
#include "../params.h"

#include <stdbool.h>
#include <stdint.h>

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define HAVE_X86 1
#include <immintrin.h>
#else
#define HAVE_X86 0
#endif

#define M_BIT(dt) (1u << (dt))
#define Q_FLOATS (M_BIT(VQ_F32) | M_BIT(VQ_F16) | M_BIT(VQ_BF16))
#define Q_INT8 (M_BIT(VQ_U8) | M_BIT(VQ_I8))
#define Q_INTS (Q_INT8 | M_BIT(VQ_U16) | M_BIT(VQ_I16))

struct quant_params {
    int axis;     /* X's dim of a per-axis scale, or -1: per tensor */
    vq_dtype ydt; /* quantize_linear: Y's dtype */
    vq__window_params w;
};

/* The range of an integer dtype (u8 for any other but i8, u16, i16, i32). */
void vq__quant_range(vq_dtype dt, float *lo, float *hi);
/* Element i of an integer tensor's bytes (u8, i8, u16, i16, i32) as an int32. */
int32_t vq__quant_int_at(vq_dtype dt, const void *p, int64_t i);
/* n floats of t (f32, f16, bf16) from element 0 into out. */
void vq__quant_floats(const vq_tensor *t, float *out, int64_t n);
/* Whether m has one element (any shape). */
bool vq__quant_one_value(const vq__meta *m);
/* Checks a scale or zero point (slot) against its operand's dim: one
 * value, or 1-D of dim (unknown dims pass). what: "row of A", ... */
int vq__quant_per_check(const vq__infer *c, int slot, int64_t dim, const char *what);

/* A row of the quantized ops' tables. */
#define VQ__QOP(name, ins, nins, outs, nouts, fl, at, nat, inf, ker)                              \
    {                                                                                             \
        .type = name, .in_slots = ins, .nin_slots = nins, .out_slots = outs, .nout_slots = nouts, \
        .flags = VQ__EXT_DTYPES | (fl), .attrs = at, .nattrs = nat,                               \
        .params_size = sizeof(struct quant_params), .infer = inf, .kernel = {ker},                \
    }

#endif
