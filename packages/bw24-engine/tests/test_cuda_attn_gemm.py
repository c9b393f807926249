"""The GEMM prefill attention's plan (ops/cuda/attn_gemm.py) without a GPU: its launches and cuBLAS
calls are run by NumPy stand-ins on host memory (the pointers are host addresses), so the layouts,
leading dimensions, batch strides, query chunks and key ranges are checked against the reference
attention. The kernels themselves are checked on the GPU by kernel_check ("prefill attention gemm")."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from bw24.engine.ops.cuda import attn_gemm
from bw24.engine.ops.ref import RefOps


def _colmajor(ptr: int, dtype, rows: int, cols: int, ld: int):
    """The column-major [rows, cols] matrix (leading dimension ld) at host address ptr, as a view."""
    it = np.dtype(dtype).itemsize
    n = (cols - 1) * ld + rows
    base = np.ctypeslib.as_array((ctypes.c_uint8 * (n * it)).from_address(ptr)).view(dtype)
    return np.lib.stride_tricks.as_strided(base, shape=(rows, cols), strides=(it, ld * it))


def _emu_gemm(ops, op_a, op_b, m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc, batch, alpha, beta):
    ops.gemms += 1
    for i in range(batch):
        A = _colmajor(a + 2 * i * sa, np.float16, *((k, m) if op_a == attn_gemm.OP_T else (m, k)), lda)
        B = _colmajor(b + 2 * i * sb, np.float16, *((n, k) if op_b == attn_gemm.OP_T else (k, n)), ldb)
        A = A.T if op_a == attn_gemm.OP_T else A
        B = B.T if op_b == attn_gemm.OP_T else B
        C = _colmajor(c + 4 * i * sc, np.float32, m, n, ldc)
        prod = alpha.item() * (A.astype(np.float64) @ B.astype(np.float64))
        C[...] = prod if beta.item() == 0 else prod + beta.item() * C


class _EmuOps:
    """The parts of CudaOps that attn_gemm uses; kernels by name, in NumPy."""

    def __init__(self, dev, params):
        self.dev, self.scratch, self.launches, self.gemms = dev, {}, [], 0
        self.params = lambda fn: params("attention_gemm.cu", fn)  # conftest.kernel_params

    def _buf(self, key, n, dtype=np.float32, zeroed=False):
        a = self.scratch.get(key)
        if a is None or a.size < n:
            a = self.scratch[key] = np.full(max(n, 1), np.nan, dtype).view(self.dev)  # NaN: unwritten reads show
        return a[:n]

    def _k(self, file, name):
        assert file == "attention_gemm.cu"
        return name

    def _launch(self, fn, grid, block, args, shared_mem=0):
        self.launches.append(fn)
        assert len(args) == len(self.params(fn)), f"{fn}: {len(args)} arguments for {self.params(fn)}"
        getattr(self, fn)(grid, *args)

    def attn_q_split(self, grid, q, T, H, D, qh, ql):
        x = np.asarray(q).reshape(T, H, D).transpose(1, 0, 2).reshape(-1)
        hi = x.astype(np.float16)
        qh[: x.size], ql[: x.size] = hi, (x - hi.astype(np.float32)).astype(np.float16)

    def attn_softmax_rows(self, grid, s, T, ld, nkeys, pos, t0, scale, softcap, window, ph, pl):
        for r in range(grid[0]):  # one block per score row (h, t)
            p = int(pos[0]) + int(t0) + r % T
            lo = max(0, p - window + 1) if window > 0 else 0
            hi = min(p, nkeys - 1)
            x = np.asarray(s[r * ld: r * ld + nkeys], np.float64) * scale
            if softcap > 0:
                x = softcap * np.tanh(x / softcap)
            live = np.zeros(nkeys, bool)
            live[lo: hi + 1] = True
            e = np.where(live, np.exp(x - x[live].max()), 0.0)
            v = (e / e.sum()).astype(np.float32)
            h = v.astype(np.float16)
            ph[r * ld: r * ld + nkeys], pl[r * ld: r * ld + nkeys] = h, (v - h.astype(np.float32)).astype(np.float16)

    def attn_o_gather(self, grid, o, T, H, DV, out):
        np.asarray(out).reshape(T, H, DV)[...] = np.asarray(o[: T * H * DV]).reshape(H, T, DV).transpose(1, 0, 2)


def _run_plan(helpers, monkeypatch, gemm, D, G, T, p0, window, softcap, budget):
    """attn_gemm.attention through the stand-ins: (its output, the reference's, the ops, chunks)."""
    monkeypatch.setattr(attn_gemm, "_gemm", gemm)
    monkeypatch.setattr(attn_gemm, "SCORE_BUDGET", budget)
    rng = np.random.default_rng(D + G + T)
    Hkv, H = 2, 2 * G
    S = p0 + T + 9  # capacity past the live keys
    q = rng.standard_normal((T, H, D)).astype(np.float32)
    kc = rng.standard_normal((Hkv, S, D)).astype(np.float16)
    vc = rng.standard_normal((Hkv, S, D)).astype(np.float16)
    kc[:, p0 + T:] = vc[:, p0 + T:] = np.nan  # keys past the chunk: a read of them would poison the output
    want = np.empty((T, H, D), np.float32)
    RefOps().attention(q, kc.astype(np.float32), vc.astype(np.float32), np.array([p0], np.int32), scale=D ** -0.5,
                       softcap=softcap, window=window, out=want)
    dev = helpers.HostDev
    ops, out = _EmuOps(dev, helpers.kernel_params), np.zeros((T, H, D), np.float32).view(dev)
    args = (q.view(dev), kc.view(dev), vc.view(dev))
    assert attn_gemm.usable(*args, p0 + T)
    attn_gemm.attention(ops, *args, np.array([p0], np.int32).view(dev), scale=D ** -0.5, softcap=softcap,
                        window=window, out=out, n_keys=p0 + T)
    return np.asarray(out), want, ops, -(-T // attn_gemm.chunk_rows(T, H, p0 + T))


@pytest.mark.parametrize("D, G, T, p0, window, softcap, budget", [
    (64, 2, 40, 0, None, None, 1 << 30),        # one chunk
    (64, 4, 70, 23, None, None, 1 << 30),       # a chunk starting after cached keys
    (32, 3, 100, 50, None, 20.0, 100_000),      # several query chunks, softcap
    (32, 2, 50, 30, 16, None, 60_000),          # sliding window across chunks
])
def test_gemm_attention_plan_matches_the_reference(helpers, monkeypatch, D, G, T, p0, window, softcap, budget):
    out, want, ops, chunks = _run_plan(helpers, monkeypatch, _emu_gemm, D, G, T, p0, window, softcap, budget)
    assert chunks > 1 or budget == 1 << 30
    assert ops.launches.count("attn_softmax_rows") == chunks and ops.gemms == 4 * chunks
    np.testing.assert_allclose(out, want, rtol=0, atol=2e-5)


def test_gemm_attention_canary_a_wrong_batch_stride_is_caught(helpers, monkeypatch):
    """The comparison above fails when one stride of the plan is off (kv heads read at half the stride)."""
    def off(ops, op_a, op_b, m, n, k, a, lda, sa, *rest):
        return _emu_gemm(ops, op_a, op_b, m, n, k, a, lda, sa // 2, *rest)

    out, want, _, _ = _run_plan(helpers, monkeypatch, off, 64, 2, 40, 0, None, None, 1 << 30)
    assert not np.allclose(out, want, rtol=0, atol=2e-5)


def test_usable_and_chunk_rows():
    f16, f32 = np.zeros((2, 64, 8), np.float16), np.zeros((2, 64, 8), np.float32)
    q = np.zeros((20, 4, 8), np.float32)
    assert attn_gemm.usable(q, f16, f16, 30)
    assert not attn_gemm.usable(q, f16, f16, None)   # no host key count: the flash kernel
    assert not attn_gemm.usable(q, f32, f32, 30)     # a float32 cache: the flash kernel
    assert not attn_gemm.usable(q, f16, f16, 10)     # fewer keys than queries: not a causal chunk
    assert not attn_gemm.usable(q, f16, f16, 65)     # past the cache
    assert attn_gemm.chunk_rows(512, 32, 512, 256 << 20) == 512 and attn_gemm.chunk_rows(512, 32, 512) == 512
    rows = attn_gemm.chunk_rows(4096, 32, 4096, 256 << 20)
    assert rows % 16 == 0 and 8 * 32 * 4096 * rows <= 256 << 20 < 8 * 32 * 4096 * (rows + 16)
    assert attn_gemm.chunk_rows(100, 64, 40000, 1 << 10) == 16  # never below 16 rows


@pytest.mark.parametrize("env,T,H,n_keys,want", [
    ("auto", 512, 32, 512, "gemm"),    # the 8B's pp512 chunk: 2^23 score elements
    ("auto", 512, 16, 512, "flash"),   # the 0.6B's pp512 chunk: 2^22, host-bound, slower on the GEMMs
    ("auto", 512, 16, 1024, "gemm"),   # the same model's later pp4096 chunks
    ("1", 20, 4, 30, "gemm"), ("0", 512, 32, 4096, "flash"),
])
def test_prefill_attention_dispatch_auto_rule(monkeypatch, env, T, H, n_keys, want):
    """CudaOps._attention_prefill: BW24_ATTN_GEMM=auto (the default) takes the GEMMs for a chunk of at least
    MIN_SCORES score elements, 1 always, 0 never; and never without a float16 cache (usable)."""
    from bw24.engine.ops.cuda import prefill
    from bw24.engine.ops.cuda.backend import CudaOps

    seen = []
    monkeypatch.setattr(attn_gemm, "attention", lambda *a, **kw: seen.append("gemm"))
    monkeypatch.setattr(prefill, "attention", lambda *a, **kw: seen.append("flash"))
    ops = CudaOps.__new__(CudaOps)
    ops.attn_gemm_env, ops.attn_gemm, ops.attn_gemm_auto = env, env == "1", env not in ("0", "1")
    ops.prefill_graphs = False  # (BW24_PREFILL_GRAPH=0: with graphs the GEMMs, sized by n_keys, never run)
    q = np.zeros((T, H, 8), np.float32)
    for dtype in (np.float16, np.float32):
        kc = np.zeros((2, 4096, 8), dtype)
        ops._attention_prefill(q, kc, kc, None, scale=1.0, softcap=None, window=None, out=None, n_keys=n_keys)
    assert seen == [want, "flash"]
    assert ("attn_gemm" in ops.opt_in(), "no_attn_gemm" in ops.opt_in()) == (env == "1", env == "0")


def test_attn_gemm_env_is_checked(monkeypatch):
    from bw24.engine.ops.cuda.backend import CudaOps

    monkeypatch.setattr(CudaOps, "attn_gemm_env", "yes")
    with pytest.raises(ValueError, match="BW24_ATTN_GEMM='yes'"):
        CudaOps()


def _dispatch(monkeypatch, ops, cases):
    """Where CudaOps._attention_prefill sends each (T, H, D, cache dtype, n_keys) chunk: mma, gemm or flash."""
    from bw24.engine.ops.cuda import attn_mma, prefill

    seen = []
    monkeypatch.setattr(attn_mma, "attention", lambda *a, **kw: seen.append("mma"))
    monkeypatch.setattr(attn_gemm, "attention", lambda *a, **kw: seen.append("gemm"))
    monkeypatch.setattr(prefill, "attention", lambda *a, **kw: seen.append("flash"))
    for T, H, D, dtype, n_keys in cases:
        q, kc = np.zeros((T, H, D), np.float32), np.zeros((8, 4096, D), dtype)
        ops._attention_prefill(q, kc, kc, None, scale=1.0, softcap=None, window=None, out=None, n_keys=n_keys)
    return seen


def _ops(gemm_env: str, mma_env: str):
    from bw24.engine.ops.cuda.backend import CudaOps

    ops = CudaOps.__new__(CudaOps)
    ops.attn_gemm_env, ops.attn_gemm, ops.attn_gemm_auto = gemm_env, gemm_env == "1", gemm_env not in ("0", "1")
    ops.attn_mma_env, ops.attn_mma, ops.attn_mma_auto = mma_env, mma_env == "1", mma_env == "auto"
    ops.prefill_graphs = False  # the eager rules (BW24_PREFILL_GRAPH=0); the graph rule has its own test
    ops.attn_mma_split = False  # (the key splits, on by default, read the SM count: their own test below)
    return ops


def test_prefill_attention_dispatch_mma(monkeypatch):
    """BW24_ATTN_MMA=1: a float16 cache at a compiled head dim (64, 128) takes the tensor-core flash kernel
    (ops/cuda/attn_mma.py) before the GEMM rule; a float32 cache or another head dim (gemma3's 256) does not."""
    from bw24.engine.ops.cuda import attn_mma

    ops = _ops("1", "1")
    cases = [(512, 32, D, dtype, 512) for D, dtype in ((128, np.float16), (64, np.float16), (128, np.float32),
                                                        (256, np.float16), (96, np.float16))]
    assert _dispatch(monkeypatch, ops, cases) == ["mma", "mma", "flash", "gemm", "gemm"]
    assert "attn_mma" in ops.opt_in() and "no_attn_mma" not in ops.opt_in()
    assert attn_mma.instances() == ("attn_mma<64,64>", "attn_mma<128,128>", "attn_mma_combine<64>",
                                    "attn_mma_combine<128>")


@pytest.mark.parametrize("gemm_env,mma_env,want", [
    ("auto", "auto", ["mma", "flash", "mma", "gemm"]),   # the defaults: mma where the GEMM rule would take GEMM
    ("auto", "0", ["gemm", "flash", "gemm", "gemm"]),    # BW24_ATTN_MMA=0: the GEMM path as before a6dcfe3
    ("1", "auto", ["gemm", "gemm", "gemm", "gemm"]),     # BW24_ATTN_GEMM=1 forces GEMM (kernel_check's cases)
    ("0", "auto", ["flash", "flash", "flash", "flash"]), # BW24_ATTN_GEMM=0: no auto rule, so no auto mma
    ("auto", "1", ["mma", "mma", "mma", "gemm"]),        # every usable chunk
])
def test_prefill_attention_dispatch_mma_auto(monkeypatch, gemm_env, mma_env, want):
    """BW24_ATTN_MMA=auto (the default) replaces the GEMM path by the tensor-core flash kernel for the chunks
    the GEMM rule picks (the 8B's pp512: 2^23 score elements), keeps the CUDA-core flash kernel below it (the
    0.6B's pp512: 2^22, where mma measured 16.3k vs 28.7k tok/s); a head dim without an instance keeps GEMM."""
    cases = [(512, 32, 128, np.float16, 512), (512, 16, 128, np.float16, 512), (512, 16, 64, np.float16, 1024),
             (512, 32, 256, np.float16, 512)]
    ops = _ops(gemm_env, mma_env)
    assert _dispatch(monkeypatch, ops, cases) == want
    assert ("no_attn_mma" in ops.opt_in()) == (mma_env == "0") and ("attn_mma" in ops.opt_in()) == (mma_env == "1")


def test_attn_mma_env_is_checked(monkeypatch):
    from bw24.engine.ops.cuda.backend import CudaOps

    monkeypatch.setattr(CudaOps, "attn_mma_env", "on")
    with pytest.raises(ValueError, match="BW24_ATTN_MMA='on'"):
        CudaOps()


def test_prefill_graphs_choose_the_attention_without_the_position(monkeypatch):
    """With prefill graphs (the default; BW24_PREFILL_GRAPH=0 turns them off) one captured chunk serves every position, so its attention
    path may not depend on n_keys: mma wherever usable (a float16 cache at head dim 64 / 128), else the flash
    kernel, never the GEMMs (sized by n_keys). Without them the auto rule's choices, which do move with n_keys."""
    cases = [(512, 16, 128, np.float16, 512), (512, 16, 128, np.float16, 4096), (512, 32, 128, np.float32, 4096),
             (512, 32, 256, np.float16, 4096)]
    ops = _ops("auto", "auto")
    ops.prefill_graphs = True
    assert "no_prefill_graph" not in ops.opt_in()  # the default
    ops.in_prefill_graph = True  # inside a PrefillGraph chunk
    assert _dispatch(monkeypatch, ops, cases) == ["mma", "mma", "flash", "flash"]
    ops.in_prefill_graph = False  # a chunk outside one (a MoE model's, kernel-check's cases): the eager rules,
    assert _dispatch(monkeypatch, ops, cases) == ["flash", "mma", "flash", "gemm"]  # with graphs on (H200, 95e6db6)
    ops.prefill_graphs = False
    assert _dispatch(monkeypatch, ops, cases) == ["flash", "mma", "flash", "gemm"]
    assert "no_prefill_graph" in ops.opt_in()


def test_attn_mma_split_plan_fills_the_gpu_only_where_a_chunk_leaves_it_idle():
    """BW24_ATTN_MMA_SPLIT: keys in splits where a chunk has fewer than 2 blocks a SM (H200: 132 SMs), whole
    64-key tiles, at most 8 splits, each at least 256 keys; from the cache's capacity (position-free)."""
    from bw24.engine.ops.cuda.attn_mma import split_plan

    assert split_plan(512, 2, 8, 4352, 132) == 896  # the 0.6B's 512-token chunk: 128 blocks -> 5 splits
    assert split_plan(512, 4, 8, 4352, 132) == 1472  # the 8B's: 256 blocks -> 3 splits
    assert split_plan(2048, 2, 8, 4352, 132) == 0  # 512 blocks: no split
    assert split_plan(512, 2, 8, 500, 132) == 0  # fewer than 2 x 256 keys
    for T, G, Hkv, S in ((17, 1, 2, 600), (100, 3, 2, 4352), (64, 8, 1, 40000)):
        k = split_plan(T, G, Hkv, S, 132)
        assert k > 0 and k % 64 == 0 and -(-S // k) <= 8 and k >= 256


def _split_attention_np(q, kc, vc, p0, G, window, kspan, short: int = 0):
    """NumPy mirror of attn_mma with key splits + attn_mma_combine (the tile's [lo, hi], its splits, the
    per-split masks and the merge), in float64: what kernel_check's split cases hold the kernels to."""
    T, H, D = q.shape
    out = np.zeros((T, H, D))
    for hk in range(H // G):
        rows = T * G
        for r0 in range(0, rows, 64):
            hi = p0 + (min(r0 + 64, rows) - 1) // G
            lo = max(0, p0 + r0 // G - window + 1) if window else 0
            zs = range(lo // kspan, hi // kspan + 1)
            for i in range(r0, min(r0 + 64, rows)):
                t, h = i // G, hk * G + i % G
                p, lrow = p0 + t, max(0, p0 + t - window + 1) if window else 0
                parts = []
                for z in zs:
                    kb0, kb1 = max(lo, z * kspan), min(hi, z * kspan + kspan - 1) - short
                    j = np.arange(kb0, kb1 + 1)
                    j = j[(j >= lrow) & (j <= p)]
                    if j.size == 0:
                        parts.append((-np.inf, 0.0, np.zeros(D)))
                        continue
                    s = kc[hk, j] @ q[t, h] / np.sqrt(D)
                    m = s.max()
                    e = np.exp(s - m)
                    parts.append((m, e.sum(), e @ vc[hk, j]))
                M = max(m for m, _, _ in parts)
                w = [0.0 if m == -np.inf else np.exp(m - M) for m, _, _ in parts]
                out[t, h] = sum(wz * o for wz, (_, _, o) in zip(w, parts, strict=True)) / \
                    sum(wz * lz for wz, (_, lz, _) in zip(w, parts, strict=True))
    return out


@pytest.mark.parametrize("T,G,p0,window,kspan", [(100, 2, 200, None, 64), (40, 5, 1000, 257, 192),
                                                  (77, 7, 64, 32, 64), (30, 3, 0, None, 256)])
def test_key_splits_cover_each_rows_keys_once_and_merge_to_the_softmax(T, G, p0, window, kspan):
    from bw24.engine.ops.ref import RefOps

    rng = np.random.default_rng(3)
    D, Hkv = 16, 2
    S = p0 + T + 7
    q = rng.standard_normal((T, Hkv * G, D)).astype(np.float32)
    kc, vc = rng.standard_normal((Hkv, S, D)).astype(np.float32), rng.standard_normal((Hkv, S, D)).astype(np.float32)
    want = np.empty((T, Hkv * G, D), np.float32)  # the engine's reference attention (float32 in, float64 softmax)
    RefOps().attention(q, kc, vc, np.array([p0], np.int32), scale=D ** -0.5, softcap=None, window=window, out=want)
    assert np.allclose(_split_attention_np(q, kc, vc, p0, G, window, kspan), want, atol=1e-5)
    # canary: splits that stop one key short of their span (kb1 - 1) lose keys, and that is caught
    assert not np.allclose(_split_attention_np(q, kc, vc, p0, G, window, kspan, short=1), want, atol=1e-5)


def test_attn_mma_split_dispatch(monkeypatch):
    """BW24_ATTN_MMA_SPLIT (on by default) hands split_plan's kspan to the mma kernel; off (=0), 0 (one
    pass), and perf rows record "no_attn_mma_split"."""
    from bw24.engine.ops.cuda import attn as _attn
    from bw24.engine.ops.cuda import attn_mma

    seen = []
    monkeypatch.setattr(attn_mma, "attention", lambda *a, **kw: seen.append(kw["kspan"]))
    monkeypatch.setattr(_attn, "_sm_count", lambda: 132)
    ops = _ops("auto", "1")
    del ops.attn_mma_split  # the class default (BW24_ATTN_MMA_SPLIT unset)
    q, kc = np.zeros((512, 16, 128), np.float32), np.zeros((8, 4352, 128), np.float16)
    assert ops.attn_mma_split and "no_attn_mma_split" not in ops.opt_in()  # the default
    for split in (False, True):
        ops.attn_mma_split = split
        ops._attention_prefill(q, kc, kc, None, scale=1.0, softcap=None, window=None, out=None, n_keys=512)
    assert seen == [0, 896]
    ops.attn_mma_split = False
    assert "no_attn_mma_split" in ops.opt_in()
