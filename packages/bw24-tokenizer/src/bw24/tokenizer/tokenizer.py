"""Tokenizer facade: llama.cpp's llama_vocab::tokenize flow over a native BPE backend.

encode = special-token partition -> (BOS) -> each raw fragment through the backend -> (EOS),
with SentencePiece's space prefix on fragments that follow a special token (add_space_prefix).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Any

from .backend import Backend
from .bpe import build_bpe
from .errors import TokenIdError, TokenizerLoadError
from .special import SpecialPartitioner
from .spm import build_spm
from .vocab import Attr, Vocab

_SKIP_ATTRS = Attr.CONTROL | Attr.UNKNOWN  # what token_to_piece(special=False) renders as ""


class Tokenizer:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self._backend: Backend = build_spm(vocab) if vocab.model == "llama" else build_bpe(vocab)
        self._special = SpecialPartitioner(vocab)
        self._pieces = self._backend.pieces
        self._skip = frozenset(i for i, a in enumerate(vocab.attrs) if a & _SKIP_ATTRS)
        self._template = None
        self._text_to_id: dict[str, int] | None = None
        self._unencodable: frozenset[int] | None = None

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def from_gguf(cls, f: Any) -> Tokenizer:
        """From a bw24.gguf.GGUFFile (or anything with .get(key, default)), or a path to a GGUF."""
        if isinstance(f, (str, os.PathLike)):
            from bw24.gguf import GGUFFile

            f = GGUFFile(f)
        if not callable(getattr(f, "get", None)):
            raise TokenizerLoadError(f"Tokenizer.from_gguf needs a GGUFFile or a path, got {type(f).__name__}")
        return cls(Vocab.from_metadata(f.get, name=str(getattr(f, "path", "<gguf>"))))

    # --- properties of the contract -----------------------------------------------------------
    @property
    def n_vocab(self) -> int:
        return self.vocab.n_vocab

    @property
    def bos_id(self) -> int | None:
        return self.vocab.bos_id

    @property
    def eos_id(self) -> int | None:
        return self.vocab.eos_id

    @property
    def eot_ids(self) -> frozenset[int]:
        """Ids that end generation (llama.cpp's EOG set: eos, eot, <|im_end|>, FIM pad/repo/sep...)."""
        return self.vocab.eog_ids

    @property
    def add_bos(self) -> bool:
        return self.vocab.add_bos

    @property
    def add_eos(self) -> bool:
        return self.vocab.add_eos

    @property
    def chat_template(self) -> str | None:
        return self.vocab.chat_template

    def is_special(self, token_id: int) -> bool:
        """A control/unknown token (llama.cpp hides these when rendering with special=False)."""
        return token_id in self._skip

    @property
    def unencodable_bytes(self) -> frozenset[int]:
        """Bytes no token spells. llama.cpp drops them silently (smollm2 lacks e.g. 0xF1), so text
        containing them does not round-trip; bw24 does the same, for parity."""
        if self._unencodable is None:
            single = {p[0] for p in self._pieces if len(p) == 1}
            self._unencodable = frozenset(set(range(256)) - single)
        return self._unencodable

    def token_to_id(self, text: str) -> int | None:
        """Id of the token whose stored text is exactly ``text`` (special-token strings, mostly)."""
        if self._text_to_id is None:
            self._text_to_id = {}
            for i, t in enumerate(self.vocab.tokens):
                self._text_to_id.setdefault(t, i)
        return self._text_to_id.get(text)

    # --- encode -------------------------------------------------------------------------------
    def encode(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """Token ids, identical to llama.cpp's llama_tokenize(text, add_special, parse_special)."""
        if not isinstance(text, str):
            raise TypeError(f"encode() takes str, got {type(text).__name__}")
        v = self.vocab
        out: list[int] = []
        if add_special and v.add_bos:
            if v.bos_id is None:
                raise TokenizerLoadError("the vocab asks for a BOS token but has no bos_token_id")
            out.append(v.bos_id)
        frags = self._special.split(text, parse_special)
        raw: list[str] = []
        if v.model == "llama" and v.add_space_prefix:
            prev_special = True  # a fragment at the start or after a special token gets " " prefixed
            for frag in frags:
                if isinstance(frag, str):
                    raw.append(" " + frag if prev_special else frag)
                prev_special = isinstance(frag, int)
        else:
            raw = [f for f in frags if isinstance(f, str)]
        encoded = iter(self._backend.encode_many(raw))
        for frag in frags:
            if isinstance(frag, int):
                out.append(frag)
            else:
                out += next(encoded)
        if add_special and v.add_eos:
            if v.eos_id is None:
                raise TokenizerLoadError("the vocab asks for an EOS token but has no eos_token_id")
            out.append(v.eos_id)
        return out

    # --- decode -------------------------------------------------------------------------------
    def token_to_piece(self, token_id: int) -> bytes:
        """Raw bytes of one token (special tokens as their text; byte tokens as that byte)."""
        if not 0 <= token_id < len(self._pieces):
            raise TokenIdError(f"token id {token_id} out of range [0, {len(self._pieces)})")
        return self._pieces[token_id]

    def decode_bytes(self, ids: Iterable[int], skip_special: bool = False) -> bytes:
        pieces = self._pieces
        n = len(pieces)
        try:
            if skip_special:
                skip = self._skip
                return b"".join(pieces[i] for i in ids if i not in skip)
            return b"".join([pieces[i] for i in ids])
        except (IndexError, TypeError):
            bad = next((i for i in ids if not isinstance(i, int) or not 0 <= i < n), None)
            raise TokenIdError(f"token id {bad!r} out of range [0, {n})") from None

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        """Concatenated pieces as text; an incomplete UTF-8 sequence becomes U+FFFD."""
        if any(isinstance(i, int) and i < 0 for i in ids):  # negative ids would index from the end
            raise TokenIdError(f"negative token id in {list(ids)[:8]}...")
        return self.decode_bytes(ids, skip_special).decode("utf-8", errors="replace")

    # --- chat ---------------------------------------------------------------------------------
    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                            tools: list[dict[str, Any]] | None = None, **kwargs: Any) -> str:
        if self._template is None:
            from .chat import ChatTemplate

            self._template = ChatTemplate.from_tokenizer(self)
        return self._template.render(messages, add_generation_prompt=add_generation_prompt, tools=tools, **kwargs)

    def __repr__(self) -> str:
        return f"Tokenizer({self.vocab.model}/{self.vocab.pre}, n_vocab={self.n_vocab}: {self._backend.note})"
