"""Each quantized matvec kernel of bw24-engine's cuda backend: achieved GB/s and % of measured read
bandwidth, at the decode shapes of an 8B model (T = 1, the weight read once per token).

bw24-engine is an optional extra: imported lazily, and a clear Skip says why when it (or its
cuda ops) is missing. Timing: `ops.capture` turns a burst of matmuls into one CUDA graph (the way a
decode step runs), replayed and timed; the burst rotates over enough weight copies that the L2
cannot hold them, so every byte comes from HBM.
"""

from __future__ import annotations

import time

import numpy as np

from .qdata import random_tensor
from .rows import BenchContext, Row, Skip

QTYPES = ("Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q4_K", "Q5_K", "Q6_K", "F16", "BF16")
SHAPES_8B = ((4096, 4096), (12288, 4096), (4096, 12288))   # (N out rows, K in cols): attn out, ffn up, down
SHAPES_QUICK = ((1024, 1024),)


def cuda_ops():
    """The engine's cuda Ops, or a Skip explaining why there is none."""
    try:
        import bw24.engine  # noqa: F401
    except ImportError as e:
        return Skip("matvec", f"bw24-engine is not installed ({e}); install bw24-probe[engine]")
    try:
        from bw24.engine.ops.cuda import CudaOps
    except Exception as e:  # ImportError today; anything the module raises at import tomorrow
        return Skip("matvec", f"bw24-engine has no cuda ops yet ({type(e).__name__}: {e})")
    try:
        return CudaOps()
    except Exception as e:
        return Skip("matvec", f"bw24-engine's CudaOps() failed ({type(e).__name__}: {e})")


def _tensor(qtype: str, n: int, k: int, i: int, rng):
    return random_tensor(qtype, n, k, f"probe.{qtype}.{n}x{k}.{i}", rng)


def _bench_one(ops, qtype: str, n: int, k: int, l2_bytes: int, rng) -> tuple[float, float, int]:
    """(seconds per matvec, bytes per matvec, copies rotated)."""
    first = _tensor(qtype, n, k, 0, rng)
    copies = max(2, -(-4 * l2_bytes // first.nbytes))
    ws = [ops.load_weight(first)] + [ops.load_weight(_tensor(qtype, n, k, i, rng)) for i in range(1, copies)]
    x = ops.empty((1, k))
    ops.copy_from_host(x, rng.standard_normal((1, k), dtype=np.float32))
    out = ops.empty((1, n))

    def burst():
        for w in ws:
            ops.matmul(w, x, out=out)

    step = ops.capture(burst)
    step()
    ops.synchronize()
    reps, walls = 5, []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(reps):
            step()
        ops.synchronize()
        walls.append((time.perf_counter() - t0) / (reps * copies))
    bytes_moved = first.nbytes + 4 * k + 4 * n
    return float(np.median(walls)), bytes_moved, copies


def bench(ctx: BenchContext, read_gbs: float | None) -> list[Row | Skip]:
    ops = cuda_ops()
    if isinstance(ops, Skip):
        return [ops]
    rng = np.random.default_rng()
    rows: list[Row | Skip] = []
    for qtype in QTYPES:
        for n, k in SHAPES_QUICK if ctx.quick else SHAPES_8B:
            name = f"matvec_{qtype}_{n}x{k}"
            try:
                sec, nbytes, copies = _bench_one(ops, qtype, n, k, ctx.l2_bytes, rng)
            except Exception as e:  # a quant type the engine does not support yet, say so and go on
                rows.append(Skip(name, f"{type(e).__name__}: {e}"))
                continue
            rate = nbytes / sec / 1e9
            pct = f"{100 * rate / read_gbs:.0f}% of read" if read_gbs else "read bandwidth not measured"
            rows.append(Row(name, rate, "GB/s", f"qmatvec {qtype} {n}x{k}",
                            f"{pct}; {sec * 1e6:.1f} us; graph of {copies} weight copies"))
    return rows
