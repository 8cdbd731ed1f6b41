/* What conv2d's CPU files share: conv.c (the shape checks, im2col, the
 * gemm paths of the forward kernel and the op table), conv_depthwise.c
 * (the depthwise stencils) and conv_grad.c (conv2d_grad and
 * conv_transpose2d). One call's job, the passes more than one of them
 * runs, and the functions of the other two that conv.c's op table and
 * conv2d_kernel name. Private to ops/cpu. */
#ifndef VARQ_OPS_CPU_CONV_H
#define VARQ_OPS_CPU_CONV_H

#include "../ops_internal.h"
#include "../params.h"
#include "../window_shared.h"

/* GCC's -O2 vectorizes only loops that need no scalar remainder: these
 * passes are worth the remainder (4-8 lanes a step). */
#if defined(__GNUC__) && !defined(__clang__)
#define VECTORIZE __attribute__((optimize("vect-cost-model=cheap")))
#else
#define VECTORIZE
#endif

/* One conv2d call's work, shared by the participants of its parallel
 * loops (engine_services.h, vq__parallel_for). */
struct conv_job {
    const vq__conv *cv;
    const vq__window_params *p; /* clip, clip_lo, clip_hi */
    vq_dtype dt;
    size_t es;
    const char *x, *w, *b; /* b: NULL without a bias */
    char *o;
    const char *xg;                     /* one image's group, for the loops within it */
    char *wg_out;                       /* its output planes */
    const char *wg;                     /* its weights */
    void *col;                          /* its columns (X's planes when direct) */
    int64_t band;                       /* output rows per band (conv_bands) */
    float *pan;                         /* the columns as panels (sgemm.h) */
    float *pad, *flat;                  /* conv_flat's padded X and wide output */
    int64_t hp, wp;                     /* the padded planes' height and width */
    vq_tensor *cols[VQ__PAR_MAX_SLOTS]; /* per participant, for whole items */
};

/* "conv2d: input B (slot 2): ...": the variadic slot's third tensor is the
 * bias, which vq__in_fail would call W. */
int vq__conv_bias_fail(const vq__infer *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* What conv2d and conv_transpose2d check alike (X, W, the window, groups into p). */
int vq__conv_common(const vq__infer *c, vq__window_params *p);

/* col [channels * kh * kw, oh * ow] from the planes x [channels, h, w] (conv.c). */
void vq__conv_im2col(vq_dtype dt, const void *x, void *col, const vq__window *w, int64_t channels);

/* conv2d's output pass (bias, clip) on part of one item's output (conv.c). */
void vq__conv_epilogue(const struct conv_job *j, char *o, int64_t ch0, int64_t nch, int64_t c0,
                       int64_t ncol);

/* The epilogue's bias and clip alone (conv.c): the depthwise stencil
 * applies the activation over runs of planes instead. */
void vq__conv_bias_clip(const struct conv_job *j, char *o, int64_t ch0, int64_t nch, int64_t c0,
                        int64_t ncol);

/* conv2d's fused activation (attribute act), when it has one, on nch
 * channel rows of ncol columns at o + c0, rows a plane apart (conv.c). */
void vq__conv_act(const struct conv_job *j, char *o, int64_t nch, int64_t c0, int64_t ncol);

/* A depthwise call's output planes [lo, hi), a vq__parallel_for body (conv_depthwise.c). */
int vq__conv_depthwise(void *arg, int64_t lo, int64_t hi, int slot);

/* conv2d_grad's kernel and gradient maker (conv_grad.c). */
int vq__conv2d_grad_kernel(const vq__kcall *k);
int vq__conv2d_grad(const vq__grad *g);

/* conv_transpose2d's infer, kernel and gradient maker (conv_grad.c). */
int vq__conv_transpose2d_infer(vq__infer *c);
int vq__conv_transpose2d_kernel(const vq__kcall *k);
int vq__conv_transpose2d_grad(const vq__grad *g);

#endif
