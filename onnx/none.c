/* The ONNX importer's functions in a build without it (meson found no
 * onnx.proto, or onnx=disabled): each says so with VQ_ENOSYS. */
#include "engine_services.h" /* vq__fail */

#include <varq/onnx.h>

#include <string.h>

#define NOT_BUILT(fn)                                                                      \
    vq__fail(VQ_ENOSYS, "%s: varq was built without the ONNX importer (install "           \
                        "libonnx-dev and reconfigure with meson -Donnx=auto)",             \
             fn)

VQ_API int vq_program_from_onnx(vq_program **out, vq_scope *params, const void *buf, size_t len)
{
    (void)params, (void)buf, (void)len;
    if (out)
        *out = NULL;
    return NOT_BUILT("vq_program_from_onnx");
}

VQ_API int vq_program_from_onnx_file(vq_program **out, vq_scope *params, const char *path)
{
    (void)params, (void)path;
    if (out)
        *out = NULL;
    return NOT_BUILT("vq_program_from_onnx_file");
}

VQ_API int vq_program_from_onnx_opts(vq_program **out, vq_scope *params, const void *buf,
                                     size_t len, const vq_onnx_opts *opts)
{
    (void)params, (void)buf, (void)len, (void)opts;
    if (out)
        *out = NULL;
    return NOT_BUILT("vq_program_from_onnx_opts");
}

VQ_API int vq_program_from_onnx_file_opts(vq_program **out, vq_scope *params, const char *path,
                                          const vq_onnx_opts *opts)
{
    (void)params, (void)path, (void)opts;
    if (out)
        *out = NULL;
    return NOT_BUILT("vq_program_from_onnx_file_opts");
}

VQ_API int vq_onnx_info_read(vq_onnx_info *out, const void *buf, size_t len)
{
    (void)buf, (void)len;
    if (out)
        memset(out, 0, sizeof *out);
    return NOT_BUILT("vq_onnx_info_read");
}

VQ_API void vq_onnx_info_free(vq_onnx_info *info)
{
    if (info)
        memset(info, 0, sizeof *info);
}

VQ_API int vq_onnx_ops_read(vq_onnx_ops *out, const void *buf, size_t len)
{
    (void)buf, (void)len;
    if (out)
        memset(out, 0, sizeof *out);
    return NOT_BUILT("vq_onnx_ops_read");
}

VQ_API void vq_onnx_ops_free(vq_onnx_ops *ops)
{
    if (ops)
        memset(ops, 0, sizeof *ops);
}

VQ_API const char *vq_onnx_op_name(int i)
{
    (void)i;
    return NULL;
}

VQ_API const char *vq_onnx_op_domain(int i)
{
    (void)i;
    return NULL;
}

VQ_API int vq_tensor_from_onnx(vq_tensor **out, char **name, const void *buf, size_t len)
{
    (void)buf, (void)len;
    if (out)
        *out = NULL;
    if (name)
        *name = NULL;
    return NOT_BUILT("vq_tensor_from_onnx");
}

VQ_API int vq_onnx_data_read(vq_onnx_data *out, vq_onnx_kind kind, const void *buf, size_t len)
{
    (void)kind, (void)buf, (void)len;
    if (out)
        memset(out, 0, sizeof *out);
    return NOT_BUILT("vq_onnx_data_read");
}

VQ_API void vq_onnx_data_free(vq_onnx_data *d)
{
    if (d)
        memset(d, 0, sizeof *d);
}
