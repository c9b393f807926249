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

// Its loads go out U float4s per row at a time before any is used: one block walking a 4096-wide row
// one dependent L2 round trip per float4 took ~10 us per launch on the H200 (cb58708 profile: qmv8n
// 15 us against qmv8's 5.3), which cost more than the rmsnorm launch it saves.
template <int NT>
__device__ __forceinline__ void norm_rows_last(const float* out, int N, int T, const float* __restrict__ nw,
                                               float eps, float* nout, i8* nxq, int2* nxs) {
    constexpr int U = NT == 1 ? 8 : 2;  // float4s in flight per row and thread (registers: 4 U NT)
    __shared__ float nred[NT][32];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nwarp = blockDim.x >> 5;
    const int step = 4 * blockDim.x;
    float ss[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) ss[t] = 0.f;
    for (int b0 = 0; b0 < N; b0 += U * step) {
        float4 v[U][NT];
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                const int i = b0 + u * step + 4 * threadIdx.x;
                if (t < T && i < N) v[u][t] = __ldcg(reinterpret_cast<const float4*>(out + (i64)t * N + i));
            }
#pragma unroll
        for (int u = 0; u < U; ++u)  // per row, i ascending: the order of a one-at-a-time walk
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                const int i = b0 + u * step + 4 * threadIdx.x;
                if (t < T && i < N) ss[t] += v[u][t].x * v[u][t].x + v[u][t].y * v[u][t].y +
                                             v[u][t].z * v[u][t].z + v[u][t].w * v[u][t].w;
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
    for (int b0 = 0; b0 < N; b0 += U * step) {
        float4 v[U][NT], wv[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            const int i = b0 + u * step + 4 * threadIdx.x;
            wv[u] = i < N ? *reinterpret_cast<const float4*>(nw + i) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int t = 0; t < NT; ++t)
                if (t < T && i < N) v[u][t] = __ldcg(reinterpret_cast<const float4*>(out + (i64)t * N + i));
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (b0 + u * step >= N) break;  // uniform across the block: quant's full-warp shuffles
            const int i = b0 + u * step + 4 * threadIdx.x;
            const bool valid = i < N;  // whole 8-lane groups (N % 32 == 0)
#pragma unroll
            for (int t = 0; t < NT; ++t) {
                if (t < T) {
                    float4 y = make_float4(0.f, 0.f, 0.f, 0.f);
                    const i64 o = (i64)t * N + i;
                    if (valid) {
                        const float4 x = v[u][t];
                        y = make_float4(x.x * r[t] * wv[u].x, x.y * r[t] * wv[u].y, x.z * r[t] * wv[u].z,
                                        x.w * r[t] * wv[u].w);
                        *reinterpret_cast<float4*>(nout + o) = y;
                    }
                    if (nxq) quant_group8x4(y, valid, nxq + o, nxs + (o >> 5));
                }
            }
        }
    }
}
