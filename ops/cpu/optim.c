/* Optimizer updates: sgd, momentum (with Nesterov's variant) and adam, with
 * PyTorch's semantics; and lr_schedule, the learning rate of PyTorch's
 * step, cosine and linear schedulers as a function of a step counter. They
 * have no gradients; their outputs are normally their state inputs
 * themselves (vq_op_run with out[i] == in[i]), so the parameters, moments
 * and counters are updated in place.
 *
 * The learning rate of an update is its attribute learning_rate, or the
 * value of its optional last input LearningRate (a one-element tensor of
 * Param's dtype, fed or computed in a program, e.g. by lr_schedule): one
 * of the two, never both. The input is read when the kernel runs, with no
 * check of its value (a schedule may compute any number), while the
 * attribute is checked once (finite, >= 0).
 *
 * In place means an output may share its bytes with any input of the same
 * shape, so each kernel reads every input of element i before it writes
 * any output of element i (and the learning rate before any element).
 * sgd and momentum compute in double for both dtypes (f32 state is read,
 * updated in double and rounded once); adam in the parameter's precision,
 * as PyTorch does (see ADAM). */
#include "../ops_internal.h"
#include "../params.h"
#include "../cuda/cuda_ops.h"

#include <math.h>
#include <string.h>

static const char *const sgd_in[] = {"Param", "Grad", "LearningRate"};
static const char *const sgd_out[] = {"ParamOut"};
static const char *const momentum_in[] = {"Param", "Grad", "Velocity", "LearningRate"};
static const char *const momentum_out[] = {"ParamOut", "VelocityOut"};
static const char *const adam_in[] = {"Param", "Grad", "Moment1", "Moment2", "Step",
                                      "LearningRate"};
static const char *const adam_out[] = {"ParamOut", "Moment1Out", "Moment2Out", "StepOut"};

static int finite_attr(const vq__infer *c, const char *name, double v, double lo)
{
    if (!isfinite(v) || v < lo)
        return vq__attr_fail(c, name, "is %g; expected a finite number >= %g", v, lo);
    return 0;
}

static int beta_attr(const vq__infer *c, const char *name, double dflt, double *out)
{
    *out = vq__attr_float(c, name, dflt);
    if (!(*out >= 0 && *out < 1))
        return vq__attr_fail(c, name, "is %g; expected a value in [0, 1)", *out);
    return 0;
}

/* Input slot is one element: shape [] or [1] (what names it). */
static int one_element(const vq__infer *c, int slot, const char *what)
{
    const vq__meta *s = &c->in[slot];
    if (s->ndim == 0 || (s->ndim == 1 && vq__dim_match(s->shape[0], 1)))
        return 0;
    char buf[100];
    return vq__in_fail(c, slot, "shape %s; %s is one element ([] or [1])",
                       vq__shape_str(buf, sizeof buf, s->ndim, s->shape), what);
}

/* Where the learning rate comes from: the attribute or the last input
 * slot, exactly one of them (Param's dtype is checked already). */
static int lr_source(vq__infer *c, vq__optim_params *p)
{
    int slot = c->def->nin_slots - 1, rc;
    bool attr = vq__attr_find(c, "learning_rate") != NULL;
    p->lr_in = c->nin == c->def->nin_slots ? slot : -1;
    if (p->lr_in >= 0 && attr)
        return vq__op_fail(c->def, "the learning rate is given twice, as attribute "
                                   "learning_rate and as input LearningRate (slot %d): give one",
                           slot);
    if (p->lr_in < 0 && !attr)
        return vq__op_fail(c->def, "no learning rate: give attribute learning_rate or input "
                                   "LearningRate (slot %d)",
                           slot);
    if (p->lr_in < 0) {
        p->lr = vq__attr_float(c, "learning_rate", 0.0);
        return finite_attr(c, "learning_rate", p->lr, 0);
    }
    if ((rc = vq__check_same_dtype(c, 0, slot)) < 0)
        return rc;
    return one_element(c, slot, "the learning rate");
}

static int optim_infer(vq__infer *c)
{
    vq__optim_params *p = c->params;
    int rc;
    /* Param-shaped inputs: adam's first four, all but LearningRate else */
    int nstate = c->def->code == VQ__OPTIM_ADAM ? 4 : c->def->nin_slots - 1;
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0 || (rc = lr_source(c, p)) < 0)
        return rc;
    for (int i = 1; i < nstate; i++)
        if ((rc = vq__check_same_dtype(c, 0, i)) < 0 || (rc = vq__check_same_shape(c, 0, i)) < 0)
            return rc;
    c->out[0] = c->in[0];
    switch (c->def->code) {
    case VQ__OPTIM_MOMENTUM:
        p->mu = vq__attr_float(c, "mu", 0.9);
        p->nesterov = vq__attr_bool(c, "use_nesterov", false);
        c->out[1] = c->in[2];
        return finite_attr(c, "mu", p->mu, 0);
    case VQ__OPTIM_ADAM: {
        p->eps = vq__attr_float(c, "epsilon", 1e-8);
        if ((rc = beta_attr(c, "beta1", 0.9, &p->beta1)) < 0 ||
            (rc = beta_attr(c, "beta2", 0.999, &p->beta2)) < 0 ||
            (rc = finite_attr(c, "epsilon", p->eps, 0)) < 0)
            return rc;
        const vq__meta *s = &c->in[4];
        if (s->dtype != VQ_I64)
            return vq__in_fail(c, 4, "dtype %s; the step count is i64", vq_dtype_name(s->dtype));
        if ((rc = one_element(c, 4, "the step count")) < 0)
            return rc;
        c->out[1] = c->in[2];
        c->out[2] = c->in[3];
        c->out[3] = *s;
        if (s->ndim == 1)
            c->out[3].shape[0] = 1;
        return 0;
    }
    default: return 0;
    }
}

#define SGD(T)                                                                      \
    static void sgd_##T(double lr, const vq__kcall *k)                              \
    {                                                                               \
        const T *pa = k->in[0]->data, *g = k->in[1]->data;                          \
        T *po = k->out[0]->data;                                                    \
        for (int64_t i = 0; i < k->in[0]->numel; i++)                               \
            po[i] = (T)((double)pa[i] - lr * (double)g[i]);                         \
    }

/* v = mu v + g; p -= lr v, or with Nesterov p -= lr (g + mu v). */
#define MOMENTUM(T)                                                                 \
    static void momentum_##T(const vq__optim_params *p, double lr, const vq__kcall *k) \
    {                                                                               \
        const T *pa = k->in[0]->data, *g = k->in[1]->data, *v = k->in[2]->data;     \
        T *po = k->out[0]->data, *vo = k->out[1]->data;                             \
        for (int64_t i = 0; i < k->in[0]->numel; i++) {                             \
            double pi = pa[i], gi = g[i], vi = p->mu * (double)v[i] + gi;           \
            double d = p->nesterov ? gi + p->mu * vi : vi;                          \
            vo[i] = (T)vi;                                                          \
            po[i] = (T)(pi - lr * d);                                               \
        }                                                                           \
    }

/* m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 * p -= lr (m / c1) / (sqrt(v / c2) + eps), c1 = 1 - b1^t, c2 = 1 - b2^t,
 * as PyTorch computes it: denom = sqrt(v) / sqrt(c2) + eps and
 * p -= (lr / c1) * m / denom, in the parameter's own precision with the
 * bias corrections folded into two constants computed in double. One pass,
 * no division per element but the one PyTorch also does. */
#define ADAM_STEP(T, SQRT, P_IN, M_IN, V_IN)                     \
    {                                                            \
        T gi = g[i];                                             \
        T mi = b1 * M_IN + a1 * gi;                              \
        T vi = b2 * V_IN + a2 * gi * gi;                         \
        T pi = P_IN;                                             \
        mo[i] = mi;                                              \
        vo[i] = vi;                                              \
        po[i] = pi - step * mi / (SQRT(vi) * inv_sqrt_c2 + eps); \
    }
/* Updated in place (the usual case: outputs are the inputs' tensors), the
 * loop reads and writes through four pointers, few enough for the compiler
 * to check them for overlap and use vector instructions (sqrt included,
 * see meson.build's -fno-math-errno); the same arithmetic either way. */
#define ADAM(T, SQRT)                                                                         \
    static void adam_##T(const vq__optim_params *p, double lr, const vq__kcall *k, double c1, \
                         double c2)                                                           \
    {                                                                                         \
        const T *pa = k->in[0]->data, *g = k->in[1]->data;                                    \
        const T *m = k->in[2]->data, *v = k->in[3]->data;                                     \
        T *po = k->out[0]->data, *mo = k->out[1]->data, *vo = k->out[2]->data;                \
        const T b1 = (T)p->beta1, b2 = (T)p->beta2, a1 = (T)(1 - p->beta1),                   \
                a2 = (T)(1 - p->beta2);                                                       \
        const T step = (T)(lr / c1), inv_sqrt_c2 = (T)(1 / sqrt(c2)), eps = (T)p->eps;        \
        int64_t n = k->in[0]->numel;                                                          \
        if (po == pa && mo == m && vo == v)                                                   \
            for (int64_t i = 0; i < n; i++)                                                   \
                ADAM_STEP(T, SQRT, po[i], mo[i], vo[i])                                       \
        else                                                                                  \
            for (int64_t i = 0; i < n; i++)                                                   \
                ADAM_STEP(T, SQRT, pa[i], m[i], v[i])                                         \
    }

SGD(float)
SGD(double)
MOMENTUM(float)
MOMENTUM(double)
ADAM(float, sqrtf)
ADAM(double, sqrt)

/* The call's learning rate: the attribute's, or LearningRate's value now,
 * read before any output is written (an output may share its bytes). */
static double learning_rate(const vq__optim_params *p, const vq__kcall *k)
{
    if (p->lr_in < 0)
        return p->lr;
    const vq_tensor *t = k->in[p->lr_in];
    return t->dtype == VQ_F32 ? (double)*(const float *)t->data : *(const double *)t->data;
}

static int optim_kernel(const vq__kcall *k)
{
    const vq__optim_params *p = k->params;
    bool f32 = k->in[0]->dtype == VQ_F32;
    double lr = learning_rate(p, k);
    if (k->def->code == VQ__OPTIM_SGD) {
        if (f32)
            sgd_float(lr, k);
        else
            sgd_double(lr, k);
        return 0;
    }
    if (k->def->code == VQ__OPTIM_MOMENTUM) {
        if (f32)
            momentum_float(p, lr, k);
        else
            momentum_double(p, lr, k);
        return 0;
    }
    int64_t step = *(const int64_t *)k->in[4]->data;
    if (step < 0 || step == INT64_MAX)
        return vq__op_fail(k->def, "input Step (slot 4) is %lld, not a count of updates",
                           (long long)step);
    int64_t t = step + 1;
    double c1 = 1 - pow(p->beta1, (double)t), c2 = 1 - pow(p->beta2, (double)t);
    if (f32)
        adam_float(p, lr, k, c1, c2);
    else
        adam_double(p, lr, k, c1, c2);
    *(int64_t *)k->out[3]->data = t;
    return 0;
}

/* learning_rate is not required: the input LearningRate may give it. */
static const vq__attr_spec sgd_attrs[] = {
    {"learning_rate", VQ_ATTR_FLOAT, false, NULL},
};

static const vq__attr_spec momentum_attrs[] = {
    {"learning_rate", VQ_ATTR_FLOAT, false, NULL},
    {"mu", VQ_ATTR_FLOAT, false, "0.9"},
    {"use_nesterov", VQ_ATTR_BOOL, false, "0"},
};

static const vq__attr_spec adam_attrs[] = {
    {"learning_rate", VQ_ATTR_FLOAT, false, NULL},
    {"beta1", VQ_ATTR_FLOAT, false, "0.9"},
    {"beta2", VQ_ATTR_FLOAT, false, "0.999"},
    {"epsilon", VQ_ATTR_FLOAT, false, "1e-8"},
};

/* ---- lr_schedule(Step) -> (LearningRate, StepOut) ----
 *
 * LearningRate = the rate of PyTorch's scheduler `kind` after Step calls
 * of its step() (t = Step, from 0), in closed form, computed in double and
 * rounded once to dtype; StepOut = Step + 1, so that with StepOut the
 * same var as Step (a persistable counter) each run of a program uses the
 * next step's rate, as scheduler.step() once per optimizer step does:
 *
 *   step           StepLR:            base_lr * gamma^floor(t / step_size)
 *   cosine         CosineAnnealingLR: eta_min + (base_lr - eta_min)
 *                                     * (1 + cos(pi t / t_max)) / 2
 *                  (periodic past t_max, as PyTorch's recursive form is)
 *   linear         LinearLR:          base_lr * (start_factor + (end_factor
 *                                     - start_factor) * min(t, total_iters)
 *                                     / total_iters)
 *   warmup_cosine  SequentialLR([LinearLR(start_factor, end_factor,
 *                  total_iters), CosineAnnealingLR(t_max, eta_min)],
 *                  milestones=[total_iters]): linear's rate for t <
 *                  total_iters, then cosine's at t - total_iters (at the
 *                  milestone SequentialLR restarts the cosine at its
 *                  epoch 0, which is base_lr)
 *
 * PyTorch's step() uses the recursive ("chainable") forms, equal to these
 * in exact arithmetic; they differ by rounding only (tests/reference). */

static const struct lr_kind {
    const char *name;
    int kind;
    unsigned attrs; /* bit i: lr_attrs[i] applies to the kind */
} lr_kinds[] = {
    {"step", VQ__LR_STEP, 0x007 | 0x018},
    {"cosine", VQ__LR_COSINE, 0x007 | 0x060},
    {"linear", VQ__LR_LINEAR, 0x007 | 0x380},
    {"warmup_cosine", VQ__LR_WARMUP_COSINE, 0x007 | 0x060 | 0x380},
};

/* The schema; the kind mask above indexes it. */
static const vq__attr_spec lr_attrs[] = {
    {"kind", VQ_ATTR_STRING, true, NULL},        /* 0x001 */
    {"base_lr", VQ_ATTR_FLOAT, true, NULL},      /* 0x002 */
    {"dtype", VQ_ATTR_STRING, false, "f32"},     /* 0x004 */
    {"step_size", VQ_ATTR_INT, false, NULL},     /* 0x008 */
    {"gamma", VQ_ATTR_FLOAT, false, "0.1"},      /* 0x010 */
    {"t_max", VQ_ATTR_INT, false, NULL},         /* 0x020 */
    {"eta_min", VQ_ATTR_FLOAT, false, "0"},      /* 0x040 */
    {"start_factor", VQ_ATTR_FLOAT, false, "0.333333"}, /* 0x080 */
    {"end_factor", VQ_ATTR_FLOAT, false, "1"},   /* 0x100 */
    {"total_iters", VQ_ATTR_INT, false, "5"},    /* 0x200 */
};

#define N_LR_ATTRS ((int)(sizeof lr_attrs / sizeof lr_attrs[0]))

/* Integer attribute name, required (no default), must be >= 1. */
static int count_attr(const vq__infer *c, const char *name, int64_t dflt, int64_t *out)
{
    if (dflt < 0 && !vq__attr_find(c, name))
        return vq__attr_fail(c, name, "is required by this kind");
    *out = vq__attr_int(c, name, dflt);
    if (*out < 1)
        return vq__attr_fail(c, name, "is %lld; expected a count >= 1", (long long)*out);
    return 0;
}

static int lr_schedule_infer(vq__infer *c)
{
    vq__lr_schedule_params *p = c->params;
    const vq_attr *ka = vq__attr_find(c, "kind");
    const struct lr_kind *k = NULL;
    for (size_t i = 0; i < sizeof lr_kinds / sizeof lr_kinds[0] && !k; i++)
        if (!strcmp(ka->s, lr_kinds[i].name))
            k = &lr_kinds[i];
    if (!k)
        return vq__attr_fail(c, "kind", "is \"%s\"; expected step, cosine, linear or "
                                        "warmup_cosine",
                             ka->s);
    /* An attribute of another kind is a mistake, not something to ignore. */
    for (int i = 0; i < N_LR_ATTRS; i++)
        if (!(k->attrs & (1u << i)) && vq__attr_find(c, lr_attrs[i].name))
            return vq__attr_fail(c, lr_attrs[i].name, "does not apply to kind %s", k->name);
    p->kind = k->kind;
    int rc;
    if ((rc = vq__attr_dtype(c, "dtype", VQ_F32, &p->dtype)) < 0)
        return rc;
    if (p->dtype != VQ_F32 && p->dtype != VQ_F64)
        return vq__attr_fail(c, "dtype", "is %s; the learning rate is f32 or f64",
                             vq_dtype_name(p->dtype));
    p->base_lr = vq__attr_float(c, "base_lr", 0);
    p->gamma = vq__attr_float(c, "gamma", 0.1);
    p->eta_min = vq__attr_float(c, "eta_min", 0);
    p->start_factor = vq__attr_float(c, "start_factor", 1.0 / 3);
    p->end_factor = vq__attr_float(c, "end_factor", 1);
    if ((rc = finite_attr(c, "base_lr", p->base_lr, 0)) < 0)
        return rc;
    if (p->kind == VQ__LR_STEP &&
        ((rc = count_attr(c, "step_size", -1, &p->step_size)) < 0 ||
         (rc = finite_attr(c, "gamma", p->gamma, 0)) < 0))
        return rc;
    if ((p->kind == VQ__LR_COSINE || p->kind == VQ__LR_WARMUP_COSINE) &&
        ((rc = count_attr(c, "t_max", -1, &p->t_max)) < 0 ||
         (rc = finite_attr(c, "eta_min", p->eta_min, 0)) < 0))
        return rc;
    if (p->kind == VQ__LR_LINEAR || p->kind == VQ__LR_WARMUP_COSINE) {
        if ((rc = count_attr(c, "total_iters", 5, &p->total_iters)) < 0)
            return rc;
        /* PyTorch's bounds; a start of 0 would divide by zero in its
         * recursive form */
        if (!(p->start_factor > 0 && p->start_factor <= 1))
            return vq__attr_fail(c, "start_factor", "is %g; expected a value in (0, 1]",
                                 p->start_factor);
        if (!(p->end_factor >= 0 && p->end_factor <= 1))
            return vq__attr_fail(c, "end_factor", "is %g; expected a value in [0, 1]",
                                 p->end_factor);
    }
    const vq__meta *s = &c->in[0];
    if (s->dtype != VQ_I64)
        return vq__in_fail(c, 0, "dtype %s; the step count is i64", vq_dtype_name(s->dtype));
    if ((rc = one_element(c, 0, "the step count")) < 0)
        return rc;
    c->out[0] = (vq__meta){.dtype = p->dtype, .ndim = 0};
    c->out[1] = *s;
    if (s->ndim == 1)
        c->out[1].shape[0] = 1;
    return 0;
}

static int lr_schedule_kernel(const vq__kcall *k)
{
    const vq__lr_schedule_params *p = k->params;
    int64_t step = *(const int64_t *)k->in[0]->data; /* before StepOut, maybe its bytes */
    if (step < 0 || step == INT64_MAX)
        return vq__op_fail(k->def, "input Step (slot 0) is %lld, not a count of steps",
                           (long long)step);
    double lr = vq__lr_schedule_value(p, step);
    if (p->dtype == VQ_F32)
        *(float *)k->out[0]->data = (float)lr;
    else
        *(double *)k->out[0]->data = lr;
    *(int64_t *)k->out[1]->data = step + 1;
    return 0;
}

static const char *const lr_schedule_in[] = {"Step"};
static const char *const lr_schedule_out[] = {"LearningRate", "StepOut"};

#define OPTIM(name, c, ins, nins, outs, nouts, schema, nschema, cuda_)                            \
    {                                                                                             \
        .type = name, .in_slots = ins, .nin_slots = nins, .out_slots = outs, .nout_slots = nouts, \
        .flags = VQ__INPLACE_OK | VQ__OPTIONAL_IN, .attrs = schema, .nattrs = nschema, .code = c, \
        .params_size = sizeof(vq__optim_params), .infer = optim_infer, .kernel = {optim_kernel},  \
        .cuda = VQ__CUDA_OP(cuda_)                                                                \
    }

const vq__op_def vq__ops_optim[] = {
    OPTIM("adam", VQ__OPTIM_ADAM, adam_in, 6, adam_out, 4, adam_attrs, 4,
          VQ__CUDA_OP(vq__adam_gpu)),
    {.type = "lr_schedule",
     .in_slots = lr_schedule_in,
     .nin_slots = 1,
     .out_slots = lr_schedule_out,
     .nout_slots = 2,
     .flags = VQ__INPLACE_OK,
     .attrs = lr_attrs,
     .nattrs = N_LR_ATTRS,
     .params_size = sizeof(vq__lr_schedule_params),
     .infer = lr_schedule_infer,
     .kernel = {lr_schedule_kernel},
     .cuda = VQ__CUDA_OP(vq__lr_schedule_gpu)},
    OPTIM("momentum", VQ__OPTIM_MOMENTUM, momentum_in, 4, momentum_out, 2, momentum_attrs, 3,
          VQ__CUDA_OP(vq__momentum_gpu)),
    OPTIM("sgd", VQ__OPTIM_SGD, sgd_in, 3, sgd_out, 1, sgd_attrs, 1, VQ__CUDA_OP(vq__sgd_gpu)),
    {0},
};
