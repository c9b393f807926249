"""ModelConfig: every hyperparameter the engine needs, read the way llama.cpp reads it.

References (llama.cpp src/llama-model.cpp load_hparams, llama-hparams.cpp):
- head_dim = attention.key_length, else n_embd / n_head; rope_dim = rope.dimension_count, else head_dim.
- rope_freq_base defaults to 10000; rope_freq_scale = 1 / rope.scaling.factor (1 when absent).
- gemma3: swa_type STANDARD with set_swa_pattern(6): layer il is sliding iff il % 6 < 5 (every 6th
  layer global); rope base of the sliding layers is 10000; attention scale 1/sqrt(head_dim) except the
  62-layer 27B (1/sqrt(n_embd/n_head)); no logit softcapping; inputs scaled by sqrt(n_embd).
- qwen3moe: n_ff_exp = expert_feed_forward_length, else n_ff / n_expert_used; top-k weights are
  renormalised (build_moe_ffn norm_w = true), as for llama MoE.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import GGUFError, UnsupportedArchitectureError

if TYPE_CHECKING:
    from .reader import GGUFFile

SUPPORTED_ARCHS = ("llama", "qwen2", "qwen3", "qwen3moe", "gemma3")
_NEOX = {"qwen2", "qwen3", "qwen3moe", "gemma3"}  # llama.cpp LLAMA_ROPE_TYPE_NEOX for these
GEMMA3_SWA_PATTERN = 6


@dataclass(frozen=True)
class ModelConfig:
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int  # per-head dim of q and k
    head_dim_v: int
    n_ff: int  # dense FFN width (0 if the model has none)
    n_vocab: int
    n_ctx_train: int
    rms_eps: float
    rope_base: float
    rope_type: str  # "norm" (adjacent pairs) | "neox" (first half / second half)
    rope_dim: int
    rope_freq_scale: float
    tie_embeddings: bool  # no output.weight: logits use token_embd.weight
    qkv_bias: bool
    qk_norm: bool
    n_expert: int
    n_expert_used: int
    n_ff_expert: int
    expert_weights_norm: bool
    sliding_window: int | None
    swa_layers: tuple[bool, ...]
    rope_base_swa: float
    attn_scale: float
    attn_softcap: float | None
    final_softcap: float | None
    embed_scale: float
    post_norms: bool
    ffn_act: str  # "silu" | "gelu_tanh"
    rope_scaling: str = "none"  # rope.scaling.type as stored ("none" when absent)
    rope_freqs: bool = False  # a rope_freqs.weight tensor (llama-3.1 style frequency factors) is present
    n_nextn: int = 0  # NextN/MTP blocks stored after the main layers: blk.{n_layer .. n_layer+n_nextn-1}

    # derived sizes
    @property
    def n_embd_q(self) -> int:
        return self.n_head * self.head_dim

    @property
    def n_embd_k(self) -> int:
        return self.n_head_kv * self.head_dim

    @property
    def n_embd_v(self) -> int:
        return self.n_head_kv * self.head_dim_v

    @property
    def n_gqa(self) -> int:
        return self.n_head // self.n_head_kv

    @property
    def is_moe(self) -> bool:
        return self.n_expert > 0

    @classmethod
    def from_gguf(cls, f: GGUFFile) -> ModelConfig:
        return _from_gguf(f)


def _req(f: GGUFFile, suffix: str) -> Any:
    v = f.arch_get(suffix)
    if v is None:
        raise GGUFError(f"{f.path}: missing required metadata key {f.arch}.{suffix}")
    return v


def _per_layer(f: GGUFFile, suffix: str, default: Any) -> int:
    """head counts / ffn width may be stored per layer; the supported archs need them uniform."""
    v = f.arch_get(suffix, default)
    if isinstance(v, list):
        if len(set(v)) != 1:
            raise GGUFError(f"{f.path}: per-layer {f.arch}.{suffix} = {v} (non-uniform) is not supported")
        v = v[0]
    if v is None:
        raise GGUFError(f"{f.path}: missing required metadata key {f.arch}.{suffix}")
    return int(v)


def _from_gguf(f: GGUFFile) -> ModelConfig:
    arch = f.arch
    if arch not in SUPPORTED_ARCHS:
        raise UnsupportedArchitectureError(
            f"{f.path}: unsupported architecture {arch!r}; supported: {', '.join(SUPPORTED_ARCHS)}"
        )
    n_nextn = int(f.arch_get("nextn_predict_layers", 0) or 0)
    n_layer = int(_req(f, "block_count")) - n_nextn  # main layers only (llama.cpp counts NextN in block_count)
    n_embd = int(_req(f, "embedding_length"))
    n_head = _per_layer(f, "attention.head_count", None)
    n_head_kv = _per_layer(f, "attention.head_count_kv", n_head)
    n_ff = _per_layer(f, "feed_forward_length", 0)
    head_dim = int(f.arch_get("attention.key_length", n_embd // n_head))
    head_dim_v = int(f.arch_get("attention.value_length", n_embd // n_head))
    rope_dim = int(f.arch_get("rope.dimension_count", head_dim))
    if arch == "llama" and rope_dim != head_dim:  # llama.cpp rejects this too
        raise GGUFError(f"{f.path}: invalid n_rot {rope_dim}, expected {head_dim}")
    rope_base = float(f.arch_get("rope.freq_base", 10000.0))
    factor = float(f.arch_get("rope.scaling.factor", f.arch_get("rope.scale_linear", 0.0)) or 0.0)
    rope_freq_scale = 1.0 if factor == 0.0 else 1.0 / factor

    if f.has_tensor("token_embd.weight"):
        n_vocab = f.tensor("token_embd.weight").shape[0]
    else:
        n_vocab = int(f.arch_get("vocab_size", len(f.get("tokenizer.ggml.tokens", []))))

    n_expert = int(f.arch_get("expert_count", 0) or 0)
    n_expert_used = int(f.arch_get("expert_used_count", 0) or 0)
    if n_expert and not n_expert_used:
        raise GGUFError(f"{f.path}: {arch}.expert_count={n_expert} but no expert_used_count")
    n_ff_expert = 0
    if n_expert:
        n_ff_expert = int(f.arch_get("expert_feed_forward_length", 0) or 0) or n_ff // n_expert_used
    expert_weights_norm = bool(f.arch_get("expert_weights_norm", n_expert > 0))

    gemma = arch == "gemma3"
    if gemma:
        sliding_window = int(_req(f, "attention.sliding_window"))
        swa_layers = tuple(il % GEMMA3_SWA_PATTERN < GEMMA3_SWA_PATTERN - 1 for il in range(n_layer))
        rope_base_swa = float(f.arch_get("rope.freq_base_swa", 10000.0))
        attn_scale = 1.0 / math.sqrt(n_embd / n_head if n_layer == 62 else head_dim)
        embed_scale = math.sqrt(n_embd)
    else:
        sliding_window = None
        swa_layers = (False,) * n_layer
        rope_base_swa = rope_base
        attn_scale = 1.0 / math.sqrt(head_dim)
        embed_scale = 1.0

    return ModelConfig(
        arch=arch,
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        head_dim_v=head_dim_v,
        n_ff=n_ff,
        n_vocab=int(n_vocab),
        n_ctx_train=int(f.arch_get("context_length", 0) or 0),
        rms_eps=float(_req(f, "attention.layer_norm_rms_epsilon")),
        rope_base=rope_base,
        rope_type="neox" if arch in _NEOX else "norm",
        rope_dim=rope_dim,
        rope_freq_scale=rope_freq_scale,
        tie_embeddings=not f.has_tensor("output.weight"),
        qkv_bias=f.has_tensor("blk.0.attn_q.bias"),
        qk_norm=arch in ("qwen3", "qwen3moe", "gemma3"),
        n_expert=n_expert,
        n_expert_used=n_expert_used,
        n_ff_expert=n_ff_expert,
        expert_weights_norm=expert_weights_norm,
        sliding_window=sliding_window,
        swa_layers=swa_layers,
        rope_base_swa=rope_base_swa,
        attn_scale=attn_scale,
        attn_softcap=None,  # none of the supported archs softcaps in llama.cpp (gemma2 did)
        final_softcap=None,
        embed_scale=embed_scale,
        post_norms=gemma,
        ffn_act="gelu_tanh" if gemma else "silu",
        rope_scaling=str(f.arch_get("rope.scaling.type", "none")),
        rope_freqs=f.has_tensor("rope_freqs.weight"),
        n_nextn=n_nextn,
    )
