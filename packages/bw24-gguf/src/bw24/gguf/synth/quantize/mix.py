"""Which ggml type each tensor gets, following llama.cpp's llama_tensor_get_type for the mixes."""

from __future__ import annotations

import re
from enum import IntEnum

from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as Q


class FileType(IntEnum):  # general.file_type (llama_ftype)
    ALL_F32 = 0
    MOSTLY_F16 = 1
    MOSTLY_Q4_0 = 2
    MOSTLY_Q8_0 = 7
    MOSTLY_Q4_K_M = 15


# mix name -> (base type, file type)
MIXES: dict[str, tuple[Q, FileType]] = {
    "q4_k_m": (Q.Q4_K, FileType.MOSTLY_Q4_K_M),
    "q8_0": (Q.Q8_0, FileType.MOSTLY_Q8_0),
    "q4_0": (Q.Q4_0, FileType.MOSTLY_Q4_0),
    "f16": (Q.F16, FileType.MOSTLY_F16),
    "f32": (Q.F32, FileType.ALL_F32),
}

_FALLBACK = {Q.Q4_K: Q.Q5_0, Q.Q6_K: Q.Q8_0}
_LAYER = re.compile(r"blk\.(\d+)\.")


def use_more_bits(i: int, n: int) -> bool:
    """llama.cpp: the first and last eighth of the layers, and every third one between, get more bits."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def tensor_qtype(name: str, shape: tuple[int, ...], mix: str, n_layer: int, tied: bool, n_expert: int = 0) -> Q:
    """Type of one tensor of a file written with `mix` (1-D tensors and the MoE router stay F32)."""
    base, _ = MIXES[mix]
    if len(shape) == 1 or name.endswith("ffn_gate_inp.weight") or base == Q.F32:
        return Q.F32
    if base == Q.F16:
        return Q.F16
    qt = base
    is_output = name == "output.weight" or (tied and name == "token_embd.weight")
    if is_output and base != Q.Q8_0:
        qt = Q.Q6_K  # llama.cpp gives the output head Q6_K in every 4-bit mix
    elif ".attn_v." in name and n_expert == 8 and base != Q.Q8_0:
        qt = Q.Q8_0  # llama.cpp bumps attn_v of 8-expert models to Q8_0 in every mix
    elif mix == "q4_k_m":
        m = _LAYER.match(name)
        il = int(m.group(1)) if m else 0
        if (".attn_v." in name or ".ffn_down" in name) and use_more_bits(il, n_layer):
            qt = Q.Q6_K
    if shape[-1] % GGML_QUANT_SIZES[qt][0]:  # rows that do not fill whole K-blocks: llama.cpp's fallback
        qt = _FALLBACK.get(qt, qt)
    if shape[-1] % GGML_QUANT_SIZES[qt][0]:
        qt = Q.F16
    return qt
