"""Typed errors of the engine. Bad input is also a ValueError so callers may catch broadly.

GGUF-level problems (unknown alias, corrupt file, unsupported arch or quant type) are raised as the
bw24.gguf errors themselves; the CLI maps both families to exit code 2.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base of every bw24.engine error."""


class BadInputError(EngineError, ValueError):
    """A request the engine cannot serve as given."""


class EmptyPromptError(BadInputError):
    """The prompt has no tokens."""


class ContextLimitError(BadInputError):
    """The tokens do not fit the context window (n_ctx)."""


class PromptTooLongError(ContextLimitError):
    """The prompt alone fills the context: no room to generate a token."""


class InvalidSamplingParamsError(BadInputError):
    """A sampling parameter out of range (negative temperature, top_p > 1, max_tokens <= 0, ...)."""


class TokenIdError(BadInputError):
    """A token id outside [0, n_vocab)."""


class UnsupportedModelError(BadInputError):
    """A model the engine has no forward for (architecture, feature or tensor layout)."""


class StaleCacheError(EngineError):
    """A generation was asked to keep KV positions the cache no longer holds for its prompt."""


class BackendUnavailableError(EngineError):
    """The requested op backend cannot run here (e.g. 'cuda' without a GPU)."""
