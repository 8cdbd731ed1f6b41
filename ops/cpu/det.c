/* det (ONNX's Det, numpy's linalg.det): the determinants of a batch of
 * square matrices, and its gradient.
 *
 * det(X) -> Out, X f32 or f64 of shape [..., M, M] (M >= 0; the
 * determinant of a 0 x 0 matrix is 1), Out [...]: each matrix's LU with
 * partial pivoting in double (f32 too: rounded to float at the end), the
 * determinant the signed product of its pivots (ops/linalg_shared.h).
 *
 * det_grad(X, dOut) -> dX = dOut times the cofactor matrix of X, which is
 * det(X) inverse(X)^T for a regular matrix (torch.linalg.det's gradient).
 * For a singular one (an exactly zero pivot) each cofactor is the signed
 * determinant of its minor instead: the true derivative, finite, and zero
 * only where the matrix has rank below M - 1 (torch goes through an SVD
 * there). Both in double. The CUDA kernels (one thread per matrix, the
 * same functions) give the CPU's bits. */
#include "../ops_internal.h"
#include "../cuda/cuda_ops.h"
#include "../linalg_shared.h"

#include <string.h>

static const char *const x_in[] = {"X"};
static const char *const out_slot[] = {"Out"};
static const char *const grad_in[] = {"X", "dOut"};
static const char *const grad_out[] = {"dX"};

static int square_check(vq__infer *c)
{
    int rc = vq__check_dtype(c, 0, VQ__FLOATS);
    if (rc < 0)
        return rc;
    const vq__meta *x = &c->in[0];
    if (x->ndim < 2)
        return vq__in_fail(c, 0, "has %d dim(s); det needs [..., M, M]", x->ndim);
    if (!vq__dim_match(x->shape[x->ndim - 1], x->shape[x->ndim - 2]))
        return vq__in_fail(c, 0, "is %lld x %lld in its last two dims, not square",
                           (long long)x->shape[x->ndim - 2], (long long)x->shape[x->ndim - 1]);
    return 0;
}

static int det_infer(vq__infer *c)
{
    int rc = square_check(c);
    if (rc < 0)
        return rc;
    c->out[0] = c->in[0];
    c->out[0].ndim -= 2;
    return 0;
}

static int det_grad_infer(vq__infer *c)
{
    int rc = square_check(c);
    if (rc < 0 || (rc = vq__check_same_dtype(c, 0, 1)) < 0)
        return rc;
    vq__meta want = c->in[0];
    want.ndim -= 2;
    if ((rc = vq__check_shape_is(c, 1, &want, "X's batch shape")) < 0)
        return rc;
    c->out[0] = c->in[0];
    return 0;
}

static int det_kernel(const vq__kcall *k)
{
    vq_tensor *x = k->in[0], *out = k->out[0];
    int64_t n = x->shape[x->ndim - 1], batch = out->numel, nn = n * n;
    vq_tensor *w = NULL;
    int rc = vq__kernel_scratch(k, VQ_F64, nn + n, "LU", &w);
    if (rc < 0)
        return rc;
    double none[1]; /* 0 x 0 matrices take no scratch: a valid pointer all the same */
    double *lu = w ? w->data : none;
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t i = 0; i < nn; i++)
            lu[i] = x->dtype == VQ_F32 ? (double)((const float *)x->data)[b * nn + i]
                                       : ((const double *)x->data)[b * nn + i];
        double d = vq__lu_det(lu, n, lu + nn);
        if (out->dtype == VQ_F32)
            ((float *)out->data)[b] = (float)d;
        else
            ((double *)out->data)[b] = d;
    }
    vq_tensor_release(w);
    return 0;
}

static int det_grad_kernel(const vq__kcall *k)
{
    vq_tensor *x = k->in[0], *g = k->in[1], *dx = k->out[0];
    int64_t n = x->shape[x->ndim - 1], batch = g->numel, nn = n * n;
    vq_tensor *w = NULL;
    int rc = vq__kernel_scratch(k, VQ_F64, 4 * nn + 2 * n, "cofactors", &w);
    if (rc < 0)
        return rc;
    double none[1]; /* 0 x 0 matrices take no scratch: a valid pointer all the same */
    double *xm = w ? w->data : none, *c = xm + nn, *scratch = c + nn;
    bool f32 = x->dtype == VQ_F32;
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t i = 0; i < nn; i++)
            xm[i] = f32 ? (double)((const float *)x->data)[b * nn + i]
                        : ((const double *)x->data)[b * nn + i];
        vq__cofactors(xm, n, c, scratch);
        double gb = f32 ? (double)((const float *)g->data)[b] : ((const double *)g->data)[b];
        for (int64_t i = 0; i < nn; i++) {
            if (f32)
                ((float *)dx->data)[b * nn + i] = (float)(gb * c[i]);
            else
                ((double *)dx->data)[b * nn + i] = gb * c[i];
        }
    }
    vq_tensor_release(w);
    return 0;
}

static int det_grad(const vq__grad *g)
{
    int wanted = vq__grad_wanted(g);
    if (wanted <= 0)
        return wanted;
    const char *in[2] = {g->in[0], g->dout[0]};
    return vq__emit(g, "det_grad", in, 2, &g->din[0], 1, NULL, 0);
}

const vq__op_def vq__ops_det[] = {
    {.type = "det",
     .in_slots = x_in,
     .nin_slots = 1,
     .out_slots = out_slot,
     .nout_slots = 1,
     .infer = det_infer,
     .kernel = {det_kernel},
     .cuda = VQ__CUDA_OP(vq__det_gpu),
     .grad = det_grad},
    {.type = "det_grad",
     .in_slots = grad_in,
     .nin_slots = 2,
     .out_slots = grad_out,
     .nout_slots = 1,
     .infer = det_grad_infer,
     .kernel = {det_grad_kernel},
     .cuda = VQ__CUDA_OP(vq__det_grad_gpu)},
    {0},
};
