/* The dtypes added after the first five (tensor.h: f16, bf16, i8, u8, i16,
 * u16, u32, u64): sizes and names, wrapping, the refusal of ops that do
 * not take them (VQ__EXT_DTYPES), and the exact 16-bit float conversions
 * against an independent reference (numpy's float16 through
 * /usr/bin/python3, and bf16 by integer rounding of the f32 pattern). */
#include "opcheck.h"

#include "tensor_services.h"

#include <criterion/criterion.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tensors ---- */

Test(dtypes, wrap_takes_every_new_dtype_at_its_element_size)
{
    static const vq_dtype dts[] = {VQ_F16, VQ_BF16, VQ_I8, VQ_U8, VQ_I16, VQ_U16, VQ_U32, VQ_U64};
    _Alignas(8) unsigned char raw[64] = {0};
    for (size_t i = 0; i < sizeof dts / sizeof dts[0]; i++) {
        vq_tensor *t;
        int64_t n = 4;
        cr_assert_eq(vq_tensor_wrap(&t, dts[i], 1, &n, raw, NULL, NULL), 0, "%s", vq_errmsg());
        cr_assert_eq(vq_tensor_nbytes(t), 4 * vq_dtype_size(dts[i]));
        cr_assert_eq(vq_tensor_data(t), raw);
        vq_tensor_release(t);
        if (vq_dtype_size(dts[i]) > 1) /* misaligned for the element size */
            cr_assert_eq(vq_tensor_wrap(&t, dts[i], 1, &n, raw + 1, NULL, NULL), VQ_EINVAL);
    }
}

/* An op that does not take a new dtype refuses it by name, before its
 * kernel could misread the bytes. */
Test(dtypes, ops_without_the_dtype_refuse_it_naming_op_slot_and_dtype)
{
    vq_tensor *x;
    cr_assert_eq(vq_tensor_new(&x, VQ_F16, 2, (int64_t[]){3, 3}), 0);
    cr_assert_eq(oc_try("det", &x, 1, 1, NULL, 0), VQ_ENOSYS);
    cr_assert(strstr(vq_errmsg(), "det") && strstr(vq_errmsg(), "dtype f16") &&
                  strstr(vq_errmsg(), "input X"),
              "%s", vq_errmsg());
    vq_tensor_release(x);
    /* an output of a refused dtype, from an attribute */
    vq_attr at[] = {VQ_ATTR_IS("shape", ((int64_t[]){2, 2}), 2), VQ_ATTR_S("dtype", "u8"),
                    VQ_ATTR_F("value", 1)};
    cr_assert_eq(oc_try("fill_constant", NULL, 0, 1, at, 3), VQ_ENOSYS, "%s", vq_errmsg());
    cr_assert(strstr(vq_errmsg(), "fill_constant") && strstr(vq_errmsg(), "dtype u8"), "%s",
              vq_errmsg());
}

/* ---- the 16-bit floats: every pattern, every conversion level ---- */

#include "../ops/math/half.h"

#define PYTHON "/usr/bin/python3"

static char tmpdir[] = "/tmp/varq_dtypes_XXXXXX";

static void dir_make(void)
{
    cr_assert_not_null(mkdtemp(tmpdir));
}

static void dir_remove(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    cr_assert_eq(system(cmd), 0);
}

/* Runs a numpy script with the temporary directory as argv[1]. */
static void python(const char *script)
{
    char path[256], cmd[512];
    snprintf(path, sizeof path, "%s/script.py", tmpdir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("import sys, os\nimport numpy as np\nd = sys.argv[1]\n", f);
    fputs(script, f);
    cr_assert_eq(fclose(f), 0);
    snprintf(cmd, sizeof cmd, PYTHON " '%s' '%s'", path, tmpdir);
    cr_assert_eq(system(cmd), 0, "the numpy script failed");
}

static vq_tensor *load(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    vq_tensor *t;
    cr_assert_eq(vq_npy_load(path, &t), 0, "%s", vq_errmsg());
    return t;
}

static uint32_t f32_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

static float bits_f32(uint32_t b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* bf16 of an f32 pattern by integer rounding (to nearest, ties to even: the
 * carry into the exponent is right, up to infinity), NaN quiet */
static uint16_t bf16_ref(uint32_t b)
{
    if ((b & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)(b >> 16 | 0x40);
    return (uint16_t)((b + 0x7fffu + (b >> 16 & 1)) >> 16);
}

static const enum vq__isa_level levels[] = {VQ__ISA_PORTABLE, VQ__ISA_AVX2, VQ__ISA_AVX512};

/* Every f16 and bf16 pattern to f32: numpy's float16 values (NaN for NaN)
 * and the shifted pattern for bf16, the same bits at every level. */
Test(dtypes, every_16_bit_pattern_to_f32_is_exact_at_every_level, .init = dir_make,
     .fini = dir_remove)
{
    python("np.save(os.path.join(d, 'h.npy'), np.arange(65536, dtype='<u2').view('<f2')"
           ".astype('<f4'))\n");
    /* the instructions are what the vector levels use, where the CPU has them */
    bool f16c = false, bf16 = false;
#if defined(__x86_64__)
    unsigned a = 0, b = 0, c = 0, dd = 0;
    f16c = __get_cpuid(1, &a, &b, &c, &dd) && (c >> 29 & 1);
    bf16 = __get_cpuid_count(7, 1, &a, &b, &c, &dd) && (a >> 5 & 1);
#endif
    if (vq__isa_cpu() >= VQ__ISA_AVX512 && bf16)
        cr_assert_str_eq(vq__half_at(VQ__ISA_AVX512)->name, "avx512bf16");
    if (vq__isa_cpu() >= VQ__ISA_AVX2 && f16c)
        cr_assert_str_eq(vq__half_at(VQ__ISA_AVX2)->name, "f16c");
    vq_tensor *ref = load("h.npy");
    const float *want = vq_tensor_data(ref);
    static uint16_t all[65536];
    static float got[65536];
    for (int i = 0; i < 65536; i++)
        all[i] = (uint16_t)i;
    for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
        const struct vq__half_conv *h = vq__half_at(levels[l]);
        h->f16_to_f32(all, got, 65536);
        for (int i = 0; i < 65536; i++) {
            bool nan = isnan(want[i]);
            cr_assert(nan ? isnan(got[i]) && (f32_bits(got[i]) & 0x400000u)
                          : f32_bits(got[i]) == f32_bits(want[i]),
                      "%s: f16 0x%04x gives %a, numpy %a", h->name, i, got[i], want[i]);
            if (nan) /* quiet, sign and payload's top kept */
                cr_assert_eq(f32_bits(got[i]),
                             (uint32_t)(i & 0x8000) << 16 | 0x7fc00000u |
                                 (uint32_t)(i & 0x3ff) << 13,
                             "%s: f16 0x%04x", h->name, i);
            cr_assert_eq(f32_bits(got[i]), f32_bits(vq_f16_to_f32((uint16_t)i)));
        }
        h->bf16_to_f32(all, got, 65536);
        for (int i = 0; i < 65536; i++) {
            uint32_t b = (uint32_t)i << 16;
            if ((b & 0x7fffffffu) > 0x7f800000u)
                b |= 0x400000u;
            cr_assert_eq(f32_bits(got[i]), b, "%s: bf16 0x%04x gives %a", h->name, i, got[i]);
        }
    }
    vq_tensor_release(ref);
}

/* f32 values that probe the rounding: every f16 and bf16 value, the
 * midpoints between neighbours (ties) and one f32 ulp either side, the
 * overflow thresholds, f32 subnormals, and a walk over all f32 patterns
 * with a prime stride. */
static int64_t probe_values(float *out)
{
    int64_t n = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        float a = vq_f16_to_f32((uint16_t)i), b = vq_f16_to_f32((uint16_t)(i + 1));
        out[n++] = a;
        if (isfinite(a) && isfinite(b) && (i & 0x7fff) != 0x7bff && (i & 0x7fff) != 0x7fff) {
            float m = (float)(((double)a + b) / 2); /* exact in f32 */
            out[n++] = m;
            out[n++] = nextafterf(m, INFINITY);
            out[n++] = nextafterf(m, -INFINITY);
        }
        uint32_t hb = i << 16; /* bf16 ties: the pattern with only bit 15 set below */
        out[n++] = bits_f32(hb);
        out[n++] = bits_f32(hb | 0x8000u);
        out[n++] = bits_f32(hb | 0x8001u);
        out[n++] = bits_f32(hb | 0x7fffu);
    }
    static const float edge[] = {65504,     65519.99f,        65520,     65536,
                                 1e9f,      3.4028235e38f,    INFINITY,  0x1p-24f,
                                 0x1p-25f,  0x1.000002p-25f,  0x1p-26f,  1e-45f,
                                 0x1p-149f, 0x1.fffffcp-127f, 0x1p-126f, 0x1.ff8p-127f};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++) {
        out[n++] = edge[i];
        out[n++] = -edge[i];
    }
    for (uint64_t b = 0; b < (UINT64_C(1) << 32); b += 65521)
        out[n++] = bits_f32((uint32_t)b);
    return n;
}

#define NPROBE (65536 * 8 + 64 + 65600)

Test(dtypes, f32_to_16_bit_floats_rounds_to_nearest_even_at_every_level, .init = dir_make,
     .fini = dir_remove)
{
    static float x[NPROBE];
    int64_t n = probe_values(x);
    cr_assert_leq(n, NPROBE);
    vq_tensor *xt;
    cr_assert_eq(vq_tensor_from(&xt, VQ_F32, 1, &n, x), 0);
    char path[256];
    snprintf(path, sizeof path, "%s/x.npy", tmpdir);
    cr_assert_eq(vq_npy_save(path, xt), 0);
    vq_tensor_release(xt);
    python("np.save(os.path.join(d, 'h.npy'), np.load(os.path.join(d, 'x.npy')).astype('<f2')"
           ".view('<u2'))\n");
    vq_tensor *ref = load("h.npy");
    const uint16_t *want = vq_tensor_data(ref);
    static uint16_t got[NPROBE];
    for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
        const struct vq__half_conv *h = vq__half_at(levels[l]);
        h->f32_to_f16(x, got, n);
        for (int64_t i = 0; i < n; i++) {
            bool nan = isnan(x[i]);
            cr_assert(nan ? (got[i] & 0x7c00) == 0x7c00 && (got[i] & 0x200) : got[i] == want[i],
                      "%s: f32 %a (0x%08x) gives f16 0x%04x, numpy 0x%04x", h->name, x[i],
                      f32_bits(x[i]), got[i], want[i]);
            cr_assert_eq(got[i], vq_f32_to_f16(x[i]), "%s: %a: not the portable bits", h->name,
                         x[i]);
        }
        h->f32_to_bf16(x, got, n);
        for (int64_t i = 0; i < n; i++)
            cr_assert_eq(got[i], bf16_ref(f32_bits(x[i])), "%s: f32 %a (0x%08x) gives bf16 0x%04x",
                         h->name, x[i], f32_bits(x[i]), got[i]);
    }
    vq_tensor_release(ref);
}

/* f64 rounds once: a double just past an f16 or bf16 tie goes up, where a
 * detour through f32 would make it the tie and round to even. */
Test(dtypes, f64_to_16_bit_floats_rounds_once, .init = dir_make, .fini = dir_remove)
{
    python("x = np.array([1 + 2**-11 + 2**-40, 1 + 2**-11, 1 + 3 * 2**-11, -(1 + 2**-11 + 2**-40),"
           " 65519.999, 65520.0, 2**-25, 2**-25 + 2**-60, 2**-26, 1e-300, 1e300, 0.1, 1/3.],"
           " dtype='<f8')\n"
           "np.save(os.path.join(d, 'x.npy'), x)\n"
           "np.save(os.path.join(d, 'h.npy'), x.astype('<f2').view('<u2'))\n");
    vq_tensor *x = load("x.npy"), *want = load("h.npy");
    const double *xv = vq_tensor_data(x);
    for (int64_t i = 0; i < vq_tensor_numel(x); i++)
        cr_assert_eq(vq_f64_to_f16(xv[i]), ((uint16_t *)vq_tensor_data(want))[i],
                     "%a: 0x%04x, numpy 0x%04x", xv[i], vq_f64_to_f16(xv[i]),
                     ((uint16_t *)vq_tensor_data(want))[i]);
    /* bf16: 1 + 2^-8 is a tie (to 1), a hair above goes up */
    cr_assert_eq(vq_f64_to_bf16(1 + 0x1p-8), 0x3f80);
    cr_assert_eq(vq_f64_to_bf16(1 + 0x1p-8 + 0x1p-40), 0x3f81);
    cr_assert_eq(vq_f64_to_bf16(1 + 0x3p-8), 0x3f82);
    cr_assert_eq(vq_f64_to_bf16(0x1.ffp127), 0x7f80); /* past the largest finite: inf */
    cr_assert_eq(vq_f64_to_bf16(-1e300), 0xff80);
    cr_assert_eq(vq_f64_to_bf16(1e-300), 0);
    vq_tensor_release(x);
    vq_tensor_release(want);
}

/* ---- cast: every pair ---- */

static const struct {
    vq_dtype dt;
    const char *np; /* numpy's name; NULL for bf16 */
} cast_types[] = {
    {VQ_F32, "float32"}, {VQ_F64, "float64"}, {VQ_I32, "int32"},  {VQ_I64, "int64"},
    {VQ_BOOL, "bool"},   {VQ_F16, "float16"}, {VQ_BF16, NULL},    {VQ_I8, "int8"},
    {VQ_U8, "uint8"},    {VQ_I16, "int16"},   {VQ_U16, "uint16"}, {VQ_U32, "uint32"},
    {VQ_U64, "uint64"},
};
#define NCAST (int)(sizeof cast_types / sizeof cast_types[0])

/* Each source array (values exact in its dtype, inside every integer's
 * range when they are floats, so numpy's astype is defined) and numpy's
 * astype to every other dtype; bf16 as f32 values rounded by bf16_rne, and
 * read through its f32 values. */
static const char *cast_script =
    "def bf16_rne(x):\n"
    "    b = x.astype('<f4').view('<u4').astype(np.uint64)\n"
    "    return ((b + 0x7fff + ((b >> 16) & 1)) >> 16).astype('<u2')\n"
    "fl = [-0.75, 0.0, 0.5, 1.5, 2.5, 101.0, 127.5, 3.25, -0.0, 126.75]\n"
    "def values(t):\n"
    "    if t == 'bool': return np.array([0, 1, 1, 0], dtype=bool)\n"
    "    if t in ('float32', 'float64', 'float16', 'bf16'): return np.array(fl, dtype='float64')\n"
    "    i = np.iinfo(t)\n"
    "    v = [0, 1, 100, int(i.max), int(i.max) - 1] + ([int(i.min), -1000 % (int(i.max) + 1) - "
    "(int(i.max) + 1) if i.min else 0, -1] if i.min else [])\n"
    "    return np.array(v, dtype=t)\n"
    "names = ['float32', 'float64', 'int32', 'int64', 'bool', 'float16', 'bf16', 'int8', 'uint8',"
    " 'int16', 'uint16', 'uint32', 'uint64']\n"
    "for s in names:\n"
    "    v = values(s)\n"
    "    src = bf16_rne(v).view('V2') if s == 'bf16' else v.astype(s)\n"
    "    np.save(os.path.join(d, 's_%s.npy' % s), src)\n"
    "    vals = (bf16_rne(v).astype('<u4') << 16).view('<f4') if s == 'bf16' else src\n"
    "    for t in names:\n"
    "        out = bf16_rne(vals.astype('float32')).view('V2') if t == 'bf16' else vals.astype(t)\n"
    "        np.save(os.path.join(d, 'c_%s_%s.npy' % (s, t)), out)\n";

/* cast between every pair of the 13 dtypes against numpy's astype (bf16:
 * the reference's integer rounding), the integer extremes included:
 * narrowing integers wrap, integers round to the floats once. */
Test(dtypes, cast_between_every_pair_matches_numpy, .init = dir_make, .fini = dir_remove)
{
    python(cast_script);
    for (int s = 0; s < NCAST; s++) {
        char name[64];
        const char *sn = cast_types[s].np ? cast_types[s].np : "bf16";
        snprintf(name, sizeof name, "s_%s.npy", sn);
        vq_tensor *x = load(name);
        cr_assert_eq(vq_tensor_dtype(x), cast_types[s].dt);
        for (int t = 0; t < NCAST; t++) {
            const char *tn = cast_types[t].np ? cast_types[t].np : "bf16";
            snprintf(name, sizeof name, "c_%s_%s.npy", sn, tn);
            vq_tensor *want = load(name);
            vq_attr at = VQ_ATTR_S("dtype", vq_dtype_name(cast_types[t].dt));
            vq_tensor *got = oc_run1("cast", &x, 1, &at, 1);
            cr_assert_eq(vq_tensor_dtype(got), cast_types[t].dt);
            size_t es = vq_dtype_size(cast_types[t].dt);
            for (int64_t i = 0; i < vq_tensor_numel(x); i++)
                cr_assert(!memcmp((char *)vq_tensor_data(got) + i * es,
                                  (char *)vq_tensor_data(want) + i * es, es),
                          "%s to %s, element %lld: %.17g, numpy %.17g", sn, tn, (long long)i,
                          oc_get(got, i), oc_get(want, i));
            vq_tensor_release(got);
            vq_tensor_release(want);
        }
        vq_tensor_release(x);
    }
}

/* What numpy leaves undefined, as cast documents it: floats to integers
 * saturate (negative to 0 for the unsigned), NaN gives 0; NaN stays NaN
 * and overflow gives infinity in the 16-bit floats. */
Test(dtypes, cast_saturates_floats_to_integers_and_overflows_to_infinity)
{
    double v[] = {NAN, 1e30, -1e30, 300.7, -300.7, -0.9, 65520, -65519.9, 1e39};
    vq_tensor *x = oc_from(VQ_F64, 1, (int64_t[]){9}, v);
    struct {
        const char *to;
        double want[9];
    } rows[] = {
        {"i8", {0, 127, -128, 127, -128, 0, 127, -128, 127}},
        {"u8", {0, 255, 0, 255, 0, 0, 255, 0, 255}},
        {"i16", {0, 32767, -32768, 300, -300, 0, 32767, -32768, 32767}},
        {"u16", {0, 65535, 0, 300, 0, 0, 65520, 0, 65535}},
        {"u32", {0, 4294967295.0, 0, 300, 0, 0, 65520, 0, 4294967295.0}},
        {"u64", {0, 18446744073709551615.0, 0, 300, 0, 0, 65520, 0, 18446744073709551615.0}},
        {"f16",
         {NAN, INFINITY, -INFINITY, 300.75, -300.75, -0.89990234375, INFINITY, -65504, INFINITY}},
        {"bf16",
         {NAN, 1.0002555517425873e30, -1.0002555517425873e30, 300, -300, -0.8984375, 65536, -65536,
          INFINITY}},
    };
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        vq_attr at = VQ_ATTR_S("dtype", rows[r].to);
        vq_tensor *got = oc_run1("cast", &x, 1, &at, 1);
        for (int i = 0; i < 9; i++) {
            double g = oc_get(got, i), w = rows[r].want[i];
            cr_assert(g == w || (isnan(g) && isnan(w)), "%g to %s: %.17g, want %.17g", v[i],
                      rows[r].to, g, w);
        }
        vq_tensor_release(got);
    }
    vq_tensor_release(x);
}

/* ---- ops that widen (ops/widen.c) ---- */

/* f16 and bf16 add, sub, mul, div computed in f32 and rounded once: equal
 * to the exact result rounded once (f32's 24 bits make the double
 * rounding harmless), checked against a double loop. */
Test(dtypes, f16_and_bf16_arithmetic_rounds_the_exact_result_once)
{
    static const char *const ops[] = {"add", "sub", "mul", "div", "maximum", "minimum"};
    uint64_t rng = oc_seed("dtypes");
    const int64_t n = 4096;
    for (int f = 0; f < 2; f++) {
        vq_dtype dt = f ? VQ_BF16 : VQ_F16;
        vq_tensor *x = oc_rand(&rng, dt, 1, &n, -300, 300), *y = oc_rand(&rng, dt, 1, &n, -3, 3);
        vq_tensor *in[2] = {x, y};
        for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++) {
            vq_tensor *z = oc_run1(ops[o], in, 2, NULL, 0);
            cr_assert_eq(vq_tensor_dtype(z), dt);
            for (int64_t i = 0; i < n; i++) {
                double a = oc_get(x, i), b = oc_get(y, i);
                double r = o == 0   ? a + b
                           : o == 1 ? a - b
                           : o == 2 ? a * b
                           : o == 3 ? a / b
                           : o == 4 ? fmax(a, b)
                                    : fmin(a, b);
                uint16_t want = f ? vq_f64_to_bf16(r) : vq_f64_to_f16(r);
                uint16_t got = ((uint16_t *)vq_tensor_data(z))[i];
                cr_assert(got == want || (isnan(r) && isnan(oc_get(z, i))),
                          "%s %s: %g, %g: 0x%04x, want 0x%04x", vq_dtype_name(dt), ops[o], a, b,
                          got, want);
            }
            vq_tensor_release(z);
        }
        vq_tensor_release(x);
        vq_tensor_release(y);
    }
}

/* The narrow integers wrap as C's arithmetic in the type does, and compare
 * by value (u16 and u32 past the signed range included). */
Test(dtypes, narrow_integer_arithmetic_wraps_and_compares_by_value)
{
    static const vq_dtype dts[] = {VQ_I8, VQ_U8, VQ_I16, VQ_U16, VQ_U32};
    uint64_t rng = oc_seed("dtypes");
    const int64_t n = 1000;
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        vq_dtype dt = dts[d];
        vq_tensor *x, *y;
        cr_assert_eq(vq_tensor_new(&x, dt, 1, &n), 0);
        cr_assert_eq(vq_tensor_new(&y, dt, 1, &n), 0);
        size_t es = vq_dtype_size(dt);
        for (size_t i = 0; i < (size_t)n * es; i++) {
            ((uint8_t *)vq_tensor_data(x))[i] = (uint8_t)oc_next(&rng);
            ((uint8_t *)vq_tensor_data(y))[i] = (uint8_t)oc_next(&rng);
        }
        vq_tensor *in[2] = {x, y};
        vq_tensor *sum = oc_run1("add", in, 2, NULL, 0), *prod = oc_run1("mul", in, 2, NULL, 0);
        vq_tensor *lt = oc_run1("less", in, 2, NULL, 0), *mx = oc_run1("maximum", in, 2, NULL, 0);
        cr_assert_eq(vq_tensor_dtype(sum), dt);
        cr_assert_eq(vq_tensor_dtype(lt), VQ_BOOL);
        uint64_t mask = es == 8 ? ~UINT64_C(0) : (UINT64_C(1) << (8 * es)) - 1;
        for (int64_t i = 0; i < n; i++) {
            double a = oc_get(x, i), b = oc_get(y, i);
            uint64_t s = 0, p = 0;
            memcpy(&s, (char *)vq_tensor_data(sum) + i * (int64_t)es, es);
            memcpy(&p, (char *)vq_tensor_data(prod) + i * (int64_t)es, es);
            cr_assert_eq(s, ((uint64_t)(int64_t)a + (uint64_t)(int64_t)b) & mask, "%s: %g + %g",
                         vq_dtype_name(dt), a, b);
            cr_assert_eq(p, ((uint64_t)(int64_t)a * (uint64_t)(int64_t)b) & mask, "%s: %g * %g",
                         vq_dtype_name(dt), a, b);
            cr_assert_eq(((uint8_t *)vq_tensor_data(lt))[i], a < b);
            cr_assert_eq(oc_get(mx, i), fmax(a, b));
        }
        vq_tensor_release(sum);
        vq_tensor_release(prod);
        vq_tensor_release(lt);
        vq_tensor_release(mx);
        vq_tensor_release(x);
        vq_tensor_release(y);
    }
}

/* matmul of f16 accumulates in f32: within f16's rounding of the result
 * of a double loop; a u8 sum reduction wraps. */
Test(dtypes, f16_matmul_and_narrow_reductions)
{
    uint64_t rng = oc_seed("dtypes");
    vq_tensor *a = oc_rand(&rng, VQ_F16, 2, (int64_t[]){4, 37}, -1, 1);
    vq_tensor *b = oc_rand(&rng, VQ_F16, 2, (int64_t[]){37, 3}, -1, 1);
    vq_tensor *in[2] = {a, b};
    vq_tensor *c = oc_run1("matmul", in, 2, NULL, 0);
    cr_assert_eq(vq_tensor_dtype(c), VQ_F16);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++) {
            double s = 0;
            for (int k = 0; k < 37; k++)
                s += oc_get(a, i * 37 + k) * oc_get(b, k * 3 + j);
            cr_assert(fabs(oc_get(c, i * 3 + j) - s) <= 1e-3 * fmax(1, fabs(s)) + 1e-5,
                      "[%d,%d] %g, want %g", i, j, oc_get(c, i * 3 + j), s);
        }
    vq_tensor *u;
    cr_assert_eq(vq_tensor_new(&u, VQ_U8, 1, (int64_t[]){100}), 0);
    unsigned want = 0;
    for (int i = 0; i < 100; i++) {
        ((uint8_t *)vq_tensor_data(u))[i] = (uint8_t)(i * 7);
        want += (uint8_t)(i * 7);
    }
    vq_tensor *s = oc_run1("sum", &u, 1, NULL, 0);
    cr_assert_eq(vq_tensor_dtype(s), VQ_U8);
    cr_assert_eq(((uint8_t *)vq_tensor_data(s))[0], (uint8_t)want);
    vq_tensor_release(s);
    vq_tensor_release(u);
    vq_tensor_release(a);
    vq_tensor_release(b);
    vq_tensor_release(c);
}

/* Ops that move elements keep every bit pattern of bf16 (NaNs are made
 * quiet, as cast makes them) and of the narrow integers. */
Test(dtypes, moving_ops_keep_the_values_of_every_added_dtype)
{
    static const vq_dtype dts[] = {VQ_BF16, VQ_F16, VQ_I8, VQ_U8, VQ_I16, VQ_U16, VQ_U32};
    uint64_t rng = oc_seed("dtypes");
    for (size_t d = 0; d < sizeof dts / sizeof dts[0]; d++) {
        vq_dtype dt = dts[d];
        vq_tensor *x = oc_rand(&rng, dt, 2, (int64_t[]){5, 7}, 0, 100);
        vq_attr perm = VQ_ATTR_IS("perm", ((int64_t[]){1, 0}), 2);
        vq_tensor *t = oc_run1("transpose", &x, 1, &perm, 1);
        cr_assert_eq(vq_tensor_dtype(t), dt);
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 7; j++)
                cr_assert_eq(oc_get(t, j * 5 + i), oc_get(x, i * 7 + j), "%s", vq_dtype_name(dt));
        vq_tensor *pair[2] = {x, x};
        vq_attr axis = VQ_ATTR_I("axis", 0);
        vq_tensor *c = oc_run1("concat", pair, 2, &axis, 1);
        cr_assert_eq(vq_tensor_numel(c), 70);
        for (int i = 0; i < 70; i++)
            cr_assert_eq(oc_get(c, i), oc_get(x, i % 35));
        vq_tensor_release(t);
        vq_tensor_release(c);
        vq_tensor_release(x);
    }
}

static vq_tensor *u64s(int n, const uint64_t *v);

/* u64 has no wider integer: the ops without a u64 kernel of their own
 * refuse it by name. */
Test(dtypes, u64_math_is_refused_naming_the_dtype)
{
    vq_tensor *x;
    cr_assert_eq(vq_tensor_new(&x, VQ_U64, 1, (int64_t[]){2}), 0);
    cr_assert_eq(oc_try("sqrt", &x, 1, 1, NULL, 0), VQ_ENOSYS);
    cr_assert(strstr(vq_errmsg(), "dtype u64 is not supported by sqrt"), "%s", vq_errmsg());
    vq_tensor_release(x);
}

/* The binary arithmetic ops take u64 in their own kernel: it wraps, divides
 * and takes remainders as unsigned, and division by zero is the op's error. */
Test(dtypes, u64_arithmetic_wraps_and_divides_as_unsigned)
{
    const uint64_t a[3] = {UINT64_MAX, (1ull << 63) + 7, 10}, b[3] = {2, 1ull << 62, 3};
    vq_tensor *x = u64s(3, a), *y = u64s(3, b), *in[2] = {x, y};
    static const char *const ops[] = {"add", "sub", "mul", "div", "mod", "pow"};
    for (int k = 0; k < 6; k++) {
        vq_tensor *o = oc_run1(ops[k], in, 2, NULL, 0);
        cr_assert_eq(vq_tensor_dtype(o), VQ_U64);
        const uint64_t *v = vq_tensor_data(o);
        for (int i = 0; i < 3; i++) {
            uint64_t p = 1, base = a[i];
            for (uint64_t e = b[i]; e; e >>= 1, base *= base)
                if (e & 1)
                    p *= base;
            uint64_t want = k == 0   ? a[i] + b[i]
                            : k == 1 ? a[i] - b[i]
                            : k == 2 ? a[i] * b[i]
                            : k == 3 ? a[i] / b[i]
                            : k == 4 ? a[i] % b[i]
                                     : p;
            cr_assert_eq(v[i], want, "%s at %d", ops[k], i);
        }
        vq_tensor_release(o);
    }
    vq_tensor *z = u64s(3, (uint64_t[]){1, 0, 1}), *dz[2] = {x, z};
    cr_assert_lt(oc_try("div", dz, 2, 1, NULL, 0), 0);
    cr_assert_lt(oc_try("mod", dz, 2, 1, NULL, 0), 0);
    vq_tensor_release(z);
    vq_tensor_release(x);
    vq_tensor_release(y);
}

static vq_tensor *u64s(int n, const uint64_t *v)
{
    vq_tensor *t;
    cr_assert_eq(vq_tensor_new(&t, VQ_U64, 1, (int64_t[]){n}), 0);
    memcpy(vq_tensor_data(t), v, (size_t)n * sizeof *v);
    return t;
}

/* Ops that only compare, select or move carry u64 as i64 with the top bit
 * flipped: its order is kept above 2^63, and the values come back whole. */
Test(dtypes, u64_compares_selects_and_moves_by_its_own_order)
{
    const uint64_t a[4] = {1, (1ull << 63) + 5, UINT64_MAX, 1ull << 63},
                   b[4] = {2, 7, UINT64_MAX - 1, (1ull << 63) - 1};
    vq_tensor *x = u64s(4, a), *y = u64s(4, b), *in[2] = {x, y};
    vq_tensor *mx = oc_run1("maximum", in, 2, NULL, 0), *mn = oc_run1("minimum", in, 2, NULL, 0);
    vq_tensor *gt = oc_run1("greater", in, 2, NULL, 0);
    cr_assert_eq(vq_tensor_dtype(mx), VQ_U64);
    const uint64_t *pm = vq_tensor_data(mx), *pn = vq_tensor_data(mn);
    const bool *pg = vq_tensor_data(gt);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(pm[i], a[i] > b[i] ? a[i] : b[i], "maximum at %d", i);
        cr_assert_eq(pn[i], a[i] < b[i] ? a[i] : b[i], "minimum at %d", i);
        cr_assert_eq(pg[i], a[i] > b[i], "greater at %d", i);
    }
    vq_tensor *r = oc_run1("reduce_max", &x, 1, NULL, 0);
    cr_assert_eq(*(const uint64_t *)vq_tensor_data(r), UINT64_MAX);
    vq_tensor *idx;
    cr_assert_eq(vq_tensor_new(&idx, VQ_I64, 1, (int64_t[]){2}), 0);
    ((int64_t *)vq_tensor_data(idx))[0] = 3;
    ((int64_t *)vq_tensor_data(idx))[1] = 1;
    vq_tensor *gin[2] = {x, idx}, *g = oc_run1("gather", gin, 2, NULL, 0);
    cr_assert_eq(((const uint64_t *)vq_tensor_data(g))[0], a[3]);
    cr_assert_eq(((const uint64_t *)vq_tensor_data(g))[1], a[1]);
    vq_tensor *tensors[] = {mx, mn, gt, r, idx, g, x, y};
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; i++)
        vq_tensor_release(tensors[i]);
}

/* Data of a narrow integer dtype beside i64 indices is no mismatch (gather
 * of u8 by i64 indices); max_pool2d, whose kernel takes floats, computes
 * the narrow integers as f64, which holds them exactly. */
Test(dtypes, narrow_integers_gather_by_i64_indices_and_max_pool)
{
    uint64_t rng = oc_seed("dtypes");
    vq_tensor *x = oc_rand(&rng, VQ_U8, 4, (int64_t[]){1, 2, 4, 4}, 0, 255), *idx;
    cr_assert_eq(vq_tensor_new(&idx, VQ_I64, 1, (int64_t[]){1}), 0);
    ((int64_t *)vq_tensor_data(idx))[0] = 1;
    vq_attr axis = VQ_ATTR_I("axis", 2);
    vq_tensor *gin[2] = {x, idx}, *g = oc_run1("gather", gin, 2, &axis, 1);
    cr_assert_eq(vq_tensor_dtype(g), VQ_U8);
    for (int c = 0; c < 2; c++)
        for (int j = 0; j < 4; j++)
            cr_assert_eq(oc_get(g, c * 4 + j), oc_get(x, c * 16 + 4 + j));
    vq_attr at[2] = {VQ_ATTR_IS("kernel", ((int64_t[]){2, 2}), 2),
                     VQ_ATTR_IS("strides", ((int64_t[]){2, 2}), 2)};
    vq_tensor *p = oc_run1("max_pool2d", &x, 1, at, 2);
    cr_assert_eq(vq_tensor_dtype(p), VQ_U8);
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) {
                double m = 0;
                for (int di = 0; di < 2; di++)
                    for (int dj = 0; dj < 2; dj++)
                        m = fmax(m, oc_get(x, c * 16 + (2 * i + di) * 4 + 2 * j + dj));
                cr_assert_eq(oc_get(p, c * 4 + i * 2 + j), m);
            }
    vq_tensor_release(p);
    vq_tensor_release(g);
    vq_tensor_release(idx);
    vq_tensor_release(x);
}

/* On the emulated GPU backend an op runs its CPU kernel as stream work:
 * the widened add of f16 and the cast of u8 give the CPU's bits. */
Test(dtypes, emulated_gpu_runs_widened_ops_and_casts_like_the_cpu)
{
    setenv("VARQ_GPU_BACKEND", "emulated", 1);
    vq_engine *e;
    cr_assert_eq(vq_engine_new(&e, &(vq_engine_opts){.kind = VQ_ENGINE_THREADED}), 0);
    uint64_t rng = oc_seed("dtypes");
    const int64_t n = 300;
    vq_tensor *x = oc_rand(&rng, VQ_F16, 1, &n, -10, 10),
              *y = oc_rand(&rng, VQ_F16, 1, &n, -10, 10);
    vq_tensor *in[2] = {x, y}, *gin[2];
    const vq_ctx gpu = {VQ_DEV_GPU, 0}, cpu = {VQ_DEV_CPU, 0};
    for (int i = 0; i < 2; i++)
        cr_assert_eq(vq_tensor_copy_to(e, in[i], gpu, &gin[i]), 0, "%s", vq_errmsg());
    vq_tensor *want = oc_run1("add", in, 2, NULL, 0), *g = NULL, *back;
    cr_assert_eq(vq_op_run(e, "add", gin, 2, &g, 1, NULL, 0), 0, "%s", vq_errmsg());
    vq_attr to = VQ_ATTR_S("dtype", "u8");
    vq_tensor *gu = NULL;
    cr_assert_eq(vq_op_run(e, "cast", &g, 1, &gu, 1, &to, 1), 0, "%s", vq_errmsg());
    cr_assert_eq(vq_tensor_copy_to(e, g, cpu, &back), 0);
    cr_assert_eq(vq_tensor_wait(back), 0, "%s", vq_errmsg());
    cr_assert_eq(memcmp(vq_tensor_data(back), vq_tensor_data(want), (size_t)n * 2), 0);
    vq_tensor *wu = oc_run1("cast", &want, 1, &to, 1), *bu;
    cr_assert_eq(vq_tensor_copy_to(e, gu, cpu, &bu), 0);
    cr_assert_eq(vq_tensor_wait(bu), 0, "%s", vq_errmsg());
    cr_assert_eq(memcmp(vq_tensor_data(bu), vq_tensor_data(wu), (size_t)n), 0);
    vq_tensor *all[] = {x, y, gin[0], gin[1], want, g, gu, back, wu, bu};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        vq_tensor_release(all[i]);
    vq_engine_free(e);
}
