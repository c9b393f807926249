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
        o.rmsnorm(b.h, layers[0].attn_norm, c.rms_eps, out=b.x)  # [T, E]
        for i, L in enumerate(layers):
            self.attention(i, L, b)  # q/k/v, rope, cache append, attention -> b.a [T, H*D]
            # h += a Wo^T; x = rmsnorm(h) (the output projection and the norm after it: one op, which a
            # backend may run as one launch)
            o.matmul_norm(L.wo, b.a, out=b.h, residual=b.h, norm=L.ffn_norm, eps=c.rms_eps, norm_out=b.x)
            self.dense_ffn(L, b)  # b.g = silu(x Wg^T) * x Wu^T  [T, F]
            nxt = layers[i + 1].attn_norm if i + 1 < len(layers) else self.w.output_norm
            o.matmul_norm(L.w_down, b.g, out=b.h, residual=b.h, norm=nxt, eps=c.rms_eps, norm_out=b.x)  # h += g Wd^T
        logits = self.head(b, T, last_only, normed=True)  # [1 or T, V]; every row of x already normed
        o.advance(self.kv.pos, T)
        return logits
