/* The _varq extension module: its types (tensor.c, engine.c, session.c,
 * future.c, program.c), its functions (ops.c among them), and varq's errors as Python exceptions: varq.Error with
 * a subclass per negative code (also deriving from the built-in exception
 * that says the same, so `except ValueError` catches VQ_EINVAL), each
 * raised with vq_errmsg()'s sentence and the code in its .code. */
#include "varq_py.h"

#include <stdarg.h>
#include <stdio.h>

PyObject *vqpy_error;

/* One exception class per code; the builtin base is looked up at init. */
static struct {
    int code;
    const char *name;
    const char *doc;
    PyObject **builtin;
    PyObject *cls;
} errors[] = {
    {VQ_EINVAL, "InvalidArgument", "VQ_EINVAL: a bad argument (a wrong name, dtype or shape)",
     &PyExc_ValueError, NULL},
    {VQ_ENOMEM, "OutOfMemory", "VQ_ENOMEM: out of memory", &PyExc_MemoryError, NULL},
    {VQ_EIO, "OperationFailed", "VQ_EIO: an op or a file operation failed", NULL, NULL},
    {VQ_EBUSY, "Busy", "VQ_EBUSY: a resource is still in use", NULL, NULL},
    {VQ_EDEADLK, "Deadlock", "VQ_EDEADLK: the wait would deadlock (waiting inside an op)", NULL,
     NULL},
    {VQ_ENOSYS, "NotAvailable", "VQ_ENOSYS: not available in this build (a GPU without CUDA)",
     &PyExc_NotImplementedError, NULL},
    {VQ_ETIMEDOUT, "TimedOut", "VQ_ETIMEDOUT: a run's deadline passed", &PyExc_TimeoutError, NULL},
    {VQ_ECANCELED, "Cancelled", "VQ_ECANCELED: cancelled, or skipped after a failure", NULL, NULL},
};

static PyObject *raise_text(int rc, const char *msg)
{
    PyObject *cls = vqpy_error;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
        if (errors[i].code == rc)
            cls = errors[i].cls;
    PyObject *exc = PyObject_CallFunction(cls, "s", msg);
    if (!exc)
        return NULL;
    PyObject *code = PyLong_FromLong(rc);
    if (code) {
        PyObject_SetAttrString(exc, "code", code);
        Py_DECREF(code);
    }
    PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

PyObject *vqpy_raise(int rc)
{
    const char *msg = vq_errmsg();
    return raise_text(rc, msg && *msg ? msg : vq_strerror(rc));
}

PyObject *vqpy_raise_msg(int rc, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return raise_text(rc, buf);
}

static PyObject *version_fn(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyUnicode_FromString(vq_version());
}

static PyMethodDef module_methods[] = {
    {"version", version_fn, METH_NOARGS, "The version of the varq library loaded."},
    {"from_dlpack", vqpy_from_dlpack, METH_O,
     "from_dlpack(x) -> Tensor: shares the memory of a CPU tensor exported by DLPack "
     "(x.__dlpack__() or a capsule): numpy arrays, torch tensors. x stays alive as long as "
     "the Tensor."},
    {"tensor", vqpy_tensor_fn, METH_O,
     "tensor(x) -> Tensor: a varq.Tensor of x, sharing its memory when x is a C-contiguous "
     "array of a varq dtype (numpy, anything with the buffer protocol, DLPack), copied "
     "otherwise (numpy.ascontiguousarray)."},
    {"append_backward", (PyCFunction)(void (*)(void))vqpy_append_backward,
     METH_VARARGS | METH_KEYWORDS,
     "append_backward(program, loss, no_grad=()) -> int: vq_append_backward."},
    {"_optimizer_minimize", (PyCFunction)(void (*)(void))vqpy_optimizer_minimize,
     METH_VARARGS | METH_KEYWORDS, "vq_optimizer_minimize (see varq.SGD, Momentum, Adam)."},
    {"_lr_schedule_build", (PyCFunction)(void (*)(void))vqpy_lr_schedule_build,
     METH_VARARGS | METH_KEYWORDS, "vq_lr_schedule_build (see varq.lr_schedule)."},
    {"_layer", (PyCFunction)(void (*)(void))vqpy_layer, METH_VARARGS | METH_KEYWORDS,
     "The vq_layer_* functions (see varq.layers)."},
    {"_op_run", vqpy_op_run, METH_VARARGS,
     "_op_run(engine, type, inputs, outputs, attrs) -> tuple: vq_op_run (see varq.ops)."},
    {"_op_names", vqpy_op_names, METH_NOARGS, "The registered op types, sorted."},
    {"_op_signature", vqpy_op_signature, METH_O, "vq_op_signature(type)."},
    {"_capture_begin", vqpy_capture_begin, METH_O, "vq_capture_begin (see varq.capture)."},
    {"_capture_end", vqpy_capture_end, METH_O, "vq_capture_end (see varq.capture)."},
    {"_capture_backward", vqpy_capture_backward, METH_VARARGS,
     "vq_capture_backward (see varq.capture.backward)."},
    {"_capture_stats", vqpy_capture_stats, METH_O, "vq_capture_get_stats."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_varq",
    .m_doc = "varq's C extension (see the varq package for the documented API).",
    .m_size = -1,
    .m_methods = module_methods,
};

static int add_type(PyObject *m, PyTypeObject *type, const char *name)
{
    if (PyType_Ready(type) < 0)
        return -1;
    Py_INCREF(type);
    if (PyModule_AddObject(m, name, (PyObject *)type) < 0) {
        Py_DECREF(type);
        return -1;
    }
    return 0;
}

/* The threads whose Python thread state is kept (vqpy_gil_ensure): the
 * key's value is set on them, and its destructor deletes the state at
 * the thread's exit. */
static pthread_key_t kept_key;
static pthread_once_t kept_once = PTHREAD_ONCE_INIT;
static bool kept_ok;

static void kept_state_free(void *tstate)
{
    /* Finalizing (or finalized): taking the GIL could end the thread on
     * the spot; the state goes with the interpreter. */
    if (!Py_IsInitialized() || vqpy_no_gil_for_callback())
        return;
    /* Not PyGILState_Release: the thread's exit has cleared PyGILState's
     * own thread-specific value already (glibc clears each before calling
     * the destructors), so it would not find the state. */
    PyEval_RestoreThread(tstate);
    PyThreadState_Clear(tstate);
    PyThreadState_DeleteCurrent(); /* and releases the GIL */
}

static void kept_key_make(void)
{
    kept_ok = pthread_key_create(&kept_key, kept_state_free) == 0;
}

PyGILState_STATE vqpy_gil_ensure(void)
{
    bool fresh = PyGILState_GetThisThreadState() == NULL;
    PyGILState_STATE g = PyGILState_Ensure();
    if (fresh && pthread_once(&kept_once, kept_key_make) == 0 && kept_ok &&
        pthread_setspecific(kept_key, PyGILState_GetThisThreadState()) == 0)
        PyGILState_Ensure(); /* the kept count (the GIL is held: LOCKED) */
    return g;
}

PyMODINIT_FUNC PyInit__varq(void)
{
    PyObject *m = PyModule_Create(&module_def);
    if (!m)
        return NULL;
    vqpy_error = PyErr_NewExceptionWithDoc("varq.Error",
                                           "A varq call failed: .code is its negative VQ_* code, "
                                           "the message vq_errmsg()'s "
                                           "sentence.",
                                           PyExc_RuntimeError, NULL);
    if (!vqpy_error || PyModule_AddObject(m, "Error", Py_NewRef(vqpy_error)) < 0)
        goto fail;
    for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++) {
        char qual[64];
        snprintf(qual, sizeof qual, "varq.%s", errors[i].name);
        PyObject *bases = errors[i].builtin ? PyTuple_Pack(2, vqpy_error, *errors[i].builtin)
                                            : PyTuple_Pack(1, vqpy_error);
        if (!bases)
            goto fail;
        errors[i].cls = PyErr_NewExceptionWithDoc(qual, errors[i].doc, bases, NULL);
        Py_DECREF(bases);
        if (!errors[i].cls || PyModule_AddObject(m, errors[i].name, Py_NewRef(errors[i].cls)) < 0)
            goto fail;
    }
    if (add_type(m, &vqpy_tensor_type, "Tensor") < 0 ||
        add_type(m, &vqpy_engine_type, "Engine") < 0 || add_type(m, &vqpy_var_type, "Var") < 0 ||
        add_type(m, &vqpy_session_type, "_Session") < 0 ||
        add_type(m, &vqpy_future_type, "RunFuture") < 0 ||
        add_type(m, &vqpy_program_type, "Program") < 0 ||
        add_type(m, &vqpy_scope_type, "Scope") < 0 ||
        add_type(m, &vqpy_executor_type, "Executor") < 0)
        goto fail;
    if (PyModule_AddStringConstant(m, "__version__", vq_version()) < 0 ||
        PyModule_AddIntConstant(m, "MAX_DIMS", VQ_MAX_DIMS) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}

int vqpy_fast_args(const char *fn, const char *const *names, int n, int maxpos,
                   PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **v)
{
    for (int k = 0; k < n; k++)
        v[k] = NULL;
    if (nargs > maxpos) {
        PyErr_Format(PyExc_TypeError, "%s takes at most %d positional arguments (%zd given)", fn,
                     maxpos, nargs);
        return -1;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, i);
        int k = 0;
        while (k < n && PyUnicode_CompareWithASCIIString(key, names[k]) != 0)
            k++;
        if (k == n || v[k]) {
            PyErr_Format(PyExc_TypeError, "%s: %s argument '%U'", fn,
                         k == n ? "an unexpected" : "a repeated", key);
            return -1;
        }
        v[k] = args[nargs + i];
    }
    return 0;
}
