/* conv2d's Winograd F(4x4, 3x3) path on the CPU (ops/math/winograd.c), for
 * conv2d_kernel in ops/cpu/conv.c: which calls take it, and the kernel. */
#ifndef VARQ_OPS_CPU_WINOGRAD_H
#define VARQ_OPS_CPU_WINOGRAD_H

#include "../ops_internal.h"
#include "../params.h"
#include "../window_shared.h"

/* Whether conv2d call cv of dtype dt takes the Winograd path: f32, one
 * group, a 3x3 kernel with stride 1 and dilation 1 (any pads), channels
 * and output tiles enough for the transforms to pay, and the environment
 * variable VARQ_CONV_WINOGRAD not "0" (read once per process). Any
 * thread. */
bool vq__winograd_fits(const vq__conv *cv, vq_dtype dt);

/* Out = conv2d(x, w) (+ b when b is not NULL, then clipped to [clip_lo,
 * clip_hi] when p->clip) for a call vq__winograd_fits accepted, with the
 * engine's idle workers helping (vq__parallel_for); the scratch comes
 * from vq__kernel_scratch(k, ...). x, w, b and o are the call's tensors'
 * data; o is written whole. 0, or a negative error (out of memory) with
 * its message set. The result depends only on the shapes and values, not
 * on how many workers help. */
int vq__conv_winograd(const vq__kcall *k, const vq__conv *cv, const vq__window_params *p,
                      const float *x, const float *w, const float *b, float *o);

/* Empties the cache of weight transforms the Winograd path keeps between
 * calls (winograd.c: per weights address, checked against a copy of the
 * weights each call); entries in use by a running call go when it ends.
 * The cache registers it as the CPU's trim hook (vq__mem_trim_hook_add),
 * so vq_mem_trim calls it for the CPU. Any thread. */
void vq__winograd_trim(void);

#endif
