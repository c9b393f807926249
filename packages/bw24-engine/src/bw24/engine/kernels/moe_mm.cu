// moe_mm.cu: a mixture of experts' prefill FFN as grouped GEMMs on tensor cores, with the routing read on
// the device (ops/cuda/moe_prefill.py grouped_ffn, BW24_MOE_GROUPED=1): no host sync, a launch sequence that
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
//   moe_mm: block (column tile of MM_BN outputs, row tile); 4 warps of 16 rows each. Per 32-column step
//     the block copies its MM_BM rows of A (16-byte loads; rows past the tile's count are zero) and decodes
//     its MM_BN weight rows' group (gate and up: 2 x MM_BN; one thread a row) into shared memory as float16,
//     then each warp runs 2 k-steps x 8 n-tiles (x 2 for gate and up) of mma16816 with 32-bit shared
//     fragment loads (rows padded by 8 halves: conflict-free). Blocks whose row tile is past the tile count
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

// One 32-column group of weight row `row` (of N rows a expert, expert e) as float16 into dst[0..31].
template <int FMT>
__device__ __forceinline__ void stage_group(const Planes& p, int e, int row, int N, int g, int K, __half* dst) {
    if (row >= N) {
#pragma unroll
        for (int i = 0; i < 4; ++i) reinterpret_cast<uint4*>(dst)[i] = make_uint4(0, 0, 0, 0);
        return;
    }
    float w[32];
    decode_group<FMT>(p, (i64)e * N + row, g, K, w);
#pragma unroll
    for (int i = 0; i < 16; ++i) reinterpret_cast<u32*>(dst)[i] = pack_half2(w[2 * i], w[2 * i + 1]);
}

// A rows: row i of the tile reads xh[src(i)] (src = slot / rdiv: the token for gate/up, the slot for down).
// GLU: two weights (gate pa.., up pe..) of the same format; otherwise pe.. are unused.
template <int FMT, bool GLU>
__global__ void __launch_bounds__(128)
moe_mm(const void* __restrict__ pa, const void* __restrict__ pb, const void* __restrict__ pc,
       const void* __restrict__ pd, const void* __restrict__ pe, const void* __restrict__ pf,
       const void* __restrict__ pg, const void* __restrict__ ph, int N, int K, const __half* __restrict__ xh,
       const float* __restrict__ sx, int rdiv, const int* __restrict__ perm, const int* __restrict__ off,
       const int* __restrict__ tile_e, const int* __restrict__ tile_r0, const int* __restrict__ ntiles, int act,
       float* __restrict__ out) {
    PDL_OPEN();
    constexpr int NW = GLU ? 2 : 1;
    __shared__ __align__(16) __half as[MM_BM][MM_KP];
    __shared__ __align__(16) __half bs[NW][MM_BN][MM_KP];
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
    const Planes p0{pa, pb, pc, pd}, p1{pe, pf, pg, ph};
    float acc[NW][MM_BN / 8][4];
#pragma unroll
    for (int m = 0; m < NW; ++m)
#pragma unroll
        for (int n = 0; n < MM_BN / 8; ++n) acc[m][n][0] = acc[m][n][1] = acc[m][n][2] = acc[m][n][3] = 0.f;
    const bool live = w * 16 < rows;  // this warp has a routed row

#ifdef BW24_PLANTED_BUG  // kernel_check canary: the last 32-column group never read
    const int G = (K >> 5) - 1;
#else
    const int G = K >> 5;
#endif
    for (int g = 0; g < G; ++g) {
        __syncthreads();  // the previous step's fragments are read (and arow / aslot written, the first time)
        for (int idx = tid; idx < MM_BM * 4; idx += blockDim.x) {  // A: 4 x 16 bytes a row
            const int r = idx >> 2, x = idx & 3, src = arow[r];
            *reinterpret_cast<uint4*>(&as[r][8 * x]) =
                src >= 0 ? __ldg(reinterpret_cast<const uint4*>(xh + (i64)src * K + 32 * g) + x) : make_uint4(0, 0, 0, 0);
        }
        for (int idx = tid; idx < NW * MM_BN; idx += blockDim.x) {  // B: one weight row's group a thread
            const int m = idx / MM_BN, n = idx % MM_BN;
            stage_group<FMT>(m ? p1 : p0, e, n0 + n, N, g, K, &bs[m][n][0]);
        }
        __syncthreads();
        if (!live) continue;
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
            u32 a[4];
            const int ra = w * 16 + g4, ca = kk * 16 + 2 * c;
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
