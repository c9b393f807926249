"""Synthetic models: shapes and metadata as the preset says, deterministic, and accepted by llama.cpp."""

from __future__ import annotations

import numpy as np
import pytest
from bw24.gguf import GGUFFile, ModelConfig
from bw24.gguf.synth import PRESETS, synth, write_vocab_only
from bw24.gguf.synth import writer as writer_mod
from gguf import GGMLQuantizationType as Q

TINY = ["llama-tiny", "qwen2-tiny", "qwen3-tiny", "qwen3moe-tiny", "gemma3-tiny"]


def _llama_logits(path, tokens):
    import llama_cpp

    m = llama_cpp.Llama(model_path=str(path), n_ctx=64, verbose=False, logits_all=True, n_threads=2)
    for t in tokens:  # one token per eval: multi-token eval segfaults in the CPU wheel built here
        m.eval([t])
    return np.array(m.scores[: len(tokens)]), m


@pytest.mark.parametrize("name", TINY)
def test_tiny_preset_loads_in_llama_cpp(name, tmp_path):
    r = synth(name, tmp_path / f"{name}.gguf", seed=1)
    p = PRESETS[name]
    f = GGUFFile(r.path)
    c = ModelConfig.from_gguf(f)
    assert (c.arch, c.n_layer, c.n_embd, c.n_head, c.n_head_kv, c.head_dim) == (
        p.arch, p.n_layer, p.n_embd, p.n_head, p.n_head_kv, p.head_dim)
    assert (c.n_vocab, c.n_expert, c.n_ff_expert, c.tie_embeddings) == (p.n_vocab, p.n_expert, p.n_ff_expert, p.tied)
    assert c.qkv_bias == (p.arch == "qwen2")
    for t in f.tensors.values():
        assert np.isfinite(t.dequantize()).all(), t.name
    logits, m = _llama_logits(r.path, [1, 70, 300, 5, 9])
    assert logits.shape == (5, p.n_vocab) and np.isfinite(logits).all()
    assert 0.3 < logits.std() < 5  # activations neither vanished nor blew up through the layers
    assert m.n_vocab() == p.n_vocab


def test_qwen3_0_6b_loads_in_llama_cpp(tmp_path):
    r = synth("qwen3-0.6b", tmp_path / "q06.gguf")
    f = GGUFFile(r.path)
    assert len([n for n in f.tensors if n.endswith("attn_q.weight")]) == 28
    assert f.tensor("token_embd.weight").qtype == Q.Q6_K and not f.has_tensor("output.weight")
    logits, _ = _llama_logits(r.path, [100, 2000])
    assert logits.shape == (2, 151936) and np.isfinite(logits).all() and logits.std() > 0.3


def test_deterministic_across_workers_and_seeds(tmp_path, monkeypatch):
    monkeypatch.setattr(writer_mod, "CHUNK_BYTES", 1 << 14)  # many chunks, so the pool path runs
    a = synth("qwen3-tiny", tmp_path / "a.gguf", seed=3, workers=1).path.read_bytes()
    b = synth("qwen3-tiny", tmp_path / "b.gguf", seed=3, workers=2).path.read_bytes()
    c = synth("qwen3-tiny", tmp_path / "c.gguf", seed=4, workers=2).path.read_bytes()
    assert a == b
    assert a != c and len(a) == len(c)


@pytest.mark.parametrize("mix,types", [("q8_0", {Q.Q8_0, Q.F32}), ("q4_0", {Q.Q4_0, Q.Q6_K, Q.F32}),
                                       ("f16", {Q.F16, Q.F32}), ("f32", {Q.F32})])
def test_mixes(mix, types, tmp_path):
    f = GGUFFile(synth("llama-tiny", tmp_path / "m.gguf", mix=mix).path)
    assert {t.qtype for t in f.tensors.values()} == types
    assert f.get("general.file_type") == {"q8_0": 7, "q4_0": 2, "f16": 1, "f32": 0}[mix]


def test_layers_override(tmp_path):
    f = GGUFFile(synth("qwen3-0.6b", tmp_path / "l.gguf", n_layer=1).path)
    c = ModelConfig.from_gguf(f)
    assert c.n_layer == 1 and c.n_embd == 1024 and not f.has_tensor("blk.1.attn_q.weight")


def test_donor_tokenizer_and_vocab_only(smollm2_path, tmp_path):
    donor = GGUFFile(smollm2_path)
    vo = GGUFFile(write_vocab_only(smollm2_path, tmp_path / "vocab.gguf"))
    assert not vo.tensors and vo.arch == "llama"
    assert vo.path.stat().st_size < smollm2_path.stat().st_size / 20
    tok_keys = [k for k in donor.keys() if k.startswith("tokenizer.")]
    assert [k for k in vo.keys() if k.startswith("tokenizer.")] == tok_keys
    r = synth("qwen3-tiny", tmp_path / "d.gguf", donor=vo.path)
    f = GGUFFile(r.path)
    for k in tok_keys:
        assert f.get(k) == donor.get(k), k
        assert f.value_type(k) == donor.value_type(k), k
    assert r.n_vocab == 49152 and f.tensor("token_embd.weight").shape == (49152, 256)
    import llama_cpp

    text = b"Hello world, the quick brown fox!"
    want = llama_cpp.Llama(model_path=str(smollm2_path), vocab_only=True, verbose=False).tokenize(text)
    got = llama_cpp.Llama(model_path=str(r.path), vocab_only=True, verbose=False).tokenize(text)
    assert got == want


def test_donor_smaller_than_preset_vocab_is_padded(smollm2_path, tmp_path):
    r = synth("qwen3-0.6b", tmp_path / "p.gguf", donor=smollm2_path, n_layer=1, mix="q8_0")
    f = GGUFFile(r.path)
    toks = f.get("tokenizer.ggml.tokens")
    assert len(toks) == 151936 and toks[49151] == GGUFFile(smollm2_path).get("tokenizer.ggml.tokens")[-1]
    assert toks[49152] == "[PAD49152]" and f.get("tokenizer.ggml.token_type")[-1] == 5  # UNUSED


def test_mtp_head(tmp_path):
    r = synth("qwen3-tiny", tmp_path / "mtp.gguf", mtp=1, mix="q8_0")
    f = GGUFFile(r.path)
    c = ModelConfig.from_gguf(f)
    assert (c.n_layer, c.n_nextn, f.arch_get("block_count")) == (2, 1, 3)
    assert f.tensor("blk.2.nextn.eh_proj.weight").shape == (256, 512)
    for n in ("blk.2.attn_q.weight", "blk.2.ffn_down.weight", "blk.2.nextn.enorm.weight",
              "blk.2.nextn.hnorm.weight", "blk.2.nextn.shared_head_norm.weight"):
        assert np.isfinite(f.tensor(n).dequantize()).all(), n
    assert not f.has_tensor("blk.3.attn_q.weight") and not f.has_tensor("blk.1.nextn.eh_proj.weight")
