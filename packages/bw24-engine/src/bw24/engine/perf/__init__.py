"""Measuring machinery behind `bw24 bench` (ARCHITECTURE.md "Measuring"): the committed cells file
(cells.py), synthetic-model cache and per-cell timing (models.py, runner.py), bytes read per token
(traffic.py), the llama-bench competitor arm (llama.py), perf-CI rows and the rolling baseline
(jsonl.py, baseline.py), and the README table (table.py).

Nothing here imports bw24-probe, CuPy or llama.cpp at import time: they are optional and looked up
lazily where a figure needs them.
"""

from .errors import PerfError

__all__ = ["PerfError"]
