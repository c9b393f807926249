"""kernel_check cases of the int8-activation matvec path (kernels/qmatvec_q8.cu, ops/cuda/q8.py).

Each case forces path "q8" for its quant type through the launch-config override, runs the cuda op
and compares with matmul_q8_ref: the activation quantized by the bit-exact NumPy twin of quantize_x,
dequantized, times the dequantized weight in float64 (tolerance class "matmul_q8").
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from gguf.constants import GGMLQuantizationType as Q

from .kernel_cases import ROUTER_REAL, Case, _dev, _weight, moe_weights, split_products
from .kernel_check import compare, setting, with_setting
from .ops.cuda.q8 import dequantize_x_ref, matmul_q8_ref, moe_q8_ref, quantize_x_ref, unpack_xs

Q8_FORMATS = (Q.Q4_K, Q.Q6_K, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q5_0, Q.Q5_K)
KQ = (Q.Q4_K, Q.Q5_K, Q.Q6_K)


def _k_for(qt) -> int:
    return 768 if qt in KQ else 544  # 24 / 17 groups: lanes left idle


class _forced:
    """Force {warps, rows, path} (q8 unless given) for some quant types while a case runs."""

    def __init__(self, cu, qts, warps=4, rows=8, path="q8"):
        self.cu, self.names, self.cfg = cu, sorted({q.name for q in qts}), {"warps": warps, "rows": rows, "path": path}

    def __enter__(self):
        for n in self.names:
            self.cu.set_launch_config("qmatvec", n, self.cfg)

    def __exit__(self, *exc):
        for n in self.names:
            self.cu.set_launch_config("qmatvec", n, None)


def _x(rng, T, k) -> np.ndarray:
    x = (rng.standard_normal((T, k)) * rng.uniform(0.1, 10, (T, 1))).astype(np.float32)
    x[0, 32:64] = 0.0  # an all-zero group: d = 0, every q = 0
    x[-1, 64] = 50.0  # an outlier group: the rest of it quantizes to small codes
    return x


def quantize_case(T: int, k: int) -> Case:
    """quantize_x is bit-identical to its NumPy twin (codes, scales, half-group sums)."""
    def run(name, ref, cu, rng):
        from .ops.cuda import q8

        x = _x(rng, T, k)
        x[-1, 0] = 31.75  # max |x| = 127 * 0.25: d = 0.25 exactly, so x / d below are exact .5 ties
        x[-1, 1:32] = (rng.integers(-100, 100, 31) + 0.5) * 0.25
        xq, xs = q8.quantize(cu, _dev(cu, x))
        dq, ds = unpack_xs(cu.to_host(xs).reshape(T, k // 32, 2))
        wq, wd, wsum = quantize_x_ref(x)
        got = np.concatenate([cu.to_host(xq).astype(np.float64), dq.view(np.int32).ravel(), ds.ravel()])
        want = np.concatenate([wq.ravel().astype(np.float64), wd.view(np.int32).ravel(), wsum.ravel()])
        return compare(name, "exact", got, want)
    return run


def round_case(T: int, k: int, in_place: bool) -> Case:
    """round_x_q8 (the gate's emulation of int8 activations on its exact kernels) gives dequantize_x_ref's
    values bit for bit: zero groups, .5 ties, an outlier group; into a copy or in place."""
    def run(name, ref, cu, rng):
        from .ops.cuda import q8

        x = _x(rng, T, k)
        x[-1, 0] = 31.75  # d = 0.25 exactly: x / d below are .5 ties (round half to even)
        x[-1, 1:32] = (rng.integers(-100, 100, 31) + 0.5) * 0.25
        dx = _dev(cu, x)
        y = q8.round_x(cu, dx, out=None if in_place else cu.zeros((T, k)))
        got = cu.to_host(y)
        if not in_place and not np.array_equal(cu.to_host(dx), x):
            return compare(name + " (x overwritten)", "exact", cu.to_host(dx), x)
        return compare(name, "exact", got.astype(np.float64), dequantize_x_ref(x).astype(np.float32).astype(np.float64))
    return run


def matmul_case(qt, T, bias: bool, residual: bool, softcap: float = 0.0, cfg=(4, 8)) -> Case:
    def run(name, ref, cu, rng):
        n, k = 333, _k_for(qt)
        ti = _weight(qt, n, k, rng, name)
        x = _x(rng, T, k)
        b = rng.standard_normal(n).astype(np.float32) if bias else None
        r = rng.standard_normal((T, n)).astype(np.float32) if residual else None
        want = matmul_q8_ref(ref.load_weight(ti).data, x, b, r, softcap)
        out = _dev(cu, r) if residual else cu.zeros((T, n))
        with _forced(cu, [qt], *cfg):
            cu.matmul(cu.load_weight(ti), _dev(cu, x), out=out, bias=None if b is None else _dev(cu, b),
                      residual=out if residual else None, softcap=softcap)  # residual aliases out
        return compare(name, "matmul_q8", cu.to_host(out), want)
    return run


def multi_case(qts, T, bias: bool, cfg=(4, 8)) -> Case:
    def run(name, ref, cu, rng):
        k = 768 if any(q in KQ for q in qts) else 544
        ns = (301, 77, 45)[: len(qts)]
        tis = [_weight(q, n, k, rng, f"{name}.w{i}") for i, (q, n) in enumerate(zip(qts, ns, strict=True))]
        x = _x(rng, T, k)
        bs = [rng.standard_normal(n).astype(np.float32) if bias else None for n in ns]
        want = [matmul_q8_ref(ref.load_weight(t).data, x, b) for t, b in zip(tis, bs, strict=True)]
        outs = [cu.zeros((T, n)) for n in ns]
        with _forced(cu, qts[:1], *cfg):
            cu.matmul_multi([cu.load_weight(t) for t in tis], _dev(cu, x), outs=outs,
                            biases=[None if b is None else _dev(cu, b) for b in bs])
        return compare(name, "matmul_q8", np.concatenate([cu.to_host(o).ravel() for o in outs]),
                       np.concatenate([w.ravel() for w in want]))
    return run


VERIFY_TS = (2, 3, 5, 8, 9, 16)  # NT = T (4 rows per block, q8.verify_rows), then the 16 bucket (2 rows)


def decode_verify_case(qt, cfg, multi: bool = False, rows: int | None = None) -> Case:
    """Row t of a T-token q8 launch is bit-identical to the T = 1 launch (verify == decode), at every
    T of VERIFY_TS and K long enough that each thread walks several groups; rows: force that many rows
    per block for every T > 1 (CudaOps.verify_rows, as a sweep does) instead of q8.verify_rows."""
    def run(name, ref, cu, rng):
        n, k = 67, 4352  # 136 groups / 17 superblocks
        ws = [cu.load_weight(_weight(qt, n + 13 * i, k, rng, f"{name}.{i}")) for i in range(2 if multi else 1)]
        x = _dev(cu, rng.standard_normal((16, k)).astype(np.float32))

        def mm(xx, T):
            outs = [cu.zeros((T, w.n)) for w in ws]
            if multi:
                cu.matmul_multi(ws, xx, outs=outs)
            else:
                cu.matmul(ws[0], xx, out=outs[0])
            return np.concatenate([cu.to_host(o) for o in outs], axis=1)

        with _forced(cu, [qt], *cfg):
            ones = np.concatenate([mm(x[t:t + 1], 1) for t in range(16)])
            with setting(cu, "verify_rows", rows):
                many = np.concatenate([mm(x[:T], T) for T in VERIFY_TS])
        want = np.concatenate([ones[:T] for T in VERIFY_TS])
        return compare(name, "exact", many, want)
    return run


def decode_loads_case(qt, cfg, value, multi: bool = False, attr: str = "qmv8_loads") -> Case:
    """Decode (T = 1) q8 launches with BW24_QMV8_LOADS=value (CudaOps.qmv8_loads: each thread's weight loads issued
    in batches of max(1, value / R) groups, kernels/qmatvec_q8.cu) give the default loop's bits, row for row; and,
    those being equal, they are held to the float64 reference (so a planted bug in both still turns the case red).
    K = 4352 (136 groups): one warp's lanes walk 4-5 groups each, the last batch cut short. attr: another CudaOps
    setting of the decode launch set to value instead (qmv8_early False: the first group loaded after the PDL
    wait)."""
    def run(name, ref, cu, rng):
        n, k = 67, 4352
        tis = [_weight(qt, n + 13 * i, k, rng, f"{name}.{i}") for i in range(2 if multi else 1)]
        ws = [cu.load_weight(t) for t in tis]
        x = _x(rng, 3, k)

        def rows():
            got = []
            for t in range(len(x)):
                outs = [cu.zeros((1, w.n)) for w in ws]
                if multi:
                    cu.matmul_multi(ws, _dev(cu, x[t:t + 1]), outs=outs)
                else:
                    cu.matmul(ws[0], _dev(cu, x[t:t + 1]), out=outs[0])
                got.append(np.concatenate([cu.to_host(o) for o in outs], axis=1))
            return np.concatenate(got)

        with _forced(cu, [qt], *cfg):
            base = rows()
            with setting(cu, attr, value):
                got = rows()
        same = compare(name, "exact", got, base)
        if not same.ok:
            return same
        return compare(name, "matmul_q8", got,
                       np.concatenate([matmul_q8_ref(ref.load_weight(t).data, x) for t in tis], axis=1))
    return run


def _scratch_q8(cu, T: int, k: int) -> np.ndarray:
    """The q8 scratch (codes, scale bits, half-group sums) as one float64 vector."""
    from .ops.cuda import q8

    xq, xs = q8.buffers(cu, T, k)
    dq, ds = unpack_xs(cu.to_host(xs).reshape(T, k // 32, 2))
    return np.concatenate([cu.to_host(xq).astype(np.float64), dq.view(np.int32).ravel(), ds.ravel()])


def _want_q8(x: np.ndarray) -> np.ndarray:
    wq, wd, wsum = quantize_x_ref(x)
    return np.concatenate([wq.ravel().astype(np.float64), wd.view(np.int32).ravel(), wsum.ravel()])


def fused_producer_case(kind: str, T: int, k: int, add: bool = False) -> Case:
    """rmsnorm (fused: rmsnorm_reg with xq) / glu_q8 leave in the q8 scratch exactly what quantize_x makes of their own output
    (exact), and that output matches the reference (elementw)."""
    def run(name, ref, cu, rng):
        x = _x(rng, T, k)
        if kind == "norm":
            w = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32)
            a = rng.standard_normal((T, k)).astype(np.float32) if add else None
            want, xr = np.empty_like(x), x.copy()
            ref.rmsnorm(xr, w, 1e-6, out=want, add=a)
            xd, out = _dev(cu, x), cu.zeros((T, k))
            cu.rmsnorm(xd, _dev(cu, w), 1e-6, out=out, add=None if a is None else _dev(cu, a))
        else:
            u = rng.standard_normal((T, k)).astype(np.float32)
            want = np.empty_like(x)
            ref.glu(x.copy(), u, "silu", out=want)
            out = _dev(cu, x)
            cu.glu(out, _dev(cu, u), "silu", out=out)  # out aliases gate, as in the forwards
        got = cu.to_host(out)
        r = compare(name, "elementw", got, want)
        if not r.ok:
            return r
        return compare(name, "exact", _scratch_q8(cu, T, k), _want_q8(got))
    return run


def count_launches(cu, fn) -> int:
    """How many kernel launches fn() makes on cu (a fused producer's consumer must make exactly one)."""
    launches = []
    orig = cu._launch
    cu._launch = lambda f, *a, **kw: (launches.append(f), orig(f, *a, **kw))  # (kw: the overlap's stream=)
    try:
        fn()
    finally:
        cu._launch = orig
    return len(launches)


def kernel_names(cu, fn) -> list[str]:
    """The kernel names fn() asks cu for, in order (which path a call took). Through _k_with, which _k calls and the
    q8 launchers call directly with a launch's own defines (def966d: a decode launch's QMV8_DECODE_LOADS): at
    def966d this watched _k alone, and the 4 `norm ahead` cases saw none of their qmv8_na / qmv8_3n launches and
    went red on the H200 at aee9d2f (evidence/kernel_check_h200_aee9d2f.log)."""
    names = []
    had, orig = "_k_with" in vars(cu), cu._k_with
    cu._k_with = lambda f, n, *a, **kw: (names.append(n), orig(f, n, *a, **kw))[1]
    try:
        fn()
    finally:
        if had:
            cu._k_with = orig
        else:
            del cu._k_with  # (the class's method again)
    return names


def moe_case(qt, down_qt, T: int, X: int, k: int, E: int, F: int, fused: bool = False) -> Case:
    """BW24_MOE_Q8's experts (moe_gu8 / moe_down8) in stages against moe_q8_ref: the g rows moe_gu8 left in
    its scratch against the reference's g (matmul_q8); g's int8 rows, which moe_gu8's last block of each
    group wrote, against quantize_x_ref of that g, and its tickets all re-armed to 0 (exact); out against
    the reference's down projection of the kernel's own g (a g an ulp off may cross a rounding boundary of
    its quantization; matmul_q8). The worst of the three. fused: x is a K >= 2048 rmsnorm's output, whose
    int8 rows the norm wrote (no quantize_x launch, the real forward's path). The call must have taken the
    int8 kernels."""
    def run(name, ref, cu, rng):
        # a real router's logit size (ROUTER_REAL). Why: with unit router weights over _x's rows (scales up to 10)
        # the logits' standard deviation is ~450, and the ~1e-4 by which an fp32 logit of 2,048 terms differs from
        # the reference's float64 one moved a softmax weight by that much relative: 27 of 2,000 seeds put the routing
        # weights' own error past 1e-5 of the output (CPU, tests/test_moe_q8_cases.py), and at 6eb32f3 one full
        # kernel-check run's T = 5 case was red at rel 2.76e-5 (153 seeds of it alone: `out` up to 1.67e-5, `g`
        # <= 3e-7). At a real router's size the same error stays under 2e-6.
        tis = moe_weights(f"{name}:", rng, X, E, F, qt, down_qt, router_std=ROUTER_REAL)
        r = rng.standard_normal((T, E)).astype(np.float32)
        ws, out = [cu.load_weight(t) for t in tis], _dev(cu, r)
        xd = _dev(cu, _x(rng, T, E))
        with setting(cu, "moe_q8", True):
            if fused:
                xn = cu.zeros((T, E))
                cu.rmsnorm(xd, _dev(cu, (1 + 0.1 * rng.standard_normal(E)).astype(np.float32)), 1e-6, out=xn)
                xd = xn
            names = kernel_names(cu, lambda: cu.moe(xd, *ws, n_used=k, norm_weights=True, act="silu", out=out,
                                                    residual=out))
        want_names = {"moe_gu8", "moe_down8"} | ({"quantize_x"} if not fused else set())
        if {n.partition("<")[0] for n in names} - {"qmv", "moe_route"} != want_names:
            return compare(name + f" (launches {names})", "exact", np.array([0]), np.array([1]))
        dense = [ref.load_weight(t).data for t in tis]
        x, g = cu.to_host(xd), cu.to_host(cu._buf("moe_g", T * k * F)).reshape(T * k, F)
        kw = dict(n_used=k, norm_weights=True, act="silu", residual=r)
        want_g, _ = moe_q8_ref(x, *dense, **kw)
        _, want = moe_q8_ref(x, *dense, **kw, h=g)
        gq = cu.to_host(cu._buf("moe_gq", T * k * F, np.int8))
        gd, gsum = unpack_xs(cu.to_host(cu._buf("moe_gs", T * k * F // 16, np.int32)).reshape(T * k, F // 32, 2))
        wq, wd, wsum = quantize_x_ref(g)
        tickets = cu.to_host(cu._scratch["moe_tickets"])  # every group's last block re-armed its ticket
        codes = compare(name + " h codes, tickets", "exact",
                        np.concatenate([gq.astype(np.float64), gd.view(np.int32).ravel(), gsum.ravel(), tickets]),
                        np.concatenate([wq.ravel().astype(np.float64), wd.view(np.int32).ravel(), wsum.ravel(),
                                        np.zeros(tickets.size)]))
        # (each comparison names itself: at 6eb32f3 a red case said nothing of which; the 153-seed run after it
        # named `out`, the routing weights' share: the router's size above)
        return max(compare(name + " g", "matmul_q8", g, want_g), codes,
                   compare(name + " out", "matmul_q8", cu.to_host(out), want), key=lambda res: (not res.ok, res.rel))
    return run


def fused_consumer_case(qts, T: int) -> Case:
    """fused rmsnorm -> q8 matmul_multi (no quantize_x launch in between) vs matmul_q8_ref of the norm's output."""
    def run(name, ref, cu, rng):
        k = 2048  # rmsnorm fuses the quantization for K >= Q8_MIN_K rows only
        ns = (301, 77, 45)[: len(qts)]
        tis = [_weight(q, n, k, rng, f"{name}.w{i}") for i, (q, n) in enumerate(zip(qts, ns, strict=True))]
        x, w = _x(rng, T, k), (1 + 0.1 * rng.standard_normal(k)).astype(np.float32)
        xd, xn = _dev(cu, x), cu.zeros((T, k))
        outs = [cu.zeros((T, n)) for n in ns]
        wd, ws = _dev(cu, w), [cu.load_weight(t) for t in tis]
        with _forced(cu, qts[:1]):
            cu.rmsnorm(xd, wd, 1e-6, out=xn)
            n = count_launches(cu, lambda: cu.matmul_multi(ws, xn, outs=outs))
        if n != 1:  # the fused producer's quantization must have been used
            return compare(name, "exact", np.array([n]), np.array([1]))
        want = [matmul_q8_ref(ref.load_weight(t).data, cu.to_host(xn)) for t in tis]
        return compare(name, "matmul_q8", np.concatenate([cu.to_host(o).ravel() for o in outs]),
                       np.concatenate([v.ravel() for v in want]))
    return run


def norm_multi_case(qts, T: int, K: int, cfg, path: str = "f32") -> Case:
    """norm_matmul_multi: x = rmsnorm(h) * nw, then Q/K/V-style matvecs of x, vs the reference. On the
    fp32-activation path one qmv3n launch (the norm inside the matvec's blocks), on the q8 path rmsnorm
    (+ its int8 rows) and qmv8_3; and row t of the T-row call == a T = 1 call, bit for bit (verify ==
    decode). T > 16: the prefill GEMMs, the norm applied by x_to_half (vs the reference only)."""
    def run(name, ref, cu, rng):
        ns = (320, 64, 96)[: len(qts)]
        tis = [_weight(q, n, K, rng, f"{name}.w{i}") for i, (q, n) in enumerate(zip(qts, ns, strict=True))]
        h = _x(rng, T, K)
        nw = (1 + 0.1 * rng.standard_normal(K)).astype(np.float32)
        x = np.empty_like(h)
        ref.rmsnorm(h, nw, 1e-6, out=x)
        dense = [ref.load_weight(t).data for t in tis]
        ws, hd, nwd = [cu.load_weight(t) for t in tis], _dev(cu, h), _dev(cu, nw)
        with _forced(cu, qts, *cfg, path=path), setting(cu, "norm_fuse", True), split_products(cu):  # whatever
            # BW24_NORM_FUSE / BW24_PREFILL say
            outs, xb = [cu.zeros((T, n)) for n in ns], cu.zeros((T, K))
            n = count_launches(cu, lambda: cu.norm_matmul_multi(hd, nwd, 1e-6, ws, x=xb, outs=outs))
            if T > 16:  # prefill rows: x_to_half normalizes h on its way to fp16 (split precision here)
                got = np.concatenate([cu.to_host(o) for o in outs], axis=1)
                want = [x.astype(np.float64) @ np.asarray(d, np.float64).T for d in dense]
                return compare(name, "matmul", got, np.concatenate([np.asarray(w, np.float32) for w in want], axis=1))
            if n != (1 if path == "f32" else 2):  # qmv3n; or rmsnorm_reg (+ int8 rows) then qmv8_3
                return compare(name + " (launches)", "exact", np.array([n]), np.array([1 if path == "f32" else 2]))
            got = np.concatenate([cu.to_host(o) for o in outs], axis=1)
            if path == "q8":  # int8 rows of the device's normalized x (the reference's may round a code apart)
                want = [matmul_q8_ref(d, cu.to_host(xb)) for d in dense]
            else:
                want = [x.astype(np.float64) @ np.asarray(d, np.float64).T for d in dense]
            res = compare(name, "matmul" if path == "f32" else "matmul_q8", got,
                          np.concatenate([np.asarray(w, np.float32) for w in want], axis=1))
            if not res.ok:
                return res
            ones = []
            for t in range(T):
                o1 = [cu.zeros((1, n)) for n in ns]
                cu.norm_matmul_multi(hd[t:t + 1], nwd, 1e-6, ws, x=xb[t:t + 1], outs=o1)
                ones.append(np.concatenate([cu.to_host(o) for o in o1], axis=1))
        return compare(name + " ==rows", "exact", np.concatenate(ones), got)
    return run


def moe_router_norm_case(qt, down_qt, T: int, X: int, k: int, E: int, F: int, q8: bool = True) -> Case:
    """BW24_MOE_ROUTER_NORM (the MoE block's input RMSNorm inside the router's launch, moe.cu moe_router_norm) gives
    the unfused launches' bits (rmsnorm, then moe), called as qwen3moe's forward calls it (norm_moe, out and the
    residual the very buffer h): the output, x (the normed rows), the routing (sel, wts) and, on the int8 experts
    (q8), x's int8 rows; the q8 scratch is filled with 0x55 before each run, so no run can pass on the other's.
    Both runs take the router's own launch (moe_router_fuse, the default), so the unfused one is rmsnorm_reg then
    moe_router.
    Red (never passed) where the fused launch did not run. The planted_routernorm canary (the last router block's
    share of x and its int8 groups unwritten) turns every case red."""
    from .ops.cuda import q8 as q8_ops

    def run(name, ref, cu, rng):
        w = [cu.load_weight(t) for t in moe_weights(f"{name}:", rng, X, E, F, qt, down_qt, router_std=ROUTER_REAL)]
        h = (rng.standard_normal((T, E)) * 3).astype(np.float32)
        nw = _dev(cu, (1 + 0.1 * rng.standard_normal(E)).astype(np.float32))
        got, names = {}, {}
        for on in (False, True):
            # the router's launch on (kernel_check turns moe_router_fuse off for the other cases): norm_router
            # needs it, and without it the fused launch never ran (ad90405's 4 red cases on the H200)
            with setting(cu, "moe_q8", q8), setting(cu, "moe_router_fuse", True), setting(cu, "moe_norm_fuse", on):
                xq, xs = q8_ops.buffers(cu, T, E)
                xq.fill(0x55)
                xs.fill(0x55555555)
                hd, xd = _dev(cu, h), cu.zeros((T, E))
                names[on] = kernel_names(cu, lambda hd=hd, xd=xd: cu.norm_moe(
                    hd, nw, 1e-6, *w, x=xd, n_used=k, norm_weights=True, act="silu", out=hd, residual=hd))
                sel, wts = cu._buf("moe_sel", T * k, np.int32), cu._buf("moe_w", T * k)
                got[on] = [cu.to_host(hd).ravel(), cu.to_host(xd).ravel(), cu.to_host(sel).astype(np.float64),
                           cu.to_host(wts).astype(np.float64)]
                if q8:
                    got[on] += [cu.to_host(xq).astype(np.float64), cu.to_host(xs).astype(np.float64)]
        fused = [n for n in names[True] if n.startswith("moe_router_norm<")]
        if not fused or any(n.startswith("rmsnorm") for n in names[True]):
            return compare(name + " (the fused launch did not run)", "exact", np.ones(1), np.zeros(1))
        return compare(name, "exact", np.concatenate(got[True]), np.concatenate(got[False]))
    return run


def norm_ahead_case(qt, cqts, T: int, K: int, N: int, cfg: tuple[int, int]) -> Case:
    """BW24_NORM_AHEAD: a residual matvec (qmv8_na, the weight qt [N, K]) then the norm's consumer (qmv8_3n over the
    weights cqts [*, N]), as the dense forward calls them (matmul_norm_ahead, norm_matmul_multi with the same norm):
    no rmsnorm launch; h (the producer's out) against matmul_q8_ref; the int8 rows of h * norm weight, their scales,
    half sums and the groups' sums of squares exactly against q8.na_ref of the device's h; the consumer's outputs
    against r * (dequantized codes) @ W^T with r from q8.na_scale_ref; and for T > 1 every row equal, bit for bit, to
    a T = 1 call's (verify == decode). cfg: the (warps, rows) forced on every weight (the producer takes
    q8.na_warps of them). The planted_na canary (codes of h without the norm weight) turns every case red."""
    from .ops.cuda import q8 as q8_ops

    def run(name, ref, cu, rng):
        eps = 1e-6
        wt = _weight(qt, N, K, rng, f"{name}.wo")
        ctis = [_weight(q, n, N, rng, f"{name}.c{i}") for i, (q, n) in enumerate(zip(cqts, (256, 192, 128)[: len(cqts)], strict=True))]
        x, h0 = _x(rng, T, K), (rng.standard_normal((T, N)) * 2).astype(np.float32)
        nw = (1 + 0.1 * rng.standard_normal(N)).astype(np.float32)
        wo, cws, nwd = cu.load_weight(wt), [cu.load_weight(t) for t in ctis], _dev(cu, nw)

        def step(xr, hr):
            hd, xd, xb = _dev(cu, hr), _dev(cu, xr), cu.zeros(hr.shape)
            outs = [cu.zeros((hr.shape[0], t.shape[0])) for t in ctis]
            names = kernel_names(cu, lambda: (
                cu.matmul_norm_ahead(wo, xd, out=hd, residual=hd, norm=nwd, eps=eps),
                cu.norm_matmul_multi(hd, nwd, eps, cws, x=xb, outs=outs)))
            yq, ys, yss = (cu.to_host(a) for a in q8_ops.na_buffers(cu, hr.shape[0], N))
            return names, cu.to_host(hd), [cu.to_host(o) for o in outs], (yq, ys, yss)

        with _forced(cu, [qt, *cqts], *cfg), setting(cu, "norm_ahead", True):
            names, h, outs, (yq, ys, yss) = step(x, h0)
            if not any(n.startswith("qmv8_na<") for n in names) or not any(n.startswith("qmv8_3n<") for n in names) \
                    or any(n.startswith("rmsnorm") for n in names):
                return compare(name + f" (launches {names})", "exact", np.ones(1), np.zeros(1))
            rows = [step(x[t:t + 1], h0[t:t + 1]) for t in range(T)] if T > 1 else []
        G = N // 32
        q, d, sums, ss = q8_ops.na_ref(h, nw)
        gd, gsum = q8_ops.unpack_xs(ys.reshape(T, G, 2))
        codes = compare(name + " codes, scales, sums, sums of squares", "exact",
                        np.concatenate([yq.astype(np.float64), gd.view(np.int32).ravel(), gsum.ravel(),
                                        yss.view(np.int32).astype(np.float64)]),
                        np.concatenate([q.ravel().astype(np.float64), d.view(np.int32).ravel(), sums.ravel(),
                                        ss.view(np.int32).ravel().astype(np.float64)]))
        r = q8_ops.na_scale_ref(ss, N, eps)
        xn = (q.reshape(T, G, 32).astype(np.float64) * d[..., None].astype(np.float64)).reshape(T, N) * r[:, None]
        want = np.concatenate([xn @ np.asarray(ref.load_weight(t).data, np.float64).T for t in ctis], axis=1)
        results = [compare(name + " h", "matmul_q8", h, matmul_q8_ref(ref.load_weight(wt).data, x, residual=h0)),
                   codes, compare(name + " outs", "matmul_q8", np.concatenate(outs, axis=1), want.astype(np.float32))]
        if rows:
            results.append(compare(name + " ==rows", "exact",
                                   np.concatenate([np.concatenate([rw[1], *rw[2]], axis=1) for rw in rows]),
                                   np.concatenate([h, *outs], axis=1)))
        return max(results, key=lambda res: (not res.ok, res.rel))
    return run


def _fused_path_wrong(names, u_names, fused: str, unfused: str, built: bool, T: int) -> bool:
    """Whether a fused case's calls took the wrong path: names / u_names the kernels its fused / unfused call asked
    for (a spilled build is asked for, not launched). Right: the fused kernel ran (no `unfused` launch) exactly where
    its build exists, the unfused kernel otherwise, the unfused call never asked for the fused kernel, and a T = 1
    call built it (else the case would check nothing fused)."""
    short, u_short = ([n.partition("<")[0] for n in ns] for ns in (names, u_names))
    fused_ran = fused in short and unfused not in short
    return fused_ran != built or (unfused not in short and not built) or fused in u_short or (T == 1 and not built)


def _input_seen(src: tuple, T: int, K: int, eps: float) -> np.ndarray:
    """A fused consumer's input [T, K] as its kernel sees it, float64: src = (x,), an rmsnorm's rows, dequantized as
    quantize_x codes them; or src = (codes, scales, sums of squares) of a norm-ahead's rows (na_buffers), r times the
    dequantized codes of h * norm weight, r from the sums (norm_ahead_case's consumer)."""
    from .ops.cuda import q8 as q8_ops

    if len(src) == 1:
        return dequantize_x_ref(src[0])
    yq, ys, yss = src
    d, _ = q8_ops.unpack_xs(ys.reshape(T, K // 32, 2))
    r = q8_ops.na_scale_ref(yss.reshape(T, K // 32), K, eps)
    return (yq.reshape(T, K // 32, 32).astype(np.float64) * d[..., None].astype(np.float64)).reshape(T, K) * r[:, None]


def glu_groups_case(qt, T: int, K: int, F: int, cfg: tuple[int, int], na: bool) -> Case:
    """BW24_GLU_GROUPS: a dense FFN's front (ffn_glu: rmsnorm, or a norm-ahead's producer when na, then gate/up and the
    GLU) with qmv8_glu against the same call unfused (qmv8_3(n) + glu_q8), bit for bit: g after the GLU, u, and the int8
    rows the down projection reads (q8.quantize right after, which must launch nothing either way); the fused launch ran
    exactly where glu_kernel gives a build (no glu_q8 then), else the unfused launches did. g against the reference (the
    GLU of the dequantized input's float64 products: the rmsnorm's rows, or r times the norm-ahead's codes) and its int8
    rows exactly against quantize_x_ref of the device's g. For T > 1, every row equal to a T = 1 call's (verify rows ==
    decode rows, the T = 1 call fused). cfg: the (warps, rows) forced on the gate/up weights (and a norm-ahead
    producer's). The planted_glug canary (the activation left out of the epilogue) turns every case red."""
    from .ops.cuda import q8 as q8_ops

    def run(name, ref, cu, rng):
        eps = 1e-6
        wg_t, wu_t = (_weight(qt, F, K, rng, f"{name}.{p}") for p in ("gate", "up"))
        wo_t = _weight(Q.Q4_K, K, 1024, rng, f"{name}.wo") if na else None
        wg, wu = cu.load_weight(wg_t), cu.load_weight(wu_t)
        wo = cu.load_weight(wo_t) if na else None
        nw = (1 + 0.1 * rng.standard_normal(K)).astype(np.float32)
        h0, xin = (rng.standard_normal((T, K)) * 2).astype(np.float32), _x(rng, T, 1024)
        nwd = _dev(cu, nw)

        def step(rows, fused):
            hd, xb = _dev(cu, h0[rows]), cu.zeros((len(rows), K))
            g, u = cu.zeros((len(rows), F)), cu.zeros((len(rows), F))
            got = {}

            def call():
                if na:
                    cu.matmul_norm_ahead(wo, _dev(cu, xin[rows]), out=hd, residual=hd, norm=nwd, eps=eps)
                cu.ffn_glu(hd, nwd, eps, wg, wu, "silu", x=xb, g=g, u=u)
                got["n_after"] = count_launches(cu, lambda: got.setdefault("codes", q8_ops.quantize(cu, g)))
            with setting(cu, "glu_groups", fused), setting(cu, "norm_ahead", na):
                names = kernel_names(cu, call)
            xq, xs = got["codes"]
            codes = np.concatenate([cu.to_host(xq).astype(np.float64), cu.to_host(xs).astype(np.float64)])
            src = q8_ops.na_buffers(cu, len(rows), K) if na else (cu.to_host(xb),)
            src = tuple(cu.to_host(a) for a in src) if na else src
            return names, got["n_after"], cu.to_host(g), cu.to_host(u), codes, src

        all_rows = list(range(T))
        with _forced(cu, [qt, Q.Q4_K], *cfg):
            names, n_after, g, u, codes, src = step(all_rows, True)
            u_names, u_after, ug, uu, ucodes, _ = step(all_rows, False)
            with setting(cu, "glu_groups", True):
                plan = q8_ops.glu_plan(cu, (wg, wu), cu.zeros((T, K)), cu.zeros((T, F)))
            built = plan is not None and q8_ops.glu_kernel(cu, (wg, wu), *plan, na) is not None
            rows = [step([t], True) for t in range(T)] if T > 1 else []
        if _fused_path_wrong(names, u_names, "qmv8_glu", "glu_q8", built, T) or n_after or u_after:
            return compare(name + f" (launches {names} / unfused {u_names}; build {built})", "exact", np.ones(1),
                           np.zeros(1))
        G = F // 32
        results = [compare(name + " == unfused", "exact", np.concatenate([g.ravel(), u.ravel(), codes]),
                           np.concatenate([ug.ravel(), uu.ravel(), ucodes]))]
        wq, wd, wsum = quantize_x_ref(g)
        xq, xs = codes[: T * F], codes[T * F:].astype(np.int64).astype(np.int32)
        dq, dsum = unpack_xs(xs.reshape(T, G, 2))
        results.append(compare(name + " g's int8 rows", "exact",
                               np.concatenate([xq, dq.view(np.int32).ravel(), dsum.ravel()]),
                               np.concatenate([wq.ravel().astype(np.float64), wd.view(np.int32).ravel(), wsum.ravel()])))
        xn = _input_seen(src, T, K, eps)
        a = (xn @ np.asarray(ref.load_weight(wg_t).data, np.float64).T).astype(np.float32)
        b = (xn @ np.asarray(ref.load_weight(wu_t).data, np.float64).T).astype(np.float32)
        want = np.empty_like(a)
        ref.glu(a, b, "silu", out=want)
        results.append(compare(name + " g", "matmul_q8", g, want))
        if rows:
            results.append(compare(name + " ==rows", "exact", np.concatenate([np.concatenate([rw[2], rw[3]], axis=1)
                                                                             for rw in rows]),
                                   np.concatenate([g, u], axis=1)))
        return max(results, key=lambda res: (not res.ok, res.rel))
    return run


def qkv_rope_case(qts, T: int, K: int, H: int, Hkv: int, D: int, cfg: tuple[int, int], na: bool, mode: str = "neox",
                  qk_norm: bool = True) -> Case:
    """BW24_QKV_ROPE: an attention block's front (qkv_rope_attention: rmsnorm, or a norm-ahead's producer when na, then
    Q/K/V, the qk-norm, rope and the float16 cache append, then the attention) with qmv8_qkvr against the same call
    unfused (qmv8_3(n) + rope_kv), bit for bit: the rotated q, k and v rows, both caches whole, the attention's output;
    the fused launch ran exactly where qkvr_kernel gives a build (no rope_kv then), else the unfused launches did. q
    and the caches' new rows against the reference (the dequantized input's float64 products, then ref.rope_kv; the
    cache rows rounded to float16: gemm16). For T > 1, every row and cache row equal to T = 1 calls' at pos + t (verify
    rows == decode rows, the T = 1 calls fused). cfg: the (warps, rows) forced on the weights. The planted_qkvr canary
    (the new k and v rows written one position late) turns every case red."""
    from .ops.cuda import q8 as q8_ops

    def run(name, ref, cu, rng):
        eps, S, p0 = 1e-6, 48, 21
        wts = [_weight(qt, n, K, rng, f"{name}.{p}") for qt, n, p in zip(qts, (H * D, Hkv * D, Hkv * D), "qkv",
                                                                          strict=True)]
        wo_t = _weight(Q.Q4_K, K, 1024, rng, f"{name}.wo") if na else None
        ws, wo = [cu.load_weight(t) for t in wts], cu.load_weight(wo_t) if na else None
        nw = (1 + 0.1 * rng.standard_normal(K)).astype(np.float32)
        qn, kn = ((1 + 0.1 * rng.standard_normal(D)).astype(np.float32) for _ in range(2)) if qk_norm else (None, None)
        h0, xin = (rng.standard_normal((T, K)) * 2).astype(np.float32), _x(rng, T, 1024)
        c0 = [(rng.standard_normal((Hkv, S, D))).astype(np.float16) for _ in range(2)]
        nwd = _dev(cu, nw)
        rope = dict(base=1e6, freq_scale=1.0, rope_dim=D, mode=mode, norm_eps=eps,
                    q_norm=None if qn is None else _dev(cu, qn), k_norm=None if kn is None else _dev(cu, kn))

        def step(rows, fused, p, caches=None):
            n = len(rows)
            hd, xb = _dev(cu, h0[rows]), cu.zeros((n, K))
            q, k, v = cu.zeros((n, H * D)), cu.zeros((n, Hkv * D)), cu.zeros((n, Hkv * D))
            kc, vc = caches or (_dev(cu, c0[0]), _dev(cu, c0[1]))
            a = cu.zeros((n, H, D))
            attn = dict(scale=D ** -0.5, softcap=0.0, window=None, out=a, n_keys=p + n)

            def call():
                if na:
                    cu.matmul_norm_ahead(wo, _dev(cu, xin[rows]), out=hd, residual=hd, norm=nwd, eps=eps)
                cu.qkv_rope_attention(hd, nwd, eps, ws, x=xb, outs=(q, k, v), biases=None, q=q.reshape(n, H, D),
                                      k=k.reshape(n, Hkv, D), v=v.reshape(n, Hkv, D),
                                      pos=_dev(cu, np.array([p], np.int32)), k_cache=kc, v_cache=vc, rope=rope,
                                      attn=attn)
            with setting(cu, "qkv_rope", fused), setting(cu, "norm_ahead", na):
                names = kernel_names(cu, call)
            src = tuple(cu.to_host(b) for b in q8_ops.na_buffers(cu, n, K)) if na else (cu.to_host(xb),)
            return names, [cu.to_host(b) for b in (q, k, v, a)], (kc, vc), src

        all_rows = list(range(T))
        with _forced(cu, [*qts, Q.Q4_K], *cfg):
            names, got, caches, src = step(all_rows, True, p0)
            u_names, ugot, ucaches, _ = step(all_rows, False, p0)
            with setting(cu, "qkv_rope", True):
                plan = q8_ops.qkvr_plan(cu, ws, cu.zeros((T, K)), cu.zeros((T, H, D)), *caches)
            built = plan is not None and q8_ops.qkvr_kernel(cu, ws, D, *plan, na, "__half") is not None
            rows = []
            if T > 1:  # T = 1 calls at pos + t into one pair of caches, each row's own input
                rc = (_dev(cu, c0[0]), _dev(cu, c0[1]))
                rows = [step([t], True, p0 + t, rc)[1] for t in range(T)]
        if _fused_path_wrong(names, u_names, "qmv8_qkvr", "rope_kv", built, T):
            return compare(name + f" (launches {names} / unfused {u_names}; build {built})", "exact", np.ones(1),
                           np.zeros(1))
        kc, vc = (cu.to_host(c).astype(np.float32) for c in caches)
        ukc, uvc = (cu.to_host(c).astype(np.float32) for c in ucaches)
        results = [compare(name + " == unfused", "exact",
                           np.concatenate([g.ravel() for g in got] + [kc.ravel(), vc.ravel()]),
                           np.concatenate([g.ravel() for g in ugot] + [ukc.ravel(), uvc.ravel()]))]
        xn = _input_seen(src, T, K, eps)
        qr, kr, vr = ((xn @ np.asarray(ref.load_weight(t).data, np.float64).T).astype(np.float32) for t in wts)
        qr, kr, vr = qr.reshape(T, H, D), kr.reshape(T, Hkv, D), vr.reshape(T, Hkv, D)
        kcr, vcr = (c.astype(np.float32) for c in c0)
        ref.rope_kv(qr, kr, vr, np.array([p0], np.int32), kcr, vcr, base=1e6, freq_scale=1.0, rope_dim=D, mode=mode,
                    q_norm=qn, k_norm=kn, norm_eps=eps)
        new = slice(p0, p0 + T)
        results.append(compare(name + " q", "matmul_q8", got[0], qr.reshape(T, H * D)))
        results.append(compare(name + " cache rows", "gemm16", np.concatenate([kc[:, new].ravel(), vc[:, new].ravel()]),
                               np.concatenate([kcr[:, new].astype(np.float16).astype(np.float32).ravel(),
                                               vcr[:, new].astype(np.float16).astype(np.float32).ravel()])))
        if rows:
            rkc, rvc = (cu.to_host(c).astype(np.float32) for c in rc)
            results.append(compare(name + " ==rows", "exact",  # (q, k, v and the caches: the attention's rows are
                                   # held to decode's by the attention's own cases)
                                   np.concatenate([np.concatenate([r[i].ravel() for r in rows]) for i in range(3)]
                                                  + [rkc.ravel(), rvc.ravel()]),
                                   np.concatenate([g.ravel() for g in got[:3]] + [kc.ravel(), vc.ravel()])))
        return max(results, key=lambda res: (not res.ok, res.rel))
    return run


def cases() -> Iterator[tuple[str, Case]]:
    for T, k, add in ((1, 4096, True), (5, 2048, False), (16, 5120, True), (1, 2048, False)):
        yield f"q8 fused rmsnorm T={T} K={k}{' +add' if add else ''}", fused_producer_case("norm", T, k, add)
    for T, k in ((1, 12288), (3, 3072), (16, 544)):
        yield f"q8 fused glu_q8 T={T} K={k}", fused_producer_case("glu", T, k)
    yield "q8 fused rmsnorm -> matmul_multi Q4_K+Q4_K+Q6_K T=1", fused_consumer_case((Q.Q4_K, Q.Q4_K, Q.Q6_K), 1)
    yield "q8 fused rmsnorm -> matmul_multi Q8_0+Q8_0 T=9", fused_consumer_case((Q.Q8_0, Q.Q8_0), 9)
    # BW24_MOE_Q8: qwen3-30b-a3b's expert shapes (E = 2048, F = 768, k = 8; X cut to 16), its down types
    for T, dq, fused in ((1, Q.Q6_K, True), (5, Q.Q4_K, False), (9, Q.Q6_K, True)):
        yield f"moe decode q8 Q4_K/Q4_K/{dq.name} T={T} X=16 k=8 E=2048 F=768{' fused norm' if fused else ''}", \
            moe_case(Q.Q4_K, dq, T, 16, 8, 2048, 768, fused)
    yield "moe decode q8 Q8_0/Q8_0/Q8_0 T=2 X=12 k=8 E=1024 F=544", moe_case(Q.Q8_0, Q.Q8_0, 2, 12, 8, 1024, 544)
    yield "moe decode q8 Q5_K/Q5_K/Q4_0 T=3 X=10 k=3 E=768 F=512", moe_case(Q.Q5_K, Q.Q4_0, 3, 10, 3, 768, 512)
    # BW24_MOE_ROUTER_NORM: the 30B-A3B's shapes (X cut to 16 but one case's 128), verify rows, the fp32 experts
    for qt, dq, T, X, k, E, F, q8 in ((Q.Q4_K, Q.Q6_K, 1, 128, 8, 2048, 768, True), (Q.Q4_K, Q.Q4_K, 5, 16, 8, 2048, 768, True),
                                      (Q.Q8_0, Q.Q8_0, 3, 16, 4, 1024, 544, True), (Q.Q4_K, Q.Q6_K, 2, 16, 8, 2048, 768, False)):
        yield (f"moe router norm == rmsnorm + moe bitwise {qt.name}/{qt.name}/{dq.name} T={T} X={X} k={k} E={E} F={F}"
               f"{'' if q8 else ' fp32 experts'}"), moe_router_norm_case(qt, dq, T, X, k, E, F, q8)
    # BW24_NORM_AHEAD: the 8B's wo -> gate/up (its configs), a Q6_K down -> Q/K/V at one warp a row, verify rows
    # (bitwise against decode), the 16-token bucket on Q8_0
    for qt, cqts, T, K, N, cfg in ((Q.Q4_K, (Q.Q4_K, Q.Q4_K), 1, 2048, 4096, (4, 4)),
                                   (Q.Q6_K, (Q.Q4_K, Q.Q4_K, Q.Q6_K), 1, 3072, 1024, (1, 1)),
                                   (Q.Q4_K, (Q.Q4_K, Q.Q4_K), 5, 2048, 4096, (4, 4)),
                                   (Q.Q8_0, (Q.Q8_0, Q.Q8_0), 12, 1024, 2048, (2, 2))):
        yield (f"norm ahead {qt.name} -> {'+'.join(c.name for c in cqts)} T={T} K={K} N={N} W,R={cfg}",
               norm_ahead_case(qt, cqts, T, K, N, cfg))
    # BW24_GLU_GROUPS: the 0.6B's FFN front behind its norm-ahead (W, R = 1, 4) and behind an rmsnorm, the Q4_K_M 8B's
    # config (2, 4: a block of 1,024 threads), a 5-token verify (its rows against fused decode rows), a Q8_0 config
    for qt, T, K, F, cfg, na in ((Q.Q4_K, 1, 1024, 3072, (1, 4), True), (Q.Q4_K, 1, 1024, 3072, (1, 4), False),
                                 (Q.Q4_K, 1, 4096, 2048, (2, 4), False), (Q.Q4_K, 5, 1024, 3072, (1, 4), True),
                                 (Q.Q8_0, 1, 2048, 1024, (2, 8), False)):
        yield (f"glu groups {qt.name} T={T} K={K} F={F} W,R={cfg}{' norm ahead' if na else ''}",
               glu_groups_case(qt, T, K, F, cfg, na))
    # BW24_QKV_ROPE: the 0.6B's attention front (16 / 8 heads of 128, a Q6_K v) behind its norm-ahead and behind an
    # rmsnorm, a Q4_K v, llama's rope without qk-norm, a 3-token verify (its rows against fused decode rows)
    for qts, T, na, mode, qkn in (((Q.Q4_K, Q.Q4_K, Q.Q6_K), 1, True, "neox", True),
                                  ((Q.Q4_K, Q.Q4_K, Q.Q6_K), 1, False, "neox", True),
                                  ((Q.Q4_K, Q.Q4_K, Q.Q4_K), 1, True, "neox", True),
                                  ((Q.Q4_K, Q.Q4_K, Q.Q4_K), 1, False, "norm", False),
                                  ((Q.Q4_K, Q.Q4_K, Q.Q6_K), 3, True, "neox", True)):
        yield (f"qkv rope {'+'.join(q.name for q in qts)} T={T} {mode}{' qk-norm' if qkn else ''}"
               f"{' norm ahead' if na else ''}", qkv_rope_case(qts, T, 1024, 16, 8, 128, (1, 4), na, mode, qkn))
    yield "q8 quantize_x T=3 K=544 (zero group, ties)", quantize_case(3, 544)
    yield "q8 quantize_x T=16 K=4096", quantize_case(16, 4096)
    yield "q8 round_x (gate emulation) T=3 K=544", round_case(3, 544, False)
    yield "q8 round_x (gate emulation) T=1 K=4096 in place", round_case(1, 4096, True)
    for qt in Q8_FORMATS:
        for T, bias, res in ((1, False, False), (1, True, True), (3, False, True), (7, True, False),
                             (9, True, False), (16, True, True)):
            yield f"q8 matmul {qt.name:<5} N=333 K={_k_for(qt)} T={T}{' +bias' if bias else ''}" \
                  f"{' +res' if res else ''}", matmul_case(qt, T, bias, res)
    yield "q8 matmul Q6_K T=1 W=1 R=4 softcap=30 (logits)", matmul_case(Q.Q6_K, 1, False, False, 30.0, (1, 4))
    yield "q8 matmul Q8_0 T=1 W=4 R=16 softcap=30 (logits)", matmul_case(Q.Q8_0, 1, False, False, 30.0, (4, 16))
    for qts, T, bias in (((Q.Q4_K, Q.Q4_K, Q.Q6_K), 1, False), ((Q.Q8_0, Q.Q8_0, Q.Q8_0), 1, True),
                         ((Q.Q4_K, Q.Q4_K), 1, False), ((Q.Q4_0, Q.Q4_0, Q.Q4_0), 5, True),
                         ((Q.Q5_0, Q.Q5_0, Q.Q8_0), 1, True), ((Q.Q4_1, Q.Q4_1), 9, False),
                         ((Q.Q4_K, Q.Q4_K, Q.Q6_K), 16, False)):
        yield f"q8 matmul_multi {'+'.join(q.name for q in qts)} T={T}{' +bias' if bias else ''}", \
            multi_case(qts, T, bias)
    for qt, cfg, multi in ((Q.Q4_K, (4, 8), False), (Q.Q6_K, (1, 4), False), (Q.Q8_0, (4, 16), False),
                           (Q.Q4_0, (2, 4), False), (Q.Q4_1, (8, 2), False), (Q.Q5_0, (1, 1), False),
                           (Q.Q5_K, (4, 4), False), (Q.Q4_K, (4, 8), True)):
        yield f"q8 decode==verify bitwise {qt.name:<5} K=4352 W={cfg[0]} R={cfg[1]}{' multi' if multi else ''}" \
              f" T={','.join(map(str, VERIFY_TS))}", decode_verify_case(qt, cfg, multi)
    # the block's input RMSNorm inside the Q/K/V / gate-up matvecs (qmv3n, the fp32-activation path: the small
    # models' K < 2048), and the q8 path's unfused pair; K = 576 / 896 / 1024 / 1536: smollm2, qwen2.5, qwen3-0.6b
    for qts, T, K, cfg, path in (((Q.Q4_K, Q.Q4_K, Q.Q6_K), 1, 1024, (1, 4), "f32"),
                                 ((Q.Q4_K, Q.Q4_K, Q.Q6_K), 5, 1024, (1, 4), "f32"),
                                 ((Q.Q4_1, Q.Q4_1, Q.Q4_1), 3, 576, (4, 8), "f32"),
                                 ((Q.Q8_0, Q.Q8_0), 16, 896, (2, 4), "f32"), ((Q.Q4_K, Q.Q6_K), 9, 1536, (4, 2), "f32"),
                                 ((Q.Q4_K, Q.Q4_K, Q.Q6_K), 4, 2048, (4, 8), "q8"),
                                 ((Q.Q4_K, Q.Q4_K, Q.Q6_K), 40, 1024, (1, 4), "f32"),  # prefill: the norm in x_to_half
                                 ((Q.Q4_1, Q.Q4_1), 100, 576, (4, 8), "f32")):
        yield f"norm_matmul_multi {'+'.join(q.name for q in qts)} K={K} W={cfg[0]} R={cfg[1]} T={T} {path}", \
            norm_multi_case(qts, T, K, cfg, path)
    # BW24_QMV8_LOADS: the batched decode loop at the configs the H200 table picks for the 8B / 32B (Q/K/V, gate/up
    # (W, R) = (2, 4); wo (4, 4); down (1, 1) Q6_K and (8, 1) Q4_K), a Q8_0 (two 16-byte loads a group), each value
    for qt, cfg, loads, multi in ((Q.Q4_K, (2, 4), 8, True), (Q.Q4_K, (4, 4), 4, False), (Q.Q4_K, (4, 4), 16, False),
                                  (Q.Q6_K, (1, 1), 1, False), (Q.Q6_K, (1, 1), 2, False), (Q.Q6_K, (1, 1), 8, False),
                                  (Q.Q4_K, (8, 1), 4, False), (Q.Q8_0, (1, 2), 8, False), (Q.Q5_K, (2, 2), 16, False)):
        yield f"q8 decode loads={loads:<2} bitwise {qt.name:<5} K=4352 W={cfg[0]} R={cfg[1]}{' multi' if multi else ''}", \
            decode_loads_case(qt, cfg, loads, multi)
    # BW24_QMV8_EARLY=0: the first weight group loaded after the PDL wait, at the table's (W, R) for the 8B's Q8_0 and
    # Q4_K shapes and a one-row block, alone, batched (loads 8) and in a multi launch; the planted_qmv8late canary (the
    # late loads start at the second group) turns all 4 red
    for qt, cfg, loads, multi in ((Q.Q8_0, (4, 8), None, False), (Q.Q8_0, (1, 2), 8, False),
                                  (Q.Q4_K, (2, 4), None, True), (Q.Q6_K, (1, 1), None, False)):
        case = decode_loads_case(qt, cfg, False, multi, attr="qmv8_early")
        yield (f"q8 decode late == early bitwise {qt.name:<5} K=4352 W={cfg[0]} R={cfg[1]}"
               f"{f' loads={loads}' if loads else ''}{' multi' if multi else ''}"), \
            with_setting("qmv8_loads", "BW24_QMV8_LOADS forced for the case.", loads)(case) if loads else case
    # rows per block of the verify do not change a row's bits, whatever a sweep or table picks
    for qt, rows in ((Q.Q4_K, 8), (Q.Q6_K, 16), (Q.Q8_0, 1), (Q.Q5_K, 2)):
        yield f"q8 decode==verify bitwise {qt.name:<5} K=4352 W=4 R=8 verify rows={rows}", \
            decode_verify_case(qt, (4, 8), rows=rows)
