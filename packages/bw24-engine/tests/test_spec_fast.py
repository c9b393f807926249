"""The greedy fast path (spec/fast.py, spec/device.py) on the CPU: token-identical to plain decode for
K = 1..8 and every device drafter, draft = target accepts everything, a broken verify is caught, and
the verify-graphs-by-T bookkeeping (capture once per T, replay after, rebuild when scratch moves)."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.engine.graph import greedy_decode
from bw24.engine.spec import DraftModelDrafter, MTPDrafter, NgramDrafter, SpecDecoder
from bw24.engine.spec.device import DeviceIO, GraphsByT
from bw24.engine.spec.fast import drafter_on_device

N = 24
FIRST = [300]


@pytest.fixture(scope="module")
def models(tmp_path_factory, helpers):
    return helpers.spec_pair(tmp_path_factory.mktemp("spec_fast"), n_ctx=256)


@pytest.fixture(scope="module")
def reference(models):
    return greedy_decode(models["target"].model, FIRST, N)


def _drafters(models):
    return [NgramDrafter(), DraftModelDrafter(models["draft"].model),
            MTPDrafter(models["target"].model, models["target"].gguf)]


@pytest.mark.parametrize("k", range(1, 9))
def test_spec_fast_greedy_identical_all_drafters(models, reference, k):
    for d in _drafters(models):
        dec = SpecDecoder(models["target"].model, d, k=k, device=True)
        got = list(dec.generate(FIRST, N))
        assert dec._fast is not None, f"{d.name}: the fast path was not taken"
        assert got == reference, f"{d.name} K={k}"
        assert dec.stats.rounds > 0 and dec.stats.drafted >= dec.stats.accepted


@pytest.mark.parametrize("k", (1, 4, 8))
def test_spec_fast_draft_equal_target_accepts_everything(models, reference, k):
    dec = SpecDecoder(models["target"].model, DraftModelDrafter(models["same"].model), k=k, device=True)
    assert list(dec.generate(FIRST, N)) == reference
    assert dec.stats.acceptance == 1.0, dec.stats


def test_spec_fast_matches_host_path_stats(models):
    """Same drafts, same acceptance as the host loop (the fast path changes where, not what)."""
    runs = []
    for dev in (False, True):
        dec = SpecDecoder(models["target"].model, DraftModelDrafter(models["draft"].model), k=3, device=dev)
        toks = list(dec.generate(FIRST, N))
        runs.append((toks, dec.stats.drafted, dec.stats.accepted, dec.stats.rounds))
    assert runs[0] == runs[1]


def test_spec_fast_not_taken_for_sampling_or_penalties(models):
    from bw24.engine import SamplingParams

    dec = SpecDecoder(models["target"].model, NgramDrafter(), k=2, device=True)
    assert dec.use_fast(SamplingParams().resolved())
    assert not dec.use_fast(SamplingParams(temperature=0.8, seed=1).resolved())
    assert not dec.use_fast(SamplingParams(repetition_penalty=1.3).resolved())
    # auto on the CPU: the host path (the fast loop pays only with device graphs)
    assert not SpecDecoder(models["target"].model, NgramDrafter(), k=2).use_fast(SamplingParams().resolved())


def test_spec_fast_broken_verify_diverges(models, reference, monkeypatch):
    """Canary: a verify whose argmax is off by one in one row must change the output."""
    orig = DeviceIO.argmax_rows

    def broken(self, logits, ids, out):
        orig(self, logits, ids, out)
        T = logits.shape[0]
        if T > 1:
            out[T - 1] = (int(out[T - 1]) + 1) % logits.shape[1]

    monkeypatch.setattr(DeviceIO, "argmax_rows", broken)
    dec = SpecDecoder(models["target"].model, DraftModelDrafter(models["same"].model), k=3, device=True)
    assert list(dec.generate(FIRST, N)) != reference


def test_spec_device_argmax_lowest_index_of_ties():
    from bw24.engine.ops.ref import RefOps

    io = DeviceIO(RefOps())
    lg = np.array([[1, 5, 5, 2], [7, 0, 7, 7], [-1, -3, -1, -2]], np.float32)
    out = np.zeros(6, np.int32)
    io.argmax_rows(lg, np.array([9, 8, 7], np.int32), out)
    assert out.tolist() == [1, 0, 0, 9, 8, 7]


class _FakeOps:
    """capture() like CudaOps: first call eager, second captures, later calls replay."""

    def __init__(self):
        self.captures, self.replays, self.eager = 0, 0, 0

    def capture(self, step, keys=None):
        state = {"n": 0}

        def run():
            state["n"] += 1
            if state["n"] == 1:
                self.eager += 1
                step()
            elif state["n"] == 2:
                self.captures += 1
            else:
                self.replays += 1

        return run


def test_spec_graphs_by_t_capture_once_per_t_and_rebuild_on_scratch_move():
    ops, made, sig = _FakeOps(), [], [0]
    g = GraphsByT(ops, lambda T: made.append(T) or (lambda: None), lambda: sig[0])
    for T in (2, 2, 2, 2, 5, 5, 5, 2):
        g(T)
    assert made == [2, 5] and ops.eager == 2 and ops.captures == 2 and ops.replays == 4
    sig[0] = 1  # scratch reallocated by someone else (e.g. a long prefill)
    g(2)
    assert made == [2, 5, 2] and g.rebuilds == 1 and ops.eager == 3
    g(5)
    assert made == [2, 5, 2, 5]


def test_spec_graphs_by_t_eager_growth_keeps_only_that_t():
    ops, sig = _FakeOps(), [0]
    made = []

    def make(T):
        made.append(T)

        def step():
            if T == 9:
                sig[0] = 1  # the first T = 9 call grows the attention scratch
        return step

    g = GraphsByT(ops, make, lambda: sig[0])
    g(2)
    g(2)  # T = 2 captured with the old scratch
    g(9)  # eager; the scratch moved: T = 2's graph is stale now
    g(2)
    assert made == [2, 9, 2], "T = 2 must be rebuilt after T = 9 grew the scratch"
    g(9)
    assert made == [2, 9, 2] and ops.captures == 2


def test_spec_graphs_by_t_runs_rows_past_graph_rows_eagerly():
    """cuda forward past QMV_NT[-1] rows calls cuBLAS, which stream capture refuses (MTP's first feed of
    the pending prompt rows failed so on the H200 at cb58708): such a T runs eagerly, every call."""
    ops, made = _FakeOps(), []
    ops.graph_rows = 4
    g = GraphsByT(ops, lambda T: made.append(T) or (lambda: None))
    for T in (5, 5, 4, 4, 4):
        g(T)
    assert made == [5, 5, 4] and 5 not in g.runs and ops.captures == 1 and ops.replays == 1


def test_spec_drafter_on_device_flags(models):
    assert drafter_on_device(NgramDrafter())
    assert drafter_on_device(DraftModelDrafter(models["draft"].model))
    assert drafter_on_device(MTPDrafter(models["target"].model, models["target"].gguf))


def test_spec_fast_twin_draft_shares_weights_and_accepts_everything(models, reference):
    from bw24.engine.spec.draft_model import twin_model

    m = models["target"].model
    tw = twin_model(m)
    assert tw.w is m.w and tw.ops is m.ops and tw.kv is not m.kv and tw.buf is not m.buf
    dec = SpecDecoder(m, DraftModelDrafter(tw), k=4, device=True)
    assert list(dec.generate(FIRST, N)) == reference and dec.stats.acceptance == 1.0


def test_spec_fast_mtp_steps_are_replayable_per_row_count(models, reference):
    """MTP propose_into runs every drafting step through GraphsByT (captured graphs on the GPU): the
    pending-rows feed keyed by its row count, the chained steps by 0; drafts and stats as the host path."""
    m = models["target"]
    runs = []
    for dev in (False, True):
        d = MTPDrafter(m.model, m.gguf)
        dec = SpecDecoder(m.model, d, k=4, device=dev)
        runs.append((list(dec.generate(FIRST, N)), dec.stats.drafted, dec.stats.accepted, dec.stats.rounds))
    assert runs[0] == runs[1] and runs[1][0] == reference
    keys = set(d._dev[1].runs)
    assert 0 in keys and any(k > 0 for k in keys), keys


@pytest.mark.parametrize("device", [False, True])
def test_spec_drafter_prompt_ingestion_is_prefill_time(models, reference, monkeypatch, device):
    """The drafter's begin (a draft model's own prompt prefill) is timed with the target's prefill, so
    decode_s spans what plain decode's does (it held 44.6 ms of the 8B twin's prefill at cb58708)."""
    import types

    import bw24.engine.spec.runner as runner

    clock = [0.0]

    def tick():
        clock[0] += 1e-3
        return clock[0]

    class SlowBegin(NgramDrafter):
        def begin(self, prompt, hidden=None):
            clock[0] += 100.0  # a begin that takes "100 s"
            super().begin(prompt, hidden)

    monkeypatch.setattr(runner, "time", types.SimpleNamespace(perf_counter=tick))
    dec = SpecDecoder(models["target"].model, SlowBegin(), k=4, device=device)
    assert list(dec.generate(FIRST, N)) == reference
    assert dec.stats.prefill_s >= 100.0 and dec.stats.decode_s < 100.0


def test_row_exact_ops_run_fusable_ops_row_by_row_through_the_base():
    """RowExactOps hands each row of a fusable op (norm_matmul_multi, rope_attention, ffn_glu) to the base's own op
    as a one-row call at position pos + t, the call a decode step makes (a fused kernel there, e.g. qmv3n):
    composing the row-wise rmsnorm and matmul_multi instead would not match decode bit for bit."""
    from bw24.engine.ops.ref import RefOps
    from bw24.engine.spec.exact_ops import RowExactOps

    calls = []

    class Base(RefOps):
        def norm_matmul_multi(self, h, norm, eps, ws, *, x, outs, biases=None):
            calls.append(("norm_matmul_multi", h.shape[0], float(h[0, 0]), outs[0].shape[0]))

        def rope_attention(self, q, k, v, pos, k_cache, v_cache, *, rope, attn):
            calls.append(("rope_attention", q.shape[0], int(pos[0]), attn["out"].shape[0], float(q[0, 0, 0])))

        def ffn_glu(self, h, norm, eps, w_gate, w_up, act, *, x, g, u):
            calls.append(("ffn_glu", h.shape[0], float(h[0, 0]), g.shape[0]))

    ops = RowExactOps(Base())
    h = np.arange(3 * 4, dtype=np.float32).reshape(3, 4)
    ops.norm_matmul_multi(h, np.ones(4, np.float32), 1e-6, [None], x=np.zeros((3, 4), np.float32),
                          outs=[np.zeros((3, 2), np.float32)])
    q = np.arange(3 * 2 * 4, dtype=np.float32).reshape(3, 2, 4)
    ops.rope_attention(q, q, q, np.array([7], np.int32), None, None, rope={}, attn={"out": np.zeros((3, 2, 4))})
    z = np.zeros((3, 4), np.float32)
    ops.ffn_glu(h, np.ones(4, np.float32), 1e-6, None, None, "silu", x=z, g=z.copy(), u=z.copy())
    assert calls == [("norm_matmul_multi", 1, 0.0, 1), ("norm_matmul_multi", 1, 4.0, 1), ("norm_matmul_multi", 1, 8.0, 1),
                     ("rope_attention", 1, 7, 1, 0.0), ("rope_attention", 1, 8, 1, 8.0), ("rope_attention", 1, 9, 1, 16.0),
                     ("ffn_glu", 1, 0.0, 1), ("ffn_glu", 1, 4.0, 1), ("ffn_glu", 1, 8.0, 1)]
