/* Shapes partly known at import. A model exported with a dynamic batch or
 * sequence dim computes its reshapes' targets at run time (Shape, Gather,
 * Unsqueeze, Concat, arithmetic), and those targets mix dims only the feed
 * knows with dims the model fixes ([batch, seq, 4, 8]). The program keeps
 * that computation (the shape op, then ordinary integer ops), and the ops
 * reading a shape read it when they run; but the importer's own view of
 * each value's shape should stay as precise as the model allows, or the
 * translations that need a known dim (a LayerNormalization's width, a
 * MatMul's inner size) would refuse the model.
 *
 * So a small integer value (0-D or 1-D, at most VQ_MAX_DIMS entries) made
 * at run time carries the entries known at import (struct ox_val's pmask
 * and pv): the shape op's known dims, and what ox_emit derives from them
 * for the ops shape arithmetic uses (ox_part_emitted). An entry computed
 * from known entries only is known; a value all of whose entries are
 * known becomes a known value (konst), so everything after it folds at
 * import as before. */
#include "onnx_internal.h"

#include <string.h>

bool ox_entries(const struct ox_val *v, int64_t *vals, unsigned *mask, int *n)
{
    const vq__meta *m = &v->meta;
    if ((m->dtype != VQ_I64 && m->dtype != VQ_I32) || m->ndim > 1)
        return false;
    int64_t len = m->ndim ? m->shape[0] : 1;
    if (len < 0 || len > VQ_MAX_DIMS)
        return false;
    *n = (int)len;
    if (v->konst) {
        for (int i = 0; i < *n; i++)
            vals[i] = m->dtype == VQ_I64 ? ((const int64_t *)v->konst->data)[i]
                                         : ((const int32_t *)v->konst->data)[i];
        *mask = (1u << *n) - 1;
        return true;
    }
    *mask = v->pmask;
    memcpy(vals, v->pv, (size_t)*n * sizeof *vals);
    return true;
}

/* A tensor of v's dtype and shape holding vals (unknown entries as 1, a
 * harmless stand-in: the result's entries that depend on them are masked
 * out). */
static int stand_in(const struct ox_val *v, const int64_t *vals, unsigned mask, int n,
                    vq_tensor **out)
{
    int rc = vq_tensor_new(out, v->meta.dtype, v->meta.ndim, v->meta.shape);
    for (int i = 0; rc == 0 && i < n; i++) {
        int64_t e = mask & (1u << i) ? vals[i] : 1;
        if (v->meta.dtype == VQ_I64)
            ((int64_t *)(*out)->data)[i] = e;
        else
            ((int32_t *)(*out)->data)[i] = (int32_t)e;
    }
    return rc;
}

/* Which entries of the result are known, for ops that route entries
 * (reshape, cast, gather, slice, concat): running the op on the inputs'
 * entry numbers says where each result entry comes from. */
static int routed_mask(const char *type, struct ox_val *const *in, int nin, const unsigned *masks,
                       const int *ns, const vq_attr *attrs, int nattrs, unsigned *out)
{
    vq_tensor *ti[VQ__MAX_SLOTS] = {0}, *res = NULL;
    int base[VQ__MAX_SLOTS + 1] = {0}, rc = 0;
    int ndata = strcmp(type, "concat") ? 1 : nin; /* gather's indices stay themselves */
    for (int i = 0; i < nin && rc == 0; i++) {
        base[i + 1] = base[i] + (i < ndata ? ns[i] : 0);
        if (i >= ndata) {
            rc = vq_tensor_new(&ti[i], in[i]->meta.dtype, in[i]->meta.ndim, in[i]->meta.shape);
            if (rc == 0)
                memcpy(ti[i]->data, in[i]->konst->data, ti[i]->nbytes);
            continue;
        }
        rc = vq_tensor_new(&ti[i], VQ_I64, in[i]->meta.ndim, in[i]->meta.shape);
        for (int k = 0; rc == 0 && k < ns[i]; k++)
            ((int64_t *)ti[i]->data)[k] = base[i] + k;
    }
    vq_tensor *src[VQ__MAX_SLOTS];
    for (int i = 0; i < nin; i++)
        src[i] = ti[i];
    /* cast routes its entry as it is */
    if (rc == 0 && !strcmp(type, "cast"))
        res = vq_tensor_retain(ti[0]);
    else if (rc == 0)
        rc = vq_op_run(NULL, type, src, nin, &res, 1, attrs, nattrs);
    *out = 0;
    unsigned all = 0;
    for (int i = 0; i < ndata; i++)
        all |= masks[i] << base[i];
    for (int64_t k = 0; rc == 0 && k < res->numel; k++) {
        int64_t from = ((const int64_t *)res->data)[k];
        if (from >= 0 && from < base[ndata] && (all & (1u << from)))
            *out |= 1u << k;
    }
    vq_tensor_release(res);
    for (int i = 0; i < nin; i++)
        vq_tensor_release(ti[i]);
    return rc;
}

static bool is_routing(const char *type)
{
    static const char *const routing[] = {"reshape", "cast", "gather", "slice", "concat"};
    for (size_t i = 0; i < sizeof routing / sizeof routing[0]; i++)
        if (!strcmp(type, routing[i]))
            return true;
    return false;
}

static bool is_arithmetic(const char *type)
{
    static const char *const arith[] = {"add", "sub", "mul", "div", "maximum", "minimum"};
    for (size_t i = 0; i < sizeof arith / sizeof arith[0]; i++)
        if (!strcmp(type, arith[i]))
            return true;
    return false;
}

int ox_part_emitted(struct ox *x, const char *type, struct ox_val *const *in, int nin,
                    struct ox_val *out, const vq_attr *attrs, int nattrs)
{
    int64_t vals[VQ__MAX_SLOTS][VQ_MAX_DIMS], ov[VQ_MAX_DIMS];
    unsigned masks[VQ__MAX_SLOTS], om = 0;
    int ns[VQ__MAX_SLOTS], on;
    bool routing = is_routing(type), arith = is_arithmetic(type);
    if ((!routing && !arith) || !ox_entries(out, ov, &om, &on))
        return 0;
    for (int i = 1; routing && strcmp(type, "concat") && i < nin; i++)
        if (!in[i]->konst)
            return 0; /* entries picked by indices (a shape) known only at run time */
    bool any = false;
    for (int i = 0; i < nin; i++) {
        if (!ox_entries(in[i], vals[i], &masks[i], &ns[i]))
            return 0;
        any |= masks[i] != 0;
    }
    if (!any)
        return 0;
    int rc = 0;
    if (routing) {
        rc = routed_mask(type, in, nin, masks, ns, attrs, nattrs, &om);
    } else { /* elementwise: both operands' entries known (a scalar broadcasts) */
        for (int i = 0; i < nin; i++)
            if (ns[i] != on && ns[i] != 1)
                return 0;
        om = (1u << on) - 1;
        for (int i = 0; i < nin; i++)
            for (int k = 0; k < on; k++)
                if (!(masks[i] & (1u << (ns[i] == 1 ? 0 : k))))
                    om &= ~(1u << k);
    }
    if (rc < 0 || om == 0)
        return rc < 0 ? ox_fail(x, rc, "%s", vq_errmsg()) : 0;
    vq_tensor *ti[VQ__MAX_SLOTS] = {0}, *res = NULL;
    for (int i = 0; i < nin && rc == 0; i++)
        rc = stand_in(in[i], vals[i], masks[i], ns[i], &ti[i]);
    if (rc == 0)
        rc = vq_op_run(NULL, type, ti, nin, &res, 1, attrs, nattrs);
    for (int i = 0; i < nin; i++)
        vq_tensor_release(ti[i]);
    if (rc < 0) /* the stand-ins upset the op (a division by a stand-in 0): no entries */
        return 0;
    if (om == (1u << on) - 1) {
        out->konst = res; /* all known: later ops fold */
        return 0;
    }
    for (int k = 0; k < on; k++)
        out->pv[k] = res->dtype == VQ_I64 ? ((const int64_t *)res->data)[k]
                                          : ((const int32_t *)res->data)[k];
    out->pmask = om;
    vq_tensor_release(res);
    return 0;
}

int ox_shape_meta(const struct ox_val *shape, const vq__meta *x, bool allowzero, vq__meta *out)
{
    int64_t vals[VQ_MAX_DIMS];
    unsigned mask;
    int n;
    if (!ox_entries(shape, vals, &mask, &n) || shape->meta.ndim != 1)
        return -1;
    out->ndim = n;
    for (int i = 0; i < n; i++) {
        int64_t d = mask & (1u << i) ? vals[i] : -1;
        if (d == 0 && !allowzero && x)
            d = i < x->ndim ? x->shape[i] : -1;
        out->shape[i] = d < 0 ? -1 : d;
    }
    return 0;
}
