"""Multi-turn chat reuses the KV of the common prefix and reports it as cached prompt tokens."""

from __future__ import annotations

from bw24.engine.kv_cache import common_prefix

MODEL = "smollm2-135m"


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([1, 2], [1, 2]) == 2
    assert common_prefix([9], [1, 9]) == 0


def test_second_turn_reuses_prefix_and_output_is_unchanged(client, engine):
    turn1 = [{"role": "system", "content": "You are a terse assistant."},
             {"role": "user", "content": "Name a colour."}]
    r1 = client.chat.completions.create(model=MODEL, messages=turn1, max_tokens=4, temperature=0)
    ids1 = engine.chat_ids(turn1)
    gen1 = [ev.token_id for ev in engine.generate(ids1, max_tokens=4, temperature=0.0)]
    turn2 = turn1 + [{"role": "assistant", "content": r1.choices[0].message.content},
                     {"role": "user", "content": "Another one."}]
    r2 = client.chat.completions.create(model=MODEL, messages=turn2, max_tokens=4, temperature=0)
    ids2 = engine.chat_ids(turn2)
    # The KV held after turn 1: its prompt and every generated token but the last (never fed).
    expected = min(common_prefix(ids1 + gen1[:-1], ids2), len(ids2) - 1)
    assert expected >= len(ids1)   # turn 1 renders as a prefix of turn 2 (sanity of the oracle)
    assert r2.usage.prompt_tokens_details.cached_tokens == expected > 0
    assert r2.usage.prompt_tokens == len(ids2)
    # Reusing the KV does not change what the model says (fresh-context engine output).
    assert r2.choices[0].message.content == engine.chat(turn2, max_tokens=4, temperature=0.0)
    # An unrelated prompt shares (almost) nothing.
    r3 = client.completions.create(model=MODEL, prompt="Zebras", max_tokens=1, temperature=0)
    assert r3.usage.prompt_tokens_details.cached_tokens <= 1
