// attention_dec_mma.cu: pass 1 of the decode / verify attention (attention.cu attn_split's split-K) on tensor
// cores, for the rows whose live keys exceed `from` (BW24_ATTN_DEC_MMA=from, ops/cuda/attn.py; the default past 1,024
// keys for grouped heads since 5107205, attn.DEC_MMA_MIN_G). Float16 cache only.
//
// Why: at 4,096 keys the 8B's attn_split ran 16.1 us a layer at 1.04 TB/s (H200, ba03fa3, Nsight Compute): 154
// registers, 3 blocks of 4 warps an SM, 41% of the issue slots busy: each (key, q head) costs a 4-wide fma, a
// 5-shuffle warp sum and its softmax update on CUDA cores, ~50 warp instructions. Here a warp's 16 keys x 16
// rows (the G <= 8 q heads of one token, padded) are 2 x D/16 mma.sync m16n8k16 for the scores and DV/8 for P V.
//
// Formula and precision: attention_mma.cu's (q * scale and the probabilities rounded to float16 for the
// products, float32 sums and softmax state: kernel_check's gemm16 class). The split rule, the partials and their
// layout are attn_split's (attn_chunk.cuh: the keys a split for n live keys; part_ml (m, l), part_acc unnormalized
// per (token, head, split)), so attention.cu's attn_combine merges them unchanged. A row's arithmetic depends on
// its position only (its split's keys, one block a token): verify rows equal decode rows bit for bit, and a row
// with n > from takes this kernel in every launch that holds it (attn_split built with BW24_ATTN_DEC_MMA returns
// for those rows), so the speculative paths and plain decode agree.
//
// Thread-to-data mapping, attn_dec_mma<D, DV, G, CH>: block (kv head hk, split s, token t), 4 warps. The split's
//   keys [j0, j1) go through shared memory in 64-key tiles (all threads copy, 16-byte loads, rows past j1 zero);
//   warp w takes the tile's keys 16w .. 16w + 15: S[16 x 16] = Q K^T (rows g < G the q heads hk*G + g of token
//   t, rows G..15 zero), mask, its own online softmax state (m, l, O[16 x DV]) across tiles, O += P V (P as
//   float16 A fragments, V's B fragments by ldmatrix .trans), attention_mma.cu's fragment code. At the end the
//   4 warps' states merge through shared memory (attn_split's merge) into the split's partials.
// Fragment layouts (PTX ISA, mma.m16n8k16 .f16): mma.cuh.
// Bytes moved: 2*(D + DV) per live key per kv head (each row once), q 4*G*D and partials 4*G*(DV + 2) a block.
// Shared memory: 64 K and V rows padded by 8 halves (34.8 KB at D = DV = 128), reused for the merge.
// A row's only live split (few keys, or one split up to BW24_ATTN_SHORT keys) writes the output itself and, for
// a q8 output projection (xq != null), its int8 quantization (quant_x.cuh), as attn_split's does; attn_combine
// returns for such rows.
// BW24_DEC_MMA_PIPE (ops/cuda/backend.py attn_dec_pipe; the default since 5107205, BW24_ATTN_DEC_PIPE=0: off): the tiles go
// through two stages of dynamic shared memory by cp.async, tile i + 1's copies in flight while tile i's math runs.
// Why: Nsight Compute on the H200 (b7b8a71, the 32B at 4,096 keys, 66 splits: one 64-key tile a block) put this
// kernel at 14.3 us a layer, DRAM 24% busy, and attn_combine at 9.8 us for 66 splits. Fewer splits (BW24_ATTN_DECODE
// = 32:16 or 32:33) shorten pass 2's chain but give each block several tiles, whose loads the plain loop issues only
// after the previous tile's math. The math, its order and the tiles' contents are the plain loop's: the same bits
// (kernel-check's "dec mma pipe == plain bitwise"). 2 x 34.8 KB a block at D = DV = 128: 3 blocks an SM. With it
// the model's mma rows take 33 splits (ops/cuda/attn.py DEC_MMA_SPLITS): two tiles a split at 4,096 keys.
// BW24_DEC_MMA_EARLY (with the pipe; ops/cuda/backend.py attn_dec_early, the default since 73fcbc7's figures,
// BW24_ATTN_DEC_EARLY=0 off): the split's first two tiles go out before the PDL wait (common.cuh), where every key of
// the tile is older than this launch's tokens. Why: the cache rows before the step's first position p0 = pos[0] were
// written by earlier launches (steps), so their DRAM round trip can overlap the kernel ahead (PDL starts only the
// launch right behind a running one early: in a deep decode step rope_kv), as the matvecs' first weight group does;
// only rows >= p0 (rope_kv writes them) must wait. At 4,096 keys and 33 splits that is the whole split but the last
// one's last tile. pos itself is read before the wait by one thread (block-uniform) and again after it: if it moved
// (an advance still running in a graph of several steps), the early tiles are drained and dropped and the split loads
// as without. The same tiles, math and order: the pipe's bits (kernel-check's "dec early == pipe").
#include "mma.cuh"
#include "attn_chunk.cuh"
#include "quant_x.cuh"
#include <cuda_fp16.h>

#define DM_WARPS 4
#define DM_KT 64  // keys a tile: 16 a warp
#ifndef BW24_DEC_MMA_PIPE
#define BW24_DEC_MMA_PIPE 0
#endif
#ifndef BW24_DEC_MMA_EARLY
#define BW24_DEC_MMA_EARLY 0
#endif
// Blocks an SM the build must fit (BW24_ATTN_DEC_BOUNDS, ops/cuda/backend.py attn_dec_bounds; 0 or unset: this rule):
// 4 for the plain kernel (35 KB of static shared memory a block), 3 with the pipe, whose 2 x 34.8 KB of dynamic
// shared memory a block leave room for 3 on an SM of 228 KB anyway. Why: built for 4 (128 registers) the kernel
// spilled 40 bytes a thread (ptxas -v, sm_90); for 3 it takes 138 and spills none, at the occupancy the pipe's
// shared memory allows. Registers and spills only: the same arithmetic, the same bits (kernel-check's "attn dec
// bounds == 4 bitwise").
// BW24_DEC_MMA_COPY_UNROLL (ops/cuda/backend.py attn_dec_unroll; the default, BW24_ATTN_DEC_UNROLL=0 builds the loop):
// the tiles' copy loop (dm_copy_rows) with a compile-time trip count, unrolled whole. Why: the loop's bound is a
// constant but its start, threadIdx.x, is not known to be < DM_WARPS * 32, so the compiler kept loops with
// remainders: two copies 2 to 68 instructions apart (cuobjdump -sass, sm_90, CUDA 13.0), in a kernel that issues
// only ~0.34 instructions a cycle a scheduler (evidence/ncu_h200_b7b8a71_*). Unrolled, they sit mostly 1-3 apart,
// and the 8B's instance is 1,952 instructions long against 2,408. The same chunks land in the same rows: the same
// bits (kernel-check's "attn dec unroll == loop bitwise"). On the H200 at ac4d4d4, a layer at 4,096 keys: verify
// rows T = 5 42.51 us against 45.98 (the 32B) and 35.46 against 38.68 (the 8B); decode rows level
// (evidence/attn_sweep_h200_ac4d4d4.log).
#ifndef BW24_DEC_MMA_COPY_UNROLL
#define BW24_DEC_MMA_COPY_UNROLL 1
#endif
// BW24_DEC_MMA_LATE_TRIGGER (ops/cuda/backend.py attn_dec_late; opt-in, BW24_ATTN_DEC_LATE=1): the PDL trigger after
// the split's tiles are in and their math done, instead of at the kernel's start. Why: on the H200 at e223fb5 leaving
// the attention out of the step saved the 8B Q8_0 model 797 us a token at 4,096 keys under PDL, 523 without PDL, and
// the Q4_K_M model 555 under PDL (evidence/knockout_h200_e223fb5*.log): the same 16.8 MB of cache a layer costs the
// Q8_0 step ~7 us a layer more. Triggered at the start, pass 1 lets attn_combine start at once, which triggers at
// its start too, so the output projection, the norm and the gate/up matvec behind it can become resident while the
// cache still streams and put their first weight groups (qmatvec_q8.cu QMV8_EARLY; larger in Q8_0) in flight beside
// it. Late, that cascade starts once this launch's loads are done. Scheduling only: every dependent still waits for
// this grid's completion (griddepcontrol.wait), so nothing reads a partial early and the bits stay (kernel-check's
// "attn dec late trigger == start bitwise").
#ifndef BW24_DEC_MMA_LATE_TRIGGER
#define BW24_DEC_MMA_LATE_TRIGGER 0
#endif
#ifndef DM_MIN_BLOCKS
#define DM_MIN_BLOCKS (BW24_DEC_MMA_PIPE ? 3 : 4)
#endif
// Not here: the keys as the mma's M dimension (BW24_DEC_MMA_KM, 66026dd .. 76809cf: S^T = K Q^T and O^T += V^T P^T,
// P^T's B fragments by movmatrix; half the mma of this mapping, whose 16 rows hold at most 8 q heads, and 107 registers
// against 138-151). Its 11 reference cases and rows==decode were green on an H100 at 76809cf and the 8B's gate
// matched with it, but a layer at 4,096 keys took 15.17 us against 15.31 (the 8B), 16.14 against 16.27 (the 32B) and
// 14.56 against 14.71 (the 0.6B), and the cells moved +0.1% / -0.2% / -0.7% (evidence/attn_sweep_h100_76809cf.log,
// perf_ab_h100_76809cf.log): the mma are not what a split waits on, so it was removed.
// Not here: pass 2 of this kernel's rows inside it (BW24_DEC_MMA_FUSE, 1aeef0e: the last split block of (token, kv
// head) combining its G heads): on the H200 at 5107205 slower than attn_combine's launch at every split count and
// shape measured (the 32B at 4,096 keys, 33 splits with the pipe: 23.85 us a layer against 15.07;
// evidence/attn_sweep_h200_5107205.log): its last block's serial combine costs more than the launch it saves.
// Not here: pass 2 of this kernel's rows across a thread-block cluster of their splits (BW24_DEC_MMA_CLUSTER,
// opt-in since 76809cf: each block's split state in its own shared memory, combined through distributed shared
// memory, no partials round trip and no attn_combine launch for these rows). A layer alone was faster, but every
// step was slower: at 16 blocks on the H200 at 11bfbd6 -2.3% to -9.0%, at 8 blocks on an H100 at a7e5b1d the 8B's
// d4096 -8.2% (Q4_K_M) and -4.4% (Q8_0) (evidence/perf_ab_h100_a7e5b1d.log). Under PDL the separate attn_combine
// overlaps its neighbours, while a cluster launch cannot start until all its blocks fit.

// 16 bytes global -> shared without registers (sm_80+); valid = false writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"((u32)__cvta_generic_to_shared(smem)), "l"(gmem), "r"(valid ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_one() { asm volatile("cp.async.wait_group 1;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

// One 64-key tile [jt, jt + 64) of a cache's rows of DIM halves into shared rows padded to P (rows past j1 zero):
// by 16-byte loads through registers, or (async) by cp.async, for the caller to commit and wait on.
template <int DIM, int P>
__device__ __forceinline__ void dm_copy_rows(__half (*rows)[P], const __half* base, int jt, int j1, bool async) {
    const auto copy = [&](int r, int x, int rs) {  // row r's 16-byte chunk x, from the tile's row rs (= r but planted)
        const int j = jt + rs;
        if (async)
            cp_async16(&rows[r][8 * x], reinterpret_cast<const uint4*>(base + (i64)min(j, j1 - 1) * DIM) + x, j < j1);
        else
            *reinterpret_cast<uint4*>(&rows[r][8 * x]) =
                j < j1 ? __ldg(reinterpret_cast<const uint4*>(base + (i64)j * DIM) + x) : make_uint4(0, 0, 0, 0);
    };
#if BW24_DEC_MMA_COPY_UNROLL
    // The same chunks a thread (idx = threadIdx.x + it * DM_WARPS * 32) with a compile-time trip count, which the loop
    // below cannot have (it does not know threadIdx.x < DM_WARPS * 32): unrolled whole, x fixed, the row stepping.
    static_assert((DM_KT * DIM / 8) % (DM_WARPS * 32) == 0 && (DM_WARPS * 32) % (DIM / 8) == 0, "whole rounds");
    constexpr int ROUNDS = DM_KT * DIM / 8 / (DM_WARPS * 32), STEP = DM_WARPS * 32 / (DIM / 8);
    const int x = threadIdx.x % (DIM / 8), r0 = threadIdx.x / (DIM / 8);
#pragma unroll
    for (int it = 0; it < ROUNDS; ++it) {
        const int r = r0 + it * STEP;
#ifdef BW24_PLANTED_DECUNROLL  // kernel_check canary: the last round's rows (56..63 of a tile at D = 128) hold the
        // round before's keys. (Planted as wrong rows, not as rows never copied: those kept whatever the shared memory
        // held, at times the very rows of the reference launch that ran there before, and the case read green.)
        copy(r, x, it == ROUNDS - 1 ? r - STEP : r);
#else
        copy(r, x, r);
#endif
    }
#else
    for (int idx = threadIdx.x; idx < DM_KT * DIM / 8; idx += DM_WARPS * 32)
        copy(idx / (DIM / 8), idx % (DIM / 8), idx / (DIM / 8));
#endif
}

// A tile's K rows, then its V rows.
template <int D, int DV, int KP, int VP>
__device__ __forceinline__ void dm_load_tile(__half (*ks)[KP], __half (*vs)[VP], const __half* kb, const __half* vb,
                                             int jt, int j1, bool async) {
    dm_copy_rows<D, KP>(ks, kb, jt, j1, async);
    dm_copy_rows<DV, VP>(vs, vb, jt, j1, async);
}

// Warp w's 16 keys of the tile in shared memory (keys jt + 16w ..): scores, mask, softcap, the online softmax of
// row g (m, l: this lane's share) and O += P V. The plain and the pipelined loops both call it, so their
// arithmetic is one.
template <int D, int DV, int KP, int VP>
__device__ __forceinline__ void dm_tile_math(const __half (*ks)[KP], const __half (*vs)[VP], int jt, int j1, int k0,
                                             const u32 (&qa)[D / 16][4], float (&o)[DV / 8][4], float& m, float& l,
                                             float softcap, int lane) {
    constexpr int KS = D / 16, NO = DV / 8;
    const int g = lane >> 2, c = lane & 3;
    float sc[2][4];  // keys k0 + 8n + 2c + e of row g (sc[n][e]) and row g + 8 (sc[n][2 + e], unused)
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
        sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KS; ++kk) {
            const u32 b0 = *reinterpret_cast<const u32*>(&ks[k0 + nt * 8 + g][kk * 16 + 2 * c]);
            const u32 b1 = *reinterpret_cast<const u32*>(&ks[k0 + nt * 8 + g][kk * 16 + 2 * c + 8]);
            mma16816(sc[nt], qa[kk], b0, b1);
        }
    }
    // mask, softcap, the online softmax of row g (its 16 values of the sub-tile: 4 a lane of the quad)
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int j = jt + k0 + nt * 8 + 2 * c + e;
            float v = sc[nt][e];
            if (softcap > 0.f) v = softcap * tanhf(v / softcap);
// kernel_check canaries: the first key of every warp's 16 dropped (planted_decmma; planted_decbounds: in a build for
// other than 4 blocks an SM only; planted_declate: in a build with the late trigger only)
#if defined(BW24_PLANTED_DECMMA) || (defined(BW24_PLANTED_DECBOUNDS) && DM_MIN_BLOCKS != 4) || \
    (defined(BW24_PLANTED_DECLATE) && BW24_DEC_MMA_LATE_TRIGGER)
            v = j < j1 && nt * 8 + 2 * c + e != 0 ? v : -INFINITY;
#else
            v = j < j1 ? v : -INFINITY;
#endif
            sc[nt][e] = v;
            mx = fmaxf(mx, v);
        }
    }
    mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, 2));  // finite: key jt + k0 < j1 is live
    const float mn = fmaxf(m, mx);
    const float corr = expf(m - mn);  // m = -inf: 0
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const float pe = sc[nt][e] == -INFINITY ? 0.f : expf(sc[nt][e] - mn);
            sc[nt][e] = pe;
            sum += pe;
        }
        sc[nt][2] = sc[nt][3] = 0.f;  // rows g + 8: no q head
    }
    l = l * corr + sum;  // this lane's share of the row sum (the quad adds them at the end)
    m = mn;
#pragma unroll
    for (int i = 0; i < NO; ++i) {
        o[i][0] *= corr;
        o[i][1] *= corr;
    }
    // O += P V: P [16 rows x 16 keys] as one A fragment (keys 0..7: n-tile 0, 8..15: n-tile 1)
    const u32 pa[4] = {pack_half2(sc[0][0], sc[0][1]), pack_half2(sc[0][2], sc[0][3]),
                       pack_half2(sc[1][0], sc[1][1]), pack_half2(sc[1][2], sc[1][3])};
#pragma unroll
    for (int i = 0; i < NO; i += 2) {
        // matrices: (keys +0..7, n-tile i), (keys +8..15, i), (keys +0..7, i+1), (keys +8..15, i+1)
        const int mi = lane >> 3;
        const __half* row = &vs[k0 + (mi & 1) * 8 + (lane & 7)][(i + (mi >> 1)) * 8];
        pv_two_tiles(o[i], o[i + 1], pa, row);
    }
}

// The pipe's stages (BW24_DEC_MMA_PIPE): two tiles, each its K rows then its V rows (dm_pipe_smem in ops/cuda/attn.py:
// the bytes). At file scope so that dm_early (before the wait) and the kernel's loop name the same buffer.
extern __shared__ __align__(16) unsigned char dm_smem[];

// Split s of the row at position p: its keys [j0, j1), and whether it is the row's only live split. False: no live
// keys in this split, or the row is attn_split's (n <= from live keys). Before the wait (dm_early) and after it.
template <int CH>
__device__ __forceinline__ bool dm_split(int p, int window, int nsplit, int from, int s, int& j0, int& j1,
                                         bool& single) {
    const int lo = window > 0 ? max(0, p - window + 1) : 0;
    const int n = p - lo + 1;
    if (n <= from) return false;  // attn_split's row (uniform over the block)
    const int cl = attn_chunk_len(n, CH, nsplit);
    const int live = (n + cl - 1) / cl;
    if (s >= live) return false;  // past the live range
    j0 = lo + s * cl;
    j1 = min(j0 + cl, p + 1);
    single = live == 1;  // the only live split: write the output directly
    return true;
}

// BW24_DEC_MMA_EARLY, before the PDL wait: the split's first tiles (at most two, the pipe's stages 0 and 1) whose keys
// all precede p0e, the step's first position as thread 0 reads it here (shared: block-uniform). Each tile its own
// cp.async group; returns how many went out. Reads pos and cache rows < p0e only: no kernel of this step writes them.
template <int D, int DV, int CH>
__device__ __forceinline__ int dm_early(const __half* __restrict__ kc, const __half* __restrict__ vc,
                                        const int* __restrict__ pos, int S, int window, int nsplit, int from,
                                        int& p0e) {
    constexpr int KP = D + 8, VP = DV + 8, STAGE = DM_KT * (KP + VP) * 2;
    __shared__ int sh_p0;
    if (threadIdx.x == 0) sh_p0 = __ldcg(pos);
    __syncthreads();
    p0e = sh_p0;
    int j0, j1;
    bool single;
    if (!dm_split<CH>(p0e + (int)blockIdx.z, window, nsplit, from, blockIdx.y, j0, j1, single)) return 0;
    const __half* kb = kc + (i64)blockIdx.x * S * D;
    const __half* vb = vc + (i64)blockIdx.x * S * DV;
    int pre = 0;
    for (int i = 0; i < 2; ++i) {
        const int jt = j0 + i * DM_KT;
#ifdef BW24_PLANTED_DECEARLY  // canary (kernel-check's "dec early" graph case): the step's first new row goes early too
        if (jt >= j1 || min(jt + DM_KT, j1) > p0e + 1) break;
#else
        if (jt >= j1 || min(jt + DM_KT, j1) > p0e) break;  // a row of this step (or none) in the tile: after the wait
#endif
        dm_load_tile<D, DV, KP, VP>(reinterpret_cast<__half (*)[KP]>(dm_smem + i * STAGE),
                                    reinterpret_cast<__half (*)[VP]>(dm_smem + i * STAGE + DM_KT * KP * 2), kb, vb,
                                    jt, j1, true);
        cp_async_commit();
        ++pre;
    }
    return pre;
}

template <int D, int DV, int G, int CH>
__global__ void __launch_bounds__(DM_WARPS * 32, DM_MIN_BLOCKS)
attn_dec_mma(const float* __restrict__ q, const __half* __restrict__ kc, const __half* __restrict__ vc,
             const int* __restrict__ pos, int H, int Hkv, int S, float scale, float softcap, int window, int nsplit,
             int from, float* __restrict__ part_ml, float* __restrict__ part_acc, float* __restrict__ out,
             i8* __restrict__ xq, int2* __restrict__ xs) {
    if (!BW24_DEC_MMA_LATE_TRIGGER) PDL_TRIGGER();
    int p0e = 0;  // the step's first position as dm_early read it (BW24_DEC_MMA_EARLY; checked after the wait)
    int pre = BW24_DEC_MMA_EARLY && BW24_DEC_MMA_PIPE ? dm_early<D, DV, CH>(kc, vc, pos, S, window, nsplit, from, p0e) : 0;
    PDL_WAIT();
    static_assert(D % 16 == 0 && DV % 16 == 0 && D <= 128 && DV <= 128 && G >= 1 && G <= 8, "shapes");
    constexpr int KP = D + 8, VP = DV + 8;  // padded rows (halves): 16-byte aligned, conflict-free reads
    constexpr int KS = D / 16, NO = DV / 8;
    const int p0 = BW24_DEC_MMA_EARLY ? __ldcg(pos) : pos[0];  // (not through L1 where pos was read early)
    if (pre > 0 && p0 != p0e) {  // pos moved while dm_early ran: its tiles land, then go unused
        cp_async_wait_all();
        __syncthreads();
        pre = 0;
    }
#if BW24_DEC_MMA_PIPE
    __half (*ks)[KP] = reinterpret_cast<__half (*)[KP]>(dm_smem);  // stage 0's K: the merge's floats after the loop
    constexpr int STAGE = DM_KT * (KP + VP) * 2;  // bytes
#else
    __shared__ __align__(16) __half ks[DM_KT][KP];
    __shared__ __align__(16) __half vs[DM_KT][VP];
#endif
    __shared__ float sm_m[DM_WARPS][G], sm_l[DM_WARPS][G];
    const int hk = blockIdx.x, s = blockIdx.y, t = blockIdx.z;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    int j0, j1;
    bool single;
    if (!dm_split<CH>(p0 + t, window, nsplit, from, s, j0, j1, single))
        return;  // (no early tile in flight here: dm_early saw this same split, or its tiles were drained)

    // q * scale as A fragments, float16 (attention_mma.cu's packing): row g is head hk*G + g when g < G; rows
    // g + 8 are zero
    u32 qa[KS][4];
    const float* qr = g < G ? q + ((i64)t * H + hk * G + g) * D : nullptr;
#pragma unroll
    for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const int d = kk * 16 + 2 * c + 8 * e;
            const float2 v = qr ? *reinterpret_cast<const float2*>(qr + d) : make_float2(0.f, 0.f);
            qa[kk][2 * e] = pack_half2(v.x * scale, v.y * scale);
            qa[kk][2 * e + 1] = 0u;
        }
    }

    float o[NO][4], m = -INFINITY, l = 0.f;  // this lane's row g (the row g + 8 half of o stays unused)
#pragma unroll
    for (int i = 0; i < NO; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    const __half* kb = kc + (i64)hk * S * D;
    const __half* vb = vc + (i64)hk * S * DV;

#if BW24_DEC_MMA_PIPE
    const auto kst = [&](int st) { return reinterpret_cast<__half (*)[KP]>(dm_smem + st * STAGE); };
    const auto vst = [&](int st) { return reinterpret_cast<__half (*)[VP]>(dm_smem + st * STAGE + DM_KT * KP * 2); };
    if (pre < 1 && j0 < j1) dm_load_tile<D, DV, KP, VP>(kst(0), vst(0), kb, vb, j0, j1, true);  // (else dm_early's;
                                           // j0 < j1 always holds here, but the build without it is another cubin)
    cp_async_commit();
    for (int jt = j0, st = 0, i = 0; jt < j1; jt += DM_KT, st ^= 1, ++i) {
        // the next tile into the other stage (freed by the last iteration's closing barrier); a group a round, empty
        // past the last tile, so "all but the newest group done" always means this tile landed
#ifdef BW24_PLANTED_DECPIPE  // kernel_check canary: the prefetch skips a tile (each split's third onward wrong)
        const int jn = jt == j0 ? jt + DM_KT : jt + 2 * DM_KT;
#else
        const int jn = jt + DM_KT;
#endif
        if (jn < j1 && i + 1 >= pre) dm_load_tile<D, DV, KP, VP>(kst(st ^ 1), vst(st ^ 1), kb, vb, jn, j1, true);
        cp_async_commit();
        cp_async_wait_one();
        __syncthreads();  // every thread's copies of this tile are visible
        const int k0 = 16 * w;  // this warp's first key of the tile
        if (jt + k0 < j1)  // a live key of this warp here (warp-uniform)
            dm_tile_math<D, DV, KP, VP>(kst(st), vst(st), jt, j1, k0, qa, o, m, l, softcap, lane);
        __syncthreads();  // this stage's readers are done before the next round copies into it
    }
#else
    for (int jt = j0; jt < j1; jt += DM_KT) {
        __syncthreads();  // the previous tile's readers are done
        dm_load_tile<D, DV, KP, VP>(ks, vs, kb, vb, jt, j1, false);
        __syncthreads();
        const int k0 = 16 * w;  // this warp's first key of the tile
        if (jt + k0 >= j1) continue;  // no live key of this warp here (warp-uniform)
        dm_tile_math<D, DV, KP, VP>(ks, vs, jt, j1, k0, qa, o, m, l, softcap, lane);
    }
#endif
    if (BW24_DEC_MMA_LATE_TRIGGER) PDL_TRIGGER();  // (every thread of the block passes here; a block that returned
                                                   // early counts as triggered)
    l += __shfl_xor_sync(FULL_MASK, l, 1);
    l += __shfl_xor_sync(FULL_MASK, l, 2);

    // merge the 4 warps (attn_chunk.cuh merge_block, attn_split's merge): their rows' O through the K tile's
    // shared memory
    __syncthreads();  // every warp is done with the tiles
    float* so = reinterpret_cast<float*>(&ks[0][0]);  // [DM_WARPS][G][DV] floats: <= 16 KB, within ks
    static_assert(DM_WARPS * G * DV * 4 <= DM_KT * KP * 2, "the merge fits in the K tile");
    if (g < G) {
        if (c == 0) { sm_m[w][g] = m; sm_l[w][g] = l; }
#pragma unroll
        for (int i = 0; i < NO; ++i) {
            so[(w * G + g) * DV + i * 8 + 2 * c] = o[i][0];
            so[(w * G + g) * DV + i * 8 + 2 * c + 1] = o[i][1];
        }
    }
    __syncthreads();
    merge_block<DM_WARPS, G, DV>(sm_m, sm_l, reinterpret_cast<const float(*)[G][DV]>(so), G, (i64)t * H + hk * G,
                                 nsplit, s, single, lane, out, xq, xs, part_ml, part_acc);
}
