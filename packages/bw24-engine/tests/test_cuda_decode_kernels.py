"""CI (no GPU) for the decode-path kernels of issue 5: attention split geometry and a NumPy twin of
attn_split/attn_combine's algorithm (chunking, masking, per-round online softmax, warp merge,
combine) against the reference; rmsnorm / rope launch geometry; the qk-norm fused into rope_kv
(reference); and that every template the kernel_check cases dispatch is in the CI compile set.
The kernels themselves run on the GPU in kernel_check (kernel_cases_attn.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from bw24.engine.kernel_cases_attn import cases as attn_cases
from bw24.engine.ops.cuda.attn import ATTN_CHUNK, attn_geometry, default_max_splits, fuse_combine, plan_chunk
from bw24.engine.ops.cuda.kernels import COMPILE_SET, kv_arg, kv_elem
from bw24.engine.ops.cuda.norm import ROPE_SLOTS, rmsnorm_config, rope_block
from bw24.engine.ops.ref import RefOps

NW = 4  # attention.cu warps per block


def chunk_len(n, ch, maxs, short=0):  # attention.cu attn_chunk_len (short: BW24_ATTN_SHORT)
    if 0 < short and n <= short:
        return ch * -(-short // ch)
    return ch * max(1, -(-n // (ch * maxs)))


def emulate(q, kc, vc, p0, scale, softcap, window, ch, ns, bug=False, short=0):
    """attn_split + attn_combine's algorithm in float32 (dot products in NumPy order)."""
    T, H, D = q.shape
    Hkv, S, DV = vc.shape
    G, KB = H // Hkv, min(8, 2048 // (D + DV))
    out = np.zeros((T, H, DV), np.float32)
    f32 = np.float32
    for t in range(T):
        p = p0 + t
        lo = max(0, p - window + 1) if window else 0
        c = chunk_len(p - lo + 1, ch, ns, short)
        live = -(-(p - lo + 1) // c)
        assert live <= ns and (live == 1 or p - lo + 1 > short)
        for h in range(H):
            hk = h // G
            parts = []
            for s in range(live):
                j0 = lo + s * c
                j1 = min(j0 + c, p + 1) - (1 if bug else 0)
                warps = []
                for w in range(NW):
                    m, ls, acc = f32(-np.inf), f32(0), np.zeros(DV, np.float32)
                    for r0 in range(j0 + w * KB, j1, NW * KB):
                        js = [min(r0 + k, j1 - 1) for k in range(KB)]
                        sc = (kc[hk, js] @ q[t, h]).astype(np.float32) * f32(scale)
                        if softcap:
                            sc = f32(softcap) * np.tanh(sc / f32(softcap))
                        sc = np.where(np.arange(KB) + r0 < j1, sc, -np.inf).astype(np.float32)
                        mx = max(m, sc.max())
                        corr, pe = np.exp(f32(m - mx)), np.exp(sc - mx)
                        ls, acc = ls * corr + pe.sum(dtype=np.float32), acc * corr + pe @ vc[hk, js]
                        m = mx
                    warps.append((m, ls, acc))
                M = max(wm for wm, _, _ in warps)
                fs = [f32(0) if wm == -np.inf else np.exp(f32(wm - M)) for wm, _, _ in warps]
                parts.append((M, sum(f * wl for f, (_, wl, _) in zip(fs, warps, strict=True)),
                              sum(f * wa for f, (_, _, wa) in zip(fs, warps, strict=True))))
            M = max(pm for pm, _, _ in parts)
            wts = [np.exp(f32(pm - M)) for pm, _, _ in parts]
            L = sum(w * pl for w, (_, pl, _) in zip(wts, parts, strict=True))
            out[t, h] = sum(w * pa for w, (_, _, pa) in zip(wts, parts, strict=True)) / L
    return out


@pytest.mark.parametrize("T,p0,window,softcap,ns,short", [
    (1, 0, None, None, 64, 0), (1, 31, None, None, 64, 0), (1, 32, None, None, 64, 0), (3, 62, None, 30.0, 64, 0),
    (4, 200, 70, None, 64, 0), (2, 300, None, None, 3, 0),  # ns=3: keys per split grow to 128
    (5, 97, 33, 20.0, 2, 0),
    # BW24_ATTN_SHORT: one split up to `short` live keys, ch-key splits past it (rows on both sides in one launch)
    (1, 40, None, None, 64, 128), (6, 124, None, None, 64, 128), (1, 300, None, None, 64, 128),
    (9, 60, 40, None, 64, 128), (5, 62, None, None, 64, 64), (3, 95, None, 20.0, 64, 96)])
def test_split_algorithm_matches_reference(T, p0, window, softcap, ns, short):
    rng = np.random.default_rng(p0 + T + short)
    Hkv, G, D = 2, 3, 64
    S = p0 + T + 4
    q = rng.standard_normal((T, Hkv * G, D)).astype(np.float32)
    kc, vc = (rng.standard_normal((Hkv, S, D)).astype(np.float32) for _ in range(2))
    want = np.empty_like(q)
    RefOps().attention(q, kc, vc, np.array([p0], np.int32), scale=0.125, softcap=softcap, window=window, out=want)
    got = emulate(q, kc, vc, p0, 0.125, softcap, window, ATTN_CHUNK, ns, short=short)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if p0 > 0:  # canary: dropping each split's last key is caught
        bad = emulate(q, kc, vc, p0, 0.125, softcap, window, ATTN_CHUNK, ns, bug=True, short=short)
        assert np.abs(bad - want).max() > 1e-3
    if short:  # one split up to `short` keys, ch-key ones past it
        assert chunk_len(short, ATTN_CHUNK, ns, short) >= short > chunk_len(short + 1, ATTN_CHUNK, ns, short)


def test_attn_short_is_checked_passed_to_attention_only_and_recorded(tmp_path, monkeypatch):
    """BW24_ATTN_SHORT: a multiple of 32 up to 1024 (256 the default, 0 off), else an error naming the variable;
    attention.cu alone gets the define, perf rows say attn_short_N for another N and no_attn_short for 0; the build
    and its canary compile."""
    from bw24.engine.ops.cuda.backend import CudaOps

    assert CudaOps.attn_short == 256
    assert not any("attn_short" in o for o in CudaOps.__new__(CudaOps).opt_in())
    off = CudaOps.__new__(CudaOps)
    off.attn_short = 0
    assert "no_attn_short" in off.opt_in()
    for bad in ("48", "-32", "2048", "x"):
        monkeypatch.setattr(CudaOps, "attn_short_env", bad)
        with pytest.raises(ValueError, match=f"BW24_ATTN_SHORT='{bad}'"):
            CudaOps()
    _attention_variant(tmp_path, monkeypatch, "attn_short", "BW24_ATTN_SHORT",
                       ("attn_split<128,128,4,32,__half>", "attn_combine"),
                       ({"BW24_ATTN_SHORT": 128}, {"BW24_ATTN_SHORT": 128, "BW24_PLANTED_SHORT": 1}), 128, "attn_short_128")


def fill_blocks(G, live, nsplit, most, fused=False):
    """attention.cu attn_split's BW24_ATTN_FILL rule, block y of grid.y = nsplit for one (kv head group, row):
    f (blocks sharing the G heads) and, per block that works, (its split, its heads)."""
    f = 1
    if most > 1 and not fused:
        while 2 * f <= most and G % (2 * f) == 0 and 2 * f * live <= nsplit:
            f *= 2
    work = []
    for y in range(nsplit):
        if y >= f * live:
            continue  # returns at once
        s, gc = (y, G) if f == 1 else (y % live, G // f)
        h0 = 0 if f == 1 else (y // live) * gc
        work.append((s, tuple(range(h0, h0 + gc))))
    return f, work


@pytest.mark.parametrize("nsplit", [16, 33, 66])
def test_attn_fill_rule_covers_every_head_and_live_split_once(nsplit):
    """BW24_ATTN_FILL's block mapping: every (live split, q head) of a block's G heads is computed by exactly
    one block, every split block past the live range when off, f x live never past the grid; off (1) or with the
    fused pass 2 it is the plain one-block-a-split mapping. The kernel's own check is kernel-check's `attn fill`
    cases on the GPU (bitwise against no fill, with a planted canary)."""
    for G in (1, 2, 3, 4, 8):
        for live in range(1, nsplit + 1):
            plain = fill_blocks(G, live, nsplit, 1)
            assert plain == (1, [(s, tuple(range(G))) for s in range(live)])
            assert fill_blocks(G, live, nsplit, 8, fused=True) == plain
            for most in (2, 4, 8):
                f, work = fill_blocks(G, live, nsplit, most)
                assert f <= most and G % f == 0 and f * live <= nsplit and len(work) == f * live
                pairs = [(s, h) for s, heads in work for h in heads]
                assert sorted(pairs) == [(s, h) for s in range(live) for h in range(G)]  # each exactly once
                assert f == 1 or 2 * f * live > nsplit or 2 * f > most or G % (2 * f)  # as many blocks as fit
    assert fill_blocks(4, 4, 66, 4)[0] == 4  # the 8B at d0 (~100 keys, 4 live splits of 66): one head a block
    assert fill_blocks(4, 22, 66, 4)[0] == 2  # 700 keys: two blocks of 2
    assert fill_blocks(4, 47, 66, 4)[0] == 1  # depth 3000: the grid is full of live splits
    assert fill_blocks(3, 4, 66, 4)[0] == 1  # smollm2's 3 q heads a kv head do not halve


def test_attn_fill_cases_leave_the_fill_idle_blocks():
    """kernel-check's `attn fill` bitwise cases (kernel_cases_attn.FILL_CASES) on their forced geometry: the fill
    rule gives some row f > 1 in exactly the cases marked as acting, at each fill value they run. At 5b56e32 the
    cases' caches held the live keys + 5, every grid split was live, and the H200's planted canary turned 1 of
    the 5 'acting' cases red; on that old geometry this test fails (the second loop shows it)."""
    import math

    from bw24.engine import kernel_cases_attn as kca
    from bw24.engine.ops.cuda.attn import attn_geometry, head_groups

    def acts(G, T, p0, Hkv, win, fuse, n, spare, geometry):
        ch, ns = attn_geometry(None, p0 + T + 5 + spare, Hkv, n_sm=132, override=geometry, group=G)
        gb = G // head_groups(G, True)  # a kv head's 8 q heads: two blocks of 4 (split heads, the default)
        for t in range(T):
            p = p0 + t
            n_keys = p - (max(0, p - win + 1) if win else 0) + 1
            if fill_blocks(gb, math.ceil(n_keys / chunk_len(n_keys, ch, ns)), ns, n, fused=bool(fuse))[0] > 1:
                return True
        return False

    for G, T, p0, Hkv, _, win, fuse, fills, acting in kca.FILL_CASES:
        for n in fills:
            assert acts(G, T, p0, Hkv, win, fuse, n, kca.FILL_SPARE, kca.FILL_GEOMETRY) == acting, (G, T, p0, n)
    # the canary of this test: the geometry of 5b56e32 (no spare keys) leaves the fill nothing to do but the window
    old = [acts(G, T, p0, Hkv, win, fuse, 4, 0, None) for G, T, p0, Hkv, _, win, fuse, _, _ in kca.FILL_CASES]
    assert old == [False, False, False, False, True, False, False, False]


def test_attn_fill_is_checked_passed_to_attention_only_and_recorded(tmp_path, monkeypatch, helpers):
    """BW24_ATTN_FILL: 1 (off, the default), 2, 4 or 8, else an error naming the variable; attention.cu alone
    gets the define, perf rows say attn_fill_N; the build (the 8B's, the 30B-A3B's, the 0.6B's and smollm2's
    instances) and its canary compile."""
    from bw24.engine.ops.cuda.backend import CudaOps

    assert CudaOps.attn_fill == 1
    helpers.env_refused_or_recorded(monkeypatch, "attn_fill_env", "BW24_ATTN_FILL", ("0", "3", "16", "four"), "4", "1",
                                    "attn_fill")
    monkeypatch.undo()
    names = ("attn_split<128,128,4,32,__half>", "attn_split<128,128,2,32,__half>", "attn_split<64,64,3,32,__half>",
             "attn_combine")
    _attention_variant(tmp_path, monkeypatch, "attn_fill", "BW24_ATTN_FILL", names,
                       ({"BW24_ATTN_FILL": 4, "BW24_PDL": 1}, {"BW24_ATTN_FILL": 4, "BW24_PLANTED_FILL": 1},
                        {"BW24_ATTN_FILL": 8, "BW24_ATTN_SUMS": 1}), 4, "attn_fill_4", env_attr="attn_fill_env")


def test_attn_min_blocks_is_checked_passed_to_attention_only_and_recorded(tmp_path, monkeypatch, helpers):
    """BW24_ATTN_MIN_BLOCKS: 1 (off, the default) .. 6, else an error naming the variable; attention.cu alone gets
    the define, perf rows say attn_min_blocks_N; the bounded build of the decode instances and its canary
    compile."""
    from bw24.engine.ops.cuda.backend import CudaOps

    assert CudaOps.attn_min_blocks == 1
    helpers.env_refused_or_recorded(monkeypatch, "attn_min_blocks_env", "BW24_ATTN_MIN_BLOCKS", ("0", "7", "four"),
                                    "4", "1", "attn_min_blocks")
    monkeypatch.undo()
    names = ("attn_split<128,128,4,32,__half>", "attn_split<128,128,2,32,__half>", "attn_split<64,64,3,32,__half>")
    _attention_variant(tmp_path, monkeypatch, "attn_min_blocks", "ATTN_MIN_BLOCKS", names,
                       ({"ATTN_MIN_BLOCKS": 4, "BW24_PDL": 1}, {"ATTN_MIN_BLOCKS": 4, "BW24_PLANTED_MINBLOCKS": 1},
                        {"ATTN_MIN_BLOCKS": 4, "BW24_ATTN_FILL": 4}), 4, "attn_min_blocks_4",
                       env_attr="attn_min_blocks_env")


def test_split_geometry_bounds_live_splits_and_ignores_T():
    for S in (1, 31, 32, 33, 100, 2048, 4096, 40000):
        for hkv in (1, 2, 8):
            ch, ns = attn_geometry(None, S, hkv, n_sm=132)
            assert ch == ATTN_CHUNK and 1 <= ns <= max(default_max_splits(hkv, 132), 1)
            for p in {0, 1, S // 3, S // 2, S - 1}:
                c = chunk_len(p + 1, ch, ns)
                assert c % ch == 0 and -(-(p + 1) // c) <= ns  # live splits fit the grid
            # memory.plan's split count bounds the grid's from above
            assert math.ceil(S / plan_chunk(None, S, hkv, n_sm=132)) >= ns


def test_geometry_from_tuning_table_and_bad_entries():
    class Tab:
        def __init__(self, cfg):
            self.cfg = cfg

        def config(self, section, kind, shape=None):
            return dict(self.cfg) if (section, kind) == ("attention", "decode") else None

    assert attn_geometry(Tab({"chunk": 64, "max_splits": 10}), 4096, 8, n_sm=132) == (64, 10)
    assert attn_geometry(Tab({"chunk": 48}), 4096, 8, n_sm=132)[0] == ATTN_CHUNK  # not compiled: default
    # an override layers its keys over the table: naming only fuse_combine keeps the table's geometry
    # (at a7b0f07 it fell back to the default one, and kernel_check's fused==separate case differed)
    tab, only = Tab({"chunk": 64, "max_splits": 10}), {"fuse_combine": 1}
    assert attn_geometry(tab, 4096, 8, n_sm=132, override=only) == (64, 10) and fuse_combine(tab, only)
    assert attn_geometry(tab, 4096, 8, n_sm=132, override={"chunk": 32}) == (32, 10)
    assert not fuse_combine(tab) and not fuse_combine(None)


@pytest.mark.parametrize("K", [1, 3, 64, 128, 896, 1000, 1024, 4096, 5120, 8191, 8192, 16384, 32768, 32769, 70000])
@pytest.mark.parametrize("aligned", [True, False])
def test_rmsnorm_config_covers_the_row(K, aligned):
    name, threads = rmsnorm_config(K, aligned)
    assert threads % 32 == 0 and 32 <= threads <= 1024
    vw = 4 if aligned and K % 4 == 0 else 1
    if name == "rmsnorm":
        assert K > 512 * 16 * vw
        return
    assert threads <= 512  # norm.cu's launch bounds
    vw, nv = (int(v) for v in name[len("rmsnorm_reg<"):-1].split(","))
    assert vw == (4 if aligned and K % 4 == 0 else 1)
    assert threads * nv * vw >= K and name in COMPILE_SET["norm.cu"]


@pytest.mark.parametrize("D,Dv", [(64, 64), (128, 128), (256, 256), (512, 512), (64, 128)])
def test_rope_block_holds_every_slot(D, Dv):
    b = rope_block(D, Dv)
    assert b % 32 == 0 and D // 2 <= ROPE_SLOTS * b


@pytest.mark.parametrize("mode,rope_dim", [("neox", 128), ("norm", 64)])
def test_ref_rope_kv_qk_norm_is_rmsnorm_then_rope(mode, rope_dim):
    ops, rng = RefOps(), np.random.default_rng(1)
    T, H, Hkv, D, S, p0 = 3, 4, 2, 128, 16, 5
    q, k = (rng.standard_normal((T, n, D)).astype(np.float32) for n in (H, Hkv))
    v = rng.standard_normal((T, Hkv, D)).astype(np.float32)
    qn, kn = rng.standard_normal(D).astype(np.float32), rng.standard_normal(D).astype(np.float32)
    kw = dict(base=1e4, freq_scale=1.0, rope_dim=rope_dim, mode=mode)
    q1, k1, kc1, vc1 = q.copy(), k.copy(), np.zeros((Hkv, S, D), np.float32), np.zeros((Hkv, S, D), np.float32)
    ops.rope_kv(q1, k1, v, np.array([p0], np.int32), kc1, vc1, q_norm=qn, k_norm=kn, norm_eps=1e-6, **kw)
    q2, k2, kc2, vc2 = q.copy(), k.copy(), np.zeros_like(kc1), np.zeros_like(vc1)
    ops.rmsnorm(q2, qn, 1e-6, out=q2)  # the separate calls the forward made before the fusion
    ops.rmsnorm(k2, kn, 1e-6, out=k2)
    ops.rope_kv(q2, k2, v, np.array([p0], np.int32), kc2, vc2, **kw)
    np.testing.assert_array_equal(q1, q2)
    np.testing.assert_array_equal(kc1, kc2)
    np.testing.assert_array_equal(k1, k)  # k's buffer is left as it was
    assert not np.array_equal(kc1[:, p0:p0 + T], np.zeros_like(kc1[:, p0:p0 + T]))
    with pytest.raises(ValueError, match="norm_eps"):
        ops.rope_kv(q1, k1, v, np.array([p0], np.int32), kc1, vc1, q_norm=qn, **kw)


class _Recorder:
    """Stands in for CudaOps in the kernel_check cases: records which templates they dispatch."""

    _q8_ready = None  # no fused producer has marked rows (the "+q8 out" cases stop at that check)

    def __init__(self):
        self.names: set[tuple[str, str]] = set()

    def _put(self, a):
        return np.array(a)

    def zeros(self, shape, dtype=np.float32):
        return np.zeros(shape, dtype)

    def to_host(self, a):
        return np.array(a)

    def attention(self, q, kc, vc, pos, **kw):
        ch, _ = attn_geometry(None, vc.shape[1], vc.shape[0], n_sm=132)
        kt = kv_arg(kc, vc)
        self.names.add(("attention.cu", f"attn_split<{q.shape[2]},{vc.shape[2]},{q.shape[1] // vc.shape[0]},{ch}{kt}>"))

    def rmsnorm(self, x, w, eps, *, out, add=None):
        self.names.add(("norm.cu", rmsnorm_config(x.shape[-1], True)[0]))
        self.names.add(("norm.cu", rmsnorm_config(x.shape[-1], False)[0]))

    def rope_kv(self, q, k, v, pos, k_cache, v_cache, **kw):
        self.names.add(("rope.cu", f"rope_kv<{kv_elem(k_cache, v_cache)}>"))


def test_every_template_the_cases_dispatch_is_compiled_in_ci():
    rec, ref = _Recorder(), RefOps()
    names = [n for n, _ in attn_cases()]
    assert len(names) == len(set(names))
    for name, run in attn_cases():
        run(name, ref, rec, np.random.default_rng(0))
    templ = {(f, n) for f, n in rec.names if "<" in n}
    assert {f for f, _ in rec.names} == {"attention.cu", "norm.cu", "rope.cu"}
    missing = {(f, n) for f, n in templ if n not in COMPILE_SET[f]}
    assert not missing, f"templates dispatched by kernel_check but not compiled in CI: {sorted(missing)}"


@pytest.mark.parametrize("neox", [0, 1])
@pytest.mark.parametrize("D,rope_dim", [(64, 64), (64, 32), (128, 64), (256, 256), (128, 2)])
def test_rope_slots_cover_every_dim_once(neox, D, rope_dim):
    """rope.cu's slot -> (i0, i1) map: rope pairs, then pass-through pairs; each dim exactly once."""
    half, dims = rope_dim // 2, []
    for i in range(D // 2):
        i0 = (i if neox else 2 * i) if i < half else rope_dim + 2 * (i - half)
        i1 = (i + half if neox else 2 * i + 1) if i < half else i0 + 1
        dims += [i0, i1]
    assert sorted(dims) == list(range(D))


def test_rope_table_built_once_grown_on_demand_and_never_inside_capture(helpers):
    """norm.rope_table: one rope_table launch per (base, freq_scale, rope_dim) for the positions asked for,
    none while they are built, a rebuild for more positions, and a clear error if first needed inside a
    graph capture (a rebuild allocates)."""
    from types import SimpleNamespace

    from bw24.engine.ops.cuda.norm import rope_table

    launches, scratch = [], {}

    def buf(key, n, dtype=np.float32, zeroed=False):
        if key not in scratch or scratch[key].size < n:
            scratch[key] = np.zeros(n, dtype).view(helpers.HostDev)
        return scratch[key][:n]

    def launch(fn, grid, block, args, shared_mem=0):
        assert len(args) == len(helpers.kernel_params("rope.cu", "rope_table"))
        launches.append((fn[1], int(args[1]), int(args[2]), float(args[3]), float(args[4])))

    cu = SimpleNamespace(_rope_tabs={}, _capturing=False, _buf=buf, _k=lambda f, n: (f, n), _launch=launch)
    t1 = rope_table(cu, 1e6, 1.0, 128, 4096)
    assert t1.size == 4096 * 64 * 2 and launches == [("rope_table", 4096, 128, 1e6, 1.0)]
    rope_table(cu, 1e6, 1.0, 128, 100)  # fewer positions: the built table serves
    assert len(launches) == 1
    rope_table(cu, 1e4, 1.0, 128, 100)  # another base: its own table
    assert launches[-1] == ("rope_table", 100, 128, 1e4, 1.0)
    assert rope_table(cu, 1e6, 1.0, 128, 8192).size == 8192 * 64 * 2 and launches[-1][1] == 8192
    cu._capturing = True
    rope_table(cu, 1e6, 1.0, 128, 8192)  # built: fine inside capture
    with pytest.raises(RuntimeError, match="inside graph capture"):
        rope_table(cu, 1e6, 1.0, 64, 10)


def _attention_variant(tmp_path, monkeypatch, attr: str, define: str, names, define_sets, value=True,
                       label: str | bool | None = None, env_attr: str | None = None) -> None:
    """attention.cu compiles `names` under each define set; CudaOps with cu.<attr> = value (and cu.<env_attr>, the
    variable's text the perf label reads, where given) passes `define` (= value) to attention.cu only, and records
    the variant (label, else attr) in perf rows; label False: a default, recorded only as "no_" + attr when off."""
    from bw24.engine.ops.cuda.backend import CudaOps
    from bw24.engine.ops.cuda.kernels import KERNEL_DIR
    from bw24.runtime import compile_cubin

    monkeypatch.setenv("BW24_KERNEL_CACHE", str(tmp_path))
    for defines in define_sets:
        ck = compile_cubin(KERNEL_DIR / "attention.cu", "90a", defines=defines, name_expressions=names)
        assert ck.cubin[:4] == b"\x7fELF" and set(ck.lowered) == set(names)
    seen = []
    monkeypatch.setattr("bw24.engine.ops.cuda.backend.get_kernel", lambda f, n, d: seen.append((f, d)))
    ops = CudaOps.__new__(CudaOps)
    ops.variant, ops.pdl, ops.attn_sums, ops.attn_pipe = "", False, False, False
    ops.attn_combine32 = True  # the default (attention.cu's own unroll: no define)
    setattr(ops, attr, value)
    if env_attr:
        setattr(ops, env_attr, str(value))
    ops._k("attention.cu", "attn_split<128,128,4,32>")
    ops._k("qmatvec.cu", "qmv<7,1,4,1>")
    # (with the short class's define, the default's, beside any other)
    want = {(define, int(value))} | ({("BW24_ATTN_SHORT", 256)} if attr != "attn_short" else set())
    assert [(f, set(d)) for f, d in seen] == [("attention.cu", want), ("qmatvec.cu", set())]
    if label is False:  # a default: nothing recorded while on, "no_" + attr when turned off
        assert not any(o.endswith(attr) for o in ops.opt_in())
        setattr(ops, attr, not value)
        assert "no_" + attr in ops.opt_in()
    else:
        assert (label or attr) in ops.opt_in()


def test_attn_pipe_variant_compiles_and_is_selected_only_for_attention(tmp_path, monkeypatch):
    """BW24_ATTN_PIPE (the default since e223fb5's H200 run): attention.cu compiled with the next round's loads ahead
    of the math (float and half caches, D = 64 / 128 / 256, with the batched sums too); BW24_ATTN_PIPE=0 is the
    variant perf rows name ("no_attn_pipe")."""
    from bw24.engine.ops.cuda.backend import CudaOps

    names = ("attn_split<128,128,4,32,__half>", "attn_split<128,128,8,32>", "attn_split<64,64,3,32,__half>",
             "attn_split<256,256,4,32>")
    _attention_variant(tmp_path, monkeypatch, "attn_pipe", "BW24_ATTN_PIPE", names,
                       ({"BW24_ATTN_PIPE": 1, "BW24_PDL": 1}, {"BW24_ATTN_PIPE": 1, "BW24_ATTN_SUMS": 1}), label=False)
    assert CudaOps.attn_pipe is True  # (as the other default-on switches' tests: the variable unset)


def test_attn_sums_variant_compiles_and_is_selected_only_for_attention(tmp_path, monkeypatch):
    """BW24_ATTN_SUMS: attention.cu compiled with the batched warp sums (the instances of the 8B, the 0.6B,
    the 30B-A3B's two batches, smollm2's per-value fallback)."""
    names = ("attn_split<128,128,4,32,__half>", "attn_split<128,128,2,32,__half>", "attn_split<128,128,8,32>",
             "attn_split<64,64,3,32,__half>")
    _attention_variant(tmp_path, monkeypatch, "attn_sums", "BW24_ATTN_SUMS", names, ({"BW24_ATTN_SUMS": 1, "BW24_PDL": 1},))


def test_attn_depth_is_parsed_checked_and_recorded(monkeypatch):
    """BW24_ATTN_DEPTH=KEYS:HEADS:MIN_BLOCKS (ops/cuda/attn.py AttnDepth): unset, the default classes 1024:1:4
    (unless BW24_ATTN_BLOCK_HEADS, _MIN_BLOCKS or _FILL forces one geometry); empty or 0 off; a malformed value is
    refused by CudaOps with an error naming the variable and the value; perf rows say attn_depth_KxHxM for
    another value and no_attn_depth for 0, nothing for the default."""
    from bw24.engine.ops.cuda.attn import DEPTH_DEFAULT, AttnDepth, depth_in_force
    from bw24.engine.ops.cuda.backend import CudaOps

    assert AttnDepth.parse("") is None and AttnDepth.parse(None) is None and AttnDepth.parse("0") is None
    d = AttnDepth.parse("2048:2:4")
    assert (d.keys, d.heads, d.min_blocks, d.label) == (2048, 2, 4, "attn_depth_2048x2x4")
    assert DEPTH_DEFAULT == "1024:1:4" and depth_in_force(None, False) == AttnDepth(1024, 1, 4)
    assert depth_in_force(None, True) is None  # an opt-in's one geometry
    assert depth_in_force("0", False) is None and depth_in_force("2048:2:4", True) == d  # said outright: as said
    for bad in ("2048", "2048:2", "0:2:4", "2048:3:4", "2048:2:7", "2048:2:0", "a:2:4", "2048:2:4:1", "-1:2:4"):
        monkeypatch.setattr(CudaOps, "attn_depth_env", bad)
        with pytest.raises(ValueError, match=f"BW24_ATTN_DEPTH='{bad}'"):
            CudaOps()
    ops = CudaOps.__new__(CudaOps)
    ops.attn_depth_env, ops.attn_depth = None, depth_in_force(None, False)
    assert not any("attn_depth" in o for o in CudaOps.opt_in(ops))  # the default: a plain row
    ops.attn_depth = d
    assert "attn_depth_2048x2x4" in CudaOps.opt_in(ops)
    ops.attn_depth_env, ops.attn_depth = "0", None
    assert "no_attn_depth" in CudaOps.opt_in(ops) and not any(o.startswith("attn_depth") for o in CudaOps.opt_in(ops))


def _attention_launches(T=1, H=32, Hkv=8, S=4200, **attrs) -> list[tuple]:
    """attn.attention on a stand-in backend (no GPU): float16 caches of S keys, D = 128; attrs over its settings
    (defaults: 4 q heads a block, no opt-in). Its launches as (kernel, grid, one call's extra defines, args,
    dynamic shared memory bytes)."""
    from types import SimpleNamespace

    from bw24.engine.ops.cuda import attn

    launches: list[tuple] = []
    cu = SimpleNamespace(qmv_configs=SimpleNamespace(tuning=None), attn_override=None, attn_fuse=None, attn_q8=False,
                         attn_split_heads=True, attn_block_heads=4, attn_dec_mma=0, _k=lambda f, n: (f, n, ()),
                         _k_with=lambda f, n, extra: (f, n, extra),
                         _buf=lambda key, n, dtype=np.float32, zeroed=False: np.zeros(max(n, 1), dtype),
                         _launch=lambda fn, g, b, args, shared_mem=0: launches.append((fn[1].split("<")[0], g, fn[2],
                                                                                       len(args), shared_mem)))
    for k, v in attrs.items():
        setattr(cu, k, v)
    q, out = np.zeros((T, H, 128), np.float32), np.zeros((T, H, 128), np.float32)
    kc, vc = np.zeros((Hkv, S, 128), np.float16), np.zeros((Hkv, S, 128), np.float16)
    attn.attention(cu, q, kc, vc, np.zeros(1, np.int32), scale=1.0, softcap=None, window=None, out=out)
    return launches


def test_the_short_class_is_the_steps_up_to_attn_short_keys_and_fuses_their_pass_2(monkeypatch):
    """BW24_ATTN_SHORT=N: a step over at most N cache keys is the short class (its own graph, shallow to the depth
    classes' geometry and to dec_mma_launches) whose attention runs the fused pass 2: attn_split alone, with the
    tickets, no attn_combine; a step past N keys, or any step with BW24_ATTN_FUSE forcing the pass 2 either way,
    is not; without depth classes the short class still is one. Outside a class: as set."""
    from bw24.engine.ops.cuda import attn
    from bw24.engine.ops.cuda.attn import AttnDepth
    from bw24.engine.ops.cuda.backend import CudaOps

    monkeypatch.setattr(attn, "_sm_count", lambda: 132)  # (no GPU here: the H200's SMs)
    ops = CudaOps.__new__(CudaOps)
    ops.attn_block_heads, ops.attn_min_blocks, ops.attn_class, ops.attn_depth = 4, 1, None, AttnDepth(1024, 2, 4)
    ops.attn_short, ops.attn_fuse = 256, None
    for keys, cls, fused, heads in ((1, "shallow", True, 2), (256, "shallow", True, 2), (257, "shallow", False, 2),
                                    (1025, "deep", False, 4)):
        with ops.attn_class_of(keys):
            assert (ops.attn_class, ops.attn_short_fused, ops.attn_block_heads) == (cls, fused, heads), keys
        assert (ops.attn_class, ops.attn_short_fused, ops.attn_block_heads) == (None, False, 4)
    assert [ops._step_class(ops.attn_depth, k) for k in (1, 256, 257, 1025)] == ["short", "short", "shallow", "deep"]
    for forced in (False, True):  # BW24_ATTN_FUSE=0 / 1
        ops.attn_fuse = forced
        assert ops._step_class(ops.attn_depth, 1) == "shallow"
    ops.attn_fuse, ops.attn_depth = None, None
    assert [ops._step_class(None, k) for k in (1, 257, 5000)] == ["short", None, None]
    # tensor-core rows from at most N keys (BW24_ATTN_DEC_MMA=64 or all): no short class (its fused pass 2 keeps every
    # row on attn_split, a verify step past N would not); from past N keys (the 1,024 default) or off: the class
    for mma, cls in ((64, None), (256, "short"), (attn.DEC_MMA_ALL, None), (1024, "short"), (0, "short")):
        ops.attn_dec_mma = mma
        assert ops._step_class(None, 100) == cls, mma
    ops.attn_dec_mma = 0
    ops.attn_short = 0
    assert ops._step_class(None, 1) is None and ops._step_class(AttnDepth(1024, 2, 4), 1) == "shallow"

    def kernels(**attrs):
        return [name for name, *_ in _attention_launches(S=320, **attrs)]

    assert kernels(attn_short_fused=True) == ["attn_split"]
    assert kernels(attn_short_fused=False) == ["attn_split", "attn_combine"]
    assert kernels(attn_short_fused=True, attn_fuse=False) == ["attn_split", "attn_combine"]  # forced off wins


def test_default_splits_fill_one_wave_of_the_default_grid(monkeypatch):
    """The split count's default (attn.default_max_splits over split_units): a grid of kv heads x their default
    head groups x splits holds 4 blocks on each of the H200's 132 SMs, one wave. Hand-counted per model (kv heads,
    q heads a kv head): the 0.6B (8, 2), the 8B (8, 4) 66; the 32B (8, 8: two blocks of 4) 33 (66 before
    ba03fa3: two waves); the 30B-A3B (4, 8) 66; smollm2 (3, 3) 176; qwen2.5-coder-1.5b (2, 6) 256 (the cap). The
    count never follows the q heads a block (BW24_ATTN_BLOCK_HEADS, a depth class): the splits set the partials'
    summation, so the bits stay one model's."""

    from bw24.engine.ops.cuda import attn

    shapes = {"0.6b": (8, 2, 66), "8b": (8, 4, 66), "32b": (8, 8, 33), "30b-a3b": (4, 8, 66), "smollm2": (3, 3, 176),
              "qwen2.5-1.5b": (2, 6, 256)}
    for name, (hkv, G, want) in shapes.items():
        assert attn.attn_geometry(None, 40000, hkv, n_sm=132, group=G) == (ATTN_CHUNK, want), name
        assert attn.attn_geometry(None, 129, hkv, n_sm=132, group=G) == (ATTN_CHUNK, 5), name  # d0: 5 live units
    assert attn.attn_geometry(None, 40000, 8, n_sm=132) == (ATTN_CHUNK, 66)  # (group 1: memory.plan's bound)

    def grid(heads_a_block, H=64):
        return [g for n, g, *_ in _attention_launches(H=H, attn_block_heads=heads_a_block) if n == "attn_split"][0]

    monkeypatch.setattr(attn, "_sm_count", lambda: 132)  # (no GPU here: the H200's SMs)
    assert grid(4) == (16, 33, 1) and grid(2) == (32, 33, 1) and grid(1) == (64, 33, 1)  # the 32B: splits stay
    assert grid(4, H=32) == (8, 66, 1) and grid(2, H=32) == (16, 66, 1)  # the 8B


def _depth_ops(monkeypatch, depth):
    """A CudaOps shell for CudaOps.capture without a GPU: CapturedGraph replaced by a recorder."""
    import bw24.runtime as rt
    from bw24.engine.ops.cuda.backend import CudaOps

    log: list[str] = []

    class FakeGraph:
        def __init__(self, stream):
            pass

        def capture(self, step):
            log.append("capture")
            step()  # (a capture records the step's launches: here it runs them once, as a record)
            return self

        def replay(self):
            log.append("replay")

    monkeypatch.setattr(rt, "CapturedGraph", FakeGraph)
    ops = CudaOps.__new__(CudaOps)
    ops.use_graphs, ops.stream, ops._scratch_gen, ops._capturing = True, None, 0, False
    ops.attn_depth, ops.attn_block_heads, ops.attn_min_blocks = depth, 4, 1
    return ops, log


def test_capture_runs_each_depth_class_with_its_geometry_and_graph(monkeypatch):
    """CudaOps.capture with keys and BW24_ATTN_DEPTH=40:2:4: a call whose cache holds at most 40 keys runs (eagerly
    first, captured at its second call, then replayed) with 2 q heads a block, a deeper one with its own
    eager call, capture and replays at 4 blocks an SM; the geometry is restored after every call; a class's
    graph whose scratch generation moved is captured again. Without keys (or without the variable) one state
    serves every depth, as before."""
    from bw24.engine.ops.cuda.attn import AttnDepth

    ops, log = _depth_ops(monkeypatch, AttnDepth(40, 2, 4))
    ops.attn_short = 0  # (the depth classes alone: the short class's own test is below)
    keys = [39]
    ran: list[tuple[int, int]] = []

    def step():
        ran.append((ops.attn_block_heads, ops.attn_min_blocks))
        ops._host_synced = getattr(ops, "_host_synced", False)

    run = ops.capture(step, keys=lambda: keys[0])
    for k in (39, 40, 40, 41, 42, 43, 44):
        keys[0] = k
        run()
        assert (ops.attn_block_heads, ops.attn_min_blocks) == (4, 1)  # restored
    shallow, deep = (2, 1), (4, 4)
    assert ran == [shallow, shallow, deep, deep]  # each class: its eager call, then its capture's record
    assert log == ["capture", "replay", "replay", "capture", "replay", "replay", "replay"]
    assert set(run.graph_states) == {"shallow", "deep"} and run.graph_state is run.graph_states["shallow"]
    ops._scratch_gen += 1  # another class's eager call grew scratch: this class's graph is stale
    run()
    assert log[-2:] == ["capture", "replay"] and ran[-1] == deep
    plain, plain_log = _depth_ops(monkeypatch, AttnDepth(40, 2, 4))
    one = plain.capture(lambda: ran.append((plain.attn_block_heads, plain.attn_min_blocks)))  # no keys: one state
    n = len(ran)
    for _ in range(4):
        one()
    assert ran[n:] == [(4, 1)] * 2 and plain_log == ["capture", "replay", "replay", "replay"]


def test_a_planted_macro_goes_only_to_the_files_that_name_it():
    """CudaOps.kernel_defines: a planted variant's macro is in the defines of the kernel files whose source (or a
    header) names it, not of the others (there it changes no code, and it made every module a canary's cases
    touched compile again); the opt-ins' defines stay where they were. Canary: a macro no file names is nowhere."""
    from bw24.engine.ops.cuda.backend import CudaOps
    from bw24.engine.ops.cuda.kernels import COMPILE_SET, names_macro

    ops = CudaOps.__new__(CudaOps)
    ops.pdl, ops.variant = True, "planted_fill"
    assert ops.kernel_defines("attention.cu") == (("BW24_PLANTED_FILL", 1), ("BW24_PDL", 1), ("BW24_ATTN_PIPE", 1),
                                                  ("BW24_ATTN_SHORT", 256))  # (the pipe's and short class's defaults)
    assert ops.kernel_defines("qmatvec_q8.cu") == (("BW24_PDL", 1),)
    ops.variant = "planted_bug"
    with_bug = {f for f in COMPILE_SET if ("BW24_PLANTED_BUG", 1) in ops.kernel_defines(f)}
    assert with_bug == {"attention_mma.cu", "attention_prefill.cu", "moe.cu", "moe_mm.cu", "prefill_gemm.cu",
                        "qmatvec.cu", "qmatvec_q8.cu"}
    ops.variant, ops.attn_fill, ops.attn_min_blocks = "", 2, 4
    assert ops.kernel_defines("attention.cu") == (("BW24_PDL", 1), ("BW24_ATTN_PIPE", 1), ("BW24_ATTN_SHORT", 256),
                                                  ("BW24_ATTN_FILL", 2), ("ATTN_MIN_BLOCKS", 4))
    assert not any(names_macro(f, "BW24_PLANTED_NOWHERE") for f in COMPILE_SET)


def test_attn_dec_mma_is_checked_recorded_and_planted_only_in_its_file(monkeypatch, helpers):
    """BW24_ATTN_DEC_MMA: unset (the model's policy decides), 0 (off), a positive multiple of 32 or `all`, else an
    error naming the variable; perf rows say attn_dec_mma_N, or no_attn_dec_mma for 0; the planted canary's macro
    reaches attention_dec_mma.cu alone, BW24_ATTN_SHORT both files that split by its rule."""
    from bw24.engine.ops.cuda.backend import CudaOps

    assert CudaOps.attn_dec_mma == 0 and CudaOps.attn_dec_mma_env is None
    for bad in ("16", "100", "-64", "x", "1000", "", "ALL"):
        monkeypatch.setattr(CudaOps, "attn_dec_mma_env", bad)
        with pytest.raises(ValueError, match=f"BW24_ATTN_DEC_MMA='{bad}'"):
            CudaOps()
    monkeypatch.undo()
    ops = CudaOps.__new__(CudaOps)
    assert not any("attn_dec_mma" in o for o in CudaOps.opt_in(ops))
    ops.attn_dec_mma_env = "0"
    assert [o for o in CudaOps.opt_in(ops) if "attn_dec_mma" in o] == ["no_attn_dec_mma"]
    ops.attn_dec_mma_env = "1024"
    assert "attn_dec_mma_1024" in CudaOps.opt_in(ops)
    ops.attn_dec_mma_env = "all"
    assert "attn_dec_mma_all" in CudaOps.opt_in(ops)
    ops.pdl, ops.variant = True, "planted_decmma"
    assert ops.kernel_defines("attention_dec_mma.cu") == (("BW24_PLANTED_DECMMA", 1), ("BW24_PDL", 1),
                                                          ("BW24_DEC_MMA_PIPE", 1), ("BW24_DEC_MMA_EARLY", 1), ("BW24_ATTN_SHORT", 256))
    assert ops.kernel_defines("attention.cu") == (("BW24_PDL", 1), ("BW24_ATTN_PIPE", 1), ("BW24_ATTN_SHORT", 256))
    # the gate names the float16 products it rounds by (CudaOps.rounded_paths)
    ops.qmv_configs = type("Q", (), {"f32_body": False})()
    ops.prefill_precision, ops.attn_dec_mma = "split", 0
    assert "fp16-decode-attention" not in CudaOps.rounded_paths(ops)
    ops.attn_dec_mma = 1024
    assert "fp16-decode-attention" in CudaOps.rounded_paths(ops)
    ops.variant, ops.attn_short = "", 128
    assert ("BW24_ATTN_SHORT", 128) in ops.kernel_defines("attention_dec_mma.cu")
    assert ("BW24_ATTN_SHORT", 128) in ops.kernel_defines("attention.cu")


def test_dec_mma_default_follows_the_q_heads_a_kv_head_unless_the_variable_is_set():
    """Unset BW24_ATTN_DEC_MMA: prepare_model's policy gives models of 2 or more q heads a kv head (the 32B's and the
    30B-A3B's 8, the 8B's 4, the 0.6B's 2, the pair's 6 and 7, smollm2's 3) tensor-core rows past 1,024 live keys,
    and a model without grouped heads (MHA: never measured) none; a set variable wins for every model, 0 included."""
    from types import SimpleNamespace

    from bw24.engine.ops.cuda import attn
    from bw24.engine.ops.cuda.backend import CudaOps

    def policy(n_head, n_head_kv, env=None):
        ops = CudaOps.__new__(CudaOps)
        ops.attn_dec_mma_env, ops.attn_dec_mma = env, 0 if env in (None, "0") else 512
        CudaOps._attention_policy(ops, SimpleNamespace(n_head=n_head, n_head_kv=n_head_kv))
        return ops.attn_dec_mma

    assert attn.DEC_MMA_KEYS == 1024 and attn.DEC_MMA_MIN_G == 2
    for h, hkv in ((64, 8), (32, 4), (16, 8), (32, 8), (12, 2), (14, 2), (9, 3)):  # 32B, 30B-A3B, 0.6B, 8B, pair, smollm2
        assert policy(h, hkv) == 1024, (h, hkv)
    assert policy(8, 8) == policy(12, 12) == 0  # MHA
    assert policy(64, 8, "0") == 0 and policy(16, 8, "512") == 512  # the variable's value, whatever the model


def test_the_tensor_core_rows_take_their_own_split_count_whatever_the_depth_or_tokens(monkeypatch):
    """attn.attn_geometry's mma: a model whose deep rows take the tensor-core pass 1 (dec_mma_from) runs
    DEC_MMA_SPLITS splits (33: two 64-key tiles a split at 4,096 keys, for the pipe), over the table's attn_split
    count (66 on the H200), unless a table says "mma_splits" or max_splits is forced (BW24_ATTN_DECODE, a sweep).
    The count is one per model: the same at T = 1 and T = 5, in either depth class, with the pipe on or off (the
    pipe's bits are the plain kernel's, kernel-check's pipe cases), so verify rows stay decode rows."""
    from bw24.engine.ops.cuda import attn

    monkeypatch.setattr(attn, "_sm_count", lambda: 132)
    table = type("T", (), {"config": lambda self, s, k: {"chunk": 32, "max_splits": 66}})()
    assert attn.DEC_MMA_SPLITS == 33
    assert attn.attn_geometry(table, 4200, 8) == (32, 66)
    assert attn.attn_geometry(table, 4200, 8, mma=True) == (32, 33)
    assert attn.attn_geometry(table, 4200, 8, override={"max_splits": 16}, mma=True) == (32, 16)
    assert attn.attn_geometry(table, 4200, 8, override={"chunk": 32}, mma=True) == (32, 33)
    own = type("T", (), {"config": lambda self, s, k: {"chunk": 32, "max_splits": 66, "mma_splits": 16}})()
    assert attn.attn_geometry(own, 4200, 8, mma=True) == (32, 16)
    assert attn.attn_geometry(table, 600, 8, mma=True) == (32, 19)  # a short cache: its 32-key units

    def splits(**kw):  # the grid's splits of every pass-1 launch (attn_split, attn_dec_mma) of one call
        return {g[1] for n, g, *_ in _attention_launches(**kw) if n in ("attn_split", "attn_dec_mma")}

    depth = attn.AttnDepth(1024, 2, 4)
    for T in (1, 5):
        for pipe in (False, True):
            assert splits(T=T, attn_dec_mma=1024, attn_dec_pipe=pipe) == {33}, (T, pipe)
            for cls in ("shallow", "deep"):
                assert splits(T=T, attn_dec_mma=1024, attn_dec_pipe=pipe, attn_class=cls, attn_depth=depth) == {33}
        assert splits(T=T) == {66}  # no tensor-core rows: attn_split's own count (the stand-in's default grid)


def test_decode_kernel_count_runs_in_the_depth_class_of_the_graph(monkeypatch):
    """perf rows' kernels per token: the eager step is counted inside the depth class its graph runs in
    (CudaOps.attn_class_of, capture's rule: deep past attn_depth.keys cache keys), where attn.dec_mma_launches
    skips the kernel with no row. Outside a class a G = 8 model's step counted attn_split and attn_dec_mma both
    (the 32B's d4096 709 kernels a token against 645 at e6bec2b's BW24_ATTN_DEC_MMA=1024 row)."""
    from types import SimpleNamespace

    import bw24.engine.perf.runner as runner
    from bw24.engine.ops.cuda.attn import AttnDepth
    from bw24.engine.ops.cuda.backend import CudaOps

    ops = CudaOps.__new__(CudaOps)
    ops.attn_block_heads, ops.attn_min_blocks, ops.attn_class, ops.attn_depth = 4, 1, None, AttnDepth(1024, 2, 4)
    for keys, want in ((1025, "deep"), (1024, "shallow"), (1, "shallow")):
        with ops.attn_class_of(keys):
            assert ops.attn_class == want
        assert ops.attn_class is None
    ops.attn_depth = None
    with ops.attn_class_of(5000):
        assert ops.attn_class is None  # no classes: one geometry
    ops.attn_depth = AttnDepth(1024, 2, 4)

    ops.attn_depth, seen = AttnDepth(1024, 2, 4), []
    kv = SimpleNamespace(n_past=0)
    kv.reset = lambda n: setattr(kv, "n_past", n)
    kv.reserve = lambda n: setattr(kv, "n_past", kv.n_past + n)
    monkeypatch.setattr(runner, "count_launches", lambda o, fn: seen.append(o.attn_class) or 7)
    for base, want in ((4096, "deep"), (1, "shallow")):
        me = SimpleNamespace(model=SimpleNamespace(kv=kv), base=base, ops=ops, _step=None)
        for cls in vars(runner).values():
            if isinstance(cls, type) and "_count_decode_kernels" in vars(cls):
                assert cls._count_decode_kernels(me) == 7
        assert seen[-1] == want


def test_dec_mma_applies_where_its_kernel_has_the_case_and_skips_launches_without_rows():
    """attn.dec_mma_from: the threshold only for a float16 cache, D = Dv in (64, 128), G <= 8 and a separate pass 2;
    dec_mma_launches: both kernels outside a depth class, the mma one skipped in a shallow class whose keys stay
    under the threshold, attn_split skipped for one token of a deep class (no window) whose keys are past it, and
    both for verify rows (some may sit under it)."""
    from types import SimpleNamespace

    from bw24.engine.ops.cuda.attn import DEC_MMA_ALL, AttnDepth, dec_mma_from, dec_mma_launches

    half, f32 = np.zeros((8, 64, 128), np.float16), np.zeros((8, 64, 128), np.float32)
    cu = SimpleNamespace(attn_dec_mma=1024)
    assert dec_mma_from(cu, half, 128, 128, 4, False) == 1024
    assert dec_mma_from(cu, half, 64, 64, 7, False) == 1024
    for args in ((f32, 128, 128, 4, False), (half, 256, 256, 4, False), (half, 128, 64, 4, False),
                 (half, 128, 128, 16, False), (half, 128, 128, 4, True)):
        assert dec_mma_from(cu, *args) is None, args[1:]
    assert dec_mma_from(SimpleNamespace(attn_dec_mma=0), half, 128, 128, 4, False) is None
    assert dec_mma_from(SimpleNamespace(), half, 128, 128, 4, False) is None  # (a backend without it)
    assert dec_mma_from(SimpleNamespace(attn_dec_mma=DEC_MMA_ALL), half, 128, 128, 4, False) == 0  # every row

    def launches(cls, T, window=None, keys=1024, frm=1024):
        c = SimpleNamespace(attn_class=cls, attn_depth=AttnDepth(keys, 2, 4))
        return dec_mma_launches(c, frm, T, window)

    assert dec_mma_launches(SimpleNamespace(), None, 1, None) == (True, False)  # off: attn_split alone
    assert dec_mma_launches(SimpleNamespace(), 0, 5, None) == (False, True)  # `all`: the mma kernel alone
    assert launches("shallow", 1, frm=0) == (False, True)
    assert launches(None, 1) == (True, True)  # outside a class: both (each returns for the other's rows)
    assert launches("shallow", 1) == (True, False) and launches("shallow", 5) == (True, False)
    assert launches("shallow", 1, keys=2048) == (True, True)  # a shallow class reaching past the threshold
    assert launches("deep", 1) == (False, True)
    assert launches("deep", 5) == (True, True)  # verify rows: the first may sit under the threshold
    assert launches("deep", 1, window=512) == (True, True)  # a window: the live keys may be fewer
    assert launches("deep", 1, keys=512) == (True, True)  # a deep class starting under the threshold


def test_attention_dispatch_with_dec_mma(monkeypatch):
    """attention() with BW24_ATTN_DEC_MMA=1024 on the 8B's shape at 4,096 cache keys: attn_split built with the
    threshold (its rows past it return), attn_dec_mma on a (kv heads, splits, T) grid with the same splits, then
    attn_combine for every row; inside a deep class one token skips attn_split, inside a shallow one the mma
    launch; without the setting the launches are as before."""

    from bw24.engine.ops.cuda import attn
    from bw24.engine.ops.cuda.attn import AttnDepth

    def run(frm, cls=None, T=1, H=32):
        return _attention_launches(T=T, H=H, attn_dec_mma=frm, attn_class=cls, attn_depth=AttnDepth(1024, 2, 4))

    monkeypatch.setattr(attn, "_sm_count", lambda: 132)  # (no GPU here; the H200's SMs)
    assert [x[0] for x in run(0)] == ["attn_split", "attn_combine"] and run(0)[0][2] == ()
    both = run(1024)
    assert [x[0] for x in both] == ["attn_split", "attn_dec_mma", "attn_combine"]
    assert both[0][2] == (("BW24_ATTN_DEC_MMA", 1024),) and both[1][2] == ()
    assert both[0][1] == (8, 33, 1) and both[1][1] == (8, 33, 1) and both[1][3] == 17  # attn.DEC_MMA_SPLITS
    assert [x[0] for x in run(1024, "deep")] == ["attn_dec_mma", "attn_combine"]
    assert [x[0] for x in run(1024, "deep", T=5)] == ["attn_split", "attn_dec_mma", "attn_combine"]
    assert [x[0] for x in run(1024, "shallow")] == ["attn_split", "attn_combine"]
    assert [x[0] for x in run(attn.DEC_MMA_ALL, "shallow")] == ["attn_dec_mma", "attn_combine"]  # `all`
    # the 32B's shape (8 q heads a kv head): 33 splits for attn_split's two head groups, and DEC_MMA_SPLITS (33)
    # with the mma kernel's one block a kv head (its grid: 8 x 33 = 264 blocks, two tiles a split at 4,096 keys)
    q32 = dict(H=64)
    assert [x[1] for x in run(0, **q32)][0] == (16, 33, 1)
    assert [x[1] for x in run(1024, **q32)][:2] == [(16, 33, 1), (8, 33, 1)]


def test_dec_pipe_is_on_by_default_refused_or_recorded_built_into_its_file_alone_and_launched_with_two_stages(
        monkeypatch, helpers):
    """BW24_ATTN_DEC_PIPE (attn_dec_mma's tiles through two cp.async stages): on by default since 5107205's figures
    (attn.DEC_MMA_MIN_G), 0 turns it off and perf rows say no_attn_dec_pipe, any other value a clear error naming the
    variable; on, attention_dec_mma.cu builds with BW24_DEC_MMA_PIPE (attention.cu without), the planted canary's
    macro reaches that file alone, and the mma launch takes two stages of a 64-key tile's padded K and V rows (69,632
    bytes at D = 128: past the 48 KB a kernel gets unasked, so CudaOps._launch opts it in) while attn_split and
    attn_combine take none."""
    from bw24.engine.ops.cuda import attn
    from bw24.engine.ops.cuda.backend import CudaOps

    assert CudaOps.attn_dec_pipe is True and CudaOps.attn_dec_pipe_env == "1"
    helpers.env_switch_refuses(monkeypatch, "attn_dec_pipe_env", "BW24_ATTN_DEC_PIPE")
    ops = CudaOps.__new__(CudaOps)
    assert "no_attn_dec_pipe" not in CudaOps.opt_in(ops)
    ops.attn_dec_pipe = False
    assert "no_attn_dec_pipe" in CudaOps.opt_in(ops)
    ops.attn_dec_pipe = True
    ops.pdl, ops.variant = True, ""
    assert ops.kernel_defines("attention_dec_mma.cu") == (("BW24_PDL", 1), ("BW24_DEC_MMA_PIPE", 1),
                                                          ("BW24_DEC_MMA_EARLY", 1), ("BW24_ATTN_SHORT", 256))
    assert ops.kernel_defines("attention.cu") == (("BW24_PDL", 1), ("BW24_ATTN_PIPE", 1), ("BW24_ATTN_SHORT", 256))
    ops.variant = "planted_decpipe"
    assert ("BW24_PLANTED_DECPIPE", 1) in ops.kernel_defines("attention_dec_mma.cu")
    assert ("BW24_PLANTED_DECPIPE", 1) not in ops.kernel_defines("attention.cu")

    monkeypatch.setattr(attn, "_sm_count", lambda: 132)
    assert attn.dec_pipe_smem(128, 128) == 2 * 64 * (136 + 136) * 2 == 69632
    assert attn.dec_pipe_smem(64, 64) == 2 * 64 * (72 + 72) * 2
    piped = _attention_launches(H=64, attn_dec_mma=1024, attn_dec_pipe=True)
    assert [(x[0], x[4]) for x in piped] == [("attn_split", 0), ("attn_dec_mma", 69632), ("attn_combine", 0)]
    plain = _attention_launches(H=64, attn_dec_mma=1024, attn_dec_pipe=False)
    assert [x[4] for x in plain] == [0, 0, 0] and [x[:4] for x in plain] == [x[:4] for x in piped]



def test_dec_early_is_on_by_default_refused_or_recorded_and_built_with_the_pipe_alone(monkeypatch, helpers):
    """BW24_ATTN_DEC_EARLY (attn_dec_mma's first tiles of older cache rows before the PDL wait): on by default since
    73fcbc7's figures, 0 turns it off and perf rows say no_attn_dec_early, any other value a clear error naming the
    variable; on, only attention_dec_mma.cu builds with BW24_DEC_MMA_EARLY, and only beside BW24_DEC_MMA_PIPE (its
    stages hold the early tiles: without the pipe nothing is built, and nothing to record as off); the planted
    canary's macro reaches that file alone."""
    from bw24.engine.ops.cuda.backend import CudaOps

    assert CudaOps.attn_dec_early is True and CudaOps.attn_dec_early_env == "1"
    helpers.env_switch_refuses(monkeypatch, "attn_dec_early_env", "BW24_ATTN_DEC_EARLY")
    ops = CudaOps.__new__(CudaOps)
    ops.pdl, ops.variant, ops.attn_dec_pipe = True, "", True
    assert "no_attn_dec_early" not in CudaOps.opt_in(ops)
    assert ops.kernel_defines("attention_dec_mma.cu") == (("BW24_PDL", 1), ("BW24_DEC_MMA_PIPE", 1),
                                                          ("BW24_DEC_MMA_EARLY", 1), ("BW24_ATTN_SHORT", 256))
    assert ops.kernel_defines("attention.cu") == (("BW24_PDL", 1), ("BW24_ATTN_PIPE", 1), ("BW24_ATTN_SHORT", 256))
    ops.attn_dec_early = False
    assert "no_attn_dec_early" in CudaOps.opt_in(ops)
    assert ops.kernel_defines("attention_dec_mma.cu") == (("BW24_PDL", 1), ("BW24_DEC_MMA_PIPE", 1),
                                                          ("BW24_ATTN_SHORT", 256))
    ops.attn_dec_early, ops.variant = True, "planted_decearly"
    assert ("BW24_PLANTED_DECEARLY", 1) in ops.kernel_defines("attention_dec_mma.cu")
    assert ("BW24_PLANTED_DECEARLY", 1) not in ops.kernel_defines("attention.cu")
    ops.variant, ops.attn_dec_pipe = "", False
    assert "no_attn_dec_early" not in CudaOps.opt_in(ops)
    assert ops.kernel_defines("attention_dec_mma.cu") == (("BW24_PDL", 1), ("BW24_ATTN_SHORT", 256))

def test_dec_bounds_is_checked_built_for_the_tensor_core_attention_alone_and_recorded(tmp_path, monkeypatch, helpers):
    """BW24_ATTN_DEC_BOUNDS: 1..4 blocks an SM attn_dec_mma is built for, 0 / unset its rule (no define), else an error
    naming the variable; perf rows say attn_dec_bounds_N; only attention_dec_mma.cu gets DM_MIN_BLOCKS. The 32B's and
    the 8B's instances compile under each, and the planted canary's build."""
    from bw24.engine.ops.cuda.backend import CudaOps
    from bw24.engine.ops.cuda.kernels import KERNEL_DIR
    from bw24.runtime import compile_cubin

    assert CudaOps.attn_dec_bounds == 0 and CudaOps.attn_dec_bounds_env == "0"
    helpers.env_refused_or_recorded(monkeypatch, "attn_dec_bounds_env", "BW24_ATTN_DEC_BOUNDS", ("5", "-1", "three"),
                                    "3", "0", "attn_dec_bounds")
    monkeypatch.undo()
    ops = CudaOps.__new__(CudaOps)
    ops.pdl, ops.variant, ops.attn_dec_pipe = True, "", True
    assert not any(d[0] == "DM_MIN_BLOCKS" for d in ops.kernel_defines("attention_dec_mma.cu"))
    ops.attn_dec_bounds = 2
    assert ("DM_MIN_BLOCKS", 2) in ops.kernel_defines("attention_dec_mma.cu")
    assert not any(d[0] == "DM_MIN_BLOCKS" for d in ops.kernel_defines("attention.cu"))
    ops.variant = "planted_decbounds"
    assert ("BW24_PLANTED_DECBOUNDS", 1) in ops.kernel_defines("attention_dec_mma.cu")
    assert ("BW24_PLANTED_DECBOUNDS", 1) not in ops.kernel_defines("attention.cu")
    monkeypatch.setenv("BW24_KERNEL_CACHE", str(tmp_path))
    names = ("attn_dec_mma<128,128,8,32>", "attn_dec_mma<128,128,4,32>")
    base = {"BW24_PDL": 1, "BW24_DEC_MMA_PIPE": 1, "BW24_DEC_MMA_EARLY": 1}
    for extra in ({}, {"DM_MIN_BLOCKS": 4}, {"DM_MIN_BLOCKS": 2}, {"BW24_PLANTED_DECBOUNDS": 1}):
        ck = compile_cubin(KERNEL_DIR / "attention_dec_mma.cu", "90a", defines={**base, **extra}, name_expressions=names)
        assert ck.cubin[:4] == b"\x7fELF" and set(ck.lowered) == set(names)


def test_dec_late_is_opt_in_refused_or_recorded_and_built_into_the_tensor_core_attention_alone(tmp_path, monkeypatch,
                                                                                               helpers):
    """BW24_ATTN_DEC_LATE (attn_dec_mma's PDL trigger after its tiles): off by default, 1 builds attention_dec_mma.cu
    alone with BW24_DEC_MMA_LATE_TRIGGER and perf rows say attn_dec_late, another value is an error naming the
    variable; the planted canary's macro reaches that file alone; the 32B's and the 8B's instances compile with it,
    through the pipe and without, and the canary's build; kernel-check holds the build to the start trigger's bits
    (its "attn dec late trigger == start bitwise" cases, one per build shape)."""
    from bw24.engine.kernel_cases_attn import DEC_BUILD_SHAPES, dec_late_cases
    from bw24.engine.ops.cuda.backend import CudaOps
    from bw24.engine.ops.cuda.kernels import KERNEL_DIR
    from bw24.runtime import compile_cubin

    helpers.opt_in_switch(monkeypatch, "attn_dec_late", "attn_dec_late_env", "BW24_ATTN_DEC_LATE", "attn_dec_late",
                          "planted_declate", "BW24_PLANTED_DECLATE", "attention_dec_mma.cu", "attention.cu")
    ops = CudaOps.__new__(CudaOps)  # (opt_in_switch checked the perf label, off and on)
    ops.pdl, ops.variant, ops.attn_dec_pipe = True, "", True
    assert not any(d[0] == "BW24_DEC_MMA_LATE_TRIGGER" for d in ops.kernel_defines("attention_dec_mma.cu"))
    ops.attn_dec_late = True
    assert ("BW24_DEC_MMA_LATE_TRIGGER", 1) in ops.kernel_defines("attention_dec_mma.cu")
    assert not any(d[0] == "BW24_DEC_MMA_LATE_TRIGGER" for d in ops.kernel_defines("attention.cu"))
    cases = [name for name, _ in dec_late_cases()]
    assert len(cases) == len(DEC_BUILD_SHAPES) and all(n.startswith("attn dec late trigger == start bitwise")
                                                       for n in cases)
    monkeypatch.setenv("BW24_KERNEL_CACHE", str(tmp_path))
    names = ("attn_dec_mma<128,128,8,32>", "attn_dec_mma<128,128,4,32>")
    late = {"BW24_DEC_MMA_LATE_TRIGGER": 1}
    for defines in ({"BW24_PDL": 1, "BW24_DEC_MMA_PIPE": 1, "BW24_DEC_MMA_EARLY": 1, **late}, {"BW24_PDL": 1, **late},
                    {"BW24_PDL": 1, "BW24_DEC_MMA_PIPE": 1, "BW24_PLANTED_DECLATE": 1, **late}):
        ck = compile_cubin(KERNEL_DIR / "attention_dec_mma.cu", "90a", defines=defines, name_expressions=names)
        assert ck.cubin[:4] == b"\x7fELF" and set(ck.lowered) == set(names)


def test_merge_factors_is_the_default_refused_or_recorded_and_reaches_both_attention_files(tmp_path, monkeypatch,
                                                                                          helpers):
    """BW24_ATTN_MERGE_FACTORS (a block's merge with each head's factors worked out once, attn_chunk.cuh): on by
    default with no define; 0 builds attention.cu and attention_dec_mma.cu (both merge through attn_chunk.cuh) with
    the per-element merge and perf rows say no_attn_merge_factors; another value is an error naming the variable;
    the planted canary's macro reaches both files; both builds of both files compile."""
    from bw24.engine.ops.cuda.backend import CudaOps
    from bw24.engine.ops.cuda.kernels import KERNEL_DIR
    from bw24.runtime import compile_cubin

    assert CudaOps.attn_merge_factors is True and CudaOps.attn_merge_factors_env == "1"
    helpers.env_switch_refuses(monkeypatch, "attn_merge_factors_env", "BW24_ATTN_MERGE_FACTORS")
    ops = CudaOps.__new__(CudaOps)
    ops.pdl, ops.variant = False, ""
    assert "no_attn_merge_factors" not in CudaOps.opt_in(ops)
    assert not any(d[0] == "BW24_ATTN_MERGE_FACTORS" for f in ("attention.cu", "attention_dec_mma.cu")
                   for d in ops.kernel_defines(f))
    ops.attn_merge_factors = False
    assert "no_attn_merge_factors" in CudaOps.opt_in(ops)
    for f in ("attention.cu", "attention_dec_mma.cu"):
        assert ("BW24_ATTN_MERGE_FACTORS", 0) in ops.kernel_defines(f)
    assert not any(d[0] == "BW24_ATTN_MERGE_FACTORS" for d in ops.kernel_defines("qmatvec_q8.cu"))
    ops.variant = "planted_mergef"
    for f in ("attention.cu", "attention_dec_mma.cu"):
        assert ("BW24_PLANTED_MERGEF", 1) in ops.kernel_defines(f)
    monkeypatch.setenv("BW24_KERNEL_CACHE", str(tmp_path))
    for file, names in (("attention.cu", ("attn_split<128,128,4,32,__half>", "attn_split<64,64,3,32>")),
                        ("attention_dec_mma.cu", ("attn_dec_mma<128,128,8,32>",))):
        for defines in ({"BW24_ATTN_MERGE_FACTORS": 0}, {}, {"BW24_PLANTED_MERGEF": 1}):
            ck = compile_cubin(KERNEL_DIR / file, "90a", defines=defines, name_expressions=names)
            assert ck.cubin[:4] == b"\x7fELF" and set(ck.lowered) == set(names)


# Default-on switches that build one kernel file: (CudaOps flag, its variable, the define 0 gives, the file, another
# file, planted variant, canary macro, names, builds). Perf rows say "no_" + flag when off.
DEFAULT_SWITCHES = (
    ("attn_dec_unroll", "BW24_ATTN_DEC_UNROLL", "BW24_DEC_MMA_COPY_UNROLL", "attention_dec_mma.cu", "attention.cu",
     "planted_decunroll", "BW24_PLANTED_DECUNROLL",
     ("attn_dec_mma<128,128,8,32>", "attn_dec_mma<128,128,4,32>", "attn_dec_mma<64,64,7,32>"),
     ({"BW24_PDL": 1, "BW24_DEC_MMA_PIPE": 1, "BW24_DEC_MMA_EARLY": 1}, {"BW24_PDL": 1},
      {"BW24_PDL": 1, "BW24_DEC_MMA_COPY_UNROLL": 0}, {"BW24_PDL": 1, "BW24_PLANTED_DECUNROLL": 1})),
    ("qmv8_early", "BW24_QMV8_EARLY", "QMV8_EARLY", "qmatvec_q8.cu", "qmatvec.cu", "planted_qmv8late",
     "BW24_PLANTED_QMV8LATE", ("qmv8<3,4,8,1>", "qmv8<7,2,4,1>", "qmv8_na<7,2,4,1>"),
     ({"BW24_PDL": 1}, {"BW24_PDL": 1, "QMV8_EARLY": 0}, {"BW24_PDL": 1, "QMV8_EARLY": 0, "BW24_PLANTED_QMV8LATE": 1},
      {"BW24_PDL": 1, "QMV8_EARLY": 0, "QMV8_DECODE_LOADS": 8})),
)


@pytest.mark.parametrize("sw", DEFAULT_SWITCHES, ids=[w[0] for w in DEFAULT_SWITCHES])
def test_default_switches_refused_or_recorded_and_built_for_their_file_alone(sw, tmp_path, monkeypatch, helpers):
    """BW24_ATTN_DEC_UNROLL (attn_dec_mma's tile copies unrolled whole) and BW24_QMV8_EARLY (a decode q8 matvec's
    first weight group loaded before the PDL wait): on by default with no define (the kernel's own default); 0 builds
    its file alone with the define at 0 and perf rows say no_<flag>; another value is an error naming the variable;
    the planted canary's macro reaches that file alone; its instances compile on, off, as the canary, and with the
    pipe (the 32B's, the 8B's and a D = 64 attn_dec_mma) or batched loads (the Q8_0 and Q4_K decode matvecs and a
    norm-ahead one)."""
    from bw24.engine.ops.cuda.backend import CudaOps
    from bw24.engine.ops.cuda.kernels import KERNEL_DIR
    from bw24.runtime import compile_cubin

    flag, var, define, file, other_file, planted, macro, names, builds = sw
    assert getattr(CudaOps, flag) is True and getattr(CudaOps, f"{flag}_env") == "1"
    helpers.env_switch_refuses(monkeypatch, f"{flag}_env", var)
    ops = CudaOps.__new__(CudaOps)
    ops.pdl, ops.variant = False, ""
    assert f"no_{flag}" not in CudaOps.opt_in(ops)
    assert not any(d[0] == define for f in (file, other_file) for d in ops.kernel_defines(f))
    setattr(ops, flag, False)
    assert f"no_{flag}" in CudaOps.opt_in(ops)
    assert (define, 0) in ops.kernel_defines(file)
    assert not any(d[0] == define for d in ops.kernel_defines(other_file))
    ops.variant = planted
    assert (macro, 1) in ops.kernel_defines(file) and (macro, 1) not in ops.kernel_defines(other_file)
    monkeypatch.setenv("BW24_KERNEL_CACHE", str(tmp_path))
    for defines in builds:
        ck = compile_cubin(KERNEL_DIR / file, "90a", defines=defines, name_expressions=names)
        assert ck.cubin[:4] == b"\x7fELF" and set(ck.lowered) == set(names)


def test_dynamic_shared_memory_past_48_kb_is_opted_in_once(monkeypatch):
    """bw24.runtime.launch.allow_dynamic_shared: nothing to do up to 48 KB; past it cuFuncSetAttribute
    (MAX_DYNAMIC_SHARED_SIZE_BYTES) once a function and size, again only for a larger size."""
    from types import SimpleNamespace

    from bw24.runtime import launch
    from cupy_backends.cuda.api import driver

    calls: list[tuple] = []
    monkeypatch.setattr(driver, "funcSetAttribute", lambda *a: calls.append(a), raising=False)
    monkeypatch.setattr(launch, "_ALLOWED", {})
    fn = SimpleNamespace(ptr=1234)
    launch.allow_dynamic_shared(fn, 48 * 1024)
    assert calls == []
    launch.allow_dynamic_shared(fn, 69632)
    launch.allow_dynamic_shared(fn, 69632)
    launch.allow_dynamic_shared(fn, 60000)
    assert calls == [(1234, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 69632)]
    launch.allow_dynamic_shared(SimpleNamespace(kernel=SimpleNamespace(ptr=99)), 100000)  # a RawKernel's
    assert calls[-1] == (99, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100000)
    assert launch.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES == driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES


def test_qmv8_loads_is_checked_recorded_and_given_per_decode_launch(monkeypatch, tmp_path):
    """BW24_QMV8_LOADS: unset, each weight's table entry; else one of q8.QMV8_LOADS for every weight (0: the loop as
    before), any other value an error naming the variable; perf rows say qmv8_loads_N when it is set, tuning_dir with
    BW24_TUNING_DIR. The define is a decode launch's own (CudaOps.q8_loads, through _k_with): never in the file's
    defines, never on a verify launch, absent at 0. The batched loop compiles at the decode instances the H200 table
    picks, with and without PDL and with the planted off-by-one (kernel-check's canary runs through it)."""
    from types import SimpleNamespace

    from bw24.engine.ops.cuda.backend import CudaOps
    from bw24.engine.ops.cuda.kernels import KERNEL_DIR
    from bw24.engine.ops.cuda.q8 import QMV8_LOADS
    from bw24.runtime import compile_cubin
    from gguf.constants import GGMLQuantizationType as Q

    assert CudaOps.qmv8_loads is None and QMV8_LOADS == (0, 1, 2, 4, 8, 16)
    for bad in ("3", "32", "-1", "x", ""):
        monkeypatch.setattr(CudaOps, "qmv8_loads_env", bad)
        with pytest.raises(ValueError, match=f"BW24_QMV8_LOADS='{bad}'"):
            CudaOps()
    monkeypatch.undo()
    ops = CudaOps.__new__(CudaOps)
    ops.pdl, ops.variant = True, ""
    assert not any("qmv8_loads" in o or o == "tuning_dir" for o in CudaOps.opt_in(ops))
    table = {(Q.Q4_K, 4096, 12288): 8}  # (type, N, K) -> the entry's loads
    ops.qmv_configs = SimpleNamespace(loads=lambda q, n, k: table.get((q, n, k), 0))
    w = SimpleNamespace(qtype=Q.Q4_K)
    assert ops.q8_loads(w, 4096, 12288, 1) == (("QMV8_DECODE_LOADS", 8),)
    assert ops.q8_loads(w, 4096, 12288, 5) == ()  # a verify launch
    assert ops.q8_loads(w, 4096, 4096, 1) == ()  # no entry: 0
    ops.qmv8_loads = 0
    assert ops.q8_loads(w, 4096, 12288, 1) == () and "qmv8_loads_0" in CudaOps.opt_in(ops)
    ops.qmv8_loads = 4
    assert ops.q8_loads(w, 4096, 4096, 1) == (("QMV8_DECODE_LOADS", 4),) and "qmv8_loads_4" in CudaOps.opt_in(ops)
    assert ops.kernel_defines("qmatvec_q8.cu") == (("BW24_PDL", 1),)
    ops.tuning_dir_env = "/somewhere"
    assert "tuning_dir" in CudaOps.opt_in(ops)
    monkeypatch.setenv("BW24_KERNEL_CACHE", str(tmp_path))
    names = ("qmv8_3<7,7,7,2,4,1>", "qmv8<7,4,4,1>", "qmv8<9,1,1,1>", "qmv8<7,8,1,1>", "qmv8_na<7,2,4,1>",
             "qmv8<3,1,2,1>", "qmv8<7,4,4,5>")
    for defines in ({"QMV8_DECODE_LOADS": 16, "BW24_PDL": 1}, {"QMV8_DECODE_LOADS": 4},
                    {"QMV8_DECODE_LOADS": 1, "BW24_PDL": 1, "BW24_PLANTED_BUG": 1}):
        ck = compile_cubin(KERNEL_DIR / "qmatvec_q8.cu", "90a", defines=defines, name_expressions=names)
        assert ck.cubin[:4] == b"\x7fELF" and set(ck.lowered) == set(names), defines


def test_the_table_gives_each_weight_its_loads_and_a_bad_value_none():
    """launch.QmvConfigs.loads: the tuning entry's "loads" for the weight's type and shape (the H200 table's 8B and 32B
    entries of c2b7c7f's sweep: the 8B's Q4_K down projection 8, the 32B's down 4); an entry without one, a value
    outside q8.QMV8_LOADS, or no entry: 0. A workbench override's entry wins, as it does for (W, R)."""
    from bw24.engine.ops.cuda.launch import TUNING_DIR, QmvConfigs
    from bw24.runtime import Tuning, load_tuning
    from bw24.runtime.tuning import device_key
    from gguf.constants import GGMLQuantizationType as Q

    qc = QmvConfigs(load_tuning(TUNING_DIR, device_key("NVIDIA H200", (9, 0))))
    assert qc.loads(Q.Q4_K, 4096, 12288) == 8 and qc.plan(Q.Q4_K, 4096, 12288) == ("q8", 2, 4)
    assert qc.loads(Q.Q6_K, 5120, 25600) == 4 and qc.loads(Q.Q4_K, 6144, 4096) == 0
    t = {"qmatvec": {"Q4_K": {"default": {"warps": 4, "rows": 4, "loads": 3},
                              "shapes": {"64x64": {"warps": 1, "rows": 1, "loads": 16}}}}}
    qc = QmvConfigs(Tuning(t))
    assert qc.loads(Q.Q4_K, 64, 64) == 16 and qc.loads(Q.Q4_K, 32, 64) == 0 and qc.loads(Q.Q6_K, 64, 64) == 0
    qc.overrides["Q4_K"] = {"warps": 2, "rows": 2, "loads": 2}
    assert qc.loads(Q.Q4_K, 64, 64) == 2


def test_a_tuning_dir_without_this_devices_table_is_an_error(monkeypatch, tmp_path):
    """BW24_TUNING_DIR names the folder of an A/B's other table: one without this device's file would run the
    built-in defaults under that name, so QmvConfigs.for_device refuses it, naming the variable and the file.
    Unset, a missing table still gives the defaults (a device nobody tuned)."""
    from types import SimpleNamespace

    import bw24.runtime as rt
    from bw24.engine.ops.cuda import launch
    from gguf.constants import GGMLQuantizationType as Q

    monkeypatch.setattr(rt, "device_info", lambda: SimpleNamespace(name="NVIDIA H200", cc=(9, 0)))
    monkeypatch.setattr(launch, "TUNING_DIR", tmp_path)  # (as BW24_TUNING_DIR=tmp_path sets them at import)
    monkeypatch.setattr(launch, "TUNING_DIR_ENV", str(tmp_path))
    with pytest.raises(ValueError, match="BW24_TUNING_DIR=.* has no nvidia-h200-sm90.json"):
        launch.QmvConfigs.for_device()
    (tmp_path / "nvidia-h200-sm90.json").write_text((launch.Path(launch.__file__).parents[2] / "tuning" /
                                                     "nvidia-h200-sm90.json").read_text())
    assert launch.QmvConfigs.for_device().plan(Q.Q4_K, 4096, 12288) == ("q8", 2, 4)
    monkeypatch.setattr(launch, "TUNING_DIR_ENV", None)
    (tmp_path / "nvidia-h200-sm90.json").unlink()
    assert launch.QmvConfigs.for_device(warn=lambda m: None).tuning.note.startswith("built-in defaults")
