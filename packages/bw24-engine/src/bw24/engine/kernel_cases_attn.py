"""kernel_check cases of the decode-path kernels: split-K attention (attn_split / attn_combine),
register-resident RMSNorm (rmsnorm_reg) and RoPE with the fused qk-norm (rope_kv).

Two kinds of case: against the NumPy reference (tolerance of the op class), and bit-identity of a
T-row launch with T one-row launches ("exact"): row t of a verify step must equal a decode step at
position p0 + t bit for bit (ARCHITECTURE: summation order contract). Depths straddle the split
unit (ops/cuda/attn.py ATTN_CHUNK) and the point where splits start to grow (CH * max_splits).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

import numpy as np

from .kernel_check import Result, compare, setting
from .kernel_check import with_setting as _with
from .ops.cuda.attn import (
    ATTN_CHUNK,
    DEC_MMA_ALL,
    DEC_MMA_DIMS,
    block_heads_of,
    default_max_splits,
    head_groups,
    split_units,
)

Case = Callable[[str, object, object, np.random.Generator], Result]


def _dev(cu, a):
    return cu._put(np.ascontiguousarray(a))


def _pos(cu, p):
    return _dev(cu, np.array([p], np.int32))


# Cache slots past the live keys that every attention case's cache gets on top of its own few (spare_keys sets
# it for a case): the grid's splits come from the cache's size, so a cache sized to the live keys leaves no split
# block past the live range, the one place BW24_ATTN_FILL acts (at 5b56e32 on the H200 its planted canary turned
# only the windowed case red: the others compared the plain kernel with itself).
SPARE_KEYS = 0


def _attn_inputs(rng, T, Hkv, G, D, p0, extra=5):
    H, S = Hkv * G, p0 + T + extra + SPARE_KEYS
    q = rng.standard_normal((T, H, D)).astype(np.float32)
    kc = rng.standard_normal((Hkv, S, D)).astype(np.float32)
    vc = rng.standard_normal((Hkv, S, D)).astype(np.float32)
    return q, kc, vc


def half_cache(kc, vc, half: bool):
    """(device-side, reference-side) caches: a float16 cache's values are the reference's inputs."""
    if not half:
        return (kc, vc), (kc, vc)
    kh, vh = kc.astype(np.float16), vc.astype(np.float16)
    return (kh, vh), (kh.astype(np.float32), vh.astype(np.float32))


def _attn_ref(ref, rng, T, Hkv, G, D, p0, half, kw):
    """Random inputs, the device-side caches (float16 when half) and the reference's output."""
    q, kc, vc = _attn_inputs(rng, T, Hkv, G, D, p0)
    (kd, vd), (kc, vc) = half_cache(kc, vc, half)
    want = np.empty(q.shape, np.float32)
    ref.attention(q, kc, vc, np.array([p0], np.int32), out=want, **kw)
    return q, kd, vd, want


def attn_ref_case(D, G, T, p0, window=None, softcap=None, Hkv=2, half=False) -> Case:
    """cuda attention vs the float64-softmax reference (half: from a float16 KV cache)."""
    def run(name, ref, cu, rng):
        kw = dict(scale=D ** -0.5, softcap=softcap, window=window)
        q, kd, vd, want = _attn_ref(ref, rng, T, Hkv, G, D, p0, half, kw)
        out = cu.zeros(q.shape)
        cu.attention(_dev(cu, q), _dev(cu, kd), _dev(cu, vd), _pos(cu, p0), out=out, **kw)
        return compare(name, "attention", cu.to_host(out), want)
    return run


def attn_rows_case(D, G, T, p0, window=None, softcap=None, Hkv=2, half=False) -> Case:
    """Row t of one T-row launch == a T = 1 launch at position p0 + t, bit for bit."""
    def run(name, ref, cu, rng):
        q, kc, vc = _attn_inputs(rng, T, Hkv, G, D, p0)
        (kc, vc), _ = half_cache(kc, vc, half)
        kw = dict(scale=D ** -0.5, softcap=softcap, window=window)
        qd, kd, vd = _dev(cu, q), _dev(cu, kc), _dev(cu, vc)
        many = cu.zeros(q.shape)
        cu.attention(qd, kd, vd, _pos(cu, p0), out=many, **kw)
        ones = [cu.zeros((1, *q.shape[1:])) for _ in range(T)]
        for t in range(T):
            cu.attention(qd[t:t + 1], kd, vd, _pos(cu, p0 + t), out=ones[t], **kw)
        return compare(name, "exact", np.concatenate([cu.to_host(o) for o in ones]), cu.to_host(many))
    return run


def fused(case: Case) -> Case:
    """Run a case with pass 2 fused into attn_split (ops/cuda/attn.fuse_combine)."""
    def run(name, ref, cu, rng):
        with setting(cu, "attn_override", {**(getattr(cu, "attn_override", None) or {}), "fuse_combine": 1}):
            return case(name, ref, cu, rng)
    return run


sums = _with("attn_sums", "The batched warp sums of the dot products (BW24_ATTN_SUMS: attention.cu warp_sum_many).")
split_heads = _with("attn_split_heads", "A kv head's q heads over several attn_split blocks (BW24_ATTN_SPLIT_HEADS).")
pipe = _with("attn_pipe", "The next round's loads ahead of the math (BW24_ATTN_PIPE: attention.cu RawRow).")
combine32 = _with("attn_combine32", "Pass 2's loop over the splits unrolled 32 (BW24_ATTN_COMBINE32).")


def splits(n: int) -> Callable[[Case], Case]:
    """A wrapper running a case with the grid's splits forced to n (as BW24_ATTN_DECODE=32:n does)."""
    return _with("attn_override", "", {"max_splits": n})


def min_blocks(n: int) -> Callable[[Case], Case]:
    """A wrapper running a case with BW24_ATTN_MIN_BLOCKS=n (cu.attn_min_blocks: attn_split built for n blocks an
    SM)."""
    return _with("attn_min_blocks", "", n)


def _poison_partials(cu) -> None:
    """NaN into the split partials (attn_ml / attn_acc) left by the last launch: a variant that skips a head
    group's partials must not pass by reading the previous launch's (on the H200 at e7b99ea the planted_split
    canary turned only the 2 fused cases of 6 red: the other 4 read the one-block launch's partials)."""
    for key in ("attn_ml", "attn_acc"):
        a = getattr(cu, "_scratch", {}).get(key)
        if a is not None:
            with cu.stream:
                a.fill(float("nan"))


def _poisoned_with(attr: str, value) -> Callable[[Case], Case]:
    """A wrapper running a case with cu.<attr> = value, the split partials NaN-poisoned first."""
    def wrap(case: Case) -> Case:
        def run(name, ref, cu, rng):
            with setting(cu, attr, value):
                _poison_partials(cu)
                return case(name, ref, cu, rng)
        return run
    return wrap


def short(n: int) -> Callable[[Case], Case]:
    """A case with BW24_ATTN_SHORT=n (cu.attn_short: one split up to n live keys, whose block writes the output),
    the split partials NaN-poisoned first, so a pass 2 that reads partials no split wrote turns it red."""
    return _poisoned_with("attn_short", n)


def same_bits_case(attr: str, D, G, T, p0, window=None, softcap=None, Hkv=2, half=False, fuse: int | None = None,
                   reps: int = 1, values: tuple = (False, True)) -> Case:
    """cu.attention with cu.<attr> on (values[1]) gives the bits it gives with it off (values[0]), reps launches
    in a row (the fused pass 2's tickets re-arm), with fuse_combine forced to `fuse` where given."""
    def run(name, ref, cu, rng):
        q, kc, vc = _attn_inputs(rng, T, Hkv, G, D, p0)
        (kc, vc), _ = half_cache(kc, vc, half)
        kw = dict(scale=D ** -0.5, softcap=softcap, window=window)
        qd, kd, vd = _dev(cu, q), _dev(cu, kc), _dev(cu, vc)
        base = getattr(cu, "attn_override", None) or {}
        override = base if fuse is None else {**base, "fuse_combine": int(fuse)}
        got = {False: [], True: []}
        with setting(cu, "attn_override", override or None):
            for on in (False, True):
                with setting(cu, attr, values[on]):
                    for _ in range(reps):
                        got[on].append(cu.zeros(q.shape))
                        _poison_partials(cu)
                        cu.attention(qd, kd, vd, _pos(cu, p0), out=got[on][-1], **kw)
        return compare(name, "exact", np.concatenate([cu.to_host(o) for o in got[True]]),
                       np.concatenate([cu.to_host(o) for o in got[False]]))
    return run


def bitwise_case(attr: str, values: tuple, D, G, T, p0, Hkv, half, window, fuse) -> tuple[str, Case]:
    """(the name's tail, the case) of an opt-in attention path whose bits must equal the plain kernel's:
    same_bits_case at `values` twice in a row, a kv head's 8 q heads split (G = 8)."""
    case = same_bits_case(attr, D, G, T, p0, window, None, Hkv, half, fuse, reps=2, values=values)
    case = split_heads(case) if G == 8 else case
    return (f"D={D} G={G} Hkv={Hkv} T={T} pos={p0}{' half-KV' if half else ''}{f' window={window}' if window else ''}"
            f"{' fused' if fuse else ''}"), case


def split_heads_equal_case(D, G, T, p0, Hkv=4, half=True, fuse=False, window=None, per: int | None = None) -> Case:
    """attn_split with a kv head's G q heads over head_groups(G) blocks gives the one-block kernel's bits,
    with the separate or the fused pass 2 (whose tickets are then per head group), twice in a row. per: q heads
    a block (BW24_ATTN_BLOCK_HEADS) for this case; None: the backend's own."""
    same = same_bits_case("attn_split_heads", D, G, T, p0, window, None, Hkv, half, fuse, reps=2)

    def run(name, ref, cu, rng):
        with setting(cu, "attn_block_heads", per or block_heads_of(cu)):
            if head_groups(G, True, cu.attn_block_heads) == 1:
                return Result(name + " (no head groups at this G: nothing split)", "exact", float("inf"),
                              float("inf"))
            return same(name, ref, cu, rng)
    return run


def block_heads(per: int) -> Callable[[Case], Case]:
    """A wrapper running a case with a kv head's q heads split, per of them a block (BW24_ATTN_BLOCK_HEADS)."""
    per_block = _with("attn_block_heads", "", per)
    return lambda case: split_heads(per_block(case))


# The fill cases' geometry: FILL_SPARE spare keys and the grid's splits and chunk forced to the H200's (66 of 32
# keys), so on any GPU the same split blocks lie past the live range for the fill to take (test_cuda_decode_kernels
# replays its rule on FILL_CASES without a GPU).
FILL_SPARE, FILL_GEOMETRY = 4096, {"chunk": ATTN_CHUNK, "max_splits": 66}
# (G, T, p0, Hkv, half, window, fuse, fill values, whether the fill acts): where it acts (4 live splits of the 8B's
# and the 30B-A3B's d0, verify rows with 22 of 66 live, one live split, a window) and where it cannot (smollm2's
# G = 3; depth 3000: 47 of 66 live; the fused pass 2)
FILL_CASES = ((4, 1, 100, 8, True, None, None, (4, 2), True), (8, 1, 63, 4, True, None, None, (4, 2), True),
              (4, 5, 700, 8, True, None, None, (4, 2), True), (2, 1, 20, 8, True, None, None, (4,), True),
              (4, 3, 500, 8, False, 100, None, (4,), True), (3, 9, 60, 2, False, None, None, (4,), False),
              (4, 16, 3000, 8, False, None, None, (4,), False), (4, 4, 100, 8, True, None, 1, (4,), False))


def spare_keys(n: int, geometry: dict | None = None) -> Callable[[Case], Case]:
    """A wrapper running a case with n spare cache slots (SPARE_KEYS) and, where given, the attention geometry
    forced on top of the backend's override."""
    def wrap(case: Case) -> Case:
        def run(name, ref, cu, rng):
            base = getattr(cu, "attn_override", None) or {}
            with setting(sys.modules[__name__], "SPARE_KEYS", n), \
                    setting(cu, "attn_override", {**base, **(geometry or {})} or None):
                return case(name, ref, cu, rng)
        return run
    return wrap


fill_geometry = spare_keys(FILL_SPARE, FILL_GEOMETRY)  # the fill cases' cache and grid (above)


def fill(n: int) -> Callable[[Case], Case]:
    """A wrapper running a case with BW24_ATTN_FILL=n (cu.attn_fill: up to n blocks share a block's q heads at
    shallow depth) on the fill cases' geometry, the split partials NaN-poisoned first (a head no block wrote
    then reads NaN)."""
    poisoned = _poisoned_with("attn_fill", n)
    return lambda case: fill_geometry(poisoned(case))


def pipe_equal_case(D, G, T, p0, window=None, softcap=None, Hkv=2, half=False) -> Case:
    """attn_split with its loads a round ahead (BW24_ATTN_PIPE) gives the plain kernel's bits: the same rows
    in the same order, only issued earlier."""
    return same_bits_case("attn_pipe", D, G, T, p0, window, softcap, Hkv, half)


def sums_equal_case(D, G, T, p0, window=None, softcap=None, Hkv=2, half=False) -> Case:
    """attn_split with warp_sum_many (BW24_ATTN_SUMS) gives the bits of the one-value warp_sum kernel: the
    same butterfly tree for every sum."""
    return same_bits_case("attn_sums", D, G, T, p0, window, softcap, Hkv, half)


def fused_equals_separate_case(D, G, T, p0, window=None, softcap=None, Hkv=2) -> Case:
    """The fused pass 2 (attn_split's last block) gives the separate attn_combine's bits, twice in a
    row (the tickets re-arm)."""
    def run(name, ref, cu, rng):
        q, kc, vc = _attn_inputs(rng, T, Hkv, G, D, p0)
        kw = dict(scale=D ** -0.5, softcap=softcap, window=window)
        qd, kd, vd = _dev(cu, q), _dev(cu, kc), _dev(cu, vc)
        sep, fz = cu.zeros(q.shape), [cu.zeros(q.shape) for _ in range(2)]
        base = getattr(cu, "attn_override", None) or {}  # both arms on the geometry in force: the override
        with setting(cu, "attn_override", {**base, "fuse_combine": 0}):  # layers fuse_combine over the table
            cu.attention(qd, kd, vd, _pos(cu, p0), out=sep, **kw)
        with setting(cu, "attn_override", {**base, "fuse_combine": 1}):
            for o in fz:
                cu.attention(qd, kd, vd, _pos(cu, p0), out=o, **kw)
        want = cu.to_host(sep)
        return compare(name, "exact", np.concatenate([cu.to_host(o) for o in fz]), np.concatenate([want, want]))
    return run


def attn_q8_case(D, G, T, p0, Hkv=8, half=False, cls="attention") -> Case:
    """Attention rows feeding a q8 output projection (H*D >= Q8_MIN_K): the output vs the reference (in `cls`:
    gemm16 for the tensor-core pass 1), the int8 quantization the attention kernels leave in the q8 scratch ==
    quantize_x's of that output (exact), and the next q8 matmul of those rows is one launch (its quantize_x
    skipped). p0 < ATTN_CHUNK: the only live split writes (attn_split); beyond: attn_combine."""
    def run(name, ref, cu, rng):
        kw = dict(scale=D ** -0.5, softcap=None, window=None)
        q, kd, vd, want = _attn_ref(ref, rng, T, Hkv, G, D, p0, half, kw)
        out = cu.zeros(q.shape)
        with setting(cu, "attn_q8", True):  # the fusion on for this case (also when BW24_ATTN_Q8=0)
            return _check(name, ref, cu, rng, q, kd, vd, kw, want, out)

    def _check(name, ref, cu, rng, q, kd, vd, kw, want, out):
        from gguf.constants import GGMLQuantizationType as Q

        from .kernel_cases import _weight
        from .kernel_cases_q8 import _forced, _scratch_q8, _want_q8, count_launches
        from .ops.cuda.q8 import matmul_q8_ref

        cu.attention(_dev(cu, q), _dev(cu, kd), _dev(cu, vd), _pos(cu, p0), out=out, **kw)
        K = q.shape[1] * D
        rows = out.reshape(T, K)
        if cu._q8_ready is None or cu._q8_ready != (rows.data.ptr, T, K):
            return compare(name + " (q8 rows not marked)", "exact", np.array([0.0]), np.array([1.0]))
        got = cu.to_host(out)
        r = compare(name, cls, got, want)
        if not r.ok:
            return r
        cu.attention(_dev(cu, q), _dev(cu, kd), _dev(cu, vd), _pos(cu, p0), out=out, **kw)  # mark again
        r = compare(name + " q8", "exact", _scratch_q8(cu, T, K), _want_q8(got.reshape(T, K)))
        if not r.ok:
            return r
        ti = _weight(Q.Q4_K, 96, K, rng, name + ".wo")
        w, y = cu.load_weight(ti), cu.zeros((T, 96))
        cu.attention(_dev(cu, q), _dev(cu, kd), _dev(cu, vd), _pos(cu, p0), out=out, **kw)
        with _forced(cu, [Q.Q4_K]):
            n = count_launches(cu, lambda: cu.matmul(w, rows, out=y))
        if n != 1:
            return compare(name + " (quantize_x launched)", "exact", np.array([n]), np.array([1]))
        return compare(name + " wo", "matmul_q8", cu.to_host(y), matmul_q8_ref(ref.load_weight(ti).data, got.reshape(T, K)))
    return run


def rmsnorm_rows_case(K, add: bool, rows=5) -> Case:
    """rmsnorm of `rows` rows vs the reference, and bitwise equal to one-row launches (out and x)."""
    def run(name, ref, cu, rng):
        x = (rng.standard_normal((rows, K)) * 3).astype(np.float32)
        w = rng.standard_normal(K).astype(np.float32)
        a = rng.standard_normal((rows, K)).astype(np.float32) if add else None
        xr, want = x.copy(), np.empty_like(x)
        ref.rmsnorm(xr, w, 1e-6, out=want, add=a)
        wd, ad = _dev(cu, w), None if a is None else _dev(cu, a)
        xd, out = _dev(cu, x), cu.zeros(x.shape)
        cu.rmsnorm(xd, wd, 1e-6, out=out, add=ad)
        x1, out1 = _dev(cu, x), cu.zeros(x.shape)
        for t in range(rows):
            cu.rmsnorm(x1[t:t + 1], wd, 1e-6, out=out1[t:t + 1], add=None if ad is None else ad[t:t + 1])
        got = np.concatenate([cu.to_host(out).ravel(), cu.to_host(xd).ravel()])
        r = compare(name, "elementw", got, np.concatenate([want.ravel(), xr.ravel()]))
        if not r.ok:
            return r
        one = np.concatenate([cu.to_host(out1).ravel(), cu.to_host(x1).ravel()])
        return compare(name + " ==rows", "exact", one, got)
    return run


def rope_norm_case(mode, T, H, Hkv, D, rope_dim, p0, q_norm=True, k_norm=True, half=False) -> Case:
    """rope_kv with the fused qk-norm vs the reference (norm then rope), plus T-row == one-row bitwise.
    half: into a float16 cache, compared with the reference's cache rounded to float16 ("gemm16"
    class: an fp32 value within rounding of a float16 tie may round the other way)."""
    def run(name, ref, cu, rng):
        S = p0 + T + 3
        q = (rng.standard_normal((T, H, D)) * 2).astype(np.float32)
        k = (rng.standard_normal((T, Hkv, D)) * 2).astype(np.float32)
        v = rng.standard_normal((T, Hkv, D)).astype(np.float32)
        qn = rng.standard_normal(D).astype(np.float32) if q_norm else None
        kn = rng.standard_normal(D).astype(np.float32) if k_norm else None
        kw = dict(base=1e6, freq_scale=1.0, rope_dim=rope_dim, mode=mode, norm_eps=1e-6)
        kc, vc, qr, kr = np.zeros((Hkv, S, D), np.float32), np.zeros((Hkv, S, D), np.float32), q.copy(), k.copy()
        ref.rope_kv(qr, kr, v, np.array([p0], np.int32), kc, vc, q_norm=qn, k_norm=kn, **kw)
        dn = dict(q_norm=None if qn is None else _dev(cu, qn), k_norm=None if kn is None else _dev(cu, kn))
        qd, kd, vd = _dev(cu, q), _dev(cu, k), _dev(cu, v)
        dt = np.float16 if half else np.float32
        kcd, vcd = cu.zeros((Hkv, S, D), dt), cu.zeros((Hkv, S, D), dt)
        cu.rope_kv(qd, kd, vd, _pos(cu, p0), kcd, vcd, **dn, **kw)
        got = [cu.to_host(a).astype(np.float32).ravel() for a in (qd, kd, kcd, vcd)]
        if half:
            r = compare(name, "elementw", np.concatenate(got[:2]), np.concatenate([qr.ravel(), kr.ravel()]))
            rc = compare(name, "gemm16", np.concatenate(got[2:]),
                         np.concatenate([a.astype(np.float16).astype(np.float32).ravel() for a in (kc, vc)]))
            r = r if not r.ok else rc
        else:
            r = compare(name, "elementw", np.concatenate(got), np.concatenate([a.ravel() for a in (qr, kr, kc, vc)]))
        if not r.ok:
            return r
        q1, kc1, vc1 = _dev(cu, q), cu.zeros((Hkv, S, D), dt), cu.zeros((Hkv, S, D), dt)
        for t in range(T):
            cu.rope_kv(q1[t:t + 1], kd[t:t + 1], vd[t:t + 1], _pos(cu, p0 + t), kc1, vc1, **dn, **kw)
        one = np.concatenate([cu.to_host(a).astype(np.float32).ravel() for a in (q1, kc1, vc1)])
        return compare(name + " ==rows", "exact", one, np.concatenate([got[0], got[2], got[3]]))
    return run


def dec_mma_ref_case(D, G, T, p0, frm, window=None, softcap=None, Hkv=2) -> Case:
    """Rows past frm live keys with pass 1 on tensor cores (BW24_ATTN_DEC_MMA=frm: attention_dec_mma.cu), the
    others on attn_split, one launch, against the float64 reference from a float16 cache: float16 products, the
    gemm16 class. A shape the mma kernel does not take would run attn_split alone: reported, never passed."""
    def run(name, ref, cu, rng):
        if D not in DEC_MMA_DIMS or G > 8:
            return Result(name + " (not usable: would run attn_split)", "gemm16", float("inf"), float("inf"))
        kw = dict(scale=D ** -0.5, softcap=softcap, window=window)
        q, kd, vd, want = _attn_ref(ref, rng, T, Hkv, G, D, p0, True, kw)
        out = cu.zeros(q.shape)
        with setting(cu, "attn_dec_mma", frm):
            cu.attention(_dev(cu, q), _dev(cu, kd), _dev(cu, vd), _pos(cu, p0), out=out, **kw)
        return compare(name, "gemm16", cu.to_host(out), want)
    return run


def dec_mma(frm: int) -> Callable[[Case], Case]:
    """A wrapper running a case with BW24_ATTN_DEC_MMA=frm (cu.attn_dec_mma)."""
    return _with("attn_dec_mma", "", frm)


dec_pipe = _with("attn_dec_pipe", "attn_dec_mma's tiles through two cp.async stages (BW24_ATTN_DEC_PIPE).")


def tile_bits_cases(attr: str, title: str, shapes, values: tuple = (False, True)) -> Iterator[tuple[str, Case]]:
    """attn_dec_mma with cu.<attr> on against off (values[1] against values[0]), bit for bit, twice in a row
    (same_bits_case), at each (D, G, Hkv, T, p0, splits forced or None, window, softcap, tiles a split) of shapes:
    the deep rows' opt-in paths' cases."""
    for D, G, Hkv, T, p0, ns, win, cap, tiles in shapes:
        case = dec_mma(1024)(same_bits_case(attr, D, G, T, p0, win, cap, Hkv, True, reps=2, values=values))
        yield (f"{title} D={D} G={G} Hkv={Hkv} T={T} pos={p0}"
               f"{f' splits={ns}' if ns else ''} tiles={tiles}{f' window={win}' if win else ''}"
               f"{f' softcap={cap:g}' if cap else ''} half-KV"), splits(ns)(case) if ns else case


def dec_pipe_cases() -> Iterator[tuple[str, Case]]:
    """BW24_ATTN_DEC_PIPE (attn_dec_mma's tiles through two cp.async stages): the plain kernel's bits, twice in a
    row, at splits of 1 to 4 tiles of 64 keys (the grid forced to 16 or 33 splits at depth, or the default's, 33 since
    5107205: attn.DEC_MMA_SPLITS), a last tile cut short, verify rows, softcap, a window; and against the reference. The planted_decpipe
    canary (each split's prefetch from its second round on fetches a tile too far) turns the 4 whose splits hold
    3 or more tiles red; those of 1 or 2 tiles stay green, as they must, and so does rows==decode (the planted
    kernel against itself)."""
    yield from tile_bits_cases("attn_dec_pipe", "attn dec pipe == plain bitwise", (
        (128, 8, 8, 1, 4000, 16, None, None, 4), (128, 8, 4, 5, 3000, 16, None, None, 3),
        (128, 4, 8, 1, 4000, 33, None, None, 2), (64, 7, 2, 1, 2000, 16, None, None, 2),
        (128, 8, 8, 1, 4000, None, None, None, 2), (128, 4, 8, 3, 2600, 16, None, 30.0, 3),
        (64, 3, 2, 2, 3000, 16, 2048, None, 2)))
    yield "attn dec pipe D=128 G=8 Hkv=8 T=1 pos=4000 from=1024 splits=16 tiles=4 half-KV", \
        splits(16)(dec_pipe(dec_mma_ref_case(128, 8, 1, 4000, 1024, Hkv=8)))
    yield "attn dec pipe D=128 G=8 Hkv=4 T=9 pos=1020 from=1024 tiles=1 half-KV", \
        dec_pipe(dec_mma_ref_case(128, 8, 9, 1020, 1024, Hkv=4))
    yield "attn dec pipe rows==decode D=128 G=8 Hkv=4 T=6 pos=3000 from=1024 splits=16 half-KV", \
        splits(16)(dec_pipe(dec_mma(1024)(attn_rows_case(128, 8, 6, 3000, Hkv=4, half=True))))


# The deep rows' shapes of the bitwise cases of a build choice of attn_dec_mma (D, G, Hkv, T, p0, splits forced or
# None, window, softcap, tiles a split): the 32B's and the 8B's at 4,096 keys (the default's 33 splits), verify rows
# over 3 tiles, D = 64 with 7 heads, softcap.
DEC_BUILD_SHAPES = ((128, 8, 8, 1, 4000, None, None, None, 2), (128, 4, 8, 1, 4000, 33, None, None, 2),
                    (128, 8, 4, 5, 3000, 16, None, None, 3), (64, 7, 2, 1, 2000, 16, None, None, 2),
                    (128, 4, 8, 3, 2600, 16, None, 30.0, 3))


def merge_factors_cases() -> Iterator[tuple[str, Case]]:
    """BW24_ATTN_MERGE_FACTORS (a block's merge of its warps with each head's factors worked out once, attn_chunk.cuh):
    the per-element merge's bits, twice in a row, in attn_split (at depth, verify rows, a kv head's 8 heads over two
    blocks, D = 64 with a window, the fused pass 2, one split writing the output) and in attn_dec_mma
    (DEC_BUILD_SHAPES, and one split writing the output and its int8 rows). The reference cases run it as the
    default. The planted_mergef canary (the last warp's keys left out of the factors) turns all 12 red."""
    for D, G, T, p0, Hkv, half, win, fuse in ((128, 4, 1, 4000, 8, True, None, None), (128, 4, 5, 3000, 8, True, None, None),
                                              (128, 8, 3, 700, 4, False, None, None), (64, 3, 9, 1000, 2, False, 100, None),
                                              (128, 4, 4, 3000, 8, True, None, 1)):
        tail, case = bitwise_case("attn_merge_factors", (False, True), D, G, T, p0, Hkv, half, win, fuse)
        yield f"attn merge factors == per element bitwise split {tail}", case
    yield "attn merge factors == per element bitwise split short=128 D=128 G=4 Hkv=8 T=1 pos=100 half-KV", \
        short(128)(same_bits_case("attn_merge_factors", 128, 4, 1, 100, None, None, 8, True, reps=2))
    yield from tile_bits_cases("attn_merge_factors", "attn merge factors == per element bitwise dec mma",
                               DEC_BUILD_SHAPES)
    yield "attn merge factors == per element bitwise dec mma short=128 from=32 D=128 G=8 Hkv=4 T=1 pos=100 half-KV", \
        short(128)(dec_mma(32)(same_bits_case("attn_merge_factors", 128, 8, 1, 100, None, None, 4, True, reps=2)))


def dec_bounds_cases() -> Iterator[tuple[str, Case]]:
    """BW24_ATTN_DEC_BOUNDS (blocks an SM attn_dec_mma is built to fit: its rule, 3 with the pipe, against the 4 it
    was built for before; and 2): the 4-block build's bits, twice in a row, at DEC_BUILD_SHAPES (the pipe on, as by
    default). The planted_decbounds canary (a build for other than 4 blocks drops every warp's first key of a tile)
    turns all 10 red."""
    yield from tile_bits_cases("attn_dec_bounds", "attn dec bounds == 4 bitwise rule", DEC_BUILD_SHAPES, values=(4, 0))
    yield from tile_bits_cases("attn_dec_bounds", "attn dec bounds == 4 bitwise 2", DEC_BUILD_SHAPES, values=(4, 2))


def dec_unroll_cases() -> Iterator[tuple[str, Case]]:
    """BW24_ATTN_DEC_UNROLL (attn_dec_mma's tile copies unrolled whole, the default): the loop's bits, twice in a row,
    at DEC_BUILD_SHAPES through the pipe (cp.async, the default), and at two of them without it (the plain loop's
    copies through registers). The planted_decunroll canary (the unrolled copy's last round of rows given the round
    before's keys) turns all 7 red."""
    yield from tile_bits_cases("attn_dec_unroll", "attn dec unroll == loop bitwise", DEC_BUILD_SHAPES)
    no_pipe = _with("attn_dec_pipe", "", False)
    for name, case in tile_bits_cases("attn_dec_unroll", "attn dec unroll == loop bitwise no pipe",
                                      (DEC_BUILD_SHAPES[0], DEC_BUILD_SHAPES[2])):
        yield name, no_pipe(case)


def dec_late_cases() -> Iterator[tuple[str, Case]]:
    """BW24_ATTN_DEC_LATE (attn_dec_mma's PDL trigger after its tiles, opt-in): the trigger-at-start build's bits,
    twice in a row, at DEC_BUILD_SHAPES through the pipe (the default). The trigger only schedules the launch behind
    (its wait is for this grid's completion), so these hold the build to what it must keep: a kernel otherwise the
    same. The planted_declate canary (a late-trigger build that drops every warp's first key of a tile) turns all 5
    red (tests/test_cuda_gpu.py)."""
    yield from tile_bits_cases("attn_dec_late", "attn dec late trigger == start bitwise", DEC_BUILD_SHAPES)


dec_early = _with("attn_dec_early", "The split's first tiles of older cache rows before the PDL wait (BW24_ATTN_DEC_EARLY).")

# A kernel ahead that writes a step's new cache rows late: it opens as every bw24 kernel does (common.cuh PDL_OPEN),
# so the next launch's blocks start at once under PDL, then spins `spin` clocks before it copies rows [p0, p0 + T)
# of each kv head from nk / nv ([Hkv, T, D] halves, as bits) into the caches [Hkv, S, D]. A test fixture of
# dec_early_graph_case, not a model kernel.
_LATE_ROWS = r"""
extern "C" __global__ void late_rows(const unsigned short* nk, const unsigned short* nv, unsigned short* kc,
                                     unsigned short* vc, int S, int D, int p0, int T, long long spin) {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
    const long long t0 = clock64();
    while (clock64() - t0 < spin) {
    }
    const int hk = blockIdx.x, t = blockIdx.y;
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        kc[((long long)hk * S + p0 + t) * D + d] = nk[((long long)hk * T + t) * D + d];
        vc[((long long)hk * S + p0 + t) * D + d] = nv[((long long)hk * T + t) * D + d];
    }
}
"""


def dec_early_graph_case(D, G, T, p0, Hkv=8, spin=100_000) -> Case:
    """BW24_ATTN_DEC_EARLY where it can go wrong: under PDL in a captured graph behind a kernel that writes this
    step's cache rows late (_LATE_ROWS, ~50 us of spinning), while attn_dec_mma's blocks already load their early
    tiles. Before every run the host fills those rows with NaN; the graph's two runs (capture, replay) must give the
    first, eager run's bits (eager launches wait for the writer to finish). The planted_decearly canary, which lets
    the step's first new row go early too, reads the NaN. Not usable (reported, never passed) without PDL, the pipe
    or a captured graph: then nothing runs early. Run with BW24_ATTN_DEC_MMA=all, so that attn_dec_mma follows the
    writer directly (no attn_split launch between), as it follows rope_kv in a deep decode step: on the H200 at
    73fcbc7, with attn_split between them, the canary stayed green (the early loads ran after the writer: PDL starts
    the kernel right after a running one, not the one after that); with `all` it was red in 4 of 4
    (evidence/kernel_check_h200_73fcbc7_dec_early_graph_all_rows.log)."""
    def run(name, ref, cu, rng):
        if not (getattr(cu, "pdl", False) and getattr(cu, "attn_dec_pipe", False) and getattr(cu, "use_graphs", True)):
            return Result(name + " (no PDL, pipe or graphs: nothing runs early)", "exact", float("inf"), float("inf"))
        q, kc, vc = _attn_inputs(rng, T, Hkv, G, D, p0)
        (kc, vc), _ = half_cache(kc, vc, True)
        S = kc.shape[1]
        kw = dict(scale=D ** -0.5, softcap=None, window=None)
        qd, kd, vd, pos, out = _dev(cu, q), _dev(cu, kc), _dev(cu, vc), _pos(cu, p0), cu.zeros(q.shape)
        nk, nv = (_dev(cu, np.ascontiguousarray(a[:, p0:p0 + T])) for a in (kc, vc))
        writer = cu.cp.RawKernel(_LATE_ROWS, "late_rows")
        nan = np.float16(np.nan)

        def step():
            cu._launch(writer, (Hkv, T), 128, (nk, nv, kd, vd, np.int32(S), np.int32(D), np.int32(p0), np.int32(T),
                                               np.int64(spin)))
            cu.attention(qd, kd, vd, pos, out=out, **kw)

        graphed = cu.capture(step)
        got = []
        for _ in range(3):
            with cu.stream:
                kd[:, p0:p0 + T] = nan
                vd[:, p0:p0 + T] = nan
            graphed()
            got.append(cu.to_host(out))
        if graphed.graph_state["g"] is None:
            return Result(name + " (not captured)", "exact", float("inf"), float("inf"))
        return compare(name, "exact", np.concatenate(got[1:]), np.concatenate([got[0], got[0]]))
    return run


def dec_early_cases() -> Iterator[tuple[str, Case]]:
    """BW24_ATTN_DEC_EARLY (attn_dec_mma's first tiles of older rows before the PDL wait): the pipe's bits, twice in a
    row, at splits of 1 to 4 tiles (16 or 33 splits: one, two or no early tile a split), verify rows, a last tile cut
    short, softcap, a window, and rows==decode; then in a captured graph behind a late writer of the step's rows (the
    race the rule avoids). The planted_decearly canary (the step's first new row early too) turns the graph cases red
    (their NaN rows read early); the eager ones stay green, as they must (no kernel ahead runs during the wait)."""
    yield from tile_bits_cases("attn_dec_early", "attn dec early == pipe bitwise", (
        (128, 8, 8, 1, 4000, 16, None, None, 4), (128, 4, 8, 5, 3000, 16, None, None, 3),
        (128, 4, 8, 1, 4000, None, None, None, 2), (128, 2, 8, 5, 4000, None, None, None, 2),
        (64, 7, 2, 1, 2000, 16, None, None, 2), (128, 4, 8, 3, 2600, 16, None, 30.0, 3),
        (64, 3, 2, 2, 3000, 16, 2048, None, 2)))
    yield "attn dec early rows==decode D=128 G=4 Hkv=8 T=6 pos=3000 from=1024 half-KV", \
        dec_early(dec_mma(1024)(attn_rows_case(128, 4, 6, 3000, Hkv=8, half=True)))
    for D, G, Hkv, T, p0 in ((128, 4, 8, 1, 4000), (128, 8, 8, 1, 4000), (128, 2, 8, 5, 4000), (64, 7, 2, 3, 2000)):
        yield (f"attn dec early graph D={D} G={G} Hkv={Hkv} T={T} pos={p0} all rows late rows half-KV",
               dec_early(dec_mma(DEC_MMA_ALL)(dec_early_graph_case(D, G, T, p0, Hkv))))


def cases() -> Iterator[tuple[str, Case]]:
    c = ATTN_CHUNK
    # depths straddling one and two split units (single split writes the output itself: p < c)
    for p0 in (0, c - 2, c - 1, c, c + 1, 2 * c - 1, 2 * c, 5 * c + 3):
        yield f"attn D=128 G=4 T=1 pos={p0} (unit {c})", attn_ref_case(128, 4, 1, p0)
    # long depth where the keys per split grow past the unit (CH * max_splits keys; Hkv=8 on 132 SMs: 66)
    grow = c * default_max_splits(split_units(8, 4), 132)
    for p0 in (grow - 1, grow + 5, 2 * grow + 77):
        yield f"attn D=128 G=4 Hkv=8 T=1 pos={p0} (splits grow)", attn_ref_case(128, 4, 1, p0, Hkv=8)
    # the 32B's shape (8 q heads a kv head in two blocks of 4): half the splits, one wave (attn.default_max_splits)
    grow = c * default_max_splits(split_units(8, 8), 132)
    for p0 in (grow - 1, grow + 5, 4096):
        yield f"attn D=128 G=8 Hkv=8 T=1 pos={p0} (splits grow, two head groups)", attn_ref_case(128, 8, 1, p0, Hkv=8)
    for G in range(1, 9):
        D = 128 if G in (1, 2, 4, 8) else 64
        yield f"attn D={D} G={G} T=1 pos=100", attn_ref_case(D, G, 1, 100)
    yield "attn D=256 G=4 T=1 pos=300 softcap=50", attn_ref_case(256, 4, 1, 300, softcap=50.0)
    yield "attn D=128 G=2 T=1 pos=700 window=128", attn_ref_case(128, 2, 1, 700, window=128)
    yield "attn D=64 G=3 T=9 pos=60 window=40", attn_ref_case(64, 3, 9, 60, window=40)
    yield "attn D=256 G=4 T=4 pos=1030 window=512 softcap=30", attn_ref_case(256, 4, 4, 1030, 512, 30.0)
    yield "attn D=128 G=4 T=16 pos=4000", attn_ref_case(128, 4, 16, 4000)
    # verify rows == decode rows, bit for bit (T = 2..9, across unit and window edges)
    for T in range(2, 10):
        yield f"attn rows==decode D=128 G=4 T={T} pos={c - T // 2}", attn_rows_case(128, 4, T, c - T // 2)
    yield "attn rows==decode D=64 G=7 T=9 pos=1000", attn_rows_case(64, 7, 9, 1000)
    yield "attn rows==decode D=128 G=2 T=5 pos=300 window=64", attn_rows_case(128, 2, 5, 300, window=64)
    yield "attn rows==decode D=256 G=4 T=3 pos=90 softcap=50", attn_rows_case(256, 4, 3, 90, softcap=50.0)
    yield "attn half-KV D=128 G=4 T=1 pos=4000", attn_ref_case(128, 4, 1, 4000, half=True)
    yield "attn half-KV D=64 G=7 T=9 pos=60 window=40", attn_ref_case(64, 7, 9, 60, window=40, half=True)
    yield "attn half-KV D=256 G=4 T=4 pos=1030 softcap=30", attn_ref_case(256, 4, 4, 1030, None, 30.0, half=True)
    yield "attn half-KV rows==decode D=128 G=4 T=6 pos=500", attn_rows_case(128, 4, 6, 500, half=True)
    yield "attn fused-combine D=128 G=4 T=1 pos=4000", fused(attn_ref_case(128, 4, 1, 4000))
    yield "attn fused-combine D=256 G=4 T=4 pos=1030 window=512 softcap=30", \
        fused(attn_ref_case(256, 4, 4, 1030, 512, 30.0))
    yield "attn fused-combine rows==decode D=64 G=7 T=9 pos=1000", fused(attn_rows_case(64, 7, 9, 1000))
    for D, G, T, p0, win in ((128, 4, 1, 300, None), (128, 8, 5, 9000, None), (64, 3, 16, 777, 100)):
        yield f"attn fused == separate bitwise D={D} G={G} T={T} pos={p0}{f' window={win}' if win else ''}", \
            fused_equals_separate_case(D, G, T, p0, window=win)
    yield f"attn rows==decode D=128 G=4 Hkv=8 T=6 pos={grow - 3} (grow)", \
        attn_rows_case(128, 4, 6, grow - 3, Hkv=8)
    # the output's int8 quantization for a q8 wo (H*D >= 2048): single split (attn_split) and combined
    for D, G, T, p0, Hkv, half in ((128, 4, 1, 5, 8, False), (128, 4, 1, 700, 8, False), (128, 4, 5, 3000, 8, True),
                                   (128, 2, 5, c - 3, 8, False), (64, 5, 9, 100, 8, False), (256, 4, 3, 90, 2, False)):
        yield f"attn +q8 out D={D} G={G} Hkv={Hkv} T={T} pos={p0}{' half-KV' if half else ''}", \
            attn_q8_case(D, G, T, p0, Hkv, half)
    # ... and by the fused pass 2's last split block (DV = 64 / 128 / 256: 2 / 4 warps a head, 2 dims a thread)
    for D, G, T, p0, Hkv, half in ((128, 4, 1, 700, 8, False), (128, 2, 5, 3000, 8, True), (64, 5, 9, 100, 8, False),
                                   (256, 4, 3, 90, 2, False)):
        yield f"attn fused-combine +q8 out D={D} G={G} Hkv={Hkv} T={T} pos={p0}{' half-KV' if half else ''}", \
            fused(attn_q8_case(D, G, T, p0, Hkv, half))
    # batched warp sums (BW24_ATTN_SUMS): G * KB = 32 (the 8B), 16 (the 0.6B, gemma3's D = 256), 64 in two
    # batches (the 30B-A3B's G = 8), 8, and 24 / 40 (warp_sum per value); bitwise == the default kernel
    for D, G, T, p0, Hkv, half, cap in ((128, 4, 1, 4000, 8, True, None), (128, 4, 5, 700, 8, False, None),
                                        (128, 2, 5, 3000, 8, True, None), (128, 8, 1, 700, 4, True, None),
                                        (256, 4, 2, 90, 2, False, 50.0), (128, 1, 3, 50, 2, False, None),
                                        (64, 3, 9, 100, 2, True, None), (64, 5, 1, 1000, 2, False, None)):
        yield f"attn sums == warp_sum bitwise D={D} G={G} Hkv={Hkv} T={T} pos={p0}{' half-KV' if half else ''}" \
              f"{f' softcap={cap:g}' if cap else ''}", sums_equal_case(D, G, T, p0, None, cap, Hkv, half)
    yield "attn sums D=128 G=4 T=1 pos=4000 half-KV", sums(attn_ref_case(128, 4, 1, 4000, half=True))
    yield "attn sums rows==decode D=128 G=2 T=6 pos=500 half-KV", sums(attn_rows_case(128, 2, 6, 500, half=True))
    yield "attn sums fused-combine D=128 G=8 T=4 pos=3000", sums(fused(attn_ref_case(128, 8, 4, 3000)))
    # a kv head's 8 q heads over two blocks (BW24_ATTN_SPLIT_HEADS: the 30B-A3B's 32/4, the 32B's 64/8): the
    # same bits as one block, one split or many, separate or fused pass 2; against the reference, with the
    # int8 output rows, and verify rows == decode
    for T, p0, Hkv, half, fuse, win in ((1, 63, 4, True, False, None), (1, 4000, 4, True, False, None),
                                        (5, 700, 8, True, False, None), (16, 3000, 4, False, False, None),
                                        (1, 4000, 4, True, True, None), (5, 700, 4, False, True, 256)):
        yield f"attn split heads == one block bitwise D=128 G=8 Hkv={Hkv} T={T} pos={p0}" \
              f"{' half-KV' if half else ''}{' fused' if fuse else ''}{f' window={win}' if win else ''}", \
            split_heads_equal_case(128, 8, T, p0, Hkv, half, fuse, win)
    yield "attn split heads D=128 G=8 Hkv=4 T=4 pos=3000 half-KV", split_heads(attn_ref_case(128, 8, 4, 3000, Hkv=4,
                                                                                             half=True))
    yield "attn split heads +q8 out D=128 G=8 Hkv=4 T=1 pos=700", split_heads(attn_q8_case(128, 8, 1, 700, 4))
    # fewer q heads a block (BW24_ATTN_BLOCK_HEADS: the 8B's 4 as two blocks of 2, the 32B's 8 as four, the
    # 0.6B's 2 as two of 1): the one-block bits, at depth, verify rows, the fused pass 2; against the reference
    # and with the int8 output rows
    for G, per, T, p0, Hkv, half, fuse in ((4, 2, 1, 4000, 8, True, False), (4, 2, 5, 700, 8, True, True),
                                           (4, 2, 16, 3000, 4, False, False), (8, 2, 1, 4000, 8, True, False),
                                           (8, 2, 4, 3000, 4, True, True), (2, 1, 1, 4000, 8, True, False),
                                           (2, 1, 5, 700, 8, False, True)):
        yield f"attn block heads == one block bitwise D=128 G={G} per={per} Hkv={Hkv} T={T} pos={p0}" \
              f"{' half-KV' if half else ''}{' fused' if fuse else ''}", \
            split_heads_equal_case(128, G, T, p0, Hkv, half, fuse, None, per)
    yield "attn block heads D=128 G=4 per=2 Hkv=8 T=1 pos=4000 half-KV", \
        block_heads(2)(attn_ref_case(128, 4, 1, 4000, Hkv=8, half=True))
    yield "attn block heads +q8 out D=128 G=8 per=2 Hkv=4 T=1 pos=700", block_heads(2)(attn_q8_case(128, 8, 1, 700, 4))
    # at shallow depth the split blocks past the live range take a block's other q heads (BW24_ATTN_FILL=N): the
    # plain kernel's bits where it acts and where it cannot (FILL_CASES); against the reference, rows == decode,
    # the int8 output rows. planted_fill (every sub-block on its group's first heads) turns the bitwise cases where
    # it acts red (8: test_cuda_gpu).
    for G, T, p0, Hkv, half, win, fuse, ns, _ in FILL_CASES:
        for n in ns:
            tail, case = bitwise_case("attn_fill", (1, n), 128 if G != 3 else 64, G, T, p0, Hkv, half, win, fuse)
            yield f"attn fill == plain bitwise fill={n} {tail}", fill_geometry(case)
    f4 = fill(4)
    yield "attn fill=4 D=128 G=4 Hkv=8 T=1 pos=100 half-KV", f4(attn_ref_case(128, 4, 1, 100, Hkv=8, half=True))
    yield "attn fill=2 D=128 G=8 Hkv=4 T=2 pos=40 half-KV", \
        fill(2)(split_heads(attn_ref_case(128, 8, 2, 40, Hkv=4, half=True)))
    yield "attn fill=4 rows==decode D=128 G=4 T=6 pos=90 half-KV", f4(attn_rows_case(128, 4, 6, 90, half=True))
    yield "attn fill=4 +q8 out D=128 G=4 Hkv=8 T=1 pos=100", f4(attn_q8_case(128, 4, 1, 100, 8))
    # the next round's loads ahead of the math (BW24_ATTN_PIPE): bitwise == the plain kernel over one round,
    # several, a partial last one, windows, softcap, both cache elements and D = 64 / 128 / 256; against the
    # reference; with the fused pass 2, the batched sums, split heads and verify rows == decode
    for D, G, T, p0, Hkv, half, win, cap in ((128, 4, 1, 20, 8, True, None, None), (128, 4, 1, 4000, 8, True, None, None),
                                             (128, 2, 5, 3000, 8, True, None, None), (128, 8, 1, 700, 4, True, None, None),
                                             (64, 3, 9, 1000, 2, False, 100, None), (256, 4, 3, 90, 2, False, None, 50.0),
                                             (128, 4, 16, 777, 2, False, None, None)):
        yield f"attn pipe == plain bitwise D={D} G={G} Hkv={Hkv} T={T} pos={p0}{' half-KV' if half else ''}" \
              f"{f' window={win}' if win else ''}{f' softcap={cap:g}' if cap else ''}", \
            pipe_equal_case(D, G, T, p0, win, cap, Hkv, half)
    yield "attn pipe D=128 G=4 T=1 pos=4000 half-KV", pipe(attn_ref_case(128, 4, 1, 4000, half=True))
    yield "attn pipe D=64 G=3 T=9 pos=60 window=40", pipe(attn_ref_case(64, 3, 9, 60, window=40))
    yield "attn pipe fused-combine D=128 G=4 T=4 pos=3000", pipe(fused(attn_ref_case(128, 4, 4, 3000)))
    yield "attn pipe sums D=128 G=2 T=5 pos=3000 half-KV", pipe(sums(attn_ref_case(128, 2, 5, 3000, half=True)))
    yield "attn pipe split heads D=128 G=8 Hkv=4 T=1 pos=4000 half-KV", \
        pipe(split_heads(attn_ref_case(128, 8, 1, 4000, Hkv=4, half=True)))
    yield "attn pipe rows==decode D=128 G=4 T=6 pos=500 half-KV", pipe(attn_rows_case(128, 4, 6, 500, half=True))
    # pass 2's split loop unrolled 32 (BW24_ATTN_COMBINE32): bitwise == unrolled 8, separate and fused pass 2,
    # 2 to 33 live splits (pos 4000: more than a 32-wide unroll, so a remainder), windows, both cache elements
    for D, G, T, p0, Hkv, half, win, fuse in ((128, 4, 1, 4000, 8, True, None, False), (128, 4, 1, 4000, 8, True, None, True),
                                              (128, 2, 5, 3000, 2, True, None, False), (64, 3, 9, 1000, 2, False, 100, True),
                                              (128, 8, 3, 700, 4, False, None, False)):
        yield f"attn combine32 == combine8 bitwise D={D} G={G} Hkv={Hkv} T={T} pos={p0}{' half-KV' if half else ''}" \
              f"{f' window={win}' if win else ''}{' fused' if fuse else ''}", \
            same_bits_case("attn_combine32", D, G, T, p0, win, None, Hkv, half, fuse, reps=2)
    yield "attn combine32 D=128 G=4 T=1 pos=4000 half-KV", combine32(attn_ref_case(128, 4, 1, 4000, half=True))
    yield "attn combine32 rows==decode D=128 G=4 T=6 pos=3000 half-KV", \
        combine32(attn_rows_case(128, 4, 6, 3000, half=True))
    # attn_split built for 4 blocks an SM (BW24_ATTN_MIN_BLOCKS=4: 128 registers, a few spills at 4 q heads a
    # block): bitwise == the free build at depth and d0, verify rows, split heads, the 0.6B's 2 heads, a window,
    # the fused pass 2; against the reference and rows == decode. planted_minblocks (a split's last key dropped
    # in the bounded build) turns all 7 bitwise cases red.
    for D, G, T, p0, Hkv, half, win, fuse in ((128, 4, 1, 4000, 8, True, None, None), (128, 4, 1, 100, 8, True, None, None),
                                              (128, 4, 5, 3000, 8, True, None, None), (128, 8, 3, 700, 4, False, None, None),
                                              (128, 2, 1, 4000, 8, True, None, None), (64, 3, 9, 1000, 2, False, 100, None),
                                              (128, 4, 4, 3000, 8, True, None, 1)):
        tail, case = bitwise_case("attn_min_blocks", (1, 4), D, G, T, p0, Hkv, half, win, fuse)
        yield f"attn min blocks == plain bitwise blocks=4 {tail}", case
    yield "attn min blocks=4 D=128 G=4 T=1 pos=4000 half-KV", min_blocks(4)(attn_ref_case(128, 4, 1, 4000, Hkv=8,
                                                                                           half=True))
    yield "attn min blocks=4 rows==decode D=128 G=4 T=6 pos=3000 half-KV", \
        min_blocks(4)(attn_rows_case(128, 4, 6, 3000, half=True))
    # pass 1 on tensor cores past 1,024 live keys (BW24_ATTN_DEC_MMA=1024): the 8B's, the 32B's (33 splits), the
    # 0.6B's, qwen2.5-0.5b's and smollm2's shapes at depth, verify rows straddling the threshold (both kernels in
    # one launch), softcap, a window, and a depth under it (attn_split alone); rows == decode bit for bit. The
    # planted_decmma canary (the first key of every warp's 16 dropped) turns the 8 with rows past it red (12 of
    # this family's reference cases in all, with the ones below; the rows==decode ones stay green). With
    # BW24_ATTN_SHORT=128 and from=32 the rows of 33..128 keys are one mma split that writes the output (and the
    # q8 rows) itself: against the reference (red under the canary too) and its int8 rows.
    for D, G, T, p0, Hkv, win, cap in ((128, 4, 1, 4000, 8, None, None), (128, 8, 1, 4000, 8, None, None),
                                       (128, 2, 1, 3000, 8, None, None), (64, 7, 1, 2000, 2, None, None),
                                       (64, 3, 1, 1500, 3, None, None), (128, 4, 9, 1020, 8, None, None),
                                       (128, 4, 1, 2000, 8, None, 30.0), (64, 3, 5, 3000, 2, 2048, None),
                                       (128, 4, 1, 500, 8, None, None)):
        yield f"attn dec mma D={D} G={G} Hkv={Hkv} T={T} pos={p0} from=1024 half-KV" \
              f"{f' window={win}' if win else ''}{f' softcap={cap:g}' if cap else ''}", \
            dec_mma_ref_case(D, G, T, p0, 1024, win, cap, Hkv)
    yield "attn dec mma D=128 G=4 Hkv=8 T=1 pos=100 from=32 short=128 half-KV", \
        short(128)(dec_mma_ref_case(128, 4, 1, 100, 32, Hkv=8))
    # a split of 4 tiles (the grid forced to 16 splits: 256 keys a split), each warp's state carried across tiles
    yield "attn dec mma D=128 G=4 Hkv=8 T=1 pos=4000 from=1024 splits=16 half-KV", \
        splits(16)(dec_mma_ref_case(128, 4, 1, 4000, 1024, Hkv=8))
    # `all` (DEC_MMA_ALL): every row on tensor cores, attn_split not launched: a one-split row of 11 keys, and
    # verify rows of a kv head's 8 q heads in one split up to 128 keys
    yield "attn dec mma D=128 G=4 Hkv=8 T=1 pos=10 all half-KV", dec_mma_ref_case(128, 4, 1, 10, DEC_MMA_ALL, Hkv=8)
    yield "attn dec mma D=128 G=8 Hkv=4 T=3 pos=100 all short=128 half-KV", \
        short(128)(dec_mma_ref_case(128, 8, 3, 100, DEC_MMA_ALL, Hkv=4))
    yield "attn dec mma +q8 out D=128 G=4 Hkv=8 T=1 pos=100 from=32 short=128 half-KV", \
        short(128)(dec_mma(32)(attn_q8_case(128, 4, 1, 100, 8, half=True, cls="gemm16")))
    yield "attn dec mma rows==decode D=128 G=4 Hkv=8 T=6 pos=3000 from=1024 half-KV", \
        dec_mma(1024)(attn_rows_case(128, 4, 6, 3000, Hkv=8, half=True))
    yield "attn dec mma rows==decode D=128 G=8 Hkv=4 T=9 pos=1020 from=1024 half-KV", \
        dec_mma(1024)(attn_rows_case(128, 8, 9, 1020, Hkv=4, half=True))
    yield from dec_pipe_cases()
    yield from dec_early_cases()
    yield from merge_factors_cases()
    yield from dec_bounds_cases()
    yield from dec_unroll_cases()
    yield from dec_late_cases()
    # one split up to N live keys (BW24_ATTN_SHORT): against the reference inside it, at its edge and past it,
    # verify rows across it == decode, split heads, the int8 output rows, the fused pass 2, a window; the
    # planted_short canary (pass 2 blind to it) turns the 7 whose rows sit in 33..N keys, separate pass 2, red
    s128 = short(128)
    for p0 in (40, 127, 128, 300):
        yield f"attn short=128 D=128 G=4 Hkv=8 T=1 pos={p0} half-KV", s128(attn_ref_case(128, 4, 1, p0, Hkv=8, half=True))
    yield "attn short=128 rows==decode D=128 G=4 T=6 pos=124 half-KV", s128(attn_rows_case(128, 4, 6, 124, half=True))
    yield "attn short=128 split heads D=128 G=8 Hkv=4 T=1 pos=100 half-KV", \
        s128(split_heads(attn_ref_case(128, 8, 1, 100, Hkv=4, half=True)))
    yield "attn short=128 +q8 out D=128 G=4 Hkv=8 T=1 pos=100", s128(attn_q8_case(128, 4, 1, 100, 8))
    yield "attn short=128 fused-combine D=128 G=4 T=4 pos=100", s128(fused(attn_ref_case(128, 4, 4, 100)))
    yield "attn short=128 D=64 G=3 T=9 pos=60 window=40", s128(attn_ref_case(64, 3, 9, 60, window=40))
    yield "attn short=64 rows==decode D=128 G=2 T=5 pos=62", short(64)(attn_rows_case(128, 2, 5, 62))
    yield "attn split heads rows==decode D=128 G=8 Hkv=4 T=6 pos=500 half-KV", \
        split_heads(attn_rows_case(128, 8, 6, 500, Hkv=4, half=True))
    for K in (64, 128, 896, 1000, 4096, 5120, 8192, 12345):
        for add in (False, True):
            yield f"rmsnorm_reg K={K}{' +add' if add else ''} rows=5", rmsnorm_rows_case(K, add)
    for mode, T, H, Hkv, D, rd, p0, qn, kn in (
            ("neox", 1, 16, 8, 128, 128, 63, True, True), ("neox", 5, 32, 8, 128, 128, 4093, True, True),
            ("neox", 3, 4, 1, 256, 256, 17, True, True), ("norm", 2, 6, 2, 64, 32, 77, True, True),
            ("neox", 4, 8, 2, 128, 64, 1000, True, False), ("norm", 1, 9, 3, 64, 64, 517, False, False)):
        yield f"rope_kv+qknorm {mode} T={T} H={H}/{Hkv} D={D} rope_dim={rd} pos={p0}" \
              f"{'' if qn else ' -qn'}{'' if kn else ' -kn'}", rope_norm_case(mode, T, H, Hkv, D, rd, p0, qn, kn)
    yield "rope_kv+qknorm neox T=5 H=32/8 D=128 pos=4093 half-KV", rope_norm_case("neox", 5, 32, 8, 128, 128, 4093,
                                                                                   half=True)
    yield "rope_kv norm T=2 H=6/2 D=64 rope_dim=32 pos=77 half-KV", rope_norm_case("norm", 2, 6, 2, 64, 32, 77,
                                                                                  False, False, half=True)
