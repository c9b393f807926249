"""Special-token partition, exactly as llama.cpp's tokenizer_st_partition does it.

llama.cpp walks the special tokens longest first and splits every raw-text fragment at each
occurrence. CONTROL/UNKNOWN tokens are matched only with parse_special; USER_DEFINED tokens are
always matched (HF's added tokens behave the same).

Fast path: one leftmost-longest scan with a trie-shaped regex. It gives llama.cpp's answer
unless an occurrence of a different token starts inside a chosen match, runs past its end and
is at least as long (then llama.cpp's length order could pick it instead); that case, and
tokens with lstrip/rstrip, take the literal llama.cpp algorithm.
"""

from __future__ import annotations

import re

from .vocab import Attr, Vocab

_SPECIAL_MASK = Attr.CONTROL | Attr.USER_DEFINED | Attr.UNKNOWN
_PARSE_ONLY = Attr.CONTROL | Attr.UNKNOWN
_STRIP = Attr.LSTRIP | Attr.RSTRIP
_C_ISSPACE = " \t\n\v\f\r"  # C isspace() in the "C" locale, used by lstrip/rstrip

Fragment = str | int  # raw text, or a token id


def trie_regex(words: list[str]) -> str:
    """A regex matching any of ``words``, longest alternative first at each position."""
    root: dict = {}
    for w in words:
        node = root
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = True

    def emit(node: dict) -> str:
        end = "" in node
        alts = [re.escape(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if end else body

    return emit(root)


class _Matcher:
    def __init__(self, vocab: Vocab, ids: list[int]):
        self.ids = ids  # llama.cpp order: longest first (ties by id here: deterministic)
        self.text_to_id: dict[str, int] = {}
        for i in ids:
            self.text_to_id.setdefault(vocab.tokens[i], i)
        self.stripped = {vocab.tokens[i] for i in ids if vocab.attrs[i] & _STRIP}
        self.regex = re.compile(trie_regex(list(self.text_to_id))) if ids else None


class SpecialPartitioner:
    def __init__(self, vocab: Vocab):
        ids = [i for i, a in enumerate(vocab.attrs) if a & _SPECIAL_MASK]
        ids.sort(key=lambda i: (-len(vocab.tokens[i].encode("utf-8", "surrogateescape")), i))
        self._tokens = vocab.tokens
        self._attrs = vocab.attrs
        self._all = _Matcher(vocab, ids)
        self._always = _Matcher(vocab, [i for i in ids if not vocab.attrs[i] & _PARSE_ONLY])

    def split(self, text: str, parse_special: bool) -> list[Fragment]:
        mt = self._all if parse_special else self._always
        if mt.regex is None or not text:
            return [text] if text else []
        matches = list(mt.regex.finditer(text))
        if not matches:
            return [text]
        if self._needs_exact(text, mt, matches):
            return self.split_exact(text, parse_special)
        out: list[Fragment] = []
        pos = 0
        t2i = mt.text_to_id
        for m in matches:
            s, e = m.span()
            if s > pos:
                out.append(text[pos:s])
            out.append(t2i[m.group()])
            pos = e
        if pos < len(text):
            out.append(text[pos:])
        return out

    @staticmethod
    def _needs_exact(text: str, mt: _Matcher, matches: list[re.Match[str]]) -> bool:
        match_at = mt.regex.match
        for m in matches:
            s, e = m.span()
            x = m.group()
            if x in mt.stripped:
                return True
            for p in range(s + 1, e):
                y = match_at(text, p)
                if y is not None and y.end() > e and y.end() - p >= e - s and y.group() != x:
                    return True
        return False

    def split_exact(self, text: str, parse_special: bool) -> list[Fragment]:
        """The literal llama.cpp loop: each special token, longest first, over all raw fragments."""
        mt = self._all if parse_special else self._always
        frags: list[Fragment] = [text] if text else []
        for tid in mt.ids:
            if self._tokens[tid] in text:
                frags = self._split_one(frags, tid)
        return frags

    def _split_one(self, frags: list[Fragment], tid: int) -> list[Fragment]:
        tok = self._tokens[tid]
        lstrip = bool(self._attrs[tid] & Attr.LSTRIP)
        rstrip = bool(self._attrs[tid] & Attr.RSTRIP)
        out: list[Fragment] = []
        for frag in frags:
            if not isinstance(frag, str) or tok not in frag:
                out.append(frag)
                continue
            start = 0
            while True:
                pos = frag.find(tok, start)
                if pos < 0:
                    if start < len(frag):
                        out.append(frag[start:])
                    break
                left = frag[start:pos]
                if lstrip:
                    left = left.rstrip(_C_ISSPACE)
                if left:
                    out.append(left)
                out.append(tid)
                start = pos + len(tok)
                if rstrip:
                    while start < len(frag) and frag[start] in _C_ISSPACE:
                        start += 1
        return out
