"""Speculative generation as the engine's event stream (what run-gen and the server consume): the same
GenerationEvent / GenerationStats as Engine.generate, stop strings and EOS/EOT handled the same way.

Server use (one request at a time): build the drafter once per engine (spec.options.make_drafter;
bw24-server does this), then per request
    events = speculative_generate(engine, drafter, ids, params, max_tokens=..., stop=[...], k=4, adaptive=True)
and fall back to engine.generate(...) while more than one request is active. logprobs are not
produced by this path: a request asking for them must take engine.generate.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from ..errors import BadInputError
from ..generate import GenerationEvent, GenerationStats, StopMatcher, check_request, step_text
from ..sampling import SamplingParams
from .runner import SpecDecoder


def speculative_generate(engine, drafter, ids: Sequence[int], params: SamplingParams | None = None, *,
                         max_tokens: int = 32, stop: Sequence[str] | str | None = None, k: int = 4,
                         adaptive: bool = True, verify: str = "auto", logprobs: bool = False,
                         top_logprobs: int = 0) -> Iterator[GenerationEvent]:
    """Validated before the first event; engine.last_stats is filled as tokens stream (acceptance,
    tokens/round and the verify mode in stats.extra)."""
    if logprobs or top_logprobs:
        raise BadInputError("logprobs are not available with speculative decoding; use engine.generate")
    from bw24.tokenizer import IncrementalDetokenizer

    ids = list(ids)
    check_request(engine.model, ids, max_tokens)
    engine.model.check_ids(ids)
    params = (params or SamplingParams()).resolved()
    dec = SpecDecoder(engine.model, drafter, k=k, adaptive=adaptive, verify=verify)
    st = GenerationStats()
    engine.last_stats = st
    stops = [stop] if isinstance(stop, str) else list(stop or ())
    tok = engine.tokenizer
    end_ids = set(tok.eot_ids) | ({tok.eos_id} if tok.eos_id is not None else set())
    return _events(engine, dec, ids, params, max_tokens, stops, end_ids, st, IncrementalDetokenizer(tok))


def _events(engine, dec, ids, params, max_tokens, stops, end_ids, st, det) -> Iterator[GenerationEvent]:
    matcher = StopMatcher(stops)
    n = 0
    for t in dec.generate(ids, max_tokens, params, stop_ids=end_ids):
        n += 1
        s = dec.stats
        st.n_prompt, st.n_generated, st.prefill_s, st.decode_s = s.n_prompt, n, s.prefill_s, s.decode_s
        st.extra.update(seed=params.seed, acceptance=s.acceptance, tokens_per_round=s.tokens_per_round,
                        drafted=s.drafted, accepted=s.accepted, verify=dec.verifier.mode, drafter=dec.drafter.name)
        finish, text = step_text(t, end_ids, matcher, det, n >= max_tokens or len(ids) + n >= engine.n_ctx)
        if finish:
            st.finish_reason = finish
        yield GenerationEvent(t, text, None, None, finish)
        if finish:
            return
