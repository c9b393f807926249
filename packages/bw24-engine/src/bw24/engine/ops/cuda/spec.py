"""Device helpers of the speculative fast path (spec/device.py) on CudaOps: the verify argmax
(kernels/spec.cu), host -> device id writes through a pinned staging ring, 4-byte device copies,
cross-stream ordering (a draft model runs on its own CudaOps stream) and the scratch signature that
tells a captured graph its scratch buffers were reallocated.

None of these reads the device on the host; the only sync of a round is the caller's to_host.
"""

from __future__ import annotations

import numpy as np

VERIFY_THREADS = 512  # spec.cu's VT
STAGE_SLOTS = 256  # int32 slots of the pinned ring (a round uses K + 3 at most)


def verify_argmax(ops, logits, ids, out) -> None:
    """out[:T] = row argmax of logits [T, V] (lowest index of the maxima), out[T:2T] = ids[:T]."""
    T, V = logits.shape
    assert logits.dtype == np.float32 and logits.flags.c_contiguous, "verify_argmax: logits must be C float32"
    assert ids.dtype == np.int32 and ids.shape == (T,) and out.dtype == np.int32 and out.shape == (2 * T,)
    ops._launch(ops._k("spec.cu", "verify_argmax"), (T,), VERIFY_THREADS, (logits, np.int32(T), np.int32(V), ids, out))


EXPAND_THREADS = 256  # spec.cu frspec_expand's block


def frspec_expand(ops, sub, inv, out) -> None:
    """out [T, V] = sub [T, N] spread to the kept ids (inv [V] int32: v's index among them, -1 if dropped),
    -inf elsewhere (kernels/spec.cu frspec_expand)."""
    T, N = sub.shape
    V = inv.size
    assert sub.dtype == out.dtype == np.float32 and sub.flags.c_contiguous and out.flags.c_contiguous
    assert inv.dtype == np.int32 and out.shape == (T, V), "frspec_expand: sub [T, N], inv int32 [V], out [T, V]"
    ops._launch(ops._k("spec.cu", "frspec_expand"), ((V + EXPAND_THREADS - 1) // EXPAND_THREADS, T), EXPAND_THREADS,
                (sub, inv, np.int32(N), np.int32(V), out))


class PinnedStage:
    """Host -> device int32 writes from a pinned ring at fixed addresses (one cudaMemcpyAsync each, no
    pageable staging). A slot is reused only after the ring wrapped AND the stream was synchronized,
    so an async copy never reads a slot the host already overwrote."""

    def __init__(self, ops, slots: int = STAGE_SLOTS):
        import cupyx

        self.ops, self.cp = ops, ops.cp
        self.host = cupyx.empty_pinned((slots,), np.int32)
        self.cursor = 0

    def write(self, dst, values) -> None:
        vals = np.asarray(values, np.int32).reshape(-1)
        n = vals.size
        assert dst.dtype == np.int32 and dst.size == n and dst.flags.c_contiguous, "stage write: int32 [n] target"
        if self.cursor + n > self.host.size:
            self.ops.stream.synchronize()  # every earlier copy out of the ring has completed
            self.cursor = 0
        h = self.host[self.cursor: self.cursor + n]
        h[...] = vals
        self.cursor += n
        rt = self.cp.cuda.runtime
        rt.memcpyAsync(dst.data.ptr, h.ctypes.data, 4 * n, rt.memcpyHostToDevice, self.ops.stream.ptr)


def copy_int(ops, dst, src) -> None:
    """dst[...] = src (int32, contiguous, same size) as one device-to-device cudaMemcpyAsync on ops' stream."""
    assert dst.dtype == src.dtype == np.int32 and dst.size == src.size
    rt = ops.cp.cuda.runtime
    rt.memcpyAsync(dst.data.ptr, src.data.ptr, 4 * dst.size, rt.memcpyDeviceToDevice, ops.stream.ptr)


def order_after(dst_ops, src_ops) -> None:
    """Work queued later on dst_ops' stream waits for everything queued so far on src_ops' stream."""
    if src_ops.stream is dst_ops.stream:
        return
    ev = src_ops.cp.cuda.Event(block=False, disable_timing=True)
    ev.record(src_ops.stream)
    dst_ops.stream.wait_event(ev)


def scratch_signature(ops) -> int:
    """The scratch generation (CudaOps._buf bumps it whenever it allocates): a captured graph baked the
    scratch pointers in, so a change (a larger T grew a buffer) means capturing again. A counter, not
    the (name, pointer, size) tuple it replaced: that cost tens of microseconds of Python per replay,
    twice per decode step of plain_decode and per draft step."""
    return ops._scratch_gen
