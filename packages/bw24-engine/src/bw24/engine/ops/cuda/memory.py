"""VRAM planning for CudaOps: what a model will need, checked against free device memory before the
first byte is uploaded (a clear error instead of an out-of-memory crash halfway), and what it used.

Weights are counted as the repacked planes the kernels read (kernels/quant.cuh: bits per weight below),
1-D tensors as float32; KV and activations from the same formulas KVCache and Buffers allocate with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gguf.constants import GGMLQuantizationType as Q

from ...errors import EngineError

# Repacked bits per weight: value planes + per-group scales (quant.cuh's plane list).
PLANE_BITS = {Q.F32: 32.0, Q.F16: 16.0, Q.BF16: 16.0, Q.Q8_0: 8.5, Q.Q4_0: 4.5, Q.Q4_1: 5.0, Q.Q5_0: 5.5,
              Q.Q4_K: 4.625, Q.Q5_K: 5.625, Q.Q6_K: 6.5625}
MARGIN = 256 << 20  # CuPy pool rounding, cuBLAS workspace, kernel modules


class ModelDoesNotFitError(EngineError):
    """The model, its KV cache and activations need more device memory than is free."""


@dataclass(frozen=True)
class MemoryPlan:
    weights: int  # repacked weight planes + float32 vectors
    gguf_tensors: int  # the GGUF's tensor bytes (the budget: gguf + kv + 1 GiB)
    kv: int
    activations: int  # step buffers
    scratch: int  # prefill GEMM chunk, attention splits, MoE and sampling scratch

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.activations + self.scratch + MARGIN


def plan(f, cfg, n_ctx: int, max_batch: int, prefill_scratch: int = 64 << 20, attn_chunk: int = 128,
         kv_bytes: int = 4, logit_rows: int | None = None) -> MemoryPlan:
    """logit_rows: the rows of logits the buffers hold (models/common.Buffers; None: max_batch); a prefill
    GEMM's result [T, N] spans the vocabulary only for an all-logits chunk, at most that many rows."""
    lr = min(max_batch, logit_rows or max_batch)
    weights = gguf = 0
    max_rows, max_k = 0, cfg.n_embd
    for ti in f.tensors.values():
        gguf += int(ti.nbytes)
        numel = math.prod(ti.shape)
        if len(ti.shape) == 1:
            weights += 4 * numel
        else:
            weights += math.ceil(numel * PLANE_BITS.get(ti.qtype, 32.0) / 8)
            if int(ti.shape[-2]) != cfg.n_vocab:  # the head's [T, V] result: logit rows only (below)
                max_rows = max(max_rows, int(ti.shape[-2]))
            max_k = max(max_k, int(ti.shape[-1]))
    c, m = cfg, max_batch
    # prefill.stacked_gemm's result holds Q/K/V or gate/up side by side
    max_rows = max(max_rows, 2 * c.n_ff, c.n_head * c.head_dim + c.n_head_kv * (c.head_dim + c.head_dim_v))
    kv = kv_bytes * c.n_layer * n_ctx * c.n_head_kv * (c.head_dim + c.head_dim_v)  # 4: fp32, 2: fp16 cache
    ff = c.n_ff_expert if c.is_moe else c.n_ff
    act = 4 * m * (3 * c.n_embd + c.n_head * (c.head_dim + c.head_dim_v) + c.n_head_kv * (c.head_dim + c.head_dim_v)
                   + 2 * max(ff, 1)) + 4 * lr * c.n_vocab + 4 * m
    ns = math.ceil(n_ctx / attn_chunk)
    # prefill GEMM (ops/cuda/prefill.py): fp16 weight chunk (hi + lo), fp32 result [T, N], x as fp16
    # hi + lo [T, K] and row scales [T]
    scratch = prefill_scratch + 4 * max(m * max_rows, lr * c.n_vocab) + 2 * 2 * m * max_k + 4 * m
    scratch += 4 * m * c.n_head * ns * (2 + c.head_dim_v)
    if c.is_moe:
        from .moe import PREFILL_T

        slots = m * c.n_expert_used  # router logits, picks, weights, down outputs; gate / up: decode steps' only
        scratch += 4 * (m * c.n_expert + 2 * slots + slots * c.n_embd
                        + min(m, PREFILL_T) * c.n_expert_used * 2 * c.n_ff_expert)
        # prefill (moe_prefill.py expert_ffn): <= 16 x (tokens + 8) padded rows of x, its fp16 halves, GEMM
        # result, gate, up, down output, its tokens at most EXPERT_TOKENS at a time; its expert weight chunk grows
        # the dense prefill's scratch
        from .moe_prefill import EXPERT_TOKENS, MOE_SCRATCH, ROWS_PER_TOKEN

        scratch += 4 * ROWS_PER_TOKEN * (min(m, EXPERT_TOKENS) + 8) * (4 * c.n_embd + 4 * c.n_ff_expert)
        scratch += max(0, MOE_SCRATCH - prefill_scratch)
    scratch += 32 * c.n_vocab  # sampling: l, w, key, two lists
    # rope tables (norm.rope_table): (cos, sin) float32 per (position, pair); two for gemma3's two bases
    scratch += 2 * 8 * n_ctx * (c.rope_dim // 2)
    return MemoryPlan(weights, gguf, kv, act, scratch)


def device_free() -> tuple[int, int]:
    """(bytes free for new allocations: driver free + CuPy pool's cached blocks, total)."""
    import cupy

    free, total = cupy.cuda.runtime.memGetInfo()
    return int(free) + int(cupy.get_default_memory_pool().free_bytes()), int(total)


def check_fit(p: MemoryPlan, name: str, free: int) -> None:
    if p.total > free:
        g = 2**30
        raise ModelDoesNotFitError(
            f"{name} does not fit in GPU memory: needs {p.total / g:.2f} GiB (weights {p.weights / g:.2f}, "
            f"KV cache {p.kv / g:.2f}, activations {p.activations / g:.2f}, scratch {p.scratch / g:.2f}, "
            f"margin {MARGIN / g:.2f}) but {free / g:.2f} GiB is free; use a smaller --n-ctx or a smaller model")


def used_bytes() -> int:
    import cupy

    return int(cupy.get_default_memory_pool().used_bytes())


def report(p: MemoryPlan | None, weight_bytes: int, baseline: int, scratch: dict[str, int] | None = None,
           scratch_peak: int = 0) -> str:
    """One line for run-gen: VRAM held by this engine, and the issue's bound (gguf + KV + 1 GiB); with scratch
    (CudaOps._scratch's bytes by key), what it holds and its largest keys, so a run over the bound says where;
    scratch_peak (CudaOps.scratch_peak: the most scratch held at once, the gate's exact half's own blocks counted
    while they lived), where above what is held."""
    g = 2**30
    used = used_bytes() - baseline
    s = f"VRAM used {used / g:.3f} GiB (weights {weight_bytes / g:.3f} GiB"
    if p is None:
        return s + ")"
    bound = p.gguf_tensors + p.kv + g
    held = ""
    if scratch:
        top = sorted(scratch.items(), key=lambda kv: -kv[1])[:4]
        total = sum(scratch.values())
        held = (f"; scratch {total / g:.3f} GiB, largest "
                + ", ".join(f"{k} {n / g:.3f}" for k, n in top))
        if scratch_peak > total:
            held += f"; scratch peak {scratch_peak / g:.3f} GiB"
    return (s + f", KV {p.kv / g:.3f} GiB{held}; planned {p.total / g:.3f} GiB; bound gguf+KV+1GiB = {bound / g:.3f} GiB "
            f"{'OK' if used <= bound else 'EXCEEDED'})")
