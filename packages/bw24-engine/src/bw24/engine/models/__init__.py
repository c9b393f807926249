"""One forward per general.architecture, all over the same ops interface."""

from __future__ import annotations

from ..errors import UnsupportedModelError
from .common import Transformer
from .gemma3 import Gemma3
from .llama import Llama
from .qwen2 import Qwen2
from .qwen3 import Qwen3
from .qwen3moe import Qwen3Moe

MODELS: dict[str, type[Transformer]] = {m.arch: m for m in (Llama, Qwen2, Qwen3, Qwen3Moe, Gemma3)}


def model_class(arch: str) -> type[Transformer]:
    try:
        return MODELS[arch]
    except KeyError:
        raise UnsupportedModelError(
            f"no forward for architecture {arch!r}; supported: {', '.join(MODELS)}"
        ) from None


__all__ = ["MODELS", "Transformer", "model_class"]
