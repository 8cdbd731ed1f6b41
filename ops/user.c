/* Ops registered by library users (op_register.h): vq_op_register checks a
 * vq_op_def, copies it into one block that lives for the rest of the
 * process, and adds an internal definition (vq__op_def) to the registry
 * whose callbacks are the trampolines below. Each trampoline turns varq's
 * internal view of a call into the public one, calls the user's function,
 * and words a failure as every op's failure is worded ("name: ...").
 *
 * Also here: the completion of async kernels (vq_op_done_finish and a
 * waiting run for calls outside any engine) and the gradient maker's
 * vq_op_grad_emit / vq_op_grad_temp. */
#include "ops_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct vq__user_op {
    vq_op_def def;      /* the caller's, its strings pointing at our copies */
    vq__op_def op;      /* what the registry holds */
    const char **in_slots, **out_slots;
    vq__attr_spec *attrs;
};

static const vq_op_def *user_def(const vq__op_def *d)
{
    return &d->user->def;
}

/* A user callback failed with rc: its message (set since gen) gets the
 * op's name in front, unless it has it already; no message becomes one
 * saying which callback failed. A positive rc is the callback's bug. */
static int user_failed(const vq__op_def *d, int rc, const char *what, unsigned gen)
{
    if (rc > 0)
        return vq__fail(VQ_EINVAL, "%s: %s returned %d (not 0 or a negative error)", d->type,
                        what, rc);
    const char *msg = vq_errmsg();
    size_t n = strlen(d->type);
    if (vq__errmsg_gen() == gen || !*msg)
        return vq__fail(rc, "%s: %s failed: %s", d->type, what, vq_strerror(rc));
    if (!strncmp(msg, d->type, n) && msg[n] == ':')
        return rc;
    char copy[256];
    snprintf(copy, sizeof copy, "%s", msg);
    return vq__fail(rc, "%s: %s", d->type, copy);
}

/* ---- trampolines ---- */

static int user_infer(vq__infer *c)
{
    const vq_op_def *u = user_def(c->def);
    vq_op_infer_call uc = {.op = c->def->type, .attrs = c->attrs, .nattrs = c->nattrs,
                           .nin = c->nin, .in = c->in, .nout = c->nout, .out = c->out,
                           .params = c->params, .user = u->user};
    unsigned gen = vq__errmsg_gen();
    int rc = u->infer(&uc);
    if (rc != 0)
        return user_failed(c->def, rc, "infer", gen);
    for (int j = 0; j < c->nout; j++) {
        const vq__meta *m = &c->out[j];
        bool ok = (unsigned)m->dtype < VQ_DTYPE_COUNT && m->ndim >= 0 && m->ndim <= VQ_MAX_DIMS;
        for (int k = 0; ok && k < m->ndim; k++)
            ok = m->shape[k] >= -1;
        if (!ok)
            return vq__fail(VQ_EINVAL, "%s: infer left output %s (slot %d) without a valid "
                                       "dtype and shape",
                            c->def->type, vq__op_out_slot(c->def, j), j);
    }
    return 0;
}

/* The public view of a kernel call. The device: the engine's context when
 * there is one, else the tensors' (the emulated GPU backend's stream work
 * has no context, but its tensors are on the GPU). */
static vq_op_kernel_call kernel_call(const vq__kcall *k)
{
    vq_ctx ctx = {VQ_DEV_CPU, 0};
    if (k->x)
        ctx = k->x->ctx;
    else if (k->nin + k->nout > 0)
        ctx = (k->nin ? k->in[0] : k->out[0])->dev;
    return (vq_op_kernel_call){.op = k->def->type, .params = k->params, .in = k->in,
                               .nin = k->nin, .out = k->out, .nout = k->nout, .ctx = ctx,
                               .stream = NULL, .user = user_def(k->def)->user};
}

static int user_cpu(const vq__kcall *k)
{
    vq_op_kernel_call uc = kernel_call(k);
    unsigned gen = vq__errmsg_gen();
    int rc = user_def(k->def)->cpu(&uc);
    return rc ? user_failed(k->def, rc, "CPU kernel", gen) : 0;
}

static int user_gpu(const vq__kcall *k)
{
    if (!k->x || k->x->ctx.kind != VQ_DEV_GPU || !k->x->stream)
        return vq__op_fail(k->def, "a GPU kernel needs an engine (the op's stream)");
    vq_op_kernel_call uc = kernel_call(k);
    uc.stream = k->x->stream;
    unsigned gen = vq__errmsg_gen();
    int rc = user_def(k->def)->gpu(&uc);
    return rc ? user_failed(k->def, rc, "GPU kernel", gen) : 0;
}

/* An async kernel's call: the public view must outlive the call (the user
 * may read it until vq_op_done_finish), so it lives here, with the handle
 * the user finishes, which finishes the caller's. */
struct async_call {
    vq_op_done done;
    vq_op_done *caller;
    const vq__op_def *def;
    vq_op_kernel_call call;
};

static void async_finish(vq_op_done *d, int err)
{
    struct async_call *a = (struct async_call *)d;
    vq_op_done *caller = a->caller;
    /* The finishing thread may be any: a message it holds is taken as the
     * kernel's (a gen of that thread before the kernel is not known). */
    if (err)
        err = user_failed(a->def, err, "async kernel", vq__errmsg_gen() - 1);
    free(a);
    caller->finish(caller, err);
}

static void user_async(const vq__kcall *k, vq_op_done *done)
{
    struct async_call *a = vq__malloc(sizeof *a);
    if (!a) {
        done->finish(done, vq__fail(VQ_ENOMEM, "%s: out of memory", k->def->type));
        return;
    }
    *a = (struct async_call){.done = {.finish = async_finish}, .caller = done, .def = k->def,
                             .call = kernel_call(k)};
    user_def(k->def)->cpu_async(&a->call, &a->done);
}

/* The context of the gradient maker running in this thread, NULL outside
 * one. A g is used only if it is this very pointer: a context kept from an
 * earlier call points into a stack frame that is gone (and so does its
 * impl), so it is compared by address and never read. */
static _Thread_local const vq_op_grad_call *grad_running;

static int user_grad(const vq__grad *g)
{
    const vq_op_def *u = user_def(g->def);
    vq_op_grad_call uc = {.op = g->def->type, .in = g->in, .nin = g->nin, .out = g->out,
                          .nout = g->nout, .din = g->din, .dout = g->dout, .attrs = g->attrs,
                          .nattrs = g->nattrs, .user = u->user, .impl = g};
    unsigned gen = vq__errmsg_gen();
    /* saved and restored: a maker may differentiate another program */
    const vq_op_grad_call *outer = grad_running;
    grad_running = &uc;
    int rc = u->grad(&uc);
    grad_running = outer;
    return rc ? user_failed(g->def, rc, "gradient maker", gen) : 0;
}

static int grad_context_check(const vq_op_grad_call *g, const char *who)
{
    if (!g)
        return vq__fail(VQ_EINVAL, "%s: g is NULL", who);
    if (g != grad_running)
        return vq__fail(VQ_EINVAL,
                        "%s: g is not the context of the gradient maker running in "
                        "this thread (one kept from an earlier call, a copy, or "
                        "another thread's)",
                        who);
    return 0;
}

VQ_API int vq_op_grad_emit(const vq_op_grad_call *g, const char *type, const char *const *in,
                           int nin, const char *const *out, int nout, const vq_attr *attrs,
                           int nattrs)
{
    int rc = grad_context_check(g, "vq_op_grad_emit");
    return rc ? rc : vq__emit(g->impl, type, in, nin, out, nout, attrs, nattrs);
}

VQ_API const char *vq_op_grad_temp(const vq_op_grad_call *g)
{
    if (grad_context_check(g, "vq_op_grad_temp") < 0)
        return NULL;
    const vq__grad *ig = g->impl;
    return ig->temp(ig->user);
}

/* ---- async completion ---- */

VQ_API void vq_op_done_finish(vq_op_done *done, int err)
{
    if (done)
        done->finish(done, err);
}

/* A run outside any engine waits here for the kernel's finish. */
struct waiting {
    vq_op_done done;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool finished;
    int err;
    char msg[256];
};

static void waiting_finish(vq_op_done *d, int err)
{
    struct waiting *w = (struct waiting *)d;
    pthread_mutex_lock(&w->lock);
    w->err = err;
    if (err)
        snprintf(w->msg, sizeof w->msg, "%s", vq_errmsg());
    w->finished = true;
    pthread_cond_signal(&w->cond);
    /* w lives on the waiter's stack: it may return as soon as we unlock */
    pthread_mutex_unlock(&w->lock);
}

int vq__kernel_run_waiting(const vq__kcall *k)
{
    struct waiting w = {.done = {.finish = waiting_finish}};
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    k->def->kernel_async(k, &w.done);
    pthread_mutex_lock(&w.lock);
    while (!w.finished)
        pthread_cond_wait(&w.cond, &w.lock);
    pthread_mutex_unlock(&w.lock);
    pthread_mutex_destroy(&w.lock);
    pthread_cond_destroy(&w.cond);
    return w.err ? vq__fail(w.err, "%s", w.msg) : 0;
}

/* ---- registration ---- */

static bool name_ok(const char *s)
{
    if (!s || !*s || strlen(s) > 63)
        return false;
    for (; *s; s++)
        if (!(('a' <= *s && *s <= 'z') || ('A' <= *s && *s <= 'Z') || ('0' <= *s && *s <= '9') ||
              *s == '_' || *s == '.'))
            return false;
    return true;
}

static int slots_check(const char *op, const char *dir, const char *const *slots, int n)
{
    if (n < 0 || n > VQ__MAX_SLOTS || (n && !slots))
        return vq__fail(VQ_EINVAL, "vq_op_register: %s: %d %s slots", op, n, dir);
    for (int i = 0; i < n; i++) {
        if (!name_ok(slots[i]))
            return vq__fail(VQ_EINVAL, "vq_op_register: %s: %s slot %d has no valid name", op,
                            dir, i);
        for (int j = 0; j < i; j++)
            if (!strcmp(slots[i], slots[j]))
                return vq__fail(VQ_EINVAL, "vq_op_register: %s: %s slot %s is named twice", op,
                                dir, slots[i]);
    }
    return 0;
}

static int def_check(const vq_op_def *u)
{
    if (!u)
        return vq__fail(VQ_EINVAL, "vq_op_register: def is NULL");
    if (!name_ok(u->name))
        return vq__fail(VQ_EINVAL, "vq_op_register: bad op name \"%s\" (1 to 63 letters, "
                                   "digits, '_' or '.')",
                        u->name ? u->name : "(null)");
    const char *op = u->name;
    int rc = slots_check(op, "input", u->inputs, u->ninputs);
    if (rc == 0)
        rc = slots_check(op, "output", u->outputs, u->noutputs);
    if (rc < 0)
        return rc;
    if (u->noutputs < 1)
        return vq__fail(VQ_EINVAL, "vq_op_register: %s: an op needs at least one output", op);
    const unsigned known = VQ_OP_VARIADIC_IN | VQ_OP_VARIADIC_OUT | VQ_OP_INPLACE_OK |
                           VQ_OP_OPTIONAL_IN | VQ_OP_OPTIONAL_OUT;
    if (u->flags & ~known)
        return vq__fail(VQ_EINVAL, "vq_op_register: %s: unknown flags 0x%x", op,
                        u->flags & ~known);
    if ((u->flags & (VQ_OP_VARIADIC_IN | VQ_OP_OPTIONAL_IN)) == (VQ_OP_VARIADIC_IN | VQ_OP_OPTIONAL_IN) ||
        (u->flags & (VQ_OP_VARIADIC_OUT | VQ_OP_OPTIONAL_OUT)) ==
            (VQ_OP_VARIADIC_OUT | VQ_OP_OPTIONAL_OUT))
        return vq__fail(VQ_EINVAL, "vq_op_register: %s: a last slot is variadic or optional, "
                                   "not both",
                        op);
    if ((u->flags & (VQ_OP_VARIADIC_IN | VQ_OP_OPTIONAL_IN)) && u->ninputs < 1)
        return vq__fail(VQ_EINVAL, "vq_op_register: %s: a variadic or optional input needs an "
                                   "input slot",
                        op);
    if (u->flags & VQ_OP_OPTIONAL_OUT && u->noutputs < 2)
        return vq__fail(VQ_EINVAL, "vq_op_register: %s: an optional output needs another "
                                   "output slot before it",
                        op);
    if (u->nattrs < 0 || u->nattrs > 64 || (u->nattrs && !u->attrs))
        return vq__fail(VQ_EINVAL, "vq_op_register: %s: %d attributes", op, u->nattrs);
    for (int i = 0; i < u->nattrs; i++) {
        const vq_op_attr_spec *a = &u->attrs[i];
        if (!name_ok(a->name))
            return vq__fail(VQ_EINVAL, "vq_op_register: %s: attribute %d has no valid name", op,
                            i);
        if (a->type < VQ_ATTR_INT || a->type > VQ_ATTR_BOOLS)
            return vq__fail(VQ_EINVAL, "vq_op_register: %s: attribute %s: type %d is no "
                                       "vq_attr_type",
                            op, a->name, (int)a->type);
        for (int j = 0; j < i; j++)
            if (!strcmp(a->name, u->attrs[j].name))
                return vq__fail(VQ_EINVAL, "vq_op_register: %s: attribute %s is named twice", op,
                                a->name);
    }
    if (u->params_size > VQ_OP_MAX_PARAMS)
        return vq__fail(VQ_EINVAL, "vq_op_register: %s: params_size %zu is past %d", op,
                        u->params_size, VQ_OP_MAX_PARAMS);
    if (!u->infer)
        return vq__fail(VQ_EINVAL, "vq_op_register: %s: no infer callback", op);
    if (!u->cpu && !u->gpu && !u->cpu_async)
        return vq__fail(VQ_EINVAL, "vq_op_register: %s: no kernel (cpu, gpu or cpu_async)", op);
    return 0;
}

_Static_assert((unsigned)VQ_OP_VARIADIC_IN == (unsigned)VQ__VARIADIC_IN &&
                   (unsigned)VQ_OP_VARIADIC_OUT == (unsigned)VQ__VARIADIC_OUT &&
                   (unsigned)VQ_OP_INPLACE_OK == (unsigned)VQ__INPLACE_OK &&
                   (unsigned)VQ_OP_OPTIONAL_IN == (unsigned)VQ__OPTIONAL_IN &&
                   (unsigned)VQ_OP_OPTIONAL_OUT == (unsigned)VQ__OPTIONAL_OUT,
               "op_register.h's flags are the registry's");
_Static_assert(VQ_OP_MAX_PARAMS == VQ__MAX_PARAMS && VQ_OP_MAX_SLOTS == VQ__MAX_SLOTS,
               "op_register.h's limits are the registry's");

static char *dup_str(const char *s)
{
    return s ? vq__strdup(s) : NULL;
}

static void user_op_free(struct vq__user_op *o)
{
    if (!o)
        return;
    free((char *)o->def.name);
    for (int i = 0; o->in_slots && i < o->def.ninputs; i++)
        free((char *)o->in_slots[i]);
    for (int i = 0; o->out_slots && i < o->def.noutputs; i++)
        free((char *)o->out_slots[i]);
    for (int i = 0; o->attrs && i < o->def.nattrs; i++) {
        free((char *)o->attrs[i].name);
        free((char *)o->attrs[i].dflt);
    }
    free(o->in_slots);
    free(o->out_slots);
    free(o->attrs);
    free(o);
}

/* A copy of u's strings: names, slots, the attribute schema. */
static struct vq__user_op *user_op_copy(const vq_op_def *u)
{
    struct vq__user_op *o = vq__calloc(1, sizeof *o);
    if (!o)
        return NULL;
    o->def = *u;
    o->def.name = NULL;
    o->in_slots = vq__calloc((size_t)u->ninputs + 1, sizeof *o->in_slots);
    o->out_slots = vq__calloc((size_t)u->noutputs + 1, sizeof *o->out_slots);
    o->attrs = vq__calloc((size_t)u->nattrs + 1, sizeof *o->attrs);
    bool ok = o->in_slots && o->out_slots && o->attrs && (o->def.name = dup_str(u->name));
    for (int i = 0; ok && i < u->ninputs; i++)
        ok = (o->in_slots[i] = dup_str(u->inputs[i])) != NULL;
    for (int i = 0; ok && i < u->noutputs; i++)
        ok = (o->out_slots[i] = dup_str(u->outputs[i])) != NULL;
    for (int i = 0; ok && i < u->nattrs; i++) {
        const vq_op_attr_spec *a = &u->attrs[i];
        o->attrs[i] = (vq__attr_spec){.type = a->type, .required = a->required};
        ok = (o->attrs[i].name = dup_str(a->name)) && (!a->dflt || (o->attrs[i].dflt =
                                                                        dup_str(a->dflt)));
    }
    if (!ok) {
        user_op_free(o);
        return NULL;
    }
    return o;
}

VQ_API int vq_op_register(const vq_op_def *def)
{
    int rc = def_check(def);
    if (rc < 0)
        return rc;
    struct vq__user_op *o = user_op_copy(def);
    if (!o)
        return vq__fail(VQ_ENOMEM, "vq_op_register: %s: out of memory", def->name);
    o->def.inputs = o->in_slots;
    o->def.outputs = o->out_slots;
    o->def.attrs = NULL; /* the schema is o->attrs, in the registry's form */
    o->op = (vq__op_def){.type = o->def.name,
                         .in_slots = o->in_slots,
                         .nin_slots = def->ninputs,
                         .out_slots = o->out_slots,
                         .nout_slots = def->noutputs,
                         .flags = def->flags,
                         .attrs = o->attrs,
                         .nattrs = def->nattrs,
                         .params_size = def->params_size,
                         .infer = user_infer,
                         .kernel = {[VQ_DEV_CPU] = def->cpu ? user_cpu : NULL,
                                    [VQ_DEV_GPU] = def->gpu ? user_gpu : NULL},
                         .grad = def->grad ? user_grad : NULL,
                         .kernel_async = def->cpu_async ? user_async : NULL,
                         .user = o};
    if ((rc = vq__op_table_add(&o->op)) < 0)
        user_op_free(o);
    return rc;
}
