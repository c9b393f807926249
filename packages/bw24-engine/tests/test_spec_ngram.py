"""The indexed n-gram drafter proposes exactly what a scan of the whole context proposes, as the
context grows, restarts (a new prompt) and rolls back."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.engine.spec import NgramDrafter


def scan(ctx, k, max_n=4, min_n=1):
    """The reference: the latest earlier occurrence of the last n tokens (longest n first)."""
    a = np.asarray(ctx, dtype=np.int64)
    L = a.size
    for n in range(min(max_n, L - 1), min_n - 1, -1):
        win = np.lib.stride_tricks.sliding_window_view(a[: L - 1], n)
        hits = np.flatnonzero((win == a[L - n:]).all(axis=1))
        if hits.size:
            s = int(hits[-1]) + n
            return [int(t) for t in a[s: s + k]]
    return []


def mismatches(d, vocab, max_n, min_n, seed, steps=300) -> int:
    """Propose on a context that grows, restarts and rolls back; count proposals unlike the scan's."""
    rng = np.random.default_rng(seed)
    ctx = [int(t) for t in rng.integers(0, vocab, 7)]
    d.begin(ctx)
    bad = 0
    for _ in range(steps):
        k = int(rng.integers(1, 9))
        bad += d.propose(ctx, k).tokens != scan(ctx, k, max_n, min_n)
        r = rng.random()
        if r < 0.05:  # a new prompt
            ctx = [int(t) for t in rng.integers(0, vocab, int(rng.integers(1, 12)))]
            d.begin(ctx)
        elif r < 0.1 and len(ctx) > 3:  # a context that does not extend the indexed one
            ctx = ctx[: int(rng.integers(1, len(ctx)))]
        else:
            ctx = ctx + [int(t) for t in rng.integers(0, vocab, int(rng.integers(1, 5)))]
    return bad


@pytest.mark.parametrize("vocab,max_n,min_n", [(5, 4, 1), (3, 6, 2), (50, 4, 1), (2, 3, 3)])
def test_index_matches_the_scan(vocab, max_n, min_n):
    assert mismatches(NgramDrafter(max_n, min_n), vocab, max_n, min_n, seed=vocab * 10 + max_n) == 0


class _KeepFirst(dict):
    def __setitem__(self, key, value):
        if key not in self:
            super().__setitem__(key, value)


class EarliestMatch(NgramDrafter):
    """The canary: an index that keeps each n-gram's first start instead of the latest."""

    def _reset(self, seq):
        super()._reset(seq)
        self._index = {n: _KeepFirst() for n in self._index}


def test_canary_an_index_keeping_the_earliest_match_is_caught():
    assert mismatches(EarliestMatch(4, 1), 5, 4, 1, seed=1) > 0
