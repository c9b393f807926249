"""Why a speculative verify's matvecs cost 3.2x a decode step's (issue 8): one eager decode forward
(T=1) and one eager verify forward (T=5) of a model, each inside an NVTX range ("T1", "T5"), for
Nsight Compute to profile the q8 matvec launches of each range.

    ncu --clock-control none --nvtx --nvtx-include "T5/" -k regex:qmv8 -c 6 --section SpeedOfLight \
        --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy \
        python3 packages/bw24-engine/benchmarks/gpu_verify_ncu.py qwen3-8b:q4_k_m
(`h200_session.sh SHA ncu PRESET:QUANT` runs it for T1 and T5.) Without ncu it still runs, and
prints the two forwards' wall times (eager: launch-bound, not a speed figure).

PRESET:QUANT:DEPTH puts DEPTH tokens in the cache first (default 64): at 390f819 the d4096 token cost the 0.6B /
8B / 32B 7.7 / 12.7 / 23 us a layer more than the d0 one for the same 16.8 MB of K/V a layer, growing with the
q heads a kv head serves, so `ncu qwen3-32b:q4_k_m:4096 attn_ 4` profiles the decode attention there.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_profile import model_file, parse_spec  # noqa: E402


def main() -> int:
    import torch
    from bw24.engine import Engine

    preset, quant, depth = parse_spec(sys.argv[1])
    eng = Engine.load(model_file(preset, quant), backend="cuda", n_ctx=max(1024, depth + 256), max_batch=16,
                      progress=False)
    m, ops = eng.model, eng.ops
    rng = np.random.default_rng(0)
    m.kv.reset()
    m.feed(rng.integers(10, m.cfg.n_vocab - 10, size=max(depth, 1)).tolist())
    n0 = m.kv.n_past

    def fwd(T: int) -> float:
        ops.copy_from_host(m.buf.view(T).ids, rng.integers(10, m.cfg.n_vocab - 10, size=T).astype(np.int32))
        m.kv.reserve(T)
        t0 = time.perf_counter()
        m.forward(T, last_only=False)
        ops.synchronize()
        m.kv.reset(n0)
        return time.perf_counter() - t0

    for T in (1, 5):  # compile and size scratch outside the ranges
        fwd(T)
    for T in (1, 5):
        torch.cuda.nvtx.range_push(f"T{T}")
        s = fwd(T)
        torch.cuda.nvtx.range_pop()
        print(f"T={T}: eager forward {s * 1e3:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
