/* The CUDA host glue of scatter_elements, scatter_nd and gather_nd
 * (ops/cpu/scatter.c; kernels in scatter.cu): for each op, the function
 * its definition names (cuda_ops.h), which checks the indices on the
 * device (checks.c: the first bad element of Indices, worded as the CPU
 * op's message) and calls the launchers of kernels.h with the tensors'
 * device pointers, the op's params and the geometry of
 * ops/scatter_shared.h on the op's stream (launch.c: how a call runs).
 * Compiled only when CUDA is found (have_cuda). */
#include "cuda_internal.h"

/* scatter_elements: the indices against X's dim along the axis, as
 * gather_elements' are. */
int vq__scatter_elements_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__scatter_params *p = k->params;
    vq_tensor *x = k->in[0], *idx = k->in[1], *upd = k->in[2], *o = k->out[0];
    struct vq__cuda_check *c;
    int rc = vq__cuda_index_check_launch(k, l, idx, x->shape[p->axis], p->axis, &c);
    if (!c)
        return rc;
    if (rc == 0) {
        vq__elements_geom g;
        vq__elements_geom_make(&g, x->ndim, x->shape, upd->shape, p->axis);
        rc = vq__cuda_launched(k, vq__cuda_scatter_elements(x->dtype, idx->dtype, p->reduction,
                                                            x->data, idx->data, upd->data, o->data,
                                                            x->numel, &g, l->s));
    }
    return vq__cuda_check_finish(l, c, rc);
}

/* Begins the check of scatter_nd's or gather_nd's index tuples (geometry
 * g): each entry against the dim it indexes (VQ__CUDA_CHECK_INDEX_ND). *c
 * is NULL when the check could not begin; otherwise the caller finishes
 * it. */
static int nd_check_launch(const vq__kcall *k, const vq__cuda_launch *l, const vq_tensor *idx,
                           const vq__nd_geom *g, struct vq__cuda_check **c)
{
    int rc = vq__cuda_check_begin(l, VQ__CUDA_CHECK_INDEX_ND, c);
    if (rc < 0) {
        *c = NULL;
        return rc;
    }
    (*c)->axis = g->batch_dims;
    (*c)->k = g->k;
    for (int j = 0; j < g->k; j++)
        (*c)->dims[j] = g->dim[j];
    rc = vq__cuda_launched(k, vq__cuda_index_nd_check(idx->dtype, idx->data, idx->numel, g,
                                                      &(*c)->d->bad, l->s));
    if (rc == 0)
        rc = vq__cuda_launched(k, vq__cuda_label_fetch(idx->dtype, idx->data, &(*c)->d->bad,
                                                       &(*c)->d->label, l->s));
    return rc;
}

int vq__scatter_nd_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__scatter_params *p = k->params;
    vq_tensor *x = k->in[0], *idx = k->in[1], *upd = k->in[2], *o = k->out[0];
    vq__nd_geom g;
    vq__nd_geom_make(&g, x->ndim, x->shape, idx->ndim, idx->shape, p->batch_dims);
    struct vq__cuda_check *c;
    int rc = nd_check_launch(k, l, idx, &g, &c);
    if (!c)
        return rc;
    if (rc == 0)
        rc = vq__cuda_launched(k, vq__cuda_scatter_nd(x->dtype, idx->dtype, p->reduction, x->data,
                                                      idx->data, upd->data, o->data, x->numel, &g,
                                                      l->s));
    return vq__cuda_check_finish(l, c, rc);
}

int vq__gather_nd_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__scatter_params *p = k->params;
    vq_tensor *x = k->in[0], *idx = k->in[1], *o = k->out[0];
    vq__nd_geom g;
    vq__nd_geom_make(&g, x->ndim, x->shape, idx->ndim, idx->shape, p->batch_dims);
    struct vq__cuda_check *c;
    int rc = nd_check_launch(k, l, idx, &g, &c);
    if (!c)
        return rc;
    if (rc == 0)
        rc = vq__cuda_launched(k, vq__cuda_gather_nd((int)vq_dtype_size(x->dtype), idx->dtype,
                                                     x->data, idx->data, o->data, &g, l->s));
    return vq__cuda_check_finish(l, c, rc);
}
