"""One GPU call that checks and times the CUDA backend (device time is scarce: do it all at once).

python packages/bw24-engine/benchmarks/gpu_session.py OUTDIR [--stages check,bench,e2e,big]
Prints a short table last; full logs under OUTDIR.
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]


def header() -> str:
    from bw24.runtime import describe

    sha = os.environ.get("BW24_GIT", "")  # h200_session.sh passes the sha it was given (the host's .git may be stale)
    try:
        sha = sha or subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                    text=True).stdout.strip() or "uncommitted"
    except OSError:
        sha = "?"
    return f"# device: {describe()}\n# date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}\n# git: {sha}\n"


def stage_check(out: Path, summary: list[str]) -> None:
    from bw24.engine.kernel_check import main

    lines: list[str] = []
    rc = main(out=lambda s: (print(s, flush=True), lines.append(s)))
    (out / "kernel_check.log").write_text(header() + "\n".join(lines) + "\n")
    summary.append(f"kernel_check rc={rc} last: {lines[-1]}")
    planted: list[str] = []
    rc2 = main(variant="planted_bug", only="matmul Q4_1", out=planted.append)
    nfail = sum(" FAIL" in s for s in planted)
    summary.append(f"planted-bug canary: rc={rc2}, {nfail} FAIL lines (must be > 0)")


def bench_qmv(summary: list[str]) -> None:
    import cupy as cp
    from bw24.engine.ops.cuda import CudaOps
    from bw24.engine.ops.cuda.repack import random_raw
    from bw24.runtime import CapturedGraph
    from gguf.constants import GGMLQuantizationType as Q

    ops = CudaOps()
    rng = np.random.default_rng(0)
    shapes = [(4096, 4096), (12288, 4096), (4096, 12288), (151936, 4096), (576, 576), (1536, 576)]
    summary.append("qmatvec  type   N x K          us/call   GB/s (repacked bytes)")
    for qt in (Q.Q4_K, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q6_K, Q.Q5_0, Q.F16):
        for n, k in shapes:
            if qt in (Q.Q4_K, Q.Q6_K) and k % 256:
                continue
            w = ops.weight_from_raw("w", random_raw(qt, n, k, rng), qt, (n, k))
            nbuf = max(1, math.ceil(3 * 60e6 / w.nbytes))  # rotate > L2 so we time HBM, not cache
            ws = [w] + [ops.weight_from_raw("w", random_raw(qt, n, k, rng), qt, (n, k)) for _ in range(min(nbuf, 4) - 1)]
            x = ops._put(rng.standard_normal((1, k)).astype(np.float32))
            y = ops.zeros((1, n))
            for ww in ws:
                ops.matmul(ww, x, out=y)
            reps = 20

            def body(ws=ws, x=x, y=y, reps=reps):
                for i in range(reps):
                    ops.matmul(ws[i % len(ws)], x, out=y)

            g = CapturedGraph(ops.stream).capture(body)
            g.replay()
            ops.synchronize()
            ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
            times = []
            for _ in range(5):
                ev0.record(ops.stream)
                g.replay()
                ev1.record(ops.stream)
                ev1.synchronize()
                times.append(cp.cuda.get_elapsed_time(ev0, ev1) / reps * 1e3)
            us = float(np.median(times))
            summary.append(f"qmatvec  {qt.name:<5} {n:>6} x {k:<6} {us:9.1f} {w.nbytes / us / 1e3:9.0f}")
            del ws, g


def _synth(out: Path, name: str, mix: str = "q4_k_m") -> Path:
    from bw24.gguf.synth import synth

    path = out.parent / "models" / f"{name}-{mix}.gguf"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        synth(name, path, mix=mix, seed=1)
    return path


def stage_e2e(out: Path, summary: list[str],
              presets=("llama-tiny", "qwen2-tiny", "qwen3-tiny", "gemma3-tiny")) -> None:
    from bw24.engine import Engine
    from bw24.engine.graph import greedy_decode

    for name in presets:
        path = _synth(out, name)
        cpu = Engine.load(str(path), backend="cpu", progress=False)
        gpu = Engine.load(str(path), backend="cuda", progress=False)
        ids = [int(i) for i in np.random.default_rng(3).integers(10, 500, 20)]
        a, b = cpu.logits(ids), gpu.logits(ids)
        tc = greedy_decode(cpu.model, ids, 32)
        tg = greedy_decode(gpu.model, ids, 200, ahead=4)
        gpu.ops.use_graphs = False
        te = greedy_decode(gpu.model, ids, 200)
        v = gpu.verify_prefill(ids)
        summary.append(f"e2e {name:<12} prefill logits maxdiff={np.abs(a - b).max():.2e}  greedy32 cpu==gpu: "
                       f"{tc == tg[:32]}  graph==eager(200): {tg == te}  | {v.line()}")


def stage_speed(out: Path, summary: list[str], presets=(("qwen3-0.6b", "q4_k_m"), ("qwen3-8b", "q4_k_m")),
                n_tok=128) -> None:
    from bw24.engine import Engine
    from bw24.engine.graph import greedy_decode

    for name, mix in presets:
        t = time.perf_counter()
        path = _synth(out, name, mix)
        t_synth = time.perf_counter() - t
        t = time.perf_counter()
        eng = Engine.load(str(path), backend="cuda", n_ctx=4096, progress=False)
        t_load = time.perf_counter() - t
        ids = list(range(100, 612))
        for graphs, ahead in ((True, 1), (False, 1), (True, 4)):
            eng.ops.use_graphs = graphs
            eng.model.kv.reset()
            t = time.perf_counter()
            eng.model.feed(ids)
            eng.ops.synchronize()
            t_pre = time.perf_counter() - t
            t = time.perf_counter()
            toks = greedy_decode(eng.model, ids, n_tok, ahead=ahead)
            t_dec = time.perf_counter() - t - t_pre  # greedy_decode repeats the prefill
            summary.append(f"speed {name}-{mix:<7} graphs={graphs!s:<5} ahead={ahead} decode {(n_tok - 1) / t_dec:7.1f} "
                           f"tok/s  prefill512 {len(ids) / t_pre:7.0f} tok/s  weights {eng.ops.weight_bytes / 1e9:.2f} GB "
                           f"(synth {t_synth:.0f}s load {t_load:.0f}s) toks {toks[:3]}")
        del eng


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--stages", default="check,e2e,bench,speed")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: list[str] = []
    stages = args.stages.split(",")
    fns = {"check": lambda: stage_check(out, summary), "bench": lambda: bench_qmv(summary),
           "e2e": lambda: stage_e2e(out, summary), "speed": lambda: stage_speed(out, summary)}
    for s in stages:
        t = time.perf_counter()
        try:
            fns[s]()
        except Exception as e:  # keep going: one broken stage must not hide the others' numbers
            import traceback

            traceback.print_exc()
            summary.append(f"STAGE {s} ERROR: {type(e).__name__}: {e}")
        summary.append(f"-- stage {s}: {time.perf_counter() - t:.1f} s")
    text = header() + "\n".join(summary) + "\n"
    (out / "summary.txt").write_text(text)
    print("\n==== SUMMARY ====\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
