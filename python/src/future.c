/* varq.RunFuture: the result of a run pushed with vq_exec_run_async
 * (InferenceSession.run_async, Executor.run_async), in the shape of
 * concurrent.futures.Future: done(), result(timeout), exception(timeout),
 * wait(timeout), add_done_callback(fn); and awaitable (varq.wrap_future).
 *
 * The run's done callback runs on an engine worker and takes the GIL only
 * when done callbacks were added: it notes the code and vq_errmsg()'s
 * sentence under the run's mutex and wakes the waiters. Everything Python
 * (the arrays of the fetches, the exception object) is made later, by the
 * thread that asks for the result, under the GIL; waiting releases the
 * GIL. Done callbacks are called on the worker (with the GIL taken there)
 * or, when the run is done already, at once by add_done_callback.
 *
 * Lifetimes: a vqpy_async_run is shared by the run (until its done
 * callback) and the future (until it is freed), counted in refs; the
 * last of the two releases the feeds and the fetches (with no GIL held:
 * a wrapped numpy buffer's release takes it itself). The future holds
 * the engine (its fetches' tensors are the engine's) and the session or
 * executor that made it (whose executor must outlive the run; its free
 * waits for runs in flight anyway). */
#include "varq_py.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    PyObject_HEAD vqpy_async_run *run;
    PyObject *engine; /* a vqpy_engine */
    PyObject *owner;  /* the session or executor */
    PyObject *value;  /* the list of results, once made */
    PyObject *error;  /* the exception, once made */
    bool numpy;       /* results as numpy arrays (else varq.Tensor) */
    /* A thread is making value: numpy.asarray waits for each tensor with
     * the GIL released, so another thread's result() may come in between
     * and must wait for this one's list instead of making its own. */
    bool settling;
    PyObject *callbacks; /* the done callbacks not called yet (a list), or NULL */
} vqpy_future;

static void future_notify(PyObject *future);

vqpy_async_run *vqpy_async_new(int nfeeds, int nfetches)
{
    vqpy_async_run *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->feeds = calloc((size_t)(nfeeds ? nfeeds : 1), sizeof *r->feeds);
    r->fetches = calloc((size_t)(nfetches ? nfetches : 1), sizeof *r->fetches);
    r->names = calloc((size_t)(nfeeds + nfetches ? nfeeds + nfetches : 1), sizeof *r->names);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int bad = pthread_mutex_init(&r->mu, NULL) || pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (bad || !r->feeds || !r->fetches || !r->names) {
        free(r->feeds);
        free(r->fetches);
        free(r->names);
        free(r);
        return NULL;
    }
    atomic_init(&r->refs, 1);
    atomic_init(&r->finished, false);
    return r;
}

/* Drops one reference; the last frees the run's tensors and names. Call
 * without the GIL (tensor releases may take it). */
void vqpy_async_drop(vqpy_async_run *r)
{
    if (!r || atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
        return; /* acq_rel: the last dropper sees every write of the others */
    for (int i = 0; i < r->nfeeds; i++)
        vq_tensor_release(r->feeds[i].tensor);
    for (int i = 0; i < r->nfetches; i++)
        vq_tensor_release(r->fetches[i].tensor);
    for (int i = 0; i < r->nnames; i++)
        free(r->names[i]);
    free(r->names);
    free(r->feeds);
    free(r->fetches);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

/* The run's done callback (an engine worker; no GIL). */
void vqpy_async_done(void *user, int err)
{
    vqpy_async_run *r = user;
    pthread_mutex_lock(&r->mu);
    r->rc = err;
    if (err < 0) {
        const char *m = vq_errmsg();
        snprintf(r->msg, sizeof r->msg, "%s", m && *m ? m : vq_strerror(err));
    }
    for (int i = 0; i < 2; i++)
        if (r->busy[i]) /* before done: a waiter woken may edit the program at once */
            atomic_fetch_sub(r->busy[i], 1);
    r->done = true;
    atomic_store_explicit(&r->finished, true, memory_order_release);
    PyObject *notify = r->notify;
    r->notify = NULL;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    if (notify)
        future_notify(notify);
    vqpy_async_drop(r);
}

PyObject *vqpy_future_new(vqpy_async_run *r, PyObject *engine, PyObject *owner, bool numpy)
{
    vqpy_future *f = PyObject_New(vqpy_future, &vqpy_future_type);
    if (!f) {
        Py_BEGIN_ALLOW_THREADS;
        vqpy_async_drop(r);
        Py_END_ALLOW_THREADS;
        return NULL;
    }
    f->run = r;
    f->engine = Py_NewRef(engine);
    f->owner = Py_NewRef(owner);
    f->value = NULL;
    f->error = NULL;
    f->numpy = numpy;
    f->settling = false;
    f->callbacks = NULL;
    return (PyObject *)f;
}

/* Calls fn(future), logging (not raising) its exception on the "varq"
 * logger as concurrent.futures does; GIL held. */
static void call_done_callback(PyObject *fn, PyObject *future)
{
    PyObject *r = PyObject_CallOneArg(fn, future);
    if (r) {
        Py_DECREF(r);
        return;
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb && value)
        PyException_SetTraceback(value, tb);
    PyObject *logging = PyImport_ImportModule("logging");
    PyObject *logger = logging ? PyObject_CallMethod(logging, "getLogger", "s", "varq") : NULL;
    PyObject *kw = logger && value ? Py_BuildValue("{s:O}", "exc_info", value) : NULL;
    PyObject *meth = kw ? PyObject_GetAttrString(logger, "error") : NULL;
    PyObject *args =
        meth ? Py_BuildValue("(sO)", "exception calling callback for %r", future) : NULL;
    PyObject *res = args ? PyObject_Call(meth, args, kw) : NULL;
    if (!res) { /* no logging: the interpreter's hook for what cannot be raised */
        PyErr_Clear();
        PyErr_Restore(Py_XNewRef(type), Py_XNewRef(value), Py_XNewRef(tb));
        PyErr_WriteUnraisable(fn);
    }
    Py_XDECREF(res);
    Py_XDECREF(args);
    Py_XDECREF(meth);
    Py_XDECREF(kw);
    Py_XDECREF(logger);
    Py_XDECREF(logging);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
}

/* Runs the future's done callbacks, each once, in the order added; GIL
 * held. Callbacks added meanwhile (by a callback) are called too. */
static void run_done_callbacks(vqpy_future *self)
{
    while (self->callbacks) {
        PyObject *list = self->callbacks;
        self->callbacks = NULL;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++)
            call_done_callback(PyList_GET_ITEM(list, i), (PyObject *)self);
        Py_DECREF(list);
    }
}

static int decref_later(void *obj)
{
    Py_DECREF((PyObject *)obj);
    return 0;
}

/* The done callback's part for a future with done callbacks (an engine
 * worker, inside the run's final op; no GIL): calls them under the GIL
 * and drops the run's reference to the future. The future's last
 * reference is not dropped here: freeing it may free its session or
 * executor, whose free waits for the runs in flight, this one among them;
 * the main thread drops it at its next pending-call check instead. */
static void future_notify(PyObject *future)
{
    if (vqpy_no_gil_for_callback())
        return; /* the exiting interpreter's: left to it */
    PyGILState_STATE g = vqpy_gil_ensure();
    run_done_callbacks((vqpy_future *)future);
    if (Py_REFCNT(future) > 1 || Py_AddPendingCall(decref_later, future) < 0)
        Py_DECREF(future); /* not the last (or no room to defer: at worst freed here) */
    vqpy_gil_release(g);
}

static void future_dealloc(vqpy_future *self)
{
    vqpy_async_run *r = self->run;
    Py_BEGIN_ALLOW_THREADS;
    vqpy_async_drop(r);
    Py_END_ALLOW_THREADS;
    Py_XDECREF(self->value);
    Py_XDECREF(self->error);
    Py_XDECREF(self->callbacks);
    Py_XDECREF(self->owner);
    Py_XDECREF(self->engine); /* after the tensors: they hold it */
    PyObject_Free(self);
}

/* How many times a waiter looks at a run before sleeping on it. */
#define WAIT_SPINS 64

/* Waits (GIL released) until the run is done or timeout (seconds; None:
 * forever) passes; 1 when done, 0 on timeout, -1 with an exception. */
static int future_wait_for(vqpy_future *self, PyObject *timeout)
{
    vqpy_async_run *r = self->run;
    double secs = -1;
    if (timeout && timeout != Py_None) {
        secs = PyFloat_AsDouble(timeout);
        if (secs == -1 && PyErr_Occurred())
            return -1;
        if (secs < 0)
            secs = 0;
    }
    bool done;
    Py_BEGIN_ALLOW_THREADS;
    /* A small run ends within microseconds: a few looks (yielding the
     * core between them) spare the futex sleep and wake-up, which cost
     * more than that on a VM. */
    for (int i = 0;
         secs != 0 && i < WAIT_SPINS && !atomic_load_explicit(&r->finished, memory_order_acquire);
         i++)
        sched_yield();
    pthread_mutex_lock(&r->mu);
    if (secs < 0) {
        while (!r->done)
            pthread_cond_wait(&r->cv, &r->mu);
    } else if (!r->done) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double whole = (double)(time_t)secs;
        ts.tv_sec += (time_t)secs;
        ts.tv_nsec += (long)((secs - whole) * 1e9);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        while (!r->done && pthread_cond_timedwait(&r->cv, &r->mu, &ts) != ETIMEDOUT)
            ;
    }
    done = r->done;
    pthread_mutex_unlock(&r->mu);
    Py_END_ALLOW_THREADS;
    return done ? 1 : 0;
}

/* Makes self->value or self->error from the finished run (once). */
static int future_settle(vqpy_future *self)
{
    while (self->settling && !self->value && !self->error) {
        Py_BEGIN_ALLOW_THREADS;
        sched_yield();
        Py_END_ALLOW_THREADS;
    }
    if (self->value || self->error)
        return 0;
    vqpy_async_run *r = self->run;
    if (r->rc < 0) {
        vqpy_raise_msg(r->rc, "%s", r->msg);
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        Py_XDECREF(type);
        Py_XDECREF(tb);
        self->error = value;
        return self->error ? 0 : -1;
    }
    self->settling = true;
    PyObject *list = PyList_New(r->nfetches);
    for (int i = 0; list && i < r->nfetches; i++) {
        /* the Tensor takes the run's reference */
        PyObject *t = vqpy_tensor_new(r->fetches[i].tensor, self->engine);
        r->fetches[i].tensor = NULL;
        PyObject *item = t && self->numpy ? vqpy_numpy_asarray(t) : Py_XNewRef(t);
        Py_XDECREF(t);
        if (!item) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, item);
    }
    self->value = list;
    if (!list) { /* an exception for every caller from now on */
        PyObject *type, *tb;
        PyErr_Fetch(&type, &self->error, &tb);
        PyErr_NormalizeException(&type, &self->error, &tb);
        Py_XDECREF(type);
        Py_XDECREF(tb);
        PyErr_SetObject((PyObject *)Py_TYPE(self->error), self->error);
    }
    self->settling = false;
    return list ? 0 : -1;
}

static PyObject *timeout_error(void)
{
    PyErr_SetString(PyExc_TimeoutError, "the run is not done yet");
    return NULL;
}

static PyObject *future_result(vqpy_future *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", names, &timeout))
        return NULL;
    int w = future_wait_for(self, timeout);
    if (w <= 0)
        return w < 0 ? NULL : timeout_error();
    if (future_settle(self) < 0)
        return NULL;
    if (self->error) {
        PyErr_SetObject((PyObject *)Py_TYPE(self->error), self->error);
        return NULL;
    }
    return Py_NewRef(self->value);
}

static PyObject *future_exception(vqpy_future *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", names, &timeout))
        return NULL;
    int w = future_wait_for(self, timeout);
    if (w <= 0)
        return w < 0 ? NULL : timeout_error();
    if (future_settle(self) < 0)
        return NULL;
    return Py_NewRef(self->error ? self->error : Py_None);
}

static PyObject *future_wait(vqpy_future *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"timeout", NULL};
    PyObject *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", names, &timeout))
        return NULL;
    int w = future_wait_for(self, timeout);
    return w < 0 ? NULL : PyBool_FromLong(w);
}

static PyObject *future_done(vqpy_future *self, PyObject *unused)
{
    (void)unused;
    vqpy_async_run *r = self->run;
    bool done;
    pthread_mutex_lock(&r->mu); /* held only for a few stores: no GIL hand-off needed */
    done = r->done;
    pthread_mutex_unlock(&r->mu);
    return PyBool_FromLong(done);
}

static PyObject *future_running(vqpy_future *self, PyObject *unused)
{
    PyObject *d = future_done(self, unused);
    if (!d)
        return NULL;
    PyObject *r = PyBool_FromLong(d == Py_False);
    Py_DECREF(d);
    return r;
}

static PyObject *future_add_done_callback(vqpy_future *self, PyObject *fn)
{
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "add_done_callback: fn is not callable");
        return NULL;
    }
    vqpy_async_run *r = self->run;
    /* The list is edited under the GIL only; r->done and r->notify under
     * r->mu, so either the done callback sees notify set (and calls the
     * list, after taking the GIL this thread holds) or this call sees done
     * (and calls fn itself). mu is held for a few stores only. */
    if (!self->callbacks && !(self->callbacks = PyList_New(0)))
        return NULL;
    if (PyList_Append(self->callbacks, fn) < 0)
        return NULL;
    pthread_mutex_lock(&r->mu);
    bool done = r->done;
    if (!done && !r->notify)
        r->notify = Py_NewRef(self); /* the run's, until its done callback */
    pthread_mutex_unlock(&r->mu);
    if (done)
        run_done_callbacks(self);
    Py_RETURN_NONE;
}

/* await future: varq.wrap_future(future).__await__() (varq/__init__.py:
 * an asyncio future on the running loop, completed through a done
 * callback and loop.call_soon_threadsafe). */
static PyObject *future_await(PyObject *self)
{
    PyObject *varq = PyImport_ImportModule("varq");
    PyObject *wrapped = varq ? PyObject_CallMethod(varq, "wrap_future", "O", self) : NULL;
    Py_XDECREF(varq);
    if (!wrapped)
        return NULL;
    PyObject *it = PyObject_CallMethod(wrapped, "__await__", NULL);
    Py_DECREF(wrapped);
    return it;
}

static PyAsyncMethods future_as_async = {
    .am_await = future_await,
};

static PyObject *future_false(vqpy_future *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    Py_RETURN_FALSE;
}

static PyMethodDef future_methods[] = {
    {"result", (PyCFunction)(void (*)(void))future_result, METH_VARARGS | METH_KEYWORDS,
     "result(timeout=None) -> list: waits (GIL released) for the run and returns its "
     "fetches, one per name, as numpy arrays (Executor.run_async(return_numpy=False): "
     "varq.Tensor) over the run's own memory; raises the run's varq.Error, or TimeoutError "
     "when timeout seconds pass first (the run goes on). Every call returns the same list. "
     "Thread-safe."},
    {"exception", (PyCFunction)(void (*)(void))future_exception, METH_VARARGS | METH_KEYWORDS,
     "exception(timeout=None) -> varq.Error or None: waits like result() and returns the "
     "run's failure instead of raising it. Thread-safe."},
    {"wait", (PyCFunction)(void (*)(void))future_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None) -> bool: waits (GIL released) until the run is done or timeout "
     "seconds pass; whether it is done. Thread-safe."},
    {"done", (PyCFunction)future_done, METH_NOARGS,
     "done() -> bool: whether the run has finished (succeeded or failed). Never blocks. "
     "Thread-safe."},
    {"running", (PyCFunction)future_running, METH_NOARGS,
     "running() -> bool: concurrent.futures' name; here the same as done() is false "
     "(a pushed run is running, or queued on the engine)."},
    {"add_done_callback", (PyCFunction)future_add_done_callback, METH_O,
     "add_done_callback(fn): calls fn(future) once when the run is done (succeeded or "
     "failed): on the engine worker that completes it, with the GIL taken there, or at once "
     "in this thread when it is done already. Callbacks run in the order added; an exception "
     "from one is logged (the 'varq' logger), not raised. Keep them short and do not wait "
     "on the engine in them (a sync run there raises varq.Deadlock): hand the future to "
     "another thread, e.g. loop.call_soon_threadsafe (see varq.wrap_future). Thread-safe."},
    {"cancel", (PyCFunction)future_false, METH_NOARGS,
     "cancel() -> False: a pushed run is not cancelled through its future "
     "(Executor.cancel ends it with varq.Cancelled)."},
    {"cancelled", (PyCFunction)future_false, METH_NOARGS,
     "cancelled() -> False: a pushed run is not cancelled through its future "
     "(Executor.cancel ends it with varq.Cancelled)."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject vqpy_future_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "varq.RunFuture",
    .tp_basicsize = sizeof(vqpy_future),
    .tp_dealloc = (destructor)future_dealloc,
    .tp_as_async = &future_as_async,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The pending result of InferenceSession.run_async or Executor.run_async, "
              "shaped like concurrent.futures.Future. Completed by the run's done callback "
              "on an engine worker, which takes the GIL only to call done callbacks "
              "(add_done_callback). Awaitable: `await future` gives result()'s list "
              "(varq.wrap_future). Dropping it does not cancel the run; the feeds stay held "
              "until the run is done.",
    .tp_methods = future_methods,
};
