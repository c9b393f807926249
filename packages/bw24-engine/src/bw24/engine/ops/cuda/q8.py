"""Launchers of the int8-activation matvec family (kernels/qmatvec_q8.cu) and its NumPy twins.

CudaOps.matmul / matmul_multi call these when the launch config's path is "q8" (ops/cuda/launch.py).
The quantized activation lives in scratch from ops._buf, sized for QMV_NT[-1] tokens at the first
(eager) call of each K, so a captured graph and a later verify launch see the same addresses.

`quantize_x_ref` is the bit-exact NumPy twin of the quantize_x kernel (IEEE fp32 division, round
half to even); `matmul_q8_ref` is the reference the q8 kernels are checked against: the plain
fp64 product of the dequantized weight with the dequantized activation.
Shape legend: T tokens, K columns, G = K/32 groups, N rows.
"""

from __future__ import annotations

import math

import numpy as np

from .kernels import QMV_NT
from .launch import Q8_MIN_K
from .weights import NULL

QX_WARPS = 8  # groups per quantize_x block (one warp each)


def quantize_x_ref(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x [T, K] fp32 -> (xq int8 [T, K], d fp32 [T, G], sums int32 [T, G, 2] over columns 0-15, 16-31)."""
    x = np.ascontiguousarray(x, np.float32)
    T, K = x.shape
    g = x.reshape(T, K // 32, 32)
    d = (np.abs(g).max(axis=-1) / np.float32(127)).astype(np.float32)  # fp32 / fp32: correctly rounded
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d[..., None] > 0, np.rint(g / d[..., None]), np.float32(0)).astype(np.int32)
    s = q.reshape(T, K // 32, 2, 16).sum(axis=-1)
    return q.astype(np.int8).reshape(T, K), d, s.astype(np.int32)


def dequantize_x_ref(x: np.ndarray) -> np.ndarray:
    """The activation as the q8 kernels see it: d * xq, float64 [T, K]."""
    xq, d, _ = quantize_x_ref(x)
    T, K = xq.shape
    return (xq.reshape(T, K // 32, 32).astype(np.float64) * d[..., None].astype(np.float64)).reshape(T, K)


def unpack_xs(xs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Device metadata int32 [T, G, 2] (d bits, s0 | s1 << 16) -> (d fp32 [T, G], sums int32 [T, G, 2])."""
    xs = np.asarray(xs, np.int32)
    d = xs[..., 0].copy().view(np.float32)
    p = xs[..., 1]
    s0 = (p & 0xFFFF).astype(np.uint16).view(np.int16).astype(np.int32)
    return d, np.stack([s0, p >> 16], axis=-1)


def matmul_q8_ref(wdense: np.ndarray, x: np.ndarray, bias=None, residual=None, softcap: float = 0.0) -> np.ndarray:
    """out [T, N] = softcap?(dequant(quantize(x)) @ W^T + bias + residual), in float64 then fp32."""
    y = dequantize_x_ref(x) @ np.asarray(wdense, np.float64).T
    if bias is not None:
        y = y + bias
    if residual is not None:
        y = y + residual
    if softcap:
        y = softcap * np.tanh(y / softcap)
    return y.astype(np.float32)


def moe_q8_ref(x, router, gate, up, down, *, n_used: int, norm_weights: bool, act: str, residual=None, h=None):
    """The experts on the int8 path (moe.cu moe_gu8 / moe_down8) from dense float weights (router [X, E],
    gate / up [X, F, E], down [X, E, F]): routed as ref.moe, then per slot j of token t
    g_j = act(gate_e . dq(x_t)) * (up_e . dq(x_t)) (float64 dots, stored as float32), and
    out_t = residual_t + sum_j w_j * (down_e . dq(h_j)) in j order, float32 products and adds, where dq is
    dequantize_x_ref and h = g, or a given h (a kernel's own g, held to this g on its own: a g one ulp off
    may land across a rounding boundary of its quantization). Returns (g [T * n_used, F], out [T, E])."""
    from ..ref import _act, _mm, route

    x = np.asarray(x, np.float32)
    T, F = x.shape[0], gate.shape[1]
    xd = dequantize_x_ref(x)
    routes = route(_mm(router, x), n_used, norm_weights)
    g = np.empty((T * n_used, F), np.float32)
    for t, (sel, _) in enumerate(routes):
        for j, e in enumerate(sel):
            a, b = gate[e].astype(np.float64) @ xd[t], up[e].astype(np.float64) @ xd[t]
            g[t * n_used + j] = (_act(a.astype(np.float32)[None], act)[0] * b.astype(np.float32)).astype(np.float32)
    hd = dequantize_x_ref(g if h is None else h)
    y = np.zeros((T, down.shape[1]), np.float32) if residual is None else np.array(residual, np.float32)
    for t, (sel, wts) in enumerate(routes):
        for j, (e, w) in enumerate(zip(sel, wts, strict=True)):
            d = (down[e].astype(np.float64) @ hd[t * n_used + j]).astype(np.float32)
            y[t] = (y[t] + (np.float32(w) * d).astype(np.float32)).astype(np.float32)
    return g, y


QMV8_NT_EXACT = 8  # kernels/qmatvec_q8.cu: T up to this launches with NT == T (no per-token guard)
QMV8_LOADS = (0, 1, 2, 4, 8, 16)  # BW24_QMV8_LOADS's values (kernels/qmatvec_q8.cu QMV8_DECODE_LOADS; 0: off)


def q8_nt(T: int) -> int:
    """The NT template argument of a T-token q8 matvec: T itself up to 8 (a verify of K <= 7 drafts),
    then the 16-token bucket."""
    return T if T <= QMV8_NT_EXACT else QMV_NT[-1]


def verify_rows(T: int) -> int:
    """Rows per block of a T-token (T > 1) q8 matvec: each token's activation load is shared by R rows,
    their codes unpacked once (qmatvec_q8.cu). Does not change a row's bits (the summation order
    depends on W and K only). R = 4 up to 8 tokens, 2 in the 16 bucket (R * NT <= 32 accumulators).
    H200 sweep at 92c96ac (evidence/verify_sweep_h200_92c96ac.log), the 8B's shapes, T = 2..9: the
    fastest choice at every Q4_K shape for T >= 3 and within 6% (T = 2: within 12%); R = 1, the earlier
    choice, was 1.15-1.9x slower there. The Q6_K down projection (decode W = 1) is noisier: up to 1.5x
    off its best at T = 2, 3, 5, where R = 1 or unroll 2 won."""
    return 4 if T <= QMV8_NT_EXACT else 2


def buffers(ops, T: int, K: int):
    """The q8 scratch for x [T, K]: (xq, xs) device views ([T*K] int8, [T*G*2] int32)."""
    G = K // 32
    cap = max(T, QMV_NT[-1])
    return ops._buf("q8_x", cap * K, np.int8)[: T * K], ops._buf("q8_s", cap * G * 2, np.int32)[: T * G * 2]


def fusable(x) -> bool:
    """Can a producer of x [T, K] (decode / verify rows) write x's quantization itself?"""
    T, K = x.reshape(-1, x.shape[-1]).shape
    return T <= QMV_NT[-1] and K % 32 == 0 and x.flags.c_contiguous


def feeds_q8(ops, rows) -> bool:
    """Should a producer of rows [T, K] leave their int8 quantization? When their consumer runs on the
    q8 path (K >= the backend's min_k, Q8_MIN_K or a draft's DRAFT_Q8_MIN_K: launch.default_path's rule for
    the matvecs after a norm, the attention or an output projection) and the producer can write it
    (fusable). One rule for rmsnorm and attention."""
    return rows.shape[-1] >= getattr(getattr(ops, "qmv_configs", None), "min_k", Q8_MIN_K) and fusable(rows)


def mark_ready(ops, x) -> None:
    """x's quantization is now in the q8 scratch. Valid for the next launch only: CudaOps clears the
    mark on every launch, allocation and host copy, so a stale mark cannot outlive a write to x."""
    T, K = x.reshape(-1, x.shape[-1]).shape
    ops._q8_ready = (x.data.ptr, T, K)


def quantize(ops, x):
    """x [T, K] -> (xq, xs) in the q8 scratch: one quantize_x launch, none when the launch just before
    was a fused producer of these very rows (rmsnorm_reg with xq, glu_q8: CudaOps._q8_ready), or where
    qmv8_glu left them in its own scratch (matmul_glu's mark: glu_buffers)."""
    T, K = x.shape
    if ops._q8_ready == ("glu", x.data.ptr, T, K):
        return glu_buffers(ops, T, K)
    xq, xs = buffers(ops, T, K)
    if ops._q8_ready != (x.data.ptr, T, K):
        ops._launch(ops._k("qmatvec_q8.cu", "quantize_x"), (math.ceil(T * (K // 32) / QX_WARPS),), 32 * QX_WARPS,
                    (x, np.int32(T), np.int32(K), xq, xs))
    return xq, xs


def round_x(ops, x, out=None):
    """x [T, K] as the q8 kernels see it, dx * xq, into out (x itself if None: in place) with one round_x_q8
    launch: the gate's emulation of int8 activations on its exact kernels (CudaOps.emulate_rounding)."""
    rows = x.reshape(-1, x.shape[-1])
    T, K = rows.shape
    assert K % 32 == 0 and x.flags.c_contiguous and x.dtype == np.float32, f"round_x: x {x.shape} {x.dtype}"
    y = x if out is None else out
    assert y.shape == x.shape and y.flags.c_contiguous
    ops._launch(ops._k("qmatvec_q8.cu", "round_x_q8"), (math.ceil(T * (K // 32) / QX_WARPS),), 32 * QX_WARPS,
                (x, np.int32(T), np.int32(K), y))
    return y


def glu_q8(ops, gate, up, act: int, out) -> None:
    """out = act(gate) * up (glu) and out's quantization into the q8 scratch, in one launch."""
    rows = out.reshape(-1, out.shape[-1])
    T, K = rows.shape
    xq, xs = buffers(ops, T, K)
    ops._launch(ops._k("qmatvec_q8.cu", "glu_q8"), (math.ceil(T * (K // 32) / QX_WARPS),), 32 * QX_WARPS,
                (gate, up, out, np.int32(T), np.int32(K), np.int32(act), xq, xs))
    mark_ready(ops, rows)


def matmul(ops, w, x, out, W: int, R: int, nt: int, bias, residual, softcap) -> None:
    T, K = x.shape
    xq, xs = quantize(ops, x)
    args = (*w.args(), xq, xs, np.int32(K), np.int32(w.n), np.int32(T), NULL if bias is None else bias,
            NULL if residual is None else residual, out, np.float32(softcap or 0.0))
    ops._launch(ops._k_with("qmatvec_q8.cu", f"qmv8<{w.fmt},{W},{R},{nt}>", ops.q8_loads(w, w.n, K, nt)),
                (math.ceil(w.n / R),), 32 * W, args)


def matmul_multi(ops, parts, nb, x, W: int, R: int, nt: int, na_eps: float | None = None) -> None:
    """parts: three (weight, out, bias) (the third may be empty: nb[2] = 0), as CudaOps.matmul_multi builds.
    na_eps: x is the residual stream h of a norm-ahead (matmul_na just wrote the norm's rows): qmv8_3n on them."""
    T, K = x.shape
    xq, xs, ss = input_codes(ops, x, na_eps)  # x quantized once for all the weights of this input
    name, tail = ("qmv8_3", []) if ss is None else ("qmv8_3n", [ss, np.float32(na_eps)])
    fmts = ",".join(str(w.fmt) for w, _, _ in parts)
    args = [xq, xs, np.int32(K), np.int32(T), np.int32(nb[0]), np.int32(nb[1])]
    for i, (w, o, b) in enumerate(parts):
        args += [*w.args(), np.int32(w.n if nb[i] else 0), NULL if b is None else b, o]
    args += tail
    # the stacked shape's entry, as _multi_plan's (W, R) (an empty third part, nb[2] = 0, is not in it)
    loads = ops.q8_loads(parts[0][0], sum(w.n for (w, _, _), b in zip(parts, nb, strict=True) if b), K, nt)
    ops._launch(ops._k_with("qmatvec_q8.cu", f"{name}<{fmts},{W},{R},{nt}>", loads), (sum(nb),), 32 * W, tuple(args))


# ---- BW24_NORM_AHEAD: the RMSNorm after a residual matvec, split between it and its q8 consumer ------------
NA_MAX_K = 32 * 32 * 8  # kernels/qmatvec_q8.cu NA_PMAX: a consumer lane sums at most 8 groups' shares
NA_MAX_WARPS = 2  # a producer's warps a row set: at most the 16-token bucket's 2 rows (qmv8_na: W <= R)


def butterfly_sum(v: np.ndarray) -> np.ndarray:
    """common.cuh warp_sum over the last axis (32 lanes) in float32: what every lane holds."""
    v = np.asarray(v, np.float32)
    assert v.shape[-1] == 32
    idx = np.arange(32)
    for o in (16, 8, 4, 2, 1):
        v = (v + v[..., idx ^ o]).astype(np.float32)
    return v[..., 0]


def na_ref(h: np.ndarray, nw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """qmv8_na's rows of h [T, N] before the norm weight nw [N]: (int8 codes [T, N], scales [T, G], half sums
    [T, G, 2]) of h * nw (fp32 products, quantize_x_ref), and each group's sum of squares [T, G] as its butterfly
    adds them. Bit-exact."""
    h = np.asarray(h, np.float32)
    T, N = h.shape
    q, d, sums = quantize_x_ref((h * np.asarray(nw, np.float32)).astype(np.float32))
    return q, d, sums, butterfly_sum((h * h).astype(np.float32).reshape(T, N // 32, 32))


def na_scale_ref(yss: np.ndarray, K: int, eps: float) -> np.ndarray:
    """qmv8_3n's norm factor per row of yss [T, G] in float64 from its lanes' fp32 sums (the kernel's rsqrtf
    differs from it by a few ulp): lane l sums groups l, l + 32, ... in order, then the butterfly."""
    yss = np.asarray(yss, np.float32)
    T, G = yss.shape
    lanes = np.zeros((T, 32), np.float32)
    for g in range(G):
        lanes[:, g % 32] = (lanes[:, g % 32] + yss[:, g]).astype(np.float32)
    total = butterfly_sum(lanes).astype(np.float64)
    return 1.0 / np.sqrt(total / K + eps)


def na_buffers(ops, T: int, N: int):
    """The norm-ahead's scratch for rows [T, N]: (yq int8 [T*N], ys int32 [T*G*2], yss fp32 [T*G]). Its own keys:
    the producer reads its input's codes from the q8 scratch (quantize) while it writes these."""
    G = N // 32
    cap = max(T, QMV_NT[-1])
    return (ops._buf("q8n_x", cap * N, np.int8)[: T * N], ops._buf("q8n_s", cap * G * 2, np.int32)[: T * G * 2],
            ops._buf("q8n_ss", cap * G)[: T * G])


def input_codes(ops, x, na_eps: float | None):
    """(xq, xs, sums of squares) a q8 consumer of x [T, K] reads: with na_eps, the norm-ahead's rows of the residual
    stream x that matmul_na just wrote (na_buffers); else x's own codes (quantize) and None."""
    if na_eps is None:
        return (*quantize(ops, x), None)
    return na_buffers(ops, *x.shape)


def na_warps(W: int, R_decode: int) -> int:
    """A producer's warps a row set, the same for every T (they set out's summation order, so verify rows equal
    decode rows): at most the decode config's W, its R (a block of 32 rows then holds at most 32 warps) and
    NA_MAX_WARPS (the 16-token bucket's R = 2)."""
    return max(1, min(W, R_decode, NA_MAX_WARPS))


def na_mark(h, nw, eps: float) -> tuple:
    """What CudaOps._q8_ready holds after matmul_na wrote rows h [T, N] and the int8 rows of rmsnorm(h) by (nw, eps)
    (na_buffers): a consumer of that norm of those very rows (matmul_multi, ffn_glu, qkv_rope_attention) reads them
    where the mark equals this, for the very next launch only."""
    return ("norm_ahead", h.data.ptr, *h.shape, nw.data.ptr, float(eps))


def na_plan(ops, w, x, out, residual, nw) -> tuple[int, int, int] | None:
    """(W, R, NT) of a qmv8_na launch for out = x W^T + residual with the norm weight nw behind it, or None where it
    does not apply: BW24_NORM_AHEAD off (ops.norm_ahead), not decode / verify rows, not on the q8 path (the
    producer's or, by feeds_q8, the consumer's), the gate's rounding alone (ops.emulating), N not in whole groups
    or past NA_MAX_K, a norm weight not [N], R not dividing 32."""
    T, K = x.shape
    N = w.n
    if not (getattr(ops, "norm_ahead", False) and T <= QMV_NT[-1] and not ops.emulating):
        return None
    if N % 32 or N > NA_MAX_K or tuple(nw.shape) != (N,) or not feeds_q8(ops, out):
        return None
    path, W, R = ops.qmv_configs.plan(w.qtype, N, K)
    if path != "q8":
        return None
    Wn = na_warps(W, R)
    nt, R = ops._verify_plan(path, T, R, (w,), K)
    return (Wn, R, nt) if 32 % R == 0 and Wn <= R else None


def matmul_na(ops, w, x, out, W: int, R: int, nt: int, residual, nw) -> None:
    """qmv8_na: out = x W^T + residual in blocks of 32 rows ((32 / R) sub-blocks of W warps), each block then
    writing its group's int8 codes of out * nw and sums of squares into na_buffers (na_plan's conditions)."""
    T, K = x.shape
    N = w.n
    xq, xs = quantize(ops, x)
    yq, ys, yss = na_buffers(ops, T, N)
    args = (*w.args(), xq, xs, np.int32(K), np.int32(N), np.int32(T), NULL if residual is None else residual, out,
            nw, yq, ys, yss)
    ops._launch(ops._k_with("qmatvec_q8.cu", f"qmv8_na<{w.fmt},{W},{R},{nt}>", ops.q8_loads(w, N, K, nt)),
                (N // 32,), 32 // R * W * 32, args)


def unspilled(ops, name: str, loads):
    """The qmatvec_q8.cu build `name` (with its launch's loads define), or None where it spills registers to local
    memory (CuPy's local_size_bytes): a fused launch (glu_kernel, qkvr_kernel) then gives way to the unfused ones,
    whose rows have the same bits."""
    fn = ops._k_with("qmatvec_q8.cu", name, loads)
    return None if getattr(fn, "local_size_bytes", 0) else fn


# ---- BW24_GLU_GROUPS: the GLU and its int8 rows in the gate/up matvec's blocks (kernels/qmatvec_q8.cu qmv8_glu) ---
GLU_MAX_WARPS = 32  # a qmv8_glu block: 2 * (32 / R) sub-blocks of W warps, at most 1024 threads


def glu_buffers(ops, T: int, F: int):
    """qmv8_glu's int8 rows of g [T, F] (the down projection's input): (yq int8 [T*F], ys int32 [T*G*2]). Their own
    keys: without a norm-ahead, the gate/up's input codes sit in the q8 scratch, which other blocks still read while
    a block writes its group."""
    G = F // 32
    cap = max(T, QMV_NT[-1])
    return ops._buf("q8g_x", cap * F, np.int8)[: T * F], ops._buf("q8g_s", cap * G * 2, np.int32)[: T * G * 2]


def glu_plan(ops, ws, x, g) -> tuple[int, int, int] | None:
    """(W, R, NT) of a qmv8_glu launch for g = act(x Wg^T) * (x Wu^T) (ws = (gate, up)), or None where it does not
    apply: BW24_GLU_GROUPS off (ops.glu_groups), not decode / verify rows, the gate's rounding alone (ops.emulating),
    gate and up of other shapes or formats (every sub-block runs one instance), not on the q8 path (the gate/up's, or
    by feeds_q8 the down projection's), F not in whole groups, or a block past GLU_MAX_WARPS at this T's rows. W is
    the unfused launch's (CudaOps._multi_plan), so g and u have qmv8_3(n)'s bits, and where the block does not fit
    (the 16-token bucket of a W > 1 config) the unfused launches give the same rows: verify rows equal decode rows
    either way."""
    T, K = x.shape
    if not (getattr(ops, "glu_groups", False) and T <= QMV_NT[-1] and not ops.emulating and len(ws) == 2):
        return None
    wg, wu = ws
    F = wg.n
    if wu.n != F or wg.qtype != wu.qtype or wg.k != K or wu.k != K or F % 32 or not feeds_q8(ops, g):
        return None
    q8, W, R = ops._multi_plan(ws, K)
    if not q8:
        return None
    nt, R = ops._verify_plan("q8", T, R, ws, K)
    return (W, R, nt) if 32 % R == 0 and (64 // R) * W <= GLU_MAX_WARPS else None


def glu_kernel(ops, ws, W: int, R: int, nt: int, na: bool):
    """qmv8_glu's build for glu_plan's (W, R, NT), or None where that build spills registers to local memory (CuPy's
    local_size_bytes): the caller then takes the unfused launches, whose rows have the same bits. Why: a block of
    1,024 threads leaves a thread 64 registers, and ptxas (CUDA 13, sm_90a) spilled the 8B Q8_0's decode instance
    (<3,4,8,1,false>, 400 B) and the 0.6B's 5-token verify (<7,1,4,5,true>, 332 B), while the 0.6B's and the Q4_K_M
    8B's decode instances spill nothing (78 and 64 registers)."""
    wg = ws[0]
    return unspilled(ops, f"qmv8_glu<{wg.fmt},{W},{R},{nt},{'true' if na else 'false'}>",
                     ops.q8_loads(wg, 2 * wg.n, wg.k, nt))


def matmul_glu(ops, fn, ws, x, g, u, W: int, R: int, act: int, na_eps: float | None = None) -> None:
    """qmv8_glu (fn, glu_kernel's): g = act(x Wg^T) * (x Wu^T) and g's int8 rows (into glu_buffers) in F / 32 blocks
    of one group each (glu_plan's conditions); u holds x Wu^T. na_eps: x is the residual stream h of a norm-ahead
    (matmul_na just wrote the norm's rows), as matmul_multi's. Marks g's rows for the next launch's quantize."""
    T, K = x.shape
    wg, wu = ws
    F = wg.n
    xq, xs, ss = input_codes(ops, x, na_eps)
    yq, ys = glu_buffers(ops, T, F)
    args = (xq, xs, np.int32(K), np.int32(T), np.int32(F), *wg.args(), g, *wu.args(), u, np.int32(act), yq, ys,
            NULL if ss is None else ss, np.float32(na_eps or 0.0))
    ops._launch(fn, (F // 32,), 64 // R * W * 32, args)
    ops._q8_ready = ("glu", g.data.ptr, T, F)


# ---- BW24_QKV_ROPE: rope_kv's work in the Q/K/V matvec's blocks (kernels/qmatvec_q8.cu qmv8_qkvr) ----------------
QKVR_BLOCK_WARPS = 16  # a q / k block's warps when its head allows: 512 threads, 128 registers a thread


def qkvr_plan(ops, ws, x, q, k_cache, v_cache) -> tuple[int, int, int, int] | None:
    """(W, R, RV, NT) of a qmv8_qkvr launch for Q/K/V (ws = (wq, wk, wv)) of x [T, K] into q [T, H, D] and the caches
    [Hkv, S, D], or None where it does not apply: BW24_QKV_ROPE off (ops.qkv_rope), not decode / verify rows, the
    gate's rounding alone (ops.emulating), not three weights of this input on the q8 path, heads of other shapes than
    the weights' rows (H * D, Hkv * D, Hkv * D) or Dv != D, a head whose rope slots pass rope_kv's block, or a q / k
    block past 32 warps. W is the unfused launch's (CudaOps._multi_plan), so q, k and v have qmv8_3(n)'s bits; R (a q /
    k sub-block's rows) is the most of this T's rows and D * W / 16, so that a head's block is at most 16 warps where it
    can be (R never changes a row's bits: kernels/qmatvec_q8.cu), and RV (a v sub-block's) this T's rows."""
    from .launch import Q8_TYPES
    from .norm import ROPE_SLOTS, rope_block

    T, K = x.shape
    if not (getattr(ops, "qkv_rope", False) and T <= QMV_NT[-1] and not ops.emulating and len(ws) == 3):
        return None
    wq, wk, wv = ws
    H, D = q.shape[1], q.shape[2]
    Hkv, _, Dv = v_cache.shape
    if (Dv != D or k_cache.shape[0] != Hkv or k_cache.shape[2] != D or (wq.n, wk.n, wv.n) != (H * D, Hkv * D, Hkv * D)
            or any(w.k != K for w in ws) or any(w.qtype.name not in Q8_TYPES for w in ws)
            or D // 2 > ROPE_SLOTS * rope_block(D, D)):
        return None
    q8, W, R = ops._multi_plan(ws, K)
    if not q8:
        return None
    nt, RT = ops._verify_plan("q8", T, R, ws, K)
    Rq = max(RT, D * W // QKVR_BLOCK_WARPS)
    return (W, Rq, RT, nt) if D % Rq == 0 and D % RT == 0 and (D // Rq) * W <= 32 else None


def qkvr_kernel(ops, ws, D: int, W: int, R: int, RV: int, nt: int, na: bool, kt: str):
    """qmv8_qkvr's build for qkvr_plan's (W, R, RV, NT) and the cache element kt, or None where that build spills
    registers to local memory (CuPy's local_size_bytes): the caller then takes the unfused launches, whose rows and
    cache rows have the same bits. With `nvcc -Xptxas -v` (CUDA 13, sm_90a) the 0.6B's decode builds (R = 8, RV = 4,
    a Q4_K or a Q6_K v) take 128 registers and spill nothing; its verify builds (NT 4, 5) and the 8B's (W = 2, R = 16)
    spill."""
    fmts = ",".join(str(w.fmt) for w in ws)
    return unspilled(ops, f"qmv8_qkvr<{fmts},{D},{W},{R},{RV},{nt},{'true' if na else 'false'},{kt}>",
                     ops.q8_loads(ws[0], sum(w.n for w in ws), ws[0].k, nt))


def matmul_qkvr(ops, fn, ws, x, outs, biases, pos, k_cache, v_cache, rope: dict, W: int, R: int, RV: int,
                na_eps: float | None = None) -> None:
    """qmv8_qkvr (fn, qkvr_kernel's): outs = (q, k, v) rows [T, H*D], [T, Hkv*D], [T, Hkv*D] of x's Q/K/V with their
    biases, then rope_kv's work (rope: its keyword arguments: base, freq_scale, rope_dim, mode, q_norm, k_norm,
    norm_eps) for the H + Hkv head blocks and the v blocks: q normed and rotated in place, k's and v's rows into the
    caches at pos[0] + t. na_eps: x is the residual stream h of a norm-ahead (matmul_na just wrote the norm's rows), as
    matmul_multi's."""
    from .norm import rope_block, rope_table

    T, K = x.shape
    Hkv, S, D = k_cache.shape
    H = ws[0].n // D
    xq, xs, ss = input_codes(ops, x, na_eps)
    tab = rope_table(ops, rope["base"], rope["freq_scale"], rope["rope_dim"], S)
    args = [xq, xs, np.int32(K), np.int32(T), np.int32(H), np.int32(Hkv)]
    for w, o, b in zip(ws, outs, biases, strict=True):
        args += [*w.args(), NULL if b is None else b, o]
    qn, kn = rope.get("q_norm"), rope.get("k_norm")
    args += [pos, k_cache, v_cache, np.int32(S), np.int32(rope["rope_dim"]), np.int32(rope["mode"] == "neox"), tab,
             NULL if qn is None else qn, NULL if kn is None else kn, np.float32(rope.get("norm_eps") or 0.0),
             np.int32(rope_block(D, D)), NULL if ss is None else ss, np.float32(na_eps or 0.0)]
    nv = math.ceil(Hkv * D / ((D // R) * RV))  # v blocks: D / R sub-blocks of RV rows
    ops._launch(fn, (H + Hkv + nv,), (D // R) * W * 32, tuple(args))

