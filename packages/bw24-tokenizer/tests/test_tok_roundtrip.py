"""decode(encode(x)) == x for valid UTF-8, and the streaming detokenizer agrees with decode."""

from __future__ import annotations

from bw24.tokenizer import IncrementalDetokenizer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# Text from every plane hypothesis offers (no surrogates: they are not valid UTF-8) plus the
# characters tokenizers care about.
_TEXT = st.text(alphabet=st.one_of(st.characters(exclude_categories=("Cs",)),
                                   st.sampled_from(" \t\n\r\u2581\u200d\U0001f3fd<|>")), max_size=80)


def _encodable(tok, text: str) -> str:
    """Drop characters with a byte no token spells (llama.cpp drops such bytes; see unencodable_bytes)."""
    bad = tok.unencodable_bytes
    if tok.vocab.model == "llama":  # SentencePiece spells " " as U+2581: a literal U+2581 decodes to " "
        text = text.replace("\u2581", " ")
    return "".join(c for c in text if not bad.intersection(c.encode("utf-8")))


@_SETTINGS
@given(text=_TEXT)
def test_roundtrip_plain(tok, text):
    text = _encodable(tok, text)
    assert tok.decode(tok.encode(text, add_special=False)) == text


@_SETTINGS
@given(text=_TEXT)
def test_roundtrip_parse_special(tok, text):
    # special-token strings become one id each, whose piece is that same string
    text = _encodable(tok, text)
    assert tok.decode(tok.encode(text, add_special=False, parse_special=True)) == text


def test_unencodable_bytes_are_dropped_like_llama_cpp(tok, oracle):
    for s in ("\U00040000", "a\U000e0001b", "\uffff \U0010fffd", "\x00\x01\x7f"):
        assert tok.encode(s, add_special=False) == oracle.tokenize(s.encode(), add_bos=False, special=False)
    lost = {b for c in "\U00040000" for b in c.encode()} & tok.unencodable_bytes
    assert (tok.decode(tok.encode("\U00040000", add_special=False)) == "\U00040000") == (not lost)


def test_roundtrip_corpus(tok, tok_corpus):
    for s in map(lambda t: _encodable(tok, t), tok_corpus):
        assert tok.decode(tok.encode(s, add_special=False, parse_special=True)) == s


@_SETTINGS
@given(data=st.data())
def test_stream_equals_decode(tok, data):
    ids = data.draw(st.lists(st.integers(0, tok.n_vocab - 1), max_size=40))
    det = IncrementalDetokenizer(tok)
    streamed = "".join(det.add(i) for i in ids) + det.flush()
    assert streamed == tok.decode(ids)


def test_stream_never_splits_a_character(tok):
    text = "\U0001f468\u200d\U0001f469\u200d\U0001f467 \u4e2d\u6587 \U0001f44b\U0001f3fd \u0645\u0631\u062d\u0628\u0627 \U00010348"
    ids = tok.encode(text, add_special=False)
    pieces = [tok.token_to_piece(i) for i in ids]
    # the case under test really happens: some token is not valid UTF-8 on its own
    assert any(_broken(p) for p in pieces), "no byte-split token in this text for this model"
    det = IncrementalDetokenizer(tok)
    deltas = [det.add(i) for i in ids]
    assert "\ufffd" not in "".join(deltas)
    assert "".join(deltas) + det.flush() == text
    # a delta is emitted only when its characters are complete: every prefix decodes cleanly
    out = ""
    for d in deltas:
        out += d
        assert text.startswith(out)


def test_stream_holds_partial_bytes(load_tok):
    tok = load_tok("qwen2.5-coder-0.5b")
    ch = "\U00010348"  # Gothic hwair: 4 UTF-8 bytes, spelled with several byte-level tokens
    ids = tok.encode(ch, add_special=False)
    assert len(ids) > 1
    det = IncrementalDetokenizer(tok)
    assert det.add(ids[0]) == ""
    assert det.pending
    rest = "".join(det.add(i) for i in ids[1:])
    assert rest == ch and det.pending == b""


def test_flush_replaces_dangling_bytes(load_tok):
    tok = load_tok("qwen2.5-coder-0.5b")
    ids = tok.encode("\u4e2d", add_special=False)
    first = next(i for i in range(tok.n_vocab) if tok.token_to_piece(i) == "\u4e2d".encode()[:1])
    det = IncrementalDetokenizer(tok)
    assert det.add(first) == ""
    assert det.flush() == "\ufffd"
    assert len(ids) >= 1


def test_skip_special_hides_control_tokens(load_tok):
    tok = load_tok("smollm2-135m")
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>", add_special=False, parse_special=True)
    assert tok.decode(ids) == "<|im_start|>user\nhi<|im_end|>"
    assert tok.decode(ids, skip_special=True) == "user\nhi"
    det = IncrementalDetokenizer(tok, skip_special=True)
    assert "".join(det.add(i) for i in ids) + det.flush() == "user\nhi"


def _broken(piece: bytes) -> bool:
    try:
        piece.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False
