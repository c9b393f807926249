// qmatvec_mma.cu: the q8 matvec of a speculative verify (2..8 tokens) on tensor cores, giving the
// bits of the dp4a kernel (qmatvec_q8.cu) that decode runs, row for row.
//
// Formula: qmatvec_q8.cu's, out[t, n] = softcap?( sum_g dot_g(W[n, g], xq[t, g]) + bias[n] + residual[t, n] ),
// t < T <= 8, on quantize_x's codes and scales.
// Thread-to-data mapping: a block of 4 warps owns 16 rows; for decode warp wd, warp w takes the slots
// 32 wd + w, + 4, ... and walks each slot's groups with one mma per half group (16 rows x 8 tokens);
// then thread i adds the 32 slot sums of (row i / 8, token i % 8) (shared memory) and stores it.
// Bytes moved (HBM): the repacked weight once (4-byte words per lane, L1-cached so that the warps on
// neighbouring groups share sectors), T*K*1.25 of xq (L2/L1), T*N*4 out.
//
// Why: with T tokens per weight group the dp4a kernel repeats its integer work (nibble unpacking,
// 8 dp4a, activation loads) T times on the same weight bytes; on the H200 a 5-token verify of the
// 8B took 3.2x the decode step's matvec time (evidence/profile_h200_ddfc1fd.txt). Here one warp-wide
// mma.m16n8k16 (s8 x s8 -> s32) computes a group's integer dots for 16 rows x 8 tokens at once.
//
// Why the same bits: a group's integer dots a (columns < 16) and b (>= 16) are exact integers either
// way, and the group's float value is group_float_q8, the very function the dp4a kernel calls. The
// dp4a kernel's float order is then replayed: with W decode warps it has S = 32W slots (threads);
// slot s sums the groups s, s + S, ... in that order, from 0; each warp's 32 slots are added by
// warp_sum's xor tree (lane 0's result), and the warps' results in warp order. Here, per 16-row
// block: for each decode warp wd, the 32 slots' sums (same groups, same order) go to shared memory,
// then one thread per (row, token) adds them in lane 0's tree and adds that to the running total.
// The epilogue (bias, residual, softcap) is reduce_store's. W is a template argument: it must be the
// W of the decode config of the same weight shape (CudaOps passes it), or the bits differ.
//
// Fragments (PTX ISA, mma.m16n8k16 .s8): lane = 4 * gr + c; A (16 x 16, rows x columns j) a0: row gr,
// columns 4c..4c+3, a1: row gr + 8; B (16 x 8, columns j x tokens) b0: columns 4c..4c+3 of token gr;
// C: c0, c1: row gr, tokens 2c, 2c + 1; c2, c3: row gr + 8. For the nibble formats word c of a group
// holds q[4c..4c+3] (low nibbles) and q[16+4c..16+4c+3] (high nibbles): exactly a lane's A bytes of
// the two halves, as for dp4a (nib_idot). Needs sm_80 or later.
#include "qdot_q8.cuh"

#define MMA_WARPS 4   // warps per block: each takes every 4th slot of a decode warp
#define MMA_ROWS 16   // weight rows per block (the mma's M)
#define MMA_T 8       // tokens per launch at most (the mma's N)

__device__ __forceinline__ void mma_s8_16816(int (&d)[4], u32 a0, u32 a1, u32 b0) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
        : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
        : "r"(a0), "r"(a1), "r"(b0));
}

// A lane's A bytes of one row and group: lo = codes 4c..4c+3, hi = codes 16+4c..16+4c+3 (nib_codes, as
// the dp4a kernel unpacks them), and the row's scale words (load_scales).
template <int FMT>
__device__ __forceinline__ void load_words(const Planes& p, i64 row, int g, int K, int c, u32& lo, u32& hi,
                                           GRaw<FMT>& r) {
    load_scales<FMT>(p, row, g, K, r);
    if constexpr (FMT == FMT_Q8_0) {
        const u32* s = reinterpret_cast<const u32*>((const i8*)p.a + row * K + 32 * g);
        lo = __ldg(s + c);
        hi = __ldg(s + 4 + c);
    } else {
        nib_codes<FMT>(__ldg(reinterpret_cast<const u32*>((const u8*)p.a + row * (K >> 1) + 16 * g) + c), r, c, lo, hi);
    }
}

// One step of warp_sum's xor tree as lane 0 sees it: v[l] = v[l] + v[l + O] for l < O (constant
// indices throughout, so v stays in registers).
template <int O>
__device__ __forceinline__ void butterfly_step(float (&v)[32]) {
#pragma unroll
    for (int l = 0; l < O; ++l) v[l] = v[l] + v[l + O];
}

// Rows row0 .. row0 + 15 of out[t, n] for t < T <= 8, with a W-warp decode kernel's bits.
// part: shared [32][MMA_ROWS * MMA_T] floats (one decode warp's slot sums).
template <int FMT, int W>
__device__ __forceinline__ void qmv8m_rows(const Planes& p, const i8* __restrict__ xq, const int2* __restrict__ xs,
                                           int K, int N, int T, const float* __restrict__ bias,
                                           const float* residual, float* out, float softcap, int row0,
                                           float (*part)[MMA_ROWS * MMA_T]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int gr = lane >> 2, c = lane & 3;
    const int G = K >> 5;
#ifdef BW24_PLANTED_BUG
    const int G_END = G - 1;  // kernel_check canary: the dp4a kernel's off-by-one, here too
#else
    const int G_END = G;
#endif
    const i64 ra = min(row0 + gr, N - 1), rb = min(row0 + gr + 8, N - 1);
    const int t0 = 2 * c, t1 = 2 * c + 1;
    float tot = 0.f;  // thread i's (row i / 8, token i % 8) total over the decode warps so far
    for (int wd = 0; wd < W; ++wd) {
        for (int sl = warp; sl < 32; sl += MMA_WARPS) {
            float acc[4] = {0.f, 0.f, 0.f, 0.f};  // (ra, t0), (ra, t1), (rb, t0), (rb, t1)
            for (int g = 32 * wd + sl; g < G_END; g += 32 * W) {
                u32 la, ha, lb, hb;
                GRaw<FMT> sa, sb;
                load_words<FMT>(p, ra, g, K, c, la, ha, sa);
                load_words<FMT>(p, rb, g, K, c, lb, hb, sb);
                // token gr's activation words c and 4 + c (rows of tokens >= T hold stale codes:
                // their results land in columns that are never used)
                const u32* xw = reinterpret_cast<const u32*>(xq + (i64)gr * K + 32 * g);
                int da[4] = {0, 0, 0, 0}, db[4] = {0, 0, 0, 0};
                mma_s8_16816(da, la, lb, __ldg(xw + c));      // columns < 16
                mma_s8_16816(db, ha, hb, __ldg(xw + 4 + c));  // columns >= 16
                XQ x;
                if (t0 < T) {
                    load_xscale(xs, t0, G, g, x);
                    acc[0] += group_float_q8<FMT>(sa, x, da[0], db[0]);
                    acc[2] += group_float_q8<FMT>(sb, x, da[2], db[2]);
                }
                if (t1 < T) {
                    load_xscale(xs, t1, G, g, x);
                    acc[1] += group_float_q8<FMT>(sa, x, da[1], db[1]);
                    acc[3] += group_float_q8<FMT>(sb, x, da[3], db[3]);
                }
            }
            part[sl][gr * MMA_T + t0] = acc[0];
            part[sl][gr * MMA_T + t1] = acc[1];
            part[sl][(gr + 8) * MMA_T + t0] = acc[2];
            part[sl][(gr + 8) * MMA_T + t1] = acc[3];
        }
        __syncthreads();
        // lane 0 of warp_sum: v[l] += v[l ^ o] for o = 16, 8, 4, 2, 1 (common.cuh)
        float v[32];
#pragma unroll
        for (int l = 0; l < 32; ++l) v[l] = part[l][threadIdx.x];
        butterfly_step<16>(v);
        butterfly_step<8>(v);
        butterfly_step<4>(v);
        butterfly_step<2>(v);
        butterfly_step<1>(v);
        tot = wd == 0 ? v[0] : tot + v[0];  // reduce_store: red[0], then += red[w] in warp order
        __syncthreads();  // part is rewritten by the next decode warp's slots
    }
    const int n = row0 + (threadIdx.x / MMA_T), t = threadIdx.x % MMA_T;
    if (t < T && n < N) {
        float o = tot;
        if (bias) o += bias[n];
        if (residual) o += residual[(i64)t * N + n];
        if (softcap > 0.f) o = softcap * tanhf(o / softcap);
        out[(i64)t * N + n] = o;
    }
}

template <int FMT, int W>
__global__ void __launch_bounds__(MMA_WARPS * 32)
qmv8m(const void* __restrict__ pa, const void* __restrict__ pb, const void* __restrict__ pc,
      const void* __restrict__ pd, const i8* __restrict__ xq, const int2* __restrict__ xs, int K, int N, int T,
      const float* __restrict__ bias, const float* residual, float* out, float softcap) {
    __shared__ float part[32][MMA_ROWS * MMA_T];
    qmv8m_rows<FMT, W>(Planes{pa, pb, pc, pd}, xq, xs, K, N, T, bias, residual, out, softcap,
                       blockIdx.x * MMA_ROWS, part);
}

// Up to three weights of one quantized input (Q/K/V, gate/up), as qmv8_3: blocks [0, nb0) the first.
template <int F0, int F1, int F2, int W>
__global__ void __launch_bounds__(MMA_WARPS * 32)
qmv8m_3(const i8* __restrict__ xq, const int2* __restrict__ xs, int K, int T, int nb0, int nb1,
        const void* a0, const void* b0, const void* c0, const void* d0, int N0, const float* bias0, float* out0,
        const void* a1, const void* b1, const void* c1, const void* d1, int N1, const float* bias1, float* out1,
        const void* a2, const void* b2, const void* c2, const void* d2, int N2, const float* bias2, float* out2) {
    __shared__ float part[32][MMA_ROWS * MMA_T];
    const int b = blockIdx.x;
    if (b < nb0)
        qmv8m_rows<F0, W>(Planes{a0, b0, c0, d0}, xq, xs, K, N0, T, bias0, nullptr, out0, 0.f, b * MMA_ROWS, part);
    else if (b < nb0 + nb1)
        qmv8m_rows<F1, W>(Planes{a1, b1, c1, d1}, xq, xs, K, N1, T, bias1, nullptr, out1, 0.f,
                          (b - nb0) * MMA_ROWS, part);
    else
        qmv8m_rows<F2, W>(Planes{a2, b2, c2, d2}, xq, xs, K, N2, T, bias2, nullptr, out2, 0.f,
                          (b - nb0 - nb1) * MMA_ROWS, part);
}
