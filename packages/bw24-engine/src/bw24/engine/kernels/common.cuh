// common.cuh: types and warp helpers shared by every bw24 kernel family.
// NVRTC ships no libc headers, so the fixed-width integer types are spelled out here.
#pragma once
#include <cuda_fp16.h>

typedef signed char i8;
typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;
typedef long long i64;

#define WARP 32
#define FULL_MASK 0xffffffffu
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif

// Programmatic dependent launch (bw24.runtime.launch; compiled in with BW24_PDL when CudaOps.pdl is on,
// BW24_PDL=1, and launched so inside captured graphs). Every kernel opens with PDL_OPEN: it lets the next
// kernel in the stream launch (once all of this grid's blocks have started), then waits until the kernel
// ahead has completed and its writes are visible. Nothing before the wait reads or writes another
// kernel's data, so the stream order holds; what overlaps is the next kernel's launch and block start
// with this one's tail. The matvecs (qmv8_rows in qmatvec_q8.cu for decode, qmv_rows in qmatvec.cu)
// load their first weight group before the wait (weights are written by no kernel). Without BW24_PDL
// the kernels compute as before (the same instructions).
#if defined(BW24_PDL) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PDL_TRIGGER() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define PDL_TRIGGER() ((void)0)
#define PDL_WAIT() ((void)0)
#endif
#define PDL_OPEN() \
    do {           \
        PDL_TRIGGER(); \
        PDL_WAIT(); \
    } while (0)

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

__device__ __forceinline__ float h2f(u16 h) { return __half2float(__ushort_as_half(h)); }
__device__ __forceinline__ float bf2f(u16 b) { return __uint_as_float(((u32)b) << 16); }

// Block-wide sum for blockDim.x a multiple of 32 (<= 1024); `red` holds >= 32 floats of smem.
__device__ __forceinline__ float block_sum(float v, float* red) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : 0.f;
    return warp_sum(v);
}

// The gating activation of glu (elementwise.cu) and glu_q8 (qmatvec_q8.cu): act 0 = silu g/(1+e^-g),
// 1 = gelu_tanh 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))).
__device__ __forceinline__ float glu_act(float g, int act) {
    if (act == 0) return g / (1.f + expf(-g));
    return 0.5f * g * (1.f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)));
}

// KV-cache elements: float (default) or __half (CudaOps.kv_dtype "f16": half the bytes per key).
// Math stays fp32; a half cache rounds each stored k/v once (round to nearest even).
__device__ __forceinline__ void kv_store(float* p, float v) { *p = v; }
__device__ __forceinline__ void kv_store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ __forceinline__ float kv_load(const float* p) { return __ldg(p); }
__device__ __forceinline__ float kv_load(const __half* p) { return __half2float(__ldg(p)); }
// 4 consecutive elements (16-byte aligned floats / 8-byte aligned halves).
__device__ __forceinline__ float4 kv_load4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }
__device__ __forceinline__ float4 kv_load4(const __half* p) {
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&u.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&u.y));
    return make_float4(a.x, a.y, b.x, b.y);
}

// Every thread of the block calls it after writing its outputs: the block fences them, takes a ticket,
// and is told whether it was the last of the n blocks that report to this ticket (`last`: a __shared__
// bool of the caller). The last one has re-armed the ticket (0) for the next launch (graph replay) and
// may read the others' outputs (with __ldcg: not through its own L1). The fused attention combine and the
// sampling reduction finish their launch this way.
template <typename C>
__device__ __forceinline__ bool last_arrival(C* ticket, C n, bool& last) {
    __threadfence();  // this block's outputs are visible device-wide before its ticket says so
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(ticket, (C)1) == n - 1;
    __syncthreads();
    if (!last) return false;
    __threadfence();
    if (threadIdx.x == 0) *ticket = 0;
    return true;
}
