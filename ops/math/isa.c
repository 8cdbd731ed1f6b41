/* The instruction-set level of varq's own kernels (isa.h): the CPU's,
 * capped by VARQ_ISA. */
#include "isa.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_once_t isa_once = PTHREAD_ONCE_INIT;
static enum vq__isa_level isa_level;

static const char *const isa_names[] = {"portable", "avx2", "avx512"};

enum vq__isa_level vq__isa_cpu(void)
{
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx2 && __builtin_cpu_supports("avx512f"))
        return VQ__ISA_AVX512;
    if (avx2)
        return VQ__ISA_AVX2;
#endif
    return VQ__ISA_PORTABLE;
}

static void isa_init(void)
{
    isa_level = vq__isa_cpu();
    const char *e = getenv("VARQ_ISA");
    if (!e || !*e)
        return;
    for (int l = VQ__ISA_PORTABLE; l <= VQ__ISA_AVX512; l++)
        if (!strcmp(e, isa_names[l])) {
            if ((enum vq__isa_level)l < isa_level)
                isa_level = (enum vq__isa_level)l;
            return;
        }
    /* Read where no call can return an error (the first kernel that asks):
     * say so once, and keep the CPU's level. */
    fprintf(stderr, "varq: VARQ_ISA=\"%s\" is not portable, avx2 or avx512: ignored (using %s)\n",
            e, isa_names[isa_level]);
}

enum vq__isa_level vq__isa(void)
{
    pthread_once(&isa_once, isa_init);
    return isa_level;
}

const char *vq__isa_name(enum vq__isa_level l)
{
    return l >= VQ__ISA_PORTABLE && l <= VQ__ISA_AVX512 ? isa_names[l] : "?";
}
