/* The CUDA host glue of the class losses (cross_entropy,
 * softmax_cross_entropy) and the pair losses (square_error, mse) with their
 * gradients (ops/cpu/loss.c; kernels in rows.cu and elementwise.cu): for
 * each op, the function its definition names (cuda_ops.h), which calls the
 * launchers of kernels.h with the tensors' device pointers and the op's
 * params on the op's stream (launch.c: how a call runs). A class loss checks
 * its labels on the device (checks.c). Compiled only when CUDA is found
 * (have_cuda). */
#include "cuda_internal.h"

/* The class losses: X (slot 0) is [..., classes], Label (slot 1) holds one
 * label per row. launch runs the op's kernel with the check's bad row;
 * then the label there is fetched, for the CPU's message. */
static int class_loss_gpu(const vq__kcall *k, const vq__cuda_launch *l,
                          int (*launch)(const vq__kcall *k, unsigned long long *bad, void *s))
{
    vq_tensor *x = k->in[0], *label = k->in[1];
    struct vq__cuda_check *c;
    int rc = vq__cuda_check_begin(l, VQ__CUDA_CHECK_LABEL, &c);
    if (rc < 0)
        return rc;
    c->classes = x->shape[x->ndim - 1];
    rc = vq__cuda_launched(k, launch(k, &c->d->bad, l->s));
    if (rc == 0)
        rc = vq__cuda_launched(k, vq__cuda_label_fetch(label->dtype, label->data, &c->d->bad,
                                                       &c->d->label, l->s));
    return vq__cuda_check_finish(l, c, rc);
}

static int ce_launch(const vq__kcall *k, unsigned long long *bad, void *s)
{
    vq_tensor *x = k->in[0], *l = k->in[1], *o = k->out[0];
    return vq__cuda_cross_entropy(x->dtype, l->dtype, x->data, l->data, o->data, l->numel,
                                  x->shape[x->ndim - 1], bad, s);
}

static int ce_grad_launch(const vq__kcall *k, unsigned long long *bad, void *s)
{
    vq_tensor *x = k->in[0], *l = k->in[1], *g = k->in[2], *d = k->out[0];
    return vq__cuda_cross_entropy_grad(x->dtype, l->dtype, x->data, l->data, g->data, d->data,
                                       l->numel, x->shape[x->ndim - 1], bad, s);
}

static int sce_launch(const vq__kcall *k, unsigned long long *bad, void *s)
{
    vq_tensor *x = k->in[0], *l = k->in[1], *sm = k->out[0], *loss = k->out[1];
    return vq__cuda_softmax_cross_entropy(x->dtype, l->dtype, x->data, l->data, sm->data,
                                          loss->data, l->numel, x->shape[x->ndim - 1], bad, s);
}

static int sce_grad_launch(const vq__kcall *k, unsigned long long *bad, void *s)
{
    vq_tensor *sm = k->in[0], *l = k->in[1], *g = k->in[2], *d = k->out[0];
    return vq__cuda_softmax_cross_entropy_grad(sm->dtype, l->dtype, sm->data, l->data, g->data,
                                               d->data, l->numel, sm->shape[sm->ndim - 1], bad, s);
}

int vq__ce_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return class_loss_gpu(k, l, ce_launch);
}

int vq__ce_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return class_loss_gpu(k, l, ce_grad_launch);
}

int vq__sce_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return class_loss_gpu(k, l, sce_launch);
}

int vq__sce_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return class_loss_gpu(k, l, sce_grad_launch);
}

/* square_error and mse (and their grads) share their launchers' shapes:
 * the kernel function takes the launcher. */
typedef int (*pair_launcher)(int dtype, const void *x, const void *y, void *out, int64_t n,
                             void *stream);
typedef int (*pair_grad_launcher)(int wrt, int dtype, const void *x, const void *y, const void *g,
                                  void *dz, int64_t n, void *stream);

static int pair_loss_gpu(const vq__kcall *k, const vq__cuda_launch *l, pair_launcher launch)
{
    vq_tensor *x = k->in[0], *y = k->in[1], *o = k->out[0];
    return vq__cuda_launched(k, launch(x->dtype, x->data, y->data, o->data, x->numel, l->s));
}

static int pair_loss_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l,
                              pair_grad_launcher launch)
{
    const vq__wrt_params *p = k->params;
    vq_tensor *x = k->in[0], *y = k->in[1], *g = k->in[2], *d = k->out[0];
    return vq__cuda_launched(k, launch(p->wrt, x->dtype, x->data, y->data, g->data, d->data,
                                       x->numel, l->s));
}

int vq__se_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return pair_loss_gpu(k, l, vq__cuda_square_error);
}

int vq__se_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return pair_loss_grad_gpu(k, l, vq__cuda_square_error_grad);
}

int vq__mse_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return pair_loss_gpu(k, l, vq__cuda_mse);
}

int vq__mse_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return pair_loss_grad_gpu(k, l, vq__cuda_mse_grad);
}
