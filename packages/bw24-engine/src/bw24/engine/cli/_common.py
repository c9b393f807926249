"""Helpers shared by subcommands: bad input -> one clear line on stderr and exit code 2."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ..errors import EngineError


def input_errors() -> tuple[type[BaseException], ...]:
    """Every typed bad-input error the layers below raise (engine, gguf, tokenizer)."""
    from bw24.runtime.errors import NoGPUError  # "--backend cuda" on a machine without a usable GPU

    errs: list[type[BaseException]] = [EngineError, NoGPUError]
    try:
        from bw24.gguf.errors import GGUFError

        errs.append(GGUFError)
    except ImportError:
        pass
    try:
        from bw24.tokenizer import errors as tok_errors  # type: ignore[attr-defined]

        errs.extend(v for v in vars(tok_errors).values() if isinstance(v, type) and issubclass(v, Exception))
    except ImportError:
        pass
    return tuple(errs)


def run_guarded(prog: str, fn: Callable[[], int], *_: Any) -> int:
    try:
        return fn()
    except input_errors() as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
