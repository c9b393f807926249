"""bw24.engine: one forward per architecture over two op backends (ref = NumPy, cuda), the KV cache,
sampling, generation and the CLI (bw24 run-gen, ...)."""

from .engine import Engine, VerifyResult
from .errors import (
                     BackendUnavailableError,
                     BadInputError,
                     ContextLimitError,
                     EmptyPromptError,
                     EngineError,
                     InvalidSamplingParamsError,
                     PromptTooLongError,
                     StaleCacheError,
                     TokenIdError,
                     UnsupportedModelError,
)
from .generate import GenerationEvent, GenerationStats
from .sampling import SamplingParams

__all__ = [
    "BackendUnavailableError", "BadInputError", "ContextLimitError", "EmptyPromptError", "Engine", "EngineError",
    "GenerationEvent", "GenerationStats", "InvalidSamplingParamsError", "PromptTooLongError", "SamplingParams",
    "StaleCacheError", "TokenIdError", "UnsupportedModelError", "VerifyResult",
]
