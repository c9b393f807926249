"""The decode q8 matvec's weight loads in flight (BW24_QMV8_LOADS, kernels/qmatvec_q8.cu QMV8_DECODE_LOADS) at the
8B's, the 32B's and the 0.6B's shapes: one GPU call.

    python packages/bw24-engine/benchmarks/gpu_qmv8_loads.py OUTDIR [--loads 0,1,2,4,8,16]

For each shape (the models' Q/K/V, output, gate/up and down projections as single matvecs) and each config: the
tuning table's (W, R), which the models launch, and a few others. Each (config, loads) is one CUDA graph of one
matvec per weight copy (copies over > 2x L2, so every byte comes from HBM), CUDA events, median of 5 replays; the
activation's int8 rows are quantized once and marked ready, as a fused producer leaves them (so the times are the
matvec's alone, as in a decode step). Every variant's output is compared bitwise with loads = 0 of the same config
(the batched loop must sum in the same order) before it is timed.

Prints a table per shape (GB/s of the repacked weight, % of 4.46 TB/s), then per model the summed time of its
projections at the table's configs for each loads value (down: half Q4_K and half Q6_K layers, as Q4_K_M), and
writes the best value per model to OUTDIR/best_<model> (read by the session chain's A/B stage).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_matvec import _time_graph, precompile  # noqa: E402
from gpu_matvec_q8 import _clone, _weight  # noqa: E402
from gpu_session import header  # noqa: E402

PEAK = 4.46e12  # the H200's measured HBM read bandwidth (ARCHITECTURE.md)
# (model, part, quant type, N, K, weight of the part in the model's per-layer sum)
SHAPES = (("8b", "qkv", "Q4_K", 6144, 4096, 1.0), ("8b", "wo", "Q4_K", 4096, 4096, 1.0),
          ("8b", "gate_up", "Q4_K", 24576, 4096, 1.0), ("8b", "down", "Q4_K", 4096, 12288, 0.5),
          ("8b", "down", "Q6_K", 4096, 12288, 0.5),
          ("32b", "qkv", "Q4_K", 10240, 5120, 1.0), ("32b", "wo", "Q4_K", 5120, 8192, 1.0),
          ("32b", "gate_up", "Q4_K", 51200, 5120, 1.0), ("32b", "down", "Q4_K", 5120, 25600, 0.5),
          ("32b", "down", "Q6_K", 5120, 25600, 0.5),
          ("0.6b", "wo", "Q4_K", 1024, 2048, 1.0), ("0.6b", "down", "Q6_K", 1024, 3072, 0.5),
          ("0.6b", "down", "Q4_K", 1024, 3072, 0.5))
ALT = ((1, 1), (1, 2), (2, 2), (2, 4), (4, 1), (4, 2), (4, 4), (8, 1), (8, 2))


def configs(ops, qn: str, n: int, k: int) -> tuple[tuple[int, int], list[tuple[int, int]]]:
    """The table's (W, R) for this shape (what a model launches) first, then the others a thread has groups for."""
    from gguf.constants import GGMLQuantizationType as Q

    _, w, r = ops.qmv_configs.plan(Q[qn], n, k)
    rest = [c for c in ALT if c != (w, r) and 32 * c[0] <= k // 32]
    return (w, r), [(w, r)] + rest


def compile_all(ops, loads: list[int], summary: list[str]) -> None:
    from bw24.engine.ops.cuda.repack import FMT
    from gguf.constants import GGMLQuantizationType as Q

    names = sorted({f"qmv8<{FMT[Q[qn]]},{w},{r},1>" for _, _, qn, n, k, _ in SHAPES
                    for w, r in configs(ops, qn, n, k)[1]})
    base = (("BW24_PDL", 1),) if ops.pdl else ()
    jobs = [("qmatvec_q8.cu", nm, base + ((("QMV8_DECODE_LOADS", v),) if v else ())) for v in loads for nm in names]
    precompile(jobs + [("qmatvec_q8.cu", "", base)], summary)


def run(out: Path, loads: list[int]) -> list[str]:
    import cupy as cp
    from bw24.engine.ops.cuda import CudaOps, q8
    from gguf.constants import GGMLQuantizationType as Q

    ops = CudaOps()
    summary: list[str] = [f"loads {loads}; pdl {ops.pdl}; times: one matvec, the activation's int8 rows ready"]
    compile_all(ops, loads, summary)
    rng = np.random.default_rng(0)
    log: list[str] = []
    table: dict = {}  # (model, part, qn) -> {(w, r, loads): us}
    for model, part, qn, n, k, _ in SHAPES:
        t0 = time.perf_counter()
        w0 = _weight(ops, Q[qn], n, k, rng)
        copies = max(20, min(400, math.ceil(2 * 60e6 / w0.nbytes) + 1))
        ws = [w0] + [_clone(ops, w0) for _ in range(copies - 1)]
        x, y = ops._put(rng.standard_normal((1, k)).astype(np.float32)), ops.zeros((1, n))
        tab, cfgs = configs(ops, qn, n, k)
        times: dict = {}
        for w, r in cfgs:
            ops.set_launch_config("qmatvec", qn, {"warps": w, "rows": r, "path": "q8"})
            want = None
            for v in loads:
                ops.qmv8_loads = v
                q8.quantize(ops, x)
                q8.mark_ready(ops, x)
                ops.matmul(w0, x, out=y)
                got = ops.to_host(y)
                if want is None:
                    want = got
                elif not np.array_equal(got.view(np.int32), want.view(np.int32)):
                    log.append(f"{qn} {n}x{k} W={w} R={r} loads={v}: NOT BITWISE the loads={loads[0]} output")
                    print(log[-1], flush=True)
                    continue

                def body(ws=ws, x=x, y=y):
                    q8.quantize(ops, x)
                    for wi in ws:
                        q8.mark_ready(ops, x)
                        ops.matmul(wi, x, out=y)

                us = _time_graph(ops, body, len(ws))
                times[(w, r, v)] = us
                log.append(f"{model:<4} {part:<7} {qn:<4} {n:>6}x{k:<6} W={w} R={r:<2} loads={v:<2} {us:8.2f} us "
                           f"{w0.nbytes / us / 1e3:6.0f} GB/s {100 * w0.nbytes / us / 1e6 * 1e12 / PEAK:5.1f}%"
                           f"{'  (table)' if (w, r) == tab else ''}")
                print(log[-1], flush=True)
        ops.set_launch_config("qmatvec", qn, None)
        ops.qmv8_loads = None  # (the table's again)
        table[(model, part, qn)] = (times, tab, w0.nbytes)
        del ws, w0
        cp.get_default_memory_pool().free_all_blocks()
        log.append(f"-- {model} {part} {qn} {n}x{k}: {copies} copies, {time.perf_counter() - t0:.1f} s")
    (out / "qmv8_loads.log").write_text(header() + "\n".join(log) + "\n")

    summary.append("model part    type  table(W,R) | GB/s at loads " + " ".join(f"{v:>6}" for v in loads)
                   + " | best (W,R,loads) GB/s")
    for (model, part, qn), (times, tab, nb) in table.items():
        at = [nb / times[(*tab, v)] / 1e3 if (*tab, v) in times else float("nan") for v in loads]
        bw, br, bv = min(times, key=times.get)
        summary.append(f"{model:<5} {part:<7} {qn:<5} ({tab[0]},{tab[1]:>2})     | {'':14}"
                       + " ".join(f"{g:6.0f}" for g in at) + f" | ({bw},{br},{bv}) {nb / times[(bw, br, bv)] / 1e3:6.0f}")
    weight = {s[:3]: s[5] for s in SHAPES}
    for model in dict.fromkeys(s[0] for s in SHAPES):
        sums = {}
        for v in loads:
            ts = [(times.get((*tab, v)), weight[key]) for key, (times, tab, _) in table.items() if key[0] == model]
            sums[v] = sum(t * wt for t, wt in ts) if all(t is not None for t, _ in ts) else float("inf")
        best = min(sums, key=sums.get)
        summary.append(f"{model}: one layer's projections at the table's configs, us by loads: "
                       + ", ".join(f"{v}: {s:.2f}" for v, s in sums.items()) + f"; best {best} "
                       f"({100 * (sums[best] / sums[loads[0]] - 1):+.1f}% vs loads={loads[0]})")
        (out / f"best_{model}").write_text(f"{best}\n")
    return summary


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--loads", default="0,1,2,4,8,16")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    summary = run(out, [int(v) for v in a.loads.split(",")])
    summary.append(f"total {time.perf_counter() - t:.1f} s")
    (out / "summary.txt").write_text(header() + "\n".join(summary) + "\n")
    print("\n==== SUMMARY ====\n" + header() + "\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
