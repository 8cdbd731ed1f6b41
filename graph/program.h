/* Private interface between the builder of programs (program.c) and the
 * two other views of them: the codec (program_codec.c), which makes
 * programs from untrusted bytes through the builder's own checks, and the
 * text dump (program_dump.c). The structures are in graph_internal.h. */
#ifndef VARQ_GRAPH_PROGRAM_H
#define VARQ_GRAPH_PROGRAM_H

#include "graph_internal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* arr with room for one more than n elements (realloc'd, doubling), or
 * NULL with arr untouched when memory runs out. */
void *vq__reserve_one(void *arr, int n, int *cap, size_t elem);

/* Var var is declared in block or in one of the blocks it is nested in. */
bool vq__var_visible(const vq_program *p, int var, int block);

/* Copies n attributes (checked already) into a new array: as their
 * schema's types for a known op, as they are for an unknown one. */
int vq__attrs_copy(vq_attr **out, const vq__op_def *def, const vq_attr *attrs, int n,
                   const char *type);

/* Frees what op owns and zeroes it. */
void vq__pop_free(vq__pop *op);

/* The strings after the NUL ending an unknown op's type (program.c's
 * head, vq__pop_type_dup). */
const char *vq__next_packed(const char *s);

/* Appends a block whose parent is parent (checked); its index. */
int vq__block_append(vq_program *p, int parent);

/* Declares a var after checking it; who starts the error messages.
 * Returns the var's index. */
int vq__var_declare(vq_program *p, int block, const char *name, int dtype, int ndim,
                    const int64_t *shape, bool persistable, const char *who);

/* Appends op (checked, its parts owned) to block; on failure frees them.
 * Returns its index in the block. */
int vq__op_append(vq_program *p, int block, vq__pop *op);

/* Looks up one var an op names: declared, and visible from block. who
 * names the op in errors. */
int vq__op_var(const vq_program *p, int block, const char *who, const char *dir,
               const char *slot, int i, const char *name);

#endif
