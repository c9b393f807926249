"""Host (Python) time of one qwen3-0.6b prefill layer's GEMM plans, with the launches and cuBLAS calls
stubbed out: what CudaOps spends around the kernels of Q/K/V, wo, gate/up (+ GLU) and down at T = 512.
The 0.6B's prefill is host-bound on the H200 (28.7k tok/s for 13.4 ms of kernels at ca80b31), so this
glue counts; no GPU needed.

    python packages/bw24-engine/benchmarks/host_prefill_plan.py [--profile]

Prints the best of 5 runs of 28 layers per prefill precision (auto: split products for the K = 1024
weights; fp16) and the launches and cuBLAS calls a layer; --profile adds a cProfile table.
"""

from __future__ import annotations

import contextlib
import sys
import time
from types import SimpleNamespace

import numpy as np


class Dev(np.ndarray):
    """A host array standing in for a CuPy one: .data.ptr as a stored attribute (CuPy's is a C property)."""

    def __array_finalize__(self, obj):
        self._d = SimpleNamespace(ptr=self.ctypes.data if self.size else 0)

    @property
    def data(self):
        return self._d


class W:
    def __init__(self, n: int, k: int):
        self.n, self.k, self.fmt, self.shape = n, k, 7, (n, k)
        self.qtype = SimpleNamespace(name="Q4_K")

    def args(self) -> tuple:
        return (np.uintp(0),) * 4


def main() -> int:
    from bw24.engine.ops.cuda import prefill
    from bw24.engine.ops.cuda.backend import CudaOps

    calls = {"launch": 0, "gemm": 0}

    def count(key):
        def f(*a, **kw):
            calls[key] += 1
        return f

    prefill.gemm_ex = count("gemm")
    ops = CudaOps.__new__(CudaOps)
    ops.stream, ops._scratch = contextlib.nullcontext(), {}

    def buf(key, n, dtype=np.float32, zeroed=False):
        a = ops._scratch.get(key)
        if a is None or a.size < n:
            a = ops._scratch[key] = np.zeros(n, dtype).view(Dev)
        return a[:n]

    ops._buf, ops._k, ops._launch = buf, lambda f, n: n, count("launch")
    plan = {1024: ("f32", 1, 4), 2048: ("q8", 4, 4), 3072: ("q8", 4, 8)}  # the 0.6B's paths by K
    ops.qmv_configs = SimpleNamespace(plan=lambda qt, n, k: plan[k])
    T = 512

    def mk(*shape):
        return np.zeros(shape, np.float32).view(Dev)

    h, q, k, v, a, g, u, nw = mk(T, 1024), mk(T, 2048), mk(T, 1024), mk(T, 1024), mk(T, 2048), mk(T, 3072), \
        mk(T, 3072), mk(1024)
    ws = W(2048, 1024), W(1024, 1024), W(1024, 1024), W(1024, 2048), W(3072, 1024), W(3072, 1024), W(1024, 3072)

    def layer():
        prefill.gemm_multi(ops, list(ws[:3]), h, [q, k, v], [None] * 3, norm=(nw, 1e-6))
        prefill.gemm(ops, ws[3], a, h, None, h, 0.0)
        ops.ffn_glu(h, nw, 1e-6, ws[4], ws[5], "silu", x=None, g=g, u=u)
        prefill.gemm(ops, ws[6], g, h, None, h, 0.0)

    for prec in ("auto", "fp16"):
        ops.prefill_precision = prec
        best = float("inf")
        for _ in range(5):
            calls.update(launch=0, gemm=0)
            t0 = time.perf_counter()
            for _ in range(28):
                layer()
            best = min(best, time.perf_counter() - t0)
        print(f"{prec}: {best / 28 * 1e6:.0f} us of Python a layer; {calls['launch'] / 28:.0f} launches and "
              f"{calls['gemm'] / 28:.0f} cuBLAS calls a layer")
    if "--profile" in sys.argv:
        import cProfile
        import pstats

        with cProfile.Profile() as p:
            for _ in range(28):
                layer()
        pstats.Stats(p).sort_stats("tottime").print_stats(12)
    return 0


if __name__ == "__main__":
    sys.exit(main())
