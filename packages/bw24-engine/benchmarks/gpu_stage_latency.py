"""What a dependent stage costs on this GPU (benchmarks/stage_latency.cu): N near-empty stages as a CUDA graph
of N kernels (plain launches, then PDL launches) against one persistent kernel with a grid-wide barrier
between its N phases (the first barrier, 370d098's, and a release/acquire counter). A decode step of a small
model is such a chain (the 0.6B: 286 kernels a token, 3.1 us each under PDL at e7b99ea), so the gap between
the rows bounds what a persistent decode kernel could save.

Then the same with a small model's work in every stage (a 1024 x 1024 fp16 matvec, 2 MB of weights a stage,
a new matrix each stage): a graph of N matvec kernels (plain, and PDL with the weights loaded before the wait)
against one persistent kernel (its next weights loaded after the barrier, or before it). This is the question
a persistent decode kernel for the 0.6B (3x llama.cpp needs ~1.5 us a stage) and the real speculative pair
hangs on.

    python gpu_stage_latency.py OUTDIR [N]

Every variant's result is checked before its time is reported: the empty stages' values must equal N; the
matvecs' weights are signed permutation matrices, so after N stages x is an exactly known signed permutation
of x0 (every product and sum exact in fp32), checked bitwise. Writes OUTDIR/stage_latency.json; prints a short
table last.
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
    stage, persistent, persistent_ar = mod.get("stage"), mod.get("persistent"), mod.get("persistent_ar")
    nb = int(cp.cuda.Device().attributes["MultiProcessorCount"])  # one block a SM: all co-resident
    s = new_stream()
    buf, bar, ctr = cp.zeros(2 * nb, np.float32), cp.zeros(2, np.uint32), cp.zeros(1, np.uint32)

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

    def one_launch_ar():
        ctr.fill(0)  # (a memset node on s: the counter only grows within a launch)
        with s:
            persistent_ar((nb,), (128,), (buf, np.int32(nb), np.int32(n), ctr))

    def empty_ok() -> tuple[bool, str]:
        got = cp.asnumpy(buf[((n - 1) & 1) * nb:((n - 1) & 1) * nb + nb])
        return bool(np.all(got == n)), f"values {got.min()}..{got.max()}, want {n}"

    def reset_empty():
        buf.fill(0)

    rows = {}
    with s:  # the fills, the graphs and the launches all on s, in order
        _time_all(cp, s, n, rows, reset_empty, empty_ok, {
            "graph, plain launches": graph_of(lambda: chain(False)),
            "graph, PDL launches": graph_of(lambda: chain(True)),
            "persistent, grid barrier": one_launch,
            "persistent, release/acquire": one_launch_ar})
        _matvec_rows(cp, mod, s, n, nb, rows, graph_of)
    (out / "stage_latency.json").write_text(json.dumps({"device": describe(), "stages": n, "blocks": nb,
                                                        "matvec_k": MV_K, "us_per_stage": rows}, indent=1))
    print(f"{n} dependent stages, {nb} blocks, {REPS} replays ({describe()}); the matvec stages: "
          f"{MV_K} x {MV_K} fp16, {2 * MV_K * MV_K / 2**20:.0f} MiB of weights a stage")
    for name, us in rows.items():
        print(f"  {name:<44} {'WRONG' if us is None else f'{us:6.2f} us a stage'}")
    return 0 if all(v is not None for v in rows.values()) else 1


MV_K = 1024  # the 0.6B's hidden size; stage_latency.cu's MV_VECS covers K = 32 lanes * 4 vectors * 8 halves


def _time_all(cp, s, n: int, rows: dict, reset, ok, runs: dict) -> None:
    """Each run once from a reset state and checked (a wrong one is reported, never timed), then REPS times."""
    for name, run in runs.items():
        reset()
        run()
        s.synchronize()
        good, why = ok()
        if not good:
            print(f"{name}: WRONG result ({why}): not timed")
            rows[name] = None
            continue
        ev0, ev1 = cp.cuda.Event(), cp.cuda.Event()
        ev0.record(s)
        for _ in range(REPS):
            run()
        ev1.record(s)
        ev1.synchronize()
        rows[name] = cp.cuda.get_elapsed_time(ev0, ev1) * 1e3 / (REPS * n)


def _matvec_rows(cp, mod, s, n: int, nb: int, rows: dict, graph_of) -> None:
    """The matvec stages (module docstring): n signed permutation matrices, x0 integers, the expected x exact."""
    from bw24.runtime.launch import launch_pdl

    K = MV_K
    rng = np.random.default_rng(0)
    perms = np.stack([rng.permutation(K) for _ in range(n)])
    signs = rng.choice(np.array([-1.0, 1.0], np.float32), size=(n, K))
    w = cp.zeros((n, K, K), cp.float16)  # n * 2 MiB: past L2, so every stage streams its weights from HBM
    w[cp.arange(n)[:, None], cp.arange(K)[None, :], cp.asarray(perms)] = cp.asarray(signs, cp.float16)
    x0 = rng.integers(-1000, 1001, K).astype(np.float32)
    want = x0.copy()
    for i in range(n):  # y[row] = sign[row] * x[perm[row]]: exact in fp32
        want = signs[i] * want[perms[i]]
    xbuf, ctr = cp.zeros(2 * K, cp.float32), cp.zeros(1, cp.uint32)
    stage_mv, persistent_mv = mod.get("stage_mv"), mod.get("persistent_mv")
    warps = 8  # a kernel stage: 8 rows a block, K / 8 blocks
    pwarps = -(-K // nb)  # the persistent kernel: every row a warp of one of nb co-resident blocks

    def chain(pdl: bool):
        for i in range(n):
            args = (w[i], xbuf[(i & 1) * K:], xbuf[((i + 1) & 1) * K:], np.int32(K))
            if pdl:
                launch_pdl(stage_mv, (K // warps,), 32 * warps, args, 0, s)
            else:
                stage_mv((K // warps,), (32 * warps,), args)

    def persistent(prefetch: int):
        def run():
            ctr.fill(0)
            persistent_mv((nb,), (32 * pwarps,), (w, xbuf, np.int32(K), np.int32(n), ctr, np.int32(prefetch)))
        return run

    def reset():
        xbuf[:K] = cp.asarray(x0)

    def ok() -> tuple[bool, str]:
        got = cp.asnumpy(xbuf[(n & 1) * K:(n & 1) * K + K])
        bad = int(np.count_nonzero(got != want))
        return bad == 0, f"{bad} of {K} values differ from the exact signed permutation"

    _time_all(cp, s, n, rows, reset, ok, {
        "matvec: graph, plain launches": graph_of(lambda: chain(False)),
        "matvec: graph, PDL (weights before the wait)": graph_of(lambda: chain(True)),
        "matvec: persistent, loads after the barrier": persistent(0),
        "matvec: persistent, loads before the barrier": persistent(1)})


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), *(int(a) for a in sys.argv[2:3])))
