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
writes the best value per model to OUTDIR/best_<model>. Where a shape's fastest (W, R, loads) beats the table's
entry by more than MARGIN, it goes into a candidate table, OUTDIR/table/<device-key>.json (the committed one with
those entries replaced), which the session's `ab` stage runs against the committed one
(`BW24_TUNING_DIR=/tmp/r/loads/table`): the whole step decides, as the 8B's output projection showed at def966d
(the sweep's winner, 6% faster alone, cost the step 2% at depth 4096).
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
from table_variant import write_variant  # noqa: E402

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
# the 8B's Q8_0 and Q4_0 variants (every weight of one type): --shapes all adds them
SHAPES_8B_VARIANTS = tuple((f"8b-{qn.lower()}", part, qn, n, k, 1.0) for qn in ("Q8_0", "Q4_0")
                           for part, n, k in (("qkv", 6144, 4096), ("wo", 4096, 4096), ("gate_up", 24576, 4096),
                                              ("down", 4096, 12288)))
# A candidate table's entry replaces the table's config only where the sweep's best beats it by more than this
# (the sweep's own run-to-run spread is a few percent; the whole step decides: the session's `ab` stage).
MARGIN = 0.03
# models whose decode runs these shapes on plain qmv8 launches (the 0.6B's output and down projections are
# norm-ahead producers, qmv8_na, whose warps a row set differ: not swept here, so not rewritten)
CANDIDATE_MODELS = ("8b", "32b", "8b-q8_0", "8b-q4_0")
ALT = ((1, 1), (1, 2), (2, 2), (2, 4), (4, 1), (4, 2), (4, 4), (8, 1), (8, 2))


def configs(ops, qn: str, n: int, k: int) -> tuple[tuple[int, int], list[tuple[int, int]]]:
    """The table's (W, R) for this shape (what a model launches) first, then the others a thread has groups for."""
    from gguf.constants import GGMLQuantizationType as Q

    _, w, r = ops.qmv_configs.plan(Q[qn], n, k)
    rest = [c for c in ALT if c != (w, r) and 32 * c[0] <= k // 32]
    return (w, r), [(w, r)] + rest


def candidate_entries(table: dict, current_loads: dict) -> dict:
    """The sweep's per-shape winners worth a table entry: {(type, "NxK"): {"warps", "rows"[, "loads"]}} for the
    shapes of CANDIDATE_MODELS whose fastest (W, R, loads) beats the table's config at the table's loads by more than
    MARGIN. table: (model, part, type) -> (times {(W, R, loads): us}, (W, R) of the table, bytes); current_loads:
    (type, "NxK") -> the table's loads for that shape."""
    out = {}
    shapes = {s[:3]: f"{s[3]}x{s[4]}" for s in SHAPES + SHAPES_8B_VARIANTS}
    for (model, part, qn), (times, tab, _) in table.items():
        key = (qn, shapes[(model, part, qn)])
        now = times.get((*tab, current_loads.get(key, 0)))
        if model not in CANDIDATE_MODELS or now is None or not times:
            continue
        w, r, v = min(times, key=times.get)
        if times[(w, r, v)] < now * (1 - MARGIN):
            out[key] = {"warps": w, "rows": r, **({"loads": v} if v else {})}
    return out


def write_candidate(out: Path, entries: dict, note: str) -> Path | None:
    """This device's committed table with the candidate entries in place, as OUTDIR/table/<device-key>.json: what
    `BW24_TUNING_DIR=OUTDIR/table` reads (the session's `ab` stage against the committed one). None when no entry
    changes (then there is nothing to compare)."""
    import json

    from bw24.engine.ops.cuda.launch import TUNING_DIR
    from bw24.runtime import device_info, device_key

    if not entries:
        return None
    d = device_info()
    key = device_key(d.name, d.cc)
    src = Path(TUNING_DIR) / f"{key}.json"
    data = (json.loads(src.read_text()) if src.is_file()
            else {"schema": 1, "device": d.name, "cc": f"{d.cc[0]}.{d.cc[1]}", "key": key})
    q = data.setdefault("qmatvec", {})
    for (qn, shape), cfg in sorted(entries.items()):
        q.setdefault(qn, {"default": {"warps": cfg["warps"], "rows": cfg["rows"]}, "shapes": {}})["shapes"][shape] = cfg
    data.setdefault("provenance", {})["qmatvec_loads_candidate"] = {"script": "packages/bw24-engine/benchmarks/"
                                                                    "gpu_qmv8_loads.py", "note": note,
                                                                    "entries": {f"{k[0]} {k[1]}": v for k, v
                                                                                in sorted(entries.items())}}
    return write_variant(out / "table", data)  # (read back as bw24 reads it)


def compile_all(ops, shapes, loads: list[int], summary: list[str]) -> None:
    from bw24.engine.ops.cuda.repack import FMT
    from gguf.constants import GGMLQuantizationType as Q

    names = sorted({f"qmv8<{FMT[Q[qn]]},{w},{r},1>" for _, _, qn, n, k, _ in shapes
                    for w, r in configs(ops, qn, n, k)[1]})
    base = (("BW24_PDL", 1),) if ops.pdl else ()
    jobs = [("qmatvec_q8.cu", nm, base + ((("QMV8_DECODE_LOADS", v),) if v else ())) for v in loads for nm in names]
    precompile(jobs + [("qmatvec_q8.cu", "", base)], summary)


def run(out: Path, loads: list[int], shapes=SHAPES) -> list[str]:
    import cupy as cp
    from bw24.engine.ops.cuda import CudaOps, q8
    from gguf.constants import GGMLQuantizationType as Q

    ops = CudaOps()
    summary: list[str] = [f"loads {loads}; pdl {ops.pdl}; times: one matvec, the activation's int8 rows ready"]
    compile_all(ops, shapes, loads, summary)
    rng = np.random.default_rng(0)
    log: list[str] = []
    table: dict = {}  # (model, part, qn) -> ({(w, r, loads): us}, the table's (w, r), the weight's bytes)
    for model, part, qn, n, k, _ in shapes:
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
    weight = {s[:3]: s[5] for s in shapes}
    for model in dict.fromkeys(s[0] for s in shapes):
        sums = {}
        for v in loads:
            ts = [(times.get((*tab, v)), weight[key]) for key, (times, tab, _) in table.items() if key[0] == model]
            sums[v] = sum(t * wt for t, wt in ts) if all(t is not None for t, _ in ts) else float("inf")
        best = min(sums, key=sums.get)
        summary.append(f"{model}: one layer's projections at the table's configs, us by loads: "
                       + ", ".join(f"{v}: {s:.2f}" for v, s in sums.items()) + f"; best {best} "
                       f"({100 * (sums[best] / sums[loads[0]] - 1):+.1f}% vs loads={loads[0]})")
        (out / f"best_{model}").write_text(f"{best}\n")
    current = {(qn, f"{n}x{k}"): ops.qmv_configs.loads(Q[qn], n, k) for _, _, qn, n, k, _ in shapes}
    entries = candidate_entries(table, current)
    path = write_candidate(out, entries, f"the sweep's winners by more than {MARGIN:.0%} over the table's config")
    summary.append(f"candidate table: {path or 'none (no shape beats its entry by more than the margin)'}"
                   + "".join(f"\n  {qn} {sh}: {cfg}" for (qn, sh), cfg in sorted(entries.items())))
    return summary


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--loads", default="0,1,2,4,8,16")
    ap.add_argument("--shapes", default="models", choices=("models", "all"),
                    help="all: also the 8B's Q8_0 and Q4_0 variants' shapes")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    summary = run(out, [int(v) for v in a.loads.split(",")], SHAPES + (SHAPES_8B_VARIANTS if a.shapes == "all" else ()))
    summary.append(f"total {time.perf_counter() - t:.1f} s")
    (out / "summary.txt").write_text(header() + "\n".join(summary) + "\n")
    print("\n==== SUMMARY ====\n" + header() + "\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
