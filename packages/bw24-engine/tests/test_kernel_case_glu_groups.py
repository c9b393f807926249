"""kernel_cases_q8.glu_groups_case (kernel-check's `glu groups` cases, BW24_GLU_GROUPS) on a host stand-in for the
CUDA backend: CudaOps' own dispatch (matmul_norm_ahead, ffn_glu, glu, the q8 launchers) runs as it is, and each
launch it makes is done on the host by its kernel's formula (the q8 twins of ops/cuda/q8.py). Green on that, red
with the planted epilogue (the activation left out), red when the fused launch does not run at T = 1 (a spilled
build), and a spilled 5-token build falls back to the unfused rows and stays green. The kernel itself runs in the
GPU's kernel-check and in test_cuda_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.engine.kernel_cases_q8 import glu_groups_case
from bw24.engine.ops.cuda import q8
from bw24.engine.ops.cuda.repack import FMT
from bw24.engine.ops.ref import RefOps
from gguf.constants import GGMLQuantizationType as Q

f32 = np.float32


def _pack(d, sums):
    """q8.unpack_xs inverted: int32 [T, G, 2] (d's bits, s0 | s1 << 16)."""
    lo = (sums[..., 0].astype(np.int64) & 0xFFFF) | (sums[..., 1].astype(np.int64) << 16)
    return np.stack([d.astype(f32).view(np.int32), lo.astype(np.int64).astype(np.uint32).view(np.int32)], axis=-1)


def host_cu(helpers, planted: bool = False, spills=lambda name: 0):
    """A Q8DispatchOps whose launches compute: quantize_x, qmv8_na, qmv8_3 / qmv8_3n, glu_q8, qmv8_glu by their
    formulas on the dequantized int8 rows (float64 products, as matmul_q8_ref), rmsnorm by the reference (leaving its
    int8 rows where q8.feeds_q8, as rmsnorm_reg does)."""
    ref = RefOps()

    class HostQ8(helpers.Q8DispatchOps):
        def __init__(self):
            super().__init__()
            self.norm_ahead, self.forced, self.mats = False, {}, {}
            self.qmv_configs.plan = lambda qt, n, k, gate_force=True: self.forced.get(qt.name, ("q8", 4, 8))

        def set_launch_config(self, kind, name, cfg):
            self.forced.pop(name, None)
            if cfg:
                self.forced[name] = (cfg["path"], cfg["warps"], cfg["rows"])

        def load_weight(self, t):
            from types import SimpleNamespace

            dense = np.asarray(ref.load_weight(t).data, np.float64)
            key = len(self.mats) + 1
            self.mats[key] = dense
            return SimpleNamespace(n=dense.shape[0], k=dense.shape[1], qtype=t.qtype, fmt=FMT[t.qtype],
                                   args=lambda: (key, 0, 0, 0))

        def zeros(self, shape, dtype=f32):
            return np.zeros(shape, dtype).view(self.dev)

        def _put(self, a):
            return np.array(a).view(self.dev)

        def to_host(self, a):
            return np.array(a)

        def _k_with(self, file, name, extra):
            fn = super()._k_with(file, name, extra)
            fn.local_size_bytes = spills(name)
            return fn

        def rmsnorm(self, x, w, eps, *, out):
            self._q8_ready = None
            ref.rmsnorm(np.asarray(x), np.asarray(w), eps, out=out)
            self.launches.append(("rmsnorm", {}, None, None))
            if q8.feeds_q8(self, out):
                xq, xs = q8.buffers(self, *out.shape)
                self._codes(out, xq, xs)
                q8.mark_ready(self, out)

        def _codes(self, v, xq, xs):
            q, d, s = q8.quantize_x_ref(np.asarray(v).reshape(xq.size // v.shape[-1], v.shape[-1]))
            xq[:], xs[:] = q.ravel(), _pack(d, s).ravel()

        def _x(self, xq, xs, T, K, nss=None, eps=0.0):
            d, _ = q8.unpack_xs(np.asarray(xs).reshape(T, K // 32, 2))
            x = (np.asarray(xq).reshape(T, K // 32, 32).astype(np.float64) * d[..., None]).reshape(T, K)
            return x if nss is None else x * q8.na_scale_ref(np.asarray(nss).reshape(T, K // 32), K, eps)[:, None]

        def _glu(self, a, b):
            out = np.empty_like(a)
            if planted:
                out[...] = a * b
            else:
                ref.glu(a, b, "silu", out=out)
            return out

        def _launch(self, fn, grid, block, args, shared_mem=0):
            super()._launch(fn, grid, block, args, shared_mem)
            base, a = fn.name.split("<")[0], self.launches[-1][1]
            if base == "quantize_x":
                self._codes(np.asarray(a["x"]).reshape(a["T"], a["K"]), a["xq"], a["xs"])
            elif base == "qmv8_na":
                T, K = a["T"], a["K"]
                h = (self._x(a["xq"], a["xs"], T, K) @ self.mats[a["pa"]].T + a["residual"]).astype(f32)
                a["out"][...] = h
                yq, yd, ysum, yss = q8.na_ref(h, a["nw"])
                a["yq"][:], a["ys"][:], a["yss"][:] = yq.ravel(), _pack(yd, ysum).ravel(), yss.ravel()
            elif base in ("qmv8_3", "qmv8_3n"):
                T, K = a["T"], a["K"]
                x = self._x(a["xq"], a["xs"], T, K, a.get("nss"), a.get("eps", 0.0))
                for i in range(3):
                    if a[f"N{i}"]:
                        a[f"out{i}"][...] = (x @ self.mats[a[f"a{i}"]].T).astype(f32)
            elif base == "glu_q8":
                v = self._glu(np.asarray(a["gate"]), np.asarray(a["up"]))
                a["out"][...] = v
                self._codes(v, a["xq"], a["xs"])
            elif base == "qmv8_glu":
                T, K = a["T"], a["K"]
                x = self._x(a["xq"], a["xs"], T, K, a["nss"] if fn.name.endswith("true>") else None, a["eps"])
                g, u = ((x @ self.mats[a[p]].T).astype(f32) for p in ("ga", "ua"))
                a["u"][...] = u
                a["g"][...] = self._glu(g, u)
                self._codes(a["g"], a["yq"], a["ys"])
            else:
                raise AssertionError(f"no host formula for {fn.name}")

    return HostQ8()


CASES = [(Q.Q4_K, 1, 1024, 3072, (1, 4), True), (Q.Q4_K, 1, 1024, 3072, (1, 4), False),
         (Q.Q4_K, 5, 1024, 3072, (1, 4), True), (Q.Q8_0, 1, 2048, 1024, (2, 8), False)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].name} T={c[1]} na={c[5]}")
def test_green_on_the_formulas_red_without_the_activation(case, helpers):
    rng = lambda: np.random.default_rng(7)  # noqa: E731 (the same draws for both runs)
    cu = host_cu(helpers)
    r = glu_groups_case(*case)("glu groups", RefOps(), cu, rng())
    assert r.ok, r
    assert "qmv8_glu" in [n.split("<")[0] for n, *_ in cu.launches] and not cu.glu_groups and not cu.norm_ahead
    assert not glu_groups_case(*case)("glu groups", RefOps(), host_cu(helpers, planted=True), rng()).ok


def test_red_where_the_decode_build_spills_and_a_spilled_verify_build_falls_back(helpers):
    """A T = 1 case whose fused build spills (so the unfused launches run) is red: it would check nothing fused. A
    5-token case whose T = 5 build spills runs the unfused launches there, green against its fused decode rows; with
    the planted epilogue those decode rows go red."""
    spill_all = host_cu(helpers, spills=lambda name: 400)
    assert not glu_groups_case(*CASES[0])("glu groups", RefOps(), spill_all, np.random.default_rng(1)).ok
    verify_spills = lambda name: 332 if name.startswith("qmv8_glu") and ",5," in name else 0  # noqa: E731
    cu = host_cu(helpers, spills=verify_spills)
    assert glu_groups_case(*CASES[2])("glu groups", RefOps(), cu, np.random.default_rng(1)).ok
    names = [n for n, *_ in cu.launches]
    assert any(n.startswith("qmv8_glu") and ",1," in n for n in names) and "glu_q8" in names
    bad = host_cu(helpers, planted=True, spills=verify_spills)
    assert not glu_groups_case(*CASES[2])("glu groups", RefOps(), bad, np.random.default_rng(1)).ok
