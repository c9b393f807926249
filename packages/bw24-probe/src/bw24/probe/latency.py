"""Kernel launch cost: eager launches from Python, and per-node cost inside a replayed CUDA graph.

Eager: N back-to-back launches of an empty kernel from a Python loop, wall clock / N (host-bound:
this is what an uncaptured decode step pays per kernel). Graph: the same N launches captured once
and replayed, timed with CUDA events / N (what one decode-step graph pays per node).
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from .measure import time_events
from .rows import BenchContext, Row, kernel_path


def _noop():
    from bw24.runtime import load_module

    return load_module(kernel_path("bandwidth.cu"), defines={"UNROLL": 4}).get("noop")


def launch(ctx: BenchContext) -> list[Row]:
    from bw24.runtime import CapturedGraph

    fn = _noop()
    arg = (np.int32(0),)
    n = 200 if ctx.quick else 2000
    s = ctx.stream

    def burst():  # launches go to the current stream: s, inside `with s` (and during capture)
        for _ in range(n):
            fn((1,), (32,), arg)

    with s:
        burst()
    s.synchronize()
    walls = []
    for _ in range(5 if ctx.quick else 9):
        t0 = time.perf_counter()
        with s:
            burst()
        s.synchronize()
        walls.append((time.perf_counter() - t0) / n * 1e6)
    eager = statistics.median(walls)

    g = CapturedGraph(s).capture(burst)
    t = time_events(g.replay, s, repeats=ctx.repeats)
    node = t.median_ms * 1e3 / n
    return [
        Row("launch_eager_us", eager, "us", "kernel launch from Python (eager)",
            f"{n} back-to-back empty launches, wall clock, median of {len(walls)}"),
        Row("graph_node_us", node, "us", "per node in a replayed CUDA graph",
            f"{n}-node graph of empty kernels, CUDA events; spread={t.spread:.1%}"),
    ]
