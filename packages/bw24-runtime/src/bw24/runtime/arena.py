"""Device arena: every buffer a model needs, allocated once, by name, before the first step.

Weights go up through one reusable pinned staging buffer in chunks (with a progress bar), so a
GGUF's memory-mapped tensors are read once from disk and never copied whole in host RAM.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .device import require_gpu
from .errors import ArenaError

STAGING_BYTES = 64 << 20


class DeviceArena:
    def __init__(self, stream=None, staging_bytes: int = STAGING_BYTES):
        require_gpu()
        import cupy

        self._cp = cupy
        self.stream = stream or cupy.cuda.Stream(non_blocking=True)
        self.buffers: dict[str, object] = {}
        self._staging = None
        self._staging_bytes = staging_bytes

    # --- allocation -------------------------------------------------------------------------
    def alloc(self, name: str, shape, dtype, fill=None):
        if name in self.buffers:
            raise ArenaError(f"arena buffer {name!r} allocated twice")
        cp = self._cp
        with self.stream:
            a = cp.empty(shape, dtype=dtype)
            if fill is not None:
                a.fill(fill)
        self.buffers[name] = a
        return a

    def __getitem__(self, name: str):
        try:
            return self.buffers[name]
        except KeyError:
            raise ArenaError(f"arena has no buffer {name!r}") from None

    def __contains__(self, name: str) -> bool:
        return name in self.buffers

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.buffers.values())

    # --- uploads ----------------------------------------------------------------------------
    def _stage(self):
        if self._staging is None:
            mem = self._cp.cuda.alloc_pinned_memory(self._staging_bytes)
            self._staging = np.frombuffer(mem, dtype=np.uint8, count=self._staging_bytes)
        return self._staging

    def upload(self, name: str, host: np.ndarray, progress=None):
        """Copy a host array (e.g. an mmap view) to a new device buffer through pinned staging."""
        host = np.ascontiguousarray(host)
        dev = self.alloc(name, host.shape, host.dtype)
        self.copy_in(dev, host, progress)
        return dev

    def copy_in(self, dev, host: np.ndarray, progress=None) -> None:
        host = np.ascontiguousarray(host)
        if dev.nbytes != host.nbytes:
            raise ArenaError(f"copy_in size mismatch: device {dev.nbytes} B vs host {host.nbytes} B")
        src = host.reshape(-1).view(np.uint8)
        dst = dev.reshape(-1).view(self._cp.uint8) if dev.flags.c_contiguous else None
        if dst is None:
            raise ArenaError("copy_in needs a C-contiguous device buffer")
        stg = self._stage()
        n = src.nbytes
        for off in range(0, n, stg.nbytes):
            m = min(stg.nbytes, n - off)
            self.stream.synchronize()  # the previous chunk left the staging buffer
            stg[:m] = src[off:off + m]
            dst[off:off + m].set(stg[:m], stream=self.stream)
            if progress is not None:
                progress.update(m)
        self.stream.synchronize()

    def upload_many(self, items: Iterable[tuple[str, np.ndarray]], desc: str = "upload", total: int | None = None):
        """Upload (name, host array) pairs with one tqdm progress bar in bytes."""
        items = list(items)
        total = total if total is not None else sum(int(a.nbytes) for _, a in items)
        try:
            from tqdm.auto import tqdm

            bar = tqdm(total=total, unit="B", unit_scale=True, desc=desc, leave=False)
        except ImportError:
            bar = None
        try:
            for name, a in items:
                self.upload(name, a, bar)
        finally:
            if bar is not None:
                bar.close()

    def free_all(self) -> None:
        self.buffers.clear()
        self._staging = None
