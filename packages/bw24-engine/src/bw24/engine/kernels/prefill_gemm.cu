// prefill_gemm.cu: the pieces around the cuBLAS fp16 GEMM of a prefill matmul (T > 16 tokens).
//
// Formula: out[t, n] = softcap?( sx[t] * (A[t, :] . B[n, :]) + bias[n] + residual[t, n] ), where
//   x[t] = sx[t] * (xh[t] + xl[t]) with sx[t] = 2^e a power of two that puts max |x[t]| in
//   [2^14, 2^15) (no fp16 overflow, exact to undo), xh = fp16(x / sx), xl = fp16(x / sx - xh);
//   W[n] = wh[n] + 2^-11 wl[n], wh = fp16(W), wl = fp16(2^11 (W - wh)) (the 2^11 keeps wl normal).
//   "split" precision sums three GEMMs wh.xh + wh.xl + 2^-11 wl.xh (error ~2^-21 relative, like
//   fp32); "fp16" precision uses wh.xh only (relative rounding 2^-11 on each operand).
// Thread-to-data mapping: x_to_half: one block per token row, a block max of |x|, then threads
//   stride the row. dequant_rows_h: one thread per 32-column group (decode_group of quant.cuh,
//   bit-identical to the fp32 path), 64 B of wh (+ 64 B of wl) written per thread (or, staged, a warp's
//   2 KB through shared memory in 512-B stores); a row range of one weight, or the rows of a list of
//   experts (MoE prefill). gemm_epilogue (and its _parts / _glu
//   forms for stacked Q/K/V and gate/up): one thread per output, grid-stride.
// Bytes moved: x_to_half 4TK read, 2TK (+2TK) written; dequant_rows_h the repacked rows read, 2 (+2)
//   bytes per weight written; epilogue 4TN read (+4TN residual, +4N bias), 4TN written.
#include "quant.cuh"

// v rounded as quantize_x (qmatvec_q8.cu) hands it to the q8 decode matvec: dx * rint(v / dx) over the
// warp's 32 lanes = one 32-column group, dx = max|v| / 127 (every lane of the warp must call it).
__device__ __forceinline__ float round_q8_lane(float v) {
    const float d = __fdiv_rn(warp_max(fabsf(v)), 127.f);
    return d > 0.f ? d * rintf(__fdiv_rn(v, d)) : 0.f;
}

// The row's scale from its max |v| (each thread's own max in; red: 32 floats of shared memory): sx[t] = 2^e
// with e = floor(log2 max) - 14, from the exponent bits (exact; max == 0 or denormal keeps e = -14), and
// 2^-e returned to every thread.
__device__ __forceinline__ float half_row_scale(float m, float* red, float* sx, int t) {
    m = warp_max(m);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = m;
    __syncthreads();
    m = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0.f;
    m = warp_max(m);  // warp 0 holds the row max; every other warp must read it from shared memory
    __syncthreads();
    if (threadIdx.x == 0) red[0] = m;
    __syncthreads();
    m = red[0];
    const int be = (__float_as_int(m) >> 23) & 0xFF;
    const int e = (be ? be - 127 : 0) - 14;
    if (threadIdx.x == 0) sx[t] = ldexpf(1.f, e);
    return ldexpf(1.f, -e);
}

__device__ __forceinline__ void store_half(__half* xh, __half* xl, i64 at, float v) {
    const __half h = __float2half_rn(v);
    xh[at] = h;
    if (xl) xl[at] = __float2half_rn(v - __half2float(h));
}

// Values of a row a thread keeps in registers in x_to_half's one-read path (BW24_XH_REGS=1): rows of
// K <= XH_NPT x blockDim, i.e. K <= 4096 (the launch gives a row ~K/4 threads, at most 1024): the 8B's,
// the 0.6B's and the 30B-A3B's GEMM inputs but the 8B's down projection. 4 keeps the kernel at 30
// registers, two blocks of 1024 threads a SM as the loops' 24 do; 8 took 48 (one block a SM).
#define XH_NPT 4

// x [T, K] fp32 -> xh (and xl when non-null) [T, K] fp16, sx [T] = 2^e. blockDim.x <= 1024, % 32 == 0.
// q8 != 0: x is first rounded per 32-column group (round_q8_lane), so a prefill GEMM of a weight whose
// decode path is q8 sees the activations that path sees (ops/cuda/launch.py default_path). K % 32 == 0:
// a warp's lanes hold one whole group at every step of the strided loops. nw != null: x is the residual
// stream h and gets its RMSNorm first, x = h * rsqrt(mean(h^2) + eps) * nw (norm.cu's formula; the prefill
// rows of norm_matmul_multi: one rmsnorm launch and one pass over the rows fewer).
// regs != 0 and K <= XH_NPT * blockDim: the row is read once into registers and rounded once; otherwise
// the strided loops read it two or three times (sum of squares, max, write) and round it twice (the 8B's
// 512-row conversions took 20 us each for 8 MB, 2.8 of its pp512's 29.8 ms of kernels: b6232b5 profile).
// Both paths do the same arithmetic in the same order (each thread's sum of squares over its elements in
// index order, then block_sum): the same bits (kernel-check "x_to_half regs == loop").
extern "C" __global__ void x_to_half(const float* __restrict__ x, int K, __half* __restrict__ xh,
                                     __half* __restrict__ xl, float* __restrict__ sx, int q8,
                                     const float* __restrict__ nw, float eps, int regs) {
    PDL_OPEN();
    __shared__ float red[32];
    const int t = blockIdx.x;
    const float* xr = x + (i64)t * K;
    const i64 row = (i64)t * K;
    float rn = 1.f;
    auto shape = [&](float v, int i) {  // the norm (nw uniform over the block), then the q8 rounding
        v = nw ? v * rn * nw[i] : v;
        return q8 ? round_q8_lane(v) : v;  // q8 uniform; i < K warp-uniform (K, blockDim % 32 == 0)
    };
    if (regs && K <= XH_NPT * (int)blockDim.x) {
        float v[XH_NPT];
#pragma unroll
        for (int j = 0; j < XH_NPT; ++j) {
            const int i = threadIdx.x + j * blockDim.x;
            v[j] = i < K ? xr[i] : 0.f;
        }
        if (nw) {
            float ss = 0.f;
#pragma unroll
            for (int j = 0; j < XH_NPT; ++j)
                if (threadIdx.x + j * blockDim.x < K) ss += v[j] * v[j];
            rn = rsqrtf(block_sum(ss, red) / (float)K + eps);
        }
        float m = 0.f;
#pragma unroll
        for (int j = 0; j < XH_NPT; ++j) {
            const int i = threadIdx.x + j * blockDim.x;
            if (i < K) {
                v[j] = shape(v[j], i);
                m = fmaxf(m, fabsf(v[j]));
            }
        }
        const float inv = half_row_scale(m, red, sx, t);
#ifdef BW24_PLANTED_XH  // kernel_check canary: the one-read path leaves each row's last register column unwritten
        const int nj = (K + blockDim.x - 1) / blockDim.x - 1;
#else
        const int nj = XH_NPT;
#endif
#pragma unroll
        for (int j = 0; j < XH_NPT; ++j) {
            const int i = threadIdx.x + j * blockDim.x;
            if (i < K && j < nj) store_half(xh, xl, row + i, v[j] * inv);  // exact: a power-of-two scale
        }
        return;
    }
    if (nw) {  // uniform over the block
        float ss = 0.f;
        for (int i = threadIdx.x; i < K; i += blockDim.x) ss += xr[i] * xr[i];
        rn = rsqrtf(block_sum(ss, red) / (float)K + eps);
    }
    float m = 0.f;
    for (int i = threadIdx.x; i < K; i += blockDim.x) m = fmaxf(m, fabsf(shape(xr[i], i)));
    const float inv = half_row_scale(m, red, sx, t);
    for (int i = threadIdx.x; i < K; i += blockDim.x) store_half(xh, xl, row + i, shape(xr[i], i) * inv);
}

__device__ __forceinline__ u32 half2_bits(__half2 h) { return *reinterpret_cast<const u32*>(&h); }

// A warp's 32 groups through shared memory to global (BW24_DEQ_STAGED): lane l holds group i0 + l's 16 words
// (64 B); the warp's outputs are 2 KB back to back (group i's 32 halves sit at 32 * i in wh, whatever the row
// or expert mapping), so after the stage each store instruction writes 512 contiguous bytes where the plain
// stores write 16 B at a 64-B stride (32 half-filled sectors an instruction). st: the warp's 32 x 4 uint4;
// slot k of lane l is swizzled by l >> 1 so a quarter-warp's eight 16-B writes (and reads) hit 32 distinct
// banks. left: groups from i0 to the weight's end (only those are written).
__device__ __forceinline__ void store_staged(uint4* st, const u32 (&v)[16], int lane, bool live, __half* out,
                                             i64 left) {
    if (live) {
#pragma unroll
        for (int k = 0; k < 4; ++k)
            st[4 * lane + ((k + (lane >> 1)) & 3)] = make_uint4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
    }
    __syncwarp();
    uint4* o = reinterpret_cast<uint4*>(out);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const int j = 32 * k + lane, src = j >> 2;  // 16-B piece j of the warp's 2 KB: group src's piece j & 3
#ifdef BW24_PLANTED_DEQST  // kernel_check canary: the read ignores the swizzle (pieces of a group swapped)
        if (src < left) o[j] = st[4 * src + (j & 3)];
#else
        if (src < left) o[j] = st[4 * src + (((j & 3) + (src >> 1)) & 3)];
#endif
    }
    __syncwarp();  // the stage is read by every lane before it is written again (lo after hi)
}

#define DEQ_BLOCK 128  // dequant_rows_h's block (prefill.dequant launches it so); the stage holds 64 B a thread

// Rows of a repacked weight -> wh (and wl when non-null) [rows, K] fp16. Output row r is source row
// row0 + r, or with `experts` (MoE prefill) row experts[r / rpe] * rpe + r % rpe: the rpe rows of
// each listed expert of a stacked [X * rpe, K] weight, back to back. staged != 0 (uniform): the stores go
// through shared memory (store_staged), the same words to the same places.
template <int FMT>
__global__ void dequant_rows_h(const void* __restrict__ pa, const void* __restrict__ pb,
                               const void* __restrict__ pc, const void* __restrict__ pd,
                               i64 row0, const int* __restrict__ experts, int rpe, int rows, int K,
                               __half* __restrict__ wh, __half* __restrict__ wl, int staged) {
    PDL_OPEN();
    __shared__ uint4 stage[DEQ_BLOCK * 4];
    const Planes p{pa, pb, pc, pd};
    const int G = K >> 5;
    const i64 n = (i64)rows * G;
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    const bool live = i < n;
    if (!live && !staged) return;  // staged: every lane of a warp takes part in its stores
    u32 hi[16], lo[16];  // packed half2 words (16-byte stores below need no aligned local array)
    if (live) {
        const int r = (int)(i / G), g = (int)(i % G);
        const i64 src = experts ? (i64)experts[r / rpe] * rpe + r % rpe : row0 + r;
        float w[32];
        decode_group<FMT>(p, src, g, K, w);
#ifdef BW24_PLANTED_BUG
        if (g == G - 1) {
            for (int k = 0; k < 32; ++k) w[k] = 0.f;  // kernel_check canary: the last group of a row dropped
        }
#endif
#pragma unroll
        for (int k = 0; k < 16; ++k) {
            const __half2 h = __floats2half2_rn(w[2 * k], w[2 * k + 1]);
            const float2 back = __half22float2(h);
            hi[k] = half2_bits(h);
            lo[k] = half2_bits(__floats2half2_rn(2048.f * (w[2 * k] - back.x), 2048.f * (w[2 * k + 1] - back.y)));
        }
    }
    if (staged) {
        const int lane = threadIdx.x & 31;
        const i64 i0 = i - lane;
        uint4* st = stage + 4 * (threadIdx.x & ~31);
        store_staged(st, hi, lane, live, wh + 32 * i0, n - i0);
        if (wl) store_staged(st, lo, lane, live, wl + 32 * i0, n - i0);
        return;
    }
    uint4* oh = reinterpret_cast<uint4*>(wh + 32 * i);  // = row r, column 32 g of [rows, K]
#pragma unroll
    for (int k = 0; k < 4; ++k) oh[k] = make_uint4(hi[4 * k], hi[4 * k + 1], hi[4 * k + 2], hi[4 * k + 3]);
    if (wl) {
        uint4* ol = reinterpret_cast<uint4*>(wl + 32 * i);
#pragma unroll
        for (int k = 0; k < 4; ++k) ol[k] = make_uint4(lo[4 * k], lo[4 * k + 1], lo[4 * k + 2], lo[4 * k + 3]);
    }
}

// out[t, n] = softcap?(y[t * ldy + n] * sx[t] + bias[n] + residual[t, n]); residual may alias out. ldy > N:
// one weight's columns of a stacked GEMM's result (prefill.gemm_multi: Q/K/V or gate/up in one product).
// The epilogue of a stacked GEMM (prefill.stacked_gemm) whose parts (Q/K/V) take only a bias: y [T, ldy]
// holds the parts' columns back to back, part p's n_p columns go to out_p [T, n_p] (+ bias_p), with
// gemm_epilogue's arithmetic; one launch for up to three parts instead of one each. total = T * (n0+n1+n2).
extern "C" __global__ void gemm_epilogue_parts(const float* __restrict__ y, const float* __restrict__ sx,
                                               int ldy, i64 total, float* o0, const float* __restrict__ b0,
                                               int n0, float* o1, const float* __restrict__ b1, int n1,
                                               float* o2, const float* __restrict__ b2, int n2) {
    PDL_OPEN();
    const int ns = n0 + n1 + n2;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (i64)gridDim.x * blockDim.x) {
        const i64 t = i / ns;
        const int c = (int)(i - t * ns);
        float* o = o0;
        const float* b = b0;
        int n = n0, cc = c;
        if (c >= n0 + n1) {
            o = o2, b = b2, n = n2, cc = c - n0 - n1;
        } else if (c >= n0) {
            o = o1, b = b1, n = n1, cc = c - n0;
        }
        float v = y[t * ldy + c] * sx[t];  // exact: a power of two
        if (b) v += b[cc];
        o[t * n + cc] = v;
    }
}

// The epilogue of a stacked gate/up GEMM (CudaOps.ffn_glu's prefill rows) with the GLU in it: y [T, 2F] holds
// gate's F columns then up's, out [T, F] = act(gate) * up with gemm_epilogue's scaling and glu's formula
// (elementwise.cu: the same bits as the two epilogues and the glu launch it replaces). total = T * F.
// out's rows ldo apart: a chunk of F of a wider gate/up's columns (prefill.glu_gemm) writes its slice of them.
extern "C" __global__ void gemm_epilogue_glu(const float* __restrict__ y, const float* __restrict__ sx, int F,
                                             i64 total, int act, float* __restrict__ out, int ldo) {
    PDL_OPEN();
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (i64)gridDim.x * blockDim.x) {
        const i64 t = i / F;
        const int f = (int)(i - t * F);
        const float g = y[t * 2 * F + f] * sx[t], u = y[t * 2 * F + F + f] * sx[t];
        out[t * ldo + f] = glu_act(g, act) * u;
    }
}

extern "C" __global__ void gemm_epilogue(const float* __restrict__ y, const float* __restrict__ sx,
                                         const float* __restrict__ bias, const float* residual, float* out,
                                         int N, int ldy, i64 total, float softcap) {
    PDL_OPEN();
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (i64)gridDim.x * blockDim.x) {
        const i64 t = i / N;
        const int n = (int)(i - t * N);
        float v = y[t * ldy + n] * sx[t];  // exact: a power of two
        if (bias) v += bias[n];
        if (residual) v += residual[i];
        if (softcap > 0.f) v = softcap * tanhf(v / softcap);
        out[i] = v;
    }
}
