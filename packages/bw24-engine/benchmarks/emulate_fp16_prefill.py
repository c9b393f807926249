"""CPU estimate of the run-gen gate (Engine.verify_prefill) with the CUDA prefill GEMM's fp16 rounding.

The CUDA prefill (T > 16) multiplies fp16 weights by fp16 activations with fp32 accumulation
(ops/cuda/prefill.py). Products of two fp16 values are exact in fp32, so the reference backend's
float32 matmul over fp16-rounded operands reproduces that arithmetic up to summation order.
Modes: "fp32" (no rounding: today's gate), "w16" (weights rounded only), "w16x16" (weights and x:
precision="fp16"), "w16x2" (weights, x as an fp16 hi+lo pair), "split" (weights and x both as hi+lo
pairs, three GEMMs: precision="split"), "canary" (fp32, with the run-gen canary's decode-only bug: how
far a wrong decode lands, for comparison).

    PYTHONPATH=... python packages/bw24-engine/benchmarks/emulate_fp16_prefill.py smollm2-135m [...]
"""

from __future__ import annotations

import sys
import time

import numpy as np
from bw24.engine import Engine
from bw24.engine.ops import ref as R

PROMPTS = [
    "The quick brown fox jumps over the lazy dog. Then the dog wakes up, looks around and",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
    "# print the first ten numbers\nfor i in range(",
    "In 1969 the Apollo 11 mission landed two astronauts on the Moon. Neil Armstrong was the first to step "
    "onto the surface, followed by Buzz Aldrin, while Michael Collins stayed in orbit. The mission",
    "Bonjour! Je voudrais réserver une table pour deux personnes ce soir vers vingt heures, s'il vous plaît. Est-ce",
]


def f16(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float16).astype(np.float32)


def patch(mode: str) -> None:
    cache: dict[int, np.ndarray] = {}
    orig = R.RefOps.matmul
    R.RefOps.attention = ORIG_ATTN
    if mode == "canary":  # the run-gen canary's planted decode-only bug (attention scale 5% off at T = 1)
        def skewed(self, q, *a, scale, **kw):
            ORIG_ATTN(self, q, *a, scale=scale * (1.05 if q.shape[0] == 1 else 1.0), **kw)

        R.RefOps.attention = skewed
        return

    def mm(self, w, x, *, out, bias=None, residual=None):
        if x.shape[0] <= 16 or mode == "fp32":
            return orig(self, w, x, out=out, bias=bias, residual=residual)
        wd = cache.get(id(w))
        if wd is None:
            wd = cache[id(w)] = f16(w.data)
        if not np.all(np.isfinite(x.astype(np.float16))):
            print(f"  note: |x| max {np.abs(x).max():.3g} overflows fp16 (the kernel scales rows by 2^-e)")
        if mode == "w16":
            y = x @ wd.T
        elif mode == "w16x16":
            y = _scaled16(x) @ wd.T
        elif mode == "w16x2":  # two GEMMs accumulated in fp32
            hi = _scaled16(x)
            y = hi @ wd.T + _scaled16(x - hi) @ wd.T
        else:  # "split": wh.xh + wh.xl + 2^-11 wl.xh (prefill_gemm.cu), the shipped default
            wl = cache.get(-id(w))
            if wl is None:
                wl = cache[-id(w)] = f16(2048.0 * (w.data - wd)) / np.float32(2048.0)
            hi = _scaled16(x)
            y = hi @ wd.T + _scaled16(x - hi) @ wd.T + hi @ wl.T
        if bias is not None:
            y += bias
        if residual is not None:
            y += residual
        out[...] = y

    R.RefOps.matmul = mm


def _scaled16(x: np.ndarray) -> np.ndarray:
    """fp16 rounding of each row after a power-of-two scale that keeps its max below 2^15 (exact)."""
    m = np.abs(x).max(axis=1, keepdims=True).astype(np.float64)
    e = np.where(m > 0, np.floor(np.log2(np.maximum(m, 1e-30))) - 14, 0)
    s = np.exp2(-e).astype(np.float32)
    return (x * s).astype(np.float16).astype(np.float32) / s


def main(models: list[str], modes: list[str]) -> None:
    for spec in models:
        eng = Engine.load(spec, backend="cpu", progress=False)
        prompts = [eng.tokenizer.encode(p)[:60] for p in PROMPTS]
        for mode in modes:
            R.RefOps.matmul = ORIG
            patch(mode)
            t = time.perf_counter()
            res = [eng.verify_prefill(ids) for ids in prompts]
            md = max(r.maxdiff for r in res)
            flips = sum(r.prefill_argmax != r.decode_argmax for r in res)
            print(f"{spec:<20} {mode:<7} T={[len(p) for p in prompts]} maxdiff per prompt "
                  f"{[f'{r.maxdiff:.3g}' for r in res]} max {md:.3g} argmax flips {flips} "
                  f"({time.perf_counter() - t:.0f} s)", flush=True)
        R.RefOps.matmul = ORIG


ORIG = R.RefOps.matmul
ORIG_ATTN = R.RefOps.attention

if __name__ == "__main__":
    args = sys.argv[1:]
    modes = [a[8:].split(",") for a in args if a.startswith("--modes=")]
    main([a for a in args if not a.startswith("--")] or ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"],
         modes[0] if modes else ["fp32", "w16", "w16x16", "w16x2", "split"])
