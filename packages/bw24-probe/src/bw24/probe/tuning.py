"""Tuning-table IO and the sweep loop the workbench notebooks share.

Table format (one JSON file per device, `<device-key>.json`, read by the engine's dispatcher):
    {"schema": 1, "device": "NVIDIA H200", "cc": "9.0", "key": "nvidia-h200-sm90",
     "qmatvec":   {"Q4_K": {"default": {...launch config...}, "shapes": {"4096x4096": {...}}}, ...},
     "attention": {"decode": {"default": {...}, "ctx": {"4096": {...}}}},
     "provenance": {"qmatvec": {"notebook": ..., "measured_at": ..., "before_after": {...}}}}
Each notebook owns one top-level section and rewrites only that one (write_section merges).
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

from .ceilings import device_key, now_iso

SCHEMA = 1
RESERVED = ("schema", "device", "cc", "key", "provenance")


class TuningTableError(ValueError):
    """A tuning table that is unreadable or malformed; the message names the file and the field."""


def table_path(directory: str | os.PathLike, device: str, cc: tuple[int, int]) -> Path:
    return Path(directory) / f"{device_key(device, cc)}.json"


def _check_config(where: str, cfg: object) -> None:
    if not isinstance(cfg, dict) or not cfg:
        raise TuningTableError(f"{where}: a config must be a non-empty object, got {cfg!r}")
    for k, v in cfg.items():
        if not isinstance(v, (int, str, bool)):
            raise TuningTableError(f"{where}.{k}: config values must be int/str/bool, got {v!r}")


def validate(data: object, source: str) -> dict:
    if not isinstance(data, dict):
        raise TuningTableError(f"{source}: top level must be an object")
    if data.get("schema") != SCHEMA:
        raise TuningTableError(f"{source}: schema {data.get('schema')!r} is not {SCHEMA}")
    for k in ("device", "cc", "key"):
        if k not in data:
            raise TuningTableError(f"{source}: missing field {k!r}")
    if data["key"] != device_key(str(data["device"]), str(data["cc"])):
        raise TuningTableError(f"{source}: key {data['key']!r} does not match device/cc")
    for section, body in data.items():
        if section in RESERVED:
            continue
        if not isinstance(body, dict):
            raise TuningTableError(f"{source}: section {section!r} must be an object")
        for kind, entry in body.items():
            where = f"{source}: {section}.{kind}"
            if not isinstance(entry, dict) or "default" not in entry:
                raise TuningTableError(f"{where}: needs a 'default' config")
            _check_config(f"{where}.default", entry["default"])
            for sub, cfgs in entry.items():
                if sub != "default":
                    for shape, cfg in (cfgs or {}).items():
                        _check_config(f"{where}.{sub}.{shape}", cfg)
    return data


def read_table(path: str | os.PathLike) -> dict:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise TuningTableError(f"{path}: not valid JSON ({e})") from None
    return validate(data, str(path))


def write_section(directory: str | os.PathLike, device: str, cc: tuple[int, int], section: str,
                  entries: dict[str, dict], provenance: dict) -> Path:
    """Replace one section of the device's table (creating the file if needed); validate; write atomically."""
    if section in RESERVED:
        raise TuningTableError(f"{section!r} is a reserved field, not a section")
    path = table_path(directory, device, cc)
    data = read_table(path) if path.is_file() else {
        "schema": SCHEMA, "device": device, "cc": f"{cc[0]}.{cc[1]}", "key": device_key(device, cc)}
    data[section] = entries
    data.setdefault("provenance", {})[section] = {"measured_at": now_iso(), **provenance}
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
