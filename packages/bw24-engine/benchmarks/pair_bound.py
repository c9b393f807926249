"""What issue 8's real pair (qwen2.5-coder-0.5b drafting for qwen2.5-coder-1.5b) could reach, and what it needs:
a replay of spec_bench's pair prompts round by round against costs, with the tokens taken once on the CPU.

    python packages/bw24-engine/benchmarks/pair_bound.py collect OUT.json [TARGET.gguf DRAFT.gguf]
    python packages/bw24-engine/benchmarks/pair_bound.py bound OUT.json [--step US --draft US --verify8 US]

`collect` runs llama-cpp-python (the CPU test oracle) greedily: the target's 136 tokens after each of
spec_bench.PAIR_PROMPTS (the GGUF's chat template), and the draft's greedy 7-token continuation at every one of the
first 128 positions. A greedy speculative run emits the target's tokens whatever the drafts, so the context at a
round is always the prompt plus a prefix of those tokens, and the draft's proposal depends on the position only:
every drafter policy below replays from that one file. (llama.cpp's greedy tokens on the CPU, not bw24's on the
GPU: the acceptance it gives is an estimate; at e6bec2b's costs it gives 0.70 / 0.89 / 1.00x where the H200 ran
0.74 / 0.92 / 1.01x: evidence/pair_bound_e6bec2b_costs.txt.)

`bound` replays the rounds of spec_bench's pair cell (K drafts, then one verify of K + 1 rows; the draft model
feeds the tokens its cache lacks one step each, as DraftModelDrafter.propose_into does) with the costs given (us):
a target step, a draft step, an 8-row verify (verify of T rows = step * (1 + (T - 1) * slope), the slope fitted to
the 8-row figure). The defaults are the H200's `overlap` at e6bec2b (evidence/overlap_h200_e6bec2b.log: 16 steps
of each model, the 8-row verify at 300 cached tokens). It prints the ratio to plain decode per prompt for those
costs, the same with n-gram lookup drafting first (the draft model only where the lookup finds no match), then for a
grid of cheaper verifies and drafts at K = 3, 5, 7: where 1.6x starts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

N = 128       # spec_bench's -n
K_MAX = 7     # the adaptive K's cap for the pair (CudaOps.spec_k_cap)
HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Costs:
    step: float    # a target decode step, us
    draft: float   # a draft decode step, us
    verify8: float  # the target's 8-row verify, us

    def verify(self, rows: int) -> float:
        slope = (self.verify8 / self.step - 1) / 7
        return self.step * (1 + (rows - 1) * slope)


# evidence/overlap_h200_e6bec2b.log: 16 target steps 17,525.9 us, 16 draft steps 11,159.9, the T = 8 verify 2,221.9
H200_E6BEC2B = Costs(step=17525.9 / 16, draft=11159.9 / 16, verify8=2221.9)


def replay(prompt_ids: list[int], seq: list[int], drafts: list[list[int]], costs: Costs, k_max: int = K_MAX,
           n: int = N, lookup_min_n: int | None = None) -> dict:
    """The rounds of a greedy draft-model run that emits seq[:n]: drafts[g] is the draft's proposal after the
    context prompt + seq[:g + 1]. Returns the spec time, plain time (n steps), rounds and acceptance.
    lookup_min_n: n-gram lookup (spec.ngram.NgramDrafter, matches of lookup_min_n..4 tokens) drafts first, free;
    the draft model runs only in the rounds where it proposes nothing."""
    from bw24.engine.spec.ngram import NgramDrafter
    from bw24.engine.spec.verify import greedy_accept

    lookup = NgramDrafter(min_n=lookup_min_n) if lookup_min_n else None
    gen, t, rounds, acc, drafted = 1, 0.0, 0, 0, 0
    cached = len(prompt_ids)  # the draft's cache after its prefill of the prompt
    while gen < n:
        k = min(k_max, n - gen - 1)
        ctx_len = len(prompt_ids) + gen
        prop: list[int] = []
        if k > 0 and lookup is not None:
            prop = lookup.propose(prompt_ids + seq[:gen], k).tokens
        if k > 0 and not prop:
            t += (ctx_len - cached) * costs.draft + (k - 1) * costs.draft  # catch-up, then k - 1 fed drafts
            prop = drafts[gen - 1][:k]
            cached = ctx_len + k - 1
        j = greedy_accept(prop, seq[gen: gen + len(prop) + 1])
        t += costs.verify(len(prop) + 1)
        gen += j + 1
        cached = min(cached, len(prompt_ids) + gen - 1)  # the rollback keeps the agreeing prefix
        rounds, acc, drafted = rounds + 1, acc + j, drafted + len(prop)
    return dict(spec_us=t, plain_us=n * costs.step, ratio=n * costs.step / t, rounds=rounds,
                acceptance=acc / drafted if drafted else float("nan"))


def collect(out: Path, target: str, draft: str) -> None:
    import numpy as np
    from llama_cpp import Llama
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    sys.path.insert(0, str(HERE))
    import spec_bench

    kw = dict(n_ctx=1024, verbose=False, logits_all=True)
    tgt, drf = Llama(target, **kw), Llama(draft, **kw)

    def step(llm, toks) -> int:
        llm.eval(toks)
        return int(np.argmax(llm.scores[llm.n_tokens - 1]))

    fmt = Jinja2ChatFormatter(template=tgt.metadata["tokenizer.chat_template"], eos_token="<|im_end|>", bos_token="")
    rows = []
    for prompt in spec_bench.PAIR_PROMPTS:
        ids = tgt.tokenize(fmt(messages=[{"role": "user", "content": prompt}]).prompt.encode(), add_bos=False,
                           special=True)
        tgt.reset()
        seq = [step(tgt, ids)]
        while len(seq) < N + K_MAX + 1:
            seq.append(step(tgt, [seq[-1]]))
        drf.reset()
        drf.eval(ids)
        drafts = []
        for g in range(N):
            drf.n_tokens = len(ids) + g  # back to the context prompt + seq[:g] (eval drops the cache past it)
            d = [step(drf, [seq[g]])]
            while len(d) < K_MAX:
                d.append(step(drf, [d[-1]]))
            drafts.append(d)
        rows.append(dict(prompt=prompt, ids=ids, seq=seq, drafts=drafts))
        print(f"{len(rows)}: {tgt.detokenize(seq[:40]).decode(errors='replace')!r}...", flush=True)
    out.write_text(json.dumps(dict(target=Path(target).name, draft=Path(draft).name, oracle="llama-cpp-python CPU",
                                   prompts=rows)) + "\n")


def bound(path: Path, costs: Costs) -> list[str]:
    data = json.loads(path.read_text())["prompts"]
    lines = [f"costs: step {costs.step:.0f} us, draft step {costs.draft:.0f} us ({costs.draft / costs.step:.2f}), "
             f"8-row verify {costs.verify8:.0f} us ({costs.verify8 / costs.step:.2f} steps)"]
    for i, p in enumerate(data):
        r = replay(p["ids"], p["seq"], p["drafts"], costs)
        lines.append(f"  p{i}: {r['rounds']} rounds, acceptance {r['acceptance']:.2f}, {r['ratio']:.2f}x plain")
    hyb = [[replay(p["ids"], p["seq"], p["drafts"], costs, lookup_min_n=m)["ratio"] for p in data] for m in (1, 2, 3, 4)]
    lines.append("n-gram lookup first, the draft where it proposes nothing (min match 1 / 2 / 3 / 4 tokens): " + "; ".join(
        f"p{i} " + " / ".join(f"{h[i]:.2f}" for h in hyb) for i in range(len(data))))
    lines.append("grid (median over the prompts, x plain decode; rows: 8-row verify in steps, columns: draft step / "
                 "target step, best of K = 3, 5, 7):")
    fracs = (0.64, 0.5, 0.4, 0.33, 0.25, 0.2)
    lines.append("  verify8 " + " ".join(f"{f:>6.2f}" for f in fracs))
    for v8 in (costs.verify8 / costs.step, 1.6, 1.4, 1.2, 1.0):
        cells = []
        for f in fracs:
            c = Costs(costs.step, costs.step * f, costs.step * v8)
            cells.append(max(statistics.median(replay(p["ids"], p["seq"], p["drafts"], c, k)["ratio"] for p in data)
                             for k in (3, 5, 7)))
        lines.append(f"  {v8:7.2f} " + " ".join(f"{x:6.2f}" for x in cells))
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("collect")
    c.add_argument("out", type=Path)
    c.add_argument("target", nargs="?", default=None)
    c.add_argument("draft", nargs="?", default=None)
    b = sub.add_parser("bound")
    b.add_argument("tokens", type=Path)
    b.add_argument("--step", type=float, default=H200_E6BEC2B.step)
    b.add_argument("--draft", type=float, default=H200_E6BEC2B.draft)
    b.add_argument("--verify8", type=float, default=H200_E6BEC2B.verify8)
    a = ap.parse_args(argv)
    if a.cmd == "collect":
        from bw24.gguf import resolve_model

        collect(a.out, a.target or str(resolve_model("qwen2.5-coder-1.5b")),
                a.draft or str(resolve_model("qwen2.5-coder-0.5b")))
    else:
        print("\n".join(bound(a.tokens, Costs(a.step, a.draft, a.verify8))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
