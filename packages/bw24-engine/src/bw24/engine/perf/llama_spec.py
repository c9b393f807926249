"""llama.cpp's speculative binaries as a comparison arm of benchmarks/spec_bench.py: the command lines
of `llama-speculative` (draft model pair) and `llama-lookup` (n-gram / prompt lookup), and the parser
of what they print at the end (examples/speculative/speculative.cpp and examples/lookup/lookup.cpp):

    LOG_INF("decoded %4d tokens in %8.3f seconds, speed: %8.3f t/s\\n", ...)
    LOG_INF("n_drafted = %d\\n" / "n_drafted    = %d\\n", ...); LOG_INF("n_accept ... = %d\\n", ...)
    LOG_INF("accept    = %.3f%%\\n" / "accept       = %.3f%%\\n", ...)

Flags as in the vendored llama.cpp (common/arg.cpp): -m, -md (draft), -p, -n, --spec-draft-n-max
(the old --draft-max was removed there), -ngl / -ngld, --temp, -c. Logs go to stderr.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import PerfError

_DECODED = re.compile(r"decoded\s+(\d+)\s+tokens in\s+([0-9.]+)\s+seconds, speed:\s+([0-9.]+)\s+t/s")
_INT = {k: re.compile(rf"^\s*{k}\s*=\s*(\d+)\s*$", re.M) for k in ("n_drafted", "n_accept", "n_predict")}
_ACCEPT = re.compile(r"^\s*accept\s*=\s*([0-9.]+)%\s*$", re.M)


@dataclass(frozen=True)
class LlamaSpecRun:
    tok_s: float  # decode speed as the binary prints it (prompt excluded)
    n_decoded: int
    seconds: float
    acceptance: float | None  # n_accept / n_drafted, None when not printed
    n_drafted: int | None = None
    n_accept: int | None = None


def parse_llama_spec(text: str) -> LlamaSpecRun:
    """The final statistics of llama-speculative / llama-lookup output; PerfError if absent."""
    ms = _DECODED.findall(text)
    if not ms:
        tail = "\n".join(text.strip().splitlines()[-5:])
        raise PerfError(f"no 'decoded N tokens in S seconds, speed: X t/s' line in the output; last lines:\n{tail}")
    n, s, v = ms[-1]
    ints = {k: (int(m[-1]) if (m := r.findall(text)) else None) for k, r in _INT.items()}
    acc = _ACCEPT.findall(text)
    a = float(acc[-1]) / 100.0 if acc else None
    return LlamaSpecRun(float(v), int(n), float(s), a, ints["n_drafted"], ints["n_accept"])


def speculative_cmd(bindir: Path, target: Path, draft: Path, prompt: str, n: int, k: int, n_ctx: int = 4096) -> list[str]:
    return [str(Path(bindir) / "llama-speculative"), "-m", str(target), "-md", str(draft), "-p", prompt,
            "-n", str(n), "--spec-draft-n-max", str(k), "-ngl", "99", "-ngld", "99", "--temp", "0",
            "-c", str(n_ctx)]


def lookup_cmd(bindir: Path, model: Path, prompt: str, n: int, k: int, n_ctx: int = 4096) -> list[str]:
    return [str(Path(bindir) / "llama-lookup"), "-m", str(model), "-p", prompt, "-n", str(n),
            "--spec-draft-n-max", str(k), "-ngl", "99", "--temp", "0", "-c", str(n_ctx)]


def run_llama_spec(cmd: list[str], timeout: float = 120.0) -> LlamaSpecRun:
    """Run one binary and parse its statistics (stdout + stderr)."""
    if not Path(cmd[0]).exists():
        raise PerfError(f"{cmd[0]}: no such binary (build llama.cpp's examples, or point --vs-llama-spec at them)")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    try:
        return parse_llama_spec(r.stdout + "\n" + r.stderr)
    except PerfError as e:
        raise PerfError(f"{Path(cmd[0]).name} exited {r.returncode}: {e}") from None
