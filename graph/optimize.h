/* The optimization stage of preparation (optimize.c): rewrites of an
 * inference program into an equivalent one with fewer ops, which the
 * executor prepares instead of the program it was given. */
#ifndef VARQ_GRAPH_OPTIMIZE_H
#define VARQ_GRAPH_OPTIMIZE_H

#include "graph_internal.h"

#include <stdbool.h>

/* The passes, in the order they run (bits of a pass set). */
enum {
    VQ__OPT_NOOP = 1u << 0,        /* "noop": reshape, cast, transpose that change nothing */
    VQ__OPT_CONV_ACT = 1u << 1,    /* "conv-act": an activation into conv2d's act */
    VQ__OPT_ELEMENTWISE = 1u << 2, /* "elementwise": chains into fused_elementwise */
    VQ__OPT_ALL = (1u << 3) - 1,
};

/* Reads a VARQ_OPT setting (NULL or "": every pass) into *passes: "0" or
 * "none" none, "1" or "all" all; a comma-separated list of pass names
 * selects only those, and one of "-name" or "+name" items turns single
 * passes off or on from all. VQ_EINVAL (message set, naming the passes)
 * for anything else. */
int vq__opt_parse(const char *spec, unsigned *passes);

/* What the passes did (counts of rewrites). */
typedef struct vq__opt_stats {
    int noop;       /* ops removed */
    int hard_swish; /* x * clip(x + 3, 0, 6) / 6 patterns made one hard_swish */
    int silu;       /* x * sigmoid(x) made one silu */
    int conv_act;   /* activations moved into a conv2d */
    int fused;      /* fused_elementwise ops made */
    int fused_ops;  /* ops they replaced */
} vq__opt_stats;

/* A scope tensor's value as a scalar (f32 or f64, one element, on the
 * host), or false: what the hard-swish pattern's constants are read with.
 * user: vq__program_optimize's scope. */
typedef bool (*vq__opt_scalar_fn)(void *user, const char *name, double *v);

/* The passes in `passes` applied to p, if p is an inference program (one
 * block; no gradient op, no op writing a persistable var) with every op
 * known: *out a new program (the caller frees it), or NULL when no pass
 * changed anything or p is not one. keep: the names of the feeds and
 * fetches, which stay (their vars are neither removed nor renamed).
 * scalar (may be NULL) reads constants. st (may be NULL) gets the counts.
 * 0, or VQ_ENOMEM. Reads p only: thread-safe as reading a program is. */
int vq__program_optimize(const vq_program *p, unsigned passes, const char *const *keep, int nkeep,
                         vq__opt_scalar_fn scalar, void *user, vq_program **out, vq__opt_stats *st);

/* The ops of block 0 of the most recently used plan of ex (the program it
 * runs, after the passes), or -1 when it has none: what tests look at to
 * see that a pass fired (plan_cache.c). Takes the executor's lock. */
int vq__exec_plan_nops(vq_exec *ex);

#endif
