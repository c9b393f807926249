"""Where a decode token's time goes between the replayed step and the loop around it: the same captured step timed
in seven loops, interleaved, on one model.

python packages/bw24-engine/benchmarks/gpu_loop_gap.py PRESET[:QUANT[:DEPTH]]... [--tokens N] [--rounds R]

- queued, no sampler: the step's replays queued back to back, its argmax_sample left out (gpu_knockout.py's
  "whole step": the token stays the one sampled before the timing);
- queued: the same with the sampler;
- queued, reads: each replay followed by its token's late read (ops.to_host_later), waited on 32 steps late;
- lag 1: the generation loop's (graph.StepQueue, BW24_DECODE_LAG=1): step n + 1 queued before the wait for token n;
- lag 0: the host waits for each token before it queues the next step (as llama-bench does).

- queued, in-graph reads / lag 1, in-graph reads: the step captured with one more kernel that writes its token into
  mapped pinned host memory (a ring slot per position), so no copy runs between replays; the host waits on an
  event a step (lag 1) or reads the ring at the end.

The differences name the costs: the sampler (row 2 - row 1), the reads between replays (3 - 2), the host's waits
with one step queued (4 - 3) and with none (5 - 3), and what a token write inside the graph would save (4 - 7).
On an H100 at 7f01f4c the 0.6B's knockout "whole step" took 601 us a token at depth 0, the perf bench's loop 691
(lag 0) and 679 (lag 1, 5e2d592): this says which part the other ~80 us is. A diagnostic: it writes no perf row.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path


def loops(m, ops, run, n: int):
    from bw24.engine.graph import StepQueue

    def queued():
        for _ in range(n):
            m.kv.reserve(1)
            run()
        ops.synchronize()

    def lagged(lag: int):  # (32 stands for "none": the pinned ring holds 64 reads)
        return lambda: StepQueue(m, run).run_steps(n, lag)

    return {"queued": queued, "queued, reads": lagged(32), "lag 1": lagged(1), "lag 0": lagged(0)}


RING = 256  # the mapped ring's int32 slots, one a position (pos % RING)
PUT = r"""extern "C" __global__ void put_token(const int* tok, const int* pos, int* ring, int n) {
    ring[pos[0] % n] = tok[0];  // into mapped pinned host memory: the host reads it without a copy of its own
}"""


class MappedRing:
    """int32 slots of mapped pinned host memory: a kernel inside the captured step writes each token there (no
    memcpy between replays), the host reads its slot once the step's event is done."""

    def __init__(self, cp, n: int = RING):
        import ctypes

        import numpy as np

        rt = cp.cuda.runtime
        self.ptr = rt.hostAlloc(4 * n, rt.hostAllocMapped)
        dptr = rt.hostGetDevicePointer(self.ptr, 0)
        self.dev = cp.ndarray((n,), cp.int32, cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(dptr, 4 * n, self), 0))
        self.host = np.ctypeslib.as_array((ctypes.c_int32 * n).from_address(self.ptr))
        self.kernel = cp.RawKernel(PUT, "put_token")
        self.n = n


def captured_put(m, ops, params, base: int, ring: MappedRing):
    """The step with put_token after its sampler, captured like captured()."""
    import numpy as np
    from bw24.engine.graph import decode_step

    inner = decode_step(m, params)
    tok = m.buf.view(1).ids

    def step():
        inner()
        with ops.stream:  # (the eager first call too: after the sampler, on the step's stream)
            ring.kernel((1,), (1,), (tok, m.kv.pos, ring.dev, np.int32(ring.n)))

    return captured(m, ops, step, base)


def put_loops(m, ops, run, n: int, ring: MappedRing):
    """The step with its in-graph token write: queued (as `loops`' queued: the graph writes the ring, unread), and lag 1 (an event a
    step; the host waits for step n's event, then reads its slot, with step n + 1 queued)."""
    cp = ops.cp
    events = [cp.cuda.Event(block=False, disable_timing=True) for _ in range(4)]

    def lag1():
        waits = []
        for i in range(n):
            m.kv.reserve(1)
            run()
            events[i % 4].record(ops.stream)
            waits.append((events[i % 4], m.kv.n_past))
            if len(waits) > 1:
                ev, pos = waits.pop(0)
                ev.synchronize()
                int(ring.host[pos % ring.n])
        for ev, pos in waits:
            ev.synchronize()
            int(ring.host[pos % ring.n])

    return {"queued, in-graph reads": loops(m, ops, run, n)["queued"], "lag 1, in-graph reads": lag1}


def same_tokens(m, ops, run, run_put, ring: MappedRing, base: int, n: int = 32) -> str:
    """The in-graph write's tokens against the StepQueue's, from the same position and token."""
    from bw24.engine.graph import StepQueue

    tok = m.buf.view(1).ids
    start = ops.to_host(tok)
    m.kv.reset(base)
    want = StepQueue(m, run).run_steps(n, 0)
    m.kv.reset(base)
    ops.copy_from_host(tok, start)
    got = []
    for _ in range(n):
        m.kv.reserve(1)
        run_put()
        ops.synchronize()
        got.append(int(ring.host[m.kv.n_past % ring.n]))
    ops.copy_from_host(tok, start)
    return "the same" if got == want else f"DIFFER: {got[:8]} against {want[:8]}"


def captured(m, ops, step, base: int):
    """`step` captured (eager, capture, one replay), the cache then back at `base` positions."""
    r = ops.capture(step, keys=lambda: m.kv.n_past)
    for _ in range(3):
        m.kv.reserve(1)
        r()
    ops.synchronize()
    m.kv.reset(base)
    return r


def measure(spec: str, tokens: int, rounds: int) -> list[str]:
    import numpy as np
    from bw24.engine import Engine
    from bw24.engine.graph import decode_step
    from bw24.engine.sampling import SamplingParams
    from gpu_knockout import knock_out, unknock
    from gpu_profile import model_file, parse_spec

    preset, quant, depth = parse_spec(spec)
    eng = Engine.load(model_file(preset, quant), backend="cuda", n_ctx=depth + tokens + 64, progress=False)
    m, ops = eng.model, eng.ops
    prompt = np.random.default_rng(0).integers(10, m.cfg.n_vocab - 10, size=max(depth, 1)).tolist()
    params, base = SamplingParams(), max(depth, 1)
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
    ring = MappedRing(ops.cp)
    run_put = captured_put(m, ops, params, base, ring)
    check = same_tokens(m, ops, run, run_put, ring, base)
    arms.update(put_loops(m, ops, run_put, tokens, ring))
    times: dict[str, list[float]] = {k: [] for k in arms}
    for _ in range(rounds):
        for k, go in arms.items():
            m.kv.reset(base)
            ops.synchronize()
            t = time.perf_counter()
            go()
            times[k].append((time.perf_counter() - t) * 1e6 / tokens)
    name = f"{Path(str(preset)).name.removesuffix('.gguf')}-{quant}_d{depth}"
    lines = [f"## loop gap {name}: {tokens} tokens a loop, median of {rounds} rounds interleaved (sampler "
             f"launches left out of the no-sampler graph: {sum(skipped.values())}); in-graph reads' tokens: {check}"]
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
    a = ap.parse_args()
    for spec in a.specs:
        print("\n".join(measure(spec, a.tokens, a.rounds)), flush=True)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.exit(main())
