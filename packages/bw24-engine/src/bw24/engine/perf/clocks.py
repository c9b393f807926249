"""The GPU's clocks, power and clock-event reasons while a cell's arms run (the perf rows' clocks_load).

Why: the rows' `clocks` field (jsonl.read_clocks) is read once before the cells, with the GPU idle (345 MHz on the
H200), so it says nothing about the clocks a measurement ran at. A decode cell moves 2-3 TB/s for seconds; if the
GPU capped its clocks for power or heat there, the row should say so. ClockSampler runs `nvidia-smi -lms PERIOD`
beside the timed repetitions, stamps each line as it arrives, and summarizes the samples that fall inside each
arm's repetitions (bw24's and llama.cpp's apart: they alternate).
"""

from __future__ import annotations

import functools
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Sequence

PERIOD_MS = 50
_FIELDS = ("clocks.sm", "clocks.mem", "power.draw", "temperature.gpu")
# nvidia-smi's bits of the clock-event (throttle) reasons mask (nvidia-smi --help-query-gpu)
REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
           0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake", 0x100: "display_clock"}


@functools.cache
def reasons_field() -> str | None:
    """The reasons field this driver's nvidia-smi takes (renamed from clocks_throttle_reasons in newer drivers)."""
    try:
        text = subprocess.run(["nvidia-smi", "--help-query-gpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for f in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        if f in text:
            return f
    return None


def nvidia_smi_command(period_ms: int = PERIOD_MS, reasons: str | None = None) -> list[str]:
    fields = ",".join(_FIELDS + ((reasons,) if reasons else ()))
    return ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", f"--loop-ms={period_ms}", "-i", "0"]


def _num(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return None


def parse_line(line: str) -> dict | None:
    """'1980, 3201, 512.3, 45, 0x0000000000000004' -> {sm, mem, power, temp, reasons}; None for anything else
    (a header, an error message)."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) < len(_FIELDS) or _num(parts[0]) is None:
        return None
    sm, mem, power, temp = (_num(p) for p in parts[:4])
    reasons = None
    if len(parts) > 4:
        try:
            reasons = int(parts[4], 16)
        except ValueError:
            pass
    return {"sm": sm, "mem": mem, "power": power, "temp": temp, "reasons": reasons}


def summarize(samples: Sequence[dict]) -> dict | None:
    """The samples of one arm: medians and extremes; None without a sample."""
    if not samples:
        return None

    def vals(k):
        return [s[k] for s in samples if s[k] is not None]

    def med(k):
        v = vals(k)
        return round(statistics.median(v), 1) if v else None

    sm, power, temp = vals("sm"), vals("power"), vals("temp")
    names = sorted({n for s in samples if s["reasons"] for bit, n in REASONS.items() if s["reasons"] & bit})
    return {"samples": len(samples), "sm_mhz_median": med("sm"), "sm_mhz_min": min(sm) if sm else None,
            "mem_mhz_median": med("mem"), "power_w_median": med("power"), "power_w_max": max(power) if power else None,
            "temp_c_max": max(temp) if temp else None, "reasons": names}


class ClockSampler:
    """`with ClockSampler(cmd) as s:` runs cmd (nvidia-smi's sampling loop) in the background; wrap each arm's
    repetition with s.arm(name, fn); s.summaries() gives {arm: summarize(its samples)}, {} when sampling could not
    run (no nvidia-smi: the rows then carry no clocks_load rather than wrong ones)."""

    def __init__(self, cmd: list[str] | None) -> None:
        self.cmd = cmd
        self.samples: list[tuple[float, dict]] = []
        self.windows: list[tuple[str, float, float]] = []
        self.proc: subprocess.Popen | None = None
        self.thread: threading.Thread | None = None

    def __enter__(self) -> ClockSampler:
        if self.cmd:
            try:
                self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            except OSError:
                self.proc = None
        if self.proc is not None:
            self.thread = threading.Thread(target=self._read, daemon=True)
            self.thread.start()
            self._wait_first(2.0)  # nvidia-smi's start (~0.1-0.5 s) before the first repetition
        return self

    def _read(self) -> None:
        for line in self.proc.stdout:
            s = parse_line(line)
            if s is not None:
                self.samples.append((time.monotonic(), s))

    def _wait_first(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        while not self.samples and time.monotonic() < end and self.proc.poll() is None:
            time.sleep(0.01)

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.thread.join(timeout=5)

    def arm(self, name: str, fn: Callable) -> Callable:
        """fn, with the span of each call recorded as one of arm name's windows."""
        def run(*args):
            t0 = time.monotonic()
            try:
                return fn(*args)
            finally:
                self.windows.append((name, t0, time.monotonic()))
        return run

    def summaries(self) -> dict[str, dict]:
        out = {}
        for name in dict.fromkeys(w[0] for w in self.windows):
            spans = [(a, b) for n, a, b in self.windows if n == name]
            got = summarize([s for t, s in self.samples if any(a <= t <= b for a, b in spans)])
            if got is not None:
                out[name] = got
        return out


def sampler_for(backend: str, period_ms: int = PERIOD_MS) -> ClockSampler:
    """A sampler of the GPU for the cuda backend (nvidia-smi's loop every period_ms), an idle one otherwise or for
    period_ms 0."""
    on = backend == "cuda" and period_ms > 0
    return ClockSampler(nvidia_smi_command(period_ms, reasons_field()) if on else None)


def describe(summaries: dict[str, dict]) -> str:
    """One line under a cell's row: each arm's SM clock (median, min), memory clock, power (median, max), reasons."""
    parts = []
    for name, s in summaries.items():
        parts.append(f"{name} sm {s['sm_mhz_median']} (min {s['sm_mhz_min']}) mem {s['mem_mhz_median']} MHz, "
                     f"{s['power_w_median']} W (max {s['power_w_max']}), {s['temp_c_max']} C"
                     + (f", {'+'.join(s['reasons'])}" if s["reasons"] else "") + f" [{s['samples']} samples]")
    return "; ".join(parts)
