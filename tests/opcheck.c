/* Op test helpers (see opcheck.h). The gradient check plays the part of the
 * graph layer's autodiff for a single op: it calls the op's gradient maker
 * with var names, runs each op the maker emits at once on a small
 * name -> tensor table, and compares the input gradients that come out with
 * central differences of L = sum_j <dY_j, Y_j>. */
#include "opcheck.h"

#include "../ops/ops_internal.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t oc_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double oc_uniform(uint64_t *s, double lo, double hi)
{
    return lo + (hi - lo) * (double)(oc_next(s) >> 11) * 0x1p-53;
}

uint64_t oc_seed(const char *suite)
{
    const char *env = getenv("VARQ_TEST_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 0) : 20261123u;
    fprintf(stderr, "%s: seed %llu (VARQ_TEST_SEED replays)\n", suite, (unsigned long long)seed);
    return seed;
}

int64_t oc_bcast_index(int64_t i, int ondim, const int64_t *oshape, int ndim,
                       const int64_t *shape)
{
    int64_t idx = 0, stride = 1;
    for (int d = ondim - 1; d >= 0; d--) {
        int64_t c = i % oshape[d];
        i /= oshape[d];
        int k = d - (ondim - ndim);
        if (k >= 0) {
            idx += (shape[k] == 1 ? 0 : c) * stride;
            stride *= shape[k];
        }
    }
    return idx;
}

const struct oc_bcast_case oc_bcast_cases[] = {
    {2, 2, 2, {3, 4}, {3, 4}, {3, 4}},
    {2, 1, 2, {3, 4}, {4}, {3, 4}},
    {2, 2, 2, {3, 1}, {1, 4}, {3, 4}},
    {0, 2, 2, {0}, {2, 3}, {2, 3}},
    {3, 2, 3, {2, 1, 3}, {4, 1}, {2, 4, 3}},
    {2, 2, 2, {0, 3}, {1, 3}, {0, 3}},
    {1, 1, 1, {1}, {5}, {5}},
    {4, 4, 4, {1, 2, 1, 3}, {2, 1, 2, 1}, {2, 2, 2, 3}},
    {2, 2, 2, {1, 1}, {1, 1}, {1, 1}},
    {2, 0, 2, {3, 4}, {0}, {3, 4}}, /* a scalar Y */
    {2, 1, 2, {4, 1}, {1}, {4, 1}}, /* a bias: one element for every row */
};
const int oc_nbcast_cases = (int)(sizeof oc_bcast_cases / sizeof oc_bcast_cases[0]);

double oc_get(vq_tensor *t, int64_t i)
{
    void *d = vq_tensor_data(t);
    switch (vq_tensor_dtype(t)) {
    case VQ_F32: return ((float *)d)[i];
    case VQ_F64: return ((double *)d)[i];
    case VQ_I32: return ((int32_t *)d)[i];
    case VQ_I64: return (double)((int64_t *)d)[i];
    case VQ_BOOL: return ((uint8_t *)d)[i];
    default: return vq__elem_get(vq_tensor_dtype(t), d, i); /* the added dtypes */
    }
}

void oc_set(vq_tensor *t, int64_t i, double v)
{
    void *d = vq_tensor_data(t);
    switch (vq_tensor_dtype(t)) {
    case VQ_F32: ((float *)d)[i] = (float)v; break;
    case VQ_F64: ((double *)d)[i] = v; break;
    case VQ_I32: ((int32_t *)d)[i] = (int32_t)floor(v); break;
    case VQ_I64: ((int64_t *)d)[i] = (int64_t)floor(v); break;
    case VQ_BOOL: ((uint8_t *)d)[i] = v != 0; break;
    default: vq__elem_set(vq_tensor_dtype(t), d, i, v); break; /* rounded as cast rounds */
    }
}

vq_tensor *oc_rand(uint64_t *rng, vq_dtype dt, int ndim, const int64_t *shape, double lo,
                   double hi)
{
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, dt, ndim, shape), 0, "%s", vq_errmsg());
    for (int64_t i = 0; i < vq_tensor_numel(t); i++)
        oc_set(t, i, dt == VQ_BOOL ? (double)(oc_next(rng) & 1) : oc_uniform(rng, lo, hi));
    return t;
}

vq_tensor *oc_from(vq_dtype dt, int ndim, const int64_t *shape, const double *values)
{
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, dt, ndim, shape), 0, "%s", vq_errmsg());
    for (int64_t i = 0; i < vq_tensor_numel(t); i++)
        oc_set(t, i, values[i]);
    return t;
}

void oc_run(const char *type, vq_tensor *const *in, int nin, vq_tensor **out, int nout,
            const vq_attr *attrs, int nattrs)
{
    for (int i = 0; i < nout; i++)
        out[i] = NULL;
    int rc = vq_op_run(NULL, type, in, nin, out, nout, attrs, nattrs);
    cr_assert_eq(rc, 0, "%s failed: %s (%s)", type, vq_errmsg(), vq_strerror(rc));
}

vq_tensor *oc_run1(const char *type, vq_tensor *const *in, int nin, const vq_attr *attrs,
                   int nattrs)
{
    vq_tensor *out;
    oc_run(type, in, nin, &out, 1, attrs, nattrs);
    return out;
}

int oc_try(const char *type, vq_tensor *const *in, int nin, int nout, const vq_attr *attrs,
           int nattrs)
{
    vq_tensor *out[VQ__MAX_SLOTS] = {0};
    int rc = vq_op_run(NULL, type, in, nin, out, nout, attrs, nattrs);
    for (int i = 0; i < nout; i++)
        vq_tensor_release(out[i]);
    return rc;
}

void oc_assert_close(vq_tensor *got, int ndim, const int64_t *shape, const double *want,
                     double rtol, double atol)
{
    cr_assert_eq(vq_tensor_ndim(got), ndim, "rank %d, expected %d", vq_tensor_ndim(got), ndim);
    for (int i = 0; i < ndim; i++)
        cr_assert_eq(vq_tensor_shape(got)[i], shape[i], "dim %d is %lld, expected %lld", i,
                     (long long)vq_tensor_shape(got)[i], (long long)shape[i]);
    for (int64_t i = 0; i < vq_tensor_numel(got); i++) {
        double g = oc_get(got, i);
        bool ok = fabs(g - want[i]) <= atol + rtol * fabs(want[i]) ||
                  (isnan(g) && isnan(want[i])) || (isinf(g) && g == want[i]);
        cr_assert(ok, "element %lld is %.17g, expected %.17g", (long long)i, g, want[i]);
    }
}

/* ---- gradient check ---- */

#define ENV_MAX 64

struct env {
    char *name[ENV_MAX];
    vq_tensor *t[ENV_MAX];
    int n, temps;
    char tempname[ENV_MAX][16];
};

static vq_tensor *env_get(struct env *v, const char *name)
{
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->name[i], name))
            return v->t[i];
    return NULL;
}

static void env_put(struct env *v, const char *name, vq_tensor *t)
{
    cr_assert(!env_get(v, name), "gradient maker wrote %s twice", name);
    cr_assert_lt(v->n, ENV_MAX);
    v->name[v->n] = strdup(name);
    v->t[v->n++] = t;
}

static int env_emit(void *user, const char *type, const char *const *in, int nin,
                    const char *const *out, int nout, const vq_attr *attrs, int nattrs)
{
    struct env *v = user;
    vq_tensor *ti[VQ__MAX_SLOTS], *to[VQ__MAX_SLOTS];
    for (int i = 0; i < nin; i++) {
        ti[i] = env_get(v, in[i]);
        cr_assert(ti[i], "gradient op %s reads %s, which nothing wrote", type, in[i]);
    }
    oc_run(type, ti, nin, to, nout, attrs, nattrs);
    for (int i = 0; i < nout; i++)
        env_put(v, out[i], to[i]);
    return 0;
}

static const char *env_temp(void *user)
{
    struct env *v = user;
    cr_assert_lt(v->temps, ENV_MAX);
    snprintf(v->tempname[v->temps], 16, "tmp%d", v->temps);
    return v->tempname[v->temps++];
}

static double worst;

double oc_worst_grad_error(void)
{
    return worst;
}

/* sum_j <dY_j, Y_j(in)> - sum_j <dY_j, base_j>, summed elementwise so the
 * difference of two nearby values keeps its digits. */
static long double objective_delta(const char *type, vq_tensor *const *in, int nin, int nout,
                                   const vq_attr *attrs, int nattrs, vq_tensor **dy,
                                   vq_tensor **base)
{
    vq_tensor *y[VQ__MAX_SLOTS];
    oc_run(type, in, nin, y, nout, attrs, nattrs);
    long double s = 0;
    for (int j = 0; j < nout; j++) {
        for (int64_t i = 0; i < vq_tensor_numel(y[j]); i++)
            s += (long double)oc_get(dy[j], i) * ((long double)oc_get(y[j], i) - oc_get(base[j], i));
        vq_tensor_release(y[j]);
    }
    return s;
}

double oc_grad_check(const char *type, vq_tensor *const *in, int nin, int nout,
                     const vq_attr *attrs, int nattrs, unsigned wrt, uint64_t *rng)
{
    const vq__op_def *def = vq__op_find(type);
    cr_assert(def, "no op %s", type);
    cr_assert(def->grad, "op %s has no gradient maker", type);
    vq_tensor *y[VQ__MAX_SLOTS], *dy[VQ__MAX_SLOTS];
    oc_run(type, in, nin, y, nout, attrs, nattrs);
    struct env v = {0};
    char names[2][VQ__MAX_SLOTS][24];
    const char *in_names[VQ__MAX_SLOTS], *out_names[VQ__MAX_SLOTS];
    const char *din[VQ__MAX_SLOTS], *dout[VQ__MAX_SLOTS];
    for (int i = 0; i < nin; i++) {
        snprintf(names[0][i], 24, "in%d", i);
        in_names[i] = names[0][i];
        env_put(&v, in_names[i], vq_tensor_retain(in[i]));
        char g[32];
        snprintf(g, sizeof g, "in%d@GRAD", i);
        din[i] = (wrt >> i) & 1 ? strdup(g) : NULL;
    }
    for (int j = 0; j < nout; j++) {
        snprintf(names[1][j], 24, "out%d", j);
        out_names[j] = names[1][j];
        env_put(&v, out_names[j], y[j]);
        dy[j] = oc_rand(rng, vq_tensor_dtype(y[j]), vq_tensor_ndim(y[j]), vq_tensor_shape(y[j]),
                        -1, 1);
        char g[32];
        snprintf(g, sizeof g, "out%d@GRAD", j);
        dout[j] = strdup(g);
        env_put(&v, dout[j], vq_tensor_retain(dy[j]));
    }
    vq__grad g = {.def = def, .in = in_names, .nin = nin, .out = out_names, .nout = nout,
                  .din = din, .dout = dout, .attrs = attrs, .nattrs = nattrs,
                  .emit = env_emit, .temp = env_temp, .user = &v};
    cr_assert_eq(def->grad(&g), 0, "%s's gradient maker failed: %s", type, vq_errmsg());

    const double h = 1e-6;
    double err = 0;
    for (int i = 0; i < nin; i++) {
        if (!din[i])
            continue;
        vq_tensor *a = env_get(&v, din[i]), *x = in[i];
        cr_assert(a, "%s's gradient maker did not produce %s", type, din[i]);
        cr_assert_eq(vq_tensor_numel(a), vq_tensor_numel(x), "%s has the wrong size", din[i]);
        for (int64_t k = 0; k < vq_tensor_numel(x); k++) {
            double x0 = oc_get(x, k);
            oc_set(x, k, x0 + h);
            long double up = objective_delta(type, in, nin, nout, attrs, nattrs, dy, y);
            oc_set(x, k, x0 - h);
            long double down = objective_delta(type, in, nin, nout, attrs, nattrs, dy, y);
            oc_set(x, k, x0);
            double num = (double)((up - down) / (2 * h)), ana = oc_get(a, k);
            double e = fabs(ana - num) / fmax(fmax(fabs(ana), fabs(num)), 1e-3);
            cr_assert(e <= 1e-6, "%s: d/d input %d [%lld]: analytic %.12g, numeric %.12g", type, i,
                      (long long)k, ana, num);
            if (e > err)
                err = e;
        }
    }
    for (int i = 0; i < v.n; i++) {
        free(v.name[i]);
        vq_tensor_release(v.t[i]);
    }
    for (int i = 0; i < nin; i++)
        free((char *)din[i]);
    for (int j = 0; j < nout; j++) {
        free((char *)dout[j]);
        vq_tensor_release(dy[j]);
    }
    if (err > worst)
        worst = err;
    return err;
}

/* A call run by vq_op_run on a 2-worker engine (where large calls are
 * shared with the idle worker) against the same call outside any engine:
 * the same bits. */
void oc_assert_shared_equals_serial(vq_engine *e, const char *type, vq_tensor **in, int nin,
                                    const vq_attr *at, int na)
{
    vq_tensor *ser = oc_run1(type, in, nin, at, na), *par = NULL;
    cr_assert_eq(vq_op_run(e, type, in, nin, &par, 1, at, na), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_wait(par), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_numel(par), vq_tensor_numel(ser));
    cr_assert_eq(memcmp(vq_tensor_data(par), vq_tensor_data(ser),
                        (size_t)vq_tensor_numel(ser) * vq_dtype_size(vq_tensor_dtype(ser))),
                 0, "%s: the shared call differs from the serial one", type);
    vq_tensor_release(par);
    vq_tensor_release(ser);
}
