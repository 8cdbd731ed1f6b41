/* numpy arrays made and read through numpy's C API, the fast paths of
 * InferenceSession.run and of every varq.Tensor -> numpy conversion: an
 * array over a tensor's memory is made directly (PyArray_NewFromDescr with
 * the Tensor as its base) instead of calling numpy.asarray, which goes
 * through the buffer protocol and a memoryview; a numpy feed is wrapped
 * from its array fields instead of a Py_buffer export.
 *
 * numpy's C API is loaded on first use (import_array), so that importing
 * varq does not import numpy; where numpy or its headers are missing
 * (built without VQPY_NUMPY_CAPI) every function here says "not
 * available" and the callers take their buffer-protocol paths. */
#include "varq_py.h"

#include <stdlib.h>

#ifdef VQPY_NUMPY_CAPI
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

/* 0: not tried yet, 1: loaded, -1: failed (numpy missing or too old). */
static int api_state;

static bool api_ready(void)
{
    if (api_state == 0) {
        /* import_array is a macro that returns from its caller. */
        api_state = _import_array() < 0 ? -1 : 1;
        if (api_state < 0)
            PyErr_Clear();
    }
    return api_state > 0;
}

static int npy_type_of(vq_dtype dt)
{
    switch (dt) {
    case VQ_F32: return NPY_FLOAT32;
    case VQ_F64: return NPY_FLOAT64;
    case VQ_I32: return NPY_INT32;
    case VQ_I64: return NPY_INT64;
    case VQ_BOOL: return NPY_BOOL;
    case VQ_F16: return NPY_FLOAT16;
    case VQ_I8: return NPY_INT8;
    case VQ_U8: return NPY_UINT8;
    case VQ_I16: return NPY_INT16;
    case VQ_U16: return NPY_UINT16;
    case VQ_U32: return NPY_UINT32;
    case VQ_U64: return NPY_UINT64;
    default: return -1; /* bfloat16: numpy has none (buffer path: 2-byte voids) */
    }
}

PyObject *vqpy_np_array_over(PyObject *tensor, void *data)
{
    vqpy_tensor *t = (vqpy_tensor *)tensor;
    int type = npy_type_of(vq_tensor_dtype(t->t));
    if (type < 0 || !api_ready())
        return NULL;
    npy_intp dims[VQ_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++)
        dims[i] = (npy_intp)t->shape[i];
    int flags =
        NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | (t->readonly ? 0 : NPY_ARRAY_WRITEABLE);
    /* The descriptor reference is stolen by the call. */
    PyObject *arr = PyArray_NewFromDescr(&PyArray_Type, PyArray_DescrFromType(type), t->ndim, dims,
                                         NULL, data, flags, NULL);
    if (!arr)
        return NULL;
    /* The array's base keeps the Tensor (and so its memory) alive. */
    if (PyArray_SetBaseObject((PyArrayObject *)arr, Py_NewRef(tensor)) < 0) {
        Py_DECREF(arr);
        return NULL;
    }
    return arr;
}

/* The varq dtype of a numpy array of native byte order; false when varq
 * has none. */
static bool dtype_of_array(PyArrayObject *a, vq_dtype *out)
{
    PyArray_Descr *d = PyArray_DESCR(a);
    if (!PyArray_ISNBO(d->byteorder))
        return false;
    switch (d->kind) {
    case 'f':
        *out = d->elsize == 4 ? VQ_F32 : d->elsize == 8 ? VQ_F64 : VQ_F16;
        return d->elsize == 4 || d->elsize == 8 || d->elsize == 2;
    case 'i':
        *out = d->elsize == 4 ? VQ_I32 : d->elsize == 8 ? VQ_I64 : d->elsize == 2 ? VQ_I16 : VQ_I8;
        return d->elsize == 1 || d->elsize == 2 || d->elsize == 4 || d->elsize == 8;
    case 'u':
        *out = d->elsize == 4 ? VQ_U32 : d->elsize == 8 ? VQ_U64 : d->elsize == 2 ? VQ_U16 : VQ_U8;
        return d->elsize == 1 || d->elsize == 2 || d->elsize == 4 || d->elsize == 8;
    case 'b': *out = VQ_BOOL; return d->elsize == 1;
    default: return false;
    }
}

/* The release callback of a wrapped feed: see vqpy_np_hold in varq_py.h.
 * Called by whichever thread drops the tensor's last reference. */
static void hold_release(void *user)
{
    vqpy_np_hold *h = user;
    /* acq_rel: pairs with vqpy_np_hold_done's exchange; whichever of the
     * two comes second owns the array's reference. */
    if (atomic_exchange_explicit(&h->state, VQPY_HOLD_RELEASED, memory_order_acq_rel) !=
        VQPY_HOLD_ABANDONED)
        return; /* the caller is still in its call and drops it there */
    if (vqpy_no_gil_for_callback()) {
        PyMem_RawFree(h);
        return;
    }
    PyGILState_STATE g = vqpy_gil_ensure();
    Py_DECREF(h->array);
    vqpy_gil_release(g);
    PyMem_RawFree(h);
}

vq_tensor *vqpy_np_feed(PyObject *obj, vqpy_np_hold **hold)
{
    *hold = NULL;
    if (!api_ready() || !PyArray_Check(obj))
        return NULL;
    PyArrayObject *a = (PyArrayObject *)obj;
    vq_dtype dt;
    int ndim = PyArray_NDIM(a);
    if (!PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISALIGNED(a) || ndim > VQ_MAX_DIMS ||
        !dtype_of_array(a, &dt))
        return NULL;
    int64_t shape[VQ_MAX_DIMS];
    for (int i = 0; i < ndim; i++)
        shape[i] = (int64_t)PyArray_DIM(a, i);
    vqpy_np_hold *h = PyMem_RawMalloc(sizeof *h);
    if (!h)
        return NULL;
    h->array = Py_NewRef(obj);
    atomic_init(&h->state, VQPY_HOLD_HELD);
    vq_tensor *t;
    if (vq_tensor_wrap(&t, dt, ndim, shape, PyArray_DATA(a), hold_release, h) < 0) {
        Py_DECREF(obj);
        PyMem_RawFree(h);
        return NULL; /* the buffer path says why */
    }
    *hold = h;
    return t;
}

void vqpy_np_hold_done(vqpy_np_hold *h)
{
    if (!h)
        return;
    if (atomic_exchange_explicit(&h->state, VQPY_HOLD_ABANDONED, memory_order_acq_rel) !=
        VQPY_HOLD_RELEASED)
        return; /* the tensor lives on: its last release drops the array */
    Py_DECREF(h->array);
    PyMem_RawFree(h);
}

#else /* built without numpy's headers: the buffer-protocol paths only */

PyObject *vqpy_np_array_over(PyObject *tensor, void *data)
{
    (void)tensor;
    (void)data;
    return NULL;
}

vq_tensor *vqpy_np_feed(PyObject *obj, vqpy_np_hold **hold)
{
    (void)obj;
    *hold = NULL;
    return NULL;
}

void vqpy_np_hold_done(vqpy_np_hold *h)
{
    (void)h;
}

#endif
