// rms_row.cuh: one row's RMSNorm in registers, shared by norm.cu's rmsnorm_reg and moe.cu's moe_router_norm, so
// that the router's fused norm gives rmsnorm_reg's bits (the same loads, sums and products in the same order).
//
// Formula: if add: x += add (written back); y = x * rsqrt(mean(x^2) + eps) * w, fp32, the mean's sum over the
// block (block_sum) of each thread's sum of squares.
// Thread-to-data mapping: thread i holds the row's VW-float vectors i, i + blockDim, ... (NV of them); the caller
// picks blockDim and NV from K alone (ops/cuda/norm.py rmsnorm_config), so the sum's order depends on K only.
// Bytes moved: 4K read x (+4K add, +4K x written back) + 4K w per row; what y becomes is the caller's.
#pragma once
#include "common.cuh"

template <int VW> struct Vec;
template <> struct Vec<1> { typedef float T; };
template <> struct Vec<4> { typedef float4 T; };

__device__ __forceinline__ float sq(float a) { return a * a; }
__device__ __forceinline__ float sq(float4 a) { return a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w; }
__device__ __forceinline__ float add_(float a, float b) { return a + b; }
__device__ __forceinline__ float4 add_(float4 a, float4 b) {
    return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}
__device__ __forceinline__ float scale_(float a, float r, float w) { return a * r * w; }
__device__ __forceinline__ float4 scale_(float4 a, float r, float4 w) {
    return make_float4(a.x * r * w.x, a.y * r * w.y, a.z * r * w.z, a.w * r * w.w);
}
__device__ __forceinline__ void zero_(float& a) { a = 0.f; }
__device__ __forceinline__ void zero_(float4& a) { a = make_float4(0.f, 0.f, 0.f, 0.f); }

// y[u] = the normed vector threadIdx.x + u * blockDim.x of the row (zero past its end). Every thread of the block
// calls it (block_sum's barriers); red: >= 32 floats of shared memory.
template <int VW, int NV>
__device__ __forceinline__ void rms_row(float* xrow, const float* __restrict__ addrow, const float* __restrict__ w,
                                        int K, float eps, float* red, typename Vec<VW>::T (&y)[NV]) {
    typedef typename Vec<VW>::T V;
    const int n = K / VW;  // vectors per row
    V* xr = reinterpret_cast<V*>(xrow);
    const V* ar = addrow ? reinterpret_cast<const V*>(addrow) : nullptr;
    V v[NV];
    float ss = 0.f;
#pragma unroll
    for (int u = 0; u < NV; ++u) {
        const int i = threadIdx.x + u * blockDim.x;
        if (i < n) v[u] = xr[i];
    }
    if (ar) {
#pragma unroll
        for (int u = 0; u < NV; ++u) {
            const int i = threadIdx.x + u * blockDim.x;
            if (i < n) { v[u] = add_(v[u], ar[i]); xr[i] = v[u]; }
        }
    }
#pragma unroll
    for (int u = 0; u < NV; ++u)
        if (threadIdx.x + u * blockDim.x < n) ss += sq(v[u]);
    ss = block_sum(ss, red);
    const float r = rsqrtf(ss / (float)K + eps);
    const V* wv = reinterpret_cast<const V*>(w);
#pragma unroll
    for (int u = 0; u < NV; ++u) {
        const int i = threadIdx.x + u * blockDim.x;
        if (i < n) y[u] = scale_(v[u], r, wv[i]);
        else zero_(y[u]);
    }
}
