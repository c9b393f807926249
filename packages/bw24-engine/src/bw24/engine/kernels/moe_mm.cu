// moe_mm.cu: a mixture of experts' prefill FFN as grouped GEMMs on tensor cores, with the routing read on
// the device (ops/cuda/moe_prefill.py grouped_ffn, BW24_MOE_GROUPED: the default): no host sync, a launch sequence that
// does not depend on the routing.
//
// Formula (S = T*k routed slots, slot s = t*k + j, e = sel[s]; xh / sx: x_to_half's float16 rows and row
// scales, x[t] = sx[t] * xh[t]):
//   moe_group:        off[e] .. off[e+1]: the slots of expert e in perm; row tiles (e, r0) of MM_BM rows each
//   moe_mm<F, true>:  h[s, n] = act(sx[t] * (xh[t] . gate_e[n])) * (sx[t] * (xh[t] . up_e[n]))
//   moe_mm<F, false>: d[s, n] = sh[s] * (hh[s] . down_e[n])        (hh / sh: x_to_half of h)
// then moe_combine (moe.cu) sums the k rows d[t*k + j] of each token in j order, as decode does. The
// weights are decoded per 32-column group (quant.cuh decode_group: the fp32 path's values) and rounded to
// float16, as prefill_gemm.cu's dequant_rows_h hands them to cuBLAS; products accumulate in float32.
//
// Thread-to-data mapping:
//   moe_group: one block; shared-memory counts (atomics), a serial scan over the X <= 1024 experts, each
//     slot placed at off[e] + (an atomic rank within e: any order, since a row's arithmetic does not depend
//     on its place in a tile), each expert's ceil(count / MM_BM) tiles listed after the earlier experts'.
//   moe_mm: block (column tile of MM_BN outputs, row tile); 4 warps of 16 rows each. Per stage of KG
//     32-column groups the block copies its MM_BM rows of A (16-byte loads; rows past the tile's count are
//     zero) and decodes its MM_BN weight rows' groups (gate and up: 2 x MM_BN, one thread a row; without the
//     GLU two threads a row, each half the groups) into shared memory as float16, then each warp runs KG x 2
//     k-steps x 8 n-tiles (x 2 for gate and up) of mma16816 with 32-bit shared fragment loads (rows padded by
//     8 halves: conflict-free). Blocks whose row tile is past the tile count
//     return at once (the grid is sized for the most tiles S rows can make: ceil(S / MM_BM) + X).
// Bytes moved: each used expert's repacked weights once per row tile (one for <= MM_BM routed rows), A rows
//   2*K per row per column tile (from L2), the output 4*N per row.
#include "mma.cuh"
#include "quant.cuh"

#define MM_BM 64  // rows (routed slots) a tile
#define MM_BN 64  // output columns a block (of gate and of up each, for the GLU form)
#define MM_KP 40  // a shared row: one 32-column group of halves + 8 of padding

// sel [S] -> off [X + 1], perm [S], tile_e / tile_r0 [<= ceil(S / MM_BM) + X], ntiles [1].
extern "C" __global__ void moe_group(const int* __restrict__ sel, int S, int X, int* __restrict__ off,
                                     int* __restrict__ perm, int* __restrict__ tile_e, int* __restrict__ tile_r0,
                                     int* __restrict__ ntiles) {
    PDL_OPEN();
    __shared__ int cnt[1024], start[1024], fill[1024], tstart[1024];
    for (int e = threadIdx.x; e < X; e += blockDim.x) cnt[e] = fill[e] = 0;
    __syncthreads();
    for (int s = threadIdx.x; s < S; s += blockDim.x) atomicAdd(&cnt[sel[s]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int o = 0, t = 0;
        for (int e = 0; e < X; ++e) {
            start[e] = o;
            tstart[e] = t;
            off[e] = o;
            o += cnt[e];
            t += (cnt[e] + MM_BM - 1) / MM_BM;
        }
        off[X] = o;
        *ntiles = t;
    }
    __syncthreads();
    for (int s = threadIdx.x; s < S; s += blockDim.x) {
        const int e = sel[s];
        perm[start[e] + atomicAdd(&fill[e], 1)] = s;
    }
    for (int e = threadIdx.x; e < X; e += blockDim.x)
        for (int j = 0; j < (cnt[e] + MM_BM - 1) / MM_BM; ++j) {
            tile_e[tstart[e] + j] = e;
            tile_r0[tstart[e] + j] = j * MM_BM;
        }
}

// A rows: row i of the tile reads xh[src(i)] (src = slot / rdiv: the token for gate/up, the slot for down).
// GLU: two weights (gate pa.., up pe..) of the same format; otherwise pe.. are unused.
// KG: 32-column groups a stage (BW24_MOE_MM_KG; K / 32 a multiple of it). A stage stages KG groups of A and of
// the weights with one pair of barriers, each thread decoding its row's groups into registers (as packed
// halves) before the first barrier, so its loads are in flight while the other warps finish the previous
// stage's mma; at KG = 1 every step waited on one group's loads between two barriers. The mma still run
// group by group, kk by kk, in column order: every KG gives the same bits.
template <int FMT, bool GLU, int KG>
__global__ void __launch_bounds__(128)
moe_mm(const void* __restrict__ pa, const void* __restrict__ pb, const void* __restrict__ pc,
       const void* __restrict__ pd, const void* __restrict__ pe, const void* __restrict__ pf,
       const void* __restrict__ pg, const void* __restrict__ ph, int N, int K, const __half* __restrict__ xh,
       const float* __restrict__ sx, int rdiv, const int* __restrict__ perm, const int* __restrict__ off,
       const int* __restrict__ tile_e, const int* __restrict__ tile_r0, const int* __restrict__ ntiles, int act,
       float* __restrict__ out) {
    PDL_OPEN();
    constexpr int NW = GLU ? 2 : 1;
    constexpr int KP = 32 * KG + 8;          // a shared row: KG groups of halves + 8 of padding (conflict-free)
    constexpr int RB = NW * MM_BN;           // weight rows a block stages (128 with the GLU, 64 without)
    constexpr int TPR = 128 / RB;            // threads a weight row (1 or 2)
    constexpr int GPT = (KG + TPR - 1) / TPR;  // groups a thread decodes a stage
    constexpr int AV = MM_BM * 4 * KG / 128;   // A's 16-byte loads a thread a stage
    static_assert(2 * (MM_BM + RB) * KP <= 48 * 1024, "moe_mm: static shared memory over 48 KiB");
    static_assert(AV >= 1 && RB * TPR == 128, "moe_mm: 128 threads");
    __shared__ __align__(16) __half as[MM_BM][KP];
    __shared__ __align__(16) __half bs[NW][MM_BN][KP];
    __shared__ int arow[MM_BM], aslot[MM_BM];
    const int tile = blockIdx.y;
    if (tile >= *ntiles) return;  // the whole block, before any barrier
    const int e = tile_e[tile], r0 = tile_r0[tile], n0 = blockIdx.x * MM_BN;
    const int rows = min(MM_BM, off[e + 1] - off[e] - r0);
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g4 = lane >> 2, c = lane & 3;
    for (int i = tid; i < MM_BM; i += blockDim.x) {
        const int s = i < rows ? perm[off[e] + r0 + i] : -1;
        aslot[i] = s;
        arow[i] = s >= 0 ? s / rdiv : -1;
    }
    __syncthreads();  // arow is read before the first stage's barrier
    // this thread's weight row (of gate: m = 0, or up: m = 1) and its part of the stage's KG groups; its planes
    // picked by value (a reference to one of two would put both on the stack)
    const int wm = (tid % RB) / MM_BN, wn = tid % MM_BN, part = tid / RB, wrow = n0 + wn;
    const Planes pw = wm ? Planes{pe, pf, pg, ph} : Planes{pa, pb, pc, pd};
    float acc[NW][MM_BN / 8][4];
#pragma unroll
    for (int m = 0; m < NW; ++m)
#pragma unroll
        for (int n = 0; n < MM_BN / 8; ++n) acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.f;
    const bool live = w * 16 < rows;  // this warp has a routed row
    const int G = K >> 5;
    for (int g = 0; g < G; g += KG) {
        u32 wv[GPT][16];  // this thread's groups of the stage, float16 pairs
#pragma unroll
        for (int j = 0; j < GPT; ++j) {
            const int gi = part * GPT + j;
            bool zero = gi >= KG || wrow >= N;
#ifdef BW24_PLANTED_BUG  // kernel_check canary: the last 32-column group never read
            zero = zero || g + gi == G - 1;
#endif
            if (zero) {
#pragma unroll
                for (int i = 0; i < 16; ++i) wv[j][i] = 0u;
            } else {
                float f[32];
                decode_group<FMT>(pw, (i64)e * N + wrow, g + gi, K, f);
#pragma unroll
                for (int i = 0; i < 16; ++i) wv[j][i] = pack_half2(f[2 * i], f[2 * i + 1]);
            }
        }
        uint4 av[AV];  // A: 4 x 16 bytes a row a group
#pragma unroll
        for (int j = 0; j < AV; ++j) {
            const int idx = tid + 128 * j, r = idx / (4 * KG), x = idx % (4 * KG), src = arow[r];
            av[j] = src >= 0 ? __ldg(reinterpret_cast<const uint4*>(xh + (i64)src * K + 32 * g) + x)
                             : make_uint4(0, 0, 0, 0);
        }
        __syncthreads();  // the previous stage's fragments are read
#pragma unroll
        for (int j = 0; j < GPT; ++j) {
            const int gi = part * GPT + j;
            if (gi < KG)
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    reinterpret_cast<uint4*>(&bs[wm][wn][32 * gi])[i] =
                        make_uint4(wv[j][4 * i], wv[j][4 * i + 1], wv[j][4 * i + 2], wv[j][4 * i + 3]);
        }
#pragma unroll
        for (int j = 0; j < AV; ++j) {
            const int idx = tid + 128 * j, r = idx / (4 * KG), x = idx % (4 * KG);
            *reinterpret_cast<uint4*>(&as[r][8 * x]) = av[j];
        }
        __syncthreads();
        if (!live) continue;
#pragma unroll
        for (int gi = 0; gi < KG; ++gi)
#pragma unroll
            for (int kk = 0; kk < 2; ++kk) {
                u32 a[4];
                const int ra = w * 16 + g4, ca = 32 * gi + kk * 16 + 2 * c;
                a[0] = *reinterpret_cast<const u32*>(&as[ra][ca]);
                a[1] = *reinterpret_cast<const u32*>(&as[ra + 8][ca]);
                a[2] = *reinterpret_cast<const u32*>(&as[ra][ca + 8]);
                a[3] = *reinterpret_cast<const u32*>(&as[ra + 8][ca + 8]);
#pragma unroll
                for (int m = 0; m < NW; ++m)
#pragma unroll
                    for (int n = 0; n < MM_BN / 8; ++n) {
                        const u32 b0 = *reinterpret_cast<const u32*>(&bs[m][n * 8 + g4][ca]);
                        const u32 b1 = *reinterpret_cast<const u32*>(&bs[m][n * 8 + g4][ca + 8]);
                        mma16816(acc[m][n], a, b0, b1);
                    }
            }
    }
    if (!live) return;
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // this lane's rows w*16 + g4 (+ 8)
        const int r = w * 16 + g4 + 8 * h, s = aslot[r];
        if (s < 0) continue;
        const float scale = sx[arow[r]];  // a power of two: exact
#pragma unroll
        for (int n = 0; n < MM_BN / 8; ++n)
#pragma unroll
            for (int q = 0; q < 2; ++q) {
                const int col = n0 + n * 8 + 2 * c + q;
                if (col >= N) continue;
                if constexpr (GLU) {
                    const float gv = acc[0][n][2 * h + q] * scale, uv = acc[1][n][2 * h + q] * scale;
                    out[(i64)s * N + col] = glu_act(gv, act) * uv;  // prefill_gemm.cu gemm_epilogue_glu's arithmetic
                } else {
                    out[(i64)s * N + col] = acc[0][n][2 * h + q] * scale;
                }
            }
    }
}
