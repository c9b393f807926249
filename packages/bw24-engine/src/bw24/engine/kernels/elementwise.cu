// elementwise.cu: gated activations, residual add, softcap, device-side position counter.
//
// Formulas:
// glu:      out[i] = act(gate[i]) * up[i]; act 0 = silu g/(1+e^-g), 1 = gelu_tanh
//           0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))). out may alias gate.
// add:      out[i] = x[i] + y[i].     softcap: x[i] = c * tanh(x[i] / c).
// advance:  pos[0] += n (one thread), so a graph-replayed step moves its own position on.
// Thread-to-data mapping: one thread per element (grid-stride). Bytes: 12 per element (glu, add).
#include "common.cuh"

extern "C" __global__ void glu(const float* gate, const float* __restrict__ up, float* out, i64 n, int act) {
    PDL_OPEN();
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        out[i] = glu_act(gate[i], act) * up[i];
    }
}

extern "C" __global__ void add(const float* x, const float* y, float* out, i64 n) {
    PDL_OPEN();
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        out[i] = x[i] + y[i];
}

extern "C" __global__ void softcap_inplace(float* x, i64 n, float c) {
    PDL_OPEN();
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x)
        x[i] = c * tanhf(x[i] / c);
}

extern "C" __global__ void advance(int* pos, int n) {
    PDL_OPEN();
    if (threadIdx.x == 0 && blockIdx.x == 0) pos[0] += n;
}
