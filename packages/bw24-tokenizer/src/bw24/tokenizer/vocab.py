"""Vocabulary as llama.cpp reads it from GGUF metadata (src/llama-vocab.cpp, llama_vocab::load).

Besides the raw arrays this applies llama.cpp's defaults per tokenizer model and its
name-based attribute fixes (end-of-turn / FIM tokens forced to CONTROL), because those decide
which strings are matched as special tokens and which ids end generation.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from .errors import TokenizerLoadError
from .pretokenize import pre_tokenizer_spec

TOKEN_TYPE_NAMES = {0: "undefined", 1: "normal", 2: "unknown", 3: "control", 4: "user_defined", 5: "unused", 6: "byte"}


class Attr(enum.IntFlag):
    """llama_token_attr bits (llama.h)."""

    UNDEFINED = 0
    UNKNOWN = 1 << 0
    UNUSED = 1 << 1
    NORMAL = 1 << 2
    CONTROL = 1 << 3
    USER_DEFINED = 1 << 4
    BYTE = 1 << 5
    NORMALIZED = 1 << 6
    LSTRIP = 1 << 7
    RSTRIP = 1 << 8
    SINGLE_WORD = 1 << 9


# GGUF tokenizer.ggml.token_type value -> attribute (llama_vocab::load switch)
_TYPE_TO_ATTR = {0: Attr.UNDEFINED, 1: Attr.NORMAL, 2: Attr.UNKNOWN, 3: Attr.CONTROL,
                 4: Attr.USER_DEFINED, 5: Attr.UNUSED, 6: Attr.BYTE}

# Tokens llama.cpp treats as end-of-generation by name (and forces to CONTROL).
EOG_NAMES = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[",
})
EOT_NAMES = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
             "<EOT>", "_<EOT>", "[EOT]", "<\uff5cend\u2581of\u2581sentence\uff5c>", "<end_of_utterance>")
# FIM pad / repo / file-separator tokens are end-of-generation too (when found by name).
_FIM_EOG_NAMES = (
    ("tokenizer.ggml.fim_pad_token_id", ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]")),
    ("tokenizer.ggml.fim_rep_token_id", ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>")),
    ("tokenizer.ggml.fim_sep_token_id", ("<|file_sep|>",)),
)
_FIM_OTHER_NAMES = (
    ("tokenizer.ggml.fim_pre_token_id", ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\uff5cfim\u2581begin\uff5c>",
                                          "<PRE>", "\u2581<PRE>", "<|code_prefix|>", "<|prefix|>")),
    ("tokenizer.ggml.fim_suf_token_id", ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\uff5cfim\u2581hole\uff5c>",
                                          "<SUF>", "\u2581<SUF>", "<|code_suffix|>", "<|suffix|>")),
    ("tokenizer.ggml.fim_mid_token_id", ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\uff5cfim\u2581end\uff5c>",
                                          "<MID>", "\u2581<MID>", "<|code_middle|>", "<|middle|>")),
)
SUPPORTED_MODELS = ("gpt2", "llama")


@dataclass(frozen=True, eq=False)
class Vocab:
    """Everything the tokenizer needs, as plain python, with llama.cpp's defaults applied."""

    model: str  # tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece BPE)
    pre: str  # tokenizer.ggml.pre ("default" when absent)
    tokens: list[str]
    attrs: list[Attr]
    scores: list[float] | None
    merges: list[str]
    bos_id: int | None
    eos_id: int | None
    eot_id: int | None
    unk_id: int | None
    pad_id: int | None
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    eog_ids: frozenset[int]
    chat_template: str | None

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    @classmethod
    def from_metadata(cls, get: Any, name: str = "<gguf>") -> Vocab:
        """Build from a metadata getter ``get(key, default)`` (GGUFFile.get)."""
        model = get("tokenizer.ggml.model")
        if model is None:
            raise TokenizerLoadError(f"{name}: no tokenizer.ggml.model key: the GGUF carries no tokenizer")
        if model not in SUPPORTED_MODELS:
            raise TokenizerLoadError(
                f"{name}: unsupported tokenizer.ggml.model {model!r} (supported: {', '.join(SUPPORTED_MODELS)})")
        tokens = get("tokenizer.ggml.tokens")
        if not tokens:
            raise TokenizerLoadError(f"{name}: tokenizer.ggml.tokens is missing or empty")
        tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]  # as llama.cpp does
        n = len(tokens)
        types = get("tokenizer.ggml.token_type")
        if types is not None and len(types) < n:
            raise TokenizerLoadError(f"{name}: token_type has {len(types)} entries for {n} tokens")
        attrs = [_TYPE_TO_ATTR.get(int(t), Attr.UNDEFINED) for t in types] if types is not None else [Attr.NORMAL] * n
        scores = get("tokenizer.ggml.scores")
        if scores is not None and len(scores) < n:
            raise TokenizerLoadError(f"{name}: scores has {len(scores)} entries for {n} tokens")
        merges = get("tokenizer.ggml.merges") or []
        if model == "gpt2" and not merges:
            raise TokenizerLoadError(f"{name}: gpt2 tokenizer without tokenizer.ggml.merges")
        if model == "llama" and scores is None:
            raise TokenizerLoadError(f"{name}: llama (SentencePiece) tokenizer without tokenizer.ggml.scores")

        spm = model == "llama"
        # llama_vocab::load defaults per model, then the GGUF keys override them.
        defaults = {"bos": 1, "eos": 2, "unk": 0} if spm else {"bos": 11, "eos": 11, "unk": None}
        ids = {}
        for key, dflt in (("bos", defaults["bos"]), ("eos", defaults["eos"]), ("unk", defaults["unk"]),
                          ("eot", None), ("eom", None), ("padding", None)):
            v = get(f"tokenizer.ggml.{key}_token_id")
            if dflt is not None and dflt >= n:
                dflt = None
            ids[key] = int(v) if v is not None and 0 <= int(v) < n else dflt
        pre = get("tokenizer.ggml.pre") or "default"
        add_bos = spm or pre_tokenizer_spec(pre).add_bos_default
        add_bos = bool(get("tokenizer.ggml.add_bos_token", add_bos))
        add_eos = bool(get("tokenizer.ggml.add_eos_token", False))
        add_space_prefix = bool(get("tokenizer.ggml.add_space_prefix", spm)) if spm else False

        text_to_id: dict[str, int] = {}
        for i, t in enumerate(tokens):
            text_to_id[t] = i
        eot = ids["eot"]
        if eot is None:
            eot = next((text_to_id[t] for t in EOT_NAMES if t in text_to_id), None)
        eog: set[int] = set()
        for key, names in _FIM_EOG_NAMES + _FIM_OTHER_NAMES:
            fid = get(key)
            if fid is None or not 0 <= int(fid) < n:
                fid = next((text_to_id[t] for t in names if t in text_to_id), None)
                if fid is not None:
                    attrs[fid] |= Attr.CONTROL
            if fid is not None and (key, names) in _FIM_EOG_NAMES:
                eog.add(int(fid))
        for t in EOG_NAMES:
            if t in text_to_id:
                eog.add(text_to_id[t])
                attrs[text_to_id[t]] |= Attr.CONTROL
        for t in ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"):
            if t in text_to_id:
                attrs[text_to_id[t]] = Attr.USER_DEFINED
        for extra in (ids["eos"], eot, ids["eom"]):
            if extra is not None:
                eog.add(extra)
        if "</s>" in text_to_id and any(tokens[i] in ("<|tool_response>", "<|plamo:eos|>") for i in eog):
            eog.discard(text_to_id["</s>"])
            attrs[text_to_id["</s>"]] = Attr.NORMAL
        _model_specific_strip(get, tokens, attrs, text_to_id)

        template = get("tokenizer.chat_template")
        return cls(
            model=model, pre=pre, tokens=tokens, attrs=attrs,
            scores=[float(s) for s in scores[:n]] if scores is not None else None,
            merges=list(merges), bos_id=ids["bos"], eos_id=ids["eos"], eot_id=eot, unk_id=ids["unk"],
            pad_id=ids["padding"], add_bos=add_bos, add_eos=add_eos, add_space_prefix=add_space_prefix,
            eog_ids=frozenset(eog), chat_template=template if isinstance(template, str) else None,
        )


def _model_specific_strip(get: Any, tokens: list[str], attrs: list[Attr], text_to_id: dict[str, int]) -> None:
    """llama.cpp sets lstrip/rstrip by model name (the GGUF has no per-token flags)."""
    pre = get("tokenizer.ggml.pre") or ""
    arch = get("general.architecture") or ""
    name = (get("general.name") or "").lower()
    if any(s in pre for s in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or arch in ("nomic-bert-moe", "jina-bert-v3"):
        if "<mask>" in text_to_id:
            attrs[text_to_id["<mask>"]] |= Attr.LSTRIP
    elif "phi-3" in name or "phi3" in name:
        for i, a in enumerate(attrs):
            if a & (Attr.CONTROL | Attr.USER_DEFINED | Attr.UNKNOWN):
                attrs[i] |= Attr.RSTRIP
        for t, on in (("</s>", True), ("<unk>", False), ("<s>", False), ("<|endoftext|>", False)):
            if t in text_to_id:
                attrs[text_to_id[t]] = attrs[text_to_id[t]] | Attr.RSTRIP if on else attrs[text_to_id[t]] & ~Attr.RSTRIP
    elif "modern-bert" in name and "[MASK]" in text_to_id:
        attrs[text_to_id["[MASK]"]] |= Attr.LSTRIP
