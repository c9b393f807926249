"""A tiktoken encoder equal to llama.cpp's byte-level BPE, for the cold (uncached) path.

tiktoken merges the adjacent pair whose concatenated bytes have the lowest rank; llama.cpp merges
the pair with the lowest merge index. They agree when every merge makes a distinct token and a
token's rank is its merge index (here: its id, which must grow with the merge index), and when a
whole pre-token found in the vocab (tiktoken's shortcut) is what the merges would produce anyway.
build_fast_bpe checks the first two and returns None (the HF path is kept) when they fail; the
parity corpus is the judge of the whole (tests/test_tok_parity.py runs both paths).

The pre-tokenizer is ONE regex (tiktoken takes one), llama.cpp's list folded into it:
- qwen2: llama.cpp's single regex as is (its last alternative \\s+ matches anything left).
- smollm: llama.cpp runs \\p{N} first, then GPT-2's regex inside each digit-free piece. Folded:
  \\p{N} first; GPT-2's ` ?\\p{N}+` dropped (it can never match in a digit-free piece); a
  whitespace run that ends at a digit is whole (in llama.cpp it ends its piece, where
  \\s+(?!\\S) takes all of it), hence \\s+(?=\\p{N}) before \\s+(?!\\S); and a final \\s+ because
  tiktoken drops text no alternative matches, where llama.cpp keeps it as its own piece (only a
  single whitespace before a non-space is left unmatched, and \\s+ takes exactly that).
Regex engines: tiktoken's fancy-regex (Rust regex classes: \\s = Unicode White_Space, \\p{L}/\\p{N}
= general categories) versus Oniguruma in the HF path; both are checked against llama.cpp.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from .pretokenize import _QWEN2

_SMOLLM_FOLDED = r"\p{N}|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?[^\s\p{L}\p{N}]+|\s+(?=\p{N})|\s+(?!\S)|\s+"

FOLDED_PATTERNS: dict[str, str] = {"qwen2": _QWEN2, "smollm": _SMOLLM_FOLDED}


def _unsafe_chars(missing: set[int]) -> str | None:
    """A regex class of the chars whose UTF-8 uses a byte that has no token (llama.cpp drops the
    byte; tiktoken would fail), plus lone surrogates; None when a continuation byte is missing."""
    parts = [r"\ud800-\udfff"]
    for b in sorted(missing):
        if b < 0x80:
            parts.append(re.escape(chr(b)))
        elif b < 0xC0:
            return None  # a missing continuation byte touches too many chars: no fast path
        elif 0xC2 <= b <= 0xDF:
            parts.append(f"\\u{(b - 0xC0) << 6:04x}-\\u{((b - 0xC0) << 6) | 0x3F:04x}")
        elif 0xE0 <= b <= 0xEF:
            lo = (b - 0xE0) << 12
            parts.append(f"\\u{max(lo, 0x800):04x}-\\u{lo | 0xFFF:04x}")
        elif 0xF0 <= b <= 0xF4:
            lo = (b - 0xF0) << 18
            parts.append(f"\\U{max(lo, 0x10000):08x}-\\U{min(lo | 0x3FFFF, 0x10FFFF):08x}")
        # 0xC0, 0xC1, 0xF5..0xFF never occur in UTF-8
    return "[" + "".join(parts) + "]"


def build_fast_bpe(family: str, token_ids: dict[str, int], merges: list[tuple[str, str]],
                   dec: dict[str, int]) -> tuple[Callable[[str], list[int]], re.Pattern[str]] | None:
    """(encode, unsafe) where encode(text) gives llama.cpp's ids for text with no unsafe char, or
    None when this vocab cannot be expressed exactly as tiktoken ranks (or tiktoken is absent)."""
    pat = FOLDED_PATTERNS.get(family)
    if pat is None:
        return None
    try:
        import tiktoken
    except ImportError:
        return None

    def to_bytes(t: str) -> bytes:
        return bytes([dec[c] for c in t])

    ranks: dict[bytes, int] = {}
    last = -1
    for a, b in merges:
        tid = token_ids[a + b]
        tb = to_bytes(a + b)
        if tb in ranks or tid <= last:  # two merges make one token, or ids not in merge order
            return None
        ranks[tb] = last = tid
    missing = set()
    for byte in range(256):
        tid = token_ids.get(next(c for c, v in dec.items() if v == byte))
        if tid is None:
            missing.add(byte)
        elif bytes([byte]) not in ranks:
            ranks[bytes([byte])] = tid
    unsafe = _unsafe_chars(missing)
    if unsafe is None or len(set(ranks.values())) != len(ranks):
        return None
    enc = tiktoken.Encoding(f"bw24-{family}", pat_str=pat, mergeable_ranks=ranks, special_tokens={})
    return enc.encode_ordinary, re.compile(unsafe)
