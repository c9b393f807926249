"""CUDA graph capture and replay over CuPy's stream capture.

Rules the captured function must follow (CuPy cannot capture cuBLAS, and a capture must not
allocate): only RawKernel launches and device-to-device copies on `stream`, into buffers that
already exist; any value that changes between replays lives in device memory.
"""

from __future__ import annotations

from .device import require_gpu
from .errors import GraphError


class CapturedGraph:
    """capture(fn) once, then replay() any number of times on the same stream."""

    def __init__(self, stream):
        require_gpu()
        if stream is None or stream.ptr == 0:
            raise GraphError("graph capture needs a non-default stream")
        self.stream = stream
        self.graph = None

    def capture(self, fn, *args, **kwargs) -> CapturedGraph:
        s = self.stream
        s.synchronize()
        s.begin_capture()
        try:
            with s:
                fn(*args, **kwargs)
        except BaseException:
            try:
                s.end_capture()
            except Exception:
                pass
            raise
        g = s.end_capture()
        if g is None:
            raise GraphError("stream capture returned no graph")
        try:
            g.upload(s)
        except Exception:
            pass  # upload is an optimisation (pre-instantiate on device); launch works without it
        self.graph = g
        return self

    def replay(self, n: int = 1) -> None:
        if self.graph is None:
            raise GraphError("replay() before capture()")
        for _ in range(n):
            self.graph.launch(self.stream)

    @property
    def captured(self) -> bool:
        return self.graph is not None
