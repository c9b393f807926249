"""benchmarks/gpu_overlap.py (the draft's steps beside the target's verify, issue 8) runs end to end: its logic on
the reference backend with two tiny synthetic models, so a typo costs no device minutes. Timings on the CPU mean
nothing; what is checked is that every measurement ran and the derived ratios follow from them."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

from bw24.gguf.synth import synth

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_overlap.py"


def test_gpu_overlap_runs_on_the_reference_backend(tmp_path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("gpu_overlap", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "BACKEND", "cpu")
    monkeypatch.setattr(mod, "REPS", 2)
    monkeypatch.setattr(mod, "STEPS", 3)
    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    synth("qwen3-tiny", target, mix="q8_0", seed=1)
    synth("qwen3-tiny", draft, mix="q8_0", seed=2)
    monkeypatch.setattr("sys.argv", ["gpu_overlap.py", str(tmp_path / "out"), str(target), str(draft), "12"])
    assert mod.main() == 0
    r = json.loads((tmp_path / "out" / "overlap.json").read_text())
    keys = ("verify_alone", "drafts_alone", "sequential", "together", "target_steps_alone", "draft_steps_alone",
            "steps_side_by_side")
    assert all(r[k] > 0 and math.isfinite(r[k]) for k in keys) and r["depth"] == 12 and r["K"] == 7
    assert r["hidden_of_drafts"] == (r["sequential"] - r["together"]) / r["drafts_alone"]
    assert "drafts beside the verify" in capsys.readouterr().out
