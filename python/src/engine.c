/* varq.Engine and varq.Var: the dependency engine (include/varq/engine.h)
 * with Python callables as ops.
 *
 * engine.push(fn, reads=[...], writes=[...]) pushes one sync op whose
 * function takes the GIL (PyGILState_Ensure) only while fn runs on a
 * worker. An exception from fn fails the op (VQ_EIO): the engine skips
 * the ops that depend on it and passes the failure to the vars they write,
 * as for any op; the exception itself is kept in the Vars the op writes,
 * so that wait_var raises varq.OperationFailed with it as __cause__.
 *
 * Lifetimes: a Var holds its Engine, and so do the Tensors of runs made on
 * it (session.c), so the engine is freed (waiting for every op pushed)
 * only when nothing of it is left. An op holds fn until it is done. */
#include "varq_py.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    PyObject_HEAD PyObject *engine; /* the vqpy_engine */
    vq_var *var;
} vqpy_var;

/* ---- Engine ---- */

static int engine_init(vqpy_engine *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"workers", "naive", NULL};
    PyObject *workers = Py_None;
    int naive = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$p", names, &workers, &naive))
        return -1;
    if (self->engine) {
        PyErr_SetString(PyExc_RuntimeError, "Engine.__init__ called twice");
        return -1;
    }
    vq_engine_opts opts = {0};
    if (workers != Py_None) {
        long n = PyLong_AsLong(workers);
        if (n == -1 && PyErr_Occurred())
            return -1;
        if (n < 1 || n > 1024) {
            vqpy_raise_msg(VQ_EINVAL, "Engine: workers is %ld, not 1 to 1024", n);
            return -1;
        }
        opts.cpu_workers = (int)n;
    }
    if (naive)
        opts.kind = VQ_ENGINE_NAIVE;
    int rc;
    vq_engine *e = NULL;
    Py_BEGIN_ALLOW_THREADS;
    rc = vq_engine_new(&e, &opts);
    Py_END_ALLOW_THREADS;
    if (rc < 0) {
        vqpy_raise(rc);
        return -1;
    }
    self->engine = e;
    if (!self->failures && !(self->failures = PyDict_New()))
        return -1;
    return 0;
}

static void engine_dealloc(vqpy_engine *self);

static int engine_free_later(void *arg)
{
    vqpy_engine *self = arg;
    vq_engine *e = self->engine;
    self->engine = NULL;
    Py_BEGIN_ALLOW_THREADS;
    vq_engine_free(e);
    Py_END_ALLOW_THREADS;
    Py_DECREF(self); /* frees the rest */
    return 0;
}

static void engine_dealloc(vqpy_engine *self)
{
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    vq_engine *e = self->engine;
    if (e && vq_thread_in_op()) {
        /* The last reference went inside an op (its function held it):
         * the engine cannot be freed from there (it would wait for that
         * op). The main thread frees it at its next pending-call check;
         * the ops (which note failures in the object) are waited for
         * there, so the object waits too. */
        if (Py_AddPendingCall(engine_free_later, self) == 0) {
            Py_INCREF(self); /* resurrected until then */
            return;
        }
        e = NULL; /* leaked rather than deadlocked */
    }
    if (e) {
        /* Waits for every op, whose functions take the GIL. */
        Py_BEGIN_ALLOW_THREADS;
        vq_engine_free(e);
        Py_END_ALLOW_THREADS;
    }
    Py_XDECREF(self->failures);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *engine_new_var(vqpy_engine *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"name", NULL};
    const char *name = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|z", names, &name))
        return NULL;
    vq_var *v = vq_var_new(self->engine, name);
    if (!v)
        return vqpy_raise(VQ_ENOMEM);
    vqpy_var *var = PyObject_New(vqpy_var, &vqpy_var_type);
    if (!var) {
        vq_var_free(self->engine, v);
        return NULL;
    }
    var->engine = Py_NewRef(self);
    var->var = v;
    return (PyObject *)var;
}

/* One pushed Python op: the callable (the op's only Python reference),
 * and where to note its exception: the engine object (not a reference:
 * engine_dealloc waits for every op before the object goes) and the vars
 * the op writes. */
typedef struct {
    PyObject *fn;
    vqpy_engine *owner;
    int nwrites;
    vq_var *writes[];
} py_op;

static PyObject *var_key(vq_var *v)
{
    return PyLong_FromVoidPtr(v);
}

static int py_op_run(void *arg, const vq_exec_ctx *x)
{
    (void)x;
    py_op *op = arg;
    int rc = 0;
    if (vqpy_no_gil_for_callback())
        return vq_error_set(VQ_ECANCELED, "the Python interpreter is exiting");
    PyGILState_STATE g = vqpy_gil_ensure();
    PyObject *r = PyObject_CallNoArgs(op->fn);
    if (r) {
        Py_DECREF(r);
    } else {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        if (tb && value)
            PyException_SetTraceback(value, tb);
        PyObject *text = value ? PyObject_Repr(value) : NULL;
        const char *s = text ? PyUnicode_AsUTF8(text) : NULL;
        if (!s)
            PyErr_Clear();
        rc = vq_error_set(VQ_EIO, "the Python function raised %s", s ? s : "an exception");
        Py_XDECREF(text);
        for (int i = 0; value && i < op->nwrites; i++) {
            PyObject *k = var_key(op->writes[i]);
            if (!k || PyDict_SetItem(op->owner->failures, k, value) < 0)
                PyErr_Clear();
            Py_XDECREF(k);
        }
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
    }
    Py_CLEAR(op->fn); /* now, under this GIL hold: py_op_free then needs none */
    vqpy_gil_release(g);
    return rc;
}

static void py_op_free(void *arg)
{
    py_op *op = arg;
    if (!op->fn || vqpy_no_gil_for_callback()) {
        free(op); /* fn dropped by the run, or left to the exiting interpreter */
        return;
    }
    /* The op was skipped (an earlier writer failed): fn is still held. */
    PyGILState_STATE g = vqpy_gil_ensure();
    Py_DECREF(op->fn);
    vqpy_gil_release(g);
    free(op);
}

/* The vq_vars of a sequence of this engine's Vars (NULL or None: none)
 * into *out: into stack (room for VARS_ON_STACK) when they fit, else a
 * malloc'd array the caller frees when it is not stack. 0, or -1 with an
 * exception set. */
#define VARS_ON_STACK 8
static int vars_of(vqpy_engine *self, PyObject *seq, const char *what, vq_var **stack,
                   vq_var ***out, int *n)
{
    *out = stack;
    *n = 0;
    if (!seq || seq == Py_None)
        return 0;
    PyObject *fast = PySequence_Fast(seq, "push: reads and writes must be sequences of Vars");
    if (!fast)
        return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    if (len > VARS_ON_STACK && !(*out = malloc(sizeof(vq_var *) * (size_t)len))) {
        *out = stack;
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyObject_TypeCheck(o, &vqpy_var_type) || ((vqpy_var *)o)->engine != (PyObject *)self) {
            if (*out != stack)
                free(*out);
            *out = stack;
            Py_DECREF(fast);
            vqpy_raise_msg(VQ_EINVAL, "push: %s[%zd] is not a Var of this engine", what, i);
            return -1;
        }
        (*out)[i] = ((vqpy_var *)o)->var;
    }
    Py_DECREF(fast);
    *n = (int)len;
    return 0;
}

/* push(fn, reads=None, writes=None, *, priority=0), from the vectorcall
 * arguments (vqpy_fast_args). */
static int push_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **fn,
                     PyObject **reads, PyObject **writes, int *priority)
{
    static const char *const names[] = {"fn", "reads", "writes", "priority"};
    PyObject *v[4];
    if (vqpy_fast_args("push", names, 4, 3, args, nargs, kwnames, v) < 0)
        return -1;
    if (!v[0]) {
        PyErr_SetString(PyExc_TypeError, "push needs fn");
        return -1;
    }
    *fn = v[0];
    *reads = v[1];
    *writes = v[2];
    *priority = 0;
    if (v[3]) {
        long p = PyLong_AsLong(v[3]);
        if (p == -1 && PyErr_Occurred())
            return -1;
        if (p < INT_MIN || p > INT_MAX) {
            PyErr_SetString(PyExc_OverflowError, "push: priority is out of range");
            return -1;
        }
        *priority = (int)p;
    }
    return 0;
}

static PyObject *engine_push(vqpy_engine *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    PyObject *fn, *reads, *writes;
    int priority;
    if (push_args(args, nargs, kwnames, &fn, &reads, &writes, &priority) < 0)
        return NULL;
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "push: fn is not callable");
        return NULL;
    }
    vq_var *rstack[VARS_ON_STACK], *wstack[VARS_ON_STACK];
    vq_var **rv, **wv;
    int nr, nw;
    if (vars_of(self, reads, "reads", rstack, &rv, &nr) < 0)
        return NULL;
    if (vars_of(self, writes, "writes", wstack, &wv, &nw) < 0) {
        if (rv != rstack)
            free(rv);
        return NULL;
    }
    py_op *op = malloc(sizeof *op + sizeof(vq_var *) * (size_t)nw);
    int rc = VQ_ENOMEM;
    if (op) {
        op->fn = Py_NewRef(fn);
        op->owner = self;
        op->nwrites = nw;
        for (int i = 0; i < nw; i++)
            op->writes[i] = wv[i];
        vq_task task = {.fn = py_op_run,
                        .arg = op,
                        .arg_free = py_op_free,
                        .reads = rv,
                        .nreads = nr,
                        .writes = wv,
                        .nwrites = nw,
                        .priority = priority,
                        .name = "python"};
        Py_BEGIN_ALLOW_THREADS;
        rc = vq_push(self->engine, &task);
        Py_END_ALLOW_THREADS;
    }
    if (rv != rstack)
        free(rv);
    if (wv != wstack)
        free(wv);
    if (!op)
        return PyErr_NoMemory();
    if (rc < 0) {
        PyObject *err = vqpy_raise(rc);
        Py_DECREF(op->fn); /* a rejected op's arg_free is not called */
        free(op);
        return err;
    }
    Py_RETURN_NONE;
}

/* Raises the failure of waiting on v: varq's sentence, with the exception
 * of the Python op that failed on v (when it was one) added to it and as
 * the raised exception's __cause__. */
static PyObject *raise_wait(int rc, vqpy_var *v)
{
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", vq_errmsg()); /* before anything else can fail */
    vqpy_engine *e = (vqpy_engine *)v->engine;
    PyObject *k = var_key(v->var);
    PyObject *cause = k ? PyDict_GetItemWithError(e->failures, k) : NULL;
    if (!cause) {
        PyErr_Clear();
        Py_XDECREF(k);
        return vqpy_raise_msg(rc, "%s", msg[0] ? msg : vq_strerror(rc));
    }
    Py_INCREF(cause);
    if (PyDict_DelItem(e->failures, k) < 0)
        PyErr_Clear();
    Py_DECREF(k);
    PyObject *text = PyObject_Repr(cause);
    const char *s = text ? PyUnicode_AsUTF8(text) : NULL;
    if (!s)
        PyErr_Clear();
    vqpy_raise_msg(rc, "%s; the Python function raised %s", msg, s ? s : "an exception");
    Py_XDECREF(text);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    PyException_SetCause(value, cause); /* steals the reference */
    PyErr_Restore(type, value, tb);
    return NULL;
}

static PyObject *engine_wait_var(vqpy_engine *self, PyObject *arg)
{
    if (!PyObject_TypeCheck(arg, &vqpy_var_type) || ((vqpy_var *)arg)->engine != (PyObject *)self)
        return vqpy_raise_msg(VQ_EINVAL, "wait_var: not a Var of this engine");
    vqpy_var *v = (vqpy_var *)arg;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = vq_wait_var(self->engine, v->var);
    Py_END_ALLOW_THREADS;
    if (rc < 0)
        return raise_wait(rc, v);
    PyObject *k = var_key(v->var);
    if (!k || (PyDict_DelItem(self->failures, k) < 0 && PyErr_ExceptionMatches(PyExc_KeyError)))
        PyErr_Clear();
    Py_XDECREF(k);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *engine_wait_all(vqpy_engine *self, PyObject *unused)
{
    (void)unused;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = vq_wait_all(self->engine);
    Py_END_ALLOW_THREADS;
    if (rc < 0)
        return vqpy_raise(rc);
    Py_RETURN_NONE;
}

static PyMethodDef engine_methods[] = {
    {"new_var", (PyCFunction)(void (*)(void))engine_new_var, METH_VARARGS | METH_KEYWORDS,
     "new_var(name=None) -> Var: a new var (a piece of state ops are ordered on)."},
    {"push", (PyCFunction)(void (*)(void))engine_push, METH_FASTCALL | METH_KEYWORDS,
     "push(fn, reads=(), writes=(), *, priority=0): runs fn() on a worker once every earlier "
     "op that shares a var with it, one of them writing, is done; returns at once. An "
     "exception in fn fails the op and the vars it writes."},
    {"wait_var", (PyCFunction)engine_wait_var, METH_O,
     "wait_var(var): waits for the ops pushed on var; raises their failure (and clears it)."},
    {"wait_all", (PyCFunction)engine_wait_all, METH_NOARGS,
     "wait_all(): waits for every op pushed; raises the first failure since the last call."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject vqpy_engine_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "varq.Engine",
    .tp_basicsize = sizeof(vqpy_engine),
    .tp_dealloc = (destructor)engine_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Engine(workers=None, *, naive=False): varq's dependency engine: ops pushed "
              "with the vars they read and write run in parallel where they share no "
              "written var, with the result of running them one at a time in push order.",
    .tp_weaklistoffset = offsetof(vqpy_engine, weakrefs),
    .tp_methods = engine_methods,
    .tp_init = (initproc)engine_init,
    .tp_new = PyType_GenericNew,
};

/* ---- Var ---- */

static void var_dealloc(vqpy_var *self)
{
    vqpy_engine *e = (vqpy_engine *)self->engine;
    vq_var *v = self->var;
    /* The deletion is pushed on v after its ops (GIL released: a push). */
    Py_BEGIN_ALLOW_THREADS;
    vq_var_free(e->engine, v);
    Py_END_ALLOW_THREADS;
    PyObject *k = var_key(v);
    if (!k || (PyDict_DelItem(e->failures, k) < 0))
        PyErr_Clear();
    Py_XDECREF(k);
    Py_DECREF(self->engine);
    PyObject_Free(self);
}

PyTypeObject vqpy_var_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "varq.Var",
    .tp_basicsize = sizeof(vqpy_var),
    .tp_dealloc = (destructor)var_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A var of an Engine (Engine.new_var): ops that write it run one at a time, in "
              "push order, and after the reads pushed before them.",
};
