/* Private interface between scopes (scope.c) and the executor (plan.c). */
#ifndef VARQ_GRAPH_SCOPE_H
#define VARQ_GRAPH_SCOPE_H

#include <varq/graph.h>

#include <stdint.h>

/* Changes whenever a binding is added, replaced or dropped: a plan bound to
 * a scope's tensors checks it before each run. */
uint64_t vq__scope_generation(vq_scope *s);

/* A number no other scope of the process has had (0 for NULL). */
uint64_t vq__scope_id(const vq_scope *s);

/* vq_scope_get under the scope's lock, retained (or NULL). */
vq_tensor *vq__scope_take(vq_scope *s, const char *name);

/* Binds name to t only if nothing is bound yet; returns the bound tensor,
 * retained (t itself or the earlier one). NULL on allocation failure. */
vq_tensor *vq__scope_get_or_set(vq_scope *s, const char *name, vq_tensor *t);

#endif
