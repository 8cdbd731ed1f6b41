/* The executor's prepared plan, shared by plan.c (preparation of straight
 * code), segments.c (a frame's engine ops), plan_cache.c (the plan cache
 * and the executor's life), run.c (runs: the pushes and the engine ops'
 * bodies) and control.c (cond and while: their checks at preparation and
 * their execution on the engine).
 *
 * A plan runs its program as frames. The root frame is block 0, pushed
 * once per run by the caller's thread. Every cond or while op of a frame
 * has an instance (struct ctl) with frames of its own: one per branch of a
 * cond, a ring of VQ__WHILE_FRAMES for a while's body, so that iterations
 * that follow each other use different engine vars and overlap when their
 * data allows. An op appears once per frame (struct fop), with its vars
 * resolved to slots (struct pvar) of that frame or of enclosing ones; what
 * preparation found out about a program op (struct pop: reader counts,
 * inferred shapes) is shared by its instances.
 *
 * Ownership of the engine order: an op declares engine accesses only on
 * slots of its own frame (and, for a while body's inputs, on the previous
 * iteration's frame). Reads of enclosing vars inside a block are held for
 * the block's op by its control op, whose end half reads every enclosing
 * var its blocks read and does not complete until they are done, so those
 * values cannot change under them. */
#ifndef VARQ_GRAPH_PLAN_H
#define VARQ_GRAPH_PLAN_H

#include "graph_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define VQ__RUN_RING 64    /* runs of one plan in flight at once */
#define VQ__WHILE_FRAMES 4 /* iterations of one while in flight at once */

/* How far ahead, in ops, the walk and the segments ask for the lines of
 * the vars an op reads: an op reading an arbitrary earlier var (a chain's
 * skip connection) misses the cache on its record, its slot's meta, its
 * readers' counter and its engine var, and once a program's vars no
 * longer fit the cache those misses were most of preparation's time.
 * Asked for ahead, they overlap with the ops in between. */
enum { PREFETCH_OPS = 16 };

/* Below this many vars what the walk and the segments read of them (a
 * record, a slot, an engine var: about 300 bytes a var) stays in the
 * caches, and asking ahead only costs its instructions: exec_bench's
 * chain prepared 10^3 ops in 113-115 ns per op with the prefetches and
 * 106-108 without, 10^4 in 121-125 and 120-121, 10^5 in 188-190 and
 * (prefetching) 186-188. */
enum { PREFETCH_MIN_VARS = 1 << 15 };

struct plan;
struct frame;
struct ctl;

/* A growing list of engine vars. */
struct evlist {
    vq_var **v;
    int n, cap;
};
int vq__evlist_add(struct evlist *l, vq_var *v); /* 0 or VQ_ENOMEM (message set) */

struct vq_exec {
    vq_engine *engine;
    vq_ctx device;
    int cache_size;
    pthread_mutex_t lock;
    struct plan *lru_head, *lru_tail; /* most recently used first */
    int nplans;
    pthread_cond_t idle; /* signalled when a run ends */
    vq_exec_stats stats;
    struct plan *dead;   /* dropped plans waiting for reap() (plan_cache.c) */
    bool check_nan;      /* VQ_EXEC_CHECK_NAN */
    bool fetch_host;     /* VQ_EXEC_FETCH_HOST */
    bool no_segments;    /* VQ_EXEC_NO_SEGMENTS */
    bool no_memplan;     /* VQ_EXEC_NO_MEMPLAN or VARQ_MEMPLAN=0 (memplan.c) */
    /* The optimization passes its plans get (optimize.h's bits), from
     * VARQ_OPT when the executor is made: one setting per executor, so
     * the plan cache's key needs no part of it. */
    unsigned opt;
    int timeout_ms;   /* each run's deadline; 0: none */
    struct run *runs; /* the runs in flight, for vq_exec_cancel; under lock */
    /* The default generator of random ops without a seed or State: its
     * seed, and the plans prepared so far (under lock), which number
     * them: plan n's key is vq__rng_fold(seed, n) (struct plan's rng_key). */
    uint64_t seed;
    uint64_t plans_made;
};

/* The value of one var in one frame. Root slots also carry what
 * preparation knows of the var (meta, persistable, block) for every var of
 * the program; slots of other frames use only ev, value and readers_left.
 * Laid out without holes: 104 bytes. */
struct pvar {
    vq_var *ev;       /* engine var: own, or the scope tensor's (persistable) */
    vq_tensor *value; /* current value, one reference; ordered by ev */
    vq__meta meta;    /* declared, refined by inference */
    atomic_int readers_left;
    int init_readers; /* readers of the value before any op writes it (feeds) */
    int block;        /* the block declaring the var (root slots) */
    bool own_ev;
    /* value is somebody else's tensor (a caller's feed, a scope tensor
     * carried into a loop, a saved iteration): an op writing the var in
     * place writes a new tensor instead (copy on write) */
    bool borrowed;
    bool persistable;
    /* value is a header on the run's arena (memplan.c): counted there, not
     * in the plan's live bytes */
    bool in_arena;
    /* The value preparation computed (block 0's shape arithmetic: a shape
     * op of known dims, small integer ops of known values, small integer
     * scope tensors no op writes), one reference, or NULL: what the ops
     * reading a shape from this var infer with, so that they and the ops
     * after them get fixed metas. */
    vq_tensor *pval;
};

/* Per engine var of a frame, what its segments know (segments.c): the last op
 * that wrote it and the first op that read it since; and the segment (its
 * first op) that lists it already, as a write or a read, so that a
 * segment hands the engine each var once. */
struct seg_ent {
    int writer, first_reader;
    int listed; /* -1: in no segment yet */
    int alias;  /* >= 0: the entry of the var with the same engine var */
    /* the root frame on the CPU: the first and last op of the frame that
     * names the var and the last that writes it (-1: none; the last two
     * filled by the walk), and whether something outside the frame's ops
     * (a feed, a fetch, the scope) touches it too */
    int first_use, last_use, last_write;
    bool listed_write, outside;
    vq_var *ev; /* the slot's engine var, once a segment has named it */
};

/* An entry no segment has seen yet. */
#define SEG_ENT_NONE ((struct seg_ent){-1, -1, -1, -1, -1, -1, -1, false, false, NULL})

/* Per program var, what preparation looks up while it walks the ops
 * (plan.c, control.c) and while it makes the root's segments: one cache
 * line, so that an op reading an arbitrary earlier var (a chain's skip
 * connection) misses once here rather than once in each of several
 * arrays. From plan_new to the end of plan_build_ops. */
struct vrec {
    _Alignas(64) struct seg_ent seg; /* the root frame's entry */
    int *owner;                      /* walk: the counter of readers of the value the var has */
    bool has;                        /* walk: the var has a value at this point */
    bool used;                       /* touched by some op, feed or fetch */
    bool persistable;
};

/* What a cond or while op says, checked at preparation. */
struct ctl_info {
    bool is_while;
    int blocks[2];    /* cond: then, else; while: body */
    int nouts;        /* cond: the op's outputs; while: its carried values (the
                       * outputs before the stacked ones) */
    int *outs[2];     /* per block: the var each output comes from */
    int *body_in;     /* while: body_inputs, nouts of them */
    int body_cond;    /* while: the body's predicate var */
    int64_t max_iters;
    /* while: readers, in one iteration, of each body input's value (the
     * previous iteration's output) */
    int *carry_readers;
    /* while, for autodiff: save_carries keeps each iteration's carried
     * inputs (a record op per iteration reads them); replay_of >= 0 names
     * the op index, in the same block, of the saving while whose
     * iterations this one replays in reverse, binding the body vars
     * replay_in[] (nouts of that op's) to their saved values */
    bool save;
    int replay_of;
    int nreplay;
    int *replay_in;
    int *replay_readers;
    /* while: stack_outputs, the body vars whose value in each iteration a
     * stack op per iteration keeps; the exit joins them into the op's
     * outputs nouts .. nouts + nstack - 1 */
    int nstack;
    int *stack;
};

/* What a saving while kept of its last execution: per iteration, its
 * carried inputs (one reference each). A stacking while keeps its
 * stack_outputs' values the same way. */
struct tape {
    vq_tensor **v;   /* iteration i's input k at [i * width + k] */
    int width;
    int64_t n, cap;
    int64_t replayed; /* iterations handed to the replaying loop so far */
};

/* One program op, as preparation found it. */
struct pop {
    struct plan *plan;
    int block, index;  /* its block, and its place in it */
    const vq__pop *src;
    const vq__op_def *def;
    int nin;           /* src->nin, plus a control op's reads of enclosing vars */
    int *in;           /* var indices: src->in, then those reads */
    int *out_readers;  /* per output: readers of the version it writes (a fetch
                        * or a block's result counts as one that never finishes) */
    bool *in_counts;   /* per input: decrements the var's counter */
    /* When every input's shape is known at preparation, the output metas
     * and params inferred then hold for every run: nout metas, then the
     * params. NULL otherwise (runs infer with the real shapes). */
    vq__meta *fixed;
    struct ctl_info *ctl; /* cond / while; NULL for kernel ops */
};

/* One op in one frame. */
struct fop {
    struct pop *t;
    struct frame *fr;
    struct pvar **in, **out; /* t->nin and src->nout slots */
    uint64_t execs;          /* root frame: executions so far, to find the run */
    /* Random ops drawing from the executor's generator: the op's key
     * (the plan's folded with the op's place among the plan's random fops,
     * in build order) and its kernel executions so far; execution n draws
     * with vq__rng_fold(rng_key, n) (run.c's op_kcall). Unused otherwise. */
    uint64_t rng_key, draws;
    vq_opr *opr;             /* kernel ops: the first of a segment (segments.c) */
    int seg_len;             /* with opr: the segment's ops, this one and the
                              * next seg_len - 1 of the frame */
    struct ctl *ctl;         /* control ops: their instance */
    /* When preparation could not fix the shapes (t->fixed NULL): the last
     * execution's input metas, then its output metas and params, reused
     * while the inputs keep their shapes (a fop's executions never overlap:
     * each writes its outputs' vars, and the next waits for it). NULL
     * until the first. */
    vq__meta *infer_cache;
};

struct frame {
    struct plan *plan;
    int block;
    struct frame *up;   /* the frame of the control op; NULL for the root */
    struct ctl *owner;  /* that control op's instance; NULL for the root */
    int slot;           /* place in the owner's ring (while) or branch (cond) */
    struct pvar *vars;  /* root: the plan's (by program var); else by local index */
    struct fop *ops;
    int nops;
    vq_opr *step;       /* while body frames: decides on the next iteration */
    vq_opr *head;       /* pushed before the ops: a saving loop's record op, a
                         * replaying loop's bind op (NULL otherwise) */
    vq_opr *stack;      /* pushed after the ops, before the tail: a stacking
                         * loop's stack op (NULL otherwise) */
    vq_opr *tail;       /* pushed after the ops: the step, the branch's exit, or
                         * the run's final op (borrowed) */
    /* Pushed instead of tail when a push of the frame's ops failed and the
     * rest were not pushed: the root's is the plan's final_all (the final
     * op reads only the sinks of the whole frame). NULL: tail, which
     * follows whatever part of the frame was pushed (a loop's step pushes
     * the exit on the run's error; an exit writes every var of its frames). */
    vq_opr *tail_cut;
};

/* A cond or while op's instance in one frame. Executions of one instance
 * never overlap: its begin op reads inst, its end op writes it, and the
 * end completes only once everything its blocks pushed is done. */
struct ctl {
    struct fop *fop;
    vq_var *inst;
    vq_opr *begin, *end;
    vq_opr *exit[2];        /* per block */
    struct frame *frames;   /* cond: then, else; while: the ring */
    int nframes;
    /* the execution in progress */
    struct run *run;
    atomic_int pending;     /* the end op and the blocks' exit: the second finishes */
    vq_done *done;          /* the end op's */
    vq_tensor **result;     /* values for the outputs, one reference each */
    int64_t iter;
    int last;               /* frame of the last iteration */
    /* a saving while's tape and the var ordering its records and the
     * replaying loop's binds; a replaying while's saving instance */
    struct tape tape;
    vq_var *tape_var;
    struct ctl *replay;
    /* a stacking while's values of stack_outputs so far, and the var
     * ordering its stack ops (iteration order) before the exit */
    struct tape stacked;
    vq_var *stack_var;
    /* The naive engine, pushed from inside an op: the end op and the rest
     * of the frame are pushed once the blocks are done (see
     * vq__engine_runs_inline). */
    bool end_deferred;
};

struct run {
    struct plan *plan;
    atomic_int err;
    char msg[256];
    char *msg_out; /* a synchronous caller's buffer for msg, or NULL */
    vq_fetch *fetches;
    /* Host feeds of a GPU run, kept until the final op: the copies to the
     * device read them in stream order. */
    vq_tensor **held;
    int nheld;
    void (*done)(void *user, int err);
    void *user;
    atomic_size_t peak;
    /* The run's arena of the plan's memory plan (memplan.h), or NULL: its
     * planned outputs are allocated one by one */
    struct memarena *mem;
    /* vq_exec_cancel's VQ_ECANCELED, or 0: the next op or loop predicate
     * of the run turns it into the run's failure, naming itself. */
    atomic_int stop;
    uint64_t deadline_ns;    /* vq__now_ns() past which the run times out; 0: none */
    struct run *prev, *next; /* in the executor's runs, under its lock */
};

struct plan {
    /* cache key and identity */
    uint64_t key;
    char *key_names; /* feeds and fetches, NUL separated, for exact compares */
    size_t key_len;
    uint64_t prog_hash;
    vq_scope *scope;
    uint64_t scope_id; /* scope identity: addresses are reused */
    uint64_t scope_gen;
    struct plan *lru_prev, *lru_next;
    int refs; /* the cache's one plus one per run in flight; under exec lock */

    /* Some op reads an input's value to infer (vq__program_reads_values);
     * feed_metas: the feeds' dtypes and shapes this plan was prepared for
     * (a specialized plan), or NULL */
    bool dynamic;
    vq__meta *feed_metas;

    vq_exec *exec;
    vq_program *prog; /* the plan's own copy (frozen: one arena) */
    /* The per-op records of preparation (pop's in_counts and fixed; fop's
     * in and out; in counts, pop's out_readers, kept apart: see
     * walk_count_readers), freed with the plan. Preparation only: runs
     * never allocate from them. */
    vq__arena arena, counts;
    struct pvar *vars; /* by program var: the root frame's slots, and every var's meta */
    int nvars;
    int npersistable;  /* persistable vars */
    int *local;        /* program var -> index among its block's vars */
    int *block_nvars;  /* vars per block */
    struct pop *ops;   /* by program op */
    int nops;
    struct frame root;
    int *feeds, nfeeds;
    int *fetches, nfetches;
    /* by program var, during preparation (struct vrec; 64-byte aligned) */
    struct vrec *rec;
    bool root_ctl; /* block 0 has a control op */
    /* Preparation of the root (plan.c's plan_build_ops): block 0's engine
     * vars as they are made (final_all reads them all) and, for a lazy
     * root, what the final op reads; freed once both ops are made. */
    struct evlist root_evs, final_reads;
    vq_var *done_var;
    /* Reads the outputs of the run's sink ops, so it runs after them all. */
    vq_opr *final;
    /* The final op of a run cut short by a failed push (root.tail_cut):
     * reads every engine var of block 0, so it follows whatever part of
     * the run was pushed. Same body, and it writes done_var too. */
    vq_opr *final_all;
    uint64_t final_execs;
    /* The executor's generator folded with this plan's number; the random
     * fops made so far (preparation). */
    uint64_t rng_key;
    uint64_t nrandom;
    /* A push of one of the plan's ops failed: the ops after it in the frame
     * were not pushed, so their counts of executions (fop.execs) lag behind
     * the ring. Set under push_lock; no run is pushed on the plan after, and
     * the cache drops it (the next run prepares a new one). */
    atomic_bool broken;

    /* runs: push_lock orders whole runs (recursive: with the naive engine a
     * run's done callback runs inside the push and may start another run);
     * ring_lock guards inflight, which final ops decrement. */
    pthread_mutex_t push_lock;
    pthread_mutex_t ring_lock;
    pthread_cond_t ring_cond;
    uint64_t next_seq;
    int inflight;
    struct run *ring[VQ__RUN_RING];
    atomic_size_t live; /* tensor bytes the plan's slots hold, outside arenas */
    /* The memory plan (memplan.c): where the planned intermediates lie in
     * a run's arena, and the plan's arenas. NULL: nothing planned. */
    struct memplan *mem;
};

/* Preparation's walk over the ops of one block (plan.c), which control.c
 * calls for the blocks of a cond or while. rec[v].has: var v has a value
 * at this point; rec[v].owner: the counter of readers of that value. ext
 * collects the vars of enclosing blocks that the block's ops read. */
struct walk {
    struct plan *pl;
    struct vrec *rec; /* pl->rec */
    int *block_user; /* block -> the program op whose block it is, or -1 */
    unsigned char *written; /* var -> some op of the program writes it */
};

struct varset {
    int *v;
    int n, cap;
};

int vq__walk_block(struct walk *w, int block, struct varset *ext);
/* Room for one more element in arr (n used of *cap; doubles *cap when
 * full): the array, moved or not, or NULL (VQ_ENOMEM set) leaving arr and
 * *cap as they were. */
void *vq__grow(void *arr, int n, int *cap, size_t elem);
int vq__varset_add(struct varset *s, int v);

/* A cond or while op met by the walk: checks its attributes and blocks,
 * walks them, and sets t->ctl, t->nin / t->in (its reads of enclosing
 * vars appended) and the metas of its outputs (plan.c then counts its
 * reads and writes like any op's). */
int vq__ctl_walk(struct walk *w, struct pop *t);
void vq__ctl_info_free(struct ctl_info *ci);

/* Metas that agree where both are known; "f32[2,?]" for messages. */
bool vq__meta_compatible(const vq__meta *a, const vq__meta *b);
void vq__meta_str(char *buf, size_t size, const vq__meta *m);
/* Prefixes the message of a failed check of op t with where it is
 * ("op 3 (add): ...", "block 2 op 0 (mul): ..."). Returns rc. */
int vq__pop_error(const struct pop *t, int rc);

/* The slot that var v names for an op of frame fr; *dep: whether the op
 * takes an engine access on it (a var of fr itself, or the previous
 * iteration's output that a while body's input names). */
struct pvar *vq__frame_slot(struct frame *fr, int v, bool *dep);

/* Builds the frames of a control op's instance and its engine ops
 * (control.c); builds the kernel ops of a frame (segments.c). Both recurse. */
int vq__ctl_build(struct fop *f);
int vq__frame_vars(struct frame *fr); /* slots and engine vars (not the root) */
int vq__frame_ops(struct frame *fr);  /* fops and their engine ops */
void vq__ctl_destroy(struct ctl *c);
void vq__frame_destroy(struct frame *fr);

/* Pushes a control op's two halves: 0, VQ__CTL_DEFERRED when the end op
 * and what follows it in the frame are left for when its blocks are done,
 * or the error of the begin op's push (nothing pushed). The end op, once
 * the begin op is in, is pushed whatever it takes (vq__push_tail). */
enum { VQ__CTL_DEFERRED = 1 };
int vq__ctl_push(struct fop *f);
/* Pushes a frame's ops from the k-th in program order, then its tail. A
 * push that fails (vq_push_opr's VQ_ENOMEM) fails the frame's run, leaves
 * the rest of the frame's ops unpushed, retires the plan (broken) and
 * pushes tail_cut or tail. */
void vq__frame_push_from(struct frame *fr, int k);

/* Pushes a prebuilt op of a plan, once: 0, or vq_push_opr's error. It
 * returns VQ_ENOMEM when the engine's pools cannot grow (a var block for
 * each of the op's vars is taken at every push; the op itself comes from
 * the opr's spare only while no earlier push of it is in flight). Never
 * retried in a loop: the memory may never come back, and the earlier push
 * may wait for this very thread (an op pushing, on a single worker). */
int vq__push_prebuilt(vq_engine *e, vq_opr *o);
/* Pushes a plan's op that a run cannot go without once part of it is in
 * (a frame's tail, a control op's end). Such ops are built with a reserve
 * (vq__opr_reserve) for the pushes an execution has in flight, so the
 * push does not fail for memory even when memory is out for good; beyond
 * that it is retried, after the plan's earlier runs have ended when this
 * thread may wait for them (they give their reserve back), else after
 * short sleeps. */
void vq__push_tail(struct plan *pl, vq_opr *o);

/* The run an op execution belongs to: the root frame's n-th execution of
 * an op is the n-th run's; other frames belong to their instance's run.
 * In the root frame each call counts one execution (f->execs): call it
 * once per execution and keep the answer. */
struct run *vq__fop_run(struct fop *f);

/* Run-time bookkeeping shared with control.c. */
void vq__run_fail(struct run *r, const struct pop *t, int err, const char *msg);
/* Whether run r was cancelled or is past its deadline: if so fails it
 * (VQ_ECANCELED, VQ_ETIMEDOUT) naming op t and, for a loop (iter >= 0), its
 * iteration, and returns true. What every op checks before it starts. */
bool vq__run_stopping(struct run *r, const struct pop *t, int64_t iter);
/* Marks every run of ex in flight cancelled; returns how many. */
int vq__runs_cancel(vq_exec *ex);
void vq__slot_drop(struct plan *pl, struct pvar *v, void *stream);
/* Puts t (a reference the caller gives) into slot v, dropping what it held. */
void vq__slot_set(struct run *r, struct plan *pl, struct pvar *v, vq_tensor *t);
void vq__fop_inputs_done(struct fop *f, void *stream);

/* ---- between preparation (plan.c), segments.c and the cache ---- */

/* Whether the root's vars get their engine vars only when a segment keeps
 * them (the comment at vq__root_lazy in plan.c says which roots). */
bool vq__root_lazy(const struct plan *pl);
/* Gives root var v its engine var if it has none: 0, or VQ_EINVAL for a
 * scope tensor of another engine, VQ_ENOMEM (messages set). */
int vq__root_ev(struct plan *pl, int v);
/* Prepares a new plan (plan.c), refs 0, not in the cache: 0, or the
 * failure (message set; a plan half made is buried). Called locked. */
int vq__plan_new(vq_exec *ex, const vq_program *p, vq_scope *s, const char *const *feeds,
                 int nfeeds, const vq__meta *feed_metas, const char *const *fetches, int nfetches,
                 struct plan **out);
/* Whether some op of p reads an input's value to infer (vq__reads_values):
 * its plans are specialized on the feeds' shapes (plan_cache.c). */
bool vq__program_reads_values(const vq_program *p);
void vq__plan_destroy(struct plan *pl);

/* Hands pl to ex's dead list, destroyed outside the lock (plan_cache.c:
 * bury and reap). Called locked. */
void vq__plan_bury(vq_exec *ex, struct plan *pl);

/* ---- between the plan cache (plan_cache.c) and run.c ---- */

/* Finds the plan for (p, s, feeds, fetches) in ex's cache or prepares it,
 * and pins it (one more reference, which vq__plan_unpin drops). Takes the
 * executor's lock. who: the public call, in front of a failure's message. */
int vq__plan_acquire(vq_exec *ex, const char *who, const vq_program *p, vq_scope *s,
                     const char *const *feeds, int nfeeds, const vq_feed *feed_tensors,
                     const char *const *fetches, int nfetches, struct plan **out);
void vq__plan_unpin(vq_exec *ex, struct plan *pl);
void vq__meta_of_tensor(vq__meta *m, const vq_tensor *t);

/* The bodies of a plan's prebuilt engine ops (run.c), which preparation
 * names in them: one kernel op (sync or async kernel), a segment of kernel
 * ops (from its first fop), and the run's final op (arg: the plan). */
int vq__op_exec(void *arg, const vq_exec_ctx *x);
void vq__op_exec_async(void *arg, const vq_exec_ctx *x, vq_done *done);
int vq__seg_exec(void *arg, const vq_exec_ctx *x);
int vq__final_exec(void *arg, const vq_exec_ctx *x);

#endif
