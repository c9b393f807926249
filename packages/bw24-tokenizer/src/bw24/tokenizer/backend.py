"""The native encoder of one raw-text fragment, with a per-chunk cache in front of it.

A fragment is cut at positions that are provably token boundaries (no token can span them,
see pretokenize.BPE_CUT_REGEX and spm.py), so each chunk encodes independently; chunks repeat
a lot in real text (" the", " of"), and a dict hit is far cheaper than a call into the library.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain

from tokenizers import Tokenizer

_CACHE_MAX = 1 << 18  # chunks; cleared when full (a chunk is short, so this is a few tens of MB)


@dataclass(eq=False)
class Backend:
    hf: Tokenizer
    cut_regex: str | None  # zero-width regex of safe cut points; None: never cut
    pieces: list[bytes]  # token id -> bytes (llama.cpp token_to_piece with special=True)
    escape_spaces: bool  # SentencePiece: " " -> U+2581 before encoding
    note: str = ""
    # exact native encoder for a whole fragment (fastbpe.py), used unless `fast_unsafe` finds a char
    # it cannot take; it needs no chunk cutting or cache, so the cold pass is as fast as the warm one
    fast: Callable[[str], list[int]] | None = None
    fast_unsafe: re.Pattern[str] | None = None
    _cache: dict[str, list[int]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._cut = re.compile(self.cut_regex).split if self.cut_regex else None

    def encode(self, text: str) -> list[int]:
        """Token ids of one raw-text fragment (no special-token handling here)."""
        return self.encode_many([text])[0]

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """Token ids of each raw-text fragment; one cache pass and at most one library call."""
        fast = self.fast
        if fast is not None:
            unsafe = self.fast_unsafe.search
            if not any(unsafe(t) for t in texts):
                return [fast(t) for t in texts]
            return [self._encode_cached([t])[0] if unsafe(t) else fast(t) for t in texts]
        return self._encode_cached(texts)

    def _encode_cached(self, texts: list[str]) -> list[list[int]]:
        """The HF path: cut at safe points, look each chunk up, encode the misses in one batch."""
        if self.escape_spaces:
            texts = [t.replace(" ", "\u2581") for t in texts]
        cut = self._cut
        chunked = [cut(t) for t in texts] if cut else [[t] for t in texts]
        get = self._cache.get
        parts = [[get(c) for c in chunks] for chunks in chunked]
        if any(None in p for p in parts):
            pairs = list(zip(chunked, parts, strict=True))
            new = self._fill([c for chunks, ps in pairs for c, x in zip(chunks, ps, strict=True) if x is None])
            parts = [[x if x is not None else new[c] for c, x in zip(chunks, ps, strict=True)] for chunks, ps in pairs]
        return [list(chain.from_iterable(p)) for p in parts]

    def _fill(self, missing: list[str]) -> dict[str, list[int]]:
        uniq = list(dict.fromkeys(missing))
        new = {c: e.ids for c, e in zip(uniq, self.hf.encode_batch_fast(uniq, add_special_tokens=False), strict=True)}
        if len(self._cache) + len(new) > _CACHE_MAX:
            self._cache.clear()
        self._cache.update(new)
        return new

    def clear_cache(self) -> None:
        self._cache.clear()
