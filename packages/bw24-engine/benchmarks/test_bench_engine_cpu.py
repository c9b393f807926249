"""pytest-benchmark wrapper: one decode step of smollm2-135m on the NumPy engine (runs once as a
plain test under --benchmark-disable)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("bench_engine_cpu", Path(__file__).with_name("bench_engine_cpu.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_bench_smollm2_decode_step(benchmark):
    m = bench.load("smollm2-135m")
    m.kv.reset()
    m.feed([1, 2, 3, 4])

    def step():
        if m.kv.n_past >= m.kv.n_ctx:
            m.kv.reset(4)
        m.kv.reserve(1)
        return m.forward(1)

    out = benchmark(step)
    assert out.shape == (1, m.cfg.n_vocab)
