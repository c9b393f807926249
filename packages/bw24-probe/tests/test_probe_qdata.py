"""Random weights for the matvec bench decode to finite, non-degenerate values (gguf as oracle)."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.probe.qdata import LAYOUTS, random_weight_bytes
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize


@pytest.mark.parametrize("qtype", sorted(LAYOUTS))
def test_layouts_match_ggml_and_decode_finite(qtype):
    qt = GGMLQuantizationType[qtype]
    assert LAYOUTS[qtype][:2] == GGML_QUANT_SIZES[qt]
    raw = random_weight_bytes(qtype, 4, 512, np.random.default_rng(0))
    w = dequantize(raw, qt).reshape(4, 512)
    assert np.isfinite(w).all()
    assert np.count_nonzero(w) > w.size // 2 and np.std(w) > 0


def test_bad_width_is_rejected():
    with pytest.raises(ValueError, match="multiple of its block of 256"):
        random_weight_bytes("Q4_K", 2, 100, np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown quant type"):
        random_weight_bytes("Q3_X", 2, 256, np.random.default_rng(0))


def test_random_tensor_quacks_like_a_tensorinfo():
    """The engine's RefOps.load_weight accepts it and dequantizes the same values gguf does."""
    from bw24.engine.ops.ref import RefOps
    from bw24.probe.qdata import random_tensor

    t = random_tensor("Q4_K", 8, 256, "probe.q4k", np.random.default_rng(1))
    w = RefOps().load_weight(t)
    np.testing.assert_array_equal(w.data, dequantize(t.raw, GGMLQuantizationType.Q4_K).reshape(8, 256))
