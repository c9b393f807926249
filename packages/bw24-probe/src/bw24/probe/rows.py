"""One measured figure (a table row and a ceilings entry) and the context every bench receives."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

KERNEL_DIR = Path(__file__).parent / "kernels"


@dataclass(frozen=True)
class Row:
    metric: str          # ceilings key, unit as suffix: hbm_read_gbs, launch_eager_us, gemm_fp16_tflops
    value: float
    unit: str            # for display: "GB/s", "us", "TFLOP/s"
    label: str           # human name
    detail: str = ""     # how it was measured (config, sizes, spread)


@dataclass(frozen=True)
class Skip:
    metric: str
    reason: str


@dataclass(frozen=True)
class BenchContext:
    """What a bench needs: the device, a non-default stream and the repeat budget."""
    sm_count: int
    l2_bytes: int
    free_bytes: int
    stream: object
    repeats: int = 15
    quick: bool = False   # smaller sizes and fewer configs (CLI --quick; tests)


def kernel_path(name: str) -> Path:
    return KERNEL_DIR / name
