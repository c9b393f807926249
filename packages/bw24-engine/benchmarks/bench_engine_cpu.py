"""CPU decode / prefill speed of the NumPy reference engine (a benchmark, not a timed test).

    python packages/bw24-engine/benchmarks/bench_engine_cpu.py [MODEL ...] [--steps N] [--prompt-len P]

Targets on the 2-core dev machine (issue 3): smollm2-135m >= 20 tok/s, qwen2.5-coder-0.5b >= 5 tok/s.
Decode rate = median over 3 runs of (steps / wall time of `steps` T=1 forward + sample steps), after
a prefill of P tokens; the pytest-benchmark wrapper below times one decode step.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
from bw24.engine.models import model_class
from bw24.engine.ops import RefOps
from bw24.engine.sampling import SamplingParams

DEFAULT_MODELS = ("smollm2-135m", "qwen2.5-coder-0.5b")


def load(spec: str):
    from bw24.gguf import GGUFFile, ModelConfig, resolve_model

    f = GGUFFile(resolve_model(spec))
    cfg = ModelConfig.from_gguf(f)
    return model_class(cfg.arch)(f, cfg, RefOps(), n_ctx=1024)


def decode_rate(m, steps: int, prompt_len: int) -> tuple[float, float]:
    """(decode tok/s, prefill tok/s) for one run."""
    ids = np.random.default_rng(0).integers(0, m.cfg.n_vocab, prompt_len)
    tok, row, params = m.buf.view(1).ids, m.buf.logits[0], SamplingParams()
    m.kv.reset()
    t0 = time.perf_counter()
    m.feed(ids)
    t1 = time.perf_counter()
    m.ops.sample(row, params, m.kv.pos, out=tok)
    for _ in range(steps):
        m.kv.reserve(1)
        m.forward(1)
        m.ops.sample(row, params, m.kv.pos, out=tok)
    t2 = time.perf_counter()
    return steps / (t2 - t1), prompt_len / (t1 - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", default=list(DEFAULT_MODELS))
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=32)
    args = ap.parse_args(argv)
    for spec in args.models:
        t = time.perf_counter()
        m = load(spec)
        load_s = time.perf_counter() - t
        runs = [decode_rate(m, args.steps, args.prompt_len) for _ in range(3)]
        dec = statistics.median(r[0] for r in runs)
        pre = statistics.median(r[1] for r in runs)
        print(f"{spec}: decode {dec:.1f} tok/s, prefill {pre:.1f} tok/s "
              f"(prompt {args.prompt_len}, {args.steps} steps, median of 3; load {load_s:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
