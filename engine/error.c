/* Error codes: their names (vq_strerror) and the thread-local sentence about
 * the last failure (vq_errmsg), set through vq__fail by every failing call;
 * and the report of a failed invariant (VQ__ASSERT). */
#include "engine_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char errmsg[VQ__ERRMSG_MAX];
static _Thread_local unsigned errgen; /* messages set in this thread so far */

VQ_API const char *vq_strerror(int err)
{
    switch (err) {
#define ERRNO_CASE(name, value, text)                                                   \
    case name: return #name ": " text;
        VQ_ERRNO_MAP(ERRNO_CASE)
#undef ERRNO_CASE
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

int vq__fail_prefixed(int err, const char *fmt, ...)
{
    char prev[sizeof errmsg], prefix[sizeof errmsg];
    memcpy(prev, errmsg, sizeof prev); /* vq__fail writes errmsg */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    return vq__fail(err, "%s: %s", prefix, prev);
}

unsigned vq__errmsg_gen(void)
{
    return errgen;
}

VQ_API int vq_error_set(int err, const char *fmt, ...)
{
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errmsg, sizeof errmsg, fmt, ap);
        va_end(ap);
    } else {
        errmsg[0] = '\0'; /* (clang: no empty format string) */
    }
    errgen++;
    return err;
}

/* VQ__ASSERT's failure (engine_internal.h): the one print and trap of the
 * library, in the builds that check invariants. */
void vq__assert_failed(const char *file, int line, const char *expr)
{
    fprintf(stderr, "varq: %s:%d: invariant failed: %s\n", file, line, expr);
    fflush(stderr);
    __builtin_trap();
}
