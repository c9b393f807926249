"""CI (no GPU) for BW24_GLU_GROUPS (a dense FFN's gate and up in blocks of one int8 group of the down projection's
input, the GLU and its quantization in their epilogue: kernels/qmatvec_q8.cu qmv8_glu, ops/cuda/q8.py glu_*): the plan
and the warps it keeps, the launch's signature and geometry, where its rows come from and go (the norm-ahead's codes
in, the down projection's codes out), the fallbacks, the variable. The kernel runs on the GPU in kernel-check's
`glu groups` cases (tests/test_cuda_gpu.py, with a planted canary)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from bw24.engine.ops.cuda import q8
from bw24.engine.ops.cuda.backend import CudaOps
from bw24.engine.ops.cuda.kernels import QMV_NT
from gguf.constants import GGMLQuantizationType as Q

f32 = np.float32


def _w(n, k, qtype=Q.Q4_K, fmt=7):
    return SimpleNamespace(n=n, k=k, fmt=fmt, qtype=qtype, args=lambda: ("a", "b", "c", "d"))


def _rows(dev, *shapes):
    return [np.zeros(s, f32).view(dev) for s in shapes]


def _ops(helpers, W=1, R=4, **kw):
    ops = helpers.Q8DispatchOps(W, R, kw.pop("spills", 0))
    ops.glu_groups = True
    for k, v in kw.items():
        setattr(ops, k, v)
    return ops


@pytest.mark.parametrize("W,R", [(1, 4), (2, 4), (4, 8), (1, 1), (8, 2)])
def test_the_plan_keeps_the_unfused_warps_and_a_block_of_at_most_32_warps(W, R, helpers):
    """g's bits depend on the gate/up's warps a row (and K), so the fused launch runs the unfused launch's W at every T
    (its rows then equal qmv8_3(n)'s, and a T whose block would not fit falls back to those same rows); its rows R_T
    divide 32 and a block of 2 * (32 / R_T) sub-blocks of W warps is at most 32 warps."""
    ws = (_w(3072, 1024), _w(3072, 1024))
    got = {}
    for T in range(1, QMV_NT[-1] + 1):
        x, g = _rows(helpers.HostDev, (T, 1024), (T, 3072))
        plan = q8.glu_plan(_ops(helpers, W, R), ws, x, g)
        if plan is not None:
            Wg, RT, nt = plan
            assert Wg == W and 32 % RT == 0 and (64 // RT) * Wg <= q8.GLU_MAX_WARPS and nt >= T
            assert (nt, RT) == CudaOps._verify_plan(_ops(helpers, W, R), "q8", T, R, ws, 1024)
        got[T] = plan is not None
    fits = {T: 32 % (R if T == 1 else q8.verify_rows(T)) == 0
            and (64 // (R if T == 1 else q8.verify_rows(T))) * W <= 32 for T in got}
    assert got == fits


def test_the_plan_refuses_where_it_does_not_apply(helpers):
    dev = helpers.HostDev
    ws = (_w(3072, 1024), _w(3072, 1024))
    x, g = _rows(dev, (1, 1024), (1, 3072))
    assert q8.glu_plan(_ops(helpers), ws, x, g) == (1, 4, 1)
    assert q8.glu_plan(_ops(helpers, glu_groups=False), ws, x, g) is None  # the switch
    assert q8.glu_plan(_ops(helpers, emulating=True), ws, x, g) is None  # the gate's rounding alone
    x17, g17 = _rows(dev, (17, 1024), (17, 3072))
    assert q8.glu_plan(_ops(helpers), ws, x17, g17) is None  # prefill rows
    assert q8.glu_plan(_ops(helpers), (ws[0], _w(3072, 1024, Q.Q6_K, 9)), x, g) is None  # formats differ
    assert q8.glu_plan(_ops(helpers), (ws[0], _w(2048, 1024)), x, g) is None  # shapes differ
    assert q8.glu_plan(_ops(helpers), (_w(3072, 2048), _w(3072, 2048)), x, g) is None  # not this input's
    assert q8.glu_plan(_ops(helpers), (*ws, ws[0]), x, g) is None  # three weights (Q/K/V)
    odd = (_w(3056, 1024), _w(3056, 1024))
    assert q8.glu_plan(_ops(helpers), odd, x, np.zeros((1, 3056), f32).view(dev)) is None  # F not in whole groups
    narrow = (_w(512, 1024), _w(512, 1024))  # the down projection (K = 512) would not take int8 rows: feeds_q8
    assert q8.glu_plan(_ops(helpers), narrow, x, np.zeros((1, 512), f32).view(dev)) is None
    f32_ops = _ops(helpers)
    f32_ops.qmv_configs.plan = lambda qt, n, k, gate_force=True: ("f32", 1, 4)
    assert q8.glu_plan(f32_ops, ws, x, g) is None  # the gate/up not on the q8 path
    assert q8.glu_plan(_ops(helpers, 4, 8), ws, *_rows(dev, (2, 1024), (2, 3072))) is None  # 64 warps a block


def test_the_launch_matches_the_kernels_signature_and_geometry(helpers):
    """matmul_glu: one launch of F / 32 blocks of 2 * (32 / R) * W warps, as many arguments as qmv8_glu declares, g and
    u its outputs, g's int8 rows into their own scratch (apart from the q8 scratch its input's codes may sit in), the
    norm-ahead's sums of squares and eps at its end (NULL and 0 without); then the mark, so the down projection's
    quantize launches nothing and hands on exactly those rows."""
    dev = helpers.HostDev
    ws = (_w(3072, 1024), _w(3072, 1024))
    for na in (False, True):
        ops = _ops(helpers, 2, 4)
        x, g, u = _rows(dev, (3, 1024), (3, 3072), (3, 3072))
        fn = q8.glu_kernel(ops, ws, 2, 4, 3, na)
        assert fn.name == f"qmv8_glu<7,2,4,3,{'true' if na else 'false'}>"
        q8.matmul_glu(ops, fn, ws, x, g, u, 2, 4, 0, na_eps=1e-6 if na else None)
        names = ops.names()
        assert names == (["qmv8_glu"] if na else ["quantize_x", "qmv8_glu"])
        _, args, grid, block = ops.launches[-1]
        assert grid == (3072 // 32,) and block == 16 * 2 * 32
        assert args["g"] is g and args["u"] is u and args["F"] == 3072 and args["K"] == 1024 and args["T"] == 3
        assert args["yq"].size == 3 * 3072 and np.shares_memory(args["yq"], ops.scratch["q8g_x"])
        assert not np.shares_memory(args["yq"], ops.scratch.get("q8_x", np.zeros(1)))
        if na:
            assert np.shares_memory(args["xq"], ops.scratch["q8n_x"]) and np.shares_memory(args["nss"], ops.scratch["q8n_ss"])
            assert args["eps"] == f32(1e-6)
        else:
            assert np.shares_memory(args["xq"], ops.scratch["q8_x"]) and args["eps"] == 0 and args["nss"] is not None
        n = len(ops.launches)
        yq, ys = q8.quantize(ops, g)
        assert len(ops.launches) == n and yq is not None and np.shares_memory(yq, args["yq"]) and np.shares_memory(ys, args["ys"])


def _front(helpers, **kw):
    """wo (a norm-ahead producer) -> ffn_glu -> w_down (another), as the dense forward calls them, on the stand-in."""
    dev = helpers.HostDev
    T, E, F = 1, 1024, 3072
    ops = _ops(helpers, **kw)
    wo, wg, wu, wd = _w(E, 2048), _w(F, E), _w(F, E), _w(E, F)
    a, h, xb, g, u = _rows(dev, (T, 2048), (T, E), (T, E), (T, F), (T, F))
    n1, n2 = np.ones(E, f32).view(dev), np.ones(E, f32).view(dev)
    ops.matmul_norm_ahead(wo, a, out=h, residual=h, norm=n1, eps=1e-6)
    ops.ffn_glu(h, n1, 1e-6, wg, wu, "silu", x=xb, g=g, u=u)
    ops.matmul_norm_ahead(wd, g, out=h, residual=h, norm=n2, eps=1e-6)
    return ops, dict(g=g, u=u, h=h)


def test_the_fused_front_reads_the_norm_ahead_and_feeds_the_down_projection(helpers):
    """On: quantize_x (wo's input), qmv8_na, qmv8_glu, qmv8_na (the down projection): no rmsnorm, no glu_q8, no
    quantize_x of g. qmv8_glu reads the very codes, scales and sums of squares wo's producer wrote, with the norm's eps;
    the down projection reads the very int8 rows of g qmv8_glu wrote; the activation is silu's index."""
    ops, a = _front(helpers)
    assert ops.names() == ["quantize_x", "qmv8_na", "qmv8_glu", "qmv8_na"]
    (_, prod, *_), (_, glu, *_), (_, down, *_) = ops.launches[1:]
    for p, c in (("yq", "xq"), ("ys", "xs"), ("yss", "nss")):
        assert np.shares_memory(prod[p], glu[c]), (p, c)
    assert glu["eps"] == f32(1e-6) and glu["act"] == 0 and glu["g"] is a["g"] and glu["u"] is a["u"]
    assert np.shares_memory(glu["yq"], down["xq"]) and np.shares_memory(glu["ys"], down["xs"])
    assert not np.shares_memory(down["xq"], down["yq"])  # the down's own norm rows stay apart from its input's


def test_off_or_a_spilled_build_runs_the_unfused_launches(helpers):
    """Off (the default), or on where the fused build spills registers (q8.glu_kernel): qmv8_3n and glu_q8 as before,
    the down projection reading glu_q8's rows. Behind an rmsnorm (no norm-ahead) the fused launch reads the rmsnorm's
    rows; an activation other than silu / gelu is refused by name."""
    unfused = ["quantize_x", "qmv8_na", "qmv8_3n", "glu_q8", "qmv8_na"]
    assert _front(helpers, glu_groups=False)[0].names() == unfused
    assert _front(helpers, spills=400)[0].names() == unfused
    ops = _ops(helpers, norm_ahead=False)
    dev = helpers.HostDev
    h, xb, g, u = _rows(dev, (1, 1024), (1, 1024), (1, 3072), (1, 3072))
    ops.ffn_glu(h, np.ones(1024, f32).view(dev), 1e-6, _w(3072, 1024), _w(3072, 1024), "silu", x=xb, g=g, u=u)
    assert ops.names() == ["rmsnorm", "quantize_x", "qmv8_glu"]  # (this stand-in's rmsnorm leaves no int8 rows)
    assert ops.launches[1][1]["x"] is xb and ops.launches[2][1]["nss"] is not None
    with pytest.raises(ValueError, match="relu"):
        ops.ffn_glu(h, np.ones(1024, f32).view(dev), 1e-6, _w(3072, 1024), _w(3072, 1024), "relu", x=xb, g=g, u=u)


def test_the_variable_is_opt_in_refused_or_recorded(monkeypatch, helpers):
    """BW24_GLU_GROUPS: off unless 1, any other value than 0 / 1 a clear error naming it, perf rows saying glu_groups
    when on; the planted canary's macro reaches qmatvec_q8.cu alone."""
    helpers.opt_in_switch(monkeypatch, "glu_groups", "glu_groups_env", "BW24_GLU_GROUPS", "glu_groups", "planted_glug",
                          "BW24_PLANTED_GLUG", "qmatvec_q8.cu", "norm.cu")
