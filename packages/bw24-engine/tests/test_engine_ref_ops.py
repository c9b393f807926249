"""ref ops vs independent, deliberately naive float64 formulations (loops, complex numbers)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from bw24.engine.ops import DenseWeight, RefOps

rng = np.random.default_rng(1234)
ops = RefOps()


def W(a: np.ndarray) -> DenseWeight:
    return DenseWeight("w", None, np.ascontiguousarray(a, np.float32))


def f32(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def test_embed_gathers_and_scales():
    table = f32(11, 5)
    ids = np.array([3, 0, 10, 3], np.int32)
    out = np.empty((4, 5), np.float32)
    ops.embed(ids, W(table), 2.5, out=out)
    for t, i in enumerate(ids):
        np.testing.assert_array_equal(out[t], table[i] * np.float32(2.5))


@pytest.mark.parametrize("with_add", [False, True])
def test_rmsnorm(with_add):
    x, w, add = f32(3, 4, 17), f32(17), f32(3, 4, 17)
    x0 = x.copy()
    out = np.empty_like(x)
    ops.rmsnorm(x, w, 1e-5, out=out, add=add if with_add else None)
    h = x0.astype(np.float64) + (add if with_add else 0)
    for idx in np.ndindex(3, 4):
        r = h[idx]
        want = r / math.sqrt(sum(v * v for v in r) / r.size + 1e-5) * w
        np.testing.assert_allclose(out[idx], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x, h, rtol=1e-6)  # residual stream updated in place


@pytest.mark.parametrize("T", [1, 5])
def test_matmul_bias_residual(T):
    w, x, b, r = f32(7, 13), f32(T, 13), f32(7), f32(T, 7)
    out = r.copy()
    ops.matmul(W(w), x, out=out, bias=b, residual=out)  # residual aliasing out, as the forwards do
    want = np.array([[sum(float(x[t, k]) * float(w[n, k]) for k in range(13)) + b[n] + r[t, n]
                      for n in range(7)] for t in range(T)])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def _rope_complex(x: np.ndarray, p: int, base: float, scale: float, rope_dim: int, mode: str) -> np.ndarray:
    """Rotation as multiplication by e^{i theta} on explicitly paired complex numbers."""
    y = x.astype(np.float64).copy()
    half = rope_dim // 2
    for i in range(half):
        a, b = (i, i + half) if mode == "neox" else (2 * i, 2 * i + 1)
        z = (y[..., a] + 1j * y[..., b]) * np.exp(1j * p * scale * base ** (-2 * i / rope_dim))
        y[..., a], y[..., b] = z.real, z.imag
    return y


@pytest.mark.parametrize("mode", ["norm", "neox"])
@pytest.mark.parametrize("rope_dim", [8, 6])
def test_rope_kv_rotates_and_appends(mode, rope_dim):
    T, H, Hkv, D, S, p0 = 3, 4, 2, 8, 16, 5
    q, k, v = f32(T, H, D), f32(T, Hkv, D), f32(T, Hkv, D)
    q0, k0 = q.copy(), k.copy()
    kc, vc = np.zeros((Hkv, S, D), np.float32), np.zeros((Hkv, S, D), np.float32)
    pos = np.array([p0], np.int32)
    ops.rope_kv(q, k, v, pos, kc, vc, base=1000.0, freq_scale=0.5, rope_dim=rope_dim, mode=mode)
    for t in range(T):
        np.testing.assert_allclose(q[t], _rope_complex(q0[t], p0 + t, 1000.0, 0.5, rope_dim, mode), atol=1e-5)
        np.testing.assert_allclose(kc[:, p0 + t], _rope_complex(k0[t], p0 + t, 1000.0, 0.5, rope_dim, mode),
                                   atol=1e-5)
        np.testing.assert_array_equal(vc[:, p0 + t], v[t])
    assert not kc[:, :p0].any() and not kc[:, p0 + T:].any()
    assert int(pos[0]) == p0  # rope_kv does not advance; advance() does


def _attention_loops(q, kc, vc, p0, scale, softcap, window):
    T, H, _ = q.shape
    Hkv = kc.shape[0]
    out = np.zeros((T, H, vc.shape[2]))
    for t in range(T):
        p = p0 + t
        for h in range(H):
            g = h // (H // Hkv)
            keys = [j for j in range(p + 1) if window is None or p - j < window]
            s = []
            for j in keys:
                x = float(np.dot(q[t, h].astype(np.float64), kc[g, j])) * scale
                s.append(softcap * math.tanh(x / softcap) if softcap else x)
            m = max(s)
            e = [math.exp(v - m) for v in s]
            for j, ej in zip(keys, e, strict=True):
                out[t, h] += ej / sum(e) * vc[g, j]
    return out


@pytest.mark.parametrize("softcap,window", [(None, None), (5.0, None), (None, 3)])
@pytest.mark.parametrize("T,p0", [(1, 6), (4, 0), (3, 4)])
def test_attention_causal_gqa(T, p0, softcap, window):
    H, Hkv, D, Dv, S = 6, 2, 8, 4, 12
    q, kc, vc = f32(T, H, D), f32(Hkv, S, D), f32(Hkv, S, Dv)
    kc[:, p0 + T:] = 1e6  # beyond the sequence: must never be read
    out = np.empty((T, H, Dv), np.float32)
    ops.attention(q, kc, vc, np.array([p0], np.int32), scale=0.3, softcap=softcap, window=window, out=out)
    np.testing.assert_allclose(out, _attention_loops(q, kc, vc, p0, 0.3, softcap, window), rtol=1e-4, atol=1e-5)


def test_glu_activations():
    g, u = f32(2, 9), f32(2, 9)
    out = np.empty_like(g)
    ops.glu(g, u, "silu", out=out)
    np.testing.assert_allclose(out, [[a / (1 + math.exp(-a)) * b for a, b in zip(r, s, strict=True)]
                                     for r, s in zip(g, u, strict=True)], rtol=1e-5, atol=1e-6)
    ops.glu(g, u, "gelu_tanh", out=out)
    gel = [[0.5 * a * (1 + math.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a**3))) * b
            for a, b in zip(r, s, strict=True)] for r, s in zip(g, u, strict=True)]
    np.testing.assert_allclose(out, gel, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="activation"):
        ops.glu(g, u, "relu", out=out)


@pytest.mark.parametrize("norm", [True, False])
def test_moe_selects_top_experts(norm):
    T, E, F, X, k = 3, 8, 5, 6, 2
    x, router = f32(T, E), f32(X, E)
    gate, up, down = f32(X, F, E), f32(X, F, E), f32(X, E, F)
    res = f32(T, E)
    out = res.copy()
    ops.moe(x, W(router), W(gate), W(up), W(down), n_used=k, norm_weights=norm, act="silu", out=out,
            residual=out)
    for t in range(T):
        logits = router.astype(np.float64) @ x[t]
        p = np.exp(logits - logits.max())
        p /= p.sum()
        top = sorted(range(X), key=lambda e: -p[e])[:k]
        wsum = sum(p[e] for e in top) if norm else 1.0
        want = res[t].astype(np.float64).copy()
        for e in top:
            a = gate[e] @ x[t]
            h = a / (1 + np.exp(-a)) * (up[e] @ x[t])
            want += p[e] / wsum * (down[e] @ h)
        np.testing.assert_allclose(out[t], want, rtol=1e-4, atol=1e-4)


def test_logits_softcap():
    x, w = f32(2, 6), f32(9, 6)
    out = np.empty((2, 9), np.float32)
    ops.logits(x, W(w), 3.0, out=out)
    np.testing.assert_allclose(out, 3.0 * np.tanh((x.astype(np.float64) @ w.T) / 3.0), rtol=1e-5, atol=1e-6)
    ops.logits(x, W(w), None, out=out)
    np.testing.assert_allclose(out, x.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-5)


def test_advance_and_add():
    pos = np.array([7], np.int32)
    ops.advance(pos, 5)
    assert int(pos[0]) == 12
    a, b = f32(3), f32(3)
    out = np.empty(3, np.float32)
    ops.add(a, b, out=out)
    np.testing.assert_array_equal(out, a + b)
