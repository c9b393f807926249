"""benchmarks/spec_bench.py's pair cell end to end on the CPU backend (tiny synthetic models), with the draft's
head trimmed by FR-Spec (--frspec): the rows carry the trim in their cell name and pass self-consistency."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "spec_bench.py"


def test_spec_bench_pair_with_a_trimmed_draft_head(tmp_path, monkeypatch, capsys):
    from bw24.gguf.synth import synth

    synth("qwen3-tiny", tmp_path / "target.gguf", mix="q8_0", seed=1)
    synth("qwen3-tiny", tmp_path / "draft.gguf", mix="q8_0", seed=2, n_layer=1)
    ranks = tmp_path / "ranks.json"
    ranks.write_text(json.dumps({"n_vocab": 512, "ids": list(range(512))[::-1]}))
    spec = importlib.util.spec_from_file_location("spec_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["spec_bench.py", str(out), "--backend", "cpu", "--cells", "pair", "--pair",
                                      str(tmp_path / "draft.gguf"), str(tmp_path / "target.gguf"), "--frspec",
                                      str(ranks), "--frspec-n", "300", "--reps", "1", "-n", "6"])
    assert mod.main() == 0
    rows = [json.loads(x) for x in (out / "spec_bench.jsonl").read_text().splitlines()]
    assert len(rows) == len(mod.PAIR_PROMPTS) and all("-frspec300-p" in r["cell"] for r in rows)
    assert all(r["self_consistency"] == "PASS" for r in rows)
    assert "pair: median ratio" in capsys.readouterr().out


def test_spec_bench_mtp_with_a_trimmed_head(tmp_path, monkeypatch, capsys):
    """The mtp cell with --mtp-frspec (the synthetic model's NextN head trimmed): its row names the trim and passes
    self-consistency; the round's cost is reported against a plain step."""
    spec = importlib.util.spec_from_file_location("spec_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ranks = tmp_path / "ranks.json"
    ranks.write_text(json.dumps({"n_vocab": 512, "ids": list(range(512))[::-1]}))
    out = tmp_path / "out"
    monkeypatch.setattr(sys, "argv", ["spec_bench.py", str(out), "--backend", "cpu", "--cells", "mtp", "--synth-dir",
                                      str(tmp_path / "synth"), "--synth-preset", "qwen3-tiny", "--mtp-frspec",
                                      str(ranks), "--frspec-n", "256", "--reps", "1", "-n", "6"])
    assert mod.main() == 0
    (row,) = [json.loads(x) for x in (out / "spec_bench.jsonl").read_text().splitlines()]
    assert "-frspec256-k3" in row["cell"] and row["self_consistency"] == "PASS" and row["round_over_step"] > 0
    assert "a plain step (target <= 1.25x)" in capsys.readouterr().out
