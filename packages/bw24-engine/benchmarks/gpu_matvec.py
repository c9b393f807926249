"""One GPU call for the matvec work: precompile, kernel_check, sweep qmatvec launch configs at the 8B /
0.6B shapes, write the device's tuning table, then decode speed with the table loaded.

python packages/bw24-engine/benchmarks/gpu_matvec.py OUTDIR [--stages compile,check,sweep,e2e,speed]
    [BW24_SWEEP_TYPES=Q4_K,Q6_K BW24_SWEEP_SHAPES=NxK,... BW24_SWEEP_PATH=f32]
Timing: each (type, shape, config) is one CUDA graph of 20 matvecs rotating over enough weight
copies (> 2x L2) that every byte comes from HBM; CUDA events; median of 5 replays. GB/s counts the
repacked weight bytes. Every config is checked against a float64 product before it is timed.
Prints a short table last; full logs under OUTDIR.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_session import _synth, header, stage_check, stage_e2e  # noqa: E402

QTYPES = tuple(os.environ.get("BW24_SWEEP_TYPES", "Q4_K,Q6_K,Q8_0,Q4_0,Q4_1,Q5_0").split(","))
SHAPES = ((4096, 4096), (1024, 4096), (6144, 4096), (12288, 4096), (24576, 4096), (4096, 12288),
          (151936, 4096), (1024, 1024), (4096, 1024), (6144, 1024), (1024, 3072))
# BW24_SWEEP_SHAPES="5120x2048,2048x4096" sweeps those N x K instead (e.g. the qwen3-30b-a3b's stacked Q/K/V and
# wo, which it runs on fp32 activations); BW24_SWEEP_PATH=f32 forces the fp32-activation kernel for every
# config (unset: launch.default_path's policy, int8 activations from K = 2048 on; the check below is an fp32
# one, 2e-5, so only the f32 family can be forced here: gpu_matvec_q8.py sweeps the q8 one)
if os.environ.get("BW24_SWEEP_SHAPES"):
    SHAPES = tuple(tuple(int(v) for v in s.split("x")) for s in os.environ["BW24_SWEEP_SHAPES"].split(","))
SWEEP_PATH = os.environ.get("BW24_SWEEP_PATH")
if SWEEP_PATH not in (None, "f32"):
    raise SystemExit(f"BW24_SWEEP_PATH={SWEEP_PATH!r}: only f32 (gpu_matvec_q8.py sweeps the q8 kernels)")
BIG_ONLY = ("Q4_K", "Q6_K", "Q8_0")  # the 151936-row head is timed for these (host repack is slow)


def _names() -> list[str]:
    from bw24.engine.ops.cuda.kernels import COMPILE_SET
    from bw24.engine.ops.cuda.launch import QMV_SPACE
    from bw24.engine.ops.cuda.repack import FMT
    from gguf.constants import GGMLQuantizationType as Q

    fm = [FMT[Q[q]] for q in QTYPES]
    sweep = [f"qmv<{f},{w},{r},1>" for f in fm for w, r in itertools.product(QMV_SPACE["warps"], QMV_SPACE["rows"])]
    return sorted(set(sweep) | set(COMPILE_SET["qmatvec.cu"]))


def _compile_one(job: tuple) -> str:
    """(kernel file, template instance or "" for the plain module[, defines as (name, value) pairs]) ->
    compiled into the on-disk cache (the key get_kernel(file, name, defines) looks up)."""
    from bw24.engine.ops.cuda.kernels import KERNEL_DIR
    from bw24.runtime import compile_cubin, device_info

    defines = dict(job[2]) if len(job) > 2 else {}
    compile_cubin(KERNEL_DIR / job[0], device_info().arch, defines, (job[1],) if job[1] else ())
    return job[1]


def precompile(jobs: list[tuple], summary: list[str]) -> None:
    """Compile (file, instance) jobs in parallel processes so the timed stages find them cached."""
    t = time.perf_counter()
    with ProcessPoolExecutor(max_workers=min(16, os.cpu_count() or 4)) as ex:
        list(ex.map(_compile_one, jobs, chunksize=4))
    summary.append(f"precompiled {len(jobs)} instances in {time.perf_counter() - t:.1f} s")


def stage_compile(summary: list[str]) -> None:
    precompile([("qmatvec.cu", n) for n in _names()], summary)


def _time_graph(ops, body, reps: int) -> float:
    import cupy as cp
    from bw24.runtime import CapturedGraph

    g = CapturedGraph(ops.stream).capture(body)
    g.replay()
    ops.synchronize()
    ev0, ev1, times = cp.cuda.Event(), cp.cuda.Event(), []
    for _ in range(5):
        ev0.record(ops.stream)
        g.replay()
        ev1.record(ops.stream)
        ev1.synchronize()
        times.append(cp.cuda.get_elapsed_time(ev0, ev1) / reps * 1e3)
    return float(np.median(times))


def stage_sweep(out: Path, summary: list[str]) -> dict:
    import cupy as cp
    from bw24.engine.ops.cuda import CudaOps
    from bw24.engine.ops.cuda.launch import QMV_SPACE, default_qmv
    from bw24.engine.ops.cuda.repack import random_raw
    from bw24.runtime import Tuning
    from gguf.constants import GGMLQuantizationType as Q

    ops = CudaOps()
    ops.qmv_configs.tuning = Tuning()  # sweep from a clean slate
    rng = np.random.default_rng(0)
    configs = [{"warps": w, "rows": r, **({"path": SWEEP_PATH} if SWEEP_PATH else {})}
               for w, r in itertools.product(QMV_SPACE["warps"], QMV_SPACE["rows"])]
    log, res = [], {}
    for qn in QTYPES:
        qt = Q[qn]
        for n, k in SHAPES:
            if n > 100000 and qn not in BIG_ONLY:
                continue
            raw = random_raw(qt, n, k, rng)
            w0 = ops.weight_from_raw("w", raw, qt, (n, k))
            copies = max(1, min(64, math.ceil(2 * 60e6 / w0.nbytes) + 1))
            ws = [w0] + [ops.weight_from_raw("w", raw, qt, (n, k)) for _ in range(copies - 1)]
            xh = rng.standard_normal((1, k)).astype(np.float32)
            x, y = ops._put(xh), ops.zeros((1, n))
            deq = ops.zeros((n, k))
            ops._launch(ops._k("qmatvec.cu", f"dequant_rows<{w0.fmt}>"), (math.ceil(n * (k // 32) / 128),), 128,
                        (*w0.args(), np.uintp(0), np.int32(0), np.int32(n), np.int32(k), np.float32(1.0), deq))
            with ops.stream:
                ref = cp.asnumpy(deq.astype(cp.float64) @ cp.asarray(xh[0], cp.float64))
            del deq
            reps = 20
            rows = {}
            for cfg in configs:
                ops.set_launch_config("qmatvec", qn, cfg)
                ops.matmul(w0, x, out=y)
                got = ops.to_host(y)[0]
                rel = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
                if not rel <= 2e-5:
                    log.append(f"{qn} {n}x{k} {cfg} WRONG rel={rel:.2e}")
                    continue

                def body(ws=ws, x=x, y=y, reps=reps):
                    for i in range(reps):
                        ops.matmul(ws[i % len(ws)], x, out=y)

                us = _time_graph(ops, body, reps)
                rows[(cfg["warps"], cfg["rows"])] = us
                log.append(f"{qn} {n}x{k} W={cfg['warps']} R={cfg['rows']} {us:8.2f} us {w0.nbytes / us / 1e3:7.0f} GB/s rel={rel:.1e}")
            ops.set_launch_config("qmatvec", qn, None)
            d = default_qmv(n, k)
            res[(qn, n, k)] = (rows, w0.nbytes, (d["warps"], d["rows"]))
            del ws, w0
            cp.get_default_memory_pool().free_all_blocks()
    (out / "sweep.log").write_text(header() + "\n".join(log) + "\n")
    summary.append("sweep     type  N x K          default(W,R)  GB/s   best(W,R)  GB/s")
    for (qn, n, k), (rows, nbytes, d) in res.items():
        best = min(rows, key=rows.get)
        summary.append(f"sweep     {qn:<5} {n:>6} x {k:<6} {str(d):>8} {nbytes / rows[d] / 1e3:7.0f}   {str(best):>8} "
                       f"{nbytes / rows[best] / 1e3:6.0f}")
    return res


def write_table(out: Path, res: dict, summary: list[str]) -> None:
    from bw24.probe import tuning
    from bw24.runtime import device_info

    entries, ba = {}, {}
    for qn in QTYPES:
        shapes = {f"{n}x{k}": v for (q, n, k), v in res.items() if q == qn}
        per = {}
        for s, (rows, nbytes, d) in shapes.items():
            best = min(rows, key=rows.get)
            per[s] = {"warps": best[0], "rows": best[1]}
            ba[f"{qn} {s}"] = {"before_gbs": round(nbytes / rows[d] / 1e3, 1),
                               "after_gbs": round(nbytes / rows[best] / 1e3, 1), "default": list(d), "best": list(best)}
        if per:
            entries[qn] = tuning.kind_entry(per)
    di = device_info()
    path = tuning.write_section(out, di.name, di.cc, "qmatvec", entries,
                                {"script": "packages/bw24-engine/benchmarks/gpu_matvec.py",
                                 "method": "CUDA graph of 20 matvecs over >2x L2 of weight copies, median of 5",
                                 "before": "built-in default_qmv", "before_after": ba})
    summary.append(f"wrote tuning table {path.name}")


def stage_speed(out: Path, summary: list[str], table_dir: Path | None, presets, n_tok=128) -> None:
    from bw24.engine import Engine
    from bw24.engine.graph import greedy_decode
    from bw24.runtime import device_info, device_key, load_tuning

    for name, mix in presets:
        path = _synth(out, name, mix)
        eng = Engine.load(str(path), backend="cuda", n_ctx=4096, progress=False)
        if table_dir is not None:
            di = device_info()
            eng.ops.qmv_configs.tuning = load_tuning(table_dir, device_key(di.name, di.cc))
        ops = eng.ops
        ids = list(range(100, 612))
        greedy_decode(eng.model, ids[:8], 4, ahead=4)  # warm-up: compiles this model's kernel instances
        # kernels per decode token: count launches of one eager step
        n_launch = [0]
        real = ops._launch

        def counting(*a, n_launch=n_launch, real=real, **kw):
            n_launch[0] += 1
            return real(*a, **kw)

        for graphs, ahead in ((True, 0), (True, 1)):  # the host waits for each token; step n + 1 queued first
            ops.use_graphs = graphs
            eng.model.kv.reset()
            t = time.perf_counter()
            eng.model.feed(ids)
            ops.synchronize()
            t_pre = time.perf_counter() - t
            t = time.perf_counter()
            toks = greedy_decode(eng.model, ids, n_tok, ahead=ahead)
            t_dec = time.perf_counter() - t - t_pre
            summary.append(f"speed {name}-{mix:<7} ahead={ahead} decode {(n_tok - 1) / t_dec:7.1f} tok/s  "
                           f"prefill512 {len(ids) / t_pre:7.0f} tok/s  weights {ops.weight_bytes / 1e9:.2f} GB "
                           f"({ops.qmv_configs.tuning.note}) toks {toks[:3]}")
        from bw24.engine.graph import decode_step
        from bw24.engine.sampling import SamplingParams

        step = decode_step(eng.model, SamplingParams())
        ops._launch = counting
        eng.model.kv.reserve(1)
        step()
        ops._launch = real
        ops.synchronize()
        summary.append(f"speed {name}-{mix:<7} kernels per decode token: {n_launch[0]}")
        del eng


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--stages", default="compile,check,e2e,sweep,speed")
    ap.add_argument("--presets", default="qwen3-0.6b:q4_k_m,qwen3-8b:q4_k_m")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: list[str] = []
    presets = [tuple(p.split(":")) for p in args.presets.split(",") if p]
    state: dict = {}

    def sweep():
        state["res"] = stage_sweep(out, summary)
        write_table(out, state["res"], summary)

    fns = {"compile": lambda: stage_compile(summary), "check": lambda: stage_check(out, summary),
           "e2e": lambda: stage_e2e(out, summary), "sweep": sweep,
           "speed": lambda: stage_speed(out, summary, out if "res" in state else None, presets)}
    return run_stages(fns, args.stages.split(","), out / "summary.txt", summary)


def run_stages(fns: dict, stages: list[str], summary_file: Path, summary: list[str]) -> int:
    """Run the named stages in order (a failing stage is reported, the rest still run), rewriting the
    summary file after each; print the summary last."""
    for s in stages:
        t = time.perf_counter()
        try:
            fns[s]()
        except Exception as e:  # one broken stage must not hide the others' numbers
            import traceback

            traceback.print_exc()
            summary.append(f"STAGE {s} ERROR: {type(e).__name__}: {e}")
        summary.append(f"-- stage {s}: {time.perf_counter() - t:.1f} s")
        summary_file.write_text(header() + "\n".join(summary) + "\n")
    print("\n==== SUMMARY ====\n" + header() + "\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
