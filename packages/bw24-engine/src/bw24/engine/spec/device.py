"""The device side of the greedy fast path (fast.py): backend-neutral I/O and verify graphs keyed by T.

DeviceIO gives the few primitives the fast loop needs on any ops backend: per-row argmax of the verify
logits written next to the verified ids (cuda: kernels/spec.cu; ref: numpy.argmax, the same "lowest
index among the maxima" rule as sampling.sample), host -> device id writes (cuda: a pinned staging
ring), 4-byte device copies, cross-stream ordering and a scratch signature. The CPU backend runs the
same loop eagerly, which is how the loop's bookkeeping is tested without a GPU.

GraphsByT: one replayable step per verify length T = K + 1 through ops.capture (first call eager to
size scratch, second captured, then replayed), dropped and rebuilt when the backend's scratch buffers
moved (a captured graph holds their old addresses).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

import numpy as np


def base_ops(ops):
    """The backend under wrappers (RowExactOps, TrimmedHeadOps, ...): they delegate memory to it."""
    while hasattr(ops, "base"):
        ops = ops.base
    return ops


class DeviceIO:
    def __init__(self, ops):
        self.ops = base_ops(ops)
        self.cuda = getattr(self.ops, "name", "") == "cuda"
        self._stage = None

    def argmax_rows(self, logits, ids, out) -> None:
        """out[:T] = argmax of each logits row [T, V], out[T:2T] = ids[:T] (out int32 [2T])."""
        if self.cuda:
            from ..ops.cuda.spec import verify_argmax

            verify_argmax(self.ops, logits, ids, out)
            return
        T = logits.shape[0]
        out[:T] = np.argmax(np.asarray(logits), axis=1)
        out[T:] = ids

    def expand_cols(self, sub, inv, out) -> None:
        """out [T, V] = sub [T, N] at the kept ids (inv [V]: an id's index among them, -1 if dropped), -inf
        elsewhere: a trimmed draft head's logits as a full row (spec/frspec.py TrimmedHeadOps)."""
        if self.cuda:
            from ..ops.cuda.spec import frspec_expand

            frspec_expand(self.ops, sub, inv, out)
            return
        inv = np.asarray(inv)
        row = np.full((sub.shape[0], inv.size), -np.inf, np.float32)
        kept = inv >= 0
        row[:, kept] = np.asarray(sub)[:, inv[kept]]
        out[...] = row

    def write(self, dst, values) -> None:
        """dst (int32 [n] backend array) = values (host ints), queued in order on the backend."""
        if self.cuda:
            if self._stage is None:
                from ..ops.cuda.spec import PinnedStage

                self._stage = PinnedStage(self.ops)
            self._stage.write(dst, values)
        else:
            self.ops.copy_from_host(dst, np.asarray(values, np.int32).reshape(dst.shape))

    def copy_int(self, dst, src) -> None:
        """dst = src on the device, queued on this backend's stream (dst may belong to another ops)."""
        if self.cuda:
            from ..ops.cuda.spec import copy_int

            copy_int(self.ops, dst, src)
        else:
            dst[...] = src

    def order_after(self, other: DeviceIO) -> None:
        """Later work on this backend waits for the work queued so far on `other`'s."""
        if self.cuda and other.cuda:
            from ..ops.cuda.spec import order_after

            order_after(self.ops, other.ops)

    def signature(self) -> int | None:
        if self.cuda:
            from ..ops.cuda.spec import scratch_signature

            return scratch_signature(self.ops)
        return None


class GraphsByT:
    """Replayable steps keyed by T, made by `make(T)` and turned replayable by ops.capture. A change of
    `signature()` (scratch reallocated) drops every captured step before the next call. keys: the cache's keys
    for the call about to run, for ops.capture's depth classes (BW24_ATTN_DEPTH); None: one geometry."""

    def __init__(self, ops, make: Callable[[int], Callable[[], None]], signature: Callable[[], object] = lambda: None,
                 keys: Callable[[], int] | None = None):
        self.ops, self.make, self.signature, self.keys = ops, make, signature, keys
        self.runs: dict[int, Callable[[], None]] = {}
        self._sig = signature()
        self.rebuilds = 0

    def __call__(self, T: int) -> None:
        limit = getattr(self.ops, "graph_rows", None)
        if limit is not None and T > limit:  # e.g. MTP's first batch of pending prompt rows: a one-off
            self.make(T)()
            return
        sig = self.signature()
        if sig != self._sig:
            self.runs.clear()
            self.rebuilds += 1
            self._sig = sig
        run = self.runs.get(T)
        if run is None:
            run = self.runs[T] = self.ops.capture(self.make(T), keys=self.keys)
        run()
        # The first (eager) call of a new T may grow scratch: every other T's graph is stale then;
        # this T's graph is captured on its next call, with the buffers as they are now.
        after = self.signature()
        if after != sig:
            self.runs, self._sig = {T: run}, after
            self.rebuilds += 1


class FastVerifier:
    """The verify of T = K+1 ids already in model.buf.ids[:T]: forward(T) with every row's logits,
    row argmax on the device, and ONE host read of 2T int32 (targets, then the ids that were verified).
    `swap` is the verifier's ops context (RowExactOps on the CPU, nothing for a batched backend)."""

    def __init__(self, model, swap=nullcontext):
        self.model, self.swap = model, swap
        self.io = DeviceIO(model.ops)
        self.out = self.io.ops.zeros((2 * model.max_batch,), np.int32)
        self.graphs = GraphsByT(self.io.ops, self._step, self.io.signature, keys=lambda: model.kv.n_past)

    def _step(self, T: int) -> Callable[[], None]:
        m, out = self.model, self.out[: 2 * T]

        def step() -> None:
            with self.swap():
                logits = m.forward(T, last_only=False)
            self.io.argmax_rows(logits, m.buf.view(T).ids, out)

        return step

    def run(self, T: int) -> tuple[list[int], list[int]]:
        """(target token after each row, the T ids that were verified); advances the KV by T."""
        self.model.kv.reserve(T)
        self.graphs(T)
        r = self.io.ops.to_host(self.out[: 2 * T])
        return [int(x) for x in r[:T]], [int(x) for x in r[T:]]
