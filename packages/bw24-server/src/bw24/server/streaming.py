"""Turning a job's events into OpenAI responses: SSE chunks (stream=true) or one JSON body.

SSE order for chat: a first delta carrying the role, content deltas (Python str: always valid
UTF-8 once encoded; the engine's detokenizer only releases complete characters), a final chunk
with finish_reason, an optional usage chunk with empty choices, then `data: [DONE]`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from .worker import Failed, Finished, Job, Started, Token


@dataclass
class Reply:
    """What one request asked for in its response, and what the engine produced."""

    kind: str                    # "chat" | "completion"
    id: str
    model: str
    created: int
    tokenizer: Any
    logprobs: bool = False
    top_logprobs: int = 0
    include_usage: bool = False
    fingerprint: str | None = None
    text: str = ""
    entries: list[dict] = field(default_factory=list)   # chat-format logprob entries
    finished: Finished | None = None

    def started(self, ev: Started) -> None:
        """A speculatively served job says so in system_fingerprint: `bw24-<backend>+spec-<drafter>`."""
        if ev.drafter and self.fingerprint:
            self.fingerprint = f"{self.fingerprint}+spec-{ev.drafter}"

    # ---- logprobs ----

    def _piece(self, token_id: int) -> bytes:
        return bytes(self.tokenizer.token_to_piece(token_id))

    def entry(self, ev: Token) -> dict:
        piece = self._piece(ev.token_id)
        top = [{"token": self._piece(i).decode("utf-8", "replace"), "logprob": lp,
                "bytes": list(self._piece(i))} for i, lp in ev.top_logprobs[: self.top_logprobs]]
        return {"token": piece.decode("utf-8", "replace"), "logprob": ev.logprob if ev.logprob is not None else 0.0,
                "bytes": list(piece), "top_logprobs": top}

    def completion_logprobs(self, entries: list[dict], offset: int) -> dict:
        offsets = []
        for e in entries:
            offsets.append(offset)
            offset += len(e["token"])
        return {"tokens": [e["token"] for e in entries], "token_logprobs": [e["logprob"] for e in entries],
                "top_logprobs": [{t["token"]: t["logprob"] for t in e["top_logprobs"]} for e in entries],
                "text_offset": offsets}

    # ---- bodies ----

    def usage(self) -> dict:
        f = self.finished
        return {"prompt_tokens": f.prompt_tokens, "completion_tokens": f.completion_tokens,
                "total_tokens": f.prompt_tokens + f.completion_tokens,
                "prompt_tokens_details": {"cached_tokens": f.cached_tokens}}

    def _head(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model,
                "system_fingerprint": self.fingerprint}

    def body(self) -> dict:
        """The non-streaming response."""
        f = self.finished
        if self.kind == "chat":
            lp = {"content": self.entries} if self.logprobs else None
            choice = {"index": 0, "message": {"role": "assistant", "content": self.text},
                      "logprobs": lp, "finish_reason": f.finish_reason}
            return {**self._head("chat.completion"), "choices": [choice], "usage": self.usage()}
        lp = self.completion_logprobs(self.entries, 0) if self.logprobs else None
        choice = {"index": 0, "text": self.text, "logprobs": lp, "finish_reason": f.finish_reason}
        return {**self._head("text_completion"), "choices": [choice], "usage": self.usage()}

    def chunk(self, text: str | None, entries: list[dict], finish: str | None, role: bool = False) -> dict:
        if self.kind == "chat":
            delta: dict = {"role": "assistant"} if role else {}
            if text is not None:
                delta["content"] = text
            lp = {"content": entries} if self.logprobs and entries else None
            choice = {"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}
            return {**self._head("chat.completion.chunk"), "choices": [choice]}
        lp = self.completion_logprobs(entries, len(self.text) - len(text or "")) if self.logprobs else None
        choice = {"index": 0, "text": text or "", "logprobs": lp, "finish_reason": finish}
        return {**self._head("text_completion"), "choices": [choice]}

    def usage_chunk(self) -> dict:
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {**self._head(obj), "choices": [], "usage": self.usage()}


def sse(obj: dict | str) -> str:
    data = obj if isinstance(obj, str) else json.dumps(obj, separators=(",", ":"))
    return f"data: {data}\n\n"


async def collect(job: Job, reply: Reply) -> Reply:
    """Drain a job into reply (non-streaming). Raises the job's APIError if it failed."""
    while True:
        ev = await job.events.get()
        if isinstance(ev, Failed):
            raise ev.error
        if isinstance(ev, Started):
            reply.started(ev)
        elif isinstance(ev, Token):
            reply.text += ev.text
            if reply.logprobs:
                reply.entries.append(reply.entry(ev))
        elif isinstance(ev, Finished):
            reply.finished = ev
            return reply


async def stream(job: Job, reply: Reply, first: Started) -> AsyncIterator[str]:
    """SSE lines for one job whose Started event was already received."""
    reply.started(first)
    try:
        if reply.kind == "chat":
            yield sse(reply.chunk("", [], None, role=True))
        pending: list[dict] = []   # logprobs of tokens whose text the engine still holds back
        while True:
            ev = await job.events.get()
            if isinstance(ev, Failed):
                yield sse(ev.error.body())
                break
            if isinstance(ev, Token):
                if reply.logprobs:
                    pending.append(reply.entry(ev))
                if ev.text:
                    reply.text += ev.text
                    yield sse(reply.chunk(ev.text, pending, None))
                    pending = []
            elif isinstance(ev, Finished):
                reply.finished = ev
                if pending:
                    yield sse(reply.chunk("", pending, None))
                yield sse(reply.chunk(None, [], ev.finish_reason))
                if reply.include_usage:
                    yield sse(reply.usage_chunk())
                break
        yield sse("[DONE]")
    finally:
        job.cancel()  # no-op when finished; frees the engine when the client went away
