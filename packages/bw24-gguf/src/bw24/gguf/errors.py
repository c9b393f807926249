"""Typed errors of the GGUF layer. Every one is a ValueError so callers may catch broadly."""

from __future__ import annotations


class GGUFError(ValueError):
    """Base of every bw24.gguf error."""


class NotGGUFError(GGUFError):
    """The file does not start with the GGUF magic (or is empty)."""


class TruncatedGGUFError(GGUFError):
    """The file ends before its header or some tensor's data does."""


class UnknownQuantTypeError(GGUFError):
    """A tensor uses a ggml type id this gguf package does not know."""


class UnsupportedQuantTypeError(UnknownQuantTypeError):
    """The type is known, but gguf.quants has no reference dequantization for it."""


class MissingTensorError(GGUFError, KeyError):
    """A tensor name that the file does not contain."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class UnsupportedArchitectureError(GGUFError):
    """general.architecture is not one ModelConfig knows."""


class ModelNotFoundError(GGUFError):
    """resolve_model could not find the model (with a hint how to get it)."""
