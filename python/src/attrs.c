/* Op attributes from Python: a dict {name: value} (Program.add_op's attrs,
 * varq.ops' keyword arguments) as the vq_attr array vq_program_add_op and
 * vq_op_run take. Each value's vq_attr_type is the op schema's, read from
 * vq_op_signature ("...; axis:int=0 sizes:ints"), so 1 becomes a FLOAT
 * where the schema wants a float and [] an INTS where it wants ints; an
 * attribute the schema does not name gets the type of its Python value,
 * and the registry then refuses it with its own message. */
#include "varq_py.h"

#include <stdlib.h>
#include <string.h>

/* The schema's type of attribute name of op type, 0 when unknown. */
static vq_attr_type schema_type(const char *type, const char *name)
{
    const char *sig = vq_op_signature(type);
    const char *p = sig ? strchr(sig, ';') : NULL;
    size_t len = strlen(name);
    static const struct {
        const char *word;
        vq_attr_type t;
    } words[] = {{"ints", VQ_ATTR_INTS},   {"int", VQ_ATTR_INT},         {"floats", VQ_ATTR_FLOATS},
                 {"float", VQ_ATTR_FLOAT}, {"strings", VQ_ATTR_STRINGS}, {"string", VQ_ATTR_STRING},
                 {"bools", VQ_ATTR_BOOLS}, {"bool", VQ_ATTR_BOOL}};
    while (p && *p) {
        while (*p == ';' || *p == ' ')
            p++;
        const char *colon = strchr(p, ':');
        if (!colon)
            break;
        if ((size_t)(colon - p) == len && !strncmp(p, name, len)) {
            for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
                size_t n = strlen(words[i].word);
                if (!strncmp(colon + 1, words[i].word, n) &&
                    (colon[1 + n] == '=' || colon[1 + n] == ' ' || colon[1 + n] == 0))
                    return words[i].t;
            }
            return 0;
        }
        p = strchr(colon, ' ');
    }
    return 0;
}

/* The type a Python value suggests when the schema says nothing. */
static vq_attr_type value_type(PyObject *v)
{
    if (PyBool_Check(v))
        return VQ_ATTR_BOOL;
    if (PyLong_Check(v))
        return VQ_ATTR_INT;
    if (PyFloat_Check(v))
        return VQ_ATTR_FLOAT;
    if (PyUnicode_Check(v))
        return VQ_ATTR_STRING;
    PyObject *seq = PySequence_Fast(v, "");
    if (!seq) {
        PyErr_Clear();
        return 0;
    }
    vq_attr_type t = VQ_ATTR_INTS;
    if (PySequence_Fast_GET_SIZE(seq) > 0) {
        PyObject *first = PySequence_Fast_GET_ITEM(seq, 0);
        t = PyBool_Check(first)      ? VQ_ATTR_BOOLS
            : PyFloat_Check(first)   ? VQ_ATTR_FLOATS
            : PyUnicode_Check(first) ? VQ_ATTR_STRINGS
                                     : VQ_ATTR_INTS;
    }
    Py_DECREF(seq);
    return t;
}

void vqpy_attrs_free(vqpy_attrs *a)
{
    for (int i = 0; i < a->n; i++) {
        free((void *)a->v[i].ints);
        free((void *)a->v[i].floats);
        free((void *)a->v[i].strings);
    }
    free(a->v);
    Py_XDECREF(a->keep);
    a->v = NULL;
    a->n = 0;
    a->keep = NULL;
}

static int fill_list(vq_attr *at, PyObject *value, const char *op)
{
    PyObject *seq = PySequence_Fast(value, "");
    if (!seq) {
        PyErr_Format(PyExc_TypeError, "%s: attribute '%s' wants a list", op, at->name);
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    at->n = (int)n;
    size_t cnt = (size_t)(n ? n : 1);
    if (at->type == VQ_ATTR_FLOATS)
        at->floats = calloc(cnt, sizeof(double));
    else if (at->type == VQ_ATTR_STRINGS)
        at->strings = calloc(cnt, sizeof(char *));
    else
        at->ints = calloc(cnt, sizeof(int64_t));
    if (!at->floats && !at->strings && !at->ints) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        if (at->type == VQ_ATTR_FLOATS) {
            ((double *)at->floats)[i] = PyFloat_AsDouble(o);
        } else if (at->type == VQ_ATTR_STRINGS) {
            /* the strings are the list's items', alive while seq is */
            ((const char **)at->strings)[i] = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
            if (!at->strings[i] && !PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%s: attribute '%s' wants strings", op, at->name);
        } else {
            ((int64_t *)at->ints)[i] = PyLong_AsLongLong(o);
        }
        if (PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq); /* the strings stay alive: value holds its items, and keep holds value */
    return 0;
}

int vqpy_attrs_from_dict(const char *op, PyObject *dict, vqpy_attrs *out)
{
    out->v = NULL;
    out->n = 0;
    out->keep = NULL;
    if (!dict || dict == Py_None)
        return 0;
    if (!PyDict_Check(dict)) {
        PyErr_SetString(PyExc_TypeError, "attrs must be a dict");
        return -1;
    }
    /* A copy of the dict keeps every key and value (and so every string
     * pointed to) alive until vqpy_attrs_free. */
    if (!(out->keep = PyDict_Copy(dict)))
        return -1;
    Py_ssize_t n = PyDict_Size(out->keep);
    out->v = calloc((size_t)(n ? n : 1), sizeof *out->v);
    if (!out->v) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(out->keep, &pos, &key, &value)) {
        vq_attr *at = &out->v[out->n++];
        at->name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        if (!at->name) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%s: an attribute's name is not a str", op);
            return -1;
        }
        at->type = schema_type(op, at->name);
        if (!at->type)
            at->type = value_type(value);
        switch (at->type) {
        case VQ_ATTR_INT:
        case VQ_ATTR_BOOL:
            if (at->type == VQ_ATTR_BOOL) {
                /* bool, an int, or numpy's bool_; not any truthy object */
                if (!PyBool_Check(value) && !PyLong_Check(value) &&
                    strcmp(Py_TYPE(value)->tp_name, "numpy.bool_")) {
                    vqpy_raise_msg(VQ_EINVAL, "%s: attribute '%s' wants a bool, not a %.80s", op,
                                   at->name, Py_TYPE(value)->tp_name);
                    return -1;
                }
                at->i = PyObject_IsTrue(value);
            } else if (PyFloat_Check(value)) { /* 2.5 for an int: refused, not truncated */
                vqpy_raise_msg(VQ_EINVAL, "%s: attribute '%s' wants an int, not a float", op,
                               at->name);
                return -1;
            } else
                at->i = PyLong_AsLongLong(value);
            break;
        case VQ_ATTR_FLOAT: at->f = PyFloat_AsDouble(value); break;
        case VQ_ATTR_STRING:
            at->s = PyUnicode_Check(value) ? PyUnicode_AsUTF8(value) : NULL;
            if (!at->s && !PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%s: attribute '%s' wants a str", op, at->name);
            break;
        case VQ_ATTR_INTS:
        case VQ_ATTR_FLOATS:
        case VQ_ATTR_STRINGS:
        case VQ_ATTR_BOOLS:
            if (fill_list(at, value, op) < 0)
                return -1;
            break;
        default:
            PyErr_Format(PyExc_TypeError, "%s: attribute '%s': %R is no attribute value", op,
                         at->name, value);
            return -1;
        }
        if (PyErr_Occurred())
            return -1;
    }
    return 0;
}
