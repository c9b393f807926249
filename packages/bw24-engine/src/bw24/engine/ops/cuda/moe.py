"""Device mixture of experts (kernels/moe.cu) for CudaOps.moe.

router matvec -> moe_route (softmax + top-k on the device) -> moe_mv gate / up (selected experts
only, ids read on the device) -> glu -> moe_mv down -> moe_combine (+ residual). No host sync, so a
qwen3moe decode step is captured as one graph like the dense models. Prefill (T > 16) replaces the
expert matvecs by per-expert GEMMs after one host read of the routing (moe_prefill.py).

Shape legend: T tokens, E n_embd, X experts, F n_ff_expert, k n_used, slots = T * k.
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import UnsupportedModelError
from ..base import ACTIVATIONS

MOE_WARPS = 4  # moe.cu's MOE_WARPS
PREFILL_T = 16  # above this many tokens the expert matvecs give way to grouped GEMMs (as CudaOps.matmul)


def _check_experts(name: str, w, X: int, n: int, k: int) -> None:
    if len(w.shape) != 3 or tuple(w.shape) != (X, n, k):
        raise UnsupportedModelError(f"moe: {name} {w.shape} is not stacked experts [{X}, {n}, {k}]")


def moe(ops, x, router, gate_exps, up_exps, down_exps, *, n_used, norm_weights, act, out, residual=None) -> None:
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
    rl = ops._buf("moe_rl", T * X).reshape(T, X)
    sel, wts = ops._buf("moe_sel", S, np.int32), ops._buf("moe_w", S)
    g, u = ops._buf("moe_g", S * F).reshape(S, F), ops._buf("moe_u", S * F).reshape(S, F)
    d = ops._buf("moe_d", S * E).reshape(S, E)

    ops.matmul(router, x, out=rl)  # [T, X]
    ops._launch(ops._k("moe.cu", "moe_route"), (T,), 32,
                (rl, np.int32(X), np.int32(n_used), np.int32(bool(norm_weights)), sel, wts))
    if T > PREFILL_T:  # prefill: slots grouped by expert, fp16 cuBLAS GEMMs (ops/cuda/moe_prefill.py)
        from .moe_prefill import expert_ffn

        expert_ffn(ops, x, sel, gate_exps, up_exps, down_exps, n_used, act, d)
    else:
        for w, dst, xin, per_slot, n in ((gate_exps, g, x, 0, F), (up_exps, u, x, 0, F), (down_exps, d, g, 1, E)):
            if w is down_exps:
                ops.glu(g, u, act, out=g)  # [S, F]
            ops._launch(ops._k("moe.cu", f"moe_mv<{w.fmt}>"), (math.ceil(n / MOE_WARPS), S), 32 * MOE_WARPS,
                        (*w.args(), sel, np.int32(n_used), xin, np.int32(per_slot), np.int32(w.k), np.int32(n), dst))
    ops._launch(ops._k("moe.cu", "moe_combine"), (math.ceil(E / 128), T), 128,
                (d, wts, np.int32(n_used), np.int32(E), residual if residual is not None else np.uintp(0), out))
