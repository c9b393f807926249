"""bw24-probe [all|bandwidth|latency|gemm|mma|matvec|info] [--json FILE]

Measures the current GPU, prints rich tables, and caches the figures per device (bw24.probe.ceilings)
for perf, benchmarks and the workbench. Exit codes: 0 ok, 1 a bench failed, 2 no GPU / bad usage.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .suites import SUITES

NO_GPU_EXIT = 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bw24-probe", description="GPU microbenchmarks and measured ceilings")
    p.add_argument("suites", nargs="*", default=["all"], choices=["all", *SUITES], metavar="SUITE",
                   help=f"what to measure: all (default), {', '.join(SUITES)}")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the ceilings record to FILE")
    p.add_argument("--no-save", action="store_true", help="do not update this device's cached ceilings")
    p.add_argument("--quick", action="store_true", help="small sizes, no config sweep (smoke test, not ceilings)")
    p.add_argument("--repeats", type=int, default=15, help="timed repeats per measurement (median reported)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.repeats < 3:
        print(f"bw24-probe: --repeats must be >= 3 (got {args.repeats})", file=sys.stderr)
        return NO_GPU_EXIT

    from bw24.runtime import has_gpu, no_gpu_reason

    if not has_gpu():
        print(f"bw24-probe: no CUDA GPU: {no_gpu_reason()}", file=sys.stderr)
        return NO_GPU_EXIT

    import cupy
    from rich.console import Console

    from . import ceilings, suites
    from .report import device_table, print_section
    from .rows import BenchContext

    console = Console()
    dev = suites.device_summary()
    console.print(device_table(dev))
    names = suites.expand(args.suites)
    try:
        known = ceilings.load(dev.name, dev.cc).results.get(ceilings.READ_METRIC)
    except ceilings.CeilingsError:
        known = None
    ctx = BenchContext(dev.sm_count, dev.l2_bytes, dev.free_mem, cupy.cuda.Stream(non_blocking=True),
                       repeats=args.repeats, quick=args.quick)
    record = suites.run(names, ctx, dev, lambda title, rows: print_section(console, title, rows), known)
    if args.quick:
        console.print("[yellow]--quick: small sizes, not saved as this device's ceilings[/yellow]")
    elif not args.no_save:
        console.print(f"ceilings cached: {ceilings.save(record)}")
    if args.json:
        ceilings.save(record, args.json, merge=False)
        console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
