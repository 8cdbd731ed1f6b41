/* The program shape of the executor benchmarks, shared by exec_bench.c
 * (varq's prepared plan and raw prebuilt ops) and exec_taskflow.cpp (the
 * same graph as a static tf::Taskflow), so that both run the same ops with
 * the same edges: x -> t1 -> ... -> tN, op i being, by i % 3, add(t[i-1],
 * t[j]) with j a pseudo-random earlier var (fan-in), scale (-0.5 x + 1) or
 * relu of t[i-1], all on one float each; x is fed, tN fetched. Written to
 * compile as C11 and as C++17. */
#ifndef VARQ_BENCH_EXEC_CHAIN_H
#define VARQ_BENCH_EXEC_CHAIN_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define FEED_VALUE 3.0f
#define SCALE (-0.5f)
#define BIAS 1.0f

enum { OP_ADD, OP_SCALE, OP_RELU };

/* Op i (1 .. n) of the chain: kind, and the earlier vars it reads (var 0 is
 * x, var i is ti). b is -1 for a unary op. */
struct chain_op {
    int kind, a, b, c;
};

/* ops[1 .. n] (ops[0] unused), malloc'ed (the caller frees), or NULL. */
static inline struct chain_op *chain_make(int n)
{
    struct chain_op *ops = (struct chain_op *)malloc((size_t)(n + 1) * sizeof *ops);
    if (!ops)
        return NULL;
    uint64_t rng = 42;
    for (int i = 1; i <= n; i++) {
        struct chain_op *o = &ops[i];
        o->kind = i % 3 == 0 ? OP_ADD : i % 3 == 1 ? OP_SCALE : OP_RELU;
        o->a = i - 1;
        o->b = -1;
        o->c = i;
        if (o->kind == OP_ADD) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            o->b = (int)((rng >> 33) % (uint64_t)(i - 1)); /* 0 .. i-2: not a */
        }
    }
    return ops;
}

/* The body every side computes, on vals[var]. */
static inline void chain_step(const struct chain_op *o, float *vals)
{
    float a = vals[o->a];
    switch (o->kind) {
    case OP_ADD: vals[o->c] = a + vals[o->b]; break;
    case OP_SCALE: vals[o->c] = SCALE * a + BIAS; break;
    default: vals[o->c] = a > 0 ? a : 0; break;
    }
}

/* tN of the chain computed serially, or NaN without memory. */
static inline float chain_expect(const struct chain_op *ops, int n)
{
    float *vals = (float *)malloc((size_t)(n + 1) * sizeof *vals);
    if (!vals)
        return NAN;
    vals[0] = FEED_VALUE;
    for (int i = 1; i <= n; i++)
        chain_step(&ops[i], vals);
    float r = vals[n];
    free(vals);
    return r;
}

#endif
