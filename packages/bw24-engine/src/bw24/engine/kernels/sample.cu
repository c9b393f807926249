// sample.cu: next-token selection on the device: greedy, and temperature / top-k / top-p / min-p
// draws with a counter-based RNG, all after the context penalties. The token stays in device memory
// (the next step's embedding input), so a captured decode graph feeds itself.
//
// Formula (bw24.engine.sampling, the reference): l_i penalised by its count c_i in the context:
//   repetition r: l / r if l > 0 else l * r (c > 0); then l -= freq * c + presence * (c > 0)  [double];
//   greedy: the lowest index among the maxima.
//   draw: order = tokens by l desc (ties: lower index first); w_i = exp(l_i/T - l_max/T);
//   keep the top_k first; S_k = sum w; keep the shortest prefix with cum(w)/S_k >= top_p; keep
//   w_i/S_k >= min_p * (1/S_k); S_f = sum of the kept w; u = Philox4x32-10(counter = position,
//   key = seed) word 0 >> 8, times 2^-24; token = first kept (in order) with cum(w) > u * S_f.
// Every cut is a "first element of the sorted order whose inclusive cumulative measure crosses a
// threshold" (measure = count for top-k, w for top-p and the draw). It is found without sorting, by
// a most-significant-digit radix select over the 64-bit order key of l: per pass, a deterministic
// block reduction of the measure into 16 buckets of the next 4 key bits, a walk over the buckets, and
// an order-preserving compaction of the crossing bucket (so equal keys stay in index order).
// Sums run in float64 in another order than NumPy's cumsum, so a draw can differ from the reference
// only when u * S_f lies within ~1e-15 (relative) of a cdf step.
//
// Thread-to-data mapping: one block of 1024 threads; each thread owns a contiguous slice of the
// current candidate list (compaction) or strides it (histograms). Scratch: l, w (double [V]),
// key (u64 [V]), two index lists (int [V]).
// Bytes moved: 4V logits (+4V counts) read, 28V scratch written once, then 16 bytes per surviving
// candidate per radix pass (candidates shrink to the crossing bucket each pass); 4 bytes written out.
#include "common.cuh"

#define SNT 1024  // threads of the sampling block
#define NW (SNT / 32)

// ---- Philox4x32-10 (Salmon et al. 2011), the same function as sampling.philox4x32 -----------
__device__ __forceinline__ uint4 philox4x32_10(uint4 c, u32 k0, u32 k1) {
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        const u32 hi0 = __umulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
        const u32 hi1 = __umulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
        c = make_uint4(hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0);
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c;
}

// u in [0, 1) with 24 random bits, keyed by (seed, position): sampling.uniform.
__device__ __forceinline__ double uniform24(u32 seed_lo, u32 seed_hi, int position) {
    const uint4 x = philox4x32_10(make_uint4((u32)position, position < 0 ? 0xFFFFFFFFu : 0u, 0u, 0u),
                                  seed_lo, seed_hi);
    return (double)(x.x >> 8) * (1.0 / 16777216.0);
}

// out[i] = uniform(seed, pos[0] + i): lets kernel_check compare the RNG itself bit for bit.
extern "C" __global__ void philox_uniform(u32 seed_lo, u32 seed_hi, const int* __restrict__ pos, int n,
                                          double* __restrict__ out) {
    PDL_OPEN();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = uniform24(seed_lo, seed_hi, pos[0] + i);
}

__device__ __forceinline__ double penalised(const float* __restrict__ logits, const int* counts, int i,
                                            double rep, double freq, double presence) {
    double l = logits[i];
    if (counts) {
        const int c = counts[i];
        if (c > 0 && rep != 1.0) l = l > 0 ? l / rep : l * rep;
        l -= freq * (double)c + presence * (c > 0 ? 1.0 : 0.0);
    }
    return l;
}

__device__ __forceinline__ void better(double& v, int& i, double v2, int i2) {
    if (v2 > v || (v2 == v && i2 < i)) { v = v2; i = i2; }
}

// Block argmax (value, lowest index); every thread gets the result. `sv`/`si` hold >= 32 entries.
__device__ __forceinline__ void block_argmax(double& bv, int& bi, double* sv, int* si) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const double v2 = __shfl_xor_sync(FULL_MASK, bv, o);
        const int i2 = __shfl_xor_sync(FULL_MASK, bi, o);
        better(bv, bi, v2, i2);
    }
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) { sv[w] = bv; si[w] = bi; }
    __syncthreads();
    bv = lane < nw ? sv[lane] : -INFINITY;
    bi = lane < nw ? si[lane] : 0x7fffffff;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const double v2 = __shfl_xor_sync(FULL_MASK, bv, o);
        const int i2 = __shfl_xor_sync(FULL_MASK, bi, o);
        better(bv, bi, v2, i2);
    }
}

// Greedy over V logits in two levels inside one launch: every block reduces a grid-stride slice
// to (value, lowest index), writes it to pv/pi and takes a ticket; the block that draws the last
// ticket reduces the gridDim.x partials and writes the token (common.cuh last_arrival; the ticket is
// re-armed for the next replay). The (value, lowest index) order is associative and commutative, so the token equals a
// one-block scan's exactly; one block over 152k logits took 40-57 us on the H200, the grid ~4 us.
// NaN logits are never chosen (better() compares false); a row of NaN alone gives token 0, as spec.cu's verify_argmax.
extern "C" __global__ void argmax_sample(const float* __restrict__ logits, int V, int* counts, double rep,
                                         double freq, double presence, int* out, double* pv, int* pi,
                                         unsigned* ticket) {
    PDL_OPEN();
    __shared__ double sv[32];
    __shared__ int si[32];
    __shared__ bool last;
    double bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < V; i += gridDim.x * blockDim.x)
        better(bv, bi, penalised(logits, counts, i, rep, freq, presence), i);
    block_argmax(bv, bi, sv, si);
    if (threadIdx.x == 0) {
        pv[blockIdx.x] = bv;
        pi[blockIdx.x] = bi;
    }
    if (!last_arrival(ticket, gridDim.x, last)) return;  // (common.cuh: it re-arms the ticket)
    bv = -INFINITY;
    bi = 0x7fffffff;
    for (int j = threadIdx.x; j < (int)gridDim.x; j += blockDim.x) better(bv, bi, __ldcg(pv + j), __ldcg(pi + j));
    block_argmax(bv, bi, sv, si);
    if (threadIdx.x == 0) {
        // all V logits NaN (a broken model, or kernel_check's planted canaries): token 0, as verify_argmax picks
        // (spec.cu), never 0x7fffffff, which the next step's embedding row and counts[] would read and write
        // far outside their arrays (at 30ecafb a NaN step killed the process: CUDA_ERROR_INVALID_ADDRESS_SPACE)
        if (bi == 0x7fffffff) bi = 0;
        out[0] = bi;
        if (counts) counts[bi] += 1;
    }
}

// counts[out[0]] += 1 when the penalties are off but the caller still tracks the context counts.
extern "C" __global__ void count_token(const int* __restrict__ out, int* counts) {
    PDL_OPEN();
    if (threadIdx.x == 0) counts[out[0]] += 1;
}

// ---- the stochastic sampler ------------------------------------------------------------------
// Ascending u64 key = the sorted order "l descending" (the index breaks ties separately).
__device__ __forceinline__ u64 desc_key(double d) {
    u64 u = (u64)__double_as_longlong(d);
    u = (u >> 63) ? ~u : (u | 0x8000000000000000ull);  // ascending order of d
    return ~u;
}

struct SmemS {
    double red[NW * 16];
    double H[16];
    int scan[NW];
    double dv[32];
    int di[32];
    int res;
    double bcast;
};

// Exclusive prefix sum of v over the block (thread order); total in `total`.
__device__ int block_excl_scan(int v, SmemS& s, int& total) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(FULL_MASK, x, o);
        if (lane >= o) x += y;
    }
    __syncthreads();
    if (lane == 31) s.scan[w] = x;
    __syncthreads();
    if (w == 0) {
        int t = s.scan[lane];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(FULL_MASK, t, o);
            if (lane >= o) t += y;
        }
        s.scan[lane] = t;
    }
    __syncthreads();
    total = s.scan[NW - 1];
    const int off = (w ? s.scan[w - 1] : 0) + x - v;
    __syncthreads();
    return off;
}

// dst = the elements i of src[0..n) (identity when src is null) with pred(i), in the same order.
template <class Pred>
__device__ int compact(const int* src, int n, int* dst, Pred pred, SmemS& s) {
    const int chunk = (n + SNT - 1) / SNT;
    const int b = min(n, (int)threadIdx.x * chunk), e = min(n, b + chunk);
    int c = 0;
    for (int j = b; j < e; ++j) c += pred(src ? src[j] : j) ? 1 : 0;
    int total;
    int off = block_excl_scan(c, s, total);
    for (int j = b; j < e; ++j) {
        const int i = src ? src[j] : j;
        if (pred(i)) dst[off++] = i;
    }
    __syncthreads();
    return total;
}

// Deterministic block sum of one double per thread (xor butterflies give every lane the same bits).
__device__ double block_sum_d(double v, SmemS& s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) s.red[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        double t = 0.0;
        for (int w = 0; w < NW; ++w) t += s.red[w];
        s.bcast = t;
    }
    __syncthreads();
    return s.bcast;
}

// The first element (in sorted order) of list L[0..n) whose inclusive cumulative measure m
// (1 per element when w is null) satisfies cum > thr (strict) or cum >= thr. L is consumed
// (it ends as the crossing bucket; tmp is the other buffer). Returns -1 when the whole list's
// measure does not reach thr.
__device__ int select_first(const u64* __restrict__ key, const double* __restrict__ w, int* L, int* tmp, int n,
                            double thr, bool strict, SmemS& s) {
    double before = 0.0;
    for (int shift = 60; shift >= 0 && n > 1; shift -= 4) {
        double h[16];
#pragma unroll
        for (int b = 0; b < 16; ++b) h[b] = 0.0;
        for (int j = threadIdx.x; j < n; j += SNT) {
            const int i = L[j];
            const int d = (int)((key[i] >> shift) & 15);
            const double m = w ? w[i] : 1.0;
#pragma unroll
            for (int b = 0; b < 16; ++b) h[b] += d == b ? m : 0.0;
        }
#pragma unroll
        for (int b = 0; b < 16; ++b) {
            double v = h[b];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
            h[b] = v;
        }
        __syncthreads();
        if ((threadIdx.x & 31) == 0) {
#pragma unroll
            for (int b = 0; b < 16; ++b) s.red[(threadIdx.x >> 5) * 16 + b] = h[b];
        }
        __syncthreads();
        if (threadIdx.x < 16) {
            double t = 0.0;
            for (int ww = 0; ww < NW; ++ww) t += s.red[ww * 16 + threadIdx.x];
            s.H[threadIdx.x] = t;
        }
        __syncthreads();
        int cb = -1, last = -1;
        double acc = before, acc_cb = before;
        for (int b = 0; b < 16; ++b) {
            const double nb = acc + s.H[b];
            if (s.H[b] > 0.0) last = b;
            if (cb < 0 && (strict ? nb > thr : nb >= thr) && s.H[b] > 0.0) { cb = b; acc_cb = acc; }
            acc = nb;
        }
        if (cb < 0) {
            if (shift == 60) return -1;  // the whole list never reaches thr
            cb = last;                   // rounding between passes: the crossing bucket's tail
            acc_cb = acc - s.H[last];
        }
        before = acc_cb;
        const int sh = shift;
        n = compact(L, n, tmp, [&](int i) { return (int)((key[i] >> sh) & 15) == cb; }, s);
        int* t = L; L = tmp; tmp = t;
    }
    // n elements with equal keys (or one element), in index order: walk them.
    if (threadIdx.x == 0) {
        int r = L[n - 1];
        double acc = before;
        for (int j = 0; j < n; ++j) {
            acc += w ? w[L[j]] : 1.0;
            if (strict ? acc > thr : acc >= thr) { r = L[j]; break; }
        }
        s.res = r;
    }
    __syncthreads();
    const int r = s.res;
    __syncthreads();
    return r;
}

extern "C" __global__ void __launch_bounds__(SNT)
sample_dist(const float* __restrict__ logits, int V, int* counts, double rep, double freq, double presence,
            double temp, int top_k, double top_p, double min_p, u32 seed_lo, u32 seed_hi,
            const int* __restrict__ pos, double* __restrict__ lg, double* __restrict__ w, u64* __restrict__ key,
            int* __restrict__ LA, int* __restrict__ LB, int* out) {
    PDL_OPEN();
    __shared__ SmemS s;
    // 1. penalties, max
    double bv = -INFINITY;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < V; i += SNT) {
        // a NaN logit weighs as -inf (never drawn): left as NaN its weight made every sum NaN, the kept set came
        // out wrong and a row of NaN alone drew token V - 1 (the first H200 run of the NaN test, 24e748e)
        double l = penalised(logits, counts, i, rep, freq, presence);
        if (l != l) l = -INFINITY;
        lg[i] = l;
        better(bv, bi, l, i);
    }
    block_argmax(bv, bi, s.dv, s.di);
    if (bv == -INFINITY) {  // no finite logit (all NaN or -inf): exp(-inf - -inf) is NaN, so no draw; the lowest index,
        if (threadIdx.x == 0) {  // token 0, as argmax_sample and verify_argmax pick. (bv is the block's: uniform exit)
            out[0] = bi;
            if (counts) counts[bi] += 1;
        }
        return;
    }
    const double z0 = bv / temp;
    for (int i = threadIdx.x; i < V; i += SNT) {
        const double l = lg[i];
        w[i] = exp(l / temp - z0);
        key[i] = desc_key(l);
    }
    __syncthreads();
    // 2. top-k boundary (the element of rank top_k - 1), as (key, index): kept = at or before it.
    u64 bkey = ~0ull;
    int bidx = 0x7fffffff;
    if (top_k > 0 && top_k < V) {
        for (int i = threadIdx.x; i < V; i += SNT) LA[i] = i;
        __syncthreads();
        const int e = select_first(key, nullptr, LA, LB, V, (double)top_k, false, s);
        bkey = key[e];
        bidx = e;
    }
    auto in_prefix = [&](int i) { const u64 k = key[i]; return k < bkey || (k == bkey && i <= bidx); };
    int n = compact(nullptr, V, LA, in_prefix, s);
    double sk = 0.0;
    for (int j = threadIdx.x; j < n; j += SNT) sk += w[LA[j]];
    sk = block_sum_d(sk, s);
    // 3. top-p: the first rank whose cumulative mass reaches top_p.
    if (top_p < 1.0) {
        const int e = select_first(key, w, LA, LB, n, top_p * sk, false, s);
        if (e >= 0) { bkey = key[e]; bidx = e; }
    }
    // 4. min-p (a per-token test: w is non-increasing along the order, so the kept set stays a prefix).
    const double pmin = min_p * (1.0 / sk);
    n = compact(nullptr, V, LA, [&](int i) { return in_prefix(i) && (min_p <= 0.0 || w[i] / sk >= pmin); }, s);
    double sf = 0.0;
    for (int j = threadIdx.x; j < n; j += SNT) sf += w[LA[j]];
    sf = block_sum_d(sf, s);
    // 5. the draw: first kept token whose cumulative mass exceeds u * S_f.
    const double u = uniform24(seed_lo, seed_hi, pos[0]);
    const int n_kept = n;
    int tok = select_first(key, w, LA, LB, n, u * sf, true, s);
    if (tok < 0) {  // u * S_f beyond the rounded total: the last kept token (reference: min(i, n - 1))
        n = compact(nullptr, V, LA, [&](int i) { return in_prefix(i) && (min_p <= 0.0 || w[i] / sk >= pmin); }, s);
        tok = select_first(key, nullptr, LA, LB, n, (double)n_kept, false, s);
    }
    // (a finite top logit always keeps the top token, so tok is a kept index here; the guard keeps any future slip
    // inside the vocabulary for the next step's embedding read and counts[] write)
    if (tok < 0 || tok >= V) tok = 0;
    if (threadIdx.x == 0) {
        out[0] = tok;
        if (counts) counts[tok] += 1;
    }
}
