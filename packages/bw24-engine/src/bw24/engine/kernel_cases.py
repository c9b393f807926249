"""The kernel_check cases: each builds random inputs, runs the ref op and the cuda op on copies,
and compares. Shapes are irregular on purpose (odd row counts, group counts that do not divide by
32 lanes, positions that straddle attention splits)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
from gguf.constants import GGMLQuantizationType as Q

from . import kernel_cases_attn
from .kernel_check import FakeTensor, Result, compare, setting
from .ops.cuda.kernels import ATTN_SHAPES
from .ops.cuda.repack import SUPPORTED, random_raw
from .sampling import SamplingParams

Case = Callable[[str, object, object, np.random.Generator], Result]


def _dev(cu, a):
    return cu._put(np.ascontiguousarray(a))


def _weight(qt, n, k, rng, name="w"):
    return FakeTensor(name, random_raw(qt, n, k, rng), qt, (n, k))


def _k_for(qt) -> int:
    return 768 if qt in (Q.Q4_K, Q.Q5_K, Q.Q6_K) else 544  # 24 / 17 groups: lanes left idle


def split_products(cu):
    """The generic matmul / matmul_multi / moe cases compare T > 16 rows (the prefill GEMMs) with the float32
    reference at the matmul tolerance, so they run split (fp32-like) products: since BW24_PREFILL=fp16 became
    the default, 23 such cases read rel ~3e-4 against 2e-5 on the H200 at e7b99ea. The fp16 GEMM has its own
    cases at its own tolerance (kernel_cases_prefill: "prefill gemm fp16", gemm16)."""
    return setting(cu, "prefill_precision", "split")


def matmul_case(qt, T, bias: bool, residual: bool) -> Case:
    def run(name, ref, cu, rng):
        n, k = 333, _k_for(qt)
        ti = _weight(qt, n, k, rng)
        x = rng.standard_normal((T, k)).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32) if bias else None
        r = rng.standard_normal((T, n)).astype(np.float32) if residual else None
        want = np.empty((T, n), np.float32)
        ref.matmul(ref.load_weight(ti), x, out=want, bias=b, residual=None if r is None else r.copy())
        out = _dev(cu, r) if residual else cu.zeros((T, n))
        with split_products(cu):
            cu.matmul(cu.load_weight(ti), _dev(cu, x), out=out, bias=None if b is None else _dev(cu, b),
                      residual=out if residual else None)  # residual aliases out, as in the forwards
        return compare(name, "matmul", cu.to_host(out), want)
    return run


def matmul_multi_case(qts, T, bias: bool) -> Case:
    """Fused Q/K/V-style launch (qmv3): up to three weights, possibly of different quant types."""
    def run(name, ref, cu, rng):
        k = 768 if any(q in (Q.Q4_K, Q.Q5_K, Q.Q6_K) for q in qts) else 544
        ns = (301, 77, 45)[: len(qts)]
        tis = [_weight(q, n, k, rng, f"{name}.w{i}") for i, (q, n) in enumerate(zip(qts, ns, strict=True))]
        x = rng.standard_normal((T, k)).astype(np.float32)
        bs = [rng.standard_normal(n).astype(np.float32) if bias else None for n in ns]
        want = [np.empty((T, n), np.float32) for n in ns]
        ref.matmul_multi([ref.load_weight(t) for t in tis], x, outs=want, biases=bs)
        outs = [cu.zeros((T, n)) for n in ns]
        with split_products(cu):
            cu.matmul_multi([cu.load_weight(t) for t in tis], _dev(cu, x), outs=outs,
                            biases=[None if b is None else _dev(cu, b) for b in bs])
        return compare(name, "matmul", np.concatenate([cu.to_host(o).ravel() for o in outs]),
                       np.concatenate([w.ravel() for w in want]))
    return run


def decode_verify_case(qt, cfg) -> Case:
    """Speculative verify (T > 1) must give bit-identical rows to decode (T = 1) for one weight, with
    K long enough that every thread walks several groups (ARCHITECTURE: summation order contract)."""
    def run(name, ref, cu, rng):
        n, k = 67, 4352  # 136 groups / 17 superblocks
        w = cu.load_weight(_weight(qt, n, k, rng, name))  # unique name: weights are cached by name+address
        cu.set_launch_config("qmatvec", qt.name, cfg)
        try:
            x = _dev(cu, rng.standard_normal((11, k)).astype(np.float32))
            ones = [cu.zeros((1, n)) for _ in range(11)]
            for t in range(11):
                cu.matmul(w, x[t:t + 1], out=ones[t])
            got, many = [], []
            for T in (6, 11):  # two token buckets (QMV_NT 8 and 16)
                m = cu.zeros((T, n))
                cu.matmul(w, x[:T], out=m)
                many.append(cu.to_host(m))
                got += [cu.to_host(o) for o in ones[:T]]
            return compare(name, "exact", np.concatenate(got), np.concatenate(many))
        finally:
            cu.set_launch_config("qmatvec", qt.name, None)
    return run


def f32_verify_case(qts, k: int) -> Case:
    """The fp32-path verify launch, whose rows a block launch.f32_verify_rows picks by quant type and K (4 for
    Q4_K, 2 with a Q6_K part, from K = 1024), gives rows bit-identical to T = 1 launches: one weight (qmv),
    or two or three of one input (qmv3, a Q/K/V with a Q6_K V), row counts that leave a partial block."""
    def run(name, ref, cu, rng):
        ns = (67, 45, 30)[: len(qts)]
        ws = [cu.load_weight(_weight(qt, n, k, rng, f"{name}.w{i}")) for i, (qt, n) in enumerate(zip(qts, ns, strict=True))]
        x = _dev(cu, rng.standard_normal((11, k)).astype(np.float32))

        def rows(a, b):
            outs = [cu.zeros((b - a, n)) for n in ns]
            if len(ws) == 1:
                cu.matmul(ws[0], x[a:b], out=outs[0])
            else:
                cu.matmul_multi(ws, x[a:b], outs=outs)
            return np.concatenate([cu.to_host(o) for o in outs], axis=1)

        for qt in set(qts):
            cu.set_launch_config("qmatvec", qt.name, {"warps": 1, "rows": 4, "path": "f32"})
        try:
            got, want = [], []
            for T in (5, 11):  # the 8 and 16 buckets
                got.append(rows(0, T))
                want += [rows(t, t + 1) for t in range(T)]
            return compare(name, "exact", np.concatenate(got), np.concatenate(want))
        finally:
            for qt in set(qts):
                cu.set_launch_config("qmatvec", qt.name, None)
    return run


def embed_case(qt) -> Case:
    def run(name, ref, cu, rng):
        v, k = 77, _k_for(qt)
        ti = _weight(qt, v, k, rng, "emb")
        ids = rng.integers(0, v, size=5).astype(np.int32)
        want = np.empty((5, k), np.float32)
        ref.embed(ids, ref.load_weight(ti), 1.7, out=want)
        out = cu.zeros((5, k))
        cu.embed(_dev(cu, ids), cu.load_weight(ti), 1.7, out=out)
        return compare(name, "exact", cu.to_host(out), want)
    return run


def logits_case(softcap) -> Case:
    def run(name, ref, cu, rng):
        v, k = 1001, 576
        ti = _weight(Q.Q8_0, v, k, rng, "out")
        x = rng.standard_normal((1, k)).astype(np.float32)
        want = np.empty((1, v), np.float32)
        ref.logits(x, ref.load_weight(ti), softcap, out=want)
        out = cu.zeros((1, v))
        cu.logits(_dev(cu, x), cu.load_weight(ti), softcap, out=out)
        return compare(name, "matmul", cu.to_host(out), want)
    return run


def rmsnorm_case(shape, add: bool) -> Case:
    def run(name, ref, cu, rng):
        x = (rng.standard_normal(shape) * 3).astype(np.float32)
        w = rng.standard_normal(shape[-1]).astype(np.float32)
        a = rng.standard_normal(shape).astype(np.float32) if add else None
        xr, want = x.copy(), np.empty(shape, np.float32)
        ref.rmsnorm(xr, w, 1e-6, out=want, add=a)
        xd, out = _dev(cu, x), cu.zeros(shape)
        cu.rmsnorm(xd, _dev(cu, w), 1e-6, out=out, add=None if a is None else _dev(cu, a))
        return compare(name, "elementw", np.concatenate([cu.to_host(out).ravel(), cu.to_host(xd).ravel()]),
                       np.concatenate([want.ravel(), xr.ravel()]))
    return run


def rope_case(mode, T, H, Hkv, D, rope_dim, p0) -> Case:
    def run(name, ref, cu, rng):
        S = p0 + T + 3
        q = rng.standard_normal((T, H, D)).astype(np.float32)
        k = rng.standard_normal((T, Hkv, D)).astype(np.float32)
        v = rng.standard_normal((T, Hkv, D)).astype(np.float32)
        kc, vc = np.zeros((Hkv, S, D), np.float32), np.zeros((Hkv, S, D), np.float32)
        qr = q.copy()
        ref.rope_kv(qr, k, v, np.array([p0], np.int32), kc, vc, base=10000.0, freq_scale=1.0,
                    rope_dim=rope_dim, mode=mode)
        qd, kcd, vcd = _dev(cu, q), cu.zeros((Hkv, S, D)), cu.zeros((Hkv, S, D))
        cu.rope_kv(qd, _dev(cu, k), _dev(cu, v), _dev(cu, np.array([p0], np.int32)), kcd, vcd, base=10000.0,
                   freq_scale=1.0, rope_dim=rope_dim, mode=mode)
        got = np.concatenate([cu.to_host(a).ravel() for a in (qd, kcd, vcd)])
        return compare(name, "elementw", got, np.concatenate([qr.ravel(), kc.ravel(), vc.ravel()]))
    return run


def rope_table_case(rope_dim: int, base: float, freq_scale: float, n_pos: int) -> Case:
    """norm.rope_table (the (cos, sin) rope_kv and the attention's rope read, float32 from double angles)
    vs NumPy's double angles of ops/ref.py rope_kv, at every position up to n_pos."""
    def run(name, ref, cu, rng):
        from .ops.cuda.norm import rope_table

        half = rope_dim // 2
        inv_freq = base ** (-np.arange(half, dtype=np.float64) * 2.0 / rope_dim)
        ang = np.arange(n_pos, dtype=np.float64)[:, None] * freq_scale * inv_freq
        want = np.stack([np.cos(ang), np.sin(ang)], -1).astype(np.float32)
        got = cu.to_host(rope_table(cu, base, freq_scale, rope_dim, n_pos))  # (an earlier case may have grown it)
        return compare(name, "elementw", got.ravel()[: want.size], want.ravel())
    return run


def attention_case(D, G, T, p0, window, softcap, half: bool = False, gemm_budget: int = 0,
                   mma: bool = False, kspan: int = 0) -> Case:
    """cu.attention (decode split-K for T <= 16, flash prefill above) vs the reference; half: the KV
    cache in float16 (the reference reads the same rounded values); gemm_budget > 0: the GEMM prefill
    attention (ops/cuda/attn_gemm.py, a float16 cache) with that many bytes of score scratch per chunk
    (small ones force several query chunks), which must have run (its scratch exists); mma: the tensor-core
    flash kernel (ops/cuda/attn_mma.py, a float16 cache; float16 q and probabilities: the gemm16 class);
    kspan > 0 (with mma): its keys in splits of kspan merged by attn_mma_combine (BW24_ATTN_MMA_SPLIT), which
    must have run (its partials exist)."""
    from contextlib import ExitStack

    from .kernel_check import setting
    from .ops.cuda import attn_gemm, attn_mma

    def run(name, ref, cu, rng):
        Hkv = 2
        H, S = Hkv * G, p0 + T + 7
        q = rng.standard_normal((T, H, D)).astype(np.float32)
        kc = rng.standard_normal((Hkv, S, D)).astype(np.float32)
        vc = rng.standard_normal((Hkv, S, D)).astype(np.float32)
        (kd, vd), (kc, vc) = kernel_cases_attn.half_cache(kc, vc, half or bool(gemm_budget) or mma)
        pos = np.array([p0], np.int32)
        scale = D ** -0.5
        want = np.empty((T, H, D), np.float32)
        ref.attention(q, kc, vc, pos, scale=scale, softcap=softcap, window=window, out=want)
        out = cu.zeros((T, H, D))
        if mma and not attn_mma.usable(q, kd, vd):
            return Result(name + " (not usable: would fall back)", "gemm16", float("inf"), float("inf"))
        with ExitStack() as on:
            on.enter_context(setting(cu, "attn_mma", mma))  # off for every other case, whatever BW24_ATTN_MMA says
            on.enter_context(setting(cu, "attn_mma_split", bool(kspan)))  # whatever BW24_ATTN_MMA_SPLIT says
            if kspan:
                cu._scratch.pop("attn_mma_ml", None)
                on.enter_context(setting(attn_mma, "split_plan", lambda *a: kspan))
            if gemm_budget:
                cu._scratch.pop("ag_s", None)
                on.enter_context(setting(cu, "attn_gemm", True))
                on.enter_context(setting(attn_gemm, "SCORE_BUDGET", gemm_budget))
            else:  # the flash / split-K kernels, whatever BW24_ATTN_GEMM says
                on.enter_context(setting(cu, "attn_gemm", False))
                on.enter_context(setting(cu, "attn_gemm_auto", False))
            cu.attention(_dev(cu, q), _dev(cu, kd), _dev(cu, vd), _dev(cu, pos), scale=scale, softcap=softcap,
                         window=window, out=out, n_keys=p0 + T)
        if (gemm_budget and "ag_s" not in cu._scratch) or (kspan and "attn_mma_ml" not in cu._scratch):
            return Result(name + " (did not run: fell back)", "attention", float("inf"), float("inf"))
        return compare(name, "gemm16" if mma else "attention", cu.to_host(out), want)
    return run


def glu_case(act) -> Case:
    def run(name, ref, cu, rng):
        g = (rng.standard_normal((3, 1000)) * 4).astype(np.float32)
        u = rng.standard_normal((3, 1000)).astype(np.float32)
        want = np.empty_like(g)
        ref.glu(g, u, act, out=want)
        gd = _dev(cu, g)
        cu.glu(gd, _dev(cu, u), act, out=gd)  # out aliases gate, as in the forwards
        return compare(name, "elementw", cu.to_host(gd), want)
    return run


def sample_case(penalties: bool, V: int = 5003, reps: int = 3) -> Case:
    """Greedy picks on `reps` fresh logit vectors in a row (the multi-block argmax re-arms its ticket)."""
    def run(name, ref, cu, rng):
        got, want_all = [], []
        counts = rng.integers(0, 3, V).astype(np.int32)
        wc, cd = counts.copy(), _dev(cu, counts)
        p = SamplingParams(repetition_penalty=1.3, frequency_penalty=0.2, presence_penalty=0.1) if penalties \
            else SamplingParams()
        for _ in range(reps):
            lg = rng.standard_normal(V).astype(np.float32)
            lg[rng.integers(0, V, 3)] = lg.max()  # ties: the lowest index must win
            want, out = np.zeros(1, np.int32), cu.zeros((1,), np.int32)
            ref.sample(lg, p, np.array([7], np.int32), out=want, counts=wc)
            cu.sample(_dev(cu, lg), p, _dev(cu, np.array([7], np.int32)), out=out, counts=cd)
            got.append(cu.to_host(out))
            want_all.append(want)
        return compare(name, "exact", np.concatenate([*got, cu.to_host(cd)]), np.concatenate([*want_all, wc]))
    return run


def draw_case(V: int, params: SamplingParams, n_pos: int = 24, penalties: bool = False, scale: float = 3.0) -> Case:
    """Seeded draws at n_pos consecutive positions: the token ids (and updated counts) must be equal."""
    def run(name, ref, cu, rng):
        lg = (rng.standard_normal(V) * scale).astype(np.float32)
        lg[rng.integers(0, V, 4)] = lg.max()  # ties at the top: the lower index sorts first
        lg[rng.integers(0, V, 50)] = np.float32(1.5)  # a run of equal logits in the body
        counts = rng.integers(0, 3, V).astype(np.int32) if penalties else None
        p0 = int(rng.integers(0, 100000))
        want, got = [], []
        wc = None if counts is None else counts.copy()
        cd = None if counts is None else _dev(cu, counts)
        lgd, out, pos = _dev(cu, lg), cu.zeros((1,), np.int32), cu.zeros((1,), np.int32)
        for i in range(n_pos):
            t = np.zeros(1, np.int32)
            ref.sample(lg, params, np.array([p0 + i], np.int32), out=t, counts=wc)
            want.append(int(t[0]))
            cu.copy_from_host(pos, np.array([p0 + i], np.int32))
            cu.sample(lgd, params, pos, out=out, counts=cd)
            got.append(int(cu.to_host(out)[0]))
        extra_w = [] if wc is None else list(wc)
        extra_g = [] if cd is None else list(cu.to_host(cd))
        return compare(name, "exact", np.array(got + extra_g), np.array(want + extra_w))
    return run


def rng_case() -> Case:
    """The device Philox4x32-10 uniform equals sampling.uniform bit for bit (64-bit seed, 64 positions)."""
    def run(name, ref, cu, rng):
        from .ops.cuda.sampling import uniforms
        from .sampling import uniform

        seed, p0 = int(rng.integers(0, 2**63)) * 2 + 1, int(rng.integers(0, 2**31 - 100))
        got = cu.to_host(uniforms(cu, seed, _dev(cu, np.array([p0], np.int32)), 64))
        return compare(name, "exact", got, np.array([uniform(seed, p0 + i) for i in range(64)]))
    return run


def token_ring_case(n: int = 300) -> Case:
    """publish_token (kernels/readback.cu, the decode step's last launch; ops/cuda/readback.py TokenRing): n tokens at
    random positions, each read back through its slot's event equal to the token written, and the whole ring equal
    to a NumPy ring kept by the same rule (slot = pos mod the ring's size), so a token in the wrong slot, or a slot
    left unwritten, turns the case red."""
    def run(name, ref, cu, rng):
        with setting(cu, "token_ring_env", "1"):
            ring = cu.token_ring
            want = ring.host.copy()
            tok, pos = cu.zeros((1,), np.int32), cu.zeros((1,), np.int32)
            got, sent = [], []
            for _ in range(n):
                t, p = int(rng.integers(0, 151936)), int(rng.integers(0, 2**24))
                cu.copy_from_host(tok, np.array([t], np.int32))
                cu.copy_from_host(pos, np.array([p], np.int32))
                slot = ring.arm(p)
                cu.publish_token(tok, pos)
                got.append(int(ring.later(slot)()[0]))
                sent.append(t)
                want[p % ring.n] = t
            return compare(name, "exact", np.array(got + list(ring.host)), np.array(sent + list(want)))
    return run


def moe_case(qt, T: int, X: int, k: int, norm: bool, residual: bool, *, E: int | None = None, F: int | None = None,
             up_qt=None, down_qt=None, router_std: float | None = None) -> Case:
    """Router + top-k + experts + combine vs ref.moe. E, F default to small shapes; up_qt / down_qt
    default to qt (a different up type takes ops/cuda/moe.py's gate/up fallback); router_std: moe_weights'."""
    up_qt, down_qt = up_qt or qt, down_qt or qt
    kq = any(q in (Q.Q4_K, Q.Q5_K, Q.Q6_K) for q in (qt, up_qt, down_qt))

    def run(name, ref, cu, rng):
        e = E or (256 if kq else 160)
        f = F or (256 if kq else 96)  # K-quants need K % 256 == 0 for the down projection's input
        # (names tagged: the ops cache weights by (name, data address), and addresses recur across cases)
        router, ge, ue, de = moe_weights(f"{name}:", rng, X, e, f, qt, down_qt, up_qt, router_std=router_std)
        x = rng.standard_normal((T, e)).astype(np.float32)
        r = rng.standard_normal((T, e)).astype(np.float32) if residual else None
        want = np.empty((T, e), np.float32)
        ref.moe(x, *(ref.load_weight(t) for t in (router, ge, ue, de)), n_used=k, norm_weights=norm, act="silu",
                out=want, residual=None if r is None else r.copy())
        out = _dev(cu, r) if residual else cu.zeros((T, e))
        with split_products(cu):  # also keeps the router's prefill product from flipping a near-tied route
            cu.moe(_dev(cu, x), *(cu.load_weight(t) for t in (router, ge, ue, de)), n_used=k, norm_weights=norm,
                   act="silu", out=out, residual=out if residual else None)  # residual aliases out, as in qwen3moe
        return compare(name, "matmul", cu.to_host(out), want)
    return run


# The router logits' standard deviation of the cases that must see a wrong lower pick (moe_weights' router_std:
# weights scaled by ROUTER_REAL / sqrt(E)), a real router's order of size. Why: with unit router weights over x of unit entries a
# token's logits have standard deviation sqrt(E) (16 to 45 at the cases' E), so the top pick takes all but ~e^-17
# of the weight and a wrong 2nd..k-th expert moves the output far below the matmul tolerance: at e6bec2b the
# planted route (the k-th pick replaced by the first) left the three "moe router fused" reference cases green on
# the H200 (evidence/pytest_gpu_h200_e6bec2b.log; tests/test_moe_router_cases.py).
ROUTER_REAL = 1.0


def router_weight(tag: str, rng, X: int, E: int, router_std: float | None = None) -> FakeTensor:
    """A MoE layer's random F32 router [X, E]: standard normal, or with router_std times router_std / sqrt(E), so
    unit-normal inputs give logits of that standard deviation."""
    router = _weight(Q.F32, X, E, rng, tag + "router")
    if router_std is None:
        return router
    raw = (router.raw.view(np.float32) * np.float32(router_std / E ** 0.5)).astype(np.float32)
    return FakeTensor(router.name, raw.view(np.uint8).reshape(-1), Q.F32, (X, E))


def moe_weights(tag: str, rng, X: int, E: int, F: int, qt, down_qt, up_qt=None,
                router_std: float | None = None) -> list[FakeTensor]:
    """A MoE layer's random weights: the F32 router [X, E] (router_weight), stacked gate / up [X, F, E] and down
    [X, E, F]."""
    up_qt = up_qt or qt
    return [router_weight(tag, rng, X, E, router_std),
            FakeTensor(tag + "gate_exps", random_raw(qt, X * F, E, rng), qt, (X, F, E)),
            FakeTensor(tag + "up_exps", random_raw(up_qt, X * F, E, rng), up_qt, (X, F, E)),
            FakeTensor(tag + "down_exps", random_raw(down_qt, X * E, F, rng), down_qt, (X, E, F))]


def opted(case: Case, attr: str, value) -> Case:
    """case with cu.<attr> = value while it runs: an opt-in path through an existing case."""
    def run(name, ref, cu, rng):
        with setting(cu, attr, value):
            return case(name, ref, cu, rng)
    return run


def moe_verify_case(qt, down_qt, T: int, X: int, k: int, E: int, F: int, q8: bool = False) -> Case:
    """Speculative verify (T tokens in one call) gives bit-identical rows to T decode calls (T = 1): the
    MoE layer's batch_rows_exact contract (routing, experts and combine per token, fixed order). q8: with
    the experts on the int8 path (BW24_MOE_Q8)."""
    def run(name, ref, cu, rng):
        with setting(cu, "moe_q8", q8):
            return body(name, ref, cu, rng)

    def body(name, ref, cu, rng):
        w = [cu.load_weight(t) for t in moe_weights(f"{name}:", rng, X, E, F, qt, down_qt)]
        x = rng.standard_normal((T, E)).astype(np.float32)
        r = rng.standard_normal((T, E)).astype(np.float32)
        many = _dev(cu, r)
        cu.moe(_dev(cu, x), *w, n_used=k, norm_weights=True, act="silu", out=many, residual=many)
        ones = []
        for t in range(T):
            o = _dev(cu, r[t:t + 1])
            cu.moe(_dev(cu, x[t:t + 1]), *w, n_used=k, norm_weights=True, act="silu", out=o, residual=o)
            ones.append(cu.to_host(o))
        return compare(name, "exact", np.concatenate(ones), cu.to_host(many))
    return run


def advance_case() -> Case:
    def run(name, ref, cu, rng):
        p0 = int(rng.integers(0, 1000))
        a, d = np.array([p0], np.int32), _dev(cu, np.array([p0], np.int32))
        ref.advance(a, 3)
        cu.advance(d, 3)
        return compare(name, "exact", cu.to_host(d), a)
    return run


def frspec_expand_case(T: int, V: int, N: int) -> Case:
    """A trimmed draft head's logits [T, N] spread over the vocabulary (spec.cu frspec_expand) against the
    CPU's (spec/device.py DeviceIO.expand_cols): N random kept ids, -inf at the others; exact."""
    def run(name, ref, cu, rng):
        from .ops.cuda.spec import frspec_expand
        from .spec.device import DeviceIO
        from .spec.frspec import inverse_ids

        ids = rng.permutation(V)[:N]
        inv = inverse_ids(ids, V)
        sub = rng.standard_normal((T, N)).astype(np.float32)
        want = np.empty((T, V), np.float32)
        DeviceIO(ref).expand_cols(sub, inv, want)
        out = cu.zeros((T, V))
        frspec_expand(cu, _dev(cu, sub), _dev(cu, inv), out)
        return compare(name, "exact", cu.to_host(out), want)
    return run


def cases() -> Iterator[tuple[str, Case]]:
    for qt in SUPPORTED:
        for T, bias, res in ((1, False, False), (1, True, True), (3, False, True), (9, True, False),
                             (40, True, True)):
            yield f"matmul {qt.name:<5} N=333 K={_k_for(qt)} T={T}{' +bias' if bias else ''}" \
                  f"{' +res' if res else ''}", matmul_case(qt, T, bias, res)
        yield f"embed {qt.name:<5} V=77 K={_k_for(qt)} T=5", embed_case(qt)
    for qts, T, bias in (((Q.Q4_K, Q.Q4_K, Q.Q6_K), 1, False), ((Q.Q8_0, Q.Q8_0, Q.Q8_0), 1, True),
                         ((Q.Q4_K, Q.Q4_K), 1, False), ((Q.Q4_0, Q.Q4_0, Q.Q4_0), 5, True),
                         ((Q.Q5_0, Q.Q5_0, Q.Q8_0), 1, True)):
        yield f"matmul_multi {'+'.join(q.name for q in qts)} T={T}{' +bias' if bias else ''}", \
            matmul_multi_case(qts, T, bias)
    for qt, cfg in ((Q.Q4_K, {"warps": 1, "rows": 4}), (Q.Q6_K, {"warps": 2, "rows": 8}),
                    (Q.Q8_0, {"warps": 4, "rows": 2}), (Q.Q5_K, {"warps": 1, "rows": 1}),
                    (Q.Q4_1, {"warps": 8, "rows": 4})):
        yield f"decode==verify bitwise {qt.name:<5} N=67 K=4352 W={cfg['warps']} R={cfg['rows']}", \
            decode_verify_case(qt, cfg)
    for qts in ((Q.Q4_K,), (Q.Q6_K,), (Q.Q4_K, Q.Q4_K, Q.Q6_K), (Q.Q4_K, Q.Q4_K)):
        yield f"f32 decode==verify bitwise {'+'.join(q.name for q in qts)} K=1024 (launch.f32_verify_rows)", \
            f32_verify_case(qts, 1024)
    yield "logits Q8_0 V=1001 K=576", logits_case(None)
    yield "logits Q8_0 V=1001 K=576 softcap=30", logits_case(30.0)
    for shape, add in (((3, 576), False), ((2, 1000), True), ((5, 7, 64), False), ((1, 2048), True)):
        yield f"rmsnorm {shape}{' +add' if add else ''}", rmsnorm_case(shape, add)
    for mode, T, H, Hkv, D, rd, p0 in (("norm", 1, 9, 3, 64, 64, 517), ("neox", 4, 8, 2, 128, 128, 4093),
                                       ("neox", 2, 4, 1, 256, 256, 0), ("norm", 3, 6, 2, 64, 32, 77)):
        yield f"rope_kv {mode} T={T} H={H}/{Hkv} D={D} rope_dim={rd} pos={p0}", rope_case(mode, T, H, Hkv, D, rd, p0)
    for rd, base, fs, n in ((128, 1e6, 1.0, 40960), (64, 1e4, 0.25, 8192), (32, 5e5, 1.0, 3)):
        yield f"rope_table rope_dim={rd} base={base:g} freq_scale={fs} positions={n}", rope_table_case(rd, base, fs, n)
    for D, _, G in ATTN_SHAPES:
        yield f"attention D={D} G={G} T=1 pos=300", attention_case(D, G, 1, 300, None, None)
    yield "attention D=64 G=3 T=5 pos=1000 window=257", attention_case(64, 3, 5, 1000, 257, None)
    yield "attention D=256 G=4 T=1 pos=129 softcap=50", attention_case(256, 4, 1, 129, None, 50.0)
    yield "attention D=128 G=4 T=37 pos=0 (prefill)", attention_case(128, 4, 37, 0, None, None)
    for act in ("silu", "gelu_tanh"):
        yield f"glu {act} [3, 1000]", glu_case(act)
    yield "sample greedy V=5003 (ties)", sample_case(False)
    yield "sample greedy V=5003 +penalties", sample_case(True)
    yield "sample greedy V=151936 (128 blocks) x3", sample_case(False, V=151936)
    yield "sample greedy V=151936 +penalties x3", sample_case(True, V=151936)
    yield "rng philox4x32-10 uniform x64 (64-bit seed)", rng_case()
    yield "token ring publish x300 (256 slots, random positions)", token_ring_case()
    for V, sp, pen in ((5003, SamplingParams(temperature=0.8, seed=11), False),
                       (5003, SamplingParams(temperature=1.3, top_k=40, seed=2**40 + 3), False),
                       (32000, SamplingParams(temperature=0.7, top_p=0.9, seed=5), False),
                       (32000, SamplingParams(temperature=1.0, min_p=0.05, seed=6), False),
                       (151936, SamplingParams(temperature=0.9, top_k=50, top_p=0.95, min_p=0.02, seed=7), True),
                       (5003, SamplingParams(temperature=0.6, top_k=7000, top_p=0.5, seed=8,
                                             repetition_penalty=1.3, frequency_penalty=0.2,
                                             presence_penalty=0.1), True)):
        yield f"sample draw V={V} {_params_str(sp)} x24 positions", draw_case(V, sp, penalties=pen)
    yield "sample draw V=4099 T=50 (flat: all tokens candidates) x24", \
        draw_case(4099, SamplingParams(temperature=50.0, seed=9), scale=1.0)
    for qt, T, X, k, norm, res in ((Q.Q4_K, 1, 16, 4, True, True), (Q.Q8_0, 1, 128, 8, True, True),
                                   (Q.Q6_K, 3, 8, 2, False, False), (Q.Q4_0, 5, 60, 6, True, True),
                                   (Q.F32, 20, 12, 3, True, False)):
        yield f"moe {qt.name:<5} T={T} X={X} k={k}{' norm' if norm else ''}{' +res' if res else ''}", \
            moe_case(qt, T, X, k, norm, res)
    # decode path at qwen3-30b-a3b's expert shapes (E=2048, F=768, k=8; X cut to 16 to keep the
    # reference cheap), its down types, and both fallbacks (gate/up formats differ; F too long to stage)
    for T, dq in ((1, Q.Q6_K), (5, Q.Q4_K), (9, Q.Q6_K)):
        yield f"moe decode Q4_K/Q4_K/{dq.name} T={T} X=16 k=8 E=2048 F=768 norm +res", \
            moe_case(Q.Q4_K, T, 16, 8, True, True, E=2048, F=768, down_qt=dq)
    yield "moe decode Q8_0/Q8_0/Q8_0 T=2 X=12 k=8 E=1024 F=544 norm +res", \
        moe_case(Q.Q8_0, 2, 12, 8, True, True, E=1024, F=544)
    yield "moe decode Q5_K/Q5_K/Q5_K T=3 X=10 k=3 E=768 F=512", moe_case(Q.Q5_K, 3, 10, 3, False, False, E=768, F=512)
    yield "moe decode fallback Q4_K/Q5_K/Q6_K T=2 X=16 k=4 +res", \
        moe_case(Q.Q4_K, 2, 16, 4, True, True, up_qt=Q.Q5_K, down_qt=Q.Q6_K)
    yield "moe decode fallback Q4_0 F=12288 T=3 X=4 k=2 E=64 +res", \
        moe_case(Q.Q4_0, 3, 4, 2, True, True, E=64, F=12288)
    for qt, dq in ((Q.Q4_K, Q.Q6_K), (Q.Q8_0, Q.Q8_0), (Q.F16, Q.F16)):
        yield f"moe decode==verify bitwise {qt.name}/{dq.name} T=9 X=16 k=8 E=2048 F=768", \
            moe_verify_case(qt, dq, 9, 16, 8, 2048, 768)
    for qt, dq in ((Q.Q4_K, Q.Q6_K), (Q.Q4_K, Q.Q4_K)):
        yield f"moe decode q8 decode==verify bitwise {qt.name}/{dq.name} T=9 X=16 k=8 E=2048 F=768", \
            moe_verify_case(qt, dq, 9, 16, 8, 2048, 768, q8=True)
    # the router matvec and moe_route in one launch (BW24_MOE_ROUTER): the real model's 128 experts, its E, the
    # int8 experts behind it, verify rows == decode rows (each call re-arms the tickets the next one needs)
    # (routers of a real router's logit size, ROUTER_REAL: a wrong lower pick must show)
    yield "moe router fused Q4_K/Q4_K/Q6_K T=1 X=128 k=8 E=256 F=256 norm +res", \
        opted(moe_case(Q.Q4_K, 1, 128, 8, True, True, E=256, F=256, down_qt=Q.Q6_K, router_std=ROUTER_REAL),
              "moe_router_fuse", True)
    yield "moe router fused Q4_K/Q4_K/Q4_K T=5 X=16 k=8 E=2048 F=768 norm +res", \
        opted(moe_case(Q.Q4_K, 5, 16, 8, True, True, E=2048, F=768, router_std=ROUTER_REAL), "moe_router_fuse", True)
    yield "moe router fused Q8_0 T=3 X=10 k=3 E=544 F=160", \
        opted(moe_case(Q.Q8_0, 3, 10, 3, False, False, E=544, F=160, router_std=ROUTER_REAL), "moe_router_fuse", True)
    # a row longer than the weights moe_router loads before its PDL wait (moe.cu ROUTER_PF: 2,048 columns), so the
    # loop after it runs too
    yield "moe router fused Q4_K/Q4_K/Q4_K T=2 X=16 k=4 E=2560 F=256 norm (past the prefetch)", \
        opted(moe_case(Q.Q4_K, 2, 16, 4, True, False, E=2560, F=256, router_std=ROUTER_REAL), "moe_router_fuse", True)
    for q8 in (False, True):
        yield f"moe router fused{' q8' if q8 else ''} decode==verify bitwise Q4_K/Q6_K T=9 X=16 k=8 E=2048 F=768", \
            opted(moe_verify_case(Q.Q4_K, Q.Q6_K, 9, 16, 8, 2048, 768, q8=q8), "moe_router_fuse", True)
    yield "advance pos += 3", advance_case()
    # FR-Spec's trimmed draft head spread back over the vocabulary: qwen2.5's 151,936 ids, 32,768 kept; a
    # verify's 8 rows; a V that is no multiple of the block
    for T, V, N in ((1, 151936, 32768), (8, 151936, 32768), (3, 1000, 77)):
        yield f"frspec expand T={T} V={V} N={N}", frspec_expand_case(T, V, N)
    from .kernel_cases_prefill import cases as prefill_cases  # T > 16: fp16 GEMM, flash attention

    yield from prefill_cases()
    yield from kernel_cases_attn.cases()  # decode attention / rmsnorm_reg / rope+qk-norm (issue 5)
    from .kernel_cases_q8 import cases as q8_cases  # the int8-activation matvec path (lazy: it imports us)

    yield from q8_cases()


def _params_str(p: SamplingParams) -> str:
    parts = [f"temp={p.temperature:g}"]
    parts += [f"top_k={p.top_k}"] if p.top_k else []
    parts += [f"top_p={p.top_p:g}"] if p.top_p < 1 else []
    parts += [f"min_p={p.min_p:g}"] if p.min_p else []
    parts += ["+penalties"] if p.has_penalties else []
    return " ".join(parts)
