"""cuBLAS GEMMs called through ctypes, so that a prefill chunk can be captured as a CUDA graph.

CuPy's cuBLAS wrappers refuse to run while a stream captures ("calling cuBLAS API during stream capture is
currently unsupported": a guard in CuPy's setStream, not a cuBLAS limit; the cuBLAS documentation's "CUDA
Graphs Support" allows capture, with host-mode alpha / beta captured by value). With prefill graphs on
(CudaOps.prefill_graphs, on unless BW24_PREFILL_GRAPH=0) ops/cuda/prefill.py calls the same library CuPy has loaded,
with CuPy's handle, directly, eagerly and in capture alike, so both choose the same algorithms. A workspace
of the backend's own (cublasSetWorkspace, after every cublasSetStream, which resets it) keeps cuBLAS from
allocating one inside a capture.
"""

from __future__ import annotations

import ctypes
import re
from functools import lru_cache

WORKSPACE = 32 << 20  # bytes: the cuBLAS documentation's recommendation for Hopper
_LIB = re.compile(r"(/\S*/libcublas\.so(?:\.\d+)*)$")  # libcublas itself, not libcublasLt


def find_loaded(maps: str) -> str | None:
    """The path of the libcublas that a process has mapped, from its /proc/self/maps text."""
    for line in maps.splitlines():
        m = _LIB.search(line.strip())
        if m:
            return m.group(1)
    return None


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL:
    """CuPy's libcublas (loaded by its first handle), with the prototypes used here."""
    from cupy.cuda import device

    device.get_cublas_handle()
    with open("/proc/self/maps") as fh:
        path = find_loaded(fh.read())
    if path is None:
        raise RuntimeError("prefill graphs: CuPy's libcublas is not mapped into this process")
    lib = ctypes.CDLL(path)  # the already-loaded library: CuPy's handles are valid here
    vp, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
    protos = {
        "cublasSetStream_v2": [vp, vp],
        "cublasSetPointerMode_v2": [vp, i],
        "cublasSetWorkspace_v2": [vp, vp, ctypes.c_size_t],
        "cublasGemmEx": [vp, i, i, i, i, i, vp, vp, i, i, vp, i, i, vp, vp, i, i, i, i],
        "cublasGemmStridedBatchedEx": [vp, i, i, i, i, i, vp, vp, i, i, ll, vp, i, i, ll, vp, vp, i, i, ll, i, i, i],
    }
    for name, args in protos.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ctypes.c_int
    return lib


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} failed: cublasStatus_t {status}")


def prepare(ops) -> int:
    """CuPy's cuBLAS handle bound to ops.stream, host pointer mode and ops' own workspace (allocated once,
    outside any capture: the first eager chunk comes first), set at every call since a draft model's ops
    on another stream share the handle; returns the handle."""
    from cupy.cuda import device

    lib, h = library(), device.get_cublas_handle()
    if getattr(ops, "_cublas_ws", None) is None:
        with ops.stream:
            ops._cublas_ws = ops.cp.empty(WORKSPACE, dtype=ops.cp.uint8)
    _check(lib.cublasSetStream_v2(h, ops.stream.ptr), "cublasSetStream")
    # after the stream: cublasSetStream resets the handle's workspace to the default pool (cuBLAS docs)
    _check(lib.cublasSetWorkspace_v2(h, ops._cublas_ws.data.ptr, WORKSPACE), "cublasSetWorkspace")
    _check(lib.cublasSetPointerMode_v2(h, 0), "cublasSetPointerMode")  # CUBLAS_POINTER_MODE_HOST
    return h


def gemm(ops, op_a: int, op_b: int, m: int, n: int, k: int, a: int, lda: int, sa: int, b: int, ldb: int, sb: int,
         c: int, ldc: int, sc: int, batch: int, alpha, beta, f16: int, f32: int, compute: int, algo: int) -> None:
    """prefill.gemm_ex's product through ctypes: float16 A / B, float32 C, `batch` triples (one: GemmEx)."""
    lib, h = library(), prepare(ops)
    al, be = alpha.ctypes.data, beta.ctypes.data
    m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc, batch = (int(v) for v in (m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc,
                                                                            batch))  # numpy scalars -> ctypes
    if batch == 1:
        _check(lib.cublasGemmEx(h, op_a, op_b, m, n, k, al, a, f16, lda, b, f16, ldb, be, c, f32, ldc, compute, algo),
               "cublasGemmEx")
    else:
        _check(lib.cublasGemmStridedBatchedEx(h, op_a, op_b, m, n, k, al, a, f16, lda, sa, b, f16, ldb, sb, be, c,
                                              f32, ldc, sc, batch, compute, algo), "cublasGemmStridedBatchedEx")


__all__ = ["WORKSPACE", "find_loaded", "gemm", "library", "prepare"]
