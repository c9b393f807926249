"""The run-gen gate on a mixture of experts (engine.routing_pin): the rounded half and the rounding alone run
on the routing the exact decode recorded, and the router is held to it. On the CPU, Int8RefOps with
moe_q8 rounds the experts' x and h as cuda's BW24_MOE_Q8 does (ops/cuda/q8.moe_q8_ref); the GPU runs the same
gate (`bw24 run-gen --backend cuda` on the synthetic qwen3-30b-a3b, benchmarks/next_chain.txt)."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.engine import engine
from bw24.engine.engine import Engine
from bw24.engine.ops.ref import RefOps, route
from bw24.engine.ops.ref_int8 import DropLastGroupInDecode, Int8RefOps
from bw24.engine.routing_pin import RoutingPin


def _wide(w, k: int) -> bool:  # the cuda rule K >= 2048, scaled to the tiny model (its attention output)
    return k >= 128


class LowestTopK(Int8RefOps):
    """The router's canary: a rounded forward whose top-k takes the k least likely experts (a sort the
    wrong way round). The pin replaces its experts, so only the routing check can see it."""

    def _route(self, logits, n_used, norm_weights):
        if self.exact:
            return super()._route(logits, n_used, norm_weights)
        return [(sel[::-1][:n_used], w[::-1][:n_used]) for sel, w in route(logits, logits.shape[-1], False)]


@pytest.fixture(scope="module")
def moe_gate(tmp_path_factory, helpers):
    path = helpers.write_tiny_gguf(tmp_path_factory.mktemp("gate_moe") / "moe.gguf", "qwen3moe", n_layer=3, E=128,
                                   D=32, X=8, k=2, Fx=64)

    def gate(ops, sensitivity=False):
        eng = Engine(helpers.build_model(path, ops=ops), None, None, path, ops)
        return eng.verify_prefill(list(range(3, 40)), sensitivity=sensitivity)
    return gate


def test_int8_experts_pass_on_the_pinned_routing(moe_gate):
    ops = Int8RefOps(_wide, moe_q8=True)
    r = moe_gate(ops)
    p, d = r.rounded
    assert ops.rounded > 0 and 0 < p.nmse <= p.bound and 0 < d.nmse <= d.bound
    assert r.routing.startswith("routing pinned to the exact decode's (3 MoE layers)") and r.routing_ok
    assert "of 222 token-layer top-2 picks" in r.routing  # 37 tokens x 3 layers, in the prefill and the decode
    assert r.ok and r.routing in r.line() and r.line().endswith("MATCH")
    assert ops.routing is None  # the pin is the gate's only


def test_pinned_int8_decode_equals_its_rounding_alone(moe_gate, monkeypatch):
    """Under the pin the emulated int8 experts (the reference rounding of x and h) run the same experts as the
    backend's own int8 decode, so the two agree to the bit: the yardstick is the backend's rounding, not a draw
    of which routing ties it happens to flip."""
    monkeypatch.setattr(engine, "Q8_GATE_NMSE", 1e-15)
    r = moe_gate(Int8RefOps(_wide, moe_q8=True))
    p, d = r.rounded
    assert r.alone > 1e-15 and d.nmse == r.alone and d.bound == engine.ROUNDING_FACTOR * r.alone
    assert r.ok and "the rounding alone (int8-activation)" in r.line()


@pytest.mark.parametrize("fixed", [True, False], ids=["fixed_bound", "rounding_alone_bound"])
def test_canary_int8_experts_dropping_a_group_fail_the_pinned_gate(moe_gate, monkeypatch, fixed):
    if not fixed:
        monkeypatch.setattr(engine, "Q8_GATE_NMSE", 1e-15)
    r = moe_gate(DropLastGroupInDecode(_wide, moe_q8=True))
    assert r.maxdiff < 1e-4  # the exact half is untouched (the reference's experts run token by token, so the
    # canary's one-row rule drops h's group in the prefill too)
    assert not r.rounded[1].ok and not r.ok and r.line().endswith("MISMATCH")


def test_canary_a_wrong_top_k_fails_the_routing_check(moe_gate):
    r = moe_gate(LowestTopK(_wide, moe_q8=True))
    assert all(d.ok for d in r.rounded)  # the pinned experts hide it from the logits ...
    assert not r.routing_ok and "not explained by the router logits' drift" in r.routing  # ... not from the check
    assert not r.ok and r.line().endswith("MISMATCH")


def test_dense_model_and_exact_backend_take_no_pin(moe_gate, tmp_path, helpers):
    assert moe_gate(RefOps()).routing == ""  # nothing rounds: nothing replays
    path = helpers.write_tiny_gguf(tmp_path / "dense.gguf", "qwen3", n_layer=2, E=128, D=32, F=256)
    ops = Int8RefOps(_wide)
    r = Engine(helpers.build_model(path, ops=ops), None, None, path, ops).verify_prefill(list(range(3, 20)))
    assert r.routing == "" and r.ok


# ---- RoutingPin itself ---------------------------------------------------------------------------------


def _recorded(exact_rows: list[list[float]], n_used: int) -> RoutingPin:
    """A pin recorded over one layer, one token per row of exact logits."""
    pin = RoutingPin()
    pin.begin()
    for row in exact_rows:
        lg = np.array([row])
        assert pin.apply(lg, np.array([route(lg, n_used, True)[0][0]]), n_used, True) is None
    pin.end(len(exact_rows))
    return pin


def test_pin_replays_its_experts_weighted_by_the_calls_own_logits():
    pin = _recorded([[3.0, 1.0, 0.0, 2.0]], 2)  # pinned: experts 0, 3
    assert pin.n_layers == 1 and pin.sel[0].tolist() == [[0, 3]]
    pin.begin()
    lg = np.array([[1.0, 0.0, 0.5, 1.5]])
    sel, w = pin.apply(lg, np.array([[3, 0]]), 2, True)
    pin.end(1)
    p = np.exp(lg[0] - lg[0].max())
    assert sel.tolist() == [[0, 3]] and np.allclose(w[0], p[[0, 3]] / p[[0, 3]].sum())
    assert pin.flips == 0 and pin.picks == 1 and pin.ok  # the same set in another order is no flip


def test_a_flip_across_a_near_tie_is_explained_one_across_a_wide_gap_is_not():
    pin = _recorded([[3.0, 2.999, 0.0], [3.0, 1.0, 0.0]], 1)
    pin.begin()
    pin.apply(np.array([[2.9995, 3.0, 0.0]]), np.array([[1]]), 1, True)  # gap 1e-3, logits moved 5e-4 each way
    assert pin.flips == 1 and pin.unexplained == 0
    pin.apply(np.array([[3.0, 1.0, 0.0]]), np.array([[1]]), 1, True)  # the same logits, the wrong expert
    assert pin.flips == 2 and pin.unexplained == 1 and not pin.ok
    assert "1 not explained" in pin.describe()


def test_pin_refuses_a_forward_that_bypassed_it():
    """A replay that routed fewer tokens than the recording (a captured graph replays without the host's
    hook) is an error, never a silently unpinned gate."""
    pin = _recorded([[1.0, 0.0], [0.0, 1.0]], 1)
    pin.begin()
    pin.apply(np.array([[1.0, 0.0]]), np.array([[0]]), 1, True)
    with pytest.raises(RuntimeError, match=r"routed \[1\] tokens per layer"):
        pin.end(2)
    pin.begin()
    with pytest.raises(RuntimeError, match="past the 2 recorded tokens"):
        pin.apply(np.zeros((3, 2)), np.zeros((3, 1), np.int32), 1, True)
    with pytest.raises(RuntimeError, match="token-by-token"):
        bad = RoutingPin()
        bad.begin()
        bad.apply(np.zeros((2, 2)), np.zeros((2, 1), np.int32), 1, True)
