/* Counter-based random numbers, written once for the CPU kernels
 * (ops/cpu/init.c) and the CUDA ones (ops/cuda/elementwise.cu): Philox4x32-10
 * (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11),
 * the generator cuRAND and JAX use. Element i of a random tensor is a pure
 * function of (seed, i), so the values do not depend on how many workers
 * fill the tensor, in what order, or on which device: both sides must
 * draw the same words, so this is their one copy. Plain C, and
 * __host__ __device__ under nvcc (shape_shared.h's VQ__SHARED_FN). */
#ifndef VARQ_OPS_RNG_SHARED_H
#define VARQ_OPS_RNG_SHARED_H

#include "shape_shared.h" /* VQ__SHARED_FN */

#include <stdint.h>

#define VQ__PHILOX_M0 0xD2511F53u
#define VQ__PHILOX_M1 0xCD9E8D57u
#define VQ__PHILOX_W0 0x9E3779B9u /* key schedule: golden ratio */
#define VQ__PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

/* Philox4x32-10: four 32-bit random words for (counter, key). The same
 * (seed, index) always gives the same words, on any thread or device. */
VQ__SHARED_FN void vq__philox(uint64_t counter, uint64_t key, uint32_t out[4])
{
    uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
#ifdef __CUDACC__
#pragma unroll
#endif
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)VQ__PHILOX_M0 * c0, p1 = (uint64_t)VQ__PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
        k0 += VQ__PHILOX_W0;
        k1 += VQ__PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* A key derived from key and v (JAX's fold_in): the first two words of
 * Philox at counter v under key. Distinct v give unrelated keys, so each
 * draw of a default generator (the executor's: its seed folded with a
 * plan, an op and the op's execution; imperative calls': the seed folded
 * with the call's number) gets a stream of its own. */
VQ__SHARED_FN uint64_t vq__rng_fold(uint64_t key, uint64_t v)
{
    uint32_t w[4];
    vq__philox(v, key, w);
    return ((uint64_t)w[1] << 32) | w[0];
}

/* The top 53 bits of the 64-bit word hi:lo (an f64's uniform draw). */
VQ__SHARED_FN uint64_t vq__bits53(uint32_t hi, uint32_t lo)
{
    return (((uint64_t)hi << 32) | lo) >> 11;
}

#endif
