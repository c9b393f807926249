"""Pre-tokenizer regexes per tokenizer.ggml.pre, copied from llama.cpp (llm_tokenizer_bpe).

llama.cpp applies the list in order: each regex splits every piece left by the previous one,
keeping both matches and the text between them (HF's Split behavior "isolated"). The patterns
are llama.cpp's adapted forms (e.g. '[sS] instead of (?i:'s)), which Oniguruma reads the same.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import TokenizerLoadError

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+"
           r"((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


@dataclass(frozen=True)
class PreTokenizerSpec:
    """How llama.cpp pre-tokenizes one tokenizer.ggml.pre family."""

    family: str
    regexes: tuple[str, ...]
    ignore_merges: bool = False  # a whole pre-token found in the vocab is emitted as is
    add_bos_default: bool = False


_FAMILIES: dict[str, PreTokenizerSpec] = {
    "default": PreTokenizerSpec("default", (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")),
    "llama3": PreTokenizerSpec("llama3", (_LLAMA3,), ignore_merges=True, add_bos_default=True),
    "qwen2": PreTokenizerSpec("qwen2", (_QWEN2,)),
    "smollm": PreTokenizerSpec("smollm", (r"\p{N}", _GPT2)),
    "gpt2": PreTokenizerSpec("gpt2", (_GPT2,)),
    "falcon": PreTokenizerSpec("falcon", (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]")),
    "chatglm4": PreTokenizerSpec("chatglm4", (_LLAMA3,)),
    "glm4": PreTokenizerSpec("glm4", (_LLAMA3,), ignore_merges=True),
    "tekken": PreTokenizerSpec("tekken", (_TEKKEN,), ignore_merges=True, add_bos_default=True),
}

# tokenizer.ggml.pre value -> family (llama_vocab::load's if/else chain, the families above only)
PRE_ALIASES: dict[str, str] = {
    "default": "default",
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                     "lfm2", "jina-v5-nano"), "llama3"),
    **dict.fromkeys(("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan"), "qwen2"),
    **dict.fromkeys(("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b",
                     "mellum2"), "smollm"),
    **dict.fromkeys(("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                     "a.x-4.0", "mellum", "modern-bert", "mpt", "olmo", "jais", "exaone4", "trillion",
                     "granite-docling"), "gpt2"),
    "falcon": "falcon",
    "chatglm-bpe": "chatglm4",
    **dict.fromkeys(("glm4", "glm5"), "glm4"),
    "tekken": "tekken",
}


def pre_tokenizer_spec(pre: str) -> PreTokenizerSpec:
    family = PRE_ALIASES.get(pre)
    if family is None:
        raise TokenizerLoadError(
            f"unsupported tokenizer.ggml.pre {pre!r}; supported: {', '.join(sorted(PRE_ALIASES))}")
    return _FAMILIES[family]


# Chunk cuts for the encode cache. In every family above a space can only start a pre-token or
# sit inside a whitespace run, so "before a space that follows a non-space" is always a pre-token
# boundary; Python's \s is a superset of llama.cpp's whitespace, so the cut is conservative.
BPE_CUT_REGEX = r"(?<=\S)(?= )"
