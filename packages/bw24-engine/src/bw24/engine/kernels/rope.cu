// rope.cu: rotary position embedding of q (in place) and k, fused with the KV-cache append.
//
// Formula: token t sits at p = pos[0] + t (pos read from device memory, so a captured graph
// replays at every position); pair i < rope_dim/2 turns by a = p * freq_scale * base^(-2i/rope_dim):
//   (u, v) -> (u cos a - v sin a, v cos a + u sin a), pairs (2i, 2i+1) for "norm", (i, i+rope_dim/2)
//   for "neox"; dims >= rope_dim pass unchanged. k_cache[hk, p] = rotated k, v_cache[hk, p] = v.
// Angles in double (like the reference) so long positions keep their precision.
// Thread-to-data mapping: block (t, head) with head < H for q and H <= head < H + Hkv for k (+v);
// threads stride the D/2 pairs, then the Dv values of v.
// Bytes moved: q read+write 8*H*D, k read 4*Hkv*D, cache writes 4*Hkv*(D+Dv), v read 4*Hkv*Dv per token.
#include "common.cuh"

extern "C" __global__ void rope_kv(float* q, const float* __restrict__ k, const float* __restrict__ v,
                                   const int* __restrict__ pos, float* k_cache, float* v_cache,
                                   int H, int Hkv, int D, int Dv, int S, int rope_dim, int neox,
                                   double base, double freq_scale) {
    const int t = blockIdx.x, head = blockIdx.y;
    const int p = pos[0] + t;
    if (p >= S) return;  // the host reserves cache room before queuing a step
    const bool is_q = head < H;
    const int hk = head - H;
    const float* src = is_q ? q + ((i64)t * H + head) * D : k + ((i64)t * Hkv + hk) * D;
    float* dst = is_q ? q + ((i64)t * H + head) * D : k_cache + ((i64)hk * S + p) * D;
    const int half = rope_dim / 2;
    // each thread owns whole pairs, so the in-place rotation of q needs no barrier
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const int i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        const double a = (double)p * freq_scale * pow(base, -2.0 * i / rope_dim);
        const float c = (float)cos(a), s = (float)sin(a);
        const float u = src[i0], w = src[i1];
        dst[i0] = u * c - w * s;
        dst[i1] = w * c + u * s;
    }
    // dims past rope_dim are copied unchanged (only needed when writing k to the cache)
    if (!is_q) {
        for (int i = rope_dim + threadIdx.x; i < D; i += blockDim.x) dst[i] = src[i];
        const float* vs = v + ((i64)t * Hkv + hk) * Dv;
        float* vd = v_cache + ((i64)hk * S + p) * Dv;
        for (int i = threadIdx.x; i < Dv; i += blockDim.x) vd[i] = vs[i];
    }
}
