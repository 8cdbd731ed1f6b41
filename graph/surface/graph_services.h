/* The graph layer's surface, for the layers above it (onnx/, capture/,
 * dist/): the in-memory program (vars, ops, blocks; its builder's and
 * codec's private helpers), as graph/graph_internal.h declares it, and
 * through it the op runtime's surface (ops_services.h). Plans, scopes'
 * internals and the codec stay private to graph/ (plan.h, scope.h,
 * program.h are not reachable from above). */
#ifndef VARQ_GRAPH_SERVICES_H
#define VARQ_GRAPH_SERVICES_H

#include "../graph_internal.h"

#endif
