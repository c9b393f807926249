"""GGUF blocks -> aligned planes for the CUDA kernels (NumPy, runs at load time, no GPU needed).

The layouts are documented in kernels/quant.cuh. The point: a 32-column group of a 4/5/6-bit
weight becomes one 16-byte-aligned nibble chunk (one vector load), with its scales in planes of
their own, instead of GGUF's 18..210-byte blocks that only allow 2-byte loads.
`reconstruct()` decodes the planes the way the kernels do, so a CPU test can prove the repack lossless.

Shape legend: N rows (outputs), K columns (inputs), G = K/32 groups, B = K/256 superblocks.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
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


# The multi-byte views below (uint16..uint64 over GGUF bytes, and the bit tricks on them) take the host to be
# little endian, as GGUF is and x86-64 / arm64 hosts are.
_FLOATS = (Q.F32, Q.F16, Q.BF16)
_V16 = np.dtype("V16")  # 16 opaque bytes: half a GGUF nibble chunk, or one of our nibble groups, moved as one item

# repack_parallel: row chunks of about CHUNK_BYTES of GGUF bytes keep a chunk's temporaries in the core's cache
# (measured ~2x faster than whole tensors on one thread, 12288x4096) and are what the threads share out
# (much smaller chunks lose again: each costs ~40 us of NumPy call overhead, under the GIL).
# Only the K-quants compute enough to gain (the other types are strided copies at 5..10 GB/s on one core, which
# chunks plus the copy into the shared planes made slower); tensors under PARALLEL_MIN_BYTES take a few ms.
PARALLEL_TYPES = (Q.Q4_K, Q.Q5_K, Q.Q6_K)
PARALLEL_MIN_BYTES = 8 << 20
CHUNK_BYTES = 2 << 20
THREADS_ENV = "BW24_REPACK_THREADS"  # N >= 1 repack threads (1 = serial, still chunked); default min(16, CPUs)


def _blocks(raw: np.ndarray, qt: Q, n: int, k: int) -> np.ndarray:
    bs, ts = GGML_QUANT_SIZES[qt]
    return np.ascontiguousarray(raw).view(np.uint8).reshape(n * (k // bs), ts)


def _row_bytes(qt: Q, k: int) -> int:
    """GGUF bytes of one K-long row (rows are whole blocks, so a range of rows is a contiguous byte range)."""
    bs, ts = GGML_QUANT_SIZES[qt]
    return k // bs * ts


def _field(b: np.ndarray, start: int, stop: int, dtype=np.uint8) -> np.ndarray:
    """Bytes start:stop of every block of b [nb, ts] -> contiguous [nb, (stop - start) / itemsize] of dtype.

    The field is gathered as one opaque item per block: one long copy loop, where slicing it as bytes costs
    one short NumPy inner loop per block (several times slower for 2..32-byte fields)."""
    f = np.ascontiguousarray(b[:, start:stop].view(np.dtype(f"V{stop - start}"))[:, 0])
    return f.view(dtype).reshape(b.shape[0], -1)


def _nibble_groups(chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GGUF nibble chunks -> our nibble groups, without unpacking to one code per byte.

    A K-quant chunk is 32 bytes whose low nibbles hold 32 consecutive codes c[0..31] and whose high nibbles
    the next 32, c[32..63]; `chunks` [..., 2] holds its halves A = bytes 0..15 and B = bytes 16..31 as 16-byte
    items. Our group byte j = c[j] | c[16+j] << 4 (quant.cuh), so
    lo (the group of c[0..31]) = (A & 0xF) | (B << 4) and hi (c[32..63]) = (A >> 4) | (B & 0xF0).
    A and B are first gathered into contiguous arrays so the arithmetic runs in long vector loops; returns
    (lo, hi) as [...] 16-byte items."""
    a = np.ascontiguousarray(chunks[..., 0]).view(np.uint8)
    b = np.ascontiguousarray(chunks[..., 1]).view(np.uint8)
    lo = a & 0xF
    lo |= b << 4  # uint8 shift: B's high nibble falls off
    hi = a >> 4
    hi |= b & 0xF0
    return lo.view(_V16), hi.view(_V16)


def _swap_fields(x: np.ndarray, steps: tuple[tuple[int, int], ...]) -> np.ndarray:
    """x ^ t ^ (t << s) with t = (x ^ (x >> s)) & mask per step: swaps the bits under `mask` with those s above
    (the delta swaps of a bit-matrix transpose, Hacker's Delight 7-3), on whole uint64 words."""
    for shift, mask in steps:
        s = np.uint64(shift)
        t = ((x >> s) ^ x) & np.uint64(mask)
        x = x ^ t ^ (t << s)
    return x


def _q5k_high_bits(qh: np.ndarray) -> np.ndarray:
    """Q5_K qh as uint64 [nb, 4] -> plane "b" [nb, 8] uint32: bit j of group i = 5th bit of code 32i+j = bit i
    of qh byte j.

    Word m holds qh bytes 8m..8m+7; as an 8x8 bit matrix (row = byte) its transpose has in byte i the bits
    8m..8m+7 of group i's uint32 (little endian, as everywhere in this file); a byte shuffle assembles them."""
    nb = qh.shape[0]
    t = _swap_fields(qh, ((7, 0x00AA00AA00AA00AA), (14, 0x0000CCCC0000CCCC), (28, 0x00000000F0F0F0F0)))
    return np.ascontiguousarray(t.view(np.uint8).reshape(nb, 4, 8).transpose(0, 2, 1)).view(np.uint32)[..., 0]


def _q6k_high_bits(qh: np.ndarray) -> np.ndarray:
    """Q6_K qh as uint64 [nb, 8] -> plane "b" [nb, 8] uint64: bits 2j..2j+1 of group 4h+s = high 2 bits of its
    code j = bits 2s..2s+1 of qh byte 32h+j.

    Each 32-bit half of a word (qh bytes 32h+4m..32h+4m+3) as a 4x4 matrix of 2-bit fields (row = byte): its
    transpose has in byte s the bits 8m..8m+7 of group 4h+s's uint64; a byte shuffle assembles them. (The old
    route built one uint64 per code and summed them: an n*k*8-byte temporary, 90% of the Q6_K repack time.)"""
    nb = qh.shape[0]
    t = _swap_fields(qh, ((6, 0x00CC00CC00CC00CC), (12, 0x0000F0F00000F0F0)))
    by = t.view(np.uint8).reshape(nb, 2, 8, 4).transpose(0, 1, 3, 2)  # [nb, h, s, m]
    return np.ascontiguousarray(by).view(np.uint64).reshape(nb, 8)


def _spread_bytes(x: np.ndarray) -> np.ndarray:
    """uint32 bytes b0 b1 b2 b3 -> uint64 bytes b0 0 b1 0 b2 0 b3 0."""
    x = x.astype(np.uint64)
    x = (x | (x << np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
    return (x | (x << np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)


def _kquant_scale_plane(w: np.ndarray) -> np.ndarray:
    """The 12 packed scale bytes of Q4_K / Q5_K as uint32 [nb, 3] -> plane "c" [nb, 8] uint16 = scale | min << 8.

    ggml's get_scale_min_k4 for all 8 sub-blocks, 4 at a time (one byte lane each): sub-blocks 0..3 are the
    low 6 bits of bytes 0..3 (scale) / 4..7 (min); 4..7 take their low nibbles from bytes 8..11 and bits 4..5
    from the top 2 bits of bytes 0..3 / 4..7."""
    w0, w1, w2 = w[:, 0], w[:, 1], w[:, 2]
    low6, low4, bits45, two = np.uint32(0x3F3F3F3F), np.uint32(0x0F0F0F0F), np.uint32(0x30303030), np.uint32(2)
    c = np.empty((w.shape[0], 2), np.uint64)  # little-endian uint16s: byte 2i = scale i, byte 2i+1 = min i
    c[:, 0] = _spread_bytes(w0 & low6) | (_spread_bytes(w1 & low6) << np.uint64(8))
    d_hi = (w2 & low4) | ((w0 >> two) & bits45)
    m_hi = ((w2 >> np.uint32(4)) & low4) | ((w1 >> two) & bits45)
    c[:, 1] = _spread_bytes(d_hi) | (_spread_bytes(m_hi) << np.uint64(8))
    return c.view(np.uint16)


def _check(qtype, shape: tuple[int, ...]) -> tuple[Q, int, int]:
    """(type, N, K) of a weight the kernels handle, else UnsupportedWeightError."""
    qt = Q(int(qtype))
    if qt not in FMT:
        raise UnsupportedWeightError(f"no CUDA matvec for {qt.name}; supported: {[t.name for t in SUPPORTED]}")
    k = int(shape[-1])
    n = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    if k % 32:
        raise UnsupportedWeightError(f"{qt.name} weight {tuple(shape)}: row length {k} is not a multiple of 32")
    if qt in (Q.Q4_K, Q.Q5_K, Q.Q6_K) and k % 256:
        raise UnsupportedWeightError(f"{qt.name} weight {tuple(shape)}: row length {k} is not a multiple of 256")
    return qt, n, k


def repack(raw: np.ndarray, qtype, shape: tuple[int, ...]) -> Planes:
    """Raw GGUF tensor bytes of `shape` ([N, K] or stacked [X, N, K], rows flattened) -> Planes."""
    qt, n, k = _check(qtype, shape)
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    return Planes(qt, FMT[qt], n, k, _repack_rows(raw, qt, n, k))


def repack_workers(workers: int | None = None) -> int:
    """Threads for repack_parallel: `workers` if given, else $BW24_REPACK_THREADS, else min(16, CPUs)."""
    if workers is None:
        env = os.environ.get(THREADS_ENV, "").strip()
        if not env:
            return min(16, os.cpu_count() or 1)
        workers = int(env) if env.isdigit() else 0
        if workers < 1:
            raise ValueError(f"{THREADS_ENV}={env!r}: expected an integer >= 1 (1 = serial repack)")
    if int(workers) < 1:
        raise ValueError(f"repack workers={workers!r}: expected >= 1")
    return int(workers)


def repack_parallel(raw: np.ndarray, qtype, shape: tuple[int, ...], workers: int | None = None, *,
                    min_bytes: int = PARALLEL_MIN_BYTES, chunk_bytes: int = CHUNK_BYTES) -> Planes:
    """repack() in contiguous row chunks, run on `workers` threads (NumPy releases the GIL in its array loops;
    1 = all chunks in the calling thread); the planes are bit-identical to repack()'s. Tensors under min_bytes
    and types outside PARALLEL_TYPES are repacked whole, as repack() does. workers: see repack_workers."""
    qt, n, k = _check(qtype, shape)
    workers = repack_workers(workers)
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    row = _row_bytes(qt, k)
    if qt not in PARALLEL_TYPES or n < 2 or raw.nbytes < min_bytes or raw.nbytes != n * row:
        return repack(raw, qt, shape)  # (a size mismatch fails there, as it always did)
    chunks = min(n, max(workers, -(-raw.nbytes // max(1, chunk_bytes))))
    bounds = [n * i // chunks for i in range(chunks + 1)]
    spans = list(zip(bounds[:-1], bounds[1:], strict=True))
    proto = _repack_rows(raw[:row], qt, 1, k)  # one row: every plane's dtype and row shape
    out = {name: np.empty((n,) + p.shape[1:], p.dtype) for name, p in proto.items()}

    def work(lo: int, hi: int) -> None:
        for name, p in _repack_rows(raw[lo * row:hi * row], qt, hi - lo, k).items():
            out[name][lo:hi] = p

    if workers == 1:
        for lo, hi in spans:
            work(lo, hi)
    else:
        with ThreadPoolExecutor(min(workers, chunks)) as pool:
            for f in [pool.submit(work, lo, hi) for lo, hi in spans]:
                f.result()  # re-raises a chunk's error
    return Planes(qt, FMT[qt], n, k, out)


def _repack_rows(raw: np.ndarray, qt: Q, n: int, k: int) -> dict[str, np.ndarray]:
    """The planes of n rows whose GGUF bytes are raw (1-D uint8); every plane is C-contiguous [n, ...]."""
    if qt in _FLOATS:
        P = {"a": raw.view({Q.F32: np.float32, Q.F16: np.uint16, Q.BF16: np.uint16}[qt]).reshape(n, k)}
    elif qt in (Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0):
        P = _legacy_planes(_blocks(raw, qt, n, k), qt, n, k)
    elif qt in (Q.Q4_K, Q.Q5_K):
        P = _q45k_planes(_blocks(raw, qt, n, k), qt, n, k)
    else:
        P = _q6k_planes(_blocks(raw, qt, n, k), n, k)
    return {name: np.ascontiguousarray(a) for name, a in P.items()}


def _legacy_planes(b: np.ndarray, qt: Q, n: int, k: int) -> dict[str, np.ndarray]:
    """Q8_0 / Q4_0 / Q4_1 / Q5_0 blocks [n*G, ts]: quants and scales are gathered out as they are."""
    G = k // 32
    if qt == Q.Q8_0:
        return {"a": _field(b, 2, 34, np.int8).reshape(n, k), "c": _field(b, 0, 2, np.uint16).reshape(n, G)}
    P = {"a": _field(b, b.shape[1] - 16, b.shape[1]).reshape(n, k // 2)}  # GGUF's nibble order already is ours
    if qt == Q.Q4_1:
        P["c"] = _field(b, 0, 4, np.uint32).reshape(n, G)
    else:
        P["c"] = _field(b, 0, 2, np.uint16).reshape(n, G)
    if qt == Q.Q5_0:
        P["b"] = _field(b, 2, 6, np.uint32).reshape(n, G)
    return P


def _q45k_planes(b: np.ndarray, qt: Q, n: int, k: int) -> dict[str, np.ndarray]:
    """Q4_K / Q5_K superblocks [nb, 144 | 176]: d, dmin (4 bytes), 12 scale bytes, [Q5_K: qh 32], qs 128.

    qs is 4 nibble chunks of 32 bytes (codes 64c..64c+31 low, 64c+32.. high), so chunk c becomes groups 2c
    and 2c+1 directly. Q5_K's 5th bits live only in plane "b": plane "a" is built the same for both."""
    nb, G, ts = b.shape[0], k // 32, b.shape[1]
    a = np.empty((nb, 4, 2, 16), np.uint8)  # [superblock, chunk c, group 2c | 2c+1, byte]
    groups = a.view(_V16)[..., 0]
    groups[:, :, 0], groups[:, :, 1] = _nibble_groups(b[:, ts - 128:].view(_V16).reshape(nb, 4, 2))
    P = {"a": a.reshape(n, k // 2)}
    if qt == Q.Q5_K:
        P["b"] = _q5k_high_bits(_field(b, 16, 48, np.uint64)).reshape(n, G)
    P["c"] = _kquant_scale_plane(_field(b, 4, 16, np.uint32)).reshape(n, G)
    P["d"] = _field(b, 0, 4, np.uint32).reshape(n, k // 256)
    return P


def _q6k_planes(b: np.ndarray, n: int, k: int) -> dict[str, np.ndarray]:
    """Q6_K superblocks [nb, 210]: ql 128, qh 64, 16 int8 scales, fp16 d.

    Each 128-code half h has 64 ql bytes = 2 nibble chunks (p = 0, 1): chunk p's low nibbles are the codes
    of group 4h+p, its high nibbles those of group 4h+2+p."""
    nb, G = b.shape[0], k // 32
    a = np.empty((nb, 2, 2, 2, 16), np.uint8)  # [superblock, half h, low | high nibbles, chunk p, byte]
    groups = a.view(_V16)[..., 0]
    groups[:, :, 0], groups[:, :, 1] = _nibble_groups(b[:, :128].view(_V16).reshape(nb, 2, 2, 2))
    return {"a": a.reshape(n, k // 2),
            "b": _q6k_high_bits(_field(b, 128, 192, np.uint64)).reshape(n, G),
            "c": _field(b, 192, 208, np.uint16).reshape(n, G),  # a group's two int8 scales as one uint16
            "d": _field(b, 208, 210, np.uint16).reshape(n, k // 256)}


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
