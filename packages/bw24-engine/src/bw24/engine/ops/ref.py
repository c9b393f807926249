"""ref: the NumPy op backend. Float32 storage, float64 where rounding matters (norm statistics,
softmax, rope angles). It is the oracle for kernel_check, so it favours the obvious formulation.

Speed notes (CPU decode is memory-bound): weights are dequantized once to contiguous float32 [N, K]
so a T=1 matmul is one BLAS sgemv over the rows; the tied head reuses the embedding table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import sampling
from ..errors import UnsupportedModelError
from .base import ACTIVATIONS, ROPE_MODES, Ops, check_qk_norm

_SQRT_2_OVER_PI = 0.7978845608028654


@dataclass(frozen=True, eq=False)
class DenseWeight:
    """A dequantized weight: data float32 [N, K] (or [X, N, K] for stacked experts)."""

    name: str
    qtype: Any
    data: np.ndarray

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape


def _key(ti: Any) -> tuple[str, int]:
    return ti.name, ti.raw.ctypes.data  # same tensor of the same mapping -> same cached weight


class RefOps(Ops):
    name = "cpu"
    xp = np
    verify_tolerance = 1e-2  # float32 gemm (prefill) vs gemv (decode) summation order: ~1e-4 seen

    def __init__(self) -> None:
        self._cache: dict[tuple[str, int], Any] = {}

    # ---- memory -------------------------------------------------------------------------------
    def empty(self, shape, dtype=np.float32):
        return np.empty(shape, dtype=dtype)

    def zeros(self, shape, dtype=np.float32):
        return np.zeros(shape, dtype=dtype)

    def to_host(self, a):
        return np.array(a, copy=True)

    def copy_from_host(self, dst, src):
        if dst.shape != np.shape(src):
            raise ValueError(f"copy_from_host: shape {np.shape(src)} into {dst.shape}")
        dst[...] = src

    # ---- weights ------------------------------------------------------------------------------
    def load_weight(self, ti):
        k = _key(ti)
        if k not in self._cache:
            if len(ti.shape) not in (2, 3):
                raise UnsupportedModelError(f"{ti.name}: expected a 2-D or 3-D weight, got shape {ti.shape}")
            self._cache[k] = DenseWeight(ti.name, ti.qtype, np.ascontiguousarray(ti.dequantize(), np.float32))
        return self._cache[k]

    def load_vector(self, ti):
        k = _key(ti)
        if k not in self._cache:
            if len(ti.shape) != 1:
                raise UnsupportedModelError(f"{ti.name}: expected a 1-D tensor, got shape {ti.shape}")
            self._cache[k] = np.ascontiguousarray(ti.dequantize(), np.float32)
        return self._cache[k]

    # ---- ops ----------------------------------------------------------------------------------
    def embed(self, ids, table, scale, *, out):
        np.take(table.data, ids, axis=0, out=out)
        if scale != 1.0:
            out *= np.float32(scale)

    def rmsnorm(self, x, w, eps, *, out, add=None):
        if add is not None:
            x += add
        ms = np.mean(np.square(x, dtype=np.float64), axis=-1, keepdims=True)
        np.multiply(x, (1.0 / np.sqrt(ms + eps)).astype(np.float32), out=out)
        out *= w

    def add(self, x, y, *, out):
        np.add(x, y, out=out)

    def matmul(self, w, x, *, out, bias=None, residual=None):
        y = _mm(w.data, x)
        if bias is not None:
            y += bias
        if residual is not None:
            y += residual
        out[...] = y

    def rope_kv(self, q, k, v, pos, k_cache, v_cache, *, base, freq_scale, rope_dim, mode, q_norm=None, k_norm=None,
                norm_eps=None):
        if mode not in ROPE_MODES:
            raise ValueError(f"rope mode {mode!r} not in {ROPE_MODES}")
        check_qk_norm(q_norm, k_norm, norm_eps)
        T, p0 = q.shape[0], int(pos[0])
        if p0 + T > k_cache.shape[1]:
            raise IndexError(f"rope_kv: positions {p0}..{p0 + T - 1} beyond cache length {k_cache.shape[1]}")
        half = rope_dim // 2
        inv_freq = base ** (-np.arange(half, dtype=np.float64) * 2.0 / rope_dim)
        ang = (p0 + np.arange(T, dtype=np.float64))[:, None] * freq_scale * inv_freq  # [T, half]
        cos = np.cos(ang).astype(np.float32)[:, None, :]  # [T, 1, half]
        sin = np.sin(ang).astype(np.float32)[:, None, :]
        if q_norm is not None:
            self.rmsnorm(q, q_norm, norm_eps, out=q)  # per head over D, as the separate call did
        kr = k.copy()
        if k_norm is not None:
            self.rmsnorm(k, k_norm, norm_eps, out=kr)
        _rotate(q, cos, sin, rope_dim, mode)
        _rotate(kr, cos, sin, rope_dim, mode)
        k_cache[:, p0 : p0 + T] = kr.transpose(1, 0, 2)
        v_cache[:, p0 : p0 + T] = v.transpose(1, 0, 2)

    def attention(self, q, k_cache, v_cache, pos, *, scale, softcap, window, out, n_keys=None):
        T, H, D = q.shape
        Hkv = k_cache.shape[0]
        p0 = int(pos[0])
        S = p0 + T  # the cache already holds this step's keys
        g = H // Hkv
        qh = q.reshape(T, Hkv, g, D).transpose(1, 2, 0, 3)  # [Hkv, g, T, D]
        s = np.matmul(qh, k_cache[:, None, :S].transpose(0, 1, 3, 2)).astype(np.float64) * scale  # [Hkv,g,T,S]
        if softcap:
            s = softcap * np.tanh(s / softcap)
        qpos = p0 + np.arange(T)[:, None]
        kpos = np.arange(S)[None, :]
        allowed = kpos <= qpos
        if window:
            allowed &= qpos - kpos < window
        s = np.where(allowed, s, -np.inf)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        o = np.matmul(p.astype(np.float32), v_cache[:, None, :S])  # [Hkv, g, T, Dv]
        out[...] = o.transpose(2, 0, 1, 3).reshape(out.shape)

    def glu(self, gate, up, act, *, out):
        out[...] = _act(gate, act) * up

    def moe(self, x, router, gate_exps, up_exps, down_exps, *, n_used, norm_weights, act, out, residual=None):
        rl = _mm(router.data, x)
        routes = self._route(rl, n_used, norm_weights)
        if self.routing is not None:  # the gate's pin (engine.routing_pin): its experts, weighted by rl
            pinned = self.routing.apply(rl, np.array([s for s, _ in routes]), n_used, norm_weights)
            if pinned is not None:
                routes = list(zip(*pinned, strict=True))
        y = np.zeros(out.shape, np.float32) if residual is None else residual.astype(np.float32, copy=True)
        xe = self._expert_input(x)
        for t, (sel, wts) in enumerate(routes):
            xt = xe[t : t + 1]
            for e, we in zip(sel, wts, strict=True):
                h = self._expert_input(_act(_mm(gate_exps.data[e], xt), act) * _mm(up_exps.data[e], xt))
                y[t] += np.float32(we) * _mm(down_exps.data[e], h)[0]
        out[...] = y

    def _route(self, logits, n_used: int, norm_weights: bool):
        """The top-k of moe (a subclass may plant a bug here: the routing pin's canary)."""
        return route(logits, n_used, norm_weights)

    def _expert_input(self, v):
        """An expert matvec's input as the backend reads it (exact here; Int8RefOps may round it)."""
        return v

    def logits(self, x, w, softcap, *, out):
        y = _mm(w.data, x)
        if softcap:
            y = softcap * np.tanh(y / softcap)
        out[...] = y

    def advance(self, pos, n):
        pos[0] += n

    def sample(self, logits, params, pos, *, out, counts=None):
        tok = sampling.sample(np.asarray(logits).reshape(-1), params, int(pos[0]), counts)
        out[0] = tok
        if counts is not None:
            counts[tok] += 1


def route(logits: np.ndarray, n_used: int, norm_weights: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per token of router logits [T, X]: (the n_used experts of largest softmax probability, in descending
    order, ties to the lower index; their float64 weights, renormalized to sum 1 when norm_weights)."""
    probs = router_probs(logits)
    sel = np.argsort(-probs, axis=-1, kind="stable")[:, :n_used]
    return list(zip(sel, expert_weights(probs, sel, norm_weights), strict=True))


def router_probs(logits: np.ndarray) -> np.ndarray:
    """softmax of router logits [T, X], in float64."""
    logits = np.asarray(logits, np.float64)
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return probs / probs.sum(axis=-1, keepdims=True)


def expert_weights(probs: np.ndarray, sel: np.ndarray, norm_weights: bool) -> np.ndarray:
    """The weights [T, k] of the experts sel [T, k] (router_probs' probs [T, X] at them, renormalized to sum 1
    when norm_weights): route's, and the gate's routing pin's for the experts it pins."""
    wts = np.take_along_axis(probs, np.asarray(sel, np.int64), axis=-1)
    return wts / wts.sum(axis=-1, keepdims=True) if norm_weights else wts


def _mm(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """x [T, K] @ w[N, K]^T -> [T, N]. T = 1 goes through sgemv on the contiguous rows (fastest)."""
    if x.shape[0] == 1:
        return np.dot(w, x[0])[None, :]
    return x @ w.T


def _act(x: np.ndarray, act: str) -> np.ndarray:
    if act == "silu":
        with np.errstate(over="ignore"):  # exp(-x) -> inf for x << 0 gives the right limit, 0
            return x / (1.0 + np.exp(-x))
    if act == "gelu_tanh":
        return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
    raise ValueError(f"activation {act!r} not in {ACTIVATIONS}")


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, rope_dim: int, mode: str) -> None:
    """In-place rotation of x [T, heads, D] (first rope_dim dims)."""
    if mode == "neox":
        half = rope_dim // 2
        a, b = x[..., :half].copy(), x[..., half:rope_dim].copy()
        x[..., :half] = a * cos - b * sin
        x[..., half:rope_dim] = b * cos + a * sin
    else:
        a, b = x[..., 0:rope_dim:2].copy(), x[..., 1:rope_dim:2].copy()
        x[..., 0:rope_dim:2] = a * cos - b * sin
        x[..., 1:rope_dim:2] = b * cos + a * sin
