"""`bw24 kernel-check`: every cuda op vs its NumPy reference (compile-only without a GPU)."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("kernel-check", help="check every CUDA kernel against the NumPy reference")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: fresh, printed)")
    p.add_argument("--only", default=None, help="run only cases whose name contains this text")
    p.add_argument("--compile-only", action="store_true", help="only compile every .cu for sm_90a and sm_120a")
    p.set_defaults(func=_run)


def _run(args) -> int:
    from ..kernel_check import main

    return main(seed=args.seed, only=args.only, compile_only=args.compile_only)
