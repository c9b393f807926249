"""How fast prefill's weight dequantization (prefill_gemm.cu dequant_rows_h: quantized rows -> fp16 for cuBLAS)
moves its bytes, with the plain stores and with BW24_DEQ_STAGED's stores through shared memory.

    python gpu_dequant.py OUTDIR

At 1653f1f the 8B's pp512 spent 10.6 of its 29.7 ms of kernels here (~18 GB at ~1.7 TB/s). Each row below is
one chunk as prefill.stacked_gemm / glu_gemm cut it for the 8B (Q/K/V stacked, gate and up halves of a GLU chunk,
a down-projection chunk), for the quant types the perf cells use. A chunk's source rotates through copies of the
weight (more than 2x the L2 in all, so the reads come from HBM), R launches in a CUDA graph; time is the replays'
median per launch. GB/s counts the quantized planes read plus the fp16 written; % is of the HBM read rate
bw24-probe measured on this GPU. The staged output is checked word for word against the plain one first.
Writes OUTDIR/dequant.json; prints a short table last.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

QTYPES = ("Q4_K", "Q6_K", "Q8_0", "Q4_0")
CHUNKS = (("qkv", 6144, 4096), ("gate/up half", 4096, 4096), ("down", 2688, 12288))  # rows, K of one launch
R = 24  # launches a graph


def main(out: Path) -> int:
    import cupy as cp
    from bw24.engine.ops.cuda import CudaOps, prefill
    from bw24.engine.ops.cuda.repack import random_raw
    from bw24.engine.perf.roofline import current_ceiling
    from gguf.constants import GGMLQuantizationType as Q
    from gpu_matvec import _time_graph

    out.mkdir(parents=True, exist_ok=True)
    ops = CudaOps()
    ceiling = current_ceiling("cuda")
    hbm = ceiling.read_bytes_per_s
    rng = np.random.default_rng(0)
    rows_out, lines = [], []
    for qn in QTYPES:
        qt = Q[qn]
        for label, n, k in CHUNKS:
            raw = random_raw(qt, n, k, rng)
            w0 = ops.weight_from_raw("w", raw, qt, (n, k))
            nbytes = int(w0.nbytes)  # the repacked planes: what a launch over all n rows reads
            copies = max(2, math.ceil(2 * 60e6 / nbytes) + 1)
            ws = [w0] + [ops.weight_from_raw("w", raw, qt, (n, k)) for _ in range(copies - 1)]
            wh = ops.cp.empty(n * k, dtype=np.float16)
            got = {}
            for staged in (False, True):
                ops.deq_staged = staged
                with ops.stream:
                    wh.fill(np.nan)
                prefill.dequant(ops, w0, wh, None, n)
                ops.synchronize()  # (the backend's stream does not block the null stream asnumpy copies on)
                got[staged] = cp.asnumpy(wh.view(np.uint16))
            same = bool(np.array_equal(got[False], got[True]))
            res = {"qtype": qn, "chunk": label, "rows": n, "k": k, "read_bytes": nbytes, "write_bytes": 2 * n * k,
                   "same_words": same}
            for staged in (False, True):
                ops.deq_staged = staged

                def body(ws=ws, wh=wh, n=n):
                    for i in range(R):
                        prefill.dequant(ops, ws[i % len(ws)], wh, None, n)

                us = _time_graph(ops, body, R)
                gbs = (nbytes + 2 * n * k) / (us * 1e-6) / 1e9
                res["staged_us" if staged else "plain_us"] = us
                res["staged_gbs" if staged else "plain_gbs"] = gbs
            ops.deq_staged = False
            rows_out.append(res)
            pct = (lambda g: f"{100 * g * 1e9 / hbm:5.1f}%") if hbm else (lambda g: "   - ")
            lines.append(f"{qn:<5} {label:<13} {n:>5} x {k:<6} plain {res['plain_us']:7.1f} us "
                         f"{res['plain_gbs']:7.0f} GB/s {pct(res['plain_gbs'])}   staged {res['staged_us']:7.1f} us "
                         f"{res['staged_gbs']:7.0f} GB/s {pct(res['staged_gbs'])}   "
                         f"{res['plain_us'] / res['staged_us'] - 1:+6.1%}  {'same words' if same else 'DIFFERENT'}")
            del ws, w0, wh
            ops.cp.get_default_memory_pool().free_all_blocks()
    (out / "dequant.json").write_text(json.dumps({"hbm_read_bytes_per_s": hbm, "ceiling": ceiling.note,
                                                  "rows": rows_out}, indent=1))
    print(f"dequant_rows_h, plain vs staged stores ({ceiling.note}); + = staged faster")
    for line in lines:
        print(line)
    return 0 if all(r["same_words"] for r in rows_out) else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1])))
