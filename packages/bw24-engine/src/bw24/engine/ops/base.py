"""The ops interface: what every op backend (ref = NumPy, cuda = CuPy kernels) implements.

The model forwards (bw24.engine.models) call only these methods, so a backend plugs in unchanged.
Conventions, binding for every backend:
- Arrays are backend arrays (numpy.ndarray for ref, cupy.ndarray for cuda), C-contiguous float32
  unless stated. `xp` is the array module, used by the forwards for views only (reshape, slicing).
- Every op writes into a caller-preallocated `out=` buffer and returns nothing; `out` may alias an
  input only where a docstring says so. Nothing is allocated by the forwards during a step.
- `pos` is a backend int32 array of shape [1]: the absolute position of the first of the T tokens of
  this step (= number of tokens already in the KV cache). Ops that need it read it on the device, so a
  decode step does not depend on host values (one captured CUDA graph replays every token);
  `advance(pos, T)` moves it on after a step.
- T (tokens in the step) is the leading dimension of the activations; the same forward serves a
  batched prefill (T > 1) and a decode step (T = 1).
- Weights: `load_weight(TensorInfo)` returns a backend object (ref: DenseWeight with dequantized float32
  data [N, K], or [E, N, K] for stacked experts); `load_vector(TensorInfo)` returns a float32 backend
  array (norm weights, biases). Both are cached per tensor, so a tied head shares the embedding.

Shape legend: T tokens, E n_embd, H / Hkv query / kv heads, D head dim (q, k), Dv head dim of v,
N / K a matrix's output / input width, V vocab, X experts, S cache length (n_ctx).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import numpy as np

ACTIVATIONS = ("silu", "gelu_tanh")
ROPE_MODES = ("norm", "neox")


def check_qk_norm(q_norm: Any, k_norm: Any, norm_eps: float | None) -> None:
    """rope_kv's qk-norm arguments: a norm weight needs its eps."""
    if (q_norm is not None or k_norm is not None) and norm_eps is None:
        raise ValueError("rope_kv: q_norm/k_norm given without norm_eps")


class Ops(ABC):
    name: str = "?"
    xp: Any = np  # array module for views
    # Gate tolerance: largest |prefill - decode| logit difference run-gen accepts on this backend.
    verify_tolerance: float = 1e-2
    # Does some matvec round its activations to int8 (cuda's q8 path)? Then the gate runs the exact
    # comparison inside exact_activations() and checks the int8 forward against it (engine.Drift).
    quantizes_activations: bool = False
    # tokens a forward takes at most when Engine.load is not told (the prefill chunk), and the rows of
    # logits its buffers hold (None: max_batch; models/common.Buffers)
    default_max_batch: int = 128
    logit_rows: int | None = None
    # KV-cache element type (KVCache allocates with it): float32 here; cuda may hold float16.
    kv_dtype: Any = np.float32

    def exact_activations(self) -> AbstractContextManager:
        """A context in which every op keeps fp32 activations (a no-op where none rounds them)."""
        return nullcontext()

    def emulate_rounding(self) -> AbstractContextManager[list[str]]:
        """Inside exact_activations, the gate's "rounding alone" (Engine.verify_prefill): the exact kernels'
        inputs rounded where and as the backend's own forwards round their activations, by the reference
        arithmetic and none of the rounded path's kernels. Yields the rounded_paths names it emulates
        (none here: a backend that cannot leaves the gate's yardstick to the KV cache's rounding alone)."""
        return nullcontext([])

    # The gate's mixture-of-experts routing pin (engine.routing_pin.RoutingPin), inside pin_routing: every
    # moe call hands it its router logits and top-k, and runs the experts it returns.
    routing: Any = None

    @contextmanager
    def pin_routing(self, pin: Any) -> Iterator[None]:
        """A context in which moe calls go through `pin` (Engine.verify_prefill on a mixture of experts); a
        backend that captures forwards as graphs runs them eager inside it (a replay skips the host's hook)."""
        old, self.routing = self.routing, pin
        try:
            yield
        finally:
            self.routing = old

    def rounded_paths(self) -> list[str]:
        """What the backend's own forwards round beyond fp32 (outside exact_activations), by name: the gate
        checks those forwards as its rounded half (engine.Drift). The KV cache's element is the engine's."""
        return ["int8-activation"] if self.quantizes_activations else []

    # ---- memory -------------------------------------------------------------------------------
    @abstractmethod
    def empty(self, shape: tuple[int, ...], dtype=np.float32) -> Any: ...

    @abstractmethod
    def zeros(self, shape: tuple[int, ...], dtype=np.float32) -> Any: ...

    @abstractmethod
    def to_host(self, a: Any) -> np.ndarray:
        """A host (NumPy) copy of a backend array; synchronizes with pending work."""

    def to_host_later(self, a: Any) -> Callable[[], np.ndarray]:
        """A read of `a` as the work queued so far leaves it, started now: the returned callable waits for that
        read alone (not for work queued after this call) and returns the host copy. The decode loop queues step
        n + 1 before it waits for token n (graph.StepQueue). Synchronous backends copy at once."""
        out = self.to_host(a)
        return lambda: out

    # A ring of host memory the decode step writes its token into, read by graph.StepQueue instead of
    # to_host_later (CudaOps with BW24_TOKEN_RING=1: ops/cuda/readback.py TokenRing); None: no such ring.
    token_ring: Any = None

    def publish_token(self, token: Any, pos: Any) -> None:
        """Last in the decode step (graph.decode_step): its sampled token into token_ring's slot for pos[0]. A
        no-op without a ring."""
        return None

    @abstractmethod
    def copy_from_host(self, dst: Any, src: np.ndarray) -> None:
        """dst[...] = src (same shape and dtype)."""

    def round_to(self, a: Any, dtype) -> None:
        """a's values rounded to dtype's grid in place (a keeps its element; the gate's calibration of
        a float16 KV cache, engine.Engine.verify_prefill)."""
        a[...] = a.astype(dtype)

    def synchronize(self) -> None:
        """Wait for queued work (no-op for synchronous backends)."""
        return None

    def capture(self, step: Callable[[], None], keys: Callable[[], int] | None = None) -> Callable[[], None]:
        """Turn a step that only calls ops on preallocated buffers into something replayable.

        ref returns the step itself (eager); cuda may capture it as a CUDA graph on the first call
        and replay it afterwards. The step must not read host values that change between calls.
        keys: the cache's keys for the call about to run (cuda: one graph per depth class, BW24_ATTN_DEPTH).
        """
        return step

    # The most rows a captured step may run: above it, forward takes paths a graph cannot hold (cuBLAS
    # prefill GEMMs on cuda), so GraphsByT runs such a step eagerly. None: no limit (ref is eager anyway).
    graph_rows: int | None = None

    # ---- weights ------------------------------------------------------------------------------
    @abstractmethod
    def load_weight(self, ti: Any) -> Any:
        """A matrix [N, K] or stacked experts [X, N, K] (gguf TensorInfo) as a backend weight."""

    @abstractmethod
    def load_vector(self, ti: Any) -> Any:
        """A 1-D tensor (norm weight, bias) as a float32 backend array [K]."""

    # ---- ops ----------------------------------------------------------------------------------
    @abstractmethod
    def embed(self, ids: Any, table: Any, scale: float, *, out: Any) -> None:
        """out[t] = table[ids[t]] * scale.  ids int32 [T], table weight [V, E], out [T, E]."""

    @abstractmethod
    def rmsnorm(self, x: Any, w: Any, eps: float, *, out: Any, add: Any = None) -> None:
        """Over the last axis: if add is given, first x += add (x is the residual stream, updated in
        place); then out = x / sqrt(mean(x^2) + eps) * w.  x, add, out [..., K], w [K]; out may be x."""

    @abstractmethod
    def add(self, x: Any, y: Any, *, out: Any) -> None:
        """out = x + y (same shapes); out may alias x or y."""

    @abstractmethod
    def matmul(self, w: Any, x: Any, *, out: Any, bias: Any = None, residual: Any = None) -> None:
        """out = x @ W^T (+ bias) (+ residual).  W [N, K], x [T, K], bias [N], residual/out [T, N];
        residual may alias out (the fused residual add of an output projection)."""

    def matmul_norm_ahead(self, w: Any, x: Any, *, out: Any, residual: Any, norm: Any, eps: float) -> None:
        """matmul (out = x @ W^T + residual) whose out the next op normalizes, rmsnorm(out) * norm with this eps
        (norm_matmul_multi / ffn_glu): a backend may have the matvec do its share of that norm (cuda
        BW24_NORM_AHEAD); out is the same either way."""
        self.matmul(w, x, out=out, residual=residual)

    def norm_matmul_multi(self, h: Any, norm: Any, eps: float, ws: Sequence[Any], *, x: Any, outs: Sequence[Any],
                          biases: Sequence[Any] | None = None) -> None:
        """x = rmsnorm(h) * norm, then matmul_multi(ws, x): a block's input norm and its Q/K/V or gate/up.
        A backend may fuse them (cuda: qmv3n normalizes inside the matvec's blocks); x is scratch, its
        contents unspecified afterwards."""
        self.rmsnorm(h, norm, eps, out=x)
        self.matmul_multi(ws, x, outs=outs, biases=biases)

    def ffn_glu(self, h: Any, norm: Any, eps: float, w_gate: Any, w_up: Any, act: str, *, x: Any, g: Any,
                u: Any) -> None:
        """g = act(x Wg^T) * (x Wu^T) with x = rmsnorm(h) * norm: a dense FFN up to its down projection.
        A backend may fuse it (cuda: the GLU in prefill's GEMM epilogue); x and u are scratch, their contents
        unspecified afterwards."""
        self.norm_matmul_multi(h, norm, eps, (w_gate, w_up), x=x, outs=(g, u))
        self.glu(g, u, act, out=g)

    def matmul_multi(
        self, ws: Sequence[Any], x: Any, *, outs: Sequence[Any], biases: Sequence[Any] | None = None
    ) -> None:
        """Several matmuls of the same input (Q/K/V, gate/up): a backend may fuse them."""
        biases = biases if biases is not None else [None] * len(ws)
        for w, o, b in zip(ws, outs, biases, strict=True):
            self.matmul(w, x, out=o, bias=b)

    @abstractmethod
    def rope_kv(
        self, q: Any, k: Any, v: Any, pos: Any, k_cache: Any, v_cache: Any, *,
        base: float, freq_scale: float, rope_dim: int, mode: str,
        q_norm: Any = None, k_norm: Any = None, norm_eps: float | None = None,
    ) -> None:
        """RoPE on q (in place) and k, then append k, v to the cache at positions pos..pos+T-1.

        q [T, H, D], k [T, Hkv, D], v [T, Hkv, Dv], k_cache [Hkv, S, D], v_cache [Hkv, S, Dv].
        Token t has position p = pos[0] + t; pair i (i < rope_dim / 2) turns by
        p * freq_scale * base^(-2i / rope_dim). mode "norm" pairs (2i, 2i+1), "neox" (i, i + rope_dim/2);
        dims >= rope_dim pass unchanged. k is left unrotated in its buffer (only the cache gets it).
        qk-norm (qwen3, gemma3): q_norm / k_norm [D], when given, first RMSNorm each head of q / k
        over its D dims with norm_eps (exactly rmsnorm(x, w, norm_eps) per head), then the rotation;
        q keeps the normed and rotated values, k's buffer is left as it was."""

    @abstractmethod
    def attention(
        self, q: Any, k_cache: Any, v_cache: Any, pos: Any, *, scale: float, softcap: float | None,
        window: int | None, out: Any, n_keys: int | None = None,
    ) -> None:
        """Causal GQA attention of T queries against the cache (which already holds them).

        q [T, H, D], caches as in rope_kv, out [T, H, Dv]. Query t (position p = pos[0] + t) attends to
        keys j <= p, and only p - j < window when window is set. Score = (q . k) * scale, then
        softcap * tanh(score / softcap) when softcap is set; softmax over keys; weighted sum of v.
        Query head h reads kv head h // (H / Hkv). n_keys: the host's count of cached keys (pos[0] + T),
        when the caller knows it without reading the device; a backend may size its work by it."""

    def rope_attention(self, q: Any, k: Any, v: Any, pos: Any, k_cache: Any, v_cache: Any, *, rope: dict,
                       attn: dict) -> None:
        """rope_kv(q, k, v, pos, k_cache, v_cache, **rope), then attention(q, k_cache, v_cache, pos,
        **attn): one op so that a backend may run both as one launch (q may be left unrotated then). No
        backend does now: cuda's rotation inside the attention kernel (BW24_ROPE_ATTN) was slower in every
        step timed and is removed (docs/switches.md)."""
        self.rope_kv(q, k, v, pos, k_cache, v_cache, **rope)
        self.attention(q, k_cache, v_cache, pos, **attn)

    def qkv_rope_attention(self, h: Any, norm: Any, eps: float, ws: Sequence[Any], *, x: Any, outs: Sequence[Any],
                           biases: Sequence[Any] | None, q: Any, k: Any, v: Any, pos: Any, k_cache: Any, v_cache: Any,
                           rope: dict, attn: dict) -> None:
        """An attention block up to its output projection: Q/K/V (outs, the [T, *] rows of q, k, v) of x, or with
        `norm` of rmsnorm(h) * norm (norm_matmul_multi, x its scratch), then rope_attention(q, k, v, ...). One op so
        that a backend may fuse the rope into the Q/K/V launch (cuda BW24_QKV_ROPE: qmv8_qkvr)."""
        if norm is None:
            self.matmul_multi(ws, x, outs=outs, biases=biases)
        else:
            self.norm_matmul_multi(h, norm, eps, ws, x=x, outs=outs, biases=biases)
        self.rope_attention(q, k, v, pos, k_cache, v_cache, rope=rope, attn=attn)

    @abstractmethod
    def glu(self, gate: Any, up: Any, act: str, *, out: Any) -> None:
        """out = act(gate) * up; act "silu" (SwiGLU) or "gelu_tanh" (GeGLU, tanh approximation).
        gate, up, out [T, F]; out may alias gate."""

    def swiglu(self, gate: Any, up: Any, *, out: Any) -> None:
        self.glu(gate, up, "silu", out=out)

    def gelu_tanh_glu(self, gate: Any, up: Any, *, out: Any) -> None:
        self.glu(gate, up, "gelu_tanh", out=out)

    @abstractmethod
    def moe(
        self, x: Any, router: Any, gate_exps: Any, up_exps: Any, down_exps: Any, *, n_used: int,
        norm_weights: bool, act: str, out: Any, residual: Any = None,
    ) -> None:
        """Mixture of experts (qwen3moe / llama.cpp build_moe_ffn with softmax gating).

        x [T, E], router [X, E], gate_exps / up_exps [X, F, E], down_exps [X, E, F], out [T, E].
        probs = softmax(x @ router^T); the n_used largest (ties: lower expert index) are kept, weights
        renormalized to sum 1 if norm_weights; out = sum_e w_e * down_e(act(gate_e x) * up_e x)
        (+ residual, which may alias out). Only the selected experts' weights are read."""

    def norm_moe(
        self, h: Any, norm: Any, eps: float, router: Any, gate_exps: Any, up_exps: Any, down_exps: Any, *, x: Any,
        n_used: int, norm_weights: bool, act: str, out: Any, residual: Any = None,
    ) -> None:
        """x = rmsnorm(h) * norm, then moe(x, ...): a MoE block's FFN from its input norm. A backend may fuse them
        (cuda: the norm inside the router's launch, BW24_MOE_ROUTER_NORM); x holds the normed rows afterwards."""
        self.rmsnorm(h, norm, eps, out=x)
        self.moe(x, router, gate_exps, up_exps, down_exps, n_used=n_used, norm_weights=norm_weights, act=act, out=out,
                 residual=residual)

    @abstractmethod
    def logits(self, x: Any, w: Any, softcap: float | None, *, out: Any) -> None:
        """out = x @ W^T, then softcap * tanh(out / softcap) when softcap is set.
        x [T, E], W [V, E], out [T, V]."""

    @abstractmethod
    def advance(self, pos: Any, n: int) -> None:
        """pos[0] += n (after a step has appended n tokens to the cache)."""

    @abstractmethod
    def sample(self, logits: Any, params: Any, pos: Any, *, out: Any, counts: Any = None) -> None:
        """Draw the next token from logits [V] (bw24.engine.sampling semantics) into out (int32 [1]).

        params: SamplingParams. The random draw is keyed by (params.seed, pos[0]) where pos[0] is the
        position the new token will occupy; counts (int32 [V], occurrences of each token in the
        context) feeds the penalties and gets counts[new token] += 1."""
