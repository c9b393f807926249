"""Byte-level BPE (tokenizer.ggml.model "gpt2") on the `tokenizers` library.

The HF model gets exactly llama.cpp's inputs: the merges in file order (rank = index), the
pre-tokenizer regex list of tokenizer.ggml.pre applied in sequence, then the GPT-2 byte to
unicode mapping. Special tokens are not registered with HF: bw24 partitions them itself
(special.py) so the matching rules are llama.cpp's, not HF's.
"""

from __future__ import annotations

import functools

from tokenizers import Regex, Tokenizer, models, pre_tokenizers

from .backend import Backend
from .errors import TokenizerLoadError
from .fastbpe import build_fast_bpe
from .pretokenize import BPE_CUT_REGEX, pre_tokenizer_spec
from .vocab import Attr, Vocab


@functools.lru_cache(maxsize=1)
def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode char map (unicode_byte_to_utf8_map in llama.cpp)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


@functools.lru_cache(maxsize=1)
def unicode_to_byte() -> dict[str, int]:
    return {c: b for b, c in byte_to_unicode().items()}


def _piece(text: str, attr: Attr) -> bytes:
    """llama_vocab::token_to_piece(special=True) for a BPE vocab."""
    raw = text.encode("utf-8", "surrogateescape")
    if attr & (Attr.CONTROL | Attr.UNKNOWN | Attr.USER_DEFINED):
        return raw
    dec = unicode_to_byte()
    if attr & Attr.NORMAL:
        out = bytearray()
        for ch in text:
            b = dec.get(ch)
            if b is None:  # llama_decode_text's marker for a char outside the byte map
                out += b"[UNK_BYTE_0x" + ch.encode("utf-8", "surrogateescape").hex().encode() + raw + b"]"
            else:
                out.append(b)
        return bytes(out)
    if attr & Attr.BYTE:
        return bytes([dec[text[0]]]) if text and text[0] in dec else b""
    return b""  # unused / undefined tokens render as nothing


def build_bpe(vocab: Vocab) -> Backend:
    spec = pre_tokenizer_spec(vocab.pre)
    ids: dict[str, int] = {}
    for i, t in enumerate(vocab.tokens):
        ids[t] = i  # a duplicated text keeps its last id, like llama.cpp's token_to_id
    merges: list[tuple[str, str]] = []
    dropped = 0
    for m in vocab.merges:
        pos = m.find(" ", 1)
        if pos < 0:
            raise TokenizerLoadError(f"malformed merge {m!r} (no separating space)")
        a, b = m[:pos], m[pos + 1:]
        if a in ids and b in ids and a + b in ids:
            merges.append((a, b))
        else:  # HF rejects merges whose parts are not tokens; llama.cpp never completes them either
            dropped += 1
    model = models.BPE(ids, merges, ignore_merges=spec.ignore_merges)
    tk = Tokenizer(model)
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in spec.regexes]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)]
    )
    pieces = [_piece(t, a) for t, a in zip(vocab.tokens, vocab.attrs, strict=True)]
    fast = build_fast_bpe(spec.family, ids, merges, unicode_to_byte())
    return Backend(hf=tk, cut_regex=BPE_CUT_REGEX, pieces=pieces, escape_spaces=False,
                   fast=fast[0] if fast else None, fast_unsafe=fast[1] if fast else None,
                   note=f"byte-level BPE, pre={vocab.pre} ({spec.family}), {len(merges)} merges"
                        + (f", {dropped} unusable merges dropped" if dropped else "")
                        + (", tiktoken fast path" if fast else ""))
