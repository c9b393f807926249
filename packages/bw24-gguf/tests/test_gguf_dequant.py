"""dequantize(): checked against hand-built blocks and an independent loop implementation of the
ggml block layouts (so the oracle that GPU kernels trust is itself checked)."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.gguf import GGUFError, GGUFFile, UnknownQuantTypeError, UnsupportedQuantTypeError, dequantize
from bw24.gguf.dequant import supported_types, tensor_nbytes
from gguf import GGMLQuantizationType as Q


def test_q8_0_hand_block(q8_0):
    scales = np.array([[0.25, -2.0]], np.float32)
    qs = np.concatenate([np.arange(-16, 16), np.full(32, 127)]).reshape(1, 64)
    out = dequantize(q8_0(scales, qs), Q.Q8_0, (1, 64))
    assert out.dtype == np.float32 and out.shape == (1, 64)
    np.testing.assert_array_equal(out[0, :32], 0.25 * np.arange(-16, 16))
    np.testing.assert_array_equal(out[0, 32:], np.full(32, -254.0))


def test_q4_0_hand_block():
    # d=0.5 then 16 bytes: byte j holds value j in the low nibble (element j) and 15-j high (element j+16)
    d = np.array([0.5], "<f2").view(np.uint8)
    nib = np.array([j | ((15 - j) << 4) for j in range(16)], np.uint8)
    out = dequantize(np.concatenate([d, nib]), Q.Q4_0, (32,))
    want = 0.5 * (np.concatenate([np.arange(16), 15 - np.arange(16)]) - 8)
    np.testing.assert_array_equal(out, want)


def _ref_q4_k(block: bytes) -> np.ndarray:
    d = float(np.frombuffer(block[0:2], "<f2")[0])
    dmin = float(np.frombuffer(block[2:4], "<f2")[0])
    sc = block[4:16]
    qs = block[16:144]

    def scale_min(j):
        if j < 4:
            return sc[j] & 63, sc[j + 4] & 63
        return (sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4), (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4)

    y = []
    for j in range(4):
        s1, m1 = scale_min(2 * j)
        s2, m2 = scale_min(2 * j + 1)
        chunk = qs[32 * j : 32 * j + 32]
        y += [d * s1 * (q & 0xF) - dmin * m1 for q in chunk]
        y += [d * s2 * (q >> 4) - dmin * m2 for q in chunk]
    return np.array(y)


def _ref_q6_k(block: bytes) -> np.ndarray:
    ql, qh = block[0:128], block[128:192]
    sc = np.frombuffer(block[192:208], np.int8).astype(int)
    d = float(np.frombuffer(block[208:210], "<f2")[0])
    y = np.zeros(256)
    for h in range(2):
        L, H, S = ql[64 * h :], qh[32 * h :], sc[8 * h :]
        for l in range(32):  # noqa: E741 (ggml names)
            i = l // 16
            y[128 * h + l] = d * S[i] * (((L[l] & 0xF) | ((H[l] & 3) << 4)) - 32)
            y[128 * h + l + 32] = d * S[i + 2] * (((L[l + 32] & 0xF) | (((H[l] >> 2) & 3) << 4)) - 32)
            y[128 * h + l + 64] = d * S[i + 4] * (((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32)
            y[128 * h + l + 96] = d * S[i + 6] * (((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32)
    return y


def _random_blocks(rng, qt, n_blocks, d_offsets):
    size = tensor_nbytes(qt, (256 * n_blocks,))
    raw = rng.integers(0, 256, size, dtype=np.uint8)
    per = size // n_blocks
    for b in range(n_blocks):  # finite, modest fp16 scales
        for off in d_offsets:
            raw[b * per + off : b * per + off + 2] = np.array([rng.uniform(-0.1, 0.1)], "<f2").view(np.uint8)
    return raw, per


@pytest.mark.parametrize("qt,ref,d_offsets", [(Q.Q4_K, _ref_q4_k, (0, 2)), (Q.Q6_K, _ref_q6_k, (208,))])
def test_k_quants_match_independent_reference(qt, ref, d_offsets):
    rng = np.random.default_rng(1)
    raw, per = _random_blocks(rng, qt, 3, d_offsets)
    out = dequantize(raw, qt, (3, 256))
    want = np.stack([ref(raw[b * per : (b + 1) * per].tobytes()) for b in range(3)])
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-7)


def test_canary_reference_detects_a_wrong_layout():
    # The reference above must be able to fail: swap Q4_K's nibble order and it must disagree.
    rng = np.random.default_rng(2)
    raw, per = _random_blocks(rng, Q.Q4_K, 1, (0, 2))
    swapped = raw.copy()
    swapped[16:144] = (raw[16:144] >> 4) | (raw[16:144] << 4)
    assert not np.allclose(dequantize(swapped, Q.Q4_K, (256,)), _ref_q4_k(raw.tobytes()))


def test_every_supported_type_gives_float32_of_shape():
    rng = np.random.default_rng(3)
    for qt in supported_types():
        shape = (2, 256)
        raw = rng.integers(0, 256, tensor_nbytes(qt, shape), dtype=np.uint8)
        with np.errstate(all="ignore"):  # random bytes include NaN/Inf fp16 scales
            out = dequantize(raw, qt, shape)
        assert out.dtype == np.float32 and out.shape == shape, qt.name


def test_real_tensor_types_round_trip_through_tensorinfo(smollm2_path):
    f = GGUFFile(smollm2_path)
    for name in ("blk.0.attn_q.weight", "token_embd.weight", "blk.0.attn_norm.weight"):
        t = f.tensor(name)
        x = t.dequantize()
        assert x.dtype == np.float32 and x.shape == t.shape and np.isfinite(x).all()
    # Q4_1 by hand on one block: d, m (fp16), 16 bytes of nibbles; x = d*q + m
    t = f.tensor("blk.0.attn_q.weight")
    blk = t.raw[:20]
    d, m = np.frombuffer(blk[:4].tobytes(), "<f2").astype(np.float32)
    q = np.concatenate([blk[4:] & 0xF, blk[4:] >> 4]).astype(np.float32)
    np.testing.assert_allclose(t.dequantize()[0, :32], d * q + m, rtol=1e-6)


def test_errors():
    with pytest.raises(UnknownQuantTypeError, match="id 99"):
        dequantize(np.zeros(34, np.uint8), 99, (32,))
    with pytest.raises(UnsupportedQuantTypeError, match="Q8_K"):
        dequantize(np.zeros(tensor_nbytes(Q.Q8_K, (256,)), np.uint8), Q.Q8_K, (256,))
    with pytest.raises(GGUFError, match="needs 34 bytes"):
        dequantize(np.zeros(33, np.uint8), Q.Q8_0, (32,))
    with pytest.raises(GGUFError, match="multiple of the block size"):
        dequantize(np.zeros(34, np.uint8), Q.Q8_0, (1, 30))
