// readback.cu: the decode step's sampled token written into mapped pinned host memory (ops/cuda/readback.py
// TokenRing, BW24_TOKEN_RING=1). Launched last inside the captured step, it takes the place of the device -> host
// copy the host otherwise queues between two replays (PinnedReads): the token reaches the host inside the graph,
// and nothing but an event sits between one replay and the next.
//
// Formula: ring[pos[0] mod n] = tok[0], nothing computed.
// Thread-to-data mapping: one block of one warp; thread 0 moves the token (the others idle: the launch is its cost).
// Bytes: 8 read from device memory, 4 written across PCIe into the host's slot, a step.
#include "common.cuh"

// ring[pos[0] % n] = tok[0]: one slot per position, so a step queued past the one the host waits for writes
// another slot. pos is the cache position the step leaves (kv.n_past after the host's reserve).
extern "C" __global__ void publish_token(const int* __restrict__ tok, const int* __restrict__ pos, int* ring, int n) {
    PDL_OPEN();
    if (threadIdx.x == 0) {
        ring[pos[0] % n] = tok[0];
        __threadfence_system();  // the host may read the slot as soon as the step's event is done
    }
}
