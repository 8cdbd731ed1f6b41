/* Private structures of the engine, shared by its files and by the tests
 * that drive the var-queue state machine step by step.
 *
 * The pieces: an op (struct vq__op) is one push; it points to its immutable
 * description (struct vq_opr), which is either a prebuilt opr or a copy
 * embedded in the op itself. A var (struct vq_var) owns a queue of var
 * blocks (struct vq__vblock), one per access that could not be granted at
 * once. Ops that become runnable while another op completes are collected in
 * a vq__ready batch and handed to the engine's dispatcher.
 *
 * GPU ops (gpu.c, docs/design/gpu.md) use the same ops, vars and pools:
 * each device has a compute pool and two copy pools whose workers own one stream each;
 * a var carries the event of the last GPU op that accessed it
 * (struct vq__gpu_event). */
#ifndef VARQ_ENGINE_INTERNAL_H
#define VARQ_ENGINE_INTERNAL_H

#include <varq/engine.h>

#include "engine_services.h" /* vq__fail & co., fault.h's allocation */
#include "spinlock.h"

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* VQ__ASAN: built with AddressSanitizer, by gcc (__SANITIZE_ADDRESS__) or
 * clang (which says so only through __has_feature): the object pools then
 * hand every object to malloc and free, so that ASan sees each use after
 * free, and poison what they keep. */
#if defined(__SANITIZE_ADDRESS__)
#define VQ__ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VQ__ASAN 1
#endif
#endif

#define VQ__CACHELINE 64
#define VQ__ALIGNED _Alignas(VQ__CACHELINE)
#define VQ__INLINE_VARS 8 /* vars of a vq_push op stored without malloc */
#define VQ__GROUP_MAX 32  /* ops that may join one queued op (var.c) */

/* Thread-locals of the push path. The initial-exec model makes each access
 * one %fs-relative load instead of a call to __tls_get_addr (the default for
 * a shared library); the few bytes come from the static TLS surplus glibc
 * keeps for libraries, so a dlopen'ed libvarq works too. */
#define VQ__TLS _Thread_local __attribute__((tls_model("initial-exec")))

/* Hot path markers. A function of the push or dispatch path opens with
 * "hot path:" and what it takes: "no lock" only where it takes none (atomics
 * only), otherwise the locks it may take, by name (the order they keep is
 * at struct vq_engine). None of them logs or formats a message unless it
 * fails. */

/* ---- invariants ----
 *
 * VQ__ASSERT(expr) states an invariant that a comment claims (MXNet's
 * CHECKs in threaded_engine.cc) and checks it where VQ_CHECK_INVARIANTS is
 * defined: meson defines it in the sanitizer builds and in debug builds
 * (engine/meson.build), never together with NDEBUG. Elsewhere it compiles
 * to nothing (expr is not evaluated).
 *
 * It is a debug-build check, not error handling, and the one place where
 * the library stops a process. A false invariant is never the caller's
 * doing through the API (those errors are negative codes with a message,
 * as everywhere): it means the engine's own state is corrupt, by a bug in
 * varq or memory trampled by the program. No caller could recover from
 * that, and going on would hang or corrupt further, far from the cause. So
 * it prints file:line and the expression on stderr and traps on the spot,
 * where a debugger or the sanitizer's report shows how it came about.
 * Release builds keep the rule: no abort, no exit. */
#if defined(VQ_CHECK_INVARIANTS) && !defined(NDEBUG)
#define VQ__ASSERT(expr)                                                                   \
    (__builtin_expect(!!(expr), 1) ? (void)0 : vq__assert_failed(__FILE__, __LINE__, #expr))
#else
#define VQ__ASSERT(expr) ((void)sizeof(expr))
#endif
/* Prints "varq: file:line: invariant failed: expr" and traps (error.c). */
_Noreturn void vq__assert_failed(const char *file, int line, const char *expr);

/* ---- object pools (pool.c) ---- */

/* VQ__POOL_OBJ: the layers' small objects (vq__obj_alloc, engine_services.h). */
enum { VQ__POOL_VBLOCK, VQ__POOL_OP, VQ__POOL_VAR, VQ__POOL_OBJ, VQ__POOL_COUNT };

/* A free object: the first word links the thread's list or a magazine; in
 * a magazine's first object, the next two link magazines in the depot and
 * count the magazine (so that taking one touches one object, not all). */
struct vq__free_obj {
    struct vq__free_obj *next;
    struct vq__free_obj *next_mag;
    long mag_count;
};

struct vq__thread_cache {
    struct vq__free_obj *head[VQ__POOL_COUNT];
    int count[VQ__POOL_COUNT];
    bool registered;
};

#define VQ__MAG 64

extern VQ__TLS struct vq__thread_cache vq__cache __attribute__((visibility("hidden")));

/* The slow paths: refill from the depot or a new slab; give a magazine back.
 * Under AddressSanitizer every call goes through them (they poison). */
void *vq__pool_alloc_slow(int kind);
void vq__pool_free_slow(int kind, void *p);
/* Slabs carved so far, all kinds (tests/prim_depot.c: a thread's exit
 * gives its objects back, so a steady workload stops carving). */
size_t vq__pool_slabs(void);

/* hot path: no lock and no malloc from the thread's own list; the depot
 * mutex (and malloc for a new slab) once per batch of VQ__MAG objects
 * moved between threads. Returns NULL only when out
 * of memory. */
static inline void *vq__pool_alloc(int kind)
{
#ifdef VQ__ASAN
    return vq__pool_alloc_slow(kind);
#else
    struct vq__free_obj *o = vq__cache.head[kind];
    if (__builtin_expect(!o, 0))
        return vq__pool_alloc_slow(kind);
    vq__cache.head[kind] = o->next;
    vq__cache.count[kind]--;
    /* The next allocation reads the next object's link: asked for now, it
     * is in the cache by then. A list of objects freed long ago (a plan's
     * engine vars, made again by the next preparation) otherwise costs a
     * memory access per allocation that nothing can overlap. */
    if (o->next)
        VQ__PREFETCH(o->next);
    return o;
#endif
}

static inline void vq__pool_free(int kind, void *p)
{
#ifdef VQ__ASAN
    vq__pool_free_slow(kind, p);
#else
    if (__builtin_expect(vq__cache.count[kind] >= 2 * VQ__MAG, 0)) {
        vq__pool_free_slow(kind, p);
        return;
    }
    struct vq__free_obj *o = p;
    o->next = vq__cache.head[kind];
    vq__cache.head[kind] = o;
    vq__cache.count[kind]++;
#endif
}

/* ---- spinlock: spinlock.h ---- */

/* How long a thread about to sleep (an idle worker, a waiter in
 * vq_wait_var) keeps looking first, by default (the engine's spin_looks,
 * VARQ_CPU_SPIN): VQ__SPIN_LOOKS looks, with
 * vq__spin_pause(i) between look i and the next, which yields the core
 * every 64 looks to a thread that needs it (a pusher on the same core). */
#define VQ__SPIN_LOOKS 2000

static inline void vq__spin_pause(int i)
{
    if (i % 64 == 63)
        sched_yield();
    else
        vq__cpu_relax();
}

/* ---- ops ---- */

enum {
    VQ__OPR_EMBEDDED = 1u << 0, /* lives inside its op; freed with it */
    VQ__OPR_NOSKIP = 1u << 1,   /* internal: runs even on failed vars, poisons nothing */
    VQ__OPR_DELETE = 1u << 2,   /* internal: deletes its only written var */
    VQ__OPR_HEAPVARS = 1u << 3, /* vars array was malloc'd */
    VQ__OPR_GPU = 1u << 4,      /* ctx is a GPU: runs on a stream (gpu.c) */
    VQ__OPR_SORTED = 1u << 5,   /* vars[n .. 2n) holds the vars in lock order */
    /* may head or join a group (var.c); set by opr_fill */
    VQ__OPR_GROUPABLE = 1u << 6,
    /* the pusher keeps its count after the push (push_held, engine.c) */
    VQ__OPR_HELD = 1u << 7,
};

/* Doubly linked membership of an engine's list (live vars, live oprs). */
struct vq__link {
    struct vq__link *prev, *next;
};

/* The immutable description of an op. vars[0 .. nwrites) are the written
 * vars, vars[nwrites .. nwrites + nreads) the read ones, each var once;
 * with VQ__OPR_SORTED (prebuilt ops, and ops of more than VQ__INLINE_VARS
 * vars) the same n vars follow in lock order (vq__var_sort), which other
 * ops sort on the stack at each push.
 * vars[0 .. nexcl) are queued as writes (exclusive accesses): the written
 * vars, and for a GPU op its read vars too, so that only an op with
 * exclusive access ever changes a var's event (gpu.c). Errors still poison
 * only vars[0 .. nwrites). */
struct vq__desc {
    /* what every run reads, first: with the op's head they share a line */
    vq_sync_fn fn;
    void *arg;
    vq_var **vars;
    vq_engine *engine;
    int nreads, nwrites;
    unsigned flags;             /* VQ__OPR_* */
    unsigned props;
    vq_async_fn async_fn;
    void (*arg_free)(void *arg);
    int priority;
    vq_ctx ctx;
    int nexcl;                  /* nwrites, or nwrites + nreads for a GPU op; in the
                                   padding before name: the size stays 88 bytes */
    const char *name;
};

/* A prebuilt op: a description pushed many times. The pusher counts pushes
 * and the completers count down on lines of their own, so that pushing one
 * opr again and again moves no cache line between them (see opr_complete). */
struct vq_opr {
    struct vq__desc desc;       /* first: a prebuilt op's desc is its vq_opr */
    struct vq__link link;       /* in the engine's list of live oprs */
    VQ__ALIGNED atomic_long pushes;
    VQ__ALIGNED atomic_long remaining;
    /* An op kept for a push that finds the op pool empty and no memory to
     * refill it: with one push of a prebuilt op in flight at a time (the
     * graph executor's case) the op itself is always there. NULL while that
     * push is out. The push still takes one var block per var from the
     * pool: when that is empty too and memory is out, it fails with
     * VQ_ENOMEM like any push (reported to the pusher, never waited for). */
    _Atomic(struct vq__op *) spare;
    /* vq__opr_reserve's: ops and var blocks set aside while memory was
     * there, for pushes of a prebuilt op that a layer cannot go without
     * (vq__push_opr_reserved), made when the pools are empty and memory is
     * out. An op taken from here comes back when it completes, and the
     * blocks its push took are taken again from the pool then (the ones its
     * accesses freed are in that pool by then), up to reserve_want. Under
     * reserve_lock; the slow path only. */
    vq__spinlock reserve_lock;
    int reserve_nblocks, reserve_want;
    struct vq__op *reserve_ops;
    struct vq__vblock *reserve_blocks;
};

/* One push of an op. Also the vq_done handle of an async op. */
struct vq__op {
    /* Hot fields first: what the pusher fills and the runner reads or
     * writes for an op without vars lies in the first two cache lines
     * (128 bytes). An op's memory crosses from the pusher's cache to the
     * worker's and, recycled through the object pool, back: each line it
     * touches costs two transfers per op, the bulk of handing a small op
     * to another core. */
    atomic_int wait;            /* dependencies not yet granted, + 1 for the pusher */
    /* A group (bulk execution, var_append.h vq__var_append_op): later pushes with
     * the same vars that joined this op while it waited in the queues, run
     * after it by its runner and completed with it. group_n counts them;
     * group_next links them in push order (from the head, then from each
     * member); group_tail is the last one. Written under the lock of the
     * head's first var before the head is granted; read by its runner. */
    int group_n;
    const struct vq__desc *desc;
    struct vq__desc embedded;   /* the description when pushed by vq_push */
    struct vq__naive_wait *naive; /* naive engine: the pusher waiting for an async op */
    struct vq_opr *spare_of;      /* the prebuilt op whose spare this is, or NULL */
    int wait_err;                 /* RUN_ON_FAILED: its failed wait for GPU work */
    bool reserved;                /* from spare_of's reserve (read only with spare_of) */
    /* third line: an op's vars (embedded.vars points here), a group's links */
    vq_var *inline_vars[VQ__INLINE_VARS];
    struct vq__op *group_next, *group_tail;
    /* cold */
    struct vq__op *next;        /* naive engine: ops pushed from inside an op;
                                   threaded: the heap's spill list */
    uint64_t start_ns;          /* profiler only */
    int worker;                 /* profiler only: who started it */
};

typedef struct vq__op vq__op;

/* Ops that became runnable during one completion. When the batch is full,
 * vq__ready_add hands the oldest entries to the dispatcher directly. */
#define VQ__READY_BATCH 16
typedef struct vq__ready {
    vq_engine *engine;
    int n;
    vq__op *ops[VQ__READY_BATCH];
} vq__ready;

/* One granted dependency of op: the caller that brings its counter to zero
 * owns the op and adds it to r. */
static inline void vq__op_dep_granted(vq__op *op, vq__ready *r);

/* ---- vars (var.c): the var-queue state machine ---- */

enum { VQ__VAR_LIVE = 1, VQ__VAR_DELETING = 2, VQ__VAR_DEAD = 3 };

/* A block in a var's queue: one access waiting for its turn. */
struct vq__vblock {
    struct vq__vblock *next;
    vq__op *trigger;            /* the op to grant when this access is reached */
    bool write;
};

struct vq_var {
    VQ__ALIGNED void *pool_link; /* first words: reused by the pool while free */
    void *pool_link2;
    struct vq__link link;       /* in the engine's list of live vars */
    vq__spinlock lock;
    bool write_triggered;             /* pending_write has been granted (beside lock: no hole) */
    int num_pending_reads;            /* granted reads not yet complete */
    struct vq__vblock *pending_write; /* oldest unfinished write, or NULL */
    struct vq__vblock *head;    /* empty sentinel at the tail: next access goes here */
    struct vq__vblock *tail;    /* the last block queued; valid while pending_write is set */
    atomic_int state;           /* VQ__VAR_* */
    int err;                    /* failure carried by the var; ordered by the queue */
    vq_engine *engine;
    /* The event recorded after the last GPU op that accessed the var, or
     * NULL. Changed only by an op with exclusive access (a GPU op, a CPU
     * writer, the engine's wait and delete ops), so the queue orders it. */
    struct vq__gpu_event *gpu_ev;
    /* What err came from (one reference), or NULL: set with err by the
     * op that poisons the var, taken with it by the wait, and, like err,
     * ordered by the queue. Read only where err is set (failure paths). */
    struct vq__fail_note *fail_note;
    char name[32];
};

int vq__var_init(vq_var *v, vq_engine *e, const char *name);
/* Append one access of op; the caller holds v's lock (or is alone with v,
 * as the state-machine tests are). Each returns true when the access is
 * granted at once (the caller counts it). A read that has to queue takes
 * *spare (and sets it to NULL); a write always takes nb as the var's new
 * sentinel. */
bool vq__var_append_read(vq_var *v, vq__op *op, struct vq__vblock **spare);
bool vq__var_append_write(vq_var *v, vq__op *op, struct vq__vblock *nb);
/* Appends every access of op at one instant with respect to other pushers:
 * locks the op's vars in the order given (order: its n distinct vars sorted
 * by vq__var_sort), numbers the push (*ticket, from the engine's pushed
 * count), appends vars[0 .. nexcl) as writes and the rest as reads, and
 * unlocks. *spare holds n blocks; those not queued stay in it. Returns the
 * number of accesses granted at once, or VQ__APPEND_JOINED when op joined
 * the group of the op queued last on its vars instead (it then queues
 * nothing, and runs and completes with that op), or, when *spare is NULL
 * and op does not join, VQ__APPEND_NO_BLOCKS: nothing was done (no
 * ticket), the caller retries with the blocks. */
enum { VQ__APPEND_JOINED = -1, VQ__APPEND_NO_BLOCKS = -2 };
/* int vq__var_append_op(vq__op *op, vq_var *const *order,
 *                       struct vq__vblock **spare, unsigned long *ticket);
 * is static inline in var_append.h, for the push path (engine.c). */
/* Sorts n vars into the lock order (ascending address). */
void vq__var_sort(vq_var **vars, int n);
/* Sorts n items of size bytes whose first member is a pointer by its
 * address, stably (a radix sort: linear in n); false, nothing sorted, when
 * out of memory for its buffer. */
bool vq__sort_by_addr(void *items, int n, size_t size);
void vq__var_complete_read(vq_var *v, vq__ready *r);
void vq__var_complete_write(vq_var *v, vq__ready *r);

/* ---- profiler (profiler.c) ---- */

struct vq__prof_event {
    const char *name;
    uint64_t start_ns, end_ns;
    int worker;
};

/* One thread's records. The lock is uncontended except while dumping. */
struct vq__prof_buf {
    pthread_mutex_t lock;
    struct vq__prof_event *ev;
    size_t n, cap;
};

uint64_t vq__now_ns(void);
void vq__prof_buf_init(struct vq__prof_buf *b);
void vq__prof_buf_destroy(struct vq__prof_buf *b);
void vq__prof_record(vq_engine *e, const vq__op *op, uint64_t end_ns);
/* Whether a trace can be written at path now, checked without creating
 * anything: 0, VQ_EINVAL for a directory, VQ_EIO naming path and why. who
 * starts the message. */
int vq__trace_path_check(const char *who, const char *path);

/* ---- worker pools (threaded.c) ---- */

/* A bounded multi-producer multi-consumer ring of ops (the cell-sequence
 * design by D. Vyukov). */
/* A light op: a task with no vars, a sync function, priority 0, on the
 * CPU, pushed by vq_push on a threaded engine that does not profile. It
 * travels to its worker inside the ring cell, without a vq__op: handing
 * an op to another core moves each cache line the op touches there and,
 * recycled, back, and a light op touches only its cell's line. It runs as
 * its op would (vq__light_run): no vars to wait for or release, so all
 * that is left is the function, the engine's first error, arg_free and
 * the count of completed ops. */
struct vq__light {
    vq_sync_fn fn;
    void *arg;
    void (*arg_free)(void *arg);
    vq_engine *engine;
};

struct vq__ring_cell {
    VQ__ALIGNED atomic_size_t seq; /* one line per cell: producer and consumer
                                      of neighbouring cells never share one */
    vq__op *op;                    /* NULL: the cell holds a light op */
    struct vq__light light;
};

/* What a pop took: op, or (op NULL) the light op. */
struct vq__item {
    vq__op *op;
    struct vq__light light;
};

struct vq__ring {
    VQ__ALIGNED atomic_size_t enq;
    VQ__ALIGNED atomic_size_t deq;
    VQ__ALIGNED size_t mask;
    struct vq__ring_cell *cells;
};

/* Ops with a priority other than 0, and priority-0 ops that found the ring
 * full: a binary heap, highest priority first, FIFO among equals. */
struct vq__heap_item {
    int priority;
    uint64_t seq;
    vq__op *op;
};

struct vq__heap {
    vq__spinlock lock;
    atomic_int count;        /* n + the spilled ops */
    atomic_int top_priority; /* of items[0]; valid while n > 0 */
    struct vq__heap_item *items;
    size_t n, cap;
    uint64_t seq;
    /* Ops that came while the array could not grow (out of memory), linked
     * through op->next, FIFO: they run after every op of the array. A ready
     * op always finds a place without allocating, so the dispatch path
     * (where there is no caller to give an error to) never waits on
     * memory. */
    vq__op *spill_head, *spill_tail;
};

/* The queue's two parts on their own (threaded.c), for the pools and for
 * the primitives' regression programs (tests/prim_ring.c, prim_heap.c).
 * The ring: any number of concurrent producers and consumers; ncells a
 * power of two; VQ_ENOMEM or 0. vq__ring_push(_light) returns false when
 * full, vq__ring_pop false when empty; one producer's ops leave in its
 * order. The
 * heap (zeroed, lock clear, before its first push): any threads, under its
 * spinlock; never fails (spills, above); vq__heap_pop returns the top
 * when its priority is at least min_priority, spilled ops only for
 * INT_MIN, else NULL. */
int vq__ring_init(struct vq__ring *q, size_t ncells);
bool vq__ring_push(struct vq__ring *q, vq__op *op);
/* Also numbers the push: *ticket from a fetch-add on *pushed, between
 * claiming the cell and publishing it, so that the op is counted before
 * it can run and a push that finds the ring full counts nothing. */
bool vq__ring_push_light(struct vq__ring *q, const struct vq__light *l, atomic_ulong *pushed,
                         unsigned long *ticket);
bool vq__ring_pop(struct vq__ring *q, struct vq__item *it);
void vq__heap_push(struct vq__heap *h, vq__op *op);
vq__op *vq__heap_pop(struct vq__heap *h, int min_priority);

struct vq__worker;

struct vq__wpool {
    struct vq__ring ring;
    struct vq__heap heap;
    /* Read at every look of a spinning worker, written once: a line that
     * no push writes, so that spinning workers keep it in their caches. */
    VQ__ALIGNED atomic_bool stop;
    /* How a submit orders its ops before its look at sleepers (threaded.c,
     * wake): true, a compiler barrier, the sleeper paying for both with
     * membarrier(2); false, a read-modify-write of sleepers. Read by every
     * submit, written at the start and, if membarrier ever fails, once. */
    atomic_bool light_fence;
    bool fence_failed; /* that happened: sleeps are timed (under sleep_lock) */
    int nworkers;
    bool device;                /* a GPU pool: no op runs outside its workers */
    struct vq__worker *workers;
    /* Written by workers only when they go to sleep or wake (and by every
     * submit when light_fence is false). */
    VQ__ALIGNED atomic_int sleepers;
    pthread_mutex_t sleep_lock;
    pthread_cond_t sleep_cond;
};

struct vq__worker {
    VQ__ALIGNED pthread_t thread;
    struct vq__wpool *pool;
    vq_engine *engine;
    int id;
    vq_ctx ctx;                 /* what its ops get in vq_exec_ctx */
    void *stream;               /* a GPU worker's own stream; NULL on CPU */
    vq__op *next;               /* direct run: the successor to run next */
    struct vq__prof_buf prof;
};

/* streams: NULL for a CPU pool (ctx CPU 0); for a GPU pool, one stream per
 * worker, which its worker passes to its ops with ctx. Its message names
 * no API call: the caller, which knows the call, puts it before. */
int vq__pool_start(vq_engine *e, struct vq__wpool *p, int nworkers, int first_id, vq_ctx ctx,
                   void *const *streams);
void vq__pool_stop(struct vq__wpool *p);
/* Queues ops on p and wakes up to n sleeping workers. With may_wait (a
 * pusher that is not a worker), a full ring makes the caller yield until
 * workers free a cell: back-pressure instead of an unbounded queue. */
void vq__pool_submit(struct vq__wpool *p, vq__op *const *ops, int n, bool may_wait);
/* Queues a light op on p's ring (numbered as vq__ring_push_light does)
 * and wakes a sleeping worker; false when the ring is full: nothing was
 * counted, and the caller pushes it as an op instead. */
bool vq__pool_submit_light(struct vq__wpool *p, const struct vq__light *l, atomic_ulong *pushed,
                           unsigned long *ticket);
/* Runs a light op popped from a queue (engine.c). */
void vq__light_run(const struct vq__light *l, const vq_exec_ctx *x);
/* True when every worker of p sleeps and its queue is empty: nothing in p
 * runs or waits to run. */
bool vq__pool_idle(struct vq__wpool *p);
/* The worker running on this thread, or NULL. */
struct vq__worker *vq__self(void);
/* The engine whose CPU op this thread, not a worker, runs in vq__run_here
 * (a helping pusher or waiter), or NULL. */
extern VQ__TLS vq_engine *vq__helping;
/* Takes the next queued op of p into it: false when none is queued. */
bool vq__pool_pop(struct vq__wpool *p, struct vq__item *it);
/* Runs one queued op of p on the calling thread (a pusher that helps, a
 * waiter); until as for vq__run_op_here. Returns false when none was
 * queued. */
bool vq__run_here(struct vq__wpool *p, const atomic_bool *until);
/* Runs op, ready and taken off every queue, on the calling thread, a
 * thread outside the engine's ops (a helper, or a pusher that held it:
 * engine.c). With until (a waiter's flag), it then runs an op that each
 * op it ran made ready, as a worker runs its successor, until *until is
 * set or none is made ready; the others go to their pools. */
void vq__run_op_here(vq__op *op, const atomic_bool *until);

/* ---- GPU execution (gpu.c) ---- */

/* An event of the stream backend, shared by the vars that carry it. */
struct vq__gpu_event {
    void *ev;
    void *stream;               /* where it was recorded */
    int device;
    atomic_int refs;            /* vars carrying it; at zero back to the free list */
    struct vq__gpu_event *next; /* free list */
};

struct vq__stream_backend;

struct vq__gpu_dev {
    void **streams;             /* [0, nstreams) compute, then to-device, from-device */
    struct vq__wpool compute, h2d, d2h; /* threaded engine only */
    int npools;                 /* pools started (for teardown) */
    pthread_mutex_t ev_lock;
    struct vq__gpu_event *free_events;
};

struct vq__gpu {
    const struct vq__stream_backend *be;
    int ndev;
    int nstreams;               /* compute streams per device */
    int per_device;             /* streams per device: nstreams + 2 (compute, to-device,
                                   from-device) with workers; 1 without */
    /* Each stream has its worker (the threaded engine). Without (the naive
     * engine), a GPU op runs in its pusher on the device's one stream and
     * synchronizes it at launch instead of recording an event. */
    bool workers;
    int first_worker;           /* worker id of device 0's first compute worker */
    struct vq__gpu_dev *dev;
};

/* Creates the engine's GPU state on the first GPU push (VQ_ENOSYS without a
 * backend) and checks that ctx names one of its devices. fn names the API
 * call for messages. */
int vq__gpu_check(vq_engine *e, vq_ctx ctx, const char *fn, const char *task);
/* Stops the GPU workers (the engine is quiescent), then, once the vars are
 * gone (vq__gpu_free), drains and frees the streams and events. */
void vq__gpu_stop(vq_engine *e);
void vq__gpu_free(vq_engine *e);
/* The pool of a GPU op: its device's copy pool for VQ_PROP_COPY_*, else the
 * compute pool. */
struct vq__wpool *vq__gpu_pool_of(vq_engine *e, const vq__op *op);
/* Before an op runs on an engine with GPU state: a GPU op makes its stream
 * wait for its vars' events from other streams; a CPU op synchronizes its
 * vars' events (and drops them from the vars it writes). Returns the error
 * that fails the op, or 0. */
int vq__gpu_prepare(vq__op *op, const vq_exec_ctx *x);
/* After a GPU op's fn returned err: records an event on its stream and
 * hands it to its vars (naive engine: synchronizes the stream instead).
 * Returns the op's error. */
int vq__gpu_launched(vq__op *op, const vq_exec_ctx *x, int err);
/* The exclusive accessor of v (vq_wait_var's op) settles its event:
 * synchronizes it, drops it, and returns its error. */
int vq__gpu_var_settle(vq_var *v);
/* Drops v's event (v is being destroyed). */
void vq__gpu_var_release(vq_var *v);
/* Calls a GPU op's fn with its stream as the backend's native handle in
 * x->stream (what users launch on), keeping the backend stream for
 * vq__gpu_op_stream meanwhile. */
int vq__gpu_call(const struct vq__desc *o, const vq_exec_ctx *x);

/* True when no GPU pool of e runs or has queued an op (or e has no GPU
 * state). */
bool vq__gpu_idle(vq_engine *e);
/* The stream of the naive engine's GPU ops on device id. */
void *vq__gpu_naive_stream(vq_engine *e, int id);
/* vq_wait_all's GPU part: synchronizes every stream; the first error. */
int vq__gpu_sync_all(vq_engine *e);

/* ---- engine (engine.c: pushing, running and completing ops) ---- */

/* Lock order. The rule: a thread holds at most one of the engine's locks,
 * and holds none while it waits for another, with three exceptions, each
 * in one direction only:
 *   - a pusher holds every var spinlock of its op at once, taken in
 *     ascending address order (vq__var_append_op); a completer holds one
 *     var's spinlock and takes nothing under it (var.c);
 *   - a worker going to sleep holds its pool's sleep_lock while it looks
 *     at the queue: sleep_lock, then the pool's heap spinlock (threaded.c);
 *   - the naive engine holds naive_lock while an op runs, so whatever the
 *     op's function takes comes after it: gpu_lock (a GPU push), list_lock
 *     (vq_var_new, a deletion), the depot mutex (pool.c), a profiler
 *     buffer's lock, and the program's own locks (naive.c); it releases
 *     naive_lock while it waits for an async op.
 * gpu_lock covers the GPU start, which takes the backend's locks and starts
 * pools (no engine lock). Every other lock is a leaf, taken alone: the
 * engine's wait_lock and list_lock, a pool's heap spinlock from a pusher or
 * a worker that is awake, the depot mutex, a profiler buffer's lock, a GPU
 * device's ev_lock, and the one-shot waits of vq_wait_var and the naive
 * engine's async ops. No engine lock is held while an op's function runs
 * (naive_lock aside), so a function may push, wait for a var's value on
 * another engine or take its own locks. */
struct vq_engine {
    int kind;                   /* VQ_ENGINE_THREADED or VQ_ENGINE_NAIVE */
    bool profile;
    bool has_prio;
    /* Set, with release, once gpu (below) is complete (gpu.c). Every op
     * reads it relaxed, so it sits on this read-mostly line: an op that can
     * meet an event on its vars runs after the GPU op that recorded it, and
     * sees gpu_on set through that ordering. */
    atomic_bool gpu_on;
    int cpu_workers, cpu_prio_workers;
    int cpu_bind;                /* VQ_CPU_BIND_NONE, _SPREAD or _CLOSE */
    unsigned long max_pending;  /* ops in flight before a pusher helps (throttle) */
    int spin_looks;             /* looks before an idle worker or a waiter sleeps (VARQ_CPU_SPIN) */
    struct vq__wpool cpu, prio;
    /* Ops pushed and ops completed, on lines of their own: the pusher and
     * the workers never write the same one. */
    VQ__ALIGNED atomic_ulong pushed;
    VQ__ALIGNED atomic_ulong completed;
    VQ__ALIGNED atomic_int waiters;
    atomic_int first_err;
    atomic_int finishers;       /* vq_done_finish calls in progress */
    pthread_mutex_t wait_lock;
    pthread_cond_t wait_cond;
    pthread_mutex_t list_lock;  /* vars and oprs lists */
    pthread_mutex_t naive_lock; /* naive engine: held while an op runs */
    struct vq__link *vars, *oprs;
    struct vq__prof_buf ext_prof; /* records of threads that are not workers */
    uint64_t t0_ns;
    char *profile_path;
    /* GPU state, created by the first GPU push under gpu_lock (gpu.c). */
    int gpu_streams;            /* compute streams per device */
    pthread_mutex_t gpu_lock;
    struct vq__gpu *gpu;
};

/* The pool that runs op: the prioritized workers' for VQ_PROP_CPU_PRIORITIZED
 * ops when there are such workers, else the CPU pool. */
static inline struct vq__wpool *vq__pool_of(struct vq_engine *e, const vq__op *op)
{
    if (__builtin_expect(op->desc->flags & VQ__OPR_GPU, 0))
        return vq__gpu_pool_of(e, op);
    return (op->desc->props & VQ_PROP_CPU_PRIORITIZED) && e->has_prio ? &e->prio : &e->cpu;
}

/* Runs op on this thread (skip check, function, completion); ready ops go
 * to r. x->worker is the worker index or -1. r is NULL for an op that was
 * never queued on its vars (the naive engine's): its completion then
 * releases no access and counts nothing. */
void vq__op_run(vq__op *op, const vq_exec_ctx *x, vq__ready *r);
/* Completes op with err (0, the op's failure, or the error that skipped
 * it); r as for vq__op_run. */
void vq__op_finish(vq__op *op, int err, vq__ready *r);
/* The error of the first failed var among the op's writes, then reads; 0
 * if the op may run. */
int vq__op_skip_error(const struct vq__desc *o);
/* Depth of op functions running on this thread (waiting inside one would
 * deadlock; the naive engine defers a push made inside one). */
extern VQ__TLS int vq__in_op __attribute__((visibility("hidden")));

/* n ops completed: an op and the members of its group. Inline for the
 * completion path (vq__op_finish, vq__light_run); wait.c counts with it the
 * waits and deletions it does at once. */
static inline void vq__op_completed(vq_engine *e, unsigned long n)
{
    /* seq_cst pair with vq__wait_pending: either we see the waiter, or it sees
     * our count. Only the completion that leaves nothing pending wakes it. */
    unsigned long done = atomic_fetch_add(&e->completed, n) + n;
    /* pushed never trails completed: an op is counted pushed before it runs */
    VQ__ASSERT(atomic_load_explicit(&e->pushed, memory_order_relaxed) - done <= ULONG_MAX / 2);
    if (atomic_load(&e->waiters) > 0 && atomic_load(&e->pushed) == done) {
        pthread_mutex_lock(&e->wait_lock);
        pthread_cond_broadcast(&e->wait_cond);
        pthread_mutex_unlock(&e->wait_lock);
    }
}

/* Pushes t, validated, with VQ__OPR_* flags (also wait.c's deletion and wait
 * ops); with VQ__OPR_HELD, *held gets the op, unready until released. */
int vq__push_task(vq_engine *e, const vq_task *t, unsigned flags, const char *fn, vq__op **held);
/* vq__push_release with until, the waiter's flag, as for vq__run_op_here. */
void vq__push_release_until(vq_engine *e, vq__op *op, const atomic_bool *until);
/* 0, or VQ_EINVAL naming fn and what[i] when v is NULL, foreign or freed. */
int vq__check_var(vq_engine *e, const vq_var *v, const char *fn, const char *what, int i);

/* ---- creating and freeing engines (engine_new.c) ---- */

/* Links l into e's list of live vars or prebuilt ops (under list_lock). */
void vq__list_add(vq_engine *e, struct vq__link **head, struct vq__link *l);
/* Unlinks l from that list (under list_lock). */
void vq__list_del(vq_engine *e, struct vq__link **head, struct vq__link *l);
/* Frees v for good: unlisted, its GPU event and failure note dropped, DEAD. */
void vq__var_destroy(vq_engine *e, vq_var *v);
/* Frees a prebuilt op the caller has unlisted: its arg, spare op and vars. */
void vq__opr_destroy(vq_opr *o);

/* ---- deleting vars and waiting (wait.c) ---- */

/* Returns once every op pushed on e has completed (vq__op_completed wakes it). */
void vq__wait_pending(vq_engine *e);

/* ---- the naive engine (naive.c) ----
 *
 * The serial oracle (MXNet's naive_engine.cc): each op runs in the pushing
 * thread at once, one at a time across all threads, with no queue on its
 * vars and no worker. The rest of the engine meets it at these three calls;
 * everything else is shared (validation, ops, errors, GPU streams). */

/* op_enqueue's part: runs op now, or after the op running on this thread
 * when pushed from inside one. */
void vq__naive_push(vq__op *op);
/* vq_done_finish of an op whose pusher waits for it (op->naive set):
 * hands err to that pusher, which completes the op. */
void vq__naive_done(vq__op *op, int err);
/* vq_wait_var's part: every op pushed before has completed; takes v's
 * error and its note (vq__wait_var_note). */
int vq__naive_wait_var(vq_engine *e, vq_var *v, struct vq__fail_note **note);

/* The ticket of the calling thread's last push on a threaded engine (any
 * op queued on vars: vq_push, vq_push_opr, and the ops of vq_wait_var and
 * vq_var_free): its place in the engine's push order. Two pushes that share
 * a var are queued on it in ticket order, so running the ops one at a time
 * in ticket order is what the engine does (serial equivalence,
 * docs/design/engine.md). The tests read
 * it to replay concurrent pushers serially. Undefined after a push that ran
 * the op at once (a sync op with no vars, past the throttle) or after ops
 * nested on this thread pushed meanwhile. */
unsigned long vq__push_ticket(void);
/* Its value, set by every push (engine.c) and by the waits and deletions
 * that wait.c does at once, numbered like the op they save. */
extern VQ__TLS unsigned long vq__last_ticket __attribute__((visibility("hidden")));

/* Hands the ready ops of r to the engine (queues and wake-ups). */
void vq__ready_flush(vq__ready *r);

static inline void vq__ready_add(vq__ready *r, vq__op *op)
{
    if (r->n == VQ__READY_BATCH)
        vq__ready_flush(r);
    r->ops[r->n++] = op;
}

static inline void vq__op_dep_granted(vq__op *op, vq__ready *r)
{
    /* acq_rel: the op's runner sees the effects of every op that granted it */
    int wait = atomic_fetch_sub_explicit(&op->wait, 1, memory_order_acq_rel);
    VQ__ASSERT(wait >= 1); /* one grant per access queued, and the pusher's count */
    if (wait == 1)
        vq__ready_add(r, op);
}

#endif
