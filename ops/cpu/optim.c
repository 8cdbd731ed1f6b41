/* Optimizer updates: sgd, momentum (with Nesterov's variant) and adam, with
 * PyTorch's semantics. They have no gradients; their outputs are normally
 * their state inputs themselves (vq_op_run with out[i] == in[i]), so the
 * parameters and moments are updated in place.
 *
 * In place means an output may share its bytes with any input of the same
 * shape, so each kernel reads every input of element i before it writes
 * any output of element i. Arithmetic is in double for both dtypes: f32
 * state is read, updated in double and rounded once. */
#include "../internal.h"
#include "../params.h"

#include <math.h>

static const char *const sgd_in[] = {"Param", "Grad"};
static const char *const sgd_out[] = {"ParamOut"};
static const char *const momentum_in[] = {"Param", "Grad", "Velocity"};
static const char *const momentum_out[] = {"ParamOut", "VelocityOut"};
static const char *const adam_in[] = {"Param", "Grad", "Moment1", "Moment2", "Step"};
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

static int optim_infer(vq__infer *c)
{
    vq__optim_params *p = c->params;
    int rc;
    p->lr = vq__attr_float(c, "learning_rate", 0.0);
    if ((rc = finite_attr(c, "learning_rate", p->lr, 0)) < 0)
        return rc;
    int nstate = c->def->code == VQ__OPTIM_ADAM ? 4 : c->nin; /* Param-shaped inputs */
    if ((rc = vq__check_dtype(c, 0, VQ__FLOATS)) < 0)
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
        if (!(s->ndim == 0 || (s->ndim == 1 && vq__dim_match(s->shape[0], 1)))) {
            char buf[100];
            return vq__in_fail(c, 4, "shape %s; the step count is one element ([] or [1])",
                               vq__shape_str(buf, sizeof buf, s->ndim, s->shape));
        }
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
    static void sgd_##T(const vq__optim_params *p, const vq__kcall *k)              \
    {                                                                               \
        const T *pa = k->in[0]->data, *g = k->in[1]->data;                          \
        T *po = k->out[0]->data;                                                    \
        for (int64_t i = 0; i < k->in[0]->numel; i++)                               \
            po[i] = (T)((double)pa[i] - p->lr * (double)g[i]);                      \
    }

/* v = mu v + g; p -= lr v, or with Nesterov p -= lr (g + mu v). */
#define MOMENTUM(T)                                                                 \
    static void momentum_##T(const vq__optim_params *p, const vq__kcall *k)         \
    {                                                                               \
        const T *pa = k->in[0]->data, *g = k->in[1]->data, *v = k->in[2]->data;     \
        T *po = k->out[0]->data, *vo = k->out[1]->data;                             \
        for (int64_t i = 0; i < k->in[0]->numel; i++) {                             \
            double pi = pa[i], gi = g[i], vi = p->mu * (double)v[i] + gi;           \
            double d = p->nesterov ? gi + p->mu * vi : vi;                          \
            vo[i] = (T)vi;                                                          \
            po[i] = (T)(pi - p->lr * d);                                            \
        }                                                                           \
    }

/* m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 * p -= lr (m / c1) / (sqrt(v / c2) + eps), c1 = 1 - b1^t, c2 = 1 - b2^t. */
/* Adam as PyTorch computes it: denom = sqrt(v) / sqrt(1 - b1^t... ) + eps,
 * p -= (lr / (1 - b1^t)) * m / denom, in the parameter's own precision with
 * the bias corrections (c1 = 1 - b1^t, c2 = 1 - b2^t) folded into two
 * constants computed in double. One pass, no division per element but the
 * one PyTorch also does. */
#define ADAM(T, SQRT)                                                               \
    static void adam_##T(const vq__optim_params *p, const vq__kcall *k, double c1,  \
                         double c2)                                                 \
    {                                                                               \
        const T *pa = k->in[0]->data, *g = k->in[1]->data;                          \
        const T *m = k->in[2]->data, *v = k->in[3]->data;                           \
        T *po = k->out[0]->data, *mo = k->out[1]->data, *vo = k->out[2]->data;      \
        const T b1 = (T)p->beta1, b2 = (T)p->beta2, a1 = (T)(1 - p->beta1),          \
                a2 = (T)(1 - p->beta2);                                             \
        const T step = (T)(p->lr / c1), inv_sqrt_c2 = (T)(1 / sqrt(c2)),            \
                eps = (T)p->eps;                                                    \
        for (int64_t i = 0; i < k->in[0]->numel; i++) {                             \
            T gi = g[i];                                                            \
            T mi = b1 * m[i] + a1 * gi;                                             \
            T vi = b2 * v[i] + a2 * gi * gi;                                        \
            T pi = pa[i];                                                           \
            mo[i] = mi;                                                             \
            vo[i] = vi;                                                             \
            po[i] = pi - step * mi / (SQRT(vi) * inv_sqrt_c2 + eps);                \
        }                                                                           \
    }

SGD(float)
SGD(double)
MOMENTUM(float)
MOMENTUM(double)
ADAM(float, sqrtf)
ADAM(double, sqrt)

static int optim_kernel(const vq__kcall *k)
{
    const vq__optim_params *p = k->params;
    bool f32 = k->in[0]->dtype == VQ_F32;
    if (k->def->code == VQ__OPTIM_SGD) {
        if (f32)
            sgd_float(p, k);
        else
            sgd_double(p, k);
        return 0;
    }
    if (k->def->code == VQ__OPTIM_MOMENTUM) {
        if (f32)
            momentum_float(p, k);
        else
            momentum_double(p, k);
        return 0;
    }
    int64_t step = *(const int64_t *)k->in[4]->data;
    if (step < 0 || step == INT64_MAX)
        return vq__op_fail(k->def, "input Step (slot 4) is %lld, not a count of updates",
                           (long long)step);
    int64_t t = step + 1;
    double c1 = 1 - pow(p->beta1, (double)t), c2 = 1 - pow(p->beta2, (double)t);
    if (f32)
        adam_float(p, k, c1, c2);
    else
        adam_double(p, k, c1, c2);
    *(int64_t *)k->out[3]->data = t;
    return 0;
}

static const vq__attr_spec sgd_attrs[] = {
    {"learning_rate", VQ_ATTR_FLOAT, true, NULL},
};

static const vq__attr_spec momentum_attrs[] = {
    {"learning_rate", VQ_ATTR_FLOAT, true, NULL},
    {"mu", VQ_ATTR_FLOAT, false, "0.9"},
    {"use_nesterov", VQ_ATTR_BOOL, false, "0"},
};

static const vq__attr_spec adam_attrs[] = {
    {"learning_rate", VQ_ATTR_FLOAT, true, NULL},
    {"beta1", VQ_ATTR_FLOAT, false, "0.9"},
    {"beta2", VQ_ATTR_FLOAT, false, "0.999"},
    {"epsilon", VQ_ATTR_FLOAT, false, "1e-8"},
};

#define OPTIM(name, c, ins, nins, outs, nouts, schema, nschema)                            \
    {.type = name, .in_slots = ins, .nin_slots = nins, .out_slots = outs, .nout_slots = nouts, \
     .flags = VQ__INPLACE_OK, .attrs = schema, .nattrs = nschema, .code = c,                 \
     .params_size = sizeof(vq__optim_params), .infer = optim_infer,                        \
     .kernel = {optim_kernel}}

const vq__op_def vq__ops_optim[] = {
    OPTIM("adam", VQ__OPTIM_ADAM, adam_in, 5, adam_out, 4, adam_attrs, 4),
    OPTIM("momentum", VQ__OPTIM_MOMENTUM, momentum_in, 3, momentum_out, 2, momentum_attrs, 3),
    OPTIM("sgd", VQ__OPTIM_SGD, sgd_in, 2, sgd_out, 1, sgd_attrs, 1),
    {0},
};
