"""ModelConfig.from_gguf on the real smollm2 file and on hand-written metadata per architecture."""

from __future__ import annotations

import math

import numpy as np
import pytest
from bw24.gguf import GGUFFile, ModelConfig, UnsupportedArchitectureError
from bw24.gguf.errors import GGUFError


def _file(make_gguf, arch, kv, vocab=32, embd=8, extra_tensors=()):
    tensors = {"token_embd.weight": np.zeros((vocab, embd), np.float32)}
    for name in extra_tensors:
        tensors[name] = np.zeros(embd, np.float32)
    return GGUFFile(make_gguf(f"{arch}.gguf", arch, {f"{arch}.{k}": v for k, v in kv.items()}, tensors))


BASE = {"block_count": 4, "embedding_length": 8, "attention.head_count": 2, "feed_forward_length": 16,
        "context_length": 128, "attention.layer_norm_rms_epsilon": 1e-6}


def test_smollm2_real_file(smollm2_path):
    c = ModelConfig.from_gguf(GGUFFile(smollm2_path))
    assert (c.arch, c.n_layer, c.n_embd, c.n_head, c.n_head_kv) == ("llama", 30, 576, 9, 3)
    assert (c.head_dim, c.head_dim_v, c.n_ff, c.n_vocab, c.n_ctx_train) == (64, 64, 1536, 49152, 8192)
    assert c.rms_eps == pytest.approx(1e-5) and c.rope_base == 100000.0
    assert (c.rope_type, c.rope_dim, c.rope_freq_scale) == ("norm", 64, 1.0)
    assert c.tie_embeddings and not c.qkv_bias and not c.qk_norm and not c.post_norms
    assert (c.n_expert, c.n_expert_used, c.n_ff_expert) == (0, 0, 0)
    assert c.sliding_window is None and c.swa_layers == (False,) * 30
    assert c.attn_scale == pytest.approx(1 / 8) and c.embed_scale == 1.0 and c.ffn_act == "silu"
    assert c.attn_softcap is None and c.final_softcap is None
    assert (c.n_embd_q, c.n_embd_k, c.n_gqa) == (576, 192, 3)


def test_llama_defaults_and_output_tensor(make_gguf):
    c = ModelConfig.from_gguf(_file(make_gguf, "llama", BASE, extra_tensors=("output.weight",)))
    assert c.n_head_kv == 2 and c.head_dim == 4 and c.rope_base == 10000.0  # llama.cpp defaults
    assert not c.tie_embeddings and c.rope_type == "norm"


def test_qwen2_bias_and_neox(make_gguf):
    c = ModelConfig.from_gguf(_file(make_gguf, "qwen2", {**BASE, "rope.freq_base": 1e6},
                                    extra_tensors=("blk.0.attn_q.bias",)))
    assert c.qkv_bias and c.rope_type == "neox" and not c.qk_norm and c.rope_base == 1e6


def test_qwen3_head_dim_from_key_length(make_gguf):
    kv = {**BASE, "attention.head_count_kv": 1, "attention.key_length": 16, "attention.value_length": 16}
    c = ModelConfig.from_gguf(_file(make_gguf, "qwen3", kv))
    assert (c.head_dim, c.head_dim_v, c.rope_dim, c.n_embd_q) == (16, 16, 16, 32)
    assert c.qk_norm and c.rope_type == "neox" and c.attn_scale == pytest.approx(0.25)


def test_qwen3moe_experts(make_gguf):
    kv = {**BASE, "expert_count": 8, "expert_used_count": 2, "expert_feed_forward_length": 6}
    c = ModelConfig.from_gguf(_file(make_gguf, "qwen3moe", kv))
    assert (c.n_expert, c.n_expert_used, c.n_ff_expert) == (8, 2, 6)
    assert c.expert_weights_norm and c.is_moe and c.qk_norm
    kv.pop("expert_feed_forward_length")  # llama.cpp fallback: n_ff / n_expert_used
    assert ModelConfig.from_gguf(_file(make_gguf, "qwen3moe", kv)).n_ff_expert == 8


def test_gemma3_sliding_window_pattern(make_gguf):
    kv = {**BASE, "block_count": 18, "attention.head_count_kv": 1, "attention.key_length": 4,
          "attention.value_length": 4, "attention.sliding_window": 512, "rope.freq_base": 1e6}
    c = ModelConfig.from_gguf(_file(make_gguf, "gemma3", kv))
    globals_ = [i for i, swa in enumerate(c.swa_layers) if not swa]
    assert globals_ == [5, 11, 17]  # every 6th layer is global
    assert c.sliding_window == 512 and c.rope_base == 1e6 and c.rope_base_swa == 10000.0
    assert c.embed_scale == pytest.approx(math.sqrt(8)) and c.post_norms and c.qk_norm
    assert c.ffn_act == "gelu_tanh" and c.rope_type == "neox" and c.final_softcap is None
    assert c.attn_scale == pytest.approx(0.5)


def test_gemma3_27b_attention_scale(make_gguf):
    kv = {**BASE, "block_count": 62, "attention.key_length": 2, "attention.value_length": 2,
          "attention.sliding_window": 8}
    c = ModelConfig.from_gguf(_file(make_gguf, "gemma3", kv))
    assert c.attn_scale == pytest.approx(1 / math.sqrt(8 / 2))  # n_embd / n_head, not head_dim


def test_nextn_layers_are_not_main_layers(make_gguf):
    c = ModelConfig.from_gguf(_file(make_gguf, "qwen3", {**BASE, "block_count": 5, "nextn_predict_layers": 1}))
    assert (c.n_layer, c.n_nextn, len(c.swa_layers)) == (4, 1, 4)


def test_frozen(make_gguf):
    c = ModelConfig.from_gguf(_file(make_gguf, "llama", BASE))
    with pytest.raises(AttributeError):
        c.n_layer = 3  # type: ignore[misc]


def test_unsupported_arch_lists_supported(make_gguf):
    f = _file(make_gguf, "phi3", BASE)
    with pytest.raises(UnsupportedArchitectureError, match=r"'phi3'.*llama, qwen2, qwen3, qwen3moe, gemma3"):
        ModelConfig.from_gguf(f)


def test_missing_required_key(make_gguf):
    kv = dict(BASE)
    kv.pop("attention.layer_norm_rms_epsilon")
    with pytest.raises(GGUFError, match="llama.attention.layer_norm_rms_epsilon"):
        ModelConfig.from_gguf(_file(make_gguf, "llama", kv))
