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
KEY_TILE = 64  # keys a tile (AM_KT)
HEAD_DIMS = (64, 128)  # D = Dv instances compiled (kernels.COMPILE_SET); the kernel takes multiples of 16 <= 128
# Key splits (the default since b6232b5; BW24_ATTN_MMA_SPLIT=0 turns them off): a chunk of fewer than
# SPLIT_BELOW blocks a SM splits its keys so that ~SPLIT_TARGET blocks a SM run. Why: the 0.6B's 512-token
# chunks (16 row tiles x 8 kv heads = 128 blocks of 4 warps, one a SM) walk their whole causal range one block
# at a time; its pp4096 ran 52,699 tok/s in 512-token chunks against 88,966 in 2048-token ones (4x the blocks)
# and 91,194 for pp512 (H200, 4ba8617), the chunks getting dearer with depth. With the splits (b6232b5):
# pp4096 66,452 (52,650 without, the same session), pp512 96,256 (91,205). At most SPLIT_MAX splits (their partials: SPLIT_MAX x
# T x H x Dv float32, 33.5 MB for the 0.6B at 512 tokens), each at least SPLIT_MIN_KEYS keys.
SPLIT_BELOW, SPLIT_TARGET, SPLIT_MAX, SPLIT_MIN_KEYS = 2, 4, 8, 256


def split_plan(T: int, G: int, Hkv: int, S: int, n_sm: int) -> int:
    """kspan (keys a split, a multiple of KEY_TILE) for T queries of G heads a kv head over a cache of S
    positions; 0: one pass. From the cache's capacity S, not the chunk's position: one captured prefill
    graph serves every position (a tile whose keys sit in one split then runs as without splits)."""
    base = math.ceil(T * G / BLOCK_ROWS) * Hkv
    if base >= SPLIT_BELOW * n_sm:
        return 0
    ns = min(SPLIT_MAX, math.ceil(SPLIT_TARGET * n_sm / base), S // SPLIT_MIN_KEYS)
    if ns <= 1:
        return 0
    return math.ceil(math.ceil(S / ns) / KEY_TILE) * KEY_TILE


def usable(q, k_cache, v_cache) -> bool:
    """A float16 cache, float32 queries, head dims the kernel has an instance for."""
    D, Dv = q.shape[2], v_cache.shape[2]
    return (k_cache.dtype == np.float16 and v_cache.dtype == np.float16 and q.dtype == np.float32
            and D == Dv and D in HEAD_DIMS and q.shape[1] % k_cache.shape[0] == 0)


def instances() -> tuple[str, ...]:
    return tuple(f"attn_mma<{d},{d}>" for d in HEAD_DIMS) + tuple(f"attn_mma_combine<{d}>" for d in HEAD_DIMS)


def attention(ops, q, k_cache, v_cache, pos, *, scale, softcap, window, out, kspan: int = 0) -> None:
    """Causal attention of the T queries at positions pos[0] .. pos[0] + T - 1 (keys already cached).
    kspan > 0: keys in splits of kspan (split_plan), merged by attn_mma_combine."""
    T, H, D = q.shape
    Hkv, S, Dv = v_cache.shape
    G = H // Hkv
    assert k_cache.shape == (Hkv, S, D) and out.shape == (T, H, Dv)
    assert all(a.flags.c_contiguous for a in (q, k_cache, v_cache, out))
    assert kspan >= 0 and kspan % KEY_TILE == 0, f"kspan {kspan}: a multiple of {KEY_TILE}"
    ns = math.ceil(S / kspan) if kspan else 1
    po = ops._buf("attn_mma_po", ns * T * H * Dv) if kspan else np.uintp(0)
    pml = ops._buf("attn_mma_ml", ns * T * H * 2) if kspan else np.uintp(0)
    ops._launch(ops._k("attention_mma.cu", f"attn_mma<{D},{Dv}>"), (math.ceil(T * G / BLOCK_ROWS), Hkv, ns), 128,
                (q, k_cache, v_cache, pos, np.int32(T), np.int32(H), np.int32(G), np.int32(S), np.float32(scale),
                 np.float32(softcap or 0.0), np.int32(int(window or 0)), out, np.int32(kspan), po, pml))
    if kspan:
        ops._launch(ops._k("attention_mma.cu", f"attn_mma_combine<{Dv}>"), (math.ceil(T * H / 4),), 128,
                    (po, pml, pos, np.int32(T), np.int32(H), np.int32(G), np.int32(int(window or 0)),
                     np.int32(kspan), out))
