/* varq: asynchronous, dependency-driven execution. Include this one header
 * to get every public module. */
#ifndef VARQ_VARQ_H
#define VARQ_VARQ_H

#include <varq/error.h>
#include <varq/version.h>
#include <varq/engine.h>
#include <varq/tensor.h>
#include <varq/ops.h>
#include <varq/op_register.h>
#include <varq/graph.h>
#include <varq/train.h>
#include <varq/capture.h>
#include <varq/onnx.h>
#include <varq/dist.h> /* without MPI in the build: stubs returning VQ_ENOSYS */

#endif
