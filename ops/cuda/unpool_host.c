/* The CUDA host glue of max_unpool2d and max_unpool2d_grad (ops/cpu/
 * unpool.c; unpool.cu): the indices checked on the device against Out's
 * size (the kernels skip a bad one), each place's last writer in a scratch
 * buffer of the op's stream. Compiled only when CUDA is found (have_cuda). */
#include "cuda_internal.h"

static int unpool_launch(const vq__kcall *k, const vq__cuda_launch *l, bool grad)
{
    vq_tensor *idx = k->in[1], *o = k->out[0];
    vq_tensor *places = grad ? k->in[2] : o; /* Out, or dOut */
    int64_t nout = places->numel, n = idx->numel;
    if (n == 0 && (grad || nout == 0))
        return 0;
    struct vq__cuda_check *c;
    int rc = vq__cuda_range_check_launch(k, l, idx, 0, nout, "index", "Indices", &c);
    if (!c)
        return rc;
    vq_tensor *w = NULL;
    if (rc == 0 && nout > 0) {
        rc = vq__tensor_empty_at(&w, k->x->ctx, VQ_I64, 1, &nout, l->bs);
        if (rc < 0)
            rc = vq__fail_prefixed(rc, "%s: its scratch of owners", k->def->type);
    }
    unsigned long long *owner = w ? w->data : NULL;
    if (rc == 0 && grad)
        rc = vq__cuda_launched(k, vq__cuda_max_unpool_grad(o->dtype, idx->dtype, idx->data,
                                                           places->data, o->data, owner, n, nout,
                                                           l->s));
    else if (rc == 0)
        rc = vq__cuda_launched(k, vq__cuda_max_unpool(o->dtype, idx->dtype, k->in[0]->data,
                                                      idx->data, o->data, owner, n, nout, l->s));
    if (w)
        vq__tensor_release_on(w, l->bs);
    return vq__cuda_check_finish(l, c, rc);
}

int vq__max_unpool_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return unpool_launch(k, l, false);
}

int vq__max_unpool_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    return unpool_launch(k, l, true);
}
