/* Tensors: creation, reference counting, accessors, the engine var each
 * tensor gets on first use with an engine, and waiting on it.
 *
 * A tensor is one pooled header plus a storage block from its device's
 * allocator. The header's refcount covers both: ops pushed on a tensor hold
 * a reference until they are done, and the last release frees the storage
 * through a write op on the tensor's var, so that ops a caller pushed
 * directly on that var (vq_tensor_var) finish first. */
#include "tensor_services.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Set by capture/ the first time it is used (see tensor_services.h). */
_Atomic(const vq__capture_hooks *) vq__capture = NULL;

static const struct {
    const char *name, *numpy;
    size_t size;
} dtypes[VQ_DTYPE_COUNT] = {
    [VQ_F32] = {"f32", "float32", 4},    [VQ_F64] = {"f64", "float64", 8},
    [VQ_I32] = {"i32", "int32", 4},      [VQ_I64] = {"i64", "int64", 8},
    [VQ_BOOL] = {"bool", "bool", 1},     [VQ_F16] = {"f16", "float16", 2},
    [VQ_BF16] = {"bf16", "bfloat16", 2}, [VQ_I8] = {"i8", "int8", 1},
    [VQ_U8] = {"u8", "uint8", 1},        [VQ_I16] = {"i16", "int16", 2},
    [VQ_U16] = {"u16", "uint16", 2},     [VQ_U32] = {"u32", "uint32", 4},
    [VQ_U64] = {"u64", "uint64", 8},
};

static bool dtype_ok(vq_dtype dt)
{
    return (unsigned)dt < VQ_DTYPE_COUNT;
}

VQ_API size_t vq_dtype_size(vq_dtype dt)
{
    return dtype_ok(dt) ? dtypes[dt].size : 0;
}

VQ_API const char *vq_dtype_name(vq_dtype dt)
{
    return dtype_ok(dt) ? dtypes[dt].name : "?";
}

VQ_API int vq_dtype_parse(const char *name, vq_dtype *out)
{
    if (!name || !out)
        return vq__fail(VQ_EINVAL, "vq_dtype_parse: NULL argument");
    for (int i = 0; i < VQ_DTYPE_COUNT; i++)
        if (!strcmp(name, dtypes[i].name) || !strcmp(name, dtypes[i].numpy)) {
            *out = (vq_dtype)i;
            return 0;
        }
    return vq__fail(VQ_EINVAL,
                    "unknown dtype \"%s\" (f32, f64, i32, i64, bool, f16, bf16, "
                    "i8, u8, i16, u16, u32, u64)",
                    name);
}

int64_t vq__numel(int ndim, const int64_t *shape)
{
    /* past 2^62 elements: INT64_MAX, unless a dim is 0 (multiplying
     * instead of dividing: this runs for every tensor made) */
    int64_t n = 1;
    bool zero = false, big = false;
    for (int i = 0; i < ndim; i++) {
        int64_t d = shape[i];
        if (d < 0)
            return -1;
        if (d == 0)
            zero = true;
        else if (!big && (__builtin_mul_overflow(n, d, &n) || n > ((int64_t)1 << 62)))
            big = true;
    }
    return zero ? 0 : big ? INT64_MAX : n;
}

char *vq__shape_str(char *buf, size_t size, int ndim, const int64_t *shape)
{
    size_t at = 0;
    if (size == 0)
        return buf;
    buf[0] = '\0';
    at += (size_t)snprintf(buf + at, size - at, "[");
    for (int i = 0; i < ndim && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, i ? ",%lld" : "%lld", (long long)shape[i]);
    if (at < size)
        snprintf(buf + at, size - at, "]");
    return buf;
}

/* Checks a tensor's dtype and shape; *numel: its elements (may be NULL). */
static int check_shape_numel(const char *fn, vq_dtype dt, int ndim, const int64_t *shape,
                             int64_t *numel)
{
    /* the common case in one pass; the checks below say what is wrong */
    if (dtype_ok(dt) && ndim >= 0 && ndim <= VQ_MAX_DIMS && (ndim == 0 || shape)) {
        int64_t n = vq__numel(ndim, shape);
        if (n >= 0 && n != INT64_MAX && (uint64_t)n <= SIZE_MAX / 8 / dtypes[dt].size) {
            if (numel)
                *numel = n;
            return 0;
        }
    }
    if (!dtype_ok(dt))
        return vq__fail(VQ_EINVAL, "%s: dtype %d is not a vq_dtype", fn, (int)dt);
    if (ndim < 0 || ndim > VQ_MAX_DIMS)
        return vq__fail(VQ_EINVAL, "%s: ndim %d is outside [0, %d]", fn, ndim, VQ_MAX_DIMS);
    if (ndim > 0 && !shape)
        return vq__fail(VQ_EINVAL, "%s: shape is NULL", fn);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return vq__fail(VQ_EINVAL, "%s: dim %d is %lld", fn, i, (long long)shape[i]);
    int64_t n = vq__numel(ndim, shape);
    if (n == INT64_MAX || (uint64_t)n > SIZE_MAX / 8 / vq_dtype_size(dt))
        return vq__fail(VQ_ENOMEM, "%s: shape too large", fn);
    if (numel)
        *numel = n;
    return 0;
}

static int check_shape(const char *fn, vq_dtype dt, int ndim, const int64_t *shape)
{
    return check_shape_numel(fn, dt, ndim, shape, NULL);
}

/* Tensor headers come from the engine's small-object pool
 * (vq__obj_alloc): executors and vq_op_run make one per op, usually in
 * one thread (the caller, a worker), while the last release happens in
 * another (the worker that ran the last op reading it), so a per-thread
 * cache would be empty where headers are made and full where they die;
 * the pool's depot moves them back in batches. */
_Static_assert(sizeof(vq_tensor) <= VQ__OBJ_SIZE, "a tensor header fits a pooled object");

static void header_put(vq_tensor *t)
{
    vq__obj_free(t);
}

/* Every field of a new header but data: one reference, no var, engine,
 * failure, capture or stream uses. dt was checked. */
static void header_init(vq_tensor *t, vq_dtype dt, int ndim, const int64_t *shape, int64_t numel,
                        vq_ctx dev, vq__allocator *alloc)
{
    atomic_init(&t->refs, 1);
    t->dtype = dt;
    t->ndim = ndim;
    for (int i = 0; i < VQ_MAX_DIMS; i++)
        t->shape[i] = i < ndim ? shape[i] : 0;
    t->numel = numel;
    t->nbytes = (size_t)numel * dtypes[dt].size;
    t->dev = dev;
    t->alloc = alloc;
    atomic_init(&t->var, NULL);
    atomic_init(&t->engine, NULL);
    atomic_init(&t->fail_msg, NULL);
    atomic_init(&t->capture, NULL);
    t->capture_slot = 0;
    atomic_init(&t->uses, NULL);
}

static int tensor_make(vq_tensor **out, vq_ctx dev, vq_dtype dt, int ndim, const int64_t *shape,
                       const char *fn, void *stream)
{
    int64_t numel = 0; /* set by check_shape_numel on success */
    int rc = check_shape_numel(fn, dt, ndim, shape, &numel);
    if (rc < 0)
        return rc;
    vq__allocator *alloc = NULL;
    if (dev.kind == VQ_DEV_GPU) {
        if ((rc = vq__gpu_allocator(dev.id, &alloc)) < 0)
            return vq__fail_prefixed(rc, "%s: GPU %d", fn, dev.id);
    } else if (dev.kind != VQ_DEV_CPU || dev.id != 0) {
        return vq__fail(VQ_EINVAL, "%s: device {%d, %d} is not CPU 0 or a GPU", fn, dev.kind,
                        dev.id);
    } else {
        alloc = vq__allocator_of(dev);
    }
    /* Every field is set here (no memset of the header: a rep stos on
     * the path of every op's output). */
    vq_tensor *t = vq__obj_alloc();
    if (!t)
        return vq__fail(VQ_ENOMEM, "%s: out of memory", fn);
    header_init(t, dt, ndim, shape, numel, dev, alloc);
    t->data = t->alloc->alloc(t->alloc, t->nbytes, stream);
    if (!t->data) {
        size_t bytes = t->nbytes;
        header_put(t);
        return vq__fail(VQ_ENOMEM, "%s: out of memory for %zu bytes%s", fn, bytes,
                        dev.kind == VQ_DEV_GPU ? " on the GPU" : "");
    }
    *out = t;
    return 0;
}

int vq__tensor_empty_on(vq_tensor **out, vq_ctx dev, vq_dtype dt, int ndim, const int64_t *shape,
                        const char *fn)
{
    return tensor_make(out, dev, dt, ndim, shape, fn, NULL);
}

int vq__tensor_empty_at(vq_tensor **out, vq_ctx dev, vq_dtype dt, int ndim, const int64_t *shape,
                        void *stream)
{
    return tensor_make(out, dev, dt, ndim, shape, "vq_tensor_new", stream);
}

int vq__tensor_empty(vq_tensor **out, vq_dtype dt, int ndim, const int64_t *shape)
{
    return vq__tensor_empty_on(out, (vq_ctx){VQ_DEV_CPU, 0}, dt, ndim, shape, "vq_tensor_new");
}

VQ_API int vq_tensor_new_on(vq_tensor **out, vq_ctx dev, vq_dtype dt, int ndim,
                            const int64_t *shape)
{
    if (!out)
        return vq__fail(VQ_EINVAL, "vq_tensor_new_on: out is NULL");
    int rc = vq__tensor_empty_on(out, dev, dt, ndim, shape, "vq_tensor_new_on");
    if (rc == 0 && dev.kind == VQ_DEV_CPU)
        memset((*out)->data, 0, (*out)->nbytes);
    return rc;
}

VQ_API vq_ctx vq_tensor_device(const vq_tensor *t)
{
    return t->dev;
}

VQ_API int vq_tensor_new(vq_tensor **out, vq_dtype dt, int ndim, const int64_t *shape)
{
    if (!out)
        return vq__fail(VQ_EINVAL, "vq_tensor_new: out is NULL");
    int rc = vq__tensor_empty(out, dt, ndim, shape);
    if (rc == 0)
        memset((*out)->data, 0, (*out)->nbytes);
    return rc;
}

VQ_API int vq_tensor_from(vq_tensor **out, vq_dtype dt, int ndim, const int64_t *shape,
                          const void *data)
{
    if (!out)
        return vq__fail(VQ_EINVAL, "vq_tensor_from: out is NULL");
    int rc = check_shape("vq_tensor_from", dt, ndim, shape);
    if (rc < 0)
        return rc;
    size_t bytes = (size_t)vq__numel(ndim, shape) * vq_dtype_size(dt);
    if (bytes && !data)
        return vq__fail(VQ_EINVAL, "vq_tensor_from: data is NULL");
    if (dt == VQ_BOOL)
        for (size_t i = 0; i < bytes; i++)
            if (((const unsigned char *)data)[i] > 1)
                return vq__fail(VQ_EINVAL, "vq_tensor_from: bool element %zu is %u, not 0 or 1", i,
                                ((const unsigned char *)data)[i]);
    rc = vq__tensor_empty(out, dt, ndim, shape);
    if (rc == 0 && bytes)
        memcpy((*out)->data, data, bytes);
    return rc;
}

/* A wrapped tensor's "allocator" is its own: the header's alloc points at
 * one of these, whose free hands the memory back to its owner (release)
 * and frees itself. Every path that frees storage goes through
 * t->alloc->free, so none of them needs to know the tensor is wrapped. */
typedef struct wrap_owner {
    vq__allocator base; /* first: t->alloc points here */
    void (*release)(void *user);
    void *user;
} wrap_owner;

static void wrap_free(vq__allocator *a, void *p, size_t bytes, void *stream)
{
    (void)p;
    (void)bytes;
    (void)stream;
    wrap_owner *w = (wrap_owner *)a;
    if (w->release)
        w->release(w->user);
    free(w);
}

VQ_API int vq_tensor_wrap(vq_tensor **out, vq_dtype dt, int ndim, const int64_t *shape, void *data,
                          void (*release)(void *user), void *user)
{
    if (!out)
        return vq__fail(VQ_EINVAL, "vq_tensor_wrap: out is NULL");
    *out = NULL;
    int64_t numel = 0; /* set by check_shape_numel on success */
    int rc = check_shape_numel("vq_tensor_wrap", dt, ndim, shape, &numel);
    if (rc < 0)
        return rc;
    size_t size = dtypes[dt].size;
    if (!data && numel > 0)
        return vq__fail(VQ_EINVAL, "vq_tensor_wrap: data is NULL");
    if ((uintptr_t)data % size)
        return vq__fail(VQ_EINVAL,
                        "vq_tensor_wrap: data %p is not aligned to the %zu bytes of a %s element",
                        data, size, dtypes[dt].name);
    wrap_owner *w = malloc(sizeof *w);
    vq_tensor *t = w ? vq__obj_alloc() : NULL;
    if (!t) {
        free(w);
        return vq__fail(VQ_ENOMEM, "vq_tensor_wrap: out of memory");
    }
    *w = (wrap_owner){.base = {.free = wrap_free}, .release = release, .user = user};
    header_init(t, dt, ndim, shape, numel, (vq_ctx){VQ_DEV_CPU, 0}, &w->base);
    /* never NULL: tensor_destroy frees storage only when data is set */
    t->data = data ? data : (void *)w;
    *out = t;
    return 0;
}

VQ_API vq_tensor *vq_tensor_retain(vq_tensor *t)
{
    if (t)
        atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
    return t;
}

static void tensor_destroy(vq_tensor *t)
{
    /* A GPU tensor's storage went in its free op (gpu_free_run) unless that
     * op was skipped; then it goes on the allocator's own stream. */
    if (atomic_load_explicit(&t->uses, memory_order_relaxed))
        vq__gpu_uses_settle(t, NULL); /* after the last reference: no pusher left */
    if (t->data)
        t->alloc->free(t->alloc, t->data, t->nbytes, NULL);
    free(atomic_load(&t->fail_msg));
    header_put(t);
}

static int no_work(void *arg, const vq_exec_ctx *x)
{
    (void)arg;
    (void)x;
    return 0;
}

/* The free op of a GPU tensor, on a stream of its device: the storage is
 * freed in stream order after the work of the ops on its var (the engine
 * made the stream wait for their event). */
static int gpu_free_run(void *arg, const vq_exec_ctx *x)
{
    vq_tensor *t = arg;
    (void)x;
    if (atomic_load_explicit(&t->uses, memory_order_relaxed))
        vq__gpu_uses_settle(t, vq__gpu_op_stream());
    t->alloc->free(t->alloc, t->data, t->nbytes, vq__gpu_op_stream());
    t->data = NULL;
    return 0;
}

static void tensor_destroy_arg(void *arg)
{
    tensor_destroy(arg);
}

static void last_reference(vq_tensor *t);

VQ_API void vq_tensor_release(vq_tensor *t)
{
    if (!t)
        return;
    /* acq_rel: the last release sees every write made under the others.
     * A count of 1 is the caller's own reference: nobody else can change
     * it, so no read-modify-write (acquire: as the others' releases). */
    if (atomic_load_explicit(&t->refs, memory_order_acquire) != 1 &&
        atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1)
        return;
    last_reference(t);
}

/* Frees t, whose last reference is gone: at once without a var or with an
 * idle one, else after every op on its var. */
static void last_reference(vq_tensor *t)
{
    vq_var *v = atomic_load_explicit(&t->var, memory_order_acquire);
    if (!v) {
        tensor_destroy(t);
        return;
    }
    vq_engine *e = atomic_load_explicit(&t->engine, memory_order_acquire);
    /* A CPU tensor whose var has nothing queued goes now, var and all. */
    if (t->dev.kind == VQ_DEV_CPU && vq__var_free_idle(e, v)) {
        tensor_destroy(t);
        return;
    }
    /* Else the storage goes after every op on the var, including ones pushed
     * through vq_tensor_var that hold no reference; then the var itself. */
    vq_var *w[1] = {v};
    /* arg_free runs whether the op runs or is skipped because an earlier
     * writer failed. */
    vq_task task = {.fn = no_work,
                    .arg = t,
                    .arg_free = tensor_destroy_arg,
                    .writes = w,
                    .nwrites = 1,
                    .name = "tensor_free"};
    if (t->dev.kind == VQ_DEV_GPU) {
        task.fn = gpu_free_run;
        task.ctx = t->dev;
    }
    if (vq_push(e, &task) < 0) {
        /* Only out of memory: fall back to waiting here. */
        vq_wait_var(e, v);
        tensor_destroy(t);
    }
    vq_var_free(e, v);
}

void vq__tensor_release_on(vq_tensor *t, void *stream)
{
    if (!t)
        return;
    if (atomic_load_explicit(&t->refs, memory_order_acquire) != 1) { /* as vq_tensor_release */
        /* Shared: the work this reference's holder enqueued on stream
         * must be done before whichever stream frees the storage. Pushed
         * before the decrement, which publishes it to the last one. */
        if (stream && t->dev.kind == VQ_DEV_GPU)
            vq__gpu_use_note(t, stream);
        if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1)
            return;
    }
    if (stream && !atomic_load_explicit(&t->var, memory_order_acquire)) {
        if (atomic_load_explicit(&t->uses, memory_order_relaxed))
            vq__gpu_uses_settle(t, stream);
        t->alloc->free(t->alloc, t->data, t->nbytes, stream);
        t->data = NULL;
    }
    last_reference(t);
}

VQ_API vq_dtype vq_tensor_dtype(const vq_tensor *t)
{
    return t->dtype;
}

VQ_API int vq_tensor_ndim(const vq_tensor *t)
{
    return t->ndim;
}

VQ_API const int64_t *vq_tensor_shape(const vq_tensor *t)
{
    return t->shape;
}

VQ_API int64_t vq_tensor_numel(const vq_tensor *t)
{
    return t->numel;
}

VQ_API size_t vq_tensor_nbytes(const vq_tensor *t)
{
    return t->nbytes;
}

VQ_API void *vq_tensor_data(vq_tensor *t)
{
    vq__capture_cut(t, VQ__CUT_HOST_READ); /* recorded calls writing t are pushed */
    return t->data;
}

VQ_API vq_var *vq_tensor_var(vq_tensor *t, vq_engine *e)
{
    if (!t || !e) {
        vq__fail(VQ_EINVAL, "vq_tensor_var: NULL argument");
        return NULL;
    }
    vq_var *v = NULL;
    int rc = vq__tensor_var_cut(t, e, &v);
    if (rc < 0)
        vq__fail_prefixed(rc, "vq_tensor_var");
    return v;
}

int vq__tensor_var_cut(vq_tensor *t, vq_engine *e, vq_var **out)
{
    /* The caller will push on the var: recorded calls on t go first. */
    vq__capture_cut(t, VQ__CUT_VAR);
    return vq__tensor_var(t, e, out);
}

int vq__tensor_var(vq_tensor *t, vq_engine *e, vq_var **out)
{
    /* hot path: a tensor used with e before has its var (no read-modify-write) */
    vq_var *v = atomic_load_explicit(&t->var, memory_order_acquire);
    if (v && atomic_load_explicit(&t->engine, memory_order_relaxed) == e) {
        *out = v;
        return 0;
    }
    vq_engine *owner = NULL;
    if (!atomic_compare_exchange_strong(&t->engine, &owner, e) && owner != e)
        return vq__fail(VQ_EINVAL, "the tensor is already used with another engine");
    v = atomic_load_explicit(&t->var, memory_order_acquire);
    if (!v) {
        vq_var *mine = vq_var_new(e, "tensor");
        if (!mine)
            return vq__fail(VQ_ENOMEM, "out of memory for the tensor's engine var");
        if (atomic_compare_exchange_strong(&t->var, &v, mine))
            v = mine;
        else
            vq_var_free(e, mine); /* another thread won; v is its var */
    }
    *out = v;
    return 0;
}

VQ_API int vq_tensor_wait(vq_tensor *t)
{
    if (!t)
        return vq__fail(VQ_EINVAL, "vq_tensor_wait: tensor is NULL");
    vq__capture_cut(t, VQ__CUT_HOST_READ); /* recorded calls on t are pushed first */
    vq_var *v = atomic_load_explicit(&t->var, memory_order_acquire);
    if (!v)
        return 0;
    struct vq__fail_note *note;
    int err = vq__wait_var_note(atomic_load(&t->engine), v, &note);
    if (err == 0 || err == VQ_EDEADLK)
        return err;
    /* The failed op stored fail_msg before completing; the wait ordered us
     * after it. Two waiters race for it: one gets the message. A tensor
     * that an op skipped for the failure has none: the note its var
     * carried names the op that failed first. */
    char *msg = atomic_exchange(&t->fail_msg, NULL);
    char last[256];
    if (msg) {
        vq__fail(err, "%s", msg);
        free(msg);
    } else if (note) {
        vq__fail(err, "an op this tensor depends on failed: %s", vq__fail_note_text(note));
    } else if (t->dev.kind == VQ_DEV_GPU && vq__gpu_last_failure(t->dev.id, last, sizeof last)) {
        /* Failures in stream work carry no tensor: name the device's last. */
        vq__fail(err,
                 "an op this tensor depends on failed (%s) on GPU %d; the last kernel that "
                 "failed there: %s",
                 vq_strerror(err), t->dev.id, last);
    } else {
        vq__fail(err, "an op this tensor depends on failed (%s)", vq_strerror(err));
    }
    vq__fail_note_unref(note);
    return err;
}
