"""benchmarks/gpu_loop_gap.py's host side without a GPU: each loop it times queues exactly its tokens' steps (the
reference backend's step stands in for the captured one), the token ring's arms included."""

from __future__ import annotations

import pytest
from bw24.engine import Engine
from bw24.engine.graph import decode_step
from bw24.engine.sampling import SamplingParams


@pytest.fixture(scope="module")
def gap(helpers):
    return helpers.bench_module("gpu_loop_gap")


def test_every_loop_queues_its_steps_and_reads_every_token(gap):
    eng = Engine.load("smollm2-135m", backend="cpu", n_ctx=64, progress=False)
    m, ops = eng.model, eng.ops
    m.feed([1, 2, 3])
    ops.sample(m.buf.logits[0], SamplingParams(), m.kv.pos, out=m.buf.view(1).ids)
    run = gap.captured(m, ops, decode_step(m, SamplingParams()), 3)
    assert m.kv.n_past == 3
    reads = []
    real = ops.to_host_later
    ops.to_host_later = lambda a: (reads.append(1), real(a))[1]
    try:
        arms = gap.loops(m, ops, run, 5)
        assert set(arms) == {"queued", "queued, reads", "lag 1", "lag 0"}
        for name, go in arms.items():
            m.kv.reset(3)
            reads.clear()
            go()
            assert m.kv.n_past == 8, name
            assert len(reads) == (0 if name == "queued" else 5), name
    finally:
        del ops.to_host_later


def test_the_ring_arms_queue_their_steps_with_the_ring_switched_on(gap):
    """The in-graph arms turn BW24_TOKEN_RING on for their own loop (the others off): on the reference backend, which
    has no ring, they queue the same steps through the copies (test_decode_lag.py runs the ring's protocol)."""
    eng = Engine.load("smollm2-135m", backend="cpu", n_ctx=64, progress=False)
    m, ops = eng.model, eng.ops
    m.feed([1, 2, 3])
    ops.sample(m.buf.logits[0], SamplingParams(), m.kv.pos, out=m.buf.view(1).ids)
    run = gap.captured(m, ops, decode_step(m, SamplingParams()), 3)
    arms = gap.ring_loops(m, ops, run, 5)
    assert set(arms) == {"queued, in-graph reads", "lag 1, in-graph reads"}
    for name, go in arms.items():
        m.kv.reset(3)
        gap.ring_on(ops, False)
        go()
        assert ops.token_ring_env == "1" and m.kv.n_past == 8, name
    gap.ring_on(ops, False)
    assert gap.same_tokens(m, ops, run, run, 3, n=4) == "the same"
