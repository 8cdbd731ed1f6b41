/* ONNX's optimizers of the domain ai.onnx.preview.training (opset 1):
 * Adagrad, Adam and Momentum, each updating one or more tensors X with
 * their gradients G and state (H, V) from a learning rate R and a step
 * count T (scalars). varq's own optimizer ops (ops/cpu/optim.c) follow
 * PyTorch, whose formulas differ from these (Adam's epsilon outside the
 * square root and its bias correction only when T > 0, Adagrad's decayed
 * rate, Momentum's first step with coefficient 1), so each update is
 * composed of elementwise varq ops by the spec's formulas (ONNX's
 * reference, onnx/backend/test/case/node/{adagrad,adam,momentum}.py), in
 * X's dtype, R and T cast to it.
 *
 * Inputs R, T, then the n X's, the n G's and the n of each state; outputs
 * the n new X's, then the n new values of each state. */
#include "onnx_internal.h"

#include <string.h>

/* out = type(a, b) into name (NULL: a temporary). */
static int bin(struct ox *x, const char *type, struct ox_val *a, struct ox_val *b, const char *name,
               struct ox_val **out)
{
    return ox_emit(x, type, (struct ox_val *[]){a, b}, 2, &name, 1, NULL, 0, out);
}

/* The n tensors updated, from the node's inputs: k per tensor after R and
 * T (X, G and the states); the outputs number at most k - 1 per tensor.
 * Each X a float tensor, G and the states of X's dtype; R and T are cast to
 * it where each update needs them. */
static int tensors(struct ox *x, const char *op, int k, int *n)
{
    int nin = (int)x->node->n_input, nout = (int)x->node->n_output;
    if (nin < 2 + k || (nin - 2) % k)
        return ox_fail(x, VQ_EINVAL, "%d inputs; %s takes R, T and %d inputs per tensor", nin, op,
                       k);
    *n = (nin - 2) / k;
    if (nout > *n * (k - 1))
        return ox_fail(x, VQ_EINVAL, "%d outputs; %s of %d tensors has at most %d", nout, op, *n,
                       *n * (k - 1));
    for (int i = 2; i < nin; i++)
        if (!ox_input(x, i))
            return ox_fail(x, VQ_EINVAL, "input %d is absent", i);
    for (int t = 0; t < *n; t++) {
        vq_dtype dt = ox_input(x, 2 + t)->meta.dtype;
        if (!ox_is_float(dt))
            return ox_fail(x, VQ_EINVAL, "X %d is %s; %s updates float tensors", t,
                           vq_dtype_name(dt), op);
        for (int s = 1; s < k; s++)
            if (ox_input(x, 2 + s * *n + t)->meta.dtype != dt)
                return ox_fail(x, VQ_EINVAL, "input %d is %s, not X %d's %s", 2 + s * *n + t,
                               vq_dtype_name(ox_input(x, 2 + s * *n + t)->meta.dtype), t,
                               vq_dtype_name(dt));
    }
    return 0;
}

/* R and T of dtype dt, and T > 0 (bool). */
static int rate_and_step(struct ox *x, vq_dtype dt, struct ox_val **r, struct ox_val **t,
                         struct ox_val **positive)
{
    struct ox_val *zero;
    *r = ox_input(x, 0);
    *t = ox_input(x, 1);
    struct ox_val *traw = *t;
    int rc;
    if ((rc = ox_cast(x, r, dt)) < 0 || (rc = ox_cast(x, t, dt)) < 0)
        return rc;
    if (!positive)
        return 0;
    if ((rc = ox_scalar(x, traw->meta.dtype, 0, &zero)) < 0)
        return rc;
    return bin(x, "greater", traw, zero, NULL, positive);
}

/* g_regularized = norm_coefficient * X + G */
static int regularized(struct ox *x, struct ox_val *v, struct ox_val *g, struct ox_val **out)
{
    struct ox_val *nx;
    int rc = ox_affine(x, v, ox_float(x, "norm_coefficient"), 0, &nx);
    return rc ? rc : bin(x, "add", nx, g, NULL, out);
}

/* sqrt(h) + epsilon */
static int root_eps(struct ox *x, struct ox_val *h, struct ox_val **out)
{
    struct ox_val *s;
    int rc = ox_emit(x, "sqrt", &h, 1, NULL, 1, NULL, 0, &s);
    return rc ? rc : ox_affine(x, s, 1, ox_float(x, "epsilon"), out);
}

/* Adagrad: r = R / (1 + T decay_factor); g = norm_coefficient X + G;
 * H_new = H + g g; X_new = X - r g / (sqrt(H_new) + epsilon). */
static int t_adagrad(struct ox *x)
{
    int n = 0, rc = tensors(x, "Adagrad", 3, &n);
    for (int i = 0; rc == 0 && i < n; i++) {
        struct ox_val *v = ox_input(x, 2 + i), *g = ox_input(x, 2 + n + i),
                      *h = ox_input(x, 2 + 2 * n + i);
        struct ox_val *r, *t, *den, *rd, *gr, *gg, *hn, *hs, *rg, *step;
        vq_dtype dt = v->meta.dtype;
        if ((rc = rate_and_step(x, dt, &r, &t, NULL)) < 0 ||
            (rc = ox_affine(x, t, ox_float(x, "decay_factor"), 1, &den)) < 0 ||
            (rc = bin(x, "div", r, den, NULL, &rd)) < 0 || (rc = regularized(x, v, g, &gr)) < 0 ||
            (rc = bin(x, "mul", gr, gr, NULL, &gg)) < 0 ||
            (rc = bin(x, "add", h, gg, ox_out(x, n + i), &hn)) < 0 ||
            (rc = root_eps(x, hn, &hs)) < 0 || (rc = bin(x, "mul", rd, gr, NULL, &rg)) < 0 ||
            (rc = bin(x, "div", rg, hs, NULL, &step)) < 0)
            break;
        rc = bin(x, "sub", v, step, ox_out(x, i), NULL);
    }
    return rc;
}

/* Adam: g = norm_coefficient X + G; V_new = alpha V + (1 - alpha) g;
 * H_new = beta H + (1 - beta) g g; r = T > 0 ? R sqrt(1 - beta^T) /
 * (1 - alpha^T) : R; X_new = (1 - norm_coefficient_post) (X - r V_new /
 * (sqrt(H_new) + epsilon)). */
static int t_adam(struct ox *x)
{
    double alpha = ox_float(x, "alpha"), beta = ox_float(x, "beta");
    double post = ox_float(x, "norm_coefficient_post");
    int n = 0, rc = tensors(x, "Adam", 4, &n);
    for (int i = 0; rc == 0 && i < n; i++) {
        struct ox_val *v = ox_input(x, 2 + i), *g = ox_input(x, 2 + n + i),
                      *m = ox_input(x, 2 + 2 * n + i), *h = ox_input(x, 2 + 3 * n + i);
        struct ox_val *r, *t, *pos, *gr, *am, *ag, *vn, *gg, *bh, *bg, *hn, *hs;
        struct ox_val *ac, *bc, *apow, *bpow, *num, *den, *sq, *rnum, *radj, *rsel, *q, *step, *xn;
        vq_dtype dt = v->meta.dtype;
        const char *xname = post != 0 ? NULL : ox_out(x, i);
        if ((rc = rate_and_step(x, dt, &r, &t, &pos)) < 0 || (rc = regularized(x, v, g, &gr)) < 0 ||
            (rc = ox_affine(x, m, alpha, 0, &am)) < 0 ||
            (rc = ox_affine(x, gr, 1 - alpha, 0, &ag)) < 0 ||
            (rc = bin(x, "add", am, ag, ox_out(x, n + i), &vn)) < 0 ||
            (rc = bin(x, "mul", gr, gr, NULL, &gg)) < 0 ||
            (rc = ox_affine(x, h, beta, 0, &bh)) < 0 ||
            (rc = ox_affine(x, gg, 1 - beta, 0, &bg)) < 0 ||
            (rc = bin(x, "add", bh, bg, ox_out(x, 2 * n + i), &hn)) < 0 ||
            (rc = root_eps(x, hn, &hs)) < 0)
            break;
        /* the bias correction, whose value at T = 0 (0 / 0) where drops */
        if ((rc = ox_scalar(x, dt, alpha, &ac)) < 0 || (rc = ox_scalar(x, dt, beta, &bc)) < 0 ||
            (rc = bin(x, "pow", bc, t, NULL, &bpow)) < 0 ||
            (rc = ox_affine(x, bpow, -1, 1, &num)) < 0 ||
            (rc = ox_emit(x, "sqrt", &num, 1, NULL, 1, NULL, 0, &sq)) < 0 ||
            (rc = bin(x, "mul", r, sq, NULL, &rnum)) < 0 ||
            (rc = bin(x, "pow", ac, t, NULL, &apow)) < 0 ||
            (rc = ox_affine(x, apow, -1, 1, &den)) < 0 ||
            (rc = bin(x, "div", rnum, den, NULL, &radj)) < 0 ||
            (rc = ox_select(x, pos, radj, r, NULL, &rsel)) < 0)
            break;
        if ((rc = bin(x, "div", vn, hs, NULL, &q)) < 0 ||
            (rc = bin(x, "mul", rsel, q, NULL, &step)) < 0 ||
            (rc = bin(x, "sub", v, step, xname, &xn)) < 0)
            break;
        if (post != 0) {
            vq_attr a = VQ_ATTR_F("scale", 1 - post);
            const char *o = ox_out(x, i);
            rc = ox_emit(x, "scale", &xn, 1, &o, 1, &a, 1, NULL);
        }
    }
    return rc;
}

/* Momentum: g = norm_coefficient X + G; b = T > 0 ? beta : 1; V_new =
 * alpha V + b g; X_new = X - R V_new (standard) or X - R (g + alpha V_new)
 * (nesterov). */
static int t_momentum(struct ox *x)
{
    static const char *const need[] = {"alpha", "beta", "mode", "norm_coefficient"};
    for (int i = 0; i < 4; i++)
        if (!ox_given(x, need[i]))
            return ox_fail(x, VQ_EINVAL, "attribute %s is missing; Momentum requires it", need[i]);
    const char *mode = ox_str(x, "mode");
    bool nesterov = !strcmp(mode, "nesterov");
    if (!nesterov && strcmp(mode, "standard"))
        return ox_fail(x, VQ_EINVAL, "mode is \"%s\", not \"standard\" or \"nesterov\"", mode);
    double alpha = ox_float(x, "alpha"), beta = ox_float(x, "beta");
    int n = 0, rc = tensors(x, "Momentum", 3, &n);
    for (int i = 0; rc == 0 && i < n; i++) {
        struct ox_val *v = ox_input(x, 2 + i), *g = ox_input(x, 2 + n + i),
                      *m = ox_input(x, 2 + 2 * n + i);
        struct ox_val *r, *t, *pos, *gr, *bc, *one, *b, *am, *bg, *vn, *dir, *step;
        vq_dtype dt = v->meta.dtype;
        if ((rc = rate_and_step(x, dt, &r, &t, &pos)) < 0 || (rc = regularized(x, v, g, &gr)) < 0 ||
            (rc = ox_scalar(x, dt, beta, &bc)) < 0 || (rc = ox_scalar(x, dt, 1, &one)) < 0 ||
            (rc = ox_select(x, pos, bc, one, NULL, &b)) < 0 ||
            (rc = ox_affine(x, m, alpha, 0, &am)) < 0 ||
            (rc = bin(x, "mul", b, gr, NULL, &bg)) < 0 ||
            (rc = bin(x, "add", am, bg, ox_out(x, n + i), &vn)) < 0)
            break;
        dir = vn;
        if (nesterov) {
            struct ox_val *av;
            if ((rc = ox_affine(x, vn, alpha, 0, &av)) < 0 ||
                (rc = bin(x, "add", gr, av, NULL, &dir)) < 0)
                break;
        }
        if ((rc = bin(x, "mul", r, dir, NULL, &step)) < 0)
            break;
        rc = bin(x, "sub", v, step, ox_out(x, i), NULL);
    }
    return rc;
}

const struct ox_op ox_op_Adagrad = {
    .fn = t_adagrad,
    .min_in = 5,
    .max_in = OX_ANY,
    .out0 = true,
    .attrs = OX_ATTRS(OX_FLOAT("decay_factor", 0), OX_FLOAT("epsilon", 1e-6),
                      OX_FLOAT("norm_coefficient", 0)),
    .domain = OX_TRAINING,
};
const struct ox_op ox_op_Adam = {
    .fn = t_adam,
    .min_in = 6,
    .max_in = OX_ANY,
    .out0 = true,
    .attrs = OX_ATTRS(OX_FLOAT("alpha", 0.9), OX_FLOAT("beta", 0.999), OX_FLOAT("epsilon", 1e-6),
                      OX_FLOAT("norm_coefficient", 0), OX_FLOAT("norm_coefficient_post", 0)),
    .domain = OX_TRAINING,
};
const struct ox_op ox_op_Momentum = {
    .fn = t_momentum,
    .min_in = 5,
    .max_in = OX_ANY,
    .out0 = true,
    .attrs = OX_ATTRS(OX_FLOAT("alpha", 0), OX_FLOAT("beta", 0), OX_STR("mode", "", 16),
                      OX_FLOAT("norm_coefficient", 0)),
    .domain = OX_TRAINING,
};
