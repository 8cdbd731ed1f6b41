/* Optimizers as program ops (vq_optimizer_minimize): vq_append_backward
 * (autodiff.c) gives each parameter its gradient; this file appends to
 * main the ops that clip and decay those gradients (opt's controls) and
 * the update op of each parameter (sgd, momentum, adam), and declares the
 * optimizer's state vars in both programs with their zero fill in startup.
 * The rate is the attribute learning_rate or a var, such as the one
 * vq_lr_schedule_build (schedule.c) declares. */
#include "graph_internal.h"

#include <varq/train.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_float(vq_dtype dt)
{
    return dt == VQ_F32 || dt == VQ_F64;
}

/* Declares state var `name` like parameter v in both programs and appends a
 * zero fill to startup. */
static int add_state(vq_program *main, vq_program *startup, int v, const char *suffix, vq_dtype dt,
                     int ndim, const int64_t *shape, char *name, size_t size)
{
    snprintf(name, size, "%s%s", main->vars[v].name, suffix);
    int rc = vq_program_add_var(main, 0, name, dt, ndim, shape, true);
    if (rc >= 0 && vq__program_find_var(startup, name) < 0)
        rc = vq_program_add_var(startup, 0, name, dt, ndim, shape, true);
    vq_attr a[3] = {VQ_ATTR_IS("shape", shape, ndim), VQ_ATTR_S("dtype", vq_dtype_name(dt)),
                    VQ_ATTR_F("value", 0)};
    if (rc >= 0)
        rc = vq_program_add_op(startup, 0, "fill_constant", NULL, 0, (const char *const[]){name}, 1,
                               a, 3);
    return rc < 0 ? rc : 0;
}

/* A scalar constant of dtype dt named name in main (a fill_constant op at
 * this point of the program). */
static int scalar_const(vq_program *main, const char *name, vq_dtype dt, double value)
{
    if (vq__program_find_var(main, name) >= 0)
        return 0;
    int rc = vq_program_add_var(main, 0, name, dt, 0, NULL, false);
    vq_attr a[3] = {VQ_ATTR_IS("shape", NULL, 0), VQ_ATTR_S("dtype", vq_dtype_name(dt)),
                    VQ_ATTR_F("value", value)};
    if (rc >= 0)
        rc = vq_program_add_op(main, 0, "fill_constant", NULL, 0, (const char *[]){name}, 1, a, 3);
    return rc < 0 ? rc : 0;
}

/* out = type(in...) into a new var like var v of main (dtype dt, v's shape
 * unless scalar). */
static int opt_op(vq_program *main, const char *type, const char *const *in, int nin,
                  const char *out, int v, vq_dtype dt, bool scalar, const vq_attr *attrs,
                  int nattrs)
{
    vq__pvar d = main->vars[v];
    int rc = vq_program_add_var(main, 0, out, dt, scalar ? 0 : d.ndim, d.shape, false);
    if (rc >= 0)
        rc = vq_program_add_op(main, 0, type, in, nin, (const char *[]){out}, 1, attrs, nattrs);
    return rc < 0 ? rc : 0;
}

/* *grad (malloc'd) becomes a copy of name. */
static int grad_becomes(char **grad, const char *name)
{
    char *c = vq__strdup(name);
    if (!c)
        return vq__fail(VQ_ENOMEM, "vq_optimizer_minimize: out of memory");
    free(*grad);
    *grad = c;
    return 0;
}

/* The gradient of each updated parameter after clipping and weight decay
 * (opt's controls): grad[i] (malloc'd names, in place of "<w>@GRAD"). */
static int opt_controls(vq_program *main, const vq_optimizer *opt, const int *params, int n,
                        char **grad)
{
    int rc = 0;
    char a[320], b[320];
    for (int i = 0; i < n && rc == 0 && opt->clip_value > 0; i++) {
        vq_dtype dt = main->vars[params[i]].dtype;
        snprintf(a, sizeof a, "clip_value@lo@%s", vq_dtype_name(dt));
        snprintf(b, sizeof b, "clip_value@hi@%s", vq_dtype_name(dt));
        if ((rc = scalar_const(main, a, dt, -opt->clip_value)) < 0 ||
            (rc = scalar_const(main, b, dt, opt->clip_value)) < 0)
            break;
        char lo[320], hi[320];
        snprintf(lo, sizeof lo, "%s@CLIPLO", grad[i]);
        snprintf(hi, sizeof hi, "%s@CLIP", grad[i]);
        if ((rc = opt_op(main, "maximum", (const char *[]){grad[i], a}, 2, lo, params[i], dt, false,
                         NULL, 0)) < 0 ||
            (rc = opt_op(main, "minimum", (const char *[]){lo, b}, 2, hi, params[i], dt, false,
                         NULL, 0)) < 0)
            break;
        rc = grad_becomes(&grad[i], hi);
    }
    if (rc == 0 && opt->clip_norm > 0 && n > 0) {
        /* total = sqrt(sum of every gradient's squares), in f64 */
        char acc[320] = "";
        for (int i = 0; i < n && rc == 0; i++) {
            vq_dtype dt = main->vars[params[i]].dtype;
            char sq[320], s[320], s64[320], sum[320];
            snprintf(sq, sizeof sq, "%s@SQ", grad[i]);
            snprintf(s, sizeof s, "%s@SQSUM", grad[i]);
            snprintf(s64, sizeof s64, "%s@SQSUM64", grad[i]);
            snprintf(sum, sizeof sum, "clip_norm@sum@%d", i);
            vq_attr f64 = VQ_ATTR_S("dtype", "f64");
            if ((rc = opt_op(main, "mul", (const char *[]){grad[i], grad[i]}, 2, sq, params[i], dt,
                             false, NULL, 0)) < 0 ||
                (rc = opt_op(main, "sum", (const char *[]){sq}, 1, s, params[i], dt, true, NULL,
                             0)) < 0 ||
                (rc = opt_op(main, "cast", (const char *[]){s}, 1, s64, params[i], VQ_F64, true,
                             &f64, 1)) < 0)
                break;
            if (i > 0)
                rc = opt_op(main, "add", (const char *[]){acc, s64}, 2, sum, params[i], VQ_F64,
                            true, NULL, 0);
            snprintf(acc, sizeof acc, "%s", i > 0 ? sum : s64);
        }
        vq_attr eps[2] = {VQ_ATTR_F("scale", 1), VQ_ATTR_F("bias", 1e-6)};
        if (rc == 0)
            rc = scalar_const(main, "clip_norm@max", VQ_F64, opt->clip_norm);
        if (rc == 0)
            rc = scalar_const(main, "clip_norm@one", VQ_F64, 1);
        if (rc == 0)
            rc = opt_op(main, "sqrt", (const char *[]){acc}, 1, "clip_norm@total", params[0],
                        VQ_F64, true, NULL, 0);
        if (rc == 0)
            rc = opt_op(main, "scale", (const char *[]){"clip_norm@total"}, 1, "clip_norm@den",
                        params[0], VQ_F64, true, eps, 2);
        if (rc == 0)
            rc = opt_op(main, "div", (const char *[]){"clip_norm@max", "clip_norm@den"}, 2,
                        "clip_norm@ratio", params[0], VQ_F64, true, NULL, 0);
        if (rc == 0)
            rc = opt_op(main, "minimum", (const char *[]){"clip_norm@ratio", "clip_norm@one"}, 2,
                        "clip_norm@coef", params[0], VQ_F64, true, NULL, 0);
        for (int i = 0; i < n && rc == 0; i++) {
            vq_dtype dt = main->vars[params[i]].dtype;
            const char *coef = "clip_norm@coef";
            char cast[320], out[320];
            if (dt != VQ_F64) {
                snprintf(cast, sizeof cast, "clip_norm@coef@%s", vq_dtype_name(dt));
                vq_attr to = VQ_ATTR_S("dtype", vq_dtype_name(dt));
                if (vq__program_find_var(main, cast) < 0 &&
                    (rc = opt_op(main, "cast", (const char *[]){coef}, 1, cast, params[i], dt, true,
                                 &to, 1)) < 0)
                    break;
                coef = cast;
            }
            snprintf(out, sizeof out, "%s@CLIPNORM", grad[i]);
            if ((rc = opt_op(main, "mul", (const char *[]){grad[i], coef}, 2, out, params[i], dt,
                             false, NULL, 0)) < 0)
                break;
            rc = grad_becomes(&grad[i], out);
        }
    }
    for (int i = 0; i < n && rc == 0 && opt->weight_decay > 0 && !opt->decoupled; i++) {
        const char *w = main->vars[params[i]].name;
        vq_dtype dt = main->vars[params[i]].dtype;
        char d[320], out[320];
        snprintf(d, sizeof d, "%s@DECAY", w);
        snprintf(out, sizeof out, "%s@WD", grad[i]);
        vq_attr sc = VQ_ATTR_F("scale", opt->weight_decay);
        if ((rc = opt_op(main, "scale", (const char *[]){w}, 1, d, params[i], dt, false, &sc, 1)) <
                0 ||
            (rc = opt_op(main, "add", (const char *[]){grad[i], d}, 2, out, params[i], dt, false,
                         NULL, 0)) < 0)
            break;
        rc = grad_becomes(&grad[i], out);
    }
    return rc;
}

/* The name of var src of main (a float scalar) in dtype dt, into out:
 * src itself when it has that dtype, else "<src>@<dt>" (src's shape, []
 * or [1]), cast from it by an op appended to main the first time it is
 * asked for. */
static int scalar_in(vq_program *main, const char *src, vq_dtype dt, char *out, size_t size)
{
    int v = vq__program_find_var(main, src);
    if (main->vars[v].dtype == dt) {
        snprintf(out, size, "%s", src);
        return 0;
    }
    snprintf(out, size, "%s@%s", src, vq_dtype_name(dt));
    if (vq__program_find_var(main, out) >= 0)
        return 0;
    vq_attr to = VQ_ATTR_S("dtype", vq_dtype_name(dt));
    return opt_op(main, "cast", (const char *[]){src}, 1, out, v, dt, false, &to, 1);
}

/* AdamW's decay of parameter w when the learning rate is the var lr:
 * w *= 1 - lr * wd, the factor computed in double from lr (as PyTorch
 * computes it from its float lr) once per run and dtype, then rounded to
 * w's dtype, as PyTorch's mul_ rounds its scalar. */
static int adamw_decay_by_var(vq_program *main, const char *lr, double wd, int w)
{
    char lr64[320], dec[320], factor[320], wds[32];
    int rc = scalar_in(main, lr, VQ_F64, lr64, sizeof lr64);
    /* named for wd too: another vq_optimizer_minimize on the same rate may
     * decay by another amount */
    snprintf(wds, sizeof wds, "%g", wd);
    if (strtod(wds, NULL) != wd)
        snprintf(wds, sizeof wds, "%.17g", wd);
    snprintf(dec, sizeof dec, "%s@ADAMW_DECAY@%s", lr, wds);
    vq_attr sc[2] = {VQ_ATTR_F("scale", -wd), VQ_ATTR_F("bias", 1)};
    if (rc == 0 && vq__program_find_var(main, dec) < 0)
        rc = opt_op(main, "scale", (const char *[]){lr64}, 1, dec, vq__program_find_var(main, lr64),
                    VQ_F64, false, sc, 2);
    if (rc == 0)
        rc = scalar_in(main, dec, main->vars[w].dtype, factor, sizeof factor);
    const char *name = main->vars[w].name;
    if (rc == 0)
        rc = vq_program_add_op(main, 0, "mul", (const char *const[]){name, factor}, 2,
                               (const char *const[]){name}, 1, NULL, 0);
    return rc < 0 ? rc : 0;
}

/* The vars not in opt->parameters, as vq_append_backward's no_grad
 * (*out malloc'd, *n of them). */
static int frozen_vars(vq_program *main, const vq_optimizer *opt, const char ***out, int *n)
{
    *out = NULL;
    *n = 0;
    if (!opt->parameters)
        return 0;
    for (int i = 0; i < opt->nparameters; i++) {
        int v = opt->parameters[i] ? vq__program_find_var(main, opt->parameters[i]) : -1;
        if (v < 0 || !main->vars[v].persistable || !is_float(main->vars[v].dtype))
            return vq__fail(VQ_EINVAL,
                            "vq_optimizer_minimize: parameter %s is not a float "
                            "persistable var of the program",
                            opt->parameters[i] ? opt->parameters[i] : "(NULL)");
    }
    const char **list = vq__malloc(((size_t)main->nvars + 1) * sizeof *list);
    if (!list)
        return vq__fail(VQ_ENOMEM, "vq_optimizer_minimize: out of memory");
    for (int v = 0; v < main->nvars; v++) {
        if (!main->vars[v].persistable || !is_float(main->vars[v].dtype))
            continue;
        bool listed = false;
        for (int i = 0; i < opt->nparameters && !listed; i++)
            listed = !strcmp(opt->parameters[i], main->vars[v].name);
        if (!listed)
            list[(*n)++] = main->vars[v].name;
    }
    *out = list;
    return 0;
}

/* vq_optimizer_minimize's arguments checked: 0 or VQ_EINVAL saying why. */
static int optimizer_check(vq_program *main, vq_program *startup, const char *loss,
                           const vq_optimizer *opt)
{
    if (!main || !startup || !loss || !opt)
        return vq__fail(VQ_EINVAL, "vq_optimizer_minimize: NULL argument");
    if ((!opt->learning_rate_var && !(opt->learning_rate >= 0)) ||
        (unsigned)opt->kind > VQ_OPT_ADAM)
        return vq__fail(VQ_EINVAL, "vq_optimizer_minimize: bad kind or learning rate");
    const char *lr_var = opt->learning_rate_var;
    if (lr_var) {
        int v = vq__program_find_var(main, lr_var);
        const vq__pvar *d = v >= 0 ? &main->vars[v] : NULL;
        if (!d || d->block != 0 || !is_float(d->dtype) ||
            !(d->ndim == 0 || (d->ndim == 1 && d->shape[0] == 1)))
            return vq__fail(VQ_EINVAL,
                            "vq_optimizer_minimize: learning_rate_var %s is not a "
                            "float var of block 0 of main with one element ([] or "
                            "[1])",
                            lr_var);
    }
    if (!(opt->weight_decay >= 0) || !(opt->clip_value >= 0) || !(opt->clip_norm >= 0) ||
        opt->nparameters < 0 || (opt->nparameters > 0 && !opt->parameters))
        return vq__fail(VQ_EINVAL, "vq_optimizer_minimize: a negative weight_decay, "
                                   "clip_value or clip_norm, or a bad parameter list");
    if (opt->decoupled && opt->kind != VQ_OPT_ADAM)
        return vq__fail(VQ_EINVAL, "vq_optimizer_minimize: decoupled weight decay is AdamW's: "
                                   "kind must be VQ_OPT_ADAM");
    return 0;
}

/* The update of parameter v of main by its gradient g (opt's kind), its
 * state declared in both programs: 0 or the failure. */
static int param_update(vq_program *main, vq_program *startup, const vq_optimizer *opt, int v,
                        const char *g)
{
    const char *lr_var = opt->learning_rate_var;
    int rc = 0;
    char s1[300], s2[300], s3[300];
    vq__pvar d = main->vars[v];
    const char *w = d.name;
    /* The rate: the attribute learning_rate (first of the attributes
     * below), or the var as the ops' last input LearningRate, in the
     * parameter's dtype (nattr and nlr drop the one not used). */
    char lr_in[320] = "";
    int nattr = lr_var ? 1 : 0, nlr = lr_var ? 1 : 0;
    if (lr_var)
        rc = scalar_in(main, lr_var, d.dtype, lr_in, sizeof lr_in);
    vq_attr lr = VQ_ATTR_F("learning_rate", opt->learning_rate);
    switch (rc < 0 ? -1 : (int)opt->kind) {
    case VQ_OPT_SGD:
        rc = vq_program_add_op(main, 0, "sgd", (const char *const[]){w, g, lr_in}, 2 + nlr,
                               (const char *const[]){w}, 1, &lr, 1 - nattr);
        break;
    case VQ_OPT_MOMENTUM: {
        rc = add_state(main, startup, v, "@VELOCITY", d.dtype, d.ndim, d.shape, s1, sizeof s1);
        vq_attr a[3] = {lr, VQ_ATTR_F("mu", opt->mu ? opt->mu : 0.9),
                        VQ_ATTR_B("use_nesterov", opt->nesterov)};
        if (rc >= 0)
            rc = vq_program_add_op(main, 0, "momentum", (const char *const[]){w, g, s1, lr_in},
                                   3 + nlr, (const char *const[]){w, s1}, 2, a + nattr, 3 - nattr);
        break;
    }
    case VQ_OPT_ADAM: {
        int64_t one[1] = {1};
        if (opt->decoupled && opt->weight_decay > 0 && lr_var) {
            rc = adamw_decay_by_var(main, lr_var, opt->weight_decay, v);
        } else if (opt->decoupled && opt->weight_decay > 0) {
            /* AdamW: param *= 1 - lr * wd, then Adam */
            vq_attr sc = VQ_ATTR_F("scale", 1 - opt->learning_rate * opt->weight_decay);
            rc = vq_program_add_op(main, 0, "scale", (const char *const[]){w}, 1,
                                   (const char *const[]){w}, 1, &sc, 1);
        }
        if (rc >= 0)
            rc = add_state(main, startup, v, "@MOMENT1", d.dtype, d.ndim, d.shape, s1, sizeof s1);
        if (rc >= 0)
            rc = add_state(main, startup, v, "@MOMENT2", d.dtype, d.ndim, d.shape, s2, sizeof s2);
        if (rc >= 0)
            rc = add_state(main, startup, v, "@STEP", VQ_I64, 1, one, s3, sizeof s3);
        vq_attr a[4] = {lr, VQ_ATTR_F("beta1", opt->beta1 ? opt->beta1 : 0.9),
                        VQ_ATTR_F("beta2", opt->beta2 ? opt->beta2 : 0.999),
                        VQ_ATTR_F("epsilon", opt->epsilon ? opt->epsilon : 1e-8)};
        if (rc >= 0)
            rc = vq_program_add_op(main, 0, "adam", (const char *const[]){w, g, s1, s2, s3, lr_in},
                                   5 + nlr, (const char *const[]){w, s1, s2, s3}, 4, a + nattr,
                                   4 - nattr);
        break;
    }
    default: break; /* scalar_in failed */
    }
    return rc;
}

static int optimizer_minimize(vq_program *main, vq_program *startup, const char *loss,
                              const vq_optimizer *opt)
{
    int rc = optimizer_check(main, startup, loss, opt);
    if (rc < 0)
        return rc;
    int nvars = main->nvars; /* parameters are declared before the gradients */
    const char **frozen;
    int nfrozen;
    rc = frozen_vars(main, opt, &frozen, &nfrozen);
    if (rc < 0)
        return rc;
    rc = vq_append_backward(main, loss, frozen, nfrozen);
    free(frozen);
    if (rc < 0)
        return rc;
    /* the parameters with a gradient, and their gradients' names */
    int *params = vq__malloc(((size_t)nvars + 1) * sizeof *params), n = 0;
    char **grad = vq__calloc((size_t)nvars + 1, sizeof *grad);
    if (!params || !grad)
        rc = vq__fail(VQ_ENOMEM, "vq_optimizer_minimize: out of memory");
    for (int v = 0; v < nvars && rc >= 0; v++) {
        if (!main->vars[v].persistable || !is_float(main->vars[v].dtype))
            continue;
        char gname[300];
        snprintf(gname, sizeof gname, "%s@GRAD", main->vars[v].name);
        if (vq__program_find_var(main, gname) < 0)
            continue;
        for (int i = 0; i < main->vars[v].ndim; i++)
            if (main->vars[v].shape[i] < 0)
                rc = vq__fail(VQ_EINVAL, "vq_optimizer_minimize: parameter %s has unknown dims",
                              main->vars[v].name);
        params[n] = v;
        if (rc >= 0 && !(grad[n++] = vq__strdup(gname)))
            rc = vq__fail(VQ_ENOMEM, "vq_optimizer_minimize: out of memory");
    }
    if (rc >= 0)
        rc = opt_controls(main, opt, params, n, grad);
    int updated = 0;
    for (int i = 0; i < n && rc >= 0; i++) {
        rc = param_update(main, startup, opt, params[i], grad[i]);
        updated += rc >= 0;
    }
    for (int i = 0; grad && i < n; i++)
        free(grad[i]);
    free(grad);
    free(params);
    return rc < 0 ? rc : updated;
}

VQ_API int vq_optimizer_minimize(vq_program *main, vq_program *startup, const char *loss,
                                 const vq_optimizer *opt)
{
    return vq__named_failure(optimizer_minimize(main, startup, loss, opt), "vq_optimizer_minimize");
}
