"""What running a draft model's steps beside the target's verify could buy (issue 8's real pair): both models are
launch- and latency-bound (a few blocks a kernel, the SMs mostly idle), and each Engine's backend has a stream of
its own, so their captured graphs can run at the same time. A speculative round today runs them one after the
other (the verify waits for the drafts it checks); a pipelined drafter (drafting the next round while the target
verifies this one, kept when every draft is accepted) would overlap them. This measures the ceiling of that.

    python packages/bw24-engine/benchmarks/gpu_overlap.py OUTDIR TARGET.gguf DRAFT.gguf [DEPTH]

At DEPTH cached tokens (300: the pair's code prompts): the target's T = 8 verify alone (the adaptive K's cap of 7
plus the bonus row), K = 7 draft steps alone, the two in sequence (the drafts, a sync, the verify: a round's GPU
work) and issued together (the drafts on the draft's stream, the verify on the target's, one wait for both);
then 16 plain steps of each model alone and side by side. Median of REPS wall times each, in us. The draft is
loaded as a draft (int8 activations at every K). Writes OUTDIR/overlap.json and prints a table.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPS = 30
K = 7
STEPS = 16
BACKEND = "cuda"  # (a CPU test runs the script's logic on the reference backend: tests/test_gpu_overlap.py)


class Model:
    """One engine at DEPTH cached tokens with its decode graph captured; rollback() returns its cache there."""

    def __init__(self, path: str, depth: int, draft: bool):
        from bw24.engine import Engine
        from bw24.engine.graph import decode_step
        from bw24.engine.sampling import SamplingParams

        self.eng = Engine.load(path, backend=BACKEND, n_ctx=depth + 64, progress=False, draft=draft)
        m, ops = self.eng.model, self.eng.ops
        rng = np.random.default_rng(0)
        m.kv.reset()
        m.feed(rng.integers(10, m.cfg.n_vocab - 10, size=depth).tolist())
        params = SamplingParams()
        ops.sample(m.buf.logits[0], params, m.kv.pos, out=m.buf.view(1).ids)
        self.m, self.ops, self.n0 = m, ops, m.kv.n_past
        self.run = ops.capture(decode_step(m, params), keys=lambda: m.kv.n_past)
        self.ids = rng.integers(10, m.cfg.n_vocab - 10, size=K + 1).astype(np.int32)

    def rollback(self) -> None:
        self.m.kv.reset(self.n0)

    def steps(self, n: int) -> None:
        """n decode steps, issued without waiting (each feeds its argmax to the next, as a draft does)."""
        for _ in range(n):
            self.m.kv.reserve(1)
            self.run()


def median_us(fn, prep, syncs) -> float:
    ts = []
    for _ in range(REPS + 2):  # the first two: eager runs and captures
        prep()
        for s in syncs:
            s()
        t0 = time.perf_counter()
        fn()
        for s in syncs:
            s()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts[2:]) * 1e6


def main() -> int:
    from bw24.engine.spec.device import FastVerifier

    if len(sys.argv) not in (4, 5):
        raise SystemExit(__doc__)
    out, tpath, dpath = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    depth = int(sys.argv[4]) if len(sys.argv) == 5 else 300
    out.mkdir(parents=True, exist_ok=True)
    t, d = Model(tpath, depth, draft=False), Model(dpath, depth, draft=True)
    fv = FastVerifier(t.m)
    syncs = (t.ops.synchronize, d.ops.synchronize)

    def prep() -> None:
        t.rollback()
        d.rollback()
        t.ops.copy_from_host(t.m.buf.view(K + 1).ids, t.ids)

    def verify() -> None:
        fv.run(K + 1)  # ends with its host read: the target's stream drained

    def sequential() -> None:
        d.steps(K)
        d.ops.synchronize()
        verify()

    def together() -> None:
        d.steps(K)  # queued on the draft's stream; the verify runs beside them
        verify()

    def plain_both() -> None:
        for _ in range(STEPS):
            t.steps(1)
            d.steps(1)

    r = {"depth": depth, "K": K, "reps": REPS,
         "verify_alone": median_us(verify, prep, syncs),
         "drafts_alone": median_us(lambda: d.steps(K), prep, syncs),
         "sequential": median_us(sequential, prep, syncs),
         "together": median_us(together, prep, syncs),
         "target_steps_alone": median_us(lambda: t.steps(STEPS), prep, syncs),
         "draft_steps_alone": median_us(lambda: d.steps(STEPS), prep, syncs),
         "steps_side_by_side": median_us(plain_both, prep, syncs)}
    r["hidden_of_drafts"] = (r["sequential"] - r["together"]) / r["drafts_alone"]
    r["side_by_side_vs_sum"] = r["steps_side_by_side"] / (r["target_steps_alone"] + r["draft_steps_alone"])
    (out / "overlap.json").write_text(json.dumps(r, indent=1) + "\n")
    print(f"# target {Path(tpath).name}, draft {Path(dpath).name}, depth {depth}, median of {REPS} (us)")
    print(f"verify T={K + 1} alone          {r['verify_alone']:9.1f}")
    print(f"{K} draft steps alone         {r['drafts_alone']:9.1f}")
    print(f"drafts, then verify          {r['sequential']:9.1f}")
    print(f"drafts beside the verify     {r['together']:9.1f}   ({100 * r['hidden_of_drafts']:.0f}% of the drafts' time hidden)")
    print(f"{STEPS} target steps alone       {r['target_steps_alone']:9.1f}")
    print(f"{STEPS} draft steps alone        {r['draft_steps_alone']:9.1f}")
    print(f"both side by side            {r['steps_side_by_side']:9.1f}   ({r['side_by_side_vs_sum']:.2f}x the sum)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
