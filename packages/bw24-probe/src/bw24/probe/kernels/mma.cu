// bw24-probe tensor-core peak with warp-level mma.sync (sm_80+).
//
// Formulas:  mma_f16:  D[16x8] += A[16x16] (f16, row) * B[16x8] (f16, col), f32 accumulate;
//                      2*16*8*16 = 4096 FLOP per warp-instruction.
//            mma_s8:   D[16x8] += A[16x32] (s8, row) * B[32x8] (s8, col), s32 accumulate;
//                      2*16*8*32 = 8192 OP per warp-instruction.
// Mapping: every warp keeps CHAINS independent accumulator tiles (so the tensor pipe never
//   waits on one result) and runs `iters` rounds; operands stay in registers, so no memory
//   traffic beyond the first load and one float/int per thread written at the end.
// Bytes moved: ~0 (compute-bound by construction).

#ifndef CHAINS
#define CHAINS 8
#endif

extern "C" __global__ void mma_f16(const unsigned* __restrict__ in, float* __restrict__ out, int iters) {
    const int lane = threadIdx.x & 31;
    const unsigned a0 = in[lane], a1 = in[lane + 32], a2 = in[lane + 64], a3 = in[lane + 96];
    const unsigned b0 = in[lane + 128], b1 = in[lane + 160];
    float c[CHAINS][4];
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) c[k][0] = c[k][1] = c[k][2] = c[k][3] = 0.f;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int k = 0; k < CHAINS; ++k) {
            asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                : "+f"(c[k][0]), "+f"(c[k][1]), "+f"(c[k][2]), "+f"(c[k][3])
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
    }
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) s += c[k][0] + c[k][1] + c[k][2] + c[k][3];
    out[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = s;
}

extern "C" __global__ void mma_s8(const unsigned* __restrict__ in, int* __restrict__ out, int iters) {
    const int lane = threadIdx.x & 31;
    const unsigned a0 = in[lane], a1 = in[lane + 32], a2 = in[lane + 64], a3 = in[lane + 96];
    const unsigned b0 = in[lane + 128], b1 = in[lane + 160];
    int c[CHAINS][4];
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) c[k][0] = c[k][1] = c[k][2] = c[k][3] = 0;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int k = 0; k < CHAINS; ++k) {
            asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
                "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                : "+r"(c[k][0]), "+r"(c[k][1]), "+r"(c[k][2]), "+r"(c[k][3])
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
    }
    int s = 0;
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) s += c[k][0] + c[k][1] + c[k][2] + c[k][3];
    out[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = s;
}
