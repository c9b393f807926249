"""kernel_check cases of the prefill paths (T > 16): the fp16 cuBLAS GEMM (ops/cuda/prefill.py,
kernels/prefill_gemm.cu) in both precisions, and the flash prefill attention
(kernels/attention_prefill.cu) at chunk starts 0 and > 0, sliding windows, softcap, G = 1..8 and
head dims 64/128/256, and the grouped-expert MoE prefill (ops/cuda/moe_prefill.py). Run alone on a GPU with `bw24 kernel-check --only prefill`."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from gguf.constants import GGMLQuantizationType as Q

from .kernel_cases import (
    Case,
    _dev,
    _k_for,
    _weight,
    attention_case,
    matmul_multi_case,
    moe_case,
    moe_weights,
)
from .kernel_check import compare, setting
from .ops.cuda.repack import SUPPORTED


def budget_case(case: Case, module: str, name: str, value: int) -> Case:
    """A case run with ops.cuda.<module>.<name> = value: a scratch budget cut so the work walks several
    chunks (prefill.PREFILL_SCRATCH: stacked GEMM row chunks; moe_prefill.MOE_SCRATCH: expert chunks)."""
    def run(case_name, ref, cu, rng):
        from importlib import import_module

        with setting(import_module(f".ops.cuda.{module}", __package__), name, value):
            return case(case_name, ref, cu, rng)
    return run


def gemm_case(qt, T: int, bias: bool, residual: bool, softcap: float = 0.0, precision: str = "split",
              n: int = 333, scratch: int | None = None, x_scale: float = 1.0, k: int | None = None) -> Case:
    """cu.matmul at T > 16 vs ref.matmul (+ softcap as ref.logits applies it). `scratch` shrinks
    PREFILL_SCRATCH so the weight is walked in several row chunks; x_scale pushes |x| past fp16's range
    (the per-row power-of-two scale must absorb it). With K >= 2048 the weight decodes on the q8 path
    (launch.default_path), so the prefill must see x rounded as quantize_x does: the reference is then
    matmul_q8_ref (fp64 product of the dequantized weight and the dequantized activation)."""
    def run(name, ref, cu, rng):
        from .ops.cuda import prefill
        from .ops.cuda.launch import default_path
        from .ops.cuda.q8 import matmul_q8_ref

        kk = k or _k_for(qt)
        ti = _weight(qt, n, kk, rng, name)
        x = (rng.standard_normal((T, kk)) * x_scale).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32) if bias else None
        r = rng.standard_normal((T, n)).astype(np.float32) if residual else None
        want = np.empty((T, n), np.float32)
        if default_path(qt.name, n, kk) == "q8":
            want = matmul_q8_ref(ti.dequantize(), x, b, r)
        else:
            ref.matmul(ref.load_weight(ti), x, out=want, bias=b, residual=None if r is None else r.copy())
        if softcap:
            want = (softcap * np.tanh(want.astype(np.float64) / softcap)).astype(np.float32)
        out = _dev(cu, r) if residual else cu.zeros((T, n))
        with setting(cu, "prefill_precision", precision), \
                setting(prefill, "PREFILL_SCRATCH", scratch or prefill.PREFILL_SCRATCH):
            cu.matmul(cu.load_weight(ti), _dev(cu, x), out=out, bias=None if b is None else _dev(cu, b),
                      residual=out if residual else None, softcap=softcap)  # residual aliases out
            got = cu.to_host(out)
            split = prefill.is_split(cu, default_path(qt.name, n, kk) == "q8")
        return compare(name, "matmul" if split else "gemm16", got, want)
    return run


def ffn_glu_case(qt, T: int, act: str, precision: str = "split") -> Case:
    """cu.ffn_glu at T > 16 (gate and up as one stacked GEMM, the input RMSNorm in x's conversion, the GLU
    in the epilogue: gemm_epilogue_glu) vs ref.ffn_glu (rmsnorm, two matmuls, glu)."""
    def run(name, ref, cu, rng):
        k, n = _k_for(qt), 300
        tg, tu = _weight(qt, n, k, rng, name + ".gate"), _weight(qt, n, k, rng, name + ".up")
        h = rng.standard_normal((T, k)).astype(np.float32)
        nw = (1 + 0.1 * rng.standard_normal(k)).astype(np.float32)
        want = np.empty((T, n), np.float32)
        ref.ffn_glu(h, nw, 1e-6, ref.load_weight(tg), ref.load_weight(tu), act, x=np.empty_like(h), g=want,
                    u=np.empty((T, n), np.float32))
        g = cu.zeros((T, n))
        with setting(cu, "prefill_precision", precision):
            cu.ffn_glu(_dev(cu, h), _dev(cu, nw), 1e-6, cu.load_weight(tg), cu.load_weight(tu), act,
                       x=cu.zeros((T, k)), g=g, u=cu.zeros((T, n)))
        return compare(name, "matmul" if precision == "split" else "gemm16", cu.to_host(g), want)
    return run


def moe_grouped_case(qt, down_qt, T: int, X: int, k: int, E: int, F: int, kg: int = 1) -> Case:
    """BW24_MOE_GROUPED (ops/cuda/moe_prefill.py grouped_ffn: moe_group, moe_mm) against ref.moe at the fp16 GEMM's
    tolerance. The router's own prefill product runs split (fp32-like), so a near-tied route cannot flip against
    the reference's: the case holds the experts' GEMMs, not the router's rounding. kg > 1 (BW24_MOE_MM_KG): that
    launch against the reference, then against the KG = 1 launch's output bit for bit (moe_mm.cu: every KG runs
    the same mma in the same order)."""
    def run(name, ref, cu, rng):
        from .ops.cuda import moe_prefill

        ts = moe_weights(f"{name}:", rng, X, E, F, qt, down_qt)
        x = rng.standard_normal((T, E)).astype(np.float32)
        r = rng.standard_normal((T, E)).astype(np.float32)
        want = np.empty((T, E), np.float32)
        ref.moe(x, *(ref.load_weight(t) for t in ts), n_used=k, norm_weights=True, act="silu", out=want,
                residual=r.copy())
        ws = [cu.load_weight(t) for t in ts]
        orig = cu.matmul

        def router_split(w, xx, **kw):  # the router's prefill product only (moe calls no other matmul)
            with setting(cu, "prefill_precision", "split"):
                orig(w, xx, **kw)
        launched = []
        kern = cu._k

        def grouped(stages: int):
            out = _dev(cu, r)
            with setting(cu, "prefill_precision", "fp16"), setting(cu, "moe_grouped", True), \
                    setting(cu, "moe_mm_kg", stages), setting(cu, "matmul", router_split), \
                    setting(cu, "_k", lambda f, n: (launched.append(n), kern(f, n))[1]):
                assert moe_prefill.grouped(cu, ws[1], ws[2], E, F)
                cu.moe(_dev(cu, x), *ws, n_used=k, norm_weights=True, act="silu", out=out, residual=out)
            return cu.to_host(out)
        got = grouped(kg)
        want_kg = [f"moe_mm<{ws[1].fmt},true,{moe_prefill.mm_kg(kg, E, True)}>",
                   f"moe_mm<{ws[3].fmt},false,{moe_prefill.mm_kg(kg, F, False)}>"]
        if "moe_group" not in launched or not set(want_kg) <= set(launched):
            return compare(name + " (moe_mm not launched)", "exact", np.array([0.0]), np.array([1.0]))
        res = compare(name, "gemm16", got, want)
        if kg == 1 or not res.ok:
            return res
        return compare(name + " == KG=1 bitwise", "exact", got, grouped(1))
    return run


def x_to_half_case(T: int, K: int, q8: bool, norm: bool, split: bool) -> Case:
    """prefill.to_half with the row read once into registers (cu.xh_regs, BW24_XH_REGS) gives the strided
    loops' bits: xh, xl (split) and the row scales, rows of K columns, with x rounded as q8 and / or
    RMS-normalized on the way. The outputs are poisoned with NaN before each run, so a value either path
    leaves unwritten fails (the planted_xh variant's canary)."""
    def run(name, ref, cu, rng):
        from .ops.cuda import prefill

        x = (rng.standard_normal((T, K)) * rng.uniform(0.1, 30.0, (T, 1))).astype(np.float32)
        nw = _dev(cu, rng.uniform(0.5, 1.5, K).astype(np.float32)) if norm else None
        got = {}
        for regs in (False, True):
            with setting(cu, "xh_regs", regs):
                for key, n, dt in (("gemm_xh", T * K, np.float16), ("gemm_xl", T * K, np.float16),
                                   ("gemm_sx", T, np.float32)):  # the buffers to_half takes, poisoned
                    cu._buf(key, n, dt).fill(np.nan)
                xh, xl, sx = prefill.to_half(cu, _dev(cu, x), split, q8=q8,
                                             norm=None if nw is None else (nw, 1e-6))
                got[regs] = np.concatenate([cu.to_host(xh).astype(np.float64).ravel(),
                                            cu.to_host(xl).astype(np.float64).ravel() if split else [],
                                            cu.to_host(sx).astype(np.float64).ravel()])
        return compare(name, "exact", got[True], got[False])
    return run


def dequant_staged_case(qt, n: int, k: int, split: bool, experts: bool) -> Case:
    """prefill.dequant with the stores staged through shared memory (cu.deq_staged, BW24_DEQ_STAGED) writes the
    plain stores' words: wh (and wl, split) of rows 3 .. n - 2 of an n x k weight (k = 544 / 768: 17 / 24
    groups a row, so warps straddle rows and the last warp is partial), or with `experts` the rows of ids
    3, 0, 2 of a 4-expert stack. The outputs are poisoned with NaN before each run and the plain run must
    leave none, so a piece the staged path leaves unwritten or misplaces fails (the planted_deqst canary)."""
    def run(name, ref, cu, rng):
        from .kernel_check import Result
        from .ops.cuda import prefill

        w = cu.load_weight(_weight(qt, n, k, rng, name))
        ids = _dev(cu, np.array([3, 0, 2], np.int32)) if experts else None
        rpe = n // 4 if experts else 0
        rows = 3 * rpe if experts else n - 4
        got = {}
        for staged in (False, True):
            with setting(cu, "deq_staged", staged):
                wh = cu._buf("deq_case_wh", rows * k, np.float16)
                wl = cu._buf("deq_case_wl", rows * k, np.float16) if split else None
                with cu.stream:  # (the kernel's stream: the poison lands before it runs)
                    for b in (wh, wl):
                        if b is not None:
                            b.fill(np.nan)
                prefill.dequant(cu, w, wh, wl, rows, row0=0 if experts else 3, experts=ids, rpe=rpe)
                got[staged] = np.concatenate([cu.to_host(wh).astype(np.float64),
                                              cu.to_host(wl).astype(np.float64) if split else np.empty(0)])
        if not np.isfinite(got[False]).all():  # the reference run itself left pieces unwritten
            return Result(name, "exact", float("inf"), float("inf"))
        return compare(name, "exact", got[True], got[False])
    return run


def overlap_case(qt, T: int, n: int, k: int, scratch: int, precision: str, glu: bool) -> Case:
    """A prefill GEMM (cu.matmul) or a gate/up pair with the GLU (cu.ffn_glu) walked in row chunks of `scratch`
    bytes, with the chunks' dequantization on the side stream a chunk ahead (cu.prefill_overlap,
    BW24_PREFILL_OVERLAP) == on the backend's stream, bit for bit. The output is poisoned with NaN before each
    run. The planted_overlap variant dequantizes a chunk into the slot its GEMM does not read (the canary)."""
    def run(name, ref, cu, rng):
        from .ops.cuda import prefill

        x = rng.standard_normal((T, k)).astype(np.float32)
        if glu:
            tg, tu = _weight(qt, n, k, rng, name + ".gate"), _weight(qt, n, k, rng, name + ".up")
            wg, wu, nw = cu.load_weight(tg), cu.load_weight(tu), _dev(cu, np.ones(k, np.float32))
        else:
            w = cu.load_weight(_weight(qt, n, k, rng, name))
        got = {}
        for ov in (False, True):
            out = cu.zeros((T, n))
            with cu.stream:
                out.fill(np.nan)
            with setting(cu, "prefill_precision", precision), setting(cu, "prefill_overlap", ov), \
                    setting(prefill, "PREFILL_SCRATCH", scratch):
                if glu:
                    cu.ffn_glu(_dev(cu, x), nw, 1e-6, wg, wu, "silu", x=cu.zeros((T, k)), g=out, u=cu.zeros((T, n)))
                else:
                    cu.matmul(w, _dev(cu, x), out=out)
                got[ov] = cu.to_host(out)
        return compare(name, "exact", got[True], got[False])
    return run


def cases() -> Iterator[tuple[str, Case]]:
    # the one-read conversion (K <= 4096; 5120, 8192, 12288: both take the loops) == the strided loops
    for T, K, q8, norm, split in ((40, 4096, True, True, False), (40, 4096, False, False, True),
                                  (17, 1024, False, True, True), (64, 5120, True, False, False),
                                  (33, 8192, True, True, True), (20, 2048, False, True, False),
                                  (40, 12288, True, False, True)):
        yield (f"x_to_half regs == loop T={T} K={K}{' q8' if q8 else ''}{' +norm' if norm else ''}"
               f"{' split' if split else ''}"), x_to_half_case(T, K, q8, norm, split)
    # the dequantization a chunk ahead on a side stream (BW24_PREFILL_OVERLAP) == in line, bit for bit
    for qt, T, n, k, scratch, prec, glu in ((Q.Q4_K, 40, 1001, 768, 64 << 10, "split", False),
                                            (Q.Q8_0, 40, 1001, 544, 64 << 10, "fp16", False),
                                            (Q.Q6_K, 100, 1001, 4096, 1 << 20, "fp16", False),
                                            (Q.Q4_0, 33, 300, 544, 64 << 10, "fp16", True),
                                            (Q.Q4_K, 40, 300, 768, 64 << 10, "split", True)):
        yield (f"prefill gemm overlap == serial {qt.name:<5} N={n} K={k} T={T} {prec} "
               f"{scratch >> 10} KiB chunks{' +glu' if glu else ''}"), overlap_case(qt, T, n, k, scratch, prec, glu)
    # the staged stores (BW24_DEQ_STAGED) == the plain ones, word for word
    for qt, split, experts in ((Q.Q4_K, False, False), (Q.Q6_K, True, False), (Q.Q8_0, False, False),
                               (Q.Q4_0, True, False), (Q.F16, False, False), (Q.Q5_K, False, True),
                               (Q.Q8_0, True, True)):
        yield (f"prefill dequant staged == plain {qt.name:<5} K={_k_for(qt)}{' split' if split else ''}"
               f"{' experts' if experts else ''}"), dequant_staged_case(qt, 84, _k_for(qt), split, experts)
    for qt in SUPPORTED:
        for T, bias, res, cap in ((17, False, False, 0.0), (100, True, True, 0.0), (513, True, False, 30.0)):
            yield (f"prefill gemm {qt.name:<5} N=333 K={_k_for(qt)} T={T}{' +bias' if bias else ''}"
                   f"{' +res' if res else ''}{f' softcap={cap:g}' if cap else ''}", gemm_case(qt, T, bias, res, cap))
    for qt in (Q.Q4_K, Q.Q6_K, Q.Q8_0, Q.Q4_0):
        yield f"prefill gemm fp16 {qt.name:<5} N=333 K={_k_for(qt)} T=100 +bias +res", \
            gemm_case(qt, 100, True, True, precision="fp16")
    yield "prefill gemm Q4_K N=1001 T=40 in 64 KiB chunks (split)", gemm_case(Q.Q4_K, 40, True, True, n=1001,
                                                                            scratch=64 << 10)
    yield "prefill gemm Q8_0 N=1001 T=40 in 64 KiB chunks (fp16)", gemm_case(Q.Q8_0, 40, False, True, n=1001,
                                                                            scratch=64 << 10, precision="fp16")
    yield "prefill gemm Q6_K N=333 T=33 |x|~3e5 (row scale)", gemm_case(Q.Q6_K, 33, False, True, x_scale=3e5)
    for qt, kk in ((Q.Q4_K, 2048), (Q.Q6_K, 4096), (Q.Q8_0, 2048)):  # q8-decoded weights: rounded x
        yield f"prefill gemm {qt.name:<5} N=333 K={kk} T=40 +bias +res (x as q8)", \
            gemm_case(qt, 40, True, True, k=kk)
        yield f"prefill gemm auto {qt.name:<5} N=333 K={kk} T=40 +res (x as q8, fp16)", \
            gemm_case(qt, 40, False, True, k=kk, precision="auto")
    yield "prefill gemm auto Q6_K N=1001 K=4096 T=40 in 1 MiB chunks (fp16)", \
        gemm_case(Q.Q6_K, 40, False, True, n=1001, k=4096, scratch=1 << 20, precision="auto")
    for D, G, T, p0, window, softcap in (
        (64, 3, 17, 0, None, None), (64, 7, 100, 37, None, None), (64, 1, 300, 0, None, None),
        (64, 5, 40, 1000, 257, None), (64, 3, 77, 64, 32, None),
        (128, 1, 17, 5, None, None), (128, 2, 129, 0, None, None), (128, 4, 300, 200, None, None),
        (128, 8, 64, 0, None, 30.0), (128, 6, 33, 500, 100, None), (128, 4, 200, 0, 50, None),
        (256, 4, 100, 0, None, 50.0), (256, 2, 37, 300, 128, None), (256, 4, 17, 3000, 512, 50.0),
    ):
        tag = f"prefill attention D={D} G={G} T={T} pos={p0}"
        tag += (f" window={window}" if window else "") + (f" softcap={softcap:g}" if softcap else "")
        yield tag, attention_case(D, G, T, p0, window, softcap)
    for D, G, T, p0, window, softcap in ((128, 4, 300, 200, None, None), (256, 4, 100, 0, None, 50.0),
                                         (64, 7, 77, 64, 32, None)):
        tag = f"prefill attention half-KV D={D} G={G} T={T} pos={p0}"
        tag += (f" window={window}" if window else "") + (f" softcap={softcap:g}" if softcap else "")
        yield tag, attention_case(D, G, T, p0, window, softcap, half=True)
    for D, G, T, p0, window, softcap, budget in (  # the opt-in GEMM prefill attention (BW24_ATTN_GEMM)
        (128, 4, 300, 200, None, None, 256 << 20), (128, 4, 300, 200, None, None, 1 << 20),
        (128, 8, 64, 0, None, 30.0, 256 << 20), (64, 7, 77, 64, 32, None, 1 << 18),
        (256, 4, 100, 0, None, 50.0, 1 << 20), (128, 1, 17, 5, None, None, 256 << 20),
    ):
        tag = f"prefill attention gemm D={D} G={G} T={T} pos={p0} scratch={budget >> 10} KiB"
        tag += (f" window={window}" if window else "") + (f" softcap={softcap:g}" if softcap else "")
        yield tag, attention_case(D, G, T, p0, window, softcap, gemm_budget=budget)
    for D, G, T, p0, window, softcap in (  # the tensor-core flash kernel (BW24_ATTN_MMA): rows not a multiple
        (128, 4, 300, 200, None, None), (128, 2, 129, 0, None, None),  # of the 64-row block, 64-key tiles
        (128, 8, 64, 0, None, 30.0), (128, 1, 17, 5, None, None),    # straddling causal and window edges
        (128, 6, 33, 500, 100, None), (128, 4, 700, 0, None, None), (64, 7, 77, 64, 32, None),
        (64, 3, 17, 0, None, None), (64, 5, 40, 1000, 257, None), (64, 3, 300, 4000, None, None),
    ):
        tag = f"prefill attention mma D={D} G={G} T={T} pos={p0}"
        tag += (f" window={window}" if window else "") + (f" softcap={softcap:g}" if softcap else "")
        yield tag, attention_case(D, G, T, p0, window, softcap, mma=True)
    for D, G, T, p0, window, softcap, kspan in (  # its keys in splits (BW24_ATTN_MMA_SPLIT): tiles within one
        (128, 4, 300, 200, None, None, 128), (128, 2, 129, 0, None, None, 64),  # split, tiles across two or
        (128, 8, 64, 0, None, 30.0, 64), (128, 6, 33, 500, 100, None, 64),     # more, windows starting inside
        (64, 7, 77, 64, 32, None, 64), (64, 3, 300, 4000, None, None, 1024),   # a split, a deep chunk
        (64, 5, 40, 1000, 257, None, 192), (128, 1, 17, 5, None, None, 64),
    ):
        tag = f"prefill attention mma split D={D} G={G} T={T} pos={p0} kspan={kspan}"
        tag += (f" window={window}" if window else "") + (f" softcap={softcap:g}" if softcap else "")
        yield tag, attention_case(D, G, T, p0, window, softcap, mma=True, kspan=kspan)
    for qt, T, act, prec in ((Q.Q4_K, 40, "silu", "split"), (Q.Q8_0, 100, "gelu_tanh", "split"),
                             (Q.Q6_K, 33, "silu", "fp16")):
        yield f"prefill ffn_glu {qt.name:<5} N=300 T={T} {act} ({prec}; GLU in the epilogue)", \
            ffn_glu_case(qt, T, act, prec)
    # prefill.glu_gemm in chunks: 256 scratch rows = 128 of gate and 128 of up at a time, out's columns in slices
    for qt, prec in ((Q.Q4_K, "split"), (Q.Q6_K, "fp16")):
        yield f"prefill ffn_glu {qt.name:<5} N=300 T=40 silu ({prec}; 128-row chunks of gate and up)", \
            budget_case(ffn_glu_case(qt, 40, "silu", prec), "prefill", "PREFILL_SCRATCH",
                        256 * 768 * 2 * (2 if prec == "split" else 1))
    # Q/K/V-style prefill (prefill.gemm_multi: one conversion of x, the weights stacked into one GEMM; row
    # chunks of 128 rows straddle the 301 / 77 / 45-row weights when the scratch is cut)
    for qts, T, bias, rows in (((Q.Q4_K, Q.Q4_K, Q.Q6_K), 40, True, None), ((Q.Q8_0, Q.Q8_0, Q.Q8_0), 100, False, 128),
                               ((Q.Q4_K, Q.Q6_K), 33, False, 128), ((Q.Q5_0, Q.Q4_1, Q.Q8_0), 17, True, 128)):
        yield f"prefill matmul_multi {'+'.join(q.name for q in qts)} T={T}{' +bias' if bias else ''}" \
              f"{f' {rows}-row chunks' if rows else ''}", matmul_multi_case(qts, T, bias) if rows is None else \
            budget_case(matmul_multi_case(qts, T, bias), "prefill", "PREFILL_SCRATCH", rows * 768 * 2 * 2)
    for qt, T, X, k, norm, res in ((Q.Q4_K, 40, 16, 4, True, True), (Q.Q8_0, 100, 128, 8, True, True),
                                   (Q.Q6_K, 17, 8, 2, False, False), (Q.Q4_0, 64, 60, 6, True, True),
                                   (Q.F32, 33, 12, 3, True, False)):
        yield f"prefill moe {qt.name:<5} T={T} X={X} k={k}{' norm' if norm else ''}{' +res' if res else ''}", \
            moe_case(qt, T, X, k, norm, res)
    # BW24_MOE_GROUPED: the grouped GEMMs on the device's routing; several row tiles an expert, column edges
    for qts, T, X, k, E, F in (((Q.Q4_K, Q.Q6_K), 40, 16, 4, 256, 256), ((Q.Q8_0, Q.Q4_0), 100, 128, 8, 544, 160),
                               ((Q.Q4_K, Q.Q4_K), 300, 8, 2, 256, 768), ((Q.F16, Q.F16), 20, 4, 2, 64, 96)):
        yield f"moe grouped {qts[0].name}/{qts[0].name}/{qts[1].name} T={T} X={X} k={k} E={E} F={F} +res", \
            moe_grouped_case(qts[0], qts[1], T, X, k, E, F)
    # BW24_MOE_MM_KG: 2 groups a stage for gate/up (E = 512: 16 groups), 4 for down (F = 768: the 30B-A3B's 24)
    for qts, kg in (((Q.Q4_K, Q.Q6_K), 2), ((Q.Q4_K, Q.Q4_K), 4)):
        yield f"moe grouped {qts[0].name}/{qts[0].name}/{qts[1].name} T=96 X=16 k=4 E=512 F=768 +res KG={kg}", \
            moe_grouped_case(qts[0], qts[1], 96, 16, 4, 512, 768, kg)
    # 3 experts of the K-quant test shapes (256 x 256, split halves) a chunk: many chunks of unequal padding
    yield "prefill moe Q4_K  T=64 X=32 k=4 norm +res, 3 experts a chunk", \
        budget_case(moe_case(Q.Q4_K, 64, 32, 4, True, True), "moe_prefill", "MOE_SCRATCH", 3 * 256 * 256 * 2 * 2)
