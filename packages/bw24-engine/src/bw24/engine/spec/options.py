"""The drafter options shared by `bw24 run-spec`, `bw24 run-gen` and `bw24-server`: one argparse group,
a frozen DrafterOptions, a cheap check that needs only the GGUF headers (the server runs it before
binding its port) and make_drafter, which builds the drafter for a loaded engine."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from ..errors import BadInputError


@dataclass(frozen=True)
class DrafterOptions:
    draft: str | None = None     # draft model SPEC (alias, path, hf:...)
    ngram: bool = False
    mtp: bool = False
    frspec: str | None = None    # FR-Spec ranks file (draft models and MTP heads)
    frspec_n: int | None = None
    verify: str = "auto"

    @property
    def enabled(self) -> bool:
        """A drafter was asked for (--draft, --ngram or --mtp)."""
        return bool(self.draft or self.ngram or self.mtp)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DrafterOptions:
        return cls(draft=args.draft, ngram=bool(args.ngram), mtp=bool(args.mtp), frspec=args.frspec,
                   frspec_n=args.frspec_n, verify=args.verify)


def add_drafter_args(p: argparse.ArgumentParser) -> None:
    """--draft SPEC | --ngram | --mtp, --frspec, --frspec-n, --verify (K is added by each command)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--draft", metavar="SPEC", default=None, help="draft model (alias, path, hf:...) sharing the tokenizer")
    g.add_argument("--ngram", action="store_true", help="n-gram / prompt-lookup drafting from the context")
    g.add_argument("--mtp", action="store_true", help="the model's NextN/MTP head")
    p.add_argument("--frspec", metavar="RANKS.json", default=None,
                   help="FR-Spec: trim the drafter's head to the top tokens of this ranks file (bw24 frspec-ranks)")
    p.add_argument("--frspec-n", type=int, default=None, help="use the first N ids of the ranks file")
    p.add_argument("--verify", choices=("auto", "rowwise", "batched"), default="auto",
                   help="verify forward: auto = batched only where the backend declares it row-exact")


def add_k_arg(p: argparse.ArgumentParser) -> None:
    """The single, adaptive K of run-gen and bw24-server (run-spec takes a list of K)."""
    p.add_argument("--k", type=int, default=4, help="draft length with --draft/--ngram/--mtp (1..8, adaptive)")


def parse_k(text: str) -> list[int]:
    """'4' -> [4]; '1..8' -> [1, ..., 8]; '1,3,5' -> [1, 3, 5]; every K in 1..8."""
    try:
        if ".." in text:
            a, b = text.split("..")
            ks = list(range(int(a), int(b) + 1))
        else:
            ks = [int(x) for x in text.split(",")]
    except ValueError:
        raise BadInputError(f"--k {text!r}: expected K, A..B or a comma list") from None
    if not ks or any(not 1 <= k <= 8 for k in ks):
        raise BadInputError(f"--k {text!r}: every K must be in 1..8")
    return ks


def _opts(o: DrafterOptions | argparse.Namespace) -> DrafterOptions:
    return o if isinstance(o, DrafterOptions) else DrafterOptions.from_args(o)


def check_drafter_options(opts: DrafterOptions | argparse.Namespace, model: str) -> None:
    """What make_drafter would refuse, found from the GGUF headers only (no weights loaded): option
    combinations, a draft model that cannot be resolved or does not share the target's vocabulary, a
    model without an MTP head, an unusable ranks file. Raises BadInputError / GGUFError / OSError."""
    from bw24.gguf import GGUFFile, ModelConfig, resolve_model

    from .base import NoMTPHeadError
    from .draft_model import check_same_vocab
    from .frspec import load_ranks

    o = _opts(opts)
    if o.frspec and not (o.draft or o.mtp):
        raise BadInputError("--frspec needs a drafter with an output head (--draft or --mtp)")
    if not (o.mtp or o.draft):
        return
    tf = GGUFFile(resolve_model(model))
    tc = ModelConfig.from_gguf(tf)
    if o.mtp and tc.n_nextn < 1:
        raise NoMTPHeadError(f"{tf.path.name}: no NextN/MTP head ({tc.arch}.nextn_predict_layers="
                             f"{tc.n_nextn}); write one with `bw24-gguf synth PRESET OUT --mtp`")
    if o.mtp and o.frspec:  # the MTP head drafts over the target's own vocabulary
        load_ranks(o.frspec, tc.n_vocab, o.frspec_n)
    if o.draft:
        df = GGUFFile(resolve_model(o.draft))
        dc = ModelConfig.from_gguf(df)
        check_same_vocab(tf, tc, df, dc)
        if o.frspec:
            load_ranks(o.frspec, dc.n_vocab, o.frspec_n)


def make_drafter(opts: DrafterOptions | argparse.Namespace, eng, *, progress: bool = False):
    """The drafter the options name for a loaded Engine (n-gram when none is given)."""
    from ..engine import Engine
    from .draft_model import DraftModelDrafter, check_same_vocab
    from .frspec import load_ranks
    from .mtp import MTPDrafter
    from .ngram import NgramDrafter

    o = _opts(opts)
    ranks = None
    if o.frspec:
        ranks = load_ranks(o.frspec, eng.config.n_vocab, o.frspec_n)
    if o.mtp:
        return MTPDrafter(eng.model, eng.gguf, frspec_ids=ranks)
    if o.draft:
        dr = Engine.load(o.draft, backend=eng.backend, n_ctx=eng.n_ctx, progress=progress, draft=True)
        check_same_vocab(eng.gguf, eng.config, dr.gguf, dr.config)
        return DraftModelDrafter(dr.model, frspec_ids=ranks, gguf=dr.gguf)
    if ranks is not None:
        raise BadInputError("--frspec needs a drafter with an output head (--draft or --mtp)")
    return NgramDrafter()
