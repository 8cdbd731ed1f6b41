/* varq._Session: an imported ONNX model, its scope and an executor on an
 * engine of its own; varq.InferenceSession (varq/__init__.py) is the
 * ONNX Runtime-shaped class over it.
 *
 * run() wraps each feed's memory as a tensor (vq_tensor_wrap through the
 * buffer protocol: no copy for a C-contiguous numpy array of the input's
 * dtype), runs the program with the GIL released (vq_exec_run is
 * thread-safe, so several Python threads run one session at once), and
 * hands back numpy arrays over the fetched tensors' own memory: each holds
 * its varq.Tensor, which holds the engine, so arrays outlive the session.
 *
 * close() frees the executor, the program and the scope once the runs in
 * flight are done (the last of them frees them when close came first);
 * a closed session's run raises varq.InvalidArgument. */
#include "varq_py.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One feed or fetch of the model: its name and declared type. */
typedef struct {
    char *name;
    vq_dtype dtype;
    int ndim;
    int64_t shape[VQ_MAX_DIMS]; /* -1: known only when fed */
} io_decl;

typedef struct {
    PyObject_HEAD PyObject *engine; /* a vqpy_engine, the executor's */
    vq_scope *scope;
    vq_program *program;
    vq_exec *exec;
    int ninputs, noutputs;
    io_decl *inputs, *outputs;
    const char **output_names; /* noutputs of them, pointing into outputs */
    int busy;                  /* runs in flight (counted under the GIL) */
    bool closed;
} vqpy_session;

static PyObject *asarray_fn; /* numpy.asarray, looked up on first use */

/* Frees what a run may use: only when no run is in flight. */
static void session_free_parts(vqpy_session *self)
{
    vq_exec *x = self->exec;
    vq_scope *s = self->scope;
    vq_program *p = self->program;
    self->exec = NULL;
    self->scope = NULL;
    self->program = NULL;
    Py_BEGIN_ALLOW_THREADS;
    vq_exec_free(x);
    vq_scope_free(s);
    vq_program_free(p);
    Py_END_ALLOW_THREADS;
}

static void decls_free(io_decl *d, int n)
{
    for (int i = 0; d && i < n; i++)
        free(d[i].name);
    free(d);
}

static int decls_read(vqpy_session *self, io_decl **out, char **names, int n)
{
    *out = calloc((size_t)(n ? n : 1), sizeof **out);
    if (!*out) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < n; i++) {
        io_decl *d = &(*out)[i];
        if (!(d->name = strdup(names[i]))) {
            PyErr_NoMemory();
            return -1;
        }
        int rc = vq_program_var_info(self->program, d->name, &d->dtype, &d->ndim, d->shape, NULL);
        if (rc < 0) {
            vqpy_raise(rc);
            return -1;
        }
    }
    return 0;
}

static int read_file(const char *path, void **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *nb = realloc(b, cap * 2);
        if (!nb) {
            free(b);
            b = NULL;
            break;
        }
        b = nb;
        cap *= 2;
    }
    int err = ferror(f) || !b;
    fclose(f);
    if (err) {
        free(b);
        return -1;
    }
    *buf = b;
    *len = n;
    return 0;
}

static int session_init(vqpy_session *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"model", "workers", "gpu", NULL};
    PyObject *model, *workers = Py_None, *gpu = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO", names, &model, &workers, &gpu))
        return -1;
    if (self->engine) {
        PyErr_SetString(PyExc_RuntimeError, "_Session.__init__ called twice");
        return -1;
    }
    vq_exec_opts xopts = {0};
    if (gpu != Py_None) {
        long id = PyLong_AsLong(gpu);
        if (id == -1 && PyErr_Occurred())
            return -1;
        xopts.device = (vq_ctx){VQ_DEV_GPU, (int)id};
        xopts.flags = VQ_EXEC_FETCH_HOST;
    }
    self->engine = PyObject_CallFunctionObjArgs((PyObject *)&vqpy_engine_type, workers, NULL);
    if (!self->engine)
        return -1;
    vq_engine *e = ((vqpy_engine *)self->engine)->engine;

    /* The model's bytes (for its feed and fetch names) and its import. */
    PyObject *path = NULL;
    Py_buffer bytes = {0};
    void *filebuf = NULL;
    const void *buf;
    size_t len;
    if (PyObject_CheckBuffer(model)) {
        if (PyObject_GetBuffer(model, &bytes, PyBUF_SIMPLE) < 0)
            return -1;
        buf = bytes.buf;
        len = (size_t)bytes.len;
    } else {
        if (!PyUnicode_FSConverter(model, &path))
            return -1;
        if (read_file(PyBytes_AS_STRING(path), &filebuf, &len) < 0) {
            PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, model);
            Py_DECREF(path);
            return -1;
        }
        buf = filebuf;
    }
    int rc;
    vq_onnx_info info = {0};
    Py_BEGIN_ALLOW_THREADS;
    rc = vq_scope_new(&self->scope);
    if (rc == 0)
        rc = path ? vq_program_from_onnx_file(&self->program, self->scope, PyBytes_AS_STRING(path))
                  : vq_program_from_onnx(&self->program, self->scope, buf, len);
    if (rc == 0)
        rc = vq_onnx_info_read(&info, buf, len);
    if (rc == 0)
        rc = vq_exec_new(&self->exec, e, &xopts);
    Py_END_ALLOW_THREADS;
    if (bytes.obj)
        PyBuffer_Release(&bytes);
    free(filebuf);
    Py_XDECREF(path);
    if (rc < 0) {
        vqpy_raise(rc);
        vq_onnx_info_free(&info);
        return -1;
    }
    self->ninputs = info.ninputs;
    self->noutputs = info.noutputs;
    int ok = decls_read(self, &self->inputs, info.inputs, info.ninputs) == 0 &&
             decls_read(self, &self->outputs, info.outputs, info.noutputs) == 0;
    vq_onnx_info_free(&info);
    if (!ok)
        return -1;
    self->output_names = malloc(sizeof(char *) * (size_t)(self->noutputs ? self->noutputs : 1));
    if (!self->output_names) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < self->noutputs; i++)
        self->output_names[i] = self->outputs[i].name;
    return 0;
}

static void session_dealloc(vqpy_session *self)
{
    session_free_parts(self); /* no run is in flight: each holds self */
    decls_free(self->inputs, self->ninputs);
    decls_free(self->outputs, self->noutputs);
    free(self->output_names);
    Py_XDECREF(self->engine); /* freed after the last array of a run */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *decl_list(io_decl *d, int n)
{
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        PyObject *shape = PyTuple_New(d[i].ndim);
        if (!shape) {
            Py_CLEAR(list);
            break;
        }
        for (int k = 0; k < d[i].ndim; k++)
            PyTuple_SET_ITEM(shape, k,
                             d[i].shape[k] < 0 ? Py_NewRef(Py_None)
                                               : PyLong_FromLongLong(d[i].shape[k]));
        PyObject *item = Py_BuildValue("(ssN)", d[i].name, vqpy_dtype_numpy(d[i].dtype), shape);
        if (!item) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, item);
    }
    return list;
}

static PyObject *session_inputs(vqpy_session *self, PyObject *unused)
{
    (void)unused;
    return decl_list(self->inputs, self->ninputs);
}

static PyObject *session_outputs(vqpy_session *self, PyObject *unused)
{
    (void)unused;
    return decl_list(self->outputs, self->noutputs);
}

static PyObject *closed_error(void)
{
    return vqpy_raise_msg(VQ_EINVAL, "the InferenceSession is closed");
}

static void shape_text(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, size, "(");
    for (int i = 0; i < ndim && n < size; i++) {
        if (shape[i] < 0)
            n += (size_t)snprintf(buf + n, size - n, "%sNone", i ? ", " : "");
        else
            n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    }
    if (n < size)
        snprintf(buf + n, size - n, ndim == 1 ? ",)" : ")");
}

/* The feed tensor of input d from value; NULL with an exception when it
 * is not an array of the input's dtype and shape. */
static vq_tensor *feed_tensor(const io_decl *d, PyObject *value)
{
    vq_tensor *t = vqpy_tensor_from_object(value, true);
    if (!t)
        return NULL;
    vq_dtype dt = vq_tensor_dtype(t);
    int ndim = vq_tensor_ndim(t);
    const int64_t *shape = vq_tensor_shape(t);
    bool fits = ndim == d->ndim;
    for (int i = 0; fits && i < ndim; i++)
        fits = d->shape[i] < 0 || d->shape[i] == shape[i];
    if (dt != d->dtype || !fits) {
        char want[160], got[160];
        shape_text(want, sizeof want, d->ndim, d->shape);
        shape_text(got, sizeof got, ndim, shape);
        vqpy_raise_msg(VQ_EINVAL, "input '%s': the model wants %s %s, the feed is %s %s", d->name,
                       vqpy_dtype_numpy(d->dtype), want, vqpy_dtype_numpy(dt), got);
        Py_BEGIN_ALLOW_THREADS;
        vq_tensor_release(t);
        Py_END_ALLOW_THREADS;
        return NULL;
    }
    return t;
}

static void release_all(vq_feed *feeds, int n)
{
    Py_BEGIN_ALLOW_THREADS;
    for (int i = 0; i < n; i++)
        vq_tensor_release(feeds[i].tensor);
    Py_END_ALLOW_THREADS;
}

/* run(output_names, feeds) -> list of numpy arrays; with async_run, the
 * same as a varq.RunFuture: the run is pushed with vq_exec_run_async and
 * its feeds and fetches live in a vqpy_async_run (future.c) until it is
 * done, while the future holds this session. */
static PyObject *session_run_impl(vqpy_session *self, PyObject *args, bool async_run)
{
    PyObject *names, *feed_map;
    if (!PyArg_ParseTuple(args, "OO!", &names, &PyDict_Type, &feed_map))
        return NULL;
    if (self->closed)
        return closed_error();

    /* The fetches, by name (None: every output, in the model's order). */
    int nfetch = self->noutputs;
    PyObject *name_seq = NULL;
    if (names != Py_None) {
        if (!(name_seq = PySequence_Fast(names, "run: output_names must be a list of names")))
            return NULL;
        nfetch = (int)PySequence_Fast_GET_SIZE(name_seq);
    }
    vqpy_async_run *arun = async_run ? vqpy_async_new(self->ninputs, nfetch) : NULL;
    vq_fetch *fetches =
        arun ? arun->fetches : calloc((size_t)(nfetch ? nfetch : 1), sizeof *fetches);
    vq_feed *feeds =
        arun ? arun->feeds : calloc((size_t)(self->ninputs ? self->ninputs : 1), sizeof *feeds);
    PyObject *result = NULL;
    int nfed = 0;
    if (!fetches || !feeds || (async_run && !arun)) {
        if (!arun) {
            free(fetches);
            free(feeds);
            fetches = NULL;
            feeds = NULL;
        }
        PyErr_NoMemory();
        goto out;
    }
    for (int i = 0; i < nfetch; i++) {
        if (!name_seq) {
            fetches[i].name = self->output_names[i];
            continue;
        }
        PyObject *o = PySequence_Fast_GET_ITEM(name_seq, i);
        const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
        if (!s) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "run: an output name is not a str");
            goto out;
        }
        int k = 0;
        while (k < self->noutputs && strcmp(self->output_names[k], s))
            k++;
        if (k == self->noutputs) {
            vqpy_raise_msg(VQ_EINVAL, "run: the model has no output named '%s'", s);
            goto out;
        }
        fetches[i].name = self->output_names[k];
    }

    /* The feeds: every input, nothing else. */
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(feed_map, &pos, &key, &value)) {
        const char *s = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        if (!s) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "run: a feed's name is not a str");
            goto out;
        }
        int k = 0;
        while (k < self->ninputs && strcmp(self->inputs[k].name, s))
            k++;
        if (k == self->ninputs) {
            vqpy_raise_msg(VQ_EINVAL, "run: the model has no input named '%s'", s);
            goto out;
        }
        vq_tensor *t = feed_tensor(&self->inputs[k], value);
        if (!t)
            goto out;
        /* A varq.Tensor fed here belongs to this engine from now on (the
         * executor gives it a var of the engine): it holds the engine, so
         * that its last release never pushes on a freed one. */
        if (PyObject_TypeCheck(value, &vqpy_tensor_type) &&
            vqpy_tensor_hold_engine(value, self->engine) < 0) {
            Py_BEGIN_ALLOW_THREADS;
            vq_tensor_release(t);
            Py_END_ALLOW_THREADS;
            goto out;
        }
        feeds[nfed++] = (vq_feed){self->inputs[k].name, t};
    }
    if (nfed < self->ninputs) {
        for (int k = 0; k < self->ninputs; k++) {
            int j = 0;
            while (j < nfed && feeds[j].name != self->inputs[k].name)
                j++;
            if (j == nfed) {
                vqpy_raise_msg(VQ_EINVAL, "run: input '%s' is not fed", self->inputs[k].name);
                goto out;
            }
        }
    }

    int rc;
    if (arun) {
        /* The run's reference for its done callback, dropped here when the
         * call fails (done is not called then). The names point into
         * self->inputs and outputs, which the future keeps alive. */
        arun->nfeeds = nfed;
        arun->nfetches = nfetch;
        atomic_fetch_add_explicit(&arun->refs, 1, memory_order_relaxed);
        Py_BEGIN_ALLOW_THREADS;
        rc = vq_exec_run_async(self->exec, self->program, self->scope, feeds, nfed, fetches, nfetch,
                               vqpy_async_done, arun);
        if (rc < 0)
            vqpy_async_drop(arun);
        Py_END_ALLOW_THREADS;
        if (rc < 0)
            vqpy_raise(rc);
        else
            result = vqpy_future_new(arun, self->engine, (PyObject *)self, true);
        if (rc < 0) {
            Py_BEGIN_ALLOW_THREADS;
            vqpy_async_drop(arun);
            Py_END_ALLOW_THREADS;
        }
        Py_XDECREF(name_seq);
        return result;
    }
    self->busy++;
    Py_BEGIN_ALLOW_THREADS;
    rc = vq_exec_run(self->exec, self->program, self->scope, feeds, nfed, fetches, nfetch);
    Py_END_ALLOW_THREADS;
    self->busy--;
    if (rc < 0) {
        vqpy_raise(rc);
    } else {
        if (!asarray_fn) {
            PyObject *np = PyImport_ImportModule("numpy");
            asarray_fn = np ? PyObject_GetAttrString(np, "asarray") : NULL;
            Py_XDECREF(np);
        }
        result = asarray_fn ? PyList_New(nfetch) : NULL;
        for (int i = 0; i < nfetch; i++) {
            /* the Tensor takes the reference, even on failure */
            PyObject *t = vqpy_tensor_new(fetches[i].tensor, self->engine);
            fetches[i].tensor = NULL;
            PyObject *arr = t && result ? PyObject_CallOneArg(asarray_fn, t) : NULL;
            Py_XDECREF(t);
            if (!arr)
                Py_CLEAR(result);
            else if (result)
                PyList_SET_ITEM(result, i, arr);
            else
                Py_DECREF(arr);
        }
    }
    if (self->closed && self->busy == 0)
        session_free_parts(self);
out:
    if (arun) { /* failed before the push: the run owns what was collected */
        arun->nfeeds = nfed;
        Py_BEGIN_ALLOW_THREADS;
        vqpy_async_drop(arun);
        Py_END_ALLOW_THREADS;
        Py_XDECREF(name_seq);
        return NULL;
    }
    if (feeds)
        release_all(feeds, nfed);
    for (int i = 0; fetches && i < nfetch; i++)
        if (fetches[i].tensor) {
            Py_BEGIN_ALLOW_THREADS;
            vq_tensor_release(fetches[i].tensor);
            Py_END_ALLOW_THREADS;
        }
    free(feeds);
    free(fetches);
    Py_XDECREF(name_seq);
    return result;
}

static PyObject *session_run(vqpy_session *self, PyObject *args)
{
    return session_run_impl(self, args, false);
}

static PyObject *session_run_async(vqpy_session *self, PyObject *args)
{
    return session_run_impl(self, args, true);
}

static PyObject *session_close(vqpy_session *self, PyObject *unused)
{
    (void)unused;
    if (!self->closed) {
        self->closed = true;
        if (self->busy == 0)
            session_free_parts(self);
    }
    Py_RETURN_NONE;
}

static PyObject *session_get_closed(vqpy_session *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->closed);
}

static PyMethodDef session_methods[] = {
    {"inputs", (PyCFunction)session_inputs, METH_NOARGS,
     "[(name, dtype, shape)] of the model's feeds; None for a dim known only when fed."},
    {"outputs", (PyCFunction)session_outputs, METH_NOARGS,
     "[(name, dtype, shape)] of the model's outputs."},
    {"run", (PyCFunction)session_run, METH_VARARGS,
     "run(output_names_or_None, {name: array}) -> [numpy.ndarray]"},
    {"run_async", (PyCFunction)session_run_async, METH_VARARGS,
     "run_async(output_names_or_None, {name: array}) -> RunFuture"},
    {"close", (PyCFunction)session_close, METH_NOARGS,
     "Frees the executor and the model once the runs in flight are done."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef session_getset[] = {
    {"closed", (getter)session_get_closed, NULL, "Whether close() was called.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject vqpy_session_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "varq._Session",
    .tp_basicsize = sizeof(vqpy_session),
    .tp_dealloc = (destructor)session_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "_Session(model, workers=None, gpu=None): see varq.InferenceSession.",
    .tp_methods = session_methods,
    .tp_getset = session_getset,
    .tp_init = (initproc)session_init,
    .tp_new = PyType_GenericNew,
};
