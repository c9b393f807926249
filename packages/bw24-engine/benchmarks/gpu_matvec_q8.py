"""One GPU call for the q8 matvec path (issue 5): q8 kernel_check cases (+ planted-bug canary), then a
sweep of both paths ("f32" qmv, "q8" quantize_x + qmv8) over (warps, rows) at the 8B / 0.6B shapes,
printing GB/s and % of 4.5 TB/s per config and the best per (type, shape) per path, and writing a
tuning table (OUTDIR/<device-key>.json, section qmatvec, "path" per entry) the lead can merge.

    python packages/bw24-engine/benchmarks/gpu_matvec_q8.py OUTDIR [--stages compile,check,sweep] [--types Q4_K,...]
Timing: one CUDA graph per (type, shape, path, config) of one matmul per weight copy, the copies (device
clones of one repacked weight, row-tiled for big N) spanning > 2x L2 (60 MB) so every byte comes from HBM;
CUDA events, median of 5 replays. q8 times include its quantize_x launch (what a decode matmul pays).
GB/s counts the repacked weight bytes. Each config is checked against a float64 product first.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_matvec import _time_graph, precompile, run_stages  # noqa: E402
from gpu_session import header  # noqa: E402

PEAK = 4.5e12
SHAPES_8B = ((6144, 4096), (24576, 4096), (4096, 4096), (4096, 12288), (151936, 4096))
SHAPES_06B = ((4096, 1024), (6144, 1024), (1024, 2048), (1024, 3072), (151936, 1024))
WARPS, ROWS = (1, 2, 4, 8), (1, 2, 4, 8, 16)
TILE_ROWS = 8192  # host-repack at most this many rows, then tile on the device (same bytes per row)


def configs(k: int) -> list[tuple[int, int]]:
    """Prune: more warps than K has groups for leaves threads idle; R=1 only matters at small N."""
    g = k // 32
    return [(w, r) for w, r in itertools.product(WARPS, ROWS) if 32 * w <= max(g, 32) and (r > 1 or w >= 2)]


def _names(types) -> dict[str, list[str]]:
    from bw24.engine.ops.cuda.repack import FMT
    from gguf.constants import GGMLQuantizationType as Q

    wr = sorted({c for _, k in SHAPES_8B + SHAPES_06B for c in configs(k)})
    fm = [FMT[Q[t]] for t in types]
    q8 = [f"qmv8<{f},{w},{r},1>" for f in fm for w, r in wr]
    # what kernel_check's q8 cases launch (kernel_cases_q8.py): matmul T buckets, multi, decode==verify
    f8 = range(3, 10)
    q8 += [f"qmv8<{f},4,1,{nt}>" for f in f8 for nt in (4, 16)] + [f"qmv8<{f},4,8,1>" for f in f8]
    q8 += [f"qmv8<{f},{w},1,{nt}>" for f, w in ((9, 1), (4, 2), (5, 8), (6, 1)) for nt in (4, 16)]
    multi = ("7,7,9", "3,3,3", "7,7,7", "4,4,4", "6,6,3", "5,5,5")
    q8 += [f"qmv8_3<{m},4,{r},{nt}>" for m in multi for r, nt in ((8, 1), (1, 4), (1, 16))]
    return {"qmatvec.cu": [f"qmv<{f},{w},{r},1>" for f in fm for w, r in wr] + [f"dequant_rows<{f}>" for f in fm],
            "qmatvec_q8.cu": [""] + sorted(set(q8))}  # "": the plain module (extern "C" quantize_x)


def stage_compile(types, summary: list[str]) -> None:
    precompile([(f, n) for f, names in _names(types).items() for n in names], summary)


def stage_check(out: Path, summary: list[str]) -> None:
    from bw24.engine.kernel_check import main

    lines: list[str] = []
    rc = main(only="q8 ", out=lambda s: (print(s, flush=True), lines.append(s)))
    bug: list[str] = []
    rc2 = main(variant="planted_bug", only="q8 matmul Q4_K", out=bug.append)
    (out / "kernel_check_q8.log").write_text(header() + "\n".join(lines + ["-- planted bug:"] + bug) + "\n")
    summary.append(f"kernel_check q8 rc={rc} last: {lines[-1]}")
    summary.append(f"kernel_check q8 planted bug rc={rc2} (must be 1): {bug[-1]}")


def _weight(ops, qt, n: int, k: int, rng):
    """A device weight [n, k]: random rows repacked on the host, row-tiled on the device when n is big."""
    import cupy as cp
    from bw24.engine.ops.cuda.repack import random_raw, repack
    from bw24.engine.ops.cuda.weights import QWeight

    m = min(n, TILE_ROWS)
    p = repack(random_raw(qt, m, k, rng), qt, (m, k))
    planes = {}
    for name, a in p.planes.items():
        d = ops._put(a)
        if m < n:
            with ops.stream:
                d = cp.ascontiguousarray(cp.tile(d, (math.ceil(n / m),) + (1,) * (d.ndim - 1))[:n])
        planes[name] = d
    nbytes = sum(int(a.nbytes) for a in planes.values())
    return QWeight("w", p.qtype, p.fmt, (n, k), n, k, planes, nbytes)


def _clone(ops, w):
    from bw24.engine.ops.cuda.weights import QWeight

    with ops.stream:
        planes = {k: v.copy() for k, v in w.planes.items()}
    return QWeight(w.name, w.qtype, w.fmt, w.shape, w.n, w.k, planes, w.nbytes)


def _reference(ops, w, xh):
    """float64 products of the dequantized weight with x (f32 path) and with quantize_x's x (q8 path)."""
    import cupy as cp
    from bw24.engine.ops.cuda.q8 import dequantize_x_ref

    n, k = w.n, w.k
    deq = ops.zeros((n, k))
    ops._launch(ops._k("qmatvec.cu", f"dequant_rows<{w.fmt}>"), (math.ceil(n * (k // 32) / 128),), 128,
                (*w.args(), np.uintp(0), np.int32(0), np.int32(n), np.int32(k), np.float32(1.0), deq))
    out = {}
    with ops.stream:  # float64, chunked by rows (an fp32 GEMV is too loose a reference at K = 12288)
        for p, v in (("f32", xh), ("q8", dequantize_x_ref(xh))):
            xv, acc = cp.asarray(v[0], cp.float64), []
            for r0 in range(0, n, 16384):
                acc.append(cp.asnumpy(deq[r0:r0 + 16384].astype(cp.float64) @ xv))
            out[p] = np.concatenate(acc)
    del deq
    return out


def stage_sweep(out: Path, types, summary: list[str]) -> dict:
    import cupy as cp
    from bw24.engine.ops.cuda import CudaOps
    from bw24.engine.ops.cuda.launch import default_qmv
    from bw24.runtime import Tuning
    from gguf.constants import GGMLQuantizationType as Q

    ops = CudaOps()
    ops.qmv_configs.tuning = Tuning()  # sweep from a clean slate
    rng = np.random.default_rng(0)
    log, res = [], {}
    for qn in types:
        qt = Q[qn]
        for n, k in SHAPES_8B + SHAPES_06B:
            t0 = time.perf_counter()
            w0 = _weight(ops, qt, n, k, rng)
            copies = max(20, min(400, math.ceil(2 * 60e6 / w0.nbytes) + 1))
            ws = [w0] + [_clone(ops, w0) for _ in range(copies - 1)]
            xh = rng.standard_normal((1, k)).astype(np.float32)
            x, y = ops._put(xh), ops.zeros((1, n))
            ref = _reference(ops, w0, xh)
            rows: dict = {}
            for path, (wa, ra) in itertools.product(("f32", "q8"), configs(k)):
                ops.set_launch_config("qmatvec", qn, {"warps": wa, "rows": ra, "path": path})
                ops.matmul(w0, x, out=y)
                got = ops.to_host(y)[0]
                rel = float(np.linalg.norm(got - ref[path]) / np.linalg.norm(ref[path]))
                if not rel <= 2e-5:
                    log.append(f"{qn} {n}x{k} {path} W={wa} R={ra} WRONG rel={rel:.2e}")
                    continue

                def body(ws=ws, x=x, y=y):
                    for wi in ws:
                        ops.matmul(wi, x, out=y)

                us = _time_graph(ops, body, len(ws))
                rows[(path, wa, ra)] = us
                gbs = w0.nbytes / us / 1e3
                log.append(f"{qn:<5} {n:>6}x{k:<5} {path:<3} W={wa} R={ra:<2} {us:8.2f} us {gbs:6.0f} GB/s "
                           f"{100 * gbs * 1e9 / PEAK:5.1f}% rel={rel:.1e}")
                print(log[-1], flush=True)
            ops.set_launch_config("qmatvec", qn, None)
            d = default_qmv(n, k)
            res[(qn, n, k)] = (rows, w0.nbytes, ("f32", d["warps"], d["rows"]))
            del ws, w0
            cp.get_default_memory_pool().free_all_blocks()
            log.append(f"-- {qn} {n}x{k}: {copies} copies, {time.perf_counter() - t0:.1f} s")
    (out / "sweep_q8.log").write_text(header() + "\n".join(log) + "\n")
    summary.append("type  N x K            default f32(W,R) GB/s | best f32 (W,R) GB/s  %peak | best q8 (W,R) GB/s  %peak")
    for (qn, n, k), (rows, nb, d) in res.items():
        def best(p, rows=rows):
            c = [kv for kv in rows.items() if kv[0][0] == p]
            return min(c, key=lambda kv: kv[1]) if c else ((p, 0, 0), float("inf"))

        (_, fw, fr), fu = best("f32")
        (_, qw, qr), qu = best("q8")
        du = rows.get(d, float("inf"))
        summary.append(f"{qn:<5} {n:>6} x {k:<6} ({d[1]},{d[2]:>2}) {nb / du / 1e3:6.0f} | ({fw},{fr:>2}) "
                       f"{nb / fu / 1e3:6.0f} {100 * nb / fu / 1e6 * 1e12 / PEAK:5.1f} | ({qw},{qr:>2}) "
                       f"{nb / qu / 1e3:6.0f} {100 * nb / qu / 1e6 * 1e12 / PEAK:5.1f}")
    return res


def write_table(out: Path, res: dict, summary: list[str]) -> None:
    """Best config over both paths per shape; per type, the most frequent winner is the default."""
    from bw24.probe import tuning
    from bw24.runtime import device_info

    entries, ba = {}, {}
    for qn in sorted({q for q, _, _ in res}):
        per = {}
        for (q, n, k), (rows, nb, d) in res.items():
            if q != qn or not rows:
                continue
            p, w, r = min(rows, key=rows.get)
            per[f"{n}x{k}"] = {"warps": w, "rows": r, "path": p}
            ba[f"{qn} {n}x{k}"] = {"before_gbs": round(nb / rows.get(d, float("inf")) / 1e3, 1),
                                   "after_gbs": round(nb / rows[(p, w, r)] / 1e3, 1), "best": [p, w, r]}
        if per:
            entries[qn] = tuning.kind_entry(per)
    di = device_info()
    path = tuning.write_section(out, di.name, di.cc, "qmatvec", entries,
                                {"script": "packages/bw24-engine/benchmarks/gpu_matvec_q8.py",
                                 "method": "CUDA graph of one matmul per weight copy over >2x L2, median of 5; "
                                           "q8 includes quantize_x", "before": "built-in default_qmv (f32)",
                                 "before_after": ba})
    (out / "qmatvec_q8_section.json").write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n")
    summary.append(f"wrote {path} (section qmatvec; also qmatvec_q8_section.json)")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--stages", default="compile,check,sweep")
    ap.add_argument("--types", default="Q4_K,Q6_K,Q8_0,Q4_0,Q4_1,Q5_0")
    a = ap.parse_args()
    out, types = Path(a.out), a.types.split(",")
    out.mkdir(parents=True, exist_ok=True)
    summary: list[str] = []

    def sweep():
        write_table(out, stage_sweep(out, types, summary), summary)

    fns = {"compile": lambda: stage_compile(types, summary), "check": lambda: stage_check(out, summary),
           "sweep": sweep}
    return run_stages(fns, a.stages.split(","), out / "summary_q8.txt", summary)


if __name__ == "__main__":
    sys.exit(main())
