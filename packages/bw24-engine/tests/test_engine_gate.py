"""The run-gen gate's decision rule (VerifyResult), independent of any model."""

from __future__ import annotations

import pytest
from bw24.engine.engine import VerifyResult


@pytest.mark.parametrize("pa,pb,maxdiff,margin,ok,tie", [
    (5, 5, 1e-4, 0.0, True, False),  # same argmax, tiny diff
    (5, 5, 0.5, 0.0, False, False),  # same argmax but logits far apart: a real mismatch
    (5, 7, 2e-3, 1e-3, True, True),  # argmax flipped inside a near tie
    (5, 7, 8e-3, 0.2, False, False),  # flipped with a clear margin (inconsistent diffs): mismatch
])
def test_verify_rule(pa, pb, maxdiff, margin, ok, tie):
    r = VerifyResult(pa, pb, maxdiff, margin, tolerance=1e-2)
    assert r.ok is ok and r.near_tie is tie
    line = r.line()
    assert line.startswith(f"verify-prefill argmax={pa}  decode argmax={pb}  logit maxdiff=")
    assert ("  MATCH" in line) is ok and ("MISMATCH" in line) is (not ok)
    assert ("near tie" in line) is tie
