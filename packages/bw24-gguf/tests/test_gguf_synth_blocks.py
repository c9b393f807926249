"""Random quant blocks: finite, centred, scaled to sigma; Q4_K scale packing read back independently."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.gguf import dequantize
from bw24.gguf.synth.quantize.blocks import pack_k4_scales, random_tensor_bytes
from bw24.gguf.synth.quantize.mix import tensor_qtype, use_more_bits
from gguf import GGMLQuantizationType as Q


@pytest.mark.parametrize("qt", [Q.Q8_0, Q.Q4_0, Q.Q5_0, Q.Q4_K, Q.Q6_K, Q.F16, Q.F32])
def test_random_blocks_are_well_formed(qt):
    sigma = 0.02
    raw = random_tensor_bytes(np.random.default_rng(5), qt, 64 * 1024, sigma)
    x = dequantize(raw, qt, (64, 1024))
    assert np.isfinite(x).all()
    assert abs(x.mean()) < 0.15 * sigma
    assert 0.8 * sigma < x.std() < 1.25 * sigma
    assert np.abs(x).max() < 12 * sigma


def test_q8_0_never_minus_128():
    raw = random_tensor_bytes(np.random.default_rng(0), Q.Q8_0, 32 * 4096, 0.1).reshape(-1, 34)
    assert raw[:, 2:].view(np.int8).min() == -127


def test_pack_k4_scales_reads_back():
    rng = np.random.default_rng(1)
    sc = rng.integers(0, 64, (50, 8))
    m = rng.integers(0, 64, (50, 8))
    q = pack_k4_scales(sc, m).astype(int)
    for j in range(8):  # ggml get_scale_min_k4, written out independently
        if j < 4:
            s, mm = q[:, j] & 63, q[:, j + 4] & 63
        else:
            s = (q[:, j + 4] & 0xF) | ((q[:, j - 4] >> 6) << 4)
            mm = (q[:, j + 4] >> 4) | ((q[:, j] >> 6) << 4)
        np.testing.assert_array_equal(s, sc[:, j])
        np.testing.assert_array_equal(mm, m[:, j])


def test_use_more_bits_like_llama_cpp():
    # n=8: first eighth (0), last eighth (7), and (i - 1) % 3 == 2 -> 3, 6
    assert [i for i in range(8) if use_more_bits(i, 8)] == [0, 3, 6, 7]
    assert [i for i in range(36) if use_more_bits(i, 36)] == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 31, 32, 33, 34, 35]


def test_q4_k_m_mix_rules():
    w = (1024, 1024)
    assert tensor_qtype("blk.0.attn_q.weight", w, "q4_k_m", 8, False) == Q.Q4_K
    assert tensor_qtype("blk.0.attn_v.weight", w, "q4_k_m", 8, False) == Q.Q6_K
    assert tensor_qtype("blk.1.attn_v.weight", w, "q4_k_m", 8, False) == Q.Q4_K
    assert tensor_qtype("blk.3.ffn_down.weight", w, "q4_k_m", 8, False) == Q.Q6_K
    assert tensor_qtype("blk.3.ffn_down_exps.weight", (8, *w), "q4_k_m", 8, False) == Q.Q6_K
    assert tensor_qtype("blk.3.ffn_up.weight", w, "q4_k_m", 8, False) == Q.Q4_K
    assert tensor_qtype("output.weight", w, "q4_k_m", 8, False) == Q.Q6_K
    assert tensor_qtype("token_embd.weight", w, "q4_k_m", 8, False) == Q.Q4_K
    assert tensor_qtype("token_embd.weight", w, "q4_k_m", 8, True) == Q.Q6_K  # tied: it is the output
    assert tensor_qtype("blk.1.attn_v.weight", w, "q4_k_m", 8, False, n_expert=8) == Q.Q8_0
    assert tensor_qtype("blk.0.ffn_gate_inp.weight", (8, 1024), "q4_k_m", 8, False) == Q.F32
    assert tensor_qtype("blk.0.attn_norm.weight", (1024,), "q8_0", 8, False) == Q.F32
    assert tensor_qtype("output.weight", w, "q8_0", 8, False) == Q.Q8_0
    assert tensor_qtype("output.weight", w, "q4_0", 8, False) == Q.Q6_K
    assert tensor_qtype("blk.0.ffn_down.weight", w, "q4_0", 8, False) == Q.Q4_0
    assert tensor_qtype("blk.0.ffn_down.weight", w, "f16", 8, False) == Q.F16
    assert tensor_qtype("blk.1.ffn_up.weight", (64, 640), "q4_k_m", 8, False) == Q.Q5_0  # 640 % 256 != 0
    assert tensor_qtype("blk.0.ffn_down.weight", (64, 640), "q4_k_m", 8, False) == Q.Q8_0  # Q6_K -> Q8_0
    assert tensor_qtype("blk.1.ffn_up.weight", (64, 48), "q4_k_m", 8, False) == Q.F16
