"""RMSNorm and RoPE(+qk-norm) launch geometry (kernels/norm.cu, kernels/rope.cu).

Block sizes and values per thread are functions of the row length alone, never of the number of
rows: a row's summation order is the same in a T-row verify step and a T = 1 decode step.
"""

from __future__ import annotations

import math

import numpy as np

from . import q8
from .kernels import NORM_NV, kv_elem  # vectors per thread held in registers (rmsnorm_reg<VW, NV>)
from .weights import NULL

NORM_THREADS = 512  # at most 512 threads per row (norm.cu launch bounds); more values per thread beyond
ROPE_SLOTS = 4  # rope.cu RS: (pair) slots per thread


def rmsnorm_shape(K: int, aligned: bool) -> tuple[int, int, int] | None:
    """rmsnorm_reg's (VW, NV, threads) for rows of K floats (rms_row.cuh's mapping: moe_router_norm takes the same);
    aligned: every row starts on 16 bytes. None: rows longer than 512 * 16 vectors."""
    vw = 4 if K % 4 == 0 and aligned else 1
    n = K // vw
    for nv in NORM_NV:
        threads = 32 * math.ceil(n / nv / 32)
        if threads <= NORM_THREADS:
            return vw, nv, threads
    return None


def rmsnorm_config(K: int, aligned: bool) -> tuple[str, int]:
    """(kernel name, threads) for rows of K floats; aligned: every row starts on 16 bytes."""
    shape = rmsnorm_shape(K, aligned)
    if shape is None:
        return "rmsnorm", 1024  # the strided fallback
    vw, nv, threads = shape
    return f"rmsnorm_reg<{vw},{nv}>", threads


def rmsnorm(cu, x, w, eps, *, out, add=None) -> None:
    """Decode/verify rows (T <= 16) of K >= Q8_MIN_K on the register kernel also leave out's int8
    quantization in the q8 scratch (rmsnorm_reg with xq), so the q8 matvec reading out skips its quantize_x
    launch (ops/cuda/q8.py). Narrower rows feed f32-path matvecs (launch.default_path) except a
    vocabulary head, so they keep rmsnorm_reg: at 313c45e, when every row was fused, qwen3-0.6b
    (K = 1024) decoded 8.6% slower on the H200 (964 -> 881 tok/s; the fusion is the suspect, not yet
    re-measured)."""
    K = x.shape[-1]
    assert w.shape == (K,) and out.shape == x.shape and x.flags.c_contiguous and out.flags.c_contiguous
    if add is not None:
        assert add.shape == x.shape and add.flags.c_contiguous
    arrs = (x, w, out) if add is None else (x, w, out, add)
    name, block = rmsnorm_config(K, all(a.data.ptr % 16 == 0 for a in arrs))
    args = (x, NULL if add is None else add, w, out, np.int32(K), np.float32(eps))
    if name == "rmsnorm":  # the strided fallback: no fused quantization
        cu._launch(cu._k("norm.cu", name), (x.size // K,), block, args)
        return
    rows = out.reshape(-1, K)
    fuse = name.startswith("rmsnorm_reg<4,") and q8.feeds_q8(cu, rows)
    xq, xs = q8.buffers(cu, *rows.shape) if fuse else (NULL, NULL)
    cu._launch(cu._k("norm.cu", name), (x.size // K,), block, (*args, xq, xs))
    if fuse:
        q8.mark_ready(cu, rows)


def rope_block(D: int, Dv: int) -> int:
    """Threads per (token, head) block: one D/2 slot each up to 128 threads, then up to RS slots."""
    return min(128, max(32, 32 * math.ceil(max(D // 2, Dv) / 32)))


def rope_table(cu, base: float, freq_scale: float, rope_dim: int, n_pos: int):
    """rope.cu's (cos a, sin a) float32 pairs [n_pos, rope_dim / 2] for positions 0 .. n_pos - 1, built on the
    device once per (base, freq_scale, rope_dim) and grown with the cache (rope_kv and the attention's rope
    read it). Built by the first, eager, step: a (re)build allocates, which graph capture does not allow."""
    key = f"rope_tab:{float(base)!r}:{float(freq_scale)!r}:{int(rope_dim)}"
    half = rope_dim // 2
    built = cu._rope_tabs.get(key, 0)
    tab = cu._buf(key, max(n_pos, built) * half * 2)
    if built < n_pos:
        if cu._capturing:
            raise RuntimeError(f"rope table {key} for {n_pos} positions first needed inside graph capture: "
                               "run the step eagerly first")
        n = n_pos * half
        cu._launch(cu._k("rope.cu", "rope_table"), (min(math.ceil(n / 256), 4096),), 256,
                   (tab, np.int32(n_pos), np.int32(rope_dim), np.float64(base), np.float64(freq_scale)))
        cu._rope_tabs[key] = n_pos
    return tab


def rope_kv(cu, q, k, v, pos, k_cache, v_cache, *, base, freq_scale, rope_dim, mode, q_norm=None, k_norm=None,
            norm_eps=None) -> None:
    T, H, D = q.shape
    Hkv, S, Dv = v_cache.shape
    assert k.shape == (T, Hkv, D) and v.shape == (T, Hkv, Dv) and k_cache.shape == (Hkv, S, D)
    assert rope_dim % 2 == 0 and rope_dim <= D and D % 2 == 0
    for nw in (q_norm, k_norm):
        assert nw is None or nw.shape == (D,)
    block = rope_block(D, Dv)
    if D // 2 > ROPE_SLOTS * block:
        raise ValueError(f"rope_kv: head dim {D} exceeds {2 * ROPE_SLOTS * block} (rope.cu RS)")
    cu._launch(cu._k("rope.cu", f"rope_kv<{kv_elem(k_cache, v_cache)}>"), (T, H + Hkv), block,
               (q, k, v, pos, k_cache, v_cache, np.int32(H), np.int32(Hkv), np.int32(D), np.int32(Dv), np.int32(S),
                np.int32(rope_dim), np.int32(mode == "neox"), rope_table(cu, base, freq_scale, rope_dim, S),
                NULL if q_norm is None else q_norm, NULL if k_norm is None else k_norm,
                np.float32(norm_eps or 0.0)))
