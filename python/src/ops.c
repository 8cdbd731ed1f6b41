/* Imperative ops and capture from Python: vq_op_run (include/varq/ops.h)
 * on numpy arrays, torch tensors and varq.Tensors, and the capture calls
 * of include/varq/capture.h, which varq/ops.py wraps as varq.ops.<name>
 * functions (one per registered op, made from vq_op_signature) and the
 * varq.capture context manager.
 *
 * vq_op_run is called with the GIL released: it may push (and past the
 * engine's throttle run ops, whose wrapped numpy inputs take the GIL when
 * released). It is called on the calling thread, so a capture begun by
 * that thread records it. Inputs are used in place (numpy arrays through
 * the buffer protocol, torch tensors through DLPack, held by the op until
 * it is done); outputs are new varq.Tensors holding the engine, or the
 * tensors given in out=, written in place. */
#include "varq_py.h"

#include <stdlib.h>
#include <string.h>

static vqpy_engine *engine_arg(PyObject *o, const char *fn)
{
    if (!PyObject_TypeCheck(o, &vqpy_engine_type) || !((vqpy_engine *)o)->engine) {
        PyErr_Format(PyExc_TypeError, "%s: engine is a %.80s, not a varq.Engine", fn,
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    return (vqpy_engine *)o;
}

static void release_tensors(vq_tensor **t, int n)
{
    Py_BEGIN_ALLOW_THREADS;
    for (int i = 0; i < n; i++)
        vq_tensor_release(t[i]);
    Py_END_ALLOW_THREADS;
}

/* op_run(engine, type, inputs, outputs, attrs) -> tuple of Tensors.
 * outputs: an int (that many created) or a list of None (created) and
 * tensors (written in place). */
PyObject *vqpy_op_run(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *eo, *ino, *outo, *attro;
    const char *type;
    if (!PyArg_ParseTuple(args, "OsOOO", &eo, &type, &ino, &outo, &attro))
        return NULL;
    vqpy_engine *eng = engine_arg(eo, type);
    if (!eng)
        return NULL;
    PyObject *ins = PySequence_Fast(ino, "inputs must be a sequence");
    if (!ins)
        return NULL;
    PyObject *outs = NULL;
    Py_ssize_t nout;
    if (PyLong_Check(outo)) {
        nout = PyLong_AsSsize_t(outo);
        if (nout < 0 || nout > 64) {
            Py_DECREF(ins);
            return vqpy_raise_msg(VQ_EINVAL, "%s: %zd outputs", type, nout);
        }
    } else {
        if (!(outs = PySequence_Fast(outo, "out must be a sequence"))) {
            Py_DECREF(ins);
            return NULL;
        }
        nout = PySequence_Fast_GET_SIZE(outs);
    }
    Py_ssize_t nin = PySequence_Fast_GET_SIZE(ins);
    vq_tensor **in = calloc((size_t)(nin ? nin : 1), sizeof *in);
    vq_tensor **out = calloc((size_t)(nout ? nout : 1), sizeof *out);
    PyObject *result = NULL;
    vqpy_attrs at = {0};
    int got_in = 0, got_out = 0;
    if (!in || !out) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got_in < nin; got_in++) {
        PyObject *o = PySequence_Fast_GET_ITEM(ins, got_in);
        if (!(in[got_in] = vqpy_tensor_any(o, (PyObject *)eng)))
            goto done;
    }
    for (Py_ssize_t i = 0; outs && i < nout; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(outs, i);
        if (o == Py_None)
            continue;
        if (!PyObject_TypeCheck(o, &vqpy_tensor_type)) {
            /* writing into a numpy array in place would race with numpy's
             * readers; a varq.Tensor over it (varq.tensor) says so */
            PyErr_Format(PyExc_TypeError,
                         "%s: out[%zd] is a %.80s: outputs written in place are varq.Tensors "
                         "(varq.tensor(array) shares the array's memory)",
                         type, i, Py_TYPE(o)->tp_name);
            goto done;
        }
        if (((vqpy_tensor *)o)->readonly) {
            vqpy_raise_msg(VQ_EINVAL, "%s: out[%zd] wraps read-only memory", type, i);
            goto done;
        }
        if (vqpy_tensor_hold_engine(o, (PyObject *)eng) < 0)
            goto done;
        out[i] = vq_tensor_retain(((vqpy_tensor *)o)->t);
    }
    got_out = (int)nout;
    if (vqpy_attrs_from_dict(type, attro, &at) < 0)
        goto done;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = vq_op_run(eng->engine, type, in, (int)nin, out, (int)nout, at.v, at.n);
    Py_END_ALLOW_THREADS;
    if (rc < 0) {
        vqpy_raise(rc);
        goto done;
    }
    result = PyTuple_New(nout);
    for (Py_ssize_t i = 0; result && i < nout; i++) {
        PyObject *given = outs ? PySequence_Fast_GET_ITEM(outs, i) : Py_None;
        PyObject *t;
        if (given != Py_None) {
            t = Py_NewRef(given);
        } else {
            t = vqpy_tensor_new(out[i], (PyObject *)eng); /* takes the reference */
            out[i] = NULL;
        }
        if (!t) {
            Py_CLEAR(result);
            break;
        }
        PyTuple_SET_ITEM(result, i, t);
    }
done:
    vqpy_attrs_free(&at);
    if (in)
        release_tensors(in, got_in);
    if (out) {
        for (int i = 0; i < got_out; i++)
            if (out[i]) {
                Py_BEGIN_ALLOW_THREADS;
                vq_tensor_release(out[i]);
                Py_END_ALLOW_THREADS;
            }
    }
    free(in);
    free(out);
    Py_DECREF(ins);
    Py_XDECREF(outs);
    return result;
}

PyObject *vqpy_op_names(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    int n = vq_op_count();
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        PyObject *s = PyUnicode_FromString(vq_op_name(i));
        if (!s) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, s);
    }
    return list;
}

PyObject *vqpy_op_signature(PyObject *self, PyObject *arg)
{
    (void)self;
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name)
        return NULL;
    const char *sig = vq_op_signature(name);
    if (!sig)
        return vqpy_raise_msg(VQ_EINVAL, "no op named '%s'", name);
    return PyUnicode_FromString(sig);
}

/* ---- capture ---- */

PyObject *vqpy_capture_begin(PyObject *self, PyObject *arg)
{
    (void)self;
    vqpy_engine *eng = engine_arg(arg, "capture");
    if (!eng)
        return NULL;
    int rc = vq_capture_begin(eng->engine);
    if (rc < 0)
        return vqpy_raise(rc);
    Py_RETURN_NONE;
}

PyObject *vqpy_capture_end(PyObject *self, PyObject *arg)
{
    (void)self;
    vqpy_engine *eng = engine_arg(arg, "capture");
    if (!eng)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS; /* pushes the segment */
    rc = vq_capture_end(eng->engine);
    Py_END_ALLOW_THREADS;
    if (rc < 0)
        return vqpy_raise(rc);
    Py_RETURN_NONE;
}

PyObject *vqpy_capture_backward(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *eo, *loss, *po;
    if (!PyArg_ParseTuple(args, "OO!O", &eo, &vqpy_tensor_type, &loss, &po))
        return NULL;
    vqpy_engine *eng = engine_arg(eo, "backward");
    if (!eng)
        return NULL;
    PyObject *ps = PySequence_Fast(po, "params must be a sequence of varq.Tensor");
    if (!ps)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(ps);
    vq_tensor **params = calloc((size_t)(n ? n : 1), sizeof *params);
    vq_tensor **grads = calloc((size_t)(n ? n : 1), sizeof *grads);
    PyObject *result = NULL;
    if (!params || !grads) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(ps, i);
        if (!PyObject_TypeCheck(o, &vqpy_tensor_type)) {
            PyErr_Format(PyExc_TypeError, "backward: params[%zd] is not a varq.Tensor", i);
            goto done;
        }
        params[i] = ((vqpy_tensor *)o)->t; /* borrowed: ps holds the objects */
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = vq_capture_backward(eng->engine, ((vqpy_tensor *)loss)->t, params, (int)n, grads);
    Py_END_ALLOW_THREADS;
    if (rc < 0) {
        vqpy_raise(rc);
        goto done;
    }
    result = PyList_New(n);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *g = grads[i] ? vqpy_tensor_new(grads[i], eo) : Py_NewRef(Py_None);
        grads[i] = NULL;
        if (!g || !result) {
            Py_XDECREF(g);
            Py_CLEAR(result);
            continue; /* the rest of grads are still released below */
        }
        PyList_SET_ITEM(result, i, g);
    }
done:
    if (grads)
        release_tensors(grads, (int)n); /* those not handed out (NULL is ignored) */
    free(params);
    free(grads);
    Py_DECREF(ps);
    return result;
}

PyObject *vqpy_capture_stats(PyObject *self, PyObject *arg)
{
    (void)self;
    vqpy_engine *eng = engine_arg(arg, "capture");
    if (!eng)
        return NULL;
    vq_capture_stats st;
    int rc = vq_capture_get_stats(eng->engine, &st);
    if (rc < 0)
        return vqpy_raise(rc);
    static const char *cut_names[VQ_CAPTURE_CUT_KINDS] = {"end",      "host_read", "var", "thread",
                                                          "fallback", "device",    "size"};
    PyObject *cuts = PyDict_New();
    for (int i = 0; cuts && i < VQ_CAPTURE_CUT_KINDS; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(st.cuts[i]);
        if (!v || PyDict_SetItemString(cuts, cut_names[i], v) < 0)
            Py_CLEAR(cuts);
        Py_XDECREF(v);
    }
    if (!cuts)
        return NULL;
    return Py_BuildValue("{sKsKsKsKsKsNsK}", "ops_recorded", (unsigned long long)st.ops_recorded,
                         "op_hits", (unsigned long long)st.op_hits, "segments_run",
                         (unsigned long long)st.segments_run, "cache_hits",
                         (unsigned long long)st.cache_hits, "plans_built",
                         (unsigned long long)st.plans_built, "cuts", cuts, "guard",
                         (unsigned long long)st.guard);
}
