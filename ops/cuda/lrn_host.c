/* The CUDA host glue of lrn and lrn_grad (ops/cpu/lrn.c; lrn.cu): the
 * function their definitions name (cuda_ops.h), which calls the launcher
 * of kernels.h with the tensors' device pointers and the op's params on
 * the op's stream (launch.c: how a call runs). Compiled only when CUDA is
 * found (have_cuda). */
#include "cuda_internal.h"

/* lrn (X) and lrn_grad (X, dOut): X as [N, C, inner]. */
int vq__lrn_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__lrn_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    vq__lrn_geom g = {x->shape[1], 1, p->lo, p->hi, p->scale, p->beta, p->bias};
    for (int d = 2; d < x->ndim; d++)
        g.inner *= x->shape[d];
    return vq__cuda_launched(k, vq__cuda_lrn(x->dtype, x->data, k->nin > 1 ? k->in[1]->data : NULL,
                                             o->data, x->shape[0], &g, l->s));
}
