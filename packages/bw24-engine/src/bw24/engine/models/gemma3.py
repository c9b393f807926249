"""general.architecture = "gemma3": embeddings scaled by sqrt(E); RMSNorm weights stored as (1 + w)
by llama.cpp's conversion (so a plain x * w here); norms after attention and after the FFN too;
GELU-tanh gating; QK-norm; 5 of every 6 layers attend through a sliding window with their own RoPE
base (rope_base_swa) and no rope scaling; attention scale = query_pre_attn_scalar^-1/2.

Shape legend: T tokens in the step, E n_embd, H / Hkv query / kv heads, D head_dim, F n_ff, V n_vocab.
"""

from __future__ import annotations

from typing import Any

from .common import Transformer


class Gemma3(Transformer):
    arch = "gemma3"

    def forward(self, T: int, last_only: bool = True) -> Any:
        o, c, b = self.ops, self.cfg, self.buf.view(T)
        o.embed(b.ids, self.w.tok_embd, c.embed_scale, out=b.h)  # [T, E] = table[ids] * sqrt(E)
        for i, L in enumerate(self.w.layers):
            self.attention(i, L, b, norm=L.attn_norm)  # norm; q/k/v; qk-norm; rope (swa base locally); window
            o.matmul(L.wo, b.a, out=b.t)  # [T, E]
            o.rmsnorm(b.t, L.post_attn_norm, c.rms_eps, out=b.t)
            o.rmsnorm(b.h, L.ffn_norm, c.rms_eps, out=b.x, add=b.t)  # h += t; x = norm(h)
            self.dense_ffn(L, b)  # b.g = gelu_tanh(x Wg^T) * x Wu^T  [T, F]
            o.matmul(L.w_down, b.g, out=b.t)
            o.rmsnorm(b.t, L.post_ffn_norm, c.rms_eps, out=b.t)
            o.add(b.h, b.t, out=b.h)  # h += t
        logits = self.head(b, T, last_only)  # [1 or T, V]
        o.advance(self.kv.pos, T)
        return logits
