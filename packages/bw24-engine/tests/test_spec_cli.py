"""`bw24 run-spec` and `bw24 frspec-ranks` on a tiny synthetic model: the printed gate lines, the exit
codes, and the canary (a verify that rubber-stamps the drafts must FAIL with FIRST DIVERGENCE)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from bw24.engine.cli import main
from bw24.engine.spec import verify as spec_verify
from bw24.gguf.synth import synth

LINE = re.compile(r"^\[spec K=(\d)\] (\d+) tokens  [\d.]+ tok/s  acceptance: (\d+)/(\d+) = [\d.]+%  "
                  r"tokens/round: [\d.]+  self-consistency: (PASS|FAIL)")
ARGS = ["--prompt", "x", "-n", "12", "--backend", "cpu", "--no-progress"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    p = tmp_path_factory.mktemp("spec_cli") / "tiny.gguf"
    synth("qwen3-tiny", p, mix="q8_0", seed=1, mtp=1)
    return str(p)


def test_the_draft_model_loads_under_the_draft_policy(model, monkeypatch, capsys):
    """--draft: the drafter's engine is loaded with draft=True, so its backend's use_draft_policy (cuda: int8
    activations at every K) runs before any of its weights load; the target's backend never takes it."""
    from bw24.engine import engine as engine_mod
    from bw24.engine.ops import RefOps

    backends = []

    class Recording(RefOps):
        def __init__(self):
            super().__init__()
            self.weights, self.policy_at = 0, None
            backends.append(self)

        def use_draft_policy(self):
            self.policy_at = self.weights

        def load_weight(self, ti):
            self.weights += 1
            return super().load_weight(ti)

    monkeypatch.setattr(engine_mod, "get_ops", lambda backend: Recording())
    assert main(["run-spec", model, "--draft", model, "--k", "2", *ARGS]) == 0, capsys.readouterr().out
    assert len(backends) == 2 and all(b.weights > 0 for b in backends)
    assert [b.policy_at for b in backends] == [None, 0]  # the target untouched; the draft's before its weights


@pytest.mark.parametrize("drafter", [["--ngram"], ["--mtp"]])
def test_spec_cli_run_spec_passes(model, drafter, capsys):
    rc = main(["run-spec", model, *drafter, "--k", "1..8", *ARGS])
    out = capsys.readouterr().out.splitlines()
    lines = [m for m in map(LINE.match, out) if m]
    assert rc == 0, out
    assert [int(m.group(1)) for m in lines] == list(range(1, 9))
    assert all(m.group(5) == "PASS" and m.group(2) == "12" for m in lines)
    assert out[-1] == "=== SELF-CONSISTENCY PASS ==="


def test_spec_cli_draft_equal_target_full_acceptance_sampled(model, capsys):
    rc = main(["run-spec", model, "--draft", model, "--k", "3", "--temp", "0.8", "--seed", "4", *ARGS])
    out = capsys.readouterr().out.splitlines()
    m = next(filter(None, map(LINE.match, out)))
    assert rc == 0 and m.group(5) == "PASS" and m.group(3) == m.group(4) != "0", out


def test_spec_cli_canary_broken_verify_fails(model, capsys, monkeypatch):
    """A verify that makes every row agree with the draft it checks (accepting anything) must be caught."""
    real = spec_verify.Verifier.forward

    def rubber_stamp(self, ids):
        v = real(self, ids)
        for i in range(len(ids) - 1):
            v.logits[i, ids[i + 1]] = np.float32(1e30)
        return v

    monkeypatch.setattr(spec_verify.Verifier, "forward", rubber_stamp)
    rc = main(["run-spec", model, "--ngram", "--k", "2,4", *ARGS])  # n-gram drafts are often wrong
    out = capsys.readouterr().out
    assert rc == 1
    assert re.search(r"self-consistency: FAIL  FIRST DIVERGENCE at index \d+", out)
    assert out.rstrip().endswith("=== SELF-CONSISTENCY FAIL ===")


def test_spec_cli_bad_input(model, capsys):
    assert main(["run-spec", model, "--ngram", "--k", "0..9", *ARGS]) == 2
    assert "every K must be in 1..8" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse: --mtp and --draft are exclusive
        main(["run-spec", model, "--mtp", "--draft", model, *ARGS])


def test_spec_cli_frspec_ranks(model, tmp_path, capsys):
    out = tmp_path / "ranks.json"
    assert main(["frspec-ranks", model, str(out), "--n", "100", "--tokens", "8", "--seeds", "1",
                 "--backend", "cpu", "--no-progress"]) == 0
    doc = json.loads(out.read_text())
    ids = doc["ids"]
    assert doc["n_vocab"] == 512 and len(ids) == 100 == len(set(ids))
    assert doc["tokens_counted"] == 8 * 8  # 8 built-in prompts x 1 seed x 8 tokens
    rc = main(["run-spec", model, "--draft", model, "--frspec", str(out), "--k", "2", *ARGS])
    assert rc == 0 and "=== SELF-CONSISTENCY PASS ===" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"n_vocab": 99, "ids": [1]}))
    assert main(["run-spec", model, "--draft", model, "--frspec", str(bad), *ARGS]) == 2
    assert "vocabulary of 99 tokens" in capsys.readouterr().err
    # the MTP head drafts over the target's vocabulary: the same ranks file trims it, a wrong one is refused
    rc = main(["run-spec", model, "--mtp", "--frspec", str(out), "--k", "2", *ARGS])
    assert rc == 0 and "=== SELF-CONSISTENCY PASS ===" in capsys.readouterr().out
    assert main(["run-spec", model, "--mtp", "--frspec", str(bad), *ARGS]) == 2
    assert "vocabulary of 99 tokens" in capsys.readouterr().err
    assert main(["run-spec", model, "--ngram", "--frspec", str(out), *ARGS]) == 2
    assert "--frspec needs a drafter with an output head" in capsys.readouterr().err


def test_spec_stream_events_equal_engine_generate(model):
    """speculative_generate (run-gen / server path) streams the events Engine.generate streams, greedy,
    stop strings included."""
    from bw24.engine import Engine
    from bw24.engine.spec import NgramDrafter
    from bw24.engine.spec.stream import speculative_generate

    eng = Engine.load(model, backend="cpu", n_ctx=128, progress=False)
    ids = [300, 41, 300, 41]
    plain = list(eng.generate(ids, 20))
    text = "".join(e.text for e in plain)
    stop = [text[len(text) // 2 : len(text) // 2 + 2]] if len(text) > 4 else None
    for st in (None, stop):
        plain = [(e.token_id, e.text, e.finish_reason) for e in eng.generate(ids, 20, stop=st)]
        spec = [(e.token_id, e.text, e.finish_reason)
                for e in speculative_generate(eng, NgramDrafter(), ids, max_tokens=20, stop=st, k=3)]
        assert spec == plain
    assert eng.last_stats.extra["drafter"] == "ngram"
    with pytest.raises(ValueError, match="logprobs"):
        speculative_generate(eng, NgramDrafter(), ids, logprobs=True)


def test_spec_cli_run_gen_with_drafter(model, capsys):
    assert main(["run-gen", model, "--prompt", "x y x y", "-n", "12", "--backend", "cpu", "--no-progress"]) == 0
    plain = capsys.readouterr().out.splitlines()
    assert main(["run-gen", model, "--prompt", "x y x y", "-n", "12", "--backend", "cpu", "--no-progress",
                 "--ngram", "--k", "3"]) == 0
    spec = capsys.readouterr().out.splitlines()
    assert spec[:2] == plain[:2]  # gate line and the same text
    assert spec[-1].startswith("speculative (ngram, verify rowwise): acceptance ")
