"""The speculative loop: prefill, first token exactly as plain decode samples it, then rounds of
draft -> one verify forward of [last, d1..dK] -> accept -> KV rollback -> drafter rollback.

Greedy: the target's token at each verify row is sampling.sample's argmax on logits bit-identical to
a decode step's (verify.py), so the emitted sequence is plain decode's for any drafter and any K.
Sampled: rejection.py's accept/resample rule with (seed, position)-keyed random numbers, so the
output is distributed as plain sampling and a seeded run reproduces exactly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ..errors import BadInputError
from ..generate import check_request
from ..sampling import SamplingParams, sample
from .base import Draft
from .device import DeviceIO, FastVerifier, GraphsByT, base_ops
from .fast import drafter_on_device, fast_rounds
from .rejection import accept_sampled, target_probs
from .verify import AdaptiveK, Verifier, greedy_accept

K_MAX = 8


@dataclass
class SpecStats:
    n_prompt: int = 0
    n_generated: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    # The prompt's ingestion by the target and by the drafter (a draft model's own prompt prefill: 44.6 ms
    # of the synthetic 8B twin at cb58708, which decode_s held before, 0.35 ms per token of a 128-token
    # run), as plain decode's prefill; decode_s is then the same span as plain decode's.
    prefill_s: float = 0.0
    decode_s: float = 0.0  # from the end of the prefill to the last token
    k_trace: list[int] = field(default_factory=list)

    @property
    def acceptance(self) -> float:
        return self.accepted / self.drafted if self.drafted else float("nan")

    @property
    def tokens_per_round(self) -> float:
        return (self.n_generated - 1) / self.rounds if self.rounds else float("nan")

    @property
    def decode_tok_s(self) -> float:
        return self.n_generated / self.decode_s if self.decode_s > 0 else float("nan")


def ingest(model, drafter, prompt: Sequence[int], begin: bool = True) -> np.ndarray:
    """The prompt into a fresh target cache and (begin) into the drafter: what a generation does before
    its decode clock starts. The target's last-row logits [1, V]."""
    model.kv.reset()
    last_logits, hidden = prefill(model, prompt, drafter.needs_hidden)
    if begin:
        drafter.begin(prompt, hidden)
    return last_logits


def prefill(model, prompt: Sequence[int], want_hidden: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Last-row logits [1, V] of the prompt and, if asked, every row's hidden state [n, E]: plain
    Transformer.feed, so the cache equals plain decode's."""
    hid: list | None = [] if want_hidden else None
    logits = model.feed(list(prompt), hidden=hid)
    return logits, (np.concatenate(hid, axis=0) if hid is not None else None)


class SpecDecoder:
    """Speculative generation on `model` (a Transformer) with `drafter` (spec.base.Drafter)."""

    def __init__(self, model, drafter, *, k: int = 4, adaptive: bool = False, verify: str = "auto",
                 k_max: int = K_MAX, device: bool | None = None):
        """device: the greedy fast path (fast.py) on/off; None = on where it pays (a cuda backend with
        a batched verify), True forces it (CPU tests), False keeps the host path."""
        self.model, self.drafter, self.device = model, drafter, device
        self._fast: FastVerifier | None = None
        # adaptive K grows only as far as the backend's verify stays cheap (CudaOps.spec_k_cap: K + 1 rows in the
        # 8-row matvec bucket, why there); a fixed K is the caller's
        self.k = AdaptiveK(k, k_max, adaptive, grow_to=getattr(base_ops(model.ops), "spec_k_cap", None))
        self.verifier = Verifier(model, verify, want_hidden=drafter.needs_hidden)
        if self.k.k_max + 1 > model.max_batch:
            raise BadInputError(f"K up to {self.k.k_max} needs max_batch >= {self.k.k_max + 1}")
        self.stats = SpecStats()

    def use_fast(self, params: SamplingParams) -> bool:
        """Greedy without penalties, a drafter that can write its drafts, and a verify that can be
        replayed: batched, or anything on a backend that runs eagerly (no graph to capture)."""
        if self.device is False or not params.greedy or params.has_penalties or not drafter_on_device(self.drafter):
            return False
        ops = base_ops(self.model.ops)
        replayable = not self.verifier.rowwise or getattr(ops, "name", "") != "cuda" or not ops.use_graphs
        if self.device is None:
            return replayable and getattr(ops, "name", "") == "cuda" and not self.verifier.rowwise
        return replayable

    @property
    def fast(self) -> FastVerifier:
        if self._fast is None:
            # A batched verify's graphs per T live on the model, so later decoders (one per server
            # request, per run-spec K) replay them instead of capturing again.
            shared = None if self.verifier.rowwise else getattr(self.model, "_spec_fast", None)
            if shared is None:
                shared = FastVerifier(self.model, self.verifier._ops_swapped)
                if not self.verifier.rowwise:
                    self.model._spec_fast = shared
            self._fast = shared
        return self._fast

    def _targets_greedy(self, rows: np.ndarray, ctx: list[int], drafts: list[int], params, counts) -> list[int]:
        """The target's token after each row, computed up to the first disagreement with the drafts."""
        out = []
        for i in range(rows.shape[0]):
            c = None if counts is None else counts + np.bincount(drafts[:i], minlength=counts.size).astype(np.int32)
            out.append(sample(rows[i], params, len(ctx) + i, c))
            if i >= len(drafts) or out[i] != drafts[i]:
                break
        return out

    def generate(self, prompt: Sequence[int], n: int, params: SamplingParams | None = None,
                 stop_ids: Sequence[int] = ()) -> Iterator[int]:
        """Yield up to n tokens; stops after a token in stop_ids or when the context is full."""
        m, d, st = self.model, self.drafter, SpecStats()
        self.stats = st
        prompt = list(prompt)
        check_request(m, prompt, n)
        params = (params or SamplingParams()).resolved()
        stop = set(stop_ids)
        V = m.cfg.n_vocab
        st.n_prompt = len(prompt)

        t0 = time.perf_counter()
        last_logits = ingest(m, d, prompt, begin=n > 1)
        st.prefill_s = (t1 := time.perf_counter()) - t0
        counts = np.bincount(prompt, minlength=V).astype(np.int32) if params.has_penalties else None
        first = sample(last_logits[-1], params, len(prompt), counts)
        ctx = prompt + [first]
        if counts is not None:
            counts[first] += 1
        st.n_generated = 1
        st.decode_s = time.perf_counter() - t1
        yield first
        if first in stop or n == 1 or len(ctx) > m.kv.n_ctx:
            return
        if self.use_fast(params):
            yield from fast_rounds(self, ctx, n, stop, lambda: time.perf_counter() - t1)
            return

        while st.n_generated < n and len(ctx) <= m.kv.n_ctx:
            k = min(self.k.k, n - st.n_generated - 1, m.kv.n_ctx - len(ctx))
            draft = d.propose(ctx, k, params) if k > 0 else Draft([])
            drafts = [int(t) for t in draft.tokens[:k]]
            q = draft.q[: len(drafts)] if draft.q is not None else None
            v = self.verifier.forward([ctx[-1]] + drafts)
            if params.greedy:
                tg = self._targets_greedy(v.logits, ctx, drafts, params, counts)
                j = greedy_accept(drafts, tg)
                y = tg[j]
            else:
                p = []
                for i in range(len(drafts) + 1):
                    c = None if counts is None else counts + np.bincount(drafts[:i], minlength=V).astype(np.int32)
                    p.append(target_probs(v.logits[i], params, c))
                r = accept_sampled(p, drafts, q, params.seed, len(ctx))
                j, y = r.n_accepted, r.token
            emitted = drafts[:j] + [y]
            self.verifier.rollback(len(ctx) + j)  # keep ctx (last now cached) + the accepted drafts
            ctx += emitted
            if counts is not None:
                np.add.at(counts, emitted, 1)
            st.rounds += 1
            st.drafted += len(drafts)
            st.accepted += j
            st.k_trace.append(len(drafts))
            self.k.update(j, len(drafts))
            d.rollback(ctx, None if v.hidden is None else v.hidden[: j + 1])
            for t in emitted:
                st.n_generated += 1
                st.decode_s = time.perf_counter() - t1
                yield t
                if t in stop or st.n_generated >= n:
                    return


def plain_decode(model, prompt: Sequence[int], n: int, params: SamplingParams,
                 stop_ids: Sequence[int] = ()) -> tuple[list[int], float]:
    """Reference loop (engine ops, captured step): up to n tokens, ending after a token in stop_ids
    (as SpecDecoder.generate does), and the decode seconds (prefill excluded)."""
    ops, kv, buf = model.ops, model.kv, model.buf
    params = params.resolved()
    counts = None
    if params.has_penalties:
        counts = ops.zeros((model.cfg.n_vocab,), np.int32)
        ops.copy_from_host(counts, np.bincount(np.asarray(prompt), minlength=model.cfg.n_vocab).astype(np.int32))
    kv.reset()
    model.feed(list(prompt))
    t1 = time.perf_counter()
    token, row = buf.view(1).ids, buf.logits[0]
    ops.sample(row, params, kv.pos, out=token, counts=counts)

    def step() -> None:
        model.forward(1, last_only=True)
        ops.sample(row, params, kv.pos, out=token, counts=counts)

    if params.greedy and counts is None:
        # Greedy: one captured step kept on the model. A fresh capture per call put an eager step and
        # the capture inside the timed loop (~25% of a 27-token run on the H200 at ddfc1fd, where the
        # key still held the seed that resolved() draws per call, so it never hit; greedy ignores it).
        # GraphsByT re-captures when the backend's scratch moved; keyed by the ops object too, since a
        # wrapper installed later (a trimmed head) changes what the step launches.
        graphs = model.__dict__.setdefault("_plain_steps", {})
        key = (replace(params, seed=0), id(ops))
        if key not in graphs:  # the entry holds ops, so its id is not reused while the entry lives
            io = DeviceIO(ops)
            graphs[key] = (ops, GraphsByT(io.ops, lambda T, step=step: step, io.signature, keys=lambda: model.kv.n_past))
        g = graphs[key][1]
        run = lambda: g(1)  # noqa: E731
    else:  # sampled (its seed is baked into the graph: one per call) or penalties (this call's counts)
        run = ops.capture(step)
    out = [int(ops.to_host(token)[0])]
    stop = set(stop_ids)
    while len(out) < n and kv.n_past < kv.n_ctx and out[-1] not in stop:
        kv.reserve(1)
        run()
        out.append(int(ops.to_host(token)[0]))
    return out, time.perf_counter() - t1
