"""kernel_check's "moe router fused" reference cases can see a wrong lower pick (the GPU canary's premise).

At e6bec2b the GPU pytest's planted route (route_token's k-th pick replaced by the first, its weight kept) left the
three reference cases green: their unit-scale routers gave logits of standard deviation sqrt(E), so the top expert
took all but ~e^-17 of the weight and no lower pick could move the output past the matmul tolerance. The cases now
scale the router to a real router's logits (moe_weights' router_std=kernel_cases.ROUTER_REAL). On the CPU reference: the same
planted route moves each case's output far past the tolerance at the new scale, and did not at the old one.
"""

from __future__ import annotations

import numpy as np
import pytest
from bw24.engine.kernel_cases import ROUTER_REAL, moe_weights
from bw24.engine.kernel_check import TOL, compare
from bw24.engine.ops.ref import RefOps, route
from gguf.constants import GGMLQuantizationType as Q


class PlantedRouteRef(RefOps):
    """moe.cu's BW24_PLANTED_ROUTE on the reference: the last pick's expert replaced by the first's, weight kept."""

    def _route(self, logits, n_used, norm_weights):
        out = []
        for sel, wts in route(logits, n_used, norm_weights):
            sel = sel.copy()
            if n_used > 1:
                sel[-1] = sel[0]
            out.append((sel, wts))
        return out


# the four reference cases' (T, X, k, norm, E, expert type), experts narrowed to F = 256 (the routing's
# sensitivity is the router's: its logits' size follows E, not F); the last, past moe_router's prefetched
# columns (new after 5107205)
CASES = [(1, 128, 8, True, 256, Q.Q4_K), (5, 16, 8, True, 2048, Q.Q4_K), (3, 10, 3, False, 544, Q.Q8_0),
         (2, 16, 4, True, 2560, Q.Q4_K)]


def _rel(T, X, k, norm, E, qt, router_std, seed):
    rng = np.random.default_rng(seed)
    tis = moe_weights("t:", rng, X, E, 256, qt, qt, router_std=router_std)
    x = rng.standard_normal((T, E)).astype(np.float32)
    outs = []
    for ops in (RefOps(), PlantedRouteRef()):
        out = np.empty((T, E), np.float32)
        ops.moe(x, *(ops.load_weight(t) for t in tis), n_used=k, norm_weights=norm, act="silu", out=out)
        outs.append(out)
    return compare("planted", "matmul", outs[1], outs[0]).rel


@pytest.mark.parametrize("T,X,k,norm,E,qt", CASES)
def test_a_wrong_lower_pick_shows_at_a_real_routers_scale(T, X, k, norm, E, qt):
    for seed in (0, 1, 2):
        rel = _rel(T, X, k, norm, E, qt, ROUTER_REAL, seed)
        assert rel > 100 * TOL["matmul"], (seed, rel)


def test_at_the_old_unit_scale_it_did_not():
    """Why the canary stayed green at e6bec2b (the construction the cases no longer use): the two k = 8 cases never
    showed the wrong pick; the k = 3 one showed it on some draws only (seed 0: rel 5e-3, seed 1: 1e-7)."""
    for case in CASES[:2]:
        for seed in (0, 1, 2):
            assert _rel(*case, None, seed) < TOL["matmul"], (case, seed)
    assert _rel(*CASES[2], None, 1) < TOL["matmul"] < _rel(*CASES[2], None, 0)


@pytest.mark.parametrize("T,X,k,norm,E,qt", CASES)
def test_the_prefetch_canary_shows_in_every_reference_case(T, X, k, norm, E, qt):
    """moe.cu's BW24_PLANTED_ROUTERPF (moe_router's prefetch reads the next row's weights, the last row row 0's)
    on the reference: every token's logits shift by one expert, so its picks change and the output moves far past
    the tolerance in each of the four cases (the GPU canary's premise, test_cuda_gpu.py)."""
    import dataclasses

    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        tis = moe_weights("t:", rng, X, E, 256, qt, qt, router_std=ROUTER_REAL)
        shifted = [dataclasses.replace(tis[0], raw=np.roll(tis[0].raw.reshape(X, -1), -1, axis=0).reshape(tis[0].raw.shape)),
                   *tis[1:]]
        x = rng.standard_normal((T, E)).astype(np.float32)
        outs = []
        for ws in (tis, shifted):
            ops, out = RefOps(), np.empty((T, E), np.float32)
            ops.moe(x, *(ops.load_weight(t) for t in ws), n_used=k, norm_weights=norm, act="silu", out=out)
            outs.append(out)
        assert compare("planted", "matmul", outs[1], outs[0]).rel > 100 * TOL["matmul"], seed
