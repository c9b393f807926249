"""Timing arithmetic and sizing rules (hand-computed expectations)."""

from __future__ import annotations

import pytest
from bw24.probe.measure import GiB, Timing, gbs, stream_buffer_bytes, tflops


def test_rates_by_hand():
    assert gbs(4.46e9, 1.0) == pytest.approx(4460.0)        # 4.46 GB in 1 ms = 4.46 TB/s
    assert tflops(2 * 8192**3, 1.4) == pytest.approx(785.4, rel=1e-3)
    with pytest.raises(ValueError):
        gbs(1, 0.0)


def test_median_and_spread():
    t = Timing((3.0, 1.0, 2.0, 10.0, 2.0))
    assert t.median_ms == 2.0
    assert t.spread == pytest.approx((10.0 - 1.0) / 2.0)


def test_stream_buffer_is_many_times_l2_and_fits():
    l2 = 60 << 20
    n = stream_buffer_bytes(l2, 140 * GiB)
    assert n == 2 * GiB and n >= 8 * l2
    big_l2 = 512 << 20                                      # a future GPU with a huge L2: 8x wins
    assert stream_buffer_bytes(big_l2, 400 * GiB) == 8 * big_l2
    assert stream_buffer_bytes(l2, 4 * GiB) == 512 << 20    # capped at free/8
    with pytest.raises(MemoryError, match="L2"):
        stream_buffer_bytes(l2, 256 << 20)
