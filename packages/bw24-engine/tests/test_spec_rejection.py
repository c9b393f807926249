"""Rejection sampling (spec/rejection.py) reproduces the target distribution exactly: chi-square tests
on explicit small-vocabulary p / q, over whole multi-round generations, with canaries (a wrong rule
must fail the same test)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from bw24.engine import sampling
from bw24.engine.spec import rejection as rj

V = 6
P = np.array([[0.40, 0.25, 0.15, 0.10, 0.06, 0.04],
              [0.05, 0.05, 0.50, 0.20, 0.10, 0.10],
              [0.30, 0.00, 0.30, 0.10, 0.20, 0.10],
              [0.10, 0.20, 0.10, 0.40, 0.10, 0.10]])
Q = np.array([[0.10, 0.40, 0.10, 0.10, 0.20, 0.10],
              [0.20, 0.20, 0.20, 0.20, 0.10, 0.10],
              [0.05, 0.50, 0.05, 0.20, 0.10, 0.10],
              [0.25, 0.25, 0.25, 0.05, 0.10, 0.10]])


def chi2_crit(df: int, z: float = 3.719) -> float:
    """Upper quantile of chi-square (Wilson-Hilferty), z = 3.719: alpha = 1e-4."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * math.sqrt(a)) ** 3


def chi2(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    n = counts.sum()
    m = probs > 0
    if counts[~m].sum():  # a token the target gives probability 0 was emitted
        return math.inf, int(m.sum()) - 1
    e = n * probs[m]
    return float(((counts[m] - e) ** 2 / e).sum()), int(m.sum()) - 1


def generate(seed: int, n_tokens: int, k: int, rule=rj.accept_sampled) -> list[int]:
    """A position-only 'model': the target's distribution at position t is P[t % 4], the drafter's Q[t % 4]
    (drafts drawn on the drafter stream, as spec/base.pick does). Full speculative rounds."""
    out: list[int] = []
    while len(out) < n_tokens:
        pos = len(out)
        drafts = [rj.draw(Q[(pos + i) % 4], rj.uniform_stream(seed, pos + i, rj.STREAM_DRAFT)) for i in range(k)]
        r = rule([P[(pos + i) % 4] for i in range(k + 1)], drafts, [Q[(pos + i) % 4] for i in range(k)], seed, pos)
        out += drafts[: r.n_accepted] + [r.token]
    return out[:n_tokens]


def _marginals(rule, trials=3000, k=3, n_tokens=4) -> np.ndarray:
    c = np.zeros((n_tokens, V), np.int64)
    for s in range(trials):
        for t, tok in enumerate(generate(s, n_tokens, k, rule)):
            c[t, tok] += 1
    return c


def test_spec_rejection_marginals_match_target():
    c = _marginals(rj.accept_sampled)
    for t in range(c.shape[0]):
        x2, df = chi2(c[t], P[t % 4])
        assert x2 < chi2_crit(df), f"position {t}: chi2={x2:.1f} (df={df}), counts {c[t]}"


def _accept_always(p, drafts, q, seed, pos):  # canary: take the draft without the p/q test
    return rj.RoundResult(len(drafts), rj.draw(p[-1], rj.uniform_stream(seed, pos + len(drafts), rj.STREAM_RESAMPLE)))


def _resample_from_p(p, drafts, q, seed, pos):  # canary: on rejection draw from p instead of the residual
    for i, d in enumerate(drafts):
        if rj.uniform_stream(seed, pos + i, rj.STREAM_ACCEPT) * q[i][d] >= p[i][d]:
            return rj.RoundResult(i, rj.draw(p[i], rj.uniform_stream(seed, pos + i, rj.STREAM_RESAMPLE)))
    return rj.RoundResult(len(drafts), rj.draw(p[-1], rj.uniform_stream(seed, pos + len(drafts), rj.STREAM_RESAMPLE)))


@pytest.mark.parametrize("rule", [_accept_always, _resample_from_p])
def test_spec_rejection_canary_wrong_rule_fails_chi2(rule):
    c = _marginals(rule)
    worst = max(chi2(c[t], P[t % 4])[0] / chi2_crit(chi2(c[t], P[t % 4])[1]) for t in range(c.shape[0]))
    assert worst > 1.0, "a biased acceptance rule passed the chi-square test: the test has no power"


def test_spec_rejection_point_mass_draft():
    """n-gram drafts are point masses: accept with probability p[d], else draw from p without d."""
    p = [P[0], P[1]]
    c = np.zeros(V, np.int64)
    acc = 0
    for s in range(4000):
        r = rj.accept_sampled(p, [1], None, s, 0)
        acc += r.n_accepted
        c[1 if r.n_accepted else r.token] += 1
    x2, df = chi2(c, P[0])
    assert x2 < chi2_crit(df), c
    assert abs(acc / 4000 - P[0][1]) < 0.03


def test_spec_rejection_reproducible_and_streams():
    assert generate(7, 12, 3) == generate(7, 12, 3)
    assert generate(7, 12, 3) != generate(8, 12, 3)
    # stream 0 is plain sampling's draw: the same Philox words
    for pos in (0, 5, 2**33 + 1):
        assert rj.uniform_stream(123, pos, 0) == sampling.uniform(123, pos)
    assert rj.uniform_stream(123, 5, rj.STREAM_ACCEPT) != rj.uniform_stream(123, 5, rj.STREAM_RESAMPLE)


def test_spec_rejection_bad_input():
    with pytest.raises(ValueError, match="target rows"):
        rj.accept_sampled([P[0]], [1], None, 0, 0)
    with pytest.raises(ValueError, match="q = 0"):
        rj.accept_sampled([P[0], P[1]], [2], [np.eye(V)[0]], 0, 0)
