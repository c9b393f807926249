"""CPU: repacking GGUF blocks into the kernels' planes is lossless for every supported type
(decoding the planes the way kernels/quant.cuh does gives bit-identical reference dequantization)."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.engine.ops.cuda.repack import SUPPORTED, UnsupportedWeightError, random_raw, reconstruct, repack
from bw24.gguf import dequantize
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
