// moe.cu: mixture-of-experts FFN pieces for decode (qwen3moe): router top-k, expert matvecs that read
// only the selected experts (ids read from device memory: graph-capturable), weighted combine.
//
// Formula (ops/ref.py moe, llama.cpp build_moe_ffn with softmax gating), per token t:
//   p = softmax(router_logits[t]) (float64); sel = the k largest p (ties: lower expert index),
//   in descending order; w_j = p[sel_j] (/ sum_j p[sel_j] when norm), stored as float32;
//   h_j = act(gate_{sel_j} x_t) * up_{sel_j} x_t   (common.cuh glu_act: elementwise.cu glu's arithmetic)
//   out[t] = residual[t] + sum_j (w_j * down_{sel_j} h_j), the sum in j order with float32 products
//   and adds rounded one by one (as the reference does).
// Decode (T <= 16) launches per layer: router matvec, moe_route, moe_gu (gate + up + act), moe_down
// (down + combine). A row's dot product is summed in an order fixed by (L, K) only, never by T or the
// other slots, so speculative verify rows equal decode rows bit for bit (batch_rows_exact).
//
// Thread-to-data mapping:
//   moe_route: one warp per token, lane holds experts lane + 32 j; k rounds of a warp argmax
//     (__reduce_*_sync on the probability's bits, then the lowest index among the ties).
//   moe_gu / moe_down: grid (row blocks, T); warp w of a block serves routed slot t*k + w (+ nw ..).
//     A warp is 32/L segments of L lanes; a segment owns R consecutive rows; lane j of a segment
//     walks groups j, j + L, ... (U groups of R rows, of gate and up for moe_gu, loaded before any
//     arithmetic), a 32-column group's dot is qdot.cuh's group_dot; an xor butterfly over the L
//     lanes ends the row. x (moe_gu: x[t], staged once per block; moe_down: h[slot], staged per
//     warp) sits in shared memory with float4 swizzle (group g's i-th float4 at 8g + (i ^ g&7)), so
//     the 8 lanes of a 128-bit shared-load phase, reading 8 consecutive groups, hit 8 bank quads;
//     group sums of x (Q4_1/Q4_K/Q5_K's minimum term) are computed once there too.
//     moe_down keeps each slot's down row in shared memory and thread r of the block adds the k of
//     them into out in j order (moe_combine's arithmetic).
//   moe_gu8 / moe_down8 (ops/cuda/moe.py q8_experts: the model's activations on the int8 path, as a dense
//     model's matvecs): the same mapping and the same Seg, with qdot_q8.cuh's integer group dot against
//     int8-quantized activations (quant_x.cuh) instead of the fp32 group dot, ~3x fewer instructions per
//     4-bit weight. Both read their activations' codes straight from global memory (L1). moe_gu8's x[t]
//     codes come from the fused rmsnorm_reg or quantize_x; its h rows it quantizes itself: the last of the
//     blocks of a 32-row group to finish (common.cuh last_arrival) quantizes that group of every slot
//     (quant_group32: quantize_x's bits), once, not once per moe_down8 block (the per-warp staging this
//     replaced cost moe_down8 more than its int8 dots saved: 560 vs 402 us a token at 355ecbd).
//   moe_mv (fallback: gate/up of different formats, or x too long for shared memory): one warp per
//     output row, lanes walk the 32-column groups (decode_group), warp-sum at the end.
//   moe_combine (prefill and the fallback): one thread per (token, column).
// Bytes moved: route 4*T*X read; gu/down the selected experts' repacked rows only (k/X of each
//   tensor per token, e.g. Q4_K 4.625 bits/weight), x from L2 once per block (4*E) or per warp
//   (4*F); out 4*T*k*F (gu), 4*T*E (+ 4*T*E residual) (down).
#include "qdot_q8.cuh"
#include "quant_x.cuh"
#include "rms_row.cuh"

#define MOE_WARPS 4      // moe_mv
#define MOE_MAX_WARPS 8  // moe_gu / moe_down: at most this many warps (routed slots) per block
// moe_gu8 / moe_down8 blocks resident per SM: one-row segments (ops/cuda/moe.py decode_config, q8) fit 64
// registers without spills (sm_90a; two-row segments spill at 3 blocks), so 32 warps an SM hide the latency
// of a kernel whose warps each make one pass over their weights.
#define MOE8_MIN_BLOCKS 4

__device__ __forceinline__ void better_d(double& v, int& i, double v2, int i2) {
    if (v2 > v || (v2 == v && i2 < i)) { v = v2; i = i2; }
}

// One token's routing: logits l [X] -> sel int32 [k], wts float32 [k], by one warp (lane = its lane). X <= 1024
// (a 32-bit mask per lane), k <= 32 (lane r keeps round r's pick and writes it). p is computed once per expert
// (the same expression, so the same double, as recomputing it per round). Finite logits give the same sel / wts
// as the per-round shuffle argmax this replaced. The logits are read through L2 (__ldcg): moe_router's last block
// reads what its other blocks just wrote. Every lane's loads are issued together, before the first use (one L2
// round trip): until eae1eee the max read them in a strided loop and the exponentials read them again behind a
// loop exit each, two chains of X / 32 round trips, and lane 0 wrote the k weights from a local array in series;
// the moe_router that routes with this ran 11.2-11.7 us a layer in Nsight Compute there (32 blocks, 2% of the
// DRAM's bandwidth; evidence/ncu_h200_eae1eee_qwen3-30b-a3b_q4_k_m_moe_router_T1.txt). The same operations on the
// same values in the same order: the same bits.
__device__ __forceinline__ void route_token(const float* l, int X, int k, int norm, int* __restrict__ sel,
                                            float* __restrict__ wts, int lane) {
    double p[32];  // p[j]: expert lane + 32 j: its logit, then exp(logit - max), then its probability
#pragma unroll
    for (int j = 0; j < 32; ++j) {  // no branch between the loads: past X each reads expert X - 1, unused
        const float v = __ldcg(l + min(lane + 32 * j, X - 1));
        p[j] = lane + 32 * j < X ? (double)v : -INFINITY;
    }
    double m = -INFINITY;
#pragma unroll
    for (int j = 0; j < 32; ++j) m = fmax(m, p[j]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmax(m, __shfl_xor_sync(FULL_MASK, m, o));
    double s = 0.0;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        if (32 * j >= X) break;  // warp-uniform: X/32 rounds, not 32
        if (lane + 32 * j < X) {
            p[j] = exp(p[j] - m);
            s += p[j];
        } else {
            p[j] = 0.0;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(FULL_MASK, s, o);
#pragma unroll
    for (int j = 0; j < 32; ++j) {
        if (32 * j >= X) break;
        p[j] = p[j] / s;
    }
    u32 taken = 0;  // bit j: expert lane + 32 j already selected
    double mine = 0.0;  // lane r: round r's probability and expert
    int mine_i = 0;
    double total = 0.0;
    for (int r = 0; r < k; ++r) {
        double bv = -INFINITY;
        int bi = 0x7fffffff;
#pragma unroll
        for (int j = 0; j < 32; ++j) {
            if (32 * j >= X) break;
            if (lane + 32 * j < X && !((taken >> j) & 1)) better_d(bv, bi, p[j], lane + 32 * j);
        }
        // warp argmax with better_d's order (larger p, then lower index) in three warp reductions: p >= 0,
        // so its bits + 1 order as its values (0: no candidate left in this lane)
        const u64 key = bi == 0x7fffffff ? 0ull : (u64)__double_as_longlong(bv) + 1ull;
        const u32 hi = __reduce_max_sync(FULL_MASK, (u32)(key >> 32));
        const u32 lo = __reduce_max_sync(FULL_MASK, (u32)(key >> 32) == hi ? (u32)key : 0u);
        const u64 best = ((u64)hi << 32) | lo;
        bi = (int)__reduce_min_sync(FULL_MASK, key == best ? (u32)bi : 0xffffffffu);
        bv = __longlong_as_double((long long)(best - 1ull));
        if ((bi & 31) == lane) taken |= 1u << (bi >> 5);
        if (lane == r) {
            mine = bv;
            mine_i = bi;
        }
        total += bv;
    }
#ifdef BW24_PLANTED_ROUTE
    // canary (tests/test_cuda_gpu.py): the last round's expert replaced by the first round's, its weight kept
    const int first = __shfl_sync(FULL_MASK, mine_i, 0);
    if (lane == k - 1 && k > 1) mine_i = first;
#endif
    if (lane < k) {
        sel[lane] = mine_i;
        wts[lane] = (float)(norm ? mine / total : mine);
    }
}

// logits [T, X] -> sel int32 [T, k], wts float32 [T, k]: one warp per token (route_token).
extern "C" __global__ void moe_route(const float* __restrict__ logits, int X, int k, int norm,
                                     int* __restrict__ sel, float* __restrict__ wts) {
    PDL_OPEN();
    const int t = blockIdx.x;
    route_token(logits + (i64)t * X, X, k, norm, sel + (i64)t * k, wts + (i64)t * k, threadIdx.x);
}

// The router matvec and moe_route in one launch (ops/cuda/moe.py, BW24_MOE_ROUTER=1): an F32 router [X, E]
// (E % 4 == 0), grid (ceil(X / warps), T), one warp per row: lane j sums columns 4j + 128i (float4 loads,
// fmaf in column order), then warp_sum's butterfly; the logits go to rl [T, X] (the buffer moe_route reads).
// The last block of token t to finish (common.cuh last_arrival on tickets[t], re-armed) routes it with its
// first warp (route_token): one launch a layer fewer, and the logits' round trip through a second kernel.
// A row's sum depends on E only, never on T: verify rows equal decode rows.
// Router row `row` of token t (one warp): lane j sums columns 4j + 128i (float4 loads, fmaf in column order), then
// warp_sum's butterfly (every lane holds the sum). The lane's first ROUTER_PF float4 of the row come in `pf`,
// loaded before the wait for the kernel ahead (moe_router), the rest here: the same sums in the same order.
// Why: the router's weights are constants no kernel writes, so under PDL (common.cuh) their DRAM round trip can
// overlap the kernel ahead, as the decode matvecs' first weight group does (qmatvec_q8.cu); after the wait only
// x, just written and in L2, is left to load. E <= 128 * ROUTER_PF (the 30B-A3B's 2,048) takes the row whole.
#define ROUTER_PF 16
__device__ __forceinline__ void router_prefetch(const float* __restrict__ w, int E, int row, int lane,
                                                float4 (&pf)[ROUTER_PF]) {
    const float* wr = w + (i64)row * E;
#pragma unroll
    for (int i = 0; i < ROUTER_PF; ++i) {
        const int c = 4 * lane + 128 * i;
        pf[i] = c < E ? __ldg(reinterpret_cast<const float4*>(wr + c)) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

// acc + a . b, the four products fmaf'd in x, y, z, w order (one rounding each): the router row's column order.
__device__ __forceinline__ float fma4(float4 a, float4 b, float acc) {
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
    acc = fmaf(a.z, b.z, acc);
    return fmaf(a.w, b.w, acc);
}

__device__ __forceinline__ float router_row(const float* __restrict__ w, const float* __restrict__ x, int E, int t,
                                            int row, int lane, const float4 (&pf)[ROUTER_PF]) {
    const float* wr = w + (i64)row * E;
    const float* xt = x + (i64)t * E;
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < ROUTER_PF; ++i) {
        const int c = 4 * lane + 128 * i;
        if (c < E) acc = fma4(pf[i], *reinterpret_cast<const float4*>(xt + c), acc);
    }
#pragma unroll 8
    for (int c = 4 * lane + 128 * ROUTER_PF; c < E; c += 128) {
        acc = fma4(__ldg(reinterpret_cast<const float4*>(wr + c)), *reinterpret_cast<const float4*>(xt + c), acc);
    }
    return warp_sum(acc);
}

extern "C" __global__ void moe_router(const float* __restrict__ w, const float* __restrict__ x, int E, int X,
                                      int k, int norm, float* rl, int* tickets, int* __restrict__ sel,
                                      float* __restrict__ wts) {
    PDL_TRIGGER();
    const int t = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row = blockIdx.x * (blockDim.x >> 5) + warp;
    float4 pf[ROUTER_PF];
#ifdef BW24_PLANTED_ROUTERPF  // kernel_check canary: the prefetch reads the next row (the wrong weights, early)
    if (row < X) router_prefetch(w, E, row + 1 < X ? row + 1 : 0, lane, pf);
#else
    if (row < X) router_prefetch(w, E, row, lane, pf);  // constants: before the wait (above)
#endif
    PDL_WAIT();
    if (row < X) {
        const float acc = router_row(w, x, E, t, row, lane, pf);
        if (lane == 0) rl[(i64)t * X + row] = acc;
    }
    __shared__ bool last;
    if (!last_arrival(tickets + t, (int)gridDim.x, last)) return;
    if (warp == 0) route_token(rl + (i64)t * X, X, k, norm, sel + (i64)t * k, wts + (i64)t * k, lane);
}

// moe_router with the MoE block's input RMSNorm in front (ops/cuda/moe.py norm_router, BW24_MOE_ROUTER_NORM=1,
// opt-in): h [T, E] -> x = rmsnorm(h) * nw [T, E] (and its int8 rows xq / xqs for the int8 experts, when given), the
// router logits of x, the routing. Why: the norm was a launch of its own between the output projection and the
// router, one block a token on one SM (2 of the 30B-A3B's ~10 launches a layer are RMSNorms); here every router block
// computes its token's norm itself (rms_row: E floats of h and of nw from L2) into shared memory, its warps' router
// rows read x there, and the blocks share the writing of x and its int8 groups (32-column group g by block
// g % gridDim.x) for the experts' launch. Block: rmsnorm_reg's threads for E (ops/cuda/norm.py rmsnorm_config;
// NV vectors a thread), so rms_row sums in rmsnorm_reg's order and x, its int8 rows, the logits and the routing are
// the unfused launches' bits (kernel-check's "moe router norm" cases); one router row a warp, as moe_router's.
// Dynamic shared memory: E floats. Registers: the 512-thread block for E = 2,048 caps a thread at 128, under moe_router's
// 156: ptxas spills 336 bytes (sm_90a), the route's doubles and the prefetched row not both fitting.
template <int NV>
__global__ void __launch_bounds__(512)
moe_router_norm(const float* __restrict__ w, float* h, const float* __restrict__ nw, float eps, float* x,
                i8* __restrict__ xq, int2* __restrict__ xqs, int E, int X, int k, int norm, float* rl, int* tickets,
                int* __restrict__ sel, float* __restrict__ wts) {
    PDL_TRIGGER();
    const int t = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row = blockIdx.x * (blockDim.x >> 5) + warp;
    float4 pf[ROUTER_PF];
    if (row < X) router_prefetch(w, E, row, lane, pf);  // constants: before the wait (moe_router's why)
    PDL_WAIT();
    __shared__ float red[32];
    extern __shared__ __align__(16) float xsm[];  // x's row [E]
    float4 y[NV];
    rms_row<4, NV>(h + (i64)t * E, nullptr, nw, E, eps, red, y);
    const int n = E >> 2;
    float4* xo = reinterpret_cast<float4*>(x + (i64)t * E);
#pragma unroll
    for (int u = 0; u < NV; ++u) {
        const int i = threadIdx.x + u * blockDim.x;
        const bool valid = i < n;
        if (valid) reinterpret_cast<float4*>(xsm)[i] = y[u];
#ifdef BW24_PLANTED_ROUTERNORM  // kernel_check canary: the last block's share of x and its int8 groups left unwritten
        const bool mine = valid && (i >> 3) % gridDim.x == blockIdx.x && blockIdx.x + 1 < gridDim.x;
#else
        const bool mine = valid && (i >> 3) % gridDim.x == blockIdx.x;  // whole 8-thread groups (32 columns)
#endif
        if (mine) xo[i] = y[u];
        if (xq) quant_group8x4(y[u], mine, xq + (i64)t * E + 4 * i, xqs + (i64)t * (E >> 5) + (i >> 3));
    }
    __syncthreads();  // x's row complete in shared memory
    if (row < X) {
        const float acc = router_row(w, xsm, E, 0, row, lane, pf);
        if (lane == 0) rl[(i64)t * X + row] = acc;
    }
    __shared__ bool last;
    if (!last_arrival(tickets + t, (int)gridDim.x, last)) return;
    if (warp == 0) route_token(rl + (i64)t * X, X, k, norm, sel + (i64)t * k, wts + (i64)t * k, lane);
}

// Not here: a token's router rows over one thread block cluster, its barrier in place of moe_router's ticket
// (BW24_MOE_ROUTER_CLUSTER, 1aeef0e): slower on the H200 at 5107205, the router stage 7.89 us a layer against the
// ticket's 7.27 (warps=2) and the 30B-A3B's d0 decode 449.4 tok/s against 461.3 on the defaults
// (evidence/moe_decode_h200_5107205.log, perf_h200_5107205_moe_router_cluster.log). Removed.

// ---- x staged in shared memory (moe_gu, moe_down) ------------------------------------------------
__device__ __forceinline__ int swz(int g, int i) { return 8 * g + (i ^ (g & 7)); }

// xs[swz(c / 8, c % 8)] = x float4 c, for the threads i0, i0 + stride, ... of the caller's group.
__device__ __forceinline__ void stage_x(const float* __restrict__ x, int K, float* xs, int i0, int stride) {
    const float4* s = reinterpret_cast<const float4*>(x);
    float4* d = reinterpret_cast<float4*>(xs);
    for (int c = i0; c < (K >> 2); c += stride) d[swz(c >> 3, c & 7)] = __ldg(s + c);
}

__device__ __forceinline__ void load_x(const float* xs, int g, float xr[32]) {
    const float4* s = reinterpret_cast<const float4*>(xs);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const float4 f = s[swz(g, i)];
        xr[4 * i] = f.x; xr[4 * i + 1] = f.y; xr[4 * i + 2] = f.z; xr[4 * i + 3] = f.w;
    }
}

// xs[K + g] = sum32 of group g (only the formats whose group dot has a minimum term read it).
template <int FMT>
__device__ __forceinline__ void stage_sx(float* xs, int K, int i0, int stride) {
    for (int g = i0; g < (K >> 5); g += stride) {
        float xr[32];
        load_x(xs, g, xr);
        xs[K + g] = sum32(xr);
    }
}

// Floats one staged vector takes: K values, then G group sums padded to a float4.
__device__ __forceinline__ int xs_floats(int K) { return K + (((K >> 5) + 3) & ~3); }

// ---- activation sources of a segment's group dots (Seg) -----------------------------------------------
// fp32 x staged in shared memory by stage_x / stage_sx (moe_gu, moe_down).
template <int FMT>
struct XsF32 {
    const float* xs;
    int K;
    struct V {
        float xr[32];
        float sx;
    };
    __device__ __forceinline__ void load(int g, V& v) const {
        load_x(xs, g, v.xr);
        v.sx = needs_sx<FMT>() ? xs[K + g] : 0.f;
    }
    __device__ __forceinline__ float dot(const GRaw<FMT>& r, const V& v) const { return group_dot<FMT>(r, v.xr, v.sx); }
};

// int8 x of one token or slot (quant_x.cuh: codes xq [K], per group (scale bits, half sums) xs [K/32]) in
// global memory, read through L1 by qdot_q8.cuh's load_xq (written by an earlier launch: the read-only path
// is safe).
template <int FMT>
struct XsQ8 {
    const i8* xq;
    const int2* xs;
    int K;
    using V = XQ;
    __device__ __forceinline__ void load(int g, V& v) const { load_xq(xq, xs, 0, K, g, v); }
    __device__ __forceinline__ float dot(const GRaw<FMT>& r, const V& v) const { return group_dot_q8<FMT>(r, v); }
};

// One segment's R rows (clamped to N-1) of expert e: a[r] = A row . x, b[r] = B row . x (GLU), over the
// segment's L lanes; lane j takes groups j, j + L, ... in increasing order, U groups of every row per
// batch, loaded before any arithmetic. The caller load()s the first batch before x is staged (the
// weight stream overlaps the staging); finish() runs the rest, then an xor butterfly that leaves every
// lane of the segment with the same sums (fp32 addition is commutative).
template <int FMT, int R, int U, bool GLU, class XS = XsF32<FMT>>
struct Seg {
    GRaw<FMT> ra[U][R];
    GRaw<FMT> rb[GLU ? U : 1][GLU ? R : 1];
    i64 row[R];
    float a[R], b[R];
    int G_END;

    __device__ __forceinline__ Seg(i64 e, int n0, int N, int K) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            row[r] = e * N + min(n0 + r, N - 1);
            a[r] = 0.f;
            b[r] = 0.f;
        }
#ifdef BW24_PLANTED_BUG
        G_END = (K >> 5) - 1;  // kernel_check canary: an off-by-one that drops the last group
#else
        G_END = K >> 5;
#endif
    }

    __device__ __forceinline__ void load(const Planes& A, const Planes& B, int g0, int L, int K) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int g = max(min(g0 + u * L, G_END - 1), 0);  // past the end: a harmless reload, not summed
#pragma unroll
            for (int r = 0; r < R; ++r) {
                load_group<FMT>(A, row[r], g, K, ra[u][r]);
                if constexpr (GLU) load_group<FMT>(B, row[r], g, K, rb[u][r]);
            }
        }
    }

    __device__ __forceinline__ void acc(int g0, int L, const XS& x) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int g = g0 + u * L;
            if (g < G_END) {
                typename XS::V xv;
                x.load(g, xv);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    a[r] += x.dot(ra[u][r], xv);
                    if constexpr (GLU) b[r] += x.dot(rb[u][r], xv);
                }
            }
        }
    }

    // The batches after the first (already loaded at g0 = j), then the butterfly over L lanes.
    __device__ __forceinline__ void finish(const Planes& A, const Planes& B, int j, int L, int K, const XS& x) {
        for (int g0 = j; g0 < G_END; g0 += U * L) {
            if (g0 != j) load(A, B, g0, L, K);
            acc(g0, L, x);
        }
        for (int o = L >> 1; o > 0; o >>= 1)
#pragma unroll
            for (int r = 0; r < R; ++r) {
                a[r] += __shfl_xor_sync(FULL_MASK, a[r], o);
                if constexpr (GLU) b[r] += __shfl_xor_sync(FULL_MASK, b[r], o);
            }
    }
};

// out[slot, n] = act(gate_e row n . x[t]) * (up_e row n . x[t]), slot = t*k + s, e = sel[slot].
// Gate and up: stacked experts [X, N, K] of one format. Dynamic smem: 4 * xs_floats(K) bytes.
template <int FMT, int R, int U>
__global__ void __launch_bounds__(MOE_MAX_WARPS * 32, 2)
moe_gu(const void* __restrict__ ga, const void* __restrict__ gb, const void* __restrict__ gc,
       const void* __restrict__ gd, const void* __restrict__ ua, const void* __restrict__ ub,
       const void* __restrict__ uc, const void* __restrict__ ud, const int* __restrict__ sel, int k,
       const float* __restrict__ x, int K, int N, int L, int act, float* __restrict__ out) {
    PDL_OPEN();
    extern __shared__ float4 smem4[];
    float* xs = reinterpret_cast<float*>(smem4);
    const int t = blockIdx.y, tid = threadIdx.x, lane = tid & 31, nw = blockDim.x >> 5;
    const int seg = lane / L, j = lane % L;
    const int n0 = blockIdx.x * (32 / L) * R + seg * R;
    const Planes A{ga, gb, gc, gd}, B{ua, ub, uc, ud};
    for (int s = tid >> 5; s < k; s += nw) {
        const int slot = t * k + s;
        Seg<FMT, R, U, true> sg((i64)sel[slot], n0, N, K);
        sg.load(A, B, j, L, K);
        if (s == (tid >> 5)) {  // first slot of every warp (nw <= k): stage x[t] while its weight loads fly
            stage_x(x + (i64)t * K, K, xs, tid, blockDim.x);
            __syncthreads();
            if constexpr (needs_sx<FMT>()) {
                stage_sx<FMT>(xs, K, tid, blockDim.x);
                __syncthreads();
            }
        }
        sg.finish(A, B, j, L, K, XsF32<FMT>{xs, K});
#pragma unroll
        for (int r = 0; r < R; ++r)
            if (j == r && n0 + r < N) out[(i64)slot * N + n0 + r] = glu_act(sg.a[r], act) * sg.b[r];  // as glu
    }
}

// moe_gu on the int8 path: xq / xs are x's quantization [T, K] / [T, K/32] (no staging, no shared memory);
// out [T*k, N] as moe_gu's, and its int8 rows into hq [T*k, N] / hs [T*k, N/32] for moe_down8. N % 32 == 0 and
// the block's (32 / L) * R rows divide 32 (ops/cuda/moe.py), so a block's rows lie in one 32-row group,
// whose 32 / RB blocks report to tickets[t, group] (zero before the launch; the last re-arms it).
template <int FMT, int R, int U>
__global__ void __launch_bounds__(MOE_MAX_WARPS * 32, MOE8_MIN_BLOCKS)
moe_gu8(const void* __restrict__ ga, const void* __restrict__ gb, const void* __restrict__ gc,
        const void* __restrict__ gd, const void* __restrict__ ua, const void* __restrict__ ub,
        const void* __restrict__ uc, const void* __restrict__ ud, const int* __restrict__ sel, int k,
        const i8* __restrict__ xq, const int2* __restrict__ xs, int K, int N, int L, int act, float* out,
        int* __restrict__ tickets, i8* __restrict__ hq, int2* __restrict__ hs) {
    PDL_OPEN();
    const int t = blockIdx.y, tid = threadIdx.x, lane = tid & 31, nw = blockDim.x >> 5;
    const int seg = lane / L, j = lane % L, RB = (32 / L) * R;
    const int n0 = blockIdx.x * RB + seg * R;
    const Planes A{ga, gb, gc, gd}, B{ua, ub, uc, ud};
    const XsQ8<FMT> x{xq + (i64)t * K, xs + (i64)t * (K >> 5), K};
    for (int s = tid >> 5; s < k; s += nw) {
        const int slot = t * k + s;
        Seg<FMT, R, U, true, XsQ8<FMT>> sg((i64)sel[slot], n0, N, K);
        sg.load(A, B, j, L, K);
        sg.finish(A, B, j, L, K, x);
#pragma unroll
        for (int r = 0; r < R; ++r)
            if (j == r && n0 + r < N) out[(i64)slot * N + n0 + r] = glu_act(sg.a[r], act) * sg.b[r];  // as glu
    }
    __shared__ bool last;
    const int grp = blockIdx.x * RB >> 5;
    if (!last_arrival(tickets + (i64)t * (N >> 5) + grp, 32 / RB, last)) return;
    for (int s = tid >> 5; s < k; s += nw) {  // the group's 32 values of each slot: one warp a slot
        const i64 o = ((i64)t * k + s) * N + 32 * grp;
        quant_group32(__ldcg(out + o + lane), lane, hq + o, hs + (o >> 5));
    }
}

// out[t, n] = residual[t, n] + sum_s wts[t, s] * dsm[s, n - nb] for the block's rows (thread r: row nb + r).
__device__ __forceinline__ void combine_rows(const float* dsm, const float* __restrict__ wts, int k, int t, int nb,
                                             int RB, int N, const float* residual, float* out) {
    const int tid = threadIdx.x;
    if (tid < RB && nb + tid < N) {
        const int n = nb + tid;
        float y = residual ? residual[(i64)t * N + n] : 0.f;
        for (int s = 0; s < k; ++s) y = __fadd_rn(y, __fmul_rn(wts[(i64)t * k + s], dsm[s * RB + tid]));
        out[(i64)t * N + n] = y;
    }
}

// out[t, n] = residual[t, n] + sum_s wts[t, s] * (down_e row n . h[t*k + s])   (s in order; e = sel[t*k + s];
// residual may alias out, or be null). Dynamic smem: 4 * (nw * xs_floats(K) + k * RB) bytes,
// RB = (32 / L) * R rows per block.
template <int FMT, int R, int U>
__global__ void __launch_bounds__(MOE_MAX_WARPS * 32, 2)
moe_down(const void* __restrict__ pa, const void* __restrict__ pb, const void* __restrict__ pc,
         const void* __restrict__ pd, const int* __restrict__ sel, const float* __restrict__ wts, int k,
         const float* __restrict__ h, int K, int N, int L, const float* residual, float* out) {
    PDL_OPEN();
    extern __shared__ float4 smem4[];
    const int t = blockIdx.y, tid = threadIdx.x, lane = tid & 31, w = tid >> 5, nw = blockDim.x >> 5;
    const int RB = (32 / L) * R;
    float* xs = reinterpret_cast<float*>(smem4) + w * xs_floats(K);  // this warp's staged h row
    float* dsm = reinterpret_cast<float*>(smem4) + nw * xs_floats(K);  // [k, RB] down rows
    const int seg = lane / L, j = lane % L;
    const int nb = blockIdx.x * RB, n0 = nb + seg * R;
    const Planes P{pa, pb, pc, pd};
    for (int s = w; s < k; s += nw) {
        const int slot = t * k + s;
        Seg<FMT, R, U, false> sg((i64)sel[slot], n0, N, K);
        sg.load(P, P, j, L, K);  // the weight stream overlaps the staging of h[slot]
        __syncwarp();            // every lane is done reading the previous slot's staged row
        stage_x(h + (i64)slot * K, K, xs, lane, 32);
        __syncwarp();
        if constexpr (needs_sx<FMT>()) {
            stage_sx<FMT>(xs, K, lane, 32);
            __syncwarp();
        }
        sg.finish(P, P, j, L, K, XsF32<FMT>{xs, K});
#pragma unroll
        for (int r = 0; r < R; ++r)
            if (j == r) dsm[s * RB + seg * R + r] = sg.a[r];
    }
    __syncthreads();
    combine_rows(dsm, wts, k, t, nb, RB, N, residual, out);
}

// moe_down on the int8 path: h's int8 rows hq [T*k, K] / hs [T*k, K/32] (moe_gu8 wrote them) read through L1,
// no staging. Dynamic smem: 4 * k * RB bytes (the slots' down rows, combined as moe_down's).
template <int FMT, int R, int U>
__global__ void __launch_bounds__(MOE_MAX_WARPS * 32, MOE8_MIN_BLOCKS)
moe_down8(const void* __restrict__ pa, const void* __restrict__ pb, const void* __restrict__ pc,
          const void* __restrict__ pd, const int* __restrict__ sel, const float* __restrict__ wts, int k,
          const i8* __restrict__ hq, const int2* __restrict__ hs, int K, int N, int L, const float* residual,
          float* out) {
    PDL_OPEN();
    extern __shared__ float4 smem4[];
    const int t = blockIdx.y, tid = threadIdx.x, lane = tid & 31, w = tid >> 5, nw = blockDim.x >> 5;
    const int RB = (32 / L) * R;
    float* dsm = reinterpret_cast<float*>(smem4);  // [k, RB]
    const int seg = lane / L, j = lane % L;
    const int nb = blockIdx.x * RB, n0 = nb + seg * R;
    const Planes P{pa, pb, pc, pd};
    for (int s = w; s < k; s += nw) {
        const int slot = t * k + s;
        Seg<FMT, R, U, false, XsQ8<FMT>> sg((i64)sel[slot], n0, N, K);
        sg.load(P, P, j, L, K);
        sg.finish(P, P, j, L, K, XsQ8<FMT>{hq + (i64)slot * K, hs + (i64)slot * (K >> 5), K});
#pragma unroll
        for (int r = 0; r < R; ++r)
            if (j == r) dsm[s * RB + seg * R + r] = sg.a[r];
    }
    __syncthreads();
    combine_rows(dsm, wts, k, t, nb, RB, N, residual, out);
}

// ---- fallback and prefill pieces ------------------------------------------------------------------
// out[slot, n] = W[sel[slot]] row n . x[slot or slot / k]. W: stacked experts [X, N, K] (rows X*N).
template <int FMT>
__global__ void __launch_bounds__(MOE_WARPS * 32)
moe_mv(const void* __restrict__ pa, const void* __restrict__ pb, const void* __restrict__ pc,
       const void* __restrict__ pd, const int* __restrict__ sel, int k, const float* __restrict__ x,
       int x_per_slot, int K, int N, float* __restrict__ out) {
    PDL_OPEN();
    const Planes p{pa, pb, pc, pd};
    const int lane = threadIdx.x & 31, slot = blockIdx.y;
    const int n = blockIdx.x * MOE_WARPS + (threadIdx.x >> 5);
    if (n >= N) return;
    const i64 row = (i64)sel[slot] * N + n;
    const float* xs = x + (i64)(x_per_slot ? slot : slot / k) * K;
    const int G = K >> 5;
    float acc = 0.f;
    for (int g = lane; g < G; g += 32) {
        float w[32];
        decode_group<FMT>(p, row, g, K, w);
        const float4* s4 = reinterpret_cast<const float4*>(xs + 32 * g);
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float4 f = __ldg(s4 + i);
            s = fmaf(w[4 * i], f.x, s);
            s = fmaf(w[4 * i + 1], f.y, s);
            s = fmaf(w[4 * i + 2], f.z, s);
            s = fmaf(w[4 * i + 3], f.w, s);
        }
        acc += s;
    }
    acc = warp_sum(acc);
    if (lane == 0) out[(i64)slot * N + n] = acc;
}

// out[t, i] = residual[t, i] + sum_j wts[t, j] * d[t*k + j, i]  (residual may alias out, or be null).
extern "C" __global__ void moe_combine(const float* __restrict__ d, const float* __restrict__ wts, int k, int E,
                                       const float* residual, float* out) {
    PDL_OPEN();
    const int t = blockIdx.y, i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= E) return;
    float y = residual ? residual[(i64)t * E + i] : 0.f;
    for (int j = 0; j < k; ++j)
        y = __fadd_rn(y, __fmul_rn(wts[(i64)t * k + j], d[((i64)t * k + j) * E + i]));
    out[(i64)t * E + i] = y;
}

// MoE prefill (ops/cuda/moe_prefill.py) row moves, one block per padded row r, threads over the n columns:
// gather: b[r] = a[map[r]] (a token's activation row), zeros where map[r] = -1 (padding);
// scatter: b[map[r]] = a[r] (an expert output row back to its slot) unless map[r] = -1.
extern "C" __global__ void moe_gather_rows(const float* __restrict__ a, const int* __restrict__ map, int R, int n,
                                           float* __restrict__ b) {
    PDL_OPEN();
    const int r = blockIdx.x, src = map[r];
    for (int i = threadIdx.x; i < n; i += blockDim.x) b[(i64)r * n + i] = src >= 0 ? a[(i64)src * n + i] : 0.f;
}

extern "C" __global__ void moe_scatter_rows(const float* __restrict__ a, const int* __restrict__ map, int R, int n,
                                            float* __restrict__ b) {
    PDL_OPEN();
    const int r = blockIdx.x, dst = map[r];
    if (dst < 0) return;
    for (int i = threadIdx.x; i < n; i += blockDim.x) b[(i64)dst * n + i] = a[(i64)r * n + i];
}
