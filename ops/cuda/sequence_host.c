/* The CUDA host glue of reverse_sequence (ops/cpu/sequence.c;
 * sequence.cu): the function its definition names (cuda_ops.h), which
 * checks the lengths on the device (checks.c) and calls the launcher of
 * kernels.h with the tensors' device pointers on the op's stream
 * (launch.c: how a call runs). Compiled only when CUDA is found
 * (have_cuda). */
#include "cuda_internal.h"

/* X as [d0, d1, inner]; Lens checked against [0, T]. */
int vq__reverse_sequence_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__reverse_sequence_params *p = k->params;
    vq_tensor *x = k->in[0], *lens = k->in[1], *o = k->out[0];
    int64_t inner = 1, nt = x->shape[1 - p->batch_axis];
    for (int d = 2; d < x->ndim; d++)
        inner *= x->shape[d];
    struct vq__cuda_check *c;
    int rc = vq__cuda_range_check_launch(k, l, lens, 0, nt + 1, "length", "Lens", &c);
    if (!c)
        return rc;
    if (rc == 0)
        rc = vq__cuda_launched(k,
                               vq__cuda_reverse_sequence((int)vq_dtype_size(x->dtype), lens->dtype,
                                                         x->data, lens->data, o->data, x->shape[0],
                                                         x->shape[1], inner, p->batch_axis, l->s));
    return vq__cuda_check_finish(l, c, rc);
}
