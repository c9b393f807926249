"""Prefill's weight dequantization on a second stream, a chunk ahead of the GEMMs (BW24_PREFILL_OVERLAP=1).

prefill.stacked_gemm and glu_gemm dequantize each row chunk of a weight to fp16, then multiply it (cuBLAS), one
after the other on the backend's stream. At 1653f1f the 8B's pp512 spent 10.6 of its 29.7 ms of kernels in the
dequantization, a memory-bound kernel, and ~10.4 in the compute-bound GEMMs. With the overlap the chunks take two
scratch slots in turn. A chunk's dequantization runs on a side stream once its slot's last GEMM is done (the
slot's `free` event), and its GEMM waits for it (`ready`). So a chunk's dequantization, of this weight or of the
next one (a captured prefill graph keeps only these dependencies), can run beside the GEMM, epilogue, attention
and conversions queued before it. The same kernels on the same data: the bits do not change (kernel-check's
"prefill gemm overlap == serial" cases, and a GPU test of captured and eager prefill logits).

Capture: a stream joins a capture by waiting on an event recorded in it. A slot whose last `free` was recorded
outside the capture under way (before it, or in another one) is not waited on. The side stream waits on a `fork`
event recorded on the backend's stream at that point instead: everything queued there before it, the slot's last
GEMM included, is done. Every side-stream launch is followed by a `ready` that the backend's stream waits on, so
the side stream's work is joined into the capture by the end of each GEMM call.
"""

from __future__ import annotations

SLOTS = 2


class Overlap:
    """The side stream and the events of one backend (CudaOps.overlap() makes it on first use)."""

    def __init__(self, ops) -> None:
        from bw24.runtime import new_stream

        ev = ops.cp.cuda.Event
        self.side = new_stream()
        self.ready, self.fork = ev(disable_timing=True), ev(disable_timing=True)
        self.free: list[tuple[object, object] | None] = [None] * SLOTS  # (event, epoch) of each slot's last GEMM
        self._new_event = lambda: ev(disable_timing=True)
        self.turn = 0

    def take(self, ops) -> int:
        """The next chunk's slot; the side stream may write it once the slot's last reader is done."""
        s, self.turn = self.turn, (self.turn + 1) % SLOTS
        f = self.free[s]
        if f is not None and f[1] == epoch(ops):
            self.side.wait_event(f[0])
        else:  # no free event of this capture (or of eager work): fork from the backend's stream here
            self.fork.record(ops.stream)
            self.side.wait_event(self.fork)
        return s

    def hand_over(self, ops) -> None:
        """The backend's stream waits for what the side stream queued (the chunk's dequantization)."""
        self.ready.record(self.side)
        ops.stream.wait_event(self.ready)

    def release(self, ops, s: int) -> None:
        """Slot s's GEMM is queued on the backend's stream: its end frees the slot."""
        f = self.free[s]
        e = f[0] if f is not None else self._new_event()
        e.record(ops.stream)
        self.free[s] = (e, epoch(ops))


def epoch(ops) -> object:
    """Which events a stream may wait on now: those recorded in the capture under way (its serial), or outside
    any capture."""
    return ops._capture_serial if ops._capturing else None
