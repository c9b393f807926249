"""CI (no GPU) for BW24_NORM_AHEAD (a dense block's RMSNorm split between the residual matvec ahead of it, qmv8_na,
and its q8 consumer, qmv8_3n; kernels/qmatvec_q8.cu, ops/cuda/q8.py na_*): the arithmetic the split rests on (a
group's int8 codes do not depend on the row's norm factor, up to fp32 rounding), its twins, the launch plan and
its geometry, the forward's calls, the variable. The kernels run on the GPU in kernel-check's `norm ahead` cases
(tests/test_cuda_gpu.py, with a planted canary)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from bw24.engine.ops.cuda import q8
from bw24.engine.ops.cuda.kernels import QMV_NT
from bw24.engine.ops.ref import RefOps

f32 = np.float32


def test_codes_of_h_times_w_are_the_normed_rows_codes_up_to_rounding():
    """rint(r h w / (max|r h w| / 127)) = rint(h w / (max|h w| / 127)) in exact arithmetic; in fp32 the two differ
    only where a product lands within an ulp of a .5 boundary: at most one code, rarely. The consumer's r times the
    dequantized codes of h w is then rmsnorm(h) * w's int8 image."""
    rng = np.random.default_rng(3)
    T, N, eps = 4, 4096, 1e-6
    h = (rng.standard_normal((T, N)) * rng.uniform(0.1, 30, (T, 1))).astype(f32)
    w = (1 + 0.1 * rng.standard_normal(N)).astype(f32)
    q, d, _, ss = q8.na_ref(h, w)
    r = q8.na_scale_ref(ss, N, eps)
    x = np.empty_like(h)
    RefOps().rmsnorm(h, w, eps, out=x)
    qn, dn, _ = q8.quantize_x_ref(x)
    diff = np.abs(q.astype(np.int32) - qn.astype(np.int32))
    assert diff.max() <= 1 and (diff > 0).mean() < 1e-3
    np.testing.assert_allclose(d.astype(np.float64) * r[:, None], dn, rtol=2e-6)
    ours = (q.reshape(T, -1, 32) * (d.astype(np.float64) * r[:, None])[..., None]).reshape(T, N)
    theirs = q8.dequantize_x_ref(x)
    assert np.abs(ours - theirs).max() <= 1.01 * (dn.max() + 1e-30)  # a code apart at most


def test_twins_sum_squares_as_the_butterfly_and_refuse_a_wrong_weight():
    """na_ref's sums of squares are the xor butterfly's (close to the exact sum, and not simply np.sum's order for
    every group), and a norm weight left out of the codes (the planted_na canary's bug) changes them."""
    rng = np.random.default_rng(5)
    h = rng.standard_normal((3, 1024)).astype(f32)
    w = (1 + 0.1 * rng.standard_normal(1024)).astype(f32)
    q, _, _, ss = q8.na_ref(h, w)
    exact = (h.astype(np.float64) ** 2).reshape(3, 32, 32).sum(-1)
    np.testing.assert_allclose(ss, exact, rtol=1e-6)
    seq = np.cumsum((h * h).reshape(3, 32, 32), axis=-1, dtype=f32)[..., -1]
    assert (ss != seq).any()  # the tree's order, not a sequential one
    q_planted, *_ = q8.na_ref(h, np.ones_like(w))
    assert (q_planted != q).mean() > 0.2
    r = q8.na_scale_ref(ss, 1024, 1e-6)
    np.testing.assert_allclose(r, 1 / np.sqrt((h.astype(np.float64) ** 2).mean(-1) + 1e-6), rtol=1e-6)


class PlanOps(SimpleNamespace):
    """What na_plan reads of CudaOps: the switch, the gate's emulation, the matvec plan, the verify plan."""

    def __init__(self, W: int, R: int, path: str = "q8", **kw):
        from bw24.engine.ops.cuda.backend import CudaOps

        cfg = SimpleNamespace(plan=lambda qtype, n, k, *a: (path, W, R), min_k=1024)
        super().__init__(**{"norm_ahead": True, "emulating": False, **kw}, qmv_configs=cfg, verify_rows=None)
        self._verify_plan = lambda *a: CudaOps._verify_plan(self, *a)


def _arrays(dev, T: int, N: int, K: int = 2048):
    return np.zeros((T, K), f32).view(dev), np.zeros((T, N), f32).view(dev), np.ones(N, f32).view(dev)


@pytest.mark.parametrize("W,R", [(4, 4), (1, 1), (2, 2), (2, 1), (4, 8), (1, 4)])
def test_the_producer_keeps_its_warps_for_every_token_count(W, R, helpers):
    """A row's bits depend on the producer's warps a row set (and K), so that count must be the same at T = 1 and at
    every verify bucket, or verify rows would differ from decode rows: na_warps(W, R) at every T; the rows R_T of
    each T divide 32 and hold those warps (a block of 32 rows, at most 1024 threads)."""
    w = SimpleNamespace(n=4096, qtype="Q4_K")
    plans = []
    for T in range(1, QMV_NT[-1] + 1):
        x, out, nw = _arrays(helpers.HostDev, T, 4096)
        plan = q8.na_plan(PlanOps(W, R), w, x, out, out, nw)
        assert plan is not None
        Wn, RT, nt = plan
        assert 32 % RT == 0 and Wn <= RT and (32 // RT) * Wn * 32 <= 1024 and nt >= T
        plans.append(Wn)
    assert set(plans) == {q8.na_warps(W, R)} and q8.na_warps(W, R) <= min(W, R, q8.NA_MAX_WARPS)


def test_the_plan_refuses_where_it_does_not_apply(helpers):
    dev = helpers.HostDev
    w = SimpleNamespace(n=4096, qtype="Q4_K")
    x, out, nw = _arrays(dev, 1, 4096)
    assert q8.na_plan(PlanOps(4, 4), w, x, out, out, nw) == (2, 4, 1)
    assert q8.na_plan(PlanOps(4, 4, norm_ahead=False), w, x, out, out, nw) is None  # the switch
    assert q8.na_plan(PlanOps(4, 4, emulating=True), w, x, out, out, nw) is None  # the gate's rounding alone
    assert q8.na_plan(PlanOps(4, 4, path="f32"), w, x, out, out, nw) is None  # not the q8 path
    x17, out17, _ = _arrays(dev, 17, 4096)
    assert q8.na_plan(PlanOps(4, 4), w, x17, out17, out17, nw) is None  # prefill rows
    assert q8.na_plan(PlanOps(4, 4), w, x, out, out, np.ones(2048, f32).view(dev)) is None  # a weight not [N]
    wide = SimpleNamespace(n=q8.NA_MAX_K + 1024, qtype="Q4_K")
    xw, ow, nww = _arrays(dev, 1, q8.NA_MAX_K + 1024)
    assert q8.na_plan(PlanOps(4, 4), wide, xw, ow, ow, nww) is None  # past what a consumer lane sums
    narrow = SimpleNamespace(n=512, qtype="Q4_K")  # its consumer would not be on the q8 path (feeds_q8)
    xn, on, nwn = _arrays(dev, 1, 512)
    assert q8.na_plan(PlanOps(4, 4), narrow, xn, on, on, nwn) is None


def test_the_launches_match_the_kernels_signatures_and_geometry(helpers):
    HostDev, kernel_params = helpers.HostDev, helpers.kernel_params
    """matmul_na: one qmv8_na launch of N / 32 blocks of (32 / R) * W warps, as many arguments as the kernel
    declares, the norm's scratch apart from the q8 scratch it reads its input from; the consumer (matmul_multi
    with na_eps) one qmv8_3n launch with the sums of squares and eps behind qmv8_3's arguments."""
    launches, bufs = [], {}

    def buf(key, n, dtype=f32, **kw):
        bufs[key] = bufs.get(key) if key in bufs and bufs[key].size >= n else np.zeros(max(n, 1), dtype).view(HostDev)
        return bufs[key][:n]

    ops = SimpleNamespace(_buf=buf, _q8_ready=None, _k=lambda f, n: (f, n), _k_with=lambda f, n, extra: (f, n),
                          q8_loads=lambda w, n, k, nt: (),
                          _launch=lambda fn, grid, block, args, shared_mem=0: launches.append((fn, grid, block, args)))
    w = SimpleNamespace(n=4096, fmt=7, args=lambda: (1, 2, 3, 4))
    x, out, nw = _arrays(HostDev, 3, 4096)
    q8.matmul_na(ops, w, x, out, 2, 4, 3, out, nw)
    names = [fn[1] for fn, *_ in launches]
    assert names == ["quantize_x", "qmv8_na<7,2,4,3>"]
    (_, grid, block, args) = launches[1]
    assert grid == (4096 // 32,) and block == 8 * 2 * 32
    assert len(args) == len(kernel_params("qmatvec_q8.cu", "qmv8_na"))
    assert {"q8_x", "q8n_x", "q8n_s", "q8n_ss"} <= set(bufs)
    launches.clear()
    part = (SimpleNamespace(n=256, fmt=7, args=lambda: (1, 2, 3, 4)), np.zeros((3, 256), f32), None)
    q8.matmul_multi(ops, [part, part, part], [64, 64, 0], out, 2, 4, 3, na_eps=1e-6)
    ((f, name), grid, block, args), = launches
    assert name == "qmv8_3n<7,7,7,2,4,3>" and grid == (128,) and block == 64
    assert len(args) == len(kernel_params("qmatvec_q8.cu", "qmv8_3n")) == len(kernel_params("qmatvec_q8.cu", "qmv8_3")) + 2
    assert args[0] is bufs["q8n_x"].base or np.shares_memory(args[0], bufs["q8n_x"])  # the norm's codes, not x's


class Recorder(RefOps):
    def __init__(self):
        super().__init__()
        self.calls = []

    def matmul_norm_ahead(self, w, x, *, out, residual, norm, eps):
        self.calls.append(("ahead", w, norm))
        super().matmul_norm_ahead(w, x, out=out, residual=residual, norm=norm, eps=eps)

    def matmul(self, w, x, *, out, bias=None, residual=None):
        self.calls.append(("matmul", w, None))
        super().matmul(w, x, out=out, bias=bias, residual=residual)


def test_the_dense_forward_names_each_residual_matvecs_next_norm(tmp_path, helpers):
    """Llama's (and Qwen3's) forward: wo ahead of the FFN norm, every down projection but the last ahead of the
    next layer's attention norm, the last one a plain matmul (the head's norm stays an op); the logits are the
    plain forward's (the reference's matmul_norm_ahead is matmul)."""
    path = helpers.write_tiny_gguf(tmp_path / "t.gguf", "qwen3", n_layer=3)
    rec = Recorder()
    m, plain = helpers.build_model(path, ops=rec), helpers.build_model(path)
    ids = [1, 5, 9]
    np.testing.assert_array_equal(m.feed(ids), plain.feed(ids))
    L = m.w.layers
    ahead = [(w, n) for kind, w, n in rec.calls if kind == "ahead"]
    want = [(L[0].wo, L[0].ffn_norm), (L[0].w_down, L[1].attn_norm), (L[1].wo, L[1].ffn_norm),
            (L[1].w_down, L[2].attn_norm), (L[2].wo, L[2].ffn_norm)]
    assert len(ahead) == len(want) and all(a is c and b is d for (a, b), (c, d) in zip(ahead, want, strict=True))
    last_down = [kind for kind, w, _ in rec.calls if w is L[2].w_down]
    assert last_down == ["matmul"]


def test_row_exact_ops_run_it_as_the_plain_matmul_row_by_row():
    from bw24.engine.spec.exact_ops import RowExactOps

    calls = []

    class Base(RefOps):
        def matmul(self, w, x, *, out, bias=None, residual=None):
            calls.append(x.shape[0])
            super().matmul(w, x, out=out, bias=bias, residual=residual)

    base = Base()
    rng = np.random.default_rng(2)
    w = SimpleNamespace(data=rng.standard_normal((8, 16)).astype(f32))
    x, h = rng.standard_normal((3, 16)).astype(f32), rng.standard_normal((3, 8)).astype(f32)
    want = h + x @ w.data.T
    RowExactOps(base).matmul_norm_ahead(w, x, out=h, residual=h, norm=np.ones(8, f32), eps=1e-6)
    assert calls == [1, 1, 1]
    np.testing.assert_allclose(h, want, rtol=1e-6)


def test_the_variable_decides_else_the_models_size_refused_or_recorded(monkeypatch, helpers):
    """BW24_NORM_AHEAD: unset, on for a dense model of at most NORM_AHEAD_MAX_EMBD hidden dims (the 0.6B's 1,024),
    off for a larger one (the 8B's 4,096) and for a MoE model; 1 / 0 force it on / off whatever the size, with perf
    rows saying norm_ahead / no_norm_ahead (unset: neither); any other value a clear error naming the variable;
    the planted canary's macro reaches qmatvec_q8.cu alone."""
    from types import SimpleNamespace

    from bw24.engine.ops.cuda.backend import NORM_AHEAD_MAX_EMBD, CudaOps

    assert CudaOps.norm_ahead is False and CudaOps.norm_ahead_env is None
    helpers.env_switch_refuses(monkeypatch, "norm_ahead_env", "BW24_NORM_AHEAD")
    small, large = (SimpleNamespace(is_moe=False, n_embd=n) for n in (NORM_AHEAD_MAX_EMBD, 4096))
    moe = SimpleNamespace(is_moe=True, n_embd=NORM_AHEAD_MAX_EMBD)
    ops = CudaOps.__new__(CudaOps)
    for env, want, label in ((None, (True, False, False), None), ("1", (True, True, True), "norm_ahead"),
                             ("0", (False, False, False), "no_norm_ahead")):
        ops.norm_ahead_env = env
        got = []
        for cfg in (small, large, moe):
            ops._norm_policy(cfg)
            got.append(ops.norm_ahead)
        assert tuple(got) == want, env
        rows = [o for o in CudaOps.opt_in(ops) if "norm_ahead" in o]
        assert rows == ([label] if label else []), env
    ops.pdl, ops.variant = True, "planted_na"
    assert ("BW24_PLANTED_NA", 1) in ops.kernel_defines("qmatvec_q8.cu")
    assert ("BW24_PLANTED_NA", 1) not in ops.kernel_defines("norm.cu")


def test_the_consumer_reads_what_the_producer_wrote_and_only_right_after(helpers):
    """matmul_norm_ahead then norm_matmul_multi with the same norm: quantize_x (the producer's own input), qmv8_na
    with out and residual the residual stream h and nw the norm weight, then qmv8_3n reading the very codes,
    scales and sums of squares qmv8_na wrote, with the norm's eps; no rmsnorm. Another norm weight, another eps, or
    any launch in between: rmsnorm and qmv8_3 as before (the mark is for the very next op only)."""
    from gguf.constants import GGMLQuantizationType as Q

    dev = helpers.HostDev
    T, K, N = 1, 2048, 4096
    w = SimpleNamespace(n=N, k=K, fmt=7, qtype=Q.Q4_K, args=lambda: ("a", "b", "c", "d"))
    ws = [SimpleNamespace(n=256, k=N, fmt=7, qtype=Q.Q4_K, args=lambda: ("a", "b", "c", "d")) for _ in range(2)]
    x, h, xb = (np.zeros(s, f32).view(dev) for s in ((T, K), (T, N), (T, N)))
    nw, other = np.ones(N, f32).view(dev), np.ones(N, f32).view(dev)
    outs = [np.zeros((T, 256), f32).view(dev) for _ in ws]

    def run(norm, eps, between=None):
        ops = helpers.Q8DispatchOps()
        ops.matmul_norm_ahead(w, x, out=h, residual=h, norm=nw, eps=1e-6)
        if between:
            between(ops)
        ops.norm_matmul_multi(h, norm, eps, ws, x=xb, outs=outs)
        return ops, ops.names()

    ops, names = run(nw, 1e-6)
    assert names == ["quantize_x", "qmv8_na", "qmv8_3n"]
    (_, prod, *_), (_, cons, *_) = ops.launches[1], ops.launches[2]
    assert prod["out"] is h and prod["residual"] is h and prod["nw"] is nw
    for a, b in (("yq", "xq"), ("ys", "xs"), ("yss", "nss")):
        assert np.shares_memory(prod[a], cons[b]), (a, b)
    assert not np.shares_memory(prod["xq"], prod["yq"])  # its input's codes stay apart from the norm's
    assert cons["eps"] == f32(1e-6) and cons["out0"] is outs[0] and cons["out1"] is outs[1]
    for norm, eps, between in ((other, 1e-6, None), (nw, 1e-5, None),
                               (nw, 1e-6, lambda o: o._launch(o._k("qmatvec_q8.cu", "quantize_x"), (1,), 32,
                                                              (x, 1, K, x, x)))):
        names = run(norm, eps, between)[1]
        assert names[names.index("rmsnorm"):] == ["rmsnorm", "quantize_x", "qmv8_3"]  # (this stand-in's rmsnorm
        # leaves no int8 rows, so the plain path quantizes)
