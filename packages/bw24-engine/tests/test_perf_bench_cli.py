"""`bw24 bench --backend cpu` end to end on tiny synthetic cells, and bytes/token from preset shapes."""

from __future__ import annotations

import json

import pytest
from bw24.engine.cli import main
from bw24.engine.perf.jsonl import device_name, read_rows

CELLS = "".join(f'[[cell]]\nmodel = "qwen3-tiny"\nquant = "q8_0"\nmode = "{m}"\ndepth = {d}\ntokens = {n}\n'
                for m, d, n in (("decode", 8, 4), ("prefill", 0, 16)))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("bench-cache")


def bench(tmp_path, cache, *extra):
    (tmp_path / "cells.toml").write_text(CELLS)
    return main(["bench", "--backend", "cpu", "--cells-file", str(tmp_path / "cells.toml"), "--cache-dir",
                 str(cache), "--perf-file", str(tmp_path / "perf.jsonl"), *extra])


def test_cpu_run_appends_rows_and_table(tmp_path, cache, capsys):
    assert bench(tmp_path, cache) == 0
    rows = read_rows(tmp_path / "perf.jsonl")
    assert [r["cell"] for r in rows] == ["qwen3-tiny-q8_0-tg4@d8", "qwen3-tiny-q8_0-pp16@d0"]
    dec, pre = rows
    assert dec["decode_tok_s"] > 0 and dec["prefill_tok_s"] is None and len(dec["samples"]) == 5
    assert pre["prefill_tok_s"] > 0 and pre["decode_tok_s"] is None
    assert dec["roofline_pct"] is None and "no ceiling for this device" in dec["roofline_note"]
    assert dec["kernels_per_token"] is None and dec["vram_peak_bytes"] is None  # not countable on the CPU
    assert dec["device"] == device_name("cpu") and dec["git"] and "time" in dec
    assert dec["decode_lag"] == 1 and "decode_lag" not in pre  # the generation loop's way (BW24_DECODE_LAG)
    out = capsys.readouterr().out
    assert "perf-ci: NEW" in out
    # each row followed by where its wall time went: model (cache / synthesis), load, warmup, bw24's reps
    walls = [line for line in out.splitlines() if line.startswith("  wall s: ")]
    assert len(walls) == 2 and all(w.split()[2::2] == ["model", "load", "warmup", "bw24"] for w in walls)
    assert all(float(v) >= 0 for w in walls for v in w.split()[3::2])
    assert main(["bench", "--table", "--perf-file", str(tmp_path / "perf.jsonl")]) == 0
    assert "| qwen3-tiny-q8_0-tg4@d8 |" in capsys.readouterr().out


def test_decode_lag_0_is_a_variant_of_its_own(tmp_path, cache, monkeypatch):
    """BW24_DECODE_LAG=0 (the host waits for each token, as llama-bench): the row says so and, as an opt-in
    variant, never enters the default rows' baseline."""
    monkeypatch.setenv("BW24_DECODE_LAG", "0")
    assert bench(tmp_path, cache) == 0
    dec = read_rows(tmp_path / "perf.jsonl")[0]
    assert dec["decode_lag"] == 0 and dec["opt_in"] == ["decode_lag_0"]


def test_a_run_cut_short_keeps_the_rows_of_the_cells_it_measured(tmp_path, cache, monkeypatch, capsys):
    """Each cell's row is appended when it is measured: a run that dies in its second cell (a lost GPU host at
    355ecbd took a measured 30B-A3B row with it) leaves the first cell's row in the file."""
    from bw24.engine.perf import runner

    calls = []
    orig = runner.CellBench.warmup

    def warmup(self):
        calls.append(self)
        if len(calls) == 2:
            raise KeyboardInterrupt("the host went away")
        return orig(self)

    monkeypatch.setattr(runner.CellBench, "warmup", warmup)
    with pytest.raises(KeyboardInterrupt):
        bench(tmp_path, cache)
    assert [r["cell"] for r in read_rows(tmp_path / "perf.jsonl")] == ["qwen3-tiny-q8_0-tg4@d8"]
    capsys.readouterr()


def test_cpu_run_against_a_faster_baseline_fails(tmp_path, cache, capsys):
    seeded = [{"device": device_name("cpu"), "cell": "qwen3-tiny-q8_0-tg4@d8", "mode": "decode",
               "decode_tok_s": 1e9}] * 5
    (tmp_path / "perf.jsonl").write_text("".join(json.dumps(r) + "\n" for r in seeded))
    assert bench(tmp_path, cache, "--no-record", "--cells", "tg4") == 1
    out = capsys.readouterr().out
    assert "perf-ci FAIL" in out and "perf-ci: FAIL" in out
    assert len(read_rows(tmp_path / "perf.jsonl")) == 5  # --no-record appended nothing


def test_bad_input_exit_2(tmp_path, cache, capsys):
    assert bench(tmp_path, cache, "--reps", "3") == 2
    assert bench(tmp_path, cache, "--cells", "nothing-like-this") == 2
    assert main(["bench", "--table", "--write", str(tmp_path / "absent.md")]) == 2
    assert "error" in capsys.readouterr().err


@pytest.mark.parametrize("preset, expect_weights", [
    # f32: 4 bytes/param, from the preset's shapes by hand (E=256 H=4 Hkv=2 D=64 F=512 V=512, 2 layers):
    # per layer attn 256*64*12 + ffn 3*256*512 + norms 2*256+2*64; + output 512*256 + output_norm 256
    # + one token_embd row 256
    ("qwen3-tiny", 4 * (2 * (196608 + 393216 + 640) + 131072 + 256 + 256)),
    # MoE (8 experts of F=256, 2 used): experts 3*256*256*8 counted at 2/8, router 256*8
    ("qwen3moe-tiny", 4 * (2 * (196608 + 3 * 256 * 256 * 8 // 4 + 2048 + 640) + 131072 + 256 + 256)),
])
def test_bytes_per_token_from_shapes(cache, preset, expect_weights):
    from bw24.engine.perf.traffic import decode_traffic
    from bw24.gguf import GGUFFile, ModelConfig
    from bw24.gguf.synth import synth

    path = cache / f"{preset}-f32.gguf"
    if not path.exists():
        synth(preset, path, mix="f32", seed=1)
    f = GGUFFile(path)
    tr = decode_traffic(f, ModelConfig.from_gguf(f), depth=100, tokens=9)
    assert tr.weight_bytes == expect_weights
    assert tr.kv_bytes == 2 * 105 * 2 * (64 + 64) * 4  # layers * mean ctx (100 + 5) * Hkv * (D + Dv) * fp32


def test_phase_clock_sums_each_phase_and_passes_results_and_errors_through(monkeypatch):
    """bench's PhaseClock: a phase timed twice sums; the wrapped call's result comes back, its error goes up
    (the phase still counted); printed in first-timed order."""
    import time

    from bw24.engine.cli.bench import PhaseClock

    now = iter([0.0, 1.5, 10.0, 10.25, 20.0, 22.0])
    monkeypatch.setattr(time, "perf_counter", lambda: next(now))
    clock = PhaseClock()
    rep = clock.timed("bw24", lambda x: x * 2)
    assert rep(3) == 6 and clock.time("load", lambda: "engine") == "engine"
    with pytest.raises(ValueError):
        clock.timed("bw24", lambda: (_ for _ in ()).throw(ValueError("boom")))()
    assert clock.secs == {"bw24": 3.5, "load": 0.25}
    assert str(clock) == "bw24 3.5  load 0.2"
