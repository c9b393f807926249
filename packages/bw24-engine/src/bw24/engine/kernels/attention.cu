// attention.cu: causal GQA attention of T queries against the KV cache, split-K (flash-decoding).
//
// Formula: query t of head h at position p = pos[0] + t attends to keys j in [lo, p], lo = 0 or
// p - window + 1 (sliding window); s_j = (q . k_j) * scale, optionally softcap * tanh(s_j / softcap);
// out = sum_j softmax(s)_j v_j. kv head hk = h / G serves the G = H / Hkv query heads.
// pos is read from device memory: one launch shape serves every position (graph replay).
//
// Splits: the n = p - lo + 1 live keys are cut into chunks of c = CH * ceil(n / (CH * maxs)) keys
// (CH a template constant, maxs a launch argument = grid.y): short contexts get CH-key chunks (many
// blocks, one latency round each), long ones at most maxs chunks (bounded partials, long streams).
// c depends on p only, never on T, so row t of a T-row launch computes exactly what a T = 1 launch
// at position p does (speculative verify == decode, bit for bit).
//
// Thread-to-data mapping, pass 1, attn_split<D, DV, G, CH>: block (kv head hk, split s, token t) (hk
//   fastest, so the live low splits are scheduled first and the dead ones after them),
//   NW = 4 warps, scans keys [lo + s*c, min(lo + (s+1)*c, p+1)) for all G query heads of hk (each K/V
//   row read once per kv head). Per round the block takes NW*KB consecutive keys, warp w the KB keys
//   at w*KB: the warp issues all KB K rows and V rows as 16-byte loads into registers first (lane owns
//   dims [lane*D/32, (lane+1)*D/32)), then does the math: KB dot products + warp sums per head, one
//   online-softmax update per head and round (m, l, acc[DV/32] per lane). Warps merge through shared
//   memory; the block writes (m, l, acc) per (t, h, s), or the final acc / l when it is the only
//   live split (identical to what pass 2 would compute: weights e^0 = 1).
// Pass 2, attn_combine: block (h, t), threads over output dims; M = max of the live m_s (block max),
//   w_s = e^(m_s - M) staged in shared memory per tile of splits, then each thread sums, in split
//   order, L = sum_s l_s w_s and A = sum_s acc_s[d] w_s (loads unrolled), out = A / L.
//   Or fused (tickets != null): each live split block of (t, hk) takes a ticket after writing its
//   partials; the last one runs pass 2 for its G heads itself (combine_head: the same arithmetic) and
//   re-arms the ticket: one launch per layer fewer, and no bit of the result changes.
// KT: the cache element (float, or __half for a half cache: the loads convert, the math is fp32).
// Bytes moved: sizeof(KT)*(D+DV) per cached key per kv head + partials 2*4*(DV+2) per (head,
//   split) written and read back (<= 2*G/c of the KV bytes).
// xq != null (decode/verify rows whose consumer is a q8 matvec, ops/cuda/attn.py): the output rows'
//   int8 quantization goes to xq / xs as well (quant_x.cuh: the bits quantize_x writes from the same
//   floats), from whichever launch writes the output: attn_split's only live split, attn_combine, or
//   the fused pass 2's last split block.
//   One warp holds 32 consecutive output dims of one head (DV % 32 == 0): one group of the row
//   [T, H * DV]. Saves the quantize_x launch in front of the output projection.
#include "common.cuh"
#include "quant_x.cuh"

#define NW 4
#define COMBINE_TILE 256
// combine_head's loop over the splits of a tile, unrolled this far: each thread's partial loads (from L2)
// in flight at once. Unrolled 8 until b6232b5, where a (token, head)'s 33 splits took ~5 dependent L2 round
// trips at depth 4096 and 66 / 132 splits made the 8B's decode slower (339.8 / 289.1 against 371.8 tok/s,
// 370d098); unrolled 32 on the H200 at b6232b5: the 0.6B's d4096 decode 884.7 tok/s against 795.2, the 8B's
// 377.1 against 371.9, and 66 splits then faster than 33 (905.9 / 383.5). BW24_ATTN_COMBINE32=0
// (ops/cuda/backend.py) builds 8 again. Unrolling reorders no arithmetic: each sum still runs in split
// order (the same bits; kernel-check's "attn combine32 == combine8 bitwise").
#ifndef BW24_COMBINE_UNROLL
#define BW24_COMBINE_UNROLL 32
#endif
// Not here: pass 2 with each thread's own split's (m, l) kept from the max's pass and its partials loaded in batches
// of 40 (two dependent L2 round trips fewer at 33 splits; BW24_ATTN_COMBINE_ONCE=1 at ac4d4d4): the same bits, but
// on the H200 slower a layer at 4,096 keys in decode (the 32B 16.56 us against 15.05, the 8B 15.41 against 14.03)
// and no faster in verify rows (evidence/attn_sweep_h200_ac4d4d4.log). Removed.
// Not here: the fused pass 2's last block combining its G heads all at once (BW24_ATTN_FUSE_ALL, 1aeef0e) instead
// of one after another: on the H200 at 5107205 slower than pass 2 as its own launch at every shape measured (the
// 30B-A3B's 4,096 keys 22.50 us a layer against 16.44; evidence/attn_sweep_h200_5107205.log). Removed.
// Not here: loading the first 72 splits' partial rows and (m, l) before the max (one L2 round trip instead of
// 3-4; BW24_ATTN_COMBINE_PF=72 at 5b56e32) made the decode slower on every cell measured, most where pass 2 is
// the larger share: the 0.6B's d0 token -13.1%, the 8B's -7.3% (d0) / -2.0% (d4096). Removed.

// BW24_ATTN_SHORT (one split up to that many live keys): attn_chunk.cuh, with the split rule.

// BW24_ATTN_FILL (ops/cuda/backend.py attn_fill; opt-in, 1 = off): up to this many blocks share a block's
// G q heads when the split blocks past the live range are idle, i.e. at shallow depth: live splits x f <= the
// grid's splits. Why: with ~100 keys the 8B ran 4 live splits x 8 kv heads = 32 blocks of 4 heads on 132
// SMs; two blocks of 2 heads a kv head (BW24_ATTN_BLOCK_HEADS=2) made its d0 token 3.5% faster, the 30B-A3B's
// 3.8%, the 32B's 1.3%, while at depth 4096 (every split live) the 32B's was 2.5% slower (1653f1f). The idle
// blocks of grid.y take the other heads, so the grid (and the depth case) is unchanged. Each head's
// arithmetic is the same in any grouping (the bits too); the fused pass 2 (tickets per head group) keeps f = 1.
#ifndef BW24_ATTN_FILL
#define BW24_ATTN_FILL 1
#endif

// BW24_ATTN_MIN_BLOCKS (ops/cuda/backend.py attn_min_blocks; opt-in, 1 = off): attn_split's blocks resident per SM
// that the compiler must fit (registers <= 65536 / (128 x N)). Why: built freely the 8B's and 32B's instance
// (4 q heads a block, half cache) takes 154 registers a thread (ptxas -v, sm_90a), so an SM holds 3 blocks of
// 128 threads: at depth 4096 the 8B's 8 kv heads x 66 splits = 528 blocks run as 396 + 132 (two waves, the
// second a third full), the 32B's 1,056 as three. At 4 a SM, 128 registers (84 bytes of spills at G = 4, none at
// G = 2), they run as one wave and two. The arithmetic is the same PTX (registers and spills only), so are the
// bits; kernel-check holds it to that.
#ifndef ATTN_MIN_BLOCKS
#define ATTN_MIN_BLOCKS 1
#endif
#if ATTN_MIN_BLOCKS > 1
#define ATTN_BOUNDS __launch_bounds__(NW * 32, ATTN_MIN_BLOCKS)
#else
#define ATTN_BOUNDS __launch_bounds__(NW * 32)
#endif

// The keys a split for n live keys (attn_chunk_len; attention_dec_mma.cu splits by the same rule).
#include "attn_chunk.cuh"

// BW24_ATTN_DEC_MMA (ops/cuda/attn.py; opt-in, 0 = off): rows with more live keys than this take pass 1 in
// attention_dec_mma.cu (tensor cores); attn_split returns for them, attn_combine merges every row.
#ifndef BW24_ATTN_DEC_MMA
#define BW24_ATTN_DEC_MMA 0
#endif

// The warp sums of 2^LOGN values at once (v: this lane's share of each; v is clobbered). The first LOGN
// steps of warp_sum's xor butterfly (offsets 16, 8, ...) halve the values a lane holds: it keeps the half
// whose index bit matches its lane bit and adds its partner's share of it, one shuffle per kept value; the
// remaining steps are warp_sum's. Every total is formed over the same lane pairs in the same tree as
// warp_sum, so it has the same bits. Returns the total of index lane >> (5 - LOGN); 2^LOGN - 1 + 5 - LOGN
// shuffles in all, where warp_sum takes 5 a value.
template <int LOGN, int S = 0>
__device__ __forceinline__ void warp_sum_halve(float (&v)[1 << LOGN], int lane) {
    if constexpr (S < LOGN) {  // step S: offset 16 >> S; compile-time counts, so v stays in registers
        constexpr int o = 16 >> S, half = (1 << LOGN) >> (S + 1);
        const bool up = (lane & o) != 0;  // keeps index bit LOGN - 1 - S = 1
#pragma unroll
        for (int i = 0; i < half; ++i) {
            const float a = v[i], b = v[i + half];
            v[i] = (up ? b : a) + __shfl_xor_sync(FULL_MASK, up ? a : b, o);
        }
        warp_sum_halve<LOGN, S + 1>(v, lane);
    }
}

template <int LOGN>
__device__ __forceinline__ float warp_sum_many(float (&v)[1 << LOGN], int lane) {
    static_assert(LOGN >= 1 && LOGN <= 5, "2 to 32 values");
    warp_sum_halve<LOGN>(v, lane);
    float r = v[0];
#pragma unroll
    for (int o = 16 >> LOGN; o > 0; o >>= 1) r += __shfl_xor_sync(FULL_MASK, r, o);
    return r;
}

// P consecutive floats into registers with the widest aligned loads (p is 4*P-byte aligned).
template <int P>
__device__ __forceinline__ void load_row(float (&r)[P], const float* __restrict__ p) {
    if constexpr (P % 4 == 0) {
#pragma unroll
        for (int i = 0; i < P / 4; ++i) {
            const float4 v = reinterpret_cast<const float4*>(p)[i];
            r[4 * i] = v.x; r[4 * i + 1] = v.y; r[4 * i + 2] = v.z; r[4 * i + 3] = v.w;
        }
    } else if constexpr (P % 2 == 0) {
#pragma unroll
        for (int i = 0; i < P / 2; ++i) {
            const float2 v = reinterpret_cast<const float2*>(p)[i];
            r[2 * i] = v.x; r[2 * i + 1] = v.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < P; ++i) r[i] = p[i];
    }
}

// The same from a half KV cache (p is 2*P-byte aligned): 4 halves per 8-byte load, else pairs.
template <int P>
__device__ __forceinline__ void load_row(float (&r)[P], const __half* __restrict__ p) {
    if constexpr (P % 4 == 0) {
#pragma unroll
        for (int i = 0; i < P / 4; ++i) {
            const float4 v = kv_load4(p + 4 * i);
            r[4 * i] = v.x; r[4 * i + 1] = v.y; r[4 * i + 2] = v.z; r[4 * i + 3] = v.w;
        }
    } else if constexpr (P % 2 == 0) {
#pragma unroll
        for (int i = 0; i < P / 2; ++i) {
            const float2 v = __half22float2(reinterpret_cast<const __half2*>(p)[i]);
            r[2 * i] = v.x; r[2 * i + 1] = v.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < P; ++i) r[i] = __half2float(p[i]);
    }
}

// A cached row's P values (this lane's share) as the loaded 32-bit words, converted to float later: with
// BW24_ATTN_PIPE, attn_split issues the next round's K / V loads before this round's math (a warp stalls at
// the first use of a pending load, not at its issue). The conversions are exact, as load_row's.
template <int P, typename KT>
struct RawRow {
    static constexpr int WORDS = P * (int)sizeof(KT) / 4 > 0 ? P * (int)sizeof(KT) / 4 : 1;
    u32 w[WORDS];
    __device__ __forceinline__ void load(const KT* __restrict__ p) {
        const u32* q = reinterpret_cast<const u32*>(p);
        if constexpr (WORDS % 4 == 0) {
#pragma unroll
            for (int i = 0; i < WORDS / 4; ++i) {
                const uint4 v = __ldg(reinterpret_cast<const uint4*>(q) + i);
                w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
            }
        } else if constexpr (WORDS % 2 == 0) {
#pragma unroll
            for (int i = 0; i < WORDS / 2; ++i) {
                const uint2 v = __ldg(reinterpret_cast<const uint2*>(q) + i);
                w[2 * i] = v.x; w[2 * i + 1] = v.y;
            }
        } else {
#pragma unroll
            for (int i = 0; i < WORDS; ++i) w[i] = __ldg(q + i);
        }
    }
    __device__ __forceinline__ void to(float (&r)[P]) const {
        if constexpr (sizeof(KT) == 4) {
#pragma unroll
            for (int i = 0; i < P; ++i) r[i] = __uint_as_float(w[i]);
        } else {
#pragma unroll
            for (int i = 0; i < P / 2; ++i) {
                const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
                r[2 * i] = f.x; r[2 * i + 1] = f.y;
            }
        }
    }
};

// One head's pass 2 over its `live` splits (partials at rows base .. base + live - 1): the block's
// threads cover the output dims (nd <= 2: blockDim >= DV / 2); every thread sums L and its A's in split
// order, so a dim's arithmetic does not depend on the block size (attn_combine and attn_split's fused
// last block give the same bits). __ldcg: a fused last block reads partials other blocks just wrote.
__device__ __forceinline__ void combine_head(const float* __restrict__ part_ml, const float* __restrict__ part_acc,
                                             i64 base, int live, int DV, float* __restrict__ o, float* red,
                                             float* wt, float* lw) {
    // (nd, d0, d1 first: so placed, the 2-heads attn_split instance, whose fused last block inlines this, builds
    // at 128 registers a thread (4 blocks an SM), as measured at 5b56e32; computed after the max it took 168)
    const int nd = (DV + blockDim.x - 1) / blockDim.x;
    const int d0 = threadIdx.x, d1 = threadIdx.x + blockDim.x;
    float M = -INFINITY;
    for (int s = threadIdx.x; s < live; s += blockDim.x) M = fmaxf(M, __ldcg(part_ml + 2 * (base + s)));
    // block max (exact, so its order does not matter)
    M = warp_max(M);
    __syncthreads();  // red may still be read for a previous head's max
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = M;
    __syncthreads();
    M = -INFINITY;
    for (int u = 0; u < (int)(blockDim.x >> 5); ++u) M = fmaxf(M, red[u]);

    float L = 0.f, A0 = 0.f, A1 = 0.f;
    for (int s0 = 0; s0 < live; s0 += COMBINE_TILE) {
        const int ns = min(COMBINE_TILE, live - s0);
        __syncthreads();  // the previous tile's weights are consumed
        for (int i = threadIdx.x; i < ns; i += blockDim.x) {
            const float f = expf(__ldcg(part_ml + 2 * (base + s0 + i)) - M);
            wt[i] = f;
            lw[i] = __ldcg(part_ml + 2 * (base + s0 + i) + 1) * f;
        }
        __syncthreads();
        const float* ab = part_acc + (base + s0) * DV;
        constexpr int CU = BW24_COMBINE_UNROLL;  // (#pragma unroll takes a constant, not a macro)
#ifdef BW24_PLANTED_COMBINE  // kernel_check canary: the wider unroll drops a tile's last split
        const int nl = CU > 8 ? ns - 1 : ns;
#else
        const int nl = ns;
#endif
#pragma unroll CU
        for (int i = 0; i < nl; ++i) {
            L += lw[i];
            if (d0 < DV) A0 = fmaf(__ldcg(ab + (i64)i * DV + d0), wt[i], A0);
            if (nd > 1 && d1 < DV) A1 = fmaf(__ldcg(ab + (i64)i * DV + d1), wt[i], A1);
        }
    }
    if (d0 < DV) o[d0] = A0 / L;
    if (nd > 1 && d1 < DV) o[d1] = A1 / L;
}

template <int D, int DV, int G, int CH, typename KT = float>
__global__ void ATTN_BOUNDS
attn_split(const float* __restrict__ q, const KT* __restrict__ kc, const KT* __restrict__ vc,
           const int* __restrict__ pos, int H, int Hkv, int S, float scale, float softcap, int window,
           int nsplit, float* __restrict__ part_ml, float* __restrict__ part_acc, float* __restrict__ out,
           int* __restrict__ tickets, i8* __restrict__ xq, int2* __restrict__ xs) {
    PDL_OPEN();
    constexpr int PD = D / 32, PV = DV / 32;
    // keys per warp and round: K+V registers per lane KB*(PD+PV) <= 64
    constexpr int KB = (2048 / (D + DV)) < 8 ? (2048 / (D + DV)) : 8;
    static_assert(KB >= 1 && CH % (NW * KB) == 0, "CH must be a multiple of the keys per round");
    // grid.x = Hkv * HG: HG blocks share a kv head, each with G of its H / Hkv q heads (ops/cuda/attn.py
    // head_groups: a kv head's 8 q heads as two blocks of 4 halves the block's serial dot products; every
    // head's arithmetic is the same in either split, so the bits are too)
#ifdef BW24_PLANTED_SPLIT  // kernel_check canary: every head group computes the kv head's first G q heads
    const int HG = H / (Hkv * G), hk = blockIdx.x / HG, qg0 = hk * (G * HG);
#else
    const int HG = H / (Hkv * G), hk = blockIdx.x / HG, qg0 = hk * (G * HG) + (blockIdx.x % HG) * G;
#endif
    const int t = blockIdx.z;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int p = pos[0] + t;
    const int lo = window > 0 ? max(0, p - window + 1) : 0;
    if (BW24_ATTN_DEC_MMA > 0 && p - lo + 1 > BW24_ATTN_DEC_MMA) return;  // attn_dec_mma's row (block-uniform)
    const int c = attn_chunk_len(p - lo + 1, CH, nsplit);
    const int live = (p - lo + 1 + c - 1) / c;  // splits with keys (<= nsplit)
    // BW24_ATTN_FILL: f blocks of G / f heads each (block y: sub-block y / live of split y % live) while
    // f x live splits fit the grid; f = 1: block y is split y, as without it (a compile-time 1 by default)
    int f = 1;
    if (BW24_ATTN_FILL > 1 && tickets == nullptr)
        while (2 * f <= BW24_ATTN_FILL && G % (2 * f) == 0 && 2 * f * live <= nsplit) f *= 2;
    if ((int)blockIdx.y >= f * live) return;  // past the live range (uniform over the block)
    // this block's split and its number of q heads (f == 1: y and G, folded at compile time by default)
    const int s = f == 1 ? (int)blockIdx.y : (int)blockIdx.y % live, gc = G / f;
#ifdef BW24_PLANTED_FILL  // kernel_check canary: every sub-block computes its group's first gc q heads
    const int qh0 = qg0;
#else
    const int qh0 = f == 1 ? qg0 : qg0 + ((int)blockIdx.y / live) * gc;
#endif
    const int j0 = lo + s * c;
#if defined(BW24_PLANTED_MINBLOCKS) && ATTN_MIN_BLOCKS > 1  // kernel_check canary: a split's last key dropped
    const int j1 = max(j0 + 1, min(j0 + c, p + 1) - 1);
#else
    const int j1 = min(j0 + c, p + 1);
#endif
    const bool single = j0 == lo && j1 == p + 1;  // the only live split: write the output directly

    float qr[G][PD];  // heads g >= gc (BW24_ATTN_FILL): zero, never read into the output or partials
#pragma unroll
    for (int g = 0; g < G; ++g) {
        if (g < gc) {
            load_row<PD>(qr[g], q + ((i64)t * H + qh0 + g) * D + lane * PD);
        } else {
#pragma unroll
            for (int e = 0; e < PD; ++e) qr[g][e] = 0.f;
        }
    }

    float m[G], l[G], acc[G][PV];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        m[g] = -INFINITY; l[g] = 0.f;
#pragma unroll
        for (int e = 0; e < PV; ++e) acc[g][e] = 0.f;
    }
    const KT* kb = kc + (i64)hk * S * D + lane * PD;
    const KT* vb = vc + (i64)hk * S * DV + lane * PV;
#ifdef BW24_ATTN_PIPE  // CudaOps.attn_pipe (BW24_ATTN_PIPE=1), opt-in until measured: the next round's loads
    // go out before this round's math (RawRow), the same rows in the same order, so the same bits
    constexpr bool PIPE = PD % 2 == 0 && PV % 2 == 0;
#else
    constexpr bool PIPE = false;
#endif
    RawRow<PD, KT> nk[KB];  // PIPE: the round ahead's K / V words (unused, and gone, otherwise)
    RawRow<PV, KT> nv[KB];
    if constexpr (PIPE) {
        if (j0 + w * KB < j1) {
#pragma unroll
            for (int k = 0; k < KB; ++k) {
                const int j = min(j0 + w * KB + k, j1 - 1);
                nk[k].load(kb + (i64)j * D);
                nv[k].load(vb + (i64)j * DV);
            }
        }
    }
    for (int r0 = j0 + w * KB; r0 < j1; r0 += NW * KB) {
        // all loads of the round first (rows past j1 re-read row j1-1 and are masked below)
        float kr[KB][PD], vr[KB][PV];
        if constexpr (PIPE) {
#pragma unroll
            for (int k = 0; k < KB; ++k) {
                nk[k].to(kr[k]);
                nv[k].to(vr[k]);
            }
            if (r0 + NW * KB < j1) {  // warp-uniform
#pragma unroll
                for (int k = 0; k < KB; ++k) {
#ifdef BW24_PLANTED_PIPE  // kernel_check canary: the prefetch re-reads this round's rows
                    const int j = min(r0 + k, j1 - 1);
#else
                    const int j = min(r0 + NW * KB + k, j1 - 1);
#endif
                    nk[k].load(kb + (i64)j * D);
                    nv[k].load(vb + (i64)j * DV);
                }
            }
        } else {
#pragma unroll
            for (int k = 0; k < KB; ++k) {
                const int j = min(r0 + k, j1 - 1);
                load_row<PD>(kr[k], kb + (i64)j * D);
                load_row<PV>(vr[k], vb + (i64)j * DV);
            }
        }
#ifdef BW24_ATTN_SUMS  // CudaOps.attn_sums (BW24_ATTN_SUMS=1), opt-in until measured
        // the round's G * KB dot products: this lane's share, then their warp sums in batches of NB values
        // (32, or all of them when fewer and a power of two; warp_sum_many): ~2 shuffles a value instead of
        // warp_sum's 5 (the 8B: 63 instead of 160 a round), the same bits; other counts (G = 3, 5, 6, 7)
        // take warp_sum per value.
        constexpr int NS = G * KB, NB = NS % 32 == 0 ? 32 : NS;
        constexpr int LOGNS = NB == 32 ? 5 : NB == 16 ? 4 : NB == 8 ? 3 : NB == 4 ? 2 : NB == 2 ? 1 : -1;
        float dots[NS];
#pragma unroll
        for (int g = 0; g < G; ++g)
#pragma unroll
            for (int k = 0; k < KB; ++k) {
                float d = 0.f;
#pragma unroll
                for (int e = 0; e < PD; ++e) d = fmaf(qr[g][e], kr[k][e], d);
                dots[g * KB + k] = d;
            }
        if constexpr (LOGNS > 0) {
#pragma unroll
            for (int b0 = 0; b0 < NS; b0 += NB) {
                float part[NB];
#pragma unroll
                for (int i = 0; i < NB; ++i) part[i] = dots[b0 + i];
                const float r = warp_sum_many<LOGNS>(part, lane);
#pragma unroll
                for (int i = 0; i < NB; ++i) dots[b0 + i] = __shfl_sync(FULL_MASK, r, i << (5 - LOGNS));
            }
        } else {
#pragma unroll
            for (int i = 0; i < NS; ++i) dots[i] = warp_sum(dots[i]);
        }
#endif
#pragma unroll
        for (int g = 0; g < G; ++g) {
            if (g >= gc) continue;  // BW24_ATTN_FILL: another block's head (block-uniform)
            float sc[KB];
#ifndef BW24_ATTN_SUMS
#pragma unroll
            for (int k = 0; k < KB; ++k) {
                float d = 0.f;
#pragma unroll
                for (int e = 0; e < PD; ++e) d = fmaf(qr[g][e], kr[k][e], d);
                sc[k] = d;
            }
#endif
            float mx = m[g];
#pragma unroll
            for (int k = 0; k < KB; ++k) {
#ifdef BW24_ATTN_SUMS
                float v = dots[g * KB + k] * scale;
#else
                float v = warp_sum(sc[k]) * scale;
#endif
                if (softcap > 0.f) v = softcap * tanhf(v / softcap);
                sc[k] = r0 + k < j1 ? v : -INFINITY;
                mx = fmaxf(mx, sc[k]);
            }
            // mx is finite: key r0 < j1 is live
            const float corr = expf(m[g] - mx);
            float ls = l[g] * corr;
#pragma unroll
            for (int e = 0; e < PV; ++e) acc[g][e] *= corr;
#pragma unroll
            for (int k = 0; k < KB; ++k) {
                const float pe = expf(sc[k] - mx);
                ls += pe;
#pragma unroll
                for (int e = 0; e < PV; ++e) acc[g][e] = fmaf(pe, vr[k][e], acc[g][e]);
            }
            l[g] = ls;
            m[g] = mx;
        }
    }
    // merge the NW warps of this block through shared memory
    __shared__ float sm_m[NW][G], sm_l[NW][G];
    __shared__ float sm_acc[NW][G][DV];
    if (lane == 0)
#pragma unroll
        for (int g = 0; g < G; ++g) { sm_m[w][g] = m[g]; sm_l[w][g] = l[g]; }
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
        for (int e = 0; e < PV; ++e) sm_acc[w][g][lane * PV + e] = acc[g][e];
    __syncthreads();
    merge_block<NW, G, DV>(sm_m, sm_l, sm_acc, gc, (i64)t * H + qh0, nsplit, s, single, lane, out, xq, xs, part_ml,
                           part_acc);
    if (single || tickets == nullptr) return;
    // Fused pass 2: the last live split of (t, head group) to finish combines its G heads (combine_head:
    // attn_combine's arithmetic); last_arrival re-arms the ticket for the next launch.
    __shared__ bool last;
    __shared__ float red[32], wt[COMBINE_TILE], lw[COMBINE_TILE];
    if (!last_arrival(tickets + (i64)t * gridDim.x + blockIdx.x, live, last)) return;  // per (t, head group)
#pragma unroll 1
    for (int g = 0; g < G; ++g) {
        const i64 h = (i64)t * H + qh0 + g;
        combine_head(part_ml, part_acc, h * nsplit, live, DV, out + h * DV, red, wt, lw);
        if (xq)  // each thread quantizes the dims it just wrote; DV % 32 == 0: whole warps, whole groups
            for (int d = threadIdx.x; d < DV; d += NW * 32) {
                const i64 o = h * DV + d;
                quant_group32(out[o], lane, xq + (o & ~(i64)31), xs + (o >> 5));
            }
    }
}

// blockDim == DV when xq != null (one dim per thread: warp w quantizes dims 32w .. 32w + 31).
extern "C" __global__ void attn_combine(const float* __restrict__ part_ml, const float* __restrict__ part_acc,
                                        const int* __restrict__ pos, int H, int DV, int ch, int nsplit,
                                        int window, float* __restrict__ out, i8* __restrict__ xq,
                                        int2* __restrict__ xs) {
    PDL_OPEN();
    __shared__ float red[32];
    __shared__ float wt[COMBINE_TILE], lw[COMBINE_TILE];
    const int h = blockIdx.x, t = blockIdx.y;
    const int p = pos[0] + t;
    const int lo = window > 0 ? max(0, p - window + 1) : 0;
    const int n = p - lo + 1;
#ifdef BW24_PLANTED_SHORT  // kernel_check canary: pass 2 blind to BW24_ATTN_SHORT's one-split contexts
    const int c = attn_chunk_len_long(n, ch, nsplit);
#else
    const int c = attn_chunk_len(n, ch, nsplit);
#endif
    const int live = (n + c - 1) / c;
    if (live == 1) return;  // attn_split wrote the output itself
    combine_head(part_ml, part_acc, ((i64)t * H + h) * nsplit, live, DV, out + ((i64)t * H + h) * DV, red, wt, lw);
    if (xq) {  // this thread's own output dim, just written by it
        const i64 o = ((i64)t * H + h) * DV + threadIdx.x;
        quant_group32(out[o], threadIdx.x & 31, xq + (o & ~(i64)31), xs + (o >> 5));
    }
}
