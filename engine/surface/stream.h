/* The stream backend interface: streams, events, a launch hook and
 * stream-ordered memory, behind one vtable (docs/design/gpu.md). The
 * engine's GPU logic is written once against it; two backends implement it:
 *
 *   - CUDA (stream_cuda.c, built when the CUDA toolkit is found): cudart
 *     streams and events, cudaLaunchHostFunc, cudaMallocAsync;
 *   - host-emulated (stream_emul.c, always built): each stream a thread that
 *     runs its queue in order, events as counters with condition variables,
 *     "device" memory in host memory. It lets every test of the event logic
 *     run where there is no GPU.
 *
 * Streams and events are opaque (void *). Functions returning int give 0 or a
 * negative VQ_* code and set vq_errmsg() through vq__fail, except the
 * VQ_EBUSY of event_query, which is a normal answer and sets no message.
 *
 * Host functions and errors on streams. launch_host enqueues fn(arg) in
 * stream order (the emulated backend runs it on the stream's thread, CUDA
 * on its callback thread via cudaLaunchHostFunc). It is the launch hook the
 * engine and the kernels use on the emulated backend to enqueue "device
 * work". fn returns 0 or a negative VQ_* code; a failure (the first one
 * wins) becomes the stream's sticky error, as a fault is in CUDA, and the
 * message fn set with vq__fail on its own thread is kept with it. The sticky
 * error is returned, with that message, by
 *   - stream_synchronize on that stream;
 *   - event_query / event_synchronize of an event recorded on that stream
 *     after the failing fn (emulated: exactly those; CUDA: any record on that
 *     stream that completes after the failure, because events carry no
 *     payload there);
 *   - emulated only: events recorded on another stream after that stream
 *     waited (stream_wait_event) for such an event: the error follows the
 *     dependency. On CUDA it does not cross streams.
 * Work enqueued after a failure still runs (memory is still freed, copies
 * still happen); only the error is sticky, for the stream's lifetime.
 *
 * A host fn must not call this interface (cudart forbids CUDA calls in host
 * functions, and an emulated stream waiting on its own work would
 * deadlock: its synchronize calls return VQ_EDEADLK there); it may signal
 * the engine, which then calls the interface from elsewhere.
 *
 * Threading: every function may be called from any thread. Calls on one
 * stream from several threads are serialized by the backend, and their
 * relative order is the order of enqueueing. An event is not re-recorded
 * while another thread queries, synchronizes or waits on it (the engine
 * recycles an event only when it has no user left).
 *
 * Devices are numbered 0 .. device_count() - 1. An event belongs to the
 * device it was created on and may only be recorded on a stream of that
 * device; any stream may wait for it. */
#ifndef VARQ_ENGINE_STREAM_H
#define VARQ_ENGINE_STREAM_H

#include <varq/engine.h>

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

/* The kind argument of memcpy_async (the values of cudaMemcpyKind). The
 * emulated backend accepts them all and copies host memory. */
enum {
    VQ__MEMCPY_H2H = 0,
    VQ__MEMCPY_H2D = 1,
    VQ__MEMCPY_D2H = 2,
    VQ__MEMCPY_D2D = 3,
    VQ__MEMCPY_DEFAULT = 4, /* inferred from the pointers (unified addressing) */
};

/* The most devices the emulated backend simulates. */
#define VQ__STREAM_EMUL_MAX_DEVICES 8

struct vq__stream_backend {
    const char *name; /* "cuda" or "emulated" */
    /* Device memory is host memory (the emulated backend): an op on a GPU
     * runs its CPU kernel as stream work, and host functions may read it. */
    bool host_memory;

    /* Number of usable devices (0 when none). */
    int (*device_count)(void);

    /* A stream on device: cudaStreamCreateWithFlags(non-blocking) or a new
     * stream thread. */
    int (*stream_new)(int device, void **out);
    /* Waits for the stream's queued work (it all runs, even after an error),
     * then releases it. Events recorded on it stay valid. */
    void (*stream_free)(void *s);
    /* What a GPU op's fn gets in vq_exec_ctx.stream: the cudaStream_t of s
     * (CUDA), s itself (emulated). The engine keeps s for its own calls. */
    void *(*stream_native)(void *s);

    /* An event of device, never recorded (hence complete). No timing. */
    int (*event_new)(int device, void **out);
    /* May be called while a record of it is still pending: the record
     * completes, then the event's resources go. */
    void (*event_free)(void *ev);

    /* The event completes when the stream's work enqueued before this call
     * has run. Re-recording moves it to the new point. */
    int (*event_record)(void *ev, void *stream);
    /* The stream's work enqueued after this call waits until the event's
     * most recent record (at the time of this call) has completed, without
     * blocking the host. A never-recorded event: nothing to wait for. */
    int (*stream_wait_event)(void *stream, void *ev);
    /* 0 when the event is complete (or never recorded), VQ_EBUSY while its
     * last record is pending, a negative code for the recording stream's
     * sticky error. Does not block. */
    int (*event_query)(void *ev);
    /* Blocks the calling thread until the event is complete; then as
     * event_query. */
    int (*event_synchronize)(void *ev);

    /* Enqueues fn(arg) in stream order; see the header comment. */
    int (*launch_host)(void *stream, int (*fn)(void *arg), void *arg);
    /* Blocks until the work enqueued on stream so far has run; returns the
     * stream's sticky error, if any. */
    int (*stream_synchronize)(void *stream);

    /* Stream-ordered device memory: usable by work enqueued on stream after
     * the call (64-byte aligned); free_async releases it after the work
     * enqueued on stream before the call. NULL + VQ_ENOMEM message on
     * failure. */
    void *(*malloc_async)(size_t n, void *stream);
    void (*free_async)(void *p, void *stream);
    /* Page-locked host memory for staging copies (64-byte aligned).
     * Synchronous; NULL + message on failure. */
    void *(*host_alloc_pinned)(size_t n);
    void (*host_free_pinned)(void *p);
    /* Enqueues a copy of n bytes; kind is a VQ__MEMCPY_* value. */
    int (*memcpy_async)(void *dst, const void *src, size_t n, int kind, void *stream);
};

/* The host-emulated backend simulating ndevices devices (1 ..
 * VQ__STREAM_EMUL_MAX_DEVICES); NULL + VQ_EINVAL message otherwise. The
 * returned table is static. */
const struct vq__stream_backend *vq__stream_emul(int ndevices);

/* The CUDA backend (stream_cuda.c; stream.c's stand-in without CUDA), or
 * NULL with a message (the error is VQ_ENOSYS) when varq was built without
 * CUDA, no GPU is present, or the driver is too old for the CUDA runtime.
 * The result is computed once. */
const struct vq__stream_backend *vq__stream_cuda(void);

/* Picks a backend (stream.c). name: "cuda", "emulated", or NULL for the environment
 * variable VARQ_GPU_BACKEND (same values), and without it CUDA when built in
 * and a device is present. The emulated backend is used only when asked
 * for; it simulates VARQ_GPU_EMUL_DEVICES devices (default 1). Returns 0,
 * VQ_ENOSYS (no GPU backend; the message says why and how to get the
 * emulated one) or VQ_EINVAL (unknown name). */
int vq__stream_backend_get(const char *name, const struct vq__stream_backend **out);

#endif
