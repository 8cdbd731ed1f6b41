/* The width-dependent part of varq's f32 product (sgemm.c), written once
 * and included by sgemm.c once per vector width: SGW_BITS 512 (zmm, 16
 * lanes, tiles of 8 rows) or 256 (ymm, 8 lanes, tiles of 6 rows). Each
 * tile is MR rows by two vectors of columns, the sums in 2 MR registers
 * (16 of AVX-512's 32, 12 of AVX2's 16: BLIS's and MLAS's 6 x 16 on
 * AVX2), so a panel of B's 32 columns is one tile wide at 512 bits and two
 * at 256 (its row p then read 16 columns at a time, 32 apart: one cache
 * line a row). Also the two streaming products for a few rows of A
 * (vq__sgemm), and the packing of B. Not a header of its own: the
 * includer defines the vector operations below (SGW_*) first. */

/* SGW_V: a vector; SGW_M: a lane mask; SGW_L: lanes; SGW_MR: rows per
 * tile; SGW(name): the name at this width; SGW_ATTR: the target;
 * SGW_load/store/set1/zero/fma/mul/add; SGW_mask(n): the first n lanes;
 * SGW_mload(m, p) (zeros elsewhere)/SGW_mstore(p, m, v); SGW_clip;
 * SGW_sum: the sum of the lanes. */

#define SGW_INLINE SGW_ATTR __attribute__((always_inline)) inline

/* One tile: rows r[0..MR) of op(A) (r[i] + p * acs is element p), bp
 * the tile's columns of a panel (kc rows, VQ__SG_PANEL apart), nv vectors
 * of them (1 or 2, a constant where inlined), into C at c (rows ldc
 * apart): the first mr rows, the columns masks m0 and m1 allow; C = alpha
 * * sum + beta * C (beta 0: C not read), then ep (NULL: none; the tile's
 * rows are row0.. of ep's). */
static SGW_INLINE void SGW(tile)(int64_t kc, const float *const r[SGW_MR], int64_t acs,
                                 const float *bp, int nv, int mr, SGW_M m0, SGW_M m1, float *c,
                                 int64_t ldc, float alpha, float beta, const vq__sg_epilogue *ep,
                                 int64_t row0)
{
#define SGW_DECL(i) SGW_V s##i##a = SGW_zero(), s##i##b = SGW_zero();
    SGW_ROWS(SGW_DECL)
#define SGW_PTR(i) const float *r##i = r[i];
    SGW_ROWS(SGW_PTR)
    int64_t off = 0;
    if (nv == 2) {
        for (int64_t p = 0; p < kc; p++, off += acs, bp += VQ__SG_PANEL) {
            /* A's rows 128 floats ahead, a line per row every 16 steps:
             * the short runs of a tile's rows are more than the hardware's
             * prefetcher follows (it pays on ResNet-18's 7x7 layers'
             * product with A coming from memory) */
            if (acs == 1 && (p & 15) == 0) {
#define SGW_PREFETCH(i) _mm_prefetch((const char *)(r##i + off + 128), _MM_HINT_T0);
                SGW_ROWS(SGW_PREFETCH)
            }
            SGW_V b0 = SGW_load(bp), b1 = SGW_load(bp + SGW_L);
#define SGW_STEP2(i)                        \
    {                                       \
        SGW_V av = SGW_set1(r##i[off]);     \
        s##i##a = SGW_fma(av, b0, s##i##a); \
        s##i##b = SGW_fma(av, b1, s##i##b); \
    }
            SGW_ROWS(SGW_STEP2)
        }
    } else {
        for (int64_t p = 0; p < kc; p++, off += acs, bp += VQ__SG_PANEL) {
            SGW_V b0 = SGW_load(bp);
#define SGW_STEP1(i) s##i##a = SGW_fma(SGW_set1(r##i[off]), b0, s##i##a);
            SGW_ROWS(SGW_STEP1)
        }
    }
    SGW_V al = SGW_set1(alpha), bt = SGW_set1(beta);
    const float *bias = ep && ep->bias ? ep->bias + row0 : NULL;
    bool clip = ep && ep->clip;
    SGW_V lo = SGW_set1(clip ? ep->lo : 0), hi = SGW_set1(clip ? ep->hi : 0);
    /* beta 1 as one fused multiply-add onto C (every block of k but the
     * first adds so) */
#define SGW_UPDATE(s, m, p)                        \
    (beta == 0   ? SGW_mul(al, s)                  \
     : beta == 1 ? SGW_fma(al, s, SGW_mload(m, p)) \
                 : SGW_fma(al, s, SGW_mul(bt, SGW_mload(m, p))))
#define SGW_EPI(x, i)                      \
    if (bias)                              \
        x = SGW_add(x, SGW_set1(bias[i])); \
    if (clip)                              \
        x = SGW_clip(x, lo, hi);
#define SGW_STORE(i)                                       \
    if (i < mr) {                                          \
        float *ci = c + (int64_t)(i)*ldc;                  \
        SGW_V u = SGW_UPDATE(s##i##a, m0, ci);             \
        SGW_EPI(u, i)                                      \
        SGW_mstore(ci, m0, u);                             \
        if (nv == 2) {                                     \
            SGW_V v = SGW_UPDATE(s##i##b, m1, ci + SGW_L); \
            SGW_EPI(v, i)                                  \
            SGW_mstore(ci + SGW_L, m1, v);                 \
        }                                                  \
    }
    SGW_ROWS(SGW_STORE)
#undef SGW_DECL
#undef SGW_PTR
#undef SGW_PREFETCH
#undef SGW_STEP2
#undef SGW_STEP1
#undef SGW_UPDATE
#undef SGW_EPI
#undef SGW_STORE
}

/* The tiles of one packed block: columns [0, nc) of bp (its panels
 * pstride floats apart) against op(A)'s rows [0, m) from a (element
 * (i, p) at a + i * ars + p * acs); ep: NULL but in the last block of k.
 * Within a panel, the tiles of one group of its columns run down all of
 * A's rows while those columns stay in L1. */
SGW_ATTR static void SGW(block)(int64_t m, int64_t nc, int64_t kc, const float *a, int64_t ars,
                                int64_t acs, const float *bp, int64_t pstride, float *c,
                                int64_t ldc, float alpha, float beta, const vq__sg_epilogue *ep)
{
    for (int64_t j0 = 0; j0 < nc; j0 += VQ__SG_PANEL) {
        const float *panel = bp + j0 / VQ__SG_PANEL * pstride;
        int64_t j1 = nc - j0 < VQ__SG_PANEL ? nc : j0 + VQ__SG_PANEL;
        for (int64_t h = j0; h < j1; h += 2 * SGW_L) {
            int64_t w = nc - h;
            SGW_M m0 = SGW_mask(w), m1 = SGW_mask(w - SGW_L);
            for (int64_t i0 = 0; i0 < m; i0 += SGW_MR) {
                int mr = m - i0 < SGW_MR ? (int)(m - i0) : SGW_MR;
                const float *r[SGW_MR];
                for (int i = 0; i < SGW_MR; i++)
                    r[i] = a + (i0 + (i < mr ? i : mr - 1)) * ars;
                if (w > SGW_L)
                    SGW(tile)
                (kc, r, acs, panel + (h - j0), 2, mr, m0, m1, c + i0 * ldc + h, ldc, alpha, beta,
                 ep, i0);
                else SGW(tile)(kc, r, acs, panel + (h - j0), 1, mr, m0, m1, c + i0 * ldc + h, ldc,
                               alpha, beta, ep, i0);
            }
        }
    }
}

/* B's rows [0, kc), columns [0, nc) (b's rows ldb apart) into panels of
 * VQ__SG_PANEL columns: panel q at bp + q * kc * VQ__SG_PANEL, row p of
 * it at + p * VQ__SG_PANEL, zeros past nc. Each row of a panel is a few
 * (masked) loads and stores: a call to memcpy per row cost more than the
 * copy itself, a visible part of ResNet-18's time at batch 1. */
SGW_ATTR static void SGW(pack)(int64_t kc, int64_t nc, const float *b, int64_t ldb, float *bp)
{
    enum { NV = VQ__SG_PANEL / SGW_L };
    for (int64_t j0 = 0; j0 < nc; j0 += VQ__SG_PANEL) {
        SGW_M mk[NV];
        for (int v = 0; v < NV; v++)
            mk[v] = SGW_mask(nc - j0 - v * SGW_L);
        float *d = bp + j0 * kc;
        const float *s = b + j0;
        for (int64_t p = 0; p < kc; p++, d += VQ__SG_PANEL, s += ldb)
            for (int v = 0; v < NV; v++)
                SGW_store(d + v * SGW_L, SGW_mload(mk[v], s + v * SGW_L));
    }
}

/* What the streaming products do to one vector of C's row i as they
 * store it for the last time (ep as for vq__sgemm). */
static SGW_INLINE SGW_V SGW(finish)(SGW_V x, const vq__sg_epilogue *ep, int64_t i)
{
    if (ep && ep->bias)
        x = SGW_add(x, SGW_set1(ep->bias[i]));
    if (ep && ep->clip)
        x = SGW_clip(x, SGW_set1(ep->lo), SGW_set1(ep->hi));
    return x;
}

/* C = alpha A B + beta C for M <= VQ__SG_FEW rows of A (rows lda apart),
 * B k x n (rows ldb apart), without packing: four rows of B at a time
 * added into C's rows (C, a few rows of n floats, stays in the cache
 * while B streams through once, four rows read in order). Each element
 * is the sum over k in order, alpha folded into A's values. */
static SGW_INLINE void SGW(rows_m)(const int M, int64_t n, int64_t k, float alpha, const float *a,
                                   int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                                   int64_t ldc, const vq__sg_epilogue *ep)
{
    for (int64_t p0 = 0; p0 < k; p0 += 4) {
        int pr = k - p0 < 4 ? (int)(k - p0) : 4;
        bool first = p0 == 0, last = p0 + pr == k;
        SGW_V av[VQ__SG_FEW][4];
        for (int i = 0; i < M; i++)
            for (int q = 0; q < pr; q++)
                av[i][q] = SGW_set1(alpha * a[i * lda + p0 + q]);
        const float *bq = b + p0 * ldb;
        for (int64_t j = 0; j < n; j += SGW_L) {
            bool full = n - j >= SGW_L;
            SGW_M mk = SGW_mask(n - j);
#define SGW_LD(p) (full ? SGW_load(p) : SGW_mload(mk, p))
            SGW_V s[VQ__SG_FEW];
            for (int i = 0; i < M; i++)
                s[i] = !first      ? SGW_LD(c + i * ldc + j)
                       : beta == 0 ? SGW_zero()
                       : beta == 1 ? SGW_LD(c + i * ldc + j)
                                   : SGW_mul(SGW_set1(beta), SGW_LD(c + i * ldc + j));
            for (int q = 0; q < pr; q++) {
                SGW_V bv = SGW_LD(bq + q * ldb + j);
                for (int i = 0; i < M; i++)
                    s[i] = SGW_fma(av[i][q], bv, s[i]);
            }
#undef SGW_LD
            for (int i = 0; i < M; i++) {
                SGW_V x = last ? SGW(finish)(s[i], ep, i) : s[i];
                if (full)
                    SGW_store(c + i * ldc + j, x);
                else
                    SGW_mstore(c + i * ldc + j, mk, x);
            }
        }
    }
}

/* C = alpha A B^T + beta C for M <= VQ__SG_FEW rows of A (rows lda
 * apart), B n x k (rows ldb apart): dot products of A's rows with each of
 * B's rows in two vectors of lanes, B read once in order (ONNX's Gemm
 * with transB at batch 1, where OpenBLAS's sgemm took 3x as long). Each
 * dot product's order depends only on k. */
static SGW_INLINE void SGW(dots_m)(const int M, int64_t n, int64_t k, float alpha, const float *a,
                                   int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                                   int64_t ldc, const vq__sg_epilogue *ep)
{
    for (int64_t j = 0; j < n; j++) {
        const float *y = b + j * ldb;
        SGW_V s0[VQ__SG_FEW], s1[VQ__SG_FEW];
        for (int i = 0; i < M; i++)
            s0[i] = s1[i] = SGW_zero();
        int64_t p = 0;
        for (; p + 2 * SGW_L <= k; p += 2 * SGW_L) {
            SGW_V b0 = SGW_load(y + p), b1 = SGW_load(y + p + SGW_L);
            for (int i = 0; i < M; i++) {
                s0[i] = SGW_fma(SGW_load(a + i * lda + p), b0, s0[i]);
                s1[i] = SGW_fma(SGW_load(a + i * lda + p + SGW_L), b1, s1[i]);
            }
        }
        for (; p < k; p += SGW_L) {
            SGW_M mk = SGW_mask(k - p);
            SGW_V b0 = SGW_mload(mk, y + p);
            for (int i = 0; i < M; i++)
                s0[i] = SGW_fma(SGW_mload(mk, a + i * lda + p), b0, s0[i]);
        }
        for (int i = 0; i < M; i++) {
            float d = alpha * SGW_sum(SGW_add(s0[i], s1[i]));
            float *ci = c + i * ldc + j;
            float v = beta == 0 ? d : beta == 1 ? d + *ci : d + beta * *ci;
            if (ep && ep->bias)
                v += ep->bias[i];
            if (ep && ep->clip) {
                v = v <= ep->lo ? ep->lo : v;
                v = v >= ep->hi ? ep->hi : v;
            }
            *ci = v;
        }
    }
}

/* The streaming products for m <= VQ__SG_FEW, each with m a constant. */
SGW_ATTR static void SGW(few)(bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                              int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                              int64_t ldc, const vq__sg_epilogue *ep)
{
#define SGW_FEW(M)                                                         \
    case M:                                                                \
        if (tb)                                                            \
            SGW(dots_m)(M, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ep); \
        else                                                               \
            SGW(rows_m)(M, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ep); \
        break;
    switch (m) {
        SGW_FEW(1)
        SGW_FEW(2)
        SGW_FEW(3)
        SGW_FEW(4)
    }
#undef SGW_FEW
}

#undef SGW_INLINE
