"""general.architecture = "qwen2" (Qwen2 / Qwen2.5): llama's block with biases on Q, K, V and
"neox" RoPE (first half / second half pairs). The forward is llama's, unchanged: the biases ride in
the fused QKV matmul and the rope mode comes from ModelConfig, both inside Transformer.attention.
"""

from __future__ import annotations

from .llama import Llama


class Qwen2(Llama):
    arch = "qwen2"
