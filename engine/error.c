/* Error codes: their names (vq_strerror) and the thread-local sentence about
 * the last failure (vq_errmsg), set through vq__fail by every failing call;
 * and the report of a failed invariant (VQ__ASSERT). */
#include "engine_internal.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The sentence lives in a buffer of VQ__ERRMSG_MAX bytes on the heap, one
 * per thread, made at the thread's first failure and freed at its exit
 * (a pthread key's destructor): not in thread-local storage itself, which
 * libvarq takes from glibc's static TLS surplus (its initial-exec
 * thread-locals, engine_internal.h) and which has only a few hundred
 * bytes left for a library loaded by dlopen, as a Python extension loads
 * it. When the buffer cannot be had, the sentence is cut to the small one
 * kept here. */
#define SPARE_MAX 96
static _Thread_local char *errmsg;
static _Thread_local char errspare[SPARE_MAX];
static _Thread_local unsigned errgen; /* messages set in this thread so far */
static pthread_key_t errmsg_key;
static pthread_once_t errmsg_once = PTHREAD_ONCE_INIT;
static bool errmsg_key_ok;

/* At the thread's exit; later exit handlers of the thread that fail get
 * a new buffer (pthread keys' destructors run again for it). */
static void errmsg_free(void *b)
{
    if (errmsg == b)
        errmsg = NULL;
    free(b);
}

static void errmsg_key_make(void)
{
    errmsg_key_ok = pthread_key_create(&errmsg_key, errmsg_free) == 0;
}

/* This thread's buffer for a new sentence and its size. */
static char *errmsg_buffer(size_t *size)
{
    if (!errmsg) {
        pthread_once(&errmsg_once, errmsg_key_make);
        char *b = errmsg_key_ok ? malloc(VQ__ERRMSG_MAX) : NULL;
        if (b && pthread_setspecific(errmsg_key, b) != 0) {
            free(b);
            b = NULL;
        }
        if (!b) {
            *size = sizeof errspare;
            return errspare;
        }
        errmsg = b;
    }
    *size = VQ__ERRMSG_MAX;
    return errmsg;
}

static void errmsg_vset(const char *fmt, va_list ap)
{
    size_t size;
    char *b = errmsg_buffer(&size);
    vsnprintf(b, size, fmt, ap);
    if (b == errspare)
        errmsg = NULL; /* vq_errmsg reads the spare; the next failure tries again */
}

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
    return errmsg ? errmsg : errspare;
}

int vq__fail(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errmsg_vset(fmt, ap);
    va_end(ap);
    errgen++;
    return err;
}

int vq__fail_prefixed(int err, const char *fmt, ...)
{
    char prev[VQ__ERRMSG_MAX], prefix[VQ__ERRMSG_MAX];
    snprintf(prev, sizeof prev, "%s", vq_errmsg()); /* vq__fail writes the message */
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
        errmsg_vset(fmt, ap);
        va_end(ap);
    } else {
        size_t size;
        errmsg_buffer(&size)[0] = '\0';
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
