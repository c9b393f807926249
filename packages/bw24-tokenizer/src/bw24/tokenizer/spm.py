"""SentencePiece-style BPE (tokenizer.ggml.model "llama", e.g. Gemma 3) on the `tokenizers` library.

llama.cpp (llm_tokenizer_spm) merges, over the whole fragment, the adjacent pair whose
concatenation is a token with the highest score, leftmost first, then spells leftover symbols
as <0xXX> byte tokens. An HF BPE with one merge per (left, right) split of every token, ranked
by the score of the merged token, makes the same choices (as transformers' GGUF converter
does); byte_fallback gives the <0xXX> spelling.
"""

from __future__ import annotations

import re

from tokenizers import Tokenizer, models

from .backend import Backend
from .errors import TokenizerLoadError
from .vocab import Attr, Vocab

SPACE = "\u2581"  # "▁", SentencePiece's visible space


def _piece(text: str, attr: Attr) -> bytes:
    """llama_vocab::token_to_piece(special=True) for an SPM vocab."""
    if attr & (Attr.CONTROL | Attr.UNKNOWN | Attr.USER_DEFINED):
        return text.encode("utf-8", "surrogateescape")
    if attr & Attr.NORMAL:
        return text.replace(SPACE, " ").encode("utf-8", "surrogateescape")
    if attr & Attr.BYTE:
        m = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", text)
        return bytes([int(m.group(1), 16)]) if m else b""
    return b""


def _merges(tokens: list[str], scores: list[float], ids: dict[str, int]) -> list[tuple[str, str]]:
    ranked: list[tuple[float, int, str, str]] = []
    for tok, score in zip(tokens, scores, strict=True):
        for k in range(1, len(tok)):
            left, right = tok[:k], tok[k:]
            if left in ids and right in ids:
                ranked.append((-score, -k, left, right))
    ranked.sort(key=lambda r: (r[0], r[1]))  # best score first; same token: longer left first
    return [(a, b) for _, _, a, b in ranked]


def _cut_regex(tokens: list[str]) -> str | None:
    """Cut before a U+2581 whose left neighbour never precedes U+2581 inside a token.

    No token can then span the cut, so no merge crosses it and the halves encode independently.
    """
    bad = {t[i - 1] for t in tokens for i in range(1, len(t)) if t[i] == SPACE}
    bad.add(SPACE)
    return f"(?<=[^{''.join(re.escape(c) for c in sorted(bad))}])(?={SPACE})"


def build_spm(vocab: Vocab) -> Backend:
    if vocab.scores is None:
        raise TokenizerLoadError("SentencePiece vocab without scores")
    ids: dict[str, int] = {}
    for i, t in enumerate(vocab.tokens):
        ids[t] = i
    byte_ids = [f"<0x{b:02X}>" for b in range(256)]
    if not all(b in ids for b in byte_ids):
        raise TokenizerLoadError("SentencePiece vocab lacks the 256 <0xXX> byte tokens needed for byte fallback")
    model = models.BPE(ids, _merges(vocab.tokens, vocab.scores, ids), byte_fallback=True)
    tk = Tokenizer(model)  # no normalizer: the facade escapes spaces and adds the prefix itself
    pieces = [_piece(t, a) for t, a in zip(vocab.tokens, vocab.attrs, strict=True)]
    return Backend(hf=tk, cut_regex=_cut_regex(vocab.tokens), pieces=pieces, escape_spaces=True,
                   note=f"SentencePiece BPE, {len(vocab.tokens)} tokens, scores-ranked merges")
