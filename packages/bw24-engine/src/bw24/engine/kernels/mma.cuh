// mma.cuh: the tensor-core primitives of the prefill kernels (attention_mma.cu, moe_mm.cu): mma.sync
// m16n8k16 with float16 inputs and float32 accumulation, and the float16 packing of its A fragments.
// Fragment layouts (PTX ISA, mma.m16n8k16 .f16): g = lane / 4, c = lane % 4; A regs (row g, cols 2c..),
// (row g+8, cols 2c..), (row g, cols 2c+8..), (row g+8, cols 2c+8..); B regs (k 2c.., n g), (k 2c+8.., n g);
// C (row g, cols 2c, 2c+1), (row g+8, same cols).
#pragma once
#include <cuda_fp16.h>
#include "common.cuh"

__device__ __forceinline__ u32 pack_half2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);  // lo in the low 16 bits: the lower column index
    return *reinterpret_cast<const u32*>(&h);
}

__device__ __forceinline__ void mma16816(float* c, const u32* a, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// O[16 x 16 dims] += P V for one 16-key step: two n-tiles (o0: dims 8i.., o1: dims 8(i+1)..) of V's B fragments from
// shared memory by ldmatrix .x4 .trans. `row`: this lane's row address, matrix lane / 8 = (keys +0..7, tile i),
// (keys +8..15, i), (keys +0..7, i+1), (keys +8..15, i+1) (attention_mma.cu, attention_dec_mma.cu).
__device__ __forceinline__ void pv_two_tiles(float* o0, float* o1, const u32* pa, const __half* row) {
    u32 b[4];
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                 : "r"((u32)__cvta_generic_to_shared(row)));
    mma16816(o0, pa, b[0], b[1]);
    mma16816(o1, pa, b[2], b[3]);
}
