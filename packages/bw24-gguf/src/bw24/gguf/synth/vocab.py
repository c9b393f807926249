"""Tokenizer metadata for synthetic files: copied from a donor GGUF, or a built-in byte-level
gpt2 BPE vocab padded to n_vocab (llama.cpp needs tokens, token types and merges for a gpt2 vocab)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gguf import GGUFValueType as V
from gguf import GGUFWriter, TokenType

from ..errors import GGUFError
from ..reader import GGUFFile

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_BIGRAMS = ("th he in er an re on at en nd ti es or te of ed is it al ar st to nt ng se ha as ou io le "
            "ve co me de hi ri ro ic ne ea ra ce li ch ll be ma si om ur").split()
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


@dataclass(frozen=True)
class KV:
    key: str
    value: Any
    vtype: V
    sub: V | None = None


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs, strict=True)}


def builtin_vocab(n_vocab: int) -> list[KV]:
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    merges = [f"Ġ {c}" for c in "abcdefghijklmnopqrstuvwxyz"] + [f"{a} {b}" for a, b in _BIGRAMS]
    tokens += [m.replace(" ", "") for m in merges]
    types = [TokenType.NORMAL] * len(tokens)
    bos = eos = len(tokens)
    tokens += SPECIALS
    types += [TokenType.CONTROL] * len(SPECIALS)
    if n_vocab < len(tokens):
        raise GGUFError(f"built-in vocab needs n_vocab >= {len(tokens)}, got {n_vocab}")
    pad = n_vocab - len(tokens)
    tokens += [f"[PAD{i}]" for i in range(pad)]
    types += [TokenType.UNUSED] * pad
    return [
        KV("tokenizer.ggml.model", "gpt2", V.STRING),
        KV("tokenizer.ggml.pre", "qwen2", V.STRING),  # a pre-tokenizer every consumer knows
        KV("tokenizer.ggml.tokens", tokens, V.ARRAY, V.STRING),
        KV("tokenizer.ggml.token_type", [int(t) for t in types], V.ARRAY, V.INT32),
        KV("tokenizer.ggml.merges", merges, V.ARRAY, V.STRING),
        KV("tokenizer.ggml.bos_token_id", bos, V.UINT32),
        KV("tokenizer.ggml.eos_token_id", eos + 2, V.UINT32),  # <|im_end|> ends a chat turn
        KV("tokenizer.ggml.padding_token_id", eos, V.UINT32),
        KV("tokenizer.ggml.add_bos_token", False, V.BOOL),
        KV("tokenizer.chat_template", CHATML, V.STRING),
    ]


def donor_vocab(donor: GGUFFile, n_vocab: int) -> list[KV]:
    """All tokenizer.* keys of the donor; token arrays padded with unused tokens up to n_vocab."""
    out: list[KV] = []
    n_tok = len(donor.get("tokenizer.ggml.tokens") or [])
    if n_tok == 0:
        raise GGUFError(f"{donor.path}: donor has no tokenizer.ggml.tokens")
    pad = max(0, n_vocab - n_tok)
    for key in donor.keys():
        if not key.startswith("tokenizer."):
            continue
        vtype, sub = donor.value_type(key)
        value = donor.get(key)
        if pad and key == "tokenizer.ggml.tokens":
            value = value + [f"[PAD{i}]" for i in range(n_tok, n_tok + pad)]
        elif pad and key == "tokenizer.ggml.token_type":
            value = value + [int(TokenType.UNUSED)] * pad
        elif pad and key == "tokenizer.ggml.scores":
            value = value + [0.0] * pad
        out.append(KV(key, value, vtype, sub))
    return out


def _encodable(v: Any) -> Any:
    # strings decoded with surrogateescape go back to their exact bytes
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return v.encode("utf-8", errors="surrogateescape")
    return v


def add_kvs(w: GGUFWriter, kvs: list[KV]) -> None:
    for kv in kvs:
        if kv.vtype == V.ARRAY:
            if not kv.value:  # GGUFWriter cannot write an empty array
                continue
            val = [_encodable(x) for x in kv.value] if kv.sub == V.STRING else kv.value
            w.add_key_value(kv.key, val, V.ARRAY, sub_type=kv.sub)
        else:
            w.add_key_value(kv.key, _encodable(kv.value), kv.vtype)


def write_vocab_only(donor_path: str | Path, out_path: str | Path) -> Path:
    """A tensor-less GGUF with the donor's architecture and tokenizer: a small, portable donor."""
    donor = GGUFFile(donor_path)
    n_tok = len(donor.get("tokenizer.ggml.tokens") or [])
    w = GGUFWriter(str(out_path), donor.arch)
    name = donor.get("general.name")
    if name:
        w.add_name(f"{name} (vocab only)")
    add_kvs(w, donor_vocab(donor, n_tok))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    return Path(out_path)
