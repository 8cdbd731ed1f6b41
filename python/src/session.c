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
    PyObject **input_keys;     /* ninputs interned str of the inputs' names */
    int busy;                  /* runs in flight (counted under the GIL) */
    bool closed;
} vqpy_session;

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
    if (!(self->input_keys = calloc((size_t)self->ninputs + 1, sizeof *self->input_keys))) {
        PyErr_NoMemory();
        return -1;
    }
    for (int i = 0; i < self->ninputs; i++)
        if (!(self->input_keys[i] = PyUnicode_InternFromString(self->inputs[i].name)))
            return -1;
    return 0;
}

static void session_dealloc(vqpy_session *self)
{
    session_free_parts(self); /* no run is in flight: each holds self */
    decls_free(self->inputs, self->ninputs);
    decls_free(self->outputs, self->noutputs);
    free(self->output_names);
    for (int i = 0; self->input_keys && i < self->ninputs; i++)
        Py_XDECREF(self->input_keys[i]);
    free(self->input_keys);
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

/* Whether t has input d's dtype and shape; raises varq.InvalidArgument
 * saying both when not. */
static bool feed_fits(const io_decl *d, vq_tensor *t)
{
    vq_dtype dt = vq_tensor_dtype(t);
    int ndim = vq_tensor_ndim(t);
    const int64_t *shape = vq_tensor_shape(t);
    bool fits = ndim == d->ndim && dt == d->dtype;
    for (int i = 0; fits && i < ndim; i++)
        fits = d->shape[i] < 0 || d->shape[i] == shape[i];
    if (!fits) {
        char want[160], got[160];
        shape_text(want, sizeof want, d->ndim, d->shape);
        shape_text(got, sizeof got, ndim, shape);
        vqpy_raise_msg(VQ_EINVAL, "input '%s': the model wants %s %s, the feed is %s %s", d->name,
                       vqpy_dtype_numpy(d->dtype), want, vqpy_dtype_numpy(dt), got);
    }
    return fits;
}

/* Releases feeds[0..n) (GIL released: see varq_py.h), then, back under the
 * GIL, lets go of the numpy arrays held for them (holds: NULL, or one per
 * feed, NULL for a feed that holds none). */
static void release_feeds(vq_feed *feeds, vqpy_np_hold **holds, int n)
{
    if (n == 0)
        return;
    Py_BEGIN_ALLOW_THREADS;
    for (int i = 0; i < n; i++)
        vq_tensor_release(feeds[i].tensor);
    Py_END_ALLOW_THREADS;
    for (int i = 0; holds && i < n; i++)
        vqpy_np_hold_done(holds[i]);
}

/* The feed tensor of input d from value; NULL with an exception when it
 * is not an array of the input's dtype and shape. With hold (the sync
 * run's path), a numpy array is wrapped from its fields (vqpy_np_feed:
 * *hold set; NULL for other feeds); otherwise through the buffer protocol
 * (a copy only for a non-contiguous array or another type). */
static vq_tensor *feed_tensor(vqpy_session *self, const io_decl *d, PyObject *value,
                              vqpy_np_hold **hold)
{
    vq_tensor *t = hold ? vqpy_np_feed(value, hold) : NULL;
    if (!t) {
        if (!(t = vqpy_tensor_from_object(value, true)))
            return NULL;
        /* A varq.Tensor fed here belongs to this engine from now on (the
         * executor gives it a var of the engine): it holds the engine, so
         * that its last release never pushes on a freed one. */
        if (PyObject_TypeCheck(value, &vqpy_tensor_type) &&
            vqpy_tensor_hold_engine(value, self->engine) < 0) {
            release_feeds(&(vq_feed){NULL, t}, NULL, 1);
            return NULL;
        }
    }
    if (!feed_fits(d, t)) {
        release_feeds(&(vq_feed){NULL, t}, hold, 1);
        if (hold)
            *hold = NULL;
        return NULL;
    }
    return t;
}

/* The index of input key (a str) or -1 with an exception. The names are
 * interned at creation, so a literal key ("x") matches by address. */
static int input_index(vqpy_session *self, PyObject *key)
{
    for (int k = 0; k < self->ninputs; k++)
        if (key == self->input_keys[k])
            return k;
    if (!PyUnicode_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "run: a feed's name is not a str");
        return -1;
    }
    for (int k = 0; k < self->ninputs; k++) {
        int c = PyUnicode_Compare(key, self->input_keys[k]);
        if (c == 0)
            return k;
        if (c == -1 && PyErr_Occurred())
            return -1;
    }
    const char *name = PyUnicode_AsUTF8(key);
    if (name)
        vqpy_raise_msg(VQ_EINVAL, "run: the model has no input named '%s'", name);
    return -1;
}

/* Fills feeds (and holds, when not NULL) from feed_map: a dict {name:
 * array} of every input and nothing else, or a list or tuple of arrays in
 * the model's input order. *nfed counts the tensors taken (the caller
 * releases them, also on failure). 0, or -1 with an exception. */
static int collect_feeds(vqpy_session *self, PyObject *feed_map, vq_feed *feeds,
                         vqpy_np_hold **holds, int *nfed)
{
    *nfed = 0;
    if (PyList_Check(feed_map) || PyTuple_Check(feed_map)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(feed_map);
        if (n != self->ninputs) {
            vqpy_raise_msg(VQ_EINVAL, "run: %zd feeds in a sequence for the model's %d inputs", n,
                           self->ninputs);
            return -1;
        }
        for (int k = 0; k < self->ninputs; k++) {
            PyObject *value = PySequence_Fast_GET_ITEM(feed_map, k);
            vq_tensor *t = feed_tensor(self, &self->inputs[k], value, holds ? &holds[k] : NULL);
            if (!t)
                return -1;
            feeds[(*nfed)++] = (vq_feed){self->inputs[k].name, t};
        }
        return 0;
    }
    if (!PyDict_Check(feed_map)) {
        PyErr_SetString(PyExc_TypeError, "run: input_feed must be a dict {name: array} or a list "
                                         "of arrays in the model's input order");
        return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(feed_map, &pos, &key, &value)) {
        int k = input_index(self, key);
        if (k < 0)
            return -1;
        vq_tensor *t = feed_tensor(self, &self->inputs[k], value, holds ? &holds[*nfed] : NULL);
        if (!t)
            return -1;
        feeds[(*nfed)++] = (vq_feed){self->inputs[k].name, t};
    }
    if (*nfed < self->ninputs) { /* dict keys are unique: one is missing */
        for (int k = 0; k < self->ninputs; k++) {
            int j = 0;
            while (j < *nfed && feeds[j].name != self->inputs[k].name)
                j++;
            if (j == *nfed) {
                vqpy_raise_msg(VQ_EINVAL, "run: input '%s' is not fed", self->inputs[k].name);
                return -1;
            }
        }
    }
    return 0;
}

/* Fills fetches[0..nfetch) from names (NULL: every output in the model's
 * order); 0, or -1 with an exception. */
static int collect_fetches(vqpy_session *self, PyObject *name_seq, vq_fetch *fetches, int nfetch)
{
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
            return -1;
        }
        int k = 0;
        while (k < self->noutputs && strcmp(self->output_names[k], s))
            k++;
        if (k == self->noutputs) {
            vqpy_raise_msg(VQ_EINVAL, "run: the model has no output named '%s'", s);
            return -1;
        }
        fetches[i].name = self->output_names[k];
    }
    return 0;
}

/* The fetched tensors as a list of numpy arrays over their memory (each
 * array's base is a varq.Tensor that holds the engine); takes every
 * fetches[i].tensor, even on failure. */
static PyObject *result_arrays(vqpy_session *self, vq_fetch *fetches, int nfetch)
{
    PyObject *result = PyList_New(nfetch);
    for (int i = 0; i < nfetch; i++) {
        vq_tensor *ft = fetches[i].tensor;
        fetches[i].tensor = NULL;
        bool cpu = vq_tensor_device(ft).kind == VQ_DEV_CPU;
        void *data = cpu ? vq_tensor_data(ft) : NULL;
        /* the Tensor takes the reference, even on failure */
        PyObject *t = vqpy_tensor_new(ft, self->engine);
        PyObject *arr = NULL;
        if (t && result) {
            arr = data ? vqpy_np_array_over(t, data) : NULL;
            if (!arr && !PyErr_Occurred())
                arr = vqpy_numpy_asarray(t);
        }
        Py_XDECREF(t);
        if (!arr)
            Py_CLEAR(result);
        else if (result)
            PyList_SET_ITEM(result, i, arr);
        else
            Py_DECREF(arr);
    }
    return result;
}

/* The feeds and fetches of a sync run stay on the stack up to this many. */
#define ON_STACK 8

/* run(output_names, feeds) -> list of numpy arrays. The run is one GIL
 * hand-off: the feeds are released and the fetches waited for in the same
 * stretch without the GIL as the run itself. */
static PyObject *session_run_sync(vqpy_session *self, PyObject *names, PyObject *feed_map)
{
    int nfetch = self->noutputs;
    PyObject *name_seq = NULL;
    if (names != Py_None) {
        if (!(name_seq = PySequence_Fast(names, "run: output_names must be a list of names")))
            return NULL;
        nfetch = (int)PySequence_Fast_GET_SIZE(name_seq);
    }
    vq_feed feeds_stack[ON_STACK];
    vqpy_np_hold *holds_stack[ON_STACK];
    vq_fetch fetches_stack[ON_STACK];
    bool heap = self->ninputs > ON_STACK || nfetch > ON_STACK;
    vq_feed *feeds = heap ? calloc((size_t)self->ninputs + 1, sizeof *feeds) : feeds_stack;
    vqpy_np_hold **holds = heap ? calloc((size_t)self->ninputs + 1, sizeof *holds) : holds_stack;
    vq_fetch *fetches = heap ? calloc((size_t)nfetch + 1, sizeof *fetches) : fetches_stack;
    PyObject *result = NULL;
    int nfed = 0;
    if (!feeds || !holds || !fetches) {
        PyErr_NoMemory();
        goto out;
    }
    memset(fetches, 0, sizeof *fetches * (size_t)nfetch);
    if (collect_fetches(self, name_seq, fetches, nfetch) < 0 ||
        collect_feeds(self, feed_map, feeds, holds, &nfed) < 0) {
        release_feeds(feeds, holds, nfed);
        goto out;
    }
    if (self->closed) { /* by another thread while a conversion let go of the GIL */
        release_feeds(feeds, holds, nfed);
        closed_error();
        goto out;
    }
    int rc;
    char msg[1024] = "";
    self->busy++;
    Py_BEGIN_ALLOW_THREADS;
    rc = vq_exec_run(self->exec, self->program, self->scope, feeds, nfed, fetches, nfetch);
    if (rc < 0)
        snprintf(msg, sizeof msg, "%s", vq_errmsg()); /* before the releases */
    for (int i = 0; i < nfed; i++)
        vq_tensor_release(feeds[i].tensor);
    /* Done with the run, but a fetch may still have ops of its own. */
    for (int i = 0; rc == 0 && i < nfetch; i++)
        if ((rc = vq_tensor_wait(fetches[i].tensor)) < 0)
            snprintf(msg, sizeof msg, "%s", vq_errmsg());
    Py_END_ALLOW_THREADS;
    self->busy--;
    for (int i = 0; i < nfed; i++)
        vqpy_np_hold_done(holds[i]);
    if (rc < 0) {
        vqpy_raise_msg(rc, "%s", msg[0] ? msg : vq_strerror(rc));
        Py_BEGIN_ALLOW_THREADS;
        for (int i = 0; i < nfetch; i++)
            vq_tensor_release(fetches[i].tensor);
        Py_END_ALLOW_THREADS;
    } else {
        result = result_arrays(self, fetches, nfetch);
    }
    if (self->closed && self->busy == 0)
        session_free_parts(self);
out:
    if (heap) {
        free(feeds);
        free(holds);
        free(fetches);
    }
    Py_XDECREF(name_seq);
    return result;
}

/* run_async(output_names, feeds) -> varq.RunFuture: the run is pushed
 * with vq_exec_run_async and its feeds and fetches live in a
 * vqpy_async_run (future.c) until it is done, while the future holds this
 * session. */
static PyObject *session_run_async_impl(vqpy_session *self, PyObject *names, PyObject *feed_map)
{
    int nfetch = self->noutputs;
    PyObject *name_seq = NULL;
    if (names != Py_None) {
        if (!(name_seq = PySequence_Fast(names, "run: output_names must be a list of names")))
            return NULL;
        nfetch = (int)PySequence_Fast_GET_SIZE(name_seq);
    }
    vqpy_async_run *arun = vqpy_async_new(self->ninputs, nfetch);
    PyObject *result = NULL;
    if (!arun) {
        Py_XDECREF(name_seq);
        return PyErr_NoMemory();
    }
    int nfed = 0;
    if (collect_fetches(self, name_seq, arun->fetches, nfetch) < 0 ||
        collect_feeds(self, feed_map, arun->feeds, NULL, &nfed) < 0 ||
        (self->closed && !closed_error())) { /* closed meanwhile: see session_run_sync */
        arun->nfeeds = nfed;                 /* the run owns what was collected */
        Py_BEGIN_ALLOW_THREADS;
        vqpy_async_drop(arun);
        Py_END_ALLOW_THREADS;
        Py_XDECREF(name_seq);
        return NULL;
    }
    /* The run's reference for its done callback, dropped here when the
     * call fails (done is not called then). The names point into
     * self->inputs and outputs, which the future keeps alive. */
    arun->nfeeds = nfed;
    arun->nfetches = nfetch;
    atomic_fetch_add_explicit(&arun->refs, 1, memory_order_relaxed);
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = vq_exec_run_async(self->exec, self->program, self->scope, arun->feeds, nfed, arun->fetches,
                           nfetch, vqpy_async_done, arun);
    if (rc < 0)
        vqpy_async_drop(arun);
    Py_END_ALLOW_THREADS;
    if (rc < 0) {
        vqpy_raise(rc);
        Py_BEGIN_ALLOW_THREADS;
        vqpy_async_drop(arun);
        Py_END_ALLOW_THREADS;
    } else {
        result = vqpy_future_new(arun, self->engine, (PyObject *)self, true);
    }
    Py_XDECREF(name_seq);
    return result;
}

/* The arguments (output_names, input_feed, run_options=None) of run and
 * run_async, positional or by name (ONNX Runtime's names); run_options is
 * accepted and ignored. 0, or -1 with an exception. */
static int run_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **names,
                    PyObject **feed_map)
{
    static const char *const kw[] = {"output_names", "input_feed", "run_options"};
    PyObject *v[3];
    if (vqpy_fast_args("run", kw, 3, 3, args, nargs, kwnames, v) < 0)
        return -1;
    if (!v[0] || !v[1]) {
        PyErr_SetString(PyExc_TypeError, "run needs output_names and input_feed");
        return -1;
    }
    *names = v[0];
    *feed_map = v[1];
    return 0;
}

static PyObject *session_run(vqpy_session *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    PyObject *names, *feed_map;
    if (run_args(args, nargs, kwnames, &names, &feed_map) < 0)
        return NULL;
    if (self->closed)
        return closed_error();
    return session_run_sync(self, names, feed_map);
}

static PyObject *session_run_async(vqpy_session *self, PyObject *const *args, Py_ssize_t nargs,
                                   PyObject *kwnames)
{
    PyObject *names, *feed_map;
    if (run_args(args, nargs, kwnames, &names, &feed_map) < 0)
        return NULL;
    if (self->closed)
        return closed_error();
    return session_run_async_impl(self, names, feed_map);
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
    {"run", (PyCFunction)(void (*)(void))session_run, METH_FASTCALL | METH_KEYWORDS,
     "run(output_names, input_feed, run_options=None) -> [numpy.ndarray]: the fetches named "
     "by output_names (None: every output) as numpy arrays the caller owns, over the run's "
     "own memory (which they keep alive). input_feed: {name: array} or a list of arrays in "
     "the model's input order. run_options is ignored. Thread-safe."},
    {"run_async", (PyCFunction)(void (*)(void))session_run_async, METH_FASTCALL | METH_KEYWORDS,
     "run_async(output_names, input_feed, run_options=None) -> RunFuture: pushes the run and "
     "returns at once; result(timeout=None) is what run would have returned (or raises what "
     "it would have raised). The feeds are held (not copied) until the run is done: do not "
     "write them meanwhile. Completed by the engine's done callback on a worker, which never "
     "takes the GIL; past 64 runs in flight the call waits for the oldest (GIL released). "
     "Thread-safe."},
    {"close", (PyCFunction)session_close, METH_NOARGS,
     "Frees the executor and the model once the runs in flight are done; run raises "
     "varq.InvalidArgument afterwards. Arrays already returned stay valid."},
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
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "_Session(model, workers=None, gpu=None): see varq.InferenceSession.",
    .tp_methods = session_methods,
    .tp_getset = session_getset,
    .tp_init = (initproc)session_init,
    .tp_new = PyType_GenericNew,
};
