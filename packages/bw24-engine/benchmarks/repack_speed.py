"""Host-side repack speed (GGUF blocks -> the CUDA kernels' planes), the step that dominated model load.

python packages/bw24-engine/benchmarks/repack_speed.py [--shape 12288x4096] [--types Q4_K,...] [--repeats 5]
    [--workers N]
Per type: MB/s of GGUF bytes through repack() (whole tensor, one thread), repack_parallel() on one thread (row
chunks, the cache-blocking alone) and on N threads (--workers, else $BW24_REPACK_THREADS, else min(16, CPUs)),
median of --repeats runs on random well-formed blocks at an 8B-like shape, after one warm-up run each. Checks
that all give the same planes. No GPU needed.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_session import header  # noqa: E402


def _host() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                   if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"# host: {platform.node()}, {cpu}, {os.cpu_count()} CPUs, numpy {np.__version__}"


def _median_s(fn, repeats: int) -> float:
    fn()  # warm-up: first-touch page faults of fresh buffers, imports
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _same(got: dict, want: dict) -> bool:
    return got.keys() == want.keys() and all(
        (g := got[x]).dtype == want[x].dtype and g.shape == want[x].shape and g.tobytes() == want[x].tobytes()
        for x in want)


def main(argv=None) -> int:
    from bw24.engine.ops.cuda.repack import (
        PARALLEL_TYPES,
        random_raw,
        repack,
        repack_parallel,
        repack_workers,
    )
    from gguf.constants import GGMLQuantizationType as Q

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="12288x4096", help="N x K of the weight (8B-like FFN up/gate)")
    ap.add_argument("--types", default="Q4_K,Q5_K,Q6_K,Q8_0,Q4_0")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workers", type=int, default=None)
    a = ap.parse_args(argv)
    n, k = (int(v) for v in a.shape.split("x"))
    workers = repack_workers(a.workers)
    print(header() + _host(), flush=True)
    print(f"# shape {n}x{k}, median of {a.repeats}; MB/s of GGUF bytes (MB = 1e6)")
    print(f"{'type':6} {'MB':>6} {'repack()':>9} {'1 thread':>9} {f'{workers} threads':>10} {'vs repack()':>11}  same")
    for name in a.types.split(","):
        qt = Q[name]
        raw = random_raw(qt, n, k, np.random.default_rng(0))
        runs = {"whole": lambda: repack(raw, qt, (n, k)),  # noqa: B023
                "one": lambda: repack_parallel(raw, qt, (n, k), 1),  # noqa: B023
                "all": lambda: repack_parallel(raw, qt, (n, k), workers)}  # noqa: B023
        mb = raw.nbytes / 1e6
        rate = {key: mb / _median_s(fn, a.repeats) for key, fn in runs.items()}
        want = runs["whole"]().planes
        same = all(_same(fn().planes, want) for fn in (runs["one"], runs["all"]))
        note = "" if qt in PARALLEL_TYPES else "  (repacked whole: not in PARALLEL_TYPES)"
        print(f"{name:6} {mb:6.1f} {rate['whole']:9.0f} {rate['one']:9.0f} {rate['all']:10.0f} "
              f"{rate['all'] / rate['whole']:10.2f}x  {'yes' if same else 'NO'}{note}", flush=True)
        if not same:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
