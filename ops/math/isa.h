/* Which x86-64 instruction set varq's own CPU kernels may use: what the CPU
 * has, capped by VARQ_ISA (portable, avx2 or avx512). Every kernel that has
 * an AVX2 or AVX-512 variant asks vq__isa() rather than the CPU, so one
 * switch runs the portable and AVX2 paths on a machine with AVX-512: the
 * test suite does, so that a machine without AVX-512 never meets a path
 * that was not tested (as OPENBLAS_CORETYPE does for OpenBLAS's kernels
 * and ONEDNN_MAX_CPU_ISA for oneDNN's). */
#ifndef VARQ_OPS_CPU_ISA_H
#define VARQ_OPS_CPU_ISA_H

enum vq__isa_level {
    VQ__ISA_PORTABLE = 0, /* C the compiler vectorizes for the build's baseline */
    VQ__ISA_AVX2 = 1,     /* AVX2 and FMA */
    VQ__ISA_AVX512 = 2,   /* AVX-512 F */
};

/* The level the kernels use: the CPU's, lowered to VARQ_ISA where that is
 * set. Read once (the first call); a VARQ_ISA that is not one of the three
 * names is ignored with one line on stderr, and one above the CPU's level
 * gives the CPU's. Thread-safe. */
enum vq__isa_level vq__isa(void);

/* The level's name, as VARQ_ISA spells it. */
const char *vq__isa_name(enum vq__isa_level l);

/* The CPU's own level, VARQ_ISA left aside: what tests and benchmarks
 * that walk every level up to the machine's read. Thread-safe. */
enum vq__isa_level vq__isa_cpu(void);

#endif
