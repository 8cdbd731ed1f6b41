/* The CUDA host glue of einsum (ops/cpu/einsum.c; einsum.cu): the CPU's
 * plan (ops/einsum_shared.h), its steps launched in order on the op's
 * stream: loop steps as einsum.cu's kernel, GEMM steps as
 * vq__cuda_matmul's strided batch (cuBLAS), intermediate products in
 * buffers of the op's stream. Compiled only when CUDA is found
 * (have_cuda). */
#include "cuda_internal.h"
#include "../einsum_shared.h"

#include <stdlib.h>
#include <string.h>

int vq__einsum_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__einsum_params *p = k->params;
    vq_tensor *out = k->out[0];
    int rank[VQ__EINSUM_MAX_IN];
    const int64_t *shape[VQ__EINSUM_MAX_IN];
    for (int i = 0; i < k->nin; i++) {
        rank[i] = k->in[i]->ndim;
        shape[i] = k->in[i]->shape;
    }
    vq__es_plan *plan = vq__malloc(sizeof *plan);
    if (!plan)
        return vq__fail(VQ_ENOMEM, "einsum: out of memory for its plan");
    int rc =
        vq__einsum_plan(p, k->def->type, rank, shape, out->shape,
                        out->dtype == VQ_F32 || out->dtype == VQ_F64 ? VQ__ES_GEMM_OK : 0, plan);
    vq_tensor *tmp[VQ__ES_MAX_STEPS] = {NULL};
    if (rc == 0 && plan->zero_out && out->nbytes)
        rc = vq__cuda_op_called(k, cudaMemsetAsync(out->data, 0, out->nbytes, l->s),
                                "cudaMemsetAsync");
    for (int i = 0; rc == 0 && i < plan->nsteps; i++) {
        const vq__es_step *s = &plan->step[i];
        void *buf[3] = {NULL, NULL, NULL};
        for (int j = 0; j < 3 && rc == 0; j++) {
            int b = j < 2 ? s->in[j] : s->out;
            if (j == 1 && s->kind == VQ__ES_LOOP && s->loop.nop == 1)
                continue;
            if (b == VQ__ES_OUT) {
                buf[j] = out->data;
            } else if (b >= VQ__ES_TMP) {
                int64_t n = plan->tmp_numel[b - VQ__ES_TMP];
                if (!tmp[b - VQ__ES_TMP] && n > 0 &&
                    (rc = vq__tensor_empty_at(&tmp[b - VQ__ES_TMP], k->x->ctx, out->dtype, 1, &n,
                                              l->bs)) < 0)
                    rc = vq__fail_prefixed(rc, "einsum: an intermediate product");
                buf[j] = tmp[b - VQ__ES_TMP] ? tmp[b - VQ__ES_TMP]->data : NULL;
            } else {
                buf[j] = k->in[b]->data;
            }
        }
        if (rc < 0)
            break;
        if (s->kind == VQ__ES_GEMM)
            rc = vq__cuda_launched(k, vq__cuda_matmul(out->dtype, s->ta, s->tb, s->batch, s->m,
                                                      s->n, s->k, 1.0, buf[0], 0, buf[1], 0, 0.0,
                                                      buf[2], l->s));
        else
            rc = vq__cuda_launched(k, vq__cuda_einsum_loop(out->dtype, buf[0], buf[1], buf[2],
                                                           &s->loop, l->s));
        /* each temporary is read by one step: its buffer goes back in
         * stream order */
        for (int j = 0; j < 2; j++)
            if (s->in[j] >= VQ__ES_TMP && tmp[s->in[j] - VQ__ES_TMP]) {
                vq__tensor_release_on(tmp[s->in[j] - VQ__ES_TMP], l->bs);
                tmp[s->in[j] - VQ__ES_TMP] = NULL;
            }
    }
    for (int i = 0; i < VQ__ES_MAX_STEPS; i++)
        if (tmp[i])
            vq__tensor_release_on(tmp[i], l->bs);
    free(plan);
    return rc;
}
