"""Device mixture of experts (kernels/moe.cu) for CudaOps.moe.

Decode / verify (T <= 16), 4 launches per layer: router matvec -> moe_route (softmax + top-k on the
device) -> moe_gu (gate and up of the selected experts, act(gate) * up, one launch) -> moe_down (down
projection and the weighted combine + residual, one launch). No host sync, so a qwen3moe decode step
is captured as one graph like the dense models. Prefill (T > 16) replaces the expert matvecs by
per-expert GEMMs after one host read of the routing (moe_prefill.py), then moe_combine.

On the int8 path (q8_experts: BW24_MOE_Q8, the default since 2c3a1bc, puts the whole model's activations there),
moe_gu8 reads x's quantization (left by the fused rmsnorm_reg, else one quantize_x) and leaves h's (the last
block of each 32-row group quantizes it, re-arming a ticket), moe_down8 reads that: the same 4 launches,
integer group dots (kernels/qdot_q8.cuh).

Fallbacks (same results within the matmul tolerance, slower): gate and up of different formats run as
two moe_mv + glu; a row too long for the shared-memory staging (4 * ~K bytes > 48 KiB) runs moe_mv.

Shape legend: T tokens, E n_embd, X experts, F n_ff_expert, k n_used, slots = T * k.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import UnsupportedModelError
from ..base import ACTIVATIONS
from .weights import NULL

MOE_WARPS = 4  # moe.cu's MOE_WARPS (moe_mv)
MAX_WARPS = 8  # moe.cu's MOE_MAX_WARPS: warps (routed slots) per moe_gu / moe_down block
PREFILL_T = 16  # above this many tokens the expert matvecs give way to grouped GEMMs (as CudaOps.matmul)
SMEM_MAX = 48 * 1024  # dynamic shared memory a block gets without an opt-in attribute
WIDE = (0, 1, 2)  # F32 / F16 / BF16: 4-8 vectors per group, so one group of one row per batch (registers)
# formats whose 2-row segments spill past 128 registers on sm_90a (2 blocks of 8 warps per SM): one row
ONE_ROW = {"gu": (3, 8, 9), "down": (3,)}  # Q8_0, Q5_K, Q6_K
Q8_FMTS = tuple(range(3, 10))  # the quantized formats, moe_gu8 / moe_down8's (qdot_q8.cuh q8_ok)


def decode_config(fmt: int, K: int, kind: str, int8: bool = False) -> tuple[int, int, int]:
    """(L lanes per row, R rows per segment, U groups per lane per batch) of moe_gu ("gu") / moe_down
    ("down") for a weight of format `fmt` and row length K (int8: of moe_gu8 / moe_down8). A function of
    (fmt, K, kind, int8) only, never of T: L and K fix a row's summation order. U covers K/32 groups with
    as few lanes (>= 8) as it can, so the down projection (K = 768: 24 groups) keeps all 32 lanes busy
    (4 rows x 8 lanes x 3 groups). The int8 kernels take one row per segment: 64 registers, 4 blocks an SM
    (moe.cu MOE8_MIN_BLOCKS)."""
    if kind not in ("gu", "down"):
        raise ValueError(f"decode_config kind {kind!r}: 'gu' or 'down'")
    if fmt in WIDE:
        R, U = 1, 1
    else:
        R, U = 1 if int8 or fmt in ONE_ROW[kind] else 2, 2 if kind == "gu" else 3
    G, L = K // 32, 8
    while L < 32 and L * U < G:
        L *= 2
    return L, R, U


def decode_instances() -> tuple[str, ...]:
    """Every moe_gu / moe_down (and int8 moe_gu8 / moe_down8) template instance decode_config can ask for
    (CI's compile set)."""
    names = []
    for f in range(10):
        for kind in ("gu", "down"):
            _, R, U = decode_config(f, 2048, kind)
            names.append(f"moe_{kind}<{f},{R},{U}>")
            if f in Q8_FMTS:
                _, R, U = decode_config(f, 2048, kind, int8=True)
                names.append(f"moe_{kind}8<{f},{R},{U}>")
    return tuple(names)


def q8_experts(ops, gate_exps, up_exps, down_exps, gate_force: bool = True) -> bool:
    """The experts on the int8 path: BW24_MOE_Q8 asked for it (ops.moe_q8), the backend's activations are
    on that path now (not use_int8_activations(False), not inside exact_activations: the gate's exact half
    keeps the fp32 kernels), and moe_gu8 / moe_down8 have the formats (gate and up of one).
    gate_force=False: whether the backend's own forwards take it, whatever the gate's exact half forces."""
    return (ops.moe_q8 and ops.quantizes_activations and (not gate_force or ops.qmv_configs.force_path != "f32")
            and gate_exps.fmt == up_exps.fmt and all(w.fmt in Q8_FMTS for w in (gate_exps, up_exps, down_exps)))


ROUTER_WARPS = 4  # moe_router: router rows (one a warp) per block


def fused_router(ops, router, x) -> bool:
    """moe_router (the router matvec and moe_route in one launch) for this call: BW24_MOE_ROUTER (the default;
    =0 off: ops.moe_router_fuse), decode / verify rows, an F32 router, and float4 rows (E % 4 == 0, x 16-byte aligned)."""
    T, E = x.shape
    return bool(ops.moe_router_fuse and T <= PREFILL_T and router.fmt == 0 and E % 4 == 0 and x.data.ptr % 16 == 0)


def router_launch(ops, router, x, n_used: int, norm_weights: bool, rl, sel, wts) -> None:
    """moe_router: router logits rl [T, X] and the routing sel / wts of x [T, E] (fused_router's conditions);
    its tickets [16] zeroed once, re-armed by the kernel. ROUTER_WARPS rows a block (benchmarks/gpu_moe_decode.py
    times others: a row's sum is one warp's whatever the block, so the bits are the same)."""
    T, E = x.shape
    X = router.n
    tickets = ops._buf("moe_router_tickets", PREFILL_T, np.int32, zeroed=True)
    ops._launch(ops._k("moe.cu", "moe_router"), (math.ceil(X / ROUTER_WARPS), T), 32 * ROUTER_WARPS,
                (router.args()[0], x, np.int32(E), np.int32(X), np.int32(n_used), np.int32(bool(norm_weights)),
                 rl, tickets, sel, wts))


def xs_floats(K: int) -> int:
    """moe.cu xs_floats: one staged vector = K values + K/32 group sums padded to a float4."""
    return K + ((K // 32 + 3) & ~3)


def gu_smem(K: int) -> int:
    return 4 * xs_floats(K)


def down_plan(K: int, k: int, fmt: int) -> tuple[int, int, int] | None:
    """(warps per block, rows per block RB, shared bytes) of moe_down, or None if one warp's staging
    does not fit (then moe_mv + moe_combine)."""
    L, R, _ = decode_config(fmt, K, "down")
    rb = 32 // L * R
    nw = min(k, MAX_WARPS, (SMEM_MAX - 4 * k * rb) // (4 * xs_floats(K)))
    return (nw, rb, 4 * (nw * xs_floats(K) + k * rb)) if nw >= 1 else None


def _check_experts(name: str, w, X: int, n: int, k: int) -> None:
    if len(w.shape) != 3 or tuple(w.shape) != (X, n, k):
        raise UnsupportedModelError(f"moe: {name} {w.shape} is not stacked experts [{X}, {n}, {k}]")


def norm_router(ops, router, h, x, nw) -> bool:
    """moe_router_norm (the block's input RMSNorm inside the router's launch, kernels/moe.cu: why) for this call:
    BW24_MOE_ROUTER_NORM (ops.moe_norm_fuse), fused_router's conditions, rows that rmsnorm_reg<4, NV> takes (16-byte
    aligned h, x and norm weight; E % 32 == 0 for the int8 groups holds for any weight, repack.py's rule) and x's row
    fits the 48 KB of shared memory."""
    from .norm import rmsnorm_shape

    T, E = h.shape
    aligned = all(a.data.ptr % 16 == 0 for a in (h, x, nw))
    shape = rmsnorm_shape(E, aligned)
    return bool(getattr(ops, "moe_norm_fuse", False) and fused_router(ops, router, x) and aligned
                and 4 * E <= SMEM_MAX and shape is not None and shape[0] == 4)


def router_norm_launch(ops, router, h, nw, eps: float, x, xq, xs, n_used: int, norm_weights: bool, rl, sel,
                       wts) -> None:
    """moe_router_norm: x = rmsnorm(h) * nw (and its int8 rows xq / xs, or NULL), the router logits rl and the
    routing sel / wts (norm_router's conditions); a block of rmsnorm_reg's threads for E, one router row a warp."""
    from .norm import rmsnorm_shape

    T, E = h.shape
    X = router.n
    _, nv, threads = rmsnorm_shape(E, True)
    tickets = ops._buf("moe_router_tickets", PREFILL_T, np.int32, zeroed=True)
    ops._launch(ops._k("moe.cu", f"moe_router_norm<{nv}>"), (math.ceil(X / (threads // 32)), T), threads,
                (router.args()[0], h, nw, np.float32(eps), x, xq, xs, np.int32(E), np.int32(X), np.int32(n_used),
                 np.int32(bool(norm_weights)), rl, tickets, sel, wts), shared_mem=4 * E)


def moe(ops, x, router, gate_exps, up_exps, down_exps, *, n_used, norm_weights, act, out, residual=None,
        normed=None) -> None:
    """normed = (h, norm weight, eps): x is written here, rmsnorm(h) * norm, by the router's launch (norm_router)."""
    if act not in ACTIVATIONS:
        raise ValueError(f"activation {act!r} not in {ACTIVATIONS}")
    T, E = x.shape
    X = router.n
    F = gate_exps.shape[1]
    if not 0 < n_used <= min(X, 32) or X > 1024:
        raise UnsupportedModelError(f"cuda moe: {n_used} of {X} experts (supported: k <= 32, X <= 1024)")
    assert router.k == E and out.shape == (T, E) and x.flags.c_contiguous and out.flags.c_contiguous
    _check_experts("gate_exps", gate_exps, X, F, E)
    _check_experts("up_exps", up_exps, X, F, E)
    _check_experts("down_exps", down_exps, X, E, F)
    if residual is not None:
        assert residual.shape == out.shape and residual.flags.c_contiguous
    S = T * n_used
    int8 = T <= PREFILL_T and q8_experts(ops, gate_exps, up_exps, down_exps)
    # the gate's rounding alone (CudaOps.emulate_rounding): the fp32 kernels on x and h rounded as the int8
    # experts round them (moe_gu8 reads x's codes, moe_down8 h's); the router reads x unrounded either way
    emulate = (T <= PREFILL_T and not int8 and ops.emulating
               and q8_experts(ops, gate_exps, up_exps, down_exps, gate_force=False))
    # x's quantization first: the router's launch would void the mark of a fused rmsnorm_reg's
    if int8:
        from . import q8  # (here: q8 imports kernels, which imports this module's decode_instances)

        xq, xs = q8.buffers(ops, T, E) if normed is not None else q8.quantize(ops, x)
    rl = ops._buf("moe_rl", T * X).reshape(T, X)
    sel, wts = ops._buf("moe_sel", S, np.int32), ops._buf("moe_w", S)
    d = ops._buf("moe_d", S * E).reshape(S, E)
    res = residual if residual is not None else np.uintp(0)

    if normed is not None:  # the norm, the router and the routing in one launch
        h, nw, eps = normed
        router_norm_launch(ops, router, h, nw, eps, x, *((xq, xs) if int8 else (NULL, NULL)), n_used, norm_weights,
                           rl, sel, wts)
    elif fused_router(ops, router, x):  # one launch
        router_launch(ops, router, x, n_used, norm_weights, rl, sel, wts)
    else:
        ops.matmul(router, x, out=rl)  # [T, X]
        ops._launch(ops._k("moe.cu", "moe_route"), (T,), 32,
                    (rl, np.int32(X), np.int32(n_used), np.int32(bool(norm_weights)), sel, wts))
    if ops.routing is not None:  # the gate's pin (engine.routing_pin; eager forwards, CudaOps.pin_routing)
        pin_routes(ops, rl, sel, wts, n_used, norm_weights)
    if T > PREFILL_T:  # prefill: slots grouped by expert, fp16 cuBLAS GEMMs (ops/cuda/moe_prefill.py)
        from .moe_prefill import expert_ffn, grouped, grouped_ffn

        ffn = grouped_ffn if grouped(ops, gate_exps, up_exps, E, F) else expert_ffn
        ffn(ops, x, sel, gate_exps, up_exps, down_exps, n_used, act, d)
        _combine(ops, d, wts, n_used, res, out)
        return
    # decode / verify: g [S, F] = act(gate x) * up x; out = residual + sum_j w_j down g_j. (Here, not above: a
    # prefill chunk never reads them, and at 2,040 tokens they held 94 MB of the 30B-A3B's scratch.)
    g, u = ops._buf("moe_g", S * F).reshape(S, F), ops._buf("moe_u", S * F).reshape(S, F)
    if int8:
        _int8_experts(ops, gate_exps, up_exps, down_exps, sel, wts, n_used, xq, xs, act, g, res, out)
        return
    if emulate:
        from . import q8

        x = q8.round_x(ops, x, out=ops._buf("moe_xe", T * E).reshape(T, E))
    if gate_exps.fmt == up_exps.fmt and gu_smem(E) <= SMEM_MAX:
        L, R, U = decode_config(gate_exps.fmt, E, "gu")
        ops._launch(ops._k("moe.cu", f"moe_gu<{gate_exps.fmt},{R},{U}>"),
                     (math.ceil(F / (32 // L * R)), T), 32 * min(n_used, MAX_WARPS),
                     (*gate_exps.args(), *up_exps.args(), sel, np.int32(n_used), x, np.int32(E), np.int32(F),
                      np.int32(L), np.int32(ACTIVATIONS.index(act)), g), shared_mem=gu_smem(E))
    else:
        _mv(ops, gate_exps, sel, n_used, x, 0, F, g)
        _mv(ops, up_exps, sel, n_used, x, 0, F, u)
        ops.glu(g, u, act, out=g)  # [S, F]
    if emulate:
        q8.round_x(ops, g)  # in place: h as moe_down8 reads it
    plan = down_plan(F, n_used, down_exps.fmt)
    if plan is not None:
        nw, rb, smem = plan
        L, R, U = decode_config(down_exps.fmt, F, "down")
        ops._launch(ops._k("moe.cu", f"moe_down<{down_exps.fmt},{R},{U}>"), (math.ceil(E / rb), T), 32 * nw,
                     (*down_exps.args(), sel, wts, np.int32(n_used), g, np.int32(F), np.int32(E), np.int32(L),
                      res, out), shared_mem=smem)
    else:
        _mv(ops, down_exps, sel, n_used, g, 1, E, d)
        _combine(ops, d, wts, n_used, res, out)


def pin_routes(ops, rl, sel, wts, n_used: int, norm_weights: bool) -> None:
    """The routing pin's host round trip: this call's router logits rl [T, X] and top-k sel to the pin, its
    experts and their weights (from rl) back into sel / wts, where the experts' launches read them."""
    T = rl.shape[0]
    pinned = ops.routing.apply(ops.to_host(rl), ops.to_host(sel).reshape(T, n_used), n_used, norm_weights)
    if pinned is not None:
        s, w = pinned
        ops.copy_from_host(sel, s.reshape(-1).astype(np.int32))
        ops.copy_from_host(wts, w.reshape(-1).astype(np.float32))


def _int8_experts(ops, gate_exps, up_exps, down_exps, sel, wts, n_used: int, xq, xs, act: str, g, res, out) -> None:
    """moe_gu8 (x's codes xq / xs [T, E]) into g [S, F] and g's codes, then moe_down8 (+ combine, + residual)
    into out. The tickets ([T, F/32], zeroed once, re-armed by the kernel) are sized for 16 rows, so that a
    verify step captured later finds them allocated."""
    T, E = out.shape
    S, F = g.shape
    gq, gs = ops._buf("moe_gq", S * F, np.int8), ops._buf("moe_gs", S * F // 16, np.int32)
    tickets = ops._buf("moe_tickets", max(T, PREFILL_T) * (F // 32), np.int32, zeroed=True)
    L, R, U = decode_config(gate_exps.fmt, E, "gu", int8=True)
    assert F % 32 == 0 and 32 % (32 // L * R) == 0  # a block's rows in one 32-row group (moe_gu8's tickets)
    ops._launch(ops._k("moe.cu", f"moe_gu8<{gate_exps.fmt},{R},{U}>"), (F // (32 // L * R), T),
                32 * min(n_used, MAX_WARPS),
                (*gate_exps.args(), *up_exps.args(), sel, np.int32(n_used), xq, xs, np.int32(E), np.int32(F),
                 np.int32(L), np.int32(ACTIVATIONS.index(act)), g, tickets, gq, gs))
    L, R, U = decode_config(down_exps.fmt, F, "down", int8=True)
    rb, nw = 32 // L * R, min(n_used, MAX_WARPS)
    ops._launch(ops._k("moe.cu", f"moe_down8<{down_exps.fmt},{R},{U}>"), (math.ceil(E / rb), T), 32 * nw,
                (*down_exps.args(), sel, wts, np.int32(n_used), gq, gs, np.int32(F), np.int32(E), np.int32(L), res,
                 out), shared_mem=4 * n_used * rb)


def _mv(ops, w, sel, n_used: int, xin, per_slot: int, n: int, dst) -> None:
    """dst [S, n] = W[sel[slot]] . xin[slot or slot / k] (moe_mv: one warp per row)."""
    S = dst.shape[0]
    ops._launch(ops._k("moe.cu", f"moe_mv<{w.fmt}>"), (math.ceil(n / MOE_WARPS), S), 32 * MOE_WARPS,
                (*w.args(), sel, np.int32(n_used), xin, np.int32(per_slot), np.int32(w.k), np.int32(n), dst))


def _combine(ops, d, wts, n_used: int, res, out) -> None:
    T, E = out.shape
    ops._launch(ops._k("moe.cu", "moe_combine"), (math.ceil(E / 128), T), 128,
                (d, wts, np.int32(n_used), np.int32(E), res, out))
