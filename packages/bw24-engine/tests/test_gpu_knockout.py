"""benchmarks/gpu_knockout.py's host side without a GPU: the spec's ROWS field (a verify step instead of a decode
step), the verify step it replays (FastVerifier's: every row's logits and their argmax), and the family patch that
leaves launches out."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest


@pytest.fixture(scope="module")
def ko(helpers):
    return helpers.bench_module("gpu_knockout")


def test_the_rows_field_is_split_off_and_checked(ko):
    assert ko.split_rows("qwen3-8b:q4_k_m:0") == ("qwen3-8b:q4_k_m:0", 1)
    assert ko.split_rows("qwen3-8b") == ("qwen3-8b", 1)
    assert ko.split_rows("qwen3-8b:q4_k_m:0:4") == ("qwen3-8b:q4_k_m:0", 4)
    for bad in ("qwen3-8b:q4_k_m:0:0", "qwen3-8b:q4_k_m:0:17", "qwen3-8b:q4_k_m:0:x", "a:b:0:4:1"):
        with pytest.raises(SystemExit, match="ROWS"):
            ko.split_rows(bad)


def test_the_verify_step_is_the_fast_verifiers(tmp_path, helpers, ko):
    """On the CPU engine: the step runs a forward of ROWS ids with every row's logits and writes their argmax, the
    same targets FastVerifier.run gives for the same ids at the same position, and advances the cache by ROWS."""
    from bw24.engine.spec.device import FastVerifier

    path = helpers.write_tiny_gguf(tmp_path / "t.gguf", "qwen3", n_layer=2)
    m = helpers.build_model(path)
    m.feed([1, 5, 9])
    rng = np.random.default_rng(3)
    step = ko.verify_step(m, m.ops, 4, rng)
    ids = np.array(m.buf.view(4).ids).tolist()
    assert len(set(ids)) > 1 and all(10 <= i < m.cfg.n_vocab - 10 for i in ids)
    pos = m.kv.n_past
    m.kv.reserve(4)
    step()
    assert m.kv.n_past == pos + 4
    got = np.asarray(m.buf.logits[:4]).argmax(axis=1).tolist()
    twin = helpers.build_model(path)
    twin.feed([1, 5, 9])
    twin.buf.view(4).ids[:] = ids
    targets, verified = FastVerifier(twin).run(4)
    assert verified == ids and targets == got


def test_launches_of_a_family_are_left_out_and_counted(ko):
    """knock_out: a launch whose kernel (named where it was asked for) matches a pattern is skipped and counted, the
    q8 mark cleared as a launch would; others launch; unknock restores the class's methods."""
    ran = []

    class Ops:
        _q8_ready = ("x",)

        def _k_with(self, file, name, extra):
            return SimpleNamespace(name=name)

        def _launch(self, fn, grid, block, args, shared_mem=0):
            ran.append(fn.name)

    ops = Ops()
    skipped = ko.knock_out(ops, ("rope_kv", "glu_q8"))
    for n in ("qmv8<7,1,4,1>", "rope_kv<__half>", "glu_q8", "attn_split<128,128,1,32>"):
        ops._launch(ops._k_with("f.cu", n, ()), (1,), 32, ())
    assert ran == ["qmv8<7,1,4,1>", "attn_split<128,128,1,32>"]
    assert skipped == {"rope_kv<__half>": 1, "glu_q8": 1} and ops._q8_ready is None
    ko.unknock(ops)
    assert "_launch" not in vars(ops) and "_k_with" not in vars(ops)
