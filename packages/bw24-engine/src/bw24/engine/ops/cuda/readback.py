"""Device -> host reads that wait for the work queued before them and for nothing queued after (CudaOps.to_host_later),
and the token ring a captured decode step writes its token into (TokenRing, BW24_TOKEN_RING, on by default).

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


def slot_events(cp, n: int) -> list:
    # block=False: the waiting host spins instead of sleeping, so it wakes within ~1 us of the step or copy
    return [cp.cuda.Event(block=False, disable_timing=True) for _ in range(n)]


class SlotReads:
    """Host slots, each read once the work queued before its claim is done (its event), and only while no later
    read has claimed it: one that has is refused with `reused` (formatted with the read's serial, its slot and the
    slot count), never answered with the later read's data. PinnedReads and TokenRing keep their slots so.
    events None: a synchronous backend's slots (the CPU tests of the token ring's protocol), done when claimed."""

    reused: str  # each kind's message

    def __init__(self, n: int, events=None, stream=None):
        self.events, self.stream = events, stream
        self.owner = [-1] * n  # the serial number of the read that holds each slot
        self.serial = 0

    def claim(self, i: int) -> Callable[[], None]:
        """Slot i for the read of the work queued so far: its event recorded now; the returned wait() waits for
        it and raises if a later read has claimed the slot since."""
        serial = self.serial
        self.serial += 1
        self.owner[i] = serial
        if self.events is not None:
            self.events[i].record(self.stream)

        def wait() -> None:
            if self.events is not None:
                self.events[i].synchronize()
            if self.owner[i] != serial:
                raise RuntimeError(self.reused.format(serial=serial, i=i, n=len(self.owner)))

        return wait


class PinnedReads(SlotReads):
    reused = "to_host_later: read {serial} waited on after {n} later reads reused its pinned slot"

    def __init__(self, cp, stream, slots: int = SLOTS, slot_bytes: int = SLOT_BYTES):
        import cupyx

        super().__init__(slots, slot_events(cp, slots), stream)
        self.cp = cp
        self.host = cupyx.empty_pinned((slots, slot_bytes), np.uint8)

    def read(self, a) -> Callable[[], np.ndarray]:
        if not a.flags.c_contiguous or a.nbytes > self.host.shape[1]:
            raise ValueError(f"to_host_later: a contiguous array of at most {self.host.shape[1]} bytes "
                             f"(got {a.nbytes} bytes, contiguous={a.flags.c_contiguous})")
        i = self.serial % self.host.shape[0]
        rt = self.cp.cuda.runtime
        rt.memcpyAsync(self.host[i].ctypes.data, a.data.ptr, a.nbytes, rt.memcpyDeviceToHost, self.stream.ptr)
        wait = self.claim(i)
        shape, dtype, nbytes = a.shape, a.dtype, a.nbytes

        def result() -> np.ndarray:
            wait()
            return self.host[i, :nbytes].view(dtype).reshape(shape).copy()

        return result


TOKEN_RING_ENV = "BW24_TOKEN_RING"
RING = 256  # int32 slots of the token ring, one a position (pos % RING); the decode loop keeps 2 pending
UNSET = -1  # what the host writes into a slot before the step that fills it is queued (no token id is negative)


class TokenRing(SlotReads):
    """int32 slots of mapped pinned host memory that the captured decode step writes its sampled token into
    (kernels/readback.cu publish_token, launched last inside the step): the token reaches the host with no
    device -> host copy queued between two replays, only an event a step. The default (BW24_TOKEN_RING=0: the copies,
    PinnedReads): on an H100 at 7f1070b the copies cost the 0.6B's decode loop 9.8 us a token over back-to-back
    replays and the ring 1.4 (benchmarks/gpu_loop_gap.py), +1.3% on its d0 cell.

    The slot is the position the step leaves (kv.n_past after the host's reserve), so a step queued past the one
    the host waits for writes another slot. later() takes the slot's event after the replay: waiting on it waits
    for that step alone. Before the replay is queued the host marks the slot UNSET; a slot still UNSET once its
    step is done means the step wrote no token (a step built without ops.publish_token) and raises, rather than
    returning a stale token. A put still queued from a step the host dropped (generate.drop_queued_step) lands before the
    later step's own put, by the stream's order, so the event waits for the slot's newest token."""

    reused = "token ring: read {serial} waited on after a later step took its slot {i}"

    def __init__(self, host: np.ndarray, dev=None, events=None, stream=None):
        """host: the int32 slots as the host reads them; dev: the same memory as the device writes it; events: one
        per slot, recorded on `stream` after each step (None: a synchronous backend's ring, written when its step
        returns, as in the CPU tests of this protocol)."""
        super().__init__(len(host), events, stream)
        self.host, self.dev, self.n = host, dev, len(host)
        self.host[:] = UNSET

    @classmethod
    def mapped(cls, cp, stream, n: int = RING) -> TokenRing:
        """The CUDA ring: n slots of mapped pinned host memory (cudaHostAllocMapped), freed with the ring."""
        rt = cp.cuda.runtime
        mem = cp.cuda.PinnedMemoryPointer(cp.cuda.PinnedMemory(4 * n, rt.hostAllocMapped), 0)
        dptr = rt.pointerGetAttributes(mem.ptr).devicePointer  # (cudaHostGetDevicePointer's answer; CuPy lacks it)
        owned = cp.cuda.UnownedMemory(dptr, 4 * n, mem, cp.cuda.Device().id)  # (kept alive by the array)
        dev = cp.ndarray((n,), cp.int32, cp.cuda.MemoryPointer(owned, 0))
        return cls(np.ndarray((n,), np.int32, buffer=mem), dev, slot_events(cp, n), stream)

    def arm(self, pos: int) -> int:
        """Before the step that leaves the cache at `pos` positions is queued: its slot, marked UNSET."""
        i = pos % self.n
        self.host[i] = UNSET
        return i

    def later(self, i: int) -> Callable[[], np.ndarray]:
        """After that step is queued: the read of its token (an int32 array of one), waiting for it alone."""
        wait = self.claim(i)

        def result() -> np.ndarray:
            wait()
            tok = int(self.host[i])
            if tok == UNSET:
                raise RuntimeError(f"token ring: slot {i} still unset after its step ({TOKEN_RING_ENV}=1 needs the "
                                   "step to end with ops.publish_token, as graph.decode_step does)")
            return np.array([tok], np.int32)

        return result
