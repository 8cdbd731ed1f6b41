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
 * the output tiles stored four at a time by SSE 4x4 transposes.
 *
 * Accuracy: the transforms scale the data up (B^T's entries reach 5, A^T's
 * 8) before the sums that round, so the error relative to the output's
 * magnitude is a few 1e-6 for f32 (4.3e-6 at most over
 * tests/test_ops_conv.c's cases) against im2col's ~1e-7.
 * A NaN or an infinity in X makes NaN (or infinite) every output of the
 * tiles whose patches hold it, not only of the windows that read it: the
 * transforms mix the whole patch (infinity - infinity is NaN). */
#include "winograd.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE__
#include <xmmintrin.h>
#endif

/* Tiles (input channels for U) one vector step handles. */
#define WG_LANES 8
/* Below these, im2col's single product costs as much or less (2 workers;
 * README "Models people have"): with 8 input channels the input transform
 * outweighs the product it saves (56x56, 8 to 32 channels: 0.109 ms
 * against 0.094), with 16 it pays (16 to 8: 0.072 against 0.081); 4
 * output channels break even (64 to 4 channels); and a call of 16 tiles
 * (ResNet-18's 256-channel 14x14 layers at batch 1) breaks even too, its
 * U (9.4 MB, 4x the weights) read and written for 16 tiles' products
 * (1.12 against 1.19 ms, and the same ResNet-18 time), while 32 tiles
 * (batch 2) pay: 1.75 against 2.10 ms. With U kept between calls and the
 * AVX-512 product, 16 tiles lose: 0.68 against 0.62 ms (3 alternated
 * pairs), U's 9.4 MB read from memory each call. */
#define WG_MIN_IN_CHANNELS 16
#define WG_MIN_OUT_CHANNELS 8
#define WG_MIN_TILES 32
/* The most floats of V and m together one block keeps (32 MB), and
 * about the most tiles of a block. Few tiles make 36 small products, each
 * packing its U again (OpenBLAS's copy routines): at ResNet-18's 512
 * channels, blocks of 56 tiles took 1.2x the time of one of 128 (26.2
 * against 21.5 ms); many tiles fall out of the caches: at 64 channels,
 * blocks of 900 tiles took 1.1x the time of 450 (batch 32, 2 workers). */
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
    return cv->cg >= WG_MIN_IN_CHANNELS && cv->m >= WG_MIN_OUT_CHANNELS && tiles >= WG_MIN_TILES;
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
    float *v;        /* [36][C][ld]: the block's transformed input */
    float *m;        /* [36][K][ld]: the block's products */
    int64_t tw, tpi; /* tiles per tile row, per image */
    int64_t t0, nb;  /* the block: tiles [t0, t0 + nb) of all images' */
    int64_t ld;      /* the block's row length (a multiple of WG_LANES) */
    bool clip;
    float lo, hi;
};

/* Where tile t lies: its image, and its output corner (oy, ox). */
static void tile_at(const struct wg_job *j, int64_t t, int64_t *img, int64_t *oy, int64_t *ox)
{
    int64_t r = t % j->tpi;
    *img = t / j->tpi;
    *oy = r / j->tw * 4;
    *ox = r % j->tw * 4;
}

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
                    memcpy(dst + e * C * j->ld, out[e], sizeof out[e]);
            else
                for (int e = 0; e < 36; e++)
                    memcpy(dst + e * C * j->ld, out[e], (size_t)n * sizeof(float));
        }
    return 0;
}

/* The block's products for elements [lo, hi). */
static int wg_products(void *arg, int64_t lo, int64_t hi, int slot)
{
    (void)slot;
    const struct wg_job *j = arg;
    int64_t C = j->cv->cg, K = j->cv->m;
    for (int64_t e = lo; e < hi; e++)
        vq__gemm_ldc(VQ_F32, false, false, K, j->nb, C, 1, j->u + e * K * C, C,
                     j->v + e * C * j->ld, j->ld, 0, j->m + e * K * j->ld, j->ld);
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
    const vq__window *v = &j->cv->w;
    int64_t K = j->cv->m, OH = v->oh, OW = v->ow;
    float m[36][WG_LANES], y[16][WG_LANES];
    for (int64_t k = lo; k < hi; k++) {
        float bv = j->b ? j->b[k] : 0;
        for (int64_t g = 0; g < j->nb; g += WG_LANES) {
            int64_t n = j->nb - g < WG_LANES ? j->nb - g : WG_LANES;
            for (int e = 0; e < 36; e++) {
                const float *s = j->m + (e * K + k) * j->ld + g;
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
 * An inference calls each layer with the same weights every time, and U
 * cost about a quarter of the Winograd layers' time at batch 1 (ResNet-18:
 * wg_weights and wg_filter, 5.5% of all perf samples). So U is kept per
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

static void wg_read_budget(void)
{
    const char *e = getenv("VARQ_CONV_WINOGRAD_CACHE_MB");
    char *end;
    unsigned long long mb = e ? strtoull(e, &end, 10) : 256;
    if (e && (end == e || *end))
        mb = 256;
    wg_budget = mb > SIZE_MAX >> 20 ? SIZE_MAX : (size_t)mb << 20;
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

int vq__conv_winograd(const vq__kcall *k, const vq__conv *cv, const vq__window_params *p,
                      const float *x, const float *w, const float *b, float *o)
{
    const vq__window *v = &cv->w;
    int64_t C = cv->cg, K = cv->m;
    int64_t tw = ceil_div(v->ow, 4), tpi = ceil_div(v->oh, 4) * tw, tiles = v->n * tpi;
    /* blocks of at most WG_BLOCK_FLOATS of V and m and WG_BLOCK_TILES
     * tiles, as even as multiples of WG_LANES make them */
    int64_t nb = WG_BLOCK_FLOATS / (36 * (C + K));
    nb = nb < WG_BLOCK_TILES ? nb : WG_BLOCK_TILES;
    nb = nb < WG_LANES ? WG_LANES : nb / WG_LANES * WG_LANES;
    int64_t blocks = ceil_div(tiles, nb);
    nb = ceil_div(ceil_div(tiles, blocks), WG_LANES) * WG_LANES;
    int64_t ld = nb;
    struct wg_job j = {.cv = cv,
                       .x = x,
                       .w = w,
                       .b = b,
                       .o = o,
                       .tw = tw,
                       .tpi = tpi,
                       .ld = ld,
                       .clip = p->clip,
                       .lo = (float)p->clip_lo,
                       .hi = (float)p->clip_hi};
    struct wg_entry *kept = wg_kept(&j, w, K, C);
    int64_t nu = kept ? 0 : 36 * K * C;
    vq_tensor *scratch = NULL;
    int rc = vq__kernel_scratch(k, VQ_F32, nu + 36 * (C + K) * ld, "Winograd buffer", &scratch);
    if (rc < 0) {
        wg_release(kept);
        return rc;
    }
    float *s = scratch->data;
    j.u = kept ? kept->u : s;
    j.v = s + nu;
    j.m = s + nu + 36 * C * ld;
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
