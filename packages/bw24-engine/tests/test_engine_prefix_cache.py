"""Prefix reuse (Engine.generate(reuse_prefix=True)) on smollm2-135m: keeping the KV of the common
prefix with the previous generation gives the same tokens and logprobs as a fresh context, the
record of what the KV holds survives an early close and is voided by any other use of the KV, and a
planted off-by-one n_keep is caught (canary). The same check runs on the CUDA backend when there is a GPU."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.engine import BadInputError, Engine, SamplingParams, StaleCacheError
from bw24.engine.generate import generate

N_GEN = 6
TOP = 5


@pytest.fixture(scope="module")
def eng():
    return Engine.load("smollm2-135m", backend="cpu", progress=False)


def _first_and_second(eng):
    """Request 1 (N_GEN greedy tokens), then request 2 = request 1's prompt + its first two tokens +
    new text: the KV holds ids1 + gen1[:-1], so exactly len(ids1) + 2 positions are reusable."""
    ids1 = eng.tokenizer.encode("The three primary colors are", add_special=True)
    gen1 = [ev.token_id for ev in eng.generate(ids1, max_tokens=N_GEN)]
    assert len(gen1) == N_GEN
    tail = eng.tokenizer.encode(" Now list three animals:", add_special=False)
    assert tail[0] != gen1[2]  # the common prefix ends exactly after gen1[:2]
    return ids1, gen1, ids1 + gen1[:2] + tail


def _run(events) -> tuple[list[int], np.ndarray]:
    """(token ids, [n, TOP] top logprobs) of a generation run with top_logprobs=TOP."""
    evs = list(events)
    return [e.token_id for e in evs], np.array([[lp for _, lp in e.top_logprobs] for e in evs])


def assert_same_as_fresh(got, fresh, atol: float = 2e-3) -> None:
    """The gate: same greedy tokens and (within float32 noise of batched vs decoded keys) same logprobs."""
    assert got[0] == fresh[0]
    np.testing.assert_allclose(got[1], fresh[1], atol=atol)


def test_reuse_prefix_equals_fresh_context(eng):
    ids1, gen1, ids2 = _first_and_second(eng)
    assert eng.cached_prefix(ids2) == len(ids1) + 2
    assert eng.model.kv.n_past == len(ids1) + N_GEN - 1  # the last generated token is never fed
    got = _run(eng.generate(ids2, max_tokens=8, reuse_prefix=True, top_logprobs=TOP))
    assert eng.last_stats.cached_tokens == len(ids1) + 2 and eng.last_stats.n_prompt == len(ids2)
    assert int(eng.model.kv.pos[0]) == eng.model.kv.n_past  # device/backend position follows the host
    fresh = _run(eng.generate(ids2, max_tokens=8, top_logprobs=TOP))
    assert eng.last_stats.cached_tokens == 0
    assert_same_as_fresh(got, fresh)
    # The same prompt again: everything but its last token is reused, still the same output.
    assert eng.cached_prefix(ids2) == len(ids2) - 1
    assert_same_as_fresh(_run(eng.generate(ids2, max_tokens=8, reuse_prefix=True, top_logprobs=TOP)), fresh)


def test_canary_off_by_one_n_keep_is_caught(eng):
    ids1, _, ids2 = _first_and_second(eng)
    fresh = _run(eng.generate(ids2, max_tokens=8, top_logprobs=TOP))

    def planted(n_keep):  # the prompt token at position n_keep - 1 keeps the previous request's KV
        _first_and_second(eng)
        return _run(generate(eng.model, eng.tokenizer, _detok(eng), ids2, SamplingParams(), max_tokens=8,
                             top_logprobs=TOP, n_keep=n_keep))

    good = len(ids1) + 2
    assert_same_as_fresh(planted(good), fresh)  # control: the direct call with the right n_keep passes
    with pytest.raises(AssertionError):
        assert_same_as_fresh(planted(good + 1), fresh)
    # Through the API the record refuses the wrong count before any prefill.
    _first_and_second(eng)
    eng.cached_prefix = lambda ids: good + 1
    try:
        with pytest.raises(StaleCacheError):
            list(eng.generate(ids2, max_tokens=2, reuse_prefix=True))
    finally:
        del eng.cached_prefix


@pytest.mark.parametrize("lag", [0, 1])
def test_early_close_records_only_fed_tokens(eng, monkeypatch, lag):
    """BW24_DECODE_LAG=0: the third token was yielded but never fed. 1 (the default): the step that feeds it was
    queued before the host read it, so the KV holds it and the record says so."""
    monkeypatch.setenv("BW24_DECODE_LAG", str(lag))
    ids1 = eng.tokenizer.encode("Once upon a time", add_special=True)
    it = eng.generate(ids1, max_tokens=20)
    toks = [next(it).token_id for _ in range(3)]
    it.close()
    fed = 2 + lag
    assert eng.kv_history.ids == ids1 + toks[:fed] and eng.model.kv.n_past == len(ids1) + fed
    ids2 = ids1 + toks + eng.tokenizer.encode(" there", add_special=False)
    assert eng.cached_prefix(ids2) == len(ids1) + fed
    got = _run(eng.generate(ids2, max_tokens=6, reuse_prefix=True, top_logprobs=TOP))
    assert eng.last_stats.cached_tokens == len(ids1) + fed
    assert_same_as_fresh(got, _run(eng.generate(ids2, max_tokens=6, top_logprobs=TOP)))


def test_other_uses_of_the_kv_void_the_record(eng):
    ids = eng.tokenizer.encode("Hello there, how are", add_special=True)
    list(eng.generate(ids, max_tokens=3))
    assert eng.cached_prefix(ids + [42]) == len(ids)
    assert eng.cached_prefix([7] + ids) == 0
    eng.logits(ids + [42, 43])  # resets and refills the KV to the same length as the record
    assert eng.model.kv.n_past == len(eng.kv_history.ids)
    assert eng.cached_prefix(ids + [42]) == 0
    list(eng.generate(ids, max_tokens=2, reuse_prefix=True))
    assert eng.last_stats.cached_tokens == 0


def test_bad_n_keep_is_a_typed_error(eng):
    ids = eng.tokenizer.encode("Hello", add_special=True)
    for n_keep in (-1, len(ids)):
        with pytest.raises(BadInputError, match="n_keep"):
            list(generate(eng.model, eng.tokenizer, _detok(eng), ids, SamplingParams(), max_tokens=1,
                          n_keep=n_keep))


def test_cuda_reuse_prefix_equals_fresh(tmp_path):
    from bw24.runtime import has_gpu, no_gpu_reason

    if not has_gpu():
        pytest.skip(f"no CUDA GPU: {no_gpu_reason()}")
    g = Engine.load("smollm2-135m", backend="cuda", progress=False)
    ids1, _, ids2 = _first_and_second(g)
    got = _run(g.generate(ids2, max_tokens=16, reuse_prefix=True, top_logprobs=TOP))
    assert g.last_stats.cached_tokens == len(ids1) + 2
    assert int(g.ops.to_host(g.model.kv.pos)[0]) == g.model.kv.n_past
    assert_same_as_fresh(got, _run(g.generate(ids2, max_tokens=16, top_logprobs=TOP)), atol=g.ops.verify_tolerance)


def _detok(eng):
    from bw24.tokenizer import IncrementalDetokenizer

    return IncrementalDetokenizer(eng.tokenizer)
