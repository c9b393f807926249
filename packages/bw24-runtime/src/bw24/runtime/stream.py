"""Streams, events and pinned host buffers (thin, typed wrappers over CuPy)."""

from __future__ import annotations

import numpy as np

from .device import require_gpu


def new_stream(non_blocking: bool = True):
    """A fresh stream. Capture needs a non-default stream, so the engine always uses one of these."""
    require_gpu()
    import cupy

    return cupy.cuda.Stream(non_blocking=non_blocking)


class EventTimer:
    """CUDA-event timing of a region on one stream: `with EventTimer(s) as t: ...; t.ms`."""

    def __init__(self, stream=None):
        require_gpu()
        import cupy

        self.stream = stream or cupy.cuda.get_current_stream()
        self.start = cupy.cuda.Event()
        self.end = cupy.cuda.Event()
        self.ms = float("nan")

    def __enter__(self):
        self.start.record(self.stream)
        return self

    def __exit__(self, *exc):
        import cupy

        self.end.record(self.stream)
        self.end.synchronize()
        self.ms = cupy.cuda.get_elapsed_time(self.start, self.end)
        return False


def pinned_empty(shape, dtype) -> np.ndarray:
    """A page-locked host array (fast, async-capable H2D/D2H copies)."""
    require_gpu()
    import cupy

    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) * dtype.itemsize
    mem = cupy.cuda.alloc_pinned_memory(max(n, 1))
    return np.frombuffer(mem, dtype=dtype, count=int(np.prod(shape))).reshape(shape)
