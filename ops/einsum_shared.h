/* What einsum's CPU kernel (ops/cpu/einsum.c) and its CUDA side
 * (ops/cuda/einsum_host.c, einsum.cu) share: the plan of one call, a
 * sequence of steps over the inputs, temporaries and Out that both run
 * alike, so that they compute the same products in the same order.
 *
 * A loop step is the general kernel: out[o] = the sum over the summed
 * labels of the product of its one or two operands, each operand and the
 * output seen through strides per label (a label repeated in a tensor
 * adds its dims' strides: a diagonal). A GEMM step is a batch of matrix
 * products on contiguous [batch, m, k] (or [batch, k, m]) and [batch, k,
 * n] (or [batch, n, k]) operands into [batch, m, n]: varq's GEMM on the
 * CPU, cuBLAS on the GPU. Plain C, for nvcc too. */
#ifndef VARQ_OPS_EINSUM_SHARED_H
#define VARQ_OPS_EINSUM_SHARED_H

#include <stdint.h>

/* Labels of one loop step: the dims of an intermediate product (at most
 * VQ__ES_MAX_RANK) and those of one more operand (VQ_MAX_DIMS). */
#define VQ__ES_MAX_RANK 16
#define VQ__ES_MAX_LOOP 24

/* A loop step: out's index runs over the first nout labels (row-major),
 * the sum over the other nsum (row-major, the last fastest), from 0 in T
 * (integers wrapping), operand products in T; with no summed label the
 * product is stored as it is. */
typedef struct vq__es_loop {
    int nop, nout, nsum;
    int64_t out_numel, sum_numel;
    int64_t size[VQ__ES_MAX_LOOP];
    int64_t stride[2][VQ__ES_MAX_LOOP]; /* operand j's, 0 where it lacks the label */
    int64_t ostride[VQ__ES_MAX_LOOP];   /* out's, for the first nout labels */
} vq__es_loop;

enum { VQ__ES_LOOP, VQ__ES_GEMM };

/* Where a step reads or writes: input i (0 <= i < VQ__ES_OUT), Out, or
 * temporary j (VQ__ES_TMP + j). */
enum { VQ__ES_OUT = 100, VQ__ES_TMP = 200 };

typedef struct vq__es_step {
    int kind;
    int in[2], out;
    vq__es_loop loop;       /* VQ__ES_LOOP */
    int ta, tb;             /* VQ__ES_GEMM: the operands are [batch, k, m], [batch, n, k] */
    int64_t batch, m, n, k; /* VQ__ES_GEMM */
} vq__es_step;

#define VQ__ES_MAX_STEPS 24

typedef struct vq__es_plan {
    int nsteps, ntmp;
    int zero_out; /* Out is zeroed first: the steps write only its diagonal */
    int64_t tmp_numel[VQ__ES_MAX_STEPS];
    vq__es_step step[VQ__ES_MAX_STEPS];
} vq__es_plan;

#ifndef __CUDACC__
#include <stdbool.h>
#include <varq/tensor.h>

struct vq__einsum_params;

/* vq__einsum_plan's flags: products may be GEMM steps (floats); GEMM's B
 * operand is never read transposed (copied instead). */
enum { VQ__ES_GEMM_OK = 1, VQ__ES_B_PLAIN = 2 };

/* The plan of einsum (p) over inputs of these ranks and shapes into Out
 * (oshape), flags as above. 0, or
 * VQ_ENOSYS (message naming op) when an intermediate product would have
 * more than VQ__ES_MAX_RANK dims. (ops/cpu/einsum.c) */
int vq__einsum_plan(const struct vq__einsum_params *p, const char *op, const int *rank,
                    const int64_t *const *shape, const int64_t *oshape, int flags,
                    vq__es_plan *plan);
#endif

#endif
