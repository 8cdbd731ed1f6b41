/* The CUDA host glue of sgd, momentum, adam and lr_schedule
 * (ops/cpu/optim.c; kernels in optim.cu): for each op, the function its
 * definition names (cuda_ops.h), which calls the launchers of kernels.h with
 * the tensors' device pointers and the op's params on the op's stream
 * (launch.c: how a call runs). adam's bias corrections and lr_schedule's
 * rate are computed on the host in stream order, through a check (checks.c),
 * so that they are the CPU's to the bit. Compiled only when CUDA is found
 * (have_cuda). */
#include "cuda_internal.h"

#include <limits.h>
#include <math.h>

int vq__sgd_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__optim_params *p = k->params;
    vq_tensor *pa = k->in[0], *g = k->in[1], *po = k->out[0];
    const void *lr = p->lr_in >= 0 ? k->in[p->lr_in]->data : NULL; /* read by the kernel */
    return vq__cuda_launched(k, vq__cuda_sgd(pa->dtype, pa->data, g->data, po->data, pa->numel,
                                             p->lr, lr, l->s));
}

int vq__momentum_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__optim_params *p = k->params;
    vq_tensor *pa = k->in[0], *g = k->in[1], *v = k->in[2], *po = k->out[0], *vo = k->out[1];
    const void *lr = p->lr_in >= 0 ? k->in[p->lr_in]->data : NULL; /* read by the kernel */
    return vq__cuda_launched(k, vq__cuda_momentum(pa->dtype, pa->data, g->data, v->data, po->data,
                                                  vo->data, pa->numel, p->lr, lr, p->mu,
                                                  p->nesterov, l->s));
}

/* Host function between the copy of Step to the host and the copies of
 * the constants and of StepOut to the device: optim.c's step check and
 * bias corrections, computed by the same libm as the CPU op's. */
static int adam_step_run(void *arg)
{
    struct vq__cuda_check *c = arg;
    struct vq__cuda_found *f = c->h;
    long long step = f->step;
    if (step < 0 || step == LLONG_MAX) {
        f->consts.ok = 0;
        f->step_out = step; /* StepOut keeps the count */
        int rc = vq__op_fail(c->def, "input Step (slot 4) is %lld, not a count of updates", step);
        return vq__gpu_work_failed(c->dev, rc, c->defer, c->defer_user, c->defer_tag);
    }
    long long t = step + 1;
    double c1 = 1 - pow(c->beta1, (double)t), c2 = 1 - pow(c->beta2, (double)t);
    double lr = c->lr_input < 0 ? c->lr : c->lr_input == VQ_F32 ? (double)f->lr.f : f->lr.d;
    f->consts.step_size = lr / c1;
    f->consts.inv_sqrt_c2 = 1 / sqrt(c2);
    f->consts.ok = 1;
    f->step_out = t;
    return 0;
}

/* The CPU op reads the i64 step on the host, checks it, derives c1 and c2
 * from it with pow and writes step + 1. Here the step stays on the device
 * (it is a tensor there, updated in place step after step) and is brought
 * to the host in stream order instead: a copy to the check's pinned memory,
 * a host function that does the CPU's check and arithmetic there (the same
 * pow, so the same bits: the device's pow may round differently), then
 * copies of the constants and of StepOut back, then the kernel, which reads
 * the constants when it runs. Nothing blocks the host; copying the step
 * back synchronously would stall the worker once per parameter per step,
 * and a host mirror of the step could not see a step written by another
 * op. A bad step fails the stream work with the CPU's message and makes
 * the kernel write nothing, as the CPU op writes nothing. A LearningRate
 * input comes to the host with the step, as it enters only step_size. */
int vq__adam_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__optim_params *p = k->params;
    vq_tensor *pa = k->in[0], *g = k->in[1], *m1 = k->in[2], *m2 = k->in[3], *step = k->in[4];
    vq_tensor *po = k->out[0], *m1o = k->out[1], *m2o = k->out[2], *so = k->out[3];
    struct vq__cuda_check *c;
    int rc = vq__cuda_check_begin(l, VQ__CUDA_CHECK_ADAM, &c);
    if (rc < 0)
        return rc;
    c->lr = p->lr;
    c->lr_input = p->lr_in >= 0 ? (int)k->in[p->lr_in]->dtype : -1;
    c->beta1 = p->beta1;
    c->beta2 = p->beta2;
    rc = vq__cuda_op_called(k,
                            cudaMemcpyAsync(&c->h->step, step->data, sizeof c->h->step,
                                            cudaMemcpyDeviceToHost, l->s),
                            "cudaMemcpyAsync");
    if (rc == 0 && p->lr_in >= 0)
        rc = vq__cuda_op_called(k,
                                cudaMemcpyAsync(&c->h->lr, k->in[p->lr_in]->data,
                                                k->in[p->lr_in]->nbytes, cudaMemcpyDeviceToHost,
                                                l->s),
                                "cudaMemcpyAsync");
    if (rc == 0)
        rc = vq_gpu_launch_host(k->x, adam_step_run, c);
    if (rc == 0)
        rc = vq__cuda_op_called(k,
                                cudaMemcpyAsync(&c->d->consts, &c->h->consts, sizeof c->h->consts,
                                                cudaMemcpyHostToDevice, l->s),
                                "cudaMemcpyAsync");
    if (rc == 0)
        rc = vq__cuda_op_called(k,
                                cudaMemcpyAsync(so->data, &c->h->step_out, sizeof c->h->step_out,
                                                cudaMemcpyHostToDevice, l->s),
                                "cudaMemcpyAsync");
    if (rc == 0)
        rc = vq__cuda_launched(k, vq__cuda_adam(pa->dtype, pa->data, g->data, m1->data, m2->data,
                                                po->data, m1o->data, m2o->data, pa->numel, p->beta1,
                                                p->beta2, p->eps, &c->d->consts, l->s));
    return vq__cuda_check_finish(l, c, rc);
}

/* Host function between the copies of Step and of LearningRate's old
 * bytes to the host and the copies of LearningRate and StepOut back:
 * optim.c's step check and rate, computed by the CPU op's own code
 * (vq__lr_schedule_value, glibc's cos and pow: the same bits). A bad step
 * fails the stream work with the CPU's message and copies the old bytes
 * back, so the op writes nothing, as the CPU op. */
static int lr_schedule_run(void *arg)
{
    struct vq__cuda_check *c = arg;
    struct vq__cuda_found *f = c->h;
    long long step = f->step;
    f->step_out = step;
    if (step < 0 || step == LLONG_MAX) {
        int rc = vq__op_fail(c->def, "input Step (slot 0) is %lld, not a count of steps", step);
        return vq__gpu_work_failed(c->dev, rc, c->defer, c->defer_user, c->defer_tag);
    }
    double lr = vq__lr_schedule_value(&c->sched, step);
    if (c->sched.dtype == VQ_F32)
        f->lr.f = (float)lr;
    else
        f->lr.d = lr;
    f->step_out = step + 1;
    return 0;
}

/* One element computed from one counter: on the host in stream order, as
 * adam's constants (see vq__adam_gpu), so nothing blocks the host and the rate
 * is the CPU's to the bit; a device kernel would use CUDA's cos and pow. */
int vq__lr_schedule_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    vq_tensor *step = k->in[0], *lr = k->out[0], *so = k->out[1];
    struct vq__cuda_check *c;
    int rc = vq__cuda_check_begin(l, VQ__CUDA_CHECK_LR_SCHEDULE, &c);
    if (rc < 0)
        return rc;
    c->sched = *(const vq__lr_schedule_params *)k->params;
    rc = vq__cuda_op_called(k,
                            cudaMemcpyAsync(&c->h->step, step->data, sizeof c->h->step,
                                            cudaMemcpyDeviceToHost, l->s),
                            "cudaMemcpyAsync");
    if (rc == 0)
        rc = vq__cuda_op_called(k,
                                cudaMemcpyAsync(&c->h->lr, lr->data, lr->nbytes,
                                                cudaMemcpyDeviceToHost, l->s),
                                "cudaMemcpyAsync");
    if (rc == 0)
        rc = vq_gpu_launch_host(k->x, lr_schedule_run, c);
    if (rc == 0)
        rc = vq__cuda_op_called(k,
                                cudaMemcpyAsync(lr->data, &c->h->lr, lr->nbytes,
                                                cudaMemcpyHostToDevice, l->s),
                                "cudaMemcpyAsync");
    if (rc == 0)
        rc = vq__cuda_op_called(k,
                                cudaMemcpyAsync(so->data, &c->h->step_out, sizeof c->h->step_out,
                                                cudaMemcpyHostToDevice, l->s),
                                "cudaMemcpyAsync");
    return vq__cuda_check_finish(l, c, rc);
}
