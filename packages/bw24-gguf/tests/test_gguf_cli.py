"""bw24-gguf CLI: synth, inspect, vocab-only, and a clean error for bad input."""

from __future__ import annotations

from bw24.gguf import GGUFFile, ModelConfig
from bw24.gguf.cli import main


def test_synth_then_inspect(tmp_path, capsys):
    out = tmp_path / "t.gguf"
    assert main(["synth", "qwen3moe-tiny", str(out), "--quant", "q8_0", "--layers", "3", "--seed", "7"]) == 0
    assert "wrote" in capsys.readouterr().out
    c = ModelConfig.from_gguf(GGUFFile(out))
    assert c.n_layer == 3 and c.n_expert == 8
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    for s in ("qwen3moe", "n_expert", "blk.2.ffn_down_exps.weight", "8x256x256", "totals per type", "Q8_0", "F32"):
        assert s in text, s


def test_inspect_real_file_totals(smollm2_path, capsys):
    assert main(["inspect", "smollm2-135m", "--max-tensors", "5"]) == 0
    text = capsys.readouterr().out
    assert "llama" in text and "Q4_1" in text and "... 267 more" in text and "272" in text


def test_vocab_only(smollm2_path, tmp_path, capsys):
    out = tmp_path / "v.gguf"
    assert main(["vocab-only", str(smollm2_path), str(out)]) == 0
    f = GGUFFile(out)
    assert len(f.get("tokenizer.ggml.tokens")) == 49152 and not f.tensors


def test_bad_input_is_a_clean_error(tmp_path, capsys):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf at all")
    assert main(["inspect", str(bad)]) == 2
    assert "not a GGUF file" in capsys.readouterr().err
    assert main(["inspect", "no-such-model"]) == 2
    assert "aliases" in capsys.readouterr().err
