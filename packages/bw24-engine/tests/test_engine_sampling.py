"""Sampling semantics: Philox known answers, filters, penalties, reproducibility, validation."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.engine.errors import InvalidSamplingParamsError
from bw24.engine.generate import StopMatcher
from bw24.engine.ops import RefOps
from bw24.engine.sampling import SamplingParams, philox4x32, sample, uniform


@pytest.mark.parametrize("ctr,key,want", [  # Random123 kat_vectors, philox4x32 10 rounds
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
])
def test_philox_known_answers(ctr, key, want):
    assert philox4x32(ctr, key) == want


def test_uniform_range_and_keying():
    us = [uniform(42, p) for p in range(2000)]
    assert all(0.0 <= u < 1.0 for u in us)
    assert 0.45 < float(np.mean(us)) < 0.55
    assert uniform(42, 7) == uniform(42, 7)
    assert uniform(42, 7) != uniform(43, 7) and uniform(42, 7) != uniform(42, 8)


LOGITS = np.array([1.0, 3.0, 2.0, 3.0, -1.0, 0.5], np.float32)


def test_greedy_lowest_index_on_ties():
    assert sample(LOGITS, SamplingParams(), 0) == 1


def test_nan_logits_are_never_picked_and_nan_alone_gives_token_0():
    """The reference sampler as the device's (sample.cu): a NaN logit weighs as -inf, greedy or drawn, and with no
    finite logit the pick is token 0. (np.argmax picked the first NaN, and a NaN weight made the draw's sums NaN.)"""
    lg = LOGITS.copy()
    lg[1] = np.nan  # the greedy pick before (3.0 at index 1)
    assert sample(lg, SamplingParams(), 0) == 3  # the other 3.0
    p = SamplingParams(temperature=2.0, seed=11)
    want = [sample(np.where(np.isnan(lg), -np.inf, lg).astype(np.float32), p, pos) for pos in range(200)]
    assert [sample(lg, p, pos) for pos in range(200)] == want and 1 not in want and len(set(want)) > 2
    for row in (np.full(6, np.nan, np.float32), np.full(6, -np.inf, np.float32)):
        assert sample(row, SamplingParams(), 0) == 0 and sample(row, p, 5) == 0


def test_top_k_1_is_greedy_at_any_temperature():
    p = SamplingParams(temperature=5.0, top_k=1, seed=3)
    assert {sample(LOGITS, p, pos) for pos in range(50)} == {1}


def test_filters_restrict_support():
    seen_k = {sample(LOGITS, SamplingParams(temperature=1.0, top_k=3, seed=1), pos) for pos in range(300)}
    assert seen_k == {1, 3, 2}  # the 3 largest (ties by lower index: 1, 3 then 2)
    # top-p: probs of sorted [1,3,2,0,5,4] at T=1; the two 3.0 logits carry ~0.58 of the mass
    seen_p = {sample(LOGITS, SamplingParams(temperature=1.0, top_p=0.5, seed=1), pos) for pos in range(300)}
    assert seen_p == {1, 3}
    seen_m = {sample(LOGITS, SamplingParams(temperature=1.0, min_p=0.3, seed=1), pos) for pos in range(300)}
    assert seen_m == {1, 3, 2}  # e^-1 = 0.37 >= 0.3 of the max; e^-2 is not


def test_temperature_sampling_matches_softmax_frequencies():
    p = SamplingParams(temperature=1.0, seed=11)
    draws = np.bincount([sample(LOGITS, p, pos) for pos in range(20000)], minlength=LOGITS.size)
    want = np.exp(LOGITS - LOGITS.max()) / np.exp(LOGITS - LOGITS.max()).sum()
    np.testing.assert_allclose(draws / draws.sum(), want, atol=0.015)


def test_seed_reproducible_and_seed_dependent():
    a = [sample(LOGITS, SamplingParams(temperature=1.5, seed=9), pos) for pos in range(64)]
    b = [sample(LOGITS, SamplingParams(temperature=1.5, seed=9), pos) for pos in range(64)]
    c = [sample(LOGITS, SamplingParams(temperature=1.5, seed=10), pos) for pos in range(64)]
    assert a == b and a != c


def test_penalties():
    counts = np.zeros(LOGITS.size, np.int32)
    counts[1] = 2
    assert sample(LOGITS, SamplingParams(repetition_penalty=2.0), 0, counts) == 3  # 3.0 / 2 < 3.0
    assert sample(LOGITS, SamplingParams(frequency_penalty=0.6), 0, counts) == 3
    assert sample(LOGITS, SamplingParams(presence_penalty=0.1), 0, counts) == 3
    neg = np.array([-1.0, -1.2], np.float32)
    c2 = np.array([1, 0], np.int32)
    assert sample(neg, SamplingParams(repetition_penalty=1.5), 0, c2) == 1  # -1 * 1.5 < -1.2


def test_ref_sample_op_updates_counts_and_reads_position():
    ops = RefOps()
    counts = np.zeros(LOGITS.size, np.int32)
    out = np.zeros(1, np.int32)
    p = SamplingParams(temperature=1.0, seed=5)
    ops.sample(LOGITS, p, np.array([17], np.int32), out=out, counts=counts)
    assert int(out[0]) == sample(LOGITS, p, 17) and counts[out[0]] == 1 and counts.sum() == 1


@pytest.mark.parametrize("kw", [dict(temperature=-1), dict(top_p=0.0), dict(top_p=1.5), dict(min_p=2),
                                dict(top_k=-1), dict(repetition_penalty=0), dict(seed=-1)])
def test_invalid_params_rejected(kw):
    with pytest.raises(InvalidSamplingParamsError):
        SamplingParams(**kw)


def test_stop_matcher_holds_back_prefixes():
    m = StopMatcher(["</end>", "STOP"])
    assert m.push("hello </e") == ("hello ", False)
    assert m.push("xx S") == ("</exx ", False)
    assert m.push("TOP tail") == ("", True)
    m = StopMatcher(["ab"])
    assert m.push("xa") == ("x", False)
    assert m.flush() == "a"
