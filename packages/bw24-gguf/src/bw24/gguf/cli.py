"""bw24-gguf: inspect a GGUF, write a synthetic one, or cut a tokenizer-only donor."""

from __future__ import annotations

import argparse
import sys

from .errors import GGUFError


def _parser() -> argparse.ArgumentParser:
    from .synth import MIXES, PRESETS

    ap = argparse.ArgumentParser(prog="bw24-gguf", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("inspect", help="architecture, hyperparameters, tensors, totals per type")
    p.add_argument("file", help="GGUF path or model spec (alias, hf:owner/repo[:QUANT])")
    p.add_argument("--max-tensors", type=int, default=None, help="show at most N tensor rows")
    p = sub.add_parser("synth", help="write a GGUF with a real architecture's shapes and random weights")
    p.add_argument("preset", choices=sorted(PRESETS))
    p.add_argument("out")
    p.add_argument("--quant", default="q4_k_m", choices=list(MIXES))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tokenizer-from", default=None, metavar="DONOR.gguf", help="copy tokenizer.* from this GGUF")
    p.add_argument("--layers", type=int, default=None, help="override the number of layers")
    p.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    p.add_argument("--mtp", type=int, nargs="?", const=1, default=0, metavar="N",
                   help="append N NextN/MTP blocks (default 1); llama.cpp cannot load these for llama/qwen archs")
    p = sub.add_parser("vocab-only", help="write a tensor-less GGUF holding only DONOR's tokenizer")
    p.add_argument("donor")
    p.add_argument("out")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "inspect":
            from .inspect import inspect_file
            from .resolve import resolve_model

            inspect_file(str(resolve_model(args.file)), max_tensors=args.max_tensors)
        elif args.cmd == "synth":
            from .synth import synth

            r = synth(args.preset, args.out, mix=args.quant, seed=args.seed, donor=args.tokenizer_from,
                      n_layer=args.layers, workers=args.workers, progress=sys.stderr.isatty(),
                      mtp=args.mtp)
            print(f"wrote {r.path} ({r.nbytes / 2**30:.2f} GiB, {r.n_tensors} tensors, n_vocab={r.n_vocab}) "
                  f"in {r.seconds:.1f} s")
        elif args.cmd == "vocab-only":
            from .synth import write_vocab_only

            out = write_vocab_only(args.donor, args.out)
            print(f"wrote {out}")
    except (GGUFError, FileNotFoundError) as e:
        print(f"bw24-gguf: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
