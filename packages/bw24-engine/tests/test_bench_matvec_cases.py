"""benchmarks/test_bench_matvec_gpu.py's host-side parts (the suite itself needs a GPU and skips without one): it
covers every type of the q8 decode path at the 8B's four projection shapes, its copies span the L2 twice, and
its figures are the weight's bytes over one matvec's event time against the measured ceiling."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def suite(helpers):
    return helpers.bench_module("test_bench_matvec_gpu")


def test_every_q8_type_at_every_8b_projection(suite):
    from bw24.engine.ops.cuda.launch import Q8_TYPES

    assert set(suite.QTYPES) == set(Q8_TYPES)
    assert {(n, k) for _, n, k in suite.SHAPES_8B} == {(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)}
    ids = [c.id for c in suite.CASES]
    assert len(ids) == len(set(ids)) == 7 * 4 and "Q6_K-down-4096x12288" in ids


def test_copies_span_twice_the_l2_and_figures_are_bytes_over_time(suite):
    for nbytes in (9_437_184, 56_623_104, 107_000_000):
        c = suite.copies_for(nbytes)
        assert c * nbytes > suite.L2_SPAN  # every byte from HBM
        assert c == 4 or (c - 2) * nbytes < suite.L2_SPAN  # and no more copies than that takes (4 at least)
    assert suite.copies_for(1) == 400
    # 9.4 MB in 4 us is 2,359 GB/s: 52.0% of a 4.54 TB/s ceiling; no ceiling, no percentage
    assert suite.figures(4.0, 9_437_184, 4.54e12) == {"us": 4.0, "gbs": 2359.3, "pct_of_hbm_read": 52.0}
    assert suite.figures(4.0, 9_437_184, None)["pct_of_hbm_read"] is None
