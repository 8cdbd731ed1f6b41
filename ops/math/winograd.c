/* conv2d's forward by Winograd's minimal filtering F(4x4, 3x3) on the CPU
 * (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks",
 * 2016), which conv2d_kernel (ops/cpu/conv.c) takes for f32 3x3 layers of
 * stride 1, dilation 1 and one group when vq__winograd_fits says they are
 * large enough; everything else, and the gradients, stay on im2col.
 *
 * The output planes are cut into 4x4 tiles; tile (ty, tx) of image n
 * needs the 6x6 input patch whose corner is (4 ty - top pad, 4 tx - left
 * pad), read as zero outside the input (the padding, and past the bottom
 * or right edge, where only outputs beyond Out's edge would use it: those
 * are dropped). With the transforms
 *   U = G g G^T    (6x6, per output channel k and input channel c; g 3x3)
 *   V = B^T d B    (6x6, per input channel c and tile t; d 6x6)
 *   Y = A^T m A    (4x4, per output channel k and tile t; m 6x6)
 * the tile's outputs are Y with m[e] = sum over c of U[e][k][c] V[e][c][t]
 * for each of the 36 elements e: 36 products [K x C] x [C x tiles] on
 * OpenBLAS's sgemm (vq__gemm), 36 multiply-adds per 16 outputs and input
 * channel instead of im2col's 144. The transforms' constants are the
 * paper's (points 0, 1, -1, 2, -2 and infinity).
 *
 * Work: U for the whole call (kept between calls while the weights stay
 * the same: "U kept between calls" below), then blocks of tiles (all
 * images' tiles in one sequence), each block's V [36][C][tiles] and m
 * [36][K][tiles] in a scratch buffer sized for one block, so memory stays
 * bounded for large batches: the scratch is U when it is not kept (4x the
 * weights: 37.7 MB for 512 channels)
 * plus at most 32 MB. Within a block: the input transform over chunks of
 * input channels, the 36 products, then the output transform with the
 * bias and the clip over chunks of output channels, each shared with the
 * idle workers (vq__parallel_for). Block and chunk bounds depend only on the
 * shapes, and each output element is computed by one fixed sequence of
 * operations, so the bits do not depend on the number of workers. The
 * transforms work on WG_LANES tiles (or input channels, for U) at once,
 * in loops the compiler vectorizes; on x86 the patches are gathered and
 * the output tiles stored four at a time by SSE 4x4 transposes. Where
 * varq's AVX-512 product runs, the transforms take 16 tiles of a tile row
 * per vector instead, and V goes straight into the product's panels
 * ("the transforms with AVX-512" below).
 *
 * Accuracy: the transforms scale the data up (B^T's entries reach 5, A^T's
 * 8) before the sums that round, so the error relative to the output's
 * magnitude is a few 1e-6 for f32 (4.3e-6 at most over
 * tests/test_ops_conv.c's cases) against im2col's ~1e-7.
 * A NaN or an infinity in X makes NaN (or infinite) every output of the
 * tiles whose patches hold it, not only of the windows that read it: the
 * transforms mix the whole patch (infinity - infinity is NaN). */
#include "winograd.h"

#include "sgemm.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE__
#include <xmmintrin.h>
#endif
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define WG_WIDE 1
#include <immintrin.h>
#endif

/* Tiles (input channels for U) one vector step handles. */
#define WG_LANES 8
/* Below these, im2col's single product costs as much or less (measured
 * in docs/perf/cpu-kernels.md): with 8 input channels the input transform
 * outweighs the product it saves, with 16 it pays; 4 output channels
 * break even. A call of few tiles (ResNet-18's 256-channel 14x14 layers
 * at batch 1: 16) reads all of U, 4x the weights, for those tiles'
 * products: the portable transforms lose there, the AVX-512 ones with
 * wg_stride win (WG_MIN_TILES_WIDE). 4 tiles (the 512-channel 7x7
 * layers) would read 37.7 MB of U for 49 outputs: never. */
#define WG_MIN_IN_CHANNELS 16
#define WG_MIN_OUT_CHANNELS 8
#define WG_MIN_TILES 32
#define WG_MIN_TILES_WIDE 16
/* The most floats of V and m together one block keeps (32 MB), and
 * about the most tiles of a block. Few tiles make 36 small products, each
 * packing its U again (OpenBLAS's copy routines), so blocks must not be
 * small; too many tiles fall out of the caches, so they must not be huge
 * either (both measured at ResNet-18's channel counts, batch 32). */
#define WG_BLOCK_FLOATS ((int64_t)1 << 23)
#define WG_BLOCK_TILES 512

#if defined(__GNUC__) && !defined(__clang__)
#define WG_VECTORIZE __attribute__((optimize("vect-cost-model=cheap")))
#else
#define WG_VECTORIZE
#endif

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static bool env_on = true;

static void read_env(void)
{
    const char *e = getenv("VARQ_CONV_WINOGRAD");
    env_on = !(e && !strcmp(e, "0"));
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

bool vq__winograd_fits(const vq__conv *cv, vq_dtype dt)
{
    const vq__window *v = &cv->w;
    if (dt != VQ_F32 || cv->groups != 1 || v->kh != 3 || v->kw != 3 || v->sh != 1 || v->sw != 1 ||
        v->dh != 1 || v->dw != 1)
        return false;
    pthread_once(&env_once, read_env);
    if (!env_on)
        return false;
    int64_t tiles = v->n * ceil_div(v->oh, 4) * ceil_div(v->ow, 4);
    int64_t least = vq__sgemm_level() >= VQ__ISA_AVX512 ? WG_MIN_TILES_WIDE : WG_MIN_TILES;
    return cv->cg >= WG_MIN_IN_CHANNELS && cv->m >= WG_MIN_OUT_CHANNELS && tiles >= least;
}

/* ---- the transforms, WG_LANES at a time ---- */

/* The six values of G (a0, a1, a2)^T, with the sums rows 1 and 2 and
 * rows 3 and 4 share. G's rows: (1/4, 0, 0), -(1, 1, 1)/6,
 * -(1, -1, 1)/6, (1/24, 1/12, 1/6), (1/24, -1/12, 1/6), (0, 0, 1). */
#define WG_G(a0, a1, a2, o0, o1, o2, o3, o4, o5)                             \
    do {                                                                     \
        float s02 = (a0) + (a2), p = (a0) * (1.0f / 24) + (a2) * (1.0f / 6); \
        float q = (a1) * (1.0f / 12);                                        \
        o0 = (a0) * (1.0f / 4);                                              \
        o1 = (s02 + (a1)) * (-1.0f / 6);                                     \
        o2 = (s02 - (a1)) * (-1.0f / 6);                                     \
        o3 = p + q;                                                          \
        o4 = p - q;                                                          \
        o5 = (a2);                                                           \
    } while (0)

/* u [36][lanes] = G g G^T for g [9][lanes] (row-major 3x3). */
WG_VECTORIZE static void wg_filter(const float g[9][WG_LANES], float u[36][WG_LANES])
{
    float t[18][WG_LANES]; /* G g: 6 rows of 3 */
    for (int j = 0; j < 3; j++)
        for (int l = 0; l < WG_LANES; l++)
            WG_G(g[j][l], g[3 + j][l], g[6 + j][l], t[j][l], t[3 + j][l], t[6 + j][l], t[9 + j][l],
                 t[12 + j][l], t[15 + j][l]);
    for (int r = 0; r < 6; r++) {
        const float(*s)[WG_LANES] = &t[r * 3];
        float(*o)[WG_LANES] = &u[r * 6];
        for (int l = 0; l < WG_LANES; l++)
            WG_G(s[0][l], s[1][l], s[2][l], o[0][l], o[1][l], o[2][l], o[3][l], o[4][l], o[5][l]);
    }
}

/* v [36][lanes] = B^T d B for d [36][lanes] (row-major 6x6). B^T's rows:
 * (4, 0, -5, 0, 1, 0), (0, -4, -4, 1, 1, 0), (0, 4, -4, -1, 1, 0),
 * (0, -2, -1, 2, 1, 0), (0, 2, -1, -2, 1, 0), (0, 4, 0, -5, 0, 1). */
#define WG_BT(d0, d1, d2, d3, d4, d5, o0, o1, o2, o3, o4, o5) \
    do {                                                      \
        o0 = 4 * (d0)-5 * (d2) + (d4);                        \
        o1 = -4 * ((d1) + (d2)) + (d3) + (d4);                \
        o2 = 4 * ((d1) - (d2)) - (d3) + (d4);                 \
        o3 = 2 * ((d3) - (d1)) - (d2) + (d4);                 \
        o4 = 2 * ((d1) - (d3)) - (d2) + (d4);                 \
        o5 = 4 * (d1)-5 * (d3) + (d5);                        \
    } while (0)

WG_VECTORIZE static void wg_input_tile(const float d[36][WG_LANES], float v[36][WG_LANES])
{
    float t[36][WG_LANES]; /* B^T d */
    for (int j = 0; j < 6; j++)
        for (int l = 0; l < WG_LANES; l++)
            WG_BT(d[j][l], d[6 + j][l], d[12 + j][l], d[18 + j][l], d[24 + j][l], d[30 + j][l],
                  t[j][l], t[6 + j][l], t[12 + j][l], t[18 + j][l], t[24 + j][l], t[30 + j][l]);
    for (int r = 0; r < 6; r++) {
        const float(*s)[WG_LANES] = &t[r * 6];
        float(*o)[WG_LANES] = &v[r * 6];
        for (int l = 0; l < WG_LANES; l++)
            WG_BT(s[0][l], s[1][l], s[2][l], s[3][l], s[4][l], s[5][l], o[0][l], o[1][l], o[2][l],
                  o[3][l], o[4][l], o[5][l]);
    }
}

/* y [16][lanes] = A^T m A for m [36][lanes]. A^T's rows:
 * (1, 1, 1, 1, 1, 0), (0, 1, -1, 2, -2, 0), (0, 1, 1, 4, 4, 0),
 * (0, 1, -1, 8, -8, 1). */
#define WG_AT(m0, m1, m2, m3, m4, m5, o0, o1, o2, o3)                                     \
    do {                                                                                  \
        float s12 = (m1) + (m2), d12 = (m1) - (m2), s34 = (m3) + (m4), d34 = (m3) - (m4); \
        o0 = (m0) + s12 + s34;                                                            \
        o1 = d12 + 2 * d34;                                                               \
        o2 = s12 + 4 * s34;                                                               \
        o3 = d12 + 8 * d34 + (m5);                                                        \
    } while (0)

WG_VECTORIZE static void wg_output_tile(const float m[36][WG_LANES], float y[16][WG_LANES])
{
    float t[24][WG_LANES]; /* A^T m: 4 rows of 6 */
    for (int j = 0; j < 6; j++)
        for (int l = 0; l < WG_LANES; l++)
            WG_AT(m[j][l], m[6 + j][l], m[12 + j][l], m[18 + j][l], m[24 + j][l], m[30 + j][l],
                  t[j][l], t[6 + j][l], t[12 + j][l], t[18 + j][l]);
    for (int r = 0; r < 4; r++) {
        const float(*s)[WG_LANES] = &t[r * 6];
        float(*o)[WG_LANES] = &y[r * 4];
        for (int l = 0; l < WG_LANES; l++)
            WG_AT(s[0][l], s[1][l], s[2][l], s[3][l], s[4][l], s[5][l], o[0][l], o[1][l], o[2][l],
                  o[3][l]);
    }
}

/* ---- one call ---- */

struct wg_job {
    const vq__conv *cv;
    const float *x, *w, *b; /* b: NULL without a bias */
    float *o;
    float *u;        /* [36][K][C] */
    float *v;        /* 36 x [C][ld] (vs apart): the block's transformed input */
    float *m;        /* 36 x [K][ld] (ms apart): the block's products */
    int64_t tw, tpi; /* tiles per tile row, per image */
    int64_t t0, nb;  /* the block: tiles [t0, t0 + nb) of all images' */
    int64_t ld;      /* the block's row length (a multiple of WG_LANES; of 32 if wide) */
    int64_t vs, ms;  /* floats from one element's V, m to the next's: wg_stride */
    bool clip;
    float lo, hi;
    bool wide; /* the AVX-512 transforms, V in panels (below) */
};

/* Where tile t lies: its image, and its output corner (oy, ox). */
static void tile_at(const struct wg_job *j, int64_t t, int64_t *img, int64_t *oy, int64_t *ox)
{
    int64_t r = t % j->tpi;
    *img = t / j->tpi;
    *oy = r / j->tw * 4;
    *ox = r % j->tw * 4;
}

/* ---- the transforms with AVX-512, 16 tiles of a tile row at once ----
 *
 * The portable transforms gather each lane's patch by itself (tile_at per
 * lane, a 4x4 transpose per four lanes) and copy V's and m's rows through
 * small arrays: at ResNet-18's 64-channel 56x56 layers, batch 1, they
 * took more time than the 36 products (perf: wg_input and wg_output 52%
 * of the layer's samples, the product and its copy of V 29%). With
 * AVX-512 a group is up to 16 consecutive tiles of one tile row: each of
 * its six input rows is five masked loads (zeros outside the plane), each
 * of the 36 patch positions is then one vector of the 16 tiles (tile l's
 * element at column 4 l + q: two two-source permutes and a lane shuffle),
 * the transforms run on whole vectors, and V's and m's rows are read and
 * written 16 tiles at a time. The output tiles go back the same way, four
 * rows of 64 consecutive outputs interleaved from the 16 tiles' values by
 * unpacks and lane shuffles. V is written in the product's panels, so the products
 * skip their copy of it. The arithmetic is the portable path's, operation
 * for operation (the same sums in the same order, no fused multiply-adds),
 * and the products' bits are vq__sgemm's either way, so both paths give
 * the same bits (checked on ResNet-18's output). Taken where varq's
 * product runs at AVX-512 (vq__sgemm_level: an AVX-512 CPU, VARQ_ISA not
 * below avx512 and VARQ_GEMM not "openblas"). What it gained is in docs/perf/cpu-kernels.md. */
#ifdef WG_WIDE

#define WG_AVX __attribute__((target("avx512f")))
#define WG_GROUP 16

/* The group starting at block tile t: its image, tile row and column, and
 * its length (to the row's end, the block's end, or 16 tiles). */
static int64_t wg_group(const struct wg_job *j, int64_t t, int64_t *img, int64_t *ty, int64_t *tx)
{
    int64_t r = t % j->tpi;
    *img = t / j->tpi;
    *ty = r / j->tw;
    *tx = r % j->tw;
    int64_t n = j->tw - *tx, left = j->t0 + j->nb - t;
    n = n < left ? n : left;
    return n < WG_GROUP ? n : WG_GROUP;
}

WG_AVX static inline __m512 wg_k(float c)
{
    return _mm512_set1_ps(c);
}

/* WG_BT on vectors: o[i * os] from d[i * ds], i = 0..5. */
WG_AVX static inline void wg_bt16(const __m512 *d, int ds, __m512 *o, int os)
{
    __m512 d0 = d[0], d1 = d[ds], d2 = d[2 * ds], d3 = d[3 * ds], d4 = d[4 * ds], d5 = d[5 * ds];
    o[0] = _mm512_add_ps(_mm512_sub_ps(_mm512_mul_ps(wg_k(4), d0), _mm512_mul_ps(wg_k(5), d2)), d4);
    o[os] = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(wg_k(-4), _mm512_add_ps(d1, d2)), d3), d4);
    o[2 * os] = _mm512_add_ps(_mm512_sub_ps(_mm512_mul_ps(wg_k(4), _mm512_sub_ps(d1, d2)), d3), d4);
    o[3 * os] = _mm512_add_ps(_mm512_sub_ps(_mm512_mul_ps(wg_k(2), _mm512_sub_ps(d3, d1)), d2), d4);
    o[4 * os] = _mm512_add_ps(_mm512_sub_ps(_mm512_mul_ps(wg_k(2), _mm512_sub_ps(d1, d3)), d2), d4);
    o[5 * os] =
        _mm512_add_ps(_mm512_sub_ps(_mm512_mul_ps(wg_k(4), d1), _mm512_mul_ps(wg_k(5), d3)), d5);
}

/* WG_AT on vectors: o[i * os] from m[i * ms], i = 0..3 from 0..5. */
WG_AVX static inline void wg_at16(const __m512 *m, int ms, __m512 *o, int os)
{
    __m512 s12 = _mm512_add_ps(m[ms], m[2 * ms]), d12 = _mm512_sub_ps(m[ms], m[2 * ms]);
    __m512 s34 = _mm512_add_ps(m[3 * ms], m[4 * ms]), d34 = _mm512_sub_ps(m[3 * ms], m[4 * ms]);
    o[0] = _mm512_add_ps(_mm512_add_ps(m[0], s12), s34);
    o[os] = _mm512_add_ps(d12, _mm512_mul_ps(wg_k(2), d34));
    o[2 * os] = _mm512_add_ps(s12, _mm512_mul_ps(wg_k(4), s34));
    o[3 * os] = _mm512_add_ps(_mm512_add_ps(d12, _mm512_mul_ps(wg_k(8), d34)), m[5 * ms]);
}

/* V's 36 rows for a group of n tiles of input plane x whose first patch's
 * corner is (iy, ix): element e of tile l to d0[e * es + l] for the first
 * split lanes, to d1[e * es + l - split] for the others (the next panel,
 * when the group runs past the end of one). */
WG_AVX static void wg_input_group(const vq__window *v, const float *x, int64_t iy, int64_t ix,
                                  int64_t n, float *d0, float *d1, int64_t split, int64_t es)
{
    /* idx[q]: lane l of a permute of two vectors takes element 4 l + q
     * (l < 8; the upper eight lanes repeat it) */
    const __m512i every4 =
        _mm512_set_epi32(28, 24, 20, 16, 12, 8, 4, 0, 28, 24, 20, 16, 12, 8, 4, 0);
    const __m512i idx[4] = {every4, _mm512_add_epi32(every4, _mm512_set1_epi32(1)),
                            _mm512_add_epi32(every4, _mm512_set1_epi32(2)),
                            _mm512_add_epi32(every4, _mm512_set1_epi32(3))};
    __m512 d[36], t[36];
    for (int r = 0; r < 6; r++) {
        /* row iy + r, columns ix .. ix + 65 in 5 vectors (zeros outside
         * the plane) */
        int64_t y = iy + r;
        __m512 row[5];
        for (int q = 0; q < 5; q++) {
            int64_t c0 = ix + 16 * q;
            __mmask16 in = 0;
            if (y >= 0 && y < v->h && c0 < v->w && c0 + 16 > 0)
                in = vq__sg_lanes(v->w - c0) & (__mmask16)~vq__sg_lanes(-c0);
            row[q] = in ? _mm512_maskz_loadu_ps(in, x + y * v->w + c0) : _mm512_setzero_ps();
        }
        /* d[r * 6 + q], lane l: column 4 l + q; for q >= 4 that is lane
         * l + 1 of q - 4, the last lane from row[4] */
        __m512 *o = &d[r * 6];
        for (int q = 0; q < 4; q++) {
            __m512 lo = _mm512_permutex2var_ps(row[0], idx[q], row[1]);
            __m512 hi = _mm512_permutex2var_ps(row[2], idx[q], row[3]);
            o[q] = _mm512_shuffle_f32x4(lo, hi, 0x44);
        }
        __m512i last = _mm512_castps_si512(row[4]);
        o[4] = _mm512_castsi512_ps(_mm512_alignr_epi32(last, _mm512_castps_si512(o[0]), 1));
        last = _mm512_alignr_epi32(last, last, 1);
        o[5] = _mm512_castsi512_ps(_mm512_alignr_epi32(last, _mm512_castps_si512(o[1]), 1));
    }
    for (int q = 0; q < 6; q++) /* B^T d: columns */
        wg_bt16(&d[q], 6, &t[q], 6);
    for (int r = 0; r < 6; r++) /* (B^T d) B: rows */
        wg_bt16(&t[r * 6], 1, &d[r * 6], 1);
    __mmask16 m0 = vq__sg_lanes(n < split ? n : split);
    for (int e = 0; e < 36; e++)
        _mm512_mask_storeu_ps(d0 + e * es, m0, d[e]);
    if (n > split) {
        __mmask16 m1 = vq__sg_lanes(n) & (__mmask16)~vq__sg_lanes(split);
        for (int e = 0; e < 36; e++)
            _mm512_mask_storeu_ps(d1 - split + e * es, m1, d[e]);
    }
}

/* The block's V for input channels [lo, hi) in vq__sgemm_panels'
 * layout, so that the products need not copy it there: element e's
 * [C][nb] at v + e * vs, tile u of channel c at panel u / 32, row c,
 * column u % 32 (ld a multiple of 32; zeros past nb, as
 * vq__sgemm_pack leaves them, rather than whatever the scratch held:
 * those columns' sums are not stored, but need not start from a NaN or a
 * denormal either). */
WG_AVX static int wg_input_wide(const struct wg_job *j, int64_t lo, int64_t hi)
{
    const vq__window *v = &j->cv->w;
    int64_t C = v->c, P = VQ__SG_PANEL;
    for (int64_t c = lo; c < hi; c++)
        for (int64_t t = j->t0, n; t < j->t0 + j->nb; t += n) {
            int64_t img, ty, tx, u = t - j->t0;
            n = wg_group(j, t, &img, &ty, &tx);
            float *d0 = j->v + u / P * C * P + c * P + u % P;
            wg_input_group(v, j->x + (img * C + c) * v->h * v->w, 4 * ty - v->pt, 4 * tx - v->pl, n,
                           d0, d0 + C * P - u % P, P - u % P, j->vs);
        }
    int64_t tail = j->nb % P;
    if (tail)
        for (int64_t c = lo; c < hi; c++)
            for (int e = 0; e < 36; e++)
                memset(j->v + e * j->vs + j->nb / P * C * P + c * P + tail, 0,
                       (size_t)(P - tail) * sizeof(float));
    return 0;
}

/* The outputs of output channel k for a group of n tiles whose first
 * tile's output corner is (oy, ox) in plane o, from m's 36 rows at src
 * (element e of tile l at src[e * es + l]), with bias bv and the clip. */
WG_AVX static void wg_output_group(const struct wg_job *j, const float *src, int64_t es, int64_t n,
                                   float bv, float *o, int64_t oy, int64_t ox)
{
    const vq__window *v = &j->cv->w;
    __mmask16 m = vq__sg_lanes(n);
    __m512 a[36], t[24], y[16];
    for (int e = 0; e < 36; e++)
        a[e] = _mm512_maskz_loadu_ps(m, src + e * es);
    for (int q = 0; q < 6; q++) /* A^T m: columns */
        wg_at16(&a[q], 6, &t[q], 6);
    for (int r = 0; r < 4; r++) /* (A^T m) A: rows */
        wg_at16(&t[r * 6], 1, &y[r * 4], 1);
    if (j->b)
        for (int e = 0; e < 16; e++)
            y[e] = _mm512_add_ps(y[e], _mm512_set1_ps(bv));
    if (j->clip) {
        __m512 l = _mm512_set1_ps(j->lo), h = _mm512_set1_ps(j->hi);
        for (int e = 0; e < 16; e++)
            y[e] = vq__sg_clip(y[e], l, h);
    }
    int64_t cols = v->ow - ox < 4 * n ? v->ow - ox : 4 * n;
    for (int r = 0; r < 4 && oy + r < v->oh; r++) {
        /* row r of the 16 tiles: output 4 l + q is y[r * 4 + q], lane l */
        __m512 ab0 = _mm512_unpacklo_ps(y[r * 4], y[r * 4 + 1]);
        __m512 ab1 = _mm512_unpackhi_ps(y[r * 4], y[r * 4 + 1]);
        __m512 cd0 = _mm512_unpacklo_ps(y[r * 4 + 2], y[r * 4 + 3]);
        __m512 cd1 = _mm512_unpackhi_ps(y[r * 4 + 2], y[r * 4 + 3]);
        /* p[i]'s 128-bit lane L: tile 4 L + i's four outputs */
        __m512 p0 =
            _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(ab0), _mm512_castps_pd(cd0)));
        __m512 p1 =
            _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(ab0), _mm512_castps_pd(cd0)));
        __m512 p2 =
            _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(ab1), _mm512_castps_pd(cd1)));
        __m512 p3 =
            _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(ab1), _mm512_castps_pd(cd1)));
        __m512 q0 = _mm512_shuffle_f32x4(p0, p1, 0x44), q1 = _mm512_shuffle_f32x4(p2, p3, 0x44);
        __m512 q2 = _mm512_shuffle_f32x4(p0, p1, 0xee), q3 = _mm512_shuffle_f32x4(p2, p3, 0xee);
        __m512 out[4] = {_mm512_shuffle_f32x4(q0, q1, 0x88), _mm512_shuffle_f32x4(q0, q1, 0xdd),
                         _mm512_shuffle_f32x4(q2, q3, 0x88), _mm512_shuffle_f32x4(q2, q3, 0xdd)};
        float *row = o + (oy + r) * v->ow + ox;
        for (int64_t s = 0; s < 4 && 16 * s < cols; s++)
            _mm512_mask_storeu_ps(row + 16 * s, vq__sg_lanes(cols - 16 * s), out[s]);
    }
}

WG_AVX static int wg_output_wide(const struct wg_job *j, int64_t lo, int64_t hi)
{
    const vq__window *v = &j->cv->w;
    int64_t K = j->cv->m;
    for (int64_t k = lo; k < hi; k++)
        for (int64_t t = j->t0, n; t < j->t0 + j->nb; t += n) {
            int64_t img, ty, tx;
            n = wg_group(j, t, &img, &ty, &tx);
            wg_output_group(j, j->m + k * j->ld + (t - j->t0), j->ms, n, j->b ? j->b[k] : 0,
                            j->o + (img * K + k) * v->oh * v->ow, 4 * ty, 4 * tx);
        }
    return 0;
}

#endif

/* U for output channels [lo, hi). */
static int wg_weights(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const struct wg_job *j = arg;
    int64_t C = j->cv->cg, K = j->cv->m;
    float g[9][WG_LANES], u[36][WG_LANES];
    for (int64_t k = lo; k < hi; k++)
        for (int64_t c0 = 0; c0 < C; c0 += WG_LANES) {
            int64_t n = C - c0 < WG_LANES ? C - c0 : WG_LANES;
            const float *s = j->w + (k * C + c0) * 9;
            if (n == WG_LANES) {
                for (int i = 0; i < 9; i++)
                    for (int l = 0; l < WG_LANES; l++)
                        g[i][l] = s[l * 9 + i];
            } else {
                memset(g, 0, sizeof g);
                for (int64_t l = 0; l < n; l++)
                    for (int i = 0; i < 9; i++)
                        g[i][l] = s[l * 9 + i];
            }
            wg_filter(g, u);
            float *dst = j->u + k * C + c0;
            if (n == WG_LANES)
                for (int e = 0; e < 36; e++)
                    memcpy(dst + e * K * C, u[e], sizeof u[e]);
            else
                for (int e = 0; e < 36; e++)
                    memcpy(dst + e * K * C, u[e], (size_t)n * sizeof(float));
        }
    return 0;
}

/* Lane l's patch into d: rows iy to iy + 5, columns ix to ix + 5 of the
 * plane x, zeros outside it. */
static void wg_patch(const vq__window *v, const float *x, int64_t iy, int64_t ix,
                     float d[36][WG_LANES], int64_t l)
{
    int64_t H = v->h, W = v->w;
    if (iy >= 0 && iy + 6 <= H && ix >= 0 && ix + 6 <= W) {
        const float *s = x + iy * W + ix;
        for (int r = 0; r < 6; r++)
            for (int q = 0; q < 6; q++)
                d[r * 6 + q][l] = s[r * W + q];
        return;
    }
    /* at the border: zeros, then the rows [r0, r1) and columns [q0, q1)
     * of the patch that lie in the plane */
    int64_t r0 = iy < 0 ? -iy : 0, r1 = H - iy < 6 ? H - iy : 6;
    int64_t q0 = ix < 0 ? -ix : 0, q1 = W - ix < 6 ? W - ix : 6;
    for (int e = 0; e < 36; e++)
        d[e][l] = 0;
    for (int64_t r = r0; r < r1; r++)
        for (int64_t q = q0; q < q1; q++)
            d[r * 6 + q][l] = x[(iy + r) * W + ix + q];
}

#ifdef __SSE__
/* Four lanes' patches [l, l + 4) at s[0..3] (each inside the plane with
 * two columns to spare: 8 readable) into d by 4x4 transposes, instead of
 * 36 scalar copies each. */
static void wg_patch4(const float *const s[4], int64_t W, float d[36][WG_LANES], int64_t l)
{
    for (int r = 0; r < 6; r++) {
        __m128 a0 = _mm_loadu_ps(s[0] + r * W), a1 = _mm_loadu_ps(s[1] + r * W);
        __m128 a2 = _mm_loadu_ps(s[2] + r * W), a3 = _mm_loadu_ps(s[3] + r * W);
        _MM_TRANSPOSE4_PS(a0, a1, a2, a3);
        _mm_storeu_ps(&d[r * 6][l], a0);
        _mm_storeu_ps(&d[r * 6 + 1][l], a1);
        _mm_storeu_ps(&d[r * 6 + 2][l], a2);
        _mm_storeu_ps(&d[r * 6 + 3][l], a3);
        a0 = _mm_loadu_ps(s[0] + r * W + 4);
        a1 = _mm_loadu_ps(s[1] + r * W + 4);
        a2 = _mm_loadu_ps(s[2] + r * W + 4);
        a3 = _mm_loadu_ps(s[3] + r * W + 4);
        _MM_TRANSPOSE4_PS(a0, a1, a2, a3);
        _mm_storeu_ps(&d[r * 6 + 4][l], a0);
        _mm_storeu_ps(&d[r * 6 + 5][l], a1);
    }
}
#endif

/* The block's V for input channels [lo, hi), WG_LANES tiles at a time
 * (consecutive in the block, whatever their rows and images). */
static int wg_input(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const struct wg_job *j = arg;
#ifdef WG_WIDE
    if (j->wide)
        return wg_input_wide(j, lo, hi);
#endif
    const vq__window *v = &j->cv->w;
    int64_t C = v->c, H = v->h, W = v->w;
    float d[36][WG_LANES], out[36][WG_LANES];
    for (int64_t c = lo; c < hi; c++)
        for (int64_t g = 0; g < j->nb; g += WG_LANES) {
            int64_t n = j->nb - g < WG_LANES ? j->nb - g : WG_LANES;
            for (int64_t l0 = 0; l0 < WG_LANES; l0 += 4) {
                const float *x[4];
                int64_t iy[4], ix[4];
                bool fast = true;
                for (int64_t l = l0; l < l0 + 4; l++) {
                    if (l >= n) {
                        fast = false;
                        continue;
                    }
                    int64_t img;
                    tile_at(j, j->t0 + g + l, &img, &iy[l - l0], &ix[l - l0]);
                    iy[l - l0] -= v->pt;
                    ix[l - l0] -= v->pl;
                    x[l - l0] = j->x + (img * C + c) * H * W;
                    fast = fast && iy[l - l0] >= 0 && iy[l - l0] + 6 <= H && ix[l - l0] >= 0 &&
                           ix[l - l0] + 8 <= W;
                }
#ifdef __SSE__
                if (fast) {
                    const float *s[4];
                    for (int q = 0; q < 4; q++)
                        s[q] = x[q] + iy[q] * W + ix[q];
                    wg_patch4(s, W, d, l0);
                    continue;
                }
#endif
                for (int64_t l = l0; l < l0 + 4; l++) {
                    if (l < n) {
                        wg_patch(v, x[l - l0], iy[l - l0], ix[l - l0], d, l);
                    } else {
                        for (int e = 0; e < 36; e++)
                            d[e][l] = 0;
                    }
                }
            }
            wg_input_tile(d, out);
            float *dst = j->v + c * j->ld + g;
            if (n == WG_LANES)
                for (int e = 0; e < 36; e++)
                    memcpy(dst + e * j->vs, out[e], sizeof out[e]);
            else
                for (int e = 0; e < 36; e++)
                    memcpy(dst + e * j->vs, out[e], (size_t)n * sizeof(float));
        }
    return 0;
}

/* The block's products for elements [lo, hi). */
static int wg_products(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const struct wg_job *j = arg;
    int64_t C = j->cv->cg, K = j->cv->m;
    if (j->wide) {
        for (int64_t e = lo; e < hi; e++)
            vq__sgemm_panels(K, j->nb, C, j->u + e * K * C, C, j->v + e * j->vs, j->m + e * j->ms,
                             j->ld, NULL);
        return 0;
    }
    for (int64_t e = lo; e < hi; e++)
        vq__gemm_ldc(VQ_F32, false, false, K, j->nb, C, 1, j->u + e * K * C, C, j->v + e * j->vs,
                     j->ld, 0, j->m + e * j->ms, j->ld);
    return 0;
}

/* y += bias, then the clip (conv.c's epilogue: max(v, lo) then min(.,
 * hi) as maximum and minimum compute them). */
WG_VECTORIZE static void wg_finish(const struct wg_job *j, float y[16][WG_LANES], float bv)
{
    if (j->b)
        for (int e = 0; e < 16; e++)
            for (int l = 0; l < WG_LANES; l++)
                y[e][l] += bv;
    if (j->clip)
        for (int e = 0; e < 16; e++)
            for (int l = 0; l < WG_LANES; l++) {
                float z = y[e][l] <= j->lo ? j->lo : y[e][l];
                y[e][l] = z >= j->hi ? j->hi : z;
            }
}

#ifdef __SSE__
/* Four lanes' whole 4x4 tiles [l, l + 4) of y to o[0..3] (rows W apart)
 * by 4x4 transposes, instead of 16 scalar stores each. */
static void wg_store4(const float y[16][WG_LANES], int64_t l, float *const o[4], int64_t W)
{
    for (int r = 0; r < 4; r++) {
        __m128 a0 = _mm_loadu_ps(&y[r * 4][l]), a1 = _mm_loadu_ps(&y[r * 4 + 1][l]);
        __m128 a2 = _mm_loadu_ps(&y[r * 4 + 2][l]), a3 = _mm_loadu_ps(&y[r * 4 + 3][l]);
        _MM_TRANSPOSE4_PS(a0, a1, a2, a3);
        _mm_storeu_ps(o[0] + r * W, a0);
        _mm_storeu_ps(o[1] + r * W, a1);
        _mm_storeu_ps(o[2] + r * W, a2);
        _mm_storeu_ps(o[3] + r * W, a3);
    }
}
#endif

/* The block's outputs for output channels [lo, hi): Y, the bias and the
 * clip, WG_LANES tiles at a time. */
static int wg_output(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const struct wg_job *j = arg;
#ifdef WG_WIDE
    if (j->wide)
        return wg_output_wide(j, lo, hi);
#endif
    const vq__window *v = &j->cv->w;
    int64_t K = j->cv->m, OH = v->oh, OW = v->ow;
    float m[36][WG_LANES], y[16][WG_LANES];
    for (int64_t k = lo; k < hi; k++) {
        float bv = j->b ? j->b[k] : 0;
        for (int64_t g = 0; g < j->nb; g += WG_LANES) {
            int64_t n = j->nb - g < WG_LANES ? j->nb - g : WG_LANES;
            for (int e = 0; e < 36; e++) {
                const float *s = j->m + e * j->ms + k * j->ld + g;
                if (n == WG_LANES) {
                    memcpy(m[e], s, sizeof m[e]);
                } else {
                    for (int64_t l = 0; l < WG_LANES; l++)
                        m[e][l] = l < n ? s[l] : 0;
                }
            }
            wg_output_tile(m, y);
            wg_finish(j, y, bv);
            for (int64_t l0 = 0; l0 < n; l0 += 4) {
                /* set: gcc 12 at -O3 cannot see that whole means all four are */
                float *o[4] = {NULL, NULL, NULL, NULL};
                int64_t rows[4], cols[4];
                bool whole = l0 + 4 <= n;
                for (int64_t l = l0; l < l0 + 4 && l < n; l++) {
                    int64_t img, oy, ox;
                    tile_at(j, j->t0 + g + l, &img, &oy, &ox);
                    o[l - l0] = j->o + ((img * K + k) * OH + oy) * OW + ox;
                    rows[l - l0] = OH - oy < 4 ? OH - oy : 4;
                    cols[l - l0] = OW - ox < 4 ? OW - ox : 4;
                    whole = whole && rows[l - l0] == 4 && cols[l - l0] == 4;
                }
#ifdef __SSE__
                if (whole) {
                    wg_store4(y, l0, o, OW);
                    continue;
                }
#endif
                for (int64_t l = l0; l < l0 + 4 && l < n; l++)
                    for (int64_t r = 0; r < rows[l - l0]; r++)
                        for (int64_t q = 0; q < cols[l - l0]; q++)
                            o[l - l0][r * OW + q] = y[r * 4 + q][l];
            }
        }
    }
    return 0;
}

/* ---- U kept between calls ----
 *
 * An inference calls each layer with the same weights every time, and
 * computing U was about a quarter of the Winograd layers' time at batch 1
 * (docs/perf/cpu-kernels.md). So U is kept per
 * weights address and shape, with a copy of the weights it came from: a
 * call whose weights equal that copy (memcmp, so exactly; a new tensor at
 * a freed one's address with other values does not match) reads the kept
 * U. One whose weights differ (training updates them in place) computes
 * U anew into a new entry; after WG_CACHE_CHANGES such changes at one
 * address, calls there compute U into their scratch as before and keep
 * nothing (a marker entry says so). Entries are immutable once in the
 * table and reference-counted, so a call can use one while another call
 * replaces or evicts it. The table holds at most VARQ_CONV_WINOGRAD_CACHE_MB
 * (read once; default 256, 0 turns the cache off) of copies and U, least
 * recently used out first; vq_mem_trim on the CPU empties it. */
#define WG_CACHE_SLOTS 128
#define WG_CACHE_CHANGES 2

struct wg_entry {
    const float *key; /* the weights' address */
    int64_t K, C;
    float *w, *u; /* the weights' copy [K][C][9] and U [36][K][C]; NULL in a marker */
    size_t bytes; /* of w and u */
    int refs;     /* the table's (while in it) and each user's */
    int changes;  /* times the weights at key changed */
    uint64_t used;
};

static pthread_mutex_t wg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct wg_entry *wg_table[WG_CACHE_SLOTS];
static size_t wg_held, wg_budget;
static uint64_t wg_clock;
static pthread_once_t wg_budget_once = PTHREAD_ONCE_INIT;

/* Also registers the cache's trim hook (vq_mem_trim on the CPU empties
 * it), before the first entry is kept; a cache that could not register
 * keeps nothing. */
static void wg_read_budget(void)
{
    const char *e = getenv("VARQ_CONV_WINOGRAD_CACHE_MB");
    char *end;
    unsigned long long mb = e ? strtoull(e, &end, 10) : 256;
    if (e && (end == e || *end))
        mb = 256;
    wg_budget = mb > SIZE_MAX >> 20 ? SIZE_MAX : (size_t)mb << 20;
    if (vq__mem_trim_hook_add(VQ_DEV_CPU, vq__winograd_trim) < 0)
        wg_budget = 0;
}

/* Drops one reference (wg_lock held). */
static void wg_unref(struct wg_entry *e)
{
    if (--e->refs == 0) {
        free(e->w);
        free(e->u);
        free(e);
    }
}

/* Takes slot i's entry out of the table (wg_lock held). */
static void wg_remove(int i)
{
    wg_held -= wg_table[i]->bytes;
    wg_unref(wg_table[i]);
    wg_table[i] = NULL;
}

/* Puts e in the table, evicting the least recently used entries until it
 * fits (wg_lock held); false when it cannot fit at all. */
static bool wg_insert(struct wg_entry *e)
{
    if (e->bytes > wg_budget)
        return false;
    for (;;) {
        int free_slot = -1, oldest = -1;
        for (int i = 0; i < WG_CACHE_SLOTS; i++) {
            if (!wg_table[i]) {
                free_slot = free_slot < 0 ? i : free_slot;
            } else if (oldest < 0 || wg_table[i]->used < wg_table[oldest]->used) {
                oldest = i;
            }
        }
        if (free_slot >= 0 && wg_held + e->bytes <= wg_budget) {
            e->refs++;
            e->used = ++wg_clock;
            wg_table[free_slot] = e;
            wg_held += e->bytes;
            return true;
        }
        wg_remove(oldest);
    }
}

void vq__winograd_trim(void)
{
    pthread_mutex_lock(&wg_lock);
    for (int i = 0; i < WG_CACHE_SLOTS; i++)
        if (wg_table[i])
            wg_remove(i);
    pthread_mutex_unlock(&wg_lock);
}

/* The kept U for weights w [K][C][3][3], computed (by j's call, with the
 * idle workers) and kept if need be; the caller releases it with
 * wg_release. NULL when the call should compute U into its scratch: the
 * cache is off, the weights at w keep changing, or memory is short. */
static struct wg_entry *wg_kept(struct wg_job *j, const float *w, int64_t K, int64_t C)
{
    pthread_once(&wg_budget_once, wg_read_budget);
    if (!wg_budget)
        return NULL;
    size_t nw = (size_t)(K * C * 9), bytes = (nw + (size_t)(36 * K * C)) * sizeof(float);
    int changes = 0;
    pthread_mutex_lock(&wg_lock);
    struct wg_entry *e = NULL;
    int at = -1;
    for (int i = 0; i < WG_CACHE_SLOTS && at < 0; i++)
        if (wg_table[i] && wg_table[i]->key == w && wg_table[i]->K == K && wg_table[i]->C == C)
            at = i;
    if (at >= 0) {
        e = wg_table[at];
        e->used = ++wg_clock;
        if (!e->w) { /* a marker: these weights change, keep nothing */
            pthread_mutex_unlock(&wg_lock);
            return NULL;
        }
        e->refs++;
    }
    pthread_mutex_unlock(&wg_lock);
    if (e && !memcmp(e->w, w, nw * sizeof(float)))
        return e;
    if (e) { /* changed since: out of the table, and count the change */
        changes = e->changes + 1;
        pthread_mutex_lock(&wg_lock);
        for (int i = 0; i < WG_CACHE_SLOTS; i++)
            if (wg_table[i] == e)
                wg_remove(i);
        wg_unref(e);
        pthread_mutex_unlock(&wg_lock);
    }
    struct wg_entry *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->key = w;
    n->K = K;
    n->C = C;
    n->changes = changes;
    n->refs = 1;
    if (changes >= WG_CACHE_CHANGES) { /* a marker from now on */
        pthread_mutex_lock(&wg_lock);
        wg_insert(n);
        wg_unref(n);
        pthread_mutex_unlock(&wg_lock);
        return NULL;
    }
    n->w = malloc(nw * sizeof(float));
    n->u = malloc((size_t)(36 * K * C) * sizeof(float));
    n->bytes = bytes;
    if (!n->w || !n->u) {
        free(n->w);
        free(n->u);
        free(n);
        return NULL;
    }
    memcpy(n->w, w, nw * sizeof(float));
    j->u = n->u;
    j->w = n->w;
    vq__parallel_for(K, ceil_div(K, 8), wg_weights, j);
    j->w = w;
    pthread_mutex_lock(&wg_lock);
    wg_insert(n); /* when it does not fit, this call still uses it */
    pthread_mutex_unlock(&wg_lock);
    return n;
}

static void wg_release(struct wg_entry *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&wg_lock);
    wg_unref(e);
    pthread_mutex_unlock(&wg_lock);
}

/* The distance between two elements' rows of V (or of m) for n floats
 * each: n rounded up to a whole, odd number of 64-byte lines. The 36
 * elements are written (V) and read (m) as 36 streams at once; at a
 * multiple of 4 KiB apart (64 channels of 224 tiles) they all fall in
 * one set of the L1 cache, and each store missed: the input transform
 * ran 7x slower than with an odd number of lines between them, which puts
 * them in 36 different sets. */
static int64_t wg_stride(int64_t n)
{
    int64_t lines = ceil_div(n, 16);
    return (lines | 1) * 16;
}

int vq__conv_winograd(const vq__kcall *k, const vq__conv *cv, const vq__window_params *p,
                      const float *x, const float *w, const float *b, float *o)
{
    const vq__window *v = &cv->w;
    int64_t C = cv->cg, K = cv->m;
    int64_t tw = ceil_div(v->ow, 4), tpi = ceil_div(v->oh, 4) * tw, tiles = v->n * tpi;
#ifdef WG_WIDE
    bool wide = vq__sgemm_level() >= VQ__ISA_AVX512;
#else
    bool wide = false;
#endif
    /* blocks of at most WG_BLOCK_FLOATS of V and m and WG_BLOCK_TILES
     * tiles, as even as multiples of unit make them: WG_LANES, or with
     * the AVX-512 transforms a panel of the product (V is written in
     * panels) */
    int64_t unit = wide ? VQ__SG_PANEL : WG_LANES;
    int64_t nb = WG_BLOCK_FLOATS / (36 * (C + K));
    nb = nb < WG_BLOCK_TILES ? nb : WG_BLOCK_TILES;
    nb = nb < unit ? unit : nb / unit * unit;
    int64_t blocks = ceil_div(tiles, nb);
    nb = ceil_div(ceil_div(tiles, blocks), unit) * unit;
    int64_t ld = nb;
    struct wg_job j = {.cv = cv,
                       .x = x,
                       .w = w,
                       .b = b,
                       .o = o,
                       .tw = tw,
                       .tpi = tpi,
                       .ld = ld,
                       .vs = wg_stride(C * ld),
                       .ms = wg_stride(K * ld),
                       .clip = p->clip,
                       .lo = (float)p->clip_lo,
                       .hi = (float)p->clip_hi,
                       .wide = wide};
    struct wg_entry *kept = wg_kept(&j, w, K, C);
    int64_t nu = kept ? 0 : 36 * K * C;
    vq_tensor *scratch = NULL;
    int rc = vq__kernel_scratch(k, VQ_F32, nu + 36 * (j.vs + j.ms), "Winograd buffer", &scratch);
    if (rc < 0) {
        wg_release(kept);
        return rc;
    }
    float *s = scratch->data;
    j.u = kept ? kept->u : s;
    j.v = s + nu;
    j.m = s + nu + 36 * j.vs;
    if (!kept)
        vq__parallel_for(K, ceil_div(K, 8), wg_weights, &j);
    for (int64_t t0 = 0; t0 < tiles; t0 += nb) {
        j.t0 = t0;
        j.nb = tiles - t0 < nb ? tiles - t0 : nb;
        vq__parallel_for(C, ceil_div(C, 8), wg_input, &j);
        vq__parallel_for(36, 3, wg_products, &j);
        vq__parallel_for(K, ceil_div(K, 8), wg_output, &j);
    }
    vq_tensor_release(scratch);
    wg_release(kept);
    return 0;
}
