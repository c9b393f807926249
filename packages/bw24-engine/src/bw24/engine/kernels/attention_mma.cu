// attention_mma.cu: causal GQA attention of a prefill chunk (T > 16 queries) from a float16 KV cache on
// tensor cores (mma.sync m16n8k16, float16 inputs, float32 accumulation), flash style.
//
// Formula as attention_prefill.cu (its CUDA-core twin, which float32 caches and the gate's exact half
// keep): query t of head h sits at p = pos[0] + t and attends to keys j in [lo, p], lo = 0 or
// p - window + 1; s_j = (q . k_j) * scale, optionally softcap * tanh(s_j / softcap); out = softmax(s) V.
// Precision: q * scale and the probabilities are rounded to float16 for the products (as llama.cpp's
// flash attention does); the cache is float16 already; sums, the softmax state and the output are
// float32. kernel_check holds it to the fp16-product class (gemm16) against the float64 reference.
// Why: the CUDA-core kernel was 6.8 of the 0.6B's 13.4 ms of pp512 kernel time on the H200 (ca80b31),
// ~4 TFLOP/s; the GEMM path (attention_gemm.cu) writes every score to memory and takes 6 launches.
//
// Thread-to-data mapping, attn_mma<D, DV>: block (row tile, kv head hk), 4 warps, 16 query rows a warp
//   (row i = (token i / G, head hk*G + i % G): the G heads of a token share each K/V tile). The block
//   walks 64-key tiles of its causal range: all threads copy the tile's K and V rows into shared memory
//   (16-byte loads; rows past the range are zero), then each warp with a live key in the tile
//     S[16 x 64] = Qw K^T   (D/16 k-steps x 8 n-tiles; q's A fragments sit in registers for the launch,
//                            K's B fragments are 32-bit shared loads),
//     online softmax per row (a row's 16 values of a tile live in the 4 lanes of a quad: 2 shuffles),
//     O[16 x DV] += P V     (P's A fragments are S's accumulators repacked to float16 in registers, the
//                            layouts line up; V's B fragments come from ldmatrix .trans).
//   Fragment layouts (PTX ISA, mma.m16n8k16 .f16): g = lane / 4, c = lane % 4; A regs (row g, cols 2c..),
//   (row g+8, cols 2c..), (row g, cols 2c+8..), (row g+8, cols 2c+8..); B regs (k 2c.., n g), (k 2c+8.., n g);
//   C (row g, cols 2c, 2c+1), (row g+8, same cols).
// Bytes moved: q 4*T*H*D and out 4*T*H*DV once; per block 2*(D + DV) per key of its causal range (the
//   float16 cache rows, from L2 for all but the first block of a kv head to read them).
// Shared memory: K and V tiles, 64 rows of D (DV) halves padded by 8 (conflict-free 32-bit and
// ldmatrix row reads): 34.8 KB at D = DV = 128.
// Key splits (kspan > 0, grid z = ceil(S / kspan); ops/cuda/attn_mma.py split_plan, BW24_ATTN_MMA_SPLIT):
//   a chunk of few row tiles (the 0.6B's 512 tokens: 16 tiles x 8 kv heads = 128 blocks of 4 warps for 132
//   SMs) walks its deep causal range one block at a time. Split z owns keys [z kspan, (z+1) kspan) of
//   its tile's [lo, hi]; a tile whose range lies in one split writes out as above, one spanning several
//   writes, per split, its rows' unnormalized O, running max m and sum l (part_o, part_ml), and
//   attn_mma_combine merges them: M = max m_z, out = sum_z e^(m_z - M) O_z / sum_z e^(m_z - M) l_z.
//   Which splits a tile spans follows from pos on the device, so one captured graph serves every
//   position (the prefill graphs), as without splits.
#include "mma.cuh"
#include <cuda_fp16.h>

#define AM_WARPS 4
#define AM_KT 64  // keys a tile


// The keys [lo, hi] that a row tile (rows r0 .. r0 + 63 of T * G) sees: its last row's causal end, its first
// row's window start. attn_mma walks them and attn_mma_combine finds the tile's splits from them: one formula.
__device__ __forceinline__ void tile_keys(int r0, int rows, int p0, int G, int window, int& lo, int& hi) {
    hi = p0 + (min(r0 + AM_WARPS * 16, rows) - 1) / G;
    lo = window > 0 ? max(0, p0 + r0 / G - window + 1) : 0;
}

template <int D, int DV>
__global__ void __launch_bounds__(AM_WARPS * 32)
attn_mma(const float* __restrict__ q, const __half* __restrict__ kc, const __half* __restrict__ vc,
         const int* __restrict__ pos, int T, int H, int G, int S, float scale, float softcap, int window,
         float* __restrict__ out, int kspan, float* __restrict__ part_o, float* __restrict__ part_ml) {
    PDL_OPEN();
    static_assert(D % 16 == 0 && DV % 16 == 0 && D <= 128 && DV <= 128, "head dims: multiples of 16, <= 128");
    constexpr int KP = D + 8, VP = DV + 8;  // padded row lengths (halves): 16-byte aligned rows
    constexpr int NT = AM_KT / 8, NO = DV / 8, KS = D / 16;
    __shared__ __align__(16) __half ks[AM_KT][KP];
    __shared__ __align__(16) __half vs[AM_KT][VP];
    const int hk = blockIdx.y, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int g = lane >> 2, c = lane & 3;
    const int rows = T * G, r0 = blockIdx.x * (AM_WARPS * 16), wr0 = r0 + w * 16;
    const int p0 = pos[0];
    int lo, hi;  // the keys any row of the block sees
    tile_keys(r0, rows, p0, G, window, lo, hi);
    // this block's keys [kb0, kb1]: the tile's [lo, hi], or its share of split z
    int kb0 = lo, kb1 = hi;
    bool partial = false;
    if (kspan > 0) {
        const int z = blockIdx.z, zlo = lo / kspan, zhi = hi / kspan;
        if (z < zlo || z > zhi) return;  // no key of this tile in split z (the whole block, before any barrier)
        partial = zhi > zlo;
        kb0 = max(lo, z * kspan);
        kb1 = min(hi, z * kspan + kspan - 1);
    }

    // this lane's two rows (g, g + 8): position (-1: no row) and first key
    int prow[2], lrow[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int i = wr0 + g + 8 * h;
        prow[h] = i < rows ? p0 + i / G : -1;
        lrow[h] = window > 0 ? max(0, prow[h] - window + 1) : 0;
    }
    const int whi = wr0 < rows ? p0 + (min(wr0 + 15, rows - 1)) / G : -1;  // the warp's last key
    const int wlo = window > 0 ? max(0, p0 + wr0 / G - window + 1) : 0;

    // q * scale as A fragments, float16 (rows past the end are zero)
    u32 qa[KS][4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int i = wr0 + g + 8 * h;
        const float* qr = i < rows ? q + ((i64)(i / G) * H + hk * G + i % G) * D : nullptr;
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int d = kk * 16 + 2 * c + 8 * e;
                const float2 v = qr ? *reinterpret_cast<const float2*>(qr + d) : make_float2(0.f, 0.f);
                qa[kk][h + 2 * e] = pack_half2(v.x * scale, v.y * scale);
            }
        }
    }

    float o[NO][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < NO; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    const __half* kb = kc + (i64)hk * S * D;
    const __half* vb = vc + (i64)hk * S * DV;

    for (int j0 = kb0; j0 <= kb1; j0 += AM_KT) {
        __syncthreads();  // the previous tile's readers are done
        for (int idx = threadIdx.x; idx < AM_KT * D / 8; idx += AM_WARPS * 32) {
            const int r = idx / (D / 8), x = idx % (D / 8), j = j0 + r;
            *reinterpret_cast<uint4*>(&ks[r][8 * x]) =
                j <= kb1 ? __ldg(reinterpret_cast<const uint4*>(kb + (i64)j * D) + x) : make_uint4(0, 0, 0, 0);
        }
        for (int idx = threadIdx.x; idx < AM_KT * DV / 8; idx += AM_WARPS * 32) {
            const int r = idx / (DV / 8), x = idx % (DV / 8), j = j0 + r;
            *reinterpret_cast<uint4*>(&vs[r][8 * x]) =
                j <= kb1 ? __ldg(reinterpret_cast<const uint4*>(vb + (i64)j * DV) + x) : make_uint4(0, 0, 0, 0);
        }
        __syncthreads();
        if (j0 > whi || j0 + AM_KT - 1 < wlo) continue;  // no live key of this warp in the tile

        float s[NT][4];
#pragma unroll
        for (int n = 0; n < NT; ++n) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KS; ++kk) {
                const u32 b0 = *reinterpret_cast<const u32*>(&ks[n * 8 + g][kk * 16 + 2 * c]);
                const u32 b1 = *reinterpret_cast<const u32*>(&ks[n * 8 + g][kk * 16 + 2 * c + 8]);
                mma16816(s[n], qa[kk], b0, b1);
            }
        }
        // mask, softcap, online softmax: row h of this lane holds s[n][2h], s[n][2h + 1]
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = -INFINITY;
#pragma unroll
            for (int n = 0; n < NT; ++n) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int j = j0 + n * 8 + 2 * c + e;
                    float sc = s[n][2 * h + e];
                    if (softcap > 0.f) sc = softcap * tanhf(sc / softcap);
                    sc = (j >= lrow[h] && j <= prow[h] && j <= kb1) ? sc : -INFINITY;  // kb1: the next split's
                    s[n][2 * h + e] = sc;
                    mx = fmaxf(mx, sc);
                }
            }
            mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));
            const float mn = fmaxf(m[h], mx);
            const float corr = mn == -INFINITY ? 1.f : expf(m[h] - mn);  // m = -inf, mn finite: 0
            float sum = 0.f;
#pragma unroll
            for (int n = 0; n < NT; ++n) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float sc = s[n][2 * h + e];
                    const float p = sc == -INFINITY ? 0.f : expf(sc - mn);
                    s[n][2 * h + e] = p;
                    sum += p;
                }
            }
            l[h] = l[h] * corr + sum;  // this lane's share of the row sum (the quad adds them at the end)
            m[h] = mn;
#pragma unroll
            for (int n = 0; n < NO; ++n) {
                o[n][2 * h] *= corr;
                o[n][2 * h + 1] *= corr;
            }
        }
#ifdef BW24_PLANTED_BUG
        constexpr int KC = AM_KT / 16 - 1;  // kernel_check canary: drops the last 16 keys of each tile
#else
        constexpr int KC = AM_KT / 16;
#endif
#pragma unroll
        for (int kc2 = 0; kc2 < KC; ++kc2) {
            const u32 pa[4] = {pack_half2(s[2 * kc2][0], s[2 * kc2][1]), pack_half2(s[2 * kc2][2], s[2 * kc2][3]),
                               pack_half2(s[2 * kc2 + 1][0], s[2 * kc2 + 1][1]),
                               pack_half2(s[2 * kc2 + 1][2], s[2 * kc2 + 1][3])};
#pragma unroll
            for (int n = 0; n < NO; n += 2) {
                // matrices: (keys +0..7, n-tile n), (keys +8..15, n), (keys +0..7, n+1), (keys +8..15, n+1)
                const int mi = lane >> 3;
                const __half* row = &vs[kc2 * 16 + (mi & 1) * 8 + (lane & 7)][(n + (mi >> 1)) * 8];
                pv_two_tiles(o[n], o[n + 1], pa, row);
            }
        }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float sum = l[h];
        sum += __shfl_xor_sync(FULL_MASK, sum, 1);
        sum += __shfl_xor_sync(FULL_MASK, sum, 2);
        const int i = wr0 + g + 8 * h;
        if (i < rows) {
            const i64 ro = (i64)(i / G) * H + hk * G + i % G;  // the output row (token, head)
            if (partial) {  // this split's share: O unnormalized, m (equal in the quad's lanes) and the row sum
                const i64 pr = (i64)blockIdx.z * T * H + ro;
                float* prow_o = part_o + pr * DV;
#pragma unroll
                for (int n = 0; n < NO; ++n)
                    *reinterpret_cast<float2*>(prow_o + n * 8 + 2 * c) = make_float2(o[n][2 * h], o[n][2 * h + 1]);
                if (c == 0) *reinterpret_cast<float2*>(part_ml + 2 * pr) = make_float2(m[h], sum);
            } else {
                float* orow = out + ro * DV;
                const float inv = 1.f / sum;
#pragma unroll
                for (int n = 0; n < NO; ++n)
                    *reinterpret_cast<float2*>(orow + n * 8 + 2 * c) =
                        make_float2(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
            }
        }
    }
}

// The key splits' merge (see the header): one warp per output row (token t, head h), DV / 32 columns a
// lane. The row's tile and so its splits [zlo, zhi] follow from tile_keys, as attn_mma's do; a tile within
// one split was written by attn_mma and is left alone. Every row has its own key p0 + t in [lo, hi], so M is
// finite.
template <int DV>
__global__ void __launch_bounds__(128)
attn_mma_combine(const float* __restrict__ part_o, const float* __restrict__ part_ml, const int* __restrict__ pos,
                 int T, int H, int G, int window, int kspan, float* __restrict__ out) {
    PDL_OPEN();
    static_assert(DV % 32 == 0, "DV: a multiple of 32");
    const int row = blockIdx.x * 4 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= T * H) return;
    const int t = row / H, h = row % H, i = t * G + h % G;  // row i of kv head h / G, as attn_mma numbers them
    int lo, hi;
    tile_keys(i / (AM_WARPS * 16) * (AM_WARPS * 16), T * G, pos[0], G, window, lo, hi);
#ifdef BW24_PLANTED_BUG
    const int zlo = lo / kspan, zhi = hi / kspan - 1;  // kernel_check canary: the merge drops the last split
    if (zlo == zhi + 1) return;
#else
    const int zlo = lo / kspan, zhi = hi / kspan;
    if (zlo == zhi) return;
#endif
    const i64 TH = (i64)T * H;
    float M = -INFINITY;
    for (int z = zlo; z <= zhi; ++z) M = fmaxf(M, part_ml[2 * (z * TH + row)]);
    float L = 0.f, acc[DV / 32];
#pragma unroll
    for (int e = 0; e < DV / 32; ++e) acc[e] = 0.f;
    for (int z = zlo; z <= zhi; ++z) {
        const float mz = part_ml[2 * (z * TH + row)];
        const float w = mz == -INFINITY ? 0.f : expf(mz - M);  // a split with no key of this row: nothing
        L += w * part_ml[2 * (z * TH + row) + 1];
        const float* po = part_o + (z * TH + row) * DV;
#pragma unroll
        for (int e = 0; e < DV / 32; ++e) acc[e] += w * po[lane + 32 * e];
    }
    const float inv = 1.f / L;
#pragma unroll
    for (int e = 0; e < DV / 32; ++e) out[(i64)row * DV + lane + 32 * e] = acc[e] * inv;
}
