"""Int8RefOps: the NumPy reference with the cuda backend's int8-activation policy.

A matmul whose weight the cuda backend runs on the q8 path (ops/cuda/launch.default_path: K >= 2048
or a vocabulary head, for the formats the q8 kernels implement) sees its input rounded exactly as
the quantize_x kernel rounds it (ops/cuda/q8.dequantize_x_ref), for prefill and decode alike. With
it the CPU measures what int8 activations do to a model's logits (benchmarks/emulate_q8_gate.py) and
tests the run-gen gate's int8 half (tests/test_engine_gate_q8.py). Inside exact_activations() it is
the plain reference.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager

import numpy as np

from .cuda.launch import default_path
from .cuda.q8 import dequantize_x_ref
from .ref import RefOps


def cuda_policy(w, k: int) -> bool:
    """Does the cuda backend decode this weight on int8 activations?"""
    return w.data.ndim == 2 and default_path(w.qtype.name, w.data.shape[0], k) == "q8"


class ExactSwitch:
    """`exact`, raised by exact_activations() for its block: a reference backend that rounds outside it
    (mixed in ahead of RefOps)."""

    exact = False

    @contextmanager
    def exact_activations(self):
        old, self.exact = self.exact, True
        try:
            yield
        finally:
            self.exact = old


class Int8RefOps(ExactSwitch, RefOps):
    name = "cpu-int8"
    quantizes_activations = True
    emulating = False  # inside emulate_rounding()

    def __init__(self, rounds: Callable[[object, int], bool] = cuda_policy, moe_q8: bool = False) -> None:
        super().__init__()
        self.rounds, self.rounded = rounds, 0
        # cuda's BW24_MOE_Q8: the experts' input x and their h (act(gate x) * up x) rounded too, as
        # moe_gu8 / moe_down8 read them (ops/cuda/q8.moe_q8_ref); the router reads x unrounded
        self.moe_q8 = moe_q8

    def round_x(self, x: np.ndarray) -> np.ndarray:
        """x as the q8 kernels see it (a subclass may plant a bug here: the gate's canary)."""
        return dequantize_x_ref(x).astype(np.float32)

    @contextmanager
    def emulate_rounding(self):
        """The gate's rounding alone: inside exact_activations, the same matmuls' inputs rounded by
        dequantize_x_ref itself (never round_x, where a canary's bug sits), as cuda's round_x_q8 does."""
        old, self.emulating = self.emulating, True
        try:
            yield ["int8-activation"]
        finally:
            self.emulating = old

    def _read(self, x: np.ndarray) -> np.ndarray:
        """x as a rounding matvec reads it: rounded by round_x outside exact_activations; inside, by the
        reference rounding (never a subclass's) where emulate_rounding is on, else exact."""
        if self.exact:
            return Int8RefOps.round_x(self, x) if self.emulating else x
        self.rounded += 1
        return self.round_x(x)

    def matmul(self, w, x, *, out, bias=None, residual=None):
        if x.shape[-1] % 32 == 0 and self.rounds(w, x.shape[-1]):
            x = self._read(x)
        super().matmul(w, x, out=out, bias=bias, residual=residual)

    def _expert_input(self, v):
        return self._read(v) if self.moe_q8 and v.shape[-1] % 32 == 0 else v


class DropLastGroupInDecode(Int8RefOps):
    """The int8 gate's canary: an int8 decode (T = 1) that never reads each matvec's last 32-column
    group, as an off-by-one group count in a q8 kernel would. The gate must call it MISMATCH."""

    def round_x(self, x: np.ndarray) -> np.ndarray:
        y = super().round_x(x)
        if y.shape[0] == 1:
            y[:, -32:] = 0
        return y
