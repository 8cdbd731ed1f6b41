/* The CUDA host glue of lstm, gru, rnn and their gradient ops
 * (ops/cpu/rnn.c; rnn.cu): the CPU kernel's walk over layers, directions
 * and steps, with its layout of Reserve and its pointer arithmetic line
 * for line, on the op's stream. Per layer and direction the input
 * projection of every step is one cuBLAS product (vq__cuda_gemm), each step
 * one product with W_hh and one cell kernel; backwards, the steps in
 * reverse with one gate-gradient kernel and one product each, then the
 * weights' gradients and dX as whole-sequence products. The directions run
 * one after the other on the stream; the scratch is one buffer of the
 * stream (vq__tensor_empty_at), released on it after the last launch.
 * Compiled only when CUDA is found (have_cuda). */
#include "cuda_internal.h"

#include <string.h>

/* One call's layout, as rnn.c's rnn_call. */
typedef struct gpu_call {
    const vq__kcall *k;
    const vq__cuda_launch *l;
    const vq__rnn_params *p;
    vq_dtype dt;
    size_t es;
    int64_t T, B, H, GH, S, TB, DH;
    int pd;              /* weights per layer and direction */
    const void *h0, *c0; /* NULL: zeros */
    char *res;           /* Reserve, NULL without it */
    char *scr;           /* scratch */
    int64_t per;         /* scratch elements per direction */
    int layer;
    const char *in; /* the layer's input [T, B, in_w] */
    int64_t in_w;
    char *out; /* its output [T, B, D*H] */
} gpu_call;

#define AT(ptr, n) ((char *)(ptr) + (size_t)(n)*c->es)

static int gates_of(int cell)
{
    return cell == VQ__RNN_LSTM ? 4 : cell == VQ__RNN_GRU ? 3 : 1;
}

static void call_init(gpu_call *c, const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__rnn_params *p = k->params;
    const vq_tensor *x = k->in[0];
    *c = (gpu_call){.k = k, .l = l, .p = p, .dt = x->dtype, .es = vq_dtype_size(x->dtype)};
    c->T = x->shape[0];
    c->B = x->shape[1];
    c->H = p->hidden;
    c->GH = (int64_t)gates_of(p->cell) * p->hidden;
    c->S = p->cell == VQ__RNN_LSTM  ? 5 * (int64_t)p->hidden
           : p->cell == VQ__RNN_GRU ? 4 * (int64_t)p->hidden
                                    : 0;
    c->TB = c->T * c->B;
    c->DH = p->dirs * c->H;
    c->pd = p->bias ? 4 : 2;
}

static char *res_layer(const gpu_call *c, int l)
{
    return AT(c->res, (int64_t)l * c->TB * c->p->dirs * (c->H + c->S));
}

static char *res_saved(const gpu_call *c, int l, int d)
{
    return AT(res_layer(c, l), c->TB * c->p->dirs * c->H + d * c->TB * c->S);
}

/* Weight kind k (weight_ih, weight_hh, bias_ih, bias_hh) of layer l and
 * direction d; NULL for a bias the call does not have. */
static const void *weight(const gpu_call *c, int l, int d, int k)
{
    int j = (l * c->p->dirs + d) * c->pd + k;
    return k < c->pd ? c->k->in[1 + j]->data : NULL;
}

static const char *h_prev(const gpu_call *c, int d, int64_t s, int64_t *ld)
{
    int64_t T = c->T, tp = d ? T - s : s - 1;
    if (s == 0) {
        *ld = c->H;
        return c->h0 ? AT(c->h0, (int64_t)(c->layer * c->p->dirs + d) * c->B * c->H) : NULL;
    }
    *ld = c->DH;
    return AT(c->out, tp * c->B * c->DH + d * c->H);
}

static const char *c_prev(const gpu_call *c, int d, int64_t s, const char *saved, int64_t *ld)
{
    int64_t T = c->T, tp = d ? T - s : s - 1;
    if (s == 0) {
        *ld = c->H;
        return c->c0 ? AT(c->c0, (int64_t)(c->layer * c->p->dirs + d) * c->B * c->H) : NULL;
    }
    *ld = c->S;
    return AT(saved, tp * c->B * c->S + 4 * c->H);
}

/* Rows [B, H] from src (rows lds apart; NULL: zeros) into dst (rows ldd
 * apart). */
static int rows_copy(const gpu_call *c, const char *src, int64_t lds, char *dst, int64_t ldd)
{
    if (c->B == 0 || c->H == 0)
        return 0;
    size_t w = (size_t)c->H * c->es;
    if (!src)
        return vq__cuda_op_called(c->k,
                                  cudaMemset2DAsync(dst, (size_t)ldd * c->es, 0, w, (size_t)c->B,
                                                    c->l->s),
                                  "zeroing a state");
    return vq__cuda_op_called(c->k,
                              cudaMemcpy2DAsync(dst, (size_t)ldd * c->es, src, (size_t)lds * c->es,
                                                w, (size_t)c->B, cudaMemcpyDeviceToDevice, c->l->s),
                              "copying a state");
}

static int gemm(const gpu_call *c, int ta, int tb, int64_t m, int64_t n, int64_t kk, const void *a,
                int64_t lda, const void *b, int64_t ldb, double beta, void *out, int64_t ldc)
{
    return vq__cuda_launched(c->k, vq__cuda_gemm(c->dt, ta, tb, m, n, kk, 1, a, lda, b, ldb, beta,
                                                 out, ldc, c->l->s));
}

/* n elements of scratch on the op's stream (*out NULL for none). */
static int scratch(const gpu_call *c, int64_t n, const char *what, vq_tensor **out)
{
    *out = NULL;
    if (n == 0)
        return 0;
    int rc = vq__tensor_empty_at(out, c->k->x->ctx, c->dt, 1, &n, c->l->bs);
    if (rc < 0)
        return vq__fail_prefixed(rc, "%s: its %s of %lld elements", c->k->def->type, what,
                                 (long long)n);
    return 0;
}

/* ---- forward ---- */

/* One direction of the current layer (rnn.c's forward_dir). Scratch (one
 * set, the directions run in turn): the input projection [TB, GH], h
 * W_hh^T [B, GH], the folded biases [GH + H], and without Reserve the
 * cells of one step [B, S]. W^T is cuBLAS's transposed operand, not a
 * copy. */
static int forward_dir(gpu_call *c, int d, char *hn, char *cn)
{
    const vq__rnn_params *p = c->p;
    int64_t T = c->T, B = c->B, H = c->H, GH = c->GH, DH = c->DH;
    char *xp = c->scr, *hp = AT(xp, c->TB * GH), *bx = AT(hp, B * GH), *cells = AT(bx, GH + H);
    char *saved = c->res ? res_saved(c, c->layer, d) : cells;
    int rc =
        vq__cuda_launched(c->k, vq__cuda_rnn_bias(c->dt, p->cell, H, GH, weight(c, c->layer, d, 2),
                                                  weight(c, c->layer, d, 3), bx, c->l->s));
    if (rc == 0)
        rc = gemm(c, 0, 1, c->TB, GH, c->in_w, c->in, c->in_w, weight(c, c->layer, d, 0), c->in_w,
                  0, xp, GH);
    const void *whh = weight(c, c->layer, d, 1);
    for (int64_t s = 0; rc == 0 && s < T; s++) {
        int64_t t = d ? T - 1 - s : s, ldh, ldc = 0;
        const char *hprev = h_prev(c, d, s, &ldh), *prev = NULL;
        if (hprev)
            rc = gemm(c, 0, 1, B, GH, H, hprev, ldh, whh, H, 0, hp, GH);
        else if (B * GH > 0)
            rc = vq__cuda_op_called(c->k, cudaMemsetAsync(hp, 0, (size_t)(B * GH) * c->es, c->l->s),
                                    "zeroing h W_hh");
        if (rc < 0)
            break;
        char *cur = c->res ? AT(saved, t * B * c->S) : cells;
        char *h = AT(c->out, t * B * DH + d * H), *x = AT(xp, t * B * GH);
        if (p->cell == VQ__RNN_LSTM) {
            prev = c->res || s == 0 ? c_prev(c, d, s, saved, &ldc) : AT(cells, 4 * H);
            if (!c->res && s > 0)
                ldc = c->S;
        } else if (p->cell == VQ__RNN_GRU) {
            prev = hprev;
            ldc = ldh;
        }
        rc = vq__cuda_launched(c->k, vq__cuda_rnn_step(c->dt, p->cell, B, H, x, hp, bx, prev, ldc,
                                                       cur, c->S, h, DH, c->l->s));
    }
    if (rc < 0)
        return rc;
    /* the last state: h at the last step in this direction's order */
    int64_t ld = (int64_t)(c->layer * p->dirs + d) * B * H, ldx;
    if (T)
        rc = rows_copy(c, AT(c->out, (d ? 0 : T - 1) * B * DH + d * H), DH, AT(hn, ld), H);
    else
        rc = rows_copy(c, h_prev(c, d, 0, &ldx), H, AT(hn, ld), H);
    if (rc == 0 && p->cell == VQ__RNN_LSTM) {
        const char *cl;
        int64_t ldc;
        if (T == 0)
            cl = c_prev(c, d, 0, saved, &ldc);
        else if (c->res)
            cl = AT(saved, (d ? 0 : T - 1) * B * c->S + 4 * H), ldc = c->S;
        else
            cl = AT(cells, 4 * H), ldc = c->S;
        rc = rows_copy(c, cl, ldc, AT(cn, ld), H);
    }
    return rc;
}

int vq__rnn_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__rnn_params *p = k->params;
    vq_tensor *x = k->in[0];
    gpu_call cc, *c = &cc;
    call_init(c, k, l);
    int nw = p->layers * p->dirs * c->pd, ns = p->cell == VQ__RNN_LSTM ? 2 : 1;
    c->h0 = p->states ? k->in[1 + nw]->data : NULL;
    c->c0 = p->states && ns == 2 ? k->in[2 + nw]->data : NULL;
    char *hn = k->out[1]->data, *cn = ns == 2 ? k->out[2]->data : NULL;
    c->res = p->reserve ? k->out[1 + ns]->data : NULL;
    int64_t DH = c->DH, ybufs = !c->res && p->layers > 1 ? 2 * c->TB * DH : 0;
    c->per = c->TB * c->GH + c->B * c->GH + c->GH + c->H + (c->res ? 0 : c->B * c->S);
    vq_tensor *scr;
    int rc = scratch(c, c->per + ybufs, "recurrence scratch", &scr);
    if (rc < 0)
        return rc;
    c->scr = scr ? scr->data : NULL;
    for (int ly = 0; rc == 0 && ly < p->layers; ly++) {
        c->layer = ly;
        c->in = ly == 0 ? x->data : (const char *)c->out;
        c->in_w = ly == 0 ? x->shape[2] : DH;
        c->out = c->res                ? res_layer(c, ly)
                 : ly == p->layers - 1 ? (char *)k->out[0]->data
                                       : AT(c->scr, c->per + (ly & 1) * c->TB * DH);
        for (int d = 0; rc == 0 && d < p->dirs; d++)
            rc = forward_dir(c, d, hn, cn);
    }
    if (rc == 0 && c->res && c->TB)
        rc = vq__cuda_op_called(k,
                                cudaMemcpyAsync(k->out[0]->data, c->out,
                                                (size_t)(c->TB * DH) * c->es,
                                                cudaMemcpyDeviceToDevice, l->s),
                                "copying Y");
    vq__tensor_release_on(scr, l->bs);
    return rc;
}

/* ---- backward ---- */

/* The gradient op's tensors beyond gpu_call's. */
typedef struct grad_io {
    const char *dyl;       /* dY of the layer, NULL: zeros */
    const char *dhn, *dcn; /* NULL: zeros */
    char *dh0, *dc0;       /* NULL: not wanted */
} grad_io;

/* One direction of the current layer backwards (rnn.c's backward_dir).
 * Scratch per direction: the gates' gradients of every step on the input
 * side [TB, GH] (gru: and on the hidden side, another [TB, GH]), dh and dc
 * [B, H]. */
static int backward_dir(gpu_call *c, const grad_io *io, int d)
{
    const vq__rnn_params *p = c->p;
    int64_t T = c->T, B = c->B, H = c->H, GH = c->GH, DH = c->DH;
    int gru = p->cell == VQ__RNN_GRU;
    char *dgx = AT(c->scr, d * c->per), *dgh = gru ? AT(dgx, c->TB * GH) : dgx;
    char *dh = AT(dgx, (gru ? 2 : 1) * c->TB * GH), *dc = AT(dh, B * H);
    char *saved = res_saved(c, c->layer, d);
    const void *whh = weight(c, c->layer, d, 1);
    int64_t ls = (int64_t)(c->layer * p->dirs + d) * B * H;
    int rc = rows_copy(c, io->dhn ? AT(io->dhn, ls) : NULL, H, dh, H);
    if (rc == 0)
        rc = rows_copy(c, io->dcn ? AT(io->dcn, ls) : NULL, H, dc, H);
    for (int64_t s = T - 1; rc == 0 && s >= 0; s--) {
        int64_t t = d ? T - 1 - s : s, ldh, ldp = 0;
        const char *dy = io->dyl ? AT(io->dyl, t * B * DH + d * H) : NULL;
        const char *hprev = h_prev(c, d, s, &ldh), *cur = AT(saved, t * B * c->S), *prev = NULL;
        const char *hout = NULL;
        char *gx = AT(dgx, t * B * GH), *gh = AT(dgh, t * B * GH);
        if (p->cell == VQ__RNN_LSTM) {
            prev = c_prev(c, d, s, saved, &ldp);
        } else if (gru) {
            prev = hprev;
            ldp = ldh;
        } else {
            hout = AT(c->out, t * B * DH + d * H);
        }
        rc =
            vq__cuda_launched(c->k, vq__cuda_rnn_back(c->dt, p->cell, B, H, dy, DH, cur, c->S, prev,
                                                      ldp, hout, DH, dh, dc, gx, gh, c->l->s));
        /* dh_{t-1} = (gru: dh z +) the hidden side's gradients W_hh */
        if (rc == 0)
            rc = gemm(c, 0, 0, B, H, GH, gh, GH, whh, H, gru ? 1 : 0, dh, H);
    }
    if (rc == 0 && io->dh0)
        rc = rows_copy(c, dh, H, AT(io->dh0, ls), H);
    if (rc == 0 && io->dc0)
        rc = rows_copy(c, dc, H, AT(io->dc0, ls), H);
    if (rc < 0)
        return rc;
    /* the weights' gradients over the whole sequence */
    int j = (c->layer * p->dirs + d) * c->pd;
    void *dw0 = c->k->out[1 + j]->data, *dw1 = c->k->out[2 + j]->data;
    rc = gemm(c, 1, 0, GH, c->in_w, c->TB, dgx, GH, c->in, c->in_w, 0, dw0, c->in_w);
    /* h_{t-1} of the steps after the first are the layer's outputs one
     * step back in this direction's order; the first's is H0 */
    int64_t first = d ? T - 1 : 0, rest = T > 0 ? (T - 1) * B : 0;
    if (rc == 0)
        rc = gemm(c, 1, 0, GH, H, rest, AT(dgh, d ? 0 : B * GH), GH,
                  AT(c->out, (d ? B * DH : 0) + d * H), DH, 0, dw1, H);
    if (rc == 0 && c->h0 && T > 0)
        rc = gemm(c, 1, 0, GH, H, B, AT(dgh, first * B * GH), GH, AT(c->h0, ls), H, 1, dw1, H);
    if (rc == 0 && p->bias) {
        rc = vq__cuda_launched(c->k, vq__cuda_rnn_col_sums(c->dt, c->TB, GH, dgx,
                                                           c->k->out[3 + j]->data, c->l->s));
        if (rc == 0)
            rc = vq__cuda_launched(c->k, vq__cuda_rnn_col_sums(c->dt, c->TB, GH, dgh,
                                                               c->k->out[4 + j]->data, c->l->s));
    }
    return rc;
}

int vq__rnn_grad_gpu(const vq__kcall *k, const vq__cuda_launch *l)
{
    const vq__rnn_params *p = k->params;
    vq_tensor *x = k->in[0];
    gpu_call cc, *c = &cc;
    call_init(c, k, l);
    grad_io io = {0};
    int nw = p->layers * p->dirs * c->pd, ns = p->cell == VQ__RNN_LSTM ? 2 : 1, i = 1 + nw;
    if (p->states) {
        c->h0 = k->in[i++]->data;
        c->c0 = ns == 2 ? k->in[i++]->data : NULL;
        io.dh0 = k->out[1 + nw]->data;
        io.dc0 = ns == 2 ? k->out[2 + nw]->data : NULL;
    }
    c->res = k->in[i++]->data;
    const char *dy = p->grads & 1 ? k->in[i++]->data : NULL;
    io.dhn = p->grads & 2 ? k->in[i++]->data : NULL;
    io.dcn = p->grads & 4 ? k->in[i++]->data : NULL;
    int64_t DH = c->DH, dbufs = p->layers > 1 ? 2 * c->TB * DH : 0;
    c->per = c->TB * c->GH * (p->cell == VQ__RNN_GRU ? 2 : 1) + 2 * c->B * c->H;
    vq_tensor *scr;
    int rc = scratch(c, p->dirs * c->per + dbufs, "gradient scratch", &scr);
    if (rc < 0)
        return rc;
    c->scr = scr ? scr->data : NULL;
    char *dbuf = c->scr ? AT(c->scr, p->dirs * c->per) : NULL;
    for (int ly = p->layers - 1; rc == 0 && ly >= 0; ly--) {
        c->layer = ly;
        c->in = ly == 0 ? x->data : res_layer(c, ly - 1);
        c->in_w = ly == 0 ? x->shape[2] : DH;
        c->out = res_layer(c, ly);
        io.dyl = ly == p->layers - 1 ? dy : AT(dbuf, (ly & 1) * c->TB * DH);
        for (int d = 0; rc == 0 && d < p->dirs; d++)
            rc = backward_dir(c, &io, d);
        /* dX of the layer: both directions' input-side gradients times W_ih */
        char *dxl = ly == 0 ? (char *)k->out[0]->data : AT(dbuf, ((ly - 1) & 1) * c->TB * DH);
        for (int d = 0; rc == 0 && d < p->dirs; d++)
            rc = gemm(c, 0, 0, c->TB, c->in_w, c->GH, AT(c->scr, d * c->per), c->GH,
                      weight(c, ly, d, 0), c->in_w, d ? 1 : 0, dxl, c->in_w);
    }
    vq__tensor_release_on(scr, l->bs);
    return rc;
}
