"""benchmarks/gpu_loop_gap.py's host side without a GPU: each loop it times queues exactly its tokens' steps (the
reference backend's step stands in for the captured one), and its in-graph token write compiles for sm_90a."""

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


def test_the_in_graph_token_write_compiles_for_sm90(gap, tmp_path, monkeypatch):
    from bw24.runtime import compile_cubin

    monkeypatch.setenv("BW24_KERNEL_CACHE", str(tmp_path / "cache"))
    src = tmp_path / "put.cu"
    src.write_text(gap.PUT)
    ck = compile_cubin(src, "90a")
    assert ck.cubin[:4] == b"\x7fELF" and b"put_token" in ck.cubin
