/* varq error codes and messages.
 *
 * Every varq function that can fail returns 0 or one of the negative codes
 * below (functions returning a pointer return NULL instead). The code says
 * what kind of failure it was; vq_errmsg() gives a sentence about the last
 * failure in the calling thread. Ops pushed onto the engine may return their
 * own negative codes too: the engine carries them through vars unchanged. */
#ifndef VARQ_ERROR_H
#define VARQ_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(VARQ_BUILDING) && defined(__GNUC__)
#define VQ_API __attribute__((visibility("default")))
#else
#define VQ_API
#endif

/* The codes, their values and what vq_strerror says of them, in one table
 * (X(name, value, description)); the enum below and vq_strerror are made
 * from it. */
#define VQ_ERRNO_MAP(X)                                                            \
    X(VQ_OK, 0, "success")                                                         \
    X(VQ_EIO, -5, "operation failed") /* an op or file operation failed */         \
    X(VQ_ENOMEM, -12, "out of memory")                                             \
    X(VQ_EBUSY, -16, "resource busy")                /* resource still in use */   \
    X(VQ_EINVAL, -22, "invalid argument")            /* bad argument */            \
    X(VQ_EDEADLK, -35, "the wait would deadlock")    /* waiting inside an op */    \
    X(VQ_ENOSYS, -38, "not available in this build") /* e.g. GPU without CUDA */   \
    X(VQ_ETIMEDOUT, -110, "timed out")               /* a run's deadline passed */ \
    X(VQ_ECANCELED, -125, "cancelled")               /* skipped or cancelled */

enum {
#define VQ__ERRNO_ENUM(name, value, text) name = value,
    VQ_ERRNO_MAP(VQ__ERRNO_ENUM)
#undef VQ__ERRNO_ENUM
};

/* Name and short description of an error code ("VQ_EINVAL: invalid
 * argument"). Codes varq does not know give "unknown error". Returns a static
 * string; thread-safe. */
VQ_API const char *vq_strerror(int err);

/* A sentence about the last failure of a varq call in this thread, e.g.
 * "vq_push: task has both fn and async_fn". The string is thread-local and
 * valid until the next failing varq call in the same thread; "" if there was
 * none. Successful calls do not clear it. */
VQ_API const char *vq_errmsg(void);

/* Sets this thread's vq_errmsg() to the formatted sentence and returns err:
 * how the callbacks of a registered op (op_register.h) say why they failed.
 * Thread-safe (the message is thread-local). */
VQ_API int vq_error_set(int err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#ifdef __cplusplus
}
#endif
#endif
