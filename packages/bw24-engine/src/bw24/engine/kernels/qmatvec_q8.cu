// qmatvec_q8.cu: quantized matvec with int8 activations and dp4a (decode / speculative verify).
//
// Formula: out[t, n] = softcap?( sum_g dot_g(W[n, g], xq[t, g]) + bias[n] + residual[t, n] ),  t < T <= NT,
// where quantize_x first maps x [T, K] fp32 to xq int8 [T, K] with one scale per 32-column group:
//   dx = max_j |x_j| / 127 (IEEE division), xq_j = rint(x_j / dx) (round half to even; dx = 0 -> 0),
//   plus the group's integer sums of xq over columns 0-15 and 16-31 (offsets, minimums, Q6_K halves).
// dot_g is an exact integer dot product (dp4a on the repacked weight bytes) times the group's scales
// in fp32 (qdot_q8.cuh); this replaces the float path's ~3 instructions per 4-bit weight by ~0.6.
//
// Thread-to-data mapping: as qmatvec.cu: a block of W warps owns R consecutive rows; thread i walks
// groups g = i, i + 32W, ..., loads that group of all R rows (16-byte streaming loads), then reads
// the group's 32 quantized activations (32 B + 8 B, L1-cached: shared by all blocks of an SM) once
// per token for the R rows. Each thread touches a group of x only once, so staging x in shared
// memory would buy no reuse; reading it straight from L1 keeps K and NT free of smem limits.
// A verify launch (T > 1 tokens, ops/cuda/q8.py verify_rows / q8_nt) unpacks each row's codes of a group
// once (GCodes) and meets every token's activations with all R rows: the activation bytes per weight
// byte fall with R, which is what bounds it (L1, evidence/ncu_h200_5dd78dc_T5.txt).
// Partial sums: warp shuffle tree, then across warps in warp order. The summation order depends on
// (W, K) only, never on R or T, and quantize_x is per (t, g): row t of a T-token launch is
// bit-identical to the T = 1 launch (speculative verify == decode).
//
// Bytes moved (HBM): the repacked weight once, plus T*K*1.25 of xq (L2/L1) and T*N*4 out.
// quantize_x: T*K*4 read, T*K*1.25 written (quant_x.cuh: the arithmetic, shared with the fused
// producers rmsnorm_reg (norm.cu, given xq) and glu_q8 below, which save its launch).
#include "qdot_q8.cuh"
#include "quant_x.cuh"
#include "rope_row.cuh"  // qmv8_qkvr's epilogue: rope_kv's row (rope.cu)

// One warp per (token, group): lane j owns x_j. Grid: ceil(T*G / (blockDim/32)) blocks.
extern "C" __global__ void quantize_x(const float* __restrict__ x, int T, int K, i8* __restrict__ xq,
                                      int2* __restrict__ xs) {
    PDL_OPEN();
    const int G = K >> 5, lane = threadIdx.x & 31;
    const i64 i = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);  // t * G + g
    if (i >= (i64)T * G) return;
    quant_group32(x[32 * i + lane], lane, xq + 32 * i, xs + i);
}

// glu (elementwise.cu) with quantize_x fused behind it, for a down projection on the q8 path:
// out = act(gate) * up (out may alias gate), then out's groups into xq/xs. Same mapping as quantize_x.
extern "C" __global__ void glu_q8(const float* gate, const float* __restrict__ up, float* out, int T, int K,
                                  int act, i8* __restrict__ xq, int2* __restrict__ xs) {
    PDL_OPEN();
    const int G = K >> 5, lane = threadIdx.x & 31;
    const i64 i = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (i >= (i64)T * G) return;
    const float v = glu_act(gate[32 * i + lane], act) * up[32 * i + lane];
    out[32 * i + lane] = v;
    quant_group32(v, lane, xq + 32 * i, xs + i);
}

// The run-gen gate's emulation of int8 activations on its exact kernels (ops/cuda/backend.py
// emulate_rounding: "the rounding alone"): y = dx * xq, the value quantize_x's codes stand for, as floats for
// the fp32 matvecs. Same formula as quant_x.cuh, written out again rather than shared, so that the gate's
// yardstick does not run the code of the path it measures; kernel_check holds it to q8.dequantize_x_ref
// exactly. q * dx rounds once in fp32, as the reference's exact float64 product cast to fp32. One warp per
// (token, group), as quantize_x; y may alias x (each lane reads its column before it writes it).
extern "C" __global__ void round_x_q8(const float* x, int T, int K, float* y) {
    PDL_OPEN();
    const int G = K >> 5, lane = threadIdx.x & 31;
    const i64 i = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (i >= (i64)T * G) return;
    const float v = x[32 * i + lane];
    float a = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(FULL_MASK, a, o));
    const float d = __fdiv_rn(a, 127.f);
    y[32 * i + lane] = d > 0.f ? rintf(__fdiv_rn(v, d)) * d : 0.f;
}

// Token counts up to this one launch with NT == T exactly (no per-token guard; ops/cuda/q8.py q8_nt);
// larger T run in the 16-token bucket, whose rows t >= T are skipped.
#define QMV8_NT_EXACT 8
// Groups in flight per thread in a verify launch (the decode loop: 2): 1, but 2 for one-warp blocks
// (W = 1: each thread walks many groups), the faster choice at every T in the H200 sweep at 7e558ea
// (evidence/verify_sweep_h200_7e558ea.log: Q6_K 4096x12288 T=5 1.60x decode vs 2.36x). A define
// (0: that rule) so that the sweep (benchmarks/gpu_verify_sweep.py) can force either.
#ifndef QMV8_VERIFY_UNROLL
#define QMV8_VERIFY_UNROLL 0
#endif
template <int W>
constexpr int verify_unroll() { return QMV8_VERIFY_UNROLL > 0 ? QMV8_VERIFY_UNROLL : W == 1 ? 2 : 1; }

// Row-groups of weights a decode thread loads before it does the arithmetic of any of them (BW24_QMV8_LOADS,
// ops/cuda/backend.py; 0: the loop below as it was, `#pragma unroll 2`, its loads left to the compiler's schedule).
// Why: a decode matvec is bound by the bytes in flight. At ~3 groups a thread (the 32B's down projection, 8 warps
// a row: 800 groups over 256 threads) a block makes two or three DRAM round trips and exits, and the H200 profile
// had the down projections at 2.5-2.7 TB/s and the output projections at ~1.8 (fb470bb, 1653f1f) against 4.46.
// With U = max(1, LOADS / R) groups a batch, each thread issues U * R groups' loads back to back (predicated past
// the row's end), then sums them in group order: the same additions in the same order, so the same bits whatever
// LOADS is (kernel-check's "q8 decode loads" cases hold every value to the default bitwise).
#ifndef QMV8_DECODE_LOADS
#define QMV8_DECODE_LOADS 0
#endif
// A decode thread's first weight group loaded before the PDL wait (1, the default: the weights are written by no
// kernel, so their loads may overlap the kernel ahead), or after it (0: BW24_QMV8_EARLY=0, ops/cuda/backend.py
// qmv8_early). Why the switch: under PDL the Q8_0 8B's step costs 0.74 ms more a token at 4,096 keys than at 0,
// against 0.32 ms without PDL and 0.33 ms for the Q4_K_M 8B with it (H200, ac4d4d4: docs/h200-log.md "What ran on the H200
// (ac4d4d4 and e0780dc)"); PDL starts the next kernels' blocks while the attention still streams its cache, and
// their early weight loads (twice the bytes on Q8_0) may slow it. The same dots in the same order either way: the
// same bits (kernel-check's "q8 decode late == early bitwise").
#ifndef QMV8_EARLY
#define QMV8_EARLY 1
#endif
template <int R>
constexpr int decode_batch() { return QMV8_DECODE_LOADS / R > 1 ? QMV8_DECODE_LOADS / R : 1; }

// The RMSNorm factor of a norm-ahead row (qmv8_na, qmv8_3n): ss holds the row's G per-group sums of squares; lane l
// sums groups l, l + 32, ... in order (zeros past G), then the xor butterfly gives every lane the same bits;
// rsqrt(mean + eps) as rms_row.cuh. Loads and sum are apart so that a decode block issues the loads right after its
// PDL wait and sums them at its end. K <= 32 * 32 * NA_PMAX (ops/cuda/q8.py NA_MAX_K).
#define NA_PMAX 8
__device__ __forceinline__ void na_load(const float* __restrict__ ss, int G, float (&p)[NA_PMAX]) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int u = 0; u < NA_PMAX; ++u) p[u] = lane + 32 * u < G ? __ldcg(ss + lane + 32 * u) : 0.f;
}
__device__ __forceinline__ float na_scale(const float (&p)[NA_PMAX], int K, float eps) {
    float a = 0.f;
#pragma unroll
    for (int u = 0; u < NA_PMAX; ++u) a += p[u];
    return rsqrtf(warp_sum(a) / (float)K + eps);
}

// Decode (one token): group g of R rows against the token's int8 activations, acc[r] += dot.
template <int FMT, int R>
__device__ __forceinline__ void qmv8_group1(const GRaw<FMT> (&raw)[R], const i8* __restrict__ xq,
                                            const int2* __restrict__ xs, int K, int g, float (&acc)[R][1]) {
    XQ xg;
    load_xq(xq, xs, 0, K, g, xg);
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r][0] += group_dot_q8<FMT>(raw[r], xg);
}

// NA (BW24_NORM_AHEAD, a consumer of qmv8_na's rows): x's codes are those of h * norm weight, and every partial
// sum is scaled by the row's RMSNorm factor from the producer's per-group sums of squares (na_scale) before the
// reduction; the factor's loads go out right after the PDL wait, their sum at the end. tid: the thread's index in
// its group of W warps (qmv8_na's blocks hold several such groups).
template <int FMT, int W, int R, int NT, bool NA = false>
__device__ __forceinline__ void qmv8_rows(const Planes& p, const i8* __restrict__ xq, const int2* __restrict__ xs,
                                          int K, int N, int T, const float* __restrict__ bias,
                                          const float* residual, float* out, float softcap, int row0, float* red,
                                          const int tid, const float* __restrict__ nss = nullptr, float eps = 0.f) {
    const int G = K >> 5;
    float nsp[NA ? NA_PMAX : 1];  // token 0's sums of squares (NA), loaded after the wait
    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int t = 0; t < NT; ++t) acc[r][t] = 0.f;
#ifdef BW24_PLANTED_BUG
    const int G_END = G - 1;  // kernel_check canary: an off-by-one that drops the last group
#else
    const int G_END = G;
#endif
    if constexpr (NT == 1) {  // decode: each row's codes are used once, unpacked inside the dot
#if defined(BW24_PDL) && QMV8_EARLY
        // The first group's weights load before the wait for the kernel ahead (common.cuh PDL_OPEN):
        // with K = 4096 and 4-warp blocks that is all of a block's weights. The same dots in the same
        // order as the loop below: the same bits.
        GRaw<FMT> first[R];
        if (tid < G_END) load_rows<FMT, R>(p, row0, N, tid, K, first);
        PDL_WAIT();
        if constexpr (NA) na_load(nss, G, nsp);
        if (tid < G_END) qmv8_group1<FMT, R>(first, xq, xs, K, tid, acc);
        const int g0 = tid + 32 * W;
#else
        PDL_WAIT();  // (nothing without BW24_PDL)
        if constexpr (NA) na_load(nss, G, nsp);
#ifdef BW24_PLANTED_QMV8LATE  // kernel_check canary: the late loads start at the second group, the first dropped
        const int g0 = tid + 32 * W;
#else
        const int g0 = tid;
#endif
#endif
#if QMV8_DECODE_LOADS > 0
        constexpr int U = decode_batch<R>(), S = 32 * W;
        for (int g = g0; g < G_END; g += U * S) {
            GRaw<FMT> raw[U][R];
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (g + u * S < G_END) load_rows<FMT, R>(p, row0, N, g + u * S, K, raw[u]);
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (g + u * S < G_END) qmv8_group1<FMT, R>(raw[u], xq, xs, K, g + u * S, acc);
        }
#else
#pragma unroll 2
        for (int g = g0; g < G_END; g += 32 * W) {
            GRaw<FMT> raw[R];
            load_rows<FMT, R>(p, row0, N, g, K, raw);
            if (T > 0) qmv8_group1<FMT, R>(raw, xq, xs, K, g, acc);  // (T >= 1 always; kept: the decode code as it was)
        }
#endif
    } else {  // verify: unpack each row's codes once, then every token's activations meet all R rows
        // (Its first group loaded before the PDL wait, as decode's, was level: draft = target's 5-token verify of the
        // 8B 3.44 ms against 3.47, H200 at 11bfbd6, docs/h200-log.md; removed.)
        PDL_WAIT();
        constexpr int U = verify_unroll<W>();  // (#pragma unroll takes a constant, not a macro)
#pragma unroll U
        for (int g = tid; g < G_END; g += 32 * W) {
            GRaw<FMT> raw[R];
            GCodes cd[R];
            load_rows<FMT, R>(p, row0, N, g, K, raw);
#pragma unroll
            for (int r = 0; r < R; ++r) unpack_codes<FMT>(raw[r], cd[r]);
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (NT <= QMV8_NT_EXACT || t < T) {  // NT <= 8 is launched with T == NT; the 16 bucket skips t >= T
                    XQ xg;
                    load_xq(xq, xs, t, K, g, xg);
#pragma unroll
                    for (int r = 0; r < R; ++r) acc[r][t] += codes_dot_q8<FMT>(cd[r], raw[r], xg);
                }
            }
        }
    }
    if constexpr (NA) {  // the row's RMSNorm factor on every partial (the same factor in every thread)
        if constexpr (NT == 1) {
            const float rs = na_scale(nsp, K, eps);
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r][0] = __fmul_rn(acc[r][0], rs);  // (rounded alone: no fma into the sums)
        } else {
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t < T) {
                    na_load(nss + t * G, G, nsp);
                    const float rs = na_scale(nsp, K, eps);
#pragma unroll
                    for (int r = 0; r < R; ++r) acc[r][t] = __fmul_rn(acc[r][t], rs);
                }
            }
        }
    }
    reduce_store<W, R, NT>(acc, T, N, bias, residual, out, softcap, row0, red, tid);
}

template <int FMT, int W, int R, int NT>
__global__ void __launch_bounds__(W * 32)
qmv8(const void* __restrict__ pa, const void* __restrict__ pb, const void* __restrict__ pc,
     const void* __restrict__ pd, const i8* __restrict__ xq, const int2* __restrict__ xs, int K, int N, int T,
     const float* __restrict__ bias, const float* residual, float* out, float softcap) {
    PDL_TRIGGER();  // qmv8_rows waits, after its first weight loads
    __shared__ float red[W * R * NT];
    qmv8_rows<FMT, W, R, NT>(Planes{pa, pb, pc, pd}, xq, xs, K, N, T, bias, residual, out, softcap,
                             blockIdx.x * R, red, threadIdx.x);
}

// Up to three weights [N0|N1|N2, K] of one quantized input (Q/K/V, gate/up); as qmv3 in qmatvec.cu.
// qmv8_3n: the same, consuming a norm-ahead's rows (qmv8_na below): nss the producer's sums of squares, eps the norm's.
template <int F0, int F1, int F2, int W, int R, int NT, bool NA>
__device__ __forceinline__ void qmv8_3_rows(
    const i8* __restrict__ xq, const int2* __restrict__ xs, int K, int T, int nb0, int nb1,
    const void* a0, const void* b0, const void* c0, const void* d0, int N0, const float* bias0, float* out0,
    const void* a1, const void* b1, const void* c1, const void* d1, int N1, const float* bias1, float* out1,
    const void* a2, const void* b2, const void* c2, const void* d2, int N2, const float* bias2, float* out2,
    const float* nss, float eps, float* red) {
    const int b = blockIdx.x;
    if (b < nb0)
        qmv8_rows<F0, W, R, NT, NA>(Planes{a0, b0, c0, d0}, xq, xs, K, N0, T, bias0, nullptr, out0, 0.f, b * R, red,
                                    threadIdx.x, nss, eps);
    else if (b < nb0 + nb1)
        qmv8_rows<F1, W, R, NT, NA>(Planes{a1, b1, c1, d1}, xq, xs, K, N1, T, bias1, nullptr, out1, 0.f,
                                    (b - nb0) * R, red, threadIdx.x, nss, eps);
    else
        qmv8_rows<F2, W, R, NT, NA>(Planes{a2, b2, c2, d2}, xq, xs, K, N2, T, bias2, nullptr, out2, 0.f,
                                    (b - nb0 - nb1) * R, red, threadIdx.x, nss, eps);
}

template <int F0, int F1, int F2, int W, int R, int NT>
__global__ void __launch_bounds__(W * 32)
qmv8_3(const i8* __restrict__ xq, const int2* __restrict__ xs, int K, int T, int nb0, int nb1,
       const void* a0, const void* b0, const void* c0, const void* d0, int N0, const float* bias0, float* out0,
       const void* a1, const void* b1, const void* c1, const void* d1, int N1, const float* bias1, float* out1,
       const void* a2, const void* b2, const void* c2, const void* d2, int N2, const float* bias2, float* out2) {
    PDL_TRIGGER();  // qmv8_rows waits, after its first weight loads
    __shared__ float red[W * R * NT];
    qmv8_3_rows<F0, F1, F2, W, R, NT, false>(xq, xs, K, T, nb0, nb1, a0, b0, c0, d0, N0, bias0, out0, a1, b1, c1, d1,
                                             N1, bias1, out1, a2, b2, c2, d2, N2, bias2, out2, nullptr, 0.f, red);
}

template <int F0, int F1, int F2, int W, int R, int NT>
__global__ void __launch_bounds__(W * 32)
qmv8_3n(const i8* __restrict__ xq, const int2* __restrict__ xs, int K, int T, int nb0, int nb1,
        const void* a0, const void* b0, const void* c0, const void* d0, int N0, const float* bias0, float* out0,
        const void* a1, const void* b1, const void* c1, const void* d1, int N1, const float* bias1, float* out1,
        const void* a2, const void* b2, const void* c2, const void* d2, int N2, const float* bias2, float* out2,
        const float* __restrict__ nss, float eps) {
    PDL_TRIGGER();  // qmv8_rows waits, after its first weight loads
    __shared__ float red[W * R * NT];
    qmv8_3_rows<F0, F1, F2, W, R, NT, true>(xq, xs, K, T, nb0, nb1, a0, b0, c0, d0, N0, bias0, out0, a1, b1, c1, d1,
                                            N1, bias1, out1, a2, b2, c2, d2, N2, bias2, out2, nss, eps, red);
}

// BW24_NORM_AHEAD (ops/cuda/q8.py matmul_na): a residual matvec (an output or down projection, out = x W^T +
// residual, the residual stream h) whose block owns 32 rows, one int8 group of the next norm's input, so that the
// RMSNorm after it needs no launch of its own. Why: under PDL each of the 8B's 73 rmsnorm_reg launches cost 2.65 us
// of its 2,024-us step (benchmarks/gpu_knockout.py, dced59f), the norm's own work being a 16-KB row.
// The norm factor r = rsqrt(mean(h^2) + eps) is common to a row, and a group's int8 codes do not depend on it:
// rint(r h w / (max|r h w| / 127)) = rint(h w / (max|h w| / 127)) but for fp32 rounding. So the block writes the
// codes of h * w and their scale (quant_x.cuh) and each group's sum of squares of h (yss); its consumer (qmv8_3n)
// sums the groups' shares into r (na_scale) and scales its partial sums by it. x itself (the normed row) is never
// written. Mapping: 32 / R sub-blocks of W warps, each qmv8's block of R rows (the same code, so out's bits depend
// on (W, K) as qmv8's do); then warp t of the block takes token t's group: lane j row 32 * blockIdx.x + j.
// The sum of squares is the xor butterfly of the 32 lanes' h^2 (every lane the same bits).
// Measured (H200, f1380a4, beside the defaults): the 0.6B +2.7% at d0, +4.5% at d4096; the 8B 0% / -1.6% (its
// wo's 4 warps a row set become 2; the producers +107 us, the consumers' factor sums +74 us, the norms -201 us of
// kernel time). Tried instead (00a5378): qmv8's own blocks, the last block of each group (a ticket) writing it and
// the last group the factors: the 8B -6.6%, the 0.6B -12.4% (the serial tail of fences and tickets at every
// producer's end costs more than a launch under PDL). Opt-in.
template <int FMT, int W, int R, int NT>
__global__ void __launch_bounds__(32 / R * W * 32)
qmv8_na(const void* __restrict__ pa, const void* __restrict__ pb, const void* __restrict__ pc,
        const void* __restrict__ pd, const i8* __restrict__ xq, const int2* __restrict__ xs, int K, int N, int T,
        const float* residual, float* out, const float* __restrict__ nw, i8* __restrict__ yq,
        int2* __restrict__ ys, float* __restrict__ yss) {
    PDL_TRIGGER();  // qmv8_rows waits, after its first weight loads
    static_assert(32 % R == 0 && W <= R, "a block of 32 rows in sub-blocks of R rows, at most 1024 threads");
    constexpr int S = 32 / R, BT = W * 32;
    __shared__ float red[S * W * R * NT];
    const int s = threadIdx.x / BT;
    qmv8_rows<FMT, W, R, NT>(Planes{pa, pb, pc, pd}, xq, xs, K, N, T, nullptr, residual, out, 0.f,
                             blockIdx.x * 32 + s * R, red + s * W * R * NT, threadIdx.x - s * BT);
    __syncthreads();  // the block's 32 rows of out for every token are written (and visible to the block)
    const int lane = threadIdx.x & 31, G = N >> 5, g = blockIdx.x, n = 32 * g + lane;
    for (int t = threadIdx.x >> 5; t < T; t += S * W) {
        const float h = out[(i64)t * N + n];
        // __fmul_rn: h * h rounded before the butterfly's first add (no fma contracted into it), as q8.na_ref
        const float ss = warp_sum(__fmul_rn(h, h));
#ifdef BW24_PLANTED_NA
        const float v = h;  // kernel_check canary: the norm weight left out of the codes
#else
        const float v = __fmul_rn(h, nw[n]);
#endif
        quant_group32(v, lane, yq + (i64)t * N + 32 * g, ys + (i64)t * G + g);
        if (lane == 0) yss[(i64)t * G + g] = ss;
    }
}

// BW24_GLU_GROUPS (ops/cuda/q8.py glu_plan): a dense FFN's gate and up of one input (Q/K/V's sibling, qmv8_3 /
// qmv8_3n with two parts) whose block owns one int8 group of the down projection's input: rows 32b .. 32b + 31 of
// gate and the same rows of up, in 2 * (32 / R) sub-blocks of W warps, each qmv8's block of R rows (qmv8_rows, so g
// and u have the bits of qmv8_3(n) at the same W, whatever R). Then warp t of the block takes token t's group:
// lane j computes act(g) * u for row 32b + j, writes it over g and quantizes the group (quant_group32) into yq / ys,
// the down projection's input: glu_q8's arithmetic on the same floats, so the same bits, one launch a layer fewer.
// Why: glu_q8 is a launch on the step's chain for 32 bytes of work a group: 44 us of the 0.6B's 601-us step and
// 55 of the 8B's at 4,096 keys (H100, 7f01f4c, benchmarks/gpu_knockout.py). qmv8_na (a block of one group, its
// epilogue the next norm's codes) gained the 0.6B 2.7% where 00a5378's tickets (the last block of a group doing
// the group) lost 12.4%: this is qmv8_na's form. Gate and up must share a format (every sub-block runs the same
// code, reduce_store's barrier included); NA: x is a norm-ahead's rows (nss, eps as qmv8_3n). yq / ys are their
// own scratch (q8.glu_buffers): the non-NA input's codes sit in the q8 scratch, which other blocks still read.
template <int FMT, int W, int R, int NT, bool NA>
__global__ void __launch_bounds__(64 / R * W * 32)
qmv8_glu(const i8* __restrict__ xq, const int2* __restrict__ xs, int K, int T, int F,
         const void* ga, const void* gb, const void* gc, const void* gd, float* g,
         const void* ua, const void* ub, const void* uc, const void* ud, float* u,
         int act, i8* __restrict__ yq, int2* __restrict__ ys, const float* __restrict__ nss, float eps) {
    PDL_TRIGGER();  // qmv8_rows waits, after its first weight loads
    static_assert(32 % R == 0 && 64 / R * W <= 32, "a block of 32 gate and 32 up rows in sub-blocks of R rows");
    constexpr int S = 32 / R, BT = W * 32;
    __shared__ float red[2 * S * W * R * NT];
    const int s = threadIdx.x / BT, up = s >= S;  // sub-blocks 0 .. S-1 gate, S .. 2S-1 up
    const Planes p = up ? Planes{ua, ub, uc, ud} : Planes{ga, gb, gc, gd};
    qmv8_rows<FMT, W, R, NT, NA>(p, xq, xs, K, F, T, nullptr, nullptr, up ? u : g, 0.f,
                                 blockIdx.x * 32 + (s - up * S) * R, red + s * W * R * NT, threadIdx.x - s * BT,
                                 nss, eps);
    __syncthreads();  // the block's 32 rows of g and u for every token are written (and visible to the block)
    const int lane = threadIdx.x & 31, G = F >> 5, b = blockIdx.x, n = 32 * b + lane;
    for (int t = threadIdx.x >> 5; t < T; t += 2 * S * W) {
        const i64 i = (i64)t * F + n;
#ifdef BW24_PLANTED_GLUG
        const float v = g[i] * u[i];  // kernel_check canary: the activation left out
#else
        const float v = glu_act(g[i], act) * u[i];
#endif
        g[i] = v;
        quant_group32(v, lane, yq + (i64)t * F + 32 * b, ys + (i64)t * G + b);
    }
}

// BW24_QKV_ROPE (ops/cuda/q8.py qkvr_plan): Q/K/V of one input (qmv8_3 / qmv8_3n's launch) whose q and k blocks own one
// head each: block b < H the D rows of q head b, then the Hkv k heads, each in S = D / R sub-blocks of W warps
// (qmv8_rows: q, k and v keep qmv8_3(n)'s bits at the same W, whatever R); then the v rows, S * RV a block (sub-blocks
// of RV rows: v needs no whole head, and the fewer rows a thread holds, the fewer registers the kernel needs, which is
// the most of any branch). After a __syncthreads each block does rope_kv's work for its rows and every token t (p =
// pos[0] + t): a q head's qk-norm and rotation in place, a k head's into the cache at p, v rows copied into the cache
// (rope_row.cuh: rope_kv's arithmetic, so the same bits). One launch a layer fewer: rope_kv is a launch on the step's
// chain, 61 us of the 0.6B's 601-us step at 7f01f4c (H100 knockout). The cost: the Q and K matvecs on H + Hkv blocks
// (the 0.6B's 24) instead of hundreds of small ones, each streaming a head's D x K weights; measured where it pays
// before it is a default. The rope inside the attention (BW24_ROPE_ATTN) lost because every split block of a row
// repeated it; here each head's rope is done once. nb: rope_kv's block size for (D, Dv) (ops/cuda/norm.py
// rope_block), the threads that hold a row's slots; Dv == D. KT: the cache element.
template <int FQ, int FK, int FV, int D, int W, int R, int RV, int NT, bool NA, typename KT>
__global__ void __launch_bounds__(D / R * W * 32)
qmv8_qkvr(const i8* __restrict__ xq, const int2* __restrict__ xs, int K, int T, int H, int Hkv,
          const void* qa, const void* qb, const void* qc, const void* qd, const float* bq, float* q,
          const void* ka, const void* kb, const void* kc, const void* kd, const float* bk, float* k,
          const void* va, const void* vb, const void* vc, const void* vd, const float* bv, float* v,
          const int* __restrict__ pos, KT* k_cache, KT* v_cache, int n_ctx, int rope_dim, int neox,
          const float2* __restrict__ tab, const float* __restrict__ q_norm, const float* __restrict__ k_norm,
          float eps, int nb, const float* __restrict__ nss, float na_eps) {
    PDL_TRIGGER();  // qmv8_rows waits, after its first weight loads
    constexpr int S = D / R, BT = W * 32;
    static_assert(D % R == 0 && S * W <= 32, "a block of one head's D rows in sub-blocks of R rows");
    __shared__ float red[S * W * (R > RV ? R : RV) * NT];
    __shared__ float red_rope[32];
    const int s = threadIdx.x / BT, tid = threadIdx.x - s * BT, b = blockIdx.x, Nkv = Hkv * D;
    const int v0 = (b - H - Hkv) * S * RV;  // a v block's first row
    if (b < H)
        qmv8_rows<FQ, W, R, NT, NA>(Planes{qa, qb, qc, qd}, xq, xs, K, H * D, T, bq, nullptr, q, 0.f, b * D + s * R,
                                    red + s * W * R * NT, tid, nss, na_eps);
    else if (b < H + Hkv)
        qmv8_rows<FK, W, R, NT, NA>(Planes{ka, kb, kc, kd}, xq, xs, K, Nkv, T, bk, nullptr, k, 0.f,
                                    (b - H) * D + s * R, red + s * W * R * NT, tid, nss, na_eps);
    else
        qmv8_rows<FV, W, RV, NT, NA>(Planes{va, vb, vc, vd}, xq, xs, K, Nkv, T, bv, nullptr, v, 0.f, v0 + s * RV,
                                     red + s * W * RV * NT, tid, nss, na_eps);
    __syncthreads();  // the block's rows for every token are written (and visible to the block)
    const int p0 = pos[0];  // (after qmv8_rows' PDL wait: the step ahead may advance it)
    for (int t = 0; t < T; ++t) {
        const int p = p0 + t;
        if (p >= n_ctx) break;  // the host reserves cache room before queuing a step (uniform per block)
#ifdef BW24_PLANTED_QKVR
        const int pw = p + 1 < n_ctx ? p + 1 : p;  // kernel_check canary: the cache row of the next position
#else
        const int pw = p;
#endif
        if (b < H) {
            float* row = q + ((i64)t * H + b) * D;
            rope_row<KT>(row, true, row, (KT*)nullptr, nullptr, (KT*)nullptr, D, D, p, rope_dim, neox, tab, q_norm,
                         eps, threadIdx.x, nb, red_rope);
        } else if (b < H + Hkv) {
            const int hk = b - H;
            rope_row<KT>(k + ((i64)t * Hkv + hk) * D, false, nullptr, k_cache + ((i64)hk * n_ctx + pw) * D, nullptr,
                         (KT*)nullptr, D, D, p, rope_dim, neox, tab, k_norm, eps, threadIdx.x, nb, red_rope);
        } else {
            for (int n = v0 + (int)threadIdx.x; n < v0 + S * RV && n < Nkv; n += blockDim.x)
                kv_store(v_cache + ((i64)(n / D) * n_ctx + pw) * D + n % D, v[(i64)t * Nkv + n]);
        }
    }
}
