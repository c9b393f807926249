"""FR-Spec (Zhao et al. 2025): draft over the most frequent tokens only. The drafter's output head is
trimmed to the rows of the top-N token ids, so its head matmul reads N/V of the weight; the target's
verify keeps the full vocabulary, so output stays exact (a token outside the set is simply never
drafted: greedy verify replaces it, and sampled verify sees q = 0 there and corrects through the
residual distribution).

Ranks file (written by `bw24 frspec-ranks`): JSON {"model", "n_vocab", "source", "ids": [...]}, token
ids most frequent first.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from .base import FRSpecRanksError


def load_ranks(path: str | Path, n_vocab: int, n: int | None = None) -> np.ndarray:
    """int64 ids (most frequent first, at most n) from a ranks file, checked against n_vocab."""
    try:
        doc = json.loads(Path(path).read_text())
        ids = np.asarray(doc["ids"], dtype=np.int64)
        vocab = int(doc["n_vocab"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise FRSpecRanksError(f"{path}: not a frspec ranks file ({e})") from None
    if vocab != n_vocab:
        raise FRSpecRanksError(f"{path}: ranks are for a vocabulary of {vocab} tokens, the drafter has {n_vocab}")
    if ids.size == 0 or ids.min() < 0 or ids.max() >= n_vocab or np.unique(ids).size != ids.size:
        raise FRSpecRanksError(f"{path}: ids must be distinct and in [0, {n_vocab})")
    return ids[:n] if n else ids


def trimmed_rows(ti, ids: np.ndarray):
    """A TensorInfo holding only rows `ids` of the [V, E] head weight ti (raw bytes copied row by row,
    so any quant type whose rows are whole blocks works on every backend)."""
    n_rows = ti.shape[0]
    raw = np.ascontiguousarray(np.asarray(ti.raw).reshape(n_rows, -1)[ids]).reshape(-1)
    # the name says which rows: backends cache weights by (name, data address), and a freed raw's address recurs
    # (two trims of one size, in another order, read one cached weight until the digest was added)
    tag = hashlib.sha1(np.ascontiguousarray(ids, np.int64).tobytes()).hexdigest()[:12]
    return replace(ti, name=f"{ti.name}[frspec:{ids.size}:{tag}]", shape=(int(ids.size), *ti.shape[1:]), raw=raw,
                   nbytes=int(raw.nbytes))


def inverse_ids(ids: np.ndarray, n_vocab: int) -> np.ndarray:
    """int32 [n_vocab]: inv[ids[j]] = j, -1 for the ids not kept."""
    inv = np.full(n_vocab, -1, np.int32)
    inv[np.asarray(ids, np.int64)] = np.arange(ids.size, dtype=np.int32)
    return inv


def trim_head(ops, gguf, cfg, ids: np.ndarray, max_batch: int) -> TrimmedHeadOps:
    """ops wrapped so a model's vocabulary matmul reads only rows `ids` of its output weight (the tied embedding's
    when the model ties them): a trimmed copy uploaded through ops, the full row rebuilt (TrimmedHeadOps). The
    draft model's and the MTP head's FR-Spec."""
    name = "token_embd.weight" if cfg.tie_embeddings else "output.weight"
    head = ops.load_weight(trimmed_rows(gguf.tensor(name), ids))
    return TrimmedHeadOps(ops, head, ids, max_batch, cfg.n_vocab)


class TrimmedHeadOps:
    """Ops wrapper for a drafter model: logits() computes only the kept rows into `self.sub` [T, N], then
    spreads them over the full-width out buffer, -inf at the ids not kept (DeviceIO.expand_cols: spec.cu
    frspec_expand on the GPU). Why the full row: the draft's device fast path (DraftModelDrafter.propose_into)
    samples from out inside its captured decode step; until the expand, out was left untouched there, so on
    the GPU a trimmed drafter drafted from stale logits (exact output, acceptance ~0; tests/test_spec_greedy.py
    test_spec_frspec_trimmed_draft_on_the_device_path)."""

    def __init__(self, base, head_weight, ids: np.ndarray, max_batch: int, n_vocab: int):
        from .device import DeviceIO

        self.base, self.head, self.ids = base, head_weight, ids
        self.sub_all = base.zeros((max_batch, int(ids.size)))
        self.sub = self.sub_all[:1]
        self.inv = base.zeros((n_vocab,), np.int32)
        base.copy_from_host(self.inv, inverse_ids(ids, n_vocab))
        self.io = DeviceIO(base)

    def __getattr__(self, name):
        return getattr(self.base, name)

    def logits(self, x, w, softcap, *, out):
        self.sub = self.sub_all[: x.shape[0]]
        self.base.logits(x, self.head, softcap, out=self.sub)
        self.io.expand_cols(self.sub, self.inv, out)
