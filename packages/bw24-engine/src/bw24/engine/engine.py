"""Engine: the Python API (TEAM.md contract) over a model forward, an op backend and a tokenizer."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .chat_fallback import fallback_template
from .errors import BadInputError, EmptyPromptError, PromptTooLongError
from .generate import GenerationEvent, GenerationStats, check_request, generate
from .graph import decode_lag
from .kv_cache import KVHistory
from .kv_cache import kv_dtype as kv_cache_dtype
from .models import model_class
from .models.common import Transformer, count_tensors
from .ops import get_ops
from .ops.base import Ops
from .routing_pin import RoutingPin
from .sampling import SamplingParams

DEFAULT_MAX_CTX = 4096  # default n_ctx: the model's training context, capped here (KV memory)


# Bound on the logits' normalised squared error, sum((x - r)^2) / sum((r - mean r)^2), of a forward
# whose matvecs round activations to int8 (ops.quantizes_activations) against the same forward with
# exact fp32 activations. llama.cpp's test-backend-ops allows 5e-4 for one quantized mul_mat (its CUDA
# path also rounds activations to 8 bits). Measured whole-network NMSE is in docs/gates.md ("The run-gen gate
# on int8-activation models"): real models 6e-5 to 9e-5, random synthetic ones up to Q8_GATE_NMSE's order,
# a dropped 32-column group (the canary) 1e-2 to 0.2.
Q8_GATE_NMSE = 2e-3
# A rounded forward whose drift exceeds Q8_GATE_NMSE: the gate measures what the backend's rounding alone
# does to this model with the exact kernels (token-by-token decode on the fp32-activation kernels; a float32
# cache whose values are rounded to the cache element after every step, the same stored values save that a
# step's own key and value enter its attention unrounded; and, where the backend can (ops.emulate_rounding),
# every matvec input rounded to int8 where its own forwards round it, by the reference arithmetic; none of
# the rounded path's kernels) and allows the rounded path up to this factor times that.
# A random synthetic mixture of experts amplifies a float16 ulp or an int8 step through its router (the
# qwen3-30b-a3b: float16-KV drift 0.0029-0.0031 at a6dcfe3, int8 experts 0.0092-0.0097 at 355ecbd, argmax
# equal), where the dense models' int8 drift stays under Q8_GATE_NMSE at 1,700-3,200x what their float16
# cache's rounding alone does (8128fa9); a broken kernel is not explained by it (the canaries).
ROUNDING_FACTOR = 2.0


def nmse(x: np.ndarray, ref: np.ndarray) -> float:
    d = float(np.sum((ref - ref.mean()) ** 2))
    e = float(np.sum((x - ref) ** 2))
    return e / d if d > 0 else (0.0 if e == 0 else float("inf"))


@dataclass(frozen=True)
class Drift:
    """Last-position logits of the rounded path (x: int8 activations and / or a float16 KV cache) vs the
    exact decode (ref: fp32 activations, float32 cache)."""

    argmax: int
    ref_argmax: int
    maxdiff: float
    nmse: float
    margin: float  # ref's logit of its top-1 minus that of x's top-1 (0 when they agree)
    bound: float = Q8_GATE_NMSE

    @classmethod
    def of(cls, x: np.ndarray, ref: np.ndarray, bound: float | None = None) -> Drift:
        a, r = int(np.argmax(x)), int(np.argmax(ref))
        bound = Q8_GATE_NMSE if bound is None else bound
        return cls(a, r, float(np.max(np.abs(x - ref))), nmse(x, ref), float(ref[r] - ref[a]), bound)

    @property
    def ok(self) -> bool:
        """Within the int8 class, and a changed top-1 only where the measured drift explains it."""
        return self.nmse <= self.bound and (self.argmax == self.ref_argmax or self.margin <= self.maxdiff)


@dataclass(frozen=True)
class VerifyResult:
    """Last-position logits of one batched prefill vs token-by-token decode of the same prompt, with
    exact activations and a float32 KV cache; where the backend runs rounded (int8 activations on cuda's
    q8 path, fp16 prefill products, a float16 cache), also the rounded prefill and decode vs that exact
    decode (`rounded`: (prefill drift, decode drift); `rounded_by` names what rounds)."""

    prefill_argmax: int
    decode_argmax: int
    maxdiff: float
    margin: float  # prefill logit of its top-1 minus that of decode's top-1 (0 when they agree)
    tolerance: float
    rounded: tuple[Drift, Drift] | None = None
    rounded_by: str = "int8-activation"
    alone: float | None = None  # NMSE of the backend's rounding alone on the exact kernels, where measured
    alone_by: str = ""  # what that rounded (rounded_paths' names: "int8-activation+float16-KV")
    # a mixture of experts' rounded half ran on the exact decode's routing (engine.routing_pin): what the pin
    # saw, and whether every top-k that differed from it is explained by its router logits' drift
    routing: str = ""
    routing_ok: bool = True

    @property
    def near_tie(self) -> bool:
        return self.prefill_argmax != self.decode_argmax and self.margin <= self.tolerance

    @property
    def ok(self) -> bool:
        """A real mismatch: maxdiff above the backend's tolerance, or argmax differs without a near
        tie, or a rounded path outside its class."""
        exact = self.maxdiff <= self.tolerance and (self.prefill_argmax == self.decode_argmax or self.near_tie)
        return exact and self.routing_ok and (self.rounded is None or all(d.ok for d in self.rounded))

    def line(self) -> str:
        s = (f"verify-prefill argmax={self.prefill_argmax}  decode argmax={self.decode_argmax}  "
             f"logit maxdiff={self.maxdiff:.3g}")
        set_bound = False
        if self.rounded is not None:
            p, d = self.rounded
            set_bound = self.alone is not None and p.bound == ROUNDING_FACTOR * self.alone
            alone = f"; the rounding alone ({self.alone_by}) {self.alone:.2g} x {ROUNDING_FACTOR:g}" if set_bound else ""
            s += (f"  {self.rounded_by} nmse: prefill={p.nmse:.2g} decode={d.nmse:.2g} (bound {p.bound:.2g}{alone}), "
                  f"argmax {p.argmax}/{d.argmax}")
        if self.alone is not None and not set_bound:  # measured, but not the bound: the sensitivity probe
            ratio = f", decode drift {self.rounded[1].nmse / self.alone:.3g}x it" if self.alone > 0 else ""
            s += f"  sensitivity: the rounding alone ({self.alone_by}) nmse={self.alone:.2g}{ratio}"
        if self.routing:
            s += f"  {self.routing}"
        s += f"  {'MATCH' if self.ok else 'MISMATCH'}"
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
             max_batch: int | None = None, progress: bool = True, kv_dtype: str | None = None,
             draft: bool = False) -> Engine:
        """Resolve (alias, path, hf:...), map the GGUF, build the tokenizer, load the weights.
        kv_dtype: "f32" | "f16", the KV-cache element (None: the backend's own, cuda f16 / cpu f32).
        max_batch: tokens a forward takes at most, the prefill chunk (None: the backend's
        default_max_batch: cuda 2048 unless BW24_UBATCH says otherwise, the reference 128); never more
        than n_ctx.
        draft: the model drafts for a speculative target (the backend's use_draft_policy: cuda, int8 activations at
        every K; its arithmetic moves the acceptance only, the target's verify keeps the output exact)."""
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
        if max_batch is not None and max_batch <= 0:
            raise BadInputError(f"max_batch={max_batch} (must be > 0)")
        tok = Tokenizer.from_gguf(f)
        decode_lag()  # BW24_DECODE_LAG refused here, naming itself, rather than at the first generation
        ops = get_ops(backend)
        # A forward never takes more tokens than the context holds: the activation buffers (models/common
        # Buffers, ~184 KB a token for the 8B) are sized by max_batch, so a short context (a decode cell's
        # n_ctx 136) holds no prefill chunk's worth of rows it can never fill.
        max_batch = min(max_batch or ops.default_max_batch, n_ctx)
        if draft and hasattr(ops, "use_draft_policy"):
            ops.use_draft_policy()  # before any weight plans its path
        if kv_dtype is not None:
            ops.kv_dtype = kv_cache_dtype(kv_dtype)  # before prepare_model plans the cache's bytes
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

    def _last_logits(self, ids: Sequence[int], batched: bool, grid: Any = None) -> np.ndarray:
        """Last-position logits of one batched prefill or of token-by-token decode; with `grid` (decode
        only), the cache's keys and values are rounded to that element after every step."""
        self.model.kv.reset()
        pin = getattr(self.ops, "routing", None)  # the gate's routing pin (verify_prefill): one forward of it
        if pin is not None:
            pin.begin()
        if batched:
            b = self.model.feed(ids)[-1]
        else:
            for i in ids:
                b = self.model.feed([i])[-1]
                if grid is not None:
                    self.model.kv.round_to(grid)
        if pin is not None:
            pin.end(len(ids))
        return b.astype(np.float64)

    def verify_prefill(self, ids: Sequence[int], sensitivity: bool = False, pin_routing: bool = True) -> VerifyResult:
        """The run-gen gate: last-position logits of a batched prefill vs token-by-token decode, with
        exact (fp32) activations and a float32 KV cache, within ops.verify_tolerance; where the backend
        rounds (activations to int8, the cache to float16), its own prefill and decode each within
        Drift's class of that exact decode. (Two rounded forwards cannot be held to 1e-2 of each other:
        their inputs differ in the last bits from the summation order, elements on a rounding boundary
        flip by a whole int8 step or float16 ulp, deep random models amplify it: the synthetic
        qwen3-30b-a3b's router turned a float16 cache's 1e-3 into 0.13 at ca80b31; see docs/gates.md.)
        sensitivity: also measure the rounding alone where it does not set the bound (a probe of how much this
        model amplifies the backend's rounding, reported beside the drift; the bound is unchanged).
        A mixture of experts' rounded half (and its rounding alone) runs on the routing the exact decode
        recorded (engine.routing_pin: why, and how the router stays checked); pin_routing=False runs it on its
        own routing instead (what the pin takes away: benchmarks/emulate_moe_gate.py)."""
        self._check_prompt(ids)
        pin = RoutingPin() if self.model.cfg.is_moe and pin_routing else None
        with self.ops.exact_activations(), self._exact_cache(len(ids)):
            a = self._last_logits(ids, True)
            with self._pinned(pin):  # records the exact decode's routing
                b = self._last_logits(ids, False)
        pa, pb = int(np.argmax(a)), int(np.argmax(b))
        kv_dtype = self.model.kv.dtype
        by = "+".join(self.ops.rounded_paths() + ([] if kv_dtype == np.float32 else [f"{kv_dtype.name}-KV"]))
        rounded, alone, alone_by = None, None, ""
        if by:
            with self._pinned(pin):
                rounded = (Drift.of(self._last_logits(ids, True), b), Drift.of(self._last_logits(ids, False), b))
                failing = not all(d.ok for d in rounded)
                if failing or sensitivity:
                    alone, alone_by = self._rounding_alone(ids, b)
                    if failing and alone is not None:
                        bound = max(Q8_GATE_NMSE, ROUNDING_FACTOR * alone)
                        rounded = (replace(rounded[0], bound=bound), replace(rounded[1], bound=bound))
        routing = pin is not None and by
        return VerifyResult(pa, pb, float(np.max(np.abs(a - b))), float(a[pa] - a[pb]), self.ops.verify_tolerance,
                            rounded, by, alone, alone_by, pin.describe() if routing else "",
                            pin.ok if routing else True)

    def _pinned(self, pin: RoutingPin | None) -> AbstractContextManager:
        return self.ops.pin_routing(pin) if pin is not None else nullcontext()

    def _rounding_alone(self, ids: Sequence[int], ref: np.ndarray) -> tuple[float | None, str]:
        """NMSE against ref (the exact decode's logits) of a token-by-token decode on the exact half's kernels
        with the backend's roundings applied to what they read: matvec inputs rounded to int8 where its own
        forwards round them (ops.emulate_rounding), the cache's values rounded to its element after every
        step; and what it rounded. (None, "") where neither can be emulated."""
        kv_dtype = self.model.kv.dtype
        kv = [f"{kv_dtype.name}-KV"] if kv_dtype != np.float32 else []
        with self.ops.exact_activations(), self.ops.emulate_rounding() as acts, self._exact_cache(len(ids)):
            if not (acts or kv):
                return None, ""
            logits = self._last_logits(ids, False, grid=kv_dtype if kv else None)
        return nmse(logits, ref), "+".join([*acts, *kv])

    @contextmanager
    def _exact_cache(self, n: int) -> Iterator[None]:
        """The model's KV cache swapped for a float32 one of n positions, where it holds another element
        (eager forwards only: a captured decode graph keeps the cache it was captured with)."""
        kv = self.model.kv
        if kv.dtype == np.float32:
            yield
            return
        self.model.kv = kv.like(n, np.float32)
        try:
            yield
        finally:
            self.model.kv = kv

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
