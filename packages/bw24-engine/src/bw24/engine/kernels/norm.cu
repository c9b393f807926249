// norm.cu: RMSNorm with the residual add fused in front.
//
// Formula (per row of K): if add: x += add (x is the residual stream, written back);
//                         out = x * rsqrt(mean(x^2) + eps) * w.
// Thread-to-data mapping, rmsnorm_reg<VW, NV>: one block per row (rms_row.cuh, shared with moe.cu's
//   moe_router_norm); thread i holds the row's
//   VW-float vectors i, i + blockDim, ..., (NV of them) in registers: one pass of loads (VW = 4:
//   16-byte loads, needs K % 4 == 0 and 16-byte aligned rows; VW = 1 otherwise), one block-wide sum
//   of squares, then the stores. blockDim and NV are chosen from K alone (ops/cuda/norm.py), so a
//   row's summation order does not depend on the number of rows (decode == verify, bit for bit).
//   With xq != null (VW = 4, K % 32 == 0) it also writes out's int8 quantization for a q8 matvec
//   (quant_x.cuh: the same bits as a quantize_x launch on out, one launch fewer); a 32-column group
//   is 8 consecutive threads' float4s.
// rmsnorm (no template): the strided fallback for rows too long for the registers (K > 512*16*VW).
// Bytes moved: 4K read x (+4K add, +4K x written back) + 4K w (L2-resident) + 4K out per row.
#include "rms_row.cuh"
#include "quant_x.cuh"

template <int VW, int NV>
__global__ void __launch_bounds__(512)
rmsnorm_reg(float* x, const float* __restrict__ add, const float* __restrict__ w, float* out, int K, float eps,
            i8* __restrict__ xq, int2* __restrict__ xs) {
    PDL_OPEN();
    typedef typename Vec<VW>::T V;
    __shared__ float red[32];
    const int n = K / VW;  // vectors per row
    V y[NV];
    rms_row<VW, NV>(x + (i64)blockIdx.x * K, add ? add + (i64)blockIdx.x * K : nullptr, w, K, eps, red, y);
    V* o = reinterpret_cast<V*>(out + (i64)blockIdx.x * K);
    if constexpr (VW == 4) {
        if (xq) {  // the same for the whole block
            i8* q = xq + (i64)blockIdx.x * K;
            int2* s = xs + (i64)blockIdx.x * (K >> 5);
#pragma unroll
            for (int u = 0; u < NV; ++u) {
                const int i = threadIdx.x + u * blockDim.x;
                const bool valid = i < n;  // whole 8-thread groups: n % 8 == 0, blockDim % 32 == 0
                if (valid) o[i] = y[u];
                quant_group8x4(y[u], valid, q + 4 * i, s + (i >> 3));  // (y = 0 past the row)
            }
            return;
        }
    }
#pragma unroll
    for (int u = 0; u < NV; ++u) {
        const int i = threadIdx.x + u * blockDim.x;
        if (i < n) o[i] = y[u];
    }
}

extern "C" __global__ void rmsnorm(float* x, const float* __restrict__ add, const float* __restrict__ w,
                                   float* out, int K, float eps) {
    PDL_OPEN();
    __shared__ float red[32];
    float* xr = x + (i64)blockIdx.x * K;
    const float* ar = add ? add + (i64)blockIdx.x * K : nullptr;
    float ss = 0.f;
    for (int i = threadIdx.x; i < K; i += blockDim.x) {
        float v = xr[i];
        if (ar) { v += ar[i]; xr[i] = v; }
        ss += v * v;
    }
    ss = block_sum(ss, red);
    const float r = rsqrtf(ss / (float)K + eps);
    float* o = out + (i64)blockIdx.x * K;
    for (int i = threadIdx.x; i < K; i += blockDim.x) o[i] = xr[i] * r * w[i];
}
