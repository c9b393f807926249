"""benchmarks/gpu_attn_sweep.py's settings (the sweep itself needs a GPU: the attnsweep stage runs it): each label
once; a shape's first row is the default its perf cells run (the reference its other rows' bits are compared
with); every row sets the same attributes, so none leaks into the next."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks/gpu_attn_sweep.py"


@pytest.fixture(scope="module")
def sweep():
    spec = importlib.util.spec_from_file_location("gpu_attn_sweep", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("shape", ["32b", "30b-a3b", "8b", "0.6b"])
def test_each_shape_starts_from_its_default_and_names_each_setting_once(sweep, shape):
    from bw24.engine.ops.cuda.attn import dec_mma_default

    H, Hkv = sweep.SHAPES[shape]
    rows = sweep.settings(H // Hkv)
    labels = [label for label, _ in rows]
    assert len(labels) == len(set(labels))
    first = rows[0][1]
    assert first["attn_dec_mma"] == dec_mma_default(H, Hkv) and first["attn_override"] is None
    assert not first["attn_dec_pipe"] and not first["attn_dec_fuse"]
    assert all(set(a) == set(first) for _, a in rows)
    # every split count with the pipe and the fused pass 2, alone and together, on the tensor-core pass 1
    for ns in (33, 16):
        got = {(a["attn_dec_pipe"], a["attn_dec_fuse"]) for _, a in rows if a["attn_override"] == {"max_splits": ns}}
        assert got == {(False, False), (True, False), (False, True), (True, True)}
