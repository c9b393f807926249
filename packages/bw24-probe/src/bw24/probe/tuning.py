"""Tuning-table IO and the sweep loop the workbench notebooks share.

Table format (one JSON file per device, `<device-key>.json`, read by the engine's dispatcher):
    {"schema": 1, "device": "NVIDIA H200", "cc": "9.0", "key": "nvidia-h200-sm90",
     "qmatvec":   {"Q4_K": {"default": {...launch config...}, "shapes": {"4096x4096": {...}}}, ...},
     "attention": {"decode": {"default": {...}, "ctx": {"4096": {...}}}},
     "provenance": {"qmatvec": {"notebook": ..., "measured_at": ..., "before_after": {...}}}}
Each notebook owns one top-level section and merges its measurements into it (write_section).
Configs are flat {str: int|str|bool} dicts whose keys are the kernel's compile/launch parameters.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from bw24.runtime.tuning import RESERVED, SCHEMA, TuningTableError, read_table, validate

from .ceilings import device_key, now_iso

# One schema for writer (here) and reader (the engine's dispatcher): validation lives in bw24.runtime.
__all__ = ["SCHEMA", "TuningTableError", "kind_entry", "read_table", "table_path", "validate", "write_section"]


def table_path(directory: str | os.PathLike, device: str, cc: tuple[int, int]) -> Path:
    return Path(directory) / f"{device_key(device, cc)}.json"


def kind_entry(per_shape: dict[str, dict]) -> dict:
    """A kind's table entry from its best config per shape: {"default": the config most shapes chose,
    "shapes": per_shape} (the sweeps of tune_qmatvec and benchmarks/gpu_matvec*.py)."""
    winners = [json.dumps(c, sort_keys=True) for c in per_shape.values()]
    return {"default": json.loads(max(set(winners), key=winners.count)), "shapes": per_shape}


def write_section(directory: str | os.PathLike, device: str, cc: tuple[int, int], section: str,
                  entries: dict[str, dict], provenance: dict) -> Path:
    """Merge `entries` into one section of the device's table (creating the file if needed); validate;
    write atomically. Per kind, a new `default` replaces the old one and new shape entries replace
    those shapes; kinds and shapes this sweep did not measure keep their earlier (measured) configs.
    (Replacing the whole section once dropped the 1024-wide qwen3-0.6b shapes when a notebook swept
    only the 8B's.) The previous provenance is kept under "earlier"."""
    if section in RESERVED:
        raise TuningTableError(f"{section!r} is a reserved field, not a section")
    path = table_path(directory, device, cc)
    data = read_table(path) if path.is_file() else {
        "schema": SCHEMA, "device": device, "cc": f"{cc[0]}.{cc[1]}", "key": device_key(device, cc)}
    merged = dict(data.get(section, {}))
    for kind, entry in entries.items():
        out = dict(merged.get(kind, {}))
        for sub, body in entry.items():
            out[sub] = body if sub == "default" else {**out.get(sub, {}), **body}
        merged[kind] = out
    data[section] = merged
    prov = data.setdefault("provenance", {})
    earlier = {k: v for k, v in prov.get(section, {}).items() if k != "earlier"}
    prov[section] = {"measured_at": now_iso(), **provenance, **({"earlier": earlier} if earlier else {})}
    validate(data, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


@dataclass(frozen=True)
class Trial:
    config: dict
    seconds: float      # median over repeats
    ok: bool            # the output matched the reference before timing
    error: str = ""


def sweep(configs: Iterable[dict], check: Callable[[dict], bool], run: Callable[[dict], None],
          sync: Callable[[], None], repeats: int = 7, inner: int = 10) -> list[Trial]:
    """For each config: check correctness first (a wrong config never wins), then time `inner`
    calls `repeats` times (wall clock around sync) and keep the median per call. Sorted fastest first."""
    trials = []
    for cfg in configs:
        try:
            if not check(cfg):
                trials.append(Trial(cfg, float("inf"), False, "output differs from the reference"))
                continue
            run(cfg)
            sync()
            samples = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                for _ in range(inner):
                    run(cfg)
                sync()
                samples.append((time.perf_counter() - t0) / inner)
            trials.append(Trial(cfg, statistics.median(samples), True))
        except Exception as e:  # a config the kernel rejects (too much smem, ...) is reported, not fatal
            trials.append(Trial(cfg, float("inf"), False, f"{type(e).__name__}: {e}"))
    return sorted(trials, key=lambda t: t.seconds)
