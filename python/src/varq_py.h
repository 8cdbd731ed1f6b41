/* The Python extension _varq's private interface between its files: the
 * object layouts (Tensor, Engine, Var, Session) and the helpers they share
 * (raising a varq error, wrapping Python buffers and DLPack capsules as
 * tensors). The extension is a thin layer over include/varq: every blocking
 * call is made with the GIL released, and every callback from varq's
 * threads (an op's Python function, the release of a wrapped buffer) takes
 * the GIL itself with PyGILState_Ensure.
 *
 * Why the GIL is released even around calls that do not wait (vq_push,
 * vq_tensor_release): past the engine's throttle a pushing thread runs ops
 * itself and waits for half of those in flight, and an op that calls Python
 * (or releases a wrapped numpy buffer) needs the GIL: holding it there
 * would deadlock. */
#ifndef VARQ_PY_H
#define VARQ_PY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <varq/varq.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

/* varq.Engine: one vq_engine. Tensors made by runs on it (and Vars) hold a
 * reference to it, so the engine is freed only after the last of them: the
 * engine's rule that tensors used with it are released first. */
typedef struct {
    PyObject_HEAD vq_engine *engine;
    PyObject *weakrefs;
    /* The exceptions of failed Python ops, by the vq_var they wrote (its
     * address as an int), until a wait_var of that var raises it. */
    PyObject *failures;
} vqpy_engine;

/* varq.Tensor: one reference to a vq_tensor, and the engine it may be used
 * with (NULL when none yet), kept alive by it. shape and strides are the
 * buffer protocol's view of the tensor, filled once. */
typedef struct {
    PyObject_HEAD vq_tensor *t;
    PyObject *engine; /* a vqpy_engine, a list of them (a Scope's), or NULL */
    bool readonly;    /* wraps memory its producer exports read-only */
    /* The failure of the op that wrote the tensor, once a read found it:
     * vq_tensor_wait takes a tensor's error (a second wait returns 0), so
     * it is kept here and raised by every later read (numpy tries the
     * buffer protocol and then __array_interface__, and must not get the
     * bytes of a failed op on its second try). */
    PyObject *error;
    int ndim;
    Py_ssize_t shape[VQ_MAX_DIMS];
    Py_ssize_t strides[VQ_MAX_DIMS];
} vqpy_tensor;

extern PyTypeObject vqpy_tensor_type;
extern PyTypeObject vqpy_engine_type;
extern PyTypeObject vqpy_var_type;
extern PyTypeObject vqpy_session_type;

/* Whether a callback on a thread of varq's (a worker) must not take the
 * GIL: the interpreter is finalizing, when a thread other than the
 * finalizing one that asks for the GIL is ended on the spot (which would
 * leave the engine waiting for its op forever). The callbacks then skip
 * the Python part (an op fails with VQ_ECANCELED; a release leaks what the
 * exiting process frees anyway). */
static inline bool vqpy_no_gil_for_callback(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing() && !PyGILState_Check();
#else
    return _Py_IsFinalizing() && !PyGILState_Check();
#endif
}

/* PyGILState_Ensure / Release for the callbacks that run on threads of
 * varq's (module.c). The first call on a thread with no Python thread
 * state keeps the state it creates until the thread exits, instead of
 * PyGILState's creating and deleting one per call (most of the cost of a
 * Python op on a worker). At the thread's exit the state is deleted (the
 * GIL taken for it), unless the interpreter is finalizing or gone. */
PyGILState_STATE vqpy_gil_ensure(void);
static inline void vqpy_gil_release(PyGILState_STATE g)
{
    PyGILState_Release(g);
}

/* varq.Error and its subclasses, one per negative code (module.c). */
extern PyObject *vqpy_error;

/* Raises the exception of rc (a negative VQ_* code) with vq_errmsg()'s
 * sentence, read now: call it in the thread of the failed call, before any
 * other varq call. Returns NULL. */
/* Vectorcall arguments of fn: at most maxpos positional ones, then
 * keywords among names[0..n) (each once), into v[0..n) (NULL: not given).
 * 0, or -1 with a TypeError naming fn. */
int vqpy_fast_args(const char *fn, const char *const *names, int n, int maxpos,
                   PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **v);
PyObject *vqpy_raise(int rc);
/* The same with a message of the caller's. */
PyObject *vqpy_raise_msg(int rc, const char *fmt, ...);

/* A new varq.Tensor owning the reference t (taken even on failure);
 * engine (may be NULL) is kept alive by it. */
PyObject *vqpy_tensor_new(vq_tensor *t, PyObject *engine);

/* A vq_tensor sharing obj's memory when obj is a varq.Tensor (retained),
 * or exports a C-contiguous buffer of a varq dtype (a numpy array, with
 * the buffer held until the tensor is freed); otherwise, when
 * allow_convert, numpy.ascontiguousarray(obj) (a copy) wrapped the same
 * way. NULL with an exception set on failure. */
vq_tensor *vqpy_tensor_from_object(PyObject *obj, bool allow_convert);
/* The same, also saying whether the memory is read-only for Python (its
 * producer exported it so: a numpy array with writeable=False, bytes). */
vq_tensor *vqpy_tensor_from_object_ro(PyObject *obj, bool allow_convert, bool *readonly);

/* The dtype of a buffer format and item size; false when varq has none. */
bool vqpy_dtype_of_format(const char *format, Py_ssize_t itemsize, vq_dtype *out);

/* numpy's name of dt ("float32"). */
const char *vqpy_dtype_numpy(vq_dtype dt);

/* numpy.asarray(obj): zero-copy for a varq.Tensor (the buffer protocol). */
PyObject *vqpy_numpy_asarray(PyObject *obj);

/* numpy's C API (ndarray.c; built with VQPY_NUMPY_CAPI where numpy's
 * headers are found, loaded on first use). */

/* A numpy array over data, the memory of the varq.Tensor tensor (ready:
 * its ops waited for), with the Tensor as its base; NULL with an exception
 * on failure, NULL without one when numpy's C API is not there or the
 * dtype has no numpy type (bfloat16): then use vqpy_numpy_asarray. */
PyObject *vqpy_np_array_over(PyObject *tensor, void *data);

/* The numpy array a feed tensor made by vqpy_np_feed wraps, and who drops
 * the array's reference: the caller, once it is back under the GIL after
 * releasing the tensor (vqpy_np_hold_done), when the tensor's last
 * reference went by then (the usual case: no GIL hand-off for the
 * release); else the release callback, which takes the GIL itself. state
 * is exchanged by both: whichever comes second drops the array. */
enum { VQPY_HOLD_HELD, VQPY_HOLD_RELEASED, VQPY_HOLD_ABANDONED };
typedef struct {
    PyObject *array;
    atomic_int state;
} vqpy_np_hold;

/* A tensor wrapping obj's memory when obj is an aligned C-contiguous
 * numpy array of a varq dtype (no copy, no buffer export), *hold set;
 * NULL (no exception) for anything else: take vqpy_tensor_from_object's
 * path. The caller releases the tensor (without the GIL, as any release)
 * and then calls vqpy_np_hold_done(*hold) with the GIL held. */
vq_tensor *vqpy_np_feed(PyObject *obj, vqpy_np_hold **hold);
/* See vqpy_np_hold; NULL is ignored. GIL held. */
void vqpy_np_hold_done(vqpy_np_hold *h);

/* One run pushed by vq_exec_run_async (future.c): shared by the run and
 * its varq.RunFuture (refs), the last of which frees the feeds' and the
 * fetches' tensors and names (owned: names[0..nnames) are malloc'd strings
 * the feeds and fetches may point into). done, rc and msg are written by
 * the done callback under mu, without the GIL. */
typedef struct vqpy_async_run {
    atomic_int refs;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    /* done, also readable without mu: a waiter looks at it a few times
     * before sleeping on cv (store: release, after rc and msg). */
    atomic_bool finished;
    int rc;
    char msg[1024];
    int nfeeds, nfetches, nnames;
    vq_feed *feeds;
    vq_fetch *fetches;
    char **names;
    /* Counters of the runs using a program and a scope (program.c), each
     * decremented by the done callback; NULL when not counted. */
    atomic_int *busy[2];
    /* The varq.RunFuture with done callbacks to call (a reference), set
     * under mu while not done: the done callback takes it (under mu) and
     * then the GIL to call them; NULL when there are none, and the done
     * callback then never takes the GIL. */
    PyObject *notify;
} vqpy_async_run;

extern PyTypeObject vqpy_future_type;
extern PyTypeObject vqpy_program_type;
extern PyTypeObject vqpy_scope_type;
extern PyTypeObject vqpy_executor_type;

/* Module functions defined in program.c (train.h) and ops.c. */
PyObject *vqpy_append_backward(PyObject *self, PyObject *args, PyObject *kw);
PyObject *vqpy_optimizer_minimize(PyObject *self, PyObject *args, PyObject *kw);
PyObject *vqpy_lr_schedule_build(PyObject *self, PyObject *args, PyObject *kw);
PyObject *vqpy_layer(PyObject *self, PyObject *args, PyObject *kw);
PyObject *vqpy_op_run(PyObject *self, PyObject *args);
PyObject *vqpy_op_names(PyObject *self, PyObject *unused);
PyObject *vqpy_op_signature(PyObject *self, PyObject *arg);
PyObject *vqpy_capture_begin(PyObject *self, PyObject *engine);
PyObject *vqpy_capture_end(PyObject *self, PyObject *engine);
PyObject *vqpy_capture_backward(PyObject *self, PyObject *args);
PyObject *vqpy_capture_stats(PyObject *self, PyObject *engine);

/* A run with room for nfeeds feeds, nfetches fetches and as many names,
 * one reference held by the caller; NULL when out of memory. */
vqpy_async_run *vqpy_async_new(int nfeeds, int nfetches);
/* Drops a reference (without the GIL: tensor releases may take it). */
void vqpy_async_drop(vqpy_async_run *r);
/* vq_exec_run_async's done callback: user is the run, whose reference
 * (taken for the run before the call) it drops. */
void vqpy_async_done(void *user, int err);
/* A new varq.RunFuture taking the caller's reference to r (dropped even on
 * failure), holding engine and owner. numpy: results as numpy arrays. */
PyObject *vqpy_future_new(vqpy_async_run *r, PyObject *engine, PyObject *owner, bool numpy);

/* Attributes converted from a dict (attrs.c): v[0..n) point into keep (a
 * copy of the dict) and into arrays of their own. */
typedef struct {
    vq_attr *v;
    int n;
    PyObject *keep;
} vqpy_attrs;
/* Converts dict (None: no attributes) for op type op, each value typed as
 * the op's schema says; -1 with an exception set. Call vqpy_attrs_free
 * afterwards either way. */
int vqpy_attrs_from_dict(const char *op, PyObject *dict, vqpy_attrs *out);
void vqpy_attrs_free(vqpy_attrs *a);

/* Makes the varq.Tensor obj hold engine (a vqpy_engine or a list of
 * them; NULL: nothing) besides what it holds already (its engine field
 * becomes a list when it holds several): the tensor may get a var of that
 * engine, which must then outlive it. 0, or -1 with an exception. */
int vqpy_tensor_hold_engine(PyObject *obj, PyObject *engine);

/* A vq_tensor (a new reference) of obj: a varq.Tensor, anything
 * vqpy_tensor_from_object takes (a copy only for non-contiguous arrays or
 * other dtypes), or a DLPack exporter (a torch tensor); NULL with an
 * exception set. When obj is a varq.Tensor it is made to hold engine
 * (vqpy_tensor_hold_engine: it is used with it from now on). */
vq_tensor *vqpy_tensor_any(PyObject *obj, PyObject *engine);

/* Module functions defined in tensor.c. */
PyObject *vqpy_from_dlpack(PyObject *self, PyObject *obj);
PyObject *vqpy_tensor_fn(PyObject *self, PyObject *obj);

#endif
