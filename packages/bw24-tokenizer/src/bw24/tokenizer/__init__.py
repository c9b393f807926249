"""bw24.tokenizer: llama.cpp-exact tokenization from GGUF metadata, chat templates, streaming detokenizer."""

from .chat import ChatTemplate
from .detok import IncrementalDetokenizer
from .errors import ChatTemplateError, TokenIdError, TokenizerError, TokenizerLoadError
from .tokenizer import Tokenizer
from .vocab import Vocab

__all__ = [
    "ChatTemplate",
    "IncrementalDetokenizer",
    "ChatTemplateError",
    "TokenIdError",
    "Tokenizer",
    "TokenizerError",
    "TokenizerLoadError",
    "Vocab",
]
