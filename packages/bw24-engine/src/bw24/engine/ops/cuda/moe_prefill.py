"""MoE prefill (T > 16 tokens) for ops/cuda/moe.py: the T*k routed slots grouped by expert, and the
used experts' gate / up / down run as batched fp16 cuBLAS GEMMs (the arithmetic of prefill.py).

After moe_route, one small device->host copy of the selected experts (prefill is never graph-
captured) gives each expert's slots. Used experts are taken busiest first in chunks (plan_chunks):
as many as their fp16 weights fit MOE_SCRATCH and their padded rows fit ROWS_PER_TOKEN * (T + 8).
A chunk's token rows are gathered into a padded block [ec, cm, E] (cm = the chunk's largest count,
rounded up to 8; pad rows are zero and stay zero through silu-glu), so one strided-batched GEMM per
product serves the whole chunk. Down outputs are scattered back to slot order t*k + j, where
moe_combine sums them exactly as in decode.

The layer is host-bound (at 0d45897 the 30B-A3B's pp512 ran 2350 tok/s against llama.cpp's 10363; ~13
chunks per layer of ~25 host operations and three index uploads each), so: one upload of every
chunk's index arrays per layer, one gather and one scatter kernel per chunk (moe.cu moe_gather_rows /
moe_scatter_rows, in place of CuPy's fill + fancy indexing), and 4x the dense prefill's weight scratch
(qwen3-30b-a3b, 128 experts of 768x2048, split precision: 42 experts a chunk, 3-4 chunks a layer).
Launches per chunk: gather, 2 x_to_half, 3 dequant, 3 (fp16) or 9 (split) GEMMs, 2 epilogues (gate's and
up's products side by side, the GLU in their epilogue), scatter.

Shape legend: T tokens, E n_embd, F n_ff_expert, k n_used, X experts, cm padded rows per expert.
"""

from __future__ import annotations

import math

import numpy as np

from .prefill import epilogue, glu_epilogue, is_split, products, to_half

MOE_SCRATCH = 256 << 20  # bytes of dequantized fp16 expert weights (hi, and lo when split) per chunk
ROWS_PER_TOKEN = 16  # padded activation rows per chunk <= this x (T + 8) (memory.plan counts 16 x max_batch)
# expert_ffn takes a prefill chunk's tokens this many at a time, so that its gathered rows (moe_xs, moe_y, moe_ds,
# their fp16 halves: 16 x (T + 8) rows each) stay a 512-token chunk's whatever the chunk: at the 30B-A3B's
# ~2,040-token long gate they held 1.6 GiB (evidence/run_gen_qwen3-30b-a3b-*_30ecafb_gate_repeat_90.log). Each piece
# dequantizes its own used experts again: the gate's exact half alone runs this path, untimed.
EXPERT_TOKENS = 512


def experts_per_chunk(E: int, F: int, split: bool) -> int:
    """The most experts whose gate (or up, or down) weights fit MOE_SCRATCH as fp16 halves."""
    return max(1, MOE_SCRATCH // (E * F * 2 * (2 if split else 1)))


def plan_chunks(counts: np.ndarray, T: int, ec: int) -> list[np.ndarray]:
    """The used experts, busiest first, cut into chunks of <= ec experts whose padded rows (the chunk's
    largest count rounded up to 8, per expert) stay within ROWS_PER_TOKEN * (T + 8)."""
    used = np.argsort(-counts, kind="stable")[: int(np.count_nonzero(counts))]
    rows_max, chunks, i = ROWS_PER_TOKEN * (T + 8), [], 0
    while i < len(used):
        cm = -(-int(counts[used[i]]) // 8) * 8  # the busiest of the chunk sets its padding
        n = max(1, min(ec, rows_max // cm, len(used) - i))
        chunks.append(used[i:i + n])
        i += n
    return chunks


def _batched(ops, w, ex_d, n_e: int, rpe: int, K: int, xh, xl, cm: int, yp: int, ldy: int) -> None:
    """y [n_e * cm, ldy] at address yp, its first rpe columns = per expert b: x[b*cm : (b+1)*cm] @ W[ex[b]]^T
    (rpe rows of K each)."""
    from .prefill import dequant

    wh = ops._buf("gemm_wh", n_e * rpe * K, np.float16)  # the dense prefill's scratch, grown (memory.plan)
    wl = ops._buf("gemm_wl", n_e * rpe * K, np.float16) if xl is not None else None
    dequant(ops, w, wh, wl, n_e * rpe, experts=ex_d, rpe=rpe)
    products(ops, wh, wl, xh, xl, yp, rpe, cm, K, ldy, batch=n_e, stride_w=rpe * K, stride_x=cm * K,
             stride_y=cm * ldy)


def _rows(ops, kernel: str, a, rmap, R: int, n: int, b) -> None:
    """moe_gather_rows (b[r] = a[rmap[r]] or zeros) / moe_scatter_rows (b[rmap[r]] = a[r] unless -1)."""
    ops._launch(ops._k("moe.cu", kernel), (R,), min(256, 32 * math.ceil(n / 128)),
                (a, rmap, np.int32(R), np.int32(n), b))


def chunk_maps(sel_h: np.ndarray, counts: np.ndarray, chunks, k: int) -> list[tuple[np.ndarray, int, np.ndarray]]:
    """Per chunk (its experts, cm, map [n_e * cm]): padded row b*cm + i of expert b holds its i-th slot
    (token order) or -1 (padding). The gather reads token slot // k, the scatter writes slot."""
    # slots grouped by expert, token order within; int16 keys (X <= 1024) take numpy's radix sort: 20 us
    # against 160 for int64 ones on the 30B-A3B's 4096 slots
    order = np.argsort(sel_h.astype(np.int16), kind="stable")
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    e_of = sel_h[order]  # the expert of each grouped slot
    rank = np.arange(order.size) - start[e_of]  # its place among its expert's slots
    # one vectorized scatter per chunk: with a Python loop over the experts and an int64 sort this planning
    # took ~460 us a layer of host time (T = 512, k = 8, X = 128) while the GPU waited on the routing read
    chunk_of, b_of = np.full(counts.size, -1), np.zeros(counts.size, np.int64)
    for c, ex in enumerate(chunks):
        chunk_of[ex], b_of[ex] = c, np.arange(len(ex))
    slot_chunk, slot_b = chunk_of[e_of], b_of[e_of]  # each grouped slot's chunk and expert place in it
    out = []
    for c, ex in enumerate(chunks):
        cm = -(-int(counts[ex].max()) // 8) * 8
        m = np.full(len(ex) * cm, -1, np.int64)
        mine = slot_chunk == c
        m[slot_b[mine] * cm + rank[mine]] = order[mine]
        out.append((ex, cm, m))
    return out


MM_BM, MM_BN = 64, 64  # moe_mm.cu: routed rows a tile, output columns a block
# moe_mm.cu's KG instances (32-column groups a stage) per form: the GLU form stages two weights' rows, and its
# shared rows fit the 48 KiB of static shared memory up to KG = 2; the down form up to 4
MM_KG = {True: (2, 1), False: (4, 2, 1)}


def mm_instances() -> tuple[str, ...]:
    """Every moe_mm instance grouped_ffn can launch: per weight format, the GLU and down forms at each of their
    KG (CI's compile set)."""
    return tuple(f"moe_mm<{f},{str(glu).lower()},{kg}>" for f in range(10) for glu in (True, False)
                 for kg in sorted(MM_KG[glu]))


def mm_kg(want: int, K: int, glu: bool) -> int:
    """The KG a moe_mm launch takes: the largest instance of its form <= want (ops.moe_mm_kg, BW24_MOE_MM_KG)
    that divides K's 32-column groups (every KG gives the same bits: moe_mm.cu)."""
    return next(kg for kg in MM_KG[glu] if kg <= want and (K // 32) % kg == 0)


def grouped(ops, gate_exps, up_exps, E: int, F: int) -> bool:
    """grouped_ffn for this layer: BW24_MOE_GROUPED (ops.moe_grouped, the default; =0 off), fp16 products (the split precision
    of the gate's exact half keeps expert_ffn), gate and up of one format (one GLU kernel reads both), rows
    of whole 32-column groups."""
    return bool(ops.moe_grouped and not is_split(ops, q8=False) and gate_exps.qtype == up_exps.qtype
                and E % 32 == 0 and F % 32 == 0)


def grouped_ffn(ops, x, sel, gate_exps, up_exps, down_exps, k: int, act: str, d) -> None:
    """d[slot] = down_e(act(gate_e x_t) * up_e x_t) as expert_ffn, with the routing read on the device: moe_group
    (slots grouped by expert, row tiles), x_to_half, moe_mm<gate, GLU> into h [S, F], x_to_half of h, moe_mm<down>
    into d. Five launches whatever the routing, no host sync; grids sized for the most tiles S slots can make."""
    from ..base import ACTIVATIONS

    T, E = x.shape
    X, F = gate_exps.shape[0], gate_exps.shape[1]
    S = T * k
    maxt = -(-S // MM_BM) + X
    off, perm = ops._buf("mm_off", X + 1, np.int32), ops._buf("mm_perm", S, np.int32)
    te, tr, nt = ops._buf("mm_te", maxt, np.int32), ops._buf("mm_tr", maxt, np.int32), ops._buf("mm_nt", 1, np.int32)
    ops._launch(ops._k("moe_mm.cu", "moe_group"), (1,), 1024,
                (sel, np.int32(S), np.int32(X), off, perm, te, tr, nt))
    xh, _, sx = to_half(ops, x, False)
    h = ops._buf("moe_pg", S * F).reshape(S, F)
    tiles = (perm, off, te, tr, nt)
    want = ops.moe_mm_kg
    ops._launch(ops._k("moe_mm.cu", f"moe_mm<{gate_exps.fmt},true,{mm_kg(want, E, True)}>"), (-(-F // MM_BN), maxt), 128,
                (*gate_exps.args(), *up_exps.args(), np.int32(F), np.int32(E), xh, sx, np.int32(k), *tiles,
                 np.int32(ACTIVATIONS.index(act)), h))
    hh, _, sh = to_half(ops, h, False)  # (x's halves are consumed: to_half's buffers are reused)
    ops._launch(ops._k("moe_mm.cu", f"moe_mm<{down_exps.fmt},false,{mm_kg(want, F, False)}>"), (-(-E // MM_BN), maxt), 128,
                (*down_exps.args(), *down_exps.args(), np.int32(E), np.int32(F), hh, sh, np.int32(1), *tiles,
                 np.int32(0), d))


def expert_ffn(ops, x, sel, gate_exps, up_exps, down_exps, k: int, act: str, d) -> None:
    """d[slot] = down_e(act(gate_e x_t) * up_e x_t) for slot = t*k + j, e = sel[slot]; the tokens EXPERT_TOKENS at a
    time (its scratch bound)."""
    T = x.shape[0]
    sel_h = ops.to_host(sel).reshape(-1).astype(np.int64)  # [S]: the only host sync of the layer
    for t0 in range(0, T, EXPERT_TOKENS):
        t1 = min(T, t0 + EXPERT_TOKENS)
        _expert_ffn(ops, x[t0:t1], sel_h[t0 * k:t1 * k], gate_exps, up_exps, down_exps, k, act, d[t0 * k:t1 * k])


def _expert_ffn(ops, x, sel_h, gate_exps, up_exps, down_exps, k: int, act: str, d) -> None:
    """expert_ffn of x [T, E] (T <= EXPERT_TOKENS), its routing sel_h [T * k] on the host, into d [T * k, E]."""
    cp = ops.cp
    T, E = x.shape
    X, F = gate_exps.shape[0], gate_exps.shape[1]
    split = is_split(ops, q8=False)  # expert decode (ops/cuda/moe.py) keeps fp32 activations
    counts = np.bincount(sel_h, minlength=X)
    maps = chunk_maps(sel_h, counts, plan_chunks(counts, T, experts_per_chunk(E, F, split)), k)
    # every chunk's experts, gather map (token or -1) and scatter map (slot or -1): one upload per layer
    host = np.concatenate([np.concatenate([ex, np.where(m >= 0, m // k, -1), m]) for ex, _, m in maps])
    with ops.stream:
        dev = cp.asarray(host.astype(np.int32))
    o = 0
    for ex, cm, m in maps:
        n_e, R = len(ex), len(m)
        ex_d, gmap, smap = dev[o:o + n_e], dev[o + n_e:o + n_e + R], dev[o + n_e + R:o + n_e + 2 * R]
        o += n_e + 2 * R
        xs = ops._buf("moe_xs", R * E).reshape(R, E)
        _rows(ops, "moe_gather_rows", x, gmap, R, E, xs)
        g = ops._buf("moe_pg", R * F).reshape(R, F)
        y, ds = ops._buf("moe_y", R * max(E, 2 * F)), ops._buf("moe_ds", R * E).reshape(R, E)
        xh, xl, sx = to_half(ops, xs, split)
        # gate's and up's products side by side in y [R, 2F]; one epilogue applies the GLU into g (the
        # arithmetic of two epilogues and glu: prefill_gemm.cu gemm_epilogue_glu)
        for w, col in ((gate_exps, 0), (up_exps, F)):
            _batched(ops, w, ex_d, n_e, F, E, xh, xl, cm, y.data.ptr + 4 * col, 2 * F)
        glu_epilogue(ops, y, sx, g, F, R, act)  # [R, F]
        gh, gl, gs = to_half(ops, g, split)
        _batched(ops, down_exps, ex_d, n_e, E, F, gh, gl, cm, y.data.ptr, E)
        epilogue(ops, y, gs, ds, E, R * E)
        _rows(ops, "moe_scatter_rows", ds, smap, R, E, d)
