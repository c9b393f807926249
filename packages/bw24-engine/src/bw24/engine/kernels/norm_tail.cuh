// norm_tail.cuh: the RMSNorm that follows an output projection, run by the projection's own last block
// (qmv8n in qmatvec_q8.cu, qmvn in qmatvec.cu; ops/cuda/backend.py matmul_norm). One launch per norm
// fewer (the 8B decodes 73 rmsnorm launches per token: 233 us of kernel time at 76f0f51, plus gaps).
//
// After every block has written its rows of out [T, N] (the residual stream), the last block to finish
// normalizes the T rows: nout = out * rsqrt(mean(out^2) + eps) * nw, and, given nxq, nout's int8
// quantization (quant_x.cuh, quantize_x's bits) for a q8 consumer.
// The last block is found with common.cuh's last_arrival (as attention.cu's fused pass 2): the block
// that takes ticket gridDim.x - 1 reads the others' rows (__ldcg: not through its L1); the ticket is
// re-armed for the next launch (graph replay). Its threads walk the T rows' float4s together
// (thread i: vectors i, i + blockDim, ... of each row), so a row's sum of squares has one order for any
// T: decode == verify, bit for bit. nxq may be the very scratch the matvec read its input from: every
// block finished reading before the last block starts writing.
#pragma once
#include "common.cuh"
#include "quant_x.cuh"

template <int NT>
__device__ __forceinline__ void norm_rows_last(const float* out, int N, int T, const float* __restrict__ nw,
                                               float eps, float* nout, i8* nxq, int2* nxs) {
    __shared__ float nred[NT][32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nwarp = blockDim.x >> 5;
    float ss[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) ss[t] = 0.f;
    for (int i = 4 * threadIdx.x; i < N; i += 4 * blockDim.x) {
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            if (t < T) {
                const float4 v = __ldcg(reinterpret_cast<const float4*>(out + (i64)t * N + i));
                ss[t] += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        const float v = warp_sum(ss[t]);
        if (lane == 0) nred[t][w] = v;
    }
    __syncthreads();
    float r[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
        float s = 0.f;
        for (int u = 0; u < nwarp; ++u) s += nred[t][u];  // warp order, the same in every thread
        r[t] = rsqrtf(s / (float)N + eps);
    }
    for (int base = 0; base < N; base += 4 * blockDim.x) {  // uniform trip count: quant's full-warp shuffles
        const int i = base + 4 * threadIdx.x;
        const bool valid = i < N;  // whole 8-lane groups (N % 32 == 0)
        const float4 wv = valid ? *reinterpret_cast<const float4*>(nw + i) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
            if (t < T) {
                float4 y = make_float4(0.f, 0.f, 0.f, 0.f);
                const i64 o = (i64)t * N + i;
                if (valid) {
                    const float4 v = __ldcg(reinterpret_cast<const float4*>(out + o));
                    y = make_float4(v.x * r[t] * wv.x, v.y * r[t] * wv.y, v.z * r[t] * wv.z, v.w * r[t] * wv.w);
                    *reinterpret_cast<float4*>(nout + o) = y;
                }
                if (nxq) quant_group8x4(y, valid, nxq + o, nxs + (o >> 5));
            }
        }
    }
}
