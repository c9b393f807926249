"""Device -> host reads that wait for the work queued before them and for nothing queued after (CudaOps.to_host_later).

The decode loop queues step n + 1 before the host reads token n (graph.StepQueue): a plain to_host would wait on the
stream, i.e. on step n + 1 too, and the GPU would idle while the host reads, wakes and launches again. Here each
read is one cudaMemcpyAsync into a slot of a pinned ring plus an event; waiting on the event waits for that copy
alone. A slot is taken again `slots` reads later: a read waited on after that raises instead of returning the later
read's bytes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

SLOTS = 64  # reads that may be pending at once (the decode loop keeps 2)
SLOT_BYTES = 64  # the largest array one read takes (a sampled token is 4 bytes)


class PinnedReads:
    def __init__(self, cp, stream, slots: int = SLOTS, slot_bytes: int = SLOT_BYTES):
        import cupyx

        self.cp, self.stream = cp, stream
        self.host = cupyx.empty_pinned((slots, slot_bytes), np.uint8)
        # block=False: the waiting host spins instead of sleeping, so it wakes within ~1 us of the copy
        self.events = [cp.cuda.Event(block=False, disable_timing=True) for _ in range(slots)]
        self.owner = [-1] * slots  # the serial number of the read that holds each slot
        self.serial = 0

    def read(self, a) -> Callable[[], np.ndarray]:
        if not a.flags.c_contiguous or a.nbytes > self.host.shape[1]:
            raise ValueError(f"to_host_later: a contiguous array of at most {self.host.shape[1]} bytes "
                             f"(got {a.nbytes} bytes, contiguous={a.flags.c_contiguous})")
        slots = self.host.shape[0]
        serial, i = self.serial, self.serial % slots
        self.serial += 1
        self.owner[i] = serial
        rt = self.cp.cuda.runtime
        rt.memcpyAsync(self.host[i].ctypes.data, a.data.ptr, a.nbytes, rt.memcpyDeviceToHost, self.stream.ptr)
        self.events[i].record(self.stream)
        shape, dtype, nbytes = a.shape, a.dtype, a.nbytes

        def result() -> np.ndarray:
            self.events[i].synchronize()
            if self.owner[i] != serial:
                raise RuntimeError(f"to_host_later: read {serial} waited on after {slots} later reads reused its "
                                   "pinned slot")
            return self.host[i, :nbytes].view(dtype).reshape(shape).copy()

        return result
