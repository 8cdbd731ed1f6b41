/* The learning rate of lr_schedule's schedules (PyTorch's step, cosine,
 * linear and warm-up-then-cosine schedulers) as a function of the step:
 * device-neutral, so that the CPU kernel (ops/cpu/optim.c) and the CUDA
 * one (a host function, ops/cuda/) call this same code and agree bit for
 * bit (glibc's cos and pow). */
#include "ops_internal.h"
#include "params.h"

#include <math.h>

static const double pi = 3.141592653589793; /* Python's math.pi */

static double linear_rate(const vq__lr_schedule_params *p, int64_t t)
{
    double done = (double)(t < p->total_iters ? t : p->total_iters);
    return p->base_lr *
           (p->start_factor + (p->end_factor - p->start_factor) * done / (double)p->total_iters);
}

static double cosine_rate(const vq__lr_schedule_params *p, int64_t t)
{
    return p->eta_min +
           (p->base_lr - p->eta_min) * (1 + cos(pi * (double)t / (double)p->t_max)) / 2;
}

double vq__lr_schedule_value(const vq__lr_schedule_params *p, int64_t t)
{
    switch (p->kind) {
    case VQ__LR_STEP: return p->base_lr * pow(p->gamma, (double)(t / p->step_size));
    case VQ__LR_COSINE: return cosine_rate(p, t);
    case VQ__LR_LINEAR: return linear_rate(p, t);
    default: return t < p->total_iters ? linear_rate(p, t) : cosine_rate(p, t - p->total_iters);
    }
}
