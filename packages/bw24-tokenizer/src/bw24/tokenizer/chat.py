"""Chat templates: tokenizer.chat_template rendered the way HF transformers renders it.

Same jinja2 setup as transformers' chat-template utilities: an immutable sandbox (a template
cannot mutate our objects or reach attributes it should not), trim_blocks + lstrip_blocks,
loop controls, tojson with ensure_ascii=False, and the globals raise_exception and strftime_now.
A model without a template raises ChatTemplateError: bw24 does not guess a format.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Any

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .errors import ChatTemplateError

if TYPE_CHECKING:
    from .tokenizer import Tokenizer


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(f"chat template raised: {message}")


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    # HF's override: the jinja2 built-in escapes HTML characters and sorts keys.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    """A compiled chat template plus the special-token strings it may reference."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = ""):
        if not isinstance(source, str) or not source.strip():
            raise ChatTemplateError("empty chat template")
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise ChatTemplateError(f"chat template does not compile: {e} (line {e.lineno})") from e
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token

    @classmethod
    def from_tokenizer(cls, tok: Tokenizer) -> ChatTemplate:
        src = tok.chat_template
        if not src:
            raise ChatTemplateError(
                "this model's GGUF has no tokenizer.chat_template; build one explicitly with "
                "ChatTemplate(source, bos_token=..., eos_token=...)")
        bos = tok.vocab.tokens[tok.bos_id] if tok.bos_id is not None else ""
        eos = tok.vocab.tokens[tok.eos_id] if tok.eos_id is not None else ""
        return cls(src, bos_token=bos, eos_token=eos)

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
               tools: list[dict[str, Any]] | None = None, **kwargs: Any) -> str:
        _check_messages(messages)
        try:
            return self._template.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt,
                                         bos_token=self.bos_token, eos_token=self.eos_token, **kwargs)
        except ChatTemplateError:
            raise
        except (jinja2.TemplateError, TypeError, KeyError, IndexError, AttributeError) as e:
            raise ChatTemplateError(f"chat template failed to render: {type(e).__name__}: {e}") from e


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, (list, tuple)):
        raise ChatTemplateError(f"messages must be a list of dicts, got {type(messages).__name__}")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise ChatTemplateError(f"message {i} must be a dict with a 'role' key, got {m!r:.80}")
