"""MTP (NextN) drafting from the heads some GGUFs carry after the main layers (blk.{n_layer}.*), as
DeepSeek-V3 / GLM-4.5 define them and llama.cpp / vLLM run them:

    x_i  = eh_proj @ concat(enorm(Emb(t_{i+1})), hnorm(h_i))        [T, 2E] -> [T, E]
    g_i  = Block(x_i)                     (a full decoder block of the arch, its own KV cache)
    P(t_{i+2}) = softmax(head(shared_head_norm(g_i)))   (embedding and head shared with the target)

h_i is the target's final hidden state at position i after its output norm (what llama.cpp's t_embd
and vLLM's previous_hidden_states hold). Drafting K > 1 chains the one head: the next step feeds g_i
(the block output before shared_head_norm) as h and the drafted token as t.

The head's KV entry at position i is only kept when it came from the target's true h_i; chained
entries are dropped at rollback and recomputed in one batch from the verify's hidden rows.
Reusing the architecture's forward: a model object with one layer (the NextN block) whose ops wrapper
turns the embedding step into the eh_proj combination above, and whose output norm is shared_head_norm.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace

import numpy as np

from ..kv_cache import KVCache
from ..models.common import Buffers, ModelWeights, load_weights
from .base import Draft, NoMTPHeadError, context_counts, pick
from .frspec import trim_head


class _NextNInputOps:
    """ops wrapper: embed() writes eh_proj(concat(enorm(emb), hnorm(h))) for the rows in self.h."""

    def __init__(self, base, cfg, enorm, hnorm, eh_proj, max_batch: int):
        self.base, self.cfg = base, cfg
        self.enorm, self.hnorm, self.eh_proj = enorm, hnorm, eh_proj
        E = cfg.n_embd
        self.h = base.zeros((max_batch, E))  # filled by the drafter before each forward
        self.e = base.zeros((max_batch, E))
        self.cat = base.zeros((max_batch, 2 * E))

    def __getattr__(self, name):
        return getattr(self.base, name)

    def embed(self, ids, table, scale, *, out):
        o, T, E, eps = self.base, ids.shape[0], self.cfg.n_embd, self.cfg.rms_eps
        e, h, cat = self.e[:T], self.h[:T], self.cat[:T]
        o.embed(ids, table, scale, out=e)
        o.rmsnorm(e, self.enorm, eps, out=e)  # kernels want contiguous rows: normalize, then concatenate
        o.rmsnorm(h, self.hnorm, eps, out=h)
        cat[:, :E] = e  # [T, 2E]: the order of DeepSeek-V3 / vLLM / llama.cpp checkpoints (emb first)
        cat[:, E:] = h
        o.matmul(self.eh_proj, cat, out=out)


class MTPDrafter:
    name = "mtp"
    needs_hidden = True
    on_device = True  # propose_into: drafts chained on the device

    def __init__(self, target, gguf, *, head_index: int = 0, frspec_ids: np.ndarray | None = None):
        cfg, ops = target.cfg, target.ops
        if cfg.n_nextn <= head_index:
            raise NoMTPHeadError(f"{gguf.path.name}: no NextN/MTP head ({cfg.arch}.nextn_predict_layers="
                                 f"{cfg.n_nextn}); write one with `bw24-gguf synth PRESET OUT --mtp`")
        il = cfg.n_layer + head_index
        # load_weights over n_layer + n_nextn blocks: the main layers come from the ops' weight cache
        allw = load_weights(gguf, replace(cfg, n_layer=cfg.n_layer + cfg.n_nextn), ops)
        p = f"blk.{il}.nextn."
        vec = lambda n: ops.load_vector(gguf.tensor(p + n))  # noqa: E731
        hcfg = replace(cfg, n_layer=1, swa_layers=(False,))
        self.target, self.cfg, self.ops = target, hcfg, ops
        self.out_norm = target.w.output_norm
        mb = target.max_batch
        m = type(target).__new__(type(target))  # the arch's forward over one block, no weight loading
        m.cfg, m.max_batch = hcfg, mb
        m.ops = _NextNInputOps(ops, cfg, vec("enorm.weight"), vec("hnorm.weight"),
                               ops.load_weight(gguf.tensor(p + "eh_proj.weight")), mb)
        m.w = ModelWeights(target.w.tok_embd, vec("shared_head_norm.weight"), target.w.output, (allw.layers[il],))
        m.kv = KVCache(ops, 1, cfg.n_head_kv, cfg.head_dim, cfg.head_dim_v, target.kv.n_ctx)
        m.buf = Buffers(ops, hcfg, mb)
        if frspec_ids is not None:  # FR-Spec: the head's vocabulary matmul reads only the kept rows of the
            # target's output weight (its own trimmed copy; the target keeps the full head), spread back over the
            # vocabulary for the argmax (TrimmedHeadOps; the device path samples m.buf.logits)
            m.ops = trim_head(m.ops, gguf, cfg, frspec_ids, mb)
            self.name = f"mtp+frspec{frspec_ids.size}"
        self.head = m
        self.pending: np.ndarray | None = None  # target hidden rows (pre-norm) not yet in the head's cache
        self._dev = None  # (DeviceIO, GraphsByT of the device drafting steps) for propose_into

    def begin(self, prompt, hidden=None) -> None:
        self.head.kv.reset()
        self.pending = np.asarray(hidden, np.float32)

    def rollback(self, ctx, hidden=None) -> None:
        # hidden: the verify's rows of the kept positions; rows not consumed yet (a round without a
        # proposal) stay pending before them.
        self.pending = np.concatenate([self.pending, np.asarray(hidden, np.float32)], axis=0)
        self.head.kv.reset(len(ctx) - 1 - self.pending.shape[0])  # keep entries built from true rows

    def _run(self, ids, h_rows, normed: bool):
        """Feed T pairs (token, hidden) at the head's kv.pos; host logits of the last row (the host
        path, propose; propose_into replays _step's graphs)."""
        m, o = self.head, self.ops
        T = len(ids)
        m.kv.reserve(T)
        o.copy_from_host(m.buf.view(T).ids, np.asarray(ids, np.int32))
        hbuf = m.ops.h[:T]
        # cuda: array assignments here and in _NextNInputOps.embed must run on the ops' stream (a
        # non-blocking stream does not order with CuPy's default one)
        with o.stream if getattr(o, "name", "") == "cuda" else nullcontext():
            if isinstance(h_rows, np.ndarray):
                o.copy_from_host(hbuf, h_rows)
            else:
                hbuf[...] = h_rows
            if not normed:  # the target's rows: apply its output norm (h_i after the final norm)
                o.rmsnorm(hbuf, self.out_norm, self.cfg.rms_eps, out=hbuf)
            out = m.forward(T, last_only=True)
        return o.to_host(out)[-1]

    def propose(self, ctx, k, params=None, hidden=None) -> Draft:
        m = self.head
        P = self.pending.shape[0]
        c = m.kv.n_past  # rows pair with tokens ctx[c + 1 .. c + P]
        if c + P != len(ctx) - 1 or P == 0:
            raise RuntimeError(f"MTP drafter out of step: {c} cached + {P} pending for a context of {len(ctx)}")
        k = min(k, m.kv.n_ctx - len(ctx) + 1)
        if k <= 0:
            return Draft([])
        for s in range(0, P, m.max_batch):
            e = min(P, s + m.max_batch)
            row = self._run(ctx[c + 1 + s : c + 1 + e], self.pending[s:e], normed=False)
            last = e - s  # rows of the last forward
        self.pending = self.pending[:0]
        counts = context_counts(ctx, self.cfg.n_vocab, params)
        toks, qs = [], []
        for i in range(k):
            tok, q = pick(row, params, counts, len(ctx) + i)
            toks.append(tok)
            qs.append(q)
            if counts is not None:
                counts[tok] += 1
            if i < k - 1:  # chain: g (the block output before shared_head_norm) stands in for h
                row = self._run([tok], m.buf.h[last - 1 : last], normed=True)
                last = 1
        return Draft(toks, None if qs[0] is None else qs)

    # ---- the greedy fast path (fast.py) -------------------------------------------------------
    def _step(self, T: int):
        """One replayable drafting step. T > 0: the T pending target rows (tokens in ids[:T], rows in the
        input wrapper's h[:T], copied from the host before) through the target's output norm and the
        head; T = 0: one chained step (token in ids[0], h[0] = the previous step's block output). Each
        ends with its argmax in ids[0] (the next chained step's token) and its last block output in h[0]:
        the ops propose() runs per step, in the same order, so the same bits."""
        from ..sampling import SamplingParams

        m, o, greedy = self.head, self.ops, SamplingParams()
        n = max(T, 1)
        hbuf, tok = m.ops.h, m.buf.view(1).ids

        def step() -> None:
            with o.stream if getattr(o, "name", "") == "cuda" else nullcontext():
                if T:
                    o.rmsnorm(hbuf[:n], self.out_norm, self.cfg.rms_eps, out=hbuf[:n])
                out = m.forward(n, last_only=True)
                o.sample(out[0], greedy, m.kv.pos, out=tok)  # argmax (lowest index), as pick()
                hbuf[:1] = m.buf.h[n - 1: n]  # g of the last row stands in for h next (chaining)

        return step

    def propose_into(self, ctx, k, io, dst_ids) -> int:
        """Greedy drafts to dst_ids[1 : 1 + k] with no host read: the pending target rows are fed
        (one batch, host rows in), each step's argmax is written on the device into the head's ids[0]
        (the next chained step's token) and copied to the target's verify ids. Each step replays a graph
        captured per row count (GraphsByT; eager on the CPU): an eager one-layer step plus the head is
        ~22 launches from Python (an MTP round was 3.3 plain steps on the H200 at 7e558ea, eager). Same stream
        as the target (the head shares its ops), so no cross-stream ordering is needed."""
        from .device import DeviceIO, GraphsByT

        m, o = self.head, self.ops
        P = self.pending.shape[0]
        c = m.kv.n_past
        if c + P != len(ctx) - 1 or P == 0:
            raise RuntimeError(f"MTP drafter out of step: {c} cached + {P} pending for a context of {len(ctx)}")
        k = min(k, m.kv.n_ctx - len(ctx) + 1)
        if k <= 0:
            return 0
        if self._dev is None:
            dio = DeviceIO(o)
            self._dev = (dio, GraphsByT(dio.ops, self._step, dio.signature, keys=lambda: m.kv.n_past))
        dio, run = self._dev
        tok = m.buf.view(1).ids
        for s in range(0, P, m.max_batch):
            e = min(P, s + m.max_batch)
            m.kv.reserve(e - s)
            o.copy_from_host(m.buf.view(e - s).ids, np.asarray(ctx[c + 1 + s: c + 1 + e], np.int32))
            o.copy_from_host(m.ops.h[: e - s], self.pending[s:e])
            run(e - s)
        self.pending = self.pending[:0]
        for i in range(k):
            dio.copy_int(dst_ids[i + 1: i + 2], tok)
            if i < k - 1:
                m.kv.reserve(1)
                run(0)
        io.order_after(dio)
        return k
