"""CPU checks of the prefill paths (no GPU needed): a NumPy twin of attention_prefill.cu's tiling
(warp row blocks, 32-key tiles, causal/window bounds from pos, online softmax) against RefOps, the
fp16 GEMM precision arithmetic of prefill_gemm.cu, the bounded weight scratch, and the dispatch.
The kernels themselves run against RefOps in `bw24 kernel-check --only prefill` on a GPU."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from bw24.engine.ops.cuda import prefill
from bw24.engine.ops.ref import RefOps


def attn_prefill_twin(q, kc, vc, p0, scale, softcap, window, rw, skip_last_key=False):
    """attn_prefill<D, Dv, G, RW> in NumPy, loop for loop (float32; lanes vectorised)."""
    T, H, D = q.shape
    Hkv, S, Dv = vc.shape
    G = H // Hkv
    out = np.full((T, H, Dv), np.nan, np.float32)
    f32 = np.float32
    for hk in range(Hkv):
        rows = T * G
        for wr0 in range(0, rows, rw):  # warp w of block b starts at b*4*RW + w*RW: every multiple of RW
            nr = min(rw, rows - wr0)
            hi = p0 + (wr0 + nr - 1) // G
            lo = max(0, p0 + wr0 // G - window + 1) if window else 0
            i = wr0 + np.arange(nr)
            t, h = i // G, hk * G + i % G
            prow = p0 + t
            lrow = np.maximum(0, prow - window + 1) if window else np.zeros(nr, int)
            Q = q[t, h]  # [nr, D]
            m = np.full(nr, -np.inf, f32)
            lsum, acc = np.zeros(nr, f32), np.zeros((nr, Dv), f32)
            for j0 in range(lo, hi + 1, 32):
                j = j0 + np.arange(32)
                live = j <= hi
                s = np.zeros((nr, 32), f32)
                s[:, live] = Q @ kc[hk, j[live]].T
                sc = s * f32(scale)
                if softcap:
                    sc = f32(softcap) * np.tanh(sc / f32(softcap))
                ok = live[None] & (j[None] >= lrow[:, None]) & (j[None] <= prow[:, None])
                sc = np.where(ok, sc, -np.inf).astype(f32)
                mn = np.maximum(m, sc.max(axis=1))
                upd = mn != -np.inf
                with np.errstate(invalid="ignore"):
                    corr = np.where(upd, np.exp(m - mn), 0).astype(f32)
                    p = np.where(ok & upd[:, None], np.exp(sc - mn[:, None]), 0).astype(f32)
                lsum = np.where(upd, lsum * corr + p.sum(axis=1), lsum).astype(f32)
                acc = np.where(upd[:, None], acc * corr[:, None], acc).astype(f32)
                m = np.where(upd, mn, m).astype(f32)
                nk = min(31 if skip_last_key else 32, hi - j0 + 1)
                acc += p[:, :nk] @ vc[hk, j0:j0 + nk]
            out[t, h] = acc / lsum[:, None]
    return out


CONFIGS = [  # D, G, T, p0, window, softcap
    (64, 3, 17, 0, None, None), (64, 7, 45, 37, None, None), (64, 1, 70, 0, 9, None),
    (64, 5, 40, 100, 57, None), (128, 4, 33, 70, None, 30.0), (128, 8, 20, 0, None, None),
    (256, 4, 19, 40, 16, 50.0), (128, 2, 65, 3, 64, None),
]


def _attn_inputs(D, G, T, p0, rng):
    Hkv = 2
    q = rng.standard_normal((T, Hkv * G, D)).astype(np.float32)
    S = p0 + T + 5
    kc = rng.standard_normal((Hkv, S, D)).astype(np.float32)
    vc = rng.standard_normal((Hkv, S, D)).astype(np.float32)
    return q, kc, vc


def _ref_attn(q, kc, vc, p0, scale, softcap, window):
    want = np.empty((q.shape[0], q.shape[1], vc.shape[2]), np.float32)
    RefOps().attention(q, kc, vc, np.array([p0], np.int32), scale=scale, softcap=softcap, window=window, out=want)
    return want


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "D{}-G{}-T{}-pos{}-w{}-cap{}".format(*c))
def test_attention_prefill_tiling_matches_reference(cfg):
    D, G, T, p0, window, softcap = cfg
    q, kc, vc = _attn_inputs(D, G, T, p0, np.random.default_rng(D + G + T))
    scale = D ** -0.5
    got = attn_prefill_twin(q, kc, vc, p0, scale, softcap, window, prefill.attn_rows_per_warp(D))
    want = _ref_attn(q, kc, vc, p0, scale, softcap, window)
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert np.all(np.isfinite(got)) and rel < 1e-5


def test_attention_prefill_twin_canary_dropped_key_fails():
    """The kernel's planted bug (each tile's last key dropped from P.V) must land far outside 1e-5."""
    D, G, T, p0, window, softcap = 64, 3, 40, 30, None, None
    q, kc, vc = _attn_inputs(D, G, T, p0, np.random.default_rng(1))
    got = attn_prefill_twin(q, kc, vc, p0, D ** -0.5, softcap, window, 8, skip_last_key=True)
    want = _ref_attn(q, kc, vc, p0, D ** -0.5, softcap, window)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) > 1e-2


def _f16(a):
    return np.asarray(a, np.float32).astype(np.float16).astype(np.float64)


def _x_to_half(x):
    """x_to_half: e = floor(log2 max|x_t|) - 14 from the exponent bits; xh, xl of x * 2^-e."""
    m = np.abs(x).max(axis=1, keepdims=True).astype(np.float32)
    e = (m.view(np.int32) >> 23 & 0xFF).astype(np.int64)
    e = np.where(e > 0, e - 127, 0) - 14
    v = x.astype(np.float32) * np.exp2(-e).astype(np.float32)
    xh = _f16(v)
    return xh, _f16(v - xh), np.exp2(e)


@pytest.mark.parametrize("scale", [1.0, 3e5, 1e-6])
def test_gemm_precisions_split_is_fp32_like_fp16_is_not(scale):
    """The arithmetic of prefill.gemm: split error ~1e-7 relative (fits the 2e-5 matmul class), fp16
    ~3e-4 (fits gemm16's 2e-3, and is the reason split is the default), for |x| far above fp16's range."""
    rng = np.random.default_rng(3)
    W = (rng.standard_normal((97, 544)) * 0.02).astype(np.float32)  # typical dequantized weights
    x = (rng.standard_normal((20, 544)) * scale).astype(np.float32)
    ref = x.astype(np.float64) @ W.T.astype(np.float64)
    xh, xl, sx = _x_to_half(x)
    wh = _f16(W)
    wl = _f16(2048.0 * (W - wh))  # dequant_rows_h's lo half, 2^11 up
    split = (xh @ wl.T * 2.0**-11 + xl @ wh.T + xh @ wh.T) * sx
    fp16 = (xh @ wh.T) * sx
    rel = lambda y: np.linalg.norm(y - ref) / np.linalg.norm(ref)  # noqa: E731
    assert rel(split) < 1e-6
    assert 1e-4 < rel(fp16) < 2e-3


@pytest.mark.parametrize("K", [64, 576, 896, 4096, 18944, 151936])
@pytest.mark.parametrize("split", [True, False])
def test_gemm_weight_chunk_stays_within_scratch(K, split):
    rows = prefill.gemm_rows(K, split)
    assert rows >= 1 and (rows == 1 or rows * K * 2 * (2 if split else 1) <= prefill.PREFILL_SCRATCH)


def test_attention_prefill_dispatch_template_and_grid():
    """prefill.attention picks attn_prefill<D,Dv,G,RW> in the compile set and one block per 4*RW rows."""
    from bw24.engine.ops.cuda.kernels import COMPILE_SET

    calls = []
    ops = SimpleNamespace(_k=lambda f, n: (f, n), _launch=lambda fn, grid, block, args: calls.append((fn, grid, block)))
    T, H, Hkv, D, S = 100, 16, 2, 128, 300
    q, out = np.zeros((T, H, D), np.float32), np.zeros((T, H, D), np.float32)
    kc = vc = np.zeros((Hkv, S, D), np.float32)
    prefill.attention(ops, q, kc, vc, np.zeros(1, np.int32), scale=0.1, softcap=None, window=None, out=out)
    (f, name), grid, block = calls[0]
    assert f == "attention_prefill.cu" and name in COMPILE_SET[f] and name == "attn_prefill<128,128,8,8>"
    assert grid == (25, 2) and block == 128  # 100 tokens x 8 heads / 32 rows per block


def test_cuda_attention_routes_long_chunks_to_prefill(monkeypatch):
    from bw24.engine.ops.cuda.backend import CudaOps

    ops = CudaOps.__new__(CudaOps)  # no GPU needed: only the dispatch line runs
    seen = []
    monkeypatch.setattr(CudaOps, "_attention_prefill", lambda self, q, *a, **kw: seen.append(q.shape[0]))
    q = np.zeros((17, 4, 64), np.float32)
    ops.attention(q, None, None, None, scale=1.0, softcap=None, window=None, out=None)
    assert seen == [17]


@pytest.mark.parametrize("tokens", [512, 7])
def test_moe_prefill_grouping_scatters_each_slot_back(monkeypatch, helpers, tokens):
    """expert_ffn's host logic (busiest-first expert chunks, padded [ec, cm] row blocks, strided batches,
    scatter back to slot order) with NumPy in place of CuPy and exact products in place of the fp16
    GEMM pieces: every slot must get its own expert's FFN, whatever the chunking. tokens=7: the 23 tokens in
    EXPERT_TOKENS pieces of 7, 7, 7 and 2 (the scratch bound), each planned on its own tokens."""
    import contextlib

    from bw24.engine.ops.cuda import moe_prefill

    rng = np.random.default_rng(4)
    T, E, F, X, k = 23, 32, 24, 6, 3
    x = rng.standard_normal((T, E)).astype(np.float32)
    ge, ue = (rng.standard_normal((X, F, E)).astype(np.float32) for _ in range(2))
    de = rng.standard_normal((X, E, F)).astype(np.float32)
    sel = np.stack([rng.choice(X, k, replace=False, p=[.4, .3, .1, .1, .05, .05]) for _ in range(T)])
    sel = sel.astype(np.int32).reshape(-1)

    def batched(ops, w, ex_d, n_e, rpe, K, xh, xl, cm, yp, ldy):
        y = _at(yp, np.float32, (n_e * cm - 1) * ldy + rpe)  # [n_e*cm, ldy] at yp, its first rpe columns
        for b, e in enumerate(ex_d):  # row block b = x block b @ W[e]^T
            blk = np.asarray(xh).reshape(n_e, cm, K)[b] @ w[e].T
            for i in range(cm):
                y[(b * cm + i) * ldy:(b * cm + i) * ldy + rpe] = blk[i]

    def glu_epi(ops, y, sx, out, F_, R, act):  # prefill_gemm.cu gemm_epilogue_glu: y [R, 2F], gate | up
        yy = np.asarray(y)[:R * 2 * F_].reshape(R, 2 * F_) * np.asarray(sx)[:R, None]
        ref.glu(yy[:, :F_].copy(), yy[:, F_:].copy(), act, out=out)

    def epi(ops, y, sx, out, N, n):
        out.reshape(-1)[:n] = y[:n] * np.repeat(sx, N)[:n]

    def rows(ops, kernel, a, rmap, R, n, b):  # moe.cu moe_gather_rows / moe_scatter_rows
        a, b, rmap = a.reshape(-1, n), b.reshape(-1, n), np.asarray(rmap)
        assert rmap.shape == (R,)
        for r, m in enumerate(rmap):
            if kernel == "moe_gather_rows":
                b[r] = a[m] if m >= 0 else 0.0
            elif m >= 0:
                b[m] = a[r]

    chunks = []
    plan = moe_prefill.plan_chunks
    monkeypatch.setattr(moe_prefill, "_batched", batched)
    monkeypatch.setattr(moe_prefill, "_rows", rows)
    monkeypatch.setattr(moe_prefill, "to_half", lambda ops, a, split: (a.reshape(-1), None, np.ones(a.shape[0])))
    monkeypatch.setattr(moe_prefill, "epilogue", epi)
    monkeypatch.setattr(moe_prefill, "glu_epilogue", glu_epi)
    monkeypatch.setattr(moe_prefill, "MOE_SCRATCH", 2 * E * F * 2 * 2)  # 2 experts a chunk: unequal paddings
    monkeypatch.setattr(moe_prefill, "EXPERT_TOKENS", tokens)
    planned_T = []
    monkeypatch.setattr(moe_prefill, "plan_chunks", lambda counts, T_, ec: planned_T.append(T_) or chunks.append(
        plan(counts, T_, ec)) or chunks[-1])
    ref = RefOps()
    ops = SimpleNamespace(cp=np, to_host=np.copy, stream=contextlib.nullcontext(), prefill_precision="split",
                          _buf=lambda key, n, dtype=np.float32: np.full(n, np.nan, dtype).view(helpers.HostDev))
    S = T * k
    d = np.full((S, E), np.nan, np.float32)
    moe_prefill.expert_ffn(ops, x, sel, ge, ue, de, k, "silu", d)
    want = np.empty((S, E), np.float32)
    for s, e in enumerate(sel):
        xt = x[s // k][None]
        h = np.empty((1, F), np.float32)
        ref.glu(xt @ ge[e].T, xt @ ue[e].T, "silu", out=h)
        want[s] = (h @ de[e].T)[0]
    np.testing.assert_allclose(d, want, rtol=1e-4, atol=1e-4)  # fp32 order only; a wrong slot is O(1)
    if tokens >= T:
        assert planned_T == [T]
        assert len(chunks[0]) == 3 and [len(c) for c in chunks[0]] == [2, 2, 2]  # all 6 experts used, 2 a chunk
    else:
        assert planned_T == [7, 7, 7, 2]


def test_moe_prefill_chunks_bound_experts_and_padded_rows(monkeypatch):
    from bw24.engine.ops.cuda import moe_prefill

    counts = np.array([0, 90, 3, 40, 0, 17, 1, 1, 200] + [5] * 20)
    T = 256
    for ec in (1, 3, 10, 100):
        chunks = moe_prefill.plan_chunks(counts, T, ec)
        flat = np.concatenate(chunks)
        assert sorted(flat) == sorted(np.flatnonzero(counts))  # every used expert once, unused ones never
        assert list(counts[flat]) == sorted(counts[flat], reverse=True)  # busiest first
        for c in chunks:
            cm = -(-counts[c].max() // 8) * 8
            assert len(c) <= ec and len(c) * cm <= moe_prefill.ROWS_PER_TOKEN * (T + 8)
    monkeypatch.setattr(moe_prefill, "ROWS_PER_TOKEN", 1)  # rows bind: 264 rows = one 200-slot expert
    assert [len(c) for c in moe_prefill.plan_chunks(counts, T, 100)][:2] == [1, 2]
    assert moe_prefill.experts_per_chunk(2048, 768, True) == 42  # qwen3-30b-a3b, split


@pytest.mark.parametrize("T,k,X,ec", [(512, 8, 128, 85), (37, 2, 8, 3), (300, 4, 1024, 100), (20, 3, 60, 1)])
def test_moe_prefill_chunk_maps_place_every_slot_as_the_per_expert_loop(T, k, X, ec):
    """chunk_maps (vectorized: one scatter per chunk) gives the maps of the per-expert loop it replaced:
    padded row b * cm + i of chunk expert b holds that expert's i-th slot in token order, or -1; every
    routed slot appears exactly once."""
    from bw24.engine.ops.cuda import moe_prefill

    rng = np.random.default_rng(T + X)
    p = 1.0 / np.arange(1, X + 1) ** 1.5  # skewed: busy experts, rare and unused ones
    sel = np.concatenate([rng.choice(X, k, replace=False, p=p / p.sum()) for _ in range(T)]).astype(np.int64)
    counts = np.bincount(sel, minlength=X)
    chunks = moe_prefill.plan_chunks(counts, T, ec)
    got = moe_prefill.chunk_maps(sel, counts, chunks, k)
    seen = []
    for (ex, cm, m), want_ex in zip(got, chunks, strict=True):
        assert np.array_equal(ex, want_ex) and cm == -(-int(counts[ex].max()) // 8) * 8
        want = np.full((len(ex), cm), -1)
        for b, e in enumerate(ex):  # the loop: expert e's slots in token (slot) order
            want[b, :counts[e]] = np.flatnonzero(sel == e)
        assert np.array_equal(m, want.reshape(-1))
        seen += list(m[m >= 0])
    assert sorted(seen) == list(range(T * k))


@pytest.mark.parametrize("f,names", [("prefill_gemm.cu", ("dequant_rows_h<7>", "x_to_half", "gemm_epilogue")),
                                     ("attention_prefill.cu", ("attn_prefill<64,64,3,8>",)),
                                     ("attention_mma.cu", ("attn_mma<128,128>",)),
                                     ("qmatvec_q8.cu", ("qmv8<7,4,4,5>", "qmv8_3<7,7,9,4,4,5>"))])
def test_planted_bug_variants_compile(f, names, tmp_path, monkeypatch):
    """kernel_check --variant planted_bug compiles these files with BW24_PLANTED_BUG (its canaries)."""
    from bw24.engine.ops.cuda.kernels import KERNEL_DIR
    from bw24.runtime import compile_cubin

    monkeypatch.setenv("BW24_KERNEL_CACHE", str(tmp_path))
    ck = compile_cubin(KERNEL_DIR / f, "90a", defines={"BW24_PLANTED_BUG": 1}, name_expressions=names)
    assert ck.cubin[:4] == b"\x7fELF" and set(ck.lowered) == set(names)


def test_planted_verify_and_split_variants_compile(tmp_path, monkeypatch):
    """The verify-only and split-heads canaries (BW24_PLANTED_VERIFY / _SPLIT, test_cuda_gpu's red runs) compile."""
    from bw24.engine.ops.cuda.kernels import KERNEL_DIR
    from bw24.runtime import compile_cubin

    monkeypatch.setenv("BW24_KERNEL_CACHE", str(tmp_path))
    names = ("qmv<7,4,4,8>", "qmv3<7,7,9,1,2,8>")
    ck = compile_cubin(KERNEL_DIR / "qmatvec.cu", "90a", defines={"BW24_PLANTED_VERIFY": 1}, name_expressions=names)
    assert ck.cubin[:4] == b"\x7fELF" and set(ck.lowered) == set(names)
    names = ("attn_split<128,128,4,32,__half>",)  # the split-heads and pipe canaries
    for d in ({"BW24_PLANTED_SPLIT": 1}, {"BW24_PLANTED_PIPE": 1, "BW24_ATTN_PIPE": 1}, {"BW24_COMBINE_UNROLL": 8},
              {"BW24_PLANTED_COMBINE": 1}):  # pass 2 unrolled 8 (BW24_ATTN_COMBINE32=0), and the 32's canary
        ck = compile_cubin(KERNEL_DIR / "attention.cu", "90a", defines=d, name_expressions=names)
        assert ck.cubin[:4] == b"\x7fELF" and set(ck.lowered) == set(names)


def test_planted_route_compiles_and_changes_the_router(tmp_path, monkeypatch):
    """The route canary (BW24_PLANTED_ROUTE, test_cuda_gpu's red run) compiles, and its moe_router differs from the
    production one (the define reaches route_token)."""
    from bw24.engine.ops.cuda.kernels import KERNEL_DIR
    from bw24.runtime import compile_cubin

    monkeypatch.setenv("BW24_KERNEL_CACHE", str(tmp_path))
    names = ("moe_router", "moe_route")
    prod = compile_cubin(KERNEL_DIR / "moe.cu", "90a", {"BW24_PDL": 1}, name_expressions=names)
    bad = compile_cubin(KERNEL_DIR / "moe.cu", "90a", {"BW24_PDL": 1, "BW24_PLANTED_ROUTE": 1}, name_expressions=names)
    assert set(bad.lowered) == set(names) and bad.cubin != prod.cubin
    # the prefetch's canary (BW24_PLANTED_ROUTERPF: the next row's weights) reaches moe_router too
    pf = compile_cubin(KERNEL_DIR / "moe.cu", "90a", {"BW24_PDL": 1, "BW24_PLANTED_ROUTERPF": 1}, name_expressions=names)
    assert set(pf.lowered) == set(names) and pf.cubin not in (prod.cubin, bad.cubin)


def test_planted_expand_compiles_and_changes_the_expand(tmp_path, monkeypatch):
    """FR-Spec's expand canary (BW24_PLANTED_EXPAND, test_cuda_gpu's red run) compiles into another cubin than the
    production spec.cu (the define reaches frspec_expand)."""
    from bw24.engine.ops.cuda.kernels import KERNEL_DIR
    from bw24.runtime import compile_cubin

    monkeypatch.setenv("BW24_KERNEL_CACHE", str(tmp_path))
    prod = compile_cubin(KERNEL_DIR / "spec.cu", "90a", {"BW24_PDL": 1})
    bad = compile_cubin(KERNEL_DIR / "spec.cu", "90a", {"BW24_PDL": 1, "BW24_PLANTED_EXPAND": 1})
    assert bad.cubin[:4] == b"\x7fELF" and bad.cubin != prod.cubin


def test_dec_mma_builds_compile_and_the_threshold_reaches_attn_split(tmp_path, monkeypatch):
    """BW24_ATTN_DEC_MMA's builds compile: attn_split with the threshold (its rows past it return: another cubin
    than the plain one, so the define reaches the code) and attn_dec_mma's planted canary (BW24_PLANTED_DECMMA),
    whose cubin differs from the production one; the same for the pipe's and the early tiles' builds and canaries."""
    from bw24.engine.ops.cuda.kernels import COMPILE_SET, KERNEL_DIR
    from bw24.runtime import compile_cubin

    monkeypatch.setenv("BW24_KERNEL_CACHE", str(tmp_path))
    names = ("attn_split<128,128,4,32,__half>",)
    plain = compile_cubin(KERNEL_DIR / "attention.cu", "90a", {"BW24_PDL": 1}, name_expressions=names)
    ck = compile_cubin(KERNEL_DIR / "attention.cu", "90a", {"BW24_PDL": 1, "BW24_ATTN_DEC_MMA": 1024},
                       name_expressions=names)
    assert ck.cubin[:4] == b"\x7fELF" and ck.cubin != plain.cubin
    names = COMPILE_SET["attention_dec_mma.cu"]

    def mma(**defines):
        return compile_cubin(KERNEL_DIR / "attention_dec_mma.cu", "90a", {"BW24_PDL": 1, **defines},
                             name_expressions=names)

    prod, bad = mma(), mma(BW24_PLANTED_DECMMA=1)
    assert set(bad.lowered) == set(names) and bad.cubin != prod.cubin
    # the cp.async pipe (BW24_DEC_MMA_PIPE) is other code; its canary changes the pipe and nothing without it
    pipe, bad_pipe = mma(BW24_DEC_MMA_PIPE=1), mma(BW24_DEC_MMA_PIPE=1, BW24_PLANTED_DECPIPE=1)
    assert set(pipe.lowered) == set(names) and pipe.cubin != prod.cubin and bad_pipe.cubin != pipe.cubin
    assert mma(BW24_PLANTED_DECPIPE=1).cubin == prod.cubin
    # the early tiles (BW24_DEC_MMA_EARLY) are other code beside the pipe; their canary changes them and nothing without
    early = mma(BW24_DEC_MMA_PIPE=1, BW24_DEC_MMA_EARLY=1)
    bad_early = mma(BW24_DEC_MMA_PIPE=1, BW24_DEC_MMA_EARLY=1, BW24_PLANTED_DECEARLY=1)
    assert set(early.lowered) == set(names) and early.cubin != pipe.cubin and bad_early.cubin != early.cubin
    assert mma(BW24_DEC_MMA_PIPE=1, BW24_PLANTED_DECEARLY=1).cubin == pipe.cubin


def test_gpu_prefill_cases_green_and_planted_bugs_red():
    """On a GPU: every prefill kernel_check case passes, and the planted bugs (a dropped weight group in
    dequant_rows_h, a dropped key per tile in attn_prefill, 16 dropped keys per tile in attn_mma, with key
    splits also the merge's last split) turn their cases red."""
    from bw24.engine.kernel_check import main
    from bw24.runtime import has_gpu, no_gpu_reason

    if not has_gpu():
        pytest.skip(f"no CUDA GPU: {no_gpu_reason()}")
    lines: list[str] = []
    assert main(seed=11, only="prefill", out=lines.append) == 0, "\n".join(lines)
    for only in ("prefill gemm Q4_K N=333 K=768 T=100", "prefill attention D=128 G=4 T=300",
                 "prefill attention mma D=128 G=4 T=300", "prefill attention mma split D=64 G=3 T=300"):
        bad: list[str] = []
        assert main(seed=11, variant="planted_bug", only=only, out=bad.append) == 1, "\n".join(bad)


def test_gemm_multi_converts_x_once_per_class(monkeypatch):
    """prefill.gemm_multi (Q/K/V, gate/up in prefill): one conversion of x per (q8, split) class of the
    weights, in the order the classes first appear, and each weight's GEMM gets its own class's conversion,
    its own output and bias (gemm converts with the same to_half / x_class, so the bits match)."""
    conv, calls = [], []
    monkeypatch.setattr(prefill, "to_half", lambda ops, x, split, q8=False, norm=None: conv.append((q8, split)) or
                        ("xs", q8, split))
    monkeypatch.setattr(prefill, "stacked_gemm", lambda ops, parts, T, xs, split, glu=None: calls.append(
        ([(w.name, o, b) for w, r0, n, o, b, res, sc in parts if (r0, n, res, sc) == (0, w.n, None, 0.0)], T, xs,
         split) + ((glu,) if glu else ())))
    # Q4_K rows decode on int8 activations (class (q8, fp16)), Q6_K here on fp32 ones (class (f32, split))
    plan = {"Q4_K": ("q8", 4, 4), "Q6_K": ("f32", 4, 4)}
    ops = SimpleNamespace(prefill_precision="auto", qmv_configs=SimpleNamespace(plan=lambda qt, n, k: plan[qt]))
    W = lambda name, qt: SimpleNamespace(name=name, qtype=qt, n=8, k=64, shape=(8, 64))  # noqa: E731
    x = np.zeros((20, 64), np.float32)
    ws, outs, biases = [W("q", "Q4_K"), W("k", "Q6_K"), W("v", "Q4_K")], ["oq", "ok", "ov"], ["bq", None, "bv"]
    prefill.gemm_multi(ops, ws, x, outs, biases)
    assert conv == [(True, False), (False, True)]  # two classes, two conversions (not three, not one)
    assert calls == [([("q", "oq", "bq"), ("v", "ov", "bv")], 20, ("xs", True, False), False),  # stacked
                     ([("k", "ok", None)], 20, ("xs", False, True), True)]  # alone in its class
    conv.clear()
    calls.clear()
    prefill.gemm_multi(ops, ws[:1] + ws[2:], x, ["oq", "ov"], [None, None])  # one class: one conversion
    assert conv == [(True, False)] and [n for n, _, _ in calls[0][0]] == ["q", "v"] and len(calls) == 1
    # gate / up with the GLU in the epilogue: only one class of two same-shaped weights without biases
    calls.clear()
    assert prefill.gemm_multi(ops, [ws[0], ws[2]], x, ["og", "ou"], [None, None], glu="silu")
    assert calls[0][-1] == "silu"
    calls.clear()
    assert not prefill.gemm_multi(ops, ws[:2], x, ["og", "ou"], [None, None], glu="silu")  # two classes
    assert not prefill.gemm_multi(ops, [ws[0], ws[2]], x, ["og", "ou"], ["bg", None], glu="silu")  # a bias
    assert all(len(c) == 4 for c in calls)  # none of those fused


def test_cuda_matmul_multi_routes_prefill_rows_to_gemm_multi(monkeypatch):
    from bw24.engine.ops.cuda.backend import CudaOps

    ops = CudaOps.__new__(CudaOps)  # no GPU needed: only the dispatch runs
    seen = []
    monkeypatch.setattr(prefill, "gemm_multi", lambda o, ws, x, outs, biases, norm=None:
                        seen.append((len(ws), x.shape[0], biases)))
    W = lambda n: SimpleNamespace(n=n, k=64, shape=(n, 64))  # noqa: E731
    x = np.zeros((17, 64), np.float32)
    ops.matmul_multi([W(8), W(4)], x, outs=[np.zeros((17, 8), np.float32), np.zeros((17, 4), np.float32)])
    assert seen == [(2, 17, [None, None])]


def _at(ptr, dtype, n: int):
    """n elements of dtype at host address ptr (a HostDev's data.ptr, or an offset into it), as a view."""
    import ctypes

    it = np.dtype(dtype).itemsize
    return np.ctypeslib.as_array((ctypes.c_uint8 * (n * it)).from_address(int(ptr))).view(dtype)


class _HostOverlap:
    """overlap.Overlap's protocol on the host: the slots in turn, every call logged (the streams are the log)."""

    def __init__(self, log, side):
        self.log, self.free, self.turn, self.side = log, [None, None], 0, side

    def take(self, ops):
        s, self.turn = self.turn, (self.turn + 1) % 2
        self.log.append(f"take {s}")
        return s

    def hand_over(self, ops):
        self.log.append("hand over")

    def release(self, ops, s):
        self.log.append(f"release {s}")


def _chunk_protocol(log: list[str], overlap: bool) -> int:
    """The chunks in a stacked GEMM's log: each one or more dequantizations then its GEMM; with the overlap each
    inside `take s` .. `hand over`, its GEMM then `release s`, s = 0, 1, 0, ... Returns the count."""
    ev, i, n = log, 0, 0
    while i < len(ev):
        if overlap:
            assert ev[i] == f"take {n % 2}", ev
            i += 1
        j = i
        while j < len(ev) and ev[j] == "dequant":
            j += 1
        assert j > i, ev
        i = j
        want = ["hand over", "gemm", f"release {n % 2}"] if overlap else ["gemm"]
        assert ev[i:i + len(want)] == want, ev
        i, n = i + len(want), n + 1
    return n


@pytest.mark.parametrize("scratch_rows,split,overlap", [(10_000, True, False), (48, True, False), (40, False, False),
                                                        (7, False, False), (48, True, True), (7, False, True)])
def test_stacked_gemm_pieces_and_columns(helpers, monkeypatch, scratch_rows, split, overlap):
    """prefill.stacked_gemm with NumPy stand-ins of dequant / products / epilogue on host memory: row chunks
    straddling weights (scratch for `scratch_rows` rows) must put every weight's rows in the chunk buffer at
    the right offset and every output's columns at the right place of y [T, sum N] (ldy). With the overlap
    (BW24_PREFILL_OVERLAP) the chunks take the two slots in turn, each chunk's dequantization on the side stream
    between its slot's take and the hand-over, its GEMM after it and the slot's release after that."""
    rng = np.random.default_rng(5)
    T, K = 19, 64
    Ns = (40, 24, 24)  # the third weight contributes rows 4..23 (20 rows)
    ws = [SimpleNamespace(n=n, k=K, fmt=7, data=rng.standard_normal((n, K)).astype(np.float32)) for n in Ns]
    log: list[str] = []
    side = SimpleNamespace()  # the side stream (the dequantizations name it)

    def dequant(ops, w, wh, wl, rows, *, row0=0, experts=None, rpe=0, stream=None):
        assert stream is (side if overlap else None)
        log.append("dequant")
        ptr = wh if isinstance(wh, np.integer) else wh.data.ptr
        _at(ptr, np.float16, rows * K)[:] = w.data[row0:row0 + rows].astype(np.float16).ravel()

    def products(ops, wh, wl, xh, xl, yp, r, T_, K_, ldc):
        log.append("gemm")
        wchunk = np.asarray(wh[: r * K]).reshape(r, K).astype(np.float32)
        y = _at(yp, np.float32, (T_ - 1) * ldc + r)
        for t in range(T_):
            y[t * ldc: t * ldc + r] = np.asarray(xh).reshape(T_, K)[t].astype(np.float32) @ wchunk.T

    def epilogue(ops, y, sx, out, N, n, bias=None, residual=None, softcap=0.0, ldy=None):
        assert residual is None and softcap == 0.0
        yy = np.asarray(y)
        for t in range(n // N):
            out[t] = yy[t * ldy: t * ldy + N] * sx[t] + (0 if bias is None else bias)

    monkeypatch.setattr(prefill, "dequant", dequant)
    monkeypatch.setattr(prefill, "products", products)
    monkeypatch.setattr(prefill, "epilogue", epilogue)
    monkeypatch.setattr(prefill, "PREFILL_SCRATCH", scratch_rows * K * 2 * (2 if split else 1))
    scratch = {}

    def buf(key, n, dtype=np.float32, zeroed=False):
        if key not in scratch or scratch[key].size < n:
            scratch[key] = np.full(n, np.nan, dtype).view(helpers.HostDev)
        return scratch[key][:n]

    ops = _EpilogueOps(buf, helpers)
    ov = _HostOverlap(log, side)
    ops.prefill_overlap, ops._capturing, ops._scratch, ops.variant = overlap, False, scratch, ""
    ops.overlap = lambda: ov
    x = rng.standard_normal((T, K)).astype(np.float16)
    outs = [np.full((T, n), np.nan, np.float32) for n in Ns]
    biases = [None, rng.standard_normal(24).astype(np.float32), None]
    parts = [(w, 0, w.n, o, b, None, 0.0) for w, o, b in zip(ws, outs, biases, strict=True)]
    parts[2] = (ws[2], 4, 20, outs[2][:, :20].copy(), None, None, 0.0)  # rows 4..23 only (an expert's slice)
    sx = np.full(T, 0.5, np.float32)
    prefill.stacked_gemm(ops, parts, T, (x.ravel(), None, sx), split)
    assert ops.launched == ["gemm_epilogue_parts"]  # three parts with at most a bias: one epilogue launch
    if overlap:  # two slots, each sized for the scratch's chunk in this precision (so they seldom grow)
        assert [scratch[f"gemm_{h}_o{i}"].size for i in range(2) for h in ("wh", "wl")[:1 + split]] == \
            [prefill.PREFILL_SCRATCH // (4 if split else 2)] * (2 + 2 * split) and "gemm_wh" not in scratch
    assert _chunk_protocol(log, overlap) == -(-84 // min(84, prefill.gemm_rows(K, split)))  # 40 + 24 + 20 rows
    wants = []
    for (w, r0, n, o, b, _, _) in parts:
        dense = w.data[r0:r0 + n].astype(np.float16).astype(np.float32)
        wants.append(0.5 * (x.astype(np.float32) @ dense.T) + (0 if b is None else b))
        np.testing.assert_allclose(o, wants[-1], rtol=1e-5, atol=1e-4)
    if overlap:  # the canary: planted_overlap dequantizes into the slot the GEMM does not read
        ops.variant, ops.launched = "planted_overlap", []
        for _, _, _, o, *_ in parts:
            o[...] = np.nan
        prefill.stacked_gemm(ops, parts, T, (x.ravel(), None, sx), split)
        assert not all(np.allclose(o, w_, rtol=1e-5, atol=1e-4) for (_, _, _, o, *_), w_ in zip(parts, wants,
                                                                                               strict=True))
        ops.variant = ""
    log.clear()
    # gate / up of one shape with the GLU in the epilogue: out = silu(gate) * up, up's out left unwritten
    ops.launched.clear()
    scratch.clear()  # the y this call asks for, alone
    g, u = np.full((T, 24), np.nan, np.float32), np.full((T, 24), np.nan, np.float32)
    prefill.stacked_gemm(ops, [(ws[1], 0, 24, g, None, None, 0.0), (ws[2], 0, 24, u, None, None, 0.0)], T,
                         (x.ravel(), None, sx), split, glu="silu")
    # in chunks of h rows of each (glu_gemm): h = the scratch's rows // 2 (at most F = 24; ROW_ALIGN = 128
    # is above every scratch here, so no rounding), y [T, 2h] per chunk, out's column slices rows F apart
    h = min(24, prefill.gemm_rows(K, split) // 2)
    assert ops.launched == ["gemm_epilogue_glu"] * -(-24 // h) and np.isnan(u).all()
    assert _chunk_protocol(log, overlap) == -(-24 // h)
    assert ops.glu_chunks == [min(h, 24 - a) for a in range(0, 24, h)]
    assert scratch["gemm_y"].size == T * 2 * h  # [T, 2h], not [T, 2F]
    gw, uw = (0.5 * (x.astype(np.float32) @ w.data.astype(np.float16).astype(np.float32).T) for w in ws[1:])
    np.testing.assert_allclose(g, gw / (1 + np.exp(-gw)) * uw, rtol=1e-5, atol=1e-4)


class _EpilogueOps:
    """Host stand-in for CudaOps in prefill launch-plan tests: _launch runs the epilogue kernels' formulas
    in NumPy on the arguments as passed (their count checked against the kernel's signature)."""

    def __init__(self, buf, helpers):
        import contextlib

        self._buf, self.stream, self.helpers, self.launched = buf, contextlib.nullcontext(), helpers, []
        self.glu_chunks: list[int] = []  # gemm_epilogue_glu's F per launch

    def _k(self, file, name):
        assert len(self.helpers.kernel_params(file, name)) > 0
        return (file, name)

    def _launch(self, fn, grid, block, args):
        from bw24.engine.ops.base import ACTIVATIONS

        file, name = fn
        assert len(args) == len(self.helpers.kernel_params(file, name)), name
        self.launched.append(name)
        y, sx = np.asarray(args[0]).ravel(), np.asarray(args[1])
        if name == "gemm_epilogue_glu":
            F, total, act, out, ldo = int(args[2]), int(args[3]), ACTIVATIONS[int(args[4])], args[5], int(args[6])
            T = total // F
            yy = y[: T * 2 * F].reshape(T, 2 * F) * sx[:T, None]
            assert act == "silu" and out.shape == (T, F) and out.strides[0] == 4 * ldo  # a slice of rows ldo apart
            out[...] = yy[:, :F] / (1 + np.exp(-yy[:, :F])) * yy[:, F:]
            self.glu_chunks.append(F)
            return
        assert name == "gemm_epilogue_parts"
        ldy, total, rest = int(args[2]), int(args[3]), args[4:]
        parts = [rest[i:i + 3] for i in (0, 3, 6)]
        ns = sum(int(n) for _, _, n in parts)
        T, c = total // ns, 0
        for out, bias, n in parts:
            n = int(n)
            if n:
                out[...] = y[: T * ldy].reshape(T, ldy)[:, c:c + n] * sx[:T, None] + (
                    0 if isinstance(bias, np.uintp) else bias)
            c += n


def test_prefill_precision_env_opt_in_and_the_gates_exact_half(monkeypatch):
    """BW24_PREFILL sets CudaOps.prefill_precision (a bad value is a clear error naming the variable); perf
    rows record auto / split (fp16 is the default); the gate's exact half runs split products and reports no fp16 rounding, the
    backend's own forwards report it (engine.verify_prefill's rounded half)."""
    from bw24.engine.ops.cuda.backend import CudaOps

    monkeypatch.setattr(CudaOps, "prefill_env", "fp32")
    with pytest.raises(ValueError, match="BW24_PREFILL='fp32'"):
        CudaOps()
    ops = CudaOps.__new__(CudaOps)
    ops.prefill_env = ops.prefill_precision = "fp16"
    ops.qmv_configs, ops.quantizes_activations = SimpleNamespace(force_path=None, f32_body=False), True
    assert not {"prefill_fp16", "prefill_auto", "prefill_split"} & set(ops.opt_in())  # fp16: the default
    assert ops.rounded_paths() == ["int8-activation", "fp16-prefill"]
    with ops.exact_activations():
        assert (ops.prefill_precision, ops.qmv_configs.force_path) == ("split", "f32")
        assert prefill.is_split(ops, q8=False) and prefill.is_split(ops, q8=True)
    assert (ops.prefill_precision, ops.qmv_configs.force_path) == ("fp16", None)
    assert not prefill.is_split(ops, q8=False)  # an MoE model's experts: one fp16 GEMM a product
    ops.prefill_env = ops.prefill_precision = "auto"  # the default until a6dcfe3: split where decode is fp32
    assert "prefill_auto" in ops.opt_in() and prefill.is_split(ops, q8=False) and not prefill.is_split(ops, q8=True)
    assert ops.rounded_paths() == ["int8-activation"]


def test_ubatch_env_sets_the_prefill_chunk(monkeypatch, helpers):
    """BW24_UBATCH: a bad value is a clear error naming the variable; a good one is the tokens a forward
    takes when Engine.load is not told (cuda's default 2048 since 8128fa9's cells, the reference's 128), recorded in
    perf rows when it differs from the default."""
    from bw24.engine.ops.base import Ops
    from bw24.engine.ops.cuda.backend import CudaOps

    assert (CudaOps.default_max_batch, CudaOps.logit_rows, Ops.default_max_batch, Ops.logit_rows) == (2048, 128, 128, None)
    # "2048": the default, set by name: not a variant of the cell
    helpers.env_refused_or_recorded(monkeypatch, "ubatch_env", "BW24_UBATCH", ("0", "-4", "2k", "99999"), "512", "2048", "ubatch")


def test_cublas_direct_finds_libcublas_not_lt():
    """Prefill graphs call CuPy's libcublas through ctypes (CuPy's wrappers refuse a capturing stream): the
    library is found among the process's mappings by name, libcublasLt and other libraries passed over."""
    from bw24.engine.ops.cuda.cublas_direct import find_loaded

    maps = ("7f00-7f10 r-xp 00000000 08:01 11 /opt/nv/lib/libcublasLt.so.13\n"
            "7f10-7f20 r-xp 00000000 08:01 12 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
            "7f20-7f30 r-xp 00000000 08:01 13 /opt/nv/cu13/lib/libcublas.so.13\n")
    assert find_loaded(maps) == "/opt/nv/cu13/lib/libcublas.so.13"
    assert find_loaded(maps.splitlines()[0]) is None


def test_attn_decode_env_forces_the_split_geometry(monkeypatch):
    """BW24_ATTN_DECODE=CH:NS: a value outside the compiled space is a clear error naming the variable; a good
    one overrides the tuning table's decode attention geometry (set before the GPU is needed) and is
    recorded in perf rows."""
    from bw24.engine.ops.cuda.attn import attn_geometry
    from bw24.engine.ops.cuda.backend import CudaOps

    for bad in ("32", "48:33", "32:40", "x:y", "32:33:1"):
        monkeypatch.setattr(CudaOps, "attn_decode_env", bad)
        with pytest.raises(ValueError, match=f"BW24_ATTN_DECODE='{bad}'"):
            CudaOps()
    monkeypatch.setattr(CudaOps, "attn_decode_env", "64:66")
    monkeypatch.setattr("bw24.runtime.require_gpu", lambda: (_ for _ in ()).throw(RuntimeError("no GPU")))
    ops = CudaOps.__new__(CudaOps)
    with pytest.raises(RuntimeError, match="no GPU"):
        ops.__init__()
    assert ops.attn_override == {"chunk": 64, "max_splits": 66}
    assert attn_geometry(None, 8192, 8, n_sm=132, override=ops.attn_override) == (64, 66)
    assert "attn_decode_64x66" in ops.opt_in()


def test_prefill_scratch_env(monkeypatch):
    """BW24_PREFILL_SCRATCH_MB: a bad value is a clear error naming the variable; a good one sets the chunk
    bytes that gemm_rows cuts by (memory.plan reads the same module value) and is recorded in perf rows."""
    from bw24.engine.ops.cuda.backend import CudaOps

    for bad in ("0", "1.5", "big", "9999"):
        monkeypatch.setattr(CudaOps, "prefill_scratch_env", bad)
        with pytest.raises(ValueError, match=f"BW24_PREFILL_SCRATCH_MB='{bad}'"):
            CudaOps()
    monkeypatch.setattr(prefill, "PREFILL_SCRATCH", prefill.PREFILL_SCRATCH)  # restored after the test
    monkeypatch.setattr(CudaOps, "prefill_scratch_env", "16")
    monkeypatch.setattr("bw24.runtime.require_gpu", lambda: (_ for _ in ()).throw(RuntimeError("no GPU")))
    with pytest.raises(RuntimeError, match="no GPU"):  # the setting is applied before the GPU is needed
        CudaOps()
    assert prefill.PREFILL_SCRATCH == 16 << 20 and prefill.gemm_rows(4096, False) == 2048
    ops = CudaOps.__new__(CudaOps)
    assert "prefill_scratch_16m" in ops.opt_in()


@pytest.mark.parametrize("fused", [True, False])
def test_cuda_ffn_glu_prefill_puts_the_glu_in_the_epilogue(monkeypatch, fused):
    """CudaOps.ffn_glu on prefill rows: one gemm_multi of gate and up with the norm and the GLU; a separate
    glu launch only where gemm_multi could not fuse it (two precision classes, say); a bad activation is a
    clear error."""
    from bw24.engine.ops.cuda.backend import CudaOps

    ops = CudaOps.__new__(CudaOps)
    seen = []
    monkeypatch.setattr(prefill, "gemm_multi", lambda o, ws, x, outs, biases, norm=None, glu=None:
                        seen.append((len(ws), x.shape[0], norm[1], glu)) or fused)
    monkeypatch.setattr(CudaOps, "glu", lambda self, g, u, act, out: seen.append(("glu", act)))
    W = SimpleNamespace(n=8, k=64, shape=(8, 64))
    h, g, u = np.zeros((20, 64), np.float32), np.zeros((20, 8), np.float32), np.zeros((20, 8), np.float32)
    ops.ffn_glu(h, np.ones(64, np.float32), 1e-6, W, W, "silu", x=None, g=g, u=u)
    assert seen == [(2, 20, 1e-6, "silu")] + ([] if fused else [("glu", "silu")])
    with pytest.raises(ValueError, match="activation 'relu'"):
        ops.ffn_glu(h, np.ones(64, np.float32), 1e-6, W, W, "relu", x=None, g=g, u=u)


def test_x_to_half_planted_variant_compiles_and_regs_reach_the_kernel(tmp_path, monkeypatch):
    """kernel_check --variant planted_xh compiles prefill_gemm.cu with BW24_PLANTED_XH (the one-read
    conversion's canary); to_half hands the kernel BW24_XH_REGS's choice (its last argument), on by
    default since 8128fa9's cells, and perf rows name it when turned off."""
    from bw24.engine.ops.cuda import prefill
    from bw24.engine.ops.cuda.backend import CudaOps
    from bw24.engine.ops.cuda.kernels import KERNEL_DIR
    from bw24.runtime import compile_cubin

    monkeypatch.setenv("BW24_KERNEL_CACHE", str(tmp_path))
    ck = compile_cubin(KERNEL_DIR / "prefill_gemm.cu", "90a", defines={"BW24_PLANTED_XH": 1},
                       name_expressions=("x_to_half",))
    assert ck.cubin[:4] == b"\x7fELF"
    launches = []
    ops = CudaOps.__new__(CudaOps)
    ops._buf = lambda key, n, dtype=np.float32: np.zeros(n, dtype)
    ops._k = lambda f, n: (f, n)
    ops._launch = lambda fn, grid, block, args, shared_mem=0: launches.append((fn, grid, block, args))
    assert ops.xh_regs and "no_xh_regs" not in ops.opt_in()  # the default
    x = np.zeros((40, 4096), np.float32)
    for regs in (False, True):
        ops.xh_regs = regs
        prefill.to_half(ops, x, split=False, q8=True)
    assert [(fn[1], grid, block, int(args[-1])) for fn, grid, block, args in launches] == \
        [("x_to_half", (40,), 1024, 0), ("x_to_half", (40,), 1024, 1)]
    ops.xh_regs = False
    assert "no_xh_regs" in ops.opt_in()


def test_dequant_staged_planted_variant_compiles_and_the_switch_reaches_the_kernel(tmp_path, monkeypatch):
    """kernel_check --variant planted_deqst compiles prefill_gemm.cu with BW24_PLANTED_DEQST (the staged stores'
    canary); prefill.dequant launches blocks of DEQ_BLOCK threads and hands the kernel BW24_DEQ_STAGED's choice
    (its last argument), on by default since the H200 run at 29169ce, and perf rows name it when turned off."""
    from bw24.engine.ops.cuda import prefill
    from bw24.engine.ops.cuda.backend import CudaOps
    from bw24.engine.ops.cuda.kernels import KERNEL_DIR
    from bw24.runtime import compile_cubin

    monkeypatch.setenv("BW24_KERNEL_CACHE", str(tmp_path))
    src = (KERNEL_DIR / "prefill_gemm.cu").read_text()
    assert f"#define DEQ_BLOCK {prefill.DEQ_BLOCK} " in src  # the stage's size and the launch agree
    ck = compile_cubin(KERNEL_DIR / "prefill_gemm.cu", "90a", defines={"BW24_PLANTED_DEQST": 1},
                       name_expressions=("dequant_rows_h<7>",))
    assert ck.cubin[:4] == b"\x7fELF"
    launches = []
    ops = CudaOps.__new__(CudaOps)
    ops._k = lambda f, n: (f, n)
    ops._launch = lambda fn, grid, block, args, shared_mem=0: launches.append((fn, grid, block, args))
    assert ops.deq_staged and "no_deq_staged" not in ops.opt_in()  # the default
    w = SimpleNamespace(fmt=7, k=768, args=lambda: (0, 0, 0, 0))
    for staged in (False, True):
        ops.deq_staged = staged
        prefill.dequant(ops, w, 1 << 20, None, 100)
    assert [(fn[1], grid, block, int(args[-1])) for fn, grid, block, args in launches] == \
        [("dequant_rows_h<7>", (19,), 128, 0), ("dequant_rows_h<7>", (19,), 128, 1)]  # 100 rows x 24 groups
    ops.deq_staged = False
    assert "no_deq_staged" in ops.opt_in()


def test_prefill_overlap_is_the_default_refused_or_recorded_and_its_second_slot_planned(monkeypatch, helpers):
    """BW24_PREFILL_OVERLAP (prefill's dequantization a chunk ahead on a side stream): on by default since the H100
    run at 76809cf measured its VRAM beside llama.cpp; 0 turns it off and perf rows say no_prefill_overlap; another
    value is an error naming the variable; the memory plan counts its SLOTS slots of PREFILL_SCRATCH, one without
    it (prefill.chunk_slots' buffers)."""
    from bw24.engine.ops.cuda import attn, memory
    from bw24.engine.ops.cuda.backend import CudaOps
    from bw24.engine.ops.cuda.overlap import SLOTS

    assert CudaOps.prefill_overlap is True and CudaOps.prefill_overlap_env == "1"
    helpers.env_switch_refuses(monkeypatch, "prefill_overlap_env", "BW24_PREFILL_OVERLAP")
    ops = CudaOps.__new__(CudaOps)
    assert "no_prefill_overlap" not in ops.opt_in()
    planned = []
    monkeypatch.setattr(memory, "plan", lambda f, cfg, n_ctx, mb, scratch, *a, **k: planned.append(scratch))
    monkeypatch.setattr(memory, "used_bytes", lambda: 0)
    monkeypatch.setattr(memory, "device_free", lambda: (1 << 40, 1 << 40))
    monkeypatch.setattr(memory, "check_fit", lambda *a: None)
    monkeypatch.setattr(attn, "plan_chunk", lambda *a: 128)
    ops._activation_policy = ops._attention_policy = ops._norm_policy = lambda cfg: None
    ops.qmv_configs, ops.kv_dtype, ops.logit_rows = SimpleNamespace(tuning=None), np.float16, None
    cfg = SimpleNamespace(n_head_kv=8)
    for on in (True, False):
        ops.prefill_overlap = on
        ops.prepare_model(None, cfg, n_ctx=64, max_batch=8)
    assert SLOTS == 2 and planned == [SLOTS * prefill.PREFILL_SCRATCH, prefill.PREFILL_SCRATCH]
    assert "no_prefill_overlap" in ops.opt_in()


def test_moe_mm_kg_env_is_checked_and_recorded(monkeypatch, helpers):
    """BW24_MOE_MM_KG (the grouped MoE GEMMs' 32-column groups a stage): 4 by default (since 6e0baa5's run), 1 or 2
    taken and recorded in perf rows, anything else a clear error naming the variable."""
    from bw24.engine.ops.cuda.backend import CudaOps

    assert CudaOps.moe_mm_kg == 4
    helpers.env_refused_or_recorded(monkeypatch, "moe_mm_kg_env", "BW24_MOE_MM_KG", ("0", "3", "8", "two"), "1", "4", "moe_mm_kg")




def test_overlap_waits_on_a_slot_free_event_only_from_the_same_capture(monkeypatch):
    """overlap.Overlap: the side stream waits on a slot's `free` event only where that event was recorded in the same
    epoch (eagerly, or in the capture under way); otherwise on a fresh fork from the backend's stream (a stream may
    wait only on events of its own capture). The slots go in turn, and each GEMM's release re-records its slot's
    event on the backend's stream."""
    import itertools

    import bw24.runtime
    from bw24.engine.ops.cuda import overlap

    log: list[tuple] = []
    made = itertools.count()

    class Ev:
        def __init__(self, **kw):
            self.name = f"ev{next(made)}"

        def record(self, stream):
            log.append(("record", self.name, stream.name))

    def stream(name):
        return SimpleNamespace(name=name, wait_event=lambda e: log.append(("wait", name, e.name)))

    monkeypatch.setattr(bw24.runtime, "new_stream", lambda: stream("side"))
    ops = SimpleNamespace(cp=SimpleNamespace(cuda=SimpleNamespace(Event=Ev)), stream=stream("main"),
                          _capturing=False, _capture_serial=0)
    ov = overlap.Overlap(ops)
    fork = ov.fork.name
    assert fork != ov.ready.name

    def chunk():
        log.clear()
        s = ov.take(ops)
        ov.hand_over(ops)
        ov.release(ops, s)
        return s, [e for e in log if e[0] == "wait" and e[1] == "side"][0][2]

    s0, w0 = chunk()  # eager, slot 0 never used: fork
    s1, w1 = chunk()  # eager, slot 1 never used: fork
    s2, w2 = chunk()  # eager, slot 0 freed eagerly: its free event
    assert (s0, s1, s2) == (0, 1, 0) and w0 == w1 == fork and w2 == ov.free[0][0].name != fork
    ops._capturing, ops._capture_serial = True, 1
    s3, w3 = chunk()  # capture 1, slot 1's free event recorded eagerly: fork
    s4, w4 = chunk()  # capture 1, slot 0's free event recorded eagerly: fork
    s5, w5 = chunk()  # capture 1, slot 1 freed in this capture: its free event
    assert (s3, s4, s5) == (1, 0, 1) and w3 == w4 == fork and w5 == ov.free[1][0].name
    ops._capture_serial = 2
    assert chunk()[1] == fork  # capture 2: slot 0's free event is capture 1's
    ops._capturing = False
    assert chunk()[1] == fork  # eager again: slot 1's free event is capture 1's
    assert ("record", ov.ready.name, "side") in log and ("wait", "main", ov.ready.name) in log  # the hand-over
