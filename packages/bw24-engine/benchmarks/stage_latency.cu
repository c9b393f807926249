// What one dependent stage of a decode step costs on this GPU when the stage does (almost) nothing:
// benchmarks/gpu_stage_latency.py times N stages as N kernels in a CUDA graph (plain launches, and PDL
// launches: programmatic stream serialization) against one persistent kernel whose N phases are separated
// by a grid-wide barrier. A decode step is a chain of such stages (the 0.6B: 286 kernels a token at
// 3.1 us each under PDL, e7b99ea); the answer says how far fewer, or cheaper, stages could take it.
//
// Work per stage: thread 0 of every block reads one value the previous stage wrote (another block's)
// and writes its own, so each stage really depends on the whole previous one. After n stages every
// value is n (the script checks it, so a broken barrier cannot report a time).

#define PDL_TRIGGER() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")

__device__ __forceinline__ void step(float* buf, int nb, int s) {
    const int b = blockIdx.x;
    const float* prev = buf + ((s + 1) & 1) * nb;
    buf[(s & 1) * nb + b] = prev[(b + 1) % nb] + 1.0f;
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
