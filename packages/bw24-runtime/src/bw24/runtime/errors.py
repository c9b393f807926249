"""Typed errors of bw24.runtime (all subclass RuntimeError_ so callers can catch one base)."""

from __future__ import annotations


class RuntimeErrorBase(RuntimeError):
    """Base of every bw24.runtime error."""


class NoGPUError(RuntimeErrorBase):
    """No usable CUDA device (no driver, no GPU, or CuPy missing); the message says which."""


class KernelCompileError(RuntimeErrorBase):
    """NVRTC rejected a kernel source; the message carries the file, options, arch and compiler log."""


class KernelSourceError(RuntimeErrorBase):
    """A kernel file or one of its #include "..." files is missing."""


class ArenaError(RuntimeErrorBase):
    """Device arena misuse: a name allocated twice, a missing buffer, or a model that does not fit."""


class GraphError(RuntimeErrorBase):
    """CUDA graph capture failed or a graph was replayed before being captured."""
