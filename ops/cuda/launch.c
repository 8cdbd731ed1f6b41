/* How an op runs on the CUDA backend: the launch prologue every op's call
 * begins with (the op's stream and device, made current), the dispatcher
 * vq__cuda_run that the registry puts in the GPU slot of every op with
 * CUDA launches, the wording of a failed launch or CUDA runtime call as the
 * op's error, and the executor's NaN check. Each op family's launches sit
 * in its own file beside its kernels (ops/cuda/<family>_host.c, named for
 * ops/cpu/<family>.c): functions that call the launchers of kernels.h with
 * the tensors' device pointers and the op's params (params.h) on the op's
 * stream, and return while the work is still queued (GPU ops complete at
 * launch; engine.h). The registry picks each op's function once, when it
 * is built (gpu.c's vq__gpu_kernel_pick), and runs vq__cuda_run for ops
 * on GPU tensors while CUDA is the GPU backend. On the emulated backend
 * every op runs its CPU kernel as stream work instead. Calls whose errors
 * only the device sees take a check from checks.c's pool. Compiled only
 * when CUDA is found (have_cuda). */
#include "cuda_internal.h"
#include "cuda_ops.h"

#include <string.h>

/* The launch prologue of every call: the op's stream and device, made
 * current. hot path: no malloc, no global lock */
static int launch_begin(const vq__kcall *k, vq__cuda_launch *l)
{
    *l = (vq__cuda_launch){.k = k, .s = NULL, .bs = NULL, .dev = -1};
    if (!k->x || k->x->ctx.kind != VQ_DEV_GPU || !k->x->stream)
        return vq__op_fail(k->def, "a GPU kernel needs an engine (the op's stream)");
    /* Kernels launch on the current device, which must be the stream's;
     * the engine's GPU workers never set it. */
    cudaError_t e = cudaSetDevice(k->x->ctx.id);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return vq__fail(VQ_EIO, "%s: cudaSetDevice(%d): %s", k->def->type, k->x->ctx.id,
                        cudaGetErrorString(e));
    }
    l->k = k;
    l->s = (cudaStream_t)k->x->stream; /* a GPU op's fn gets the native stream */
    l->bs = vq__gpu_op_stream();
    if (!l->bs)
        return vq__op_fail(k->def, "a GPU kernel runs inside the engine's GPU op call");
    l->dev = k->x->ctx.id;
    return 0;
}

/* A launcher's result as the op's: its code, with a message naming the op. */
int vq__cuda_launched(const vq__kcall *k, int rc)
{
    switch (rc) {
    case 0: return 0;
    case VQ_EIO:
        return vq__fail(VQ_EIO, "%s: CUDA launch failed: %s", k->def->type, vq__cuda_last_error());
    case VQ_ENOSYS: return vq__fail(VQ_ENOSYS, "%s: %s", k->def->type, vq__cuda_last_error());
    default:
        return vq__fail(rc,
                        "%s: the CUDA kernels do not take these tensors (a dim past their "
                        "limits?)",
                        k->def->type);
    }
}

/* The same for a CUDA runtime call of ours (a memset or a copy). */
int vq__cuda_op_called(const vq__kcall *k, cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 0;
    (void)cudaGetLastError();
    return vq__fail(VQ_EIO, "%s: %s: %s", k->def->type, what, cudaGetErrorString(e));
}

/* The executor's NaN check of output j (gpu.c's vq__gpu_check_finite). */
int vq__cuda_check_finite(const vq__kcall *k, int j, const char *var)
{
    vq__cuda_launch l;
    struct vq__cuda_check *c;
    int rc = launch_begin(k, &l);
    if (rc < 0 || (rc = vq__cuda_check_begin(&l, VQ__CUDA_CHECK_FINITE, &c)) < 0)
        return rc;
    c->slot = vq__op_out_slot(k->def, j);
    c->var = var;
    const vq_tensor *t = k->out[j];
    rc = vq__cuda_launched(k, vq__cuda_find_nonfinite(t->dtype, t->data, t->numel, &c->d->bad,
                                                      &c->d->value, l.s));
    return vq__cuda_check_finish(&l, c, rc);
}

struct entry {
    const char *type;
    vq__cuda_op_fn fn;
};

/* Read once per op type, when the registry is built (vq__gpu_kernel_pick);
 * test_ops_gpu_kernels checks that it covers exactly the registry's ops. */
static const struct entry table[] = {
    {"add", vq__binary_gpu},
    {"sub", vq__binary_gpu},
    {"mul", vq__binary_gpu},
    {"div", vq__binary_gpu},
    {"pow", vq__binary_gpu},
    {"elementwise_grad", vq__binary_grad_gpu},
    {"scale", vq__scale_gpu},
    {"relu", vq__unary_gpu},
    {"sigmoid", vq__unary_gpu},
    {"tanh", vq__unary_gpu},
    {"relu_grad", vq__unary_grad_gpu},
    {"sigmoid_grad", vq__unary_grad_gpu},
    {"tanh_grad", vq__unary_grad_gpu},
    {"softmax", vq__softmax_gpu},
    {"exp", vq__math_gpu},
    {"log", vq__math_gpu},
    {"sqrt", vq__math_gpu},
    {"reciprocal", vq__math_gpu},
    {"erf", vq__math_gpu},
    {"power", vq__math_gpu},
    {"sin", vq__math_gpu},
    {"cos", vq__math_gpu},
    {"tan", vq__math_gpu},
    {"asin", vq__math_gpu},
    {"acos", vq__math_gpu},
    {"atan", vq__math_gpu},
    {"sinh", vq__math_gpu},
    {"cosh", vq__math_gpu},
    {"asinh", vq__math_gpu},
    {"acosh", vq__math_gpu},
    {"atanh", vq__math_gpu},
    {"floor", vq__math_gpu},
    {"ceil", vq__math_gpu},
    {"round", vq__math_gpu},
    {"math_grad", vq__math_grad_gpu},
    {"log_softmax", vq__log_softmax_gpu},
    {"log_softmax_grad", vq__log_softmax_grad_gpu},
    {"softmax_grad", vq__softmax_grad_gpu},
    {"cross_entropy", vq__ce_gpu},
    {"cross_entropy_grad", vq__ce_grad_gpu},
    {"softmax_cross_entropy", vq__sce_gpu},
    {"softmax_cross_entropy_grad", vq__sce_grad_gpu},
    {"square_error", vq__se_gpu},
    {"square_error_grad", vq__se_grad_gpu},
    {"mse", vq__mse_gpu},
    {"mse_grad", vq__mse_grad_gpu},
    {"sum", vq__reduce_gpu},
    {"mean", vq__reduce_gpu},
    {"sum_grad", vq__reduce_grad_gpu},
    {"mean_grad", vq__reduce_grad_gpu},
    {"transpose", vq__transpose_gpu},
    {"reshape", vq__copy_gpu},
    {"reshape_grad", vq__copy_gpu},
    {"concat", vq__concat_gpu},
    {"concat_grad", vq__concat_grad_gpu},
    {"slice", vq__slice_gpu},
    {"slice_grad", vq__slice_grad_gpu},
    {"cast", vq__cast_gpu},
    {"cast_grad", vq__cast_grad_gpu},
    {"matmul", vq__matmul_gpu},
    {"matmul_grad", vq__matmul_grad_gpu},
    {"fill_constant", vq__fill_gpu},
    {"zeros_like", vq__fill_gpu},
    {"uniform_random", vq__uniform_gpu},
    {"gaussian_random", vq__gaussian_gpu},
    {"dropout", vq__dropout_gpu},
    {"sgd", vq__sgd_gpu},
    {"momentum", vq__momentum_gpu},
    {"adam", vq__adam_gpu},
    {"lr_schedule", vq__lr_schedule_gpu},
    {"less", vq__compare_gpu},
    {"less_equal", vq__compare_gpu},
    {"greater", vq__compare_gpu},
    {"greater_equal", vq__compare_gpu},
    {"equal", vq__compare_gpu},
    {"not_equal", vq__compare_gpu},
    {"logical_and", vq__compare_gpu},
    {"logical_or", vq__compare_gpu},
    {"logical_not", vq__not_gpu},
    {"maximum", vq__compare_gpu},
    {"minimum", vq__compare_gpu},
    {"minmax_grad", vq__minmax_grad_gpu},
    {"where", vq__where_gpu},
    {"where_grad", vq__where_grad_gpu},
    {"abs", vq__abs_gpu},
    {"abs_grad", vq__abs_grad_gpu},
    {"conv2d", vq__conv2d_gpu},
    {"conv2d_grad", vq__conv2d_grad_gpu},
    {"conv_transpose2d", vq__conv_transpose2d_gpu},
    {"conv3d", vq__conv3d_gpu},
    {"conv3d_grad", vq__conv3d_grad_gpu},
    {"conv_transpose3d", vq__conv_transpose3d_gpu},
    {"max_pool2d", vq__max_pool_gpu},
    {"max_pool2d_grad", vq__max_pool_grad_gpu},
    {"max_pool2d_argmax", vq__max_pool_argmax_gpu},
    {"avg_pool2d", vq__avg_pool_gpu},
    {"avg_pool2d_grad", vq__avg_pool_grad_gpu},
    {"global_avg_pool", vq__global_pool_gpu},
    {"global_avg_pool_grad", vq__global_pool_grad_gpu},
    {"batch_norm", vq__batch_norm_gpu},
    {"batch_norm_grad", vq__batch_norm_grad_gpu},
    {"batch_norm_train", vq__batch_norm_train_gpu},
    {"batch_norm_train_grad", vq__batch_norm_train_grad_gpu},
    {"gather", vq__gather_gpu},
    {"gather_grad", vq__gather_gpu},
    {"gather_elements", vq__gather_elements_gpu},
    {"gather_elements_grad", vq__gather_elements_gpu},
    {"resize", vq__resize_gpu},
    {"resize_grad", vq__resize_grad_gpu},
    {"cumsum", vq__cumsum_gpu},
    {"reduce_prod", vq__reduce_prod_gpu},
    {"reduce_prod_grad", vq__reduce_prod_gpu},
    {"split", vq__split_gpu},
    {"split_grad", vq__split_grad_gpu},
    {"argmax", vq__arg_gpu},
    {"argmin", vq__arg_gpu},
    {"reduce_max", vq__extremum_gpu},
    {"reduce_min", vq__extremum_gpu},
    {"reduce_minmax_grad", vq__extremum_grad_gpu},
    {"expand", vq__expand_gpu},
    {"tile", vq__tile_gpu},
    {"tile_grad", vq__tile_grad_gpu},
    {"pad", vq__pad_gpu},
    {"pad_grad", vq__pad_grad_gpu},
};

#define NENTRIES ((int)(sizeof table / sizeof table[0]))

vq__cuda_op_fn vq__cuda_op_kernel(const char *type)
{
    for (int i = 0; type && i < NENTRIES; i++)
        if (!strcmp(table[i].type, type))
            return table[i].fn;
    return NULL;
}

int vq__cuda_op_kernel_count(void)
{
    return NENTRIES;
}

/* The GPU slot of every op in the table (vq__gpu_kernel_pick): the launch
 * prologue, written once here for all of them, then the op's launches.
 * hot path: no malloc, no global lock */
int vq__cuda_run(const vq__kcall *k)
{
    vq__cuda_launch l;
    int rc = launch_begin(k, &l);
    if (rc < 0)
        return rc;
    return k->def->cuda(k, &l);
}
