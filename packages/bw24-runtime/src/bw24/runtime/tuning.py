"""Per-device tuning tables: the device key, loading and validation (the engine's dispatcher reads
them; bw24-probe's workbench writes them with the same schema, see bw24.probe.tuning).

Table (one JSON file per device, `<device-key>.json`):
    {"schema": 1, "device": "NVIDIA H200", "cc": "9.0", "key": "nvidia-h200-sm90",
     "qmatvec": {"Q4_K": {"default": {"warps": 4, "rows": 2}, "shapes": {"4096x4096": {...}}}, ...},
     "provenance": {...}}
A missing table means "use built-in defaults"; a corrupt one raises TuningTableError naming the file
and field, and load_tuning() turns that into a fallback with the reason kept for the log.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA = 1
RESERVED = ("schema", "device", "cc", "key", "provenance", "measured_at")


class TuningTableError(ValueError):
    """A tuning table that is unreadable or malformed; the message names the file and the field."""


def device_key(name: str, cc: tuple[int, int] | str) -> str:
    """'NVIDIA H200', (9, 0) -> 'nvidia-h200-sm90' (same rule as bw24.probe.ceilings.device_key)."""
    if isinstance(cc, str):
        parts = cc.split(".")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise TuningTableError(f"compute capability must look like '9.0', got {cc!r}")
        cc = (int(parts[0]), int(parts[1]))
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not slug:
        raise TuningTableError(f"device name {name!r} has no usable characters")
    return f"{slug}-sm{cc[0]}{cc[1]}"


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
                if sub == "default":
                    continue
                if not isinstance(cfgs, dict):
                    raise TuningTableError(f"{where}.{sub}: must be an object of configs")
                for shape, cfg in cfgs.items():
                    _check_config(f"{where}.{sub}.{shape}", cfg)
    return data


def read_table(path: str | os.PathLike) -> dict:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise TuningTableError(f"{path}: unreadable ({e})") from None
    except json.JSONDecodeError as e:
        raise TuningTableError(f"{path}: not valid JSON ({e})") from None
    return validate(data, str(path))


@dataclass(frozen=True)
class Tuning:
    """The loaded table (empty when none applies) and a one-line note on where it came from."""

    table: dict = field(default_factory=dict, hash=False)
    note: str = "built-in defaults"

    def config(self, section: str, kind: str, shape: str | None = None) -> dict | None:
        """The shape's entry, else the kind's default, else None (caller's built-in default)."""
        entry = self.table.get(section, {}).get(kind)
        if entry is None:
            return None
        if shape is not None and shape in entry.get("shapes", {}):
            return dict(entry["shapes"][shape])
        return dict(entry["default"])


def load_tuning(directory: str | os.PathLike, key: str, warn=None) -> Tuning:
    """The table `<directory>/<key>.json`; a missing file gives defaults, a corrupt one gives defaults
    plus a warning naming the problem (`warn(msg)`, default: warnings.warn)."""
    path = Path(directory) / f"{key}.json"
    if not path.is_file():
        return Tuning(note=f"built-in defaults (no tuning table {path.name})")
    try:
        table = read_table(path)
    except TuningTableError as e:
        msg = f"ignoring corrupt tuning table, using built-in defaults: {e}"
        if warn is None:
            import warnings

            warnings.warn(msg, RuntimeWarning, stacklevel=2)
        else:
            warn(msg)
        return Tuning(note=f"built-in defaults ({e})")
    if table["key"] != key:
        return Tuning(note=f"built-in defaults ({path.name} is for {table['key']})")
    return Tuning(table, note=f"tuning table {path.name}")
