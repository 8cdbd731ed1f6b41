/* How an op runs on the CUDA backend: the launch prologue every op's call
 * begins with (the op's stream and device, made current), the dispatcher
 * vq__cuda_run that the registry puts in the GPU slot of every op with
 * CUDA launches, the wording of a failed launch or CUDA runtime call as the
 * op's error, and the executor's NaN check. Each op family's launches sit
 * in its own file beside its kernels (ops/cuda/<family>_host.c, named for
 * ops/cpu/<family>.c): functions that call the launchers of kernels.h with
 * the tensors' device pointers and the op's params (params.h) on the op's
 * stream, and return while the work is still queued (GPU ops complete at
 * launch; engine.h). Each op's definition names its function (.cuda,
 * through cuda_ops.h's VQ__CUDA_OP: the registry's table of definitions is
 * the one kernel table); the registry runs vq__cuda_run for ops on GPU
 * tensors while CUDA is the GPU backend. On the emulated backend every op
 * runs its CPU kernel as stream work instead. Calls whose errors only the
 * device sees take a check from checks.c's pool. Compiled only when CUDA
 * is found (have_cuda). */
#include "cuda_internal.h"

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

/* The GPU slot of every op whose definition names its launches
 * (vq__gpu_kernel_pick): the launch prologue, written once here for all of
 * them, then the op's launches. hot path: no malloc, no global lock */
int vq__cuda_run(const vq__kcall *k)
{
    if (!(k->def->flags & VQ__CUDA_EXT_DTYPES))
        for (int i = 0; i < k->nin + k->nout; i++) {
            const vq_tensor *t = i < k->nin ? k->in[i] : k->out[i - k->nin];
            if (t && t->dtype > VQ_BOOL)
                return vq__op_fail(k->def,
                                   "dtype %s is not supported by %s's CUDA kernel (f32, "
                                   "f64, i32, i64, bool; cast converts)",
                                   vq_dtype_name(t->dtype), k->def->type);
        }
    vq__cuda_launch l;
    int rc = launch_begin(k, &l);
    if (rc < 0)
        return rc;
    return k->def->cuda(k, &l);
}
