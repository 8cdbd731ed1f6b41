/* The CUDA host glue of det and det_grad (ops/cpu/det.c; det.cu): the
 * launchers of kernels.h on the op's stream, with the per-matrix double
 * scratch in a buffer of that stream. Compiled only when CUDA is found
 * (have_cuda). */
#include "cuda_internal.h"

/* per: doubles of scratch per matrix. */
static int det_launch(const vq__kcall *k, const vq__cuda_launch *l, bool grad)
{
    vq_tensor *x = k->in[0], *o = k->out[0];
    int64_t n = x->shape[x->ndim - 1];
    int64_t batch = grad ? k->in[1]->numel : o->numel;
    int64_t per = grad ? 4 * n * n + 2 * n : n * n + n, total = batch * per;
    if (batch == 0)
        return 0;
    vq_tensor *w = NULL;
    if (total > 0) {
        int rc = vq__tensor_empty_at(&w, k->x->ctx, VQ_F64, 1, &total, l->bs);
        if (rc < 0)
            return vq__fail_prefixed(rc, "%s: its LU scratch", k->def->type);
    }
    double *s = w ? w->data : NULL;
    int rc = grad ? vq__cuda_det_grad(x->dtype, x->data, k->in[1]->data, o->data, s, batch, n, l->s)
                  : vq__cuda_det(x->dtype, x->data, o->data, s, batch, n, l->s);
    rc = vq__cuda_launched(k, rc);
    if (w)
        vq__tensor_release_on(w, l->bs);
    return rc;
}

int vq__det_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return det_launch(k, l, false);
}

int vq__det_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return det_launch(k, l, true);
}
