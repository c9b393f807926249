"""The competitor arm: llama.cpp's llama-bench on the same GGUF, one repetition per call so it can
interleave with bw24's reps (A B A B). Flags (tools/llama-bench in llama.cpp):
  -m GGUF -p 0 -n TOKENS -d DEPTH   (decode cell: tgN @ dD)
  -m GGUF -p TOKENS -n 0 -d DEPTH   (prefill cell: ppN @ dD)
  -fa 1 -ngl 99 -r 1 -o json        (flash attention on, all layers on the GPU, 1 rep, JSON out)
llama-bench warms up once per process before its timed repetition (its default), so compile and
allocation are excluded on its side too. Its `-o json` is a list of tests with fields n_prompt,
n_gen, n_depth, avg_ts, samples_ts, build_commit, gpu_info, model_size, ...
"""

from __future__ import annotations

import json
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .cells import Cell
from .errors import LlamaBenchError

TIMEOUT_S = 1800


def llama_bench_args(binary: str | Path, gguf: str | Path, cell: Cell, reps: int = 1,
                     extra: tuple[str, ...] = ()) -> list[str]:
    if cell.mode == "spec":
        raise LlamaBenchError(f"cell {cell.id}: llama-bench has no speculative mode to compare with")
    n_prompt, n_gen = (0, cell.tokens) if cell.mode == "decode" else (cell.tokens, 0)
    return [str(binary), "-m", str(gguf), "-p", str(n_prompt), "-n", str(n_gen), "-d", str(cell.depth),
            "-fa", "1", "-ngl", "99", "-r", str(reps), "-o", "json", *extra]


def parse_llama_bench_json(text: str, cell: Cell) -> dict:
    """The test entry of `cell` in llama-bench's -o json output (LlamaBenchError if absent)."""
    start = text.find("[")
    try:
        tests = json.loads(text[start:] if start >= 0 else text)
    except json.JSONDecodeError as e:
        raise LlamaBenchError(f"llama-bench output is not JSON ({e}): {text[:200]!r}") from None
    if not isinstance(tests, list):
        raise LlamaBenchError(f"llama-bench JSON is a {type(tests).__name__}, expected a list of tests")
    n_prompt, n_gen = (0, cell.tokens) if cell.mode == "decode" else (cell.tokens, 0)
    for t in tests:
        if not isinstance(t, dict):
            continue
        if (t.get("n_prompt"), t.get("n_gen"), t.get("n_depth", 0)) == (n_prompt, n_gen, cell.depth):
            if not isinstance(t.get("avg_ts"), int | float):
                raise LlamaBenchError(f"llama-bench test for {cell.id} has no numeric avg_ts")
            return t
    raise LlamaBenchError(f"llama-bench output has no test with n_prompt={n_prompt} n_gen={n_gen} "
                          f"n_depth={cell.depth} (cell {cell.id})")


def device_used_bytes() -> int | None:
    """Device memory in use by every process (total - free), or None without cupy / a GPU."""
    try:
        import cupy

        free, total = cupy.cuda.runtime.memGetInfo()
        return int(total) - int(free)
    except Exception:  # noqa: BLE001 - no GPU: no VRAM figure
        return None


class VramSampler:
    """Peak device memory used above the level at entry, polled every `every` s on a thread while the
    block runs: llama-bench's peak VRAM, seen from our process (whose own use stays constant meanwhile)."""

    def __init__(self, every: float = 0.01) -> None:
        self.every, self.value, self._stop = every, None, threading.Event()

    def _poll(self, base: int) -> None:
        peak = 0
        while not self._stop.wait(self.every):
            u = device_used_bytes()
            peak = max(peak, (u or base) - base)
        self.value = peak

    def __enter__(self):
        base = device_used_bytes()
        self._t = threading.Thread(target=self._poll, args=(base,), daemon=True) if base is not None else None
        if self._t:
            self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._t:
            self._stop.set()
            self._t.join()


@dataclass
class LlamaBench:
    """Calls llama-bench once per rep(); keeps its samples and the build/GPU it reported."""

    binary: Path
    gguf: Path
    cell: Cell
    extra: tuple[str, ...] = ()
    info: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.binary = Path(self.binary)
        if not self.binary.is_file():
            raise LlamaBenchError(f"--vs-llama: {self.binary} is not a file (build llama-bench first)")

    def rep(self) -> float:
        return self.samples(1)[0]

    def samples(self, n: int) -> list[float]:
        """n timed repetitions in one llama-bench process (-r n): its per-rep tok/s (samples_ts).
        One process per block saves a model load per rep (seconds for a 32B GGUF)."""
        cmd = llama_bench_args(self.binary, self.gguf, self.cell, n, self.extra)
        peak = VramSampler()
        try:
            with peak:
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise LlamaBenchError(f"llama-bench could not run ({e})") from None
        if p.returncode != 0:
            raise LlamaBenchError(f"llama-bench exited {p.returncode}: {p.stderr.strip()[-400:]}")
        t = parse_llama_bench_json(p.stdout, self.cell)
        prev = self.info.get("vram_peak_bytes")
        self.info = {k: t.get(k) for k in ("build_commit", "build_number", "gpu_info", "backends", "model_size")}
        if peak.value is not None:  # the largest over this cell's llama-bench processes
            self.info["vram_peak_bytes"] = max(peak.value, prev or 0)
        if n == 1:
            return [float(t["avg_ts"])]
        ts = t.get("samples_ts")
        if not isinstance(ts, list) or len(ts) != n or not all(isinstance(v, int | float) for v in ts):
            raise LlamaBenchError(f"llama-bench test for {self.cell.id} has no {n} numeric samples_ts")
        return [float(v) for v in ts]
