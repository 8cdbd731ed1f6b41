/* The numpy broadcasting walk shared by elementwise kernels, their
 * gradients and reductions to a shape: the output is split into innermost
 * rows, and each input is addressed with per-dim strides that are zero
 * where it is broadcast. Dims of size 1 are dropped and dims that stay
 * contiguous for every operand are merged first, so two same-shape operands
 * make a single row and a [N,C] + [C] add makes N rows of C. */
#include "tensor_services.h"

#include <string.h>

void vq__bcast_init(vq__bcast *b, const vq_tensor *out, const vq_tensor *x, const vq_tensor *y)
{
    int n = out->ndim;
    int64_t stride[2][VQ_MAX_DIMS];
    const vq_tensor *in[2] = {x, y};
    for (int k = 0; k < 2; k++) {
        int64_t s = 1;
        for (int i = n - 1; i >= 0; i--) {
            int j = in[k] ? i - (n - in[k]->ndim) : -1;
            int64_t d = j >= 0 ? in[k]->shape[j] : 1;
            stride[k][i] = d == 1 ? 0 : s;
            s *= d;
        }
    }
    b->ndim = 0;
    for (int i = 0; i < n; i++) {
        if (out->shape[i] == 1)
            continue; /* index always 0: contributes nothing */
        int m = b->ndim;
        if (m > 0 && b->stride[0][m - 1] == stride[0][i] * out->shape[i] &&
            b->stride[1][m - 1] == stride[1][i] * out->shape[i]) {
            /* The previous kept dim steps exactly over this one for both
             * inputs (and the output is contiguous): merge. */
            b->shape[m - 1] *= out->shape[i];
            b->stride[0][m - 1] = stride[0][i];
            b->stride[1][m - 1] = stride[1][i];
            continue;
        }
        b->shape[m] = out->shape[i];
        b->stride[0][m] = stride[0][i];
        b->stride[1][m] = stride[1][i];
        b->ndim++;
    }
}

void vq__bcast_rows(const vq__bcast *b, void *user,
                    void (*fn)(void *user, int64_t xoff, int64_t yoff, int64_t ooff, int64_t n,
                               int64_t xs, int64_t ys))
{
    for (int i = 0; i < b->ndim; i++)
        if (b->shape[i] == 0)
            return;
    if (b->ndim == 0) {
        fn(user, 0, 0, 0, 1, 0, 0);
        return;
    }
    int last = b->ndim - 1;
    int64_t n = b->shape[last], idx[VQ_MAX_DIMS] = {0};
    int64_t xo = 0, yo = 0, oo = 0;
    for (;;) {
        fn(user, xo, yo, oo, n, b->stride[0][last], b->stride[1][last]);
        oo += n;
        int d = last - 1;
        for (; d >= 0; d--) {
            xo += b->stride[0][d];
            yo += b->stride[1][d];
            if (++idx[d] < b->shape[d])
                break;
            xo -= b->stride[0][d] * b->shape[d];
            yo -= b->stride[1][d] * b->shape[d];
            idx[d] = 0;
        }
        if (d < 0)
            return;
    }
}
