"""`bw24 bench`: run the committed cells, append perf-CI rows, check them against the rolling
baseline; `--vs-llama BIN` interleaves llama-bench; `--table [--write README.md]` renders the table.

Exit codes: 0 ok (warnings printed), 1 a cell regressed (> 3% or acceptance -0.05), 2 bad input.
"""

from __future__ import annotations

import argparse
import sys


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmark the cells file, record perf-CI rows, compare with llama.cpp",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells-file", default="benchmarks/cells.toml", help="TOML cells (default: %(default)s)")
    p.add_argument("--cells", default=None, help="comma-separated globs/substrings of cell ids to run")
    p.add_argument("--backend", default="cuda", choices=("cuda", "cpu"), help="default: %(default)s")
    p.add_argument("--reps", type=int, default=5, help="timed repetitions per cell, >= 5 (default: %(default)s)")
    p.add_argument("--perf-file", default="benchmarks/perf.jsonl", help="perf-CI JSONL (default: %(default)s)")
    p.add_argument("--no-record", action="store_true", help="check against the baseline but append nothing")
    p.add_argument("--cache-dir", default=None, help="synthetic GGUF cache (default: $BW24_BENCH_CACHE or .cache/bw24-bench)")
    p.add_argument("--vs-llama", default=None, metavar="LLAMA_BENCH", help="llama-bench binary to interleave with")
    p.add_argument("--llama-arg", action="append", default=[], help="extra llama-bench argument (repeatable)")
    p.add_argument("--llama-block", type=int, default=1, metavar="N",
                   help="bw24 and llama-bench alternate in blocks of N reps, llama-bench running -r N in one "
                        "process (default 1: A B A B, one llama-bench process per rep)")
    p.add_argument("--clock-ms", type=int, default=50, metavar="MS",
                   help="sample the GPU's clocks, power and clock-event reasons every MS ms while each arm runs, "
                        "into the rows' clocks_load (perf/clocks.py; 0: off; default: %(default)s)")
    p.add_argument("--table", action="store_true", help="print the README table from --perf-file and exit")
    p.add_argument("--write", default=None, metavar="README.md", help="with --table: replace the marked section")
    p.add_argument("--device", default=None, help="with --table: only this device's rows")
    p.add_argument("--targets", default=None, metavar="TARGETS.toml",
                   help="with --table: also each target's standing (benchmarks/targets.toml: issue 5's), from the "
                        "latest default rows beside llama.cpp; with --write, into the file's perf-targets section")
    p.set_defaults(func=run)


def _table(args) -> int:
    from ..perf import table
    from ..perf import targets as tg
    from ..perf.jsonl import read_rows

    rows = read_rows(args.perf_file)
    targets = tg.load_targets(args.targets) if args.targets else None  # (a bad file stops before anything is written)
    if args.write:
        sections = {(table.BEGIN, table.END): table.render_table(rows, args.device)}
        if targets is not None:  # both sections or neither: a file without the targets' markers keeps its old table
            sections[(tg.BEGIN, tg.END)] = tg.render_targets(rows, targets, args.device)
        table.write_sections(args.write, sections)
        if targets is not None:
            print(f"bench: wrote the standing of {len(targets)} targets into {args.write}")
        print(f"bench: wrote the perf table ({len(rows)} rows read) into {args.write}")
    else:
        print(table.render_table(rows, args.device), end="")
        if targets is not None:
            print("\n" + tg.render_targets(rows, targets, args.device), end="")
    return 0


def _fmt(row: dict) -> str:
    def f(v, spec):
        return format(v, spec) if isinstance(v, int | float) else "—"

    figure = row["prefill_tok_s"] if row["mode"] == "prefill" else row["decode_tok_s"]
    s = (f"{row['cell']:<40} {f(figure, '10,.1f')} tok/s  bytes/tok {f(row['bytes_per_token'], ',')}  "
         f"roofline {f(row['roofline_pct'], '.1f')}%  kernels/tok {f(row['kernels_per_token'], 'd')}  "
         f"VRAM {f(row['vram_peak_bytes'] and row['vram_peak_bytes'] / 2**30, '.2f')} GiB")
    if row.get("llama_tok_s"):
        s += f"  llama.cpp {row['llama_tok_s']:,.1f}  ratio {row['ratio']:.2f}x"
    if row.get("acceptance") is not None:
        s += f"  acceptance {row['acceptance']:.3f}  tokens/round {row['tokens_per_round']:.2f}"
    return s


class PhaseClock:
    """Wall seconds a cell spends per phase (the synthesis or cache lookup, the load, the warmup, each arm's
    timed repetitions), printed under its row: what a device session's stage time is made of."""

    def __init__(self) -> None:
        self.secs: dict[str, float] = {}

    def time(self, phase: str, fn, *args):
        return self.timed(phase, fn)(*args)

    def timed(self, phase: str, fn):
        import time

        def run(*args):
            t0 = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self.secs[phase] = self.secs.get(phase, 0.0) + time.perf_counter() - t0
        return run

    def __str__(self) -> str:
        return "  ".join(f"{k} {v:.1f}" for k, v in self.secs.items())


def _bench(args) -> int:
    from ..errors import BadInputError
    from ..perf.baseline import check_rows, worst
    from ..perf.cells import load_cells, select_cells
    from ..perf.clocks import describe, sampler_for
    from ..perf.jsonl import append_rows, make_row, read_rows, run_env
    from ..perf.llama import LlamaBench
    from ..perf.models import cache_dir, model_path
    from ..perf.roofline import current_ceiling
    from ..perf.runner import CellBench, interleave_blocks

    if args.reps < 5:
        raise BadInputError(f"--reps {args.reps}: the median needs at least 5 repetitions")
    if args.llama_block < 1:
        raise BadInputError(f"--llama-block {args.llama_block} (must be >= 1)")
    cells = select_cells(load_cells(args.cells_file), args.cells)
    history = read_rows(args.perf_file)
    ceiling = current_ceiling(args.backend)
    env = run_env(args.backend)
    print(f"bench: {len(cells)} cell(s) on {env['device']} ({args.backend}), git {env['git']}"
          f"{' (dirty)' if env['dirty'] else ''}; roofline: {ceiling.note}", flush=True)
    cache, rows = cache_dir(args.cache_dir), []
    for cell in cells:
        clock = PhaseClock()
        path = clock.time("model", model_path, cell, cache)
        bench = clock.time("load", CellBench, cell, path, args.backend)
        clock.time("warmup", bench.warmup)
        llama = None
        if args.vs_llama and cell.mode != "spec":
            llama = LlamaBench(args.vs_llama, path, cell, tuple(args.llama_arg))
        with sampler_for(args.backend, args.clock_ms) as smi:  # (the clocks under load: perf/clocks.py)
            ours, theirs = interleave_blocks(clock.timed("bw24", smi.arm("bw24", bench.rep)),
                                             clock.timed("llama.cpp", smi.arm("llama.cpp", llama.samples))
                                             if llama else None, args.reps, args.llama_block)
        res = bench.result(ours, ceiling)
        row = make_row(res, env=env, roofline_bps=ceiling.read_bytes_per_s, roofline_note=ceiling.note,
                       llama=theirs or None, llama_info=llama.info if llama else None)
        loaded = smi.summaries()
        if loaded:
            row["clocks_load"] = loaded
        rows.append(row)
        print(_fmt(row), flush=True)
        print(f"  wall s: {clock}", flush=True)  # where a GPU session's minutes go (model: cache or synthesis)
        if loaded:
            print(f"  clocks: {describe(loaded)}", flush=True)
        if not args.no_record:  # each cell's row as soon as it is measured: a run cut short keeps them
            append_rows(args.perf_file, [row])
        del bench
    verdicts = check_rows(history, rows)  # against the history before this run (no row is its own baseline)
    for v in verdicts:
        print(f"perf-ci {v.status.upper():<4} {v.message}")
    if not args.no_record:
        print(f"bench: appended {len(rows)} row(s) to {args.perf_file}")
    status = worst(verdicts)
    print(f"perf-ci: {status.upper()}")
    return 1 if status == "fail" else 0


def run(args) -> int:
    from ._common import run_guarded

    if args.write and not args.table:
        print("bw24 bench: error: --write needs --table", file=sys.stderr)
        return 2
    return run_guarded("bw24 bench", lambda: _table(args) if args.table else _bench(args))
