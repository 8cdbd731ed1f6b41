/* Error codes: their names (vq_strerror) and the thread-local sentence about
 * the last failure (vq_errmsg), set through vq__fail by every failing call. */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char errmsg[256];
static _Thread_local unsigned errgen; /* messages set in this thread so far */

VQ_API const char *vq_strerror(int err)
{
    switch (err) {
    case VQ_OK: return "VQ_OK: success";
    case VQ_EIO: return "VQ_EIO: operation failed";
    case VQ_ENOMEM: return "VQ_ENOMEM: out of memory";
    case VQ_EBUSY: return "VQ_EBUSY: resource busy";
    case VQ_EINVAL: return "VQ_EINVAL: invalid argument";
    case VQ_EDEADLK: return "VQ_EDEADLK: the wait would deadlock";
    case VQ_ENOSYS: return "VQ_ENOSYS: not available in this build";
    case VQ_ECANCELED: return "VQ_ECANCELED: cancelled";
    default: return "unknown error";
    }
}

VQ_API const char *vq_errmsg(void)
{
    return errmsg;
}

int vq__fail(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    va_end(ap);
    errgen++;
    return err;
}

unsigned vq__errmsg_gen(void)
{
    return errgen;
}

VQ_API int vq_error_set(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof errmsg, fmt ? fmt : "", ap);
    va_end(ap);
    errgen++;
    return err;
}
