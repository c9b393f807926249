"""Token ids identical to llama.cpp's (llama-cpp-python, vocab only) on the whole corpus."""

from __future__ import annotations

import copy
import ctypes
import dataclasses

import llama_cpp
import pytest
from bw24.tokenizer import Tokenizer


def _mismatches(tok, llm, add_special: bool, parse_special: bool, texts) -> list[tuple[str, list, list]]:
    bad = []
    for s in texts:
        want = llm.tokenize(s.encode("utf-8"), add_bos=add_special, special=parse_special)
        got = tok.encode(s, add_special=add_special, parse_special=parse_special)
        if got != want:
            bad.append((s, got, want))
    return bad


def test_corpus_is_broad(tok_corpus):
    texts = tok_corpus
    assert len(texts) >= 300
    joined = "".join(texts)
    for needle in ("\t", "\n\n", "    ", "\u4e2d", "\u041f", "\u05e9", "\u0645", "\u03b1", "\u200d", "\U0001f3fd",
                   "SELECT", "<html", "{\"", "https://", "a" * 100, "<|im_start|>", "<start_of_turn>", "12345"):
        assert needle in joined, needle


@pytest.mark.parametrize("add_special", [False, True], ids=["nobos", "bos"])
@pytest.mark.parametrize("parse_special", [False, True], ids=["plain", "special"])
def test_parity_with_llama_cpp(tok, oracle, tok_corpus, add_special, parse_special):
    bad = _mismatches(tok, oracle, add_special, parse_special, tok_corpus)
    shown = "\n".join(f"  {s[:60]!r}\n    got  {g[:20]}\n    want {w[:20]}" for s, g, w in bad[:5])
    assert not bad, f"{len(bad)}/{len(tok_corpus)} strings differ from llama.cpp:\n{shown}"


def test_exact_partition_path_matches_llama_cpp(tok, oracle, tok_corpus):
    """The literal llama.cpp special-token loop (the fallback of the fast scan) is right too."""
    texts = [s for s in tok_corpus if "<" in s or "\n" in s][:120]
    orig = tok._special.split
    tok._special.split = tok._special.split_exact
    try:
        bad = _mismatches(tok, oracle, True, True, texts) + _mismatches(tok, oracle, False, False, texts)
    finally:
        tok._special.split = orig
    assert not bad, bad[:3]


def test_special_ids_and_flags_match_llama_cpp(tok, oracle):
    vocab = oracle._model.vocab
    assert tok.n_vocab == oracle.n_vocab()
    assert tok.bos_id == oracle.token_bos()
    assert tok.eos_id == oracle.token_eos()
    assert tok.add_bos == bool(llama_cpp.llama_vocab_get_add_bos(vocab))
    assert tok.add_eos == bool(llama_cpp.llama_vocab_get_add_eos(vocab))
    eog = {i for i in range(tok.n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)}
    assert tok.eot_ids == eog
    assert tok.eos_id in tok.eot_ids


def test_pieces_match_llama_cpp(tok, oracle):
    """token_to_piece (special=True) for the first 400 ids, every 61st id and every special id."""
    vocab = oracle._model.vocab
    ids = set(range(min(tok.n_vocab, 400))) | set(range(0, tok.n_vocab, 61))
    ids |= {i for i in range(tok.n_vocab) if tok.is_special(i)}
    buf = ctypes.create_string_buffer(512)
    for i in sorted(ids):
        n = llama_cpp.llama_token_to_piece(vocab, i, buf, 512, 0, True)
        assert tok.token_to_piece(i) == buf.raw[:n], i


def test_canary_wrong_pre_tokenizer_is_caught(load_tok, load_llm, tok_corpus):
    """smollm2 with plain gpt2 pre-tokenization (no digit split) must disagree with llama.cpp."""
    good = load_tok("smollm2-135m")
    wrong = Tokenizer(dataclasses.replace(good.vocab, pre="gpt-2"))
    assert _mismatches(wrong, load_llm("smollm2-135m"), False, False, tok_corpus)


def test_canary_wrong_bos_flag_is_caught(load_tok, load_llm, tok_corpus):
    good = load_tok("smollm2-135m")
    wrong = Tokenizer(dataclasses.replace(good.vocab, add_bos=not good.add_bos))
    assert _mismatches(wrong, load_llm("smollm2-135m"), True, False, tok_corpus[:5])


# --- the tiktoken fast path (fastbpe.py) and the HF fallback path are both held to llama.cpp ---
BPE_MODELS = ("smollm2-135m", "qwen2.5-coder-0.5b")


def _hf_only(tok: Tokenizer) -> Tokenizer:
    """The same tokenizer with the fast path switched off (every fragment takes the HF path)."""
    slow = copy.copy(tok)
    slow._backend = dataclasses.replace(tok._backend, fast=None, fast_unsafe=None, _cache={})
    return slow


@pytest.mark.parametrize("alias", BPE_MODELS)
def test_fast_path_is_used_for_byte_level_bpe(load_tok, alias):
    assert load_tok(alias)._backend.fast is not None, "parity above would not cover the tiktoken path"


@pytest.mark.parametrize("alias", BPE_MODELS)
def test_hf_fallback_path_matches_llama_cpp(load_tok, load_llm, tok_corpus, alias):
    slow = _hf_only(load_tok(alias))
    bad = _mismatches(slow, load_llm(alias), False, False, tok_corpus)
    assert not bad, f"{len(bad)} strings differ from llama.cpp, first: {bad[0]}"


def test_unsafe_chars_take_the_fallback_and_match_llama_cpp(load_tok, load_llm):
    """smollm2 has no token for bytes 0x04 or 0xF1 (llama.cpp drops them): such text must not
    reach tiktoken, and the fallback must still give llama.cpp's ids."""
    tok = load_tok("smollm2-135m")
    texts = ["a\x04b 12 c", "x \U00040000y 7", "plain text", "two\x06 \U00080001 bad 99"]
    assert [bool(tok._backend.fast_unsafe.search(t)) for t in texts] == [True, True, False, True]
    assert not _mismatches(tok, load_llm("smollm2-135m"), False, False, texts)


def test_canary_naively_folded_regex_is_caught(load_tok, load_llm, tok_corpus, monkeypatch):
    """Folding smollm's two regexes as plain alternation (no digit-bounded whitespace, GPT-2's
    ` ?\\p{N}+` kept) lets " 5" become one pre-token: the fast path must then disagree."""
    from bw24.tokenizer import fastbpe, pretokenize

    naive = r"\p{N}|" + pretokenize._GPT2 + r"|\s+"
    monkeypatch.setitem(fastbpe.FOLDED_PATTERNS, "smollm", naive)
    wrong = Tokenizer(load_tok("smollm2-135m").vocab)
    assert wrong._backend.fast is not None
    assert _mismatches(wrong, load_llm("smollm2-135m"), False, False, tok_corpus)
