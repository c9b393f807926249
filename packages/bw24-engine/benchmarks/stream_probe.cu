// stream_probe.cu: how fast one short kernel can stream the 8B's decode-attention cache at 4,096 keys (8 kv heads x
// 4,096 keys x (K + V) 256 bytes = 16 MiB) with nothing else to do: benchmarks/gpu_stream_probe.py times these
// kernels in the access shapes the attention's pass 1 uses and around them.
//
// Why: on the H200 at e223fb5 attn_dec_mma (pass 1) read that cache in 10.85 us (1.55 TB/s, Nsight Compute) with
// 264 blocks of 4 warps, two 32 KB tiles a block, both in flight at once by cp.async; ac4d4d4's sweep ran ~10 us as
// well at 16 splits of 4 tiles (one block an SM) and 33 of 2, each moving the same 128 KB an SM. If a kernel that
// only streams those tiles takes about as long, the access shape sets pass 1's time and a new shape is the lever; if
// it takes half, the math and the merge do.
//
// Formula: each block sums its region's 32-bit words (wrapping) and adds its warps' sums to *out (64-bit atomics);
// the script checks the total against the host's sum mod 2^32 before it reports a time.
// Thread-to-data mapping: block b owns chunks [b * tiles * tile_chunks, (b + 1) * tiles * tile_chunks) of 16 bytes;
//   stream_all / stream_ring2: thread x copies chunks x, x + blockDim, ... of each tile into shared memory
//   (cp.async.cg, as attention_dec_mma.cu's dm_copy_rows), then sums them back after a barrier;
//   stream_ldg: thread x loads UNROLL chunks a round (ld.global.nc.v4) straight into registers.
// Bytes moved: 16 * tiles * tile_chunks a block read, 8 bytes a warp written (the atomic).

typedef unsigned int u32;
typedef unsigned long long u64;

__device__ __forceinline__ void cp16(void* smem, const void* gmem) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((u32)__cvta_generic_to_shared(smem)), "l"(gmem)
                 : "memory");
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

__device__ __forceinline__ u32 sum4(uint4 v) { return v.x + v.y + v.z + v.w; }

__device__ __forceinline__ void warp_add(u32 s, u64* out) {
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, (u64)s);
}

__device__ __forceinline__ void copy_tile(uint4* dst, const uint4* src, int tile_chunks) {
    for (int c = threadIdx.x; c < tile_chunks; c += blockDim.x) cp16(dst + c, src + c);
}

__device__ __forceinline__ u32 sum_tile(const uint4* t, int tile_chunks) {
    u32 s = 0;
    for (int c = threadIdx.x; c < tile_chunks; c += blockDim.x) s += sum4(t[c]);
    return s;
}

// Every tile of the block in flight at once (shared memory: tiles * tile_chunks * 16 bytes), as pass 1's early tiles
// at 33 splits (two tiles a block).
extern "C" __global__ void stream_all(const uint4* __restrict__ src, int tile_chunks, int tiles, u64* out) {
    extern __shared__ uint4 sm[];
    const uint4* base = src + (size_t)blockIdx.x * tiles * tile_chunks;
    for (int t = 0; t < tiles; ++t) copy_tile(sm + t * tile_chunks, base + (size_t)t * tile_chunks, tile_chunks);
    commit();
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
    u32 s = 0;
    for (int t = 0; t < tiles; ++t) s += sum_tile(sm + t * tile_chunks, tile_chunks);
    warp_add(s, out);
}

// Two stages, the next tile's copies in flight while this one is summed (attention_dec_mma.cu's pipe), for splits of
// more tiles than stages (shared memory: 2 * tile_chunks * 16 bytes).
extern "C" __global__ void stream_ring2(const uint4* __restrict__ src, int tile_chunks, int tiles, u64* out) {
    extern __shared__ uint4 sm[];
    const uint4* base = src + (size_t)blockIdx.x * tiles * tile_chunks;
    copy_tile(sm, base, tile_chunks);
    commit();
    u32 s = 0;
    for (int t = 0; t < tiles; ++t) {
        if (t + 1 < tiles) copy_tile(sm + ((t + 1) & 1) * tile_chunks, base + (size_t)(t + 1) * tile_chunks, tile_chunks);
        commit();  // (a group a round, empty past the last tile: "all but the newest" is always this tile)
        asm volatile("cp.async.wait_group 1;" ::: "memory");
        __syncthreads();
        s += sum_tile(sm + (t & 1) * tile_chunks, tile_chunks);
        __syncthreads();  // this stage's readers are done before the next round copies into it
    }
    warp_add(s, out);
}

// Plain 16-byte loads into registers, UNROLL a thread in flight a round (the matvecs' way of streaming weights).
#define UNROLL 4
extern "C" __global__ void stream_ldg(const uint4* __restrict__ src, int tile_chunks, int tiles, u64* out) {
    const int n = tiles * tile_chunks;
    const uint4* base = src + (size_t)blockIdx.x * n;
    u32 s = 0;
    for (int c0 = threadIdx.x; c0 < n; c0 += UNROLL * blockDim.x) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
            const int c = c0 + u * blockDim.x;
            v[u] = c < n ? __ldg(base + c) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) s += sum4(v[u]);
    }
    warp_add(s, out);
}

// Nothing but the launch: the graph's gap between two kernels, to subtract.
extern "C" __global__ void stream_empty(const uint4* __restrict__ src, int tile_chunks, int tiles, u64* out) {}
