/* The CUDA host glue of cumsum (ops/cpu/cumsum.c; cumsum.cu): for each op,
 * the function its definition names (cuda_ops.h), which calls the launchers
 * of kernels.h with the tensors' device pointers and the op's params on the
 * op's stream (launch.c: how a call runs). Compiled only when CUDA is found
 * (have_cuda). */
#include "cuda_internal.h"
#include "../shape_shared.h" /* vq__lines_of */

/* cumsum: X's lines around the axis. */
int vq__cumsum_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__cumsum_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    int64_t outer, len, inner;
    vq__lines_of(x->ndim, x->shape, p->axis, &outer, &len, &inner);
    return vq__cuda_launched(k, vq__cuda_cumsum(x->dtype, x->data, o->data, outer, len, inner,
                                                p->exclusive, p->reverse, l->s));
}
