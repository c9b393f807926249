"""kernel_check's "moe decode q8" cases route with a real router's logit size (kernel_cases.ROUTER_REAL).

At 6eb32f3 one full kernel-check run on the H200 turned `moe decode q8 Q4_K/Q4_K/Q4_K T=5` red at rel 2.76e-5 (its
tolerance 2e-5); 153 seeds of that case alone put its `out` comparison up to 1.67e-5 and its `g` under 3e-7
(`evidence/kernel_check_h200_6eb32f3*.log`, `moe_t5_seeds_h200_8411e99.log`). The mechanism, here on the CPU: the
reference routes on float64 logits, the device on fp32 ones, and with unit router weights over the cases' inputs
the logits have a standard deviation of hundreds, so their ~1e-4 difference moves a token's softmax weights by
that much relative. The routing weights' own error (as a share of an output made of k experts' rows of equal size)
is measured against another fp32 summation order of the same logits.
"""

from __future__ import annotations

import numpy as np
from bw24.engine.kernel_cases import ROUTER_REAL, router_weight
from bw24.engine.kernel_cases_q8 import _x
from bw24.engine.ops.ref import route

T, X, E, K = 5, 16, 2048, 8  # the red case's shape


def _weights_error(router_std, seed: int) -> float:
    rng = np.random.default_rng(seed)
    w = router_weight("router:", rng, X, E, router_std).raw.view(np.float32).reshape(X, E)  # as moe_weights builds it
    x = _x(rng, T, E)
    exact = route(x.astype(np.float64) @ w.astype(np.float64).T, K, True)
    fp32 = route((x @ w.T).astype(np.float32), K, True)
    if any(not np.array_equal(a[0], b[0]) for a, b in zip(exact, fp32, strict=True)):
        return float("nan")  # a flipped pick (not the tail measured here)
    num = sum(float(np.sum((a[1] - b[1]) ** 2)) for a, b in zip(exact, fp32, strict=True))
    return (num / sum(float(np.sum(a[1] ** 2)) for a in exact)) ** 0.5


def test_moe_q8_cases_routing_weights_stay_far_under_the_tolerance():
    errs = np.array([_weights_error(ROUTER_REAL, s) for s in range(300)])
    assert np.isfinite(errs).all() and errs.max() < 2e-5 / 5, errs.max()


def test_unit_router_weights_reach_the_tolerance():
    """Canary: the old unit router (router_std None) puts the routing weights' error alone past half the 2e-5
    tolerance on some of the same seeds."""
    errs = np.array([_weights_error(None, s) for s in range(300)])
    assert np.nanmax(errs) > 1e-5, np.nanmax(errs)


def test_kernel_names_sees_the_launches_built_with_their_own_defines():
    """kernel_cases_q8.kernel_names records every kernel a call asks for, those asked through _k and those the q8
    launchers ask through _k_with with a launch's own defines (at def966d it watched _k alone, and the `norm ahead`
    cases, whose qmv8_na / qmv8_3n launches go through _k_with, went red on the H200 at aee9d2f); the backend's
    method is its own again afterwards."""
    from bw24.engine.kernel_cases_q8 import kernel_names

    class Fake:
        def _k(self, file, name):
            return self._k_with(file, name, ())

        def _k_with(self, file, name, extra):
            return (file, name, extra)

    cu = Fake()
    names = kernel_names(cu, lambda: (cu._k("qmatvec_q8.cu", "quantize_x"),
                                      cu._k_with("qmatvec_q8.cu", "qmv8_na<7,4,4,1>", (("QMV8_DECODE_LOADS", 4),))))
    assert names == ["quantize_x", "qmv8_na<7,4,4,1>"]
    assert "_k_with" not in vars(cu) and cu._k("a.cu", "k") == ("a.cu", "k", ())
