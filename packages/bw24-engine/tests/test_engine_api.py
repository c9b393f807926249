"""The Engine API on smollm2-135m (CPU): logits, streaming generation, stops, sampling, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.engine import (
    BackendUnavailableError,
    ContextLimitError,
    EmptyPromptError,
    Engine,
    GenerationEvent,
    InvalidSamplingParamsError,
    PromptTooLongError,
    SamplingParams,
    TokenIdError,
)
from bw24.engine.ops import RefOps, get_ops

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def eng():
    return Engine.load("smollm2-135m", backend="cpu", progress=False)


@pytest.fixture(scope="module")
def prompt(eng):
    return eng.tokenizer.encode("The three primary colors are", add_special=True)


def gen(eng, ids, **kw) -> list[GenerationEvent]:
    return list(eng.generate(ids, **kw))


def test_logits_shape_and_batched_equals_decode(eng, prompt):
    a = eng.logits(prompt)
    assert a.dtype == np.float32 and a.shape == (len(prompt), eng.config.n_vocab)
    b = eng.decode_logits(prompt)
    np.testing.assert_allclose(a, b, atol=eng.ops.verify_tolerance)
    assert eng.n_ctx == 4096 and eng.config.arch == "llama"


def test_greedy_generate_is_argmax_chain_and_streams_text(eng, prompt):
    evs = gen(eng, prompt, max_tokens=12)
    toks = [e.token_id for e in evs]
    assert len(evs) == 12 and evs[-1].finish_reason == "length"
    assert all(e.finish_reason is None for e in evs[:-1])
    logits = eng.logits(prompt + toks[:-1])  # teacher-forced: each token is the argmax after its prefix
    assert toks == [int(i) for i in logits[len(prompt) - 1 :].argmax(-1)]
    assert "".join(e.text for e in evs) == eng.tokenizer.decode(toks)
    st = eng.last_stats
    assert st.n_prompt == len(prompt) and st.n_generated == 12 and st.decode_tok_s > 0


def test_chat_stops_at_end_of_turn(eng):
    evs = gen(eng, eng.chat_ids(QUESTION), max_tokens=48)
    assert evs[-1].finish_reason == "stop" and evs[-1].token_id in eng.tokenizer.eot_ids | {eng.tokenizer.eos_id}
    text = "".join(e.text for e in evs)
    assert "Paris" in text and "<|im_end|>" not in text
    assert eng.chat(QUESTION, max_tokens=48) == text


def test_stop_string_truncates(eng, prompt):
    full = "".join(e.text for e in gen(eng, prompt, max_tokens=16))
    stop = full[len(full) // 2 : len(full) // 2 + 3]
    assert stop.strip(), full
    evs = gen(eng, prompt, max_tokens=16, stop=["@@never@@", stop])
    assert evs[-1].finish_reason == "stop"
    assert "".join(e.text for e in evs) == full[: full.index(stop)]


def test_seeded_sampling_reproducible(eng, prompt):
    kw = dict(max_tokens=10, temperature=0.9, top_p=0.95, seed=1234)
    a = [e.token_id for e in gen(eng, prompt, **kw)]
    b = [e.token_id for e in gen(eng, prompt, **kw)]
    c = [e.token_id for e in gen(eng, prompt, **{**kw, "seed": 99})]
    d = [e.token_id for e in gen(eng, prompt, **{**kw, "temperature": 1e-3, "seed": 5})]
    assert eng.last_stats.extra["seed"] == 5
    assert a == b and a != c
    assert d == [e.token_id for e in gen(eng, prompt, max_tokens=10)]  # T -> 0 approaches greedy
    p = SamplingParams(temperature=1.0, seed=None)
    assert p.resolved().seed is not None and p.resolved().seed != p.resolved().seed


def test_penalties_change_output(eng, prompt):
    base = [e.token_id for e in gen(eng, prompt, max_tokens=24)]
    pen = [e.token_id for e in gen(eng, prompt, max_tokens=24, repetition_penalty=1.8, frequency_penalty=1.0)]
    assert pen != base
    counts = {t: pen.count(t) for t in pen}
    assert max(counts.values()) <= max(base.count(t) for t in base)


def test_logprobs(eng, prompt):
    evs = gen(eng, prompt, max_tokens=3, top_logprobs=3)
    for e in evs:
        assert e.top_logprobs[0][0] == e.token_id and e.logprob == pytest.approx(e.top_logprobs[0][1])
        assert e.logprob <= 0 and [lp for _, lp in e.top_logprobs] == sorted((lp for _, lp in e.top_logprobs),
                                                                              reverse=True)


def test_bad_input(eng, prompt):
    with pytest.raises(EmptyPromptError):
        eng.generate([], max_tokens=4)
    with pytest.raises(EmptyPromptError):
        eng.logits([])
    with pytest.raises(InvalidSamplingParamsError, match="max_tokens"):
        eng.generate(prompt, max_tokens=0)
    with pytest.raises(InvalidSamplingParamsError, match="temperature"):
        eng.generate(prompt, temperature=-0.5)
    with pytest.raises(TokenIdError):
        eng.generate([1, eng.config.n_vocab], max_tokens=2)
    with pytest.raises(PromptTooLongError, match="n_ctx=4096"):
        eng.logits([1] * 4097)
    with pytest.raises(BackendUnavailableError, match="unknown backend"):
        get_ops("tpu")


def test_context_limit(eng):
    small = Engine(type(eng.model)(eng.gguf, eng.config, RefOps(), n_ctx=16), eng.tokenizer, eng.gguf, eng.path,
                   eng.ops)
    ids = list(range(100, 110))
    evs = gen(small, ids, max_tokens=100)  # 10 prompt tokens + 6 fed back fill n_ctx=16
    assert len(evs) == 7 and evs[-1].finish_reason == "length"
    with pytest.raises(PromptTooLongError):
        small.generate(list(range(100, 117)), max_tokens=1)
    small.model.kv.reset()
    small.model.feed(list(range(16)))
    with pytest.raises(ContextLimitError, match="context limit"):
        small.model.feed([1])


def test_auto_backend_without_gpu_is_cpu():
    from bw24.runtime import has_gpu

    ops = get_ops("auto")
    if has_gpu():  # auto falls back to cpu only when the cuda backend cannot be built
        try:
            cuda = get_ops("cuda")
        except BackendUnavailableError:
            assert isinstance(ops, RefOps)
        else:
            assert type(ops) is type(cuda)
    else:
        assert isinstance(ops, RefOps)
        with pytest.raises(BackendUnavailableError, match="cuda"):
            get_ops("cuda")


def test_chat_fallback_template_for_gemma3():
    """gemma-3-270m's GGUF has no chat template: the engine uses Gemma's turn format."""
    from bw24.engine.chat_fallback import fallback_template
    from bw24.gguf import GGUFFile, resolve_model
    from bw24.tokenizer import Tokenizer

    tok = Tokenizer.from_gguf(GGUFFile(resolve_model("gemma3-270m")))
    assert not tok.chat_template
    text = fallback_template("gemma3", tok).render(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi "},
         {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}])
    assert text == ("<bos><start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
                    "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n")
    ids = tok.encode(text, add_special=False, parse_special=True)
    assert ids[0] == tok.bos_id and 106 in tok.eot_ids and ids.count(106) == 3  # <end_of_turn> ends a turn
