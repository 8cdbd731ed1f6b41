/* varq.Tensor: a vq_tensor seen from Python, and the ways memory crosses
 * between varq and other array libraries without a copy.
 *
 * Out: the buffer protocol and __array_interface__ (numpy.asarray,
 * memoryview) and DLPack (__dlpack__ / __dlpack_device__: numpy.from_dlpack,
 * torch.from_dlpack). Each waits for the ops pushed on the tensor first
 * (vq_tensor_wait, GIL released), then hands out the tensor's own bytes;
 * the consumer holds the Tensor object (the array's base, the DLPack
 * manager context) as long as it uses them.
 *
 * In: varq.tensor(x) and varq.from_dlpack(x) wrap the producer's memory
 * with vq_tensor_wrap; its release callback lets go of the producer (a
 * Py_buffer released, a DLPack deleter called) under the GIL, from
 * whichever thread drops the tensor's last reference.
 *
 * The DLPack structures are written out here (the spec's dlpack.h, ABI
 * stable): legacy capsules ("dltensor", DLManagedTensor), which numpy 1.22+
 * and torch 1.10+ take, and versioned ones ("dltensor_versioned", DLPack
 * 1.0) for consumers that ask with max_version >= (1, 0). */
#include "varq_py.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- DLPack (the spec's dlpack.h, the parts used) ---- */

enum { DL_CPU = 1, DL_CUDA_HOST = 3 };
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_BOOL = 6 };

typedef struct {
    int32_t device_type;
    int32_t device_id;
} DLDevice;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides; /* in elements; NULL: compact row-major */
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

/* ---- dtypes ---- */

static const struct {
    const char *numpy, *typestr, *format;
    DLDataType dl;
} dtypes[VQ_DTYPE_COUNT] = {
    [VQ_F32] = {"float32", "<f4", "f", {DL_FLOAT, 32, 1}},
    [VQ_F64] = {"float64", "<f8", "d", {DL_FLOAT, 64, 1}},
    [VQ_I32] = {"int32", "<i4", "i", {DL_INT, 32, 1}},
    [VQ_I64] = {"int64", "<i8", "q", {DL_INT, 64, 1}},
    [VQ_BOOL] = {"bool", "|b1", "?", {DL_BOOL, 8, 1}},
    [VQ_F16] = {"float16", "<f2", "e", {DL_FLOAT, 16, 1}},
    /* numpy has no bfloat16: its bytes are 2-byte voids, as .npy files
     * store them (tensor.h) */
    [VQ_BF16] = {"bfloat16", "|V2", "2x", {DL_BFLOAT, 16, 1}},
    [VQ_I8] = {"int8", "|i1", "b", {DL_INT, 8, 1}},
    [VQ_U8] = {"uint8", "|u1", "B", {DL_UINT, 8, 1}},
    [VQ_I16] = {"int16", "<i2", "h", {DL_INT, 16, 1}},
    [VQ_U16] = {"uint16", "<u2", "H", {DL_UINT, 16, 1}},
    [VQ_U32] = {"uint32", "<u4", "I", {DL_UINT, 32, 1}},
    [VQ_U64] = {"uint64", "<u8", "Q", {DL_UINT, 64, 1}},
};

const char *vqpy_dtype_numpy(vq_dtype dt)
{
    return (unsigned)dt < VQ_DTYPE_COUNT ? dtypes[dt].numpy : "?";
}

bool vqpy_dtype_of_format(const char *format, Py_ssize_t itemsize, vq_dtype *out)
{
    if (!format)
        format = "B";
    if (*format == '@' || *format == '=' || *format == '<')
        format++;
    if (format[0] == '\0' || format[1] != '\0')
        return false;
    switch (format[0]) {
    case 'f':
    case 'd': *out = itemsize == 4 ? VQ_F32 : VQ_F64; return itemsize == 4 || itemsize == 8;
    case 'i':
    case 'l':
    case 'q': *out = itemsize == 4 ? VQ_I32 : VQ_I64; return itemsize == 4 || itemsize == 8;
    case '?': *out = VQ_BOOL; return itemsize == 1;
    case 'e': *out = VQ_F16; return itemsize == 2;
    case 'b': *out = VQ_I8; return itemsize == 1;
    case 'B': *out = VQ_U8; return itemsize == 1;
    case 'h': *out = VQ_I16; return itemsize == 2;
    case 'H': *out = VQ_U16; return itemsize == 2;
    case 'I':
    case 'L':
    case 'Q': *out = itemsize == 4 ? VQ_U32 : VQ_U64; return itemsize == 4 || itemsize == 8;
    default: return false;
    }
}

static bool dtype_of_dl(DLDataType d, vq_dtype *out)
{
    if (d.lanes != 1)
        return false;
    for (int i = 0; i < VQ_DTYPE_COUNT; i++)
        if (dtypes[i].dl.code == d.code && dtypes[i].dl.bits == d.bits) {
            *out = (vq_dtype)i;
            return true;
        }
    return false;
}

/* ---- the Tensor object ---- */

PyObject *vqpy_tensor_new(vq_tensor *t, PyObject *engine)
{
    vqpy_tensor *self = PyObject_New(vqpy_tensor, &vqpy_tensor_type);
    if (!self) {
        Py_BEGIN_ALLOW_THREADS;
        vq_tensor_release(t);
        Py_END_ALLOW_THREADS;
        return NULL;
    }
    self->t = t;
    self->engine = Py_XNewRef(engine);
    self->readonly = false;
    self->error = NULL;
    self->ndim = vq_tensor_ndim(t);
    const int64_t *shape = vq_tensor_shape(t);
    Py_ssize_t stride = (Py_ssize_t)vq_dtype_size(vq_tensor_dtype(t));
    for (int i = self->ndim - 1; i >= 0; i--) {
        self->shape[i] = (Py_ssize_t)shape[i];
        self->strides[i] = stride;
        stride *= (Py_ssize_t)shape[i];
    }
    return (PyObject *)self;
}

static void tensor_dealloc(vqpy_tensor *self)
{
    vq_tensor *t = self->t;
    /* The last release may push the free on the engine (GIL released: see
     * varq_py.h) or call a wrapped buffer's release, which takes the GIL. */
    Py_BEGIN_ALLOW_THREADS;
    vq_tensor_release(t);
    Py_END_ALLOW_THREADS;
    Py_XDECREF(self->engine);
    Py_XDECREF(self->error);
    PyObject_Free(self);
}

/* Waits for the ops on the tensor; NULL with an exception when one failed. */
static void *tensor_ready(vqpy_tensor *self)
{
    if (vq_tensor_device(self->t).kind != VQ_DEV_CPU) {
        vqpy_raise_msg(VQ_EINVAL, "the tensor is on GPU %d: copy it to the CPU first",
                       vq_tensor_device(self->t).id);
        return NULL;
    }
    if (self->error) {
        PyErr_SetObject((PyObject *)Py_TYPE(self->error), self->error);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = vq_tensor_wait(self->t);
    Py_END_ALLOW_THREADS;
    if (rc < 0) {
        vqpy_raise(rc);
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyErr_NormalizeException(&type, &value, &tb);
        self->error = Py_XNewRef(value);
        PyErr_Restore(type, value, tb);
        return NULL;
    }
    return vq_tensor_data(self->t);
}

static int tensor_getbuffer(vqpy_tensor *self, Py_buffer *view, int flags)
{
    void *data = tensor_ready(self);
    if (!data) {
        view->obj = NULL;
        return -1;
    }
    if (self->readonly && (flags & PyBUF_WRITABLE)) {
        PyErr_SetString(PyExc_BufferError, "the tensor wraps read-only memory");
        view->obj = NULL;
        return -1;
    }
    vq_dtype dt = vq_tensor_dtype(self->t);
    view->buf = data;
    view->obj = Py_NewRef(self);
    view->len = (Py_ssize_t)vq_tensor_nbytes(self->t);
    view->itemsize = (Py_ssize_t)vq_dtype_size(dt);
    view->readonly = self->readonly;
    view->format = (flags & PyBUF_FORMAT) ? (char *)dtypes[dt].format : NULL;
    view->ndim = self->ndim;
    view->shape = (flags & PyBUF_ND) ? self->shape : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? self->strides : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static PyBufferProcs tensor_as_buffer = {
    .bf_getbuffer = (getbufferproc)tensor_getbuffer,
};

static PyObject *shape_tuple(vqpy_tensor *self)
{
    PyObject *shape = PyTuple_New(self->ndim);
    if (!shape)
        return NULL;
    for (int i = 0; i < self->ndim; i++)
        PyTuple_SET_ITEM(shape, i, PyLong_FromSsize_t(self->shape[i]));
    return shape;
}

static PyObject *tensor_get_shape(vqpy_tensor *self, void *closure)
{
    (void)closure;
    return shape_tuple(self);
}

static PyObject *tensor_get_dtype(vqpy_tensor *self, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(dtypes[vq_tensor_dtype(self->t)].numpy);
}

static PyObject *tensor_get_ndim(vqpy_tensor *self, void *closure)
{
    (void)closure;
    return PyLong_FromLong(self->ndim);
}

static PyObject *tensor_get_nbytes(vqpy_tensor *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(vq_tensor_nbytes(self->t));
}

/* numpy's array interface (version 3): data is the tensor's address. */
static PyObject *tensor_get_array_interface(vqpy_tensor *self, void *closure)
{
    (void)closure;
    void *data = tensor_ready(self);
    if (!data)
        return NULL;
    return Py_BuildValue("{s:N,s:s,s:(N,O),s:i,s:O}", "shape", shape_tuple(self), "typestr",
                         dtypes[vq_tensor_dtype(self->t)].typestr, "data", PyLong_FromVoidPtr(data),
                         self->readonly ? Py_True : Py_False, "version", 3, "strides", Py_None);
}

static PyObject *tensor_numpy(vqpy_tensor *self, PyObject *unused)
{
    (void)unused;
    return vqpy_numpy_asarray((PyObject *)self);
}

static PyObject *tensor_repr(vqpy_tensor *self)
{
    PyObject *shape = shape_tuple(self);
    if (!shape)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("varq.Tensor(shape=%R, dtype=%s)", shape,
                                       dtypes[vq_tensor_dtype(self->t)].numpy);
    Py_DECREF(shape);
    return r;
}

/* ---- DLPack export ---- */

/* What a capsule's managed tensor points to: the Tensor object (one
 * reference, dropped by the deleter) and the shape and strides arrays. */
typedef struct {
    PyObject *owner;
    int64_t shape[VQ_MAX_DIMS];
    int64_t strides[VQ_MAX_DIMS];
} dl_ctx;

static void dl_ctx_free(dl_ctx *ctx)
{
    /* The consumer may call the deleter from any thread. */
    if (vqpy_no_gil_for_callback()) {
        free(ctx);
        return;
    }
    PyGILState_STATE g = vqpy_gil_ensure();
    Py_DECREF(ctx->owner);
    vqpy_gil_release(g);
    free(ctx);
}

static void dl_delete(DLManagedTensor *m)
{
    dl_ctx_free(m->manager_ctx);
    free(m);
}

static void dl_delete_versioned(DLManagedTensorVersioned *m)
{
    dl_ctx_free(m->manager_ctx);
    free(m);
}

/* A capsule no consumer took still owns its tensor. */
static void dl_capsule_free(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "dltensor")) {
        DLManagedTensor *m = PyCapsule_GetPointer(cap, "dltensor");
        m->deleter(m);
    } else if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        DLManagedTensorVersioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
        m->deleter(m);
    }
}

static void dl_fill(DLTensor *d, vqpy_tensor *self, void *data, dl_ctx *ctx)
{
    for (int i = 0; i < self->ndim; i++) {
        ctx->shape[i] = self->shape[i];
        ctx->strides[i] = self->strides[i] / (int64_t)vq_dtype_size(vq_tensor_dtype(self->t));
    }
    *d = (DLTensor){.data = data,
                    .device = {DL_CPU, 0},
                    .ndim = self->ndim,
                    .dtype = dtypes[vq_tensor_dtype(self->t)].dl,
                    .shape = ctx->shape,
                    .strides = ctx->strides,
                    .byte_offset = 0};
}

static PyObject *tensor_dlpack(vqpy_tensor *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO", names, &stream, &max_version, &dl_device,
                                     &copy))
        return NULL;
    if (stream != Py_None && !(PyLong_Check(stream) && PyLong_AsLong(stream) == -1)) {
        /* a CPU tensor has no stream; -1 is "no synchronization" */
        PyErr_SetString(PyExc_ValueError, "__dlpack__: stream must be None for a CPU tensor");
        return NULL;
    }
    if (copy == Py_True) {
        PyErr_SetString(PyExc_BufferError, "__dlpack__: copy=True is not supported");
        return NULL;
    }
    long major = 0;
    if (max_version != Py_None) {
        if (!PyTuple_Check(max_version) || PyTuple_GET_SIZE(max_version) < 1) {
            PyErr_SetString(PyExc_TypeError, "__dlpack__: max_version must be a tuple");
            return NULL;
        }
        major = PyLong_AsLong(PyTuple_GET_ITEM(max_version, 0));
        if (major == -1 && PyErr_Occurred())
            return NULL;
    }
    void *data = tensor_ready(self);
    if (!data)
        return NULL;
    dl_ctx *ctx = malloc(sizeof *ctx);
    if (!ctx)
        return PyErr_NoMemory();
    ctx->owner = Py_NewRef(self);
    PyObject *cap;
    if (major >= 1) {
        DLManagedTensorVersioned *m = calloc(1, sizeof *m);
        if (!m) {
            dl_ctx_free(ctx);
            return PyErr_NoMemory();
        }
        m->version = (DLPackVersion){1, 0};
        m->flags = self->readonly ? 1 : 0; /* DLPACK_FLAG_BITMASK_READ_ONLY */
        m->manager_ctx = ctx;
        m->deleter = dl_delete_versioned;
        dl_fill(&m->dl_tensor, self, data, ctx);
        cap = PyCapsule_New(m, "dltensor_versioned", dl_capsule_free);
        if (!cap)
            dl_delete_versioned(m);
    } else {
        DLManagedTensor *m = calloc(1, sizeof *m);
        if (!m) {
            dl_ctx_free(ctx);
            return PyErr_NoMemory();
        }
        m->manager_ctx = ctx;
        m->deleter = dl_delete;
        dl_fill(&m->dl_tensor, self, data, ctx);
        cap = PyCapsule_New(m, "dltensor", dl_capsule_free);
        if (!cap)
            dl_delete(m);
    }
    return cap;
}

static PyObject *tensor_dlpack_device(vqpy_tensor *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return Py_BuildValue("(ii)", DL_CPU, 0);
}

/* ---- wrapping other libraries' memory ---- */

/* A Py_buffer held for a wrapped tensor. */
static void buffer_release(void *user)
{
    Py_buffer *view = user;
    if (vqpy_no_gil_for_callback())
        return;
    PyGILState_STATE g = vqpy_gil_ensure();
    PyBuffer_Release(view);
    vqpy_gil_release(g);
    PyMem_RawFree(view);
}

/* Wraps the C-contiguous buffer obj exports; NULL without an exception
 * set when obj has no such buffer of a varq dtype (the caller may then
 * convert), with one when something else failed. */
static vq_tensor *wrap_buffer(PyObject *obj, bool *unsupported, bool *readonly)
{
    *unsupported = false;
    Py_buffer *view = PyMem_RawMalloc(sizeof *view);
    if (!view) {
        PyErr_NoMemory();
        return NULL;
    }
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyMem_RawFree(view);
        PyErr_Clear();
        *unsupported = true;
        return NULL;
    }
    vq_dtype dt;
    if (!vqpy_dtype_of_format(view->format, view->itemsize, &dt) || view->ndim > VQ_MAX_DIMS) {
        PyBuffer_Release(view);
        PyMem_RawFree(view);
        *unsupported = true;
        return NULL;
    }
    int64_t shape[VQ_MAX_DIMS];
    for (int i = 0; i < view->ndim; i++)
        shape[i] = view->shape ? view->shape[i] : view->len / view->itemsize;
    *readonly = view->readonly;
    vq_tensor *t;
    int rc = vq_tensor_wrap(&t, dt, view->ndim, shape, view->buf, buffer_release, view);
    if (rc < 0) {
        PyBuffer_Release(view);
        PyMem_RawFree(view);
        if (rc == VQ_EINVAL) { /* misaligned: a copy will do */
            *unsupported = true;
            return NULL;
        }
        vqpy_raise(rc);
        return NULL;
    }
    return t;
}

PyObject *vqpy_numpy_asarray(PyObject *obj)
{
    if (PyObject_TypeCheck(obj, &vqpy_tensor_type)) {
        /* numpy's C API, when there: no buffer export, no memoryview */
        void *data = tensor_ready((vqpy_tensor *)obj);
        if (!data)
            return NULL;
        PyObject *arr = vqpy_np_array_over(obj, data);
        if (arr || PyErr_Occurred())
            return arr;
    }
    PyObject *np = PyImport_ImportModule("numpy");
    if (!np)
        return NULL;
    PyObject *r = PyObject_CallMethod(np, "asarray", "O", obj);
    Py_DECREF(np);
    return r;
}

vq_tensor *vqpy_tensor_from_object(PyObject *obj, bool allow_convert)
{
    bool readonly;
    return vqpy_tensor_from_object_ro(obj, allow_convert, &readonly);
}

vq_tensor *vqpy_tensor_from_object_ro(PyObject *obj, bool allow_convert, bool *readonly)
{
    *readonly = false;
    if (PyObject_TypeCheck(obj, &vqpy_tensor_type)) {
        *readonly = ((vqpy_tensor *)obj)->readonly;
        return vq_tensor_retain(((vqpy_tensor *)obj)->t);
    }
    bool unsupported;
    vq_tensor *t = wrap_buffer(obj, &unsupported, readonly);
    if (t || !unsupported)
        return t;
    if (!allow_convert) {
        PyErr_Format(PyExc_TypeError, "a %.80s is not a C-contiguous array of a varq dtype",
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    PyObject *np = PyImport_ImportModule("numpy");
    if (!np)
        return NULL;
    PyObject *arr = PyObject_CallMethod(np, "ascontiguousarray", "O", obj);
    Py_DECREF(np);
    if (!arr)
        return NULL;
    t = wrap_buffer(arr, &unsupported, readonly);
    if (!t && unsupported) {
        PyObject *dt = PyObject_GetAttrString(arr, "dtype");
        PyErr_Format(PyExc_TypeError,
                     "a %.80s of dtype %R: varq's dtypes are float32, float64, int32, int64 "
                     "and bool",
                     Py_TYPE(obj)->tp_name, dt ? dt : Py_None);
        Py_XDECREF(dt);
    }
    Py_DECREF(arr);
    return t;
}

PyObject *vqpy_tensor_fn(PyObject *self, PyObject *obj)
{
    (void)self;
    if (PyObject_TypeCheck(obj, &vqpy_tensor_type))
        return Py_NewRef(obj);
    /* A torch tensor exports no buffer, but DLPack. */
    if (!PyObject_CheckBuffer(obj) && PyObject_HasAttrString(obj, "__dlpack__"))
        return vqpy_from_dlpack(NULL, obj);
    bool readonly;
    vq_tensor *t = vqpy_tensor_from_object_ro(obj, true, &readonly);
    PyObject *r = t ? vqpy_tensor_new(t, NULL) : NULL;
    if (r)
        ((vqpy_tensor *)r)->readonly = readonly;
    return r;
}

/* The DLPack managed tensor a wrapped tensor came from. */
typedef struct {
    void *managed;
    bool versioned;
} dl_import;

static void dl_import_release(void *user)
{
    dl_import *imp = user;
    if (vqpy_no_gil_for_callback()) {
        free(imp);
        return;
    }
    PyGILState_STATE g = vqpy_gil_ensure();
    if (imp->versioned) {
        DLManagedTensorVersioned *m = imp->managed;
        if (m->deleter)
            m->deleter(m);
    } else {
        DLManagedTensor *m = imp->managed;
        if (m->deleter)
            m->deleter(m);
    }
    vqpy_gil_release(g);
    free(imp);
}

PyObject *vqpy_from_dlpack(PyObject *self, PyObject *obj)
{
    (void)self;
    PyObject *cap;
    if (PyCapsule_CheckExact(obj)) {
        cap = Py_NewRef(obj);
    } else {
        PyObject *dev = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
        if (!dev)
            return NULL;
        int dev_type = -1, dev_id = 0;
        int ok = PyArg_ParseTuple(dev, "ii", &dev_type, &dev_id);
        Py_DECREF(dev);
        if (!ok)
            return NULL;
        if (dev_type != DL_CPU && dev_type != DL_CUDA_HOST)
            return vqpy_raise_msg(VQ_EINVAL,
                                  "from_dlpack: the tensor is on DLPack device type %d: only "
                                  "CPU memory can be shared (copy it to the CPU first)",
                                  dev_type);
        cap = PyObject_CallMethod(obj, "__dlpack__", NULL);
        if (!cap)
            return NULL;
    }
    bool versioned = PyCapsule_IsValid(cap, "dltensor_versioned");
    if (!versioned && !PyCapsule_IsValid(cap, "dltensor")) {
        Py_DECREF(cap);
        return vqpy_raise_msg(VQ_EINVAL, "from_dlpack: not an unused DLPack capsule");
    }
    void *managed = PyCapsule_GetPointer(cap, versioned ? "dltensor_versioned" : "dltensor");
    DLTensor *d = versioned ? &((DLManagedTensorVersioned *)managed)->dl_tensor
                            : &((DLManagedTensor *)managed)->dl_tensor;
    const char *why = NULL;
    vq_dtype dt = VQ_F32;
    if (d->device.device_type != DL_CPU && d->device.device_type != DL_CUDA_HOST)
        why = "its memory is not the CPU's";
    else if (!dtype_of_dl(d->dtype, &dt))
        why = "its dtype is none of varq's (float32, float64, int32, int64, bool)";
    else if (d->ndim < 0 || d->ndim > VQ_MAX_DIMS)
        why = "it has too many dimensions";
    int64_t expect = 1;
    for (int i = d->ndim - 1; !why && i >= 0; i--) {
        if (d->strides && d->shape[i] != 1 && d->strides[i] != expect)
            why = "it is not C-contiguous (make it contiguous first)";
        expect *= d->shape[i];
    }
    if (why) {
        Py_DECREF(cap);
        return vqpy_raise_msg(VQ_EINVAL, "from_dlpack: %s", why);
    }
    dl_import *imp = malloc(sizeof *imp);
    if (!imp) {
        Py_DECREF(cap);
        return PyErr_NoMemory();
    }
    *imp = (dl_import){managed, versioned};
    vq_tensor *t;
    int rc = vq_tensor_wrap(&t, dt, d->ndim, d->shape, (char *)d->data + d->byte_offset,
                            dl_import_release, imp);
    if (rc < 0) {
        free(imp);
        Py_DECREF(cap);
        return vqpy_raise(rc);
    }
    bool readonly = versioned && (((DLManagedTensorVersioned *)managed)->flags & 1);
    /* Consumed: the capsule no longer owns the managed tensor. */
    PyCapsule_SetName(cap, versioned ? "used_dltensor_versioned" : "used_dltensor");
    Py_DECREF(cap);
    PyObject *r = vqpy_tensor_new(t, NULL);
    if (r)
        ((vqpy_tensor *)r)->readonly = readonly;
    return r;
}

static PyObject *tensor_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)type;
    PyObject *obj;
    static char *names[] = {"data", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O", names, &obj))
        return NULL;
    return vqpy_tensor_fn(NULL, obj);
}

static PyGetSetDef tensor_getset[] = {
    {"shape", (getter)tensor_get_shape, NULL, "The shape, a tuple of ints.", NULL},
    {"dtype", (getter)tensor_get_dtype, NULL, "numpy's name of the dtype ('float32').", NULL},
    {"ndim", (getter)tensor_get_ndim, NULL, "The number of dimensions.", NULL},
    {"nbytes", (getter)tensor_get_nbytes, NULL, "The size of the bytes.", NULL},
    {"__array_interface__", (getter)tensor_get_array_interface, NULL,
     "numpy's array interface (version 3): the tensor's own bytes, after its ops are done.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef tensor_methods[] = {
    {"numpy", (PyCFunction)tensor_numpy, METH_NOARGS,
     "A numpy array sharing the tensor's memory (no copy); it keeps the tensor alive."},
    {"__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None): a DLPack "
     "capsule of the tensor's memory (versioned when max_version >= (1, 0))."},
    {"__dlpack_device__", (PyCFunction)tensor_dlpack_device, METH_NOARGS,
     "(1, 0): the CPU, in DLPack's device types."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject vqpy_tensor_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "varq.Tensor",
    .tp_basicsize = sizeof(vqpy_tensor),
    .tp_dealloc = (destructor)tensor_dealloc,
    .tp_repr = (reprfunc)tensor_repr,
    .tp_as_buffer = &tensor_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Tensor(data): a varq tensor (a dtype, a shape, contiguous row-major bytes). "
              "Tensor(x) is varq.tensor(x).",
    .tp_methods = tensor_methods,
    .tp_getset = tensor_getset,
    .tp_new = tensor_new,
};
