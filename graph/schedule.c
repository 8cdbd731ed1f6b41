/* Learning-rate schedules (vq_lr_schedule_build): an lr_schedule op and
 * its step counter, whose rate var the optimizers' update ops read
 * (optimizers.c: vq_optimizer.learning_rate_var). */
#include "graph_internal.h"

#include <varq/train.h>

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static int lr_schedule_build(vq_program *main, vq_program *startup, const char *lr_var,
                             const vq_lr_schedule *s)
{
    if (!main || !startup || !lr_var || !s)
        return vq__fail(VQ_EINVAL, "vq_lr_schedule_build: NULL argument");
    static const char *const kinds[] = {"step", "cosine", "linear", "warmup_cosine"};
    if ((unsigned)s->kind > VQ_LR_WARMUP_COSINE)
        return vq__fail(VQ_EINVAL, "vq_lr_schedule_build: kind %d is not a vq_lr_schedule_kind",
                        (int)s->kind);
    if (s->dtype != VQ_F32 && s->dtype != VQ_F64)
        return vq__fail(VQ_EINVAL,
                        "vq_lr_schedule_build: dtype %d: the learning rate is f32 "
                        "or f64",
                        (int)s->dtype);
    char step[320];
    snprintf(step, sizeof step, "%s@STEP", lr_var);
    if (vq__program_find_var(main, lr_var) >= 0 || vq__program_find_var(main, step) >= 0)
        return vq__fail(VQ_EINVAL, "vq_lr_schedule_build: main declares %s already",
                        vq__program_find_var(main, lr_var) >= 0 ? lr_var : step);
    /* The kind's numbers only: the op refuses another kind's. */
    vq_attr a[8] = {VQ_ATTR_S("kind", kinds[s->kind]), VQ_ATTR_F("base_lr", s->base_lr),
                    VQ_ATTR_S("dtype", vq_dtype_name(s->dtype))};
    int na = 3;
    if (s->kind == VQ_LR_STEP) {
        a[na++] = VQ_ATTR_I("step_size", s->step_size);
        a[na++] = VQ_ATTR_F("gamma", s->gamma);
    }
    if (s->kind == VQ_LR_LINEAR || s->kind == VQ_LR_WARMUP_COSINE) {
        a[na++] = VQ_ATTR_F("start_factor", s->start_factor);
        a[na++] = VQ_ATTR_F("end_factor", s->end_factor);
        a[na++] = VQ_ATTR_I("total_iters", s->total_iters);
    }
    if (s->kind == VQ_LR_COSINE || s->kind == VQ_LR_WARMUP_COSINE) {
        a[na++] = VQ_ATTR_I("t_max", s->t_max);
        a[na++] = VQ_ATTR_F("eta_min", s->eta_min);
    }
    /* The op's own checks of the numbers, now rather than when main is
     * prepared, before anything is declared: a refused schedule leaves
     * both programs as they were. */
    const vq__op_def *def = vq__op_find("lr_schedule");
    if (!def)
        return vq__fail(VQ_ENOSYS, "vq_lr_schedule_build: no lr_schedule op");
    vq__meta in = {.dtype = VQ_I64, .ndim = 1, .shape = {1}}, out[2];
    union {
        max_align_t align;
        unsigned char bytes[VQ__MAX_PARAMS];
    } params;
    int rc = vq__op_infer(def, a, na, 1, &in, 2, out, &params);
    if (rc < 0)
        return rc;
    int64_t one[1] = {1};
    vq_attr zero[3] = {VQ_ATTR_IS("shape", one, 1), VQ_ATTR_S("dtype", "i64"),
                       VQ_ATTR_F("value", 0)};
    rc = vq_program_add_var(main, 0, lr_var, s->dtype, 0, NULL, false);
    if (rc >= 0)
        rc = vq_program_add_var(main, 0, step, VQ_I64, 1, one, true);
    if (rc >= 0 && vq__program_find_var(startup, step) < 0)
        rc = vq_program_add_var(startup, 0, step, VQ_I64, 1, one, true);
    if (rc >= 0)
        rc = vq_program_add_op(startup, 0, "fill_constant", NULL, 0, (const char *const[]){step}, 1,
                               zero, 3);
    if (rc >= 0)
        rc = vq_program_add_op(main, 0, "lr_schedule", (const char *const[]){step}, 1,
                               (const char *const[]){lr_var, step}, 2, a, na);
    return rc < 0 ? rc : 0;
}

VQ_API int vq_lr_schedule_build(vq_program *main, vq_program *startup, const char *lr_var,
                                const vq_lr_schedule *s)
{
    return vq__named_failure(lr_schedule_build(main, startup, lr_var, s), "vq_lr_schedule_build");
}
