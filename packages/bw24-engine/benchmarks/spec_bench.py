"""Speculative-decoding speed cells (run on the GPU host; the CPU works too, slowly, with --quick).

python packages/bw24-engine/benchmarks/spec_bench.py OUTDIR [--backend cuda] [--cells ngram,self,mtp,exact]
    [--quick] [--reps 5] [-n 128]

Cells (ARCHITECTURE.md "Measuring": interleaved A B A B, median of >= 5):
  exact  batched verify rows (T = K+1, the kernels as they are) bit-identical to decode steps? If yes
         on this device, CudaOps may declare `batch_rows_exact = True` and verify runs batched.
  ngram  smollm2-135m, code-editing prompt, n-gram drafting K=4 (adaptive) vs plain decode
         (target: >= 1.5x), for verify = rowwise and batched.
  self   draft = target on synthetic qwen3-8b (qwen3-0.6b with --quick), K=4: acceptance must be
         1.0; machinery overhead per accepted token = (round time - K draft steps - one verify) /
         (K+1) / plain step (target: < 10%), and end-to-end tok/s vs plain.
  mtp    synthetic qwen3-8b with a NextN head (--mtp), K=3: one draft+verify round vs one plain
         decode step (target: <= 1.25x).
Writes OUTDIR/spec_bench.jsonl (perf-CI rows: time, git sha, device, cell, tok/s, acceptance,
tokens/round) and prints a summary table last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
CODE_PROMPT = ("Rewrite this Python function to use a list comprehension, keeping its name and docstring, "
               "and return the whole function:\n\ndef squares(xs):\n    \"\"\"Return the squares of xs.\"\"\"\n"
               "    out = []\n    for x in xs:\n        out.append(x * x)\n    return out\n")


def git_sha() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True).stdout.strip() or "uncommitted"
    except OSError:
        return "?"


def device(eng) -> str:
    try:
        from bw24.runtime import describe

        return describe() if eng.backend == "cuda" else "cpu"
    except Exception:  # noqa: BLE001 - a label only
        return eng.backend


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def synth_model(out: Path, preset: str, mtp: int = 0) -> Path:
    from bw24.gguf.synth import synth

    p = out / f"{preset}{'-mtp' if mtp else ''}.gguf"
    if not p.exists():
        synth(preset, p, mix="q4_k_m", seed=0, mtp=mtp, progress=True)
    return p


def cell_exact(eng, rows: list, summary: list) -> None:
    from bw24.engine.spec import Verifier

    ids = eng.tokenizer.encode(CODE_PROMPT, add_special=True)
    for k in (1, 3, 7, 15):
        block = [int(x) for x in np.random.default_rng(k).integers(0, eng.config.n_vocab, k + 1)]
        ref = eng.decode_logits(ids + block)[len(ids) - 1:]
        m = eng.model
        m.kv.reset()
        for t in ids:  # the same prefix path as decode_logits
            m.feed([t])
        got = Verifier(m, "batched").forward(block).logits
        same = bool(np.array_equal(got, ref[1:]))
        summary.append(f"exact  T={k + 1:2d}: batched verify rows bit-identical to decode: {'YES' if same else 'NO'}"
                       f" (max |diff| {float(np.max(np.abs(got - ref[1:]))):.3g})")


def run_pair(eng, drafter, ids, n, k, verify, reps, adaptive=True):
    """Interleaved plain / spec runs; medians of tok/s, and the spec stats of the last run."""
    from bw24.engine import SamplingParams
    from bw24.engine.spec import SpecDecoder, plain_decode

    plain, spec, st = [], [], None
    for _ in range(reps):
        toks, s = plain_decode(eng.model, ids, n, SamplingParams())
        plain.append(len(toks) / s)
        dec = SpecDecoder(eng.model, drafter, k=k, adaptive=adaptive, verify=verify)
        out = list(dec.generate(ids, n))
        st = dec.stats
        spec.append(st.decode_tok_s)
        if out != toks:
            raise SystemExit(f"spec output differs from plain decode (verify={verify}): the gate failed")
    return statistics.median(plain), statistics.median(spec), st


def cell_ngram(args, rows, summary) -> None:
    from bw24.engine import Engine
    from bw24.engine.spec import NgramDrafter

    eng = Engine.load("smollm2-135m", backend=args.backend)
    ids = eng.chat_ids([{"role": "user", "content": CODE_PROMPT}])
    for verify in ("rowwise", "batched"):
        p, s, st = run_pair(eng, NgramDrafter(), ids, args.n, 4, verify, args.reps)
        summary.append(f"ngram  smollm2-135m verify={verify}: plain {p:.1f} tok/s, spec {s:.1f} tok/s = {s / p:.2f}x "
                       f"(target >= 1.5x), acceptance {st.acceptance:.2f}, {st.tokens_per_round:.2f} tok/round")
        rows.append(dict(cell=f"spec-ngram-smollm2-{verify}", tok_s=s, plain_tok_s=p, acceptance=st.acceptance,
                         tokens_per_round=st.tokens_per_round, device=device(eng)))


def round_costs(eng, drafter, ids, k, verify, reps):
    """Median seconds: one plain step, one draft+verify round (fixed K), its verify alone."""
    from bw24.engine import SamplingParams
    from bw24.engine.spec import SpecDecoder, Verifier
    from bw24.engine.spec.runner import plain_decode

    n = 8 * (k + 1) + 1
    step = statistics.median(plain_decode(eng.model, ids, n, SamplingParams())[1] / (n - 1) for _ in range(reps))
    rnd = []
    for _ in range(reps):
        dec = SpecDecoder(eng.model, drafter, k=k, verify=verify)
        list(dec.generate(ids, n))
        rnd.append(dec.stats.decode_s / max(dec.stats.rounds, 1))
    st = dec.stats
    v = Verifier(eng.model, verify)
    ver = []
    for _ in range(reps):
        eng.model.kv.reset()
        eng.model.feed(ids)
        ver.append(timed(lambda: v.forward(ids[-1:] * (k + 1))))
    return step, statistics.median(rnd), statistics.median(ver), st


def cell_self(args, rows, summary, out) -> None:
    from bw24.engine import Engine
    from bw24.engine.spec import DraftModelDrafter

    path = synth_model(out, "qwen3-0.6b" if args.quick else "qwen3-8b")
    eng, dr = Engine.load(path, backend=args.backend), Engine.load(path, backend=args.backend)
    ids = eng.tokenizer.encode(CODE_PROMPT, add_special=True)
    k = 4
    for verify in ("rowwise", "batched"):
        step, rnd, ver, st = round_costs(eng, DraftModelDrafter(dr.model), ids, k, verify, args.reps)
        over = (rnd - k * step - ver) / (k + 1) / step
        summary.append(f"self   {path.name} K={k} verify={verify}: acceptance {st.acceptance:.3f} (must be 1.0), "
                       f"round {rnd * 1e3:.2f} ms = {k} draft steps + verify {ver * 1e3:.2f} ms + machinery; "
                       f"overhead per accepted token {100 * over:.1f}% of a plain step (target < 10%); "
                       f"end-to-end {(k + 1) * step / rnd:.2f}x of plain per token")
        rows.append(dict(cell=f"spec-self-{path.stem}-{verify}", tok_s=(k + 1) / rnd, acceptance=st.acceptance,
                         tokens_per_round=st.tokens_per_round, overhead=over, device=device(eng)))


def cell_mtp(args, rows, summary, out) -> None:
    from bw24.engine import Engine
    from bw24.engine.spec import MTPDrafter

    path = synth_model(out, "qwen3-0.6b" if args.quick else "qwen3-8b", mtp=1)
    eng = Engine.load(path, backend=args.backend)
    ids = eng.tokenizer.encode(CODE_PROMPT, add_special=True)
    for verify in ("rowwise", "batched"):
        step, rnd, ver, st = round_costs(eng, MTPDrafter(eng.model, eng.gguf), ids, 3, verify, args.reps)
        summary.append(f"mtp    {path.name} K=3 verify={verify}: round {rnd * 1e3:.2f} ms vs plain step "
                       f"{step * 1e3:.2f} ms = {rnd / step:.2f}x (target <= 1.25x); verify alone {ver * 1e3:.2f} ms")
        rows.append(dict(cell=f"spec-mtp-{path.stem}-{verify}", round_over_step=rnd / step,
                         tokens_per_round=st.tokens_per_round, acceptance=st.acceptance, device=device(eng)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--cells", default="exact,ngram,self,mtp")
    ap.add_argument("--quick", action="store_true", help="qwen3-0.6b shapes instead of qwen3-8b")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("-n", type=int, default=128)
    args = ap.parse_args()
    out = Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    summary: list[str] = []
    cells = args.cells.split(",")
    if "exact" in cells:
        from bw24.engine import Engine

        cell_exact(Engine.load("smollm2-135m", backend=args.backend), rows, summary)
    if "ngram" in cells:
        cell_ngram(args, rows, summary)
    if "self" in cells:
        cell_self(args, rows, summary, out)
    if "mtp" in cells:
        cell_mtp(args, rows, summary, out)
    stamp, sha = time.strftime("%Y-%m-%dT%H:%M:%S%z"), git_sha()
    with open(out / "spec_bench.jsonl", "a") as fh:
        for r in rows:
            fh.write(json.dumps({"time": stamp, "git": sha, **r}) + "\n")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
