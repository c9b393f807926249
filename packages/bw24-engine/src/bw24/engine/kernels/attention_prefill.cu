// attention_prefill.cu: causal GQA attention of a prefill chunk (T > 16 queries), flash style.
//
// Formula (as attention.cu): query t of head h sits at p = pos[0] + t and attends to keys j in
// [lo, p], lo = 0 or p - window + 1 (sliding window); s_j = (q . k_j) * scale, optionally
// softcap * tanh(s_j / softcap); out = sum_j softmax(s)_j v_j. kv head hk = h / G serves G query heads.
// rope_kv has already appended the chunk's keys, so keys 0 .. pos[0] + T - 1 are in the cache; the
// chunk may start at pos[0] > 0 (long prompts in max_batch chunks, prefix-cache and spec feeds).
// One pass, online softmax: per query row a running max m, sum l and acc[DV], rescaled by
// e^(m_old - m_new) at each 32-key tile (no split/combine pass, no scratch).
//
// Thread-to-data mapping, attn_prefill<D, DV, G, RW>: block (row tile, kv head hk) owns M = 4 * RW
//   query rows i = (token i / G, head hk*G + i % G), so the G heads of a token share every K/V load.
//   The block stages its q rows in shared memory (M*D*4 bytes, <= 32 KB); then each warp (RW rows)
//   walks 32-key tiles of its own causal range without further barriers: lane j scores key j
//   against the RW rows (k row as float4 loads from L1/L2, q as shared-memory broadcasts), a warp
//   max/sum updates each row's softmax state, then for each key of the tile the lanes own the DV
//   dims (coalesced v rows) and take p_j by shuffle: acc[r][lane + 32e] += p_j v_j.
// Bytes moved: q 4*T*H*D and out 4*T*H*DV once; per warp 4*(D + DV) per key of its causal range
//   (from L2: the 4 warps of a block and neighbouring blocks share the same keys).
#include "common.cuh"

#define PW 4  // warps per block

template <int D, int DV, int G, int RW, typename KT = float>
__global__ void __launch_bounds__(PW * 32)
attn_prefill(const float* __restrict__ q, const KT* __restrict__ kc, const KT* __restrict__ vc,
             const int* __restrict__ pos, int T, int H, int S, float scale, float softcap, int window,
             float* __restrict__ out) {
    PDL_OPEN();
    constexpr int M = PW * RW, PV = DV / 32;
    static_assert(D % 32 == 0 && DV % 32 == 0 && M * D * 4 <= 32768, "q tile must fit 32 KB of smem");
    __shared__ __align__(16) float qs[M][D];
    const int hk = blockIdx.y, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int rows = T * G, r0 = blockIdx.x * M;
    for (int idx = threadIdx.x; idx < M * D; idx += PW * 32) {
        const int r = idx / D, d = idx % D, i = r0 + r;
        qs[r][d] = i < rows ? q[((i64)(i / G) * H + hk * G + i % G) * D + d] : 0.f;
    }
    __syncthreads();
    const int wr0 = r0 + w * RW;  // this warp's first row; from here on warps are independent
    if (wr0 >= rows) return;
    const int nr = min(RW, rows - wr0);
    const int p0 = pos[0];
    const int hi = p0 + (wr0 + nr - 1) / G;  // the last key any row of this warp sees
    const int lo = window > 0 ? max(0, p0 + wr0 / G - window + 1) : 0;

    int prow[RW], lrow[RW];
    float m[RW], l[RW], acc[RW][PV];
#pragma unroll
    for (int r = 0; r < RW; ++r) {
        prow[r] = r < nr ? p0 + (wr0 + r) / G : -1;  // rows past the end see no key
        lrow[r] = window > 0 ? max(0, prow[r] - window + 1) : 0;
        m[r] = -INFINITY;
        l[r] = 0.f;
#pragma unroll
        for (int e = 0; e < PV; ++e) acc[r][e] = 0.f;
    }
    const KT* kb = kc + (i64)hk * S * D;
    const KT* vb = vc + (i64)hk * S * DV;
    const float(*qw)[D] = qs + w * RW;

    for (int j0 = lo; j0 <= hi; j0 += 32) {
        const int j = j0 + lane;
        const bool live = j <= hi;
        float s[RW];
#pragma unroll
        for (int r = 0; r < RW; ++r) s[r] = 0.f;
        if (live) {
            const KT* k4 = kb + (i64)j * D;
#pragma unroll 4
            for (int d4 = 0; d4 < D / 4; ++d4) {
                const float4 kv = kv_load4(k4 + 4 * d4);
#pragma unroll
                for (int r = 0; r < RW; ++r) {
                    const float4 qv = *reinterpret_cast<const float4*>(&qw[r][4 * d4]);
                    s[r] = fmaf(qv.x, kv.x, s[r]);
                    s[r] = fmaf(qv.y, kv.y, s[r]);
                    s[r] = fmaf(qv.z, kv.z, s[r]);
                    s[r] = fmaf(qv.w, kv.w, s[r]);
                }
            }
        }
        float pr[RW];
#pragma unroll
        for (int r = 0; r < RW; ++r) {
            float sc = s[r] * scale;
            if (softcap > 0.f) sc = softcap * tanhf(sc / softcap);
            const bool ok = live && j >= lrow[r] && j <= prow[r];
            sc = ok ? sc : -INFINITY;
            const float mn = fmaxf(m[r], warp_max(sc));  // warp-uniform
            pr[r] = 0.f;
            if (mn != -INFINITY) {  // else no key of this row yet: state stays empty
                const float corr = expf(m[r] - mn);
                pr[r] = ok ? expf(sc - mn) : 0.f;
                l[r] = l[r] * corr + warp_sum(pr[r]);
#pragma unroll
                for (int e = 0; e < PV; ++e) acc[r][e] *= corr;
                m[r] = mn;
            }
        }
#ifdef BW24_PLANTED_BUG
        const int nk = min(31, hi - j0 + 1);  // kernel_check canary: drops the last key of each tile
#else
        const int nk = min(32, hi - j0 + 1);
#endif
        for (int jj = 0; jj < nk; ++jj) {
            float vv[PV];
#pragma unroll
            for (int e = 0; e < PV; ++e) vv[e] = kv_load(vb + (i64)(j0 + jj) * DV + lane + 32 * e);
#pragma unroll
            for (int r = 0; r < RW; ++r) {
                const float pj = __shfl_sync(FULL_MASK, pr[r], jj);
#pragma unroll
                for (int e = 0; e < PV; ++e) acc[r][e] = fmaf(pj, vv[e], acc[r][e]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < RW; ++r) {
        if (r < nr) {
            const int i = wr0 + r;
            float* o = out + ((i64)(i / G) * H + hk * G + i % G) * DV;
            const float inv = 1.f / l[r];
#pragma unroll
            for (int e = 0; e < PV; ++e) o[lane + 32 * e] = acc[r][e] * inv;
        }
    }
}
