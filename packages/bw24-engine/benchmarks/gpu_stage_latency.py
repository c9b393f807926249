"""What a dependent stage costs on this GPU (benchmarks/stage_latency.cu): N near-empty stages as a CUDA graph
of N kernels (plain launches, then PDL launches) against one persistent kernel with a grid-wide barrier
between its N phases. A decode step of a small model is such a chain (the 0.6B: 286 kernels a token, 3.1 us
each under PDL at e7b99ea), so the gap between the rows bounds what a persistent decode kernel could save.

    python gpu_stage_latency.py OUTDIR [N]

Every variant's result is checked (each value must equal N) before its time is reported. Writes
OUTDIR/stage_latency.json; prints a short table last.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPS = 20


def main(out: Path, n: int = 256) -> int:
    import cupy as cp
    from bw24.runtime import describe, load_module, new_stream
    from bw24.runtime.launch import launch_pdl

    out.mkdir(parents=True, exist_ok=True)
    mod = load_module(HERE / "stage_latency.cu")
    stage, persistent = mod.get("stage"), mod.get("persistent")
    nb = int(cp.cuda.Device().attributes["MultiProcessorCount"])  # one block a SM: all co-resident
    s = new_stream()
    buf, bar = cp.zeros(2 * nb, np.float32), cp.zeros(2, np.uint32)

    def chain(pdl: bool):
        for i in range(n):
            args = (buf, np.int32(nb), np.int32(i))
            if pdl:
                launch_pdl(stage, (nb,), 128, args, 0, s)
            else:
                with s:
                    stage((nb,), (128,), args)

    def graph_of(fn):
        s.synchronize()
        s.begin_capture()
        with s:
            fn()
        g = s.end_capture()
        g.upload(s)
        return lambda: g.launch(s)

    def one_launch():
        with s:
            persistent((nb,), (128,), (buf, np.int32(nb), np.int32(n), bar))

    runs = {"graph, plain launches": graph_of(lambda: chain(False)),
            "graph, PDL launches": graph_of(lambda: chain(True)),
            "persistent, grid barrier": one_launch}
    rows = {}
    for name, run in runs.items():
        buf.fill(0)
        run()
        s.synchronize()
        got = cp.asnumpy(buf[((n - 1) & 1) * nb:((n - 1) & 1) * nb + nb])
        if not np.all(got == n):
            print(f"{name}: WRONG result (values {got.min()}..{got.max()}, want {n}): not timed")
            rows[name] = None
            continue
        ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
        ev0.record(s)
        for _ in range(REPS):
            run()
        ev1.record(s)
        ev1.synchronize()
        rows[name] = cp.cuda.get_elapsed_time(ev0, ev1) * 1e3 / (REPS * n)
    (out / "stage_latency.json").write_text(json.dumps({"device": describe(), "stages": n, "blocks": nb,
                                                        "us_per_stage": rows}, indent=1))
    print(f"{n} dependent stages, {nb} blocks of 128 threads, {REPS} replays ({describe()})")
    for name, us in rows.items():
        print(f"  {name:<28} {'WRONG' if us is None else f'{us:6.2f} us a stage'}")
    return 0 if all(v is not None for v in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), *(int(a) for a in sys.argv[2:3])))
