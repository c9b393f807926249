"""Unit tests on synthetic vocabularies: special-token partition rules, typed errors."""

from __future__ import annotations

import re

import pytest
from bw24.tokenizer import TokenIdError, Tokenizer, TokenizerLoadError, Vocab
from bw24.tokenizer.bpe import byte_to_unicode
from bw24.tokenizer.special import SpecialPartitioner, trie_regex
from bw24.tokenizer.vocab import Attr


def _vocab(specials: dict[str, Attr], model: str = "gpt2") -> Vocab:
    byte_chars = [byte_to_unicode()[b] for b in range(256)]
    tokens = byte_chars + list(specials)
    attrs = [Attr.NORMAL] * 256 + list(specials.values())
    return Vocab(model=model, pre="gpt-2", tokens=tokens, attrs=attrs, scores=None, merges=["a b"],
                 bos_id=None, eos_id=None, eot_id=None, unk_id=None, pad_id=None, add_bos=False, add_eos=False,
                 add_space_prefix=False, eog_ids=frozenset(), chat_template=None)


def _ids(v: Vocab, frags):
    return [v.tokens[f] if isinstance(f, int) else f for f in frags]


def test_trie_regex_prefers_longest():
    rx = re.compile(trie_regex(["<a>", "<a>>", "<ab>", "x"]))
    assert [m.group() for m in rx.finditer("<a>><a><ab>x<a")] == ["<a>>", "<a>", "<ab>", "x"]


def test_partition_longest_token_first_like_llama_cpp():
    # "ab" starts first, but llama.cpp splits on the longer "bcd" before it looks for "ab"
    v = _vocab({"ab": Attr.USER_DEFINED, "bcd": Attr.USER_DEFINED})
    sp = SpecialPartitioner(v)
    assert _ids(v, sp.split("xabcdy", False)) == ["xa", "bcd", "y"]
    assert _ids(v, sp.split("ab bcd ab", False)) == ["ab", " ", "bcd", " ", "ab"]


def test_partition_control_tokens_need_parse_special():
    v = _vocab({"<|c|>": Attr.CONTROL, "<u>": Attr.USER_DEFINED})
    sp = SpecialPartitioner(v)
    assert _ids(v, sp.split("a<|c|>b<u>c", False)) == ["a<|c|>b", "<u>", "c"]
    assert _ids(v, sp.split("a<|c|>b<u>c", True)) == ["a", "<|c|>", "b", "<u>", "c"]
    assert sp.split("", True) == []


def test_partition_lstrip_rstrip():
    v = _vocab({"<m>": Attr.USER_DEFINED | Attr.LSTRIP, "<r>": Attr.USER_DEFINED | Attr.RSTRIP})
    sp = SpecialPartitioner(v)
    assert _ids(v, sp.split("a  <m>  b", False)) == ["a", "<m>", "  b"]
    assert _ids(v, sp.split("a  <r> \n b", False)) == ["a  ", "<r>", "b"]


def test_fast_and_exact_partition_agree_on_runs():
    v = _vocab({"\n" * k: Attr.USER_DEFINED for k in range(1, 5)})
    sp = SpecialPartitioner(v)
    for text in ("\n" * 11, "a\n\nb\n\n\n\n\nc", "\n"):
        assert sp.split(text, False) == sp.split_exact(text, False)
    assert _ids(v, sp.split("\n" * 11, False)) == ["\n" * 4, "\n" * 4, "\n" * 3]


def _meta(**kw):
    base = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2",
            "tokenizer.ggml.tokens": [byte_to_unicode()[b] for b in range(256)],
            "tokenizer.ggml.token_type": [1] * 256, "tokenizer.ggml.merges": ["a b"]}
    base.update(kw)
    return {k: v for k, v in base.items() if v is not None}.get


def test_tiny_vocab_encodes_bytes():
    tok = Tokenizer(Vocab.from_metadata(_meta()))
    assert tok.encode("ab 1", add_special=False) == [tok.token_to_id("a"),
                                                     tok.token_to_id("b"), tok.token_to_id("\u0120"),
                                                     tok.token_to_id("1")]
    assert tok.decode(tok.encode("h\u00e9llo \u4e2d")) == "h\u00e9llo \u4e2d"


@pytest.mark.parametrize(("meta", "match"), [
    (_meta(**{"tokenizer.ggml.model": None}), "no tokenizer.ggml.model"),
    (_meta(**{"tokenizer.ggml.model": "bert"}), "unsupported tokenizer.ggml.model 'bert'"),
    (_meta(**{"tokenizer.ggml.pre": "no-such-pre"}), "unsupported tokenizer.ggml.pre 'no-such-pre'"),
    (_meta(**{"tokenizer.ggml.tokens": []}), "tokens is missing or empty"),
    (_meta(**{"tokenizer.ggml.merges": []}), "without tokenizer.ggml.merges"),
    (_meta(**{"tokenizer.ggml.model": "llama"}), "without tokenizer.ggml.scores"),
    (_meta(**{"tokenizer.ggml.token_type": [1]}), "token_type has 1 entries"),
])
def test_bad_metadata_is_a_typed_error(meta, match):
    with pytest.raises(TokenizerLoadError, match=match):
        Tokenizer(Vocab.from_metadata(meta))


def test_bad_inputs_are_typed_errors():
    tok = Tokenizer(Vocab.from_metadata(_meta()))
    with pytest.raises(TokenIdError, match="out of range"):
        tok.decode([1, 999])
    with pytest.raises(TokenIdError):
        tok.decode([-1])
    with pytest.raises(TokenIdError, match="out of range"):
        tok.token_to_piece(256)
    with pytest.raises(TypeError, match="takes str"):
        tok.encode(b"bytes")
    with pytest.raises(TokenizerLoadError, match="GGUFFile or a path"):
        Tokenizer.from_gguf(42)
    with pytest.raises(TokenizerLoadError, match="unsupported tokenizer.ggml.model"):
        Tokenizer.from_gguf(type("F", (), {"get": staticmethod(_meta(**{"tokenizer.ggml.model": "t5"}))})())
