"""Timing discipline shared by every bench: warm-up, CUDA events, median of repeats, sizing rules."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

GiB = 1 << 30


@dataclass(frozen=True)
class Timing:
    samples_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    @property
    def spread(self) -> float:
        """(max - min) / median: how noisy the repeats were."""
        m = self.median_ms
        return (max(self.samples_ms) - min(self.samples_ms)) / m if m > 0 else float("inf")


def gbs(nbytes: float, ms: float) -> float:
    """Bytes moved in `ms` milliseconds -> GB/s (1e9, as vendors and ARCHITECTURE.md count)."""
    if ms <= 0:
        raise ValueError(f"time must be > 0 ms, got {ms}")
    return nbytes / (ms * 1e-3) / 1e9


def tflops(flop: float, ms: float) -> float:
    if ms <= 0:
        raise ValueError(f"time must be > 0 ms, got {ms}")
    return flop / (ms * 1e-3) / 1e12


def stream_buffer_bytes(l2_bytes: int, free_bytes: int, *, want: int = 2 * GiB, l2_multiple: int = 8) -> int:
    """Size of a streaming buffer: at least `l2_multiple` x L2 (so the cache cannot serve it) and
    `want` bytes, at most 1/8 of free memory (copy needs two), rounded down to 1 MiB."""
    n = max(want, l2_multiple * l2_bytes)
    n = min(n, free_bytes // 8)
    n -= n % (1 << 20)
    if n < 2 * l2_bytes or n <= 0:
        raise MemoryError(f"only {free_bytes} bytes free: cannot size a buffer over 2x the {l2_bytes}-byte L2")
    return n


def time_events(launch: Callable[[], object], stream, *, warmup: int = 3, repeats: int = 15) -> Timing:
    """Median-ready samples of `launch()` timed with CUDA events on `stream` (one pair per repeat).
    `launch` runs with `stream` current, so RawKernel launches and cupy ops land on it."""
    import cupy

    cupy.cuda.runtime.deviceSynchronize()  # inputs made on other streams (random fills) are ready
    with stream:
        for _ in range(warmup):
            launch()
        stream.synchronize()
        pairs = []
        for _ in range(repeats):
            a, b = cupy.cuda.Event(), cupy.cuda.Event()
            a.record(stream)
            launch()
            b.record(stream)
            pairs.append((a, b))
    stream.synchronize()
    return Timing(tuple(cupy.cuda.get_elapsed_time(a, b) for a, b in pairs))


def random_u32(n: int):
    """n fresh random 32-bit words on the device (never zeros, never one repeated value)."""
    import cupy

    return cupy.random.randint(0, 2**31 - 1, size=n, dtype=cupy.int32).view(cupy.uint32)
