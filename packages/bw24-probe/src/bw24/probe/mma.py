"""Tensor-core peak of our own warp-level mma.sync kernel (int8 and fp16, operands in registers).

mma.sync is the Ampere-style path; on Hopper the full rate needs wgmma, so this is the ceiling a
hand-written mma.sync kernel (e.g. a dp4a/mma matvec or a small prefill GEMM) can reach.
"""

from __future__ import annotations

import numpy as np

from .measure import time_events
from .rows import BenchContext, Row, Skip, kernel_path

OPS_PER_INSTR = {"mma_f16": 2 * 16 * 8 * 16, "mma_s8": 2 * 16 * 8 * 32}


def _operands(kind: str):
    import cupy

    rng = np.random.default_rng()
    if kind == "mma_f16":
        words = rng.uniform(-1, 1, 2 * 192).astype(np.float16).view(np.uint32)
    else:
        words = rng.integers(-128, 128, 4 * 192, dtype=np.int8).view(np.uint32)
    return cupy.asarray(words)


def peak(ctx: BenchContext, cc: tuple[int, int]) -> list[Row | Skip]:
    import cupy
    from bw24.runtime import load_module

    if cc < (8, 0):
        return [Skip("mma_fp16_tflops", f"mma.sync m16n8k16/m16n8k32 needs sm_80+, device is sm_{cc[0]}{cc[1]}"),
                Skip("mma_int8_tops", "needs sm_80+")]
    threads = 256
    rows: list[Row | Skip] = []
    for kind, metric, label, unit in (("mma_f16", "mma_fp16_tflops", "mma.sync fp16 -> fp32 (ours)", "TFLOP/s"),
                                      ("mma_s8", "mma_int8_tops", "mma.sync int8 -> int32 (ours)", "TOP/s")):
        src = _operands(kind)
        best = (0.0, "")
        for chains in ((8,) if ctx.quick else (4, 8)):
            fn = load_module(kernel_path("mma.cu"), defines={"CHAINS": chains}).get(kind)
            for per_sm in ((4,) if ctx.quick else (2, 4, 8)):
                blocks = ctx.sm_count * per_sm
                iters = max(64, (256 if ctx.quick else 8192) * 4 // (per_sm * chains) * 4)
                out = cupy.empty(blocks * threads, dtype=cupy.float32 if kind == "mma_f16" else cupy.int32)
                t = time_events(lambda fn=fn, b=blocks, o=out, i=iters, s=src: fn((b,), (threads,), (s, o, np.int32(i))),
                                ctx.stream, repeats=ctx.repeats)
                ops = blocks * (threads // 32) * iters * chains * OPS_PER_INSTR[kind]
                rate = ops / (t.median_ms * 1e-3) / 1e12
                if rate > best[0]:
                    best = (rate, f"chains={chains} blocks={per_sm}/SM x {threads} threads, iters={iters}; "
                                  f"spread={t.spread:.1%}")
        rows.append(Row(metric, best[0], unit, label, best[1]))
    return rows
