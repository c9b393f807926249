"""Every architecture's forward on tiny float32 random models: batched prefill (in chunks) equals
token-by-token decode; context and token-id limits raise typed errors."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.engine.errors import ContextLimitError, EmptyPromptError, TokenIdError, UnsupportedModelError
from bw24.engine.models import MODELS, model_class

ARCHS = {
    "llama": {},
    "qwen2": {},
    "qwen3": {},
    "qwen3moe": dict(X=8, k=2, Fx=32),
    "gemma3": dict(n_layer=6, swa=4),  # 5 sliding-window layers (window 4 < prompt), 1 global
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, helpers):
    d = tmp_path_factory.mktemp("tiny")
    return {a: helpers.write_tiny_gguf(d / f"{a}.gguf", a, **kw) for a, kw in ARCHS.items()}


def test_every_supported_arch_has_a_forward():
    from bw24.gguf import SUPPORTED_ARCHS

    assert set(SUPPORTED_ARCHS) == set(MODELS)
    with pytest.raises(UnsupportedModelError, match="mamba"):
        model_class("mamba")


@pytest.mark.parametrize("arch", list(ARCHS))
def test_prefill_chunks_equal_decode(arch, tiny, helpers):
    m = helpers.build_model(tiny[arch], n_ctx=64, max_batch=7)  # 20 tokens -> chunks of 7, 7, 6
    ids = np.random.default_rng(1).integers(0, m.cfg.n_vocab, 20)
    batched = m.feed(ids, all_logits=True)
    assert batched.shape == (20, m.cfg.n_vocab) and m.kv.n_past == 20
    m.kv.reset()
    stepped = np.concatenate([m.feed([i]) for i in ids])
    np.testing.assert_allclose(batched, stepped, rtol=0, atol=1e-4)
    assert np.array_equal(batched.argmax(-1), stepped.argmax(-1))
    assert np.abs(batched[0] - batched[-1]).max() > 1e-2  # the positions really differ


def test_logit_rows_chunk_all_logits_and_keep_long_prefill_chunks(tiny, helpers):
    """A backend's logit_rows (cuda: 128) bounds the logits buffer, not the prefill chunk: last-token
    feeds run max_batch tokens a forward, all-logits feeds logit_rows; both give the logits of a buffer
    holding every row (the reference's)."""
    from bw24.engine.ops.ref import RefOps

    class FewLogitRows(RefOps):
        logit_rows = 3

    ids = np.random.default_rng(4).integers(0, 300, 20)
    full = helpers.build_model(tiny["qwen3"], n_ctx=64, max_batch=7)
    few = helpers.build_model(tiny["qwen3"], n_ctx=64, max_batch=7, ops=FewLogitRows())
    assert few.buf.logits.shape[0] == 3 and full.buf.logits.shape[0] == 7
    forwards = []
    real = few.forward
    few.forward = lambda T, last_only=True: forwards.append((T, last_only)) or real(T, last_only)
    np.testing.assert_allclose(few.feed(ids, all_logits=True), full.feed(ids, all_logits=True), rtol=0, atol=1e-4)
    assert forwards == [(3, False)] * 6 + [(2, False)]
    few.kv.reset()
    full.kv.reset()
    forwards.clear()
    np.testing.assert_allclose(few.feed(ids), full.feed(ids), rtol=0, atol=1e-4)
    assert forwards == [(7, True), (7, True), (6, True)]  # the chunk stays max_batch
    few.kv.reset()
    few.kv.reserve(5)
    with pytest.raises(AssertionError, match="logits of 5 rows"):
        real(5, last_only=False)


def test_prefill_graphs_per_chunk_size_and_capture_again_when_scratch_or_cache_moves(tiny, helpers):
    """A backend with prefill graphs (CudaOps): each chunk size above graph_rows has its ops.capture run
    (eager, then captured, then replayed: the full chunks and the last, shorter one apart), all-logits feeds
    run eagerly; a moved scratch generation or a swapped KV cache makes a new capture; only
    PREFILL_GRAPH_SIZES sizes are kept. The logits are the plain feed's.
    (The CPU stands in for a replay by running the same forward; the GPU test compares real replays.)"""
    from bw24.engine.ops.ref import RefOps

    log: list[str] = []
    flags: set[bool] = set()

    class GraphOps(RefOps):
        prefill_graphs, graph_rows, _scratch_gen = True, 2, 0

        def capture(self, step, keys=None):  # CudaOps.capture's order: eager, capture at the second call, replays
            state = {"n": 0, "g": None}

            def run():
                state["n"] += 1
                if state["n"] == 2:
                    state["g"] = "graph"
                    log.append("capture")
                log.append("eager" if state["g"] is None else "replay")
                step()

            run.graph_state = state
            return run

        def attention(self, *a, **kw):  # every chunk of a PrefillGraph runs with in_prefill_graph set
            flags.add(getattr(self, "in_prefill_graph", False))
            return RefOps.attention(self, *a, **kw)

    ids = np.random.default_rng(5).integers(0, 300, 20)
    plain = helpers.build_model(tiny["qwen3"], n_ctx=64, max_batch=7)
    g = helpers.build_model(tiny["qwen3"], n_ctx=64, max_batch=7, ops=GraphOps())
    want = plain.feed(ids)
    assert np.array_equal(g.feed(ids), want) and log == ["eager", "capture", "replay", "eager"]  # chunks 7, 7, 6
    assert flags == {True} and not g.ops.in_prefill_graph  # set around each chunk, cleared after
    log.clear()
    g.kv.reset()
    assert np.array_equal(g.feed(ids), want) and log == ["replay", "replay", "capture", "replay"]
    g.kv.reset()
    g.ops._scratch_gen = 1  # a larger step grew a buffer the graphs baked in
    log.clear()
    assert np.array_equal(g.feed(ids), want) and log == ["eager", "capture", "replay", "eager"]
    g.kv = g.kv.like(64, g.kv.dtype)  # another cache swapped in (Engine._exact_cache)
    log.clear()
    assert np.array_equal(g.feed(ids), want) and log == ["eager", "capture", "replay", "eager"]
    g.kv.reset()
    plain.kv.reset()
    log.clear()
    assert np.array_equal(g.feed(ids, all_logits=True), plain.feed(ids, all_logits=True)) and log == []
    from bw24.engine.models.common import PREFILL_GRAPH_SIZES

    sizes = list(range(3, 4 + PREFILL_GRAPH_SIZES))  # one-chunk prompts of new sizes push the oldest out
    for n in sizes:
        g.kv.reset()
        g.feed(ids[:n])
    assert list(g._prefill_graphs) == sizes[-PREFILL_GRAPH_SIZES:]
    g.kv.reset()
    plain.kv.reset()
    flags.clear()
    assert np.array_equal(g.feed(ids[:2]), plain.feed(ids[:2])) and g._prefill_graphs.get(2) is None
    assert flags == {False}  # a chunk of graph_rows or fewer: no PrefillGraph
    # a model whose forward reads the device on the host (qwen3moe: prefill_capturable False) takes none ...
    moe = helpers.build_model(tiny["qwen3moe"], n_ctx=64, max_batch=7, ops=GraphOps())
    assert not moe.prefill_capturable and moe._prefill_graph(7) is None
    # ... unless its experts take the grouped GEMMs on the device's routing (BW24_MOE_GROUPED, fp16 products)
    grouped_ops = GraphOps()
    grouped_ops.moe_grouped, grouped_ops.prefill_precision = True, "fp16"
    assert helpers.build_model(tiny["qwen3moe"], n_ctx=64, max_batch=7, ops=grouped_ops).prefill_capturable
    grouped_ops.prefill_precision = "split"  # the gate's exact half: expert_ffn, on the host
    assert not helpers.build_model(tiny["qwen3moe"], n_ctx=64, max_batch=7, ops=grouped_ops).prefill_capturable
    log.clear()
    flags.clear()
    moe.feed(ids)
    assert log == [] and flags == {False} and "_prefill_graphs" not in moe.__dict__


def test_all_logits_and_hidden_feeds_leave_the_graphs_cache(tiny, helpers):
    """A chunk fed eagerly for its hidden rows (MTP drafting's prompt) or all its logits, on a model whose chunks
    of that size take prefill graphs, runs the graphs' kernel choice too (Transformer._eager_chunk), so its cache
    is plain decode's bit for bit. Here the eager rules' attention is a different kernel (x 1.001, as the
    flash kernel's bits differ from mma's): at 6e0baa5 the H200's MTP spec run diverged from plain decode at
    its 88th token that way. Canary: eager chunks without the graphs' kernel choice leave another cache."""
    from bw24.engine.ops.ref import RefOps

    class TwoKernels(RefOps):
        prefill_graphs, graph_rows, _scratch_gen, in_prefill_graph = True, 2, 0, False

        def capture(self, step, keys=None):
            def run():
                step()

            run.graph_state = {"g": None}
            return run

        def attention(self, *a, **kw):
            RefOps.attention(self, *a, **kw)
            if not self.in_prefill_graph and kw["out"].shape[0] > self.graph_rows:  # the eager rules' kernel
                kw["out"] *= np.float32(1.001)

    ids = np.random.default_rng(6).integers(0, 300, 20)

    def caches(canary: bool = False) -> tuple[list, list, list]:
        m = helpers.build_model(tiny["qwen3"], n_ctx=64, max_batch=7, ops=TwoKernels())
        if canary:  # eager chunks on the eager rules, as before the fix
            m._eager_chunk = m.forward
        m.feed(ids)  # graphs: plain decode's prefill
        want = [np.array(m.kv.k[i]) for i in range(m.cfg.n_layer)]
        hid: list = []
        m.kv.reset()
        m.feed(ids, hidden=hid)
        got = [np.array(m.kv.k[i]) for i in range(m.cfg.n_layer)]
        m.kv.reset()
        m.feed(ids, all_logits=True)
        got_all = [np.array(m.kv.k[i]) for i in range(m.cfg.n_layer)]
        assert len(hid) == 3 and not m.ops.in_prefill_graph
        return want, got, got_all

    want, got, got_all = caches()
    assert all(np.array_equal(a, b) and np.array_equal(a, c) for a, b, c in zip(want, got, got_all, strict=True))
    want, got, got_all = caches(canary=True)
    assert not np.array_equal(want[-1], got[-1]) and not np.array_equal(want[-1], got_all[-1])


def test_sliding_window_changes_gemma3_logits(tiny, helpers):
    """Canary for the window plumbing: gemma3 with the window disabled must give other logits."""
    ids = np.random.default_rng(2).integers(0, 300, 12)
    a = helpers.build_model(tiny["gemma3"], n_ctx=32).feed(ids, all_logits=True)
    b = helpers.build_model(tiny["gemma3"], n_ctx=32, sliding_window=None).feed(ids, all_logits=True)
    np.testing.assert_allclose(a[:4], b[:4], atol=1e-5)  # within the window: identical
    assert np.abs(a[-1] - b[-1]).max() > 1e-3


def test_context_limit_and_bad_ids(tiny, helpers):
    m = helpers.build_model(tiny["qwen3"], n_ctx=8)
    with pytest.raises(ContextLimitError, match="n_ctx=8"):
        m.feed(list(range(9)))
    assert m.kv.n_past == 0  # nothing ran
    m.feed(list(range(8)))
    with pytest.raises(ContextLimitError):
        m.feed([1])
    m.kv.reset()
    with pytest.raises(TokenIdError, match="300"):
        m.feed([1, 300])
    with pytest.raises(TokenIdError):
        m.feed([-1])
    with pytest.raises(EmptyPromptError):
        m.feed([])


def test_engine_kv_dtype_setting(tmp_path):
    """Engine.load(kv_dtype=) sets the cache element on any backend (the GPU tests give the CPU reference
    the GPU's float16 cache): f16 rounds what the cache holds, so the logits move a little but stay
    close; a name outside f32/f16 is a clear error naming the setting."""
    from bw24.engine import Engine
    from bw24.engine.errors import BadInputError
    from bw24.gguf.synth import synth

    path = str(tmp_path / "llama-tiny.gguf")
    synth("llama-tiny", path, mix="q4_k_m", seed=3)
    ids = [int(i) for i in np.random.default_rng(2).integers(10, 500, 12)]
    e32 = Engine.load(path, backend="cpu", n_ctx=32, progress=False)
    e16 = Engine.load(path, backend="cpu", n_ctx=32, progress=False, kv_dtype="f16")
    assert e32.model.kv.k[0].dtype == np.float32 and e16.model.kv.v[-1].dtype == np.float16
    a, b = e32.logits(ids), e16.logits(ids)
    assert 0 < np.abs(a - b).max() < 1e-2 * np.abs(a).max()
    with pytest.raises(BadInputError, match="kv_dtype='f64'"):
        Engine.load(path, backend="cpu", n_ctx=32, progress=False, kv_dtype="f64")


def test_engine_max_batch_never_exceeds_the_context(tmp_path):
    """Engine.load sizes a forward's buffers by max_batch: never more rows than n_ctx holds (a decode cell's
    short context carries no prefill chunk's activations), whether max_batch is the backend's default or
    given; within the context it is kept as given, and the logits do not depend on it."""
    from bw24.engine import Engine
    from bw24.gguf.synth import synth

    path = str(tmp_path / "llama-tiny.gguf")
    synth("llama-tiny", path, mix="q4_k_m", seed=3)
    short = Engine.load(path, backend="cpu", n_ctx=40, progress=False)  # the reference's default: 128
    given = Engine.load(path, backend="cpu", n_ctx=40, max_batch=300, progress=False)
    kept = Engine.load(path, backend="cpu", n_ctx=40, max_batch=16, progress=False)
    assert (short.model.max_batch, given.model.max_batch, kept.model.max_batch) == (40, 40, 16)
    assert short.model.buf.h.shape[0] == 40
    ids = [int(i) for i in np.random.default_rng(4).integers(10, 500, 33)]
    a, b = short.logits(ids)[-1], kept.logits(ids)[-1]  # one chunk of 33 rows / chunks of 16, 16, 1
    assert np.allclose(a, b, rtol=0, atol=1e-4 * np.abs(a).max())
