// attention.cu: causal GQA attention of T queries against the KV cache, split-K (flash-decoding).
//
// Formula: query t of head h at position p = pos[0] + t attends to keys j in [lo, p], lo = 0 or
// p - window + 1 (sliding window); s_j = (q . k_j) * scale, optionally softcap * tanh(s_j / softcap);
// out = sum_j softmax(s)_j v_j. kv head hk = h / G serves the G = H / Hkv query heads.
// pos is read from device memory: one launch shape serves every position (graph replay).
//
// Thread-to-data mapping, pass 1, attn_split<D, DV, G>: block (split s, kv head hk, token t) scans keys
//   [lo + s*CHUNK, min(lo + (s+1)*CHUNK, p+1)) for all G query heads of hk, so each key and value
//   row is read once per kv head. Warp w takes keys w, w+NW, ...; lanes split the D (DV) dims of a
//   row (coalesced 8..32-byte loads), a warp reduction gives the G scores, and each warp keeps an
//   online softmax (max m, sum l, acc[DV]) per head; the block merges its warps and writes
//   (m, l, acc) per (t, h, s). Splits past the live range exit at once.
// Pass 2, attn_combine: block (h, t), thread per output dim, merges the live splits:
//   M = max m_s, out = sum_s e^(m_s-M) acc_s / sum_s e^(m_s-M) l_s.
// Bytes moved: 4*(D+DV) per cached key per kv head (fp32 cache) + partials 4*(DV+2) per split.
#include "common.cuh"

#define NW 4

template <int D, int DV, int G>
__global__ void __launch_bounds__(NW * 32)
attn_split(const float* __restrict__ q, const float* __restrict__ kc, const float* __restrict__ vc,
           const int* __restrict__ pos, int H, int Hkv, int S, float scale, float softcap, int window,
           int chunk, int nsplit, float* __restrict__ part_ml, float* __restrict__ part_acc) {
    constexpr int PD = D / 32, PV = DV / 32;
    const int s = blockIdx.x, hk = blockIdx.y, t = blockIdx.z;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int p = pos[0] + t;
    const int lo = window > 0 ? max(0, p - window + 1) : 0;
    const int j0 = lo + s * chunk;
    if (j0 > p) return;
    const int j1 = min(j0 + chunk, p + 1);

    float qr[G][PD];
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
        for (int e = 0; e < PD; ++e) qr[g][e] = q[((i64)t * H + hk * G + g) * D + lane * PD + e];

    float m[G], l[G], acc[G][PV];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        m[g] = -INFINITY; l[g] = 0.f;
#pragma unroll
        for (int e = 0; e < PV; ++e) acc[g][e] = 0.f;
    }
    const float* kb = kc + (i64)hk * S * D;
    const float* vb = vc + (i64)hk * S * DV;
    for (int j = j0 + w; j < j1; j += NW) {
        float kr[PD], vr[PV];
#pragma unroll
        for (int e = 0; e < PD; ++e) kr[e] = kb[(i64)j * D + lane * PD + e];
#pragma unroll
        for (int e = 0; e < PV; ++e) vr[e] = vb[(i64)j * DV + lane * PV + e];
#pragma unroll
        for (int g = 0; g < G; ++g) {
            float sc = 0.f;
#pragma unroll
            for (int e = 0; e < PD; ++e) sc = fmaf(qr[g][e], kr[e], sc);
            sc = warp_sum(sc) * scale;
            if (softcap > 0.f) sc = softcap * tanhf(sc / softcap);
            const float mn = fmaxf(m[g], sc);
            const float corr = expf(m[g] - mn), pe = expf(sc - mn);
            l[g] = l[g] * corr + pe;
#pragma unroll
            for (int e = 0; e < PV; ++e) acc[g][e] = fmaf(acc[g][e], corr, pe * vr[e]);
            m[g] = mn;
        }
    }
    // merge the NW warps of this block through shared memory
    __shared__ float sm_m[NW][G], sm_l[NW][G];
    __shared__ float sm_acc[NW][G][DV];
    if (lane == 0)
#pragma unroll
        for (int g = 0; g < G; ++g) { sm_m[w][g] = m[g]; sm_l[w][g] = l[g]; }
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
        for (int e = 0; e < PV; ++e) sm_acc[w][g][lane * PV + e] = acc[g][e];
    __syncthreads();
    for (int i = threadIdx.x; i < G * DV; i += NW * 32) {
        const int g = i / DV, d = i % DV;
        float M = -INFINITY;
#pragma unroll
        for (int u = 0; u < NW; ++u) M = fmaxf(M, sm_m[u][g]);
        float L = 0.f, A = 0.f;
#pragma unroll
        for (int u = 0; u < NW; ++u) {
            const float f = sm_m[u][g] == -INFINITY ? 0.f : expf(sm_m[u][g] - M);
            L += sm_l[u][g] * f;
            A += sm_acc[u][g][d] * f;
        }
        const i64 row = ((i64)t * H + hk * G + g) * nsplit + s;
        part_acc[row * DV + d] = A;
        if (d == 0) { part_ml[2 * row] = M; part_ml[2 * row + 1] = L; }
    }
}

extern "C" __global__ void attn_combine(const float* __restrict__ part_ml, const float* __restrict__ part_acc,
                                        const int* __restrict__ pos, int H, int DV, int chunk, int nsplit,
                                        int window, float* __restrict__ out) {
    const int h = blockIdx.x, t = blockIdx.y;
    const int p = pos[0] + t;
    const int lo = window > 0 ? max(0, p - window + 1) : 0;
    const int live = min(nsplit, (p - lo) / chunk + 1);
    const i64 base = ((i64)t * H + h) * nsplit;
    float M = -INFINITY;
    for (int s = 0; s < live; ++s) M = fmaxf(M, part_ml[2 * (base + s)]);
    for (int d = threadIdx.x; d < DV; d += blockDim.x) {
        float L = 0.f, A = 0.f;
        for (int s = 0; s < live; ++s) {
            const float f = expf(part_ml[2 * (base + s)] - M);
            L += part_ml[2 * (base + s) + 1] * f;
            A += part_acc[(base + s) * DV + d] * f;
        }
        out[((i64)t * H + h) * DV + d] = A / L;
    }
}
