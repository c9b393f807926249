"""Engine: the Python API (TEAM.md contract) over a model forward, an op backend and a tokenizer."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .chat_fallback import fallback_template
from .errors import BadInputError, EmptyPromptError, PromptTooLongError
from .generate import GenerationEvent, GenerationStats, check_request, generate
from .kv_cache import KVHistory
from .models import model_class
from .models.common import Transformer, count_tensors
from .ops import get_ops
from .ops.base import Ops
from .sampling import SamplingParams

DEFAULT_MAX_CTX = 4096  # default n_ctx: the model's training context, capped here (KV memory)


@dataclass(frozen=True)
class VerifyResult:
    """Last-position logits of one batched prefill vs token-by-token decode of the same prompt."""

    prefill_argmax: int
    decode_argmax: int
    maxdiff: float
    margin: float  # prefill logit of its top-1 minus that of decode's top-1 (0 when they agree)
    tolerance: float

    @property
    def near_tie(self) -> bool:
        return self.prefill_argmax != self.decode_argmax and self.margin <= self.tolerance

    @property
    def ok(self) -> bool:
        """A real mismatch: maxdiff above the backend's tolerance, or argmax differs without a near tie."""
        return self.maxdiff <= self.tolerance and (self.prefill_argmax == self.decode_argmax or self.near_tie)

    def line(self) -> str:
        s = (f"verify-prefill argmax={self.prefill_argmax}  decode argmax={self.decode_argmax}  "
             f"logit maxdiff={self.maxdiff:.3g}  {'MATCH' if self.ok else 'MISMATCH'}")
        return s + (f" (near tie, margin={self.margin:.3g})" if self.near_tie else "")


class Engine:
    def __init__(self, model: Transformer, tokenizer: Any, gguf: Any, path: Path, ops: Ops):
        self.model, self.tokenizer, self.gguf, self.path, self.ops = model, tokenizer, gguf, path, ops
        self.config = model.cfg
        self.n_ctx = model.kv.n_ctx
        self.last_stats = GenerationStats()
        # The token ids whose KV the model holds after the last Engine.generate (prompt + every
        # generated token fed so far); any other use of the KV resets it and so voids this record.
        self.kv_history = KVHistory()

    @property
    def backend(self) -> str:
        return self.ops.name

    @classmethod
    def load(cls, model: str | Path, backend: str = "auto", n_ctx: int | None = None, *,
             max_batch: int = 128, progress: bool = True) -> Engine:
        """Resolve (alias, path, hf:...), map the GGUF, build the tokenizer, load the weights."""
        from bw24.gguf import GGUFFile, ModelConfig, resolve_model
        from bw24.tokenizer import Tokenizer
        from tqdm.auto import tqdm

        path = Path(resolve_model(str(model)))
        f = GGUFFile(path)
        cfg = ModelConfig.from_gguf(f)
        mcls = model_class(cfg.arch)
        if n_ctx is None:
            n_ctx = min(cfg.n_ctx_train or DEFAULT_MAX_CTX, DEFAULT_MAX_CTX)
        if n_ctx <= 0:
            raise BadInputError(f"n_ctx={n_ctx} (must be > 0)")
        if max_batch <= 0:
            raise BadInputError(f"max_batch={max_batch} (must be > 0)")
        tok = Tokenizer.from_gguf(f)
        ops = get_ops(backend)
        prepare = getattr(ops, "prepare_model", None)  # cuda: VRAM check before any upload, byte progress
        if prepare is not None:
            prepare(f, cfg, n_ctx=n_ctx, max_batch=max_batch, progress=progress)
        with tqdm(total=count_tensors(cfg), desc=f"loading {path.name} ({ops.name})", unit="tensor",
                  file=sys.stderr, disable=not progress, leave=False) as bar:
            m = mcls(f, cfg, ops, n_ctx=n_ctx, max_batch=max_batch, progress=bar.update)
        loaded = getattr(ops, "model_loaded", None)  # cuda: closes the upload progress bar
        if loaded is not None:
            loaded(m)
        return cls(m, tok, f, path, ops)

    # ---- logits -------------------------------------------------------------------------------
    def _check_prompt(self, ids: Sequence[int]) -> None:
        if len(ids) == 0:
            raise EmptyPromptError("empty prompt: at least one token is needed")
        if len(ids) > self.n_ctx:
            raise PromptTooLongError(f"prompt of {len(ids)} tokens is longer than the context (n_ctx={self.n_ctx})")

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """float32 [len(ids), n_vocab]: every position's logits, from a fresh context (batched)."""
        self._check_prompt(ids)
        self.model.kv.reset()
        return self.model.feed(ids, all_logits=True).astype(np.float32, copy=False)

    def decode_logits(self, ids: Sequence[int]) -> np.ndarray:
        """Like logits(), but fed one token per step through the decode path (T = 1)."""
        self._check_prompt(ids)
        self.model.kv.reset()
        return np.concatenate([self.model.feed([i]) for i in ids], axis=0)

    def verify_prefill(self, ids: Sequence[int]) -> VerifyResult:
        """The run-gen gate: last-position logits of a batched prefill vs token-by-token decode."""
        self._check_prompt(ids)
        self.model.kv.reset()
        a = self.model.feed(ids)[-1].astype(np.float64)
        self.model.kv.reset()
        for i in ids:
            b = self.model.feed([i])[-1].astype(np.float64)
        pa, pb = int(np.argmax(a)), int(np.argmax(b))
        return VerifyResult(pa, pb, float(np.max(np.abs(a - b))), float(a[pa] - a[pb]), self.ops.verify_tolerance)

    # ---- generation ---------------------------------------------------------------------------
    def generate(
        self, ids: Sequence[int], max_tokens: int = 32, temperature: float = 0.0, *, top_k: int = 0,
        top_p: float = 1.0, min_p: float = 0.0, repetition_penalty: float = 1.0, presence_penalty: float = 0.0,
        frequency_penalty: float = 0.0, stop: Sequence[str] | None = None, seed: int | None = None,
        logprobs: bool = False, top_logprobs: int = 0, params: SamplingParams | None = None,
        reuse_prefix: bool = False,
    ) -> Iterator[GenerationEvent]:
        """Stream GenerationEvents (validated before the first event). From a fresh context, or with
        reuse_prefix the KV of cached_prefix(ids) tokens is kept and only the rest is prefilled (same
        outputs; last_stats.cached_tokens says how many were kept)."""
        from bw24.tokenizer import IncrementalDetokenizer

        if params is None:
            params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                                    repetition_penalty=repetition_penalty, presence_penalty=presence_penalty,
                                    frequency_penalty=frequency_penalty, seed=seed)
        if isinstance(stop, str):
            stop = [stop]
        ids = list(ids)
        check_request(self.model, ids, max_tokens)  # raise here, not at the first next()
        self.model.check_ids(ids)
        n_keep = self.cached_prefix(ids) if reuse_prefix else 0
        check_request(self.model, ids, max_tokens, n_keep)
        self.last_stats = GenerationStats(cached_tokens=n_keep)
        return generate(self.model, self.tokenizer, IncrementalDetokenizer(self.tokenizer), ids, params,
                        max_tokens=max_tokens, stop=stop or (), logprobs=logprobs, top_logprobs=top_logprobs,
                        stats=self.last_stats, n_keep=n_keep, history=self.kv_history)

    def cached_prefix(self, ids: Sequence[int]) -> int:
        """Tokens of ids whose KV generate(ids, reuse_prefix=True) would keep: the longest common
        prefix with the tokens the KV holds, at most len(ids) - 1; 0 when the record is stale."""
        return self.kv_history.reusable(self.model.kv, list(ids))

    def chat_ids(self, messages: Sequence[dict], tools: Any = None) -> list[int]:
        """Token ids of a chat prompt (template with the generation prompt, special tokens parsed)."""
        if self.tokenizer.chat_template:
            text = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tools=tools)
        else:  # no template in the GGUF: the architecture's own turn format (chat_fallback.py)
            tmpl = fallback_template(self.config.arch, self.tokenizer)
            text = tmpl.render(list(messages), add_generation_prompt=True, tools=tools)
        ids = self.tokenizer.encode(text, add_special=True, parse_special=True)
        bos = self.tokenizer.bos_id
        if len(ids) >= 2 and bos is not None and ids[0] == bos and ids[1] == bos:
            ids = ids[1:]  # the template wrote BOS itself and encode() added another
        return ids

    def chat(self, messages: Sequence[dict], max_tokens: int = 64, **kw: Any) -> str:
        return "".join(ev.text for ev in self.generate(self.chat_ids(messages), max_tokens, **kw))
