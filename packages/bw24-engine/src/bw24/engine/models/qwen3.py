"""general.architecture = "qwen3": llama's block with per-head RMSNorm of Q and K before RoPE
("neox"), no QKV bias, head_dim independent of n_embd / n_head.

Shape legend: T tokens in the step, E n_embd, H / Hkv query / kv heads, D head_dim, F n_ff, V n_vocab.
"""

from __future__ import annotations

from typing import Any

from .common import Transformer


class Qwen3(Transformer):
    arch = "qwen3"

    def forward(self, T: int, last_only: bool = True) -> Any:
        o, c, b = self.ops, self.cfg, self.buf.view(T)
        o.embed(b.ids, self.w.tok_embd, c.embed_scale, out=b.h)  # [T, E]
        for i, L in enumerate(self.w.layers):
            o.rmsnorm(b.h, L.attn_norm, c.rms_eps, out=b.x)
            self.attention(i, L, b)  # q/k/v; q-norm, k-norm over D per head; rope; cache; attention
            o.matmul(L.wo, b.a, out=b.h, residual=b.h)  # [T, H*D] -> h += [T, E]
            o.rmsnorm(b.h, L.ffn_norm, c.rms_eps, out=b.x)
            self.dense_ffn(L, b)  # [T, F]
            o.matmul(L.w_down, b.g, out=b.h, residual=b.h)
        logits = self.head(b, T, last_only)  # [1 or T, V]
        o.advance(self.kv.pos, T)
        return logits
