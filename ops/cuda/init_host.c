/* The CUDA host glue of fill_constant, zeros_like, the random fills and
 * dropout (ops/cpu/init.c; kernels in elementwise.cu): for each op, the
 * function its definition names (cuda_ops.h), which calls the launchers of
 * kernels.h with the tensors' device pointers and the op's params on the
 * op's stream (launch.c: how a call runs). The generator state stays in
 * device memory. Compiled only when CUDA is found (have_cuda). */
#include "cuda_internal.h"

int vq__fill_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__fill_params *p = k->params;
    vq_tensor *o = k->out[0];
    return vq__cuda_launched(k,
                             vq__cuda_fill(o->dtype, o->data, o->numel, p->value, p->ivalue, l->s));
}

/* The generator state of a random op (init.c's file head) stays in device
 * memory: the kernels read State there when they run, and StateOut is
 * written after them on the same stream by a one-thread kernel (never by
 * the host, which would need the kernels' reads done first). `in` is the
 * op's State slot, `out` its StateOut slot; a call without them has none. */
static const void *state_of(const vq__kcall *k, int in)
{
    return k->nin > in ? k->in[in]->data : NULL;
}

/* The key without State: the seed attribute, or the default generator's
 * (init.c's state_read). */
static uint64_t key_of(const vq__kcall *k, const vq__rng_params *r)
{
    return r->fixed ? r->seed : k->rng;
}

/* After the op's kernels on l's stream: StateOut = State advanced by n. */
static int state_advance(const vq__kcall *k, const vq__cuda_launch *l, int in, int out, uint64_t n)
{
    if (k->nin <= in)
        return 0;
    return vq__cuda_rng_advance(k->in[in]->data, k->out[out]->data, n, l->s);
}

int vq__uniform_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__random_params *p = k->params;
    vq_tensor *o = k->out[0];
    int rc = vq__cuda_uniform(o->dtype, o->data, o->numel, p->a, p->b, key_of(k, &p->rng),
                              state_of(k, 0), l->s);
    if (rc == 0)
        rc = state_advance(k, l, 0, 1, (uint64_t)o->numel);
    return vq__cuda_launched(k, rc);
}

int vq__gaussian_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__random_params *p = k->params;
    vq_tensor *o = k->out[0];
    int rc = vq__cuda_gaussian(o->dtype, o->data, o->numel, p->a, p->b, key_of(k, &p->rng),
                               state_of(k, 0), l->s);
    if (rc == 0)
        rc = state_advance(k, l, 0, 1, (uint64_t)o->numel);
    return vq__cuda_launched(k, rc);
}

int vq__dropout_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__dropout_params *p = k->params;
    vq_tensor *x = k->in[0];
    int rc = vq__cuda_dropout(x->dtype, x->data, k->out[0]->data, k->out[1]->data, x->numel, p->p,
                              p->scale, p->is_test, key_of(k, &p->rng), state_of(k, 1), l->s);
    if (rc == 0)
        rc = state_advance(k, l, 1, 2, p->is_test ? 0 : (uint64_t)x->numel);
    return vq__cuda_launched(k, rc);
}
