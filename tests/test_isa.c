/* VARQ_ISA (ops/math/isa.c): the level varq's own kernels use is the CPU's,
 * capped by the variable; a bad value is ignored with a message. Criterion
 * runs each test in its own process, and the level is read at the first
 * call, so each test sets the variable before anything asks. The kernels'
 * results at each level are checked by running the numeric suites under
 * each one (scripts/test.sh). */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include <stdbool.h>
#include <stdlib.h>

#include "../ops/math/isa.h"
#include "../ops/math/sgemm.h"

static enum vq__isa_level cpu_level(void)
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

static enum vq__isa_level lower(enum vq__isa_level a, enum vq__isa_level b)
{
    return a < b ? a : b;
}

Test(isa, unset_is_the_cpu)
{
    unsetenv("VARQ_ISA");
    cr_assert_eq(vq__isa(), cpu_level());
    cr_assert_eq(vq__isa(), vq__isa(), "read once, the same every call");
}

Test(isa, portable_caps_everything)
{
    setenv("VARQ_ISA", "portable", 1);
    cr_assert_eq(vq__isa(), VQ__ISA_PORTABLE);
    cr_assert_not(vq__sgemm_ok(), "varq's own product off: OpenBLAS");
}

Test(isa, avx2_caps_avx512)
{
    setenv("VARQ_ISA", "avx2", 1);
    unsetenv("VARQ_GEMM");
    cr_assert_eq(vq__isa(), lower(VQ__ISA_AVX2, cpu_level()));
    cr_assert_eq(vq__sgemm_level(),
                 lower(VQ__ISA_AVX2, cpu_level()) == VQ__ISA_AVX2 ? VQ__ISA_AVX2 : VQ__ISA_PORTABLE,
                 "the product at AVX2 width");
}

Test(isa, above_the_cpu_gives_the_cpu)
{
    setenv("VARQ_ISA", "avx512", 1);
    cr_assert_eq(vq__isa(), cpu_level());
}

static void capture_stderr(void)
{
    cr_redirect_stderr();
}

Test(isa, bad_value_ignored_and_said, .init = capture_stderr)
{
    setenv("VARQ_ISA", "avx9", 1);
    cr_assert_eq(vq__isa(), cpu_level());
    char want[160];
    snprintf(want, sizeof want,
             "varq: VARQ_ISA=\"avx9\" is not portable, avx2 or avx512: ignored (using %s)\n",
             vq__isa_name(cpu_level()));
    fflush(stderr);
    cr_assert_stderr_eq_str(want);
}

Test(isa, names)
{
    cr_assert_str_eq(vq__isa_name(VQ__ISA_PORTABLE), "portable");
    cr_assert_str_eq(vq__isa_name(VQ__ISA_AVX2), "avx2");
    cr_assert_str_eq(vq__isa_name(VQ__ISA_AVX512), "avx512");
    cr_assert_str_eq(vq__isa_name((enum vq__isa_level)7), "?");
}
