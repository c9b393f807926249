"""Shared notebook plumbing: SMALL vs GPU mode, output folder, op backend, where tables go.
(Notebooks import this from the workbench folder; it defines no kernel.)"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from bw24.runtime import has_gpu, no_gpu_reason

SMALL = os.environ.get("BW24_WB_SMALL") == "1" or not has_gpu()
REASON = (no_gpu_reason() or "BW24_WB_SMALL=1") if SMALL else ""
OUT = Path(os.environ.get("BW24_WB_OUT") or Path(__file__).resolve().parent / "out")
OUT.mkdir(parents=True, exist_ok=True)


def banner(title: str) -> None:
    mode = f"SMALL mode (CPU, reference backend, tiny shapes): {REASON}" if SMALL else "GPU mode"
    print(f"{title}: {mode}; outputs in {OUT}")


def backend():
    """(ops, note): the engine's cuda ops on a GPU, else the NumPy reference ops."""
    from bw24.engine.ops.ref import RefOps

    if SMALL:
        return RefOps(), "reference backend (NumPy)"
    from bw24.probe.matvec import cuda_ops

    ops = cuda_ops()
    if hasattr(ops, "reason"):  # a Skip: no cuda ops in the engine yet
        return RefOps(), f"reference backend: {ops.reason}"
    return ops, "engine cuda backend"


def device():
    """(name, cc) of this GPU, or a CPU label in SMALL mode (tables then go to OUT only)."""
    if SMALL:
        return "cpu-reference", (0, 0)
    from bw24.runtime import device_info

    d = device_info()
    return d.name, d.cc


def tuning_dir(ops) -> Path:
    """The engine's tuning folder when the engine takes launch configs on a GPU; else OUT/tuning."""
    if not SMALL and hasattr(ops, "tuning_space"):
        spec = importlib.util.find_spec("bw24.engine")
        return Path(next(iter(spec.submodule_search_locations))) / "tuning"
    return OUT / "tuning"


def candidates(ops, section: str, kind: str) -> list[dict]:
    """Launch configs to try: the engine's declared space, or the one config of a backend without knobs."""
    space = getattr(ops, "tuning_space", None)
    if space is None:
        return [{"impl": ops.name}]
    import itertools

    grid = space(section, kind)  # {param: [values]}
    return [dict(zip(grid, vals, strict=True)) for vals in itertools.product(*grid.values())]


def apply(ops, section: str, kind: str, cfg: dict) -> None:
    if hasattr(ops, "set_launch_config"):
        ops.set_launch_config(section, kind, cfg)
