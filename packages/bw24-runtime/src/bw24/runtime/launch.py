"""Kernel launches with programmatic dependent launch (PDL), through the driver's cuLaunchKernelEx.

CuPy's launch takes no launch attributes, so this one calls libcuda through ctypes. A kernel launched
with the programmatic-stream-serialization attribute (sm_90+) may start before the kernel ahead of it in
the stream has finished: as soon as every block of that one has run `griddepcontrol.launch_dependents`
or exited. It must then run `griddepcontrol.wait` (which returns once the kernel ahead has completed and
its writes are visible) before it touches anything that kernel wrote, or writes anything that kernel
reads. What it may do before the wait: index math and loads of data no kernel writes (weights). The
win: the next kernel's launch, block scheduling and first weight loads overlap the previous kernel's
tail, which for a decode step of ~400 small kernels is most of the time between them.

Argument packing follows CuPy's own launch: arrays pass their device pointer, numpy scalars their
bytes, Python int as int64, float as float64, None as a null pointer.
"""

from __future__ import annotations

import ctypes

import numpy as np

CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # cuda.h CUlaunchAttributeID

_SCALARS = {
    np.dtype(np.int8): ctypes.c_int8, np.dtype(np.uint8): ctypes.c_uint8,
    np.dtype(np.int16): ctypes.c_int16, np.dtype(np.uint16): ctypes.c_uint16,
    np.dtype(np.int32): ctypes.c_int32, np.dtype(np.uint32): ctypes.c_uint32,
    np.dtype(np.int64): ctypes.c_int64, np.dtype(np.uint64): ctypes.c_uint64,
    np.dtype(np.float32): ctypes.c_float, np.dtype(np.float64): ctypes.c_double,
}


class _Attr(ctypes.Structure):  # CUlaunchAttribute: id, pad to 8, a 64-byte union (8-aligned)
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint64 * 8)]


class _Config(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(_Attr)), ("numAttrs", ctypes.c_uint)]


_lib = None


def _cuda():
    global _lib
    if _lib is None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(_Config), ctypes.c_void_p,
                                         ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_void_p)]
        lib.cuLaunchKernelEx.restype = ctypes.c_int
        _lib = lib
    return _lib


def pack_arg(a):
    """One kernel argument as a ctypes value (kept alive by the caller until the launch returns)."""
    if a is None:
        return ctypes.c_void_p(0)
    data = getattr(a, "data", None)
    if hasattr(data, "ptr"):  # cupy.ndarray
        return ctypes.c_void_p(data.ptr)
    if isinstance(a, np.generic):
        t = _SCALARS.get(a.dtype)
        if t is None:
            raise TypeError(f"kernel argument of dtype {a.dtype} is not supported")
        return t(a.item())
    if isinstance(a, bool):
        return ctypes.c_bool(a)
    if isinstance(a, int):
        return ctypes.c_int64(a)
    if isinstance(a, float):
        return ctypes.c_double(a)
    raise TypeError(f"kernel argument of type {type(a).__name__} is not supported")


def _fn_ptr(fn) -> int:
    """The CUfunction of a cupy Function, or a RawKernel's."""
    return fn.ptr if hasattr(fn, "ptr") else fn.kernel.ptr


def launch_pdl(fn, grid, block: int, args, shared_mem: int, stream) -> None:
    """fn (a cupy Function or RawKernel) launched on stream with the PDL attribute."""
    vals = [pack_arg(a) for a in args]
    params = (ctypes.c_void_p * max(len(vals), 1))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in vals])
    attr = _Attr(id=CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
    attr.value[0] = 1  # programmaticStreamSerializationAllowed
    g = tuple(grid) + (1,) * (3 - len(grid))
    cfg = _Config(g[0], g[1], g[2], int(block), 1, 1, int(shared_mem), ctypes.c_void_p(stream.ptr),
                  ctypes.pointer(attr), 1)
    rc = _cuda().cuLaunchKernelEx(ctypes.byref(cfg), ctypes.c_void_p(_fn_ptr(fn)), params, None)
    if rc != 0:
        raise RuntimeError(f"cuLaunchKernelEx failed: CUresult {rc}")


_ALLOWED: dict[tuple[int, int], int] = {}  # (function pointer, CUfunction_attribute) -> the value it was set to
SMEM_DEFAULT_LIMIT = 48 * 1024  # what a kernel may take without opting in
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8  # cuda.h CUfunction_attribute


def _raise_attribute(fn, attribute: int, value: int) -> None:
    """fn's CUfunction attribute raised to value, once a function (a later call asking no more is free): the opt-in
    below is such an attribute, and must be set before a graph capture records the launch."""
    ptr = _fn_ptr(fn)
    if _ALLOWED.get((ptr, attribute), 0) >= value:
        return
    from cupy_backends.cuda.api import driver

    driver.funcSetAttribute(ptr, attribute, int(value))
    _ALLOWED[(ptr, attribute)] = int(value)


def allow_dynamic_shared(fn, nbytes: int) -> None:
    """Let fn (a cupy Function or RawKernel) launch with nbytes of dynamic shared memory: past 48 KB a kernel must
    opt in (MAX_DYNAMIC_SHARED_SIZE_BYTES) or its launch fails."""
    if nbytes > SMEM_DEFAULT_LIMIT:
        _raise_attribute(fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, nbytes)
