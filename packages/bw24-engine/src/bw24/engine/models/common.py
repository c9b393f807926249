"""Shared pieces of the forwards: weights by GGUF tensor name, step buffers, the blocks every
architecture uses (attention, dense FFN, head), and the host side of a step (prefill chunks).

Shape legend: T tokens in the step (<= max_batch), E n_embd, H / Hkv query / kv heads, D head_dim,
Dv head_dim_v, F n_ff, V n_vocab, X experts, S n_ctx.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np

from ..errors import EmptyPromptError, TokenIdError, UnsupportedModelError
from ..kv_cache import KVCache
from ..ops.base import Ops


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: Any
    wq: Any
    wk: Any
    wv: Any
    wo: Any
    ffn_norm: Any
    bq: Any = None  # qwen2 QKV biases
    bk: Any = None
    bv: Any = None
    q_norm: Any = None  # qwen3 / gemma3 per-head RMSNorm of q and k
    k_norm: Any = None
    post_attn_norm: Any = None  # gemma3
    post_ffn_norm: Any = None
    w_gate: Any = None  # dense FFN
    w_up: Any = None
    w_down: Any = None
    router: Any = None  # MoE FFN
    gate_exps: Any = None
    up_exps: Any = None
    down_exps: Any = None


@dataclass(frozen=True)
class ModelWeights:
    tok_embd: Any
    output_norm: Any
    output: Any  # the embedding table itself when tied
    layers: tuple[LayerWeights, ...]


def load_weights(f: Any, cfg: Any, ops: Ops, progress: Callable[[int], None] | None = None) -> ModelWeights:
    """Every tensor the forward reads, by llama.cpp's GGUF names, as backend weights."""
    tick = progress or (lambda n: None)

    def mat(name: str, required: bool = True) -> Any:
        if not required and not f.has_tensor(name):
            return None
        w = ops.load_weight(f.tensor(name))
        tick(1)
        return w

    def vec(name: str, required: bool = True) -> Any:
        if not required and not f.has_tensor(name):
            return None
        w = ops.load_vector(f.tensor(name))
        tick(1)
        return w

    layers = []
    for i in range(cfg.n_layer):
        p = f"blk.{i}."
        kw: dict[str, Any] = dict(
            attn_norm=vec(p + "attn_norm.weight"), wq=mat(p + "attn_q.weight"), wk=mat(p + "attn_k.weight"),
            wv=mat(p + "attn_v.weight"), wo=mat(p + "attn_output.weight"), ffn_norm=vec(p + "ffn_norm.weight"),
        )
        if cfg.qkv_bias:
            kw |= dict(bq=vec(p + "attn_q.bias"), bk=vec(p + "attn_k.bias"), bv=vec(p + "attn_v.bias"))
        if cfg.qk_norm:
            kw |= dict(q_norm=vec(p + "attn_q_norm.weight"), k_norm=vec(p + "attn_k_norm.weight"))
        if cfg.post_norms:
            kw |= dict(post_attn_norm=vec(p + "post_attention_norm.weight"),
                       post_ffn_norm=vec(p + "post_ffw_norm.weight"))
        if cfg.is_moe:
            kw |= dict(router=mat(p + "ffn_gate_inp.weight"), gate_exps=mat(p + "ffn_gate_exps.weight"),
                       up_exps=mat(p + "ffn_up_exps.weight"), down_exps=mat(p + "ffn_down_exps.weight"))
        else:
            kw |= dict(w_gate=mat(p + "ffn_gate.weight"), w_up=mat(p + "ffn_up.weight"),
                       w_down=mat(p + "ffn_down.weight"))
        layers.append(LayerWeights(**kw))
    tok_embd = mat("token_embd.weight")
    output = tok_embd if cfg.tie_embeddings else mat("output.weight")
    return ModelWeights(tok_embd, vec("output_norm.weight"), output, tuple(layers))


def count_tensors(cfg: Any) -> int:
    """How many tensors load_weights reads (for the progress bar)."""
    per = 6 + 3 * cfg.qkv_bias + 2 * cfg.qk_norm + 2 * cfg.post_norms + (4 if cfg.is_moe else 3)
    return cfg.n_layer * per + 2 + (not cfg.tie_embeddings)


class Buffers:
    """Activations for up to max_batch tokens, allocated once; view(T) gives [T, ...] slices (cached,
    so a step at a given T always touches the same addresses, as a captured graph needs). Logits for up
    to logit_rows of them (ops.logit_rows where the backend sets one, else max_batch): a prefill chunk
    needs only its last row's, and a vocabulary-wide row per token of a long chunk is most of the
    activations' bytes (512 rows x 151936 x 4 B = 311 MB); feed(all_logits=True) chunks by logit_rows."""

    def __init__(self, ops: Ops, cfg: Any, max_batch: int):
        c, m = cfg, max_batch
        self.logit_rows = min(m, getattr(ops, "logit_rows", None) or m)
        f = c.n_ff_expert if c.is_moe else c.n_ff
        self.ops, self.cfg, self.max_batch = ops, cfg, max_batch
        self.ids = ops.zeros((m,), np.int32)
        self.h, self.x, self.t = (ops.zeros((m, c.n_embd)) for _ in range(3))
        self.q, self.a = ops.zeros((m, c.n_head * c.head_dim)), ops.zeros((m, c.n_head * c.head_dim_v))
        self.k, self.v = ops.zeros((m, c.n_head_kv * c.head_dim)), ops.zeros((m, c.n_head_kv * c.head_dim_v))
        self.g, self.u = ops.zeros((m, max(f, 1))), ops.zeros((m, max(f, 1)))
        self.logits = ops.zeros((self.logit_rows, c.n_vocab))
        self._views: dict[int, SimpleNamespace] = {}

    def view(self, T: int) -> SimpleNamespace:
        if T not in self._views:
            c = self.cfg
            self._views[T] = SimpleNamespace(
                ids=self.ids[:T], h=self.h[:T], x=self.x[:T], t=self.t[:T], g=self.g[:T], u=self.u[:T],
                q=self.q[:T], k=self.k[:T], v=self.v[:T], a=self.a[:T], logits=self.logits[:min(T, self.logit_rows)],
                q3=self.q[:T].reshape(T, c.n_head, c.head_dim), k3=self.k[:T].reshape(T, c.n_head_kv, c.head_dim),
                v3=self.v[:T].reshape(T, c.n_head_kv, c.head_dim_v),
                a3=self.a[:T].reshape(T, c.n_head, c.head_dim_v),
            )
        return self._views[T]


PREFILL_GRAPH_SIZES = 4  # prefill chunk sizes with a captured graph at a time (Transformer._prefill_graph)


@contextmanager
def position_free(ops: Ops) -> Iterator[None]:
    """The prefill graphs' kernel choice (CudaOps.in_prefill_graph: the attention's position-free path) for
    the chunks run inside: a PrefillGraph's eager first run, capture and replays, and the eager chunks of a
    model whose chunks of that size take graphs (Transformer.feed with all logits or hidden rows), so a
    prompt leaves the same cache bit for bit whichever way it was fed."""
    ops.in_prefill_graph = True
    try:
        yield
    finally:
        ops.in_prefill_graph = False


class PrefillGraph:
    """A prefill chunk of T prompt rows as one captured forward, for a backend with
    prefill_graphs (CudaOps; on unless BW24_PREFILL_GRAPH=0): ops.capture runs the first chunk of this size
    eagerly (compiles, sizes scratch), captures at the second and replays from then on. The forward reads
    its position from kv.pos on the device and advances it there, and keeps its rows in the fixed buffers,
    so one graph serves every T-token chunk of every prompt. A captured graph holds the scratch pointers it saw: when
    the backend's scratch generation moves (a longer all-logits chunk, a larger verify), the next chunk
    runs eagerly and the one after captures again. A model whose forward reads the device on the host (MoE
    routing: Transformer.prefill_capturable False) takes none."""

    def __init__(self, model: Transformer, T: int):
        self.model, self.T = model, T
        self.out: Any = None  # forward's logits view: the same buffer rows at every replay
        self._new()

    def _new(self) -> None:
        def step() -> None:
            self.out = self.model.forward(self.T, last_only=True)

        self.run, self.gen, self.kv = self.model.ops.capture(step), None, self.model.kv

    def __call__(self) -> Any:
        ops = self.model.ops
        if (self.gen is not None and self.gen != ops._scratch_gen) or self.model.kv is not self.kv:
            self._new()  # moved scratch, or another cache swapped in (Engine._exact_cache)
        with position_free(ops):  # eager first run, capture and replays: the same position-free kernels
            self.run()
        if self.gen is None and self.run.graph_state["g"] is not None:
            self.gen = ops._scratch_gen  # the pointers this graph baked in
        return self.out


class Transformer:
    """A decoder-only transformer over an op backend; subclasses write forward() top to bottom."""

    arch: ClassVar[str]
    # False where forward() reads the device on the host (a MoE model's routing in prefill): such a forward
    # is never captured, so its chunks take no PrefillGraph and keep the backend's eager kernel choices
    prefill_capturable: ClassVar[bool] = True

    def __init__(self, f: Any, cfg: Any, ops: Ops, *, n_ctx: int, max_batch: int = 128,
                 progress: Callable[[int], None] | None = None):
        if cfg.rope_freqs:
            raise UnsupportedModelError(f"{f.path}: rope_freqs.weight (llama-3.1 rope factors) is not supported")
        if cfg.rope_scaling not in ("none", "linear"):
            raise UnsupportedModelError(f"{f.path}: rope scaling {cfg.rope_scaling!r} is not supported")
        self.cfg, self.ops, self.max_batch = cfg, ops, max_batch
        self.w = load_weights(f, cfg, ops, progress)
        self.kv = KVCache(ops, cfg.n_layer, cfg.n_head_kv, cfg.head_dim, cfg.head_dim_v, n_ctx)
        self.buf = Buffers(ops, cfg, max_batch)

    def forward(self, T: int, last_only: bool = True) -> Any:
        """Run the T tokens in buf.ids[:T] at positions kv.pos.. ; return logits [T or 1, V] (a view
        of buf.logits) and advance kv.pos by T."""
        raise NotImplementedError

    # ---- blocks shared by the forwards --------------------------------------------------------
    def attention(self, i: int, L: LayerWeights, b: SimpleNamespace, norm: Any = None) -> None:
        """b.x (normed input, [T, E]) -> b.a (attention output before the output projection, [T, H*Dv]);
        with `norm`, the input is rmsnorm(b.h) * norm, normalized by the Q/K/V op itself (b.x is scratch)."""
        o, c, kv = self.ops, self.cfg, self.kv
        ws, outs = (L.wq, L.wk, L.wv), (b.q, b.k, b.v)  # [T, H*D], [T, Hkv*D], [T, Hkv*Dv]
        biases = (L.bq, L.bk, L.bv) if c.qkv_bias else None
        swa = c.swa_layers[i]
        # qk-norm (per head over D, before RoPE) is fused into rope_kv; L.q_norm/k_norm are None otherwise
        rope = dict(mode=c.rope_type, rope_dim=c.rope_dim, base=c.rope_base_swa if swa else c.rope_base,
                    freq_scale=1.0 if swa else c.rope_freq_scale, q_norm=L.q_norm, k_norm=L.k_norm, norm_eps=c.rms_eps)
        # n_keys: kv.n_past already counts these T (reserve before forward)
        attn = dict(scale=c.attn_scale, softcap=c.attn_softcap, window=c.sliding_window if swa else None, out=b.a3,
                    n_keys=kv.n_past)
        # Q/K/V of b.x (or of rmsnorm(b.h) * norm), rope, the cache append, attention -> b.a3 [T, H, Dv]
        o.qkv_rope_attention(b.h, norm, c.rms_eps, ws, x=b.x, outs=outs, biases=biases, q=b.q3, k=b.k3, v=b.v3,
                             pos=kv.pos, k_cache=kv.k[i], v_cache=kv.v[i], rope=rope, attn=attn)

    def dense_ffn(self, L: LayerWeights, b: SimpleNamespace, norm: Any = None) -> None:
        """b.x -> b.g = act(x Wg^T) * (x Wu^T), [T, F] (the down projection is the caller's); with `norm`,
        x = rmsnorm(b.h) * norm, normalized by the gate/up op itself (b.x is scratch)."""
        o = self.ops
        if norm is None:
            o.matmul_multi((L.w_gate, L.w_up), b.x, outs=(b.g, b.u))
            o.glu(b.g, b.u, self.cfg.ffn_act, out=b.g)
        else:
            o.ffn_glu(b.h, norm, self.cfg.rms_eps, L.w_gate, L.w_up, self.cfg.ffn_act, x=b.x, g=b.g, u=b.u)

    def head(self, b: SimpleNamespace, T: int, last_only: bool) -> Any:
        """Final norm and logits of the last row (or all rows)."""
        o, c = self.ops, self.cfg
        rows = slice(T - 1, T) if last_only else slice(0, T)
        assert T - rows.start <= b.logits.shape[0], f"logits of {T} rows: the buffer holds {b.logits.shape[0]}"
        o.rmsnorm(b.h[rows], self.w.output_norm, c.rms_eps, out=b.x[rows])
        out = b.logits[: T - rows.start]
        o.logits(b.x[rows], self.w.output, c.final_softcap, out=out)  # [1 or T, V]
        return out

    # ---- host side of a step ------------------------------------------------------------------
    def _prefill_graph(self, T: int) -> PrefillGraph | None:
        """The captured forward of a T-token chunk where the backend has prefill graphs; else None (eager).
        One PrefillGraph per chunk size, the PREFILL_GRAPH_SIZES most recently used kept: the full chunk of
        a long prompt and a prompt's last, shorter chunk (a 512-token prompt under 2048-token chunks) each
        replay from their second run; a size seen once stays eager (ops.capture's first run)."""
        if not self._graphed(T):
            return None
        graphs = self.__dict__.setdefault("_prefill_graphs", {})  # T -> PrefillGraph, least recent first
        g = graphs.pop(T, None)
        if g is None:
            g = PrefillGraph(self, T)
            if len(graphs) >= PREFILL_GRAPH_SIZES:
                graphs.pop(next(iter(graphs)))
        graphs[T] = g
        return g

    def _graphed(self, T: int) -> bool:
        """Whether this model's prefill chunks of T rows take a PrefillGraph (and its kernel choice)."""
        o = self.ops
        return self.prefill_capturable and getattr(o, "prefill_graphs", False) and T > (o.graph_rows or 0)

    def _eager_chunk(self, T: int, last_only: bool) -> Any:
        """A chunk run outside a PrefillGraph. Where chunks of T rows take graphs (all logits or hidden rows
        asked for: MTP drafting's prompt), with the graphs' kernel choice, else this cache would differ from
        plain decode's: at 6e0baa5 the H200's MTP spec run diverged from plain decode at its 88th token, its
        eager prompt on the flash attention and plain decode's graphs on the mma one."""
        if not self._graphed(T):
            return self.forward(T, last_only)
        with position_free(self.ops):
            return self.forward(T, last_only)

    def check_ids(self, ids: Sequence[int]) -> np.ndarray:
        a = np.asarray(ids, dtype=np.int64).reshape(-1)
        bad = a[(a < 0) | (a >= self.cfg.n_vocab)]
        if bad.size:
            raise TokenIdError(f"token id {int(bad[0])} outside the vocabulary [0, {self.cfg.n_vocab})")
        return a.astype(np.int32)

    def feed(self, ids: Sequence[int], all_logits: bool = False, hidden: list | None = None) -> np.ndarray:
        """Append tokens to the context in chunks of max_batch (of the buffers' logit_rows with
        all_logits); host logits of the last token ([1, V]) or of every token ([len(ids), V]). With
        `hidden`, each chunk's final hidden rows ([T, E], after the output norm) are appended to it (MTP
        drafting needs them)."""
        a = self.check_ids(ids)
        if a.size == 0:
            raise EmptyPromptError("no tokens to feed")
        if self.kv.n_past + a.size > self.kv.n_ctx:
            self.kv.reserve(a.size)  # raises ContextLimitError before any chunk runs
        rows = []
        step = self.buf.logit_rows if all_logits else self.max_batch
        for s in range(0, a.size, step):
            chunk = a[s : s + step]
            T = chunk.size
            self.kv.reserve(T)
            b = self.buf.view(T)
            self.ops.copy_from_host(b.ids, chunk)
            last = s + T == a.size
            graph = self._prefill_graph(T) if not all_logits and hidden is None else None
            out = graph() if graph is not None else self._eager_chunk(T, last_only=not all_logits)
            if hidden is not None:
                hidden.append(self.ops.to_host(b.h))
            if all_logits or last:
                rows.append(self.ops.to_host(out))
        return np.concatenate(rows, axis=0)
