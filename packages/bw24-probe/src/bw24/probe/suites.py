"""Which benches each CLI suite runs, and folding their rows into a Ceilings record."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .ceilings import Ceilings, now_iso
from .rows import BenchContext, Row, Skip

SUITES = ("info", "bandwidth", "latency", "gemm", "mma", "matvec")


@dataclass(frozen=True)
class DeviceSummary:
    name: str
    cc: tuple[int, int]
    arch: str
    sm_count: int
    l2_bytes: int
    total_mem: int
    free_mem: int


def device_summary() -> DeviceSummary:
    import cupy
    from bw24.runtime import device_info

    d = device_info()
    free, _total = cupy.cuda.runtime.memGetInfo()
    return DeviceSummary(d.name, d.cc, d.arch, d.sm_count, d.l2_bytes, d.total_mem, int(free))


def benches(suite: str, dev: DeviceSummary, read_gbs: Callable[[], float | None]):
    """(title, callable(ctx) -> rows) pairs of one suite."""
    from . import bandwidth, gemm, latency, matvec, mma

    return {
        "info": [],
        "bandwidth": [("HBM", bandwidth.hbm), ("L2", bandwidth.l2), ("host <-> device", bandwidth.pinned)],
        "latency": [("launch", latency.launch)],
        "gemm": [("cuBLAS fp16", gemm.fp16), ("cuBLAS bf16", gemm.bf16)],
        "mma": [("tensor cores", lambda ctx: mma.peak(ctx, dev.cc))],
        "matvec": [("quantized matvec", lambda ctx: matvec.bench(ctx, read_gbs()))],
    }[suite]


def expand(names: Iterable[str]) -> list[str]:
    out: list[str] = []
    for n in names:
        for s in (SUITES if n == "all" else (n,)):
            if s not in SUITES:
                raise ValueError(f"unknown suite {s!r}; choose from all, {', '.join(SUITES)}")
            if s not in out:
                out.append(s)
    return out


def to_ceilings(dev: DeviceSummary, rows: list[Row | Skip], read_gbs: float | None) -> Ceilings:
    results: dict[str, float] = {}
    notes: dict[str, str] = {}
    mv: dict[str, dict] = {}
    for r in rows:
        if isinstance(r, Skip):
            notes[r.metric] = f"skipped: {r.reason}"
        elif r.metric.startswith("matvec_"):
            mv[r.metric] = {"gbs": round(r.value, 2), "label": r.label, "detail": r.detail,
                            "pct_of_read": round(100 * r.value / read_gbs, 1) if read_gbs else None}
        else:
            results[r.metric] = round(r.value, 4)
            notes[r.metric] = r.detail
    results.update({"sm_count": dev.sm_count, "l2_bytes": dev.l2_bytes, "total_mem_bytes": dev.total_mem})
    return Ceilings(dev.name, dev.cc, results, notes, mv, now_iso())


def run(suites: list[str], ctx: BenchContext, dev: DeviceSummary, on_section: Callable[[str, list], None],
        known_read_gbs: float | None = None) -> Ceilings:
    """Run the suites in order; `on_section(title, rows)` is called as each bench finishes."""
    rows: list[Row | Skip] = []

    def read_gbs() -> float | None:
        mine = [r.value for r in rows if isinstance(r, Row) and r.metric == "hbm_read_gbs"]
        return mine[0] if mine else known_read_gbs

    for s in suites:
        for title, fn in benches(s, dev, read_gbs):
            got = fn(ctx)
            rows.extend(got)
            on_section(title, got)
    return to_ceilings(dev, rows, read_gbs())
