"""A separate, smaller model drafting for the target (same tokenizer). It keeps its own KV cache of
the context and drafts greedily (or by sampling from its own distribution in sampled mode), one T = 1
step per token; after a round its cache is cut back to the longest prefix still in the context.

Catch-up tokens are fed one step at a time (never batched) so that a draft model identical to the
target computes exactly the target's decode logits: draft = target must give acceptance 1.0.
"""

from __future__ import annotations

import numpy as np

from .base import Draft, DraftVocabMismatchError, context_counts, pick
from .frspec import TrimmedHeadOps, trim_head


def check_same_vocab(target_gguf, target_cfg, draft_gguf, draft_cfg) -> None:
    """Refuse a draft whose token ids do not mean what the target's mean."""
    if draft_cfg.n_vocab != target_cfg.n_vocab:
        raise DraftVocabMismatchError(
            f"draft model {draft_gguf.path.name} has n_vocab={draft_cfg.n_vocab}, the target "
            f"{target_gguf.path.name} has {target_cfg.n_vocab}: they must share the tokenizer")
    ta, tb = target_gguf.get("tokenizer.ggml.tokens") or [], draft_gguf.get("tokenizer.ggml.tokens") or []
    if ta != tb:
        i = next((i for i, (x, y) in enumerate(zip(ta, tb, strict=False)) if x != y), min(len(ta), len(tb)))
        got = (repr(ta[i]) if i < len(ta) else "<none>", repr(tb[i]) if i < len(tb) else "<none>")
        raise DraftVocabMismatchError(
            f"draft model {draft_gguf.path.name} does not share the target's tokenizer: token {i} is "
            f"{got[0]} in the target and {got[1]} in the draft ({len(ta)} vs {len(tb)} tokens)")


def twin_model(m):
    """The same model (shared weights and ops: one upload, one stream) with its own KV cache and
    buffers, for the draft = target measurement without loading the weights twice."""
    from ..kv_cache import KVCache
    from ..models.common import Buffers

    c, t = m.cfg, type(m).__new__(type(m))
    t.cfg, t.ops, t.max_batch, t.w = c, m.ops, m.max_batch, m.w
    t.kv = KVCache(m.ops, c.n_layer, c.n_head_kv, c.head_dim, c.head_dim_v, m.kv.n_ctx)
    t.buf = Buffers(m.ops, c, m.max_batch)
    return t


class DraftModelDrafter:
    name = "draft"
    needs_hidden = False

    def __init__(self, model, *, frspec_ids: np.ndarray | None = None, gguf=None):
        self.model = model
        self.cached: list[int] = []  # tokens in the draft's KV cache (a prefix of the context)
        self._dev = None  # (DeviceIO, GraphsByT of the draft's decode step) for propose_into
        self._fed = 0  # drafts of the last propose_into fed to the draft (known on the host later)
        self.steps = 0  # T = 1 draft forwards so far (benchmarks: draft cost per round)
        if isinstance(model.ops, TrimmedHeadOps):  # an earlier drafter's trim of this model: this one sets its own
            model.ops = model.ops.base
        if frspec_ids is not None:  # FR-Spec: the head reads only the kept rows (its logits -inf at the others)
            model.ops = trim_head(model.ops, gguf, model.cfg, frspec_ids, model.max_batch)
            self.name = f"draft+frspec{frspec_ids.size}"

    def begin(self, prompt, hidden=None) -> None:
        self.model.kv.reset()
        self.model.feed(list(prompt))  # same chunking as the target's prefill
        self.cached = list(prompt)

    def rollback(self, ctx, hidden=None) -> None:
        n = 0
        lim = min(len(self.cached), len(ctx) - 1)
        while n < lim and self.cached[n] == ctx[n]:
            n += 1
        self.model.kv.reset(n)
        self.cached = self.cached[:n]

    def propose(self, ctx, k, params=None, hidden=None) -> Draft:
        m = self.model
        room = m.kv.n_ctx - len(ctx)  # the draft feeds ctx plus k - 1 drafts
        k = min(k, room + 1)
        if k <= 0:
            return Draft([])
        out = None
        for t in ctx[len(self.cached):]:
            out = m.feed([t])
            self.cached.append(t)
            self.steps += 1
        counts = context_counts(ctx, m.cfg.n_vocab, params)
        toks, qs = [], []
        for i in range(k):
            tok, q = pick(out[-1], params, counts, len(ctx) + i)
            toks.append(tok)
            qs.append(q)
            if counts is not None:
                counts[tok] += 1
            if i < k - 1:
                out = m.feed([tok])
                self.cached.append(tok)
                self.steps += 1
        return Draft(toks, None if qs[0] is None else qs)

    # ---- the greedy fast path (fast.py) -------------------------------------------------------
    def propose_into(self, ctx, k, io, dst_ids) -> int:
        """Greedy drafts written to dst_ids[1 : 1 + k] (the target's verify ids) without host reads:
        each catch-up token is one T = 1 replay of the draft's decode graph (forward + argmax into its
        own token buffer, exactly plain decode's step), each draft token feeds the next replay on the
        device and is copied device-to-device to the target; the target's stream is ordered after."""
        from ..graph import decode_step
        from ..sampling import SamplingParams
        from .device import DeviceIO, GraphsByT

        m = self.model
        k = min(k, m.kv.n_ctx - len(ctx) + 1)
        if k <= 0:
            return 0
        if self._dev is None:
            dio = DeviceIO(m.ops)
            step = decode_step(m, SamplingParams(), publish=False)  # (no host reads its tokens: no ring write)
            self._dev = (dio, GraphsByT(dio.ops, lambda T: step, dio.signature, keys=lambda: m.kv.n_past))
        dio, run = self._dev
        tok = m.buf.view(1).ids  # the step's input and output (int32 [1])
        for t in ctx[len(self.cached):]:  # catch-up, never batched (draft = target stays exact)
            dio.write(tok, [t])
            m.kv.reserve(1)
            run(1)
            self.cached.append(t)
            self.steps += 1
        for i in range(k):
            dio.copy_int(dst_ids[i + 1: i + 2], tok)
            if i < k - 1:
                m.kv.reserve(1)
                run(1)
        self._fed = k - 1
        self.steps += k - 1
        io.order_after(dio)
        return k

    def note_drafts(self, drafts) -> None:
        """The round's drafts, read back with the verify: the first k - 1 were fed to the draft."""
        self.cached.extend(int(t) for t in drafts[: self._fed])
        self._fed = 0
