"""GPU: prefill speed and the run-gen gate per prefill GEMM precision ("split" default, "fp16").

    PYTHONPATH=... python packages/bw24-engine/benchmarks/gpu_prefill.py qwen3-8b [smollm2-135m ...]

Per model and precision: the gate line of a 40-token prompt (Engine.verify_prefill), then the median
of 5 timed prefills of 512 tokens (fresh context each, max_batch 512: one chunk) in tokens/s.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np
from bw24.engine import Engine

TEXT = ("The history of the printing press begins in the fifteenth century, when movable type made books "
        "cheaper and faster to produce than ever before. ") * 40


def main(models: list[str]) -> None:
    for spec in models:
        eng = Engine.load(spec, backend="cuda", max_batch=512, progress=False)
        ids = eng.tokenizer.encode(TEXT)
        ids = (ids * (512 // len(ids) + 1))[:512]
        for prec in ("split", "fp16"):
            eng.ops.prefill_precision = prec
            gate = eng.verify_prefill(ids[:40]).line()
            times = []
            for _ in range(6):
                eng.model.kv.reset()
                eng.ops.synchronize()
                t = time.perf_counter()
                eng.model.feed(ids)
                eng.ops.synchronize()
                times.append(time.perf_counter() - t)
            med = statistics.median(times[1:])  # the first run compiles kernels
            print(f"{spec:<22} {prec:<5} pp512 {512 / med:8.0f} tok/s ({med * 1e3:.1f} ms)  {gate}", flush=True)
        eng.ops.prefill_precision = "split"
        a = eng.logits(ids[:300])[-1]  # a 300-token batched prefill vs the same prompt in 3 chunks of 100
        eng.model.kv.reset()
        for s in range(0, 300, 100):
            b = eng.model.feed(ids[s:s + 100])[-1]
        print(f"{spec:<22} chunked prefill (pos > 0) vs one chunk: logit maxdiff {np.max(np.abs(a - b)):.3g}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"])
