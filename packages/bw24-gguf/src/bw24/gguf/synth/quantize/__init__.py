"""Random, well-formed quantized blocks and the per-tensor quant mixes of llama.cpp."""

from .blocks import BLOCK_WRITERS, random_tensor_bytes
from .mix import MIXES, FileType, tensor_qtype

__all__ = ["BLOCK_WRITERS", "MIXES", "FileType", "random_tensor_bytes", "tensor_qtype"]
