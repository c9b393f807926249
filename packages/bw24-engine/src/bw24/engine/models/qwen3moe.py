"""general.architecture = "qwen3moe": qwen3's attention, and a mixture-of-experts FFN: softmax
router over X experts, top n_expert_used, weights renormalized (expert_weights_norm), SwiGLU experts.

Shape legend: T tokens in the step, E n_embd, H / Hkv query / kv heads, D head_dim,
X experts, F n_ff_expert, V n_vocab.
"""

from __future__ import annotations

from typing import Any

from .common import Transformer


class Qwen3Moe(Transformer):
    arch = "qwen3moe"

    @property
    def prefill_capturable(self) -> bool:  # type: ignore[override]
        """Prefill graphs only where the routing stays on the device: every layer's experts on the grouped GEMMs
        (BW24_MOE_GROUPED, ops/cuda/moe_prefill.py grouped); the host-planned expert_ffn reads it on the host."""
        o = self.ops
        if not getattr(o, "moe_grouped", False):
            return False
        from ..ops.cuda.moe_prefill import grouped

        return all(grouped(o, L.gate_exps, L.up_exps, self.cfg.n_embd, L.gate_exps.shape[1]) for L in self.w.layers)

    def forward(self, T: int, last_only: bool = True) -> Any:
        o, c, b = self.ops, self.cfg, self.buf.view(T)
        o.embed(b.ids, self.w.tok_embd, c.embed_scale, out=b.h)  # [T, E]
        for i, L in enumerate(self.w.layers):
            self.attention(i, L, b, norm=L.attn_norm)  # as qwen3 -> b.a [T, H*D]
            o.matmul(L.wo, b.a, out=b.h, residual=b.h)
            o.norm_moe(b.h, L.ffn_norm, c.rms_eps, L.router, L.gate_exps, L.up_exps, L.down_exps, x=b.x,
                       n_used=c.n_expert_used, norm_weights=c.expert_weights_norm, act=c.ffn_act, out=b.h,
                       residual=b.h)  # x = rmsnorm(h) * ffn_norm; h += moe(x)
        logits = self.head(b, T, last_only)  # [1 or T, V]
        o.advance(self.kv.pos, T)
        return logits
