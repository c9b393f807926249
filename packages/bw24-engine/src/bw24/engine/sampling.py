"""Sampling: the reference semantics every backend reproduces.

Order of operations (one token):
 1. penalties over the tokens in the context (prompt + generated so far), with c = count of a token:
    repetition (CTRL / llama.cpp style: l / r if l > 0 else l * r, for c > 0), then
    l -= frequency * c + presence * (c > 0);
 2. temperature == 0: greedy, the lowest index among the maxima;
 3. l / temperature, stable sort descending (ties: lower index first), top-k, softmax (float64),
    top-p (smallest prefix whose mass >= top_p), min-p (keep p >= min_p * p_max), renormalize;
 4. draw with u = uniform(seed, position) from a counter-based RNG (Philox4x32-10, key = seed,
    counter = position), the first sorted token whose cumulative mass exceeds u * total.
Keying the draw by (seed, position) instead of a stream state lets a GPU kernel (or a later run, or a
speculative verifier) reproduce any single draw without replaying the ones before it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from .errors import InvalidSamplingParamsError

_M0, _M1 = 0xD2511F53, 0xCD9E8D57  # Philox4x32 multipliers
_W0, _W1 = 0x9E3779B9, 0xBB67AE85  # Weyl key increments
_U32 = 0xFFFFFFFF


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None  # None: a fresh random seed per generation (see resolved())

    def __post_init__(self) -> None:
        def bad(msg: str) -> None:
            raise InvalidSamplingParamsError(f"invalid sampling parameter: {msg}")

        if not np.isfinite(self.temperature) or self.temperature < 0:
            bad(f"temperature={self.temperature} (must be >= 0)")
        if self.top_k < 0:
            bad(f"top_k={self.top_k} (must be >= 0; 0 disables)")
        if not 0.0 < self.top_p <= 1.0:
            bad(f"top_p={self.top_p} (must be in (0, 1])")
        if not 0.0 <= self.min_p <= 1.0:
            bad(f"min_p={self.min_p} (must be in [0, 1])")
        if not self.repetition_penalty > 0:
            bad(f"repetition_penalty={self.repetition_penalty} (must be > 0)")
        for name in ("presence_penalty", "frequency_penalty"):
            if not np.isfinite(getattr(self, name)):
                bad(f"{name}={getattr(self, name)} (must be finite)")
        if self.seed is not None and not 0 <= int(self.seed) < 2**64:
            bad(f"seed={self.seed} (must be in [0, 2**64))")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def has_penalties(self) -> bool:
        return self.repetition_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0

    def resolved(self) -> SamplingParams:
        """The same parameters with a concrete seed (drawn from the OS when None)."""
        if self.seed is not None:
            return self
        seed = int.from_bytes(os.urandom(8), "little")
        return SamplingParams(**{**self.__dict__, "seed": seed})


def philox4x32(counter: tuple[int, int, int, int], key: tuple[int, int], rounds: int = 10) -> tuple[int, ...]:
    """Philox4x32-10 (Salmon et al., SC'11; Random123), on Python ints."""
    c0, c1, c2, c3 = (c & _U32 for c in counter)
    k0, k1 = (k & _U32 for k in key)
    for _ in range(rounds):
        p0, p1 = _M0 * c0, _M1 * c2
        c0, c1, c2, c3 = (p1 >> 32) ^ c1 ^ k0, p1 & _U32, (p0 >> 32) ^ c3 ^ k1, p0 & _U32
        k0, k1 = (k0 + _W0) & _U32, (k1 + _W1) & _U32
    return c0, c1, c2, c3


def uniform(seed: int, position: int) -> float:
    """u in [0, 1) with 24 random bits (exact in float32), keyed by (seed, position)."""
    x = philox4x32((position & _U32, (position >> 32) & _U32, 0, 0), (seed & _U32, (seed >> 32) & _U32))[0]
    return (x >> 8) * (1.0 / (1 << 24))


def apply_penalties(logits: np.ndarray, params: SamplingParams, counts: np.ndarray | None) -> np.ndarray:
    """float64 copy of logits with the repetition / frequency / presence penalties applied."""
    lg = np.array(logits, dtype=np.float64)
    if counts is None or not params.has_penalties:
        return lg
    seen = counts > 0
    if params.repetition_penalty != 1.0:
        r = params.repetition_penalty
        lg[seen] = np.where(lg[seen] > 0, lg[seen] / r, lg[seen] * r)
    lg -= params.frequency_penalty * counts + params.presence_penalty * seen
    return lg


def filtered_distribution(lg: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """(token ids sorted by logit desc, their probabilities after top-k / top-p / min-p, summing to 1)."""
    order = np.argsort(-lg, kind="stable")
    if 0 < params.top_k < order.size:
        order = order[: params.top_k]
    z = lg[order] / params.temperature
    p = np.exp(z - z[0])
    p /= p.sum()
    if params.top_p < 1.0:
        keep = int(np.searchsorted(np.cumsum(p), params.top_p)) + 1  # first prefix with mass >= top_p
        order, p = order[:keep], p[:keep]
    if params.min_p > 0.0:
        keep = int(np.count_nonzero(p >= params.min_p * p[0]))  # p is sorted, p[0] is the max
        order, p = order[:keep], p[:keep]
    return order, p / p.sum()


def sample(
    logits: np.ndarray, params: SamplingParams, position: int, counts: np.ndarray | None = None
) -> int:
    """The token drawn from logits [V] at `position` (the position the new token will occupy). A NaN logit is never
    picked (it weighs as -inf); with no finite logit the pick is token 0, as the device's sampler (sample.cu) does."""
    lg = apply_penalties(logits, params, counts)
    lg[np.isnan(lg)] = -np.inf
    if not lg.max() > -np.inf:
        return 0
    if params.greedy:
        return int(np.argmax(lg))
    if params.seed is None:
        raise InvalidSamplingParamsError("sample() needs a concrete seed: call params.resolved() first")
    order, p = filtered_distribution(lg, params)
    cdf = np.cumsum(p)
    i = int(np.searchsorted(cdf, uniform(params.seed, position) * cdf[-1], side="right"))
    return int(order[min(i, order.size - 1)])


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """float64 log-probabilities of the raw logits (what events report as logprob)."""
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max()
    return z - np.log(np.exp(z).sum())
