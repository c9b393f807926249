"""pytest-benchmark wrapper of bench_server_load.py: one small burst (8 streaming clients + 2 early
disconnects) against a real CPU server; runs once as a plain test under --benchmark-disable."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("bench_server_load", Path(__file__).with_name("bench_server_load.py"))
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_bench_server_burst(benchmark):
    from bw24.server.launch import start_server
    srv = start_server("smollm2-135m", "--backend", "cpu", "--log-level", "warning")
    try:
        rep = benchmark.pedantic(lambda: asyncio.run(bench.run_load(srv.url, {}, "smollm2-135m", 8, 2, 4)),
                                 rounds=1, iterations=1)
    finally:
        srv.stop()
    assert rep["errors"] == [] and rep["mismatches"] == [] and rep["health_after"] == 200
