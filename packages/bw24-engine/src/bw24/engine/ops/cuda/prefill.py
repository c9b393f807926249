"""Prefill (T > 16 tokens) paths of CudaOps: fp16 cuBLAS GEMM over dequantized weight chunks
(kernels/prefill_gemm.cu) and flash-style causal attention (kernels/attention_prefill.cu).

GEMM precision (CudaOps.prefill_precision, from BW24_PREFILL; numbers: benchmarks/emulate_fp16_prefill.py):
- "auto": "fp16" for a weight whose decode matvec runs on int8 activations (below), else
  "split". Prefill then has the precision class of decode weight by weight: int8 activations carry a
  relative error of ~0.5% per 32-group (RMS), 10x fp16's, so a third of the tensor-core work buys
  nothing the decode keeps. Whether both paths stay within the int8 class is the gate's q8 check
  (engine.verify_prefill). The default until a6dcfe3.
- "split": x = sx (xh + xl), W = wh + 2^-11 wl with fp16 halves; y = wh.xh + wh.xl +
  2^-11 wl.xh in three fp16 tensor-core GEMMs with fp32 accumulation. Relative error ~2^-21 per
  product, like fp32, so the run-gen gate keeps its 1e-2 logit tolerance.
- "fp16" (default since a6dcfe3's H200 run: the 0.6B's pp512 34.9k vs 28.7k tok/s, the gate MATCH): y = wh.xh
  only (3x fewer FLOPs). fp16 keeps 11 significant bits; a dequantized weight is
  (d*sc)*q - dmin*m (Q4_K/Q5_K), d*sc*q (Q6_K), d*q (Q8_0/Q4_0/Q5_0), d*q + m (Q4_1) with d an fp16
  and sc/m 6-bit (or int8) scales: the products need up to ~21 bits, so wh is rounded (relative error
  <= 2^-11 = 4.9e-4 per weight; only F16 weights are exact), and x likewise. Measured (CPU-emulated):
  rel 2-3e-4 per GEMM on random weights of every quant type; last-position logits vs decode up to
  3.7e-2 on smollm2-135m, above the gate's 1e-2 (split: 5e-5, as fp32's 4e-5). So the gate's exact half
  runs split (CudaOps.exact_activations) and holds fp16 prefill to its rounded half (NMSE class), as it
  holds int8 activations and a float16 KV cache; llama.cpp's prefill is fp16 / int8 throughout.
Activations: for a weight whose decode matvec runs on int8 activations (launch.default_path: K >= 2048
or a vocabulary head), x is first rounded exactly as quantize_x does (x_to_half's q8 mode), so prefill and
decode of that weight see the same int8 grid (their inputs still differ in the last bits, hence the
gate's int8 half: engine.verify_prefill).
Scratch: PREFILL_SCRATCH bytes of fp16 weight halves per chunk, T*N fp32 result, T*K*2*2 x halves.
Nothing here is graph-captured (prefill runs eagerly; CuPy cannot capture cuBLAS).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ...errors import UnsupportedModelError
from .weights import NULL

PREFILL_SCRATCH = 64 << 20  # bytes of dequantized fp16 weight (hi, and lo when split) per GEMM chunk
PRECISIONS = ("auto", "split", "fp16")
ROW_ALIGN = 128  # weight rows per chunk in multiples of this: a chunk's output columns (y + 4*r0, ldc)
# stay 16-byte aligned with whole-tile widths; a 1365-row chunk of a K=12288 down projection made
# cuBLAS fall back to an sm75 align1 kernel (60 of the 8B's 133 ms pp512 kernel time, H200 profile).
DEQ_BLOCK = 128  # dequant_rows_h's block: prefill_gemm.cu's DEQ_BLOCK, the threads its shared stage holds
ATTN_RW = 8  # query rows per warp of attn_prefill (block = 4 warps = 32 rows)
_ONE, _ZERO, _LO = (np.array([v], np.float32) for v in (1.0, 0.0, 2.0**-11))  # host alpha/beta (kept alive)


def gemm_rows(K: int, split: bool) -> int:
    """Weight rows per chunk: PREFILL_SCRATCH bytes of fp16 halves (x2 when split), a multiple of
    ROW_ALIGN when at least that many fit."""
    rows = max(1, PREFILL_SCRATCH // (2 * K * (2 if split else 1)))
    return rows // ROW_ALIGN * ROW_ALIGN if rows >= ROW_ALIGN else rows


def check_precision(ops) -> str:
    if ops.prefill_precision not in PRECISIONS:
        raise ValueError(f"prefill_precision {ops.prefill_precision!r} not in {PRECISIONS}")
    return ops.prefill_precision


def is_split(ops, q8: bool) -> bool:
    """Split (fp32-like) products for this weight? "auto": only where decode keeps fp32 activations."""
    p = check_precision(ops)
    return p == "split" or (p == "auto" and not q8)


OP_N, OP_T = 0, 1  # cublasOperation_t (no cuBLAS import needed to plan the calls)


def gemm_ex(ops, op_a: int, op_b: int, m: int, n: int, k: int, a: int, lda: int, sa: int, b: int, ldb: int, sb: int,
            c: int, ldc: int, sc: int, batch: int, alpha, beta) -> None:
    """Column-major C[m, n] = alpha op(A) op(B) + beta C: float16 A / B, float32 C and compute, on the
    backend's stream; `batch` such triples at element strides sa / sb / sc (one: cublasGemmEx). With prefill
    graphs on, through ctypes (cublas_direct: CuPy's wrappers refuse a capturing stream)."""
    from cupy.cuda import device
    from cupy_backends.cuda.api import runtime
    from cupy_backends.cuda.libs import cublas

    f16, f32 = runtime.CUDA_R_16F, runtime.CUDA_R_32F
    if getattr(ops, "prefill_graphs", False):
        from . import cublas_direct

        cublas_direct.gemm(ops, op_a, op_b, m, n, k, a, lda, sa, b, ldb, sb, c, ldc, sc, batch, alpha, beta,
                           f16, f32, cublas.CUBLAS_COMPUTE_32F, cublas.CUBLAS_GEMM_DEFAULT)
        return
    h = device.get_cublas_handle()
    with ops.stream:  # cupy_backends' cuBLAS wrappers bind the handle to the *current* stream
        cublas.setStream(h, ops.stream.ptr)
        cublas.setPointerMode(h, cublas.CUBLAS_POINTER_MODE_HOST)  # alpha/beta are host floats
        if batch == 1:
            cublas.gemmEx(h, op_a, op_b, m, n, k, alpha.ctypes.data, a, f16, lda, b, f16, ldb, beta.ctypes.data, c,
                          f32, ldc, cublas.CUBLAS_COMPUTE_32F, cublas.CUBLAS_GEMM_DEFAULT)
        else:
            cublas.gemmStridedBatchedEx(h, op_a, op_b, m, n, k, alpha.ctypes.data, a, f16, lda, sa, b, f16, ldb, sb,
                                        beta.ctypes.data, c, f32, ldc, sc, batch, cublas.CUBLAS_COMPUTE_32F,
                                        cublas.CUBLAS_GEMM_DEFAULT)


def _cublas_gemm(ops, w16, x16, y, r: int, T: int, K: int, ldc: int, alpha, beta, batch: int = 1,
                 stride_w: int = 0, stride_x: int = 0, stride_y: int = 0) -> None:
    """y[T, r] (row stride ldc) (+)= alpha * x16[T, K] @ w16[r, K]^T: fp16 inputs, fp32 compute/output;
    `batch` such products at element strides stride_w / stride_x / stride_y (MoE experts).
    Column-major view: C[r, T] = op(A) B with A = w16 as [K, r] transposed, B = x16 as [K, T]."""
    gemm_ex(ops, OP_T, OP_N, r, T, K, _ptr(w16), K, stride_w, _ptr(x16), K, stride_x, y, ldc, stride_y, batch,
            alpha, beta)


def _ptr(a) -> int:
    return a if isinstance(a, int) else a.data.ptr


def to_half(ops, x, split: bool, q8: bool = False, norm=None):
    """x [T, K] fp32 -> (xh, xl or None, sx): fp16 halves of x / sx and the row scales sx = 2^e; q8: x first
    rounded per 32-column group as quantize_x rounds it; norm = (weight, eps): x is h, RMS-normalized first
    (one launch either way: x_to_half's modes)."""
    T, K = x.shape
    xh, sx = ops._buf("gemm_xh", T * K, np.float16), ops._buf("gemm_sx", T)
    xl = ops._buf("gemm_xl", T * K, np.float16) if split else None
    nw, eps = norm if norm is not None else (NULL, 0.0)
    ops._launch(ops._k("prefill_gemm.cu", "x_to_half"), (T,), min(1024, 32 * math.ceil(K / 128)),
                (x, np.int32(K), xh, xl if split else NULL, sx, np.int32(q8), nw, np.float32(eps),
                 np.int32(ops.xh_regs)))
    return xh, xl, sx


def products(ops, wh, wl, xh, xl, yp: int, r: int, T: int, K: int, ldc: int, **batched) -> None:
    """y = wh.xh (fp16) or wl.xh 2^-11 + wh.xl + wh.xh (split: small terms first) into y at yp."""
    if wl is None:
        _cublas_gemm(ops, wh, xh, yp, r, T, K, ldc, _ONE, _ZERO, **batched)
        return
    _cublas_gemm(ops, wl, xh, yp, r, T, K, ldc, _LO, _ZERO, **batched)
    _cublas_gemm(ops, wh, xl, yp, r, T, K, ldc, _ONE, _ONE, **batched)
    _cublas_gemm(ops, wh, xh, yp, r, T, K, ldc, _ONE, _ONE, **batched)


def _epilogue_grid(n: int) -> tuple[int]:
    return (max(1, min(math.ceil(n / 256), 8192)),)  # 256 threads a block, grid-stride past 8192 blocks


def glu_epilogue(ops, y, sx, out, F: int, T: int, act: str, ldo: int | None = None) -> None:
    """out [T, F] = act(gate) * up, gate and up the scaled columns [0, F) and [F, 2F) of y [T, 2F]; out's rows
    ldo apart (F unless out is a column slice of a wider output: glu_gemm's chunks)."""
    from ..base import ACTIVATIONS

    ops._launch(ops._k("prefill_gemm.cu", "gemm_epilogue_glu"), _epilogue_grid(T * F), 256,
                (y, sx, np.int32(F), np.int64(T * F), np.int32(ACTIVATIONS.index(act)), out, np.int32(ldo or F)))


def epilogue(ops, y, sx, out, N: int, n: int, bias=None, residual=None, softcap=0.0, ldy: int | None = None) -> None:
    """out = softcap?(y * sx[row] + bias + residual) over n elements of rows of N; y's rows ldy apart (N
    unless y holds several weights' columns: gemm_multi)."""
    ops._launch(ops._k("prefill_gemm.cu", "gemm_epilogue"), _epilogue_grid(n), 256,
                (y, sx, NULL if bias is None else bias, NULL if residual is None else residual, out,
                 np.int32(N), np.int32(ldy or N), np.int64(n), np.float32(softcap or 0.0)))


def dequant(ops, w, wh, wl, rows: int, *, row0: int = 0, experts=None, rpe: int = 0, stream=None) -> None:
    """rows rows of w (from row0, or the rpe rows of each id in `experts`) -> fp16 wh (+ wl); a thread a
    32-column group in blocks of DEQ_BLOCK (the kernel's stage is sized for it), the stores staged through
    shared memory with ops.deq_staged (BW24_DEQ_STAGED); on `stream` (the overlap's side stream) if given."""
    ops._launch(ops._k("prefill_gemm.cu", f"dequant_rows_h<{w.fmt}>"), (math.ceil(rows * (w.k // 32) / DEQ_BLOCK),),
                DEQ_BLOCK, (*w.args(), np.int64(row0), NULL if experts is None else experts, np.int32(rpe),
                            np.int32(rows), np.int32(w.k), wh, NULL if wl is None else wl,
                            np.int32(getattr(ops, "deq_staged", False))), **({} if stream is None else {"stream": stream}))


def chunk_slots(ops, halves: int, split: bool):
    """Where a GEMM call's row chunks are dequantized: [(wh, wl)] (one scratch, on the backend's stream) and no
    overlap; or with ops.prefill_overlap (BW24_PREFILL_OVERLAP) the overlap.SLOTS slots of its own scratch (never
    shared with the MoE prefill's) and the Overlap that hands them out. A slot is sized for PREFILL_SCRATCH's chunk
    (its halves: PREFILL_SCRATCH / 2 bytes each of wh and wl when split) so it seldom grows. A grown slot's old array
    is safe while the side stream may still write it: _buf grows outside a capture only, and hands the old array
    back through _release_pool, whose cudaFree waits for the whole device (the side stream too)."""
    from .overlap import SLOTS

    f16 = np.float16
    if not getattr(ops, "prefill_overlap", False):
        return [(ops._buf("gemm_wh", halves, f16), ops._buf("gemm_wl", halves, f16) if split else None)], None
    n = max(halves, PREFILL_SCRATCH // (4 if split else 2))  # gemm_rows' chunk at most
    return [(ops._buf(f"gemm_wh_o{i}", n, f16), ops._buf(f"gemm_wl_o{i}", n, f16) if split else None)
            for i in range(SLOTS)], ops.overlap()


def chunk(ops, slots, ov, dequants, gemm) -> None:
    """One row chunk: dequants(wh, wl, stream) fills a slot, gemm(wh, wl) multiplies it; with the overlap the first
    on the side stream once the slot is free, the second after it on the backend's stream (overlap.py). The
    planted_overlap variant (kernel-check's canary) dequantizes into the other slot than the GEMM reads."""
    if ov is None:
        dequants(*slots[0], None)
        gemm(*slots[0])
        return
    s = ov.take(ops)
    dequants(*slots[(s + 1) % len(slots) if ops.variant == "planted_overlap" else s], ov.side)
    ov.hand_over(ops)
    gemm(*slots[s])
    ov.release(ops, s)


def x_class(ops, w, n: int | None = None) -> tuple[bool, bool]:
    """(q8, split): how a prefill GEMM of weight w reads x (rounded to the int8 grid first: this weight
    decodes on int8 activations, so prefill sees the same values; fp16 halves hi + lo?); weights of one
    class read the same to_half conversion of x."""
    q8 = n is None and ops.qmv_configs.plan(w.qtype, w.n, w.k)[0] == "q8"
    return q8, is_split(ops, q8)


def gemm(ops, w, x, out, bias, residual, softcap, *, row0: int = 0, n: int | None = None) -> None:
    """out[T, N] = softcap?(x @ W^T + bias + residual) for T > 16 (residual may alias out); with
    row0 / n, W is rows [row0, row0 + n) of w (one expert of a stacked [X*N, K] weight)."""
    q8, split = x_class(ops, w, n)
    stacked_gemm(ops, [(w, row0, w.n if n is None else n, out, bias, residual, softcap)], x.shape[0],
                 to_half(ops, x, split, q8), split)


def gemm_multi(ops, ws, x, outs, biases, norm=None, glu: str | None = None) -> bool:
    """Q/K/V or gate/up of one x [T, K] (T > 16). Per class (x_class) of the weights, x is rounded and split
    once, and the class's weights run as one stacked weight (stacked_gemm): one set of GEMM products per
    row chunk instead of one per weight. Prefill is host-bound on small models (the 0.6B's pp512: 27 ms
    of wall time for 14.8 ms of kernels at 0d45897): Q/K/V in split precision were 3 conversions and 9
    GEMM calls, now 1 and 3. norm = (weight, eps): x is the residual stream, normalized by the conversion.
    glu = act, ws = (gate, up) of one class and shape, no biases: outs[0] receives act(gate) * up from the
    epilogue itself (outs[1] is left unwritten) and the call returns True; else False, the caller's glu."""
    groups: dict[tuple[bool, bool], list] = {}
    for w, o, b in zip(ws, outs, biases, strict=True):
        assert w.k == x.shape[1], f"gemm_multi: W {w.shape} for x {x.shape}"
        groups.setdefault(x_class(ops, w), []).append((w, 0, w.n, o, b, None, 0.0))
    fuse = glu is not None and len(groups) == 1 and len(ws) == 2 and ws[0].n == ws[1].n and not any(
        b is not None for b in biases)
    for (q8, split), parts in groups.items():
        # shared scratch: the class's GEMMs are queued before the next class converts x
        stacked_gemm(ops, parts, x.shape[0], to_half(ops, x, split, q8, norm), split, glu=glu if fuse else None)
    return fuse


def stacked_gemm(ops, parts, T: int, xs, split: bool, glu: str | None = None) -> None:
    """parts: (w, row0, n, out, bias, residual, softcap), rows [row0, row0 + n) of weights of one K, run as
    one weight of Ns = sum(n) rows against x converted (xs = (xh, xl, sx)): each row chunk (gemm_rows) is
    dequantized piece by piece from the parts it spans, one set of products writes its columns of
    y [T, Ns], then one epilogue launch reads them into the parts' outs (ldy = Ns): gemm_epilogue_parts
    for up to three parts with at most a bias (Q/K/V), gemm_epilogue per part otherwise. glu = act (parts are
    gate and up of one shape): glu_gemm, act(gate) * up into the first part's out, in chunks of rows of each."""
    if glu is not None:
        glu_gemm(ops, parts, T, xs, split, glu)
        return
    xh, xl, sx = xs
    K = parts[0][0].k
    starts = list(itertools.accumulate((p[2] for p in parts), initial=0))  # (host-bound: no numpy for 3 ints)
    Ns = starts[-1]
    rows = min(Ns, gemm_rows(K, split))
    slots, ov = chunk_slots(ops, rows * K, split)
    y = ops._buf("gemm_y", T * Ns)
    with ops.stream:
        for r0 in range(0, Ns, rows):
            r = min(rows, Ns - r0)

            def dequants(wh, wl, stream, r0=r0, r=r):
                for (w, row0, n, *_), n0 in zip(parts, starts, strict=False):
                    a, b = max(r0, n0), min(r0 + r, n0 + n)  # this part's rows inside the chunk
                    if a < b:
                        off = 2 * (a - r0) * K  # bytes into the chunk buffers
                        dequant(ops, w, np.uintp(wh.data.ptr + off),
                                None if wl is None else np.uintp(wl.data.ptr + off), b - a, row0=row0 + a - n0,
                                stream=stream)

            chunk(ops, slots, ov, dequants,  # columns r0.. of [T, Ns]
                  lambda wh, wl, r0=r0, r=r: products(ops, wh, wl, xh, xl, y.data.ptr + 4 * r0, r, T, K, Ns))
    if 1 < len(parts) <= 3 and all(res is None and not sc for *_, res, sc in parts):
        args = []
        for _, _, n, out, bias, *_ in parts + [(None, 0, 0, NULL, None, None, 0.0)] * (3 - len(parts)):
            args += [out, NULL if bias is None else bias, np.int32(n)]
        ops._launch(ops._k("prefill_gemm.cu", "gemm_epilogue_parts"), _epilogue_grid(T * Ns), 256,
                    (y, sx, np.int32(Ns), np.int64(T * Ns), *args))
        return
    for (_, _, n, out, bias, residual, softcap), n0 in zip(parts, starts, strict=False):
        epilogue(ops, y[n0:], sx, out, n, T * n, bias, residual, softcap, ldy=Ns)


def glu_gemm(ops, parts, T: int, xs, split: bool, act: str) -> None:
    """stacked_gemm's gate/up with the GLU in the epilogue (parts: gate, up of one shape [F, K]), in chunks
    of h rows of each: a chunk's gate rows, then the same rows of up, are dequantized side by side, one set
    of products writes y [T, 2h] and gemm_epilogue_glu writes act(gate) * up into columns [a, a + h) of the
    gate's out. So y holds 2h columns instead of 2F: at 2048-token chunks the 8B's [T, 2F] y was 201 MB, the
    largest piece of its peak VRAM (6.42 GiB against llama.cpp's 5.80 at 370d098, the bound 6.38); in
    chunks of h = 4096 rows (the scratch's 8192) it is 67 MB. The up's out is left unwritten."""
    assert len(parts) == 2, "gemm_epilogue_glu: gate and up"
    (wg, g0, F, out, *_), (wu, u0, Fu, *_) = parts
    assert Fu == F and wu.k == wg.k, "gemm_epilogue_glu: gate and up of one shape"
    xh, xl, sx = xs
    K = wg.k
    half = gemm_rows(K, split) // 2  # rows of each a chunk, as gemm_rows a multiple of ROW_ALIGN where it can be
    h = max(1, min(F, half // ROW_ALIGN * ROW_ALIGN if half >= ROW_ALIGN else half))
    slots, ov = chunk_slots(ops, 2 * h * K, split)
    y = ops._buf("gemm_y", T * 2 * h)
    with ops.stream:
        for a in range(0, F, h):
            n = min(h, F - a)

            def dequants(wh, wl, stream, a=a, n=n):
                for w, r0, off in ((wg, g0, 0), (wu, u0, 2 * n * K)):  # gate rows, then up's, side by side
                    dequant(ops, w, np.uintp(wh.data.ptr + off), None if wl is None else np.uintp(wl.data.ptr + off),
                            n, row0=r0 + a, stream=stream)

            def gemm(wh, wl, a=a, n=n):
                products(ops, wh, wl, xh, xl, y.data.ptr, 2 * n, T, K, 2 * n)  # y [T, 2n]: gate | up
                glu_epilogue(ops, y, sx, out[:, a:a + n], n, T, act, ldo=F)

            chunk(ops, slots, ov, dequants, gemm)


def attention(ops, q, k_cache, v_cache, pos, *, scale, softcap, window, out) -> None:
    """Causal flash attention of T > 16 queries at positions pos[0] .. pos[0] + T - 1."""
    T, H, D = q.shape
    Hkv, S, Dv = v_cache.shape
    G = H // Hkv
    assert H % Hkv == 0 and k_cache.shape == (Hkv, S, D) and out.shape == (T, H, Dv)
    assert q.flags.c_contiguous and out.flags.c_contiguous and q.dtype == np.float32
    if D % 32 or Dv % 32 or D > 256 or Dv > 256 or G > 8:
        raise UnsupportedModelError(f"cuda prefill attention: head dims {D}/{Dv} with {G} q heads per kv head")
    rw = attn_rows_per_warp(D)
    from .kernels import kv_arg  # (kernels imports this module: attn_instances)

    fn = ops._k("attention_prefill.cu", f"attn_prefill<{D},{Dv},{G},{rw}{kv_arg(k_cache, v_cache)}>")
    ops._launch(fn, (math.ceil(T * G / (4 * rw)), Hkv), 128,
                (q, k_cache, v_cache, pos, np.int32(T), np.int32(H), np.int32(S), np.float32(scale),
                 np.float32(softcap or 0.0), np.int32(int(window or 0)), out))


def attn_rows_per_warp(D: int) -> int:
    """RW of attn_prefill: the block's q tile (4 * RW rows of D floats) stays within 32 KB of smem."""
    return min(ATTN_RW, 2048 // D)


def attn_instances(shapes, half: bool = False) -> tuple[str, ...]:
    """Template names of attn_prefill for (D, Dv, G) shapes (the compile set and the dispatch agree);
    half: for a float16 KV cache."""
    kt = ",__half" if half else ""
    return tuple(f"attn_prefill<{d},{dv},{g},{attn_rows_per_warp(d)}{kt}>" for d, dv, g in shapes)
