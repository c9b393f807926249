"""What a T-token q8 matvec (speculative verify, issue 8) costs against the decode launch (T = 1) at the
8B's shapes, per rows-per-block R and groups in flight (QMV8_VERIFY_UNROLL), on one GPU call; with
--path f32, the fp32-activation matvec (qmv) at the small models' shapes (K < 2048: the qwen3-0.6b and the
qwen2.5-coder-1.5b target of the real draft pair), per R (the rule there: launch.f32_verify_rows, from
this sweep's run at a6dcfe3).

    python packages/bw24-engine/benchmarks/gpu_verify_sweep.py OUTDIR [--ts 1,2,3,4,5,8,9] [--rows 1,2,4,8]
        [--path q8|f32] [--shapes 8b|small]

--shapes small: the small models' shapes on the path asked for (forced). They decoded on the fp32 path until
6e0baa5's run moved K >= 1024 to int8 activations (launch.Q8_MIN_K_DEFAULT); the fp32 path still runs them in
a MoE model's body and the gate's exact half. The real pair's target's fp32-path verify cost 3.9x a decode
launch at T = 5 and 9.5x at T = 9 (gate+up, a6dcfe3).

Each (shape, T, R, unroll) first checks that its rows equal T = 1 launches bit for bit (the contract;
a config that breaks it is reported WRONG and not timed), then times one CUDA graph of one matmul per
weight copy (copies spanning > 2x L2, so the weight streams from HBM; gpu_matvec_q8.py's method),
median of 5 replays. Times include the quantize_x launch, as a verify step pays it. The table gives
us per launch and the ratio to the decode launch: 1.0 would be a verify as cheap as one decode step.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_matvec import _time_graph, precompile  # noqa: E402
from gpu_matvec_q8 import _clone, _weight  # noqa: E402
from gpu_session import header  # noqa: E402

# qwen3-8b Q4_K_M: gate+up stacked (as matmul_multi launches them), Q+K+V, wo, down (Q4_K and Q6_K)
SHAPES = (("Q4_K", 24576, 4096), ("Q4_K", 6144, 4096), ("Q4_K", 4096, 4096), ("Q6_K", 4096, 12288),
          ("Q4_K", 4096, 12288))
# fp32-path shapes (K < 2048): qwen3-0.6b Q+K+V and gate+up (K = 1024); qwen2.5-coder-1.5b (Q4_K_M) Q+K+V,
# gate+up and wo (K = 1536; its GGUF mixes Q4_K and Q6_K rows, Q6_K timed for the mix's slower half)
SHAPES_F32 = (("Q4_K", 4096, 1024), ("Q4_K", 6144, 1024), ("Q4_K", 2048, 1536), ("Q4_K", 17920, 1536),
              ("Q6_K", 17920, 1536), ("Q4_K", 1536, 1536))


def _combos(T: int, rows: list[int], unrolls: list[int], f32: bool = False) -> list[tuple[int, int]]:
    """(R, unroll) pairs timed at T: at most 32 accumulators per thread (R * NT; 64 on the f32 path, whose
    kernel has no unroll choice)."""
    if f32:
        from bw24.engine.ops.cuda.kernels import QMV_NT

        return [(r, 0) for r in rows if r * next(n for n in QMV_NT if T <= n) <= 64]
    return [(r, u) for u in unrolls for r in rows if r * T <= 32]


def _defines(unroll: int) -> tuple:
    """The kernel defines of an unroll choice (0: the kernel's own rule), as get_kernel takes them."""
    return (("QMV8_VERIFY_UNROLL", unroll),) if unroll else ()


def main() -> int:
    import cupy as cp
    from bw24.engine.ops.cuda import CudaOps
    from bw24.engine.ops.cuda.kernels import QMV_NT, get_kernel
    from bw24.engine.ops.cuda.q8 import q8_nt, verify_rows
    from bw24.engine.ops.cuda.repack import FMT
    from gguf.constants import GGMLQuantizationType as Q

    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--ts", default="1,2,3,4,5,8,9")
    ap.add_argument("--rows", default="1,2,4,8")
    ap.add_argument("--unroll", default="1,2")
    ap.add_argument("--path", choices=("q8", "f32"), default="q8")
    ap.add_argument("--shapes", choices=("8b", "small"), default=None,
                    help="shape set (default: 8b for q8, small for f32)")
    a = ap.parse_args()
    f32 = a.path == "f32"
    small = a.shapes == "small" or (a.shapes is None and f32)
    a.out.mkdir(parents=True, exist_ok=True)
    ts = [int(t) for t in a.ts.split(",")]
    rows, unrolls = [int(r) for r in a.rows.split(",")], [int(u) for u in a.unroll.split(",")]

    ops = CudaOps()
    if small:  # the path asked for, whatever the default (K >= 1024 decodes on q8 since 6e0baa5's run; the fp32
        ops.qmv_configs.force_path = a.path  # path still runs them in a MoE model's body and the gate's exact half)
    rng = np.random.default_rng(0)
    log = [header().rstrip()]

    def say(s: str) -> None:
        print(s, flush=True)
        log.append(s)

    shapes, kfile = SHAPES_F32 if small else SHAPES, "qmatvec.cu" if f32 else "qmatvec_q8.cu"
    jobs = [] if f32 else [("", u) for u in [0, *unrolls]]  # the plain module: quantize_x
    for qn, n, k in shapes:
        f, (path, W, R1) = FMT[Q[qn]], ops.qmv_configs.plan(Q[qn], n, k)
        assert path == a.path, f"{qn} {n}x{k} decodes on the {path} path, not {a.path}"
        if f32:
            jobs.append((f"qmv<{f},{W},{R1},1>", 0))
            jobs += [(f"qmv<{f},{W},{r},{next(m for m in QMV_NT if T <= m)}>", 0) for T in ts if T > 1
                     for r, _ in _combos(T, rows, [], True)]
            continue
        jobs.append((f"qmv8<{f},{W},{R1},1>", 0))
        jobs += [(f"qmv8<{f},{W},{r},{q8_nt(T)}>", u) for T in ts if T > 1 for r, u in _combos(T, rows, unrolls)]
    done: list[str] = []
    precompile([(kfile, name, _defines(u)) for name, u in sorted(set(jobs))], done)
    say(f"precompiled {len(set(jobs))} instances ({done[-1]})")
    summary = ["shape                     T  rule R: us  x decode | best (R, unroll): us  x decode"]
    for qn, n, k in shapes:
        w0 = _weight(ops, Q[qn], n, k, rng)
        copies = max(20, min(400, math.ceil(2 * 60e6 / w0.nbytes) + 1))
        ws = [w0] + [_clone(ops, w0) for _ in range(copies - 1)]
        xh = rng.standard_normal((16, k)).astype(np.float32)
        x = ops._put(xh)
        _, W, R1 = ops.qmv_configs.plan(Q[qn], n, k)
        ones = []
        for t in range(max(ts)):  # decode rows, the bits every verify row must equal
            y1 = ops.zeros((1, n))
            ops.matmul(w0, x[t:t + 1], out=y1)
            ones.append(ops.to_host(y1)[0])
        dec = None
        for T in ts:
            y = ops.zeros((T, n))
            res = {}
            for r, u in _combos(T, rows, unrolls, f32) if T > 1 else [(R1, 0)]:
                ops._k = lambda f, name, d=_defines(u): get_kernel(f, name, d if f == "qmatvec_q8.cu" else ())
                ops.verify_rows = r if T > 1 else None
                ops.matmul(w0, x[:T], out=y)
                bad = [t for t in range(T) if not np.array_equal(ops.to_host(y)[t], ones[t])]
                if bad:
                    say(f"{qn} {n}x{k} T={T} R={r} unroll={u}: WRONG rows {bad} differ from decode")
                    continue

                def body(ws=ws, xt=x[:T], y=y):
                    for wi in ws:
                        ops.matmul(wi, xt, out=y)

                us = _time_graph(ops, body, len(ws))
                res[(r, u)] = us
                if T == 1:
                    dec = us
                say(f"{qn} {n:>5}x{k:<5} W={W} T={T} R={r} unroll={u}: {us:8.2f} us "
                    f"{w0.nbytes / us / 1e3:6.0f} GB/s  {us / dec:5.2f}x decode")
            ops.verify_rows = None
            del ops._k  # back to the class method
            if not res:
                continue
            (br, bu), bus = min(res.items(), key=lambda kv: kv[1])
            rule_r = (1 if f32 else verify_rows(T)) if T > 1 else R1
            rule = res.get((rule_r, 0 if f32 else 1), float("nan")) if T > 1 else dec
            summary.append(f"{qn} {n:>5}x{k:<5} T={T:<2} R={rule_r}: {rule:7.2f} "
                           f"{rule / dec:5.2f}x | ({br},{bu}): {bus:7.2f} {bus / dec:5.2f}x")
        del ws, w0
        cp.get_default_memory_pool().free_all_blocks()
    (a.out / "verify_sweep.log").write_text("\n".join(log + ["", "== summary =="] + summary) + "\n")
    print("\n== summary ==\n" + "\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
