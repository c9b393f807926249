"""perf-CI rows: one JSON object per cell per run, appended to the committed benchmarks/perf.jsonl.

Row fields: time (ISO, UTC), git (short sha), dirty (uncommitted tracked changes), device, backend,
clocks (dict or null: read once before the cells, with the GPU idle), clocks_load (the cuda backend's clocks,
power and clock-event reasons sampled while each arm ran, perf/clocks.py; absent where nvidia-smi could not run),
cell and its fields, reps, decode_tok_s / prefill_tok_s (median), samples,
bytes_per_token, roofline_tok_s, roofline_pct, roofline_note, kernels_per_token, vram_peak_bytes,
acceptance, tokens_per_round, llama_tok_s, llama_samples, ratio, llama (build/GPU it reported).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path

from .runner import CellResult


def git_info(cwd: str | Path = ".") -> tuple[str, bool]:
    """(short sha, dirty). $BW24_GIT, when set, names the commit instead: on the GPU host the copied
    tree's .git can lag the working tree it runs (seen there: the session's first commit)."""
    if os.environ.get("BW24_GIT"):
        return os.environ["BW24_GIT"], False

    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=cwd, capture_output=True, text=True, timeout=30).stdout.strip()

    try:
        sha = git("rev-parse", "--short", "HEAD") or "unknown"
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.TimeoutExpired):
        return "unknown", False
    return sha, dirty


def device_name(backend: str) -> str:
    """The baseline key's device: the GPU name for cuda, the CPU model for the reference backend."""
    if backend == "cuda":
        from bw24.runtime import device_info

        d = device_info()
        return f"{d.name} sm_{d.arch}"
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"cpu {cpu}"


def read_clocks(backend: str) -> dict | None:
    """GPU SM/memory clocks now and max (nvidia-smi), or the CPU's current frequency; None if unreadable."""
    if backend == "cuda":
        q = "clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem"
        try:
            out = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits", "-i", "0"],
                                 capture_output=True, text=True, timeout=10).stdout.strip()
            vals = [int(float(v)) for v in out.split(",")]
            return dict(zip(("sm_mhz", "mem_mhz", "max_sm_mhz", "max_mem_mhz"), vals, strict=True))
        except (OSError, ValueError, subprocess.TimeoutExpired):
            return None
    try:
        khz = int(Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq").read_text())
        return {"cpu0_mhz": khz // 1000}
    except (OSError, ValueError):
        return None


def make_row(r: CellResult, *, env: dict, roofline_bps: float | None, roofline_note: str,
             llama: list[float] | None = None, llama_info: dict | None = None) -> dict:
    import statistics

    c = r.cell
    row = dict(env)
    row.update(cell=c.id, model=c.model, quant=c.quant, mode=c.mode, depth=c.depth, tokens=c.tokens,
               reps=len(r.samples), samples=[round(s, 3) for s in r.samples])
    row["decode_tok_s"] = r.median if c.mode != "prefill" else None
    row["prefill_tok_s"] = r.median if c.mode == "prefill" else None
    roof = roofline_bps / r.bytes_per_token if roofline_bps and r.bytes_per_token else None
    row.update(bytes_per_token=r.bytes_per_token, roofline_tok_s=roof,
               roofline_pct=100.0 * row["decode_tok_s"] / roof if roof and row["decode_tok_s"] else None,
               roofline_note=roofline_note, kernels_per_token=r.kernels_per_token,
               vram_peak_bytes=r.vram_peak_bytes, acceptance=r.acceptance, tokens_per_round=r.tokens_per_round,
               **r.extra)
    if llama:
        lm = float(statistics.median(llama))
        row.update(llama_tok_s=lm, llama_samples=[round(s, 3) for s in llama], ratio=r.median / lm if lm else None,
                   llama=llama_info or {})
    else:
        row.update(llama_tok_s=None, ratio=None)
    return row


def run_env(backend: str, repo: str | Path = ".") -> dict:
    sha, dirty = git_info(repo)
    return dict(time=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), git=sha, dirty=dirty,
                device=device_name(backend), backend=backend, clocks=read_clocks(backend))


def read_rows(path: str | Path) -> list[dict]:
    """All rows of a perf JSONL (missing file: none). A corrupt line is a typed error naming it."""
    from .errors import PerfError

    p = Path(path)
    if not p.is_file():
        return []
    rows = []
    for i, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise PerfError(f"{p}:{i}: not a JSON row ({e})") from None
    return rows


def append_rows(path: str | Path, rows: list[dict]) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("a") as fh:
        for r in rows:
            fh.write(json.dumps(r, sort_keys=True) + "\n")
