"""RowExactOps: an ops wrapper under which a batched forward (T rows) computes every row with the very
calls a decode step (T = 1) makes, so a speculative verify is bit-identical to plain decode.

Why: on the NumPy backend a T > 1 matmul is one sgemm (`x @ W^T`) while a decode step is an sgemv
(`W @ x`); their summation orders differ, and the attention reductions of a T-row step run over a
longer (masked) key range than decode's. The logits then differ in the last bits (~1e-6 measured on a
tiny qwen3), which can flip a near-tie argmax and, through the KV cache, every later token. Wrapping
the ops keeps the model's forward (one call, T = K+1 rows, one KV append) and makes each row's
arithmetic that of decode: row t runs at position pos+t on [1, ...] slices.

A backend whose T <= 16 kernels already compute each row in the decode order (the cuda qmatvec
accumulates each token's dot product in the same lane/warp order for any T; attention splits keys
in fixed chunks) declares `batch_rows_exact = True` and the verifier uses it unwrapped.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..ops.base import Ops


class RowExactOps:
    """Delegates to `base`; ops whose per-row arithmetic depends on T run row by row."""

    def __init__(self, base: Ops):
        self.base = base
        self._pos = base.zeros((1,), np.int32)  # position of the row being computed

    def __getattr__(self, name: str) -> Any:  # memory, weights, embed, advance, sample, ...
        return getattr(self.base, name)

    def _row_pos(self, pos: Any, t: int) -> Any:
        p0 = int(self.base.to_host(pos)[0])
        self.base.copy_from_host(self._pos, np.array([p0 + t], np.int32))
        return self._pos

    # Ops that a backend may fuse run row by row through the base's own op, so each row takes the very
    # kernels a decode step takes (a composition of the row-wise rmsnorm and matmul_multi would not
    # match a decode step that runs the fused qmv3n, bit for bit)
    def rope_attention(self, q, k, v, pos, k_cache, v_cache, *, rope, attn):
        # row t is decode at pos + t: its key appended, then its attention over keys <= pos + t
        for t in range(q.shape[0]):
            self.base.rope_attention(q[t:t + 1], k[t:t + 1], v[t:t + 1], self._row_pos(pos, t), k_cache, v_cache,
                                     rope=rope, attn={**attn, "out": attn["out"][t:t + 1]})

    def qkv_rope_attention(self, h, norm, eps, ws, *, x, outs, biases, q, k, v, pos, k_cache, v_cache, rope, attn):
        # row t: its Q/K/V, its key appended at pos + t, its attention over keys <= pos + t (a decode step's calls)
        for t in range(q.shape[0]):
            r = slice(t, t + 1)
            self.base.qkv_rope_attention(h[r], norm, eps, ws, x=x[r], outs=[o[r] for o in outs], biases=biases,
                                         q=q[r], k=k[r], v=v[r], pos=self._row_pos(pos, t), k_cache=k_cache,
                                         v_cache=v_cache, rope=rope, attn={**attn, "out": attn["out"][r]})

    def ffn_glu(self, h, norm, eps, w_gate, w_up, act, *, x, g, u):
        for t in range(h.shape[0]):
            self.base.ffn_glu(h[t:t + 1], norm, eps, w_gate, w_up, act, x=x[t:t + 1], g=g[t:t + 1], u=u[t:t + 1])

    def norm_matmul_multi(self, h, norm, eps, ws, *, x, outs, biases=None):
        for t in range(h.shape[0]):
            self.base.norm_matmul_multi(h[t:t + 1], norm, eps, ws, x=x[t:t + 1], outs=[o[t:t + 1] for o in outs],
                                        biases=biases)

    def norm_moe(self, h, norm, eps, router, gate_exps, up_exps, down_exps, *, x, n_used, norm_weights, act, out,
                 residual=None):
        for t in range(h.shape[0]):
            self.base.norm_moe(h[t:t + 1], norm, eps, router, gate_exps, up_exps, down_exps, x=x[t:t + 1],
                               n_used=n_used, norm_weights=norm_weights, act=act, out=out[t:t + 1],
                               residual=None if residual is None else residual[t:t + 1])

    def rmsnorm(self, x, w, eps, *, out, add=None):
        for t in range(x.shape[0]):
            self.base.rmsnorm(x[t:t + 1], w, eps, out=out[t:t + 1], add=None if add is None else add[t:t + 1])

    def add(self, x, y, *, out):
        for t in range(out.shape[0]):
            self.base.add(x[t:t + 1], y[t:t + 1], out=out[t:t + 1])

    def matmul(self, w, x, *, out, bias=None, residual=None):
        for t in range(x.shape[0]):
            self.base.matmul(w, x[t:t + 1], out=out[t:t + 1], bias=bias,
                             residual=None if residual is None else residual[t:t + 1])

    def matmul_norm_ahead(self, w, x, *, out, residual, norm, eps):
        # the plain matmul, row by row: a row's norm then runs as its own op (a backend's norm-ahead keys on the
        # very rows it wrote, which the row-wise consumer's slices are not)
        self.matmul(w, x, out=out, residual=residual)

    def matmul_multi(self, ws, x, *, outs, biases=None):
        for t in range(x.shape[0]):
            self.base.matmul_multi(ws, x[t:t + 1], outs=[o[t:t + 1] for o in outs], biases=biases)

    def rope_kv(self, q, k, v, pos, k_cache, v_cache, **kw):
        for t in range(q.shape[0]):
            self.base.rope_kv(q[t:t + 1], k[t:t + 1], v[t:t + 1], self._row_pos(pos, t), k_cache, v_cache, **kw)

    def attention(self, q, k_cache, v_cache, pos, *, out, **kw):
        # The cache already holds all T rows' keys; row t (decode at pos+t) reads keys <= pos+t only.
        for t in range(q.shape[0]):
            self.base.attention(q[t:t + 1], k_cache, v_cache, self._row_pos(pos, t), out=out[t:t + 1], **kw)

    def glu(self, gate, up, act, *, out):
        for t in range(out.shape[0]):
            self.base.glu(gate[t:t + 1], up[t:t + 1], act, out=out[t:t + 1])

    def moe(self, x, router, gate_exps, up_exps, down_exps, *, out, residual=None, **kw):
        for t in range(x.shape[0]):
            self.base.moe(x[t:t + 1], router, gate_exps, up_exps, down_exps, out=out[t:t + 1],
                          residual=None if residual is None else residual[t:t + 1], **kw)

    def logits(self, x, w, softcap, *, out):
        for t in range(x.shape[0]):
            self.base.logits(x[t:t + 1], w, softcap, out=out[t:t + 1])
