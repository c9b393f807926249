"""What every drafter implements, the draft it returns, and the typed errors of speculative decoding.

Context convention (shared with the runner): `ctx` is every token of the sequence so far (prompt +
emitted). The target's KV cache holds ctx[:-1]; ctx[-1] is the last emitted token, fed by the next
verify. A drafter proposes up to k tokens to follow ctx; after the round the runner calls
`rollback(ctx)` with the new context so a stateful drafter can drop what was rejected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..errors import BadInputError


class DraftVocabMismatchError(BadInputError):
    """Draft and target models do not share a vocabulary (token ids would mean different things)."""


class NoMTPHeadError(BadInputError):
    """--mtp on a model without NextN/MTP tensors ({arch}.nextn_predict_layers = 0)."""


class FRSpecRanksError(BadInputError):
    """A FR-Spec ranks file that cannot be used with this model."""


@dataclass(frozen=True)
class Draft:
    tokens: list[int]  # proposed continuation, len <= k (may be empty: the round is a plain step)
    # Sampled mode: q[i] is the float64 [V] distribution tokens[i] was drawn from; None = deterministic
    # (a point mass on tokens[i], as for n-gram lookup or greedy drafting).
    q: list[np.ndarray] | None = None


class Drafter(Protocol):
    name: str
    needs_hidden: bool  # the runner passes the target's hidden states (MTP)

    def begin(self, prompt: list[int], hidden: np.ndarray | None = None) -> None:
        """A fresh sequence: the target has just prefilled `prompt` (hidden [len(prompt), E] if asked)."""

    def propose(self, ctx: list[int], k: int, params, hidden: np.ndarray | None = None) -> Draft:
        """Up to k tokens to follow ctx. hidden: the target's hidden rows of the last verify (MTP)."""

    def rollback(self, ctx: list[int], hidden: np.ndarray | None = None) -> None:
        """The round ended with context ctx (accepted drafts + the target's token)."""


def pick(logits: np.ndarray, params, ctx_counts: np.ndarray | None, position: int) -> tuple[int, np.ndarray | None]:
    """A drafter's choice from its logits [V]: argmax when greedy (q None = point mass), else a draw from
    the same filtered distribution plain sampling uses, on the drafter's RNG stream at `position`."""
    from .rejection import STREAM_DRAFT, draw, target_probs, uniform_stream

    if params is None or params.greedy:
        return int(np.argmax(logits)), None
    q = target_probs(logits, params, ctx_counts)
    return draw(q, uniform_stream(params.seed, position, STREAM_DRAFT)), q


def context_counts(ctx: list[int], n_vocab: int, params) -> np.ndarray | None:
    """Token occurrence counts for the penalties (None when no penalty is set)."""
    if params is None or not params.has_penalties:
        return None
    return np.bincount(np.asarray(ctx, dtype=np.int64), minlength=n_vocab).astype(np.int32)
