/* Random engine workloads checked against a serial model (serial
 * equivalence and errors, docs/design/engine.md). Uses only the public
 * API, so that it also builds outside the tree
 * against varq.pc, and no test framework, so that it also runs under
 * ThreadSanitizer (where Criterion cannot start). */
#ifndef VARQ_TESTS_WORKLOAD_H
#define VARQ_TESTS_WORKLOAD_H

#include <varq/engine.h>

#include <stddef.h>
#include <stdint.h>

/* A flag of workload_check beside vq_engine_opts.flags: some ops (sync ones)
 * run on GPU 0 or 1, compute or copy streams, their effect enqueued on the
 * op's stream with vq_gpu_launch_host. Needs two devices: the caller sets
 * VARQ_GPU_BACKEND=emulated and VARQ_GPU_EMUL_DEVICES=2. */
#define WORKLOAD_GPU (1u << 30)

/* GPUs the WORKLOAD_GPU ops use (ids 0 .. workload_gpus - 1): 2 unless the
 * caller has fewer (CUDA on a one-GPU machine). */
extern int workload_gpus;

/* Generates nops random steps from seed, runs them on an engine of the
 * given kind and worker count (flags: vq_engine_opts.flags, and
 * WORKLOAD_GPU) and through the
 * serial model, and compares every op's inputs, every value and every
 * error. Returns 0, or -1 with a sentence naming the seed in msg. *ran gets
 * the number of ops that ran (not skipped). */
int workload_check(int kind, int workers, unsigned flags, uint64_t seed, int nops, long *ran,
                   char *msg, size_t msglen);

/* The same on the caller's engine, which stays: the workload's vars are
 * freed at the end and vq_wait_all has cleared its error record. The
 * engine's own flags apply (flags here: only WORKLOAD_GPU). A caller that
 * runs workloads for hours so starts no engine, and no thread, per run. */
int workload_check_on(vq_engine *e, unsigned flags, uint64_t seed, int nops, long *ran,
                      char *msg, size_t msglen);

/* The same from npushers threads at once (2 .. 16) on a threaded engine:
 * each pushes nops / npushers steps of its own on 48 shared vars and 8 of
 * its own (only those are deleted), and the serial model replays every step
 * in the engine's push order, which ticket() gives: called by a pusher
 * right after each push (vq__push_ticket, internal to the library). */
int workload_check_pushers(int workers, int npushers, unsigned flags,
                           unsigned long (*ticket)(void), uint64_t seed, int nops, long *ran,
                           char *msg, size_t msglen);

/* VARQ_TEST_SEED if set, else the time; VARQ_TEST_OPS if set, else dflt. */
uint64_t workload_seed(void);
int workload_ops(int dflt);

#endif
