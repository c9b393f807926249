"""The run-gen gate's decision rule (VerifyResult, Drift), independent of any model."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.engine.engine import Drift, VerifyResult, nmse


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


# ---- int8-activation drift (engine.Drift) ----------------------------------------------------------
def test_nmse_is_scale_free_and_zero_on_equality():
    r = np.array([1.0, -2.0, 3.0, 0.5])
    assert nmse(r, r) == 0.0
    assert nmse(r + 0.1, r) == pytest.approx(nmse(10 * r + 1.0, 10 * r), rel=1e-12)


@pytest.mark.parametrize("x_top,err,ok", [
    (0, 1e-3, True),  # same top-1, small drift
    (0, 0.5, False),  # same top-1 but drift far outside the int8 class (the canary's size)
    (1, 1e-3, True),  # top-1 moved between two logits closer than the drift itself
    (2, 1e-3, False),  # top-1 moved past a margin the drift cannot explain
])
def test_drift_rule(x_top, err, ok):
    ref = np.zeros(64)
    ref[:3] = [5.0, 4.999, 3.0]
    ref[3:] = np.linspace(-3, 3, 61)
    rng = np.random.default_rng(0)
    x = ref + err * rng.standard_normal(64)
    x[x_top] = x.max() + 1e-6  # x's own top-1
    d = Drift.of(x, ref)
    assert d.argmax == x_top and d.ref_argmax == 0
    assert d.ok is ok, d


def test_gate_line_and_rule_with_int8_drifts():
    good = Drift(3, 3, 0.05, 1e-4, 0.0)
    bad = Drift(3, 3, 2.0, 0.1, 0.0)  # a dropped 32-column group measured 1e-2 .. 0.2 (README)
    r = VerifyResult(3, 3, 1e-5, 0.0, 1e-2, (good, good))
    assert r.ok and r.line().endswith("  MATCH") and "int8-activation nmse: prefill=0.0001 decode=0.0001" in r.line()
    for q8 in ((good, bad), (bad, good)):
        r = VerifyResult(3, 3, 1e-5, 0.0, 1e-2, q8)
        assert not r.ok and r.line().endswith("  MISMATCH")
    assert not VerifyResult(3, 3, 0.5, 0.0, 1e-2, (good, good)).ok  # the exact half still gates
