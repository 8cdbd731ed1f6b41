/* The CUDA host glue of grid_sample, roi_align and their gradients
 * (ops/cpu/sample.c; sample.cu): for each op, the function its definition
 * names (cuda_ops.h), which calls the launchers of kernels.h with the
 * tensors' device pointers and the op's params on the op's stream
 * (launch.c: how a call runs). roi_align's batch indices are checked on
 * the device (checks.c). Compiled only when CUDA is found (have_cuda). */
#include "cuda_internal.h"

int vq__grid_sample_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[0], *g = k->in[1];
    return vq__cuda_launched(k, vq__cuda_grid_sample(x->dtype, x->data, g->data, k->out[0]->data,
                                                     x->shape[0], x->shape[1], x->shape[2],
                                                     x->shape[3], g->shape[1] * g->shape[2],
                                                     k->params, l->s));
}

/* (X, Grid, dOut) -> dX or dGrid, by the params' wrt. */
int vq__grid_sample_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *x = k->in[0], *g = k->in[1];
    return vq__cuda_launched(k,
                             vq__cuda_grid_sample_grad(x->dtype, x->data, g->data, k->in[2]->data,
                                                       k->out[0]->data, x->shape[0], x->shape[1],
                                                       x->shape[2], x->shape[3],
                                                       g->shape[1] * g->shape[2], k->params, l->s));
}

/* roi_align and its gradient (a fourth input, dOut): the batch indices
 * checked on the device as the kernels read them. */
int vq__roi_align_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    bool grad = k->nin == 4;
    vq_tensor *x = k->in[0], *rois = k->in[1], *bi = k->in[2], *o = k->out[0];
    struct vq__cuda_check *c;
    int rc = vq__cuda_check_begin(l, VQ__CUDA_CHECK_BATCH, &c);
    if (rc < 0)
        return rc;
    c->classes = x->shape[0];
    if (grad)
        rc = vq__cuda_launched(k, vq__cuda_roi_align_grad(x->dtype, bi->dtype, rois->data, bi->data,
                                                          k->in[3]->data, o->data, x->shape[0],
                                                          x->shape[1], x->shape[2], x->shape[3],
                                                          rois->shape[0], k->params, &c->d->bad,
                                                          l->s));
    else
        rc = vq__cuda_launched(k, vq__cuda_roi_align(x->dtype, bi->dtype, x->data, rois->data,
                                                     bi->data, o->data, x->shape[0], x->shape[1],
                                                     x->shape[2], x->shape[3], rois->shape[0],
                                                     k->params, &c->d->bad, l->s));
    if (rc == 0)
        rc = vq__cuda_launched(k, vq__cuda_label_fetch(bi->dtype, bi->data, &c->d->bad,
                                                       &c->d->label, l->s));
    return vq__cuda_check_finish(l, c, rc);
}

int vq__roi_align_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return vq__roi_align_gpu(k, l);
}
