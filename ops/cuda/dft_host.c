/* The CUDA host glue of dft (ops/cpu/dft.c; dft.cu): X's lines around the
 * axis, the last dim (the complex parts) apart. Compiled only when CUDA is
 * found (have_cuda). */
#include "cuda_internal.h"
#include "../shape_shared.h" /* vq__lines_of */

int vq__dft_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__dft_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    int64_t outer, len, inner;
    vq__lines_of(x->ndim - 1, x->shape, p->axis, &outer, &len, &inner);
    int64_t n = p->length ? p->length : len;
    return vq__cuda_launched(k, vq__cuda_dft(x->dtype, x->data, o->data, outer, len, inner,
                                             x->shape[x->ndim - 1], n, o->shape[p->axis],
                                             p->inverse, l->s));
}
