"""Device discovery that stays quiet without a GPU.

Nothing here imports CuPy at module import time: `import bw24.runtime` must work on a CPU-only
machine (CI), and `has_gpu()` answers False with a reason instead of raising.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .errors import NoGPUError


@dataclass(frozen=True)
class DeviceInfo:
    index: int
    name: str
    cc: tuple[int, int]        # compute capability (major, minor)
    arch: str                  # NVRTC target suffix: "90a", "120a", "86", ...
    sm_count: int
    total_mem: int             # bytes
    l2_bytes: int
    smem_per_block_optin: int  # bytes a block may use after raising its dynamic-smem limit


def arch_for_cc(major: int, minor: int) -> str:
    """sm_90a on Hopper and sm_120a on consumer Blackwell (their arch-specific instructions need the
    'a' target); plain sm_XY elsewhere."""
    if (major, minor) == (9, 0):
        return "90a"
    if (major, minor) == (12, 0):
        return "120a"
    return f"{major}{minor}"


def _import_cupy():
    try:
        import cupy  # noqa: F401
    except Exception as e:  # ImportError, or a CUDA library that fails to load
        raise NoGPUError(f"CuPy is not importable ({type(e).__name__}: {e})") from None
    return cupy


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[int, str]:
    """(device count, reason when zero). Cached: the driver state does not change under us."""
    try:
        cupy = _import_cupy()
    except NoGPUError as e:
        return 0, str(e)
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # CUDARuntimeError: no driver / insufficient driver / no device
        return 0, f"no CUDA device ({type(e).__name__}: {e})"
    if n == 0:
        return 0, "no CUDA device (the driver reports 0 devices)"
    return n, ""


def has_gpu() -> bool:
    """True when at least one CUDA device is usable through CuPy."""
    return _probe()[0] > 0


def no_gpu_reason() -> str:
    """Why has_gpu() is False ('' when it is True)."""
    return _probe()[1]


def require_gpu() -> None:
    if not has_gpu():
        raise NoGPUError(f"bw24 needs a CUDA GPU for this: {no_gpu_reason()}")


@functools.lru_cache(maxsize=8)
def device_info(index: int = 0) -> DeviceInfo:
    require_gpu()
    import cupy

    p = cupy.cuda.runtime.getDeviceProperties(index)
    name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
    major, minor = int(p["major"]), int(p["minor"])
    return DeviceInfo(
        index=index,
        name=name,
        cc=(major, minor),
        arch=arch_for_cc(major, minor),
        sm_count=int(p["multiProcessorCount"]),
        total_mem=int(p["totalGlobalMem"]),
        l2_bytes=int(p.get("l2CacheSize", 0)),
        smem_per_block_optin=int(p.get("sharedMemPerBlockOptin", p.get("sharedMemPerBlock", 49152))),
    )


def describe() -> str:
    """One line for logs and evidence headers."""
    if not has_gpu():
        return f"no GPU: {no_gpu_reason()}"
    d = device_info()
    return f"{d.name} (cc {d.cc[0]}.{d.cc[1]}, sm_{d.arch}, {d.sm_count} SMs, {d.total_mem / 2**30:.1f} GiB)"
