"""benchmarks/gpu_attn_sweep.py's settings (the sweep itself needs a GPU: the attnsweep stage runs it): each label
once; a shape's first row is the default its perf cells run (the reference its other rows' bits are compared
with); every row sets the same attributes, so none leaks into the next."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def sweep(helpers):
    return helpers.bench_module("gpu_attn_sweep")


@pytest.mark.parametrize("shape", ["32b", "30b-a3b", "8b", "0.6b"])
def test_each_shape_starts_from_its_default_and_names_each_setting_once(sweep, shape):
    from bw24.engine.ops.cuda.attn import DEC_MMA_SPLITS, dec_mma_default

    H, Hkv = sweep.SHAPES[shape]
    rows = sweep.settings(H // Hkv)
    labels = [label for label, _ in rows]
    assert len(labels) == len(set(labels))
    first = rows[0][1]
    assert first["attn_dec_mma"] == dec_mma_default(H, Hkv) == 1024 and first["attn_override"] is None
    assert first["attn_dec_pipe"] is True
    assert all(set(a) == set(first) for _, a in rows)
    # every split count on the tensor-core pass 1 with the pipe and without (the default's own count: without)
    for ns in (66, DEC_MMA_SPLITS, 16):
        got = {a["attn_dec_pipe"] for _, a in rows if a["attn_override"] == {"max_splits": ns}}
        assert got == ({False} if ns == DEC_MMA_SPLITS else {True, False}), ns
    assert any(a["attn_dec_mma"] == 0 and a["attn_fuse"] for _, a in rows)  # attn_split's own fused pass 2
    # the builds before the merge factors and the bounds' rule (bits = 0 expected), on the default's other settings
    assert any(a == {**first, "attn_merge_factors": False} for _, a in rows)
    assert any(a == {**first, "attn_dec_bounds": 4} for _, a in rows)
    assert first["attn_dec_unroll"] is True
    assert any(a == {**first, "attn_dec_unroll": False} for _, a in rows) == (first["attn_dec_mma"] > 0)


def test_the_sweep_runs_every_setting_in_its_class_and_restores_the_backend(sweep, monkeypatch, capsys):
    """main() on a stand-in backend (no GPU): every shape x depth x T x setting is timed once, inside the depth
    class a step at that depth takes, with that setting's attributes set and the backend's own restored after;
    an output equal to the first setting's prints `bits = 0`, another `maxrel`. The stand-in's launches run only
    when its stream is read through to_host (a non-blocking stream): at 1aeef0e the sweep read with cp.asnumpy,
    which does not wait, and its reference rows came back as zeros on the H200. Its `no comb` column replays
    the same calls with attn_combine's launches dropped (the stand-in's time is its launches a layer: 2 with pass 2
    as its own launch, 1 without it), and leaves the backend's launch methods as they were."""
    import sys
    import types
    from contextlib import contextmanager

    import numpy as np

    seen: list[tuple] = []
    made: list = []

    class FakeOps:
        attn_dec_mma, attn_dec_pipe, attn_fuse = 0, False, None

        def __init__(self):
            self.cls = None
            self.queued: list = []  # launched, not yet run: a stream only to_host waits for
            self.launched = 0
            made.append(self)

        def _k_with(self, file, name, extra):
            return name

        def _launch(self, fn, grid, block, args, shared_mem=0):
            self.launched += 1
            if fn != "attn_combine":
                self.queued.append(args)

        def to_host(self, a):
            while self.queued:
                self.queued.pop(0)()
            return np.array(a)

        def _put(self, a):
            return np.array(a)

        def zeros(self, shape):
            return np.zeros(shape, np.float32)

        @contextmanager
        def attn_class_of(self, keys):
            self.cls = "deep" if keys > 1024 else "shallow"
            yield
            self.cls = None

        def attention(self, q, kc, vc, pos, *, scale, softcap, window, out, n_keys=None):
            ov = getattr(self, "attn_override", None) or {}
            seen.append((self.cls, self.attn_dec_mma, self.attn_dec_pipe, ov.get("max_splits")))
            # the pipe keeps the bits; the path and the split count change them
            ns = ov.get("max_splits") or (33 if self.attn_dec_mma else 66)  # (attn.attn_geometry's counts)
            value = 1.0 + 1e-3 * (self.attn_dec_mma > 0) + 1e-4 * ns
            self._launch(self._k_with("attention_dec_mma.cu", "pass 1", ()), (1,), 128,
                         lambda: out.__setitem__(..., value))
            self._launch(self._k_with("attention.cu", "attn_combine", ()), (1,), 128, None)  # pass 2

    fake_cuda = types.ModuleType("bw24.engine.ops.cuda")
    fake_cuda.CudaOps = FakeOps
    fake_cp = types.ModuleType("cupy")
    fake_cp.asnumpy = np.array  # (the default stream: reads what the queue has not written yet, as at 1aeef0e)
    fake_cp.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None)
    monkeypatch.setitem(sys.modules, "bw24.engine.ops.cuda", fake_cuda)
    monkeypatch.setitem(sys.modules, "cupy", fake_cp)
    monkeypatch.setattr(sweep, "NL", 2)
    monkeypatch.setattr(sweep, "time_op", lambda cu, fn, reps: (lambda n0: (fn(), cu.launched - n0)[1])(cu.launched))
    assert sweep.main(["--depths", "4096", "--shapes", "32b,8b", "--tokens", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line for line in out[1:] if line.strip()]
    n32, n8 = len(sweep.settings(8)), len(sweep.settings(4))
    assert len(rows) == n32 + n8
    assert all(s[0] == "deep" for s in seen)  # every call inside the deep class at 4,096 keys
    assert FakeOps.attn_dec_mma == 0 and FakeOps.attn_dec_pipe is False  # class attributes untouched
    assert "(reference)" in rows[0] and "bits = 0" in next(r for r in rows[:n32] if "mma 33 splits  " in r)
    assert "maxrel" in next(r for r in rows[:n32] if "mma 16 splits +pipe" in r)
    assert "maxrel" in next(r for r in rows[:n32] if "attn_split" in r)
    # us/layer and `no comb`: two launches a layer, one without attn_combine's
    def times(row):  # the two columns after the setting's (shape 9, keys 6, T 2, setting 30 wide)
        return row[52:].split()[:2]

    assert times(rows[0]) == ["2.00", "1.00"]
    assert "_k_with" not in vars(made[0]) and "_launch" not in vars(made[0])
