"""The int8-activation matvec path on the CPU: quantize_x's NumPy twin, a bit-level NumPy emulation
of qdot_q8.cuh's integer dot products on the repacked planes (nibble/byte pairing, high-bit spreads,
offsets and minimums through the integer sums) against the fp64 reference, and the dispatcher's
"path" config. The GPU kernels themselves are checked by kernel_check (kernel_cases_q8.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from bw24.engine.ops.cuda.launch import Q8_TYPES, QmvConfigs, check_path, default_path, default_qmv
from bw24.engine.ops.cuda.q8 import matmul_q8_ref, quantize_x_ref, unpack_xs
from bw24.engine.ops.cuda.repack import random_raw, repack
from bw24.gguf import dequantize
from bw24.runtime import Tuning
from gguf.constants import GGMLQuantizationType as Q

FORMATS = (Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q4_K, Q.Q5_K, Q.Q6_K)
M32 = np.uint64(0xFFFFFFFF)


def test_quantize_x_ref_rounds_half_to_even_and_keeps_zero_groups():
    x = np.zeros((2, 64), np.float32)
    x[0, 0] = 31.75  # d = 31.75 / 127 = 0.25 exactly
    x[0, 1:5] = np.array([0.125, 0.375, -0.125, -0.625], np.float32)  # x/d = 0.5, 1.5, -0.5, -2.5
    x[1, 32:] = np.linspace(-3, 3, 32, dtype=np.float32)
    q, d, s = quantize_x_ref(x)
    assert d[0, 0] == np.float32(0.25) and d[0, 1] == 0 and d[1, 0] == 0
    assert q[0, :5].tolist() == [127, 0, 2, 0, -2]
    assert not q[0, 32:].any() and not q[1, :32].any()
    assert np.abs(q.astype(int)).max() == 127
    assert s[0, 0].tolist() == [127, 0] and s[1, 1].tolist() == [q[1, 32:48].sum(), q[1, 48:].sum()]


def test_unpack_xs_reads_the_device_metadata_layout():
    d = np.array([[0.5, 0.0]], np.float32)
    s0, s1 = np.array([[-1234, 7]]), np.array([[2000, -5]])
    packed = ((s0 & 0xFFFF) | (s1 << 16)).astype(np.int64).astype(np.uint32).view(np.int32)
    xs = np.stack([d.view(np.int32), packed], axis=-1)
    dd, ss = unpack_xs(xs)
    assert np.array_equal(dd, d) and ss[..., 0].tolist() == s0.tolist() and ss[..., 1].tolist() == s1.tolist()


def _spread1(h):  # qdot_q8.cuh spread1
    return (((h & 0xF) * 0x00204081) & 0x01010101) << 4


def _spread2(h):  # qdot_q8.cuh spread2
    t = (h | (h << 12)) & 0x000F000F
    return ((t | (t << 6)) & 0x03030303) << 4


def emulate_q8(p, x: np.ndarray) -> np.ndarray:
    """out [T, N] computed the way qmatvec_q8.cu does: integer dots per half group, fp32 scales."""
    xq, dx, s = quantize_x_ref(x)
    T, K = xq.shape
    n, G = p.n, K // 32
    X = xq.reshape(T, G, 32).astype(np.int64)
    f32 = np.float32
    h = lambda u: (np.asarray(u) & 0xFFFF).astype(np.uint16).view(np.float16).astype(f32)  # noqa: E731
    if p.qtype == Q.Q8_0:
        wb = p.planes["a"].reshape(n, G, 32).astype(np.int64)
        a, b = np.einsum("ngj,tgj->tng", wb[..., :16], X[..., :16]), np.einsum("ngj,tgj->tng", wb[..., 16:], X[..., 16:])
    else:
        u = p.planes["a"].reshape(n, G, 16).copy().view("<u4").astype(np.uint64)  # [n, G, 4] words
        k = np.arange(4, dtype=np.uint64)
        lo, hi = u & 0x0F0F0F0F, (u >> np.uint64(4)) & 0x0F0F0F0F
        if p.qtype in (Q.Q5_0, Q.Q5_K):
            s1 = p.planes["b"].astype(np.uint64)[..., None]
            lo |= _spread1(s1 >> (4 * k))
            hi |= _spread1(s1 >> (16 + 4 * k))
        if p.qtype == Q.Q6_K:
            bb = p.planes["b"].astype(np.uint64)[..., None]
            lo |= _spread2(((bb & M32) >> (8 * k)) & 0xFF)
            hi |= _spread2(((bb >> np.uint64(32)) >> (8 * k)) & 0xFF)
        by = lambda w: (w.astype("<u4").view(np.uint8).reshape(n, G, 16)).astype(np.int64)  # noqa: E731
        assert by(lo).max() < 128 and by(hi).max() < 128  # unsigned codes read as signed dp4a bytes
        a = np.einsum("ngj,tgj->tng", by(lo), X[..., :16])
        b = np.einsum("ngj,tgj->tng", by(hi), X[..., 16:])
    S0, S1 = s[..., 0][:, None, :].astype(np.int64), s[..., 1][:, None, :].astype(np.int64)
    S, idot, d = S0 + S1, a + b, dx[:, None, :]
    c = p.planes.get("c")
    if p.qtype == Q.Q8_0:
        v = (h(c) * d) * idot.astype(f32)
    elif p.qtype in (Q.Q4_0, Q.Q5_0):
        v = (h(c) * d) * (idot - (8 if p.qtype == Q.Q4_0 else 16) * S).astype(f32)
    elif p.qtype == Q.Q4_1:
        v = (h(c) * d) * idot.astype(f32) + (h(c >> 16) * d) * S.astype(f32)
    elif p.qtype in (Q.Q4_K, Q.Q5_K):
        dd = np.repeat(p.planes["d"], 8, axis=1)
        sc = h(dd) * (c & 0xFF).astype(f32)
        mn = h(dd >> 16) * ((c >> 8) & 0xFF).astype(f32)
        v = (sc * d) * idot.astype(f32) - (mn * d) * S.astype(f32)
    else:
        sc0 = (c & 0xFF).astype(np.uint8).view(np.int8).astype(np.int64)
        sc1 = (c >> 8).astype(np.uint8).view(np.int8).astype(np.int64)
        dd = h(np.repeat(p.planes["d"], 8, axis=1))
        v = (dd * d) * (sc0 * (a - 32 * S0) + sc1 * (b - 32 * S1)).astype(f32)
    return v.astype(np.float64).sum(axis=-1).astype(np.float32)


@pytest.mark.parametrize("qt", FORMATS, ids=lambda q: q.name)
def test_q8_integer_dot_emulation_matches_reference(qt):
    rng = np.random.default_rng(int(qt))
    n, k, T = 37, 512, 3
    raw = random_raw(qt, n, k, rng)
    x = (rng.standard_normal((T, k)) * 2).astype(np.float32)
    x[1, :32] = 0
    got = emulate_q8(repack(raw, qt, (n, k)), x)
    want = matmul_q8_ref(dequantize(raw, qt, (n, k)), x)  # gguf's decoder, independent of repack
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert rel < 2e-6, rel


def test_q8_emulation_canary_wrong_offset_is_caught():
    """Canary: the reference comparison sees a Q4_0 offset of 7 instead of 8."""
    rng = np.random.default_rng(1)
    raw = random_raw(Q.Q4_0, 16, 256, rng)
    x = rng.standard_normal((1, 256)).astype(np.float32)
    p = repack(raw, Q.Q4_0, (16, 256))
    bad = dict(p.planes)
    bad["a"] = p.planes["a"] + np.uint8(0x11) * (p.planes["a"] < 0xEE)  # codes off by one: a wrong weight
    from dataclasses import replace

    got = emulate_q8(replace(p, planes=bad), x)
    want = matmul_q8_ref(dequantize(raw, Q.Q4_0, (16, 256)), x)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) > 1e-2


def _table(entry: dict) -> Tuning:
    return Tuning({"qmatvec": entry})


def test_path_is_a_policy_of_the_shape_and_the_table_gives_w_r():
    c = QmvConfigs(Tuning())
    assert c.plan(Q.Q4_K, 4096, 4096)[0] == "q8" and c.plan(Q.Q6_K, 4096, 12288)[0] == "q8"  # K >= 1024
    assert c.plan(Q.Q4_K, 4096, 1024)[0] == "q8" and c.plan(Q.Q4_K, 1024, 992)[0] == "f32"  # the 0.6B's; just below
    assert c.plan(Q.Q6_K, 151936, 1024)[0] == "q8"  # a vocabulary head
    assert c.plan(Q.Q4_1, 1536, 576)[0] == "f32" and c.plan(Q.Q6_K, 49152, 576)[0] == "f32"  # smollm2-sized
    t = _table({"Q4_K": {"default": {"warps": 4, "rows": 8}, "shapes": {"6144x4096": {"warps": 2, "rows": 4,
                                                                                     "path": "f32"}}}})
    c = QmvConfigs(t)
    assert c.plan(Q.Q4_K, 6144, 4096) == ("q8", 2, 4)  # a table path does not change the policy
    assert c.plan(Q.Q4_K, 896, 896) == ("f32", 4, 8)
    assert c.get(Q.Q4_K, 6144, 4096) == (2, 4)  # the old (W, R) interface is unchanged


def test_q8_min_k_reads_its_variable_and_refuses_a_bad_one():
    from bw24.engine.ops.cuda.launch import Q8_MIN_K_DEFAULT, q8_min_k

    assert q8_min_k(None) == Q8_MIN_K_DEFAULT == 1024 and q8_min_k("2048") == 2048 and q8_min_k("896") == 896
    for bad in ("0", "-1024", "1000", "1k", ""):
        with pytest.raises(ValueError, match="BW24_Q8_MIN_K"):
            q8_min_k(bad)


# what a fresh interpreter's paths tests print (the variables read at import, as a measured run reads them)
PLAN_PROBE = ("import numpy as np; from gguf.constants import GGMLQuantizationType as Q; "
              "from bw24.engine.ops.cuda.launch import QmvConfigs; from bw24.engine.ops.cuda.q8 import feeds_q8; "
              "from bw24.engine.ops.cuda.backend import CudaOps; from bw24.runtime import Tuning; ")


@pytest.mark.parametrize("value", [None, "2048"])
def test_q8_min_k_moves_the_narrow_layers_and_their_norm_to_the_q8_path(value, helpers):
    """The default K >= 1024 (a fresh interpreter, as a measured run reads it): the 0.6B's K = 1024 Q/K/V and
    gate/up plan the q8 path, the rmsnorm ahead of them leaves their codes (feeds_q8); smollm2's K = 576 stays
    fp32. BW24_Q8_MIN_K=2048 (the threshold before 6e0baa5's run) keeps them on the fp32 path, perf rows say so."""
    code = (PLAN_PROBE +
            "c = QmvConfigs(Tuning()); o = CudaOps.__new__(CudaOps); "
            "print(c.plan(Q.Q4_K, 4096, 1024)[0], c.plan(Q.Q4_1, 1536, 576)[0], "
            "feeds_q8(o, np.zeros((1, 1024), np.float32)), [p for p in o.opt_in() if p.startswith('q8_min')])")
    out = helpers.fresh_python(code, "BW24_Q8_MIN_K", **({} if value is None else {"BW24_Q8_MIN_K": value}))
    if value is None:
        assert out.strip() == "q8 f32 True []"
    else:
        assert out.strip() == "f32 f32 False ['q8_min_k_2048']"


def test_q8_request_for_float_weights_falls_back_to_f32():
    c = QmvConfigs(_table({"F16": {"default": {"warps": 2, "rows": 2, "path": "q8"}}}))
    assert c.plan(Q.F16, 1024, 4096) == ("f32", 2, 2)
    assert "F16" not in Q8_TYPES and {"Q4_K", "Q6_K", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_K"} <= Q8_TYPES


def test_bad_path_is_an_error_and_a_bad_table_path_falls_back_to_defaults():
    with pytest.raises(ValueError, match="path must be one of"):
        check_path({"warps": 4, "rows": 8, "path": "int4"})
    c = QmvConfigs(_table({"Q8_0": {"default": {"warps": 1, "rows": 1, "path": "int4"}}}))
    d = default_qmv(4096, 4096)
    assert c.plan(Q.Q8_0, 4096, 4096) == ("q8", d["warps"], d["rows"])
    assert c.plan(Q.Q8_0, 1024, 896) == ("f32", *default_qmv(1024, 896).values())


def test_override_with_path_wins_over_table():
    c = QmvConfigs(_table({"Q6_K": {"default": {"warps": 4, "rows": 8}}}))
    c.overrides["Q6_K"] = {"warps": 1, "rows": 4, "path": "q8"}
    assert c.plan(Q.Q6_K, 4096, 1024) == ("q8", 1, 4)
    c.overrides["Q6_K"] = {"warps": 1, "rows": 4, "path": "f32"}
    assert c.plan(Q.Q6_K, 151936, 1024) == ("f32", 1, 4)


def test_a_table_with_q8_paths_validates():
    from bw24.runtime import device_key
    from bw24.runtime.tuning import validate

    t = {"schema": 1, "device": "NVIDIA H200", "cc": "9.0", "key": device_key("NVIDIA H200", (9, 0)),
         "qmatvec": {"Q4_K": {"default": {"warps": 4, "rows": 8, "path": "q8"},
                              "shapes": {"151936x1024": {"warps": 1, "rows": 4, "path": "f32"}}}}}
    assert QmvConfigs(Tuning(validate(t, "t"))).plan(Q.Q4_K, 151936, 1024) == ("q8", 1, 4)


def test_moe_models_decode_on_fp32_activations():
    """CudaOps.use_int8_activations(False) (prepare_model does it for MoE models) puts every weight but the
    vocabulary head on the f32 path, names the head's rounding in the gate's rounded half instead of int8
    activations, and survives the gate's exact_activations() block (every weight f32 inside it)."""
    from bw24.engine.ops.cuda.backend import CudaOps

    ops = CudaOps.__new__(CudaOps)
    ops.qmv_configs, ops.quantizes_activations, ops.prefill_precision = QmvConfigs(_table({})), True, "auto"
    assert ops.qmv_configs.plan(Q.Q4_K, 4096, 4096)[0] == "q8"
    CudaOps.use_int8_activations(ops, False)
    assert not ops.quantizes_activations and ops.qmv_configs.plan(Q.Q4_K, 4096, 4096)[0] == "f32"
    assert ops.qmv_configs.plan(Q.Q6_K, 151936, 2048)[0] == "q8"  # the head: no router reads it
    assert ops.qmv_configs.plan(Q.F32, 151936, 2048)[0] == "f32"  # a format without q8 kernels
    assert CudaOps.rounded_paths(ops) == ["int8-head"]
    with CudaOps.exact_activations(ops):
        assert ops.qmv_configs.plan(Q.Q6_K, 151936, 1024)[0] == "f32"
    assert ops.qmv_configs.plan(Q.Q6_K, 151936, 1024)[0] == "q8"
    CudaOps.use_int8_activations(ops, True)
    assert ops.quantizes_activations and ops.qmv_configs.plan(Q.Q4_K, 4096, 4096)[0] == "q8"
    assert CudaOps.rounded_paths(ops) == ["int8-activation"]


def test_verify_launch_plan_exact_token_count_and_rows():
    """A T-token q8 matvec launches NT = T up to 8 (no padded token slots), then the 16 bucket; its rows
    per block keep R * NT <= 32 accumulators; decode keeps its table R; the f32 path keeps its buckets
    with rows by quant type and K; the sweep's override (CudaOps.verify_rows) wins on both paths."""
    from types import SimpleNamespace

    from bw24.engine.ops.cuda.backend import CudaOps
    from bw24.engine.ops.cuda.q8 import q8_nt, verify_rows

    assert [q8_nt(T) for T in range(1, 17)] == list(range(1, 9)) + [16] * 8
    assert [verify_rows(T) for T in range(2, 10)] == [4] * 7 + [2]
    assert all(verify_rows(T) * q8_nt(T) <= 32 for T in range(2, 17))
    ops = SimpleNamespace(verify_rows=None)
    assert CudaOps._verify_plan(ops, "q8", 1, 8) == (1, 8)
    assert CudaOps._verify_plan(ops, "q8", 5, 8) == (5, 4)
    assert CudaOps._verify_plan(ops, "q8", 12, 8) == (16, 2)
    assert CudaOps._verify_plan(ops, "f32", 1, 4) == (1, 4)
    # f32 path (launch.f32_verify_rows, the a6dcfe3 sweep): Q4_K 4 rows, any Q6_K part 2, K < 1024 or
    # another format 1; R * NT stays within the kernel's 64 accumulators up to the 16-token bucket
    q4, q6, q8_0 = (SimpleNamespace(qtype=t) for t in (Q.Q4_K, Q.Q6_K, Q.Q8_0))
    assert CudaOps._verify_plan(ops, "f32", 5, 8, (q4,), 1024) == (8, 4)
    assert CudaOps._verify_plan(ops, "f32", 5, 8, (q4, q4, q6), 1536) == (8, 2)
    assert CudaOps._verify_plan(ops, "f32", 12, 8, (q4,), 2048) == (16, 4)
    assert CudaOps._verify_plan(ops, "f32", 5, 8, (q4,), 576) == (8, 1)  # smollm2's K
    assert CudaOps._verify_plan(ops, "f32", 5, 8, (q4, q8_0), 1024) == (8, 1)
    assert CudaOps._verify_plan(ops, "f32", 5, 8) == (8, 1)
    ops.verify_rows = 8
    assert CudaOps._verify_plan(ops, "q8", 5, 8) == (5, 8) and CudaOps._verify_plan(ops, "f32", 5, 8) == (8, 8)
    assert CudaOps._verify_plan(ops, "f32", 1, 4) == (1, 4)  # the sweep's override: T > 1 rows of either path


class _PlanOps:
    """Records what CudaOps dispatches (launch names, argument counts checked against the kernels'
    signatures), without a GPU."""

    def __init__(self, plan, helpers):
        from types import SimpleNamespace

        self.dev, self.params = helpers.HostDev, helpers.kernel_params  # conftest
        self.verify_rows, self._q8_ready, self.calls, self.args = None, None, [], []
        self.norm_fuse, self.emulating = True, False
        self._rope_tabs, self._capturing = {}, False
        self.qmv_configs = SimpleNamespace(plan=plan)

    def _verify_plan(self, path, T, R, ws=(), K=0):
        from bw24.engine.ops.cuda.backend import CudaOps

        return CudaOps._verify_plan(self, path, T, R, ws, K)

    def _multi_plan(self, ws, K):
        from bw24.engine.ops.cuda.backend import CudaOps

        return CudaOps._multi_plan(self, ws, K)

    def q8_loads(self, w, n, k, nt):  # (no table: the loop as before)
        return ()

    def _buf(self, key, n, dtype=np.float32, zeroed=False):
        return np.zeros(max(n, 1), dtype).view(self.dev)

    def _k(self, file, name):
        return self._k_with(file, name, ())

    def _k_with(self, file, name, extra):  # (CudaOps._k's: the defines of one call on top)
        return (file, name)

    def _launch(self, fn, grid, block, args, shared_mem=0):
        self._q8_ready = None
        self.calls.append(fn[1].split("<")[0])
        self.args.append(args)
        assert len(args) == len(self.params(fn[0], self.calls[-1])), f"{fn}: {len(args)} arguments"

    def rmsnorm(self, x, w, eps, *, out):
        self.calls.append("rmsnorm")

    def matmul_multi(self, ws, x, **kw):
        from bw24.engine.ops.cuda.backend import CudaOps

        return CudaOps.matmul_multi(self, ws, x, **kw)


def test_norm_matmul_multi_dispatch(helpers, monkeypatch):
    """norm_matmul_multi: on the fp32-activation path, decode / verify rows are one qmv3n launch reading the
    residual stream h and the norm weight (no rmsnorm launch); on the q8 path rmsnorm into x, then the q8
    matvecs of x; prefill rows go to gemm_multi with the norm, which x_to_half applies."""
    from types import SimpleNamespace

    from bw24.engine.ops.cuda import prefill
    from bw24.engine.ops.cuda.backend import CudaOps

    monkeypatch.setattr(prefill, "gemm_multi", lambda ops, ws, x, outs, biases, norm=None: ops.calls.append(
        ("gemm_multi", x, norm)))

    def run(T, path, K=1024, n=3, fuse=True):
        ops = _PlanOps(lambda qt, N, k, gate_force=True: (path, 1, 4), helpers)
        ops.norm_fuse = fuse
        ws = [SimpleNamespace(n=64, k=K, fmt=7, qtype=Q.Q4_K, args=lambda: (0, 0, 0, 0)) for _ in range(n)]
        h, xb, nw = (np.zeros(s, np.float32).view(helpers.HostDev) for s in ((T, K), (T, K), (K,)))
        outs = [np.zeros((T, 64), np.float32).view(helpers.HostDev) for _ in range(n)]
        CudaOps.norm_matmul_multi(ops, h, nw, 1e-6, ws, x=xb, outs=outs)
        first = ops.args[0] if ops.args else None
        return ops.calls, first is not None and first[0] is h and first[1] is nw, xb

    calls, reads_h, _ = run(1, "f32")
    assert calls == ["qmv3n"] and reads_h  # the norm inside: h and its weight are the kernel's first arguments
    assert run(5, "f32", n=2)[:2] == (["qmv3n"], True)
    assert run(16, "f32", K=576)[0] == ["qmv3n"]
    assert run(1, "f32", fuse=False)[0] == ["rmsnorm", "qmv3"]  # the default (BW24_NORM_FUSE unset)
    calls = run(1, "q8", K=2048)[0]  # (the stand-in rmsnorm leaves no int8 rows: quantize_x; kernel_check counts 2)
    assert calls[0] == "rmsnorm" and calls[-1] == "qmv8_3" and "qmv3n" not in calls
    calls, reads_h, _ = run(17, "f32")  # prefill: the GEMMs' conversion of h normalizes it (x_to_half)
    assert len(calls) == 1 and calls[0][0] == "gemm_multi" and calls[0][2][1] == 1e-6 and calls[0][2][0].shape == (1024,)


def test_attention_q8_output_dispatch(helpers):
    """The attention kernels get the q8 scratch (non-null xq / xs) and the output rows are marked for the
    wo matmul only with attn_q8 on, H*Dv >= 2048 and decode / verify rows (also by the fused pass 2).
    BW24_ATTN_FUSE (cu.attn_fuse) forces the fused pass 2 over the table; a workbench override wins over it."""
    from types import SimpleNamespace

    from bw24.engine.ops.cuda import attn

    def run(on, H, Dv, T=1, fuse=0, forced=None):
        launches = []
        cu = _PlanOps(None, helpers)
        cu.attn_q8, cu.attn_override, cu.attn_fuse = on, None if fuse is None else {"fuse_combine": fuse}, forced
        cu.qmv_configs = SimpleNamespace(tuning=SimpleNamespace(config=lambda *a: {"chunk": 32, "max_splits": 16}))
        cu._launch = lambda fn, grid, block, args, shared_mem=0: (launches.append((fn[1].split("<")[0], args)),
                                                                  setattr(cu, "_q8_ready", None))
        Hkv, S = 4, 64
        q, out = (np.zeros((T, H, Dv), np.float32).view(helpers.HostDev) for _ in range(2))
        kc, vc = (np.zeros((Hkv, S, Dv), np.float32).view(helpers.HostDev) for _ in range(2))
        attn.attention(cu, q, kc, vc, np.zeros(1, np.int32).view(helpers.HostDev), scale=1.0, softcap=None, window=None, out=out)
        xqs = [a[15] if n == "attn_split" else a[-2] for n, a in launches]  # attn_split: rope arguments follow xs
        xq = [int(x) if isinstance(x, np.uintp) else x.data.ptr for x in xqs]
        return [n for n, _ in launches], all(p != 0 for p in xq), cu._q8_ready == (out.data.ptr, T, H * Dv)

    assert run(True, 16, 128) == (["attn_split", "attn_combine"], True, True)
    assert run(True, 16, 128, T=5) == (["attn_split", "attn_combine"], True, True)
    assert run(False, 16, 128) == (["attn_split", "attn_combine"], False, False)
    assert run(True, 4, 128) == (["attn_split", "attn_combine"], False, False)  # 512 < Q8_MIN_K: an fp32 wo
    assert run(True, 16, 128, T=17) == (["attn_split", "attn_combine"], False, False)  # more rows than q8 handles
    assert run(True, 16, 128, fuse=1) == (["attn_split"], True, True)  # the fused pass 2 quantizes too
    assert run(False, 16, 128, fuse=1) == (["attn_split"], False, False)
    assert run(True, 16, 128, fuse=None, forced=True)[0] == ["attn_split"]  # BW24_ATTN_FUSE=1 over the table
    assert run(True, 16, 128, fuse=None, forced=False)[0] == ["attn_split", "attn_combine"]
    assert run(True, 16, 128, fuse=0, forced=True)[0] == ["attn_split", "attn_combine"]  # the override wins


def test_attention_split_heads_dispatch(helpers):
    """BW24_ATTN_SPLIT_HEADS (cu.attn_split_heads): a kv head's 8 q heads go to two attn_split blocks of 4
    (the G = 4 instance, grid.x = 2 Hkv; the fused pass 2's tickets one per head group); G <= 4 and the
    default keep one block a kv head. The combine and the partials are per head, unchanged."""
    from types import SimpleNamespace

    from bw24.engine.ops.cuda import attn

    assert [attn.head_groups(G, True) for G in (1, 2, 4, 5, 7, 8)] == [1, 1, 1, 1, 1, 2]
    assert attn.head_groups(8, False) == 1
    # BW24_ATTN_BLOCK_HEADS (cu.attn_block_heads): per q heads a block where G is a larger multiple of it
    assert [attn.head_groups(G, True, 2) for G in (1, 2, 3, 4, 6, 8)] == [1, 1, 1, 2, 3, 4]
    assert [attn.head_groups(G, True, 1) for G in (1, 2, 4)] == [1, 2, 4] and attn.head_groups(4, False, 1) == 1

    def run(split, H, Hkv, T=1, fuse=0, per=None, few_kv=False):
        launches, bufs = [], {}
        cu = _PlanOps(None, helpers)
        cu.attn_q8, cu.attn_override, cu.attn_fuse, cu.attn_split_heads = False, {"fuse_combine": fuse}, None, split
        cu.attn_few_kv = few_kv
        if per is not None:
            cu.attn_block_heads = per
        cu.qmv_configs = SimpleNamespace(tuning=SimpleNamespace(config=lambda *a: {"chunk": 32, "max_splits": 16}))
        cu._launch = lambda fn, grid, block, args, shared_mem=0: launches.append((fn[1], tuple(grid)))
        cu._buf = lambda key, n, dtype=np.float32, zeroed=False: bufs.setdefault(key, n) and np.zeros(n, dtype).view(
            helpers.HostDev)
        S = 64
        q, out = (np.zeros((T, H, 128), np.float32).view(helpers.HostDev) for _ in range(2))
        kc, vc = (np.zeros((Hkv, S, 128), np.float16).view(helpers.HostDev) for _ in range(2))
        attn.attention(cu, q, kc, vc, np.zeros(1, np.int32).view(helpers.HostDev), scale=1.0, softcap=None,
                       window=None, out=out)
        return launches, bufs.get("attn_tickets")

    assert run(True, 32, 4)[0] == [("attn_split<128,128,4,32,__half>", (8, 2, 1)), ("attn_combine", (32, 1))]
    assert run(False, 32, 4)[0] == [("attn_split<128,128,8,32,__half>", (4, 2, 1)), ("attn_combine", (32, 1))]
    assert run(True, 32, 8)[0][0] == ("attn_split<128,128,4,32,__half>", (8, 2, 1))  # G = 4: nothing to split
    launches, tickets = run(True, 64, 8, T=20, fuse=1)
    assert launches == [("attn_split<128,128,4,32,__half>", (16, 2, 20))] and tickets == 20 * 16
    # fewer q heads a block: the 8B's 4 as two blocks of 2, the 32B's 8 as four, the 0.6B's 2 as two of 1; the
    # fused pass 2's tickets one per (token, kv head, head group), sized for 16 rows of 8 kv heads at least
    assert run(True, 32, 8, per=2)[0][0] == ("attn_split<128,128,2,32,__half>", (16, 2, 1))
    assert run(True, 64, 8, per=2)[0][0] == ("attn_split<128,128,2,32,__half>", (32, 2, 1))
    assert run(True, 16, 8, per=1)[0][0] == ("attn_split<128,128,1,32,__half>", (16, 2, 1))
    assert run(False, 32, 8, per=2)[0][0] == ("attn_split<128,128,4,32,__half>", (8, 2, 1))  # split heads off
    launches, tickets = run(True, 64, 8, T=20, fuse=1, per=2)
    assert launches == [("attn_split<128,128,2,32,__half>", (32, 2, 20))] and tickets == 20 * 8 * 4
    assert run(True, 64, 8, T=1, fuse=1, per=2)[1] == 16 * 8 * 4
    # few kv heads of many q heads (attn.FEW_KV_HEADS, MANY_Q_HEADS; CudaOps.attn_few_kv): one q head a block, at
    # any per a depth class sets: qwen2.5-coder-0.5b's 2 kv heads of 7 (one block of 7 before), the 1.5b's 2 of 6
    assert run(True, 14, 2, few_kv=True)[0][0] == ("attn_split<128,128,1,32,__half>", (14, 2, 1))
    assert run(True, 12, 2, per=2, few_kv=True)[0][0] == ("attn_split<128,128,1,32,__half>", (12, 2, 1))
    assert run(True, 14, 2)[0][0] == ("attn_split<128,128,7,32,__half>", (2, 2, 1))  # the rule off
    # the rule's edges: 3 kv heads, or 4 q heads a kv head, keep the configured heads a block
    assert run(True, 24, 3, per=2, few_kv=True)[0][0] == ("attn_split<128,128,2,32,__half>", (12, 2, 1))
    assert run(True, 8, 2, per=2, few_kv=True)[0][0] == ("attn_split<128,128,2,32,__half>", (4, 2, 1))
    assert run(False, 14, 2, few_kv=True)[0][0] == ("attn_split<128,128,7,32,__half>", (2, 2, 1))  # split heads off


def test_attn_block_heads_env_is_checked_and_recorded(monkeypatch, helpers):
    """BW24_ATTN_BLOCK_HEADS: 4 q heads a block by default, 1 or 2 taken and recorded in perf rows (while split
    heads are on), anything else a clear error naming the variable."""
    from bw24.engine.ops.cuda.backend import CudaOps

    assert CudaOps.attn_block_heads == 4
    helpers.env_refused_or_recorded(monkeypatch, "attn_block_heads_env", "BW24_ATTN_BLOCK_HEADS", ("0", "3", "8", "two"), "2",
                             "4", "attn_block_heads")
    ops = CudaOps.__new__(CudaOps)
    ops.attn_block_heads_env, ops.attn_split_heads = "2", False
    assert not any(o.startswith("attn_block_heads") for o in CudaOps.opt_in(ops))  # no head groups: nothing differs
    # the few-kv-heads rule on unless the variable is set; an explicit 4 turns it off, so its rows say 4
    ops = CudaOps.__new__(CudaOps)
    assert CudaOps.attn_few_kv is ("BW24_ATTN_BLOCK_HEADS" not in os.environ)
    ops.attn_block_heads_env, ops.attn_split_heads, ops.attn_few_kv = "4", True, False
    assert "attn_block_heads_4" in CudaOps.opt_in(ops)
    out = helpers.fresh_python("from bw24.engine.ops.cuda.backend import CudaOps; print(CudaOps.attn_few_kv)",
                               "BW24_ATTN_BLOCK_HEADS", BW24_ATTN_BLOCK_HEADS="4")
    assert out.strip() == "False"


def test_attention_launches_pass_each_kernel_its_parameters(helpers):
    """attn.attention's decode / verify launches: attn_split, then attn_combine, each with as many arguments as
    its kernel takes (attention.cu's signatures)."""
    from types import SimpleNamespace

    from bw24.engine.ops.cuda import attn

    launches = []
    cu = _PlanOps(None, helpers)
    cu.attn_q8, cu.attn_override = False, {"fuse_combine": 0}
    cu.qmv_configs = SimpleNamespace(tuning=SimpleNamespace(config=lambda *a: {"chunk": 32, "max_splits": 16}))
    cu._launch = lambda fn, grid, block, args, shared_mem=0: launches.append((fn[1], args))
    Hkv, G, S, D, T = 2, 4, 64, 128, 1
    dev = lambda *s: np.zeros(s, np.float32).view(helpers.HostDev)  # noqa: E731
    q, out, kc, vc = dev(T, Hkv * G, D), dev(T, Hkv * G, D), dev(Hkv, S, D), dev(Hkv, S, D)
    attn.attention(cu, q, kc, vc, np.zeros(1, np.int32).view(helpers.HostDev), scale=1.0, softcap=None, window=None,
                   out=out)
    assert [n for n, _ in launches] == ["attn_split<128,128,4,32>", "attn_combine"]
    n_split = len(helpers.kernel_params("attention.cu", "attn_split"))
    assert n_split == 17 and len(helpers.kernel_params("attention.cu", "attn_combine")) == 11
    assert len(launches[0][1]) == n_split and len(launches[1][1]) == 11


def test_verify_sweep_f32_combos_and_shapes():
    """gpu_verify_sweep.py --path f32: the T-token fp32-path launches it times (R rows a block, NT the
    bucket, at most 64 accumulators a thread), and its shapes are ones launch.f32_verify_rows gives R > 1."""
    import importlib
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        sweep = importlib.import_module("gpu_verify_sweep")
    finally:
        sys.path.pop(0)
    assert sweep._combos(5, [1, 2, 4, 8], [1, 2], f32=True) == [(1, 0), (2, 0), (4, 0), (8, 0)]  # NT = 8
    assert sweep._combos(9, [1, 2, 4, 8], [1, 2], f32=True) == [(1, 0), (2, 0), (4, 0)]  # NT = 16
    assert sweep._combos(5, [1, 4, 8], [1, 2]) == [(1, 1), (4, 1), (1, 2), (4, 2)]  # q8: R * T <= 32
    from bw24.engine.ops.cuda.launch import f32_verify_rows

    assert all(f32_verify_rows([Q[q]], k) > 1 for q, _, k in sweep.SHAPES_F32)  # where the R rule applies
    assert all(default_path(q, n, k) == "q8" for q, n, k in sweep.SHAPES)


def test_gate_emulation_rounds_the_q8_matvecs_inputs_for_the_fp32_kernels():
    """CudaOps.emulate_rounding (the gate's rounding alone) inside exact_activations: a weight the backend's
    own forward runs on the q8 path gets its input rounded by round_x_q8 into a scratch copy, which the fp32
    kernel then reads (no q8 kernel runs); a K < 2048 weight, or the exact half without the emulation, reads
    x itself. Q/K/V with its norm: the unfused norm, then the rounding, then qmv3 (not qmv3n, which would
    normalize the unrounded rows). It names what it emulates: an MoE model's head alone ("int8-head")."""
    from types import SimpleNamespace

    from bw24.engine.ops.cuda.backend import CudaOps
    from bw24.engine.ops.cuda.repack import FMT

    launches = []
    ops = CudaOps.__new__(CudaOps)
    ops.qmv_configs, ops.quantizes_activations, ops.prefill_precision = QmvConfigs(_table({})), True, "fp16"
    ops.prefill_graphs, ops.verify_rows, ops.norm_fuse = False, None, True
    ops._buf = lambda key, n, dtype=np.float32, zeroed=False: np.zeros(n, dtype)
    ops._k = lambda f, n: n
    ops._launch = lambda fn, grid, block, args, shared_mem=0: launches.append((fn.split("<")[0], args))
    ops.rmsnorm = lambda x, w, eps, out: launches.append(("rmsnorm", (x, out)))

    def weight(q, n, k):
        return SimpleNamespace(qtype=q, n=n, k=k, fmt=FMT[q], shape=(n, k), args=lambda: (None,) * 4)

    x = np.ones((1, 4096), np.float32)
    wide, narrow = weight(Q.Q4_K, 4096, 4096), weight(Q.Q4_K, 4096, 896)
    with CudaOps.exact_activations(ops):
        ops.matmul(wide, x, out=np.zeros((1, 4096), np.float32))
        assert [n for n, _ in launches] == ["qmv"] and launches[0][1][4] is x  # the exact half: x itself
        launches.clear()
        with CudaOps.emulate_rounding(ops) as names:
            assert names == ["int8-activation"]
            ops.matmul(wide, x, out=np.zeros((1, 4096), np.float32))
            (r, (xin, *_, y)), (mv, margs) = launches
            assert (r, mv) == ("round_x_q8", "qmv") and xin is x and margs[4] is y and y is not x
            launches.clear()
            ops.matmul(narrow, x[:, :896].copy(), out=np.zeros((1, 4096), np.float32))
            assert [n for n, _ in launches] == ["qmv"]  # K < Q8_MIN_K: fp32 in the backend's own forward too
            launches.clear()
            qkv = [weight(Q.Q4_K, 4096, 4096), weight(Q.Q4_K, 1024, 4096), weight(Q.Q6_K, 1024, 4096)]
            outs = [np.zeros((1, w.n), np.float32) for w in qkv]
            xbuf = np.zeros_like(x)
            ops.norm_matmul_multi(x, np.ones(4096, np.float32), 1e-6, qkv, x=xbuf, outs=outs)
            assert [n for n, _ in launches] == ["rmsnorm", "round_x_q8", "qmv3"]
            assert launches[1][1][0] is xbuf and launches[2][1][0] is launches[1][1][3]
        assert not ops.emulating
    CudaOps.use_int8_activations(ops, False)  # a mixture of experts' policy: only its head rounds
    with CudaOps.exact_activations(ops), CudaOps.emulate_rounding(ops) as names:
        assert names == ["int8-head"]
        launches.clear()
        ops.matmul(wide, x, out=np.zeros((1, 4096), np.float32))
        ops.matmul(weight(Q.Q6_K, 151936, 4096), x, out=np.zeros((1, 151936), np.float32))
        assert [n for n, _ in launches] == ["qmv", "round_x_q8", "qmv"]


@pytest.mark.parametrize("value", [None, "0"])
def test_a_draft_model_takes_int8_activations_at_every_k(value, helpers):
    """CudaOps.use_draft_policy (Engine.load(draft=True)): a draft's narrow layers plan the q8 path (the real pair's
    0.5b, K = 896; smollm2's 576), their norm leaves the codes; a target's keep Q8_MIN_K's rule. BW24_DRAFT_Q8=0:
    the draft keeps the target's rule, and perf rows say so."""
    code = (PLAN_PROBE +
            "o = CudaOps.__new__(CudaOps); o.qmv_configs = QmvConfigs(Tuning()); "
            "before = o.qmv_configs.plan(Q.Q4_K, 4864, 896)[0]; o.use_draft_policy(); "
            "print(before, o.qmv_configs.plan(Q.Q4_K, 4864, 896)[0], o.qmv_configs.plan(Q.Q4_1, 1536, 576)[0], "
            "feeds_q8(o, np.zeros((1, 896), np.float32)), [p for p in o.opt_in() if 'draft' in p])")
    out = helpers.fresh_python(code, "BW24_", **({} if value is None else {"BW24_DRAFT_Q8": value}))
    if value is None:
        assert out.strip() == "f32 q8 q8 True []"
    else:
        assert out.strip() == "f32 f32 f32 False ['no_draft_q8']"
