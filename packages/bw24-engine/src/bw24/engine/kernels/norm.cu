// norm.cu: RMSNorm with the residual add fused in front.
//
// Formula (per row of K): if add: x += add (x is the residual stream, written back);
//                         out = x * rsqrt(mean(x^2) + eps) * w.
// Thread-to-data mapping: one block per row (rows = T, or T*H for the per-head qk-norm); each
// thread strides the row by blockDim.x; one block-wide reduction of the sum of squares.
// Bytes moved: 4K read x (+4K add, +4K x written back) + 4K w (L2-resident) + 4K out per row.
#include "common.cuh"

extern "C" __global__ void rmsnorm(float* x, const float* __restrict__ add, const float* __restrict__ w,
                                   float* out, int K, float eps) {
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
