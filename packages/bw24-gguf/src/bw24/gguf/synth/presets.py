"""Model shapes for the synthetic writer: real architectures' hyperparameters, and tiny ones for CPU tests.

Real shapes from the models' HF config.json (Qwen3-0.6B/8B/32B, Qwen3-30B-A3B, Meta-Llama-3-8B).
Tiny presets keep every matrix row a multiple of 256 so every quant mix (K-quants included) applies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Preset:
    name: str
    arch: str  # general.architecture
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    n_ctx: int = 4096
    rope_base: float = 1e6
    rms_eps: float = 1e-6
    tied: bool = False  # no output.weight: logits use token_embd
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_expert: int = 0
    sliding_window: int = 0  # gemma3 only

    @property
    def qkv_bias(self) -> bool:
        return self.arch == "qwen2"

    @property
    def qk_norm(self) -> bool:
        return self.arch in ("qwen3", "qwen3moe", "gemma3")

    def with_layers(self, n_layer: int) -> Preset:
        return replace(self, n_layer=n_layer, name=f"{self.name}-{n_layer}l")

    def n_params(self) -> int:
        e, hd = self.n_embd, self.head_dim
        attn = e * hd * (2 * self.n_head + 2 * self.n_head_kv)
        ffn = 3 * e * (self.n_ff_expert * self.n_expert if self.n_expert else self.n_ff)
        head = self.n_vocab * e * (1 if self.tied else 2)
        return self.n_layer * (attn + ffn) + head


_QWEN_VOCAB = 151936
PRESETS: dict[str, Preset] = {
    p.name: p
    for p in [
        Preset("qwen3-0.6b", "qwen3", 28, 1024, 16, 8, 128, 3072, _QWEN_VOCAB, 40960, tied=True),
        Preset("qwen3-8b", "qwen3", 36, 4096, 32, 8, 128, 12288, _QWEN_VOCAB, 40960),
        Preset("qwen3-32b", "qwen3", 64, 5120, 64, 8, 128, 25600, _QWEN_VOCAB, 40960),
        Preset("qwen3-30b-a3b", "qwen3moe", 48, 2048, 32, 4, 128, 6144, _QWEN_VOCAB, 40960,
               n_expert=128, n_expert_used=8, n_ff_expert=768),
        Preset("llama-3-8b", "llama", 32, 4096, 32, 8, 128, 14336, 128256, 8192, rope_base=5e5, rms_eps=1e-5),
        # tiny: a few layers, small dims, small vocab (CPU tests)
        Preset("llama-tiny", "llama", 2, 256, 4, 2, 64, 512, 512, 256, rope_base=1e4, rms_eps=1e-5),
        Preset("qwen2-tiny", "qwen2", 2, 256, 4, 2, 64, 512, 512, 256, tied=True),
        Preset("qwen3-tiny", "qwen3", 2, 256, 4, 2, 64, 512, 512, 256),
        Preset("qwen3moe-tiny", "qwen3moe", 2, 256, 4, 2, 64, 512, 512, 256,
               n_expert=8, n_expert_used=2, n_ff_expert=256),
        # 6 layers: layers 0-4 sliding (window 16), layer 5 global
        Preset("gemma3-tiny", "gemma3", 6, 256, 2, 1, 128, 512, 512, 256, rope_base=1e6, tied=True,
               sliding_window=16),
    ]
}
