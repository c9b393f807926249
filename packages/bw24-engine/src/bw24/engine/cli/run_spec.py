"""`bw24 run-spec MODEL [--draft SPEC | --ngram | --mtp] [--k 1..8]`: speculative decoding gated by
self-consistency. Greedy: each K's output must be token-identical to plain decode of the same model
(FIRST DIVERGENCE names the index otherwise). Sampled (--temp > 0): each K is run twice with the
seed and must reproduce itself exactly (its distribution is the target's: see spec/rejection.py).
Prints one `[spec K=k]` line per K and `=== SELF-CONSISTENCY PASS ===`; exit 1 on any FAIL."""

from __future__ import annotations

import argparse
import sys

from ..errors import EmptyPromptError, InvalidSamplingParamsError
from ..ops import BACKENDS
from ..sampling import SamplingParams
from ..spec.options import add_drafter_args, make_drafter, parse_k
from ._common import run_guarded

__all__ = ["add_drafter_args", "make_drafter", "parse_k", "register", "run"]  # the helpers live in spec.options

PROG = "bw24 run-spec"
DEFAULT_PROMPT = ("Rewrite this Python function to use a list comprehension and keep its name:\n\n"
                  "def squares(xs):\n    out = []\n    for x in xs:\n        out.append(x * x)\n    return out\n")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run-spec", help="speculative decoding, gated by token identity with plain decode",
                       description=__doc__)
    p.add_argument("model", help="target model: alias, path or hf:...")
    add_drafter_args(p)
    p.add_argument("--k", default="1..8", help="draft lengths: K, A..B or a comma list (default 1..8)")
    p.add_argument("--temp", type=float, default=0.0, help="temperature (0 = greedy)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompt", default=DEFAULT_PROMPT, help="prompt text (default: a code-editing request)")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    p.add_argument("-n", "--max-tokens", type=int, default=32, dest="max_tokens")
    p.add_argument("--backend", choices=BACKENDS, default="auto")
    p.add_argument("--n-ctx", type=int, default=None)
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=lambda a: run_guarded(PROG, lambda: run(a)))


def first_divergence(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def run(args: argparse.Namespace) -> int:
    from ..engine import Engine
    from ..graph import greedy_decode
    from ..spec import SpecDecoder, plain_decode

    if not args.prompt.strip():
        raise EmptyPromptError("empty prompt: --prompt needs some text")
    if args.max_tokens <= 0:
        raise InvalidSamplingParamsError(f"-n/--max-tokens={args.max_tokens} (must be > 0)")
    ks = parse_k(args.k)
    params = SamplingParams(temperature=args.temp, seed=args.seed)
    eng = Engine.load(args.model, backend=args.backend, n_ctx=args.n_ctx, progress=not args.no_progress)
    drafter = make_drafter(args, eng, progress=not args.no_progress)
    ids = eng.chat_ids([{"role": "user", "content": args.prompt}]) if args.chat else \
        eng.tokenizer.encode(args.prompt, add_special=True)
    n = args.max_tokens
    print(f"model {eng.path.name} ({eng.config.arch}), backend {eng.backend}, drafter {drafter.name}, "
          f"prompt {len(ids)} tokens, {'greedy' if params.greedy else f'temp {args.temp} seed {args.seed}'}",
          file=sys.stderr)

    ref, plain_s = plain_decode(eng.model, ids, n, params)
    if params.greedy:  # the engine's own greedy loop is the reference the contract names
        ref = greedy_decode(eng.model, ids, n)
    print(f"[plain] {len(ref)} tokens  {len(ref) / plain_s if plain_s > 0 else float('nan'):.1f} tok/s", flush=True)

    ok = True
    for k in ks:
        dec = SpecDecoder(eng.model, drafter, k=k, verify=args.verify)
        out = list(dec.generate(ids, n, params))
        st = dec.stats
        other = ref if params.greedy else list(SpecDecoder(eng.model, drafter, k=k, verify=args.verify)
                                               .generate(ids, n, params))
        div = first_divergence(out, other)
        acc = f"{st.accepted}/{st.drafted} = {100 * st.acceptance:.1f}%" if st.drafted else "0/0 = n/a"
        line = (f"[spec K={k}] {st.n_generated} tokens  {st.decode_tok_s:.1f} tok/s  acceptance: {acc}  "
                f"tokens/round: {st.tokens_per_round:.2f}  self-consistency: ")
        if div is None:
            print(line + "PASS", flush=True)
        else:
            ok = False
            what = "plain decode" if params.greedy else "the seeded rerun"
            print(line + f"FAIL  FIRST DIVERGENCE at index {div} (vs {what}: "
                  f"{out[div] if div < len(out) else None} != {other[div] if div < len(other) else None})",
                  flush=True)
    print("=== SELF-CONSISTENCY PASS ===" if ok else "=== SELF-CONSISTENCY FAIL ===", flush=True)
    return 0 if ok else 1
