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
             "norm_matmul_multi", "ffn_glu", "glu")

    def __init__(self, W=4, R=4, spills=0):
        from types import SimpleNamespace

        self.dev, self.params, self.spills = HostDev, kernel_params, spills
        self.norm_ahead, self.emulating, self.norm_fuse, self.verify_rows, self._q8_ready = True, False, False, None, None
        self.glu_groups = False
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
