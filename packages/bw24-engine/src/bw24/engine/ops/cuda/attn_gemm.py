"""Prefill attention as tensor-core GEMMs (CudaOps: BW24_ATTN_GEMM=auto|1|0; kernels/attention_gemm.cu).

The flash-style prefill kernel (kernels/attention_prefill.cu) runs on CUDA cores: 10.9 of the 8B's 44 ms
of pp512 kernel time on the H200 (a7b0f07), and most of pp4096, where it grows with T^2. Here, per chunk
of Tc query rows (sized so that its scores fit a scratch budget) and per kv head, cuBLAS computes
S = Q K^T over the live keys, a kernel masks and normalizes each row into probabilities P, and cuBLAS
computes O = P V. A kv head's G query heads are one GEMM (their rows are consecutive in the head-major
q and P layouts). q and P are each split into a float16 high and low part, and the cache is float16, so
each product is two GEMMs with fp32 accumulation and fp32-like accuracy.

Launches per chunk: the q split, 2 + 2 GEMMs, the softmax rows, the output gather. Host-side, this
needs the count of cached keys (`n_keys`, kv.n_past) so that no device value is read; without it, or
with a float32 cache, attention stays on the flash kernel.
"""

from __future__ import annotations

import math

import numpy as np

from .prefill import _ONE, _ZERO, OP_N, OP_T  # host alpha / beta kept alive, cublasOperation_t
from .prefill import gemm_ex as _gemm  # (a module name of its own: the CPU plan tests stand in for it)

# Scratch for one chunk's scores (float32) and probabilities (two float16 planes): 8 bytes per
# (head, query row, key). 128 MiB holds the 8B's (32 heads) 512 query rows against 1k keys at once, and
# keeps its pp4096 peak (6.18 GiB at ddfc1fd) within llama.cpp's 5.80 GiB + 10%.
SCORE_BUDGET = 128 << 20
_ALIGN = 8  # key-axis leading dimension in elements: 16-byte rows for the float16 P planes


# CudaOps' "auto" default (BW24_ATTN_GEMM unset) takes this path for a query chunk of at least this many
# score elements (heads x queries x keys): the 8B's pp512 (32 x 512 x 512 = 2^23) ran 15% faster on it,
# the 0.6B's pp512 (2^22, host-bound) 14% slower (H200, 0d45897). Long contexts pass it from 1k keys on.
MIN_SCORES = 1 << 23


def worth_it(T: int, H: int, n_keys: int) -> bool:
    """The auto rule: enough attention work per chunk that the GEMMs beat the flash kernel."""
    return H * T * n_keys >= MIN_SCORES


def usable(q, k_cache, v_cache, n_keys) -> bool:
    """This path applies: a float16 cache, a host key count that covers the T queries."""
    T = q.shape[0]
    return (n_keys is not None and T <= n_keys <= k_cache.shape[1] and k_cache.dtype == np.float16
            and v_cache.dtype == np.float16 and q.dtype == np.float32)


def chunk_rows(T: int, H: int, n_keys: int, budget: int | None = None) -> int:
    """Query rows per chunk: all T if the scores of every head against n_keys keys fit the budget
    (SCORE_BUDGET, read at call time), else the most that do (a multiple of 16, at least 16)."""
    budget = SCORE_BUDGET if budget is None else budget
    ld = _ld(n_keys)
    rows = budget // (8 * H * ld)
    if rows >= T:
        return T
    return max(16, rows // 16 * 16)


def _ld(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def attention(ops, q, k_cache, v_cache, pos, *, scale, softcap, window, out, n_keys: int) -> None:
    """Causal GQA attention of T > 16 queries at positions n_keys - T .. n_keys - 1 (pos[0] on the
    device is n_keys - T; the mask reads it there, the GEMM sizes come from n_keys)."""
    T, H, D = q.shape
    Hkv, S, Dv = v_cache.shape
    G = H // Hkv
    assert H % Hkv == 0 and k_cache.shape == (Hkv, S, D) and out.shape == (T, H, Dv)
    assert all(a.flags.c_contiguous for a in (q, k_cache, v_cache, out))
    Tc = chunk_rows(T, H, n_keys)
    ld_max = _ld(n_keys)
    s = ops._buf("ag_s", H * Tc * ld_max)
    ph, pl = ops._buf("ag_ph", H * Tc * ld_max, np.float16), ops._buf("ag_pl", H * Tc * ld_max, np.float16)
    qh, ql = ops._buf("ag_qh", H * Tc * D, np.float16), ops._buf("ag_ql", H * Tc * D, np.float16)
    o = ops._buf("ag_o", H * Tc * Dv)
    split = ops._k("attention_gemm.cu", "attn_q_split")
    soft = ops._k("attention_gemm.cu", "attn_softmax_rows")
    gather = ops._k("attention_gemm.cu", "attn_o_gather")
    p0 = n_keys - T
    for t0 in range(0, T, Tc):
        tc = min(Tc, T - t0)
        nk = p0 + t0 + tc  # keys 0 .. nk - 1: the chunk's last query sits at nk - 1
        ld = _ld(nk)
        n = tc * H * D
        ops._launch(split, (min(math.ceil(n / 256), 4096),), 256,
                    (q[t0:t0 + tc], np.int32(tc), np.int32(H), np.int32(D), qh, ql))
        # scores: for kv head hk, C[nk, G tc] (ld) = K_hk[nk, D] . q rows [G tc, D]^T; low part first
        for part, beta in ((ql, _ZERO), (qh, _ONE)):
            _gemm(ops, OP_T, OP_N, nk, G * tc, D, k_cache.data.ptr, D, S * D, part.data.ptr, D, G * tc * D,
                  s.data.ptr, ld, G * tc * ld, Hkv, _ONE, beta)
        ops._launch(soft, (H * tc,), 256,
                    (s, np.int32(tc), np.int32(ld), np.int32(nk), pos, np.int32(t0), np.float32(scale),
                     np.float32(softcap or 0.0), np.int32(int(window or 0)), ph, pl))
        # O rows [G tc, Dv] of kv head hk: C[Dv, G tc] (ld Dv) = V_hk^T[Dv, nk] . P rows^T[nk, G tc]
        for part, beta in ((pl, _ZERO), (ph, _ONE)):
            _gemm(ops, OP_N, OP_N, Dv, G * tc, nk, v_cache.data.ptr, Dv, S * Dv, part.data.ptr, ld, G * tc * ld,
                  o.data.ptr, Dv, G * tc * Dv, Hkv, _ONE, beta)
        m = tc * H * Dv
        ops._launch(gather, (min(math.ceil(m / 256), 4096),), 256,
                    (o, np.int32(tc), np.int32(H), np.int32(Dv), out[t0:t0 + tc]))


__all__ = ["MIN_SCORES", "SCORE_BUDGET", "attention", "chunk_rows", "usable", "worth_it"]
