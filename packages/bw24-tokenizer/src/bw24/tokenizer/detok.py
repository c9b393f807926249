"""Streaming detokenizer: text deltas that never split a UTF-8 sequence.

Byte-level and byte-fallback vocabularies emit single bytes of a multi-byte character as
separate tokens; an incremental UTF-8 decoder holds such a tail back until it completes.
Bytes that can never complete are shown as U+FFFD, exactly as Tokenizer.decode would.
"""

from __future__ import annotations

import codecs
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .tokenizer import Tokenizer


class IncrementalDetokenizer:
    def __init__(self, tok: Tokenizer, skip_special: bool = False):
        self._tok = tok
        self._skip_special = skip_special
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def add(self, token_id: int) -> str:
        """Text completed by this token ("" while a character is still partial)."""
        if self._skip_special and self._tok.is_special(token_id):
            return ""
        return self._decoder.decode(self._tok.token_to_piece(token_id))

    def flush(self) -> str:
        """End of stream: a dangling partial character becomes U+FFFD."""
        out = self._decoder.decode(b"", final=True)
        self._decoder.reset()
        return out

    @property
    def pending(self) -> bytes:
        """Bytes held back (the start of an incomplete character)."""
        return self._decoder.getstate()[0]
