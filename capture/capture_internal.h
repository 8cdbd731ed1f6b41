/* Private structures of capture (include/varq/capture.h), shared by its
 * files: capture.c (the states, their locks and the hooks ops/ calls),
 * record.c (recording calls into a segment, the tree of nodes), replay.c
 * (plans, the cache and the pushes that replay a segment) and backward.c
 * (imperative autodiff). capture.c's head says how they fit and the lock
 * order. */
#ifndef VARQ_CAPTURE_INTERNAL_H
#define VARQ_CAPTURE_INTERNAL_H

#include <varq/capture.h>

#include "graph_services.h"
#include "spinlock.h"

#include <stdatomic.h>
#include <stdbool.h>

enum { FOREIGN = -1000 }; /* record: a tensor is another segment's (S->foreign) */
enum { K_EXT_READ = 1, K_EXT_WRITE = 2, K_NEW_KEEP = 3, K_NEW_TEMP = 4, K_NEW = 5 };

struct plan;
struct recipe;

struct node {
    struct node *parent, *child, *sibling;
    struct node *all_next; /* every node of the cache, for freeing */
    uint64_t hash;
    const vq__op_def *def;
    vq_ctx dev; /* the call's device (the check depends on it) */
    int depth;  /* calls on the path, this one included */
    int nin, nout;
    int *wire;            /* nin + nout slot numbers */
    unsigned char *fresh; /* per output: created by the call (not given) */
    vq__meta *meta;       /* inputs' metas, then the outputs' (inferred) */
    vq_attr *attrs;
    int nattrs;
    void *params;
    struct plan *plans;     /* plans ending here */
    struct recipe *recipes; /* vq_capture_backward recipes from here */
    /* Per output: a CPU tensor of the output's meta that a run of a plan
     * through here made as this call's output, used as a temporary and
     * handed back when it ended (see spare_put), or NULL. The next call
     * that matches this node takes it instead of making a tensor. */
    _Atomic(vq_tensor *) *spare;
};

struct cache {
    atomic_int refs; /* its state's + one per run in flight */
    struct node root;
    struct node *all;
    int nnodes;
    struct plan *lru_head, *lru_tail;
    int nplans;
};

struct state {
    vq__spinlock lock; /* state_lock */
    vq_engine *e;
    struct state *next;                /* the thread's states */
    struct state *reg_prev, *reg_next; /* under states_lock: the registry */
    int refs;                          /* under states_lock: the thread's + cutters' */
    /* e was freed (engine_freed): written under the state's lock and
     * states_lock; read under either, or relaxed by the state's own
     * thread, which learns of the free through the caller's own ordering
     * (it may not use e meanwhile). */
    atomic_bool dead;
    bool active;
    struct cache *cache;
    struct node *at; /* the segment's last call (cache->root: empty) */
    int nops;
    vq_tensor **slot;
    unsigned char *kind;
    int nslots, cap;
    vq_ctx dev;
    int first_err;      /* of pushes since vq_capture_begin */
    vq_tensor *foreign; /* record: the tensor another segment claimed */
    struct node *last;  /* the node the last recorded call matched */
    /* vq_capture_backward replays a recipe: its new tensors get no
     * caller's reference (the segment's keeps them), and the size cut
     * waits for the end of the replay (it would release them). */
    bool replaying;
    vq_capture_stats stats;
};

/* A state's lock: taken by its thread for every recorded call, and only
 * now and then by another (a cut), so the engine's spinlock: one exchange
 * to take it, a store to let go (a mutex costs two read-modify-writes and
 * more instructions per call); a waiter spins a little, then yields the
 * core, since the holder may be preempted. */
static inline void state_lock(struct state *S)
{
    vq__spin_lock(&S->lock);
}

static inline void state_unlock(struct state *S)
{
    vq__spin_unlock(&S->lock);
}

static inline void state_reset_segment(struct state *S)
{
    S->at = &S->cache->root;
    S->nops = 0;
    S->nslots = 0;
}

/* capture.c: the calling thread's live state for e, or NULL. */
struct state *vq__capture_state_find(vq_engine *e);

/* record.c */
/* Records one call into S's segment (S locked, every tensor of the call
 * either S's or no capture's). Returns 0, the call's error, FOREIGN (a
 * tensor is another segment's: S->foreign), or VQ__CAPTURE_EAGER after
 * cutting the segment (the call runs eagerly). */
int vq__capture_record(struct state *S, const char *type, vq_tensor *const *in, int nin,
                       vq_tensor **out, int nout, const vq_attr *attrs, int nattrs,
                       const vq_ctx *dev_hint);
/* Records a gradient op of a recipe whose last replay matched node n, if
 * the call is wired as it was then; 1 when it does not apply. */
int vq__capture_record_known(struct state *S, struct node *n, vq_tensor *const *in, int nin,
                             vq_tensor **out, int nout);
/* Deep copies of attributes (*ok false when memory ran out) and their free. */
vq_attr *vq__capture_attrs_copy(const vq_attr *src, int n, bool *ok);
void vq__capture_attrs_free(vq_attr *a, int n);

/* replay.c */
struct cache *vq__capture_cache_new(void);
void vq__capture_cache_unref(struct cache *c);
/* Pushes the segment of S as one engine op and starts an empty one
 * (S locked): 0 or the push's error. With held, a held push. */
int vq__capture_seg_cut_held(struct state *S, int cause, void **held);
int vq__capture_seg_cut(struct state *S, int cause);

/* backward.c: frees a node's list of recipes. */
void vq__capture_recipes_free(struct recipe *r);

#endif
