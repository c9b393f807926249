"""The committed cells file (benchmarks/cells.toml): one `[[cell]]` table per measured cell.

    [[cell]]
    model = "qwen3-8b"     # a bw24-gguf synth preset (synthesized and cached) or a model alias
    quant = "q4_k_m"       # synth mix; for an alias: the file's own type ("q4_1") or "native"
    mode = "decode"        # decode (tg) | prefill (pp) | spec (speculative decode)
    depth = 4096           # tokens already in the KV cache when the timed part starts
    tokens = 128           # tokens generated (decode, spec) or prompt tokens processed (prefill)
    layers = 2             # optional: override the preset's layer count (cheap CPU cells)
    drafter = "ngram"      # spec only: ngram | self
    k = 4                  # spec only: draft length
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

from .errors import CellsFileError, NoCellsSelectedError
from .tomlfile import toml_tables

MODES = ("decode", "prefill", "spec")
DRAFTERS = ("ngram", "self")
_FIELDS = {"model", "quant", "mode", "depth", "tokens", "layers", "drafter", "k"}


@dataclass(frozen=True)
class Cell:
    model: str
    quant: str
    mode: str
    depth: int = 0
    tokens: int = 128
    layers: int | None = None
    drafter: str = "ngram"
    k: int = 4

    @property
    def id(self) -> str:
        """Stable name used as the perf-CI key, e.g. qwen3-8b-q4_k_m-tg128@d4096."""
        m = self.model + (f"-{self.layers}l" if self.layers else "")
        tag = {"decode": f"tg{self.tokens}", "prefill": f"pp{self.tokens}",
               "spec": f"spec{self.tokens}-{self.drafter}-k{self.k}"}[self.mode]
        return f"{m}-{self.quant}-{tag}@d{self.depth}"

    @property
    def headline(self) -> str:
        """The JSONL field that is this cell's speed figure."""
        return "prefill_tok_s" if self.mode == "prefill" else "decode_tok_s"


def _int(where: str, d: dict, key: str, default: int | None, lo: int) -> int | None:
    v = d.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise CellsFileError(f"{where}: {key} must be an integer >= {lo}, got {v!r}")
    return v


def cell_from_dict(d: dict, where: str = "cell") -> Cell:
    unknown = set(d) - _FIELDS
    if unknown:
        raise CellsFileError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(_FIELDS))}")
    for key in ("model", "quant", "mode"):
        if not isinstance(d.get(key), str) or not d[key]:
            raise CellsFileError(f"{where}: missing or empty string field {key!r}")
    if d["mode"] not in MODES:
        raise CellsFileError(f"{where}: mode {d['mode']!r} is not one of {', '.join(MODES)}")
    drafter = d.get("drafter", "ngram")
    if drafter not in DRAFTERS:
        raise CellsFileError(f"{where}: drafter {drafter!r} is not one of {', '.join(DRAFTERS)}")
    return Cell(model=d["model"], quant=d["quant"].lower(), mode=d["mode"],
                depth=_int(where, d, "depth", 0, 0), tokens=_int(where, d, "tokens", 128, 1),
                layers=_int(where, d, "layers", None, 1), drafter=drafter, k=_int(where, d, "k", 4, 1))


def load_cells(path: str | Path) -> list[Cell]:
    p, raw = toml_tables(path, "cell", CellsFileError, "cells")
    cells = [cell_from_dict(d, f"{p} cell #{i + 1}") for i, d in enumerate(raw)]
    seen: dict[str, int] = {}
    for i, c in enumerate(cells):
        if c.id in seen:
            raise CellsFileError(f"{p}: cells #{seen[c.id] + 1} and #{i + 1} are the same cell {c.id}")
        seen[c.id] = i
    return cells


def select_cells(cells: list[Cell], patterns: str | None) -> list[Cell]:
    """--cells: comma-separated shell globs or substrings of the cell ids ("qwen3-8b*", "tg128")."""
    if not patterns:
        return list(cells)
    pats = [p.strip() for p in patterns.split(",") if p.strip()]
    out = [c for c in cells if any(fnmatch.fnmatchcase(c.id, p) or p in c.id for p in pats)]
    if not out:
        raise NoCellsSelectedError(f"--cells {patterns!r} matches none of: {', '.join(c.id for c in cells)}")
    return out
