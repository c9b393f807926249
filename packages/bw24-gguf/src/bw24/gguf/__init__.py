"""bw24.gguf: GGUF reading, ModelConfig, reference dequantization, model resolution, synthetic models."""

from .config import SUPPORTED_ARCHS, ModelConfig
from .dequant import dequantize
from .errors import (
    GGUFError,
    MissingTensorError,
    ModelNotFoundError,
    NotGGUFError,
    TruncatedGGUFError,
    UnknownQuantTypeError,
    UnsupportedArchitectureError,
    UnsupportedQuantTypeError,
)
from .reader import GGUFFile, TensorInfo
from .resolve import resolve_model

__all__ = [
    "SUPPORTED_ARCHS",
    "GGUFError",
    "GGUFFile",
    "MissingTensorError",
    "ModelConfig",
    "ModelNotFoundError",
    "NotGGUFError",
    "TensorInfo",
    "TruncatedGGUFError",
    "UnknownQuantTypeError",
    "UnsupportedArchitectureError",
    "UnsupportedQuantTypeError",
    "dequantize",
    "resolve_model",
]
