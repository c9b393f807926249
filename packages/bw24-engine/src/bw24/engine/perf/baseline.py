"""The rolling baseline: per device+cell (and opt-in variant), the median of its last 5 rows before this run. A headline
speed drop > 3% fails, > 1.5% warns; a speculative cell's acceptance drop > 0.05 fails."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

WINDOW = 5
FAIL_DROP = 0.03
WARN_DROP = 0.015
ACCEPT_FAIL_DROP = 0.05
ORDER = {"new": 0, "pass": 1, "warn": 2, "fail": 3}


def headline(row: dict) -> float | None:
    return row.get("prefill_tok_s") if row.get("mode") == "prefill" else row.get("decode_tok_s")


@dataclass(frozen=True)
class Verdict:
    cell: str
    device: str
    status: str             # new | pass | warn | fail
    value: float | None
    baseline: float | None
    drop: float | None      # fraction below the baseline (negative: faster)
    message: str


# rows written before perf rows carried kv_dtype ran the float32 cache, the only one measured until then
KV_NAMES = {"float32": "f32", "float16": "f16"}


def kv_name(row: dict) -> str:
    return KV_NAMES.get(row.get("kv_dtype", "float32"), "?")


def variant(row: dict) -> tuple[str, ...]:
    """The opt-in paths a row ran with (none for rows written before they existed), and its KV cache when
    it is not the default float16 ("kv_f32"): another configuration, with its own baseline (a float32-cache
    row once failed a float16 run of the 30B-A3B by reading a different cache's speed)."""
    v = tuple(row.get("opt_in") or ())
    return v if kv_name(row) == "f16" else (*v, f"kv_{kv_name(row)}")


def baseline_of(history: list[dict], device: str, cell: str, key=headline,
                opt_in: tuple[str, ...] = ()) -> tuple[float | None, int]:
    vals = [key(r) for r in history if r.get("device") == device and r.get("cell") == cell and variant(r) == opt_in]
    vals = [v for v in vals if isinstance(v, int | float)][-WINDOW:]
    return (float(statistics.median(vals)) if vals else None), len(vals)


def check_row(history: list[dict], row: dict) -> Verdict:
    dev, cell, v, opt = row.get("device", "?"), row.get("cell", "?"), headline(row), variant(row)
    base, n = baseline_of(history, dev, cell, opt_in=opt)
    if opt:
        cell = f"{cell} +{' +'.join(opt)}"
    if base is None or v is None or base <= 0:
        return Verdict(cell, dev, "new", v, base, None, f"{cell}: no baseline on {dev} yet")
    drop = (base - v) / base
    status = "fail" if drop > FAIL_DROP else "warn" if drop > WARN_DROP else "pass"
    msg = (f"{cell}: {v:.4g} tok/s vs baseline {base:.4g} (median of last {n}) = "
           f"{-100 * drop:+.2f}% [{status.upper()}]")
    if row.get("acceptance") is not None:
        abase, _ = baseline_of(history, dev, row.get("cell", "?"), key=lambda r: r.get("acceptance"), opt_in=opt)
        if abase is not None and abase - row["acceptance"] > ACCEPT_FAIL_DROP:
            status = "fail"
            msg += f"; acceptance {row['acceptance']:.3f} vs baseline {abase:.3f} [FAIL]"
    return Verdict(cell, dev, status, v, base, drop, msg)


def check_rows(history: list[dict], rows: list[dict]) -> list[Verdict]:
    return [check_row(history, r) for r in rows]


def worst(verdicts: list[Verdict]) -> str:
    return max((v.status for v in verdicts), key=ORDER.__getitem__, default="new")
