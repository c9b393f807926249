"""Measured ceilings of one GPU, cached as JSON per device (keyed by device name + compute capability).

Search order for `load`: the user cache ($BW24_CEILINGS_DIR, else ~/.cache/bw24/ceilings; what
`bw24-probe` wrote on this machine), then the files committed with this package (devices/*.json,
e.g. the H200's). Nothing about any GPU is hard-coded: a device without a file has no ceilings.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from .tuning import TuningTableError
from .tuning import device_key as _runtime_device_key

SCHEMA = 1
PACKAGED_DIR = Path(__file__).parent / "devices"
# The metric that bounds memory-bound decode (tok/s <= read bandwidth / bytes read per token).
READ_METRIC = "hbm_read_gbs"


class CeilingsError(ValueError):
    """Base of the ceilings errors."""


class CeilingsNotFoundError(CeilingsError, LookupError):
    """No ceilings file for this device: run `bw24-probe all` on it."""


class CeilingsFormatError(CeilingsError):
    """A ceilings file that is not valid JSON or lacks required fields; the message names the file."""


def device_key(name: str, cc: tuple[int, int] | str) -> str:
    """'NVIDIA H200', (9, 0) -> 'nvidia-h200-sm90': the runtime's rule, so ceilings and tuning tables agree."""
    try:
        return _runtime_device_key(name, cc)
    except TuningTableError as e:
        raise CeilingsFormatError(str(e)) from None


def user_dir() -> Path:
    d = os.environ.get("BW24_CEILINGS_DIR")
    return Path(d) if d else Path.home() / ".cache" / "bw24" / "ceilings"


@dataclass(frozen=True)
class Ceilings:
    device: str                      # e.g. "NVIDIA H200"
    cc: tuple[int, int]
    results: dict[str, float]        # metric -> value; the unit is the name's suffix (_gbs, _us, _tflops)
    notes: dict[str, str] = field(default_factory=dict)      # metric -> how it was measured / why skipped
    matvec: dict[str, dict] = field(default_factory=dict)    # kernel -> {gbs, pct_of_read, shape, ...}
    measured_at: str = ""
    source: str = ""                 # the file it was loaded from ("" when measured in this process)

    @property
    def key(self) -> str:
        return device_key(self.device, self.cc)

    @property
    def read_bytes_per_s(self) -> float:
        """Measured HBM read bandwidth in bytes/s (the decode roofline's denominator)."""
        if READ_METRIC not in self.results:
            raise CeilingsNotFoundError(f"ceilings of {self.key} have no {READ_METRIC}: run `bw24-probe bandwidth`")
        return self.results[READ_METRIC] * 1e9

    def decode_roofline_tok_s(self, bytes_per_token: float) -> float:
        if bytes_per_token <= 0:
            raise ValueError(f"bytes_per_token must be > 0, got {bytes_per_token}")
        return self.read_bytes_per_s / bytes_per_token

    def merged(self, newer: Ceilings) -> Ceilings:
        """This record updated with a newer (possibly partial) run on the same device."""
        if newer.key != self.key:
            raise CeilingsError(f"cannot merge ceilings of {newer.key} into {self.key}")
        return Ceilings(self.device, self.cc, {**self.results, **newer.results}, {**self.notes, **newer.notes},
                        {**self.matvec, **newer.matvec}, newer.measured_at or self.measured_at)

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "device": self.device, "cc": f"{self.cc[0]}.{self.cc[1]}", "key": self.key,
                "measured_at": self.measured_at, "results": dict(sorted(self.results.items())),
                "notes": dict(sorted(self.notes.items())), "matvec": self.matvec}


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def from_json(data: dict, source: str = "<dict>") -> Ceilings:
    if not isinstance(data, dict):
        raise CeilingsFormatError(f"{source}: top level must be an object, got {type(data).__name__}")
    if data.get("schema") != SCHEMA:
        raise CeilingsFormatError(f"{source}: schema {data.get('schema')!r} is not {SCHEMA}")
    for k in ("device", "cc", "results"):
        if k not in data:
            raise CeilingsFormatError(f"{source}: missing field {k!r}")
    results = data["results"]
    if not isinstance(results, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                for v in results.values()):
        raise CeilingsFormatError(f"{source}: 'results' must map metric names to numbers")
    key = device_key(str(data["device"]), str(data["cc"]))
    major, minor = (int(x) for x in str(data["cc"]).split("."))
    if "key" in data and data["key"] != key:
        raise CeilingsFormatError(f"{source}: key {data['key']!r} does not match device/cc ({key})")
    return Ceilings(str(data["device"]), (major, minor), {k: float(v) for k, v in results.items()},
                    dict(data.get("notes", {})), dict(data.get("matvec", {})), str(data.get("measured_at", "")),
                    source)


def read_file(path: str | os.PathLike) -> Ceilings:
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise CeilingsFormatError(f"{path}: not valid JSON ({e})") from None
    return from_json(data, str(path))


def candidate_paths(key: str) -> list[Path]:
    return [user_dir() / f"{key}.json", PACKAGED_DIR / f"{key}.json"]


def load(device: str, cc: tuple[int, int] | str) -> Ceilings:
    """The ceilings of one device; CeilingsNotFoundError (naming where it looked) when none exist."""
    key = device_key(device, cc)
    paths = candidate_paths(key)
    for p in paths:
        if p.is_file():
            return read_file(p)
    raise CeilingsNotFoundError(f"no ceilings for {key} (looked in {', '.join(map(str, paths))}); "
                                "run `bw24-probe all` on that GPU")


def load_current() -> Ceilings:
    """The ceilings of the GPU this process sees (bw24.runtime's device 0)."""
    from bw24.runtime import device_info

    d = device_info()
    return load(d.name, d.cc)


def save(c: Ceilings, path: str | os.PathLike | None = None, merge: bool = True) -> Path:
    """Write to `path` (default: the user cache file of the device), merging into what is there."""
    path = Path(path) if path is not None else user_dir() / f"{c.key}.json"
    if merge and path.is_file():
        try:
            c = read_file(path).merged(c)
        except CeilingsFormatError:
            pass  # a corrupt cache file is replaced by the fresh measurement
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(c.to_json(), indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path
