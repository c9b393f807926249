"""MoE prefill (T > 16 tokens) for ops/cuda/moe.py: the T*k routed slots grouped by expert, and the
used experts' gate / up / down run as batched fp16 cuBLAS GEMMs (the arithmetic of prefill.py).

After moe_route, one small device->host copy of the selected experts (prefill is never graph-
captured) gives each expert's slots. Used experts are taken busiest first in chunks of <= ec
(their fp16 weights fill PREFILL_SCRATCH); a chunk's token rows are gathered into a padded block
[ec, cm, E] (cm = the chunk's largest count, rounded up to 8; pad rows are zero and stay zero through
silu-glu), so one strided-batched GEMM per product serves the whole chunk. Down outputs are
scattered back to slot order t*k + j, where moe_combine sums them exactly as in decode.
Launches per chunk: gather, 2 x_to_half, 3 dequant, 3 (fp16) or 9 (split) GEMMs, 3 epilogues, glu,
scatter; qwen3-30b-a3b (128 experts of 768x2048) needs ~13 chunks per layer at pp512.

Shape legend: T tokens, E n_embd, F n_ff_expert, k n_used, X experts, cm padded rows per expert.
"""

from __future__ import annotations

import numpy as np

from .prefill import PREFILL_SCRATCH, epilogue, is_split, products, to_half

MAX_EXPERTS_PER_CHUNK = 16  # bounds the padded activation blocks (memory.plan counts 16 * max_batch rows)


def experts_per_chunk(E: int, F: int, split: bool, n_used: int) -> int:
    return max(1, min(n_used, MAX_EXPERTS_PER_CHUNK, PREFILL_SCRATCH // (E * F * 2 * (2 if split else 1))))


def _batched(ops, w, ex_d, n_e: int, rpe: int, K: int, xh, xl, cm: int, y) -> None:
    """y [n_e * cm, rpe] = per expert b: x[b*cm : (b+1)*cm] @ W[ex[b]]^T (rpe rows of K each)."""
    from .prefill import dequant

    wh = ops._buf("gemm_wh", n_e * rpe * K, np.float16)
    wl = ops._buf("gemm_wl", n_e * rpe * K, np.float16) if xl is not None else None
    dequant(ops, w, wh, wl, n_e * rpe, experts=ex_d, rpe=rpe)
    products(ops, wh, wl, xh, xl, y.data.ptr, rpe, cm, K, rpe, batch=n_e, stride_w=rpe * K, stride_x=cm * K,
             stride_y=cm * rpe)


def expert_ffn(ops, x, sel, gate_exps, up_exps, down_exps, k: int, act: str, d) -> None:
    """d[slot] = down_e(act(gate_e x_t) * up_e x_t) for slot = t*k + j, e = sel[slot]."""
    cp = ops.cp
    T, E = x.shape
    X, F = gate_exps.shape[0], gate_exps.shape[1]
    split = is_split(ops, q8=False)  # expert decode (ops/cuda/moe.py) keeps fp32 activations
    sel_h = ops.to_host(sel).reshape(-1).astype(np.int64)  # [S]: the only host sync of the layer
    counts = np.bincount(sel_h, minlength=X)
    order = np.argsort(sel_h, kind="stable")  # slots grouped by expert, token order within
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    used = np.argsort(-counts, kind="stable")[: int(np.count_nonzero(counts))]  # busiest first
    ec = experts_per_chunk(E, F, split, len(used))
    for c0 in range(0, len(used), ec):
        ex = used[c0:c0 + ec]
        n_e, cm = len(ex), int(-(-counts[ex].max() // 8) * 8)
        R = n_e * cm
        valid = np.arange(cm)[None, :] < counts[ex][:, None]  # [n_e, cm]
        prow = (np.arange(n_e)[:, None] * cm + np.arange(cm)[None, :])[valid]  # padded row of each slot
        slots = np.concatenate([order[start[e]:start[e] + counts[e]] for e in ex])  # same (row-major) order
        with ops.stream:
            prow_d, slots_d = cp.asarray(prow), cp.asarray(slots)
            ex_d = cp.asarray(ex.astype(np.int32))
            xs = ops._buf("moe_xs", R * E).reshape(R, E)
            xs.fill(0)
            xs[prow_d] = x[slots_d // k]
        g, u = ops._buf("moe_pg", R * F).reshape(R, F), ops._buf("moe_pu", R * F).reshape(R, F)
        y, ds = ops._buf("moe_y", R * max(E, F)), ops._buf("moe_ds", R * E).reshape(R, E)
        xh, xl, sx = to_half(ops, xs, split)
        for w, dst in ((gate_exps, g), (up_exps, u)):
            _batched(ops, w, ex_d, n_e, F, E, xh, xl, cm, y)
            epilogue(ops, y, sx, dst, F, R * F)
        ops.glu(g, u, act, out=g)  # [R, F]
        gh, gl, gs = to_half(ops, g, split)
        _batched(ops, down_exps, ex_d, n_e, E, F, gh, gl, cm, y)
        epilogue(ops, y, gs, ds, E, R * E)
        with ops.stream:
            d[slots_d] = ds[prow_d]
