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
        layers = self.w.layers
        for i, L in enumerate(layers):
            # x = rmsnorm(h) (inside the Q/K/V op: a backend may normalize in the matvec), q/k/v, rope,
            # cache append, attention -> b.a [T, H*D]
            self.attention(i, L, b, norm=L.attn_norm)
            # h += a Wo^T, whose norm the FFN takes next (a backend may start it in the matvec: matmul_norm_ahead)
            o.matmul_norm_ahead(L.wo, b.a, out=b.h, residual=b.h, norm=L.ffn_norm, eps=c.rms_eps)
            self.dense_ffn(L, b, norm=L.ffn_norm)  # b.g = silu(x Wg^T) * x Wu^T, x = rmsnorm(h)  [T, F]
            if i + 1 < len(layers):  # h += g Wd^T, normalized by the next layer's Q/K/V op
                o.matmul_norm_ahead(L.w_down, b.g, out=b.h, residual=b.h, norm=layers[i + 1].attn_norm, eps=c.rms_eps)
            else:  # (the head's norm stays its own op)
                o.matmul(L.w_down, b.g, out=b.h, residual=b.h)
        logits = self.head(b, T, last_only)  # [1 or T, V]
        o.advance(self.kv.pos, T)
        return logits
