/* The CUDA host glue of shape and range (ops/cpu/shape_value.c; range's
 * kernel in shape_value.cu): for each op, the function its definition
 * names (cuda_ops.h), which calls the launchers of kernels.h with the
 * tensors' device pointers and the op's params on the op's stream
 * (launch.c: how a call runs). Compiled only when CUDA is found
 * (have_cuda). */
#include "cuda_internal.h"

/* shape: X's dims are on the host; each is a one-element fill of Out (a
 * kernel's arguments travel with its launch, so nothing here must outlive
 * the call). */
int vq__shape_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__shape_params *p = k->params;
    int64_t *o = k->out[0]->data;
    int rc = 0;
    for (int i = 0; i < p->count && rc == 0; i++)
        rc = vq__cuda_fill(VQ_I64, o + i, 1, 0.0, k->in[0]->shape[p->start + i], l->s);
    return vq__cuda_launched(k, rc);
}

int vq__range_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__range_params *p = k->params;
    vq_tensor *o = k->out[0];
    return vq__cuda_launched(k, vq__cuda_range(o->dtype, o->data, o->numel, p->start, p->delta,
                                               p->istart, p->idelta, l->s));
}
