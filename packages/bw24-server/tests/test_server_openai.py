"""The official openai client against a real bw24-server (CPU, smollm2-135m).

Oracles: the engine itself (Engine.generate / Engine.chat in this process), the tokenizer's own
counts, and the model's logits (log-softmax computed here) for logprobs.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

MODEL = "smollm2-135m"

PROMPT = "The capital of France is"
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def greedy_text(engine, ids, n, **kw):
    return "".join(ev.text for ev in engine.generate(ids, max_tokens=n, temperature=0.0, **kw))


def test_models_list(client):
    ids = [m.id for m in client.models.list().data]
    assert ids == [MODEL]


def test_chat_greedy_equals_engine_and_counts(client, engine):
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=6, temperature=0)
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-") and r.model == MODEL
    c = r.choices[0]
    ids = engine.chat_ids(MESSAGES)   # Engine.chat(MESSAGES) == generate(chat_ids(MESSAGES))
    evs = list(engine.generate(ids, max_tokens=6, temperature=0.0))
    assert c.message.role == "assistant"
    assert c.message.content == "".join(ev.text for ev in evs)
    assert r.usage.prompt_tokens == len(ids)
    assert r.usage.completion_tokens == len(evs)
    assert c.finish_reason == evs[-1].finish_reason == ("length" if len(evs) == 6 else "stop")
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_completion_token_prompt_greedy_equals_engine(client, engine):
    ids = engine.tokenizer.encode(PROMPT)
    r = client.completions.create(model=MODEL, prompt=ids, max_tokens=5, temperature=0)
    assert r.choices[0].text == greedy_text(engine, ids, 5)
    assert r.choices[0].finish_reason == "length"            # max_tokens -> length
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(ids), 5)


def test_completion_string_prompt_counts(client, engine):
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=3, temperature=0)
    assert r.object == "text_completion"
    assert r.usage.prompt_tokens == len(engine.tokenizer.encode(PROMPT))
    assert r.usage.completion_tokens == 3


def test_stop_string_cuts_text(client, engine):
    ids = engine.tokenizer.encode(PROMPT)
    ref = greedy_text(engine, ids, 8)
    stop = ref.strip().split()[1] if len(ref.split()) > 1 else ref.strip()[-2:]
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0, stop=[stop, "\n\n\n"])
    assert stop in ref
    assert r.choices[0].text == ref[: ref.index(stop)]
    assert r.choices[0].finish_reason == "stop"


def test_streaming_chat_matches_non_streaming(client):
    kw = dict(model=MODEL, messages=MESSAGES, max_tokens=6, temperature=0)
    full = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.id == chunks[0].id for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [full.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == full.usage.prompt_tokens


def test_streaming_completion_matches_non_streaming(client):
    kw = dict(model=MODEL, prompt=PROMPT, max_tokens=5, temperature=0)
    full = client.completions.create(**kw)
    chunks = list(client.completions.create(**kw, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == full.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(c.usage is None for c in chunks)   # no include_usage: no usage chunk


def test_sse_framing_and_utf8(http):
    # Raw bytes: every event is `data: <json>`, valid UTF-8, and the stream ends with [DONE].
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Écris « café » en chinois: 咖啡"}],
            "max_tokens": 6, "temperature": 0, "stream": True}
    with http.stream("POST", "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        raw = r.read()
    events = [e for e in raw.decode("utf-8", errors="strict").split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    first = json.loads(events[0][6:])
    assert first["choices"][0]["delta"]["role"] == "assistant"
    last = json.loads(events[-2][6:])
    assert last["choices"][0]["finish_reason"] in ("stop", "length")


def test_seed_reproducible_and_equal_to_engine(client, engine):
    kw = dict(model=MODEL, prompt=PROMPT, max_tokens=4, temperature=1.3, top_p=0.95)
    a = client.completions.create(**kw, seed=1234).choices[0].text
    b = client.completions.create(**kw, seed=1234).choices[0].text
    c = client.completions.create(**kw, seed=99).choices[0].text
    ref = "".join(ev.text for ev in engine.generate(engine.tokenizer.encode(PROMPT), max_tokens=4,
                                                     temperature=1.3, top_p=0.95, seed=1234))
    assert a == b == ref
    assert c != a   # a different seed draws differently (4 tokens at T=1.3)


def test_chat_logprobs_shape_and_values(client, engine):
    r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, temperature=0,
                                       logprobs=True, top_logprobs=3)
    text, content = r.choices[0].message.content, r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    assert b"".join(bytes(t.bytes) for t in content).decode() == text
    assert "".join(t.token for t in content) == text
    for t in content:
        assert len(t.top_logprobs) == 3 and t.logprob <= 0
        assert [x.logprob for x in t.top_logprobs] == sorted((x.logprob for x in t.top_logprobs), reverse=True)
        assert t.top_logprobs[0].token == t.token   # greedy picks the best
    # The first token's logprob against the model's own distribution, computed here.
    ids = engine.chat_ids(MESSAGES)
    z = engine.logits(ids)[-1].astype(np.float64)
    lse = z.max() + np.log(np.exp(z - z.max()).sum())
    first = int(np.argmax(z))
    assert content[0].bytes == list(engine.tokenizer.token_to_piece(first))
    assert content[0].logprob == pytest.approx(z[first] - lse, abs=2e-3)


def test_completion_logprobs_shape(client):
    r = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, temperature=0, logprobs=2)
    lp, text = r.choices[0].logprobs, r.choices[0].text
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert "".join(lp.tokens) == text
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(4)]
    assert all(len(d) <= 2 and max(d.values()) == pytest.approx(v) for d, v in zip(lp.top_logprobs, lp.token_logprobs, strict=True))


def test_list_of_text_parts_equals_string_content(client):
    parts = [{"role": "user", "content": [{"type": "text", "text": "What is the capital "},
                                          {"type": "text", "text": "of France?"}]}]
    a = client.chat.completions.create(model=MODEL, messages=parts, max_tokens=3, temperature=0)
    b = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=3, temperature=0)
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.usage.prompt_tokens == b.usage.prompt_tokens
