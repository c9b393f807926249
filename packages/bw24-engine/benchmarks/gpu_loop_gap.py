"""Where a decode token's time goes between the replayed step and the loop around it: the same captured step timed
in seven loops, interleaved, on one model.

python packages/bw24-engine/benchmarks/gpu_loop_gap.py PRESET[:QUANT[:DEPTH]]... [--tokens N] [--rounds R] [--n-ctx S]

- queued, no sampler: the step's replays queued back to back, its argmax_sample left out (gpu_knockout.py's
  "whole step": the token stays the one sampled before the timing);
- queued: the same with the sampler;
- queued, reads: each replay followed by its token's late read (ops.to_host_later), waited on 32 steps late;
- lag 1: the generation loop's (graph.StepQueue, BW24_DECODE_LAG=1): step n + 1 queued before the wait for token n;
- lag 0: the host waits for each token before it queues the next step (as llama-bench does).

- queued, in-graph reads / lag 1, in-graph reads: the step captured with BW24_TOKEN_RING=1, whose last kernel writes
  its token into mapped pinned host memory (a ring slot per position; ops/cuda/readback.py TokenRing), so no copy
  runs between replays; the host waits on an event a step (lag 1, StepQueue) or reads nothing (queued).

The differences name the costs: the sampler (row 2 - row 1), the reads between replays (3 - 2), the host's waits
with one step queued (4 - 3) and with none (5 - 3), and what the token ring saves (4 - 7).
On an H100 at 7f01f4c the 0.6B's knockout "whole step" took 601 us a token at depth 0, the perf bench's loop 691
(lag 0) and 679 (lag 1, 5e2d592). At 7f1070b (an H100) this said: the replays alone 661 us at n_ctx 192, the sampler
5.7, the copies 9.8, the waits ~0 at lag 1 and 14 at lag 0, the ring 1.4 in place of the copies. So the other ~60
us lie between this step and knockout's, which replays 64 steps from one key (here 128: twice the keys on average)
with a cache of 4,352 positions (here 192); --tokens 64 and --n-ctx 4352 time those apart.
A diagnostic: it writes no perf row.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from bw24.engine.graph import StepQueue


def loops(m, ops, run, n: int):
    def queued():
        for _ in range(n):
            m.kv.reserve(1)
            run()
        ops.synchronize()

    def lagged(lag: int):  # (32 stands for "none": the pinned ring holds 64 reads)
        return lambda: StepQueue(m, run).run_steps(n, lag)

    return {"queued": queued, "queued, reads": lagged(32), "lag 1": lagged(1), "lag 0": lagged(0)}


def ring_on(ops, on: bool):
    """BW24_TOKEN_RING on this backend alone (CudaOps.token_ring_env), set before each arm runs: the steps captured
    with it on publish their token into the ring, and StepQueue reads the ring while it is on."""
    ops.token_ring_env = "1" if on else "0"


def ring_loops(m, ops, run, n: int):
    """The step captured with BW24_TOKEN_RING=1 (its token written into mapped pinned memory by its last kernel,
    ops/cuda/readback.py TokenRing): queued (as `loops`' queued: the ring written, unread), and lag 1 (StepQueue:
    an event a step, the host waiting for step n's, then reading its slot, with step n + 1 queued)."""
    arms = {"queued, in-graph reads": loops(m, ops, run, n)["queued"],
            "lag 1, in-graph reads": lambda: StepQueue(m, run).run_steps(n, 1)}
    return {k: (lambda go=go: (ring_on(ops, True), go())) for k, go in arms.items()}


def same_tokens(m, ops, run, run_ring, base: int, n: int = 32) -> str:
    """The ring's tokens (StepQueue, BW24_TOKEN_RING=1) against the copies' (to_host_later), from the same position
    and token."""
    tok = m.buf.view(1).ids
    start = ops.to_host(tok)
    got = {}
    for on, r in ((False, run), (True, run_ring)):
        ring_on(ops, on)
        m.kv.reset(base)
        ops.copy_from_host(tok, start)
        got[on] = StepQueue(m, r).run_steps(n, 0)
    ops.copy_from_host(tok, start)
    return "the same" if got[True] == got[False] else f"DIFFER: {got[True][:8]} against {got[False][:8]}"


def captured(m, ops, step, base: int):
    """`step` captured (eager, capture, one replay), the cache then back at `base` positions."""
    r = ops.capture(step, keys=lambda: m.kv.n_past)
    for _ in range(3):
        m.kv.reserve(1)
        r()
    ops.synchronize()
    m.kv.reset(base)
    return r


def measure(spec: str, tokens: int, rounds: int, n_ctx: int | None = None) -> list[str]:
    import numpy as np
    from bw24.engine import Engine
    from bw24.engine.graph import decode_step
    from bw24.engine.sampling import SamplingParams
    from gpu_knockout import knock_out, unknock
    from gpu_profile import model_file, parse_spec

    preset, quant, depth = parse_spec(spec)
    n_ctx = n_ctx or depth + tokens + 64
    eng = Engine.load(model_file(preset, quant), backend="cuda", n_ctx=n_ctx, progress=False)
    m, ops = eng.model, eng.ops
    prompt = np.random.default_rng(0).integers(10, m.cfg.n_vocab - 10, size=max(depth, 1)).tolist()
    params, base = SamplingParams(), max(depth, 1)
    ring_on(ops, False)  # (the copies' graphs: whatever BW24_TOKEN_RING says, the ring's arms set it themselves)
    m.feed(prompt)
    ops.sample(m.buf.logits[0], params, m.kv.pos, out=m.buf.view(1).ids)
    run = captured(m, ops, decode_step(m, params), base)
    arms = loops(m, ops, run, tokens)
    skipped = knock_out(ops, ("argmax_sample",))
    try:
        nosample = captured(m, ops, decode_step(m, params), base)  # a graph of its own, captured without the sampler's launch
    finally:
        unknock(ops)
    arms["queued, no sampler"] = loops(m, ops, nosample, tokens)["queued"]
    ring_on(ops, True)
    run_ring = captured(m, ops, decode_step(m, params), base)  # its own graph, publish_token its last launch
    check = same_tokens(m, ops, run, run_ring, base)
    arms = {k: (lambda go=go: (ring_on(ops, False), go())) for k, go in arms.items()}
    arms.update(ring_loops(m, ops, run_ring, tokens))
    times: dict[str, list[float]] = {k: [] for k in arms}
    for _ in range(rounds):
        for k, go in arms.items():
            m.kv.reset(base)
            ops.synchronize()
            t = time.perf_counter()
            go()
            times[k].append((time.perf_counter() - t) * 1e6 / tokens)
    name = f"{Path(str(preset)).name.removesuffix('.gguf')}-{quant}_d{depth}"
    lines = [f"## loop gap {name}: n_ctx {n_ctx}, {tokens} tokens a loop, median of {rounds} rounds interleaved (sampler "
             f"launches left out of the no-sampler graph: {sum(skipped.values())}); the ring's tokens: {check}"]
    for k in ("queued, no sampler", "queued", "queued, reads", "lag 1", "lag 0", "queued, in-graph reads",
              "lag 1, in-graph reads"):
        lines.append(f"{k:<22} {statistics.median(times[k]):8.1f} us/token  "
                     f"({' '.join(f'{x:.1f}' for x in times[k])})")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("specs", nargs="+")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--n-ctx", type=int, default=None,
                    help="the cache's positions (default: depth + tokens + 64, as tight as the perf bench's)")
    a = ap.parse_args()
    for spec in a.specs:
        print("\n".join(measure(spec, a.tokens, a.rounds, a.n_ctx)), flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main())
