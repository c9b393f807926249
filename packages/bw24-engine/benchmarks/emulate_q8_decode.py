"""CPU estimate of what the q8 matvec path (int8 activations per 32-group, qmatvec_q8.cu) does to
whole-model outputs: the NumPy reference backend with every T <= 16 matmul (and the logits) fed the
activation exactly as quantize_x quantizes it (ops/cuda/q8.py twin), product in float64.

Per prompt: greedy 32 steps on the plain reference; then the quantized run teacher-forced on the same
tokens, comparing logits step by step (max |diff|, argmax flips and the reference's top-1/top-2 margin
there, the smallest margin seen); then the run-gen gate (Engine.verify_prefill: batched prefill, not
quantized when T > 16, vs token-by-token decode, quantized) with the emulation on.

    PYTHONPATH=... python packages/bw24-engine/benchmarks/emulate_q8_decode.py [smollm2-135m ...] [--steps 32]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from bw24.engine import Engine
from bw24.engine.ops import ref as R
from bw24.engine.ops.cuda.q8 import dequantize_x_ref

sys.path.insert(0, str(Path(__file__).resolve().parent))
from emulate_fp16_prefill import PROMPTS as FP16_PROMPTS  # noqa: E402

PROMPTS = [*FP16_PROMPTS, "Hi"]  # the prefill emulation's prompts, and a one-token one
ORIG = (R.RefOps.matmul, R.RefOps.logits)


def patch(on: bool, logits_q8: bool = True) -> None:
    if not on:
        R.RefOps.matmul, R.RefOps.logits = ORIG
        return

    def mm(self, w, x, *, out, bias=None, residual=None):
        if x.shape[0] > 16:  # prefill GEMM: fp32 activations on the GPU too
            return ORIG[0](self, w, x, out=out, bias=bias, residual=residual)
        y = dequantize_x_ref(x) @ w.data.T.astype(np.float64)
        if bias is not None:
            y += bias
        if residual is not None:
            y += residual
        out[...] = y.astype(np.float32)

    def logits(self, x, w, softcap, *, out):
        y = np.empty((x.shape[0], w.data.shape[0]), np.float32)
        mm(self, w, x, out=y)
        if softcap:
            y = softcap * np.tanh(y / softcap)
        out[...] = y

    R.RefOps.matmul = mm
    if logits_q8:  # else the output head stays on fp32 activations (a per-shape table choice)
        R.RefOps.logits = logits


def top2(v: np.ndarray) -> tuple[int, float]:
    i = np.argsort(v)[::-1][:2]
    return int(i[0]), float(v[i[0]] - v[i[1]])


def run(eng: Engine, ids: list[int], steps: int, logits_q8: bool = True) -> dict:
    m = eng.model
    patch(False)
    m.kv.reset()
    lg, ref_logits, toks = m.feed(ids)[-1], [], []
    for _ in range(steps):
        ref_logits.append(lg.astype(np.float64))
        toks.append(int(np.argmax(lg)))
        lg = m.feed([toks[-1]])[-1]
    patch(True, logits_q8)
    m.kv.reset()
    lg = m.feed(ids)[-1]
    diffs, rels, flips, min_margin = [], [], [], float("inf")
    for s in range(steps):
        a, b = ref_logits[s], lg.astype(np.float64)
        diffs.append(float(np.max(np.abs(a - b))))
        rels.append(float(np.linalg.norm(a - b) / np.linalg.norm(a)))
        t_ref, margin = top2(a)
        min_margin = min(min_margin, margin)
        if int(np.argmax(b)) != t_ref:
            flips.append((s, margin, diffs[-1]))
        lg = m.feed([toks[s]])[-1]
    gate = eng.verify_prefill(ids)
    patch(False)
    return {"maxdiff": max(diffs), "median_step_maxdiff": float(np.median(diffs)), "rel": max(rels), "flips": flips,
            "min_margin": min_margin, "gate": gate, "n_prompt": len(ids)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*", default=["smollm2-135m"])
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--prompts", default="", help="comma-separated indices into PROMPTS (default: all)")
    ap.add_argument("--fp32-logits", action="store_true", help="quantize every matmul but the output head")
    a = ap.parse_args()
    for spec in a.models:
        eng = Engine.load(spec, backend="cpu", progress=False)
        sel = [PROMPTS[int(i)] for i in a.prompts.split(",")] if a.prompts else PROMPTS
        for p in sel:
            t = time.perf_counter()
            r = run(eng, eng.tokenizer.encode(p), a.steps, not a.fp32_logits)
            g = r["gate"]
            print(f"{spec}{' fp32-head' if a.fp32_logits else ''} T={r['n_prompt']:3d} steps={a.steps}: logit maxdiff {r['maxdiff']:.4f} "
                  f"(median per step {r['median_step_maxdiff']:.4f}, max rel L2 {r['rel']:.2e}), greedy flips {len(r['flips'])} "
                  f"{[(s, round(m, 4), round(d, 4)) for s, m, d in r['flips']]} (step, ref top1-top2 margin, "
                  f"maxdiff), min ref margin {r['min_margin']:.4f}; run-gen gate: prefill argmax "
                  f"{g.prefill_argmax} decode argmax {g.decode_argmax} maxdiff {g.maxdiff:.4f} "
                  f"({time.perf_counter() - t:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
