"""Bytes read from memory per decoded token: the decode roofline's numerator.

Weights as stored in the GGUF (the bytes a kernel must stream at least once per token): every
tensor of a dense model, except that the token embedding is a lookup (one row) unless it is also
the tied output head; for MoE, the 3-D expert tensors (`*_exps`) count only the n_expert_used of
n_expert experts a token selects. Plus the KV cache read by attention at the mean context of the
timed tokens, in the engine's KV element size (4 bytes: the engine's cache is float32).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Traffic:
    weight_bytes: int        # weights touched per token
    kv_bytes: int            # KV cache read per token at the mean timed context
    mean_context: float

    @property
    def total(self) -> int:
        return self.weight_bytes + self.kv_bytes


def weight_bytes_per_token(f, cfg) -> int:
    tied = not f.has_tensor("output.weight")
    total = 0
    for name, t in f.tensors.items():
        n = int(t.nbytes)
        if name == "token_embd.weight" and not tied:
            n //= max(int(t.shape[0]), 1)  # one row looked up ([V, E] row-major)
        elif name.endswith("_exps.weight") and cfg.n_expert:
            n = n * cfg.n_expert_used // cfg.n_expert  # selected experts' share
        total += n
    return total


def kv_bytes_per_token(cfg, context: float, elem_bytes: int = 4) -> int:
    """Attention reads K and V of every cached position in every layer (sliding-window layers read
    at most their window)."""
    per_pos = cfg.n_head_kv * (cfg.head_dim + cfg.head_dim_v) * elem_bytes
    total = 0.0
    for i in range(cfg.n_layer):
        swa = bool(cfg.swa_layers[i]) if cfg.swa_layers else False
        ctx = min(context, cfg.sliding_window) if swa and cfg.sliding_window else context
        total += ctx * per_pos
    return int(total)


def decode_traffic(f, cfg, depth: int, tokens: int, kv_elem_bytes: int = 4) -> Traffic:
    """Per-token bytes of a decode of `tokens` tokens after `depth` cached ones (mean context
    depth + (tokens + 1) / 2: token i attends to depth + i + 1 positions)."""
    ctx = depth + (tokens + 1) / 2
    return Traffic(weight_bytes_per_token(f, cfg), kv_bytes_per_token(cfg, ctx, kv_elem_bytes), ctx)
