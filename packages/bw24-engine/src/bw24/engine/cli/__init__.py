"""`bw24` command line. One module per subcommand in this package; each defines
`register(subparsers)` which adds its parser and sets `func(args) -> int` (the exit code).
Modules are discovered, so a new subcommand (kernel-check, bench, ...) is just a new file here.

Exit codes: 0 ok, 1 a gate failed (MISMATCH), 2 bad input (clear message on stderr).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bw24", description="bw24: GGUF LLM inference engine")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(mod, "register"):
            mod.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    return int(args.func(args) or 0)
