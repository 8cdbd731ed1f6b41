/* The CUDA host glue of tfidf_vectorizer (ops/cpu/tfidf.c; tfidf.cu): the
 * launcher of kernels.h on the op's stream. Compiled only when CUDA is
 * found (have_cuda). */
#include "cuda_internal.h"
#include "../params.h"

int vq__tfidf_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__tfidf_params *p = k->params;
    vq_tensor *x = k->in[0], *o = k->out[0];
    const vq_tensor *w = k->nin > 4 ? k->in[4] : NULL;
    int64_t C = x->shape[x->ndim - 1], rows = x->ndim == 2 ? x->shape[0] : 1;
    return vq__cuda_launched(k, vq__cuda_tfidf(x->dtype, x->data, k->in[1]->data, k->in[1]->numel,
                                               k->in[2]->data, k->in[2]->numel, k->in[3]->data,
                                               w ? w->data : NULL, o->data, rows, C, p->min_gram,
                                               p->max_gram, p->max_skip, p->mode, p->size, l->s));
}
