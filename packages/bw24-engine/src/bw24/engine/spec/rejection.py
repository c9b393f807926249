"""Sampled speculative decoding, distribution-exact (Leviathan et al. 2023; Chen et al. 2023).

For draft token d drawn from q at a position where the target's distribution is p: accept with
probability min(1, p[d] / q[d]); on rejection draw from norm(max(0, p - q)) and end the round; when
every draft is accepted, draw a bonus token from the target's next distribution. The emitted token at
every position is then distributed exactly as p (the target's own sampling distribution, after the
same penalties / temperature / top-k / top-p / min-p as plain sampling).

Random numbers: the engine's counter-based Philox4x32-10 keyed by (seed, position), with the third
counter word selecting a stream, so that any draw is reproducible without replaying earlier ones:
stream 0 is plain sampling's (sampling.uniform), 1 the drafter's draw, 2 the acceptance test, 3 the
residual / bonus draw. A rejected round reveals nothing about later positions' numbers, so reusing
them in the next round keeps the draws independent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..sampling import SamplingParams, apply_penalties, filtered_distribution, philox4x32

_U32 = 0xFFFFFFFF
STREAM_DRAFT, STREAM_ACCEPT, STREAM_RESAMPLE = 1, 2, 3


def uniform_stream(seed: int, position: int, stream: int) -> float:
    """u in [0, 1) (24 bits) keyed by (seed, position, stream); stream 0 equals sampling.uniform."""
    x = philox4x32((position & _U32, (position >> 32) & _U32, stream, 0), (seed & _U32, (seed >> 32) & _U32))[0]
    return (x >> 8) * (1.0 / (1 << 24))


def target_probs(logits: np.ndarray, params: SamplingParams, counts: np.ndarray | None = None) -> np.ndarray:
    """float64 [V]: the distribution plain sampling draws from (penalties, temperature, filters)."""
    lg = apply_penalties(np.asarray(logits).reshape(-1), params, counts)
    order, p = filtered_distribution(lg, params)
    out = np.zeros(lg.size, np.float64)
    out[order] = p
    return out


def draw(probs: np.ndarray, u: float) -> int:
    """Inverse-CDF draw over token ids in ascending order (probs need not be normalized)."""
    cdf = np.cumsum(probs)
    i = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    return min(i, probs.size - 1)


def point_mass(token: int, n_vocab: int) -> np.ndarray:
    q = np.zeros(n_vocab, np.float64)
    q[token] = 1.0
    return q


@dataclass(frozen=True)
class RoundResult:
    n_accepted: int  # drafts kept
    token: int  # the target's token after them (the residual draw, or the bonus)


def accept_sampled(p: Sequence[np.ndarray], drafts: Sequence[int], q: Sequence[np.ndarray] | None,
                   seed: int, position: int) -> RoundResult:
    """p: K+1 target distributions (p[i] for the token at position + i), drafts d_1..d_K, q their draft
    distributions (None: point masses). Returns how many drafts are accepted and the next token."""
    K = len(drafts)
    if len(p) != K + 1 or (q is not None and len(q) != K):
        raise ValueError(f"accept_sampled: {len(p)} target rows and {K} drafts")
    for i, d in enumerate(drafts):
        qi = q[i] if q is not None else point_mass(d, p[i].size)
        pd, qd = float(p[i][d]), float(qi[d])
        if qd <= 0.0:
            raise ValueError(f"draft token {d} has q = 0: it cannot have been drawn from q")
        if uniform_stream(seed, position + i, STREAM_ACCEPT) * qd < pd:  # u < p/q, without dividing
            continue
        resid = np.maximum(p[i] - qi, 0.0)
        if resid.sum() <= 0.0:  # only when p == q, where rejection has probability 0
            resid = p[i]
        return RoundResult(i, draw(resid, uniform_stream(seed, position + i, STREAM_RESAMPLE)))
    return RoundResult(K, draw(p[K], uniform_stream(seed, position + K, STREAM_RESAMPLE)))
