"""Reference dequantization through gguf.quants: the oracle every GPU kernel is checked against."""

from __future__ import annotations

import numpy as np

from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from .errors import GGUFError, UnknownQuantTypeError, UnsupportedQuantTypeError

# Plain element types: a straight reinterpretation of the bytes.
_PLAIN = {
    GGMLQuantizationType.F32: np.float32,
    GGMLQuantizationType.F16: np.float16,
    GGMLQuantizationType.F64: np.float64,
    GGMLQuantizationType.I8: np.int8,
    GGMLQuantizationType.I16: np.int16,
    GGMLQuantizationType.I32: np.int32,
    GGMLQuantizationType.I64: np.int64,
}


def as_qtype(qtype: int | GGMLQuantizationType) -> GGMLQuantizationType:
    try:
        return GGMLQuantizationType(int(qtype))
    except ValueError:
        raise UnknownQuantTypeError(f"unknown ggml quant type id {int(qtype)}") from None


def supported_types() -> list[GGMLQuantizationType]:
    """Every type dequantize() handles."""
    return sorted(set(_PLAIN) | set(quants._type_traits), key=int)


def tensor_nbytes(qtype: int | GGMLQuantizationType, shape: tuple[int, ...]) -> int:
    qt = as_qtype(qtype)
    block, tsize = GGML_QUANT_SIZES[qt]
    n = int(np.prod(shape, dtype=np.int64))
    if shape and shape[-1] % block:
        raise GGUFError(f"{qt.name}: row length {shape[-1]} is not a multiple of the block size {block}")
    return n // block * tsize


def dequantize(raw: np.ndarray, qtype: int | GGMLQuantizationType, shape: tuple[int, ...]) -> np.ndarray:
    """Raw tensor bytes (uint8, any shape) of type qtype -> float32 array of `shape`."""
    qt = as_qtype(qtype)
    shape = tuple(int(d) for d in shape)
    want = tensor_nbytes(qt, shape)
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    if raw.size != want:
        raise GGUFError(f"{qt.name} tensor of shape {shape} needs {want} bytes, got {raw.size}")
    if qt in _PLAIN:
        return raw.view(_PLAIN[qt]).astype(np.float32).reshape(shape)
    if qt not in quants._type_traits:
        raise UnsupportedQuantTypeError(
            f"no reference dequantization for {qt.name} (id {int(qt)}) in gguf.quants"
        )
    rows = raw.reshape(quants.quant_shape_to_byte_shape(shape or (1,), qt))
    out = quants.dequantize(rows, qt)
    return np.asarray(out, dtype=np.float32).reshape(shape)
