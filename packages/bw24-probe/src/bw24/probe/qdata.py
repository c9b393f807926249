"""Random, well-formed GGUF weight bytes for kernel benches (no file, no model needed).

Random bytes are valid quants for every block layout except their fp16 scale fields, which could
decode to inf/NaN; those are overwritten with small positive halves so the math stays finite.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# qtype name -> (elements per block, bytes per block, byte offsets of fp16 scale fields in a block)
LAYOUTS: dict[str, tuple[int, int, tuple[int, ...]]] = {
    "F16": (1, 2, ()),
    "BF16": (1, 2, ()),
    "F32": (1, 4, ()),
    "Q8_0": (32, 34, (0,)),
    "Q4_0": (32, 18, (0,)),
    "Q4_1": (32, 20, (0, 2)),
    "Q5_0": (32, 22, (0,)),
    "Q4_K": (256, 144, (0, 2)),
    "Q5_K": (256, 176, (0, 2)),
    "Q6_K": (256, 210, (208,)),
}


def random_weight_bytes(qtype: str, n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """uint8 [n * k / block * bytes_per_block] holding a random [n, k] matrix of `qtype`."""
    if qtype not in LAYOUTS:
        raise ValueError(f"unknown quant type {qtype!r}; known: {', '.join(LAYOUTS)}")
    per, size, scales = LAYOUTS[qtype]
    if k % per:
        raise ValueError(f"{qtype}: row width {k} is not a multiple of its block of {per}")
    blocks = n * k // per
    if qtype in ("F16", "F32"):
        dt = np.float16 if qtype == "F16" else np.float32
        return rng.standard_normal(n * k, dtype=np.float32).astype(dt).view(np.uint8)
    if qtype == "BF16":
        bits = rng.standard_normal(n * k, dtype=np.float32).view(np.uint32) >> 16
        return bits.astype(np.uint16).view(np.uint8)
    raw = rng.integers(0, 256, size=(blocks, size), dtype=np.uint8)
    for off in scales:
        d = rng.uniform(1e-3, 2e-2, size=blocks).astype(np.float16)
        raw[:, off:off + 2] = d.view(np.uint8).reshape(blocks, 2)
    return raw.reshape(-1)


@dataclass(frozen=True)
class RandomTensor:
    """Stands in for bw24.gguf.TensorInfo (same fields and dequantize()), so the probe hands the
    engine's `ops.load_weight` a weight without importing bw24.gguf (not one of the probe's layers)."""

    name: str
    qtype: object          # gguf.GGMLQuantizationType
    shape: tuple[int, ...]
    raw: np.ndarray        # uint8
    nbytes: int
    offset: int = 0

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def dequantize(self) -> np.ndarray:
        from gguf.quants import dequantize

        return np.asarray(dequantize(self.raw, self.qtype), dtype=np.float32).reshape(self.shape)


def random_tensor(qtype: str, n: int, k: int, name: str, rng: np.random.Generator) -> RandomTensor:
    from gguf import GGMLQuantizationType

    raw = random_weight_bytes(qtype, n, k, rng)
    return RandomTensor(name, GGMLQuantizationType[qtype], (n, k), raw, int(raw.nbytes))
