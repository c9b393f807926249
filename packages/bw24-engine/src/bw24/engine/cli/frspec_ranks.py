"""`bw24 frspec-ranks MODEL OUT --n 32768`: rank the vocabulary by frequency in the model's own
generations (FR-Spec). The model samples from a set of varied prompts; tokens are counted (prompt
tokens excluded), ranked most frequent first (ties: lower id), and the ranking is padded with unseen
ids in ascending order up to N. OUT is the JSON file `--frspec` reads."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ..errors import BadInputError
from ..ops import BACKENDS
from ..sampling import SamplingParams
from ._common import run_guarded

PROG = "bw24 frspec-ranks"
PROMPTS = (
    "Write a Python function that parses a CSV file and returns the rows as dictionaries.",
    "Explain how a hash map works, with an example.",
    "Translate to French: The weather is nice today and we are going to the beach.",
    "def fibonacci(n):",
    "Write a short story about a robot learning to paint.",
    "List five tips for writing clean JavaScript code.",
    "What is the capital of Australia, and why is it not Sydney?",
    "Refactor this function to be iterative:\ndef fact(n):\n    return 1 if n == 0 else n * fact(n - 1)\n",
)


def rank_tokens(counts: np.ndarray, n: int) -> np.ndarray:
    """ids by count descending (ties: lower id first), then unseen ids ascending; the first n."""
    order = np.lexsort((np.arange(counts.size), -counts))  # primary key: -count, then id
    return order[: min(n, counts.size)].astype(np.int64)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("frspec-ranks", help="rank tokens by frequency in the model's own generations (FR-Spec)",
                       description=__doc__)
    p.add_argument("model")
    p.add_argument("out", help="output JSON path")
    p.add_argument("--n", type=int, default=32768, help="ids to keep (default 32768)")
    p.add_argument("--tokens", type=int, default=128, help="tokens generated per prompt and seed")
    p.add_argument("--seeds", type=int, default=2, help="sampled generations per prompt")
    p.add_argument("--temp", type=float, default=0.8)
    p.add_argument("--prompts", default=None, help="a text file, one prompt per line (default: built-in set)")
    p.add_argument("--backend", choices=BACKENDS, default="auto")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=lambda a: run_guarded(PROG, lambda: run(a)))


def run(args: argparse.Namespace) -> int:
    from ..engine import Engine
    from ..spec.runner import plain_decode

    if args.n <= 0 or args.tokens <= 0 or args.seeds <= 0:
        raise BadInputError("--n, --tokens and --seeds must be > 0")
    prompts = PROMPTS
    if args.prompts:
        try:
            prompts = tuple(x for x in Path(args.prompts).read_text().splitlines() if x.strip())
        except OSError as e:
            raise BadInputError(f"--prompts: {e}") from None
        if not prompts:
            raise BadInputError(f"--prompts {args.prompts}: no prompt lines")
    eng = Engine.load(args.model, backend=args.backend, progress=not args.no_progress)
    V = eng.config.n_vocab
    counts = np.zeros(V, np.int64)
    for i, text in enumerate(prompts):
        ids = eng.tokenizer.encode(text, add_special=True)
        for s in range(args.seeds):
            out, _ = plain_decode(eng.model, ids, args.tokens, SamplingParams(temperature=args.temp, seed=1000 * i + s))
            np.add.at(counts, out, 1)
    ranked = rank_tokens(counts, args.n)
    seen = int((counts > 0).sum())
    doc = {"model": eng.path.name, "n_vocab": V, "n": int(ranked.size), "tokens_counted": int(counts.sum()),
           "distinct_seen": seen, "source": f"{len(prompts)} prompts x {args.seeds} seeds x {args.tokens} tokens, "
           f"temp {args.temp}", "ids": [int(x) for x in ranked]}
    Path(args.out).write_text(json.dumps(doc))
    covered = counts[ranked].sum() / max(counts.sum(), 1)
    print(f"wrote {args.out}: {ranked.size} ids of {V}; {seen} distinct tokens seen in {counts.sum()} generated; "
          f"the kept ids cover {100 * covered:.1f}% of them", file=sys.stdout)
    return 0
