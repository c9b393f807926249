"""`bw24 run-gen`: gate line first, streamed text, speed line; MISMATCH canary; bad input -> exit 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from bw24.engine.cli import main
from bw24.engine.ops.ref import RefOps

GATE = re.compile(r"^verify-prefill argmax=(\d+)  decode argmax=(\d+)  logit maxdiff=(\S+)(?:  \S+ nmse: .*)?  (MATCH|MISMATCH)")
SPEED = re.compile(r"^generated (\d+) tokens in [\d.]+ s = [\d.]+ tok/s \(prefill [\d.]+ tok/s\)$")
Q = ["--chat", "--prompt", "What is the capital of France?", "--backend", "cpu", "--no-progress"]


def test_run_gen_gate_text_speed(capsys):
    rc = main(["run-gen", "smollm2-135m", *Q, "-n", "16"])
    out = capsys.readouterr().out.splitlines()
    assert rc == 0, out
    m = GATE.match(out[0])
    assert m and m.group(4) == "MATCH" and m.group(1) == m.group(2) and float(m.group(3)) < 1e-2
    assert "Paris" in "\n".join(out[1:-1])
    s = SPEED.match(out[-1])
    assert s and 1 <= int(s.group(1)) <= 16


@pytest.mark.parametrize("how", ["flag", "env"])
def test_run_gen_sensitivity_reaches_the_gate(capsys, monkeypatch, how):
    """--sensitivity (or BW24_GATE_SENSITIVITY=1, for the GPU host's `with` stages) asks verify_prefill for
    the KV-rounding probe; without either it does not."""
    from bw24.engine.engine import Engine

    asked = []
    orig = Engine.verify_prefill
    monkeypatch.setattr(Engine, "verify_prefill",
                        lambda self, ids, sensitivity=False: (asked.append(sensitivity), orig(self, ids))[1])
    if how == "env":
        monkeypatch.setenv("BW24_GATE_SENSITIVITY", "1")
    assert main(["run-gen", "smollm2-135m", *Q, "-n", "2", *(["--sensitivity"] if how == "flag" else [])]) == 0
    monkeypatch.delenv("BW24_GATE_SENSITIVITY", raising=False)
    assert main(["run-gen", "smollm2-135m", *Q, "-n", "2"]) == 0
    assert asked == [True, False]
    capsys.readouterr()


def _gate_prompt_lengths(monkeypatch) -> list[int]:
    """The lengths of the prompts the run-gen gate checks (Engine.verify_prefill wrapped), in call order."""
    from bw24.engine.engine import Engine

    seen: list[int] = []
    orig = Engine.verify_prefill
    monkeypatch.setattr(Engine, "verify_prefill",
                        lambda self, ids, sensitivity=False: (seen.append(len(ids)), orig(self, ids))[1])
    return seen


def test_run_gen_chat_env_wraps_the_gates_prompt(capsys, monkeypatch):
    """BW24_GATE_CHAT=1 (the GPU host's `with` stages) is --chat: the gate's prompt goes through the chat template,
    longer than the bare prompt (past the 16 rows a decode-path launch takes: the batched prefill runs)."""
    seen = _gate_prompt_lengths(monkeypatch)
    bare = [a for a in Q if a != "--chat"]
    assert main(["run-gen", "smollm2-135m", *bare, "-n", "2"]) == 0
    monkeypatch.setenv("BW24_GATE_CHAT", "1")
    assert main(["run-gen", "smollm2-135m", *bare, "-n", "2"]) == 0
    assert len(seen) == 2 and seen[1] > seen[0] and seen[1] > 16
    capsys.readouterr()


def test_run_gen_repeat_lengthens_the_gates_prompt_and_refuses_nonsense(capsys, monkeypatch):
    """--repeat N / BW24_GATE_REPEAT=N (the GPU host's `with` stages: a gate past the attention's depth thresholds):
    the prompt N times, so the gate's ids grow ~N-fold; 0 or a non-number is refused with an error
    naming the option or the variable, before any model is loaded."""
    from bw24.engine.engine import Engine

    seen = _gate_prompt_lengths(monkeypatch)
    bare = [a for a in Q if a != "--chat"]
    assert main(["run-gen", "smollm2-135m", *bare, "-n", "2"]) == 0
    assert main(["run-gen", "smollm2-135m", *bare, "-n", "2", "--repeat", "3"]) == 0
    monkeypatch.setenv("BW24_GATE_REPEAT", "4")
    assert main(["run-gen", "smollm2-135m", *bare, "-n", "2"]) == 0
    assert seen[1] >= 3 * (seen[0] - 1) and seen[2] >= 4 * (seen[0] - 1)  # (one BOS)
    load = Engine.load
    monkeypatch.setattr(Engine, "load", lambda *a, **k: pytest.fail("loaded a model for a refused input"))
    assert main(["run-gen", "smollm2-135m", *bare, "--repeat", "0"]) != 0
    assert "--repeat=0" in capsys.readouterr().err
    monkeypatch.setenv("BW24_GATE_REPEAT", "many")
    assert main(["run-gen", "smollm2-135m", *bare]) != 0
    assert "BW24_GATE_REPEAT" in capsys.readouterr().err
    monkeypatch.setattr(Engine, "load", load)


def test_run_gen_canary_perturbed_decode_prints_mismatch(capsys, monkeypatch):
    """A decode-only bug (attention scale 5% off when T == 1) must void the run. (A uniform rope
    position shift would not do: RoPE scores depend only on position differences.)"""
    orig = RefOps.attention

    def skewed(self, q, *a, scale, **kw):
        orig(self, q, *a, scale=scale * (1.05 if q.shape[0] == 1 else 1.0), **kw)

    monkeypatch.setattr(RefOps, "attention", skewed)
    rc = main(["run-gen", "smollm2-135m", *Q, "-n", "8"])
    cap = capsys.readouterr()
    out = cap.out.splitlines()
    assert rc == 1
    assert GATE.match(out[0]).group(4) == "MISMATCH"
    assert not any(SPEED.match(line) for line in out) and "no text generated" in cap.err


def _bad(capsys, argv, needle):
    rc = main(["run-gen", *argv])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert needle in err, err
    assert "Traceback" not in err


def test_bad_input_exit_2(capsys, tmp_path):
    _bad(capsys, ["no-such-model-xyz", "--prompt", "hi"], "no-such-model-xyz")
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"this is not a gguf file at all" * 10)
    _bad(capsys, [str(corrupt), "--prompt", "hi"], "corrupt.gguf")
    trunc = tmp_path / "trunc.gguf"
    from bw24.gguf import resolve_model

    trunc.write_bytes(open(resolve_model("smollm2-135m"), "rb").read(4096))
    _bad(capsys, [str(trunc), "--prompt", "hi"], "truncated")
    _bad(capsys, ["smollm2-135m", "--prompt", ""], "empty prompt")
    _bad(capsys, ["smollm2-135m", "--prompt", "hi", "-n", "0"], "max-tokens")
    _bad(capsys, ["smollm2-135m", "--prompt", "hi", "--temp", "-1"], "temperature")
    _bad(capsys, ["smollm2-135m", "--prompt", "word " * 20, "--n-ctx", "8", "--backend", "cpu", "--no-progress"],
         "longer than the context")


def test_unsupported_arch_exit_2(capsys, tmp_path):
    import gguf

    p = tmp_path / "mamba.gguf"
    w = gguf.GGUFWriter(str(p), "mamba")
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.zeros((4, 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    _bad(capsys, [str(p), "--prompt", "hi"], "mamba")


def test_unsupported_quant_is_typed(tmp_path, helpers):
    """A weight stored as Q8_K (an activation-only type: no reference dequantization)."""
    import gguf
    from bw24.gguf.errors import UnsupportedQuantTypeError

    p = helpers.write_tiny_gguf(tmp_path / "q.gguf", "qwen3", E=256, H=4, Hkv=2, D=64, F=256)
    r = gguf.GGUFReader(str(p))
    w = gguf.GGUFWriter(str(tmp_path / "q8k.gguf"), "qwen3")
    for f in r.fields.values():
        if not f.name.startswith("GGUF.") and f.name != "general.architecture":
            w.add_key_value(f.name, f.contents(), f.types[0], f.types[-1] if len(f.types) > 1 else None)
    for t in r.tensors:
        a = np.asarray(t.data)
        if t.name == "blk.0.attn_q.weight":  # 256 x 256 floats -> 256 rows of one 292-byte Q8_K block
            w.add_tensor(t.name, np.zeros((256, 292), np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_K)
        else:
            w.add_tensor(t.name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(UnsupportedQuantTypeError, match="Q8_K"):
        helpers.build_model(tmp_path / "q8k.gguf")


def test_module_entry_point_help():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    r = subprocess.run([sys.executable, "-m", "bw24.engine.cli", "--help"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0 and "run-gen" in r.stdout
    r = subprocess.run([sys.executable, "-m", "bw24.engine.cli"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2
