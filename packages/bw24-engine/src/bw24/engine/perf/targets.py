"""Issue 5's targets against the perf rows (never typed by hand): for each `[[target]]` of the committed targets
file (benchmarks/targets.toml), the cell's latest row on a device in the default configuration (no opt-in path,
the float16 cache) measured beside llama.cpp, and whether its ratio, its share of the roofline and its peak VRAM
meet the target. Rendered between `<!-- perf-targets:begin -->` and `<!-- perf-targets:end -->`.

Only default rows count: a target is met by what a user gets without setting anything, and an opt-in row is
another configuration (perf.baseline.variant)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .baseline import headline, variant
from .errors import TargetsFileError
from .table import _gib, _num
from .tomlfile import toml_tables

BEGIN = "<!-- perf-targets:begin -->"
END = "<!-- perf-targets:end -->"
HEADER = ("| cell | target | bw24 tok/s | llama.cpp tok/s | ratio | % roofline | peak VRAM GiB bw24 / llama.cpp "
          "| standing | date | GPU | commit |\n|---|---|---|---|---|---|---|---|---|---|---|")
_FIELDS = {"cell", "ratio", "roofline_pct", "vram_margin"}


@dataclass(frozen=True)
class Target:
    cell: str                          # a perf cell id, e.g. qwen3-8b-q4_k_m-tg128@d0
    ratio: float                       # bw24 / llama.cpp at least this
    roofline_pct: float | None = None  # and at least this % of the decode roofline (None: no such bound)
    vram_margin: float = 0.10          # peak VRAM at most llama.cpp's x (1 + margin)

    def label(self) -> str:
        extra = f", {self.roofline_pct:g}% roofline" if self.roofline_pct is not None else ""
        return f">= {self.ratio:g}x{extra}"


@dataclass(frozen=True)
class Standing:
    target: Target
    device: str
    row: dict

    def shortfalls(self) -> list[str]:
        """What the row misses, each with how much it needs: empty when every bound is met."""
        t, r, out = self.target, self.row, []
        if r["ratio"] < t.ratio:
            out.append(f"ratio needs +{100 * (t.ratio / r['ratio'] - 1):.1f}%")
        roof = r.get("roofline_pct")
        if t.roofline_pct is not None:
            if not isinstance(roof, int | float):
                out.append("no roofline figure")
            elif roof < t.roofline_pct:
                out.append(f"roofline needs +{100 * (t.roofline_pct / roof - 1):.1f}%")
        ours, theirs = r.get("vram_peak_bytes"), (r.get("llama") or {}).get("vram_peak_bytes")
        if isinstance(ours, int | float) and isinstance(theirs, int | float) and theirs > 0:
            if ours > theirs * (1 + t.vram_margin):
                out.append(f"peak VRAM +{100 * (ours / theirs - 1):.1f}% over llama.cpp's")
        return out

    def verdict(self) -> str:
        miss = self.shortfalls()
        return "**met**" if not miss else "not met: " + "; ".join(miss)


def _number(where: str, d: dict, key: str, default, lo: float):
    v = d.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v < lo:
        raise TargetsFileError(f"{where}: {key} must be a number >= {lo:g}, got {v!r}")
    return float(v)


def target_from_dict(d: dict, where: str = "target") -> Target:
    unknown = set(d) - _FIELDS
    if unknown:
        raise TargetsFileError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(_FIELDS))}")
    if not isinstance(d.get("cell"), str) or not d["cell"]:
        raise TargetsFileError(f"{where}: missing or empty string field 'cell'")
    if "ratio" not in d:
        raise TargetsFileError(f"{where}: missing field 'ratio' (bw24 / llama.cpp at least)")
    return Target(cell=d["cell"], ratio=_number(where, d, "ratio", None, 0.0),
                  roofline_pct=_number(where, d, "roofline_pct", None, 0.0),
                  vram_margin=_number(where, d, "vram_margin", 0.10, 0.0))


def load_targets(path: str | Path) -> list[Target]:
    p, raw = toml_tables(path, "target", TargetsFileError, "targets")
    targets = [target_from_dict(d, f"{p} target #{i + 1}") for i, d in enumerate(raw)]
    seen: set[str] = set()
    for t in targets:
        if t.cell in seen:
            raise TargetsFileError(f"{p}: cell {t.cell} has two targets")
        seen.add(t.cell)
    return targets


def standings(rows: list[dict], targets: list[Target], device: str | None = None) -> dict[tuple[str, str], Standing]:
    """(device, cell) -> the latest default row beside llama.cpp of each targeted cell (file order: later wins)."""
    by_cell = {t.cell: t for t in targets}
    out: dict[tuple[str, str], Standing] = {}
    for r in rows:
        t = by_cell.get(r.get("cell"))
        dev = r.get("device", "?")
        if t is None or (device is not None and dev != device) or variant(r):
            continue
        if isinstance(r.get("ratio"), int | float) and r["ratio"] > 0:
            out[(dev, t.cell)] = Standing(t, dev, r)
    return out


def render_targets(rows: list[dict], targets: list[Target], device: str | None = None) -> str:
    """A line per target and device that has a default row of it beside llama.cpp, in the targets file's order; a
    target without one says so, so that a gap in the measurements shows instead of vanishing."""
    found = standings(rows, targets, device)
    lines = [HEADER]
    for t in targets:
        mine = [s for (_, cell), s in sorted(found.items()) if cell == t.cell]
        if not mine:
            lines.append(f"| {t.cell} | {t.label()} | — | — | — | — | — / — | no row beside llama.cpp yet | | | |")
        for s in mine:
            r = s.row
            lines.append(f"| {t.cell} | {t.label()} | {_num(headline(r), ',.1f')} | {_num(r.get('llama_tok_s'), ',.1f')} | "
                         f"{r['ratio']:.2f}x | {_num(r.get('roofline_pct'), '.1f')} | {_gib(r.get('vram_peak_bytes'))} / "
                         f"{_gib((r.get('llama') or {}).get('vram_peak_bytes'))} | {s.verdict()} | "
                         f"{str(r.get('time', '?'))[:10]} | {s.device} | {str(r.get('git', '?'))[:7]} |")
    return "\n".join(lines) + "\n"

