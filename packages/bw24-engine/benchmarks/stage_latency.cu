// What one dependent stage of a decode step costs on this GPU when the stage does (almost) nothing:
// benchmarks/gpu_stage_latency.py times N stages as N kernels in a CUDA graph (plain launches, and PDL
// launches: programmatic stream serialization) against one persistent kernel whose N phases are separated
// by a grid-wide barrier. A decode step is a chain of such stages (the 0.6B: 286 kernels a token at
// 3.1 us each under PDL, e7b99ea); the answer says how far fewer, or cheaper, stages could take it.
//
// Work per stage: thread 0 of every block reads one value the previous stage wrote (another block's)
// and writes its own, so each stage really depends on the whole previous one. After n stages every
// value is n (the script checks it, so a broken barrier cannot report a time).
//
// The second half (stage_mv, persistent_mv) gives each stage a small model's work: a 1024 x 1024 fp16
// matvec (2 MB of weights, a different matrix each stage, so they stream from HBM), whose output is the
// next stage's input. Why: the first half measured a grid barrier at 2.32 us a stage against 0.78 for a
// PDL launch (370d098), but a real stage also pays its first weight loads, its reduction and its drain
// (~3.1 us a stage for the 0.6B under PDL); a persistent kernel can load stage s + 1's weights before the
// barrier that ends stage s, as a PDL kernel loads them before its wait. Both arms run one device function
// per row, so a persistent decode kernel is worth building only if its row here beats the PDL graph's.

#define PDL_TRIGGER() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")

// The previous stage's value is read through L2 (__ldcg): L1 is not coherent across blocks, and a persistent
// kernel's block may hold a stale line of it from two stages back.
__device__ __forceinline__ void step(float* buf, int nb, int s) {
    const int b = blockIdx.x;
    const float* prev = buf + ((s + 1) & 1) * nb;
    buf[(s & 1) * nb + b] = __ldcg(prev + (b + 1) % nb) + 1.0f;
}

// One stage as a kernel. Both griddepcontrol instructions are no-ops without the PDL launch attribute.
extern "C" __global__ void stage(float* buf, int nb, int s) {
    PDL_TRIGGER();
    PDL_WAIT();
    if (threadIdx.x == 0) step(buf, nb, s);
}

// Grid-wide barrier for nb co-resident blocks (one per SM): bar[0] counts arrivals, bar[1] is the
// generation. A block reads the generation before it arrives; the last to arrive re-arms the count and
// bumps the generation, which releases the others.
__device__ __forceinline__ void grid_barrier(unsigned* bar, int nb) {
    __syncthreads();
    if (threadIdx.x == 0) {
        volatile unsigned* gen = bar + 1;
        const unsigned g = *gen;
        __threadfence();
        if (atomicAdd(bar, 1u) == (unsigned)nb - 1u) {
            atomicExch(bar, 0u);
            __threadfence();
            atomicAdd(bar + 1, 1u);
        } else {
            while (*gen == g) {
            }
        }
        __threadfence();
    }
    __syncthreads();
}

// n stages in one launch of nb blocks, a barrier after each.
extern "C" __global__ void persistent(float* buf, int nb, int n, unsigned* bar) {
    for (int s = 0; s < n; ++s) {
        if (threadIdx.x == 0) step(buf, nb, s);
        __threadfence();
        grid_barrier(bar, nb);
    }
}

// A cheaper grid barrier: one counter that only grows (no re-arming, no generation word, no full fences).
// Thread 0 of each block adds 1 with release semantics at GPU scope (the block's writes, ordered before it
// by __syncthreads, go with it) and spins with acquire loads until all nb blocks of this phase arrived:
// the count reaches target = nb * (phases so far). The caller zeroes the counter before the launch.
__device__ __forceinline__ void grid_barrier_ar(unsigned* ctr, unsigned target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(ctr) : "memory");
        unsigned v;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(ctr) : "memory");
        } while (v < target);
    }
    __syncthreads();
}

extern "C" __global__ void persistent_ar(float* buf, int nb, int n, unsigned* ctr) {
    for (int s = 0; s < n; ++s) {
        if (threadIdx.x == 0) step(buf, nb, s);
        grid_barrier_ar(ctr, (unsigned)nb * (unsigned)(s + 1));
    }
}

// ---- stages with a matvec's work: y = W_s x, W_s [K, K] fp16 row-major, x and y fp32 [K] ----
// One warp a row; lane l holds 16-byte vectors l, l + 32, l + 64, l + 96 of the row (K = 1024: all of it,
// 64 bytes a lane, coalesced 512-byte runs), loaded before the wait for the stage ahead.
#define MV_VECS 4
struct RowW {
    uint4 v[MV_VECS];
};

__device__ __forceinline__ void mv_load(const unsigned short* __restrict__ w, int K, int row, RowW& r) {
    const uint4* p = reinterpret_cast<const uint4*>(w + (long long)row * K);
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < MV_VECS; ++i) r.v[i] = __ldcs(p + 32 * i + lane);  // streamed: read once
}

__device__ __forceinline__ float h2f_bits(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// x [K] into the block's shared memory, read through L2 (__ldcg: another block wrote it this very step), one
// 16-byte load a thread; then a barrier. Why: at a7e5b1d every warp read all of x from L2 itself (4 KB a row, 4 MB
// a stage), and the matvec rows came out alike in all four arms (4.59-4.74 us a stage on an H100, 3.4 us over the
// empty stages): that traffic, not the stage's latency, is the likely bound there. The
// engine's matvecs read their activations through L1, which serves a block's warps; shared memory does the same
// here, in both arms (a persistent kernel's plain loads could hit L1 lines of the stage before).
__device__ __forceinline__ void mv_stage_x(const float* x, float* xs, int K) {
    for (int i = threadIdx.x; i < K / 4; i += blockDim.x)
        reinterpret_cast<float4*>(xs)[i] = __ldcg(reinterpret_cast<const float4*>(x) + i);
    __syncthreads();
}

// The row's dot with x (in shared memory), a fixed order, then the xor butterfly; lane 0 stores. The same code in
// both arms, so both give the same bits.
__device__ __forceinline__ void mv_finish(const RowW& r, const float* xs, float* y, int row) {
    const int lane = threadIdx.x & 31;
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < MV_VECS; ++i) {
        const float4* xp = reinterpret_cast<const float4*>(xs + 8 * (32 * i + lane));
        const float4 a = xp[0], b = xp[1];
        const unsigned w[4] = {r.v[i].x, r.v[i].y, r.v[i].z, r.v[i].w};
        const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            acc = fmaf(h2f_bits((unsigned short)(w[k] & 0xFFFFu)), xv[2 * k], acc);
            acc = fmaf(h2f_bits((unsigned short)(w[k] >> 16)), xv[2 * k + 1], acc);
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xFFFFFFFFu, acc, o);
    if (lane == 0) y[row] = acc;
}

#define MV_MAX_K 1024  // the shared x's size (MV_VECS covers K = 1024)

// One stage as a kernel (a graph of n of them): the row's weights before the PDL wait, as the engine's
// matvecs load theirs. Grid: K / (blockDim / 32) blocks, one warp a row.
extern "C" __global__ void stage_mv(const unsigned short* __restrict__ w, const float* x, float* y, int K) {
    PDL_TRIGGER();
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    __shared__ __align__(16) float xs[MV_MAX_K];
    RowW r;
    mv_load(w, K, row, r);
    PDL_WAIT();
    mv_stage_x(x, xs, K);
    mv_finish(r, xs, y, row);
}

// n stages in one launch of nb blocks (co-resident: one a SM) with grid_barrier_ar between them; stage s
// reads xbuf half s & 1 and writes the other. Warp g of the grid owns row g (warps past K idle but keep the
// barriers). prefetch != 0: stage s + 1's row is loaded before the barrier that ends stage s.
extern "C" __global__ void persistent_mv(const unsigned short* __restrict__ w, float* xbuf, int K, int n,
                                         unsigned* ctr, int prefetch) {
    const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const bool active = row < K;
    const long long KK = (long long)K * K;
    __shared__ __align__(16) float xs[MV_MAX_K];
    RowW r;
    if (active) mv_load(w, K, row, r);
    for (int s = 0; s < n; ++s) {
        if (s > 0) {
            grid_barrier_ar(ctr, gridDim.x * (unsigned)s);
            if (active && !prefetch) mv_load(w + s * KK, K, row, r);
        }
        mv_stage_x(xbuf + (s & 1) * K, xs, K);  // every thread: it holds a __syncthreads
        if (active) mv_finish(r, xs, xbuf + ((s + 1) & 1) * K, row);
        if (active && prefetch && s + 1 < n) mv_load(w + (s + 1) * KK, K, row, r);
        // (xs is overwritten only after the next grid_barrier_ar, whose first __syncthreads every warp reaches
        // after its mv_finish)
    }
}
