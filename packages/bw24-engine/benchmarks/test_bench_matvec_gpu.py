"""pytest-benchmark suite: each quant type's decode matvec at the 8B's shapes on the GPU (issue 5's per-kernel
microbenchmarks), achieved GB/s and % of the measured HBM read bandwidth.

    python -m pytest -q packages/bw24-engine/benchmarks/test_bench_matvec_gpu.py [--benchmark-json F]
    (nox -s benchmarks runs it with the other suites; the GPU session's `mvbench` stage)

Per case (type x shape): random well-formed GGUF rows of that type (repack.random_raw), repacked as the engine
loads them, cloned until the copies span more than 2x the L2 (so every byte comes from HBM); one CUDA graph of one
matvec per copy, launched at the committed tuning table's config (what a model launches), on the q8 path with
the activation's int8 rows ready, as a fused producer leaves them in a decode step. Timing: CUDA events around
each replay of the graph (median of the rounds), divided by the copies: one matvec's microseconds; GB/s counts
the repacked weight's bytes (what HBM streams). pytest-benchmark's own figure is the replay's wall time with its
synchronization; the event-timed figures are in each case's extra_info and printed. The ceiling is bw24-probe's
measured HBM read bandwidth for this device (perf/roofline.py), the same one the perf cells' % roofline uses.

Without a GPU the module skips and says why. Correctness is kernel-check's (every type and config against a
float64 reference); here each case's output is only required to be finite, so a broken launch cannot pass as fast.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from bw24.runtime import has_gpu, no_gpu_reason

# the 8B's projections as single matvecs [N, K]: fused Q/K/V, output, fused gate/up, down
SHAPES_8B = (("qkv", 6144, 4096), ("wo", 4096, 4096), ("gate_up", 24576, 4096), ("down", 4096, 12288))
QTYPES = ("Q4_0", "Q4_1", "Q5_0", "Q8_0", "Q4_K", "Q5_K", "Q6_K")  # launch.Q8_TYPES: the q8 decode path's
L2_SPAN = 2 * 60e6  # bytes the copies span (the H200's L2 is 50 MB)
ROUNDS = 5


def copies_for(nbytes: int) -> int:
    """Weight copies one replay walks: enough to span L2_SPAN (at least 4, at most 400)."""
    return max(4, min(400, math.ceil(L2_SPAN / nbytes) + 1))


def figures(us: float, nbytes: int, ceiling_bps: float | None) -> dict:
    """One matvec's event-timed us -> {us, gbs, pct_of_hbm_read} (pct None without a measured ceiling)."""
    gbs = nbytes / us / 1e3
    return {"us": round(us, 3), "gbs": round(gbs, 1),
            "pct_of_hbm_read": round(100 * gbs * 1e9 / ceiling_bps, 1) if ceiling_bps else None}


CASES = [pytest.param(qn, part, n, k, id=f"{qn}-{part}-{n}x{k}") for qn in QTYPES for part, n, k in SHAPES_8B]


@pytest.fixture(scope="module")
def gpu():
    if not has_gpu():
        pytest.skip(f"no CUDA GPU: {no_gpu_reason()}")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bw24.engine.ops.cuda import CudaOps
    from bw24.engine.perf.roofline import current_ceiling

    return CudaOps(), current_ceiling("cuda")


@pytest.mark.parametrize("qn,part,n,k", CASES)
def test_matvec_8b_shapes(benchmark, gpu, qn, part, n, k):
    import cupy as cp
    from bw24.engine.ops.cuda import q8
    from bw24.runtime import CapturedGraph
    from gguf.constants import GGMLQuantizationType as Q
    from gpu_matvec_q8 import _clone, _weight

    ops, ceiling = gpu
    rng = np.random.default_rng(0)
    w0 = _weight(ops, Q[qn], n, k, rng)
    ws = [w0] + [_clone(ops, w0) for _ in range(copies_for(w0.nbytes) - 1)]
    x, y = ops._put(rng.standard_normal((1, k)).astype(np.float32)), ops.zeros((1, n))
    path, warps, rows = ops.qmv_configs.plan(Q[qn], n, k)
    q8.quantize(ops, x)

    def body():
        for wi in ws:
            q8.mark_ready(ops, x)
            ops.matmul(wi, x, out=y)

    body()  # eagerly first: the kernels built and loaded outside the capture
    ops.synchronize()
    g = CapturedGraph(ops.stream).capture(body)
    g.replay()
    ops.synchronize()
    assert np.isfinite(ops.to_host(y)).all(), f"{qn} {n}x{k}: non-finite output"
    ev0, ev1, times = cp.cuda.Event(), cp.cuda.Event(), []

    def replay():
        ev0.record(ops.stream)
        g.replay()
        ev1.record(ops.stream)
        ev1.synchronize()
        times.append(cp.cuda.get_elapsed_time(ev0, ev1) * 1e3 / len(ws))

    benchmark.pedantic(replay, rounds=ROUNDS, iterations=1, warmup_rounds=1)
    got = figures(float(np.median(times[-ROUNDS:])), w0.nbytes, ceiling.read_bytes_per_s)
    benchmark.extra_info.update(qtype=qn, part=part, shape=f"{n}x{k}", path=path, warps=warps, rows=rows,
                                weight_bytes=w0.nbytes, copies=len(ws), ceiling=ceiling.note, **got)
    pct = "" if got["pct_of_hbm_read"] is None else f" {got['pct_of_hbm_read']:5.1f}% of HBM read"
    print(f"\n{qn:<5} {part:<7} {n:>6}x{k:<6} {path} W={warps} R={rows}: {got['us']:8.2f} us "
          f"{got['gbs']:7.1f} GB/s{pct}")
    ws.clear()  # (the copies' device memory back before the next case's)
    del w0
    cp.get_default_memory_pool().free_all_blocks()
