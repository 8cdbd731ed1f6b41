/* The stream backend selector (stream.h): which backend an engine's GPUs
 * run on, from the caller's name or VARQ_GPU_BACKEND, and the CUDA entry
 * point's stand-in when varq was built without CUDA. The backends
 * themselves are stream_cuda.c and stream_emul.c. */
#include "engine_internal.h"
#include "stream.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- without CUDA ---- */

#ifndef VARQ_HAVE_CUDA
const struct vq__stream_backend *vq__stream_cuda(void)
{
    vq__fail(VQ_ENOSYS, "CUDA backend: varq was built without CUDA (no CUDA toolkit at build time, "
                        "or meson option cuda=disabled), so there is no GPU device");
    return NULL;
}
#endif

/* ---- the selector ---- */

int vq__stream_backend_get(const char *name, const struct vq__stream_backend **out)
{
    *out = NULL;
    bool from_env = false;
    if (!name) {
        name = getenv("VARQ_GPU_BACKEND");
        from_env = name && *name;
        if (!from_env)
            name = NULL;
    }
    if (!name) {
        const struct vq__stream_backend *b = vq__stream_cuda();
        if (!b) {
            char why[256];
            snprintf(why, sizeof why, "%s", vq_errmsg());
            return vq__fail(VQ_ENOSYS,
                "no GPU available: %s; set VARQ_GPU_BACKEND=emulated to run GPU ops on host-emulated streams",
                why);
        }
        *out = b;
        return 0;
    }
    if (!strcmp(name, "cuda")) {
        *out = vq__stream_cuda();
        return *out ? 0 : VQ_ENOSYS; /* vq__stream_cuda said why */
    }
    if (!strcmp(name, "emulated")) {
        int n = 1;
        const char *env = getenv("VARQ_GPU_EMUL_DEVICES");
        if (env && *env) {
            char *end;
            long v = strtol(env, &end, 10);
            if (*end || v < 1 || v > VQ__STREAM_EMUL_MAX_DEVICES)
                return vq__fail(VQ_EINVAL, "VARQ_GPU_EMUL_DEVICES=%s: expected 1 to %d", env,
                    VQ__STREAM_EMUL_MAX_DEVICES);
            n = (int)v;
        }
        *out = vq__stream_emul(n);
        return 0;
    }
    return vq__fail(VQ_EINVAL, "%s%s: unknown GPU backend (cuda or emulated)",
        from_env ? "VARQ_GPU_BACKEND=" : "GPU backend ", name);
}
