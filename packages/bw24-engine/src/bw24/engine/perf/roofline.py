"""The decode roofline's bandwidth: the HBM read bandwidth bw24-probe measured on this GPU (stored
through bw24.runtime.ceilings); otherwise an explicit 'no ceiling' note instead of a number."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Ceiling:
    read_bytes_per_s: float | None
    note: str  # where the number came from, or why there is none

    def tok_s(self, bytes_per_token: int | None) -> float | None:
        if not self.read_bytes_per_s or not bytes_per_token:
            return None
        return self.read_bytes_per_s / bytes_per_token


def current_ceiling(backend: str) -> Ceiling:
    if backend != "cuda":
        return Ceiling(None, f"no ceiling for this device ({backend}: bw24-probe measures GPUs only)")
    from bw24.runtime import ceilings

    try:
        c = ceilings.load_current()
        return Ceiling(c.read_bytes_per_s, f"bw24-probe {c.key} hbm_read ({c.source or 'measured'})")
    except ceilings.CeilingsError as e:
        return Ceiling(None, f"no ceiling for this device ({e})")
