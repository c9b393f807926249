"""Op backends: `ref` (NumPy, the oracle) and `cuda` (CuPy kernels, in ops/cuda*).

get_ops("cpu" | "ref" | "cuda" | "auto"): "auto" picks cuda when a GPU is usable and the cuda
backend imports, else the NumPy reference. The cuda backend is found as `bw24.engine.ops.cuda.CudaOps`.
"""

from __future__ import annotations

from ..errors import BackendUnavailableError
from .base import Ops
from .ref import DenseWeight, RefOps

BACKENDS = ("auto", "cpu", "ref", "cuda")


def _cuda_ops() -> Ops:
    try:
        from bw24.runtime import has_gpu, no_gpu_reason
    except ImportError as e:
        raise BackendUnavailableError(f"backend 'cuda' needs bw24-runtime ({e})") from None
    if not has_gpu():
        raise BackendUnavailableError(f"backend 'cuda' is unavailable: {no_gpu_reason()}")
    try:
        from .cuda import CudaOps  # type: ignore[import-not-found]
    except ImportError as e:
        raise BackendUnavailableError(f"backend 'cuda' is not installed in this build ({e})") from None
    return CudaOps()


def get_ops(backend: str = "auto") -> Ops:
    if backend not in BACKENDS:
        raise BackendUnavailableError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend in ("cpu", "ref"):
        return RefOps()
    if backend == "cuda":
        return _cuda_ops()
    try:
        return _cuda_ops()
    except BackendUnavailableError:
        return RefOps()


__all__ = ["BACKENDS", "DenseWeight", "Ops", "RefOps", "get_ops"]
