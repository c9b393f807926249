"""general.architecture = "qwen3": llama's block with per-head RMSNorm of Q and K before RoPE
("neox"), no QKV bias, head_dim independent of n_embd / n_head. The forward is llama's, unchanged:
the q/k norms (ModelConfig.qk_norm) are applied inside Transformer.attention.
"""

from __future__ import annotations

from .llama import Llama


class Qwen3(Llama):
    arch = "qwen3"
