"""Prompt-lookup / n-gram drafting: find the latest earlier occurrence of the context's last n tokens
(n from max_n down to min_n) and propose what followed it. No model; deterministic, so in sampled mode
its draft distribution is a point mass (rejection.py handles q = one-hot)."""

from __future__ import annotations

import numpy as np

from .base import Draft


class NgramDrafter:
    name = "ngram"
    needs_hidden = False
    on_device = True  # host lookup; the fast path writes its drafts in one copy

    def __init__(self, max_n: int = 4, min_n: int = 1):
        if not 1 <= min_n <= max_n:
            raise ValueError(f"ngram sizes {min_n}..{max_n}")
        self.max_n, self.min_n = max_n, min_n

    def begin(self, prompt, hidden=None) -> None:
        return None

    def rollback(self, ctx, hidden=None) -> None:
        return None

    def propose(self, ctx, k, params=None, hidden=None) -> Draft:
        a = np.asarray(ctx, dtype=np.int64)
        L = a.size
        for n in range(min(self.max_n, L - 1), self.min_n - 1, -1):
            tail = a[L - n:]
            # windows starting at s = 0 .. L-n-1 (excluding the tail itself), latest first
            win = np.lib.stride_tricks.sliding_window_view(a[: L - 1], n)
            hits = np.flatnonzero((win == tail).all(axis=1))
            if hits.size:
                s = int(hits[-1]) + n  # the token after the match
                return Draft([int(t) for t in a[s : s + k]])
        return Draft([])
