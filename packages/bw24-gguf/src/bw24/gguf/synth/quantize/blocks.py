"""Random ggml blocks written directly (no float weights, no quantizer): valid finite fp16 scales
sized so that every dequantized element has standard deviation ~sigma and mean ~0.

Each writer: (rng, n_blocks, sigma) -> uint8 [n_blocks, type_size]. Layouts follow ggml-common.h.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as Q

# std of the integer quant of each type when its bits are uniform random
_STD_I8 = 73.3  # int8 in [-127, 127]
_STD_NIBBLE = 4.61  # 0..15
_STD_5BIT = 9.23  # 0..31
_STD_6BIT = 18.47  # 0..63
_N_SCALE_SETS = 4096


def _rand_u8(rng: np.random.Generator, n: int) -> np.ndarray:
    # raw 64-bit outputs of the bit generator: ~5x faster than Generator.bytes
    return rng.bit_generator.random_raw((n + 7) // 8).view(np.uint8)[:n]


def _blocks(rng: np.random.Generator, nb: int, size: int) -> np.ndarray:
    """nb random blocks of `size` bytes; the writers then overwrite the scale fields."""
    return _rand_u8(rng, nb * size).reshape(nb, size)


def _scale(rng: np.random.Generator, n: int, base: float) -> np.ndarray:
    """Per-block scale: base times a spread of 0.5..1.5 (kernels must not assume one scale), as fp16 bits."""
    return (base * rng.uniform(0.5, 1.5, n)).astype("<f2").view(np.uint16)


def _u16(out: np.ndarray) -> np.ndarray:
    # fields are written through 16-bit views: numpy copies of 2-byte rows are per-row slow
    return out.view(np.uint16)


def q8_0(rng, nb, sigma):
    out = _blocks(rng, nb, 34)
    _u16(out)[:, 0] = _scale(rng, nb, sigma / _STD_I8)
    q = out[:, 2:].view(np.int8)
    np.maximum(q, -127, out=q)  # the quantizer never emits -128
    return out


def q4_0(rng, nb, sigma):
    out = _blocks(rng, nb, 18)
    _u16(out)[:, 0] = _scale(rng, nb, sigma / _STD_NIBBLE)
    return out


def q5_0(rng, nb, sigma):
    # layout: d (fp16), qh (32 high bits), qs[16] (low nibbles); x = d*(q5 - 16)
    out = _blocks(rng, nb, 22)
    _u16(out)[:, 0] = _scale(rng, nb, sigma / _STD_5BIT)
    return out


def pack_k4_scales(sc: np.ndarray, m: np.ndarray) -> np.ndarray:
    """8 six-bit scales and mins per block -> the 12-byte Q4_K/Q5_K packing (get_scale_min_k4)."""
    sc = sc.astype(np.uint8)
    m = m.astype(np.uint8)
    out = np.empty((sc.shape[0], 12), np.uint8)
    out[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    out[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (sc[:, 4:8] & 0xF) | ((m[:, 4:8] & 0xF) << 4)
    return out


def q4_k(rng, nb, sigma):
    # x = d*sc*q - dmin*m with m = sc and dmin = 7.5*d: each sub-block is centred on zero
    out = _blocks(rng, nb, 144)
    d = _scale(rng, nb, sigma / (47.5 * _STD_NIBBLE))
    w16 = _u16(out)
    w16[:, 0] = d
    w16[:, 1] = (d.view("<f2").astype(np.float32) * 7.5).astype("<f2").view(np.uint16)
    sc = rng.integers(32, 64, (_N_SCALE_SETS, 8), dtype=np.uint8)  # packing per block is slow: draw
    table = pack_k4_scales(sc, sc).view(np.uint32)  # from a table of packed sets
    out.view(np.uint32)[:, 1:4] = table[rng.integers(0, _N_SCALE_SETS, nb)]
    return out


def q6_k(rng, nb, sigma):
    # layout: ql[128], qh[64], scales[16] (int8), d (fp16); x = d*scale*(q6 - 32)
    out = _blocks(rng, nb, 210)
    w16 = _u16(out)
    w16[:, 96:104] &= 0x3F3F
    w16[:, 96:104] += 0x4040  # int8 scales in [64, 127]
    w16[:, 104] = _scale(rng, nb, sigma / (95.5 * _STD_6BIT))
    return out


def f16(rng, n, sigma):
    return (rng.standard_normal(n, dtype=np.float32) * sigma).astype("<f2").view(np.uint8).reshape(n, 2)


def f32(rng, n, sigma):
    return (rng.standard_normal(n, dtype=np.float32) * sigma).view(np.uint8).reshape(n, 4)


BLOCK_WRITERS: dict[Q, Callable[[np.random.Generator, int, float], np.ndarray]] = {
    Q.Q8_0: q8_0, Q.Q4_0: q4_0, Q.Q5_0: q5_0, Q.Q4_K: q4_k, Q.Q6_K: q6_k, Q.F16: f16, Q.F32: f32,
}


def random_tensor_bytes(rng: np.random.Generator, qtype: Q, n_elements: int, sigma: float) -> np.ndarray:
    """Flat uint8 bytes of a random tensor of n_elements (row-major, whole blocks)."""
    block, _tsize = GGML_QUANT_SIZES[qtype]
    if n_elements % block:
        raise ValueError(f"{qtype.name}: {n_elements} elements is not a whole number of {block}-blocks")
    return BLOCK_WRITERS[qtype](rng, n_elements // block, sigma).reshape(-1)
