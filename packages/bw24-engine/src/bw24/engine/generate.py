"""The generation loop: prefill, then one replayable decode step per token, streamed as events.

The step (forward of the last token + sampling into the token buffer) touches only preallocated
backend buffers, so ops.capture() may turn it into one CUDA graph; the host reads the 4-byte token
(and the logits only when logprobs are asked for) after each step.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from .errors import (
    BadInputError,
    EmptyPromptError,
    InvalidSamplingParamsError,
    PromptTooLongError,
    StaleCacheError,
)
from .graph import StepQueue, decode_lag, decode_step
from .kv_cache import KVHistory
from .models.common import Transformer
from .sampling import SamplingParams, log_softmax


@dataclass(frozen=True)
class GenerationEvent:
    token_id: int
    text: str  # UTF-8-safe delta: only complete characters, stop strings and what follows removed
    logprob: float | None = None  # log p(token) under the raw model distribution (when asked for)
    top_logprobs: tuple[tuple[int, float], ...] | None = None  # (token id, logprob), best first
    finish_reason: str | None = None  # None while streaming; "stop" (EOS/EOT, stop string) or "length"


@dataclass
class GenerationStats:
    n_prompt: int = 0
    n_generated: int = 0
    cached_tokens: int = 0  # prompt tokens whose KV was kept from the previous generation (not fed)
    prefill_s: float = 0.0  # the prompt's forward passes
    decode_s: float = 0.0  # from the end of the prefill to the last token: n_generated samples, n - 1 steps
    finish_reason: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def prefill_tok_s(self) -> float:
        fed = self.n_prompt - self.cached_tokens
        return fed / self.prefill_s if self.prefill_s > 0 else float("nan")

    @property
    def decode_tok_s(self) -> float:
        return self.n_generated / self.decode_s if self.decode_s > 0 else float("nan")


class StopMatcher:
    """Streams text, holding back any tail that could still become a stop string."""

    def __init__(self, stops: Sequence[str]):
        self.stops = [s for s in stops if s]
        self.pending = ""

    def push(self, text: str) -> tuple[str, bool]:
        """(text safe to emit, whether a stop string was completed: then emit nothing after it)."""
        self.pending += text
        hits = [i for i in (self.pending.find(s) for s in self.stops) if i >= 0]
        if hits:
            out, self.pending = self.pending[: min(hits)], ""
            return out, True
        hold = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(self.pending)), hold, -1):
                if self.pending.endswith(s[:n]):
                    hold = n
                    break
        cut = len(self.pending) - hold
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out, False

    def flush(self, text: str = "") -> str:
        out, hit = self.push(text)
        if not hit:
            out, self.pending = out + self.pending, ""
        return out


def step_text(tok: int, end_ids, matcher: StopMatcher, detokenizer, at_limit: bool) -> tuple[str | None, str]:
    """(finish_reason, text delta) for one emitted token: an end-of-generation token flushes and stops,
    a stop string stops, reaching max_tokens or the context stops with "length". Shared by plain and
    speculative generation so both stream the same events."""
    if tok in end_ids:
        return "stop", matcher.flush(detokenizer.flush())
    text, hit = matcher.push(detokenizer.add(tok))
    if hit:
        return "stop", text
    if at_limit:
        return "length", text + matcher.flush(detokenizer.flush())
    return None, text


def check_request(model: Transformer, prompt: Sequence[int], max_tokens: int, n_keep: int = 0) -> None:
    if len(prompt) == 0:
        raise EmptyPromptError("empty prompt: at least one token is needed")
    if max_tokens <= 0:
        raise InvalidSamplingParamsError(f"max_tokens={max_tokens} (must be > 0)")
    if len(prompt) > model.kv.n_ctx:
        raise PromptTooLongError(f"prompt of {len(prompt)} tokens is longer than the context (n_ctx={model.kv.n_ctx})")
    if not 0 <= n_keep < len(prompt):  # the last prompt token is always fed: its logits start generation
        raise BadInputError(f"n_keep={n_keep} (must be in [0, {len(prompt) - 1}] for a {len(prompt)}-token prompt)")


def generate(
    model: Transformer, tokenizer, detokenizer, prompt: Sequence[int], params: SamplingParams, *,
    max_tokens: int, stop: Sequence[str] = (), logprobs: bool = False, top_logprobs: int = 0,
    stats: GenerationStats | None = None, n_keep: int = 0, history: KVHistory | None = None,
) -> Iterator[GenerationEvent]:
    """Generate after the first n_keep cached positions (0: a fresh context), feeding only
    prompt[n_keep:]: the caller vouches that those positions hold prompt[:n_keep] (when `history`
    is given it is checked against it, and kept equal to the tokens the KV holds: the prompt, then
    each generated token once a decode step has fed it). Stops on the tokenizer's EOS/EOT ids, on a
    stop string, after max_tokens, or when the context is full (finish_reason "length")."""
    check_request(model, prompt, max_tokens, n_keep)
    params = params.resolved()
    ops, kv, buf = model.ops, model.kv, model.buf
    st = stats if stats is not None else GenerationStats()
    st.n_prompt, st.cached_tokens, st.extra["seed"] = len(prompt), n_keep, params.seed
    end_ids = set(tokenizer.eot_ids) | ({tokenizer.eos_id} if tokenizer.eos_id is not None else set())
    want_lp = logprobs or top_logprobs > 0

    counts = None
    if params.has_penalties:  # occurrences of each token in the context, updated by ops.sample
        counts = ops.zeros((model.cfg.n_vocab,), np.int32)
        ops.copy_from_host(counts, np.bincount(np.asarray(prompt), minlength=model.cfg.n_vocab).astype(np.int32))
    token, row = buf.view(1).ids, buf.logits[0]

    if history is not None and history.reusable(kv, prompt) < n_keep:  # KV changed since n_keep was chosen
        raise StaleCacheError(f"n_keep={n_keep}: the KV cache holds only {history.reusable(kv, prompt)} "
                              "positions of this prompt")
    t0 = time.perf_counter()
    kv.reset(n_keep)  # host n_past and the backend pos array both set to n_keep
    if history is not None:
        history.ids, history.epoch = list(prompt[:n_keep]), kv.epoch
    model.feed(prompt[n_keep:])  # logits of the last prompt token land in buf.logits[0]
    if history is not None:
        history.ids = list(prompt)
    mine = kv.epoch  # a later generation's reset makes this (abandoned) generator stop recording
    t1 = time.perf_counter()
    st.prefill_s = t1 - t0
    ops.sample(row, params, kv.pos, out=token, counts=counts)

    # (keys: BW24_ATTN_DEPTH's class, the cache's keys after reserve)
    decode = ops.capture(decode_step(model, params, counts), keys=lambda: kv.n_past)
    # Step n + 1 is queued before the host waits for token n when it may follow (graph.decode_lag): a token that
    # then ends the generation leaves one step too many, undone by drop_queued_step. With logprobs the host reads
    # the logits row before the step that overwrites it, so it waits for each token.
    lag = 0 if want_lp else decode_lag()
    q = StepQueue(model, decode)
    q.read()  # the prompt's sample
    matcher = StopMatcher(stop)
    n = 0
    while True:
        lp = top = None
        past = kv.n_past  # the positions cached before this token is fed
        last = n + 1 >= max_tokens or past >= kv.n_ctx  # this token ends the generation whatever it is
        if lag and not last:
            q.push()  # feeds this token, samples the next
        if want_lp:
            lps = log_softmax(ops.to_host(row))
        tok = q.pop()
        n += 1
        if want_lp:
            lp = float(lps[tok])
            if top_logprobs > 0:
                best = np.argsort(-lps, kind="stable")[:top_logprobs]
                top = tuple((int(i), float(lps[i])) for i in best)
        finish, text = step_text(tok, end_ids, matcher, detokenizer, last)
        ahead = kv.n_past > past  # the step that feeds this token is queued
        if finish:
            if ahead:  # a step queued past the end
                mine = drop_queued_step(kv, past, history, mine)
            st.n_generated, st.decode_s, st.finish_reason = n, time.perf_counter() - t1, finish
        elif ahead and history is not None and kv.epoch == mine:
            history.ids.append(tok)
        yield GenerationEvent(tok, text, lp, top, finish)
        if finish:
            return
        if not ahead:  # lag 0 (or logprobs): feed this token now, as the consumer asks for the next
            q.push()
            if history is not None and kv.epoch == mine:
                history.ids.append(tok)


def drop_queued_step(kv, past: int, history: KVHistory | None, mine: int) -> int:
    """Undo the step queued after the generation's last token (it fed that token and sampled one more): the
    cache back to `past` positions, and the history record, if still this generation's, moved to the new epoch.
    Returns the generation's epoch."""
    own = history is not None and kv.epoch == mine
    kv.reset(past)
    if own:
        history.epoch = kv.epoch
    return kv.epoch
