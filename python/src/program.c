/* varq.Program, varq.Scope and varq.Executor: the graph layer
 * (include/varq/graph.h) from Python, and the training calls over programs
 * (include/varq/train.h: autodiff, optimizers, schedules, layers) as
 * module functions that varq/__init__.py dresses as classes.
 *
 * A program is a plain value in C: built from one thread, then read by any
 * number. Here a Program counts the runs that use it (busy, an atomic the
 * done callback of an async run decrements without the GIL); an edit while
 * one is in flight raises varq.Busy instead of racing with it. A Scope
 * counts them the same way, since vq_scope_set must not meet a run.
 *
 * Engines: the executor gives scope and feed tensors vars of its engine,
 * whose free must come after the tensors' last release. A Scope therefore
 * holds every engine it was run with (engines, a list), released after
 * vq_scope_free; the Tensors it hands out (and those set into it) hold the
 * list itself, so an engine that a later run adds is held by them too
 * (a Tensor got before the scope's first run would otherwise outlive the
 * engine that run gave its tensor a var of). */
#include "varq_py.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    PyObject_HEAD vq_program *p;
    atomic_int busy;
} vqpy_program;

typedef struct {
    PyObject_HEAD vq_scope *s;
    PyObject *engines; /* list of the vqpy_engines its tensors may hold vars of */
    atomic_int busy;
} vqpy_scope;

typedef struct {
    PyObject_HEAD vq_exec *x;
    PyObject *engine; /* a vqpy_engine */
    PyObject *scope;  /* the default scope (a vqpy_scope) */
} vqpy_executor;

static PyObject *busy_error(const char *what)
{
    return vqpy_raise_msg(VQ_EBUSY, "the %s is used by a run in flight", what);
}

static bool program_editable(vqpy_program *self)
{
    if (atomic_load(&self->busy)) {
        busy_error("program");
        return false;
    }
    return true;
}

int vqpy_tensor_hold_engine(PyObject *obj, PyObject *engine)
{
    vqpy_tensor *t = (vqpy_tensor *)obj;
    if (!engine || t->engine == engine)
        return 0;
    if (!t->engine) {
        t->engine = Py_NewRef(engine);
        return 0;
    }
    if (PyList_Check(t->engine)) {
        int has = PySequence_Contains(t->engine, engine);
        return has < 0 ? -1 : has ? 0 : PyList_Append(t->engine, engine);
    }
    PyObject *both = PyList_New(2);
    if (!both)
        return -1;
    PyList_SET_ITEM(both, 0, t->engine); /* the Tensor's reference moves in */
    PyList_SET_ITEM(both, 1, Py_NewRef(engine));
    t->engine = both;
    return 0;
}

vq_tensor *vqpy_tensor_any(PyObject *obj, PyObject *engine)
{
    if (!PyObject_TypeCheck(obj, &vqpy_tensor_type) && !PyObject_CheckBuffer(obj) &&
        PyObject_HasAttrString(obj, "__dlpack__")) {
        PyObject *t = vqpy_from_dlpack(NULL, obj);
        if (!t)
            return NULL;
        vq_tensor *r = vq_tensor_retain(((vqpy_tensor *)t)->t);
        Py_DECREF(t); /* r keeps the exporter alive through its release */
        return r;
    }
    vq_tensor *t = vqpy_tensor_from_object(obj, true);
    if (t && PyObject_TypeCheck(obj, &vqpy_tensor_type) &&
        vqpy_tensor_hold_engine(obj, engine) < 0) {
        Py_BEGIN_ALLOW_THREADS;
        vq_tensor_release(t);
        Py_END_ALLOW_THREADS;
        return NULL;
    }
    return t;
}

/* ---- Program ---- */

static int program_init(vqpy_program *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"source", NULL};
    PyObject *src = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", names, &src))
        return -1;
    if (self->p) {
        PyErr_SetString(PyExc_RuntimeError, "Program.__init__ called twice");
        return -1;
    }
    int rc;
    if (src == Py_None) {
        rc = vq_program_new(&self->p);
    } else if (PyObject_CheckBuffer(src)) {
        Py_buffer b;
        if (PyObject_GetBuffer(src, &b, PyBUF_SIMPLE) < 0)
            return -1;
        Py_BEGIN_ALLOW_THREADS;
        rc = vq_program_decode(&self->p, b.buf, (size_t)b.len);
        Py_END_ALLOW_THREADS;
        PyBuffer_Release(&b);
    } else {
        PyObject *path;
        if (!PyUnicode_FSConverter(src, &path))
            return -1;
        Py_BEGIN_ALLOW_THREADS;
        rc = vq_program_load(&self->p, PyBytes_AS_STRING(path));
        Py_END_ALLOW_THREADS;
        Py_DECREF(path);
    }
    if (rc < 0) {
        vqpy_raise(rc);
        return -1;
    }
    return 0;
}

static void program_dealloc(vqpy_program *self)
{
    vq_program_free(self->p); /* no run uses it: each holds this object */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *program_add_block(vqpy_program *self, PyObject *args)
{
    int parent = 0;
    if (!PyArg_ParseTuple(args, "|i", &parent) || !program_editable(self))
        return NULL;
    int rc = vq_program_add_block(self->p, parent);
    return rc < 0 ? vqpy_raise(rc) : PyLong_FromLong(rc);
}

/* A dtype from a str ("float32", "f32") or a numpy dtype or type. */
static int dtype_arg(PyObject *o, vq_dtype *out)
{
    PyObject *name = NULL;
    if (PyUnicode_Check(o)) {
        name = Py_NewRef(o);
    } else {
        PyObject *np = PyImport_ImportModule("numpy");
        PyObject *dt = np ? PyObject_CallMethod(np, "dtype", "O", o) : NULL;
        name = dt ? PyObject_GetAttrString(dt, "name") : NULL;
        Py_XDECREF(dt);
        Py_XDECREF(np);
        if (!name)
            return -1;
    }
    const char *s = PyUnicode_AsUTF8(name);
    int rc = s ? vq_dtype_parse(s, out) : -1;
    if (s && rc < 0)
        vqpy_raise_msg(VQ_EINVAL, "'%s' is not a varq dtype (float32, float64, int32, int64, bool)",
                       s);
    Py_DECREF(name);
    return rc < 0 ? -1 : 0;
}

/* A shape from a sequence of ints, None for -1 (unknown). */
static int shape_arg(PyObject *o, int *ndim, int64_t *shape)
{
    PyObject *seq = PySequence_Fast(o, "shape must be a sequence of ints");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > VQ_MAX_DIMS) {
        Py_DECREF(seq);
        vqpy_raise_msg(VQ_EINVAL, "a shape of %zd dims: varq has at most %d", n, VQ_MAX_DIMS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PySequence_Fast_GET_ITEM(seq, i);
        shape[i] = d == Py_None ? -1 : PyLong_AsLongLong(d);
        if (shape[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    *ndim = (int)n;
    return 0;
}

static PyObject *program_add_var(vqpy_program *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"name", "dtype", "shape", "persistable", "block", NULL};
    const char *name;
    PyObject *dto, *shapeo;
    int persistable = 0, block = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sOO|pi", names, &name, &dto, &shapeo, &persistable,
                                     &block) ||
        !program_editable(self))
        return NULL;
    vq_dtype dt;
    int ndim;
    int64_t shape[VQ_MAX_DIMS];
    if (dtype_arg(dto, &dt) < 0 || shape_arg(shapeo, &ndim, shape) < 0)
        return NULL;
    int rc = vq_program_add_var(self->p, block, name, dt, ndim, shape, persistable);
    if (rc < 0)
        return vqpy_raise(rc);
    Py_RETURN_NONE;
}

/* The strings of a list of names (pointing into the list's items, which
 * seq holds): out malloc'd. */
static int names_arg(PyObject *o, PyObject **seq, const char ***out, int *n, const char *what)
{
    *seq = NULL;
    *out = NULL;
    *n = 0;
    if (!o || o == Py_None)
        return 0;
    if (PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a list of names, not a str", what);
        return -1;
    }
    if (!(*seq = PySequence_Fast(o, "names must be a sequence of str")))
        return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(*seq);
    *out = malloc(sizeof(char *) * (size_t)(len ? len : 1));
    if (!*out) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        PyObject *s = PySequence_Fast_GET_ITEM(*seq, i);
        (*out)[i] = PyUnicode_Check(s) ? PyUnicode_AsUTF8(s) : NULL;
        if (!(*out)[i]) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%s[%zd] is not a str", what, i);
            return -1;
        }
    }
    *n = (int)len;
    return 0;
}

static PyObject *program_add_op(vqpy_program *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"type", "inputs", "outputs", "attrs", "block", NULL};
    const char *type;
    PyObject *ino, *outo, *attro = Py_None;
    int block = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sOO|Oi", names, &type, &ino, &outo, &attro,
                                     &block) ||
        !program_editable(self))
        return NULL;
    PyObject *ins = NULL, *outs = NULL, *result = NULL;
    const char **in = NULL, **out = NULL;
    int nin, nout;
    vqpy_attrs at = {0};
    if (names_arg(ino, &ins, &in, &nin, "inputs") == 0 &&
        names_arg(outo, &outs, &out, &nout, "outputs") == 0 &&
        vqpy_attrs_from_dict(type, attro, &at) == 0) {
        int rc = vq_program_add_op(self->p, block, type, in, nin, out, nout, at.v, at.n);
        result = rc < 0 ? vqpy_raise(rc) : PyLong_FromLong(rc);
    }
    vqpy_attrs_free(&at);
    free(in);
    free(out);
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    return result;
}

static PyObject *program_set_stop_gradient(vqpy_program *self, PyObject *args)
{
    const char *name;
    int stop = 1;
    if (!PyArg_ParseTuple(args, "s|p", &name, &stop) || !program_editable(self))
        return NULL;
    int rc = vq_program_set_stop_gradient(self->p, name, stop);
    if (rc < 0)
        return vqpy_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *program_set_op_priority(vqpy_program *self, PyObject *args)
{
    int block, index, priority;
    if (!PyArg_ParseTuple(args, "iii", &block, &index, &priority) || !program_editable(self))
        return NULL;
    int rc = vq_program_set_op_priority(self->p, block, index, priority);
    if (rc < 0)
        return vqpy_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *program_var_info(vqpy_program *self, PyObject *arg)
{
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    vq_dtype dt;
    int ndim;
    int64_t shape[VQ_MAX_DIMS];
    bool persistable;
    int rc = vq_program_var_info(self->p, name, &dt, &ndim, shape, &persistable);
    if (rc < 0)
        return vqpy_raise(rc);
    PyObject *t = PyTuple_New(ndim);
    for (int i = 0; t && i < ndim; i++)
        PyTuple_SET_ITEM(t, i, shape[i] < 0 ? Py_NewRef(Py_None) : PyLong_FromLongLong(shape[i]));
    return t ? Py_BuildValue("(sNO)", vqpy_dtype_numpy(dt), t, persistable ? Py_True : Py_False)
             : NULL;
}

static PyObject *program_counts(vqpy_program *self, PyObject *args, int which)
{
    int block = 0;
    if (!PyArg_ParseTuple(args, "|i", &block))
        return NULL;
    if (block < 0 || block >= vq_program_nblocks(self->p))
        return vqpy_raise_msg(VQ_EINVAL, "the program has no block %d", block);
    return PyLong_FromLong(which ? vq_program_nvars(self->p, block)
                                 : vq_program_nops(self->p, block));
}

static PyObject *program_nops(vqpy_program *self, PyObject *args)
{
    return program_counts(self, args, 0);
}

static PyObject *program_nvars(vqpy_program *self, PyObject *args)
{
    return program_counts(self, args, 1);
}

static PyObject *program_nblocks(vqpy_program *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(vq_program_nblocks(self->p));
}

static PyObject *program_encode(vqpy_program *self, PyObject *unused)
{
    (void)unused;
    void *buf;
    size_t len;
    int rc = vq_program_encode(self->p, &buf, &len);
    if (rc < 0)
        return vqpy_raise(rc);
    PyObject *b = PyBytes_FromStringAndSize(buf, (Py_ssize_t)len);
    free(buf);
    return b;
}

static PyObject *program_save(vqpy_program *self, PyObject *arg)
{
    PyObject *path;
    if (!PyUnicode_FSConverter(arg, &path))
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = vq_program_save(self->p, PyBytes_AS_STRING(path));
    Py_END_ALLOW_THREADS;
    Py_DECREF(path);
    if (rc < 0)
        return vqpy_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *program_dump(vqpy_program *self, PyObject *unused)
{
    (void)unused;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return PyErr_NoMemory();
    int rc = vq_program_dump(self->p, f);
    fclose(f);
    PyObject *r = rc < 0 ? vqpy_raise(rc) : PyUnicode_DecodeUTF8(buf, (Py_ssize_t)len, "replace");
    free(buf);
    return r;
}

static PyObject *program_hash(vqpy_program *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong(vq_program_hash(self->p));
}

static PyObject *program_clone(vqpy_program *self, PyObject *unused)
{
    (void)unused;
    /* of self's type: varq.Program, the Python subclass */
    vqpy_program *c = (vqpy_program *)Py_TYPE(self)->tp_alloc(Py_TYPE(self), 0);
    if (!c)
        return NULL;
    atomic_init(&c->busy, 0);
    int rc = vq_program_clone(self->p, &c->p);
    if (rc < 0) {
        c->p = NULL;
        Py_DECREF(c);
        return vqpy_raise(rc);
    }
    return (PyObject *)c;
}

static PyMethodDef program_methods[] = {
    {"add_block", (PyCFunction)program_add_block, METH_VARARGS,
     "add_block(parent=0) -> int: a new block under block parent (a cond's branch, a "
     "while's body); its index."},
    {"add_var", (PyCFunction)(void (*)(void))program_add_var, METH_VARARGS | METH_KEYWORDS,
     "add_var(name, dtype, shape, persistable=False, block=0): declares a var; None (or -1) "
     "in shape is a dim known only when fed. Names are unique in the program."},
    {"add_op", (PyCFunction)(void (*)(void))program_add_op, METH_VARARGS | METH_KEYWORDS,
     "add_op(type, inputs, outputs, attrs=None, block=0) -> int: appends op type (any "
     "registered op: varq.ops.signature(type)) reading and writing the named vars, attrs a "
     "dict typed by the op's schema; its index in the block."},
    {"set_stop_gradient", (PyCFunction)program_set_stop_gradient, METH_VARARGS,
     "set_stop_gradient(name, stop=True): autodiff gives var name no gradient."},
    {"set_op_priority", (PyCFunction)program_set_op_priority, METH_VARARGS,
     "set_op_priority(block, index, priority): the engine priority of an op's runs."},
    {"var_info", (PyCFunction)program_var_info, METH_O,
     "var_info(name) -> (dtype, shape, persistable): a var's declaration (None: unknown dim)."},
    {"nops", (PyCFunction)program_nops, METH_VARARGS, "nops(block=0) -> int"},
    {"nvars", (PyCFunction)program_nvars, METH_VARARGS, "nvars(block=0) -> int"},
    {"to_bytes", (PyCFunction)program_encode, METH_NOARGS,
     "to_bytes() -> bytes: the program as protobuf (proto/program.proto); Program(bytes) "
     "reads it back."},
    {"save", (PyCFunction)program_save, METH_O,
     "save(path): the protobuf into a file (.pb); Program(path) loads it."},
    {"dump", (PyCFunction)program_dump, METH_NOARGS,
     "dump() -> str: the readable text form, one line per var and op (vq_program_dump); "
     "Program.from_text reads it back."},
    {"hash", (PyCFunction)program_hash, METH_NOARGS,
     "hash() -> int: XXH3-64 of the encoding: equal programs hash equal."},
    {"clone", (PyCFunction)program_clone, METH_NOARGS,
     "clone() -> Program: an independent copy (say, the forward program before an optimizer "
     "adds training ops)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef program_getset[] = {
    {"nblocks", (getter)program_nblocks, NULL, "The number of blocks (1: the main block).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject vqpy_program_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "varq.Program",
    .tp_basicsize = sizeof(vqpy_program),
    .tp_dealloc = (destructor)program_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Program(source=None): a varq program (blocks of var declarations and ops "
              "over named vars): empty, decoded from protobuf bytes, or loaded from a .pb "
              "file path. Thread-safety: edit it from one thread; any number may run or save "
              "it while nobody edits it (an edit while a run of it is in flight raises "
              "varq.Busy).",
    .tp_methods = program_methods,
    .tp_getset = program_getset,
    .tp_init = (initproc)program_init,
    .tp_new = PyType_GenericNew,
};

static vq_program *program_of(PyObject *o)
{
    if (!PyObject_TypeCheck(o, &vqpy_program_type) || !((vqpy_program *)o)->p) {
        PyErr_Format(PyExc_TypeError, "a %.80s is not a varq.Program", Py_TYPE(o)->tp_name);
        return NULL;
    }
    return ((vqpy_program *)o)->p;
}

/* ---- Scope ---- */

static int scope_init(vqpy_scope *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "", names))
        return -1;
    if (self->s) {
        PyErr_SetString(PyExc_RuntimeError, "Scope.__init__ called twice");
        return -1;
    }
    atomic_init(&self->busy, 0);
    if (!self->engines && !(self->engines = PyList_New(0)))
        return -1;
    int rc = vq_scope_new(&self->s);
    if (rc < 0) {
        vqpy_raise(rc);
        return -1;
    }
    return 0;
}

static void scope_dealloc(vqpy_scope *self)
{
    vq_scope *s = self->s;
    Py_BEGIN_ALLOW_THREADS;
    vq_scope_free(s);
    Py_END_ALLOW_THREADS;
    Py_XDECREF(self->engines); /* after the tensors: their vars are the engines' */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Notes that the scope's tensors may hold vars of engine. */
static int scope_use_engine(vqpy_scope *self, PyObject *engine)
{
    Py_ssize_t n = PyList_GET_SIZE(self->engines);
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyList_GET_ITEM(self->engines, i) == engine)
            return 0;
    return PyList_Append(self->engines, engine);
}

static PyObject *scope_set(vqpy_scope *self, PyObject *args)
{
    const char *name;
    PyObject *value;
    if (!PyArg_ParseTuple(args, "sO", &name, &value))
        return NULL;
    if (atomic_load(&self->busy))
        return busy_error("scope");
    vq_tensor *t = vqpy_tensor_any(value, self->engines);
    if (!t)
        return NULL;
    if (PyObject_TypeCheck(value, &vqpy_tensor_type) && ((vqpy_tensor *)value)->engine &&
        scope_use_engine(self, ((vqpy_tensor *)value)->engine) < 0) {
        vq_tensor_release(t);
        return NULL;
    }
    int rc = vq_scope_set(self->s, name, t);
    Py_BEGIN_ALLOW_THREADS;
    vq_tensor_release(t); /* the scope holds its own reference; a replaced one may go */
    Py_END_ALLOW_THREADS;
    if (rc < 0)
        return vqpy_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *scope_get(vqpy_scope *self, PyObject *arg)
{
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    vq_tensor *t = vq_scope_get(self->s, name);
    if (!t) {
        PyErr_Format(PyExc_KeyError, "%s", name);
        return NULL;
    }
    /* The Tensor holds the scope's list of engines, to which a later run
     * with another engine adds it: the tensor may get a var there. */
    return vqpy_tensor_new(vq_tensor_retain(t), self->engines);
}

static PyObject *scope_names(vqpy_scope *self, PyObject *unused)
{
    (void)unused;
    int n = vq_scope_count(self->s);
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        PyObject *s = PyUnicode_FromString(vq_scope_name(self->s, i));
        if (!s) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, s);
    }
    return list;
}

static PyObject *scope_dir_call(vqpy_scope *self, PyObject *arg, bool save)
{
    PyObject *path;
    if (!save && atomic_load(&self->busy))
        return busy_error("scope");
    if (!PyUnicode_FSConverter(arg, &path))
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = save ? vq_scope_save(self->s, PyBytes_AS_STRING(path))
              : vq_scope_load(self->s, PyBytes_AS_STRING(path));
    Py_END_ALLOW_THREADS;
    Py_DECREF(path);
    if (rc < 0)
        return vqpy_raise(rc);
    Py_RETURN_NONE;
}

static PyObject *scope_save(vqpy_scope *self, PyObject *arg)
{
    return scope_dir_call(self, arg, true);
}

static PyObject *scope_load(vqpy_scope *self, PyObject *arg)
{
    return scope_dir_call(self, arg, false);
}

static Py_ssize_t scope_len(vqpy_scope *self)
{
    return vq_scope_count(self->s);
}

static int scope_contains(vqpy_scope *self, PyObject *key)
{
    const char *name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
    if (!name) {
        PyErr_Clear();
        return 0;
    }
    return vq_scope_get(self->s, name) != NULL;
}

static int scope_ass_sub(vqpy_scope *self, PyObject *key, PyObject *value)
{
    if (!value) {
        PyErr_SetString(PyExc_TypeError, "a scope's names cannot be deleted");
        return -1;
    }
    PyObject *args = PyTuple_Pack(2, key, value);
    PyObject *r = args ? scope_set(self, args) : NULL;
    Py_XDECREF(args);
    Py_XDECREF(r);
    return r ? 0 : -1;
}

static PyMethodDef scope_methods[] = {
    {"set", (PyCFunction)scope_set, METH_VARARGS,
     "set(name, value): binds name to value (a numpy array, varq.Tensor or torch tensor), "
     "sharing its memory when it is C-contiguous of a varq dtype: runs that update the var "
     "(an optimizer's parameters) then write into that array. Not while a run using the "
     "scope is in flight (varq.Busy). Also scope[name] = value."},
    {"get", (PyCFunction)scope_get, METH_O,
     "get(name) -> Tensor: the tensor bound to name (KeyError if none), shared, not copied: "
     "numpy.asarray of it waits for the ops writing it. Also scope[name]."},
    {"names", (PyCFunction)scope_names, METH_NOARGS, "names() -> list: the names, sorted."},
    {"save", (PyCFunction)scope_save, METH_O,
     "save(dir): every tensor as dir/<name>.npy, as one checkpoint replacing dir atomically "
     "(vq_scope_save); waits for the ops writing them (GIL released)."},
    {"load", (PyCFunction)scope_load, METH_O,
     "load(dir): binds every dir/*.npy under its name (not while a run is in flight)."},
    {NULL, NULL, 0, NULL},
};

static PyMappingMethods scope_mapping = {
    .mp_length = (lenfunc)scope_len,
    .mp_subscript = (binaryfunc)scope_get,
    .mp_ass_subscript = (objobjargproc)scope_ass_sub,
};

static PySequenceMethods scope_sequence = {
    .sq_contains = (objobjproc)scope_contains,
};

PyTypeObject vqpy_scope_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "varq.Scope",
    .tp_basicsize = sizeof(vqpy_scope),
    .tp_dealloc = (destructor)scope_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scope(): named tensors that live across runs (parameters, optimizer state), "
              "held by reference. Thread-safe (vq_scope locks); set and load refuse while a "
              "run using the scope is in flight. Holds the engines it was run with until it "
              "is freed.",
    .tp_methods = scope_methods,
    .tp_as_mapping = &scope_mapping,
    .tp_as_sequence = &scope_sequence,
    .tp_init = (initproc)scope_init,
    .tp_new = PyType_GenericNew,
};

/* ---- Executor ---- */

static int executor_init(vqpy_executor *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"engine", "workers",    "gpu",      "check_nan", "timeout_ms",
                            "seed",   "cache_size", "segments", NULL};
    PyObject *engine = Py_None, *workers = Py_None, *gpu = Py_None;
    int check_nan = 0, timeout_ms = 0, cache_size = 0, segments = 1;
    unsigned long long seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$OOpiKip", names, &engine, &workers, &gpu,
                                     &check_nan, &timeout_ms, &seed, &cache_size, &segments))
        return -1;
    if (self->x) {
        PyErr_SetString(PyExc_RuntimeError, "Executor.__init__ called twice");
        return -1;
    }
    if (engine == Py_None) {
        self->engine = PyObject_CallFunctionObjArgs((PyObject *)&vqpy_engine_type, workers, NULL);
        if (!self->engine)
            return -1;
    } else if (PyObject_TypeCheck(engine, &vqpy_engine_type)) {
        self->engine = Py_NewRef(engine);
    } else {
        PyErr_Format(PyExc_TypeError, "Executor: engine is a %.80s, not a varq.Engine",
                     Py_TYPE(engine)->tp_name);
        return -1;
    }
    vq_exec_opts o = {.cache_size = cache_size, .timeout_ms = timeout_ms, .seed = seed};
    if (check_nan)
        o.flags |= VQ_EXEC_CHECK_NAN;
    if (!segments)
        o.flags |= VQ_EXEC_NO_SEGMENTS;
    if (gpu != Py_None) {
        long id = PyLong_AsLong(gpu);
        if (id == -1 && PyErr_Occurred())
            return -1;
        o.device = (vq_ctx){VQ_DEV_GPU, (int)id};
        o.flags |= VQ_EXEC_FETCH_HOST;
    }
    if (!(self->scope = PyObject_CallNoArgs((PyObject *)&vqpy_scope_type)))
        return -1;
    int rc;
    vq_engine *e = ((vqpy_engine *)self->engine)->engine;
    Py_BEGIN_ALLOW_THREADS;
    rc = vq_exec_new(&self->x, e, &o);
    Py_END_ALLOW_THREADS;
    if (rc < 0) {
        vqpy_raise(rc);
        return -1;
    }
    return 0;
}

static void executor_dealloc(vqpy_executor *self)
{
    vq_exec *x = self->x;
    Py_BEGIN_ALLOW_THREADS;
    vq_exec_free(x); /* waits for runs in flight: none, each future holds self */
    Py_END_ALLOW_THREADS;
    Py_XDECREF(self->scope);
    Py_XDECREF(self->engine);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The parts of a run: program, scope, feeds and fetch names, collected
 * into r (whose names and tensors it then owns). */
static int run_collect(vqpy_executor *self, PyObject *feed, PyObject *fetch_list,
                       vqpy_async_run **out)
{
    *out = NULL;
    Py_ssize_t nfeed = 0, nfetch = 0;
    if (feed != Py_None) {
        if (!PyDict_Check(feed)) {
            PyErr_SetString(PyExc_TypeError, "run: feed must be a dict {name: array}");
            return -1;
        }
        nfeed = PyDict_Size(feed);
    }
    PyObject *fseq = NULL;
    if (fetch_list != Py_None) {
        if (PyUnicode_Check(fetch_list)) {
            PyErr_SetString(PyExc_TypeError, "run: fetch_list must be a list of names");
            return -1;
        }
        if (!(fseq = PySequence_Fast(fetch_list, "run: fetch_list must be a list of names")))
            return -1;
        nfetch = PySequence_Fast_GET_SIZE(fseq);
    }
    vqpy_async_run *r = vqpy_async_new((int)nfeed, (int)nfetch);
    if (!r) {
        Py_XDECREF(fseq);
        PyErr_NoMemory();
        return -1;
    }
    *out = r;
    for (Py_ssize_t i = 0; i < nfetch; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fseq, i);
        const char *s = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
        if (!s || !(r->names[r->nnames] = strdup(s))) {
            Py_DECREF(fseq);
            if (!PyErr_Occurred())
                PyErr_SetString(s ? PyExc_MemoryError : PyExc_TypeError,
                                s ? "out of memory" : "run: a fetch name is not a str");
            return -1;
        }
        r->fetches[i].name = r->names[r->nnames++];
        r->nfetches++;
    }
    Py_XDECREF(fseq);
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (feed != Py_None && PyDict_Next(feed, &pos, &key, &value)) {
        const char *s = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        if (!s) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "run: a feed's name is not a str");
            return -1;
        }
        vq_tensor *t = vqpy_tensor_any(value, self->engine);
        if (!t)
            return -1;
        if (!(r->names[r->nnames] = strdup(s))) {
            vq_tensor_release(t);
            PyErr_NoMemory();
            return -1;
        }
        r->feeds[r->nfeeds++] = (vq_feed){r->names[r->nnames++], t};
    }
    return 0;
}

static PyObject *executor_run_impl(vqpy_executor *self, PyObject *args, PyObject *kw,
                                   bool async_run)
{
    static char *names[] = {"program", "feed", "fetch_list", "scope", "return_numpy", NULL};
    PyObject *prog, *feed = Py_None, *fetch_list = Py_None, *scopeo = Py_None;
    int return_numpy = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOOp", names, &prog, &feed, &fetch_list, &scopeo,
                                     &return_numpy))
        return NULL;
    vq_program *p = program_of(prog);
    if (!p)
        return NULL;
    if (scopeo == Py_None)
        scopeo = self->scope;
    if (!PyObject_TypeCheck(scopeo, &vqpy_scope_type)) {
        PyErr_Format(PyExc_TypeError, "run: scope is a %.80s, not a varq.Scope",
                     Py_TYPE(scopeo)->tp_name);
        return NULL;
    }
    vqpy_scope *scope = (vqpy_scope *)scopeo;
    vqpy_program *program = (vqpy_program *)prog;
    if (scope_use_engine(scope, self->engine) < 0)
        return NULL;
    vqpy_async_run *r;
    if (run_collect(self, feed, fetch_list, &r) < 0) {
        Py_BEGIN_ALLOW_THREADS;
        vqpy_async_drop(r);
        Py_END_ALLOW_THREADS;
        return NULL;
    }
    int rc;
    atomic_fetch_add(&program->busy, 1);
    atomic_fetch_add(&scope->busy, 1);
    if (async_run) {
        r->busy[0] = &program->busy;
        r->busy[1] = &scope->busy;
        atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed); /* the run's */
        Py_BEGIN_ALLOW_THREADS;
        rc = vq_exec_run_async(self->x, p, scope->s, r->feeds, r->nfeeds, r->fetches, r->nfetches,
                               vqpy_async_done, r);
        if (rc < 0)
            vqpy_async_drop(r);
        Py_END_ALLOW_THREADS;
        if (rc < 0) {
            atomic_fetch_sub(&program->busy, 1);
            atomic_fetch_sub(&scope->busy, 1);
            vqpy_raise(rc);
            Py_BEGIN_ALLOW_THREADS;
            vqpy_async_drop(r);
            Py_END_ALLOW_THREADS;
            return NULL;
        }
        PyObject *owner = PyTuple_Pack(3, self, prog, scopeo);
        if (!owner) {
            /* The run goes on; its future is lost, so wait for it here. */
            Py_BEGIN_ALLOW_THREADS;
            pthread_mutex_lock(&r->mu);
            while (!r->done)
                pthread_cond_wait(&r->cv, &r->mu);
            pthread_mutex_unlock(&r->mu);
            vqpy_async_drop(r);
            Py_END_ALLOW_THREADS;
            return NULL;
        }
        PyObject *f = vqpy_future_new(r, self->engine, owner, return_numpy);
        Py_DECREF(owner);
        return f;
    }
    Py_BEGIN_ALLOW_THREADS;
    rc = vq_exec_run(self->x, p, scope->s, r->feeds, r->nfeeds, r->fetches, r->nfetches);
    Py_END_ALLOW_THREADS;
    atomic_fetch_sub(&program->busy, 1);
    atomic_fetch_sub(&scope->busy, 1);
    PyObject *result = NULL;
    if (rc < 0) {
        vqpy_raise(rc);
    } else {
        result = PyList_New(r->nfetches);
        for (int i = 0; result && i < r->nfetches; i++) {
            PyObject *t = vqpy_tensor_new(r->fetches[i].tensor, self->engine);
            r->fetches[i].tensor = NULL;
            PyObject *item = t && return_numpy ? vqpy_numpy_asarray(t) : Py_XNewRef(t);
            Py_XDECREF(t);
            if (!item)
                Py_CLEAR(result);
            else
                PyList_SET_ITEM(result, i, item);
        }
    }
    Py_BEGIN_ALLOW_THREADS;
    vqpy_async_drop(r);
    Py_END_ALLOW_THREADS;
    return result;
}

static PyObject *executor_run(vqpy_executor *self, PyObject *args, PyObject *kw)
{
    return executor_run_impl(self, args, kw, false);
}

static PyObject *executor_run_async(vqpy_executor *self, PyObject *args, PyObject *kw)
{
    return executor_run_impl(self, args, kw, true);
}

static PyObject *executor_prepare(vqpy_executor *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"program", "feed_names", "fetch_list", "scope", NULL};
    PyObject *prog, *feedo = Py_None, *fetcho = Py_None, *scopeo = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOO", names, &prog, &feedo, &fetcho, &scopeo))
        return NULL;
    vq_program *p = program_of(prog);
    if (!p)
        return NULL;
    if (scopeo == Py_None)
        scopeo = self->scope;
    if (!PyObject_TypeCheck(scopeo, &vqpy_scope_type)) {
        PyErr_SetString(PyExc_TypeError, "prepare: scope is not a varq.Scope");
        return NULL;
    }
    PyObject *fs = NULL, *ts = NULL, *result = NULL;
    const char **fn = NULL, **tn = NULL;
    int nf, nt;
    if (names_arg(feedo, &fs, &fn, &nf, "feed_names") == 0 &&
        names_arg(fetcho, &ts, &tn, &nt, "fetch_list") == 0 &&
        scope_use_engine((vqpy_scope *)scopeo, self->engine) == 0) {
        int rc;
        vq_scope *s = ((vqpy_scope *)scopeo)->s;
        vqpy_program *program = (vqpy_program *)prog;
        atomic_fetch_add(&program->busy, 1); /* it is read with the GIL released */
        Py_BEGIN_ALLOW_THREADS;
        rc = vq_exec_prepare(self->x, p, s, fn, nf, tn, nt);
        Py_END_ALLOW_THREADS;
        atomic_fetch_sub(&program->busy, 1);
        result = rc < 0 ? vqpy_raise(rc) : Py_NewRef(Py_None);
    }
    free(fn);
    free(tn);
    Py_XDECREF(fs);
    Py_XDECREF(ts);
    return result;
}

static PyObject *executor_cancel(vqpy_executor *self, PyObject *unused)
{
    (void)unused;
    int rc = vq_exec_cancel(self->x);
    return rc < 0 ? vqpy_raise(rc) : PyLong_FromLong(rc);
}

static PyObject *executor_stats(vqpy_executor *self, PyObject *unused)
{
    (void)unused;
    vq_exec_stats st;
    int rc = vq_exec_get_stats(self->x, &st);
    if (rc < 0)
        return vqpy_raise(rc);
    return Py_BuildValue("{sKsKsKsn}", "prepares", (unsigned long long)st.prepares, "cache_hits",
                         (unsigned long long)st.cache_hits, "runs", (unsigned long long)st.runs,
                         "last_peak_bytes", (Py_ssize_t)st.last_peak_bytes);
}

static PyObject *executor_get_engine(vqpy_executor *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->engine);
}

static PyObject *executor_get_scope(vqpy_executor *self, void *closure)
{
    (void)closure;
    return Py_NewRef(self->scope);
}

static PyMethodDef executor_methods[] = {
    {"run", (PyCFunction)(void (*)(void))executor_run, METH_VARARGS | METH_KEYWORDS,
     "run(program, feed=None, fetch_list=None, scope=None, return_numpy=True) -> list: runs "
     "block 0 of program once (vq_exec_run, GIL released) with feed {name: array} (numpy "
     "arrays, torch tensors, varq.Tensor: used in place when C-contiguous of the var's "
     "dtype) and returns the fetched vars (numpy arrays over the run's own memory, or "
     "varq.Tensor), in scope (None: the executor's own .scope). A failing op raises its "
     "varq.Error naming the op. Thread-safe: several threads may run at once."},
    {"run_async", (PyCFunction)(void (*)(void))executor_run_async, METH_VARARGS | METH_KEYWORDS,
     "run_async(program, feed=None, fetch_list=None, scope=None, return_numpy=True) -> "
     "RunFuture: the same run pushed with vq_exec_run_async; the future holds the program "
     "and the scope (which refuse edits until the run is done) and the feeds."},
    {"prepare", (PyCFunction)(void (*)(void))executor_prepare, METH_VARARGS | METH_KEYWORDS,
     "prepare(program, feed_names=None, fetch_list=None, scope=None): builds (or finds) the "
     "plan now, so its cost and errors come before the first run."},
    {"cancel", (PyCFunction)executor_cancel, METH_NOARGS,
     "cancel() -> int: ends the runs in flight with varq.Cancelled; how many it reached. "
     "From any thread."},
    {"stats", (PyCFunction)executor_stats, METH_NOARGS,
     "stats() -> dict: prepares, cache_hits, runs, last_peak_bytes."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef executor_getset[] = {
    {"engine", (getter)executor_get_engine, NULL, "The varq.Engine it runs on.", NULL},
    {"scope", (getter)executor_get_scope, NULL, "The scope of runs that name none.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject vqpy_executor_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "varq.Executor",
    .tp_basicsize = sizeof(vqpy_executor),
    .tp_dealloc = (destructor)executor_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Executor(engine=None, *, workers=None, gpu=None, check_nan=False, "
              "timeout_ms=0, seed=0, cache_size=0, segments=True): prepares programs into "
              "plans (cached) and runs them on engine (None: a new Engine(workers)); the "
              "options are vq_exec_opts'. Thread-safe.",
    .tp_methods = executor_methods,
    .tp_getset = executor_getset,
    .tp_init = (initproc)executor_init,
    .tp_new = PyType_GenericNew,
};

/* ---- training (train.h) ---- */

static vq_program *editable_program(PyObject *o)
{
    vq_program *p = program_of(o);
    return p && program_editable((vqpy_program *)o) ? p : NULL;
}

PyObject *vqpy_append_backward(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = {"program", "loss", "no_grad", NULL};
    PyObject *prog, *ng = Py_None;
    const char *loss;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "Os|O", names, &prog, &loss, &ng))
        return NULL;
    vq_program *p = editable_program(prog);
    if (!p)
        return NULL;
    PyObject *seq;
    const char **nn;
    int n;
    PyObject *result = NULL;
    if (names_arg(ng, &seq, &nn, &n, "no_grad") == 0) {
        int rc = vq_append_backward(p, loss, nn, n);
        result = rc < 0 ? vqpy_raise(rc) : PyLong_FromLong(rc);
    }
    free(nn);
    Py_XDECREF(seq);
    return result;
}

PyObject *vqpy_optimizer_minimize(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = {"main",
                            "startup",
                            "loss",
                            "kind",
                            "learning_rate",
                            "learning_rate_var",
                            "mu",
                            "nesterov",
                            "beta1",
                            "beta2",
                            "epsilon",
                            "weight_decay",
                            "decoupled",
                            "clip_value",
                            "clip_norm",
                            "parameters",
                            NULL};
    PyObject *mo, *so, *params = Py_None;
    const char *loss, *lr_var = NULL;
    vq_optimizer o = {0};
    int kind = 0, nesterov = 0, decoupled = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOs|$idzdpddddpddO", names, &mo, &so, &loss, &kind,
                                     &o.learning_rate, &lr_var, &o.mu, &nesterov, &o.beta1,
                                     &o.beta2, &o.epsilon, &o.weight_decay, &decoupled,
                                     &o.clip_value, &o.clip_norm, &params))
        return NULL;
    vq_program *m = editable_program(mo), *s = m ? editable_program(so) : NULL;
    if (!s)
        return NULL;
    o.kind = (vq_optimizer_kind)kind;
    o.learning_rate_var = lr_var;
    o.nesterov = nesterov;
    o.decoupled = decoupled;
    PyObject *seq;
    const char **pn;
    int n;
    PyObject *result = NULL;
    if (names_arg(params, &seq, &pn, &n, "parameters") == 0) {
        o.parameters = params == Py_None ? NULL : pn;
        o.nparameters = n;
        int rc = vq_optimizer_minimize(m, s, loss, &o);
        result = rc < 0 ? vqpy_raise(rc) : PyLong_FromLong(rc);
    }
    free(pn);
    Py_XDECREF(seq);
    return result;
}

PyObject *vqpy_lr_schedule_build(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = {"main",         "startup",    "lr_var",      "kind",  "base_lr",
                            "dtype",        "step_size",  "gamma",       "t_max", "eta_min",
                            "start_factor", "end_factor", "total_iters", NULL};
    PyObject *mo, *so, *dto = NULL;
    const char *lr_var;
    vq_lr_schedule sc = {0};
    int kind = 0;
    long long step_size = 0, t_max = 0, total_iters = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOsid|$OLdLdddL", names, &mo, &so, &lr_var, &kind,
                                     &sc.base_lr, &dto, &step_size, &sc.gamma, &t_max, &sc.eta_min,
                                     &sc.start_factor, &sc.end_factor, &total_iters))
        return NULL;
    vq_program *m = editable_program(mo), *s = m ? editable_program(so) : NULL;
    if (!s)
        return NULL;
    sc.kind = (vq_lr_schedule_kind)kind;
    sc.dtype = VQ_F32;
    if (dto && dto != Py_None && dtype_arg(dto, &sc.dtype) < 0)
        return NULL;
    sc.step_size = step_size;
    sc.t_max = t_max;
    sc.total_iters = total_iters;
    int rc = vq_lr_schedule_build(m, s, lr_var, &sc);
    if (rc < 0)
        return vqpy_raise(rc);
    Py_RETURN_NONE;
}

/* layer(kind, main, startup_or_None, *strings, number=0, seed=0): one call
 * for the few vq_layer_* functions, dispatched on kind. */
PyObject *vqpy_layer(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = {"kind", "main", "startup", "a", "b", "c", "d", "number", "seed", NULL};
    const char *kind, *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    PyObject *mo, *so = Py_None;
    double number = 0;
    unsigned long long seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|Ozzzz$dK", names, &kind, &mo, &so, &a, &b, &c,
                                     &d, &number, &seed))
        return NULL;
    vq_program *m = editable_program(mo), *s = NULL;
    if (!m)
        return NULL;
    if (so != Py_None && !(s = editable_program(so)))
        return NULL;
    int rc;
    if (!strcmp(kind, "linear") && s && a && b)
        rc = vq_layer_linear(m, s, a, b, (int64_t)number, seed);
    else if (!strcmp(kind, "activation") && a && b && c)
        rc = vq_layer_activation(m, a, b, c);
    else if (!strcmp(kind, "mse_loss") && a && b && c)
        rc = vq_layer_mse_loss(m, a, b, c);
    else if (!strcmp(kind, "softmax_cross_entropy") && a && b && c && d)
        rc = vq_layer_softmax_cross_entropy(m, a, b, c, d);
    else if (!strcmp(kind, "rng_state") && s && a)
        rc = vq_layer_rng_state(m, s, a, seed);
    else if (!strcmp(kind, "dropout") && a && b)
        rc = vq_layer_dropout(m, a, b, number, c);
    else
        return vqpy_raise_msg(VQ_EINVAL, "layer: no layer '%s' taking these arguments", kind);
    if (rc < 0)
        return vqpy_raise(rc);
    Py_RETURN_NONE;
}
