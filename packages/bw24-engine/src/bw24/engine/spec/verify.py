"""The verify step: one forward of [last, d1..dK] (T = K+1) through the model's own forward, every
row's logits back on the host, the longest agreeing prefix accepted, the KV cache rolled back by length.

Exactness (greedy): row i's logits must equal, bit for bit, what a plain decode step at that position
computes, so argmax picks the same token. The verify forward runs the model's forward(T = K+1) under
RowExactOps unless the backend declares `batch_rows_exact` (see exact_ops.py); `mode="batched"`
forces the plain batched forward (for benchmarking the kernels' claim, and as a canary).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from ..errors import BadInputError
from .exact_ops import RowExactOps

VERIFY_MODES = ("auto", "rowwise", "batched")


@dataclass(frozen=True)
class VerifyOut:
    logits: np.ndarray  # float32 [T, V], row i predicts the token after rows[: i + 1]
    hidden: np.ndarray | None  # float32 [T, E] residual stream before the output norm (MTP drafting)


class Verifier:
    def __init__(self, model, mode: str = "auto", want_hidden: bool = False):
        if mode not in VERIFY_MODES:
            raise BadInputError(f"verify mode {mode!r} not in {VERIFY_MODES}")
        self.model, self.want_hidden = model, want_hidden
        exact = bool(getattr(model.ops, "batch_rows_exact", False))
        self.rowwise = mode == "rowwise" or (mode == "auto" and not exact)
        self._ops = RowExactOps(model.ops) if self.rowwise else model.ops
        self.mode = "rowwise" if self.rowwise else "batched"

    @contextmanager
    def _ops_swapped(self):
        m = self.model
        saved, m.ops = m.ops, self._ops
        try:
            yield
        finally:
            m.ops = saved

    def forward(self, ids: Sequence[int]) -> VerifyOut:
        """Append ids at kv.pos (T = len(ids) <= max_batch) and return every row's logits."""
        m = self.model
        a = m.check_ids(ids)
        T = a.size
        if not 0 < T <= m.max_batch:
            raise BadInputError(f"verify of {T} tokens (max_batch={m.max_batch})")
        m.kv.reserve(T)
        b = m.buf.view(T)
        m.ops.copy_from_host(b.ids, a)
        with self._ops_swapped():
            out = m.forward(T, last_only=False)
        logits = m.ops.to_host(out)
        hidden = m.ops.to_host(b.h) if self.want_hidden else None
        return VerifyOut(logits, hidden)

    def rollback(self, n_keep: int) -> None:
        """Keep the first n_keep cached tokens (the rejected drafts' keys are forgotten)."""
        self.model.kv.reset(n_keep)


def greedy_accept(drafts: Sequence[int], targets: Sequence[int]) -> int:
    """Number of leading drafts equal to the target's tokens (targets has len(drafts) + 1 entries)."""
    j = 0
    while j < len(drafts) and drafts[j] == targets[j]:
        j += 1
    return j


class AdaptiveK:
    """K for the next round from the recent acceptance: grow after a fully accepted round, shrink when
    most of the draft was rejected. A fixed K when adaptive is off. grow_to: the most K grows to (the backend's
    spec_k_cap, why there; never under the starting K), k_max the most any K may be."""

    def __init__(self, k: int, k_max: int = 8, adaptive: bool = False, window: int = 8, grow_to: int | None = None):
        if not 1 <= k <= k_max:
            raise BadInputError(f"K={k} (must be in 1..{k_max})")
        self.k, self.k_max, self.adaptive = k, k_max, adaptive
        self.grow_to = k_max if grow_to is None else max(k, min(grow_to, k_max))
        self.recent: deque[float] = deque(maxlen=window)

    def update(self, accepted: int, drafted: int) -> None:
        if not self.adaptive or drafted == 0:
            return
        self.recent.append(accepted / drafted)
        rate = float(np.mean(self.recent))
        if accepted == drafted and rate > 0.75:
            self.k = min(self.k + 1, self.grow_to)
        elif rate < 0.4:
            self.k = max(self.k - 1, 1)
