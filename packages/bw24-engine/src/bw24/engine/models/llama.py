"""general.architecture = "llama" (SmolLM2, Llama 2/3): pre-norm blocks, SwiGLU FFN, "norm" RoPE
(llama.cpp's GGUF conversion permutes Q/K so adjacent pairs rotate), tied or untied head.

Shape legend: T tokens in the step, E n_embd, H / Hkv query / kv heads, D head_dim, F n_ff, V n_vocab.
"""

from __future__ import annotations

from typing import Any

from .common import Transformer


class Llama(Transformer):
    arch = "llama"

    def forward(self, T: int, last_only: bool = True) -> Any:
        o, c, b = self.ops, self.cfg, self.buf.view(T)
        o.embed(b.ids, self.w.tok_embd, c.embed_scale, out=b.h)  # [T, E] residual stream
        for i, L in enumerate(self.w.layers):
            # x = rmsnorm(h) (inside the Q/K/V op: a backend may normalize in the matvec), q/k/v, rope,
            # cache append, attention -> b.a [T, H*D]
            self.attention(i, L, b, norm=L.attn_norm)
            o.matmul(L.wo, b.a, out=b.h, residual=b.h)  # h += a Wo^T
            self.dense_ffn(L, b, norm=L.ffn_norm)  # b.g = silu(x Wg^T) * x Wu^T, x = rmsnorm(h)  [T, F]
            o.matmul(L.w_down, b.g, out=b.h, residual=b.h)  # h += g Wd^T
        logits = self.head(b, T, last_only)  # [1 or T, V]
        o.advance(self.kv.pos, T)
        return logits
