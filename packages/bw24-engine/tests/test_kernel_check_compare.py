"""kernel_check.compare on outputs that hold -inf on purpose (FR-Spec's expand: -inf at every dropped id).

At 441fef8 the H200 ran the 3 `frspec expand` cases red (maxdiff=inf) with a correct kernel: compare called any
non-finite output red, so those cases could never be green. Now a non-finite value counts only where the
reference holds the very same one; these tests pin both halves of that rule on the expand's own CPU twin.
"""

import numpy as np
import pytest
from bw24.engine.kernel_check import compare
from bw24.engine.ops.ref import RefOps
from bw24.engine.spec.device import DeviceIO
from bw24.engine.spec.frspec import inverse_ids


def _expand(T=3, V=1000, N=77, shift=0, seed=5):
    rng = np.random.default_rng(seed)
    ids = rng.permutation(V)[:N]
    sub = rng.standard_normal((T, N)).astype(np.float32)
    want = np.empty((T, V), np.float32)
    DeviceIO(RefOps()).expand_cols(sub, inverse_ids(ids, V), want)
    got = np.empty_like(want)
    DeviceIO(RefOps()).expand_cols(sub, inverse_ids((ids + shift) % V, V), got)  # shift: the canary's wrong ids
    return got, want


def test_an_exact_expand_with_its_minus_inf_is_green():
    got, want = _expand()
    assert np.isneginf(want).sum() == 3 * (1000 - 77)  # the case does hold -inf
    r = compare("frspec expand", "exact", got, want)
    assert r.maxdiff == 0.0 and r.rel == 0.0 and r.ok


def test_kept_logits_one_id_later_are_red():
    """The planted expand (BW24_PLANTED_EXPAND): each kept logit one id later."""
    got, want = _expand(shift=1)
    r = compare("frspec expand", "exact", got, want)
    assert r.maxdiff == float("inf") and not r.ok


@pytest.mark.parametrize("bad", [-np.inf, np.inf, np.nan])
def test_a_non_finite_value_where_the_reference_is_finite_is_red(bad):
    ref = np.arange(12, dtype=np.float32).reshape(3, 4)
    got = ref.copy()
    got[1, 2] = bad
    assert not compare("x", "exact", got, ref).ok


@pytest.mark.parametrize("bad", [0.0, np.inf, np.nan])
def test_a_minus_inf_the_kernel_did_not_write_is_red(bad):
    got, want = _expand()
    i = np.argwhere(np.isneginf(want))[0]
    got[tuple(i)] = bad
    assert not compare("frspec expand", "exact", got, want).ok


def test_a_finite_difference_beside_the_minus_inf_still_counts():
    got, want = _expand()
    i = np.argwhere(np.isfinite(want))[0]
    got[tuple(i)] += 1e-3
    r = compare("frspec expand", "exact", got, want)
    assert not r.ok and 0 < r.maxdiff < 2e-3


def test_nan_is_red_even_where_the_reference_has_nan():
    """Only an identical infinity passes: NaN is never a value a case means to check."""
    ref = np.array([1.0, np.nan, 3.0])
    assert not compare("x", "exact", ref.copy(), ref).ok
