"""Engine.verify_prefill on a backend whose matvecs round activations to int8, emulated on the CPU
(ops/ref_int8.Int8RefOps: the reference with quantize_x's rounding where the cuda policy applies it,
here on the F = 256 down projection of a tiny model). The gate must pass such a backend, report its
drift from the exact decode, and fail it when its decode drops one 32-column group (the canary). The
real backend runs the same gate on the GPU (test_cuda_gpu.py, `bw24 run-gen --backend cuda`)."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.engine.engine import Engine
from bw24.engine.ops.ref import RefOps
from bw24.engine.ops.ref_int8 import DropLastGroupInDecode, ExactSwitch, Int8RefOps


def _wide(w, k: int) -> bool:  # like the cuda rule K >= 2048, scaled to the tiny model
    return k >= 256


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, helpers):
    path = helpers.write_tiny_gguf(tmp_path_factory.mktemp("gate") / "tiny.gguf", "qwen3", n_layer=3, E=128,
                                   F=256, D=32)

    def gate(ops):
        eng = Engine(helpers.build_model(path, ops=ops), None, None, path, ops)
        return eng.verify_prefill(list(range(3, 40)))
    return gate


def test_int8_backend_passes_with_its_drift_reported(tiny):
    ops = Int8RefOps(_wide)
    r = tiny(ops)
    assert ops.rounded > 0 and r.rounded is not None
    p, d = r.rounded
    assert 0 < p.nmse <= p.bound and 0 < d.nmse <= d.bound  # rounding really happened, within class
    assert r.maxdiff < 1e-4 and r.ok and "int8-activation nmse" in r.line() and r.line().endswith("MATCH")


def test_canary_int8_decode_dropping_a_group_fails_the_gate(tiny):
    r = tiny(DropLastGroupInDecode(_wide))
    assert r.maxdiff < 1e-4  # the exact half is untouched by the bug ...
    assert not r.rounded[1].ok and r.rounded[0].ok  # ... the int8 decode is caught, the int8 prefill is fine
    assert not r.ok and r.line().endswith("MISMATCH")


def test_exact_backend_has_no_int8_half(tiny):
    r = tiny(RefOps())
    assert r.rounded is None and r.ok and "int8" not in r.line()


def test_cuda_policy_rounds_the_wide_and_vocabulary_matmuls():
    from types import SimpleNamespace

    from bw24.engine.ops.ref_int8 import cuda_policy
    from gguf.constants import GGMLQuantizationType as Q

    w = lambda q, n, k: SimpleNamespace(qtype=q, data=np.zeros((n, k), np.float32))  # noqa: E731
    assert cuda_policy(w(Q.Q4_K, 64, 2048), 2048) and cuda_policy(w(Q.Q6_K, 151936, 64), 64)
    assert cuda_policy(w(Q.Q4_K, 64, 1024), 1024)  # K >= Q8_MIN_K (1024 since 6e0baa5's run)
    assert not cuda_policy(w(Q.Q4_K, 64, 896), 896) and not cuda_policy(w(Q.F32, 64, 4096), 4096)


def test_int8_drift_over_the_fixed_bound_is_held_to_the_int8_rounding_alone(tiny, monkeypatch):
    """An int8 drift over Q8_GATE_NMSE (forced here by a tiny fixed bound; the synthetic qwen3-30b-a3b's router
    does it on the GPU with BW24_MOE_Q8: 0.0092-0.0097 at 355ecbd): the gate runs the exact kernels with their
    inputs rounded by the reference (emulate_rounding) and holds the rounded forwards to ROUNDING_FACTOR times
    that. Here the backend's int8 decode is the reference rounding itself, so it equals the rounding alone."""
    from bw24.engine import engine

    monkeypatch.setattr(engine, "Q8_GATE_NMSE", 1e-15)
    ops = Int8RefOps(_wide)
    r = tiny(ops)
    p, d = r.rounded
    assert r.alone_by == "int8-activation" and r.alone > 1e-15
    assert d.nmse == r.alone  # the emulation rounds exactly where and as the backend's decode does
    assert p.bound == d.bound == engine.ROUNDING_FACTOR * r.alone and p.ok and d.ok
    assert r.ok and "the rounding alone (int8-activation)" in r.line() and r.line().endswith("MATCH")
    assert not ops.emulating


def test_canary_the_int8_rounding_alone_does_not_excuse_a_dropped_group(tiny, monkeypatch):
    """The emulation rounds with the reference (dequantize_x_ref), never with the backend's round_x where the
    canary's bug sits: the dropped group fails against the fixed bound and against the calibrated one alike."""
    from bw24.engine import engine

    r = tiny(DropLastGroupInDecode(_wide))
    assert r.alone is not None and r.alone_by == "int8-activation" and r.rounded[1].bound == engine.Q8_GATE_NMSE
    monkeypatch.setattr(engine, "Q8_GATE_NMSE", 1e-15)
    r = tiny(DropLastGroupInDecode(_wide))
    assert r.rounded[1].bound == engine.ROUNDING_FACTOR * r.alone and not r.rounded[1].ok and not r.ok
    assert r.rounded[1].nmse > 100 * r.rounded[1].bound


def test_sensitivity_probe_on_an_int8_backend_reports_its_int8_rounding_alone(tiny, helpers, tmp_path):
    path = helpers.write_tiny_gguf(tmp_path / "t.gguf", "qwen3", n_layer=2, E=128, F=256, D=32)
    ops = Int8RefOps(_wide)
    eng = Engine(helpers.build_model(path, ops=ops), None, None, path, ops)
    r = eng.verify_prefill(list(range(3, 40)), sensitivity=True)
    assert r.ok and r.alone_by == "int8-activation" and r.rounded[1].bound == 2e-3
    assert "sensitivity: the rounding alone (int8-activation) nmse=" in r.line() and "decode drift 1x it" in r.line()


# ---- a float16 KV cache (cuda's default): the exact half on a float32 cache, the f16 run as a Drift ----

class HalfCacheRef(RefOps):
    kv_dtype = np.float16


class HalfCacheBrokenDecode(HalfCacheRef):
    """The canary: a decode step (T = 1) whose float16 store skips the first kv head's key and value (as a
    half-precision store kernel with a wrong head offset would); a float32 cache is stored correctly."""

    def rope_kv(self, q, k, v, pos, k_cache, v_cache, **kw):
        super().rope_kv(q, k, v, pos, k_cache, v_cache, **kw)
        if q.shape[0] == 1 and k_cache.dtype == np.float16:
            k_cache[0, int(pos[0])] = v_cache[0, int(pos[0])] = 0


def test_half_cache_backend_gates_on_a_float32_cache_and_reports_its_drift(tiny):
    r = tiny(HalfCacheRef())
    assert r.rounded is not None and r.rounded_by == "float16-KV"
    p, d = r.rounded
    assert 0 < p.nmse <= p.bound and 0 < d.nmse <= d.bound  # the cache really rounded, within class
    assert r.maxdiff < 1e-4  # the exact half ran on a float32 cache (float16 keys would differ ~1e-3)
    assert r.ok and "float16-KV nmse" in r.line() and r.line().endswith("MATCH")


def test_sensitivity_probe_reports_the_caches_rounding_alone_without_moving_the_bound(tmp_path, helpers):
    """verify_prefill(sensitivity=True) on a float16-cache backend within its bound: the cache's rounding alone
    is measured and printed with the decode drift as a multiple of it, the bound stays Q8_GATE_NMSE."""
    from bw24.engine import engine

    path = helpers.write_tiny_gguf(tmp_path / "t.gguf", "qwen3", n_layer=2)
    ops = HalfCacheRef()
    eng = Engine(helpers.build_model(path, ops=ops), None, None, path, ops)
    plain = eng.verify_prefill(list(range(3, 40)))
    r = eng.verify_prefill(list(range(3, 40)), sensitivity=True)
    assert plain.alone is None and "sensitivity" not in plain.line()
    assert r.alone is not None and r.alone > 0 and r.rounded[1].bound == engine.Q8_GATE_NMSE
    ratio = r.rounded[1].nmse / r.alone
    assert f"sensitivity: the rounding alone (float16-KV) nmse={r.alone:.2g}, decode drift {ratio:.3g}x it" in r.line()
    assert r.ok and r.line().endswith("MATCH") and "x 2" not in r.line()


def test_half_cache_gate_leaves_the_models_cache_in_place(tmp_path, helpers):
    path = helpers.write_tiny_gguf(tmp_path / "t.gguf", "qwen3", n_layer=2)
    ops = HalfCacheRef()
    eng = Engine(helpers.build_model(path, ops=ops), None, None, path, ops)
    kv = eng.model.kv
    eng.verify_prefill(list(range(3, 20)))
    assert eng.model.kv is kv and kv.dtype == np.float16 and kv.n_past == 17


def test_canary_half_cache_decode_storing_a_wrong_key_fails_the_gate(tiny):
    r = tiny(HalfCacheBrokenDecode())
    assert r.maxdiff < 1e-4  # the float32 exact half never runs the broken float16 store ...
    assert not r.rounded[1].ok and r.rounded[0].ok  # ... the float16 decode is caught, its prefill is fine
    assert not r.ok and r.line().endswith("MISMATCH")


def test_half_cache_drift_over_the_fixed_bound_is_held_to_the_caches_own_rounding(tiny, monkeypatch):
    """A float16 cache's drift over Q8_GATE_NMSE (forced here by a tiny fixed bound; the synthetic
    qwen3-30b-a3b's router does it on the GPU, 0.003 at a6dcfe3): the gate measures the cache's rounding
    alone with the exact kernels and holds the rounded forwards to ROUNDING_FACTOR times that."""
    from bw24.engine import engine

    monkeypatch.setattr(engine, "Q8_GATE_NMSE", 1e-15)
    r = tiny(HalfCacheRef())
    p, d = r.rounded
    assert r.alone is not None and r.alone > 1e-15  # the rounding alone moves the logits this much
    assert p.bound == d.bound == engine.ROUNDING_FACTOR * r.alone
    assert min(p.nmse, d.nmse) > 1e-15 and p.ok and d.ok
    assert r.ok and "the rounding alone (float16-KV)" in r.line() and r.line().endswith("MATCH")


def test_canary_the_caches_own_rounding_does_not_excuse_a_wrong_key(tiny, monkeypatch):
    """The calibration runs on a float32 cache and the exact kernels, so the broken float16 store is not in
    it: the wrong key fails against the fixed bound and against the calibrated one alike."""
    from bw24.engine import engine

    r = tiny(HalfCacheBrokenDecode())
    assert r.alone is not None and r.rounded[1].bound == engine.Q8_GATE_NMSE  # the rounding alone is tiny
    monkeypatch.setattr(engine, "Q8_GATE_NMSE", 1e-15)
    r = tiny(HalfCacheBrokenDecode())
    assert r.alone is not None and not r.rounded[1].ok and not r.ok
    assert r.rounded[1].nmse > 100 * r.rounded[1].bound


# ---- fp16 prefill products (cuda's BW24_PREFILL=fp16): the rounded half holds them ------------------------

class Fp16PrefillRef(ExactSwitch, RefOps):
    """The reference whose prefill matmuls (T > 1) take float16 x and W, as cuda's fp16 GEMMs do, except
    inside exact_activations (the cuda backend switches to split products there); rotten: a prefill
    that also drops W's last 16 columns (a wrong chunk width), the canary."""

    def __init__(self, rotten: bool = False) -> None:
        super().__init__()
        self.rotten = rotten

    def rounded_paths(self) -> list[str]:
        return ["fp16-prefill"]

    def matmul(self, w, x, *, out, bias=None, residual=None):
        if self.exact or x.shape[0] == 1 or w.data.ndim != 2:
            return super().matmul(w, x, out=out, bias=bias, residual=residual)
        wd = w.data.astype(np.float16).astype(np.float32)
        if self.rotten:
            wd[:, -16:] = 0
        y = x.astype(np.float16).astype(np.float32) @ wd.T
        out[...] = y + (0 if bias is None else bias) + (0 if residual is None else residual)


def test_fp16_prefill_is_the_rounded_half(tiny):
    r = tiny(Fp16PrefillRef())
    assert r.rounded_by == "fp16-prefill" and r.maxdiff < 1e-4  # the exact half: no fp16 products
    p, d = r.rounded
    assert 0 < p.nmse <= p.bound and d.nmse == 0  # prefill rounded within class; decode is exact
    assert r.ok and r.line().endswith("MATCH")


def test_canary_fp16_prefill_dropping_columns_fails_the_gate(tiny):
    r = tiny(Fp16PrefillRef(rotten=True))
    assert r.maxdiff < 1e-4 and not r.rounded[0].ok and r.rounded[1].ok
    assert not r.ok and r.line().endswith("MISMATCH")
