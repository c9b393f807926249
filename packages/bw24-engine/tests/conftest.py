"""Fixtures of the engine tests: models built without a tokenizer, a tiny float32 GGUF writer, and
llama.cpp (llama-cpp-python, CPU) as the oracle."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from bw24.engine.models import model_class
from bw24.engine.ops import RefOps

SMOLLM2 = "smollm2-135m"


def build_model(path, n_ctx: int = 512, max_batch: int = 128, ops=None, **cfg_overrides):
    from dataclasses import replace

    from bw24.gguf import GGUFFile, ModelConfig

    f = GGUFFile(path)
    cfg = replace(ModelConfig.from_gguf(f), **cfg_overrides)
    return model_class(cfg.arch)(f, cfg, ops or RefOps(), n_ctx=n_ctx, max_batch=max_batch)


class RouterGapOps(RefOps):
    """RefOps that records, per MoE call, each token's router-logit gap between the last selected and
    the first unselected expert: where it is tiny, llama.cpp's slightly different activations (it
    quantizes them for quantized matmuls) may pick another expert, a routing near tie."""

    def __init__(self) -> None:
        super().__init__()
        self.gaps: list[np.ndarray] = []

    def moe(self, x, router, *args, n_used, **kw):
        lg = np.sort(x.astype(np.float64) @ router.data.T.astype(np.float64), axis=-1)[:, ::-1]
        self.gaps.append(lg[:, n_used - 1] - lg[:, n_used])
        super().moe(x, router, *args, n_used=n_used, **kw)

    def clear_routing(self, T: int, min_gap: float) -> np.ndarray:
        """Per position of the last prefill: True where no token up to it had a routing near tie
        in any layer (a mis-routed token also changes later positions through attention)."""
        g = np.min(np.stack(self.gaps), axis=0)
        self.gaps.clear()
        return np.minimum.accumulate(g[:T]) >= min_gap


def write_tiny_gguf(path: Path, arch: str, *, n_layer=2, E=64, H=4, Hkv=2, D=16, F=128, V=300,
                    X=0, k=0, Fx=0, swa=0, seed=0) -> Path:
    """A float32 model with random weights and no tokenizer (forward-only tests)."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    r = np.random.default_rng(seed)
    w.add_block_count(n_layer)
    w.add_embedding_length(E)
    w.add_head_count(H)
    w.add_head_count_kv(Hkv)
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_feed_forward_length(F)
    w.add_context_length(256)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    if X:
        w.add_expert_count(X)
        w.add_expert_used_count(k)
        w.add_expert_feed_forward_length(Fx)
    if swa:
        w.add_sliding_window(swa)

    def t(name, *shape, scale=0.2, offset=0.0):
        w.add_tensor(name, (offset + r.standard_normal(shape) * scale).astype(np.float32))

    t("token_embd.weight", V, E, scale=1.0)
    t("output_norm.weight", E, scale=0.1, offset=1.0)
    for i in range(n_layer):
        p = f"blk.{i}."
        t(p + "attn_norm.weight", E, scale=0.1, offset=1.0)
        t(p + "ffn_norm.weight", E, scale=0.1, offset=1.0)
        t(p + "attn_q.weight", H * D, E)
        t(p + "attn_k.weight", Hkv * D, E)
        t(p + "attn_v.weight", Hkv * D, E)
        t(p + "attn_output.weight", E, H * D)
        if arch == "qwen2":
            t(p + "attn_q.bias", H * D)
            t(p + "attn_k.bias", Hkv * D)
            t(p + "attn_v.bias", Hkv * D)
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            t(p + "attn_q_norm.weight", D, scale=0.1, offset=1.0)
            t(p + "attn_k_norm.weight", D, scale=0.1, offset=1.0)
        if arch == "gemma3":
            t(p + "post_attention_norm.weight", E, scale=0.1, offset=1.0)
            t(p + "post_ffw_norm.weight", E, scale=0.1, offset=1.0)
        if X:
            t(p + "ffn_gate_inp.weight", X, E)
            t(p + "ffn_gate_exps.weight", X, Fx, E)
            t(p + "ffn_up_exps.weight", X, Fx, E)
            t(p + "ffn_down_exps.weight", X, E, Fx)
        else:
            t(p + "ffn_gate.weight", F, E)
            t(p + "ffn_up.weight", F, E)
            t(p + "ffn_down.weight", E, F)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def margins(logits: np.ndarray) -> np.ndarray:
    top2 = np.sort(logits, axis=-1)[..., -2:]
    return top2[..., 1] - top2[..., 0]


def agreement(ours: np.ndarray, theirs: np.ndarray, min_margin: float = 0.5) -> tuple[float, int]:
    """(fraction of argmax agreement, number of positions) over positions whose oracle top-1/top-2
    margin is >= min_margin."""
    sel = margins(theirs) >= min_margin
    agree = ours.argmax(-1)[sel] == theirs.argmax(-1)[sel]
    return (float(agree.mean()) if sel.any() else float("nan")), int(sel.sum())


class Oracle:
    """llama.cpp on the CPU: per-position logits of a token sequence, and greedy continuations."""

    def __init__(self, path, n_ctx: int = 512):
        import llama_cpp.llama as lcl

        # A llama.cpp built with -march=native enables its AMX matmul on AMX hosts; in sandboxes
        # that do not grant AMX tile state it segfaults. use_extra_bufts=False (llama.cpp's
        # --no-repack) turns off AMX/repacked buffers; llama-cpp-python has no argument for it.
        orig = lcl.llama_cpp.llama_model_default_params

        def params():
            p = orig()
            p.use_extra_bufts = False
            return p

        lcl.llama_cpp.llama_model_default_params = params
        try:
            self.llm = lcl.Llama(model_path=str(path), logits_all=True, n_ctx=n_ctx, n_batch=n_ctx,
                                 n_threads=2, verbose=False)
        finally:
            lcl.llama_cpp.llama_model_default_params = orig

    def tokenize(self, text: str) -> list[int]:
        return list(self.llm.tokenize(text.encode("utf-8"), add_bos=True, special=False))

    def logits(self, ids) -> np.ndarray:
        self.llm.reset()
        self.llm.eval(list(ids))
        return np.array(self.llm.scores[: len(ids)], dtype=np.float32)

    def greedy(self, ids, n: int) -> tuple[list[int], list[float]]:
        """n greedy tokens and llama.cpp's top-1/top-2 margin at each step."""
        self.llm.reset()
        self.llm.eval(list(ids))
        out, marg = [], []
        for _ in range(n):
            row = np.array(self.llm.scores[self.llm.n_tokens - 1], dtype=np.float32)
            tok = int(np.argmax(row))
            out.append(tok)
            marg.append(float(margins(row)))
            self.llm.eval([tok])
        return out, marg


def ours_greedy(model, ids, n: int) -> list[int]:
    model.kv.reset()
    row = model.feed(ids)[-1]
    out = []
    for _ in range(n):
        tok = int(np.argmax(row))
        out.append(tok)
        row = model.feed([tok])[-1]
    return out


def check_greedy(ours: list[int], theirs: list[int], marg: list[float], near_tie: float = 0.5) -> str:
    """'' when equal, or equal up to a step where llama.cpp itself had a near tie; else a message."""
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        if a != b:
            if marg[i] < near_tie:
                return ""  # legitimate divergence: the oracle's own top-2 were within near_tie
            return f"step {i}: ours {a} vs llama.cpp {b} (llama.cpp margin {marg[i]:.3f}); ours={ours} theirs={theirs}"
    return ""


def spec_pair(d: Path, n_ctx: int) -> dict:
    """The speculative tests' tiny models in folder d, on the CPU backend: a qwen3 target with an MTP
    head, a one-layer draft with the same vocabulary, and a second load of the target (draft = target)."""
    from bw24.engine import Engine
    from bw24.gguf.synth import synth

    synth("qwen3-tiny", d / "target.gguf", mix="q8_0", seed=1, mtp=1)
    synth("qwen3-tiny", d / "draft.gguf", mix="q8_0", seed=2, n_layer=1)
    load = lambda n: Engine.load(d / n, backend="cpu", n_ctx=n_ctx, progress=False)  # noqa: E731
    return dict(target=load("target.gguf"), draft=load("draft.gguf"), same=load("target.gguf"))


def kernel_params(file: str, kernel: str) -> list[str]:
    """The parameter declarations of __global__ `kernel` in kernels/<file> (launch-plan tests check that
    the host passes as many arguments: a miscount is garbage on the device, not an error)."""
    import re

    from bw24.engine.ops.cuda.kernels import KERNEL_DIR

    text = (KERNEL_DIR / file).read_text()
    for m in re.finditer(r"__global__", text):
        head = re.sub(r"__launch_bounds__\s*\([^)]*\)", "", text[m.start():text.index("{", m.start())])
        name = re.search(r"(\w+)\s*\(", head)
        if name and name.group(1) == kernel:
            body = head[name.end():head.rindex(")")]
            return [p.strip() for p in body.split(",")]
    raise KeyError(f"no kernel {kernel} in {file}")


class HostDev(np.ndarray):
    """A host array standing in for a device one (data.ptr, shape, flags): launch-plan tests without a GPU."""

    @property
    def data(self):
        from types import SimpleNamespace

        return SimpleNamespace(ptr=self.ctypes.data)


def fresh_python(code: str, drop: str, **env: str) -> str:
    """stdout of `code` run in a fresh interpreter, as a user's process reads variables at import: this one's
    environment without the variables whose names start with `drop`, then `env` set."""
    import os
    import subprocess

    run_env = {k: v for k, v in os.environ.items() if not k.startswith(drop)} | env
    return subprocess.run([sys.executable, "-c", code], env=run_env, capture_output=True, text=True,
                          check=True).stdout


class Q8DispatchOps:
    """What CudaOps' q8 dispatch (matmul, matmul_norm_ahead, matmul_multi, ffn_glu, glu) reads and calls, without a
    GPU: launches recorded with their arguments by the kernels' parameter names (so a role swapped in the host's
    argument list shows), scratch kept by key (so a consumer's inputs can be matched with its producer's outputs).
    The CudaOps methods named in `_cuda` run as they are on this stand-in; rmsnorm only records itself (it leaves no
    int8 rows, so the plain path quantizes after it). spills: local memory bytes every build reports (q8.glu_kernel)."""

    _cuda = ("_verify_plan", "_multi_plan", "q8_loads", "matmul_multi", "matmul", "matmul_norm_ahead",
             "norm_matmul_multi", "ffn_glu", "glu", "qkv_rope_attention")

    def __init__(self, W=4, R=4, spills=0):
        from types import SimpleNamespace

        self.dev, self.params, self.spills = HostDev, kernel_params, spills
        self.norm_ahead, self.emulating, self.norm_fuse, self.verify_rows, self._q8_ready = True, False, False, None, None
        self.glu_groups = self.qkv_rope = False
        self.qmv_configs = SimpleNamespace(plan=lambda qt, n, k, gate_force=True: ("q8", W, R), loads=lambda qt, n, k: 0,
                                           min_k=1024)
        self.scratch, self.launches, self.qmv8_loads = {}, [], None

    def __getattr__(self, name):
        if name in type(self)._cuda:
            from bw24.engine.ops.cuda.backend import CudaOps

            return getattr(CudaOps, name).__get__(self)
        raise AttributeError(name)

    def _buf(self, key, n, dtype=np.float32, zeroed=False):
        if key not in self.scratch or self.scratch[key].size < n:
            self.scratch[key] = np.zeros(max(n, 1), dtype).view(self.dev)
        return self.scratch[key][:n]

    def _k(self, file, name):
        return self._k_with(file, name, ())

    def _k_with(self, file, name, extra):  # (a decode launch's QMV8_DECODE_LOADS: not in the recorded name)
        from types import SimpleNamespace

        return SimpleNamespace(file=file, name=name, local_size_bytes=self.spills)

    def _launch(self, fn, grid, block, args, shared_mem=0):
        self._q8_ready = None
        base = fn.name.split("<")[0]
        names = [p.split()[-1].lstrip("*") for p in self.params(fn.file, base)]
        assert len(names) == len(args), fn
        self.launches.append((fn.name, dict(zip(names, args, strict=True)), grid, block))

    def rmsnorm(self, x, w, eps, *, out):
        self.launches.append(("rmsnorm", {}, None, None))

    def names(self) -> list[str]:
        return [n.split("<")[0] for n, *_ in self.launches]


def _pack_xs(d, sums):
    """q8.unpack_xs inverted: int32 [T, G, 2] (d's bits, s0 | s1 << 16)."""
    lo = (sums[..., 0].astype(np.int64) & 0xFFFF) | (sums[..., 1].astype(np.int64) << 16)
    return np.stack([d.astype(np.float32).view(np.int32), lo.astype(np.uint32).view(np.int32)], axis=-1)


def _rope_rows(x, p: int, tab, rope_dim: int, neox: bool, nw, eps: float):
    """rope.cu's row formula on the host (float32): rows x [n, D] of position p, the qk-norm by nw first when given,
    then the pairs turned by the table's (cos, sin) of p; dims past rope_dim pass."""
    x = np.array(x, np.float32)
    half, D = rope_dim // 2, x.shape[-1]
    if nw is not None:
        r = (1.0 / np.sqrt((x.astype(np.float64) ** 2).mean(-1, keepdims=True) + eps)).astype(np.float32)
        x = (x * r * np.asarray(nw, np.float32)).astype(np.float32)
    cs = np.asarray(tab, np.float32).reshape(-1, half, 2)[p]
    i0 = np.arange(half) if neox else 2 * np.arange(half)
    i1 = i0 + half if neox else i0 + 1
    a, b = x[:, i0].copy(), x[:, i1].copy()
    x[:, i0], x[:, i1] = a * cs[:, 0] - b * cs[:, 1], b * cs[:, 0] + a * cs[:, 1]
    assert rope_dim <= D
    return x


class HostQ8Ops(Q8DispatchOps):
    """A Q8DispatchOps whose launches compute, by their formulas on the host: quantize_x, qmv8_na, qmv8_3 / qmv8_3n,
    glu_q8, qmv8_glu, rope_table, rope_kv and qmv8_qkvr (the matvecs on the dequantized int8 rows in float64, as
    matmul_q8_ref; rope by _rope_rows from the table, as rope.cu); rmsnorm and attention by the reference (rmsnorm
    leaving its int8 rows where q8.feeds_q8, as rmsnorm_reg does). kernel-check's cases of the fused q8 paths run on it
    as they do on the GPU (tests/test_kernel_case_*.py). planted: a canary's variant (planted_glug: the GLU's activation
    left out; planted_qkvr: the new cache rows one position late); spills(name): the local memory bytes a build
    reports."""

    _cuda = Q8DispatchOps._cuda + ("rope_attention", "rope_kv")

    def __init__(self, planted: str = "", spills=lambda name: 0):
        from bw24.engine.ops.ref import RefOps

        super().__init__()
        self.ref, self.planted, self.spill_of = RefOps(), planted, spills
        self.norm_ahead, self.forced, self.mats = False, {}, {}
        self._rope_tabs, self._capturing = {}, False
        self.qmv_configs.plan = lambda qt, n, k, gate_force=True: self.forced.get(qt.name, ("q8", 4, 8))

    def set_launch_config(self, kind, name, cfg):
        self.forced.pop(name, None)
        if cfg:
            self.forced[name] = (cfg["path"], cfg["warps"], cfg["rows"])

    def load_weight(self, t):
        from types import SimpleNamespace

        from bw24.engine.ops.cuda.repack import FMT

        dense = np.asarray(self.ref.load_weight(t).data, np.float64)
        key = len(self.mats) + 1
        self.mats[key] = dense
        return SimpleNamespace(n=dense.shape[0], k=dense.shape[1], qtype=t.qtype, fmt=FMT[t.qtype],
                               args=lambda: (key, 0, 0, 0))

    def zeros(self, shape, dtype=np.float32):
        return np.zeros(shape, dtype).view(self.dev)

    def _put(self, a):
        return np.array(a).view(self.dev)

    def to_host(self, a):
        return np.array(a)

    def _k_with(self, file, name, extra):
        fn = super()._k_with(file, name, extra)
        fn.local_size_bytes = self.spill_of(name)
        return fn

    def rmsnorm(self, x, w, eps, *, out):
        from bw24.engine.ops.cuda import q8

        self._q8_ready = None
        self.ref.rmsnorm(np.asarray(x), np.asarray(w), eps, out=out)
        self.launches.append(("rmsnorm", {}, None, None))
        if q8.feeds_q8(self, out):
            xq, xs = q8.buffers(self, *out.shape)
            self._codes(out, xq, xs)
            q8.mark_ready(self, out)

    def attention(self, q, k_cache, v_cache, pos, *, out, **kw):
        self._q8_ready = None
        self.launches.append(("attention", {}, None, None))
        kc, vc = (np.asarray(c, np.float32) for c in (k_cache, v_cache))
        self.ref.attention(np.asarray(q), kc, vc, np.asarray(pos), out=out, **kw)

    def _codes(self, v, xq, xs):
        from bw24.engine.ops.cuda import q8

        q, d, s = q8.quantize_x_ref(np.asarray(v).reshape(xq.size // v.shape[-1], v.shape[-1]))
        xq[:], xs[:] = q.ravel(), _pack_xs(d, s).ravel()

    def _x(self, xq, xs, T, K, nss=None, eps=0.0):
        from bw24.engine.ops.cuda import q8

        d, _ = q8.unpack_xs(np.asarray(xs).reshape(T, K // 32, 2))
        x = (np.asarray(xq).reshape(T, K // 32, 32).astype(np.float64) * d[..., None]).reshape(T, K)
        return x if nss is None else x * q8.na_scale_ref(np.asarray(nss).reshape(T, K // 32), K, eps)[:, None]

    def _glu(self, a, b):
        out = np.empty_like(a)
        if self.planted == "planted_glug":
            out[...] = a * b
        else:
            self.ref.glu(a, b, "silu", out=out)
        return out

    def _mv(self, x, key, bias=None):
        y = x @ self.mats[key].T
        return (y if bias is None or not np.ndim(bias) else y + np.asarray(bias)).astype(np.float32)

    def _rope(self, a, q, k, v, T, H, Hkv, D, late=False):
        """rope_kv's work for T rows from pos: q [T, H*D] in place, k's and v's rows into the caches."""
        p0, S = int(np.asarray(a["pos"])[0]), a["k_cache"].shape[1]
        qn, kn = (None if isinstance(a[n], np.uintp) else a[n] for n in ("q_norm", "k_norm"))
        for t in range(T):
            p = p0 + t
            if p >= S:
                break
            pw = min(p + 1, S - 1) if late else p
            rope = dict(p=p, tab=a["tab"], rope_dim=a["rope_dim"], neox=bool(a["neox"]), eps=a["eps"])
            q[t] = _rope_rows(q[t].reshape(H, D), nw=qn, **rope).ravel()
            a["k_cache"][:, pw] = _rope_rows(k[t].reshape(Hkv, D), nw=kn, **rope)
            a["v_cache"][:, pw] = v[t].reshape(Hkv, D)

    def _launch(self, fn, grid, block, args, shared_mem=0):
        from bw24.engine.ops.cuda import q8

        super()._launch(fn, grid, block, args, shared_mem)
        base, a = fn.name.split("<")[0], self.launches[-1][1]
        if base == "quantize_x":
            self._codes(np.asarray(a["x"]).reshape(a["T"], a["K"]), a["xq"], a["xs"])
        elif base == "qmv8_na":
            h = (self._mv(self._x(a["xq"], a["xs"], a["T"], a["K"]), a["pa"]) + a["residual"]).astype(np.float32)
            a["out"][...] = h
            yq, yd, ysum, yss = q8.na_ref(h, a["nw"])
            a["yq"][:], a["ys"][:], a["yss"][:] = yq.ravel(), _pack_xs(yd, ysum).ravel(), yss.ravel()
        elif base in ("qmv8_3", "qmv8_3n"):
            x = self._x(a["xq"], a["xs"], a["T"], a["K"], a.get("nss"), a.get("eps", 0.0))
            for i in range(3):
                if a[f"N{i}"]:
                    a[f"out{i}"][...] = self._mv(x, a[f"a{i}"], a[f"bias{i}"])
        elif base == "glu_q8":
            v = self._glu(np.asarray(a["gate"]), np.asarray(a["up"]))
            a["out"][...] = v
            self._codes(v, a["xq"], a["xs"])
        elif base == "qmv8_glu":
            x = self._x(a["xq"], a["xs"], a["T"], a["K"], a["nss"] if fn.name.endswith("true>") else None, a["eps"])
            g, u = self._mv(x, a["ga"]), self._mv(x, a["ua"])
            a["u"][...] = u
            a["g"][...] = self._glu(g, u)
            self._codes(a["g"], a["yq"], a["ys"])
        elif base == "rope_table":
            half, n = a["rope_dim"] // 2, a["n_pos"]
            ang = np.arange(n, dtype=np.float64)[:, None] * a["freq_scale"] * a["base"] ** (
                -2.0 * np.arange(half) / a["rope_dim"])
            a["tab"][: n * half * 2] = np.stack([np.cos(ang), np.sin(ang)], -1).astype(np.float32).ravel()
        elif base == "rope_kv":
            T, H, Hkv, D = a["q"].shape[0], a["H"], a["Hkv"], a["D"]
            q = np.asarray(a["q"]).reshape(T, H * D)
            self._rope(a, q, np.asarray(a["k"]).reshape(T, -1), np.asarray(a["v"]).reshape(T, -1), T, H, Hkv, D)
            a["q"][...] = q.reshape(a["q"].shape)
        elif base == "qmv8_qkvr":
            T, H, Hkv, D = a["T"], a["H"], a["Hkv"], a["k_cache"].shape[2]
            na = fn.name.split(",")[8] == "true"
            x = self._x(a["xq"], a["xs"], T, a["K"], a["nss"] if na else None, a["na_eps"])
            for w, b, o in (("qa", "bq", "q"), ("ka", "bk", "k"), ("va", "bv", "v")):
                a[o][...] = self._mv(x, a[w], a[b])
            q = np.asarray(a["q"]).copy()
            self._rope(a, q, a["k"], a["v"], T, H, Hkv, D, late=self.planted == "planted_qkvr")
            a["q"][...] = q
        else:
            raise AssertionError(f"no host formula for {fn.name}")


def env_switch_refuses(monkeypatch, attr, var, bads=("2", "on", "", "true")):
    """An on / off variable (CudaOps.<attr>, read from var): each bad value refused by a ValueError naming var and
    the value; the class attribute restored afterwards."""
    from bw24.engine.ops.cuda.backend import CudaOps

    for bad in bads:
        monkeypatch.setattr(CudaOps, attr, bad)
        with pytest.raises(ValueError, match=f"{var}='{bad}'"):
            CudaOps()
    monkeypatch.undo()


def opt_in_switch(monkeypatch, flag, env_attr, var, label, planted, macro, file, other_file):
    """An opt-in on / off variable var (CudaOps.<env_attr> read, CudaOps.<flag> set): off by default, bad values
    refused by name, perf rows saying label when on and not when off; its planted canary's macro reaching its
    kernel file alone."""
    from bw24.engine.ops.cuda.backend import CudaOps

    assert getattr(CudaOps, flag) is False and getattr(CudaOps, env_attr) == "0"
    env_switch_refuses(monkeypatch, env_attr, var)
    ops = CudaOps.__new__(CudaOps)
    assert label not in CudaOps.opt_in(ops)
    setattr(ops, flag, True)
    assert label in CudaOps.opt_in(ops)
    ops.pdl, ops.variant = True, planted
    assert (macro, 1) in ops.kernel_defines(file) and (macro, 1) not in ops.kernel_defines(other_file)


def env_refused_or_recorded(monkeypatch, attr, var, bads, good, default, label):
    """CudaOps.<attr> (the variable var): each bad value refused by a ValueError naming var and the value; good
    recorded in perf rows as label_<good>, the default not at all."""
    from bw24.engine.ops.cuda.backend import CudaOps

    for bad in bads:
        monkeypatch.setattr(CudaOps, attr, bad)
        with pytest.raises(ValueError, match=f"{var}='{bad}'"):
            CudaOps()
    ops = CudaOps.__new__(CudaOps)
    setattr(ops, attr, good)
    assert f"{label}_{good}" in CudaOps.opt_in(ops)
    setattr(ops, attr, default)
    assert not any(o.startswith(label) for o in CudaOps.opt_in(ops))


def host_q8(planted: str = "", spills=lambda name: 0) -> HostQ8Ops:
    return HostQ8Ops(planted, spills)


@pytest.fixture(scope="session")
def helpers():
    return sys.modules[__name__]


def bench_module(name: str):
    """benchmarks/<name>.py imported as a module (the GPU scripts' host-side logic, tested without a GPU)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def smollm2_path():
    from bw24.gguf import resolve_model

    return Path(resolve_model(SMOLLM2))


@pytest.fixture(scope="session")
def smollm2_model(smollm2_path):
    return build_model(smollm2_path)


@pytest.fixture(scope="session")
def smollm2_oracle(smollm2_path):
    return Oracle(smollm2_path)
