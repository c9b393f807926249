"""Synthetic GGUF models: real architectures' shapes, random well-formed quantized weights, a real tokenizer."""

from .plan import TensorPlan, plan_tensors
from .presets import PRESETS, Preset
from .quantize.mix import MIXES
from .vocab import write_vocab_only
from .writer import SynthResult, synth

__all__ = ["MIXES", "PRESETS", "Preset", "SynthResult", "TensorPlan", "plan_tensors", "synth", "write_vocab_only"]
