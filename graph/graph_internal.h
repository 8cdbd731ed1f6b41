/* Private structures of the graph layer: the in-memory program (what the
 * builder makes, the protobuf codec reads and writes, the executor and
 * autodiff walk), scopes, and plans.
 *
 * Vars live in one program-wide table (each remembers its block); an op
 * refers to its vars by index into that table, in the positional order of
 * its definition's slots (a variadic last slot repeats). Attributes are deep
 * copies owned by the program. */
#ifndef VARQ_GRAPH_INTERNAL_H
#define VARQ_GRAPH_INTERNAL_H

#include <varq/graph.h>

#include "ops_services.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* A bump allocator (arena.c): chunks from vq__malloc, everything freed at
 * once by vq__arena_free. Not thread-safe; align is a power of two. The
 * allocations return NULL when memory runs out (no message set). */
typedef struct vq__arena {
    struct vq__arena_chunk *chunks;
    char *at, *end;   /* the free part of the newest chunk */
    size_t next_size; /* bytes of the next chunk, doubling */
} vq__arena;

/* The big arrays of a plan (arena.c): malloc, calloc and free, except
 * that freed blocks are kept, up to VARQ_PLAN_RETAIN_MB, for the next
 * prepare to take instead of fresh pages from the kernel. Thread-safe. A
 * block of vq__big_alloc goes to vq__big_free only; NULL when memory
 * runs out (no message set). Aligned to 64 bytes. */
void *vq__big_alloc(size_t n);
void *vq__big_calloc(size_t n, size_t size);
void vq__big_free(void *p);

/* An empty arena whose first chunk will hold hint bytes. */
void vq__arena_init(vq__arena *a, size_t hint);
/* vq__arena_alloc's slow path: a new chunk, then the allocation in it. */
void *vq__arena_alloc_chunk(vq__arena *a, size_t size, size_t align);

/* Inline: preparation makes several small allocations per op (a call
 * each cost about 25 instructions per allocation). */
static inline void *vq__arena_alloc(vq__arena *a, size_t size, size_t align)
{
    uintptr_t at = ((uintptr_t)a->at + (align - 1)) & ~(uintptr_t)(align - 1);
    if (__builtin_expect(!a->at || at + size > (uintptr_t)a->end || at + size < at, 0))
        return vq__arena_alloc_chunk(a, size, align);
    a->at = (char *)(at + size);
    return (void *)at;
}
void *vq__arena_calloc(vq__arena *a, size_t n, size_t size, size_t align);
char *vq__arena_strdup(vq__arena *a, const char *s);
void vq__arena_free(vq__arena *a);

typedef struct vq__pvar {
    char *name;
    /* XXH3-64 of name (vq__name_hash), set with it: the name index and the
     * program's hash read it instead of the string */
    uint64_t name_hash;
    int block;
    vq_dtype dtype;
    int ndim;
    bool persistable;
    bool stop_gradient;         /* autodiff gives it no gradient and stops there */
    int64_t shape[VQ_MAX_DIMS]; /* -1: unknown */
} vq__pvar;

typedef struct vq__pop {
    char *type;
    const vq__op_def *def; /* NULL if the registry has no such op (decode keeps it;
                            * preparing reports it) */
    int nin, nout;
    int *in;  /* var indices, positional */
    int *out;
    vq_attr *attrs; /* deep copies: names, strings and lists owned here */
    int nattrs;
    int priority;   /* the engine priority of its executions (0: default) */
} vq__pop;

typedef struct vq__block {
    int parent; /* -1 for block 0 */
    int *ops;   /* indices into vq_program.ops, in order */
    int nops, cap;
} vq__block;

struct vq_program {
    vq__pvar *vars;
    int nvars, vars_cap;
    vq__pop *ops;
    int nops, ops_cap;
    vq__block *blocks;
    int nblocks, blocks_cap;
    /* name -> var index: open addressing, capacity a power of two, -1 empty */
    int *index;
    int index_cap;
    /* vq_program_hash's cache; cleared by every change */
    bool hash_valid;
    uint64_t hash;
    /* A frozen copy (vq__program_freeze): the program and everything it
     * points to live in this arena (itself inside it); read only. */
    vq__arena *frozen;
};

/* Index of var name, or -1. */
int vq__program_find_var(const vq_program *p, const char *name);
/* Block b's nesting depth (block 0: 0), capped at VQ_MAX_BLOCK_DEPTH + 1:
 * the walk up its parents stops there. Parents must come before their
 * children (the builder and the decoder see to it). */
int vq__block_depth(const vq_program *p, int b);
/* The hash of a var's name that vq__pvar.name_hash keeps: XXH3-64 of its
 * bytes (no terminator). */
uint64_t vq__name_hash(const char *name);

/* An op with def == NULL (decoded with a type the registry does not know)
 * keeps the slot name of each input, then of each output, as strings packed
 * after the NUL that ends its type, so that it encodes and dumps with the
 * slots it was read with. Code that copies a vq__pop copies its type with
 * this (malloc'd; NULL when memory runs out). */
char *vq__pop_type_dup(const vq__pop *op);

/* Sets attribute a (copied, as the op's schema types it) on op (an index
 * into p->ops), replacing one of that name. For autodiff, which marks a
 * while to keep its iterations. */
int vq__pop_attr_set(vq_program *p, int op, const vq_attr *a);

/* A deep copy of p (malloc'd; vq_program_free frees it). */
int vq__program_copy(const vq_program *p, vq_program **out);
/* A read-only deep copy of p in one arena (a few allocations instead of
 * several per var and op), for the executor's plans; vq_program_free
 * frees it. Nothing may modify it (no vq_program_add_*, no attribute
 * changes). */
int vq__program_freeze(const vq_program *p, vq_program **out);

/* The errors of the calls vq_optimizer_minimize and vq_lr_schedule_build
 * make for the user (vq_append_backward, the builder's vq_program_add_*)
 * name the call the user made first: rc, its message prefixed with fn
 * unless it starts with it. */
static inline int vq__named_failure(int rc, const char *fn)
{
    if (rc < 0 && strncmp(vq_errmsg(), fn, strlen(fn)) != 0)
        return vq__fail_prefixed(rc, "%s", fn);
    return rc;
}

#endif
