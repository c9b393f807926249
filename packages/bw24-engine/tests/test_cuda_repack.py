"""CPU: repacking GGUF blocks into the kernels' planes is lossless for every supported type
(decoding the planes the way kernels/quant.cuh does gives bit-identical reference dequantization), and the fast
paths and the threaded repack_parallel give exactly the planes of the original formulas."""

from __future__ import annotations

import importlib
import os

import numpy as np
import pytest
from bw24.engine.ops.cuda.repack import SUPPORTED, UnsupportedWeightError, random_raw, reconstruct, repack
from bw24.gguf import dequantize
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as Q


def _k(qt):
    return 768 if qt in (Q.Q4_K, Q.Q5_K, Q.Q6_K) else 544


@pytest.mark.parametrize("qt", SUPPORTED, ids=lambda q: q.name)
def test_repack_is_bit_exact(qt):
    rng = np.random.default_rng(int(qt))
    n, k = 7, _k(qt)
    raw = random_raw(qt, n, k, rng)
    want = dequantize(raw, qt, (n, k))
    p = repack(raw, qt, (n, k))
    got = reconstruct(p)
    assert np.isfinite(want).all()
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    for name, a in p.planes.items():  # 16-byte loads need aligned rows
        assert a.flags.c_contiguous and (a.strides[0] % 16 == 0 or name != "a")


def test_stacked_experts_flatten_rows():
    rng = np.random.default_rng(1)
    raw = random_raw(Q.Q4_K, 3 * 5, 512, rng)
    p = repack(raw, Q.Q4_K, (3, 5, 512))
    assert (p.n, p.k) == (15, 512)
    np.testing.assert_array_equal(reconstruct(p), dequantize(raw, Q.Q4_K, (15, 512)))


@pytest.mark.parametrize("qt", [Q.Q4_1, Q.Q6_K, Q.Q5_K])
def test_reconstruct_sees_a_flipped_bit(qt):
    """Canary: the equality above is sensitive: one flipped quant bit in the planes shows up."""
    rng = np.random.default_rng(2)
    raw = random_raw(qt, 2, _k(qt), rng)
    p = repack(raw, qt, (2, _k(qt)))
    p.planes["a"][1, 3] ^= 0x10
    assert not np.array_equal(reconstruct(p), dequantize(raw, qt, (2, _k(qt))))


def test_unsupported_inputs_raise_typed_errors():
    with pytest.raises(UnsupportedWeightError, match="IQ2_XXS"):
        repack(np.zeros(66, np.uint8), Q.IQ2_XXS, (1, 256))
    with pytest.raises(UnsupportedWeightError, match="multiple of 32"):
        repack(np.zeros(40, np.uint8), Q.F32, (1, 10))
    with pytest.raises(UnsupportedWeightError, match="multiple of 256"):
        repack(np.zeros(144 * 2, np.uint8), Q.Q4_K, (3, 160))


# ---- fast paths and the threaded repack give exactly the old planes ------------------------------------------

R = importlib.import_module("bw24.engine.ops.cuda.repack")  # the module: the package re-exports the function


def _old_pack_nibbles(q, n, k):
    g = q.reshape(n, k // 32, 2, 16) & 0xF
    return (g[:, :, 0, :] | (g[:, :, 1, :] << 4)).astype(np.uint8).reshape(n, k // 2)


def _old_kquant_scales(sc):
    d = np.empty(sc.shape[:-1] + (8,), np.uint8)
    m = np.empty_like(d)
    d[:, :4], m[:, :4] = sc[:, 0:4] & 63, sc[:, 4:8] & 63
    d[:, 4:] = (sc[:, 8:12] & 0xF) | ((sc[:, 0:4] >> 6) << 4)
    m[:, 4:] = (sc[:, 8:12] >> 4) | ((sc[:, 4:8] >> 6) << 4)
    return d, m


def _old_planes(raw, qt, n, k):
    """The repack as it was before the fast paths (one code per byte, uint64 sums for the high bits)."""
    bs, ts = GGML_QUANT_SIZES[qt]
    b, G, P = raw.reshape(n * k // bs, ts), k // 32, {}
    f16 = lambda x: np.ascontiguousarray(x).view(np.uint16).reshape(x.shape[:-1])  # noqa: E731
    if qt in (Q.F32, Q.F16, Q.BF16):
        P["a"] = raw.view(np.float32 if qt == Q.F32 else np.uint16).reshape(n, k)
    elif qt == Q.Q8_0:
        P["a"], P["c"] = b[:, 2:].copy().view(np.int8).reshape(n, k), f16(b[:, :2]).reshape(n, G)
    elif qt in (Q.Q4_0, Q.Q4_1, Q.Q5_0):
        P["a"] = b[:, -16:].copy().reshape(n, k // 2)
        P["c"] = (np.ascontiguousarray(b[:, :4]).view(np.uint32) if qt == Q.Q4_1 else f16(b[:, :2])).reshape(n, G)
        if qt == Q.Q5_0:
            P["b"] = np.ascontiguousarray(b[:, 2:6]).view(np.uint32).reshape(n, G)
    elif qt in (Q.Q4_K, Q.Q5_K):
        nb = b.shape[0]
        qs = b[:, -128:].reshape(nb, 4, 32)
        q = np.stack([qs & 0xF, qs >> 4], axis=2)  # [nb, 4, 2, 32]
        if qt == Q.Q5_K:
            bits = (b[:, 16:48][:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & 1  # [nb, 8, 32]
            hb = bits.reshape(nb * 8, 32).astype(np.uint64)
            P["b"] = (hb << np.arange(32, dtype=np.uint64)).sum(axis=1).astype(np.uint32).reshape(n, G)
        P["a"] = _old_pack_nibbles(q.reshape(n, k), n, k)
        sc, mn = _old_kquant_scales(b[:, 4:16])
        P["c"] = (sc.astype(np.uint16) | (mn.astype(np.uint16) << 8)).reshape(n, G)
        P["d"] = np.ascontiguousarray(b[:, :4]).view(np.uint32).reshape(n, k // 256)
    elif qt == Q.Q6_K:
        nb = b.shape[0]
        ql, qh = b[:, :128].reshape(nb, 2, 64), b[:, 128:192].reshape(nb, 2, 32)
        q = np.empty((nb, 2, 4, 32), np.uint8)
        q[:, :, 0] = (ql[:, :, :32] & 0xF) | (((qh >> 0) & 3) << 4)
        q[:, :, 1] = (ql[:, :, 32:] & 0xF) | (((qh >> 2) & 3) << 4)
        q[:, :, 2] = (ql[:, :, :32] >> 4) | (((qh >> 4) & 3) << 4)
        q[:, :, 3] = (ql[:, :, 32:] >> 4) | (((qh >> 6) & 3) << 4)
        q = q.reshape(n, k)
        P["a"] = _old_pack_nibbles(q, n, k)
        hi = ((q >> 4) & 3).reshape(n * G, 32).astype(np.uint64)
        P["b"] = (hi << (2 * np.arange(32, dtype=np.uint64))).sum(axis=1, dtype=np.uint64).reshape(n, G)
        sc = b[:, 192:208].reshape(n, G, 2).astype(np.uint16)
        P["c"] = sc[..., 0] | (sc[..., 1] << 8)
        P["d"] = f16(b[:, 208:210]).reshape(n, k // 256)
    return {name: np.ascontiguousarray(a) for name, a in P.items()}


def _plane_diffs(got: dict, want: dict) -> list[str]:
    """Every way two plane dicts differ (keys, dtype, shape, C order, bytes); [] = bit-identical."""
    diffs = [f"keys {sorted(got)} != {sorted(want)}"] if got.keys() != want.keys() else []
    for name in sorted(got.keys() & want.keys()):
        g, w = got[name], want[name]
        if (g.dtype, g.shape) != (w.dtype, w.shape):
            diffs.append(f"{name}: {g.dtype}{g.shape} != {w.dtype}{w.shape}")
        elif not g.flags.c_contiguous:
            diffs.append(f"{name}: not C-contiguous")
        elif g.tobytes() != w.tobytes():
            rows = np.flatnonzero((g.reshape(len(g), -1) != w.reshape(len(w), -1)).any(axis=1))
            diffs.append(f"{name}: {rows.size} rows differ, first {rows[:4].tolist()}")
    return diffs


@pytest.mark.parametrize("qt", SUPPORTED, ids=lambda q: q.name)
@pytest.mark.parametrize("n", [1, 5])
def test_fast_paths_match_old_formulas(qt, n):
    k = 2 * _k(qt)  # two superblocks per row for the K-quants (row boundaries inside the words)
    raw = random_raw(qt, n, k, np.random.default_rng(10 * n + int(qt)))
    assert _plane_diffs(repack(raw, qt, (n, k)).planes, _old_planes(raw, qt, n, k)) == []


def test_fast_paths_match_old_formulas_on_saturated_bits():
    """All-ones and alternating bit patterns (every high bit and nibble at its extreme) for the bit tricks."""
    for qt in (Q.Q4_K, Q.Q5_K, Q.Q6_K):
        bs, ts = GGML_QUANT_SIZES[qt]
        for byte in (0xFF, 0xAA, 0x55, 0x00):
            raw = np.full(3 * 512 // bs * ts, byte, np.uint8)
            assert _plane_diffs(repack(raw, qt, (3, 512)).planes, _old_planes(raw, qt, 3, 512)) == [], (qt, byte)


def _chunk_calls(monkeypatch) -> list[int]:
    """Row counts of every _repack_rows call from here on (to see that a threaded repack really chunked)."""
    calls, inner = [], R._repack_rows
    monkeypatch.setattr(R, "_repack_rows", lambda raw, qt, n, k: calls.append(n) or inner(raw, qt, n, k))
    return calls


@pytest.mark.parametrize("qt", SUPPORTED, ids=lambda q: q.name)
def test_parallel_repack_is_the_serial_repack(qt, monkeypatch):
    """Every type through the chunked path (PARALLEL_TYPES widened), row counts that do not divide evenly."""
    monkeypatch.setattr(R, "PARALLEL_TYPES", SUPPORTED)
    calls = _chunk_calls(monkeypatch)
    k = _k(qt)
    for n, workers, chunk_rows in [(13, 1, 4), (13, 2, 1), (13, 3, 4), (7, 4, 3), (2, 5, 1), (37, 16, 5)]:
        raw = random_raw(qt, n, k, np.random.default_rng(n + workers))
        want = repack(raw, qt, (n, k)).planes
        calls.clear()
        p = R.repack_parallel(raw, qt, (n, k), workers, min_bytes=0, chunk_bytes=chunk_rows * R._row_bytes(qt, k))
        assert (p.qtype, p.fmt, p.n, p.k) == (qt, R.FMT[qt], n, k)
        assert _plane_diffs(p.planes, want) == [], (n, workers, chunk_rows)
        chunks = calls[1:]  # calls[0] is the one-row prototype
        # a chunk per worker at least, of at most chunk_bytes where that gives more, never an empty one
        assert sum(chunks) == n and len(chunks) == min(n, max(workers, -(-n // chunk_rows))), chunks


def test_parallel_repack_of_stacked_experts_and_default_types():
    rng = np.random.default_rng(3)
    raw = random_raw(Q.Q6_K, 3 * 9, 512, rng)
    p = R.repack_parallel(raw, Q.Q6_K, (3, 9, 512), 3, min_bytes=0, chunk_bytes=1)
    assert (p.n, p.k) == (27, 512) and _plane_diffs(p.planes, repack(raw, Q.Q6_K, (27, 512)).planes) == []
    raw = random_raw(Q.Q8_0, 9, 256, rng)  # not in PARALLEL_TYPES: the serial repack, same planes
    assert _plane_diffs(R.repack_parallel(raw, Q.Q8_0, (9, 256), 4, min_bytes=0).planes,
                        repack(raw, Q.Q8_0, (9, 256)).planes) == []


def test_plane_diffs_sees_a_wrong_chunk_assembly():
    """Canary: the comparison above is sensitive: two swapped chunks, one flipped bit, a changed dtype show up."""
    raw = random_raw(Q.Q4_K, 8, 512, np.random.default_rng(4))
    want = repack(raw, Q.Q4_K, (8, 512)).planes
    for name in want:
        bad = {**want, name: np.concatenate([want[name][2:4], want[name][0:2], want[name][4:]])}
        assert _plane_diffs(bad, want) == [f"{name}: 4 rows differ, first [0, 1, 2, 3]"]
    flipped = {**want, "a": want["a"].copy()}
    flipped["a"][5, 7] ^= 0x40
    assert _plane_diffs(flipped, want) == ["a: 1 rows differ, first [5]"]
    assert _plane_diffs({**want, "c": want["c"].view(np.int16)}, want) != []
    assert _plane_diffs({k: v for k, v in want.items() if k != "d"}, want) != []


def test_repack_threads_env(monkeypatch):
    monkeypatch.delenv(R.THREADS_ENV, raising=False)
    assert R.repack_workers() == min(16, os.cpu_count() or 1)
    monkeypatch.setenv("BW24_REPACK_THREADS", "3")
    assert R.repack_workers() == 3 and R.repack_workers(5) == 5  # an explicit count wins
    monkeypatch.setenv("BW24_REPACK_THREADS", "1")
    assert R.repack_workers() == 1
    raw = random_raw(Q.Q4_K, 4, 256, np.random.default_rng(5))
    for bad in ("0", "-2", "two", "1.5"):
        monkeypatch.setenv("BW24_REPACK_THREADS", bad)
        with pytest.raises(ValueError, match="BW24_REPACK_THREADS"):
            R.repack_workers()
        with pytest.raises(ValueError, match="BW24_REPACK_THREADS"):
            R.repack_parallel(raw, Q.Q4_K, (4, 256), min_bytes=0)
    with pytest.raises(ValueError, match="workers"):
        R.repack_workers(0)


def test_parallel_repack_raises_the_same_errors():
    for raw, qt, shape, msg in [(np.zeros(66, np.uint8), Q.IQ2_XXS, (1, 256), "IQ2_XXS"),
                                (np.zeros(40, np.uint8), Q.F32, (1, 10), "multiple of 32"),
                                (np.zeros(144 * 2, np.uint8), Q.Q4_K, (3, 160), "multiple of 256")]:
        with pytest.raises(UnsupportedWeightError, match=msg):
            R.repack_parallel(raw, qt, shape, 4, min_bytes=0)
