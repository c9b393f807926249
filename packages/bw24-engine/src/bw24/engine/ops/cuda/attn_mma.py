"""Prefill attention (T > 16 queries) from a float16 KV cache on tensor cores: one flash-style kernel,
kernels/attention_mma.cu (mma.sync m16n8k16; q * scale and the probabilities in float16, sums and the
softmax state in float32; the precision of llama.cpp's flash attention). CudaOps takes it for the chunks
the GEMM attention's size rule picks (BW24_ATTN_MMA=auto, the default; 1: every chunk); float32 caches (and
so the gate's exact half) stay on attention_prefill.cu.

Shape legend: T queries, H / Hkv query / kv heads (G = H / Hkv), D / Dv key / value head dims, S cache length.
"""

from __future__ import annotations

import math

import numpy as np

BLOCK_ROWS = 64  # query rows (token, head) a block: 4 warps of 16 (kernels/attention_mma.cu)
HEAD_DIMS = (64, 128)  # D = Dv instances compiled (kernels.COMPILE_SET); the kernel takes multiples of 16 <= 128


def usable(q, k_cache, v_cache) -> bool:
    """A float16 cache, float32 queries, head dims the kernel has an instance for."""
    D, Dv = q.shape[2], v_cache.shape[2]
    return (k_cache.dtype == np.float16 and v_cache.dtype == np.float16 and q.dtype == np.float32
            and D == Dv and D in HEAD_DIMS and q.shape[1] % k_cache.shape[0] == 0)


def instances() -> tuple[str, ...]:
    return tuple(f"attn_mma<{d},{d}>" for d in HEAD_DIMS)


def attention(ops, q, k_cache, v_cache, pos, *, scale, softcap, window, out) -> None:
    """Causal attention of the T queries at positions pos[0] .. pos[0] + T - 1 (keys already cached)."""
    T, H, D = q.shape
    Hkv, S, Dv = v_cache.shape
    G = H // Hkv
    assert k_cache.shape == (Hkv, S, D) and out.shape == (T, H, Dv)
    assert all(a.flags.c_contiguous for a in (q, k_cache, v_cache, out))
    ops._launch(ops._k("attention_mma.cu", f"attn_mma<{D},{Dv}>"), (math.ceil(T * G / BLOCK_ROWS), Hkv), 128,
                (q, k_cache, v_cache, pos, np.int32(T), np.int32(H), np.int32(G), np.int32(S), np.float32(scale),
                 np.float32(softcap or 0.0), np.int32(int(window or 0)), out))
