"""Speculative decoding with the exactness contract (greedy output token-identical to plain decode;
sampled output distribution-exact and seed-reproducible): drafters (separate draft model, n-gram
lookup, MTP/NextN heads, FR-Spec trimmed heads), the verify step, rejection sampling and the loop."""

from .base import Draft, DraftVocabMismatchError, FRSpecRanksError, NoMTPHeadError
from .draft_model import DraftModelDrafter, check_same_vocab
from .mtp import MTPDrafter
from .ngram import NgramDrafter
from .options import DrafterOptions, add_drafter_args, check_drafter_options, make_drafter
from .runner import SpecDecoder, SpecStats, plain_decode
from .verify import VERIFY_MODES, AdaptiveK, Verifier

__all__ = [
    "VERIFY_MODES", "AdaptiveK", "Draft", "DraftModelDrafter", "DrafterOptions", "DraftVocabMismatchError",
    "FRSpecRanksError", "MTPDrafter", "NgramDrafter", "NoMTPHeadError", "SpecDecoder", "SpecStats", "Verifier", "add_drafter_args",
    "check_drafter_options", "check_same_vocab", "make_drafter", "plain_decode",
]
