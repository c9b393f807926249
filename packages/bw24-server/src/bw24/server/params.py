"""Validated request -> tokenized GenParams, with the checks pydantic cannot do alone
(n, context length, token id range, field combinations). Errors name the offending field.
"""

from __future__ import annotations

from typing import Any

from .errors import bad_request
from .schemas import ChatCompletionRequest, ChatMessage, CompletionRequest, SamplingFields
from .worker import GenParams


def chat_prompt_ids(engine: Any, messages: list[ChatMessage]) -> list[int]:
    """Render messages with the model's chat template (generation prompt added) and tokenize them."""
    msgs = [{"role": "system" if m.role == "developer" else m.role, "content": m.text()} for m in messages]
    return engine.chat_ids(msgs)


def _common(req: SamplingFields, prompt_ids: list[int], n_ctx: int, max_tokens: int | None,
            prompt_field: str, max_field: str) -> dict:
    if req.n is not None and req.n != 1:
        raise bad_request("Only n=1 is supported.", param="n", code="unsupported_value")
    if not prompt_ids:
        raise bad_request(f"The prompt ('{prompt_field}') is empty.", param=prompt_field)
    if len(prompt_ids) >= n_ctx:
        raise bad_request(f"The prompt ('{prompt_field}') has {len(prompt_ids)} tokens; the context holds {n_ctx} "
                          "(at least one must be left to generate).", param=prompt_field,
                          code="context_length_exceeded")
    room = n_ctx - len(prompt_ids)
    if max_tokens is None:
        max_tokens = room
    elif max_tokens > room:
        raise bad_request(f"{max_field}={max_tokens} plus the {len(prompt_ids)}-token prompt exceeds the "
                          f"{n_ctx}-token context (at most {room} can be generated).", param=max_field,
                          code="context_length_exceeded")
    temperature = 1.0 if req.temperature is None else req.temperature
    return dict(
        prompt_ids=tuple(prompt_ids), max_tokens=max_tokens, temperature=temperature,
        top_p=1.0 if req.top_p is None else req.top_p, top_k=req.top_k or 0,
        min_p=req.min_p or 0.0, seed=req.seed, stop=tuple(req.stop_list()),
        presence_penalty=req.presence_penalty or 0.0, frequency_penalty=req.frequency_penalty or 0.0,
    )


def chat_params(engine: Any, req: ChatCompletionRequest) -> GenParams:
    if req.top_logprobs is not None and not req.logprobs:
        raise bad_request("top_logprobs requires logprobs=true.", param="top_logprobs")
    ids = chat_prompt_ids(engine, req.messages)
    max_tokens, field = req.max_tokens, "max_tokens"
    if req.max_completion_tokens is not None:
        max_tokens, field = req.max_completion_tokens, "max_completion_tokens"
    kw = _common(req, ids, engine.n_ctx, max_tokens, "messages", field)
    return GenParams(**kw, logprobs=bool(req.logprobs), top_logprobs=req.top_logprobs or 0)


def completion_params(engine: Any, req: CompletionRequest) -> GenParams:
    tok = engine.tokenizer
    if isinstance(req.prompt, str):
        ids = tok.encode(req.prompt, add_special=True, parse_special=False) if req.prompt else []
    else:
        ids = list(req.prompt)
        bad = next((i for i in ids if i >= tok.n_vocab), None)
        if bad is not None:
            raise bad_request(f"Token id {bad} in 'prompt' is outside the vocabulary (n_vocab={tok.n_vocab}).",
                              param="prompt")
    kw = _common(req, ids, engine.n_ctx, req.max_tokens, "prompt", "max_tokens")
    return GenParams(**kw, logprobs=req.logprobs is not None, top_logprobs=req.logprobs or 0)
