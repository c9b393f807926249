"""Sampled speculative decoding end to end on tiny synthetic models: seeded runs reproduce exactly,
and the emitted tokens follow the target's distribution (chi-square on the joint of two tokens)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from bw24.engine import SamplingParams
from bw24.engine.spec import DraftModelDrafter, MTPDrafter, NgramDrafter, SpecDecoder
from bw24.engine.spec.rejection import target_probs

PROMPT = [300]  # one token: the prefill is an sgemv (a T > 1 OpenBLAS sgemm is slow on a 2-core box)


@pytest.fixture(scope="module")
def models(tmp_path_factory, helpers):
    return helpers.spec_pair(tmp_path_factory.mktemp("spec_sampled"), n_ctx=128)


@pytest.mark.parametrize("which", ["draft", "ngram", "mtp"])
def test_spec_sampled_seeded_runs_reproduce(models, which):
    t = models["target"]
    mk = {"draft": lambda: DraftModelDrafter(models["draft"].model), "ngram": NgramDrafter,
          "mtp": lambda: MTPDrafter(t.model, t.gguf)}[which]
    p = SamplingParams(temperature=0.9, top_k=40, seed=11)
    runs = [list(SpecDecoder(t.model, mk(), k=3).generate(PROMPT, 16, p)) for _ in range(2)]
    assert runs[0] == runs[1]
    p12 = SamplingParams(temperature=0.9, top_k=40, seed=12)
    assert list(SpecDecoder(t.model, mk(), k=3).generate(PROMPT, 16, p12)) != runs[0]


def test_spec_sampled_matches_target_distribution(models):
    """Tokens 1 and 2 (the second comes out of a draft/verify round with K=1) vs the exact joint
    P(t1) P(t2 | t1) of the target; top-k 2 so the four cells fill quickly. The drafter is the target
    itself with one of the likely second tokens cut from its head (FR-Spec), so q != p where it
    matters: both acceptance and rejection happen."""
    t = models["target"]
    params = SamplingParams(temperature=2.0, top_k=2)
    p1 = target_probs(t.logits(PROMPT)[-1], params)
    joint, cut = {}, []
    for a in np.flatnonzero(p1):
        p2 = target_probs(t.logits(PROMPT + [int(a)])[-1], params)
        cut.append(int(np.argmax(p2)))
        for b in np.flatnonzero(p2):
            joint[(int(a), int(b))] = p1[a] * p2[b]
    V = t.config.n_vocab
    keep = np.setdiff1d(np.arange(V), cut[:1])
    dec = SpecDecoder(t.model, DraftModelDrafter(models["same"].model, frspec_ids=keep, gguf=models["same"].gguf), k=1)
    counts: dict = {}
    drafted = accepted = 0
    trials = 500
    for s in range(trials):
        out = list(dec.generate(PROMPT, 3, SamplingParams(temperature=2.0, top_k=2, seed=s)))
        counts[(out[0], out[1])] = counts.get((out[0], out[1]), 0) + 1
        drafted, accepted = drafted + dec.stats.drafted, accepted + dec.stats.accepted
    assert set(counts) <= set(joint), f"emitted pairs outside the target's support: {set(counts) - set(joint)}"
    x2 = sum((counts.get(c, 0) - trials * joint[c]) ** 2 / (trials * joint[c]) for c in joint)
    df = len(joint) - 1
    a = 2.0 / (9.0 * df)
    crit = df * (1.0 - a + 3.719 * math.sqrt(a)) ** 3  # alpha = 1e-4 (Wilson-Hilferty)
    assert x2 < crit, f"chi2={x2:.1f} > {crit:.1f}: counts {counts}, expected {joint}"
    assert 0 < accepted < drafted, f"acceptance {accepted}/{drafted}: both branches must be exercised"
