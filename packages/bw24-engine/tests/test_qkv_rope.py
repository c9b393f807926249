"""CI (no GPU) for BW24_QKV_ROPE (rope_kv's work in the Q/K/V matvec's blocks, a q or k head a block:
kernels/qmatvec_q8.cu qmv8_qkvr, ops/cuda/q8.py qkvr_*): the plan and the warps it keeps, the launch's signature and
geometry, the fallbacks, the forward's one op for the attention front and RowExactOps' rows, the variable. The kernel
runs on the GPU in kernel-check's `qkv rope` cases (tests/test_cuda_gpu.py, with a planted canary); on the CPU those
cases run on the host stand-in (tests/test_kernel_case_qkv_rope.py)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from bw24.engine.ops.cuda import q8
from bw24.engine.ops.cuda.kernels import QMV_NT
from bw24.engine.ops.ref import RefOps
from gguf.constants import GGMLQuantizationType as Q

f32 = np.float32


def _w(n, k=1024, qtype=Q.Q4_K, fmt=7):
    return SimpleNamespace(n=n, k=k, fmt=fmt, qtype=qtype, args=lambda: ("a", "b", "c", "d"))


def _ops(helpers, W=1, R=4, **kw):
    ops = helpers.host_q8(spills=kw.pop("spills", lambda name: 0))
    ops.qmv_configs.plan = lambda qt, n, k, gate_force=True: ("q8", W, R)
    ops.qkv_rope = True
    for k, v in kw.items():
        setattr(ops, k, v)
    return ops


def _shapes(dev, T=1, H=16, Hkv=8, D=128, S=64, K=1024):
    x = np.zeros((T, K), f32).view(dev)
    q = np.zeros((T, H, D), f32).view(dev)
    kc, vc = (np.zeros((Hkv, S, D), np.float16).view(dev) for _ in range(2))
    return x, q, kc, vc


WS = (_w(16 * 128), _w(8 * 128), _w(8 * 128, qtype=Q.Q6_K, fmt=9))


@pytest.mark.parametrize("W,R", [(1, 4), (2, 4), (4, 8), (1, 1)])
def test_the_plan_keeps_the_unfused_warps_and_a_head_a_block(W, R, helpers):
    """q, k and v keep the unfused launch's W at every T (their bits); a q / k block holds one head's D rows in
    sub-blocks of R = max(this T's rows, D * W / 16) (16 warps where the head allows), v sub-blocks this T's rows."""
    for T in range(1, QMV_NT[-1] + 1):
        ops = _ops(helpers, W, R)
        plan = q8.qkvr_plan(ops, WS, *_shapes(helpers.HostDev, T))
        nt, RT = ops._verify_plan("q8", T, R, WS, 1024)
        assert plan == (W, max(RT, 128 * W // 16), RT, nt)
        assert (128 // plan[1]) * W <= 16


def test_the_plan_refuses_where_it_does_not_apply(helpers):
    dev = helpers.HostDev
    x, q, kc, vc = _shapes(dev)
    assert q8.qkvr_plan(_ops(helpers), WS, x, q, kc, vc) == (1, 8, 4, 1)
    assert q8.qkvr_plan(_ops(helpers, qkv_rope=False), WS, x, q, kc, vc) is None  # the switch
    assert q8.qkvr_plan(_ops(helpers, emulating=True), WS, x, q, kc, vc) is None  # the gate's rounding alone
    assert q8.qkvr_plan(_ops(helpers), WS, *_shapes(dev, 17)) is None  # prefill rows
    assert q8.qkvr_plan(_ops(helpers), WS[:2], x, q, kc, vc) is None  # not Q/K/V
    assert q8.qkvr_plan(_ops(helpers), WS, x, q, kc, np.zeros((8, 64, 64), np.float16).view(dev)) is None  # Dv != D
    assert q8.qkvr_plan(_ops(helpers), (_w(3072), *WS[1:]), x, q, kc, vc) is None  # q rows not H * D
    assert q8.qkvr_plan(_ops(helpers), (WS[0], _w(1024, 2048), WS[2]), x, q, kc, vc) is None  # another input's
    assert q8.qkvr_plan(_ops(helpers), (WS[0], WS[1], _w(1024, qtype=Q.F16, fmt=1)), x, q, kc, vc) is None  # no q8
    f32_ops = _ops(helpers)
    f32_ops.qmv_configs.plan = lambda qt, n, k, gate_force=True: ("f32", 1, 4)
    assert q8.qkvr_plan(f32_ops, WS, x, q, kc, vc) is None  # the Q/K/V not on the q8 path


def test_the_launch_matches_the_kernels_signature_and_geometry(helpers):
    """matmul_qkvr: after the rope table (built once), one launch of H + Hkv head blocks and the v blocks (D / R
    sub-blocks of RV rows each), D / R * W warps a block, as many arguments as qmv8_qkvr declares: the three weights'
    planes, biases and outputs, the position, both caches, the rope's table and settings with rope_kv's block size,
    the norm-ahead's sums of squares and eps at its end (NULL and 0 without)."""
    dev = helpers.HostDev
    x, q3, kc, vc = _shapes(dev, T=2)
    outs = [np.zeros((2, w.n), f32).view(dev) for w in WS]
    qn = np.ones(128, f32).view(dev)
    rope = dict(base=1e6, freq_scale=1.0, rope_dim=128, mode="neox", q_norm=qn, k_norm=None, norm_eps=1e-6)
    pos = np.array([5], np.int32).view(dev)
    for na in (False, True):
        ops = helpers.Q8DispatchOps()  # (launches recorded, not computed)
        ops._rope_tabs, ops._capturing = {}, False
        fn = q8.qkvr_kernel(ops, WS, 128, 1, 8, 4, 2, na, "__half")
        assert fn.name == f"qmv8_qkvr<7,7,9,128,1,8,4,2,{'true' if na else 'false'},__half>"
        q8.matmul_qkvr(ops, fn, WS, x, outs, (None, None, None), pos, kc, vc, rope, 1, 8, 4,
                       na_eps=1e-6 if na else None)
        assert ops.names() == (["rope_table", "qmv8_qkvr"] if na else ["quantize_x", "rope_table", "qmv8_qkvr"])
        _, a, grid, block = ops.launches[-1]
        assert grid == (16 + 8 + 8 * 128 // (16 * 4),) and block == 16 * 32
        assert (a["q"], a["k"], a["v"]) == tuple(outs) and a["pos"] is pos and a["k_cache"] is kc
        assert (a["H"], a["Hkv"], a["n_ctx"], a["rope_dim"], a["neox"], a["nb"]) == (16, 8, 64, 128, 1, 128)
        assert a["q_norm"] is qn and a["k_norm"] == 0 and a["eps"] == f32(1e-6)
        assert a["na_eps"] == (f32(1e-6) if na else 0) and (a["nss"] is not None)
        n = len(ops.launches)
        q8.matmul_qkvr(ops, fn, WS, x, outs, (None, None, None), pos, kc, vc, rope, 1, 8, 4)
        assert "rope_table" not in ops.names()[n:]  # built once for the cache's positions


def test_off_or_a_spilled_build_runs_the_unfused_launches(helpers):
    """Off (the default), or on where the fused build spills registers (q8.qkvr_kernel): qmv8_3 and rope_kv, then the
    attention; on: the fused launch, then the attention; an unknown rope mode is refused by name."""
    dev = helpers.HostDev
    rng = np.random.default_rng(0)
    x, q3, kc, vc = _shapes(dev)
    h = rng.standard_normal((1, 1024)).astype(f32).view(dev)
    ws = [_w(w.n, 1024, w.qtype, w.fmt) for w in WS]

    def run(ops, mode="neox"):
        for i, w in enumerate(ws):
            ops.mats[i + 1] = rng.standard_normal((w.n, 1024))
            w.args = (lambda key: lambda: (key, 0, 0, 0))(i + 1)
        outs = [np.zeros((1, w.n), f32).view(dev) for w in ws]
        a = np.zeros((1, 16, 128), f32).view(dev)
        rope = dict(base=1e6, freq_scale=1.0, rope_dim=128, mode=mode, q_norm=None, k_norm=None, norm_eps=None)
        ops.qkv_rope_attention(h, np.ones(1024, f32).view(dev), 1e-6, ws, x=np.zeros((1, 1024), f32).view(dev),
                               outs=outs, biases=None, q=outs[0].reshape(1, 16, 128), k=outs[1].reshape(1, 8, 128),
                               v=outs[2].reshape(1, 8, 128), pos=np.array([3], np.int32).view(dev), k_cache=kc,
                               v_cache=vc, rope=rope, attn=dict(scale=0.1, softcap=0.0, window=None, out=a))
        return ops.names()

    unfused = ["rmsnorm", "qmv8_3", "rope_table", "rope_kv", "attention"]
    assert run(_ops(helpers, qkv_rope=False)) == unfused
    assert run(_ops(helpers, spills=lambda name: 116)) == unfused
    assert run(_ops(helpers)) == ["rmsnorm", "rope_table", "qmv8_qkvr", "attention"]
    with pytest.raises(ValueError, match="yarn"):
        run(_ops(helpers), mode="yarn")


def test_the_forward_takes_one_op_for_the_attention_front_and_row_exact_ops_run_it_by_rows(tmp_path, helpers):
    """Every layer's attention front is one qkv_rope_attention call (the reference composes norm_matmul_multi and
    rope_attention: the same logits as before the op); RowExactOps runs it row by row through the base's own op,
    each row at its own position with its own output row."""
    from bw24.engine.spec.exact_ops import RowExactOps

    calls = []

    class Recorder(RefOps):
        def qkv_rope_attention(self, h, norm, eps, ws, **kw):
            calls.append((h.shape[0], int(np.asarray(kw["pos"])[0]), kw["attn"]["out"].shape[0]))
            super().qkv_rope_attention(h, norm, eps, ws, **kw)

    path = helpers.write_tiny_gguf(tmp_path / "t.gguf", "qwen3", n_layer=3)
    m, plain = helpers.build_model(path, ops=Recorder()), helpers.build_model(path)
    np.testing.assert_array_equal(m.feed([1, 5, 9]), plain.feed([1, 5, 9]))
    assert calls == [(3, 0, 3)] * 3
    calls.clear()
    m.ops = m.kv.ops = RowExactOps(m.ops)  # (the spec verifier's wrap)
    m.kv.reserve(2)
    b = m.buf.view(2)
    L = m.w.layers[0]
    m.ops.qkv_rope_attention(b.h, L.attn_norm, 1e-6, (L.wq, L.wk, L.wv), x=b.x, outs=(b.q, b.k, b.v), biases=None,
                             q=b.q3, k=b.k3, v=b.v3, pos=m.kv.pos, k_cache=m.kv.k[0], v_cache=m.kv.v[0],
                             rope=dict(mode="neox", rope_dim=m.cfg.rope_dim, base=m.cfg.rope_base, freq_scale=1.0,
                                       q_norm=L.q_norm, k_norm=L.k_norm, norm_eps=1e-6),
                             attn=dict(scale=0.25, softcap=0.0, window=None, out=b.a3, n_keys=m.kv.n_past))
    p = int(np.asarray(m.kv.pos)[0])
    assert calls == [(1, p, 1), (1, p + 1, 1)]


def test_the_variable_is_opt_in_refused_or_recorded(monkeypatch, helpers):
    """BW24_QKV_ROPE: off unless 1, any other value than 0 / 1 a clear error naming it, perf rows saying qkv_rope when
    on; the planted canary's macro reaches qmatvec_q8.cu alone."""
    helpers.opt_in_switch(monkeypatch, "qkv_rope", "qkv_rope_env", "BW24_QKV_ROPE", "qkv_rope", "planted_qkvr",
                          "BW24_PLANTED_QKVR", "qmatvec_q8.cu", "rope.cu")
