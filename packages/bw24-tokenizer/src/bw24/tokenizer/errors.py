"""Typed errors of bw24.tokenizer (all subclass ValueError, so bad input reads as bad input)."""

from __future__ import annotations


class TokenizerError(ValueError):
    """Base class of every tokenizer error."""


class TokenizerLoadError(TokenizerError):
    """The GGUF's tokenizer metadata is missing, malformed or of an unsupported kind."""


class TokenIdError(TokenizerError):
    """A token id outside [0, n_vocab)."""


class ChatTemplateError(TokenizerError):
    """No chat template, a template that fails to render, or raise_exception() from a template."""
