/* The executor's memory plan (memplan.c): at preparation, the
 * intermediates of a straight-line CPU plan get offsets in one arena by
 * lifetime, so that a run takes one arena instead of allocating a tensor
 * per op output. plan.c builds and frees it, run.c takes an arena per run
 * and hands its tensors to the ops. See docs/design/memory.md. */
#ifndef VARQ_GRAPH_MEMPLAN_H
#define VARQ_GRAPH_MEMPLAN_H

#include "plan.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* One run's arena: the storage and, per planned var, a tensor header on
 * its bytes. The arena keeps one reference on each header for its whole
 * life, so that the slots' releases never free one: a header goes back to
 * 1 reference when the run's last reader lets go of it. */
struct memarena {
    struct memarena *next; /* in the plan's idle or retired list */
    void *data;
    vq_tensor **hdr; /* by planned index */
};

struct memplan {
    size_t bytes;         /* the arena's size */
    int n;                /* planned vars */
    int *index;           /* by program var: its planned index, or -1 */
    int *var;             /* by planned index: the program var */
    size_t *offset;       /* by planned index */
    vq__meta *meta;       /* by planned index */
    pthread_mutex_t lock; /* idle, nidle, retired */
    struct memarena *idle;
    int nidle;
    /* Arenas a run gave back while a slot still held one of their
     * headers (a run cut short by a failed push leaves values unread):
     * freed with the plan, after its slots. */
    struct memarena *retired;
};

/* Plans the arena of pl once plan_build_ops is done: sets pl->mem, or
 * leaves it NULL when nothing is planned (a GPU plan, a root with control
 * ops, VQ_EXEC_NO_MEMPLAN / VARQ_MEMPLAN=0, a root of more than
 * VQ__MEMPLAN_MAX_OPS ops, no var that qualifies). 0, or VQ_ENOMEM with a
 * message. Called locked (the executor's lock), before any run. */
enum { VQ__MEMPLAN_MAX_OPS = 4096 };
int vq__memplan_build(struct plan *pl);
/* Frees pl->mem and its arenas: after every run of pl has ended and after
 * the plan's slots were released. */
void vq__memplan_free(struct plan *pl);

/* An arena for a run of pl (an idle one, or a new one): NULL when pl has
 * no plan or when memory runs out, and then the run allocates its outputs
 * as it would without a plan. Thread-safe. */
struct memarena *vq__memplan_take(struct plan *pl);
/* Gives a run's arena back once every op of the run is done (the final
 * op). NULL is ignored. Thread-safe. */
void vq__memplan_give(struct plan *pl, struct memarena *a);

/* The header of program var v in arena a, or NULL when v is not planned.
 * hot path: no malloc, no lock. */
static inline vq_tensor *vq__memplan_tensor(const struct plan *pl, const struct memarena *a, int v)
{
    if (!a)
        return NULL;
    int k = pl->mem->index[v];
    return k >= 0 ? a->hdr[k] : NULL;
}

/* For tests: the plan most recently used by ex (its cache's head), its
 * arena size and, per program var of its program (nvars of them), the
 * planned offset and size (offset -1 when not planned). Returns the number
 * of planned vars, 0 when there is no plan, or VQ_EINVAL (no plan cached,
 * nvars not the program's). */
int vq__exec_memplan(vq_exec *ex, int nvars, int64_t *offset, size_t *size, size_t *arena);

#endif
