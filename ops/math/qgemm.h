/* varq's 8-bit integer matrix product (ops/math/qgemm.c), which the
 * quantized ops (ops/cpu/qproduct.c: matmul_integer, conv_integer,
 * qlinear_matmul, qlinear_conv) run on: exact i32 sums of products of u8
 * or i8 operands less their zero points, as ONNX's MatMulInteger defines
 * them, with AVX-512 VNNI (vpdpbusd), AVX2 (vpmaddwd on operands widened
 * to i16) or portable C, picked by vq__isa() and the CPU's features. */
#ifndef VARQ_OPS_MATH_QGEMM_H
#define VARQ_OPS_MATH_QGEMM_H

#include "isa.h"

#include <stdbool.h>
#include <stdint.h>

/* One product: C[i, j] = sum over p < k of (A[i, p] - za[i]) * (B[p, j] -
 * zb[j]), in i32 arithmetic that wraps (as the plain loop in uint32
 * would). A is m x k, rows lda bytes apart; B k x n, rows ldb bytes
 * apart; each u8, or i8 when its *_signed is set. za[i * za_step] and
 * zb[j * zb_step] are the zero points (step 0: one for all, step 1: one
 * per row of A / column of B), already read as ints. C's rows are ldc
 * elements apart. */
typedef struct vq__qgemm_args {
    int64_t m, n, k;
    const void *a;
    int64_t lda;
    bool a_signed;
    const int32_t *za;
    int za_step;
    const void *b;
    int64_t ldb;
    bool b_signed;
    const int32_t *zb;
    int zb_step;
    int32_t *c;
    int64_t ldc;
    /* When set, B is not in memory (b unread): b_rows(b_ctx, p0, np, dst,
     * ldd) writes its rows p0 .. p0 + np - 1 (all n columns) into dst,
     * rows ldd bytes apart. A convolution's im2col rows: the product asks
     * for a few rows at a time where it can, so that the whole matrix is
     * never written out. */
    void (*b_rows)(const void *b_ctx, int64_t p0, int64_t np, uint8_t *dst, int64_t ldd);
    /* Or, when set, B's row p is the n bytes at b_row(b_ctx, p), read in
     * place (rows that overlap in memory: a padded image seen through
     * each tap of a convolution of stride 1). */
    const uint8_t *(*b_row)(const void *b_ctx, int64_t p);
    const void *b_ctx;
} vq__qgemm_args;

/* The path vq__qgemm takes at level l (what the CPU has of it):
 * "avx512vnni", "avx2" or "portable". */
const char *vq__qgemm_path(enum vq__isa_level l);

/* Computes g's product at vq__isa()'s level on the calling thread (m, n,
 * k >= 0; k == 0 writes zeros). Its packing buffers come from malloc and
 * are freed before it returns: VQ_ENOMEM (C untouched) when they cannot
 * be had, else 0. The bits are the same at every level. Any thread. */
int vq__qgemm(const vq__qgemm_args *g);

/* The same at level l (capped by what the CPU has): for tests. */
int vq__qgemm_at(enum vq__isa_level l, const vq__qgemm_args *g);

#endif
