"""Launch configs of the decode/verify matvec (qmv / qmv3 in kernels/qmatvec.cu).

A config is {"warps": W, "rows": R}: W warps per block split K (threads walk groups g = i, i+32W..),
R rows per block share each activation load. Sources, first match wins: an override set by a
workbench sweep (set_launch_config), the device's tuning table (bw24/engine/tuning/<key>.json,
shape "NxK" then the quant type's default), then built-in defaults (default_qmv).
W fixes the summation order of a row, so a weight is always launched with one W whatever T is;
R only changes how rows are grouped, and T > 1 launches use R = 1 (registers: R*NT accumulators).
"""

from __future__ import annotations

from pathlib import Path

from gguf.constants import GGMLQuantizationType as Q

TUNING_DIR = Path(__file__).resolve().parents[2] / "tuning"
QMV_SPACE = {"warps": [1, 2, 4, 8], "rows": [1, 2, 4, 8, 16]}


def default_qmv(n: int, k: int) -> dict:
    """Built-in default (first H200 sweep, evidence/matvec_sweep_h200_run1.txt): K >= 3072 wants
    4 warps splitting K and many rows sharing each activation load; K = 1024 one warp, 4 rows."""
    g = k // 32
    return {"warps": 4 if g >= 96 else 1, "rows": 8 if g >= 128 else 4}


def check_config(cfg: dict) -> tuple[int, int]:
    w, r = cfg.get("warps"), cfg.get("rows")
    if w not in QMV_SPACE["warps"] or r not in QMV_SPACE["rows"]:
        raise ValueError(f"qmatvec launch config {cfg!r}: warps must be in {QMV_SPACE['warps']}, "
                         f"rows in {QMV_SPACE['rows']}")
    return int(w), int(r)


class QmvConfigs:
    """Resolves (quant type, N, K) -> (W, R) for this device."""

    def __init__(self, tuning=None):
        from bw24.runtime import Tuning

        self.tuning = tuning if tuning is not None else Tuning()
        self.overrides: dict[str, dict] = {}

    @classmethod
    def for_device(cls, warn=None) -> QmvConfigs:
        from bw24.runtime import device_info, device_key, load_tuning

        d = device_info()
        return cls(load_tuning(TUNING_DIR, device_key(d.name, d.cc), warn=warn))

    def get(self, qtype, n: int, k: int) -> tuple[int, int]:
        name = Q(int(qtype)).name
        cfg = self.overrides.get(name) or self.tuning.config("qmatvec", name, f"{n}x{k}") or default_qmv(n, k)
        try:
            return check_config(cfg)
        except ValueError:  # a table entry outside the kernel's space: defaults, never a crash
            return check_config(default_qmv(n, k))
