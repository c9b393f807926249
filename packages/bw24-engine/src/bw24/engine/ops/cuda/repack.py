"""GGUF blocks -> aligned planes for the CUDA kernels (NumPy, runs at load time, no GPU needed).

The layouts are documented in kernels/quant.cuh. The point: a 32-column group of a 4/5/6-bit
weight becomes one 16-byte-aligned nibble chunk (one vector load), with its scales in planes of
their own, instead of GGUF's 18..210-byte blocks that only allow 2-byte loads.
`reconstruct()` decodes the planes the way the kernels do, so a CPU test can prove the repack lossless.

Shape legend: N rows (outputs), K columns (inputs), G = K/32 groups, B = K/256 superblocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as Q

FMT = {Q.F32: 0, Q.F16: 1, Q.BF16: 2, Q.Q8_0: 3, Q.Q4_0: 4, Q.Q4_1: 5, Q.Q5_0: 6, Q.Q4_K: 7, Q.Q5_K: 8,
       Q.Q6_K: 9}
SUPPORTED = tuple(FMT)


class UnsupportedWeightError(ValueError):
    """A tensor type or shape the CUDA kernels do not handle."""


@dataclass(frozen=True)
class Planes:
    qtype: Q
    fmt: int
    n: int
    k: int
    planes: dict[str, np.ndarray] = field(hash=False)  # "a".."d" -> host arrays (absent = unused)

    @property
    def nbytes(self) -> int:
        return sum(int(p.nbytes) for p in self.planes.values())


def _blocks(raw: np.ndarray, qt: Q, n: int, k: int) -> np.ndarray:
    bs, ts = GGML_QUANT_SIZES[qt]
    return np.ascontiguousarray(raw).view(np.uint8).reshape(n * (k // bs), ts)


def _f16_bits(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view(np.uint16).reshape(b.shape[:-1])


def _pack_nibbles(q: np.ndarray, n: int, k: int) -> np.ndarray:
    """Codes q [n, k] (low 4 bits used) -> [n, k/2], byte j of group g = q[32g+j] | q[32g+16+j] << 4."""
    g = q.reshape(n, k // 32, 2, 16) & 0xF
    return (g[:, :, 0, :] | (g[:, :, 1, :] << 4)).astype(np.uint8).reshape(n, k // 2)


def _kquant_scales(sc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ggml get_scale_min_k4 for all 8 sub-blocks: 12 packed bytes -> (scale [nb, 8], min [nb, 8])."""
    sc = sc.astype(np.uint8)
    d = np.empty(sc.shape[:-1] + (8,), np.uint8)
    m = np.empty_like(d)
    d[:, :4] = sc[:, 0:4] & 63
    m[:, :4] = sc[:, 4:8] & 63
    d[:, 4:] = (sc[:, 8:12] & 0xF) | ((sc[:, 0:4] >> 6) << 4)
    m[:, 4:] = (sc[:, 8:12] >> 4) | ((sc[:, 4:8] >> 6) << 4)
    return d, m


def repack(raw: np.ndarray, qtype, shape: tuple[int, ...]) -> Planes:
    """Raw GGUF tensor bytes of `shape` ([N, K] or stacked [X, N, K], rows flattened) -> Planes."""
    qt = Q(int(qtype))
    if qt not in FMT:
        raise UnsupportedWeightError(f"no CUDA matvec for {qt.name}; supported: {[t.name for t in SUPPORTED]}")
    k = int(shape[-1])
    n = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    if k % 32:
        raise UnsupportedWeightError(f"{qt.name} weight {tuple(shape)}: row length {k} is not a multiple of 32")
    if qt in (Q.Q4_K, Q.Q5_K, Q.Q6_K) and k % 256:
        raise UnsupportedWeightError(f"{qt.name} weight {tuple(shape)}: row length {k} is not a multiple of 256")
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    G = k // 32
    P: dict[str, np.ndarray] = {}
    if qt in (Q.F32, Q.F16, Q.BF16):
        P["a"] = raw.view({Q.F32: np.float32, Q.F16: np.uint16, Q.BF16: np.uint16}[qt]).reshape(n, k)
    elif qt == Q.Q8_0:
        b = _blocks(raw, qt, n, k)
        P["a"] = b[:, 2:].copy().view(np.int8).reshape(n, k)
        P["c"] = _f16_bits(b[:, :2]).reshape(n, G)
    elif qt in (Q.Q4_0, Q.Q4_1, Q.Q5_0):
        b = _blocks(raw, qt, n, k)
        P["a"] = b[:, -16:].copy().reshape(n, k // 2)  # GGUF's nibble order already is ours
        if qt == Q.Q4_1:
            P["c"] = np.ascontiguousarray(b[:, :4]).view(np.uint32).reshape(n, G)
        else:
            P["c"] = _f16_bits(b[:, :2]).reshape(n, G)
        if qt == Q.Q5_0:
            P["b"] = np.ascontiguousarray(b[:, 2:6]).view(np.uint32).reshape(n, G)
    elif qt in (Q.Q4_K, Q.Q5_K):
        b = _blocks(raw, qt, n, k)
        nb = b.shape[0]
        qs = b[:, -128:].reshape(nb, 4, 32)
        q = np.empty((nb, 4, 2, 32), np.uint8)
        q[:, :, 0, :] = qs & 0xF
        q[:, :, 1, :] = qs >> 4
        if qt == Q.Q5_K:
            qh = b[:, 16:48]  # [nb, 32]
            bits = (qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1  # [nb, 8, 32]
            q |= (bits.reshape(nb, 4, 2, 32) << 4).astype(np.uint8)
            hb = bits.reshape(nb * 8, 32).astype(np.uint64)
            P["b"] = (hb << np.arange(32, dtype=np.uint64)).sum(axis=1).astype(np.uint32).reshape(n, G)
        q = q.reshape(n, k)
        P["a"] = _pack_nibbles(q, n, k)
        sc, mn = _kquant_scales(b[:, 4:16])
        P["c"] = (sc.astype(np.uint16) | (mn.astype(np.uint16) << 8)).reshape(n, G)
        P["d"] = np.ascontiguousarray(b[:, :4]).view(np.uint32).reshape(n, k // 256)
    elif qt == Q.Q6_K:
        b = _blocks(raw, qt, n, k)
        nb = b.shape[0]
        ql = b[:, :128].reshape(nb, 2, 64)
        qh = b[:, 128:192].reshape(nb, 2, 32)
        q = np.empty((nb, 2, 4, 32), np.uint8)
        q[:, :, 0] = (ql[:, :, :32] & 0xF) | (((qh >> 0) & 3) << 4)
        q[:, :, 1] = (ql[:, :, 32:] & 0xF) | (((qh >> 2) & 3) << 4)
        q[:, :, 2] = (ql[:, :, :32] >> 4) | (((qh >> 4) & 3) << 4)
        q[:, :, 3] = (ql[:, :, 32:] >> 4) | (((qh >> 6) & 3) << 4)
        q = q.reshape(n, k)
        P["a"] = _pack_nibbles(q, n, k)
        hi = ((q >> 4) & 3).reshape(n * G, 32).astype(np.uint64)
        P["b"] = (hi << (2 * np.arange(32, dtype=np.uint64))).sum(axis=1, dtype=np.uint64).reshape(n, G)
        sc = b[:, 192:208].reshape(n, G, 2).astype(np.uint16)
        P["c"] = sc[..., 0] | (sc[..., 1] << 8)
        P["d"] = _f16_bits(b[:, 208:210]).reshape(n, k // 256)
    P = {name: np.ascontiguousarray(a) for name, a in P.items()}
    return Planes(qt, FMT[qt], n, k, P)


def _codes(p: Planes) -> np.ndarray:
    a = p.planes["a"].reshape(p.n, p.k // 32, 16)
    q = np.concatenate([a & 0xF, a >> 4], axis=-1).astype(np.int32)  # [n, G, 32]
    j = np.arange(32, dtype=np.uint64)
    if p.qtype in (Q.Q5_0, Q.Q5_K):
        q |= (((p.planes["b"][..., None].astype(np.uint64) >> j) & 1) << 4).astype(np.int32)
    if p.qtype == Q.Q6_K:
        q |= (((p.planes["b"][..., None] >> (2 * j)) & 3) << 4).astype(np.int32)
    return q


def reconstruct(p: Planes) -> np.ndarray:
    """Decode planes to float32 [n, k] exactly as kernels/quant.cuh does (for lossless-repack tests)."""
    qt, n, k, P = p.qtype, p.n, p.k, p.planes
    h = lambda u: u.astype(np.uint16).view(np.float16).astype(np.float32)  # noqa: E731
    if qt == Q.F32:
        return P["a"].copy()
    if qt == Q.F16:
        return h(P["a"])
    if qt == Q.BF16:
        return (P["a"].astype(np.uint32) << 16).view(np.float32)
    if qt == Q.Q8_0:
        return (h(P["c"])[..., None] * P["a"].reshape(n, k // 32, 32).astype(np.float32)).reshape(n, k)
    q = _codes(p).astype(np.float32)
    if qt in (Q.Q4_0, Q.Q5_0):
        w = h(P["c"])[..., None] * (q - (8 if qt == Q.Q4_0 else 16))
    elif qt == Q.Q4_1:
        c = P["c"]
        w = h(c & 0xFFFF)[..., None] * q + h(c >> 16)[..., None]
    elif qt in (Q.Q4_K, Q.Q5_K):
        dd = np.repeat(P["d"], 8, axis=1)
        s = h(dd & 0xFFFF) * (P["c"] & 0xFF).astype(np.float32)
        m = h(dd >> 16) * (P["c"] >> 8).astype(np.float32)
        w = s[..., None] * q - m[..., None]
    else:  # Q6_K
        d = np.repeat(h(P["d"]), 8, axis=1)
        sc = P["c"]
        s0 = d * (sc & 0xFF).astype(np.uint8).view(np.int8).astype(np.float32)
        s1 = d * (sc >> 8).astype(np.uint8).view(np.int8).astype(np.float32)
        s = np.concatenate([np.repeat(s0[..., None], 16, -1), np.repeat(s1[..., None], 16, -1)], -1)
        w = s * (q - 32)
    return w.astype(np.float32).reshape(n, k)


def random_raw(qtype, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Random but well-formed GGUF bytes of type qtype for an [n, k] tensor: every bit pattern of the
    quants, finite fp16 scales of realistic size. Used by kernel_check and the repack tests."""
    qt = Q(int(qtype))
    if qt == Q.F32:
        return rng.standard_normal((n, k)).astype(np.float32).view(np.uint8).reshape(-1)
    if qt == Q.F16:
        return rng.standard_normal((n, k)).astype(np.float16).view(np.uint8).reshape(-1)
    if qt == Q.BF16:
        return (rng.standard_normal((n, k)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(
            np.uint8).reshape(-1)
    bs, ts = GGML_QUANT_SIZES[qt]
    b = rng.integers(0, 256, size=(n * k // bs, ts), dtype=np.uint8)

    def f16(lo, hi, count):
        return rng.uniform(lo, hi, size=count).astype(np.float16).view(np.uint8).reshape(count, 2)

    nb = b.shape[0]
    if qt in (Q.Q8_0, Q.Q4_0, Q.Q5_0):
        b[:, 0:2] = f16(0.001, 0.02, nb)
    elif qt == Q.Q4_1:
        b[:, 0:2] = f16(0.001, 0.02, nb)
        b[:, 2:4] = f16(-0.1, 0.0, nb)
    elif qt in (Q.Q4_K, Q.Q5_K):
        b[:, 0:2] = f16(0.0001, 0.001, nb)
        b[:, 2:4] = f16(0.0001, 0.002, nb)
    elif qt == Q.Q6_K:
        b[:, 208:210] = f16(0.0001, 0.001, nb)
    return b.reshape(-1)
