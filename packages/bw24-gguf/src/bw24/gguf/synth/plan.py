"""The tensor list and metadata of a synthetic model: llama.cpp tensor names, numpy-order shapes
(a 2-D weight is [n_out, n_in]), the ggml type of each (from the quant mix) and its value scale."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V

from .presets import Preset
from .quantize.mix import MIXES, tensor_qtype
from .vocab import KV


@dataclass(frozen=True)
class TensorPlan:
    name: str
    shape: tuple[int, ...]
    qtype: Q
    kind: str  # "weight" (sigma = 1/sqrt(fan_in)) | "norm" (values near 1) | "bias"
    sigma: float


def plan_tensors(p: Preset, mix: str, n_vocab: int, mtp: int = 0) -> list[TensorPlan]:
    """mtp > 0 appends that many NextN (MTP) blocks after the main layers, named as llama.cpp names them:
    a full transformer block plus blk.N.nextn.{eh_proj, enorm, hnorm, shared_head_norm}; the embedding
    and the output head are shared with the main model (llama.cpp treats nextn.embed_tokens and
    nextn.shared_head_head as optional)."""
    e, hd = p.n_embd, p.head_dim
    specs: list[tuple[str, tuple[int, ...], str]] = [("token_embd.weight", (n_vocab, e), "weight")]
    for i in range(p.n_layer + mtp):
        b = f"blk.{i}."
        specs += [
            (b + "attn_norm.weight", (e,), "norm"),
            (b + "attn_q.weight", (p.n_head * hd, e), "weight"),
            (b + "attn_k.weight", (p.n_head_kv * hd, e), "weight"),
            (b + "attn_v.weight", (p.n_head_kv * hd, e), "weight"),
            (b + "attn_output.weight", (e, p.n_head * hd), "weight"),
        ]
        if p.qkv_bias:
            specs += [(b + "attn_q.bias", (p.n_head * hd,), "bias"), (b + "attn_k.bias", (p.n_head_kv * hd,), "bias"),
                      (b + "attn_v.bias", (p.n_head_kv * hd,), "bias")]
        if p.qk_norm:
            specs += [(b + "attn_q_norm.weight", (hd,), "norm"), (b + "attn_k_norm.weight", (hd,), "norm")]
        if p.arch == "gemma3":
            specs += [(b + "post_attention_norm.weight", (e,), "norm")]
        specs += [(b + "ffn_norm.weight", (e,), "norm")]
        if p.n_expert:
            x, f = p.n_expert, p.n_ff_expert
            specs += [
                (b + "ffn_gate_inp.weight", (x, e), "weight"),
                (b + "ffn_gate_exps.weight", (x, f, e), "weight"),
                (b + "ffn_up_exps.weight", (x, f, e), "weight"),
                (b + "ffn_down_exps.weight", (x, e, f), "weight"),
            ]
        else:
            specs += [
                (b + "ffn_gate.weight", (p.n_ff, e), "weight"),
                (b + "ffn_up.weight", (p.n_ff, e), "weight"),
                (b + "ffn_down.weight", (e, p.n_ff), "weight"),
            ]
        if p.arch == "gemma3":
            specs += [(b + "post_ffw_norm.weight", (e,), "norm")]
        if i >= p.n_layer:
            specs += [(b + "nextn.eh_proj.weight", (e, 2 * e), "weight"), (b + "nextn.enorm.weight", (e,), "norm"),
                      (b + "nextn.hnorm.weight", (e,), "norm"), (b + "nextn.shared_head_norm.weight", (e,), "norm")]
    specs.append(("output_norm.weight", (e,), "norm"))
    if not p.tied:
        specs.append(("output.weight", (n_vocab, e), "weight"))
    out = []
    for name, shape, kind in specs:
        sigma = {"weight": 1.0 / math.sqrt(shape[-1]), "norm": 0.2, "bias": 0.1}[kind]
        qt = tensor_qtype(name, shape, mix, p.n_layer + mtp, p.tied, p.n_expert)
        out.append(TensorPlan(name, shape, qt, kind, sigma))
    return out


def arch_kvs(p: Preset, mix: str, n_vocab: int, seed: int, mtp: int = 0) -> list[KV]:
    a = p.arch
    kvs = [
        KV("general.name", f"bw24-synth {p.name} {mix}", V.STRING),
        KV("general.description", f"bw24 synthetic model: random weights (seed {seed}), real shapes", V.STRING),
        KV("general.file_type", int(MIXES[mix][1]), V.UINT32),
        KV("general.quantization_version", 2, V.UINT32),
        KV(f"{a}.vocab_size", n_vocab, V.UINT32),
        KV(f"{a}.context_length", p.n_ctx, V.UINT32),
        KV(f"{a}.embedding_length", p.n_embd, V.UINT32),
        KV(f"{a}.block_count", p.n_layer + mtp, V.UINT32),  # llama.cpp counts NextN blocks in block_count
        KV(f"{a}.feed_forward_length", p.n_ff, V.UINT32),
        KV(f"{a}.attention.head_count", p.n_head, V.UINT32),
        KV(f"{a}.attention.head_count_kv", p.n_head_kv, V.UINT32),
        KV(f"{a}.attention.key_length", p.head_dim, V.UINT32),
        KV(f"{a}.attention.value_length", p.head_dim, V.UINT32),
        KV(f"{a}.rope.dimension_count", p.head_dim, V.UINT32),
        KV(f"{a}.rope.freq_base", p.rope_base, V.FLOAT32),
        KV(f"{a}.attention.layer_norm_rms_epsilon", p.rms_eps, V.FLOAT32),
    ]
    if p.n_expert:
        kvs += [KV(f"{a}.expert_count", p.n_expert, V.UINT32), KV(f"{a}.expert_used_count", p.n_expert_used, V.UINT32),
                KV(f"{a}.expert_feed_forward_length", p.n_ff_expert, V.UINT32)]
    if mtp:
        kvs.append(KV(f"{a}.nextn_predict_layers", mtp, V.UINT32))
    if p.sliding_window:
        kvs.append(KV(f"{a}.attention.sliding_window", p.sliding_window, V.UINT32))
    return kvs
