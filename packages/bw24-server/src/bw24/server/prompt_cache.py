"""Prompt cache: a request reuses the KV of its longest common token prefix with what the engine's
KV cache holds from the previous request (multi-turn chat re-sends the whole conversation).

The engine owns the KV. The hook it should offer (requested from the engine engineer):
    Engine.cached_prefix(ids) -> int              # tokens of ids whose KV would be reused
    Engine.generate(ids, ..., reuse_prefix=True)  # keep that KV, prefill only the rest
When the engine has it, it is used. Until then, _Resume bridges the engine's generation loop:
its kv.reset() keeps the first n_keep positions and its feed() skips them; everything else is
the engine's own code (bw24.engine.generate.generate), so outputs are the engine's.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from typing import Any


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class PromptCache:
    """Used only from the engine worker thread (nothing else may touch the engine's KV)."""

    def __init__(self, engine: Any):
        self.engine = engine
        self.native = hasattr(engine, "cached_prefix") and \
            "reuse_prefix" in inspect.signature(engine.generate).parameters
        self.kv_ids: list[int] = []   # tokens whose KV the engine holds (bridge mode)

    def generate(self, ids: list[int], kwargs: dict[str, Any]) -> tuple[int, Iterator[Any]]:
        """(number of prompt tokens served from cache, the engine's event iterator)."""
        if self.native:
            cached = int(self.engine.cached_prefix(ids))
            return cached, self.engine.generate(ids, reuse_prefix=True, **kwargs)
        kv = self.engine.model.kv
        # At least the last prompt token is fed again: its logits start the generation.
        n_keep = min(common_prefix(self.kv_ids, ids), len(ids) - 1)
        if kv.n_past != len(self.kv_ids):  # someone else used the engine: trust nothing
            n_keep = 0
        self.kv_ids = []  # until the new generation has run, the KV content is unknown
        events = self._bridge(ids, n_keep, kwargs)
        return n_keep, self._track(ids, events)

    def _track(self, ids: list[int], events: Iterator[Any]) -> Iterator[Any]:
        # Every yielded token but the newest has been fed into the KV (the engine feeds a token
        # in the decode step after yielding it), whether the consumer stops early or not.
        out: list[int] = []
        try:
            for ev in events:
                out.append(ev.token_id)
                yield ev
        finally:
            if hasattr(events, "close"):
                events.close()
            self.kv_ids = list(ids) + out[:-1]

    def _bridge(self, ids: list[int], n_keep: int, kw: dict[str, Any]) -> Iterator[Any]:
        from bw24.engine.generate import generate
        from bw24.engine.sampling import SamplingParams
        from bw24.tokenizer import IncrementalDetokenizer

        eng = self.engine
        params = SamplingParams(temperature=kw["temperature"], top_k=kw["top_k"], top_p=kw["top_p"],
                                min_p=kw["min_p"], presence_penalty=kw["presence_penalty"],
                                frequency_penalty=kw["frequency_penalty"], seed=kw["seed"])
        eng.model.check_ids(ids)
        model = _Resume(eng.model, n_keep)
        return generate(model, eng.tokenizer, IncrementalDetokenizer(eng.tokenizer), ids, params,
                        max_tokens=kw["max_tokens"], stop=kw["stop"], logprobs=kw["logprobs"],
                        top_logprobs=kw["top_logprobs"], stats=eng.last_stats)


class _ResumeKV:
    """The engine's KVCache, except that a full reset keeps the first n_keep positions."""

    def __init__(self, kv: Any, n_keep: int):
        self._kv, self._n_keep = kv, n_keep

    def reset(self, n_past: int = 0) -> None:
        self._kv.reset(n_past or self._n_keep)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._kv, name)


class _Resume:
    """The engine's model, except that feed() skips the n_keep prompt tokens already in the KV."""

    def __init__(self, model: Any, n_keep: int):
        self._model, self._n_keep = model, n_keep
        self.kv = _ResumeKV(model.kv, n_keep)

    def feed(self, ids: Sequence[int], all_logits: bool = False) -> Any:
        return self._model.feed(list(ids)[self._n_keep:], all_logits)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)
